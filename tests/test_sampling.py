"""Sampling instead of search (`--sampling topk:K|temperature:T|nucleus:P --seed N`): the
back-translation outputs, drawn on greedy search's batched path."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from seq2seq.config import DecodeConfig, ModelConfig, parse_sampling
from seq2seq.data.batching import pad
from seq2seq.data.tokenizer import EOS_ID
from seq2seq.decode.annotate import Annotation, annotate
from seq2seq.decode.sampling import sampler
from seq2seq.decode.search import decode
from seq2seq.decode.translator import Translator
from seq2seq.model.transformer import Transformer
from tests.factories import tiny_translator
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
    chosen = _drawn("topk:3", logits)
    top3 = logits.topk(3, dim=-1).indices
    assert (top3 == chosen.unsqueeze(1)).any(dim=1).all()


def test_nucleus_draws_from_the_fewest_tokens_holding_the_mass():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(2000, 1)
    chosen = _drawn("nucleus:0.7", logits)
    assert set(chosen.tolist()) == {0, 1}  # 0.5 + 0.3 reach 0.7; the rest never drawn


def test_draws_follow_the_distribution_and_never_pick_an_impossible_token():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    chosen = _drawn("temperature:1.0", torch.log(probs).repeat(20000, 1))
    shares = torch.bincount(chosen, minlength=5).float() / 20000
    assert torch.allclose(shares, probs, atol=0.015) and shares[4] == 0


def _drawn(setting: str, logits: torch.Tensor) -> torch.Tensor:
    """One draw for each row of `logits`, each row a line of its own."""
    streams = [(line, 0) for line in range(logits.size(0))]
    return sampler(setting, 0, streams, torch.device("cpu"))(
        logits, torch.arange(logits.size(0)), 0
    )


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


SAMPLED = {"beam_size": 1, "sampling": "temperature:1.0", "max_len_a": 0.5, "max_len_b": 6}


@pytest.fixture(scope="module")
def babbler(tmp_path_factory, demo_pairs) -> Translator:
    """An untrained translator over real pieces: its flat distributions make samples vary."""
    folder = tmp_path_factory.mktemp("sampling")
    return tiny_translator(folder, demo_pairs[:300], DecodeConfig(**SAMPLED))


def _sampled(translator: Translator, lines: list[str], **options) -> list[str]:
    return translator.translate(lines, options=DecodeConfig(**{**SAMPLED, **options}))


def test_copies_of_one_line_each_get_their_own_sample_whatever_the_batch_size(babbler):
    lines = ["The printer is out of paper."] * 256
    at_16 = _sampled(babbler, lines, batch_size=16, seed=1)
    assert len(set(at_16)) > 200  # not one stream per batch, repeated every 16 lines
    assert at_16 == _sampled(babbler, lines, batch_size=64, seed=1)


def test_a_line_is_sampled_the_same_alone_in_any_batch_or_order(babbler, demo_pairs):
    lines = [src for src, _ in demo_pairs[:40]]
    together = _sampled(babbler, lines, batch_size=7, seed=2)
    alone = [
        babbler.translate([line], first_line=i, options=DecodeConfig(**SAMPLED, seed=2))[0]
        for i, line in enumerate(lines)
    ]
    assert together == alone
    sources = babbler.prepare(lines)  # each keeps its line number, whatever its place
    shuffled = [sources[i] for i in reversed(range(len(sources)))]
    again = DecodeConfig(**SAMPLED, seed=2, batch_size=5)
    found = babbler.translate_sources(shuffled, options=again)
    assert [best[0][0] for best in found] == together[::-1]


def test_the_seed_and_the_line_number_choose_the_samples(babbler):
    line = ["Click the button to save your changes."]
    at_3 = [_sampled(babbler, line * 8, seed=s) for s in (3, 3, 4)]
    assert at_3[0] == at_3[1] and at_3[0] != at_3[2]
    moved = babbler.translate(line, first_line=5, options=DecodeConfig(**SAMPLED, seed=3))
    assert moved[0] == at_3[0][5] and len(set(at_3[0])) > 1


def test_the_sentences_of_one_line_draw_from_streams_of_their_own(babbler):
    sentence = "The printer is out of paper."
    (joined,) = _sampled(babbler, [f"{sentence} {sentence}"], seed=6, max_len_b=12)
    assert len(_sampled(babbler, [sentence], seed=6, max_len_b=12)[0]) > 0
    words = joined.split()
    half = len(words) // 2
    assert words[:half] != words[half:] or len(words) % 2  # not one sample written twice


def test_samples_with_token_probabilities_are_those_of_plain_translation(babbler, demo_pairs):
    lines = [src for src, _ in demo_pairs[:12]]
    sampling = Translator(
        babbler.model, babbler.tokenizer, DecodeConfig(**SAMPLED, seed=8), babbler.device
    )
    annotated = annotate(sampling, lines, Annotation(token_probs=True), first_line=300)
    assert [a.text for a in annotated] == sampling.translate(lines, first_line=300)
