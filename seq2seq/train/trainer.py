"""The training loop: batches → model → label-smoothed loss → Adam update, with validation,
checkpoints and logs. One function, `train`, takes a validated Config and does the whole job,
in one process or in each of the processes `torchrun` starts.

Set-up and resume are in setup, the saved trainer state in state, each update's batches in
feed, validation and the best checkpoint in validation, skipped updates in nonfinite, train
records in log; what is here is the loop that ties them together."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch

from seq2seq.config import Config
from seq2seq.data.batching import Batch
from seq2seq.decode.translator import Translator
from seq2seq.model.transformer import build_model
from seq2seq.run.checkpoint import prune, save_checkpoint
from seq2seq.run.rundir import InitFrom
from seq2seq.runtime import resolve_device
from seq2seq.train import distributed, elastic
from seq2seq.train.ema import handed_on
from seq2seq.train.feed import UpdateFeed
from seq2seq.train.log import LogWindow
from seq2seq.train.nonfinite import NonFinite
from seq2seq.train.progress import TrainingBar
from seq2seq.train.setup import Training, open_run, set_up
from seq2seq.train.stages import Stages
from seq2seq.train.state import TrainState, rng_state, snapshot
from seq2seq.train.stopping import StopRequests
from seq2seq.train.validation import Validator

log = logging.getLogger(__name__)

__all__ = ["TrainState", "accumulate_gradients", "train"]


def train(
    cfg: Config,
    *,
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
                cfg,
                info=info,
                device=device,
                resume=resume,
                progress=progress and info.is_main,
                reset_dataloader=reset_dataloader,
                init=init,
            )
    finally:
        distributed.teardown(info)


def _train(
    cfg: Config,
    *,
    info: distributed.Dist,
    device: torch.device,
    resume: bool,
    progress: bool,
    reset_dataloader: bool,
    init: InitFrom | None,
) -> TrainState:
    run = open_run(
        cfg, info=info, device=device, resume=resume, reset_dataloader=reset_dataloader, init=init
    )
    model = build_model(cfg.model, run.data.tokenizer).to(device)
    training = set_up(run, model)
    # Validation BLEU is a trend to watch, so greedy: a fraction of beam search's cost. The
    # final choice (train.final_choice: beam) decodes as `evaluate` will.
    greedy = cfg.decode.model_copy(update={"beam_size": 1, "nbest": 1})
    final = cfg.decode.model_copy(update={"nbest": 1})
    greedy_translator, final_translator = (
        Translator(
            model,
            run.data.tokenizer,
            decode,
            device,
            amp_dtype=run.amp_dtype,
            src_lang=cfg.data.src_lang,
            tgt_lang=cfg.data.tgt_lang,
        )
        for decode in (greedy, final)
    )
    loop = _Loop(training, greedy_translator.translate, final_translator.translate)
    loop.run(progress)
    return loop.state


class _Loop:
    """The state a training run carries from update to update."""

    def __init__(
        self,
        training: Training,
        translate: Callable[..., list[str]],
        translate_final: Callable[..., list[str]],
    ):
        t = self.training = training
        self.cfg, self.tc, self.run_dir = t.cfg, t.cfg.train, Path(t.cfg.run_dir)
        self.model, self.net = t.model, t.net
        self.optimizer, self.scheduler, self.scaler = t.optimizer, t.scheduler, t.scaler
        self.data, self.device, self.state, self.info = t.data, t.device, t.state, t.info
        self.metrics = t.metrics
        self.validator = Validator(
            model=t.model,
            data=t.data,
            tc=self.tc,
            device=t.device,
            autocast=t.autocast,
            translate=translate,
            run_dir=self.run_dir,
            metrics=t.metrics,
            translate_final=translate_final,
        )
        self.feed = UpdateFeed(t)
        self.window = LogWindow(t.device)
        # A resumed run starts at a saved (and, if it was the last step, validated) step.
        self._last_eval_step = self._last_save_step = t.state.step if t.state.step else -1
        self.stopping = StopRequests(self.tc.max_minutes)
        self.nonfinite = NonFinite(self.tc.max_nonfinite)
        self.stages = Stages(self.tc.stages, t.state, t.info)

    # ------------------------------------------------------------------ the loop

    def run(self, progress: bool = True) -> None:
        """Train to the end (max_steps, max_epochs, early stop), a signal or the time budget."""
        with self.stopping.catching_signals():
            self._run(progress)
            self._finish()

    def _run(self, progress: bool) -> None:
        st, tc = self.state, self.tc
        bar = TrainingBar(
            max_steps=tc.max_steps,
            start_step=st.step,
            deadline=self.stopping.deadline,
            enabled=progress,
        )
        self.model.train()
        stop = st.step >= tc.max_steps
        try:
            updates = self.feed.updates(st)
            while not stop:
                if self.stages.ended(st, self.device):  # checked first: a resumed run too
                    if self.stages.is_last(st):
                        break
                    self.stages.advance(st, self.metrics)
                    updates = self.feed.updates(st)  # the next stage's mix
                update = next(updates, None)
                if update is None:
                    break  # max_epochs reached
                step = st.step
                stop = self._update(*update)
                if st.step == step:
                    continue  # skipped: no new step to log, validate or save
                bar.advance(st.step)
                if st.step % tc.log_every == 0:
                    bar.set_postfix_str(
                        self.window.write(self.metrics, st.step, self.info, st.epoch)
                    )
                if st.step % tc.eval_every == 0 and self._validate():
                    stop = True
                if st.step % tc.save_every == 0:
                    self._save()
                stop = stop or st.step >= tc.max_steps
        finally:
            bar.close()

    def _finish(self) -> None:
        """Save (and validate, average) as the reason training stopped asks."""
        st, tc = self.state, self.tc
        if self.nonfinite.too_many:
            # Skipped updates changed neither weights nor optimizer: this is the last good state
            # (with the data position past the batches that failed).
            self._save()
            raise self.nonfinite.error(st.step, tc.clip_norm, fp16=self.scaler.is_enabled())
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
        finishing = tc.averages or tc.final_choice == "beam"
        if finishing and elastic.on_main(self._final_choice, self.info, long=True):
            self._save()  # again: the step's saved state must know the new best, for --resume
        log.info("training finished at step %d (epoch %d)", st.step, st.epoch + 1)

    def _final_choice(self) -> bool:
        """Average the last checkpoints and choose the weights to ship (rank 0)."""
        # The last step's candidate is what its checkpoint holds (the EMA, when kept): the raw
        # weights, were they chosen, would ship as a best checkpoint no step checkpoint has.
        with handed_on(self.training.ema, self.model):
            return self.validator.finish(self.state)

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
            autocast=self.training.autocast,
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
            stop = self.nonfinite.too_many
            return self.stopping.agreed(self.info, self.device) or stop
        self.nonfinite.reset()
        self.window.add(loss, grad_norm, self.optimizer.param_groups[0]["lr"])
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self._zero_grad()
        self.scheduler.step()
        if self.training.ema is not None:
            self.training.ema.update(self.model)
        self.state.step += 1
        self.window.count(global_tokens, local_tokens)
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
        record = self.nonfinite.skipped(
            loss=loss,
            grad_norm=grad_norm,
            global_tokens=global_tokens,
            state=self.state,
            info=self.info,
            device=self.device,
            fp16=self.scaler.is_enabled(),
        )
        if record is not None:
            self.metrics.write(self.state.step, record)

    # ------------------------------------------------------------------ logs, validation, saving

    def _validate(self) -> bool:
        """Validate on rank 0 (the others wait); True when early stopping says stop."""
        self._last_eval_step = self.state.step

        def validate() -> bool:
            if self.data.valid is None:
                return False
            start = time.perf_counter()
            with handed_on(self.training.ema, self.model):
                stop = self.validator.validate(self.state)
            self.window.pause(time.perf_counter() - start)  # tok/s counts training only
            return stop

        return bool(elastic.on_main(validate, self.info))

    def _save(self) -> None:
        self._last_save_step = self.state.step
        rng = distributed.gather(rng_state(), self.info)  # every process's dropout stream
        elastic.on_main(lambda: _write_checkpoint(self.training, rng), self.info)


def _write_checkpoint(t: Training, rng: list[dict]) -> None:
    """Save the step's weights (their EMA, when kept) and trainer state; prune old steps."""
    run_dir = Path(t.cfg.run_dir)
    with handed_on(t.ema, t.model) as raw:
        state = snapshot(
            state=t.state,
            optimizer=t.optimizer,
            scheduler=t.scheduler,
            scaler=t.scaler,
            rng=rng,
            raw_weights=raw,
        )
        save_checkpoint(run_dir, t.state.step, t.model, state)
    prune(run_dir, t.cfg.train.keep_last)


def accumulate_gradients(
    net: torch.nn.Module,
    micro: list[Batch],
    *,
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
                loss_sum = net(batch.src, batch.tgt_in, batch.tgt_out, batch.src_mask, batch.align)
            # Spoiled on purpose: under DDP the all-reduce spreads the NaN to every process, so
            # all of them see a non-finite gradient norm and skip the update together.
            spoil = torch.where(torch.isfinite(loss_sum.detach()), 1.0, math.nan)
            scaled = loss_sum * scale * spoil
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        total += loss_sum.detach()
    return total
