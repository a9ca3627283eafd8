"""The batches a training run feeds each update: this process's share of an epoch's batches,
from the saved data position on, epoch after epoch."""

from __future__ import annotations

from collections.abc import Iterator

from seq2seq.data.augment import BatchAugmenter, augmented_loader, term_dictionary_for
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
        if t.cfg.data.augment.active():  # augmentation edits the text and places tags by links
            wanted = ["src", "tgt", "src_ids", "tgt_ids"]
            wanted += ["align"] if "align" in t.data.train.column_names else []
        self.token_ds = t.data.train.select_columns(wanted)
        self.terms = term_dictionary_for(
            t.cfg.data.augment, t.cfg.run_dir, t.data.train, save=t.info.rank == 0
        )
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
            groups = update_groups(
                len(batches),
                st.batch_in_epoch,
                world_size=info.world_size,
                rank=info.rank,
                update_freq=tc.update_freq,
            )
            positions = [i for _, indices in groups for i in indices]
            batch_iter = iter(self.loader([batches[i] for i in positions], positions, st.epoch))
            first = st.batch_in_epoch
            for end, indices in groups:
                micro = [next(batch_iter) for _ in indices]
                tokens = sum(int(self.tgt_lens[b].sum()) for b in batches[first:end])
                st.batch_in_epoch = first = end
                yield micro, tokens
            st.epoch += 1
            st.batch_in_epoch = 0

    def loader(self, batches: list, positions: list[int], epoch: int):
        """The collated batches (at these `positions` of the epoch's list), augmented when
        data.augment says so."""
        t = self.training
        ids = t.data.tokenizer.ids
        if not t.cfg.data.augment.active():
            return loader(self.token_ds, batches, workers=self.workers, pin=self.pin, ids=ids)
        augmenter = BatchAugmenter(
            t.cfg.data.augment,
            run_dir=t.cfg.run_dir,
            tokenizer=t.cfg.tokenizer,
            max_len=t.cfg.data.max_len,
            parts=t.data.train_parts,
            seed=t.cfg.train.seed,
            epoch=epoch,
            terms=self.terms,
        )
        return augmented_loader(
            self.token_ds,
            batches,
            positions,
            augmenter,
            workers=self.workers,
            pin=self.pin,
            ids=ids,
            with_align=t.cfg.train.alignment is not None,
        )

    def epoch_batches(self, epoch: int, stage: int = 0) -> list:
        """One epoch's batches, directions mixed as data.pairs and data.temperature say (parts
        of data.train by their weights, or the mix of the stage of train.stages)."""
        t = self.training
        return epoch_batches(
            self.src_lens,
            self.tgt_lens,
            max_tokens=t.cfg.train.max_tokens,
            seed=t.cfg.train.seed,
            epoch=epoch,
            parts=[p.rows for p in t.data.train_parts],
            temperature=t.cfg.data.temperature,
            weights=part_weights(t.cfg, t.data.train_parts, stage),
        )
