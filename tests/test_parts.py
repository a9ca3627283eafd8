"""Training data as weighted parts (data.train as a list): parts are drawn by weight, a `bt`
part's sources lead with the `<BT>` token as one piece, bad mixes are one config error, and a
plain data.train corpus is read as before."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from seq2seq.config import CorpusConfig, load_config, load_run_config
from seq2seq.data.batching import epoch_batches
from seq2seq.data.corpus import prepare_data
from seq2seq.data.parts import BT_TOKEN
from seq2seq.errors import ConfigError
from tests.runs import TINY, train_from, write_parallel


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
