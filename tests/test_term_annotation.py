"""Terminology annotation at training time (data.augment.terms, Dinu et al. 2019): a dictionary
term found on both sides of a pair is annotated in the source right after its source term, with
the target term as the target writes it; markers the tokenizer keeps whole; a pure function of
(seed, epoch, batch); off by default."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from seq2seq.config import AugmentConfig, load_config
from seq2seq.data.augment import TERM_DICTIONARY_FILE
from seq2seq.data.corpus import prepare_data
from seq2seq.data.parts import tokenizer_symbols
from seq2seq.data.term_annotation import (
    TERM_SYMBOLS,
    annotate,
    annotate_pair,
    shifted_links,
    term_rng,
)
from seq2seq.data.term_dictionary import (
    TermDictionary,
    dice_dictionary,
    read_term_dictionary,
    training_dictionary,
)
from seq2seq.errors import ConfigError, UserError
from seq2seq.train.distributed import Dist
from seq2seq.train.feed import UpdateFeed
from seq2seq.train.state import TrainState
from tests.runs import write_tiny_config

TERMS = TermDictionary([("button", "bouton"), ("user name", "identifiant"), ("window", "fenêtre")])


def test_a_term_is_annotated_right_after_its_source_word_with_the_targets_spelling():
    src, _ = annotate_pair(
        "Press the button.", "Appuyez sur le Bouton.", None, TERMS, term_rng(0, 0, 0)
    )
    assert src == "Press the button <t> Bouton </t>."


def test_a_term_is_annotated_only_when_the_target_holds_it():
    assert (
        annotate_pair("Press the button.", "Appuyez ici.", None, TERMS, term_rng(0, 0, 0)) is None
    )
    # Whole words only, on both sides.
    assert TERMS.matches("Press the buttons.", "les boutons") == []
    assert TERMS.matches("Press the button.", "les boutons") == []


def test_a_phrase_matches_whole_and_several_terms_each_get_their_own_annotation():
    src = "Type your User Name in the window"
    found = TERMS.matches(src, "Tapez votre identifiant dans la fenêtre")
    assert found == [(10, 19, "identifiant"), (27, 33, "fenêtre")]
    assert annotate(src, found) == (
        "Type your User Name <t> identifiant </t> in the window <t> fenêtre </t>"
    )


def test_each_found_term_is_annotated_with_probability_one_half_and_at_least_one():
    counts = np.zeros(2)
    for batch in range(400):
        src, _ = annotate_pair(
            "the window and the button",
            "la fenêtre et le bouton",
            None,
            TERMS,
            term_rng(0, 0, batch),
        )
        counts += ["fenêtre </t>" in src, "bouton </t>" in src]
        assert "</t>" in src
    assert np.all(np.abs(counts / 400 - 2 / 3) < 0.08)  # 1/2 each, but never neither


def test_word_links_move_past_an_annotation():
    src = "the button. then the window"
    spans = TERMS.matches(src, "le bouton. puis la fenêtre")
    assert annotate(src, spans).split() == [
        "the", "button", "<t>", "bouton", "</t>.",
        "then", "the", "window", "<t>", "fenêtre", "</t>",
    ]  # fmt: skip
    assert shifted_links(src, spans, [(0, 0), (1, 1), (2, 2), (4, 4)]) == [
        (0, 0), (1, 1), (5, 2), (7, 4),
    ]  # fmt: skip


def test_annotation_is_a_pure_function_of_seed_epoch_and_batch():
    def run(seed, epoch, batch):
        rng = term_rng(seed, epoch, batch)
        pair = ("the window and the button", "la fenêtre et le bouton")
        return [annotate_pair(*pair, None, TERMS, rng) for _ in range(30)]

    assert run(1, 2, 3) == run(1, 2, 3)
    assert run(1, 2, 3) != run(1, 2, 4)


def test_the_corpus_dictionary_keeps_each_words_best_translation_by_dice():
    src = ["the green chair", "a green house", "the green door", "my chair", "a chair is green"]
    tgt = ["la chaise verte", "une maison verte", "la porte verte", "ma chaise"]
    tgt.append("une chaise est verte")
    assert dice_dictionary(src, tgt) == {"green": "verte", "chair": "chaise"}  # 3+ pairs each
    assert dice_dictionary(src, tgt, min_pairs=4) == {"green": "verte"}
    assert dice_dictionary(src, tgt, wanted={"chair"}) == {"chair": "chaise"}
    src, tgt = ["linux rocks"] * 3 + ["linux"], ["linux roule"] * 3 + ["linux"]
    assert training_dictionary(src, tgt) == [("rocks", "roule")]  # "linux" stays the same


def test_a_dictionary_file_is_read_and_a_bad_row_or_file_is_one_clear_error(tmp_path):
    good = tmp_path / "terms.tsv"
    good.write_text("user name\tidentifiant\n\nbutton\tbouton\n", encoding="utf-8")
    assert read_term_dictionary(good) == [("user name", "identifiant"), ("button", "bouton")]
    bad = tmp_path / "bad.tsv"
    bad.write_text("button\tbouton\nwindow fenêtre\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"bad.tsv:2: a term dictionary row is `source<TAB>target`"):
        read_term_dictionary(bad)
    with pytest.raises(UserError, match="data.augment.term_dictionary: cannot read"):
        read_term_dictionary(tmp_path / "missing.tsv")


@pytest.mark.parametrize(
    "augment, message",
    [
        ({"terms": 1.5}, "data.augment.terms: Input should be less than or equal to 1"),
        ({"term": 0.1}, "data.augment.term: unknown key"),
    ],
)
def test_a_bad_terms_setting_is_one_config_error(tmp_path, augment, message):
    config = write_tiny_config(tmp_path, [("a", "b")], data={"augment": augment})
    with pytest.raises(ConfigError, match=message):
        load_config(config)


def test_terms_are_off_by_default_and_then_the_tokenizer_has_no_markers(tmp_path):
    cfg = load_config(write_tiny_config(tmp_path, [("a", "b")]))
    assert cfg.data.augment.terms == 0 and not cfg.data.augment.active()
    assert not set(TERM_SYMBOLS) & set(tokenizer_symbols(cfg.data))
    assert AugmentConfig(term_dictionary="x.tsv").active() is False  # a file alone is not on


def _feed(folder, pairs, augment, reuse_tokenizer=False):
    config = write_tiny_config(
        folder, pairs, data={"augment": augment}, train={"max_tokens": 300, "max_epochs": 1}
    )
    cfg = load_config(config)
    data = prepare_data(cfg, reuse_tokenizer)
    info = SimpleNamespace(cfg=cfg, data=data, device=torch.device("cpu"), info=Dist())
    return UpdateFeed(info), data.tokenizer


def _rows(feed):
    out = []
    for micro, _ in feed.updates(TrainState()):
        for b in micro:
            out += [(s[m].tolist(), t.tolist()) for s, m, t in zip(b.src, b.src_mask, b.tgt_out)]
    return out


def test_trained_with_terms_the_markers_are_whole_pieces_in_sources_and_never_in_targets(
    tmp_path, demo_pairs
):
    feed, tok = _feed(tmp_path, demo_pairs[:200], {"terms": 1.0})
    assert (tmp_path / "run" / TERM_DICTIONARY_FILE).read_text(encoding="utf-8").strip()
    rows = _rows(feed)
    annotated = 0
    for src, tgt in rows:
        pieces = tok.src_pieces(src)
        assert not set(TERM_SYMBOLS) & set(tok.tgt_pieces(tgt))
        if "<t>" in pieces:
            annotated += 1
            assert pieces.count("<t>") == pieces.count("</t>")
    assert annotated > 0.5 * len(rows)
    again, _ = _feed(tmp_path, demo_pairs[:200], {"terms": 1.0})
    assert _rows(again) == rows  # the same seed: the same annotations


def _texts(feed, tok):
    rows = _rows(feed)
    return ["".join(tok.src_pieces(src)).replace("▁", " ") for src, _ in rows]


def test_terms_leave_the_other_modifiers_draws_as_they_were(tmp_path, demo_pairs):
    never = tmp_path / "never.tsv"
    never.write_text("zebra crossing\tpassage piéton\n", encoding="utf-8")
    others = {"uppercase": 0.3, "typos": 0.3, "remove_end_punct": 0.3}
    terms = {**others, "terms": 1.0, "term_dictionary": str(never)}
    with_terms = _texts(*_feed(tmp_path, demo_pairs[:200], terms))
    # The same tokenizer (the one with the markers), so that the batches are the same.
    alone = _texts(*_feed(tmp_path, demo_pairs[:200], others, reuse_tokenizer=True))
    assert with_terms == alone
