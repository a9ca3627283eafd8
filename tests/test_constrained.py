"""Lexically constrained beam search: every given target term appears exactly once."""

from __future__ import annotations

import pytest
import torch

from seq2seq.config import DecodeConfig, TokenizerConfig
from seq2seq.data.batching import no_peek_mask, pad, padding_mask
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, train_tokenizer
from seq2seq.decode.constrained import ConstrainedBeam, Spellings, _allocation
from seq2seq.decode.glossary import term_use
from seq2seq.decode.search import beam_search, constrained_beam_search, decode, length_penalty
from seq2seq.decode.spelling import cut_words, inner_ends
from seq2seq.decode.step import Settings
from seq2seq.decode.translator import Translator
from tests.constrained_cases import (
    ENGLISH,
    FRENCH,
    ScriptedModel,
    count_term,
    random_model,
    random_sources,
)


def _random_terms(seed: int, batch: int, per_sentence: int, vocab: int = 40):
    g = torch.Generator().manual_seed(100 + seed)
    out = []
    for _ in range(batch):
        terms: list[tuple[int, ...]] = []
        while len(terms) < per_sentence:
            n = int(torch.randint(1, 4, (1,), generator=g))
            term = tuple(torch.randint(4, vocab, (n,), generator=g).tolist())
            if not any(count_term(list(u), term) or count_term(list(term), u) for u in terms):
                terms.append(term)  # none inside another: each can then appear exactly once
        out.append(tuple(terms))
    return out


def _search(model, src, constraints, glue=None, **kw):
    settings = Settings(**{"beam": 4, "max_len_a": 1.5, "max_len_b": 6, **kw})
    return constrained_beam_search(model, src, padding_mask(src), constraints, settings, glue=glue)


@torch.no_grad()
def _sequence_log_prob(model, src_row, tokens) -> float:
    src = src_row[src_row != 0].unsqueeze(0)
    tgt_in = torch.tensor([[BOS_ID] + tokens])
    logits = model(src, tgt_in, padding_mask(src), no_peek_mask(tgt_in))[0]
    logp = torch.log_softmax(logits.float(), dim=-1)
    return float(sum(logp[i, t] for i, t in enumerate(tokens + [EOS_ID])))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("per_sentence", [1, 2, 4])
def test_every_constraint_appears_exactly_once_in_beam_output(seed, per_sentence):
    model, src = random_model(seed), random_sources(seed, batch=4)
    constraints = _random_terms(seed, 4, per_sentence)
    found = _search(model, src, constraints)
    for terms, (best,) in zip(constraints, found):
        assert best.unmet == ()
        for term in terms:
            assert count_term(best.tokens, term) == 1, (term, best.tokens)


@pytest.mark.parametrize("seed", range(4))
def test_scores_are_the_models_log_probability_of_the_output(seed):
    model, src = random_model(seed), random_sources(seed)
    found = _search(model, src, _random_terms(seed, 3, 2), alpha=0.6)
    for row, (best,) in zip(src, found):
        expected = _sequence_log_prob(model, row, best.tokens)
        assert best.log_prob == pytest.approx(expected, abs=1e-4)
        assert best.score == pytest.approx(
            best.log_prob / length_penalty(len(best.tokens) + 1, 0.6), abs=1e-4
        )


def test_terms_sharing_a_prefix_both_appear():
    model, src = random_model(1), random_sources(1, batch=2)
    constraints = [((7, 8, 9), (7, 8, 10)), ((5, 6), (5, 11, 12))]
    for terms, (best,) in zip(constraints, _search(model, src, constraints)):
        assert best.unmet == ()
        assert all(count_term(best.tokens, t) == 1 for t in terms)


def test_a_term_inside_another_term_is_kept_by_the_longer_one():
    model, src = random_model(0), random_sources(0, batch=1)
    constraints = [((7,), (37, 37, 7), (19,))]
    (best,) = _search(model, src, constraints)[0]
    assert best.unmet == ()
    assert count_term(best.tokens, (37, 37, 7)) == 1 and count_term(best.tokens, (19,)) == 1
    assert count_term(best.tokens, (7,)) >= 1


def test_a_term_the_model_produces_anyway_is_counted_and_kept_once():
    model, src = random_model(2), random_sources(2, batch=3)
    plain = beam_search(model, src, padding_mask(src), Settings(beam=4, max_len_a=1.5, max_len_b=6))
    constraints = []
    for (free,) in plain:  # a span of the free output it holds once
        spans = [tuple(free.tokens[i : i + 2]) for i in range(len(free.tokens) - 1)]
        once = [t for t in spans if count_term(free.tokens, t) == 1] or [tuple(free.tokens[-1:])]
        constraints.append((once[0],))
    found = _search(model, src, constraints)
    for (best,), (term,) in zip(found, constraints):
        assert best.unmet == ()
        assert count_term(best.tokens, term) == 1


def test_a_term_that_cannot_fit_before_the_length_cap_is_reported_unmet():
    model = random_model(3, max_positions=8)  # outputs of at most 7 tokens, EOS included
    src = random_sources(3, batch=2)
    long_term = tuple(range(4, 14))  # 10 tokens
    found = _search(model, src, [(long_term,), ((5,),)])
    assert found[0][0].unmet == (0,)
    assert len(found[0][0].tokens) < 8
    assert found[1][0].unmet == () and count_term(found[1][0].tokens, (5,)) == 1


def test_eos_waits_until_every_constraint_is_met():
    model, src = random_model(4), random_sources(4, batch=2)
    constraints = [((20, 21, 22), (30,), (33, 34)), ((25,),)]
    for (best,), terms in zip(_search(model, src, constraints, max_len_b=20), constraints):
        assert best.unmet == ()
        last_term_end = max(
            i + len(t)
            for t in terms
            for i in range(len(best.tokens))
            if tuple(best.tokens[i : i + len(t)]) == t
        )
        assert last_term_end <= len(best.tokens)


def test_sentences_without_constraints_decode_as_plain_beam_search():
    model, src = random_model(5), random_sources(5)
    options = DecodeConfig(beam_size=4, max_len_a=1.5, max_len_b=6)
    plain = decode(model, src, options)
    none = decode(model, src, options, constraints=[(), (), ()])
    assert [[(h.tokens, h.score) for h in hyps] for hyps in none] == [
        [(h.tokens, h.score) for h in hyps] for hyps in plain
    ]


def test_a_batch_mixing_constrained_and_free_sentences_keeps_each_sentences_terms():
    model, src = random_model(6), random_sources(6)
    options = DecodeConfig(beam_size=4, max_len_a=1.5, max_len_b=6)
    found = decode(model, src, options, constraints=[((9, 10),), (), ((11,), (12, 13))])
    assert count_term(found[0][0].tokens, (9, 10)) == 1
    assert (
        count_term(found[2][0].tokens, (11,)) == 1 and count_term(found[2][0].tokens, (12, 13)) == 1
    )
    plain = decode(model, src, options)  # a free sentence decodes as the plain beam would
    assert found[1][0].tokens == plain[1][0].tokens
    assert found[1][0].score == pytest.approx(plain[1][0].score)


def test_nbest_constrained_hypotheses_are_distinct_and_rank_by_fewest_unmet_then_score():
    model, src = random_model(7), random_sources(7)
    found = _search(model, src, [((9,),), ((10, 11),), ((12,),)], nbest=3)
    for hyps, term in zip(found, [(9,), (10, 11), (12,)]):
        assert len({tuple(h.tokens) for h in hyps}) == len(hyps) == 3
        ranks = [(len(h.unmet), -h.score) for h in hyps]
        assert ranks == sorted(ranks)
        assert hyps[0].unmet == () and count_term(hyps[0].tokens, term) == 1
        assert all(count_term(h.tokens, term) == 1 for h in hyps if not h.unmet)


def test_the_token_after_a_term_is_never_one_that_glues_onto_it():
    model, src = random_model(9), random_sources(9, batch=4)
    glue = torch.zeros(40, dtype=torch.bool)
    glue[20:40] = True  # say ids 20-39 continue the word before them
    constraints = [((5,),), ((6, 7),), ((8,), (9, 10)), ((11,),)]
    found = _search(model, src, constraints, glue=glue)
    for terms, (best,) in zip(constraints, found):
        assert best.unmet == ()
        for term in terms:
            (at,) = [
                i for i in range(len(best.tokens)) if tuple(best.tokens[i : i + len(term)]) == term
            ]
            after = best.tokens[at + len(term) : at + len(term) + 1]
            assert not after or after[0] < 20


def test_greedy_search_with_constraints_says_a_beam_of_two_is_needed():
    model, src = random_model(8), random_sources(8)
    with pytest.raises(ValueError, match="beam size of at least 2"):
        decode(model, src, DecodeConfig(beam_size=1), constraints=[((9,),), (), ()])


class _BigramModel:
    """A scripted decoder: the next token's log-probabilities depend only on the last token
    (`table[last] = {token: probability}`, the rest shared evenly), whatever the source."""

    class cfg:  # noqa: N801 - the attribute the search reads
        max_positions = 64

    def __init__(self, table: dict[int, dict[int, float]], vocab: int = 12):
        self.vocab = vocab
        rows = []
        for last in range(vocab):
            wanted = table.get(last, {})
            rest = (1.0 - sum(wanted.values())) / (vocab - len(wanted))
            rows.append([wanted.get(t, rest) for t in range(vocab)])
        self.logits = torch.tensor(rows).log()

    def encode(self, src, src_mask):
        return src

    def start_decoding(self, memory, src_mask, beam, capacity=None):
        class Cache:
            compiled = None  # no compiled step: search scores on torch

            def reorder(self, rows):
                pass

            def keep(self, sentences):
                pass

        return Cache()

    def decode_step(self, ids, cache):
        return self.logits[ids]


def test_constrained_search_stops_only_when_no_open_hypothesis_can_beat_the_kth_finished():
    # Dynamic beam allocation keeps hypotheses that forced a term early; they finish first, so
    # stopping at k finished ones dropped the natural translation still under way.
    settings = Settings(beam=2, alpha=1.0)  # the default ids: EOS is EOS_ID
    strategy = ConstrainedBeam([((5,),)], settings, glue=None)
    cap = torch.tensor([10])
    best_possible = -1.2 / length_penalty(10, 1.0, "gnmt")  # log-probabilities only fall
    open_scores = torch.tensor([[-1.2, -3.0]])
    kth = torch.tensor([best_possible - 0.01])
    assert not strategy.done(kth, open_scores, cap, length=4).item()
    assert strategy.done(torch.tensor([best_possible]), open_scores, cap, length=4).item()


def test_a_term_given_twice_appears_twice_and_once_given_once():
    model = _BigramModel({BOS_ID: {4: 0.9}, 4: {8: 0.5, EOS_ID: 0.4}, 8: {EOS_ID: 0.9}})
    src = pad([[4, 5, EOS_ID], [4, 5, EOS_ID]])
    options = DecodeConfig(beam_size=4, length_penalty=1.0, max_len_a=0.0, max_len_b=12)
    once, twice = decode(model, src, options, constraints=[((9,),), ((9,), (9,))])
    assert count_term(once[0].tokens, (9,)) == 1 and once[0].unmet == ()
    assert count_term(twice[0].tokens, (9,)) == 2 and twice[0].unmet == ()


def test_the_best_candidates_by_score_keep_their_places_when_banks_outnumber_the_beam():
    # A four-piece term makes five banks: round robin over banks alone puts the model's own best
    # continuation (bank 0) fifth, outside a beam of four, and the plain translation is lost.
    total = torch.tensor([[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]])
    bank = torch.tensor([[0, 1, 2, 3, 4, 0]])
    assert _allocation(total, bank, 5)[0, :4].tolist() == [4, 3, 2, 1]
    assert _allocation(total, bank, 5, free=2)[0].tolist() == [0, 1, 4, 3, 2, 5]


@pytest.fixture(scope="module")
def french_tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hotel")
    return train_tokenizer(TokenizerConfig(vocab_size=120), ENGLISH * 20, FRENCH * 20, folder)


@pytest.mark.parametrize(
    ("output", "term"),
    [("Je dors à l'hôtel.", "hôtel"), ("Le bouton-poussoir est rouge.", "poussoir")],
)
def test_a_term_written_glued_after_an_apostrophe_or_hyphen_is_not_forced_again(
    french_tokenizer, output, term
):
    # Alone, "hôtel" is "▁", "hôtel"; after "l'" the tokenizer writes "hôtel" without "▁": the
    # search must see the term there, as term use does, and not append it once more.
    tokenizer = french_tokenizer
    script = tokenizer.encode_tgt([output])[0]
    (alone,) = tokenizer.encode_tgt([term])
    assert not count_term(script, tuple(alone))  # the output holds the term in another segmentation
    model = ScriptedModel(script, tokenizer.tgt_vocab_size)
    options = DecodeConfig(beam_size=4, max_len_a=0.0, max_len_b=30, split_sentences=False)
    translator = Translator(model, tokenizer, options, torch.device("cpu"))
    (plain,) = translator.translate(["x"])
    (kept,) = translator.translate(["x"], [[term]])
    assert plain == output
    assert kept == output
    assert term_use([kept], [[term]]) == {"terms": 1, "used": 1, "rate": 1.0}


def test_term_use_counts_a_term_given_twice_only_where_it_appears_twice():
    assert term_use(["cent vingt et un"], [["cent", "cent"]])["used"] == 1
    assert term_use(["cent vingt et un mille deux cent"], [["cent", "cent"]])["used"] == 2
    assert term_use(["l'hôtel et les hôtels"], [["hôtel", "hôtel"]])["used"] == 1


def _spellings(vocab: int = 12, **fields) -> Spellings:
    return Spellings({}, torch.ones(vocab, dtype=torch.bool), **fields)


def test_a_term_started_in_the_middle_of_a_word_is_finished_not_left_as_a_fragment():
    # The model likes "7 10" ("bouton-les"); 7 8 9 is the term ("bouton-poussoir"), and after
    # its first token the word is cut: leaving it there would leave a fragment.
    model = _BigramModel(
        {BOS_ID: {4: 0.9}, 4: {7: 0.8}, 7: {10: 0.9}, 10: {EOS_ID: 0.9}, 9: {EOS_ID: 0.9}}
    )
    src = pad([[4, 5, EOS_ID]])
    options = DecodeConfig(beam_size=4, length_penalty=1.0, max_len_a=0.0, max_len_b=12)
    term = (7, 8, 9)
    loose = decode(model, src, options, constraints=[(term,)], spellings=_spellings())
    assert 10 in loose[0][0].tokens  # without the rule: "7 10", and the term forced elsewhere
    stay = {term: (False, True, True)}
    (best,) = decode(model, src, options, constraints=[(term,)], spellings=_spellings(stay=stay))[0]
    assert best.unmet == ()
    first = next(i for i in range(len(best.tokens)) if tuple(best.tokens[i : i + 3]) == term)
    assert all(best.tokens[i + 1] == 8 for i in range(first) if best.tokens[i] == 7)


def test_a_term_is_written_before_the_sentences_full_stop_not_after_it():
    # The model ends "4 ." at once; the term 9 was appended after the full stop (5).
    table = {BOS_ID: {4: 0.9}, 4: {5: 0.97}, 5: {EOS_ID: 0.9, 9: 0.08}, 9: {EOS_ID: 0.9}}
    model = _BigramModel(table)
    src = pad([[4, 6, EOS_ID]])
    options = DecodeConfig(beam_size=4, length_penalty=1.0, max_len_a=0.0, max_len_b=12)
    final = torch.zeros(12, dtype=torch.bool)
    final[5] = True
    (loose,) = decode(model, src, options, constraints=[((9,),)], spellings=_spellings())[0]
    assert loose.tokens.index(5) < loose.tokens.index(9)
    kept = _spellings(final=final, ends=(0,))
    (best,) = decode(model, src, options, constraints=[((9,),)], spellings=kept)[0]
    assert best.unmet == () and 9 in best.tokens
    assert 5 not in best.tokens[: best.tokens.index(9)]


def test_a_source_of_two_sentences_lets_the_first_end_before_the_term(french_tokenizer):
    ids = french_tokenizer.encode_src(["Il dort. Le jardin est beau."])[0]
    assert inner_ends(french_tokenizer, ids) == 1
    assert inner_ends(french_tokenizer, french_tokenizer.encode_src(["Il dort."])[0]) == 0


def test_a_term_cut_after_a_hyphen_or_inside_a_word_must_go_on(french_tokenizer):
    (ids,) = french_tokenizer.encode_tgt(["bouton-poussoir"])
    pieces = french_tokenizer.tgt_pieces(ids)
    flags = cut_words(french_tokenizer, tuple(ids))
    assert pieces[:2] == ["▁bouton", "-"]
    # Leaving after "bouton" leaves a word; after "bouton-" or inside "poussoir", a fragment.
    assert flags == (False, False) + (True,) * (len(ids) - 2)
