"""What a training run starts from: its run directory and tokenized data (`open_run`), then,
around the model built from them, the optimizer, schedule and loss scaler, restored from the
latest checkpoint on resume, the metrics log and the objective the loop calls (`set_up`)."""

from __future__ import annotations

import inspect
import logging
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch.nn.parallel import DistributedDataParallel

from seq2seq.config import Config
from seq2seq.data.corpus import Prepared, prepare_data
from seq2seq.errors import UserError
from seq2seq.model.transformer import count_parameters
from seq2seq.run.checkpoint import Checkpoint, load_state, load_weights
from seq2seq.run.rundir import Change, InitFrom, copy_tokenizer, prepare_run_dir
from seq2seq.run.runlog import MetricsLog
from seq2seq.runtime import autocast_dtype, fast_math, set_threads
from seq2seq.train import distributed
from seq2seq.train.ema import WeightEMA, load_raw_weights
from seq2seq.train.loss import TranslationLoss
from seq2seq.train.schedule import inverse_sqrt_scheduler, set_peak_lr
from seq2seq.train.state import TrainState, restore

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class RunStart:
    """A run directory checked (and written by rank 0) and its data tokenized: what the model
    is built from."""

    cfg: Config
    info: distributed.Dist
    device: torch.device
    amp_dtype: torch.dtype | None
    data: Prepared
    latest: Checkpoint | None  # the checkpoint to resume from
    changes: list[Change]  # settings the config changes since that checkpoint
    reset_dataloader: bool
    init: InitFrom | None


@dataclass(kw_only=True)
class Training:
    """Everything the loop trains with, built and (on resume) restored."""

    cfg: Config
    model: torch.nn.Module
    net: torch.nn.Module  # the objective: model, fused output layer and loss, maybe wrapped
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    data: Prepared
    device: torch.device
    amp_dtype: torch.dtype | None
    state: TrainState
    info: distributed.Dist
    metrics: MetricsLog
    ema: WeightEMA | None = None  # the weights' moving average, when train.ema_decay is set

    def autocast(self) -> AbstractContextManager:
        """The autocast context of the run's precision (none for fp32)."""
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)


def open_run(
    cfg: Config,
    *,
    info: distributed.Dist,
    device: torch.device,
    resume: bool,
    reset_dataloader: bool,
    init: InitFrom | None,
) -> RunStart:
    """Check and prepare the run directory, then tokenize the data (rank 0 first)."""
    tc = cfg.train
    amp_dtype = autocast_dtype(device, tc.precision)
    fast_math(device, tc.precision)
    set_threads(tc.threads)
    with distributed.main_first(info):
        latest, reuse_tokenizer, changes = prepare_run_dir(
            cfg, resume, write=info.is_main, reset_dataloader=reset_dataloader
        )
        if init is not None and latest is None:
            if info.is_main:
                copy_tokenizer(init, cfg)
            reuse_tokenizer = True
        torch.manual_seed(tc.seed)
        # Other ranks load what rank 0 has just trained and cached.
        data = prepare_data(cfg, reuse_tokenizer or not info.is_main, may_train=info.is_main)
    latest = agree_on_resume(latest, info)
    return RunStart(
        cfg=cfg,
        info=info,
        device=device,
        amp_dtype=amp_dtype,
        data=data,
        latest=latest,
        changes=changes,
        reset_dataloader=reset_dataloader,
        init=init,
    )


def agree_on_resume(latest: Checkpoint | None, info: distributed.Dist) -> Checkpoint | None:
    """The checkpoint every rank resumes from: each rank's own listing must name rank 0's.

    Each rank lists the run directory itself; on a shared filesystem a node whose listing lags
    (after an elastic restart, say) finds an older step, and DDP would then average gradients of
    ranks at different steps, epochs and optimizer states without a word. Every rank sees every
    rank's choice, so all stop together, with the same message, rather than hang."""
    steps = distributed.gather(None if latest is None else latest.step, info)
    if len(set(steps)) > 1:
        found = ", ".join(
            f"rank {r}: {'none' if s is None else f'step {s}'}" for r, s in enumerate(steps)
        )
        raise UserError(
            f"the ranks found different checkpoints to resume from ({found}); rank 0's is step "
            f"{steps[0]}. The run directory must be one shared directory that every node sees "
            "the same (a lagging network filesystem?); restart when it does"
        )
    return latest


def set_up(run: RunStart, model: torch.nn.Module) -> Training:
    """Start `model` (on the run's device) from --init-from weights or the latest checkpoint, and
    build what trains it."""
    cfg, tc, info, device = run.cfg, run.cfg.train, run.info, run.device
    if run.init is not None and run.latest is None:
        load_weights(model, run.init.weights)
        log.info("starting from %s", run.init.weights)
    if info.rank:
        torch.manual_seed(tc.seed + info.rank)  # same initial weights, own dropout stream
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=tc.lr,
        betas=tc.betas,
        eps=tc.eps,
        weight_decay=tc.weight_decay,
        # One fused kernel on CUDA; on CPU the multi-tensor path beats the per-parameter loop.
        fused=device.type == "cuda",
        foreach=device.type != "cuda",
    )
    scheduler = inverse_sqrt_scheduler(optimizer, tc.warmup_steps)
    scaler = torch.amp.GradScaler(device.type, enabled=run.amp_dtype == torch.float16)
    state = TrainState()
    ema = WeightEMA(model, cfg.train.ema_decay) if cfg.train.ema_decay else None
    if run.latest is not None:
        state = _resume(run, model, optimizer, scheduler, scaler, ema)
    metrics = _open_metrics(run, state)
    log.info(
        "model: %s parameters; device %s%s%s",
        f"{count_parameters(model):,}",
        device,
        f" with {run.amp_dtype} autocast" if run.amp_dtype else "",
        f"; {info.world_size} processes" if info.enabled else "",
    )
    net = _objective(model, run)
    return Training(
        cfg=cfg,
        model=model,
        net=net,
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=scaler,
        data=run.data,
        device=device,
        amp_dtype=run.amp_dtype,
        state=state,
        info=info,
        metrics=metrics,
        ema=ema,
    )


def _resume(run: RunStart, model, optimizer, scheduler, scaler, ema) -> TrainState:
    latest = run.latest
    load_weights(model, latest.weights)
    saved = load_state(latest.state)
    try:
        state = restore(
            saved, optimizer=optimizer, scheduler=scheduler, scaler=scaler, info=run.info
        )
        if ema is not None and "raw_weights" in saved:
            ema.load_raw(model, saved["raw_weights"])
        elif ema is not None:  # EMA switched on at this resume: it starts from these weights
            ema.reset(model)
        elif "raw_weights" in saved:
            # EMA switched off at this resume: go on from the raw weights, not their average.
            load_raw_weights(model, saved["raw_weights"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise UserError(f"{latest.state} is not a trainer state that can be resumed: {e}") from None
    log.info("resumed from %s (step %d)", latest.weights, state.step)
    # The config wins over the saved hyperparameters; Adam's moments carry on.
    _apply_optimizer_settings(optimizer, scheduler, run.cfg.train)
    return state


def _apply_optimizer_settings(optimizer: torch.optim.Optimizer, scheduler, tc) -> None:
    """Adam's hyperparameters and the schedule's peak rate as the config says them."""
    for group in optimizer.param_groups:
        group.update(betas=tuple(tc.betas), eps=tc.eps, weight_decay=tc.weight_decay)
    set_peak_lr(scheduler, tc.lr)


def _open_metrics(run: RunStart, state: TrainState) -> MetricsLog:
    """The metrics log: cut back to the resumed step, with what a resume changes logged (and,
    with --reset-dataloader, done to `state`); a new run's starts with the data report."""
    cfg, resumed = run.cfg, run.latest is not None
    metrics = MetricsLog(cfg.run_dir, cfg.train.tensorboard, enabled=run.info.is_main)
    metrics.truncate((state.step, state.epoch, state.batch_in_epoch) if resumed else None)
    for change in run.changes:
        log.info("resumed with %s = %s (was %s)", change.key, change.new, change.old)
        metrics.write(state.step, change.record())
    if resumed and run.reset_dataloader:
        log.info("--reset-dataloader: epoch %d restarts from its first batch", state.epoch + 1)
        metrics.write(state.step, {"event": "reset_dataloader", "epoch": state.epoch})
        state.batch_in_epoch = 0
    if not resumed:  # a resumed run's log holds this record already
        # Its own split: readers of "train" records expect loss and lr in them.
        data = {k: r.record() for k, r in run.data.reports.items()}
        metrics.write(0, {"split": "data", **data})
    return metrics


def _objective(model: torch.nn.Module, run: RunStart) -> torch.nn.Module:
    """Model + fused output layer and loss as one forward: what DDP and compile wrap."""
    tc, info, device = run.cfg.train, run.info, run.device
    net: torch.nn.Module = TranslationLoss(model, tc.label_smoothing, tc.alignment)
    if info.enabled:
        # Gradients as views into DDP's all-reduce buckets: one copy of the gradients a
        # process instead of two, and no copy between them (kept views: see _Loop._zero_grad).
        net = DistributedDataParallel(
            net,
            device_ids=[device.index] if device.type == "cuda" else None,
            gradient_as_bucket_view=True,
            **_NO_BUFFER_SYNC,
        )
    if tc.compile:
        # Automatic dynamic shapes: after the first new batch shape, lengths become symbolic,
        # so bucketed, variable-length batches cost a bounded number of recompiles.
        net = torch.compile(net)
    return net


# The only buffer is the fixed sinusoid table: nothing to broadcast every forward. torch 2.13
# renames the switch (and warns about the old name); older ones know only the old name.
_NO_BUFFER_SYNC = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    else {"broadcast_buffers": False}
)
