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
from seq2seq.decode.term_place import Hit, Span, insertion_points, locate, written
from seq2seq.decode.term_scoring import CHOICE_WINDOW
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
    source = t.prepare(["Close the window."])[0].segments[0]
    (expected,) = t.placer.scorer.log_probs(source, [text], PLACE)
    assert score == pytest.approx(expected / ((5 + len(ids) + 1) / 6) ** PLACE.length_penalty)


def test_span_extension_covers_zone_de_texte():
    output, source = "Cliquez dans la zone de texte.", "Click in the text box."
    hit = Hit(source.index("text box"), source.index("text box") + 8, "champ")
    span = locate(output, source, hit, ["texte"], links={(4, 3)})
    assert output[span.start : span.end] == "zone de texte"


def test_a_one_word_term_does_not_swallow_the_compound_it_sits_in_by_attention_alone():
    output, source = "Cliquez dans la zone de liste.", "Click in the list box."
    hit = Hit(source.index("list"), source.index("list") + 4, "inventaire")
    span = locate(output, source, hit, ["liste"], links={(3, 3), (3, 5)})  # list ↔ zone, liste
    assert output[span.start : span.end] == "liste"


def test_a_span_does_not_grow_into_a_term_already_placed():
    output = "Assigne les couleurs aux lignes de données."
    source = "Assigns colors to the data rows."
    hit = Hit(source.index("rows"), source.index("rows") + 4, "rangées")
    taken = [(output.index("données"), len(output) - 1)]  # where "data" goes
    span = locate(output, source, hit, ["lignes"], {(5, 4), (5, 6)}, taken)
    assert output[span.start : span.end] == "lignes"


def test_a_hyphenated_term_takes_the_whole_phrase_its_parts_were_written_as(tiny):
    source, output = "Open the dialog.", "Ouvre la boîte de dialogue."
    hit = Hit(source.index("dialog"), source.index("dialog") + 6, "boîte-dialogue")
    renderings = _with(tiny, None).placer._renderings(source, hit)
    span = locate(output, source, hit, renderings, links={(2, 4)})
    assert output[span.start : span.end] == "boîte de dialogue"


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


@pytest.fixture
def constrained_beams(monkeypatch):
    """The beam sizes the constrained search is run at."""
    beams = []
    decode = translator_module.decode

    def spy(model, src, options, **extra):
        if extra.get("constraints"):
            beams.append(options.beam_size)
        return decode(model, src, options, **extra)

    monkeypatch.setattr(translator_module, "decode", spy)
    return beams


def test_a_term_without_a_span_is_put_in_without_the_constrained_beam(tiny, constrained_beams):
    t = _with(tiny, make_glossary([("window", "croisée")]))
    t.placer.scorer.links = lambda segments, hyps, options, memo=None: [set()] * len(hyps)
    (out,) = t.translate(["The window is open."])
    assert "croisée" in out and constrained_beams == []
    assert t.term_stats["inserted"] == 1 and not t.term_stats["fallback"]


def test_a_term_neither_placed_nor_put_in_falls_back_to_the_constrained_beam_at_beam_ten(
    tiny, constrained_beams
):
    t = _with(tiny, make_glossary([("window", "croisée")]))
    t.placer.scorer.links = lambda segments, hyps, options, memo=None: [set()] * len(hyps)
    t.placer._insertion = lambda *args: None  # e.g. an output of one word: nowhere to put it
    (out,) = t.translate(["The window is open."])
    assert "croisée" in out
    assert constrained_beams == [PLACE_FALLBACK_BEAM] and t.term_stats["fallback"] == 1


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


def test_insertion_points_surround_the_aligned_word_and_never_precede_the_sentence():
    source = "Use the filter for Word files."
    hit = Hit(source.index("filter"), source.index("filter") + 6, "Quandor")
    output = "Utilisez le bon pour les fichiers Word."
    aligned = insertion_points(output, source, hit, {(2, 2)})  # filter ↔ "bon"
    assert [output[at:].split()[0] for at in aligned] == ["le", "bon", "pour", "les"]
    first = insertion_points(output, source, hit, {(2, 0)})  # aligned to the first word
    assert 0 not in first and output[first[0] :].startswith("le bon")
    end = insertion_points("Utilisez Word.", source, hit, {(2, 1)})
    assert end[-1] == len("Utilisez Word")  # after the last word, before its final mark


def test_a_dropped_term_goes_in_where_the_model_scores_it_best_then_takes_its_lead(
    tiny, scripted, lexicon
):
    scripted[0] = "Cliquez deux fois."  # the window is not translated at all
    t = _with(tiny, make_glossary([("window", "croisée")]), lexicon)
    chosen = []

    def choose_longest(sources, texts, options, memo=None, scored_from=0, tail=0):  # scripted
        chosen.append(texts)
        return [float(len(x) + x.find("croisée") / 100) for x in texts]  # ties: the later

    t.placer.scorer.pair_log_probs = choose_longest
    segment = t.prepare(["Click the window twice."])[0]
    (seg,) = translator_module.flatten([segment])
    text, links, inserted = t.placer._place_one(
        seg, "Cliquez deux fois.", list(seg.hits), set(), PLACE
    )
    where, leads = chosen[0], chosen[1]
    # First where, the term bare at each insertion point; then, there, bare or after "de".
    assert len(where) > 1 and all(" de croisée" not in x for x in where)
    assert leads == [max(where, key=lambda x: x.find("croisée")), leads[1]]
    assert " de croisée" in leads[1] and leads[1].replace("de croisée", "croisée") == leads[0]
    assert inserted and text == leads[1] == "Cliquez deux fois de croisée."


def test_placing_encodes_each_source_once_for_all_its_passes(tiny, scripted, lexicon):
    t = _with(tiny, make_glossary([("window", "volet"), ("button", "poussoir")]), lexicon)
    scripted[0] = "Cliquez sur la fenêtre deux fois."  # both terms missing, one dropped
    encoded = []
    encode = t.model.encode
    t.model.encode = lambda src, mask: encoded.append(src.size(0)) or encode(src, mask)
    try:
        (out,) = t.translate(["Click the window and the button twice."])
    finally:
        del t.model.encode
    assert "volet" in out and "poussoir" in out and t.term_stats["inserted"] == 1
    assert encoded == [1]  # alignment, the model's choices and the final score share it


def test_placing_reads_the_plain_searchs_encoder_output_instead_of_encoding_again(tiny):
    t = _with(tiny, make_glossary([("window", "volet")]))  # a word the babbling model lacks
    encoded = []
    encode = t.model.encode
    t.model.encode = lambda src, mask: encoded.append(src.size(0)) or encode(src, mask)
    try:
        (out,) = t.translate(["Click the window twice."])
    finally:
        del t.model.encode
    assert "volet" in out and t.term_stats["placed"] == 1 and encoded == [1]


def test_the_term_inflected_elsewhere_in_the_source_does_not_bar_its_own_renderings(tiny):
    placer = _with(tiny, None).placer
    source = "A dialog holds one dialog, the dialogs say."
    hit = Hit(source.index("dialog"), source.index("dialog") + 6, "boîte-dialogue")
    renderings = placer._renderings(source, hit)
    avoid = placer._others(source, hit, renderings)
    assert "dialogs" not in avoid and "holds" in avoid
    output = "Une boîte de dialogue tient une boîte de dialogue."
    span = locate(output, source, hit, renderings, set(), [], avoid)
    assert output[span.start : span.end] == "boîte de dialogue"


def test_the_models_choice_scores_only_where_candidates_differ_and_picks_as_full_scores_do(tiny):
    t = _with(tiny, None)
    (segment,) = t.prepare(["Click the window twice."])
    src = list(segment.segments[0])
    texts = [f"cliquez sur {w} deux fois." for w in ("la fenêtre", "le volet", "les boutons")]
    full = t.placer.scorer.log_probs(src, texts, PLACE)
    assert t.placer.scorer.chooser(src, PLACE)(texts) == max(range(3), key=lambda i: full[i])
    ids = t.tokenizer.encode_tgt(texts)
    shared = next(i for i in range(len(ids[0])) if len({seq[i] for seq in ids}) > 1)
    tails = t.placer.scorer.pair_log_probs([src] * 3, texts, PLACE, scored_from=shared)
    heads = t.placer.scorer.pair_log_probs([src], texts[:1], PLACE)[0] - tails[0]
    assert [heads + x for x in tails] == pytest.approx(full, abs=1e-4)


def test_the_batched_engine_decodes_in_eval_mode_and_gives_a_training_model_back(tiny):
    modes = []
    for training in (True, False):
        tiny.model.train(training)
        for _ in tiny.batched([[5, 6, tiny.tokenizer.ids.eos]]):
            modes.append(any(m.training for m in tiny.model.modules()))
        modes.append(all(m.training == training for m in tiny.model.modules()))
    tiny.model.eval()
    assert modes == [False, True, False, True]


def test_a_choice_scores_its_candidates_only_a_few_tokens_into_the_end_they_share(tiny):
    t = _with(tiny, None)
    (segment,) = t.prepare(["Click the window twice."])
    src = list(segment.segments[0])
    end = " deux fois de suite avec la souris gauche."
    texts = [f"cliquez sur {w}{end}" for w in ("la fenêtre", "le volet")]
    asked = []

    def scores(sources, texts, options, memo=None, scored_from=0, tail=0):
        asked.append((scored_from, tail))
        return [0.0, 1.0]

    t.placer.scorer.pair_log_probs = scores
    assert t.placer.scorer.chooser(src, PLACE)(texts) == 1
    ids = t.tokenizer.encode_tgt(texts)
    shared = next(i for i in range(len(ids[0])) if ids[0][i] != ids[1][i])
    ends = next(i for i in range(1, len(ids[0])) if ids[0][-i] != ids[1][-i]) - 1
    assert ends > CHOICE_WINDOW and asked == [(shared, ends - CHOICE_WINDOW)]


def test_a_windowed_score_is_the_sum_over_the_tokens_left_in(tiny):
    t = _with(tiny, None)
    (segment,) = t.prepare(["Click the window twice."])
    src = list(segment.segments[0])
    text = "cliquez sur la fenêtre deux fois."
    n = len(t.tokenizer.encode_tgt([text])[0])
    whole = t.placer.scorer.pair_log_probs([src], [text], PLACE, scored_from=2)[0]
    cut = t.placer.scorer.pair_log_probs([src], [text], PLACE, scored_from=2, tail=3)[0]
    last = t.placer.scorer.pair_log_probs([src], [text], PLACE, scored_from=n - 3)[0]
    assert cut == pytest.approx(whole - last, abs=1e-4)  # the last 3 tokens and EOS left out
