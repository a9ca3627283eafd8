"""`seq2seq evaluate`: translate a test set and score it (decode/evaluate.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from seq2seq.cli.base import TrainedRun, log, user_errors
from seq2seq.cli.decode_options import DECODE_DEFAULTS, DecodeOptions, decode_options
from seq2seq.errors import UserError

# `evaluate`'s own options.
EvalSplit = Annotated[str, typer.Option(help="Split of the run's data: valid or test.")]
EvalSrc = Annotated[Path | None, typer.Option(help="Source file (instead of --split).")]
EvalRef = Annotated[Path | None, typer.Option(help="Reference file, line-aligned with --src.")]
Hub = Annotated[str | None, typer.Option(help="A hub test set instead, e.g. wmt/wmt14.")]
HubConfig = Annotated[str | None, typer.Option(help="Its configuration, e.g. fr-en.")]
HubSplit = Annotated[str, typer.Option(help="Its split.")]
EvalOutputDir = Annotated[
    Path | None, typer.Option(help="Where hypotheses and the report go (RUN/eval).")
]
JsonReport = Annotated[
    Path | None, typer.Option("--json", help="Write the JSON report to this file.")
]
MinBleu = Annotated[float | None, typer.Option(help="Exit with status 1 when BLEU is below this.")]
Baseline = Annotated[
    Path | None,
    typer.Option(help="An earlier JSON report on the same references to compare with."),
]
FailOnRegression = Annotated[
    bool, typer.Option(help="With --baseline: exit 1 when BLEU dropped significantly.")
]


@user_errors
@decode_options()
def evaluate(
    ctx: typer.Context,
    run: TrainedRun,
    split: EvalSplit = "test",
    src: EvalSrc = None,
    ref: EvalRef = None,
    hub: Hub = None,
    hub_config: HubConfig = None,
    hub_split: HubSplit = "test",
    options: DecodeOptions = DECODE_DEFAULTS,  # the shared ones: cli/decode_options.py
    output_dir: EvalOutputDir = None,
    json_path: JsonReport = None,
    min_bleu: MinBleu = None,
    baseline: Baseline = None,
    fail_on_regression: FailOnRegression = False,
) -> None:
    """Translate a test set (beam search) and score it: BLEU, chrF, TER with signatures.

    Examples:\n
      seq2seq evaluate --run runs/demo --split test\n
      seq2seq evaluate --run runs/demo --src newstest.en --ref newstest.fr --min-bleu 30\n
      seq2seq evaluate --run runs/new --json new.json --baseline old.json --fail-on-regression
    """
    from seq2seq.config import CorpusConfig
    from seq2seq.decode.evaluate import evaluate as run_evaluation

    if fail_on_regression and baseline is None:
        raise UserError("--fail-on-regression needs --baseline OLD_REPORT.json")
    hub_spec = CorpusConfig(hub=hub, hub_config=hub_config, split=hub_split) if hub else None
    terms, given = options.terms()
    report = run_evaluation(
        run,
        split=split,
        src_file=src,
        ref_file=ref,
        hub=hub_spec,
        checkpoint=options.checkpoint,
        output_dir=output_dir,
        report_path=json_path,
        device=options.device,
        decode=options.settings(run),
        baseline=baseline,
        glossary=terms,
        constraints=given,
        src_lang=options.src_lang,
        tgt_lang=options.tgt_lang,
        shortlist=options.use_shortlist,
    )
    _print_report(report)
    failed = _regressed(report.get("comparison"), fail_on_regression)
    if min_bleu is not None and report["bleu"] < min_bleu:
        print(f"error: BLEU {report['bleu']:.2f} is below --min-bleu {min_bleu}", file=sys.stderr)
        failed = True
    if failed:
        raise typer.Exit(1)


def _print_report(report: dict[str, Any]) -> None:
    """The scores with their signatures and the length report, as `evaluate` prints them."""
    from seq2seq.decode.evaluate import describe_lengths
    from seq2seq.decode.term_metrics import describe

    print(f"BLEU = {report['bleu']:.2f}  {report['bleu_signature']}")
    print(f"  {report['bleu_detail']}")
    print(f"chrF2 = {report['chrf']:.2f}  {report['chrf_signature']}")
    print(f"TER = {report['ter']:.2f}  {report['ter_signature']}")
    print(describe_lengths(report["length"]))
    if "terminology" in report:
        t = report["terminology"]
        print(f"terms used: {t['used']} of {t['terms']} ({100 * t['rate']:.1f}%)")
    if "term_metrics" in report:
        print("\n".join(describe(report["term_metrics"])))
    log.info(
        "%d sentences; hypotheses in %s, report in %s",
        report["sentences"],
        report["hypotheses_file"],
        report["report"],
    )


def _regressed(comparison: dict[str, Any] | None, fail_on_regression: bool) -> bool:
    """Print the comparison with the baseline; True when it should fail the job."""
    if comparison is None:
        return False
    verdict = "significant" if comparison["significant"] else "not significant"
    if comparison["delta"] == 0:
        verdict = "no difference"
    print(
        f"BLEU vs baseline: {comparison['baseline']:.2f} → {comparison['candidate']:.2f}, "
        f"Δ = {comparison['delta']:+.2f} (95% interval {comparison['ci_low']:+.2f} to "
        f"{comparison['ci_high']:+.2f}), p = {comparison['p_value']:.4f} ({verdict}; "
        f"paired bootstrap, {comparison['samples']} resamples)"
    )
    if fail_on_regression and comparison["delta"] < 0 and comparison["significant"]:
        print("error: BLEU dropped significantly against the baseline", file=sys.stderr)
        return True
    return False
