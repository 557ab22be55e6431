"""Tests of transformer_pde.replicates: pooled z-scores and the Bonferroni threshold."""

import numpy as np
import pytest
from scipy import stats
from transformer_pde import replicates


def _draw(rng, ns, R, theta, sigma, bias=0.0):
    ns = np.asarray(ns, dtype=float)
    scale = np.asarray(sigma, dtype=float)[None, None, :] / np.sqrt(ns)[:, None, None]
    noise = rng.normal(size=(ns.size, R, theta.size)) * scale
    return theta + bias + noise


def test_pooled_z_scores_against_weighted_least_squares():
    rng = np.random.default_rng(0)
    ns, R = [50, 200, 800], 5
    theta = np.array([0.3, -1.0])
    s = _draw(rng, ns, R, theta, np.array([1.0, 2.0]))
    res = replicates.pooled_z_scores(ns, s, theta)
    for j in range(theta.size):
        # independent reference: least squares of sqrt(n) y on sqrt(n) (one parameter)
        y = s[:, :, j].ravel()
        w = np.repeat(np.asarray(ns, dtype=float), R)
        X = np.sqrt(w)[:, None]
        coef, rss, *_ = np.linalg.lstsq(X, np.sqrt(w) * y, rcond=None)
        dof = y.size - 1
        se = np.sqrt(rss[0] / dof / (X[:, 0] @ X[:, 0]))
        assert res.estimate[j] == pytest.approx(coef[0], rel=1e-12)
        assert res.stderr[j] == pytest.approx(se, rel=1e-10)
        assert res.z[j] == pytest.approx(abs(coef[0] - theta[j]) / se, rel=1e-10)
    assert res.dof == len(ns) * R - 1


def test_pooled_z_scores_follow_student_law_under_the_null():
    rng = np.random.default_rng(1)
    ns, R = [100, 400], 3          # dof = 5: heavy tails, so the law is visibly Student's
    theta, sigma = np.zeros(1), np.ones(1)
    z = np.array([replicates.pooled_z_scores(ns, _draw(rng, ns, R, theta, sigma), theta).z[0]
                  for _ in range(4000)])
    q = stats.t.isf(0.025, df=5)   # 2.57; a normal law would be exceeded by 1%, not 5%
    frac = np.mean(z > q)
    assert abs(frac - 0.05) < 4 * np.sqrt(0.05 * 0.95 / z.size), frac


def test_pooled_z_scores_detect_a_bias():
    rng = np.random.default_rng(2)
    ns, R = [200, 400, 800], 8
    theta, sigma = np.array([1.0]), np.array([1.0])
    s = _draw(rng, ns, R, theta, sigma, bias=0.1)   # 0.1 = 10.6 pooled standard errors
    assert replicates.pooled_z_scores(ns, s, theta).z[0] > 5


def test_bonferroni_threshold_bounds_the_false_alarm_probability():
    assert replicates.bonferroni_threshold(1, 10, alpha=0.05) == pytest.approx(
        stats.t.isf(0.025, 10), rel=1e-12)
    rng = np.random.default_rng(3)
    m, dof, alpha = 20, 7, 0.05
    thr = replicates.bonferroni_threshold(m, dof, alpha)
    T = rng.standard_t(dof, size=(20000, m))
    frac = np.mean(np.abs(T).max(axis=1) > thr)
    # the union bound is nearly tight for independent tests: between 0.8 alpha and alpha
    assert 0.8 * alpha - 0.01 < frac < alpha + 0.01, frac


def test_bad_inputs_raise():
    s = np.zeros((2, 3, 1)) + np.arange(3)[None, :, None]
    with pytest.raises(ValueError, match="ns must"):
        replicates.pooled_z_scores([10, -1], s, [0.0])
    with pytest.raises(ValueError, match="samples must have shape"):
        replicates.pooled_z_scores([10, 20, 30], s, [0.0])
    with pytest.raises(ValueError, match="target must"):
        replicates.pooled_z_scores([10, 20], s, [0.0, 1.0])
    with pytest.raises(ValueError, match="vary"):
        replicates.pooled_z_scores([10, 20], np.ones((2, 3, 1)), [0.0])
    with pytest.raises(ValueError, match="finite"):
        replicates.pooled_z_scores([10, 20], s * np.nan, [0.0])
    with pytest.raises(ValueError, match="at least 2"):
        replicates.pooled_z_scores([10], np.ones((1, 1, 1)), [0.0])
    with pytest.raises(ValueError, match="n_tests"):
        replicates.bonferroni_threshold(0, 5)
    with pytest.raises(ValueError, match="alpha"):
        replicates.bonferroni_threshold(3, 5, alpha=1.5)


def test_chapter_design_rejects_a_wrong_constant():
    # chapter 3's design: sizes 250 to 4000, 12 replicates, 5 components, threshold for 30
    # comparisons at total false-alarm 1e-3; synthetic estimates with the chapter's noise level
    # (relative error about 1.5 n^-1/2). A right-hand side off by 5% in one component, the
    # alternative the text rules out (a wrong formula), is rejected every time; the right one
    # never is
    rng = np.random.default_rng(4)
    ns, R = [250, 500, 1000, 2000, 4000], 12
    theta = np.array([0.4, -0.3, 1.0, 0.2, 0.7])
    sigma = 1.5 * np.abs(theta).max() * np.ones(5)
    thr = replicates.bonferroni_threshold(30, len(ns) * R - 1, 1e-3)
    wrong = theta + np.array([0.0, 0.0, 0.05, 0.0, 0.0])
    rejected = accepted = 0
    for _ in range(300):
        s = _draw(rng, ns, R, theta, sigma)
        rejected += replicates.pooled_z_scores(ns, s, wrong).z.max() > thr
        accepted += replicates.pooled_z_scores(ns, s, theta).z.max() < thr
    assert rejected == 300 and accepted == 300
