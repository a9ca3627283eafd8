"""Glossary files people already have (TSV, CSV, TBX-Basic, DeepL's entries) read by one
loader into the same term entries, with the target terms' grammar where a column gives it."""

from __future__ import annotations

from seq2seq.decode.glossary import make_glossary
from seq2seq.decode.glossary_files import TermEntry


def test_a_glossary_tells_a_target_terms_gender_number_and_case():
    glossary = make_glossary(
        [
            TermEntry("laptop", "ordinateur portable", gender="m", number="sg", line=2),
            TermEntry("scissors", "ciseaux", number="pl", case_fixed=True, line=3),
            ("cat", "chat"),
        ]
    )
    assert glossary.info("ordinateur portable").gender == "m"
    assert glossary.info("ciseaux") == TermEntry("scissors", "ciseaux", None, "pl", True, 3)
    assert glossary.info("chat") == TermEntry("cat", "chat")
    assert glossary.info("chien") is None


def test_a_request_glossary_over_a_servers_tells_the_servers_terms_too():
    from seq2seq.decode.glossary import with_pairs

    base = make_glossary([TermEntry("laptop", "ordinateur portable", gender="m")])
    merged = with_pairs(base, [("cat", "chat")], origin="glossary")
    assert merged.info("ordinateur portable").gender == "m"
    assert merged.info("chat").source == "cat"
