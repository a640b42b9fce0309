"""detection.main_job.control and the no-calls it reads: the presets that rank carry a positive control (the first
backbone with a fraction of its pretraining, transferred alike); Holm alone decides a job's calls, the control says how
its no-calls read -- seen, "no difference this job could see"; unseen, underpowered; reversed, a failed assay."""

import json
from dataclasses import replace

import pytest

from detection.main_job.arms import GN_ARMS
from detection.main_job.checks import check_arms
from detection.main_job.cli import build_parser, plan_from_args
from detection.main_job.control import NO_CONTROL, control_lines
from detection.main_job.headline import headline_lines
from detection.main_job.notes import generated_notes
from detection.main_job.plan import MainJobPlan, PlanError, plan_stages
from detection.main_job.presets import CONTROL_FRACTION, PRESETS
from detection.main_job.results import (
    COMPARISON_FIELDS,
    UNGATED_FIELDS,
    JobResults,
    job_results,
    summary_lines,
)
from detection.report.comparison import compare
from detection.report.tables import comparisons_table
from fabricated_runs import make_run

BACKBONES = ("resnet18", "plain18", "resnet50", "resnet34")


def _transfer(res: JobResults) -> list:
    """The comparisons whose no-calls a positive control reads: all but the pretraining order and the degradation's."""
    return [c for kind in COMPARISON_FIELDS if kind not in UNGATED_FIELDS for c in getattr(res, kind)]


def _plan(**changes) -> MainJobPlan:
    return MainJobPlan(**{"backbones": BACKBONES, "arms": ("frozenbn_pretrained",), "pretrain_seeds": (0, 1, 2),
                          "detect_seeds": (0,), "pretrain_epochs": 1.0, "control": CONTROL_FRACTION} | changes)


@pytest.mark.parametrize("preset", ["family", "headline", "quick"])
def test_the_presets_that_rank_carry_the_control_at_half_the_budget(preset):
    assert PRESETS[preset]["control"] == CONTROL_FRACTION
    assert all(PRESETS[p].get("control") is None for p in ("demo", "degradation", "paper"))


def test_the_control_pretrains_the_first_backbone_again_for_a_fraction_and_transfers_it_alike(tmp_path):
    plan = _plan()
    stages = plan_stages(plan, tmp_path)
    control = [s for s in stages if s.control]
    pre = [s for s in control if s.kind == "pretrain"]
    legs = [s for s in control if s.kind == "detect"]
    full_iterations = plan.pretrain_iterations()
    assert [s.out.name for s in pre] == ["resnet18_control_p0", "resnet18_control_p1", "resnet18_control_p2"]
    assert all(s.iterations == round(full_iterations * CONTROL_FRACTION) < full_iterations for s in pre)
    assert [s.out.name for s in legs] == [f"resnet18_frozenbn_pretrained_control_p{i}_d0" for i in range(3)]
    assert all(s.deps == [p.out] for s, p in zip(legs, pre))
    # the same recipe: the control's pretraining command differs from the full run's only in its iterations, its
    # evaluation / checkpoint periods (1/8 of the run each) and its directory; its leg only in the weights and directory
    full = next(s for s in stages if s.kind == "pretrain" and s.out.name == "resnet18_p0")
    differ = {full.argv[i - 1] for i, (a, b) in enumerate(zip(full.argv, pre[0].argv)) if a != b}
    assert differ == {"--iterations", "--eval-period", "--checkpoint-period", "--output-dir"}
    full_leg = next(s for s in stages if s.out.name == "resnet18_frozenbn_pretrained_p0_d0")
    differ = {full_leg.argv[i - 1] for i, (a, b) in enumerate(zip(full_leg.argv, legs[0].argv)) if a != b}
    assert differ == {"MODEL.WEIGHTS", "OUTPUT_DIR"}
    check_arms(plan)  # the control adds no arm to check
    assert not any(s.control for s in plan_stages(_plan(control=None), tmp_path))


@pytest.mark.bad_input
@pytest.mark.parametrize("argv, message", [
    (["--control", "1.5"], "--control must be a fraction of the pretraining budget in (0, 1), got 1.5"),
    (["--control", "0"], "--control must be a fraction"),
])
def test_a_control_that_cannot_run_is_refused_naming_the_option(argv, message):
    with pytest.raises(PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_from_args(build_parser().parse_args(["--preset", "headline", *argv]))


def test_a_given_backbones_control_is_a_shorter_fine_tuning_from_the_same_file(tmp_path):
    weights = tmp_path / "r18.pth"
    plan = _plan(weights=(("resnet18", str(weights)),))
    stages = plan_stages(plan, tmp_path / "job")
    control = [s for s in stages if s.control]
    assert plan.control_kind() == "fine-tuning" and [s.kind for s in control] == ["detect"]
    full = next(s for s in stages if s.out.name == "resnet18_frozenbn_pretrained_given_d0")
    assert control[0].out.name == "resnet18_frozenbn_pretrained_control_given_d0" and control[0].files == [weights]
    assert control[0].iterations == round(full.iterations * CONTROL_FRACTION)
    differ = {full.argv[i - 1] for i, (a, b) in enumerate(zip(full.argv, control[0].argv)) if a != b}
    assert differ == {"OUTPUT_DIR", "SOLVER.MAX_ITER", "SOLVER.STEPS", "SOLVER.CHECKPOINT_PERIOD"}


@pytest.mark.bad_input
def test_a_control_given_to_a_plan_with_nothing_to_control_is_refused_not_ignored():
    parse = build_parser().parse_args
    with pytest.raises(PlanError, match="--control 0.25: the plan has no pretrained arm"):
        plan_from_args(parse(["--preset", "headline", "--arms", "gn_scratch", "--control", "0.25"]))
    with pytest.raises(PlanError, match="--control 0.25: the plan has no pretrained arm"):
        plan_from_args(parse(["--preset", "degradation", "--control", "0.25"]))


def test_no_control_and_a_fraction_given_override_the_preset():
    parse = build_parser().parse_args
    assert plan_from_args(parse(["--preset", "headline", "--no-control"])).control is None
    assert plan_from_args(parse(["--preset", "demo", "--control", "0.25"])).control == 0.25
    with pytest.raises(SystemExit):  # one or the other
        parse(["--control", "0.25", "--no-control"])


def _pretraining_run(out, top1):
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps({"model": "resnet18", "dataset": "embedded", "iterations": 9}))
    (out / "metrics.json").write_text(json.dumps({
        "history": {"iteration": [9], "train_error": [50.0], "test_error": [100 - top1]},
        "final": {"top1": top1, "top5": 95.0}, "classes": [str(i) for i in range(10)], "images_seen": 576}))
    (out / "model_final.pth").write_bytes(b"")


def _job(tmp_path, plan, control_drop: float, top1=None, ap=None):
    """A finished job made of run directories in the real layouts: resnet18 AP 30/32/34 over its three pretraining
    runs, its control `control_drop` below each, the others apart (or at `ap`)."""
    top1 = top1 or {"resnet18": 60.0, "plain18": 55.0, "resnet50": 65.0, "resnet34": 62.0}
    ap = {"resnet18": 30.0, "plain18": 20.0, "resnet50": 40.0, "resnet34": 36.0} | (ap or {})
    stages = plan_stages(plan, tmp_path / "job")
    for s in stages:
        if s.kind == "pretrain":
            _pretraining_run(s.out, top1[s.model] - (30.0 if s.control else 0.0) + s.pretrain_seed)
    for s in stages:
        if s.kind == "detect":
            value = ap[s.model] + 2.0 * s.pretrain_seed - (control_drop if s.control else 0.0)
            make_run(s.out.parent, s.out.name, s.model, coco={"AP": value, "AP50": value + 20, "AP75": value},
                     weights=str(s.deps[0] / "model_final.pth"), width=0.25)
    return stages


def _text(res, plan):
    return " ".join(summary_lines(res, plan, {}, "data") + generated_notes(res, plan))


def test_a_called_control_reads_the_no_calls_as_no_difference_the_job_could_see(tmp_path):
    plan = _plan()
    res = job_results(_job(tmp_path, plan, control_drop=12.0), plan)
    assert res.reading is None and res.control.call == "resnet18_frozenbn_pretrained" and res.control.delta == 12.0
    assert res.control_top1.call == "resnet18"  # 30 points more top-1 error after half the pretraining
    assert "resnet18 frozenbn control" not in _text(res, plan)
    text = _text(res, plan)
    assert "The control was called: a no-call below is no difference this job could see" in text
    assert any(c.call for c in res.comparisons())  # resnet50 vs resnet18: 10 AP apart at sd 2 -- called
    assert [r.backbone for r in res.leaderboard][:2] == ["resnet50", "resnet34"] and not res.leaderboard[0].not_ranked


def test_an_unseen_control_leaves_holms_calls_standing_and_reads_every_no_call_as_underpowered(tmp_path):
    """Both sides of the control identical: Holm still decides every call (resnet50 vs resnet18, 10 AP apart, is
    called); every transfer no-call reads "this job could not see even its positive control"; the report says
    the job is underpowered; the leaderboard is sorted and the correlation computed as in any job."""
    plan = _plan()
    close = {"resnet34": 30.5}  # 0.5 AP from resnet18 at the same spread: no call
    res = job_results(_job(tmp_path, plan, control_drop=0.0, ap=close), plan)
    called = job_results(_job(tmp_path / "called", plan, control_drop=12.0, ap=close), plan)
    assert res.control is not None and res.control.call is None
    assert res.reading.startswith("this job could not see even its positive control (resnet18 with 0.5")
    family = _transfer(res)
    assert [c.call for c in family] == [c.call for c in _transfer(called)]  # the control vetoes nothing
    assert any(c.call for c in family) and any(c.call is None for c in family)
    assert all(c.adjustment.reading == res.reading for c in family)
    no_calls = [c.headline() for c in family if c.call is None]
    assert all(" vs " in t and "no call, this job could not see even its positive control:" in t for t in no_calls)
    text = _text(res, plan)
    assert "This job could not see even its control: it is underpowered." in text
    assert [r.backbone for r in res.leaderboard][:2] == ["resnet50", "resnet34"]
    assert "positive control" not in res.correlation.why_not  # not computed only for want of 5 backbones
    d = res.to_json()
    assert d["reading"] == res.reading and "gate" not in d
    assert all(x["mde"] > 0 for x in d["deltas"] if x["call"] is None)


def test_a_control_the_wrong_way_round_is_a_failed_assay_said_before_anything_else(tmp_path):
    plan = _plan()
    res = job_results(_job(tmp_path, plan, control_drop=-12.0), plan)  # half the pretraining 12 AP ahead
    assert res.control.call == "resnet18_frozenbn_pretrained_control"
    assert res.reading.startswith("its positive control came out the wrong way round, a failed assay")
    lines = headline_lines(res)
    assert lines[0].startswith("Positive control (0.5 of the pretraining vs the whole, same recipe): resnet18_"
                               "frozenbn_pretrained_control is ahead of resnet18_frozenbn_pretrained by 12.0 AP")
    assert lines[1].startswith("The control came out the wrong way round (the shortened budget ahead of the whole): "
                               "a failed assay")
    assert lines[2].startswith("Pretraining: ")  # the pretraining order after the failed assay
    assert any(c.call for c in _transfer(res))


def test_a_job_without_a_control_calls_by_holm_and_reads_no_no_call_as_no_difference(tmp_path):
    plan = _plan(control=None)
    res = job_results(_job(tmp_path, plan, control_drop=0.0, ap={"resnet34": 30.5}), plan)
    assert res.control is None and res.reading.startswith("the job ran no positive control")
    assert any(c.call for c in _transfer(res))
    assert "No positive control: the job ran no positive control" in _text(res, plan)
    no_calls = [c for c in _transfer(res) if c.interval is not None and c.call is None]
    head, rows = comparisons_table(no_calls)
    assert rows and all(r[-1] == f"no call: the job ran no positive control (MDE {c.mde:.2f})"
                        for r, c in zip(rows, no_calls))
    degradation = job_results([], replace(MainJobPlan(), **PRESETS["degradation"]))
    assert degradation.reading is None and control_lines(degradation) == []  # no transfer legs: nothing to read


def test_a_net_whose_pretraining_never_left_chance_is_named_and_not_ranked(tmp_path):
    """plain18 at 89.5% top-1 error over 10 classes (chance 90%): out of the order, of the backbone comparisons,
    of residual vs plain and of the correlation -- named in each place."""
    plan = _plan()
    top1 = {"resnet18": 60.0, "plain18": 10.5, "resnet50": 65.0, "resnet34": 62.0}  # accuracy 10.5: error 89.5
    res = job_results(_job(tmp_path, plan, control_drop=12.0, top1=top1), plan)
    assert res.top1["plain18"].at_chance == ("plain18_p0", "plain18_p1", "plain18_p2")  # 89.5, 88.5, 87.5% > 70%
    assert not res.top1["resnet18"].at_chance
    rows = res.leaderboard
    assert rows[-1].backbone == "plain18" and rows[-1].not_ranked.startswith("pretraining never left chance")
    assert not any("plain18" in (c.a + c.b) for c in res.comparisons())
    assert "plain18" in res.correlation.left_out and "plain18" not in res.correlation.backbones


def test_the_dry_run_resolution_comes_from_the_presets_last_jobs_at_the_plans_units():
    """--dry-run's expected MDE: each pair the family preset's committed job compared, at the plan's units and the
    family's strictest Holm level, simulated (report.power); the units a target needs reach it, one fewer does not."""
    from conftest import REPO
    from detection.main_job.resolution import expected_resolution, resolution_lines
    from detection.report.power import simulated_mde

    plan = replace(MainJobPlan(), **PRESETS["family"])
    stages = plan_stages(plan, REPO / "output" / "never_written")
    r = expected_resolution(plan, stages, "family", "AP", 2.0, REPO)
    # the newest run of the preset (the AMD one, which records a gate; the Intel one is the same part, older): 7
    # pairs of groups (5 backbones against VGG-16(BN), residual vs plain at 18 and 34) in a family of 9 (the two
    # residual-vs-plain top-1 comparisons too)
    assert r.sources == ["results/family_2026-12-06_amd.json"] and len(r.expected) == 7 and r.family_size == 9
    assert r.alpha == pytest.approx(0.05 / 9)
    e = r.expected[0]
    assert (e.a, e.b, e.units) == ("vgg11_bn_frozenbn_pretrained", "vgg16_bn_frozenbn_pretrained", (3, 3))
    results = json.loads((REPO / r.sources[0]).read_text())
    var = {g["name"]: __import__("statistics").variance([sum(v) / len(v) for v in g["values"]["AP"].values()])
           for g in results["groups"]}
    terms = [(1.0, var[e.a], 3), (-1.0, var[e.b], 3)]  # measured on the earlier job's 3 units a group: simulated
    mde = lambda k: simulated_mde(terms, r.alpha, units=k).mde  # noqa: E731
    assert e.mde == mde(3)
    assert mde(e.units_for_target) <= 2.0 < mde(e.units_for_target - 1)
    more = expected_resolution(replace(plan, pretrain_seeds=tuple(range(6))), stages, "family", "AP", 2.0, REPO)
    assert more.expected[0].mde < e.mde  # more units, finer resolution
    assert "an MDE of 2 needs" in "\n".join(resolution_lines(r, "family"))
    assert expected_resolution(plan, stages, "paper", "AP", 2.0, REPO) is None  # no finished paper job


@pytest.mark.parametrize("drop, called", [(12.0, True), (0.0, False)])
def test_a_pooled_part_keeps_its_control_recomputed_and_the_reading_it_sets(tmp_path, drop, called):
    """pool.py on a part written with a control: the control is decided anew from its groups' per-unit values and
    rendered; a part whose control is not called reads the pooled family's no-calls, and vetoes none of its calls."""
    from detection.main_job.pool import pool_results
    from detection.main_job.results_doc import render

    plan = _plan()
    part = json.loads(json.dumps(job_results(_job(tmp_path, plan, control_drop=drop), plan).to_json()))
    pooled = pool_results([part], ["job/results.json"])
    (control,) = pooled["controls"]
    assert control["part"] == "job/results.json" and (control["call"] == control["a"]) == called
    assert (pooled["reading"] is None) == called and "gate" not in pooled
    assert any(c["call"] for c in pooled["deltas"])
    assert "Positive control (job/results.json): resnet18_frozenbn_pretrained " in render(pooled)


def test_the_expected_resolution_lists_only_the_arm_comparisons_the_plan_makes():
    """The full preset's committed halves compared GN pretrained 1x with GN scratch 3x; the GN arms no longer do
    (the initialisation at equal schedules), so a dry run of them prints no MDE for that pair."""
    from conftest import REPO
    from detection.main_job.resolution import expected_resolution

    plan = _plan(backbones=("vgg16_bn", "resnet101"), arms=GN_ARMS, scratch_seeds=(0, 1, 2))
    r = expected_resolution(plan, plan_stages(plan, REPO / "output" / "never_written"), "full", "AP", 2.0, REPO)
    pairs = {(e.a, e.b) for e in r.expected}
    assert ("resnet101_gn_pretrained", "resnet101_gn_scratch") in pairs
    assert not any(a.endswith("_gn_pretrained") and b.endswith("_gn_scratch_3x") for a, b in pairs), pairs


def test_the_reports_first_sentences_are_the_calls_then_how_a_job_without_a_control_reads_its_no_calls():
    """headline_lines: a job with no control says its comparison first, then that a no-call is not evidence."""
    c = compare("AP", "r101", {"p0": [48.2]}, "pretraining run", "vgg", {"p0": [58.7]}, "pretraining run")
    lines = headline_lines(JobResults(deltas=[c], reading=NO_CONTROL))
    assert lines[0].startswith("r101 vs vgg: ΔAP -10.5 (1 vs 1 pretraining runs), no call: r101 has one pretraining")
    assert lines[1].startswith("No positive control: the job ran no positive control")
    assert lines[1].endswith("Holm alone decides the calls, and a no-call is not evidence of no difference.")
