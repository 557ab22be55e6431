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
:math:`x^{\ell+1} = (x^\ell + h\Gamma(x^\ell)) / |\cdot|`, is
:func:`normalised_residual_stack` (a first-order scheme of the projected dynamics; with a
tangent field it is the projected Euler scheme).

**Energy and gradient flows** (chapter 7). :func:`energy` is
:math:`E_\beta(\mu) = \frac{1}{2\beta}\iint e^{\beta\langle x, Dy\rangle}\,d\mu\,d\mu`;
:func:`usa` and :func:`sa` are the unnormalised and softmax-normalised attention fields on the
sphere (Geshkovski et al., 2025; Burger, Kabri, Korolev, Roith and Weigand, 2025). The
conventions are chosen so that, for a symmetric :math:`D` and weights :math:`w_i`,
:math:`P_{x_i}\nabla_{x_i}E_\beta = w_i\,\mathrm{usa}_i`: along USA
:math:`\frac{d}{dt}E_\beta = \sum_i w_i|\dot x_i|^2` exactly, and along SA with
:math:`Q^\top K = V = D`, :math:`\frac{d}{dt}E_\beta = \sum_i w_i Z_i|\dot x_i|^2` with
:math:`Z_i = \sum_k w_k e^{\beta\langle x_i, Dx_k\rangle}`. :func:`usa_field` and
:func:`sa_field` are the same fields, checked once, for :func:`integrate_on_sphere`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _checks, _sphere
from ._sphere import MAX_LOGIT

# SciPy's solvers (ODEs, root finding, graphs) are imported where they are used, so that the
# layers, fields and energies load quickly (e.g. in the worker processes of a parallel sweep).

__all__ = [
    "normalise",
    "tangent_projection",
    "sphere_field",
    "integrate_on_sphere",
    "normalised_residual_stack",
    "uniform_on_sphere",
    "sphere_drift",
    "energy",
    "usa",
    "sa",
    "usa_field",
    "sa_field",
    "equiangular_rhs",
    "equiangular_decay_rate",
    "equiangular_configuration",
    "equiangular_solve",
    "equiangular_layers",
    "equiangular_clustering_time",
    "sphere_quadrature",
    "energy_mirror_descent",
    "dirac_pair_threshold",
    "clustered_pair_fraction",
    "cluster_count",
]


def _norms(X, name):
    r = np.linalg.norm(X, axis=-1, keepdims=True)
    if np.any(r == 0):
        raise ValueError(f"{name} has a zero row: it cannot be put on the sphere")
    return r


def normalise(X: ArrayLike) -> NDArray[np.float64]:
    r"""Rows put on the unit sphere, :math:`x_i / |x_i|` (layer normalisation without gain).

    A zero row raises :class:`ValueError`.

    Parameters
    ----------
    X : array (n, d)
        Tokens as rows, none of them zero.

    Returns
    -------
    array (n, d)
        The rows divided by their Euclidean norms.

    Raises
    ------
    ValueError
        If ``X`` is not a finite 2-D array or has a zero row.

    Examples
    --------
    >>> normalise([[3.0, 4.0], [0.0, -2.0]]).tolist()
    [[0.6, 0.8], [0.0, -1.0]]

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    X = _checks.points(X, "X")
    return X / _norms(X, "X")


def tangent_projection(X: ArrayLike, Y: ArrayLike) -> NDArray[np.float64]:
    r"""Rows :math:`P_{x_i} y_i = y_i - \langle x_i, y_i\rangle x_i / |x_i|^2`.

    The orthogonal projection of :math:`y_i` on :math:`x_i^\perp`, the tangent space of the
    sphere at :math:`x_i/|x_i|`; on the unit sphere it is :math:`y - \langle x, y\rangle x`
    (Geshkovski et al., 2025). ``X`` and ``Y`` have the same shape ``(n, d)``.

    Parameters
    ----------
    X : array (n, d)
        Base points, none of them zero.
    Y : array (n, d)
        Vectors to project, row ``i`` at ``X[i]``.

    Returns
    -------
    array (n, d)
        Row ``i`` orthogonal to ``X[i]``.

    Raises
    ------
    ValueError
        If the shapes differ, an entry is not finite, or ``X`` has a zero row.

    Examples
    --------
    >>> tangent_projection([[0.0, 0.0, 2.0]], [[1.0, 2.0, 3.0]]).tolist()
    [[1.0, 2.0, 0.0]]

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    X = _checks.points(X, "X")
    Y = _checks.points(Y, "Y")
    if X.shape != Y.shape:
        raise ValueError(f"X and Y must have the same shape, got {X.shape} and {Y.shape}")
    r2 = _norms(X, "X") ** 2
    return Y - (np.einsum("ij,ij->i", X, Y)[:, None] / r2) * X


def sphere_field(field: Callable[..., Any]) -> Callable[..., Any]:
    r"""The projected field ``(t, X) -> P_X field(t, X / |X|)`` of the dynamics on the sphere.

    .. math::  \dot x_i = P_{x_i}\big(\Gamma_{\mu(t)}(x_i)\big),

    with ``field(t, X)`` any attention field (e.g. from
    :func:`transformer_pde.dynamics.attention_field`), evaluated at the normalised tokens.
    Row norms are first integrals of the resulting ODE (see the module notes).

    Parameters
    ----------
    field : callable
        ``field(t, X)`` returning an array of the shape of ``X`` (n, d).

    Returns
    -------
    callable
        ``(t, X) -> array (n, d)``, row ``i`` orthogonal to ``X[i]``.

    Examples
    --------
    >>> import numpy as np
    >>> projected = sphere_field(lambda t, X: np.ones_like(X))
    >>> projected(0.0, np.array([[2.0, 0.0]])).tolist()
    [[0.0, 1.0]]

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    if not callable(field):
        raise ValueError("field must be callable as field(t, X)")

    def projected(t, X):
        X = np.asarray(X, dtype=np.float64)
        r2 = np.einsum("ij,ij->i", X, X)[:, None]
        if np.any(r2 == 0):
            raise ValueError("X has a zero row: it cannot be put on the sphere")
        v = np.asarray(field(t, X / np.sqrt(r2)), dtype=np.float64)
        if v.shape != X.shape:
            raise ValueError(f"field(t, X) must return an array of shape {X.shape}, "
                             f"got {v.shape}")
        return v - (np.einsum("ij,ij->i", X, v)[:, None] / r2) * X

    projected.__name__ = f"sphere_{getattr(field, '__name__', 'field')}"
    return projected


def sphere_drift(trajectory: ArrayLike) -> float:
    r"""Largest distance to the sphere along a trajectory.

    .. math::  \max_{k,i} \big|\,|x_i(t_k)| - 1\big|

    Parameters
    ----------
    trajectory : array (..., n, d)
        Tokens as rows, e.g. ``(len(times), n, d)`` from :func:`integrate_on_sphere`.

    Returns
    -------
    float
        The largest :math:`\big||x| - 1\big|` over every row.

    Raises
    ------
    ValueError
        If ``trajectory`` has fewer than two axes.

    Examples
    --------
    >>> sphere_drift([[[1.0, 0.0], [0.0, 1.5]]])
    0.5
    """
    traj = _checks.real_array(trajectory, "trajectory")
    if traj.ndim < 2 or traj.size == 0 or not np.all(np.isfinite(traj)):
        raise ValueError(f"trajectory must be finite, with tokens as rows, got shape {traj.shape}")
    return float(np.max(np.abs(np.linalg.norm(traj, axis=-1) - 1.0)))


def integrate_on_sphere(field: Callable[..., Any], X0: ArrayLike, times: ArrayLike, *,
                        method: str = "DOP853", rtol: float = 1e-10, atol: float = 1e-12,
                        max_step: float | None = None,
                        drift_tol: float = 1e-8) -> NDArray[np.float64]:
    r"""Solve :math:`\dot x_i = P_{x_i}(\Gamma(x_i))` on the sphere from unit tokens ``X0``.

    Integrates :func:`sphere_field` of ``field`` with
    :func:`transformer_pde.dynamics.integrate` (``method``, ``rtol``, ``atol``,
    ``max_step`` as there) and checks that every token stays on the sphere: a drift
    :math:`\max|\,|x_i| - 1| > ` ``drift_tol`` raises :class:`RuntimeError` (tighten the
    tolerances or the step). Returns the trajectory, shape ``(k, n, d)``, unmodified.

    Parameters
    ----------
    field : callable
        ``field(t, X)``, e.g. :func:`usa_field` or :func:`sa_field`.
    X0 : array (n, d)
        Unit tokens at ``times[0]``.
    times : array (k,)
        Increasing output times.
    method, rtol, atol, max_step
        As in :func:`transformer_pde.dynamics.integrate`.
    drift_tol : float
        Largest accepted :math:`\big||x_i| - 1\big|`.

    Returns
    -------
    array (k, n, d)
        The tokens at ``times``.

    Raises
    ------
    ValueError
        On malformed input.
    RuntimeError
        If the tokens drift from the sphere by more than ``drift_tol``.

    Examples
    --------
    >>> import numpy as np
    >>> X0 = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> traj = integrate_on_sphere(usa_field(1.0), X0, [0.0, 1.0, 5.0])
    >>> traj.shape, sphere_drift(traj) < 1e-8, bool(traj[-1, 0] @ traj[-1, 1] > 0.9)
    ((3, 2, 2), True, True)

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    from .dynamics import integrate

    drift_tol = _checks.positive_float(drift_tol, "drift_tol")
    rtol = _checks.positive_float(rtol, "rtol")
    atol = _checks.nonnegative_float(atol, "atol")
    times = _checks.real_array(times, "times")
    X0 = _sphere.unit_rows(X0, drift_tol)
    traj = integrate(sphere_field(field), X0, times, method=method, max_step=max_step,
                     rtol=rtol, atol=atol)
    drift = sphere_drift(traj)
    if drift > drift_tol:
        raise RuntimeError(f"tokens drifted off the sphere: max ||x_i| - 1| = {drift:.3g} > "
                           f"drift_tol = {drift_tol:.3g}; tighten rtol/atol or max_step")
    return traj


def normalised_residual_stack(field: Callable[..., Any], X0: ArrayLike, T: float,
                              L: int) -> NDArray[np.float64]:
    r"""Residual network with layer normalisation after each layer (RMSNorm without gain).

    .. math::

        x^{\ell+1} = \frac{x^\ell + h\,\Gamma(x^\ell)}{|x^\ell + h\,\Gamma(x^\ell)|},
        \qquad h = T/L,

    with :math:`\Gamma` = ``field(ell * h, X)`` used as returned (not projected), the layer
    computed by the code of Geshkovski, Letrouit, Polyanskiy and Rigollet (2025). Since
    :math:`x + h\Gamma = (1 + h\langle x, \Gamma\rangle)\,x + h\,P_x\Gamma`, it is the same
    map as :math:`(x + h' P_x\Gamma)/|x + h' P_x\Gamma|` with the token-dependent step
    :math:`h' = h/(1 + h\langle x, \Gamma\rangle)` (when :math:`1 + h\langle x,
    \Gamma\rangle > 0`): a first-order scheme of :math:`\dot x = P_x\Gamma(x)`. Passing a
    field that is already tangent (:func:`sa_field`, :func:`usa_field`) gives the projected
    Euler scheme :math:`(x + hP_x\Gamma)/|\cdot|`; the raw attention output
    (``sa_field(..., tangent=False)``, or :func:`transformer_pde.dynamics.attention_field`)
    gives the network itself. Tokens stay on the sphere up to rounding. Returns all
    ``L + 1`` layers, shape ``(L + 1, n, d)``; a token sent to the origin raises
    :class:`ValueError`.

    Parameters
    ----------
    field : callable
        ``field(t, X)`` returning an array (n, d).
    X0 : array (n, d)
        Tokens entering the first layer.
    T : float
        Depth in time, positive.
    L : int
        Number of layers, positive.

    Returns
    -------
    array (L + 1, n, d)

    Raises
    ------
    ValueError
        On malformed input or a token sent to the origin.

    Examples
    --------
    >>> import numpy as np
    >>> X0 = equiangular_configuration(3, 0.2)
    >>> S = normalised_residual_stack(sa_field(1.0, tangent=False), X0, 1.0, 4)
    >>> rho = np.einsum("ld,ld->l", S[:, 0], S[:, 1])  # stays equiangular
    >>> bool(np.allclose(rho, equiangular_layers(0.2, 3, 1.0, 0.25, 4, "sa")))
    True

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    if not callable(field):
        raise ValueError("field must be callable as field(t, X)")
    L = _checks.positive_int(L, "L")
    T = _checks.positive_float(T, "T")
    X = _sphere.unit_rows(X0, 1e-8)
    h = T / L
    out = np.empty((L + 1, *X.shape))
    out[0] = X
    for ell in range(L):
        v = np.asarray(field(ell * h, X), dtype=np.float64)
        if v.shape != X.shape:
            raise ValueError(f"field(t, X) must return an array of shape {X.shape}, "
                             f"got {v.shape}")
        Y = X + h * v
        r = np.sqrt(np.einsum("ij,ij->i", Y, Y))
        if not np.all(r > 0):  # also catches NaN
            raise ValueError(f"layer {ell + 1}: a token x + h Gamma(x) is zero or not finite "
                             "(lower the step T / L or check the field)")
        X = Y / r[:, None]
        out[ell + 1] = X
    return out


def uniform_on_sphere(n: int, d: int, rng: np.random.Generator) -> NDArray[np.float64]:
    r"""``n`` independent points uniform on :math:`\mathbb{S}^{d-1}` (normalised Gaussians).

    ``rng`` is a :class:`numpy.random.Generator`.

    Parameters
    ----------
    n, d : int
        Number of points and dimension of the ambient space, both at least 1.
    rng : numpy.random.Generator
        Source of the Gaussian draws.

    Returns
    -------
    array (n, d)
        Unit rows.

    Raises
    ------
    ValueError
        If ``n`` or ``d`` is not a positive integer or ``rng`` is not a Generator.

    Examples
    --------
    >>> import numpy as np
    >>> X = uniform_on_sphere(5, 3, np.random.default_rng(0))
    >>> X.shape, bool(np.allclose(np.linalg.norm(X, axis=1), 1.0))
    ((5, 3), True)
    """
    n = _checks.positive_int(n, "n")
    d = _checks.positive_int(d, "d")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator, e.g. np.random.default_rng(0)")
    return normalise(rng.standard_normal((n, d)))


# ---------------------------------------------------------------------------------------------
# Interaction energy, SA and USA (Geshkovski et al., 2025; Burger et al., 2025)
# ---------------------------------------------------------------------------------------------

def _queries(X, queries):
    if queries is None:
        return X
    return _checks.matrix(queries, "queries", cols=X.shape[1])


def energy(X: ArrayLike, beta: float = 1.0, D: ArrayLike | None = None,
           weights: ArrayLike | None = None) -> float:
    r"""Interaction energy of the empirical measure :math:`\mu = \sum_i w_i\delta_{x_i}`.

    .. math::

        E_\beta(\mu) = \frac{1}{2\beta}\iint e^{\beta\langle x, D y\rangle}\,d\mu(x)\,d\mu(y)
                     = \frac{1}{2\beta}\sum_{i,j} w_i w_j\, e^{\beta\langle x_i, D x_j\rangle}

    (Geshkovski, Letrouit, Polyanskiy and Rigollet, 2025, with :math:`D = I`; Burger, Kabri,
    Korolev, Roith and Weigand, 2025, with a symmetric :math:`D = Q^\top K = V`). ``D`` is the
    identity and ``weights`` are uniform (:math:`1/n`) by default. With these conventions and
    a symmetric ``D``, the :func:`usa` field is exactly the gradient of :math:`E_\beta` on the
    sphere: :math:`P_{x_i}\nabla_{x_i} E_\beta = w_i\,` ``usa(X)[i]``, so along
    :math:`\dot x_i =` ``usa(X)[i]`` one has :math:`\frac{d}{dt}E_\beta = \sum_i w_i|\dot x_i|^2`.

    The energy is a function of the *directions* only if the tokens are unit vectors: evaluate
    it on exactly normalised tokens (:func:`normalise`).

    Parameters
    ----------
    X : array (n, d)
        Tokens, the atoms of :math:`\mu`.
    beta : float
        Inverse temperature :math:`\beta > 0`.
    D : array (d, d), optional
        Interaction matrix; the identity by default.
    weights : array (n,), optional
        Weights of the atoms (non-negative, summing to one); uniform by default.

    Returns
    -------
    float
        :math:`E_\beta(\mu)`.

    Raises
    ------
    ValueError
        If an array has the wrong shape or non-finite entries, the weights are not a
        probability vector, or ``beta`` is not a positive finite number.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [1.0, 0.0]])  # a Dirac mass: E = e^beta / (2 beta)
    >>> bool(np.isclose(energy(X, 2.0), np.exp(2.0) / 4.0))
    True

    References
    ----------
    :cite:`geshkovski2025mathematical,burger2025analysis`
    """
    X = _checks.points(X, "X")
    n, d = X.shape
    beta = _sphere.beta(beta)
    D = _sphere.interaction_matrix(D, d)
    w = _checks.weights(weights, n)
    K = _sphere.exp_logits(beta * (X @ D @ X.T))
    return float(w @ K @ w / (2.0 * beta))


def usa(X: ArrayLike, beta: float = 1.0, D: ArrayLike | None = None, *,
        weights: ArrayLike | None = None, queries: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""Unnormalised self-attention on the sphere (USA).

    .. math::

        \dot x_i = P_{x_i}\Big(\sum_j w_j\, e^{\beta\langle x_i, D x_j\rangle}\, D x_j\Big),
        \qquad P_x y = y - \langle x, y\rangle x,

    with uniform weights :math:`w_j = 1/n` by default, i.e.
    :math:`P_{x_i}(\frac1n\sum_j e^{\beta\langle x_i, Dx_j\rangle} Dx_j)`: the model of
    Geshkovski et al. (2025) for :math:`D = I` and of Burger et al. (2025) for
    :math:`Q^\top K = V = D`. For symmetric ``D`` it is the spherical gradient of
    :func:`energy` (same ``beta``, ``D`` and weights) divided by the weights; for the measure
    it is the Wasserstein gradient :math:`\nabla_{\mathbb S}\frac{\delta E_\beta}{\delta\mu}`.

    ``queries`` (m, d): evaluate the field of the measure at other points (projected on their
    tangent spaces). Returns an array of shape (m, d) (``m = n`` by default).

    Parameters
    ----------
    X : array (n, d)
        Tokens, the atoms of the measure (unit rows for the dynamics on the sphere).
    beta : float
        Inverse temperature :math:`\beta \ge 0`.
    D : array (d, d), optional
        Interaction matrix; the identity by default.
    weights : array (n,), optional
        Weights of the atoms (non-negative, summing to one); uniform by default.
    queries : array (m, d), optional
        Points where the field is evaluated; the tokens themselves by default.

    Returns
    -------
    array (m, d)
        Row ``i`` is the field at ``queries[i]``, tangent there.

    Raises
    ------
    ValueError
        If an array has the wrong shape or non-finite entries, the weights are not a
        probability vector, or ``beta`` is negative or not finite.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> V = usa(X, 0.0)  # beta = 0: each token moves towards the other, at half its pull
    >>> bool(np.allclose(V, [[0.0, 0.5], [0.5, 0.0]]))
    True

    References
    ----------
    :cite:`geshkovski2025mathematical,burger2025analysis`
    """
    X = _checks.points(X, "X")
    n, d = X.shape
    beta = _sphere.beta(beta, allow_zero=True)
    D = _sphere.interaction_matrix(D, d)
    w = _checks.weights(weights, n)
    Y = _queries(X, queries)
    G = (_sphere.exp_logits(beta * (Y @ D @ X.T)) * w) @ (X @ D.T)
    return tangent_projection(Y, G)


def sa(X: ArrayLike, beta: float = 1.0, Q: ArrayLike | None = None, K: ArrayLike | None = None,
       V: ArrayLike | None = None, *, weights: ArrayLike | None = None,
       queries: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""Self-attention on the sphere (SA), normalised by the softmax.

    .. math::

        \dot x_i = P_{x_i}\Big(\sum_j
        \frac{w_j\, e^{\beta\langle Q x_i, K x_j\rangle}}
             {\sum_k w_k\, e^{\beta\langle Q x_i, K x_k\rangle}}\, V x_j\Big)

    (Geshkovski et al., 2025, with :math:`Q = K = V = I`; uniform weights by default). ``Q``
    and ``K`` have shape (k, d), ``V`` (d, d), each the identity by default. The softmax is
    computed stably (largest logit of each row subtracted); it equals
    :func:`transformer_pde.attention.softmax` with :math:`A = \beta K^\top Q`, projected.

    Parameters
    ----------
    X : array (n, d)
        Tokens, the atoms of the measure (unit rows for the dynamics on the sphere).
    beta : float
        Inverse temperature :math:`\beta \ge 0`.
    Q, K : array (k, d), optional
        Query and key matrices; the identity by default.
    V : array (d, d), optional
        Value matrix; the identity by default.
    weights : array (n,), optional
        Weights of the atoms (non-negative, summing to one); uniform by default.
    queries : array (m, d), optional
        Points where the field is evaluated; the tokens themselves by default.

    Returns
    -------
    array (m, d)
        Row ``i`` is the field at ``queries[i]``, tangent there.

    Raises
    ------
    ValueError
        If an array has the wrong shape or non-finite entries, ``Q`` and ``K`` differ in
        shape, the weights are not a probability vector, or ``beta`` is negative or not
        finite.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_pde import attention
    >>> X = normalise([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    >>> F = attention.softmax(X, 3.0 * np.eye(2), np.eye(2))
    >>> bool(np.allclose(sa(X, 3.0), tangent_projection(X, F)))
    True

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    X = _checks.points(X, "X")
    n, d = X.shape
    beta = _sphere.beta(beta, allow_zero=True)
    w = _checks.weights(weights, n)
    Y = _queries(X, queries)
    QY = Y if Q is None else Y @ _checks.matrix(Q, "Q", cols=d).T
    KX = X if K is None else X @ _checks.matrix(K, "K", cols=d).T
    if QY.shape[1] != KX.shape[1]:
        raise ValueError(f"Q and K must have the same shape (k, d), got {QY.shape[1]} and "
                         f"{KX.shape[1]} rows")
    VX = X if V is None else X @ _checks.matrix(V, "V", shape=(d, d)).T
    with np.errstate(divide="ignore", over="ignore"):
        L = _sphere.scaled_logits(beta, QY @ KX.T) + np.log(w)
        P = np.exp(L - L.max(axis=1, keepdims=True))  # -inf below the maximum: weight 0
    return tangent_projection(Y, (P @ VX) / P.sum(axis=1, keepdims=True))


def _tangent_flag(tangent):
    if not isinstance(tangent, (bool, np.bool_)):
        raise ValueError(f"tangent must be True or False, got {tangent!r}")


def _project_unit(U, G):
    return G - np.einsum("ij,ij->i", U, G)[:, None] * U


def usa_field(beta: float = 1.0, D: ArrayLike | None = None, *, sign: float = 1.0,
              tangent: bool = True) -> Callable[..., Any]:
    r"""The field ``(t, X) -> sign * usa(X, beta, D)`` for :func:`integrate_on_sphere`.

    Arguments are checked once; the returned callable skips the checks (it is called at every
    step on unit tokens). ``sign = -1`` gives the gradient *descent* of :func:`energy`.
    ``tangent=False`` returns the attention output before the projection,
    :math:`\frac1n\sum_j e^{\beta\langle x_i, Dx_j\rangle} Dx_j`, the input of a residual
    layer with layer normalisation (:func:`normalised_residual_stack`).

    Parameters
    ----------
    beta : float
        Inverse temperature :math:`\beta \ge 0`.
    D : array (d, d), optional
        Interaction matrix; the identity by default.
    sign : float
        ``1`` (ascent of :func:`energy`) or ``-1`` (descent).
    tangent : bool
        Project on the tangent spaces (the dynamics) or not (the layer's input).

    Returns
    -------
    callable
        ``(t, X) -> array (n, d)``.

    Raises
    ------
    ValueError
        If ``beta``, ``D``, ``sign`` or ``tangent`` is malformed.

    Examples
    --------
    >>> import numpy as np
    >>> X = normalise([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    >>> bool(np.allclose(usa_field(2.0, sign=-1.0)(0.0, X), -usa(X, 2.0)))
    True

    References
    ----------
    :cite:`geshkovski2025mathematical,burger2025analysis`
    """
    beta = _sphere.beta(beta, allow_zero=True)
    _tangent_flag(tangent)
    sign = _checks.finite_float(sign, "sign")
    if sign not in (1.0, -1.0):
        raise ValueError(f"sign must be 1 or -1, got {sign!r}")
    Dm = None if D is None else _checks.matrix(D, "D", square=True)

    def field(t, U):
        if Dm is not None and U.shape[1] != Dm.shape[0]:
            raise ValueError(f"D has shape {Dm.shape} but the tokens have dimension "
                             f"{U.shape[1]}")
        DU = U if Dm is None else U @ Dm.T
        L = beta * (U @ DU.T)
        if L.max() > MAX_LOGIT:
            raise ValueError("logits overflow: lower beta or the scale of D")
        G = np.exp(L) @ DU / U.shape[0]
        return sign * (_project_unit(U, G) if tangent else G)

    field.__name__ = "usa_field"
    return field


def sa_field(beta: float = 1.0, Q: ArrayLike | None = None, K: ArrayLike | None = None,
             V: ArrayLike | None = None, *, tangent: bool = True) -> Callable[..., Any]:
    r"""The field ``(t, X) -> sa(X, beta, Q, K, V)`` for :func:`integrate_on_sphere`.

    Arguments are checked once (``Q`` and ``K`` of the same shape ``(k, d)``, or one of them
    omitted and the other ``(d, d)``; ``V`` square; a common ``d``); the returned callable
    only checks that the tokens have that dimension. ``tangent=False`` returns the attention
    output before the projection, :math:`\sum_j \mathrm{softmax}_j(\beta\langle Qx_i,
    Kx_j\rangle)\, Vx_j`, the input of a residual layer with layer normalisation
    (:func:`normalised_residual_stack`).

    Parameters
    ----------
    beta : float
        Inverse temperature :math:`\beta \ge 0`.
    Q, K : array, optional
        Query and key matrices; the identity by default.
    V : array (d, d), optional
        Value matrix; the identity by default.
    tangent : bool
        Project on the tangent spaces (the dynamics) or not (the layer's input).

    Returns
    -------
    callable
        ``(t, X) -> array (n, d)``.

    Raises
    ------
    ValueError
        If an argument is malformed or the dimensions disagree.

    Examples
    --------
    >>> import numpy as np
    >>> X = normalise([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    >>> bool(np.allclose(sa_field(2.0)(0.0, X), sa(X, 2.0)))
    True

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    beta = _sphere.beta(beta, allow_zero=True)
    _tangent_flag(tangent)
    mats = [None if M is None else _checks.matrix(M, name) for M, name in
            ((Q, "Q"), (K, "K"), (V, "V"))]
    Qm, Km, Vm = mats
    if Vm is not None and Vm.shape[0] != Vm.shape[1]:
        raise ValueError(f"V must be square, got shape {Vm.shape}")
    dims = {M.shape[1] for M in mats if M is not None}
    if len(dims) > 1:
        raise ValueError("Q, K and V must have the same number of columns (the token "
                         f"dimension d), got shapes {[M.shape for M in mats if M is not None]}")
    if Qm is not None and Km is not None and Qm.shape != Km.shape:
        raise ValueError(f"Q and K must have the same shape (k, d), got {Qm.shape} and "
                         f"{Km.shape}")
    for M, name in ((Qm, "Q"), (Km, "K")):
        if M is not None and (Qm is None or Km is None) and M.shape[0] != M.shape[1]:
            raise ValueError(f"{name} must be square (d, d) when the other of Q, K is the "
                             f"identity, got shape {M.shape}")
    d_fixed = dims.pop() if dims else None

    def field(t, U):
        if d_fixed is not None and U.shape[1] != d_fixed:
            raise ValueError(f"Q, K, V act on dimension {d_fixed} but the tokens have "
                             f"dimension {U.shape[1]}")
        QU = U if Qm is None else U @ Qm.T
        KU = U if Km is None else U @ Km.T
        VU = U if Vm is None else U @ Vm.T
        L = _sphere.scaled_logits(beta, QU @ KU.T)
        with np.errstate(over="ignore"):  # -inf below the row maximum is weight 0
            P = np.exp(L - L.max(axis=1, keepdims=True))
        G = (P @ VU) / P.sum(axis=1, keepdims=True)
        return _project_unit(U, G) if tangent else G

    field.__name__ = "sa_field"
    return field


# ---------------------------------------------------------------------------------------------
# Equiangular configurations
# ---------------------------------------------------------------------------------------------

def _n_tokens(n):
    n = _checks.positive_int(n, "n")
    if n < 2:
        raise ValueError(f"n must be at least 2 (a pair of tokens), got {n}")
    return n


def equiangular_rhs(rho: ArrayLike, n: int, beta: float,
                    model: str) -> float | NDArray[np.float64]:
    r"""Time derivative of the common inner product of an equiangular configuration.

    If :math:`\langle x_i, x_j\rangle = \rho` for all :math:`i \ne j` (``n`` tokens,
    :math:`Q = K = V = D = I`), the configuration stays equiangular and

    .. math::

        \dot\rho_{\mathrm{SA}} = \frac{2 e^{\beta\rho}(1-\rho)(1+(n-1)\rho)}
                                      {e^{\beta} + (n-1)e^{\beta\rho}}, \qquad
        \dot\rho_{\mathrm{USA}} = \frac{2}{n} e^{\beta\rho}(1-\rho)(1+(n-1)\rho)

    (derived in chapter 7 from :math:`\dot x_i = c(\rho)(\sum_j x_j - (1+(n-1)\rho)x_i)`;
    the setting is that of Geshkovski et al., 2025). ``rho`` may be an array; ``model`` is
    ``"sa"`` or ``"usa"``.

    Parameters
    ----------
    rho : float or array
        The common inner product, in :math:`[-1, 1]`.
    n : int
        Number of tokens, at least 2.
    beta : float
        Inverse temperature :math:`\beta \ge 0`.
    model : {"sa", "usa"}
        Softmax-normalised or unnormalised attention.

    Returns
    -------
    float or array
        :math:`\dot\rho`, of the shape of ``rho``.

    Raises
    ------
    ValueError
        If ``rho`` leaves :math:`[-1, 1]`, ``n < 2``, ``beta`` is negative or not finite, or
        ``model`` is unknown.

    Examples
    --------
    >>> import numpy as np
    >>> X = equiangular_configuration(3, 0.2)
    >>> for model, field in (("usa", usa), ("sa", sa)):
    ...     V = field(X, 1.5)  # d/dt <x_0, x_1> = <v_0, x_1> + <x_0, v_1>
    ...     print(model, bool(np.isclose(V[0] @ X[1] + X[0] @ V[1],
    ...                                  equiangular_rhs(0.2, 3, 1.5, model))))
    usa True
    sa True

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    model = _sphere.model(model)
    n = _n_tokens(n)
    beta = _sphere.beta(beta, allow_zero=True)
    r = _checks.real_array(rho, "rho")
    if not np.all(np.isfinite(r)) or np.any(np.abs(r) > 1.0):
        raise ValueError("rho must be finite and lie in [-1, 1] (an inner product of unit "
                         "vectors)")
    core = 2.0 * (1.0 - r) * (1.0 + (n - 1) * r)
    if model == "usa":
        out = core * np.exp(beta * r) / n
    else:  # divide numerator and denominator by e^{beta rho}: exp(large) = inf gives 0
        with np.errstate(over="ignore"):
            out = core / (np.exp(beta * (1.0 - r)) + (n - 1))
    return out if out.ndim else float(out)


def equiangular_decay_rate(n: int, beta: float, model: str) -> float:
    r"""Exponential rate of :math:`1 - \rho(t) \to 0` for an equiangular configuration.

    Linearising :func:`equiangular_rhs` at :math:`\rho = 1`:
    :math:`\frac{d}{dt}(1-\rho) = -\lambda (1-\rho) + O((1-\rho)^2)` with
    :math:`\lambda_{\mathrm{SA}} = 2` and :math:`\lambda_{\mathrm{USA}} = 2e^{\beta}`,
    whatever ``n`` (derived in chapter 7). Since :math:`1 - \rho = |x_i - x_j|^2/2`, the
    distances between tokens (and the diameter) decay at half this rate: :math:`1` for SA,
    :math:`e^{\beta}` for USA.

    Parameters
    ----------
    n : int
        Number of tokens, at least 2 (the rate does not depend on it).
    beta : float
        Inverse temperature :math:`\beta \ge 0`.
    model : {"sa", "usa"}
        Softmax-normalised or unnormalised attention.

    Returns
    -------
    float
        :math:`\lambda`.

    Raises
    ------
    ValueError
        If ``n < 2``, ``beta`` is negative or not finite, or ``model`` is unknown.

    Examples
    --------
    >>> import numpy as np
    >>> r = 1 - 1e-6  # the slope of equiangular_rhs at rho = 1
    >>> lam = equiangular_decay_rate(4, 1.0, "usa")
    >>> bool(np.isclose(equiangular_rhs(r, 4, 1.0, "usa") / (1 - r), lam, rtol=1e-4))
    True

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    model = _sphere.model(model)
    _n_tokens(n)
    beta = _sphere.beta(beta, allow_zero=True)
    return 2.0 if model == "sa" else 2.0 * float(np.exp(beta))


def equiangular_configuration(n: int, rho: float, d: int | None = None) -> NDArray[np.float64]:
    r"""``n`` unit vectors in :math:`\mathbb R^d` with :math:`\langle x_i, x_j\rangle = \rho`.

    The Gram matrix :math:`(1-\rho)I + \rho\mathbf 1\mathbf 1^\top` is positive semidefinite
    iff :math:`-1/(n-1) \le \rho \le 1`, of rank ``n`` inside that interval; its square root
    gives the rows. ``d`` (default ``n``) must be at least that rank; extra columns are zero.

    Parameters
    ----------
    n : int
        Number of vectors, at least 2.
    rho : float
        The common inner product, in :math:`[-1/(n-1), 1]`.
    d : int, optional
        Dimension, at least the rank of the Gram matrix; ``n`` by default.

    Returns
    -------
    array (n, d)
        Unit rows with the prescribed inner products.

    Raises
    ------
    ValueError
        If ``rho`` is outside the interval or ``d`` is below the rank.

    Examples
    --------
    >>> import numpy as np
    >>> X = equiangular_configuration(4, -1 / 3, d=3)  # a regular tetrahedron
    >>> bool(np.allclose(X @ X.T, 4 / 3 * np.eye(4) - 1 / 3))
    True
    """
    n = _n_tokens(n)
    rho = _checks.finite_float(rho, "rho")
    if not (-1.0 / (n - 1) - 1e-15 <= rho <= 1.0):
        raise ValueError(f"rho must lie in [-1/(n-1), 1] = [{-1 / (n - 1):.4g}, 1], got {rho!r}")
    G = (1.0 - rho) * np.eye(n) + rho * np.ones((n, n))
    lam, U = np.linalg.eigh(G)
    keep = lam > 1e-12
    X = U[:, keep] * np.sqrt(lam[keep])
    d = n if d is None else _checks.positive_int(d, "d")
    if d < X.shape[1]:
        raise ValueError(f"d must be at least {X.shape[1]} (the rank of the Gram matrix) for "
                         f"rho = {rho:.4g}, got {d}")
    out = np.zeros((n, d))
    out[:, : X.shape[1]] = X
    return normalise(out)


def equiangular_solve(rho0: float, n: int, beta: float, model: str, times: ArrayLike, *,
                      rtol: float = 1e-11, atol: float = 1e-13) -> NDArray[np.float64]:
    r"""Solve :math:`\dot\rho = ` :func:`equiangular_rhs` from ``rho0`` at ``times[0]``.

    Uses SciPy's ``DOP853``; returns :math:`\rho` at ``times`` (shape ``(k,)``).

    Parameters
    ----------
    rho0 : float
        Initial common inner product, in :math:`[-1/(n-1), 1]`.
    n, beta, model
        As in :func:`equiangular_rhs`.
    times : array (k,)
        Increasing output times, from the initial one.
    rtol, atol : float
        Tolerances of the solver.

    Returns
    -------
    array (k,)

    Raises
    ------
    ValueError
        On malformed input.

    Examples
    --------
    >>> import numpy as np
    >>> t = np.array([0.0, 1.0, 2.0])  # n = 2, beta = 0, USA: rho' = 1 - rho^2
    >>> bool(np.allclose(equiangular_solve(0.0, 2, 0.0, "usa", t), np.tanh(t)))
    True

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    from scipy.integrate import solve_ivp

    t = _checks.real_array(times, "times")
    if t.ndim != 1 or t.size < 1 or not np.all(np.isfinite(t)) or np.any(np.diff(t) <= 0):
        raise ValueError("times must be a strictly increasing 1-D array of finite values")
    rho0 = _checks.finite_float(rho0, "rho0")
    rtol = _checks.positive_float(rtol, "rtol")
    atol = _checks.nonnegative_float(atol, "atol")
    equiangular_rhs(rho0, n, beta, model)  # validates every argument
    if t.size == 1:
        return np.array([float(rho0)])
    sol = solve_ivp(lambda _, r: [equiangular_rhs(min(r[0], 1.0), n, beta, model)],
                    (t[0], t[-1]), [float(rho0)], method="DOP853", t_eval=t, rtol=rtol,
                    atol=atol)
    return sol.y[0]


def equiangular_layers(rho0: float, n: int, beta: float, h: float, L: int,
                       model: str) -> NDArray[np.float64]:
    r"""Common inner product through ``L`` residual layers with layer normalisation.

    For an equiangular configuration (:math:`\langle x_i, x_j\rangle = \rho` for
    :math:`i \ne j`, :math:`Q = K = V = I`) the attention output is
    :math:`\Gamma_i = c_s x_i + c_o (S - x_i)`, :math:`S = \sum_j x_j`, with
    :math:`(c_s, c_o) = (e^{\beta}, e^{\beta\rho})/(e^{\beta} + (n-1)e^{\beta\rho})` for SA
    and :math:`(e^{\beta}, e^{\beta\rho})/n` for USA. The layer
    :func:`normalised_residual_stack` keeps the configuration equiangular, with
    :math:`x_i + h\Gamma_i = a x_i + bS`, :math:`a = 1 + h(c_s - c_o)`, :math:`b = hc_o`, so

    .. math::

        \rho' = \frac{a^2\rho + (2ab + b^2 n)\,s}{a^2 + (2ab + b^2 n)\,s},
        \qquad s = 1 + (n-1)\rho

    (derived in chapter 7, using :math:`\langle x_i, S\rangle = s` and :math:`|S|^2 = ns`;
    the setting is that of Geshkovski et al., 2025). Returns :math:`\rho` after
    ``0, 1, ..., L`` layers of step ``h`` (shape ``(L + 1,)``).

    Parameters
    ----------
    rho0 : float
        Initial common inner product.
    n : int
        Number of tokens, at least 2.
    beta : float
        Inverse temperature :math:`\beta \ge 0`.
    h : float
        Step of a layer, positive.
    L : int
        Number of layers.
    model : {"sa", "usa"}

    Returns
    -------
    array (L + 1,)

    Raises
    ------
    ValueError
        On malformed input.

    Examples
    --------
    See :func:`normalised_residual_stack`, which this reproduces on equiangular tokens.

    >>> rho = equiangular_layers(0.0, 4, 1.0, 0.1, 50, "sa")
    >>> bool(rho[0] == 0.0 and rho[-1] > rho[0])  # the tokens draw together
    True

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    model = _sphere.model(model)
    n = _n_tokens(n)
    beta = _sphere.beta(beta, allow_zero=True)
    h = _checks.positive_float(h, "h")
    L = _checks.positive_int(L, "L")
    rho0 = _checks.finite_float(rho0, "rho0")
    equiangular_rhs(rho0, n, beta, model)  # validates rho0
    out = np.empty(L + 1)
    rho = out[0] = float(rho0)
    for ell in range(L):
        if model == "sa":  # weights divided by e^beta, no overflow
            e = np.exp(beta * (rho - 1.0))
            c_s, c_o = 1.0 / (1.0 + (n - 1) * e), e / (1.0 + (n - 1) * e)
        else:
            if beta > MAX_LOGIT:
                raise ValueError(f"beta = {beta:g} > {MAX_LOGIT:g}: exp would overflow")
            c_s, c_o = np.exp(beta) / n, np.exp(beta * rho) / n
        a, b = 1.0 + h * (c_s - c_o), h * c_o
        s = 1.0 + (n - 1) * rho
        cross = (2.0 * a * b + b * b * n) * s
        rho = out[ell + 1] = min((a * a * rho + cross) / (a * a + cross), 1.0)
    return out


def equiangular_clustering_time(rho0: float, n: int, beta: float, model: str,
                                level: float = 1 - 1e-3, *, rtol: float = 1e-10,
                                atol: float = 1e-13) -> float:
    r"""First time at which the common inner product of an equiangular configuration reaches
    ``level``.

    Solves :math:`\dot\rho =` :func:`equiangular_rhs` from :math:`\rho(0) =` ``rho0`` with
    SciPy's ``DOP853`` and a terminal event at :math:`\rho = ` ``level``; returns that time
    (``inf`` if the configuration never gets there: :math:`\rho_0 = -1/(n-1)`, the simplex, is
    stationary). The time :math:`t^*` drawn on the phase diagrams of Geshkovski et al. (2025)
    for :math:`\rho_0 = 0`; along :math:`\beta = \gamma\log n` it grows like :math:`\log n`
    for :math:`\gamma < 1` and like a power of :math:`n` for :math:`\gamma > 1` (chapter 7).

    Parameters
    ----------
    rho0 : float
        Initial common inner product.
    n, beta, model
        As in :func:`equiangular_rhs`.
    level : float
        Target inner product, in :math:`(-1, 1)`.
    rtol, atol : float
        Tolerances of the solver.

    Returns
    -------
    float
        The time, ``0.0`` if ``rho0 >= level``, ``inf`` if never reached.

    Raises
    ------
    ValueError
        On malformed input.

    Examples
    --------
    >>> import numpy as np
    >>> t = equiangular_clustering_time(0.0, 2, 0.0, "usa", 0.5)  # rho = tanh(t)
    >>> bool(np.isclose(t, np.arctanh(0.5)))
    True

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    from scipy.integrate import solve_ivp

    rho0 = _checks.finite_float(rho0, "rho0")
    rtol = _checks.positive_float(rtol, "rtol")
    atol = _checks.nonnegative_float(atol, "atol")
    equiangular_rhs(rho0, n, beta, model)  # validates every argument
    level = _checks.finite_float(level, "level")
    if not (-1.0 < level < 1.0):
        raise ValueError(f"level must lie in (-1, 1), got {level!r}")
    rho0 = float(rho0)
    if rho0 >= level:
        return 0.0
    if equiangular_rhs(rho0, n, beta, model) <= 0.0:
        return float("inf")

    def reached(_, r):
        return r[0] - level

    reached.terminal = True  # type: ignore[attr-defined]  # solve_ivp reads event.terminal
    t_end = 1.0
    while True:  # the horizon is unknown in advance: double it until the event fires
        sol = solve_ivp(lambda _, r: [equiangular_rhs(min(r[0], 1.0), n, beta, model)],
                        (0.0, t_end), [rho0], method="DOP853", rtol=rtol, atol=atol,
                        events=reached)
        if sol.t_events[0].size:
            return float(sol.t_events[0][0])
        if t_end > 1e300:
            return float("inf")
        t_end *= 1e3


# ---------------------------------------------------------------------------------------------
# Measures on the sphere: quadrature, energy extrema on a grid, clusters
# ---------------------------------------------------------------------------------------------

def sphere_quadrature(m: int, d: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Nodes and weights of a quadrature for the uniform measure :math:`\sigma` on
    :math:`\mathbb S^{d-1}`, ``d`` = 2 or 3.

    ``d = 2``: ``m`` equally spaced angles, weights :math:`1/m` (exact for trigonometric
    polynomials of degree :math:`< m`). ``d = 3``: Gauss-Legendre in :math:`z` (``m`` nodes)
    times ``2m`` equally spaced longitudes (exact for polynomials of degree :math:`\le 2m-1`).
    Returns ``(points (N, d), weights (N,))``, the weights summing to one.

    Parameters
    ----------
    m : int
        Number of nodes (``d = 2``) or of latitudes (``d = 3``), positive.
    d : {2, 3}
        Dimension of the ambient space.

    Returns
    -------
    tuple (array (N, d), array (N,))
        Unit nodes and positive weights.

    Raises
    ------
    ValueError
        If ``m`` is not positive or ``d`` is not 2 or 3.

    Examples
    --------
    >>> import numpy as np
    >>> P, w = sphere_quadrature(4, 3)
    >>> bool(np.isclose(w.sum(), 1.0) and np.isclose(w @ P[:, 2] ** 2, 1 / 3))  # E z^2
    True
    """
    m = _checks.positive_int(m, "m")
    phi = 2 * np.pi * np.arange(m if d == 2 else 2 * m) / (m if d == 2 else 2 * m)
    if d == 2:
        return np.column_stack([np.cos(phi), np.sin(phi)]), np.full(m, 1.0 / m)
    if d != 3:
        raise ValueError(f"d must be 2 or 3, got {d!r}")
    z, wz = np.polynomial.legendre.leggauss(m)
    Z, P = np.meshgrid(z, phi, indexing="ij")
    r = np.sqrt(1.0 - Z**2)
    pts = np.column_stack([(r * np.cos(P)).ravel(), (r * np.sin(P)).ravel(), Z.ravel()])
    w = (np.repeat(wz / 2.0, phi.size) / phi.size)
    return normalise(pts), w


class MirrorDescentResult(tuple):
    """``(weights, energy, history, gap)`` of :func:`energy_mirror_descent`."""

    __slots__ = ()

    def __new__(cls, weights, energy, history, gap):
        return super().__new__(cls, (weights, energy, history, gap))

    weights = property(lambda self: self[0])
    energy = property(lambda self: self[1])
    history = property(lambda self: self[2])
    gap = property(lambda self: self[3])


def energy_mirror_descent(Y: ArrayLike, beta: float = 1.0, D: ArrayLike | None = None, *,
                          maximise: bool = False, steps: int = 2000, step_size: float | None = None,
                          weights0: ArrayLike | None = None
                          ) -> tuple[NDArray[np.float64], float, NDArray[np.float64], float]:
    r"""Extremise :func:`energy` over the weights of measures supported on the points ``Y``.

    Exponentiated-gradient (mirror) descent on the simplex for
    :math:`E(w) = \frac{1}{2\beta} w^\top K w`, :math:`K_{ij} = e^{\beta\langle y_i, D y_j\rangle}`:

    .. math::  w \leftarrow w \odot e^{\mp\eta\, K w/\beta} / \text{normalisation},

    (Kivinen and Warmuth, 1997), ``-`` to minimise, ``+`` with ``maximise=True``. The default
    step is :math:`\eta = \beta/\max_{ij} K_{ij}`, the inverse of the gradient's Lipschitz
    constant in the :math:`\ell^1` geometry; starts from uniform weights unless ``weights0``.

    Returns ``(weights, energy, history, gap)``: ``history`` is the energy at every step and
    ``gap`` the Frank-Wolfe gap :math:`\langle\nabla E, w\rangle - \min_i \partial_i E` (for a
    minimisation; :math:`\max_i \partial_i E - \langle\nabla E, w\rangle` for a maximisation).
    When :math:`E` is convex in :math:`w` (e.g. :math:`D \succeq 0`, where :math:`K` is a
    positive semidefinite matrix) the minimisation gap bounds :math:`E(w) - \min E` over
    measures on ``Y``.

    Parameters
    ----------
    Y : array (N, d)
        Support points.
    beta : float
        Inverse temperature :math:`\beta > 0`.
    D : array (d, d), optional
        Interaction matrix; the identity by default.
    maximise : bool
        Ascent instead of descent.
    steps : int
        Number of steps.
    step_size : float, optional
        :math:`\eta`; the default above.
    weights0 : array (N,), optional
        Starting weights (a probability vector); uniform by default.

    Returns
    -------
    tuple (array (N,), float, array (steps + 1,), float)
        ``(weights, energy, history, gap)``.

    Raises
    ------
    ValueError
        On malformed input.

    Examples
    --------
    >>> import numpy as np
    >>> Y = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    >>> w, E, history, gap = energy_mirror_descent(Y, 1.0)
    >>> bool(gap < 1e-8 and E <= history[0]), bool(np.isclose(E, energy(Y, 1.0, weights=w)))
    (True, True)

    References
    ----------
    :cite:`kivinen1997exponentiated,burger2025analysis`
    """
    Y = _checks.points(Y, "Y")
    n, d = Y.shape
    beta = _sphere.beta(beta)
    D = _sphere.interaction_matrix(D, d)
    steps = _checks.positive_int(steps, "steps")
    K = _sphere.exp_logits(beta * (Y @ D @ Y.T))
    eta = beta / float(K.max()) if step_size is None else _checks.positive_float(step_size,
                                                                                 "step_size")
    w = _checks.weights(weights0, n, "weights0").copy()
    sign = 1.0 if maximise else -1.0
    history = np.empty(steps + 1)
    for k in range(steps):
        g = K @ w / beta
        history[k] = 0.5 * w @ g
        logw = np.log(np.maximum(w, 1e-300)) + sign * eta * (g - g.max())
        w = np.exp(logw - logw.max())
        w /= w.sum()
    g = K @ w / beta
    history[-1] = 0.5 * w @ g
    gap = float(g.max() - w @ g) if maximise else float(w @ g - g.min())
    return MirrorDescentResult(w, float(history[-1]), history, gap)


def dirac_pair_threshold(lam_max: float, lam_min: float) -> float:
    r"""Inverse temperature where the balanced antipodal pair overtakes the Dirac mass.

    For a symmetric ``D`` of extreme eigenvalues :math:`\lambda_{\max}` and
    :math:`\lambda_{\min}`, the maximum of :func:`energy` over probability measures on the
    sphere is the larger of :math:`e^{\beta\lambda_{\max}}/(2\beta)` (a Dirac mass at a top
    eigenvector) and :math:`\cosh(\beta\lambda_{\min})/(2\beta)` (the balanced antipodal pair
    on a bottom eigenvector), as proved in chapter 7 (the setting is that of Burger, Kabri,
    Korolev, Roith and Weigand, 2025). Returns the
    :math:`\beta^* \ge 0` with :math:`\cosh(\beta^*\lambda_{\min}) = e^{\beta^*\lambda_{\max}}`,
    the pair winning for :math:`\beta > \beta^*`: ``0.0`` if :math:`\lambda_{\max} \le 0` (the
    pair always wins) and ``inf`` if :math:`|\lambda_{\min}| \le \lambda_{\max}` (the Dirac
    mass always wins).

    Parameters
    ----------
    lam_max, lam_min : float
        Largest and smallest eigenvalues of ``D``, ``lam_min <= lam_max``.

    Returns
    -------
    float
        :math:`\beta^*`, possibly ``0.0`` or ``inf``.

    Raises
    ------
    ValueError
        If an eigenvalue is not finite or ``lam_min > lam_max``.

    Examples
    --------
    >>> import numpy as np
    >>> b = dirac_pair_threshold(1.0, -2.0)
    >>> bool(b > 0 and np.isclose(np.cosh(2 * b), np.exp(b))), dirac_pair_threshold(1.0, -0.5)
    (True, inf)

    References
    ----------
    :cite:`burger2025analysis`
    """
    from scipy.optimize import brentq

    lam_max = _checks.finite_float(lam_max, "lam_max")
    lam_min = _checks.finite_float(lam_min, "lam_min")
    if not (np.isfinite(lam_max) and np.isfinite(lam_min)) or lam_min > lam_max:
        raise ValueError(f"need finite lam_min <= lam_max, got {lam_min!r} and {lam_max!r}")
    if lam_max <= 0:
        return 0.0
    L = abs(lam_min)
    if L <= lam_max:
        return float("inf")

    def f(b):  # log cosh(b L) - b lam_max, computed without overflow
        x = b * L
        return x + np.log1p(np.exp(-2 * x)) - np.log(2.0) - b * lam_max

    return float(brentq(f, lam_max / L**2, 2 * np.log(2.0) / (L - lam_max), xtol=1e-14,
                        rtol=1e-14))


def clustered_pair_fraction(X: ArrayLike,
                            threshold: float = 1 - 1e-3) -> float | NDArray[np.float64]:
    r"""Fraction of pairs :math:`i < j` with :math:`\langle x_i, x_j\rangle \ge` ``threshold``.

    ``X`` has shape (n, d) or (k, n, d) (a trajectory: one fraction per time). The quantity
    drawn in the phase diagrams of Geshkovski et al. (2025); the threshold is ours.

    Parameters
    ----------
    X : array (n, d) or (k, n, d)
        Unit tokens as rows, ``n >= 2``; or ``k`` configurations of them.
    threshold : float
        Inner product from which a pair counts as clustered.

    Returns
    -------
    float or array (k,)
        The fraction of the :math:`n(n-1)/2` pairs, per configuration.

    Raises
    ------
    ValueError
        If ``X`` is not a finite array of one of those shapes.

    Examples
    --------
    >>> X = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
    >>> round(float(clustered_pair_fraction(X)), 12)  # one pair of three
    0.333333333333

    References
    ----------
    :cite:`geshkovski2025mathematical`
    """
    arr = _checks.real_array(X, "X")
    threshold = _checks.finite_float(threshold, "threshold")
    if arr.ndim not in (2, 3) or arr.shape[-2] < 2 or not np.all(np.isfinite(arr)):
        raise ValueError(f"X must be a finite array (n, d) or (k, n, d) with n >= 2, got shape "
                         f"{arr.shape}")
    n = arr.shape[-2]
    iu = np.triu_indices(n, 1)
    G = np.einsum("...id,...jd->...ij", arr, arr)
    return (G[..., iu[0], iu[1]] >= threshold).mean(axis=-1)


def cluster_count(X: ArrayLike, radius: float) -> int:
    r"""Number of single-linkage clusters of the tokens at scale ``radius``.

    Connected components of the graph joining :math:`x_i` and :math:`x_j` when
    :math:`|x_i - x_j| <` ``radius``.

    Parameters
    ----------
    X : array (n, d)
        Tokens as rows.
    radius : float
        Linking distance, positive.

    Returns
    -------
    int
        The number of connected components.

    Raises
    ------
    ValueError
        If ``X`` is not a finite 2-D array or ``radius`` is not positive.

    Examples
    --------
    >>> cluster_count([[0.0, 0.0], [0.1, 0.0], [0.2, 0.0], [1.0, 0.0]], 0.15)  # a chain
    2
    """
    from scipy.sparse.csgraph import connected_components

    X = _checks.points(X, "X")
    radius = _checks.positive_float(radius, "radius")
    dist = np.linalg.norm(X[:, None, :] - X[None, :, :], axis=-1)
    return int(connected_components(dist < radius, directed=False)[0])
