"""`score_pairs` and `seq2seq score`: a given translation's log-probability, force-decoded.

What search finds, scored here, gets the search's own log-probability back, on a run trained
here, an imported Marian run and imported M2M100 and NLLB runs (whose targets start with a
forced language token, neither scored nor counted): as text wherever the tokenizer cuts the
output back into the searched pieces (the trained run's words do; a random imported model's
babble mostly does not), as ids always; and any text scores as search's own cached decoder
steps score it.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import torch

from seq2seq.data.batching import pad, padding_mask
from seq2seq.decode.score import score_files, score_pairs, target_log_probs
from seq2seq.decode.segments import flatten
from seq2seq.decode.step import next_token_scores, start
from seq2seq.decode.translator import Translator, load_translator
from seq2seq.errors import UserError
from tests.factories import untrained_run
from tests.hf_models import LAYOUTS, bpe_model, save_m2m100, save_marian
from tests.runs import cli, train_from, write_tiny_config

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, demo_pairs) -> Path:
    """A run trained long enough (400 updates, ~10 s) to write words in order."""
    folder = tmp_path_factory.mktemp("score-trained")
    train = {"max_steps": 400, "lr": 3e-3, "warmup_steps": 10, "save_every": 1000}
    return train_from(write_tiny_config(folder, demo_pairs[:600], train=train))


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory, demo_pairs) -> Path:
    return bpe_model(tmp_path_factory.mktemp("score-spm"), demo_pairs[:600])


@pytest.fixture(scope="module", params=["own", "marian", "m2m100", "nllb"])
def any_run(request, tmp_path_factory, trained_run, sentencepiece_model) -> tuple[str, Path]:
    """(kind, run directory): trained here, or imported from a tiny random HF model."""
    kind = request.param
    if kind == "own":
        return kind, trained_run
    folder = tmp_path_factory.mktemp(f"score-{kind}")
    if kind == "marian":
        tokenizer = request.getfixturevalue("marian_tokenizer")
        save_marian(folder / "hf", tokenizer, LAYOUTS["tied-swish-bias-safetensors"])
    else:
        save_m2m100(folder / "hf", kind, sentencepiece_model)
    cli("--quiet", "import", "hf", folder / "hf", folder / "run")
    return kind, folder / "run"


def _searched(translator: Translator, lines: list[str], beam: int, cap: int = 24):
    """The best hypothesis of each line, decoded whole with `beam` and at most `cap` tokens,
    and the padded source batch."""
    options = {"beam_size": beam, "split_sentences": False, "max_len_a": 0.0, "max_len_b": cap}
    options = translator.options.model_copy(update=options)
    segments = flatten(translator.prepare(lines, options))
    best = [hyps[0] for hyps in translator.search(segments, options=options)]
    return best, pad([s.ids for s in segments], pad_id=translator.tokenizer.ids.pad)


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 4])
def test_search_outputs_rescored_give_the_searchs_own_log_prob(any_run, demo_pairs, beam):
    kind, run = any_run
    translator, _ = load_translator(run, device="cpu")
    forced = kind in ("m2m100", "nllb")
    lines = [a for a, _ in demo_pairs[1000:1030]]
    best, src = _searched(translator, lines, beam)
    texts = translator.tokenizer.decode_tgt([h.tokens for h in best])
    again = translator.tokenizer.encode_tgt(texts, translator.tgt_lang)
    # Text that the tokenizer cuts back into the searched pieces is the searched output itself.
    same = [i for i, h in enumerate(best) if again[i] == h.tokens]
    scores = dict(
        zip(same, score_pairs(translator, [lines[i] for i in same], [texts[i] for i in same]))
    )
    # A random imported model babbles pieces its tokenizer would cut otherwise; the run trained
    # here writes words.
    if kind == "own":
        assert len(same) >= len(lines) // 2, f"{len(same)} outputs survive the round trip"
    for i in same:
        total, count = scores[i]
        assert abs(total - best[i].log_prob) < TOLERANCE, (kind, texts[i], total, best[i].log_prob)
        assert count == len(best[i].tokens) + 1 - forced
    # Every output, by its ids: the teacher-forced pass is the search's arithmetic.
    special = translator.tokenizer.ids
    with torch.inference_mode():
        totals = target_log_probs(translator.model, src, [h.tokens for h in best], special, forced)
    assert max(abs(t - h.log_prob) for t, h in zip(totals, best)) < TOLERANCE


def _stepwise(translator: Translator, source: str, target: list[int], forced: bool) -> float:
    """A target's log-probability as search computes it: one cached decoder step a token, each
    scored by `next_token_scores`, a forced first token at 0."""
    model, special = translator.model, translator.tokenizer.ids
    src = torch.tensor(translator.tokenizer.encode_src([source], *translator.languages(None, None)))
    cache, _, _ = start(model, src, padding_mask(src, special.pad), 0.0, 1)
    never = torch.tensor(special.never_generated)
    ids, total = torch.tensor([special.start]), 0.0
    with torch.inference_mode():
        for t, token in enumerate([*target, special.eos]):
            logits, norm, _ = next_token_scores(model, ids, cache, never)
            total += 0.0 if forced and t == 0 else (logits[0, token] - norm[0]).item()
            ids = torch.tensor([token])
    return total


@pytest.mark.slow
def test_references_score_as_search_would_step_by_step(any_run, demo_pairs):
    kind, run = any_run
    translator, _ = load_translator(run, device="cpu")
    forced = kind in ("m2m100", "nllb")
    pairs = demo_pairs[1000:1010]
    sources, targets = [a for a, _ in pairs], [b for _, b in pairs]
    ids = translator.tokenizer.encode_tgt(targets, translator.tgt_lang)
    for (total, count), source, target in zip(
        score_pairs(translator, sources, targets), sources, ids
    ):
        assert total == pytest.approx(_stepwise(translator, source, target, forced), abs=TOLERANCE)
        assert count == len(target) + 1 - forced


@pytest.mark.slow
def test_batching_and_order_do_not_change_scores(any_run, demo_pairs):
    _, run = any_run
    translator, _ = load_translator(run, device="cpu")
    pairs = demo_pairs[1000:1040]
    sources, targets = [a for a, _ in pairs], [b for _, b in pairs]
    whole = score_pairs(translator, sources, targets)
    for options in ({"batch_size": 1}, {"batch_size": 7}, {"max_tokens": 60}):
        other = translator.options.model_copy(update=options)
        for got, want in zip(score_pairs(translator, sources, targets, options=other), whole):
            assert got[1] == want[1] and got[0] == pytest.approx(want[0], abs=TOLERANCE)
    backwards = score_pairs(translator, sources[::-1], targets[::-1])[::-1]
    assert [c for _, c in backwards] == [c for _, c in whole]
    assert [t for t, _ in backwards] == pytest.approx([t for t, _ in whole], abs=TOLERANCE)


@pytest.mark.slow
def test_a_reference_scores_higher_than_its_words_shuffled(trained_run, demo_pairs):
    translator, _ = load_translator(trained_run, device="cpu")
    rng = random.Random(0)
    pairs = [(a, b) for a, b in demo_pairs[1000:1100] if len(b.split()) > 2]
    shuffled = []
    for _, b in pairs:
        words = b.split()
        while " ".join(words) == b:
            rng.shuffle(words)
        shuffled.append(" ".join(words))
    sources = [a for a, _ in pairs]
    right = score_pairs(translator, sources, [b for _, b in pairs])
    wrong = score_pairs(translator, sources, shuffled)
    better = sum(r[0] / r[1] > w[0] / w[1] for r, w in zip(right, wrong))
    assert better >= 0.95 * len(pairs), f"{better} of {len(pairs)}"


@pytest.mark.slow
def test_an_empty_target_scores_eos_alone(any_run):
    kind, run = any_run
    translator, _ = load_translator(run, device="cpu")
    line = "I have three cats."
    [(total, count)] = score_pairs(translator, [line], [""])
    assert count == 1
    # Greedy search capped at one scored token must end there: EOS alone (after the forced
    # language token, if any), scored by the search itself.
    forced = kind in ("m2m100", "nllb")
    [ended], _ = _searched(translator, [line], 1, cap=1 + forced)
    assert len(ended.tokens) == forced
    assert total == pytest.approx(ended.log_prob, abs=TOLERANCE)
    assert total < 0


@pytest.mark.slow
@pytest.mark.parametrize("any_run", ["m2m100", "nllb"], indirect=True)
def test_the_target_language_is_part_of_the_prefix(any_run):
    kind, run = any_run
    other = "de" if kind == "m2m100" else "deu_Latn"
    into_default, _ = load_translator(run, device="cpu")
    into_other, _ = load_translator(run, device="cpu", tgt_lang=other)
    pair = (["I have three cats."], ["J'ai trois chats."])
    [(a, n)], [(b, m)] = score_pairs(into_default, *pair), score_pairs(into_other, *pair)
    assert n == m == len(into_default.tokenizer.encode_tgt(pair[1])[0])  # pieces + EOS
    assert abs(a - b) > 1e-3


def test_a_pair_longer_than_the_models_positions_is_one_error_naming_its_line(tmp_path, demo_pairs):
    run = untrained_run(tmp_path, demo_pairs[:300])
    translator, _ = load_translator(run, device="cpu")
    long = " ".join(["three hundred and seventy-one cats"] * 40)
    with pytest.raises(UserError, match=r"line 2: the source has \d+ tokens, more than the model"):
        score_pairs(translator, ["I have cats.", long], ["J'ai des chats.", "Trois."])
    with pytest.raises(UserError, match=r"line 1 \(and 1 more\): the target has \d+ tokens"):
        score_pairs(translator, ["a", "b", "c"], [long, "", long])


@pytest.mark.slow
def test_score_command_prints_total_and_per_token_per_pair(trained_run, demo_pairs, tmp_path):
    pairs = demo_pairs[1000:1012] + [("I have three cats.", "")]
    src, tgt = tmp_path / "a.en", tmp_path / "a.fr"
    src.write_text("".join(a + "\n" for a, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(b + "\n" for _, b in pairs), encoding="utf-8")
    printed = cli("score", "--run", trained_run, "--src", src, "--tgt", tgt).stdout.splitlines()
    assert len(printed) == len(pairs)
    translator, _ = load_translator(trained_run, device="cpu")
    expected = score_pairs(translator, [a for a, _ in pairs], [b for _, b in pairs])
    for line, (total, count) in zip(printed, expected):
        assert re.fullmatch(r"-?\d+\.\d{4}\t-?\d+\.\d{4}", line), line
        shown_total, per_token = map(float, line.split("\t"))
        assert shown_total == pytest.approx(total, abs=1e-4)
        assert per_token == pytest.approx(total / count, abs=1e-4)
    out = tmp_path / "scores.txt"
    cli("score", "--run", trained_run, "--src", src, "--tgt", tgt, "--batch-size", "3", "-o", out)
    written = [
        float(x) for line in out.read_text(encoding="utf-8").splitlines() for x in line.split()
    ]
    # Other batches pad differently: the same scores to float32's last digits.
    assert written == pytest.approx([float(x) for line in printed for x in line.split()], abs=2e-4)


@pytest.fixture
def small_run(tmp_path, demo_pairs) -> Path:
    return untrained_run(tmp_path, demo_pairs[:300])


def _bad(run: Path, src: Path, tgt: Path) -> str:
    result = cli("score", "--run", run, "--src", src, "--tgt", tgt, code=1)
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    return result.output


def test_files_of_different_lengths_are_one_error_naming_both_counts(small_run, tmp_path):
    src, tgt = tmp_path / "a.en", tmp_path / "a.fr"
    src.write_text("one\ntwo\nthree\n", encoding="utf-8")
    tgt.write_text("un\ndeux\n", encoding="utf-8")
    said = _bad(small_run, src, tgt)
    assert f"{src} has 3 lines" in said and f"{tgt} has 2" in said


def test_invalid_utf8_is_one_error_naming_file_and_line(small_run, tmp_path):
    src, tgt = tmp_path / "a.en", tmp_path / "a.fr"
    src.write_text("one\ntwo\n", encoding="utf-8")
    tgt.write_bytes(b"un\nd\xffeux\n")
    assert f"{tgt}, line 2: invalid UTF-8" in _bad(small_run, src, tgt)


def test_a_missing_file_or_run_is_one_error(small_run, tmp_path):
    src = tmp_path / "a.en"
    src.write_text("one\n", encoding="utf-8")
    assert f"file not found: {tmp_path / 'nope.fr'}" in _bad(small_run, src, tmp_path / "nope.fr")
    assert "run directory not found" in _bad(tmp_path / "no-run", src, src)


def test_a_long_pair_past_the_first_chunk_is_named_by_its_line_in_the_files(small_run, tmp_path):
    translator, _ = load_translator(small_run, device="cpu")
    long = " ".join(["three hundred and seventy-one cats"] * 40)
    src, tgt = tmp_path / "a.en", tmp_path / "a.fr"
    src.write_text("one\ntwo\nthree\nfour\nfive\nsix\n", encoding="utf-8")
    tgt.write_text(f"un\ndeux\ntrois\nquatre\n{long}\nsix\n", encoding="utf-8")
    out = tmp_path / "scores.txt"
    with pytest.raises(UserError, match=r"^line 5: the target has \d+ tokens"):
        score_files(translator, src, tgt, out, chunk_pairs=2)
    assert not out.exists()
