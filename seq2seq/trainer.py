"""The training loop: batches → model → label-smoothed loss → Adam step, with validation and
checkpoints. One function, `train`, takes a validated Config and does the whole job."""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import sacrebleu
import torch
from tqdm import tqdm

from .batching import epoch_batches, iterate, token_budget_batches
from .checkpoint import (
    latest_checkpoint,
    load_state,
    load_weights,
    prune,
    save_best,
    save_checkpoint,
)
from .config import CONFIG_NAME, Config, load_config, resolved, save_config
from .data import load_corpus, tokenize
from .errors import ConfigError, UserError
from .files import atomic_write_text
from .loss import label_smoothed_loss
from .model import count_parameters
from .runtime import autocast_dtype, resolve_device, set_threads
from .schedule import inverse_sqrt_scheduler
from .tokenizer import Tokenizer, load_tokenizer, model_paths, train_tokenizer
from .translator import Translator, build_model

log = logging.getLogger(__name__)

METRICS_NAME = "metrics.jsonl"


@dataclass
class TrainState:
    """Where training is: enough, with the checkpointed tensors, to continue exactly."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` already consumed
    best_bleu: float | None = None


@dataclass
class Prepared:
    """Tokenizer and tokenized splits a run trains on."""

    tokenizer: Tokenizer
    train: datasets.Dataset
    valid: datasets.Dataset | None


def train(cfg: Config, resume: bool = False, progress: bool = True) -> TrainState:
    """Train the model a config describes into its run directory; return the final state."""
    run_dir = Path(cfg.run_dir)
    device = resolve_device(cfg.train.device)
    amp_dtype = autocast_dtype(device, cfg.train.precision)
    set_threads(cfg.train.threads)
    latest, reuse_tokenizer = _prepare_run_dir(cfg, resume)
    torch.manual_seed(cfg.train.seed)

    data = prepare_data(cfg, reuse_tokenizer)
    model = build_model(cfg.model, data.tokenizer).to(device)
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=cfg.train.lr,
        betas=cfg.train.betas,
        eps=cfg.train.eps,
        weight_decay=cfg.train.weight_decay,
        fused=device.type == "cuda",
    )
    scheduler = inverse_sqrt_scheduler(optimizer, cfg.train.warmup_steps)
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
    state = TrainState()
    if latest is not None:
        load_weights(model, latest.weights)
        saved = load_state(latest.state)
        try:
            optimizer.load_state_dict(saved["optimizer"])
            scheduler.load_state_dict(saved["scheduler"])
            scaler.load_state_dict(saved["scaler"])
            state = TrainState(**saved["train"])
            _set_rng_state(saved["rng"])
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            raise UserError(
                f"{latest.state} is not a trainer state that can be resumed: {e}"
            ) from None
        _truncate_metrics(run_dir / METRICS_NAME, state.step)
        log.info("resumed from %s (step %d)", latest.weights, state.step)

    log.info(
        "model: %s parameters; device %s%s",
        f"{count_parameters(model):,}",
        device,
        f" with {amp_dtype} autocast" if amp_dtype else "",
    )
    loop = _Loop(cfg, model, optimizer, scheduler, scaler, data, device, amp_dtype, state)
    loop.run(progress)
    return loop.state


def _prepare_run_dir(cfg: Config, resume: bool):
    """Check the run directory fits the request and save the resolved config.

    Returns the checkpoint to resume from (or None) and whether the tokenizer already in the
    directory may be reused (it was trained with these settings on this data).
    """
    run_dir = Path(cfg.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"run_dir {run_dir} exists and is not a directory")
    latest = latest_checkpoint(run_dir)
    if latest is not None and not resume:
        raise UserError(
            f"{run_dir} already holds checkpoints (latest: step {latest.step}); pass --resume "
            "to continue that run, or choose another run_dir"
        )
    saved_path = run_dir / CONFIG_NAME
    if latest is not None and saved_path.is_file():
        saved = load_config(saved_path)
        changed = _changed_keys(saved, cfg, ("model", "tokenizer"))
        if changed:
            raise ConfigError(
                f"--resume: the config differs from the run's in {', '.join(changed)}; "
                "the checkpoints cannot continue with another model or vocabulary"
            )
    if resume and latest is None:
        log.info("no checkpoint in %s yet: starting from scratch", run_dir)
    reuse_tokenizer = latest is not None or _same_tokenizer(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(resolved(cfg), saved_path)
    return latest, reuse_tokenizer


def _changed_keys(old: Config, new: Config, sections: tuple[str, ...]) -> list[str]:
    a, b = old.model_dump(mode="json"), new.model_dump(mode="json")
    return [
        f"{section}.{key}"
        for section in sections
        for key in sorted(set(a[section]) | set(b[section]))
        if a[section].get(key) != b[section].get(key)
    ]


def _same_tokenizer(cfg: Config) -> bool:
    """Whether the run directory's tokenizer was trained with these settings on this data."""
    saved_path = Path(cfg.run_dir) / CONFIG_NAME
    if not saved_path.is_file():
        return False
    try:
        saved = load_config(saved_path)
    except UserError:
        return False
    now = resolved(cfg)
    return saved.tokenizer == now.tokenizer and saved.data.train == now.data.train


def prepare_data(cfg: Config, reuse_tokenizer: bool) -> Prepared:
    """Load the corpus, train (or load) the tokenizer, tokenize and filter train and valid."""
    run_dir = Path(cfg.run_dir)
    d = cfg.data
    train_raw = load_corpus(d.train, d.src_lang, d.tgt_lang)
    src_model, tgt_model = model_paths(run_dir, cfg.tokenizer.joint)
    if reuse_tokenizer and src_model.is_file() and tgt_model.is_file():
        tokenizer = load_tokenizer(run_dir, cfg.tokenizer.joint)
        log.info("tokenizer: reusing %s", src_model.parent)
    else:
        log.info(
            "tokenizer: training SentencePiece (%s) on %s", cfg.tokenizer.type, d.train.describe()
        )
        tokenizer = train_tokenizer(
            cfg.tokenizer,
            _column(train_raw, "src"),
            _column(train_raw, "tgt"),
            run_dir,
            threads=torch.get_num_threads(),
        )
    log.info(
        "tokenizer: vocabulary %s%s",
        tokenizer.src_vocab_size,
        " (joint)" if tokenizer.joint else f" + {tokenizer.tgt_vocab_size}",
    )
    train_ds, report = tokenize(train_raw, run_dir, tokenizer.joint, d.max_len, d.num_proc)
    log.info("train: %s", report)
    if len(train_ds) == 0:
        raise UserError(
            f"the training set is empty after filtering ({report}); check data.train and "
            "data.max_len"
        )
    valid_ds = None
    if d.valid is not None:
        valid_raw = load_corpus(d.valid, d.src_lang, d.tgt_lang)
        valid_ds, report = tokenize(valid_raw, run_dir, tokenizer.joint, d.max_len, d.num_proc)
        log.info("valid: %s", report)
        if len(valid_ds) == 0:
            log.warning("the validation set is empty after filtering; validation is skipped")
            valid_ds = None
    return Prepared(tokenizer, train_ds, valid_ds)


def _column(ds: datasets.Dataset, name: str) -> Iterator[str]:
    # Read in slices so a large corpus never sits in memory as one Python list.
    for batch in ds.select_columns([name]).iter(batch_size=10_000):
        yield from batch[name]


class _Loop:
    """The state a training run carries from step to step."""

    def __init__(self, cfg, model, optimizer, scheduler, scaler, data, device, amp_dtype, state):
        self.cfg, self.tc = cfg, cfg.train
        self.model, self.optimizer, self.scheduler, self.scaler = (
            model,
            optimizer,
            scheduler,
            scaler,
        )
        self.data, self.device, self.amp_dtype, self.state = data, device, amp_dtype, state
        self.run_dir = Path(cfg.run_dir)
        self.metrics_path = self.run_dir / METRICS_NAME
        self.translator = Translator(model, data.tokenizer, cfg.decode, device, amp_dtype)
        self.src_lens = np.asarray(data.train["src_len"], dtype=np.int64)
        self.tgt_lens = np.asarray(data.train["tgt_len"], dtype=np.int64)
        self.token_ds = data.train.select_columns(["src_ids", "tgt_ids"])
        # Log-window accumulators stay on the device so a step never waits for a .item().
        self._window_loss = torch.zeros((), device=device)
        self._window_tokens = 0
        self._window_start = time.perf_counter()
        # A resumed run starts at a saved (and, if it was the last step, validated) step.
        self._last_eval_step = self._last_save_step = state.step if state.step else -1

    def _autocast(self):
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def run(self, progress: bool = True) -> None:
        st, tc = self.state, self.tc
        interactive = sys.stderr.isatty()
        bar = tqdm(
            total=tc.max_steps,
            initial=st.step,
            desc="train",
            unit="step",
            dynamic_ncols=True,
            mininterval=1.0 if interactive else 30.0,
            file=sys.stderr,
            disable=not progress,
        )
        self.model.train()
        try:
            while st.step < tc.max_steps and (tc.max_epochs is None or st.epoch < tc.max_epochs):
                batches = epoch_batches(
                    self.src_lens, self.tgt_lens, tc.max_tokens, tc.seed, st.epoch
                )
                for batch in iterate(self.token_ds, batches, start=st.batch_in_epoch):
                    st.batch_in_epoch += 1
                    self._step(batch)
                    bar.update(1)
                    if st.step % tc.log_every == 0:
                        bar.set_postfix_str(self._log_train())
                    if st.step % tc.eval_every == 0:
                        self._validate()
                    if st.step % tc.save_every == 0:
                        self._save()
                    if st.step >= tc.max_steps:
                        break
                else:
                    st.epoch += 1
                    st.batch_in_epoch = 0
        finally:
            bar.close()
        if self._last_eval_step != st.step:
            self._validate()
        if self._last_save_step != st.step:
            self._save()
        log.info("training finished at step %d (epoch %d)", st.step, st.epoch + 1)

    def _step(self, batch) -> None:
        ntokens = batch.ntokens
        batch = batch.to(self.device)
        with self._autocast():
            logits = self.model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        loss_sum = label_smoothed_loss(logits, batch.tgt_out, self.tc.label_smoothing)
        # Normalised by target tokens so the update size does not depend on batch shape.
        self.scaler.scale(loss_sum / ntokens).backward()
        self.scaler.unscale_(self.optimizer)
        if self.tc.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.tc.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.state.step += 1
        self._window_loss += loss_sum.detach()
        self._window_tokens += ntokens

    def _log_train(self) -> str:
        elapsed = time.perf_counter() - self._window_start
        loss = self._window_loss.item() / max(self._window_tokens, 1)
        lr = self.scheduler.get_last_lr()[0]
        tok_s = self._window_tokens / elapsed if elapsed > 0 else 0.0
        self._write_metrics(
            {
                "split": "train",
                "loss": loss,
                "lr": lr,
                "tokens_per_s": tok_s,
                "epoch": self.state.epoch,
            }
        )
        self._window_loss.zero_()
        self._window_tokens = 0
        self._window_start = time.perf_counter()
        return f"loss={loss:.3f} lr={lr:.2e} tok/s={tok_s:,.0f}"

    def _validate(self) -> None:
        self._last_eval_step = self.state.step
        valid = self.data.valid
        if valid is None:
            return
        start = time.perf_counter()
        metrics = validation_loss(self.model, valid, self.tc, self.device, self._autocast)
        n = min(self.tc.valid_bleu_sentences, len(valid))
        if n:
            rows = valid.select(range(n))
            hyps = self.translator.translate(rows["src"])
            metrics["bleu"] = sacrebleu.corpus_bleu(hyps, [rows["tgt"]]).score
            if self.state.best_bleu is None or metrics["bleu"] > self.state.best_bleu:
                self.state.best_bleu = metrics["bleu"]
                save_best(self.run_dir, self.state.step, self.model, metrics["bleu"])
        self._write_metrics({"split": "valid", **metrics})
        self._window_start += time.perf_counter() - start  # keep tok/s about training only
        bleu = f", BLEU {metrics['bleu']:.2f}" if "bleu" in metrics else ""
        log.info(
            "step %d: valid loss %.3f, nll %.3f, ppl %.2f%s",
            self.state.step,
            metrics["loss"],
            metrics["nll"],
            metrics["ppl"],
            bleu,
        )

    def _save(self) -> None:
        self._last_save_step = self.state.step
        save_checkpoint(self.run_dir, self.state.step, self.model, self._trainer_state())
        prune(self.run_dir, self.tc.keep_last)

    def _trainer_state(self) -> dict[str, Any]:
        return {
            "train": asdict(self.state),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": _rng_state(),
        }

    def _write_metrics(self, record: dict[str, Any]) -> None:
        record = {"step": self.state.step, **record, "time": time.time()}
        with open(self.metrics_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


@torch.inference_mode()
def validation_loss(model, valid: datasets.Dataset, tc, device, autocast) -> dict[str, float]:
    """Per-token label-smoothed loss, NLL and perplexity over a tokenized split."""
    was_training = model.training
    model.eval()
    loss = nll = 0.0
    tokens = 0
    lens = (np.asarray(valid["src_len"]), np.asarray(valid["tgt_len"]))
    token_ds = valid.select_columns(["src_ids", "tgt_ids"])
    for batch in iterate(token_ds, token_budget_batches(*lens, tc.max_tokens)):
        tokens += batch.ntokens
        batch = batch.to(device)
        with autocast():
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        loss += label_smoothed_loss(logits, batch.tgt_out, tc.label_smoothing).item()
        nll += label_smoothed_loss(logits, batch.tgt_out, 0.0).item()
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


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop metrics logged after the checkpoint a run resumes from (they will be logged again)."""
    if not path.is_file():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line).get("step", 0) <= step:
                keep.append(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
    atomic_write_text(path, "".join(line + "\n" for line in keep))
