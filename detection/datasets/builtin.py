"""Standard dataset names under $DETECTRON2_DATASETS (default ./datasets), Detectron2's layout.

COCO (`coco_2017_train`, `coco_2017_val`, ...) stays registered by Detectron2 itself. The PASCAL VOC names
(`voc_2007_trainval`, `voc_2007_test`, `voc_2012_trainval`, ...) are re-registered with this plugin's parser,
which accepts real-world annotation files (see voc.py); VOC 07+12 is DATASETS.TRAIN = ("voc_2007_trainval",
"voc_2012_trainval"), which Detectron2 concatenates. `voc_2012_test` has images only (no public annotations).
"""

from __future__ import annotations

import os

from .voc import VOC_CLASSES, register_voc, register_voc_test_images

VOC_SPLITS = [
    ("voc_2007_trainval", "VOC2007", "trainval"), ("voc_2007_train", "VOC2007", "train"),
    ("voc_2007_val", "VOC2007", "val"), ("voc_2007_test", "VOC2007", "test"),
    ("voc_2012_trainval", "VOC2012", "trainval"), ("voc_2012_train", "VOC2012", "train"),
    ("voc_2012_val", "VOC2012", "val"),
]


def register_all_voc(root: str) -> None:
    for name, dirname, split in VOC_SPLITS:
        register_voc(name, os.path.join(root, dirname), split, year=int(dirname[3:]), class_names=VOC_CLASSES)
    # VOC 2012 test (07++12 -> Table 7's second row): images only; scored by the PASCAL evaluation server.
    register_voc_test_images("voc_2012_test", os.path.join(root, "VOC2012"), "test", 2012)


register_all_voc(os.path.expanduser(os.getenv("DETECTRON2_DATASETS", "datasets")))
