r"""The moment equations of Gaussian solutions in closed form.

The affine fields :math:`\Gamma_\mu(x) = Mx + b` of softmax, L2, Sinkhorn and multi-head
attention at :math:`\mu = \mathcal N(\alpha, \Sigma)` (the ``*_field`` functions), the
right-hand sides :math:`(\dot\alpha, \dot\Sigma)` of the moment ODE (the ``*_rhs``
functions; each carries its affine field as ``rhs.affine_field`` for
:func:`~transformer_pde.gaussian.integrate_moments`), the closed-form solution of softmax
attention with :math:`V = I`, and the cone picture and Lyapunov functions of the chapter
"Gaussian initial data" (Castin, Ablin, Carrillo and Peyré, 2025).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import _checks
from .._linalg import psd_sqrt

# --------------------------------------------------------------------------------------
# affine fields and right-hand sides
# --------------------------------------------------------------------------------------

def affine_moments_rhs(M: ArrayLike, b: ArrayLike, alpha: ArrayLike,
                       Sigma: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Moments of the affine flow :math:`\dot x = M x + b` on :math:`\mathcal N(\alpha, \Sigma)`.

    .. math:: \dot\alpha = M\alpha + b, \qquad \dot\Sigma = M\Sigma + \Sigma M^\top.

    Returns ``(dalpha, dSigma)``; ``dSigma`` is exactly symmetric.

    Parameters
    ----------
    M : array (d, d)
        Linear part of the field.
    b : array (d,)
        Constant part of the field.
    alpha : array (d,)
        Mean of the Gaussian.
    Sigma : array (d, d)
        Covariance of the Gaussian.

    Returns
    -------
    dalpha : array (d,)
    dSigma : array (d, d)

    Raises
    ------
    ValueError
        If the shapes do not match (raised by NumPy's matrix product).

    Examples
    --------
    >>> import numpy as np
    >>> da, dS = affine_moments_rhs(np.eye(2), [1.0, 0.0], [1.0, 2.0], np.eye(2))
    >>> print(da.tolist(), dS.tolist())
    [2.0, 2.0] [[2.0, 0.0], [0.0, 2.0]]

    References
    ----------
    :cite:`castin2025unified`
    """
    alpha, b = _checks.real_array(alpha, "alpha"), _checks.real_array(b, "b")
    d = alpha.size
    for name, x, shape in (("alpha", alpha, (d,)), ("b", b, (d,))):
        if d < 1 or x.shape != shape or not np.all(np.isfinite(x)):
            raise ValueError(f"{name} must be a finite array of shape {shape}, got {x.shape}")
    M, Sigma = _checks.matrix(M, "M", shape=(d, d)), _checks.matrix(Sigma, "Sigma", shape=(d, d))
    MS = M @ Sigma
    return M @ alpha + b, MS + MS.T


def _symmetric_part(Sigma: ArrayLike) -> NDArray[np.float64]:
    r""":math:`(\Sigma + \Sigma^\top)/2` as a float64 array."""
    S = np.asarray(Sigma, dtype=np.float64)
    return 0.5 * (S + S.T)


def softmax_field(alpha: ArrayLike, Sigma: ArrayLike, A: ArrayLike,
                  V: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Affine softmax field on a Gaussian: :math:`\Gamma(x) = V(\alpha + \Sigma A x)`.

    The reweighted measure :math:`e^{\langle Ax, y\rangle}\mathcal N(\alpha,\Sigma)(dy)/Z` is
    :math:`\mathcal N(\alpha + \Sigma A x, \Sigma)` (completing the square), hence
    :math:`M = V\Sigma A`, :math:`b = V\alpha` (Castin et al., 2025). Returns ``(M, b)``.

    Parameters
    ----------
    alpha : array (d,)
        Mean of the Gaussian.
    Sigma : array (d, d)
        Covariance (symmetric positive semi-definite).
    A : array (d, d)
        Key-query matrix ``K.T @ Q``.
    V : array (d, d)
        Value matrix.

    Returns
    -------
    M : array (d, d)
        :math:`V\Sigma A`.
    b : array (d,)
        :math:`V\alpha`.

    Raises
    ------
    ValueError
        If ``Sigma`` is not a covariance or a shape does not match.

    Examples
    --------
    >>> import numpy as np
    >>> M, b = softmax_field([1.0, 0.0], np.diag([2.0, 1.0]), np.eye(2), 3 * np.eye(2))
    >>> print(M.tolist(), b.tolist())
    [[6.0, 0.0], [0.0, 3.0]] [3.0, 0.0]

    References
    ----------
    :cite:`castin2025unified`
    """
    alpha, Sigma = _checks.moments(alpha, Sigma)
    d = alpha.size
    return _softmax_Mb(alpha, Sigma, _checks.matrix(A, "A", shape=(d, d)),
                       _checks.matrix(V, "V", shape=(d, d)))


def _softmax_Mb(alpha, Sigma, A, V):
    return V @ Sigma @ A, V @ alpha


def softmax_rhs(alpha: ArrayLike, Sigma: ArrayLike, A: ArrayLike,
                V: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Moment ODE of softmax attention on :math:`\mathcal N(\alpha, \Sigma)`.

    .. math::

        \dot\alpha = V(I + \Sigma A)\alpha, \qquad
        \dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top \Sigma V^\top

    (Castin, Ablin, Carrillo and Peyré, 2025). ``A = K.T @ Q`` and ``V`` are ``(d, d)``.
    Returns ``(dalpha, dSigma)``.

    Parameters
    ----------
    alpha : array (d,)
        Mean of the Gaussian.
    Sigma : array (d, d)
        Covariance (symmetric positive semi-definite).
    A : array (d, d)
        Key-query matrix.
    V : array (d, d)
        Value matrix.

    Returns
    -------
    dalpha : array (d,)
    dSigma : array (d, d)

    Raises
    ------
    ValueError
        If ``Sigma`` is not a covariance or a shape does not match.

    Examples
    --------
    With :math:`V = A = I` and :math:`\Sigma = I`, :math:`\dot\alpha = 2\alpha` and
    :math:`\dot\Sigma = 2I`:

    >>> import numpy as np
    >>> da, dS = softmax_rhs([1.0, -1.0], np.eye(2), np.eye(2), np.eye(2))
    >>> print(da.tolist(), dS.tolist())
    [2.0, -2.0] [[2.0, 0.0], [0.0, 2.0]]

    References
    ----------
    :cite:`castin2025unified`
    """
    M, b = softmax_field(alpha, Sigma, A, V)
    return affine_moments_rhs(M, b, np.asarray(alpha, float), _symmetric_part(Sigma))


def l2_field(alpha: ArrayLike, Sigma: ArrayLike, Q: ArrayLike, K: ArrayLike,
             V: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Affine L2 field on a Gaussian.

    .. math:: \Gamma(x) = V(I + 2\Sigma K^\top K)^{-1}(\alpha + 2\Sigma A x).


    The reweighted measure :math:`e^{-|Qx - Ky|^2}\mathcal N(\alpha,\Sigma)(dy)/Z` has precision
    :math:`P = \Sigma^{-1} + 2K^\top K` and mean :math:`P^{-1}(\Sigma^{-1}\alpha + 2Ax)`,
    :math:`A = K^\top Q`; written with :math:`P^{-1} = (I + 2\Sigma K^\top K)^{-1}\Sigma` it also
    holds for singular :math:`\Sigma`. Kim et al. (2021); Castin et al. (2025). Returns ``(M, b)``.

    Parameters
    ----------
    alpha : array (d,)
        Mean of the Gaussian.
    Sigma : array (d, d)
        Covariance (symmetric positive semi-definite; singular allowed).
    Q, K : array (k, d)
        Query and key matrices.
    V : array (d, d)
        Value matrix.

    Returns
    -------
    M : array (d, d)
        :math:`2V(I + 2\Sigma K^\top K)^{-1}\Sigma K^\top Q`.
    b : array (d,)
        :math:`V(I + 2\Sigma K^\top K)^{-1}\alpha`.

    Raises
    ------
    ValueError
        If ``Sigma`` is not a covariance or a shape does not match.

    Examples
    --------
    With :math:`Q = K = V = I` and :math:`\Sigma = I`, :math:`(I + 2I)^{-1} = I/3`:

    >>> import numpy as np
    >>> M, b = l2_field([3.0, 0.0], np.eye(2), np.eye(2), np.eye(2), np.eye(2))
    >>> print((np.round(3 * M, 12) + 0.0).tolist(), (np.round(b, 12) + 0.0).tolist())
    [[2.0, 0.0], [0.0, 2.0]] [1.0, 0.0]

    References
    ----------
    :cite:`kim2021lipschitz,castin2025unified`
    """
    alpha, Sigma = _checks.moments(alpha, Sigma)
    d = alpha.size
    Q, K = _checks.query_key(Q, K, d)
    return _l2_Mb(alpha, Sigma, Q, K, _checks.matrix(V, "V", shape=(d, d)))


def _l2_Mb(alpha, Sigma, Q, K, V):
    d = alpha.size
    R = np.linalg.inv(np.eye(d) + 2.0 * Sigma @ (K.T @ K))  # (I + 2 Sigma K^T K)^{-1}
    return 2.0 * V @ R @ Sigma @ (K.T @ Q), V @ R @ alpha


def l2_rhs(alpha: ArrayLike, Sigma: ArrayLike, Q: ArrayLike, K: ArrayLike,
           V: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Moment ODE of L2 attention on :math:`\mathcal N(\alpha, \Sigma)`.

    .. math::

        \dot\alpha = V P^{-1}(\Sigma^{-1} + 2A)\alpha, \qquad
        \dot\Sigma = 2VP^{-1}A\Sigma + 2\Sigma A^\top P^{-1} V^\top, \qquad
        P = \Sigma^{-1} + 2K^\top K,

    (Castin et al., 2025; L2 attention of Kim et al., 2021), evaluated through
    :math:`P^{-1} = (I + 2\Sigma K^\top K)^{-1}\Sigma` so that singular :math:`\Sigma` is allowed.
    Returns ``(dalpha, dSigma)``.

    Parameters
    ----------
    alpha : array (d,)
        Mean of the Gaussian.
    Sigma : array (d, d)
        Covariance (symmetric positive semi-definite; singular allowed).
    Q, K : array (k, d)
        Query and key matrices.
    V : array (d, d)
        Value matrix.

    Returns
    -------
    dalpha : array (d,)
    dSigma : array (d, d)

    Raises
    ------
    ValueError
        If ``Sigma`` is not a covariance or a shape does not match.

    Examples
    --------
    With :math:`Q = K = V = I`, :math:`\Sigma = I`: :math:`P^{-1} = I/3`,
    :math:`\dot\alpha = \alpha` and :math:`\dot\Sigma = \tfrac43 I`:

    >>> import numpy as np
    >>> da, dS = l2_rhs([3.0, 0.0], np.eye(2), np.eye(2), np.eye(2), np.eye(2))
    >>> print((np.round(da, 12) + 0.0).tolist(), (np.round(3 * dS, 12) + 0.0).tolist())
    [3.0, 0.0] [[4.0, 0.0], [0.0, 4.0]]

    References
    ----------
    :cite:`kim2021lipschitz,castin2025unified`
    """
    M, b = l2_field(alpha, Sigma, Q, K, V)
    return affine_moments_rhs(M, b, np.asarray(alpha, float), _symmetric_part(Sigma))


def _sinkhorn_M(Sigma, A, V, epsilon):
    r""":math:`M = 2cV\Sigma^{1/2}(I + (I + 4c^2 BB^\top)^{1/2})^{-1}\Sigma^{1/2}A`, c = 2/eps."""
    c = 2.0 / epsilon
    S12 = psd_sqrt(Sigma)
    B = S12 @ A @ S12
    lam, U = np.linalg.eigh(B @ B.T)
    lam = np.clip(lam, 0.0, None)
    middle = (U / (1.0 + np.sqrt(1.0 + 4.0 * c * c * lam))) @ U.T
    return 2.0 * c * V @ S12 @ middle @ S12 @ A


def sinkhorn_plan_cross_covariance(Sigma: ArrayLike, Q: ArrayLike, K: ArrayLike, *,
                                   epsilon: float = 1.0) -> NDArray[np.float64]:
    r"""Cross-covariance :math:`C = \mathrm{Cov}_\pi(x, y)` of the entropic self-plan of a Gaussian.

    The plan of cost :math:`|Qx - Ky|^2` and regularisation :math:`\varepsilon` (kernel
    :math:`e^{-|Qx-Ky|^2/\varepsilon}`) is the Gaussian
    :math:`\mathcal N\big((\alpha,\alpha), [[\Sigma, C], [C^\top, \Sigma]]\big)` with

    .. math::

        C = \Sigma^{1/2} G \Sigma^{1/2}, \quad
        G = 2c\,B^\top\big(I + (I + 4c^2 BB^\top)^{1/2}\big)^{-1},
        \quad B = \Sigma^{1/2} A \Sigma^{1/2},\ c = 2/\varepsilon,

    the solution of :math:`G(I - G^\top G)^{-1} = c\,B^\top` (the off-diagonal block of the
    joint precision must be :math:`-cA^\top`). Closed forms of Gaussian entropic transport:
    Janati et al. (2020), Mallasto et al. (2022). ``Q``, ``K`` are ``(k, d)``.

    Parameters
    ----------
    Sigma : array (d, d)
        Covariance of the Gaussian (symmetric positive semi-definite).
    Q, K : array (k, d)
        Query and key matrices.
    epsilon : float, optional
        Regularisation :math:`\varepsilon > 0`.

    Returns
    -------
    array (d, d)
        The cross-covariance :math:`C`.

    Raises
    ------
    ValueError
        If ``Sigma`` is not a covariance, a shape does not match or ``epsilon`` is not positive.

    Examples
    --------
    In :math:`d = 1` with :math:`\Sigma = Q = K = 1`, :math:`\varepsilon = 1`: :math:`c = 2`,
    :math:`B = 1`, :math:`C = 4/(1 + \sqrt{17})`:

    >>> import numpy as np
    >>> C = sinkhorn_plan_cross_covariance([[1.0]], [[1.0]], [[1.0]])
    >>> print(bool(abs(C[0, 0] - 4 / (1 + np.sqrt(17))) < 1e-12))
    True

    References
    ----------
    :cite:`janati2020entropic,mallasto2022entropy,castin2025unified`
    """
    Sigma = _checks.covariance(Sigma, "Sigma")
    Q, K = _checks.query_key(Q, K, Sigma.shape[0])
    epsilon = _checks.positive_float(epsilon, "epsilon")
    c = 2.0 / epsilon
    A = K.T @ Q
    S12 = psd_sqrt(Sigma)
    B = S12 @ A @ S12
    lam, U = np.linalg.eigh(B @ B.T)
    lam = np.clip(lam, 0.0, None)
    G = 2.0 * c * B.T @ ((U / (1.0 + np.sqrt(1.0 + 4.0 * c * c * lam))) @ U.T)
    return S12 @ G @ S12


def sinkhorn_field(alpha: ArrayLike, Sigma: ArrayLike, Q: ArrayLike, K: ArrayLike, V: ArrayLike,
                   epsilon: float = 1.0) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Affine Sinkhorn field on a Gaussian.

    .. math:: \Gamma(x) = V\,\mathbb E_\pi[y \mid x] = V\alpha + M(x - \alpha).


    :math:`\pi` is the entropic optimal transport plan (cost :math:`|Qx - Ky|^2`,
    regularisation :math:`\varepsilon`, i.e. the Sinkhorn limit of
    :math:`e^{-|Qx-Ky|^2/\varepsilon}`)
    from :math:`\mathcal N(\alpha,\Sigma)` to itself (Sander et al., 2022). It is Gaussian with
    cross-covariance :math:`C` (:func:`sinkhorn_plan_cross_covariance`), so
    :math:`M = VC^\top\Sigma^{-1}`, which simplifies, with :math:`c = 2/\varepsilon`,
    :math:`B = \Sigma^{1/2}A\Sigma^{1/2}`, to

    .. math::

        M = 2c\,V\Sigma^{1/2}\big(I + (I + 4c^2 BB^\top)^{1/2}\big)^{-1}\Sigma^{1/2}A,

    valid for every PSD :math:`\Sigma` and every :math:`A` (no inverse needed). Janati et al.
    (2020), Mallasto et al. (2022), Castin et al. (2025). Returns ``(M, b)`` with
    :math:`b = (V - M)\alpha`.

    Parameters
    ----------
    alpha : array (d,)
        Mean of the Gaussian.
    Sigma : array (d, d)
        Covariance (symmetric positive semi-definite).
    Q, K : array (k, d)
        Query and key matrices.
    V : array (d, d)
        Value matrix.
    epsilon : float, optional
        Regularisation :math:`\varepsilon > 0`.

    Returns
    -------
    M : array (d, d)
    b : array (d,)
        :math:`(V - M)\alpha`.

    Raises
    ------
    ValueError
        If ``Sigma`` is not a covariance, a shape does not match or ``epsilon`` is not positive.

    Examples
    --------
    The slope is :math:`VC^\top\Sigma^{-1}` with :math:`C` of
    :func:`sinkhorn_plan_cross_covariance`:

    >>> import numpy as np
    >>> Sigma = np.array([[2.0, 0.5], [0.5, 1.0]])
    >>> Q, K, V = np.eye(2), np.array([[1.0, 0.3], [0.0, 1.0]]), np.eye(2)
    >>> M, b = sinkhorn_field([1.0, 0.0], Sigma, Q, K, V)
    >>> C = sinkhorn_plan_cross_covariance(Sigma, Q, K)
    >>> print(bool(np.allclose(M, C.T @ np.linalg.inv(Sigma), atol=1e-12)))
    True

    References
    ----------
    :cite:`sander2022sinkformers,janati2020entropic,mallasto2022entropy,castin2025unified`
    """
    alpha, Sigma = _checks.moments(alpha, Sigma)
    d = alpha.size
    Q, K = _checks.query_key(Q, K, d)
    V = _checks.matrix(V, "V", shape=(d, d))
    epsilon = _checks.positive_float(epsilon, "epsilon")
    return _sinkhorn_Mb(alpha, Sigma, Q, K, V, epsilon)


def _sinkhorn_Mb(alpha, Sigma, Q, K, V, epsilon=1.0):
    M = _sinkhorn_M(Sigma, K.T @ Q, V, float(epsilon))
    return M, V @ alpha - M @ alpha


def sinkhorn_rhs(alpha: ArrayLike, Sigma: ArrayLike, Q: ArrayLike, K: ArrayLike, V: ArrayLike,
                 epsilon: float = 1.0) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Moment ODE of Sinkhorn attention on :math:`\mathcal N(\alpha, \Sigma)`.

    .. math::

        \dot\alpha = V\alpha, \qquad \dot\Sigma = M\Sigma + \Sigma M^\top, \qquad
        M = 2c\,V\Sigma^{1/2}\big(I + (I + 4c^2 BB^\top)^{1/2}\big)^{-1}\Sigma^{1/2}A,

    :math:`B = \Sigma^{1/2}A\Sigma^{1/2}`, :math:`c = 2/\varepsilon` (``epsilon=1`` is the
    kernel :math:`e^{-|Qx-Ky|^2}` of :func:`transformer_pde.attention.sinkhorn`). The mean moves
    as :math:`V\alpha` because the plan's second marginal is :math:`\mu` itself. See
    :func:`sinkhorn_field`; Sander et al. (2022), Janati et al. (2020), Castin et al. (2025).
    Returns ``(dalpha, dSigma)``.

    Parameters
    ----------
    alpha : array (d,)
        Mean of the Gaussian.
    Sigma : array (d, d)
        Covariance (symmetric positive semi-definite).
    Q, K : array (k, d)
        Query and key matrices.
    V : array (d, d)
        Value matrix.
    epsilon : float, optional
        Regularisation :math:`\varepsilon > 0`.

    Returns
    -------
    dalpha : array (d,)
    dSigma : array (d, d)

    Raises
    ------
    ValueError
        If ``Sigma`` is not a covariance, a shape does not match or ``epsilon`` is not positive.

    Examples
    --------
    >>> import numpy as np
    >>> da, dS = sinkhorn_rhs([1.0, 2.0], np.eye(2), np.eye(2), np.eye(2), 2 * np.eye(2))
    >>> print((np.round(da, 12) + 0.0).tolist())
    [2.0, 4.0]
    >>> print(bool(abs(dS[0, 0] - 16 / (1 + np.sqrt(17))) < 1e-12))
    True

    References
    ----------
    :cite:`sander2022sinkformers,janati2020entropic,castin2025unified`
    """
    M, b = sinkhorn_field(alpha, Sigma, Q, K, V, epsilon=epsilon)
    return affine_moments_rhs(M, b, np.asarray(alpha, float), _symmetric_part(Sigma))


def sinkhorn_rhs_published(Sigma: ArrayLike, Q: ArrayLike, K: ArrayLike,
                           V: ArrayLike) -> NDArray[np.float64]:
    r"""The covariance ODE of Sinkhorn attention as computed by the authors' public code.

    .. math::

        C_\Sigma = \tfrac12\big(\Sigma^{1/2}(I + 4\Sigma^{1/2}A^\top\Sigma A\Sigma^{1/2})^{1/2}
        \Sigma^{-1/2} - I\big), \qquad
        \dot\Sigma = VA^{-\top}\Sigma^{-1}C_\Sigma\Sigma + (\cdot)^\top,

    with :math:`A = K^\top Q` (Castin et al., 2025, public code). It needs :math:`A` and
    :math:`\Sigma` invertible (``ValueError`` otherwise). It equals :func:`sinkhorn_rhs` with
    ``epsilon=2`` (kernel :math:`e^{-|Qx-Ky|^2/2}`, which has the same Sinkhorn limit as the
    dot-product kernel :math:`e^{\langle Ax, y\rangle}`: the factors
    :math:`e^{-|Qx|^2/2}`, :math:`e^{-|Ky|^2/2}` are absorbed by the normalisations), not
    ``epsilon=1``: see the chapter "Gaussian initial data". Returns ``dSigma``.

    Parameters
    ----------
    Sigma : array (d, d)
        Covariance, symmetric positive definite.
    Q, K : array (k, d)
        Query and key matrices, with :math:`K^\top Q` invertible.
    V : array (d, d)
        Value matrix.

    Returns
    -------
    array (d, d)
        ``dSigma``.

    Raises
    ------
    ValueError
        If ``Sigma`` or :math:`K^\top Q` is not invertible (condition number above
        :math:`10^{12}`), or a shape does not match.

    Examples
    --------
    It agrees with :func:`sinkhorn_rhs` at ``epsilon=2``:

    >>> import numpy as np
    >>> Sigma = np.array([[2.0, 0.5], [0.5, 1.0]])
    >>> Q, K, V = np.eye(2), np.array([[1.0, 0.3], [0.0, 1.0]]), np.diag([1.0, 2.0])
    >>> dS = sinkhorn_rhs_published(Sigma, Q, K, V)
    >>> ref = sinkhorn_rhs([0.0, 0.0], Sigma, Q, K, V, epsilon=2.0)[1]
    >>> print(bool(np.allclose(dS, ref, atol=1e-10)))
    True

    References
    ----------
    :cite:`castin2025unified`
    """
    Sigma = _checks.covariance(Sigma, "Sigma")
    d = Sigma.shape[0]
    Q, K = _checks.query_key(Q, K, d)
    V = _checks.matrix(V, "V", shape=(d, d))
    A = K.T @ Q
    for M, name in ((A, "K.T @ Q"), (Sigma, "Sigma")):
        if np.linalg.cond(M) > 1e12:
            raise ValueError(f"{name} must be invertible for the published formula")
    S12 = psd_sqrt(Sigma)
    S12_inv = np.linalg.inv(S12)
    inner = psd_sqrt(np.eye(d) + 4.0 * S12 @ A.T @ Sigma @ A @ S12)
    C = 0.5 * (S12 @ inner @ S12_inv - np.eye(d))
    term = V @ np.linalg.solve(A.T, np.linalg.solve(Sigma, C @ Sigma))
    return term + term.T


def multihead_field(alpha: ArrayLike, Sigma: ArrayLike, As: ArrayLike,
                    Vs: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Affine multi-head softmax field: :math:`\Gamma(x) = \sum_h V_h(\alpha + \Sigma A_h x)`.

    :math:`M = \sum_h V_h\Sigma A_h`, :math:`b = \sum_h V_h\alpha` (output projections folded into
    :math:`V_h`, as in :func:`transformer_pde.attention.multihead`). Castin et al. (2025).
    ``As`` and ``Vs`` have shape ``(H, d, d)``. Returns ``(M, b)``.

    Parameters
    ----------
    alpha : array (d,)
        Mean of the Gaussian.
    Sigma : array (d, d)
        Covariance (symmetric positive semi-definite).
    As : array (H, d, d)
        Key-query matrices of the heads.
    Vs : array (H, d, d)
        Value matrices of the heads (output projection included).

    Returns
    -------
    M : array (d, d)
    b : array (d,)

    Raises
    ------
    ValueError
        If ``Sigma`` is not a covariance, a shape does not match or the head counts differ.

    Examples
    --------
    Two heads add up:

    >>> import numpy as np
    >>> As = np.stack([np.eye(2), 2 * np.eye(2)])
    >>> Vs = np.stack([np.eye(2), np.eye(2)])
    >>> M, b = multihead_field([1.0, 0.0], np.eye(2), As, Vs)
    >>> print(M.tolist(), b.tolist())
    [[3.0, 0.0], [0.0, 3.0]] [2.0, 0.0]

    References
    ----------
    :cite:`castin2025unified`
    """
    alpha, Sigma = _checks.moments(alpha, Sigma)
    d = alpha.size
    As = _checks.stack(As, "As", cols=d)
    Vs = _checks.stack(Vs, "Vs", cols=d)
    if As.shape[1] != d or Vs.shape[1] != d:
        raise ValueError(f"As and Vs must have shape (H, {d}, {d}), got {As.shape} and {Vs.shape}")
    if As.shape[0] != Vs.shape[0]:
        raise ValueError(f"As and Vs must have the same number of heads, got {As.shape[0]} "
                         f"and {Vs.shape[0]}")
    return _multihead_Mb(alpha, Sigma, As, Vs)


def _multihead_Mb(alpha, Sigma, As, Vs):
    M = np.einsum("hij,jk,hkl->il", Vs, Sigma, As)
    return M, Vs.sum(axis=0) @ alpha


def multihead_rhs(alpha: ArrayLike, Sigma: ArrayLike, As: ArrayLike,
                  Vs: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Moment ODE of multi-head softmax attention: the sum of the heads' terms.

    .. math::

        \dot\alpha = \sum_h V_h(I + \Sigma A_h)\alpha, \qquad
        \dot\Sigma = \sum_h \big(V_h\Sigma A_h\Sigma + \Sigma A_h^\top\Sigma V_h^\top\big)

    (Castin et al., 2025). Returns ``(dalpha, dSigma)``.

    Parameters
    ----------
    alpha : array (d,)
        Mean of the Gaussian.
    Sigma : array (d, d)
        Covariance (symmetric positive semi-definite).
    As, Vs : array (H, d, d)
        Key-query and value matrices of the heads.

    Returns
    -------
    dalpha : array (d,)
    dSigma : array (d, d)

    Raises
    ------
    ValueError
        If ``Sigma`` is not a covariance, a shape does not match or the head counts differ.

    Examples
    --------
    One head is :func:`softmax_rhs`:

    >>> import numpy as np
    >>> A, V = np.array([[1.0, 0.5], [0.0, -1.0]]), np.array([[1.0, 0.0], [1.0, 1.0]])
    >>> a, S = [1.0, 2.0], np.array([[2.0, 0.5], [0.5, 1.0]])
    >>> one = multihead_rhs(a, S, A[None], V[None])
    >>> ref = softmax_rhs(a, S, A, V)
    >>> print(all(bool(np.allclose(x, y, atol=1e-12)) for x, y in zip(one, ref)))
    True

    References
    ----------
    :cite:`castin2025unified`
    """
    M, b = multihead_field(alpha, Sigma, As, Vs)
    return affine_moments_rhs(M, b, np.asarray(alpha, float), _symmetric_part(Sigma))


# attach the affine fields so that integrate_moments can integrate a factor of Sigma
# (``_unchecked_field``: the same map without input validation, for the solver's inner loop)
for _rhs, _field, _fast in ((softmax_rhs, softmax_field, _softmax_Mb),
                            (l2_rhs, l2_field, _l2_Mb),
                            (sinkhorn_rhs, sinkhorn_field, _sinkhorn_Mb),
                            (multihead_rhs, multihead_field, _multihead_Mb)):
    # the rhs.affine_field protocol of integrate_moments: attributes of a function, which
    # mypy cannot declare
    _rhs.affine_field = _field  # type: ignore[union-attr]
    _rhs._unchecked_field = _fast  # type: ignore[union-attr]
del _rhs, _field, _fast


# --------------------------------------------------------------------------------------
# closed forms for V = I, softmax
# --------------------------------------------------------------------------------------

def _sym_part(A, d):
    A = _checks.matrix(A, "A", shape=(d, d))
    return 0.5 * (A + A.T)


def softmax_identity_blowup_time(Sigma0: ArrayLike, A: ArrayLike) -> float:
    r"""Blow-up time of :math:`\dot\Sigma = 2\Sigma A_s\Sigma` (softmax, :math:`V = I`).

    .. math::

        t^* = \frac{1}{2\lambda_{\max}(\Sigma_0^{1/2} A_s \Sigma_0^{1/2})}, \qquad
        A_s = \tfrac12(A + A^\top),

    and :math:`t^* = +\infty` when :math:`\lambda_{\max} \le 0` (up to a relative
    :math:`10^{-12}`) (Castin et al., 2025). Follows from
    :math:`\frac{d}{dt}\Sigma^{-1} = -2A_s`.

    Parameters
    ----------
    Sigma0 : array (d, d)
        Initial covariance (symmetric positive semi-definite).
    A : array (d, d)
        Key-query matrix.

    Returns
    -------
    float
        :math:`t^*`, possibly ``inf``.

    Raises
    ------
    ValueError
        If ``Sigma0`` is not a covariance or ``A`` has the wrong shape.

    Examples
    --------
    >>> import numpy as np
    >>> print(f"{softmax_identity_blowup_time(np.eye(2), np.diag([2.0, -1.0])):.9f}")
    0.250000000
    >>> print(softmax_identity_blowup_time(np.eye(2), -np.eye(2)))
    inf

    References
    ----------
    :cite:`castin2025unified`
    """
    Sigma0 = _checks.covariance(Sigma0, "Sigma0")
    S12 = psd_sqrt(Sigma0)
    lams = np.linalg.eigvalsh(S12 @ _sym_part(A, Sigma0.shape[0]) @ S12)
    lam = lams[-1]
    # rounding makes a zero eigenvalue ~1e-17: treat |lam| <= 1e-12 |lams|_max as zero
    return np.inf if lam <= 1e-12 * np.abs(lams).max() else 1.0 / (2.0 * lam)


def softmax_identity_covariance(Sigma0: ArrayLike, A: ArrayLike,
                                t: ArrayLike) -> NDArray[np.float64]:
    r"""Closed form :math:`\Sigma(t) = (\Sigma_0^{-1} - 2tA_s)^{-1}` of softmax attention, V = I.

    Written as :math:`\Sigma_0^{1/2}(I - 2t\Sigma_0^{1/2}A_s\Sigma_0^{1/2})^{-1}\Sigma_0^{1/2}`,
    which
    also holds for singular :math:`\Sigma_0`. ``t`` may be a scalar or an array of times
    ``(k,)`` (returns ``(k, d, d)``); times at or beyond the blow-up time raise ``ValueError``.
    Castin et al. (2025).

    Parameters
    ----------
    Sigma0 : array (d, d)
        Initial covariance (symmetric positive semi-definite).
    A : array (d, d)
        Key-query matrix.
    t : float or array (k,)
        Times, finite and below the blow-up time.

    Returns
    -------
    array (d, d) or (k, d, d)

    Raises
    ------
    ValueError
        If ``Sigma0`` is not a covariance, ``t`` is not finite or reaches the blow-up time
        (:func:`softmax_identity_blowup_time`).

    Examples
    --------
    With :math:`\Sigma_0 = I` and :math:`A = \mathrm{diag}(1, -1)`, :math:`\Sigma(t) =
    \mathrm{diag}(1/(1 - 2t), 1/(1 + 2t))`:

    >>> import numpy as np
    >>> S = softmax_identity_covariance(np.eye(2), np.diag([1.0, -1.0]), [0.0, 0.25])
    >>> print((np.round(S, 12) + 0.0).tolist())
    [[[1.0, 0.0], [0.0, 1.0]], [[2.0, 0.0], [0.0, 0.666666666667]]]

    References
    ----------
    :cite:`castin2025unified`
    """
    Sigma0 = _checks.covariance(Sigma0, "Sigma0")
    d = Sigma0.shape[0]
    S12 = psd_sqrt(Sigma0)
    N = S12 @ _sym_part(A, d) @ S12
    ts = np.asarray(t, dtype=np.float64)
    if not np.all(np.isfinite(ts)):
        raise ValueError("t must be finite")
    t_star = softmax_identity_blowup_time(Sigma0, A)
    if np.any(ts >= t_star):
        raise ValueError(f"t must be below the blow-up time t* = {t_star:.6g}")
    lam, U = np.linalg.eigh(N)
    denom = 1.0 - 2.0 * ts[..., None] * lam  # (..., d)
    W = S12 @ U
    return np.einsum("ij,...j,kj->...ik", W, 1.0 / denom, W)


def softmax_identity_limit(Sigma0: ArrayLike, A: ArrayLike, *,
                           rank_tol: float = 1e-10) -> NDArray[np.float64]:
    r"""Limit :math:`\lim_{t\to\infty}(\Sigma_0^{-1} - 2tA_s)^{-1}` when :math:`A_s = -P \preceq 0`.

    .. math::

        \Sigma_\infty = \Sigma_0^{1/2}\,\Pi_{\ker(\Sigma_0^{1/2}P\Sigma_0^{1/2})}\,\Sigma_0^{1/2},

    of rank :math:`d - \mathrm{rank}(P)` when :math:`\Sigma_0 \succ 0` (the clustering effect,
    Castin et al., 2025). ``ValueError`` if :math:`A_s` has a positive eigenvalue (then the
    solution blows up in finite time).

    Parameters
    ----------
    Sigma0 : array (d, d)
        Initial covariance (symmetric positive semi-definite).
    A : array (d, d)
        Key-query matrix with negative semi-definite symmetric part.
    rank_tol : float, optional
        Relative tolerance below which an eigenvalue counts as zero.

    Returns
    -------
    array (d, d)
        :math:`\Sigma_\infty`.

    Raises
    ------
    ValueError
        If :math:`A_s` has a positive eigenvalue, ``Sigma0`` is not a covariance or ``A`` has the
        wrong shape.

    Examples
    --------
    With :math:`A_s = -\mathrm{diag}(1, 0)` the first direction collapses:

    >>> import numpy as np
    >>> S = softmax_identity_limit(np.array([[2.0, 0.0], [0.0, 3.0]]), np.diag([-1.0, 0.0]))
    >>> print((np.round(S, 12) + 0.0).tolist())
    [[0.0, 0.0], [0.0, 3.0]]

    References
    ----------
    :cite:`castin2025unified`
    """
    Sigma0 = _checks.covariance(Sigma0, "Sigma0")
    rank_tol = _checks.nonnegative_float(rank_tol, "rank_tol")
    d = Sigma0.shape[0]
    As = _sym_part(A, d)
    lam_A = np.linalg.eigvalsh(As)
    if lam_A[-1] > rank_tol * max(1.0, abs(lam_A[0])):
        raise ValueError("A must have a negative semi-definite symmetric part (A_s = -P)")
    S12 = psd_sqrt(Sigma0)
    lam, U = np.linalg.eigh(S12 @ (-As) @ S12)
    kernel = U[:, lam <= rank_tol * max(lam[-1], 1e-300)]
    W = S12 @ kernel
    return W @ W.T




def cone_coordinates(Sigma: ArrayLike) -> NDArray[np.float64]:
    r"""The point :math:`(a - b,\ 2c,\ a + b)` of a :math:`2\times 2` covariance
    :math:`\left[\begin{smallmatrix} a & c\\ c & b\end{smallmatrix}\right]`.

    The authors of Castin et al. (2025) draw :math:`d = 2` covariance trajectories this way:
    :math:`\Sigma \succeq 0` iff :math:`a + b \ge \sqrt{(a - b)^2 + 4c^2}`, so the cone of
    covariance matrices is the Lorentz cone and rank-one matrices are its surface. ``Sigma``
    has shape ``(..., 2, 2)``; returns ``(..., 3)``.

    Parameters
    ----------
    Sigma : array (..., 2, 2)
        Covariance matrices.

    Returns
    -------
    array (..., 3)
        :math:`(a - b, 2c, a + b)` (the off-diagonal entries are added, so a non-symmetric input
        gives :math:`c_{12} + c_{21}`).

    Raises
    ------
    ValueError
        If the last two axes are not ``(2, 2)``.

    Examples
    --------
    >>> import numpy as np
    >>> print(cone_coordinates(np.array([[3.0, 1.0], [1.0, 2.0]])).tolist())
    [1.0, 2.0, 5.0]

    References
    ----------
    :cite:`castin2025unified`
    """
    S = _checks.real_array(Sigma, "Sigma")
    if S.ndim < 2 or S.shape[-2:] != (2, 2) or not np.all(np.isfinite(S)):
        raise ValueError(f"Sigma must be a finite array of shape (..., 2, 2), got {S.shape}")
    return np.stack([S[..., 0, 0] - S[..., 1, 1], S[..., 0, 1] + S[..., 1, 0],
                     S[..., 0, 0] + S[..., 1, 1]], axis=-1)


def covariance_from_cone(u: float, w: float, v: float) -> NDArray[np.float64]:
    r"""Inverse of :func:`cone_coordinates`: the symmetric matrix
    :math:`\tfrac12\left[\begin{smallmatrix} v + u & w\\ w & v - u\end{smallmatrix}\right]`
    (positive semi-definite iff :math:`v \ge \sqrt{u^2 + w^2}`).

    Parameters
    ----------
    u, w, v : float
        Cone coordinates.

    Returns
    -------
    array (2, 2)

    Raises
    ------
    ValueError
        If a coordinate is not finite.

    Examples
    --------
    >>> print(covariance_from_cone(1.0, 2.0, 5.0).tolist())
    [[3.0, 1.0], [1.0, 2.0]]

    References
    ----------
    :cite:`castin2025unified`
    """
    u, w, v = (_checks.finite_float(z, name) for z, name in ((u, "u"), (w, "w"), (v, "v")))
    if not np.all(np.isfinite([u, w, v])):
        raise ValueError("u, w, v must be finite")
    return np.array([[(v + u) / 2, w / 2], [w / 2, (v - u) / 2]])


def softmax_lyapunov(Sigma: ArrayLike, V: ArrayLike) -> NDArray[np.float64]:
    r"""The Lyapunov function :math:`\operatorname{tr}(V^{-1}\Sigma)` of softmax attention.

    For :math:`V` symmetric positive definite and :math:`A_s = \tfrac12(A + A^\top) = -P
    \preceq 0`, along :math:`\dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top\Sigma V`,

    .. math::

        \frac{d}{dt}\operatorname{tr}(V^{-1}\Sigma) = 2\operatorname{tr}(\Sigma A_s\Sigma)
        = -2\|P^{1/2}\Sigma\|_F^2 \le 0

    (derived in the chapter "Gaussian initial data" on the ODE of Castin et al., 2025; the
    first equality uses :math:`V^\top = V`). ``Sigma`` has shape ``(..., d, d)``; returns
    shape ``Sigma.shape[:-2]``. ``ValueError`` unless ``V`` is symmetric positive definite.

    Parameters
    ----------
    Sigma : array (..., d, d)
        Covariances.
    V : array (d, d)
        Value matrix, symmetric positive definite.

    Returns
    -------
    array
        :math:`\operatorname{tr}(V^{-1}\Sigma)`, of shape ``Sigma.shape[:-2]`` (a 0-d array for
        a single ``(d, d)`` covariance).

    Raises
    ------
    ValueError
        If ``Sigma`` is not ``(..., d, d)`` or ``V`` is not symmetric positive definite.

    Examples
    --------
    >>> import numpy as np
    >>> print(f"{float(softmax_lyapunov(np.diag([2.0, 4.0]), np.diag([2.0, 1.0]))):.9f}")
    5.000000000

    References
    ----------
    :cite:`castin2025unified`
    """
    S = _checks.real_array(Sigma, "Sigma")
    if S.ndim < 2 or S.shape[-1] != S.shape[-2] or not np.all(np.isfinite(S)):
        raise ValueError(f"Sigma must be a finite array of shape (..., d, d), got {S.shape}")
    d = S.shape[-1]
    V = _checks.matrix(V, "V", shape=(d, d))
    if np.linalg.norm(V - V.T) > _checks.SYMMETRY_TOL * np.linalg.norm(V):
        raise ValueError("V must be symmetric (the Lyapunov identity needs V = V^T)")
    lam = np.linalg.eigvalsh(V)
    if lam[0] <= 0:
        raise ValueError(f"V must be positive definite, got smallest eigenvalue {lam[0]:.3g}")
    return np.einsum("ij,...ji->...", np.linalg.inv(V), S)


def l2_growth_rate_bound(Q: ArrayLike, K: ArrayLike, V: ArrayLike) -> float:
    r"""A rate :math:`c` with :math:`\operatorname{tr}\Sigma(t) \le e^{2ct}\operatorname{tr}
    \Sigma_0` for L2 attention, :math:`K` square and invertible.

    .. math::

        c = \frac{\|V\|_2\,\|K^\top Q\|_2}{\sigma_{\min}(K)^2}.

    The L2 field is affine with :math:`M = 2VP^{-1}A`, :math:`P = \Sigma^{-1} + 2K^\top K
    \succeq 2K^\top K`, so :math:`\|M\|_2 \le c` whatever :math:`\Sigma`, and
    :math:`\frac{d}{dt}\operatorname{tr}\Sigma = 2\operatorname{tr}(M\Sigma) \le
    2c\operatorname{tr}\Sigma`: no finite-time blow-up, the global existence stated on the
    poster of Castin et al. (2025) (derived here for invertible :math:`K`).

    Parameters
    ----------
    Q : array (d, d)
        Query matrix.
    K : array (d, d)
        Key matrix, square and invertible.
    V : array (d, d)
        Value matrix.

    Returns
    -------
    float
        The rate :math:`c`.

    Raises
    ------
    ValueError
        If ``K`` is not square or not invertible, or a shape does not match.

    Examples
    --------
    >>> import numpy as np
    >>> print(f"{l2_growth_rate_bound(np.eye(2), 2 * np.eye(2), 3 * np.eye(2)):.9f}")
    1.500000000

    References
    ----------
    :cite:`castin2025poster,kim2021lipschitz`
    """
    Q = _checks.matrix(Q, "Q")
    d = Q.shape[1]
    Q, K = _checks.query_key(Q, K, d)
    if K.shape != (d, d):
        raise ValueError(f"K must be square (d, d) = ({d}, {d}) for this bound, got {K.shape}")
    V = _checks.matrix(V, "V", shape=(d, d))
    s_min = np.linalg.svd(K, compute_uv=False)[-1]
    if s_min <= 1e-12 * max(float(np.linalg.norm(K, 2)), 1e-300):
        raise ValueError("K must be invertible for this bound")
    return float(np.linalg.norm(V, 2) * np.linalg.norm(K.T @ Q, 2) / s_min**2)


