"""Chapter 6, lost in the middle: replay the particle checks on new draws.

Usage: python tests/calibration/ch06_lost_middle.py --seeds 40 --offset 1000

For each seed s in offset, ..., offset + seeds - 1 it redraws the notebook's particle
experiment (generator np.random.default_rng([s, 7]), the notebook's stream for SEED = s) and
prints, for lambda = 3 (smallness holds) and lambda = 0.3 (fails), the Richardson-extrapolated
ratio of particles to closed form with its standard error, the z-value (ratio - 1) / se, and
the z-values of the four bin differences that the notebook asserts by their sign. With
--closed it also prints, for lambda = 3, the number of interior minima and the end slope of
the closed form at multiples of the admissible time.
"""

import argparse

import numpy as np
from transformer_pde import lost_in_the_middle as L

BETA, T, M = 1.0, 2.0, 4.0
LAMS = {"holds": 3.0, "fails": 0.3}
SIZES = {32: 400, 64: 300}


def replay(seed):
    gen = np.random.default_rng([seed, 7])
    out = {}
    for case, lam in LAMS.items():
        r = {}
        for N, draws in SIZES.items():
            est, _ = L.particle_profile(N, draws, BETA, lam, T, gen, vocabulary=M, steps=10)
            est, pos = est[:, :-1], np.arange(1, N) / N
            r[N] = L.pooled_ratio(est, L.retrieval_correction(BETA, lam, T, pos, M), pos)
        ratio, se = 2 * r[64][0] - r[32][0], np.hypot(2 * r[64][1], r[32][1])
        out[case, "level"] = (ratio - 1) / se
        for end, window in (("first", (0.0, 0.035)), ("last", (0.9, 1.0))):
            d, s = L.bin_difference(est, pos, window, (0.1, 0.25))
            out[case, end] = d / s
        out[case, "ratio"] = (ratio, se)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--offset", type=int, default=1000)
    ap.add_argument("--closed", action="store_true")
    args = ap.parse_args()
    if args.closed:
        lhs, rhs = L.smallness(BETA, 3.0, T)
        grid = np.linspace(1e-3, 1.0, 4000)
        for f in (0.5, 1.0, 1.25, 1.5, 1.75, 2.0, 3.0):
            t = f * rhs / (lhs / T)
            s = L.retrieval_correction(BETA, 3.0, t, grid, M)
            print(f"t = {f:.2f} x admissible: interior minima {L.interior_minima(s)}, "
                  f"end slope {L.retrieval_end_slope(BETA, 3.0, t, M):+.3f}")
    rows = []
    for seed in range(args.offset, args.offset + args.seeds):
        out = replay(seed)
        rows.append(out)
        print(seed, " ".join(
            f"{case}: ratio {out[case, 'ratio'][0]:.3f}+-{out[case, 'ratio'][1]:.3f} "
            f"z_level {out[case, 'level']:+.2f} z_first {out[case, 'first']:+.1f} "
            f"z_last {out[case, 'last']:+.1f}" for case in LAMS), flush=True)
    for case in LAMS:
        for key in ("level", "first", "last"):
            z = np.array([r[case, key] for r in rows])
            print(f"{case} {key}: mean {z.mean():+.2f} sd {z.std(ddof=1):.2f} "
                  f"min {z.min():+.2f} max {z.max():+.2f}")


if __name__ == "__main__":
    main()
