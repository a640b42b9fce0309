"""The paper's detector design, as the paper configs set it: which config keys are design keys, and the values the
config of each paper column resolves them to.

The design keys are every key the paper configs (configs/COCO-Detection/faster_rcnn_*.yaml,
configs/PascalVOC-Detection/faster_rcnn_*.yaml and their _BASE_ files) set, less bookkeeping. Both consumers derive
from this one set, not from hand lists:
- configs/FIDELITY.md has a row for every key the C4 and VGG-16 configs (the paper's designs; the FPN configs are
  the modern baseline, whose differences from the paper are the point) set, or the key is in UNROWED with its
  reason, and a row for every BEHAVIOURS entry: the parts of the design that are code, not keys
  (tests/configs/test_config_fidelity.py);
- the report's paper column opens only for a run whose recorded config equals its column's config on every design
  key (detection/report/paper.py), the keys whose value follows MODEL.WEIGHTS' metadata (input format, pixel
  statistics, stride placement) taken from the column's ImageNet model, as a run that loads it records them.

The configs are files of a checkout (`project_files`); where there is none, `PaperConfigsNotFound`.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .project import ProjectFilesNotFound, project_files
from .safe_yaml import load_yaml

__all__ = ["PAPER_CONFIG_GLOBS", "UNROWED", "Unrowed", "BEHAVIOURS", "Behaviour", "PaperConfigsNotFound",
           "paper_config_files", "keys_set", "config_keys", "design_keys", "paper_design"]

PAPER_CONFIG_GLOBS = ("COCO-Detection/faster_rcnn_*.yaml", "PascalVOC-Detection/faster_rcnn_*.yaml")


@dataclass(frozen=True)
class Unrowed:
    """A key the paper configs set with no row in configs/FIDELITY.md, and why it needs none."""

    gated: bool  # still a design key the report's paper column checks (wiring: a row would say nothing the rows of
    #   what it wires do not); False: bookkeeping that changes no number, not checked
    why: str


UNROWED = {
    "VERSION": Unrowed(False, "the config format's version"),
    "SOLVER.CHECKPOINT_PERIOD": Unrowed(False, "when checkpoints are written"),
    "TEST.EVAL_PERIOD": Unrowed(False, "evaluations during training; the result is the final evaluation"),
    "MODEL.META_ARCHITECTURE": Unrowed(True, "wiring: BackbonesRCNN is Detectron2's GeneralizedRCNN building one "
                                             "backbones model for trunk and RoI head (the 'RoI head' rows)"),
    "MODEL.BACKBONE.NAME": Unrowed(True, "wiring: Detectron2's builder of the trunk (the 'RoI head' rows say which "
                                         "design)"),
    "MODEL.BACKBONES.NAME": Unrowed(True, "which net, not a setting of the detector: the report names the paper's "
                                          "backbone itself"),
    "MODEL.BACKBONES.OUT_FEATURES": Unrowed(True, "wiring: the stride-16 map the RPN and the RoI head read (res4, "
                                                  "conv5: the 'RoI head' rows)"),
    "MODEL.RPN.IN_FEATURES": Unrowed(True, "wiring: as MODEL.BACKBONES.OUT_FEATURES"),
    "MODEL.ROI_HEADS.IN_FEATURES": Unrowed(True, "wiring: as MODEL.BACKBONES.OUT_FEATURES"),
    "MODEL.PROPOSAL_GENERATOR.NAME": Unrowed(True, "wiring: BackbonesRPN is Detectron2's RPN with the option of the "
                                                   "'anchor labelling' row"),
}



@dataclass(frozen=True)
class Behaviour:
    """A part of the design no config key sets: what the code does, the same in every run (so the report's paper
    column cannot check it; configs/FIDELITY.md has a row for it, with key "—")."""

    scope: str  # FIDELITY.md's scope words: which paper configs it concerns
    where: tuple[str, ...]  # the code that does it, as pkgutil.resolve_name names it (the test resolves each)


BEHAVIOURS = {
    "resize interpolation": Behaviour("all", ("detectron2.data.transforms:ResizeShortestEdge",)),
    "RPN head init": Behaviour("all", ("detectron2.modeling.proposal_generator.rpn:StandardRPNHead",)),
    "pre-NMS top-k and the min-size filter": Behaviour(
        "all", ("detectron2.modeling.proposal_generator.proposal_utils:find_top_rpn_proposals",)),
    "lowest background IoU": Behaviour("all", ("detectron2.modeling.roi_heads.roi_heads:ROIHeads."
                                               "label_and_sample_proposals",)),
    "predictor init": Behaviour("all", ("detectron2.modeling.roi_heads.fast_rcnn:FastRCNNOutputLayers",)),
    "box-scale clamp": Behaviour("all", ("detectron2.modeling.box_regression:Box2BoxTransform",)),
    "box width": Behaviour("all", ("detectron2.modeling.box_regression:Box2BoxTransform",
                                   "detectron2.modeling.anchor_generator:DefaultAnchorGenerator",
                                   "detection.datasets.voc:load_voc_instances", "detection.evaluation.voc:voc_match")),
    "crowd boxes, COCO": Behaviour("COCO", ("detectron2.data.dataset_mapper:DatasetMapper",)),
    "res5 in the RoI head": Behaviour("C4", ("detection.modeling:BackbonesRes5ROIHeads",)),
    "training scheme": Behaviour("all", ("detection.modeling:BackbonesRCNN",)),
}

# Design keys the report checks in words of its own (paper.paper_reference), not as a key and value: the backbone,
# its width, the splits and the ImageNet model (a local copy of the file counts, whatever its path).
NAMED_BY_THE_REPORT = ("MODEL.BACKBONES.NAME", "MODEL.BACKBONES.WIDTH", "DATASETS.TRAIN", "DATASETS.TEST",
                       "MODEL.WEIGHTS")


class PaperConfigsNotFound(FileNotFoundError):
    """No checkout with the paper configs where they were looked for."""


def _configs_root() -> Path:
    try:
        return project_files(Path(__file__).resolve().parent).config()
    except ProjectFilesNotFound as err:
        raise PaperConfigsNotFound(f"the paper's design is read from configs/ of a checkout: {err}") from None


def paper_config_files(root: Path | None = None) -> list[Path]:
    root = root or _configs_root()
    return sorted(p for pattern in PAPER_CONFIG_GLOBS for p in root.glob(pattern))


def _flat(data: dict, prefix: str = "") -> set[str]:
    keys = set()
    for k, v in data.items():
        if k == "_BASE_":
            continue
        keys |= _flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k}
    return keys


def keys_set(path: str | os.PathLike) -> set[str]:
    """The keys a config file and its _BASE_ files set (dotted), read safely."""
    data = load_yaml(path) or {}
    bases = data.get("_BASE_", [])
    keys = _flat(data)
    for base in [bases] if isinstance(bases, str) else bases:
        keys |= keys_set(Path(path).parent / base)
    return keys


def config_keys(root: Path | None = None) -> set[str]:
    """Every key some paper config sets."""
    return set().union(*(keys_set(p) for p in paper_config_files(root)))


def design_keys(root: Path | None = None) -> list[str]:
    """The keys the report's paper column checks as key and value (sorted)."""
    return sorted(k for k in config_keys(root) if (k not in UNROWED or UNROWED[k].gated)
                  and k not in NAMED_BY_THE_REPORT)


def _lookup(cfg, key: str):
    for part in key.split("."):
        cfg = cfg[part]
    return cfg


@functools.lru_cache(maxsize=8)
def _design(config: str, weights_format: str, root: str) -> tuple[tuple[str, Any], ...]:
    from backbones.weight_formats import KNOWN_META

    from .config import get_detection_cfg, set_conventions

    cfg = get_detection_cfg(config, freeze=False, read_weights=False)
    set_conventions(cfg, KNOWN_META[weights_format])
    return tuple((k, _lookup(cfg, k)) for k in design_keys(Path(root)))


def paper_design(config: str, weights_format: str) -> dict[str, Any]:
    """key -> value of every design key in `config` (a path below the checkout's root, e.g.
    configs/COCO-Detection/faster_rcnn_R_101_C4.yaml), with the conventions of weights in `weights_format` (a
    backbones.weight_formats.KNOWN_META key: what loading the column's ImageNet model sets)."""
    root = _configs_root()
    return dict(_design(str(root.parent / config), weights_format, str(root)))
