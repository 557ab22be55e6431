"""Tests of transformer_pde.gaussian.steering against independent references: a direct
solve_ivp integration of the covariance ODE, matrix exponentials, quadrature exactness,
and particle clouds moved by softmax attention."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.linalg import expm
from transformer_pde import gaussian as g

J = np.array([[0.0, -1.0], [1.0, 0.0]])


def _spd(rng, d, floor=0.3):
    L = rng.normal(size=(d, d))
    return L @ L.T + floor * np.eye(d)


def _reference(alpha0, Sigma0, A, V, W, b, T):
    """Integrate the moment ODE with MLP directly on (alpha, Sigma), independent code."""
    d = alpha0.size

    def f(_, y):
        a, S = y[:d], y[d:].reshape(d, d)
        M = V @ S @ A + W
        return np.concatenate([M @ a + V @ a + b, (M @ S + S @ M.T).ravel()])

    sol = solve_ivp(f, (0, T), np.concatenate([alpha0, Sigma0.ravel()]), method="DOP853",
                    rtol=1e-12, atol=1e-14)
    return sol.y[:d, -1], sol.y[d:, -1].reshape(d, d)


def test_mlp_rhs_matches_finite_difference_of_particles():
    # the moment ODE is the derivative of the moments of the affine flow of the field
    rng = np.random.default_rng(1)
    d = 3
    a, S = rng.normal(size=d), _spd(rng, d)
    A, V, W = (rng.normal(size=(d, d)) for _ in range(3))
    b = rng.normal(size=d)
    M, c = g.softmax_mlp_field(a, S, A, V, W, b)
    h = 1e-6
    F = np.eye(d) + h * M
    a_h, S_h = a + h * (M @ a + c), F @ S @ F.T
    da, dS = g.softmax_mlp_rhs(a, S, A, V, W, b)
    assert np.allclose((a_h - a) / h, da, atol=1e-8)
    assert np.allclose((S_h - S) / h, dS, atol=1e-4)
    assert np.allclose(M, V @ S @ A + W) and np.allclose(c, V @ a + b)


def test_identity_mlp_closed_form_matches_direct_integration():
    rng = np.random.default_rng(2)
    d = 3
    S0, A, W = _spd(rng, d), 0.3 * rng.normal(size=(d, d)), rng.normal(size=(d, d))
    T = 0.4
    _, S_ref = _reference(np.ones(d), S0, A, np.eye(d), W, np.zeros(d), T)
    S_cf = g.identity_mlp_covariance(S0, A, W, T)
    assert np.abs(S_cf - S_ref).max() < 1e-9 * np.abs(S_ref).max()
    assert g.identity_mlp_covariance(S0, A, W, [0.0, T]).shape == (2, d, d)


def test_scalar_mlp_regimes_against_integration():
    S0 = np.array([[1.0, 0.3], [0.3, 0.5]])
    I2 = np.eye(2)
    A_ind = np.array([[0.6, 0.4], [-0.2, -0.5]])
    for w in (0.5, 0.0, -0.2):
        r = g.scalar_mlp_regime(S0, A_ind, w)
        assert r["regime"] == "blowup"
        # just before t*, the closed form exists; at t* it does not
        g.identity_mlp_covariance(S0, A_ind, w * I2, 0.999 * r["t_star"])
        with pytest.raises(ValueError):
            g.identity_mlp_covariance(S0, A_ind, w * I2, 1.001 * r["t_star"])
    P = np.array([[1.0, 0.3], [0.3, 0.6]])
    r = g.scalar_mlp_regime(S0, -P, 0.5)
    assert r["regime"] == "equilibrium"
    assert np.allclose(g.identity_mlp_covariance(S0, -P, 0.5 * I2, 40.0), r["limit"],
                       atol=1e-10)
    assert np.allclose(r["limit"], 0.5 * np.linalg.inv(P))
    assert g.scalar_mlp_regime(S0, A_ind, -1.0)["regime"] == "collapse"
    assert g.scalar_mlp_regime(S0, -np.diag([1.0, 0.0]), 0.5)["regime"] == "unbounded"
    assert g.scalar_mlp_regime(S0, -P, 0.0)["regime"] == "identity"
    # an expanding MLP (w > 0) brings the blow-up forward: log(1 + 2ws)/(2w) < s
    assert abs(r["t_star"]) == np.inf
    assert g.scalar_mlp_regime(S0, A_ind, 0.5)["t_star"] < g.softmax_identity_blowup_time(
        S0, A_ind)


def test_harmonic_steering_reaches_target_and_follows_closed_form():
    rng = np.random.default_rng(3)
    d = 3
    S0, S1 = _spd(rng, d), _spd(rng, d)
    T = 1.5
    A = g.harmonic_steering_matrix(S0, S1, T)
    assert np.allclose(A, A.T)
    _, S_ref = _reference(np.zeros(d), S0, A, np.eye(d), np.zeros((d, d)), np.zeros(d), T)
    assert np.abs(S_ref - S1).max() < 1e-8 * np.abs(S1).max()
    _, S_half = _reference(np.zeros(d), S0, A, np.eye(d), np.zeros((d, d)), np.zeros(d),
                           T / 2)
    assert np.allclose(g.harmonic_covariance(S0, S1, T, T / 2), S_half, rtol=1e-8)
    with pytest.raises(ValueError, match="t must lie"):
        g.harmonic_covariance(S0, S1, T, 2 * T)


def test_mean_rotation_value_exact():
    rng = np.random.default_rng(4)
    for d in (2, 3):
        a0, a1 = rng.normal(size=d), rng.normal(size=d)
        V = g.mean_rotation_value(a0, a1, 0.7)
        assert np.allclose(expm(0.7 * V) @ a0, a1, atol=1e-12)
    a0 = np.array([1.0, 2.0, 0.0])
    assert np.allclose(expm(g.mean_rotation_value(a0, -3 * a0)) @ a0, -3 * a0)
    assert np.allclose(expm(g.mean_rotation_value([2.0], [5.0])) @ [2.0], [5.0])
    with pytest.raises(ValueError, match="non-zero"):
        g.mean_rotation_value([0.0, 0.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="same sign"):
        g.mean_rotation_value([1.0], [-1.0])


def test_steer_gaussian_moments_and_particles():
    a0, S0 = np.array([1.0, 0.0]), np.diag([1.0, 0.3])
    a1, S1 = np.array([-0.5, 1.0]), np.array([[0.8, 0.35], [0.35, 0.6]])
    st = g.steer_gaussian(a0, S0, a1, S1, durations=(2.0, 1.0))
    a, S = g.schedule_moments(st.segments, a0, S0)
    assert np.allclose(a, a1, atol=1e-9) and np.allclose(S, S1, atol=1e-9)
    # independent: alpha_mid from a direct integration of the first segment
    seg = st.segments[0]
    a_mid, _ = _reference(a0, S0, seg.A, seg.V, np.zeros((2, 2)), np.zeros(2), seg.duration)
    assert np.allclose(a_mid, st.alpha_mid, atol=1e-9)
    # Gauss-Hermite particles moved by the library's attention land on the target
    X, w = g.gauss_hermite_measure(a0, S0, 14)
    aq, Sq = g.weighted_moments(g.schedule_particles(st.segments, X, weights=w), w)
    assert np.abs(aq - a1).max() < 1e-7 and np.abs(Sq - S1).max() < 1e-7
    # and iid particles land within Monte Carlo error (n = 400, a loose 5-sigma-like bound)
    rng = np.random.default_rng(5)
    Y = rng.multivariate_normal(a0, S0, size=400)
    ai, Si = g.weighted_moments(g.schedule_particles(st.segments, Y, rtol=1e-8))
    assert np.abs(ai - a1).max() < 0.5 and np.abs(Si - S1).max() < 0.5


def test_steering_rejects_a_wrong_mean_equation():
    # a schedule built on alpha' = V alpha (without Sigma A) misses the target mean
    a0, S0 = np.array([1.0, 0.0]), np.diag([1.0, 0.3])
    a1, S1 = np.array([-0.5, 1.0]), np.array([[0.8, 0.35], [0.35, 0.6]])
    st = g.steer_gaussian(a0, S0, a1, S1, durations=(2.0, 1.0))
    wrong_mid = np.exp(2.0) * a0
    seg2 = g.Segment(1.0, np.zeros((2, 2)), g.mean_rotation_value(wrong_mid, a1, 1.0))
    a, _ = g.schedule_moments((st.segments[0], seg2), a0, S0)
    assert np.abs(a - a1).max() > 0.1


def test_mlp_mean_equation_against_gauss_hermite_particles():
    # weighted Gauss-Hermite particles moved by softmax attention plus the affine layer
    # Wx + b (W, b != 0) follow the MLP moment ODE, integrated by independent code; the
    # mean equation without b (or without W alpha) would miss by order 1
    a0, S0 = np.array([0.4, -0.2]), np.array([[1.0, 0.3], [0.3, 0.5]])
    A, V = np.array([[0.2, 0.1], [-0.1, -0.15]]), np.array([[1.0, 0.5], [-0.3, 0.8]])
    W, b = np.array([[0.3, -0.5], [0.4, -0.2]]), np.array([0.5, -0.3])
    X, w = g.gauss_hermite_measure(a0, S0, 16)
    Y = g.schedule_particles([g.Segment(1.0, A, V)], X, weights=w, W=W, b=b)
    aq, Sq = g.weighted_moments(Y, w)
    a_ref, S_ref = _reference(a0, S0, A, V, W, b, 1.0)
    assert np.abs(aq - a_ref).max() < 1e-8 and np.abs(Sq - S_ref).max() < 1e-8
    a_nob, _ = _reference(a0, S0, A, V, W, np.zeros(2), 1.0)
    assert np.abs(aq - a_nob).max() > 0.1

    def no_w_alpha(_, y):
        a, S = y[:2], y[2:].reshape(2, 2)
        M = V @ S @ A + W
        return np.concatenate([V @ S @ A @ a + V @ a + b, (M @ S + S @ M.T).ravel()])

    y = solve_ivp(no_w_alpha, (0, 1.0), np.concatenate([a0, S0.ravel()]), rtol=1e-10,
                  atol=1e-12).y[:, -1]
    assert np.abs(aq - y[:2]).max() > 0.1
    with pytest.raises(ValueError, match="b must"):
        g.schedule_particles([g.Segment(1.0, A, V)], X, W=W, b=np.zeros(3))


def test_gauss_hermite_exactness():
    a, S = np.array([0.5, -1.0]), np.array([[2.0, 0.4], [0.4, 0.7]])
    X, w = g.gauss_hermite_measure(a, S, 6)
    assert X.shape == (36, 2) and np.isclose(w.sum(), 1.0)
    am, Sm = g.weighted_moments(X, w)
    assert np.allclose(am, a) and np.allclose(Sm, S)
    # fourth moment of a Gaussian coordinate: 3 sigma^4
    assert np.isclose(w @ (X[:, 0] - a[0]) ** 4, 3 * S[0, 0] ** 2)


def test_rotation_covariance_and_isospectrality():
    S0 = np.array([[1.0, 0.3], [0.3, 0.5]])
    I2 = np.eye(2)
    ts = np.linspace(0, 3, 7)
    for kind, rhs, args in (("softmax", g.softmax_rhs, (I2, J)),
                            ("l2", g.l2_rhs, (I2, I2, J))):
        run = g.integrate_moments(rhs, np.zeros(2), S0, ts, args=args, rtol=1e-11,
                                  atol=1e-13, conv_tol=1e-300)
        assert np.abs(run.Sigma - g.rotation_covariance(S0, run.times, kind=kind)).max() < 1e-8
    # Sigma = s I is stationary; any antisymmetric V in d = 3 keeps the spectrum
    assert np.allclose(g.softmax_rhs(np.zeros(2), 2 * I2, I2, J)[1], 0)
    rng = np.random.default_rng(6)
    B = rng.normal(size=(3, 3))
    S3 = _spd(rng, 3)
    run = g.integrate_moments(g.softmax_rhs, np.zeros(3), S3, [0.0, 1.0, 2.0],
                              args=(np.eye(3), B - B.T), rtol=1e-11, atol=1e-13,
                              conv_tol=1e-300)
    for S in run.Sigma:
        assert np.allclose(np.linalg.eigvalsh(S), np.linalg.eigvalsh(S3), rtol=1e-8)
    with pytest.raises(ValueError, match="kind"):
        g.rotation_covariance(S0, 1.0, kind="sinkhorn")


def test_bad_inputs_raise():
    S = np.eye(2)
    with pytest.raises(ValueError, match="Sigma1"):
        g.harmonic_steering_matrix(S, np.diag([1.0, 0.0]))
    with pytest.raises(ValueError, match="duration"):
        g.harmonic_steering_matrix(S, S, -1.0)
    with pytest.raises(ValueError, match="alpha0"):
        g.steer_gaussian([0.0, 0.0], S, [1.0, 0.0], S)
    with pytest.raises(ValueError, match="durations"):
        g.steer_gaussian([1.0, 0.0], S, [1.0, 0.0], S, durations=(1.0,))
    with pytest.raises(ValueError, match="b must"):
        g.softmax_mlp_rhs(np.zeros(2), S, S, S, S, np.zeros(3))
    with pytest.raises(ValueError, match="W"):
        g.identity_mlp_covariance(S, S, np.eye(3), 1.0)
    with pytest.raises(ValueError, match="w"):
        g.scalar_mlp_regime(S, S, np.nan)
    with pytest.raises(ValueError, match="weights"):
        g.schedule_particles([g.Segment(1.0, S, S)], np.ones((3, 2)), weights=np.ones(3))
    with pytest.raises(ValueError, match="segments"):
        g.schedule_moments([], np.zeros(2), S)
    with pytest.raises(ValueError, match="m must"):
        g.gauss_hermite_measure(np.zeros(2), S, 0)
