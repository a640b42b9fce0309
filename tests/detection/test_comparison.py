"""detection.report.comparison: the one statistic behind every call -- Welch's t over the units that vary the
backbone (pretraining runs, detection runs nested under them), P(A > B) over units, the units a call would need,
Holm's adjustment over a job's family, the depth x shortcut interaction contrast and TOST equivalence -- checked
against hand arithmetic, Student's t table values, and the two converged runs the README compares."""

import math
import statistics
from dataclasses import replace

import pytest

from detection.report.comparison import HOLM, _units_needed, adjust, compare, contrast, spread, t_quantile
from detection.report.power import simulated_mde


@pytest.mark.parametrize("df, value", [(1, 12.7062), (2, 4.3027), (3, 3.1824), (10, 2.2281), (30, 2.0423),
                                       (1000, 1.9623)])
def test_t_quantile_matches_the_table(df, value):
    assert t_quantile(0.975, df) == pytest.approx(value, abs=1e-4)


def test_the_interval_is_welchs_t_over_unit_means_not_over_runs():
    """Two pretraining runs per group, two detection runs under each: the interval is over the 2 unit means (df
    from Welch-Satterthwaite), not over the 4 runs as if they were independent."""
    a = {"p0": [80.0, 82.0], "p1": [70.0, 72.0]}
    b = {"p0": [60.0, 61.0], "p1": [66.0, 65.0]}
    c = compare("AP50", "A", a, "pretraining run", "B", b, "pretraining run")
    ma, mb = [81.0, 71.0], [60.5, 65.5]
    va, vb = statistics.variance(ma) / 2, statistics.variance(mb) / 2
    df = (va + vb) ** 2 / (va**2 + vb**2)
    half = t_quantile(0.975, df) * math.sqrt(va + vb)
    assert c.delta == pytest.approx(13.0) and c.df == pytest.approx(df)
    assert c.interval == pytest.approx((13.0 - half, 13.0 + half))
    assert c.units == (2, 2) and c.runs == (4, 4) and c.call is None  # 13 points, yet 2 units each: no call
    assert c.units_needed is not None and c.units_needed > 2
    # the runs as if independent would have called it: the nesting is what keeps the call honest
    flat = compare("AP50", "A", {i: [v] for i, v in enumerate(sum(a.values(), []))}, "run",
                   "B", {i: [v] for i, v in enumerate(sum(b.values(), []))}, "run")
    assert flat.call == "A"
    assert c.p_a_better == 1.0 and "no call: the interval includes 0; the smallest difference it could call is " \
        f"{c.mde:.2f} (80% power at its 5% level, 20,000 simulated jobs" in c.describe()


def test_a_group_of_one_unit_gets_no_interval_and_no_call_but_p_of_improvement():
    c = compare("AP50", "pre", {"p0": [90.0], "p1": [92.0]}, "pretraining run", "scratch", {"s": [20.0]}, "run")
    assert c.interval is None and c.call is None and c.p_a_better == 1.0
    assert c.why_no_interval.startswith("scratch has one run") and "P(A > B) 1.00" in c.describe()


def test_equal_groups_and_missing_values():
    c = compare("AP", "a", {0: [1.0], 1: [2.0]}, "run", "b", {0: [1.0], 1: [2.0]}, "run")
    assert c.delta == 0.0 and c.call is None and c.units_needed is None and c.p_a_better == 0.5
    assert compare("AP", "a", {0: [float("nan")]}, "run", "b", {0: [1.0]}, "run") is None
    s = spread({"p0": [80.0, 82.0], "p1": [70.0, 72.0]}, "pretraining run")
    assert s.mean == 76.0 and s.units == 2 and s.runs == 4 and s.sd_within == pytest.approx(math.sqrt(2.0))
    assert s.sd_between == pytest.approx(statistics.stdev([81.0, 71.0]))


def _units(mean: float, sd_between: float) -> dict:
    """Two unit means with this mean and sd (what the README's summaries report per group)."""
    d = sd_between / math.sqrt(2)
    return {"p0": [mean + d], "p1": [mean - d]}


@pytest.mark.parametrize("commit, r101, vgg, old_rule_call", [
    ("4bfdc08", (94.2, 0.2), (94.7, 0.5), False),  # ΔAP50 -0.51 "within seed spread (±1.06)"
    ("d8d6e8a", (93.7, 0.5), (95.7, 0.1), True),  # ΔAP50 -2.02 "beyond the spread (±1.04)"
])
def test_the_converged_runs_get_the_same_ap50_call_at_either_floating_point_order(commit, r101, vgg, old_rule_call):
    """The two converged runs differ only in the rounding of the detection legs; the old rule (|Δ| over sqrt(sd_a²
    + sd_b²) of all 4 runs) called AP50 in one and not the other. Over the 2 pretraining runs neither is a call."""
    c = compare("AP50", "resnet101", _units(*r101), "pretraining run", "vgg16_bn", _units(*vgg), "pretraining run")
    assert c.call is None and c.interval[0] < 0 < c.interval[1], commit
    assert c.units_needed >= 3


def test_identical_unit_means_give_no_interval_rather_than_a_zero_width_call():
    """A quantised metric can repeat exactly: a zero-width interval would call a 0.1-point difference."""
    c = compare("AP50", "A", {0: [50.0], 1: [50.0]}, "run", "B", {0: [49.9], 1: [49.9]}, "run")
    assert c.interval is None and c.call is None and "identical" in c.why_no_interval
    assert spread({0: [50.0], 1: [50.0]}, "run").interval is None


def test_units_needed_is_the_fewest_units_whose_simulated_mde_reaches_the_observed_difference():
    """k units per group such that the simulated MDE at k (power.py, the groups' measured spreads) is at most |Δ|,
    and not at k - 1."""
    a, b = {0: [10.0], 1: [12.0], 2: [11.0]}, {0: [9.0], 1: [10.0], 2: [9.0]}
    c = compare("AP", "a", a, "run", "b", b, "run")
    terms = [(1.0, statistics.variance([10.0, 12.0, 11.0]), 3), (-1.0, statistics.variance([9.0, 10.0, 9.0]), 3)]
    assert c.call is None and [x for t in c.terms for x in t] == pytest.approx([x for t in terms for x in t])

    def separates(k):
        return simulated_mde(terms, 0.05, units=k).mde <= abs(c.delta)

    assert separates(c.units_needed) and not separates(c.units_needed - 1)
    assert "(80% power)" in c.describe()


def test_higher_is_better_false_names_the_lower_error():
    c = compare("training error", "deep", {0: [40.0], 1: [41.0]}, "run", "shallow", {0: [20.0], 1: [21.0]}, "run",
                higher_is_better=False)
    assert c.delta == 20.0 and c.call == "shallow" and "shallow ahead (lower training error)" in c.describe()


def test_p_of_improvement_counts_units_not_nested_runs():
    """Two pretraining runs, one with 3 detection runs above B, one with 1 below: over run pairs 3/4 beat B, over
    units (what varies the backbone) 1 of 2."""
    c = compare("AP50", "A", {"p0": [90.0, 91.0, 92.0], "p1": [10.0]}, "pretraining run",
                "B", {"s0": [50.0], "s1": [50.0]}, "run")
    assert c.p_a_better == 0.5


def _called(delta: float, sd: float, n: int = 3) -> dict:
    return {i: [delta + sd * x] for i, x in enumerate((-1.0, 0.0, 1.0)[:n])}


def test_p_value_and_interval_agree():
    """The two-sided Welch p is below 0.05 exactly when the 95% interval excludes 0."""
    for delta in (0.5, 2.0, 3.0, 5.0):
        c = compare("AP", "a", _called(delta, 1.0), "run", "b", _called(0.0, 1.0), "run")
        assert (c.p_value < 0.05) == (c.interval[0] > 0), delta


def test_holm_adjusts_a_family_step_down_and_its_intervals_agree_with_its_calls():
    """Raw p of about 0.002, 0.017, 0.033 in a family of 4 (the 4th without an interval): Holm rejects the first
    (<= 0.05/4), stops at the second (> 0.05/3); adjusted p about 0.007, 0.052, 0.067 (monotone), the 4th is never
    called. Each adjusted interval excludes 0 exactly when the call is made."""
    b = _called(0.0, 1.0)
    raw = [compare("AP", f"a{i}", _called(d, 1.0), "run", "b", b, "run") for i, d in enumerate((6.0, 3.2, 2.6))]
    ps = [c.p_value for c in raw]
    assert ps == sorted(ps)
    one = compare("AP", "single", {0: [9.0]}, "run", "b", b, "run")
    fam = adjust([raw[2], one, raw[0], raw[1]], "test family")  # order is kept
    assert [c.a for c in fam] == ["a2", "single", "a0", "a1"]
    by = {c.a: c for c in fam}
    m = 4
    assert by["a0"].adjustment.p == pytest.approx(min(1, m * ps[0]))
    assert by["a1"].adjustment.p == pytest.approx(max(m * ps[0], (m - 1) * ps[1]))
    assert by["a2"].adjustment.p == pytest.approx(max(m * ps[0], (m - 1) * ps[1], (m - 2) * ps[2]))
    assert by["single"].adjustment.p is None and by["single"].call is None and by["single"].adjustment.rank == 4
    for c in fam:
        assert c.adjustment.method == HOLM and c.adjustment.size == m and c.adjustment.family == "test family"
        if c.adjustment.interval is not None:
            excludes = not c.adjustment.interval[0] <= 0 <= c.adjustment.interval[1]
            assert excludes == (c.adjustment.p < 0.05) == (c.call is not None), c.a
    assert by["a0"].adjustment.alpha == pytest.approx(0.05 / 4)
    # a raw 95% interval that excludes 0 is not a call once the family is adjusted
    assert raw[2].call == "a2" and by["a2"].call is None
    assert "Holm step-down over 4" in by["a2"].describe() and "family-adjusted interval includes 0" in \
        by["a2"].describe()


def test_holm_with_every_hypothesis_rejected_uses_each_step_level():
    b = _called(0.0, 0.1)
    fam = adjust([compare("AP", f"a{i}", _called(5.0 + i, 0.1), "run", "b", b, "run") for i in range(3)], "f")
    assert all(c.call is not None for c in fam)
    assert sorted(c.adjustment.alpha for c in fam) == pytest.approx([0.05 / 3, 0.05 / 2, 0.05])


def test_the_interaction_contrast_is_welch_over_four_groups():
    """(plain56 - plain20) - (res56 - res20): the variance is the sum of the four var/n, Satterthwaite's df."""
    p56, p20 = {0: [60.0], 1: [62.0], 2: [64.0]}, {0: [30.0], 1: [31.0], 2: [32.0]}
    r56, r20 = {0: [20.0], 1: [24.0], 2: [22.0]}, {0: [25.0], 1: [26.0], 2: [27.0]}
    c = contrast("training error", "plain 56 - 20", (p56, p20), "residual 56 - 20", (r56, r20), "run",
                 higher_is_better=False)
    assert c.delta == pytest.approx((62.0 - 31.0) - (22.0 - 26.0))
    parts = [statistics.variance(v) / 3 for v in ([60, 62, 64], [30, 31, 32], [20, 24, 22], [25, 26, 27])]
    df = sum(parts) ** 2 / sum(v * v / 2 for v in parts)
    assert c.se == pytest.approx(math.sqrt(sum(parts))) and c.df == pytest.approx(df)
    assert c.call == "residual 56 - 20"  # lower is better: depth costs plain nets more
    assert c.p_a_better == 1.0  # the higher value, as compare()
    assert c.units == (6, 6) and c.runs == (6, 6) and "n = 6 vs 6 runs, df" in c.describe()


def test_equivalence_needs_tost_inside_the_margin():
    """Two tight groups 0.1 apart are equivalent within 1 point, not within 0.05; a wide pair with no call is
    not equivalent (no call is not "the same")."""
    tight = compare("err", "a", _called(20.1, 0.1), "run", "b", _called(20.0, 0.1), "run")
    assert tight.equivalent(1.0) is True and tight.equivalent(0.05) is False
    wide = compare("err", "a", _called(20.5, 5.0), "run", "b", _called(20.0, 5.0), "run")
    assert wide.call is None and wide.equivalent(1.0) is False
    assert compare("err", "a", {0: [1.0]}, "run", "b", _called(1.0, 1.0), "run").equivalent(1.0) is None


def test_reversed_reads_the_same_comparison_from_the_other_side():
    c = adjust([compare("AP", "a", _called(3.0, 1.0), "pretraining run", "b", {0: [1.0], 1: [0.0]}, "run")], "f")[0]
    r = c.reversed()
    assert (r.a, r.b, r.unit_a, r.unit_b, r.units, r.runs) == ("b", "a", "run", "pretraining run", (2, 3), (2, 3))
    assert r.delta == -c.delta and r.interval == (-c.interval[1], -c.interval[0])
    assert r.adjustment.interval == (-c.adjustment.interval[1], -c.adjustment.interval[0])
    assert r.p_a_better == 1.0 - c.p_a_better and r.call == c.call
    assert str(compare("AP", "a", {0: [1.0]}, "run", "b", {0: [1.0]}, "run").reversed().delta) == "0.0"


def test_a_p_value_that_underflows_ranks_first_not_last():
    """A difference hundreds of standard errors wide has p ~ 0 (computed from the tail, not 1 - cdf): Holm ranks it
    first, and a second comparison with p 0.03 is then called at 0.05 / 1."""
    b = _called(0.0, 1.0)
    huge = compare("AP", "huge", _called(1e4, 1.0), "run", "b", b, "run")
    mid = compare("AP", "mid", {i: [v] for i, v in enumerate((2.3, 3.3, 4.3, 2.8, 3.8))}, "run",
                  "b", {i: [v] for i, v in enumerate((0.0, 1.0, -1.0, 0.5, -0.5))}, "run")
    assert huge.p_value < 1e-12 and 0.0 < huge.p_value and mid.p_value < 0.05
    fam = {c.a: c for c in adjust([mid, huge], "f")}
    assert fam["huge"].adjustment.rank == 1 and fam["mid"].adjustment.rank == 2
    assert fam["mid"].adjustment.p == pytest.approx(mid.p_value) and fam["mid"].call == "mid"


def test_ties_keep_the_family_order_so_every_rebuild_ranks_alike():
    one = compare("AP", "x", {0: [1.0]}, "run", "b", {0: [0.0]}, "run")
    other = compare("AP", "y", {0: [1.0]}, "run", "b", {0: [0.0]}, "run")
    assert [c.adjustment.rank for c in adjust([one, other], "f")] == [1, 2]
    assert [c.adjustment.rank for c in adjust([other, one], "f")] == [1, 2]


def test_units_needed_in_a_family_is_at_the_holm_level_not_missing_when_the_raw_interval_excludes_0():
    """The degradation block of RESULTS.md said "more than 1000 runs per group would be needed" for Δ +51 with a raw
    p of 0.028 that Holm over 5 did not call: the power search ran only when the 95% interval included 0. In a family
    it runs at the comparison's Holm level, and it is monotone in the level."""
    deep = compare("training error", "plain56", {0: [63.1], 1: [88.2], 2: [60.8]}, "run",
                   "plain20", {0: [20.2], 1: [19.7], 2: [18.6]}, "run", higher_is_better=False)
    others = [compare("x", f"a{i}", {0: [1.0], 1: [2.0], 2: [3.0]}, "run", f"b{i}", {0: [1.5], 1: [2.5], 2: [2.0]},
                      "run") for i in range(4)]
    assert deep.p_value < 0.05 and deep.call is not None and deep.units_needed is None  # called on its own
    adjusted = adjust([deep, *others], "five")[0]
    assert adjusted.call is None and adjusted.units_needed is not None and 3 < adjusted.units_needed < 20
    assert f"about {adjusted.units_needed} runs per group" in adjusted.describe()
    assert "more than 1000" not in adjusted.describe()
    assert adjusted.units_needed >= _units_needed(deep, 0.05)


def test_a_comparison_read_from_an_older_results_file_without_its_terms_claims_no_power():
    c = compare("AP50", "a", {0: [10.0], 1: [12.0]}, "run", "b", {0: [9.0], 1: [10.0]}, "run")
    old = replace(c, units_needed=None, terms=())
    assert "per group" not in old.describe() and "per group" in c.describe()


def test_every_comparison_recorded_in_results_is_what_the_statistic_computes_from_its_units():
    """Each comparison of each committed results/*.json, recomputed from its per-unit values and adjusted as its
    job's family (compare_jobs' recomputation): the recorded 95% interval, the family-adjusted interval, the raw and
    adjusted p and the call -- so a change of the statistic's numerics (scipy.stats / statsmodels for the
    hand-written t distribution and Holm) that moves any of them fails here, naming it."""
    import json

    from conftest import REPO
    from detection.main_job.compare import COMPARISON_KINDS, recomputed_family

    checked = 0
    for path in sorted((REPO / "results").glob("*.json")):
        res = json.loads(path.read_text())
        if not isinstance(res, dict):
            continue
        family = recomputed_family(res)
        for kind in COMPARISON_KINDS:
            for d in res.get(kind) or []:
                c = family.get((kind, d["metric"], d["a"], d["b"]))
                assert c is not None, f"{path.name}: {kind} {d['a']} vs {d['b']} not recomputed"
                where = f"{path.name}: {kind} {d['a']} vs {d['b']}"
                for got, want in ((c.interval, d["interval"]), (c.adjustment.interval, d["adjustment"]["interval"]),
                                  (c.p_value, d.get("p_value")), (c.adjustment.p, d["adjustment"].get("p"))):
                    assert (got is None) == (want is None), where
                    if got is not None:
                        assert got == pytest.approx(want, rel=1e-9, abs=1e-9), where
                vetoed = (d.get("adjustment") or {}).get("gate")  # written when a control withheld every call
                assert d["call"] is None if vetoed else c.call == d["call"], where
                checked += 1
    assert checked >= 20  # the committed jobs' families


def test_the_mde_is_the_simulated_one_at_the_deciding_level_and_grows_with_the_family():
    """The MDE of a no-call is power.py's simulation of the test at the comparison's level and measured spreads (its
    agreement with statsmodels is test_power's); a Holm step's level is stricter than 0.05, so in a family it grows,
    and the sentence says how it was found."""
    a = {i: [v] for i, v in enumerate([50.0, 52.0, 49.0, 51.0, 50.5, 49.5, 51.5, 48.5])}
    b = {i: [v] for i, v in enumerate([49.0, 51.0, 50.0, 50.5, 48.0, 49.5, 50.0, 51.0])}
    c = compare("AP", "A", a, "run", "B", b, "run")
    assert c.call is None and c.mde == simulated_mde(c.terms, 0.05).mde
    # independently of power.py's sufficient statistics: raw unit values, each group's sd drawn as the measurement
    # allows, scipy's Welch test; at the MDE it calls the difference the right way round 80% of the time
    import numpy as np
    import scipy.stats

    rng, n = np.random.default_rng(7), 8
    sd = [np.sqrt(var * (n - 1) / rng.chisquare(n - 1, 20_000)) for _, var, _ in c.terms]
    xa = rng.normal(c.mde, sd[0][:, None], (20_000, n))
    xb = rng.normal(0.0, sd[1][:, None], (20_000, n))
    t = scipy.stats.ttest_ind(xa, xb, axis=1, equal_var=False)
    assert np.mean((t.pvalue < 0.05) & (t.statistic > 0)) == pytest.approx(0.8, abs=0.015)
    in_family = adjust([c, replace(c, a="C")], "two")[0]
    assert in_family.mde > c.mde and f"the smallest difference it could see is {in_family.mde:.1f}" in \
        in_family.headline(nd=1)
    assert (f"the smallest difference it could call is {in_family.mde:.2f} (80% power at its 2.5% level, 20,000 "
            f"simulated jobs, Monte Carlo ±{in_family.power.mc_error:.2f})") in in_family.describe()
    assert compare("AP", "A", {0: [1.0]}, "run", "B", b, "run").mde is None  # one unit: no spread, no resolution


def test_the_headline_names_the_lower_error_as_such_with_a_positive_interval():
    """For an error (lower is better) the sentence says which net has the lower value and by how much, the interval
    of that gap positive; a difference below 1 gets two decimals, so a call never prints an interval touching 0."""
    c = compare("training error", "plain56", {s: [v] for s, v in enumerate((30.0, 31.0, 29.5))}, "run",
                "plain20", {s: [v] for s, v in enumerate((20.0, 20.5, 19.0))}, "run", higher_is_better=False)
    assert c.call == "plain20"
    lo, hi = c.interval  # plain56 minus plain20: positive, the gap plain20 is lower by
    assert lo > 0 and c.headline() == (f"plain20 has a lower training error than plain56, by {abs(c.delta):.1f} "
                                       f"[{lo:.1f}, {hi:.1f}] (95% CI; 3 vs 3 runs)")
    small = compare("AP", "a", {s: [v] for s, v in enumerate((10.3, 10.35, 10.32))}, "run",
                    "b", {s: [v] for s, v in enumerate((10.0, 10.02, 10.01))}, "run")
    assert small.call == "a" and small.headline().startswith(f"a is ahead of b by {small.delta:.2f} AP [")
