"""`seq2seq evaluate`: decode a test set with a trained run, score it, compare with a baseline."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from seq2seq.config import CorpusConfig, DecodeConfig, load_run_config
from seq2seq.data.corpus import load_corpus, read_lines
from seq2seq.decode.glossary import Glossary, term_use
from seq2seq.decode.term_metrics import term_report
from seq2seq.decode.translator import load_translator
from seq2seq.errors import UserError
from seq2seq.files import atomic_write_text

BOOTSTRAP_SAMPLES = 1000
BOOTSTRAP_SEED = 12345  # sacrebleu's default, so runs are reproducible


@dataclass
class Scores:
    """Corpus scores with the sacrebleu signatures that make them reproducible."""

    bleu: float
    bleu_signature: str
    bleu_detail: str
    chrf: float
    chrf_signature: str
    ter: float
    ter_signature: str


def score(hypotheses: list[str], references: list[str]) -> Scores:
    """Corpus BLEU, chrF and TER of hypotheses against one reference each."""
    bleu, chrf, ter = BLEU(), CHRF(), TER()
    b = bleu.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    t = ter.corpus_score(hypotheses, [references])
    return Scores(
        b.score,
        str(bleu.get_signature()),
        str(b),
        c.score,
        str(chrf.get_signature()),
        t.score,
        str(ter.get_signature()),
    )


@dataclass
class Comparison:
    """A paired bootstrap comparison of two systems' BLEU on the same references."""

    baseline: float
    candidate: float
    delta: float  # candidate − baseline
    ci_low: float  # 95% interval of the delta over resamples
    ci_high: float
    p_value: float  # of "no difference", as sacrebleu's paired bootstrap test defines it
    samples: int

    @property
    def significant(self) -> bool:
        # Identical outputs get sacrebleu's smallest p (a zero difference is no chance
        # result), but there is no difference to call significant.
        return self.p_value < 0.05 and self.delta != 0


def paired_bootstrap(
    baseline: list[str],
    candidate: list[str],
    references: list[str],
    *,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Comparison:
    """Paired bootstrap resampling of BLEU (Koehn 2004), as sacrebleu's `--paired-bs` runs it.

    Both systems are scored on the same resampled sets of sentences, from each sentence's
    sufficient statistics; the p-value counts resamples whose (centred) difference exceeds the
    observed one (`>`, as sacrebleu counts: identical systems get p = 1/(samples + 1)), so it
    matches sacrebleu's PairedTest with the same seed.
    """
    metric = BLEU()
    refs = [references]
    base_stats = np.array(metric._extract_corpus_statistics(baseline, refs), dtype="float32")
    cand_stats = np.array(metric._extract_corpus_statistics(candidate, refs), dtype="float32")
    base_score = metric._compute_score_from_stats(base_stats.sum(0)).score
    cand_score = metric._compute_score_from_stats(cand_stats.sum(0)).score
    idx = np.random.default_rng(seed).choice(len(references), size=(samples, len(references)))
    base = np.array([metric._compute_score_from_stats(s.sum(0)).score for s in base_stats[idx]])
    cand = np.array([metric._compute_score_from_stats(s.sum(0)).score for s in cand_stats[idx]])
    deltas = cand - base
    observed = abs(cand_score - base_score)
    centred = np.abs(deltas) - np.abs(deltas).mean()
    p_value = (np.sum(centred > observed) + 1) / (samples + 1)
    low, high = np.percentile(deltas, [2.5, 97.5])
    return Comparison(
        base_score,
        cand_score,
        cand_score - base_score,
        float(low),
        float(high),
        float(p_value),
        samples,
    )


# Source lengths (words) that under-translation is reported by: it grows with length.
LENGTH_BUCKETS = ((0, 10), (10, 20), (20, 30), (30, 50), (50, None))


def length_report(
    sources: list[str], hypotheses: list[str], references: list[str]
) -> dict[str, Any]:
    """Output length against the references: overall, by source length, and how often an
    output is shorter than half its reference (a sentence lost, usually).

    Lengths are sacrebleu's 13a tokens, so `ratio` is BLEU's hyp_len / ref_len.
    """
    tokenize = Tokenizer13a()
    hyp = [len(tokenize(h).split()) for h in hypotheses]
    ref = [len(tokenize(r).split()) for r in references]
    words = [len(s.split()) for s in sources]
    buckets = []
    for low, high in LENGTH_BUCKETS:
        rows = [i for i, n in enumerate(words) if n >= low and (high is None or n < high)]
        if not rows:
            continue
        ref_len = sum(ref[i] for i in rows)
        buckets.append(
            {
                "source_words": f"{low}-{high - 1}" if high else f"{low}+",
                "sentences": len(rows),
                "ratio": sum(hyp[i] for i in rows) / ref_len if ref_len else None,
            }
        )
    short = sum(h < 0.5 * r for h, r in zip(hyp, ref))
    return {
        "ratio": sum(hyp) / max(sum(ref), 1),
        "by_source_length": buckets,
        "shorter_than_half": short / max(len(hyp), 1),
    }


def describe_lengths(report: dict[str, Any]) -> str:
    """The length report as one line."""
    parts = ", ".join(
        f"{b['source_words']} {b['ratio']:.2f} ({b['sentences']})"
        for b in report["by_source_length"]
        if b["ratio"] is not None
    )
    return (
        f"length ratio {report['ratio']:.3f}; by source words: {parts}; "
        f"{100 * report['shorter_than_half']:.1f}% of outputs shorter than half their reference"
    )


def _fingerprint(lines: list[str]) -> str:
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode("utf-8") + b"\n")
    return h.hexdigest()


def _test_set(
    run_dir: Path,
    split: str,
    src_file: Path | None,
    ref_file: Path | None,
    hub: CorpusConfig | None,
) -> tuple[list[str], list[str], str, str]:
    """Sources, references, a short name and a description of the chosen test set."""
    cfg = load_run_config(run_dir)
    if (src_file is None) != (ref_file is None):
        raise UserError("give both --src and --ref, or neither")
    if src_file is not None:
        sources, references = read_lines(src_file), read_lines(ref_file)
        if len(sources) != len(references):
            raise UserError(
                f"source and reference differ in length: {src_file} has {len(sources)} lines, "
                f"{ref_file} has {len(references)}"
            )
        return sources, references, Path(src_file).name, f"{src_file} → {ref_file}"
    if hub is not None:
        corpus, name = hub, "-".join(p for p in (hub.hub, hub.hub_config, hub.split) if p)
        name = name.replace("/", "_")
    else:
        corpus = getattr(cfg.data, split, None) if split in ("train", "valid", "test") else None
        if corpus is None:
            raise UserError(
                f"the run's config has no data.{split} corpus; use --split train/valid/test, "
                "--hub NAME, or --src and --ref"
            )
        name = split
    ds = load_corpus(corpus, cfg.data.src_lang, cfg.data.tgt_lang)
    return ds["src"], ds["tgt"], name, corpus.describe()


def evaluate(
    run_dir: Path,
    *,
    split: str = "test",
    src_file: Path | None = None,
    ref_file: Path | None = None,
    hub: CorpusConfig | None = None,
    checkpoint: Path | None = None,
    output_dir: Path | None = None,
    report_path: Path | None = None,
    device: str = "auto",
    decode: DecodeConfig | None = None,
    baseline: Path | None = None,
    glossary: Glossary | None = None,
    constraints: list[list[str]] | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    shortlist: bool = False,
) -> dict[str, Any]:
    """Translate a test set, score it, write hypotheses and a JSON report; compare if asked.
    With a `glossary` or `constraints` (terms per line) the report has the term use and the
    term metrics (`term_metrics.term_report`; a `baseline`'s hypotheses as the plain output)."""
    run_dir = Path(run_dir)
    base_report = _read_baseline(baseline) if baseline else None
    sources, references, name, described = _test_set(run_dir, split, src_file, ref_file, hub)
    if not sources:
        raise UserError(f"nothing to evaluate: {described} is empty")
    if base_report is not None:
        _check_same_references(base_report, references, baseline)
    _check_constraints(constraints, sources)
    languages = {"src_lang": src_lang, "tgt_lang": tgt_lang}
    translator, used = load_translator(
        run_dir,
        checkpoint,
        device,
        decode=decode,
        glossary=glossary,
        shortlist=shortlist,
        **languages,
    )
    hypotheses = translator.translate(sources, constraints)
    out_dir = Path(output_dir) if output_dir else run_dir / "eval"
    out_dir.mkdir(parents=True, exist_ok=True)
    hyp_path = out_dir / f"{name}.hyp"
    atomic_write_text(hyp_path, "".join(h + "\n" for h in hypotheses))
    report = {
        "run": str(run_dir),
        "checkpoint": str(used),
        "data": described,
        **_scores(translator, sources, hypotheses, references),
        "hypotheses_file": str(hyp_path),
        "hypotheses": hypotheses,
    }
    if glossary is not None or constraints is not None:
        terms = constraints or [glossary.terms_in(line) for line in sources]
        report |= _terminology(hypotheses, references, terms, glossary, base_report)
    if base_report is not None:
        report["comparison"] = _comparison(base_report, hypotheses, references, baseline)
    path = Path(report_path) if report_path else out_dir / f"{name}.json"
    _write_report(report, path)
    return report


def _terminology(hypotheses, references, terms, glossary, base_report) -> dict[str, Any]:
    """The term use and the term metrics (a baseline's hypotheses as the plain output)."""
    plains = base_report["hypotheses"] if base_report is not None else None
    specs = _term_specs(glossary, terms)
    return {
        "terminology": term_use(hypotheses, terms),
        "term_metrics": term_report(hypotheses, references, terms, specs=specs, plains=plains),
    }


def _term_specs(glossary: Glossary | None, terms: list[list[str]]) -> dict[str, str]:
    """Each target term's gender and number as its glossary entry gives them ("f pl")."""
    # Constraints given directly have no glossary, so no gender column.
    entries = {t: glossary.info(t) for line in terms for t in line} if glossary else {}
    return {
        t: f"{e.gender or ''} {e.number or ''}".strip()
        for t, e in entries.items()
        if e is not None and (e.gender or e.number)
    }


def _check_constraints(constraints: list[list[str]] | None, sources: list[str]) -> None:
    if constraints is not None and len(constraints) != len(sources):
        raise UserError(f"{len(constraints)} lines of constraints for {len(sources)} sources")


def _comparison(base_report: dict, hypotheses: list[str], references: list[str], baseline) -> dict:
    """The paired bootstrap against an earlier report's hypotheses on the same references."""
    c = paired_bootstrap(base_report["hypotheses"], hypotheses, references)
    return {"baseline_report": str(baseline), **c.__dict__, "significant": c.significant}


def _write_report(report: dict[str, Any], path: Path) -> None:
    """The JSON report, atomically; `report["report"]` says where it went."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    report["report"] = str(path)


def _scores(translator, sources, hypotheses, references) -> dict[str, Any]:
    """The report's scores, lengths and decoding settings."""
    s = score(hypotheses, references)
    return {
        "sentences": len(sources),
        "languages": {"source": translator.src_lang, "target": translator.tgt_lang},
        "references_sha256": _fingerprint(references),
        "bleu": s.bleu,
        "bleu_signature": s.bleu_signature,
        "bleu_detail": s.bleu_detail,
        "chrf": s.chrf,
        "chrf_signature": s.chrf_signature,
        "ter": s.ter,
        "ter_signature": s.ter_signature,
        "length": length_report(sources, hypotheses, references),
        "decoding": {
            "search": "greedy" if translator.options.beam_size == 1 else "beam",
            **translator.options.model_dump(),
        },
    }


def _read_baseline(path: Path) -> dict[str, Any]:
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"baseline report not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path} is not a JSON report: {e}") from None
    if not isinstance(report, dict) or not isinstance(report.get("hypotheses"), list):
        raise UserError(f"{path} has no hypotheses: write it with this version's evaluate")
    return report


def _check_same_references(report: dict[str, Any], references: list[str], path: Path) -> None:
    if report.get("references_sha256") != _fingerprint(references):
        raise UserError(
            f"{path} was scored on other references ({report.get('sentences')} sentences, "
            f"{report.get('data')}); a paired comparison needs the same test set"
        )
