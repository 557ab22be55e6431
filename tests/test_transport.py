"""Tests of transformer_pde.transport against closed forms and loop references."""

import numpy as np
import pytest
from scipy.linalg import sqrtm
from transformer_pde import transport as tr

RNG_SEED = 12345


def bures_wasserstein(m1, S1, m2, S2):
    """W_2 between N(m1, S1) and N(m2, S2): |m1-m2|^2 + tr(S1 + S2 - 2 (S1^1/2 S2 S1^1/2)^1/2)."""
    r = np.real(sqrtm(S1))
    cross = np.real(sqrtm(r @ S2 @ r))
    return float(np.sqrt(np.sum((m1 - m2) ** 2) + np.trace(S1 + S2 - 2 * cross)))


M1, S1 = np.array([0.0, 0.0]), np.array([[1.0, 0.3], [0.3, 0.5]])
M2, S2 = np.array([1.0, -0.5]), np.array([[0.6, -0.2], [-0.2, 1.2]])


# --------------------------------------------------------------------------------------
# exact W_p: closed forms
# --------------------------------------------------------------------------------------

def test_gaussian_samples_match_bures_wasserstein():
    # Independent samples of size n of two Gaussians. To first order the fluctuation of
    # W_2(mu_n, nu_n) around the Bures-Wasserstein value W is that of the empirical means:
    # sd ~ |m2 - m1| / W * sqrt(u^T (S1 + S2) u / n), u = (m2 - m1)/|m2 - m1| (0.034 here;
    # over 10 seeds we measured 0.036). The covariance fluctuation and the matching bias of
    # empirical measures in d = 2 (O(log n / n) in W_2^2) are smaller. Tolerance: 4 sd.
    n = 1000
    rng = np.random.default_rng(RNG_SEED)
    X = rng.multivariate_normal(M1, S1, n)
    Y = rng.multivariate_normal(M2, S2, n)
    W = bures_wasserstein(M1, S1, M2, S2)
    dm = M2 - M1
    u = dm / np.linalg.norm(dm)
    sd = np.linalg.norm(dm) / W * np.sqrt(u @ (S1 + S2) @ u / n)
    assert abs(tr.wasserstein(X, Y) - W) < 4 * sd


def test_affine_optimal_map_gives_exact_cost_and_bures_limit():
    # y = m2 + T (x - m1) with T the (symmetric positive definite) Bures map is the gradient
    # of a convex function, hence optimal between ANY measure and its image (Brenier): the
    # exact W_2^2 of the samples is the mean of |y_i - x_i|^2. That mean is a Monte Carlo
    # estimate of the Bures-Wasserstein value: checked within 5 standard errors.
    n = 400
    rng = np.random.default_rng(RNG_SEED + 1)
    X = rng.multivariate_normal(M1, S1, n)
    r = np.real(sqrtm(S1))
    ri = np.linalg.inv(r)
    T = ri @ np.real(sqrtm(r @ S2 @ r)) @ ri
    Y = M2 + (X - M1) @ T.T
    sq = np.sum((Y - X) ** 2, axis=1)
    assert tr.wasserstein(X, Y) ** 2 == pytest.approx(sq.mean(), rel=1e-10)
    W2 = bures_wasserstein(M1, S1, M2, S2) ** 2
    assert abs(sq.mean() - W2) < 5 * sq.std(ddof=1) / np.sqrt(n)


@pytest.mark.parametrize("p", [1, 1.5, 2, 3])
def test_translated_cloud(p):
    # W_p(mu, mu + h) = |h|: the translation is a coupling of cost |h|^p, and by Jensen any
    # coupling has E|X - Y|^p >= |E(X - Y)|^p = |h|^p.
    rng = np.random.default_rng(RNG_SEED + 2)
    X = rng.standard_normal((40, 3))
    w = rng.dirichlet(np.ones(40))
    h = np.array([0.3, -1.2, 0.5])
    assert tr.wasserstein(X, X + h, weights_x=w, weights_y=w, p=p) == pytest.approx(
        np.linalg.norm(h), rel=1e-9)


@pytest.mark.parametrize("p", [1, 2, 4])
def test_point_masses(p):
    x, y = np.array([[1.0, 2.0, -1.0]]), np.array([[0.5, -1.0, 3.0]])
    assert tr.wasserstein(x, y, p=p) == pytest.approx(np.linalg.norm(x - y), rel=1e-12)


def test_point_mass_against_cloud_is_moment():
    # W_p(delta_y, nu)^p = sum_j b_j |y - y_j|^p (the only coupling).
    rng = np.random.default_rng(RNG_SEED + 3)
    Y = rng.standard_normal((15, 2))
    b = rng.dirichlet(np.ones(15))
    y = np.array([[0.2, 0.1]])
    for p in (1, 2, 3):
        expected = (b @ np.linalg.norm(Y - y, axis=1) ** p) ** (1 / p)
        assert tr.wasserstein(y, Y, weights_y=b, p=p) == pytest.approx(expected, rel=1e-10)


def test_one_dimensional_sorting_reference():
    # In d = 1 with uniform weights and n = m, the optimal coupling matches sorted samples.
    rng = np.random.default_rng(RNG_SEED + 4)
    x, y = rng.standard_normal(30), rng.exponential(size=30)
    for p in (1, 2, 3):
        expected = np.mean(np.abs(np.sort(x) - np.sort(y)) ** p) ** (1 / p)
        assert tr.wasserstein(x[:, None], y[:, None], p=p) == pytest.approx(expected, rel=1e-10)


def test_weighted_equals_repeated_atoms():
    rng = np.random.default_rng(RNG_SEED + 5)
    X = rng.standard_normal((5, 2))
    Y = rng.standard_normal((7, 2))
    counts = np.array([1, 3, 2, 1, 3])
    w = counts / counts.sum()
    Xrep = np.repeat(X, counts, axis=0)
    for p in (1, 2):
        assert tr.wasserstein(X, Y, weights_x=w, p=p) == pytest.approx(
            tr.wasserstein(Xrep, Y, p=p), rel=1e-10)
        assert tr.sliced_wasserstein(X, Y, weights_x=w, p=p) == pytest.approx(
            tr.sliced_wasserstein(Xrep, Y, p=p), rel=1e-10)


def test_metric_properties():
    rng = np.random.default_rng(RNG_SEED + 6)
    X, Y, Z = (rng.standard_normal((12, 2)) for _ in range(3))
    assert tr.wasserstein(X, X) == pytest.approx(0.0, abs=1e-12)
    assert tr.wasserstein(X, Y) == pytest.approx(tr.wasserstein(Y, X), rel=1e-12)
    for p in (1, 2):
        assert tr.wasserstein(X, Z, p=p) <= tr.wasserstein(X, Y, p=p) + tr.wasserstein(
            Y, Z, p=p) + 1e-12
    # W_1 <= W_2 (Jensen)
    assert tr.wasserstein(X, Y, p=1) <= tr.wasserstein(X, Y, p=2) + 1e-12


def test_permutation_coupling_upper_bound():
    # Any permutation is a coupling of two uniform clouds of the same size: an upper bound.
    rng = np.random.default_rng(RNG_SEED + 7)
    X, Y = rng.standard_normal((20, 2)), rng.standard_normal((20, 2))
    assert tr.wasserstein(X, Y) <= np.sqrt(np.mean(np.sum((X - Y) ** 2, axis=1)))


def test_cost_matrix_against_loops():
    rng = np.random.default_rng(RNG_SEED + 8)
    X, Y = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    for p in (1, 2, 3.5):
        M = tr.cost_matrix(X, Y, p)
        for i in range(4):
            for j in range(5):
                assert M[i, j] == pytest.approx(np.linalg.norm(X[i] - Y[j]) ** p, rel=1e-12)


# --------------------------------------------------------------------------------------
# sliced W_p
# --------------------------------------------------------------------------------------

def test_sliced_below_exact_and_equal_in_1d():
    rng = np.random.default_rng(RNG_SEED + 9)
    X, Y = rng.standard_normal((30, 3)), rng.standard_normal((25, 3)) + 0.5
    for p in (1, 2):
        assert tr.sliced_wasserstein(X, Y, p=p) <= tr.wasserstein(X, Y, p=p) + 1e-12
        x, y = X[:, :1], Y[:, :1]
        assert tr.sliced_wasserstein(x, y, p=p, n_projections=3) == pytest.approx(
            tr.wasserstein(x, y, p=p), rel=1e-10)


def test_sliced_translation_closed_form():
    # For a translation by h, each slice is a translation by <theta, h>, so
    # SW_2^2 = E <theta, h>^2 = |h|^2 / d. By rotation invariance <theta, h>^2 ~ |h|^2
    # theta_1^2, with E theta_1^2 = 1/d and E theta_1^4 = 3/(d(d+2)): the relative standard
    # error of the mean over N directions is sqrt(2(d-1)/(d+2)) / sqrt(N) (0.71 / sqrt(N) in
    # d = 2). Tolerance: 5 standard errors on SW_2^2.
    d, N = 2, 4000
    rng = np.random.default_rng(RNG_SEED + 10)
    X = rng.standard_normal((20, d))
    h = np.array([2.0, -1.0])
    sw2 = tr.sliced_wasserstein(X, X + h, n_projections=N, seed=3) ** 2
    target = h @ h / d
    rel_se = np.sqrt(2 * (d - 1) / (d + 2)) / np.sqrt(N)
    assert abs(sw2 / target - 1) < 5 * rel_se


def test_sliced_is_seeded():
    rng = np.random.default_rng(RNG_SEED + 11)
    X, Y = rng.standard_normal((10, 4)), rng.standard_normal((10, 4))
    a = tr.sliced_wasserstein(X, Y, seed=7)
    assert tr.sliced_wasserstein(X, Y, seed=7) == a
    assert tr.sliced_wasserstein(X, Y, seed=8) != a


# --------------------------------------------------------------------------------------
# conditional W_p
# --------------------------------------------------------------------------------------

def test_conditional_hand_computed():
    # Two bins of length 1/2: bin 0 moves 0 -> 1 (W = 1), bin 1 does not move.
    s = np.array([0.05, 0.55])
    X = np.array([[0.0], [1.0]])
    Y = np.array([[1.0], [1.0]])
    for p in (1, 2, 3):
        assert tr.conditional_wasserstein(s, X, s, Y, p=p, bins=2) == pytest.approx(
            0.5 ** (1 / p), rel=1e-12)


def test_conditional_renormalises_each_bin():
    # Bin 0 holds mass 0.9 in the first measure, 0.1 in the second: renormalised, both are
    # delta_0 there, and bin 1 holds two atoms each; only bin 1 contributes:
    # W_2 between (delta_1 + delta_3)/2 and delta_2 is 1; the estimate is (1/2 * 1)^(1/2).
    s = np.array([0.1, 0.7, 0.8])
    X = np.array([[0.0], [1.0], [3.0]])
    a = np.array([0.9, 0.05, 0.05])
    t = np.array([0.2, 0.9])
    Y = np.array([[0.0], [2.0]])
    b = np.array([0.1, 0.9])
    got = tr.conditional_wasserstein(s, X, t, Y, weights_x=a, weights_y=b, bins=2)
    assert got == pytest.approx(np.sqrt(0.5), rel=1e-12)


def test_conditional_one_bin_is_plain_wasserstein():
    rng = np.random.default_rng(RNG_SEED + 12)
    X, Y = rng.standard_normal((9, 2)), rng.standard_normal((6, 2))
    s, t = rng.uniform(size=9), rng.uniform(size=6)
    assert tr.conditional_wasserstein(s, X, t, Y, bins=1, p=1) == pytest.approx(
        tr.wasserstein(X, Y, p=1), rel=1e-12)


def test_conditional_against_loop_reference():
    rng = np.random.default_rng(RNG_SEED + 13)
    n, m, B, p = 60, 50, 5, 2
    s, t = rng.uniform(size=n), rng.uniform(size=m)
    s[0], t[0] = 1.0, 0.0  # the closed last bin and the left end
    s[1] = t[1] = 0.4  # an interior edge belongs to the bin on its right
    X, Y = rng.standard_normal((n, 2)), rng.standard_normal((m, 2))
    a, b = rng.dirichlet(np.ones(n)), rng.dirichlet(np.ones(m))
    total = 0.0
    for k in range(B):
        lo, hi = k / B, (k + 1) / B
        ix = [i for i in range(n) if lo <= s[i] < hi or (k == B - 1 and s[i] == 1.0)]
        iy = [j for j in range(m) if lo <= t[j] < hi or (k == B - 1 and t[j] == 1.0)]
        wx, wy = a[ix] / a[ix].sum(), b[iy] / b[iy].sum()
        total += (hi - lo) * tr.wasserstein(X[ix], Y[iy], weights_x=wx, weights_y=wy) ** p
    got = tr.conditional_wasserstein(s, X, t, Y, weights_x=a, weights_y=b, p=p, bins=B)
    assert got == pytest.approx(total ** (1 / p), rel=1e-10)


def test_conditional_same_positions_translation():
    # Same positions, tokens translated by h in every bin: every conditional distance is |h|.
    rng = np.random.default_rng(RNG_SEED + 14)
    s = np.linspace(0, 1, 40)
    X = rng.standard_normal((40, 2))
    h = np.array([0.3, 0.4])
    assert tr.conditional_wasserstein(s, X, s, X + h, bins=8) == pytest.approx(0.5, rel=1e-10)


def test_conditional_empty_bins_in_both_contribute_zero():
    s = np.array([0.05, 0.95])
    X = np.array([[0.0], [0.0]])
    Y = np.array([[2.0], [0.0]])
    # bins 1..8 are empty in both measures; bin 0 contributes |I_0| * 2^2
    assert tr.conditional_wasserstein(s, X, s, Y, bins=10) == pytest.approx(
        np.sqrt(0.1 * 4), rel=1e-12)


# --------------------------------------------------------------------------------------
# bad inputs
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [tr.wasserstein, tr.sliced_wasserstein])
def test_bad_inputs_raise(fn):
    X, Y = np.zeros((3, 2)), np.ones((4, 2))
    with pytest.raises(ValueError, match="weights_x"):
        fn(X, Y, weights_x=[0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="weights_y"):
        fn(X, Y, weights_y=[0.5, 0.7, -0.2, 0.0])
    with pytest.raises(ValueError, match="weights_x"):
        fn(X, Y, weights_x=[0.5, 0.5])
    with pytest.raises(ValueError, match="weights_y"):
        fn(X, Y, weights_y=[np.nan, 0.5, 0.5, 0.0])
    with pytest.raises(ValueError, match="same dimension"):
        fn(X, np.ones((4, 3)))
    with pytest.raises(ValueError, match="X"):
        fn(np.zeros(3), Y)
    with pytest.raises(ValueError, match="Y"):
        fn(X, np.full((4, 2), np.inf))
    for p in (0.5, 0, -1, np.inf, "two"):
        with pytest.raises(ValueError, match="p must"):
            fn(X, Y, p=p)


def test_sliced_bad_projections():
    with pytest.raises(ValueError, match="n_projections"):
        tr.sliced_wasserstein(np.zeros((2, 2)), np.ones((2, 2)), n_projections=0)


def test_conditional_bad_inputs():
    s = np.array([0.1, 0.6])
    X = np.zeros((2, 1))
    with pytest.raises(ValueError, match="s must lie in"):
        tr.conditional_wasserstein(np.array([0.1, 1.2]), X, s, X)
    with pytest.raises(ValueError, match="t must lie in"):
        tr.conditional_wasserstein(s, X, np.array([-0.1, 0.5]), X)
    with pytest.raises(ValueError, match="t must have shape"):
        tr.conditional_wasserstein(s, X, np.array([0.1, 0.5, 0.7]), X)
    with pytest.raises(ValueError, match="bin 1 .* first measure"):
        tr.conditional_wasserstein(s, X, np.array([0.1, 0.2]), X, bins=2)
    with pytest.raises(ValueError, match="bin 0 .* second measure"):
        tr.conditional_wasserstein(np.array([0.7, 0.6]), X, s, X, bins=2)
    # zero weight is no mass
    with pytest.raises(ValueError, match="bin 0"):
        tr.conditional_wasserstein(s, X, s, X, weights_y=[0.0, 1.0], bins=2)
    with pytest.raises(ValueError, match="bins"):
        tr.conditional_wasserstein(s, X, s, X, bins=0)
    with pytest.raises(ValueError, match="p must"):
        tr.conditional_wasserstein(s, X, s, X, p=0.9)
