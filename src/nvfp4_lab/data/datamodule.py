"""``LMDataModule``: batches of token windows whose content is a function of where they are.

Training batches are sampled the nanoGPT way, random windows with replacement, no epochs,
but the randomness is not a stream that runs alongside training: micro-batch ``index`` of
rank ``rank`` is drawn from a ``torch.Generator`` seeded by a hash of ``(seed, index,
rank)``. So ``batch(index, rank)`` is a pure function, and resuming needs nothing but the
step: the train loader starts at ``index = global_step * accumulate_grad_batches``, which
Lightning restores from the checkpoint before it asks for the loader. A resumed run sees
exactly the batches an uninterrupted one would; a run never replays the start of the data
after a restart (nanoGPT #467), and there is no loader state to save. The hash, rather than
``seed + index``, keeps the streams of different seeds (and ranks) unrelated instead of
shifted copies of each other, which matters when recipes are compared paired by seed.

    batch(index, rank) -> (x, y)    x, y: int64 [batch_size, seq_len]; each row is a window
                                    of seq_len + 1 tokens, y[:, t] the token after x[:, t]

Validation is fixed: ``val_batches * batch_size`` windows spread evenly over the val split,
the same for every seed and run, so validation losses compare across seeds, recipes and
resumes. It is a map-style dataset, so under DDP Lightning's DistributedSampler shares the
windows among ranks. If the val split is too short for that many non-overlapping windows,
as many as fit are used, with a warning.

``state_dict`` records the data's fingerprint and the seed; resuming a checkpoint onto other
data, or with another seed (another batch order), is refused.
"""
from __future__ import annotations

import hashlib
import struct

import lightning.pytorch as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader, Dataset, IterableDataset

from .config import DataConfig
from .prepared import PreparedData, load_prepared, prepare, prepared_dir


def batch_seed(seed: int, index: int, rank: int) -> int:
    """A 64-bit generator seed for micro-batch ``index`` of ``rank`` (stable everywhere)."""
    digest = hashlib.blake2b(struct.pack("<3q", seed, index, rank), digest_size=8,
                             person=b"nvfp4-lab-train").digest()
    return int.from_bytes(digest, "little")


def _windows(tokens: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[torch.Tensor,
                                                                             torch.Tensor]:
    """x, y: int64 [len(starts), seq_len] from the windows tokens[s : s + seq_len + 1]."""
    idx = starts[:, None] + np.arange(seq_len + 1)  # [B, T + 1]
    w = torch.from_numpy(tokens[idx].astype(np.int64))
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


class _TrainStream(IterableDataset):
    """batch(start, rank), batch(start + 1, rank), ... forever."""

    def __init__(self, dm: LMDataModule, start: int, rank: int):
        self.dm, self.start, self.rank = dm, start, rank

    def __iter__(self):
        index = self.start
        while True:
            yield self.dm.batch(index, self.rank)
            index += 1


class _ValWindows(Dataset):
    """Fixed windows of the val split; item i: (x, y), int64 [seq_len] each."""

    def __init__(self, tokens: np.ndarray, starts: np.ndarray, seq_len: int):
        self.tokens, self.starts, self.seq_len = tokens, starts, seq_len

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = _windows(self.tokens, self.starts[i:i + 1], self.seq_len)
        return x[0], y[0]


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
    """Token windows from a prepared folder (prepared.py) for next-token prediction."""

    def __init__(self, cfg: DataConfig, *, seq_len: int, batch_size: int, seed: int,
                 val_batches: int):
        """seq_len: tokens per window (the model's context); batch_size: windows per
        micro-batch, per rank; seed: picks the training windows; val_batches: the validation
        set is val_batches * batch_size fixed windows, shared by all ranks."""
        super().__init__()
        if seq_len < 1 or batch_size < 1 or val_batches < 1:
            raise ValueError(f"seq_len={seq_len}, batch_size={batch_size}, val_batches="
                             f"{val_batches} must all be positive")
        self.cfg = cfg
        self.seq_len, self.batch_size, self.seed = seq_len, batch_size, seed
        self.val_batches = val_batches
        self.data: PreparedData | None = None

    def prepare_data(self) -> None:
        # Lightning calls this on one process per node, before setup on every process
        prepare(self.cfg)

    def setup(self, stage: str | None = None) -> None:
        if self.data is not None:
            return
        path = prepared_dir(self.cfg)
        if not (path / "meta.json").exists():
            raise FileNotFoundError(f"no prepared data at {path}; call prepare_data() first "
                                    "or run `nvfp4-lab prepare-data` with the same data=")
        self.data = load_prepared(path)
        if len(self.data.train) < self.seq_len + 1:
            raise ValueError(f"the train split has {len(self.data.train)} tokens, fewer than "
                             f"one window of seq_len + 1 = {self.seq_len + 1}")

    def _loaded(self) -> PreparedData:
        if self.data is None:
            raise RuntimeError("LMDataModule: call setup() first")
        return self.data

    @property
    def vocab_size(self) -> int:
        return self._loaded().vocab_size

    @property
    def bytes_per_token(self) -> float | None:
        """UTF-8 bytes per token of the val split (None if the data does not say)."""
        return self._loaded().bytes_per_token

    @property
    def meta(self) -> dict:
        return self._loaded().meta

    def batch(self, index: int, rank: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Training micro-batch ``index`` of ``rank``: x, y int64 [batch_size, seq_len]."""
        if index < 0 or rank < 0:
            raise ValueError(f"index={index}, rank={rank} must be >= 0")
        train = self._loaded().train
        g = torch.Generator().manual_seed(batch_seed(self.seed, index, rank))
        starts = torch.randint(0, len(train) - self.seq_len, (self.batch_size,), generator=g)
        return _windows(train, starts.numpy(), self.seq_len)

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        start = trainer.global_step * trainer.accumulate_grad_batches if trainer else 0
        rank = trainer.global_rank if trainer else 0
        # batch_size=None: the stream already yields whole batches; workers would only copy
        return DataLoader(_TrainStream(self, start, rank), batch_size=None, num_workers=0)

    def val_dataloader(self) -> DataLoader:
        val = self._loaded().val
        starts = val_starts(len(val), self.seq_len, self.val_batches * self.batch_size)
        return DataLoader(_ValWindows(val, starts, self.seq_len), batch_size=self.batch_size,
                          shuffle=False)

    def state_dict(self) -> dict:
        return {"data_fingerprint": self._loaded().fingerprint, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        mine = self.state_dict()
        for key, what in (("data_fingerprint", "data"), ("seed", "seed")):
            if state.get(key) != mine[key]:
                raise ValueError(f"the checkpoint was trained with other {what} "
                                 f"({key} {state.get(key)!r}, this run {mine[key]!r}); "
                                 "resuming would change the batches it sees. Resume with "
                                 "the original data= and seed=, or start a new run.")
