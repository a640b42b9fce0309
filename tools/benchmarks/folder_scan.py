"""Section `folder_scan`: listing an ImageNet-sized image folder (1,000 classes, 1,281,167 files), ours
(classification.data.datasets.ImageFolderDataset: hidden files and directories skipped, extensions checked)
against torchvision.datasets.ImageFolder. Nothing is decoded; the two lists of (path, label) must be equal."""

from __future__ import annotations

from . import generated
from .rss import Side, peak_memory
from .stats import compare

__all__ = ["SIDES", "bench_folder_scan"]


def _ours(scale: float) -> Side:
    from classification.data.datasets import ImageFolderDataset

    root = generated.image_folder(scale)
    return Side(lambda: ImageFolderDataset(root, "train").samples)


def _reference(scale: float) -> Side:
    from torchvision.datasets import ImageFolder

    root = generated.image_folder(scale)
    return Side(lambda: ImageFolder(str(root / "train")).samples)


SIDES = {"ours": _ours, "reference": _reference}


def bench_folder_scan(repeats: int, scale: float = 1.0, *, memory: bool = True) -> dict:
    import torch

    ours, reference = _ours(scale), _reference(scale)
    row = compare(ours.run, reference.run, repeats, warmup=1, names=("ours", "torchvision"))
    a, b = ours.once(), reference.once()
    row["identical_samples"] = a == b
    if memory:  # both sides in fresh processes, a few seconds each
        row["memory"] = peak_memory("folder_scan", scale, torch.get_num_threads())
    row["conditions"] = f"{len(a)} files in {len({label for _, label in a})} classes (scale {scale:g}); " \
                        "ratio = torchvision's seconds / ours"
    return row
