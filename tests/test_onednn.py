"""float32 CPU training on oneDNN's packed weights (model/onednn.py): the forward and input-gradient
products of a training step run there, with F.linear's values and gradients; decoding, no-grad
and autocast compute as before."""

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from seq2seq.data.batching import collate
from seq2seq.model.onednn import linear
from seq2seq.train.loss import TranslationLoss, linear_cross_entropy
from tests.factories import tiny_model, tiny_shape

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN"
)

PACKED = "_linear_pointwise"
PLAIN = {"mm", "addmm", "linear", "matmul"}


class Ops(TorchDispatchMode):
    """The names of the ops that reach the kernels."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _step(model, batch) -> Ops:
    with Ops() as ops:
        loss = TranslationLoss(model, 0.1)(batch.src, batch.tgt_in, batch.tgt_out, batch.src_mask)
        loss.backward()
    return ops


def _batch():
    return collate([[5, 6, 7, 8, 2], [9, 10, 2]], [[11, 12, 13], [14, 15, 16, 17, 18]])


def test_training_linear_equals_f_linear_in_value_and_gradients():
    torch.manual_seed(0)
    layer = nn.Linear(24, 40).train()
    x = torch.randn(3, 7, 24, requires_grad=True)
    reference = torch.nn.functional.linear(x, layer.weight, layer.bias)
    reference.backward(torch.ones_like(reference) * torch.arange(40.0))
    expected = [t.grad.clone() for t in (x, layer.weight, layer.bias)]
    for t in (x, layer.weight, layer.bias):
        t.grad = None

    got = linear(layer, x)
    got.backward(torch.ones_like(got) * torch.arange(40.0))
    assert got.shape == reference.shape
    assert torch.allclose(got, reference, atol=1e-5)
    for t, want in zip((x, layer.weight, layer.bias), expected):
        assert torch.allclose(t.grad, want, atol=1e-4)


def test_a_cpu_training_step_multiplies_by_packed_weights_except_for_weight_gradients():
    model = tiny_model(tiny_shape(dropout=0.1), 60, seed=0).train()
    ops = _step(model, _batch())
    packed = ops.names.count(PACKED)
    plain = sum(name in PLAIN for name in ops.names)
    # Forward and input gradient of every linear layer (and the loss's two products) are packed;
    # the weight gradients (one per layer, and the loss's chunks) stay plain GEMMs.
    linears = sum(type(m) is nn.Linear for m in model.modules()) - 1  # the output layer: the loss's
    assert packed >= 2 * linears
    assert plain <= linears + 1


def test_a_step_gives_the_same_bits_twice():
    grads = []
    for _ in range(2):
        model = tiny_model(tiny_shape(dropout=0.1), 60, seed=0).train()
        torch.manual_seed(1)
        _step(model, _batch())
        grads.append([p.grad.clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_evaluation_and_autocast_compute_as_before():
    model = tiny_model(tiny_shape(), 60, seed=0).eval()
    batch = _batch()
    with Ops() as ops:  # decoding's path: a model in eval mode, gradients or not
        model(batch.src, batch.tgt_in, batch.src_mask, None).sum().backward()
    assert PACKED not in ops.names
    model.train()
    with Ops() as ops, torch.autocast("cpu", dtype=torch.bfloat16):
        TranslationLoss(model, 0.1)(batch.src, batch.tgt_in, batch.tgt_out, batch.src_mask)
    assert PACKED not in ops.names


def test_the_fused_loss_packs_the_output_layer_once_for_all_its_chunks():
    hidden = torch.randn(300, 16, requires_grad=True)
    weight = torch.randn(9000, 16, requires_grad=True)
    with Ops() as ops:
        linear_cross_entropy(hidden, weight, torch.randint(0, 9000, (300,)), 0.1).backward()
    assert ops.names.count("_reorder_linear_weight") == 2  # the weight, and its transpose
    assert ops.names.count(PACKED) == 2 * 3  # 300 rows: three chunks of ≤ 116 (1M floats / 9000)
