r"""Masked attention at the adversarial configurations: exact values and explicit bounds.

Castin, Ablin and Peyré (2024) prove that masked self-attention
:math:`f^m(X)_i = \sum_{j \le i} P_{ij} V x_j`, :math:`P_{ij} \propto e^{\langle A x_i,
x_j\rangle}` (:math:`j \le i`), obeys the bounds of their Theorem 1 on :math:`B_R^n`; the lower
bound :math:`\sqrt{n-1}/(1 + (n-1)e^{-2\gamma R^2})` (for :math:`V = I`) is reached at the
configurations of :func:`transformer_pde.lipschitz.adversarial_configuration`. This module
gives, for :math:`V = I` and those configurations, three facts derived in the chapter on
masked attention, valid for every key-query matrix :math:`A` with a real eigenvalue:

- *special token first*, :math:`X = (x_1, y, \dots, y)`: the exact norm of
  :math:`D_X f^m(E)` along :math:`E = (u, 0, \dots, 0)` (:func:`special_first_norm`), a lower
  bound of :math:`\mathrm{Lip}_X(f^m)` above the paper's; and an explicit bound on
  :math:`|\mathrm{Lip}_X(f^m) - \sqrt n|` (:func:`special_first_sqrt_n_gap`), which vanishes
  as :math:`R \to \infty`;
- *special token last*, :math:`X = (y, \dots, y, x_1)`: a bound on
  :math:`\mathrm{Lip}_X(f^m)` independent of :math:`n` (:func:`special_last_upper_bound`),
  from Hardy's inequality.

Notation: :math:`u` is the unit eigenvector of the configuration, :math:`\Delta = x_1 - y`
(:math:`|\Delta| = R/2` for the configuration ``"half"``, :math:`2R` for ``"opposite"``),
:math:`q_i` the weight token :math:`i \ge 2` gives to :math:`x_1` under the mask and
:math:`\varepsilon_i = 1 - q_i`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _checks, lipschitz

__all__ = [
    "special_first_weights",
    "special_first_norm",
    "special_first_sqrt_n_gap",
    "special_last_upper_bound",
]


def _n_values(n):
    arr = np.asarray(n)
    if arr.ndim > 1 or not np.issubdtype(arr.dtype, np.integer) or np.any(arr < 2):
        raise ValueError(f"n must be an integer >= 2 or a 1-D array of them, got {n!r}")
    return arr


def _radius(R):
    return _checks.positive_float(R, "R")


def _gamma(gamma):
    return _checks.positive_float(gamma, "gamma")


def special_first_weights(n: int, R: float, gamma: float) -> NDArray[np.float64]:
    r"""Weights :math:`q_i = 1/(1 + (i-1)e^{-2\gamma R^2})`, :math:`i = 2, \dots, n`.

    At the configurations of Castin, Ablin and Peyré (2024) with the special token first,
    token :math:`i` sees :math:`x_1` and :math:`i - 1` copies of :math:`y`, and
    :math:`\langle A y, x_1\rangle - \langle A y, y\rangle = 2\gamma R^2`; :math:`q_i` is the
    weight it gives to :math:`x_1` under the mask. Returns an array of shape ``(n - 1,)``
    (``n`` an integer >= 2).

    Parameters
    ----------
    n : int
        Number of tokens, at least 2.
    R : float
        Radius :math:`R > 0` of the configuration.
    gamma : float
        :math:`\gamma > 0` of the configuration (its eigenvalue).

    Returns
    -------
    array (n - 1,)
        :math:`q_2, \dots, q_n`.

    Examples
    --------
    >>> q = special_first_weights(3, 1.0, 0.5)  # 1/(1 + e^-1), 1/(1 + 2 e^-1)
    >>> print(bool(np.allclose(q, 1.0 / (1.0 + np.array([1.0, 2.0]) * np.exp(-1.0)))))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    n = int(_n_values(n))
    R, gamma = _radius(R), _gamma(gamma)
    i = np.arange(2, n + 1)
    return 1.0 / (1.0 + (i - 1) * np.exp(-2.0 * gamma * R**2))


def special_first_norm(n: ArrayLike, R: float, gamma: float) -> float | NDArray[np.float64]:
    r"""Exact :math:`\|D_X f^m(E)\|` for :math:`E = (u, 0, \dots, 0)`, special token first.

    .. math::

        \|D_X f^m(E)\| = \Big(1 + \sum_{i=2}^n q_i^2
            \big(1 + 2\gamma R^2 (1 - q_i)\big)^2\Big)^{1/2}
        \;\ge\; \frac{\sqrt{n-1}}{1 + (n-1)e^{-2\gamma R^2}},

    for :math:`V = I` at :func:`transformer_pde.lipschitz.adversarial_configuration` (either
    kind), so it is a lower bound of :math:`\mathrm{Lip}_X(f^m)` above the bound of Castin,
    Ablin and Peyré (2024, Theorem 1, which they show holds for masked attention). Derivation:
    token 1 sees itself only, so :math:`D f^m_1(E) = u`; for :math:`i \ge 2`,
    :math:`D f^m_i(E) = q_i u + q_i\varepsilon_i \Delta\,\langle A y, u\rangle = q_i(1 +
    2\gamma R^2\varepsilon_i)\,u`. ``n`` may be an array of integers >= 2.

    Parameters
    ----------
    n : int or array of int
        Number of tokens, at least 2.
    R : float
        Radius :math:`R > 0`.
    gamma : float
        :math:`\gamma > 0` of the configuration.

    Returns
    -------
    float or array
        The norm, shaped like ``n``.

    Examples
    --------
    It is above the lower bound of Theorem 1 of Castin, Ablin and Peyré (2024):

    >>> n = np.array([4, 16])
    >>> paper = np.sqrt(n - 1) / (1 + (n - 1) * np.exp(-2 * 0.5 * 2.0**2))
    >>> print(bool(np.all(special_first_norm(n, 2.0, 0.5) > paper)))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    ns = _n_values(n)
    R, gamma = _radius(R), _gamma(gamma)
    out = []
    for m in np.atleast_1d(ns):
        q = special_first_weights(int(m), R, gamma)
        out.append(np.sqrt(1.0 + np.sum((q * (1.0 + 2.0 * gamma * R**2 * (1.0 - q))) ** 2)))
    out = np.array(out)
    return float(out[0]) if ns.ndim == 0 else out


def _configuration(A):
    gamma, kind, _ = lipschitz.lower_bound_gamma(A)
    return gamma, kind


def special_first_sqrt_n_gap(A: ArrayLike, n: ArrayLike, R: float) -> float | NDArray[np.float64]:
    r"""Bound on :math:`|\mathrm{Lip}_X(f^m) - \sqrt n|`, special token first, :math:`V = I`.

    .. math::

        \big|\mathrm{Lip}_X(f^m) - \sqrt n\big| \le K \Big(\sum_{i=2}^n \varepsilon_i^2\Big)^{1/2},
        \qquad K = \sqrt 2\,(1 + 2\gamma R^2) + |\Delta|^2 \|A\|_2,

    at :func:`transformer_pde.lipschitz.adversarial_configuration` of ``A``. The hardmax
    Jacobian :math:`H(E) = (E_1, \dots, E_1)` has norm :math:`\sqrt n` (the large-radius limit
    of Castin, Ablin and Peyré, 2024), and the rows of :math:`D_X f^m - H` are
    :math:`-\varepsilon_i a_i + q_i\varepsilon_i\Delta(\Delta^\top A E_i + \langle A y, a_i
    \rangle)` with :math:`a_i = E_1 - \frac{1}{i-1}\sum_{j=2}^i E_j`, :math:`|a_i| \le \sqrt 2
    \|E\|` and :math:`|\Delta||Ay| = 2\gamma R^2`. Since :math:`\varepsilon_i \le (i-1)
    e^{-2\gamma R^2}`, the bound decays like :math:`n^{3/2} e^{-2\gamma R^2}`. ``n`` may be an
    array of integers >= 2.

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix with a real eigenvalue.
    n : int or array of int
        Number of tokens, at least 2.
    R : float
        Radius :math:`R > 0`.

    Returns
    -------
    float or array
        The bound, shaped like ``n``.

    Examples
    --------
    The bound vanishes as the radius grows:

    >>> gaps = [special_first_sqrt_n_gap(np.eye(2), 16, R) for R in (3.0, 6.0)]
    >>> print(bool(gaps[1] < gaps[0] / 100))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    A = _checks.matrix(A, "A", square=True)
    ns = _n_values(n)
    R = _radius(R)
    gamma, kind = _configuration(A)
    delta = R / 2 if kind == "half" else 2 * R
    K = np.sqrt(2.0) * (1.0 + 2.0 * gamma * R**2) + delta**2 * np.linalg.norm(A, 2)
    out = np.array([K * np.linalg.norm(1.0 - special_first_weights(int(m), R, gamma))
                    for m in np.atleast_1d(ns)])
    return float(out[0]) if ns.ndim == 0 else out


def special_last_upper_bound(A: ArrayLike, R: float) -> float:
    r"""Bound on :math:`\mathrm{Lip}_X(f^m)` with the special token last, independent of n.

    .. math::

        \mathrm{Lip}_X(f^m) \le \big(4 + B^2\big)^{1/2}, \qquad
        B = 1 + \tfrac14 |\Delta|^2 \|A\|_2 + \tfrac{\sqrt 2}{4} |\Delta|\,|A x_n|,

    for :math:`V = I` and :math:`X = (y, \dots, y, x_n)`, the configuration of
    :func:`transformer_pde.lipschitz.adversarial_configuration` with its special token moved
    last (:math:`|\Delta||Ax_n| = 4\gamma R^2` for ``"half"``, :math:`2\gamma R^2` for
    ``"opposite"``). Tokens :math:`1, \dots, n-1` are equal, so they attend uniformly and
    :math:`D f^m_i(E) = \frac1i \sum_{j \le i} E_j`: the averaging operator, of norm at most 2
    by Hardy's inequality :math:`\sum_i (\frac1i\sum_{j\le i} a_j)^2 \le 4\sum_i a_j^2`
    (Hardy, Littlewood and Pólya, 1934, Theorem 326). Only the last row sees the special
    token, and its norm is at most :math:`B`. The lower bound of Castin, Ablin and Peyré
    (2024) grows like :math:`\sqrt n` with the special token first; this bound does not grow.

    Parameters
    ----------
    A : array (d, d)
        Key-query matrix with a real eigenvalue.
    R : float
        Radius :math:`R > 0`.

    Returns
    -------
    float
        The bound :math:`(4 + B^2)^{1/2}`.

    Examples
    --------
    >>> print(f"{special_last_upper_bound(np.eye(2), 1.0):.6f}")
    2.352830

    References
    ----------
    :cite:`castin2024smooth,hardy1934inequalities`
    """
    A = _checks.matrix(A, "A", square=True)
    R = _radius(R)
    gamma, kind = _configuration(A)
    if kind == "half":
        delta, delta_ax = R / 2, 4 * gamma * R**2
    else:
        delta, delta_ax = 2 * R, 2 * gamma * R**2
    B = 1.0 + 0.25 * delta**2 * np.linalg.norm(A, 2) + np.sqrt(2.0) / 4 * delta_ax
    return float(np.sqrt(4.0 + B**2))
