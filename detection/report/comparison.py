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
spreads differ (a from-scratch control varies far more than a pretrained leg). Not a hierarchical bootstrap: over
2-5 unit means its interval is at most their range; the t interval widens with few units as it must. More detection
seeds shrink only the within-unit part; a backbone call needs more pretraining seeds (`units_needed`).

A call ("A ahead" / "B ahead") is made only when the deciding interval excludes 0: the family-adjusted one when
the comparison is one of a job's family (below), the 95% one for a comparison on its own. A group with one unit has
no spread estimate, and units whose means are all identical have none either (a quantised metric can do that: an
interval of zero width would call any difference), so no interval and no call. `mde` is the comparison's
resolution: the smallest true difference it calls with 80% power at the level that decides it, printed beside every
"no call" (a no-call with an MDE of 8 AP says nothing about a 2-AP difference); `units_needed` the units per group
with which a rerun would call a difference the size observed with 80% power -- a size to plan a run by. Both come
from simulating the test the job runs (power.py: Welch at the deciding level, each group's sd drawn from what its
2-5 unit means allow), not from the closed form, which takes the measured sds as the truth. Beside them,
P(A > B): the probability that a unit of A (its mean over its nested runs) has the higher value than a unit of B
(ties count half) -- rliable's probability of improvement when higher is better, over all pairs of units, since
runs nested in one unit are not independent draws; a description, not a test.

**The test set inside the interval.** Every run is scored on one fixed set of test images; what the job claims is
about the scene generator (or the dataset's population), not these images. `with_test_set` adds the test set's
part to the interval: the variance of Δ over paired bootstrap draws of the images that every run of a side shares
(test_sampling.shared_test_set_se; each run's own luck on these images already varies between units and is in
their spread), added to the units' variance -- the assumption: the two are independent and add -- on the units'
df (the part is taken as known; counted in Satterthwaite's df it would narrow a 3-unit interval as noise is added).
The call, p, the Holm step and the MDE are all of that interval.

**The family.** A job that prints several comparisons adjusts them together (`adjust`, Holm's step-down method over
the family's two-sided Welch p values): the call is made when the Holm-adjusted p is below 0.05, and the adjusted
interval is the interval at the level of the comparison's Holm step (alpha / (m - k + 1) for the k-th smallest p,
frozen at the first step that fails), so it excludes 0 exactly when the call is made. These intervals are
compatible with the calls, not simultaneous: only the Bonferroni level alpha / m (the first step's) covers every
comparison at once; the frozen level of the comparisons not called is Strassburger & Bretz's. A comparison with no
interval counts in the family (it could have been called with more units) and is never called. Equivalence ("as
well as", "the same") is said only from TOST: the (1 - 2 alpha) interval, at the comparison's Holm step alpha,
inside +-margin (`Comparison.equivalent(margin)`); the few equivalence claims are not adjusted as a family of their
own.

**The positive control reads the no-calls.** Holm over the family alone decides a call: it holds the familywise
error at 0.05 by itself. A job that ranks also carries a positive control (main_job.plan: one backbone with a
fraction of its pretraining, a known order), tested on its own 95% interval: it says how to read the family's
no-calls, never whether a call stands. Called, a no-call reads "no difference this job could see" beside its MDE;
not called, "this job could not see even its control" (`read_as` sets the family's `reading`); called the wrong way
round, the assay failed, which the job says before anything else.

**Numerics.** Student's t is scipy.stats' (`t.ppf`, `t.sf`), Holm's decisions and adjusted p statsmodels'
(`multipletests(method="holm")`): what a reviewer checks the numbers against. Ours are only what those libraries do
not give: Welch's df for a contrast of several groups, the interval at each Holm step, and the power simulation
(power.py; tests/detection/test_comparison.py recomputes every comparison in results/*.json).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from .power import MAX_UNITS, POWER, Power, simulated_mde, units_for

__all__ = ["Spread", "Comparison", "Adjustment", "spread", "compare", "contrast", "adjust", "read_as", "find",
           "with_test_set", "t_quantile", "LEVEL", "POWER", "HOLM"]

LEVEL = 0.95
HOLM = "Holm step-down"


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
class Adjustment:
    """A comparison's place in the family of comparisons its job prints, adjusted together by Holm's method."""

    method: str  # HOLM
    family: str  # what the family is ("the main job's comparisons")
    size: int  # m: comparisons in the family, those without an interval included
    rank: int  # of its raw p among the family's (1 = smallest)
    alpha: float  # its two-sided level: 0.05 / (m - k + 1) at its Holm step (frozen at the first step that fails)
    interval: tuple[float, float] | None  # at 1 - alpha; excludes 0 exactly when Holm rejects
    p: float | None  # Holm-adjusted p (None without an interval)
    reading: str | None = None  # how a no-call of the family reads when the job's positive control does not let it
    #   read "no difference this job could see" (not called, called the wrong way round, or none run); it never
    #   withholds a call: Holm alone decides


@dataclass(frozen=True)
class Comparison:
    """A minus B on one metric, with a 95% interval over the units, P(A > B) and the call it allows."""

    metric: str
    a: str
    b: str
    unit_a: str  # what a unit of A is ("pretraining run" or "run")
    unit_b: str
    delta: float  # mean of A's unit means minus B's
    interval: tuple[float, float] | None  # 95%, Welch's t over the unit means with the test set's part in its SE;
    #   None without a spread estimate
    df: float | None  # its degrees of freedom
    p_a_better: float  # P(a unit of A > a unit of B), ties half
    units: tuple[int, int]  # units in A and in B
    runs: tuple[int, int]
    units_needed: int | None  # per group, for 80% power at the observed Δ and spreads, at the level that decides
    #   (the family's when adjusted); None: called already, no spread, Δ 0, or more than MAX_UNITS
    why_no_interval: str | None = None
    higher_is_better: bool = True  # False for errors: the group "ahead" is the one with the lower value
    se: float | None = None  # standard error of delta (None without an interval)
    p_value: float | None = None  # two-sided, Welch's t, before any adjustment
    adjustment: Adjustment | None = None  # set by `adjust` when the comparison is one of a printed family
    terms: tuple[tuple[float, float, int], ...] = ()  # (weight, variance of its unit means, units) of each group
    #   of the contrast: what units_needed is recomputed from at the family's level (() in results written before)
    test_set_se: float | None = None  # the test set's part of delta's SE, inside se, the interval and p: how far
    #   delta moves when the test images are drawn again, the part every run of a side shares (test_sampling)
    test_images: int | None = None  # the test images those draws resample

    @property
    def decided_by(self) -> tuple[float, float] | None:
        """The interval the call is made by: the family-adjusted one when there is a family, else the 95% one."""
        return self.adjustment.interval if self.adjustment is not None else self.interval

    @property
    def alpha(self) -> float:
        """The two-sided level the call is made at: the comparison's Holm step in a family, else 0.05."""
        return self.adjustment.alpha if self.adjustment is not None else 1.0 - LEVEL

    @property
    def power(self) -> Power | None:
        """The simulated resolution (power.py) at the deciding level, the groups' measured spreads and units and the
        test set's part: None without an interval (no spread to set it by) or without the groups' terms (a results
        file written before they were recorded)."""
        if self.se is None or not self.terms:
            return None
        return simulated_mde(self.terms, self.alpha, fixed=self._fixed())

    @property
    def mde(self) -> float | None:
        """The minimum detectable effect: the smallest true |difference| this comparison calls with 80% power at its
        deciding level, simulated -- the resolution a "no call" had."""
        return None if self.power is None else self.power.mde

    def _fixed(self) -> float | None:
        """The test set's part as power.py takes it: its variance, or None."""
        return None if self.test_set_se is None else self.test_set_se ** 2

    @property
    def call(self) -> str | None:
        """The name of the group ahead (higher, or lower for an error) when the deciding interval excludes 0."""
        ci = self.decided_by
        if ci is None or ci[0] <= 0.0 <= ci[1]:
            return None
        return self.a if (self.delta > 0) == self.higher_is_better else self.b

    def reversed(self) -> Comparison:
        """B minus A: the same comparison read from the other side (a table row of B against A)."""
        flip = None if self.interval is None else (-self.interval[1], -self.interval[0])
        adj = self.adjustment
        if adj is not None and adj.interval is not None:
            adj = replace(adj, interval=(-adj.interval[1], -adj.interval[0]))
        return replace(self, a=self.b, b=self.a, unit_a=self.unit_b, unit_b=self.unit_a,
                       delta=0.0 - self.delta, interval=flip, p_a_better=1.0 - self.p_a_better,
                       units=self.units[::-1], runs=self.runs[::-1], adjustment=adj)  # 0.0 - x: never -0.0

    def equivalent(self, margin: float) -> bool | None:
        """TOST: True when the (1 - 2 alpha) interval lies inside (-margin, +margin), alpha the comparison's
        (family-adjusted) level; False when it does not; None without an interval. The only source of "as well
        as" / "the same"."""
        if self.se is None or self.df is None:
            return None
        half = t_quantile(1.0 - self.alpha, self.df) * self.se
        return -margin < self.delta - half and self.delta + half < margin

    def no_interval(self) -> str:
        """Why there is no interval, in a few words (a table cell's)."""
        if min(self.units) < 2:
            return f"one {self.unit_a if self.units[0] < 2 else self.unit_b}"
        return "identical unit means"

    def _reading(self) -> str | None:
        """How this no-call reads, when the job's control sets it: its words up to their details (the control's
        whole comparison is said once, in the control's own line); None: "no difference this job could see"."""
        adj = self.adjustment
        return adj.reading.split(" (")[0] if adj is not None and adj.reading and self.call is None else None

    def _test_set_text(self, nd: int) -> str:
        if self.test_set_se is None:
            return ""
        return f"; the test set's part inside it, SE {self.test_set_se:.{nd}f} ({self.test_images} images redrawn)"

    def _mde_text(self, nd: int) -> str:
        p = self.power
        if p is None:
            return ""
        return (f"; the smallest difference it could call is {p.mde:.{nd}f} (80% power at its {100 * self.alpha:.3g}% "
                f"level, {p.draws:,} simulated jobs, Monte Carlo ±{p.mc_error:.{nd}f})")

    def _adjusted_text(self, nd: int) -> str:
        adj = self.adjustment
        if adj is None or adj.interval is None:
            return ""
        lo, hi = adj.interval
        return (f"; {adj.method} over {adj.size}: [{lo:+.{nd}f}, {hi:+.{nd}f}] at {100 * (1 - adj.alpha):.4g}%, "
                f"p {self.p_value:.3g}, adjusted {adj.p:.3g}")

    def headline(self, nd: int | None = None) -> str:
        """The comparison as the first sentence a reader sees, names included: who is ahead and by how much, or
        that the job saw no difference and the smallest one it could have seen, then the numbers the decision rests
        on (describe() has them all). "A is ahead of B by 4.1 AP [1.2, 7.0] (95% CI, Holm step-down over 6; 5 vs 5
        pretraining runs)"; for a metric where lower is better, "A has a lower training error than B by ...". nd:
        decimals (default 1, 2 below a difference of 1: a call never prints an interval that touches 0)."""
        nd = nd if nd is not None else self._decimals()
        counts = _counts_of(self)
        observed = f"Δ{self.metric} {self.delta:+.{nd}f}"
        if self.interval is None:
            return f"{self.a} vs {self.b}: {observed} ({counts}), no call: {self.why_no_interval or 'no interval'}"
        lo, hi = self.decided_by
        adj = self.adjustment
        level = f"{100 * (1 - self.alpha):.4g}% CI" + (f", {adj.method} over {adj.size}" if adj is not None else "")
        if self.test_set_se is not None:  # the interval holds it; its size beside
            level += f", the test set's part inside (SE {self.test_set_se:.2f})"
        numbers = f"{observed} [{lo:+.{nd}f}, {hi:+.{nd}f}] ({level}; {counts})"
        mde = "" if self.mde is None else f"; the smallest difference it could see is {self.mde:.{nd}f} {self.metric}"
        if self._reading():
            return f"{self.a} vs {self.b}: no call, {self._reading()}: {numbers}{mde}"
        if self.call is None:
            return f"{self.a} vs {self.b}: no difference this job could see: {numbers}{mde}"
        ahead = self if (self.delta > 0) == self.higher_is_better else self.reversed()  # ahead minus behind
        lo, hi = ahead.decided_by if self.higher_is_better else (-ahead.decided_by[1], -ahead.decided_by[0])
        size = f"{abs(self.delta):.{nd}f} [{lo:.{nd}f}, {hi:.{nd}f}] ({level}; {_counts_of(ahead)})"
        if self.higher_is_better:
            return f"{ahead.a} is ahead of {ahead.b} by {size.replace(' [', f' {self.metric} [', 1)}"
        return f"{ahead.a} has a lower {self.metric} than {ahead.b}, by {size}"

    def _decimals(self) -> int:
        """1, or 2 below a difference of 1, or more until a called interval's bound nearest 0 does not print as 0."""
        nd = 1 if abs(self.delta) >= 1.0 else 2
        ci = self.decided_by
        if self.call is not None and ci is not None:
            while nd < 4 and round(min(abs(ci[0]), abs(ci[1])), nd) == 0.0:
                nd += 1
        return nd

    def describe(self, nd: int = 2) -> str:
        """One line: Δ, the interval (and its family-adjusted one), P(A > B), the units, df and the call or why
        none is made."""
        head = f"Δ{self.metric} {self.delta:+.{nd}f}"
        if self.unit_a == self.unit_b:
            counts = f"n = {self.units[0]} vs {self.units[1]} {self.unit_a}s"
        else:
            counts = f"n = {_count(self.units[0], self.unit_a)} vs {_count(self.units[1], self.unit_b)}"
        if self.runs != self.units:
            counts += f"; {self.runs[0]} vs {self.runs[1]} runs"
        p = f"P(A > B) {self.p_a_better:.2f} over units"
        if self.interval is None:
            fam = (f"; one of {self.adjustment.size} in the family ({self.adjustment.method}), never called"
                   if self.adjustment is not None else "")
            return f"{head}{self._test_set_text(nd)}, {p} ({counts}{fam}) -- no call: {self.why_no_interval}"
        lo, hi = self.interval
        ci = f"95% CI [{lo:+.{nd}f}, {hi:+.{nd}f}]{self._adjusted_text(nd)}{self._test_set_text(nd)}"
        counts += f", df {self.df:.1f}"
        if self._reading():
            return f"{head}, {ci}, {p} ({counts}) -- no call: {self._reading()}{self._mde_text(nd)}"
        if self.call is not None:
            return f"{head}, {ci}, {p} ({counts}) -- {self.call} ahead" + (
                "" if self.higher_is_better else f" (lower {self.metric})")
        which = "the family-adjusted interval includes 0" if self.adjustment is not None else "the interval includes 0"
        which += self._mde_text(nd)
        if self.units_needed:
            need = (f"; about {self.units_needed} {self.unit_a}s per group would separate a difference this size at "
                    "the observed spread (80% power)")
        else:  # None with its terms known: beyond the search; without them (an older results file): not known
            need = (f"; more than {MAX_UNITS} {self.unit_a}s per group would be needed to separate a "
                    "difference this size" if self.terms and self.delta != 0.0 else "")
        return f"{head}, {ci}, {p} ({counts}) -- no call: {which}{need}"


def _counts_of(c: Comparison) -> str:
    return (f"{c.units[0]} vs {c.units[1]} {c.unit_a}s" if c.unit_a == c.unit_b else
            f"{_count(c.units[0], c.unit_a)} vs {_count(c.units[1], c.unit_b)}")


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


def _welch(terms: Sequence[tuple[float, float, int]]) -> tuple[float, float]:
    """(standard error, Welch-Satterthwaite degrees of freedom) of a linear contrast sum(w * mean) of independent
    group means, each term (weight, variance of the unit means, units)."""
    parts = [(w * w * var / n, n) for w, var, n in terms]
    total = sum(v for v, _ in parts)
    if total == 0.0:
        return 0.0, float(sum(n for _, n in parts) - len(parts))
    return math.sqrt(total), total**2 / sum(v * v / (n - 1) for v, n in parts if v > 0.0)


def _two_sided_p(delta: float, se: float, df: float) -> float:
    """Both tails of Student's t beyond |delta| / se (the survival function: 1 - cdf would round a p below ~1e-16
    to 0)."""
    import scipy.stats  # here, not at import: 1.6 s that every tool importing the report would pay

    return float(2.0 * scipy.stats.t.sf(abs(delta) / se, df))


def _finish(metric: str, a: str, b: str, unit_a: str, unit_b: str, terms: list[tuple[float, list[float]]],
            units: tuple[int, int], runs: tuple[int, int], p_better: float, higher_is_better: bool) -> Comparison:
    """The comparison of the contrast sum(weight * mean of unit means) over `terms` (weight, unit means)."""
    delta = sum(w * statistics.fmean(m) for w, m in terms)
    args = (metric, a, b, unit_a, unit_b, delta)
    if min(len(m) for _, m in terms) < 2:
        one, unit = (a, unit_a) if units[0] < 2 else (b, unit_b)
        return Comparison(*args, None, None, p_better, units, runs, None,
                          f"{one} has one {unit}: its spread is unknown (run at least 2 {unit}s per group)",
                          higher_is_better)
    variances = [(w, statistics.variance(m), len(m)) for w, m in terms]
    if all(var == 0.0 for _, var, _ in variances):
        return Comparison(*args, None, None, p_better, units, runs, None,
                          "the unit means are identical within each group: no spread to set an interval by",
                          higher_is_better)
    return _interval(Comparison(*args, None, None, p_better, units, runs, None, None, higher_is_better,
                                terms=tuple(variances)))


def _interval(c: Comparison) -> Comparison:
    """c with its SE, df, 95% interval, p and units needed set from its groups' terms and its test-set part: the
    SE holds both, the df is the units' alone (Welch-Satterthwaite's df of a sum with a part taken as known on ~1000
    df would rise with it, and an interval over 3 units narrow as a source of noise is added: its coverage falls
    below nominal; the units' df keeps adding it a widening, never a narrowing)."""
    units_se, df = _welch(list(c.terms))
    se = math.sqrt(units_se ** 2 + (c._fixed() or 0.0))
    half = t_quantile(0.5 + LEVEL / 2, df) * se
    needed = _units_needed(c, 1.0 - LEVEL) if abs(c.delta) <= half else None
    return replace(c, interval=(c.delta - half, c.delta + half), df=df, se=se,
                   p_value=_two_sided_p(c.delta, se, df), units_needed=needed)


def _units_needed(c: Comparison, alpha: float) -> int | None:
    """The fewest units per group (2..MAX_UNITS) at which a rerun calls a true difference the size of c's
    delta with 80% power at level alpha, simulated at c's spreads and test-set part; None for delta 0, without the
    terms, or beyond the search (a test-set part alone can set a floor no number of units passes)."""
    if c.delta == 0.0 or not c.terms:
        return None
    return units_for(c.terms, abs(c.delta), alpha, fixed=c._fixed())


def _unit_means(values: Values) -> tuple[list[float], int]:
    vals = _clean(values)
    return [statistics.fmean(v) for v in vals.values()], sum(len(v) for v in vals.values())


def _p_better(xs: Sequence[float], ys: Sequence[float]) -> float:
    pairs = [(x > y) + 0.5 * (x == y) for x in xs for y in ys]
    return sum(pairs) / len(pairs)


def compare(metric: str, a: str, values_a: Values, unit_a: str, b: str, values_b: Values, unit_b: str, *,
            higher_is_better: bool = True) -> Comparison | None:
    """A vs B on `metric`; values_* map each unit (a pretraining run, or a run) to its runs' values; unit_* name
    what a unit is; higher_is_better=False for an error (which side a call names). None when a side has no finite
    value."""
    (ma, ra), (mb, rb) = _unit_means(values_a), _unit_means(values_b)
    if not ma or not mb:
        return None
    return _finish(metric, a, b, unit_a, unit_b, [(1.0, ma), (-1.0, mb)], (len(ma), len(mb)), (ra, rb),
                   _p_better(ma, mb), higher_is_better)


def contrast(metric: str, a: str, values_a: tuple[Values, Values], b: str, values_b: tuple[Values, Values],
             unit: str, *, higher_is_better: bool = True) -> Comparison | None:
    """An interaction: (A1 - A2) minus (B1 - B2), e.g. the depth effect of plain nets minus that of residual nets
    (the paper's Fig. 6 reversal). Four independent groups of units; Welch's t with Satterthwaite's df for the
    contrast; P(A > B) over all combinations of one unit from each group. units (and runs): each side's two groups
    together."""
    means = [_unit_means(v) for v in (*values_a, *values_b)]
    if any(not m for m, _ in means):
        return None
    (a1, r1), (a2, r2), (b1, r3), (b2, r4) = means
    better = [(x1 - x2 > y1 - y2) + 0.5 * (x1 - x2 == y1 - y2)
              for x1 in a1 for x2 in a2 for y1 in b1 for y2 in b2]
    return _finish(metric, a, b, unit, unit, [(1.0, a1), (-1.0, a2), (-1.0, b1), (1.0, b2)],
                   (len(a1) + len(a2), len(b1) + len(b2)), (r1 + r2, r3 + r4), sum(better) / len(better),
                   higher_is_better)


def with_test_set(c: Comparison, se: float | None, images: int | None) -> Comparison:
    """The comparison with its test-set part (test_sampling.shared_test_set_se) inside its SE, df, interval and p,
    or as it is when there is none (or it has no interval to widen). Before `adjust`: Holm ranks the p it makes."""
    if se is None or c.se is None or not c.terms:
        return c
    return _interval(replace(c, test_set_se=se, test_images=images))


def read_as(comparisons: Sequence[Comparison], reading: str) -> list[Comparison]:
    """The family's comparisons with the reading its no-calls get from the job's positive control (not called, the
    wrong way round, or none run). Every call Holm made stands."""
    return [replace(c, adjustment=replace(c.adjustment, reading=reading)) if c.adjustment is not None else c
            for c in comparisons]


def find(comparisons: Sequence[Comparison], a: str, b: str, metric: str) -> Comparison | None:
    """A vs B on `metric` among `comparisons`, read from A's side (reversed where it was made as B vs A); None when
    none of them compares the two."""
    for c in comparisons:
        if c.metric == metric and (c.a, c.b) == (a, b):
            return c
        if c.metric == metric and (c.b, c.a) == (a, b):
            return c.reversed()
    return None


def adjust(comparisons: Sequence[Comparison], family: str, *, alpha: float = 1.0 - LEVEL) -> list[Comparison]:
    """The family's comparisons, each with its Holm `Adjustment` (same order). Holm's step-down method: sort the
    raw p ascending, reject the k-th while p_(k) <= alpha / (m - k + 1), stop at the first that fails; the
    adjusted p is max_{j <= k} min(1, (m - j + 1) p_(j)). Comparisons without an interval count in m and rank
    last (p taken as 1)."""
    m = len(comparisons)
    if not m:
        return []
    from statsmodels.stats.multitest import multipletests  # here: it imports pandas

    raw = np.array([1.0 if c.p_value is None else c.p_value for c in comparisons])
    reject, adjusted_p, _, _ = multipletests(raw, alpha=alpha, method="holm")  # statsmodels: the decision and p
    # the step each comparison's interval is set at: its rank, or the rank of the first that failed (ties, and the
    # comparisons without an interval, keep the family's order: the same ranks wherever it is rebuilt)
    order = sorted(range(m), key=lambda i: (comparisons[i].p_value is None, raw[i], i))
    failed_at = next((k for k, i in enumerate(order, start=1) if not reject[i]), None)
    out: list[Comparison | None] = [None] * m
    for k, i in enumerate(order, start=1):
        c = comparisons[i]
        step_alpha = alpha / (m - (k if failed_at is None or k < failed_at else failed_at) + 1)
        interval = None
        if c.se is not None and c.df is not None:
            half = t_quantile(1.0 - step_alpha / 2.0, c.df) * c.se
            interval = (c.delta - half, c.delta + half)
        adj = Adjustment(HOLM, family, m, k, step_alpha, interval, None if c.p_value is None else float(adjusted_p[i]))
        not_called = interval is not None and interval[0] <= 0.0 <= interval[1]
        # the power to plan a rerun by is at the level that decides the call (a raw p of 0.03 in a family of 5
        # needs more units, not none)
        needed = _units_needed(c, step_alpha) if not_called else None
        out[i] = replace(c, adjustment=adj, units_needed=needed)
    return out  # type: ignore[return-value]


# ---- Student's t: scipy.stats (what a reviewer checks the numbers against) ----------------------------------------

def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` (> 0, not necessarily integer) degrees of freedom, p in (0.5, 1)."""
    if not 0.5 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile: need 0.5 < p < 1 and df > 0, got p={p}, df={df}")
    import scipy.stats

    return float(scipy.stats.t.ppf(p, df))
