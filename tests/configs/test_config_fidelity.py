"""configs/FIDELITY.md is the contract: every row's *ours* is what the configs of its scope resolve to, every row's
*source value* is what its sources say (read from tests/reference: py-faster-rcnn, MSRA's prototxts, PAPER.md), a
row where the two differ says why, and every setting of REQUIRED_ROWS has its row."""

import ast
import glob
import re

import pytest

from classification.analysis.degradation import RECIPE
from classification.engine.config import TEST_MODES, ClsConfig
from detection import get_detection_cfg
from reference_sources import LocatorError, numbers_in, read_value, split_quote

FIDELITY = "configs/FIDELITY.md"
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

# The settings a Faster R-CNN reviewer lists, each with its key ("—": a behaviour, no key) and scope: the Detection
# table must have exactly these rows, so deleting one (or narrowing its scope) fails, naming it; a new row is added
# here too.
REQUIRED_ROWS = {
    "COCO training set": ("DATASETS.TRAIN", "COCO"),
    "COCO evaluation set": ("DATASETS.TEST", "COCO"),
    "VOC 2007 test training set": ("DATASETS.TRAIN", "VOC07+12"),
    "VOC 2007 test evaluation set": ("DATASETS.TEST", "VOC07+12"),
    "VOC 2012 test training set": ("DATASETS.TRAIN", "VOC07++12"),
    "VOC 2012 test evaluation set": ("DATASETS.TEST", "VOC07++12"),
    "shorter side, training": ("INPUT.MIN_SIZE_TRAIN", "all"),
    "longer side cap, training": ("INPUT.MAX_SIZE_TRAIN", "all"),
    "shorter side, testing": ("INPUT.MIN_SIZE_TEST", "all"),
    "longer side cap, testing": ("INPUT.MAX_SIZE_TEST", "all"),
    "horizontal flip in training": ("INPUT.RANDOM_FLIP", "all"),
    "resize interpolation": ("—", "all"),
    "pixel mean": ("MODEL.PIXEL_MEAN", "all"),
    "channel order": ("INPUT.FORMAT", "all"),
    "anchors, COCO": ("MODEL.ANCHOR_GENERATOR.SIZES", "COCO C4+VGG"),
    "anchors, VOC": ("MODEL.ANCHOR_GENERATOR.SIZES", "VOC C4+VGG"),
    "anchor aspect ratios": ("MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS", "all"),
    "anchor centres": ("MODEL.ANCHOR_GENERATOR.OFFSET", "all"),
    "anchor labelling": ("MODEL.RPN.MATCH_INSIDE_ONLY", "all"),
    "cross-boundary anchors in RPN training": ("MODEL.RPN.BOUNDARY_THRESH", "all"),
    "RPN anchors per image": ("MODEL.RPN.BATCH_SIZE_PER_IMAGE", "all"),
    "RPN foreground fraction": ("MODEL.RPN.POSITIVE_FRACTION", "all"),
    "RPN negative / positive IoU": ("MODEL.RPN.IOU_THRESHOLDS", "all"),
    "RPN head width, VGG-16": ("MODEL.RPN.CONV_DIMS", "VGG-16"),
    "RPN head init": ("—", "all"),
    "RPN box loss": ("MODEL.RPN.SMOOTH_L1_BETA", "all"),
    "RPN objectness": ("MODEL.RPN.HEAD_NAME", "all"),
    "RPN NMS": ("MODEL.RPN.NMS_THRESH", "all"),
    "RPN boxes before NMS, training": ("MODEL.RPN.PRE_NMS_TOPK_TRAIN", "C4+VGG"),
    "RPN proposals, training": ("MODEL.RPN.POST_NMS_TOPK_TRAIN", "C4+VGG"),
    "RPN boxes before NMS, testing": ("MODEL.RPN.PRE_NMS_TOPK_TEST", "C4+VGG"),
    "proposals per test image": ("MODEL.RPN.POST_NMS_TOPK_TEST", "C4+VGG"),
    "smallest proposal": ("MODEL.PROPOSAL_GENERATOR.MIN_SIZE", "all"),
    "pre-NMS top-k and the min-size filter": ("—", "all"),
    "RoIs per image": ("MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", "C4+VGG"),
    "foreground fraction of RoIs": ("MODEL.ROI_HEADS.POSITIVE_FRACTION", "all"),
    "foreground / background IoU": ("MODEL.ROI_HEADS.IOU_THRESHOLDS", "all"),
    "lowest background IoU": ("—", "all"),
    "RoI pooling": ("MODEL.ROI_BOX_HEAD.POOLER_TYPE", "C4+VGG"),
    "RoI size, VGG-16": ("MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION", "VGG-16"),
    "RoI size, ResNet C4": ("MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION", "C4"),
    "classes": ("MODEL.ROI_HEADS.NUM_CLASSES", "COCO"),
    "classes, VOC": ("MODEL.ROI_HEADS.NUM_CLASSES", "VOC"),
    "class-specific box regression": ("MODEL.ROI_BOX_HEAD.CLS_AGNOSTIC_BBOX_REG", "COCO"),
    "predictor init": ("—", "all"),
    "box regression targets": ("MODEL.ROI_BOX_HEAD.BBOX_REG_WEIGHTS", "all"),
    "RoI box loss": ("MODEL.ROI_BOX_HEAD.SMOOTH_L1_BETA", "all"),
    "box-scale clamp": ("—", "all"),
    "crowd boxes, COCO": ("—", "COCO"),
    "VGG-16 fc6/fc7 dropout, COCO": ("MODEL.BACKBONES.FC_DROPOUT", "COCO VGG-16"),
    "VGG-16 fc6/fc7 dropout, VOC": ("MODEL.BACKBONES.FC_DROPOUT", "VOC VGG-16"),
    "frozen layers, VGG-16": ("MODEL.BACKBONES.FREEZE_AT", "VGG-16"),
    "frozen layers, ResNet": ("MODEL.BACKBONES.FREEZE_AT", "C4"),
    "BatchNorm in the detector": ("MODEL.BACKBONES.NORM", "C4"),
    "bottleneck stride placement": ("MODEL.BACKBONES.STRIDE_IN_1X1", "C4"),
    "shortcuts": ("MODEL.BACKBONES.SHORTCUT", "C4 R-101"),
    "residual unit": ("MODEL.BACKBONES.PREACT", "C4"),
    "network width": ("MODEL.BACKBONES.WIDTH", "all"),
    "RoI head, ResNet": ("MODEL.ROI_HEADS.NAME", "C4"),
    "res5 in the RoI head": ("—", "C4"),
    "RoI head, VGG-16": ("MODEL.ROI_HEADS.NAME", "VGG-16"),
    "difficult VOC objects as training targets": ("DATALOADER.VOC_TRAIN_DIFFICULT", "all"),
    "test NMS": ("MODEL.ROI_HEADS.NMS_THRESH_TEST", "all"),
    "test score threshold": ("MODEL.ROI_HEADS.SCORE_THRESH_TEST", "all"),
    "detections per image": ("TEST.DETECTIONS_PER_IMAGE", "all"),
    "momentum, COCO": ("SOLVER.MOMENTUM", "COCO"),
    "momentum, VOC": ("SOLVER.MOMENTUM", "VOC"),
    "weight decay, COCO": ("SOLVER.WEIGHT_DECAY", "COCO"),
    "weight decay, VOC": ("SOLVER.WEIGHT_DECAY", "VOC"),
    "bias learning rate": ("SOLVER.BIAS_LR_FACTOR", "all"),
    "bias weight decay": ("SOLVER.WEIGHT_DECAY_BIAS", "all"),
    "COCO images per iteration": ("SOLVER.IMS_PER_BATCH", "COCO"),
    "COCO learning rate, ResNet": ("SOLVER.BASE_LR", "COCO ResNet"),
    "COCO learning rate, VGG-16": ("SOLVER.BASE_LR", "COCO VGG-16"),
    "COCO lr drop": ("SOLVER.STEPS", "COCO"),
    "COCO iterations": ("SOLVER.MAX_ITER", "COCO"),
    "VOC images per iteration": ("SOLVER.IMS_PER_BATCH", "VOC"),
    "VOC learning rate": ("SOLVER.BASE_LR", "VOC"),
    "VOC lr drop": ("SOLVER.STEPS", "VOC"),
    "VOC iterations": ("SOLVER.MAX_ITER", "VOC"),
    "warm-up, COCO": ("SOLVER.WARMUP_ITERS", "COCO"),
    "warm-up, VOC": ("SOLVER.WARMUP_ITERS", "VOC"),
    "warm-up start": ("SOLVER.WARMUP_FACTOR", "all"),
    "warm-up shape": ("SOLVER.WARMUP_METHOD", "all"),
    "training scheme": ("—", "all"),
    "ImageNet weights, VGG-16": ("MODEL.WEIGHTS", "VGG-16"),
    "ImageNet weights, ResNet-101": ("MODEL.WEIGHTS", "C4 R-101"),
}


def _rows(section: str, columns=COLUMNS, text: str | None = None) -> list[dict]:
    text = text if text is not None else open(FIDELITY, encoding="utf-8").read()
    text = re.split(rf"\n## {re.escape(section)}\b.*\n", text, maxsplit=1)[1].split("\n## ", 1)[0]
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


def _same(a, b) -> bool:
    """Equal once tuples are lists and a one-element list is its element (Detectron2's `(600,)` is 600)."""
    a, b = _norm(a), _norm(b)
    a = a[0] if isinstance(a, list) and len(a) == 1 else a
    b = b[0] if isinstance(b, list) and len(b) == 1 else b
    return a == b


def _locators(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _quote(locator: str):
    """(words, pick) of a quoting locator (pick None: evidence only), or None for a value locator."""
    return split_quote(locator.partition(":")[2])


def _is_evidence(locator: str) -> bool:
    quote = _quote(locator)
    return quote is not None and quote[1] is None


def _is_number(v) -> bool:
    if isinstance(v, (list, tuple)):
        return bool(v) and all(_is_number(x) for x in v)
    return isinstance(v, (int, float)) and not isinstance(v, bool)


DETECTION_ROWS = _rows("Detection")
KEYED_ROWS = [r for r in DETECTION_ROWS if r["key"].startswith("`")]


def missing_rows(rows: list[dict]) -> list[str]:
    """REQUIRED_ROWS against a table's rows: what is missing, changed or not required (empty: all there)."""
    have = {r["setting"]: (r["key"].strip("`"), r["scope"]) for r in rows}
    problems = [f"no row for {s!r} ({key}, scope {scope})" for s, (key, scope) in REQUIRED_ROWS.items()
                if s not in have]
    problems += [f"row {s!r}: {have[s]} where REQUIRED_ROWS has {want}" for s, want in REQUIRED_ROWS.items()
                 if s in have and have[s] != want]
    problems += [f"row {s!r} is not in REQUIRED_ROWS: add it there, so that its deletion is noticed" for s in have
                 if s not in REQUIRED_ROWS]
    if len(have) != len(rows):
        problems.append("two rows share a setting name")
    return problems


def test_the_table_has_a_row_for_every_required_setting():
    assert not missing_rows(DETECTION_ROWS)
    for r in DETECTION_ROWS:
        assert r["scope"].split() and all(t in SCOPES for t in r["scope"].split()), r
        assert _locators(r["source"]), f"{r['setting']}: the source cites no locator"


def test_a_deleted_row_is_named():
    rows = [r for r in DETECTION_ROWS if r["setting"] != "RoIs per image"]
    assert missing_rows(rows) == ["no row for 'RoIs per image' (MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE, scope C4+VGG)"]
    narrowed = [{**r, "scope": "COCO"} if r["setting"] == "test NMS" else r for r in DETECTION_ROWS]
    assert missing_rows(narrowed) == ["row 'test NMS': ('MODEL.ROI_HEADS.NMS_THRESH_TEST', 'COCO') where "
                                      "REQUIRED_ROWS has ('MODEL.ROI_HEADS.NMS_THRESH_TEST', 'all')"]


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


def _cited_values(row: dict) -> list:
    """The row's source value as one entry per value locator."""
    values = [loc for loc in _locators(row["source"]) if not _is_evidence(loc)]
    if not values:
        return []
    expected = _literal(row["source_value"])
    return list(expected) if len(values) > 1 else [expected]


def check_sources(row: dict) -> None:
    """Every locator of the row resolves; quoted text occurs; the values there are the row's source value."""
    locators = _locators(row["source"])
    for loc in locators:
        if _is_evidence(loc):
            assert read_value(loc) is True, f"{row['setting']}: {loc} -- these words are not in the file"
    values = [loc for loc in locators if not _is_evidence(loc)]
    if not values:
        assert row["source_value"] == "—", f"{row['setting']}: a source value but no locator that holds it"
        return
    expected = _literal(row["source_value"])
    if len(values) > 1:
        assert isinstance(expected, (list, tuple)) and len(expected) == len(values), \
            f"{row['setting']}: {len(values)} value locators need a list of {len(values)} source values"
    for loc, want in zip(values, _cited_values(row)):
        got = read_value(loc)
        assert _norm(got) == _norm(want), f"{row['setting']}: {loc} is {got!r} in the source, FIDELITY.md says {want!r}"
        if loc.startswith("config.py:__C."):  # an end2end run loads end2end.yml over config.py's defaults
            try:
                override = read_value("end2end.yml:" + loc.removeprefix("config.py:__C."))
            except LocatorError:
                continue
            assert _norm(override) == _norm(got), \
                f"{row['setting']}: {loc} is overridden by end2end.yml ({override!r}): cite end2end.yml"


@pytest.mark.parametrize("row", DETECTION_ROWS, ids=lambda r: f"{r['setting']}[{r['scope']}]")
def test_every_source_value_is_what_its_source_says(row):
    check_sources(row)


def check_why(row: dict) -> None:
    """A row whose ours differs from its source value, or from one of its cited values, says why in words."""
    if row["source_value"] == "—" or not row["ours"].startswith("`"):
        return  # nothing to compare: evidence-only sources, or ours is a behaviour described in words
    ours, source = _literal(row["ours"]), _literal(row["source_value"])
    if _same(source, ours) or all(_same(v, ours) for v in _cited_values(row)):
        return
    assert len(re.findall(r"[A-Za-z]{2,}", row["why"])) >= 3, \
        f"{row['setting']}: ours {row['ours']} differs from the source's {row['source_value']}: say why"


@pytest.mark.parametrize("row", DETECTION_ROWS, ids=lambda r: f"{r['setting']}[{r['scope']}]")
def test_a_row_whose_ours_differs_from_its_source_says_why(row):
    check_why(row)


def check_paper_numbers(row: dict) -> None:
    """A row whose ours is a number reads the numbers of the PAPER.md words it quotes (`"..."[i]`), so they are
    compared with the source value and, through it, with ours -- not only found."""
    if not row["ours"].startswith("`") or not _is_number(_literal(row["ours"])):
        return
    for loc in _locators(row["source"]):
        if loc.startswith("PAPER.md:") and _is_evidence(loc) and numbers_in(_quote(loc)[0]):
            raise AssertionError(f"{row['setting']}: {loc} quotes numbers {numbers_in(_quote(loc)[0])}: cite the "
                                 "one that is the setting as PAPER.md:\"...\"[i]")


@pytest.mark.parametrize("row", KEYED_ROWS, ids=lambda r: f"{r['key']}[{r['scope']}]")
def test_a_numeric_row_compares_the_numbers_it_quotes_from_the_paper(row):
    check_paper_numbers(row)


def _row(setting: str) -> dict:
    return next(r for r in DETECTION_ROWS if r["setting"] == setting)


def test_a_wrong_source_value_fails_the_check():
    """The check can fail: one cited value changed, one quote changed, one override hidden."""
    row = _row("test NMS")
    check_sources(row)
    with pytest.raises(AssertionError, match="is 0.3 in the source"):
        check_sources({**row, "source_value": "`0.5`"})
    quoted = _row("anchor labelling")
    with pytest.raises(AssertionError, match="not in the file"):
        check_sources({**quoted, "source": quoted["source"].replace("inds_inside", "inds_outside")})
    hidden = {**row, "source_value": "`0.1`", "source": "`config.py:__C.TRAIN.BG_THRESH_LO`"}
    with pytest.raises(AssertionError, match="overridden by end2end.yml"):
        check_sources(hidden)


@pytest.mark.parametrize("setting, old, new", [
    ("bias weight decay", "conv3_1.param[1].decay_mult|default", "conv3_1.parm[1].decay_mult|default"),
    ("bias weight decay", "conv3_1.param[1].decay_mult|default", "conv3_1.param[1].decay_mult"),  # no |default
    ("bias weight decay", "conv3_1.param[1].decay_mult|default", "conv3_1.param[1].lr_mult|default"),  # it is set
    ("bias weight decay", "conv3_1.param[1].decay_mult|default", "conv3_l.param[1].decay_mult|default"),
    ("VGG-16 fc6/fc7 dropout, VOC", "drop6.dropout_param.dropout_ratio", "drop6.dropout_prm.dropout_ratio"),
    ("VGG-16 fc6/fc7 dropout, COCO", "drop6|absent", "drp6|absent"),  # a misspelt layer is not an absent one
    ("VGG-16 fc6/fc7 dropout, VOC", "drop6.dropout_param.dropout_ratio", "dropp6.dropout_param.dropout_ratio"),
    ("RoI box loss", "sigma|default", "sigmaa|default"),
    ("test NMS", "__C.TEST.NMS", "__C.TEST.NMSS"),
    ("COCO iterations", "0.0001\"[0+2]", "0.0001\"[0+7]"),
])
def test_a_misspelt_locator_is_an_error_naming_it(setting, old, new):
    row = _row(setting)
    assert old in row["source"]
    broken = row["source"].replace(old, new)
    locator = next(loc for loc in _locators(broken) if new in loc)
    with pytest.raises(LocatorError, match=re.escape(repr(locator))):
        check_sources({**row, "source": broken})


def test_a_drifted_paper_number_fails():
    """The number a PAPER.md quote gives is the source value, and ours must equal it or say why."""
    row = _row("COCO learning rate, ResNet")
    check_sources(row)
    with pytest.raises(AssertionError, match="is 0.001 in the source"):
        check_sources({**row, "source_value": "`0.002`"})
    check_why(row)
    with pytest.raises(AssertionError, match="say why"):
        check_why({**row, "ours": "`0.002`"})  # the config and its ours cell drifted together
    with pytest.raises(AssertionError, match="cite the one"):  # the number is found, not compared
        check_paper_numbers({**row, "source": row["source"].replace('"[1]', '"'), "source_value": "—"})
    assert numbers_in("240k iterations at lr 0.001, then 80k at 0.0001.") == [240000, 0.001, 80000, 0.0001]
    assert numbers_in("COCO VGG-16 prototxt has no dropout in fc6/fc7 (conv3_1)") == []


def test_a_why_is_words_not_a_mark():
    row = _row("RPN box loss")  # source sigma 3.0, ours beta 0.1111
    check_why(row)
    with pytest.raises(AssertionError, match="say why"):
        check_why({**row, "why": "-"})


@pytest.mark.parametrize("row", _rows("Classification", ("setting", "key", "scope", "reference", "source", "ours",
                                                         "why")), ids=lambda r: r["setting"])
def test_classification_recipe_rows(row):
    # our own document: an expression over ClsConfig, e.g. ClsConfig(dataset="cifar10").base_lr()
    value = eval(row["key"].strip("`"), {"__builtins__": {}}, {"ClsConfig": ClsConfig, "TEST_MODES": TEST_MODES,
                                                                "RECIPE": RECIPE})
    expected = _literal(row["ours"])
    assert _norm(value) == pytest.approx(_norm(expected)) if isinstance(expected, float) else \
        _norm(value) == _norm(expected), (row["key"], value)
