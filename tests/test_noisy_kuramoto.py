"""Unit tests of transformer_pde.noisy_kuramoto against closed forms and independent solvers."""

import math

import mpmath
import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import iv
from transformer_pde import noisy_kuramoto as nk


def test_kuramoto_order_against_mpmath_and_the_pitchfork_expansion():
    mpmath.mp.dps = 40
    for kappa in (2.5, 3.0, 4.0, 10.0):
        ref = mpmath.findroot(lambda r, k=kappa: mpmath.besseli(1, k * r)
                              / mpmath.besseli(0, k * r) - r, 0.9)
        assert abs(nk.kuramoto_order(kappa) - float(ref)) < 1e-14
    # r^2 = 8 (kappa - 2) / kappa^3 + O((kappa - 2)^2) near the pitchfork
    for eps in (1e-3, 1e-4):
        r = nk.kuramoto_order(2 + eps)
        assert abs(r**2 / (8 * eps / (2 + eps) ** 3) - 1) < 3 * eps
    assert nk.kuramoto_order(2.0) == 0.0 and nk.kuramoto_order(1.0) == 0.0


def test_kuramoto_order_in_higher_dimension_is_self_consistent():
    # r = int t e^{kappa r t} (1-t^2)^{(d-3)/2} dt / int e^{kappa r t} (1-t^2)^{(d-3)/2} dt
    for d, kappa in ((3, 4.0), (5, 7.0)):
        assert nk.kuramoto_order(d - 0.01, d) == 0.0
        r = nk.kuramoto_order(kappa, d)
        w = (d - 3) / 2

        def f(t, p, r=r, kappa=kappa, w=w):
            return t**p * math.exp(kappa * r * t) * (1 - t * t) ** w

        num, den = quad(f, -1, 1, args=(1,))[0], quad(f, -1, 1, args=(0,))[0]
        assert abs(num / den - r) < 1e-10


def test_funk_hecke_against_quadrature():
    # a_l = int G_l(t) e^{beta t} (1-t^2)^{(d-3)/2} dt / int (1-t^2)^{(d-3)/2} dt
    from transformer_pde.sphere_sde import zonal_harmonic

    for d in (3, 4, 6):
        for beta in (0.5, 3.0):
            w = (d - 3) / 2
            den = quad(lambda t, w=w: (1 - t * t) ** w, -1, 1)[0]
            for ell in (0, 1, 2, 3):
                num = quad(lambda t, ell=ell, d=d, beta=beta, w=w: float(
                    zonal_harmonic(ell, d, t)) * math.exp(beta * t) * (1 - t * t) ** w,
                    -1, 1, epsabs=1e-13)[0]
                assert abs(nk.funk_hecke(ell, beta, d) - num / den) < 1e-10 * math.exp(beta)
    assert abs(nk.funk_hecke(2, 1.3, 2) - iv(2, 1.3)) < 1e-14


def test_thresholds_k_sharp_and_the_small_beta_limit():
    for d in (2, 3, 5, 8):
        for beta in (1e-4, 0.3, 2.0, 7.0):
            k1 = nk.mode_threshold(1, beta, d)
            assert abs(nk.k_sharp(beta, d) - k1 / 2) < 1e-12 * k1
            k = nk.mode_threshold(np.arange(1, 6), beta, d)
            assert np.all(np.diff(k) > 0)  # degree one is the first to go unstable
        assert abs(nk.mode_threshold(1, 1e-6, d) - d) < 1e-9 * d


def test_beta_star_is_the_root_and_is_unique():
    for d in (2, 3, 4, 10):
        b = nk.beta_star(d)
        assert abs(iv(d / 2 + 1, b) / iv(d / 2, b) - 1 / d) < 1e-14
        grid = np.linspace(0.01, 40, 4000)
        g = iv(d / 2 + 1, grid) / iv(d / 2, grid) - 1 / d
        assert np.sum(np.diff(np.sign(g)) != 0) == 1


def test_circle_branch_is_the_kuramoto_branch_at_small_beta_and_stationary():
    r1 = np.array([0.1, 0.4, 0.8])
    kap, r = nk.circle_branch(1e-7, r1)
    for k, target in zip(kap, r1, strict=True):
        assert abs(nk.kuramoto_order(float(k)) - target) < 1e-6
    # at beta = 3 the solution is a fixed point of the map rho -> e^{kappa psi_rho}
    beta = 3.0
    kap, r = nk.circle_branch(beta, np.array([0.05, 0.3, 0.6]))
    th = 2 * np.pi * np.arange(4096) / 4096
    for k, rr in zip(kap, r, strict=True):
        rho = np.exp(2 * k / beta * sum(iv(j + 1, beta) * rr[j] * np.cos((j + 1) * th)
                                        for j in range(rr.size)))
        rho /= rho.mean()
        # psi_rho by direct quadrature of e^{beta cos}
        psi = np.array([np.mean(np.exp(beta * np.cos(t - th)) * rho) for t in th[::64]])
        target = np.log(rho[::64]) / k
        diff = (psi / beta - target) - np.mean(psi / beta - target)
        assert np.max(np.abs(diff)) < 1e-9
    # it leaves the uniform law at kappa_1 = beta / I_1(beta)
    kap, _ = nk.circle_branch(beta, np.array([1e-4]))
    assert abs(kap[0] / nk.mode_threshold(1, beta, 2) - 1) < 1e-6


def test_circle_branch_direction_follows_the_landau_coefficient():
    # derived in chapter 10: the branch bends back (subcritical) iff I_2/I_1 > 1/2
    bs = nk.beta_star(2)
    for beta, sub in ((0.8 * bs, False), (1.2 * bs, True)):
        kap, _ = nk.circle_branch(beta, np.array([0.02, 0.04]))
        k1 = nk.mode_threshold(1, beta, 2)
        assert (kap[1] < k1) == sub


def test_circle_free_energy_against_direct_quadrature_and_sign():
    beta, kappa = 2.0, 1.5
    r = np.array([0.3, 0.1, 0.02])
    th = 2 * np.pi * np.arange(2048) / 2048
    U = 2 * kappa / beta * sum(iv(j + 1, beta) * r[j] * np.cos((j + 1) * th) for j in range(3))
    rho = np.exp(U)
    rho /= rho.mean()
    inter = np.mean(np.exp(beta * np.cos(th[:, None] - th[None, :])) * rho[:, None]
                    * rho[None, :]) / (2 * beta)
    F = np.mean(rho * np.log(rho)) / kappa - inter + iv(0, beta) / (2 * beta)
    assert abs(nk.circle_free_energy(beta, kappa, r, grid=2048) - F) < 1e-12
    # the Kuramoto branch beats the uniform law above kappa = 2
    kap, rr = nk.circle_branch(1e-6, np.array([0.5]))
    assert nk.circle_free_energy(1e-6, float(kap[0]), rr[0]) < 0


def test_bad_input_raises():
    with pytest.raises(ValueError, match="kappa"):
        nk.kuramoto_order(0.0)
    with pytest.raises(ValueError, match="d must"):
        nk.beta_star(1)
    with pytest.raises(ValueError, match="ell"):
        nk.mode_threshold(0, 1.0, 3)
    with pytest.raises(ValueError, match="beta"):
        nk.k_sharp(-1.0, 3)
    with pytest.raises(ValueError, match="r1"):
        nk.circle_branch(1.0, [0.5, 0.2])
    with pytest.raises(ValueError, match="grid"):
        nk.circle_free_energy(1.0, 1.0, [0.1], grid=8)


def test_mean_field_sweep_linear_rate_and_stationary_branch():
    # a small cosine mode grows at gamma_1 = I_1(beta)/beta - 1/kappa (prop-ch10-modes)
    beta = 2.0
    kappa = 1.5 * nk.mode_threshold(1, beta, 2)
    c0 = np.zeros(16)
    c0[0] = 1e-6  # nonlinear terms of relative size 1e-6
    r, _ = nk.circle_mean_field_sweep(beta, [kappa], c0, 2.0, seed=0.0)
    gamma = iv(1, beta) / beta - 1 / kappa
    assert abs(r[0] / (1e-6 * math.exp(2 * gamma)) - 1) < 1e-5
    # a state of the branch does not move
    kap, rr = nk.circle_branch(beta, [0.4], modes=16)
    r, c = nk.circle_mean_field_sweep(beta, [float(kap[0])], rr[0], 5.0, seed=0.0)
    assert np.max(np.abs(c[0] - rr[0])) < 1e-8
    # below kappa_1 the uniform law attracts
    r, _ = nk.circle_mean_field_sweep(beta, [0.5 * kappa], c0 * 1e3, 50.0)
    assert abs(r[0]) < 1e-6


def test_circle_transition_against_a_fine_scan():
    beta = 5.0
    k1, kf, kc = nk.circle_transition(beta)
    kap, rr = nk.circle_branch(beta, np.linspace(0.01, 0.95, 400))
    assert kf <= kap.min() + 1e-12 and kap.min() - kf < 1e-5
    assert kf < kc < k1
    F = np.array([nk.circle_free_energy(beta, float(k), r) for k, r in zip(kap, rr,
                                                                         strict=True)])
    upper = np.arange(np.argmin(kap), kap.size)
    # free energy changes sign on the upper branch between the scan points around kappa_c
    below, above = upper[kap[upper] < kc], upper[kap[upper] > kc]
    assert np.all(F[below] > 0) and np.all(F[above] < 0)
    with pytest.raises(ValueError, match="points"):
        nk.circle_transition(1.0, points=3)


def _phase_diffusion_from_the_adjoint_zero_mode(kappa, M=127):
    # linearised Fokker-Planck operator at the von Mises state, spectral collocation on
    # M (odd) points: L u = u''/kappa - (u b_q)' - (q b_u)', b_u(t) = int sin(s - t) u(s) ds;
    # its left null space holds the constants and the adjoint zero mode v; then
    # D = (2/kappa) int v'^2 q / (int v q')^2 (any null vector with v' != 0 gives it)
    r = nk.kuramoto_order(kappa)
    th = 2 * np.pi * np.arange(M) / M
    w = 2 * np.pi / M
    q = np.exp(kappa * r * np.cos(th))
    q /= q.sum() * w
    k = np.fft.fftfreq(M, 1.0 / M)
    Dm = np.real(np.fft.ifft(1j * k[:, None] * np.fft.fft(np.eye(M), axis=0), axis=0))
    S = np.sin(th[None, :] - th[:, None]) * w
    L = Dm @ Dm / kappa - Dm @ np.diag(S @ q) - Dm @ np.diag(q) @ S
    _, sv, Vt = np.linalg.svd(L.T)
    assert sv[-2] < 1e-9 < sv[-3]  # a two-dimensional left null space
    null = Vt[-2:].T
    v = null[:, np.argmax(np.linalg.norm(Dm @ null, axis=0))]
    vp = Dm @ v
    return (2 / kappa) * np.sum(vp**2 * q) * w / (np.sum(v * (Dm @ q)) * w) ** 2


def test_phase_diffusion_against_the_numerical_adjoint_zero_mode():
    for kappa in (2.2, 3.0, 4.0, 8.0):
        ref = _phase_diffusion_from_the_adjoint_zero_mode(kappa)
        assert abs(nk.phase_diffusion(kappa) / ref - 1) < 1e-10, kappa
    # the martingale part alone, (2/kappa)(1 + I_2/I_0)/(2 r^2), is larger at kappa = 3
    r = nk.kuramoto_order(3.0)
    mart = (2 / 3) * (1 + iv(2, 3 * r) / iv(0, 3 * r)) / (2 * r**2)
    assert nk.phase_diffusion(3.0) < mart - 0.05
    # large kappa: D -> 2/kappa (the mean of n independent phases)
    assert abs(nk.phase_diffusion(200.0) * 100.0 - 1) < 1e-12
    for bad in (2.0, 1.0, -3.0, float("nan"), "x"):
        with pytest.raises(ValueError, match="kappa"):
            nk.phase_diffusion(bad)
