"""Tests of key_scaling against independent references: closed forms (d = 3, where the
Poisson intensity is uniform and the integrals are exponential integrals), direct
quadrature at n = 2, and simulation with a Hoeffding band."""

import numpy as np
import pytest
from scipy import integrate, special
from transformer_pde import key_scaling as ks


def _limit_d3(lam):
    # d = 3: nu(dx) = dx/(2 lam); psi = Ein(u)/(2 lam), u^2 chi = (1 - e^-u (1 + u))/(2 lam)
    def f(v):
        if v > 700:
            return np.exp(-(v + np.euler_gamma) / (2 * lam)) / (2 * lam)
        u = np.exp(v)
        u2chi = (-np.expm1(-u) - u * np.exp(-u)) if u > 1e-3 else (u * u / 2 - u**3 / 3)
        return u2chi / (2 * lam) * np.exp(-(special.exp1(u) + v + np.euler_gamma) / (2 * lam))
    pieces = ((-40, 0), (0, 50), (50, 700), (700, 6000))
    return sum(integrate.quad(f, a, b, limit=500, epsabs=1e-14)[0] for a, b in pieces)


@pytest.mark.parametrize("lam", [0.1, 1.0, 3.0, 10.0])
def test_limit_closed_form_d3(lam):
    assert abs(ks.collision_limit(3, lam) - _limit_d3(lam)) < 1e-9


def test_two_keys_direct_quadrature():
    # n = 2: E[(e^{2s1} + e^{2s2}) / (e^{s1} + e^{s2})^2], s = -beta delta, delta density
    for d, beta in ((3, 4.0), (4, 40.0), (5, 2.0)):
        def f(d1, d2, d=d, beta=beta):
            w1 = special.expit(beta * (d2 - d1))
            dens = ks.distance_density(d1, d) * ks.distance_density(d2, d)
            return (w1**2 + (1 - w1) ** 2) * dens
        ref = integrate.dblquad(f, 0, 2, 0, 2, epsabs=1e-11)[0]
        assert abs(ks.collision_probability(2, d, beta) - ref) < 1e-7


def test_density_normalised():
    for d in (3, 4, 5, 8):
        total = integrate.quad(lambda x, d=d: float(ks.distance_density(x, d)), 0, 2)[0]
        assert abs(total - 1) < 1e-9


@pytest.mark.parametrize("d,n,lam", [(3, 500, 1.0), (4, 300, 0.5), (5, 1000, 2.0)])
def test_simulation_hoeffding(d, n, lam):
    # the mean of M values in [0, 1] leaves E by 0.02 with probability <= 2 exp(-2 M 0.02^2)
    beta = ks.critical_beta(n, d, lam)
    s, m = ks.sample_rows([7, d, n], n, d, beta, 20000)
    assert abs(s.mean() - ks.collision_probability(n, d, beta)) < 0.02  # false alarm 2e-7
    assert np.all(s <= m + 1e-15) and np.all(m <= 1.0)


def test_convergence_to_limit():
    for d in (3, 4, 5):
        lim = ks.collision_limit(d, 1.0)
        errs = [abs(ks.collision_probability(n, d, ks.critical_beta(n, d)) - lim)
                for n in (10**3, 10**4, 10**5)]
        assert errs[2] < errs[1] < errs[0]


def test_regimes():
    # fixed beta: ~ beta/n for d = 3 (E e^-2x / (n (E e^-x)^2)); beta >> n: one key
    assert abs(ks.collision_probability(10**4, 3, 20.0) * 10**4 / 20.0 - 1) < 0.01
    assert ks.collision_probability(10**3, 3, 1e6) > 0.99
    assert abs(ks.collision_probability(50, 4, 0.0) - 1 / 50) < 1e-15


def test_bad_input():
    with pytest.raises(ValueError, match="d"):
        ks.collision_probability(10, 2, 1.0)
    with pytest.raises(ValueError, match="n"):
        ks.collision_probability(1, 3, 1.0)
    with pytest.raises(ValueError, match="beta"):
        ks.collision_probability(10, 3, -1.0)
    with pytest.raises(ValueError, match="lam"):
        ks.collision_limit(3, 0.0)
    with pytest.raises(ValueError, match="delta"):
        ks.distance_density(2.5, 3)
    with pytest.raises(ValueError, match="draws"):
        ks.sample_rows([0], 10, 3, 1.0, 0)
