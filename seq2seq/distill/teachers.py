"""The runs a distillation decodes and scores with: the teacher (n-best) and the optional
backward run of the cross-entropy filter, each checked against the student's languages."""

from __future__ import annotations

from pathlib import Path

from seq2seq.config import load_run_config, with_changes
from seq2seq.data.layouts import tokenizer_files
from seq2seq.decode.translator import Translator, load_translator
from seq2seq.distill.digests import entry, file_digest
from seq2seq.errors import UserError
from seq2seq.run.checkpoint import best_or_latest


def run_inputs(run: Path, role: str) -> tuple[Path, dict]:
    """The weights file a run is loaded from (its best, else latest) and the manifest's inputs
    of the run `role` (`teacher`, `backward run`): those weights and its tokenizer's files."""
    cfg = load_run_config(run)
    weights = best_or_latest(run)
    if weights is None:
        raise UserError(f"{role} {run} has no checkpoint yet; train (or wait for the first save)")
    inputs = {f"{role}.weights": entry(f"the {role}'s weights {weights}", file_digest(weights))}
    for path in tokenizer_files(run, cfg.tokenizer):
        label = f"the {role}'s tokenizer {path}"
        inputs[f"{role}.tokenizer.{path.name}"] = entry(label, file_digest(path))
    return weights, inputs


def load_teacher(
    run: Path,
    languages: tuple[str, str],
    *,
    weights: Path,
    beam: int,
    nbest: int,
    device: str,
    batch_size: int | None = None,
) -> Translator:
    """The teacher decoding `languages` (its own codes) with beam `beam` and `nbest`
    hypotheses a line, whole lines (n-best lists are never split into sentences), from the
    checkpoint `weights`."""
    own = load_run_config(run).decode
    changes = {
        "beam_size": beam,
        "nbest": nbest,
        "split_sentences": False,
        "batch_size": batch_size,
    }
    decode = with_changes(own, changes)
    return _checked(run, "teacher", languages, checkpoint=weights, decode=decode, device=device)


def load_backward(run: Path, languages: tuple[str, str], weights: Path, device: str) -> Translator:
    """The backward run (target → source) that scores synthetic pairs, from the checkpoint
    `weights`; `languages` are the teacher's (source, target), so the backward run must
    translate them the other way."""
    reverse = (languages[1], languages[0])
    return _checked(run, "backward run", reverse, checkpoint=weights, decode=None, device=device)


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
