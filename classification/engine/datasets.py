"""The classification datasets, one table: name -> how to build its train and val sets and the recipe facts that
come with it (as pycls's dataset table; a new format is one entry in DATASET_TABLE and its builder). ClsConfig's
`dataset` choices and its default learning rate read the table; the trainer asks it which evaluation views apply."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from backbones.weight_formats import TORCHVISION_MEAN, TORCHVISION_STD

from ..data.composited import CompositedSet
from ..data.datasets import (
    Cifar10,
    EmbeddedObjects,
    FashionMNIST,
    ImageFolderDataset,
    dataset_labels,
    stratified_subset,
)
from ..data.transforms import cifar_train_transform, eval_transform, imagenet_train_transform

__all__ = ["DatasetInfo", "DATASET_TABLE", "build_datasets", "embedded_padding"]

logger = logging.getLogger("classification")


@dataclass(frozen=True)
class DatasetInfo:
    """One dataset: its builder (a ClsConfig, mean, std) -> (train, val) before any subset, and its recipe facts."""

    name: str
    build: Callable
    reference_batch: int  # the batch at which its recipe's lr is 0.1 (the paper: 256 on ImageNet, 128 on CIFAR)
    full_resolution_views: bool  # ImageNet-style images: ten-crop and multi-scale evaluation apply
    first_items: bool = False  # train_samples / val_samples take the first items (else a stratified, seeded subset)


def build_datasets(cfg):
    """(train, val, (mean, std)) of cfg.dataset, with cfg.train_samples / val_samples applied."""
    mean, std = TORCHVISION_MEAN, TORCHVISION_STD
    info = DATASET_TABLE[cfg.dataset]  # ClsConfig validated the name against the table
    train, val = info.build(cfg, mean, std)
    if info.first_items:
        return _first(cfg, train, val) + ((mean, std),)
    if cfg.train_samples and len(train) > cfg.train_samples:
        train = _stratified(train, cfg.train_samples, cfg.data_seed, "train_samples")
    if cfg.val_samples and len(val) > cfg.val_samples:
        val = _stratified(val, cfg.val_samples, cfg.data_seed, "val_samples")
    return train, val, (mean, std)


def _image_folder(cfg, mean, std) -> tuple:
    if not cfg.data_root:
        raise ValueError("dataset 'imagefolder' needs data_root (ImageNet layout: <root>/train/<class>/*.JPEG)")
    train = ImageFolderDataset(cfg.data_root, "train", imagenet_train_transform(mean, std), cfg.on_error)
    # center: 256 -> 224 crop; ten-crop: the 10 crops of the 256 image; multi-scale: the whole image
    val_tf = {"center": eval_transform(mean, std), "ten-crop": eval_transform(mean, std, crop=None),
              "multi-scale": eval_transform(mean, std, resize=None, crop=None)}[cfg.test_mode]
    val = ImageFolderDataset(cfg.data_root, "val", val_tf, cfg.on_error)
    if val.classes != train.classes:  # labels are indices into the sorted class list: they must be the same
        missing = sorted(set(train.classes) - set(val.classes))
        extra = sorted(set(val.classes) - set(train.classes))
        raise ValueError(f"{cfg.data_root}: val's classes differ from train's (missing in val: {missing[:5]}, "
                         f"not in train: {extra[:5]}); a label would mean another class")
    if len(train.classes) < 2:  # (a class directory without images: ImageFolderDataset refuses it, naming it)
        raise ValueError(f"{cfg.data_root}/train: only {len(train.classes)} class; classification needs at least 2")
    return train, val


def _small_image_folder(cfg, mean, std) -> tuple:
    """An ImageNet-style folder of small images read into memory at image_size (CompositedSet.from_folder) and
    trained as the embedded set is: the CIFAR recipe's padded crops and flips drawn per sample on whole batches
    (trainer.cached_batches), evaluated on the whole image. The main job's pretraining on a folder at its
    embedded scale; tools/export_embedded.py's folder gives the embedded path's numbers through it."""
    if not cfg.data_root:
        raise ValueError("dataset 'imagefolder-small' needs data_root (ImageNet layout: <root>/train/<class>/*)")
    train = CompositedSet.from_folder(cfg.data_root, "train", cfg.image_size, mean, std)
    if len(train.classes) < 2:  # a 1-class net's top-1 is 100% whatever it learns (the main job's check too)
        raise ValueError(f"{cfg.data_root}/train: only {len(train.classes)} class; classification needs at least 2")
    val = CompositedSet.from_folder(cfg.data_root, "val", cfg.image_size, mean, std)
    if val.classes != train.classes:
        raise ValueError(f"{cfg.data_root}: val's class directories differ from train's; a label would mean "
                         "another class")
    return train, val


def _small(cfg, mean, std) -> tuple:
    """The CIFAR recipe's transforms: crops of the padded 32-px image and flips; the whole image to evaluate."""
    return cifar_train_transform(mean, std), eval_transform(mean, std, resize=None, crop=None)


def _cifar10(cfg, mean, std) -> tuple:
    train_tf, test_tf = _small(cfg, mean, std)
    return Cifar10(cfg.data_root, "train", train_tf), Cifar10(cfg.data_root, "test", test_tf)


def _fashion_mnist(cfg, mean, std) -> tuple:
    train_tf, test_tf = _small(cfg, mean, std)
    kw = {"root": cfg.data_root} if cfg.data_root else {}
    return FashionMNIST(split="train", transform=train_tf, **kw), FashionMNIST(split="test", transform=test_tf, **kw)


def _stratified(dataset, n: int, seed: int, option: str):
    """`n` items of `dataset`, stratified by class and seeded (the first n of a class-sorted image folder were one
    class); the choice is logged and recorded in the run's evaluation.json (`subsets`)."""
    idx = stratified_subset(dataset_labels(dataset), n, seed)
    counts = np.bincount(dataset_labels(dataset)[idx], minlength=len(dataset.classes))
    if isinstance(dataset, CompositedSet):  # an array stays one: its training keeps the batch augmentation
        subset = dataset.take(idx)
    else:
        subset = torch.utils.data.Subset(dataset, idx.tolist())
        subset.classes = dataset.classes
    subset.selection = (f"{option} {n}: {len(idx)} of {len(dataset)} items, stratified by class and seeded "
                        f"(data_seed {seed}), {counts.min()}-{counts.max()} per class")
    logger.info(subset.selection)
    return subset


def _first(cfg, train, val) -> tuple:
    """The embedded set's subsets are its first items (rendered only those): its object source is in random class
    order already (Fashion-MNIST's published order; the synthetic shapes shuffled by data_seed). Logged and
    recorded like the stratified ones."""
    for dataset, option in ((train, "train_samples"), (val, "val_samples")):
        n = getattr(cfg, option)
        if n:
            dataset.selection = (f"{option} {n}: the first {len(dataset)} items of the embedded set (its object "
                                 "source is in random class order)")
            logger.info(dataset.selection)
    return train, val


def embedded_padding(image_size: int) -> int:
    """The CIFAR recipe's 4 px of padding at 32 px, scaled with the image."""
    return max(1, image_size // 8)


def _embedded_datasets(cfg, mean, std):
    """Train and val sets of the embedded objects: the cached rendering (CompositedSet) or the on-the-fly one
    (EmbeddedObjects in data-loader workers); the same images either way. `holdout`: val = the last N train items."""
    size = cfg.image_size
    tr = cifar_train_transform(mean, std, size=size, padding=embedded_padding(size))
    full = EmbeddedObjects("train", size, tr, None, cfg.data_seed)  # the object source (compositing is lazy)
    n_train = len(full)
    if cfg.holdout is not None and cfg.holdout >= n_train:
        raise ValueError(f"holdout {cfg.holdout} leaves no training items (the train split has {n_train})")
    fit = n_train - (cfg.holdout or 0)
    if cfg.train_samples:
        fit = min(fit, cfg.train_samples)
    if cfg.embedded_cache:  # render (or read) only the items this run uses
        full = CompositedSet.load("train", size, mean, std, seed=cfg.data_seed,
                                  stop=n_train if cfg.holdout else fit)
        train = full.slice(0, fit)
        val = (full.slice(n_train - cfg.holdout, n_train) if cfg.holdout else
               CompositedSet.load("test", size, mean, std, seed=cfg.data_seed, stop=cfg.val_samples))
        return train, val.slice(0, cfg.val_samples or len(val))
    else:
        small_test = eval_transform(mean, std, resize=None, crop=None)
        train = torch.utils.data.Subset(full, range(fit))
        train.classes = full.classes
        if cfg.holdout:
            val = torch.utils.data.Subset(EmbeddedObjects("train", size, small_test, None, cfg.data_seed),
                                          range(n_train - cfg.holdout, n_train))
            val.classes = full.classes
        else:
            val = EmbeddedObjects("test", size, small_test, cfg.val_samples, cfg.data_seed)
    if cfg.val_samples and len(val) > cfg.val_samples:
        val = torch.utils.data.Subset(val, range(cfg.val_samples))
        val.classes = full.classes
    return train, val


DATASET_TABLE = {d.name: d for d in (
    DatasetInfo("embedded", _embedded_datasets, 128, False, first_items=True),
    DatasetInfo("fashion-mnist", _fashion_mnist, 128, False),
    DatasetInfo("cifar10", _cifar10, 128, False),
    DatasetInfo("imagefolder", _image_folder, 256, True),
    DatasetInfo("imagefolder-small", _small_image_folder, 128, False),
)}
