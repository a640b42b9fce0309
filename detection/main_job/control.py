"""The positive control of a job that ranks (power issue #64): its first backbone pretrained again with a fraction of
the budget (plan.control: a complete schedule of its own, every pretraining seed) and transferred with the same
recipe in the ranking arm. More pretraining transfers better: a known order. A backbone the job was given
(--weights) is fine-tuned instead for that fraction of the detection schedule from the same file, every detection
seed: a known order too, which checks what the job can resolve (its seeds, its test set), not the pretraining.

The job tests the control first, on its own 95% interval; only when it calls the full budget ahead does the family
make calls (fixed-sequence gatekeeping, report.comparison.gated). A passed control shows the job resolves a
difference the size of the control's, no finer: each no-call of the family is read with its own MDE; a job that
cannot see the known difference says so instead of ranking.

`control_results` fills the control's fields of a JobResults; `control_lines` is how the summary, the notes and
the report's ranking section say it (one text, three places)."""

from __future__ import annotations

from classification.engine.run_files import read_classification_run

from ..report.comparison import spread
from ..report.groups import PRETRAINING_RUN, compare_groups
from .arms import ARMS
from .family import compare_top1, untrained_units
from .plan import MainJobPlan, Stage, control_label, group_label, pretraining_label

__all__ = ["NO_CONTROL", "control_results", "control_lines"]

NO_CONTROL = ("the job ran no positive control (--no-control, or a preset without one), so it could not show that "
              "it sees a known difference")


def control_results(out, stages: list[Stage], plan: MainJobPlan, by_label: dict, metric: str) -> None:
    """The control's comparisons on `metric` and the gate it sets on out's family (out: a JobResults)."""
    arm = plan.control_arm()
    if arm is None:  # a job with transfer legs and no control calls none of them; a degradation job has none
        out.gate = NO_CONTROL if plan.backbones and plan.arms else None
        return
    model, norm = plan.backbones[0], ARMS[arm].pretrain_norm
    out.control_fraction, out.control_kind = plan.control, plan.control_kind()
    full, weak = by_label.get(group_label(model, arm)), by_label.get(control_label(model, arm))
    if full and weak:
        out.control = compare_groups(full, weak, metric)
    errors: dict[bool, dict[str, float]] = {False: {}, True: {}}
    chance = {}
    for s in stages:
        if s.kind == "pretrain" and s.model == model and s.variant == norm:
            run = read_classification_run(s.out)
            if run.finished:
                errors[s.control][s.out.name], chance[s.out.name] = run.top1_error, run.chance_error
    out.control_at_chance = list(untrained_units(errors[True], chance))
    if errors[True]:
        out.pretraining[f"{pretraining_label(model, norm)} control"] = spread(
            {u: [e] for u, e in errors[True].items()}, PRETRAINING_RUN)
    if errors[False] and errors[True]:
        out.control_top1 = compare_top1(model, errors[False], f"{model} control", errors[True])
    c = out.control
    if c is None:
        out.gate = "its positive control has no result (a control leg did not finish)"
    elif c.call != c.a:
        out.gate = (f"its positive control was not called ({model} with {plan.control:g} of its {out.control_kind} "
                    f"vs the whole: {c.describe()})")


def control_lines(results, *, headline: bool = False) -> list[str]:
    """The control and what it allows, first in the ranking: "called, the job ranks" or "this job cannot rank".
    headline: the report's first sentences (Comparison.headline, the gate in a clause; a job without a control says
    so after its comparisons, headline.py); else the summary's and the report details' lines (Comparison.describe,
    the pretraining gap, the gate in full)."""
    c = results.control
    if results.control_fraction is None:
        return [f"No ranking: {NO_CONTROL}."] if results.gate and not headline else []
    head = (f"Positive control ({results.control_fraction:g} of the {results.control_kind or 'pretraining'} "
            "vs the whole, same recipe)")
    said = "no result" if c is None else c.headline() + "." if headline else c.describe()
    lines = [f"{head}: {said}"]
    if c is not None and c.call is not None and c.call != c.a:
        lines.append("The control came out the wrong way round (the shortened budget ahead of the whole).")
    if results.control_top1 is not None and not headline:
        lines.append(f"Its pretraining gap: {results.control_top1.describe()}")
    if results.control_at_chance:
        lines.append(f"The control's pretraining never left chance ({len(results.control_at_chance)} run(s)): called, "
                     "it shows only that the job tells a trained backbone from an untrained one.")
    if results.gate and headline:
        lines.append(f"So this job cannot rank backbones ({results.gate.split(' (')[0]}): every transfer comparison "
                     "below is shown with its interval and makes no call.")
    elif results.gate:
        lines.append(f"This job cannot rank backbones: {results.gate}. Every comparison below is shown with its "
                     "interval and makes no call.")
    elif headline:
        lines.append("The control was called, so the transfer comparisons below are decided (Holm over the job's "
                     "family).")
    else:
        lines.append(f"Control called ({c.a} ahead by {c.delta:.2f} {c.metric}, 95% CI [{c.interval[0]:+.2f}, "
                     f"{c.interval[1]:+.2f}]): the family below is decided by Holm at 0.05.")
    return lines
