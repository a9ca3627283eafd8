"""Low precision end to end: under autocast every matmul runs in the autocast dtype, the fused
loss matches the reference, the KV cache holds the compute dtype, and a model cast wholly to bf16
trains and decodes. CPU bf16 autocast stands in for CUDA's here, so CI runs it."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from seq2seq.data.batching import collate, no_peek_mask, padding_mask
from seq2seq.decode.search import beam_search, greedy
from seq2seq.decode.step import Settings
from seq2seq.model.transformer import Transformer
from seq2seq.train.loss import TranslationLoss, label_smoothed_loss, linear_cross_entropy
from tests.factories import tiny_model, tiny_shape

BF16 = torch.bfloat16
MATMULS = {
    "mm",
    "addmm",
    "addmm_",
    "bmm",
    "baddbmm",
    "baddbmm_",
    "matmul",
    "linear",
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_attention_math",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
}


class MatmulDtypes(TorchDispatchMode):
    """Records the floating dtypes of every matmul-like op that reaches the kernels."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[str, set[torch.dtype]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in MATMULS:
            dtypes = {
                a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()
            }
            self.seen.append((name, dtypes))
        return func(*args, **(kwargs or {}))

    def fp32(self) -> list[str]:
        return [name for name, dtypes in self.seen if torch.float32 in dtypes]


def _model(vocab: int = 60) -> Transformer:
    return tiny_model(tiny_shape(dropout=0.1, norm_first=True), vocab, seed=0)


def _batch():
    return collate([[5, 6, 7, 8, 2], [9, 10, 2]], [[11, 12, 13], [14, 15, 16, 17, 18]])


@pytest.mark.parametrize("rows", [3, 300])  # one chunk, and several
def test_fused_loss_under_autocast_equals_the_unfused_reference_in_value_and_gradient(rows):
    torch.manual_seed(1)
    hidden = torch.randn(rows, 32, requires_grad=True)  # float32, as a LayerNorm leaves it
    weight = (torch.randn(9000, 32) * 0.2).requires_grad_()
    target = torch.randint(1, 9000, (rows,))  # never padding (0), which the reference drops
    with torch.autocast("cpu", dtype=BF16):
        reference = label_smoothed_loss(hidden @ weight.T, target, 0.1)
    reference.backward()
    expected = reference.detach(), hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    with torch.autocast("cpu", dtype=BF16):
        fused = linear_cross_entropy(hidden, weight, target, 0.1)
    fused.backward()
    assert fused.dtype == torch.float32
    assert hidden.grad.dtype == weight.grad.dtype == torch.float32
    # bf16 keeps 8 bits of mantissa: agreement to a few parts in a thousand.
    assert fused.item() == pytest.approx(expected[0].item(), rel=5e-3)
    for got, want in ((hidden.grad, expected[1]), (weight.grad, expected[2])):
        assert (got - want).norm() <= 2e-2 * want.norm()


def test_no_float32_matmul_in_a_training_step_under_autocast():
    model, batch = _model().train(), _batch()
    objective = TranslationLoss(model, 0.1)
    with MatmulDtypes() as record:
        with torch.autocast("cpu", dtype=BF16):
            loss = objective(batch.src, batch.tgt_in, batch.tgt_out, batch.src_mask)
        loss.backward()
    assert len(record.seen) > 20, "the recorder should see the model's matmuls"
    assert record.fp32() == []
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())


def test_no_float32_matmul_in_a_decoder_step_and_the_cache_holds_the_compute_dtype():
    model, batch = _model().eval(), _batch()
    with torch.inference_mode(), torch.autocast("cpu", dtype=BF16):
        memory = model.encode(batch.src, batch.src_mask)
        cache = model.start_decoding(memory, batch.src_mask, beam=2)
        ids = torch.ones(4, dtype=torch.long)
        with MatmulDtypes() as record:
            model.decode_step(ids, cache)
            model.decode_step(ids + 10, cache)
    assert record.seen and record.fp32() == []
    for tensors in (cache.self_k, cache.self_v, cache.cross_k, cache.cross_v):
        assert {t.dtype for t in tensors} == {BF16}
    assert cache.self_k[0].shape[2] == 2  # two positions cached


def test_a_model_cast_wholly_to_bf16_trains_and_decodes_close_to_float32():
    model, batch = _model().eval(), _batch()
    reference = model(batch.src, batch.tgt_in, batch.src_mask, no_peek_mask(batch.tgt_in))
    half = _model().to(BF16).eval()
    logits = half(batch.src, batch.tgt_in, batch.src_mask, no_peek_mask(batch.tgt_in))
    assert logits.dtype == BF16
    assert (logits.float() - reference).abs().max() < 0.1 * reference.abs().max()

    half.train()
    loss = TranslationLoss(half, 0.1)(batch.src, batch.tgt_in, batch.tgt_out, batch.src_mask)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad.dtype == BF16 and torch.isfinite(p.grad).all() for p in half.parameters())

    half.eval()
    src = batch.src
    greedy_out = greedy(
        half, src, padding_mask(src), Settings(max_len_a=1.0, max_len_b=4, alpha=0.0)
    )
    beam_out = beam_search(
        half, src, padding_mask(src), Settings(beam=3, max_len_a=1.0, max_len_b=4)
    )
    assert len(greedy_out) == len(beam_out) == 2
    assert all(h.tokens is not None and h.log_prob < 0 for h in greedy_out)


def test_cached_decoding_under_autocast_matches_recomputing_the_prefix():
    model, batch = _model().eval(), _batch()
    tgt = torch.tensor([[1, 20, 21, 22, 23], [1, 24, 25, 26, 27]])
    with torch.inference_mode(), torch.autocast("cpu", dtype=BF16):
        memory = model.encode(batch.src, batch.src_mask)
        full = model.logits(
            model.decoder_states(tgt, memory, batch.src_mask, no_peek_mask(tgt))
        ).float()
        cache = model.start_decoding(memory, batch.src_mask)
        for t in range(tgt.size(1)):
            step = model.decode_step(tgt[:, t], cache).float()
            assert (step - full[:, t]).abs().max() < 0.05 * full[:, t].abs().max(), t


@pytest.mark.parametrize(
    "precision, tf32", [("fp32", False), ("tf32", True), ("bf16", True), ("auto", True)]
)
def test_tf32_only_when_the_precision_setting_asks_for_it(precision, tf32):
    from seq2seq.runtime import autocast_dtype, fast_math

    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = matmul.allow_tf32, cudnn.allow_tf32
    try:
        matmul.allow_tf32 = cudnn.allow_tf32 = not tf32
        fast_math(torch.device("cuda"), precision)
        assert matmul.allow_tf32 is tf32 and cudnn.allow_tf32 is tf32
        fast_math(torch.device("cpu"), "fp32")  # nothing to switch on a CPU
        assert matmul.allow_tf32 is tf32
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = saved
    if precision in ("fp32", "tf32"):
        assert autocast_dtype(torch.device("cuda"), precision) is None
