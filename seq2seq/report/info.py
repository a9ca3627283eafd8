"""What a run directory holds: model shape, size, tokenizer, training progress and best BLEU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from seq2seq.config import load_run_config
from seq2seq.data.layouts import load_run_tokenizer
from seq2seq.model.transformer import build_model, count_parameters
from seq2seq.run.checkpoint import BEST, checkpoint_dir, list_checkpoints
from seq2seq.run.runlog import read_records


def best_validation(run_dir: Path) -> dict[str, Any] | None:
    """The validation record with the highest BLEU in the run's metrics log, if any has one."""
    scored = [r for r in read_records(run_dir) if r.get("split") == "valid" and "bleu" in r]
    return max(scored, key=lambda r: r["bleu"], default=None)


def final_choice(run_dir: Path) -> dict[str, Any] | None:
    """The last final choice (train.final_choice: beam) in the run's metrics log, if the best
    checkpoint still holds the weights it chose: {step, chosen, bleu} with the chosen one's
    beam BLEU on the whole valid set."""
    choices = [
        r
        for r in read_records(run_dir)
        if r.get("split") == "final_choice" and r.get("chosen") in r.get("bleu", {})
    ]
    if not choices:
        return None
    last = choices[-1]
    # A run resumed and trained on after its final choice may have made a new best since.
    best = checkpoint_dir(run_dir) / f"{BEST}.json"
    if best.is_file() and json.loads(best.read_text(encoding="utf-8"))["step"] > last["step"]:
        return None
    return {"step": last["step"], "chosen": last["chosen"], "bleu": last["bleu"][last["chosen"]]}


def _shipped_bleu(run_dir: Path) -> dict[str, Any]:
    """The BLEU of the weights shipped: the final choice's when there is one (beam, the whole
    valid set), else the best validation's (greedy, the first valid sentences)."""
    chosen = final_choice(run_dir)
    best = chosen or best_validation(run_dir)
    return {
        "best_bleu": None if best is None else best["bleu"],
        "best_bleu_step": None if best is None else best["step"],
        "best_bleu_from": None if best is None else "final_choice" if chosen else "validation",
        "final_choice": chosen,
    }


def run_summary(run_dir: Path) -> dict[str, Any]:
    """Config summary, parameter count, tokenizer, steps trained and best BLEU of a run."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    tokenizer = load_run_tokenizer(run_dir, cfg.tokenizer)
    m = cfg.model
    checkpoints = list_checkpoints(run_dir)
    return {
        "run_dir": str(run_dir),
        "model": {
            "d_model": m.d_model,
            "heads": m.heads,
            "encoder_layers": m.encoder_layers,
            "decoder_layers": m.decoder_layers,
            "ffn_dim": m.ffn_dim,
            "norm": "pre" if m.norm_first else "post",
            "tie_embeddings": m.tie_embeddings,
        },
        # Built on the meta device: only the shapes are needed, not memory for the weights.
        "parameters": _parameters(cfg.model, tokenizer),
        "tokenizer": {
            # An imported Marian vocabulary is named by its layout (its pieces' type is its own).
            "type": cfg.tokenizer.type
            if cfg.tokenizer.layout == "sentencepiece"
            else cfg.tokenizer.layout,
            "joint": tokenizer.joint,
            "src_vocab": tokenizer.src_vocab_size,
            "tgt_vocab": tokenizer.tgt_vocab_size,
        },
        # A many-language model's languages (its codes), and the direction it translates unless
        # told (translate --src-lang/--tgt-lang, a server request's source_lang/target_lang).
        "languages": sorted(cfg.tokenizer.languages),
        "direction": {"source": cfg.data.src_lang, "target": cfg.data.tgt_lang},
        "steps_trained": checkpoints[-1].step if checkpoints else 0,
        "checkpoints": [c.step for c in checkpoints],
        "has_best": (checkpoint_dir(run_dir) / f"{BEST}.safetensors").is_file(),
        # The best checkpoint's BLEU, and how it was measured (best_bleu_from).
        **_shipped_bleu(run_dir),
    }


def _parameters(model_cfg, tokenizer) -> int:
    with torch.device("meta"):
        return count_parameters(build_model(model_cfg, tokenizer))


def _language_lines(info: dict[str, Any]) -> list[tuple[str, str]]:
    languages = info.get("languages")
    if not languages:
        return []
    d = info["direction"]
    default = f"{d['source'] or '?'} → {d['target'] or '?'}"
    return [("languages", f"{len(languages)}: {', '.join(languages)}"), ("default", default)]


def format_summary(info: dict[str, Any]) -> str:
    """The summary as aligned `key: value` lines for a terminal."""
    m, t = info["model"], info["tokenizer"]
    vocab = (
        f"{t['src_vocab']} joint"
        if t["joint"]
        else f"{t['src_vocab']} source, {t['tgt_vocab']} target"
    )
    steps = ", ".join(map(str, info["checkpoints"])) or "none"
    bleu = (
        f"{info['best_bleu']:.2f} at step {info['best_bleu_step']}"
        if info["best_bleu"] is not None
        else "not measured yet"
    )
    if info.get("best_bleu_from") == "final_choice":
        bleu += f", final choice (beam, whole valid set): {info['final_choice']['chosen']}"
    lines = [
        ("run", info["run_dir"]),
        (
            "model",
            f"d_model {m['d_model']}, {m['heads']} heads, {m['encoder_layers']}+"
            f"{m['decoder_layers']} layers, ffn {m['ffn_dim']}, {m['norm']}-norm",
        ),
        ("parameters", f"{info['parameters']:,}"),
        ("tokenizer", f"{t['type']}, vocabulary {vocab}"),
        *_language_lines(info),
        ("steps trained", str(info["steps_trained"])),
        ("checkpoints", steps + (" + best" if info["has_best"] else "")),
        ("best BLEU", bleu),
    ]
    return "\n".join(f"{k + ':':<15}{v}" for k, v in lines)
