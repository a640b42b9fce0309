"""The main job's results as numbers read from its runs -- pretraining error over seeds, detection AP over nested
seeds, the arms' comparisons, backbone comparisons (each a `report.comparison.Comparison`) -- and the summary and
report notes written from them. results.json is `JobResults.to_json()`; tools/compare_jobs.py recomputes the
comparisons from its per-unit values with the same function, never from the text."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from classification.engine.run_files import FINAL_CHECKPOINT, read_classification_run

from ..report.comparison import Comparison, Spread, adjust, find, read_as, spread
from ..report.groups import FINE_TUNING_RUN, PRETRAINING_RUN, compare_groups, differing_keys, group_runs
from ..report.runs import load_run
from ..report.tables import RESULT_KINDS
from .arms import ARMS, PAPER_ARM, PRIMARY_ARM, arm_comparisons, unfair_keys
from .control import control_lines, control_results
from .data_scale import data_scale_text
from .degradation_results import (
    DegradationResult,
    degradation_comparison_lines,
    degradation_lines,
    degradation_notes,
    degradation_results,
    degradation_table,
    layer_mean,
    layer_response_comparisons,
    pm,
)
from .family import (
    LEFT_CHANCE_BY,
    Correlation,
    LeaderboardRow,
    Top1,
    correlation_text,
    leaderboard,
    leaderboard_arm,
    measured_top1,
    plain_residual_pairs,
    plain_vs_residual,
    plain_vs_residual_lines,
    transfer_correlation,
    untrained_units,
)
from .plan import MainJobPlan, Stage, group_label, pretraining_label
from .presets import HEADLINE_SEEDS
from .pretraining_order import pretraining_order

__all__ = ["JobResults", "GroupResult", "DegradationResult", "job_results", "layer_mean", "summary_lines",
           "scale_text",
           "data_text", "given_unit_text", "degradation_lines", "degradation_table",
           "degradation_comparison_lines",
           "degradation_notes", "DETECT_METRICS", "COMPARED_METRICS", "SECONDARY_METRICS", "RUN_FIELDS",
           "UNGATED_FIELDS"]

DETECT_METRICS = ("AP", "AP50", "AP75", "APs", "APm", "APl")
# The metric the job's comparisons decide on, declared before any run: AP@[.5:.95], the paper's COCO metric (Table
# 8). AP50 and AP75 are secondary, declared so here: in the tables as means with intervals, never in the family --
# AP50 saturates on the embedded scenes (87-93 for every pretrained leg of the family preset, where AP spreads
# 50-62), and each metric compared is one more member of the Holm family, so a second one would cost every call power.
# On VOC data too (the paper's Table 7 reports mAP@0.5, which the tables give as AP50 beside it).
COMPARED_METRICS = ("AP",)
SECONDARY_METRICS = ("AP50", "AP75")
# JobResults' lists of comparisons, in the order the job prints them (its one Holm family)
COMPARISON_FIELDS = ("pretraining_order", "arms", "deltas", "plain_vs_residual", "degradation_comparisons",
                     "interactions", "layer_response_comparisons")
# what results.json says of the run itself, not of its results: measured where and when it ran, so two runs of one
# job differ in them (tools/compare_jobs.py and the tests compare the rest)
RUN_FIELDS = ("wall_minutes", "machine", "date")
# the degradation experiment's: CIFAR nets trained from scratch, no transfer; its own control is that every net left
# chance (degradation_results), not the transfer control
DEGRADATION_FIELDS = ("degradation_comparisons", "interactions", "layer_response_comparisons")
# the comparisons whose no-calls no positive control reads: the degradation experiment's and the pretraining order
# (classifiers, not transfer)
UNGATED_FIELDS = ("pretraining_order", *DEGRADATION_FIELDS)


@dataclass
class GroupResult:
    """One detection group of the job: a backbone in one arm (arms.ARMS), over its seeds."""

    name: str
    backbone: str
    init: str  # "pretrained" / "scratch"
    unit: str  # what a unit is (report.groups: "pretraining run" or "run")
    metrics: dict[str, Spread] = field(default_factory=dict)
    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # metric -> unit name -> run values
    arm: str = ""
    per_class: dict[str, Spread] = field(default_factory=dict)  # class -> its AP over the units (VOC: AP50)
    per_class_metric: str = ""  # "AP" (COCO-style) or "AP50" (VOC)


@dataclass
class JobResults:
    pretraining: dict[str, Spread] = field(default_factory=dict)  # "backbone norm" -> val top-1 error (%) over seeds
    pretraining_images: dict[str, int] = field(default_factory=dict)  # "backbone norm" -> images seen by one run
    at_chance: dict[str, list[str]] = field(default_factory=dict)  # "backbone norm" -> its pretraining runs that
    #   never left chance (family.untrained_units): that pretrained backbone is in no comparison, and named
    not_compared: dict[str, str] = field(default_factory=dict)  # "A vs B" (arms of one backbone) -> why not
    pretraining_order: list[Comparison] = field(default_factory=list)  # each backbone vs the first, pretraining top-1
    #   error (pretraining_order.py): called first, read against ImageNet's order
    groups: list[GroupResult] = field(default_factory=list)
    arms: list[Comparison] = field(default_factory=list)  # arm vs arm of one backbone (arms.ARM_COMPARISONS)
    factors: dict[str, str] = field(default_factory=dict)  # "A vs B" -> the factor the arms' comparison names
    deltas: list[Comparison] = field(default_factory=list)  # each backbone vs the first, in each pretrained arm
    degradation: list[DegradationResult] = field(default_factory=list)
    degradation_comparisons: list[Comparison] = field(default_factory=list)  # deeper vs shallower, training error
    interactions: list[Comparison] = field(default_factory=list)  # depth x shortcut: plain's depth effect - residual's
    layer_responses: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # net -> run -> [mean over its
    #   3x3 layers of the std of their responses] (Fig. 7)
    layer_response_comparisons: list[Comparison] = field(default_factory=list)  # residual vs plain, each depth
    interaction_terms: list[tuple[str, str, str, str]] = field(default_factory=list)  # its nets: plain deep, plain
    #   shallow, residual deep, residual shallow (tools/compare_jobs.py recomputes the contrast from them)
    differences: dict[str, dict[str, list]] = field(default_factory=dict)  # "A vs B" -> config key -> [A's, B's]
    unfair: dict[str, list[str]] = field(default_factory=dict)  # "A vs B" -> saved-config keys beyond its factor
    #   (e.g. what the weights' metadata set, which the check before training cannot see)
    family: str = ""  # what the comparisons were adjusted over (comparison.adjust), "" before `adjust_family`
    # The family of backbones (family.py): top-1 per backbone in the leaderboard's arm's pretraining norm, one
    # leaderboard row per backbone, residual vs plain at each depth (in the job's family), accuracy vs transfer.
    top1: dict[str, Top1] = field(default_factory=dict)
    leaderboard: list[LeaderboardRow] = field(default_factory=list)
    plain_vs_residual: list[Comparison] = field(default_factory=list)
    correlation: Correlation | None = None
    data: str = ""  # what the job ran on (data_text: the embedded set, or the files given, and the scale)
    test_set: dict = field(default_factory=dict)  # data.test_set_identity: what its legs were scored on, by content
    wall_minutes: float | None = None  # the job from its start to its report, here (None: --report-only, whose own
    #                                    minutes are not the job's)
    machine: str = ""  # where it ran (classification.engine.host.machine_text), beside wall_minutes
    date: str = ""  # the day the report was written (YYYY-MM-DD)
    pretrain_image_size: int | None = None  # px the job's backbones pretrained at (None: it pretrained none, or the
    #                                          paper scale's ImageNet crops); absent from files before it: 32
    # The positive control (plan.control): the backbone's full-budget group vs its control group on the compared
    # metric, and their pretraining top-1 errors (the gap the control is made of); the reading: how the family's
    # transfer no-calls read when the control does not let them read "no difference this job could see" (not called,
    # the wrong way round, none run; control.py); it withholds no call: Holm alone decides
    control: Comparison | None = None
    control_top1: Comparison | None = None
    control_fraction: float | None = None
    control_kind: str | None = None  # what the control shortened (plan.control_kind): "pretraining" / "fine-tuning"
    control_at_chance: list[str] = field(default_factory=list)  # control pretraining runs that never left chance
    reading: str | None = None

    def never_trained(self, backbone: str, arm: str) -> bool:
        """Whether the backbone's pretraining for `arm` (its norm) never left chance in some run; False for a
        scratch arm and for weights the job was given (their top-1's at_chance)."""
        if arm not in ARMS or not ARMS[arm].pretrained:
            return False
        top1 = self.top1.get(backbone)
        return bool(self.at_chance.get(pretraining_label(backbone, ARMS[arm].pretrain_norm))
                    or top1 is not None and top1.at_chance)

    def group(self, backbone: str, arm: str) -> GroupResult | None:
        return next((g for g in self.groups if g.backbone == backbone and g.arm == arm), None)

    def comparisons(self) -> list[Comparison]:
        """Everything the job prints that makes a call: its one family."""
        return [c for kind in COMPARISON_FIELDS for c in getattr(self, kind)]

    def adjust_family(self) -> None:
        """Holm over every comparison the job prints (summary, notes, the report's table), one family per job."""
        kinds = COMPARISON_FIELDS
        sizes = [len(getattr(self, k)) for k in kinds]
        self.family = f"the job's {sum(sizes)} comparisons"
        adjusted = adjust(self.comparisons(), self.family)
        for k, n in zip(kinds, sizes):
            # the control reads the transfer no-calls; the pretraining order and the degradation have none
            setattr(self, k, read_as(adjusted[:n], self.reading) if self.reading and k not in UNGATED_FIELDS
                    else adjusted[:n])
            adjusted = adjusted[n:]

    def lookup(self, a: str, b: str, metric: str) -> Comparison | None:
        """A vs B on `metric` from the job's family (either orientation), None when the job does not compare
        them: the report's table prints only these."""
        return find(self.comparisons(), a, b, metric)

    def to_json(self) -> dict:
        """Every field, and each comparison's call and MDE (properties asdict leaves out)."""
        out = asdict(self)
        for key in COMPARISON_FIELDS:
            for c, d in zip(getattr(self, key), out[key]):
                d["call"], d["mde"] = c.call, c.mde
        for key in ("control", "control_top1"):
            if getattr(self, key) is not None:
                out[key] |= {"call": getattr(self, key).call, "mde": getattr(self, key).mde}
        return out


def job_results(stages: list[Stage], plan: MainJobPlan,
                layer_responses: dict[str, dict[str, float]] | None = None,
                given_top1: dict[str, Top1] | None = None) -> JobResults:
    """Everything the summary and the notes say, as numbers read from the runs (run_files and report.runs);
    layer_responses: {net: {run: layer_mean}} of the degradation runs (Fig. 7, measured by the caller);
    given_top1: the top-1 of each backbone whose weights the job was given (published or measured by the caller)."""
    out = JobResults()
    if plan.pretrained_here() and plan.scale == "embedded":
        out.pretrain_image_size = plan.pretrain_image_size
    board_arm = leaderboard_arm(plan.arms)
    _pretraining(out, stages, plan, board_arm)
    out.top1.update(given_top1 or {})
    detect = [s for s in stages if s.kind == "detect"]
    by_label = _detection_groups(out, detect)
    _arm_comparisons(out, plan, by_label)
    control_results(out, stages, plan, by_label, COMPARED_METRICS[0])
    pairs = {frozenset(p) for p in plain_residual_pairs(plan.backbones)} if board_arm else set()
    for arm in (a for a in (PRIMARY_ARM, PAPER_ARM) if a in plan.arms):
        untrained = {m for m in plan.backbones if out.never_trained(m, arm)}  # named, never compared
        base = by_label.get(group_label(plan.backbones[0], arm)) if plan.backbones[0] not in untrained else None
        for model in plan.backbones[1:]:
            if arm == board_arm and frozenset((model, plan.backbones[0])) in pairs or model in untrained:
                continue  # residual vs plain (_family) compares them: one test counts once in the family
            other = by_label.get(group_label(model, arm))
            if base and other:
                out.deltas += [c for k in COMPARED_METRICS for c in [compare_groups(other, base, k)] if c is not None]
    if board_arm:
        names = {os.path.realpath(d / FINAL_CHECKPOINT): d.name for s in detect for d in s.deps}
        names |= {str(s.out): s.out.name for s in detect if s.files}  # a given file's runs (RunGroup.unit_of)
        _family(out, plan, board_arm, by_label, names)
    degradation_results(out, [s for s in stages if s.kind == "degradation"])
    layer_response_comparisons(out, layer_responses or {})
    out.adjust_family()
    return out


def _pretraining(out: JobResults, stages: list[Stage], plan: MainJobPlan, board_arm: str | None) -> None:
    """Each backbone's pretraining top-1 error per norm over its runs, and the leaderboard arm's norm's as its top-1."""
    for model in plan.pretrained_here():
        for norm in plan.pretrain_norms():
            errors, images, chance = {}, set(), {}
            for s in stages:
                if s.kind == "pretrain" and s.model == model and s.variant == norm and not s.control:
                    run = read_classification_run(s.out)
                    if run.finished:
                        errors[s.out.name] = [run.top1_error]
                        images.add(run.images_seen)
                        chance[s.out.name] = run.chance_error
            st = spread(errors, PRETRAINING_RUN)
            stuck = untrained_units({u: v for u, (v,) in errors.items()}, chance)
            if stuck:
                out.at_chance[pretraining_label(model, norm)] = list(stuck)
            if st is not None:
                out.pretraining[pretraining_label(model, norm)] = st
                if board_arm and norm == ARMS[board_arm].pretrain_norm:
                    out.top1[model] = measured_top1({u: v for u, (v,) in errors.items()}, chance)
            if len(images) == 1 and None not in images:
                out.pretraining_images[pretraining_label(model, norm)] = images.pop()


def _detection_groups(out: JobResults, detect: list[Stage]) -> dict:
    """The detection groups with numbers (label -> RunGroup), each also as a GroupResult of `out`."""
    job = detect[0].out.parent.parent.resolve() if detect else None  # OUTPUT/detect/<leg>
    given = frozenset(os.path.realpath(f) for s in detect for f in s.files)  # --weights: fine-tuning runs as units
    groups = group_runs([load_run(s.out) for s in detect], [s.group for s in detect], given_checkpoints=given)
    meta = {s.group: (s.model, s.init, s.variant) for s in detect}
    by_label = {}
    for g in groups:
        if not g.n or g.name not in meta:
            continue  # an unfinished run: a group of its own, with no numbers
        backbone, init, arm = meta[g.name]
        by_label[g.name] = g
        out.groups.append(GroupResult(g.name, backbone, init, g.unit, dict(g.metrics),
                                      {k: _portable_units(g.values(k), job) for k in DETECT_METRICS if g.values(k)},
                                      arm, g.per_class(), RESULT_KINDS[g.first.kind].compared))
    return by_label


def _arm_comparisons(out: JobResults, plan: MainJobPlan, by_label: dict) -> None:
    """Arm vs arm of each backbone, with what their runs' saved configs differ in and any key beyond the factor."""
    for model in plan.backbones:
        for arms in arm_comparisons(plan.arms):
            ga, gb = by_label.get(group_label(model, arms.a)), by_label.get(group_label(model, arms.b))
            if ga and gb:
                stuck = [a for a in (arms.a, arms.b) if out.never_trained(model, a)]
                if stuck:  # a failed pretraining says nothing about the factor: named, not compared
                    out.not_compared[f"{ga.name} vs {gb.name}"] = (
                        f"{model}'s {ARMS[stuck[0]].pretrain_norm} pretraining never left chance")
                else:
                    out.arms += [c for k in COMPARED_METRICS for c in [compare_groups(ga, gb, k)] if c is not None]
                out.differences[f"{ga.name} vs {gb.name}"] = differing_keys([ga, gb])  # the runs' saved configs
                out.factors[f"{ga.name} vs {gb.name}"] = arms.factor
                extra = unfair_keys(out.differences[f"{ga.name} vs {gb.name}"], arms)
                if extra:
                    out.unfair[f"{ga.name} vs {gb.name}"] = extra


def _family(out: JobResults, plan: MainJobPlan, arm: str, groups: dict, unit_names: dict[str, str]) -> None:
    """The leaderboard in `arm`, residual vs plain at each depth, and accuracy vs transfer (family.py);
    unit_names: each pretraining checkpoint (resolved) -> its run's directory name, the key of its top-1."""
    from ..report.writer import run_gmacs

    labels = {m: group_label(m, arm) for m in plan.backbones}
    weights = {m: str(f) for m, f in plan.weights}
    out.leaderboard = leaderboard(groups, labels, out.top1, weights, arm, run_gmacs, unit_names)
    trained = [p for p in plain_residual_pairs(plan.backbones) if not any(out.top1.get(m, _NONE).at_chance for m in p)]
    out.pretraining_order = pretraining_order(plan.backbones, out.top1, {frozenset(p) for p in trained})
    out.plain_vs_residual = plain_vs_residual(trained, out.top1, groups, labels, COMPARED_METRICS[0])
    out.correlation = transfer_correlation(out.leaderboard)


_NONE = Top1("", None)  # a backbone without a top-1: never at chance


def _portable_units(values: dict[str, list[float]], job: Path | None) -> dict[str, list[float]]:
    """The units named relative to the job directory (pretrain/resnet101_p0/model_final.pth): results.json says the
    same on every machine and in every output directory."""
    out = {}
    for unit, v in values.items():
        try:
            out[str(Path(unit).resolve().relative_to(job))] = v
        except (ValueError, TypeError):  # outside the job (or no job): the unit as it is
            out[unit] = v
    return out


def scale_text(plan: MainJobPlan) -> str:
    """The data scale's input size, schedule and differences from the paper's setting (data_scale.py), from the
    legs' own configs (the first arm's; an arm's schedule multiplies the iterations)."""
    arm = next(iter(plan.arms), None)
    if plan.scale != "data" or arm is None:
        return f"{plan.scale} scale"
    return data_scale_text({m: plan.data_scale(m, arm) for m in plan.backbones}, plan.width)


def data_text(plan: MainJobPlan, manifest: dict | None) -> str:
    """The data a job ran on, in words: the embedded set's manifest, or the files given (data.py)."""
    if not plan.detect_data.embedded:
        pretraining = (f"pretraining on {plan.pretrain_data.describe()}" if plan.pretrained_here() else
                       "no pretraining here (every backbone from --weights)")
        if plan.scale == "data":
            return f"{plan.detect_data.describe()}, {pretraining}; {scale_text(plan)}"
        return f"{plan.detect_data.describe()}, {pretraining}, {plan.scale} scale"
    where = "held-out training data (model selection)" if plan.selection else \
        f"embedded default, {plan.test_scenes} val images"
    return f"{where} ({manifest['source']} objects, classes {', '.join(manifest['classes'])})"


def summary_lines(results: JobResults, plan: MainJobPlan, chance: dict, data: str) -> list[str]:
    """The summary; data: data_text of the job."""
    lines = [f"Main job summary -- {data}; all nets at width {plan.width:g}; {len(plan.pretrain_seeds)} "
             f"pretraining seed(s) x {len(plan.detect_seeds)} detection seed(s) per backbone and pretrained arm, "
             f"{len(plan.scratch_seeds)} run(s) per scratch arm:"]
    for label, st in results.pretraining.items():
        seen = results.pretraining_images.get(label)
        lines.append(f"  pretraining {label}: val top-1 error {pm(st, unit='%')} after {plan.pretrain_epochs:g} "
                     f"epochs" + (f" ({seen:,} images)" if seen else ""))
    for g in results.groups:
        s = g.metrics
        lines.append(f"  {g.name:<30} AP50 {pm(s.get('AP50')):<22} AP {pm(s.get('AP')):<22} "
                     f"APs/APm/APl {'/'.join(pm(s.get(k), sd=False, runs=False) for k in ('APs', 'APm', 'APl'))}")
        if len(g.per_class) > 1:
            lines.append(f"  {'':<30} per class, {g.per_class_metric}: " + ", ".join(
                f"{c} {pm(m, sd=False, runs=False)}" for c, m in g.per_class.items()))
        if g.unit == FINE_TUNING_RUN:
            lines.append(f"  {'':<30} {given_unit_text(g)}")
        ap50 = s.get("AP50")
        if ap50 is not None and g.unit == FINE_TUNING_RUN and ap50.sd_between is not None:
            lines.append(f"  {'':<30} AP50 sd between fine-tuning runs {ap50.sd_between:.1f}")
        elif ap50 is not None and (ap50.sd_between is not None or ap50.sd_within is not None):
            b, w = ap50.sd_between, ap50.sd_within
            lines.append(f"  {'':<30} AP50 sd between pretraining seeds {'—' if b is None else f'{b:.1f}'}, "
                         f"within a pretraining seed (detection seeds) {'—' if w is None else f'{w:.1f}'}")
    lines += [f"  {ln}" for ln in control_lines(results) + untrained_lines(results)]
    for c in results.arms:
        lines.append(f"  {c.a} vs {c.b} ({results.factors.get(f'{c.a} vs {c.b}', '')}): {c.describe(1)}")
    lines += [f"  {key} ({results.factors.get(key, '')}): not compared ({why})"
              for key, why in results.not_compared.items()]
    for c in results.deltas:
        lines.append(f"  {c.a} vs {c.b}: {c.describe()}")
    lines += [f"  {ln}" for ln in plain_vs_residual_lines(results.plain_vs_residual)]
    if results.leaderboard:
        lines.append(f"  {correlation_text(results.correlation)}")
    if any(c.interval is None for c in results.deltas):
        lines.append(f"  (no call from one unit per group; `make demo-headline` ({len(HEADLINE_SEEDS)} pretraining "
                     "runs per backbone and the positive control) gives each comparison its interval)")
    if chance:
        lines.append(f"  chance level (100 random boxes per image): AP50 {chance['AP50']:.2f}, "
                     f"AP {chance['AP']:.2f}")
    if results.degradation:
        lines.append(f"Degradation (plain vs residual CIFAR nets, one recipe: {plan.degradation_recipe()}; final "
                     "errors over seeds):")
        lines += [f"  {ln}" for ln in degradation_lines(results)]
    return lines


def untrained_lines(results: JobResults) -> list[str]:
    """The pretrained backbones whose pretraining never left chance, named where the job leaves them out."""
    return [f"{label}: pretraining never left chance in {len(units)} of {results.pretraining[label].units} run(s) "
            f"(top-1 error not {LEFT_CHANCE_BY:g} points below a guess's): a failed recipe, in no comparison and not "
            "ranked" for label, units in results.at_chance.items() if label in results.pretraining]


def given_unit_text(g: GroupResult) -> str:
    """What the interval of a group from one given checkpoint covers (MoCo's protocol), beside every interval."""
    n = max((len(v) for v in g.values.values()), default=0)
    return (f"intervals over {n} fine-tuning run(s) of one given checkpoint: pretraining variance not included "
            "(the file's pretraining was not repeated)")
