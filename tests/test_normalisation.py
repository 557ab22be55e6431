"""Tests of transformer_pde.normalisation against independent references.

The speed factors against finite differences of the directions along each flow; the
equiangular ODE against chapter 7's SA equation and against the flows integrated in R^d;
the reduced network against the full one; the networks against the ODE (order one); the
asymptotic laws against long integrations; the rate checks of chapter 8 against wrong laws.
"""

import numpy as np
import pytest
from transformer_pde import dynamics, fitting, normalisation, rates, sphere

SCHEMES = normalisation.SCHEMES


@pytest.fixture
def tokens():
    rng = np.random.default_rng(8)
    return sphere.uniform_on_sphere(6, 5, rng)


def test_attention_vector_matches_the_dense_softmax(tokens):
    beta = 1.7
    G = np.exp(beta * tokens @ tokens.T)
    dense = (G / G.sum(axis=1, keepdims=True)) @ tokens
    assert np.allclose(normalisation.attention_vector(tokens, beta), dense, atol=1e-14)
    # rows are normalised first
    assert np.allclose(normalisation.attention_vector(3.0 * tokens, beta), dense, atol=1e-14)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("t", [0.5, 3.0])
def test_speed_factor_against_finite_differences(scheme, t, tokens):
    # off the sphere, tokens with norms != 1; on it (post, ngpt, mix before 1), unit tokens
    on_sphere = scheme in ("post", "ngpt", "cod") or (scheme == "mix" and t < 1.0)
    X = tokens if on_sphere else tokens * np.linspace(0.5, 2.0, 6)[:, None]
    field = normalisation.flow_field(scheme, 1.3, alpha=0.7, switch=1.0)
    eps = 1e-6
    U = X / np.linalg.norm(X, axis=1, keepdims=True)

    def direction(Y):
        return Y / np.linalg.norm(Y, axis=1, keepdims=True)

    V = field(t, X)
    fd = (direction(X + eps * V) - direction(X - eps * V)) / (2 * eps)
    A = normalisation.attention_vector(U, 1.3)
    s = normalisation.speed_factor(scheme, np.linalg.norm(X, axis=1), A, t, alpha=0.7,
                                   switch=1.0)
    PA = A - np.einsum("ij,ij->i", U, A)[:, None] * U
    assert np.allclose(fd, PA / s[:, None], atol=1e-8)


def test_post_equiangular_is_chapter_7_sa():
    for u in (0.9, 0.3, 1e-3):
        du, dr = normalisation.equiangular_rhs("post", 0.0, u, 1.0, 7, 2.5)
        assert dr == 0.0
        assert np.isclose(-du, sphere.equiangular_rhs(1 - u, 7, 2.5, "sa"), rtol=1e-13)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_equiangular_flow_matches_the_flow_in_rd(scheme):
    n, beta = 5, 1.2
    X0 = sphere.equiangular_configuration(n, 0.2)
    times = np.linspace(0.0, 3.0, 7)
    traj = dynamics.integrate(normalisation.flow_field(scheme, beta, alpha=0.8, switch=1.0),
                              X0, times, rtol=1e-11, atol=1e-13, max_step=0.05)
    u, r = normalisation.equiangular_flow(scheme, 0.8, n, beta, times, alpha=0.8, switch=1.0)
    assert np.allclose(normalisation.pair_gap(traj), u, rtol=1e-7)
    assert np.allclose(np.linalg.norm(traj, axis=-1).mean(axis=1), r, rtol=1e-7)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_reduced_network_is_the_network(scheme):
    n = 6
    X0 = sphere.equiangular_configuration(n, 0.1)
    net = normalisation.residual_network(X0, scheme, 1.5, 4.0, 40, alpha=0.7, switch=1.0)
    u, r = normalisation.equiangular_network(scheme, 0.9, n, 1.5, 4.0, 40, alpha=0.7,
                                             switch=1.0)
    assert np.allclose(normalisation.pair_gap(net), u, rtol=1e-12)
    assert np.allclose(np.linalg.norm(net, axis=-1).mean(axis=1), r, rtol=1e-12)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_network_converges_to_the_ode_at_order_one(scheme):
    times = np.linspace(0.0, 4.0, 5)
    u_ode, _ = normalisation.equiangular_flow(scheme, 0.9, 6, 1.5, times, switch=1.0)
    errs = []
    for L in (100, 200, 400):
        u, _ = normalisation.equiangular_network(scheme, 0.9, 6, 1.5, 4.0, L, switch=1.0)
        errs.append(abs(u[-1] / u_ode[-1] - 1))
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    assert np.all(np.abs(ratios - 2) < 0.15), ratios


@pytest.mark.parametrize("scheme", SCHEMES)
def test_asymptotic_laws(scheme):
    kind, value = normalisation.asymptotic_law(scheme, alpha=0.5)
    t = np.array([0.0, 200.0, 400.0, 800.0]) if kind == "power" else np.array(
        [0.0, 10.0, 20.0, 30.0]) * 2.0 / value
    if kind == "stretched":  # u ~ C exp(-c sqrt(1 + t)): log u falls by 20-60 over t
        t = np.array([0.0, 30.0, 80.0, 150.0])
    u, r = normalisation.equiangular_flow(scheme, 1.0, 8, 1.0, t, alpha=0.5, switch=2.0)
    if kind == "exp":
        rate = -np.diff(np.log(u[1:])) / np.diff(t[1:])
        assert np.allclose(rate, value, rtol=1e-6)
    elif kind == "stretched":
        rate = -np.diff(np.log(u[1:])) / np.diff(np.sqrt(1 + t[1:]))
        assert np.allclose(rate, value, rtol=1e-6), rate
        # a plain exponential or power law would not have a constant rate in sqrt(1 + t)
        assert np.all(np.abs(-np.diff(np.log(u[1:])) / np.diff(t[1:]) - value) > 0.5)
    else:
        p = -np.diff(np.log(u[1:])) / np.diff(np.log(t[1:]))
        # corrections O(1/t) for t^-2 (r = t + c), O(t^-1/2) for the depth scaling
        assert np.all(np.abs(p - value) < (0.02 if value == 2 else 0.1)), p
        # u r^2 tends to a constant: the norm is the clock
        c = u[1:] * r[1:] ** 2
        assert abs(c[-1] / c[-2] - 1) < 1e-3


def test_the_norm_is_the_clock():
    # pre, peri and sqrt trace the same curve u(r) from the same start
    curves = {}
    for scheme in ("pre", "peri", "sqrt"):
        t = np.linspace(0.0, 200.0, 4001)
        u, r = normalisation.equiangular_flow(scheme, 0.7, 6, 1.0, t)
        curves[scheme] = (r, u)
    r_ref, u_ref = curves["pre"]
    for scheme in ("peri", "sqrt"):
        r, u = curves[scheme]
        grid = np.linspace(1.5, min(r.max(), r_ref.max()) * 0.9, 20)
        a = np.interp(grid, r_ref, np.log(u_ref))
        b = np.interp(grid, r, np.log(u))
        assert np.allclose(a, b, atol=1e-3)


def test_random_run_is_reproducible_and_rates_reject_wrong_laws():
    run = normalisation.random_run([1, 2], "post", 8, 16, 1.0, 30.0, 300)
    again = normalisation.random_run([1, 2], "post", 8, 16, 1.0, 30.0, 300)
    assert np.array_equal(run.gap, again.gap)
    t = 0.1 * np.arange(301)
    rate = rates.decay_rate(t, run.gap, high=1e-6, low=1e-12)
    assert abs(rate - 2 * np.log1p(0.1) / 0.1) < 1e-4
    assert abs(rate - 2.0) > 1e-2  # the flow's rate 2 is rejected by the tolerance 1e-4
    pre = normalisation.random_run([1, 2], "pre", 8, 16, 1.0, 60.0, 600)
    late = 0.1 * np.arange(601) >= 30
    p = fitting.fit_power_law(pre.radius[late], pre.gap[late]).exponent
    assert abs(p + 2) < 0.02
    # a wrong law (gap ~ r^-1, e.g. the depth-scaling rate in t) is rejected
    assert abs(p + 1) > 0.5
    synthetic = pre.radius[late] ** -1.0
    assert abs(fitting.fit_power_law(pre.radius[late], synthetic).exponent + 2) > 0.02


def test_bad_inputs_raise():
    X = np.eye(3)
    with pytest.raises(ValueError, match="scheme"):
        normalisation.residual_network(X, "layer", 1.0, 1.0, 10)
    with pytest.raises(ValueError, match="beta"):
        normalisation.attention_vector(X, -1.0)
    with pytest.raises(ValueError, match="X0"):
        normalisation.residual_network(2 * X, "post", 1.0, 1.0, 10)
    with pytest.raises(ValueError, match="alpha"):
        normalisation.flow_field("ngpt", 1.0, alpha=0.0)
    with pytest.raises(ValueError, match="u"):
        normalisation.equiangular_rhs("pre", 0.0, 3.0, 1.0, 4, 1.0)
    with pytest.raises(ValueError, match="r"):
        normalisation.equiangular_rhs("pre", 0.0, 0.5, -1.0, 4, 1.0)
    with pytest.raises(ValueError, match="times"):
        normalisation.equiangular_flow("pre", 0.5, 4, 1.0, [1.0, 0.0])
    with pytest.raises(ValueError, match="r must"):
        normalisation.speed_factor("pre", np.ones(2), X)
    with pytest.raises(ValueError, match="X"):
        normalisation.pair_gap(np.ones(3))


def test_ngpt_with_a_time_varying_alpha():
    # Var = e^{-2 int alpha}: log u + 2 int_0^t alpha converges
    t = np.linspace(0.0, 30.0, 31)
    u, _ = normalisation.equiangular_flow("ngpt", 1.0, 8, 1.0, t,
                                          alpha=lambda s: 1.0 + 0.5 * np.sin(s))
    c = np.log(u) + 2 * (t + 0.5 * (1 - np.cos(t)))
    assert np.all(np.abs(np.diff(c[t >= 15])) < 1e-6)
    assert np.ptp((np.log(u) + 2 * t)[t >= 15]) > 0.5  # a constant alpha = 1 is rejected
    with pytest.raises(ValueError, match="alpha"):
        normalisation.equiangular_rhs("ngpt", 0.0, 0.5, 1.0, 8, 1.0, alpha=lambda s: -1.0)


def test_fit_laws_and_network_rate():
    h, L = 0.1, 600
    t = h * np.arange(L + 1)
    for scheme in ("post", "ngpt", "cod"):
        clock = normalisation.network_rate(scheme, h, t)
        gap = 0.5 * np.exp(-clock)
        run = normalisation.RandomRun(gap, np.ones(L + 1), np.ones(L))
        assert abs(normalisation.fit_laws(run, scheme, h).rate - 1) < 1e-12
        # a flow rate 2 per unit t instead of the network's clock is rejected
        wrong = normalisation.RandomRun(0.5 * np.exp(-2 * t), np.ones(L + 1), np.ones(L))
        assert abs(normalisation.fit_laws(wrong, scheme, h).rate - 1) > 1e-3
    # cod's clock is 4 (sqrt(1 + t) - 1) up to O(h log t)
    clock = normalisation.network_rate("cod", h, t)
    assert abs(clock[-1] - 4 * (np.sqrt(1 + t[-1]) - 1)) < h * (1 + np.log(1 + t[-1]))
    r = 1.0 + t
    run = normalisation.RandomRun(3.0 / r**2, r, np.ones(L))
    f = normalisation.fit_laws(run, "pre", h)
    assert abs(f.exponent_r + 2) < 1e-12 and abs(f.growth - 1) < 1e-12
    assert abs(f.exponent_t - f.exponent_r * f.exponent_rt) < 1e-3
    bad = normalisation.RandomRun(3.0 / r, r, np.ones(L))  # gap ~ r^-1 is rejected
    assert abs(normalisation.fit_laws(bad, "pre", h).exponent_r + 2) > 0.5
    with pytest.raises(ValueError, match="scheme"):
        normalisation.network_rate("pre", h, t)


# --- random tokens at initialisation and random weights ------------------------------------


def test_initial_velocity_against_direct_attention():
    # the norms of the rows of softmax(beta Theta Theta^T) Theta, computed densely here
    key, n, d, beta = [3, 1], 60, 20, 1.5
    a = normalisation.initial_velocity(key, n, d, beta)
    Theta = sphere.uniform_on_sphere(n, d, np.random.default_rng(key))
    S = beta * Theta @ Theta.T
    W = np.exp(S - S.max(axis=1, keepdims=True))
    A = (W / W.sum(axis=1, keepdims=True)) @ Theta
    assert np.allclose(a, np.linalg.norm(A, axis=1), rtol=1e-12, atol=0)


def test_velocity_prediction_beta_zero_and_simulation():
    # beta = 0: E|A_j|^2 = E|mean of the tokens|^2 = 1/n exactly; the leading-order value
    # drops the variance (n - 1)/d of the parallel sum, a relative O(1/d)
    for n, d in ((50, 10), (400, 100)):
        assert abs(normalisation.velocity_prediction(n, d, 0.0) * n - 1) <= 1.0 / d
    # beta = 1: within 5 % of the mean of |A_j|^2 over 300 draws (relative sd ~ 1 %)
    n, d = 300, 200
    sims = [np.mean(normalisation.initial_velocity([11, k], n, d) ** 2) for k in range(300)]
    assert abs(np.mean(sims) / normalisation.velocity_prediction(n, d) - 1) < 0.05
    # the two regimes: 1/n when d >> sqrt(n), (1/d)^2 when d << sqrt(n)
    assert abs(normalisation.velocity_prediction(10**6, 10**4) * 10**6 - 1) < 0.02
    assert abs(normalisation.velocity_prediction(10**8, 10) * 100 / 1.0 - 1) < 0.2


def test_random_weights_run_at_beta_zero_is_averaging():
    # beta = 0: the logits vanish, every row of attention is the mean token, whatever Q, K
    key, n, d, T, L = [5, 2], 6, 8, 2.0, 20
    run = normalisation.random_weights_run(key, "post", n, d, 0.0, T, L)
    rng = np.random.default_rng(key)
    rng.normal(size=(d, d))
    rng.normal(size=(d, d))
    X0 = sphere.uniform_on_sphere(n, d, rng)
    ref = normalisation.residual_network(X0, "post", 0.0, T, L)
    assert np.allclose(run.gap, normalisation.pair_gap(ref), rtol=1e-10, atol=1e-14)
    pre = normalisation.random_weights_run(key, "pre", n, d, 0.0, T, L)
    ref_pre = normalisation.residual_network(X0, "pre", 0.0, T, L)
    assert np.allclose(pre.radius, np.linalg.norm(ref_pre, axis=-1).mean(axis=1), rtol=1e-12)


def test_random_weights_bad_input():
    with pytest.raises(ValueError, match="scheme"):
        normalisation.random_weights_run([0], "peri", 4, 4, 1.0, 1.0, 2)
    with pytest.raises(ValueError, match="n and d"):
        normalisation.initial_velocity([0], 1, 4)
    with pytest.raises(ValueError, match="beta"):
        normalisation.velocity_prediction(10, 10, -1.0)


def test_pair_gap_against_the_pairwise_definition():
    # dense mean over pairs of 1 - <theta_i, theta_j>, with tokens at distance ~1e-6 too
    rng = np.random.default_rng([8, 1])
    for spread in (1.0, 1e-6):
        X = rng.standard_normal((3, 7, 5)) * spread + np.array([1.0, 0, 0, 0, 0])
        X *= rng.uniform(0.5, 2.0, (3, 7, 1))
        U = X / np.linalg.norm(X, axis=-1, keepdims=True)
        i, j = np.triu_indices(7, 1)
        diff = U[:, i] - U[:, j]
        ref = 0.5 * (diff**2).sum(axis=-1).mean(axis=-1)
        assert np.allclose(normalisation.pair_gap(X), ref, rtol=1e-9, atol=0)
        assert np.isclose(normalisation.pair_gap(X[0]), ref[0], rtol=1e-9)
