"""Tests of transformer_pde.meanfield and transformer_pde.stability (chapter 2)."""

import itertools

import numpy as np
import pytest
from scipy import integrate
from scipy.linalg import expm, sqrtm
from transformer_pde import attention, dynamics
from transformer_pde.meanfield import interaction_strength, softmax_weight_second_moment
from transformer_pde.stability import flow_jacobian, gronwall_rate

ALPHA = np.array([0.5, -0.3])
SIGMA = np.array([[0.5, 0.2], [0.2, 0.3]])


# --------------------------------------------------------------------------------------
# second moment of the softmax weights
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("a, m, s2", [(0.3, 0.4, 0.8), (-0.5, -0.2, 0.6), (0.8, 0.1, 0.45)])
def test_second_moment_one_dimension_against_quadrature(a, m, s2):
    # d = 1: E exp(2 a x y) for x, y ~ N(m, s2) by two-dimensional adaptive quadrature
    # (rho = |a| s2 < 1/2 in all three cases).
    s = np.sqrt(s2)

    def integrand(y, x):
        dens = np.exp(-((x - m) ** 2 + (y - m) ** 2) / (2 * s2)) / (2 * np.pi * s2)
        return np.exp(2 * a * x * y) * dens

    ref, _ = integrate.dblquad(integrand, m - 14 * s, m + 14 * s, m - 14 * s, m + 14 * s,
                               epsabs=0, epsrel=1e-11)
    got = softmax_weight_second_moment([[a]], [m], [[s2]])
    assert got == pytest.approx(ref, rel=1e-8)


def test_second_moment_against_monte_carlo():
    # d = 2, rho = 0.15 < 1/4, so the Monte Carlo estimator exp(2<Ax,y>) has finite variance
    # (its own second moment is the fourth moment, finite for rho < 1/4): within 5 standard
    # errors.
    rng = np.random.default_rng(7)
    A = np.array([[0.3, -0.2], [0.1, 0.25]])
    A *= 0.15 / interaction_strength(A, SIGMA)
    L = np.linalg.cholesky(SIGMA)
    n = 400_000
    X = ALPHA + rng.standard_normal((n, 2)) @ L.T
    Y = ALPHA + rng.standard_normal((n, 2)) @ L.T
    samples = np.exp(2 * np.einsum("ij,jk,ik->i", Y, A, X))
    err = samples.std() / np.sqrt(n)
    assert abs(samples.mean() - softmax_weight_second_moment(A, ALPHA, SIGMA)) < 5 * err


def test_interaction_strength_against_sqrtm():
    A = np.array([[1.0, 2.0], [-0.5, 0.3]])
    S = np.real(sqrtm(SIGMA))
    assert interaction_strength(A, SIGMA) == pytest.approx(
        np.linalg.svd(S @ A @ S, compute_uv=False)[0], rel=1e-12)


def test_second_moment_threshold():
    # finite and increasing as rho -> 1/2 from below (to +inf: det(I - 2H) -> 0), inf at and
    # beyond 1/2
    A0 = np.array([[0.3, -0.2], [0.1, 0.25]])
    A0 /= interaction_strength(A0, SIGMA)
    below = [softmax_weight_second_moment(r * A0, ALPHA, SIGMA) for r in (0.4, 0.45, 0.49)]
    assert np.all(np.isfinite(below)) and below[0] < below[1] < below[2]
    assert below[2] > 5 * below[0]
    for r in (0.5 + 1e-9, 0.7, 2.0):
        assert softmax_weight_second_moment(r * A0, ALPHA, SIGMA) == np.inf


def test_second_moment_zero_interaction_is_one():
    assert softmax_weight_second_moment(np.zeros((2, 2)), ALPHA, SIGMA) == pytest.approx(1.0)


@pytest.mark.parametrize("args, match", [
    ((np.eye(3), ALPHA, SIGMA), "A"),
    ((np.eye(2), [[0.0, 1.0]], SIGMA), "alpha"),
    ((np.eye(2), ALPHA, [[1.0, 0.5], [0.0, 1.0]]), "symmetric"),
    ((np.eye(2), ALPHA, [[1.0, 0.0], [0.0, -1.0]]), r"positive (semi-)?definite"),
    ((np.eye(2), [np.nan, 0.0], SIGMA), "alpha"),
])
def test_second_moment_bad_inputs(args, match):
    with pytest.raises(ValueError, match=match):
        softmax_weight_second_moment(*args)


# --------------------------------------------------------------------------------------
# Groenwall rate
# --------------------------------------------------------------------------------------

def test_gronwall_rate_formula_and_limits():
    a, v, R = 0.7, 1.3, 0.9
    for p in (1, 2, 3.5):
        ref = v * (a * R * R + (1 + 2 * a * R * R) * np.exp(2 * a * R * R / p))
        assert gronwall_rate(a, v, R, p) == pytest.approx(ref, rel=1e-14)
    assert gronwall_rate(a, v, 0.0, 2) == pytest.approx(v)  # uniform attention
    R = np.linspace(0, 3, 7)
    rates = gronwall_rate(a, v, R, 2)
    assert rates.shape == R.shape and np.all(np.diff(rates) > 0)
    assert gronwall_rate(a, v, 2.0, 1) > gronwall_rate(a, v, 2.0, 2)
    assert gronwall_rate(1.0, 1.0, 30.0, 1) == np.inf  # overflow is reported as inf


@pytest.mark.parametrize("kwargs", [dict(a=-1, v=1, R=1, p=2), dict(a=1, v=np.nan, R=1, p=2),
                                    dict(a=1, v=1, R=1, p=0.5), dict(a=1, v=1, R=1, p="x")])
def test_gronwall_rate_bad_inputs(kwargs):
    with pytest.raises(ValueError):
        gronwall_rate(**kwargs)


# --------------------------------------------------------------------------------------
# flow Jacobian
# --------------------------------------------------------------------------------------

def _parameters():
    rng = np.random.default_rng(3)
    A0, A1 = rng.standard_normal((2, 2, 2)) / 2
    V0 = rng.standard_normal((2, 2)) / 3
    return (lambda t: A0 + np.sin(2 * t) * A1), (lambda t: 0.5 * np.eye(2) + np.cos(t) * V0)


def test_flow_jacobian_against_finite_differences():
    A, V = _parameters()
    X0 = np.random.default_rng(4).uniform(-1, 1, (5, 2))
    times = np.array([0.0, 0.5, 1.0])
    X, J = flow_jacobian(A, V, X0, times, rtol=1e-11, atol=1e-13)
    assert np.allclose(J[0], np.eye(10))
    field = dynamics.attention_field(attention.softmax, A=A, V=V)
    ref = dynamics.integrate(field, X0, times, rtol=1e-11, atol=1e-13)
    assert np.allclose(X, ref, atol=1e-9)
    h = 1e-5
    for col in (0, 3, 9):
        E = np.zeros(10)
        E[col] = 1.0
        ends = [dynamics.integrate(field, X0 + s * h * E.reshape(5, 2), times, rtol=1e-12,
                                   atol=1e-14)[-1].ravel() for s in (1, -1)]
        fd = (ends[0] - ends[1]) / (2 * h)
        assert np.allclose(J[-1][:, col], fd, rtol=1e-6, atol=1e-7)


def test_flow_jacobian_constant_matrices_and_uniform_limit():
    # A = 0: uniform attention, x_i' = V xbar, so J(t) = I + (expm(tV) - I) (x) (1 1^T / n)
    V = np.array([[0.2, -0.4], [0.3, 0.1]])
    X0 = np.random.default_rng(5).standard_normal((4, 2))
    _, J = flow_jacobian(np.zeros((2, 2)), V, X0, [0.0, 1.3], rtol=1e-12, atol=1e-14)
    ref = np.eye(8) + np.kron(np.ones((4, 4)) / 4, expm(1.3 * V) - np.eye(2))
    assert np.allclose(J[-1], ref, atol=1e-10)


def test_flow_jacobian_bad_inputs():
    with pytest.raises(ValueError, match="times"):
        flow_jacobian(np.eye(2), np.eye(2), np.zeros((3, 2)), [0.0, 0.0])
    with pytest.raises(ValueError, match="A"):
        flow_jacobian(np.eye(3), np.eye(2), np.zeros((3, 2)), [0.0, 1.0])


# --------------------------------------------------------------------------------------
# support growth, quadrature, Groenwall constant, l1(l2) norm
# --------------------------------------------------------------------------------------

from transformer_pde import stability, transport, variants  # noqa: E402


def test_heads_growth_rate_closed_forms():
    v = 1.3
    gap = np.pi / 4096 / 2
    opposite = np.stack([v * np.eye(2), -v * np.eye(2)])
    orthogonal = np.stack([v * np.diag([1.0, 0.0]), v * np.diag([0.0, 1.0])])
    # kappa = 2v for opposite heads, sqrt(2) v for orthogonal ones; the returned value is an
    # upper bound within the grid gap (pi / 4096 / 2) * sum_h ||V_h||
    for Vs, kappa in ((opposite, 2 * v), (orthogonal, np.sqrt(2) * v)):
        got = stability.heads_growth_rate(Vs)
        assert kappa <= got <= kappa + gap * 2 * v + 1e-12


def test_heads_growth_rate_against_fine_search():
    rng = np.random.default_rng(4)
    Vs = rng.standard_normal((3, 2, 2))
    theta = np.linspace(0, 2 * np.pi, 200_001)
    U = np.stack([np.cos(theta), np.sin(theta)])
    fine = np.linalg.norm(np.einsum("hij,ik->hjk", Vs, U), axis=1).sum(axis=0).max()
    got = stability.heads_growth_rate(Vs)
    lip = sum(np.linalg.norm(V, 2) for V in Vs)
    assert fine - 1e-9 <= got <= fine + lip * np.pi / 4096
    with pytest.raises(ValueError, match="Vs"):
        stability.heads_growth_rate(np.ones((2, 3, 3)))


def test_support_radius_and_cumulative_integral():
    traj = np.array([[[3.0, 4.0], [0.0, 1.0]], [[0.0, 0.5], [1.0, 1.0]]])
    assert stability.support_radius(traj) == pytest.approx([5.0, np.sqrt(2)])
    times = np.linspace(0.0, 2.0, 5)
    got = stability.cumulative_integral(np.sin, times)
    assert got == pytest.approx(1 - np.cos(times), abs=1e-14)
    with pytest.raises(ValueError, match="times"):
        stability.cumulative_integral(np.sin, [1.0, 0.0])
    with pytest.raises(ValueError, match="trajectory"):
        stability.support_radius(np.ones((2, 2)))


def test_smallest_distance_and_identity_coupling():
    rng = np.random.default_rng(11)
    X = rng.uniform(-1, 1, size=(12, 2))
    gap = stability.smallest_distance(X)
    ref = min(np.linalg.norm(X[i] - X[j]) for i in range(12) for j in range(i))
    assert gap == pytest.approx(ref, rel=1e-15)
    # moving every token by less than half of it keeps the identity coupling optimal
    step = rng.normal(size=X.shape)
    Y = X + 0.49 * gap * step / np.linalg.norm(step, axis=1).max()
    for p in (1, 2):
        identity = np.mean(np.linalg.norm(X - Y, axis=1) ** p) ** (1 / p)
        assert transport.wasserstein(X, Y, p=p) == pytest.approx(identity, rel=1e-9)
    with pytest.raises(ValueError, match="at least 2"):
        stability.smallest_distance(X[:1])


@pytest.mark.parametrize("p", [1, 2])
def test_log_gronwall_constant_against_quadrature(p):
    # constant A, V: R(t) = R0 e^{vt}, log C_p(T) = int_0^T L_p(a, v, R0 e^{vs}) ds
    A = np.array([[0.6, 0.2], [-0.1, 0.4]])
    V = np.array([[0.5, 0.1], [0.0, 0.3]])
    a, v, R0, T = np.linalg.norm(A, 2), np.linalg.norm(V, 2), 0.8, 1.2
    ref, _ = integrate.quad(lambda s: gronwall_rate(a, v, R0 * np.exp(v * s), p), 0, T,
                            epsabs=0, epsrel=1e-12)
    got = stability.log_gronwall_constant(lambda t: A, lambda t: V, R0, [0.0, T / 2, T], p,
                                          refine=100)
    assert got[0] == 0.0
    # trapezoid rule, 200 steps, on an integrand growing like exp(2 a R(t)^2 / p): second
    # order, so halving the step divides the error by 4
    coarse = stability.log_gronwall_constant(lambda t: A, lambda t: V, R0, [0.0, T / 2, T], p,
                                             refine=50)
    assert abs(coarse[-1] - ref) == pytest.approx(4 * abs(got[-1] - ref), rel=0.05)
    assert got[-1] == pytest.approx(ref, rel=1e-3)
    # two identical heads: kappa = 2v for proportional heads, and the rates add; second order
    # again, so Richardson's extrapolation from 100 and 50 steps is within 1e-4
    heads = [stability.log_gronwall_constant(lambda t: np.stack([A, A]),
                                             lambda t: np.stack([V, V]), R0, [0.0, T], p,
                                             refine=refine)[-1] for refine in (100, 50)]
    kappa = stability.heads_growth_rate(np.stack([V, V]))
    ref2, _ = integrate.quad(lambda s: 2 * gronwall_rate(a, v, R0 * np.exp(kappa * s), p), 0,
                             T, epsabs=0, epsrel=1e-12)
    assert abs(heads[1] - ref2) == pytest.approx(4 * abs(heads[0] - ref2), rel=0.05)
    assert (4 * heads[0] - heads[1]) / 3 == pytest.approx(ref2, rel=1e-4)


def test_l1_l2_norm_against_search():
    rng = np.random.default_rng(5)
    n = 3
    J = rng.standard_normal((2 * n, 2 * n))
    theta = np.linspace(0, 2 * np.pi, 100_001)
    U = np.stack([np.cos(theta), np.sin(theta)])
    blocks = J.reshape(n, 2, n, 2)
    ref = max(sum(np.linalg.norm(blocks[i, :, j, :] @ U, axis=0) for i in range(n)).max()
              for j in range(n))
    got = stability.l1_l2_norm(J, n)
    assert ref * (1 - np.pi / 4096) <= got <= ref + 1e-12
    # identity: a unit perturbation of one atom moves that atom only
    assert stability.l1_l2_norm(np.eye(2 * n), n) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="d"):
        stability.l1_l2_norm(np.eye(9), 3, d=3)


# --------------------------------------------------------------------------------------
# the six variants
# --------------------------------------------------------------------------------------

def test_variants_weights_equal_repeated_atoms():
    gen = np.random.default_rng(6)
    P = variants.random_parameters(gen)
    atoms = variants.uniform_ball(gen, 4)
    counts = np.array([1, 3, 2, 1])
    repeated = np.repeat(atoms, counts, axis=0)
    owner = np.repeat(np.arange(4), counts)
    for name in variants.VARIANTS:
        weighted = variants.variant_field(name, P, weights=counts / counts.sum())(0.7, atoms)
        uniform = variants.variant_field(name, P)(0.7, repeated)
        gap = np.abs(uniform - weighted[owner]).max()
        if name == "causal":
            assert gap > 1e-3  # copies at consecutive positions see different prefixes
        else:
            assert gap < 1e-12, name


def test_variant_field_matches_attention_and_rates():
    gen = np.random.default_rng(8)
    P = variants.random_parameters(gen)
    X = variants.uniform_ball(gen, 6)
    t = 0.3
    assert variants.variant_field("softmax", P)(t, X) == pytest.approx(
        attention.softmax(X, P["A"](t), P["V"](t)))
    assert variants.variant_field("causal", P)(t, X)[0] == pytest.approx(P["V"](t) @ X[0])
    assert variants.support_rate("softmax", P, t) == pytest.approx(np.linalg.norm(P["V"](t), 2))
    assert variants.support_rate("multihead", P, t) >= np.linalg.norm(P["Vs"](t).sum(0), 2)
    assert P["As"](t).shape == (2, 2, 2)
    assert np.all(np.linalg.norm(X, axis=1) <= 1) and X.shape == (6, 2)
    with pytest.raises(ValueError, match="name"):
        variants.variant_field("linear", P)
    with pytest.raises(ValueError, match="name"):
        variants.support_rate("linear", P, t)


def test_gaussian_moments_closed_form():
    # softmax, V = I, A symmetric constant: Sigma(t) = (Sigma0^-1 - 2 t A)^-1 (chapter 3)
    A = np.array([[0.3, 0.1], [0.1, -0.2]])
    P = {"A": lambda t: A, "V": lambda t: np.eye(2)}
    times = np.array([0.0, 0.4, 0.8])
    _, Sigma = variants.gaussian_moments("softmax", P, ALPHA, SIGMA, times)
    for t, S in zip(times, Sigma, strict=True):
        assert S == pytest.approx(np.linalg.inv(np.linalg.inv(SIGMA) - 2 * t * A), rel=1e-9)
    # V = 0: nothing moves, rho is that of Sigma0
    P0 = {"A": lambda t: A, "V": lambda t: np.zeros((2, 2))}
    rho = variants.max_interaction_strength("softmax", P0, ALPHA, SIGMA, 1.0, steps=4)
    assert rho == pytest.approx(interaction_strength(A, SIGMA), rel=1e-12)
    with pytest.raises(ValueError, match="name"):
        variants.gaussian_moments("sigmoid", P, ALPHA, SIGMA, times)


def test_scale_interaction_and_moderate_interaction():
    gen = np.random.default_rng(12)
    P = variants.random_parameters(gen)
    Pc = variants.scale_interaction(P, 0.3)
    t = 0.4
    assert Pc["A"](t) == pytest.approx(0.3 * P["A"](t), rel=1e-14)
    assert Pc["K"](t).T @ Pc["Q"](t) == pytest.approx(Pc["A"](t), rel=1e-12)
    assert Pc["As"](t) == pytest.approx(0.3 * P["As"](t), rel=1e-14)
    assert np.array_equal(Pc["V"](t), P["V"](t)) and np.array_equal(Pc["Vs"](t), P["Vs"](t))
    # rho(0) at Sigma0 scales linearly with the factor
    rho = interaction_strength(P["A"](0.0), SIGMA)
    assert interaction_strength(Pc["A"](0.0), SIGMA) == pytest.approx(0.3 * rho, rel=1e-12)
    # the search returns the first factor below the bound, and says when there is none
    big = variants.scale_interaction(P, 20.0)
    strength = max(variants.max_interaction_strength(name, big, ALPHA, SIGMA, 1.0)
                   for name in ("softmax", "multihead"))
    assert strength >= 0.5
    scales = (1.0, 0.8, 0.6, 0.4, 0.2, 0.1)
    _, c, r = variants.moderate_interaction(big, ALPHA, SIGMA, 1.0, 0.5, scales=scales)
    assert r < 0.5 and c < 1
    previous = variants.scale_interaction(big, scales[scales.index(c) - 1])
    assert max(variants.max_interaction_strength(name, previous, ALPHA, SIGMA, 1.0)
               for name in ("softmax", "multihead")) >= 0.5
    with pytest.raises(RuntimeError, match="rho_max"):
        variants.moderate_interaction(big, ALPHA, SIGMA, 1.0, 1e-6)
    with pytest.raises(ValueError, match="scales"):
        variants.moderate_interaction(big, ALPHA, SIGMA, 1.0, 0.5, scales=())
    with pytest.raises(ValueError, match="scales"):
        variants.moderate_interaction(big, ALPHA, SIGMA, 1.0, 0.5, scales=(1.0, -0.5))


def test_particle_moment_errors_against_a_loop_and_jobs():
    gen = np.random.default_rng(13)
    P = variants.random_parameters(gen)
    sizes, R, T = [6, 9], 3, 0.5
    out = variants.particle_moment_errors("softmax", P, ALPHA, SIGMA, sizes, R, T, [4, 1],
                                          max_step=0.1, keep=True, n_jobs=1)
    alpha_T, Sigma_T = (m[-1] for m in variants.gaussian_moments(
        "softmax", P, ALPHA, SIGMA, [0.0, T]))
    for k, n in enumerate(sizes):
        for r in range(R):
            X0 = ALPHA + np.random.default_rng([4, 1, k, r]).standard_normal((n, 2)) \
                @ np.linalg.cholesky(SIGMA).T
            XT = dynamics.integrate(variants.variant_field("softmax", P), X0, [0.0, T],
                                    method="rk4", max_step=0.1)[-1]
            assert out.final[k][r] == pytest.approx(XT, rel=1e-13, abs=1e-15)
            m = XT.mean(axis=0)
            cov = (XT - m).T @ (XT - m) / n
            assert out.mean[k, r] == pytest.approx(np.sum((m - alpha_T) ** 2), rel=1e-10)
            assert out.covariance[k, r] == pytest.approx(np.sum((cov - Sigma_T) ** 2),
                                                         rel=1e-10)
    two = variants.particle_moment_errors("softmax", P, ALPHA, SIGMA, sizes, R, T, [4, 1],
                                          max_step=0.1, n_jobs=2)
    np.testing.assert_array_equal(two.mean, out.mean)
    np.testing.assert_array_equal(two.covariance, out.covariance)
    assert two.final is None
    with pytest.raises(ValueError, match="name"):
        variants.particle_moment_errors("sinkhorn", P, ALPHA, SIGMA, sizes, R, T, 0)


def test_sample_distances_against_a_loop_and_jobs():
    gen = np.random.default_rng(14)
    clouds = [gen.standard_normal((n, 2)) for n in (5, 8, 8)]
    out = variants.sample_distances(clouds, ALPHA, SIGMA, [7], n_jobs=1)
    L = np.linalg.cholesky(SIGMA)
    for j, X in enumerate(clouds):
        fresh = ALPHA + np.random.default_rng([7, j]).standard_normal((2,) + X.shape) @ L.T
        # reference: the best of all permutations (equal weights, small n: brute force for
        # n = 5, POT's exact solver checked by test_transport otherwise)
        ref = [transport.wasserstein(X, fresh[0]), transport.wasserstein(fresh[1], fresh[0])]
        if X.shape[0] == 5:
            ref[0] = min(np.sqrt(np.mean(np.sum((X - fresh[0][list(p)]) ** 2, axis=1)))
                         for p in itertools.permutations(range(5)))
        assert out[j] == pytest.approx(ref, rel=1e-10)
    np.testing.assert_array_equal(variants.sample_distances(clouds, ALPHA, SIGMA, [7],
                                                            n_jobs=2), out)
    with pytest.raises(ValueError, match="clouds"):
        variants.sample_distances([np.ones((3, 3))], ALPHA, SIGMA, 1)


def test_moderate_interaction_skips_a_blow_up():
    # V = I, A = a Sigma0^-1: Sigma(t) = (Sigma0^-1 - 2 t A)^-1 blows up at t* = 1 / (2 a)
    # (chapter 3), before T = 1 for a = 1; at a = 0.2 it does not, and rho(t) = a / (1 - 2at)
    # is largest at T: 0.2 / 0.6 = 1/3
    A = np.linalg.inv(SIGMA)
    P = {"A": lambda t: A, "V": lambda t: np.eye(2), "As": lambda t: A[None],
         "Vs": lambda t: np.eye(2)[None]}
    with pytest.raises(RuntimeError):
        variants.max_interaction_strength("softmax", P, ALPHA, SIGMA, 1.0)
    _, c, rho = variants.moderate_interaction(P, ALPHA, SIGMA, 1.0, 0.4,
                                              scales=(1.0, 0.2, 0.1))
    assert c == 0.2
    assert rho == pytest.approx(1 / 3, rel=1e-9)
