"""Batch statistics for the rate checks of chapter 2: fitting.batch_rates, replicates.batch_t,
token_sample.sup_limit_samples, against independent computations, and the power of the checks
built from them."""

import numpy as np
import pytest
from scipy import stats
from transformer_pde import replicates, token_sample
from transformer_pde.fitting import batch_rates, log_error_rate

SIZES = np.array([100, 200, 400, 800])
DRAWS = np.array([1600, 800, 400, 200])  # the notebook's


def _errors(rng, exponent=-0.5, scale=1.0):
    # n e_n = scale chi-square(3)/3 times n^(1 + 2 exponent): the law of n e_n does not move
    # with n when exponent = -1/2
    return [scale * rng.chisquare(3, R) / 3 * n ** (2 * exponent) for n, R in
            zip(SIZES, DRAWS, strict=True)]


def test_batch_t_is_the_one_sample_t_test():
    v = np.random.default_rng(1).normal(0.3, 2.0, 17)
    r = replicates.batch_t(v, 0.1)
    ref = stats.ttest_1samp(v, 0.1)
    assert r.dof == 16
    assert abs(r.t - ref.statistic) < 1e-12
    assert abs(r.estimate - v.mean()) < 1e-15


def test_batch_t_follows_student_for_gaussian_batches():
    rng = np.random.default_rng(2)
    t = np.array([replicates.batch_t(rng.standard_normal(20)).t for _ in range(20000)])
    q = stats.t.isf(0.025, 19)
    # P(|T| > q) = 0.05 exactly; 20000 runs: standard error 0.0015
    assert abs(np.mean(np.abs(t) > q) - 0.05) < 0.006


def test_batch_rates_average_to_the_statistics_of_all_draws():
    rng = np.random.default_rng(3)
    e = _errors(rng)
    b = batch_rates(SIZES, e, 20)
    assert abs(b.exponent.mean() - log_error_rate(SIZES, e).exponent) < 1e-12
    assert abs(b.scaled_mean.mean() - np.mean([n * x.mean() for n, x in
                                               zip(SIZES, e, strict=True)])) < 1e-12
    logs = np.concatenate([np.log(n * x) for n, x in zip(SIZES, e, strict=True)])
    assert abs(b.log_mean.mean() - logs.mean()) < 1e-12
    # batch 3 holds draws 3, 23, 43, ... of every size
    part = [x[3::20] for x in e]
    assert abs(b.exponent[3] - log_error_rate(SIZES, part).exponent) < 1e-12


def test_batch_rates_rejects_unequal_batches():
    e = _errors(np.random.default_rng(4))
    with pytest.raises(ValueError, match="batches"):
        batch_rates(SIZES, e, 3)
    with pytest.raises(ValueError, match="batches"):
        batch_rates(SIZES, e, 1)


def test_batch_checks_accept_the_rate_and_reject_wrong_ones():
    # the notebook's rule: |exponent + 1/2| < 0.05 + Z standard errors, Z the Student
    # threshold of four tests at total 2e-4 with 19 degrees of freedom
    Z = replicates.bonferroni_threshold(4, 19, 2e-4)
    rng = np.random.default_rng(5)
    for exponent, expected in ((-0.5, True), (-0.25, False), (-0.75, False)):
        for _ in range(20):
            r = replicates.batch_t(batch_rates(SIZES, _errors(rng, exponent), 20).exponent,
                                   -0.5)
            assert (abs(r.estimate + 0.5) < 0.05 + Z * r.stderr) == expected, (exponent, r)


def test_batch_checks_reject_a_limit_25_percent_off():
    Z = replicates.bonferroni_threshold(4, 19, 2e-4)
    rng = np.random.default_rng(6)
    draws = [scale * rng.chisquare(3, R) / 3 / n for n, R, scale in
             zip(SIZES, DRAWS, [1.0] * 4, strict=True)]
    m = replicates.batch_t(batch_rates(SIZES, draws, 20).scaled_mean, 1.0)
    assert abs(m.estimate - 1.0) < 0.05 + Z * m.stderr
    for wrong in (0.75, 1.25):
        assert abs(m.estimate - wrong) >= 0.05 * wrong + Z * m.stderr, wrong


def test_sup_limit_samples_are_the_samples_sup_limit_averages():
    A, V = np.array([[1.0, 0.2], [0.1, 0.9]]), np.eye(2)
    alpha, Sigma = np.array([0.1, 0.0]), np.array([[0.5, 0.1], [0.1, 0.4]])
    Q = token_sample.disk_grid(0.3, 2)
    g = token_sample.sup_limit_samples(A, V, alpha, Sigma, Q, samples=3000, seed=[7, 1])
    lim = token_sample.sup_limit(A, V, alpha, Sigma, Q, samples=3000, seed=[7, 1])
    assert g.shape == (3000,)
    assert abs(g.mean() - lim.mean) < 1e-12 and abs(np.log(g).mean() - lim.log_mean) < 1e-12
    # one query at the origin: |G(0)|^2 has mean trace of the covariance
    g0 = token_sample.sup_limit_samples(A, V, alpha, Sigma, np.zeros((1, 2)), samples=20000,
                                        seed=3)
    K = token_sample.fluctuation_covariance(A, V, alpha, Sigma, np.zeros((1, 2)))
    assert abs(g0.mean() - np.trace(K)) < 5 * g0.std() / np.sqrt(g0.size)
