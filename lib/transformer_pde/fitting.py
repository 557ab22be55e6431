r"""Power-law fits on log-log data: :math:`y \approx C x^{p}`.

Used by every chapter that checks a rate (the :math:`1/L` of the Euler scheme, the
:math:`n^{-1/2}` of Monte Carlo, the :math:`\sqrt n` growth of Lipschitz constants).
"""

from typing import NamedTuple

import numpy as np

__all__ = ["PowerLawFit", "fit_power_law"]


class PowerLawFit(NamedTuple):
    """Least-squares fit of :math:`\\log y = p \\log x + \\log C`."""

    exponent: float
    prefactor: float
    stderr: float  # standard error of the exponent (0 with two points)

    def __call__(self, x):
        return self.prefactor * np.asarray(x, dtype=np.float64) ** self.exponent


def fit_power_law(x, y):
    r"""Fit :math:`y = C x^p` by least squares on :math:`(\log x, \log y)`.

    Returns a :class:`PowerLawFit` ``(exponent, prefactor, stderr)``; ``x`` and ``y`` must be
    positive, finite, of the same length (at least 2) with at least two distinct ``x``.
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"x and y must have the same length >= 2, got {x.size} and {y.size}")
    for name, arr in (("x", x), ("y", y)):
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError(f"{name} must be positive and finite for a log-log fit")
    lx, ly = np.log(x), np.log(y)
    if np.ptp(lx) == 0:
        raise ValueError("x must take at least two distinct values")
    slope, intercept = np.polyfit(lx, ly, 1)
    if x.size > 2:
        resid = ly - (slope * lx + intercept)
        stderr = float(np.sqrt(resid @ resid / (x.size - 2) / np.sum((lx - lx.mean()) ** 2)))
    else:
        stderr = 0.0
    return PowerLawFit(float(slope), float(np.exp(intercept)), stderr)
