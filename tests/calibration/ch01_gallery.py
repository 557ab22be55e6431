"""Chapter 1, gallery of variants and Sinkhorn attention: their checks on many draws.

Runs the notebook's own cells for SEED = 0..DRAWS-1: the cloud and the fields, then the checks
of the barycentre lemma; the Sinkhorn computation (POT's plans, the iterations' column
errors), then its checks. Prints the number of failing draws of each, and the largest value of
each checked quantity relative to its tolerance.
Usage: python tests/calibration/ch01_gallery.py [draws]
"""

import sys

import numpy as np
from _notebook import cell, run, setup
from joblib import Parallel, delayed

NOTEBOOK = "01_tokens_as_particles.ipynb"
DRAWS = int(sys.argv[1]) if len(sys.argv) > 1 else 300


def outcome(seed):
    namespace = setup(NOTEBOOK, seed)
    error = run([cell(NOTEBOOK, "cloud = rng.uniform"), cell(NOTEBOOK, "hulls = {name")],
                namespace)
    sinkhorn_error = run([cell(NOTEBOOK, "odd_steps, column_errors = [], []"),
                          cell(NOTEBOOK, "plan_tol = 4")], namespace)
    R, V = namespace["R"], namespace["V"]
    ratios = {
        "hull excess / 1e-12 R": max(namespace["excess"].values()) / (1e-12 * R),
        "sigmoid |b| - m R / 1e-12 R": namespace["sigmoid_excess"] / (1e-12 * R),
        "sigmoid mirror gap / tolerance":
            namespace["sigmoid_gap"] / (1e-12 * np.linalg.norm(V, 2) * R),
        "multi-head gap / 1e-12 R": namespace["multihead_gap"] / (1e-12 * R),
        "hardmax gap / bound": np.max(namespace["hardmax_gap"]
                                      / (namespace["hardmax_bound"] + 1e-12 * R)),
    }
    ns = namespace
    linear = ns["linear"]
    ratios.update({
        "Sinkhorn columns / 2e-10": ns["col_err"] / 2e-10,
        "POT and e^(2<Qx,Ky>) plan gaps / tolerance":
            max(ns["pot_gap"], ns["inner_gap"]) / ns["plan_tol"],
        "contraction ratio - lambda_2^2 (at most 1e-3)":
            np.max(ns["ratios"][linear] - ns["lam2"] ** 2),
        "Sinkhorn steps to 1e-11": ns["odd_steps"][-1],
    })
    return error is None, ratios, sinkhorn_error is None


if __name__ == "__main__":
    results = Parallel(n_jobs=-1)(delayed(outcome)(s) for s in range(DRAWS))
    fails = [s for s, r in enumerate(results) if not r[0]]
    print(f"SEED = 0..{DRAWS - 1}: {len(fails)} of {DRAWS} draws fail the gallery checks {fails}")
    fails = [s for s, r in enumerate(results) if not r[2]]
    print(f"  {len(fails)} of {DRAWS} draws fail the Sinkhorn checks {fails}")
    for name in results[0][1]:
        print(f"  largest {name}: {max(r[1][name] for r in results):.3g}")
