"""Write a post-norm seq2seq run's weights as a Hugging Face MarianMTModel (for benchmarks).

    PY=~/.cache/seq2seq-peers/venv/bin/python      # needs transformers, not seq2seq
    $PY scripts/export_hf_marian.py --run runs/x --out /tmp/x-hf [--checkpoint FILE]

Lets `generate` (and anything that reads Marian) run the very weights the project decodes, so a
speed comparison does the same work on both sides. Marian is the same architecture as a post-norm
seq2seq model with tied joint embeddings (§3.1–3.5: embeddings × √d_model, sinusoidal positions,
no final norm), with two layout differences handled here: q/k/v projections are separate, and
Marian's sinusoidal table puts all sines before all cosines where the paper interleaves them.
The second is a fixed permutation of the model dimension; applying it to every weight that reads
or writes the residual stream gives a network that computes exactly the same function.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file
from transformers import MarianConfig, MarianMTModel

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2  # seq2seq's fixed special ids
QKV = ("q_proj", "k_proj", "v_proj")


def latest_weights(run: Path) -> Path:
    best = run / "checkpoints" / "best.safetensors"
    if best.is_file():
        return best
    steps = sorted((run / "checkpoints").glob("step_*.safetensors"))
    if not steps:
        raise SystemExit(f"error: no checkpoint in {run / 'checkpoints'}")
    return steps[-1]


def marian_state(w: dict[str, torch.Tensor], m: dict, perm: torch.Tensor) -> dict:
    """seq2seq tensor names and layout → MarianMTModel's, residual dimension permuted."""
    d = m["d_model"]

    def reads(t):  # a weight whose input is the residual stream
        return t[:, perm]

    def writes(t):  # a weight or bias whose output is the residual stream
        return t[perm]

    out: dict[str, torch.Tensor] = {"model.shared.weight": reads(w["output.weight"])}

    def attention(src: str, dst: str, fused: str, names: tuple[str, ...]) -> None:
        weights = w[f"{src}.{fused}.weight"].split(d, dim=0)
        biases = w[f"{src}.{fused}.bias"].split(d, dim=0)
        for name, weight, bias in zip(names, weights, biases):
            out[f"{dst}.{name}.weight"] = reads(weight)
            out[f"{dst}.{name}.bias"] = bias
        out[f"{dst}.out_proj.weight"] = writes(w[f"{src}.out_proj.weight"])
        out[f"{dst}.out_proj.bias"] = writes(w[f"{src}.out_proj.bias"])

    def norm(src: str, dst: str) -> None:
        out[f"{dst}.weight"] = writes(w[f"{src}.weight"])
        out[f"{dst}.bias"] = writes(w[f"{src}.bias"])

    def ffn(src: str, dst: str) -> None:
        out[f"{dst}.fc1.weight"] = reads(w[f"{src}.ffn.up.weight"])
        out[f"{dst}.fc1.bias"] = w[f"{src}.ffn.up.bias"]
        out[f"{dst}.fc2.weight"] = writes(w[f"{src}.ffn.down.weight"])
        out[f"{dst}.fc2.bias"] = writes(w[f"{src}.ffn.down.bias"])

    for i in range(m["encoder_layers"]):
        src, dst = f"encoder_layers.{i}", f"model.encoder.layers.{i}"
        attention(f"{src}.self_attn", f"{dst}.self_attn", "qkv_proj", QKV)
        norm(f"{src}.attn_block.norm", f"{dst}.self_attn_layer_norm")
        ffn(src, dst)
        norm(f"{src}.ffn_block.norm", f"{dst}.final_layer_norm")
    for i in range(m["decoder_layers"]):
        src, dst = f"decoder_layers.{i}", f"model.decoder.layers.{i}"
        attention(f"{src}.self_attn", f"{dst}.self_attn", "qkv_proj", QKV)
        norm(f"{src}.self_block.norm", f"{dst}.self_attn_layer_norm")
        cross = f"{src}.cross_attn"
        out[f"{dst}.encoder_attn.q_proj.weight"] = reads(w[f"{cross}.q_proj.weight"])
        out[f"{dst}.encoder_attn.q_proj.bias"] = w[f"{cross}.q_proj.bias"]
        # Keys and values read the encoder output, which is permuted the same way.
        attention(cross, f"{dst}.encoder_attn", "kv_proj", ("k_proj", "v_proj"))
        norm(f"{src}.cross_block.norm", f"{dst}.encoder_attn_layer_norm")
        ffn(src, dst)
        norm(f"{src}.ffn_block.norm", f"{dst}.final_layer_norm")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--checkpoint", type=Path)
    args = p.parse_args()
    cfg = yaml.safe_load((args.run / "config.yaml").read_text(encoding="utf-8"))
    m = cfg["model"]
    if m.get("norm_first") or not m.get("tie_embeddings", True) or not cfg["tokenizer"]["joint"]:
        raise SystemExit("error: Marian holds post-norm models with tied joint embeddings only")
    w = load_file(str(args.checkpoint or latest_weights(args.run)))
    d = m["d_model"]
    vocab = w["output.weight"].shape[0]
    config = MarianConfig(
        vocab_size=vocab,
        decoder_vocab_size=vocab,
        d_model=d,
        encoder_layers=m["encoder_layers"],
        decoder_layers=m["decoder_layers"],
        encoder_attention_heads=m["heads"],
        decoder_attention_heads=m["heads"],
        encoder_ffn_dim=m["ffn_dim"],
        decoder_ffn_dim=m["ffn_dim"],
        activation_function="relu",
        max_position_embeddings=m["max_positions"],
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID,
        forced_eos_token_id=None,
        bos_token_id=None,
    )
    model = MarianMTModel(config).eval()
    # Marian's table: sin(pos·ω_i) at i, cos(pos·ω_i) at d/2 + i; the paper's: at 2i and 2i+1.
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    state = marian_state(w, m, perm)
    missing, unexpected = model.load_state_dict(state, strict=False)
    left = [k for k in missing if "embed_positions" not in k and "final_logits_bias" not in k]
    left = [k for k in left if not k.endswith("embed_tokens.weight") and k != "lm_head.weight"]
    if left or unexpected:
        raise SystemExit(f"error: unmapped weights: missing {left}, unexpected {unexpected}")
    model.tie_weights()
    # The run's GNMT α for HF's length normalisation (score / len^α): the same preference for
    # length, so beam search on both sides ends at comparable lengths.
    model.generation_config.num_beams = cfg["decode"]["beam_size"]
    model.generation_config.length_penalty = cfg["decode"]["length_penalty"]
    assert torch.equal(model.lm_head.weight, state["model.shared.weight"])
    model.save_pretrained(args.out)
    print(f"wrote {args.out} ({sum(t.numel() for t in model.parameters()):,} parameters)")


if __name__ == "__main__":
    main()
