"""The job as a benchmark of a family of backbones: the leaderboard (one row per backbone), whether pretraining
accuracy predicts transfer (a rank correlation with a bootstrap interval over the units), and plain vs residual at
each depth with the job's one statistic.

Kornblith, Shlens & Le (CVPR 2019) asked "do better ImageNet models transfer better?" of 16 networks and found ImageNet
top-1 strongly correlated with transfer accuracy on classification datasets (about 0.96-0.99; detection is not what
they measured); the ResNet paper's own family claims are
plain vs residual at equal depth (Table 2, Fig. 4) and deeper residual nets detecting better (Tables 7/8).
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from backbones import model_info
from classification.analysis.degradation import RECIPE

from ..report.comparison import Comparison, Spread, compare, spread
from ..report.document import fmt
from ..report.groups import PRETRAINING_RUN, RunGroup, compare_groups
from .arms import ARMS

__all__ = ["Top1", "LeaderboardRow", "Correlation", "leaderboard_arm", "leaderboard", "transfer_correlation",
           "plain_residual_pairs", "plain_vs_residual", "spearman", "kendall", "MIN_BACKBONES", "RESAMPLES",
           "PUBLISHED", "MEASURED", "FILE_METADATA", "published_top1", "TOP1_METRIC", "COST_FIELDS",
           "untrained_units", "LEFT_CHANCE_BY", "NEVER_TRAINED"]

MIN_BACKBONES = 5  # the fewest backbones at which the exact permutation test can reach p < 0.05 (two-sided: the
#                    smallest p of n backbones is 2 / n!: 0.083 at 4, 0.017 at 5) -- not computed below 5
LEFT_CHANCE_BY = RECIPE.left_chance_by  # points below chance a net's final error must be to count as trained
NEVER_TRAINED = "pretraining never left chance"  # how a row not ranked for it begins (the table marks those)
RESAMPLES = 2000  # bootstrap resamples of the units
MEASURED, PUBLISHED, FILE_METADATA = "measured here", "published", "published (file metadata)"
# The leaderboard's costs measured while a run trains and evaluates: two runs of one job differ in them (the machine,
# what ran beside), never in the numbers the runs compute
COST_FIELDS = ("train_s_per_iter", "inference_s_per_image", "train_mem_mb")
TOP1_METRIC = "pretraining top-1 error"  # the metric of residual vs plain on pretraining (lower is better)
CORRELATED_METRIC = "AP"  # the leaderboard's sort key: COCO AP, the headline of Detectron2's MODEL_ZOO


@dataclass
class Top1:
    """A backbone's pretraining top-1 error (%) and where it comes from: pretraining runs of this job (one unit
    each), or a figure published with a --weights file (one value, not comparable with errors measured here)."""

    source: str  # MEASURED, PUBLISHED or FILE_METADATA
    error: Spread | None
    units: dict[str, float] = field(default_factory=dict)  # pretraining run (its directory name) -> error
    at_chance: tuple[str, ...] = ()  # its pretraining runs that never left chance (untrained_units)


@dataclass
class LeaderboardRow:
    """One backbone in the leaderboard's arm, Detectron2 MODEL_ZOO's columns: accuracy, then costs."""

    backbone: str
    family: str
    depth: int
    residual: bool
    arm: str
    weights: str  # "pretrained here" or the --weights file's name
    top1_source: str
    top1_error: Spread | None
    top1_units: dict[str, float]  # pretraining run (its directory name) -> error; {} for a published figure
    metrics: dict[str, Spread]  # AP50 / AP / AP75 over the group's units
    units: dict[str, dict[str, float]]  # metric -> unit (its pretraining run's directory name or the file) -> mean
    train_s_per_iter: float | None
    inference_s_per_image: float | None
    train_mem_mb: float | None
    params_m: float | None
    gmacs: float | None
    not_ranked: str = ""  # why the row has no place in the order ("": ranked): a net that never trained, or a job
    #   whose positive control was not called


@dataclass
class Correlation:
    """Rank correlation across backbones of pretraining top-1 accuracy and detection AP, with 95% percentile
    bootstrap intervals that resample each backbone's units (pretraining runs: a unit keeps its own accuracy and its
    own AP together). The backbones are fixed: the interval is the seed noise of the points, not a sample of nets."""

    x: str
    y: str
    backbones: list[str]
    source: str  # where the accuracies come from (one source: published and measured-here figures never mix)
    spearman: float | None = None
    spearman_interval: tuple[float, float] | None = None
    kendall: float | None = None
    kendall_interval: tuple[float, float] | None = None
    resamples: int = 0  # resamples the intervals are made of
    dropped: int = 0  # resamples left out because one side was constant (no rank correlation defined)
    left_out: dict[str, str] = field(default_factory=dict)  # backbone -> why it is not a point
    why_not: str | None = None  # why no correlation (or no interval) was computed
    p_permutation: float | None = None  # two-sided exact permutation p of Spearman's rho over the backbones (the
    #   unit: is the order of accuracy tied to the order of AP across these nets?), scipy.stats.permutation_test


def leaderboard_arm(arms: tuple[str, ...]) -> str | None:
    """The arm the leaderboard ranks backbones in: the plan's first pretrained arm (arms.ARMS order)."""
    return next((a for a in ARMS if a in arms and ARMS[a].pretrained), None)


def _mean(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def untrained_units(errors: dict[str, float], chance: dict[str, float | None]) -> tuple[str, ...]:
    """The pretraining runs whose final top-1 error is not LEFT_CHANCE_BY points below their chance error (a uniform
    guess among their classes; the degradation preset's criterion): a net that never trained is a failed recipe,
    and says nothing about its design."""
    return tuple(u for u, e in errors.items() if chance.get(u) is not None and e > chance[u] - LEFT_CHANCE_BY)


def leaderboard(groups: dict[str, RunGroup], labels: dict[str, str], top1: dict[str, Top1],
                weights: dict[str, str], arm: str, gmacs, unit_names: dict[str, str]) -> list[LeaderboardRow]:
    """One row per backbone with a finished group in `arm`, sorted by AP (best first: an order of means, not a call;
    the calls are the family's comparisons), the backbones whose pretraining never left chance after them, unranked
    and named. groups: label -> RunGroup;
    labels: backbone -> its group's label in `arm`; gmacs: a run's config -> GMACs (report.writer.run_gmacs);
    unit_names: a detection unit (the resolved checkpoint path, RunGroup.unit_of) -> the key its top-1 has (a
    pretraining run's directory name; a given file keeps its path)."""
    rows = []
    for backbone, label in labels.items():
        g = groups.get(label)
        if g is None or not g.n:
            continue
        info, runs = model_info(backbone), g.finished
        params = _mean([r.parameters for r in runs])
        t = top1.get(backbone)
        rows.append(LeaderboardRow(
            backbone, info.family, info.depth, info.residual, arm,
            Path(weights[backbone]).name if backbone in weights else "pretrained here",
            t.source if t else "", t.error if t else None, dict(t.units) if t else {},
            {k: g.metrics[k] for k in ("AP50", "AP", "AP75") if k in g.metrics},
            {k: {unit_names.get(u, u): statistics.fmean(v) for u, v in g.values(k).items()}
             for k in ("AP50", "AP", "AP75") if k in g.metrics},
            _mean([r.train_s_per_iter for r in runs]), _mean([r.inference_s_per_image for r in runs]),
            _mean([r.peak_memory_mb for r in runs]), None if params is None else params / 1e6, gmacs(g.first.config),
            _not_ranked(t)))
    return sorted(rows, key=lambda r: (bool(r.not_ranked), -(r.metrics["AP"].mean if "AP" in r.metrics else -math.inf)))


def _not_ranked(t: Top1 | None) -> str:
    """Why a row has no place in the order: its net never trained; "" when ranked."""
    if t is not None and t.at_chance:
        return (f"{NEVER_TRAINED} ({len(t.at_chance)} of {len(t.units)} runs not {LEFT_CHANCE_BY:g} points below a "
                "guess's error)")
    return ""


def _ranks(xs: list[float]) -> list[float]:
    """Ranks from 1, ties at their average rank."""
    order = sorted(range(len(xs)), key=xs.__getitem__)
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rho: Pearson's r of the ranks (ties averaged); None when either side is constant."""
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def kendall(xs: list[float], ys: list[float]) -> float | None:
    """Kendall's tau-b (ties in either variable corrected for); None when either side is constant."""
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(xs)):
        for j in range(i + 1, len(xs)):
            dx, dy = xs[i] - xs[j], ys[i] - ys[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    n_x, n_y = concordant + discordant + ties_y, concordant + discordant + ties_x  # pairs untied in x, in y
    return (concordant - discordant) / math.sqrt(n_x * n_y) if n_x and n_y else None


def permutation_p(xs: list[float], ys: list[float]) -> float:
    """Two-sided p of Spearman's rho under exchangeability of the backbones' pairings: every permutation of the
    ys against the xs (exact up to 8 backbones, 40,320 pairings; a seeded 9,999 beyond), scipy.stats."""
    import numpy as np
    import scipy.stats

    rho = (lambda y, axis=-1: np.apply_along_axis(lambda r: spearman(list(xs), list(r)) or 0.0, axis, y))
    res = scipy.stats.permutation_test((np.asarray(ys, dtype=float),), rho, permutation_type="pairings",
                                       n_resamples=9999 if len(xs) > 8 else np.inf, alternative="two-sided",
                                       vectorized=True, rng=np.random.default_rng(0))
    return float(res.pvalue)


def _percentile_interval(values: list[float]) -> tuple[float, float]:
    vals = sorted(values)
    q = statistics.quantiles(vals, n=40, method="inclusive")  # 2.5% steps
    return q[0], q[-1]


def transfer_correlation(rows: list[LeaderboardRow], *, resamples: int = RESAMPLES, seed: int = 0) -> Correlation:
    """Spearman and Kendall between pretraining top-1 accuracy (100 - error) and AP over the leaderboard's
    backbones whose accuracy has the most common source; the bootstrap resamples each backbone's units with
    replacement (a unit's accuracy and AP together), `resamples` times, seeded."""
    metric = CORRELATED_METRIC
    scales = [_scale(r.top1_source) for r in rows if r.top1_error is not None and metric in r.metrics]
    scale = max(sorted(set(scales)), key=scales.count) if scales else ""
    out = Correlation("pretraining top-1 accuracy (%)", f"detection {metric}", [], scale)
    points = {}
    for r in rows:
        pairs = _unit_pairs(r, metric) if r.top1_error is not None and metric in r.metrics else []
        if r.not_ranked:
            out.left_out[r.backbone] = f"not ranked: {r.not_ranked}"
        elif r.top1_error is None or metric not in r.metrics:
            out.left_out[r.backbone] = "no pretraining top-1" if r.top1_error is None else f"no {metric}"
        elif _scale(r.top1_source) != scale:
            out.left_out[r.backbone] = f"top-1 {_scale(r.top1_source)}, the others' {scale}: not one scale"
        elif not pairs:  # never a point without a unit that has both (it would be an unpaired mean)
            out.left_out[r.backbone] = f"no unit with both a top-1 and an {metric}"
        else:
            points[r.backbone] = pairs
    out.backbones = list(points)
    if len(points) < MIN_BACKBONES:
        out.why_not = (f"{len(points)} backbone(s) with a top-1 {scale or 'figure'} and an {metric}: a rank "
                       f"correlation needs at least {MIN_BACKBONES}")
        return out
    xs = [100.0 - statistics.fmean(a for a, _ in p) for p in points.values()]
    ys = [statistics.fmean(b for _, b in p) for p in points.values()]
    out.spearman, out.kendall = spearman(xs, ys), kendall(xs, ys)
    if out.spearman is None:
        out.why_not = (f"every backbone has the same {out.x if len(set(xs)) == 1 else out.y}: no rank "
                       "correlation")
        return out
    out.p_permutation = permutation_p(xs, ys)
    if all(len(p) < 2 for p in points.values()):
        out.why_not = "one unit per backbone: the bootstrap has nothing to resample, so no interval"
        return out
    rng = random.Random(seed)
    rhos, taus = [], []
    for _ in range(resamples):
        draws = [[p[rng.randrange(len(p))] for _ in p] for p in points.values()]
        bx = [100.0 - statistics.fmean(a for a, _ in d) for d in draws]
        by = [statistics.fmean(b for _, b in d) for d in draws]
        rho, tau = spearman(bx, by), kendall(bx, by)
        if rho is not None and tau is not None:
            rhos.append(rho)
            taus.append(tau)
    out.resamples, out.dropped = len(rhos), resamples - len(rhos)
    if len(rhos) >= resamples // 2:
        out.spearman_interval, out.kendall_interval = _percentile_interval(rhos), _percentile_interval(taus)
    else:
        out.why_not = f"{resamples - len(rhos)} of {resamples} resamples had a constant side: no interval"
    return out


def _scale(source: str) -> str:
    """What a top-1 figure can be compared with: measured here on the val items, or a figure its publisher states
    (in --weights-top1 or in the file: the same kind of figure, on the publisher's val set)."""
    return PUBLISHED if source in (PUBLISHED, FILE_METADATA) else source


def _unit_pairs(row: LeaderboardRow, metric: str) -> list[tuple[float, float]]:
    """(top-1 error, metric) of each unit of a backbone: its pretraining runs measured here, or the one given file
    (its error, published or measured, beside the mean of its legs: fine-tuning runs of one file are one point)."""
    aps = row.units.get(metric, {})
    if row.top1_source == MEASURED and row.weights == "pretrained here":
        return [(row.top1_units[u], ap) for u, ap in aps.items() if u in row.top1_units]
    return [(row.top1_error.mean, statistics.fmean(aps.values()))] if aps else []


def plain_residual_pairs(backbones: tuple[str, ...]) -> list[tuple[str, str]]:
    """(plain, residual) backbones of the job at the same depth and detection design, as the registry says."""
    infos = [model_info(b) for b in backbones]
    return [(p.name, r.name) for p in infos if not p.residual for r in infos
            if r.residual and r.depth == p.depth and r.detection_design == p.detection_design]


def compare_top1(a: str, units_a: dict[str, float], b: str, units_b: dict[str, float]) -> Comparison | None:
    """A vs B on pretraining top-1 error, pretraining runs as units (lower is better): the job and
    tools/compare_jobs.py (from results.json's top1) call this one."""
    return compare(TOP1_METRIC, a, {u: [v] for u, v in units_a.items()}, PRETRAINING_RUN, b,
                   {u: [v] for u, v in units_b.items()}, PRETRAINING_RUN, higher_is_better=False)


def plain_vs_residual(pairs: list[tuple[str, str]], top1: dict[str, Top1], groups: dict[str, RunGroup],
                      labels: dict[str, str], metric: str) -> list[Comparison]:
    """Residual minus plain at each depth: pretraining top-1 error (pretraining runs as units, lower is better) and
    the detection metric in the leaderboard's arm; for the job's one Holm family."""
    out = []
    for plain, residual in pairs:
        tp, tr = top1.get(plain), top1.get(residual)
        if tp and tr and tp.source == tr.source == MEASURED:
            c = compare_top1(residual, tr.units, plain, tp.units)
            if c is not None:
                out.append(c)
        gp, gr = groups.get(labels.get(plain, "")), groups.get(labels.get(residual, ""))
        if gp and gr and gp.n and gr.n:
            c = compare_groups(gr, gp, metric)
            if c is not None:
                out.append(c)
    return out


def measured_top1(errors: dict[str, float], chance: dict[str, float | None] | None = None) -> Top1:
    """A backbone's top-1 from its pretraining runs here (run directory name -> error); chance: each run's chance
    error (None: not known), for the runs that never trained."""
    return Top1(MEASURED, spread({u: [e] for u, e in errors.items()}, PRETRAINING_RUN), dict(errors),
                untrained_units(errors, chance or {}))


def published_top1(accuracy: float, source: str = PUBLISHED) -> Top1:
    """A figure published with a weights file: one value, no interval."""
    return Top1(source, spread({"published": [100.0 - accuracy]}, "published figure"))


def _ci(stat: Spread | None, nd: int = 1) -> str:
    if stat is None:
        return "—"
    ci = stat.interval
    return f"{stat.mean:.{nd}f}" + (f" [{ci[0]:.{nd}f}, {ci[1]:.{nd}f}]" if ci else "")


LEADERBOARD_COLUMNS = ["backbone", "family", "depth", "weights", "top-1 err %", "top-1 from", "AP50", "AP", "AP75",
                       "train s/iter", "inference s/im", "train mem (MB)", "params (M)", "GMACs (224²)"]


def leaderboard_table(rows: list[LeaderboardRow]) -> tuple[list[str], list[list[str]]]:
    """The leaderboard as (head, rows) of text, Detectron2 MODEL_ZOO's columns: mean [95% interval over units]."""
    return LEADERBOARD_COLUMNS, [
        [r.backbone + (" (never trained: not ranked)" if r.not_ranked.startswith(NEVER_TRAINED) else ""),
         r.family, str(r.depth), r.weights,
         _ci(r.top1_error), r.top1_source or "—",
         _ci(r.metrics.get("AP50")), _ci(r.metrics.get("AP")), _ci(r.metrics.get("AP75")),
         fmt(r.train_s_per_iter, 3), fmt(r.inference_s_per_image, 3), fmt(r.train_mem_mb, 0),
         fmt(r.params_m, 2), fmt(r.gmacs, 2)] for r in rows]


def correlation_text(c: Correlation | None) -> str:
    """The correlation as the report, the summary and RESULTS.md state it: an estimate with its interval, not a
    call (it is not one of the job's Holm family)."""
    if c is None:
        return "Accuracy vs transfer: no pretrained arm, no correlation."
    left = "; ".join(f"{b}: {why}" for b, why in c.left_out.items())
    left = f" Left out: {left}." if left else ""
    if c.spearman is None:
        return f"Accuracy vs transfer: not computed ({c.why_not}).{left}"
    units = "the pretraining runs of each backbone" if c.source == MEASURED else "each backbone's units"
    dropped = f", {c.dropped} with a constant side left out" if c.dropped else ""
    where = (f"95% percentile bootstrap over {units}, {c.resamples} resamples{dropped}: the backbones are fixed, so "
             "it is their seed noise only, and with 2-3 runs a backbone approximate" if c.spearman_interval
             else f"no interval: {c.why_not}")
    interval = (lambda ci: f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "")
    kendall = "—" if c.kendall is None else f"{c.kendall:+.2f}"
    test = ("" if c.p_permutation is None else
            f" Over the {len(c.backbones)} backbones as the unit, a permutation test of Spearman's rho (exact up to 8 "
            f"backbones, 9,999 seeded resamples beyond) gives "
            f"p {c.p_permutation:.3g} (two-sided): " + ("an association at 0.05." if c.p_permutation < 0.05 else
                                                        "no association established at 0.05."))
    return (f"Accuracy vs transfer over {len(c.backbones)} backbones ({', '.join(c.backbones)}; top-1 {c.source}): "
            f"rank correlation of {c.x} with {c.y}, Spearman {c.spearman:+.2f}{interval(c.spearman_interval)}, "
            f"Kendall {kendall}{interval(c.kendall_interval)} ({where}).{test} Not in the job's Holm family: its "
            f"own test.{left}")


def _spread_json(d: dict | None) -> Spread | None:
    if not d:
        return None
    return Spread(**{**d, "interval": tuple(d["interval"]) if d.get("interval") else None})


def leaderboard_from_json(rows: list[dict]) -> list[LeaderboardRow]:
    """results.json's leaderboard as rows again (RESULTS.md's blocks render them as the report does)."""
    out = []
    for d in rows:
        d = dict(d)
        d["top1_error"] = _spread_json(d.get("top1_error"))
        d["metrics"] = {k: _spread_json(v) for k, v in (d.get("metrics") or {}).items()}
        out.append(LeaderboardRow(**d))
    return out


def correlation_from_json(d: dict | None) -> Correlation | None:
    if not d:
        return None
    return Correlation(**{k: tuple(v) if k.endswith("_interval") and v else v for k, v in d.items()})


def plain_vs_residual_lines(comparisons: list[Comparison]) -> list[str]:
    """Residual vs plain at each depth as the report and the summary print them (calls of the job's family)."""
    return [f"Residual vs plain, {c.metric}: {c.a} vs {c.b}, {c.describe()}." for c in comparisons]


def family_sections(results, report: Path) -> tuple[list, list]:
    """(details, figures) report sections of a family job (results: a JobResults): the leaderboard with how it is
    ordered and residual vs plain, for the details after the notes (the Result says the correlation); the scatter
    of top-1 error against AP, with the figures -- only where the correlation was computed."""
    from ..report import ReportSection
    from ..report.plots import ScatterPoint, scatter_plot

    rows = results.leaderboard
    if not rows:
        return [], []
    report.mkdir(parents=True, exist_ok=True)
    points = [ScatterPoint(r.backbone + ("" if r.top1_source == MEASURED else f" ({r.top1_source})"), r.family,
                           r.top1_error.mean, r.metrics[CORRELATED_METRIC].mean, r.top1_error.interval,
                           r.metrics[CORRELATED_METRIC].interval)
              for r in rows if r.top1_error is not None and CORRELATED_METRIC in r.metrics
              and not r.not_ranked.startswith(NEVER_TRAINED)]  # as the correlation: a net that never trained is out
    computed = results.correlation is not None and results.correlation.spearman is not None
    figures = scatter_plot(points, report, "transfer_scatter.png", xlabel="pretraining top-1 error (%)",
                           ylabel=f"detection {CORRELATED_METRIC}",
                           title=f"Does pretraining accuracy predict transfer? ({rows[0].arm})",
                           caption=f"pretraining top-1 error against detection {CORRELATED_METRIC}, one point per "
                                   "backbone, 95% intervals over its units as error bars, families by marker (the "
                                   "correlation is on accuracy = 100 - error: a positive one falls to the right)"
                           ) if computed else []  # no figure for a statistic the text says was not computed
    order = f"sorted by {CORRELATED_METRIC}, any net that never trained last"
    lines = (f"One row per backbone in the arm {rows[0].arm}, {order}: mean [95% interval "
             "over the backbone's units: pretraining runs, or the one file given]; top-1 from: measured here on the "
             "val items, or published with the weights (another scale: never mixed with measured ones).",
             *(f"{r.backbone} not ranked: {r.not_ranked}." for r in rows if r.not_ranked.startswith(NEVER_TRAINED)),
             correlation_text(results.correlation), *plain_vs_residual_lines(results.plain_vs_residual))
    details = [ReportSection("Leaderboard", lines=lines, table=leaderboard_table(rows))]
    return details, ([ReportSection("Accuracy vs transfer", figures=tuple(figures))] if figures else [])
