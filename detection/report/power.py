"""The power of a comparison, by simulating the test the job runs: its minimum detectable effect (MDE) and the units
a rerun would need.

The closed form (t(1 - alpha/2, df) + t(0.8, df)) x SE treats each group's sd, estimated from 2-5 unit means, as
the truth, and Welch's df as fixed: at 3 units a group it states an MDE at which the test has ~60-75% power with the
sds known, and ~45% averaged over the sds 3 unit means allow (60% at 5). Here the test itself is simulated, seeded
(numpy's Generator), DRAWS times:

1. each group's true variance of unit means is drawn from what its measured one allows -- sigma^2 = s^2 (n - 1) /
   chi^2(n - 1), n the units it was measured on (the sd's fiducial distribution: its uncertainty carried, so the power
   is the power averaged over the sds the measurement is compatible with);
2. a job with `units` per group is run under it: each group's mean of unit means (normal) and sample variance
   (sigma^2 chi^2(k - 1) / (k - 1)), the part that does not shrink with units (the test set's, `fixed`: a variance
   taken as known) added to the SE, Satterthwaite's df of the units alone (comparison._interval's rule), and the
   two-sided level-alpha critical value c;
3. the job calls a true difference D the right way round when D + e > c SE, e its noise: so the power at D is the
   share of draws with c SE - e < D, and the MDE -- the smallest D called with 80% power -- is the 0.8-quantile of
   c SE - e over the draws. Its Monte-Carlo error is the order-statistics interval around that quantile.

"80% power" is therefore an assurance: the power averaged over the sds the measurement allows, which at 3 units is
dominated by the draws where the true sd is several times the measured one. At many units a group this is
statsmodels' TTestIndPower (tests/detection/test_power.py); at 3 it is larger, as it must be. The draws are common
to every D and seeded: the same terms give the same MDE wherever they are recomputed. Across unit counts they are not
(numpy draws chi^2(k - 1) from another part of its stream for each k), so the MDE falls with k only up to its
Monte-Carlo error, and `units_for` can answer a unit or two above the fewest.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Power", "simulated_mde", "units_for", "DRAWS", "POWER", "MAX_UNITS"]

POWER = 0.8
DRAWS = 20_000
SEED = 0
MAX_UNITS = 1000  # the largest rerun units_for searches


@dataclass(frozen=True)
class Power:
    """A comparison's simulated resolution."""

    mde: float  # the smallest true |difference| called the right way round with 80% power
    mc_interval: tuple[float, float]  # the MDE's 95% Monte-Carlo interval (order statistics of the draws)
    draws: int
    units: tuple[int, ...]  # the units per group simulated

    @property
    def mc_error(self) -> float:
        """Half the Monte-Carlo interval's width: how far another seed could move the MDE."""
        return (self.mc_interval[1] - self.mc_interval[0]) / 2.0


Terms = Sequence[tuple[float, float, int]]  # (weight, variance of the group's unit means, units it was measured on)


def simulated_mde(terms: Terms, alpha: float, *, units: int | Sequence[int] | None = None,
                  fixed: float | None = None, draws: int = DRAWS, seed: int = SEED) -> Power | None:
    """The simulated MDE of the contrast sum(weight x mean) at two-sided level `alpha`: each group with `units` unit
    means (one number for every group, one per group, or None: the units each was measured on); `fixed`: the
    variance of a part of the contrast that more units do not shrink (the test set's), or None. None when a group was
    measured or is simulated on fewer than 2 units, or no group has a spread."""
    key = tuple((float(w), float(v), int(n)) for w, v, n in terms)
    if units is None:
        ks = tuple(n for _, _, n in key)
    else:
        ks = (int(units),) * len(key) if isinstance(units, int) else tuple(int(k) for k in units)
    if not key or len(ks) != len(key) or min(n for _, _, n in key) < 2 or min(ks) < 2:
        return None
    if all(v <= 0.0 for _, v, _ in key) and not (fixed and fixed > 0.0):
        return None
    return _simulate(key, float(alpha), ks, None if fixed is None else float(fixed), draws, seed)


@functools.lru_cache(maxsize=4096)
def _simulate(terms: tuple[tuple[float, float, int], ...], alpha: float, units: tuple[int, ...],
              fixed: float | None, draws: int, seed: int) -> Power:
    import scipy.stats  # here, not at import: what every tool importing the report would pay

    rng = np.random.default_rng(seed)
    noise = np.zeros(draws)  # e: the contrast's estimate minus the truth
    parts, part_dfs, ks = [], [], []
    for (w, var, n), k in zip(terms, units):
        sigma2 = var * (n - 1) / rng.chisquare(n - 1, draws)  # the true variance the measured one allows
        noise += w * rng.normal(0.0, 1.0, draws) * np.sqrt(sigma2 / k)
        s2 = sigma2 * rng.chisquare(k - 1, draws) / (k - 1)  # what the simulated job measures
        parts.append(w * w * s2 / k)
        part_dfs.append(k - 1)
        ks.append(k)
    units_total = np.sum(parts, axis=0)
    denominator = np.sum([p * p / d for p, d in zip(parts, part_dfs)], axis=0)
    df = np.divide(units_total * units_total, denominator, out=np.full(draws, float(sum(ks) - len(ks))),
                   where=denominator > 0.0)  # the units' df alone: the test set's part never raises it
    if fixed is not None and fixed > 0.0:
        noise += rng.normal(0.0, math.sqrt(fixed), draws)
    se = np.sqrt(units_total + (fixed or 0.0))
    threshold = np.sort(scipy.stats.t.ppf(1.0 - alpha / 2.0, df) * se - noise)
    q = POWER * draws
    half = 1.959964 * math.sqrt(draws * POWER * (1.0 - POWER))
    lo, mid, hi = (int(min(draws - 1, max(0, math.ceil(x) - 1))) for x in (q - half, q, q + half))
    return Power(float(threshold[mid]), (float(threshold[lo]), float(threshold[hi])), draws, tuple(ks))


def units_for(terms: Terms, target: float, alpha: float, *, fixed: float | None = None) -> int | None:
    """The fewest units per group (2..MAX_UNITS) at which the simulated MDE is at most `target`; None for a target
    of 0, beyond the search, or without a spread."""
    if not target > 0.0:
        return None

    def small_enough(k: int) -> bool | None:
        p = simulated_mde(terms, alpha, units=k, fixed=fixed)
        return None if p is None else p.mde <= target

    first = small_enough(2)
    if first is None:
        return None
    if first:
        return 2
    lo, hi = 2, 4  # small_enough(lo) is False; find an hi that is True, then bisect
    while not small_enough(hi):
        if hi >= MAX_UNITS:
            return None
        lo, hi = hi, min(2 * hi, MAX_UNITS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if small_enough(mid) else (mid, hi)
    return hi
