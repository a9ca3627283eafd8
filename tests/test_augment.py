"""On-the-fly augmentation (data.augment): each OpusTrainer modifier does what it says, pairs
are changed at the configured rates, the changes are a pure function of (seed, epoch, row)
decided before the epoch is batched (so batches are cut on the augmented lengths and keep to
train.max_tokens), and a run resumed in the middle of an epoch is fed exactly the batches an
uninterrupted run is."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from seq2seq.config import AugmentConfig, load_config
from seq2seq.data.augment import (
    MODIFIERS,
    AugmentedEpoch,
    Ragged,
    block_rng,
    modified_pair,
    noise_line,
    rates_of,
    remove_end_punct,
    tag_words,
    titlecase,
    typo,
    typos,
    uppercase,
)
from seq2seq.data.batching import epoch_batches, iterate
from seq2seq.data.corpus import lengths, prepare_data
from seq2seq.errors import ConfigError
from seq2seq.train.distributed import Dist
from seq2seq.train.feed import UpdateFeed
from seq2seq.train.state import TrainState
from tests.runs import write_parallel, write_tiny_config


def test_uppercase_and_titlecase_change_both_sides():
    assert uppercase("the cat sleeps.", "le chat dort.") == ("THE CAT SLEEPS.", "LE CHAT DORT.")
    assert titlecase("the CAT sleeps.", "le chat dort.") == ("The Cat Sleeps.", "Le Chat Dort.")


def test_final_punctuation_goes_only_when_both_sides_end_with_it():
    assert remove_end_punct("Is it late?", "Est-il tard ?") == ("Is it late", "Est-il tard")
    assert remove_end_punct('He said "no."', "Il a dit « non ».") == (
        'He said "no',
        "Il a dit « non",
    )
    assert remove_end_punct("Is it late?", "Est-il tard") == ("Is it late?", "Est-il tard")
    assert remove_end_punct("?", "?") == ("?", "?")  # nothing would be left


def test_a_typo_changes_one_word_by_one_edit_and_typos_keep_the_word_count():
    rng = np.random.default_rng(0)
    for _ in range(200):
        word = "chocolate"
        changed = typo(word, rng)
        assert changed != word and abs(len(changed) - len(word)) <= 1
    line = "the quick brown fox jumps over the lazy dog again 42"
    for seed in range(50):
        out = typos(line, np.random.default_rng(seed))
        assert out != line and len(out.split()) == len(line.split())
        assert out.split()[-1] == "42"  # only words with letters get typos
    assert typos("12 34", np.random.default_rng(0)) == "12 34"


def test_typos_touch_the_source_only():
    picked = np.array([m == "typos" for m in MODIFIERS])
    src, tgt, _ = modified_pair(
        "a very long sentence", "une phrase", None, picked, block_rng(1, 0, 0)
    )
    assert src != "a very long sentence" and tgt == "une phrase"


def test_noise_is_the_same_random_printable_line_on_both_sides():
    picked = np.array([m == "noise" for m in MODIFIERS])
    src, tgt, links = modified_pair("hello", "bonjour", [(0, 0)], picked, block_rng(1, 0, 0))
    assert src == tgt and src != "hello" and links == []
    for seed in range(100):
        line = noise_line(np.random.default_rng(seed))
        assert line.isprintable() and 1 <= len(line.split()) <= 6


def test_tags_wrap_an_aligned_word_pair_or_without_alignments_both_sentences():
    rng = np.random.default_rng(3)
    src, tgt = tag_words("the red car", "la voiture rouge", [(1, 2)], rng)
    (name,) = {w[1] for w in src.split() + tgt.split() if w.startswith("<")}
    assert src == f"the <{name}>red</{name}> car"
    assert tgt == f"la voiture <{name}>rouge</{name}>"
    src, tgt = tag_words("the car", "la voiture", None, rng)
    assert src.startswith("<") and src.endswith(">") and "the car" in src
    assert tgt[: tgt.index(">") + 1] == src[: src.index(">") + 1]
    assert tag_words("a b", "c d", [(5, 0)], rng) == ("a b", "c d")  # no link inside the pair


def test_case_comes_before_tags_so_tags_stay_lower_case():
    picked = np.array([m in ("uppercase", "tags") for m in MODIFIERS])
    src, tgt, _ = modified_pair("the car", "la voiture", [(1, 1)], picked, block_rng(0, 0, 0))
    assert src.split()[0] == "THE" and src.split()[1][:3] in ("<b>", "<i>", "<u>")


@pytest.mark.parametrize("modifier", ["uppercase", "typos", "remove_end_punct", "tags"])
def test_each_modifier_picks_pairs_at_its_rate(modifier):
    rates = rates_of(AugmentConfig(**{modifier: 0.3}))
    rng = np.random.default_rng(7)
    draws = rng.random((4000, len(MODIFIERS))) < rates  # as an epoch's block draws them
    picked = sum(
        modified_pair("the cat sleeps .", "le chat dort .", None, p, rng) is not None for p in draws
    )
    assert abs(picked / 4000 - 0.3) < 0.03


def test_all_rates_zero_changes_nothing_and_is_the_default():
    assert not AugmentConfig().active()
    rates = rates_of(AugmentConfig())
    rng = np.random.default_rng(0)
    draws = rng.random((500, len(MODIFIERS))) < rates
    assert all(modified_pair("a.", "b.", None, p, rng) is None for p in draws)


def test_the_same_seed_epoch_and_batch_give_the_same_changes_and_others_differ():
    rates = rates_of(AugmentConfig(uppercase=0.3, typos=0.5, tags=0.3, remove_end_punct=0.3))

    def run(seed, epoch, batch):
        rng = block_rng(seed, epoch, batch)
        draws = rng.random((50, len(MODIFIERS))) < rates
        return [
            modified_pair(f"sentence number {i} .", "phrase .", None, draws[i], rng)
            for i in range(50)
        ]

    assert run(1, 2, 3) == run(1, 2, 3)
    assert run(1, 2, 3) != run(1, 2, 4) and run(1, 2, 3) != run(1, 3, 3) != run(2, 2, 3)


@pytest.mark.parametrize(
    "augment, message",
    [
        ({"typo": 0.1}, "data.augment.typo: unknown key"),
        ({"noise": 1.5}, "data.augment.noise: Input should be less than or equal to 1"),
        ({"uppercase": -0.1}, "data.augment.uppercase: Input should be greater than or equal to 0"),
    ],
)
def test_an_unknown_modifier_or_a_rate_outside_0_1_is_one_config_error(tmp_path, augment, message):
    config = write_tiny_config(tmp_path, [("a", "b")], data={"augment": augment})
    with pytest.raises(ConfigError, match=message):
        load_config(config)


def _feed(folder, demo_pairs, augment):
    config = write_tiny_config(
        folder,
        demo_pairs[:200],
        data={"augment": augment},
        train={"max_tokens": 300, "max_epochs": 2},
    )
    cfg = load_config(config)
    training = SimpleNamespace(
        cfg=cfg, data=prepare_data(cfg, False), device=torch.device("cpu"), info=Dist()
    )
    return UpdateFeed(training)


def _batches(feed, state, n=None):
    out = []
    for micro, _ in feed.updates(state):
        out += [(b.src.tolist(), b.tgt_in.tolist(), b.tgt_out.tolist()) for b in micro]
        if n is not None and len(out) == n:
            break
    return out


AUGMENT = {"uppercase": 0.2, "titlecase": 0.2, "typos": 0.3, "remove_end_punct": 0.3,
           "noise": 0.05, "tags": 0.2}  # fmt: skip


def test_a_run_resumed_mid_epoch_gets_the_same_augmented_batches(tmp_path, demo_pairs):
    feed = _feed(tmp_path, demo_pairs, AUGMENT)
    whole = _batches(feed, TrainState())
    per_epoch = len(feed.epoch_batches(0))
    assert len(whole) == len(feed.epoch_batches(0)) + len(feed.epoch_batches(1))
    resumed = _batches(feed, TrainState(epoch=1, batch_in_epoch=3))
    assert resumed == whole[per_epoch + 3 :]
    assert _batches(feed, TrainState(), n=5) == whole[:5]  # and a fresh start again the same


UNTAGGED = {**AUGMENT, "tags": 0.0}  # tags would train another tokenizer (with <b> in it)


def test_with_augmentation_off_the_feed_gives_the_plain_batches(tmp_path, demo_pairs):
    feed = _feed(tmp_path, demo_pairs, {})
    assert feed.augmented(0) is None
    ds, ids = feed.training.data.train, feed.training.data.tokenizer.ids
    expected = []
    for epoch in (0, 1):
        batches = epoch_batches(
            *lengths(ds), max_tokens=300, seed=feed.training.cfg.train.seed, epoch=epoch
        )
        expected += [(b.src.tolist(), b.tgt_in.tolist(), b.tgt_out.tolist())
                     for b in iterate(ds, batches, ids=ids)]  # fmt: skip
    assert _batches(feed, TrainState()) == expected


def test_augmented_batches_keep_within_max_tokens_padding_included(tmp_path, demo_pairs):
    (tmp_path / "plain").mkdir()
    (tmp_path / "aug").mkdir()
    plain = _batches(_feed(tmp_path / "plain", demo_pairs, {}), TrainState())
    heavy = {**UNTAGGED, "uppercase": 0.5, "titlecase": 0.4}  # case splits words into pieces
    feed = _feed(tmp_path / "aug", demo_pairs, heavy)
    augmented = _batches(feed, TrainState())
    assert augmented != plain
    for src, _, tgt_out in augmented:
        if len(src) > 1:  # a single pair longer than the budget is a batch of its own
            assert len(src) * len(src[0]) <= 300 and len(tgt_out) * len(tgt_out[0]) <= 300
    # Cut on the augmented lengths: each batch is as wide as its longest augmented pair.
    aug = feed.augmented(0)
    for idx, (src, _, tgt_out) in zip(feed.epoch_batches(0), augmented):
        assert len(src[0]) == aug.src_lens[idx].max() and len(tgt_out[0]) == aug.tgt_lens[idx].max()


def test_an_epochs_changes_are_drawn_per_pair_and_kept_as_flat_arrays(tmp_path, demo_pairs):
    feed = _feed(tmp_path, demo_pairs, UNTAGGED)
    first, second = feed.augmented(0), feed.augmented(1)
    again = feed.augmented(0)  # built afresh: a feed keeps one epoch's
    assert again is not first
    assert np.array_equal(first.rows, again.rows)
    assert np.array_equal(first.src.values, again.src.values)
    assert not np.array_equal(first.rows, second.rows)
    assert 0.3 * 200 < len(first.rows) < 200 and np.all(np.diff(first.rows) > 0)
    assert isinstance(first.src.values, np.ndarray) and first.src.values.dtype == np.int32
    for j, row in enumerate(first.rows.tolist()):
        assert first.src_lens[row] == len(first.src[j])
        assert first.tgt_lens[row] == len(first.tgt[j]) + 1  # and the EOS


def test_tags_follow_the_word_alignments_into_the_guided_alignment_links(tmp_path, demo_pairs):
    pairs = demo_pairs[:120]
    src, tgt = write_parallel(tmp_path, "train", pairs)
    links = tmp_path / "train.align"
    links.write_text("0-0\n" * len(pairs))  # first word to first word
    config = write_tiny_config(
        tmp_path,
        pairs,
        data={
            "train": {"src": str(src), "tgt": str(tgt), "alignments": str(links)},
            "augment": {"tags": 1.0},
        },
        train={"max_tokens": 300, "max_epochs": 1, "alignment": {}},
    )
    cfg = load_config(config)
    data = prepare_data(cfg, False)
    feed = UpdateFeed(SimpleNamespace(cfg=cfg, data=data, device=torch.device("cpu"), info=Dist()))
    tok, tags = data.tokenizer, {"<b>", "<i>", "<u>"}
    tagged = rows = 0
    for micro, _ in feed.updates(TrainState()):
        for batch in micro:
            for row in range(batch.src.size(0)):
                pieces = tok.src_pieces(batch.src[row][batch.src_mask[row]].tolist())
                rows += 1
                if not any(p in tags for p in pieces):
                    continue  # tagged, it would have been longer than max_len: left as it was
                tagged += 1
                assert sum(p in tags for p in pieces) == 1  # one tag a pair
                linked = {pieces[s] for r, _, s in batch.align.tolist() if r == row}
                assert linked & tags  # the tagged first word is the one still linked
    assert tagged > 0.8 * rows


def test_a_batch_finds_its_changed_pairs_by_row_in_the_flat_arrays():
    lens = np.ones(8, np.int32)
    epoch = AugmentedEpoch(
        np.array([1, 5]), Ragged.of([[1, 2], [3]]), Ragged.of([[4], [5, 6]]), None, lens, lens
    )
    assert epoch.changed_in(np.array([5, 0, 1, 7])) == [(0, 1), (2, 0)]
    assert (epoch.src[1], epoch.tgt[1]) == ([3], [5, 6])
    none = AugmentedEpoch(np.zeros(0, np.int64), Ragged.of([]), Ragged.of([]), None, lens, lens)
    assert none.changed_in(np.array([0, 1])) == []
    joined = Ragged.joined([Ragged.of([[1]]), Ragged.of([[2, 3], []])])
    assert [joined[k] for k in range(3)] == [[1], [2, 3], []]
