"""The training loop through its Python API: resume, run-directory rules, tokenizer reuse."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import time
import types

import pytest
import torch
from safetensors.torch import load_file

from seq2seq.config import load_config, validate_config
from seq2seq.data.batching import collate
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, load_tokenizer
from seq2seq.errors import ConfigError, UserError
from seq2seq.run.checkpoint import latest_checkpoint, load_state
from seq2seq.run.rundir import load_run
from seq2seq.train import validation
from seq2seq.train.loss import TranslationLoss
from seq2seq.train.trainer import accumulate_gradients, train
from tests.factories import tiny_model
from tests.runs import write_parallel


@pytest.fixture
def corpus(tmp_path, demo_pairs):
    train_files = write_parallel(tmp_path, "train", demo_pairs[:1500])
    valid_files = write_parallel(tmp_path, "valid", demo_pairs[1500:1550])
    return train_files, valid_files


def _config(tmp_path, corpus, run="run", **sections):
    (src, tgt), (vsrc, vtgt) = corpus
    data = {
        "run_dir": str(tmp_path / run),
        "data": {
            "train": {"src": str(src), "tgt": str(tgt)},
            "valid": {"src": str(vsrc), "tgt": str(vtgt)},
            "max_len": 48,
        },
        "tokenizer": {"vocab_size": 300},
        "model": {
            "d_model": 32,
            "heads": 2,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "ffn_dim": 64,
            "dropout": 0.1,
            "max_positions": 64,
        },
        "train": {
            "max_tokens": 512,
            "max_steps": 8,
            "warmup_steps": 4,
            "log_every": 2,
            "eval_every": 4,
            "save_every": 4,
            "valid_bleu_sentences": 5,
        },
        "decode": {"max_len_b": 5},
    }
    for section, values in sections.items():
        data[section].update(values)
    return validate_config(data, source="test")


def _weights(run_dir):
    return load_file(str(latest_checkpoint(run_dir).weights))


@pytest.mark.slow
def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(tmp_path, corpus):
    whole = _config(tmp_path, corpus, run="whole")
    train(whole, progress=False)
    first_leg = _config(tmp_path, corpus, run="legs", train={"max_steps": 4})
    train(first_leg, progress=False)
    state = train(_config(tmp_path, corpus, run="legs"), resume=True, progress=False)
    assert state.step == 8
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "legs")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name

    def logged(run):
        records = [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").open()]
        return [(r["step"], r["split"]) for r in records if "split" in r]

    assert logged("legs") == logged("whole")
    events = [json.loads(x) for x in (tmp_path / "legs" / "metrics.jsonl").open()]
    assert {"event": "config_change", "key": "train.max_steps", "old": 4, "new": 8}.items() <= [
        e for e in events if e.get("event") == "config_change"
    ][0].items()


@pytest.mark.slow
def test_with_ema_a_run_hands_on_the_average_and_resumes_exactly(tmp_path, corpus):
    ema = {"ema_decay": 0.9}
    whole = _config(tmp_path, corpus, run="whole", train=ema)
    train(whole, progress=False)
    train(_config(tmp_path, corpus, run="legs", train={**ema, "max_steps": 4}), progress=False)
    train(_config(tmp_path, corpus, run="legs", train=ema), resume=True, progress=False)
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "legs")
    for name in a:
        assert torch.equal(a[name], b[name]), name

    # The weights file is the average; the raw weights it averages ride in the trainer state.
    latest = latest_checkpoint(tmp_path / "whole")
    raw = load_state(latest.state)["raw_weights"]
    shared = [n for n in raw if n in a]  # tied weights are stored once, under one name
    assert len(shared) > len(raw) // 2
    moved = [n for n in shared if not torch.equal(raw[n], a[n])]
    assert moved, "the average should differ from the raw weights"
    # And the best checkpoint (validated) is an average too, never the raw weights.
    best = load_file(str(tmp_path / "whole" / "checkpoints" / "best.safetensors"))
    assert any(not torch.equal(best[n], raw[n]) for n in shared)


def test_ema_is_the_decayed_average_of_the_weights_after_each_update():
    from seq2seq.train.ema import WeightEMA

    model = torch.nn.Linear(3, 2)
    ema = WeightEMA(model, decay=0.5)
    start = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(2.0)
    ema.update(model)
    with ema.applied(model) as raw:
        assert torch.allclose(model.weight, start + 1.0)  # 0.5 · start + 0.5 · (start + 2)
        assert torch.equal(raw["weight"], start + 2.0)
    assert torch.equal(model.weight, start + 2.0)  # the raw weights are back after


@pytest.mark.slow
def test_a_run_with_checkpoints_is_not_overwritten_without_resume(tmp_path, corpus):
    cfg = _config(tmp_path, corpus, train={"max_steps": 4})
    train(cfg, progress=False)
    before = _weights(cfg.run_dir)
    with pytest.raises(UserError, match="already holds checkpoints"):
        train(cfg, progress=False)
    after = _weights(cfg.run_dir)
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.slow
def test_resume_with_another_model_shape_is_refused(tmp_path, corpus):
    train(_config(tmp_path, corpus, train={"max_steps": 4}), progress=False)
    wider = _config(tmp_path, corpus, model={"d_model": 64})
    with pytest.raises(ConfigError, match="model.d_model"):
        train(wider, resume=True, progress=False)


@pytest.mark.slow
def test_tokenizer_is_retrained_when_its_settings_change(tmp_path, corpus):
    cfg = _config(tmp_path, corpus, train={"max_steps": 4})
    train(cfg, progress=False)
    assert load_tokenizer(cfg.run_dir, joint=True).src_vocab_size == 300
    shutil.rmtree(cfg.run_dir / "checkpoints")  # as if it died before its first checkpoint
    smaller = _config(tmp_path, corpus, tokenizer={"vocab_size": 200}, train={"max_steps": 4})
    train(smaller, progress=False)
    assert load_tokenizer(cfg.run_dir, joint=True).src_vocab_size == 200


def test_training_set_empty_after_filtering_is_a_clear_error(tmp_path, demo_pairs):
    # Sentences of three words or more: none fits in two pieces.
    sentences = [(a, b) for a, b in demo_pairs if min(len(a.split()), len(b.split())) >= 3]
    corpus = (
        write_parallel(tmp_path, "train", sentences[:1500]),
        write_parallel(tmp_path, "valid", sentences[1500:1550]),
    )
    cfg = _config(tmp_path, corpus, data={"max_len": 2}, train={"max_tokens": 512})
    with pytest.raises(UserError, match="training set is empty after filtering"):
        train(cfg, progress=False)


def _random_pairs(n, seed):
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        s_len, t_len = torch.randint(2, 9, (2,), generator=g).tolist()
        src = torch.randint(4, 40, (s_len,), generator=g).tolist() + [EOS_ID]
        pairs.append((src, torch.randint(4, 40, (t_len,), generator=g).tolist()))
    return pairs


def test_accumulated_micro_batches_give_the_gradient_of_one_large_batch(tiny_model_config):
    model = tiny_model(tiny_model_config, 40)
    first, second = _random_pairs(5, seed=1), _random_pairs(7, seed=2)
    micro = [collate(*zip(*first)), collate(*zip(*second))]
    whole = collate(*zip(*(first + second)))
    tokens = sum(b.ntokens for b in micro)
    assert tokens == whole.ntokens

    objective = TranslationLoss(model, smoothing=0.1)
    accumulate_gradients(objective, micro, scale=1 / tokens, device=torch.device("cpu"))
    accumulated = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    accumulate_gradients(objective, [whole], scale=1 / tokens, device=torch.device("cpu"))
    for name, p in model.named_parameters():
        assert torch.allclose(p.grad, accumulated[name], atol=1e-6, rtol=1e-4), name


@pytest.mark.slow
def test_early_stopping_after_patience_validations_without_improvement(tmp_path, corpus):
    # A learning rate this small changes nothing a validation can see: no new best after the first.
    cfg = _config(
        tmp_path,
        corpus,
        train={
            "lr": 1e-12,
            "max_steps": 40,
            "eval_every": 2,
            "patience": 2,
            "valid_bleu_sentences": 0,
        },
    )
    state = train(cfg, progress=False)
    assert state.step == 6  # best at 2, then 4 and 6 without improvement
    assert latest_checkpoint(cfg.run_dir).step == 6
    assert (cfg.run_dir / "checkpoints" / "best.safetensors").is_file()


@pytest.mark.slow
def test_time_budget_stops_training_with_a_checkpoint(tmp_path, corpus):
    cfg = _config(tmp_path, corpus, train={"max_steps": 100_000, "max_minutes": 0.002})
    state = train(cfg, progress=False)
    assert 0 < state.step < 100_000
    assert latest_checkpoint(cfg.run_dir).step == state.step


@pytest.mark.slow
def test_metrics_log_loss_lr_throughput_grad_norm_and_memory(tmp_path, corpus):
    cfg = _config(tmp_path, corpus)
    train(cfg, progress=False)
    records = [json.loads(x) for x in (cfg.run_dir / "metrics.jsonl").open()]
    first_train = next(r for r in records if r.get("split") == "train")
    for key in ("loss", "lr", "tokens_per_s", "tokens", "grad_norm", "peak_rss_mb", "epoch"):
        assert key in first_train, key
    valid = [r for r in records if r.get("split") == "valid"]
    assert {"loss", "nll", "ppl", "bleu"} <= set(valid[0])


@pytest.mark.slow
def test_the_logged_lr_is_the_rate_the_update_used(tmp_path, corpus):
    cfg = _config(tmp_path, corpus, train={"log_every": 1, "lr": 2e-3, "warmup_steps": 4})
    train(cfg, progress=False)
    records = [json.loads(x) for x in (cfg.run_dir / "metrics.jsonl").open()]
    logged = {r["step"]: r["lr"] for r in records if r.get("split") == "train"}
    assert sorted(logged) == list(range(1, 9))
    for step, lr in logged.items():  # §5.3: linear warm-up to the peak at step 4, then 1/√step
        assert lr == pytest.approx(2e-3 * min(step / 4, (4 / step) ** 0.5), rel=1e-9), step


@pytest.mark.slow
def test_validation_loss_equals_label_smoothed_cross_entropy_computed_by_hand(tmp_path, corpus):
    cfg = _config(tmp_path, corpus, train={"save_every": 8, "eval_every": 8})
    train(cfg, progress=False)
    logged = [json.loads(x) for x in (cfg.run_dir / "metrics.jsonl").open()]
    valid = next(r for r in logged if r.get("split") == "valid" and r["step"] == 8)

    loaded = load_run(cfg.run_dir, latest_checkpoint(cfg.run_dir).weights)
    model, tok = loaded.model, loaded.tokenizer
    (_, _), (vsrc, vtgt) = corpus
    eps, vocab = cfg.train.label_smoothing, tok.tgt_vocab_size
    loss = nll = tokens = 0.0
    with torch.no_grad():
        for s, t in zip(vsrc.read_text().splitlines(), vtgt.read_text().splitlines()):
            src = torch.tensor([tok.src.encode(s) + [EOS_ID]])
            target = tok.tgt.encode(t)
            tgt_in = torch.tensor([[BOS_ID] + target])
            causal = torch.ones(len(target) + 1, len(target) + 1, dtype=torch.bool).tril()
            logits = model(src, tgt_in, torch.ones_like(src, dtype=torch.bool), causal[None])
            log_p = torch.log_softmax(logits[0].double(), dim=-1)
            for position, gold in enumerate(target + [EOS_ID]):
                # §5.4: the target distribution puts 1-ε on the gold token, ε spread uniformly.
                loss += -(1 - eps) * log_p[position, gold] - eps / vocab * log_p[position].sum()
                nll += -log_p[position, gold]
                tokens += 1
    assert valid["loss"] == pytest.approx(float(loss / tokens), rel=1e-4)
    assert valid["nll"] == pytest.approx(float(nll / tokens), rel=1e-4)
    assert valid["ppl"] == pytest.approx(math.exp(float(nll / tokens)), rel=1e-4)


@pytest.fixture
def stop_during_update(monkeypatch):
    """`stop_during_update(n, how)`: during the n-th update, a SIGTERM or the time budget ends."""
    import seq2seq.train.stopping as stopping
    import seq2seq.train.trainer as trainer

    def arrange(update: int, how: str):
        calls, real = [0], trainer.accumulate_gradients
        offset = [0.0]
        # Only the stopping module reads this clock; it jumps an hour during the update.
        clock = types.SimpleNamespace(monotonic=lambda: time.monotonic() + offset[0])
        monkeypatch.setattr(stopping, "time", clock)

        def accumulate(*args, **kwargs):
            calls[0] += 1
            if calls[0] == update:
                if how == "signal":
                    os.kill(os.getpid(), signal.SIGTERM)
                else:
                    offset[0] = 3600.0
            return real(*args, **kwargs)

        monkeypatch.setattr(trainer, "accumulate_gradients", accumulate)

    return arrange


@pytest.mark.slow
@pytest.mark.parametrize("how", ["signal", "time budget"])
def test_a_stop_during_update_n_saves_step_n_and_runs_no_further_update(
    tmp_path, corpus, stop_during_update, how
):
    stop_during_update(3, how)
    minutes = 30.0 if how == "time budget" else None
    cfg = _config(tmp_path, corpus, train={"max_steps": 100, "max_minutes": minutes})
    state = train(cfg, progress=False)
    assert state.step == 3
    assert latest_checkpoint(cfg.run_dir).step == 3
    assert state.stopped_by == ("SIGTERM" if how == "signal" else None)


@pytest.mark.slow
def test_resume_applies_changed_optimizer_and_schedule_settings_and_logs_each(tmp_path, corpus):
    train(_config(tmp_path, corpus, train={"max_steps": 4, "log_every": 1}), progress=False)
    changed = {
        "lr": 3e-4,
        "warmup_steps": 2,
        "betas": (0.8, 0.9),
        "eps": 1e-6,
        "weight_decay": 0.01,
        "log_every": 1,
        "label_smoothing": 0.2,
    }
    cfg = _config(tmp_path, corpus, train=changed)
    assert train(cfg, resume=True, progress=False).step == 8

    records = [json.loads(x) for x in (cfg.run_dir / "metrics.jsonl").open()]
    events = {r["key"]: r for r in records if r.get("event") == "config_change"}
    assert set(events) == {
        f"train.{k}"
        for k in (
            "lr",
            "warmup_steps",
            "betas",
            "eps",
            "weight_decay",
            "label_smoothing",
            "max_steps",
        )
    }
    assert events["train.lr"]["old"] == 7e-4 and events["train.lr"]["new"] == 3e-4
    assert all(e["step"] == 4 for e in events.values())
    lrs = {r["step"]: r["lr"] for r in records if r.get("split") == "train"}
    for step in range(5, 9):  # the new peak and warm-up, at the run's own step count
        assert lrs[step] == pytest.approx(3e-4 * min(step / 2, (2 / step) ** 0.5)), step
    saved = load_state(latest_checkpoint(cfg.run_dir).state)["optimizer"]["param_groups"][0]
    assert (tuple(saved["betas"]), saved["eps"], saved["weight_decay"]) == ((0.8, 0.9), 1e-6, 0.01)
    on_disk = load_config(cfg.run_dir / "config.yaml")  # says what ran
    assert on_disk.train.lr == 3e-4 and on_disk.train.betas == (0.8, 0.9)


@pytest.mark.slow
@pytest.mark.parametrize(
    "section, change",
    [("train", {"max_tokens": 400}), ("train", {"seed": 7}), ("data", {"max_len": 40})],
)
def test_resume_refuses_a_new_batch_order_unless_the_dataloader_is_reset(
    tmp_path, corpus, section, change
):
    train(_config(tmp_path, corpus, train={"max_steps": 4}), progress=False)
    saved = (tmp_path / "run" / "config.yaml").read_text()
    cfg = _config(tmp_path, corpus, **{section: change})
    key = f"{section}.{next(iter(change))}"
    with pytest.raises(ConfigError, match=rf"{key} .*--reset-dataloader"):
        train(cfg, resume=True, progress=False)
    assert (tmp_path / "run" / "config.yaml").read_text() == saved, "refused: nothing rewritten"

    assert train(cfg, resume=True, progress=False, reset_dataloader=True).step == 8
    records = [json.loads(x) for x in (cfg.run_dir / "metrics.jsonl").open()]
    assert any(r.get("event") == "reset_dataloader" and r["step"] == 4 for r in records)
    assert any(r.get("key") == key for r in records if r.get("event") == "config_change")


@pytest.mark.slow
def test_tensorboard_scalars_are_written_when_tensorboard_is_installed(tmp_path, corpus):
    pytest.importorskip("tensorboard")
    cfg = _config(tmp_path, corpus, train={"max_steps": 4})
    train(cfg, progress=False)
    events = list((cfg.run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0


@pytest.mark.slow
def test_compiled_training_matches_eager_and_recompiles_a_bounded_number_of_times(tmp_path, corpus):
    import torch._dynamo

    # dropout 0 and a large Adam eps make the two runs comparable step for step.
    common = {"max_steps": 6, "eps": 1e-3}
    eager = _config(tmp_path, corpus, run="eager", train=common, model={"dropout": 0.0})
    train(eager, progress=False)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = _config(
        tmp_path,
        corpus,
        run="compiled",
        train={**common, "compile": True},
        model={"dropout": 0.0},
    )
    train(compiled, progress=False)
    a, b = _weights(eager.run_dir), _weights(compiled.run_dir)
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-4), name
    # Six batches of six different shapes: one static graph, then one with symbolic lengths.
    shapes = len(set(_batch_shapes(compiled, steps=6)))
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert shapes == 6 and graphs <= 2


def _batch_shapes(cfg, steps):
    from seq2seq.data.batching import epoch_batches
    from seq2seq.data.corpus import lengths, load_corpus, tokenize

    raw = load_corpus(cfg.data.train, "en", "fr")
    d = cfg.data
    ds, _ = tokenize(
        raw, cfg.run_dir, True, max_len=d.max_len, max_len_ratio=d.max_len_ratio, dedup=d.dedup
    )
    src, tgt = lengths(ds)
    batches = epoch_batches(
        src, tgt, max_tokens=cfg.train.max_tokens, seed=cfg.train.seed, epoch=0
    )[:steps]
    return [(len(b), int(src[b].max()), int(tgt[b].max())) for b in batches]


@pytest.mark.slow
def test_background_loader_workers_train_to_the_same_weights(tmp_path, corpus):
    train(_config(tmp_path, corpus, run="inline", train={"num_workers": 0}), progress=False)
    train(_config(tmp_path, corpus, run="worker", train={"num_workers": 1}), progress=False)
    a, b = _weights(tmp_path / "inline"), _weights(tmp_path / "worker")
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_an_update_larger_than_an_epoch_is_a_clear_error(tmp_path, corpus):
    cfg = _config(tmp_path, corpus, train={"update_freq": 100_000})
    with pytest.raises(UserError, match="one update needs 100000"):
        train(cfg, progress=False)


def _records(run_dir, split):
    return [
        r for r in map(json.loads, (run_dir / "metrics.jsonl").open()) if r.get("split") == split
    ]


def _averaging_config(tmp_path, corpus):
    train_section = {
        "lr": 3e-3,
        "max_steps": 12,
        "save_every": 2,
        "keep_last": 3,
        "average_last": 3,
        "valid_bleu_sentences": 0,  # choose by loss: exact and deterministic
    }
    return _config(tmp_path, corpus, train=train_section)


@pytest.mark.slow
def test_the_last_checkpoints_are_averaged_and_validated_and_a_worse_average_is_not_used(
    tmp_path, corpus
):
    cfg = _averaging_config(tmp_path, corpus)
    train(cfg, progress=False)
    folder = cfg.run_dir / "checkpoints"
    steps = [load_file(str(folder / f"step_{s:08d}.safetensors")) for s in (8, 10, 12)]
    average = load_file(str(folder / "average_last3.safetensors"))
    for name, value in average.items():
        mean = sum(s[name].double() for s in steps) / 3
        assert torch.allclose(value.double(), mean, atol=1e-7), name

    (scored,) = _records(cfg.run_dir, "valid_average")
    assert scored["averaged_steps"] == [8, 10, 12]
    # Twelve steps in, the model still improves every step: the last checkpoint beats the mean.
    best_step = min(_records(cfg.run_dir, "valid"), key=lambda r: r["loss"])
    assert scored["loss"] > best_step["loss"]
    best = json.loads((folder / "best.json").read_text())
    assert best["step"] == best_step["step"] and "averaged_steps" not in best
    best_weights = load_file(str(folder / "best.safetensors"))
    assert all(torch.equal(best_weights[k], steps[-1][k]) for k in best_weights)


@pytest.mark.slow
def test_an_average_that_scores_better_becomes_the_best_checkpoint_and_resume_knows_it(
    tmp_path, corpus, monkeypatch
):
    # A scorer that ranks the average (the last validation) first; the rest is the real path.
    real = validation.validation_loss
    calls = []

    def scored(model, *args, **kwargs):
        metrics = real(model, *args, **kwargs)
        calls.append(metrics)
        return {**metrics, "loss": 0.5} if len(calls) == 4 else metrics  # below any real loss

    monkeypatch.setattr(validation, "validation_loss", scored)
    cfg = _averaging_config(tmp_path, corpus)
    train(cfg, progress=False)
    assert len(calls) == 4  # steps 4, 8 and 12, then the average
    folder = cfg.run_dir / "checkpoints"
    best = json.loads((folder / "best.json").read_text())
    assert best["averaged_steps"] == [8, 10, 12] and best["loss"] == 0.5
    average = load_file(str(folder / "average_last3.safetensors"))
    best_weights = load_file(str(folder / "best.safetensors"))
    assert all(torch.equal(best_weights[k], average[k]) for k in average)
    # The last step keeps its own trained weights, and its state the new best.
    last = latest_checkpoint(cfg.run_dir)
    trained = load_file(str(last.weights))
    assert not all(torch.equal(trained[k], average[k]) for k in average)
    assert load_state(last.state)["train"]["best_loss"] == 0.5


@pytest.mark.slow
def test_final_choice_by_beam_ships_the_candidate_with_the_highest_beam_bleu(
    tmp_path, corpus, monkeypatch
):
    # The scores are set (the real decoding still runs): candidates are the best checkpoint,
    # the last step, then the averages of the last 2 and 3; the average of 2 wins.
    set_scores = iter([1.0, 2.0, 5.0, 3.0])
    seen = []
    real_bleu = validation.Validator._bleu

    greedy = iter([30.0, 20.0, 10.0])  # the validations at steps 4, 8, 12: step 4 stays best

    def bleu(self, translate, sentences):
        real_bleu(self, translate, sentences)
        if translate is self.translate:
            return next(greedy)
        seen.append((translate.__self__.options.beam_size, sentences))
        return next(set_scores)

    monkeypatch.setattr(validation.Validator, "_bleu", bleu)
    cfg = _config(
        tmp_path,
        corpus,
        train={
            "max_steps": 12,
            "save_every": 2,
            "keep_last": 3,
            "average_last": [3, 2],
            "final_choice": "beam",
        },
        decode={"beam_size": 3, "max_len_b": 5},
    )
    train(cfg, progress=False)
    assert seen == [(3, None)] * 4  # the run's beam, on every valid sentence
    folder = cfg.run_dir / "checkpoints"
    (record,) = _records(cfg.run_dir, "final_choice")
    assert list(record["bleu"].values()) == [1.0, 2.0, 5.0, 3.0]
    assert record["chosen"] == "average of steps 10-12 (2)"
    best = json.loads((folder / "best.json").read_text())
    assert best["averaged_steps"] == [10, 12] and best["beam_bleu"] == 5.0
    average = load_file(str(folder / "average_last2.safetensors"))
    best_weights = load_file(str(folder / "best.safetensors"))
    assert all(torch.equal(best_weights[k], average[k]) for k in average)
    # The model's own weights, and the last step's checkpoint, stay the trained ones.
    trained = _weights(cfg.run_dir)
    assert not all(torch.equal(trained[k], average[k]) for k in average)


@pytest.mark.slow
def test_final_choice_by_beam_keeps_the_best_checkpoint_when_nothing_beats_it(
    tmp_path, corpus, monkeypatch
):
    monkeypatch.setattr(validation.Validator, "_bleu", lambda self, translate, n: 7.0)
    cfg = _config(
        tmp_path,
        corpus,
        train={"save_every": 2, "keep_last": 3, "average_last": 3, "final_choice": "beam"},
    )
    train(cfg, progress=False)
    (record,) = _records(cfg.run_dir, "final_choice")
    assert record["chosen"] == "best checkpoint"  # a tie keeps what is there, unwritten
    best = json.loads((cfg.run_dir / "checkpoints" / "best.json").read_text())
    assert "final_choice" not in best and best["step"] == 4  # step 8 tied it too


@pytest.mark.slow
def test_final_choice_decodes_the_best_checkpoint_once_when_it_is_the_last_step(
    tmp_path, corpus, monkeypatch
):
    greedy = iter([10.0, 20.0])  # steps 4 and 8: the last step is the best checkpoint
    names = []

    def bleu(self, translate, sentences):
        return next(greedy) if translate is self.translate else 1.0

    real_write = validation.MetricsLog.write

    def write(self, step, record):
        if record.get("split") == "final_choice":
            names.extend(record["bleu"])
        return real_write(self, step, record)

    monkeypatch.setattr(validation.Validator, "_bleu", bleu)
    monkeypatch.setattr(validation.MetricsLog, "write", write)
    train_section = {"save_every": 2, "keep_last": 3, "average_last": 3, "final_choice": "beam"}
    train(_config(tmp_path, corpus, train=train_section), progress=False)
    assert names == ["step 8", "average of steps 4-8 (3)"]


@pytest.mark.slow
def test_with_ema_the_final_choice_of_the_last_step_ships_the_weights_its_checkpoint_holds(
    tmp_path, corpus, monkeypatch
):
    greedy = iter([30.0, 20.0])  # the validations at steps 4 and 8: step 4 stays best
    beam = iter([1.0, 2.0])  # the best checkpoint, then the last step: the last step wins

    def bleu(self, translate, sentences):
        return next(greedy) if translate is self.translate else next(beam)

    monkeypatch.setattr(validation.Validator, "_bleu", bleu)
    train_section = {"ema_decay": 0.9, "final_choice": "beam"}
    cfg = _config(tmp_path, corpus, train=train_section)
    train(cfg, progress=False)
    (record,) = _records(cfg.run_dir, "final_choice")
    assert record["chosen"] == "step 8"
    folder = cfg.run_dir / "checkpoints"
    shipped = load_file(str(folder / "best.safetensors"))
    step8 = load_file(str(folder / "step_00000008.safetensors"))  # the EMA of step 8
    assert shipped.keys() == step8.keys()
    assert all(torch.equal(shipped[k], step8[k]) for k in step8)
    # The step's trainer state still holds the raw weights, apart from the average.
    raw = load_state(latest_checkpoint(cfg.run_dir).state)["raw_weights"]
    assert any(not torch.equal(raw[k], step8[k]) for k in step8 if k in raw)


@pytest.mark.slow
def test_a_run_shorter_than_the_average_averages_the_checkpoints_it_has(tmp_path, corpus):
    train_section = {"max_steps": 4, "save_every": 2, "keep_last": 6, "average_last": [3, 6]}
    cfg = _config(tmp_path, corpus, train={**train_section, "valid_bleu_sentences": 0})
    train(cfg, progress=False)
    folder = cfg.run_dir / "checkpoints"
    assert sorted(p.name for p in folder.glob("average*")) == ["average_last2.safetensors"]
    (scored,) = _records(cfg.run_dir, "valid_average")
    assert scored["averaged_steps"] == [2, 4]


def test_averaging_more_checkpoints_than_are_kept_is_a_config_error(tmp_path, corpus):
    with pytest.raises(ConfigError, match="average_last .* keep_last"):
        _config(tmp_path, corpus, train={"keep_last": 2, "average_last": 3})
