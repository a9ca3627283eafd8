"""`seq2seq export`: a trained run as a CTranslate2 model, through CTranslate2's spec API.

The spec is the same network, layer for layer (§3.1): fused q/k/v and k/v projections map onto
CTranslate2's fused linears, post- or pre-norm onto `pre_norm`, and the run's own sinusoidal
table (§3.5) is stored in the model, so no layout of positions is assumed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch

from seq2seq.data.layouts import tokenizer_files
from seq2seq.errors import UserError
from seq2seq.run.rundir import load_run

LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, which the model uses


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy().copy()


def _linear(spec, layer: torch.nn.Linear) -> None:
    spec.weight = _np(layer.weight)
    if layer.bias is not None:
        spec.bias = _np(layer.bias)


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _self_attention_and_ffn(spec, layer, self_norm: torch.nn.LayerNorm) -> None:
    """The blocks encoder and decoder layers share: self-attention and feed-forward."""
    _linear(spec.self_attention.linear[0], layer.self_attn.qkv_proj)
    _linear(spec.self_attention.linear[1], layer.self_attn.out_proj)
    _norm(spec.self_attention.layer_norm, self_norm)
    _linear(spec.ffn.linear_0, layer.ffn.up)
    _linear(spec.ffn.linear_1, layer.ffn.down)
    _norm(spec.ffn.layer_norm, layer.ffn_block.norm)


def transformer_spec(model, src_pieces: list[str], tgt_pieces: list[str], special=None):
    """A CTranslate2 TransformerSpec holding `model`'s weights and vocabularies; `special`
    (SpecialIds) names its special tokens (default: the project's <s>, </s>, <unk>)."""
    from ctranslate2.specs import common_spec, transformer_spec  # optional: seq2seq[export]

    cfg = model.cfg
    activations = {
        "relu": common_spec.Activation.RELU,
        "gelu": common_spec.Activation.GELU,
        "swish": common_spec.Activation.SWISH,
    }
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.encoder_layers, cfg.decoder_layers),
        cfg.heads,
        pre_norm=cfg.norm_first,
        activation=activations[cfg.activation],
    )
    positions = _np(model.positions)
    enc, dec = spec.encoder, spec.decoder
    enc.embeddings[0].weight = _np(model.src_embed.weight)
    enc.position_encodings.encodings = positions
    for layer, src in zip(enc.layer, model.encoder_layers):
        _self_attention_and_ffn(layer, src, src.attn_block.norm)
    dec.embeddings.weight = _np(model.tgt_embed.weight)
    dec.position_encodings.encodings = positions
    for layer, src in zip(dec.layer, model.decoder_layers):
        _self_attention_and_ffn(layer, src, src.self_block.norm)
        _linear(layer.attention.linear[0], src.cross_attn.q_proj)
        _linear(layer.attention.linear[1], src.cross_attn.kv_proj)
        _linear(layer.attention.linear[2], src.cross_attn.out_proj)
        _norm(layer.attention.layer_norm, src.cross_block.norm)
    if cfg.norm_first:  # pre-norm stacks end with a norm (model.encoder_norm/decoder_norm)
        _norm(enc.layer_norm, model.encoder_norm)
        _norm(dec.layer_norm, model.decoder_norm)
    dec.projection.weight = _np(model.output.weight)
    if model.final_logits_bias is not None:
        dec.projection.bias = _np(model.final_logits_bias)
    enc.scale_embeddings = dec.scale_embeddings = cfg.scale_embeddings
    spec.register_source_vocabulary(src_pieces)
    spec.register_target_vocabulary(tgt_pieces)
    if special is not None:
        spec.config.unk_token = tgt_pieces[special.unk]
        spec.config.eos_token = tgt_pieces[special.eos]
        if special.bos is not None:
            spec.config.bos_token = tgt_pieces[special.bos]
        spec.config.decoder_start_token = tgt_pieces[special.start]
    # The tokenizer ends every source with EOS; CTranslate2 adds it, so callers pass pieces only.
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    return spec


def export_ctranslate2(
    run_dir: Path, out: Path, checkpoint: Path | None = None, *, quantization: str | None = None
) -> Path:
    """Write the run's model (best, else latest, checkpoint) as a CTranslate2 model in `out`,
    its weights stored as `quantization` (int8, int16, float16, …; None: float32)."""
    try:  # ctranslate2 is optional: only this command needs it
        from ctranslate2.converters.converter import Converter
        from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES
    except ImportError:
        raise UserError(
            "export to CTranslate2 needs ctranslate2: pip install 'seq2seq[export]'"
        ) from None
    if quantization is not None and quantization not in ACCEPTED_MODEL_TYPES:
        raise UserError(
            f"unknown CTranslate2 quantization {quantization!r}; available: "
            f"{', '.join(ACCEPTED_MODEL_TYPES)}"
        )
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty folder; choose a new one")
    # Float32 weights always (whatever the run's decode.quantize): CTranslate2 quantizes itself.
    run = load_run(run_dir, checkpoint, "cpu")
    tok = run.tokenizer
    spec = transformer_spec(run.model, tok.src_vocabulary(), tok.tgt_vocabulary(), tok.ids)

    class _FromSpec(Converter):
        def _load(self):
            return spec

    # CTranslate2 quantizes on save (int8: one scale per output row, embeddings included).
    _FromSpec().convert(str(out), quantization=quantization, force=True)
    # CTranslate2 takes pieces, not text: the SentencePiece model(s) travel with the weights.
    for model_file in tokenizer_files(run_dir, run.config.tokenizer):
        shutil.copyfile(model_file, out / model_file.name)
    return out
