r"""SymPy derivations of the Gaussian solutions of the Transformer PDE.

Everything the chapter "Gaussian initial data" states about the mean and covariance ODEs is
derived here, by computer algebra, and compared with the stated formulas (MATH reference of
the book; Castin, Ablin, Carrillo and Peyré, 2025):

1. *Completing the square.* A Gaussian reweighted by the exponential of a quadratic function
   of :math:`y` is Gaussian; its precision is minus the Hessian of the exponent and its mean
   solves :math:`\Lambda m = \nabla_y(\text{exponent})(0)`. Softmax gives
   :math:`\mathcal N(\alpha + \Sigma A x, \Sigma)`, L2 gives precision
   :math:`\Sigma^{-1} + 2K^\top K` and mean
   :math:`(I + 2\Sigma K^\top K)^{-1}(\alpha + 2\Sigma A x)`.
2. *Affine field.* Attention is then :math:`\Gamma(x) = V m(x)`, affine in :math:`x`:
   :math:`\Gamma(x) = Mx + b`.
3. *Moment ODEs.* An affine field moves :math:`\mathcal N(\alpha, \Sigma)` to a Gaussian with
   :math:`\dot\alpha = M\alpha + b`, :math:`\dot\Sigma = M\Sigma + \Sigma M^\top` (differentiate
   :math:`(I + hM)\Sigma(I + hM)^\top` at :math:`h = 0`).
4. *Sinkhorn.* The entropic plan between :math:`\mathcal N(\alpha,\Sigma)` and itself is Gaussian;
   in :math:`d = 1` its cross-covariance solves a quadratic equation, solved here exactly, which
   shows which regularisation the published formula corresponds to.

The :math:`d = 2` derivations use explicit matrices whose entries are all symbols
(:math:`\Sigma` symmetric); :func:`general_identities` proves the matrix identities for general
:math:`d` with non-commutative ``MatrixSymbol`` algebra. Each derivation returns a dict holding
the derived expressions, the stated ones, their simplified difference (``"residual"``, exactly
zero when the statement holds) and the symbols (to evaluate the expressions at numbers, see
:func:`evaluate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy as sp
from numpy.typing import ArrayLike

from . import _checks

__all__ = [
    "symbol_matrix",
    "symmetric_symbol_matrix",
    "symbol_vector",
    "complete_the_square",
    "affine_moment_odes",
    "softmax_reweighting",
    "l2_reweighting",
    "softmax_moment_odes",
    "l2_moment_odes",
    "multihead_moment_odes",
    "sinkhorn_scalar",
    "general_identities",
    "is_zero",
    "evaluate",
]


# --------------------------------------------------------------------------------------
# symbols
# --------------------------------------------------------------------------------------

def symbol_matrix(name: str, rows: int, cols: int | None = None) -> sp.Matrix:
    r"""A ``rows x cols`` matrix whose entries are independent real symbols ``name_ij``.

    Parameters
    ----------
    name : str
        Prefix of the symbols.
    rows : int
        Number of rows.
    cols : int, optional
        Number of columns (default ``rows``).

    Returns
    -------
    sympy.Matrix

    Examples
    --------
    >>> print(symbol_matrix("a", 2))
    Matrix([[a_11, a_12], [a_21, a_22]])

    References
    ----------
    :cite:`meurer2017sympy`
    """
    rows = _checks.positive_int(rows, "rows")
    cols = rows if cols is None else _checks.positive_int(cols, "cols")
    return sp.Matrix(rows, cols, lambda i, j: sp.Symbol(f"{name}_{i + 1}{j + 1}", real=True))


def symmetric_symbol_matrix(name: str, d: int) -> sp.Matrix:
    r"""A symmetric ``d x d`` matrix of real symbols: entry ``(i, j)`` is ``name_{min,max}``.

    Parameters
    ----------
    name : str
        Prefix of the symbols.
    d : int
        Size.

    Returns
    -------
    sympy.Matrix

    Examples
    --------
    >>> print(symmetric_symbol_matrix("s", 2))
    Matrix([[s_11, s_12], [s_12, s_22]])

    References
    ----------
    :cite:`meurer2017sympy`
    """
    d = _checks.positive_int(d, "d")
    return sp.Matrix(d, d, lambda i, j: sp.Symbol(f"{name}_{min(i, j) + 1}{max(i, j) + 1}",
                                                  real=True))


def symbol_vector(name: str, d: int) -> sp.Matrix:
    r"""A column vector of ``d`` real symbols ``name_i``.

    Parameters
    ----------
    name : str
        Prefix of the symbols.
    d : int
        Length.

    Returns
    -------
    sympy.Matrix
        A ``(d, 1)`` matrix.

    Examples
    --------
    >>> print(symbol_vector("x", 2))
    Matrix([[x_1], [x_2]])

    References
    ----------
    :cite:`meurer2017sympy`
    """
    d = _checks.positive_int(d, "d")
    return sp.Matrix(d, 1, lambda i, _: sp.Symbol(f"{name}_{i + 1}", real=True))


def _simplify_rational(e):
    """Exact simplification of a rational function: 0 when the expanded numerator is 0."""
    e = sp.together(e)
    if sp.expand(sp.numer(e)) == 0:
        return sp.Integer(0)
    return sp.cancel(e)


def is_zero(expr: sp.Expr | sp.MatrixBase) -> bool:
    r"""True when the (matrix) expression is exactly zero as a rational function of its symbols.

    Brings each entry to a single fraction and expands its numerator: an exact test.

    Parameters
    ----------
    expr : sympy expression or matrix
        A rational function of its symbols, or a matrix of them.

    Returns
    -------
    bool

    Examples
    --------
    >>> import sympy as sp
    >>> x = sp.Symbol("x")
    >>> print(is_zero(x / (x + 1) - 1 + 1 / (x + 1)), is_zero(sp.Matrix([x, 0])))
    True False

    References
    ----------
    :cite:`meurer2017sympy`
    """
    if isinstance(expr, sp.MatrixBase):
        return all(_simplify_rational(e) == 0 for e in expr)
    return _simplify_rational(expr) == 0


def _residual(a, b):
    """Entry-wise simplified difference ``a - b`` (exact for rational functions)."""
    return (a - b).applyfunc(_simplify_rational)


def _moment_report(M, b, dalpha, dSigma, dalpha_stated, dSigma_stated, symbols, **extra):
    """The derived affine field and ODEs, the stated ones, and their simplified differences."""
    return {"M": M, "b": b, "dalpha": dalpha, "dSigma": dSigma,
            "dalpha_stated": dalpha_stated, "dSigma_stated": dSigma_stated,
            "residual_alpha": _residual(dalpha, dalpha_stated),
            "residual_Sigma": _residual(dSigma, dSigma_stated), "symbols": symbols, **extra}


def evaluate(expr: sp.Expr | sp.MatrixBase,
             values: Sequence[tuple[sp.MatrixBase, ArrayLike]]) -> list[list[float]]:
    r"""Evaluate a SymPy matrix at numbers: ``values`` is a list of (symbol matrix, array).

    Example: ``evaluate(res["dSigma"], [(res["symbols"]["Sigma"], S), ...])`` returns a nested
    list of floats (use ``numpy.array`` on it).

    Parameters
    ----------
    expr : sympy matrix
        The expression to evaluate.
    values : list of (sympy matrix, array)
        Each symbol matrix with the numbers to put in its place (a 2-D array, or a 1-D array for
        a column vector).

    Returns
    -------
    list of list of float

    Raises
    ------
    IndexError
        If an array is smaller than its symbol matrix.

    Examples
    --------
    Softmax in :math:`d = 1`: :math:`\dot\sigma^2 = 2va\sigma^4`, here :math:`2\cdot 1\cdot
    0.5\cdot 4`:

    >>> res = softmax_moment_odes(1)
    >>> s = res["symbols"]
    >>> print(evaluate(res["dSigma"], [(s["Sigma"], [[2.0]]), (s["A"], [[0.5]]),
    ...                                (s["V"], [[1.0]])]))
    [[4.0]]

    References
    ----------
    :cite:`meurer2017sympy`
    """
    subs = {}
    for sym_mat, val in values:
        rows, cols = sym_mat.shape
        arr = np.asarray(val, dtype=np.float64)
        for i in range(rows):
            for j in range(cols):
                v = arr[i, j] if arr.ndim == 2 else arr[i]
                subs[sym_mat[i, j]] = sp.Float(float(v), 30)
    out = expr.xreplace(subs)
    return [[float(out[i, j]) for j in range(out.shape[1])] for i in range(out.shape[0])]


# --------------------------------------------------------------------------------------
# the three steps
# --------------------------------------------------------------------------------------

def complete_the_square(exponent: sp.Expr,
                        y: sp.MatrixBase) -> tuple[sp.Matrix, sp.Matrix, sp.Matrix]:
    r"""Gaussian in :math:`y` proportional to :math:`e^{\text{exponent}}` (a quadratic in ``y``).

    With :math:`\text{exponent} = -\tfrac12 y^\top\Lambda y + \eta^\top y + c`, returns
    ``(mean, covariance, precision)`` = :math:`(\Lambda^{-1}\eta, \Lambda^{-1}, \Lambda)`, where
    :math:`\Lambda = -\nabla_y^2(\text{exponent})` and :math:`\eta = \nabla_y(\text{exponent})(0)`.

    Parameters
    ----------
    exponent : sympy expression
        A quadratic function of the entries of ``y`` with negative definite Hessian.
    y : sympy matrix
        Column of the variables.

    Returns
    -------
    mean, covariance, precision : sympy.Matrix

    Raises
    ------
    ValueError
        If the Hessian is singular (raised by SymPy's inverse).

    Examples
    --------
    :math:`e^{-y^2 + 2y} \propto \mathcal N(1, 1/2)`:

    >>> y = symbol_vector("y", 1)
    >>> print(complete_the_square(-y[0] ** 2 + 2 * y[0], y))
    (Matrix([[1]]), Matrix([[1/2]]), Matrix([[2]]))

    References
    ----------
    :cite:`castin2025unified,meurer2017sympy`
    """
    ys = list(y)
    Lam = -sp.hessian(exponent, ys)
    zero = {v: 0 for v in ys}
    eta = sp.Matrix([sp.diff(exponent, v) for v in ys]).xreplace(zero)
    cov = Lam.inv()
    return (cov * eta).applyfunc(sp.cancel), cov.applyfunc(sp.cancel), Lam


def affine_moment_odes(M: sp.MatrixBase, b: sp.MatrixBase, alpha: sp.MatrixBase,
                       Sigma: sp.MatrixBase) -> tuple[sp.Matrix, sp.Matrix]:
    r"""Moment ODEs of :math:`\dot x = Mx + b` on :math:`\mathcal N(\alpha, \Sigma)`, derived.

    The flow over a time :math:`h` is :math:`x \mapsto x + h(Mx + b) + O(h^2)`, which maps
    :math:`\mathcal N(\alpha, \Sigma)` to :math:`\mathcal N(\alpha + h(M\alpha + b),
    (I + hM)\Sigma(I + hM)^\top) + O(h^2)`; differentiating at :math:`h = 0` gives
    ``(dalpha, dSigma)`` = :math:`(M\alpha + b, M\Sigma + \Sigma M^\top)`.

    Parameters
    ----------
    M : sympy matrix (d, d)
        Linear part of the field.
    b : sympy matrix (d, 1)
        Constant part of the field.
    alpha : sympy matrix (d, 1)
        Mean.
    Sigma : sympy matrix (d, d)
        Covariance.

    Returns
    -------
    dalpha, dSigma : sympy.Matrix

    Examples
    --------
    >>> M, b = symbol_matrix("m", 1), symbol_vector("b", 1)
    >>> print(affine_moment_odes(M, b, symbol_vector("alpha", 1), symmetric_symbol_matrix("s", 1)))
    (Matrix([[alpha_1*m_11 + b_1]]), Matrix([[2*m_11*s_11]]))

    References
    ----------
    :cite:`castin2025unified,meurer2017sympy`
    """
    h = sp.Symbol("h")
    d = Sigma.shape[0]
    flow_lin = sp.eye(d) + h * M
    mean_h = alpha + h * (M * alpha + b)
    cov_h = flow_lin * Sigma * flow_lin.T
    return mean_h.diff(h).subs(h, 0), cov_h.diff(h).subs(h, 0)


def _gaussian_log_density(y, alpha, Sigma):
    """log N(alpha, Sigma)(y) up to its normalising constant."""
    return (-(y - alpha).T * Sigma.inv() * (y - alpha) / 2)[0, 0]


def softmax_reweighting(d: int = 2) -> dict[str, Any]:
    r"""Softmax reweighting :math:`e^{\langle Ax, y\rangle}\mathcal N(\alpha,\Sigma)(dy)/Z`.

    Stated: :math:`\mathcal N(\alpha + \Sigma A x, \Sigma)` (Castin et al., 2025). Returns a dict
    with ``mean``, ``cov`` (derived), ``mean_stated``, ``cov_stated``, ``residual_mean``,
    ``residual_cov`` and ``symbols``.

    Parameters
    ----------
    d : int
        Dimension.

    Returns
    -------
    dict

    Examples
    --------
    >>> res = softmax_reweighting(1)
    >>> print(res["mean"], is_zero(res["residual_mean"]), is_zero(res["residual_cov"]))
    Matrix([[a_11*s_11*x_1 + alpha_1]]) True True

    References
    ----------
    :cite:`castin2025unified,meurer2017sympy`
    """
    d = _checks.positive_int(d, "d")
    Sigma = symmetric_symbol_matrix("s", d)
    A = symbol_matrix("a", d)
    alpha, x, y = symbol_vector("alpha", d), symbol_vector("x", d), symbol_vector("y", d)
    exponent = _gaussian_log_density(y, alpha, Sigma) + ((A * x).T * y)[0, 0]
    mean, cov, _ = complete_the_square(exponent, y)
    mean_stated = alpha + Sigma * A * x
    return {"mean": mean, "cov": cov, "mean_stated": mean_stated, "cov_stated": Sigma,
            "residual_mean": _residual(mean, mean_stated), "residual_cov": _residual(cov, Sigma),
            "symbols": {"Sigma": Sigma, "A": A, "alpha": alpha, "x": x, "y": y}}


def l2_reweighting(d: int = 2, k: int = 2) -> dict[str, Any]:
    r"""L2 reweighting :math:`e^{-|Qx - Ky|^2}\mathcal N(\alpha,\Sigma)(dy)/Z`, derived.

    Stated: precision :math:`\Sigma^{-1} + 2K^\top K` (Castin et al., 2025), and the mean we
    use, :math:`(I + 2\Sigma K^\top K)^{-1}(\alpha + 2\Sigma K^\top Q x)`. ``Q``, ``K`` are
    ``k x d`` symbol matrices. Same keys as :func:`softmax_reweighting` plus
    ``precision`` and ``residual_precision``.

    Parameters
    ----------
    d : int
        Dimension of the tokens.
    k : int
        Number of rows of ``Q`` and ``K``.

    Returns
    -------
    dict

    Examples
    --------
    >>> res = l2_reweighting(1, 1)
    >>> print(res["precision"])
    Matrix([[2*k_11**2 + 1/s_11]])
    >>> print([is_zero(res[key]) for key in ("residual_precision", "residual_mean",
    ...                                       "residual_cov")])
    [True, True, True]

    References
    ----------
    :cite:`castin2025unified,kim2021lipschitz,meurer2017sympy`
    """
    d, k = _checks.positive_int(d, "d"), _checks.positive_int(k, "k")
    Sigma = symmetric_symbol_matrix("s", d)
    Q, K = symbol_matrix("q", k, d), symbol_matrix("k", k, d)
    alpha, x, y = symbol_vector("alpha", d), symbol_vector("x", d), symbol_vector("y", d)
    r = Q * x - K * y
    exponent = _gaussian_log_density(y, alpha, Sigma) - (r.T * r)[0, 0]
    mean, cov, Lam = complete_the_square(exponent, y)
    precision_stated = Sigma.inv() + 2 * K.T * K
    mean_stated = (sp.eye(d) + 2 * Sigma * K.T * K).inv() * (alpha + 2 * Sigma * K.T * Q * x)
    cov_stated = precision_stated.inv()
    return {"mean": mean, "cov": cov, "precision": Lam, "mean_stated": mean_stated,
            "cov_stated": cov_stated,
            "residual_precision": _residual(Lam, precision_stated),
            "residual_mean": _residual(mean, mean_stated),
            "residual_cov": _residual(cov, cov_stated),
            "symbols": {"Sigma": Sigma, "Q": Q, "K": K, "alpha": alpha, "x": x, "y": y}}


def _affine_part(Gamma, x):
    """(M, b) of a field affine in x: M = Jacobian, b = value at 0; also checks affinity."""
    xs = list(x)
    M = Gamma.jacobian(xs)
    b = Gamma.xreplace({v: 0 for v in xs})
    if not is_zero(Gamma - M * x - b) or any(sp.diff(e, v) != 0 for e in M for v in xs):
        raise ValueError("the field is not affine in x")
    return M.applyfunc(sp.cancel), b.applyfunc(sp.cancel)


def softmax_moment_odes(d: int = 2) -> dict[str, Any]:
    r"""Softmax moment ODEs, derived from the reweighting, compared with the stated formulas.

    Stated (Castin et al., 2025): :math:`\dot\alpha = V(I + \Sigma A)\alpha`,
    :math:`\dot\Sigma = V\Sigma A\Sigma + \Sigma A^\top\Sigma V^\top`. Returns a dict with the
    affine field ``M``, ``b``, ``dalpha``, ``dSigma``, the stated ones, ``residual_alpha``,
    ``residual_Sigma``, ``symbols`` and ``reweighting`` (the dict of
    :func:`softmax_reweighting`).

    Parameters
    ----------
    d : int
        Dimension.

    Returns
    -------
    dict

    Examples
    --------
    >>> res = softmax_moment_odes(1)
    >>> print(res["dSigma"], is_zero(res["residual_alpha"]), is_zero(res["residual_Sigma"]))
    Matrix([[2*a_11*s_11**2*v_11]]) True True

    References
    ----------
    :cite:`castin2025unified,meurer2017sympy`
    """
    d = _checks.positive_int(d, "d")
    rw = softmax_reweighting(d)
    s = dict(rw["symbols"])
    V = symbol_matrix("v", d)
    s["V"] = V
    M, b = _affine_part(V * rw["mean"], s["x"])
    dalpha, dSigma = affine_moment_odes(M, b, s["alpha"], s["Sigma"])
    A, Sigma, alpha = s["A"], s["Sigma"], s["alpha"]
    dalpha_stated = V * (sp.eye(d) + Sigma * A) * alpha
    dSigma_stated = V * Sigma * A * Sigma + Sigma * A.T * Sigma * V.T
    return _moment_report(M, b, dalpha, dSigma, dalpha_stated, dSigma_stated, s,
                          reweighting=rw)


def l2_moment_odes(d: int = 2, k: int = 2) -> dict[str, Any]:
    r"""L2 moment ODEs, derived from the reweighting, compared with the stated formulas.

    Stated (Castin et al., 2025), with :math:`P = \Sigma^{-1} + 2K^\top K`, :math:`A = K^\top Q`:
    :math:`\dot\Sigma = 2VP^{-1}A\Sigma + 2\Sigma A^\top P^{-1}V^\top`; the mean,
    :math:`\dot\alpha = VP^{-1}(\Sigma^{-1} + 2A)\alpha`, is derived here. Same keys as
    :func:`softmax_moment_odes`. :math:`P^{-1}` is evaluated as
    :math:`(I + 2\Sigma K^\top K)^{-1}\Sigma` (equal by :func:`general_identities`), which keeps
    the rational functions small.

    Parameters
    ----------
    d : int
        Dimension of the tokens.
    k : int
        Number of rows of ``Q`` and ``K``.

    Returns
    -------
    dict

    Examples
    --------
    >>> res = l2_moment_odes(1, 1)
    >>> print(res["dSigma"], is_zero(res["residual_alpha"]), is_zero(res["residual_Sigma"]))
    Matrix([[4*k_11*q_11*s_11**2*v_11/(2*k_11**2*s_11 + 1)]]) True True

    References
    ----------
    :cite:`castin2025unified,kim2021lipschitz,meurer2017sympy`
    """
    d, k = _checks.positive_int(d, "d"), _checks.positive_int(k, "k")
    rw = l2_reweighting(d, k)
    s = dict(rw["symbols"])
    V = symbol_matrix("v", d)
    s["V"] = V
    M, b = _affine_part(V * rw["mean"], s["x"])
    dalpha, dSigma = affine_moment_odes(M, b, s["alpha"], s["Sigma"])
    Sigma, alpha, Q, K = s["Sigma"], s["alpha"], s["Q"], s["K"]
    A = K.T * Q
    # P^{-1} = (Sigma^{-1} + 2 K^T K)^{-1} written as (I + 2 Sigma K^T K)^{-1} Sigma (the two are
    # equal: general_identities()["l2_square"]), which keeps the rational functions small
    Pinv = ((sp.eye(d) + 2 * Sigma * K.T * K).inv() * Sigma).applyfunc(sp.cancel)
    dalpha_stated = V * Pinv * (Sigma.inv() + 2 * A) * alpha
    dSigma_stated = 2 * V * Pinv * A * Sigma + 2 * Sigma * A.T * Pinv * V.T
    return _moment_report(M, b, dalpha, dSigma, dalpha_stated, dSigma_stated, s,
                          reweighting=rw)


def multihead_moment_odes(d: int = 2, heads: int = 2) -> dict[str, Any]:
    r"""Multi-head softmax moment ODEs: the field is the sum of the heads' affine fields.

    Stated: :math:`\dot\alpha = \sum_h V_h(I + \Sigma A_h)\alpha`,
    :math:`\dot\Sigma = \sum_h (V_h\Sigma A_h\Sigma + \Sigma A_h^\top\Sigma V_h^\top)`. The
    symbols hold lists ``As`` and ``Vs``.

    Parameters
    ----------
    d : int
        Dimension.
    heads : int
        Number of heads.

    Returns
    -------
    dict
        The keys of :func:`softmax_moment_odes` (without ``reweighting``).

    Examples
    --------
    >>> res = multihead_moment_odes(1, 2)
    >>> print(is_zero(res["residual_alpha"]), is_zero(res["residual_Sigma"]))
    True True

    References
    ----------
    :cite:`castin2025unified,meurer2017sympy`
    """
    d, heads = _checks.positive_int(d, "d"), _checks.positive_int(heads, "heads")
    Sigma = symmetric_symbol_matrix("s", d)
    alpha, x, y = symbol_vector("alpha", d), symbol_vector("x", d), symbol_vector("y", d)
    As = [symbol_matrix(f"a{h + 1}", d) for h in range(heads)]
    Vs = [symbol_matrix(f"v{h + 1}", d) for h in range(heads)]
    field = sp.zeros(d, 1)
    for A, V in zip(As, Vs, strict=True):
        exponent = _gaussian_log_density(y, alpha, Sigma) + ((A * x).T * y)[0, 0]
        field += V * complete_the_square(exponent, y)[0]
    M, b = _affine_part(field, x)
    dalpha, dSigma = affine_moment_odes(M, b, alpha, Sigma)
    dalpha_stated = sp.zeros(d, 1)
    dSigma_stated = sp.zeros(d, d)
    for A, V in zip(As, Vs, strict=True):
        dalpha_stated += V * (sp.eye(d) + Sigma * A) * alpha
        dSigma_stated += V * Sigma * A * Sigma + Sigma * A.T * Sigma * V.T
    return _moment_report(M, b, dalpha, dSigma, dalpha_stated, dSigma_stated,
                          {"Sigma": Sigma, "alpha": alpha, "x": x, "As": As, "Vs": Vs})


def sinkhorn_scalar() -> dict[str, Any]:
    r"""Sinkhorn attention on :math:`\mathcal N(\alpha, \sigma^2)` in :math:`d = 1`, solved exactly.

    The entropic plan of cost :math:`(qx - ky)^2` and regularisation :math:`\varepsilon`
    between :math:`\mathcal N(\alpha,\sigma^2)` and itself has density
    :math:`e^{f(x) + g(y) + \kappa a x y}` against :math:`\mu\otimes\mu`, :math:`a = kq`,
    :math:`\kappa = 2/\varepsilon`: a Gaussian with covariance :math:`[[\sigma^2, c],[c, \sigma^2]]`
    whose precision has off-diagonal entry :math:`-\kappa a`. Solving
    :math:`c / (\sigma^4 - c^2) = \kappa a` for the root with :math:`|c| < \sigma^2` gives ``c``;
    then :math:`\Gamma(x) = v\,\mathbb E[y|x] = v\alpha + (vc/\sigma^2)(x - \alpha)` and
    :math:`\dot{\sigma^2} = 2vc`.

    Returns a dict with ``c``, ``dsigma2`` (derived, as a function of :math:`\varepsilon`),
    ``dsigma2_library`` (the closed form of :func:`transformer_pde.gaussian.sinkhorn_rhs`,
    :math:`d = 1`), ``dsigma2_published`` (the authors' code formula in :math:`d = 1`:
    :math:`2va^{-1}\sigma^{-2}C\sigma^2`, :math:`C = \tfrac12(\sqrt{1 + 4a^2\sigma^4} - 1)`),
    the residuals ``residual_library`` (derived minus library, any :math:`\varepsilon`),
    ``residual_published_eps1`` and ``residual_published_eps2`` (derived at
    :math:`\varepsilon = 1`, resp. 2, minus published) and ``symbols``.

    Returns
    -------
    dict

    Examples
    --------
    The derived rate equals the library's closed form for every :math:`\varepsilon`, and the
    published formula at :math:`\varepsilon = 2`, not at :math:`\varepsilon = 1`:

    >>> res = sinkhorn_scalar()
    >>> print(res["residual_library"], res["residual_published_eps2"],
    ...       res["residual_published_eps1"] == 0)
    0 0 False

    References
    ----------
    :cite:`castin2025unified,sander2022sinkformers,janati2020entropic,meurer2017sympy`
    """
    a, v = sp.symbols("a v", real=True)
    eps = sp.Symbol("epsilon", positive=True)
    sigma2 = sp.Symbol("sigma2", positive=True)
    c = sp.Symbol("c", real=True)
    kappa = 2 / eps
    joint = sp.Matrix([[sigma2, c], [c, sigma2]])
    off_diagonal = sp.cancel(joint.inv()[0, 1])  # = -c / (sigma2^2 - c^2)
    roots = sp.solve(sp.Eq(off_diagonal, -kappa * a), c)
    # the admissible root is the one that vanishes with a (|c| < sigma2)
    root = next(r for r in roots if sp.limit(r, a, 0) == 0)
    dsigma2 = sp.simplify(2 * v * root)
    s = sp.sqrt(sigma2)
    lib_M = 2 * kappa * v * s * s * a / (1 + sp.sqrt(1 + 4 * kappa**2 * (s * a * s) ** 2))
    dsigma2_library = 2 * lib_M * sigma2
    C = (sp.sqrt(1 + 4 * a**2 * sigma2**2) - 1) / 2
    dsigma2_published = 2 * v / a / sigma2 * C * sigma2

    def diff(e1, e2):
        return sp.simplify(sp.radsimp(sp.together(e1 - e2)))

    return {"c": root, "dsigma2": dsigma2, "dsigma2_library": dsigma2_library,
            "dsigma2_published": dsigma2_published,
            "residual_library": diff(dsigma2, dsigma2_library),
            "residual_published_eps1": diff(dsigma2.subs(eps, 1), dsigma2_published),
            "residual_published_eps2": diff(dsigma2.subs(eps, 2), dsigma2_published),
            "symbols": {"a": a, "v": v, "epsilon": eps, "sigma2": sigma2}}


def general_identities() -> dict[str, Any]:
    r"""The matrix identities behind the derivations, for general :math:`d` (``MatrixSymbol``).

    Returns a dict name -> simplified difference (``0`` or a ``ZeroMatrix`` when it holds):

    - ``"softmax_square"``: :math:`\Sigma^{-1}(\alpha + \Sigma A x) - (\Sigma^{-1}\alpha + Ax)`
      (the mean :math:`\alpha + \Sigma A x` solves :math:`\Sigma^{-1}m = \Sigma^{-1}\alpha + Ax`);
    - ``"l2_square"``: :math:`(\Sigma^{-1} + 2K^\top K)\,(I + 2\Sigma K^\top K)^{-1}
      (\alpha + 2\Sigma K^\top Q x) - (\Sigma^{-1}\alpha + 2K^\top Qx)`, checked in the form
      :math:`\Sigma(\Sigma^{-1} + 2K^\top K) = I + 2\Sigma K^\top K`;
    - ``"affine_covariance"``: :math:`\frac{d}{dh}(I + hM)\Sigma(I + hM)^\top|_{h=0} -
      (M\Sigma + \Sigma M^\top)`;
    - ``"softmax_mean"``: :math:`(V\Sigma A)\alpha + V\alpha - V(I + \Sigma A)\alpha`;
    - ``"softmax_covariance"``: :math:`M\Sigma + \Sigma M^\top - (V\Sigma A\Sigma +
      \Sigma A^\top\Sigma V^\top)` with :math:`M = V\Sigma A`, :math:`\Sigma = \Sigma^\top`;
    - ``"l2_covariance"``: the same with :math:`M = 2VP^{-1}A`, :math:`P = P^\top`.

    Returns
    -------
    dict
        Name to simplified difference.

    Examples
    --------
    >>> print(general_identities())
    {'softmax_square': 0, 'l2_square': 0, 'affine_covariance': 0, 'softmax_mean': 0,
     'softmax_covariance': 0, 'l2_covariance': 0}

    References
    ----------
    :cite:`castin2025unified,meurer2017sympy`
    """
    d = sp.Symbol("d", integer=True, positive=True)
    k = sp.Symbol("k", integer=True, positive=True)
    Sigma = sp.MatrixSymbol("Sigma", d, d)
    A, M, V = (sp.MatrixSymbol(n, d, d) for n in ("A", "M", "V"))
    P = sp.MatrixSymbol("P", d, d)
    K = sp.MatrixSymbol("K", k, d)
    alpha, x = sp.MatrixSymbol("alpha", d, 1), sp.MatrixSymbol("x", d, 1)
    eye = sp.Identity(d)
    h = sp.Symbol("h")
    sym = {Sigma.T: Sigma, P.T: P}

    def simp(e):
        return sp.simplify(sp.expand(sp.expand(e).xreplace(sym)))

    out = {}
    out["softmax_square"] = simp(Sigma.I * (alpha + Sigma * A * x) - Sigma.I * alpha - A * x)
    out["l2_square"] = simp(Sigma * (Sigma.I + 2 * K.T * K) - (eye + 2 * Sigma * K.T * K))
    cov_h = sp.expand((eye + h * M) * Sigma * (eye + h * M).T)
    out["affine_covariance"] = simp(sp.diff(cov_h, h).subs(h, 0) - (M * Sigma + Sigma * M.T))
    out["softmax_mean"] = simp(V * Sigma * A * alpha + V * alpha - V * (eye + Sigma * A) * alpha)
    Ms = V * Sigma * A
    out["softmax_covariance"] = simp(Ms * Sigma + Sigma * Ms.T
                                     - (V * Sigma * A * Sigma + Sigma * A.T * Sigma * V.T))
    Ml = 2 * V * P.I * A
    out["l2_covariance"] = simp(Ml * Sigma + Sigma * Ml.T
                                - (2 * V * P.I * A * Sigma + 2 * Sigma * A.T * P.I * V.T))
    return out
