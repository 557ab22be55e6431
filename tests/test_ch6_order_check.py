"""Chapter 6's order check of the mean-field limit, against independent references.

The notebook (section "The masked Transformer PDE") measures the binned conditional distance
``transport.conditional_wasserstein`` of 6 sequences of each size n = 20, ..., 320 to a
reference sequence and asserts that each of the 6 distances at n = 20 exceeds each of the 6
at n = 320. These tests check

* the distance itself against two references that do not use the library's transport
  solver: the quantile formula of W_2 on the line, and an optimal assignment (scipy's
  Hungarian solver) between bins holding equally many tokens;
* that the order holds when the sequences approach the reference, on the notebook's law of
  tokens (the Gaussian sequences around the circle, sigma = 0.35, at t = 0, where the
  distance is that of the samples themselves);
* a property of the order rule, not of the library or the notebook: on exchangeable values
  (distances that do not decrease with n) the order has probability 1 / C(12, 6) = 1 / 924,
  and over 300 repetitions it holds at most 3 times (expected 0.32; P(>= 4) < 5e-4 for a
  binomial(300, 1/924); the seed is fixed, so the test is deterministic). This part cannot
  fail whatever the distance computes (any function of i.i.d. samples gives exchangeable
  values), and it applies this file's copy of the rule, not the notebook's assertion; it
  does not show that the check rejects sequences that fail to approach the reference
  through the flow. The second part runs at t = 0, without the flow.
"""

from math import comb

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from transformer_pde import masked
from transformer_pde import transport as tr

SIGMA = 0.35


def quantile_w2(x, y):
    """W_2 between the uniform measures on the reals x and y, from their quantile functions:
    the integral over u in (0, 1) of (F^-1(u) - G^-1(u))^2, piecewise constant between the
    merged breakpoints k / len(x) and l / len(y)."""
    x, y = np.sort(x), np.sort(y)
    cuts = np.union1d(np.arange(len(x) + 1) / len(x), np.arange(len(y) + 1) / len(y))
    mids = (cuts[:-1] + cuts[1:]) / 2
    fx = x[np.minimum((mids * len(x)).astype(int), len(x) - 1)]
    fy = y[np.minimum((mids * len(y)).astype(int), len(y) - 1)]
    return float(np.sqrt(np.sum(np.diff(cuts) * (fx - fy) ** 2)))


def bins_of(s, bins):
    """Bin index of each position: [k/B, (k+1)/B), the last bin closed (written as a loop)."""
    out = []
    for value in s:
        k = int(np.floor(value * bins))
        out.append(min(k, bins - 1))
    return np.array(out)


def reference_conditional(s, X, t, Y, bins, pair_distance):
    total = 0.0
    bx, by = bins_of(s, bins), bins_of(t, bins)
    for k in range(bins):
        total += pair_distance(X[bx == k], Y[by == k]) ** 2 / bins
    return np.sqrt(total)


def assignment_w2(X, Y):
    cost = np.sum((X[:, None, :] - Y[None, :, :]) ** 2, axis=2)
    rows, cols = linear_sum_assignment(cost)
    return float(np.sqrt(cost[rows, cols].mean()))


def test_distance_matches_quantile_formula_on_the_line():
    # random positions (none on a bin edge: the library's edges come from np.linspace, so
    # a position k / 10 itself may fall on either side of its edge by rounding)
    rng = np.random.default_rng(60)
    for n, m in ((120, 300), (150, 3000), (320, 3000)):
        s, t = rng.uniform(size=n), rng.uniform(size=m)
        X, Y = rng.normal(size=(n, 1)), 0.5 + 2.0 * rng.normal(size=(m, 1))
        expected = reference_conditional(s, X[:, 0], t, Y[:, 0], 10, quantile_w2)
        got = tr.conditional_wasserstein(s, X, t, Y, bins=10)
        assert got == pytest.approx(expected, rel=1e-9)


def test_distance_matches_optimal_assignment_in_the_plane():
    # positions (i - 1/2) / n, none on a bin edge, put n / 10 tokens in every bin
    rng = np.random.default_rng(61)
    n = 80
    s = (np.arange(n) + 0.5) / n
    for shift in (0.0, 0.7):
        X = masked.circle_curve(s) + SIGMA * rng.normal(size=(n, 2))
        Y = masked.circle_curve(s) + SIGMA * rng.normal(size=(n, 2)) + shift
        expected = reference_conditional(s, X, s, Y, 10, assignment_w2)
        assert tr.conditional_wasserstein(s, X, s, Y, bins=10) == pytest.approx(
            expected, rel=1e-9)


def order_holds(small, large):
    """The notebook's check: each distance of the small sequences above each of the large."""
    return bool(np.min(small) > np.max(large))


def distances(rng, sizes, reference, repeats=6):
    s_ref, X_ref = reference
    return np.array([[tr.conditional_wasserstein(
        *masked.sample_gaussian_sequence(n, masked.circle_curve, SIGMA, rng), s_ref, X_ref,
        bins=10) for _ in range(repeats)] for n in sizes])


def test_order_holds_when_the_sequences_approach_the_reference():
    rng = np.random.default_rng(62)
    for _ in range(5):
        reference = masked.sample_gaussian_sequence(3000, masked.circle_curve, SIGMA, rng)
        D = distances(rng, (20, 320), reference)
        assert order_holds(D[0], D[1]), D


def test_order_rule_holds_rarely_on_exchangeable_distances():
    # a property of the rule, not of the library: both groups have 20 tokens, so the 12
    # distances are exchangeable whatever conditional_wasserstein computes; this cannot fail
    # for any distance function of i.i.d. samples and is no power test through the flow
    rng = np.random.default_rng(63)
    reference = masked.sample_gaussian_sequence(600, masked.circle_curve, SIGMA, rng)
    trials = 300
    passed = sum(order_holds(*distances(rng, (20, 20), reference)) for _ in range(trials))
    assert comb(12, 6) == 924
    assert passed <= 3, passed
