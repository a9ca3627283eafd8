"""Term mode place (decode/placing.py, term_place.py): the plain beam's output kept where it holds
its terms; elsewhere the span that translates a source term found (renderings, alignment,
compounds) and replaced by the term, the grammar repaired; the constrained beam where no span is
found. The plain search is scripted where a test needs a known French sentence."""

from __future__ import annotations

import pytest

import seq2seq.decode.translator as translator_module
from seq2seq.config import DecodeConfig
from seq2seq.decode.annotate import Annotation, translate_tagged
from seq2seq.decode.glossary import make_glossary
from seq2seq.decode.hypothesis import Hypothesis
from seq2seq.decode.term_lexicon import TermLexicon
from seq2seq.decode.term_place import Hit, Span, locate, written
from seq2seq.decode.translator import PLACE_FALLBACK_BEAM, Translator
from tests.constrained_cases import TERM_PAIRS
from tests.factories import tiny_translator, untrained_run
from tests.runs import cli

PLACE = DecodeConfig(term_mode="place", split_sentences=False)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """An untrained translator (its output babbles) with a tokenizer of TERM_PAIRS."""
    return tiny_translator(tmp_path_factory.mktemp("tiny"), TERM_PAIRS, PLACE)


def _with(tiny, glossary, lexicon=None) -> Translator:
    t = tiny
    return Translator(
        t.model, t.tokenizer, PLACE, t.device, glossary=glossary, lexicon=lexicon, tgt_lang="fr"
    )


@pytest.fixture
def scripted(monkeypatch, tiny):
    """Make the plain beam answer `said[0]` for every sentence; a constrained batch searches."""
    said = ["Cliquez sur la fenêtre deux fois."]
    search = translator_module._search_batch

    def plain(translator, src, batch, options, dropped, streams):
        if any(s.terms for s in batch):
            return search(translator, src, batch, options, dropped, streams)
        (ids,) = translator.tokenizer.encode_tgt(said[:1])
        return [[Hypothesis(list(ids), -1.0, -1.0)] for _ in batch]

    monkeypatch.setattr(translator_module, "_search_batch", plain)
    return said


@pytest.fixture
def lexicon(tmp_path):
    """Renderings (window → fenêtre) and a target text where "volet" follows "le"."""
    (tmp_path / "term_dictionary.tsv").write_text("window\tfenêtre\nbutton\tbouton\n")
    (tmp_path / "train.en").write_text("the shutter\na shutter\n")
    (tmp_path / "train.fr").write_text("le volet\nle volet est fermé\n")
    corpus = (tmp_path / "train.en", tmp_path / "train.fr")
    return TermLexicon(dictionary=tmp_path / "term_dictionary.tsv", corpus=corpus)


def test_place_keeps_sentence_that_holds_its_terms_identical(tiny):
    lines = ["Click the button twice.", "Close the window."]
    plain = _with(tiny, None).translate(lines)
    said = [line.split()[0] for line in plain]  # a word each plain output holds
    held = _with(tiny, make_glossary([("button", said[0]), ("window", said[1])]))
    assert held.translate(lines) == plain
    assert held.term_stats["held"] == 2 and not held.term_stats["placed"]


def test_a_missing_term_replaces_the_words_that_translate_it_and_its_article_agrees(
    tiny, scripted, lexicon
):
    t = _with(tiny, make_glossary([("window", "volet")]), lexicon)
    assert t.translate(["Click the window twice."]) == ["Cliquez sur le volet deux fois."]
    assert t.term_stats["placed"] == 1 and not t.term_stats["fallback"]


def test_the_placed_text_is_scored_as_written(tiny, scripted, lexicon):
    t = _with(tiny, make_glossary([("window", "volet")]), lexicon)
    [[(text, score)]] = t.translate_nbest(["Close the window."], options=PLACE)
    (ids,) = t.tokenizer.encode_tgt([text])
    (expected,) = t.placer.log_probs(t.prepare(["Close the window."])[0].segments[0], [text], PLACE)
    assert score == pytest.approx(expected / ((5 + len(ids) + 1) / 6) ** PLACE.length_penalty)


def test_span_extension_covers_zone_de_texte():
    output, source = "Cliquez dans la zone de texte.", "Click in the text box."
    hit = Hit(source.index("text box"), source.index("text box") + 8, "champ")
    span = locate(output, source, hit, ["texte"], links={(4, 3)})
    assert output[span.start : span.end] == "zone de texte"


def test_a_hyphenated_word_is_replaced_whole():
    output, source = "Appuyez sur le bouton-poussoir.", "Press the push button."
    hit = Hit(source.index("push button"), source.index("push button") + 11, "touche")
    span = locate(output, source, hit, ["bouton"], links=set())
    assert output[span.start : span.end] == "bouton-poussoir"


def test_the_sentence_initial_capital_and_the_plural_are_carried():
    span = Span(0, 7, (0,))
    assert written("croisée", "Fenêtre ouverte.", span, False, None) == "Croisée"
    later = Span(3, 10, (1,))
    assert written("croisée", "La fenêtres.", later, True, lambda w: w + "s") == "croisées"
    assert written("Korvalo", "La fenêtres.", later, True, lambda w: w + "s") == "Korvalo"


def test_no_span_found_falls_back_to_the_constrained_beam_at_beam_ten(tiny, monkeypatch):
    beams = []
    decode = translator_module.decode

    def spy(model, src, options, **extra):
        if extra.get("constraints"):
            beams.append(options.beam_size)
        return decode(model, src, options, **extra)

    monkeypatch.setattr(translator_module, "decode", spy)
    t = _with(tiny, make_glossary([("window", "croisée")]))
    monkeypatch.setattr(t.placer, "_links", lambda segments, hyps, options: [set()] * len(hyps))
    (out,) = t.translate(["The window is open."])
    assert "croisée" in out
    assert beams == [PLACE_FALLBACK_BEAM] and t.term_stats["fallback"] == 1


def test_a_tag_around_a_source_term_ends_up_around_the_placed_term(tiny, scripted, lexicon):
    t = _with(tiny, make_glossary([("window", "volet")]), lexicon)
    line = "Click the <b>window</b> twice."
    (found,) = translate_tagged(t, [line], Annotation(alignments=True), "xml")
    assert found.text == "Cliquez sur le <b>volet</b> deux fois."


def test_translate_with_a_glossary_places_terms_by_default(tmp_path, monkeypatch):
    assert DecodeConfig().term_mode == "place"
    run = untrained_run(tmp_path, TERM_PAIRS[:8])
    (tmp_path / "g.tsv").write_text("window\tcroisée\n")
    (tmp_path / "in.txt").write_text("The window is open.\n")
    called = []
    place = translator_module.TermPlacer.place
    monkeypatch.setattr(
        translator_module.TermPlacer,
        "place",
        lambda self, *a: called.append(1) or place(self, *a),
    )
    cli("translate", "--run", run, "--glossary", tmp_path / "g.tsv", "-i", tmp_path / "in.txt")
    assert called


def test_an_output_word_that_renders_another_source_word_is_not_taken_by_alignment_alone():
    output, source = "Ouvrez la boîte de dialogue Ouvrir.", "Open the Open Image dialog."
    hit = Hit(source.index("Image"), source.index("Image") + 5, "illustration")
    links = {(3, 5)}  # "Image" aligned to "Ouvrir"
    assert locate(output, source, hit, ["image"], links, avoid=["ouvrir", "open"]) is None
    assert locate(output, source, hit, ["image"], links) is not None
