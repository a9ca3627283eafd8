"""Terminology metrics (seq2seq/decode/term_metrics.py): term success, agreement at the terms,
masked chrF, WMT21 window overlap and derailment flags, text in and numbers out."""

from __future__ import annotations

import json

import pytest
from sacrebleu.metrics import CHRF

from seq2seq.decode import term_metrics as tm
from seq2seq.decode.evaluate import _term_specs
from seq2seq.decode.glossary import make_glossary
from seq2seq.decode.glossary_files import TermEntry
from tests.factories import untrained_run
from tests.runs import cli


def test_term_success_counts_each_occurrence_once_by_surface_and_by_lemma():
    outputs = ["Les montants du Korvalo.", "Le montant et le montant."]
    terms = [["montant", "Korvalo"], ["montant", "montant", "montant"]]
    s = tm.term_success(outputs, terms)
    # Surface: "Korvalo" and two "montant" (a third is not there); lemma adds "montants".
    assert s["terms"] == 5
    assert s["surface"] == pytest.approx(3 / 5)
    assert s["lemma"] == pytest.approx(4 / 5)


def test_a_longer_term_takes_its_words_from_a_shorter_one():
    assert tm.term_success(["le poste de travail"], [["poste de travail", "poste"]])[
        "surface"
    ] == pytest.approx(1 / 2)


def test_lemma_drops_plurals_and_case():
    assert [tm.lemma(w) for w in ("Journaux", "montants", "réseaux", "Processus", "cas")] == [
        "journal",
        "montant",
        "réseau",
        "processu",
        "cas",
    ]


def test_la_before_a_masculine_term_fails_the_gender_check():
    assert tm.term_checks("Entrez la montant.", "montant", "m") == [
        ("elision", True),
        ("gender", False),
    ]
    report = tm.agreement(["Entrez la montant."], [["montant"]], {"montant": "m"})
    assert report["failures"] == 1 and report["by_kind"]["gender"]["failures"] == 1
    assert tm.agreement(["Entrez le montant."], [["montant"]], {"montant": "m"})["failures"] == 0


def test_an_elided_article_before_a_consonant_is_flagged():
    assert ("elision", False) in tm.term_checks("Ouvrez l'Korvalo.", "Korvalo", "m")
    assert tm.elision_errors("Ouvrez l'Korvalo.") == ["l'Korvalo"]
    assert tm.term_checks("Ouvrez le Korvalo.", "Korvalo", "m") == [
        ("elision", True),
        ("gender", True),
    ]


def test_a_missing_elision_before_a_vowel_is_flagged_and_aspirated_h_is_not():
    assert ("elision", False) in tm.term_checks("Voir la intervalle.", "intervalle")
    assert tm.elision_errors("la intervalle de un écran") == ["la intervalle", "de un"]
    assert tm.elision_errors("le hasard, la hauteur, l'heure, ce à quoi") == []
    assert tm.term_checks("Réglez l'élévation.", "élévation", "f") == [("elision", True)]


def test_number_ce_cet_and_contractions_are_checked_at_the_term():
    assert ("number", False) in tm.term_checks("les montant", "montant", "m sg")
    assert ("ce/cet", False) in tm.term_checks("ce intervalle", "intervalle", "m")
    assert ("ce/cet", True) in tm.term_checks("cet intervalle", "intervalle", "m")
    assert ("contraction", False) in tm.term_checks("la taille de le montant", "montant", "m")
    assert ("contraction", False) in tm.term_checks("la taille du intervalle", "intervalle")
    assert tm.term_checks("la taille du montant", "montant", "m") == [
        ("contraction", True),
        ("gender", True),
    ]
    # "mon" is the feminine's form before a vowel too.
    assert ("gender", False) not in tm.term_checks("mon élévation", "élévation", "f")


def test_the_gender_column_is_read_in_its_usual_spellings():
    assert tm.features("f") == ("f", None)
    assert tm.features("m pl") == ("m", "pl")
    assert tm.features("F.SG") == ("f", "sg")
    assert tm.features(None) == (None, None)


def test_masked_chrf_ignores_the_term_itself():
    # The same sentences around two terms of different lengths: chrF differs, masked it does not.
    def both(term):
        out, ref = [f"Ouvrez le {term} maintenant."], [f"Ouvrez le {term} tout de suite."]
        return tm.masked_chrf(out, ref, [[term]]), CHRF().corpus_score(out, [ref]).score

    masked_short, plain_short = both("Zentrix")
    masked_long, plain_long = both("poste de travail")
    assert masked_short == pytest.approx(masked_long)
    assert plain_short != pytest.approx(plain_long)
    refs = ["Cliquez sur le montant pour ouvrir la fenêtre."]
    assert tm.masked_chrf(refs, refs, [["montant"]]) == pytest.approx(100.0)
    damaged = tm.masked_chrf(["Cliquez montant montant montant."], refs, [["montant"]])
    assert damaged < 60
    assert tm.mask_terms("Le poste de travail et le poste.", ["poste", "poste de travail"]) == (
        "Le ■ et le ■."
    )


def test_window_overlap_compares_the_words_around_the_term():
    ref = ["Cliquez sur le montant pour ouvrir la fenêtre"]
    same = tm.window_overlap(["Cliquez sur le montant pour ouvrir"], ref, [["montant"]], 2)
    assert same == {"width": 2, "terms": 1, "overlap": 1.0}
    # Around "montant" in the reference: sur, le, pour, ouvrir; in the output: le, pour only.
    half = tm.window_overlap(["Ouvrez le montant pour voir"], ref, [["montant"]], 2)
    assert half["overlap"] == pytest.approx(2 / 4)
    assert tm.window_overlap(["sans le terme"], ref, [["montant"]], 2)["terms"] == 0


def test_repeated_ngrams_are_flagged_beyond_what_the_plain_output_repeats():
    out = "Cliquez sur le bouton sur le bouton sur le bouton."
    assert tm.repeats(out) == 4  # "sur le bouton" ×3, "le bouton sur" ×2
    flags = tm.derailment([out, "Cliquez sur le bouton."], [["bouton"], ["bouton"]])
    assert flags["lines_repeated_ngrams"] == 1
    same_as_plain = tm.derailment([out], [["bouton"]], plains=[out])
    assert same_as_plain["lines_repeated_ngrams"] == 0
    assert same_as_plain["length_ratio"] == 1.0


def test_derailment_flags_late_terms_length_and_fragments():
    d = tm.derailment(
        ["La fenêtre est affichée. croisée.", "Le Zentr est prêt.", "Oui."],
        [["croisée"], ["Zentrix"], ["Zentrix"]],
        plains=["La fenêtre est affichée.", "Le produit est prêt.", "Oui, le produit est prêt."],
    )
    assert d["terms_after_final_mark"] == 1 and d["lines_after_final_mark"] == 1
    assert d["lines_fragments"] == 1  # "Zentr": a capitalised term is a name, strict
    assert d["lines_length_off"] == 1  # 1 word for 5 (5 for 4 is within bounds)


def test_the_report_holds_every_metric_and_prints_them():
    report = tm.term_report(
        ["Entrez la montant."], ["Entrez le montant."], [["montant"]], specs={"montant": "m"}
    )
    assert set(report) == {
        "term_success",
        "agreement",
        "masked_chrf",
        "window_overlap",
        "derailment",
    }
    lines = tm.describe(report)
    assert "length" not in lines[3]  # no plain output given
    with_plain = tm.describe(
        tm.term_report(
            ["Le montant."], ["Le montant."], [["montant"]], plains=["Un grand montant x."]
        )
    )
    assert with_plain[3].endswith("; length ratio to plain 0.50, lines off: 1")
    assert lines[0].startswith("term success: surface 100.0%, lemma 100.0% of 1 terms")
    assert "agreement at terms: 50.0% of 2 checks (1 failed)" in lines[1]


@pytest.mark.slow
def test_evaluate_with_a_glossary_prints_and_writes_the_term_metrics(tmp_path, demo_pairs):
    (tmp_path / "run").mkdir()
    run = untrained_run(tmp_path / "run", demo_pairs[:300])
    src, ref = tmp_path / "t.en", tmp_path / "t.fr"
    src.write_text("The umbrella is blue.\nYou want one big chair.\n", encoding="utf-8")
    ref.write_text("Le parapluie est bleu.\nVous voulez une grande chaise.\n", encoding="utf-8")
    terms = tmp_path / "terms.tsv"
    terms.write_text("umbrella\tparapluie\nchair\tchaise\n", encoding="utf-8")
    report_path = tmp_path / "r.json"
    result = cli(
        "--quiet", "evaluate", "--run", run, "--src", src, "--ref", ref, "--glossary", terms,
        "--json", report_path, "--output-dir", tmp_path,
    )  # fmt: skip
    metrics = json.loads(report_path.read_text(encoding="utf-8"))["term_metrics"]
    assert metrics["term_success"] == {"terms": 2, "surface": 1.0, "lemma": 1.0}  # forced
    assert set(metrics) >= {"agreement", "masked_chrf", "window_overlap", "derailment"}
    for line in tm.describe(metrics):
        assert line in result.stdout


def test_evaluate_reads_each_terms_gender_and_number_from_its_glossary_entry():
    glossary = make_glossary(
        [TermEntry("chair", "chaise", "f", "sg"), TermEntry("files", "Orvanta", "f", None)]
        + [("umbrella", "parapluie")]
    )
    specs = _term_specs(glossary, [["chaise", "parapluie"], ["Orvanta"]])
    assert specs == {"chaise": "f sg", "Orvanta": "f"}
    assert _term_specs(None, [["chaise"]]) == {}  # constraints given directly: no column


def test_elision_is_checked_on_overlapping_pairs_and_not_on_words_it_cannot_tell():
    assert tm.elision_errors("la taille de le écran") == ["le écran"]
    # An acronym, an h the rules do not know, a y: either way is written; nothing flagged.
    assert tm.elision_errors("le format de HTML, le hamster, le yaourt, l'USB, le USB") == []
    assert tm.elision_errors("la heure, le homme") == ["la heure", "le homme"]
    # "le ou la", "de a à z", "de et": no article before a noun.
    assert tm.elision_errors("le ou la valeur, de a à z, le en-tête ou la entrée") == ["la entrée"]
    assert tm.term_checks("le Hexbox et l'Hexbox", "Hexbox", "m") == [("gender", True)]
