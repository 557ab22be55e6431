"""Input validation shared by the library: every public function fails loudly on bad input.

Each checker returns a float64 array and raises :class:`ValueError` naming the argument and
what was expected. Complex input is rejected (never cut to its real part).
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

WEIGHT_SUM_TOL = 1e-9

#: Relative tolerance on :math:`\|\Sigma - \Sigma^\top\|_F / \|\Sigma\|_F` for a valid covariance.
SYMMETRY_TOL = 1e-10
#: Relative tolerance on the smallest eigenvalue:
#: :math:`\lambda_{\min} \ge -\text{tol}\,\|\Sigma\|_F`.
PSD_TOL = 1e-10


def real_array(x: Any, name: str) -> FloatArray:
    """``x`` as a float64 array; ``ValueError`` naming ``name`` if it is complex or not
    numeric."""
    if np.iscomplexobj(x):
        raise ValueError(f"{name} must be real, got complex values")
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of real numbers, got "
                         f"{type(x).__name__}") from None


def flag(x: Any, name: str) -> bool:
    """``True`` or ``False`` (a Python or NumPy bool; a string such as ``"no"`` or a number
    is refused rather than read by its truth value)."""
    if not isinstance(x, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {x!r}")
    return bool(x)


def points(X: Any, name: str = "X") -> FloatArray:
    """A finite float64 array of shape ``(n, d)`` with ``n >= 1`` and ``d >= 1``."""
    arr = real_array(X, name)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name} must be a 2-D array of shape (n, d) with n, d >= 1, "
                         f"got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    return arr


def matrix(M: Any, name: str, shape: Sequence[int] | None = None, *, cols: int | None = None,
           square: bool = False) -> FloatArray:
    """A finite float64 2-D array, optionally of an exact ``shape`` or with ``cols`` columns."""
    arr = real_array(M, name)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array, got shape {arr.shape}")
    if shape is not None and arr.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {arr.shape}")
    if cols is not None and arr.shape[1] != cols:
        raise ValueError(f"{name} must have {cols} columns (the token dimension d), "
                         f"got shape {arr.shape}")
    if square and arr.shape[0] != arr.shape[1]:
        raise ValueError(f"{name} must be square, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    return arr


def query_key(Q: Any, K: Any, d: int) -> tuple[FloatArray, FloatArray]:
    """Query and key matrices of the same shape ``(k, d)``."""
    Q = matrix(Q, "Q", cols=d)
    K = matrix(K, "K", cols=d)
    if Q.shape != K.shape:
        raise ValueError(f"Q and K must have the same shape (k, d), got {Q.shape} and {K.shape}")
    return Q, K


def stack(Ms: Any, name: str, *, cols: int) -> FloatArray:
    """A finite float64 array of shape ``(H, rows, cols)`` with ``H >= 1``."""
    arr = real_array(Ms, name)
    if arr.ndim != 3 or arr.shape[0] < 1 or arr.shape[2] != cols:
        raise ValueError(f"{name} must have shape (H, ., {cols}) with H >= 1, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    return arr


def weights(w: Any, n: int, name: str = "weights") -> FloatArray:
    """Probability weights of shape ``(n,)``: finite, non-negative, summing to one.

    ``None`` means uniform weights ``1/n``.
    """
    if w is None:
        return np.full(n, 1.0 / n)
    arr = real_array(w, name)
    if arr.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},) to match the {n} tokens, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    if np.any(arr < 0):
        raise ValueError(f"{name} must be non-negative, got a minimum of {arr.min():.3g}")
    total = arr.sum()
    if abs(total - 1.0) > WEIGHT_SUM_TOL:
        raise ValueError(f"{name} must sum to 1 (a probability measure), got a sum of {total:.12g}")
    return arr


def positions(s: Any, n: int, name: str) -> FloatArray:
    """Positions in ``[0, 1]`` of shape ``(n,)``, one per atom (the sequence axis of masking)."""
    arr = real_array(s, name)
    if arr.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), one position per atom, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    outside = (arr < 0.0) | (arr > 1.0)
    if np.any(outside):
        k = int(np.flatnonzero(outside)[0])
        raise ValueError(f"{name} must lie in [0, 1], got {name}[{k}] = {arr[k]!r}")
    return arr


def positive_int(k: Any, name: str) -> int:
    """An integer ``>= 1``."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"{name} must be a positive integer, got {k!r}")
    return int(k)


def int_at_least(k: Any, name: str, low: int) -> int:
    """An integer ``>= low`` (``low >= 1``)."""
    k = positive_int(k, name)
    if k < low:
        raise ValueError(f"{name} must be at least {low}, got {k}")
    return k


def _scalar(x: Any) -> float:
    """``float(x)``, refusing complex numbers (``TypeError``) instead of dropping their
    imaginary part, and bools and strings (``True`` or ``"2"`` is not a number here)."""
    if np.iscomplexobj(x) or isinstance(x, (bool, np.bool_, str, bytes)):
        raise TypeError("not a real number")
    return float(x)


def positive_float(x: Any, name: str) -> float:
    """A finite float ``> 0``."""
    try:
        val = _scalar(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {x!r}") from None
    if not np.isfinite(val) or val <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {x!r}")
    return val


def float_at_least(x: Any, name: str, low: float, wording: str | None = None) -> float:
    """A finite float ``>= low``; ``wording`` names the condition in errors (default
    ``"number >= low"``)."""
    wording = wording or f"number >= {low:g}"
    try:
        val = _scalar(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a {wording}, got {x!r}") from None
    if not np.isfinite(val) or val < low:
        raise ValueError(f"{name} must be a finite {wording}, got {x!r}")
    return val


def finite_float(x: Any, name: str) -> float:
    """A finite real number."""
    try:
        val = _scalar(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite real number, got {x!r}") from None
    if not np.isfinite(val):
        raise ValueError(f"{name} must be finite, got {x!r}")
    return val


def nonnegative_float(x: Any, name: str) -> float:
    """A finite float ``>= 0`` (a tolerance, a radius)."""
    return float_at_least(x, name, 0.0, "non-negative number")


def moments(alpha: Any, Sigma: Any, alpha_name: str = "alpha",
            Sigma_name: str = "Sigma") -> tuple[FloatArray, FloatArray]:
    """A mean ``(d,)`` and a symmetric positive semi-definite covariance ``(d, d)`` (within
    :data:`SYMMETRY_TOL` and :data:`PSD_TOL`), as float arrays; ``Sigma`` is returned
    symmetrised."""
    alpha = real_array(alpha, alpha_name)
    if alpha.ndim != 1 or alpha.size < 1:
        raise ValueError(f"{alpha_name} must be a 1-D array of shape (d,), got shape {alpha.shape}")
    if not np.all(np.isfinite(alpha)):
        raise ValueError(f"{alpha_name} contains non-finite values (NaN or inf)")
    d = alpha.size
    Sigma = matrix(Sigma, Sigma_name, shape=(d, d))
    scale = max(np.linalg.norm(Sigma), np.finfo(float).tiny)
    if np.linalg.norm(Sigma - Sigma.T) > SYMMETRY_TOL * scale:
        raise ValueError(f"{Sigma_name} must be symmetric (a covariance matrix), got "
                         f"|Sigma - Sigma.T|_F = {np.linalg.norm(Sigma - Sigma.T):.3g}")
    Sigma = 0.5 * (Sigma + Sigma.T)
    lam_min = np.linalg.eigvalsh(Sigma)[0]
    if lam_min < -PSD_TOL * scale:
        raise ValueError(f"{Sigma_name} must be positive semi-definite (a covariance matrix), "
                         f"got smallest eigenvalue {lam_min:.3g}")
    return alpha, Sigma


def covariance(Sigma: Any, name: str = "Sigma") -> FloatArray:
    """A symmetric positive semi-definite ``(d, d)`` matrix, ``d >= 1``, as in :func:`moments`
    (without a mean), returned symmetrised."""
    Sigma = matrix(Sigma, name, square=True)
    if Sigma.shape[0] < 1:
        raise ValueError(f"{name} must be a (d, d) matrix with d >= 1, got shape {Sigma.shape}")
    return moments(np.zeros(Sigma.shape[0]), Sigma, Sigma_name=name)[1]


def gaussian(alpha: Any, Sigma: Any) -> tuple[FloatArray, FloatArray]:
    """A mean ``(d,)`` and a symmetric positive *definite* covariance ``(d, d)``."""
    alpha, Sigma = moments(alpha, Sigma)
    if np.linalg.eigvalsh(Sigma)[0] <= 0:
        raise ValueError("Sigma must be positive definite")
    return alpha, Sigma


def seed(x: Any, name: str = "seed") -> int:
    """A seed: a non-negative integer (``None``, negative numbers, bools, floats and strings
    are refused, so that every call with the same arguments gives the same result)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {x!r}")
    return int(x)


def seed_key(seed: Any, name: str = "seed") -> list[int]:
    """A seed as a list of non-negative ints (one int or a non-empty 1-D sequence of them;
    ``None``, floats, bools and strings are refused, as by :func:`seed`)."""
    if isinstance(seed, np.ndarray) and seed.ndim == 0:
        seed = seed[()]
    items = [seed] if isinstance(seed, (str, bytes)) or np.ndim(seed) == 0 else list(seed)
    if not items or any(isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer))
                        or s < 0 for s in items):
        raise ValueError(f"{name} must be a non-negative int or a non-empty 1-D sequence of "
                         f"them, got {seed!r}")
    return [int(s) for s in items]


def points_and_hull(points_: Any, hull_points: Any) -> tuple[FloatArray, FloatArray]:
    """``(points, hull_points)`` as points with the same number of columns."""
    Y = points(points_, "points")
    H = points(hull_points, "hull_points")
    if Y.shape[1] != H.shape[1]:
        raise ValueError(f"points must have d = {H.shape[1]} columns like hull_points, "
                         f"got shape {Y.shape}")
    return Y, H


def increasing_times(times: Any, name: str = "times") -> FloatArray:
    """A finite, strictly increasing 1-D float array with at least two entries."""
    t = real_array(times, name)
    if t.ndim != 1 or t.size < 2:
        raise ValueError(f"{name} must be a 1-D array with at least two entries, "
                         f"got shape {t.shape}")
    if not np.all(np.isfinite(t)):
        raise ValueError(f"{name} contains non-finite values")
    if np.any(np.diff(t) <= 0):
        raise ValueError(f"{name} must be strictly increasing")
    return t
