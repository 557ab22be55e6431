"""Tests of transformer_pde.lost_in_the_middle against independent references."""

import numpy as np
import pytest
from scipy.integrate import quad
from transformer_pde import lost_in_the_middle as L


def test_mode_eigenvalue_is_n2_times_the_fourier_coefficient():
    for beta in (0.5, 1.0, 3.0):
        for n in (1, 2, 3):
            coef = quad(lambda x, n=n, beta=beta: np.cos(n * x) * np.exp(beta * np.cos(x)),
                        0, 2 * np.pi)[0]
            assert L.mode_eigenvalue(beta, n) == pytest.approx(n * n * coef / (2 * np.pi),
                                                               rel=1e-10)


def test_graphon_is_the_limit_of_the_alibi_weights():
    lam, n = 2.0, 4000
    j, k = 3000, 1000  # sigma = 0.75, sigma0 = 0.25
    w = np.exp(-lam * (j - np.arange(1, j)) / n)
    discrete = n * np.exp(-lam * (j - k) / n) / w.sum()
    assert discrete == pytest.approx(float(L.graphon(lam, 0.75, 0.25)), rel=2e-3)
    assert float(L.graphon(lam, 0.25, 0.75)) == 0.0
    assert float(L.graphon(1e-9, 0.75, 0.25)) == pytest.approx(1 / 0.75, rel=1e-6)


@pytest.mark.parametrize("lam", [0.0, 0.3, 3.0])
def test_hardy_profile_solves_the_volterra_hardy_equation(lam):
    a, t, s0 = 0.7, 1.3, 0.2
    for s in (0.35, 0.6, 1.0):
        h = 1e-5
        dt = (L.hardy_profile(lam, a, t + h, s, s0)
              - L.hardy_profile(lam, a, t - h, s, s0)) / (2 * h)
        integral = quad(
            lambda u, s=s: float(L.graphon(lam, s, u) * L.hardy_profile(lam, a, t, u, s0)),
            s0, s, limit=200)[0]
        rhs = a * (float(L.graphon(lam, s, s0)) + integral)
        assert float(dt) == pytest.approx(rhs, rel=1e-6)
    assert float(L.hardy_profile(lam, a, 0.0, 0.7, s0)) == 0.0


def test_hardy_profile_is_continuous_in_lambda_and_at_the_diagonal():
    g0 = L.hardy_profile(0.0, 0.5, 2.0, 1.0, np.array([0.1, 0.5]))
    g1 = L.hardy_profile(1e-7, 0.5, 2.0, 1.0, np.array([0.1, 0.5]))
    assert np.allclose(g0, g1, rtol=1e-5)
    near = L.hardy_profile(1.5, 0.5, 2.0, 1.0, 1.0 - 1e-9)
    at = L.hardy_profile(1.5, 0.5, 2.0, 1.0, 1.0)
    assert float(near) == pytest.approx(float(at), rel=1e-6)


@pytest.mark.parametrize("lam,a,t", [(3.0, 0.565, 2.0), (0.3, 0.565, 2.0), (1.0, 1.0, 0.5)])
def test_end_slope_matches_a_finite_difference(lam, a, t):
    h = 1e-5
    fd = (L.hardy_profile(lam, a, t, 1.0, 1.0) - L.hardy_profile(lam, a, t, 1.0, 1.0 - h)) / h
    assert float(fd) == pytest.approx(L.end_slope(lam, a, t), rel=1e-3, abs=1e-4)


def test_retrieval_end_slope_matches_a_finite_difference():
    for lam in (3.0, 0.3):
        h = 1e-5
        s = L.retrieval_correction(1.0, lam, 2.0, np.array([1.0 - h, 1.0]), 4.0)
        assert (s[1] - s[0]) / h == pytest.approx(
            L.retrieval_end_slope(1.0, lam, 2.0, 4.0), rel=1e-3)


def test_smallness_sides():
    lhs, rhs = L.smallness(1.0, 3.0, 2.0)
    assert lhs == pytest.approx(2.0 * L.mode_eigenvalue(1.0, 1))
    assert rhs == pytest.approx(3 - np.sqrt(3))
    assert L.smallness(1.0, 0.3, 2.0)[1] == pytest.approx(2 * (1 - np.exp(-0.3)))


def test_last_token_response_matches_finite_differences():
    rng = np.random.default_rng(0)
    th = rng.uniform(0, 2 * np.pi, (2, 9))
    _, resp = L.last_token_response(th, 1.0, 2.0, 1.5, 15)
    eps = 1e-6
    for k in range(9):
        up, dn = th.copy(), th.copy()
        up[:, k] += eps
        dn[:, k] -= eps
        fd = (L.last_token_response(up, 1.0, 2.0, 1.5, 15)[0]
              - L.last_token_response(dn, 1.0, 2.0, 1.5, 15)[0]) / (2 * eps)
        assert np.allclose(fd, resp[:, k], atol=1e-7)
    assert np.allclose(resp.sum(axis=1), 1.0)  # rotation invariance


def test_usa_field_against_a_loop():
    rng = np.random.default_rng(1)
    th = rng.uniform(0, 2 * np.pi, 6)
    beta, lam, n = 1.3, 0.7, 6
    ref = np.zeros(n)
    for j in range(1, n):
        w = np.array([np.exp(-lam * (j - k) / n) for k in range(j)])
        f = np.array([-beta * np.sin(th[j] - th[k]) * np.exp(beta * np.cos(th[j] - th[k]))
                      for k in range(j)])
        ref[j] = (w * f).sum() / w.sum()
    assert np.allclose(L.usa_field(th, beta, lam), ref, atol=1e-13)


def test_the_response_identity_holds_in_mean():
    # E[cos(theta_N - theta_k) * dtheta_N/dtheta_k] = E[cos(theta_N - theta_k)]
    est, direct = L.particle_profile(4, 20000, 2.0, 1.0, 1.0, np.random.default_rng(2),
                                     steps=8, batch=5000)
    diff = est - direct
    se = diff.std(axis=0, ddof=1) / np.sqrt(diff.shape[0])
    assert np.all(np.abs(diff.mean(axis=0)) < 5 * se)


def test_level_check_rejects_the_unnormalised_fourier_coefficient():
    # particles agree with a_n = n^2 I_n(beta); the unnormalised 2 pi I_n would be rejected
    beta, lam, t = 1.0, 3.0, 2.0
    ratios = {}
    for n, draws in ((16, 400), (32, 200)):
        est, _ = L.particle_profile(n, draws, beta, lam, t, np.random.default_rng(n), steps=8)
        pos = np.arange(1, n) / n
        for name, a in (("right", L.mode_eigenvalue(beta, 1)),
                        ("wrong", 2 * np.pi * L.mode_eigenvalue(beta, 1))):
            g = L.hardy_profile(lam, a, t, 1.0, pos)
            ratios[name, n] = L.pooled_ratio(est[:, :-1], g, pos)
    for name in ("right", "wrong"):
        rich = 2 * ratios[name, 32][0] - ratios[name, 16][0]
        se = np.hypot(2 * ratios[name, 32][1], ratios[name, 16][1])
        inside = abs(rich - 1) <= 6 * se
        assert inside == (name == "right"), (name, rich, se)


def test_renyi_centres_against_brute_force():
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 2 * np.pi, 40)
    delta = 0.5
    ren, strong = L.renyi_centres(a, delta)

    def dist(x, y):
        return min(abs(x - y) % (2 * np.pi), 2 * np.pi - abs(x - y) % (2 * np.pi))

    ref_strong = [s for s in range(40) if all(dist(a[s], a[i]) > delta for i in range(s))]
    ref_ren = []
    for s in range(40):
        if all(dist(a[s], a[r]) > delta for r in ref_ren):
            ref_ren.append(s)
    assert list(strong) == ref_strong and list(ren) == ref_ren
    assert set(strong) <= set(ren)


def test_strong_centre_probability_is_exact():
    # token k is a strong centre with probability (1 - delta/pi)^(k-1) for iid uniform tokens
    rng = np.random.default_rng(4)
    delta, reps, k = 0.4, 4000, 6
    hits = sum(5 in L.renyi_centres(rng.uniform(0, 2 * np.pi, k), delta)[1]
               for _ in range(reps))
    p = (1 - delta / np.pi) ** (k - 1)
    assert abs(hits / reps - p) < 5 * np.sqrt(p * (1 - p) / reps)


def test_circle_causal_flow_matches_the_sphere_dynamics():
    from transformer_pde import attention, dynamics, sphere
    rng = np.random.default_rng(5)
    a = rng.uniform(0, 2 * np.pi, 5)
    times = np.array([0.0, 0.7])
    beta = 3.0
    traj = L.circle_causal_flow(a, beta, times)
    X0 = np.column_stack([np.cos(a), np.sin(a)])
    field = dynamics.attention_field(attention.softmax, A=beta * np.eye(2), V=np.eye(2),
                                     causal=True)
    ref = sphere.integrate_on_sphere(field, X0, times, rtol=1e-11, atol=1e-12)[-1]
    assert np.allclose(np.column_stack([np.cos(traj[-1]), np.sin(traj[-1])]), ref, atol=1e-8)
    assert traj[-1, 0] == a[0]


def test_helpers():
    assert L.interior_minima([3.0, 2.0, 2.0, 3.0]) == 1
    assert L.interior_minima([1.0, 2.0, 3.0]) == 0
    r, se = L.pooled_ratio([[2.0, 4.0], [2.0, 4.0]], [2.0, 4.0], [0.3, 0.5])
    assert r == 1.0 and se == 0.0


@pytest.mark.parametrize("call", [
    lambda: L.mode_eigenvalue(-1.0, 1),
    lambda: L.mode_eigenvalue(1.0, 0),
    lambda: L.graphon(-1.0, 0.5, 0.2),
    lambda: L.graphon(1.0, 1.5, 0.2),
    lambda: L.hardy_profile(1.0, 1.0, 1.0, 0.3, 0.5),
    lambda: L.last_token_response([[0.0, np.nan]], 1.0, 1.0, 1.0, 4),
    lambda: L.last_token_response([[0.0, 1.0]], 1.0, 1.0, 1.0, 0),
    lambda: L.particle_profile(1, 4, 1.0, 1.0, 1.0, np.random.default_rng(0)),
    lambda: L.renyi_centres([0.0, 1.0], 0.0),
    lambda: L.circle_causal_flow([0.0, 1.0], 1.0, [0.5, 1.0]),
    lambda: L.pooled_ratio([[1.0, 2.0]], [1.0, 1.0], [0.5, 0.6]),
    lambda: L.bin_difference([[1.0, 2.0], [1.0, 2.0]], [0.1, 0.2], (0.5, 0.6), (0.1, 0.2)),
    lambda: L.interior_minima([1.0, 2.0]),
])
def test_bad_input_raises_value_error(call):
    with pytest.raises(ValueError):
        call()
