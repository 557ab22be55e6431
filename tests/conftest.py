"""Test configuration: property tests are deterministic (same examples on every run, no
example database written into the tree), so a failure reproduces exactly.

POT (imported by :mod:`transformer_pde.transport`) loads PyTorch at import when it is
installed (the benchmarks' environment), which costs seconds in the test process and in
every joblib worker and notebook kernel it starts; no test uses POT's PyTorch backend, so
the tests turn it off (the variable is inherited by the workers and kernels)."""

import os

from hypothesis import settings

os.environ.setdefault("POT_BACKEND_DISABLE_PYTORCH", "1")

settings.register_profile("book", derandomize=True, database=None, deadline=None)
settings.load_profile("book")
