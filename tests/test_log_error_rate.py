"""Tests of transformer_pde.fitting.log_error_rate: the exponent of random errors from the logs
of every draw, against scipy.stats.linregress, its Student calibration on skewed and
heavy-tailed synthetic errors, and its power against the wrong rates a chapter rules out."""

import numpy as np
import pytest
from scipy import stats
from transformer_pde.fitting import LogErrorRate, log_error_rate
from transformer_pde.replicates import bonferroni_threshold

SIZES = np.array([25, 50, 100, 200, 400])


def _errors(rng, p, draws, law="chi2", sizes=SIZES):
    """Squared errors e = n^(2p) Z: Z a scaled chi^2 with 5 degrees of freedom (a Gaussian
    mean and covariance), or that times a Pareto factor of index 3 (heavy tails)."""
    Z = rng.chisquare(5, size=(len(sizes), draws)) / 5
    if law == "pareto":
        Z = Z * (1 + rng.pareto(3.0, size=Z.shape))
    return sizes[:, None] ** (2.0 * p) * Z


def test_matches_linregress_on_all_points():
    rng = np.random.default_rng(0)
    e = _errors(rng, -0.5, 7)
    fit = log_error_rate(SIZES, e)
    ref = stats.linregress(np.repeat(np.log(SIZES), 7), 0.5 * np.log(e.ravel()))
    assert isinstance(fit, LogErrorRate)
    assert fit.exponent == pytest.approx(ref.slope, rel=1e-12)
    assert fit.stderr == pytest.approx(ref.stderr, rel=1e-12)
    assert fit.dof == 5 * 7 - 2
    assert fit.z(-0.5) == pytest.approx((ref.slope + 0.5) / ref.stderr, rel=1e-12)
    # unequal numbers of draws per size
    ragged = [e[0], e[1, :3], e[2, :5], e[3], e[4, :2]]
    fit2 = log_error_rate(SIZES, ragged)
    x = np.concatenate([np.full(len(r), np.log(nk)) for nk, r in zip(SIZES, ragged, strict=True)])
    ref2 = stats.linregress(x, 0.5 * np.log(np.concatenate(ragged)))
    assert fit2.exponent == pytest.approx(ref2.slope, rel=1e-12)
    assert fit2.stderr == pytest.approx(ref2.stderr, rel=1e-12)


def test_exact_power_law_has_zero_stderr():
    e = np.broadcast_to(SIZES[:, None] ** -1.0, (5, 4)) * 3.0
    fit = log_error_rate(SIZES, e)
    assert fit.exponent == pytest.approx(-0.5, abs=1e-14)
    assert fit.stderr < 1e-14


@pytest.mark.parametrize("law", ["chi2", "pareto"])
def test_student_calibration_on_skewed_and_heavy_tailed_errors(law):
    # the z of a correct rate exceeds the Student quantile of 1% about 1% of the time, for
    # chi^2 errors and for errors with a Pareto(3) factor (infinite variance of e); 4000 runs
    rng = np.random.default_rng(1)
    z = np.array([log_error_rate(SIZES, _errors(rng, -0.5, 40, law)).z(-0.5)
                  for _ in range(4000)])
    q = stats.t.isf(0.005, 5 * 40 - 2)
    rate = np.mean(np.abs(z) > q)
    assert 0.005 < rate < 0.017, rate          # 1% +- 3.5 binomial standard deviations
    assert abs(np.mean(z)) < 0.06 and abs(np.std(z) - 1) < 0.05


@pytest.mark.parametrize("law", ["chi2", "pareto"])
def test_rejects_the_rate_the_chapter_rules_out(law):
    # the chapter's test: three variants, |z| below the Bonferroni threshold of 1e-4 in all;
    # errors decaying like n^-0.3 (or n^-0.7) instead of n^-1/2 fail it almost always
    rng = np.random.default_rng(2)
    threshold = bonferroni_threshold(3, 5 * 40 - 2, 1e-4)
    for wrong in (-0.3, -0.7):
        passed = sum(abs(log_error_rate(SIZES, _errors(rng, wrong, 40, law)).z(-0.5))
                     < threshold for _ in range(500))
        assert passed <= 5, (wrong, passed)   # power above 99%
    right = sum(abs(log_error_rate(SIZES, _errors(rng, -0.5, 40, law)).z(-0.5)) >= threshold
                for _ in range(500))
    assert right == 0


@pytest.mark.parametrize("sizes, errors, match", [
    ([25], [[1.0, 2.0]], "sizes"),
    ([25, 50], [[1.0, 2.0]], "one array"),
    ([25, 50], [[1.0, 0.0], [1.0, 2.0]], "positive"),
    ([25, 25], [[1.0, 2.0], [1.0, 2.0]], "distinct"),
    ([25, 50], [[1.0], [2.0]], "3 draws"),
])
def test_bad_inputs_raise(sizes, errors, match):
    with pytest.raises(ValueError, match=match):
        log_error_rate(sizes, errors)
