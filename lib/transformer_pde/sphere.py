r"""Tokens on the unit sphere: attention dynamics with layer normalisation.

With layer normalisation the tokens live on :math:`\mathbb{S}^{d-1}` and follow the
projected dynamics

.. math::

    \dot x_i = P_{x_i}\big(\Gamma(x_i)\big), \qquad P_x y = y - \langle x, y\rangle x,

for any attention field :math:`\Gamma` (Geshkovski, Letrouit, Polyanskiy and Rigollet,
2025; Karagodin, Polyanskiy and Rigollet, 2024; Burger et al., 2025).

**Staying on the sphere.** :func:`sphere_field` evaluates the field at :math:`x/|x|` and
projects with :math:`P_x y = y - \langle x, y\rangle x/|x|^2`, the orthogonal projection on
:math:`x^\perp`, which is :math:`P_x` on the sphere. Then
:math:`\frac{d}{dt}|x_i|^2 = 2\langle x_i, P_{x_i}(\cdot)\rangle = 0` *everywhere*, not only
on the sphere: every norm is a first integral of the ODE in :math:`\mathbb{R}^d`, and an
accurate integrator keeps it up to its local error, with no drift instability. So we
integrate in :math:`\mathbb{R}^d` with a tight adaptive scheme and *check* the drift
(:func:`integrate_on_sphere` raises if it exceeds ``drift_tol``), rather than hiding it by
renormalising. The residual network with layer normalisation after each layer,
:math:`x^{\ell+1} = (x^\ell + h P_{x^\ell}\Gamma(x^\ell)) / |\cdot|`, is
:func:`normalised_residual_stack` (a projected Euler scheme, order one).
"""

import numpy as np

from . import _checks
from .dynamics import integrate

__all__ = [
    "normalise",
    "tangent_projection",
    "sphere_field",
    "integrate_on_sphere",
    "normalised_residual_stack",
    "uniform_on_sphere",
    "sphere_drift",
]


def _norms(X, name):
    r = np.linalg.norm(X, axis=-1, keepdims=True)
    if np.any(r == 0):
        raise ValueError(f"{name} has a zero row: it cannot be put on the sphere")
    return r


def normalise(X):
    r"""Rows put on the unit sphere, :math:`x_i / |x_i|` (layer normalisation without gain).

    A zero row raises :class:`ValueError`.
    """
    X = _checks.points(X, "X")
    return X / _norms(X, "X")


def tangent_projection(X, Y):
    r"""Rows :math:`P_{x_i} y_i = y_i - \langle x_i, y_i\rangle x_i / |x_i|^2`.

    The orthogonal projection of :math:`y_i` on :math:`x_i^\perp`, the tangent space of the
    sphere at :math:`x_i/|x_i|`; on the unit sphere it is :math:`y - \langle x, y\rangle x`
    (Geshkovski et al., 2025). ``X`` and ``Y`` have the same shape ``(n, d)``.
    """
    X = _checks.points(X, "X")
    Y = _checks.points(Y, "Y")
    if X.shape != Y.shape:
        raise ValueError(f"X and Y must have the same shape, got {X.shape} and {Y.shape}")
    r2 = _norms(X, "X") ** 2
    return Y - (np.einsum("ij,ij->i", X, Y)[:, None] / r2) * X


def sphere_field(field):
    r"""The projected field ``(t, X) -> P_X field(t, X / |X|)`` of the dynamics on the sphere.

    .. math::  \dot x_i = P_{x_i}\big(\Gamma_{\mu(t)}(x_i)\big),

    with ``field(t, X)`` any attention field (e.g. from
    :func:`transformer_pde.dynamics.attention_field`), evaluated at the normalised tokens.
    Row norms are first integrals of the resulting ODE (see the module notes).
    """
    if not callable(field):
        raise ValueError("field must be callable as field(t, X)")

    def projected(t, X):
        U = normalise(X)
        return tangent_projection(X, np.asarray(field(t, U), dtype=np.float64))

    projected.__name__ = f"sphere_{getattr(field, '__name__', 'field')}"
    return projected


def sphere_drift(trajectory):
    r"""Largest distance to the sphere along a trajectory.

    .. math::  \max_{k,i} \big|\,|x_i(t_k)| - 1\big|
    """
    traj = np.asarray(trajectory, dtype=np.float64)
    if traj.ndim < 2:
        raise ValueError(f"trajectory must have tokens as rows, got shape {traj.shape}")
    return float(np.max(np.abs(np.linalg.norm(traj, axis=-1) - 1.0)))


def _unit_rows(X0, tol):
    X0 = _checks.points(X0, "X0")
    drift = sphere_drift(X0)
    if drift > tol:
        raise ValueError(f"X0 must have unit rows (tokens on the sphere): max ||x_i| - 1| = "
                         f"{drift:.3g} > {tol:.3g}; use normalise(X0)")
    return X0


def integrate_on_sphere(field, X0, times, *, method="DOP853", rtol=1e-10, atol=1e-12,
                        max_step=None, drift_tol=1e-8):
    r"""Solve :math:`\dot x_i = P_{x_i}(\Gamma(x_i))` on the sphere from unit tokens ``X0``.

    Integrates :func:`sphere_field` of ``field`` with
    :func:`transformer_pde.dynamics.integrate` (``method``, ``rtol``, ``atol``,
    ``max_step`` as there) and checks that every token stays on the sphere: a drift
    :math:`\max|\,|x_i| - 1| > ` ``drift_tol`` raises :class:`RuntimeError` (tighten the
    tolerances or the step). Returns the trajectory, shape ``(k, n, d)``, unmodified.
    """
    drift_tol = _checks.positive_float(drift_tol, "drift_tol")
    X0 = _unit_rows(X0, drift_tol)
    traj = integrate(sphere_field(field), X0, times, method=method, max_step=max_step,
                     rtol=rtol, atol=atol)
    drift = sphere_drift(traj)
    if drift > drift_tol:
        raise RuntimeError(f"tokens drifted off the sphere: max ||x_i| - 1| = {drift:.3g} > "
                           f"drift_tol = {drift_tol:.3g}; tighten rtol/atol or max_step")
    return traj


def normalised_residual_stack(field, X0, T, L):
    r"""Residual network with layer normalisation (projected Euler on the sphere).

    .. math::

        x^{\ell+1} = \frac{x^\ell + h P_{x^\ell}\Gamma(x^\ell)}
                           {|x^\ell + h P_{x^\ell}\Gamma(x^\ell)|}

    ``h = T/L`` and :math:`\Gamma` = ``field(ell * h, X)``; tokens stay exactly on the sphere
    (up to rounding). It is a projected explicit Euler scheme of the sphere dynamics
    (order one in ``h``), the residual Transformer with normalisation after each layer
    (Geshkovski et al., 2025). Returns all ``L + 1`` layers, shape ``(L + 1, n, d)``.
    """
    if not callable(field):
        raise ValueError("field must be callable as field(t, X)")
    L = _checks.positive_int(L, "L")
    T = _checks.positive_float(T, "T")
    X = _unit_rows(X0, 1e-8)
    h = T / L
    out = np.empty((L + 1, *X.shape))
    out[0] = X
    for ell in range(L):
        v = np.asarray(field(ell * h, X), dtype=np.float64)
        if v.shape != X.shape:
            raise ValueError(f"field(t, X) must return an array of shape {X.shape}, "
                             f"got {v.shape}")
        X = normalise(X + h * tangent_projection(X, v))
        out[ell + 1] = X
    return out


def uniform_on_sphere(n, d, rng):
    r"""``n`` independent points uniform on :math:`\mathbb{S}^{d-1}` (normalised Gaussians).

    ``rng`` is a :class:`numpy.random.Generator`.
    """
    n = _checks.positive_int(n, "n")
    d = _checks.positive_int(d, "d")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator, e.g. np.random.default_rng(0)")
    return normalise(rng.standard_normal((n, d)))
