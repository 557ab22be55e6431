"""Tests of transformer_pde.fitting.jackknife_difference: two exponents on the same replicates."""

import numpy as np
import pytest
from scipy import stats
from transformer_pde.fitting import JackknifeDifference, jackknife_difference, jackknife_exponent


def _slope(x, Y):
    return np.polyfit(np.log(np.tile(x, Y.shape[0])), np.log(Y).ravel(), 1)[0]


def test_difference_matches_refits_by_an_explicit_loop():
    rng = np.random.default_rng(5)
    x = np.array([2.0, 4, 10, 16, 28, 50, 98])
    Y = 7.0 * x**0.3 * np.exp(0.1 * rng.normal(size=(10, x.size)))
    wide, narrow = x >= 2, x >= 16
    diff = jackknife_difference(jackknife_exponent(x[wide], Y[:, wide]),
                                jackknife_exponent(x[narrow], Y[:, narrow]))
    assert isinstance(diff, JackknifeDifference)
    # reference: every leave-one-out fit redone with np.polyfit on both windows
    loo = []
    for s in range(10):
        rows = np.delete(Y, s, axis=0)
        loo.append(_slope(x[narrow], rows[:, narrow]) - _slope(x[wide], rows[:, wide]))
    loo = np.array(loo)
    se = np.sqrt(9 / 10 * np.sum((loo - loo.mean()) ** 2))
    full = _slope(x[narrow], Y[:, narrow]) - _slope(x[wide], Y[:, wide])
    assert diff.difference == pytest.approx(full, rel=1e-11)
    assert diff.stderr == pytest.approx(se, rel=1e-10)


def test_exact_power_laws_give_the_exact_difference_and_no_error():
    x = np.geomspace(2, 100, 6)
    c = np.array([[1.0], [3.0], [0.5]])  # prefactors differ between replicates
    first = jackknife_exponent(x, c * x**0.25)
    second = jackknife_exponent(x, c * x**0.5)
    diff = jackknife_difference(first, second)
    assert diff.difference == pytest.approx(0.25, abs=1e-12)
    assert diff.stderr < 1e-12


def test_shared_replicates_make_the_error_of_the_difference_small():
    # the same noisy replicates measured twice, the second time with an extra exact factor
    # x^0.1: the difference is exactly 0.1 in every leave-one-out fit, so its error is zero,
    # while each exponent alone has an error of the size of the noise
    rng = np.random.default_rng(8)
    x = np.geomspace(2, 100, 7)
    Y = x**0.3 * np.exp(0.2 * rng.normal(size=(10, x.size)))
    first, second = jackknife_exponent(x, Y), jackknife_exponent(x, Y * x**0.1)
    diff = jackknife_difference(first, second)
    assert diff.difference == pytest.approx(0.1, abs=1e-12)
    assert diff.stderr < 1e-12 < 1e-3 < first.stderr


def test_coverage_of_independent_noise_matches_student():
    # independent noise on the two quantities: the +-2 se interval of the difference covers
    # the true 0.15 with the probability of |t| <= 2 for Student's t with 9 dof, 0.923 (400
    # draws: standard deviation 0.013, so +-0.04 is a 3-sigma band)
    rng = np.random.default_rng(13)
    x = np.geomspace(2, 100, 6)
    hits = 0
    for _ in range(400):
        a = jackknife_exponent(x, x**0.2 * np.exp(0.3 * rng.normal(size=(10, 6))))
        b = jackknife_exponent(x, x**0.35 * np.exp(0.3 * rng.normal(size=(10, 6))))
        diff = jackknife_difference(a, b)
        hits += abs(diff.difference - 0.15) <= 2 * diff.stderr
    assert 0.923 - 0.04 <= hits / 400 <= 0.923 + 0.04
    assert stats.t.cdf(2, df=9) - stats.t.cdf(-2, df=9) == pytest.approx(0.923, abs=1e-3)


def test_bad_inputs_raise():
    x = np.geomspace(2, 100, 4)
    three = jackknife_exponent(x, np.ones((3, 4)) * x)
    four = jackknife_exponent(x, np.ones((4, 4)) * x)
    with pytest.raises(ValueError, match=r"^second\b"):
        jackknife_difference(three, four)
    with pytest.raises(ValueError, match=r"^first\b"):
        jackknife_difference(0.3, four)
    with pytest.raises(ValueError, match=r"^second\b"):
        jackknife_difference(three, (0.3, 0.01))
