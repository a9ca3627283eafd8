"""Token-budget batches from length-sorted pairs; padding and attention masks."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from seq2seq.data.tokenizer import DEFAULT_IDS, PAD_ID, SpecialIds
from seq2seq.runtime import release_arrow_pages, shared_resident_bytes


@dataclass
class Batch:
    """Padded source and target tensors and the source mask (True = a real token).

    No [B, T, T] target mask: the decoder's causal path is exact for every real target position
    (only padding comes after it), and the loss ignores padded ones; `no_peek_mask` builds the
    full mask where one is wanted.
    """

    src: torch.Tensor  # [B, S] source ids, EOS-terminated, PAD-padded
    tgt_in: torch.Tensor  # [B, T] BOS + target: the decoder's input
    tgt_out: torch.Tensor  # [B, T] target + EOS: what it must predict (PAD where padded)
    src_mask: torch.Tensor  # [B, S] key-padding mask for encoder and cross-attention
    pad_id: int = PAD_ID
    # [N, 3] (row, target position, source position) piece links, for guided alignment.
    align: torch.Tensor | None = None

    @property
    def ntokens(self) -> int:
        """Real target tokens, the unit the loss is normalised by."""
        return int((self.tgt_out != self.pad_id).sum())

    def to(self, device: torch.device) -> Batch:
        non_blocking = device.type == "cuda"
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Batch:
        return self._map(lambda t: t.pin_memory())

    def _map(self, fn) -> Batch:
        tensors = (self.src, self.tgt_in, self.tgt_out, self.src_mask)
        align = None if self.align is None else fn(self.align)
        return Batch(*(fn(t) for t in tensors), pad_id=self.pad_id, align=align)


def pad(
    seqs: Sequence[Sequence[int]],
    prefix: int | None = None,
    suffix: int | None = None,
    pad_id: int = PAD_ID,
) -> torch.Tensor:
    """Right-pad id sequences into a [B, L] tensor, optionally adding a first/last id to each."""
    extra = (prefix is not None) + (suffix is not None)
    width = max(len(s) for s in seqs) + extra
    out = np.full((len(seqs), width), pad_id, dtype=np.int64)
    start = 1 if prefix is not None else 0
    for row, s in zip(out, seqs):
        n = len(s)
        if prefix is not None:
            row[0] = prefix
        row[start : start + n] = s
        if suffix is not None:
            row[start + n] = suffix
    return torch.from_numpy(out)


def padding_mask(ids: torch.Tensor, pad_id: int = PAD_ID) -> torch.Tensor:
    """[B, L] True where the token is real (not padding)."""
    return ids != pad_id


def no_peek_mask(tgt_in: torch.Tensor, pad_id: int = PAD_ID) -> torch.Tensor:
    """[B, T, T]: query t may attend key u only if u <= t and u is not padding.

    The first position is the start token, never padding, even where the start token's id is
    the padding id (Marian's)."""
    t = tgt_in.size(1)
    causal = torch.ones(t, t, dtype=torch.bool, device=tgt_in.device).tril()
    real = padding_mask(tgt_in, pad_id)
    real[:, 0] = True
    return causal.unsqueeze(0) & real.unsqueeze(1)


def collate(
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    ids: SpecialIds = DEFAULT_IDS,
    links: Sequence[Sequence[int]] | None = None,
) -> Batch:
    """Pad a list of (EOS-terminated source, bare target) pairs into a Batch; `links`: each
    pair's flat [source piece, target piece, …] alignment, for guided alignment."""
    src = pad(src_ids, pad_id=ids.pad)
    tgt_in = pad(tgt_ids, prefix=ids.start, pad_id=ids.pad)
    tgt_out = pad(tgt_ids, suffix=ids.eos, pad_id=ids.pad)
    align = None if links is None else alignment_rows(links)
    return Batch(src, tgt_in, tgt_out, padding_mask(src, ids.pad), ids.pad, align)


def alignment_rows(links: Sequence[Sequence[int]]) -> torch.Tensor:
    """[N, 3] (row, target position, source position) from each row's flat [s, t, s, t, …]."""
    rows = [
        (row, flat[i + 1], flat[i])
        for row, flat in enumerate(links)
        for i in range(0, len(flat), 2)
    ]
    return torch.tensor(rows, dtype=torch.int64).view(-1, 3)


def token_budget_batches(
    src_lens: np.ndarray,
    tgt_lens: np.ndarray,
    max_tokens: int,
    rng: np.random.Generator | None = None,
) -> list[np.ndarray]:
    """Group indices into batches of at most `max_tokens` padded tokens (sentences × longest side).

    Pairs are sorted by length so each batch holds pairs of nearly equal length (little padding);
    with an `rng`, equal-length pairs are broken in random order and the batch order is shuffled.
    """
    src_lens = np.asarray(src_lens)
    tgt_lens = np.asarray(tgt_lens)
    n = len(src_lens)
    # int32 indices: per-pair bookkeeping is what grows with the corpus, so keep it small.
    perm = (rng.permutation(n) if rng is not None else np.arange(n)).astype(np.int32)
    order = perm[np.lexsort((src_lens[perm], tgt_lens[perm]))]
    del perm
    longest_side = np.maximum(src_lens[order], tgt_lens[order])

    cuts = [0]
    longest = 0
    for start in range(0, n, 1 << 16):  # slices, so no corpus-sized Python list
        for i, length in enumerate(longest_side[start : start + (1 << 16)].tolist(), start):
            grown = max(longest, length)
            if (i - cuts[-1] + 1) * grown > max_tokens and i > cuts[-1]:
                cuts.append(i)
                longest = length
            else:
                longest = grown
    cuts.append(n)
    batches = [order[a:b] for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
    if rng is not None:
        batches = [batches[j] for j in rng.permutation(len(batches))]
    return batches


def epoch_batches(
    src_lens: np.ndarray,
    tgt_lens: np.ndarray,
    *,
    max_tokens: int,
    seed: int,
    epoch: int,
    parts: Sequence[int] = (),
    temperature: float = 1.0,
    weights: Sequence[float] | None = None,
) -> list[np.ndarray]:
    """One epoch's batches: a pure function of (seed, epoch), so a resumed run sees the same.

    With several `parts` (rows of one direction each, consecutive), every batch holds one
    part's pairs and parts are drawn by temperature sampling (`sampling_probabilities`), or
    in proportion to their `weights` when given."""
    rng = np.random.default_rng([seed, epoch])
    if len([n for n in parts if n]) < 2:
        return token_budget_batches(src_lens, tgt_lens, max_tokens, rng)
    starts = np.cumsum([0, *parts])
    per_part = [
        [
            b + np.int32(a)
            for b in token_budget_batches(src_lens[a:z], tgt_lens[a:z], max_tokens, rng)
        ]
        for a, z in zip(starts[:-1].tolist(), starts[1:].tolist())
    ]
    # As many batches as the parts hold together; a part drawn more often than it has batches
    # starts a fresh shuffle of them (upsampling), one drawn less leaves some for later epochs.
    p = sampling_probabilities(parts, temperature)
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64) * (np.asarray(parts) > 0)  # none from empties
        p = w / w.sum() if w.sum() > 0 else p
    picks = rng.choice(len(parts), size=sum(map(len, per_part)), p=p)
    out, used = [], [0] * len(parts)
    for k in picks.tolist():
        if used[k] == len(per_part[k]):
            per_part[k] = [per_part[k][j] for j in rng.permutation(len(per_part[k]))]
            used[k] = 0
        out.append(per_part[k][used[k]])
        used[k] += 1
    return out


def sampling_probabilities(sizes: Sequence[int], temperature: float) -> np.ndarray:
    """How often each direction is drawn: p_i ∝ (n_i / Σn)^(1/T) (Arivazhagan et al. 2019;
    T = 1 is proportional to size, T = 5 the M2M100/NLLB choice, T → ∞ uniform)."""
    share = np.asarray(sizes, dtype=np.float64) / max(sum(sizes), 1)
    p = share ** (1.0 / temperature)
    return p / p.sum()


def iterate(
    dataset, batches: Sequence[np.ndarray], ids: SpecialIds = DEFAULT_IDS
) -> Iterator[Batch]:
    """Collate the batches of a tokenized dataset (columns `src_ids`, `tgt_ids`)."""
    for idx in batches:
        yield _collate_rows(dataset, idx, ids)


def _collate_rows(dataset, idx: np.ndarray, ids: SpecialIds) -> Batch:
    rows = dataset[idx.tolist()]
    return collate(rows["src_ids"], rows["tgt_ids"], ids, rows.get("align"))


# Each batch gathers rows from all over the corpus, and the kernel maps 64 KiB around every row
# it reads (15-60 MiB a batch at 4k tokens). Once file-backed residency has grown this much since
# the loader started, mapped corpus pages go back to the page cache (a release costs ~1 ms).
RELEASE_ABOVE_BYTES = 64 << 20


class _CollatedBatches(torch.utils.data.Dataset):
    """Batches of a tokenized dataset, collated on access so a loader worker can do it."""

    def __init__(self, dataset, batches: Sequence[np.ndarray], ids: SpecialIds):
        self.dataset, self.batches, self.ids = dataset, batches, ids
        self._mapped_limit: int | None = None  # set in the process that reads (maybe a worker)

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> Batch:
        batch = _collate_rows(self.dataset, self.batches[i], self.ids)
        mapped = shared_resident_bytes()
        if self._mapped_limit is None:
            self._mapped_limit = mapped + RELEASE_ABOVE_BYTES
        elif mapped > self._mapped_limit:
            release_arrow_pages()
        return batch


def loader(
    dataset,
    batches: Sequence[np.ndarray],
    *,
    workers: int = 0,
    pin: bool = False,
    ids: SpecialIds = DEFAULT_IDS,
):
    """Batches in order, collated (and pinned) by `workers` background processes when > 0."""
    return torch.utils.data.DataLoader(
        _CollatedBatches(dataset, batches, ids),
        batch_size=None,  # items are whole batches already
        num_workers=workers,
        pin_memory=pin,
        prefetch_factor=4 if workers else None,
        # Its own generator: drawing worker seeds from the global RNG would shift dropout
        # and break bit-exact resume.
        generator=torch.Generator(),
    )


def update_groups(
    n_batches: int, start: int, *, world_size: int, rank: int, update_freq: int
) -> list[tuple[int, list[int]]]:
    """This rank's micro-batch indices for each update of an epoch, from batch `start` on.

    An update consumes `world_size × update_freq` consecutive batches; rank r takes the r-th
    run of `update_freq` of them. Each entry is (position after the update, indices). With
    several processes a last incomplete group is dropped, so every rank takes the same steps.
    """
    size = world_size * update_freq
    groups = []
    for first in range(start, n_batches, size):
        end = min(first + size, n_batches)
        if end - first < size and world_size > 1:
            break
        mine = first + rank * update_freq
        groups.append((end, list(range(mine, min(mine + update_freq, end)))))
    return groups
