"""Exactly resumable data order and augmentation.

ResumableSampler: the permutation of epoch e is a function of (seed, e) only, sharded across processes, and can
start mid-epoch. SeededSamples: seeds Python's and torch's RNG per sample from (seed, epoch, index) before the
transform runs, so a sample's augmentation does not depend on which worker loads it or on what ran before.
Together: a run resumed from the checkpoint of iteration k continues bit for bit as the uninterrupted run.
"""

from __future__ import annotations

import random

import torch
from torch.utils.data import Dataset, Sampler

__all__ = ["ResumableSampler", "SeededSamples"]


class ResumableSampler(Sampler):
    def __init__(self, size: int, *, seed: int = 0, rank: int = 0, world_size: int = 1, shuffle: bool = True):
        self.size, self.seed, self.rank, self.world, self.shuffle = size, seed, rank, world_size, shuffle
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Epoch `epoch`, skipping its first `start` samples of this process (resume mid-epoch)."""
        self.epoch, self.start = epoch, start

    def _indices(self) -> list[int]:
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 100003 + self.epoch)
            order = torch.randperm(self.size, generator=g).tolist()
        else:
            order = list(range(self.size))
        per_rank = self.size // self.world
        return order[self.rank * per_rank: (self.rank + 1) * per_rank]

    def __iter__(self):
        for i in self._indices()[self.start:]:
            yield (i, self.epoch)

    def __len__(self) -> int:
        return self.size // self.world - self.start


class SeededSamples(Dataset):
    """Wraps a dataset indexed by (index, epoch) keys from ResumableSampler."""

    def __init__(self, dataset: Dataset, seed: int = 0):
        self.dataset, self.seed = dataset, seed
        self.classes = getattr(dataset, "classes", None)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key):
        index, epoch = key if isinstance(key, tuple) else (key, 0)
        sample_seed = (self.seed * 1_000_003 + epoch) * 10_000_019 + index
        random.seed(sample_seed)
        torch.manual_seed(sample_seed % (2**63))
        return self.dataset[index]
