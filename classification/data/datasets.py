"""Classification datasets: ImageNet-layout folders, CIFAR-10 (python pickle batches), Fashion-MNIST (IDX), and
the embedded default (the detection default's objects, one per image).

Unreadable images: `on_error="raise"` (default) raises ImageReadError naming the file; `on_error="skip"` drops
the sample, and `collate_skipping` reports every skipped path to the training loop, which counts and logs them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset, default_collate

from backbones.checkpoint_io import restricted_pickle_load

from .images import ImageReadError, open_image
from .objects import FASHION_MNIST_CLASSES, load_object_source, paste_object, random_background, read_fashion_mnist

__all__ = ["ImageFolderDataset", "Cifar10", "FashionMNIST", "EmbeddedObjects",
           "collate_skipping", "SKIPPED", "IMAGE_EXTENSIONS", "dataset_labels", "stratified_subset"]

logger = logging.getLogger(__name__)
IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png", ".bmp", ".webp", ".tif", ".tiff")
SKIPPED = "__skipped__"


def _load_rgb(path: str) -> Image.Image:
    return open_image(path).convert("RGB")  # grayscale / CMYK / RGBA / 16-bit -> 8-bit RGB


class ImageFolderDataset(Dataset):
    """`root/<split>/<class>/*.JPEG` (ImageNet layout). Classes are the sorted sub-directory names."""

    def __init__(self, root: str | os.PathLike, split: str = "train", transform: Callable | None = None,
                 on_error: str = "raise"):
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        split_dir = Path(root) / split
        if not split_dir.is_dir():
            raise FileNotFoundError(f"image folder split not found: {split_dir}")
        # hidden directories (.ipynb_checkpoints, .git) are not classes: one used to become class 0
        self.classes = sorted(d.name for d in os.scandir(split_dir) if d.is_dir() and not d.name.startswith("."))
        if not self.classes:
            raise ValueError(f"{split_dir}: no class sub-directories")
        self.samples, self.nested = [], 0
        for label, c in enumerate(self.classes):
            images = _images_under(os.path.join(split_dir, c))
            if not images:  # a class the net is trained to predict and never sees
                raise ValueError(f"{os.path.join(split_dir, c)}: no images with extensions {IMAGE_EXTENSIONS}; every "
                                 "class directory needs some")
            self.samples.extend((path, label) for _, path in images)
            self.nested += sum(depth > 0 for depth, _ in images)
        if self.nested:  # torchvision's ImageFolder reads them too; said, as a user may not expect it
            logger.info(f"{split_dir}: {self.nested} of {len(self.samples)} images are in sub-folders of their class "
                        "directory, read as that class")
        self.transform, self.on_error = transform, on_error

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        path, label = self.samples[i]
        try:
            img = _load_rgb(path)
        except ImageReadError:
            if self.on_error == "raise":
                raise
            return SKIPPED, path
        return (self.transform(img) if self.transform else img), label


def _images_under(folder: str) -> list[tuple[int, str]]:
    """(depth below `folder`, path) of every image in it and its sub-folders, as torchvision's ImageFolder orders
    them (by directory, then name; strings, not Paths: sorting Path objects took 65% of a 1.28M-file scan); hidden
    files and folders (macOS's "._0.png", .ipynb_checkpoints) are not images. A link to nothing is refused by name."""
    found, stack = [], [(folder, 0)]
    while stack:
        directory, depth = stack.pop()
        for e in os.scandir(directory):
            if e.name.startswith("."):
                continue
            if e.is_dir():
                stack.append((e.path, depth + 1))
            elif e.name.lower().endswith(IMAGE_EXTENSIONS):
                if e.is_symlink() and not os.path.exists(e.path):
                    raise ValueError(f"{e.path}: a link to {os.readlink(e.path)}, which does not exist")
                if e.is_file():
                    found.append((directory, e.name, depth))
    found.sort()
    return [(depth, os.path.join(directory, name)) for directory, name, depth in found]


class _ArrayDataset(Dataset):
    def __init__(self, images: np.ndarray, labels: np.ndarray, classes, transform: Callable | None):
        self.images, self.labels, self.classes, self.transform = images, labels, list(classes), transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        img = Image.fromarray(self.images[i])
        return (self.transform(img) if self.transform else img), int(self.labels[i])


class Cifar10(_ArrayDataset):
    """CIFAR-10 "python version": data_batch_1..5 / test_batch pickles (read with the restricted unpickler)."""

    CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

    def __init__(self, root: str | os.PathLike, split: str = "train", transform: Callable | None = None):
        root = Path(root)
        if (root / "cifar-10-batches-py").is_dir():
            root = root / "cifar-10-batches-py"
        files = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
        images, labels = [], []
        for name in files:
            path = root / name
            if not path.is_file():
                raise FileNotFoundError(f"CIFAR-10 batch not found: {path}")
            with open(path, "rb") as f:
                batch = restricted_pickle_load(f, str(path))
            data = batch.get(b"data", batch.get("data")) if isinstance(batch, dict) else None
            lab = batch.get(b"labels", batch.get("labels")) if isinstance(batch, dict) else None
            if data is None or lab is None:
                raise ValueError(f"{path}: not a CIFAR-10 batch (no data/labels)")
            pixels, lab = _cifar_pixels(data, path), _cifar_labels(lab, len(self.CLASSES), path)
            if len(lab) != len(pixels):  # 75 labels for 100 images shifted every later batch against its labels
                raise ValueError(f"{path}: {len(pixels)} images but {len(lab)} labels; a CIFAR-10 batch has one label "
                                 "per image")
            images.append(pixels.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
            labels.append(lab)
        super().__init__(np.concatenate(images), np.concatenate(labels), self.CLASSES, transform)


def _cifar_pixels(data, path: Path) -> np.ndarray:
    """A batch's `data` as (N, 3072) uint8, refusing what a cast would silently change: float data (a [0, 1] batch
    became all-black images) and integers outside 0-255 (int16 wrapped around)."""
    arr = np.asarray(data)
    if arr.dtype != np.uint8:
        if arr.dtype.kind not in "iu":
            raise ValueError(f"{path}: data is {arr.dtype}; CIFAR-10 batches hold uint8 pixels 0-255 (float data, "
                             "e.g. in [0, 1], would be cast to black images): write the batch as uint8")
        if arr.size and (arr.min() < 0 or arr.max() > 255):
            raise ValueError(f"{path}: data ({arr.dtype}) has values {arr.min()}..{arr.max()}; CIFAR-10 pixels are "
                             "0-255 (uint8)")
        arr = arr.astype(np.uint8)
    if arr.ndim not in (1, 2) or arr.size % 3072:
        raise ValueError(f"{path}: data has shape {arr.shape}; a CIFAR-10 batch is (N, 3072): N 32x32 RGB images")
    return arr.reshape(-1, 3072)


def _cifar_labels(lab, num_classes: int, path: Path) -> np.ndarray:
    arr = np.asarray(lab)
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or (arr.size and (arr.min() < 0 or arr.max() >= num_classes)):
        raise ValueError(f"{path}: labels must be a list of integers 0..{num_classes - 1}, got "
                         f"{arr.dtype} {arr.shape}" + (f" with values {arr.min()}..{arr.max()}"
                                                      if arr.size and arr.dtype.kind in "iuf" else ""))
    return arr.astype(np.int64)


class FashionMNIST(_ArrayDataset):
    """Fashion-MNIST IDX files (root: default objects.FASHION_MNIST_DIR), 28x28 gray padded to 32x32 and replicated
    to 3 channels so the CIFAR nets take it unchanged."""

    def __init__(self, root: str | os.PathLike | None = None, split: str = "train", transform: Callable | None = None):
        images, labels = read_fashion_mnist("train" if split == "train" else "test", root)
        images = np.pad(images, ((0, 0), (2, 2), (2, 2)))
        super().__init__(np.repeat(images[..., None], 3, axis=3), labels, FASHION_MNIST_CLASSES, transform)


class EmbeddedObjects(Dataset):
    """The embedded default: each image is one object of the detection default's source, in a random colour on a
    random gradient background, `image_size` pixels square. Deterministic per (seed, split, index)."""

    def __init__(self, split: str = "train", image_size: int = 32, transform: Callable | None = None,
                 length: int | None = None, seed: int = 0, prefer: str = "fashion-mnist"):
        src = load_object_source("train" if split == "train" else "test", prefer=prefer, seed=seed)
        self.source, self.classes = src.name, list(src.class_names)
        n = len(src.labels) if length is None else min(length, len(src.labels))
        self.objects, self.labels = src.images[:n], src.labels[:n]
        self.image_size, self.transform, self.seed, self.split = image_size, transform, seed, split

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        rng = np.random.default_rng([self.seed, 0 if self.split == "train" else 1, i])
        s = self.image_size
        img = random_background(rng, s)
        side = int(rng.integers(int(0.6 * s), s + 1))
        gray = np.asarray(Image.fromarray(self.objects[i]).resize((side, side), Image.BILINEAR), np.float32) / 255
        paste_object(img, gray, int(rng.integers(0, s - side + 1)), int(rng.integers(0, s - side + 1)), rng)
        pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
        return (self.transform(pil) if self.transform else pil), int(self.labels[i])


def dataset_labels(dataset) -> np.ndarray:
    """The label of every item, read without loading an image."""
    if isinstance(dataset, ImageFolderDataset):
        return np.fromiter((label for _, label in dataset.samples), dtype=np.int64, count=len(dataset.samples))
    return np.asarray(dataset.labels, dtype=np.int64)


def stratified_subset(labels, n: int, seed: int) -> np.ndarray:
    """`n` item indices (sorted), stratified by class and seeded: each class's items in a seeded random order,
    taken round-robin across the classes (in a seeded class order), so per-class counts differ by at most one
    (a class with too few items gives all it has). The first n of an image folder were all one class: a
    2-iteration model scored val top-1 100%."""
    labels = np.asarray(labels)
    if n >= len(labels):
        return np.arange(len(labels))
    rng = np.random.default_rng([seed, 38])
    perm = rng.permutation(len(labels))
    shuffled = labels[perm]
    classes, inverse = np.unique(shuffled, return_inverse=True)
    by_class = np.argsort(inverse, kind="stable")  # positions in `perm`, grouped by class, random within it
    starts = np.searchsorted(inverse[by_class], np.arange(len(classes)))
    rank = np.empty(len(labels), dtype=np.int64)
    rank[by_class] = np.arange(len(labels)) - starts[inverse[by_class]]  # each item's place within its class
    class_turn = rng.permutation(len(classes))  # which class comes first in every round
    key = rank * len(classes) + class_turn[inverse]
    return np.sort(perm[np.argsort(key, kind="stable")[:n]])


def collate_skipping(batch):
    """default_collate over the readable samples; returns (images, labels, skipped_paths)."""
    skipped = [b[1] for b in batch if isinstance(b[0], str) and b[0] == SKIPPED]
    kept = [b for b in batch if not (isinstance(b[0], str) and b[0] == SKIPPED)]
    if not kept:
        return torch.empty(0), torch.empty(0, dtype=torch.long), skipped
    images, labels = default_collate(kept)
    return images, labels, skipped
