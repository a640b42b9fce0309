"""configs/FIDELITY.md is the contract: every row's *ours* is what the configs of its scope resolve to, every row's
*source value* is what its sources say (read from tests/reference: py-faster-rcnn, MSRA's prototxts, PAPER.md), a
row where the two differ says why, and every key the paper configs set has, for each config, exactly one row
(derived from the configs: detection/paper_design.py)."""

import ast
import glob
import hashlib
import pkgutil
import re

import pytest

from classification.analysis.degradation import RECIPE
from classification.engine.config import TEST_MODES, ClsConfig
from detection import get_detection_cfg
from detection.paper_design import BEHAVIOURS, UNROWED, keys_set, paper_config_files
from reference_sources import CAFFE_DEFAULTS, LocatorError, numbers_in, read_value, split_quote

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
    "R-50": lambda p: "R_50" in p,
    "R-34": lambda p: "R_34" in p,
    "plain-34": lambda p: "plain_34" in p,
}
COLUMNS = ("setting", "key", "scope", "source_value", "source", "ours", "why")

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


PAPER_DESIGNS = [p for p in CONFIGS if SCOPES["C4+VGG"](p)]  # not the FPN configs: the modern baseline, whose
#   differences from the paper are the point (their own keys need no row)


def coverage_problems(rows: list[dict], keys_of=keys_set) -> list[str]:
    """The table against the paper configs: every key a paper design's config sets (with its _BASE_ files) is covered
    for that config by exactly one row (or is in UNROWED, with its reason); UNROWED is current; the behaviour rows
    are BEHAVIOURS. Empty: the table is complete. A deleted or narrowed row leaves configs uncovered, a new key in a
    config has no row: each is named."""
    problems = []
    for path in PAPER_DESIGNS:
        for key in sorted(keys_of(path)):
            if key in UNROWED:
                continue
            covering = [r["setting"] for r in rows if r["key"].strip("`") == key and path in _configs_of(r)]
            if len(covering) != 1:
                problems.append(f"{key} set by {path}: covered by {len(covering)} rows {covering} of {FIDELITY}, "
                                "not 1" + ("" if covering else " (add a row, or an UNROWED entry with its reason in "
                                                                "detection/paper_design.py)"))
    set_by_a_design = set().union(*(keys_of(p) for p in PAPER_DESIGNS))
    rowed = {r["key"].strip("`") for r in rows}
    problems += [f"UNROWED {key}: no C4 or VGG-16 paper config sets it" for key in UNROWED
                 if key not in set_by_a_design]
    problems += [f"UNROWED {key}: it has a row in {FIDELITY}" for key in UNROWED if key in rowed]
    behaviours = {r["setting"]: r["scope"] for r in rows if r["key"] == "—"}
    wanted = {setting: b.scope for setting, b in BEHAVIOURS.items()}
    problems += [f"behaviour {s!r} (detection/paper_design.py BEHAVIOURS, scope {c}): no row with key \"—\" and "
                 f"that scope in {FIDELITY}" for s, c in wanted.items() if behaviours.get(s) != c]
    problems += [f"{FIDELITY} row {s!r} has key \"—\" but is not in BEHAVIOURS (detection/paper_design.py)"
                 for s in behaviours if s not in wanted]
    return problems


def test_the_scope_legend_names_every_scope_word():
    legend = open(FIDELITY).read().split("Scopes (all words must hold)")[1].split("\n\n")[0]
    assert [w for w in SCOPES if f"`{w}`" not in legend] == []


def test_every_key_the_paper_configs_set_has_one_row_per_config():
    assert not coverage_problems(DETECTION_ROWS)
    assert [str(p.relative_to(p.parents[2])) for p in paper_config_files()] == CONFIGS
    for r in DETECTION_ROWS:
        assert r["scope"].split() and all(t in SCOPES for t in r["scope"].split()), r
        assert _locators(r["source"]), f"{r['setting']}: the source cites no locator"


def test_a_deleted_or_narrowed_row_and_a_new_config_key_are_named():
    rows = [r for r in DETECTION_ROWS if r["setting"] != "RoIs per image"]
    problems = coverage_problems(rows)
    assert len(problems) == len(PAPER_DESIGNS)
    assert problems[0].startswith("MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE set by configs/COCO-Detection/"
                                  "faster_rcnn_R_101_C4.yaml: covered by 0 rows [] of configs/FIDELITY.md, not 1")
    voc_anchors = [r for r in DETECTION_ROWS if r["setting"] != "anchors, VOC"]
    assert all("MODEL.ANCHOR_GENERATOR.SIZES set by configs/PascalVOC-Detection/" in p
               for p in coverage_problems(voc_anchors))
    narrowed = [{**r, "scope": "COCO"} if r["setting"] == "test NMS" else r for r in DETECTION_ROWS]
    assert coverage_problems(narrowed)[0].startswith("MODEL.ROI_HEADS.NMS_THRESH_TEST set by configs/PascalVOC")
    new_key = coverage_problems(DETECTION_ROWS, keys_of=lambda p: keys_set(p) | {"MODEL.RPN.LOSS_WEIGHT"})
    assert new_key and all(p.startswith("MODEL.RPN.LOSS_WEIGHT set by") for p in new_key)
    behaviour = [r for r in DETECTION_ROWS if r["setting"] != "box-scale clamp"]
    assert coverage_problems(behaviour) == [
        "behaviour 'box-scale clamp' (detection/paper_design.py BEHAVIOURS, scope all): no row with key \"—\" and "
        "that scope in configs/FIDELITY.md"]
    unlisted = [*DETECTION_ROWS, {**_row("box-scale clamp"), "setting": "box clamp"}]
    assert coverage_problems(unlisted) == [
        "configs/FIDELITY.md row 'box clamp' has key \"—\" but is not in BEHAVIOURS (detection/paper_design.py)"]


@pytest.mark.parametrize("setting", sorted(BEHAVIOURS))
def test_every_behaviour_names_code_that_exists(setting):
    """A BEHAVIOURS entry is not a bare name: the code it says does it must resolve (a rename makes it stale)."""
    import detection  # noqa: F401  (Detectron2's compiled ops load through the plugin)

    for where in BEHAVIOURS[setting].where:
        assert pkgutil.resolve_name(where) is not None, where


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
    assert len(re.findall(r"[A-Za-z]{2,}", STAMP.sub("", row["why"]))) >= 3, \
        f"{row['setting']}: ours {row['ours']} differs from the source's {row['source_value']}: say why"


@pytest.mark.parametrize("row", DETECTION_ROWS, ids=lambda r: f"{r['setting']}[{r['scope']}]")
def test_a_row_whose_ours_differs_from_its_source_says_why(row):
    check_why(row)


STAMP = re.compile(r"\s*<!-- stamp ([0-9a-f]{8}) -->$")
NOT_STAMPED = ("setting", "why")  # a stamp covers every other cell of the row


def expected_stamp(row: dict) -> str:
    cells = "\x1f".join(f"{k}={v}" for k, v in row.items() if k not in NOT_STAMPED)
    return hashlib.sha256(cells.encode()).hexdigest()[:8]


def check_stamp(row: dict) -> None:
    """A why is stamped with the cells it was written for; a row whose cells changed under an untouched why fails,
    naming the row and the stamp that would say the why was re-read. A row without a why carries no stamp."""
    m = STAMP.search(row["why"])
    text = STAMP.sub("", row["why"]).strip()
    want = expected_stamp(row)
    if not text:
        assert not m, f"{row['setting']}: a stamp but no why"
        return
    assert m, f"{row['setting']}: the why has no stamp; once it is right for the row, end it with <!-- stamp {want} -->"
    assert m.group(1) == want, (
        f"{row['setting']}: the why was written for other cells (stamp {m.group(1)}; the cells now stamp {want}): "
        f"re-read it against the key, scope, source and ours, then set <!-- stamp {want} -->")


CLASSIFICATION_COLUMNS = ("setting", "key", "scope", "reference", "source", "ours", "why")
CLASSIFICATION_ROWS = _rows("Classification", CLASSIFICATION_COLUMNS)


@pytest.mark.parametrize("row", DETECTION_ROWS + CLASSIFICATION_ROWS, ids=lambda r: f"{r['setting']}[{r['scope']}]")
def test_every_why_is_stamped_with_the_cells_it_was_written_for(row):
    check_stamp(row)


def test_a_changed_ours_under_an_untouched_why_is_named():
    """The config value and its ours cell changed together, the why left as it was: the stamp catches it."""
    row = _row("VOC learning rate")
    check_stamp(row)
    with pytest.raises(AssertionError, match=r"VOC learning rate: the why was written for other cells"):
        check_stamp({**row, "ours": "`0.004`"})
    with pytest.raises(AssertionError, match=r"VOC learning rate: the why was written for other cells"):
        check_stamp({**row, "source_value": "`0.002`"})
    with pytest.raises(AssertionError, match="has no stamp"):
        check_stamp({**row, "why": STAMP.sub("", row["why"])})


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
    ("VGG-16 fc6/fc7 dropout, COCO", "Dropout|absent", "Dropuot|absent"),  # a misspelt type is not an absent one
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


@pytest.mark.parametrize("setting, old, new, error", [
    # a |default moved to a layer of another type (a ReLU has no ParamSpec), to a param index the layer lacks, to a
    # layer where the field is set, or to a loss layer of another type
    ("bias weight decay", "conv3_1.param[1]", "relu3_1.param[1]", "the layer is a ReLU"),
    ("bias weight decay", "conv3_1.param[1]", "conv3_1.param[2]", "the layer has 2 'param'"),
    ("bias weight decay", "conv3_1.param[1]", "conv1_1.param[1]", "the source sets it"),
    ("RoI box loss", "loss_bbox.smooth_l1", "loss_cls.smooth_l1", "the layer is a SoftmaxWithLoss"),
    ("RoI box loss", "loss_bbox.smooth_l1", "rpn_loss_bbox.smooth_l1", "the source sets it"),
    # an |absent type the net has, in another net of the sources
    ("VGG-16 fc6/fc7 dropout, COCO", "coco/train.prototxt:Dropout|absent", "pascal_voc/train.prototxt:Dropout|absent",
     "layer(s) of type 'Dropout' (drop6, drop7): it is not absent"),
    ("VGG-16 fc6/fc7 dropout, COCO", "Dropout|absent", "drop6|absent", "no reference prototxt has a layer of type"),
])
def test_a_default_or_absent_locator_is_checked_for_what_it_claims(setting, old, new, error):
    """|default: an existing layer of a type with that field, the indexed messages present, the field omitted;
    |absent: no layer of that type (tests/reference_sources.py)."""
    row = _row(setting)
    check_sources(row)
    assert old in row["source"]
    with pytest.raises(LocatorError, match=re.escape(error)):
        check_sources({**row, "source": row["source"].replace(old, new)})


def test_caffe_defaults_are_read_from_their_declarations():
    assert {path: d.value for path, d in CAFFE_DEFAULTS.items()} == {
        "param.lr_mult": 1.0, "param.decay_mult": 1.0, "dropout_param.dropout_ratio": 0.5,
        "smooth_l1_loss_param.sigma": 1.0}


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


@pytest.mark.parametrize("row", CLASSIFICATION_ROWS, ids=lambda r: r["setting"])
def test_classification_recipe_rows(row):
    # our own document: an expression over ClsConfig, e.g. ClsConfig(dataset="cifar10").base_lr()
    value = eval(row["key"].strip("`"), {"__builtins__": {}}, {"ClsConfig": ClsConfig, "TEST_MODES": TEST_MODES,
                                                                "RECIPE": RECIPE})
    expected = _literal(row["ours"])
    assert _norm(value) == pytest.approx(_norm(expected)) if isinstance(expected, float) else \
        _norm(value) == _norm(expected), (row["key"], value)
