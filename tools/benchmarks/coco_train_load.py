"""Section `coco_train_load`: a train2017-sized COCO json (118k images, ~860k annotations) from file to the training
dataset dicts, ours (register_coco + detection.engine.data.train_dataset_dicts: one parse, the checks and the box
clipping of datasets/coco.py, images checked to exist) against Detectron2's trainer path (register_coco_instances
+ get_detection_dataset_dicts with FILTER_EMPTY_ANNOTATIONS, as build_detection_train_loader calls it). Every rank
of a job and every restart of it pays this once. The records must agree (file, size, id, boxes, classes, crowd)."""

from __future__ import annotations

import logging

import numpy as np

from . import generated
from .rss import Side, peak_memory
from .stats import compare

__all__ = ["SIDES", "bench_coco_train_load"]

OURS, REFERENCE = "bench_coco_train_ours", "bench_coco_train_d2"


def _ours(scale: float) -> Side:
    from detection import get_detection_cfg
    from detection.datasets.coco import register_coco
    from detection.engine.data import train_dataset_dicts

    data = generated.coco_train(scale)
    cfg = get_detection_cfg(None, ["DATASETS.TRAIN", f"('{OURS}',)", "MODEL.ROI_HEADS.NUM_CLASSES", "80"],
                            read_weights=False)

    def run():
        register_coco(OURS, str(data.json_file), str(data.image_root))
        return train_dataset_dicts(cfg)

    return Side(run)


def _reference(scale: float) -> Side:
    from detectron2.data import DatasetCatalog, MetadataCatalog, get_detection_dataset_dicts
    from detectron2.data.datasets import register_coco_instances

    data = generated.coco_train(scale)

    def run():
        if REFERENCE in DatasetCatalog.list():
            DatasetCatalog.remove(REFERENCE)
            MetadataCatalog.remove(REFERENCE)
        register_coco_instances(REFERENCE, {}, str(data.json_file), str(data.image_root))
        return get_detection_dataset_dicts([REFERENCE], filter_empty=True)

    return Side(run)


SIDES = {"ours": _ours, "reference": _reference}


def same_records(ours: list[dict], reference: list[dict]) -> bool:
    """Same images in the same order and, per image, the same boxes (XYXY; Detectron2 keeps XYWH), classes and
    crowd flags."""
    from detectron2.structures import BoxMode

    if [(d["file_name"], d["height"], d["width"], d["image_id"]) for d in ours] != \
            [(d["file_name"], d["height"], d["width"], d["image_id"]) for d in reference]:
        return False
    for a, b in zip(ours, reference):
        if [(x["category_id"], x.get("iscrowd", 0)) for x in a["annotations"]] != \
                [(x["category_id"], x.get("iscrowd", 0)) for x in b["annotations"]]:
            return False
        boxes_a = np.array([x["bbox"] for x in a["annotations"]], dtype=float).reshape(-1, 4)
        boxes_b = np.array([BoxMode.convert(x["bbox"], x["bbox_mode"], BoxMode.XYXY_ABS) for x in b["annotations"]],
                           dtype=float).reshape(-1, 4)
        if not np.allclose(boxes_a, boxes_b, rtol=0, atol=1e-9):
            return False
    return True


def bench_coco_train_load(repeats: int, scale: float = 1.0, *, memory: bool = True) -> dict:
    import torch

    logging.getLogger("detectron2").setLevel(logging.WARNING)  # the class histogram, once a round
    logging.getLogger("detection").setLevel(logging.WARNING)
    ours, reference = _ours(scale), _reference(scale)
    row = compare(ours.run, reference.run, repeats, warmup=1, names=("ours", "detectron2"))
    row["identical_records"] = same_records(ours.once(), reference.once())
    if memory:  # both sides in fresh processes, a few seconds each
        row["memory"] = peak_memory("coco_train_load", scale, torch.get_num_threads())
    data = generated.coco_train(scale)
    row["conditions"] = (f"{data.json_file.stat().st_size / 2**20:.0f}-MB instances json (scale {scale:g}); "
                         "ratio = Detectron2's seconds / ours")
    return row
