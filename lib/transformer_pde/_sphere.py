"""Argument checks shared by the modules on the sphere (:mod:`~transformer_pde.sphere`,
:mod:`~transformer_pde.sphere_stability`, :mod:`~transformer_pde.sphere_phase`,
:mod:`~transformer_pde.grid_energy`): the inverse temperature, the interaction matrix, the
model name, tokens on the sphere, and the exponential of logits that refuses to overflow.
"""

import numpy as np

from . import _checks

#: Largest logit :math:`\beta\langle x, Dy\rangle` accepted before ``exp`` overflows.
MAX_LOGIT = 700.0

#: The two models on the sphere: normalised (SA) and unnormalised (USA) self-attention.
MODELS = ("sa", "usa")


def beta(beta, *, allow_zero=False):
    """The inverse temperature as a float, finite and > 0 (or >= 0 with ``allow_zero``)."""
    if isinstance(beta, (bool, np.bool_, str, bytes)):
        raise ValueError(f"beta must be a number, got {beta!r}")
    try:
        val = _checks._scalar(beta)
    except (TypeError, ValueError):
        raise ValueError(f"beta must be a real number, got {beta!r}") from None
    if not np.isfinite(val) or val < 0 or (val == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"beta must be a finite number {bound}, got {beta!r}")
    return val


def scaled_logits(beta, S):
    """``beta * S`` for the inner products ``S``; ``ValueError`` naming ``beta`` if the
    product overflows (the softmax would be NaN)."""
    with np.errstate(over="ignore"):
        L = beta * S
    if not np.all(np.isfinite(L)):
        raise ValueError(f"beta * <Q x_i, K x_j> overflows (beta = {beta:.4g}, largest "
                         f"|<Q x_i, K x_j>| = {float(np.max(np.abs(S))):.4g}): lower beta")
    return L


def interaction_matrix(D, d):
    """``D`` as a finite ``(d, d)`` float array; the identity when ``D`` is None."""
    if D is None:
        return np.eye(d)
    return _checks.matrix(D, "D", shape=(d, d))


def exp_logits(L):
    """``exp(L)``; ``ValueError`` if a logit exceeds :data:`MAX_LOGIT` (exp would overflow)."""
    top = float(np.max(L))
    if top > MAX_LOGIT:
        raise ValueError(f"the logits beta <x, D y> reach {top:.4g} > {MAX_LOGIT:g}: exp would "
                         "overflow (lower beta or the scale of D)")
    return np.exp(L)


def model(model):
    """``'sa'`` or ``'usa'``."""
    if model not in MODELS:
        raise ValueError(f"model must be 'sa' or 'usa', got {model!r}")
    return model


def unit_rows(X0, tol):
    """``X0`` as points ``(n, d)`` whose rows have norm 1 within ``tol``."""
    X0 = _checks.points(X0, "X0")
    drift = float(np.max(np.abs(np.linalg.norm(X0, axis=-1) - 1.0)))
    if drift > tol:
        raise ValueError(f"X0 must have unit rows (tokens on the sphere): max ||x_i| - 1| = "
                         f"{drift:.3g} > {tol:.3g}; use normalise(X0)")
    return X0
