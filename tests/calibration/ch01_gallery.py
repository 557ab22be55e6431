"""Chapter 1, gallery of variants: the barycentre, multi-head and hardmax checks on many draws.

Runs the notebook's own cells (the cloud and the fields, then the checks of the barycentre
lemma) for SEED = 0..DRAWS-1 and prints the number of failing draws and the largest value of
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
    return error is None, ratios


if __name__ == "__main__":
    results = Parallel(n_jobs=-1)(delayed(outcome)(s) for s in range(DRAWS))
    fails = [s for s, r in enumerate(results) if not r[0]]
    print(f"SEED = 0..{DRAWS - 1}: {len(fails)} of {DRAWS} draws fail {fails}")
    for name in results[0][1]:
        print(f"  largest {name}: {max(r[1][name] for r in results):.3g}")
