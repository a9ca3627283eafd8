"""`seq2seq distill`: a teacher's translations of the student's data, then the student."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.base import Device, global_options, user_errors
from seq2seq.errors import UserError


@user_errors
def distill(
    ctx: typer.Context,
    teacher: Annotated[Path, typer.Option(help="Run directory of the teacher (own or imported).")],
    config: Annotated[
        Path,
        typer.Option(
            "--config", "-c", help="The student's YAML config; its data.train is distilled."
        ),
    ],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a student config key (repeatable).")
    ] = None,
    mono: Annotated[
        list[Path] | None,
        typer.Option(
            help="A monolingual source-language file to distil too (repeatable; 1-best kept)."
        ),
    ] = None,
    beam: Annotated[int, typer.Option(help="The teacher's beam width.")] = 4,
    nbest: Annotated[
        int,
        typer.Option(
            help="Hypotheses a line; the one with the best chrF against the reference is kept."
        ),
    ] = 4,
    backward: Annotated[
        Path | None,
        typer.Option(
            help="A target→source run: drop the pairs it scores worst (cross-entropy filter)."
        ),
    ] = None,
    filter_percent: Annotated[
        float | None,
        typer.Option(help="With --backward: the share of pairs dropped, in % (default 5)."),
    ] = None,
    shard: Annotated[
        str | None,
        typer.Option(
            help="K/N: distil only every N-th chunk from the K-th (default: torchrun's rank/world)."
        ),
    ] = None,
    chunk_lines: Annotated[
        int, typer.Option(help="Lines a chunk; a killed run redoes at most one chunk.")
    ] = 1000,
    src_lang: Annotated[
        str | None, typer.Option(help="The teacher's source code if it differs (NLLB `eng_Latn`).")
    ] = None,
    tgt_lang: Annotated[
        str | None, typer.Option(help="The teacher's target code if it differs (NLLB `fra_Latn`).")
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="Sentences the teacher decodes together.")
    ] = None,
    data_only: Annotated[
        bool,
        typer.Option(help="Stop after writing the distilled corpus; do not train the student."),
    ] = False,
    device: Device = "auto",
) -> None:
    """Distil a student from a teacher (sequence-level knowledge distillation, Kim & Rush 2016).

    The teacher translates the source side of the student's data.train (and any --mono files)
    with beam search; for each parallel line the n-best hypothesis closest to the reference by
    chrF is kept. The corpus, its provenance and a report go to RUN_DIR/distill/, in chunks a
    killed run continues from; then the student trains on it.

    Examples:\n
      seq2seq distill --teacher runs/enfr-small -c configs/enfr-student.yaml\n
      seq2seq distill --teacher runs/enfr-small -c student.yaml --shard 0/2 --data-only\n
      seq2seq distill --teacher runs/opus-mt-en-fr -c student.yaml --backward runs/fr-en
    """
    from seq2seq.config import check_files, load_config
    from seq2seq.distill.chunks import parse_shard
    from seq2seq.distill.pipeline import DistillOptions, student_config
    from seq2seq.distill.pipeline import distill as run_distill

    _check_options(beam, nbest, filter_percent, chunk_lines, backward)
    cfg = load_config(config, list(set_ or []))
    check_files(cfg, str(config))
    opts = DistillOptions(
        teacher=teacher,
        beam=beam,
        nbest=nbest,
        mono=tuple(mono or ()),
        backward=backward,
        filter_percent=5.0 if filter_percent is None else filter_percent,
        chunk_lines=chunk_lines,
        shard=parse_shard(shard),
        languages=(src_lang, tgt_lang),
        device=device,
        batch_size=batch_size,
        progress=not global_options(ctx).get("quiet"),
    )
    result = run_distill(cfg, opts)
    if result.files is None:
        k, n = opts.shard
        print(
            f"shard {k}/{n} done; {result.left} chunks of other shards still to make. When every "
            "shard is done, run the command again without --shard to join the chunks and train"
        )
        return
    _print_report(result.report, result.files)
    if data_only:
        return
    _train(ctx, student_config(cfg, result.files), result.files)


def _check_options(
    beam: int, nbest: int, percent: float | None, chunk_lines: int, backward
) -> None:
    if beam < 1 or not 1 <= nbest <= beam:
        raise UserError(f"--nbest ({nbest}) must be between 1 and --beam ({beam})")
    if percent is not None and backward is None:
        raise UserError("--filter-percent needs --backward (the run that scores the pairs)")
    if percent is not None and not 0 <= percent < 100:
        raise UserError(f"--filter-percent must be in [0, 100), not {percent}")
    if chunk_lines < 1:
        raise UserError("--chunk-lines must be at least 1")


def _print_report(report: dict, files: tuple[Path, Path]) -> None:
    chrf = ""
    if report.get("chrf_kept") is not None:
        chrf = f"; chrF kept {report['chrf_kept']:.2f} vs 1-best {report['chrf_1best']:.2f}"
    unscored = report.get("dropped_unscored")
    too_long = f", too long for the backward run {unscored}" if unscored else ""
    print(
        f"distilled {report['pairs_out']:,} of {report['pairs_in']:,} pairs into {files[0].parent} "
        f"(empty {report['dropped_empty']}, filtered {report['dropped_by_filter']}{too_long})"
        f"{chrf}"
    )


def _train(ctx: typer.Context, cfg, files: tuple[Path, Path]) -> None:
    """Train (or go on training) the student on the distilled corpus, then build its lexical
    shortlist from that corpus (what the student learned to say) for `--shortlist`."""
    from seq2seq.decode.shortlist import build_run_shortlist
    from seq2seq.run.checkpoint import latest_checkpoint
    from seq2seq.train.trainer import train as run_training

    resume = latest_checkpoint(cfg.run_dir) is not None
    state = run_training(cfg, resume=resume, progress=not global_options(ctx).get("quiet"))
    print(f"trained the student {state.step} steps into {cfg.run_dir}")
    if state.stopped_by is None:
        path, _ = build_run_shortlist(cfg.run_dir, *files)
        print(f"shortlist for --shortlist written to {path}")
