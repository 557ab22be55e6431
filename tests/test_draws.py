"""Tests of transformer_pde.draws: seeded draws and bootstrap replicates through joblib."""

import joblib
import numpy as np
import pytest
from transformer_pde import draws


def _normal_sum(key, n):
    return float(np.random.default_rng(key).standard_normal(n).sum())


@pytest.mark.parametrize("block", [1, 3, 10])
def test_map_keys_is_a_loop_whatever_the_jobs_and_blocks(block):
    keys = [[5, k] for k in range(7)]
    ref = [_normal_sum(key, 4) for key in keys]
    assert draws.map_keys(_normal_sum, keys, 4, block=block, n_jobs=1) == ref
    assert draws.map_keys(_normal_sum, keys, n=4, block=block, n_jobs=2) == ref
    with joblib.parallel_config(backend="threading", n_jobs=2):
        assert draws.map_keys(_normal_sum, keys, 4, block=block) == ref
    assert draws.map_keys(_normal_sum, [], 4) == []


def test_bootstrap_against_a_loop_and_jobs():
    # replicate b resamples each sample with default_rng([*seed, b]), samples in turn
    rng = np.random.default_rng(0)
    samples = [rng.exponential(size=30), rng.standard_normal((12, 2))]

    def stat(s):
        return np.array([s[0].mean(), s[1][:, 1].std()])

    ref = []
    for b in range(20):
        gen = np.random.default_rng([3, 1, b])
        picks = [s[gen.integers(0, len(s), len(s))] for s in samples]
        ref.append(stat(picks))
    one = draws.bootstrap(stat, samples, 20, [3, 1], n_jobs=1)
    two = draws.bootstrap(stat, samples, 20, [3, 1], n_jobs=2)
    assert one.shape == (20, 2)
    np.testing.assert_array_equal(one, np.array(ref))
    np.testing.assert_array_equal(two, one)
    # the bootstrap standard error of a mean is close to s / sqrt(n) (Efron-Tibshirani):
    # the relative spread of a standard deviation over 4000 replicates is about 1 %
    x = samples[0]
    boot = draws.bootstrap(lambda s: s[0].mean(), [x], 4000, 9, n_jobs=1)
    assert boot.std() == pytest.approx(x.std() / np.sqrt(x.size), rel=0.05)


def test_bad_inputs():
    with pytest.raises(ValueError, match="block"):
        draws.map_keys(_normal_sum, [[1]], 3, block=0)
    with pytest.raises(ValueError, match="n_boot"):
        draws.bootstrap(np.mean, [np.ones(3)], 0, 1)
    with pytest.raises(ValueError, match="samples"):
        draws.bootstrap(np.mean, [np.ones(0)], 5, 1)
    with pytest.raises(ValueError, match="seed"):
        draws.bootstrap(np.mean, [np.ones(3)], 5, -1)
