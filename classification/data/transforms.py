"""The paper's augmentation (Sec. 3.4) and test-time views, on PIL images / uint8 tensors.

Training (ImageNet): shorter side resized to a random size in [256, 480], a random 224x224 crop, horizontal flip,
mean subtraction (per channel here; the paper subtracts a per-pixel mean image, recorded in the checkpoint's
metadata either way), AlexNet PCA colour ("lighting") noise. CIFAR: 4-pixel zero padding, random 32x32 crop, flip.
Testing: the center crop, the standard 10 crops (4 corners + center, and their flips), and fully-convolutional
evaluation at several shorter sides {224, 256, 384, 480, 640} with scores averaged.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch
from torchvision.transforms import v2 as T
from torchvision.transforms.v2 import functional as F

__all__ = ["RandomShorterSide", "Lighting", "imagenet_train_transform", "cifar_train_transform", "eval_transform",
           "ten_crop", "IMAGENET_PCA", "Normalize255"]

# AlexNet's PCA of ImageNet RGB pixel values (eigenvalues, eigenvectors), as in fb.resnet.torch.
IMAGENET_PCA = {
    "eigval": torch.tensor([0.2175, 0.0188, 0.0045]),
    "eigvec": torch.tensor([[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]]),
}


class RandomShorterSide(torch.nn.Module):
    """Resize so the shorter side is a random integer in [min_size, max_size] (scale augmentation)."""

    def __init__(self, min_size: int = 256, max_size: int = 480):
        super().__init__()
        self.min_size, self.max_size = min_size, max_size

    def forward(self, img):
        return F.resize(img, random.randint(self.min_size, self.max_size), antialias=True)


class Lighting(torch.nn.Module):
    """AlexNet PCA lighting noise on a float image in [0, 1] (C, H, W): add eigvec @ (alpha * eigval)."""

    def __init__(self, alphastd: float = 0.1, eigval: torch.Tensor | None = None, eigvec: torch.Tensor | None = None):
        super().__init__()
        self.alphastd = alphastd
        self.register_buffer("eigval", IMAGENET_PCA["eigval"] if eigval is None else eigval)
        self.register_buffer("eigvec", IMAGENET_PCA["eigvec"] if eigvec is None else eigvec)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        if self.alphastd == 0:
            return img
        alpha = torch.randn(3) * self.alphastd
        rgb = self.eigvec @ (alpha * self.eigval)
        return img + rgb.view(3, 1, 1).to(img.dtype)


class Normalize255(torch.nn.Module):
    """(x*255 - mean) / std with mean/std in 0-255 units (Detectron2's PIXEL_MEAN/STD convention), so the
    numbers stored in checkpoints are the ones the detector uses."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(-1, 1, 1) / 255.0)
        self.register_buffer("std", torch.tensor(std).view(-1, 1, 1) / 255.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)


def _to_float():
    return T.Compose([T.ToImage(), T.ToDtype(torch.float32, scale=True)])


def imagenet_train_transform(mean, std, *, crop: int = 224, scale: tuple[int, int] = (256, 480),
                             lighting: float = 0.1) -> T.Compose:
    return T.Compose([RandomShorterSide(*scale), T.RandomCrop(crop), T.RandomHorizontalFlip(), _to_float(),
                      Lighting(lighting), Normalize255(mean, std)])


def cifar_train_transform(mean, std, *, size: int = 32, padding: int = 4) -> T.Compose:
    return T.Compose([T.RandomCrop(size, padding=padding), T.RandomHorizontalFlip(), _to_float(),
                      Normalize255(mean, std)])


def eval_transform(mean, std, *, resize: int | None = 256, crop: int | None = 224) -> T.Compose:
    """Center-crop evaluation (resize=None/crop=None: the image as it is, e.g. CIFAR or multi-scale)."""
    steps = ([T.Resize(resize, antialias=True)] if resize else []) + ([T.CenterCrop(crop)] if crop else [])
    return T.Compose([*steps, _to_float(), Normalize255(mean, std)])


def ten_crop(img: torch.Tensor, crop: int) -> torch.Tensor:
    """The standard 10 views (C, H, W) -> (10, C, crop, crop): corners, center, and their horizontal flips."""
    return torch.stack(F.ten_crop(img, [crop, crop]))
