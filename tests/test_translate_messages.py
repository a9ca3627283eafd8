"""A long `translate` job is never lost to one line: glossary overflow and unwritable terms
are warnings, and every message names the line's true number in the whole input."""

from __future__ import annotations

import io
import logging

from seq2seq.config import DecodeConfig
from seq2seq.decode.glossary import make_glossary
from seq2seq.decode.streams import translate_stream
from seq2seq.decode.translator import Translator
from tests.factories import tiny_translator

LOGGER = "seq2seq.decode.translator"
WORDS = [f"w{chr(97 + i)}{chr(97 + i)}" for i in range(20)]  # 20 distinct made-up words


def _translator(tmp_path, demo_pairs, **glossary) -> Translator:
    decode = DecodeConfig(beam_size=2, max_len_a=0.0, max_len_b=4, split_sentences=False)
    t = tiny_translator(tmp_path, demo_pairs[:300], decode, max_positions=64)
    if not glossary:
        return t
    terms = make_glossary(glossary["pairs"])
    return Translator(t.model, t.tokenizer, t.options, t.device, glossary=terms)


def test_a_warning_names_the_true_line_of_a_later_chunk(tmp_path, demo_pairs, caplog):
    t = _translator(tmp_path, demo_pairs)
    lines = [b"one cat\n", b"two cats\n", b"three cats\n", b"four cats\n"]
    lines.append(("seven " * 40).encode() + b"\n")  # over the 64 positions: cut, with a warning
    out = io.StringIO()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert translate_stream(t, lines, out, chunk_lines=2) == 5
    assert len(out.getvalue().splitlines()) == 5
    assert "input line 5 has" in caplog.text and "input line 1 has" not in caplog.text


def test_more_than_16_glossary_hits_keep_the_16_longest_and_the_job_goes_on(
    tmp_path, demo_pairs, caplog
):
    pairs = [(w, "chat" + "s" * (i % 4) + "x" * (i // 4)) for i, w in enumerate(WORDS)]
    t = _translator(tmp_path, demo_pairs, pairs=pairs)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        (source,) = t.prepare([" ".join(WORDS)], first_line=299)
    assert "input line 300: 20 glossary terms found; the 16 longest are kept" in caplog.text
    assert sum(len(terms) for terms in source.constraints) == 16
    assert len(t.translate([" ".join(WORDS)])) == 1


def test_a_glossary_term_the_model_cannot_write_is_skipped_and_named_once(
    tmp_path, demo_pairs, caplog
):
    t = _translator(tmp_path, demo_pairs, pairs=[("cat", "猫咪"), ("dog", "chien")])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = t.translate(["one cat and one dog", "two cats", "the cat"])
    assert len(out) == 3
    assert caplog.text.count("'猫咪' has pieces the model cannot output; skipped") == 1


def test_a_source_term_said_twice_asks_for_its_target_term_twice(tmp_path, demo_pairs):
    t = _translator(tmp_path, demo_pairs, pairs=[("hundred", "cent")])
    (source,) = t.prepare(["three hundred and one hundred"])
    (cent,) = t.tokenizer.encode_tgt(["cent"])
    assert source.constraints == (((tuple(cent),) * 2),)
