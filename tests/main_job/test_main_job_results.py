"""detection.main_job.results: the summary and the report's notes say only what the comparisons support -- a claim
appears with its interval, and no backbone call is made from one pretraining seed."""

from detection.main_job.notes import generated_notes
from detection.main_job.plan import MainJobPlan
from detection.main_job.results import GroupResult, JobResults, summary_lines
from detection.report.comparison import compare, spread

PRE, RUN = "pretraining run", "run"
MANIFEST = {"source": "s", "classes": ["a"], "counts": {"val": {"images": 3}}}


def _results(r101_ap50: list[float], with_pretraining: bool = True) -> JobResults:
    vgg = {"p0": [95.0, 96.0], "p1": [95.5, 96.5]}
    r101 = {f"p{i}": [v] for i, v in enumerate(r101_ap50)}
    arm = "gn_pretrained"
    groups = [GroupResult(f"vgg16_bn_{arm}", "vgg16_bn", "pretrained", PRE, {"AP50": spread(vgg, PRE)},
                          {"AP50": vgg}, arm),
              GroupResult(f"resnet101_{arm}", "resnet101", "pretrained", PRE, {"AP50": spread(r101, PRE)},
                          {"AP50": r101}, arm)]
    pre = {"vgg16_bn GN": spread({"p0": [20.0], "p1": [21.0]}, PRE), "resnet101 GN": spread({"p0": [25.0]}, PRE)}
    res = JobResults(
        pretraining=pre if with_pretraining else {}, groups=groups,
        arms=[compare("AP50", "vgg16_bn_gn_pretrained", vgg, PRE, "vgg16_bn_gn_scratch", {"s0": [50.0], "s1": [52.0]},
                      RUN),
              compare("AP50", "resnet101_gn_pretrained", r101, PRE, "resnet101_gn_scratch", {"s0": [20.0]}, RUN)],
        deltas=[compare("AP50", "resnet101_gn_pretrained", r101, PRE, "vgg16_bn_gn_pretrained", vgg, PRE)],
        factors={"vgg16_bn_gn_pretrained vs vgg16_bn_gn_scratch": "the initialisation"},
        differences={"vgg16_bn_gn_pretrained vs vgg16_bn_gn_scratch": {"MODEL.WEIGHTS": ["job/p0/model.pth", ""]},
                     "resnet101_gn_pretrained vs resnet101_gn_scratch": {
                         "MODEL.WEIGHTS": ["job/p0/model.pth", ""], "MODEL.BACKBONES.NORM": ["GN", "BN"]}})
    res.adjust_family()
    return res


def test_notes_make_a_claim_only_when_its_interval_supports_it():
    plan = MainJobPlan()
    far = " ".join(generated_notes(_results([80.0, 80.5, 79.5]), plan))
    assert ("vgg16_bn, vgg16_bn_gn_pretrained vs vgg16_bn_gn_scratch (the factor: the initialisation): "
            "vgg16_bn_gn_pretrained ahead by 44.8 AP50") in far
    assert "the two differ only in the initialisation (MODEL.WEIGHTS)" in far  # generated from the config diff
    assert "the two differ in MODEL.WEIGHTS job/p0/model.pth vs \"\"; MODEL.BACKBONES.NORM GN vs BN" in far
    assert "resnet101_gn_scratch has one run: its spread is unknown" in far  # one scratch run: no interval, no call
    assert "resnet101_gn_pretrained ahead" not in far
    assert "vgg16_bn ahead of resnet101 by 15.8 AP50" in far and "vgg16_bn_gn_pretrained ahead" in far
    assert "Holm step-down over 3" in far and "the job's 3 comparisons" in far
    assert "no cause is claimed" in far and "pretraining top-1 error (GN) resnet101 25.0%" in far
    close = " ".join(generated_notes(_results([95.0, 97.0]), plan))
    assert "order of the two backbones is not established" in close
    vgg_close = _results([95.0, 97.0])
    vgg_close.arms[0] = compare("AP50", "vgg16_bn_gn_pretrained", {"p0": [95.0], "p1": [96.0]}, PRE,
                                "vgg16_bn_gn_scratch", {"s0": [90.0], "s1": [97.0]}, RUN)
    assert "no difference is established" in " ".join(generated_notes(vgg_close, plan))
    scratch_wins = _results([95.0, 97.0])
    scratch_wins.arms[0] = compare("AP50", "vgg16_bn_gn_pretrained", {"p0": [80.0], "p1": [81.0]}, PRE,
                                   "vgg16_bn_gn_scratch", {"s0": [90.0], "s1": [91.0]}, RUN)
    assert "vgg16_bn_gn_scratch ahead by 10.0 AP50" in " ".join(generated_notes(scratch_wins, plan))
    bare = " ".join(generated_notes(_results([95.0, 97.0], with_pretraining=False), plan))
    assert "Measured beside it" not in bare  # no pretraining numbers: nothing said about them
    assert "differ only in the initialisation" not in " ".join(generated_notes(JobResults(), plan))


def test_summary_gives_each_comparison_its_interval_and_says_when_one_seed_allows_no_call():
    plan = MainJobPlan()
    lines = summary_lines(_results([80.0, 80.5, 79.5]), plan, {"AP50": 0.3, "AP": 0.1}, MANIFEST)
    text = "\n".join(lines)
    assert "resnet101_gn_pretrained vs vgg16_bn_gn_pretrained: ΔAP50 -15.75, 95% CI [" in text
    assert "-- vgg16_bn_gn_pretrained ahead" in text and "chance level" in text and "df " in text
    assert "no call from one unit per group" not in text
    one = summary_lines(_results([80.0]), plan, {"AP50": 0.3, "AP": 0.1}, MANIFEST)
    assert any("no call: resnet101_gn_pretrained has one pretraining run" in ln for ln in one)
    assert any("no call from one unit per group" in ln for ln in one)


def test_degradation_notes_say_what_the_depth_comparisons_show_whichever_way_they_fall():
    from detection.main_job.results import degradation_notes

    def deeper_vs_shallower(deep, shallow, deep_errors, shallow_errors):
        return compare("training error", deep, {f"s{i}": [v] for i, v in enumerate(deep_errors)}, RUN, shallow,
                       {f"s{i}": [v] for i, v in enumerate(shallow_errors)}, RUN, higher_is_better=False)

    plan = MainJobPlan()
    paper = JobResults(degradation_comparisons=[
        deeper_vs_shallower("cifar_plain56", "cifar_plain20", [89.0, 90.0, 89.5], [50.0, 55.0, 60.0]),
        deeper_vs_shallower("cifar_resnet56", "cifar_resnet20", [30.0, 31.0, 32.0], [40.0, 41.0, 42.0])])
    plain, residual = degradation_notes(paper, plan)
    assert plain.startswith("Degradation, plain nets: the deeper cifar_plain56 ends with the higher training error, "
                            "the paper's degradation problem: Δtraining error +34.50, 95% CI [")
    assert residual.startswith("Degradation, residual nets: the deeper cifar_resnet56 ends with the lower training "
                               "error, as the paper's residual nets: Δtraining error -10.00")
    assert "))" not in plain + residual
    other_way = JobResults(degradation_comparisons=[
        deeper_vs_shallower("cifar_plain56", "cifar_plain20", [30.0, 31.0, 32.0], [40.0, 41.0, 42.0]),
        deeper_vs_shallower("cifar_resnet56", "cifar_resnet20", [41.0, 45.0, 37.0], [40.0, 48.0, 36.0])])
    plain, residual = degradation_notes(other_way, plan)
    assert "ends with the lower training error, no degradation at this budget: Δtraining error -10.00" in plain
    assert "cifar_resnet56 vs cifar_resnet20, Δtraining error -0.33" in residual
    assert residual.endswith("neither a difference nor equivalence within ±1.67 points (how far two seeds of one "
                             "20-layer net fall apart: the recipe's margin) is established after "
                             f"{plan.degradation_iterations} iterations.")


def test_equivalence_wording_only_from_tost():
    """"Equivalent" appears only when the TOST interval is inside the margin: a tight pair 0.2 apart is, a wide
    pair with the same Δ is not (no call is not "the same")."""
    from detection.main_job.results import degradation_notes

    def res(deep, shallow):
        return JobResults(degradation_comparisons=[compare(
            "training error", "cifar_resnet56", {f"s{i}": [v] for i, v in enumerate(deep)}, RUN, "cifar_resnet20",
            {f"s{i}": [v] for i, v in enumerate(shallow)}, RUN, higher_is_better=False)])

    tight, = degradation_notes(res([20.1, 20.2, 20.3], [20.0, 20.0, 20.1]), MainJobPlan())
    wide, = degradation_notes(res([10.0, 20.0, 30.5], [15.0, 20.0, 25.0]), MainJobPlan())
    assert "equivalent within ±1.67 points" in tight and "equivalent within" not in wide


def test_the_interaction_note_calls_the_reversal_after_the_family_adjustment():
    """Fig. 6's claim is the interaction: (plain56 - plain20) - (resnet56 - resnet20) in training error, a call of
    the one statistic after Holm over everything the job prints."""
    from detection.main_job.results import degradation_notes
    from detection.report.comparison import contrast

    def runs(values):
        return {f"s{i}": [v] for i, v in enumerate(values)}

    p56, p20, r56, r20 = [60.0, 62.0, 64.0], [30.0, 31.0, 32.0], [20.0, 21.0, 22.0], [25.0, 26.0, 27.0]
    plain = compare("training error", "cifar_plain56", runs(p56), RUN, "cifar_plain20", runs(p20), RUN,
                    higher_is_better=False)
    res = JobResults(degradation_comparisons=[plain],
                     interactions=[contrast("training error", "cifar_plain56 - cifar_plain20",
                                            (runs(p56), runs(p20)), "cifar_resnet56 - cifar_resnet20",
                                            (runs(r56), runs(r20)), RUN, higher_is_better=False)],
                     interaction_terms=[("cifar_plain56", "cifar_plain20", "cifar_resnet56", "cifar_resnet20")])
    res.adjust_family()
    _, note = degradation_notes(res, MainJobPlan())
    assert "depth raises the training error of plain nets by 36.0 points more than that of residual nets" in note
    assert res.interactions[0].adjustment.size == 2 and res.to_json()["interactions"][0]["call"] is not None
    assert "Holm step-down over 2" in note


def test_a_net_that_never_left_chance_is_not_read_as_evidence_about_depth():
    from detection.main_job.results import DegradationResult, degradation_notes

    def runs(values):
        return {f"s{i}": [v] for i, v in enumerate(values)}

    res = JobResults(
        degradation=[DegradationResult("cifar_plain56", False, 56, None, None, {"train": runs([89.0, 90.0, 89.5])},
                                       at_chance=["s0", "s1", "s2"]),
                     DegradationResult("cifar_plain20", False, 20, None, None, {"train": runs([50.0, 55.0, 60.0])})],
        degradation_comparisons=[compare("training error", "cifar_plain56", runs([89.0, 90.0, 89.5]), RUN,
                                         "cifar_plain20", runs([50.0, 55.0, 60.0]), RUN, higher_is_better=False)])
    criterion, plain = degradation_notes(res, MainJobPlan())
    assert "not met by cifar_plain56 in 3 of 3 seeds" in criterion
    assert "not read as evidence about depth (cifar_plain56 did not leave chance" in plain
    assert "the paper's degradation problem" not in plain


def test_the_summary_gives_each_groups_ap_per_class_under_its_line():
    """#80: a 3-class set's summary says which class fails, on the metric of the kind (COCO AP, VOC AP50)."""
    res = _results([80.0, 80.5, 79.5])
    g = res.groups[0]
    g.per_class = {"bag": spread({"p0": [40.0], "p1": [42.0]}, PRE), "shoe": spread({"p0": [10.0]}, PRE)}
    g.per_class_metric = "AP50"
    lines = summary_lines(res, MainJobPlan(), {}, "data")
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith(g.name))
    assert lines[at + 1].split() == ["per", "class,", "AP50:", "bag", "41.0,", "shoe", "10.0"]
    assert not any("per class" in ln for ln in lines[at + 2:])  # the other group has none
