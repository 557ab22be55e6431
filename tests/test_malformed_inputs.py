"""Every public function of every public module, driven with malformed inputs.

Each function has a valid call (:data:`VALID`, built from the parameter names shared across
the package, :data:`COMMON`, with per-function entries where a name means something else).
One argument at a time is then replaced by a malformed value derived from the valid one and
its annotation: complex where real is expected, NaN or inf entries, bools where numbers are
expected and non-bools where bools are, strings, ``None``, negative or ``None`` seeds, wrong
shapes, empty arrays. The call must then raise a ``ValueError`` or ``TypeError`` whose message
names the argument, or return a finite result; a ``ComplexWarning`` (a silent truncation), a
``RuntimeWarning`` (overflow, invalid value) or a NaN/inf return is a failure. Hypothesis
chooses where the NaN or inf goes and the imaginary part of the complex values.
"""

import dataclasses
import inspect
import signal
import warnings

import numpy as np
import pytest
import transformer_pde as tp
from hypothesis import Phase, given, settings
from hypothesis import strategies as st


class Fresh:
    """A value built anew for each call (a generator, a fitted object)."""

    def __init__(self, make):
        self.make = make


def _rng():
    return Fresh(lambda: np.random.default_rng(0))


ANGLES = np.array([0.1, 0.9, 2.0, 4.0])
X4 = np.stack([np.cos(ANGLES), np.sin(ANGLES)], axis=1)  # four unit vectors of R^2
A2 = np.array([[1.0, 0.2], [0.2, 0.8]])
V2 = np.array([[1.0, 0.0], [0.3, 1.0]])
SPD = np.array([[1.0, 0.2], [0.2, 0.5]])
TIMES = np.linspace(0.0, 1.0, 5)
SQERR = np.array([[1.0, 1.1], [0.5, 0.52], [0.26, 0.24]])  # (sizes, draws)
C0 = np.array([0.3, 0.1])

#: Valid values of the parameter names the package shares.
COMMON = {
    "X": X4, "Y": X4[::-1].copy(), "X0": X4, "Z": X4, "Z0": X4, "points": X4,
    "A": A2, "V": V2, "Q": A2, "K": V2, "D": np.diag([1.0, 0.5]), "M": A2,
    "As": np.stack([A2, V2]), "Vs": np.stack([V2, A2]),
    "E": 0.1 * X4, "G": 0.1 * X4, "W": 0.5 * A2, "b": np.array([0.1, 0.0]),
    "alpha": np.array([0.1, -0.2]), "Sigma": SPD, "alpha0": np.array([0.1, -0.2]),
    "Sigma0": SPD, "alpha1": np.array([0.0, 0.3]), "Sigma1": np.diag([0.6, 0.9]),
    "times": TIMES, "t": 0.5, "T": 1.0, "h": 0.1, "L": 3,
    "n": 4, "d": 2, "beta": 1.0, "rho": 0.3, "rho0": 0.3, "R": 1.0, "gamma": 0.5, "lam": 1.0,
    "kappa": 0.5, "dt": 0.01, "ell": 2, "tol": 1e-6, "seed": 0, "rng": _rng(),
    "gen": _rng(), "model": "sa", "sizes": np.array([4, 8, 16]), "draws": 2,
    "n_jobs": 1, "progress": False,
}

SEGMENTS = Fresh(lambda: [tp.gaussian.Segment(0.5, -np.eye(2), np.eye(2))])

#: Per-function valid arguments (``"module.function"``), where the common ones do not fit.
VALID = {
    # attention, lipschitz: the common X, A, V
    "bures.wasserstein2": dict(alpha1=np.zeros(2), Sigma1=SPD, alpha2=np.ones(2),
                               Sigma2=np.eye(2)),
    "bures.tangent_matrix": dict(dSigma=0.1 * np.eye(2)),
    "bures.metric_speed": dict(dalpha=np.array([0.1, 0.2]), dSigma=0.1 * np.eye(2)),
    "bures.chord_and_length": dict(rhs=Fresh(lambda: tp.gaussian.softmax_rhs),
                                   args=(0.3 * A2, V2)),
    "causal_pair.pair_distance_bound": dict(x1=X4[0], x2=X4[1]),
    "causal_pair.pair_rate_band": dict(delta=0.1),
    "causal_pair.pair_decay": dict(X0=X4[:2], times=np.linspace(0.0, 2.0, 5)),
    "causal_pair.leader_pair_bound": dict(z1=X4[0], z2=X4[1]),
    "circle_minimiser.circle_minimiser": dict(beta=1.0),
    "clusters.group": dict(tol=0.1),
    "clusters.in_hull": dict(points=0.1 * X4, hull_points=X4),
    "clusters.rescaled_attention_matrix": dict(t=0.5),
    "clusters.integrate_draws": dict(Z0=X4[None], times=np.linspace(0.0, 0.5, 3)),
    "clusters.scripts_scheme": dict(times=np.linspace(0.0, 0.5, 3)),
    "clusters.leaders": dict(P=np.array([[0.0, 1.0], [0.0, 1.0]]), tol=1e-6),
    "clusters.is_boolean": dict(P=np.array([[0.0, 1.0], [0.0, 1.0]]), tol=1e-6),
    "cluster_merging.pair_force": dict(delta=np.array([0.5, 2.0])),
    "cluster_merging.deterministic_merge_time": dict(delta0=2.0, a=0.5),
    "cluster_merging.mean_merge_time": dict(delta0=2.0, m_a=2, m_b=2, a=0.5, grid=64),
    "cluster_merging.merge_survival": dict(delta0=2.0, m_a=2, m_b=2, a=0.5, grid=32),
    "cluster_merging.simulate_two_groups": dict(delta0=2.0, m_a=2, m_b=2, steps=3,
                                                systems=2),
    "consensus.transition_matrix": dict(times=np.linspace(0.0, 0.5, 3)),
    "convergence_order.local_orders": dict(errors=np.array([1e-1, 2.6e-2, 6.3e-3, 1.6e-3])),
    "convergence_order.order_bounds": dict(errors=np.array([1e-1, 2.6e-2, 6.3e-3, 1.6e-3])),
    "convergence_order.settle_order": dict(error_at=lambda L: 1.0 / L ** 2, order=2.0,
                                           max_depth=64),
    "draws.map_keys": dict(task=lambda key: float(key[-1]), keys=[[0, 1], [0, 2]]),
    "draws.bootstrap": dict(statistic=np.mean, samples=[np.arange(6.0)], n_boot=3),
    "dynamics.integrate": dict(field=lambda t, X: -X, times=np.linspace(0.0, 0.5, 3)),
    "dynamics.residual_stack": dict(field=lambda t, X: -X),
    "dynamics.attention_field": dict(attention=Fresh(lambda: tp.attention.softmax),
                                     params={}),
    "dynamics.rescale": dict(trajectory=np.stack([X4, X4, X4, X4, X4])),
    "dynamics.rescaled_field": dict(field=None, A=A2),
    "energy.energy_balance": dict(z=np.stack([X4, 0.9 * X4, 0.8 * X4]),
                                  t=np.array([0.0, 0.1, 0.2]), A=np.eye(2)),
    "fitting.fit_power_law": dict(x=np.array([1.0, 2.0, 4.0, 8.0]),
                                  y=np.array([1.0, 0.5, 0.26, 0.12])),
    "fitting.jackknife_exponent": dict(x=np.array([1.0, 2.0, 4.0, 8.0]),
                                       Y=np.array([[1.0, 0.5, 0.26, 0.12],
                                                   [1.1, 0.52, 0.24, 0.13],
                                                   [0.9, 0.47, 0.25, 0.125]])),
    "fitting.log_error_rate": dict(sizes=np.array([4, 8, 16]), squared_errors=SQERR),
    "fitting.batch_rates": dict(sizes=np.array([4, 8, 16]), squared_errors=SQERR,
                                batches=2),
    "fitting.jackknife_difference": dict(first=Fresh(lambda: _jackknife()),
                                         second=Fresh(lambda: _jackknife(0.9))),
    "energy.energy_identity_gap": dict(Z0=X4[None]),
    "gaussian.softmax_identity_covariance": dict(A=-np.eye(2), t=0.5),
    "gaussian.softmax_identity_blowup_time": dict(A=np.eye(2)),
    "gaussian.softmax_identity_limit": dict(A=-np.eye(2)),
    "gaussian.particle_moment_rates": dict(velocities=0.1 * X4),
    "gaussian.replicate_z_scores": dict(samples=np.array([[1.0, 1.1, 0.9], [1.2, 0.8, 1.0]]),
                                        target=np.array([1.0, 1.0, 1.0])),
    "gaussian.rms_error_rate": dict(ns=np.array([4, 8, 16]), squared_errors=SQERR),
    "gaussian.read_limit_rank": dict(run=Fresh(lambda: _moment_run()), P=np.eye(2)),
    "gaussian.schedule_moments": dict(segments=SEGMENTS),
    "gaussian.schedule_particles": dict(segments=SEGMENTS),
    "gaussian.schedule_trajectory": dict(segments=SEGMENTS, points=3),
    "hardmax.hardmax_deviation": dict(W=Fresh(lambda: _synthetic()[0]),
                                      times=Fresh(lambda: _synthetic()[1]),
                                      P=Fresh(lambda: _synthetic()[2]), target=[0, 0, 2],
                                      lam=1.0, start=0),
    "gaussian.psd_sqrt": dict(S=SPD),
    "gaussian.integrate_moments": dict(rhs=Fresh(lambda: tp.gaussian.softmax_rhs),
                                       times=np.linspace(0.0, 0.2, 3), args=(0.3 * A2, V2)),
    "gaussian.moment_vector": dict(dalpha=np.array([0.1, 0.2]), dSigma=0.1 * np.eye(2)),
    "gaussian.particle_moment_samples": dict(
        velocity=Fresh(lambda: lambda X: -X), ns=np.array([4, 8]), reps=2),
    "gaussian.relative_squared_errors": dict(samples=np.array([[1.0, 1.1], [1.2, 0.8]]),
                                             target=np.array([1.0, 1.0])),
    "gaussian.covariance_from_cone": dict(u=1.0, w=0.5, v=0.2),
    "gaussian.softmax_lyapunov": dict(V=np.eye(2)),
    "gaussian.clustering_rank_draws": dict(n_draws=1, times=np.linspace(0.0, 1.0, 4)),
    "gaussian.gauss_hermite_measure": dict(m=3),
    "gaussian.harmonic_covariance": dict(duration=1.0, t=0.5),
    "gaussian.identity_mlp_covariance": dict(A=-np.eye(2), W=0.1 * np.eye(2), t=0.5),
    "gaussian.mean_rotation_value": dict(alpha_from=np.array([1.0, 0.0]),
                                         alpha_to=np.array([0.0, 2.0])),
    "gaussian.rotation_covariance": dict(t=0.5),
    "gaussian.scalar_mlp_regime": dict(A=-np.eye(2), w=0.5),
    "grid_energy.energy_gap": dict(Y=X4, weights=np.full(4, 0.25)),
    "grid_energy.moment_tensor": dict(Y=X4, weights=np.full(4, 0.25), k=2),
    "grid_energy.moment_bound": dict(gap=0.01, k=2),
    "hardmax.attention_structure": dict(P=np.array([[0.0, 1.0], [0.0, 1.0]]), tol=1e-6),
    "hardmax.settling_index": dict(P=np.array([[[0.5, 0.5], [0.5, 0.5]],
                                               [[0.0, 1.0], [0.0, 1.0]]]), tol=1e-6),
    "hardmax.hardmax_flow": dict(A=np.eye(2), times=np.linspace(0.0, 0.5, 3)),
    "hardmax.integrate_until_settled": dict(Z0=X4[None], A=np.eye(2),
                                            times=np.linspace(0.0, 1.0, 3), cap=2.0),
    "key_scaling.critical_beta": dict(d=3),
    "key_scaling.distance_density": dict(delta=0.5, d=3),
    "key_scaling.collision_probability": dict(d=3),
    "key_scaling.collision_limit": dict(d=3),
    "key_scaling.sample_rows": dict(key=[0, 1], d=3, draws=3),
    "long_context.transition_profile": dict(x=0.2),
    "long_context.probe_configuration": dict(n=8, d_bulk=4),
    "long_context.probe_sweep_task": dict(key=[3, 8], d_bulk=4, gammas=[0.5, 2.0]),
    "lost_in_the_middle.graphon": dict(sigma=0.75, sigma0=0.25),
    "lost_in_the_middle.hardy_profile": dict(a=1.0, sigma=0.75, sigma0=0.25),
    "lost_in_the_middle.retrieval_correction": dict(sigma0=0.25, vocabulary=8, t=0.5),
    "lost_in_the_middle.end_slope": dict(a=1.0),
    "lost_in_the_middle.retrieval_end_slope": dict(vocabulary=8),
    "lost_in_the_middle.usa_field": dict(theta=ANGLES),
    "lost_in_the_middle.last_token_response": dict(theta0=ANGLES[None], steps=5),
    "lost_in_the_middle.particle_profile": dict(n_tokens=4, draws=2, steps=3, batch=2),
    "lost_in_the_middle.renyi_centres": dict(angles=ANGLES, delta=0.5),
    "lost_in_the_middle.circle_causal_flow": dict(angles=ANGLES,
                                                  times=np.linspace(0.0, 0.5, 3)),
    "lost_in_the_middle.pooled_ratio": dict(estimates=np.array([[1.0, 1.1, 0.9, 1.0]] * 2),
                                            closed_form=np.array([1.0, 1.0, 1.0, 1.0]),
                                            positions=np.array([0.1, 0.4, 0.6, 0.8])),
    "lost_in_the_middle.bin_difference": dict(estimates=np.array([[1.0, 1.1, 0.9, 1.0]] * 2),
                                              positions=np.array([0.1, 0.4, 0.6, 0.8]),
                                              upper=(0.5, 1.0), lower=(0.0, 0.5)),
    "lost_in_the_middle.interior_minima": dict(values=np.array([3.0, 1.0, 2.0, 0.5, 4.0])),
    "masked.sequence_measure": dict(X=X4),
    "masked.masked_velocity": dict(positions=np.array([0.1, 0.4, 0.6, 0.8])),
    "masked.masked_field": dict(positions=np.array([0.1, 0.4, 0.6, 0.8])),
    "masked.circle_curve": dict(s=np.array([0.1, 0.5])),
    "masked.sample_gaussian_sequence": dict(mean_curve=Fresh(lambda: tp.masked.circle_curve),
                                            sigma=0.3),
    "masked.gaussian_sequence_field": dict(
        query_positions=np.array([0.2, 0.7]), queries=X4[:2],
        mean_curve=Fresh(lambda: tp.masked.circle_curve), sigma=0.3, grid=50),
    "masked.gaussian_sequence_field_variance": dict(
        query_positions=np.array([0.2, 0.7]), queries=X4[:2],
        mean_curve=Fresh(lambda: tp.masked.circle_curve), sigma=0.3, grid=50),
    "masked.gaussian_sequence_field_covariance": dict(
        query_positions=np.array([0.2, 0.7]), queries=X4[:2],
        mean_curve=Fresh(lambda: tp.masked.circle_curve), sigma=0.3, grid=50),
    "masked.quadratic_form_mean_band": dict(weights=np.full(4, 0.25), count=10,
                                            false_alarm=1e-3),
    "masked.conditional_distance": dict(positions=np.array([0.1, 0.4, 0.6, 0.8])),
    "masked.masked_flow_map": dict(positions=np.array([0.1, 0.4, 0.6, 0.8]), steps=2),
    "masked.masked_flow_jacobian": dict(positions=np.array([0.1, 0.4, 0.6, 0.8]), steps=2),
    "masked_lipschitz.special_first_weights": dict(n=4),
    "mean_shift.gaussian_kde": dict(x=np.array([0.0, 0.5]),
                                    samples=np.array([0.1, -0.3, 0.8, 1.2])),
    "mean_shift.mean_shift_step": dict(X=np.array([0.0, 0.5]),
                                       samples=np.array([0.1, -0.3, 0.8, 1.2])),
    "mean_shift.count_modes_line": dict(samples=np.array([0.1, -0.3, 0.8, 1.2])),
    "mean_shift.mode_count_draws": dict(n=10, betas=np.array([1.0, 10.0])),
    "mean_shift.count_modes_circle": dict(angles=ANGLES),
    "meanfield.meanfield_errors": dict(sizes=np.array([4, 8])),
    "meanfield.local_rms_slopes": dict(sizes=np.array([4, 8, 16]),
                                       squared_errors=SQERR, n_boot=3),
    "meanfield.error_summary": dict(sizes=np.array([4, 8, 16]), squared_errors=SQERR),
    "meanfield.scaled_error_test": dict(sizes=np.array([4, 8, 16]),
                                        squared_errors=SQERR, limit=4.0),
    "meanfield.covariance_rate_influence": dict(Y=X4),
    "meanfield.covariance_rate_variance": dict(radial=20, angles=8),
    "noisy_kuramoto.circle_branch": dict(beta=3.0, r1=np.array([0.2, 0.5]), grid=64),
    "noisy_kuramoto.circle_free_energy": dict(beta=3.0, r=np.array([0.2, 0.5]), grid=64),
    "noisy_kuramoto.circle_mean_field_sweep": dict(beta=3.0, kappas=[0.5], c0=C0, hold=0.5,
                                                   grid=32),
    "noisy_kuramoto.circle_transition": dict(beta=3.0, points=10),
    "noisy_kuramoto.phase_diffusion": dict(kappa=3.0),
    "noisy_kuramoto.zonal_branch": dict(beta=3.0, r1=np.array([0.2, 0.5]), d=3, nodes=64),
    "noisy_kuramoto.zonal_free_energy": dict(beta=3.0, r=np.array([0.2, 0.5]), d=3,
                                             nodes=64),
    "noisy_kuramoto.zonal_mean_field_sweep": dict(beta=3.0, d=3, kappas=[0.5], c0=C0,
                                                  hold=0.5, nodes=64),
    "noisy_kuramoto.zonal_transition": dict(beta=3.0, d=3, points=10),
    "normalisation.attention_vector": dict(Theta=X4),
    "normalisation.speed_factor": dict(scheme="pre", r=np.array([1.0, 1.0])),
    "normalisation.flow_field": dict(scheme="pre"),
    "normalisation.residual_network": dict(scheme="pre"),
    "normalisation.pair_gap": dict(X=X4),
    "normalisation.equiangular_rhs": dict(scheme="pre", u=0.3, r=1.0),
    "normalisation.equiangular_flow": dict(scheme="pre", u0=0.3),
    "normalisation.equiangular_network": dict(scheme="pre", u0=0.3),
    "normalisation.asymptotic_law": dict(scheme="pre"),
    "normalisation.random_run": dict(key=[1, 2], scheme="pre"),
    "normalisation.network_rate": dict(scheme="post", t=np.array([0.5, 1.0])),
    "normalisation.fit_laws": dict(run=Fresh(lambda: tp.normalisation.random_run(
        [1, 2], "pre", 4, 2, 1.0, 5.0, 20)), scheme="pre", h=0.25),
    "normalisation.initial_velocity": dict(key=[1, 2]),
    "normalisation.random_weights_run": dict(key=[1, 2], scheme="pre"),
    "plotting.loglog_fit": dict(ax=Fresh(lambda: _axes()), x=np.array([1.0, 2.0, 4.0]),
                                y=np.array([1.0, 0.5, 0.26])),
    "plotting.quiver_field": dict(ax=Fresh(lambda: _axes()), velocities=0.1 * X4),
    "polytope.attention_gap": dict(points=0.1 * X4, vertices=X4, A=np.eye(2)),
    "polytope.hardmax_cells": dict(points=0.1 * X4, vertices=X4, A=np.eye(2)),
    "polytope.self_attending_set": dict(vertices=X4, A=np.eye(2)),
    "polytope.on_boundary": dict(points=0.1 * X4, hull_points=X4),
    "pretrained.tokenize": dict(text="a cat"),
    "pretrained.gelu": dict(x=np.array([0.1, -0.2])),
    "pretrained.layer_norm": dict(X=X4, gamma=np.ones(2), beta=np.zeros(2), eps=1e-12),
    "pretrained.embed": dict(model=Fresh(lambda: tp.pretrained.load_minilm()),
                             ids=np.array([101, 1037, 102])),
    "pretrained.sample_sequences": dict(ids=np.arange(100, 130), lengths=np.array([3, 5]),
                                        count=2),
    "rates.jackknife_exponent": dict(x=np.array([1.0, 2.0, 4.0, 8.0]),
                                     replicates=np.array([[1.0, 0.5, 0.26, 0.12],
                                                          [1.1, 0.52, 0.24, 0.13],
                                                          [0.9, 0.47, 0.25, 0.125]]).T),
    "rates.decay_rate": dict(times=np.linspace(0.0, 10.0, 11),
                             distances=np.exp(-2.0 * np.linspace(0.0, 10.0, 11))),
    "rates.first_time_below": dict(times=TIMES, values=np.array([1.0, 0.5, 0.2, 0.1, 0.05]),
                                   threshold=0.3),
    "replicates.pooled_z_scores": dict(ns=np.array([4, 8]),
                                       samples=np.array([[[1.0], [1.1], [0.9]],
                                                         [[1.2], [0.8], [1.0]]]),
                                       target=np.array([1.0])),
    "replicates.bonferroni_threshold": dict(n_tests=4, dof=5),
    "replicates.batch_t": dict(values=np.array([1.0, 2.0, 4.0]), target=0.5),
    "softmax_jacobian.pre_ln_eta": dict(probes=3),
    "softmax_jacobian.softmax_jacobian_norm": dict(p=np.array([0.2, 0.3, 0.5])),
    "softmax_jacobian.map_dependent_bound": dict(Q=np.stack([A2, V2]), K=np.stack([V2, A2]),
                                                V_out=np.stack([V2, A2]), V_in=np.stack([A2, V2])),
    "sphere.sphere_field": dict(field=lambda t, X: -X),
    "sphere.integrate_on_sphere": dict(field=Fresh(lambda: tp.sphere.usa_field(1.0)),
                                       times=np.linspace(0.0, 0.5, 3)),
    "sphere.normalised_residual_stack": dict(field=Fresh(lambda: tp.sphere.usa_field(1.0))),
    "sphere.sphere_drift": dict(trajectory=np.stack([X4, X4])),
    "sphere.equiangular_solve": dict(rho0=0.3, times=np.linspace(0.0, 0.5, 3)),
    "sphere.equiangular_layers": dict(rho0=0.3),
    "sphere.equiangular_clustering_time": dict(rho0=0.3),
    "sphere.sphere_quadrature": dict(m=4),
    "sphere.energy_mirror_descent": dict(Y=X4, steps=5),
    "sphere.dirac_pair_threshold": dict(lam_max=1.0, lam_min=0.5),
    "sphere.cluster_count": dict(radius=0.1),
    "sphere_phase.clustering_run": dict(T=1.0, h=0.25),
    "sphere_phase.phase_diagram": dict(betas=np.array([1.0]), T=1.0, h=0.25),
    "sphere_phase.first_crossing": dict(values=np.array([0.1, 0.5, 0.9, 1.0, 1.0]),
                                        times=TIMES, level=0.7),
    "sphere_phase.median_pair_band": dict(betas=np.array([1.0]), d=16, T=1.0, h=0.25),
    "sphere_sde.tangent_noise": dict(xi=0.1 * X4[::-1]),
    "sphere_sde.projected_em_step": dict(drift=0.1 * X4[::-1], xi=0.1 * X4[::-1]),
    "sphere_sde.exponential_em_step": dict(drift=0.1 * X4[::-1], xi=0.1 * X4[::-1]),
    "sphere_sde.zonal_harmonic": dict(d=3, t=np.array([0.1, 0.5])),
    "sphere_sde.heat_decay_rate": dict(d=3),
    "sphere_sde.step_multiplier": dict(d=3),
    "sphere_sde.circle_usa_drift": dict(theta=ANGLES),
    "sphere_sde.simulate_circle": dict(theta0=ANGLES, steps=3),
    "sphere_stability.antipodal_spectrum": dict(n_plus=2, n_minus=1,
                                                eigenvalues=np.array([1.0, 0.5])),
    "sphere_stability.uniform_instability_rates": dict(ell=np.array([1, 2])),
    "sphere_stability.two_cluster_merge_time": dict(theta0=1.0, theta1=0.1),
    "stability.gronwall_rate": dict(a=1.0, v=1.0, R=1.0, p=2.0),
    "stability.flow_jacobian": dict(X0=X4[:2], times=np.linspace(0.0, 0.2, 3)),
    "stability.heads_growth_rate": dict(n_angles=64),
    "stability.support_radius": dict(trajectory=np.stack([X4, X4])),
    "stability.cumulative_integral": dict(g=lambda t: t),
    "stability.log_gronwall_constant": dict(As=lambda t: A2, Vs=lambda t: V2, R0=1.0,
                                            p=2.0, refine=2),
    "stability.l1_l2_norm": dict(J=np.eye(8), n=4, n_angles=64),
    "symbolic.symbol_matrix": dict(name="A", rows=2),
    "symbolic.symmetric_symbol_matrix": dict(name="S"),
    "symbolic.symbol_vector": dict(name="a"),
    "symbolic.complete_the_square": dict(exponent=Fresh(lambda: _square_exponent()[0]),
                                         y=Fresh(lambda: _square_exponent()[1])),
    "symbolic.affine_moment_odes": dict(M=Fresh(lambda: tp.symbolic.symbol_matrix("M", 2)),
                                        b=Fresh(lambda: tp.symbolic.symbol_vector("b", 2)),
                                        alpha=Fresh(lambda: tp.symbolic.symbol_vector("a", 2)),
                                        Sigma=Fresh(lambda: tp.symbolic.symmetric_symbol_matrix(
                                            "S", 2))),
    "symbolic.l2_moment_odes": dict(d=1, k=1),
    # d = 1 (one head, one row): the same checks as d = 2 at a twentieth of the sympy time
    "symbolic.l2_reweighting": dict(d=1, k=1),
    "symbolic.softmax_reweighting": dict(d=1),
    "symbolic.softmax_moment_odes": dict(d=1),
    "symbolic.multihead_moment_odes": dict(d=1, heads=1),
    "symbolic.is_zero": dict(expr=Fresh(lambda: tp.symbolic.symbol_vector("a", 2) * 0)),
    "symbolic.evaluate": dict(expr=Fresh(lambda: _symbolic_sum()[0]),
                              values=Fresh(lambda: _symbolic_sum()[1])),
    "token_sample.disk_grid": dict(radius=1.0, rings=2),
    "token_sample.fluctuation_covariance": dict(queries=X4[:2]),
    "token_sample.uniform_field_errors": dict(queries=X4[:2], sizes=np.array([4, 8]),
                                              draws=2),
    "token_sample.sup_limit": dict(queries=X4[:2], samples=50),
    "token_sample.sup_limit_samples": dict(queries=X4[:2], samples=50),
    "token_sample.moment_exponent": dict(rho=0.5),
    "token_sample.uniform_rate_test": dict(
        sizes=np.array([4, 8]), squared_errors=[np.array([1.0, 1.1]), np.array([0.5, 0.6])],
        limit=Fresh(lambda: tp.token_sample.sup_limit(A2, V2, np.zeros(2), SPD, X4[:2],
                                                      samples=50))),
    "transport.conditional_wasserstein": dict(s=np.array([0.1, 0.4, 0.6, 0.8]),
                                              t=np.array([0.2, 0.3, 0.7, 0.9]), bins=2),
    "variants.variant_field": dict(name="softmax", P=Fresh(lambda: _parameters())),
    "variants.support_rate": dict(name="softmax", P=Fresh(lambda: _parameters())),
    "variants.uniform_ball": dict(n=4),
    "variants.gaussian_moments": dict(name="softmax", P=Fresh(lambda: _parameters()),
                                      times=np.linspace(0.0, 0.2, 3)),
    "variants.max_interaction_strength": dict(name="softmax", P=Fresh(lambda: _parameters()),
                                              T=0.2, steps=3),
    "variants.scale_interaction": dict(P=Fresh(lambda: _parameters()), c=0.5),
    "variants.moderate_interaction": dict(P=Fresh(lambda: _parameters()), T=0.2,
                                          rho_max=10.0),
    "variants.particle_moment_errors": dict(name="softmax", P=Fresh(lambda: _parameters()),
                                            sizes=np.array([4, 8]), T=0.2),
    "variants.sample_distances": dict(clouds=np.stack([X4, X4])),
    "random_value.two_token_coefficients": dict(d=3),
    "random_value.boundary_exponents": dict(d=3),
    "random_value.antipodal_threshold": dict(d=3),
    "random_value.antipodal_probability": dict(d=3),
    "random_value.simulate_two_tokens": dict(d=3, steps=3, n_paths=4),
    "homogenized.attention_self_overlap": dict(d=3, nodes=16),
    "homogenized.squared_distance_rate": dict(d=3),
    "homogenized.simulate_random_heads": dict(x0=np.eye(3), step=0.1, heads=2, layers=2,
                                              networks=2),
}

for _name in ("self_attention", "encoder_layer", "attention_heads", "attention_head_factors",
              "query_bias_directions", "value_output_constant", "attention_lipschitz",
              "attention_released_estimator", "forward", "sentence_embedding"):
    VALID[f"pretrained.{_name}"] = dict(
        model=Fresh(lambda: tp.pretrained.load_minilm()), layer=0,
        X=Fresh(lambda: np.random.default_rng(0).normal(size=(3, 384))),
        ids=np.array([101, 1037, 102]), text="a cat")
VALID["softmax_jacobian.pretrained_map_bound"] = VALID["pretrained.self_attention"]


def _axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.close("all")
    return plt.figure().add_subplot()


def _square_exponent():

    y = tp.symbolic.symbol_vector("y", 2)
    return -(y.T * y)[0, 0] + 2 * y[0], y


def _symbolic_sum():
    a = tp.symbolic.symbol_vector("a", 2)
    return a + a, [(a, np.array([1.0, 2.0]))]


def _jackknife(scale=1.0):
    return tp.fitting.jackknife_exponent(**{k: v * (scale if k == "Y" else 1.0) for k, v in
                                            VALID["fitting.jackknife_exponent"].items()})


def _moment_run():
    return tp.gaussian.integrate_moments(tp.gaussian.softmax_rhs, np.zeros(2), SPD,
                                         np.linspace(0.0, 1.0, 5), args=(-np.eye(2), np.eye(2)))


def _synthetic():
    t = np.linspace(0.0, 4.0, 41)
    W = np.zeros((t.size, 3, 2))
    W[:, 0] = [1.0, 0.0]
    W[:, 1] = W[:, 0] + 0.3 * np.exp(-t)[:, None] * np.array([-1.0, 1.0])
    W[:, 2] = [-1.0, 0.0]
    P = np.zeros((t.size, 3, 3))
    P[:, 0, 0] = P[:, 2, 2] = 1.0
    P[:, 1, 2] = 1e-9
    P[:, 1, 0] = 1.0 - 1e-9
    return W, t, P


def _parameters():
    return tp.variants.random_parameters(np.random.default_rng(0))


def public_functions():
    """``"module.function"`` of every public function of every public module (the discovery
    of tests/test_package.py)."""
    found = []
    for name in tp.__all__:
        module = getattr(tp, name)
        for attr in module.__all__:
            if inspect.isfunction(getattr(module, attr)):
                found.append(f"{name}.{attr}")
    return found


FUNCTIONS = public_functions()


def _function(qualname):
    module, attr = qualname.split(".")
    return getattr(getattr(tp, module), attr)


def _build(value):
    return value.make() if isinstance(value, Fresh) else value


def baseline(qualname):
    """The valid keyword arguments of a call (required parameters and the perturbed defaults)."""
    sig = inspect.signature(_function(qualname))
    table = VALID.get(qualname, {})
    kwargs = {}
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in table:
            kwargs[p.name] = table[p.name]
        elif p.default is not p.empty:
            kwargs[p.name] = COMMON.get(p.name, p.default) if p.name in ("n_jobs", "progress") \
                else p.default
        elif p.name in COMMON:
            kwargs[p.name] = COMMON[p.name]
        else:
            raise KeyError(f"{qualname}: no valid value for {p.name!r}")
    return kwargs


def call(qualname, kwargs):
    f = _function(qualname)
    sig = inspect.signature(f)
    args, kw = [], {}
    for name, value in kwargs.items():
        p = sig.parameters[name]
        if p.kind is p.POSITIONAL_ONLY:
            args.append(_build(value))
        else:
            kw[name] = _build(value)
    return f(*args, **kw)


# ---------------------------------------------------------------------------------------
# malformed values derived from a valid one


@dataclasses.dataclass(frozen=True)
class Bad:
    kind: str
    value: object


#: Arguments handed on unchanged to a callable the caller also gives (its own checks apply).
PASSED_THROUGH = {"args", "kwargs", "params", "n_jobs", "progress"}


def _accepts_none(annotation):
    return annotation is None or "None" in str(annotation) or "Optional" in str(annotation)


def _numeric_array(value):
    """The valid value as a numeric array, or None (callables, objects, text, ragged lists)."""
    if isinstance(value, (bool, np.bool_, str, Fresh)) or value is None or callable(value):
        return None
    if isinstance(value, (list, tuple)) and any(isinstance(v, (list, tuple, np.ndarray))
                                                and np.ndim(v) > 0 for v in value):
        try:
            arr = np.asarray(value)
        except ValueError:
            return None
    arr = np.asarray(value) if not isinstance(value, dict) else None
    if arr is None or arr.dtype.kind not in "iuf":
        return None
    return arr


def malformed(name, value, annotation, data):
    """The malformed values of one argument (one at a time), derived from its valid value."""
    bad = []
    optional = _accepts_none(annotation)
    if not optional:
        bad.append(Bad("None", None))
    if name == "seed" and isinstance(value, int):
        return bad + [Bad("negative seed", -1), Bad("string seed", "0"),
                      Bad("float seed", 1.5), Bad("bool seed", True)]
    if isinstance(value, (bool, np.bool_)):
        return bad + [Bad("string for bool", "no"), Bad("int for bool", 1)]
    if isinstance(value, str):
        return bad + [Bad("unknown string", "nonsense"), Bad("number for string", 1)]
    arr = None if name in PASSED_THROUGH else _numeric_array(value)
    if arr is None:
        return []
    imag = data.draw(st.floats(0.25, 2.0), label=f"{name}: imaginary part")
    bad.append(Bad("string", "abc"))
    if arr.ndim == 0:
        bad += [Bad("bool for number", True), Bad("complex", complex(float(arr), imag)),
                Bad("numeric string", str(arr.item()))]
        if arr.dtype.kind == "f":
            bad += [Bad("nan", np.nan), Bad("inf", np.inf)]
        else:
            bad += [Bad("non-integer", float(arr) + 0.5)]
        return bad
    bad.append(Bad("complex array", arr + 1j * imag))
    if arr.dtype.kind == "f":
        k = data.draw(st.integers(0, arr.size - 1), label=f"{name}: bad entry")
        for kind, x in (("nan entry", np.nan), ("inf entry", np.inf)):
            broken = arr.copy()
            broken.flat[k] = x
            bad.append(Bad(kind, broken))
    else:
        bad.append(Bad("non-integer array", arr + 0.5))
    bad += [Bad("empty array", np.empty((0,) + arr.shape[1:], dtype=arr.dtype)),
            Bad("extra axis", arr[..., None])]
    return bad


def _leaves(result, depth=0):
    """The numbers and arrays inside a result (tuples, lists, dicts, dataclasses)."""
    if depth > 4:
        return
    if isinstance(result, (bool, np.bool_, int, np.integer, str)) or result is None:
        return
    if isinstance(result, (float, complex, np.floating, np.complexfloating, np.ndarray)):
        yield np.asarray(result)
    elif isinstance(result, dict):
        for v in result.values():
            yield from _leaves(v, depth + 1)
    elif isinstance(result, (list, tuple)):
        for v in result:
            yield from _leaves(v, depth + 1)
    elif dataclasses.is_dataclass(result):
        for f in dataclasses.fields(result):
            yield from _leaves(getattr(result, f.name), depth + 1)


def _finite(result):
    return all(np.all(np.isfinite(x)) for x in _leaves(result) if x.dtype.kind in "fc")


def _real(result):
    return all(x.dtype.kind != "c" for x in _leaves(result))


#: Seconds a malformed call may run: longer means the value went into the computation.
TIME_LIMIT = 5.0


class _TimeLimit(Exception):
    pass


def _out_of_time(signum, frame):
    raise _TimeLimit


signal.signal(signal.SIGALRM, _out_of_time)


def check(qualname, name, bad, kwargs, finite_baseline):
    """``None`` if the call met the requirement, else what went wrong."""
    trial = dict(kwargs, **{name: bad.value})
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # overflow, invalid, ComplexWarning
            result = call(qualname, trial)
    except _TimeLimit:
        return f"ran on for {TIME_LIMIT} s (the value was not checked)"
    except (ValueError, TypeError) as err:
        if name in str(err):
            return None
        return f"{type(err).__name__} not naming {name!r}: {str(err)[:120]}"
    except Exception as err:  # noqa: BLE001 - any other exception is the finding
        return f"{type(err).__name__}: {str(err)[:120]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if finite_baseline and not _finite(result):
        return "NaN or inf returned"
    if not _real(result):
        return "complex result"
    return None


#: Findings not fixed yet, ``(function, argument) -> what the malformed values did`` (a
#: complex value cut to its real part, an error that does not name the argument, a NaN or inf
#: result, a computation run on an unchecked value, another exception): these
#: arguments are not driven (the list shrinks as the checks are added; see issue 44).
KNOWN = {
    ("meanfield.scaled_error_test", "limit"):
        "inf is a valid limit (documented; chapter 2 passes it): z_limit is NaN then",
}


@pytest.mark.parametrize("qualname", FUNCTIONS)
@settings(max_examples=1, phases=(Phase.generate,))  # no shrinking: the report names the value
@given(data=st.data())
def test_malformed_inputs_raise_naming_the_argument_or_give_finite_results(qualname, data):
    kwargs = baseline(qualname)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        finite_baseline = _finite(call(qualname, kwargs))
    sig = inspect.signature(_function(qualname))
    failures = []
    for name, value in kwargs.items():
        if (qualname, name) in KNOWN:
            continue
        for bad in malformed(name, value, sig.parameters[name].annotation, data):
            problem = check(qualname, name, bad, kwargs, finite_baseline)
            if problem:
                failures.append(f"{name} <- {bad.kind}: {problem}")
    assert not failures, "\n".join(failures)
