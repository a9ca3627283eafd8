"""The fused loss's output-layer products on oneDNN's packed weight (train/onednn.py): packed once
per loss, every chunk at one row count (so oneDNN builds one kernel, never one per batch shape),
the same values and gradients as the plain products; autocast computes as before."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from seq2seq.data.batching import collate, no_peek_mask
from seq2seq.train.loss import TranslationLoss, label_smoothed_loss, linear_cross_entropy
from tests.factories import tiny_model, tiny_shape

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN"
)

PACKED = "_linear_pointwise"
VOCAB = 9000
CHUNK = (1 << 20) // VOCAB  # the loss's rows per chunk on CPU at this vocabulary


class Ops(TorchDispatchMode):
    """The ops that reach the kernels, with the row count of their first argument."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        rows = first.size(0) if first is not None and first.dim() else -1
        self.calls.append((func.overloadpacket.__name__, rows))
        return func(*args, **(kwargs or {}))

    def named(self, name: str) -> list[int]:
        return [rows for op, rows in self.calls if op == name]


def _loss(rows: int, seed: int = 0) -> Ops:
    torch.manual_seed(seed)
    hidden = torch.randn(rows, 16, requires_grad=True)
    weight = torch.randn(VOCAB, 16, requires_grad=True)
    with Ops() as ops:
        linear_cross_entropy(hidden, weight, torch.randint(0, VOCAB, (rows,)), 0.1).backward()
    return ops


def test_the_fused_loss_packs_the_output_layer_once_for_all_its_chunks():
    ops = _loss(300)
    assert len(ops.named("_reorder_linear_weight")) == 2  # the weight, and its transpose
    assert len(ops.named(PACKED)) == 2 * 3  # 300 rows: three chunks of ≤ 116 rows


@pytest.mark.parametrize("rows", [1, 57, 300, 347])
def test_every_packed_product_has_one_row_count_whatever_the_batch(rows):
    # oneDNN keeps a kernel (and its caches) per input shape: a ragged last chunk made new ones
    # at nearly every batch, and the process grew by hundreds of MB over a training run.
    assert set(_loss(rows).named(PACKED)) == {CHUNK}


@pytest.mark.parametrize("rows", [5, 300])
def test_the_packed_loss_equals_the_reference_in_value_and_gradients(rows):
    torch.manual_seed(3)
    hidden = torch.randn(rows, 16, requires_grad=True)
    weight = (torch.randn(VOCAB, 16) * 0.3).requires_grad_()
    bias = torch.randn(VOCAB)
    target = torch.randint(0, VOCAB, (rows,))
    reference = label_smoothed_loss(hidden @ weight.T + bias, target, 0.1)
    reference.backward()
    expected = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None

    with Ops() as ops:
        got = linear_cross_entropy(hidden, weight, target, 0.1, bias=bias)
        got.backward()
    assert ops.named(PACKED)
    assert torch.allclose(got, reference, rtol=1e-5)
    assert torch.allclose(hidden.grad, expected[0], atol=1e-5)
    assert torch.allclose(weight.grad, expected[1], atol=1e-5)


def _step_grads(model) -> list[torch.Tensor]:
    batch = collate([[5, 6, 7, 8, 2], [9, 10, 2]], [[11, 12, 13], [14, 15, 16, 17, 18]])
    torch.manual_seed(1)
    TranslationLoss(model, 0.1)(batch.src, batch.tgt_in, batch.tgt_out, batch.src_mask).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_a_training_step_has_the_plain_steps_gradients_and_the_same_bits_twice():
    plain = tiny_model(tiny_shape(dropout=0.0), 60, seed=0).train()
    batch = collate([[5, 6, 7, 8, 2], [9, 10, 2]], [[11, 12, 13], [14, 15, 16, 17, 18]])
    logits = plain(batch.src, batch.tgt_in, batch.src_mask, no_peek_mask(batch.tgt_in))
    label_smoothed_loss(logits, batch.tgt_out, 0.1).backward()  # F.cross_entropy on the logits
    expected = [p.grad.clone() for p in plain.parameters()]

    first = _step_grads(tiny_model(tiny_shape(dropout=0.0), 60, seed=0).train())
    second = _step_grads(tiny_model(tiny_shape(dropout=0.0), 60, seed=0).train())
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(first, expected))
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_autocast_computes_as_before():
    hidden = torch.randn(40, 16, requires_grad=True)
    weight = torch.randn(VOCAB, 16, requires_grad=True)
    with Ops() as ops, torch.autocast("cpu", dtype=torch.bfloat16):
        linear_cross_entropy(hidden, weight, torch.randint(0, VOCAB, (40,)), 0.1).backward()
    assert not ops.named(PACKED)
