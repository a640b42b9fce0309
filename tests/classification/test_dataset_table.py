"""classification/engine/datasets.py: one table names the pretraining datasets, builds them, and carries the recipe
facts (the batch of lr 0.1, which evaluation views apply) that ClsConfig and the trainer read."""

import pytest

from classification.engine.config import DATASETS, ClsConfig
from classification.engine.datasets import DATASET_TABLE, DatasetInfo, build_datasets


def test_the_config_offers_exactly_the_tables_datasets_and_refuses_others():
    assert DATASETS == tuple(DATASET_TABLE) == ("embedded", "fashion-mnist", "cifar10", "imagefolder")
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
