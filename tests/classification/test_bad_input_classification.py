"""Bad input of the classification pipeline that used to give silently wrong numbers: `--train-samples` /
`--val-samples` subsets of one class, CIFAR batches a cast would change, an unbounded width."""

import logging
import re

import numpy as np
import pytest
from PIL import Image

from backbones import create_model
from classification.engine.config import ClsConfig

pytestmark = pytest.mark.bad_input


# ---- silently wrong before: classification subsets, CIFAR batches, width --------------------------------------------

def test_sample_subsets_are_stratified_seeded_and_recorded(tmp_path, caplog):
    """`--val-samples 4` evaluated the first 4 files of a class-sorted folder -- all one class (a 2-iteration model:
    top-1 100%); `--train-samples` trained on one class the same way."""
    from classification.engine.trainer import build_datasets

    for split in ("train", "val"):
        for c in ("a", "b", "c"):
            (tmp_path / split / c).mkdir(parents=True)
            for i in range(6):
                Image.new("RGB", (8, 8)).save(tmp_path / split / c / f"{i}.png")
    (tmp_path / "train" / "a" / "._0.png").write_bytes(b"\0\5")  # a macOS resource fork is not an image
    cfg = ClsConfig(dataset="imagefolder", data_root=str(tmp_path), train_samples=7, val_samples=4,
                    output_dir=str(tmp_path / "out"))
    with caplog.at_level(logging.INFO, logger="classification"):
        train, val, _ = build_datasets(cfg)
    labels = [[ds.dataset.samples[i][1] for i in ds.indices] for ds in (train, val)]
    assert sorted(np.bincount(labels[0], minlength=3)) == [2, 2, 3] and len(set(labels[1])) == 3
    assert val.selection.startswith("val_samples 4: 4 of 18 items, stratified by class and seeded (data_seed 0)")
    assert "stratified by class" in caplog.text
    assert build_datasets(cfg)[0].indices == train.indices  # the same items every time, for every training seed
    assert len(train.dataset) == 18 and not any("._" in p for p, _ in train.dataset.samples)
    assert build_datasets(ClsConfig(**{**cfg.__dict__, "data_seed": 1}))[0].indices != train.indices


def _cifar(tmp_path, data, labels, name="test_batch"):
    import pickle

    with open(tmp_path / name, "wb") as f:
        pickle.dump({b"data": data, b"labels": labels}, f, protocol=2)


@pytest.mark.parametrize("data,labels,match", [
    (np.random.default_rng(0).uniform(0, 1, (4, 3072)).astype(np.float32), [0, 1, 2, 3],
     r"test_batch: data is float32; CIFAR-10 batches hold uint8 pixels 0-255"),
    (np.full((4, 3072), 300, np.int16), [0, 1, 2, 3], r"test_batch: data \(int16\) has values 300..300; CIFAR-10"),
    (np.zeros((4, 3072), np.uint8), [0, 1, 2], r"test_batch: 4 images but 3 labels"),
    (np.zeros((4, 3072), np.uint8), [0, 1, 2, 10], r"test_batch: labels must be a list of integers 0..9"),
])
def test_cifar_batches_that_a_cast_would_change_are_refused(tmp_path, data, labels, match):
    """float32 data in [0, 1] was cast to uint8 (every pixel 0 or 1: black images, exit 0), int16 wrapped; a batch
    with fewer labels than images shifted the labels of every later batch."""
    from classification.data.datasets import Cifar10

    _cifar(tmp_path, data, labels)
    with pytest.raises(ValueError, match=match):
        Cifar10(tmp_path, "test")
    _cifar(tmp_path, np.full((4, 3072), 255, np.int64), [0, 1, 2, 3])  # integers within 0-255 read unchanged
    assert np.asarray(Cifar10(tmp_path, "test")[0][0]).max() == 255


def test_classification_width_is_bounded_as_detection_s():
    """`train_cls --model-option width=64` allocated ~180 GB of weights; detection capped MODEL.BACKBONES.WIDTH at
    16. One bound (backbones.width.MAX_WIDTH) for both, refused before any weight exists."""
    from backbones.width import MAX_WIDTH
    from classification.engine.config import add_config_arguments, config_from_args

    assert MAX_WIDTH == 16
    with pytest.raises(ValueError, match=r"model option \(--model-option\) width 64 is above the largest multiplier, "
                                         "16"):
        ClsConfig(model_options={"width": 64})
    with pytest.raises(ValueError, match="width 16.5 is above the largest multiplier"):
        create_model("cifar_resnet20", width=16.5)
    import argparse

    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    with pytest.raises(ValueError, match="width 64 is above"):
        config_from_args(parser.parse_args(["--model-option", "width=64"]))
    assert ClsConfig(model_options={"width": 0.25}).model_options == {"width": 0.25}


def test_a_home_relative_output_dir_is_expanded(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ClsConfig(output_dir="~/runs/r20").output_dir == str(tmp_path / "runs" / "r20")  # not ./~/runs/r20


@pytest.mark.parametrize("option, value", [("seed", 2**32), ("seed", -1), ("data_seed", 2**40)])
def test_a_seed_outside_numpys_range_is_refused_naming_the_option(option, value):
    """numpy's seeds are 32-bit: --seed 2**32 stopped training with "Seed must be between 0 and 2**32 - 1"."""
    with pytest.raises(ValueError, match=re.escape(f"{option} must be an integer in [0, 2**32), got {value}")):
        ClsConfig(**{option: value})
    assert ClsConfig(seed=2**32 - 1).seed == 2**32 - 1


@pytest.mark.parametrize("option, value, match", [
    ("lr", float("nan"), "lr must be positive and finite, got nan"),
    ("lr", -0.1, "lr must be positive and finite, got -0.1"),
    ("momentum", float("nan"), r"momentum must be in \[0, 1\), got nan"),
    ("weight_decay", float("inf"), "weight_decay \\(finite\\)"),
    ("warmup_until_error", float("nan"), r"warmup_until_error is a training error in \[0, 1\], got nan"),
])
def test_optimizer_numbers_that_cannot_train_are_refused_naming_the_option(option, value, match):
    """As detection's SOLVER.BASE_LR .nan: refused before training, not "training diverged" (or, for
    warmup_until_error NaN, a warm-up that never ends)."""
    with pytest.raises(ValueError, match=match):
        ClsConfig(**{option: value})


@pytest.mark.parametrize("content", ["empty", "truncated"])
def test_an_unreadable_image_read_in_a_loader_worker_is_one_line_naming_the_file(tmp_path, capsys, content):
    """A zero-byte or truncated .jpg in an image folder, read by a DataLoader worker (--workers 2): the loader
    re-raised it with the worker's 20-line traceback as its message, which the entry point printed whole. (The
    worker's error is wrapped here as the loader wraps it: a real worker costs 5 s of shutdown after an error.)"""
    from torch._utils import ExceptionWrapper

    from classification.data.datasets import ImageFolderDataset
    from classification.data.images import ImageReadError
    from classification.engine.cli import user_errors

    for c in ("a", "b"):
        (tmp_path / "train" / c).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "train" / c / "0.jpg")
    bad = tmp_path / "train" / "a" / "1.jpg"
    bad.write_bytes(b"" if content == "empty" else (tmp_path / "train" / "b" / "0.jpg").read_bytes()[:200])
    dataset = ImageFolderDataset(tmp_path, "train")
    try:
        dataset[dataset.samples.index((str(bad), 0))]
    except ImageReadError:
        wrapped = ExceptionWrapper(where="in DataLoader worker process 0")
    with pytest.raises(SystemExit) as exit_, user_errors():
        wrapped.reraise()
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(f"error: ImageReadError: {bad}: cannot read image (") and \
        lines[0].endswith(") (in a data-loader worker)") and lines[1:] == ["(--debug shows the traceback)"], lines


# ---- image folders a user hands the pretraining (bad7 cases 2-4 and the dangling link) ------------------------------

def _folder(root, classes: dict[str, int], split="train"):
    for c, n in classes.items():
        (root / split / c).mkdir(parents=True)
        for i in range(n):
            Image.new("RGB", (8, 8)).save(root / split / c / f"{i}.png")


def test_a_class_directory_without_images_is_refused_naming_it(tmp_path):
    """It pretrained an N-class classifier with a class it never saw, exit 0."""
    from classification.data.datasets import ImageFolderDataset

    _folder(tmp_path, {"a": 2, "b": 2, "empty": 0})
    (tmp_path / "train" / "empty" / "notes.txt").write_text("no images here")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'train' / 'empty'}: no images with extensions")):
        ImageFolderDataset(tmp_path, "train")


def test_a_folder_of_one_class_is_refused_before_the_main_job_pretrains_on_it(tmp_path):
    """A 1-class net's top-1 is trivially 100%: the main job's folder check and train_cls's small-image folder
    (the main job's pretraining path) refuse it, as train_cls's imagefolder did."""
    from classification.engine.config import ClsConfig
    from classification.engine.trainer import build_datasets
    from detection.main_job.data import DataError, DetectData, PretrainData, check_data

    _folder(tmp_path, {"only": 3})
    _folder(tmp_path, {"only": 1}, split="val")
    with pytest.raises(DataError, match=r"train/ has one class directory \(only\); a classifier needs at least two"):
        check_data(PretrainData(str(tmp_path)), DetectData())
    cfg = ClsConfig(dataset="imagefolder-small", data_root=str(tmp_path), image_size=8)
    with pytest.raises(ValueError, match=r"only 1 class; classification needs at least 2"):
        build_datasets(cfg)


def test_images_in_sub_folders_of_a_class_are_read_as_that_class_and_said(tmp_path, caplog):
    """140 of 280 images in nested folders were silently left out; torchvision's ImageFolder reads them, in its
    order (by directory, then name)."""
    from torchvision.datasets import ImageFolder

    from classification.data.datasets import ImageFolderDataset

    _folder(tmp_path, {"a": 2, "b": 1})
    for sub in ("x", "y/z"):
        (tmp_path / "train" / "a" / sub).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "train" / "a" / sub / "9.jpg")
    with caplog.at_level(logging.INFO, logger="classification.data.datasets"):
        ours = ImageFolderDataset(tmp_path, "train")
    assert ours.samples == ImageFolder(str(tmp_path / "train")).samples and len(ours) == 5 and ours.nested == 2
    assert "2 of 5 images are in sub-folders of their class directory, read as that class" in caplog.text


def test_a_link_to_nothing_is_named_not_a_bare_errno(tmp_path):
    from classification.data.datasets import ImageFolderDataset
    from detection.main_job.data import DataError, DetectData, PretrainData
    from detection.main_job.data_identity import data_identity

    _folder(tmp_path, {"a": 2, "b": 2})
    _folder(tmp_path, {"a": 1, "b": 1}, split="val")
    link = tmp_path / "train" / "a" / "gone.png"
    link.symlink_to(tmp_path / "elsewhere" / "gone.png")
    with pytest.raises(ValueError, match=re.escape(f"{link}: a link to {tmp_path / 'elsewhere' / 'gone.png'}, "
                                                   "which does not exist")):
        ImageFolderDataset(tmp_path, "train")
    link.unlink()
    other = tmp_path / "train" / "b" / "readme.txt"  # not an image: the folder's identity still lists it
    other.symlink_to(tmp_path / "nowhere.txt")
    with pytest.raises(DataError, match=re.escape(f"{other}: No such file or directory (a link to ")):
        data_identity(PretrainData(str(tmp_path)), DetectData())
