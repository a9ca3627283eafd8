"""The pieces of scripts/bench_terminology.py's preferred-glossary benchmark that need no model:
the glossary of terms the model would not choose, term-injected references, and the counts of
term fragments and of terms written after the final full stop."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

from seq2seq.config import DecodeConfig
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
    assert glossary == [
        ("button", "bouton", "bouton-poussoir"),
        ("window", "fenêtre", "croisée"),
    ]


def test_a_seeded_share_of_terms_are_made_up_names_the_same_each_run(monkeypatch):
    monkeypatch.setattr(bench, "MADE_UP_SHARE", 1.0)
    first = bench.preferred_glossary(DICTIONARY, SRC, REF, seed=3)
    assert [t for _, _, t in first] == [
        t for _, _, t in bench.preferred_glossary(DICTIONARY, SRC, REF, seed=3)
    ]
    assert all(term in bench.MADE_UP for _, _, term in first)
    assert len({term for _, _, term in first}) == len(first)


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
    assert bench.fragments(output, term, strict) == expected


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
    assert bench.after_final_mark(output, terms) == expected


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
        {"src": s, "ref": r, "injected": r, "terms": glossary.terms_in(s)}
        for s, r in zip(SRC, REF)
        if glossary.terms_in(s)
    ]
    report = bench.score_preferred(translator, rows, set(), glossary, ("constrain", "annotate"))
    assert list(report["modes"]) == ["constrain", "annotate"]
    assert report["modes"]["constrain"]["term_use"]["rate"] == 1.0  # forced, by a random model
    assert report["modes"]["annotate"]["applied_as"] == "constrain"  # its tokenizer has no <t>
    assert all(r["constrain"] and r["plain"] for r in report["outputs"])
    assert "| annotate (as constrain) | 100.0% |" in bench.table(report)
