"""Tests of transformer_pde.gaussian: the moment ODEs of Gaussian solutions.

References used: particle simulations with the library's attention (Monte Carlo, with a
z-test over independent replicates), finite differences of the particle flow, the closed
form for V = I, dense linear algebra, the SymPy expressions of transformer_pde.symbolic.
"""

import joblib
import numpy as np
import pytest
from transformer_pde import attention, dynamics
from transformer_pde import gaussian as G
from transformer_pde.fitting import fit_power_law


def _spd(rng, d, floor=0.3, scale=0.6):
    L = scale * rng.normal(size=(d, d))
    return L @ L.T + floor * np.eye(d)


def _strength(Sigma, A):
    R = G.psd_sqrt(Sigma)
    return np.linalg.norm(R @ A @ R, 2)


def _problem(seed, d=2, strength=0.3):
    """Random moments and parameters with |Sigma^1/2 A Sigma^1/2|_2 = strength.

    Below 1/sqrt(2) the attention weights have finite variance under the Gaussian, so the
    Monte Carlo error is O(n^-1/2) with a moderate constant.
    """
    rng = np.random.default_rng(seed)
    alpha = 0.4 * rng.normal(size=d)
    Sigma = _spd(rng, d)
    Q = rng.normal(size=(d, d))
    K = rng.normal(size=(d, d))
    c = np.sqrt(strength / _strength(Sigma, K.T @ Q))
    V = rng.normal(size=(d, d))
    return rng, alpha, Sigma, c * Q, c * K, V


def _mc_check(rng, alpha, Sigma, velocity, exact, *, n=3000, reps=8, z=4.5):
    """Monte Carlo z-test: the replicate mean of the particle rates is within z standard errors.

    ``velocity(X)`` is the attention evaluated on the particles; ``exact`` = (dalpha, dSigma).
    Also returns the largest z-score, so a test can show it is far from trivial.
    """
    samples = []
    for _ in range(reps):
        X = rng.multivariate_normal(alpha, Sigma, size=n)
        da, dS = G.particle_moment_rates(X, velocity(X))
        samples.append(np.concatenate([da, dS[np.triu_indices(len(alpha))]]))
    samples = np.array(samples)
    target = np.concatenate([exact[0], exact[1][np.triu_indices(len(alpha))]])
    se = samples.std(axis=0, ddof=1) / np.sqrt(reps)
    zs = np.abs(samples.mean(axis=0) - target) / se
    assert np.all(zs < z), (zs, samples.mean(axis=0), target)
    return zs


# --------------------------------------------------------------------------------------
# softmax
# --------------------------------------------------------------------------------------

def test_softmax_field_matches_attention_at_query_points():
    rng, alpha, Sigma, Q, K, V = _problem(0)
    A = K.T @ Q
    X = rng.multivariate_normal(alpha, Sigma, size=40000)
    Y = alpha + rng.normal(size=(20, 2))
    M, b = G.softmax_field(alpha, Sigma, A, V)
    emp = attention.softmax(X, A, V, queries=Y)
    err = np.abs(emp - (Y @ M.T + b)).max()
    assert err < 0.05 * np.abs(Y @ M.T + b).max()
    # a wrong field (transposed A) is clearly rejected at this sample size
    Mw = V @ Sigma @ A.T
    assert np.abs(emp - (Y @ Mw.T + b)).max() > 5 * err


def test_softmax_rhs_against_particles():
    rng, alpha, Sigma, Q, K, V = _problem(1)
    A = K.T @ Q
    exact = G.softmax_rhs(alpha, Sigma, A, V)
    _mc_check(rng, alpha, Sigma, lambda X: attention.softmax(X, A, V), exact)


def test_softmax_rhs_against_finite_differences_of_particle_flow():
    rng, alpha, Sigma, Q, K, V = _problem(2)
    A = K.T @ Q
    X0 = rng.multivariate_normal(alpha, Sigma, size=2000)
    h = 1e-4
    field = dynamics.attention_field(attention.softmax, A=A, V=V)
    traj = dynamics.integrate(field, X0, [0.0, h, 2 * h], method="rk4")
    means = traj.mean(axis=1)
    covs = np.array([np.cov(X.T, bias=True) for X in traj])
    # second-order one-sided differences at t = 0
    fd_alpha = (-3 * means[0] + 4 * means[1] - means[2]) / (2 * h)
    fd_Sigma = (-3 * covs[0] + 4 * covs[1] - covs[2]) / (2 * h)
    pa, pS = G.particle_moment_rates(X0, attention.softmax(X0, A, V))
    # the empirical rates are the exact derivatives of the particle moments
    np.testing.assert_allclose(fd_alpha, pa, atol=1e-6)
    np.testing.assert_allclose(fd_Sigma, pS, atol=1e-6)


def test_softmax_rhs_formula_dense():
    rng, alpha, Sigma, Q, K, V = _problem(3, d=4)
    A = K.T @ Q
    da, dS = G.softmax_rhs(alpha, Sigma, A, V)
    np.testing.assert_allclose(da, V @ (np.eye(4) + Sigma @ A) @ alpha, rtol=1e-13)
    np.testing.assert_allclose(dS, V @ Sigma @ A @ Sigma + Sigma @ A.T @ Sigma @ V.T, rtol=1e-13)
    assert np.array_equal(dS, dS.T)


# --------------------------------------------------------------------------------------
# integrator and closed form (V = I)
# --------------------------------------------------------------------------------------

def test_closed_form_against_integrator_and_blowup_time():
    rng = np.random.default_rng(4)
    d = 3
    A = rng.normal(size=(d, d)) + np.eye(d)  # A_s has a positive eigenvalue
    Sigma0 = _spd(rng, d)
    t_star = G.softmax_identity_blowup_time(Sigma0, A)
    assert np.isfinite(t_star) and t_star > 0
    times = np.linspace(0.0, 2 * t_star, 41)
    res = G.integrate_moments(G.softmax_rhs, np.zeros(d), Sigma0, times, args=(A, np.eye(d)))
    assert res.status == "blowup"
    assert abs(res.t_stop - t_star) < 1e-6 * t_star
    inside = res.times[:-1]
    assert inside.size == np.sum(times < t_star)
    closed = G.softmax_identity_covariance(Sigma0, A, inside)
    rel = np.linalg.norm(res.Sigma[:-1] - closed, axis=(1, 2)) / np.linalg.norm(closed, axis=(1, 2))
    assert rel.max() < 1e-7
    # closed form satisfies d/dt Sigma^{-1} = -2 A_s (finite differences)
    h = 1e-6 * t_star
    t = 0.5 * t_star
    P = np.linalg.inv(G.softmax_identity_covariance(Sigma0, A, np.array([t - h, t + h])))
    np.testing.assert_allclose((P[1] - P[0]) / (2 * h), -(A + A.T), atol=1e-5)


def test_blowup_time_is_infinite_for_negative_semidefinite_symmetric_part():
    rng = np.random.default_rng(5)
    Q = rng.normal(size=(1, 3))
    A = -Q.T @ Q + np.array([[0, 1, 0], [-1, 0, 0], [0, 0, 0]])  # skew part does not matter
    assert G.softmax_identity_blowup_time(_spd(rng, 3), A) == np.inf


@pytest.mark.parametrize("d, r", [(2, 1), (3, 1), (4, 2), (5, 2)])
def test_convergence_to_rank_d_minus_rank_P(d, r):
    rng = np.random.default_rng(10 + d)
    Q = rng.normal(size=(r, d))
    A = -Q.T @ Q  # K = -Q, A_s = -P with rank(P) = r
    Sigma0 = _spd(rng, d)
    times = np.concatenate([[0.0], np.geomspace(1e-3, 1e10, 60)])
    res = G.integrate_moments(G.softmax_rhs, np.zeros(d), Sigma0, times, args=(A, np.eye(d)))
    assert res.status == "converged"
    assert res.rank == d - r
    limit = G.softmax_identity_limit(Sigma0, A)
    assert np.linalg.matrix_rank(limit) == d - r
    assert np.linalg.norm(res.limit - limit) < 1e-5 * np.linalg.norm(limit)


def test_sigma_stays_symmetric_psd_and_formulations_agree():
    rng = np.random.default_rng(6)
    d = 3
    A = rng.normal(size=(d, d))
    V = rng.normal(size=(d, d))
    Sigma0 = _spd(rng, d)
    # nearly singular start: the factor formulation keeps PSD exactly
    u = rng.normal(size=d)
    Sigma0 = np.outer(u, u) + 1e-9 * np.eye(d)
    times = np.linspace(0, 0.2, 21)
    fac = G.integrate_moments(G.softmax_rhs, np.ones(d), Sigma0, times, args=(A, V))
    for S in fac.Sigma:
        assert np.array_equal(S, S.T)
        assert np.linalg.eigvalsh(S)[0] >= -1e-14 * np.linalg.norm(S)

    def plain(alpha, Sigma, A, V):  # no affine_field attribute: covariance formulation
        return G.softmax_rhs(alpha, Sigma, A, V)

    # the covariance formulation needs a well-conditioned start (trial steps may leave the cone)
    Sigma0 = _spd(rng, d)
    fac = G.integrate_moments(G.softmax_rhs, np.ones(d), Sigma0, times, args=(A, V))
    cov = G.integrate_moments(plain, np.ones(d), Sigma0, times, args=(A, V))
    k = min(len(fac.times), len(cov.times))
    np.testing.assert_allclose(cov.Sigma[:k], fac.Sigma[:k], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(cov.alpha[:k], fac.alpha[:k], rtol=1e-6, atol=1e-9)


def test_finished_status_and_mean_closed_form():
    # A = 0: Sigma is constant (stationary) and alpha(t) = e^{tV} alpha0 for softmax
    d = 2
    V = np.array([[0.0, -1.0], [1.0, 0.0]])
    res = G.integrate_moments(G.softmax_rhs, np.array([1.0, 0.0]), np.eye(d),
                              np.linspace(0, 1, 5), args=(np.zeros((d, d)), V))
    assert res.status == "converged" and res.t_stop == 0.0 and res.rank == 2
    A = np.array([[0.0, 0.3], [-0.3, 0.0]])  # skew A: Sigma' = V S A S + ..., with V = I zero
    res = G.integrate_moments(G.softmax_rhs, np.array([1.0, 0.0]), np.eye(d),
                              np.linspace(0, 1, 5), args=(A, np.eye(d)), conv_tol=1e-12)
    assert res.status == "converged"
    rot = G.integrate_moments(G.softmax_rhs, np.array([1.0, 0.0]), np.diag([1.0, 2.0]),
                              np.linspace(0, 1, 5), args=(0.1 * np.eye(d), V))
    assert rot.status == "finished" and rot.t_stop == 1.0 and rot.limit is None
    assert rot.Sigma.shape == (5, 2, 2) and rot.alpha.shape == (5, 2)


# --------------------------------------------------------------------------------------
# bad inputs
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("Sigma, match", [
    (np.array([[1.0, 0.5], [0.0, 1.0]]), "symmetric"),
    (np.array([[1.0, 2.0], [2.0, 1.0]]), "positive semi-definite"),
    (np.eye(3), "shape"),
    (np.array([[np.nan, 0.0], [0.0, 1.0]]), "non-finite"),
])
def test_bad_covariance_raises(Sigma, match):
    with pytest.raises(ValueError, match=match):
        G.softmax_rhs(np.zeros(2), Sigma, np.eye(2), np.eye(2))
    with pytest.raises(ValueError, match="Sigma0"):
        G.integrate_moments(G.softmax_rhs, np.zeros(2), Sigma, [0, 1], args=(np.eye(2), np.eye(2)))


def test_bad_shapes_and_options_raise():
    a, S = np.zeros(2), np.eye(2)
    with pytest.raises(ValueError, match="alpha"):
        G.softmax_rhs(np.zeros((2, 1)), S, np.eye(2), np.eye(2))
    with pytest.raises(ValueError, match="A must have shape"):
        G.softmax_rhs(a, S, np.eye(3), np.eye(2))
    with pytest.raises(ValueError, match="V must have shape"):
        G.softmax_rhs(a, S, np.eye(2), np.ones((3, 2)))
    with pytest.raises(ValueError, match="times"):
        G.integrate_moments(G.softmax_rhs, a, S, [0, 1, 1], args=(np.eye(2), np.eye(2)))
    with pytest.raises(ValueError, match="formulation"):
        G.integrate_moments(G.softmax_rhs, a, S, [0, 1], args=(np.eye(2), np.eye(2)),
                            formulation="euler")
    with pytest.raises(ValueError, match="t must be below"):
        G.softmax_identity_covariance(S, np.eye(2), 1.0)
    with pytest.raises(ValueError, match="negative semi-definite"):
        G.softmax_identity_limit(S, np.eye(2))


# --------------------------------------------------------------------------------------
# L2, multi-head, Sinkhorn
# --------------------------------------------------------------------------------------

def test_l2_field_matches_attention_and_dense_formula():
    rng, alpha, Sigma, Q, K, V = _problem(20)
    X = rng.multivariate_normal(alpha, Sigma, size=40000)
    Y = alpha + rng.normal(size=(20, 2))
    M, b = G.l2_field(alpha, Sigma, Q, K, V)
    emp = attention.l2(X, Q, K, V, queries=Y)
    assert np.abs(emp - (Y @ M.T + b)).max() < 0.05 * np.abs(Y @ M.T + b).max()
    P = np.linalg.inv(Sigma) + 2 * K.T @ K  # the textbook form with Sigma^{-1}
    A = K.T @ Q
    da, dS = G.l2_rhs(alpha, Sigma, Q, K, V)
    Pinv = np.linalg.inv(P)
    np.testing.assert_allclose(da, V @ Pinv @ (np.linalg.inv(Sigma) + 2 * A) @ alpha, rtol=1e-10)
    np.testing.assert_allclose(dS, 2 * V @ Pinv @ A @ Sigma + 2 * Sigma @ A.T @ Pinv @ V.T,
                               rtol=1e-10)


def test_l2_and_multihead_rhs_against_particles():
    rng, alpha, Sigma, Q, K, V = _problem(21)
    _mc_check(rng, alpha, Sigma, lambda X: attention.l2(X, Q, K, V),
              G.l2_rhs(alpha, Sigma, Q, K, V))
    As = np.stack([K.T @ Q, rng.normal(size=(2, 2))])
    As[1] *= 0.3 / _strength(Sigma, As[1])
    Vs = rng.normal(size=(2, 2, 2))
    _mc_check(rng, alpha, Sigma, lambda X: attention.multihead(X, As, Vs),
              G.multihead_rhs(alpha, Sigma, As, Vs))
    # multi-head = sum of single heads
    parts = [G.softmax_rhs(alpha, Sigma, A, V_) for A, V_ in zip(As, Vs, strict=True)]
    da, dS = G.multihead_rhs(alpha, Sigma, As, Vs)
    np.testing.assert_allclose(da, parts[0][0] + parts[1][0], rtol=1e-13)
    np.testing.assert_allclose(dS, parts[0][1] + parts[1][1], rtol=1e-13)


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_sinkhorn_plan_has_the_right_precision_block_and_marginals(d, eps):
    rng = np.random.default_rng(30 + d)
    Sigma = _spd(rng, d)
    Q, K = rng.normal(size=(d, d)), rng.normal(size=(d, d))  # A = K^T Q not symmetric
    C = G.sinkhorn_plan_cross_covariance(Sigma, Q, K, epsilon=eps)
    J = np.block([[Sigma, C], [C.T, Sigma]])
    assert np.linalg.eigvalsh(J)[0] > 0  # a valid joint covariance with marginals Sigma
    prec = np.linalg.inv(J)
    np.testing.assert_allclose(prec[:d, d:], -(2 / eps) * (K.T @ Q).T, atol=1e-9)
    M, b = G.sinkhorn_field(np.zeros(d), Sigma, Q, K, np.eye(d), eps)
    np.testing.assert_allclose(M, C.T @ np.linalg.inv(Sigma), atol=1e-10)


@pytest.mark.parametrize("d", [2, 3])
def test_published_sinkhorn_formula_is_epsilon_two(d):
    rng = np.random.default_rng(40 + d)
    Sigma = _spd(rng, d)
    Q, K, V = (0.5 * rng.normal(size=(d, d)) for _ in range(3))
    pub = G.sinkhorn_rhs_published(Sigma, Q, K, V)
    eps2 = G.sinkhorn_rhs(np.zeros(d), Sigma, Q, K, V, epsilon=2.0)[1]
    eps1 = G.sinkhorn_rhs(np.zeros(d), Sigma, Q, K, V, epsilon=1.0)[1]
    np.testing.assert_allclose(pub, eps2, rtol=1e-9, atol=1e-12)
    assert np.abs(pub - eps1).max() > 0.05 * np.abs(pub).max()
    with pytest.raises(ValueError, match="invertible"):
        G.sinkhorn_rhs_published(Sigma, Q[:1], K[:1], V)


def test_sinkhorn_rhs_against_particles_and_published_rejected():
    rng, alpha, Sigma, Q, K, V = _problem(22)
    exact = G.sinkhorn_rhs(alpha, Sigma, Q, K, V)
    assert np.allclose(exact[0], V @ alpha)
    _mc_check(rng, alpha, Sigma, lambda X: attention.sinkhorn(X, Q, K, V, tol=1e-7), exact,
              n=800, reps=6)
    published = (exact[0], G.sinkhorn_rhs_published(Sigma, Q, K, V))
    with pytest.raises(AssertionError):
        _mc_check(rng, alpha, Sigma, lambda X: attention.sinkhorn(X, Q, K, V, tol=1e-7),
                  published, n=800, reps=6)


def test_sinkhorn_needs_no_inverse_and_is_continuous():
    rng = np.random.default_rng(50)
    u = rng.normal(size=2)
    Q = np.array([[1.0, 0.5]])
    K = -Q  # A = K^T Q singular
    V = rng.normal(size=(2, 2))
    Sigma_sing = np.outer(u, u)
    _, dS = G.sinkhorn_rhs(np.zeros(2), Sigma_sing, Q, K, V)
    _, dS_near = G.sinkhorn_rhs(np.zeros(2), Sigma_sing + 1e-10 * np.eye(2), Q, K, V)
    assert np.all(np.isfinite(dS))
    np.testing.assert_allclose(dS, dS_near, atol=1e-8)
    # small interaction: Sinkhorn ~ one normalisation step ~ 2 V Sigma A x
    A = 1e-4 * rng.normal(size=(2, 2))
    M, _ = G.sinkhorn_field(np.zeros(2), np.eye(2), np.eye(2), A, np.eye(2))
    np.testing.assert_allclose(M, 2 * A.T, rtol=1e-6)


# --------------------------------------------------------------------------------------
# helpers and options
# --------------------------------------------------------------------------------------

def test_helpers():
    rng = np.random.default_rng(60)
    S = _spd(rng, 4)
    R = G.psd_sqrt(S)
    np.testing.assert_allclose(R @ R, S, atol=1e-12)
    assert np.array_equal(R, R.T)
    u = rng.normal(size=(4, 2))
    assert G.numerical_rank(u @ u.T) == 2
    with pytest.raises(ValueError, match="velocities"):
        G.particle_moment_rates(np.zeros((5, 2)), np.zeros((4, 2)))


def test_continuation_with_t_origin_keeps_the_clock():
    rng = np.random.default_rng(61)
    Q = rng.normal(size=(1, 3))
    A = -Q.T @ Q
    Sigma0 = _spd(rng, 3)
    first = G.integrate_moments(G.softmax_rhs, np.zeros(3), Sigma0, [0.0, 1e3], args=(A, np.eye(3)))
    assert first.status == "finished"
    cont = G.integrate_moments(G.softmax_rhs, np.zeros(3), first.Sigma[-1], [1e3, 1e12],
                               args=(A, np.eye(3)), t_origin=0.0, method="LSODA", rtol=1e-9,
                               atol=1e-13)
    assert cont.status == "converged" and cont.rank == 2
    assert np.all(cont.log_rates[:1] < -0.5) and np.all(np.abs(cont.log_rates[1:]) < 0.1)
    with pytest.raises(ValueError, match="t_origin"):
        G.integrate_moments(G.softmax_rhs, np.zeros(3), Sigma0, [0.0, 1.0], args=(A, np.eye(3)),
                            t_origin=0.5)
    with pytest.raises(ValueError, match="method"):
        G.integrate_moments(G.softmax_rhs, np.zeros(3), Sigma0, [0.0, 1.0], args=(A, np.eye(3)),
                            method="euler")


def test_published_sinkhorn_formula_matches_particles_with_the_halved_kernel():
    # Q/sqrt2, K/sqrt2: the library's Sinkhorn kernel becomes e^{-|Qx-Ky|^2/2} (epsilon = 2)
    rng, alpha, Sigma, Q, K, V = _problem(23)
    r2 = np.sqrt(2.0)

    def velocity(X):
        return attention.sinkhorn(X, Q / r2, K / r2, V, tol=1e-7)

    published = (V @ alpha, G.sinkhorn_rhs_published(Sigma, Q, K, V))
    _mc_check(rng, alpha, Sigma, velocity, published, n=800, reps=6)
    with pytest.raises(AssertionError):
        _mc_check(rng, alpha, Sigma, velocity, G.sinkhorn_rhs(alpha, Sigma, Q, K, V), n=800,
                  reps=6)


# --------------------------------------------------------------------------------------
# Monte Carlo statistics
# --------------------------------------------------------------------------------------

def test_replicate_z_scores_against_loop_reference():
    rng = np.random.default_rng(70)
    s = rng.normal(size=(7, 3)) + np.array([0.0, 1.0, -2.0])
    t = np.array([0.1, 0.9, -2.5])
    z = G.replicate_z_scores(s, t)
    for j in range(3):
        col = s[:, j]
        mean = sum(col) / len(col)
        var = sum((c - mean) ** 2 for c in col) / (len(col) - 1)
        assert z[j] == pytest.approx(abs(mean - t[j]) / np.sqrt(var / len(col)), rel=1e-12)
    with pytest.raises(ValueError, match="replicates"):
        G.replicate_z_scores(s[:1], t)
    with pytest.raises(ValueError, match="target"):
        G.replicate_z_scores(s, t[:2])
    with pytest.raises(ValueError, match="vary"):
        G.replicate_z_scores(np.ones((4, 3)), t)


def test_rms_error_rate_point_estimate_and_calibrated_stderr():
    # synthetic squared errors e_kr = n_k^(2p) Z_kr, Z ~ chi2(3)/3: a pure power law
    rng = np.random.default_rng(71)
    ns = np.array([250, 500, 1000, 2000, 4000])
    p_true, reps, trials = -0.5, 8, 400
    covered, exps = 0, []
    for _ in range(trials):
        e = ns[:, None] ** (2 * p_true) * rng.chisquare(3, size=(ns.size, reps)) / 3
        fit = G.rms_error_rate(ns, e)
        # the point estimate is the plain log-log least-squares slope of the rms error
        assert fit.exponent == pytest.approx(
            fit_power_law(ns, np.sqrt(e.mean(axis=1))).exponent, rel=1e-12)
        covered += abs(fit.exponent - p_true) < 2 * fit.stderr
        exps.append(fit.exponent)
    exps = np.array(exps)
    # unbiased to within 4 standard errors of the mean of 400 estimates
    assert abs(exps.mean() - p_true) < 4 * exps.std() / np.sqrt(trials)
    # +-2 stderr covers 95.4% nominally; the delta method with an estimated kappa is slightly
    # optimistic for these skewed errors (about 93% with R = 8; documented in the docstring).
    # Binomial sd over 400 trials ~ 0.012: a stderr off by 25% (coverage ~ 0.89) would fail.
    assert 0.905 <= covered / trials <= 0.985


def test_rms_error_rate_bad_input():
    e = np.ones((3, 4))
    with pytest.raises(ValueError, match="ns"):
        G.rms_error_rate([1, 2, -3], e)
    with pytest.raises(ValueError, match="distinct"):
        G.rms_error_rate([5, 5, 5], e)
    with pytest.raises(ValueError, match="shape"):
        G.rms_error_rate([1, 2, 3], np.ones((3, 1)))
    with pytest.raises(ValueError, match="non-negative"):
        G.rms_error_rate([1, 2, 3], -e)


# --------------------------------------------------------------------------------------
# helpers of the chapter
# --------------------------------------------------------------------------------------

def test_moment_vector_and_weighted_particle_rates_against_loops():
    rng = np.random.default_rng(11)
    n, d = 7, 3
    X, v = rng.normal(size=(n, d)), rng.normal(size=(n, d))
    w = rng.random(n)
    w /= w.sum()
    da, dS = G.particle_moment_rates(X, v, weights=w)
    mean = sum(w[i] * X[i] for i in range(n))
    ref = sum(w[i] * (np.outer(X[i] - mean, v[i]) + np.outer(v[i], X[i] - mean))
              for i in range(n))
    np.testing.assert_allclose(da, sum(w[i] * v[i] for i in range(n)), atol=1e-14)
    np.testing.assert_allclose(dS, ref, atol=1e-13)
    vec = G.moment_vector(da, dS)
    assert vec.shape == (d + d * (d + 1) // 2,)
    assert list(vec[d:]) == [dS[i, j] for i in range(d) for j in range(i, d)]
    with pytest.raises(ValueError, match="weights"):
        G.particle_moment_rates(X, v, weights=np.ones(n))


def test_particle_moment_samples_and_relative_errors():
    rng, alpha, Sigma, Q, K, V = _problem(12)
    A = K.T @ Q
    exact = G.moment_vector(*G.softmax_rhs(alpha, Sigma, A, V))
    est = G.particle_moment_samples(lambda X: attention.softmax(X, A, V), alpha, Sigma,
                                    [200, 800], 6, rng)
    assert est.shape == (2, 6, 5)
    e = G.relative_squared_errors(est, exact)
    np.testing.assert_allclose(e, ((est - exact) ** 2).sum(axis=2) / (exact @ exact))
    # the Monte Carlo error shrinks with n (by 2 on average from 200 to 800)
    assert e[1].mean() < e[0].mean()
    with pytest.raises(ValueError, match="target"):
        G.relative_squared_errors(est, exact[:3])
    with pytest.raises(ValueError, match="velocity"):
        G.particle_moment_samples(None, alpha, Sigma, [10], 2, rng)


def test_cone_coordinates_round_trip_and_psd_cone():
    rng = np.random.default_rng(13)
    for _ in range(20):
        u, w, v = rng.normal(size=3)
        S = G.covariance_from_cone(u, w, v)
        np.testing.assert_allclose(G.cone_coordinates(S), [u, w, v], atol=1e-14)
        psd = np.linalg.eigvalsh(S)[0] >= -1e-14
        assert psd == (v >= np.hypot(u, w) - 1e-14)
    assert G.cone_coordinates(np.zeros((4, 2, 2))).shape == (4, 3)
    with pytest.raises(ValueError, match="2, 2"):
        G.cone_coordinates(np.eye(3))


def test_softmax_lyapunov_derivative_matches_formula():
    rng = np.random.default_rng(14)
    d = 3
    Sigma = _spd(rng, d)
    Q = rng.normal(size=(1, d))
    P = Q.T @ Q
    W = rng.normal(size=(d, d))
    V = W.T @ W + 0.1 * np.eye(d)
    dS = G.softmax_rhs(np.zeros(d), Sigma, -P, V)[1]
    h = 1e-6
    fd = (G.softmax_lyapunov(Sigma + h * dS, V) - G.softmax_lyapunov(Sigma - h * dS, V)) / (2 * h)
    R = G.psd_sqrt(P)
    assert fd == pytest.approx(-2 * np.linalg.norm(R @ Sigma) ** 2, rel=1e-6)
    with pytest.raises(ValueError, match="symmetric"):
        G.softmax_lyapunov(Sigma, V + np.triu(np.ones((d, d)), 1))
    with pytest.raises(ValueError, match="positive definite"):
        G.softmax_lyapunov(Sigma, -V)


def test_l2_growth_rate_bound_holds_along_random_runs():
    rng = np.random.default_rng(15)
    for _ in range(5):
        Q, K, V = (rng.normal(size=(2, 2)) for _ in range(3))
        S0 = _spd(rng, 2)
        c = G.l2_growth_rate_bound(Q, K, V)
        # |M|_2 <= c at random states
        for _ in range(5):
            M = G.l2_field(np.zeros(2), _spd(rng, 2, scale=3.0), Q, K, V)[0]
            assert np.linalg.norm(M, 2) <= c * (1 + 1e-12)
        times = np.linspace(0, 3, 31)
        run = G.integrate_moments(G.l2_rhs, np.zeros(2), S0, times, args=(Q, K, V))
        tr = np.trace(run.Sigma, axis1=1, axis2=2)
        assert np.all(np.log(tr) <= np.log(np.trace(S0)) + 2 * c * run.times + 1e-8)
    with pytest.raises(ValueError, match="invertible"):
        G.l2_growth_rate_bound(np.eye(2), np.diag([1.0, 0.0]), np.eye(2))
    with pytest.raises(ValueError, match="square"):
        G.l2_growth_rate_bound(np.ones((1, 2)), np.ones((1, 2)), np.eye(2))


def test_clustering_rank_draws_identity_gives_ceil_half_d():
    draws = G.clustering_rank_draws(3, 3, np.random.default_rng(16))
    for draw in draws:
        assert draw.run.status == "converged"
        assert draw.run.rank == 2
        np.testing.assert_allclose(draw.V, np.eye(3))
        assert np.linalg.matrix_rank(draw.P) == 1
    with pytest.raises(ValueError, match="V must be"):
        G.clustering_rank_draws(3, 1, np.random.default_rng(0), V="other")
    with pytest.raises(ValueError, match="n_jobs"):
        G.clustering_rank_draws(3, 1, np.random.default_rng(0), n_jobs=0)


def assert_same_draws(first, second):
    """Two lists of ``ClusteringDraw`` are the same draws and the same runs, bit for bit."""
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a.P, b.P)
        np.testing.assert_array_equal(a.V, b.V)
        np.testing.assert_array_equal(a.run.times, b.run.times)
        np.testing.assert_array_equal(a.run.Sigma, b.run.Sigma)
        assert (a.run.status, a.run.rank, a.run.t_stop) == (b.run.status, b.run.rank, b.run.t_stop)


@pytest.mark.parametrize("backend", ["loky", "threading"])
def test_clustering_rank_draws_same_runs_with_two_jobs(backend):
    # the matrices are drawn before the runs are farmed out: the draws, the runs and the
    # generator's state afterwards are the same with one job or two, in processes or threads
    rng1, rng2 = np.random.default_rng(5), np.random.default_rng(5)
    serial = G.clustering_rank_draws(3, 3, rng1, V="random")
    with joblib.parallel_config(backend=backend, n_jobs=2):
        parallel = G.clustering_rank_draws(3, 3, rng2, V="random")
    assert_same_draws(serial, parallel)
    assert rng1.random() == rng2.random()


def test_clustering_rank_draws_fix_neither_jobs_nor_backend(monkeypatch):
    # the library passes no n_jobs and no backend of its own: the caller's parallel_config
    # decides (one sequential job without it)
    seen = []
    original = joblib.Parallel.__init__

    def spy(self, *args, **kwargs):
        seen.append((args, kwargs))
        original(self, *args, **kwargs)

    monkeypatch.setattr(joblib.Parallel, "__init__", spy)
    G.clustering_rank_draws(3, 2, np.random.default_rng(1))
    assert seen == [((), {"n_jobs": None})]


def _trajectory(times, Sigmas, status="finished"):
    Sigmas = np.asarray(Sigmas, dtype=float)
    return G.MomentTrajectory(np.asarray(times, float), np.zeros((len(times), Sigmas.shape[-1])),
                              Sigmas, status, float(times[-1]), None, None, "")


def test_read_limit_rank_on_closed_form_runs():
    # V = I, A = -P: Sigma(t) = S0^1/2 (I + 2t N)^-1 S0^1/2; on ker P the compression converges
    # to a full-rank matrix (rate 0), so the reading is d - rank P
    rng = np.random.default_rng(21)
    times = np.concatenate([[0.0], np.geomspace(1e-2, 1e8, 25)])
    for d, r in ((3, 1), (4, 2), (5, 2)):
        Q = rng.normal(size=(r, d))
        W = rng.normal(size=(d, d))
        P, S0 = Q.T @ Q, W @ W.T + 0.1 * np.eye(d)
        run = _trajectory(times, G.softmax_identity_covariance(S0, -P, times))
        reading = G.read_limit_rank(run, P)
        assert reading.rank == d - r
        assert np.all(np.abs(reading.rates) < 1e-3) and reading.margin > 0.03
        assert reading.ratios[-1] == 1.0 and reading.ratios.shape == (d - r,)


def test_read_limit_rank_moving_and_collapsing_eigenvalues():
    # on ker P = span(e2, e3): one eigenvalue settled, one decaying like t^-p
    P = np.diag([1.0, 0.0, 0.0])
    times = np.concatenate([[0.0], np.geomspace(1e-2, 1e8, 25)])
    for p, expected in ((0.0, 2), (1.0, 1), (0.3, None), (0.02, 2), (0.06, None)):
        Sigmas = [np.diag([1.0 / (1 + t), 1.0, (1 + t) ** -p]) for t in times]
        reading = G.read_limit_rank(_trajectory(times, Sigmas), P)
        assert reading.rank == expected, (p, reading)
        np.testing.assert_allclose(reading.rates, sorted([-p, 0.0]), atol=1e-12)
        assert reading.margin == pytest.approx(min(0.04, abs(p - 0.04), abs(p - 0.9)), abs=1e-9)
    # a run that stopped early reads the decade before its stop
    Sigmas = [np.diag([1.0 / (1 + t), 1.0, 1.0 / (1 + t)]) for t in times[:12]]
    assert G.read_limit_rank(_trajectory(times[:12], Sigmas, "converged"), P).rank == 1


def test_read_limit_rank_bad_inputs():
    run = _trajectory([0.0, 1.0], [np.eye(2), np.eye(2)])
    with pytest.raises(ValueError, match="MomentTrajectory"):
        G.read_limit_rank("run", np.eye(2))
    with pytest.raises(ValueError, match="symmetric"):
        G.read_limit_rank(run, np.array([[1.0, 1.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="semi-definite"):
        G.read_limit_rank(run, -np.eye(2))
    with pytest.raises(ValueError, match="settled < collapsing"):
        G.read_limit_rank(run, np.diag([1.0, 0.0]), settled=0.5, collapsing=0.5)
    assert G.read_limit_rank(run, np.eye(2)).rank == 0
