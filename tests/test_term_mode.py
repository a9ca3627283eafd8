"""A glossary applied by annotation (decode.term_mode, `--term-mode`): with `annotate` the model
sees each glossary hit annotated inline in its source and searches with no constraint; with
`both` it sees the annotation and keeps the constraint; a run whose tokenizer lacks the term
markers falls back to constraints, with one warning."""

from __future__ import annotations

import logging

import pytest
import torch

from seq2seq.config import DecodeConfig, TokenizerConfig
from seq2seq.data.term_annotation import TERM_SYMBOLS, keeps_markers, without_annotations
from seq2seq.data.tokenizer import train_tokenizer, word_starts
from seq2seq.decode.translator import Translator
from seq2seq.model.transformer import build_model
from tests.constrained_cases import TERM_GLOSSARY, TERM_LINE, TERM_PAIRS
from tests.factories import tiny_shape, tiny_translator, untrained_run
from tests.runs import cli


@pytest.fixture(scope="module")
def marked(tmp_path_factory):
    """An untrained translator whose tokenizer keeps the term markers whole."""
    folder = tmp_path_factory.mktemp("marked")
    src, tgt = [a for a, _ in TERM_PAIRS], [b for _, b in TERM_PAIRS]
    tokenizer = train_tokenizer(
        TokenizerConfig(vocab_size=150), src, tgt, folder, symbols=TERM_SYMBOLS
    )
    torch.manual_seed(0)
    model = build_model(tiny_shape(encoder_layers=1, decoder_layers=1), tokenizer).eval()
    return Translator(model, tokenizer, DecodeConfig(), torch.device("cpu"), glossary=TERM_GLOSSARY)


def _seen(translator: Translator, mode: str):
    """The source pieces the model is given for TERM_LINE, and the constraints of its search."""
    options = translator.options.model_copy(update={"term_mode": mode})
    (source,) = translator.prepare([TERM_LINE], options)
    (segment,) = source.segments
    pieces = translator.tokenizer.src_pieces(list(segment[:-1]))  # less EOS
    return "".join(pieces).replace("▁", " "), source


def test_annotate_gives_the_model_the_annotated_source_and_no_constraint(marked):
    text, source = _seen(marked, "annotate")
    assert text.strip() == (
        "Press the button <t> bouton-poussoir </t> to close the window <t> croisée </t>."
    )
    assert source.constraints == ()


def test_both_annotates_and_keeps_the_constraints(marked):
    text, source = _seen(marked, "both")
    assert "button <t> bouton-poussoir </t>" in text
    wanted = [marked.tokenizer.decode_tgt([list(t)])[0] for t in source.constraints[0]]
    assert wanted == ["bouton-poussoir", "croisée"]


def test_constrain_leaves_the_source_as_it_is(marked):
    text, source = _seen(marked, "constrain")
    assert "<t>" not in text and len(source.constraints[0]) == 2


def test_annotate_decodes_with_the_plain_beam(marked):
    options = marked.options.model_copy(update={"term_mode": "annotate", "beam_size": 1})
    sources = marked.prepare([TERM_LINE, ""], options)  # greedy: no constraint needs a beam
    assert len(marked.translate_sources(sources, options=options)) == 2


def test_annotations_count_as_no_source_words_for_alignments(marked):
    text, source = _seen(marked, "annotate")
    pieces = marked.tokenizer.src_pieces(list(source.segments[0][:-1]))
    words = word_starts(without_annotations(pieces), {""})
    assert max(words) + 1 == len(TERM_LINE.split())
    kept = [p for p, w in zip(pieces, words) if w >= 0]
    assert not set(TERM_SYMBOLS) & set(kept) and "croisée" not in "".join(kept)


def test_a_run_without_the_markers_warns_once_and_constrains(tmp_path, caplog):
    plain = tiny_translator(tmp_path, TERM_PAIRS, DecodeConfig(term_mode="annotate"))
    assert not keeps_markers(plain.tokenizer)
    plain = Translator(
        plain.model, plain.tokenizer, plain.options, plain.device, glossary=TERM_GLOSSARY
    )
    with caplog.at_level(logging.WARNING):
        first = plain.prepare([TERM_LINE])
        plain.prepare([TERM_LINE])
    warnings = [r for r in caplog.records if "no term markers" in r.getMessage()]
    assert len(warnings) == 1
    assert len(first[0].constraints[0]) == 2  # constrained, as without the option
    assert "<t>" not in plain.tokenizer.src_pieces(list(first[0].segments[0]))


def test_a_bad_term_mode_is_one_clear_error(tmp_path):
    run = untrained_run(tmp_path, TERM_PAIRS[:3])
    result = cli("translate", "--run", run, "--term-mode", "annotated", code=2)
    assert "term_mode: Input should be 'place', 'constrain', 'annotate' or 'both'" in result.output
