"""The grammar around a placed term, repaired by the French table (decode/term_repair.py,
decode/repair_fr.py): determiner gender and number, elision both ways, contractions, and the
model's score where the table cannot tell. Pure functions: no model, a stand-in for its score."""

from __future__ import annotations

from seq2seq.decode import repair_fr
from seq2seq.decode.term_repair import Placed, repaired, table_for


def _fixed(left: str, term: str, right: str, gender=None, number="sg", known=()) -> str:
    def refuse(candidates):
        raise AssertionError(f"the table should have decided, not the model: {candidates}")

    placed = Placed(left, term, right, gender, number)
    return repaired(placed, repair_fr, refuse, lambda w: w in known).text


def test_a_masculine_term_after_la_takes_le():
    assert _fixed("Vérifiez la ", "montant", " total.", "m") == "Vérifiez le montant total."


def test_de_le_contracts_to_du():
    assert _fixed("Le prix de la ", "montant", " est là.", "m") == "Le prix du montant est là."


def test_a_term_with_a_vowel_first_elides_the_article():
    assert _fixed("Ouvrez le ", "option", " du menu.", "f") == "Ouvrez l'option du menu."


def test_an_elided_article_before_a_consonant_is_written_out():
    assert _fixed("Ouvrez l'", "bouton", " du menu.", "m") == "Ouvrez le bouton du menu."
    assert _fixed("Le nom d'", "bouton", ".", "m") == "Le nom de bouton."


def test_que_elides_before_a_vowel():
    assert _fixed("Je crois que ", "Odile", " vient.") == "Je crois qu'Odile vient."


def test_ce_becomes_cet_before_a_vowel():
    assert _fixed("Fermez ce ", "onglet", ".", "m") == "Fermez cet onglet."


def test_a_plural_term_takes_les():
    assert _fixed("Cochez la ", "options", ".", "f", "pl") == "Cochez les options."


def test_au_becomes_a_la_for_a_feminine_term():
    assert _fixed("Allez au ", "zone", ".", "f") == "Allez à la zone."


def test_a_capital_is_kept_on_the_rewritten_determiner():
    assert _fixed("La ", "montant", " est dû.", "m") == "Le montant est dû."


def test_a_made_up_name_without_gender_takes_the_determiner_the_model_scores_better():
    asked = []

    def model(candidates):
        asked.append(candidates)
        return 1

    placed = Placed("Ouvrez le ", "Korvalo", ".", None)
    text = repaired(placed, repair_fr, model, lambda w: False).text
    assert asked == [["Ouvrez le Korvalo.", "Ouvrez la Korvalo."]]
    assert text == "Ouvrez la Korvalo."


def test_an_adjective_after_the_term_is_chosen_among_known_forms_that_agree():
    asked = []

    def model(candidates):
        asked.append(candidates)
        return candidates.index("Vérifiez le montant élevé.")

    placed = Placed("Vérifiez la ", "montant", " élevée.", "m")
    text = repaired(placed, repair_fr, model, lambda w: w in {"élevé", "élevée"}).text
    assert asked == [["Vérifiez le montant élevée.", "Vérifiez le montant élevé."]]
    assert text == "Vérifiez le montant élevé."


def test_agreement_is_left_alone_when_the_determiner_did_not_change():
    assert _fixed("Vérifiez le ", "total", " élevé.", "m", known={"élevée"}) == (
        "Vérifiez le total élevé."
    )


def test_a_language_without_a_table_gets_the_term_only():
    assert table_for("de") is None and table_for("fr") is repair_fr and table_for("fr_FR")
    text = repaired(Placed("Öffnen Sie die ", "Knopf", ".", "m"), None, None, None).text
    assert text == "Öffnen Sie die Knopf."


def test_suffix_rules_give_the_agreeing_forms():
    assert repair_fr.inflected("sélectionnée", "m", "sg") >= {"sélectionné"}
    assert "grandes" in repair_fr.inflected("grand", "f", "pl")
    assert "active" in repair_fr.inflected("actifs", "f", "sg")
    assert not repair_fr.starts_with_vowel("héros") and repair_fr.starts_with_vowel("hôtel")
