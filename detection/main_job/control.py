"""The positive control of a job that ranks (power issue #64): its first backbone pretrained again with a fraction of
the budget (plan.control: a complete schedule of its own, every pretraining seed) and transferred with the same
recipe in the ranking arm. More pretraining transfers better: a known order. A backbone the job was given
(--weights) is fine-tuned instead for that fraction of the detection schedule from the same file, every detection
seed: a known order too, which checks what the job can resolve (its seeds, its test set), not the pretraining.

The control reads the family's no-calls; Holm alone decides its calls. Called the right way round, a no-call reads
"no difference this job could see", its MDE beside it; not called, every no-call reads "this job could not see even
its positive control" and the job is underpowered; called the wrong way round, the assay failed, which the job says
before anything else (report.comparison.read_as sets the reading).

`control_results` fills the control's fields of a JobResults; `control_lines` is how the summary, the notes and
the report's first section say it (one text, three places)."""

from __future__ import annotations

from classification.engine.run_files import read_classification_run

from ..report.comparison import Comparison, spread
from ..report.groups import PRETRAINING_RUN, compare_groups
from .arms import ARMS
from .family import compare_top1, untrained_units
from .plan import MainJobPlan, Stage, control_label, group_label, pretraining_label

__all__ = ["NO_CONTROL", "NOT_SEEN", "FAILED_ASSAY", "control_results", "control_reading", "control_lines"]

NO_CONTROL = ("the job ran no positive control (--no-control, or a preset without one), so it could not show that "
              "it sees a known difference")
NOT_SEEN = "this job could not see even its positive control"
FAILED_ASSAY = "its positive control came out the wrong way round, a failed assay"


def control_results(out, stages: list[Stage], plan: MainJobPlan, by_label: dict, metric: str) -> None:
    """The control's comparisons on `metric` and the reading it gives out's no-calls (out: a JobResults)."""
    arm = plan.control_arm()
    if arm is None:  # a job with transfer legs and no control cannot read its no-calls; a degradation job has none
        out.reading = NO_CONTROL if plan.backbones and plan.arms else None
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
    out.reading = control_reading(out.control, model, plan.control, out.control_kind)


def control_reading(c: Comparison | None, model: str, fraction: float, kind: str) -> str | None:
    """How the family's no-calls read from the control c (the whole minus the fraction): None when it was called
    the right way round ("no difference this job could see"), else why not, its numbers in brackets."""
    if c is None:
        return "its positive control has no result (a control leg did not finish)"
    if c.call is None:
        return f"{NOT_SEEN} ({model} with {fraction:g} of its {kind} vs the whole: {c.describe()})"
    if c.call != c.a:
        return f"{FAILED_ASSAY} ({model} with {fraction:g} of its {kind} ahead of the whole: {c.describe()})"
    return None


def control_lines(results, *, headline: bool = False) -> list[str]:
    """The control and how it reads the no-calls, first in the ranking. headline: the report's first sentences
    (Comparison.headline; a failed assay leads them: headline.py); else the summary's and the report details' lines
    (Comparison.describe, the pretraining gap)."""
    c = results.control
    if results.control_fraction is None:
        return [f"No positive control: {NO_CONTROL}; Holm alone decides the calls, and a no-call is not evidence of "
                "no difference."] if results.reading and not headline else []
    head = (f"Positive control ({results.control_fraction:g} of the {results.control_kind or 'pretraining'} "
            "vs the whole, same recipe)")
    said = "no result" if c is None else c.headline() + "." if headline else c.describe()
    lines = [f"{head}: {said}"]
    if results.control_top1 is not None and not headline:
        lines.append(f"Its pretraining gap: {results.control_top1.describe()}")
    if results.control_at_chance:
        lines.append(f"The control's pretraining never left chance ({len(results.control_at_chance)} run(s)): called, "
                     "it shows only that the job tells a trained backbone from an untrained one.")
    if c is not None and c.call is not None and c.call != c.a:
        lines.append("The control came out the wrong way round (the shortened budget ahead of the whole): a failed "
                     "assay; Holm's calls below stand, and no no-call below can be read as no difference.")
    elif c is None or c.call is None:
        lines.append("This job could not see even its control: it is underpowered. Holm's calls below stand; every "
                     "no-call below reads \"could not see even its control\", not \"no difference\".")
    else:
        lines.append("The control was called: a no-call below is no difference this job could see, the smallest it "
                     "could see beside it; Holm over the job's family decides every call.")
    return lines
