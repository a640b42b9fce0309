"""configs/FIDELITY.md is the contract: every row's value is what the configs of its scope resolve to."""

import ast
import glob
import re
from pathlib import Path

import pytest

from classification.engine.config import TEST_MODES, ClsConfig
from detection import get_detection_cfg

FIDELITY = Path("configs/FIDELITY.md")
CONFIGS = sorted(glob.glob("configs/COCO-Detection/faster_rcnn_*.yaml")
                 + glob.glob("configs/PascalVOC-Detection/faster_rcnn_*.yaml"))
SCOPES = {
    "all": lambda p: True,
    "C4+VGG": lambda p: "FPN" not in p,
    "COCO": lambda p: "COCO-Detection" in p,
    "VOC": lambda p: "PascalVOC" in p,
    "VOC07+12": lambda p: "PascalVOC" in p and "voc2012" not in p,
    "VOC07++12": lambda p: "PascalVOC" in p and "voc2012" in p,
    "VGG-16": lambda p: "vgg16" in p,
    "C4": lambda p: "_C4" in p,
    "R-101": lambda p: "R_101" in p,
}


def _rows(section: str) -> list[dict]:
    text = FIDELITY.read_text().split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| setting")]
    rows = []
    for ln in lines:
        cells = [c.strip() for c in ln.strip().strip("|").split(" | ")]
        row = dict(zip(("setting", "key", "scope", "reference", "source", "ours", "why"), cells))
        if row["key"].startswith("`"):
            rows.append(row)
    return rows


def _literal(cell: str):
    return ast.literal_eval(re.fullmatch(r"`(.*)`", cell).group(1))


def _norm(v):
    return [_norm(x) for x in v] if isinstance(v, (list, tuple)) else v


DETECTION_ROWS = _rows("Detection")


def test_the_table_covers_the_settings_the_audit_named():
    keys = {r["key"].strip("`") for r in DETECTION_ROWS}
    assert {"DATASETS.TRAIN", "DATASETS.TEST", "SOLVER.BASE_LR", "SOLVER.STEPS", "SOLVER.MAX_ITER",
            "SOLVER.WEIGHT_DECAY", "SOLVER.BIAS_LR_FACTOR", "SOLVER.WEIGHT_DECAY_BIAS",
            "MODEL.ANCHOR_GENERATOR.SIZES", "MODEL.ROI_HEADS.NMS_THRESH_TEST", "MODEL.PROPOSAL_GENERATOR.MIN_SIZE",
            "MODEL.RPN.BOUNDARY_THRESH", "MODEL.RPN.SMOOTH_L1_BETA", "MODEL.ROI_BOX_HEAD.SMOOTH_L1_BETA",
            "DATALOADER.VOC_TRAIN_DIFFICULT"} <= keys
    # a value that differs from the reference must say why
    for r in DETECTION_ROWS:
        assert r["scope"].split() and all(t in SCOPES for t in r["scope"].split()), r


@pytest.fixture(scope="module")
def resolved():
    return {p: get_detection_cfg(p, ["MODEL.DEVICE", "cpu"], read_weights=False) for p in CONFIGS}


@pytest.mark.parametrize("row", DETECTION_ROWS, ids=lambda r: f"{r['key']}[{r['scope']}]")
def test_every_row_holds_in_every_config_of_its_scope(row, resolved):
    key, expected = row["key"].strip("`"), _literal(row["ours"])
    scope = [SCOPES[t] for t in row["scope"].split()]
    paths = [p for p in CONFIGS if all(s(p) for s in scope)]
    assert paths, f"scope {row['scope']!r} matches no config"
    for p in paths:
        node = resolved[p]
        for part in key.split("."):
            node = node[part]
        assert _norm(node) == _norm(expected), f"{p}: {key} is {node!r}, FIDELITY.md says {expected!r}"


@pytest.mark.parametrize("row", _rows("Classification"), ids=lambda r: r["setting"])
def test_classification_recipe_rows(row):
    # our own document: an expression over ClsConfig, e.g. ClsConfig(dataset="cifar10").base_lr()
    value = eval(row["key"].strip("`"), {"__builtins__": {}}, {"ClsConfig": ClsConfig, "TEST_MODES": TEST_MODES})
    expected = _literal(row["ours"])
    assert _norm(value) == pytest.approx(_norm(expected)) if isinstance(expected, float) else \
        _norm(value) == _norm(expected), (row["key"], value)
