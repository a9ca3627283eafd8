"""A glossary never changes a sentence whose plain beam output already holds its terms: the
plain beam runs first, and only the sentences missing a term are searched with constraints."""

from __future__ import annotations

import pytest
import torch

from seq2seq.config import DecodeConfig, TokenizerConfig
from seq2seq.data.batching import pad
from seq2seq.data.term_annotation import TERM_SYMBOLS
from seq2seq.data.tokenizer import EOS_ID, train_tokenizer
from seq2seq.decode import search
from seq2seq.decode.constrained import Spellings, holds_terms
from seq2seq.decode.glossary import make_glossary
from seq2seq.decode.search import decode
from seq2seq.decode.translator import Translator
from seq2seq.model.transformer import build_model
from tests.constrained_cases import (
    ENGLISH,
    FRENCH,
    TERM_GLOSSARY,
    TERM_LINE,
    TERM_PAIRS,
    ScriptedModel,
    count_term,
    random_model,
    random_sources,
)
from tests.factories import tiny_shape

OPTIONS = DecodeConfig(beam_size=4, max_len_a=1.5, max_len_b=6)


def _held_once(tokens: list[int]) -> tuple[int, ...]:
    """A span of two, one or three tokens the output holds once (else the whole output)."""
    for n in (2, 1, 3):
        spans = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
        once = [t for t in spans if count_term(tokens, t) == 1]
        if once:
            return once[0]
    return tuple(tokens)


def _absent(tokens: list[int]) -> tuple[int, ...]:
    """A token the output does not hold."""
    return (next(t for t in range(4, 40) if t not in tokens),)


@pytest.mark.parametrize("seed", range(4))
def test_a_glossary_leaves_a_sentence_that_already_holds_its_terms_unchanged(seed):
    model, src = random_model(seed), random_sources(seed, batch=4)
    plain = decode(model, src, OPTIONS)
    terms = [(_held_once(hyps[0].tokens),) for hyps in plain]
    found = decode(model, src, OPTIONS, constraints=terms)
    for (before,), (after,) in zip(plain, found):
        assert after.tokens == before.tokens
        assert after.score == before.score and after.log_prob == before.log_prob
        assert after.unmet == () and after.plain


def test_only_rows_missing_a_term_are_searched_with_constraints(monkeypatch):
    searched = []

    class Recording(search.ConstrainedBeam):
        def __init__(self, constraints, *args, **kw):
            searched.append(list(constraints))
            super().__init__(constraints, *args, **kw)

    monkeypatch.setattr(search, "ConstrainedBeam", Recording)
    model, src = random_model(6), random_sources(6, batch=4)
    plain = decode(model, src, OPTIONS)
    held, missing = _held_once(plain[0][0].tokens), _absent(plain[2][0].tokens)
    terms = [(held,), (), (missing,), (_held_once(plain[3][0].tokens),)]
    found = decode(model, src, OPTIONS, constraints=terms)
    assert searched == [[(missing,)]]  # one search, of the one row missing its term
    assert [hyps[0].plain for hyps in found] == [True, True, False, True]
    assert count_term(found[2][0].tokens, missing) == 1 and found[2][0].unmet == ()
    for i in (0, 1, 3):
        assert found[i][0].tokens == plain[i][0].tokens


def test_a_term_given_twice_keeps_the_plain_output_only_where_it_appears_twice():
    model, src = random_model(3), pad([[5, 6, 7, EOS_ID]])
    (plain,) = decode(model, src, OPTIONS)
    term = _held_once(plain[0].tokens)
    (once,) = decode(model, src, OPTIONS, constraints=[(term,)])
    (twice,) = decode(model, src, OPTIONS, constraints=[(term, term)])
    assert once[0].plain and once[0].tokens == plain[0].tokens
    assert not twice[0].plain and count_term(twice[0].tokens, term) == 2


def test_an_output_holds_a_term_as_the_search_counts_it():
    opens = torch.zeros(12, dtype=torch.bool)
    opens[3] = True  # say 3 is "'": a word may start right after it
    glue = torch.zeros(12, dtype=torch.bool)
    glue[9] = True  # and 9 continues the word before it ("s")
    spellings = Spellings({(4, 5): ((6,),)}, opens)  # the term 4 5 is 6 when glued on
    outputs = [[[4, 5, 7]], [[3, 6, 7]], [[8, 6, 7]], [[4, 5, 9]], [[4, 5, 4, 5]]]
    once = holds_terms(outputs, [((4, 5),)] * 5, spellings, glue)
    assert once == [True, True, False, False, False]  # twice is more than its source asks
    twice = holds_terms(outputs, [((4, 5), (4, 5))] * 5, spellings, glue)
    assert twice == [False, False, False, False, True]


def test_an_nbest_list_is_the_plain_one_only_when_each_output_holds_the_terms():
    outputs = [[[4, 5], [4, 6]], [[4, 5], [5, 4]]]
    assert holds_terms(outputs, [((4,),), ((5,),)]) == [True, True]
    assert holds_terms(outputs, [((5,),), ((4,),)]) == [False, True]


@pytest.fixture(scope="module")
def hotel_tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hotel")
    return train_tokenizer(TokenizerConfig(vocab_size=120), ENGLISH * 20, FRENCH * 20, folder)


def test_translate_keeps_the_plain_text_and_score_of_a_line_holding_its_glossary_term(
    hotel_tokenizer,
):
    # "hôtel" is held glued after "l'", as the search and term use count it.
    tokenizer, output = hotel_tokenizer, "Je dors à l'hôtel."
    model = ScriptedModel(tokenizer.encode_tgt([output])[0], tokenizer.tgt_vocab_size)
    options = DecodeConfig(beam_size=4, max_len_a=0.0, max_len_b=30, split_sentences=False)
    translator = Translator(model, tokenizer, options, torch.device("cpu"))
    line = "I sleep at the hotel."
    plain = translator.translate_nbest([line])
    hotel = make_glossary([("hotel", "hôtel")])
    glossary = Translator(model, tokenizer, options, torch.device("cpu"), glossary=hotel)
    assert glossary.translate_nbest([line]) == plain == [[(output, plain[0][0][1])]]


def test_with_term_mode_both_the_plain_pass_reads_the_annotated_source(tmp_path, monkeypatch):
    src, tgt = [a for a, _ in TERM_PAIRS], [b for _, b in TERM_PAIRS]
    tokenizer = train_tokenizer(
        TokenizerConfig(vocab_size=150), src, tgt, tmp_path, symbols=TERM_SYMBOLS
    )
    torch.manual_seed(0)
    model = build_model(tiny_shape(encoder_layers=1, decoder_layers=1), tokenizer).eval()
    options = DecodeConfig(term_mode="annotate", split_sentences=False)
    translator = Translator(model, tokenizer, options, torch.device("cpu"), glossary=TERM_GLOSSARY)
    annotated = translator.translate_nbest([TERM_LINE])
    # Say every plain output holds its terms: "both" then answers with its plain pass.
    monkeypatch.setattr(search, "holds_terms", lambda outputs, *_: [True] * len(outputs))
    both = options.model_copy(update={"term_mode": "both"})
    assert translator.translate_nbest([TERM_LINE], options=both) == annotated
