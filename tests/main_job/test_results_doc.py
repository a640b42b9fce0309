"""RESULTS.md's result blocks are generated from the results.json files they cite (tools/results_doc.py): the
document in the repository agrees with its files, a changed number in a file makes the check fail, and a block
citing a missing file is one line naming it."""

import json
import shutil

import pytest

from conftest import REPO, run_tool
from detection.main_job.results_doc import (
    BLOCK,
    ResultsDocError,
    comparison_from_json,
    regenerate,
    render,
    render_headline,
    stale_blocks,
)
from detection.report.comparison import adjust, compare


def test_results_md_agrees_with_the_results_it_cites():
    doc = REPO / "RESULTS.md"
    assert BLOCK.search(doc.read_text())  # at least one generated block (not only the prose naming the markers)
    assert stale_blocks(doc) == []


def test_a_changed_number_makes_the_check_fail_and_regeneration_fixes_it(tmp_path):
    values = {"b": {"p0": [90.0], "p1": [91.0]}, "a": {"p0": [80.0], "p1": [82.0]}}
    groups = [{"name": n, "unit": "pretraining run", "values": {"AP": v, "AP50": v}} for n, v in values.items()]
    results = {"groups": groups, "arms": [], "family": "the job's 1 comparisons", "reading": None,
               "deltas": [json.loads(json.dumps({**_asdict(adjust([compare(
                   "AP50", "b", values["b"], "pretraining run", "a", values["a"], "pretraining run")],
                   "the job's 1 comparisons")[0])}))]}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "job.json").write_text(json.dumps(results))
    doc = tmp_path / "RESULTS.md"
    doc.write_text("Prose stays.\n<!-- results: results/job.json -->\n<!-- end results -->\nMore prose.\n")
    assert stale_blocks(doc) == ["results/job.json"]
    doc.write_text(regenerate(doc))
    assert stale_blocks(doc) == [] and doc.read_text().startswith("Prose stays.\n") and "More prose." in doc.read_text()
    # decided anew from the per-unit values, on today's metric (AP), whatever the file recorded (AP50)
    assert "- backbones: b is ahead of a by 9.5 AP [" in doc.read_text() and "Holm step-down over 1" in doc.read_text()
    groups[0]["values"]["AP"]["p1"] = [95.0]  # the file changes, the document does not
    (tmp_path / "results" / "job.json").write_text(json.dumps(results))
    assert stale_blocks(doc) == ["results/job.json"]
    proc = run_tool("tools/results_doc.py", doc, "--check", timeout=120)
    assert proc.returncode == 1 and "results/job.json" in proc.stderr


@pytest.mark.bad_input
def test_a_listed_comparison_the_file_cannot_back_is_one_error_not_dropped(tmp_path):
    c = adjust([compare("AP", "b", {0: [1.0], 1: [2.0]}, "run", "a", {0: [0.5], 1: [0.7]}, "run")], "f")[0]
    (tmp_path / "f.json").write_text(json.dumps({"groups": [], "deltas": [_asdict(c)]}))
    (tmp_path / "DOC.md").write_text("<!-- results: f.json -->\n<!-- end results -->\n")
    with pytest.raises(ResultsDocError, match="f.json: deltas lists 'b' vs 'a', whose per-unit AP values are not in "
                                              "it"):
        stale_blocks(tmp_path / "DOC.md")


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


def _group(name="resnet18_frozenbn_pretrained", unit="pretraining run", ap50=90.0, ap=60.0, values=None):
    return {"name": name, "arm": "frozenbn_pretrained", "unit": unit, "values": values or {},
            "metrics": {"AP50": {"mean": ap50, "units": 3, "interval": [88.0, 92.0]},
                        "AP": {"mean": ap, "units": 3, "interval": None}}}


def _cells(row: str) -> list[str]:
    """A Markdown table row's cells, split where a `|` is not escaped."""
    import re

    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


@pytest.mark.bad_input
def test_a_name_with_a_pipe_or_html_stays_in_its_cell_and_each_column_keeps_its_metric():
    text = render({"groups": [_group(name="a|b <script>x</script>")]})
    row = next(ln for ln in text.splitlines() if ln.startswith("| a"))
    cells = _cells(row)
    assert len(cells) == 6 and cells[3] == "90.0 [88.0, 92.0]" and cells[4] == "60.0"  # AP50, then AP
    assert "<script>" not in text and "&lt;script&gt;" in text


def _comparison(a="a", b="b", metric="AP50"):
    return _asdict(adjust([compare(metric, a, {0: [3.0], 1: [4.0]}, "run", b, {0: [1.0], 1: [0.5]}, "run")], "f")[0])


@pytest.mark.bad_input
def test_a_name_holding_the_end_marker_cannot_split_the_block_and_regeneration_is_idempotent(tmp_path):
    marker = "x <!-- end results --> |y"
    groups = [_group(name=marker, values={"AP": {"p0": [3.0], "p1": [4.0]}}),
              _group(name="b", values={"AP": {"p0": [1.0], "p1": [0.5]}})]
    (tmp_path / "r.json").write_text(json.dumps({"groups": groups, "deltas": [_comparison(a=marker, metric="<b>")]}))
    doc = tmp_path / "RESULTS.md"
    doc.write_text("<!-- results: r.json -->\n<!-- end results -->\ntail\n")
    once = regenerate(doc)
    doc.write_text(once)
    assert regenerate(doc) == once and stale_blocks(doc) == [] and once.count("<!-- end results -->") == 1


@pytest.mark.bad_input
def test_undefined_numbers_are_dashes_and_malformed_files_are_one_error_naming_file_and_key(tmp_path):
    nan = _group()
    nan["metrics"]["AP"]["mean"] = float("nan")
    null = _group()
    null["metrics"]["AP50"]["mean"] = None
    assert _cells(render({"groups": [nan]}).splitlines()[2])[4] == "—"
    assert _cells(render({"groups": [null]}).splitlines()[2])[3] == "—"
    bad = {"object groups": ({"groups": {"a": 1}}, r"f.json\.groups: expected list"),
           "a list": ([1, 2], r"f.json: a results.json is an object, got list"),
           "a string mean": ({"groups": [_group(ap50="90")]}, r"groups\[0\]\.metrics\.AP50\.mean: expected a finite"),
           "no unit": ({"groups": [{"name": "g", "metrics": {}}]}, r"groups\[0\]: a group has a 'name' and a 'unit'"),
           "huge AP": ({"groups": [_group(ap50=1e308)]}, r"AP50\.mean: 1e\+308 is outside \[0, 100\]"),
           "negative error": ({"pretraining": {"r18 BN": {"mean": -50, "units": 1}}},
                              r"pretraining\.r18 BN\.mean: -50 is outside"),
           "bad comparison": ({"deltas": [{"a": 1}]}, r"deltas\[0\]: not a comparison"),
           "a textual delta": ({"deltas": [{**_comparison(), "delta": "x"}]}, r"deltas\[0\]: not a comparison"),
           "interaction terms": ({"interactions": [_comparison()], "interaction_terms": [5]},
                                 r"interaction_terms\[0\]: expected a list")}
    for what, (results, message) in bad.items():
        with pytest.raises(ResultsDocError, match=message):
            render(results, "f.json")
        (tmp_path / "f.json").write_text(json.dumps(results))
        (tmp_path / "DOC.md").write_text("<!-- results: f.json -->\n<!-- end results -->\n")
        proc_err = None
        try:
            stale_blocks(tmp_path / "DOC.md")
        except ResultsDocError as err:
            proc_err = str(err)
        assert proc_err and "DOC.md: f.json" in proc_err and "\n" not in proc_err, what


def _headline_job(tmp_path, r101: dict, vgg: dict, control: dict | None = None):
    groups = [{"name": n, "arm": "frozenbn_pretrained", "unit": "pretraining run", "values": {"AP": v, "AP50": v},
               "metrics": {"AP": {"mean": sum(x[0] for x in v.values()) / len(v), "units": len(v)}}}
              for n, v in (("r101", r101), ("vgg", vgg), ("vgg_control", control)) if v]
    delta = adjust([compare("AP", "r101", r101, "pretraining run", "vgg", vgg, "pretraining run")], "f")[0]
    (tmp_path / "results").mkdir(exist_ok=True)
    job = {"groups": groups, "arms": [], "family": "the job's 1 comparisons", "reading": None,
           "deltas": [_asdict(delta)]}
    if control:
        job["control"] = _asdict(adjust([compare("AP", "vgg", vgg, "pretraining run", "vgg_control", control,
                                                 "pretraining run")], "the positive control")[0])
    (tmp_path / "results" / "job.json").write_text(json.dumps(job))
    doc = tmp_path / "README.md"
    doc.write_text("# Title\n\nPurpose.\n\n<!-- headline: results/job.json -->\n<!-- end headline -->\n\nMore.\n")
    doc.write_text(regenerate(doc))
    return doc


def test_a_headline_block_is_its_one_comparisons_call_as_a_sentence_and_the_check_sees_it(tmp_path):
    """The README's first result: the call (or the budget's resolution) in one sentence above the groups' table,
    regenerated by the tool that writes RESULTS.md and checked by it."""
    called = _headline_job(tmp_path, {0: [50.0], 1: [51.0], 2: [49.5]}, {0: [56.0], 1: [55.0], 2: [57.0]},
                           control={0: [40.0], 1: [42.0], 2: [41.0]})
    text = called.read_text()
    assert "**vgg is ahead of r101 by 5.8 AP [" in text
    assert "(95% CI, Holm step-down over 1; 3 vs 3 pretraining runs)**" in text
    assert "Positive control: vgg is ahead of vgg_control by 15.0 AP [" in text
    assert "| r101 | frozenbn_pretrained | 3 pretraining runs | — | 50.2 | — |" in text  # units of the AP scored
    assert text.endswith("<!-- end headline -->\n\nMore.\n")
    assert stale_blocks(called) == []
    unresolved = _headline_job(tmp_path, {0: [50.0], 1: [58.0], 2: [49.5]}, {0: [56.0], 1: [50.0], 2: [57.0]})
    assert "r101 vs vgg: no difference this job could see: ΔAP -1.8 [" in unresolved.read_text()
    assert "the smallest difference it could see is" in unresolved.read_text()
    data = json.loads((tmp_path / "results" / "job.json").read_text())
    data["groups"][0]["values"]["AP"]["1"] = [40.0]  # the file changes, the README does not
    (tmp_path / "results" / "job.json").write_text(json.dumps(data))
    assert stale_blocks(unresolved) == ["results/job.json"]


def test_a_headline_says_what_a_control_from_untrained_pretraining_shows_and_names_pooled_parts(tmp_path):
    """A control whose own pretraining never left chance shows only trained vs untrained: the headline says so, as
    the results block does; pooled parts' controls are named by part (one control: no label); a count that is no
    integer is one error naming the key."""
    doc = _headline_job(tmp_path, {0: [50.0], 1: [51.0], 2: [49.5]}, {0: [56.0], 1: [55.0], 2: [57.0]},
                        control={0: [40.0], 1: [42.0], 2: [41.0]})
    path = tmp_path / "results" / "job.json"
    data = json.loads(path.read_text())
    assert "Positive control: vgg is ahead of vgg_control" in doc.read_text()  # one control: no part label
    path.write_text(json.dumps({**data, "control_at_chance": ["p0", "p1"]}))  # as the job records it
    assert "Its pretraining never left chance (2 run(s)): called, it shows only that" in regenerate(doc)
    parts = [{**data["control"], "part": name} for name in ("a.json", "b.json")]  # a pooled dict, as pool.py makes
    text = render_headline({**{k: v for k, v in data.items() if k != "control"}, "controls": parts}, "pooled")
    assert "Positive control (a.json): vgg is ahead" in text and "Positive control (b.json):" in text
    with pytest.raises(ResultsDocError, match=r"pooled.controls\[0\].pretraining_at_chance: expected int"):
        render_headline({**data, "controls": [{**parts[0], "pretraining_at_chance": "x"}]}, "pooled")


@pytest.mark.bad_input
def test_a_line_break_in_a_name_stays_inside_its_table_cell_and_the_headline(tmp_path):
    """A name from an untrusted file with a line break in it ended the row (or the headline's bold) and began a
    forged one: generated text keeps every name on its line."""
    called = _headline_job(tmp_path, {0: [50.0], 1: [51.0], 2: [49.5]}, {0: [56.0], 1: [55.0], 2: [57.0]})
    data = json.loads((tmp_path / "results" / "job.json").read_text())
    forged = "r101\n\n# forged heading\n| forged | row |"
    data["groups"][0]["name"] = data["deltas"][0]["a"] = forged
    (tmp_path / "results" / "job.json").write_text(json.dumps(data))
    text = regenerate(called)
    assert "\n| forged" not in text and "\n# forged" not in text
    assert "**vgg is ahead of r101  # forged heading | forged | row | by " in text
    assert "| r101  # forged heading \\| forged \\| row \\| | frozenbn_pretrained |" in text


@pytest.mark.bad_input
def test_a_headline_citing_a_job_without_exactly_one_backbone_comparison_is_one_error_naming_it(tmp_path):
    (tmp_path / "f.json").write_text(json.dumps({"groups": [], "deltas": []}))
    (tmp_path / "README.md").write_text("<!-- headline: f.json -->\n<!-- end headline -->\n")
    with pytest.raises(ResultsDocError, match=r"f.json.deltas: a headline is one backbone comparison, the file has 0"):
        stale_blocks(tmp_path / "README.md")


def test_a_demo_block_shows_the_jobs_panel_time_machine_and_table_and_goes_stale_with_them(tmp_path):
    """The README's `make demo`: the panel beside the results file, the job's measured minutes with the machine and
    day, and its groups' table -- all from the job's files, so the time cannot disagree with the run shown."""
    _headline_job(tmp_path, {0: [50.0]}, {0: [56.0]})
    path = tmp_path / "results" / "job.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "wall_minutes": 15.2,
                                "machine": "Intel(R) Xeon(R) Processor, 2 CPUs", "date": "2026-12-07"}))
    doc = tmp_path / "README.md"
    doc.write_text("<!-- demo: results/job.json -->\n<!-- end demo -->\n")
    with pytest.raises(ResultsDocError, match=r"README.md: a demo block cites one job and its panel "
                                              r"results/job_panel.png beside it"):
        regenerate(doc)
    (tmp_path / "results" / "job_panel.png").write_bytes(b"\x89PNG")
    doc.write_text(regenerate(doc))
    text = doc.read_text()
    assert "![make demo: val detections of each detector](results/job_panel.png)" in text
    assert ("`make demo` took 15.2 min (stages, chance level and report; set-up aside) on Intel(R) Xeon(R) Processor, "
            "2 CPUs, 2026-12-07.") in text
    assert "| r101 | frozenbn_pretrained | 1 pretraining run |" in text and stale_blocks(doc) == []
    path.write_text(json.dumps({**json.loads(path.read_text()), "wall_minutes": 19.9}))
    assert stale_blocks(doc) == ["results/job.json"]  # the time changed, the README did not
    path.write_text(json.dumps({**json.loads(path.read_text()), "wall_minutes": None}))  # --report-only's
    with pytest.raises(ResultsDocError, match=r"results/job.json: a demo block states the job's time"):
        regenerate(doc)


def test_a_contrast_block_calls_how_far_one_comparison_moved_between_two_jobs_named_by_their_sizes(tmp_path):
    """The headline's ΔAP at 48-px pretraining minus at 32 px: one contrast of the four groups' units, named by each
    job's recorded pretraining size (a file written before the size was recorded pretrained at 32)."""
    from detection.main_job.results_doc import render_contrast

    _headline_job(tmp_path, {0: [56.0], 1: [57.0], 2: [55.5]}, {0: [56.0], 1: [55.0], 2: [57.0]})
    new = json.loads((tmp_path / "results" / "job.json").read_text()) | {"pretrain_image_size": 48}
    _headline_job(tmp_path, {0: [50.0], 1: [51.0], 2: [49.5]}, {0: [56.0], 1: [55.0], 2: [57.0]})
    old = json.loads((tmp_path / "results" / "job.json").read_text())
    text = render_contrast(new, old)
    assert text.startswith("ΔAP(r101 - vgg) at 48 px is ahead of at 32 px by 6.0 AP [")
    assert text.endswith("(95% CI; 6 vs 6 pretraining runs).\n")
    (tmp_path / "results" / "new.json").write_text(json.dumps(new))
    (tmp_path / "results" / "old.json").write_text(json.dumps(old))
    doc = tmp_path / "DOC.md"
    doc.write_text("<!-- contrast: results/new.json results/old.json -->\n<!-- end contrast -->\n")
    doc.write_text(regenerate(doc))
    assert text in doc.read_text() and stale_blocks(doc) == []
    other = old | {"deltas": [old["deltas"][0] | {"a": "vgg", "b": "r101"}]}
    with pytest.raises(ResultsDocError, match=r"^second: compares vgg vs r101 on AP, first r101 vs vgg on AP"):
        render_contrast(new, other)
    with pytest.raises(ResultsDocError, match=r"^first.deltas: a contrast block takes one backbone comparison"):
        render_contrast(new | {"deltas": []}, old)
