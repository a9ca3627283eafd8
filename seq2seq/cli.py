"""The `seq2seq` command: thin wrappers that parse options and call one job each."""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from . import __version__
from .errors import UserError

app = typer.Typer(
    name="seq2seq",
    help="Train, evaluate and run encoder-decoder Transformer translation models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

log = logging.getLogger("seq2seq")

F = TypeVar("F", bound=Callable[..., Any])


class _TqdmHandler(logging.Handler):
    """Log lines through tqdm so they do not tear progress bars apart."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        tqdm.write(self.format(record), file=sys.stderr)


def _setup_logging(quiet: bool) -> None:
    handler = _TqdmHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("seq2seq")
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING if quiet else logging.INFO)
    root.propagate = False


def _user_errors(fn: F) -> F:
    """Turn a UserError into one line on stderr and its exit code (a traceback with --debug)."""

    @wraps(fn)
    def wrapper(ctx: typer.Context, *args, **kwargs):
        try:
            return fn(ctx, *args, **kwargs)
        except UserError as e:
            if _options(ctx).get("debug"):
                traceback.print_exc()
            print(f"error: {e}", file=sys.stderr)
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def _options(ctx: typer.Context) -> dict[str, Any]:
    """Global options (--debug, --quiet) the callback stored on the root context."""
    return ctx.find_root().obj or {}


def _version(value: bool) -> None:
    if value:
        print(f"seq2seq {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option(help="Show tracebacks for errors.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only warnings and errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    ctx.obj = {"debug": debug, "quiet": quiet}
    _setup_logging(quiet)
    if quiet or not sys.stderr.isatty():
        # datasets' per-stage bars turn into hundreds of lines in a log file; ours stays.
        os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")


@app.command()
@_user_errors
def train(
    ctx: typer.Context,
    config: Annotated[Path, typer.Option("--config", "-c", help="YAML config file.")],
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="Override a config key: --set train.max_steps=100 (repeatable)."
        ),
    ] = None,
    run: Annotated[
        Path | None, typer.Option("--run", help="Run directory (overrides run_dir).")
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="Continue from the run directory's latest checkpoint.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option(help="Validate the config, build the model, print its size; no data.")
    ] = False,
) -> None:
    """Train a model as a config describes.

    Examples:\n
      seq2seq train --config configs/demo.yaml\n
      seq2seq train -c configs/en-fr.yaml --set train.max_steps=1000 --run runs/try\n
      seq2seq train -c configs/demo.yaml --resume
    """
    from .config import check_files, load_config

    overrides = list(set_ or [])
    if run is not None:
        overrides.append(f"run_dir={run}")
    cfg = load_config(config, overrides)
    if dry_run:
        _dry_run(cfg)
        return
    check_files(cfg, str(config))

    from .trainer import train as run_training

    state = run_training(cfg, resume=resume, progress=not _options(ctx).get("quiet"))
    best = f", best valid BLEU {state.best_bleu:.2f}" if state.best_bleu is not None else ""
    if state.stopped_by is not None:
        print(f"stopped by {state.stopped_by} at step {state.step}; resume with --resume")
        raise typer.Exit(128 + signal.Signals[state.stopped_by].value)
    print(f"trained {state.step} steps into {cfg.run_dir}{best}")


def _dry_run(cfg) -> None:
    from .model import Transformer, count_parameters, describe

    vocab = cfg.tokenizer.vocab_size
    model = Transformer(cfg.model, vocab, vocab, joint_vocab=cfg.tokenizer.joint)
    m = cfg.model
    print(
        f"config OK. model: {m.encoder_layers}+{m.decoder_layers} layers, d_model {m.d_model}, "
        f"{m.heads} heads, FFN {m.ffn_dim}, vocabulary {vocab}"
        f"{' (joint, tied)' if cfg.tokenizer.joint and m.tie_embeddings else ''}"
    )
    print(f"parameters: {count_parameters(model):,}")
    for line in describe(model):
        print("  " + line)


@app.command()
@_user_errors
def evaluate(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", "-r", help="Run directory of a trained model.")],
    split: Annotated[str, typer.Option(help="Split of the run's data: valid or test.")] = "test",
    src: Annotated[Path | None, typer.Option(help="Source file (instead of --split).")] = None,
    ref: Annotated[
        Path | None, typer.Option(help="Reference file, line-aligned with --src.")
    ] = None,
    checkpoint: Annotated[
        Path | None, typer.Option(help="Weights to use (default: best, else latest).")
    ] = None,
    output_dir: Annotated[
        Path | None, typer.Option(help="Where hypotheses and the JSON report go (RUN/eval).")
    ] = None,
    min_bleu: Annotated[
        float | None, typer.Option(help="Exit with status 1 when BLEU is below this.")
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    batch_size: Annotated[int | None, typer.Option(help="Sentences decoded together.")] = None,
) -> None:
    """Translate a test set and score it with sacrebleu (BLEU, chrF).

    Examples:\n
      seq2seq evaluate --run runs/demo --split test\n
      seq2seq evaluate --run runs/demo --src newstest.en --ref newstest.fr --min-bleu 30
    """
    from .evaluate import evaluate as run_evaluation

    report = run_evaluation(run, split, src, ref, checkpoint, output_dir, device, batch_size)
    print(f"BLEU = {report['bleu']:.2f}  {report['bleu_signature']}")
    print(f"  {report['bleu_detail']}")
    print(f"chrF2 = {report['chrf']:.2f}  {report['chrf_signature']}")
    log.info(
        "%d sentences; hypotheses in %s, report in %s",
        report["sentences"],
        report["hypotheses"],
        report["report"],
    )
    if min_bleu is not None and report["bleu"] < min_bleu:
        print(f"error: BLEU {report['bleu']:.2f} is below --min-bleu {min_bleu}", file=sys.stderr)
        raise typer.Exit(1)


@app.command()
@_user_errors
def translate(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", "-r", help="Run directory of a trained model.")],
    input: Annotated[Path | None, typer.Option("--input", "-i", help="Input file (stdin).")] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Output file (stdout).")
    ] = None,
    checkpoint: Annotated[
        Path | None, typer.Option(help="Weights to use (default: best, else latest).")
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    batch_size: Annotated[int | None, typer.Option(help="Sentences decoded together.")] = None,
) -> None:
    """Translate lines from stdin (or --input) to stdout (or --output), one line per line.

    Examples:\n
      echo "I have three cats." | seq2seq translate --run runs/demo\n
      seq2seq translate --run runs/demo --input in.en --output out.fr
    """
    from .translate import translate_files
    from .translator import load_translator

    translator, _ = load_translator(run, checkpoint, device, batch_size)
    translate_files(translator, input, output)


@app.command()
@_user_errors
def average(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", "-r", help="Run directory with checkpoints.")],
    last: Annotated[int, typer.Option(min=1, help="How many of the newest checkpoints.")] = 5,
    output: Annotated[
        Path | None,
        typer.Option(help="Where to write (default RUN/checkpoints/average_lastN.safetensors)."),
    ] = None,
) -> None:
    """Average the weights of the last N checkpoints into one (the paper averages the last 5).

    Examples:\n
      seq2seq average --run runs/en-fr-base --last 5\n
      seq2seq evaluate -r runs/demo --checkpoint runs/demo/checkpoints/average_last5.safetensors
    """
    from .checkpoint import average_last

    out, steps = average_last(run, last, output)
    print(f"averaged steps {', '.join(map(str, steps))} into {out}")


@app.command()
@_user_errors
def plot(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", "-r", help="Run directory with a metrics log.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="PNG to write (RUN/curves.png).")
    ] = None,
) -> None:
    """Draw training and validation curves (loss, BLEU, learning rate) as a PNG.

    Example:\n
      seq2seq plot --run runs/demo
    """
    from .plot import plot_curves

    print(plot_curves(run, output))


@app.command("demo-data")
@_user_errors
def demo_data(
    ctx: typer.Context,
    out: Annotated[Path, typer.Argument(help="Folder for the corpus files.")] = Path("data/demo"),
    train: Annotated[int, typer.Option(help="Training pairs.")] = 40000,
    valid: Annotated[int, typer.Option(help="Validation pairs.")] = 500,
    test: Annotated[int, typer.Option(help="Test pairs.")] = 1000,
    seed: Annotated[int, typer.Option(help="Generator seed.")] = 1234,
) -> None:
    """Write the built-in English→French demo corpus (numbers, dates, prices, counting).

    Example:\n
      seq2seq demo-data data/demo
    """
    from .demo_corpus import write_demo_corpus

    counts = write_demo_corpus(out, train, valid, test, seed)
    print(f"wrote {', '.join(f'{n} {split}' for split, n in counts.items())} pairs to {out}")


def main() -> None:
    """Console-script entry point."""
    app()
