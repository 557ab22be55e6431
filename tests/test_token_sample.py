"""Tests of transformer_pde.token_sample against independent references (dense softmax,
Monte Carlo of the fluctuation, closed forms)."""

import numpy as np
import pytest
from transformer_pde import token_sample

ALPHA0 = np.array([0.5, -0.3])
SIGMA0 = np.array([[0.5, 0.2], [0.2, 0.3]])


def _rotation_value():
    lam, U = np.linalg.eigh(SIGMA0)
    S = (U * np.sqrt(lam)) @ U.T
    J = np.array([[0.0, -1.0], [1.0, 0.0]])
    return S @ J @ np.linalg.inv(S)


def test_disk_grid_fills_the_disk():
    P = token_sample.disk_grid(0.7, 5, center=(1.0, -2.0))
    assert P.shape == (1 + 3 * 5 * 6, 2)
    r = np.linalg.norm(P - [1.0, -2.0], axis=1)
    assert r.max() == pytest.approx(0.7) and r.min() == 0.0
    # every point of the disk lies within one ring spacing of the grid
    rng = np.random.default_rng(0)
    u = rng.uniform(-0.7, 0.7, (4000, 2))
    u = u[np.linalg.norm(u, axis=1) <= 0.7] + [1.0, -2.0]
    gaps = np.min(np.linalg.norm(u[:, None] - P[None], axis=2), axis=1)
    assert gaps.max() < 0.7 / 5


@pytest.mark.parametrize("kwargs", [dict(radius=0.0, rings=2), dict(radius=1.0, rings=0),
                                    dict(radius=1.0, rings=2, center=(0.0, np.nan)),
                                    dict(radius=1.0, rings=2, center=(0.0, 0.0, 0.0))])
def test_disk_grid_rejects_bad_input(kwargs):
    with pytest.raises(ValueError):
        token_sample.disk_grid(**kwargs)


def test_fluctuation_covariance_against_monte_carlo():
    A, V = 0.6 * np.linalg.inv(SIGMA0), _rotation_value()
    Q = np.array([[0.0, 0.0], [0.3, -0.2], [-0.1, 0.4]])
    K = token_sample.fluctuation_covariance(A, V, ALPHA0, SIGMA0, Q)
    assert np.allclose(K, K.T) and np.linalg.eigvalsh(K).min() > -1e-12
    rng = np.random.default_rng(1)
    N = 400_000
    Y = ALPHA0 + rng.standard_normal((N, 2)) @ np.linalg.cholesky(SIGMA0).T
    Z = []
    for x in Q:
        a = A @ x
        q = a @ SIGMA0 @ a
        w = np.exp((Y - ALPHA0) @ a - q / 2)
        Z.append(w[:, None] * ((Y - ALPHA0 - SIGMA0 @ a) @ V.T))
    Z = np.concatenate(Z, axis=1)                     # (N, 6), query by query
    prod = Z[:, :, None] * Z[:, None, :]
    est, se = prod.mean(axis=0), prod.std(axis=0) / np.sqrt(N)
    assert np.all(np.abs(est - K) < 5 * se + 1e-12)


def test_uniform_field_errors_match_dense_softmax():
    A, V = np.linalg.inv(SIGMA0), _rotation_value()
    Q = token_sample.disk_grid(0.3, 2)
    e = token_sample.uniform_field_errors(A, V, ALPHA0, SIGMA0, Q, [50, 80], 2, [7, 3],
                                          n_jobs=1)
    for k, n in enumerate((50, 80)):
        for r in range(2):
            rng = np.random.default_rng([7, 3, k, r])
            X = ALPHA0 + rng.standard_normal((n, 2)) @ np.linalg.cholesky(SIGMA0).T
            L = Q @ A.T @ X.T
            P = np.exp(L - L.max(axis=1, keepdims=True))
            P /= P.sum(axis=1, keepdims=True)
            G = P @ X @ V.T
            target = (ALPHA0 + Q @ (SIGMA0 @ A).T) @ V.T
            assert e[k][r] == pytest.approx(np.max(np.sum((G - target) ** 2, axis=1)),
                                            rel=1e-10)


def test_sup_limit_closed_form_without_interaction():
    # A = 0: G(x) is the same Gaussian vector of covariance V Sigma V^T at every query
    V = _rotation_value()
    lim = token_sample.sup_limit(np.zeros((2, 2)), V, ALPHA0, SIGMA0,
                                 token_sample.disk_grid(0.5, 2), samples=20000, seed=3)
    assert abs(lim.mean - np.trace(V @ SIGMA0 @ V.T)) < 5 * lim.stderr


def test_scaled_sup_error_reaches_the_limit():
    # moderate interaction, n = 1500: n E e_n against the Gaussian-field limit
    A, V = 0.3 * np.linalg.inv(SIGMA0), _rotation_value()
    Q = token_sample.disk_grid(0.4, 3)
    lim = token_sample.sup_limit(A, V, ALPHA0, SIGMA0, Q, samples=40000, seed=4)
    e = token_sample.uniform_field_errors(A, V, ALPHA0, SIGMA0, Q, [1500], 600, 5, n_jobs=1)
    s = 1500 * e[0]
    assert abs(s.mean() - lim.mean) < 5 * np.sqrt(s.var(ddof=1) / s.size + lim.stderr**2)
    ls = np.log(s)
    assert abs(ls.mean() - lim.log_mean) < 5 * np.sqrt(ls.var(ddof=1) / ls.size
                                                        + lim.log_stderr**2)


def _chapter_errors():
    A, V = np.linalg.inv(SIGMA0), _rotation_value()
    Q = token_sample.disk_grid(0.3, 6)
    sizes = np.array([200, 400, 800, 1600, 3200])
    lim = token_sample.sup_limit(A, V, ALPHA0, SIGMA0, Q, samples=40000, seed=[11, 32])
    e = token_sample.uniform_field_errors(A, V, ALPHA0, SIGMA0, Q, sizes, 200, [11, 31, 0])
    return sizes, e, lim


def test_chapter_check_accepts_the_truth_and_rejects_wrong_claims():
    sizes, e, lim = _chapter_errors()
    z_ts = 5.0  # the notebook's band
    t = token_sample.uniform_rate_test(sizes, e, lim)
    assert abs(t.z_rate) < z_ts and abs(t.z_limit) < z_ts
    # a rate n^-0.4 instead of n^-1/2 (errors multiplied by n^0.1)
    slow = [x * (n / sizes[0]) ** 0.2 for n, x in zip(sizes, e, strict=True)]
    assert abs(token_sample.uniform_rate_test(sizes, slow, lim).z_rate) > z_ts
    # a constant off by 20 % (the limit claimed 1.2 times larger, or smaller)
    for factor in (1.2, 1 / 1.2):
        wrong = lim._replace(mean=factor * lim.mean,
                             log_mean=lim.log_mean + np.log(factor))
        assert abs(token_sample.uniform_rate_test(sizes, e, wrong).z_limit) > z_ts


def test_moment_exponent():
    assert token_sample.moment_exponent(0.0) == 0.5
    assert np.allclose(token_sample.moment_exponent(np.array([0.6, 1.0])),
                       [0.5 / 1.36, 0.25])
    for bad in (-0.1, np.inf):
        with pytest.raises(ValueError):
            token_sample.moment_exponent(bad)


def test_bad_input_raises():
    Q = token_sample.disk_grid(0.3, 1)
    with pytest.raises(ValueError, match="queries"):
        token_sample.fluctuation_covariance(np.eye(2), np.eye(2), ALPHA0, SIGMA0,
                                            np.zeros((2, 3)))
    with pytest.raises(ValueError, match="Sigma"):
        token_sample.uniform_field_errors(np.eye(2), np.eye(2), ALPHA0, -SIGMA0, Q, [10], 1, 0)
    with pytest.raises(ValueError, match="sizes"):
        token_sample.uniform_field_errors(np.eye(2), np.eye(2), ALPHA0, SIGMA0, Q, [0], 1, 0)
    with pytest.raises(ValueError, match="samples"):
        token_sample.sup_limit(np.eye(2), np.eye(2), ALPHA0, SIGMA0, Q, samples=1)
    with pytest.raises(ValueError, match="limit"):
        token_sample.uniform_rate_test([10, 20], [np.ones(3), np.ones(3)], 0.0)
    with pytest.raises(ValueError, match="log_mean"):
        token_sample.uniform_rate_test([10, 20], [np.ones(3), np.ones(3)],
                                       token_sample.SupLimit(1.0, 0.0, np.nan, 0.0))


def test_gaussian_max_mean_against_closed_forms_and_monte_carlo():
    assert token_sample.gaussian_max_mean(1) == pytest.approx(0.0, abs=1e-12)
    assert token_sample.gaussian_max_mean(2) == pytest.approx(1 / np.sqrt(np.pi), abs=1e-12)
    assert token_sample.gaussian_max_mean(3) == pytest.approx(1.5 / np.sqrt(np.pi), abs=1e-12)
    rng = np.random.default_rng(3)
    m = np.array([rng.standard_normal(1000).max() for _ in range(20000)])
    se = m.std(ddof=1) / np.sqrt(m.size)
    assert abs(m.mean() - token_sample.gaussian_max_mean(1000)) < 5 * se


def _hardmax_setting():
    A = np.array([[2.0, 0.7], [-0.4, 1.5]])   # not symmetric: A x and A^T x differ
    return A, ALPHA0, SIGMA0, np.array([0.6, -0.8])


def test_hardmax_law_selects_the_key_of_largest_score():
    """The hardmax column against the key maximising <A x, y_j> found directly (independent
    of the attention code), from the same draws; and the softmax columns between the
    hardmax value and, for a small strength, near the limit's projection t."""
    A, alpha, Sigma, x = _hardmax_setting()
    sizes, draws = [50, 2000], 30
    h = token_sample.hardmax_law(A, alpha, Sigma, sizes, draws, [5, 1], query=x,
                                 strengths=[0.5, 3.0], n_jobs=1)
    a = A @ x
    sig = np.sqrt(a @ Sigma @ a)
    chol = np.linalg.cholesky(Sigma)
    for k, n in enumerate(sizes):
        for r in range(draws):
            Y = alpha + np.random.default_rng([5, 1, k, r]).standard_normal((n, 2)) @ chol.T
            best = (Y[np.argmax(Y @ a)] - alpha) @ a / sig
            assert h.maxima[k, r] == pytest.approx(best, abs=(n - 1) / (np.e * 1e9) + 1e-9)
    # item 2 with the proof's slack, as in the chapter: the column at strength 1e9 misses
    # the largest score by at most (n - 1)/(e 1e9)
    slack = (np.array(sizes) - 1) / (np.e * 1e9)
    assert np.all(h.softmax <= h.maxima[:, :, None] + slack[:, None, None])
    assert abs(h.softmax[1, :, 0].mean() - 0.5) < 0.05   # n = 2000, t = 0.5: the LLN regime
    assert np.all(h.ks < h.threshold)


def test_max_law_test_accepts_the_law_and_rejects_wrong_ones():
    """Power of the chapter's check (400 draws per size, level 1e-6): maxima of n/2 or 2n
    Gaussians (the key count off by a factor 2), a standardisation 10 % off, and the key
    chosen by A^T x instead of A x are rejected; the true law is accepted."""
    rng = np.random.default_rng(11)
    sizes, R = [10, 100, 1000, 10000], 400
    true = [np.array([rng.standard_normal(n).max() for _ in range(R)]) for n in sizes]
    ks, thr = token_sample._max_law_ks(sizes, true, 1e-6)
    assert np.all(ks < thr)
    half = [np.array([rng.standard_normal(max(1, n // 2)).max() for _ in range(R)])
            for n in sizes]
    double = [np.array([rng.standard_normal(2 * n).max() for _ in range(R)]) for n in sizes]
    for wrong in (half, double, [1.1 * s for s in true]):
        ks, thr = token_sample._max_law_ks(sizes, wrong, 1e-6)
        assert np.any(ks > thr)   # the chapter's check fails if one size does
    A, alpha, Sigma, x = _hardmax_setting()
    a, b = A @ x, A.T @ x
    chol = np.linalg.cholesky(Sigma)
    transposed = []
    for n in sizes:
        s = []
        for _ in range(R):
            Y = rng.standard_normal((n, 2)) @ chol.T
            s.append(Y[np.argmax(Y @ b)] @ a / np.sqrt(a @ Sigma @ a))
        transposed.append(np.array(s))
    ks, thr = token_sample._max_law_ks(sizes, transposed, 1e-6)
    assert np.any(ks > thr)


@pytest.mark.parametrize("kwargs", [dict(query=[1.0, 0.0, 0.0]), dict(query=[np.nan, 1.0]),
                                    dict(strengths=[-1.0]), dict(strengths=[[1.0]]),
                                    dict(level=1.0), dict(level=0.0), dict(draws=1),
                                    dict(A=np.zeros((2, 2))), dict(sizes=[2 * 10**6])])
def test_hardmax_law_rejects_bad_input(kwargs):
    args = dict(A=np.eye(2), alpha=np.zeros(2), Sigma=np.eye(2), sizes=[10], draws=3, seed=0)
    args.update(kwargs)
    with pytest.raises(ValueError):
        token_sample.hardmax_law(**args)
