"""A sweep of the library on a Dask cluster gives the same results as in one process.

The library fixes neither the number of jobs nor the backend of its sweeps, so
``joblib.parallel_config(backend="dask")`` sends their tasks to the workers of a
``dask.distributed`` cluster; here a local one with two worker processes.
"""

import os
from pathlib import Path

import joblib
import numpy as np
import pytest
from test_gaussian import assert_same_draws
from transformer_pde import gaussian as G

distributed = pytest.importorskip("distributed")

LIB = str(Path(G.__file__).resolve().parents[1])  # the folder that holds transformer_pde


@pytest.fixture(scope="module")
def client():
    # the worker processes import transformer_pde, wherever the tests found it
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (LIB, old) if p)
    try:
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=None) as cluster:
            with distributed.Client(cluster) as c:
                yield c
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def test_clustering_rank_draws_on_a_dask_cluster_match_the_sequential_run(client):
    serial = G.clustering_rank_draws(3, 4, np.random.default_rng(5), V="random")
    with distributed.get_task_stream(client) as stream:
        with joblib.parallel_config(backend="dask"):
            remote = G.clustering_rank_draws(3, 4, np.random.default_rng(5), V="random")
    # the runs really went to the cluster's worker processes
    assert stream.data
    assert {task["worker"] for task in stream.data} <= set(client.scheduler_info()["workers"])
    assert_same_draws(serial, remote)
