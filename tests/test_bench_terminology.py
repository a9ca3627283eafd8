"""The pieces of scripts/bench_terminology.py's preferred-glossary benchmark that need no model:
the glossary of terms the model would not choose, term-injected references, and the counts of
term fragments and of terms written after the final full stop."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

from seq2seq.config import DecodeConfig
from seq2seq.decode import term_metrics
from seq2seq.decode.glossary import make_glossary
from tests.factories import tiny_translator

_PATH = Path(__file__).resolve().parents[1] / "scripts" / "bench_terminology.py"
_SPEC = importlib.util.spec_from_file_location("bench_terminology", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)

SRC = [
    "Click the button to open the window.",
    "The window is closed.",
    "Press the button twice.",
    "A button and a window.",
    "Choose a file.",
]
REF = [
    "Cliquez sur le bouton pour ouvrir la fenêtre.",
    "La fenêtre est fermée.",
    "Appuyez deux fois sur le bouton.",
    "Un bouton et une fenêtre.",
    "Choisissez un document.",
]
DICTIONARY = {"button": "bouton", "window": "fenêtre", "file": "fichier", "click": "cliquez"}


def test_the_glossary_replaces_usual_translations_found_in_the_references(monkeypatch):
    monkeypatch.setattr(bench, "MADE_UP_SHARE", 0.0)
    glossary = bench.preferred_glossary(DICTIONARY, SRC, REF)
    # "file" is in one reference only (MIN_HITS is 3); "click" → "cliquez" is no noun.
    # Each with the gender and number column the repair and the agreement checks read.
    assert glossary == [
        ("button", "bouton", "bouton-poussoir", "m sg"),
        ("window", "fenêtre", "croisée", "f sg"),
    ]


def test_a_seeded_share_of_terms_are_made_up_names_the_same_each_run(monkeypatch):
    monkeypatch.setattr(bench, "MADE_UP_SHARE", 1.0)
    first = bench.preferred_glossary(DICTIONARY, SRC, REF, seed=3)
    assert [t for _, _, t, _ in first] == [
        t for _, _, t, _ in bench.preferred_glossary(DICTIONARY, SRC, REF, seed=3)
    ]
    assert all(term in bench.MADE_UP for _, _, term, _ in first)
    assert len({term for _, _, term, _ in first}) == len(first)
    # A made-up name has its own gender and the number of the word it replaces.
    assert all(spec == bench.MADE_UP_GENDER[t] + " sg" for _, _, t, spec in first)


def test_the_injected_reference_holds_the_term_where_the_usual_translation_was():
    usual_of = {"bouton-poussoir": "bouton", "croisée": "fenêtre"}
    assert (
        bench.injected_pair(REF[0], ["bouton-poussoir", "croisée"], usual_of)
        == "Cliquez sur le bouton-poussoir pour ouvrir la croisée."
    )
    # "boutons" is another word: left alone; the count then differs and the pair is not scored.
    assert bench.inject("Deux boutons, un bouton.", "bouton", "touche") == (
        "Deux boutons, un touche.",
        1,
    )
    assert bench.injected_pair("Deux boutons.", ["bouton-poussoir"], usual_of) is None


@pytest.mark.parametrize(
    ("output", "term", "strict", "expected"),
    [
        (
            "Le bouton Options bouton-p est visible pour bouton-pouss et bouton-les "
            "bouton-poussoir.",
            "bouton-poussoir",
            False,
            3,
        ),
        ("Le bouton-poussoir est rouge.", "bouton-poussoir", False, 0),
        ("Le bouton est rouge.", "bouton-poussoir", False, 0),
        ("Ouvrez le poste de commande du poste de travail.", "poste de travail", False, 1),
        ("Le poste est libre sur le poste de travail.", "poste de travail", False, 0),
        ("Le Zentr est prêt, Zentrix aussi.", "Zentrix", True, 1),
        ("Les Zentrixes sont prêts.", "Zentrix", True, 1),
        ("Les documents du document.", "document", False, 0),
    ],
)
def test_fragments_are_started_terms_left_unfinished(output, term, strict, expected):
    assert term_metrics.fragments(output, term, strict) == expected


@pytest.mark.parametrize(
    ("output", "terms", "expected"),
    [
        ("la fenêtre suivante est affichée. croisée.", ["croisée"], 1),
        ("la croisée suivante est affichée.", ["croisée"], 0),
        ("Cliquez sur le document.", ["document"], 0),
        ("Texte. Document ouvert.", ["Document"], 0),
        ("Il est affiché. croisée document", ["croisée", "document"], 2),
        ("Il est affiché ! croisée", ["croisée"], 1),
    ],
)
def test_terms_after_the_final_full_stop_are_counted(output, terms, expected):
    assert term_metrics.after_final_mark(output, terms) == expected


def test_the_modes_are_parsed_and_checked():
    assert bench.term_modes("constrain, annotate,both") == ("constrain", "annotate", "both")
    with pytest.raises(argparse.ArgumentTypeError, match="term modes are constrain, annotate"):
        bench.term_modes("annotated")


@pytest.mark.slow
def test_each_term_mode_is_a_row_and_a_run_without_markers_says_it_constrained(tmp_path):
    decode = DecodeConfig(beam_size=2, split_sentences=False, max_len_a=0.0, max_len_b=16)
    translator = tiny_translator(tmp_path, list(zip(SRC, REF)) * 20, decode)
    glossary = make_glossary([("button", "bouton"), ("window", "fenêtre")])
    rows = [
        {"line": i, "src": s, "ref": r, "injected": r, "repaired": r}
        | {"terms": glossary.terms_in(s)}
        for i, (s, r) in enumerate(zip(SRC, REF))
        if glossary.terms_in(s)
    ]
    report = bench.score_preferred(translator, rows, set(), glossary, ("constrain", "annotate"))
    assert list(report["modes"]) == ["constrain", "annotate"]
    assert report["modes"]["constrain"]["term_use"]["rate"] == 1.0  # forced, by a random model
    assert report["modes"]["annotate"]["applied_as"] == "constrain"  # its tokenizer has no <t>
    assert all(r["constrain"] and r["plain"] for r in report["outputs"])
    assert "| annotate (as constrain) | 100.0% |" in bench.table(report)
    assert report["modes"]["constrain"]["term_success"]["surface"] == 1.0
    assert report["modes"]["constrain"]["speed_vs_plain"] > 0
    assert report["modes"]["constrain"]["fallback_share"] is None  # nothing placed


def test_the_fallback_share_is_of_the_segments_with_terms():
    assert bench.fallback_share({"held": 5, "placed": 3, "fallback": 2}) == pytest.approx(0.2)
    assert bench.fallback_share({}) is None


SPECS = {"montant": "m sg", "montants": "m pl", "Korvalo": "m sg", "intervalle": "m sg"}
SPECS |= {"plateforme": "f sg", "boîte-dialogue": "f sg", "Orvanta": "f pl", "informations": "f pl"}


@pytest.mark.parametrize(
    ("naive", "repaired"),
    [
        ("Entrez la montant.", "Entrez le montant."),
        ("Ouvrez l'Korvalo.", "Ouvrez le Korvalo."),
        ("L'Korvalo est prêt.", "Le Korvalo est prêt."),
        ("la taille de la intervalle", "la taille de l'intervalle"),
        ("la taille de la montant", "la taille du montant"),
        ("la taille du plateforme", "la taille de la plateforme"),
        ("la taille de l'Korvalo", "la taille du Korvalo"),
        ("passez à la montant", "passez au montant"),
        ("passez au intervalle", "passez à l'intervalle"),
        ("cette montant et ce intervalle", "ce montant et cet intervalle"),
        ("une montant, un plateforme", "un montant, une plateforme"),
        ("le type d'Korvalo et de intervalle", "le type de Korvalo et d'intervalle"),
        ("Les montants des Orvanta.", "Les montants des Orvanta."),
        ("aucune montant dans ma Korvalo", "aucun montant dans mon Korvalo"),
        ("La boîte-dialogue est fermée.", "La boîte-dialogue est fermée."),
        ("une seule boîte de boîte-dialogue", "une seule boîte-dialogue"),
        ("une base de informations", "une base d'informations"),
        ("Boîtes de boîte-dialogue du poste", "Boîtes-dialogue du poste"),
    ],
)
def test_the_repaired_reference_makes_the_determiner_agree_with_the_term(naive, repaired):
    terms = {t: spec for t, spec in SPECS.items() if t in naive}
    assert bench.repair_reference(naive, terms) == repaired


def test_scored_rows_hold_the_naive_and_the_repaired_reference():
    entries = [("value", "valeur", "montant", "m sg"), ("window", "fenêtre", "croisée", "f sg")]
    src = ["Enter the value in the window.", "No term here."]
    ref = ["Entrez la valeur dans la fenêtre.", "Rien ici."]
    glossary = bench.glossary_of(entries)
    assert (glossary.info("montant").gender, glossary.info("montant").number) == ("m", "sg")
    rows, found = bench.scored_rows(glossary, entries, src, ref, first=500)
    assert found == 1
    assert rows == [
        {
            "line": 500,
            "src": src[0],
            "ref": ref[0],
            "injected": "Entrez la montant dans la croisée.",
            "repaired": "Entrez le montant dans la croisée.",
            "terms": ["montant", "croisée"],
            "usual": ["valeur", "fenêtre"],
        }
    ]


def test_the_repair_is_measured_against_the_hand_checked_lines():
    rows = [
        {"line": 1, "injected": "la montant", "repaired": "le montant"},
        {"line": 2, "injected": "la montant élevée", "repaired": "le montant élevée"},
        {"line": 3, "injected": "x", "repaired": "x"},
    ]
    figures = bench.reference_figures(rows, {1: "le montant", 2: "le montant élevé"})
    assert figures["checked_lines"] == 2
    assert figures["changed_by_repair"] == 2
    assert figures["repair_agrees_with_checked"] == 1
    assert figures["naive_agrees_with_checked"] == 0
    assert figures["disagreements"] == [
        {"line": 2, "repaired": "le montant élevée", "checked": "le montant élevé"}
    ]
    assert rows[0]["checked"] == "le montant" and "checked" not in rows[2]


def test_the_hand_checked_file_holds_at_least_50_distinct_test_lines():
    checked = bench.read_checked()
    assert len(checked) >= 50
    assert all(500 <= line < 1000 and ref.strip() for line, ref in checked.items())


def test_a_term_mode_this_version_does_not_take_is_skipped():
    assert bench.mode_accepted("constrain")
    assert not bench.mode_accepted("nonsense")
    assert bench.term_modes("constrain,place") == ("constrain", "place")


def test_the_figures_score_against_naive_repaired_and_hand_checked_references():
    rows = [
        {"src": "a", "injected": "Entrez la montant.", "repaired": "Entrez le montant."}
        | {"terms": ["montant"], "checked": "Entrez le montant."},
        {"src": "b", "injected": "La croisée.", "repaired": "La croisée.", "terms": ["croisée"]},
    ]
    outputs = ["Entrez le montant.", "La croisée."]
    figures = bench.mode_figures(outputs, rows, set(), ["Entrez la valeur.", "La croisée."])
    assert figures["bleu_checked"] == pytest.approx(100.0)
    assert figures["bleu_repaired"] == pytest.approx(100.0)
    assert figures["bleu_injected"] < 100.0
    assert figures["held_by_plain"] == {"lines": 1, "identical": 1}
    assert figures["term_success"]["surface"] == 1.0


def test_the_swap_oracle_applies_the_references_own_rules_to_the_plain_output_where_it_can():
    rows = [
        {
            "terms": ["montant"],
            "usual": ["valeur"],
            "ref": "Entrez la valeur.",
            "repaired": "Entrez le montant.",
        },
        {"terms": ["montant"], "usual": ["valeur"], "ref": "La valeur.", "repaired": "Le montant."},
    ]
    plain = ["Entrez la valeur.", "Un nombre."]  # the second holds no usual word: left out
    found = bench.swap_oracle(rows, plain, {"montant": "m sg"})
    assert found["lines"] == 1 and found["lines_index"] == [0]
    assert found["swapped_bleu"] == pytest.approx(100.0) and found["plain_bleu"] == pytest.approx(
        100.0
    )
