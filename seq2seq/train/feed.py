"""The batches a training run feeds each update: this process's share of an epoch's batches,
from the saved data position on, epoch after epoch."""

from __future__ import annotations

from collections.abc import Iterator

from seq2seq.data.augment import (
    AugmentedEpoch,
    EpochAugmenter,
    augmented_loader,
    term_dictionary_for,
)
from seq2seq.data.batching import Batch, epoch_batches, loader, update_groups
from seq2seq.data.corpus import lengths
from seq2seq.errors import UserError
from seq2seq.train.setup import Training
from seq2seq.train.stages import part_weights
from seq2seq.train.state import TrainState


class UpdateFeed:
    """The training split's lengths and token columns, and the loader settings that read it."""

    def __init__(self, training: Training):
        t = self.training = training
        tc = t.cfg.train
        self.src_lens, self.tgt_lens = lengths(t.data.train)  # tgt_len: target tokens + EOS
        wanted = ["src_ids", "tgt_ids"] + (["align"] if tc.alignment is not None else [])
        self.token_ds = t.data.train.select_columns(wanted)
        self.terms = term_dictionary_for(
            t.cfg.data.augment, t.cfg.run_dir, t.data.train, save=t.info.rank == 0
        )
        self._augmented: tuple[int, AugmentedEpoch] | None = None
        cuda = t.device.type == "cuda"
        self.workers = tc.num_workers if tc.num_workers is not None else int(cuda)
        self.pin = cuda

    def updates(self, st: TrainState) -> Iterator[tuple[list[Batch], int]]:
        """This process's micro-batches for each update, from the saved data position on, with
        the target tokens of the whole update (every process's batches): the loss is a mean
        over them. Batches are a pure function of the lengths, so no process need ask."""
        tc, info = self.training.cfg.train, self.training.info
        while tc.max_epochs is None or st.epoch < tc.max_epochs:
            batches = self.epoch_batches(st.epoch, st.stage)
            needed = info.world_size * tc.update_freq
            if len(batches) < needed:
                raise UserError(
                    f"an epoch has {len(batches)} batches but one update needs {needed} "
                    f"({info.world_size} processes × update_freq {tc.update_freq}); "
                    "lower train.max_tokens or update_freq, or use more data"
                )
            tgt_lens = self.epoch_lengths(st.epoch)[1]
            groups = update_groups(
                len(batches),
                st.batch_in_epoch,
                world_size=info.world_size,
                rank=info.rank,
                update_freq=tc.update_freq,
            )
            positions = [i for _, indices in groups for i in indices]
            batch_iter = iter(self.loader([batches[i] for i in positions], st.epoch))
            first = st.batch_in_epoch
            for end, indices in groups:
                micro = [next(batch_iter) for _ in indices]
                tokens = sum(int(tgt_lens[b].sum()) for b in batches[first:end])
                st.batch_in_epoch = first = end
                yield micro, tokens
            st.epoch += 1
            st.batch_in_epoch = 0

    def loader(self, batches: list, epoch: int):
        """The collated batches (of epoch `epoch`), with the epoch's augmented pairs when
        data.augment says so."""
        t = self.training
        ids = t.data.tokenizer.ids
        augmented = self.augmented(epoch)
        if augmented is None:
            return loader(self.token_ds, batches, workers=self.workers, pin=self.pin, ids=ids)
        return augmented_loader(
            self.token_ds,
            batches,
            augmented,
            workers=self.workers,
            pin=self.pin,
            ids=ids,
            with_align=t.cfg.train.alignment is not None,
        )

    def augmented(self, epoch: int) -> AugmentedEpoch | None:
        """Epoch `epoch`'s augmented pairs and lengths (kept for the epoch); None when
        data.augment is off."""
        t = self.training
        if not t.cfg.data.augment.active():
            return None
        if self._augmented is None or self._augmented[0] != epoch:
            self._augmented = None  # the last epoch's arrays go before this one's are built
            augmenter = EpochAugmenter(
                t.cfg.data.augment,
                tokenizer=t.data.tokenizer,
                max_len=t.cfg.data.max_len,
                parts=t.data.train_parts,
                seed=t.cfg.train.seed,
                terms=self.terms,
            )
            text = ["src", "tgt", "src_ids", "tgt_ids"]  # edits the text; tags go by links
            text += ["align"] if "align" in t.data.train.column_names else []
            ds = t.data.train.select_columns(text)
            self._augmented = (epoch, augmenter.epoch(ds, self.src_lens, self.tgt_lens, epoch))
        return self._augmented[1]

    def epoch_lengths(self, epoch: int):
        """Source and target lengths of every pair as epoch `epoch` feeds them."""
        augmented = self.augmented(epoch)
        if augmented is None:
            return self.src_lens, self.tgt_lens
        return augmented.src_lens, augmented.tgt_lens

    def epoch_batches(self, epoch: int, stage: int = 0) -> list:
        """One epoch's batches, directions mixed as data.pairs and data.temperature say (parts
        of data.train by their weights, or the mix of the stage of train.stages), cut on the
        pairs' lengths as augmented in that epoch."""
        t = self.training
        src_lens, tgt_lens = self.epoch_lengths(epoch)
        return epoch_batches(
            src_lens,
            tgt_lens,
            max_tokens=t.cfg.train.max_tokens,
            seed=t.cfg.train.seed,
            epoch=epoch,
            parts=[p.rows for p in t.data.train_parts],
            temperature=t.cfg.data.temperature,
            weights=part_weights(t.cfg, t.data.train_parts, stage),
        )
