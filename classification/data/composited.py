"""The embedded classification set rendered once: every composited image of `EmbeddedObjects` in one uint8 array,
cached on disk, and the CIFAR augmentation (zero-padded random crop + horizontal flip) applied to whole batches with
tensor ops.

Why: compositing an image costs ~0.3 ms of Python and NumPy, and the data-loader worker that did it for every step
took ~40% of one of the two cores the training step needs. The composite of item i is a function of (data seed,
split, i) only, so rendering it once changes nothing; the augmentation draws the same distributions as
torchvision's RandomCrop(size, padding) + RandomHorizontalFlip (offsets uniform in [0, 2 * padding], flip with
p = 0.5), from a generator seeded per (seed, stream position) so a resumed run continues exactly.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from .datasets import EmbeddedObjects, ImageFolderDataset
from .images import open_image

__all__ = ["CompositedSet", "render_composited", "load_composited", "augment_batch", "normalize_batch",
           "default_cache_root", "CACHE_VERSION", "load_folder_array"]

CACHE_VERSION = 1  # bump when EmbeddedObjects' compositing changes


def default_cache_root() -> Path:
    """Beside the embedded detection dataset: $DETECTRON2_DATASETS (default ./datasets) / embedded_cls."""
    return Path(os.path.expanduser(os.getenv("DETECTRON2_DATASETS", "datasets"))) / "embedded_cls"


def render_composited(split: str, size: int, seed: int = 0,
                      length: int | None = None) -> tuple[np.ndarray, np.ndarray, EmbeddedObjects]:
    """(images (N, size, size, 3) uint8, labels (N,) int64, the on-the-fly dataset), images[i] equal to
    `np.asarray(EmbeddedObjects(split, size, seed=seed)[i][0])` pixel for pixel (~0.3 ms an image, once)."""
    ds = EmbeddedObjects(split, size, None, length, seed)
    images = np.empty((len(ds), size, size, 3), np.uint8)
    for i in range(len(ds)):
        images[i] = np.asarray(ds[i][0], dtype=np.uint8)
    return images, np.asarray(ds.labels, dtype=np.int64), ds


def load_folder_array(root, split: str, size: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """An ImageNet-style folder's split (`root/split/<class>/*`) as one uint8 array (N, size, size, 3), its labels
    (indices into the sorted class directories, as every image folder's) and its classes. Each image is read by the
    one image reader and, unless it is size x size already, resized to it (the box filter, the whole image: as
    Downsampled ImageNet is made). Items in file-name order across the classes, not class by class: a folder written
    from an array (tools/export_embedded.py numbers its files) keeps the array's order, and so its sampling."""
    from PIL import Image

    folder = ImageFolderDataset(root, split)
    samples = sorted(folder.samples, key=lambda s: (os.path.basename(s[0]), s[1]))
    images = np.empty((len(samples), size, size, 3), np.uint8)
    for i, (path, _) in enumerate(samples):
        im = open_image(path).convert("RGB")  # grayscale / CMYK / RGBA / 16-bit -> 8-bit RGB
        images[i] = np.asarray(im if im.size == (size, size) else im.resize((size, size), Image.Resampling.BOX))
    return images, np.array([label for _, label in samples], dtype=np.int64), list(folder.classes)


def _fingerprint(labels: np.ndarray, source: str) -> str:
    return hashlib.sha256(source.encode() + np.ascontiguousarray(labels).tobytes()).hexdigest()[:16]


def load_composited(split: str, size: int, seed: int = 0, count: int | None = None,
                    root: str | os.PathLike | None = None) -> tuple[np.ndarray, np.ndarray, list[str], str]:
    """The first `count` items of the split rendered (all by default), from the cache when it holds at least those
    for this split, size, seed, source and labels: (images, labels, class names, source name). A cache that does
    not match (or holds fewer items) is rendered again."""
    probe = EmbeddedObjects(split, size, None, None, seed)  # reads the object source only (cheap)
    labels = np.asarray(probe.labels, dtype=np.int64)
    count = len(labels) if count is None else min(count, len(labels))
    key = f"{probe.source}_{split}_{size}px_seed{seed}_v{CACHE_VERSION}"
    root = Path(root) if root is not None else default_cache_root()
    data, meta = root / f"{key}.npy", root / f"{key}.json"
    expected = {"version": CACHE_VERSION, "split": split, "size": size, "seed": seed, "source": probe.source,
                "labels_sha256": _fingerprint(labels, probe.source)}
    try:
        cached = json.loads(meta.read_text())
        if {k: cached.get(k) for k in expected} == expected and cached.get("count", 0) >= count:
            images = np.load(data, allow_pickle=False)
            if images.shape == (cached["count"], size, size, 3) and images.dtype == np.uint8:
                return images[:count], labels[:count], list(probe.classes), probe.source
    except (OSError, ValueError, KeyError, AttributeError):
        pass  # absent or unreadable: render
    images, _, _ = render_composited(split, size, seed, count)
    root.mkdir(parents=True, exist_ok=True)
    tmp = data.with_name(f".{data.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.save(f, images, allow_pickle=False)
    meta_tmp = meta.with_name(f".{meta.name}.{os.getpid()}.tmp")
    meta_tmp.write_text(json.dumps({**expected, "count": count}, indent=1))
    os.replace(tmp, data)  # data first: a reader that sees the new meta finds at least that many items
    os.replace(meta_tmp, meta)
    return images, labels[:count], list(probe.classes), probe.source


def normalize_batch(images: torch.Tensor, mean, std) -> torch.Tensor:
    """uint8 (N, H, W, 3) -> float (N, 3, H, W) as Normalize255: (x - mean) / std in 0-255 units."""
    x = images.permute(0, 3, 1, 2).float()
    m = torch.as_tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.as_tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return (x - m) / s


def augment_batch(images: torch.Tensor, padding: int, draws) -> torch.Tensor:
    """Zero-padded random crop back to the input size, then a horizontal flip with p = 0.5, per image, on uint8
    (N, H, W, C) -- torchvision's RandomCrop(H, padding) + RandomHorizontalFlip, vectorised over the batch. `draws`:
    (N, 3) uniforms in [0, 1) per image (crop row, crop column, flip), e.g. sampling.position_uniforms."""
    n, h, w, _ = images.shape
    u = torch.as_tensor(draws, dtype=torch.float64)
    if u.shape != (n, 3) or not bool(((u >= 0) & (u < 1)).all()):
        raise ValueError(f"augment_batch: draws of shape {tuple(u.shape)} for {n} images; (N, 3) uniforms in [0, 1)")
    span = 2 * padding + 1
    padded = torch.nn.functional.pad(images, (0, 0, padding, padding, padding, padding))  # pad W and H with zeros
    # 0 .. 2 * padding, each with probability 1 / span (the clamp: u * span may round up to span)
    oy = (u[:, 0] * span).long().clamp_(max=span - 1)
    ox = (u[:, 1] * span).long().clamp_(max=span - 1)
    flip = u[:, 2] < 0.5
    ar_h, ar_w = torch.arange(h), torch.arange(w)
    rows = oy[:, None] + ar_h  # (N, H)
    cols = ox[:, None] + torch.where(flip[:, None], w - 1 - ar_w, ar_w)  # (N, W), reversed where flipped
    return padded[torch.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]


@dataclass
class CompositedSet(Dataset):
    """A rendered split (or a slice of one) as a dataset of normalised tensors (evaluation) and as the source of
    augmented training batches (`batch`)."""

    images: torch.Tensor  # (N, H, W, 3) uint8
    labels: torch.Tensor  # (N,) int64
    classes: list
    source: str
    mean: tuple
    std: tuple

    @classmethod
    def load(cls, split: str, size: int, mean, std, *, seed: int = 0, start: int = 0, stop: int | None = None,
             root=None) -> CompositedSet:
        images, labels, classes, source = load_composited(split, size, seed, stop, root)
        return cls(torch.from_numpy(images[start:]), torch.from_numpy(labels[start:]), classes, source,
                   tuple(mean), tuple(std))

    def __len__(self) -> int:
        return len(self.labels)

    def slice(self, start: int, stop: int) -> CompositedSet:
        """Items [start, stop) (views of the same arrays)."""
        return replace(self, images=self.images[start:stop], labels=self.labels[start:stop])

    def take(self, indices) -> CompositedSet:
        """The items at `indices` (a subset that stays an array: training keeps its batch augmentation)."""
        idx = torch.as_tensor(np.asarray(indices), dtype=torch.long)
        return replace(self, images=self.images[idx], labels=self.labels[idx])

    @classmethod
    def from_folder(cls, root, split: str, size: int, mean, std) -> CompositedSet:
        """An ImageNet-style folder's split in memory (load_folder_array)."""
        images, labels, classes = load_folder_array(root, split, size)
        return cls(torch.from_numpy(images), torch.from_numpy(labels), classes, f"folder {root}", tuple(mean),
                   tuple(std))

    def __getitem__(self, i: int):
        return normalize_batch(self.images[i:i + 1], self.mean, self.std)[0], int(self.labels[i])

    def batch(self, indices: torch.Tensor, padding: int, draws):
        """(normalised augmented images (N, 3, H, W), labels) for dataset `indices`, each augmented by its row of
        `draws` (augment_batch)."""
        return normalize_batch(augment_batch(self.images[indices], padding, draws), self.mean,
                               self.std), self.labels[indices]
