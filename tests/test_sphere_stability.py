"""Tests of the linearisations on the sphere (transformer_pde.sphere_stability)."""

import numpy as np
import pytest
from scipy.integrate import quad, solve_ivp
from scipy.special import eval_legendre, iv
from transformer_pde import sphere
from transformer_pde import sphere_stability as ss


def random_symmetric(d, rng):
    M = rng.normal(size=(d, d))
    return (M + M.T) / 2


def geodesic(X, B, c):
    """exp_X of the tangent vector with coordinates c in the bases B (token by token)."""
    n, d, k = B.shape
    T = np.einsum("iap,ip->ia", B, c.reshape(n, k))
    r = np.linalg.norm(T, axis=1, keepdims=True)
    safe = np.where(r > 0, r, 1.0)
    return X * np.cos(r) + T / safe * np.sin(r)


def test_tangent_basis_is_orthonormal_and_tangent():
    rng = np.random.default_rng(0)
    X = sphere.uniform_on_sphere(9, 4, rng)
    B = ss.tangent_basis(X)
    assert B.shape == (9, 4, 3)
    np.testing.assert_allclose(np.einsum("iap,iaq->ipq", B, B),
                               np.broadcast_to(np.eye(3), (9, 3, 3)), atol=1e-14)
    np.testing.assert_allclose(np.einsum("ia,iap->ip", X, B), 0.0, atol=1e-14)


@pytest.mark.parametrize("seed", [1, 2])
def test_energy_hessian_is_the_second_derivative_along_geodesics(seed):
    # on the sphere with the exponential map, d^2/ds^2 E(exp_X(s c)) at 0 = c^T Hess c at every
    # point (not only critical ones); polarise to get every entry
    rng = np.random.default_rng(seed)
    n, d, beta = 4, 3, 1.3
    X = sphere.uniform_on_sphere(n, d, rng)
    D = random_symmetric(d, rng)
    w = rng.dirichlet(np.ones(n))
    H = ss.energy_hessian(X, beta, D, w)
    B = ss.tangent_basis(X)
    m, s = n * (d - 1), 1e-4

    def second(c):
        E = [sphere.energy(geodesic(X, B, t * c), beta, D, w) for t in (-s, 0.0, s)]
        return (E[0] - 2 * E[1] + E[2]) / s**2

    for _ in range(5):
        a, b = rng.normal(size=(2, m))
        a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
        fd = (second(a + b) - second(a - b)) / 4  # error O(s^2) + rounding 1e-16 / s^2
        assert np.isclose(a @ H @ b, fd, rtol=1e-5, atol=1e-7)


def test_antipodal_spectrum_against_the_hessian_and_the_field():
    beta, lam = 2.0, [1.0, 0.3, -0.2]
    D = np.diag(lam)
    for n_plus, n_minus in ((5, 3), (1, 6), (4, 0), (3, 1)):
        n = n_plus + n_minus
        X = np.array([[1.0, 0, 0]] * n_plus + [[-1.0, 0, 0]] * n_minus)
        pred = ss.antipodal_spectrum(n_plus, n_minus, beta, lam)
        ev = np.linalg.eigvalsh(n * ss.energy_hessian(X, beta, D))
        np.testing.assert_allclose(pred, ev, atol=1e-11)
        # independent reference: finite-difference Jacobian of the USA field in the bases
        B = ss.tangent_basis(X)
        m, s = n * 2, 1e-6
        J = np.empty((m, m))
        for k in range(m):
            e = np.zeros(m)
            e[k] = s
            up = np.einsum("iap,ia->ip", B, sphere.usa(geodesic(X, B, e), beta, D)).ravel()
            dn = np.einsum("iap,ia->ip", B, sphere.usa(geodesic(X, B, -e), beta, D)).ravel()
            J[:, k] = (up - dn) / (2 * s)
        np.testing.assert_allclose(np.sort(np.linalg.eigvals(J).real), pred, atol=1e-6)
    with pytest.raises(ValueError, match="largest"):
        ss.antipodal_spectrum(2, 2, 1.0, [0.3, 1.0])
    with pytest.raises(ValueError, match="n_minus"):
        ss.antipodal_spectrum(2, -1, 1.0, [1.0, 0.3])


def test_uniform_instability_rates_on_the_circle_against_particles():
    # n equally spaced tokens on the circle (stationary): the mode sin(l theta_j) of the
    # linearised particle system grows at (1/n) sum_j h'(s_j)(cos(l s_j) - 1), h(s) =
    # e^{beta cos s} sin s, which is the mean-field rate up to aliasing (tiny for n = 64)
    n, beta = 64, 4.0
    s = 2 * np.pi * np.arange(n) / n
    hp = np.exp(beta * np.cos(s)) * (np.cos(s) - beta * np.sin(s) ** 2)
    for ell in range(1, 7):
        particles = np.mean(hp * (np.cos(ell * s) - 1))
        assert np.isclose(ss.uniform_instability_rates(ell, 2, beta), particles, rtol=1e-12)
    np.testing.assert_allclose(ss.uniform_instability_rates(np.arange(6), 2, beta),
                               np.arange(6) ** 2 * iv(np.arange(6), beta) / beta, rtol=1e-13)


def test_uniform_instability_rates_in_d3_against_funk_hecke_quadrature():
    # kappa_l = (1/2) int_{-1}^{1} e^{beta t} P_l(t) dt on S^2; SA divides by kappa_0
    beta = 3.0
    for ell in range(6):
        kappa = quad(lambda t, ell=ell: np.exp(beta * t) * eval_legendre(ell, t), -1, 1,
                     epsabs=0, epsrel=1e-13)[0] / 2
        kappa0 = np.sinh(beta) / beta
        assert np.isclose(ss.uniform_instability_rates(ell, 3, beta),
                          ell * (ell + 1) / beta * kappa, rtol=1e-10, atol=1e-14)
        assert np.isclose(ss.uniform_instability_rates(ell, 3, beta, "sa"),
                          ell * (ell + 1) / beta * kappa / kappa0, rtol=1e-10, atol=1e-14)
    with pytest.raises(ValueError, match="ell"):
        ss.uniform_instability_rates(1.5, 3, beta)


@pytest.mark.parametrize("model", ["sa", "usa"])
def test_two_cluster_merge_time_against_two_tokens(model):
    # two tokens are two point clusters of equal mass; integrate their angle
    beta, th0, th1 = 3.0, 1.2, 0.2
    X0 = np.array([[1.0, 0.0, 0.0], [np.cos(th0), np.sin(th0), 0.0]])
    field = sphere.sa_field(beta) if model == "sa" else sphere.usa_field(beta)

    def reached(t, y):
        X = y.reshape(2, 3)
        return np.arccos(np.clip(X[0] @ X[1], -1, 1)) - th1

    reached.terminal = True
    sol = solve_ivp(lambda t, y: field(t, y.reshape(2, 3)).ravel(), (0, 1e4), X0.ravel(),
                    events=reached, rtol=1e-11, atol=1e-13)
    assert np.isclose(sol.t_events[0][0], ss.two_cluster_merge_time(th0, th1, beta, model),
                      rtol=1e-7)


def test_two_cluster_merge_time_is_exponential_in_beta():
    # Laplace: T_SA ~ e^{beta (1 - cos th0)} / (2 beta sin^2 th0), relative error O(1/beta)
    th0 = 1.0
    ratios = [ss.two_cluster_merge_time(th0, 0.1, b) * 2 * b * np.sin(th0) ** 2
              / np.exp(b * (1 - np.cos(th0))) for b in (20.0, 40.0, 80.0)]
    errs = np.abs(np.array(ratios) - 1)
    assert errs[-1] < 0.05 and errs[0] > errs[1] > errs[2]
    with pytest.raises(ValueError, match="theta"):
        ss.two_cluster_merge_time(0.5, 1.0, 1.0)
