"""The decoder's self-attention cache: one buffer written in place, reordered and narrowed by
gathering into a spare buffer, grown only when its caller did not say how long outputs get."""

from __future__ import annotations

import torch

from seq2seq.config import DecodeConfig
from seq2seq.data.batching import no_peek_mask, padding_mask
from seq2seq.data.tokenizer import PAD_ID
from seq2seq.decode.search import decode
from tests.factories import tiny_model

VOCAB = 50


def _ids(*rows: list[int]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])


def _full_decoder_last(model, src: torch.Tensor, prefix: torch.Tensor) -> torch.Tensor:
    """The last position's logits of the whole decoder run on `prefix` [N, t] (no cache)."""
    memory = model.encode(src, padding_mask(src))
    states = model.decoder_states(prefix, memory, padding_mask(src), no_peek_mask(prefix))
    return model.logits(states)[:, -1]


@torch.inference_mode()
def test_steps_write_into_the_buffer_allocated_at_the_start(tiny_model_config):
    model = tiny_model(tiny_model_config, VOCAB).eval()
    src = _ids([5, 6, 7, 2], [8, 9, 2])
    cache = model.start_decoding(model.encode(src, padding_mask(src)), padding_mask(src), 1, 4)
    buffer = cache.kv.data_ptr()
    for token in (1, 10, 11, 12):
        model.decode_step(torch.tensor([token, token]), cache)
    assert cache.kv.data_ptr() == buffer and cache.kv.size(4) == 4
    assert [k.shape[2] for k in cache.self_k] == [4] * len(model.decoder_layers)


@torch.inference_mode()
def test_a_cache_given_no_capacity_grows_and_still_equals_the_full_decoder(tiny_model_config):
    model = tiny_model(tiny_model_config, VOCAB).eval()
    src = _ids([5, 6, 7, 2], [8, 9, 2])
    cache = model.start_decoding(model.encode(src, padding_mask(src)), padding_mask(src), 1, 2)
    prefix = torch.tensor([[1, 10, 11, 12, 13], [1, 20, 21, 22, 23]])
    for t in range(prefix.size(1)):
        got = model.decode_step(prefix[:, t], cache)
    assert cache.kv.size(4) >= prefix.size(1)
    torch.testing.assert_close(got, _full_decoder_last(model, src, prefix), atol=1e-5, rtol=0)


@torch.inference_mode()
def test_a_steps_cross_attention_gives_padded_source_keys_zero_weight(tiny_model_config):
    model = tiny_model(tiny_model_config, VOCAB).eval()
    src = _ids([5, 6, 7, 2], [8, 2])
    memory = model.encode(src, padding_mask(src))
    loud = memory.clone()
    loud[1, 2:] = 1e3  # the short sentence's padding positions
    steps = []
    for states in (memory, loud):
        cache = model.start_decoding(states, padding_mask(src), 2, 4)
        steps.append(model.decode_step(torch.tensor([1, 1, 1, 1]), cache))
    torch.testing.assert_close(steps[0], steps[1], atol=0, rtol=0)


@torch.inference_mode()
def test_a_reorder_and_a_narrowing_in_one_step_continue_the_chosen_prefixes(tiny_model_config):
    model = tiny_model(tiny_model_config, VOCAB).eval()
    src = _ids([5, 6, 7, 2], [8, 9, 2], [4, 2])
    cache = model.start_decoding(model.encode(src, padding_mask(src)), padding_mask(src), 2, 8)
    model.decode_step(torch.tensor([1] * 6), cache)
    model.decode_step(torch.tensor([10, 11, 20, 21, 30, 31]), cache)
    cache.reorder(torch.tensor([1, 0, 3, 3, 4, 5]))  # sentence 1: both beams extend its second
    cache.keep(torch.tensor([2, 1]))  # sentence 0 finished; the other two swap places
    got = model.decode_step(torch.tensor([32, 33, 22, 23]), cache)
    prefix = torch.tensor([[1, 30, 32], [1, 31, 33], [1, 21, 22], [1, 21, 23]])
    kept = src[[2, 2, 1, 1]]
    torch.testing.assert_close(got, _full_decoder_last(model, kept, prefix), atol=1e-5, rtol=0)
    assert cache.rows == 4 and cache.self_k[0].shape[:3] == (4, model.cfg.heads, 3)


def test_search_outputs_are_the_same_whether_or_not_the_cache_must_grow(
    tiny_model_config, monkeypatch
):
    model = tiny_model(tiny_model_config, VOCAB).eval()
    src = _ids([5, 6, 7, 8, 9, 2], [8, 9, 2], [4, 2])
    options = {
        "greedy": DecodeConfig(beam_size=1, max_len_a=1.0, max_len_b=6),
        "beam": DecodeConfig(beam_size=3, nbest=3, max_len_a=1.0, max_len_b=6),
    }
    sized = {name: decode(model, src, o) for name, o in options.items()}
    start = model.start_decoding
    monkeypatch.setattr(
        model, "start_decoding", lambda memory, mask, beam, capacity: start(memory, mask, beam, 1)
    )
    grown = {name: decode(model, src, o) for name, o in options.items()}
    assert grown == sized
