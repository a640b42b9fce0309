"""The embedded pretraining data of classification.data.composited: the cached composites (equal to the on-the-fly
ones), the batch augmentation (equal to torchvision's), the held-out training items."""

import json

import numpy as np
import pytest
import torch
from torchvision.transforms.v2 import functional as F

from classification.data.composited import CompositedSet, augment_batch, load_composited, render_composited
from classification.data.datasets import EmbeddedObjects
from classification.data.sampling import position_uniforms
from classification.engine.config import ClsConfig


def test_cached_composites_equal_the_on_the_fly_ones_and_are_reused(tmp_path):
    for seed in (0, 3):
        images, labels, _ = render_composited("test", 32, seed, 12)
        ref = EmbeddedObjects("test", 32, None, 12, seed)
        for i in range(12):
            pil, label = ref[i]
            assert np.array_equal(np.asarray(pil), images[i]) and label == labels[i], (seed, i)
    first = load_composited("train", 24, 1, count=10, root=tmp_path)
    files = sorted(tmp_path.iterdir())
    stamp = [f.stat().st_mtime_ns for f in files]
    again = load_composited("train", 24, 1, count=6, root=tmp_path)  # fewer items: read from the cache
    assert [f.stat().st_mtime_ns for f in files] == stamp and np.array_equal(again[0], first[0][:6])
    more = load_composited("train", 24, 1, count=14, root=tmp_path)  # more items than cached: rendered again
    assert more[0].shape[0] == 14 and np.array_equal(more[0][:10], first[0])
    meta = next(f for f in tmp_path.iterdir() if f.suffix == ".json")
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "seed": 99}))  # a cache of another seed
    assert np.array_equal(load_composited("train", 24, 1, count=14, root=tmp_path)[0], more[0])
    assert json.loads(meta.read_text())["seed"] == 1


def test_batch_augmentation_is_torchvisions_crop_and_flip():
    images = torch.randint(0, 256, (16, 32, 32, 3), dtype=torch.uint8)
    draws = position_uniforms(5, np.arange(16), 3)
    out = augment_batch(images, 4, draws)
    oy, ox = (draws[:, 0] * 9).astype(int), (draws[:, 1] * 9).astype(int)  # crop offsets 0..8, flip p = 0.5
    flip = draws[:, 2] < 0.5
    assert 0 < int(flip.sum()) < 16 and len(set(oy.tolist())) > 1
    for i in range(16):
        ref = F.crop(F.pad(images[i].permute(2, 0, 1), [4]), int(oy[i]), int(ox[i]), 32, 32)
        ref = F.horizontal_flip(ref) if flip[i] else ref
        assert torch.equal(ref.permute(1, 2, 0), out[i]), i


def _small_fashion_mnist(root, n_train: int, n_test: int) -> None:
    """Fashion-MNIST's four IDX files (gzip, the real format) with n_train / n_test random items."""
    import gzip
    import struct

    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        with gzip.open(root / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
            f.write(bytes([0, 0, 8, 3]) + struct.pack(">3I", n, 28, 28) + rng.integers(0, 256, n * 784, np.uint8)
                    .tobytes())
        with gzip.open(root / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(bytes([0, 0, 8, 1]) + struct.pack(">I", n) + bytes(i % 10 for i in range(n)))


def test_holdout_is_the_last_training_items(tmp_path, monkeypatch):
    from classification.data import objects
    from classification.engine.trainer import build_datasets

    # a 200-item Fashion-MNIST: the held-out items are the last of the split, whose cache is rendered whole
    _small_fashion_mnist(tmp_path, 200, 50)
    monkeypatch.setattr(objects, "FASHION_MNIST_DIR", tmp_path)
    monkeypatch.setenv("DETECTRON2_DATASETS", str(tmp_path))
    cfg = ClsConfig(dataset="embedded", holdout=40, train_samples=100, output_dir=str(tmp_path / "o"))
    train, val, _ = build_datasets(cfg)
    assert isinstance(train, CompositedSet) and len(train) == 100 and len(val) == 40
    ref = EmbeddedObjects("train", 32)
    n = len(ref)
    assert n == 200 and ref.source == "fashion-mnist"
    assert np.array_equal(val.images[0].numpy(), np.asarray(ref[n - 40][0]))  # unaugmented, from the train split
    assert int(val.labels[-1]) == ref[n - 1][1]
    with pytest.raises(ValueError, match="embedded dataset only"):
        ClsConfig(dataset="cifar10", holdout=10)
    with pytest.raises(ValueError, match="leaves no training items"):
        build_datasets(ClsConfig(dataset="embedded", holdout=n, output_dir=str(tmp_path / "p")))
