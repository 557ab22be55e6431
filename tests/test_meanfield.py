"""Tests of the mean-field rate tools of transformer_pde.meanfield (chapter 2)."""

import numpy as np
import pytest
from scipy import integrate, special
from transformer_pde import attention, meanfield
from transformer_pde import gaussian as G

ALPHA = np.array([0.5, -0.3])
SIGMA = np.array([[0.5, 0.2], [0.2, 0.3]])


def _gauss(m, s2):
    return lambda x: np.exp(-((x - m) ** 2) / (2 * s2)) / np.sqrt(2 * np.pi * s2)


@pytest.mark.parametrize("a, m, s2", [(0.4, 0.3, 1.2), (-1.0, -0.2, 0.6), (1.2, 0.1, 0.5)])
def test_normalised_weight_second_moment_one_dimension(a, m, s2):
    # d = 1, rho = |a| s2 < 1/sqrt(2): E_{x,y} w(x, y)^2 with the weight built from its
    # definition, w = exp(a x y) / E_y exp(a x y), E_y exp(a x y) = exp(a x m + a^2 x^2 s2 / 2),
    # by two-dimensional quadrature.
    p = _gauss(m, s2)
    s = np.sqrt(s2)

    def integrand(y, x):
        w = np.exp(a * x * y - a * x * m - 0.5 * a**2 * x**2 * s2)
        return w**2 * p(x) * p(y)

    ref, _ = integrate.dblquad(integrand, m - 16 * s, m + 16 * s, m - 16 * s, m + 16 * s,
                               epsabs=0, epsrel=1e-10)
    assert meanfield.normalised_weight_second_moment([[a]], [m], [[s2]]) == pytest.approx(
        ref, rel=1e-7)


def test_normalised_weight_second_moment_threshold_and_monte_carlo():
    S_inv = np.linalg.inv(SIGMA)
    assert np.isfinite(meanfield.normalised_weight_second_moment(0.7 * S_inv, ALPHA, SIGMA))
    assert meanfield.normalised_weight_second_moment(0.71 * S_inv, ALPHA, SIGMA) == np.inf
    # Monte Carlo over x of E_y w^2 = exp(x^T A^T Sigma A x) (finite variance for rho < 1/2):
    # within 5 standard errors.
    A = np.array([[0.4, -0.3], [0.2, 0.5]])
    rng = np.random.default_rng(3)
    x = ALPHA + rng.standard_normal((400_000, 2)) @ np.linalg.cholesky(SIGMA).T
    vals = np.exp(np.einsum("ni,ij,nj->n", x, A.T @ SIGMA @ A, x))
    got = meanfield.normalised_weight_second_moment(A, ALPHA, SIGMA)
    assert abs(got - vals.mean()) < 5 * vals.std() / np.sqrt(vals.size)


def _key_projection_quadrature_1d(a, m, s2):
    # d = 1: bar w(y) = E_x w(x, y) by quadrature over x, with the weight built from its
    # definition w = exp(a x y) / E_y exp(a x y), E_y exp(a x y) = exp(a x m + a^2 x^2 s2 / 2),
    # then E_y bar w(y)^2 by quadrature over y.
    p = _gauss(m, s2)
    s = np.sqrt(s2)

    def bar_w(y):
        f = lambda x: np.exp(a * x * (y - m) - 0.5 * a**2 * x**2 * s2) * p(x)  # noqa: E731
        centre = (m + a * s2 * (y - m)) / (1 + a**2 * s2**2)  # mean of the tilted x
        return integrate.quad(f, centre - 20 * s, centre + 20 * s, epsabs=0, epsrel=1e-12,
                              limit=200)[0]

    # the integrand peaks at y - m = 2 a s2 m / (1 - (a s2)^2) (at most 6 s here) and has
    # decayed below e^-33 of its peak 25 s further (rho <= 0.9)
    peak = m + 2 * a * s2 * m / (1 - (a * s2) ** 2)
    ref, _ = integrate.quad(lambda y: bar_w(y) ** 2 * p(y), peak - 25 * s, peak + 25 * s,
                            epsabs=0, epsrel=1e-10, limit=400)
    return ref


# the first three points have alpha != 0 (the old formula, which ignored the mean, gave
# 1.0328, 1.0719 and 1.0041 there); the last three are the earlier centred cases, and one
# strong interaction (rho = 0.9) away from the origin
@pytest.mark.parametrize("a, m, s2", [(0.5, 1.0, 1.0), (0.3, -0.7, 2.0), (0.6, 0.5, 0.5),
                                      (1.5, 0.0, 0.6), (-1.8, 0.0, 0.5), (-1.8, 0.4, 0.5)])
def test_key_projection_second_moment_one_dimension(a, m, s2):
    ref = _key_projection_quadrature_1d(a, m, s2)
    assert meanfield.key_projection_second_moment([[a]], [m], [[s2]]) == pytest.approx(
        ref, rel=1e-7)


def test_key_projection_second_moment_depends_on_the_mean():
    # the values the quadrature gave at alpha != 0, to its four digits
    got = [meanfield.key_projection_second_moment([[a]], [m], [[s2]])
           for a, m, s2 in [(0.5, 1.0, 1.0), (0.3, -0.7, 2.0), (0.6, 0.5, 0.5)]]
    assert got == pytest.approx([1.4414, 1.2302, 1.0550], abs=6e-5)


def test_key_projection_second_moment_two_dimensions():
    # d = 2, general A and alpha: bar w(y) by a tensor Gauss-Hermite rule over the query
    # (x = alpha + L u, L the Cholesky factor, w from its definition), then E_y bar w^2 by the
    # trapezoid rule on a square of whitened keys (spectrally accurate for a smooth integrand
    # decaying like exp(-(1/2 - rho^2/(1 + rho^2)) |v|^2), rho = 0.6 here).
    A = np.array([[0.9, -0.5], [0.4, 1.1]])
    A = 0.6 * A / meanfield.interaction_strength(A, SIGMA)
    alpha = np.array([0.8, -0.6])
    L = np.linalg.cholesky(SIGMA)
    t, wt = np.polynomial.hermite_e.hermegauss(40)
    U = np.stack(np.meshgrid(t, t, indexing="ij"), -1).reshape(-1, 2)
    Wu = np.outer(wt, wt).ravel() / (2 * np.pi)
    X = alpha + U @ L.T
    AX = X @ A.T
    log_norm = AX @ alpha + 0.5 * np.einsum("mi,ij,mj->m", AX, SIGMA, AX)  # log E_y e^<Ax,y>
    h = 0.2
    v = np.arange(-14.0, 14.0 + h / 2, h)
    V2 = np.stack(np.meshgrid(v, v, indexing="ij"), -1).reshape(-1, 2)
    total = 0.0
    for chunk in np.array_split(V2, 10):
        Y = alpha + chunk @ L.T
        bar_w = np.exp(Y @ AX.T - log_norm) @ Wu
        total += np.sum(bar_w**2 * np.exp(-0.5 * np.sum(chunk**2, 1))) * h * h / (2 * np.pi)
    got = meanfield.key_projection_second_moment(A, alpha, SIGMA)
    assert got == pytest.approx(total, rel=1e-8)
    assert got > 1.05 * meanfield.key_projection_second_moment(A, np.zeros(2), SIGMA)


def test_key_projection_threshold():
    S_inv = np.linalg.inv(SIGMA)
    assert np.isfinite(meanfield.key_projection_second_moment(0.99 * S_inv, ALPHA, SIGMA))
    assert meanfield.key_projection_second_moment(1.0 * S_inv, ALPHA, SIGMA) == np.inf
    assert meanfield.key_projection_second_moment(np.zeros((2, 2)), ALPHA, SIGMA) == 1.0


def test_tail_exponent_thresholds():
    gw, _, _ = meanfield.weight_tail_exponents(1 / np.sqrt(2))
    _, gk, _ = meanfield.weight_tail_exponents(1.0)
    _, _, ge = meanfield.weight_tail_exponents(0.5)
    assert (gw, gk, ge) == pytest.approx((2.0, 2.0, 2.0), rel=1e-12)
    arr = meanfield.weight_tail_exponents(np.array([0.5, 1.0]))
    assert arr[0].shape == (2,)
    with pytest.raises(ValueError, match="rho"):
        meanfield.weight_tail_exponents(0.0)


@pytest.mark.parametrize("rho", [0.6, 1.0])
def test_pair_weight_tail_exponent_against_quadrature(rho):
    # Independent reference: for B = rho I in d = 2, log w = rho r Z - rho^2 r^2 / 2 with
    # r^2 ~ chi^2_2 (density e^{-s/2}/2) and Z standard Gaussian, so
    # P(log w > L) = int Phi_bar((L + rho^2 s / 2) / (rho sqrt(s))) e^{-s/2}/2 ds.
    # The slope of log P against L tends to -gamma_w, with an O(log L / L) correction.
    def log_tail(L):
        def h(s):  # log of the integrand
            return special.log_ndtr(-(L + 0.5 * rho**2 * s) / (rho * np.sqrt(s))) - s / 2

        grid = np.linspace(1e-6, 20 * L, 200_001)
        peak = grid[np.argmax(h(grid))]
        top = h(peak)
        val, _ = integrate.quad(lambda s: np.exp(h(s) - top), 1e-9, 20 * L, points=[peak],
                                limit=400, epsabs=0, epsrel=1e-10)
        return top + np.log(val / 2)

    L1, L2 = 400.0, 800.0
    slope = (log_tail(L2) - log_tail(L1)) / (L2 - L1)
    assert -slope == pytest.approx(meanfield.weight_tail_exponents(rho)[0], abs=0.01)


def _loop_rate(X, A, V):
    # softmax by loops, and dSigma by central differences of the biased covariance
    n = len(X)
    G = np.empty_like(X)
    for i in range(n):
        w = np.array([np.exp(A @ X[i] @ X[j]) for j in range(n)])
        G[i] = V @ (w @ X) / w.sum()
    h = 1e-6
    cov = lambda Y: np.cov(Y.T, bias=True)  # noqa: E731
    return (cov(X + h * G) - cov(X - h * G)) / (2 * h)


def test_meanfield_errors_against_loops():
    A = np.array([[0.7, 0.2], [-0.3, 0.5]])
    V = np.array([[0.2, -1.0], [0.8, 0.1]])
    errs, field = meanfield.meanfield_errors(A, V, ALPHA, SIGMA, [7, 12], [2, 1], seed=[5])
    assert [e.shape for e in errs] == [(2,), (1,)]
    target = V @ SIGMA @ A @ SIGMA
    target = target + target.T
    for k, (n, e) in enumerate(zip([7, 12], errs, strict=True)):
        for r in range(e.size):
            X = ALPHA + np.random.default_rng([5, k, r]).standard_normal((n, 2)) \
                @ np.linalg.cholesky(SIGMA).T
            ref = np.sum((_loop_rate(X, A, V) - target) ** 2)
            assert e[r] == pytest.approx(ref, rel=1e-6)
            G = attention.softmax(X, A, V)
            ref_field = np.mean([np.sum((G[i] - V @ (ALPHA + SIGMA @ A @ X[i])) ** 2)
                                 for i in range(n)])
            assert field[k][r] == pytest.approx(ref_field, rel=1e-12)


def test_meanfield_errors_same_with_one_or_two_jobs():
    # every draw is seeded by its own key, so the jobs and the blocks do not matter
    A = np.array([[0.7, 0.2], [-0.3, 0.5]])
    V = np.array([[0.2, -1.0], [0.8, 0.1]])
    one = meanfield.meanfield_errors(A, V, ALPHA, SIGMA, [9, 30], [5, 3], seed=[4, 2], n_jobs=1)
    two = meanfield.meanfield_errors(A, V, ALPHA, SIGMA, [9, 30], [5, 3], seed=[4, 2], n_jobs=2)
    for a, b in zip(one[0] + one[1], two[0] + two[1], strict=True):
        np.testing.assert_array_equal(a, b)


def test_meanfield_errors_zero_interaction():
    # A = 0: every token moves with V xbar, the empirical covariance does not move, and the
    # mean-field rate is V Sigma 0 Sigma + ... = 0.
    errs, _ = meanfield.meanfield_errors(np.zeros((2, 2)), np.eye(2), ALPHA, SIGMA, [50], 3,
                                         seed=1)
    assert np.all(errs[0] < 1e-28)


def test_local_rms_slopes():
    rng = np.random.default_rng(0)
    z = rng.exponential(size=200)
    sizes = [10, 40, 160]
    errs = [z / n for n in sizes]  # the same draws rescaled: RMS exactly n^-1/2
    slopes, sds = meanfield.local_rms_slopes(sizes, errs)
    assert slopes == pytest.approx([-0.5, -0.5], abs=1e-12)
    assert np.all(sds > 0)
    with pytest.raises(ValueError, match="sizes"):
        meanfield.local_rms_slopes([10, 5], errs[:2])
    with pytest.raises(ValueError, match="squared_errors"):
        meanfield.local_rms_slopes(sizes, errs[:2])
    with pytest.raises(ValueError, match="squared_errors"):
        meanfield.local_rms_slopes(sizes[:2], [np.array([1.0]), np.array([1.0, 2.0])])


def test_local_rms_slopes_median_and_jobs():
    rng = np.random.default_rng(1)
    sizes = [10, 40, 160]
    z = [rng.exponential(size=101) for _ in sizes]
    errs = [e / n**1.4 for e, n in zip(z, sizes, strict=True)]  # medians: exactly n^-1.4
    med = [np.median(e) for e in errs]
    slopes, sds = meanfield.local_rms_slopes(sizes, errs, center="median", n_boot=50, seed=3)
    ref = 0.5 * np.diff(np.log(med)) / np.diff(np.log(sizes))
    assert slopes == pytest.approx(ref, rel=1e-12)
    _, sds2 = meanfield.local_rms_slopes(sizes, errs, center="median", n_boot=50, seed=3,
                                         n_jobs=2)
    np.testing.assert_array_equal(sds, sds2)
    with pytest.raises(ValueError, match="center"):
        meanfield.local_rms_slopes(sizes, errs, center="mode")


def test_error_summary_against_direct_computation():
    rng = np.random.default_rng(2)
    sizes = [10, 20]
    errs = [rng.pareto(2.5, size=250), rng.exponential(size=99)]
    out = meanfield.error_summary(sizes, errs)
    for k, (n, e) in enumerate(zip(sizes, errs, strict=True)):
        top = np.sort(e)[-int(np.ceil(e.size / 100)):]  # 3 and 1 largest draws
        assert out.scaled_mean[k] == pytest.approx(n * np.mean(e), rel=1e-12)
        assert out.scaled_stderr[k] == pytest.approx(
            n * np.sqrt(np.sum((e - e.mean()) ** 2) / (e.size - 1) / e.size), rel=1e-12)
        assert out.scaled_median[k] == pytest.approx(n * np.median(e), rel=1e-12)
        assert out.top_share[k] == pytest.approx(top.sum() / e.sum(), rel=1e-12)
        assert out.max_over_median[k] == pytest.approx(e.max() / np.median(e), rel=1e-12)
    with pytest.raises(ValueError, match="squared_errors"):
        meanfield.error_summary(sizes, [np.ones(3), -np.ones(3)])


def test_bad_inputs():
    with pytest.raises(ValueError, match="Sigma"):
        meanfield.normalised_weight_second_moment(np.eye(2), ALPHA, -SIGMA)
    with pytest.raises(ValueError, match="A"):
        meanfield.key_projection_second_moment(np.eye(3), ALPHA, SIGMA)
    with pytest.raises(ValueError, match="sizes"):
        meanfield.meanfield_errors(np.eye(2), np.eye(2), ALPHA, SIGMA, [0], 2, seed=0)
    with pytest.raises(ValueError, match="draws"):
        meanfield.meanfield_errors(np.eye(2), np.eye(2), ALPHA, SIGMA, [5], 0, seed=0)


def _rate_functional(X, w, A, V):
    # F(mu) = C + C^T, C = sum_k w_k (x_k - m) Gamma_k^T for a weighted point cloud
    G = attention.softmax(X, A, V, weights=w)
    m = w @ X
    C = (X - m).T @ (w[:, None] * G)
    return C + C.T


def test_covariance_rate_influence_against_finite_differences():
    # Independent reference: the derivative of F along (1 - eps) mu_N + eps delta_y for a
    # large Gaussian sample mu_N (one-sided, eps = 1e-6). The sample's influence function
    # differs from the Gaussian one by O(N^-1/2): 10% of its norm at N = 6000.
    rng = np.random.default_rng(11)
    A = 0.3 * np.linalg.inv(SIGMA) + np.array([[0.0, 0.2], [-0.1, 0.0]])
    V = np.array([[0.4, -0.9], [0.7, 0.2]])
    N = 6000
    X = ALPHA + rng.standard_normal((N, 2)) @ np.linalg.cholesky(SIGMA).T
    w = np.full(N, 1 / N)
    F0 = _rate_functional(X, w, A, V)
    Ys = np.array([[0.9, 0.2], [-0.4, -0.8], [1.5, -1.0]])
    base, tilt, log_Z = meanfield.covariance_rate_influence(A, V, ALPHA, SIGMA, Ys)
    eps = 1e-6
    for y, b, t, lz in zip(Ys, base, tilt, log_Z, strict=True):
        Xe = np.vstack([X, y])
        we = np.concatenate([(1 - eps) * w, [eps]])
        fd = (_rate_functional(Xe, we, A, V) - F0) / eps
        got = b + np.exp(lz) * t
        assert np.linalg.norm(got - fd) < 0.1 * np.linalg.norm(fd), (y, got, fd)


def test_covariance_rate_influence_has_mean_zero_and_variance_threshold():
    # E_y IF(y) = 0 (the derivative of F along mu itself), by the same polar quadrature
    A = 0.5 * np.linalg.inv(SIGMA)
    V = np.array([[0.4, -0.9], [0.7, 0.2]])
    S = np.linalg.cholesky(SIGMA)
    r = np.linspace(0, 14, 3000)
    th = np.linspace(0, 2 * np.pi, 96, endpoint=False)
    R, TH = np.meshgrid(r, th, indexing="ij")
    U = np.stack([R * np.cos(TH), R * np.sin(TH)], -1).reshape(-1, 2)
    base, tilt, log_Z = meanfield.covariance_rate_influence(A, V, ALPHA, SIGMA,
                                                             ALPHA + U @ S.T)
    IF = base + np.exp(log_Z)[:, None, None] * tilt
    dens = np.exp(-0.5 * np.sum(U**2, 1)) / (2 * np.pi)
    f = (IF * dens[:, None, None]).reshape(R.shape + (2, 2)) * R[..., None, None]
    f = f.mean(axis=1) * 2 * np.pi
    mean = np.sum((f[1:] + f[:-1]) / 2 * np.diff(r)[:, None, None], axis=0)
    # trapezoid rule in r with step h = 14/3000: error O(h^2) ~ 2e-5 times the integrand's
    # curvature, against an influence function of size ~2
    assert np.abs(mean).max() < 1e-5
    var = meanfield.covariance_rate_variance(A, V, ALPHA, SIGMA)
    # the quadrature has converged: four times the radii and a longer tail move it by less
    # than 1e-6 (relative); the angular rule (periodic, smooth integrand) is exact to rounding
    # already at half the default angles
    assert var == pytest.approx(meanfield.covariance_rate_variance(
        A, V, ALPHA, SIGMA, radial=8000, tail=80), rel=1e-6)
    assert var == pytest.approx(meanfield.covariance_rate_variance(
        A, V, ALPHA, SIGMA, angles=64), rel=1e-12)
    assert meanfield.covariance_rate_variance(np.linalg.inv(SIGMA), V, ALPHA, SIGMA) == np.inf
    with pytest.raises(ValueError, match="d = 2"):
        meanfield.covariance_rate_variance(np.eye(3), np.eye(3), np.zeros(3), np.eye(3))


@pytest.mark.parametrize("a, m, s2, v", [(0.4, 0.3, 1.2, 0.7), (-1.0, -0.2, 0.6, -1.3)])
def test_field_error_variance_one_dimension(a, m, s2, v):
    # d = 1, rho = |a| s2 < 1/sqrt(2): E_{x,y} w^2 (v (y - m - s2 a x))^2 by quadrature, with
    # w built from its definition
    p = _gauss(m, s2)
    s = np.sqrt(s2)

    def integrand(y, x):
        w = np.exp(a * x * y - a * x * m - 0.5 * a**2 * x**2 * s2)
        return w**2 * (v * (y - m - s2 * a * x)) ** 2 * p(x) * p(y)

    ref, _ = integrate.dblquad(integrand, m - 16 * s, m + 16 * s, m - 16 * s, m + 16 * s,
                               epsabs=0, epsrel=1e-10)
    got = meanfield.field_error_variance([[a]], [[v]], [m], [[s2]])
    assert got == pytest.approx(ref, rel=1e-7)
    assert meanfield.field_error_variance([[1.0 / s2]], [[v]], [m], [[s2]]) == np.inf


RATE_SIZES, RATE_DRAWS = np.array([100, 200, 400, 800]), np.array([1600, 800, 400, 200])


def _scaled_errors(rng, p, c=0.7, tail=8.0):
    """Chapter 2's design: squared errors c n^(2p) Z, Z of mean 1, a chi^2_3 times a Pareto
    factor (tail index `tail`, the heavy tail of the softmax weights)."""
    out = []
    for n, R in zip(RATE_SIZES, RATE_DRAWS, strict=True):
        Z = rng.chisquare(3, R) / 3 * (1 + rng.pareto(tail, R)) * (tail - 1) / tail
        out.append(c * n ** (2.0 * p) * Z)
    return out


def test_scaled_error_test_against_direct_computation():
    rng = np.random.default_rng(12)
    errs = _scaled_errors(rng, -0.5)
    t = meanfield.scaled_error_test(RATE_SIZES, errs, 0.7 / 100 * 100)
    scaled = [n * e.mean() for n, e in zip(RATE_SIZES, errs, strict=True)]
    ses = [n * e.std(ddof=1) / np.sqrt(e.size) for n, e in zip(RATE_SIZES, errs, strict=True)]
    assert t.scaled_mean == pytest.approx(np.mean(scaled), rel=1e-12)
    assert t.stderr == pytest.approx(np.sqrt(np.sum(np.square(ses))) / 4, rel=1e-12)
    assert t.z_limit == pytest.approx((t.scaled_mean - 0.7) / t.stderr, rel=1e-12)
    fit = G.rms_error_rate(RATE_SIZES, np.array([e[:200] for e in errs]))
    assert (t.exponent, t.exponent_stderr) == pytest.approx((fit.exponent, fit.stderr), rel=1e-12)
    assert t.z_rate == pytest.approx((fit.exponent + 0.5) / fit.stderr, rel=1e-12)
    assert np.isnan(meanfield.scaled_error_test(RATE_SIZES, errs, np.inf).z_limit)
    with pytest.raises(ValueError, match="limit"):
        meanfield.scaled_error_test(RATE_SIZES, errs, -1.0)


def test_scaled_error_test_rejects_a_wrong_rate_and_a_wrong_constant():
    # chapter 2's assertions at rho = 0.25: |z_limit| < 5 and |z_rate| < 5. On synthetic errors
    # with the chapter's sizes and draws, the right rate and constant pass every time; errors
    # decaying like n^-0.3, or a linearised limit 25% too large or too small, fail every time
    rng = np.random.default_rng(13)
    for _ in range(200):
        right = meanfield.scaled_error_test(RATE_SIZES, _scaled_errors(rng, -0.5), 0.7)
        assert abs(right.z_limit) < 5 and abs(right.z_rate) < 5
        slow = meanfield.scaled_error_test(RATE_SIZES, _scaled_errors(rng, -0.3, 0.7 * 100**0.4),
                                           0.7)
        assert abs(slow.z_rate) >= 5
        errs = _scaled_errors(rng, -0.5)
        for factor in (1.25, 0.8):
            assert abs(meanfield.scaled_error_test(RATE_SIZES, errs, 0.7 * factor).z_limit) >= 5
