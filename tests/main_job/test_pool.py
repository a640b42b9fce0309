"""detection.main_job.pool: the parts of one preset's job as one family, decided under the current rules -- AP, Holm
alone, the control reading the no-calls, nets at chance out -- on the committed results files, through
tools/compare_jobs.py --pool and RESULTS.md's blocks that cite several files."""

import json
import shutil

import pytest

from classification.engine.run_files import read_json
from conftest import REPO, run_tool
from detection.main_job.pool import PoolError, pool_results
from detection.main_job.results_doc import regenerate

HALVES = ["results/full_resnet101_2026-12-04_amd.json", "results/full_vgg16_bn_2026-12-06_intel.json"]
FAMILY = "results/family_2026-12-06_intel.json"


def _parts(*names):
    return [read_json(REPO / n) for n in names], list(names)


def test_the_full_presets_halves_are_one_family_of_six_decided_on_ap():
    parts, names = _parts(*HALVES)
    pooled = pool_results(parts, names, "full")
    arms = pooled["arms"]
    assert len(arms) == 6 and {c["metric"] for c in arms} == {"AP"} and pooled["decided_on"] == "AP"
    assert all(c["adjustment"]["size"] == 6 for c in arms)
    assert pooled["family"] == "the full preset's 6 comparisons over 2 part(s)" and pooled["parts"] == HALVES
    # each half alone adjusted over its own 3: a stricter family of 6 never has a smaller adjusted p
    alone = {(c["a"], c["b"]): c for n in HALVES for c in pool_results(*_parts(n))["arms"]}
    assert all(c["adjustment"]["p"] >= alone[(c["a"], c["b"])]["adjustment"]["p"] for c in arms)
    # written before the control existed: Holm alone calls; the no-calls read that no control was run
    assert pooled["reading"].endswith("ran no positive control (written before the control existed)")
    assert all(c["interval"] is not None and c["mde"] > 0 for c in arms) and "gate" not in pooled
    assert all(c["adjustment"]["reading"] == pooled["reading"] for c in arms if c["call"] is None)


def test_a_net_at_chance_is_in_no_pooled_comparison_and_the_rest_keep_theirs():
    pooled = pool_results(*_parts(FAMILY))
    sides = {s for c in pooled["deltas"] + pooled["plain_vs_residual"] for s in (c["a"], c["b"])}
    assert not any("plain34" in s for s in sides) and "resnet18" in sides  # 89.5% error on a 10-way guess
    row = next(r for r in pooled["leaderboard"] if r["backbone"] == "plain34")
    assert row["not_ranked"].startswith("pretraining never left chance")
    assert pooled["correlation"]["spearman"] is not None  # 5 nets left chance: no control withholds it


def test_the_degradation_experiments_no_calls_are_read_by_no_control():
    pooled = pool_results(*_parts("results/degradation_2026-12-05_intel.json"))
    assert pooled["reading"] is None and any(c["call"] for c in pooled["degradation_comparisons"])


@pytest.mark.bad_input
def test_two_runs_of_one_part_are_refused_naming_the_group():
    parts, names = _parts(HALVES[0], HALVES[0])
    with pytest.raises(PoolError, match="group resnet101_gn_pretrained is also in results/full_resnet101"):
        pool_results(parts, names)


@pytest.mark.bad_input
def test_parts_pretrained_at_different_image_sizes_are_refused_naming_them():
    """--pretrain-image-size 64 and the 32 px of a part written before the size was recorded: not one family."""
    parts, names = _parts(*HALVES)
    parts[1]["pretrain_image_size"] = 64
    with pytest.raises(PoolError, match=r"pretrained at different image sizes \(results/full_resnet101_2026-12-04_amd"
                                        r".json: 32 px; results/full_vgg16_bn_2026-12-06_intel.json: 64 px\)"):
        pool_results(parts, names)
    parts[1]["pretrain_image_size"] = 32
    assert pool_results(parts, names)["pretrain_image_size"] == 32


@pytest.mark.bad_input
@pytest.mark.parametrize("sets", [({"name": "embedded_val", "content": "a"}, {"name": "embedded_val", "content": "b"}),
                                  ({"name": "embedded_val", "content": "a"}, None)])
def test_parts_scored_on_different_test_sets_are_refused_naming_them(sets):
    """1000 val scenes and the earlier 100, or one recorded and one not: not one family."""
    parts, names = _parts(*HALVES)
    for res, test_set in zip(parts, sets):
        if test_set is not None:
            res["test_set"] = test_set
    with pytest.raises(PoolError, match=r"not scored on one test set \(results/full_resnet101_2026-12-04_amd.json: "
                                        r"embedded_val; results/full_vgg16_bn_2026-12-06_intel.json: "):
        pool_results(parts, names)
    for res in parts:  # one recorded test set: pooled
        res["test_set"] = sets[0]
    assert pool_results(parts, names)["test_set"] == sets[0]


def test_compare_jobs_pool_writes_the_pooled_results_and_a_block_can_cite_the_parts(tmp_path):
    out = tmp_path / "pooled.json"
    proc = run_tool("tools/compare_jobs.py", "--pool", *(REPO / h for h in HALVES), "--output", out, "--preset",
                    "full", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(out.read_text())["family"] == "the full preset's 6 comparisons over 2 part(s)"
    for h in HALVES:
        (tmp_path / "results").mkdir(exist_ok=True)
        shutil.copy(REPO / h, tmp_path / h)
    doc = tmp_path / "RESULTS.md"
    doc.write_text(f"# r\n<!-- results: {' '.join(HALVES)} -->\nstale\n<!-- end results -->\n")
    text = regenerate(doc)
    assert "Comparisons (one family: the preset's 6 comparisons over 2 part(s))" in text
    listed = [ln for ln in text.splitlines() if ln.startswith("- arm comparisons: ")]
    assert len(listed) == 6  # both parts' three arm comparisons, each as its call or its no-call
