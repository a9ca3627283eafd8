"""`seq2seq evaluate`: decode a test set with a trained run and score it with sacrebleu."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF

from .config import load_run_config
from .data import load_corpus, read_lines
from .errors import UserError
from .files import atomic_write_text
from .translator import load_translator


@dataclass
class Scores:
    """Corpus scores with the sacrebleu signatures that make them reproducible."""

    bleu: float
    bleu_signature: str
    bleu_detail: str
    chrf: float
    chrf_signature: str


def score(hypotheses: list[str], references: list[str]) -> Scores:
    """Corpus BLEU and chrF of hypotheses against one reference each."""
    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    return Scores(b.score, str(bleu.get_signature()), str(b), c.score, str(chrf.get_signature()))


def evaluate(
    run_dir: Path,
    split: str = "test",
    src_file: Path | None = None,
    ref_file: Path | None = None,
    checkpoint: Path | None = None,
    output_dir: Path | None = None,
    device: str = "auto",
    batch_size: int | None = None,
) -> dict[str, Any]:
    """Translate a split of the run's data (or explicit files), score it, write the report."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    if (src_file is None) != (ref_file is None):
        raise UserError("give both --src and --ref, or neither (to use --split)")
    if src_file is not None:
        sources, references = read_lines(src_file), read_lines(ref_file)
        if len(sources) != len(references):
            raise UserError(
                f"source and reference differ in length: {src_file} has {len(sources)} lines, "
                f"{ref_file} has {len(references)}"
            )
        name, described = Path(src_file).name, f"{src_file} → {ref_file}"
    else:
        corpus = getattr(cfg.data, split, None) if split in ("train", "valid", "test") else None
        if corpus is None:
            raise UserError(
                f"the run's config has no data.{split} corpus; use --split train/valid/test "
                "or --src and --ref"
            )
        ds = load_corpus(corpus, cfg.data.src_lang, cfg.data.tgt_lang)
        sources, references = ds["src"], ds["tgt"]
        name, described = split, corpus.describe()
    if not sources:
        raise UserError(f"nothing to evaluate: {described} is empty")

    translator, used = load_translator(run_dir, checkpoint, device, batch_size)
    hypotheses = translator.translate(sources)
    s = score(hypotheses, references)

    out_dir = Path(output_dir) if output_dir else run_dir / "eval"
    out_dir.mkdir(parents=True, exist_ok=True)
    hyp_path = out_dir / f"{name}.hyp"
    atomic_write_text(hyp_path, "".join(h + "\n" for h in hypotheses))
    report = {
        "run": str(run_dir),
        "checkpoint": str(used),
        "data": described,
        "sentences": len(sources),
        "bleu": s.bleu,
        "bleu_signature": s.bleu_signature,
        "bleu_detail": s.bleu_detail,
        "chrf": s.chrf,
        "chrf_signature": s.chrf_signature,
        "decoding": {"search": "greedy", **translator.decode.model_dump()},
        "hypotheses": str(hyp_path),
    }
    report_path = out_dir / f"{name}.json"
    atomic_write_text(report_path, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    report["report"] = str(report_path)
    return report
