"""Tests of transformer_pde.convergence_order: local orders at doubled depths and their bound."""

import math

import numpy as np
import pytest
from transformer_pde import convergence_order as co


def _expansion(q, coefficients, T=2.0):
    """e(L) = |sum_j E_j h^(q + j)| for vector coefficients E_j, h = T / L."""
    coefficients = [np.atleast_1d(np.asarray(c, dtype=float)) for c in coefficients]

    def error_at(L):
        h = T / L
        return float(np.linalg.norm(sum(c * h ** (q + j) for j, c in enumerate(coefficients))))

    return error_at


def _scheme_error(method, L, lam=-1.3 + 0.7j, T=2.0):
    """Error of explicit Euler or classical RK4 on z' = lam z, z(0) = 1, against e^(lam T)."""
    h = T / L
    z = h * lam
    growth = 1 + z if method == "euler" else 1 + z + z**2 / 2 + z**3 / 6 + z**4 / 24
    return abs(growth**L - np.exp(lam * T))


def test_local_orders_of_an_exact_power_law():
    depths = 2.0 ** np.arange(3, 9)
    for q in (1, 2.5, 4):
        assert np.allclose(co.local_orders(3.0 * depths**-q), q, atol=1e-12)


def test_bound_holds_in_the_asymptotic_regime_of_random_expansions():
    # Three-term expansions with random vector coefficients: at the depths where the h^2 term
    # is small against the h term, |p - q| <= B, as the module's expansion argument says.
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(300):
        q = int(rng.integers(1, 5))
        E = rng.normal(size=(3, 4))
        error_at = _expansion(q, E)
        errors = [error_at(L) for L in 2 ** np.arange(10, 17)]
        p, bounds = co.local_orders(errors), co.order_bounds(errors)
        ok = np.isfinite(bounds)
        assert np.all(np.abs(p[ok] - q) <= bounds[ok]), (q, p, bounds)
        checked += ok.sum()
    assert checked == 300 * 4


def test_settle_order_finds_the_order_of_euler_and_rk4():
    for method, q in (("euler", 1), ("rk4", 4)):
        result = co.settle_order(lambda L, m=method: _scheme_error(m, L), q, max_depth=2**14)
        assert result.settled, result
        assert result.distance <= result.bound <= 0.15
        assert result.depths[0] == 8 and np.all(np.diff(np.log2(result.depths)) == 1)


def test_settle_order_on_differences_of_consecutive_depths():
    # |X^L - X^2L| has the expansion of the error, with coefficients E_j (1 - 2^(-q-j)).
    def outputs(method, L, lam=-1.3 + 0.7j, T=2.0):
        z = T / L * lam
        growth = 1 + z if method == "euler" else 1 + z + z**2 / 2 + z**3 / 6 + z**4 / 24
        return growth**L

    for method, q in (("euler", 1), ("rk4", 4)):
        result = co.settle_order(lambda L, m=method: abs(outputs(m, L) - outputs(m, 2 * L)), q,
                                 max_depth=2**12, floor=1e-15)
        assert result.settled and result.distance <= result.bound <= 0.15, result
        wrong = co.settle_order(lambda L, m=method: abs(outputs(m, L) - outputs(m, 2 * L)),
                                q + 1, max_depth=2**12, floor=1e-15)
        assert not wrong.settled


@pytest.mark.parametrize("claimed", [0.5, 2.0, 3.0, 3.5, 5.0])
def test_settle_order_rejects_a_wrong_order(claimed):
    # The scheme is RK4 (order 4); an order 0.5 away is never within the settled bound.
    true = 4 if claimed != 2.0 else 1
    method = "rk4" if true == 4 else "euler"
    result = co.settle_order(lambda L: _scheme_error(method, L), claimed, max_depth=2**14,
                             floor=1e-15)
    assert not result.settled, result


def test_settle_order_rejects_wrong_orders_of_random_expansions():
    rng = np.random.default_rng(1)
    for _ in range(100):
        q = int(rng.integers(1, 5))
        error_at = _expansion(q, rng.normal(size=(3, 2)))
        for claimed in (q - 0.5, q + 0.5, q + 1):
            assert not co.settle_order(error_at, claimed, max_depth=2**16).settled


def test_settle_order_keeps_doubling_through_a_pre_asymptotic_regime():
    # E_2 / E_1 = -40: the error dips near h = 1/40 and the local order overshoots q + 1
    # (the pattern of a draw whose tokens travel far); the doubling goes on until it settles.
    error_at = _expansion(4, [[1.0, 0.2], [-40.0, -7.0], [300.0, 10.0]])
    result = co.settle_order(error_at, 4, max_depth=2**16)
    assert result.settled, result
    assert np.max(result.orders) > 5  # the overshoot was crossed
    assert result.depth >= 1024


def test_tiny_leading_coefficient_is_not_settled_before_the_cap():
    # E_1 = 1e-9 E_2: below h ~ 1e-9 only the order q + 1 shows; the check cannot settle at q.
    error_at = _expansion(1, [[1e-9], [1.0]])
    result = co.settle_order(error_at, 1, max_depth=4096)
    assert not result.settled and "largest depth" in result.reason
    assert np.allclose(result.orders, 2.0, atol=1e-3)


def test_floor_stops_the_doubling_and_widens_the_bound():
    floor = 1e-9
    error_at = _expansion(4, [[1.0]])
    result = co.settle_order(lambda L: error_at(L) + floor, 4, max_depth=2**16, floor=floor,
                             max_bound=1e-6)
    assert not result.settled and "floor" in result.reason
    errors = [error_at(L) for L in (8, 16, 32, 64)]
    nu = [(floor / a + floor / b) / math.log(2)
          for a, b in zip(errors[:-1], errors[1:], strict=True)]
    widened = co.order_bounds(errors, floor=floor)[-1] - co.order_bounds(errors)[-1]
    assert widened == pytest.approx(nu[0] + 5 * nu[1] + 5 * nu[2])


def test_bad_input_raises():
    with pytest.raises(ValueError, match="errors"):
        co.local_orders([1.0])
    with pytest.raises(ValueError, match="errors"):
        co.local_orders([1.0, -1.0])
    with pytest.raises(ValueError, match="floor"):
        co.order_bounds([1.0, 0.5, 0.25], floor=-1)
    with pytest.raises(ValueError, match="error_at"):
        co.settle_order(3.0, 1)
    with pytest.raises(ValueError, match="order"):
        co.settle_order(lambda L: 1.0 / L, 0)
    with pytest.raises(ValueError, match="max_depth"):
        co.settle_order(lambda L: 1.0 / L, 1, first_depth=8, max_depth=32)
    with pytest.raises(ValueError, match="first_depth"):
        co.settle_order(lambda L: 1.0 / L, 1, first_depth=0)
    with pytest.raises(ValueError, match="positive and finite"):
        co.settle_order(lambda L: 0.0, 1)


@pytest.mark.parametrize("K", [400.0, 1600.0, 6400.0])
def test_the_rule_is_a_stopping_rule_not_a_bound(K):
    """Before the asymptotic regime the rule accepts a wrong order: errors h + K h^2 of a
    first-order scheme (h = 2/L) pass as order 2 at L = 32, and not as order 1."""
    def error(L):
        return 2.0 / L + K * (2.0 / L) ** 2

    wrong = co.settle_order(error, 2)
    assert wrong.settled and wrong.depth == 32
    assert not co.settle_order(error, 1).settled
