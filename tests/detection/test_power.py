"""detection.report.power: the MDE by simulating Welch's test with the sds' uncertainty carried -- statsmodels'
TTestIndPower where the sds are known (many units), larger where they rest on 3 units, monotone in the level and the
units, seeded, and with a test-set part that more units cannot shrink."""

import math

import pytest
from statsmodels.stats.power import TTestIndPower

from detection.report.power import simulated_mde, units_for


@pytest.mark.parametrize("n", [60, 200])
def test_at_many_units_the_simulated_mde_is_statsmodels_exact_power(n):
    p = simulated_mde([(1.0, 1.0, n), (-1.0, 1.0, n)], 0.05)
    exact = TTestIndPower().solve_power(nobs1=n, alpha=0.05, power=0.8, ratio=1.0)  # in sds of a unit mean
    assert p.mde == pytest.approx(exact, rel=0.03)
    assert p.mc_interval[0] < p.mde < p.mc_interval[1] and p.mc_error < 0.02 * p.mde


def test_at_three_units_the_simulation_is_larger_than_the_closed_form_and_statsmodels():
    """An sd measured on 3 unit means may be twice the truth or half of it: the power averaged over that is below
    80% at the closed form's MDE, so the simulated MDE is larger than either the closed form or statsmodels' (which
    takes the sd as known)."""
    from detection.report.comparison import t_quantile

    p = simulated_mde([(1.0, 1.0, 3), (-1.0, 1.0, 3)], 0.05)
    se, df = math.sqrt(2.0 / 3.0), 4.0
    closed = (t_quantile(0.975, df) + t_quantile(0.8, df)) * se
    exact = TTestIndPower().solve_power(nobs1=3, alpha=0.05, power=0.8, ratio=1.0)
    assert p.mde > 1.5 * max(closed, exact)


def test_the_mde_shrinks_with_units_grows_with_the_level_and_is_the_same_wherever_recomputed():
    terms = [(1.0, 4.0, 5), (-1.0, 1.0, 5)]
    at = {k: simulated_mde(terms, 0.05, units=k).mde for k in (3, 5, 10, 40)}
    assert at[3] > at[5] > at[10] > at[40]
    assert simulated_mde(terms, 0.0125).mde > simulated_mde(terms, 0.05).mde  # a Holm step of 4
    assert simulated_mde(list(terms), 0.05).mde == simulated_mde(tuple(terms), 0.05).mde  # seeded


def test_a_test_set_part_sets_a_floor_more_units_do_not_pass():
    terms = [(1.0, 1.0, 5), (-1.0, 1.0, 5)]
    assert simulated_mde(terms, 0.05, fixed=1.0).mde > simulated_mde(terms, 0.05).mde
    floor = (1.96 + 0.84) * 1.0  # the test set's SE alone, known
    assert simulated_mde(terms, 0.05, units=1000, fixed=1.0).mde == pytest.approx(floor, rel=0.05)
    assert units_for(terms, 0.9 * floor, 0.05, fixed=1.0) is None
    k = units_for(terms, 2.0, 0.05)
    assert simulated_mde(terms, 0.05, units=k).mde <= 2.0 < simulated_mde(terms, 0.05, units=k - 1).mde


def test_fewer_than_two_units_or_no_spread_has_no_mde():
    assert simulated_mde([(1.0, 1.0, 1), (-1.0, 1.0, 3)], 0.05) is None
    assert simulated_mde([(1.0, 0.0, 3), (-1.0, 0.0, 3)], 0.05) is None
    assert units_for([(1.0, 1.0, 3), (-1.0, 1.0, 3)], 0.0, 0.05) is None
