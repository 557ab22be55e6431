"""Tests of transformer_pde.cluster_merging against independent references: direct
quadrature of the Gaussian average, the closed-form potential, nested quadrature of
Pontryagin's formula, the exit law of Brownian motion from an interval, an ODE solver and
Monte Carlo of the one-dimensional diffusion."""

import math

import numpy as np
import pytest
from scipy.integrate import dblquad, quad, solve_ivp
from transformer_pde import cluster_merging as cm


@pytest.mark.parametrize("beta", [0.5, 3.0, 8.0])
@pytest.mark.parametrize("var", [0.0, 0.01, 0.3])
def test_pair_force_is_the_gaussian_average(beta, var):
    for x in (0.2, 1.3, 2.9, 4.0):
        def f(s, x=x):
            return math.exp(beta * math.cos(x + s)) * math.sin(x + s)
        if var == 0.0:
            ref = f(0.0)
        else:
            sd = math.sqrt(var)
            ref = quad(lambda s: f(s) * math.exp(-s * s / (2 * var)), -12 * sd, 12 * sd,
                       epsabs=1e-13)[0] / math.sqrt(2 * math.pi * var)
        assert abs(cm.pair_force(x, beta, var) - ref) < 1e-10 * max(1.0, abs(ref))


def test_pair_force_is_odd_and_periodic():
    x = np.linspace(-3.0, 3.0, 13)
    f = cm.pair_force(x, 4.0, 0.02)
    assert np.allclose(f, -cm.pair_force(-x, 4.0, 0.02), atol=1e-12)
    assert np.allclose(f, cm.pair_force(x + 2 * np.pi, 4.0, 0.02), atol=1e-9)


def test_deterministic_merge_time_against_an_ode_solver():
    beta, a, x0, M = 4.0, 0.3, 2.6, 0.75
    T = cm.deterministic_merge_time(x0, beta, a, M)
    sol = solve_ivp(lambda t, y: -M * np.exp(beta * np.cos(y)) * np.sin(y), (0.0, 2 * T),
                    [x0], rtol=1e-11, atol=1e-12, events=lambda t, y: y[0] - a)
    assert abs(sol.t_events[0][0] / T - 1) < 1e-6


def _nested_quadrature(x0, beta, kappa, m_a, m_b, n, a):
    """Pontryagin's double integral with the closed-form potential U = -(M/beta) e^{beta cos}."""
    M = (m_a + m_b) / n
    sig2 = 2 / kappa * (1 / m_a + 1 / m_b)
    A = 2 * M / (sig2 * beta)

    def g(z, y):
        return math.exp(A * (math.exp(beta * math.cos(z)) - math.exp(beta * math.cos(y))))

    val, _ = dblquad(g, a, x0, lambda y: y, lambda y: math.pi, epsabs=1e-10, epsrel=1e-8)
    return 2 / sig2 * val


@pytest.mark.parametrize("beta,kappa,m_a,m_b,n,x0", [
    (6.0, 1.0, 8, 8, 16, 2.8), (3.0, 0.5, 3, 5, 8, 2.0)])
def test_mean_merge_time_against_the_double_integral(beta, kappa, m_a, m_b, n, x0):
    ref = _nested_quadrature(x0, beta, kappa, m_a, m_b, n, 0.3)
    assert abs(cm.mean_merge_time(x0, beta, kappa, m_a, m_b, n, 0.3) / ref - 1) < 1e-5
    # the problem is symmetric about pi
    y0 = 2 * math.pi - x0
    assert abs(cm.mean_merge_time(y0, beta, kappa, m_a, m_b, n, 0.3) / ref - 1) < 1e-5


def test_free_diffusion_limit():
    # sigma^2 = 4e4: the drift is negligible and T = (x0 - a)(2 pi - a - x0) / sigma^2
    a = 1.0
    for x0 in (math.pi, 2.0):
        T = cm.mean_merge_time(x0, 1e-3, 1e-4, 1, 1, 10**6, a)
        assert abs(T * 4e4 / ((x0 - a) * (2 * math.pi - a - x0)) - 1) < 1e-4


def test_survival_against_the_brownian_exit_series():
    # Brownian motion on (a, 2 pi - a), length L, started at pi: the sine series
    a, sig2 = 1.0, 4e4
    L = 2 * (math.pi - a)
    ts = np.array([0.0, 1e-5, 3e-5, 1e-4])
    k = np.arange(1, 400, 2)
    ref = [float(np.sum(4 / (np.pi * k) * np.sin(k * np.pi / 2)
                        * np.exp(-(k * np.pi / L) ** 2 * sig2 / 2 * t))) if t > 0 else 1.0
           for t in ts]
    S = cm.merge_survival(ts, math.pi, 1e-3, 1e-4, 1, 1, 10**6, a)
    assert np.max(np.abs(S - ref)) < 2e-4


def test_survival_integrates_to_the_mean_time():
    args = (2.8, 6.0, 1.0, 8, 8, 16, 0.3)
    t = np.linspace(0.0, 60.0, 241)
    S = cm.merge_survival(t, *args, grid=400)
    mean = float(np.sum(0.5 * (S[1:] + S[:-1]) * np.diff(t)))
    assert S[-1] < 1e-4
    assert abs(mean / cm.mean_merge_time(*args, grid=400) - 1) < 3e-3


def test_survival_against_monte_carlo_of_the_one_dimensional_diffusion():
    # Euler-Maruyama of d Delta = -M f(Delta) dt + sigma dW with a small step, 4000 paths
    beta, kappa, m, a, x0 = 3.0, 0.5, 4, 0.3, 2.5
    sig2 = 2 / kappa * 2 / m
    rng = np.random.default_rng(7)
    R, h, T = 4000, 5e-4, 1.5
    x = np.full(R, x0)
    alive = np.ones(R, bool)
    for _ in range(int(T / h)):
        x = x + alive * (-np.exp(beta * np.cos(x)) * np.sin(x) * h
                         + math.sqrt(sig2 * h) * rng.standard_normal(R))
        alive &= (x > a) & (x < 2 * math.pi - a)
    p = alive.mean()
    S = cm.merge_survival([T], x0, beta, kappa, m, m, 2 * m, a)[0]
    # 5 standard errors plus the O(h^{1/2}) bias of a discretely monitored exit
    assert abs(p - S) < 5 * math.sqrt(S * (1 - S) / R) + 0.02


def test_simulation_centre_noise_has_rate_two_over_kappa_m():
    # two groups at pi, drift between them e^{-beta}-small: Delta is Brownian with
    # variance rate (2 / kappa)(1 / m_a + 1 / m_b) exactly in its noise part
    beta, kappa, m_a, m_b, h, steps = 6.0, 50.0, 3, 6, 1e-3, 200
    _, d, _, _ = cm.simulate_two_groups(math.pi, m_a, m_b, beta, kappa, h, steps, 4000,
                                        np.random.default_rng(3), spread=0.0, a=0.3)
    incr = d[-1] - d[0]
    rate = incr.var() / (steps * h)
    target = 2 / kappa * (1 / m_a + 1 / m_b)
    # chi-square with 4000 df: relative sd sqrt(2 / 4000) = 0.022
    assert abs(rate / target - 1) < 0.12


def test_noiseless_simulation_follows_the_reduced_ode():
    beta, x0, h, steps = 4.0, 2.4, 2e-3, 5000
    t, d, w, tau = cm.simulate_two_groups(x0, 4, 4, beta, 1.0, h, steps, 1,
                                          np.random.default_rng(0), spread=0.0, a=0.3,
                                          record_every=100, noise=False)
    sol = solve_ivp(lambda s, y: -np.exp(beta * np.cos(y)) * np.sin(y), (0.0, t[-1]), [x0],
                    t_eval=t, rtol=1e-10, atol=1e-12)
    finite = np.isfinite(d[:, 0])
    slow = finite & (sol.y[0] > 1.0)  # before the final plunge, where timing errors show
    assert np.max(np.abs(d[slow, 0] - sol.y[0][slow])) < 1e-2  # O(h) Euler error
    assert np.all(w[finite] < 1e-12)
    T = cm.deterministic_merge_time(x0, beta, 0.3)
    assert abs(tau[0] - T) < 0.02 * T + 0.1


def test_groups_contract_at_rate_m_over_n_e_beta():
    beta, m, h = 6.0, 8, 1e-3
    t, d, w, _ = cm.simulate_two_groups(math.pi, m, m, beta, 1.0, h, 60, 1,
                                        np.random.default_rng(0), noise=False)
    lam = m / (2 * m) * math.exp(beta)
    rate = -np.log(w[-1, 0] / w[-11, 0]) / (10 * h)
    assert abs(rate / (-math.log(1 - lam * h) / h) - 1) < 1e-3


def test_bad_input():
    with pytest.raises(ValueError, match="delta0"):
        cm.mean_merge_time(0.1, 2.0, 1.0, 2, 2, 4, 0.3)
    with pytest.raises(ValueError, match="n must"):
        cm.mean_merge_time(2.0, 2.0, 1.0, 3, 3, 4, 0.3)
    with pytest.raises(ValueError, match="a must"):
        cm.merge_survival([1.0], 2.0, 2.0, 1.0, 2, 2, 4, 3.5)
    with pytest.raises(ValueError, match="times"):
        cm.merge_survival([-1.0], 2.0, 2.0, 1.0, 2, 2, 4, 0.3)
    with pytest.raises(ValueError, match="spread"):
        cm.simulate_two_groups(2.0, 2, 2, 2.0, 1.0, 0.01, 3, 1, np.random.default_rng(0),
                               spread=2.0)
    with pytest.raises(ValueError, match="var"):
        cm.pair_force(1.0, 2.0, -1.0)
