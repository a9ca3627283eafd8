"""The training loop: batches → model → label-smoothed loss → Adam update, with validation,
checkpoints and logs. One function, `train`, takes a validated Config and does the whole job,
in one process or in each of the processes `torchrun` starts."""

from __future__ import annotations

import inspect
import logging
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import datasets
import sacrebleu
import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from . import distributed, elastic
from .batching import Batch, epoch_batches, iterate, loader, token_budget_batches, update_groups
from .checkpoint import (
    average_last,
    checkpoint_dir,
    list_checkpoints,
    load_state,
    load_weights,
    prune,
    save_best,
    save_checkpoint,
)
from .config import Config
from .data import Prepared, lengths, prepare_data
from .errors import UserError
from .loss import TranslationLoss, label_smoothed_loss
from .model import build_model, count_parameters
from .rundir import InitFrom, copy_tokenizer, prepare_run_dir
from .runlog import MetricsLog, json_number, memory
from .runtime import autocast_dtype, fast_math, resolve_device, set_threads
from .schedule import inverse_sqrt_scheduler, set_peak_lr
from .stopping import StopRequests
from .tokenizer import DEFAULT_IDS, SpecialIds
from .translator import Translator

log = logging.getLogger(__name__)


@dataclass
class TrainState:
    """Where training is: enough, with the checkpointed tensors, to continue exactly."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` consumed (by all processes together)
    best_bleu: float | None = None
    best_loss: float | None = None
    bad_evals: int = 0  # validations in a row without a new best (early stopping)
    stopped_by: str | None = field(default=None, compare=False)  # signal name, if any


def train(
    cfg: Config,
    resume: bool = False,
    progress: bool = True,
    reset_dataloader: bool = False,
    init: InitFrom | None = None,
) -> TrainState:
    """Train the model a config describes into its run directory; return the final state.

    `reset_dataloader`: a resumed run restarts its current epoch's batches from the first
    (needed to change a setting that reorders them, such as `train.max_tokens`). With `init`
    (rundir.config_for_init), a new run starts from that run's weights and tokenizer with a
    fresh optimizer; a run with checkpoints of its own resumes from them.
    """
    info = distributed.from_env()
    device = distributed.device_for(info, resolve_device(cfg.train.device))
    distributed.setup(info, device)
    try:
        with elastic.one_error_per_job(info):
            if info.enabled and info.is_main:
                elastic.warn_if_restarts_share_the_store()
            resume = elastic.resuming(resume, info, device)
            return _train(
                cfg, resume, progress and info.is_main, info, device, reset_dataloader, init
            )
    finally:
        distributed.teardown(info)


def _train(
    cfg: Config,
    resume: bool,
    progress: bool,
    info: distributed.Dist,
    device: torch.device,
    reset_dataloader: bool,
    init: InitFrom | None = None,
) -> TrainState:
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
    model = build_model(cfg.model, data.tokenizer).to(device)
    if init is not None and latest is None:
        load_weights(model, init.weights)
        log.info("starting from %s", init.weights)
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
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
    state = TrainState()
    if latest is not None:
        load_weights(model, latest.weights)
        saved = load_state(latest.state)
        try:
            optimizer.load_state_dict(saved["optimizer"])
            scheduler.load_state_dict(saved["scheduler"])
            if saved["scaler"] and scaler.is_enabled():  # empty when saved without fp16
                scaler.load_state_dict(saved["scaler"])
            state = TrainState(**saved["train"])
            _set_rng_state(saved["rng"], info)
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            raise UserError(
                f"{latest.state} is not a trainer state that can be resumed: {e}"
            ) from None
        log.info("resumed from %s (step %d)", latest.weights, state.step)
        # The config wins over the saved hyperparameters; Adam's moments carry on.
        _apply_optimizer_settings(optimizer, scheduler, tc)
    metrics = MetricsLog(cfg.run_dir, tc.tensorboard, enabled=info.is_main)
    metrics.truncate(
        (state.step, state.epoch, state.batch_in_epoch) if latest is not None else None
    )
    for change in changes:
        log.info("resumed with %s = %s (was %s)", change.key, change.new, change.old)
        metrics.write(state.step, change.record())
    if latest is not None and reset_dataloader:
        log.info("--reset-dataloader: epoch %d restarts from its first batch", state.epoch + 1)
        metrics.write(state.step, {"event": "reset_dataloader", "epoch": state.epoch})
        state.batch_in_epoch = 0

    log.info(
        "model: %s parameters; device %s%s%s",
        f"{count_parameters(model):,}",
        device,
        f" with {amp_dtype} autocast" if amp_dtype else "",
        f"; {info.world_size} processes" if info.enabled else "",
    )
    # DDP and compile wrap the objective (model + fused output layer and loss) as one forward.
    net: torch.nn.Module = TranslationLoss(model, tc.label_smoothing)
    if info.enabled:
        # Gradients as views into DDP's all-reduce buckets: one copy of the gradients a
        # process instead of two, and no copy between them (kept views: see _zero_grad).
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
    loop = _Loop(
        cfg, model, net, optimizer, scheduler, scaler, data, device, amp_dtype, state, info, metrics
    )
    if latest is None:  # a resumed run's log holds this record already
        # Its own split: readers of "train" records expect loss and lr in them.
        metrics.write(0, {"split": "data", **{k: r.record() for k, r in data.reports.items()}})
    loop.run(progress)
    return loop.state


# The only buffer is the fixed sinusoid table: nothing to broadcast every forward. torch 2.13
# renames the switch (and warns about the old name); older ones know only the old name.
_NO_BUFFER_SYNC = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    else {"broadcast_buffers": False}
)


def _apply_optimizer_settings(optimizer: torch.optim.Optimizer, scheduler, tc) -> None:
    """Adam's hyperparameters and the schedule's peak rate as the config says them."""
    for group in optimizer.param_groups:
        group.update(betas=tuple(tc.betas), eps=tc.eps, weight_decay=tc.weight_decay)
    set_peak_lr(scheduler, tc.lr)


class _Loop:
    """The state a training run carries from update to update."""

    def __init__(
        self,
        cfg,
        model,
        net,
        optimizer,
        scheduler,
        scaler,
        data: Prepared,
        device,
        amp_dtype,
        state: TrainState,
        info: distributed.Dist,
        metrics: MetricsLog,
    ):
        self.cfg, self.tc = cfg, cfg.train
        self.model, self.net = model, net
        self.optimizer, self.scheduler, self.scaler = optimizer, scheduler, scaler
        self.data, self.device, self.amp_dtype, self.state, self.info = (
            data,
            device,
            amp_dtype,
            state,
            info,
        )
        self.run_dir = Path(cfg.run_dir)
        self.metrics = metrics
        # Validation BLEU is a trend to watch, so greedy: a fraction of beam search's cost.
        greedy = cfg.decode.model_copy(update={"beam_size": 1, "nbest": 1})
        self.translator = Translator(
            model, data.tokenizer, greedy, device, amp_dtype=amp_dtype, src_lang=cfg.data.src_lang
        )
        self.src_lens, self.tgt_lens = lengths(data.train)  # tgt_len: target tokens + EOS
        self.token_ds = data.train.select_columns(["src_ids", "tgt_ids"])
        cuda = device.type == "cuda"
        self.workers = self.tc.num_workers if self.tc.num_workers is not None else int(cuda)
        self.pin = cuda
        # Log-window accumulators stay on the device so an update never waits for a .item().
        self._window_loss = torch.zeros((), dtype=torch.float64, device=device)
        self._window_tokens = 0.0  # global, all processes
        self._window_local_tokens = 0
        self._window_start = time.perf_counter()
        self._grad_norm = torch.zeros((), device=device)
        self._lr = 0.0  # the rate the last update used
        # A resumed run starts at a saved (and, if it was the last step, validated) step.
        self._last_eval_step = self._last_save_step = state.step if state.step else -1
        self.stopping = StopRequests(self.tc.max_minutes)
        # Skipped updates in a row, and whether a loss or a gradient made them non-finite.
        self._nonfinite = 0
        self._nonfinite_kinds: set[str] = set()

    def _autocast(self):
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    # ------------------------------------------------------------------ the loop

    def run(self, progress: bool = True) -> None:
        """Train to the end (max_steps, max_epochs, early stop), a signal or the time budget."""
        with self.stopping.catching_signals():
            self._run(progress)

    def _run(self, progress: bool) -> None:
        st, tc = self.state, self.tc
        bar = tqdm(
            total=tc.max_steps,
            initial=st.step,
            desc="train",
            unit="step",
            dynamic_ncols=True,
            mininterval=1.0 if sys.stderr.isatty() else 30.0,
            file=sys.stderr,
            disable=not progress,
        )
        self.model.train()
        stop = st.step >= tc.max_steps
        try:
            updates = self._updates()
            while not stop:
                update = next(updates, None)
                if update is None:
                    break  # max_epochs reached
                step = st.step
                stop = self._update(*update)
                if st.step == step:
                    continue  # skipped: no new step to log, validate or save
                bar.update(1)
                if st.step % tc.log_every == 0:
                    bar.set_postfix_str(self._log_train())
                if st.step % tc.eval_every == 0 and self._validate():
                    stop = True
                if st.step % tc.save_every == 0:
                    self._save()
                stop = stop or st.step >= tc.max_steps
        finally:
            bar.close()
        if self._nonfinite >= tc.max_nonfinite:
            # Skipped updates changed neither weights nor optimizer: this is the last good state
            # (with the data position past the batches that failed).
            self._save()
            raise self._nonfinite_error()
        if self.stopping.signal is not None:
            st.stopped_by = self.stopping.signal_name
            if self._last_save_step != st.step:
                self._save()
            log.info(
                "stopped by %s at step %d; checkpoint saved: continue with --resume",
                st.stopped_by,
                st.step,
            )
            return
        if self._last_eval_step != st.step:
            self._validate()
        if self._last_save_step != st.step:
            self._save()
        if tc.average_last and self._on_main(self._average):
            self._save()  # again: the step's saved state must know the new best, for --resume
        log.info("training finished at step %d (epoch %d)", st.step, st.epoch + 1)

    def _updates(self) -> Iterator[tuple[list[Batch], int]]:
        """This process's micro-batches for each update, from the saved data position on, with
        the target tokens of the whole update (every process's batches): the loss is a mean
        over them. Batches are a pure function of the lengths, so no process need ask."""
        st, tc, info = self.state, self.tc, self.info
        while tc.max_epochs is None or st.epoch < tc.max_epochs:
            batches = epoch_batches(self.src_lens, self.tgt_lens, tc.max_tokens, tc.seed, st.epoch)
            needed = info.world_size * tc.update_freq
            if len(batches) < needed:
                raise UserError(
                    f"an epoch has {len(batches)} batches but one update needs {needed} "
                    f"({info.world_size} processes × update_freq {tc.update_freq}); "
                    "lower train.max_tokens or update_freq, or use more data"
                )
            groups = update_groups(
                len(batches), st.batch_in_epoch, info.world_size, info.rank, tc.update_freq
            )
            mine = [batches[i] for _, indices in groups for i in indices]
            batch_iter = iter(
                loader(self.token_ds, mine, self.workers, self.pin, self.data.tokenizer.ids)
            )
            first = st.batch_in_epoch
            for end, indices in groups:
                micro = [next(batch_iter) for _ in indices]
                tokens = sum(int(self.tgt_lens[b].sum()) for b in batches[first:end])
                st.batch_in_epoch = first = end
                yield micro, tokens
            st.epoch += 1
            st.batch_in_epoch = 0

    def _update(self, micro: list[Batch], global_tokens: int) -> bool:
        """One optimizer step over this process's micro-batches (none if the loss or gradient is
        not finite); True when training must stop after it."""
        local_tokens = sum(b.ntokens for b in micro)
        # DDP averages gradients over processes; scale so the result is the global token mean.
        loss = accumulate_gradients(
            self.net,
            micro,
            scale=self.info.world_size / global_tokens,
            device=self.device,
            autocast=self._autocast,
            scaler=self.scaler,
            ddp=self.info.enabled,
        )
        self.scaler.unscale_(self.optimizer)
        max_norm = self.tc.clip_norm if self.tc.clip_norm > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        # Whether to step must be known before stepping: a wait for the device each update.
        # The gradients are all-reduced already, so every process decides alike.
        norm = grad_norm.item()
        if not math.isfinite(norm):
            self._skip(loss, norm, global_tokens)
            stop = self._nonfinite >= self.tc.max_nonfinite
            return self.stopping.agreed(self.info, self.device) or stop
        self._nonfinite = 0
        self._nonfinite_kinds.clear()
        self._window_loss += loss
        self._grad_norm = grad_norm
        self._lr = self.optimizer.param_groups[0]["lr"]
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self._zero_grad()
        self.scheduler.step()
        self.state.step += 1
        self._window_tokens += global_tokens
        self._window_local_tokens += local_tokens
        # Asked after the update, so a signal or the deadline during it makes it the last.
        return self.stopping.agreed(self.info, self.device)

    def _zero_grad(self) -> None:
        # Under DDP the gradients are views into its buckets: zeroed in place they stay views;
        # set to None, every backward would allocate fresh ones and copy them into the buckets.
        self.optimizer.zero_grad(set_to_none=not self.info.enabled)

    def _skip(self, loss: torch.Tensor, grad_norm: float, global_tokens: float) -> None:
        """Drop an update whose gradient is not finite: weights, Adam's moments and the lr
        schedule stay as they were, and (as in fairseq) the step is not counted."""
        self.scaler.update()  # after an fp16 overflow, a lower loss scale for the next update
        self._zero_grad()
        # Every process is here together, so one more small collective on this rare path
        # tells whose loss was not finite.
        local = loss.item()
        loss_sum, bad_losses = distributed.all_sum(
            [local, float(not math.isfinite(local))], self.info, self.device
        )
        if self.scaler.is_enabled() and not bad_losses:
            return  # an fp16 gradient overflow: the scaler's business, not a fault
        self._nonfinite += 1
        self._nonfinite_kinds.add("loss" if bad_losses else "gradient")
        st, per_token = self.state, loss_sum / global_tokens
        why = f"loss {per_token}" if bad_losses else f"gradient norm {grad_norm}"
        log.warning(
            "update after step %d skipped, weights unchanged: non-finite %s (%d in a row; %d stop "
            "training)",
            st.step,
            why,
            self._nonfinite,
            self.tc.max_nonfinite,
        )
        self._write_metrics(
            {
                "event": "nonfinite",
                "loss": json_number(per_token),
                "grad_norm": json_number(grad_norm),
                "in_a_row": self._nonfinite,
                "epoch": st.epoch,
                "batch_in_epoch": st.batch_in_epoch,
            }
        )

    def _nonfinite_error(self) -> UserError:
        step, tc = self.state.step, self.tc
        kinds = {"loss": "losses", "gradient": "gradients"}
        what = " or ".join(kinds[k] for k in sorted(self._nonfinite_kinds, reverse=True))
        # A resumed run restores its saved schedule, so a lower lr needs a fresh run.
        fixes = ["start a fresh run with a lower train.lr"]
        if tc.clip_norm == 0:
            fixes.append("enable clipping (train.clip_norm)")
        if self.scaler.is_enabled():
            fixes.append("train with bf16 or fp32 (train.precision)")
        return UserError(
            f"training stopped at step {step}: {self._nonfinite} non-finite {what} in a row "
            f"(last good state saved at step {step}); {', '.join(fixes)} or check the data"
        )

    # ------------------------------------------------------------------ logs

    def _log_train(self) -> str:
        elapsed = time.perf_counter() - self._window_start
        loss_sum, _ = distributed.all_sum(
            [self._window_loss.item(), self._window_local_tokens], self.info, self.device
        )
        loss = loss_sum / max(self._window_tokens, 1)
        lr = self._lr
        tok_s = self._window_tokens / elapsed if elapsed > 0 else 0.0
        record = {
            "split": "train",
            "loss": loss,
            "lr": lr,
            "tokens_per_s": tok_s,
            "tokens": self._window_tokens,  # target tokens of this window (all processes)
            "grad_norm": self._grad_norm.item(),
            "epoch": self.state.epoch,
            **memory(self.device),
        }
        self._write_metrics(record)
        self._window_loss.zero_()
        self._window_tokens = 0.0
        self._window_local_tokens = 0
        self._window_start = time.perf_counter()
        return f"loss={loss:.3f} lr={lr:.2e} tok/s={tok_s:,.0f}"

    def _write_metrics(self, record: dict[str, Any]) -> None:
        self.metrics.write(self.state.step, record)

    # ------------------------------------------------------------------ validation, saving

    def _validate(self) -> bool:
        """Validate on rank 0 (the others wait); True when early stopping says stop."""
        self._last_eval_step = self.state.step

        def validate() -> bool:
            if self.data.valid is None:
                return False
            start = time.perf_counter()
            stop = self._validate_main()
            self._window_start += time.perf_counter() - start  # tok/s counts training only
            return stop

        return bool(self._on_main(validate))

    def _valid_metrics(self) -> dict[str, float]:
        """Loss, NLL, perplexity and (greedy, on the first sentences) BLEU of the model now."""
        tc, valid = self.tc, self.data.valid
        metrics = validation_loss(
            self.model, valid, tc, self.device, self._autocast, self.data.tokenizer.ids
        )
        n = min(tc.valid_bleu_sentences, len(valid))
        if n:
            rows = valid.select(range(n))
            hyps = self.translator.translate(rows["src"])
            metrics["bleu"] = sacrebleu.corpus_bleu(hyps, [rows["tgt"]]).score
        return metrics

    def _beats_best(self, metrics: dict[str, float]) -> bool:
        st = self.state
        if "bleu" in metrics:
            return st.best_bleu is None or metrics["bleu"] > st.best_bleu
        return st.best_loss is None or metrics["loss"] < st.best_loss

    def _validate_main(self) -> bool:
        st, tc = self.state, self.tc
        metrics = self._valid_metrics()
        improved = self._beats_best(metrics)
        if improved:
            st.bad_evals = 0
            st.best_loss = metrics["loss"]
            st.best_bleu = metrics.get("bleu")
            save_best(self.run_dir, st.step, self.model, metrics)
        else:
            st.bad_evals += 1
        self._write_metrics({"split": "valid", **metrics})
        bleu = f", BLEU {metrics['bleu']:.2f}" if "bleu" in metrics else ""
        log.info(
            "step %d: valid loss %.3f, nll %.3f, ppl %.2f%s%s",
            st.step,
            metrics["loss"],
            metrics["nll"],
            metrics["ppl"],
            bleu,
            "" if improved else f" (no improvement {st.bad_evals}×)",
        )
        if tc.patience is not None and st.bad_evals >= tc.patience:
            log.info("early stop: %d validations without improvement", st.bad_evals)
            return True
        return False

    def _average(self) -> bool:
        """§6.1: the mean of the last checkpoints, a cheap ensemble. Written beside them, then
        validated like any step; it replaces the best checkpoint only when it scores better
        (True then)."""
        n = min(self.tc.average_last, len(list_checkpoints(self.run_dir)))
        if n < 2:
            log.info("train.average_last: %d step checkpoint(s) on disk, nothing to average", n)
            return False
        path, steps = average_last(
            self.run_dir, n, checkpoint_dir(self.run_dir) / "average.safetensors"
        )
        if self.data.valid is None:
            log.info("averaged steps %s into %s (no valid set to score it)", steps, path)
            return False
        trained = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        load_weights(self.model, path)
        try:
            metrics = self._valid_metrics()
            best = self._beats_best(metrics)
            if best:
                st = self.state
                st.best_loss, st.best_bleu = metrics["loss"], metrics.get("bleu")
                save_best(self.run_dir, st.step, self.model, {**metrics, "averaged_steps": steps})
        finally:
            self.model.load_state_dict(trained)
        self._write_metrics({"split": "valid_average", "averaged_steps": steps, **metrics})
        bleu = f", BLEU {metrics['bleu']:.2f}" if "bleu" in metrics else ""
        log.info(
            "average of steps %d-%d (%d checkpoints): valid loss %.3f%s%s",
            steps[0],
            steps[-1],
            n,
            metrics["loss"],
            bleu,
            ": the new best checkpoint" if best else " (not better than the best; not used)",
        )
        return best

    def _save(self) -> None:
        self._last_save_step = self.state.step
        rng = distributed.gather(_rng_state(), self.info)  # every process's dropout stream

        def write() -> None:
            state = {
                "train": asdict(self.state, dict_factory=_without_runtime_fields),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(),
                "rng": rng,
            }
            save_checkpoint(self.run_dir, self.state.step, self.model, state)
            prune(self.run_dir, self.tc.keep_last)

        self._on_main(write)

    def _on_main(self, job: Callable[[], Any]) -> Any:
        """Rank 0's result of `job`, run on rank 0 alone; a UserError there (a full disk) stops
        every process, which would otherwise wait for rank 0 at the next collective forever."""
        result = failure = None
        if self.info.is_main:
            try:
                result = job()
            except UserError as e:
                failure = e
        result, message = distributed.broadcast(
            (result, None if failure is None else str(failure)), self.info
        )
        if failure is not None:
            raise failure
        if message is not None:  # said once, by rank 0; the others say why they stop
            raise UserError(
                f"rank {self.info.rank}: stopping with rank 0, which failed (its error is "
                "reported by rank 0)"
            )
        return result


def accumulate_gradients(
    net: torch.nn.Module,
    micro: list[Batch],
    scale: float,
    device: torch.device,
    autocast=nullcontext,
    scaler: torch.amp.GradScaler | None = None,
    ddp: bool = False,
) -> torch.Tensor:
    """Add `scale` × ∇(summed loss) of each micro-batch to the gradients; return the loss sum.

    `net` maps a batch's tensors to its summed loss (a TranslationLoss, perhaps DDP-wrapped).

    With scale = 1 / (target tokens of all micro-batches), the gradients equal those of one
    batch holding them all (the loss is normalised by target tokens, not by batches).
    A micro-batch whose loss is not finite makes every gradient NaN.
    """
    total = torch.zeros((), dtype=torch.float64, device=device)
    for i, batch in enumerate(micro):
        # Under DDP only the last backward all-reduces; the others accumulate locally.
        last = i == len(micro) - 1
        with nullcontext() if last or not ddp else net.no_sync():
            batch = batch.to(device)
            with autocast():
                loss_sum = net(batch.src, batch.tgt_in, batch.tgt_out, batch.src_mask)
            # Spoiled on purpose: under DDP the all-reduce spreads the NaN to every process, so
            # all of them see a non-finite gradient norm and skip the update together.
            spoil = torch.where(torch.isfinite(loss_sum.detach()), 1.0, math.nan)
            scaled = loss_sum * scale * spoil
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        total += loss_sum.detach()
    return total


def _without_runtime_fields(items: list[tuple[str, Any]]) -> dict[str, Any]:
    return {k: v for k, v in items if k != "stopped_by"}


@torch.inference_mode()
def validation_loss(
    model, valid: datasets.Dataset, tc, device, autocast, ids: SpecialIds = DEFAULT_IDS
) -> dict[str, float]:
    """Per-token label-smoothed loss, NLL and perplexity over a tokenized split."""
    was_training = model.training
    model.eval()
    loss = nll = 0.0
    tokens = 0
    token_ds = valid.select_columns(["src_ids", "tgt_ids"])
    batches = token_budget_batches(*lengths(valid), tc.max_tokens)
    for batch in iterate(token_ds, batches, ids=ids):
        tokens += batch.ntokens
        batch = batch.to(device)
        with autocast():
            logits = model(batch.src, batch.tgt_in, batch.src_mask, None)  # causal: exact
        loss += label_smoothed_loss(logits, batch.tgt_out, tc.label_smoothing, ids.pad).item()
        nll += label_smoothed_loss(logits, batch.tgt_out, 0.0, ids.pad).item()
    model.train(was_training)
    nll_per_token = nll / max(tokens, 1)
    return {
        "loss": loss / max(tokens, 1),
        "nll": nll_per_token,
        "ppl": math.exp(min(nll_per_token, 50.0)),
    }


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(saved: list[dict[str, Any]] | dict[str, Any], info: distributed.Dist) -> None:
    states = saved if isinstance(saved, list) else [saved]
    if len(states) != info.world_size:
        log.warning(
            "the checkpoint was saved by %d processes, this run has %d: dropout streams restart",
            len(states),
            info.world_size,
        )
        return
    mine = states[info.rank]
    torch.set_rng_state(mine["torch"])
    if "cuda" in mine and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(mine["cuda"])
