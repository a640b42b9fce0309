"""The embedded default's source of objects: Fashion-MNIST items (real photos of clothing, 28x28, from Debian's
`dataset-fashion-mnist`) when installed, otherwise deterministic synthetic shapes. Classification pretraining
uses them as images; the detection default composites them into scenes, so pretraining and transfer share one
source."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .idx import read_idx

__all__ = ["FASHION_MNIST_DIR", "FASHION_MNIST_CLASSES", "SHAPE_CLASSES", "ObjectSource", "fashion_mnist_files",
           "read_fashion_mnist", "load_object_source", "random_background", "paste_object"]

FASHION_MNIST_DIR = Path(os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
FASHION_MNIST_CLASSES = ("tshirt_top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
                         "bag", "ankle_boot")
SHAPE_CLASSES = ("disc", "square", "triangle", "cross", "ring", "bar", "diamond", "hourglass", "frame", "dots")


@dataclass
class ObjectSource:
    """Grayscale object images (N, 28, 28) uint8 with labels, for one split."""

    name: str  # "fashion-mnist" or "synthetic-shapes"
    images: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]

    def subset(self, class_names: tuple[str, ...]) -> ObjectSource:
        """Only `class_names`, relabelled 0..len-1 in that order."""
        idx = [self.class_names.index(c) for c in class_names]
        keep = np.isin(self.labels, idx)
        remap = {old: new for new, old in enumerate(idx)}
        return ObjectSource(self.name, self.images[keep], np.array([remap[v] for v in self.labels[keep]]),
                            tuple(class_names))


def _draw_shape(kind: int, rng: np.random.Generator, size: int = 28) -> np.ndarray:
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    c = size / 2 - 0.5 + rng.uniform(-1.5, 1.5, 2)
    r = rng.uniform(8, 12)
    dx, dy = np.abs(xx - c[0]), np.abs(yy - c[1])
    dist = np.hypot(xx - c[0], yy - c[1])
    if kind == 0:
        m = dist < r
    elif kind == 1:
        m = (dx < r * 0.85) & (dy < r * 0.85)
    elif kind == 2:
        m = (yy - c[1] < r * 0.8) & (yy - c[1] > -r) & (dx < (yy - c[1] + r) * 0.55)
    elif kind == 3:
        m = ((dx < r * 0.3) & (dy < r)) | ((dy < r * 0.3) & (dx < r))
    elif kind == 4:
        m = (dist < r) & (dist > r * 0.55)
    elif kind == 5:
        m = (dx < r) & (dy < r * 0.35)
    elif kind == 6:
        m = dx + dy < r
    elif kind == 7:
        m = (dy < r) & (dx < dy * 0.8 + 1.5)
    elif kind == 8:
        m = (dx < r) & (dy < r) & ~((dx < r * 0.55) & (dy < r * 0.55))
    else:
        m = np.zeros_like(dist, dtype=bool)
        for ox in (-0.5, 0.5):
            for oy in (-0.5, 0.5):
                m |= np.hypot(xx - c[0] - ox * r, yy - c[1] - oy * r) < r * 0.35
    shade = rng.uniform(150, 255)
    return (m * shade).astype(np.uint8)


def _synthetic(split: str, per_class: int, seed: int) -> ObjectSource:
    rng = np.random.default_rng([seed, 0 if split == "train" else 1])
    labels = np.repeat(np.arange(len(SHAPE_CLASSES)), per_class)
    rng.shuffle(labels)
    images = np.stack([_draw_shape(int(k), rng) for k in labels])
    return ObjectSource("synthetic-shapes", images, labels, SHAPE_CLASSES)


def fashion_mnist_files(split: str, root: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """(images, labels) IDX files of Fashion-MNIST's `split` ("train" or "test") under `root` (default:
    FASHION_MNIST_DIR, i.e. $FASHION_MNIST_DIR or Debian's /usr/share/datasets/fashion-mnist): the one place
    that knows where and under which names."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    prefix = "train" if split == "train" else "t10k"
    root = Path(root) if root is not None else FASHION_MNIST_DIR
    return root / f"{prefix}-images-idx3-ubyte.gz", root / f"{prefix}-labels-idx1-ubyte.gz"


def read_fashion_mnist(split: str, root: str | os.PathLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST's `split`: (N, 28, 28) uint8 images and their int64 labels; the counts must agree."""
    images_file, labels_file = fashion_mnist_files(split, root)
    images, labels = read_idx(images_file), read_idx(labels_file)
    if len(images) != len(labels):
        raise ValueError(f"{images_file} has {len(images)} images but {labels_file} {len(labels)} labels")
    return np.asarray(images), np.asarray(labels, dtype=np.int64)


def load_object_source(split: str = "train", *, prefer: str = "fashion-mnist", synthetic_per_class: int = 300,
                       seed: int = 0) -> ObjectSource:
    """Fashion-MNIST's `split` ("train" = 60k, "test" = 10k) if installed and preferred, else synthetic shapes."""
    images_file, labels_file = fashion_mnist_files(split)
    if prefer == "fashion-mnist" and images_file.is_file() and labels_file.is_file():
        return ObjectSource("fashion-mnist", *read_fashion_mnist(split), FASHION_MNIST_CLASSES)
    if prefer not in ("fashion-mnist", "synthetic"):
        raise ValueError(f"prefer must be 'fashion-mnist' or 'synthetic', got {prefer!r}")
    return _synthetic(split, synthetic_per_class, seed)


def random_background(rng: np.random.Generator, size: int) -> np.ndarray:
    """A smooth two-colour gradient at a random angle plus pixel noise, float (size, size, 3) in ~[0, 255]."""
    c0, c1 = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    angle = rng.uniform(0, np.pi)
    yy, xx = np.mgrid[0:size, 0:size] / max(size - 1, 1)
    t = np.cos(angle) * xx + np.sin(angle) * yy
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    img = c0[None, None] * (1 - t[..., None]) + c1[None, None] * t[..., None]
    return img + rng.normal(0, 8, img.shape)


def paste_object(img: np.ndarray, gray: np.ndarray, x: int, y: int, rng: np.random.Generator) -> None:
    """Composite a grayscale object (float [0, 1], already at its final size) at (x, y) in a random colour; its
    intensity is both the opacity and the texture. In place."""
    side_y, side_x = gray.shape
    colour = rng.uniform(0, 255, 3)
    alpha = np.clip(gray * 1.6, 0, 1)[..., None]
    texture = (0.45 + 0.55 * gray)[..., None] * colour
    patch = img[y:y + side_y, x:x + side_x]
    img[y:y + side_y, x:x + side_x] = patch * (1 - alpha) + texture * alpha
