"""Pictures of a run: training and validation curves from its metrics log (matplotlib)."""

from __future__ import annotations

from pathlib import Path

from seq2seq.errors import UserError
from seq2seq.model.transformer import sinusoidal_positions
from seq2seq.run.runlog import METRICS_NAME, read_records


def _pyplot():
    try:  # optional (seq2seq[plot]) and slow to import: only the plotting commands need it
        import matplotlib
    except ImportError:
        raise UserError(
            "plotting needs matplotlib: pip install 'seq2seq[plot]' (or pip install matplotlib)"
        ) from None
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, out: Path) -> Path:
    """Lay the figure out, write it to `out` and free it."""
    fig.tight_layout()
    fig.savefig(Path(out))
    plt.close(fig)
    return Path(out)


def read_metrics(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """The run's train and valid records, in order."""
    path = Path(run_dir) / METRICS_NAME
    if not path.is_file():
        raise UserError(
            f"no {METRICS_NAME} in {run_dir}: is it a run directory with training logs?"
        )
    records = read_records(run_dir)
    train = [r for r in records if r.get("split") == "train"]
    valid = [r for r in records if r.get("split") == "valid"]
    if not train and not valid:
        raise UserError(f"{path} holds no metrics yet")
    return train, valid


def plot_curves(run_dir: Path, out: Path | None = None) -> Path:
    """Loss (train and valid), validation BLEU and learning rate against steps, as one PNG."""
    plt = _pyplot()
    train, valid = read_metrics(run_dir)
    fig, (ax_loss, ax_bleu, ax_lr) = plt.subplots(1, 3, figsize=(15, 4.2), dpi=100)
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
    return _save(plt, fig, out or Path(run_dir) / "curves.png")


def plot_positions(out: Path, d_model: int = 64, length: int = 50) -> Path:
    """§3.5 sinusoidal positional encodings as a heatmap: positions down, dimensions across."""
    if d_model < 2 or d_model % 2:
        raise UserError(f"--d-model must be an even number of at least 2, not {d_model}")
    if length < 1:
        raise UserError(f"--length must be at least 1, not {length}")
    plt = _pyplot()
    pe = sinusoidal_positions(length, d_model).numpy()
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    image = ax.imshow(pe, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, interpolation="nearest")
    ax.set(
        title=f"sinusoidal positional encoding (§3.5), d_model={d_model}",
        xlabel="dimension (even: sin, odd: cos)",
        ylabel="position",
    )
    fig.colorbar(image, ax=ax)
    return _save(plt, fig, out)


def attention_cell_inches(n_src: int, n_out: int) -> float:
    """Side of one heatmap: 3 inches, growing with the longer axis so labels stay readable."""
    return round(max(3.0, 0.16 * max(n_src, n_out) + 1.0), 1)


def plot_attention(
    src_pieces: list[str],
    out_pieces: list[str],
    weights: list,
    out: Path,
) -> Path:
    """Per decoder layer, the head-averaged cross-attention then each head; source on x,
    output on y. `weights` holds one [heads, output, source] array per layer."""
    plt = _pyplot()
    layers, heads = len(weights), weights[0].shape[0]
    cell = attention_cell_inches(len(src_pieces), len(out_pieces))
    fig, axes = plt.subplots(
        layers,
        heads + 1,
        figsize=((heads + 1) * cell, layers * cell),
        dpi=100,
        squeeze=False,
    )
    size = 7 if max(len(src_pieces), len(out_pieces)) <= 20 else 5
    for layer, w in enumerate(weights):
        w = w.numpy() if hasattr(w, "numpy") else w
        panels = [("mean of heads", w.mean(axis=0))]
        panels += [(f"head {h + 1}", w[h]) for h in range(heads)]
        for col, (name, image) in enumerate(panels):
            ax = axes[layer][col]
            ax.imshow(image, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_title(f"layer {layer + 1} · {name}", fontsize=8)
            ax.set_xticks(range(len(src_pieces)))
            ax.set_xticklabels(src_pieces, rotation=90, fontsize=size)
            ax.set_yticks(range(len(out_pieces)))
            ax.set_yticklabels(out_pieces if col == 0 else [], fontsize=size)
    fig.suptitle("decoder cross-attention (§3.2): output pieces ↓, source pieces →")
    return _save(plt, fig, out)
