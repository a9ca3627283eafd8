"""Validation during training: score the model on the valid set, keep the best checkpoint, log
the score; and at the end, the same for the average of the last checkpoints (§6.1)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import datasets
import sacrebleu
import torch
from safetensors.torch import load_file

from seq2seq.data.batching import iterate, token_budget_batches
from seq2seq.data.corpus import Part, Prepared, lengths
from seq2seq.data.tokenizer import DEFAULT_IDS, SpecialIds
from seq2seq.run.checkpoint import (
    average_last,
    checkpoint_dir,
    list_checkpoints,
    load_weights,
    save_best,
)
from seq2seq.run.runlog import MetricsLog
from seq2seq.train.loss import label_smoothed_loss
from seq2seq.train.state import TrainState

log = logging.getLogger(__name__)


class Validator:
    """Scores the model on the run's valid set; run on rank 0 alone."""

    def __init__(
        self,
        *,
        model: torch.nn.Module,
        data: Prepared,
        tc,
        device: torch.device,
        autocast: Callable[[], AbstractContextManager],
        translate: Callable[..., list[str]],  # (texts, *, src_lang, tgt_lang) → outputs
        run_dir: Path,
        metrics: MetricsLog,
        translate_final: Callable[..., list[str]] | None = None,  # the run's decode settings
    ):
        self.model, self.data, self.tc, self.device = model, data, tc, device
        self.autocast, self.translate = autocast, translate
        self.translate_final = translate_final or translate
        self.run_dir, self.metrics = Path(run_dir), metrics

    def validate(self, state: TrainState) -> bool:
        """Score the model now, as the step's validation; True when early stopping says stop."""
        metrics, improved = self._score(state, split="valid", extra={})
        state.bad_evals = 0 if improved else state.bad_evals + 1
        log.info(
            "step %d: valid loss %.3f, nll %.3f, ppl %.2f%s%s",
            state.step,
            metrics["loss"],
            metrics["nll"],
            metrics["ppl"],
            _bleu(metrics),
            "" if improved else f" (no improvement {state.bad_evals}×)",
        )
        if self.tc.patience is not None and state.bad_evals >= self.tc.patience:
            log.info("early stop: %d validations without improvement", state.bad_evals)
            return True
        return False

    def finish(self, state: TrainState) -> bool:
        """§6.1: average the last checkpoints (a cheap ensemble), then choose the weights to ship
        as `train.final_choice` says; True when the training state changed (save it again)."""
        on_disk = len(list_checkpoints(self.run_dir))
        if self.tc.averages and on_disk < 2:
            log.info(
                "train.average_last: %d step checkpoint(s) on disk, nothing to average", on_disk
            )
        # A short run averages what it has: N is capped by the checkpoints on disk.
        sizes = sorted({min(n, on_disk) for n in self.tc.averages} - {0, 1})
        averages = []
        for n in sizes:
            out = checkpoint_dir(self.run_dir) / f"average_last{n}.safetensors"
            averages.append(average_last(self.run_dir, n, out))
        if self.data.valid is None:
            for path, steps in averages:
                log.info("averaged steps %s into %s (no valid set to score it)", steps, path)
            return False
        if self.tc.final_choice == "beam":
            self._choose_by_beam(state, averages)
            return False  # the training state's best scores stay those of its validations
        changed = False
        for path, steps in averages:
            changed = self._score_average(state, path, steps) or changed
        return changed

    def _score_average(self, state: TrainState, path: Path, steps: list[int]) -> bool:
        """Validate an average like a step; it becomes the best checkpoint if it scores better."""
        trained = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        load_weights(self.model, path)
        try:
            extra = {"averaged_steps": steps}
            metrics, best = self._score(state, split="valid_average", extra=extra)
        finally:
            self.model.load_state_dict(trained)
        log.info(
            "average of steps %d-%d (%d checkpoints): valid loss %.3f%s%s",
            steps[0],
            steps[-1],
            len(steps),
            metrics["loss"],
            _bleu(metrics),
            ": the new best checkpoint" if best else " (not better than the best; not used)",
        )
        return best

    def _choose_by_beam(self, state: TrainState, averages: list[tuple[Path, list[int]]]) -> None:
        """Decode the whole valid set as `evaluate` will (beam, α) with each candidate: the best
        checkpoint so far, the last step and each average; the highest BLEU becomes the best
        checkpoint. Greedy BLEU on a few sentences is a trend to watch, too coarse to pick the
        weights to ship: at 30 minutes it preferred the last step where beam BLEU on the whole
        dev part preferred an average, by 0.5-0.8 (benchmarks/RESULTS.md, issue 31)."""
        best = checkpoint_dir(self.run_dir) / "best.safetensors"
        trained = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        candidates: list[tuple[str, Path | None, dict[str, Any]]] = []
        if best.is_file() and not _same_weights(best, trained):
            candidates.append(("best checkpoint", best, {}))
        candidates.append((f"step {state.step}", None, {}))  # the weights in the model now
        for path, steps in averages:
            name = f"average of steps {steps[0]}-{steps[-1]} ({len(steps)})"
            candidates.append((name, path, {"averaged_steps": steps}))
        scores = []
        try:
            for name, path, _ in candidates:
                self._use(path, trained)
                scores.append(self._bleu(self.translate_final, None))
                log.info("final choice: %s, BLEU %.2f (beam, whole valid set)", name, scores[-1])
            # On a tie the earlier candidate stays: the best checkpoint needs no rewriting.
            chosen = max(range(len(candidates)), key=lambda i: (scores[i], -i))
            name, path, extra = candidates[chosen]
            self.metrics.write(
                state.step,
                {
                    "split": "final_choice",
                    "bleu": dict(zip((c[0] for c in candidates), scores)),
                    "chosen": name,
                },
            )
            log.info("final choice: %s", name)
            if path != best:
                self._use(path, trained)
                meta = {"final_choice": "beam", "beam_bleu": scores[chosen], **extra}
                save_best(self.run_dir, state.step, self.model, meta)
        finally:
            self.model.load_state_dict(trained)

    def _use(self, path: Path | None, trained: dict[str, torch.Tensor]) -> None:
        """Put a candidate's weights in the model: a file's, or (None) the trained ones."""
        if path is None:
            self.model.load_state_dict(trained)
        else:
            load_weights(self.model, path)

    def _score(
        self, state: TrainState, *, split: str, extra: dict[str, Any]
    ) -> tuple[dict[str, float], bool]:
        """Score the model's weights now; if they beat the best, make them the best checkpoint
        (its metadata: the scores and `extra`). Log the scores as a `split` record."""
        metrics = self._metrics()
        improved = _beats_best(state, metrics)
        if improved:
            state.best_loss, state.best_bleu = metrics["loss"], metrics.get("bleu")
            save_best(self.run_dir, state.step, self.model, {**metrics, **extra})
        self.metrics.write(state.step, {"split": split, **extra, **metrics})
        return metrics, improved

    def _metrics(self) -> dict[str, float]:
        """Loss, NLL, perplexity and (greedy, on the first sentences) BLEU of the model now."""
        tc, valid = self.tc, self.data.valid
        metrics = validation_loss(
            self.model,
            valid,
            tc=tc,
            device=self.device,
            autocast=self.autocast,
            ids=self.data.tokenizer.ids,
        )
        if tc.valid_bleu_sentences:
            metrics["bleu"] = self._bleu(self.translate, tc.valid_bleu_sentences)
        return metrics

    def _bleu(self, translate: Callable[..., list[str]], sentences: int | None) -> float:
        """Corpus BLEU of `translate` on the first valid sentences, shared between directions
        (None: every one)."""
        hyps, refs = [], []
        for part, rows in bleu_rows(self.data, sentences):
            hyps += translate(rows["src"], src_lang=part.src_lang, tgt_lang=part.tgt_lang)
            refs += rows["tgt"]
        return sacrebleu.corpus_bleu(hyps, [refs]).score


def bleu_rows(data: Prepared, n: int | None) -> list[tuple[Part, datasets.Dataset]]:
    """The valid rows BLEU is taken on: the first `n`, shared out evenly between directions;
    with `n` None, every row of every direction (the final choice's whole valid set)."""
    valid = data.valid
    parts = data.valid_parts or [Part("", "", len(valid))]
    # An even share of len(valid) leaves out rows of the larger directions when they differ.
    each = max(p.rows for p in parts) if n is None else -(-n // len(parts))
    out, start = [], 0
    for part in parts:
        take = min(each, part.rows)
        if take:
            out.append((part, valid.select(range(start, start + take))))
        start += part.rows
    return out


def _same_weights(path: Path, weights: dict[str, torch.Tensor]) -> bool:
    """Whether a weights file holds exactly these tensors (the best checkpoint is often the
    last step, and need not be decoded twice)."""
    stored = load_file(str(path))  # tied tensors are stored once: a subset of the names
    return all(k in weights and torch.equal(v, weights[k].cpu()) for k, v in stored.items())


def _beats_best(state: TrainState, metrics: dict[str, float]) -> bool:
    if "bleu" in metrics:
        return state.best_bleu is None or metrics["bleu"] > state.best_bleu
    return state.best_loss is None or metrics["loss"] < state.best_loss


def _bleu(metrics: dict[str, float]) -> str:
    return f", BLEU {metrics['bleu']:.2f}" if "bleu" in metrics else ""


@torch.inference_mode()
def validation_loss(
    model, valid: datasets.Dataset, *, tc, device, autocast, ids: SpecialIds = DEFAULT_IDS
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
