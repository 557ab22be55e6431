"""Tests of the rate estimators (transformer_pde.rates)."""

import numpy as np
import pytest
from transformer_pde import rates


def test_jackknife_exponent_matches_explicit_leave_one_out_loop():
    rng = np.random.default_rng(0)
    x = np.array([10.0, 20.0, 40.0, 80.0, 160.0])
    Y = x[:, None] ** -0.5 * np.exp(0.1 * rng.standard_normal((5, 6)))
    fit = rates.jackknife_exponent(x, Y)
    # independent reference: slopes by explicit polyfit on log-log, loop over left-out columns
    full = np.polyfit(np.log(x), np.log(Y.mean(axis=1)), 1)[0]
    loo = []
    for j in range(6):
        keep = [k for k in range(6) if k != j]
        loo.append(np.polyfit(np.log(x), np.log(Y[:, keep].mean(axis=1)), 1)[0])
    loo = np.array(loo)
    se = np.sqrt(5 / 6 * np.sum((loo - loo.mean()) ** 2))
    assert fit.exponent == pytest.approx(full, rel=1e-12)
    assert fit.stderr == pytest.approx(se, rel=1e-12)


def test_jackknife_exponent_exact_power_law_has_zero_error_and_transform_applies():
    x = np.array([1.0, 2.0, 4.0, 8.0])
    Y = np.repeat((3.0 * x**-1.0)[:, None], 4, axis=1)  # squared errors ~ x^-1
    fit = rates.jackknife_exponent(x, Y, transform=np.sqrt)
    assert fit.exponent == pytest.approx(-0.5, abs=1e-12)
    assert fit.stderr == pytest.approx(0.0, abs=1e-12)


def test_jackknife_error_shrinks_like_one_over_sqrt_replicates():
    # Monte Carlo: the jackknife error of the slope estimated from m replicates ~ m^(-1/2)
    rng = np.random.default_rng(1)
    x = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    ses = []
    for m in (8, 128):
        Y = x[:, None] ** 0.5 * np.exp(0.3 * rng.standard_normal((5, m)))
        ses.append(rates.jackknife_exponent(x, Y).stderr)
    assert 2.5 < ses[0] / ses[1] < 6.5  # sqrt(16) = 4


def test_jackknife_bad_inputs():
    with pytest.raises(ValueError, match="replicates"):
        rates.jackknife_exponent([1.0, 2.0], np.ones((3, 4)))
    with pytest.raises(ValueError, match="at least 2 replicates"):
        rates.jackknife_exponent([1.0, 2.0], np.ones((2, 1)))


def test_decay_rate_recovers_an_exponential_in_its_window():
    t = np.linspace(0.0, 60.0, 601)
    delta = 2.0 * np.exp(-0.5 * t)
    delta[t > 40] = 1e-12  # noise floor: must be excluded by `low`
    assert rates.decay_rate(t, delta) == pytest.approx(0.5, rel=1e-10)
    assert np.isnan(rates.decay_rate(t, np.ones_like(t)))  # never below `high`


def test_decay_rate_and_first_time_bad_inputs():
    t = np.linspace(0.0, 1.0, 5)
    with pytest.raises(ValueError, match="low < high"):
        rates.decay_rate(t, np.ones(5), high=1e-8, low=1e-4)
    with pytest.raises(ValueError, match="increasing"):
        rates.first_time_below(t[::-1], np.ones(5), 0.5)
    with pytest.raises(ValueError, match="same length"):
        rates.first_time_below(t, np.ones(4), 0.5)


def test_first_time_below():
    t = np.array([0.0, 1.0, 2.0, 3.0])
    assert rates.first_time_below(t, [5.0, 2.0, 0.5, 0.1], 1.0) == 2.0
    assert rates.first_time_below(t, [5.0, 2.0, 1.5, 1.1], 1.0) == float("inf")
