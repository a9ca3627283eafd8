"""What search returns and how it ranks: hypotheses, their length penalty, and the error
for a sentence with no finite-scored hypothesis."""

from __future__ import annotations

from dataclasses import dataclass

LENGTH_NORMS = ("gnmt", "length")


class SearchError(ValueError):
    """Search found no hypothesis for a sentence: the model's scores were not finite."""

    def __init__(self, sentences: list[int]):
        super().__init__(f"no finite-scored hypothesis for sentence(s) {sentences}")
        self.sentences = sentences


@dataclass
class Hypothesis:
    """A finished translation: its tokens (EOS excluded) and scores."""

    tokens: list[int]
    score: float  # log-probability / length penalty: what search ranks by
    log_prob: float  # sum of the token log-probabilities, EOS included


def length_penalty(length, alpha: float, norm: str = "gnmt"):
    """The divisor of a hypothesis's log-probability; `length` |Y| counts EOS.

    `gnmt`: ((5 + |Y|) / 6)^α, GNMT's (Wu et al. 2016, §7), which the paper uses (§6.1);
    `length`: |Y|^α, as fairseq, Hugging Face `generate` and Marian's `--normalize` divide.
    """
    if norm == "gnmt":
        return ((5 + length) / 6) ** alpha
    if norm == "length":
        return length**alpha
    raise ValueError(f"length_norm must be one of {LENGTH_NORMS}, not {norm!r}")


@dataclass
class ConstrainedHypothesis(Hypothesis):
    """A hypothesis of constrained search, with the constraints (indices) it does not hold."""

    unmet: tuple[int, ...] = ()
    plain: bool = False  # the plain beam's own output, which held every term already
