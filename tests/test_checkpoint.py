"""Checkpoints: safetensors weights, code-free state, atomic files, clear mismatch errors."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from seq2seq.errors import UserError
from seq2seq.run.checkpoint import (
    average_last,
    average_weights,
    best_or_latest,
    latest_checkpoint,
    list_checkpoints,
    load_state,
    load_weights,
    prune,
    save_best,
    save_checkpoint,
)
from tests.factories import tiny_model


def test_weights_round_trip_and_keep_embeddings_tied(tmp_path, tiny_model_config):
    model = tiny_model(tiny_model_config, 50)
    ckpt = save_checkpoint(tmp_path, 7, model, {"train": {"step": 7}})
    other = tiny_model(tiny_model_config, 50)
    load_weights(other, ckpt.weights)
    for (name, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items()):
        assert torch.equal(a, b), name
    assert other.output.weight is other.src_embed.weight
    assert load_state(ckpt.state) == {"train": {"step": 7}}


def test_checkpoint_of_another_shape_gets_a_mismatch_message(tmp_path, tiny_model_config):
    ckpt = save_checkpoint(tmp_path, 1, tiny_model(tiny_model_config, 60), {})
    with pytest.raises(UserError, match=r"does not fit this model .*another vocabulary or shape"):
        load_weights(tiny_model(tiny_model_config, 50), ckpt.weights)


def test_truncated_checkpoint_is_reported_as_corrupt(tmp_path, tiny_model_config):
    ckpt = save_checkpoint(tmp_path, 1, tiny_model(tiny_model_config, 50), {})
    data = ckpt.weights.read_bytes()
    ckpt.weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="not a readable checkpoint"):
        load_weights(tiny_model(tiny_model_config, 50), ckpt.weights)


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_state_file_whose_pickle_would_run_code_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.state.pt"
    with open(path, "wb") as f:
        pickle.dump({"train": _RunsCode()}, f, protocol=2)
    with pytest.raises(UserError, match="cannot load trainer state"):
        load_state(path)
    assert not (tmp_path / "pwned").exists()


def test_incomplete_checkpoints_are_ignored_and_old_ones_pruned(tmp_path, tiny_model_config):
    model = tiny_model(tiny_model_config, 50)
    for step in (10, 20, 30):
        save_checkpoint(tmp_path, step, model, {})
    # A crash between the state and the weights leaves a state file alone: not a checkpoint.
    (tmp_path / "checkpoints" / "step_00000040.state.pt").write_bytes(b"partial")
    assert latest_checkpoint(tmp_path).step == 30
    prune(tmp_path, keep_last=2)
    assert [c.step for c in list_checkpoints(tmp_path)] == [20, 30]
    assert not list((tmp_path / "checkpoints").glob("*.tmp"))


def test_translation_uses_the_best_checkpoint_when_there_is_one(tmp_path, tiny_model_config):
    model = tiny_model(tiny_model_config, 50)
    latest = save_checkpoint(tmp_path, 20, model, {})
    assert best_or_latest(tmp_path) == latest.weights
    best = save_best(tmp_path, 10, model, {"bleu": 12.5, "loss": 2.0})
    assert best_or_latest(tmp_path) == best


def test_averaged_checkpoint_is_the_mean_of_the_last_n(tmp_path, tiny_model_config):
    model = tiny_model(tiny_model_config, 50)
    snapshots = []
    for step in (1, 2, 3, 4):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        save_checkpoint(tmp_path, step, model, {})
    out, steps = average_last(tmp_path, 3)
    assert steps == [2, 3, 4]
    averaged = tiny_model(tiny_model_config, 50)
    load_weights(averaged, out)
    for name, value in averaged.state_dict().items():
        expected = sum(s[name] for s in snapshots[1:]) / 3
        assert torch.allclose(value, expected, atol=1e-6), name
    assert averaged.output.weight is averaged.src_embed.weight


def test_averaging_keeps_integer_tensors_from_the_last_checkpoint(tmp_path):
    from safetensors.torch import load_file, save_file

    paths = []
    for i, (weight, count) in enumerate([(1.0, 3), (2.0, 4)]):
        paths.append(tmp_path / f"{i}.safetensors")
        tensors = {
            "w": torch.full((2,), weight),
            "n": torch.tensor([count]),
            "m": torch.tensor([i == 1]),
        }
        save_file(tensors, paths[-1])
    averaged = average_weights(paths)
    assert averaged["w"].tolist() == [1.5, 1.5]
    # The mean 3.5 would truncate to 3: a counter from no checkpoint at all.
    assert averaged["n"].tolist() == [4] and averaged["n"].dtype == torch.int64
    assert averaged["m"].tolist() == [True] and averaged["m"].dtype == torch.bool
    assert load_file(str(paths[1]))["n"].tolist() == [4]


def test_averaging_more_checkpoints_than_kept_is_a_clear_error(tmp_path, tiny_model_config):
    save_checkpoint(tmp_path, 1, tiny_model(tiny_model_config, 50), {})
    with pytest.raises(UserError, match="has 1 step checkpoint.*cannot average the last 5"):
        average_last(tmp_path, 5)
