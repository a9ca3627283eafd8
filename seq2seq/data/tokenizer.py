"""Tokenizers: SentencePiece trained once from the training split and stored in the run directory,
or Marian's (OPUS-MT) SentencePiece models whose pieces map to ids through a vocabulary file."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from seq2seq.config import TokenizerConfig
from seq2seq.errors import UserError

# The special ids of a vocabulary this project trains (TokenizerConfig's defaults).
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

TOKENIZER_DIR = "tokenizer"
# Marian's files, named as transformers' MarianTokenizer names them.
MARIAN_FILES = ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json")
MARIAN_TARGET_VOCAB = "target_vocab.json"
_LANGUAGE_CODE = re.compile(r">>.*?<<", re.DOTALL)  # at the start of a chunk, as HF


SMALL_BATCH = 64  # from this many texts on, SentencePiece's own threads pay (measured)
WORD_START = "▁"  # SentencePiece's mark of a piece that begins a word


def word_starts(pieces: list[str], specials: set[str]) -> list[int]:
    """The word index of each piece (-1 for special pieces such as EOS)."""
    out, word = [], -1
    for i, piece in enumerate(pieces):
        if piece in specials:
            out.append(-1)
            continue
        # A bare `▁` (before punctuation, say) starts the word its next piece completes.
        after_bare = i > 0 and pieces[i - 1] == WORD_START
        if word < 0 or (piece.startswith(WORD_START) and not after_bare):
            word += 1
        out.append(word)
    return out


def _batched(call, items: list, **kwargs) -> list:
    """`call` (a SentencePiece encode or decode) of each item: a short list one item at a
    time, because a list call starts a thread pool (0.1-0.3 ms each: placing terms makes
    hundreds of calls of a few texts), a long one in one call, whose threads then pay."""
    if len(items) >= SMALL_BATCH:
        return call(items, **kwargs)
    return [call(x, **kwargs) for x in items]


@dataclass(frozen=True)
class SpecialIds:
    """The ids a vocabulary reserves, handed to whatever builds or reads id sequences."""

    pad: int = PAD_ID
    bos: int | None = BOS_ID
    eos: int = EOS_ID
    unk: int = UNK_ID
    start: int = BOS_ID  # the decoder's first input: BOS here, PAD in Marian

    @classmethod
    def of(cls, cfg: TokenizerConfig) -> SpecialIds:
        """The ids a tokenizer config names."""
        return cls(cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id, cfg.start_id)

    @property
    def never_generated(self) -> tuple[int, ...]:
        """Ids search never outputs: padding, BOS and the start token (unless that is EOS)."""
        ids = {self.pad, self.start} - {self.eos}
        if self.bos is not None:
            ids.add(self.bos)
        return tuple(sorted(ids))


DEFAULT_IDS = SpecialIds()


class Tokenizer:
    """Source and target SentencePiece models whose ids are the model's ids (one shared model
    when the vocabulary is joint). Every tokenizer takes the languages of a direction; only a
    many-language model's (multilingual.LanguageTokenizer) ids depend on them."""

    def __init__(
        self,
        src: spm.SentencePieceProcessor,
        tgt: spm.SentencePieceProcessor,
        ids: SpecialIds = DEFAULT_IDS,
    ):
        self.src, self.tgt, self.ids = src, tgt, ids
        self.languages: dict[str, int] = {}  # language code -> token id (many-language models)
        self.atomic: dict[str, int] = {}  # strings read as one token wherever they stand

    @property
    def joint(self) -> bool:
        return self.src is self.tgt

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_piece_size()

    def check_languages(
        self, given: tuple[str | None, str | None], defaults: tuple[str, str]
    ) -> tuple[str, str]:
        """The (source, target) languages meant: those given, else the run's defaults; a model
        of one pair takes no other languages than its own (one UserError)."""
        for code, own, side in zip(given, defaults, ("source", "target")):
            if code and own and code != own:
                raise UserError(
                    f"{side} language {code!r}: this model translates {defaults[0]} → "
                    f"{defaults[1]} only"
                )
        return defaults

    def first_target_token(self, lang: str | None = None) -> int | None:
        """The token the decoder's first output is forced to for `lang` (None: nothing forced)."""
        return None

    def encode_src(
        self, texts: list[str], lang: str | None = None, tgt_lang: str | None = None
    ) -> list[list[int]]:
        """Source ids, each sentence ending with EOS."""
        return [ids + [self.ids.eos] for ids in _batched(self.src.encode, texts, out_type=int)]

    def encode_tgt(self, texts: list[str], lang: str | None = None) -> list[list[int]]:
        """Target ids without BOS/EOS (batching adds them to make decoder input and output)."""
        return _batched(self.tgt.encode, texts, out_type=int)

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        """Text from target ids, stopping at EOS and skipping padding."""
        return _batched(self.tgt.decode, [self._strip_special(seq) for seq in ids])

    def _strip_special(self, ids: list[int]) -> list[int]:
        skip = {self.ids.pad, self.ids.eos, self.ids.start, self.ids.bos}
        out = []
        for i in ids:
            if i == self.ids.eos:
                break
            if i not in skip:
                out.append(i)
        return out

    def src_pieces(self, ids: list[int]) -> list[str]:
        """The source piece of each id."""
        return [self.src.id_to_piece(i) for i in ids]

    def tgt_pieces(self, ids: list[int]) -> list[str]:
        """The target piece of each id."""
        return [self.tgt.id_to_piece(i) for i in ids]

    def src_vocabulary(self) -> list[str]:
        """Every source piece, in id order."""
        return self.src_pieces(list(range(self.src_vocab_size)))

    def tgt_vocabulary(self) -> list[str]:
        """Every target piece, in id order."""
        return self.tgt_pieces(list(range(self.tgt_vocab_size)))


class VocabTokenizer(Tokenizer):
    """SentencePiece cuts the text and a vocabulary of its own gives the pieces their ids
    (Marian, M2M100, NLLB): pieces by id come from that vocabulary, text is cut at the `whole`
    strings before SentencePiece sees it, and decoding drops the `skip` ids, joins the pieces
    with the target model and turns any `▁` left into a space."""

    def __init__(
        self,
        src: spm.SentencePieceProcessor,
        tgt: spm.SentencePieceProcessor,
        ids: SpecialIds,
        *,
        by_id: tuple[list[str], list[str]],  # (source, target) piece of each id; one list: joint
        skip: set[int],
        whole: list[str],
    ):
        super().__init__(src, tgt, ids)
        self._src_by_id, self._tgt_by_id = by_id
        self._skip = skip
        cut = sorted(whole, key=len, reverse=True)  # the longest string first
        self._split = re.compile("(" + "|".join(map(re.escape, cut)) + ")") if cut else None

    @property
    def joint(self) -> bool:
        return self._tgt_by_id is self._src_by_id

    @property
    def src_vocab_size(self) -> int:
        return len(self._src_by_id)

    @property
    def tgt_vocab_size(self) -> int:
        return len(self._tgt_by_id)

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        """Text from target ids, stopping at EOS and skipping special (and unknown) ids."""
        out, size = [], len(self._tgt_by_id)
        for seq in ids:
            pieces = []
            for i in seq:
                if i == self.ids.eos:
                    break
                if i not in self._skip and 0 <= i < size:
                    pieces.append(self._tgt_by_id[i])
            out.append(self.tgt.decode_pieces(pieces).replace("▁", " ").strip())
        return out

    def src_pieces(self, ids: list[int]) -> list[str]:
        """The source piece of each id."""
        return [self._src_by_id[i] for i in ids]

    def tgt_pieces(self, ids: list[int]) -> list[str]:
        """The target piece of each id."""
        return [self._tgt_by_id[i] for i in ids]


class MarianTokenizer(VocabTokenizer):
    """Marian's (OPUS-MT) tokenizer: pieces from `source.spm` / `target.spm`, ids from
    `vocab.json` (and `target_vocab.json` when the vocabularies are separate).

    It does what transformers' MarianTokenizer does: text is cut at special-token strings
    (`</s>`, `<unk>`, `<pad>`, …), which become their ids; each other chunk loses a leading
    language code (`>>fr<<`, one token of its own) and is encoded into pieces by the side's
    SentencePiece model; a piece the vocabulary lacks becomes `unk`.
    """

    def __init__(
        self,
        src: spm.SentencePieceProcessor,
        tgt: spm.SentencePieceProcessor,
        src_vocab: dict[str, int],
        tgt_vocab: dict[str, int],
        *,
        ids: SpecialIds,
        special_tokens: list[str],
        plain_added_tokens: list[str] = (),
    ):
        src_by_id = _by_id(src_vocab)
        tgt_by_id = src_by_id if tgt_vocab is src_vocab else _by_id(tgt_vocab)
        skip = {tgt_vocab[t] for t in special_tokens if t in tgt_vocab} | {ids.start}
        whole = list({*special_tokens, *plain_added_tokens})
        super().__init__(src, tgt, ids, by_id=(src_by_id, tgt_by_id), skip=skip, whole=whole)
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab

    def encode_src(
        self, texts: list[str], lang: str | None = None, tgt_lang: str | None = None
    ) -> list[list[int]]:
        """Source ids, each sentence ending with EOS."""
        return [self._encode(t, self.src, self.src_vocab) + [self.ids.eos] for t in texts]

    def encode_tgt(self, texts: list[str], lang: str | None = None) -> list[list[int]]:
        """Target ids without BOS/EOS (batching adds them to make decoder input and output)."""
        return [self._encode(t, self.tgt, self.tgt_vocab) for t in texts]

    def _encode(self, text: str, sp: spm.SentencePieceProcessor, vocab: dict[str, int]):
        chunks = self._split.split(text) if self._split else [text]
        pieces: list[str] = []
        for i, chunk in enumerate(chunks):
            if i % 2:  # a special-token string, kept whole
                pieces.append(chunk)
            elif chunk:
                code = _LANGUAGE_CODE.match(chunk)
                if code:
                    pieces.append(code.group())
                    chunk = chunk[code.end() :]
                pieces += sp.encode(chunk, out_type=str)
        unk = self.ids.unk
        return [vocab.get(p, unk) for p in pieces]


def _by_id(vocab: dict[str, int]) -> list[str]:
    by_id = [""] * len(vocab)
    for piece, i in vocab.items():
        by_id[i] = piece
    return by_id


def model_paths(run_dir: Path, joint: bool) -> tuple[Path, Path]:
    """Paths of the source and target SentencePiece models inside a run directory."""
    folder = Path(run_dir) / TOKENIZER_DIR
    if joint:
        return folder / "spm.model", folder / "spm.model"
    return folder / "src.model", folder / "tgt.model"


def load_tokenizer(run_dir: Path, joint: bool, ids: SpecialIds = DEFAULT_IDS) -> Tokenizer:
    """Load the SentencePiece tokenizer stored in a run directory."""
    src_path, tgt_path = model_paths(run_dir, joint)
    for p in {src_path, tgt_path}:
        if not p.is_file():
            raise UserError(f"tokenizer model missing from the run directory: {p}")
    src = _load(src_path, ids)
    return Tokenizer(src, src if joint else _load(tgt_path, ids), ids)


def open_spm(path: Path) -> spm.SentencePieceProcessor:
    """A SentencePiece model, or one clear error."""
    sp = spm.SentencePieceProcessor()
    try:
        sp.load(str(path))
    except (OSError, RuntimeError) as e:
        raise UserError(f"cannot load tokenizer model {path}: {e}") from None
    return sp


def _load(path: Path, ids: SpecialIds) -> spm.SentencePieceProcessor:
    sp = open_spm(path)
    bos = -1 if ids.bos is None else ids.bos
    if (sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.unk_id()) != (ids.pad, bos, ids.eos, ids.unk):
        raise UserError(
            f"{path}: special token ids differ from pad={ids.pad} bos={ids.bos} eos={ids.eos} "
            f"unk={ids.unk}"
        )
    return sp


def read_json(path: Path) -> dict:
    """A JSON object from a file, or one clear error."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def marian_special_tokens(
    tokenizer_config: dict,
) -> tuple[dict[str, str], list[str], list[str]]:
    """From a MarianTokenizer's `tokenizer_config.json` (transformers' defaults where it is
    silent): the special-token strings by role (eos, unk, pad), the other special tokens, and
    the other added tokens that are not special (text is cut at both kinds)."""

    def content(token) -> str | None:
        return token.get("content") if isinstance(token, dict) else token

    roles = {"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}
    for role in roles:
        given = content(tokenizer_config.get(f"{role}_token"))
        if given:
            roles[role] = given
    special = [content(t) for t in tokenizer_config.get("additional_special_tokens") or []]
    plain = []
    for token in (tokenizer_config.get("added_tokens_decoder") or {}).values():
        if isinstance(token, dict) and token.get("content"):
            (special if token.get("special", True) else plain).append(token["content"])
    named = set(roles.values())
    special = [t for t in dict.fromkeys(special) if t and t not in named]
    return roles, special, [t for t in dict.fromkeys(plain) if t not in named]


def marian_vocab(path: Path) -> dict[str, int]:
    """A Marian `vocab.json`: piece → id, ids covering 0…N-1 exactly once."""
    vocab = read_json(path)
    ids = sorted(vocab.values()) if all(isinstance(i, int) for i in vocab.values()) else None
    if ids != list(range(len(vocab))):
        raise UserError(f"{path}: ids must be the integers 0…{len(vocab) - 1}, each once")
    return vocab


def load_marian_tokenizer(folder: Path, ids: SpecialIds, joint: bool = True) -> MarianTokenizer:
    """Marian's tokenizer from a folder holding its files (MARIAN_FILES)."""
    folder = Path(folder)
    src_vocab = marian_vocab(folder / "vocab.json")
    tgt_vocab = src_vocab if joint else marian_vocab(folder / MARIAN_TARGET_VOCAB)
    roles, special, plain = marian_special_tokens(read_json(folder / "tokenizer_config.json"))
    for role, token in roles.items():
        expected = getattr(ids, role)
        for name, vocab in (("vocab.json", src_vocab), (MARIAN_TARGET_VOCAB, tgt_vocab)):
            if vocab.get(token) != expected:
                raise UserError(
                    f"{folder / name}: {token} has id {vocab.get(token)}, the config says "
                    f"{role}_id {expected}"
                )
    src = open_spm(folder / "source.spm")
    tgt = open_spm(folder / "target.spm")
    specials = [*roles.values(), *special]
    return MarianTokenizer(
        src, tgt, src_vocab, tgt_vocab, ids=ids, special_tokens=specials, plain_added_tokens=plain
    )


def train_tokenizer(
    cfg: TokenizerConfig,
    src_texts: Iterable[str],
    tgt_texts: Iterable[str],
    run_dir: Path,
    *,
    threads: int = 1,
    symbols: tuple[str, ...] = (),
) -> Tokenizer:
    """Train SentencePiece on the training texts, save it in the run directory and load it
    (plain: a run with language tags opens it through layouts.load_run_tokenizer); `symbols`
    are kept as single pieces (after the language tags, whose ids stay as the config says)."""
    if cfg.layout != "sentencepiece":
        raise UserError(
            f"a tokenizer with layout {cfg.layout!r} is not trained here: import the model "
            "(seq2seq import) and fine-tune it with train --init-from"
        )
    src_path, tgt_path = model_paths(run_dir, cfg.joint)
    src_path.parent.mkdir(parents=True, exist_ok=True)
    if cfg.joint:
        _train(cfg, _chain(src_texts, tgt_texts), src_path, threads, symbols)
    else:
        _train(cfg, iter(src_texts), src_path, threads, symbols)
        _train(cfg, iter(tgt_texts), tgt_path, threads, symbols)
    return load_tokenizer(run_dir, cfg.joint, SpecialIds.of(cfg))


def _chain(a: Iterable[str], b: Iterable[str]) -> Iterator[str]:
    yield from a
    yield from b


def _train(
    cfg: TokenizerConfig, texts: Iterator[str], out: Path, threads: int, symbols: tuple[str, ...]
) -> None:
    # Train into a temporary prefix and move into place, so a crash never leaves half a model.
    langs = cfg.languages
    with tempfile.TemporaryDirectory(prefix=".spm-train-", dir=out.parent) as tmp:
        prefix = os.path.join(tmp, "spm")
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=(t for t in texts if t),
                model_prefix=prefix,
                model_type=cfg.type,
                vocab_size=cfg.vocab_size,
                character_coverage=cfg.character_coverage,
                input_sentence_size=cfg.max_sentences,
                shuffle_input_sentence=True,
                # A small corpus may not support the requested size; take what it supports.
                hard_vocab_limit=False,
                pad_id=cfg.pad_id,
                bos_id=-1 if cfg.bos_id is None else cfg.bos_id,
                eos_id=cfg.eos_id,
                unk_id=cfg.unk_id,
                num_threads=threads,
                minloglevel=2,
                # Language tags (data.pairs) are single pieces, with the ids the config gave.
                user_defined_symbols=[f">>{c}<<" for c in sorted(langs, key=langs.get)]
                + list(symbols),
            )
        except RuntimeError as e:
            raise UserError(f"SentencePiece training failed: {e}") from None
        os.replace(prefix + ".model", out)
        os.replace(prefix + ".vocab", out.with_suffix(".vocab"))
