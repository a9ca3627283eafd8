"""The training loop: batches → model → label-smoothed loss → Adam update, with validation,
checkpoints and logs. One function, `train`, takes a validated Config and does the whole job,
in one process or in each of the processes `torchrun` starts.

Set-up and resume are in training_setup, the saved trainer state in train_state, validation
and the best checkpoint in validation, skipped updates in nonfinite, train records in
train_log; what is here is the loop that ties them together."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from seq2seq.config import Config
from seq2seq.data.batching import Batch, epoch_batches, loader, update_groups
from seq2seq.data.corpus import lengths
from seq2seq.decode.translator import Translator
from seq2seq.errors import UserError
from seq2seq.model.transformer import build_model
from seq2seq.run.checkpoint import prune, save_checkpoint
from seq2seq.run.rundir import InitFrom
from seq2seq.runtime import resolve_device
from seq2seq.train import distributed, elastic
from seq2seq.train.log import LogWindow
from seq2seq.train.nonfinite import NonFinite
from seq2seq.train.progress import TrainingBar
from seq2seq.train.setup import Training, open_run, set_up
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
        self.src_lens, self.tgt_lens = lengths(t.data.train)  # tgt_len: target tokens + EOS
        wanted = ["src_ids", "tgt_ids"] + (["align"] if self.tc.alignment is not None else [])
        self.token_ds = t.data.train.select_columns(wanted)
        cuda = t.device.type == "cuda"
        self.workers = self.tc.num_workers if self.tc.num_workers is not None else int(cuda)
        self.pin = cuda
        self.window = LogWindow(t.device)
        # A resumed run starts at a saved (and, if it was the last step, validated) step.
        self._last_eval_step = self._last_save_step = t.state.step if t.state.step else -1
        self.stopping = StopRequests(self.tc.max_minutes)
        self.nonfinite = NonFinite(self.tc.max_nonfinite)

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
            updates = self._updates()
            while not stop:
                update = next(updates, None)
                if update is None:
                    break  # max_epochs reached
                step = st.step
                stop = self._update(*update)
                if st.step == step:
                    continue  # skipped: no new step to log, validate or save
                bar.advance(st.step)
                if st.step % tc.log_every == 0:
                    bar.set_postfix_str(self._log_train())
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
        if finishing and elastic.on_main(lambda: self.validator.finish(st), self.info):
            self._save()  # again: the step's saved state must know the new best, for --resume
        log.info("training finished at step %d (epoch %d)", st.step, st.epoch + 1)

    def _updates(self) -> Iterator[tuple[list[Batch], int]]:
        """This process's micro-batches for each update, from the saved data position on, with
        the target tokens of the whole update (every process's batches): the loss is a mean
        over them. Batches are a pure function of the lengths, so no process need ask."""
        st, tc, info = self.state, self.tc, self.info
        while tc.max_epochs is None or st.epoch < tc.max_epochs:
            batches = _epoch_batches(self.training, self.src_lens, self.tgt_lens, st.epoch)
            needed = info.world_size * tc.update_freq
            if len(batches) < needed:
                raise UserError(
                    f"an epoch has {len(batches)} batches but one update needs {needed} "
                    f"({info.world_size} processes × update_freq {tc.update_freq}); "
                    "lower train.max_tokens or update_freq, or use more data"
                )
            groups = update_groups(
                len(batches),
                st.batch_in_epoch,
                world_size=info.world_size,
                rank=info.rank,
                update_freq=tc.update_freq,
            )
            mine = [batches[i] for _, indices in groups for i in indices]
            batch_iter = iter(
                loader(
                    self.token_ds,
                    mine,
                    workers=self.workers,
                    pin=self.pin,
                    ids=self.data.tokenizer.ids,
                )
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

    def _log_train(self) -> str:
        record, summary = self.window.record(self.info, self.state.epoch)
        self.metrics.write(self.state.step, record)
        self.window.reset()
        return summary

    def _validate(self) -> bool:
        """Validate on rank 0 (the others wait); True when early stopping says stop."""
        self._last_eval_step = self.state.step

        def validate() -> bool:
            if self.data.valid is None:
                return False
            start = time.perf_counter()
            with self._handed_on():
                stop = self.validator.validate(self.state)
            self.window.pause(time.perf_counter() - start)  # tok/s counts training only
            return stop

        return bool(elastic.on_main(validate, self.info))

    def _save(self) -> None:
        self._last_save_step = self.state.step
        rng = distributed.gather(rng_state(), self.info)  # every process's dropout stream

        def write() -> None:
            with self._handed_on() as raw:
                state = snapshot(
                    state=self.state,
                    optimizer=self.optimizer,
                    scheduler=self.scheduler,
                    scaler=self.scaler,
                    rng=rng,
                    raw_weights=raw,
                )
                save_checkpoint(self.run_dir, self.state.step, self.model, state)
            prune(self.run_dir, self.tc.keep_last)

        elastic.on_main(write, self.info)

    @contextmanager
    def _handed_on(self) -> Iterator[dict | None]:
        """The weights a run hands on, in the model inside: their EMA when train.ema_decay is
        set (yielding the raw weights, which resume needs), else the weights as they are."""
        if self.training.ema is None:
            yield None
            return
        with self.training.ema.applied(self.model) as raw:
            yield raw


def _epoch_batches(t: Training, src_lens, tgt_lens, epoch: int) -> list:
    """One epoch's batches, directions mixed as data.pairs and data.temperature say."""
    return epoch_batches(
        src_lens,
        tgt_lens,
        max_tokens=t.cfg.train.max_tokens,
        seed=t.cfg.train.seed,
        epoch=epoch,
        parts=[p.rows for p in t.data.train_parts],
        temperature=t.cfg.data.temperature,
    )


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
