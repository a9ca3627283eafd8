"""Tokenizers of many-language models (M2M100, NLLB): language tokens and fairseq's ids.

Both families cut text with one SentencePiece model (`sentencepiece.bpe.model`) and give the
pieces fairseq dictionary ids, which are not the SentencePiece model's own:

- M2M100 maps pieces through `vocab.json` (like Marian), and appends one token per language
  (`__fr__`) after the vocabulary, in the order of its language list;
- NLLB uses fairseq's offset: `<s> <pad> </s> <unk>` are 0–3 and piece i of the SentencePiece
  model is i + 1 (its `<unk>`, 0, becomes 3); language tokens (`fra_Latn`) come after, with ids
  that `tokenizer.json` records.

Language tokens are atomic: text is cut at them (and at the special-token strings) before the
SentencePiece model sees it. A source sentence is `[src_lang] pieces </s>` (NLLB's legacy
behaviour: `pieces </s> [src_lang]`); a target starts from `</s>` with its first output forced to
the target language token, so target ids for training are `[tgt_lang] pieces` (batching adds the
start and `</s>`).
"""

from __future__ import annotations

from pathlib import Path

import sentencepiece as spm

from seq2seq.config import TokenizerConfig
from seq2seq.data.tokenizer import TOKENIZER_DIR, SpecialIds, VocabTokenizer, open_spm, read_json
from seq2seq.errors import UserError

SPM_FILE = "sentencepiece.bpe.model"
VOCAB_FILE = "vocab.json"
# transformers' M2M100Tokenizer language lists (`language_codes` in tokenizer_config.json).
M2M100_LANGUAGES = {
    "m2m100": (
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd "
        "gl gu ha he hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk "
        "ml mn mr ms my ne nl no ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw ta "
        "th tl tn tr uk ur uz vi wo xh yi yo zh zu"
    ).split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}
SPECIAL_STRINGS = {"bos": "<s>", "pad": "<pad>", "eos": "</s>", "unk": "<unk>"}
NLLB_OFFSET = 1  # fairseq's: the dictionary puts <s> <pad> </s> <unk> before the pieces


def language_token(layout: str, code: str) -> str:
    """The token string of a language: `__fr__` in M2M100, the code itself (`fra_Latn`) in NLLB,
    `>>fr<<` (OPUS-MT's tag) in a model trained here for several pairs."""
    if layout == "sentencepiece":
        return f">>{code}<<"
    return f"__{code}__" if layout == "m2m100" else code


def unknown_language(code: str | None, known: dict[str, int], what: str = "language") -> UserError:
    """The one error for a language the model lacks (or none given): it names the known ones."""
    names = ", ".join(sorted(known))
    if not code:
        return UserError(f"this model needs a {what} (one of: {names})")
    return UserError(f"{what} {code!r} is not one of the model's languages: {names}")


class LanguageTokenizer(VocabTokenizer):
    """One SentencePiece model, fairseq dictionary ids, atomic language tokens and the source
    and target language rules of M2M100/NLLB (see the module docstring)."""

    def __init__(
        self,
        sp: spm.SentencePieceProcessor,
        vocab: dict[str, int],
        *,
        cfg: TokenizerConfig,
        src_lang: str = "",
        tgt_lang: str = "",
    ):
        ids = SpecialIds.of(cfg)
        atomic = {SPECIAL_STRINGS[r]: getattr(ids, r) for r in SPECIAL_STRINGS}
        atomic = {k: v for k, v in atomic.items() if v is not None}
        atomic |= {language_token(cfg.layout, c): i for c, i in cfg.languages.items()}
        by_id = [f"<unused{i}>" for i in range(cfg.vocab_size)]
        for piece, i in {**vocab, **atomic}.items():
            if i < len(by_id):
                by_id[i] = piece
        skip = set(atomic.values()) | {ids.start}
        super().__init__(sp, sp, ids, by_id=(by_id, by_id), skip=skip, whole=list(atomic))
        self.cfg, self.vocab = cfg, vocab
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.languages, self.atomic = dict(cfg.languages), atomic

    def language_id(self, code: str | None, what: str = "language") -> int:
        """The id of a language's token, or one clear error naming the known languages."""
        if code in self.languages:
            return self.languages[code]
        raise unknown_language(code, self.languages, what)

    def check_languages(
        self, given: tuple[str | None, str | None], defaults: tuple[str, str]
    ) -> tuple[str, str]:
        """The (source, target) languages meant: those given, else the run's defaults. A language
        the model lacks, or one it needs and nobody gave, is one UserError naming the known ones."""
        if not self.languages:
            return super().check_languages(given, defaults)
        src, tgt = (g or d for g, d in zip(given, defaults))
        if self.cfg.source_language != "none":
            self.language_id(src, "source language")
        self.language_id(tgt, "target language")
        return src, tgt

    def encode_src(
        self, texts: list[str], lang: str | None = None, tgt_lang: str | None = None
    ) -> list[list[int]]:
        """Source ids with the source language token where the model wants it, and EOS; led by
        the target language's tag when that is how the model is told (`source_tag`)."""
        eos, where = self.ids.eos, self.cfg.source_language
        tag = (
            None if where == "none" else self.language_id(lang or self.src_lang, "source language")
        )
        lead = []
        if self.cfg.target_language == "source_tag":
            lead = [self.language_id(tgt_lang or self.tgt_lang, "target language")]
        out = []
        for text in texts:
            ids = lead + self._encode(text)
            if where == "prefix":
                out.append([tag, *ids, eos])
            elif where == "suffix":
                out.append([*ids, eos, tag])
            else:
                out.append([*ids, eos])
        return out

    def encode_tgt(self, texts: list[str], lang: str | None = None) -> list[list[int]]:
        """Target ids without start/EOS, led by the target language token when it is forced."""
        lead = []
        if self.cfg.target_language == "forced_first":
            lead = [self.language_id(lang or self.tgt_lang, "target language")]
        return [lead + self._encode(t) for t in texts]

    def first_target_token(self, lang: str | None = None) -> int | None:
        """The token the decoder's first output is forced to (None: nothing forced)."""
        if self.cfg.target_language != "forced_first" or not self.languages:
            return None
        return self.language_id(lang or self.tgt_lang, "target language")

    def _encode(self, text: str) -> list[int]:
        unk, out = self.ids.unk, []
        for i, chunk in enumerate(self._split.split(text)):
            if i % 2:  # a language or special-token string, one token
                out.append(self.atomic[chunk])
            elif chunk:
                out += [self.vocab.get(p, unk) for p in self.src.encode(chunk, out_type=str)]
        return out


def load_processor(path: Path) -> spm.SentencePieceProcessor:
    """A SentencePiece model that must be there, or one clear error."""
    if not path.is_file():
        raise UserError(f"tokenizer file missing: {path}")
    return open_spm(path)


def piece_ids(
    sp: spm.SentencePieceProcessor, offset: int = 0, leave_out: frozenset[int] = frozenset()
) -> dict[str, int]:
    """Piece → id (SentencePiece id + `offset`), leaving out control, unknown and `leave_out`."""
    return {
        sp.id_to_piece(i): i + offset
        for i in range(sp.get_piece_size())
        if not (sp.is_control(i) or sp.is_unknown(i) or i in leave_out)
    }


def nllb_vocab(sp: spm.SentencePieceProcessor) -> dict[str, int]:
    """Piece → fairseq id: SentencePiece id + 1, its control and unknown pieces left out."""
    return piece_ids(sp, NLLB_OFFSET)


def m2m100_vocab(path: Path) -> dict[str, int]:
    """M2M100's `vocab.json`: piece → id."""
    vocab = read_json(path)
    if not all(isinstance(i, int) and i >= 0 for i in vocab.values()):
        raise UserError(f"{path}: ids must be non-negative integers")
    return vocab


def tokenizer_files(run_dir: Path, cfg: TokenizerConfig) -> list[Path]:
    """The files a run's M2M100/NLLB tokenizer is made of."""
    folder = Path(run_dir) / TOKENIZER_DIR
    return [folder / SPM_FILE, *([folder / VOCAB_FILE] if cfg.layout == "m2m100" else [])]


def load_language_tokenizer(folder: Path, cfg: TokenizerConfig) -> LanguageTokenizer:
    """The tokenizer of a folder holding `sentencepiece.bpe.model` (and M2M100's vocab.json)."""
    folder = Path(folder)
    sp = load_processor(folder / SPM_FILE)
    vocab = m2m100_vocab(folder / VOCAB_FILE) if cfg.layout == "m2m100" else nllb_vocab(sp)
    for role, token in SPECIAL_STRINGS.items():
        expected = getattr(cfg, f"{role}_id")
        if cfg.layout == "m2m100" and expected is not None and vocab.get(token) != expected:
            raise UserError(
                f"{folder / VOCAB_FILE}: {token} has id {vocab.get(token)}, the config says "
                f"{role}_id {expected}"
            )
        vocab.pop(token, None)  # atomic: never a SentencePiece piece
    top = max([*vocab.values(), *cfg.languages.values()], default=0)
    if top >= cfg.vocab_size:
        raise UserError(f"{folder}: id {top} is beyond the model's {cfg.vocab_size} embeddings")
    return LanguageTokenizer(sp, vocab, cfg=cfg)


def tagged_tokenizer(sp: spm.SentencePieceProcessor, cfg: TokenizerConfig) -> LanguageTokenizer:
    """A SentencePiece model trained here for several pairs, its language tags atomic."""
    for code, i in cfg.languages.items():
        if i >= sp.get_piece_size() or sp.id_to_piece(i) != language_token(cfg.layout, code):
            raise UserError(
                f"the tokenizer's piece {i} is not the tag of {code!r}: the run's tokenizer was "
                "trained for other data.pairs; train it again"
            )
    vocab = piece_ids(sp, leave_out=frozenset(cfg.languages.values()))
    cfg = cfg.model_copy(update={"vocab_size": sp.get_piece_size()})
    return LanguageTokenizer(sp, vocab, cfg=cfg)
