"""Which of a teacher's n-best translations a student learns from."""

from __future__ import annotations

from sacrebleu.metrics import CHRF

# chrF (character 6-grams, β 2), the metric mozilla/translations and Bergamot pick n-best
# hypotheses by: it rewards the hypothesis closest to the human reference without the brevity
# and 4-gram sparsity that make sentence-level BLEU noisy on short lines.
_CHRF = CHRF()


def chrf(hypothesis: str, reference: str) -> float:
    """Sentence-level chrF (0-100) of one hypothesis against one reference."""
    return _CHRF.sentence_score(hypothesis, [reference]).score


def closest_to_reference(nbest: list[str], reference: str) -> tuple[int, float, float]:
    """(index of the hypothesis with the best chrF against `reference`, its chrF, the 1-best's
    chrF); ties go to the better-ranked hypothesis."""
    scores = [chrf(h, reference) for h in nbest]
    best = max(range(len(scores)), key=lambda i: (scores[i], -i))
    return best, scores[best], scores[0]
