"""Sampling instead of search (`--sampling topk:K|temperature:T|nucleus:P --seed N`): the
back-translation outputs, drawn on greedy search's batched path."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from seq2seq.config import DecodeConfig, ModelConfig, parse_sampling
from seq2seq.data.batching import pad
from seq2seq.data.tokenizer import EOS_ID
from seq2seq.decode.sampling import sampler
from seq2seq.decode.search import decode
from seq2seq.model.transformer import Transformer
from tests.runs import cli

CAPS = {"max_len_a": 1.5, "max_len_b": 6, "length_penalty": 0.0}


def _model() -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=16, heads=2, encoder_layers=1, decoder_layers=1, ffn_dim=32,
                      dropout=0.0, max_positions=64)  # fmt: skip
    return Transformer(cfg, 40, 40, joint_vocab=True).eval()


def _sources() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return pad([torch.randint(4, 40, (n,), generator=g).tolist() + [EOS_ID] for n in (3, 6, 8, 5)])


def _tokens(options: DecodeConfig) -> list[list[int]]:
    return [h[0].tokens for h in decode(_model(), _sources(), options)]


def test_the_same_seed_gives_the_same_samples_and_another_seed_others():
    one = _tokens(DecodeConfig(beam_size=1, sampling="temperature:1.0", seed=3, **CAPS))
    again = _tokens(DecodeConfig(beam_size=1, sampling="temperature:1.0", seed=3, **CAPS))
    other = _tokens(DecodeConfig(beam_size=1, sampling="temperature:1.0", seed=4, **CAPS))
    greedy = _tokens(DecodeConfig(beam_size=1, **CAPS))
    assert one == again
    assert one != other and one != greedy  # an untrained model's flat distribution


@pytest.mark.parametrize("setting", ["topk:1", "nucleus:0.000001", "temperature:0.0001"])
def test_sampling_that_leaves_one_choice_is_greedy_search(setting):
    sampled = _tokens(DecodeConfig(beam_size=1, sampling=setting, seed=5, **CAPS))
    assert sampled == _tokens(DecodeConfig(beam_size=1, **CAPS))


def test_top_k_draws_only_among_the_k_most_probable_tokens():
    logits = torch.log_softmax(torch.randn(500, 30), dim=-1)
    chosen = sampler("topk:3", 0, torch.device("cpu"))(logits)
    top3 = logits.topk(3, dim=-1).indices
    assert (top3 == chosen.unsqueeze(1)).any(dim=1).all()


def test_nucleus_draws_from_the_fewest_tokens_holding_the_mass():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(2000, 1)
    chosen = sampler("nucleus:0.7", 0, torch.device("cpu"))(logits)
    assert set(chosen.tolist()) == {0, 1}  # 0.5 + 0.3 reach 0.7; the rest never drawn


@pytest.mark.parametrize(
    "setting", ["topk", "topk:0", "temperature:0", "nucleus:1.5", "beam:4", "top-k:5"]
)
def test_a_malformed_or_out_of_range_setting_is_refused(setting):
    with pytest.raises(ValueError):
        parse_sampling(setting)
    with pytest.raises(ValidationError):
        DecodeConfig(beam_size=1, sampling=setting)


def test_sampling_with_a_beam_is_refused():
    with pytest.raises(ValidationError, match="needs beam_size 1"):
        DecodeConfig(beam_size=4, sampling="topk:10")


@pytest.mark.slow
def test_translate_samples_reproducibly_from_the_command_line(trained_tiny_run, tmp_path):
    src = tmp_path / "in.en"
    src.write_text("I have three cats.\nThe book costs twelve euros.\nIt is late.\n")
    args = ["translate", "--run", trained_tiny_run, "--input", src, "--sampling", "topk:20"]
    first = cli(*args, "--seed", "7").stdout
    assert first == cli(*args, "--seed", "7").stdout
    assert len(first.splitlines()) == 3
    bad = cli(*args, "--beam-size", "4", code=2)
    assert "needs beam_size 1" in bad.output
