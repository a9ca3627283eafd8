"""Pictures of a run: training and validation curves from its metrics log (matplotlib)."""

from __future__ import annotations

import json
from pathlib import Path

from .errors import UserError

METRICS_NAME = "metrics.jsonl"


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UserError(
            "plotting needs matplotlib: pip install 'seq2seq[plot]' (or pip install matplotlib)"
        ) from None
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


def read_metrics(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """The run's train and valid records, in order."""
    path = Path(run_dir) / METRICS_NAME
    if not path.is_file():
        raise UserError(
            f"no {METRICS_NAME} in {run_dir}: is it a run directory with training logs?"
        )
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
    train = [r for r in records if r.get("split") == "train"]
    valid = [r for r in records if r.get("split") == "valid"]
    if not train and not valid:
        raise UserError(f"{path} holds no metrics yet")
    return train, valid


def plot_curves(run_dir: Path, out: Path | None = None, dpi: int = 100) -> Path:
    """Loss (train and valid), validation BLEU and learning rate against steps, as one PNG."""
    plt = _pyplot()
    train, valid = read_metrics(run_dir)
    fig, (ax_loss, ax_bleu, ax_lr) = plt.subplots(1, 3, figsize=(15, 4.2), dpi=dpi)
    if train:
        ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], label="train", lw=1)
    if valid:
        ax_loss.plot(
            [r["step"] for r in valid], [r["loss"] for r in valid], "o-", label="valid", ms=3
        )
    ax_loss.set(title="label-smoothed loss per token", xlabel="step", ylabel="loss")
    ax_loss.legend()
    scored = [r for r in valid if "bleu" in r]
    if scored:
        ax_bleu.plot([r["step"] for r in scored], [r["bleu"] for r in scored], "o-", ms=3)
        best = max(scored, key=lambda r: r["bleu"])
        ax_bleu.annotate(
            f"best {best['bleu']:.1f}",
            (best["step"], best["bleu"]),
            textcoords="offset points",
            xytext=(0, -14),
            ha="center",
        )
    ax_bleu.set(title="validation BLEU", xlabel="step", ylabel="BLEU")
    if train:
        ax_lr.plot([r["step"] for r in train], [r["lr"] for r in train], lw=1)
    ax_lr.set(title="learning rate", xlabel="step", ylabel="lr")
    for ax in (ax_loss, ax_bleu, ax_lr):
        ax.grid(alpha=0.3)
    fig.suptitle(Path(run_dir).resolve().name)
    fig.tight_layout()
    out = Path(out) if out else Path(run_dir) / "curves.png"
    fig.savefig(out)
    plt.close(fig)
    return out
