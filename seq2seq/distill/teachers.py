"""The runs a distillation decodes and scores with: the teacher (n-best) and the optional
backward run of the cross-entropy filter, each checked against the student's languages."""

from __future__ import annotations

from pathlib import Path

from seq2seq.config import load_run_config, with_changes
from seq2seq.decode.translator import Translator, load_translator
from seq2seq.errors import UserError


def load_teacher(
    run: Path,
    languages: tuple[str, str],
    *,
    beam: int,
    nbest: int,
    device: str,
    batch_size: int | None = None,
) -> Translator:
    """The teacher decoding `languages` (its own codes) with beam `beam` and `nbest`
    hypotheses a line, whole lines (n-best lists are never split into sentences)."""
    own = load_run_config(run).decode
    changes = {
        "beam_size": beam,
        "nbest": nbest,
        "split_sentences": False,
        "batch_size": batch_size,
    }
    decode = with_changes(own, changes)
    return _checked(run, "teacher", languages, decode=decode, device=device)


def load_backward(run: Path, languages: tuple[str, str], device: str) -> Translator:
    """The backward run (target → source) that scores synthetic pairs; `languages` are the
    teacher's (source, target), so the backward run must translate them the other way."""
    return _checked(run, "backward run", (languages[1], languages[0]), decode=None, device=device)


def _checked(run: Path, role: str, languages: tuple[str, str], **load) -> Translator:
    """A translator of `run` between `languages`, or one error saying which do not match."""
    src, tgt = languages
    try:
        translator, _ = load_translator(run, src_lang=src, tgt_lang=tgt, **load)
    except UserError as e:
        if "language" not in str(e):
            raise
        raise UserError(f"{role} {run} cannot translate {src} → {tgt}: {e}") from None
    if (translator.src_lang, translator.tgt_lang) != (src, tgt):
        raise UserError(
            f"{role} {run} translates {translator.src_lang} → {translator.tgt_lang}, not "
            f"{src} → {tgt}"
        )
    return translator
