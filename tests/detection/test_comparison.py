"""detection.report.comparison: the one statistic behind every call -- Welch's t over the units that vary the
backbone (pretraining runs, detection runs nested under them), P(A > B), the units a call would need -- checked
against hand arithmetic, Student's t table values, and the two converged runs the README compares."""

import math
import statistics

import pytest

from detection.report.comparison import compare, spread, t_quantile


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
    assert c.p_a_better == 1.0 and "no call: the interval includes 0; about" in c.describe()


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


def test_units_needed_is_for_80_percent_power():
    """k units per group such that (t(0.975, df_k) + t(0.8, df_k)) * se_k < |Δ|, and not k - 1."""
    a, b = {0: [10.0], 1: [12.0]}, {0: [9.0], 1: [10.0]}
    c = compare("AP", "a", a, "run", "b", b, "run")
    var_a, var_b = statistics.variance([10.0, 12.0]), statistics.variance([9.0, 10.0])

    def separates(k):
        va, vb = var_a / k, var_b / k
        df = (va + vb) ** 2 / (va**2 / (k - 1) + vb**2 / (k - 1))
        return (t_quantile(0.975, df) + t_quantile(0.8, df)) * math.sqrt(va + vb) < 1.5

    assert c.call is None and separates(c.units_needed) and not separates(c.units_needed - 1)
    assert "(80% power)" in c.describe()


def test_higher_is_better_false_names_the_lower_error():
    c = compare("training error", "deep", {0: [40.0], 1: [41.0]}, "run", "shallow", {0: [20.0], 1: [21.0]}, "run",
                higher_is_better=False)
    assert c.delta == 20.0 and c.call == "shallow" and "shallow ahead (lower training error)" in c.describe()
