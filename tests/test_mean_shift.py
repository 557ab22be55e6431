"""Tests of the Gaussian KDE, mean shift and the mode counts (transformer_pde.mean_shift)."""

import math

import numpy as np
import pytest
from scipy.integrate import quad
from transformer_pde import mean_shift as ms
from transformer_pde import sphere


def brute_force_modes(x, beta, points=200_001):
    """Sign changes + to - of the KDE's derivative on a very fine grid (a reference that can
    only miss modes, never invent one)."""
    x = np.asarray(x, dtype=float)
    grid = np.linspace(x.min() - 0.2, x.max() + 0.2 + 1e-6 * math.pi, points)
    g = np.empty_like(grid)
    for k in range(0, grid.size, 20_000):
        u = x[None, :] - grid[k:k + 20_000, None]
        g[k:k + 20_000] = (u * np.exp(-0.5 * beta * u * u)).sum(axis=1)
    s = np.sign(g)
    return int(np.sum((s[:-1] > 0) & (s[1:] < 0)))


def test_kde_two_samples_closed_form_and_mass():
    beta = 3.7
    t = np.linspace(-3, 3, 13)
    ref = (np.exp(-beta * (t + 0.4) ** 2 / 2) + np.exp(-beta * (t - 1.1) ** 2 / 2)) / 2
    ref *= math.sqrt(beta / (2 * math.pi))
    np.testing.assert_allclose(ms.gaussian_kde(t, [-0.4, 1.1], beta), ref, rtol=1e-14)
    mass, _ = quad(lambda s: ms.gaussian_kde([s], [-0.4, 1.1], beta)[0], -10, 10)
    assert abs(mass - 1) < 1e-10
    # in d = 2 the normalising constant is beta / (2 pi)
    assert ms.gaussian_kde([[0.0, 0.0]], [[0.0, 0.0]], 5.0)[0] == pytest.approx(5 / (2 * np.pi))


def test_mean_shift_is_a_gradient_step_of_log_kde():
    rng = np.random.default_rng(3)
    S = rng.normal(size=(30, 2))
    X = rng.normal(size=(4, 2))
    beta = 2.5
    m = ms.mean_shift_step(X, S, beta)
    eps = 1e-6
    for i in range(4):
        grad = np.empty(2)
        for k in range(2):
            e = np.zeros(2)
            e[k] = eps
            hi = math.log(ms.gaussian_kde(X[i:i + 1] + e, S, beta)[0])
            lo = math.log(ms.gaussian_kde(X[i:i + 1] - e, S, beta)[0])
            grad[k] = (hi - lo) / (2 * eps)
        np.testing.assert_allclose(m[i] - X[i], grad / beta, atol=1e-8)


def test_mean_shift_on_the_sphere_is_attention():
    rng = np.random.default_rng(4)
    X = sphere.uniform_on_sphere(12, 3, rng)
    for beta in (0.5, 4.0, 60.0):
        m = ms.mean_shift_step(X, X, beta)
        np.testing.assert_allclose(sphere.tangent_projection(X, m), sphere.sa(X, beta),
                                   atol=1e-12)


def test_mean_shift_hardmax_limit_is_the_nearest_sample():
    S = np.array([[0.0], [1.0], [3.0]])
    X = np.array([[0.2], [2.4]])
    np.testing.assert_allclose(ms.mean_shift_step(X, S, 1e4), [[0.0], [3.0]], atol=1e-12)


@pytest.mark.parametrize("sep, expected", [(1.999, 1), (2.001, 2), (1.9, 1), (2.5, 2)])
def test_two_samples_are_bimodal_iff_two_bandwidths_apart(sep, expected):
    # two equal Gaussians of unit variance at distance D: bimodal iff D > 2
    beta = (sep / 2) ** 2
    assert ms.count_modes_line([-1.0, 1.0], beta) == expected
    assert ms.count_modes_line([3.0, 5.0], beta) == expected


def test_count_agrees_with_brute_force_on_small_samples():
    rng = np.random.default_rng(11)
    for _ in range(25):
        n = int(rng.integers(1, 40))
        x = rng.standard_normal(n) * rng.uniform(0.3, 3.0)
        beta = float(rng.uniform(0.3, 300.0))
        assert ms.count_modes_line(x, beta) == brute_force_modes(x, beta), (n, beta)


def test_brackets_contain_one_maximum_each():
    rng = np.random.default_rng(12)
    x = rng.standard_normal(200)
    beta = 400.0
    count, br = ms.count_modes_line(x, beta, return_brackets=True)
    assert br.shape == (count, 2) and count > 5
    for a, b in br:
        ga = np.sum((x - a) * np.exp(-beta * (x - a) ** 2 / 2))
        gb = np.sum((x - b) * np.exp(-beta * (x - b) ** 2 / 2))
        assert ga > 0 > gb


def test_isolated_samples_each_give_a_mode_and_scale_invariance():
    x = np.array([0.0, 10.0, 20.0, 35.0, 80.0])
    assert ms.count_modes_line(x, 1.0) == 5
    # far apart in bandwidths (no underflow trouble: 80 bandwidths apart)
    assert ms.count_modes_line(x, 1.0) == ms.count_modes_line(x * 7.0, 1.0 / 49.0)


def test_large_sample_runs_and_is_reproducible():
    x = np.random.default_rng(5).standard_normal(20_000)
    c1 = ms.count_modes_line(x, 1000.0)
    assert c1 == ms.count_modes_line(x[::-1].copy(), 1000.0)
    draws = ms.mode_count_draws(300, [10.0, 100.0], 3, np.random.default_rng(6))
    rng = np.random.default_rng(6)
    for r in range(3):
        xr = rng.standard_normal(300)
        assert draws[0, r] == ms.count_modes_line(xr, 10.0)
        assert draws[1, r] == ms.count_modes_line(xr, 100.0)


def test_count_modes_circle_against_direct_evaluation():
    rng = np.random.default_rng(7)
    for beta in (3.0, 30.0, 150.0):
        th = rng.uniform(0, 2 * np.pi, 60)
        grid = np.linspace(0, 2 * np.pi, 100_000, endpoint=False)
        d = (np.sin(th[None, :] - grid[:, None])
             * np.exp(beta * (np.cos(grid[:, None] - th[None, :]) - 1))).sum(axis=1)
        s = np.sign(d)
        ref = int(np.sum((s > 0) & (np.roll(s, -1) < 0)))
        assert ms.count_modes_circle(th, beta) == ref
    assert ms.count_modes_circle([0.0, np.pi], 4.0) == 2
    assert ms.count_modes_circle([0.0, 0.1], 4.0) == 1


def test_circle_rice_formula_limits():
    # large beta: sqrt(3 beta / 2); direct sums with scipy's iv for a moderate beta
    from scipy.special import iv
    beta = 9.0
    ell = np.arange(1, 200, dtype=float)
    w = iv(ell, beta) ** 2
    ref = math.sqrt((ell ** 4 * w).sum() / (ell ** 2 * w).sum())
    assert ms.circle_rice_modes(beta) == pytest.approx(ref, rel=1e-12)
    assert ms.circle_rice_modes(4e4) / math.sqrt(1.5 * 4e4) == pytest.approx(1, abs=2e-3)
    # small beta: only the first harmonics matter, the count tends to 1 from above
    assert 1 < ms.circle_rice_modes(1e-3) < 1.01


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="beta"):
        ms.count_modes_line([0.0, 1.0], -1.0)
    with pytest.raises(ValueError, match="samples"):
        ms.count_modes_line([0.0, np.nan], 1.0)
    with pytest.raises(ValueError, match="samples"):
        ms.count_modes_line(np.zeros((3, 2)), 1.0)
    with pytest.raises(ValueError, match="dimension"):
        ms.gaussian_kde(np.zeros((2, 2)), np.zeros((3, 3)), 1.0)
    with pytest.raises(ValueError, match="rng"):
        ms.mode_count_draws(10, [1.0], 1, 0)
    with pytest.raises(ValueError, match="angles"):
        ms.count_modes_circle([], 1.0)
    with pytest.raises(ValueError, match="return_brackets"):
        ms.count_modes_line([0.0], 1.0, return_brackets="yes")


@pytest.mark.parametrize("delta, expected", [(1e-6, 2), (1e-12, 2), (1e-14, 2),
                                             (-1e-12, 1), (-1e-6, 1)])
def test_count_modes_line_merging_critical_points(delta, expected):
    # two samples 2 sqrt(beta) bandwidths apart: at separation 2 the two modes and the
    # antimode between them merge (g ~ delta s - s^3 / 3 near the middle); just above 2
    # there are two modes within sqrt(3 delta) bandwidths of each other, just below one
    beta = 1.0 + delta
    assert ms.count_modes_line([-1.0, 1.0], beta) == expected


def test_count_modes_line_degenerate_raises_instead_of_guessing():
    # separation exactly 2 (a triple critical point): undecidable, never a silent count
    with pytest.raises(RuntimeError, match="not decided"):
        ms.count_modes_line([-1.0, 1.0], 1.0)


def test_count_modes_line_zero_near_a_grid_point_terminates():
    # the draw on which halving ran without end: an antimode of g within 3e-7 bandwidths of
    # a grid point, where the bound on the far samples (3e-6) leaves the grid point's sign
    # undecided at every depth; resolved in multiple precision (count checked against a
    # fine-grid reference, which can only miss modes)
    rng = np.random.default_rng(101)
    for _ in range(12):
        rng.uniform(0.0, 2 * np.pi, 400)
    sphere.uniform_on_sphere(64, 3, rng)
    rng.normal(size=(5, 2))
    rng.normal(size=(200, 2))
    rng.standard_normal(20_000)
    x = rng.standard_normal(20_000)
    beta = 10**3.5
    assert ms.count_modes_line(x, beta) == brute_force_modes(x, beta) == 75
