"""detection.main_job.recompute (tools/results_doc.py --recompute): a finished job's results.json rewritten under the
statistic as it is now -- every comparison, the control and its reading from the per-unit values the file holds,
each changed call named, a comparison it cannot recompute refused by name."""

import json

import pytest

from classification.engine.run_files import RunFileError
from conftest import REPO, run_tool
from detection.main_job.compare import recomputed_family
from detection.main_job.control import NOT_SEEN
from detection.main_job.recompute import CallChange, recompute_results

FAMILY = REPO / "results" / "family_2026-12-06_amd.json"


def test_a_stale_file_is_rewritten_to_what_the_statistic_says_and_each_changed_call_is_named():
    res = json.loads(FAMILY.read_text())
    stale = json.loads(json.dumps(res))
    d = stale["deltas"][1]  # plain18 vs vgg16_bn: called
    d["call"], d["interval"], d["mde"] = None, [0.0, 0.0], 1.0  # as a veto or an older rule wrote it
    stale["reading"] = "its positive control was not called (the older words)"
    out, changes = recompute_results(stale)
    out = json.loads(json.dumps(out))  # as written
    assert changes == [CallChange("deltas", d["a"], d["b"], "AP", None, res["deltas"][1]["call"])]
    assert out["deltas"][1] == res["deltas"][1]  # the committed file is what the statistic computes
    assert out["reading"].startswith(NOT_SEEN + " (vgg16_bn with 0.5 of its pretraining vs the whole: ")
    again, none = recompute_results(out)
    assert json.loads(json.dumps(again)) == out and none == []  # a fixed point
    family = recomputed_family(out)
    assert all(family[("deltas", c["metric"], c["a"], c["b"])].call == c["call"] for c in out["deltas"])


def test_a_comparison_without_its_per_unit_values_is_refused_by_name():
    res = json.loads(FAMILY.read_text())
    res["groups"] = [g for g in res["groups"] if g["name"] != "plain34_frozenbn_pretrained"]
    with pytest.raises(RunFileError, match=r"x\.json: deltas\[2\] plain34_frozenbn_pretrained vs "
                                           r"vgg16_bn_frozenbn_pretrained has no per-unit values"):
        recompute_results(res, "x.json")


def test_the_tool_rewrites_the_files_it_is_given_and_prints_the_changed_calls(tmp_path):
    res = json.loads(FAMILY.read_text())
    res["deltas"][1]["call"] = None
    path = tmp_path / "family_2026-12-06_amd.json"
    path.write_text(json.dumps(res))
    doc = tmp_path / "doc.md"  # the documents it regenerates after: one without blocks, not the repository's
    doc.write_text("# no results blocks\n")
    out = run_tool("tools/results_doc.py", "--recompute", str(path), "--", str(doc))
    assert f"{path}: recomputed, 1 call(s) changed" in out.stdout, out.stdout + out.stderr
    assert "deltas: plain18_frozenbn_pretrained vs vgg16_bn_frozenbn_pretrained (AP): no call -> " \
           "vgg16_bn_frozenbn_pretrained" in out.stdout
    assert json.loads(path.read_text())["deltas"][1]["call"] == "vgg16_bn_frozenbn_pretrained"
