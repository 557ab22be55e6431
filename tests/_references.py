"""Independent references shared by the tests."""

import numpy as np


def fd_jacobian(f, X, h=1e-6):
    """Dense Jacobian of ``f`` at ``X`` by central differences, shape ``(n p, n d)``."""
    n, d = X.shape
    cols = []
    for c in range(n * d):
        E = np.zeros(n * d)
        E[c] = h
        E = E.reshape(n, d)
        cols.append(((f(X + E) - f(X - E)) / (2 * h)).ravel())
    return np.stack(cols, axis=1)
