"""Chapter 5, every assertion that depends on SEED: failures over many seeds.

Replays the cells of ``05_lipschitz_in_n.ipynb`` that draw from ``SEED``, in the notebook's
order (so that each seed reproduces the notebook's own draws), for SEED = 0, 1, ..., and
counts the failures of each section's assertions:

- the local constant against a finite-difference Jacobian and the secant quotients
  (random X, A, V; ``local_lipschitz`` at ``tol=1e-10`` on an 80-column Jacobian, so by
  Lanczos, against differences accurate to about 1e-10);
- tokens that coincide (stream ``[SEED, 2]``), the split against differences;
- the bounds of Theorem 1 at random and adversarial inputs (random A of fixed gamma);
- the large-radius limit (a search over ``[SEED, 4, k]`` for a configuration with argmax
  margins in [0.1, 5], and one token attended by all).

The real-text section does not depend on SEED, and the mean-field section draws nothing;
neither is replayed. For the hardmax search it also prints the largest number of draws the
search needed. For the finite-difference check it prints the largest relative gap, against
the tolerance 1e-8.

Usage::

    python tests/calibration/ch05_draws.py --seeds 200   # about 15 minutes on 2 CPUs
"""

import argparse

from _notebook import cell, run, setup

NOTEBOOK = "05_lipschitz_in_n.ipynb"
SECTIONS = {
    "local constant vs differences": ["top = lipschitz.local_lipschitz(X, A, V, tol=1e-10",
                                      "secant_random = np.array(", "J_fd = np.stack("],
    "tokens that coincide": ["rng_c = np.random.default_rng([SEED, 2])",
                             "rel_split = abs(lip_split - lip_full)"],
    "bounds of Theorem 1": ["lip_random = np.zeros((radii.size, ns.size))",
                            "ax.loglog(ns, upper[k]", "fit_adv = fit_power_law("],
    "large-radius limit": ["hard_rng = np.random.default_rng([SEED, 4, attempt])",
                           "limit_err[name] / hard_norm[name]",
                           "assert 0.1 <= margin <= 5"],
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=200, help="number of seeds")
    parser.add_argument("--offset", type=int, default=0,
                        help="first seed (SEED = offset .. offset + seeds - 1): a new offset "
                             "replays the checks on draws not used before")
    args = parser.parse_args()
    code = {name: [cell(NOTEBOOK, needle) for needle in needles]
            for name, needles in SECTIONS.items()}
    failures = {name: [] for name in SECTIONS}
    worst_fd, most_draws = 0.0, 0
    for seed in range(args.offset, args.offset + args.seeds):
        ns = setup(NOTEBOOK, seed)
        for name, cells in code.items():
            err = run(cells, ns)
            if err is not None:
                failures[name].append(seed)
                print(f"SEED = {seed}, {name}: {err!r}", flush=True)
            if name == "local constant vs differences" and "rel_dense" in ns:
                worst_fd = max(worst_fd, ns["rel_dense"],
                               abs(ns["central"][0] - ns["top"].value) / ns["top"].value)
            if name == "large-radius limit":
                most_draws = max(most_draws, ns["attempt"] + 1)
    for name, seeds in failures.items():
        print(f"{name}: {len(seeds)} failures in {args.seeds} seeds {seeds}")
    print(f"largest relative gap to the difference Jacobian: {worst_fd:.1e} (tolerance 1e-8)")
    print(f"hardmax search: at most {most_draws} draws (of 100)")


if __name__ == "__main__":
    main()
