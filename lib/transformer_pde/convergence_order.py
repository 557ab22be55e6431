r"""The order of convergence of a scheme in its depth, read off errors at doubled depths.

A one-step scheme of order :math:`q` for a smooth ODE on :math:`[0, T]`, run with
:math:`L` steps of length :math:`h = T/L`, has a global error with an asymptotic expansion
(Hairer, Nørsett and Wanner, *Solving ODEs I*, Thm II.8.1)

.. math::

    X^L - X(T) = E_1 h^q + E_2 h^{q+1} + E_3 h^{q+2} + O(h^{q+3}),

so that, when :math:`E_1 \ne 0`, the *local order* over a doubling of the depth,

.. math::

    p(L) = \log_2 \frac{e(L)}{e(2L)}, \qquad e(L) = \lVert X^L - X(T)\rVert,

is :math:`p(L) = q + c\,h + c' h^2 + O(h^3)`. The differences of consecutive depths,
:math:`e(L) = \lVert X^L - X^{2L}\rVert`, need no reference solution and have the same
expansion, with coefficients :math:`E_j(1 - 2^{-(q+j-1)})`: everything below applies to them.
With the changes
:math:`\Delta(L) = p(L/2) - p(L) = c\,h + 3c' h^2 + O(h^3)`, the second difference
:math:`\Delta(L/2) - 2\Delta(L) = 6c' h^2 + O(h^3)` measures the :math:`h^2` term, and

.. math::

    p(L) - q = \Delta(L) - 2c'h^2 + O(h^3), \qquad
    B(L) = 2\lvert\Delta(L)\rvert + \lvert\Delta(L/2) - 2\Delta(L)\rvert :

in the asymptotic regime the second difference exceeds the :math:`h^2` term by a factor 3,
and the second :math:`\lvert\Delta(L)\rvert` leaves room for the :math:`O(h^3)` terms up to
the size of the first-order term :math:`c\,h`, so that :math:`\lvert p(L) - q\rvert \le B(L)`
there. :math:`B(L)` is therefore an estimate of the distance, and
:math:`\lvert p(L) - q\rvert \le B(L)` a *stopping rule*, not a bound: how small :math:`h`
must be for the expansion to describe the errors depends on the ratios
:math:`E_2/E_1, E_3/E_1, \dots`, which no finite computation bounds. Before that, the rule can
accept a wrong order: fed the errors :math:`e(L) = h + K h^2` (:math:`h = 2/L`) of a
first-order scheme, it accepts order 2 at :math:`L = 32` for :math:`K = 400, 1600, 6400`,
because the :math:`h^2` term dominates up to :math:`h \approx 1/K` (a unit test shows it).
:func:`settle_order` keeps doubling the depth until the rule holds with a small
:math:`B`, and reports whether that happened before a largest depth; what a computation
concludes from it needs a separate check (e.g. that the limit is the exact solution).

Errors known to an accuracy :math:`\delta` (``floor``: the reference's error, or rounding)
perturb each
local order by at most :math:`\nu(L) = (\delta/e(L) + \delta/e(2L))/\ln 2` to first order;
:func:`order_bounds` adds the resulting :math:`\nu(L/4) + 5\nu(L/2) + 5\nu(L)` to
:math:`B(L)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _checks

__all__ = ["local_orders", "order_bounds", "SettledOrder", "settle_order"]


def _errors(errors, name="errors"):
    e = _checks.real_array(errors, name)
    if e.ndim != 1 or e.size < 2:
        raise ValueError(f"{name} must be a 1-D array of at least 2 errors, got shape {e.shape}")
    if not np.all(np.isfinite(e)) or np.any(e <= 0):
        raise ValueError(f"{name} must be positive and finite (errors at doubled depths)")
    return e


def _floor(floor):
    floor = _checks.finite_float(floor, "floor")
    if floor < 0:
        raise ValueError(f"floor must be a finite number >= 0 (the errors' accuracy), got {floor}")
    return floor


def local_orders(errors: ArrayLike) -> NDArray[np.float64]:
    r"""Local orders :math:`p_k = \log_2(e_k / e_{k+1})` of errors at depths :math:`L_0 2^k`.

    Parameters
    ----------
    errors : array (m,)
        Positive errors :math:`e_k = e(L_0 2^k)`, ``m >= 2``.

    Returns
    -------
    array (m - 1,)

    Examples
    --------
    >>> print([round(float(p), 12) for p in local_orders([0.1, 0.025, 0.00625])])
    [2.0, 2.0]
    """
    e = _errors(errors)
    return np.log2(e[:-1] / e[1:])


def order_bounds(errors: ArrayLike, *, floor: float = 0.0) -> NDArray[np.float64]:
    r"""The estimates :math:`B_k` of :math:`\lvert p_k - q\rvert` of the module's stopping rule.

    .. math::

        B_k = 2\lvert\Delta_k\rvert + \lvert\Delta_{k-1} - 2\Delta_k\rvert
              + \nu_{k-2} + 5\nu_{k-1} + 5\nu_k, \qquad \Delta_k = p_{k-1} - p_k,

    with :math:`\nu_k = (\delta/e_k + \delta/e_{k+1})/\ln 2` for errors of accuracy
    :math:`\delta` = ``floor``.

    Parameters
    ----------
    errors : array (m,)
        Positive errors at depths :math:`L_0 2^k`, ``m >= 2``.
    floor : float
        Absolute accuracy :math:`\delta \ge 0` of the errors (e.g. of the reference solution).

    Returns
    -------
    array (m - 1,)
        :math:`B_k` for each local order :math:`p_k`; ``inf`` where :math:`k < 2` (two changes
        are needed).

    Examples
    --------
    Errors :math:`4^{-k}` have exactly the order 2, so the estimates vanish once defined:

    >>> print(order_bounds(4.0 ** -np.arange(5)).tolist())
    [inf, inf, 0.0, 0.0]
    """
    e = _errors(errors)
    floor = _floor(floor)
    p = np.log2(e[:-1] / e[1:])
    nu = (floor / e[:-1] + floor / e[1:]) / math.log(2.0)
    bounds = np.full(p.size, np.inf)
    for k in range(2, p.size):
        change, previous = p[k - 1] - p[k], p[k - 2] - p[k - 1]
        bounds[k] = (2.0 * abs(change) + abs(previous - 2.0 * change)
                     + nu[k - 2] + 5.0 * nu[k - 1] + 5.0 * nu[k])
    return bounds


@dataclass(frozen=True)
class SettledOrder:
    """Result of :func:`settle_order`.

    Attributes
    ----------
    order : float
        The order :math:`q` the scheme is checked against.
    depths : array (m,)
        The depths :math:`L_0 2^k` at which the error was computed.
    errors : array (m,)
        The errors at those depths.
    orders : array (m - 1,)
        The local orders :math:`p_k`, over the doublings from ``depths[k]``.
    bounds : array (m - 1,)
        The bounds :math:`B_k` of :func:`order_bounds` (``inf`` for the first two).
    settled : bool
        Whether :math:`\\lvert p_k - q\\rvert \\le B_k \\le` ``max_bound`` at the last local
        order: the doubling stopped there.
    reason : str
        Why the doubling stopped.
    """

    order: float
    depths: np.ndarray
    errors: np.ndarray
    orders: np.ndarray
    bounds: np.ndarray
    settled: bool
    reason: str

    @property
    def depth(self):
        """Depth :math:`L` of the last local order :math:`p(L)` (which also uses :math:`2L`)."""
        return int(self.depths[-2])

    @property
    def distance(self):
        """:math:`\\lvert p - q\\rvert` at the last local order."""
        return float(abs(self.orders[-1] - self.order))

    @property
    def bound(self):
        """:math:`B` at the last local order."""
        return float(self.bounds[-1])


def settle_order(error_at: Callable[[int], Any], order: float, *, first_depth: int = 8,
                 max_depth: int = 4096, floor: float = 0.0, max_bound: float = 0.15,
                 min_signal: float = 10.0) -> SettledOrder:
    r"""Double the depth until the local order is within its bound of ``order``.

    Starting from ``first_depth``, the error :math:`e(L)` is computed at doubled depths, and
    the doubling stops at the first local order with
    :math:`\lvert p(L) - q\rvert \le B(L) \le` ``max_bound`` (see :func:`order_bounds`):
    the local order has settled, within an estimate that its own changes give, at :math:`q`.
    This is a stopping rule valid in the asymptotic regime, not a certificate (see the module
    docstring): a scheme whose leading error term is still dominated can pass it with
    another order.
    It also stops, unsettled, when the next depth would exceed ``max_depth`` or when an error
    falls below ``min_signal`` times ``floor`` (the errors then measure the reference more
    than the scheme).

    Parameters
    ----------
    error_at : callable
        ``error_at(L) -> float``, the error :math:`e(L) > 0` of the scheme with ``L`` steps
        (against a reference, or the difference between ``L`` and ``2L`` steps).
    order : float
        The order :math:`q` the scheme should have.
    first_depth, max_depth : int
        First depth and the largest depth allowed.
    floor : float
        Absolute accuracy of the errors (of the reference solution), :math:`\ge 0`.
    max_bound : float
        Largest bound :math:`B` accepted as settled.
    min_signal : float
        Errors below ``min_signal * floor`` stop the doubling.

    Returns
    -------
    SettledOrder

    Examples
    --------
    >>> result = settle_order(lambda L: 1.0 / L**2, 2.0)
    >>> print(result.settled, result.depth)
    True 32
    """
    if not callable(error_at):
        raise ValueError("error_at must be callable as error_at(L) -> error")
    order = _checks.positive_float(order, "order")
    first_depth = _checks.positive_int(first_depth, "first_depth")
    max_depth = _checks.positive_int(max_depth, "max_depth")
    if max_depth < 8 * first_depth:
        raise ValueError("max_depth must be an integer, at least 8 * first_depth (four "
                         f"depths), got {max_depth}")
    floor = _floor(floor)
    max_bound = _checks.positive_float(max_bound, "max_bound")
    min_signal = _checks.float_at_least(min_signal, "min_signal", 1.0)
    if not max_bound > 0:
        raise ValueError(f"max_bound must be positive, got {max_bound}")
    if not min_signal >= 1:
        raise ValueError(f"min_signal must be at least 1, got {min_signal}")
    depths, errors = [], []
    L = int(first_depth)
    settled, reason = False, ""
    while True:
        e = float(error_at(L))
        if not math.isfinite(e) or e <= 0:
            raise ValueError(f"error_at({L}) returned {e}; errors must be positive and finite")
        depths.append(L)
        errors.append(e)
        if len(errors) >= 4:
            bounds = order_bounds(errors, floor=floor)
            p = local_orders(errors)
            if abs(p[-1] - order) <= bounds[-1] <= max_bound:
                settled, reason = True, f"settled at depth {depths[-2]}"
                break
        if e < min_signal * floor:
            reason = f"the error at depth {L} is below {min_signal:g} times the floor"
            break
        if 2 * L > max_depth:
            reason = f"not settled by the largest depth {max_depth}"
            break
        L *= 2
    errors = np.array(errors)
    if errors.size < 2:  # a single depth: no local order
        orders = np.empty(0)
        bounds = np.empty(0)
    else:
        orders = local_orders(errors)
        bounds = order_bounds(errors, floor=floor)
    return SettledOrder(order, np.array(depths), errors, orders, bounds, settled, reason)
