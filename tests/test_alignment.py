"""Alignments and token probabilities of translations: replayed from the finished hypotheses,
printed as `translate --alignments --scores --word-scores` fields."""

from __future__ import annotations

import math

import pytest
import torch
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.data.batching import pad, padding_mask
from seq2seq.data.tokenizer import word_starts
from seq2seq.decode.alignment import (
    encoder_outputs_kept,
    grow_diag_final_and,
    pharaoh,
    replay,
    word_alignment,
    word_attention,
)
from seq2seq.decode.annotate import Annotation, annotate
from seq2seq.decode.segments import Segment, flatten
from seq2seq.decode.translator import load_translator
from seq2seq.model.cross_attention import cross_attention_weights
from tests.factories import untrained_run

LINES = ["I have three cats.", "", "We see two dogs. They sleep.", "The red car is fast."]


@pytest.fixture(scope="module")
def translator(tmp_path_factory, demo_pairs):
    """An untrained run's translator (the tiny config's shape and tokenizer), beam 3."""
    run = untrained_run(tmp_path_factory.mktemp("alignment"), demo_pairs[:300])
    t, _ = load_translator(run, device="cpu")
    return t.__class__(
        t.model,
        t.tokenizer,
        t.options.model_copy(update={"beam_size": 3, "max_len_b": 6}),
        t.device,
    )


def test_word_starts_merge_sentencepiece_pieces_into_words():
    pieces = ["▁Hel", "lo", "▁", ",", "▁wor", "ld", "</s>"]
    assert word_starts(pieces, {"</s>"}) == [0, 0, 1, 1, 2, 2, -1]


def test_pieces_attention_is_summed_into_word_attention():
    # Output pieces: w0, w1 w1, EOS; source pieces: v0 v0, v1, EOS.
    attention = torch.tensor(
        [[0.3, 0.3, 0.2, 0.2], [0.1, 0.1, 0.7, 0.1], [0.3, 0.1, 0.5, 0.1], [0.0, 0.0, 0.0, 1.0]]
    )
    words = word_attention(attention, src_words=[0, 0, 1, -1], tgt_words=[0, 1, 1, -1])
    torch.testing.assert_close(words, torch.tensor([[0.6, 0.2], [0.3, 0.6]]))


def test_both_directions_argmaxes_are_symmetrised_into_word_pairs():
    # Output word 0 attends most to source word 1, output word 1 to source word 0 (both
    # directions agree); source word 2 is attended most by output word 1: a link of one
    # direction only, kept as it neighbours (1, 0) and aligns a word nothing else does.
    attention = torch.tensor([[0.1, 0.8, 0.1, 0.0], [0.5, 0.1, 0.4, 0.0], [0.0, 0.0, 0.0, 1.0]])
    pairs = word_alignment(attention, src_words=[0, 1, 2, -1], tgt_words=[0, 1, -1])
    assert pairs == [(0, 1), (1, 0), (2, 1)]
    assert pharaoh(pairs) == "0-1 1-0 2-1"


def test_grow_diag_final_and_keeps_the_intersection_and_grows_to_unaligned_neighbours():
    forward = {(0, 0), (1, 1), (3, 3)}
    backward = {(0, 0), (1, 1), (1, 2), (2, 2), (3, 0)}
    links = grow_diag_final_and(forward, backward)
    # (1, 2) neighbours (1, 1) and aligns output word 2, so far unaligned; (2, 2) then adds
    # source word 2. Final-and: (3, 3) aligns two unaligned words, (3, 0) an aligned one.
    assert links == {(0, 0), (1, 1), (1, 2), (2, 2), (3, 3)}


def test_replayed_attention_is_the_chosen_layers_cross_attention_averaged_over_heads(
    translator,
):
    special = translator.tokenizer.ids
    src_ids = translator.tokenizer.encode_src(["I have three cats.", "We see dogs."])
    hyps = [[5, 6, 7, special.eos], [8, special.eos]]
    src = pad(src_ids, pad_id=special.pad)
    for layer in range(len(translator.model.decoder_layers)):
        found, alone = (
            replay(translator.model, src, hyps, layers=[layer], log_probs=lp, special=special)
            for lp in (True, False)  # without log-probabilities the top layer's FFN is skipped
        )
        for b, (ids, tgt) in enumerate(zip(src_ids, hyps)):
            one_src = torch.tensor([ids])
            logits, weights = cross_attention_weights(
                translator.model, one_src, torch.tensor([[special.start, *tgt[:-1]]])
            )
            expected = weights[layer][0].mean(dim=0)
            torch.testing.assert_close(found[b].attention, expected, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(alone[b].attention, expected, atol=1e-5, rtol=1e-4)
            log_probs = logits[0].log_softmax(-1).gather(1, torch.tensor(tgt).unsqueeze(1))
            assert found[b].log_probs == pytest.approx(log_probs.squeeze(1).tolist(), abs=1e-4)


def test_search_keeps_each_batchs_encoder_output_for_the_replay(translator):
    ids = translator.tokenizer.encode_src(LINES[:1] + LINES[2:])
    with encoder_outputs_kept(translator.model) as kept:
        translator.search([Segment(seq, j, line=j) for j, seq in enumerate(ids)])
    assert "encode" not in vars(translator.model)  # the method again
    special = translator.tokenizer.ids
    assert len(kept) == len(translator.batches(ids))
    for chunk in translator.batches(ids):
        src = pad([ids[j] for j in chunk], pad_id=special.pad)
        memory = next(m for m in kept.values() if m.size(0) == src.size(0))
        torch.testing.assert_close(memory, translator.model.encode(src, src != special.pad))


def test_token_probabilities_multiply_to_the_hypothesis_probability_the_search_found(
    translator,
):
    found = annotate(translator, LINES, Annotation(token_probs=True))
    plain = translator.translate_nbest(LINES)
    for a, hyps in zip(found, plain):
        text, score = hyps[0]
        assert a.text == text and a.score == pytest.approx(score)
        if text or a.token_probs:
            assert all(0.0 < p <= 1.0 for p in a.token_probs)
    # A line of one sentence: its tokens' log-probabilities sum to what search scored.
    sources = translator.prepare([LINES[0]])
    hyp = translator.search(flatten(sources))[0][0]
    assert sum(math.log(p) for p in found[0].token_probs) == pytest.approx(hyp.log_prob, abs=1e-3)
    assert len(found[0].token_probs) == len(hyp.tokens) + 1  # EOS included


def test_alignment_pairs_index_the_words_of_the_input_and_output_lines(translator):
    found = annotate(translator, LINES, Annotation(alignments=True, layer=-1))
    for line, a in zip(LINES, found):
        assert a.token_probs is None
        for i, j in a.alignment:
            assert 0 <= i < len(line.split()) and 0 <= j < len(a.text.split())
        assert a.alignment == sorted(set(a.alignment))
    assert found[1].alignment == [] and found[1].text == ""


def test_asking_for_alignments_does_not_change_the_translations(translator):
    found = annotate(translator, LINES, Annotation(alignments=True, token_probs=True))
    assert [a.text for a in found] == translator.translate(LINES)


@pytest.mark.slow
def test_translate_prints_translation_alignment_score_and_probabilities_in_that_order(
    trained_tiny_run,
):
    args = ["translate", "--run", str(trained_tiny_run), "--device", "cpu"]
    stdin = "\n".join(LINES) + "\n"
    plain = CliRunner().invoke(app, args, input=stdin)
    full = CliRunner().invoke(
        app, [*args, "--alignments", "--scores", "--word-scores"], input=stdin
    )
    assert plain.exit_code == 0 and full.exit_code == 0, full.output
    rows = [r.split(" ||| ") for r in full.stdout.splitlines()]
    assert [r[0] for r in rows] == plain.stdout.splitlines()
    for line, (text, alignment, score, probs) in zip(LINES, rows):
        for pair in alignment.split():
            i, j = map(int, pair.split("-"))
            assert i < len(line.split()) and j < len(text.split())
        assert float(score) <= 0.0
        assert all(0.0 < float(p) <= 1.0 for p in probs.split())


@pytest.mark.slow
def test_translate_refuses_alignments_with_an_nbest_list(trained_tiny_run):
    result = CliRunner().invoke(
        app,
        ["translate", "--run", str(trained_tiny_run), "--nbest", "2", "--alignments"],
        input="I have cats.\n",
    )
    assert result.exit_code != 0 and "--nbest 1" in result.output


def test_encoder_output_keepers_nest_and_each_restores_the_one_before(translator):
    model, special = translator.model, translator.tokenizer.ids
    src = pad(translator.tokenizer.encode_src(["We see dogs."]), pad_id=special.pad)
    mask = padding_mask(src, special.pad)
    with encoder_outputs_kept(model) as outer:
        with encoder_outputs_kept(model) as inner:
            model.encode(src, mask)
        model.encode(src[:, :-1], mask[:, :-1])
    assert len(inner) == 1 and len(outer) == 2 and "encode" not in model.__dict__
