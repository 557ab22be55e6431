"""Tests of the two-token facts of the causal dynamics on the sphere (causal_pair)."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from transformer_pde import causal_pair, rates, sphere


def pair_reference(A, x1, x2, times):
    """Token 2 of the causal sphere dynamics, written out: x2' = P21 (x1 - <x1, x2> x2)."""

    def rhs(t, y):
        logits = np.array([y @ A.T @ x1, y @ A.T @ y])
        p21 = 1.0 / (1.0 + np.exp(logits[1] - logits[0]))
        return p21 * (x1 - (x1 @ y) * y)

    sol = solve_ivp(rhs, (times[0], times[-1]), x2, t_eval=times, method="DOP853",
                    rtol=1e-12, atol=1e-14)
    return sol.y.T


def matrices():
    rng = np.random.default_rng(21)
    G = rng.normal(size=(3, 3))
    return [np.eye(3), -8 * np.eye(3), 2 * G / np.linalg.norm(G, 2),
            np.array([[1.0, 3.0, 0.0], [-3.0, 1.0, 1.0], [0.0, -1.0, 1.0]])]


@pytest.mark.parametrize("k", range(4))
def test_distance_bound_holds_and_decay_rate_in_band(k):
    A = matrices()[k]
    rng = np.random.default_rng(k)
    X0 = sphere.uniform_on_sphere(2, 3, rng)
    times = np.linspace(0.0, 120.0, 481)
    x2 = pair_reference(A, X0[0], X0[1], times)
    dist = np.linalg.norm(x2 - X0[0], axis=1)
    bound = causal_pair.pair_distance_bound(A, X0[0], X0[1], times)
    assert np.all(dist <= bound * (1 + 1e-9) + 1e-10)  # rounding floor of the distance near 0
    above = dist[1:] > 1e-9  # above the rounding floor of the distance
    assert np.all(np.diff(dist)[above] <= 0)  # the distance decreases
    low, high = causal_pair.pair_rate_band(A, 1e-4)
    rate = rates.decay_rate(times, dist)
    assert low <= rate <= high, (rate, low, high)
    assert high - low < 1e-3


def test_rate_band_is_tight_at_larger_delta():
    # the band is not vacuous: at delta = 0.5 the instantaneous rate of a run fills part of it
    A = np.eye(3)
    X0 = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    times = np.linspace(0.0, 20.0, 2001)
    dist = np.linalg.norm(pair_reference(A, X0[0], X0[1], times) - X0[0], axis=1)
    inst = -np.gradient(np.log(dist), times)
    low, high = causal_pair.pair_rate_band(A, 0.5)
    inside = dist <= 0.5
    assert np.all((inst[inside] >= low - 1e-6) & (inst[inside] <= high + 1e-6))
    # for A = I the exact rate is cos^2(theta/2) / (1 + exp(1 - cos theta)), below 1/2
    cos = 1 - dist**2 / 2
    exact = (1 - dist**2 / 4) / (1 + np.exp(1 - cos))
    np.testing.assert_allclose(inst[5:-5], exact[5:-5], rtol=1e-5)


def test_pair_decay_extends_the_trajectory():
    A = 2 * np.eye(3)
    rng = np.random.default_rng(3)
    X0 = sphere.uniform_on_sphere(5, 3, rng)
    times = np.linspace(0.0, 10.0, 41)
    t, dist = causal_pair.pair_decay(A, X0, times, below=1e-6)
    assert dist[-1] < 1e-6 <= dist[-2] or dist[-1] < 1e-6
    assert np.all(np.diff(t) > 0) and t[0] == 0
    np.testing.assert_allclose(np.diff(t), 0.25)
    ref = np.linalg.norm(pair_reference(A, X0[0], X0[1], t) - X0[0], axis=1)
    np.testing.assert_allclose(dist, ref, rtol=1e-6, atol=1e-11)
    # with the full trajectory given, the first samples are taken from it
    full = sphere.integrate_on_sphere(
        lambda s, X: causal_pair.attention.softmax(X, A, np.eye(3), causal=True), X0, times,
        rtol=1e-11, atol=1e-13)
    t2, dist2 = causal_pair.pair_decay(A, X0, times, full, below=1e-6)
    np.testing.assert_allclose(dist2, dist, rtol=1e-6, atol=1e-11)


def test_bad_inputs_raise():
    A = np.eye(3)
    x1 = np.array([0.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="antipodal"):
        causal_pair.pair_distance_bound(A, x1, -x1, [0.0, 1.0])
    with pytest.raises(ValueError, match="unit vector"):
        causal_pair.pair_distance_bound(A, 2 * x1, x1, [0.0])
    with pytest.raises(ValueError, match="times"):
        causal_pair.pair_distance_bound(A, x1, np.array([1.0, 0, 0]), [-1.0])
    with pytest.raises(ValueError, match="delta"):
        causal_pair.pair_rate_band(A, 3.0)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        causal_pair.pair_decay(A, x1[None], [0.0, 1.0])
    with pytest.raises(ValueError, match="times"):
        causal_pair.pair_decay(A, np.array([x1, [1.0, 0, 0]]), [1.0, 2.0])
    with pytest.raises(RuntimeError, match="t_max"):
        causal_pair.pair_decay(A, np.array([x1, [1.0, 0, 0]]), [0.0, 1.0], t_max=3.0)


def rescaled_pair_reference(A, z1, z2, times):
    """Token 2 of the rescaled causal dynamics, written out: z2' = P21(t) (z1 - z2)."""

    def rhs(t, y):
        gap = np.exp(2 * t) * (y @ A.T @ y - y @ A.T @ z1)
        p21 = 0.5 * (1 - np.tanh(gap / 2))  # 1 / (1 + e^gap), without overflow
        return p21 * (z1 - y)

    sol = solve_ivp(rhs, (times[0], times[-1]), z2, t_eval=times, method="LSODA",
                    rtol=1e-11, atol=1e-13)
    return sol.y.T


@pytest.mark.parametrize("k", range(4))
def test_leader_bound_holds_along_the_rescaled_dynamics(k):
    A = matrices()[k]
    rng = np.random.default_rng(30 + k)
    found = 0
    for _ in range(200):
        z1, z2 = rng.normal(size=(2, 3))
        holds, bound = causal_pair.leader_pair_bound(A, z1, z2)
        if not holds:
            continue
        found += 1
        times = np.linspace(0.0, 6.0, 61)
        dist = np.linalg.norm(rescaled_pair_reference(A, z1, z2, times) - z1, axis=1)
        assert np.all(dist >= bound * (1 - 1e-8)), (dist.min(), bound)
        assert bound < np.linalg.norm(z2 - z1)
        if found == 5:
            break
    assert found >= 1


def test_leader_condition_fails_when_token_2_heads_for_token_1():
    A = np.eye(2)
    z1 = np.array([1.0, 0.0])
    assert causal_pair.leader_pair_bound(A, z1, np.array([0.5, 0.0]))[0] is False  # D0 < 0
    holds, bound = causal_pair.leader_pair_bound(A, z1, np.array([-1.0, 0.0]))
    # D0 = 2, r0 = 2: (2 + 4) E1(1) = 1.31 < 2
    assert holds and bound == pytest.approx(2 * np.exp(-0.21938393439552029 / 2), rel=1e-12)
    # z2 slightly behind z1: D0 > 0 but too small for the condition
    assert causal_pair.leader_pair_bound(A, z1, np.array([1.1, 0.0]))[0] is False
    with pytest.raises(ValueError, match="z1 and z2"):
        causal_pair.leader_pair_bound(A, z1, np.array([1.0, 0.0, 0.0]))
