"""Cross-attention weights of a trained model (§3.2.1), for looking at what it aligns.

SDPA never returns its weights, so this replays the decoder with the model's own modules and
an explicit softmax(QKᵀ/√d_k) in cross-attention; decoding and training keep the fused kernel.
"""

from __future__ import annotations

from pathlib import Path

import torch

from seq2seq.config import load_run_config
from seq2seq.data.batching import pad
from seq2seq.decode import search
from seq2seq.errors import UserError
from seq2seq.model.cross_attention import cross_attention_weights
from seq2seq.model.transformer import Transformer
from seq2seq.run.rundir import load_for_decoding


def attention_of_translation(
    model: Transformer, tokenizer, decode, sentence: str
) -> tuple[list[str], list[str], list[torch.Tensor]]:
    """Greedy-translate one sentence: source pieces, output pieces and per-layer weights."""
    # Output pieces end with EOS; each layer's weights are [H, output, source] for that output.
    if not sentence.strip():
        raise UserError("the sentence to translate is empty")
    ids = tokenizer.encode_src([sentence.strip()])[0]
    if len(ids) > model.cfg.max_positions:
        raise UserError(
            f"the sentence has {len(ids)} tokens; the model takes at most {model.cfg.max_positions}"
        )
    device = next(model.parameters()).device
    model.eval()
    special = tokenizer.ids
    src = pad([ids], pad_id=special.pad).to(device)
    greedy = decode.model_copy(update={"beam_size": 1, "nbest": 1})
    hyp = search.decode(model, src, greedy, special=special)[0][0]
    # Row t of the weights is the step that produced output t (start + the first t tokens in).
    tgt_in = torch.tensor([[special.start, *hyp.tokens]], device=device)
    _, weights = cross_attention_weights(model, src, tgt_in)
    src_pieces = tokenizer.src_pieces(ids)
    out_pieces = tokenizer.tgt_pieces([*hyp.tokens, special.eos])
    return src_pieces, out_pieces, [w[0].float().cpu() for w in weights]


def load_for_attention(
    run_dir: Path, checkpoint: Path | None, device: str, *, quantize: str | None = None
):
    """The model, tokenizer and decode settings of a run, as `translate` would load them (int8
    or not as `quantize` says, default the run's decode.quantize)."""
    decode = load_run_config(run_dir).decode
    load = decode.load.model_copy(update={"quantize": quantize or decode.quantize})
    rows = decode.batch_size * decode.beam_size
    run, _ = load_for_decoding(run_dir, checkpoint, device, load, rows=rows)
    return run.model, run.tokenizer, decode, run.checkpoint
