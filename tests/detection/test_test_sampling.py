"""detection.report.test_sampling: each comparison of runs scored on one COCO test set holds, inside its interval,
the part of Δ's movement over redrawn test images that every unit of a side shares (each unit's own luck left to the
units' spread); a run whose ground truth file is not what
it was scored on gets none; a recomputed comparison keeps the part its job measured and drops a malformed one."""

import json
import math

import numpy as np
import pytest
from test_resampled_ap import IMAGES, _coco, _data  # the evaluation test's synthetic set

from detection.evaluation.resampled import image_draws, image_matches, resampled_ap
from detection.main_job.compare import recomputed
from detection.report.comparison import compare, with_test_set
from detection.report.groups import compare_groups, group_runs
from detection.report.runs import RunResult
from detection.report.tables import comparisons_table
from detection.report.test_sampling import shared_test_set_se


def _run(tmp_path, name, dataset, results, json_file, *, ap=None):
    """A finished COCO-scored run directory: its detections file and the AP its evaluation recorded."""
    path = tmp_path / name
    run = RunResult(name, str(path), "finished", weights="", seed=int(name[-1]), kind="coco", dataset="test",
                    dataset_files={"json_file": str(json_file)}, config={"MODEL": {"X": 1}})
    run.predictions_file.parent.mkdir(parents=True)
    run.predictions_file.write_text(json.dumps(results))
    whole = resampled_ap(image_matches(_coco(dataset), json.loads(json.dumps(results))), np.ones((1, IMAGES)))
    run.metrics = {"AP": float(whole["AP"][0]) if ap is None else ap}
    return run


def _jitter(results, seed):
    rng = np.random.default_rng(seed)
    return [{**r, "bbox": [v + rng.normal(0, 2) for v in r["bbox"]]} for r in results]


def test_a_comparison_of_two_groups_on_one_test_set_holds_the_shared_part_of_delta_over_the_draws(tmp_path):
    dataset, results = _data()
    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps(dataset))
    runs = [_run(tmp_path, f"{side}_s{i}", dataset, _jitter(results, 10 * k + i), gt)
            for k, side in enumerate("ab") for i in range(3)]
    a, b = group_runs(runs, ["a"] * 3 + ["b"] * 3)
    c = compare_groups(a, b, "AP")
    # by hand: every run on the same draws, each side's mean of its runs (units: runs from scratch), Δ per draw
    draws = image_draws(IMAGES)
    per_run = [resampled_ap(image_matches(_coco(dataset), json.loads(json.dumps(_jitter(results, 10 * k + i)))),
                            draws)["AP"] for k in range(2) for i in range(3)]
    cov = np.cov(np.stack(per_run))
    within = [(cov[s, s].sum() - np.trace(cov[s, s])) / 6 for s in (slice(0, 3), slice(3, 6))]  # 3 x 2 pairs
    shared = within[0] + within[1] - 2 * cov[:3, 3:].mean()
    assert c.test_images == IMAGES and c.test_set_se == pytest.approx(math.sqrt(max(shared, 0.0)), rel=1e-9)
    units_only = compare("AP", "a", a.values("AP"), a.unit, "b", b.values("AP"), b.unit)
    assert c.se ** 2 == pytest.approx(units_only.se ** 2 + c.test_set_se ** 2)  # inside the interval
    assert c.df == units_only.df  # the units' df: adding the part widens the interval, never narrows it
    assert c.interval[1] - c.interval[0] > units_only.interval[1] - units_only.interval[0]
    assert f"the test set's part inside it, SE {c.test_set_se:.2f} ({IMAGES} images redrawn)" in c.describe()
    head, (row,) = comparisons_table([c])
    assert dict(zip(head, row))["test-set SE"] == f"{c.test_set_se:.2f}"  # the report's table shows it
    same = compare_groups(a, group_runs(runs[:3], ["a2"] * 3)[0], "AP")
    assert same.test_set_se == 0.0  # the same runs on both sides: the draws move both alike


def test_a_run_scored_on_other_ground_truth_than_its_path_now_holds_has_no_test_set_part(tmp_path):
    """A relative json path read from another directory, or a file replaced since: its AP on the whole set is not
    the recorded one, and a test-set SE from it would be silently wrong."""
    dataset, results = _data()
    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps(dataset))
    good = [_run(tmp_path, f"a_s{i}", dataset, results, gt) for i in range(2)]
    stale = [_run(tmp_path, f"b_s{i}", dataset, results, gt, ap=99.0) for i in range(2)]
    a, b = group_runs(good + stale, ["a", "a", "b", "b"])
    assert compare_groups(a, b, "AP").test_set_se is None
    missing = _run(tmp_path, "c_s0", dataset, results, tmp_path / "absent.json")
    assert compare_groups(a, group_runs([missing], ["c"])[0], "AP").test_set_se is None
    other = tmp_path / "other.json"  # detections of images this ground truth lacks: pycocotools asserts
    other.write_text(json.dumps({**dataset, "images": dataset["images"][:2],
                                 "annotations": [x for x in dataset["annotations"] if x["image_id"] <= 2]}))
    foreign = [_run(tmp_path, f"d_s{i}", dataset, results, gt) for i in range(4)]
    for r in foreign:
        r.dataset_files = {"json_file": str(other)}
    d, e = group_runs(foreign, ["d", "d", "e", "e"])
    assert compare_groups(d, e, "AP").test_set_se is None


def test_the_shared_part_leaves_out_each_units_own_luck_which_the_units_spread_holds():
    """Draws where each side's units share a movement of variance 1 and each unit has its own of variance 4: the
    contrast's shared part has variance 2 (1 + 1), whatever the units' own parts; the whole SD over the draws would
    add 4/5 + 4/5 that the units' spread already holds. A side of one unit cannot split the two: all of it counts."""
    rng = np.random.default_rng(0)
    draws = 20_000
    sides = []
    for _ in range(2):
        shared = rng.normal(0, 1, draws)
        sides.append({f"u{i}": [shared + rng.normal(0, 2, draws)] for i in range(5)})
    got = shared_test_set_se([(1.0, sides[0]), (-1.0, sides[1])])
    assert got == pytest.approx(math.sqrt(2.0), rel=0.05)
    whole = np.std(np.mean([v[0] for v in sides[0].values()], axis=0)
                   - np.mean([v[0] for v in sides[1].values()], axis=0), ddof=1)
    assert whole == pytest.approx(math.sqrt(2.0 + 1.6), rel=0.05)
    one = shared_test_set_se([(1.0, {"u0": sides[0]["u0"]}), (-1.0, sides[1])])
    assert one == pytest.approx(math.sqrt(1.0 + 4.0 + 1.0), rel=0.05)
    assert shared_test_set_se([(1.0, {}), (-1.0, sides[1])]) is None


@pytest.mark.parametrize("recorded, kept", [((0.41, 1000), (0.41, 1000)), (("0.41", 1000), (None, None)),
                                             ((float("nan"), 1000), (None, None)), ((0.41, True), (None, None)),
                                             ((-1.0, 1000), (None, None))])
def test_a_recomputed_comparison_keeps_the_test_set_part_its_job_measured_and_drops_a_malformed_one(recorded,
                                                                                                 kept):
    values = {"a": {"p0": [50.0], "p1": [52.0]}, "b": {"p0": [45.0], "p1": [44.0], "p2": [47.0]}}
    res = {"groups": [{"name": n, "unit": "pretraining run", "values": {"AP": v}} for n, v in values.items()]}
    d = {"metric": "AP", "a": "a", "b": "b", "test_set_se": recorded[0], "test_images": recorded[1]}
    c = recomputed(res, "deltas", 0, d)
    assert (c.test_set_se, c.test_images) == kept
    assert c.interval == with_test_set(compare("AP", "a", values["a"], "pretraining run", "b", values["b"],
                                               "pretraining run"), *kept).interval
