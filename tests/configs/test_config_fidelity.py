"""configs/FIDELITY.md is the contract: every row's *ours* is what the configs of its scope resolve to, every row's
*source value* is what its sources say (read from ../shared: py-faster-rcnn, MSRA's prototxts, PAPER.md), and a row
where the two differ says why."""

import ast
import glob
import re
from pathlib import Path

import pytest
from reference_sources import LocatorError, read_value

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
    "ResNet": lambda p: "vgg16" not in p,
    "C4": lambda p: "_C4" in p,
    "R-101": lambda p: "R_101" in p,
}
COLUMNS = ("setting", "key", "scope", "source_value", "source", "ours", "why")


def _rows(section: str, columns=COLUMNS) -> list[dict]:
    text = re.split(rf"\n## {re.escape(section)}\b.*\n", FIDELITY.read_text(), maxsplit=1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| setting")]
    rows = []
    for ln in lines:
        cells = [c.strip() for c in ln.strip().strip("|").split(" | ")]
        assert len(cells) == len(columns), f"FIDELITY.md: {len(cells)} cells, not {len(columns)}: {ln[:80]}"
        rows.append(dict(zip(columns, cells)))
    return rows


def _literal(cell: str):
    return ast.literal_eval(re.fullmatch(r"`(.*)`", cell).group(1))


def _norm(v):
    return [_norm(x) for x in v] if isinstance(v, (list, tuple)) else v


def _locators(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _is_quote(locator: str) -> bool:
    return locator.partition(":")[2].startswith('"')


DETECTION_ROWS = _rows("Detection")
KEYED_ROWS = [r for r in DETECTION_ROWS if r["key"].startswith("`")]


def test_the_table_covers_the_settings_the_audits_named():
    keys = {r["key"].strip("`") for r in KEYED_ROWS}
    assert {"DATASETS.TRAIN", "DATASETS.TEST", "SOLVER.BASE_LR", "SOLVER.STEPS", "SOLVER.MAX_ITER",
            "SOLVER.WEIGHT_DECAY", "SOLVER.BIAS_LR_FACTOR", "SOLVER.WEIGHT_DECAY_BIAS",
            "MODEL.ANCHOR_GENERATOR.SIZES", "MODEL.ROI_HEADS.NMS_THRESH_TEST", "MODEL.PROPOSAL_GENERATOR.MIN_SIZE",
            "MODEL.RPN.BOUNDARY_THRESH", "MODEL.RPN.SMOOTH_L1_BETA", "MODEL.ROI_BOX_HEAD.SMOOTH_L1_BETA",
            "DATALOADER.VOC_TRAIN_DIFFICULT", "MODEL.PIXEL_MEAN", "INPUT.FORMAT", "MODEL.RPN.POSITIVE_FRACTION",
            "MODEL.ROI_HEADS.NUM_CLASSES", "MODEL.ROI_BOX_HEAD.CLS_AGNOSTIC_BBOX_REG",
            "MODEL.ANCHOR_GENERATOR.OFFSET", "MODEL.RPN.CONV_DIMS", "MODEL.RPN.MATCH_INSIDE_ONLY"} <= keys
    for r in DETECTION_ROWS:
        assert r["scope"].split() and all(t in SCOPES for t in r["scope"].split()), r
        assert _locators(r["source"]), f"{r['setting']}: the source cites no locator"


@pytest.fixture(scope="module")
def resolved():
    return {p: get_detection_cfg(p, ["MODEL.DEVICE", "cpu"], read_weights=False) for p in CONFIGS}


def _configs_of(row) -> list[str]:
    scope = [SCOPES[t] for t in row["scope"].split()]
    return [p for p in CONFIGS if all(s(p) for s in scope)]


@pytest.mark.parametrize("row", KEYED_ROWS, ids=lambda r: f"{r['key']}[{r['scope']}]")
def test_every_row_holds_in_every_config_of_its_scope(row, resolved):
    key, expected = row["key"].strip("`"), _literal(row["ours"])
    paths = _configs_of(row)
    assert paths, f"scope {row['scope']!r} matches no config"
    for p in paths:
        node = resolved[p]
        for part in key.split("."):
            node = node[part]
        assert _norm(node) == _norm(expected), f"{p}: {key} is {node!r}, FIDELITY.md says {expected!r}"


def check_sources(row: dict, shared: Path) -> None:
    """Every locator of the row resolves; quoted text occurs; the values there are the row's source value."""
    locators = _locators(row["source"])
    for loc in locators:
        if _is_quote(loc):
            assert read_value(loc, shared) is True, f"{row['setting']}: {loc} -- these words are not in the file"
    values = [loc for loc in locators if not _is_quote(loc)]
    if not values:
        assert row["source_value"] == "—", f"{row['setting']}: a source value but no locator that holds it"
        return
    expected = _literal(row["source_value"])
    if len(values) > 1:
        assert isinstance(expected, (list, tuple)) and len(expected) == len(values), \
            f"{row['setting']}: {len(values)} value locators need a list of {len(values)} source values"
    else:
        expected = [expected]
    for loc, want in zip(values, expected):
        got = read_value(loc, shared)
        assert _norm(got) == _norm(want), f"{row['setting']}: {loc} is {got!r} in the source, FIDELITY.md says {want!r}"
        if loc.startswith("config.py:__C."):  # an end2end run loads end2end.yml over config.py's defaults
            try:
                override = read_value("end2end.yml:" + loc.removeprefix("config.py:__C."), shared)
            except LocatorError:
                continue
            assert _norm(override) == _norm(got), \
                f"{row['setting']}: {loc} is overridden by end2end.yml ({override!r}): cite end2end.yml"


@pytest.mark.parametrize("row", DETECTION_ROWS, ids=lambda r: f"{r['setting']}[{r['scope']}]")
def test_every_source_value_is_what_its_source_says(row, shared_dir):
    check_sources(row, shared_dir)


@pytest.mark.parametrize("row", DETECTION_ROWS, ids=lambda r: f"{r['setting']}[{r['scope']}]")
def test_a_row_whose_ours_differs_from_its_source_says_why(row):
    if row["source_value"] == "—" or not row["ours"].startswith("`"):
        return  # nothing to compare: a quoted-text source, or ours is a behaviour described in words
    if _norm(_literal(row["source_value"])) != _norm(_literal(row["ours"])):
        assert row["why"], f"{row['setting']}: ours {row['ours']} differs from the source's {row['source_value']}"


def test_a_wrong_source_value_fails_the_check(shared_dir):
    """The check can fail: one cited value changed, one quote changed, one override hidden."""
    row = next(r for r in DETECTION_ROWS if r["setting"] == "test NMS")
    check_sources(row, shared_dir)
    with pytest.raises(AssertionError, match="is 0.3 in the source"):
        check_sources({**row, "source_value": "`0.5`"}, shared_dir)
    quoted = next(r for r in DETECTION_ROWS if r["setting"] == "anchor labelling")
    with pytest.raises(AssertionError, match="not in the file"):
        check_sources({**quoted, "source": quoted["source"].replace("inds_inside", "inds_outside")}, shared_dir)
    hidden = {**row, "source_value": "`0.1`", "source": "`config.py:__C.TRAIN.BG_THRESH_LO`"}
    with pytest.raises(AssertionError, match="overridden by end2end.yml"):
        check_sources(hidden, shared_dir)


@pytest.mark.parametrize("row", _rows("Classification", ("setting", "key", "scope", "reference", "source", "ours",
                                                         "why")), ids=lambda r: r["setting"])
def test_classification_recipe_rows(row):
    # our own document: an expression over ClsConfig, e.g. ClsConfig(dataset="cifar10").base_lr()
    value = eval(row["key"].strip("`"), {"__builtins__": {}}, {"ClsConfig": ClsConfig, "TEST_MODES": TEST_MODES})
    expected = _literal(row["ours"])
    assert _norm(value) == pytest.approx(_norm(expected)) if isinstance(expected, float) else \
        _norm(value) == _norm(expected), (row["key"], value)
