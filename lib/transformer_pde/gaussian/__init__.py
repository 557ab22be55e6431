r"""Gaussian solutions of the Transformer PDE: the ODEs of the mean and the covariance.

For softmax, L2, Sinkhorn and multi-head attention, the velocity field of a Gaussian
:math:`\mu = \mathcal N(\alpha, \Sigma)` is *affine*, :math:`\Gamma_\mu(x) = M x + b` with
:math:`(M, b)` depending on :math:`(\alpha, \Sigma)` only. An affine field pushes a Gaussian to a
Gaussian, so :math:`\mu(t) = \mathcal N(\alpha(t), \Sigma(t))` with

.. math::

    \dot\alpha = M \alpha + b, \qquad \dot\Sigma = M \Sigma + \Sigma M^\top

(Castin, Ablin, Carrillo and Peyré, 2025). The ``*_field`` functions return :math:`(M, b)`,
the ``*_rhs`` functions return :math:`(\dot\alpha, \dot\Sigma)`. The derivations (completing
the square, the Gaussian entropic transport plan) are in :mod:`transformer_pde.symbolic` and
in the chapter "Gaussian initial data".

:func:`integrate_moments` integrates these ODEs. For the fields of this module it integrates
a *factor* :math:`L` with :math:`\Sigma = L L^\top` and :math:`\dot L = M L` (the linear part of
the particles' flow map applied to :math:`\Sigma_0^{1/2}`), so :math:`\Sigma(t)` is symmetric
positive semi-definite by construction, with no projection step. It stops on blow-up
(reporting the time) and on convergence of :math:`\Sigma` (reporting the limit and its
numerical rank).

:func:`particle_moment_rates`, :func:`replicate_z_scores` and :func:`rms_error_rate` compare
these ODEs with particles: the exact moment rates of a particle system, a :math:`z`-test over
independent replicates, and the decay exponent of a Monte Carlo error with a replicate-based
standard error.

Parameters follow :mod:`transformer_pde.attention`: ``A = K.T @ Q`` (``(d, d)``), ``Q`` and
``K`` of shape ``(k, d)``, and here ``V`` of shape ``(d, d)`` (the dynamics lives in
:math:`\mathbb R^d`).

The subpackage is split by concept; every public name is importable from
``transformer_pde.gaussian`` itself (``gaussian.integrate_moments``), which is how the chapters
call them:

- :mod:`~transformer_pde.gaussian.formulas`: the affine fields, the right-hand sides, the
  closed-form solution for softmax attention with :math:`V = I`, the cone picture and the
  Lyapunov functions;
- :mod:`~transformer_pde.gaussian.moments`: the integrator :func:`integrate_moments` and its
  result :class:`MomentTrajectory`;
- :mod:`~transformer_pde.gaussian.particles`: the comparison with particles (moment rates,
  replicate :math:`z`-scores, error exponents);
- :mod:`~transformer_pde.gaussian.clustering`: the limiting-rank sweep through joblib and the
  reading of the limit's rank;
- :mod:`~transformer_pde.gaussian.steering`: attention plus an affine MLP layer (moment ODE,
  closed form for :math:`V = I`, the regimes of :math:`W = wI`), piecewise-constant schedules
  that steer one Gaussian to another, run on the moment ODE and on (Gauss–Hermite) particles,
  and the rotation regime of :math:`V = J`;
- :func:`psd_sqrt` and :func:`numerical_rank` (small linear algebra shared with
  :mod:`~transformer_pde.bures` and :mod:`~transformer_pde.meanfield`) and the tolerances
  :data:`SYMMETRY_TOL`, :data:`PSD_TOL` of a valid covariance come from the library's private
  helpers.
"""

from .._checks import PSD_TOL, SYMMETRY_TOL
from .._linalg import numerical_rank, psd_sqrt
from .clustering import (
    ClusteringDraw,
    RankReading,
    clustering_rank_draws,
    read_limit_rank,
)
from .formulas import (
    affine_moments_rhs,
    cone_coordinates,
    covariance_from_cone,
    l2_field,
    l2_growth_rate_bound,
    l2_rhs,
    multihead_field,
    multihead_rhs,
    sinkhorn_field,
    sinkhorn_plan_cross_covariance,
    sinkhorn_rhs,
    sinkhorn_rhs_published,
    softmax_field,
    softmax_identity_blowup_time,
    softmax_identity_covariance,
    softmax_identity_limit,
    softmax_lyapunov,
    softmax_rhs,
)
from .moments import (
    MomentTrajectory,
    integrate_moments,
)
from .particles import (
    moment_vector,
    particle_moment_rates,
    particle_moment_samples,
    relative_squared_errors,
    replicate_z_scores,
    rms_error_rate,
)
from .steering import (
    Segment,
    Steering,
    gauss_hermite_measure,
    harmonic_covariance,
    harmonic_steering_matrix,
    identity_mlp_covariance,
    mean_rotation_value,
    rotation_covariance,
    scalar_mlp_regime,
    schedule_moments,
    schedule_particles,
    schedule_trajectory,
    softmax_mlp_field,
    softmax_mlp_rhs,
    steer_gaussian,
    weighted_moments,
)

__all__ = [
    "MomentTrajectory",
    "affine_moments_rhs",
    "softmax_field",
    "softmax_rhs",
    "l2_field",
    "l2_rhs",
    "sinkhorn_field",
    "sinkhorn_rhs",
    "sinkhorn_plan_cross_covariance",
    "sinkhorn_rhs_published",
    "multihead_field",
    "multihead_rhs",
    "softmax_identity_covariance",
    "softmax_identity_blowup_time",
    "softmax_identity_limit",
    "numerical_rank",
    "particle_moment_rates",
    "replicate_z_scores",
    "rms_error_rate",
    "psd_sqrt",
    "integrate_moments",
    "moment_vector",
    "particle_moment_samples",
    "relative_squared_errors",
    "cone_coordinates",
    "covariance_from_cone",
    "softmax_lyapunov",
    "l2_growth_rate_bound",
    "ClusteringDraw",
    "clustering_rank_draws",
    "RankReading",
    "read_limit_rank",
    "SYMMETRY_TOL",
    "PSD_TOL",
    "Segment",
    "Steering",
    "gauss_hermite_measure",
    "harmonic_covariance",
    "harmonic_steering_matrix",
    "identity_mlp_covariance",
    "mean_rotation_value",
    "rotation_covariance",
    "scalar_mlp_regime",
    "schedule_moments",
    "schedule_particles",
    "schedule_trajectory",
    "softmax_mlp_field",
    "softmax_mlp_rhs",
    "steer_gaussian",
    "weighted_moments",
]
