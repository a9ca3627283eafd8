"""Training data given as weighted parts: the back-translation tag a part's sources carry, and
the pieces the tokenizer must keep whole for that tag and for augmentation's inline tags."""

from __future__ import annotations

import datasets

from seq2seq.config import DataConfig
from seq2seq.data.term_annotation import TERM_SYMBOLS
from seq2seq.data.tokenizer import Tokenizer

BT_TOKEN = "<BT>"  # Caswell et al. 2019: a tag tells back-translated sources from genuine ones
# The inline tags augmentation puts around an aligned word pair: `<b>word</b>`.
INLINE_TAGS = ("b", "i", "u")


def inline_tag_symbols() -> list[str]:
    """Opening and closing forms of every inline tag, as the tokenizer keeps them."""
    return [s for name in INLINE_TAGS for s in (f"<{name}>", f"</{name}>")]


def tokenizer_symbols(d: DataConfig) -> list[str]:
    """Pieces a tokenizer trained for this data keeps whole: `<BT>` when a part is tagged `bt`,
    the inline tags and the term markers when augmentation adds them."""
    symbols = [BT_TOKEN] if any(p.tag == "bt" for p in d.train_parts()) else []
    symbols += inline_tag_symbols() if d.augment.tags > 0 else []
    return symbols + (list(TERM_SYMBOLS) if d.augment.terms > 0 else [])


def _prefix_bt(batch: dict[str, list[str]]) -> dict[str, list[str]]:
    # An empty source stays empty, so the filters still drop it as empty.
    return {"src": [f"{BT_TOKEN} {s}" if s else s for s in batch["src"]]}


def tagged(ds: datasets.Dataset, tag: str | None) -> datasets.Dataset:
    """A part's pairs as training reads them: with `bt`, each source led by the `<BT>` token."""
    if tag != "bt":
        return ds
    return ds.map(_prefix_bt, batched=True, batch_size=10_000, desc="tagging back-translation")


def cut_symbols(tok: Tokenizer, d: DataConfig) -> list[str]:
    """The symbols this data needs that the tokenizer does not keep as one piece (a tokenizer
    reused or imported from a run trained without them)."""
    needed = tokenizer_symbols(d)
    encoded = tok.encode_src(needed, d.src_lang, d.tgt_lang) if needed else []
    return [s for s, ids in zip(needed, encoded) if tok.src_pieces(ids).count(s) != 1]
