"""RESULTS.md's result blocks are generated from the results.json files they cite (tools/results_doc.py): the
document in the repository agrees with its files, a changed number in a file makes the check fail, and a block
citing a missing file is one line naming it."""

import json
import shutil

from conftest import REPO, run_tool
from detection.main_job.results_doc import BLOCK, comparison_from_json, regenerate, render, stale_blocks
from detection.report.comparison import adjust, compare


def test_results_md_agrees_with_the_results_it_cites():
    doc = REPO / "RESULTS.md"
    assert BLOCK.search(doc.read_text())  # at least one generated block (not only the prose naming the markers)
    assert stale_blocks(doc) == []


def test_a_changed_number_makes_the_check_fail_and_regeneration_fixes_it(tmp_path):
    results = {"groups": [], "arms": [], "family": "the job's 1 comparisons", "deltas": [json.loads(json.dumps(
        {**_asdict(adjust([compare("AP50", "b", {0: [90.0], 1: [91.0]}, "pretraining run", "a",
                                   {0: [80.0], 1: [82.0]}, "pretraining run")], "the job's 1 comparisons")[0])}))]}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "job.json").write_text(json.dumps(results))
    doc = tmp_path / "RESULTS.md"
    doc.write_text("Prose stays.\n<!-- results: results/job.json -->\n<!-- end results -->\nMore prose.\n")
    assert stale_blocks(doc) == ["results/job.json"]
    doc.write_text(regenerate(doc))
    assert stale_blocks(doc) == [] and doc.read_text().startswith("Prose stays.\n") and "More prose." in doc.read_text()
    assert "backbones, b vs a: ΔAP50 +9.50" in doc.read_text() and "Holm step-down over 1" in doc.read_text()
    results["deltas"][0]["delta"] = 1.5  # the file changes, the document does not
    (tmp_path / "results" / "job.json").write_text(json.dumps(results))
    assert stale_blocks(doc) == ["results/job.json"]
    proc = run_tool("tools/results_doc.py", doc, "--check", timeout=120)
    assert proc.returncode == 1 and "results/job.json" in proc.stderr


def test_a_block_citing_a_missing_file_is_one_line_naming_it(tmp_path):
    doc = tmp_path / "RESULTS.md"
    doc.write_text("<!-- results: results/none.json -->\n<!-- end results -->\n")
    proc = run_tool("tools/results_doc.py", doc, "--check", timeout=120)
    assert proc.returncode == 2 and "results/none.json" in proc.stderr and "Traceback" not in proc.stderr


def test_a_comparison_survives_the_round_trip_through_json():
    c = adjust([compare("AP", "a", {0: [3.0], 1: [4.0]}, "run", "b", {0: [1.0], 1: [0.5]}, "run")], "f")[0]
    back = comparison_from_json(json.loads(json.dumps({**_asdict(c), "call": "ignored"})))
    assert back == c and back.describe() == c.describe()
    assert render({"deltas": [_asdict(c)]}).count("\n- ") == 1


def test_a_depth_comparison_resting_on_a_net_at_chance_is_marked_not_read():
    deep = adjust([compare("train_error", "plain56", {0: [88.0], 1: [60.0], 2: [62.0]}, "seed", "plain20",
                           {0: [20.0], 1: [19.0], 2: [18.0]}, "seed")], "f")[0]
    nets = [{"model": "plain56", "at_chance": ["seed 0"]}, {"model": "plain20", "at_chance": []}]
    text = render({"degradation": nets, "degradation_comparisons": [_asdict(deep)], "interactions": [_asdict(deep)],
                   "interaction_terms": [["plain56", "plain20", "resnet56", "resnet20"]]})
    assert text.count("not read as evidence about depth: plain56 did not leave chance") == 2
    nets[0]["at_chance"] = []
    assert "not read" not in render({"degradation": nets, "degradation_comparisons": [_asdict(deep)]})


def _asdict(c):
    from dataclasses import asdict

    return asdict(c)


def test_the_copy_of_results_md_in_a_tmp_dir_needs_its_files(tmp_path):
    shutil.copy(REPO / "RESULTS.md", tmp_path / "RESULTS.md")
    proc = run_tool("tools/results_doc.py", tmp_path / "RESULTS.md", "--check", timeout=120)
    assert proc.returncode == 2 and "no such file" in proc.stderr
