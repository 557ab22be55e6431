r"""The solver behind :func:`.lipschitz.local_lipschitz`: Lanczos on the normal operator.

:class:`NormalOperator` applies :math:`N = (D_X f)^\top D_X f` with everything that depends
only on ``X`` computed once (per head ``P``, ``qX``, ``kX``, ``vX``, ``P vX``; for a dense
key-query matrix ``X A``; for tokens of small rank the factorisation :math:`X = UC`), in
float64 or float32. :func:`lanczos` runs Lanczos with full reorthogonalisation and stops on
the Kato-Temple bound of the top Ritz value; :func:`lanczos_top` runs it in mixed
precision (a float32 phase, then a float64 phase that certifies the result). The
formulas of the Jacobian products are those of :mod:`.lipschitz`.
"""

import copy

import numpy as np
from scipy.linalg import eigh

#: Dense heads use the factorisation X = U C when rank (n + d) <= this fraction of n d: the
#: factorisation turns products of size n^2 d into ones of size (n^2 + n d) rank.
_LOW_RANK_FRACTION = 0.5


def low_rank_tokens(X):
    r"""``(U, C)`` with ``X = U C`` to rounding, of small rank, or ``None``.

    The rank is the number of eigenvalues of the smaller Gram matrix (:math:`XX^\top` or
    :math:`X^\top X`) above :math:`10^{-14}` times the largest (singular values above
    :math:`10^{-7} s_1`); ``U`` and ``C`` come from the corresponding eigenvectors. The
    factorisation is kept only if ``rank (n + d) <= _LOW_RANK_FRACTION n d`` (else it
    saves little or nothing) and if the dropped part is at rounding level,
    :math:`\|X - U C\|_F \le 10^{-13} \|X\|_F` (checked). Then every product of the
    normal operator with an ``(n, d)`` matrix built from ``X`` costs
    :math:`(n^2 + nd)\,\mathrm{rank}` instead of :math:`n^2 d`. A random sketch
    :math:`XG` with one column more than the largest useful rank first rejects, in
    :math:`O(nd\,\mathrm{rank})`, tokens whose rank is clearly larger (the smallest
    eigenvalue of the sketch's Gram matrix above :math:`10^{-10}` times its largest, i.e.
    singular values of the sketch within a factor :math:`10^5`).
    """
    n, d = X.shape
    max_rank = int(_LOW_RANK_FRACTION * n * d // (n + d))
    if max_rank < min(n, d):  # a sketch of max_rank + 1 columns rejects full-rank X cheaply
        sketch = X @ np.random.default_rng(0).standard_normal((d, max_rank + 1))
        ev = np.linalg.eigvalsh(sketch.T @ sketch)
        if ev[0] > 1e-10 * ev[-1]:
            return None
    gram = X @ X.T if n <= d else X.T @ X
    m = gram.shape[0]
    ev = eigh(gram, eigvals_only=True)
    if ev[-1] <= 0:
        return None
    rank = int(np.sum(ev > 1e-14 * ev[-1]))
    if rank * (n + d) > _LOW_RANK_FRACTION * n * d:
        return None
    vecs = eigh(gram, subset_by_index=[m - rank, m - 1])[1]
    U, C = (vecs, vecs.T @ X) if n <= d else (X @ vecs, vecs.T)
    if np.linalg.norm(X - U @ C) > 1e-13 * np.linalg.norm(X):
        return None
    return U, C


def _slot_bytes(shape, dtype):
    """Bytes of an array of ``shape`` and ``dtype``, rounded up to 64 (a cache line)."""
    return -(-int(np.prod(shape)) * np.dtype(dtype).itemsize // 64) * 64


def _views_bytes(shapes, dtype):
    """Bytes of the memory that :func:`_views` lays ``shapes`` of ``dtype`` out in."""
    return sum(_slot_bytes(shape, dtype) for shape in shapes)


def _views(memory, shapes, dtype, slot_dtype=None):
    """Arrays of ``dtype`` and ``shapes``, views of the bytes ``memory``, one after another,
    each in a slot sized for ``slot_dtype`` (default ``dtype``) and starting on a 64-byte
    boundary. One allocation of at least 4 MiB is mapped by NumPy in huge pages, where
    separate arrays would each cost a page fault per 4 KiB page when first written."""
    views, offset = [], 0
    for shape in shapes:
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        views.append(memory[offset:offset + count].view(dtype).reshape(shape))
        offset += _slot_bytes(shape, slot_dtype or dtype)
    return views


class NormalOperator:
    r"""Products with :math:`N = (D_X f)^\top D_X f` on ``(n, d_in)`` directions.

    Everything that depends only on ``X`` is computed once: per head ``P``, ``qX``, ``kX``,
    ``vX``, ``P vX``, for a dense key-query matrix ``X A`` (so that
    :math:`\langle A e_i, x_j\rangle` is one product with ``E``), and the Gram matrix
    :math:`V_{cat} V_{cat}^\top` of the output projection (the output never needs to be
    formed). A single dense head then costs 8 matrix products of size :math:`n^2 d` and one
    of size :math:`n d^2` per product with ``N``, in float64; :meth:`astype` gives the same
    operator in float32, which halves that cost (used for the first Lanczos phase only, see
    :func:`lanczos_top`).
    """

    def __init__(self, lin, tokens=None):
        self.dtype = np.float64
        self.n = lin.P.shape[1]
        basis = tokens if lin.heads.K is None else None
        self.heads = [_head_arrays(lin, i, basis) for i in range(lin.P.shape[0])]
        self.r = lin.vX.shape[2]
        self.gram = _contiguous(lin.Vcat @ lin.Vcat.T)  # (H r, H r)
        self.count = 0
        self._work = {}
        self._arena: list[np.ndarray | None] = [None]  # shared with the astype copy

    def astype(self, dtype):
        """The same operator with its arrays in ``dtype`` (nothing recomputed), views of one
        allocation: separate copies of less than 4 MiB each would cost a page fault per
        4 KiB page when written (see :func:`_views`)."""
        op = copy.copy(self)
        op.dtype, op.count, op._work = dtype, 0, {}
        arrays = [M for hd in self.heads for M in hd.values() if M is not None] + [self.gram]
        shapes = [M.shape for M in arrays]
        copies = _views(np.empty(_views_bytes(shapes, dtype), np.uint8), shapes, dtype)
        for out, M in zip(copies, arrays, strict=True):
            out[...] = M  # rounded to nearest, as M.astype(dtype)
        copies = iter(copies)
        op.heads = [{key: None if M is None else next(copies) for key, M in hd.items()}
                    for hd in self.heads]
        op.gram = next(copies)
        return op

    def _work_arrays(self, d_in):
        """The work arrays of a product, views of one allocation that this operator and its
        :meth:`astype` copy share (their products never interleave). Separate arrays of a
        few MiB each would cost a page fault per 4 KiB page when first written (1.5
        microseconds each on one of the virtual machines of the performance appendix: a
        tenth of a call at ``n = 512``); one allocation of at least 4 MiB is mapped by NumPy
        in huge pages where the system allows it."""
        n, r, H = self.n, self.r, len(self.heads)
        specs = [("W", (n, n)), ("T", (n, n)), ("out", (n, r)), ("tmp", (n, r)),
                 ("G", (n, H * r)), ("grad", (n, d_in)), ("tmp_in", (n, d_in)),
                 ("E", (n, d_in))]
        if H > 1:
            specs.append(("outs", (n, H * r)))
        shapes = [shape for _, shape in specs]
        if self._arena[0] is None:  # sized for float64, the widest of the two operators
            self._arena[0] = np.empty(_views_bytes(shapes, np.float64), dtype=np.uint8)
        views = _views(self._arena[0], shapes, self.dtype, slot_dtype=np.float64)
        self._work.update(zip((key for key, _ in specs), views, strict=True))

    def __call__(self, v):
        """:math:`N v` in the operator's precision; the array is reused by the next
        product."""
        self.count += 1
        E = v.reshape(self.n, -1)
        if not self._work:
            self._work_arrays(E.shape[1])
        if E.dtype != self.dtype:
            np.copyto(self._work["E"], E, casting="same_kind")
            E = self._work["E"]
        outs = self._forward(E)
        G = np.matmul(outs, self.gram, out=self._work["G"])  # V_cat^T V_cat applied once
        return self._backward(G).ravel()

    def _forward(self, E):
        r"""Per head, :math:`D_X f(E)` before the output projection, side by side:
        :math:`P\,vE + \dot P\,vX` with :math:`\dot P = W - (W\mathbf 1) \odot P`,
        :math:`W = P \odot \dot S`; :math:`\dot S` is left in the work array ``W``."""
        work, r, H = self._work, self.r, len(self.heads)
        W, T, out, tmp = work["W"], work["T"], work["out"], work["tmp"]
        outs = out if H == 1 else work["outs"]
        for i, hd in enumerate(self.heads):
            P, U = hd["P"], hd["U"]
            if U is not None:  # W = (E CA^T) U^T + U (Cq E^T): one product of inner size 2 rank
                left = np.hstack([E @ hd["CA"].T, U])
                right = np.hstack([U, E @ hd["Cq"].T])
                np.matmul(left, right.T, out=W)
            elif hd["XA"] is not None:
                np.matmul(E, hd["XA"].T, out=W)
                W += np.matmul(hd["qX"], E.T, out=T)
            else:
                np.matmul(E @ hd["Q"].T, hd["kX"].T, out=W)
                W += np.matmul(hd["qX"], (E @ hd["K"].T).T, out=T)
            W *= P
            s = W.sum(axis=1)
            vE = E if hd["V_in"] is None else E @ hd["V_in"].T
            np.matmul(P, vE, out=out)
            if U is not None:
                out += (W @ U) @ hd["Cv"]
            else:
                out += np.matmul(W, hd["vX"], out=tmp)
            out -= np.multiply(s[:, None], hd["PvX"], out=tmp)
            if H > 1:
                outs[:, i * r:(i + 1) * r] = out
        return outs

    def _backward(self, G):
        r"""The transposed products of :meth:`_forward` applied to ``G``, summed over heads:
        :math:`P^\top g + \bar S\,(X A) + \bar S^\top qX` per head, with
        :math:`\bar S = P \odot (g\,vX^\top - \langle g_i, (P vX)_i\rangle)`."""
        work, r = self._work, self.r
        grad, tmp_in, tmp = work["grad"], work["tmp_in"], work["tmp"]
        gS = work["W"]  # the buffer of W, no longer needed
        for i, hd in enumerate(self.heads):
            P, U = hd["P"], hd["U"]
            g = G[:, i * r:(i + 1) * r]
            if U is not None:
                np.matmul(g @ hd["Cv"].T, U.T, out=gS)
            else:
                np.matmul(g, hd["vX"].T, out=gS)
            gS -= np.einsum("ij,ij->i", g, hd["PvX"])[:, None]
            gS *= P
            back = np.matmul(P.T, g, out=tmp)
            if hd["V_in"] is not None:
                back = back @ hd["V_in"]
            if i == 0:
                grad[...] = back
            else:
                grad += back
            if U is not None:
                grad += (gS @ U) @ hd["CA"]
                grad += (gS.T @ U) @ hd["Cq"]
            elif hd["XA"] is not None:
                grad += np.matmul(gS, hd["XA"], out=tmp_in)
                grad += np.matmul(gS.T, hd["qX"], out=tmp_in)
            else:
                grad += (gS @ hd["kX"]) @ hd["Q"]
                grad += (gS.T @ hd["qX"]) @ hd["K"]
        return grad


def _contiguous(M, dtype=np.float64):
    return None if M is None else np.ascontiguousarray(M, dtype=dtype)


def _head_arrays(lin, i, basis):
    """The arrays of head ``i`` that :class:`NormalOperator` uses, computed once."""
    h, c = lin.heads, _contiguous
    Q = h.Q[i]
    K = None if h.K is None else h.K[i]
    V_in = None if h.V_in is None else h.V_in[i]
    kX, qX = lin.kX[i], lin.qX[i]
    head = {"P": c(lin.P[i]), "qX": c(qX), "vX": c(lin.vX[i]), "PvX": c(lin.PvX[i]),
            "V_in": c(V_in), "U": None}
    if K is None:  # dense A = Q: <A e_i, x_j> = (E (X A)^T)_ij, <A x_i, e_j> = (qX E^T)
        head["XA"] = c(kX @ Q)
        head["Q"] = head["K"] = head["kX"] = None
        if basis is not None:  # X = U C exactly: n x d products become n x rank
            U, C = basis
            Cv = C if V_in is None else C @ V_in.T
            head.update(U=c(U), CA=c(C @ Q), Cq=c(C @ Q.T), Cv=c(Cv))
    else:
        head.update(Q=c(Q), K=c(K), kX=c(kX), XA=None)
    return head


#: A second reorthogonalisation pass runs when the first left less than this fraction of the
#: norm (the criterion of Daniel, Gragg, Kaufman and Stewart, 1976).
_REORTH_KEEP = 2**-0.5


def _ritz(alpha, beta):
    """Eigen-decomposition of the Lanczos tridiagonal matrix (ascending)."""
    m = len(alpha)
    T = np.diag(alpha) + np.diag(beta[:m - 1], 1) + np.diag(beta[:m - 1], -1)
    return np.linalg.eigh(T)


def lanczos(op, v0, *, target, max_basis, max_products, lower2=-np.inf, floor=0.0,
             min_steps=1):
    r"""Lanczos with full reorthogonalisation for the top eigenpair of the PSD operator ``op``.

    Stops when the a-posteriori error bound of the top Ritz value :math:`\theta`,
    :math:`\min(\|r\|, \|r\|^2 / (\theta - \theta_2))` (for a symmetric operator, with
    :math:`\theta_2 \le \lambda_2` the second Ritz value: Kato-Temple), is at most
    ``target * theta``. Restarts from the top Ritz vector when the basis is full.
    ``lower2`` is a known lower estimate of :math:`\lambda_2` (from a previous phase);
    ``floor`` also stops at a residual below ``floor * theta`` (the rounding level of a
    float32 operator, where the iteration would only stagnate). No stop on the Kato-Temple
    bound before ``min_steps`` products: from a start dominated by a lower eigenvector the
    first Ritz values can look converged, with :math:`\theta_2` far below
    :math:`\lambda_2`; the residual tests, which need no gap, apply from two products on.
    Returns ``(theta, unit Ritz vector, best lower estimate of lambda_2, converged)``.
    """
    N = v0.size
    q = v0 / np.linalg.norm(v0)
    theta, second = 0.0, lower2
    vecs = np.ones((1, 1))
    # in the operator's precision (a float32 operator's products are no more accurate)
    dtype = getattr(op, "dtype", np.float64)
    basis = np.empty((max_basis + 1, N), dtype=dtype)
    tmp = np.empty(N, dtype=dtype)  # in-place updates: no fresh vector (page faults) per step
    while True:
        basis[0] = q
        alpha: list[float] = []
        beta: list[float] = []
        for j in range(max_basis):
            if op.count >= max_products:
                y = vecs[:, -1] @ basis[:j] if j else q
                return theta, y / np.linalg.norm(y), second, False
            w = op(basis[j])
            alpha.append(float(basis[j] @ w))
            # the three-term recurrence removes the large parts
            w -= np.multiply(basis[j], alpha[-1], out=tmp)
            if j:
                w -= np.multiply(basis[j - 1], beta[-1], out=tmp)
            b = float(np.linalg.norm(w))
            for _ in range(2):  # full reorthogonalisation; repeated only when it removed
                # much (Daniel et al., 1976)
                w -= np.matmul(basis[:j + 1] @ w, basis[:j + 1], out=tmp)
                b, before = float(np.linalg.norm(w)), b
                if b > _REORTH_KEEP * before:
                    break
            beta.append(b)
            vals, vecs = _ritz(np.array(alpha), np.array(beta))
            theta = float(vals[-1])
            if j >= 1:
                second = max(second, float(vals[-2]))
            res = b * abs(vecs[-1, -1])
            gap = theta - second
            bound = res if not gap > 0 or not np.isfinite(gap) else min(res, res * res / gap)
            # the residual alone bounds the distance of theta to an eigenvalue (no gap
            # estimate): trusted from two products on; Kato-Temple needs min_steps
            by_residual = res <= max(target, floor) * theta and op.count >= min(min_steps, 2)
            by_gap = bound <= target * theta and op.count >= min_steps
            if by_residual or by_gap or b <= 1e-14 * max(theta, 1e-300):
                y = vecs[:, -1] @ basis[:j + 1]
                return theta, y / np.linalg.norm(y), second, True
            np.divide(w, b, out=basis[j + 1])
        y = vecs[:, -1] @ basis[:max_basis]
        q = y / np.linalg.norm(y)


#: The power iterations of :func:`_structured_start` stop when a step moves the unit vector
#: by less than this (a start vector needs no more accuracy).
_START_CONVERGED = 1e-3


def _structured_start(clin, n, d_in, gram, iters=30):
    r"""Top right singular vectors of sum_h P_h (over tokens) and of V (over dimensions).

    Their outer product is the top singular vector of the first term :math:`P \otimes V`
    of the Jacobian, which dominates when attention is sharp (the hardmax limit). ``gram``
    is :math:`V_{cat} V_{cat}^\top` (the normal operator's, computed once).
    """
    Pbar = clin.P[0] if clin.P.shape[0] == 1 else clin.P.sum(axis=0)
    u = np.full(n, 1.0 / np.sqrt(n))
    for _ in range(iters):
        u_prev = u
        u = Pbar.T @ (Pbar @ u)
        u /= np.linalg.norm(u)
        if np.linalg.norm(u - u_prev) <= _START_CONVERGED:
            break
    V_in = clin.heads.V_in
    H, r = clin.vX.shape[0], clin.vX.shape[2]
    x = np.random.default_rng(0).standard_normal(d_in)
    for _ in range(iters):
        z = (np.tile(x, H) if V_in is None else np.einsum("hrd,d->hr", V_in, x).ravel())
        z = (gram @ z).reshape(H, r)
        x = z.sum(axis=0) if V_in is None else np.einsum("hrd,hr->d", V_in, z)
        nx = np.linalg.norm(x)
        if nx == 0:
            break
        x /= nx
    return np.outer(u, x).ravel()


#: Below this number of tokens every product is in float64. The threshold never decides the
#: accuracy: whichever phase runs first, the returned value passes the float64 stopping test
#: (with the same ``tol``). It decides how the products are split between the precisions.
#: The float32 phase replaces float64 products by products of half the arithmetic and half
#: the memory traffic, and adds a float64 product or two (the float64 phase restarts its
#: Krylov space from the float32 Ritz vector) and the conversion of the operator's arrays,
#: about one product's memory traffic. It pays when a float32 product costs clearly less
#: than a float64 one, which needs the eight n x n x d matrix products of a product to
#: dominate its fixed costs: at n = 128 and d = 384 they are 100 million multiply-adds, a
#: few milliseconds at any BLAS's rate against tens of microseconds of fixed costs. Checked
#: on three kernel settings (native AVX-512, OpenBLAS's Haswell and Sandybridge kernels) on
#: one CPU, on Gaussian and clustered tokens at n = 64 to 256 (``benchmarks/check_tuning.py``,
#: the performance appendix). Kept at 128 so that product counts and values of every
#: stored result stay those of the earlier code.
_MIXED_PRECISION_MIN_TOKENS = 128
#: Weight of the token matrix X (the direction that scales every token) in the start vector.
_START_WEIGHT_X = 1.0
#: Fewest products from a fresh (not warm) start before the stopping test is trusted.
LANCZOS_MIN_STEPS = 5
#: Most products with the normal operator for ``method="lanczos"`` when ``maxiter`` is None.
_LANCZOS_MAX_PRODUCTS = 2000
#: Memory budget of the Lanczos basis (bytes); the basis restarts when it is full.
_LANCZOS_BASIS_BYTES = 2**28


def product_budget(maxiter):
    """The product budget of the Lanczos method for the option ``maxiter``."""
    return _LANCZOS_MAX_PRODUCTS if maxiter is None else maxiter


def not_converged(tol, max_products):
    return RuntimeError(f"local_lipschitz: Lanczos did not reach tol={tol:g} in "
                        f"maxiter={max_products} products")


def lanczos_top(clin, n, d_in, *, tol, v0, seed, maxiter, X_in):
    """Top eigenpair of the normal operator by Lanczos: float32 phase, then float64."""
    dim = n * d_in
    tokens = low_rank_tokens(clin.kX[0]) if clin.heads.K is None else None
    op64 = NormalOperator(clin, tokens)
    if v0 is None:
        rnd = np.random.default_rng(seed).standard_normal(dim)
        start = _structured_start(clin, n, d_in, op64.gram) + rnd / np.linalg.norm(rnd)
        norm_X = np.linalg.norm(X_in)
        if norm_X > 0:  # the direction scaling every token (sharpens attention)
            start = start + _START_WEIGHT_X * X_in.ravel() / norm_X
        min_steps = min(LANCZOS_MIN_STEPS, dim)
    else:
        start, min_steps = v0, 1
    max_basis = int(min(40, max(8, _LANCZOS_BASIS_BYTES // (8 * dim)), dim))
    max_products = product_budget(maxiter)
    second, used = -np.inf, 0
    if n >= _MIXED_PRECISION_MIN_TOKENS and max(tol, 1e-8) < 1:
        op32 = op64.astype(np.float32)
        _, start, second, _ = lanczos(op32, start, target=max(tol, 1e-8),
                                       max_basis=max_basis, max_products=max_products // 2,
                                       floor=1e-5, min_steps=min_steps)
        min_steps = 1
        used = op32.count
    op64.count = used
    lam, z, _, ok = lanczos(op64, start, target=tol, max_basis=max_basis,
                             max_products=max_products, lower2=second,
                             min_steps=used + min_steps)
    if not ok:
        raise not_converged(tol, max_products)
    return lam, z, op64.count
