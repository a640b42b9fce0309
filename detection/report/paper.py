"""The paper's detection numbers (He et al. 2016, Tables 7 and 8) and when a run may be compared with them.

A paper column is shown only beside a run of the paper's own design, as its config.yaml records it:
- the paper's backbone at full width: `resnet101`, or `vgg16` (not `vgg16_bn`, which has BatchNorm);
- its detector: C4 for ResNet-101 (trunk up to res4, the net's res5 as the per-RoI head; not FPN), the fc6/fc7 head
  on conv5_3 for VGG-16;
- its splits: COCO 2014 train (80k) -> COCO 2014 val (40k) for Table 8, VOC 07+12 trainval -> VOC 2007 test for
  Table 7; its input scale (shorter side 600, longer at most 1000);
- the schedule and solver of *that column*: Table 8's VGG-16 column is the Faster R-CNN TPAMI model at lr 0.003,
  its ResNet-101 column lr 0.001 (configs/FIDELITY.md, "What the paper compared"), so a VGG-16 run with
  configs/Overlays/COCO-VGG16-same-solver-as-R101.yaml is not beside 21.2 / 41.5; a shortened schedule is not
  either;
- initialised from the ImageNet model that column's config loads (not from scratch, not our own pretraining).
PAPER_SETUP holds these per column, as the configs of configs/COCO-Detection and configs/PascalVOC-Detection set
them (tests/test_report_paper.py checks that they agree). Every other run gets, instead of a number, one line that
names the conditions it misses.
"""

from __future__ import annotations

import math

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

_DESIGN = {  # the paper's detector per backbone (a frozenset: any of these values)
    "ResNet-101": {"MODEL.BACKBONE.NAME": "build_backbones_trunk", "MODEL.ROI_HEADS.NAME": "BackbonesRes5ROIHeads",
                   "MODEL.BACKBONES.OUT_FEATURES": ("res4",), "MODEL.BACKBONES.PREACT": False,
                   "MODEL.BACKBONES.SHORTCUT": frozenset({"", "B"}), "MODEL.BACKBONES.NORM": "FrozenBN"},
    "VGG-16": {"MODEL.BACKBONE.NAME": "build_backbones_trunk", "MODEL.ROI_HEADS.NAME": "BackbonesVGGROIHeads",
               "MODEL.BACKBONES.OUT_FEATURES": ("conv5",)},
}
_INPUT = {"INPUT.MIN_SIZE_TRAIN": (600,), "INPUT.MAX_SIZE_TRAIN": 1000, "INPUT.MIN_SIZE_TEST": 600,
          "INPUT.MAX_SIZE_TEST": 1000}
_COCO_SCHEDULE = {"SOLVER.IMS_PER_BATCH": 16, "SOLVER.STEPS": (240000,), "SOLVER.MAX_ITER": 320000}
_VOC_SCHEDULE = {"SOLVER.IMS_PER_BATCH": 16, "SOLVER.STEPS": (6250,), "SOLVER.MAX_ITER": 8750}
_SOLVER = {"SOLVER.GAMMA": 0.1, "SOLVER.MOMENTUM": 0.9, "SOLVER.WEIGHT_DECAY": 0.0005}
_WEIGHTS = {"ResNet-101": ("R-101.pkl",), "VGG-16": ("vgg16-397923af.pth",)}  # file names: a local copy counts


def _setup(kind: str, column: str, config: str, lr: float, dropout: float | None = None) -> dict:
    design = dict(_DESIGN[column])
    if dropout is not None:
        design["MODEL.BACKBONES.FC_DROPOUT"] = dropout
    return {"config": config, "design": design, "input": dict(_INPUT),
            "schedule": dict(_COCO_SCHEDULE if kind == "coco" else _VOC_SCHEDULE),
            "solver": {"SOLVER.BASE_LR": lr, **_SOLVER}, "weights": _WEIGHTS[column]}


# (table, column) -> what a run must record to stand beside that column, and the config that sets it
PAPER_SETUP = {
    ("coco", "ResNet-101"): _setup("coco", "ResNet-101", "configs/COCO-Detection/faster_rcnn_R_101_C4.yaml", 0.001),
    ("coco", "VGG-16"): _setup("coco", "VGG-16", "configs/COCO-Detection/faster_rcnn_vgg16.yaml", 0.003, 0.0),
    ("voc", "ResNet-101"): _setup("voc", "ResNet-101", "configs/PascalVOC-Detection/faster_rcnn_R_101_C4.yaml",
                                  0.008),
    ("voc", "VGG-16"): _setup("voc", "VGG-16", "configs/PascalVOC-Detection/faster_rcnn_vgg16.yaml", 0.008, 0.5),
}
_CONDITIONS = {"design": {"ResNet-101": "not the paper's C4 detector", "VGG-16": "not the paper's VGG-16 head"},
               "input": "not the paper's input scale", "schedule": "not the paper's schedule",
               "solver": "not the solver of the paper's {column} column"}


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
    if isinstance(want, frozenset):
        return any(_matches(got, w) for w in want)
    got = _tuple(got)
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, float) and isinstance(got, (int, float)):
        return math.isclose(got, want, rel_tol=1e-9)
    return got == want


def _show(v) -> str:
    if v is _MISSING:
        return "not recorded"
    if isinstance(v, frozenset):
        return " or ".join(sorted(repr(x) for x in v))
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
    for part in ("design", "input", "schedule", "solver"):
        diffs = [f"{key} {_show(_lookup(run.config, key))} (paper: {_show(want)})"
                 for key, want in setup[part].items() if not _matches(_lookup(run.config, key), want)]
        if diffs:
            what = _CONDITIONS[part]
            what = what[column] if isinstance(what, dict) else what.format(column=column)
            missed.append(f"{what}: {', '.join(diffs)}")
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
