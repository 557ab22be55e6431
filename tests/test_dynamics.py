"""Tests of transformer_pde.dynamics against closed forms and explicit loops."""

import math

import numpy as np
import pytest
from scipy.linalg import expm
from transformer_pde import _linalg, attention, dynamics
from transformer_pde.dynamics import BlowUpError, integrate
from transformer_pde.fitting import fit_power_law

RNG = np.random.default_rng(2024)
M = np.array([[-0.3, 1.0, 0.2], [-1.0, -0.1, 0.4], [0.3, -0.2, 0.25]])
X0 = RNG.normal(size=(5, 3))


def linear_field(t, X):
    """dx_i/dt = M x_i, i.e. dX/dt = X M^T."""
    return X @ M.T


def linear_exact(t):
    """X(t) = X0 expm(tM)^T."""
    return X0 @ expm(t * M).T


# --------------------------------------------------------------------------------------
# integrators against the closed form of a linear field
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "order", "steps"),
                         [("euler", 1, (32, 64, 128, 256, 512)),
                          ("rk4", 4, (4, 8, 16, 32, 64))])
def test_fixed_step_order_on_linear_field(method, order, steps):
    T = 1.0
    errors = []
    for N in steps:
        traj = integrate(linear_field, X0, np.linspace(0.0, T, N + 1), method=method)
        errors.append(np.abs(traj[-1] - linear_exact(T)).max())
    fit = fit_power_law(T / np.array(steps), errors)
    assert abs(fit.exponent - order) < 0.15, fit


@pytest.mark.parametrize("method", ["euler", "rk4"])
def test_max_step_subdivides_like_a_finer_grid(method):
    fine = integrate(linear_field, X0, np.linspace(0.0, 1.0, 41), method=method)
    coarse = integrate(linear_field, X0, np.linspace(0.0, 1.0, 5), method=method, max_step=0.025)
    assert coarse.shape == (5, 5, 3)
    np.testing.assert_allclose(coarse, fine[::10], rtol=1e-12, atol=1e-13)
    # max_step not dividing the interval: ceil(0.25 / 0.03) = 9 equal steps of 0.25 / 9
    odd = integrate(linear_field, X0, [0.0, 0.25], method=method, max_step=0.03)
    ref = integrate(linear_field, X0, np.linspace(0.0, 0.25, 10), method=method)
    np.testing.assert_allclose(odd[-1], ref[-1], rtol=1e-12, atol=1e-13)


def test_dop853_matches_closed_form_at_every_time():
    times = np.linspace(0.0, 3.0, 13)
    traj = integrate(linear_field, X0, times, method="DOP853")
    assert traj.shape == (13, 5, 3)
    np.testing.assert_array_equal(traj[0], X0)
    exact = np.stack([linear_exact(t) for t in times])
    np.testing.assert_allclose(traj, exact, rtol=0, atol=1e-8)


@pytest.mark.parametrize("method", dynamics.ADAPTIVE_METHODS)
def test_every_adaptive_method_matches_closed_form(method):
    times = np.array([0.0, 0.4, 1.0])
    traj = integrate(linear_field, X0, times, method=method, rtol=1e-8, atol=1e-10)
    exact = np.stack([linear_exact(t) for t in times])
    np.testing.assert_allclose(traj, exact, rtol=0, atol=1e-5)


@pytest.mark.parametrize("method", ["euler", "rk4", "DOP853"])
def test_single_time_returns_initial_state(method):
    traj = integrate(linear_field, X0, [0.7], method=method)
    assert traj.shape == (1, 5, 3)
    np.testing.assert_array_equal(traj[0], X0)


def test_nonzero_initial_time_and_uneven_times():
    times = np.array([1.0, 1.1, 1.5, 2.6])
    traj = integrate(linear_field, X0, times, method="DOP853")
    exact = np.stack([X0 @ expm((t - 1.0) * M).T for t in times])
    np.testing.assert_allclose(traj, exact, rtol=0, atol=1e-8)


# --------------------------------------------------------------------------------------
# time-dependent parameters through attention_field
# --------------------------------------------------------------------------------------


def test_time_dependent_value_matrix_closed_form():
    # A = 0: every query weighs all tokens equally, Gamma(x_i) = c(t) mean(X). The mean obeys
    # m' = c(t) m, so m(t) = m0 e^{C(t)}, and x_i(t) = x_i(0) + m0 (e^{C(t)} - 1), with
    # c(t) = cos t, C(t) = sin t.
    d = 3
    field = dynamics.attention_field(attention.softmax, A=np.zeros((d, d)),
                                     V=lambda t: math.cos(t) * np.eye(d))
    times = np.linspace(0.0, 4.0, 9)
    m0 = X0.mean(axis=0)
    exact = np.stack([X0 + m0 * (math.exp(math.sin(t)) - 1.0) for t in times])
    np.testing.assert_allclose(integrate(field, X0, times, method="DOP853"), exact,
                               rtol=0, atol=1e-8)
    np.testing.assert_allclose(integrate(field, X0, times, method="rk4", max_step=0.01), exact,
                               rtol=0, atol=1e-8)


def test_attention_field_evaluates_callables_at_t():
    rng = np.random.default_rng(3)
    A0, A1, V = rng.normal(size=(3, 3, 3))
    field = dynamics.attention_field(attention.softmax, A=lambda t: A0 + t * A1, V=V,
                                     causal=True)
    for t in (0.0, 0.3, 1.7):
        np.testing.assert_array_equal(field(t, X0),
                                      attention.softmax(X0, A0 + t * A1, V, causal=True))

    def by_hand(t, X):
        return attention.softmax(X, A0 + t * A1, V, causal=True)

    times = np.linspace(0.0, 1.0, 6)
    for method in ("rk4", "DOP853"):
        np.testing.assert_allclose(integrate(field, X0, times, method=method, max_step=0.05),
                                   integrate(by_hand, X0, times, method=method, max_step=0.05),
                                   rtol=1e-13, atol=1e-14)


def test_attention_field_rejects_non_callable():
    with pytest.raises(ValueError, match="attention"):
        dynamics.attention_field(np.eye(2), A=np.eye(2))


# --------------------------------------------------------------------------------------
# residual stacks are the Euler scheme
# --------------------------------------------------------------------------------------

SOFTMAX_FIELD = dynamics.attention_field(attention.softmax, A=lambda t: (1 + t) * np.eye(3),
                                         V=np.array([[0.5, -1.0, 0.0], [1.0, 0.2, 0.0],
                                                     [0.0, 0.3, -0.4]]))


def test_residual_stack_is_the_explicit_layer_loop():
    T, L = 1.5, 12
    out = dynamics.residual_stack(SOFTMAX_FIELD, X0, T, L)
    assert out.shape == (L + 1, 5, 3)
    X = X0.copy()
    layers = [X]
    for ell in range(L):
        X = X + (T / L) * SOFTMAX_FIELD(ell * T / L, X)
        layers.append(X)
    np.testing.assert_allclose(out, np.stack(layers), rtol=1e-14, atol=1e-15)
    euler = integrate(SOFTMAX_FIELD, X0, np.linspace(0.0, T, L + 1), method="euler")
    np.testing.assert_array_equal(out, euler)


def test_residual_stack_converges_to_the_ode_at_rate_one_over_depth():
    T = 1.0
    exact = integrate(SOFTMAX_FIELD, X0, [0.0, T], method="DOP853")[-1]
    depths = np.array([8, 16, 32, 64, 128])
    errors = [np.abs(dynamics.residual_stack(SOFTMAX_FIELD, X0, T, L)[-1] - exact).max()
              for L in depths]
    fit = fit_power_law(depths, errors)
    assert abs(fit.exponent + 1.0) < 0.15, fit


@pytest.mark.parametrize(("T", "L", "name"), [(1.0, 0, "L"), (1.0, 2.5, "L"), (0.0, 4, "T"),
                                              (-1.0, 4, "T"), (np.nan, 4, "T")])
def test_residual_stack_bad_inputs(T, L, name):
    with pytest.raises(ValueError, match=name):
        dynamics.residual_stack(SOFTMAX_FIELD, X0, T, L)


# --------------------------------------------------------------------------------------
# rescaling z = e^{-tV} x
# --------------------------------------------------------------------------------------

VR = np.array([[0.4, 0.3, 0.0], [-0.3, 0.4, 0.1], [0.0, -0.1, 0.2]])


def test_rescale_of_linear_flow_is_constant():
    times = np.linspace(0.0, 2.0, 5)
    traj = np.stack([X0 @ expm(t * VR).T for t in times])  # x' = V x
    z = dynamics.rescale(traj, times, VR)
    np.testing.assert_allclose(z, np.broadcast_to(X0, z.shape), rtol=0, atol=1e-12)


def test_rescaled_field_integrates_to_rescaled_trajectory():
    field = dynamics.attention_field(attention.softmax, A=0.5 * np.eye(3), V=VR)
    times = np.linspace(0.0, 3.0, 7)
    x = integrate(field, X0, times, method="DOP853")
    z = integrate(dynamics.rescaled_field(field, VR), X0, times, method="DOP853")
    np.testing.assert_allclose(z, dynamics.rescale(x, times, VR), rtol=0, atol=1e-8)
    # and at one time by hand: z' = -V z + e^{-tV} field(t, e^{tV} z)
    t, Z = 0.8, X0
    E = expm(t * VR)
    by_hand = -Z @ VR.T + field(t, Z @ E.T) @ expm(-t * VR).T
    np.testing.assert_allclose(dynamics.rescaled_field(field, VR)(t, Z), by_hand,
                               rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize(("traj", "times", "V", "name"), [
    (np.zeros((3, 5, 3)), np.zeros(2), VR, "trajectory"),
    (np.zeros((5, 3)), np.zeros(5), VR, "trajectory"),
    (np.zeros((2, 5, 3)), np.zeros(2), np.eye(2), "V"),
    (np.zeros((2, 5, 3)), np.zeros(2), np.full((3, 3), np.nan), "V"),
])
def test_rescale_bad_inputs(traj, times, V, name):
    with pytest.raises(ValueError, match=name):
        dynamics.rescale(traj, times, V)


def test_rescaled_field_rejects_non_square_V():
    with pytest.raises(ValueError, match="V"):
        dynamics.rescaled_field(linear_field, np.ones((2, 3)))


def test_rescaled_softmax_closed_form_equals_general_formula():
    # z_i' = sum_j P_ij V (z_j - z_i) with P computed on e^{tV} z
    A = RNG.normal(size=(3, 3))
    field = dynamics.attention_field(attention.softmax, A=A, V=VR)
    closed = dynamics.rescaled_field(None, VR, A=A)
    general = dynamics.rescaled_field(field, VR)
    for t in (0.0, 0.7, 2.5):
        Z = RNG.normal(size=(6, 3))
        P = attention.softmax_matrix(Z @ expm(t * VR).T, A)
        by_loop = np.array([sum(P[i, j] * VR @ (Z[j] - Z[i]) for j in range(6))
                            for i in range(6)])
        np.testing.assert_allclose(closed(t, Z), by_loop, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(general(t, Z), by_loop, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("V", [VR, np.diag([1.0, 1.0, -0.5]), -np.eye(3)])
def test_rescaled_field_against_finite_differences_of_x(V):
    A = np.array([[1.0, 0.2, 0.0], [0.2, 0.8, 0.1], [0.0, 0.1, 0.6]])
    field = dynamics.attention_field(attention.softmax, A=A, V=V)
    t0, h = 1.2, 1e-3
    times = np.array([0.0, t0 - h, t0, t0 + h])
    x = integrate(field, X0, times, rtol=1e-13, atol=1e-13)
    z = dynamics.rescale(x, times, V)
    central = (z[3] - z[1]) / (2 * h)  # error O(h^2) ~ 1e-6 times the third derivative
    for zfield in (dynamics.rescaled_field(None, V, A=A), dynamics.rescaled_field(field, V)):
        np.testing.assert_allclose(zfield(t0, z[2]), central, rtol=0, atol=1e-5)


def test_rescaled_field_accurate_in_the_hardmax_regime():
    # V = A = I up to T = 25: |x| ~ e^25 ~ 7e10, logits ~ e^50 ~ 5e21, attention is hardmax
    Z0 = np.random.default_rng(3).normal(size=(8, 2))
    times = np.linspace(0.0, 25.0, 11)
    I2 = np.eye(2)
    z = integrate(dynamics.rescaled_field(None, I2, A=I2), Z0, times, rtol=1e-11, atol=1e-12)
    z_gen = integrate(dynamics.rescaled_field(dynamics.attention_field(
        attention.softmax, A=I2, V=I2), I2), Z0, times, rtol=1e-11, atol=1e-12)
    x = integrate(dynamics.attention_field(attention.softmax, A=I2, V=I2), Z0, times,
                  rtol=1e-11, atol=1e-12, blowup_radius=1e15)
    assert np.all(np.isfinite(z))
    np.testing.assert_allclose(z, z_gen, rtol=0, atol=1e-8)
    np.testing.assert_allclose(z, dynamics.rescale(x, times, I2), rtol=0, atol=1e-7)
    # the limit is reached: z barely moves over the last 5 time units
    assert np.max(np.abs(z[-1] - z[-3])) < 1e-6
    # hardmax: each token attends to argmax_j <z_i, z_j>
    P = attention.softmax_matrix(z[-1] * np.exp(25.0), I2)
    assert np.all(np.isfinite(P)) and np.max(1.0 - P.max(axis=1)) < 1e-12


def test_rescaled_field_argument_errors():
    with pytest.raises(ValueError, match="A must be given"):
        dynamics.rescaled_field(None, np.eye(2))
    with pytest.raises(ValueError, match="A is only used"):
        dynamics.rescaled_field(linear_field, np.eye(3), A=np.eye(3))
    with pytest.raises(ValueError, match="field must be callable"):
        dynamics.rescaled_field(3.0, np.eye(2))
    with pytest.raises(ValueError, match="A"):
        dynamics.rescaled_field(None, np.eye(2), A=np.eye(3))


def test_rescale_rejects_non_finite_times():
    with pytest.raises(ValueError, match="times"):
        dynamics.rescale(np.zeros((2, 3, 2)), [0.0, np.nan], np.eye(2))


# --------------------------------------------------------------------------------------
# blow-up: x' = x^2 from x(0) = 1 is x(t) = 1/(1 - t), infinite at t = 1
# --------------------------------------------------------------------------------------

BLOWUP_X0 = np.array([[1.0], [0.5]])  # the second token is 1/(2 - t): blows up at t = 2


def square_field(t, X):
    return X**2


@pytest.mark.parametrize("radius", [1e3, 1e8])
@pytest.mark.parametrize("method", dynamics.ADAPTIVE_METHODS)
def test_blowup_adaptive_stops_at_the_exit_time(method, radius):
    times = np.linspace(0.0, 2.0, 21)
    with pytest.raises(BlowUpError, match="blow-up") as info:
        integrate(square_field, BLOWUP_X0, times, method=method, blowup_radius=radius)
    err = info.value
    # the token leaves the ball of radius R when 1/(1 - t) = R
    assert abs(err.time - (1.0 - 1.0 / radius)) < 1e-6
    assert np.all(np.isfinite(err.trajectory))
    assert err.trajectory.shape == (err.times.size, 2, 1)
    assert err.times.size == 10 and np.all(err.times < err.time)  # times 0, 0.1, ..., 0.9
    np.testing.assert_allclose(err.times, times[:10])
    exact = np.stack([1.0 / (1.0 - err.times), 1.0 / (2.0 - err.times)], axis=1)
    np.testing.assert_allclose(err.trajectory[:, :, 0], exact, rtol=1e-5)


@pytest.mark.parametrize("method", dynamics.FIXED_STEP_METHODS)
def test_blowup_fixed_step_is_detected(method):
    times = np.linspace(0.0, 3.0, 31)
    R = 1e8
    with pytest.raises(BlowUpError, match="blow-up") as info:
        integrate(square_field, BLOWUP_X0, times, method=method, max_step=0.01, blowup_radius=R)
    err = info.value
    assert np.all(np.isfinite(err.trajectory))
    assert err.trajectory.shape == (err.times.size, 2, 1)
    assert err.times.size >= 10 and np.all(err.times < err.time)
    np.testing.assert_allclose(err.times, times[: err.times.size])
    if method == "euler":
        # Euler under-estimates a convex increasing solution: it exits no earlier than 1 - 1/R
        assert 1.0 - 1.0 / R <= err.time < 1.5
    else:
        assert abs(err.time - 1.0) < 0.05


@pytest.mark.parametrize("method", dynamics.FIXED_STEP_METHODS + ("DOP853", "RK45", "LSODA"))
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_field_raises_blowup_not_nan(method, bad):
    def field(t, X):
        return -X if t < 0.5 else np.full_like(X, bad)

    with pytest.raises(BlowUpError) as info:
        integrate(field, X0, np.linspace(0.0, 1.0, 11), method=method, max_step=0.05)
    assert info.value.time >= 0.5 - 1e-12
    assert np.all(np.isfinite(info.value.trajectory))


@pytest.mark.parametrize("method", dynamics.FIXED_STEP_METHODS + dynamics.ADAPTIVE_METHODS)
def test_non_finite_field_blowup_keeps_the_trajectory_reached(method):
    # x' = -x up to t = 0.5, then NaN: the solution at the requested times before 0.5 is known
    def field(t, X):
        return -X if t < 0.5 else np.full_like(X, np.nan)

    times = np.linspace(0.0, 1.0, 11)
    with pytest.raises(BlowUpError) as info:
        integrate(field, X0, times, method=method, max_step=0.01)
    err = info.value
    assert err.times.size >= 5  # 0, 0.1, ..., 0.4 were reached
    np.testing.assert_allclose(err.times, times[: err.times.size])
    h = 0.01  # one step of Euler / RK4 multiplies x by its stability polynomial at -h
    growth = {"euler": 1 - h, "rk4": 1 - h + h**2 / 2 - h**3 / 6 + h**4 / 24}
    if method in growth:
        factor = growth[method] ** np.round(err.times / h)
    else:
        factor = np.exp(-err.times)
    np.testing.assert_allclose(err.trajectory, factor[:, None, None] * X0, rtol=1e-6)


@pytest.mark.parametrize("method", [*dynamics.FIXED_STEP_METHODS, *dynamics.ADAPTIVE_METHODS])
def test_field_non_finite_at_the_initial_state_raises_blowup(method):
    with pytest.raises(BlowUpError) as info:
        integrate(lambda t, X: X * np.nan, X0, [0.0, 1.0], method=method)
    assert info.value.time <= 1.0
    assert np.all(np.isfinite(info.value.trajectory))


def test_initial_state_outside_ball_raises():
    with pytest.raises(BlowUpError):
        integrate(linear_field, 10 * X0, [0.0, 1.0], blowup_radius=1.0)


# --------------------------------------------------------------------------------------
# bad inputs
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"times": [0.0, 1.0, 1.0]}, "times"),
    ({"times": [1.0, 0.5]}, "times"),
    ({"times": []}, "times"),
    ({"times": [[0.0, 1.0]]}, "times"),
    ({"times": [0.0, np.nan]}, "times"),
    ({"method": "rk5"}, "method"),
    ({"method": "Euler"}, "method"),
    ({"max_step": 0.0}, "max_step"),
    ({"max_step": -0.1}, "max_step"),
    ({"max_step": np.nan}, "max_step"),
    ({"max_step": "small"}, "max_step"),
    ({"max_step": 0.0, "method": "DOP853"}, "max_step"),
    ({"X0": X0[0]}, "X0"),
    ({"X0": np.full((2, 3), np.nan)}, "X0"),
    ({"field": "linear"}, "field"),
    ({"blowup_radius": 0.0}, "blowup_radius"),
])
def test_integrate_bad_inputs(kwargs, name):
    args = {"field": linear_field, "X0": X0, "times": [0.0, 1.0], **kwargs}
    with pytest.raises(ValueError, match=name):
        integrate(args.pop("field"), args.pop("X0"), args.pop("times"), **args)


@pytest.mark.parametrize("method", ["euler", "rk4", "DOP853", "Radau"])
@pytest.mark.parametrize("wrong", [lambda X: X[:, :2], lambda X: X.T, lambda X: X.ravel()])
def test_field_output_of_wrong_shape_raises(method, wrong):
    with pytest.raises(ValueError, match="field"):
        integrate(lambda t, X: wrong(X), X0, [0.0, 1.0], method=method)


@pytest.mark.parametrize("V", [
    np.diag([1.0, -0.5, 0.3]),  # diagonal: exact exponentials
    VR,  # complex eigenvalues
    np.array([[0.6, 0.8, 0.0], [0.6, 0.6, 0.1], [0.0, 0.2, -0.4]]),  # real eigenvalues
    np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]]),  # Jordan block: expm
])
def test_exponential_of_tV_matches_expm(V):
    exp_V = _linalg.exponential(V)
    for t in (-3.0, 0.0, 0.5, 20.0):
        ref = expm(t * V)
        np.testing.assert_allclose(exp_V(t), ref, rtol=1e-9, atol=1e-12 * np.abs(ref).max())
