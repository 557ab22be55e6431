"""Tests of the hardmax phase of the clustering dynamics (transformer_pde.hardmax)."""

import numpy as np
import pytest
from transformer_pde import clusters, hardmax

I2 = np.eye(2)


def _boolean(target):
    n = len(target)
    return np.eye(n)[target]


def test_attention_structure_depth_one_chain_and_soft_rows():
    # 0 and 3 lead, 1 -> 0, 2 -> 1 (a chain), 4 -> 3 with a soft row
    P = _boolean([0, 0, 1, 3, 3])
    P[4] = [0.0, 0.0, 0.0, 0.9, 0.1]
    target, settled = hardmax.attention_structure(P, 1e-6)
    assert np.array_equal(target, [0, 0, 1, 3, 3])
    assert np.array_equal(settled, [True, True, False, True, False])
    # the tolerance decides the soft row; a stack is handled matrix by matrix
    _, settled = hardmax.attention_structure(np.stack([P, _boolean([0, 0, 0, 3, 3])]), 0.2)
    assert np.array_equal(settled, [[True, True, False, True, True], [True] * 5])


def test_attention_structure_needs_the_leader_itself_settled():
    P = _boolean([0, 0, 2])
    P[0] = [0.5, 0.0, 0.5]  # row 0 is its own argmax (first of a tie) but soft
    _, settled = hardmax.attention_structure(P, 1e-3)
    assert np.array_equal(settled, [False, False, True])


def test_settling_index_is_the_start_of_the_last_settled_stretch():
    good, chain = _boolean([0, 0, 2]), _boolean([0, 2, 2])
    stack = np.stack([chain, good, chain, good, good, good])
    assert hardmax.settling_index(stack, 1e-6) == 3
    assert hardmax.settling_index(stack[:3], 1e-6) == 2  # the leader map changed at the end
    assert hardmax.settling_index(np.stack([good, good]), 1e-6) == 0
    soft = np.full((3, 3), 1 / 3)
    assert hardmax.settling_index(np.stack([good, soft]), 1e-6) == 2
    soft[2] = [0.0, 0.0, 1.0]  # row 2 settled throughout, the others not at first
    assert hardmax.settling_index(np.stack([soft, good]), 1e-6, rows=[2]) == 0
    assert hardmax.settling_index(np.stack([soft, good]), 1e-6) == 1


def test_hardmax_flow_closed_form_against_an_integration_of_the_hardmax_field():
    # a triangle of vertices (each in its own cell for A = I) and interior tokens
    Z0 = np.array([[2.0, 0.0], [-1.0, 1.5], [-1.0, -1.7], [0.5, 0.2], [-0.3, 0.6], [0.1, -0.9]])
    t = np.linspace(0.0, 3.0, 31)
    traj, cell = hardmax.hardmax_flow(Z0, I2, t)
    assert np.array_equal(cell, [0, 1, 2, 0, 1, 2])
    # explicit Euler on the hardmax field with a fine step converges to it at order one
    steps = 3000
    z = Z0.copy()
    for _ in range(steps):
        target = np.argmax(z @ z.T, axis=1)
        z = z + (3.0 / steps) * (z[target] - z)
    assert np.max(np.abs(z - traj[-1])) < 2e-3
    # tokens stay in their cells (no other vertex ever wins)
    scores = traj @ Z0[[0, 1, 2]].T
    assert np.all(np.argmax(scores, axis=2) == cell)


def test_hardmax_flow_rejects_non_generic_starts():
    # a vertex not in its own cell (A = I): (1.5, 0.8) scores 3.0 on (2, 0), 2.89 on itself
    with pytest.raises(ValueError, match="own cell"):
        hardmax.hardmax_flow(np.array([[2.0, 0.0], [1.5, 0.8], [-1.0, -1.0], [0.2, 0.1]]),
                             I2, [0.0, 1.0])
    with pytest.raises(ValueError, match="margin"):  # (0, 1) ties between (1, 1) and (-1, 1)
        hardmax.hardmax_flow(np.array([[1.0, 1.0], [-1.0, 1.0], [0.0, -2.0], [0.0, 0.5]]),
                             I2, [0.0, 1.0])
    with pytest.raises(ValueError, match="positive definite"):
        hardmax.hardmax_flow(np.eye(2), -I2, [0.0])


def _synthetic(rate, chain=False):
    """Leader 0 at rest, follower 1 at distance e^{-rate t} (or a chain t e^{-t}), Boolean P."""
    t = np.linspace(0.0, 4.0, 41)
    decay = (1.0 + 0.5 * t) * np.exp(-t) if chain else np.exp(-rate * t)
    W = np.zeros((t.size, 3, 2))
    W[:, 0] = [1.0, 0.0]
    W[:, 1] = W[:, 0] + 0.3 * decay[:, None] * np.array([-1.0, 1.0])
    W[:, 2] = [-1.0, 0.0]
    P = np.repeat(_boolean([0, 0, 2])[None], t.size, axis=0)
    P[:, 1, 2] = 1e-9  # a little softness, so that the bound is not zero
    P[:, 1, 0] = 1.0 - 1e-9
    return W, t, P


def test_deviation_accepts_the_hardmax_rate_and_rejects_a_wrong_rate_or_a_chain():
    W, t, P = _synthetic(1.0)
    measured, bound = hardmax.hardmax_deviation(W, t, P, [0, 0, 2], 1.0, 0)
    assert np.all(measured <= bound + 1e-12)
    assert np.all(bound[:, [0, 2]] == 0) and 0 < bound[-1, 1] < 1e-6
    for wrong in (_synthetic(0.9), _synthetic(1.1), _synthetic(1.0, chain=True)):
        measured, bound = hardmax.hardmax_deviation(*wrong, [0, 0, 2], 1.0, 0)
        assert np.max(measured[:, 1] - bound[:, 1]) > 0.05  # rejected by a wide margin


def test_deviation_bound_holds_on_a_softmax_run_and_is_tight_in_size():
    rng = np.random.default_rng(7)
    runs = hardmax.integrate_until_settled(rng.normal(size=(3, 12, 2)),
                                           np.linspace(0.0, 8.0, 81), I2)
    for run in runs:
        k, s = run["start"], run["stop"]
        assert k is not None and s < len(run["t"])
        measured, bound = hardmax.hardmax_deviation(run["z"][k:s + 1], run["t"][k:s + 1],
                                                    run["P"][k:s + 1], run["target"], 1.0, 0,
                                                    accuracy=1e-10)
        assert np.all(measured <= bound)
        # the solver's share of the bound: 2 accuracy (e^(t - t0) S(t) + S(t0))
        bare = hardmax.hardmax_deviation(run["z"][k:s + 1], run["t"][k:s + 1],
                                         run["P"][k:s + 1], run["target"], 1.0, 0)[1]
        size = np.maximum(1, np.linalg.norm(run["z"][k:s + 1], axis=2).max(axis=1))
        extra = 2e-10 * (np.exp(run["t"][k:s + 1] - run["t"][k]) * size + size[0])
        leaders = run["target"] == np.arange(len(run["target"]))
        assert np.allclose((bound - bare)[:, ~leaders], extra[:, None], rtol=1e-12)


def test_deviation_along_a_negative_eigenvalue_grows_and_is_bounded():
    # V = diag(1, -1/2): the second coordinate of a follower drifts like e^{t/2}
    rng = np.random.default_rng(3)
    V = np.diag([1.0, -0.5])
    modes = [(np.array([[1.0, 0.0]]), 1.0), (np.array([[0.0, 1.0]]), -0.5)]
    run = hardmax.integrate_until_settled(rng.normal(size=(1, 10, 2)),
                                          np.linspace(0.0, 8.0, 81), I2, V, modes=modes)[0]
    k, s = run["start"], run["stop"]
    measured, bound = hardmax.hardmax_deviation(run["z"][k:s + 1, :, 1], run["t"][k:s + 1],
                                                run["P"][k:s + 1], run["target"], -0.5, 0,
                                                accuracy=1e-10)
    assert np.all(measured <= bound)


def test_integrate_until_settled_extends_late_runs_only():
    rng = np.random.default_rng(11)
    Z0 = rng.normal(size=(2, 8, 2))
    short = np.linspace(0.0, 1.0, 11)  # too short for any run: both are extended
    runs = hardmax.integrate_until_settled(Z0, short, I2, window=2.0, cap=12.0)
    for r, run in enumerate(runs):
        assert run["start"] is not None and run["t"][-1] > 1.0
        assert np.allclose(np.diff(run["t"]), 0.1)
        alone = clusters.integrate_draws(Z0[r], run["t"], I2, I2, rtol=1e-12, atol=1e-14)
        assert np.max(np.abs(alone - run["z"])) < 1e-8
    with pytest.raises(ValueError, match="uniform grid"):
        hardmax.integrate_until_settled(Z0, [0.0, 0.1, 0.3], I2)


@pytest.mark.parametrize("call, name", [
    (lambda: hardmax.attention_structure(np.ones((2, 3)), 0.1), "P"),
    (lambda: hardmax.attention_structure(np.eye(2), -1.0), "tol"),
    (lambda: hardmax.settling_index(np.eye(2), 0.1), "P"),
    (lambda: hardmax.hardmax_deviation(np.zeros((3, 2)), [0, 1, 2], np.ones((3, 2, 2)) / 2,
                                       [1, 0], 1.0, 0), "target"),
    (lambda: hardmax.hardmax_deviation(np.zeros((3, 2)), [0, 1], np.ones((3, 2, 2)) / 2,
                                       [0, 0], 1.0, 0), "W"),
    (lambda: hardmax.hardmax_deviation(np.zeros((3, 2)), [0, 1, 2], np.ones((3, 2, 2)) / 2,
                                       [0, 0], 1.0, 5), "start"),
    (lambda: hardmax.hardmax_flow(np.zeros((3, 2)), I2, [-1.0]), "times"),
])
def test_bad_inputs(call, name):
    with pytest.raises(ValueError, match=name):
        call()
