"""Glossary files, which source terms a sentence holds, and constraints given directly."""

from __future__ import annotations

import pytest

from seq2seq.decode.glossary import (
    MAX_CONSTRAINTS,
    check_terms,
    make_glossary,
    read_constraints,
    read_glossary,
    term_ids,
)
from seq2seq.errors import UserError


def test_a_glossary_file_maps_source_terms_to_target_terms(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("# product names\nlaptop\tordinateur portable\n\nUSB stick\tclé USB\n")
    glossary = read_glossary(path)
    assert glossary.pairs == (("laptop", "ordinateur portable"), ("USB stick", "clé USB"))
    assert glossary.terms_in("Plug the usb  stick into the Laptop.") == [
        "clé USB",
        "ordinateur portable",
    ]


def test_source_terms_match_whole_words_ignoring_case():
    glossary = make_glossary([("cat", "chat"), ("data base", "base de données")])
    assert glossary.terms_in("The CAT sat.") == ["chat"]
    assert glossary.terms_in("Concatenate the cats.") == []
    assert glossary.terms_in("A Data Base, a database.") == ["base de données"]


def test_the_longest_overlapping_source_term_wins_and_each_target_comes_once():
    glossary = make_glossary([("data", "données"), ("data base", "base de données")])
    assert glossary.terms_in("the data base") == ["base de données"]
    assert glossary.terms_in("data and data") == ["données", "données"]  # placed twice


@pytest.mark.parametrize(
    "line, message",
    [
        ("laptop ordinateur", "no tab"),
        ("\tordinateur", "source term is empty"),
        ("laptop\t  ", "target term is empty"),
        ("a\tb\tc", "2 tabs"),
    ],
)
def test_a_bad_glossary_line_is_an_error_naming_file_and_line(tmp_path, line, message):
    path = tmp_path / "terms.tsv"
    path.write_text(f"cat\tchat\n{line}\n", encoding="utf-8")
    with pytest.raises(UserError, match=f"terms.tsv:2: .*{message}"):
        read_glossary(path)


def test_a_source_term_given_two_targets_is_an_error_naming_the_second_line(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("cat\tchat\nCat\tmatou\n", encoding="utf-8")
    with pytest.raises(UserError, match="terms.tsv:2: .*already given as 'chat'"):
        read_glossary(path)


def test_an_oversized_glossary_is_one_clear_error(monkeypatch):
    monkeypatch.setattr("seq2seq.decode.glossary.MAX_GLOSSARY_PAIRS", 3)
    with pytest.raises(UserError, match="4 term pairs; at most 3"):
        make_glossary([(f"w{i}", f"m{i}") for i in range(4)])


def test_constraints_are_json_lists_of_target_terms_one_line_each(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('["clé USB", "ordinateur"]\n[]\n\n', encoding="utf-8")
    assert read_constraints(path) == [["clé USB", "ordinateur"], [], []]


@pytest.mark.parametrize("line", ['"clé"', "[1]", '[""]', "[oops"])
def test_a_bad_constraints_line_is_an_error_naming_file_and_line(tmp_path, line):
    path = tmp_path / "c.jsonl"
    path.write_text(f"[]\n{line}\n", encoding="utf-8")
    with pytest.raises(UserError, match="c.jsonl:2: "):
        read_constraints(path)


def test_too_many_constraints_for_one_sentence_is_an_error():
    with pytest.raises(UserError, match=f"at most {MAX_CONSTRAINTS}"):
        check_terms([f"t{i}" for i in range(MAX_CONSTRAINTS + 1)], "line 1")


def test_terms_are_tokenized_as_words_and_unknown_pieces_are_refused():
    def encode(texts):  # a stand-in target tokenizer: one id per character, 'z' unknown
        return [[1 if ch == "z" else ord(ch) for ch in t] for t in texts]

    assert term_ids(encode, ["ab", "c"], "line 1", unk=1) == ((97, 98), (99,))
    with pytest.raises(UserError, match="line 3: target term 'az'"):
        term_ids(encode, ["az"], "line 3", unk=1)


def test_a_dotless_turkish_i_is_another_letter_and_never_an_error():
    glossary = make_glossary([("in", "dans")])
    assert glossary.terms_in("Yarın gidiyorum.") == []
    assert glossary.terms_in("Yarın in Ankara.") == ["dans"]


@pytest.mark.parametrize(
    "term, sentence",
    [
        ("Straße", "Die Straße ist lang."),
        ("Straße", "DIE STRASSE IST LANG."),
        ("İstanbul", "İstanbul büyük."),
        ("İstanbul", "İSTANBUL BÜYÜK."),
        ("ﬁle", "Open the ﬁle."),
        ("ﬁle", "Open the FILE."),
        ("file", "Open the ﬁle."),
        ("café", "Un cafe\u0301 noir."),  # the same letter, decomposed
        ("server", "The ｓｅｒｖｅｒ is down."),  # fullwidth
    ],
)
def test_a_source_term_matches_its_own_spelling_and_its_unicode_case_forms(term, sentence):
    assert make_glossary([(term, "X")]).terms_in(sentence) == ["X"]


def test_source_terms_of_scripts_without_spaces_match_at_any_character():
    glossary = make_glossary([("東京", "Tokyo"), ("ภาษา", "langue"), ("iPhone", "iPhone")])
    assert glossary.terms_in("我去東京了") == ["Tokyo"]
    assert glossary.terms_in("ฉันเรียนภาษาไทย") == ["langue"]
    assert glossary.terms_in("ซื้อiPhoneใหม่") == ["iPhone"]
    assert glossary.terms_in("My iPhones.") == []  # a spaced script keeps whole words


def test_each_occurrence_is_found_with_its_span_in_the_original_sentence():
    glossary = make_glossary([("file", "fichier"), ("İstanbul", "Istanbul")])
    sentence = "A ﬁle from İSTANBUL,  a FILE."
    found = glossary.find(sentence)
    assert [sentence[a:b] for a, b, _ in found] == ["ﬁle", "İSTANBUL", "FILE"]
    assert [target for _, _, target in found] == ["fichier", "Istanbul", "fichier"]


def test_a_100_kb_punctuation_sentence_is_searched_for_20000_source_terms_in_under_2_s():
    import time

    glossary = make_glossary([(f"term{i} word{i % 97}", f"terme{i}") for i in range(20_000)])
    start = time.perf_counter()
    assert glossary.terms_in("." * 100_000) == []
    assert glossary.terms_in(". " * 50_000 + "term7 word7") == ["terme7"]
    assert time.perf_counter() - start < 2


def test_a_full_server_glossary_takes_a_requests_pairs_as_it_is():
    from seq2seq.decode.glossary import MAX_GLOSSARY_PAIRS, with_pairs

    base = make_glossary([(f"term{i}", f"terme{i}") for i in range(MAX_GLOSSARY_PAIRS)])
    merged = with_pairs(base, [("Term5", "cinq"), ("cat", "chat")], origin="glossary")
    assert merged.base is base  # not rebuilt for each request
    assert merged.terms_in("term5, term6 and a cat") == ["cinq", "terme6", "chat"]
    again = with_pairs(base, [("Term5", "cinq"), ("cat", "chat")], origin="glossary")
    assert again.index is merged.index  # the same request glossary is built once


@pytest.mark.parametrize("source", [".", "...", " - ", "→", "🙂"])
def test_a_source_term_without_a_letter_or_digit_is_refused_as_it_matches_every_sentence(source):
    with pytest.raises(UserError, match="has no letter or digit; punctuation alone would match"):
        make_glossary([(source, "x")])


def test_source_terms_with_a_letter_or_digit_among_their_signs_are_kept():
    glossary = make_glossary([("C++", "C++"), ("4x4", "quatre-quatre"), ("東京", "Tokyo")])
    assert glossary.terms_in("C++ in Tokyo, 東京, by 4x4.") == ["C++", "Tokyo", "quatre-quatre"]
