"""Training data as weighted parts (data.train as a list): parts are drawn by weight, a `bt`
part's sources lead with the `<BT>` token as one piece, bad mixes are one config error, and a
plain data.train corpus is read as before. Stages (train.stages): each its own mix and stopping
rule, one after the other in one run, resumed where they stopped."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from seq2seq.config import CorpusConfig, StageConfig, check_files, load_config, load_run_config
from seq2seq.data.batching import epoch_batches
from seq2seq.data.corpus import prepare_data
from seq2seq.data.parts import BT_TOKEN
from seq2seq.errors import ConfigError, UserError
from seq2seq.run.runlog import MetricsLog
from seq2seq.train.distributed import Dist
from seq2seq.train.feed import UpdateFeed
from seq2seq.train.stages import Stages, part_weights
from seq2seq.train.state import TrainState
from tests.runs import TINY, cli, train_from, write_parallel

CPU = torch.device("cpu")


def _parts_config(folder, demo_pairs, parts=None, **data) -> object:
    original = write_parallel(folder, "original", demo_pairs[:150])
    bt = write_parallel(folder, "bt", demo_pairs[150:250])
    parts = parts or [
        {"name": "original", "src": str(original[0]), "tgt": str(original[1]), "weight": 0.6},
        {"name": "bt", "src": str(bt[0]), "tgt": str(bt[1]), "weight": 0.4, "tag": "bt"},
    ]
    valid = {"src": str(original[0]), "tgt": str(original[1]), "max_pairs": 6}
    config = {
        "run_dir": str(folder / "run"),
        "data": {"max_len": 40, "train": parts, "valid": valid, **data},
        **TINY,
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_parts_are_drawn_in_proportion_to_their_weights_not_their_sizes():
    rng = np.random.default_rng(0)
    src = rng.integers(3, 20, size=3000).astype(np.int32)
    sizes = [2000, 1000]
    shares = []
    for epoch in range(5):
        batches = epoch_batches(
            src, src, max_tokens=200, seed=1, epoch=epoch, parts=sizes, weights=[0.25, 0.75]
        )
        shares.append(np.mean([int(b[0]) >= 2000 for b in batches]))
    assert abs(np.mean(shares) - 0.75) < 0.03


def test_a_part_drawn_more_than_it_has_batches_is_shuffled_again_and_every_batch_is_one_parts():
    src = np.full(300, 10, dtype=np.int32)
    batches = epoch_batches(src, src, max_tokens=100, seed=3, epoch=0, parts=[200, 100],
                            weights=[0.1, 0.9])  # fmt: skip
    assert len(batches) == 30  # as many batches as the parts hold together
    assert all(len({int(i) >= 200 for i in b}) == 1 for b in batches)
    assert sum(int(b[0]) >= 200 for b in batches) > 20  # the small part upsampled


def test_weighted_parts_keep_their_names_and_weights_and_bt_sources_lead_with_one_bt_piece(
    tmp_path, demo_pairs
):
    cfg = load_config(_parts_config(tmp_path, demo_pairs))
    data = prepare_data(cfg, False)
    assert [(p.name, p.weight, p.rows) for p in data.train_parts] == [
        ("original", 0.6, data.reports["train original"].kept),
        ("bt", 0.4, data.reports["train bt"].kept),
    ]
    assert data.reports["train"].read == 250
    tok = data.tokenizer
    first_bt = data.train_parts[0].rows
    for row in (first_bt, len(data.train) - 1):
        pieces = tok.src_pieces(data.train[row]["src_ids"])
        assert pieces.count(BT_TOKEN) == 1 and pieces.index(BT_TOKEN) <= 1
        assert data.train[row]["src"].startswith(BT_TOKEN + " ")
    assert all(BT_TOKEN not in tok.src_pieces(data.train[r]["src_ids"]) for r in range(first_bt))
    assert len(data.valid) == 6


def test_one_corpus_is_still_one_corpus_with_no_parts(tmp_path):
    cfg = load_config(_parts_config(tmp_path, [("a", "b")] * 300, parts=[{"tsv": "x.tsv"}]))
    assert [p.name for p in cfg.data.train_parts()] == ["part1"]
    plain = cfg.model_copy(deep=True)
    plain.data.train = CorpusConfig(tsv="x.tsv")
    assert plain.data.train_parts() == [] and plain.data.train_corpora() == [plain.data.train]


@pytest.mark.parametrize(
    "parts, message",
    [
        ([{"tsv": "a.tsv", "weight": 0}, {"tsv": "b.tsv", "weight": 0}],
         "the parts' weights must sum to a positive number"),
        ([{"tsv": "a.tsv", "weight": -1}],
         "data.train.0.weight: Input should be greater than or equal to 0"),
        ([{"tsv": "a.tsv", "name": "x"}, {"tsv": "b.tsv", "name": "x"}],
         "part names must differ"),
        ([{"src": "a", "tgt": "b", "alignments": "c", "tag": "bt"}],
         "a `bt` part cannot have alignments"),
        ([{"tsv": "a.tsv", "tag": "mt"}], "tag"),
    ],
)  # fmt: skip
def test_a_bad_mix_is_one_config_error(tmp_path, parts, message):
    with pytest.raises(ConfigError, match=message):
        load_config(_parts_config(tmp_path, [("a", "b")], parts=parts))


@pytest.mark.slow
def test_a_run_trains_on_weighted_parts_with_augmentation_and_keeps_them_in_its_config(
    tmp_path, demo_pairs
):
    config = _parts_config(tmp_path, demo_pairs, augment={"uppercase": 0.1, "tags": 0.1})
    run = train_from(config)
    saved = load_run_config(run)
    assert [(p.name, p.weight, p.tag) for p in saved.data.train_parts()] == [
        ("original", 0.6, None),
        ("bt", 0.4, "bt"),
    ]
    assert saved.data.train_parts()[0].src.is_absolute()
    assert saved.data.augment.tags == 0.1


# ---------------------------------------------------------------------------------- stages

STAGES = [
    {"name": "mix", "mix": {"original": 0.6, "bt": 0.4}, "max_steps": 3},
    {"name": "original", "mix": {"original": 1.0}, "max_steps": 2},
]


@pytest.mark.parametrize(
    "stages, message",
    [
        ([{"mix": {"mono": 1.0}, "max_steps": 2}], r"train.stages\[0\].mix: no part \['mono'\]"),
        ([{"mix": {"bt": 0.0}}], r"train.stages\[0\].mix: the weights must sum to a positive"),
        ([{"mix": {"bt": 1.0}}, {}], r"train.stages\[0\]: give max_steps or patience"),
        ([{"max_steps": 2, "model": {"d_model": 64}}], "train.stages.0.model: unknown key"),
        ([{"name": "a", "max_steps": 1}, {"name": "a"}], "stage names must differ"),
    ],
)
def test_a_bad_stage_list_is_one_config_error_before_anything_is_written(
    tmp_path, demo_pairs, stages, message
):
    config = _parts_config(tmp_path, demo_pairs)
    with pytest.raises(ConfigError, match=message):
        load_config(config, [f"train.stages={stages}"])
    assert not (tmp_path / "run").exists()


def test_a_stage_ends_by_its_steps_or_patience_and_the_next_starts_a_fresh_epoch(tmp_path):
    stages = [StageConfig(max_steps=3), StageConfig(patience=2), StageConfig()]
    run = Stages(stages, TrainState(), Dist())
    st = TrainState(step=2, epoch=0, batch_in_epoch=5)
    assert not run.ended(st, CPU)
    st.step = 3
    assert run.ended(st, CPU) and not run.is_last(st)
    st.bad_evals = 4
    run.advance(st, MetricsLog(tmp_path, False))
    assert (st.stage, st.stage_from, st.epoch, st.batch_in_epoch, st.bad_evals) == (1, 3, 1, 0, 0)
    st.step, st.bad_evals = 50, 1
    assert not run.ended(st, CPU)
    st.bad_evals = 2
    assert run.ended(st, CPU)
    run.advance(st, MetricsLog(tmp_path, False))
    assert run.is_last(st) and not run.ended(st, CPU)
    assert (st.epoch, st.batch_in_epoch) == (1, 0)  # already at an epoch's start: stays


def test_a_run_in_a_stage_its_config_no_longer_lists_is_refused():
    with pytest.raises(UserError, match="this run is in stage 3, but train.stages lists 2"):
        Stages([StageConfig(max_steps=1), StageConfig()], TrainState(stage=2), Dist())


def test_each_stage_draws_its_own_mix_of_parts(tmp_path, demo_pairs):
    cfg = load_config(_parts_config(tmp_path, demo_pairs), [f"train.stages={STAGES}"])
    data = prepare_data(cfg, False)
    assert part_weights(cfg, data.train_parts, 0) == [0.6, 0.4]
    assert part_weights(cfg, data.train_parts, 1) == [1.0, 0.0]
    training = SimpleNamespace(cfg=cfg, data=data, device=CPU, info=Dist())
    feed = UpdateFeed(training)
    original = data.train_parts[0].rows
    second = feed.epoch_batches(0, stage=1)
    assert all(int(i) < original for b in second for i in b)
    assert any(int(i) >= original for b in feed.epoch_batches(0, stage=0) for i in b)


@pytest.mark.slow
def test_stages_run_one_after_the_other_and_a_resumed_run_ends_where_an_unbroken_one_does(
    tmp_path, demo_pairs
):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    runs = []
    for folder in (whole, broken):
        folder.mkdir()
        config = _parts_config(folder, demo_pairs)
        staged = ["--set", f"train.stages={STAGES}", "--set", "train.save_every=100"]
        to_100 = ["--set", "train.max_steps=100"]  # the stages end the run, at step 5
        if folder is broken:  # stopped inside the second stage, then resumed
            cli("--quiet", "train", "--config", config, *staged, "--set", "train.max_steps=4")
            cli("--quiet", "train", "--config", config, *staged, *to_100, "--resume")
        else:
            cli("--quiet", "train", "--config", config, *staged, *to_100)
        runs.append(folder / "run")
    for run in runs:
        records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert [(r["step"], r["stage"]) for r in records if r.get("event") == "stage"] == [
            (3, "original")
        ]
        assert max(r["step"] for r in records) == 5
        assert not list(run.glob("checkpoints/step_0000000[6-9]*"))
    weights = [load_file(str(run / "checkpoints" / "step_00000005.safetensors")) for run in runs]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_a_reused_tokenizer_trained_without_the_bt_token_is_said_to_cut_it(
    tmp_path, demo_pairs, caplog
):
    cfg = load_config(_parts_config(tmp_path, demo_pairs))
    plain = cfg.model_copy(deep=True)
    plain.data.train = cfg.data.train[0]  # the original part alone trains the tokenizer
    with caplog.at_level(logging.WARNING, logger="seq2seq.data.corpus"):
        prepare_data(plain, False)
        prepare_data(cfg, True)
    (warning,) = [r.getMessage() for r in caplog.records if "cuts" in r.getMessage()]
    assert warning.startswith("the tokenizer cuts <BT> into several pieces")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="seq2seq.data.corpus"):
        prepare_data(cfg, False)  # trained with it: one piece, nothing to say
    assert not [r for r in caplog.records if "cuts" in r.getMessage()]


def test_every_missing_file_of_every_part_is_named_in_one_error(tmp_path):
    config = _parts_config(
        tmp_path, [("a", "b")], parts=[{"src": "no.en", "tgt": "no.fr"}, {"tsv": "bt.tsv"}]
    )
    with pytest.raises(ConfigError) as e:
        check_files(load_config(config), "config.yaml")
    assert str(e.value).splitlines()[1:] == [
        "  data.train[0].tgt: file not found: no.fr",
        "  data.train[1].tsv: file not found: bt.tsv",
    ]
    assert str(e.value).splitlines()[0] == "config.yaml: data.train[0].src: file not found: no.en"
