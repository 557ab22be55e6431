"""Tests of the dynamics on the unit sphere (transformer_pde.sphere)."""

import numpy as np
import pytest
from transformer_pde import attention, dynamics, sphere


def angle(x, y):
    return float(np.arctan2(abs(x[0] * y[1] - x[1] * y[0]), np.dot(x, y)))


def test_tangent_projection_is_the_orthogonal_projection():
    rng = np.random.default_rng(0)
    X = sphere.uniform_on_sphere(30, 4, rng)
    Y = rng.normal(size=(30, 4))
    P = sphere.tangent_projection(X, Y)
    np.testing.assert_allclose(np.einsum("ij,ij->i", X, P), 0.0, atol=1e-14)
    np.testing.assert_allclose(sphere.tangent_projection(X, P), P, atol=1e-14)
    # on the sphere it is y - <x, y> x; off the sphere it only depends on the direction
    np.testing.assert_allclose(P, Y - np.einsum("ij,ij->i", X, Y)[:, None] * X, atol=1e-14)
    np.testing.assert_allclose(sphere.tangent_projection(3.0 * X, Y), P, atol=1e-13)


def test_normalise_and_uniform_points():
    rng = np.random.default_rng(1)
    U = sphere.uniform_on_sphere(20000, 3, rng)
    np.testing.assert_allclose(np.linalg.norm(U, axis=1), 1.0, atol=1e-15)
    # Monte Carlo: the mean of the uniform law is 0, each coordinate has variance 1/3
    assert np.all(np.abs(U.mean(axis=0)) < 5 * np.sqrt(1 / 3 / 20000))
    np.testing.assert_allclose((U**2).mean(axis=0), 1 / 3, atol=0.02)
    np.testing.assert_allclose(sphere.normalise([[3.0, 4.0]]), [[0.6, 0.8]])


@pytest.mark.parametrize("causal", [False, True])
def test_field_is_tangent_and_norms_are_preserved(causal):
    rng = np.random.default_rng(2)
    n, d = 12, 3
    X0 = sphere.uniform_on_sphere(n, d, rng)
    A = 2.0 * rng.normal(size=(d, d))
    V = rng.normal(size=(d, d))
    field = dynamics.attention_field(attention.softmax, A=A, V=V, causal=causal)
    v = sphere.sphere_field(field)(0.0, X0)
    np.testing.assert_allclose(np.einsum("ij,ij->i", X0, v), 0.0, atol=1e-13)
    traj = sphere.integrate_on_sphere(field, X0, np.linspace(0, 5, 11))
    assert sphere.sphere_drift(traj) < 1e-9
    # the field is evaluated at normalised tokens: scaling a state does not change it
    np.testing.assert_allclose(sphere.sphere_field(field)(0.0, 2.0 * X0), v, atol=1e-13)


@pytest.mark.parametrize("causal,rate", [(False, 1.0), (True, 0.5)])
def test_two_tokens_closed_form(causal, rate):
    # A = 0, V = I: uniform attention. Unmasked: each token moves toward the other at speed
    # (1/2) sin(theta), so theta' = -sin(theta), tan(theta/2) = tan(theta0/2) e^{-t}.
    # Causal: token 1 is fixed and token 2 moves at (1/2) sin(theta): rate 1/2.
    theta0 = 2.5
    X0 = np.array([[1.0, 0.0], [np.cos(theta0), np.sin(theta0)]])
    field = dynamics.attention_field(attention.softmax, A=np.zeros((2, 2)), V=np.eye(2),
                                     causal=causal)
    times = np.linspace(0, 6, 13)
    traj = sphere.integrate_on_sphere(field, X0, times)
    theta = np.array([angle(x[0], x[1]) for x in traj])
    expected = 2 * np.arctan(np.tan(theta0 / 2) * np.exp(-rate * times))
    np.testing.assert_allclose(theta, expected, rtol=1e-7, atol=1e-9)
    if causal:
        np.testing.assert_allclose(traj[:, 0], np.broadcast_to(X0[0], (13, 2)), atol=1e-15)


def test_symmetric_configuration_is_an_equilibrium():
    # the vertices of a regular simplex / polygon are stationary for unmasked attention
    # with A = beta I and V = I: by symmetry Gamma(x_i) is parallel to x_i
    n = 7
    ang = 2 * np.pi * np.arange(n) / n
    X = np.column_stack([np.cos(ang), np.sin(ang)])
    field = dynamics.attention_field(attention.softmax, A=3.0 * np.eye(2), V=np.eye(2))
    np.testing.assert_allclose(sphere.sphere_field(field)(0.0, X), 0.0, atol=1e-14)
    E = np.eye(4) - 0.25
    E = E / np.linalg.norm(E, axis=1, keepdims=True)  # regular simplex in R^4 (rank 3)
    field = dynamics.attention_field(attention.softmax, A=-2.0 * np.eye(4), V=np.eye(4))
    np.testing.assert_allclose(sphere.sphere_field(field)(0.0, E), 0.0, atol=1e-14)


def test_normalised_residual_stack_converges_at_order_one():
    rng = np.random.default_rng(3)
    n, d = 8, 3
    X0 = sphere.uniform_on_sphere(n, d, rng)
    field = dynamics.attention_field(attention.softmax, A=rng.normal(size=(d, d)),
                                     V=np.eye(d), causal=True)
    exact = sphere.integrate_on_sphere(field, X0, [0.0, 2.0])[-1]
    errors = []
    for L in (20, 40, 80, 160):
        stack = sphere.normalised_residual_stack(field, X0, 2.0, L)
        assert stack.shape == (L + 1, n, d)
        assert sphere.sphere_drift(stack) < 1e-14
        errors.append(np.abs(stack[-1] - exact).max())
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    np.testing.assert_allclose(ratios, 2.0, rtol=0.1)


def test_bad_inputs_raise():
    field = dynamics.attention_field(attention.softmax, A=np.eye(2), V=np.eye(2))
    with pytest.raises(ValueError, match="zero row"):
        sphere.normalise([[0.0, 0.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="zero row"):
        sphere.tangent_projection([[0.0, 0.0]], [[1.0, 0.0]])
    with pytest.raises(ValueError, match="same shape"):
        sphere.tangent_projection([[1.0, 0.0]], [[1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="unit rows"):
        sphere.integrate_on_sphere(field, [[2.0, 0.0]], [0.0, 1.0])
    with pytest.raises(ValueError, match="unit rows"):
        sphere.normalised_residual_stack(field, [[2.0, 0.0]], 1.0, 4)
    with pytest.raises(ValueError, match="callable"):
        sphere.sphere_field(None)
    with pytest.raises(ValueError, match="rng"):
        sphere.uniform_on_sphere(3, 2, 0)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        sphere.uniform_on_sphere(0, 2, np.random.default_rng(0))
    # a coarse Euler step leaves the sphere: detected, not hidden
    X0 = np.array([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(RuntimeError, match="drifted off the sphere"):
        sphere.integrate_on_sphere(field, X0, [0.0, 1.0, 2.0], method="euler")


# --- interaction energy, USA and SA (chapter 7) -------------------------------------------------

def random_symmetric(d, rng):
    M = rng.normal(size=(d, d))
    return (M + M.T) / 2


def test_energy_against_a_loop():
    rng = np.random.default_rng(10)
    n, d, beta = 7, 3, 1.7
    X = sphere.uniform_on_sphere(n, d, rng)
    D = rng.normal(size=(d, d))
    w = rng.dirichlet(np.ones(n))
    ref = sum(w[i] * w[j] * np.exp(beta * X[i] @ D @ X[j]) for i in range(n) for j in range(n))
    assert np.isclose(sphere.energy(X, beta, D, w), ref / (2 * beta), rtol=1e-14)
    ref_default = sum(np.exp(beta * X[i] @ X[j]) for i in range(n) for j in range(n)) / n**2
    assert np.isclose(sphere.energy(X, beta), ref_default / (2 * beta), rtol=1e-14)


def test_usa_and_sa_against_loops():
    rng = np.random.default_rng(11)
    n, d, beta = 6, 4, 2.3
    X = sphere.uniform_on_sphere(n, d, rng)
    D = rng.normal(size=(d, d))
    Q, K = rng.normal(size=(2, 3, d))
    V = rng.normal(size=(d, d))
    w = rng.dirichlet(np.ones(n))
    for i in range(n):
        g = sum(w[j] * np.exp(beta * X[i] @ D @ X[j]) * D @ X[j] for j in range(n))
        np.testing.assert_allclose(sphere.usa(X, beta, D, weights=w)[i],
                                   g - (X[i] @ g) * X[i], atol=1e-13)
        g = sum(np.exp(beta * X[i] @ X[j]) * X[j] for j in range(n)) / n
        np.testing.assert_allclose(sphere.usa(X, beta)[i], g - (X[i] @ g) * X[i], atol=1e-13)
        logits = np.array([beta * (Q @ X[i]) @ (K @ X[j]) for j in range(n)])
        p = w * np.exp(logits)
        g = sum(p[j] * V @ X[j] for j in range(n)) / p.sum()
        np.testing.assert_allclose(sphere.sa(X, beta, Q, K, V, weights=w)[i],
                                   g - (X[i] @ g) * X[i], atol=1e-13)
    # SA is the book's softmax attention with A = beta K^T Q, projected
    ref = sphere.tangent_projection(X, attention.softmax(X, beta * K.T @ Q, V))
    np.testing.assert_allclose(sphere.sa(X, beta, Q, K, V), ref, atol=1e-14)
    # fields at other query points; the integrator fields agree with the functions
    Y = sphere.uniform_on_sphere(5, d, rng)
    g = np.array([sum(np.exp(beta * y @ D @ x) * D @ x for x in X) / n for y in Y])
    np.testing.assert_allclose(sphere.usa(X, beta, D, queries=Y),
                               sphere.tangent_projection(Y, g), atol=1e-13)
    np.testing.assert_allclose(sphere.usa_field(beta, D)(0.0, X), sphere.usa(X, beta, D),
                               atol=1e-14)
    np.testing.assert_allclose(sphere.usa_field(beta, D, sign=-1)(0.0, X),
                               -sphere.usa(X, beta, D), atol=1e-14)
    np.testing.assert_allclose(sphere.sa_field(beta, Q, K, V)(0.0, X), sphere.sa(X, beta, Q, K, V),
                               atol=1e-14)
    np.testing.assert_allclose(sphere.sa_field(beta)(0.0, X), sphere.sa(X, beta), atol=1e-14)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_usa_is_the_spherical_gradient_of_the_energy(seed):
    # finite differences: d/ds E(normalise(X + s U)) at s = 0 equals sum_i w_i <usa_i, U_i>
    # for every tangent U; hence dE/dt = sum_i w_i |x_i'|^2 along USA
    rng = np.random.default_rng(seed)
    n, d, beta = 8, 3, 1.5
    X = sphere.uniform_on_sphere(n, d, rng)
    D = random_symmetric(d, rng)
    w = rng.dirichlet(np.ones(n))
    U = sphere.tangent_projection(X, rng.normal(size=(n, d)))
    h = 1e-5

    def E(s):
        return sphere.energy(sphere.normalise(X + s * U), beta, D, w)

    fd = (E(h) - E(-h)) / (2 * h)
    v = sphere.usa(X, beta, D, weights=w)
    assert np.isclose(fd, np.sum(w[:, None] * v * U), rtol=1e-7, atol=1e-10)
    # SA with Q^T K = V = D is the ascent in the metric weighted by Z_i = sum_k w_k e^{...}
    s = sphere.sa(X, beta, Q=np.eye(d), K=D, V=D, weights=w)
    Z = np.exp(beta * X @ D @ X.T) @ w
    np.testing.assert_allclose(Z[:, None] * s, v, atol=1e-13)
    rate = np.sum(w * Z * np.sum(s * s, axis=1))
    U_sa = s
    fd = (sphere.energy(sphere.normalise(X + h * U_sa), beta, D, w)
          - sphere.energy(sphere.normalise(X - h * U_sa), beta, D, w)) / (2 * h)
    assert np.isclose(fd, rate, rtol=1e-7)


def test_energy_increases_along_usa_exactly_as_predicted():
    rng = np.random.default_rng(4)
    n, d, beta = 6, 3, 2.0
    D = random_symmetric(d, rng)
    X0 = sphere.uniform_on_sphere(n, d, rng)
    times = np.linspace(0.0, 1.0, 201)
    traj = sphere.integrate_on_sphere(sphere.usa_field(beta, D), X0, times)
    E = np.array([sphere.energy(sphere.normalise(X), beta, D) for X in traj])
    rate = np.array([np.sum(sphere.usa(sphere.normalise(X), beta, D) ** 2) / n for X in traj])
    # Simpson's rule on 200 intervals and the integrator (rtol 1e-10): relative error ~1e-9
    from scipy.integrate import simpson
    assert abs((E[-1] - E[0]) - simpson(rate, x=times)) < 1e-8 * (E[-1] - E[0])
    assert np.all(np.diff(E) > -1e-13)


def test_stationary_measures_at_eigenvectors():
    rng = np.random.default_rng(5)
    d, beta = 3, 1.3
    lam, U = np.linalg.eigh(random_symmetric(d, rng))
    D = U @ np.diag(lam) @ U.T
    for k in range(d):
        v = U[:, k]
        pair = np.array([v, -v])
        for p in (1.0, 0.3, 0.5):
            assert np.abs(sphere.usa(pair, beta, D, weights=[p, 1 - p])).max() < 1e-13
    # a unit vector that is not an eigenvector: a Dirac mass there moves
    u = sphere.normalise(np.ones((1, d)) + U[:, :1].T)[0]
    assert np.abs(sphere.usa(u[None], beta, D)).max() > 1e-3
    # uniform measure (quadrature): stationary iff D^2 is a multiple of I
    Y, w = sphere.sphere_quadrature(24, 3)
    np.testing.assert_allclose(w.sum(), 1.0)
    np.testing.assert_allclose(Y.T @ (w[:, None] * Y), np.eye(3) / 3, atol=1e-14)
    refl = np.diag([1.0, -1.0, 1.0])  # D^2 = I, indefinite
    for M in (np.eye(3), 2.0 * np.eye(3), refl):
        assert np.abs(sphere.usa(Y, beta, M, weights=w)).max() < 1e-12
    assert np.abs(sphere.usa(Y, beta, D, weights=w)).max() > 1e-3



def test_usa_field_is_odd_on_symmetric_configurations():
    # chapter 7: a start symmetric under x -> -x stays symmetric (its mean stays 0), since
    # v_mu(-x) = -v_mu(x) when mu is symmetric; the field of the library must be odd there
    rng = np.random.default_rng(11)
    D = random_symmetric(3, rng)
    Z = sphere.uniform_on_sphere(8, 3, rng)
    X = np.vstack([Z, -Z])
    for sign in (1, -1):
        V = sphere.usa_field(1.5, D, sign=sign)(0.0, X)
        np.testing.assert_allclose(V[8:], -V[:8], atol=1e-13)
        assert np.abs(V).max() > 1e-2  # not odd by vanishing

def test_sphere_quadrature_integrates_polynomials():
    Y, w = sphere.sphere_quadrature(12, 2)
    np.testing.assert_allclose(w @ Y[:, 0] ** 4, 3 / 8, atol=1e-15)  # mean of cos^4
    Y, w = sphere.sphere_quadrature(10, 3)
    np.testing.assert_allclose(w @ Y[:, 2] ** 4, 1 / 5, atol=1e-15)  # z^4 on S^2
    np.testing.assert_allclose(w @ (Y[:, 0] ** 2 * Y[:, 1] ** 2), 1 / 15, atol=1e-15)


def test_equiangular_rhs_against_particles_and_finite_differences():
    for model, field in (("sa", sphere.sa), ("usa", sphere.usa)):
        for n, rho, beta in ((2, -0.5, 1.0), (5, 0.3, 2.0), (7, -0.1, 0.5)):
            X = sphere.equiangular_configuration(n, rho)
            G = X @ X.T
            np.testing.assert_allclose(G[~np.eye(n, dtype=bool)], rho, atol=1e-14)
            v = field(X, beta)
            # d/dt <x_i, x_j> = <v_i, x_j> + <x_i, v_j>, the same for every pair
            dG = v @ X.T + X @ v.T
            np.testing.assert_allclose(dG[~np.eye(n, dtype=bool)],
                                       sphere.equiangular_rhs(rho, n, beta, model), atol=1e-13)
            # decay rate: finite difference of the right-hand side at rho = 1
            h = 1e-6
            slope = sphere.equiangular_rhs(1 - h, n, beta, model) / h
            assert np.isclose(slope, sphere.equiangular_decay_rate(n, beta, model), rtol=1e-4)
    # the SA formula stays finite at large beta, and matches its unstable form at moderate beta
    r, n, beta = 0.4, 9, 3.0
    raw = 2 * np.exp(beta * r) * (1 - r) * (1 + (n - 1) * r) / (np.exp(beta) + (n - 1)
                                                                   * np.exp(beta * r))
    assert np.isclose(sphere.equiangular_rhs(r, n, beta, "sa"), raw, rtol=1e-14)
    assert np.isfinite(sphere.equiangular_rhs(0.2, 9, 5000.0, "sa"))


def test_equiangular_solution_follows_particles():
    n, beta, rho0 = 5, 2.0, -0.1
    times = np.linspace(0.0, 3.0, 7)
    X0 = sphere.equiangular_configuration(n, rho0)
    for model, field in (("sa", sphere.sa_field(beta)), ("usa", sphere.usa_field(beta))):
        traj = sphere.integrate_on_sphere(field, X0, times)
        rho = sphere.equiangular_solve(rho0, n, beta, model, times)
        iu = np.triu_indices(n, 1)
        for X, r in zip(traj, rho, strict=True):
            np.testing.assert_allclose((X @ X.T)[iu], r, atol=1e-8)


def test_mirror_descent_and_threshold():
    # D = I on the circle: the minimiser is uniform; the uniform weights are a fixed point
    Y, _ = sphere.sphere_quadrature(60, 2)
    res = sphere.energy_mirror_descent(Y, 2.0, steps=50)
    np.testing.assert_allclose(res.weights, 1 / 60, atol=1e-12)
    # from a random start, convergence to the minimum (Frank-Wolfe gap -> 0, E decreasing)
    rng = np.random.default_rng(6)
    D = np.diag([1.0, 0.0])
    res = sphere.energy_mirror_descent(Y, 1.0, D, steps=3000,
                                       weights0=rng.dirichlet(np.ones(60)))
    assert np.all(np.diff(res.history) < 1e-14)
    # min = 1/(2 beta), on ker D; E convex (D >= 0): the gap certifies the distance to it
    assert 0 <= res.energy - 0.5 <= res.gap < 1e-3
    # maximise with D = -I from random weights (uniform weights are a stationary point)
    res = sphere.energy_mirror_descent(Y, 1.0, -np.eye(2), maximise=True, steps=2000,
                                       weights0=rng.dirichlet(np.ones(60)))
    assert np.all(np.diff(res.history) > -1e-14)
    assert abs(res.energy - np.cosh(1.0) / 2) < 1e-3  # the balanced antipodal pair
    b = sphere.dirac_pair_threshold(1.0, -3.0)
    assert np.isclose(np.cosh(3.0 * b), np.exp(b), rtol=1e-12) and b > 0
    assert sphere.dirac_pair_threshold(1.0, -0.5) == np.inf
    assert sphere.dirac_pair_threshold(-1.0, -2.0) == 0.0


def test_cluster_measures():
    X = np.array([[1.0, 0.0], [1.0, 1e-4], [0.0, 1.0], [-1.0, 0.0]])
    X = sphere.normalise(X)
    assert sphere.cluster_count(X, 0.01) == 3
    assert np.isclose(sphere.clustered_pair_fraction(X), 1 / 6)
    np.testing.assert_allclose(sphere.clustered_pair_fraction(np.stack([X, X[[0, 0, 0, 0]]])),
                               [1 / 6, 1.0])


def test_bad_inputs_of_the_energy_and_fields():
    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="beta"):
        sphere.energy(X, beta=0.0)
    with pytest.raises(ValueError, match="beta"):
        sphere.usa(X, beta=-1.0)
    with pytest.raises(ValueError, match="D must have shape"):
        sphere.energy(X, 1.0, np.eye(3))
    with pytest.raises(ValueError, match="weights"):
        sphere.energy(X, 1.0, weights=[0.5, 0.6])
    with pytest.raises(ValueError, match="overflow"):
        sphere.energy(X, 1000.0)
    with pytest.raises(ValueError, match="Q and K"):
        sphere.sa(X, 1.0, Q=np.eye(2), K=np.ones((3, 2)))
    with pytest.raises(ValueError, match="model"):
        sphere.equiangular_rhs(0.5, 4, 1.0, "softmax")
    with pytest.raises(ValueError, match="rho"):
        sphere.equiangular_rhs(1.5, 4, 1.0, "sa")
    with pytest.raises(ValueError, match="n must be at least 2"):
        sphere.equiangular_rhs(0.5, 1, 1.0, "sa")
    with pytest.raises(ValueError, match="rho must lie"):
        sphere.equiangular_configuration(4, -0.5)
    with pytest.raises(ValueError, match="d must be at least"):
        sphere.equiangular_configuration(4, 0.5, d=3)
    with pytest.raises(ValueError, match="d must be 2 or 3"):
        sphere.sphere_quadrature(4, 4)
    with pytest.raises(ValueError, match="sign"):
        sphere.usa_field(1.0, sign=2)
    with pytest.raises(ValueError, match="lam_min"):
        sphere.dirac_pair_threshold(-1.0, 1.0)
    with pytest.raises(ValueError, match="X must be"):
        sphere.clustered_pair_fraction(np.ones((1, 2)))


def test_field_factories_reject_bad_shapes():
    X = sphere.normalise(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="Q and K must have the same shape"):
        sphere.sa_field(1.0, Q=np.ones((1, 2)), K=np.ones((3, 2)))
    with pytest.raises(ValueError, match="V must be square"):
        sphere.sa_field(1.0, V=np.ones((3, 2)))
    with pytest.raises(ValueError, match="same number of columns"):
        sphere.sa_field(1.0, Q=np.ones((2, 2)), V=np.eye(3))
    with pytest.raises(ValueError, match="Q must be square"):
        sphere.sa_field(1.0, Q=np.ones((1, 2)))
    with pytest.raises(ValueError, match="dimension 3 but the tokens have dimension 2"):
        sphere.sa_field(1.0, V=np.eye(3))(0.0, X)
    with pytest.raises(ValueError, match="D has shape"):
        sphere.usa_field(1.0, D=np.eye(3))(0.0, X)
    # rectangular Q, K of the same shape are fine (k < d), and agree with sa
    rng = np.random.default_rng(12)
    Q, K = rng.normal(size=(2, 1, 2))
    np.testing.assert_allclose(sphere.sa_field(0.7, Q, K)(0.0, X), sphere.sa(X, 0.7, Q, K),
                               atol=1e-14)


def test_dirac_pair_threshold_is_bracketed():
    # x - log 2 < log cosh x < x^2 / 2 gives 2 lam / L^2 < beta* < log 2 / (L - lam)
    rng = np.random.default_rng(13)
    for _ in range(50):
        lam, L = np.sort(rng.uniform(0.05, 5.0, size=2))
        if L - lam < 1e-3:
            continue
        b = sphere.dirac_pair_threshold(lam, -L)
        # the upper bound is tight to e^{-2 b L}: allow rounding
        assert 2 * lam / L**2 < b <= np.log(2) / (L - lam) * (1 + 1e-12)
        # the Dirac mass wins just below, the balanced pair just above
        assert np.exp(0.99 * b * lam) > np.cosh(0.99 * b * L)
        assert np.exp(1.01 * b * lam) < np.cosh(1.01 * b * L)


def test_equiangular_closed_form_at_beta_zero():
    # beta = 0: SA = USA, u = 1 - rho solves u' = -2u + 2(n-1)/n u^2 (Bernoulli)
    times = np.linspace(0.0, 4.0, 9)
    for n, rho0 in ((2, 0.0), (5, -0.2), (9, 0.6)):
        u0, c = 1 - rho0, (n - 1) / n
        exact = 1 - u0 * np.exp(-2 * times) / (1 - c * u0 * (1 - np.exp(-2 * times)))
        for model in ("sa", "usa"):
            rho = sphere.equiangular_solve(rho0, n, 0.0, model, times)
            np.testing.assert_allclose(rho, exact, atol=1e-10)
        # the regular simplex rho = -1/(n-1) does not move
        assert sphere.equiangular_rhs(-1 / (n - 1), n, 0.7, "sa") == pytest.approx(0, abs=1e-15)


def test_sa_kinetic_energy_is_bounded_by_the_energy_gap():
    # along SA (Q = K = V = I): e^{-beta}/n int sum |x_i'|^2 dt <= E(T) - E(0)
    rng = np.random.default_rng(14)
    n, d, beta = 7, 3, 1.7
    times = np.linspace(0.0, 2.0, 401)
    traj = sphere.integrate_on_sphere(sphere.sa_field(beta), sphere.uniform_on_sphere(n, d, rng),
                                      times)
    U = [sphere.normalise(X) for X in traj]
    kinetic = [np.sum(sphere.sa(X, beta) ** 2) for X in U]
    from scipy.integrate import simpson
    gain = sphere.energy(U[-1], beta) - sphere.energy(U[0], beta)
    assert np.exp(-beta) / n * simpson(kinetic, x=times) <= gain
    assert gain <= np.exp(beta) / (2 * beta) - sphere.energy(U[0], beta)


def test_energy_never_exceeds_the_two_candidates():
    # chapter 7: max E = max(e^{beta lam_max}, cosh(beta lam_min)) / (2 beta), any symmetric D
    rng = np.random.default_rng(15)
    for _ in range(40):
        d = int(rng.integers(2, 5))
        D = random_symmetric(d, rng)
        lam = np.linalg.eigvalsh(D)
        beta = rng.uniform(0.1, 3.0)
        best = max(np.exp(beta * lam[-1]), np.cosh(beta * lam[0])) / (2 * beta)
        for m in (1, 2, 5, 20):
            Y = sphere.uniform_on_sphere(m, d, rng)
            w = rng.dirichlet(np.ones(m))
            assert sphere.energy(Y, beta, D, w) <= best * (1 + 1e-12)
            Ys, ws = np.vstack([Y, -Y]), np.concatenate([w, w]) / 2
            assert sphere.energy(Ys, beta, D, ws) <= best * (1 + 1e-12)
        # attained by a Dirac mass at a top eigenvector or a balanced pair at a bottom one
        _, U = np.linalg.eigh(D)
        cands = [sphere.energy(U[:, -1:].T, beta, D),
                 sphere.energy(np.array([U[:, 0], -U[:, 0]]), beta, D)]
        assert np.isclose(max(cands), best, rtol=1e-13)


# --- the layer with layer normalisation, equiangular layers (chapter 7) ------------------------

def test_normalised_residual_stack_is_the_unprojected_layer():
    # reference: the layer written out with a loop, and its rewriting as the tangent step
    # h' = h / (1 + h <x, Gamma>) along P_x Gamma
    rng = np.random.default_rng(20)
    n, d, beta, h = 7, 4, 1.7, 0.2
    X0 = sphere.uniform_on_sphere(n, d, rng)
    raw = sphere.sa_field(beta, tangent=False)
    stack = sphere.normalised_residual_stack(raw, X0, 3 * h, 3)
    X = X0.copy()
    for ell in range(3):
        G = np.array([sum(np.exp(beta * x @ y) * y for y in X) / sum(np.exp(beta * x @ y)
                                                                     for y in X) for x in X])
        Y = X + h * G
        Xn = Y / np.linalg.norm(Y, axis=1, keepdims=True)
        hp = h / (1 + h * np.einsum("ij,ij->i", X, G))
        PG = G - np.einsum("ij,ij->i", X, G)[:, None] * X
        Yt = X + hp[:, None] * PG
        np.testing.assert_allclose(Xn, Yt / np.linalg.norm(Yt, axis=1, keepdims=True),
                                   atol=1e-15)
        X = Xn
        np.testing.assert_allclose(stack[ell + 1], X, atol=1e-14)
    # the raw fields are the attention outputs before projection
    np.testing.assert_allclose(sphere.tangent_projection(X0, raw(0.0, X0)),
                               sphere.sa(X0, beta), atol=1e-14)
    np.testing.assert_allclose(sphere.tangent_projection(X0, sphere.usa_field(
        beta, tangent=False)(0.0, X0)), sphere.usa(X0, beta), atol=1e-14)
    # with a tangent field it is the projected Euler scheme
    proj = sphere.normalised_residual_stack(sphere.sa_field(beta), X0, h, 1)[1]
    Y = X0 + h * sphere.sa(X0, beta)
    np.testing.assert_allclose(proj, Y / np.linalg.norm(Y, axis=1, keepdims=True), atol=1e-15)


def test_projected_and_unprojected_layers_differ_at_second_order_per_layer():
    # |layer_u(x) - layer_p(x)| <= |arctan(h a) - arctan(h' a)| <= h^2 |<x,G>| |P G| / (1 + h<x,G>)
    rng = np.random.default_rng(21)
    X0 = sphere.uniform_on_sphere(12, 3, rng)
    G = sphere.sa_field(2.0, tangent=False)(0.0, X0)
    xg = np.einsum("ij,ij->i", X0, G)
    pg = np.linalg.norm(G - xg[:, None] * X0, axis=1)
    diffs = []
    for h in (0.1, 0.05, 0.025):
        u = sphere.normalised_residual_stack(sphere.sa_field(2.0, tangent=False), X0, h, 1)[1]
        p = sphere.normalised_residual_stack(sphere.sa_field(2.0), X0, h, 1)[1]
        diff = np.linalg.norm(u - p, axis=1)
        assert np.all(diff <= h**2 * np.abs(xg) * pg / (1 + h * xg) * (1 + 1e-9))
        diffs.append(diff.max())
    np.testing.assert_allclose(np.array(diffs[:-1]) / diffs[1:], 4.0, rtol=0.15)


def test_layer_rejects_a_token_sent_to_the_origin():
    X0 = np.array([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="zero or not finite"):
        sphere.normalised_residual_stack(lambda t, X: -X, X0, 1.0, 1)
    with pytest.raises(ValueError, match="tangent"):
        sphere.sa_field(1.0, tangent="no")


@pytest.mark.parametrize("model", ["sa", "usa"])
def test_equiangular_layers_follow_the_network(model):
    n, beta, h, L = 6, 2.5, 0.1, 40
    X0 = sphere.equiangular_configuration(n, -0.1)
    raw = (sphere.sa_field(beta, tangent=False) if model == "sa"
           else sphere.usa_field(beta, tangent=False))
    stack = sphere.normalised_residual_stack(raw, X0, h * L, L)
    iu = np.triu_indices(n, 1)
    G = np.einsum("kid,kjd->kij", stack, stack)[:, iu[0], iu[1]]
    rho = sphere.equiangular_layers(-0.1, n, beta, h, L, model)
    np.testing.assert_allclose(G, np.broadcast_to(rho[:, None], G.shape), atol=1e-13)
    # h -> 0: the layers follow the ODE of equiangular_solve, with an error O(h)
    errs, T = [], (2.0 if model == "sa" else 0.3)  # before rho saturates at 1
    for L2 in (100, 200):
        r = sphere.equiangular_layers(-0.1, n, beta, T / L2, L2, model)
        ode = sphere.equiangular_solve(-0.1, n, beta, model, [0.0, T])[-1]
        errs.append(abs(r[-1] - ode))
    assert 1.8 < errs[0] / errs[1] < 2.2
    with pytest.raises(ValueError, match="h must be"):
        sphere.equiangular_layers(0.0, n, beta, -0.1, 3, model)


def test_equiangular_clustering_time_closed_form_at_beta_zero():
    # at beta = 0, u = 1 - rho solves u' = -2u + 2 (n-1)/n u^2 (the chapter's exercise):
    # u(t) = u0 e^{-2t} / (1 - a u0 (1 - e^{-2t})), a = (n-1)/n
    for n, rho0 in ((4, 0.0), (10, -0.05), (32, 0.3)):
        a, u0, u = (n - 1) / n, 1 - rho0, 1e-3
        x = u * (1 - a * u0) / (u0 * (1 - a * u))
        for model in ("sa", "usa"):
            t = sphere.equiangular_clustering_time(rho0, n, 0.0, model)
            assert abs(t / (-0.5 * np.log(x)) - 1) < 1e-7


def test_equiangular_clustering_time_against_the_solution():
    n, beta = 32, 5.0
    t_star = sphere.equiangular_clustering_time(0.0, n, beta, "sa", level=0.99)
    times = np.linspace(0.0, 1.5 * t_star, 3001)
    rho = sphere.equiangular_solve(0.0, n, beta, "sa", times)
    k = np.argmax(rho >= 0.99)
    assert times[k - 1] < t_star <= times[k] + 1e-9
    # larger initial inner products cluster earlier; the regular simplex never does
    assert sphere.equiangular_clustering_time(0.1, n, beta, "sa", level=0.99) < t_star
    assert sphere.equiangular_clustering_time(-1 / (n - 1), n, beta, "sa") == np.inf
    assert sphere.equiangular_clustering_time(0.995, n, beta, "sa", level=0.99) == 0.0
    with pytest.raises(ValueError):
        sphere.equiangular_clustering_time(0.0, n, beta, "sa", level=1.0)


@pytest.mark.parametrize("bad", ["2", True, np.bool_(True), 2 + 1j, b"2", None])
def test_beta_must_be_a_real_number(bad):
    X = sphere.normalise(np.random.default_rng(0).standard_normal((4, 3)))
    with pytest.raises(ValueError, match="beta"):
        sphere.sa(X, beta=bad)
    with pytest.raises(ValueError, match="beta"):
        sphere.sa_field(bad)


def test_huge_beta_is_refused_by_name_not_returned_as_nan():
    X = sphere.normalise(np.random.default_rng(1).standard_normal((5, 3)))
    with pytest.raises(ValueError, match="beta"):
        sphere.sa(1.5 * X, beta=1e308)
    with pytest.raises(ValueError, match="beta"):
        sphere.sa_field(1e308)(0.0, 1.5 * X)
    # where the products stay finite, the hardmax answer: each token moves toward the token
    # with the largest <x_i, x_j> (itself), so the field vanishes; never NaN
    for beta in (1e300, 1e308):
        assert np.abs(sphere.sa(X, beta=beta)).max() < 1e-12
        assert np.abs(sphere.sa_field(beta)(0.0, X)).max() < 1e-12


def test_malformed_scalars_are_named_not_cut_or_passed_to_the_solver():
    X = sphere.normalise(np.array([[1.0, 0.2], [0.3, 1.0], [-1.0, 0.1]]))
    cases = [
        (lambda: sphere.equiangular_solve(0.3 + 1j, 4, 1.0, "usa", [0.0, 1.0]), "rho0"),
        (lambda: sphere.equiangular_solve("0.3", 4, 1.0, "usa", [0.0, 1.0]), "rho0"),
        (lambda: sphere.equiangular_solve(0.3, 4, 1.0, "usa", [0.0, 1.0], rtol=np.nan),
         "rtol"),
        (lambda: sphere.equiangular_solve(0.3, 4, 1.0, "usa", [0.0, 1j]), "times"),
        (lambda: sphere.equiangular_clustering_time(None, 4, 1.0, "usa"), "rho0"),
        (lambda: sphere.equiangular_clustering_time(0.3, 4, 1.0, "usa", level="0.9"), "level"),
        (lambda: sphere.equiangular_clustering_time(0.3, 4, 1.0, "usa", atol=None), "atol"),
        (lambda: sphere.equiangular_layers(np.nan, 4, 1.0, 0.1, 3, "usa"), "rho0"),
        (lambda: sphere.integrate_on_sphere(sphere.usa_field(1.0), X, [0.0, 1.0],
                                            rtol="1e-9"), "rtol"),
        (lambda: sphere.integrate_on_sphere(sphere.usa_field(1.0), X, [0.0, 1.0 + 1j]),
         "times"),
        (lambda: sphere.clustered_pair_fraction(X + 1j), "X"),
        (lambda: sphere.clustered_pair_fraction(X, threshold=None), "threshold"),
    ]
    for f, name in cases:
        with pytest.raises(ValueError, match=name):
            f()
