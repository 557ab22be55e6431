"""Chapter 6, the order check of the mean-field limit: a replay that does only what it needs.

The notebook (section "The masked Transformer PDE") draws, from the stream
``default_rng([SEED, 4])``, a reference of 3000 tokens and then 6 sequences of each length
n = 20, 40, 80, 160, 320, moves the reference and every sequence to T = 1, and asserts that
each of the 6 conditional distances at T for n = 20 exceeds each of the 6 for n = 320.
The assertion uses only the reference and the sequences of lengths 20 and 320; the others
are only drawn (so that the stream advances exactly as in the notebook), not moved. The
second reference (stream ``[SEED, 6]``, the floor) does not enter the assertion either.
This makes a seed about ten times cheaper than ``ch06_mean_field_limit.py``.

The replay is the notebook's assertion on the notebook's draws: ``--verify K`` first runs the
notebook's own cell for the first K seeds and checks that the 12 distances it computes equal
this script's bit for bit.

Prints one line per seed (margin log(min D_T(20) / max D_T(320)), failure or not), and at the
end the number of failures, the number of seeds and the smallest margin.

``--alternatives K`` instead runs the check's rule on K draws (streams ``[k, 99]``) where the
sequences are moved by a wrong flow while the reference is moved by the masked one: unmasked
attention, and masked attention with V multiplied by 1.1. It prints, for the correct and the two
wrong flows, min D_T(20), max D_T(320) and whether the order holds: what the check can and
cannot reject.

Usage::

    python tests/calibration/ch06_order_check.py --seeds 3000 --offset 5105 [--verify 2]
    python tests/calibration/ch06_order_check.py --alternatives 3
"""

import argparse
import time

import numpy as np
from _notebook import cell, run, setup
from transformer_pde import attention, dynamics, masked, transport

NOTEBOOK = "06_masked_attention.ipynb"
SIZES = (20, 40, 80, 160, 320)


def order_distances(seed, ns):
    """The 6 distances at T for n = 20 and for n = 320, as the notebook computes them."""
    A3, V3, curve, sigma = ns["A3"], ns["V3"], ns["curve"], ns["sigma"]
    T4 = 1.0
    gen4 = np.random.default_rng([seed, 4])
    s_ref, X_ref = masked.sample_gaussian_sequence(3000, curve, sigma, gen4)
    traj_ref = dynamics.integrate(masked.masked_field(s_ref, A3, V3), X_ref,
                                  np.linspace(0.0, T4, 11), method="rk4")
    out = {}
    for n in SIZES:
        out[n] = []
        for _ in range(6):
            s, X = masked.sample_gaussian_sequence(n, curve, sigma, gen4)
            if n in (SIZES[0], SIZES[-1]):
                XT = masked.masked_flow_map(s, A3, V3, T4)(X)
                out[n].append(transport.conditional_wasserstein(
                    s, XT, s_ref, traj_ref[-1], bins=10))
    return np.array(out[SIZES[0]]), np.array(out[SIZES[-1]])


def alternatives(draws, ns):
    """The rule on sequences moved by the right flow and by two wrong ones."""
    A3, V3, curve, sigma = ns["A3"], ns["V3"], ns["curve"], ns["sigma"]
    steps = np.linspace(0.0, 1.0, 11)
    flows = {
        "masked (correct)": lambda s, X: masked.masked_flow_map(s, A3, V3, 1.0)(X),
        "unmasked": lambda s, X: dynamics.integrate(
            lambda t, Y: attention.softmax(Y, A3, V3), X, steps, method="rk4")[-1],
        "masked, 1.1 V": lambda s, X: masked.masked_flow_map(s, A3, 1.1 * V3, 1.0)(X),
    }
    for k in range(draws):
        gen = np.random.default_rng([k, 99])
        s_ref, X_ref = masked.sample_gaussian_sequence(3000, curve, sigma, gen)
        XT_ref = masked.masked_flow_map(s_ref, A3, V3, 1.0)(X_ref)
        line = []
        for name, flow in flows.items():
            D = {n: [transport.conditional_wasserstein(s, flow(s, X), s_ref, XT_ref, bins=10)
                     for s, X in (masked.sample_gaussian_sequence(n, curve, sigma, gen)
                                  for _ in range(6))] for n in (20, 320)}
            line.append(f"{name}: min D(20) {min(D[20]):.3f}, max D(320) {max(D[320]):.3f}, "
                        f"order {'holds' if min(D[20]) > max(D[320]) else 'fails'}")
        print(f"draw {k}: " + "; ".join(line), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3000, help="number of seeds")
    parser.add_argument("--offset", type=int, default=5105,
                        help="first seed (seeds 0-199 and 5000-5104 were replayed by "
                             "ch06_mean_field_limit.py)")
    parser.add_argument("--verify", type=int, default=0,
                        help="compare with the notebook's own cell on the first K seeds")
    parser.add_argument("--alternatives", type=int, default=0,
                        help="run the rule under wrong flows on K draws instead")
    args = parser.parse_args()
    base = setup(NOTEBOOK, 0)
    run(cell(NOTEBOOK, "gaussian_sequence_field_covariance("), base)  # A3, V3, curve, sigma
    if args.alternatives:
        alternatives(args.alternatives, base)
        return
    notebook_cell = cell(NOTEBOOK, "gen4 = np.random.default_rng([SEED, 4])")
    for seed in range(args.offset, args.offset + args.verify):
        ns = dict(base, SEED=seed)
        run(notebook_cell, ns)
        small, large = order_distances(seed, ns)
        same = np.array_equal(small, ns["DTs"][0]) and np.array_equal(large, ns["DTs"][-1])
        print(f"SEED = {seed}: replay equals the notebook's cell bit for bit: {same}",
              flush=True)
        if not same:
            raise SystemExit("the replay differs from the notebook's cell")
    failures, margins, start = [], [], time.time()
    for seed in range(args.offset, args.offset + args.seeds):
        small, large = order_distances(seed, base)
        margins.append(float(np.log(small.min() / large.max())))
        ok = small.min() > large.max()
        if not ok:
            failures.append(seed)
        print(f"SEED = {seed}: margin {margins[-1]:.4f}{'' if ok else ' FAILS'}", flush=True)
    margins = np.array(margins)
    print(f"{len(failures)} failures in {args.seeds} seeds "
          f"({args.offset}..{args.offset + args.seeds - 1}): {failures}; margins: smallest "
          f"{margins.min():.3f}, mean {margins.mean():.3f}, sd {margins.std(ddof=1):.3f}; "
          f"{(time.time() - start) / args.seeds:.2f} s per seed")


if __name__ == "__main__":
    main()
