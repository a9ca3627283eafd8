"""`translate` on hostile text: whatever arrives, exactly one output line per input line."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seq2seq.config import DecodeConfig
from seq2seq.decode.streams import translate_stream
from seq2seq.decode.translator import Translator
from tests.factories import tiny_translator

# Characters that break line-oriented tools: every Unicode line separator Python's
# str.splitlines knows (only \n ends an input line), controls, NUL, RTL marks and text,
# combining marks, emoji with joiners, wide and astral characters, BOM, replacement char.
HOSTILE = (
    "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x00\x07\x1b\t\u200e\u200f\u202e\u2066"
    "שלום مرحبا \u0301\u0336 👩‍👩‍👧🏳️‍🌈 𝔘𝔫𝔦 漢字 \ufeff\ufffd"
)
LINE = st.text(
    alphabet=st.one_of(
        st.sampled_from(HOSTILE),
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"),
    ),
    max_size=60,
)
# Lone surrogates cannot be UTF-8; on the wire they arrive as their escaped (WTF-8) bytes.
SURROGATE = st.integers(0xD800, 0xDFFF).map(lambda c: chr(c).encode("utf-8", "surrogatepass"))


@pytest.fixture(scope="module")
def translator(tmp_path_factory, demo_pairs) -> Translator:
    """An untrained tiny model: it babbles to the length cap, the hardest case for lines."""
    decode = DecodeConfig(beam_size=2, max_len_a=1.0, max_len_b=5, batch_size=8)
    return tiny_translator(tmp_path_factory.mktemp("fuzz"), demo_pairs[:300], decode, 48)


def _run(translator: Translator, raw: bytes) -> list[str]:
    out = io.StringIO()
    translate_stream(translator, io.BytesIO(raw), out, chunk_lines=4, errors="replace")
    return out.getvalue().split("\n")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(
        st.one_of(
            LINE.map(lambda s: s.encode("utf-8")),
            st.tuples(LINE, SURROGATE, LINE).map(lambda t: t[0].encode() + t[1] + t[2].encode()),
            st.just(("long " * 200).encode()),  # beyond the model's 48 positions
            st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")),
        ),
        min_size=1,
        max_size=12,
    ),
    crlf=st.booleans(),
)
def test_any_input_gives_exactly_one_output_line_per_input_line(translator, lines, crlf):
    raw = b"".join(line + (b"\r\n" if crlf else b"\n") for line in lines)
    out = _run(translator, raw)
    assert out[-1] == "" and len(out) - 1 == len(lines)
    for line, translation in zip(lines, out):
        if not line.decode("utf-8", "replace").strip():
            assert translation == ""


def test_a_last_line_without_newline_still_gets_its_line(translator):
    out = _run(translator, b"first\nsecond without newline")
    assert len(out) == 3 and out[-1] == ""
