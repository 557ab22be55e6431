"""Chapter 1's limit check rejects a network that converges to another limit.

The notebook (section "Residual attention is the Euler scheme") doubles the depth until the
local order of the differences ``|X^L - X^2L|`` settles (``convergence_order.settle_order``),
then asserts that the error to the ODE solution at depth 2L is at most twice its asymptotic
value ``|X^L - X^2L| / (2^q - 1)`` (plus ``1e-11`` of the solution's size for the reference).
The settled order alone cannot see the limit: a scheme that converges at order 1 to a wrong
limit settles as well. These tests run the notebook's rule on a small softmax-attention
system: the Euler network of the right field passes; Euler networks of a field with V
changed by 1 %, or with the causal mask switched on, settle at order 1 and fail the limit
check.
"""

import numpy as np
import pytest
from transformer_pde import attention, convergence_order, dynamics

T = 2.0


def _problem():
    rng = np.random.default_rng(11)
    X0 = rng.uniform(-2.0, 2.0, size=(8, 2))
    A, V = (0.5 * g / np.linalg.norm(g, 2) for g in rng.normal(size=(2, 2, 2)))
    field = dynamics.attention_field(attention.softmax, A=A, V=V)
    reference = dynamics.integrate(field, X0, np.linspace(0.0, T, 11), rtol=1e-13,
                                   atol=1e-13)[-1]
    return X0, A, V, reference


def _euler(X0, A, V, causal):
    cache = {}

    def output(L):
        if L not in cache:
            X, h = X0, T / L
            for _ in range(L):
                X = X + h * attention.softmax(X, A, V, causal=causal)
            cache[L] = X
        return cache[L]

    return output


def _limit_check(output, reference):
    """The notebook's two assertions: (settled, error to X(T) within its bound)."""
    scale = np.max(np.abs(reference))
    result = convergence_order.settle_order(
        lambda L: np.linalg.norm(output(L) - output(2 * L)), 1, max_depth=4096,
        floor=1e-14 * max(1.0, scale))
    if not result.settled:
        return False, False
    to_ode = np.linalg.norm(output(2 * result.depth) - reference)
    return True, bool(to_ode <= 2 * result.errors[-2] / (2**1 - 1) + 1e-11 * scale)


def test_the_euler_network_of_the_right_field_passes():
    X0, A, V, reference = _problem()
    assert _limit_check(_euler(X0, A, V, False), reference) == (True, True)


@pytest.mark.parametrize("wrong", ["V x 1.01", "causal"])
def test_a_network_with_another_limit_settles_but_fails_the_limit_check(wrong):
    X0, A, V, reference = _problem()
    output = _euler(X0, A, 1.01 * V, False) if wrong == "V x 1.01" else _euler(X0, A, V, True)
    assert _limit_check(output, reference) == (True, False)
