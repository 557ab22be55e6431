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
# the notebook's bins at N = 64: the first position (k = 1; (0, 0.035), with k = 2, before
# the law of tests/calibration/ch06.md), the last ones, and the low bin they are compared to
FIRST, LAST, LOW = (0.0, 0.02), (0.9, 1.0), (0.1, 0.25)


def replay(seed, save=None):
    gen = np.random.default_rng([seed, 7])
    out, arrays = {}, {}
    for case, lam in LAMS.items():
        r = {}
        for N, draws in SIZES.items():
            est, _ = L.particle_profile(N, draws, BETA, lam, T, gen, vocabulary=M, steps=10)
            est, pos = est[:, :-1], np.arange(1, N) / N
            arrays[f"{case}_{N}"] = est
            r[N] = L.pooled_ratio(est, L.retrieval_correction(BETA, lam, T, pos, M), pos)
        ratio, se = 2 * r[64][0] - r[32][0], np.hypot(2 * r[64][1], r[32][1])
        out[case, "level"] = (ratio - 1) / se
        for end, window in (("first", FIRST), ("last", LAST)):
            d, s = L.bin_difference(est, pos, window, LOW)
            out[case, end] = d / s
        out[case, "ratio"] = (ratio, se)
    if save is not None:
        np.savez(f"{save}/seed{seed}.npz", **arrays)
    return out


def _scalars(arrays):
    """Per-sequence scalars behind the five asserted statistics (each a mean over sequences)."""
    out = {}
    for case in LAMS:
        for N in SIZES:
            est, pos = arrays[f"{case}_{N}"], np.arange(1, N) / N
            closed = L.retrieval_correction(BETA, LAMS[case], T, pos, M)
            mask = (pos >= 0.25) & (pos <= 0.9)
            out[case, N, "Y"] = est[:, mask].sum(axis=1) / closed[mask].sum()
        est, pos = arrays[f"{case}_64"], np.arange(1, 64) / 64
        low = est[:, (pos >= LOW[0]) & (pos <= LOW[1])].mean(axis=1)
        for end, (a, b) in (("first", FIRST), ("last", LAST)):
            out[case, 64, end] = est[:, (pos >= a) & (pos <= b)].mean(axis=1) - low
    return out


def _flat(arrays, gen):
    """The same sequences with their positions permuted at random: a flat profile."""
    return {k: gen.permuted(v, axis=1) for k, v in arrays.items()}


def _checks_fail(y64, y32, xs):
    """Which of the notebook's five statistical assertions fail, for stacked resamples.

    y64, y32: (R, n) per-sequence pooled ratios for lambda = 3; xs: dict of (R, n)
    per-sequence bin differences keyed by (case, end). Returns a (R, 5) boolean array."""
    n64, n32 = y64.shape[1], y32.shape[1]
    ratio = 2 * y64.mean(axis=1) - y32.mean(axis=1)
    se = np.sqrt(4 * y64.var(axis=1, ddof=1) / n64 + y32.var(axis=1, ddof=1) / n32)
    fails = [np.abs(ratio - 1) > 6 * se]
    for (case, end), x in xs.items():
        sign = -1 if (case, end) == ("fails", "last") else 1
        fails.append(~(sign * x.mean(axis=1) > 0))
    return np.stack(fails, axis=1)


def law(folder, resamples=10**6, chunk=10**4, level_extra=None):
    """Normal law of the five statistics from the pooled sequences of the kept seeds, its
    finite-n check by resampling, the replays' z-values against it, and the power.

    level_extra: a folder of further kept seeds whose runs only add to the estimate of the
    level's centre (the remainder of the Richardson combination) and of its uncertainty."""
    from pathlib import Path

    from scipy import stats

    files = sorted(Path(folder).glob("seed*.npz"))
    per_seed = [_scalars(dict(np.load(f))) for f in files]
    extra = []
    if level_extra is not None:
        extra = [_scalars(dict(np.load(f))) for f in sorted(Path(level_extra).glob("seed*.npz"))]
    keys = list(per_seed[0])
    pooled = {k: np.concatenate([p[k] for p in per_seed]) for k in keys}
    n = {N: d for N, d in SIZES.items()}
    print(f"{len(files)} seeds ({files[0].stem} ... {files[-1].stem}), "
          f"{pooled['holds', 64, 'Y'].size} sequences of N = 64 and "
          f"{pooled['holds', 32, 'Y'].size} of N = 32 per slope")
    for k in keys:
        x = pooled[k]
        z = (x - x.mean()) / x.std(ddof=1)
        print(f"{k[0]:5} N={k[1]} {k[2]:5}: mean {x.mean():+.4f} sd {x.std(ddof=1):.4f} "
              f"skew {stats.skew(x):+.2f} exkurt {stats.kurtosis(x):.2f} "
              f"standardised range {z.min():+.1f} to {z.max():+.1f}")
    # (1) the normal law with the pooled moments (n = the notebook's sequence counts)
    print("normal law (CLT for means of the notebook's 300 / 400 independent sequences):")
    total, total_pess = 0.0, 0.0
    m = {k: pooled[k].mean() for k in keys}
    v = {k: pooled[k].var(ddof=1) for k in keys}
    mu3 = {k: np.mean((pooled[k] - m[k]) ** 3) for k in keys}
    mu4 = {k: np.mean((pooled[k] - m[k]) ** 4) for k in keys}
    a, b = ("holds", 64, "Y"), ("holds", 32, "Y")
    s2 = 4 * v[a] / n[64] + v[b] / n[32]
    s = np.sqrt(s2)
    # delta method for se-hat, and for the two limits R - 1 -+ 6 se-hat
    var_s = (16 * (mu4[a] - v[a] ** 2) / n[64] ** 3
             + (mu4[b] - v[b] ** 2) / n[32] ** 3) / (4 * s2)
    cov_rs = (8 * mu3[a] / n[64] ** 2 - mu3[b] / n[32] ** 2) / (2 * s)
    # per-seed estimates of the centre give its uncertainty (every seed has the same
    # numbers of sequences, so their mean is the pooled estimate)
    seeds_c = np.array([2 * p[a].mean() - p[b].mean() - 1 for p in per_seed + extra])
    centre, se_c = seeds_c.mean(), seeds_c.std(ddof=1) / np.sqrt(seeds_c.size)
    if extra:
        print(f"  level centre from {seeds_c.size} seeds ({len(extra)} of them only for it); "
              f"the kept seeds alone: {seeds_c[:len(files)].mean():+.4f}, the others "
              f"{seeds_c[len(files):].mean():+.4f}")
    for label, c in (("fitted", centre), ("pessimistic", centre - 2 * se_c)):
        lo = (c + 6 * s) / np.sqrt(s2 + 36 * var_s + 12 * cov_rs)
        hi = (6 * s - c) / np.sqrt(s2 + 36 * var_s - 12 * cov_rs)
        p = stats.norm.sf(lo) + stats.norm.sf(hi)
        print(f"  level, {label}: ratio - 1 = {c:+.4f} (+- {se_c:.4f}), s.e. {s:.4f}, "
              f"= {c / s:+.2f} s.e.; lower limit {lo:.2f} sd away, upper {hi:.2f}: "
              f"P = {p:.2e}")
        if label == "fitted":
            total += p
        else:
            total_pess += p
    for case in LAMS:
        for end in ("first", "last"):
            k = (case, 64, end)
            sign = -1 if (case, end) == ("fails", "last") else 1
            delta = sign * m[k] / np.sqrt(v[k] / n[64])
            d_seed = np.array([sign * p[k].mean() for p in per_seed])
            se_d = d_seed.std(ddof=1) / np.sqrt(len(files)) / np.sqrt(v[k] / n[64])
            g = stats.skew(pooled[k]) * sign
            # one-term Edgeworth correction to P(mean < 0) = P(standardised mean < -delta):
            # -phi(delta) g (delta^2 - 1) / (6 sqrt(n)), g the skewness of one sequence
            edge = -stats.norm.pdf(delta) * g / (6 * np.sqrt(n[64])) * (delta**2 - 1)
            p, pp = stats.norm.sf(delta), stats.norm.sf(delta - 2 * se_d)
            print(f"  {case} {end}: {delta:.2f} s.e. from zero (+- {se_d:.2f}); "
                  f"P = {p:.2e}, pessimistic {pp:.2e}; Edgeworth term {edge:+.1e}")
            total += p
            total_pess += pp + max(edge, 0.0)  # only a correction that raises it
    print(f"  sum: {total:.2e} fitted, {total_pess:.2e} pessimistic (with the Edgeworth "
          "terms that raise it)")
    q = np.mean(pooled["holds", 64, "first"] > 0)
    print(f"  (a sign test instead: one sequence's first - low is positive with probability "
          f"{q:.3f}; 300 signs put the count {(q - 0.5) * np.sqrt(n[64]) / 0.5:.2f} sd above "
          "the flat profile's)")
    # (2) resampling: the notebook's checks on sequences drawn from the pooled ones
    gen = np.random.default_rng(12345)
    xs_keys = [(c, e) for c in LAMS for e in ("first", "last")]
    fails = np.zeros(5, dtype=np.int64)
    anyf = 0
    for _ in range(resamples // chunk if resamples else 0):
        i64 = gen.integers(0, pooled[a].size, size=(chunk, n[64]))
        i32 = gen.integers(0, pooled[b].size, size=(chunk, n[32]))
        j64 = gen.integers(0, pooled[a].size, size=(chunk, n[64]))
        xs = {(c, e): pooled[c, 64, e][i64 if c == "holds" else j64] for c, e in xs_keys}
        f = _checks_fail(pooled[a][i64], pooled[b][i32], xs)
        fails += f.sum(axis=0)
        anyf += int(f.any(axis=1).sum())
    print(f"resampling {resamples} runs from the pooled sequences: failures of "
          f"(level, holds first, holds last, fails first, fails last) = {fails.tolist()}, "
          f"any {anyf}")
    # (3) the replays against the law: each seed's z-value of each check, the law's own
    # (the mean standardised by the pooled one-sequence sd) and a KS test of their difference
    seeds = [int(f.stem[4:]) for f in files]
    zl = np.array([(2 * p[a].mean() - p[b].mean() - 1) / np.sqrt(
        4 * p[a].var(ddof=1) / n[64] + p[b].var(ddof=1) / n[32]) for p in per_seed])
    rows = [("level", zl, centre / s)]
    for case, end in xs_keys:
        k = (case, 64, end)
        # the law is for the mean: standardised by the pooled sd (the sign is that of the mean)
        z = np.array([p[k].mean() / np.sqrt(v[k] / n[64]) for p in per_seed])
        rows.append((f"{case} {end}", z, m[k] / np.sqrt(v[k] / n[64])))
    for name, zz, mean_law in rows:
        ks = stats.kstest(zz - mean_law, "norm")
        worst = int(np.argmin(np.abs(zz))) if name != "level" else int(np.argmin(zz))
        print(f"replays, z of {name}: mean {zz.mean():+.2f} (law {mean_law:+.2f}), "
              f"sd {zz.std(ddof=1):.2f} (law 1), nearest the edge {zz[worst]:+.2f} "
              f"(seed {seeds[worst]}); KS against N(law, 1): p = {ks.pvalue:.2f}")
    # (4) power against a flat profile (positions permuted within each sequence), by the
    # normal law with the pooled covariance of the two differences of one slope
    flat = [_scalars(_flat(dict(np.load(f)), gen)) for f in files]
    for case in LAMS:
        x1 = np.concatenate([p[case, 64, "first"] for p in flat])
        x2 = np.concatenate([p[case, 64, "last"] for p in flat])
        rho = np.corrcoef(x1, x2)[0, 1]
        sign = 1 if case == "holds" else -1
        both = 0.25 + sign * np.arcsin(rho) / (2 * np.pi)
        print(f"flat profile, lambda = {LAMS[case]:g}: means {x1.mean():+.3f}, "
              f"{x2.mean():+.3f} (sd of one sequence {x1.std():.2f}, {x2.std():.2f}), "
              f"correlation {rho:+.2f}: both signs pass with probability {both:.3f}")
    # (5) power of the level check against a level error e (all particle values times 1 + e)
    for e in (-0.3, -0.2, -0.1, 0.1, 0.2, 0.3):
        c = (1 + e) * (centre + 1) - 1
        se_e = (1 + e) * s
        p_pass = stats.norm.cdf((6 * se_e - c) / se_e) - stats.norm.cdf((-6 * se_e - c) / se_e)
        print(f"level error {e:+.1f}: the level check passes with probability {p_pass:.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--offset", type=int, default=1000)
    ap.add_argument("--closed", action="store_true")
    ap.add_argument("--save", metavar="DIR", help="keep each seed's per-sequence estimates")
    ap.add_argument("--law", metavar="DIR", help="only analyse the estimates kept in DIR")
    ap.add_argument("--level-extra", metavar="DIR",
                    help="with --law: seeds kept in DIR also enter the level's centre")
    ap.add_argument("--resamples", type=int, default=10**6,
                    help="with --law: resampled runs (0 skips the resampling)")
    args = ap.parse_args()
    if args.law:
        law(args.law, resamples=args.resamples, level_extra=args.level_extra)
        return
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
        out = replay(seed, args.save)
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
