"""Test configuration: property tests are deterministic (same examples on every run, no
example database written into the tree), so a failure reproduces exactly."""

from hypothesis import settings

settings.register_profile("book", derandomize=True, database=None, deadline=None)
settings.load_profile("book")
