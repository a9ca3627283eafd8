"""Label-smoothed loss and the inverse-square-root schedule."""

from __future__ import annotations

import pytest
import torch

from seq2seq.data.batching import collate, no_peek_mask
from seq2seq.data.tokenizer import PAD_ID
from seq2seq.train.loss import TranslationLoss, label_smoothed_loss, linear_cross_entropy
from seq2seq.train.schedule import inverse_sqrt, inverse_sqrt_scheduler
from tests.factories import tiny_model


def test_padding_positions_add_nothing_to_the_loss():
    logits = torch.randn(2, 4, 9)
    target = torch.tensor([[4, 5, 6, 7], [4, 5, PAD_ID, PAD_ID]])
    full = label_smoothed_loss(logits, target, 0.1)
    changed = logits.clone()
    changed[1, 2:] = torch.randn(2, 9) * 100
    assert torch.allclose(label_smoothed_loss(changed, target, 0.1), full)


def test_label_smoothing_mixes_nll_with_uniform_cross_entropy():
    eps, vocab = 0.1, 9
    logits = torch.randn(3, vocab)
    target = torch.tensor([4, 5, 6])
    logp = logits.log_softmax(-1)
    nll = -logp.gather(1, target[:, None]).squeeze(1)
    uniform = -logp.mean(-1)
    expected = ((1 - eps) * nll + eps * uniform).sum()
    assert torch.allclose(label_smoothed_loss(logits, target, eps), expected, atol=1e-5)


def test_loss_takes_logits_and_applies_softmax_once():
    logits = torch.randn(2, 9)
    target = torch.tensor([3, 4])
    nll = -logits.log_softmax(-1)[[0, 1], target].sum()
    assert torch.allclose(label_smoothed_loss(logits, target, 0.0), nll, atol=1e-6)


def test_learning_rate_warms_up_linearly_then_decays_as_inverse_sqrt():
    assert inverse_sqrt(1, 100) == pytest.approx(0.01)
    assert inverse_sqrt(50, 100) == pytest.approx(0.5)
    assert inverse_sqrt(100, 100) == pytest.approx(1.0)
    assert inverse_sqrt(400, 100) == pytest.approx(0.5)


def test_scheduler_gives_the_first_update_the_first_warmup_rate():
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([param], lr=1.0)
    sched = inverse_sqrt_scheduler(opt, warmup=10)
    rates = []
    for _ in range(20):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert rates[0] == pytest.approx(0.1)
    assert rates[9] == pytest.approx(1.0)
    assert rates[19] == pytest.approx((10 / 20) ** 0.5)


@pytest.mark.parametrize("rows", [1, 7, 300])  # one chunk, and several with a ragged last one
def test_fused_output_layer_and_loss_equal_the_reference_in_value_and_gradient(rows):
    hidden = torch.randn(rows, 16, requires_grad=True)
    weight = (torch.randn(9000, 16) * 0.3).requires_grad_()
    target = torch.randint(0, 9000, (rows,))

    reference = label_smoothed_loss(hidden @ weight.T, target, 0.1)
    reference.backward()
    expected = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None

    fused = linear_cross_entropy(hidden, weight, target, 0.1)
    (fused * 3.0).backward()  # the upstream gradient scales both results
    assert torch.allclose(fused, reference, rtol=1e-5)
    assert torch.allclose(hidden.grad, 3.0 * expected[0], atol=1e-5)
    assert torch.allclose(weight.grad, 3.0 * expected[1], atol=1e-5)


def test_translation_loss_is_the_summed_smoothed_loss_of_the_models_logits(tiny_model_config):
    model = tiny_model(tiny_model_config, 50).eval()
    batch = collate([[5, 6, 7, 2], [8, 2]], [[10, 11, 12], [13]])
    logits = model(batch.src, batch.tgt_in, batch.src_mask, no_peek_mask(batch.tgt_in))
    expected = label_smoothed_loss(logits, batch.tgt_out, 0.1)
    got = TranslationLoss(model, 0.1)(batch.src, batch.tgt_in, batch.tgt_out, batch.src_mask)
    assert torch.allclose(got, expected, rtol=1e-5)


def test_fused_loss_skips_gradient_work_when_not_training():
    hidden, weight = torch.randn(5, 8), torch.randn(20, 8, requires_grad=True)
    with torch.no_grad():
        loss = linear_cross_entropy(hidden, weight, torch.randint(0, 20, (5,)), 0.1)
    assert not loss.requires_grad
