"""classification/engine/datasets.py: one table names the pretraining datasets, builds them, and carries the recipe
facts (the batch of lr 0.1, which evaluation views apply) that ClsConfig and the trainer read."""

import pytest

from classification.engine.config import DATASETS, ClsConfig
from classification.engine.datasets import DATASET_TABLE, DatasetInfo, build_datasets


def test_the_config_offers_exactly_the_tables_datasets_and_refuses_others():
    assert DATASETS == tuple(DATASET_TABLE) == ("embedded", "fashion-mnist", "cifar10", "imagefolder",
                                                "imagefolder-small")
    with pytest.raises(ValueError, match="dataset must be one of"):
        ClsConfig(dataset="imagenet", output_dir="x")


def test_the_default_lr_is_0_1_at_each_datasets_reference_batch():
    for name, info in DATASET_TABLE.items():
        cfg = ClsConfig(dataset=name, batch_size=64, output_dir="x", data_root="r")
        assert cfg.base_lr(world_size=2) == pytest.approx(0.1 * 128 / info.reference_batch), name
    assert DATASET_TABLE["imagefolder"].reference_batch == 256 and DATASET_TABLE["imagefolder"].full_resolution_views


def test_a_dataset_is_one_entry_its_builder_called_with_the_config_and_subsets_applied(monkeypatch):
    """A new format: an entry whose builder returns (train, val); build_datasets applies train_samples /
    val_samples (stratified and seeded) as for every dataset that does not take its first items."""
    from classification.data.datasets import EmbeddedObjects

    seen = []

    def toy(cfg, mean, std):
        seen.append(cfg.dataset)
        items = EmbeddedObjects("test", 16, None, 40, 0)
        return items, items

    monkeypatch.setitem(DATASET_TABLE, "embedded", DatasetInfo("embedded", toy, 128, False))
    train, val, _ = build_datasets(ClsConfig(dataset="embedded", train_samples=20, val_samples=10, output_dir="x"))
    assert seen == ["embedded"] and (len(train), len(val)) == (20, 10)
    assert "stratified by class and seeded" in train.selection


def _folder(root, items):
    """root/<split>/<class>/<name>: an RGB image of side `size` and value `value` for each item."""
    from PIL import Image

    for split, cls, name, size, value in items:
        (root / split / cls).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (size, size), (value, value, value)).save(root / split / cls / name)


def test_a_small_image_folder_is_one_array_in_file_name_order_resized_to_the_image_size(tmp_path):
    """imagefolder-small: the images in memory (the embedded recipe's batch augmentation applies), labels from the
    sorted class directories, items in file-name order across the classes, each image resized to image_size."""
    from classification.data.composited import CompositedSet

    _folder(tmp_path, [("train", "b_dog", "0.png", 8, 10), ("train", "a_cat", "1.png", 16, 20),
                       ("train", "b_dog", "2.png", 8, 30), ("train", "a_cat", "3.png", 8, 40),
                       ("val", "a_cat", "0.png", 8, 50), ("val", "b_dog", "1.png", 8, 60)])
    cfg = ClsConfig(dataset="imagefolder-small", data_root=str(tmp_path), image_size=8, output_dir="x")
    train, val, _ = build_datasets(cfg)
    assert isinstance(train, CompositedSet) and train.classes == ["a_cat", "b_dog"]
    assert train.labels.tolist() == [1, 0, 1, 0] and train.images.shape == (4, 8, 8, 3)
    assert train.images[:, 0, 0, 0].tolist() == [10, 20, 30, 40] and len(val) == 2
    sub, _, _ = build_datasets(ClsConfig(dataset="imagefolder-small", data_root=str(tmp_path), image_size=8,
                                         train_samples=2, output_dir="x"))
    assert isinstance(sub, CompositedSet) and sorted(sub.labels.tolist()) == [0, 1]  # stratified, still an array


@pytest.mark.bad_input
def test_a_small_image_folder_whose_val_classes_differ_is_refused(tmp_path):
    _folder(tmp_path, [("train", "cat", "0.png", 8, 1), ("train", "dog", "1.png", 8, 1),
                       ("val", "cat", "0.png", 8, 1), ("val", "cow", "1.png", 8, 1)])
    with pytest.raises(ValueError, match="val's class directories differ from train's"):
        build_datasets(ClsConfig(dataset="imagefolder-small", data_root=str(tmp_path), image_size=8, output_dir="x"))
