"""The paper's detection numbers (He et al. 2016, Tables 7 and 8) and when a run may be compared with them.

A paper column is shown only beside a run of the paper's own design, as its config.yaml records it:
- the paper's backbone at full width: `resnet101`, or `vgg16` (not `vgg16_bn`, which has BatchNorm);
- its splits: COCO 2014 train (80k) -> COCO 2014 val (40k) for Table 8, VOC 07+12 trainval -> VOC 2007 test for
  Table 7;
- every design key (detection.paper_design: every key the paper configs set but bookkeeping) equal to what the
  config of *that column* resolves it to, the conventions of the column's ImageNet model included. So Table 8's
  VGG-16 column (the Faster R-CNN TPAMI model at lr 0.003) does not stand beside a VGG-16 run with
  configs/Overlays/COCO-VGG16-same-solver-as-R101.yaml, nor any run with ROIAlign, FPN anchors, another test NMS or
  a shortened schedule. A key no paper config sets is not checked: the configs set every Detectron2 default that
  is part of the design (configs/Base-Backbones.yaml: GAMMA, the scheduler, the loss types, ...); what they leave
  unset is not used by this detector (TEST.AUG: no test-time augmentation runs here) or is not the design's;
- initialised from the ImageNet model that column's config loads (not from scratch, not our own pretraining).
Every other run gets, instead of a number, one line that names the conditions it misses (the first differing keys).
"""

from __future__ import annotations

import math

from ..paper_design import PaperConfigsNotFound, paper_design

__all__ = ["PAPER_REFERENCE", "PAPER_SETUP", "paper_backbone", "paper_reference"]

PAPER_REFERENCE = {
    "coco": {"table": "Table 8", "test": ("coco_2014_val",), "train": ("coco_2014_train",),
             "condition": "paper Table 8: trained on COCO 2014 train (80k), tested on COCO 2014 val (40k), "
                          "shorter side 600, Faster R-CNN (4-step alternating training)",
             "VGG-16": {"AP": 21.2, "AP50": 41.5}, "ResNet-101": {"AP": 27.2, "AP50": 48.4}},
    "voc": {"table": "Table 7", "test": ("voc_2007_test",), "train": ("voc_2007_trainval", "voc_2012_trainval"),
            "condition": "paper Table 7: trained on VOC 07+12 trainval, tested on VOC 2007 test (11-point mAP)",
            "VGG-16": {"AP50": 73.2}, "ResNet-101": {"AP50": 76.4}},
}

# (table, column) -> the config whose design a run must have to stand beside that column, and the column's ImageNet
# model: file names (a local copy counts) and format (whose conventions -- input format, pixel statistics, stride
# placement -- a run that loads it records)
PAPER_SETUP = {
    ("coco", "ResNet-101"): {"config": "configs/COCO-Detection/faster_rcnn_R_101_C4.yaml",
                             "weights": ("R-101.pkl",), "weights_format": "caffe2"},
    ("coco", "VGG-16"): {"config": "configs/COCO-Detection/faster_rcnn_vgg16.yaml",
                         "weights": ("vgg16-397923af.pth",), "weights_format": "torchvision"},
    ("voc", "ResNet-101"): {"config": "configs/PascalVOC-Detection/faster_rcnn_R_101_C4.yaml",
                            "weights": ("R-101.pkl",), "weights_format": "caffe2"},
    ("voc", "VGG-16"): {"config": "configs/PascalVOC-Detection/faster_rcnn_vgg16.yaml",
                        "weights": ("vgg16-397923af.pth",), "weights_format": "torchvision"},
}
SHOWN_KEYS = 4  # differing design keys named in a run's line (then "and N more")


def paper_backbone(backbone: str, width: float = 1.0) -> str | None:
    """The paper's name for a backbone, or None (other nets -- vgg16_bn among them -- or reduced width)."""
    if width != 1.0:
        return None
    return {"vgg16": "VGG-16", "resnet101": "ResNet-101"}.get(backbone)


_MISSING = object()


def _lookup(config: dict, key: str):
    node = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _tuple(v):
    return tuple(_tuple(x) for x in v) if isinstance(v, (list, tuple)) else v


def _matches(got, want) -> bool:
    got, want = _tuple(got), _tuple(want)
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, float) and isinstance(got, (int, float)):
        return math.isclose(got, want, rel_tol=1e-9)
    return got == want


def _show(v) -> str:
    if v is _MISSING:
        return "not recorded"
    return repr(_tuple(v))


def paper_reference(kind: str, run) -> tuple[dict | None, str | None]:
    """({"AP50": .., "AP": ..} of the paper's column, None) for a run (a report.runs.RunResult) of the paper's own
    design, else (None, one line naming each condition it misses)."""
    ref = PAPER_REFERENCE.get(kind)
    if ref is None:
        return None, f"the paper has no {kind!r} table"
    if run.backbone == "vgg16_bn":
        return None, "backbone vgg16_bn: VGG-16 with BatchNorm, not the paper's VGG-16"
    column = paper_backbone(run.backbone)
    if column is None:
        return None, f"backbone {run.backbone}: the paper's detectors are vgg16 and resnet101"
    missed = []
    if run.width != 1.0:
        missed.append(f"width {run.width:g}, not the paper's full width")
    if run.dataset not in ref["test"] or sorted(run.train_datasets) != sorted(ref["train"]):
        missed.append(f"splits {' + '.join(run.train_datasets) or '?'} -> {run.dataset or '?'}, not the paper's "
                      f"{' + '.join(ref['train'])} -> {' + '.join(ref['test'])}")
    setup = PAPER_SETUP[(kind, column)]
    try:
        design = paper_design(setup["config"], setup["weights_format"])
    except PaperConfigsNotFound as err:
        return None, f"the paper's design cannot be compared with ({err})"
    diffs = [f"{key} {_show(_lookup(run.config, key))} (paper: {_show(want)})" for key, want in design.items()
             if not _matches(_lookup(run.config, key), want)]
    if diffs:
        more = f", and {len(diffs) - SHOWN_KEYS} more" if len(diffs) > SHOWN_KEYS else ""
        missed.append(f"not the design of the paper's {column} column ({setup['config']}): "
                      f"{', '.join(diffs[:SHOWN_KEYS])}{more}")
    if not run.weights:
        missed.append("from scratch (no MODEL.WEIGHTS), not ImageNet-pretrained")
    elif run.weights.replace("\\", "/").rsplit("/", 1)[-1] not in setup["weights"]:
        origin = (f"pretrained by tools/train_cls.py ({run.pretraining.model} on {run.pretraining.dataset}, "
                  f"{run.pretraining.iterations} iterations)" if run.pretraining is not None
                  else f"MODEL.WEIGHTS {run.weights}")
        missed.append(f"{origin}, not the ImageNet model of the paper's column ({', '.join(setup['weights'])})")
    if missed:
        return None, "; ".join(missed)
    return ref[column], None
