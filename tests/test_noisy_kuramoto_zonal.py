"""Unit tests of the zonal (any dimension) stationary states and sweeps of
transformer_pde.noisy_kuramoto: against Gegenbauer polynomials from scipy, direct quadrature
on the sphere, the Kuramoto law at small beta and the Landau coefficient derived in chapter 10
(the circle functions call these at d = 2 and are tested in test_noisy_kuramoto.py against
the trapezoidal rule in theta and closed forms)."""

import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import iv
from transformer_pde import noisy_kuramoto as nk
from transformer_pde.sphere_sde import zonal_harmonic


def _sigma_law(d):
    """Density of t = <x, e> under the uniform probability on S^(d-1), by quad."""
    w = (d - 3) / 2.0
    z = quad(lambda t: (1 - t * t) ** w, -1, 1)[0]
    return lambda t: (1 - t * t) ** w / z


def test_zonal_basis_is_orthogonal_with_the_harmonic_dimensions():
    # N_k = 2k + 1 on S^2 and (k + 1)^2 on S^3; int G_j G_k d sigma = delta_jk / N_k
    assert np.allclose(nk._harmonic_dims(np.arange(1, 6), 3), 2 * np.arange(1, 6) + 1)
    assert np.allclose(nk._harmonic_dims(np.arange(1, 6), 4), np.arange(2, 7) ** 2)
    assert np.allclose(nk._harmonic_dims(np.arange(1, 6), 2), 2.0)
    for d in (3, 4, 5):
        t, w, G, dG = nk._zonal_basis(d, 6, 40)
        for k in range(1, 7):
            assert np.allclose(G[k - 1], zonal_harmonic(k, d, t), atol=1e-13)
            h = 1e-6  # derivative against a central difference of scipy's polynomial
            fd = (zonal_harmonic(k, d, t + h) - zonal_harmonic(k, d, t - h)) / (2 * h)
            inner = t[np.abs(t) < 1 - 1e-3]
            assert np.allclose(dG[k - 1][np.abs(t) < 1 - 1e-3],
                               fd[np.abs(t) < 1 - 1e-3], atol=1e-6), (d, k, inner.size)
        gram = (G * w) @ G.T
        N = nk._harmonic_dims(np.arange(1, 7), d)
        assert np.allclose(gram, np.diag(1 / N), atol=1e-13)
        law = _sigma_law(d)
        assert abs(w @ t**4 - quad(lambda s, f=law: s**4 * f(s), -1, 1)[0]) < 1e-12


def test_zonal_branch_is_the_kuramoto_branch_at_small_beta():
    for d in (3, 4):
        kap, _ = nk.zonal_branch(1e-7, [0.2, 0.5, 0.8], d)
        for k, r in zip(kap, (0.2, 0.5, 0.8), strict=True):
            assert abs(nk.kuramoto_order(float(k), d) - r) < 1e-6


def test_zonal_branch_curvature_is_the_landau_coefficient_and_rejects_the_circle_one():
    for d in (3, 4):
        for beta in (0.5, 1.5, 3.0):
            eps = 2e-3
            kap, _ = nk.zonal_branch(beta, [eps], d)
            curv = (kap[0] / nk.mode_threshold(1, beta, d) - 1) / eps**2
            rho = iv(d / 2 + 1, beta) / iv(d / 2, beta)
            ours = d / (d + 2) * (1 - d * rho) / (1 - rho)
            circle = (1 - 2 * rho) / (2 * (1 - rho))  # the d = 2 formula, wrong here
            assert abs(curv - ours) < 1e-3
            assert abs(curv - circle) > 0.01  # 10x the tolerance above
    # the direction changes at beta_*(d)
    for d in (3, 4):
        bs = nk.beta_star(d)
        for beta, sub in ((0.9 * bs, False), (1.1 * bs, True)):
            kap, _ = nk.zonal_branch(beta, [0.02, 0.04], d)
            assert (kap[1] < nk.mode_threshold(1, beta, d)) == sub


def test_zonal_free_energy_against_direct_quadrature_on_s2():
    # S^2: rho(t) with t = cos(polar angle); the interaction by quadrature in both
    # polar angles and the azimuth difference (no Funk-Hecke)
    beta, kappa, d = 2.0, 2.5, 3
    r = np.array([0.3, 0.1, 0.02])
    N = np.array([3.0, 5.0, 7.0])
    a = np.array([nk.funk_hecke(k, beta, 3) for k in (1, 2, 3)])
    t, w = np.polynomial.legendre.leggauss(64)
    w = w / 2
    U = kappa / beta * sum(a[j] * N[j] * r[j] * zonal_harmonic(j + 1, 3, t) for j in range(3))
    rho = np.exp(U)
    rho /= w @ rho
    phi = 2 * np.pi * np.arange(64) / 64
    s = np.sqrt(1 - t * t)
    cosang = (t[:, None, None] * t[None, :, None]
              + s[:, None, None] * s[None, :, None] * np.cos(phi)[None, None, :])
    kern = np.exp(beta * cosang).mean(axis=2)
    inter = (w * rho) @ kern @ (w * rho) / (2 * beta)
    F = (w @ (rho * np.log(rho))) / kappa - inter + (w @ kern @ w) / (2 * beta)
    assert abs(nk.zonal_free_energy(beta, kappa, r, d) - F) < 1e-11
    assert abs(nk.zonal_free_energy(1.0, 2.0, [0.0, 0.0], 3)) < 1e-15


def test_zonal_sweep_linear_rate_stationary_branch_and_transition():
    beta, d = 2.0, 3
    k1 = nk.mode_threshold(1, beta, d)
    kappa = 1.5 * k1
    c0 = np.zeros(16)
    c0[0] = 1e-6
    r, _ = nk.zonal_mean_field_sweep(beta, d, [kappa], c0, 2.0, seed=0.0)
    gamma = (d - 1) * (1 / k1 - 1 / kappa)  # ell (ell + d - 2) (a_1/beta - 1/kappa)
    assert abs(r[0] / (1e-6 * math.exp(2 * gamma)) - 1) < 1e-5
    kap, rr = nk.zonal_branch(beta, [0.5], d, modes=20)
    _, c = nk.zonal_mean_field_sweep(beta, d, [float(kap[0])], rr[0], 5.0, seed=0.0)
    assert np.max(np.abs(c[0] - rr[0])) < 1e-8
    # transition on S^2 above beta_*(3): fold and kappa_c against a fine scan
    beta = 3.0
    k1, kf, kc = nk.zonal_transition(beta, d)
    kap, rr = nk.zonal_branch(beta, np.linspace(0.01, 0.95, 300), d)
    assert kf <= kap.min() + 1e-12 and kap.min() - kf < 1e-5
    assert kf < kc < k1
    F = np.array([nk.zonal_free_energy(beta, float(k), x, d) for k, x in zip(kap, rr,
                                                                            strict=True)])
    upper = np.arange(np.argmin(kap), kap.size)
    below, above = upper[kap[upper] < kc], upper[kap[upper] > kc]
    assert np.all(F[below] > 0) and np.all(F[above] < 0)


def test_zonal_bad_input_raises():
    with pytest.raises(ValueError, match="d must"):
        nk.zonal_branch(1.0, [0.5], 1)
    with pytest.raises(ValueError, match="r1"):
        nk.zonal_branch(1.0, [0.5, 0.2], 3)
    with pytest.raises(ValueError, match="nodes"):
        nk.zonal_free_energy(1.0, 1.0, [0.1], 3, nodes=8)
    with pytest.raises(ValueError, match="nodes"):
        nk.zonal_mean_field_sweep(1.0, 3, [1.0], [0.0] * 8, 1.0, nodes=10)
    with pytest.raises(ValueError, match="kappas"):
        nk.zonal_mean_field_sweep(1.0, 3, [-1.0], [0.0] * 8, 1.0)
    with pytest.raises(ValueError, match="points"):
        nk.zonal_transition(1.0, 3, points=3)
    with pytest.raises(ValueError, match="modes"):
        nk.zonal_branch(1.0, [0.5], 3, modes=1)
