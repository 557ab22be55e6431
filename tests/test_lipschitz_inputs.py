"""Bad input to the Lipschitz functions raises a ValueError naming the argument.

Each case was a silent wrong answer before: complex matrices were cut to their real part
(with only a ComplexWarning), ``causal="no"`` was read by its truth value (the causal
constant instead of the full one), ``return_vectors="no"`` returned a result object, and a
``seed`` of ``None`` gave another value at every call.
"""

import numpy as np
import pytest
from transformer_pde import lipschitz


@pytest.fixture
def config():
    rng = np.random.default_rng(0)
    n, d = 6, 3
    return rng.normal(size=(n, d)), rng.normal(size=(d, d)) / 2, rng.normal(size=(d, d))


@pytest.mark.parametrize("which", ["A", "V"])
def test_complex_matrices_are_refused(config, which):
    X, A, V = config
    args = {"A": A, "V": V}
    args[which] = args[which] + 1j * args[which]
    with pytest.raises(ValueError, match=which):
        lipschitz.local_lipschitz(X, args["A"], args["V"])


def test_complex_direction_and_start_are_refused(config):
    X, A, V = config
    with pytest.raises(ValueError, match="E"):
        lipschitz.jvp(X, A, V, X + 1j * X)
    with pytest.raises(ValueError, match="v0"):
        lipschitz.local_lipschitz(X, A, V, v0=X + 1j * X)


@pytest.mark.parametrize("value", ["no", 0, 1, None, np.array([True])])
@pytest.mark.parametrize("name", ["causal", "return_vectors"])
def test_flags_must_be_bools(config, name, value):
    X, A, V = config
    with pytest.raises(ValueError, match=name):
        lipschitz.local_lipschitz(X, A, V, **{name: value})


@pytest.mark.parametrize("func", [lipschitz.jvp, lipschitz.vjp])
def test_causal_flag_checked_in_products(config, func):
    X, A, V = config
    with pytest.raises(ValueError, match="causal"):
        func(X, A, V, X, causal="no")


def test_hardmax_causal_flag_checked(config):
    X, A, V = config
    with pytest.raises(ValueError, match="causal"):
        lipschitz.hardmax_indices(X, A, causal="yes")


def test_causal_false_differs_from_causal_true(config):
    # the reason a string must not be read by its truth value: the two constants differ
    X, A, V = config
    full = lipschitz.local_lipschitz(X, A, V, causal=False)
    masked = lipschitz.local_lipschitz(X, A, V, causal=True)
    assert abs(full - masked) > 1e-3 * full


@pytest.mark.parametrize("seed", [None, -1, 1.5, True, (1, 2)])
def test_seed_must_be_a_nonnegative_integer(config, seed):
    X, A, V = config
    with pytest.raises(ValueError, match="seed"):
        lipschitz.local_lipschitz(X, A, V, seed=seed)


def test_numpy_integer_seed_accepted_and_deterministic(config):
    X, A, V = config
    assert lipschitz.local_lipschitz(X, A, V, seed=np.int64(3)) == \
        lipschitz.local_lipschitz(X, A, V, seed=3)


def test_bounds_refuse_complex_radius_and_overflow():
    A, V = np.eye(2), np.eye(2)
    with pytest.raises(ValueError, match="R"):
        lipschitz.theorem1_upper_bound(A, V, 1 + 1j, 4)
    with pytest.raises(ValueError, match="overflows"):
        lipschitz.geshkovski_upper_bound(A, V, 100.0)
    # just below the overflow the value is finite and equals the formula
    R = 13.0
    expected = (1 + 3 * R**2) * np.exp(2 * R**2)
    assert lipschitz.geshkovski_upper_bound(A, V, R) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="overflows"):
        lipschitz.theorem1_upper_bound(A, V, 1e100, 4)
