"""Greedy and beam search over the KV-cached decoder."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.config import DecodeConfig, ModelConfig
from seq2seq.data.batching import no_peek_mask, pad, padding_mask
from seq2seq.data.tokenizer import BOS_ID, DEFAULT_IDS, EOS_ID
from seq2seq.decode.search import (
    SearchError,
    beam_search,
    decode,
    greedy,
    length_penalty,
)
from seq2seq.decode.step import POLL_STEPS, Settings, top
from seq2seq.model.transformer import Transformer

NEVER_GENERATED = list(DEFAULT_IDS.never_generated)  # padding and BOS, with the default ids


def _model(seed: int, vocab: int = 40, norm_first: bool = False) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        d_model=16,
        heads=2,
        encoder_layers=1,
        decoder_layers=2,
        ffn_dim=32,
        dropout=0.0,
        norm_first=norm_first,
        max_positions=64,
    )
    model = Transformer(cfg, vocab, vocab, joint_vocab=True).eval()
    with torch.no_grad():  # sharpen the output so hypotheses differ clearly
        model.output.weight.mul_(4.0)
    return model


def _sources(seed: int, vocab: int = 40) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 9, (3,), generator=g).tolist()
    return pad([torch.randint(4, vocab, (n,), generator=g).tolist() + [EOS_ID] for n in lengths])


@torch.no_grad()
def _sequence_log_prob(model, src_row, tokens) -> float:
    """log P(tokens + EOS | source) from the full (uncached) model."""
    src = src_row[src_row != 0].unsqueeze(0)
    tgt_in = torch.tensor([[BOS_ID] + tokens])
    logits = model(src, tgt_in, padding_mask(src), no_peek_mask(tgt_in))[0]
    logp = torch.log_softmax(logits.float(), dim=-1)
    return float(sum(logp[i, t] for i, t in enumerate(tokens + [EOS_ID])))


def test_greedy_takes_the_full_models_argmax_at_every_step():
    model, src = _model(0), _sources(0)
    for row, hyp in zip(
        src, greedy(model, src, padding_mask(src), Settings(max_len_a=1.0, max_len_b=5, alpha=0.0))
    ):
        one = row[row != 0].unsqueeze(0)
        tgt_in = torch.tensor([[BOS_ID] + hyp.tokens])
        logits = model(one, tgt_in, padding_mask(one), no_peek_mask(tgt_in))[0]
        logits[:, NEVER_GENERATED] = -math.inf
        predicted = logits.argmax(-1).tolist()
        assert predicted[: len(hyp.tokens)] == hyp.tokens
        cap = int(1.0 * one.size(1) + 5)
        if len(hyp.tokens) + 1 < cap:
            assert predicted[len(hyp.tokens)] == EOS_ID
        assert hyp.log_prob == pytest.approx(_sequence_log_prob(model, row, hyp.tokens), abs=1e-4)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_size_one_is_greedy_search(seed, alpha):
    model, src = _model(seed), _sources(seed)
    mask = padding_mask(src)
    greedy_out = greedy(model, src, mask, Settings(max_len_a=1.2, max_len_b=6, alpha=alpha))
    beam_out = beam_search(
        model, src, mask, Settings(beam=1, max_len_a=1.2, max_len_b=6, alpha=alpha)
    )
    for g, (b,) in zip(greedy_out, beam_out):
        assert b.tokens == g.tokens
        assert b.score == pytest.approx(g.score, abs=1e-5)


@pytest.mark.parametrize("beam, nbest", [(1, 1), (3, 2)])
def test_decode_runs_the_search_its_options_name_on_the_padded_batch(beam, nbest):
    model, src = _model(4), _sources(4)
    options = DecodeConfig(
        beam_size=beam, nbest=nbest, max_len_a=1.5, max_len_b=3, length_penalty=1.0
    )
    found = decode(model, src, options)
    caps = {"max_len_a": 1.5, "max_len_b": 3, "alpha": 1.0}
    if beam == 1:
        expected = [[h] for h in greedy(model, src, padding_mask(src), Settings(**caps))]
    else:
        expected = beam_search(
            model, src, padding_mask(src), Settings(beam=beam, nbest=nbest, **caps)
        )
    assert [[(h.tokens, h.score) for h in hyps] for hyps in found] == [
        [(h.tokens, h.score) for h in hyps] for hyps in expected
    ]
    assert all(len(hyps) == nbest for hyps in found)


def _reference_beam_search(model, src_row, k, cap, alpha, norm="gnmt"):
    """fairseq's and HF's beam search for one sentence, written plainly on the uncached model.

    Every step ranks all continuations of the open hypotheses; an EOS among the first k ranks
    joins the finished ones, of which the best k by normalised score are kept; the first k that
    do not end go on; the sentence ends with k finished hypotheses or at the cap, where each open
    hypothesis can only end.
    """
    beams, finished = [([], 0.0)], []
    for t in range(cap):
        candidates = []
        for tokens, logp in beams:
            src = src_row[src_row != 0].unsqueeze(0)
            tgt_in = torch.tensor([[BOS_ID] + tokens])
            logits = model(src, tgt_in, padding_mask(src), no_peek_mask(tgt_in))[0, -1].float()
            log_probs = torch.log_softmax(logits, dim=-1)
            for token, lp in enumerate(log_probs.tolist()):
                allowed = token == EOS_ID if t + 1 >= cap else token not in NEVER_GENERATED
                if allowed:
                    candidates.append((logp + lp, tokens, token))
        candidates.sort(key=lambda c: -c[0])
        beams = []
        for rank, (logp, tokens, token) in enumerate(candidates):
            if token == EOS_ID:
                if rank < k:
                    finished.append((tokens, logp / length_penalty(t + 1, alpha, norm), logp))
            elif len(beams) < k:
                beams.append((tokens + [token], logp))
        finished = sorted(finished, key=lambda f: -f[1])[:k]
        if len(finished) >= k or not beams:
            break
    return finished


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    beam=st.integers(2, 5),
    alpha=st.sampled_from([0.0, 0.6, 1.0]),
    norm=st.sampled_from(["gnmt", "length"]),
    norm_first=st.booleans(),
)
def test_batched_beam_search_equals_the_plain_standard_search(seed, beam, alpha, norm, norm_first):
    model, src = _model(seed, norm_first=norm_first), _sources(seed)
    mask = padding_mask(src)
    found = beam_search(
        model,
        src,
        mask,
        Settings(beam=beam, max_len_a=1.0, max_len_b=3, alpha=alpha, nbest=beam, length_norm=norm),
    )
    for row, hyps in zip(src, found):
        cap = int((row != 0).sum()) + 3  # a·src_len + b
        expected = _reference_beam_search(model, row, beam, cap, alpha, norm)
        assert [h.tokens for h in hyps] == [tokens for tokens, _, _ in expected]
        for h, (_, score, logp) in zip(hyps, expected):
            assert h.score == pytest.approx(score, abs=1e-4)
            assert h.log_prob == pytest.approx(logp, abs=1e-4)


def test_the_beam_stays_k_wide_when_the_greedy_path_falls_out():
    # Seed 1, beam 2: the greedy path (-19.57) falls out of the beam at the second step. The
    # standard search keeps two other hypotheses open rather than one, and ends at -20.35.
    model, src = _model(1), _sources(1)
    mask = padding_mask(src)
    (best,) = beam_search(
        model, src, mask, Settings(beam=2, max_len_a=1.0, max_len_b=4, alpha=0.0)
    )[1]
    expected = _reference_beam_search(model, src[1], 2, int((src[1] != 0).sum()) + 4, 0.0)
    assert best.tokens == expected[0][0]
    assert (
        greedy(model, src, mask, Settings(max_len_a=1.0, max_len_b=4, alpha=0.0))[1].score
        > best.score
    )


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_a_beam_wide_enough_finds_the_exhaustive_best(alpha):
    # Six outputs (EOS, UNK and four words) and at most three tokens: 31 hypotheses in all,
    # so a beam of 31 must return the best of them; the early stop must not cut it short.
    vocab = 8
    model = _model(3, vocab=vocab)
    src = pad([[4, 5, 6, EOS_ID]])
    words = [t for t in range(vocab) if t not in NEVER_GENERATED and t != EOS_ID]
    best_score, best_tokens = -math.inf, None
    for n in range(3):  # tokens before EOS; the cap (1·4 + -1 = 3) counts EOS
        for tokens in itertools.product(words, repeat=n):
            raw = _sequence_log_prob(model, src[0], list(tokens))
            score = raw / length_penalty(n + 1, alpha)
            if score > best_score:
                best_score, best_tokens = score, list(tokens)
    (found,) = beam_search(
        model, src, padding_mask(src), Settings(beam=31, max_len_a=1.0, max_len_b=-1, alpha=alpha)
    )[0]
    assert found.tokens == best_tokens
    assert found.score == pytest.approx(best_score, abs=1e-4)


def test_nbest_are_distinct_best_first_and_scored_by_the_length_penalty():
    model, src = _model(7), _sources(7)
    results = beam_search(
        model,
        src,
        padding_mask(src),
        Settings(beam=5, max_len_a=1.0, max_len_b=4, alpha=0.6, nbest=3),
    )
    for row, hyps in zip(src, results):
        assert len(hyps) == 3
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == 3
        for h in hyps:
            raw = _sequence_log_prob(model, row, h.tokens)
            assert h.log_prob == pytest.approx(raw, abs=1e-4)
            assert h.score == pytest.approx(raw / length_penalty(len(h.tokens) + 1, 0.6), abs=1e-4)


def test_outputs_respect_the_length_cap():
    model = _model(1)
    scores = model.logits
    model.logits = lambda states: scores(states).index_fill(-1, torch.tensor([EOS_ID]), -1e9)
    src = pad([[5, 6, 7, EOS_ID], [8, EOS_ID]])
    mask = padding_mask(src)
    caps = [2 * 4 + 1, 2 * 2 + 1]  # a·src_len + b, EOS included
    for hyp, cap in zip(
        greedy(model, src, mask, Settings(max_len_a=2.0, max_len_b=1, alpha=0.0)), caps
    ):
        assert len(hyp.tokens) == cap - 1
    for (hyp,), cap in zip(
        beam_search(model, src, mask, Settings(beam=3, max_len_a=2.0, max_len_b=1)), caps
    ):
        assert len(hyp.tokens) == cap - 1


def test_nbest_larger_than_the_beam_is_rejected():
    with pytest.raises(ValueError, match="nbest"):
        DecodeConfig(beam_size=2, nbest=3)


@pytest.mark.parametrize("beam", [1, 3])
def test_non_finite_scores_are_a_search_error_not_an_index_error(beam):
    model, src = _model(2), _sources(2)
    with torch.no_grad():
        model.output.weight.fill_(math.nan)
    with pytest.raises(SearchError) as caught:
        if beam == 1:
            greedy(model, src, padding_mask(src), Settings(max_len_a=1.0, max_len_b=4, alpha=0.0))
        else:
            beam_search(
                model, src, padding_mask(src), Settings(beam=beam, max_len_a=1.0, max_len_b=4)
            )
    assert caught.value.sentences == [0, 1, 2]


@pytest.mark.parametrize("beam", [1, 3])
def test_dropped_sentences_stop_within_a_poll_and_the_others_decode_as_before(beam, monkeypatch):
    model, src = _model(2), _sources(2)
    options = DecodeConfig(beam_size=beam, nbest=1, length_penalty=0.6, max_len_a=0.0, max_len_b=40)
    kept = decode(model, src, options)
    gone = [False, True, False]
    found = decode(model, src, options, dropped=lambda: gone)
    assert [found[0], found[2]] == [kept[0], kept[2]]
    assert len(found[1][0].tokens) < POLL_STEPS  # stopped at the first poll

    steps = []
    step = model.decode_step
    monkeypatch.setattr(model, "decode_step", lambda *a: steps.append(1) or step(*a))
    decode(model, src, options, dropped=lambda: [True, True, True])
    assert len(steps) == POLL_STEPS  # not the 40 the caps allow


def test_greedy_on_torchs_path_takes_the_first_of_equal_best_logits():
    logits = torch.tensor([[0.0, 2.0, 2.0, 1.0], [3.0, 3.0, 3.0, 3.0]])
    best, column = top(logits, 1)
    assert column.squeeze(1).tolist() == [1, 0] and best.squeeze(1).tolist() == [2.0, 3.0]
