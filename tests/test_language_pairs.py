"""One model for several directions (`data.pairs`): language tags, temperature sampling."""

from __future__ import annotations

import contextlib
import types

import numpy as np
import pytest
import torch
import yaml
from datasets import Dataset

from seq2seq.config import load_config, load_run_config
from seq2seq.data.batching import epoch_batches, sampling_probabilities
from seq2seq.data.corpus import Part, prepare_data
from seq2seq.data.layouts import load_run_tokenizer
from seq2seq.decode.translator import load_translator
from seq2seq.errors import UserError
from seq2seq.run.runlog import MetricsLog
from seq2seq.train.state import TrainState
from seq2seq.train.validation import Validator, bleu_rows
from tests.factories import tiny_model, untrained_pairs_run
from tests.runs import cli, write_pairs_config


@pytest.fixture(scope="module", params=["source_tag", "forced_first"])
def pairs_run(request, tmp_path_factory, demo_pairs):
    """(how the target language is given, a run trained on en→fr and fr→en)."""
    folder = tmp_path_factory.mktemp(request.param)
    cli("--quiet", "train", "-c", write_pairs_config(folder, demo_pairs, request.param))
    return request.param, folder / "run"


@pytest.fixture(scope="module", params=["source_tag", "forced_first"])
def untrained_pairs(request, tmp_path_factory, demo_pairs):
    """(how the target language is given, an untrained run of en→fr and fr→en)."""
    folder = tmp_path_factory.mktemp(f"untrained-{request.param}")
    return request.param, untrained_pairs_run(folder, demo_pairs, request.param)


def test_language_tags_are_single_pieces_with_the_ids_the_config_names(untrained_pairs):
    how, run = untrained_pairs
    cfg = load_run_config(run)
    assert cfg.tokenizer.languages == {"en": 4, "fr": 5}  # right after pad, bos, eos, unk
    tr, _ = load_translator(run, device="cpu")
    sp = tr.tokenizer.src
    assert [sp.id_to_piece(i) for i in (4, 5)] == [">>en<<", ">>fr<<"]
    # The tag in text is one token, never cut into pieces, and never printed.
    ids = tr.tokenizer.encode_src(["hello >>fr<< world"], "en", "fr")[0]
    assert ids.count(5) == (2 if how == "source_tag" else 1)
    assert ">>" not in tr.tokenizer.decode_tgt([ids])[0]


def test_a_tagged_tokenizer_checks_languages_and_forces_the_first_token_when_told(
    untrained_pairs,
):
    how, run = untrained_pairs
    cfg = load_run_config(run)
    tok = load_run_tokenizer(run, cfg.tokenizer)
    assert tok.languages == {"en": 4, "fr": 5}
    assert tok.check_languages(("fr", "en"), ("en", "fr")) == ("fr", "en")
    assert tok.check_languages((None, None), ("en", "fr")) == ("en", "fr")
    with pytest.raises(UserError, match="'de' is not one of the model's languages: en, fr"):
        tok.check_languages((None, "de"), ("en", "fr"))
    assert tok.first_target_token("en") == (4 if how == "forced_first" else None)
    assert (tok.encode_tgt(["le chat"], "en")[0][0] == 4) == (how == "forced_first")


def test_each_direction_is_trained_with_its_own_tag(untrained_pairs):
    how, run = untrained_pairs
    data = prepare_data(load_run_config(run), reuse_tokenizer=True)
    assert [(p.src_lang, p.tgt_lang) for p in data.train_parts] == [("en", "fr"), ("fr", "en")]
    start = 0
    for part, tag in zip(data.train_parts, (5, 4)):  # >>fr<< for en→fr, >>en<< for fr→en
        rows = data.train.select(range(start, start + part.rows))
        side = rows["src_ids"] if how == "source_tag" else rows["tgt_ids"]
        assert {ids[0] for ids in side} == {tag}
        other = rows["tgt_ids"] if how == "source_tag" else rows["src_ids"]
        assert not any(4 in ids or 5 in ids for ids in other)
        start += part.rows


def test_translate_picks_the_direction_and_an_unknown_language_is_one_error(
    untrained_pairs, tmp_path
):
    how, run = untrained_pairs
    tr, _ = load_translator(run, device="cpu")
    first = tr.prepare(["the cat"], tgt_lang="fr")[0]
    back = tr.prepare(["le chat"], src_lang="fr", tgt_lang="en")[0]
    if how == "source_tag":
        assert first.segments[0][0] == 5 and back.segments[0][0] == 4
    else:
        assert (first.first, back.first) == (5, 4)
    (tmp_path / "in.txt").write_text("the cat\n", "utf-8")
    base = ["translate", "--run", run, "--input", tmp_path / "in.txt", "--device", "cpu"]
    cli("--quiet", *base, "--src-lang", "fr", "--tgt-lang", "en", "--output", tmp_path / "out")
    assert len((tmp_path / "out").read_text("utf-8").splitlines()) == 1
    result = cli("--quiet", *base, "--tgt-lang", "de", "--output", tmp_path / "bad", code=1)
    assert "'de' is not one of the model's languages: en, fr" in result.output
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_validation_bleu_shares_its_sentences_between_the_directions(pairs_run):
    _, run = pairs_run
    data = prepare_data(load_run_config(run), reuse_tokenizer=True)
    chosen = bleu_rows(data, 6)
    assert [(p.src_lang, p.tgt_lang, len(rows)) for p, rows in chosen] == [
        ("en", "fr", 3),
        ("fr", "en", 3),
    ]
    assert chosen[1][1]["src"] == data.valid.select(range(6, 9))["src"]


def test_the_final_choice_decodes_every_valid_row_of_unbalanced_directions(tmp_path):
    rows = [f"sentence {i}" for i in range(10)]  # en→fr rows 0-7, fr→en rows 8-9
    data = types.SimpleNamespace(
        valid=Dataset.from_dict({"src": rows, "tgt": rows}),
        valid_parts=[Part("en", "fr", 8), Part("fr", "en", 2)],
    )
    decoded = []

    def translate(texts, *, src_lang, tgt_lang):
        decoded.extend((src_lang, tgt_lang, t) for t in texts)
        return list(texts)

    validator = Validator(
        model=tiny_model(),
        data=data,
        tc=types.SimpleNamespace(averages=[], final_choice="beam"),
        device=torch.device("cpu"),
        autocast=contextlib.nullcontext,
        translate=translate,
        run_dir=tmp_path,
        metrics=MetricsLog(tmp_path, tensorboard=False),
        translate_final=translate,
    )
    validator.finish(TrainState(step=4))
    assert decoded == [("en", "fr", r) for r in rows[:8]] + [("fr", "en", r) for r in rows[8:]]


def test_temperature_one_draws_directions_in_proportion_and_higher_evens_them_out():
    assert sampling_probabilities([900, 100], 1.0) == pytest.approx([0.9, 0.1])
    # T = 5: (0.9^0.2, 0.1^0.2) normalised, the M2M100 choice.
    assert sampling_probabilities([900, 100], 5.0) == pytest.approx([0.6081, 0.3919], abs=1e-4)
    assert sampling_probabilities([900, 100], 1e6) == pytest.approx([0.5, 0.5], abs=1e-4)


def test_mixed_batches_hold_one_direction_each_and_follow_the_temperature():
    rng = np.random.default_rng(0)
    lens = rng.integers(3, 20, size=10_000).astype(np.int32)
    parts = [9_000, 1_000]
    small_share = {}
    for t in (1.0, 5.0):
        batches = epoch_batches(
            lens, lens, max_tokens=200, seed=1, epoch=0, parts=parts, temperature=t
        )
        again = epoch_batches(
            lens, lens, max_tokens=200, seed=1, epoch=0, parts=parts, temperature=t
        )
        assert all(np.array_equal(a, b) for a, b in zip(batches, again))  # resumable
        small = [bool(b.min() >= 9_000) for b in batches]
        assert all(b.max() < 9_000 or b.min() >= 9_000 for b in batches)  # one direction each
        small_share[t] = sum(small) / len(batches)
    assert small_share[1.0] == pytest.approx(0.1, abs=0.02)
    assert small_share[5.0] == pytest.approx(0.392, abs=0.03)  # the small pair upsampled


def test_one_direction_keeps_the_batches_it_always_had():
    lens = np.random.default_rng(0).integers(3, 20, size=500).astype(np.int32)
    plain = epoch_batches(lens, lens, max_tokens=100, seed=3, epoch=2)
    one = epoch_batches(lens, lens, max_tokens=100, seed=3, epoch=2, parts=[500], temperature=5.0)
    assert all(np.array_equal(a, b) for a, b in zip(plain, one)) and len(plain) == len(one)


def test_pairs_without_a_way_to_name_the_target_is_one_clear_error(tmp_path, demo_pairs):
    config = write_pairs_config(tmp_path, demo_pairs, "none")
    result = cli("train", "-c", config, code=1)
    assert "set tokenizer.target_language to source_tag" in result.output
    assert "Traceback" not in result.output


def test_pairs_that_name_no_data_are_one_clear_error_each(tmp_path, demo_pairs):
    config = write_pairs_config(tmp_path, demo_pairs, "source_tag")
    data = yaml.safe_load(config.read_text())
    data["data"]["pairs"][1]["train"]["src"] = str(tmp_path / "missing.fr")
    config.write_text(yaml.safe_dump(data))
    result = cli("train", "-c", config, code=2)
    assert "data.pairs[1].train.src: file not found" in result.output
    assert not (tmp_path / "run").exists()
    data["data"]["pairs"].append(data["data"]["pairs"][0])
    config.write_text(yaml.safe_dump(data))
    with pytest.raises(Exception, match="en-fr is listed twice"):
        load_config(config)
    del data["data"]["pairs"]
    data["data"]["pairs"] = [{"src_lang": "en", "tgt_lang": "fr"}]
    config.write_text(yaml.safe_dump(data))
    with pytest.raises(Exception, match="train"):
        load_config(config)
