"""What placing a term reads of the training data: each source word's usual rendering (the Dice
dictionary of data/term_dictionary.py: the run's term_dictionary.tsv where it kept one, else
built from its training files), the determiners seen before each target word (a term's gender
where the glossary gives none) and the target words seen (the inflected forms the model knows).
Read once, on first use, from at most MAX_LINES pairs; a run without readable training files
has an empty lexicon (placement then goes by alignment and the model's score)."""

from __future__ import annotations

import itertools
import logging
import re
import threading
from collections import Counter
from pathlib import Path

from seq2seq.data.term_dictionary import dice_dictionary, read_term_dictionary

log = logging.getLogger(__name__)

MAX_LINES = 300_000
_PAIR = re.compile(r"(?<!\w)(le|la|un|une|du|au|ce|cette|cet)\s+(\w+)", re.IGNORECASE)
_GENDER = {"le": "m", "un": "m", "du": "m", "au": "m", "ce": "m", "cet": "m"}
_WORDS = re.compile(r"\w+")
MIN_SEEN = 2  # a gender or a word form counts when seen this often


class TermLexicon:
    """Renderings, determiner counts and known words of a run's training data, read lazily."""

    def __init__(self, *, dictionary: Path | None = None, corpus: tuple[Path, Path] | None = None):
        self.dictionary_file, self.corpus = dictionary, corpus
        self._lock = threading.Lock()
        self._loaded = False
        self.rendering: dict[str, str] = {}
        self.before: dict[str, Counter] = {}
        self.seen: Counter = Counter()

    def renderings(self, source_term: str) -> list[str]:
        """The usual target words of a source term's words (lower case), where known."""
        self._load()
        found = [self.rendering.get(w) for w in _WORDS.findall(source_term.lower())]
        return [w for w in found if w]

    def gender(self, term: str) -> str | None:
        """'m' or 'f', by the determiners most often before the term's first word in the target
        training text; None when it was not seen often enough."""
        self._load()
        head = term.split()[0].lower() if term.split() else ""
        counts = self.before.get(head)
        if not counts or sum(counts.values()) < MIN_SEEN or counts["m"] == counts["f"]:
            return None
        return "m" if counts["m"] > counts["f"] else "f"

    def knows(self, word: str) -> bool:
        """Whether a word form occurs in the target training text."""
        self._load()
        return self.seen[word.lower()] >= MIN_SEEN

    def _load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            try:
                self._read()
            except (OSError, UnicodeDecodeError) as e:
                log.warning("term placement: cannot read the training data (%s); alignment only", e)

    def _read(self) -> None:
        if self.dictionary_file is not None and self.dictionary_file.exists():
            self.rendering = dict(read_term_dictionary(self.dictionary_file))
        if self.corpus is None:
            return
        src_path, tgt_path = self.corpus
        with open(tgt_path, encoding="utf-8") as f:
            tgt = [line for line in itertools.islice(f, MAX_LINES)]
        for line in tgt:
            low = line.lower()
            self.seen.update(_WORDS.findall(low))
            for det, word in _PAIR.findall(low):
                self.before.setdefault(word, Counter())[_GENDER.get(det, "f")] += 1
        if not self.rendering:
            with open(src_path, encoding="utf-8") as f:
                src = [line for line in itertools.islice(f, len(tgt))]
            self.rendering = dice_dictionary(src, tgt)
        log.info(
            "term placement: %d renderings, %d target words", len(self.rendering), len(self.seen)
        )


def lexicon_of(
    run_dir: Path, train_src: Path | None = None, train_tgt: Path | None = None
) -> TermLexicon:
    """A run's lexicon: its term_dictionary.tsv if kept, its training files if readable."""
    files = None
    if train_src is not None and train_tgt is not None:
        files = (Path(train_src), Path(train_tgt))
    return TermLexicon(dictionary=Path(run_dir) / "term_dictionary.tsv", corpus=files)
