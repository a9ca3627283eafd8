"""Typed configuration: YAML validated into pydantic models, `--set a.b=c` overrides."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    model_validator,
)

from seq2seq.errors import ConfigError, UserError
from seq2seq.files import atomic_write_text

PositiveInt = Annotated[int, Field(gt=0)]
TokenId = Annotated[int, Field(ge=0)]
Probability = Annotated[float, Field(ge=0.0, lt=1.0)]

CONFIG_NAME = "config.yaml"


class _Strict(BaseModel):
    # Unknown keys are errors: a typo in a config must not silently train the wrong model.
    model_config = ConfigDict(extra="forbid")


class CorpusConfig(_Strict):
    """One split of a parallel corpus: hub dataset, line-aligned files, TSV or JSON lines."""

    hub: str | None = Field(None, description="Hugging Face hub dataset name, e.g. `wmt14`.")
    hub_config: str | None = Field(None, description="Hub dataset configuration, e.g. `fr-en`.")
    split: str | None = Field(None, description="Hub split: `train`, `validation`, `test`.")
    src: Path | None = Field(None, description="Source-language text file, one sentence a line.")
    tgt: Path | None = Field(None, description="Target-language text file, line-aligned with src.")
    tsv: Path | None = Field(None, description="Tab-separated file: `source<TAB>target` a line.")
    jsonl: Path | None = Field(
        None,
        description='JSON-lines file: `{"translation": {"en": …, "fr": …}}` or '
        '`{"en": …, "fr": …}` a line.',
    )
    skip_pairs: Annotated[int, Field(ge=0)] = Field(
        0,
        description="Leave out the first N pairs (with `max_pairs`, one file can hold two "
        "splits: a part to choose checkpoints on, a part to report on).",
    )
    max_pairs: PositiveInt | None = Field(
        None, description="Keep only the first N pairs (after `skip_pairs`)."
    )
    alignments: Path | None = Field(
        None,
        description="Word alignments of src/tgt, line-aligned with them: Pharaoh `i-j` pairs "
        "(source word i, target word j, whitespace words from 0), as fast_align or eflomal "
        "write them; what `train.alignment` trains its head on.",
    )

    @model_validator(mode="after")
    def _exactly_one_source(self) -> CorpusConfig:
        given = [k for k in ("hub", "tsv", "jsonl") if getattr(self, k) is not None]
        if self.src is not None or self.tgt is not None:
            if self.src is None or self.tgt is None:
                raise ValueError("`src` and `tgt` must be given together")
            given.append("src/tgt")
        if len(given) != 1:
            raise ValueError(
                "give exactly one corpus source: `hub`, `src` + `tgt`, `tsv` or `jsonl`"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.hub is None and (self.hub_config or self.split):
            raise ValueError("`hub_config` and `split` only apply to a `hub` corpus")
        if self.alignments is not None and self.src is None:
            raise ValueError("`alignments` go with `src` + `tgt` files")
        return self

    def files(self) -> dict[str, Path]:
        """The local files this corpus reads, by key."""
        keys = ("src", "tgt", "alignments", "tsv", "jsonl")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}

    def describe(self) -> str:
        """A short human description: the hub name or the file names."""
        if self.hub:
            parts = [self.hub, self.hub_config, self.split]
            return "hub:" + "/".join(p for p in parts if p)
        return " + ".join(str(p) for p in self.files().values())


Share = Annotated[float, Field(ge=0.0, le=1.0)]  # a probability, both ends allowed


class TrainPartConfig(CorpusConfig):
    """One part of a training set given as weighted parts: a corpus, its weight and its tag."""

    name: str | None = Field(
        None, description="What stages and logs call the part; default `part1`, `part2`, …"
    )
    weight: Annotated[float, Field(ge=0.0)] = Field(
        1.0,
        description="How often the part is drawn: a batch comes from part i with probability "
        "weight_i / Σ weights (per epoch, as many batches as all parts hold).",
    )
    tag: Literal["bt"] | None = Field(
        None,
        description="`bt`: back-translated; every source starts with the `<BT>` token (one "
        "piece of the tokenizer), so the model can tell it from genuine text (tagged BT).",
    )


class AugmentConfig(_Strict):
    """On-the-fly augmentation (OpusTrainer's modifiers): each key the share of training pairs it
    changes, drawn anew for every batch; all 0 (the default) is off."""

    uppercase: Share = Field(0.0, description="Both sides in upper case (OpusTrainer: 0.07).")
    titlecase: Share = Field(
        0.0, description="Both sides in title case, where upper case was not drawn (0.05)."
    )
    typos: Share = Field(
        0.0,
        description="Typos in a few source words: a swap, deletion, insertion or repeat of "
        "characters (0.05).",
    )
    remove_end_punct: Share = Field(
        0.0, description="Final punctuation removed from both sides when both end with it (0.2)."
    )
    noise: Share = Field(
        0.0,
        description="The pair replaced by one random-unicode string on both sides, teaching "
        "the model to copy what it cannot read (0.0005).",
    )
    tags: Share = Field(
        0.0,
        description="Inline tags (`<b>…</b>`) around an aligned word pair, placed by the "
        "corpus's word alignments; without them around both whole sentences (0.005).",
    )
    terms: Share = Field(
        0.0,
        description="Terminology (Dinu et al. 2019): dictionary terms found on both sides of "
        "a pair annotated in its source, `word <t> mot </t>`, each with probability 0.5 (at "
        "least one), so the model learns to place terms annotated so at inference (0.3).",
    )
    term_dictionary: Path | None = Field(
        None,
        description="The terms' `source<TAB>target` file; unset, a dictionary built from the "
        "training corpus by word co-occurrence (saved as term_dictionary.tsv in run_dir).",
    )

    def active(self) -> bool:
        """Whether any modifier is on."""
        return any(v > 0 for k, v in self.model_dump().items() if k != "term_dictionary")


# data.train: one corpus, or a list of parts; told apart by shape, so that an error is about
# the one that was meant, not both. `_format_errors` leaves the <tags> out of where it was.
TrainData = Annotated[
    Annotated[CorpusConfig, Tag("<corpus>")] | Annotated[list[TrainPartConfig], Tag("<parts>")],
    Discriminator(lambda v: "<parts>" if isinstance(v, list) else "<corpus>"),
]


class PairConfig(_Strict):
    """One direction of a model trained for several (`data.pairs`): its languages and corpora."""

    src_lang: str = Field(description="Source language code of this direction.")
    tgt_lang: str = Field(description="Target language code of this direction.")
    train: CorpusConfig = Field(description="Training corpus of this direction.")
    valid: CorpusConfig | None = Field(None, description="Validation corpus of this direction.")


CLEAN_FILTERS = (
    "whitespace",
    "empty",
    "length",
    "alpha_ratio",
    "token_ratio",
    "numbers",
    "urls",
    "copy",
    "langid",
    "dual_xent",
    "dedup",
    "dedup_target",
)
Share = Annotated[float, Field(ge=0.0, le=1.0)]


class CleanConfig(_Strict):
    """Rule filters for a noisy corpus (OpusCleaner's defaults) that `seq2seq clean` applies."""

    enabled: bool = Field(
        False, description="Clean data.train (each pair's, with pairs) before tokenizing."
    )
    skip: list[str] = Field(
        [],
        description="Filters switched off, of: "
        + ", ".join(f"`{f}`" for f in CLEAN_FILTERS)
        + ". `whitespace` normalises (runs of white space as one space, invisible characters "
        "dropped); `empty`: a side is empty; `length`: the limits below; `alpha_ratio`: too few "
        "letters; `token_ratio`: word counts too far apart; `numbers`/`urls`: the sides' numbers "
        "or URLs differ; `copy`: the target is the source (letters compared, case aside); "
        "`langid`: a side is not in its language; `dual_xent`: a forward and a backward run "
        "find the pair unlikely (`seq2seq clean --forward/--backward` only); `dedup`: a repeated "
        "pair; "
        "`dedup_target`: a target already kept with a better source.",
    )
    max_words: PositiveInt = Field(150, description="`length`: most words a side may have.")
    max_word_length: PositiveInt = Field(
        150, description="`length`: most characters a word may have."
    )
    min_alpha_words: Share = Field(
        0.4, description="`alpha_ratio`: least share of a side's words that hold a letter."
    )
    min_alpha_chars: Share = Field(
        0.5,
        description="`alpha_ratio`: least share of a side's non-space characters that are letters.",
    )
    min_word_ratio: Annotated[float, Field(gt=0.0)] = Field(
        0.5, description="`token_ratio`: least source words per target word."
    )
    max_word_ratio: Annotated[float, Field(gt=0.0)] = Field(
        2.0, description="`token_ratio`: most source words per target word."
    )
    min_number_overlap: Share = Field(
        1.0,
        description="`numbers`: least share of the numbers either side has that both have "
        "(1: the same numbers).",
    )
    langid_min_prob: Share = Field(
        0.5,
        description="`langid`: a side goes when its identified language is not its own with at "
        "least this probability (short lines are often told with little confidence).",
    )
    processes: PositiveInt = Field(2, description="Worker processes that filter blocks of pairs.")

    @model_validator(mode="after")
    def _known_and_ordered(self) -> CleanConfig:
        unknown = [f for f in self.skip if f not in CLEAN_FILTERS]
        if unknown:
            raise ValueError(
                f"skip: unknown filter {', '.join(map(repr, unknown))}; the filters are "
                + ", ".join(CLEAN_FILTERS)
            )
        if self.min_word_ratio > self.max_word_ratio:
            raise ValueError(
                f"min_word_ratio ({self.min_word_ratio}) exceeds max_word_ratio "
                f"({self.max_word_ratio})"
            )
        return self

    def active(self) -> frozenset[str]:
        """The filters that are on."""
        return frozenset(CLEAN_FILTERS) - set(self.skip)


class DataConfig(_Strict):
    """Where the parallel corpus comes from and how it is filtered."""

    src_lang: str = Field("en", description="Source language code (key in hub/JSON records).")
    tgt_lang: str = Field("fr", description="Target language code.")
    train: TrainData | None = Field(
        None,
        description="Training corpus (trains the tokenizer too); needed to train, not by an "
        "imported model. Or a list of parts, each a corpus with `weight`, `name` and `tag`, "
        "mixed by weight.",
    )
    valid: CorpusConfig | None = Field(None, description="Validation corpus: loss and BLEU.")
    test: CorpusConfig | None = Field(None, description="Test corpus for `evaluate --split test`.")
    max_len: PositiveInt = Field(
        256, description="Pairs with a side longer than this many subword tokens are dropped."
    )
    max_len_ratio: Annotated[float, Field(ge=1.0)] | None = Field(
        9.0,
        description="Training pairs whose longer side has more than this × the shorter side's "
        "subword tokens are dropped (Moses clean-corpus-n's ratio); null: no limit.",
    )
    dedup: bool = Field(
        False,
        description="Drop repeats of a training (source, target) pair, keeping the first.",
    )
    clean: CleanConfig = Field(
        default_factory=CleanConfig,
        description="Rule filters for a noisy training corpus (off unless `enabled`).",
    )
    num_proc: PositiveInt = Field(1, description="Processes for tokenizing with `datasets.map`.")
    pairs: list[PairConfig] = Field(
        default_factory=list,
        description="Several directions in one model (`en-fr` and `fr-en` from the same files, "
        "say), each with its own corpora, instead of `train`/`valid`; the target language "
        "reaches the model as `tokenizer.target_language` says. `src_lang`/`tgt_lang` name "
        "the direction translate uses by default.",
    )
    temperature: Annotated[float, Field(gt=0.0)] = Field(
        5.0,
        description="How `pairs` are mixed: a batch comes from pair i with probability ∝ "
        "(its share of sentences)^(1/T); 1 is proportional, 5 the M2M100/NLLB default, "
        "larger is closer to uniform, so a small pair is not drowned.",
    )
    augment: AugmentConfig = Field(
        default_factory=AugmentConfig,
        description="On-the-fly augmentation of training batches (OpusTrainer's modifiers).",
    )

    @model_validator(mode="after")
    def _parts_named_and_weighed(self) -> DataConfig:
        parts = self.train_parts()
        for i, part in enumerate(parts, 1):
            part.name = part.name or f"part{i}"
            if part.tag == "bt" and part.alignments is not None:
                raise ValueError(
                    f"data.train part {part.name!r}: a `bt` part cannot have alignments "
                    "(the <BT> token would shift its source words)"
                )
        names = [p.name for p in parts]
        if len(set(names)) < len(names):
            raise ValueError(f"data.train: part names must differ (got {names})")
        if parts and not sum(p.weight for p in parts) > 0:
            raise ValueError("data.train: the parts' weights must sum to a positive number")
        return self

    def train_parts(self) -> list[TrainPartConfig]:
        """The parts of data.train when given as a list (empty for one corpus)."""
        return self.train if isinstance(self.train, list) else []

    def train_corpora(self) -> list[CorpusConfig]:
        """Every corpus data.train names (not data.pairs'): one, its parts, or none."""
        if self.train is None:
            return []
        return self.train_parts() or [self.train]

    @model_validator(mode="after")
    def _pairs_or_one_corpus(self) -> DataConfig:
        if not self.pairs:
            return self
        if self.train is not None or self.valid is not None:
            raise ValueError("data.pairs: give each pair its corpora, not data.train/data.valid")
        seen = set()
        for pair in self.pairs:
            direction = (pair.src_lang, pair.tgt_lang)
            if direction in seen:
                raise ValueError(f"data.pairs: {pair.src_lang}-{pair.tgt_lang} is listed twice")
            seen.add(direction)
        return self

    def languages(self) -> list[str]:
        """Every language code the pairs name, sorted (empty without pairs)."""
        return sorted({c for p in self.pairs for c in (p.src_lang, p.tgt_lang)})


class TokenizerConfig(_Strict):
    """SentencePiece model trained on the training split on first use."""

    type: Literal["unigram", "bpe"] = Field("unigram", description="SentencePiece model type.")
    vocab_size: PositiveInt = Field(
        8000, description="Vocabulary size (a small corpus may yield fewer pieces)."
    )
    joint: bool = Field(True, description="One vocabulary for both languages (allows tying).")
    character_coverage: Annotated[float, Field(gt=0.0, le=1.0)] = Field(
        1.0, description="Share of characters covered; the rarest others become <unk>."
    )
    max_sentences: PositiveInt = Field(
        2_000_000, description="Sentences sampled from the training split to train SentencePiece."
    )
    layout: Literal["sentencepiece", "marian", "m2m100", "nllb"] = Field(
        "sentencepiece",
        description="`sentencepiece`: ids are the SentencePiece model's own (`spm.model`, or "
        "`src.model` + `tgt.model`); `marian`: `source.spm`/`target.spm` pieces mapped to ids "
        "through `vocab.json` (OPUS-MT; written by `seq2seq import hf-marian`, not trained); "
        "`m2m100`: `sentencepiece.bpe.model` pieces mapped through `vocab.json`; `nllb`: "
        "fairseq's dictionary, SentencePiece id + 1 (written by `seq2seq import hf`).",
    )
    languages: dict[str, TokenId] = Field(
        default_factory=dict,
        description="Language code → id of its atomic language token (`fr` → `__fr__` in "
        "M2M100, `fra_Latn` in NLLB); empty for a model of one language pair.",
    )
    source_language: Literal["none", "prefix", "suffix"] = Field(
        "none",
        description="Where the source language token goes: `prefix` [lang] text </s> "
        "(M2M100, NLLB), `suffix` text </s> [lang] (NLLB's legacy behaviour), `none`.",
    )
    target_language: Literal["none", "forced_first", "source_tag"] = Field(
        "none",
        description="`forced_first`: the decoder starts from decoder_start_id and its first "
        "output is forced to the target language token (M2M100/NLLB forced_bos_token_id); "
        "`source_tag`: the source starts with the target's tag `>>fr<<` (OPUS-MT multi-target).",
    )
    pad_id: TokenId = Field(0, description="Id of padding (never generated).")
    bos_id: TokenId | None = Field(
        1, description="Id of the begin-of-sentence token (never generated); null: none (Marian)."
    )
    eos_id: TokenId = Field(2, description="Id of the end-of-sentence token.")
    unk_id: TokenId = Field(3, description="Id of the unknown-piece token.")
    decoder_start_id: TokenId | None = Field(
        None,
        description="The decoder's first input; null: `bos_id` (Marian starts from `pad_id`).",
    )

    @model_validator(mode="after")
    def _special_ids_fit(self) -> TokenizerConfig:
        named = {"pad_id": self.pad_id, "eos_id": self.eos_id, "unk_id": self.unk_id}
        if self.bos_id is not None:
            named["bos_id"] = self.bos_id
        if len(set(named.values())) < len(named):
            raise ValueError(f"special token ids must differ (got {named})")
        if self.decoder_start_id is None and self.bos_id is None:
            raise ValueError("without a bos_id, decoder_start_id must be given")
        return self

    @property
    def start_id(self) -> int:
        """The id the decoder starts from."""
        return self.bos_id if self.decoder_start_id is None else self.decoder_start_id


class ModelConfig(_Strict):
    """Encoder-decoder Transformer shape (Vaswani et al. 2017, base model by default)."""

    arch: str = Field(
        "transformer",
        description="Architecture, a name in model.ARCHITECTURES (the one built in: transformer).",
    )
    d_model: PositiveInt = Field(512, description="Width of embeddings and layers (§3).")
    heads: PositiveInt = Field(8, description="Attention heads; must divide d_model (§3.2.2).")
    encoder_layers: PositiveInt = Field(6, description="Encoder layers (N in §3.1).")
    decoder_layers: PositiveInt = Field(6, description="Decoder layers.")
    ffn_dim: PositiveInt = Field(2048, description="Inner size of the feed-forward (§3.3).")
    dropout: Probability = Field(
        0.1, description="Dropout on sub-layer outputs and embedding sums (§5.4)."
    )
    attention_dropout: Probability = Field(0.0, description="Dropout on attention weights.")
    norm_first: bool = Field(
        False, description="Pre-norm layers (post-norm, as the paper, if false)."
    )
    tie_embeddings: bool = Field(
        True,
        description="Share target embeddings with the output layer (and the source "
        "embeddings too when the vocabulary is joint, unless share_embeddings is false).",
    )
    max_positions: PositiveInt = Field(
        1024, description="Longest sequence (tokens) the positional table covers."
    )
    activation: Literal["relu", "gelu", "swish"] = Field(
        "relu", description="Feed-forward activation (§3.3: relu; OPUS-MT: swish)."
    )
    share_embeddings: bool | None = Field(
        None,
        description="Source and target embeddings are one matrix (needs a joint vocabulary); "
        "null: as tie_embeddings.",
    )
    scale_embeddings: bool = Field(True, description="Multiply embeddings by √d_model (§3.4).")
    final_logits_bias: bool = Field(
        False,
        description="A fixed bias on the output logits, loaded with the weights and not trained "
        "(Marian's final_logits_bias).",
    )
    positions: Literal["sinusoidal", "fairseq"] = Field(
        "sinusoidal",
        description="Positional table: `sinusoidal` §3.5's; `fairseq` fairseq's (M2M100, NLLB): "
        "all sines then all cosines, frequencies 10000^(-i/(d/2-1)).",
    )
    position_offset: Annotated[int, Field(ge=0)] = Field(
        0,
        description="Row of the table the first position reads (fairseq: pad_id + 1, since its "
        "positions count from after the padding index).",
    )

    @model_validator(mode="after")
    def _heads_divide_d_model(self) -> ModelConfig:
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        if self.d_model % 2:
            raise ValueError(f"d_model ({self.d_model}) must be even for sinusoidal positions")
        return self


class AlignmentConfig(_Strict):
    """Guided alignment (Garg et al. 2019): one cross-attention head learns external word
    alignments beside translation, and `--alignments` reads them from it."""

    layer: int = Field(
        -2, description="Decoder layer of the head (negative: from the top; -2 as Garg et al.)."
    )
    head: Annotated[int, Field(ge=0)] = Field(
        0, description="Which head of that layer's cross-attention."
    )
    weight: Annotated[float, Field(gt=0.0)] = Field(
        0.05,
        description="λ: the alignment loss's weight beside the translation loss (per target "
        "token, both; fairseq's default).",
    )


class StageConfig(_Strict):
    """One stage of a curriculum (`train.stages`): the data mix it trains on and what ends it."""

    name: str | None = Field(None, description="What logs call the stage; default `stage1`, …")
    mix: dict[str, Annotated[float, Field(ge=0.0)]] = Field(
        default_factory=dict,
        description="Weight of each part of data.train, by name, in this stage (a part left "
        "out is not drawn); empty: the parts' own weights.",
    )
    max_steps: PositiveInt | None = Field(
        None, description="Updates this stage runs for, counted from its start."
    )
    patience: PositiveInt | None = Field(
        None,
        description="Validations in a row without a new best that end this stage (early "
        "stopping); `train.patience` still ends the whole run.",
    )


class TrainConfig(_Strict):
    """Optimisation, schedule, validation and checkpointing."""

    max_tokens: PositiveInt = Field(
        4096, description="Token budget of a batch: sentences × longest side, padding included."
    )
    update_freq: PositiveInt = Field(
        1, description="Batches accumulated into one update (×world size under torchrun)."
    )
    max_steps: PositiveInt = Field(100_000, description="Optimizer steps to train for.")
    max_epochs: PositiveInt | None = Field(None, description="Stop after this many epochs too.")
    max_minutes: Annotated[float, Field(gt=0.0)] | None = Field(
        None, description="Stop after this much wall-clock training time too (and save)."
    )
    patience: PositiveInt | None = Field(
        None,
        description="Stop after this many validations without a new best (BLEU, else loss).",
    )
    stages: list[StageConfig] = Field(
        default_factory=list,
        description="A curriculum: stages run one after the other in this run, each from where "
        "the last stopped (weights, optimizer, schedule), each with its data mix and its "
        "stopping rule (every stage but the last needs one); empty: one stage.",
    )
    lr: Annotated[float, Field(gt=0.0)] = Field(7e-4, description="Peak learning rate.")
    warmup_steps: Annotated[int, Field(ge=0)] = Field(
        4000, description="Linear warm-up steps, then lr ∝ 1/√step (§5.3)."
    )
    betas: tuple[Probability, Probability] = Field((0.9, 0.98), description="Adam β1, β2.")
    eps: Annotated[float, Field(gt=0.0)] = Field(1e-9, description="Adam ε.")
    weight_decay: Annotated[float, Field(ge=0.0)] = Field(0.0, description="Adam L2 penalty.")
    label_smoothing: Probability = Field(0.1, description="ε of label smoothing (§5.4).")
    clip_norm: Annotated[float, Field(ge=0.0)] = Field(1.0, description="0 turns clipping off.")
    max_nonfinite: PositiveInt = Field(
        5,
        description="Updates with a non-finite loss or gradient are skipped; this many in a row "
        "stop training (the last good state is saved).",
    )
    seed: int = Field(1, description="Seeds weights, dropout and the batch order.")
    log_every: PositiveInt = Field(100, description="Steps between metrics lines.")
    eval_every: PositiveInt = Field(1000, description="Steps between validations.")
    save_every: PositiveInt = Field(1000, description="Steps between checkpoints.")
    keep_last: PositiveInt = Field(5, description="Step checkpoints kept on disk.")
    average_last: Annotated[int, Field(ge=0)] | list[PositiveInt] = Field(
        0,
        description="At the end, average the last N step checkpoints (§6.1) into "
        "checkpoints/average_lastN.safetensors and score it; it becomes the best checkpoint when "
        "it scores better (0: off; a list, e.g. [3, 6], tries each; needs keep_last ≥ N).",
    )
    final_choice: Literal["validation", "beam"] = Field(
        "validation",
        description="How the end of training picks the weights to ship. `validation`: an average "
        "must beat the best checkpoint on the validation score. `beam`: the best checkpoint, the "
        "last step and each average are decoded with the run's `decode` settings (beam, α) on "
        "the whole valid set, and the highest BLEU becomes the best checkpoint.",
    )
    ema_decay: Annotated[float, Field(gt=0.0, lt=1.0)] | None = Field(
        None,
        description="Keep an exponential moving average of the weights with this decay (e.g. "
        "0.999) and hand it on: validation, the best checkpoint and every checkpoint's weights "
        "are the average; the raw weights ride in the trainer state for --resume (null: off).",
    )
    alignment: AlignmentConfig | None = Field(
        None,
        description="Train one cross-attention head on the word alignments of "
        "`data.train.alignments` (guided alignment); null: off.",
    )
    valid_bleu_sentences: Annotated[int, Field(ge=0)] = Field(
        500, description="Validation sentences decoded for BLEU at each evaluation (0: none)."
    )
    device: str = Field("auto", description="`auto` (CUDA when present), `cpu`, `cuda`, `cuda:N`.")
    precision: Literal["auto", "fp32", "tf32", "bf16", "fp16"] = Field(
        "auto",
        description="`auto`: bf16 autocast on CUDA when supported, else fp16; fp32 on CPU. "
        "`fp32` is exact float32 (no TF32); `tf32` is float32 with TensorFloat-32 matmuls on "
        "CUDA; with `bf16`/`fp16` autocast, what stays in float32 may use TF32.",
    )
    threads: PositiveInt | None = Field(None, description="CPU threads for torch (default: all).")
    compile: bool = Field(False, description="`torch.compile` the model (dynamic shapes).")
    num_workers: Annotated[int, Field(ge=0)] | None = Field(
        None, description="Background batch loaders (default: 1 on CUDA, 0 on CPU)."
    )
    tensorboard: bool = Field(
        True, description="Also write TensorBoard scalars (when tensorboard is installed)."
    )

    @property
    def averages(self) -> list[int]:
        """The numbers of last checkpoints to average at the end, smallest first."""
        n = self.average_last
        return sorted(set(n)) if isinstance(n, list) else [n] if n else []

    @model_validator(mode="after")
    def _average_fits_kept(self) -> TrainConfig:
        most = max(self.averages, default=0)
        if most > self.keep_last:
            raise ValueError(
                f"average_last ({most}) needs keep_last ≥ {most} "
                f"(it is {self.keep_last}): the checkpoints to average must still be on disk"
            )
        return self


# `none`, `topk:K`, `temperature:T` or `nucleus:P`; DecodeConfig checks the ranges.
SAMPLING = re.compile(r"^(none|topk:(\d+)|temperature:(\d*\.?\d+)|nucleus:(\d*\.?\d+))$")


def parse_sampling(text: str) -> tuple[str, float] | None:
    """(`topk` | `temperature` | `nucleus`, its value) of a sampling setting; None for `none`.
    A malformed or out-of-range one is a ValueError saying what is allowed."""
    found = SAMPLING.match(text.strip())
    if found is None:
        raise ValueError(f"sampling must be none, topk:K, temperature:T or nucleus:P, not {text!r}")
    if found.group(1) == "none":
        return None
    kind, value = found.group(1).split(":")
    number = float(value)
    if kind == "topk" and number < 1:
        raise ValueError("topk:K needs K ≥ 1")
    if kind == "temperature" and number <= 0:
        raise ValueError("temperature:T needs T > 0")
    if kind == "nucleus" and not 0 < number <= 1:
        raise ValueError("nucleus:P needs 0 < P ≤ 1")
    return kind, number


class LoadOptions(_Strict):
    """How a run's weights are laid out for decoding, fixed when it is opened: the load-time
    part of `decode:` (a call's own options, the rest, cannot change it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    quantize: Literal["none", "int8"] = "none"
    int8_scales: Literal["row", "batch"] = "row"
    packed_weights: bool = True


class DecodeConfig(_Strict):
    """Decoding settings of `evaluate` and `translate` (validation during training is greedy)."""

    # The config file's `decode:` section as it always was: the load-time options (`load`:
    # quantize, int8_scales, packed_weights) beside the per-call ones a request may choose.

    # Frozen, so hashable: the server's batcher groups requests by the settings they decode with.
    model_config = ConfigDict(extra="forbid", frozen=True)

    beam_size: PositiveInt = Field(4, description="Beam width; 1 is greedy search (§6.1: 4).")
    length_penalty: Annotated[float, Field(ge=0.0)] = Field(
        0.6, description="α of the length penalty that scores are divided by (§6.1: 0.6)."
    )
    length_norm: Literal["gnmt", "length"] = Field(
        "gnmt",
        description="How scores are divided by length: `gnmt` ((5+len)/6)^α, the paper's; "
        "`length` len^α, as fairseq, Hugging Face and Marian.",
    )
    nbest: PositiveInt = Field(1, description="Hypotheses returned per sentence (≤ beam_size).")
    split_sentences: bool = Field(
        True,
        description="Decode a line of several sentences sentence by sentence and join the "
        "translations (one output line per input line still; not with nbest > 1).",
    )

    max_len_a: Annotated[float, Field(ge=0.0)] = Field(
        1.0, description="Output length cap is `a × source length + b` tokens."
    )
    max_len_b: Annotated[int, Field(ge=0)] = Field(50, description="See max_len_a (§6.1: +50).")
    batch_size: PositiveInt = Field(64, description="Sentences decoded together.")
    max_tokens: PositiveInt | None = Field(
        None, description="Also cap a batch at this many source tokens (padding included)."
    )
    quantize: Literal["none", "int8"] = Field(
        "none",
        description="`int8`: the linear layers (attention, FFN, output) run int8 weights with "
        "dynamic int8 activations, and the embeddings are int8 rows, on CPU only.",
    )
    int8_scales: Literal["row", "batch"] = Field(
        "row",
        description="int8: each linear layer quantizes its input with one scale per row (per "
        "token; more outputs equal float32's) or one per batch (fbgemm's own; faster).",
    )
    packed_weights: bool = Field(
        True,
        description="float32 on CPU: the linear layers multiply on oneDNN's pre-packed copies "
        "of their weights, laid out once at load (faster; sums in another order, so a near-tie "
        "can decode differently from `false`, torch's default GEMM). Ignored on CUDA and int8.",
    )

    sampling: str = Field(
        "none",
        description="Sample each next token instead of searching (back-translation: Edunov et "
        "al. 2018): `none`, `topk:K` (among the K most probable), `temperature:T` (the whole "
        "distribution, logits ÷ T) or `nucleus:P` (the fewest most probable tokens holding "
        "probability P); needs beam_size 1.",
    )
    seed: int = Field(
        0, description="Seed of `sampling`: the same input, settings and seed, the same output."
    )
    term_mode: Literal["place", "constrain", "annotate", "both"] = Field(
        "place",
        description="How a glossary's terms reach the translation: `place`, the plain beam, "
        "then each missing term put where its source term was translated and the grammar "
        "around it repaired (constrained beam search where no place is found); `constrain`, "
        "constrained beam search; `annotate`, the source annotated inline "
        "(`word <t> mot </t>`) and the plain beam, for a run trained with "
        "data.augment.terms; `both`, annotated and constrained. A run whose tokenizer lacks "
        "the markers constrains (annotate, both), with a warning.",
    )

    @property
    def load(self) -> LoadOptions:
        """The load-time part: how the run's weights are opened."""
        return LoadOptions(
            quantize=self.quantize, int8_scales=self.int8_scales, packed_weights=self.packed_weights
        )

    @model_validator(mode="after")
    def _nbest_fits_beam(self) -> DecodeConfig:
        if self.nbest > self.beam_size:
            raise ValueError(f"nbest ({self.nbest}) must not exceed beam_size ({self.beam_size})")
        if parse_sampling(self.sampling) is not None and self.beam_size != 1:
            raise ValueError(f"sampling ({self.sampling}) needs beam_size 1, not {self.beam_size}")
        return self


class Config(_Strict):
    """A whole experiment."""

    run_dir: Path = Field(Path("runs/default"), description="Where the run's files are written.")
    data: DataConfig
    tokenizer: TokenizerConfig = TokenizerConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    decode: DecodeConfig = DecodeConfig()

    @model_validator(mode="after")
    def _languages_known(self) -> Config:
        """A config of several pairs names its language tokens: SentencePiece places
        user-defined symbols right after the special ids, in the order given."""
        tok, codes = self.tokenizer, self.data.languages()
        if not codes:
            return self
        if tok.target_language == "none":
            return self  # refused when training: --init-from may still bring a tokenizer
        if tok.layout == "sentencepiece":
            if not tok.joint:
                raise ValueError("data.pairs needs a joint vocabulary (tokenizer.joint: true)")
            specials = [tok.pad_id, tok.eos_id, tok.unk_id, tok.bos_id]
            first = max(i for i in specials if i is not None) + 1
            wanted = {c: first + i for i, c in enumerate(codes)}
            if tok.languages and tok.languages != wanted:
                raise ValueError(f"tokenizer.languages {tok.languages} do not match data.pairs")
            tok.languages = wanted
        else:
            missing = [c for c in codes if c not in tok.languages]
            if missing:
                raise ValueError(f"data.pairs: the tokenizer has no language {missing}")
        return self

    @model_validator(mode="after")
    def _stages_fit(self) -> Config:
        stages, parts = self.train.stages, [p.name for p in self.data.train_parts()]
        for i, stage in enumerate(stages):
            where = f"train.stages[{i}]"
            stage.name = stage.name or f"stage{i + 1}"
            unknown = sorted(set(stage.mix) - set(parts))
            if stage.mix and not parts:
                raise ValueError(f"{where}.mix: needs data.train as a list of named parts")
            if unknown:
                raise ValueError(
                    f"{where}.mix: no part {unknown} in data.train (its parts: {parts})"
                )
            if stage.mix and not sum(stage.mix.values()) > 0:
                raise ValueError(f"{where}.mix: the weights must sum to a positive number")
            if i < len(stages) - 1 and stage.max_steps is None and stage.patience is None:
                raise ValueError(f"{where}: give max_steps or patience, or it never ends")
            if stage.patience is not None and self.data.valid is None and not self.data.pairs:
                raise ValueError(f"{where}.patience: early stopping needs data.valid")
        names = [s.name for s in stages]
        if len(set(names)) < len(names):
            raise ValueError(f"train.stages: stage names must differ (got {names})")
        return self

    @model_validator(mode="after")
    def _alignment_fits(self) -> Config:
        a, d = self.train.alignment, self.data
        corpora = [p.train for p in d.pairs] or d.train_corpora()
        if a is None:
            return self
        if not all(c.alignments is not None for c in corpora):
            raise ValueError(
                "train.alignment needs data.train.alignments (each pair's, with pairs)"
            )
        n = self.model.decoder_layers
        if not -n <= a.layer < n:
            raise ValueError(f"train.alignment.layer {a.layer}: the decoder has {n} layers")
        if a.head >= self.model.heads:
            raise ValueError(
                f"train.alignment.head {a.head}: the model has {self.model.heads} heads"
            )
        return self

    @model_validator(mode="after")
    def _lengths_fit(self) -> Config:
        if self.model.share_embeddings and not self.tokenizer.joint:
            raise ValueError("model.share_embeddings needs a joint vocabulary (tokenizer.joint)")
        if self.data.max_len + 1 > self.model.max_positions:
            raise ValueError(
                f"data.max_len ({self.data.max_len}) + 1 must not exceed model.max_positions "
                f"({self.model.max_positions})"
            )
        if self.data.max_len + 1 > self.train.max_tokens:
            raise ValueError(
                f"data.max_len ({self.data.max_len}) + 1 must not exceed train.max_tokens "
                f"({self.train.max_tokens}): a longest pair (with EOS) must fit in a batch"
            )
        return self


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config, apply `a.b=value` overrides and validate it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        where = ""
        mark = getattr(e, "problem_mark", None)
        if mark is not None:
            where = f" (line {mark.line + 1}, column {mark.column + 1})"
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, not a list/value")
    for item in overrides:
        apply_override(data, item)
    return validate_config(data, source=str(path))


def validate_config(data: dict[str, Any], source: str) -> Config:
    """Validate a plain dict into a Config, naming each bad key path in the error."""
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{source}: invalid config:\n" + _format_errors(e)) from None


def _format_errors(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("<")) or "(top level)"
        kind = err["type"]
        if kind == "extra_forbidden":
            msg = "unknown key"
        elif kind == "missing":
            msg = "required key is missing"
        else:
            msg = err["msg"].removeprefix("Value error, ")
            if "input" in err and not isinstance(err["input"], dict):
                msg += f" (got {err['input']!r})"
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def with_changes(section: BaseModel, changes: dict[str, Any]):
    """A copy of a config section with some keys changed (None values ignored), validated."""
    data = {**section.model_dump(), **{k: v for k, v in changes.items() if v is not None}}
    try:
        return type(section).model_validate(data)
    except ValidationError as e:
        raise ConfigError("invalid options:\n" + _format_errors(e)) from None


def apply_override(data: dict[str, Any], item: str) -> None:
    """Set `a.b.c=value` in a nested dict; the value is parsed as YAML (so 100 is an int)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set expects key.path=value, got {item!r}")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw
    parts = key.strip().split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--set {item}: {'.'.join(parts[: i + 1])} is not a section")
        node = child
    node[parts[-1]] = value


def missing_files(cfg: Config) -> list[str]:
    """Corpus files named in the config that do not exist, as `key.path: file` lines (and the
    training corpus itself when none is named: training needs one)."""
    d = cfg.data
    named = {f"data.{split}": getattr(d, split) for split in ("train", "valid", "test")}
    if d.train_parts():
        named |= {f"data.train[{i}]": part for i, part in enumerate(d.train_parts())}
        del named["data.train"]
    for i, pair in enumerate(d.pairs):
        named |= {f"data.pairs[{i}].train": pair.train, f"data.pairs[{i}].valid": pair.valid}
    problems = [] if d.train is not None or d.pairs else ["data.train: required to train"]
    for name, corpus in named.items():
        if corpus is None:
            continue
        for key, file in corpus.files().items():
            if not file.is_file():
                problems.append(f"{name}.{key}: file not found: {file}")
    return problems


def check_files(cfg: Config, source: str) -> None:
    """Fail with one message listing every missing corpus file."""
    problems = missing_files(cfg)
    if problems:
        raise ConfigError(f"{source}: " + "\n  ".join(problems))


def resolved(cfg: Config) -> Config:
    """A copy whose paths are absolute, so the saved config works from any directory."""
    data = cfg.model_dump()
    data["run_dir"] = cfg.run_dir.resolve()
    corpora = [data["data"][split] for split in ("valid", "test")]
    train = data["data"]["train"]
    corpora += train if isinstance(train, list) else [train]
    corpora += [pair[split] for pair in data["data"]["pairs"] for split in ("train", "valid")]
    for corpus in corpora:
        if corpus is None:
            continue
        for key in ("src", "tgt", "alignments", "tsv", "jsonl"):
            if corpus[key] is not None:
                corpus[key] = Path(corpus[key]).resolve()
    return Config.model_validate(data)


def save_config(cfg: Config, path: Path) -> None:
    """Write the config as YAML (atomically)."""
    text = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
    atomic_write_text(path, text)


def load_run_config(run_dir: Path) -> Config:
    """The resolved config saved in a run directory."""
    path = Path(run_dir) / CONFIG_NAME
    if not Path(run_dir).is_dir():
        raise UserError(f"run directory not found: {run_dir}")
    if not path.is_file():
        raise UserError(f"{run_dir} is not a run directory (no {CONFIG_NAME}); train into it first")
    return load_config(path)


def run_decode(run_dir: Path, **changes: Any) -> DecodeConfig:
    """A run's decode settings with some changed (None: keep the run's), validated."""
    return with_changes(load_run_config(run_dir).decode, changes)
