r"""Small linear algebra shared by the library: the exponential :math:`t \mapsto e^{tV}` of a
constant matrix (:mod:`~transformer_pde.dynamics`, :mod:`~transformer_pde.clusters`), the
symmetric square root and the numerical rank of a covariance
(:mod:`~transformer_pde.gaussian` re-exports :func:`psd_sqrt` and :func:`numerical_rank`;
:mod:`~transformer_pde.bures` and :mod:`~transformer_pde.meanfield` use them).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.linalg import expm

from . import _checks


def exponential(V: NDArray[np.float64]) -> Callable[[float], NDArray[np.float64]]:
    r"""A function ``t -> e^{tV}`` for a constant square ``V``, cheap to call repeatedly.

    Diagonal ``V``: the exact exponentials of the diagonal. Diagonalisable ``V`` with a
    well-conditioned eigenvector matrix :math:`S` (:math:`\kappa(S) \le 10^6`):
    :math:`S e^{t\Lambda} S^{-1}`, accurate to about :math:`\kappa(S)` ulps relative to
    :math:`\|e^{t\Lambda}\|`. Otherwise :func:`scipy.linalg.expm` at each call.
    """
    if np.all(V == np.diag(np.diag(V))):
        diag = np.diag(V).copy()
        return lambda t: np.diag(np.exp(t * diag))
    lam, S = np.linalg.eig(V)
    if np.isfinite(np.linalg.cond(S)) and np.linalg.cond(S) <= 1e6:
        S_inv = np.linalg.inv(S)
        real = bool(np.all(lam.imag == 0))
        if real:
            lam, S, S_inv = lam.real, S.real, S_inv.real

            def exp_real(t):
                return (S * np.exp(t * lam)) @ S_inv

            return exp_real

        def exp_complex(t):
            return ((S * np.exp(t * lam)) @ S_inv).real

        return exp_complex
    return lambda t: expm(t * V)


def psd_sqrt(S: ArrayLike) -> NDArray[np.float64]:
    r"""Symmetric square root :math:`S^{1/2}` of a symmetric PSD matrix (eigenvalues clipped at 0).

    Parameters
    ----------
    S : array (d, d)
        A finite symmetric positive semi-definite matrix (symmetrised first).

    Returns
    -------
    array (d, d)
        The symmetric :math:`R \succeq 0` with :math:`R^2 = S` (for :math:`S \succeq 0`).

    Raises
    ------
    ValueError
        If ``S`` is not a finite square matrix.

    Examples
    --------
    >>> import numpy as np
    >>> R = psd_sqrt(np.array([[4.0, 0.0], [0.0, 9.0]]))
    >>> print([f"{v:.6f}" for v in np.diag(R)], bool(abs(R[0, 1]) < 1e-12))
    ['2.000000', '3.000000'] True
    """
    S = _checks.matrix(S, "S", square=True)
    lam, U = np.linalg.eigh(0.5 * (S + S.T))
    R = (U * np.sqrt(np.clip(lam, 0.0, None))) @ U.T
    return 0.5 * (R + R.T)


def numerical_rank(Sigma: ArrayLike, rel_tol: float = 1e-3) -> int:
    r"""Number of eigenvalues of the PSD matrix ``Sigma`` above ``rel_tol`` times the largest.

    Parameters
    ----------
    Sigma : array (d, d)
        A finite symmetric positive semi-definite matrix (symmetrised first).
    rel_tol : float
        Relative threshold, ``>= 0``.

    Returns
    -------
    int
        The number of eigenvalues above ``rel_tol`` times the largest (0 if none is positive).

    Raises
    ------
    ValueError
        If ``Sigma`` is not a finite square matrix or ``rel_tol`` is negative.

    Examples
    --------
    >>> import numpy as np
    >>> numerical_rank(np.diag([1.0, 1e-6]))
    1
    >>> numerical_rank(np.diag([1.0, 1e-6]), rel_tol=1e-9)
    2
    """
    Sigma = _checks.matrix(Sigma, "Sigma", square=True)
    rel_tol = _checks.nonnegative_float(rel_tol, "rel_tol")
    lam = np.linalg.eigvalsh(0.5 * (Sigma + Sigma.T))
    if lam[-1] <= 0:
        return 0
    return int(np.sum(lam > rel_tol * lam[-1]))
