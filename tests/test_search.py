"""Greedy search and the Translator that wraps it."""

from __future__ import annotations

import torch

from seq2seq.batching import no_peek_mask, pad, padding_mask
from seq2seq.config import DecodeConfig
from seq2seq.model import Transformer
from seq2seq.search import greedy
from seq2seq.tokenizer import BOS_ID, EOS_ID


def test_greedy_picks_the_argmax_of_the_full_model_at_every_step(tiny_model_config):
    model = Transformer(tiny_model_config, 40, 40, joint_vocab=True).eval()
    src = pad([[5, 6, 7, 8, EOS_ID], [9, 10, EOS_ID]])
    out = greedy(model, src, padding_mask(src), max_len_a=1.0, max_len_b=5)
    for i, ids in enumerate(out):
        one = src[i : i + 1, : int(padding_mask(src)[i].sum())]
        tgt_in = torch.tensor([[BOS_ID] + ids])
        logits = model(one, tgt_in, padding_mask(one), no_peek_mask(tgt_in))
        predicted = logits.argmax(-1)[0].tolist()
        assert predicted[: len(ids)] == ids
        if len(ids) < int(1.0 * one.size(1) + 5) - 1:
            assert predicted[len(ids)] == EOS_ID


def test_greedy_output_respects_the_length_cap(tiny_model_config):
    model = Transformer(tiny_model_config, 40, 40, joint_vocab=True).eval()
    scores = model.logits
    model.logits = lambda states: scores(states).index_fill(-1, torch.tensor([EOS_ID]), -1e9)
    src = pad([[5, 6, 7, EOS_ID]])
    out = greedy(model, src, padding_mask(src), max_len_a=2.0, max_len_b=1)
    assert len(out[0]) == 2 * 4 + 1 - 1  # the cap counts EOS


def test_decode_config_defaults_follow_the_paper():
    cfg = DecodeConfig()
    assert (cfg.max_len_a, cfg.max_len_b) == (1.0, 50)
