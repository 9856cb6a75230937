"""``LMDataModule``: batches of token windows whose content is a function of where they are.

Training batches are sampled the nanoGPT way, random windows with replacement, no epochs,
but the randomness is not a stream that runs alongside training: the global batch of step
``step`` is drawn from a ``torch.Generator`` seeded by a hash of ``(seed, step)``, and each
micro-batch is one slot of it (``Slots``: ``accumulate`` micro-batches on each of ``world``
ranks). So ``batch(step, slot, slots)`` is a pure function, and resuming needs nothing but
the step, which Lightning restores from the checkpoint before it asks for the loader. A
resumed run sees exactly the batches an uninterrupted one would; a run never replays the
start of the data after a restart (nanoGPT #467), and there is no loader state to save. The
hash, rather than ``seed + step``, keeps the streams of different seeds unrelated instead of
shifted copies of each other, which matters when recipes are compared paired by seed. One
process with batch 2b, one accumulating two micro-batches of b, and two DDP ranks of b all
see the same 2b windows at every step.

    batch(step, slot, slots) -> (x, y)   x, y: int64 [batch_size, seq_len]; each row is a
                                         window of seq_len + 1 tokens, y[:, t] the token
                                         after x[:, t]

With ``data.order=sequential`` the global batch of ``step`` is instead the next
``slots * batch_size`` consecutive windows of the train split, file after file and epoch after
epoch (``ShardSet.in_order``), as llm.c and modded-nanogpt read their shards: still a function
of the step alone. Either way the windows come from a ``ShardSet`` (shard_set.py), one file or
many, so the lab's prepared data and shards written elsewhere are drawn from alike.

Validation is fixed: ``val_batches`` global batches of windows spread evenly over the val
split, the same for every seed and run, so validation losses compare across seeds, recipes
and resumes; each rank evaluates its own slots of each. If the val split is too short for
that many non-overlapping windows, as many as fit are used, with a warning.

``state_dict`` records the data's fingerprint and the seed; resuming a checkpoint onto other
data, or with another seed (another batch order), is refused.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import lightning.pytorch as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader, Dataset, IterableDataset

from .config import DataConfig
from .prepared import as_shards, load_prepared, prepare, prepared_dir
from .shard_data import ShardData, load_shards
from .shard_set import ShardSet


def batch_seed(seed: int, step: int) -> int:
    """A 64-bit generator seed for the global batch of ``step`` (stable everywhere). The
    third packed id is 0: it was the rank before the ranks shared one draw, and keeping it
    keeps the batches of every single-process run."""
    digest = hashlib.blake2b(struct.pack("<3q", seed, step, 0), digest_size=8,
                             person=b"nvfp4-lab-train").digest()
    return int.from_bytes(digest, "little")


@dataclass(frozen=True)
class Slots:
    """How one step's global batch is spread: ``accumulate`` micro-batches on each of
    ``world`` ranks, so ``accumulate * world`` slots of ``batch_size`` rows. Micro-batch
    ``micro`` of ``rank`` is slot ``micro * world + rank``, rows [slot * b, (slot + 1) * b).
    Data and random bits are keyed by slot, so DDP on 2 ranks and one process accumulating 2
    micro-batches compute the same step; only the order of the gradient sum differs."""

    world: int = 1
    accumulate: int = 1
    rank: int = 0

    @classmethod
    def of(cls, trainer) -> Slots:
        """The trainer's layout (one slot without a trainer)."""
        if trainer is None:
            return cls()
        return cls(trainer.world_size, trainer.accumulate_grad_batches, trainer.global_rank)

    @property
    def count(self) -> int:
        return self.world * self.accumulate

    def slot(self, micro: int) -> int:
        return micro * self.world + self.rank


def _xy(rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """x, y: int64 [n, seq_len] from windows of seq_len + 1 tokens, [n, seq_len + 1]."""
    w = torch.from_numpy(rows)
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


class _TrainStream(IterableDataset):
    """This rank's slots of step ``start``, then of ``start + 1``, ... forever."""

    def __init__(self, dm: LMDataModule, start: int, slots: Slots):
        self.dm, self.start, self.slots = dm, start, slots

    def __iter__(self):
        step = self.start
        while True:
            for micro in range(self.slots.accumulate):
                yield self.dm.batch(step, self.slots.slot(micro), self.slots.count)
            step += 1


class _ValBatches(Dataset):
    """This rank's validation batches: global batch k's slot s is windows
    [(k * count + s) * b, ...) of the fixed val windows."""

    def __init__(self, tokens: ShardSet, starts: np.ndarray, seq_len: int, b: int,
                 slots: Slots):
        self.tokens, self.seq_len, self.b = tokens, seq_len, b
        n = -(-len(starts) // b)            # a short val split may end on a partial batch
        self.starts = [starts[i * b:(i + 1) * b] for i in range(n)
                       if i % slots.world == slots.rank]

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _xy(self.tokens.at(self.starts[i], self.seq_len))


def val_starts(n_tokens: int, seq_len: int, n_windows: int) -> np.ndarray:
    """Start offsets of ``n_windows`` windows (seq_len + 1 tokens each) spread evenly over
    ``n_tokens`` tokens, non-overlapping in their targets; fewer if fewer fit."""
    fit = (n_tokens - 1) // seq_len
    if fit < 1:
        raise ValueError(f"the val split has {n_tokens} tokens, fewer than one window of "
                         f"seq_len + 1 = {seq_len + 1}; shorten the sequence or hold out more "
                         "text (data.val_fraction / data.val_docs)")
    if n_windows > fit:
        rank_zero_warn(f"the val split ({n_tokens} tokens) holds only {fit} windows of "
                       f"{seq_len} tokens, not the {n_windows} asked for; using {fit}")
        n_windows = fit
    last = n_tokens - seq_len - 1  # the last start whose window fits
    return np.arange(n_windows, dtype=np.int64) * last // max(n_windows - 1, 1)


class LMDataModule(L.LightningDataModule):
    """Token windows from a prepared folder (prepared.py) or shards (shard_data.py) for
    next-token prediction."""

    def __init__(self, cfg: DataConfig, *, seq_len: int, batch_size: int, seed: int,
                 val_batches: int):
        """seq_len: tokens per window (the model's context); batch_size: windows per
        micro-batch, per rank; seed: picks the training windows; val_batches: the validation
        set is val_batches global batches of fixed windows (``Slots``)."""
        super().__init__()
        if seq_len < 1 or batch_size < 1 or val_batches < 1:
            raise ValueError(f"seq_len={seq_len}, batch_size={batch_size}, val_batches="
                             f"{val_batches} must all be positive")
        self.cfg = cfg
        self.seq_len, self.batch_size, self.seed = seq_len, batch_size, seed
        self.val_batches = val_batches
        self.data: ShardData | None = None

    def prepare_data(self) -> None:
        # Lightning calls this on one process per node, before setup on every process
        prepare(self.cfg)

    def setup(self, stage: str | None = None) -> None:
        if self.data is not None:
            return
        self.data = self._open()
        if self.data.train.n_starts(self.seq_len) < 1:
            raise ValueError(f"the train split has {self.data.train.n_tokens} tokens, fewer "
                             f"than one window of seq_len + 1 = {self.seq_len + 1} in any "
                             "one file")

    def _open(self) -> ShardData:
        if self.cfg.source == "shards":
            return load_shards(self.cfg)
        path = prepared_dir(self.cfg)
        if not (path / "meta.json").exists():
            raise FileNotFoundError(f"no prepared data at {path}; call prepare_data() first "
                                    "or run `nvfp4-lab prepare-data` with the same data=")
        return as_shards(load_prepared(path))

    def _loaded(self) -> ShardData:
        if self.data is None:
            raise RuntimeError("LMDataModule: call setup() first")
        return self.data

    @property
    def vocab_size(self) -> int:
        return self._loaded().vocab_size

    @property
    def fingerprint(self) -> str:
        """sha256 of the prepared data's meta.json (corpus checksum, split and tokenizer), or
        of the shards' names, formats and lengths."""
        return self._loaded().fingerprint

    @property
    def bytes_per_token(self) -> float | None:
        """UTF-8 bytes per token of the val split (None if the data does not say)."""
        return self._loaded().bytes_per_token

    @property
    def meta(self) -> dict:
        return self._loaded().meta

    def batch(self, step: int, slot: int = 0, slots: int = 1) -> tuple[torch.Tensor,
                                                                        torch.Tensor]:
        """Slot ``slot`` of training step ``step``'s global batch of ``slots`` micro-batches
        (``Slots``): x, y int64 [batch_size, seq_len]."""
        if step < 0 or not 0 <= slot < slots:
            raise ValueError(f"step={step}, slot={slot}, slots={slots}: need step >= 0 and "
                             "0 <= slot < slots")
        train, b, seq_len = self._loaded().train, self.batch_size, self.seq_len
        if self.cfg.order == "sequential":
            first = (step * slots + slot) * b
            return _xy(train.in_order(np.arange(first, first + b), seq_len))
        g = torch.Generator().manual_seed(batch_seed(self.seed, step))
        starts = torch.randint(0, train.n_starts(seq_len), (slots * b,), generator=g)
        return _xy(train.at(starts[slot * b:(slot + 1) * b].numpy(), seq_len))

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        start = trainer.global_step if trainer else 0
        # batch_size=None: the stream already yields whole batches; workers would only copy
        return DataLoader(_TrainStream(self, start, Slots.of(trainer)), batch_size=None,
                          num_workers=0)

    def val_dataloader(self) -> DataLoader:
        """``val_batches`` global batches of fixed windows; this rank's slots of each."""
        val, slots = self._loaded().val, Slots.of(self.trainer)
        b, seq_len = self.batch_size, self.seq_len
        # the val windows' starts, as if every file's were one stream (ShardSet.at)
        starts = val_starts(val.n_starts(seq_len) + seq_len, seq_len,
                            self.val_batches * slots.count * b)
        return DataLoader(_ValBatches(val, starts, seq_len, b, slots), batch_size=None,
                          shuffle=False)

    def state_dict(self) -> dict:
        return {"data_fingerprint": self.fingerprint, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        mine = self.state_dict()
        for key, what in (("data_fingerprint", "data"), ("seed", "seed")):
            if state.get(key) != mine[key]:
                raise ValueError(f"the checkpoint was trained with other {what} "
                                 f"({key} {state.get(key)!r}, this run {mine[key]!r}); "
                                 "resuming would change the batches it sees. Resume with "
                                 "the original data= and seed=, or start a new run.")
