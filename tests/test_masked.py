"""Tests of the mean-field masked attention on [0, 1] x R^d (transformer_pde.masked)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformer_pde import attention, dynamics, masked


def loop_reference(tau, X, w, A, V, s_q, Y):
    """Gamma_mubar(s, y) by plain loops, written for clarity (tie: tau_j <= s included)."""
    out = []
    for s, y in zip(s_q, Y, strict=True):
        past = [j for j in range(len(tau)) if tau[j] <= s and w[j] > 0]
        logits = [float(np.dot(A @ y, X[j])) for j in past]
        top = max(logits)
        num = np.zeros(V.shape[0])
        den = 0.0
        for j, lg in zip(past, logits, strict=True):
            e = w[j] * math.exp(lg - top)
            num += e * (V @ X[j])
            den += e
        out.append(num / den)
    return np.array(out)


def random_problem(rng, n=12, d=3, p=None, scale=1.0):
    p = d if p is None else p
    X = scale * rng.normal(size=(n, d))
    A = rng.normal(size=(d, d))
    V = rng.normal(size=(p, d))
    return X, A, V


@pytest.mark.parametrize("n,d,p", [(1, 2, 2), (7, 3, 3), (50, 4, 2), (300, 2, 5)])
def test_sequence_measure_reproduces_discrete_causal_attention(n, d, p):
    rng = np.random.default_rng(n)
    X, A, V = random_problem(rng, n, d, p, scale=1.5)
    s, Xs, w = masked.sequence_measure(X)
    np.testing.assert_array_equal(s, np.arange(1, n + 1) / n)
    np.testing.assert_allclose(w, 1.0 / n)
    expected = attention.softmax(X, A, V, causal=True)
    for chunk in (None, 1, 5):
        got = masked.masked_velocity(s, Xs, A, V, weights=w, chunk_size=chunk)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12 * max(1, abs(expected).max()))


def test_general_weights_shared_positions_against_loop_reference():
    rng = np.random.default_rng(1)
    n, d = 15, 3
    X, A, V = random_problem(rng, n, d, p=2)
    tau = rng.choice([0.0, 0.2, 0.5, 0.9, 1.0], size=n)  # many ties, unsorted
    w = rng.random(n)
    w[3] = 0.0
    w /= w.sum()
    got = masked.masked_velocity(tau, X, A, V, weights=w)
    ref = loop_reference(tau, X, w, A, V, tau, X)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    # at query points, including positions between atoms and the end points
    m = 40
    s_q = np.concatenate([rng.choice(tau, 10), rng.uniform(0, 1, m - 12), [0.0, 1.0]])
    s_q = np.maximum(s_q, tau.min())  # every query has a non-empty past
    Y = rng.normal(size=(m, d))
    got = masked.masked_velocity(tau, X, A, V, weights=w, queries=Y, query_positions=s_q,
                                 chunk_size=3)
    np.testing.assert_allclose(got, loop_reference(tau, X, w, A, V, s_q, Y), rtol=1e-12,
                               atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 9), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_property_loop_reference(n, d, seed):
    rng = np.random.default_rng(seed)
    X, A, V = random_problem(rng, n, d)
    tau = rng.choice(np.linspace(0, 1, 4), size=n)
    w = rng.dirichlet(np.ones(n))
    got = masked.masked_velocity(tau, X, A, V, weights=w)
    np.testing.assert_allclose(got, loop_reference(tau, X, w, A, V, tau, X), rtol=1e-10,
                               atol=1e-10)


def test_tie_convention_atoms_sharing_a_position_see_each_other():
    # two atoms at the same position: each attends to both, i.e. unmasked attention
    X = np.array([[1.0, 0.0], [0.0, 2.0]])
    A = np.array([[1.0, 0.5], [0.0, 1.0]])
    V = np.eye(2)
    got = masked.masked_velocity([0.5, 0.5], X, A, V)
    np.testing.assert_allclose(got, attention.softmax(X, A, V), rtol=1e-14)
    # atom 1 at an earlier position sees itself only: it is a fixed point of V = I
    got = masked.masked_velocity([0.2, 0.5], X, A, V)
    np.testing.assert_allclose(got[0], X[0], rtol=0, atol=0)


def test_field_depends_on_the_measure_only():
    rng = np.random.default_rng(2)
    n, d = 10, 2
    X, A, V = random_problem(rng, n, d)
    s, _, w = masked.sequence_measure(X)
    base = masked.masked_velocity(s, X, A, V)
    # relabelling atoms together with their positions permutes the field
    perm = rng.permutation(n)
    np.testing.assert_allclose(masked.masked_velocity(s[perm], X[perm], A, V), base[perm],
                               rtol=1e-13, atol=1e-13)
    # splitting every atom into two half-weight copies at the same position: same measure
    s2 = np.repeat(s, 2)
    X2 = np.repeat(X, 2, axis=0)
    got = masked.masked_velocity(s2, X2, A, V, weights=np.full(2 * n, 0.5 / n))
    np.testing.assert_allclose(got[::2], base, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(got[1::2], base, rtol=1e-13, atol=1e-13)
    # an extra atom of weight zero changes nothing for the others
    got = masked.masked_velocity(np.append(s, 0.05), np.vstack([X, 10 * X[:1]]), A, V,
                                 weights=np.append(w, 0.0), queries=X, query_positions=s)
    np.testing.assert_allclose(got, base, rtol=1e-13, atol=1e-13)


def test_first_atom_with_identity_value_attends_to_itself():
    rng = np.random.default_rng(3)
    X, A, _ = random_problem(rng, 6, 3)
    s, _, _ = masked.sequence_measure(X)
    np.testing.assert_array_equal(masked.masked_velocity(s, X, A, np.eye(3))[0], X[0])


def test_large_logits_are_finite_and_select_the_best_past_atom():
    rng = np.random.default_rng(4)
    X, A, V = random_problem(rng, 20, 3, scale=40.0)
    s, _, _ = masked.sequence_measure(X)
    got = masked.masked_velocity(s, X, A, V)
    assert np.all(np.isfinite(got))
    L = (X @ A.T) @ X.T
    hard = np.array([V @ X[int(np.argmax(L[i, : i + 1]))] for i in range(20)])
    np.testing.assert_allclose(got, hard, rtol=1e-9, atol=1e-9)


def test_masked_field_integrates_like_discrete_causal_dynamics():
    rng = np.random.default_rng(5)
    X0, A, V = random_problem(rng, 12, 2)
    V = 0.5 * V
    s, _, w = masked.sequence_measure(X0)
    times = np.linspace(0, 1, 6)
    traj = dynamics.integrate(masked.masked_field(s, A, V, weights=w), X0, times)
    ref = dynamics.integrate(dynamics.attention_field(attention.softmax, A=A, V=V, causal=True),
                             X0, times)
    np.testing.assert_allclose(traj, ref, rtol=1e-9, atol=1e-9)


def test_product_field_positions_never_move():
    rng = np.random.default_rng(6)
    n, d = 9, 2
    X0, A, V = random_problem(rng, n, d)
    tau = rng.choice([0.1, 0.4, 0.4, 0.8], size=n)
    w = rng.dirichlet(np.ones(n))
    Z0 = np.hstack([tau[:, None], X0])
    times = np.linspace(0, 1.5, 4)
    field = masked.masked_product_field(A, lambda t: np.cos(t) * V, weights=w)
    v0 = field(0.0, Z0)
    np.testing.assert_array_equal(v0[:, 0], 0.0)
    traj = dynamics.integrate(field, Z0, times, method="rk4", max_step=0.05)
    np.testing.assert_array_equal(traj[:, :, 0], np.broadcast_to(tau, (times.size, n)))
    xonly = dynamics.integrate(masked.masked_field(tau, A, lambda t: np.cos(t) * V, weights=w),
                               X0, times, method="rk4", max_step=0.05)
    np.testing.assert_allclose(traj[:, :, 1:], xonly, rtol=1e-14, atol=1e-14)


def test_bad_inputs_raise():
    rng = np.random.default_rng(7)
    X, A, V = random_problem(rng, 5, 2)
    s = np.linspace(0.2, 1, 5)
    with pytest.raises(ValueError, match="positions must lie in"):
        masked.masked_velocity(s + 0.1, X, A, V)
    with pytest.raises(ValueError, match="positions must lie in"):
        masked.masked_velocity(s - 0.3, X, A, V)
    with pytest.raises(ValueError, match="positions must have shape"):
        masked.masked_velocity(s[:4], X, A, V)
    with pytest.raises(ValueError, match="positions contains non-finite"):
        masked.masked_velocity(np.where(s > 0.5, np.nan, s), X, A, V)
    with pytest.raises(ValueError, match="A must have shape"):
        masked.masked_velocity(s, X, np.eye(3), V)
    with pytest.raises(ValueError, match="V must have 2 columns"):
        masked.masked_velocity(s, X, A, np.eye(3))
    with pytest.raises(ValueError, match="X must be a 2-D"):
        masked.masked_velocity(s, X[:, 0], A, V)
    with pytest.raises(ValueError, match="weights must sum to 1"):
        masked.masked_velocity(s, X, A, V, weights=np.ones(5))
    with pytest.raises(ValueError, match="give both or neither"):
        masked.masked_velocity(s, X, A, V, queries=X)
    with pytest.raises(ValueError, match="query_positions must have shape"):
        masked.masked_velocity(s, X, A, V, queries=X, query_positions=s[:2])
    with pytest.raises(ValueError, match="queries must have d = 2"):
        masked.masked_velocity(s, X, A, V, queries=np.ones((5, 3)), query_positions=s)
    # a query before every atom has an empty past
    with pytest.raises(ValueError, match="no mass at positions tau <= s"):
        masked.masked_velocity(s, X, A, V, queries=X[:1], query_positions=[0.1])
    # an atom whose past has zero weight
    with pytest.raises(ValueError, match="query 0 .* no mass"):
        masked.masked_velocity(s, X, A, V, weights=[0, 0.25, 0.25, 0.25, 0.25])
    with pytest.raises(ValueError, match="positions must lie in"):
        masked.masked_field(s * 2, A, V)
    with pytest.raises(ValueError, match="chunk_size"):
        masked.masked_velocity(s, X, A, V, chunk_size=0)
    with pytest.raises(ValueError, match="Z must have shape"):
        masked.masked_product_field(A, V)(0.0, s[:, None])


def _hermite_reference(s, x, A, V, mean_curve, sigma):
    """Gamma of ds N(m(s), sigma^2 I) by adaptive quadrature in tau and Gauss-Hermite in y.

    Independent of the closed-form cancellation: both Gaussian integrals are computed
    numerically (d = 2, tensor Gauss-Hermite rule, exact for polynomials times the kernel up to
    high degree).
    """
    from scipy.integrate import quad

    nodes, wts = np.polynomial.hermite_e.hermegauss(40)  # weight exp(-z^2/2)
    wts = wts / np.sqrt(2 * np.pi)
    Z = np.array([[a, b] for a in nodes for b in nodes])
    W = np.array([wa * wb for wa in wts for wb in wts])
    b = A @ x

    def inner(tau, comp):
        y = mean_curve(np.array([tau]))[0] + sigma * Z
        e = W * np.exp(y @ b)
        return e.sum() if comp < 0 else e @ y[:, comp]

    den = quad(inner, 0.0, s, args=(-1,), epsabs=1e-13, epsrel=1e-10, limit=200)[0]
    num = np.array([quad(inner, 0.0, s, args=(c,), epsabs=1e-13, epsrel=1e-10, limit=200)[0]
                    for c in range(2)])
    return V @ (num / den)


def test_gaussian_sequence_field_against_quadrature_reference():
    A = np.array([[1.5, 0.5], [-0.5, 1.0]])
    V = np.array([[0.5, -1.0], [1.0, 0.5]])
    sigma = 0.35
    s = np.array([0.05, 0.3, 0.77, 1.0])
    X = np.array([[0.3, -0.2], [-0.8, 0.5], [1.0, 1.0], [0.0, 0.0]])
    got = masked.gaussian_sequence_field(s, X, A, V, mean_curve=masked.circle_curve,
                                         sigma=sigma)
    ref = np.array([_hermite_reference(si, xi, A, V, masked.circle_curve, sigma)
                    for si, xi in zip(s, X, strict=True)])
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-7)  # trapezoid error ~ grid^-2


def test_gaussian_sequence_field_is_the_limit_of_sampled_sequences():
    # Monte Carlo: a sampled sequence of n tokens gives the field up to O(n^-1/2)
    rng = np.random.default_rng(3)
    A, V = np.eye(2), np.eye(2)
    s_q = np.array([0.5, 1.0])
    x_q = np.array([[0.2, 0.1], [-0.5, 0.4]])
    exact = masked.gaussian_sequence_field(s_q, x_q, A, V, mean_curve=masked.circle_curve,
                                           sigma=0.3)
    errs = []
    for n in (400, 40000):
        s, X = masked.sample_gaussian_sequence(n, masked.circle_curve, 0.3, rng)
        errs.append(np.abs(masked.masked_velocity(s, X, A, V, queries=x_q,
                                                  query_positions=s_q) - exact).max())
    assert errs[1] < 0.03 and errs[1] < errs[0]


def test_sample_gaussian_sequence_positions_moments_and_seed():
    s, X = masked.sample_gaussian_sequence(5000, masked.circle_curve, 0.5,
                                           np.random.default_rng(4))
    np.testing.assert_array_equal(s, np.arange(1, 5001) / 5000)
    resid = X - masked.circle_curve(s)
    assert abs(resid.std() - 0.5) < 0.02 and np.abs(resid.mean(axis=0)).max() < 0.03
    s2, X2 = masked.sample_gaussian_sequence(5000, masked.circle_curve, 0.5,
                                             np.random.default_rng(4))
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_allclose(np.linalg.norm(masked.circle_curve(s), axis=1), 1.0)


def test_gaussian_sequence_bad_inputs():
    A, V = np.eye(2), np.eye(2)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="sigma"):
        masked.sample_gaussian_sequence(3, masked.circle_curve, -1.0, rng)
    with pytest.raises(ValueError, match="rng"):
        masked.sample_gaussian_sequence(3, masked.circle_curve, 1.0, 0)
    with pytest.raises(ValueError, match="mean_curve"):
        masked.sample_gaussian_sequence(3, "circle", 1.0, rng)
    with pytest.raises(ValueError, match="> 0"):
        masked.gaussian_sequence_field([0.0], [[0.0, 0.0]], A, V,
                                       mean_curve=masked.circle_curve, sigma=0.1)
    with pytest.raises(ValueError, match="dimension"):
        masked.gaussian_sequence_field([0.5], [[0.0, 0.0, 0.0]], np.eye(3), np.eye(3),
                                       mean_curve=masked.circle_curve, sigma=0.1)


def test_conditional_distance_distinct_positions_is_weighted_rms_and_matches_binned():
    rng = np.random.default_rng(5)
    n = 8
    tau = (np.arange(n) + 0.5) / n  # one atom per bin of the binned estimator
    X, Y = rng.normal(size=(n, 2)), rng.normal(size=(n, 2))
    w = rng.dirichlet(np.ones(n))
    got = masked.conditional_distance(tau, X, Y, weights=w)
    rms = np.sqrt(np.sum(w * np.sum((X - Y) ** 2, axis=1)))
    assert got == pytest.approx(rms, rel=1e-12)
    from transformer_pde import transport

    binned = transport.conditional_wasserstein(tau, X, tau, Y, weights_x=w, weights_y=w,
                                               bins=n)
    # binned weights bins by 1/B, this one by the mass: equal for uniform weights only
    u = masked.conditional_distance(tau, X, Y)
    binned_u = transport.conditional_wasserstein(tau, X, tau, Y, bins=n)
    assert u == pytest.approx(binned_u, rel=1e-10)
    assert binned > 0


def test_conditional_distance_shared_positions_uses_exact_transport():
    # two atoms at one position, swapped: the conditional laws are equal, distance 0
    tau = np.array([0.5, 0.5, 1.0])
    X = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 2.0]])
    Y = X[[1, 0, 2]]
    assert masked.conditional_distance(tau, X, Y) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="same shape"):
        masked.conditional_distance(tau, X, Y[:2])
    with pytest.raises(ValueError, match="p must"):
        masked.conditional_distance(tau, X, Y, p=0.5)


def test_masked_flow_jacobian_single_token_and_causal_structure():
    from scipy.linalg import expm

    A = np.array([[0.5, 0.2], [0.1, -0.3]])
    V = np.array([[0.2, -0.5], [0.4, 0.1]])
    # one token attends only to itself: x' = V x, J = exp(TV) (RK4 error ~ (T/steps)^4)
    J1 = masked.masked_flow_jacobian([1.0], np.array([[0.3, -0.7]]), A, V, 1.0, steps=40)
    np.testing.assert_allclose(J1, expm(V), atol=1e-8)
    rng = np.random.default_rng(6)
    n = 5
    s = np.arange(1, n + 1) / n
    X0 = rng.normal(size=(n, 2))
    J = masked.masked_flow_jacobian(s, X0, A, V, 1.0)
    for i in range(n - 1):  # token i does not depend on later tokens
        assert np.abs(J[2 * i:2 * i + 2, 2 * (i + 1):]).max() == 0.0
    # directional derivative against a one-sided difference with a different step
    flow = masked.masked_flow_map(s, A, V, 1.0)
    E = rng.normal(size=(n, 2))
    fd = (flow(X0 + 1e-7 * E) - flow(X0)) / 1e-7
    np.testing.assert_allclose((J @ E.ravel()).reshape(n, 2), fd, atol=1e-6)


def _hermite_variance_reference(s, x, A, V, mean_curve, sigma):
    """lim n E|Gamma_n - Gamma|^2 by quadrature: Gauss-Hermite in y, adaptive in tau.

    Var_tau[w V(y - g)] and E_tau[w], w = exp(<Ax, y>), computed numerically at each position
    (no closed-form Gaussian moment is used), integrated over [0, s].
    """
    from scipy.integrate import quad

    nodes, wts = np.polynomial.hermite_e.hermegauss(40)
    wts = wts / np.sqrt(2 * np.pi)
    Z = np.array([[a, b] for a in nodes for b in nodes])
    W = np.array([wa * wb for wa in wts for wb in wts])
    b = A @ x
    g = _hermite_reference(s, x, A, np.eye(2), mean_curve, sigma)

    def moments(tau):
        y = mean_curve(np.array([tau]))[0] + sigma * Z
        w = np.exp(y @ b)
        vy = (y - g) @ V.T
        second = W @ (w**2 * np.sum(vy**2, axis=1))
        first = (W * w) @ vy
        return second - first @ first, W @ w

    var = quad(lambda t: moments(t)[0], 0.0, s, epsabs=1e-13, epsrel=1e-10, limit=200)[0]
    den = quad(lambda t: moments(t)[1], 0.0, s, epsabs=1e-13, epsrel=1e-10, limit=200)[0]
    return var / den**2


def test_gaussian_sequence_field_variance_against_quadrature_reference():
    A = np.array([[1.5, 0.5], [-0.5, 1.0]])
    V = np.array([[0.5, -1.0], [1.0, 0.5]])
    sigma = 0.35
    s = np.array([0.05, 0.3, 1.0])
    X = np.array([[0.3, -0.2], [-0.8, 0.5], [1.0, 1.0]])
    got = masked.gaussian_sequence_field_variance(s, X, A, V, mean_curve=masked.circle_curve,
                                                  sigma=sigma)
    ref = np.array([_hermite_variance_reference(si, xi, A, V, masked.circle_curve, sigma)
                    for si, xi in zip(s, X, strict=True)])
    np.testing.assert_allclose(got, ref, rtol=1e-6)  # trapezoid error ~ grid^-2


def test_gaussian_sequence_field_variance_is_the_monte_carlo_limit():
    # n E|Gamma_n - Gamma|^2 over independent sequences, within 4 standard errors of the limit
    rng = np.random.default_rng(12)
    A = np.array([[1.0, 0.5], [0.0, -1.0]])
    V = np.array([[1.0, 0.0], [0.5, 2.0]])
    s_q, x_q = np.array([0.6]), np.array([[0.4, -0.7]])
    kw = {"mean_curve": masked.circle_curve, "sigma": 0.4}
    exact = masked.gaussian_sequence_field(s_q, x_q, A, V, **kw)
    limit = masked.gaussian_sequence_field_variance(s_q, x_q, A, V, **kw)[0]
    n, draws = 4000, 1500
    sq = np.empty(draws)
    for k in range(draws):
        s, X = masked.sample_gaussian_sequence(n, masked.circle_curve, 0.4, rng)
        G = masked.masked_velocity(s, X, A, V, queries=x_q, query_positions=s_q)
        sq[k] = n * np.sum((G - exact) ** 2)
    se = sq.std(ddof=1) / np.sqrt(draws)
    assert abs(sq.mean() - limit) < 4 * se, (sq.mean(), limit, se)
    assert se < 0.05 * limit  # the test resolves the limit to a few percent


def test_gaussian_sequence_field_variance_bad_inputs():
    A, V = np.eye(2), np.eye(2)
    with pytest.raises(ValueError, match="> 0"):
        masked.gaussian_sequence_field_variance([0.0], [[0.0, 0.0]], A, V,
                                                mean_curve=masked.circle_curve, sigma=0.1)
    with pytest.raises(ValueError, match="sigma"):
        masked.gaussian_sequence_field_variance([0.5], [[0.0, 0.0]], A, V,
                                                mean_curve=masked.circle_curve, sigma=-1.0)
    with pytest.raises(ValueError, match="dimension"):
        masked.gaussian_sequence_field_variance([0.5], [[0.0, 0.0, 0.0]], np.eye(3), np.eye(3),
                                                mean_curve=masked.circle_curve, sigma=0.1)


# --- the law of n x MSE: covariance of the limit, and the band of its mean -------------------

_COV_PROBLEM = {
    "A": np.array([[1.0, 0.5], [0.0, -1.0]]),
    "V": np.array([[1.0, 0.0], [0.5, 2.0]]),
    "s": np.array([0.3, 0.6, 1.0, 0.6]),
    "x": np.array([[0.4, -0.7], [0.4, -0.7], [-0.2, 0.5], [-0.2, 0.5]]),
    "sigma": 0.4,
}


def _cov(**kw):
    p = _COV_PROBLEM
    return masked.gaussian_sequence_field_covariance(
        p["s"], p["x"], p["A"], p["V"], mean_curve=masked.circle_curve, sigma=p["sigma"], **kw)


def test_gaussian_sequence_field_covariance_traces_are_the_variance():
    p = _COV_PROBLEM
    C = _cov()
    q = p["s"].size
    np.testing.assert_array_equal(C, C.T)
    assert np.linalg.eigvalsh(C).min() > -1e-12 * np.abs(C).max()  # positive semidefinite
    blocks = C.reshape(q, 2, q, 2)
    traces = np.einsum("kckc->k", blocks)
    variance = masked.gaussian_sequence_field_variance(
        p["s"], p["x"], p["A"], p["V"], mean_curve=masked.circle_curve, sigma=p["sigma"])
    np.testing.assert_allclose(traces, variance, rtol=1e-10)


def test_gaussian_sequence_field_covariance_is_the_monte_carlo_limit():
    # the covariance of sqrt(n) x (errors at the 4 query points) over independent sequences
    p = _COV_PROBLEM
    rng = np.random.default_rng(5)
    exact = masked.gaussian_sequence_field(p["s"], p["x"], p["A"], p["V"],
                                           mean_curve=masked.circle_curve, sigma=p["sigma"])
    n, draws = 2000, 3000
    errs = np.empty((draws, exact.size))
    for k in range(draws):
        s, X = masked.sample_gaussian_sequence(n, masked.circle_curve, p["sigma"], rng)
        G = masked.masked_velocity(s, X, p["A"], p["V"], queries=p["x"],
                                   query_positions=p["s"])
        errs[k] = np.sqrt(n) * (G - exact).ravel()
    empirical = errs.T @ errs / draws
    C = _cov()
    # sampling error of a second moment over 3000 draws: a few per cent of its scale
    scale = np.sqrt(np.outer(np.diag(C), np.diag(C)))
    assert np.max(np.abs(empirical - C) / scale) < 0.12, np.max(np.abs(empirical - C) / scale)
    # cross-covariances between distinct positions are not zero, and they are resolved
    assert np.abs(C[0, 2]) > 0.2 * scale[0, 2]


def test_independent_positions_constant_is_the_monte_carlo_limit():
    # tokens at positions drawn uniformly and independently, instead of i/n
    p = _COV_PROBLEM
    rng = np.random.default_rng(8)
    s_q, x_q = p["s"][:1], p["x"][:1]
    kw = {"mean_curve": masked.circle_curve, "sigma": p["sigma"]}
    exact = masked.gaussian_sequence_field(s_q, x_q, p["A"], p["V"], **kw)
    c_seq = masked.gaussian_sequence_field_variance(s_q, x_q, p["A"], p["V"], **kw)[0]
    c_iid = masked.gaussian_sequence_field_variance(s_q, x_q, p["A"], p["V"], **kw,
                                                    independent_positions=True)[0]
    n, draws = 2000, 2000
    sq = np.empty(draws)
    for k in range(draws):
        tau = rng.random(n)
        X = masked.circle_curve(tau) + p["sigma"] * rng.standard_normal((n, 2))
        G = masked.masked_velocity(tau, X, p["A"], p["V"], queries=x_q, query_positions=s_q)
        sq[k] = n * np.sum((G - exact) ** 2)
    se = sq.std(ddof=1) / np.sqrt(draws)
    assert abs(sq.mean() - c_iid) < 4 * se, (sq.mean(), c_iid, se)
    assert c_iid - c_seq > 8 * se  # the two constants are told apart at this size


def test_quadratic_form_mean_band_contains_the_chi_square_quantiles():
    from scipy.stats import chi2
    # equal weights: K times the mean is lam chi^2 with K r degrees of freedom
    lam, r, K, alpha = 0.7, 5, 12, 1e-3
    low, high = masked.quadratic_form_mean_band(np.full(r, lam), K, alpha)
    assert low <= lam * chi2.ppf(alpha / 2, K * r) / K
    assert high >= lam * chi2.isf(alpha / 2, K * r) / K


def test_quadratic_form_mean_band_false_alarm_below_its_level():
    rng = np.random.default_rng(2)
    lam = np.array([2.0, 0.5, 0.1, 0.1, 0.01])  # skewed: one dominant weight
    K, alpha, runs = 20, 0.05, 200_000
    means = (rng.chisquare(K, (runs, lam.size)) * lam).sum(axis=1) / K
    low, high = masked.quadratic_form_mean_band(lam, K, alpha)
    assert np.mean(means < low) <= alpha / 2 and np.mean(means > high) <= alpha / 2
    assert np.mean((means < low) | (means > high)) > alpha / 50  # not vacuous either


def test_field_constant_check_rejects_the_constant_of_independent_positions():
    # The chapter's check: the mean of n x MSE over K sequences lies in the band of the limit
    # law. Synthetic n x MSE drawn from that law (weights of the covariance above) pass it;
    # against the constant of independent positions (the alternative the chapter rules out,
    # weights scaled to its mean) the same data fail it.
    p = _COV_PROBLEM
    q = p["s"].size
    lam = np.clip(np.linalg.eigvalsh(_cov()), 0, None) / q
    c_iid = masked.gaussian_sequence_field_variance(
        p["s"], p["x"], p["A"], p["V"], mean_curve=masked.circle_curve, sigma=p["sigma"],
        independent_positions=True).mean()
    ratio = c_iid / lam.sum()
    assert ratio > 1.3
    rng = np.random.default_rng(4)
    K, runs = 240, 2000
    means = (rng.chisquare(K, (runs, lam.size)) * lam).sum(axis=1) / K
    low, high = masked.quadratic_form_mean_band(lam, K, 1e-4)
    assert np.all((low <= means) & (means <= high))
    low_alt, high_alt = masked.quadratic_form_mean_band(lam * ratio, K, 1e-4)
    assert np.mean((low_alt <= means) & (means <= high_alt)) < 1e-2


def test_covariance_and_band_bad_inputs():
    A, V = np.eye(2), np.eye(2)
    with pytest.raises(ValueError, match="> 0"):
        masked.gaussian_sequence_field_covariance([0.0], [[0.0, 0.0]], A, V,
                                                  mean_curve=masked.circle_curve, sigma=0.1)
    with pytest.raises(ValueError, match="sigma"):
        masked.gaussian_sequence_field_covariance([0.5], [[0.0, 0.0]], A, V,
                                                  mean_curve=masked.circle_curve, sigma=-1.0)
    with pytest.raises(ValueError, match="weights"):
        masked.quadratic_form_mean_band([1.0, -0.5], 10, 0.01)
    with pytest.raises(ValueError, match="count"):
        masked.quadratic_form_mean_band([1.0], 0, 0.01)
    with pytest.raises(ValueError, match="false_alarm"):
        masked.quadratic_form_mean_band([1.0], 10, 1.5)


def test_sigma_is_checked_by_one_function_that_names_it():
    # the three Gaussian-sequence fields share _gaussian_sequence_inputs: sigma is named
    # whether it is complex, a string, a bool, negative or not finite
    for f in (masked.gaussian_sequence_field, masked.gaussian_sequence_field_variance,
              masked.gaussian_sequence_field_covariance):
        for bad in (0.3 + 1j, "0.3", True, -0.1, np.nan):
            with pytest.raises(ValueError, match="sigma"):
                f([0.5], [[1.0, 0.0]], np.eye(2), np.eye(2), mean_curve=masked.circle_curve,
                  sigma=bad, grid=10)
    with pytest.raises(ValueError, match="sigma"):
        masked.sample_gaussian_sequence(4, masked.circle_curve, 0.3 + 1j,
                                        np.random.default_rng(0))
