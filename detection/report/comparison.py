"""The one statistic that decides whether a difference between two groups of runs is real.

Every comparison the project prints -- the report's table, the main job's summary and notes, tools/compare_jobs.py
-- is a `Comparison` made by `compare()` here and rendered by `Comparison.describe()`; nothing parses its text.

**The unit that varies.** Runs of a group are nested: detection runs that start from the same pretrained weights
share one backbone, so they are not independent samples of "this backbone design". The unit of a pretrained group
is its pretraining run (the main job: pretraining seeds, detection seeds nested under each; one checkpoint is one
unit however many detection seeds ran from it); the unit of a group trained from scratch is the run, whose seed
initialises the backbone. A group's value is the mean of its unit means.

**The interval: Welch's t on the unit means** -- the interval of the balanced nested random-effects model for the
difference of two fixed means (each unit mean carries the between-unit variance plus its detection runs'
within-unit variance divided by their number), with Welch-Satterthwaite degrees of freedom because the groups'
spreads differ (a from-scratch control varies far more than a pretrained leg). Chosen over a hierarchical
bootstrap because this project has 2-3 pretraining seeds per group: a bootstrap can only resample among those 2-3
unit means, so its 95% interval is at most their range, which covers the true mean about half the time with two
units; the t interval widens with few units as it must (t(0.975, 1 df) = 12.7). More detection seeds shrink
only the within-unit part; a backbone call needs more pretraining seeds, and `units_needed` says how many.

A call ("A ahead" / "B ahead") is made only when the 95% interval excludes 0; a group with one unit has no
spread estimate, and units whose means are all identical have none either (a quantised metric can do that: an
interval of zero width would call any difference), so no interval and no call. `units_needed` is the number of
units per group with which a rerun would separate a difference the size observed, at the observed spreads, with
80% power (the t quantiles of the 95% interval and of 80% power added) -- a size to plan a run by. Beside it,
P(A > B): the probability that a run of A has the higher value than a run of B (ties count half) -- rliable's
probability of improvement when higher is better, over all pairs of runs; a description, not a test.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Spread", "Comparison", "spread", "compare", "t_quantile", "LEVEL", "POWER"]

LEVEL = 0.95
POWER = 0.8  # of `units_needed`
MAX_UNITS_NEEDED = 1000


@dataclass(frozen=True)
class Spread:
    """One group's metric over its runs (units: pretraining runs or single runs, see the module docstring)."""

    mean: float  # the mean of the unit means (with equal runs per unit: the mean of all runs)
    runs: int
    units: int
    unit: str  # what a unit is: "pretraining seed" or "run"
    sd: float | None  # over all runs (None with one run)
    sd_between: float | None  # of the unit means (None with one unit)
    sd_within: float | None  # pooled over the runs inside each unit (None when no unit has two runs)
    interval: tuple[float, float] | None = None  # 95% for the mean: t over the unit means (None with one unit)


@dataclass(frozen=True)
class Comparison:
    """A minus B on one metric, with a 95% interval over the units, P(A > B) and the call it allows."""

    metric: str
    a: str
    b: str
    unit_a: str  # what a unit of A is ("pretraining run" or "run")
    unit_b: str
    delta: float  # mean of A's unit means minus B's
    interval: tuple[float, float] | None  # 95%, Welch's t over the unit means; None without a spread estimate
    df: float | None  # its degrees of freedom
    p_a_better: float  # P(a run of A > a run of B), ties half
    units: tuple[int, int]  # units in A and in B
    runs: tuple[int, int]
    units_needed: int | None  # per group, for 80% power at the observed Δ and spreads (None: > 1000 or not asked)
    why_no_interval: str | None = None
    higher_is_better: bool = True  # False for errors: the group "ahead" is the one with the lower value

    @property
    def call(self) -> str | None:
        """The name of the group ahead (higher, or lower for an error) when the interval excludes 0, else None."""
        if self.interval is None or self.interval[0] <= 0.0 <= self.interval[1]:
            return None
        return self.a if (self.delta > 0) == self.higher_is_better else self.b

    def cell(self, nd: int = 2) -> str:
        """A table cell: the interval, P(A > B) and the call (the table's Δ column holds delta)."""
        p = f"P(A>B) {self.p_a_better:.2f}"
        if self.interval is None:
            return f"{p}; no call: one {self.unit_a if self.units[0] < 2 else self.unit_b}"
        lo, hi = self.interval
        return f"[{lo:+.{nd}f}, {hi:+.{nd}f}], {p}; " + (f"{self.call} ahead" if self.call else "no call")

    def describe(self, nd: int = 2) -> str:
        """One line: Δ, the interval, P(A > B), the units and the call or why none is made."""
        head = f"Δ{self.metric} {self.delta:+.{nd}f}"
        if self.unit_a == self.unit_b:
            counts = f"{self.units[0]} vs {self.units[1]} {self.unit_a}s"
        else:
            counts = f"{_count(self.units[0], self.unit_a)} vs {_count(self.units[1], self.unit_b)}"
        if self.runs != self.units:
            counts += f"; {self.runs[0]} vs {self.runs[1]} runs"
        p = f"P(A > B) {self.p_a_better:.2f}"
        if self.interval is None:
            return f"{head}, {p} ({counts}) -- no call: {self.why_no_interval}"
        lo, hi = self.interval
        ci = f"95% CI [{lo:+.{nd}f}, {hi:+.{nd}f}]"
        if self.call is not None:
            return f"{head}, {ci}, {p} ({counts}) -- {self.call} ahead" + (
                "" if self.higher_is_better else f" (lower {self.metric})")
        if self.units_needed:
            need = (f"; about {self.units_needed} {self.unit_a}s per group would separate a difference this size at "
                    "the observed spread (80% power)")
        else:
            need = "" if self.delta == 0.0 else f"; more than {MAX_UNITS_NEEDED} {self.unit_a}s per group would"
            need += " be needed to separate a difference this size" if need else ""
        return f"{head}, {ci}, {p} ({counts}) -- no call: the interval includes 0{need}"


def _count(n: int, unit: str) -> str:
    return f"{n} {unit}" + ("" if n == 1 else "s")


Values = Mapping[Hashable, Sequence[float]]  # unit -> the values of its runs


def _clean(values: Values) -> dict[Hashable, list[float]]:
    out = {u: [float(v) for v in vs if v is not None and math.isfinite(v)] for u, vs in values.items()}
    return {u: vs for u, vs in out.items() if vs}


def spread(values: Values, unit: str) -> Spread | None:
    """The group's mean and spreads; None when it has no finite value."""
    vals = _clean(values)
    if not vals:
        return None
    means = [statistics.fmean(v) for v in vals.values()]
    flat = [x for v in vals.values() for x in v]
    within = [statistics.variance(v) for v in vals.values() if len(v) > 1]
    mean, between = statistics.fmean(means), statistics.stdev(means) if len(means) > 1 else None
    interval = None
    if between:  # None (one unit) or 0 (identical unit means): no spread estimate, no interval
        half = t_quantile(0.5 + LEVEL / 2, len(means) - 1) * between / math.sqrt(len(means))
        interval = (mean - half, mean + half)
    return Spread(mean, len(flat), len(vals), unit, statistics.stdev(flat) if len(flat) > 1 else None, between,
                  math.sqrt(statistics.fmean(within)) if within else None, interval)


def _welch(var_a: float, n_a: int, var_b: float, n_b: int) -> tuple[float, float]:
    """(standard error, Welch-Satterthwaite degrees of freedom) of a difference of two means."""
    va, vb = var_a / n_a, var_b / n_b
    se = math.sqrt(va + vb)
    if va + vb == 0.0:
        return 0.0, float(n_a + n_b - 2)
    return se, (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))


def compare(metric: str, a: str, values_a: Values, unit_a: str, b: str, values_b: Values, unit_b: str, *,
            higher_is_better: bool = True) -> Comparison | None:
    """A vs B on `metric`; values_* map each unit (a pretraining run, or a run) to its runs' values; unit_* name
    what a unit is; higher_is_better=False for an error (which side a call names). None when a side has no finite
    value."""
    va, vb = _clean(values_a), _clean(values_b)
    if not va or not vb:
        return None
    ma, mb = [statistics.fmean(v) for v in va.values()], [statistics.fmean(v) for v in vb.values()]
    delta = statistics.fmean(ma) - statistics.fmean(mb)
    runs_a, runs_b = [x for v in va.values() for x in v], [x for v in vb.values() for x in v]
    pairs = [(x > y) + 0.5 * (x == y) for x in runs_a for y in runs_b]
    p = sum(pairs) / len(pairs)
    units, runs = (len(ma), len(mb)), (len(runs_a), len(runs_b))
    if min(units) < 2:
        one, unit = (a, unit_a) if len(ma) < 2 else (b, unit_b)
        return Comparison(metric, a, b, unit_a, unit_b, delta, None, None, p, units, runs, None,
                          f"{one} has one {unit}: its spread is unknown (run at least 2 {unit}s per group)",
                          higher_is_better)
    var_a, var_b = statistics.variance(ma), statistics.variance(mb)
    if var_a + var_b == 0.0:
        return Comparison(metric, a, b, unit_a, unit_b, delta, None, None, p, units, runs, None,
                          "the unit means are identical within each group: no spread to set an interval by",
                          higher_is_better)
    se, df = _welch(var_a, len(ma), var_b, len(mb))
    half = t_quantile(0.5 + LEVEL / 2, df) * se
    needed = None
    if abs(delta) <= half and delta != 0.0:
        for k in range(2, MAX_UNITS_NEEDED + 1):
            se_k, df_k = _welch(var_a, k, var_b, k)
            if (t_quantile(0.5 + LEVEL / 2, df_k) + t_quantile(POWER, df_k)) * se_k < abs(delta):
                needed = k
                break
    return Comparison(metric, a, b, unit_a, unit_b, delta, (delta - half, delta + half), df, p, units, runs, needed,
                      None, higher_is_better)


# ---- Student's t quantile (no scipy dependency for one function) ------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (Numerical Recipes, modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` (> 0, not necessarily integer) degrees of freedom, p in (0.5, 1)."""
    if not 0.5 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile: need 0.5 < p < 1 and df > 0, got p={p}, df={df}")
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)
