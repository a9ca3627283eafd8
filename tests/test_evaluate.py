"""Scoring and CI regression gates: sacrebleu metrics and the paired bootstrap comparison."""

from __future__ import annotations

import random

import pytest
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from seq2seq.decode.evaluate import describe_lengths, length_report, paired_bootstrap, score


def _corpus(seed: int, n: int = 300):
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(60)]
    refs = [" ".join(rng.choices(words, k=rng.randint(4, 12))) for _ in range(n)]

    def noisy(p):
        return [
            " ".join(w if rng.random() > p else rng.choice(words) for w in r.split()) for r in refs
        ]

    return refs, noisy


def test_paired_bootstrap_agrees_with_sacrebleus_paired_test():
    refs, noisy = _corpus(0)
    base, cand = noisy(0.30), noisy(0.25)
    ours = paired_bootstrap(base, cand, refs, samples=200)
    _, results = PairedTest(
        [("baseline", base), ("candidate", cand)],
        {"BLEU": BLEU()},
        [refs],
        test_type="bs",
        n_samples=200,
    )()
    theirs = results["BLEU"][1]
    assert ours.candidate == pytest.approx(theirs.score, abs=1e-6)
    assert ours.p_value == pytest.approx(theirs.p_value, abs=1e-6)
    assert ours.ci_low < ours.delta < ours.ci_high


def test_a_clear_drop_is_significant_and_a_tie_is_not():
    refs, noisy = _corpus(1)
    good, bad = noisy(0.1), noisy(0.4)
    drop = paired_bootstrap(good, bad, refs, samples=300)
    assert drop.delta < 0 and drop.significant and drop.ci_high < 0
    same = paired_bootstrap(good, good, refs, samples=300)
    assert same.delta == 0 and not same.significant


def test_identical_systems_get_sacrebleus_p_of_one_over_samples_plus_one():
    refs, noisy = _corpus(3, n=100)
    hyps = noisy(0.2)
    ours = paired_bootstrap(hyps, hyps, refs, samples=200)
    _, results = PairedTest(
        [("baseline", hyps), ("candidate", hyps)],
        {"BLEU": BLEU()},
        [refs],
        test_type="bs",
        n_samples=200,
    )()
    assert ours.p_value == pytest.approx(1 / 201) == pytest.approx(results["BLEU"][1].p_value)


def test_scores_carry_bleu_chrf_and_ter_signatures():
    refs, noisy = _corpus(2, n=50)
    s = score(noisy(0.2), refs)
    assert 0 < s.bleu < 100 and 0 < s.chrf < 100 and s.ter > 0
    assert "tok:13a" in s.bleu_signature and "nc:6" in s.chrf_signature
    assert "case:lc" in s.ter_signature


def test_length_report_shows_under_translation_by_source_length():
    sources = ["a b c", "a " * 12, "a " * 25, "a " * 40]
    references = ["x y z w", "x " * 10, "x " * 20, "x " * 40]
    # The long ones lose half: as a model that drops a line's second sentence does.
    hypotheses = ["x y z w", "x " * 10, "x " * 9, "x " * 20]
    report = length_report(sources, hypotheses, references)
    assert report["ratio"] == pytest.approx(43 / 74)
    by = {b["source_words"]: b for b in report["by_source_length"]}
    assert by["0-9"]["ratio"] == 1.0 and by["10-19"]["ratio"] == 1.0
    assert by["20-29"]["ratio"] == pytest.approx(0.45) and by["30-49"]["ratio"] == 0.5
    assert "50+" not in by  # no such sources
    assert report["shorter_than_half"] == 0.25  # 9 of 20; 20 of 40 is not shorter
    line = describe_lengths(report)
    assert line.startswith("length ratio 0.581; by source words: 0-9 1.00 (1)")
    assert line.endswith("25.0% of outputs shorter than half their reference")
