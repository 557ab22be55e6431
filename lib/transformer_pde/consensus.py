r"""Clustering as consensus: the rescaled tokens are averages of the initial tokens.

For :math:`V = I_d` the rescaled dynamics of Geshkovski, Letrouit, Polyanskiy and Rigollet
(*The emergence of clusters in self-attention dynamics*, NeurIPS 2023) reads
:math:`\dot z = (P(t) - I) z` for the :math:`n \times d` matrix of tokens: a continuous-time
averaging (consensus) dynamics whose weights :math:`P(t)` depend on the tokens. Hence
:math:`z(t) = \Phi(t) z(0)` with :math:`\dot\Phi = (P(t) - I)\Phi`, :math:`\Phi(0) = I`; as
:math:`P - I` has non-negative off-diagonal entries and zero row sums, :math:`\Phi(t)` is
row-stochastic for every :math:`t`: the continuous-time analogue of the product of the layers'
stochastic matrices (Hegselmann and Krause, 2002, for opinion dynamics).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import softmax

from . import _checks, dynamics

__all__ = ["transition_matrix"]


def transition_matrix(Z0: ArrayLike, times: ArrayLike, A: ArrayLike, *, rtol: float = 1e-10,
                      atol: float = 1e-12
                      ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""The tokens :math:`z(t)` and the matrix :math:`\Phi(t)` with :math:`z(t) = \Phi(t) z(0)`.

    Integrates :math:`\dot Y = (P(t) - I) Y` for :math:`Y = [\,z \mid \Phi\,]` (shape
    ``(n, d + n)``), with :math:`P(t)` the attention matrix of the rescaled tokens for
    :math:`V = I_d`, logits :math:`e^{2t}\langle A z_i, z_j\rangle`, computed from the first
    :math:`d` columns. The same linear law moves the tokens and :math:`\Phi`.

    Parameters
    ----------
    Z0 : array (n, d)
    times : array (m,)
        From 0.
    A : array (d, d)
    rtol, atol : float
        Tolerances of the adaptive solver (:func:`transformer_pde.dynamics.integrate`).

    Returns
    -------
    z : array (m, n, d)
    Phi : array (m, n, n)

    Raises
    ------
    ValueError
        On bad shapes, ``times`` not starting at 0 or bad tolerances.

    Examples
    --------
    :math:`\Phi(t)` is row-stochastic (a product of stochastic transitions) and maps
    :math:`z(0)` to :math:`z(t)`:

    >>> import numpy as np
    >>> Z0 = np.array([[1.0, 0.0], [0.0, 1.0], [-0.5, 0.3]])
    >>> z, Phi = transition_matrix(Z0, np.linspace(0.0, 0.5, 3), np.eye(2))
    >>> print(bool(np.allclose(Phi[-1].sum(axis=1), 1.0)), bool(np.allclose(Phi[-1] @ Z0, z[-1])))
    True True

    References
    ----------
    :cite:`geshkovski2023emergence`
    """
    Z0 = _checks.points(Z0, "Z0")
    n, d = Z0.shape
    A = _checks.matrix(A, "A", shape=(d, d))
    t = _checks.real_array(times, "times")
    rtol, atol = _checks.positive_float(rtol, "rtol"), _checks.nonnegative_float(atol, "atol")
    if t.ndim != 1 or t.size < 1 or t[0] != 0:
        raise ValueError("times must be a 1-D array starting at 0")

    def field(s, Y):
        z = Y[:, :d]
        P = softmax(np.exp(2.0 * s) * (z @ A @ z.T), axis=1)
        return P @ Y - Y

    Y = dynamics.integrate(field, np.hstack([Z0, np.eye(n)]), t, rtol=rtol, atol=atol)
    return Y[:, :, :d], Y[:, :, d:]
