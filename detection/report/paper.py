"""The paper's detection numbers (He et al. 2016, Tables 7 and 8) and when a run may be compared with them.

A paper column is shown only for a run trained and tested on the paper's own splits with the paper's backbone at
full width: COCO 2014 train (80k) -> COCO 2014 val (40k) for Table 8, VOC 07+12 trainval -> VOC 2007 test for
Table 7. Anything else (COCO 2017, the embedded default, a width-0.25 net) gets no paper column: its numbers are
not comparable, and printing them side by side invites the comparison.
"""

from __future__ import annotations

__all__ = ["PAPER_REFERENCE", "paper_backbone", "paper_reference"]

PAPER_REFERENCE = {
    "coco": {"table": "Table 8", "test": ("coco_2014_val",), "train": ("coco_2014_train",),
             "condition": "paper Table 8: trained on COCO 2014 train (80k), tested on COCO 2014 val (40k), "
                          "shorter side 600, Faster R-CNN (4-step alternating training)",
             "VGG-16": {"AP": 21.2, "AP50": 41.5}, "ResNet-101": {"AP": 27.2, "AP50": 48.4}},
    "voc": {"table": "Table 7", "test": ("voc_2007_test",), "train": ("voc_2007_trainval", "voc_2012_trainval"),
            "condition": "paper Table 7: trained on VOC 07+12 trainval, tested on VOC 2007 test (11-point mAP)",
            "VGG-16": {"AP50": 73.2}, "ResNet-101": {"AP50": 76.4}},
}


def paper_backbone(backbone: str, width: float = 1.0) -> str | None:
    """The paper's name for a backbone, or None (other nets, or reduced width)."""
    if width != 1.0:
        return None
    return {"vgg16": "VGG-16", "vgg16_bn": "VGG-16", "resnet101": "ResNet-101"}.get(backbone)


def paper_reference(kind: str, backbone: str, width: float, train: tuple[str, ...], test: str) -> dict | None:
    """{"AP50": .., "AP": ..} of the paper for a run with these conditions, or None when they differ."""
    ref = PAPER_REFERENCE.get(kind)
    name = paper_backbone(backbone, width)
    if ref is None or name is None or test not in ref["test"] or sorted(train) != sorted(ref["train"]):
        return None
    return ref[name]
