"""The degradation experiment's results (paper Figs. 1, 6, 7) as numbers read from its runs -- each net's final
errors over seeds, deeper vs shallower, the depth x shortcut interaction, the layer responses -- and the lines,
table and notes written from them. Part of the main job's results (results.py holds them in `JobResults` and
adjusts every comparison as one family)."""

from __future__ import annotations

from dataclasses import dataclass, field

from backbones import model_info
from classification.analysis.degradation import RECIPE
from classification.engine.run_files import read_classification_run

from ..report.comparison import Spread, compare, contrast, spread
from ..report.groups import RUN
from .plan import MainJobPlan, Stage

__all__ = ["DegradationResult", "layer_mean", "degradation_results", "layer_response_comparisons",
           "degradation_lines", "degradation_comparison_lines", "degradation_table", "degradation_notes", "pm"]


@dataclass
class DegradationResult:
    """One net of the degradation experiment over its seeds: final training error (the running error of the last
    50 batches, augmentation on, as the paper's curves) and val error, and each seed's curves."""

    model: str
    residual: bool
    depth: int
    train_error: Spread | None
    val_error: Spread | None
    errors: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # "train"/"val" -> run -> [final]
    histories: dict[str, dict] = field(default_factory=dict)  # run directory name -> history
    at_chance: list[str] = field(default_factory=list)  # runs whose final training error is not RECIPE.
    #   left_chance_by points below chance: a net that never trained says nothing about depth


def layer_mean(responses: list[tuple[str, float]]) -> float:
    """A net's Fig. 7 figure for a comparison: the mean over its 3x3 layers of the std of their responses."""
    return sum(s for _, s in responses) / len(responses)


def degradation_results(out, stages: list[Stage]) -> None:
    """Each net's final errors over its seeds, and for each kind of net (plain, residual) the deepest against the
    shallowest on training error -- the paper's Fig. 6 question -- with the one statistic (seeds are the units)."""
    for model in dict.fromkeys(s.model for s in stages):
        runs = {s.out.name: read_classification_run(s.out) for s in stages if s.model == model}
        done = {k: r for k, r in runs.items() if r.finished and r.history.get("train_error")}
        train = {k: [r.history["train_error"][-1]] for k, r in done.items()}
        val = {k: [r.top1_error] for k, r in done.items()}
        info = model_info(model)
        at_chance = [k for k, (v,) in train.items() if v > RECIPE.chance_error - RECIPE.left_chance_by]
        out.degradation.append(DegradationResult(model, info.residual, info.depth, spread(train, RUN),
                                                 spread(val, RUN), {"train": train, "val": val},
                                                 {k: r.history for k, r in done.items()}, at_chance))
    kinds = {residual: sorted((d for d in out.degradation if d.residual == residual and d.errors.get("train")),
                              key=lambda d: d.depth) for residual in (False, True)}
    for nets in kinds.values():
        if len(nets) >= 2:
            deep, shallow = nets[-1], nets[0]
            c = compare("training error", deep.model, deep.errors["train"], RUN, shallow.model,
                        shallow.errors["train"], RUN, higher_is_better=False)
            if c is not None:
                out.degradation_comparisons.append(c)
    if all(len(nets) >= 2 for nets in kinds.values()):  # the paper's claim is the reversal: depth x shortcuts
        (p_shallow, *_, p_deep), (r_shallow, *_, r_deep) = kinds[False], kinds[True]
        c = contrast("training error", f"{p_deep.model} - {p_shallow.model}",
                     (p_deep.errors["train"], p_shallow.errors["train"]), f"{r_deep.model} - {r_shallow.model}",
                     (r_deep.errors["train"], r_shallow.errors["train"]), RUN, higher_is_better=False)
        if c is not None:
            out.interactions.append(c)
            out.interaction_terms.append((p_deep.model, p_shallow.model, r_deep.model, r_shallow.model))


def layer_response_comparisons(out, responses: dict[str, dict[str, float]]) -> None:
    """Fig. 7's claim as calls: at each depth with both kinds of net, the residual net's mean layer response
    against the plain net's, seeds as units (the paper: residual responses are generally smaller)."""
    out.layer_responses = {m: {run: [v] for run, v in runs.items()} for m, runs in responses.items()}
    nets = [d for d in out.degradation if d.model in out.layer_responses]
    for depth in sorted({d.depth for d in nets}):
        residual = next((d for d in nets if d.depth == depth and d.residual), None)
        plain = next((d for d in nets if d.depth == depth and not d.residual), None)
        if residual and plain:
            c = compare("layer response std", residual.model, out.layer_responses[residual.model], RUN, plain.model,
                        out.layer_responses[plain.model], RUN, higher_is_better=False)
            if c is not None:
                out.layer_response_comparisons.append(c)


def pm(stat: Spread | None, nd: int = 1, unit: str = "", *, sd: bool = True, runs: bool = True) -> str:
    """A spread as the summary and the report write it: "56.4 ± 9.0% (n=4)"; sd / runs False leave those out."""
    if stat is None:
        return "—"
    spread = f" ± {stat.sd:.{nd}f}" if sd and stat.sd is not None else ""
    return f"{stat.mean:.{nd}f}{spread}{unit}" + (f" (n={stat.runs})" if runs else "")


def degradation_lines(results) -> list[str]:
    """Each net's final errors and the deeper-vs-shallower comparisons, one line each (the summary)."""
    lines = [f"{d.model:<16} training error {pm(d.train_error, unit='%'):<22} val error {pm(d.val_error, unit='%')}"
             for d in results.degradation]
    return lines + degradation_comparison_lines(results)


def degradation_comparison_lines(results) -> list[str]:
    return [f"{c.a} vs {c.b}: {c.describe()}" for c in results.degradation_comparisons] + [
        f"depth x shortcut interaction, ({c.a}) - ({c.b}): {c.describe()}" for c in results.interactions] + [
        f"Fig. 7, {c.a} vs {c.b}: {c.describe(3)}" for c in results.layer_response_comparisons]


def degradation_table(results) -> tuple[list[str], list[list[str]]]:
    """Each net's final errors over its seeds as the report's table (head, rows): mean ± sd, the paper's Table 6
    columns plus the training error its Fig. 6 plots."""
    head = ["net", "blocks", "depth", "seeds", "training error %", "val error %"]
    return head, [[d.model, "residual" if d.residual else "plain", str(d.depth),
                   str(d.train_error.runs if d.train_error else 0), pm(d.train_error, runs=False),
                   pm(d.val_error, runs=False)]
                  for d in results.degradation]


def degradation_notes(results, plan: MainJobPlan) -> list[str]:
    """What the degradation experiment shows, whichever way it falls (the paper: the deeper plain net has the higher
    training error, the deeper residual net the lower)."""
    notes = []
    limit = RECIPE.chance_error - RECIPE.left_chance_by
    stuck = [f"{d.model} in {len(d.at_chance)} of {len(d.errors.get('train', {}))} seeds" for d in results.degradation
             if d.at_chance]
    if results.degradation:
        notes.append(f"Degradation, the criterion every net must meet: final training error at most {limit:g}% "
                     f"({RECIPE.left_chance_by:g} points below chance); "
                     + (f"not met by {', '.join(stuck)}: a comparison with a net that never trained says nothing "
                        "about depth." if stuck else "met by every net and seed."))
    stuck_models = {d.model for d in results.degradation if d.at_chance}

    def not_trained(*models: str) -> str | None:
        stuck = [m for m in models if m in stuck_models]
        return (f"{c.describe()}: not read as evidence about depth ({', '.join(stuck)} did not leave chance in "
                "every seed)") if stuck else None

    for c in results.degradation_comparisons:
        kind = "plain" if not model_info(c.a).residual else "residual"
        if (text := not_trained(c.a, c.b)) is not None:
            notes.append(f"Degradation, {kind} nets: {c.a} vs {c.b}, {text}.")
            continue
        notes.append(_depth_note(c, kind, plan))
    for c, terms in zip(results.interactions, results.interaction_terms or [()] * len(results.interactions)):
        # Fig. 6's claim is the reversal: depth hurts plain nets, helps residual ones
        if (text := not_trained(*terms)) is not None:
            notes.append(f"Degradation, depth x shortcuts: ({c.a}) minus ({c.b}) in training error, {text}.")
            continue
        if c.call == c.b:
            text = (f"depth raises the training error of plain nets by {c.delta:.1f} points more than that of "
                    "residual nets, the paper's claim")
        elif c.call == c.a:
            text = f"depth raises the training error of residual nets by {-c.delta:.1f} points more than that of " \
                   "plain nets, against the paper's claim (a measured refutation at this budget)"
        else:
            text = "no interaction of depth and shortcuts is established"
        notes.append(f"Degradation, depth x shortcuts: ({c.a}) minus ({c.b}) in training error, {c.describe()}: "
                     f"{text}.")
    for c in results.layer_response_comparisons:  # Fig. 7: residual responses generally smaller than plain ones
        if (stuck := not_trained(c.a, c.b)) is not None:
            notes.append(f"Layer responses (Fig. 7), {c.a} vs {c.b}, {stuck}.")
            continue
        text = ("the residual net's responses are smaller, as the paper's Fig. 7" if c.call == c.a else
                "the plain net's responses are smaller, against the paper's Fig. 7" if c.call == c.b else
                "no difference in response size is established")
        notes.append(f"Layer responses (Fig. 7), {c.a} vs {c.b}: {c.describe(3)}: {text}.")
    return notes


def _depth_note(c, kind: str, plan: MainJobPlan) -> str:
    """Deeper vs shallower of one kind of net, whichever way it falls (equivalence only from TOST)."""
    if c.call is None:
        margin = RECIPE.equivalence_margin
        within = f"within ±{margin:g} points (how far two seeds of one 20-layer net fall apart: the recipe's margin)"
        same = (f"equivalent {within} by TOST at the family-adjusted level" if c.equivalent(margin)
                else f"neither a difference nor equivalence {within} is established")
        return (f"Degradation, {kind} nets: {c.a} vs {c.b}, {c.describe()}: {same} after "
                f"{plan.degradation_iterations} iterations.")
    if c.call == c.b:
        return (f"Degradation, {kind} nets: the deeper {c.a} ends with the higher training error"
                + (", the paper's degradation problem" if kind == "plain" else
                   ", unlike the paper, where the deeper residual net trains better") + f": {c.describe()}.")
    return (f"Degradation, {kind} nets: the deeper {c.a} ends with the lower training error"
            + (", as the paper's residual nets" if kind == "residual" else ", no degradation at this budget")
            + f": {c.describe()}.")
