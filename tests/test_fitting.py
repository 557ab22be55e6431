"""Tests of transformer_pde.fitting: power laws y = C x^p on log-log data."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from transformer_pde.fitting import PowerLawFit, fit_power_law


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(p=st.floats(min_value=-4.0, max_value=4.0),
       logC=st.floats(min_value=-10.0, max_value=10.0),
       size=st.integers(min_value=2, max_value=12))
def test_exact_power_law_is_recovered(p, logC, size):
    x = np.geomspace(0.5, 300.0, size)
    C = float(np.exp(logC))
    fit = fit_power_law(x, C * x**p)
    assert isinstance(fit, PowerLawFit)
    assert abs(fit.exponent - p) < 1e-9
    assert abs(np.log(fit.prefactor) - logC) < 1e-8
    assert fit.stderr < 1e-8
    np.testing.assert_allclose(fit(x), C * x**p, rtol=1e-7)


def test_two_points_give_the_secant_and_zero_stderr():
    fit = fit_power_law([2.0, 8.0], [3.0, 48.0])  # 48/3 = 16 = 4^2
    assert fit.exponent == pytest.approx(2.0, abs=1e-13)
    assert fit.prefactor == pytest.approx(0.75, rel=1e-13)
    assert fit.stderr == 0.0


def test_accepts_any_array_layout():
    x = np.geomspace(1, 100, 6).reshape(2, 3)
    fit = fit_power_law(x.tolist(), (5 * x**-0.5).tolist())
    assert fit.exponent == pytest.approx(-0.5, abs=1e-12)


def test_noisy_power_law_matches_linregress_and_is_within_stderr():
    rng = np.random.default_rng(17)
    hits = 0
    trials = 200
    p_true = -1.0
    for _ in range(trials):
        x = np.geomspace(1.0, 1e3, 12)
        y = 2.5 * x**p_true * np.exp(0.2 * rng.normal(size=x.size))
        fit = fit_power_law(x, y)
        ref = stats.linregress(np.log(x), np.log(y))
        assert fit.exponent == pytest.approx(ref.slope, rel=1e-10)
        assert fit.prefactor == pytest.approx(np.exp(ref.intercept), rel=1e-10)
        assert fit.stderr == pytest.approx(ref.stderr, rel=1e-8)
        hits += abs(fit.exponent - p_true) <= fit.stderr
    # |p_hat - p| / stderr follows Student's t with 10 dof: P(|t| <= 1) = 0.659; with 200
    # draws the frequency has standard deviation 0.034, so [0.55, 0.77] is a 3-sigma band.
    assert 0.55 <= hits / trials <= 0.77
    assert stats.t.cdf(1, df=10) - stats.t.cdf(-1, df=10) == pytest.approx(0.659, abs=1e-3)


def test_stderr_is_the_least_squares_formula():
    x = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    y = np.array([1.1, 1.9, 4.3, 7.6, 16.9])
    lx, ly = np.log(x), np.log(y)
    G = np.column_stack([lx, np.ones_like(lx)])
    coef, res, *_ = np.linalg.lstsq(G, ly, rcond=None)
    sigma2 = res[0] / (x.size - 2)
    cov = sigma2 * np.linalg.inv(G.T @ G)
    fit = fit_power_law(x, y)
    assert fit.exponent == pytest.approx(coef[0], rel=1e-12)
    assert fit.stderr == pytest.approx(np.sqrt(cov[0, 0]), rel=1e-10)


@pytest.mark.parametrize(("x", "y", "name"), [
    ([1.0, 2.0, 3.0], [1.0, 2.0], "x and y"),
    ([1.0], [1.0], "x and y"),
    ([], [], "x and y"),
    ([0.0, 1.0, 2.0], [1.0, 2.0, 3.0], "x"),
    ([-1.0, 1.0, 2.0], [1.0, 2.0, 3.0], "x"),
    ([np.nan, 1.0, 2.0], [1.0, 2.0, 3.0], "x"),
    ([1.0, 2.0, 3.0], [1.0, 0.0, 3.0], "y"),
    ([1.0, 2.0, 3.0], [1.0, np.inf, 3.0], "y"),
    ([1.0, 2.0, 3.0], [1.0, -2.0, 3.0], "y"),
    ([2.0, 2.0, 2.0], [1.0, 2.0, 3.0], "x"),
])
def test_bad_inputs_raise(x, y, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        fit_power_law(x, y)


# ---------------------------------------------------------------------------------------
# jackknife_exponent
# ---------------------------------------------------------------------------------------

def test_jackknife_matches_a_loop_and_the_closed_form():
    from transformer_pde.fitting import jackknife_exponent

    rng = np.random.default_rng(3)
    x = np.array([10.0, 14, 20, 28, 40, 56, 80])
    Y = 3.0 * x**0.3 * np.exp(0.2 * rng.normal(size=(7, x.size)))
    jk = jackknife_exponent(x, Y)
    # reference: pooled fit by lstsq, leave-one-out by an explicit loop
    lx, ly = np.log(np.tile(x, 7)), np.log(Y).ravel()
    full = np.polyfit(lx, ly, 1)[0]
    loo = []
    for s in range(7):
        rows = [r for r in range(7) if r != s]
        loo.append(np.polyfit(np.log(np.tile(x, 6)), np.log(Y[rows]).ravel(), 1)[0])
    loo = np.array(loo)
    se = np.sqrt(6 / 7 * np.sum((loo - loo.mean()) ** 2))
    assert jk.exponent == pytest.approx(full, rel=1e-12)
    np.testing.assert_allclose(jk.leave_one_out, loo, rtol=1e-12)
    assert jk.stderr == pytest.approx(se, rel=1e-10)
    # same abscissae in every row: pooled slope = mean of row slopes, se = sd / sqrt(S)
    rows = np.array([np.polyfit(np.log(x), np.log(y), 1)[0] for y in Y])
    assert jk.exponent == pytest.approx(rows.mean(), rel=1e-12)
    assert jk.stderr == pytest.approx(rows.std(ddof=1) / np.sqrt(7), rel=1e-10)


def test_jackknife_of_exact_power_laws_is_zero_and_covers_the_truth():
    from transformer_pde.fitting import jackknife_exponent

    x = np.geomspace(2, 100, 6)
    Y = np.array([c * x**0.25 for c in (1.0, 2.0, 5.0)])  # prefactors differ, exponent not
    jk = jackknife_exponent(x, Y)
    assert jk.exponent == pytest.approx(0.25, abs=1e-12) and jk.stderr < 1e-12
    # Monte Carlo: the +-2 se interval covers the true exponent with the probability of
    # |t| <= 2 for Student's t with S - 1 = 9 dof, 0.923 (300 draws: sd 0.015, 3-sigma band)
    rng = np.random.default_rng(11)
    hits = 0
    for _ in range(300):
        jk = jackknife_exponent(x, x**0.25 * np.exp(0.3 * rng.normal(size=(10, 6))))
        hits += abs(jk.exponent - 0.25) <= 2 * jk.stderr
    assert 0.923 - 0.045 <= hits / 300 <= 0.923 + 0.045
    assert stats.t.cdf(2, df=9) - stats.t.cdf(-2, df=9) == pytest.approx(0.923, abs=1e-3)


@pytest.mark.parametrize(("x", "Y", "name"), [
    ([1.0], np.ones((3, 1)), "x"),
    (np.ones((2, 2)), np.ones((3, 2)), "x"),
    ([1.0, 2.0], np.ones((3, 3)), "Y"),
    ([1.0, 2.0], np.ones((1, 2)), "Y"),
    ([1.0, 2.0], np.ones(2), "Y"),
    ([1.0, 2.0], -np.ones((3, 2)), "y"),
])
def test_jackknife_bad_inputs_raise(x, Y, name):
    from transformer_pde.fitting import jackknife_exponent

    with pytest.raises(ValueError, match=rf"^{name}\b"):
        jackknife_exponent(x, Y)
