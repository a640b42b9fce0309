"""The report's generated notes: what the job ran, how its comparisons are decided, and only the statements its
numbers support (each arm comparison and backbone comparison as its call, or that none is established)."""

from __future__ import annotations

from pathlib import Path

from ..report.groups import FINE_TUNING_RUN, what_differs
from ..report.test_sampling import test_set_note
from .arms import ARMS
from .degradation_results import degradation_notes
from .plan import MainJobPlan, pretraining_label
from .results import COMPARED_METRICS, SECONDARY_METRICS, JobResults, given_unit_text, untrained_lines

__all__ = ["generated_notes"]


def generated_notes(results: JobResults, plan: MainJobPlan) -> list[str]:
    """Report notes: what was run, and only the statements the numbers above support; what two arms differ in is
    generated from their runs' config diff; causes the job does not measure are said to be not established."""
    notes = _design_notes(plan)
    notes.append("Comparisons: Δ with a 95% interval over the unit that varies the backbone (the pretraining run; "
                 "detection seeds nested under it; a from-scratch run is its own unit; Welch's t on the unit means; "
                 "n units and df beside it) and P(A > B), the chance that a unit of A beats a unit of B; one family "
                 f"per job ({results.family or 'no comparisons'}, Holm's step-down method): a call only when the "
                 f"family-adjusted interval excludes 0; decided on {', '.join(COMPARED_METRICS)} (AP@[.5:.95], the "
                 f"paper's COCO metric), declared before the job ran; {' and '.join(SECONDARY_METRICS)} are "
                 "secondary: in the tables with intervals, never called (AP50 saturates on the embedded scenes).")
    measured = [c for c in results.comparisons() if c.test_set_se is not None and c.interval is not None]
    notes += [test_set_note(measured[0].test_images)] if measured else []
    notes += [f"{ln}." for ln in untrained_lines(results)]  # the control: the report's first section
    notes += [f"{g.name}: {given_unit_text(g)}." for g in results.groups if g.unit == FINE_TUNING_RUN]
    notes += [f"{c.a} vs {c.b}: the interval mixes units ({c.unit_a}s vs {c.unit_b}s): the side of a given "
              "checkpoint leaves its pretraining variance out" for c in results.comparisons()
              if FINE_TUNING_RUN in (c.unit_a, c.unit_b) and c.unit_a != c.unit_b]
    notes += _arm_notes(results)
    if any(c.interval is None for c in results.deltas):
        notes.append("One pretraining seed per backbone: the backbone comparison has no interval and makes no call "
                     "(the unit that varies a backbone is its pretraining run); `make demo-headline` (5 pretraining "
                     "runs per backbone) gives one.")
    notes += degradation_notes(results, plan)
    notes += _backbone_notes(results)
    return notes


def _design_notes(plan: MainJobPlan) -> list[str]:
    """What the job ran: backbones, width, pretraining, arms, and the one recipe difference (the lr)."""
    notes = []
    if plan.backbones:
        lrs = ", ".join(f"{m} {plan.lr_for(m):g}" for m in plan.backbones)
        arms = "; ".join(f"{a} ({ARMS[a].role}, {plan.detect_iterations_of(a, plan.backbones[0])} iterations)"
                         for a in plan.arms)
        given = "".join(f" {m} starts from the weights given ({Path(f).name}; no pretraining stage)."
                        for m, f in plan.weights)
        if not (plan.detect_data.embedded and plan.pretrain_data.embedded):
            return [_own_data_note(plan, arms) + given]
        notes += [f"What ran: {', '.join(plan.pretrained_here()) or 'no backbone'} at "
                  f"width {plan.width:g}, each pretrained for classification ({plan.pretrain_epochs:g} epochs of "
                  "Fashion-MNIST train items "
                  f"composited on random backgrounds at {plan.pretrain_image_size} px, {len(plan.pretrain_seeds)} "
                  f"seed(s) per norm), then transferred to Faster R-CNN (2 images a batch, "
                  f"{len(plan.detect_seeds)} detection seed(s) per pretraining seed; {len(plan.scratch_seeds)} "
                  f"run(s) per scratch arm) in these arms: {arms}. Smoke scale on a CPU: compare the rows with "
                  "each other and with chance, not with the paper." + given,
                  f"Pretraining recipe: identical data, augmentation, schedule and batch; the learning rate is each "
                  f"net's reference one ({lrs}), and residual nets start with the last norm of each block at zero; "
                  "each pretrained arm pretrains with the norm it is fine-tuned with (GN, or BN for the paper's "
                  "FrozenBN setting)." + _warmup_text(plan)]
    return notes


def _warmup_text(plan: MainJobPlan) -> str:
    """The one pretraining difference a preset gives some nets: their warm-up (the comparisons between a net that
    has it and one that does not differ in it; a plain/residual pair always shares it: checks)."""
    if not plan.pretrain_warmup:
        return ""
    nets = " and ".join(f"{m} (until {100 * e:g}%)" for m, e in plan.pretrain_warmup)
    return (f" {nets} warm up at lr x0.1 until the running training error is below that (the paper's rule for "
            "ResNet-110, a net that did not start; without it plain-34 never leaves chance here: CONVERGENCE.md), "
            "the other nets not: their comparisons with these differ in this too.")


def _own_data_note(plan: MainJobPlan, arms: str) -> str:
    """What a job on the user's data ran: the data, the scale and its configs, the arms."""
    here = plan.pretrained_here()
    pretraining = (f"{', '.join(here)} pretrained on {plan.pretrain_data.describe()} ({plan.pretrain_iterations()} "
                   f"iterations of {plan.pretrain_batch}, {len(plan.pretrain_seeds)} seed(s)), then "
                   if here else "")
    scale = {"paper": "the paper configs' schedules, image sizes, batch and lr, linearly scaled to "
                      f"{max(1, plan.gpus)} GPU(s) a leg",
             "data": "the data scale (the paper configs' detector at the input size and schedule the first "
                     "lines name)",
             "embedded": "smoke scale (configs/Embedded-Detection/smoke.yaml: 128-px images, 2 images a batch)"}[
        plan.scale]
    return (f"Backbones at width {plan.width:g}: {pretraining}transferred to Faster R-CNN on "
            f"{plan.detect_data.describe()} at {scale}, {len(plan.detect_seeds)} detection seed(s) per pretraining "
            f"run, in these arms: {arms}.")


def _arm_notes(results: JobResults) -> list[str]:
    """Each arm comparison: its call, or that none is established; what the two arms' configs differ in."""
    notes = []
    backbone = {g.name: g.backbone for g in results.groups}
    for c in results.arms:
        key = f"{c.a} vs {c.b}"
        differs = what_differs(results.differences.get(key, {}))
        head = f"{backbone.get(c.a, c.a)}, {c.a} vs {c.b} (the factor: {results.factors.get(key, '—')})"
        if key in results.unfair:  # the runs' saved configs differ beyond the factor: not read as its effect
            notes.append(f"{head}: {c.describe(1)}; {differs}: beyond the factor ({', '.join(results.unfair[key])})"
                         ", so the difference is not read as the factor's effect.")
        elif c.call is not None:
            ahead, by = (c.a, c.delta) if c.call == c.a else (c.b, -c.delta)
            notes.append(f"{head}: {ahead} ahead by {by:.1f} {c.metric} ({c.describe(1)}); {differs}.")
        elif c.interval is None or c.adjustment is not None and c.adjustment.reading:  # one scratch run, or a job
            notes.append(f"{head}: {c.describe(1)}; {differs}.")  # whose control does not read its no-calls
        else:
            notes.append(f"{head}: {c.describe(1)}: no difference is established; {differs}.")
    for key, why in results.not_compared.items():
        a = key.split(" vs ")[0]
        notes.append(f"{backbone.get(a, a)}, {key} (the factor: {results.factors.get(key, '—')}): not compared "
                     f"({why}); {what_differs(results.differences.get(key, {}))}.")
    return notes


def _backbone_notes(results: JobResults) -> list[str]:
    """Each backbone vs the first: the order only when called, the pretraining errors measured beside it."""
    notes = []
    backbone = {g.name: g.backbone for g in results.groups}
    pre = results.pretraining
    arm_of = {g.name: g.arm for g in results.groups}
    for c in results.deltas:
        a, b = backbone.get(c.a, c.a), backbone.get(c.b, c.b)
        arm = arm_of.get(c.a, "")
        order = (f"{a} ahead of {b} by {c.delta:.1f} {c.metric}" if c.delta > 0 else
                 f"{b} ahead of {a} by {-c.delta:.1f} {c.metric}")
        if c.call is not None:
            text = f"Backbones, {arm}: {order} ({c.describe()})."
        else:  # no "ahead": the order is what is not established
            text = (f"Backbones, {arm}: {a} minus {b}, {c.describe()}: the order of the two backbones is not "
                    "established.")
        norm = ARMS[arm].pretrain_norm if arm in ARMS else None
        pa, pb = pre.get(pretraining_label(a, norm)), pre.get(pretraining_label(b, norm))
        if pa and pb:
            text += (f" Measured beside it: pretraining top-1 error ({norm}) {a} {pa.mean:.1f}%, {b} "
                     f"{pb.mean:.1f}%; AP by object size in the table. This job does not measure what "
                     "causes the difference; no cause is claimed.")
        notes.append(text)
    return notes
