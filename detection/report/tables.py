"""The report's two tables: the results -- one row per group in Detectron2 MODEL_ZOO's columns, the pretraining's
top-1 error and the chance level beside them -- and the comparisons the table's family makes (each group against
the baseline and against its from-scratch control), one row per comparison with its interval and call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from backbones import model_info

from .comparison import Comparison, adjust, spread
from .document import Estimate, fmt
from .groups import RunGroup, compare_groups
from .paper import PAPER_REFERENCE, paper_reference
from .runs import COCO_COLUMNS, VOC_COLUMNS

__all__ = ["ResultKind", "RESULT_KINDS", "ComparisonSource", "results_table", "per_class_table", "comparison_family",
           "comparisons_table", "baseline_group", "scratch_control", "measured_on", "paper_notes"]


@dataclass(frozen=True)
class ResultKind:
    """How a kind of detection result (RunResult.kind) is tabled: its label, its metric columns and the metric its
    comparisons are on unless the caller names one."""

    label: str
    columns: tuple[str, ...]
    compared: str


RESULT_KINDS = {"coco": ResultKind("COCO-style box AP", COCO_COLUMNS, "AP"),
                "voc": ResultKind("PASCAL VOC box AP", VOC_COLUMNS, "AP50")}

ComparisonSource = Callable[[str, str, str], Comparison | None]  # (group A, group B, metric) -> A vs B


def _of_runs(g: RunGroup, m) -> str:
    """The runs a cell rests on, where fewer than the row's n (a run without the metric, or with NaN): the row said
    n 3 over a mean of 2."""
    return f" ({m.runs} of {g.n} runs)" if m.runs < g.n else ""


def _with_interval(g: RunGroup, key: str) -> Estimate | str:
    """A group's mean with its 95% interval over its units, or ± sd / the value alone; "—" without the metric."""
    m = g.metrics.get(key)
    if m is None:
        return "—"
    return Estimate(m.mean, None if m.interval is None else tuple(m.interval), m.sd, _of_runs(g, m))


def _mean_of(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def measured_on(g: RunGroup) -> str:
    """Where the group's times and memory were measured ("cpu, 1 thread(s)"; several when its runs differ)."""
    where = sorted({f"{m.get('device', '?')}, {m.get('threads', '?')} thread(s)"
                    + (f" x {m['processes']} processes" if (m.get("processes") or 1) > 1 else "")
                    for r in g.finished if (m := r.measured_on)})
    return "; ".join(where) or "not recorded"


def _top1(g: RunGroup) -> Estimate | str:
    """The val top-1 error of the pretraining runs the group's detectors started from: mean [95% interval over
    them]; "—" for a group trained from scratch or from weights without a pretraining run beside them."""
    runs = {p.path: [p.top1_error] for r in g.finished if (p := r.pretraining) and p.top1_error is not None}
    s = spread(runs, "pretraining run") if runs else None
    return "—" if s is None else Estimate(s.mean, s.interval, None if s.interval else s.sd)


def _count(g: RunGroup) -> str:
    """n: runs, or pretraining runs x detection runs per pretraining run where they differ."""
    per_unit: dict = {}
    for runs in g.independent:  # the runs of a repeated seed count once
        per_unit[g.unit_of(runs[0])] = per_unit.get(g.unit_of(runs[0]), 0) + 1
    counts = set(per_unit.values())
    n = (str(g.n) if counts == {1} else f"{len(per_unit)} x {counts.pop()}" if len(counts) == 1
         else f"{len(per_unit)} units, {g.n} runs")
    return n + (f" (+{len(g.finished) - g.n} repeated seed)" if len(g.finished) > g.n else "")


MAX_CLASS_COLUMNS = 8  # more classes than this: one row per class (a column per group) instead


def per_class_table(groups: list[RunGroup], kind: str) -> tuple[list[str], list[list]] | None:
    """Each finished group's AP per class (COCO: AP, VOC: AP50, the kind's compared metric), mean [95% interval over
    its units]: a column per class up to MAX_CLASS_COLUMNS, else a row per class; None with fewer than two classes
    (the mean is the class). Comparisons stay on the mean."""
    finished = [g for g in groups if g.n]
    per_class = {id(g): g.per_class() for g in finished}
    classes = sorted({c for pc in per_class.values() for c in pc})
    if len(classes) < 2:
        return None

    def cell(g: RunGroup, c: str) -> Estimate | str:
        m = per_class[id(g)].get(c)
        return "—" if m is None else Estimate(m.mean, None if m.interval is None else tuple(m.interval), m.sd)

    metric = RESULT_KINDS[kind].compared
    if len(classes) <= MAX_CLASS_COLUMNS:
        return ["name", *(f"{metric} {c}" for c in classes)], [[g.name, *(cell(g, c) for c in classes)]
                                                              for g in finished]
    return [f"class ({metric})", *(g.name for g in finished)], [[c, *(cell(g, c) for g in finished)]
                                                               for c in classes]


def results_table(groups: list[RunGroup], kind: str, chance: dict | None) -> tuple[list[str], list[list], list[str]]:
    """(head, rows, the lines under it): one row per finished group in MODEL_ZOO's columns -- schedule, train
    s/iter, inference s/im, train memory, then box AP with its 95% interval over the group's units -- with the
    pretraining's top-1 error where a group was pretrained here, the paper's number where a run is of its design,
    and the chance level of random boxes; where the timings were measured is a line under it (a column when the
    groups differ)."""
    cols = RESULT_KINDS[kind].columns
    finished = [g for g in groups if g.n]
    papers = {id(g): paper_reference(kind, g.first)[0] for g in finished}
    top1 = {id(g): _top1(g) for g in finished}
    with_top1, with_paper = any(v != "—" for v in top1.values()), any(papers.values())
    where = {id(g): measured_on(g) for g in finished}
    one_place = len(set(where.values())) <= 1
    head = ["name", "backbone", "init", "n", "iterations", "train s/iter", "inference s/im", "train mem (MB)",
            "params (M)", "GMACs (224²)", *(["top-1 err %"] if with_top1 else []), *cols,
            *(["paper AP50 / AP"] if with_paper else []), *([] if one_place else ["measured on"])]
    rows = []
    for g in finished:
        f, r = g.finished, g.first
        params = _mean_of([x.parameters for x in f])
        paper = papers[id(g)]
        rows.append([g.name, r.backbone, r.init, _count(g), r.iterations if r.iterations is not None else "—",
                     fmt(_mean_of([x.train_s_per_iter for x in f]), 3),
                     fmt(_mean_of([x.inference_s_per_image for x in f]), 3),
                     fmt(_mean_of([x.peak_memory_mb for x in f]), 0), fmt(None if params is None else params / 1e6, 1),
                     fmt(r.gmacs, 2), *([top1[id(g)]] if with_top1 else []), *[_with_interval(g, c) for c in cols],
                     *([" / ".join(fmt(paper.get(k)) for k in ("AP50", "AP") if k in paper) if paper else "—"]
                       if with_paper else []), *([] if one_place else [where[id(g)]])])
    for dataset, stats in (chance or {}).items():
        if any(g.first.dataset == dataset for g in finished):
            rows.append(["chance (random boxes)", *["—"] * (len(head) - len(cols) - 1 - with_paper - (not one_place)),
                         *[fmt(stats.get(c)) for c in cols], *(["—"] if with_paper else []),
                         *([] if one_place else ["—"])])
    memory = next((x.memory_measure for g in finished for x in g.finished if x.memory_measure), "—")
    lines = ["n: runs (pretraining runs x detection runs per pretraining run where they differ). Box AP"
             + (" and top-1 error" if with_top1 else "") + ": mean [95% interval over the group's units] (± sd "
             "where one unit). Train s/iter: mean of the logged iteration times over iterations 100-500, or the "
             "middle 80% of shorter runs; inference s/im: the model's forward in eval mode at batch 1, loader "
             f"excluded; train mem: {memory}"
             + (f"; timings measured on: {next(iter(where.values()))}." if one_place and where else ".")]
    return head, rows, lines


def paper_notes(groups: list[RunGroup], kind: str) -> list[str]:
    """Why the paper's numbers are (or are not) beside a row: only runs of its own design are comparable."""
    design = ("the paper's own design: its backbone at full width (resnet101 as C4, vgg16 with its fc6/fc7 head), "
              "its splits and input scale, the schedule and solver of its column, from the ImageNet model it used")
    reasons = {g.name: paper_reference(kind, g.first) for g in groups if g.n}
    if any(ref for ref, _ in reasons.values()):
        notes = [f"Paper numbers: {PAPER_REFERENCE[kind]['condition']}; shown only for runs of {design}."]
    else:
        notes = [f"No paper column: no run here is of {design} ({PAPER_REFERENCE[kind]['condition']}), so their "
                 "numbers are not comparable with Tables 7/8."]
    return notes + [f"{name}: no paper number ({why})." for name, (_, why) in reasons.items() if why]


def scratch_control(g: RunGroup, groups: list[RunGroup]) -> RunGroup | None:
    """The from-scratch group with the same backbone, width, data and schedule as the pretrained group `g`."""
    if g.first.init != "pretrained":
        return None
    r = g.first
    for other in groups:
        o = other.first
        if (other is not g and other.n and o.init == "scratch" and o.backbone == r.backbone and o.width == r.width
                and o.dataset == r.dataset and o.train_datasets == r.train_datasets
                and o.config.get("SOLVER") == r.config.get("SOLVER")):
            return other
    return None


def baseline_group(group: list[RunGroup], baseline: str | None) -> RunGroup | None:
    """The group the table's comparisons are against: the one named (a group or run name), else the pretrained
    VGG-16 group (the paper's baseline trunk), else the first finished one."""
    if baseline:
        found = [g for g in group if g.name == baseline or any(r.name == baseline for r in g.runs)]
        names = sorted({g.name for g in group} | {r.name for g in group for r in g.runs})
        if not found:
            raise ValueError(f"--baseline {baseline!r} names no run; runs: {names}")
        if len(found) > 1:
            raise ValueError(f"--baseline {baseline!r} is ambiguous: {len(found)} runs of different configurations "
                             "have that name; give them distinct --names")
        return found[0]
    vgg = [g for g in group if g.n and _is_vgg16(g.first.backbone)]
    return next((g for g in vgg if g.first.init == "pretrained"), None) or next(iter(vgg), None) or \
        next((g for g in group if g.n), None)


def _is_vgg16(backbone: str) -> bool:
    """VGG-16 with or without BN: the paper's baseline trunk (an unknown name, e.g. "?" of a broken run, is not)."""
    try:
        info = model_info(backbone)
    except ValueError:
        return False
    return info.family == "vgg" and info.depth == 16


def comparison_family(groups: list[RunGroup], baseline: RunGroup | None, metric: str,
                      source: ComparisonSource | None, label: str = "") -> list[Comparison]:
    """The comparisons the report prints: each group against the baseline and against its scratch control. With
    `source` (the main job: its one family of comparisons, already adjusted) those are looked up there and a pair
    outside it is not printed; without, the distinct pairs are one family, Holm-adjusted (comparison.adjust) and
    named with `label` (the kind of result: a report of COCO and VOC runs has a family of each)."""
    pairs = [(g, baseline) for g in groups if baseline is not None and g is not baseline and g.n]
    pairs += [(g, ctrl) for g in groups if (ctrl := scratch_control(g, groups)) is not None]
    unique: dict[frozenset, Comparison] = {}
    for g, other in pairs:
        key = frozenset((g.name, other.name))
        if key not in unique:
            c = source(g.name, other.name, metric) if source is not None else compare_groups(g, other, metric)
            if c is not None:
                unique[key] = c
    family = list(unique.values())
    return family if source is not None else adjust(family, f"this report's {len(family)} {label}comparisons")


def comparisons_table(family: list[Comparison]) -> tuple[list[str], list[list[str]]]:
    """One row per comparison: Δ (A minus B), its 95% interval and the family-adjusted one, P(A > B), the units,
    and the call or the smallest difference it could have called. Names and numbers do not wrap (a name broken
    inside read as two), so the call is "A ahead" / "B ahead" of the row's two groups."""
    with_se = any(c.test_set_se is not None for c in family)
    head = ["A", "B", "metric", "Δ (A − B)", "95% CI", "family-adjusted CI (level)",
            *(["test-set SE"] if with_se else []), "P(A > B)", "units (df)", "call"]
    rows = []
    for c in family:
        adj = c.adjustment
        held = ("—" if adj is None or adj.interval is None else
                f"[{adj.interval[0]:+.2f}, {adj.interval[1]:+.2f}] ({100 * (1 - adj.alpha):.4g}%)")
        units = (f"{c.units[0]} vs {c.units[1]} {c.unit_a}s" if c.unit_a == c.unit_b else
                 f"{c.units[0]} {c.unit_a}s vs {c.units[1]} {c.unit_b}s") + ("" if c.df is None else f" ({c.df:.1f})")
        if c.interval is None:
            call = f"no call: no interval ({c.no_interval()})"
        elif adj is not None and adj.reading:
            call = f"no call: {adj.reading.split(' (')[0]} (MDE {c.mde:.2f})"
        else:  # the row names both groups: the call says which column is ahead
            call = ("A ahead" if c.call == c.a else "B ahead") if c.call else f"no call (MDE {c.mde:.2f})"
        rows.append([c.a, c.b, c.metric, f"{c.delta:+.2f}",
                     "—" if c.interval is None else f"[{c.interval[0]:+.2f}, {c.interval[1]:+.2f}]", held,
                     *([fmt(c.test_set_se, 2)] if with_se else []), f"{c.p_a_better:.2f}", units, call])
    return head, rows
