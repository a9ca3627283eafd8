"""The Transformer, pinned down against the paper and against the traps tutorials fall into."""

from __future__ import annotations

import math

import pytest
import torch

from seq2seq.data.batching import no_peek_mask, padding_mask
from seq2seq.data.tokenizer import PAD_ID
from seq2seq.model.transformer import Dropout, Residual, sinusoidal_positions
from tests.factories import tiny_model, tiny_shape

VOCAB = 50


def _ids(*rows: list[int]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])


def test_positional_encoding_equals_the_papers_formula():
    d_model, length = 16, 40
    pe = sinusoidal_positions(length, d_model)
    for pos in range(length):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_padded_keys_get_exactly_zero_attention_weight(tiny_model_config, monkeypatch):
    # Every attention call the model makes, with the mask the model itself built, is run again
    # with one-hot values: the output of that run *is* its weight matrix.
    import seq2seq.model.transformer as model_module

    real_attend, calls = model_module.attend, []

    def recording(q, k, v, mask, *, dropout=0.0, causal=False):
        eye = torch.eye(k.size(2)).expand(*k.shape[:2], -1, -1)
        calls.append((k.size(2), real_attend(q, k, eye, mask, dropout=0.0, causal=causal)))
        return real_attend(q, k, v, mask, dropout=dropout, causal=causal)

    monkeypatch.setattr(model_module, "attend", recording)
    model = tiny_model(tiny_model_config, VOCAB).eval()
    src = _ids([5, 6, 7, 8, 9, 2], [5, 6, 2])  # the second sentence has 3 padded positions
    tgt = _ids([1, 10, 11, 12], [1, 13])
    model(src, tgt, padding_mask(src), no_peek_mask(tgt))
    layers = tiny_model_config.encoder_layers + 2 * tiny_model_config.decoder_layers
    assert len(calls) == layers
    over_source = [w for keys, w in calls if keys == src.size(1)]  # encoder and cross-attention
    assert len(over_source) == tiny_model_config.encoder_layers + tiny_model_config.decoder_layers
    for weights in over_source:
        assert torch.all(weights[1, :, :, 3:] == 0.0)  # exactly zero, not merely small
        assert torch.all(weights[1, :, :, :3] > 0)
        assert torch.allclose(weights.sum(-1), torch.ones_like(weights.sum(-1)))


def test_what_padded_source_positions_hold_cannot_change_real_outputs(tiny_model_config):
    model = tiny_model(tiny_model_config, VOCAB).eval()
    src = _ids([5, 6, 7, 8, 9, 2], [5, 6, 2])
    tgt = _ids([1, 10, 11, 12], [1, 13, 14, 15])  # no target padding: only the source's

    def outputs():
        memory = model.encode(src, padding_mask(src))
        states = model.decoder_states(tgt, memory, padding_mask(src), no_peek_mask(tgt))
        return memory[1, :3], states

    before = outputs()
    with torch.no_grad():  # the padding embedding, normally zero, becomes large and random
        model.src_embed.weight[PAD_ID] = torch.randn(tiny_model_config.d_model) * 100
    after = outputs()
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1])


def test_no_peek_mask_hides_future_and_padded_target_tokens():
    tgt_in = _ids([1, 7, 8, 9], [1, 7])
    mask = no_peek_mask(tgt_in)
    expected_short = torch.tensor(
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]], dtype=torch.bool
    )
    assert torch.equal(mask[0], torch.ones(4, 4, dtype=torch.bool).tril())
    assert torch.equal(mask[1], expected_short)


def test_padding_does_not_change_the_outputs_of_real_positions(tiny_model_config):
    model = tiny_model(tiny_model_config, VOCAB).eval()
    long_src, short_src = [5, 6, 7, 8, 9, 10, 2], [11, 12, 2]
    long_tgt, short_tgt = [1, 20, 21, 22, 23], [1, 24, 25]
    src, tgt = _ids(long_src, short_src), _ids(long_tgt, short_tgt)
    batched = model(src, tgt, padding_mask(src), no_peek_mask(tgt))
    alone_src, alone_tgt = _ids(short_src), _ids(short_tgt)
    alone = model(alone_src, alone_tgt, padding_mask(alone_src), no_peek_mask(alone_tgt))
    assert torch.allclose(batched[1, : len(short_tgt)], alone[0], atol=1e-5)


def test_changing_a_future_target_token_leaves_earlier_outputs_unchanged(tiny_model_config):
    model = tiny_model(tiny_model_config, VOCAB).eval()
    src = _ids([5, 6, 7, 2])
    tgt = _ids([1, 10, 11, 12, 13, 14])
    changed = tgt.clone()
    changed[0, 4] = 30
    out = model(src, tgt, padding_mask(src), no_peek_mask(tgt))
    out_changed = model(src, changed, padding_mask(src), no_peek_mask(changed))
    assert torch.equal(out[0, :4], out_changed[0, :4])
    assert not torch.allclose(out[0, 4:], out_changed[0, 4:])


def test_decoder_returns_logits_not_probabilities(tiny_model_config):
    model = tiny_model(tiny_model_config, VOCAB).eval()
    src, tgt = _ids([5, 6, 7, 2]), _ids([1, 10, 11])
    out = model(src, tgt, padding_mask(src), no_peek_mask(tgt))
    assert out.shape == (1, 3, VOCAB)
    assert (out < 0).any(), "probabilities are never negative; logits are"
    assert not torch.allclose(out.exp().sum(-1), torch.ones(1, 3), atol=1e-3)
    assert not torch.allclose(out.sum(-1), torch.ones(1, 3), atol=1e-3)


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_adds_the_sublayer_output_to_its_input(norm_first):
    block = Residual(4, dropout=0.0, norm_first=norm_first)
    x = torch.randn(2, 3, 4)
    out = block(x, lambda h: torch.full_like(h, 2.0))
    expected = x + 2.0 if norm_first else block.norm(x + 2.0)
    assert torch.allclose(out, expected)


def test_cross_attention_queries_are_the_self_attention_blocks_output(tiny_model_config):
    model = tiny_model(tiny_shape(norm_first=False), VOCAB).eval()
    layer = model.decoder_layers[0]
    seen = {}
    layer.self_block.register_forward_hook(lambda m, i, o: seen.__setitem__("self_out", o))
    layer.cross_attn.register_forward_hook(lambda m, i, o: seen.__setitem__("cross_in", i[0]))
    src, tgt = _ids([5, 6, 7, 2]), _ids([1, 10, 11])
    model(src, tgt, padding_mask(src), no_peek_mask(tgt))
    assert torch.equal(seen["cross_in"], seen["self_out"])


def test_embeddings_are_scaled_by_sqrt_d_model(tiny_model_config):
    model = tiny_model(tiny_model_config, VOCAB).eval()
    ids = torch.tensor([[7, 8]])
    expected = model.src_embed(ids) * math.sqrt(32) + sinusoidal_positions(2, 32)
    assert torch.allclose(model.embed(model.src_embed, ids), expected)


def test_joint_vocabulary_ties_source_target_and_output_embeddings(tiny_model_config):
    model = tiny_model(tiny_model_config, VOCAB).eval()
    assert model.src_embed.weight is model.tgt_embed.weight is model.output.weight
    separate = tiny_model(tiny_model_config, 40, 50)
    assert separate.tgt_embed.weight is separate.output.weight
    assert separate.src_embed.weight is not separate.tgt_embed.weight


def test_model_follows_dtype_and_device_moves(tiny_model_config):
    model = tiny_model(tiny_model_config, VOCAB).eval().to(torch.float64)
    src, tgt = _ids([5, 6, 2]), _ids([1, 9])
    out = model(src, tgt, padding_mask(src), no_peek_mask(tgt))
    assert out.dtype == torch.float64


@pytest.mark.slow
def test_pre_norm_model_trains_on_a_copy_task(tiny_model_config):
    model = tiny_model(tiny_shape(norm_first=True), VOCAB)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    src = torch.randint(4, VOCAB, (16, 6))
    tgt_in = torch.cat([torch.ones(16, 1, dtype=torch.long), src[:, :-1]], dim=1)
    losses = []
    for _ in range(60):
        logits = model(src, tgt_in, padding_mask(src), no_peek_mask(tgt_in))
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), src.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_step_by_step_decoding_equals_recomputing_the_prefix(norm_first, seed):
    cfg = tiny_shape(decoder_layers=3, ffn_dim=48, dropout=0.1, norm_first=norm_first)
    model = tiny_model(cfg, VOCAB, seed=seed).eval()
    lengths = [7, 3, 5]  # padding in the batch
    src = _ids(*[torch.randint(4, VOCAB, (n - 1,)).tolist() + [2] for n in lengths])
    tgt = torch.cat([torch.ones(3, 1, dtype=torch.long), torch.randint(4, VOCAB, (3, 8))], 1)
    src_mask = padding_mask(src)
    memory = model.encode(src, src_mask)
    full = model.logits(model.decoder_states(tgt, memory, src_mask, no_peek_mask(tgt)))
    cache = model.start_decoding(memory, src_mask)
    for t in range(tgt.size(1)):
        step = model.decode_step(tgt[:, t], cache)
        assert torch.allclose(step, full[:, t], atol=1e-5), f"position {t}"


def test_a_kept_and_reordered_cache_continues_the_selected_sentences(tiny_model_config):
    model = tiny_model(tiny_model_config, VOCAB).eval()
    src = _ids([5, 6, 7, 2], [8, 9, 2])
    src_mask = padding_mask(src)
    cache = model.start_decoding(model.encode(src, src_mask), src_mask)
    model.decode_step(torch.tensor([1, 1]), cache)
    model.decode_step(torch.tensor([10, 11]), cache)
    cache.keep(torch.tensor([1, 0]))  # the two sentences swap places
    got = model.decode_step(torch.tensor([12, 13]), cache)
    prefix = torch.tensor([[1, 11, 12], [1, 10, 13]])
    flipped = src.flip(0)
    memory = model.encode(flipped, padding_mask(flipped))
    states = model.decoder_states(prefix, memory, padding_mask(flipped), no_peek_mask(prefix))
    assert torch.allclose(got, model.logits(states)[:, -1], atol=1e-5)


def test_beams_moving_within_their_sentence_continue_the_prefixes_they_took(tiny_model_config):
    model = tiny_model(tiny_model_config, VOCAB).eval()
    src = _ids([5, 6, 7, 2], [8, 9, 2])
    src_mask = padding_mask(src)
    cache = model.start_decoding(model.encode(src, src_mask), src_mask, beam=2)
    model.decode_step(torch.tensor([1, 1, 1, 1]), cache)
    model.decode_step(torch.tensor([10, 11, 20, 21]), cache)
    cache.reorder(torch.tensor([1, 1, 3, 2]))  # both beams of sentence 0 extend its second
    got = model.decode_step(torch.tensor([12, 13, 22, 23]), cache)
    prefix = torch.tensor([[1, 11, 12], [1, 11, 13], [1, 21, 22], [1, 20, 23]])
    src2 = src.repeat_interleave(2, dim=0)
    memory = model.encode(src2, padding_mask(src2))
    states = model.decoder_states(prefix, memory, padding_mask(src2), no_peek_mask(prefix))
    assert torch.allclose(got, model.logits(states)[:, -1], atol=1e-5)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.123457])
def test_cpu_dropout_keeps_one_minus_p_and_scales_kept_values_to_an_unbiased_mean(p):
    drop = Dropout(p).train()
    assert abs(drop.p_used - p) <= 0.5 / Dropout.LEVELS
    x = torch.rand(1_000_000) + 0.5
    y = drop(x)
    kept = y != 0
    # Binomial: the keep rate is within 5 standard deviations of 1 - p.
    n = x.numel()
    assert abs(kept.float().mean().item() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)
    # Every kept value is the input times exactly 1/(1 - p_used), the probability applied.
    assert torch.equal(y[kept], x[kept] * (1.0 / (1.0 - drop.p_used)))
    # So E[y] = x: over many draws of one input the mean output is the input.
    ones = torch.ones(4_000_000)
    assert drop(ones).double().mean().item() == pytest.approx(1.0, abs=3e-3)


def test_cpu_dropout_gradient_uses_the_same_mask_and_scale():
    drop = Dropout(0.25).train()
    x = torch.rand(10_000, requires_grad=True)
    y = drop(x)
    y.sum().backward()
    scale = 1.0 / (1.0 - drop.p_used)
    assert torch.equal(x.grad, (y != 0).float() * scale)


def test_dropout_is_the_identity_in_eval_mode_and_at_p_zero():
    x = torch.rand(100)
    assert drop_is_identity(Dropout(0.5).eval(), x) and drop_is_identity(Dropout(0.0).train(), x)


def drop_is_identity(drop: Dropout, x: torch.Tensor) -> bool:
    return drop(x) is x
