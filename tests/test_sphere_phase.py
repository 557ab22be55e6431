"""Tests of the phase-diagram sweep on the sphere (transformer_pde.sphere_phase)."""

import numpy as np
import pytest
from joblib import parallel_config
from transformer_pde import sphere
from transformer_pde import sphere_phase as sp


def test_sweep_is_identical_with_one_and_two_jobs():
    betas = [0.0, 2.0, 6.0]
    with parallel_config(n_jobs=1):
        one = sp.phase_diagram(betas, 8, 5, 3.0, 0.1, starts=2, seed=[3, 1])
    with parallel_config(n_jobs=2):
        two = sp.phase_diagram(betas, 8, 5, 3.0, 0.1, starts=2, seed=[3, 1])
    np.testing.assert_array_equal(one, two)
    assert one.shape == (3, 31)
    # another seed gives other draws
    with parallel_config(n_jobs=1):
        other = sp.phase_diagram(betas, 8, 5, 3.0, 0.1, starts=2, seed=[3, 2])
    assert not np.array_equal(one, other)


def test_run_in_the_span_equals_the_run_in_full_dimension():
    # d > n: the run uses coordinates of the span of the initial tokens; compare with the
    # network run directly in R^d on the same draw
    n, d, beta, h, L = 6, 20, 3.0, 0.1, 40
    frac = sp.clustering_run(beta, n, d, L * h, h, np.random.default_rng(7), threshold=0.99)
    X0 = sphere.uniform_on_sphere(n, d, np.random.default_rng(7))
    stack = sphere.normalised_residual_stack(sphere.sa_field(beta, tangent=False), X0, L * h, L)
    G = np.einsum("kid,kjd->kij", stack, stack)
    np.testing.assert_array_equal(frac, sphere.clustered_pair_fraction(stack, 0.99))
    assert frac[-1] > 0  # something clustered, so the comparison is not empty
    assert G.shape == (L + 1, n, n)


def test_phase_diagram_averages_the_runs():
    with parallel_config(n_jobs=1):
        avg = sp.phase_diagram([1.0], 5, 3, 2.0, 0.1, starts=3, seed=9, model="usa")
    runs = [sp.clustering_run(1.0, 5, 3, 2.0, 0.1, np.random.default_rng([9, 0, s]),
                              model="usa") for s in range(3)]
    np.testing.assert_allclose(avg[0], np.mean(runs, axis=0), atol=1e-15)


def test_first_crossing_and_bad_inputs():
    t = np.array([0.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(sp.first_crossing([[0, 0.2, 0.6, 1], [0, 0, 0, 0.1]], t, 0.5),
                                  [2.0, np.nan])
    assert sp.first_crossing([0.0, 1.0, 1.0, 1.0], t, 1.0) == 1.0
    with pytest.raises(ValueError, match="seed"):
        sp.phase_diagram([1.0], 4, 3, 1.0, 0.1, seed=-1)
    with pytest.raises(ValueError, match="betas"):
        sp.phase_diagram([], 4, 3, 1.0, 0.1)
    with pytest.raises(ValueError, match="model"):
        sp.phase_diagram([1.0], 4, 3, 1.0, 0.1, model="softmax")
    with pytest.raises(ValueError, match="values"):
        sp.first_crossing([0.0, 1.0], t, 0.5)


def test_median_pair_band_accepts_the_equiangular_time_and_rejects_a_wrong_one():
    betas = np.arange(0.0, 6.5, 1.0)
    n, d, T, h = 32, 1024, 30.0, 0.1
    early, late = sp.median_pair_band(betas, n, d, T, h)
    L = int(round(T / h))
    t = h * np.arange(L + 1)

    def t_star(rho0, betas_used, step=h):
        return np.array([sp.first_crossing(
            sphere.equiangular_layers(rho0, n, b, step, L, "sa"), t, 1 - 1e-3)
            for b in betas_used])

    # the prediction itself lies inside, strictly
    ts = t_star(0.0, betas)
    assert np.all((early < ts) & (ts < late))
    # synthetic wrong answers: a clustering time computed at a wrong inverse temperature
    # (beta + 1) or with a wrong step size (h times 1.5) falls outside the band
    assert np.any(t_star(0.0, betas + 1.0) > late)
    assert np.any(t_star(0.0, betas, 1.5 * h) < early)
    # the band narrows as d grows, like d^{-1/2}
    e2, l2 = sp.median_pair_band(betas, n, 16 * d, T, h)
    assert np.all(l2 - e2 <= late - early)
    with pytest.raises(ValueError):
        sp.median_pair_band(betas, 2, 1, T, h)


def test_phase_diagram_takes_n_jobs_like_the_other_sweeps(monkeypatch):
    import joblib

    seen = []
    init = joblib.Parallel.__init__

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("n_jobs"))
        init(self, *args, **kwargs)

    monkeypatch.setattr(joblib.Parallel, "__init__", spy)
    with parallel_config(n_jobs=1):
        one = sp.phase_diagram([2.0], 6, 3, 1.0, 0.1, starts=2, seed=4)
    two = sp.phase_diagram([2.0], 6, 3, 1.0, 0.1, starts=2, seed=4, n_jobs=2)
    np.testing.assert_array_equal(one, two)
    assert seen == [None, 2]
    for bad in (0, 1.5, "2", True):
        with pytest.raises(ValueError, match="n_jobs"):
            sp.phase_diagram([2.0], 6, 3, 1.0, 0.1, n_jobs=bad)
    with pytest.raises(ValueError, match="progress"):
        sp.phase_diagram([2.0], 6, 3, 1.0, 0.1, progress="yes")
