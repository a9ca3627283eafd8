"""`seq2seq train`: train a model as a config describes (train/trainer.py)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.base import global_options, user_errors
from seq2seq.errors import UserError


@user_errors
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
    reset_dataloader: Annotated[
        bool,
        typer.Option(
            help="With --resume: restart the current epoch's batches (allows changing "
            "train.max_tokens, update_freq, seed or the training data)."
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option(help="Validate the config, build the model, print its size; no data.")
    ] = False,
    init_from: Annotated[
        Path | None,
        typer.Option(
            help="Start from this run's weights and tokenizer (an imported model, say) with a "
            "fresh optimizer; its model and tokenizer sections apply."
        ),
    ] = None,
) -> None:
    """Train a model as a config describes.

    Examples:\n
      seq2seq train --config configs/demo.yaml\n
      seq2seq train -c configs/en-fr.yaml --set train.max_steps=1000 --run runs/try\n
      seq2seq train -c configs/demo.yaml --resume\n
      seq2seq train -c ft.yaml --init-from runs/opus-mt-en-fr   # fine-tune
    """
    from seq2seq.config import check_files, load_config

    overrides = list(set_ or [])
    if run is not None:
        overrides.append(f"run_dir={run}")
    cfg = load_config(config, overrides)
    init = None
    if init_from is not None:
        from seq2seq.run.rundir import config_for_init

        cfg, init = config_for_init(cfg, init_from)
    if dry_run:
        _dry_run(cfg)
        return
    check_files(cfg, str(config))

    from seq2seq.train.trainer import train as run_training

    if reset_dataloader and not resume:
        raise UserError("--reset-dataloader only applies with --resume")
    state = run_training(
        cfg,
        resume=resume,
        progress=not global_options(ctx).get("quiet"),
        reset_dataloader=reset_dataloader,
        init=init,
    )
    best = f", best valid BLEU {state.best_bleu:.2f}" if state.best_bleu is not None else ""
    if state.stopped_by is not None:
        print(f"stopped by {state.stopped_by} at step {state.step}; resume with --resume")
        raise typer.Exit(128 + signal.Signals[state.stopped_by].value)
    print(f"trained {state.step} steps into {cfg.run_dir}{best}")


def _dry_run(cfg) -> None:
    from seq2seq.model.transformer import Vocabulary, build_model, count_parameters, describe

    vocab = cfg.tokenizer.vocab_size
    shape = Vocabulary(vocab, vocab, cfg.tokenizer.joint, pad_id=cfg.tokenizer.pad_id)
    model = build_model(cfg.model, shape)
    m = cfg.model
    print(
        f"config OK. model: {m.encoder_layers}+{m.decoder_layers} layers, d_model {m.d_model}, "
        f"{m.heads} heads, FFN {m.ffn_dim}, vocabulary {vocab}"
        f"{' (joint, tied)' if cfg.tokenizer.joint and m.tie_embeddings else ''}"
    )
    print(f"parameters: {count_parameters(model):,}")
    for line in describe(model):
        print("  " + line)
    print(tokens_per_update(cfg.train.max_tokens, cfg.train.update_freq, _world_size()))


PAPER_TOKENS = 25_000


def _world_size() -> int:
    """The number of training processes: torchrun's WORLD_SIZE, else one."""
    from seq2seq.train.distributed import from_env

    return from_env().world_size


def tokens_per_update(max_tokens: int, update_freq: int, world_size: int) -> str:
    """The effective batch beside the paper's (§5.1: ~25,000 source and 25,000 target tokens)."""
    total = max_tokens * update_freq * world_size
    line = (
        f"tokens per update: {total:,} = max_tokens {max_tokens:,} × update_freq {update_freq} "
        f"× world size {world_size} (padding included)"
    )
    # Said where it is easy to get wrong: scaling a one-process config out under torchrun.
    if world_size > 1 and not 0.8 <= total / PAPER_TOKENS <= 1.25:
        per_process = -(-PAPER_TOKENS // (update_freq * world_size))
        line += (
            f"; {total / PAPER_TOKENS:.2g}× the paper's ~25,000: train.max_tokens {per_process:,} "
            "would keep it at this world size and update_freq"
        )
    return line
