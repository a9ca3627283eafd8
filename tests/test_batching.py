"""Token-budget batching: every pair once, within budget, little padding, seeded order."""

from __future__ import annotations

import sys

import datasets
import numpy as np
import pytest
import torch

from seq2seq.data.batching import (
    collate,
    epoch_batches,
    token_budget_batches,
)
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.runtime import release_arrow_pages


def _lengths(n: int = 5000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    # Sentence lengths shaped like a real corpus: log-normal, target about 10% longer.
    rng = np.random.default_rng(seed)
    src = np.clip(rng.lognormal(2.6, 0.6, n).astype(int), 2, 120)
    tgt = np.clip((src * rng.normal(1.1, 0.15, n)).astype(int), 2, 130)
    return src, tgt


def test_every_pair_lands_in_exactly_one_batch():
    src, tgt = _lengths()
    batches = epoch_batches(src, tgt, max_tokens=1024, seed=1, epoch=0)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(src)))


def test_batches_respect_the_token_budget():
    src, tgt = _lengths()
    for batch in token_budget_batches(src, tgt, max_tokens=1024):
        assert len(batch) * max(src[batch].max(), tgt[batch].max()) <= 1024


def test_padding_is_under_ten_percent_of_tokens_on_a_corpus_sized_input():
    # Sorted batches are nearly padding-free once each length holds several batches' worth of
    # pairs, as in any real training set (a toy set of a few thousand pairs pads more).
    src, tgt = _lengths(n=100_000)
    batches = epoch_batches(src, tgt, max_tokens=4096, seed=1, epoch=0)
    real = sum(int(src[b].sum() + tgt[b].sum()) for b in batches)
    total = sum(len(b) * int(src[b].max() + tgt[b].max()) for b in batches)
    assert 1 - real / total < 0.10


def test_batch_order_is_a_function_of_seed_and_epoch():
    src, tgt = _lengths()

    def order(seed, epoch):
        return [
            b.tolist() for b in epoch_batches(src, tgt, max_tokens=1024, seed=seed, epoch=epoch)
        ]

    assert order(1, 0) == order(1, 0)
    assert order(1, 0) != order(1, 1)
    assert order(1, 0) != order(2, 0)


def test_collate_shifts_target_into_decoder_input_and_output():
    batch = collate([[5, 6, EOS_ID], [7, EOS_ID]], [[10, 11, 12], [13]])
    assert batch.src.tolist() == [[5, 6, EOS_ID], [7, EOS_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 10, 11, 12], [BOS_ID, 13, PAD_ID, PAD_ID]]
    assert batch.tgt_out.tolist() == [[10, 11, 12, EOS_ID], [13, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.src_mask.tolist() == [[True, True, True], [True, True, False]]
    assert not hasattr(batch, "tgt_mask"), "training never reads a [B, T, T] target mask"
    assert batch.ntokens == 6
    assert batch.src.dtype == torch.long


def _rss_file_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise on Linux")
def test_released_corpus_pages_leave_resident_memory_and_the_data_intact(tmp_path):
    rows = 200_000
    ids = [[i % 1000] * 20 for i in range(rows)]
    datasets.Dataset.from_dict({"src_ids": ids}).save_to_disk(tmp_path / "ds")
    ds = datasets.load_from_disk(tmp_path / "ds")  # memory-mapped from its .arrow file
    before = ds.with_format("numpy")[:]["src_ids"].sum()  # fault every page in
    resident = _rss_file_kb()
    released = release_arrow_pages()
    assert released >= rows * 20 * 4  # the int32 values alone
    assert _rss_file_kb() < resident - rows * 20 * 4 // 1024 // 2
    assert ds.with_format("numpy")[:]["src_ids"].sum() == before
