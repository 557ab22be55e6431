"""transformer_pde: the helper library of the book *Transformers as PDEs*.

Modules (one mathematical object each):

- :mod:`~transformer_pde.attention`: velocity fields of the attention variants;
- :mod:`~transformer_pde.variants`: the six variants as time-dependent fields (chapter 2);
- :mod:`~transformer_pde.dynamics`: time integration of the particle system, the rescaled
  dynamics :math:`z = e^{-tV}x`;
- :mod:`~transformer_pde.convergence_order`: local orders of a scheme at doubled depths,
  their bound from the error expansion, doubling until they settle;
- :mod:`~transformer_pde.transport`: Wasserstein distances (exact, sliced, conditional)
  through POT;
- :mod:`~transformer_pde.stability`: Gronwall rates and constants, support growth, the flow
  Jacobian of the particle system;
- :mod:`~transformer_pde.meanfield`: second moments and tail exponents of the softmax weights
  of Gaussian tokens, particle-versus-mean-field errors and their linearised limits;
- :mod:`~transformer_pde.token_sample`: the attention map of n tokens against its
  infinite-token limit, uniformly on a ball (token sample complexity, chapter 2);
- :mod:`~transformer_pde.gaussian`: mean and covariance ODEs of Gaussian solutions (a
  subpackage: ``formulas``, ``moments``, ``particles``, ``clustering``, ``steering``
  (attention plus affine MLP layers, steering schedules); every name is
  importable from ``transformer_pde.gaussian``);
- :mod:`~transformer_pde.bures`: the Bures-Wasserstein geometry of Gaussian measures;
- :mod:`~transformer_pde.symbolic`: the SymPy derivations behind them;
- :mod:`~transformer_pde.clusters`: groups of tokens, convex hulls, leaders of an attention
  matrix, many clustering runs integrated together, the time stepping of the authors' scripts;
- :mod:`~transformer_pde.polytope`: the limit polytope seen through the hardmax (the set of
  self-attending points, the hardmax cells);
- :mod:`~transformer_pde.hardmax`: the hardmax phase of the clustering dynamics (attention
  structure, settling, the hardmax flow in closed form, the softmax dynamics' deviation from it);
- :mod:`~transformer_pde.energy`: the interaction energy of self-attention in R^d, its gradient
  and the metric in which the dynamics with V = I is its gradient flow;
- :mod:`~transformer_pde.consensus`: clustering as consensus, z(t) = Phi(t) z(0) with Phi
  row-stochastic;
- :mod:`~transformer_pde.lipschitz`: Jacobian-vector products, local Lipschitz constants,
  published bounds;
- :mod:`~transformer_pde.pretrained`: all-MiniLM-L6-v2 (BERT) run in NumPy; real-text sequence
  sampling and the local Lipschitz constant of a layer's attention;
- :mod:`~transformer_pde.masked_lipschitz`: masked attention at the adversarial
  configurations, exact values against the published bounds;
- :mod:`~transformer_pde.masked`: mean-field masked (causal) attention on [0,1] x R^d;
- :mod:`~transformer_pde.causal_pair`: the first two tokens of causal attention dynamics,
  solved exactly;
- :mod:`~transformer_pde.lost_in_the_middle`: causal attention on the circle, the closed-form
  retrieval profile and its particle estimate, Rényi centres;
- :mod:`~transformer_pde.sphere`: dynamics on the unit sphere (layer normalisation), the
  interaction energy and its extremal measures;
- :mod:`~transformer_pde.sphere_stability`: linear stability of the dynamics on the sphere
  (energy Hessian, linearised flows);
- :mod:`~transformer_pde.grid_energy`: the interaction energy minimised over measures on a
  fixed grid of the sphere;
- :mod:`~transformer_pde.circle_minimiser`: the minimiser of the interaction energy on the
  circle, from its Fourier series;
- :mod:`~transformer_pde.normalisation`: six normalisation schemes (Post-LN, Pre-LN, Peri-LN,
  Mix-LN, nGPT, square-root) as speed regulation of the token directions;
- :mod:`~transformer_pde.long_context`: critical attention scaling beta_n = gamma log n for
  long contexts (equiangular outputs, their limit and transition width);
- :mod:`~transformer_pde.key_scaling`: one query among uniform keys on the sphere, the scale
  beta_n ~ n^(2/(d-1)) (collision probability of the row: exact, Poisson limit, simulation);
- :mod:`~transformer_pde.softmax_jacobian`: the Jacobian of attention at equiangular tokens
  (closed form, any n), Chen et al.'s eta, and bounds that depend on the attention map;
- :mod:`~transformer_pde.sphere_sde`: stochastic differential equations on the sphere
  (Euler-Maruyama steps, their exact weak error on the heat kernel, the noisy USA drift);
- :mod:`~transformer_pde.noisy_kuramoto`: stationary states of the noisy dynamics (Kuramoto
  order parameter, mode thresholds, K_# and beta_*, the branch on the circle);
- :mod:`~transformer_pde.cluster_merging`: two clusters on the circle under the noisy USA
  dynamics (exact centre noise, mean and law of the merge time, the particle runs);
- :mod:`~transformer_pde.random_value`: two tokens driven by random value matrices (the
  diffusion limit of their cosine, the exponents of its ends, the antipodal probability);
- :mod:`~transformer_pde.homogenized`: attention layers whose queries, keys and values are
  redrawn at every layer and head (the squared distance travelled and its homogenized limit);
- :mod:`~transformer_pde.sphere_phase`: phase diagrams of clustering on the sphere, many
  independent runs through joblib;
- :mod:`~transformer_pde.mean_shift`: the Gaussian kernel density estimate, mean shift, the
  certified count of its modes on the line and the count on the circle (chapter 9);
- :mod:`~transformer_pde.fitting`: power-law fits of rates;
- :mod:`~transformer_pde.draws`: seeded independent draws and bootstrap replicates through
  joblib (any number of jobs, any backend, the same results);
- :mod:`~transformer_pde.replicates`: pooled tests of Monte Carlo estimates against a target,
  from independent replicates at several sample sizes;
- :mod:`~transformer_pde.rates`: fitted exponents with replicate errors, decay rates, first
  passage times;
- :mod:`~transformer_pde.plotting`: the house figure style and recurring plots.

``import transformer_pde as tp`` gives every public module as an attribute (``tp.attention``,
imported on first use); ``tp.__all__`` lists them.

The machinery behind the formulas lives in private modules: ``_kernels`` (the compiled
exponential, fused softmax rows, chunks of queries, the worker threads and the thread count),
``_lanczos`` (the normal operator and the Lanczos solver of the local Lipschitz constant),
``_checks`` (input validation), ``_sphere`` (the checks shared by the modules on the sphere),
``_linalg`` (the matrix exponential of the rescaled dynamics, square roots of covariances) and
``_progress`` (the progress bar of long sweeps, shown only when the output is interactive).
A call uses as many threads as the CPUs it may run on, at most NumPy's BLAS limit, so
``threadpoolctl.threadpool_limits`` and ``OMP_NUM_THREADS`` set it; it never changes that
limit or any other setting of the process, and calls from several threads at once give the
results of the same calls made one at a time. Sweeps of independent runs go through
:class:`joblib.Parallel` and fix neither the number of jobs nor the backend: wrap them in
:func:`joblib.parallel_config` (``backend="loky"``, ``"threading"``, ``"dask"``). Long
sweeps take ``progress=None``: a progress bar when a reader watches (a terminal, a notebook
open in Jupyter), nothing at all otherwise (nbval, ``nbconvert --execute``, pytest).
"""


import importlib as _importlib
import pkgutil as _pkgutil
from types import ModuleType as _ModuleType

#: The version; ``pyproject.toml`` reads it from here (its single source).
__version__ = "0.1.0"

#: The public modules, importable as attributes of the package: ``import transformer_pde as
#: tp; tp.attention.softmax(...)`` imports :mod:`~transformer_pde.attention` on first use.
__all__ = sorted(m.name for m in _pkgutil.iter_modules(__path__)
                 if not m.name.startswith("_"))


def __getattr__(name: str) -> _ModuleType:
    """Import a public module on first access (so that the package itself imports fast)."""
    if name in __all__:
        return _importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public modules and the version: what a reader can use (``dir(tp)``)."""
    return sorted(set(__all__) | {"__version__"})
