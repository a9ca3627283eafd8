"""Lines of several sentences are decoded sentence by sentence and joined back."""

from __future__ import annotations

from seq2seq.config import DecodeConfig
from seq2seq.decode.sentences import split_sentences
from seq2seq.decode.translator import Translator
from tests.factories import tiny_translator


def test_a_line_of_two_sentences_is_cut_between_them():
    line = (
        "Sets the Blue component modifiable on the vertical color slider, and the Green and Red "
        "components in the two-dimensional color picker field. Allowed values are 0 to 255."
    )
    first, second = split_sentences(line, "en")
    assert first.endswith("picker field.") and second == "Allowed values are 0 to 255."


def test_one_sentence_abbreviations_and_decimals_stay_whole():
    for line in ("Press Ctrl+S to save.", "See e.g. the manual.", "It costs 3.50 euros today"):
        assert split_sentences(line, "en") == [line]
    assert split_sentences("   ", "en") == ["   "]


def test_the_splitter_cache_never_keeps_a_long_line():
    from seq2seq.decode import sentences

    sentences._cached_segment.cache_clear()
    for i in range(5):  # a request body of split bait: kept whole, it held ~1 MB each
        assert len(split_sentences(f"Go now {i}. " * 2000, "en")) == 2000
    assert sentences._cached_segment.cache_info().currsize == 0
    split_sentences("Short. Line.", "en")
    split_sentences("Short. Line.", "en")
    assert sentences._cached_segment.cache_info().hits == 1


def _translator(tmp_path, demo_pairs, **decode) -> Translator:
    settings = DecodeConfig(beam_size=2, max_len_a=1.0, max_len_b=3, **decode)
    return tiny_translator(tmp_path, demo_pairs[:300], settings)


def test_each_sentence_is_translated_as_if_alone_and_the_line_joined(tmp_path, demo_pairs):
    split = _translator(tmp_path, demo_pairs)
    a, b = "I have three cats.", "It is a quarter past five."
    (joined,) = split.translate([f"{a} {b}"])
    alone = split.translate([a, b])
    # Joined as tokens: the target SentencePiece model spaces the second sentence's first piece.
    assert joined.replace(" ", "") == "".join(alone).replace(" ", "")
    assert joined.startswith(alone[0])

    whole = _translator(tmp_path / "whole", demo_pairs, split_sentences=False)
    assert whole.translate([f"{a} {b}"])[0] != joined  # the line decoded as one input


def test_an_nbest_list_is_of_whole_lines(tmp_path, demo_pairs):
    translator = _translator(tmp_path, demo_pairs, nbest=2)
    (hyps,) = translator.translate_nbest(["I have three cats. It is five o'clock."])
    assert len(hyps) == 2  # two whole-line hypotheses, not sentence pieces
