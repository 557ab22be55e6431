"""Chapter 8, random tokens at initialisation and random weights: replay the checks on new draws.

Usage: python tests/calibration/ch08_velocity.py [draws] [start] [--weights [out.npz]]
       python tests/calibration/ch08_velocity.py [draws] [start] [--replicate R] [--save out.npz]

The notebook runs the velocity statistics on four independent replicates, keys [SEED, 4, n]
and [SEED, 5, d] (replicate 0) and [SEED, 4, n, r], [SEED, 5, d, r] (r = 1, 2, 3), and fails
only if two or more replicates miss a tolerance. With --replicate R the replay uses the keys
of replicate R (0 by default): the same law on other keys.

For seeds s = start .. start + draws - 1 it runs the chapter's computation with SEED = s and
records the statistics its assertions test: the fitted slope of log mean |A_j| against log n
(d = 512) and against log d (n = 2048) minus the slopes of the law-of-large-numbers value,
the largest ratio max_j |A_j| / (sqrt(log n / n) + log n / d) and, at each of the seven sizes,
the level mean_j |A_j| / sqrt(law) (the notebook requires it within 0.25 of 1; --save writes
the statistics every 25 seeds); with --weights, the
random-weight networks' Post-LN rate (t in [0, 20], 200 layers) and Pre-LN exponent (fitted
over t in [20, 40], 400 layers), one network of each per seed, keys [s, 6, 0] and [s, 7, 0]
as the notebook's SEED = s, together with beta ||Q^T K|| and the mean gap at t = 20 (the
size of the exponent's first-order correction). It prints the largest deviations and the
failures (tolerances as in the notebook); with an output file it saves the statistics every
25 seeds, so that an interrupted replay keeps what it has done. Run it single-threaded
(OMP_NUM_THREADS=1): the matrices are small and threads only contend.
"""

import sys

import numpy as np
from transformer_pde import normalisation

NS, D_FIX = np.array([32, 128, 512, 2048]), 512
DS, N_FIX = np.array([4, 8, 16]), 2048
SIZES = [(int(n), D_FIX) for n in NS] + [(N_FIX, int(d)) for d in DS]
TOL_LAW = 0.25  # |mean_j |A_j| / sqrt(law) - 1| at each of the seven sizes, as the notebook


def velocity_stats(seed, rep=0):
    """The chapter's velocity statistics for SEED = seed, replicate rep."""
    tail = [rep] if rep > 0 else []
    vel_n = [normalisation.initial_velocity([seed, 4, int(n), *tail], int(n), D_FIX)
             for n in NS]
    vel_d = [normalisation.initial_velocity([seed, 5, int(d), *tail], N_FIX, int(d))
             for d in DS]
    pred_n = np.sqrt([normalisation.velocity_prediction(int(n), D_FIX) for n in NS])
    pred_d = np.sqrt([normalisation.velocity_prediction(N_FIX, int(d)) for d in DS])
    slope_n = np.polyfit(np.log(NS), np.log([v.mean() for v in vel_n]), 1)[0]
    slope_d = np.polyfit(np.log(DS), np.log([v.mean() for v in vel_d]), 1)[0]
    pn = np.polyfit(np.log(NS), np.log(pred_n), 1)[0]
    pd = np.polyfit(np.log(DS), np.log(pred_d), 1)[0]
    bound = [v.max() / (np.sqrt(np.log(n) / n) + np.log(n) / D_FIX)
             for v, n in zip(vel_n, NS, strict=True)]
    bound += [v.max() / (np.sqrt(np.log(N_FIX) / N_FIX) + np.log(N_FIX) / d)
              for v, d in zip(vel_d, DS, strict=True)]
    law = [v.mean() / p for v, p in zip(vel_n + vel_d, np.concatenate([pred_n, pred_d]),
                                        strict=True)]
    return (slope_n - pn, slope_d - pd, max(bound), *law)


def weights_stats(seed, draws=1):
    """Post-LN rate and Pre-LN exponent of the random-weight networks for SEED = seed.

    Columns: rate - 1, exponent + 2, beta ||Q^T K||_op, mean gap at t = 20 (Pre-LN).
    """
    out = []
    beta = np.sqrt(512)
    for k in range(draws):
        post = normalisation.random_weights_run([seed, 6, k], "post", 32, 512, beta, 20.0, 200)
        pre = normalisation.random_weights_run([seed, 7, k], "pre", 32, 512, beta, 40.0, 400)
        rng = np.random.default_rng([seed, 7, k])
        Q = rng.normal(0.0, 1.0 / np.sqrt(512), (512, 512))
        K = rng.normal(0.0, 1.0 / np.sqrt(512), (512, 512))
        out.append((normalisation.fit_laws(post, "post", 0.1).rate - 1.0,
                    normalisation.fit_laws(pre, "pre", 0.1).exponent_r + 2.0,
                    beta * np.linalg.norm(Q.T @ K, 2), pre.gap[200]))
    return np.array(out)


if __name__ == "__main__":
    rep, save = 0, None
    if "--save" in sys.argv:
        i = sys.argv.index("--save")
        save = sys.argv[i + 1]
        del sys.argv[i:i + 2]
    if "--replicate" in sys.argv:
        i = sys.argv.index("--replicate")
        rep = int(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    draws = int(args[0]) if args else 100
    start = int(args[1]) if len(args) > 1 else 1000
    if "--weights" in sys.argv:
        rest = sys.argv[sys.argv.index("--weights") + 1:]
        out = rest[0] if rest else None
        rows = []
        for s in range(start, start + draws):
            rows.append(weights_stats(s))
            if out and (len(rows) % 25 == 0 or s == start + draws - 1):
                np.savez(out, stats=np.concatenate(rows), start=start)
        stats = np.concatenate(rows)
        fails = np.sum((np.abs(stats[:, 0]) >= 1e-3) | (np.abs(stats[:, 1]) >= 0.5))
        print(f"{len(stats)} runs: largest |rate - 1| {np.abs(stats[:, 0]).max():.2e}, "
              f"largest |exponent + 2| {np.abs(stats[:, 1]).max():.2e} "
              f"(sd {stats[:, 1].std():.2e}), failures {fails}")
    else:
        rows = []
        for s in range(start, start + draws):
            rows.append(velocity_stats(s, rep))
            if save and (len(rows) % 25 == 0 or s == start + draws - 1):
                np.savez(save, stats=np.array(rows), start=start, rep=rep)
        stats = np.array(rows)
        law = stats[:, 3:]
        fails = np.sum((np.abs(stats[:, 0]) >= 0.06) | (np.abs(stats[:, 1]) >= 0.1)
                       | (stats[:, 2] >= 1.0) | np.any(np.abs(law - 1.0) >= TOL_LAW, axis=1))
        print(f"replicate {rep}, {draws} seeds: mean slope_n - law {stats[:, 0].mean():+.4f}, "
              f"mean slope_d - law {stats[:, 1].mean():+.4f}; largest |slope_n - law| "
              f"{np.abs(stats[:, 0]).max():.4f} "
              f"(sd {stats[:, 0].std():.4f}), largest |slope_d - law| "
              f"{np.abs(stats[:, 1]).max():.4f} (sd {stats[:, 1].std():.4f}), largest "
              f"max|A| / bound {stats[:, 2].max():.3f}")
        for (n, d), col in zip(SIZES, law.T, strict=True):
            print(f"  n = {n}, d = {d}: mean |A_j| / sqrt(law) mean {col.mean():.4f}, "
                  f"sd {col.std():.4f}, range {col.min():.4f} to {col.max():.4f}")
        print(f"failures {fails} (tolerance {TOL_LAW:g} on |mean |A_j| / sqrt(law) - 1|)")
