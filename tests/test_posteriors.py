"""Tests of the filter algebra: posterior structures, likelihood whitening and the OnlineFilter loop.

Oracles used here, none of them the code under test:

* closed-form Bayesian linear regression and a Kalman filter coded directly in NumPy;
* the golden stream ``../shared/reference/fcekf_concrete.npz`` from an independent JAX implementation;
* the checkable facts of spec/diagonal-ekf.md §5 (F1–F5, F8, F12, F13, F15–F17) and spec/lofi.md §6
  (facts 15, 16, 29, 30), computed densely;
* the textbook EKF with ``H = R J`` and ``S = H Σ Hᵀ + R`` (pseudo-inverse for the categorical case).
"""

from __future__ import annotations


import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skfilter.exceptions import FilterStepError
from skfilter.likelihoods import Bernoulli, Categorical, Gaussian, Poisson, probit_probabilities
from skfilter.models import make_adapter, make_mlp
from _beliefs import CPU, F64, DiagonalCovariance, FullCovariance  # noqa: F401
from _beliefs import as_tensor_copy as _t, golden_net as _golden_net, load_reference as _load_reference
from _beliefs import make_filter as _filter
from _beliefs import run_recorded as _run_recorded


PROPERTY = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
STRUCTURES = ["full", "fd", "vd", "vd-exact"]


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _make_posterior(kind, mean, prior_variance):
    if kind == "full":
        return FullCovariance(mean, prior_variance)
    if kind == "fd":
        return DiagonalCovariance(mean, prior_variance, projection="fd")
    if kind == "vd":
        return DiagonalCovariance(mean, prior_variance, projection="vd")
    if kind == "vd-exact":
        return DiagonalCovariance(mean, prior_variance, projection="vd", vd_mean="exact")
    raise AssertionError(kind)


def _set_diagonal_prior(post, v):
    """Give any structure the prior N(mean, diag(v)) (v a tensor)."""
    if isinstance(post, FullCovariance):
        post.cov = torch.diag(v).clone()
    else:
        post.var = v.clone()








def _linear_design(X, C):
    """Jacobian of h(θ, x) = W x + b for θ = [vec(W) row-major, b]: ``(n, C, C·D + C)``."""
    n, D = X.shape
    H = np.zeros((n, C, C * D + C))
    for c in range(C):
        H[:, c, c * D:(c + 1) * D] = X
        H[:, c, C * D + c] = 1.0
    return H


def _kalman_numpy(H, Y, mu0, Sigma0, R, gamma, q, batch_size):
    """Textbook Kalman filter, predict (γ, q) before every update; returns final (μ, Σ), yhat, yvar."""
    n, C, P = H.shape
    mu, Sig = mu0.copy(), Sigma0.copy()
    yhat, yvar = np.zeros((n, C)), np.zeros((n, C))
    for i in range(0, n, batch_size):
        j = min(i + batch_size, n)
        mu = gamma * mu
        Sig = gamma ** 2 * Sig + q * np.eye(P)
        Hb = H[i:j].reshape(-1, P)
        yhat[i:j] = (Hb @ mu).reshape(j - i, C)
        yvar[i:j] = np.diag(Hb @ Sig @ Hb.T).reshape(j - i, C)
        Rb = np.diag(np.tile(R, j - i))
        S = Hb @ Sig @ Hb.T + Rb
        K = np.linalg.solve(S, Hb @ Sig).T
        mu = mu + K @ (Y[i:j].reshape(-1) - Hb @ mu)
        Sig = Sig - K @ S @ K.T
    return mu, Sig, yhat, yvar


def _linear_problem(seed, n, D, C):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    W = rng.normal(size=(C, D))
    Y = X @ W.T + 0.3 + 0.5 * rng.normal(size=(n, C))
    mu0 = 0.4 * rng.normal(size=C * D + C)
    return X, Y, mu0


def _linear_adapter(D, C):
    return make_adapter(make_mlp(D, (), C, "identity", seed=0), CPU, F64, D)


# ---------------------------------------------------------------------------------------------
# full EKF on a linear-Gaussian model == Bayesian linear regression / Kalman filter
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size", [1, 4, 25])
def test_full_ekf_equals_bayesian_linear_regression(batch_size):
    D, n, s0, R = 3, 25, 0.7, 0.2
    X, Y, mu0 = _linear_problem(0, n, D, 1)
    ad = _linear_adapter(D, 1)
    post = FullCovariance(_t(mu0), s0)
    filt = _filter(ad, Gaussian(R), post, 1)
    assert filt.run(_t(X), _t(Y), batch_size=batch_size) is None

    Xa = np.hstack([X, np.ones((n, 1))])  # θ = [w, b]
    P = D + 1
    Sigma = np.linalg.inv(np.eye(P) / s0 + Xa.T @ Xa / R)
    mu = Sigma @ (mu0 / s0 + Xa.T @ Y[:, 0] / R)
    np.testing.assert_allclose(post.mean.numpy(), mu, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(post.covariance().numpy(), Sigma, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(post.marginal_variance().numpy(), np.diag(Sigma), rtol=1e-10)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_full_ekf_multi_output_per_output_variances(batch_size):
    D, C, n, s0 = 2, 2, 18, 1.3
    R = np.array([0.05, 0.8])
    X, Y, mu0 = _linear_problem(1, n, D, C)
    ad = _linear_adapter(D, C)
    post = FullCovariance(_t(mu0), s0)
    filt = _filter(ad, Gaussian(R), post, C)
    filt.run(_t(X), _t(Y), batch_size=batch_size)

    H = _linear_design(X, C)
    P = H.shape[2]
    prec = np.eye(P) / s0 + sum(H[i].T @ np.diag(1 / R) @ H[i] for i in range(n))
    Sigma = np.linalg.inv(prec)
    mu = Sigma @ (mu0 / s0 + sum(H[i].T @ (Y[i] / R) for i in range(n)))
    np.testing.assert_allclose(post.mean.numpy(), mu, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(post.covariance().numpy(), Sigma, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("gamma,q", [(1.0, 0.05), (0.9, 0.0), (0.95, 0.02)])
def test_full_ekf_with_dynamics_equals_kalman_recursion(batch_size, gamma, q):
    D, C, n, s0 = 2, 2, 14, 0.6
    R = np.array([0.3, 0.1])
    X, Y, mu0 = _linear_problem(2, n, D, C)
    ad = _linear_adapter(D, C)
    post = FullCovariance(_t(mu0), s0)
    filt = _filter(ad, Gaussian(R), post, C, gamma=gamma, q=q)
    f, var = _run_recorded(filt, _t(X), _t(Y), batch_size=batch_size)

    H = _linear_design(X, C)
    mu, Sig, yhat, yvar = _kalman_numpy(H, Y, mu0, s0 * np.eye(H.shape[2]), R, gamma, q, batch_size)
    np.testing.assert_allclose(post.mean.numpy(), mu, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(post.covariance().numpy(), Sig, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(f.numpy(), yhat, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(var.numpy(), yvar, rtol=1e-10, atol=1e-13)


def test_full_ekf_first_step_is_predicted_before_update():
    """The predict step runs before the first update: one row sees γ²Σ₀ + q I, not Σ₀."""
    D, s0, R, gamma, q = 2, 0.5, 0.25, 0.8, 0.3
    X, Y, mu0 = _linear_problem(3, 1, D, 1)
    post = FullCovariance(_t(mu0), s0)
    f, var = _run_recorded(_filter(_linear_adapter(D, 1), Gaussian(R), post, 1, gamma, q), _t(X), _t(Y))
    h = np.append(X[0], 1.0)
    prior_var = gamma ** 2 * s0 + q
    np.testing.assert_allclose(var.numpy()[0, 0], prior_var * h @ h, rtol=1e-13)
    np.testing.assert_allclose(f.numpy()[0, 0], gamma * h @ mu0, rtol=1e-13)


def test_sample_weight_scales_the_noise():
    """A weight w is the same as observation variance R / w."""
    D, n, s0, R = 2, 8, 0.9, 0.4
    X, Y, mu0 = _linear_problem(4, n, D, 1)
    w = np.linspace(0.5, 3.0, n)
    ad = _linear_adapter(D, 1)
    p1 = FullCovariance(_t(mu0), s0)
    _filter(ad, Gaussian(R), p1, 1).run(_t(X), _t(Y), w=_t(w))
    Xa = np.hstack([X, np.ones((n, 1))])
    Sigma = np.linalg.inv(np.eye(D + 1) / s0 + Xa.T @ (Xa * (w / R)[:, None]))
    mu = Sigma @ (mu0 / s0 + Xa.T @ (w * Y[:, 0]) / R)
    np.testing.assert_allclose(p1.mean.numpy(), mu, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(p1.covariance().numpy(), Sigma, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("batch_size", [1, 5])
def test_vd_precision_is_batch_precision_diagonal_in_linear_case(batch_size):
    """spec/diagonal-ekf.md F8: 1/P_T = 1/σ0² + Σ_t x_{t,i}²/r, independent of order and batching."""
    D, n, s0, R = 3, 20, 0.8, 0.3
    X, Y, mu0 = _linear_problem(5, n, D, 1)
    Xa = np.hstack([X, np.ones((n, 1))])
    expected = 1.0 / (1.0 / s0 + (Xa ** 2).sum(0) / R)
    for order in (np.arange(n), np.arange(n)[::-1]):
        post = _make_posterior("vd", _t(mu0), s0)
        _filter(_linear_adapter(D, 1), Gaussian(R), post, 1).run(_t(X[order]), _t(Y[order]),
                                                                   batch_size=batch_size)
        np.testing.assert_allclose(post.marginal_variance().numpy(), expected, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# golden stream from the independent implementation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "torch.func"])
def test_full_ekf_reproduces_golden_fcekf_concrete(fused):
    d = _load_reference("fcekf_concrete.npz")
    assert str(d["kind"]) == "fcekf"
    D = d["X"].shape[1]
    net = _golden_net(d)
    ad = make_adapter(net, CPU, F64, D, fused=fused)
    assert ad.n_params == d["mu_final"].shape[0] == 501
    R, q = float(d["R"]), float(d["q"])
    post = FullCovariance(ad.initial_theta(), float(d["prior_var"]))
    filt = _filter(ad, Gaussian(R), post, 1, gamma=1.0, q=q)
    f, var = _run_recorded(filt, _t(d["X"]), _t(d["y"]).reshape(-1, 1))

    def close(actual, expected):
        np.testing.assert_allclose(actual, expected, rtol=1e-8, atol=1e-10 * np.abs(expected).max())

    close(f.numpy()[:, 0], d["yhat"])
    close(var.numpy()[:, 0] + R, d["yvar"])
    close(post.mean.numpy(), d["mu_final"])
    f_test, J_test = ad.forward_jacobian(post.mean, _t(d["X_test"]))
    close(f_test.numpy()[:, 0], d["yhat_test"])
    close(post.predictive_var(J_test).numpy()[:, 0] + R, d["yvar_test"])
    close(post.predictive_cov(J_test).numpy()[:, 0, 0] + R, d["yvar_test"])


# ---------------------------------------------------------------------------------------------
# VD / FD facts (spec/diagonal-ekf.md §5) — one step from a diagonal prior
# ---------------------------------------------------------------------------------------------
def _one_step(kind, mu, v, Hw, ew, gamma=1.0, q=0.0):
    post = _make_posterior(kind, mu, 1.0)
    _set_diagonal_prior(post, v)
    pending, _ = post.propose(Hw, ew, gamma, q)
    post.commit(pending)
    return post


def _random_instance(seed, P, m, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(P, generator=g, dtype=F64)
    v = 0.1 + torch.rand(P, generator=g, dtype=F64) * 2.0
    Hw = scale * torch.randn(m, P, generator=g, dtype=F64)
    ew = torch.randn(m, generator=g, dtype=F64)
    return mu, v, Hw, ew


def _dense_ekf(mu, v, Hw, ew, gamma, q):
    """EKF posterior from the prior N(γμ, diag(γ²v + q)) with unit-noise rows, in information form."""
    Sp = torch.diag(gamma ** 2 * v + q)
    prec = torch.linalg.inv(Sp) + Hw.T @ Hw
    Sigma = torch.linalg.inv(prec)
    mean = gamma * mu + Sp @ Hw.T @ torch.linalg.solve(torch.eye(len(ew), dtype=F64) + Hw @ Sp @ Hw.T, ew)
    return mean, Sigma, prec


gamma_q = st.tuples(st.sampled_from([1.0, 0.9, 0.5]), st.sampled_from([0.0, 0.01, 0.5]))


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), m=st.integers(1, 4), gq=gamma_q)
def test_f1_single_parameter_all_structures_coincide(seed, m, gq):
    gamma, q = gq
    mu, v, Hw, ew = _random_instance(seed, 1, m)
    posts = {k: _one_step(k, mu, v, Hw, ew, gamma, q) for k in STRUCTURES}
    for k in STRUCTURES[1:]:
        torch.testing.assert_close(posts[k].mean, posts["full"].mean, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(posts[k].marginal_variance(), posts["full"].marginal_variance(),
                                   rtol=1e-12, atol=1e-14)


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), P=st.integers(2, 6), m=st.integers(1, 3))
def test_f1_only_one_informative_column_all_coincide(seed, P, m):
    mu, v, Hw, ew = _random_instance(seed, P, m)
    col = seed % P
    mask = torch.zeros(P, dtype=F64)
    mask[col] = 1.0
    Hw = Hw * mask
    posts = {k: _one_step(k, mu, v, Hw, ew) for k in STRUCTURES}
    for k in STRUCTURES[1:]:
        torch.testing.assert_close(posts[k].mean, posts["full"].mean, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(posts[k].marginal_variance(), posts["full"].marginal_variance(),
                                   rtol=1e-12, atol=1e-14)
    # and the other parameters are untouched (F16 per column)
    other = torch.arange(P) != col
    torch.testing.assert_close(posts["vd"].mean[other], mu[other], rtol=0, atol=0)
    torch.testing.assert_close(posts["fd"].var[other], v[other], rtol=0, atol=0)


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), P=st.integers(2, 8), m=st.integers(1, 4), gq=gamma_q)
def test_f2_f3_f5_f15_one_step_from_diagonal_prior(seed, P, m, gq):
    gamma, q = gq
    mu, v, Hw, ew = _random_instance(seed, P, m)
    full = _one_step("full", mu, v, Hw, ew, gamma, q)
    fd = _one_step("fd", mu, v, Hw, ew, gamma, q)
    vd = _one_step("vd", mu, v, Hw, ew, gamma, q)
    vdx = _one_step("vd-exact", mu, v, Hw, ew, gamma, q)
    mean, Sigma, prec = _dense_ekf(mu, v, Hw, ew, gamma, q)
    v_pred = gamma ** 2 * v + q
    # the full structure is the dense EKF
    torch.testing.assert_close(full.mean, mean, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(full.covariance(), Sigma, rtol=1e-10, atol=1e-12)
    # F2: FD = marginals and mean of the full EKF
    torch.testing.assert_close(fd.mean, full.mean, rtol=1e-11, atol=1e-13)
    torch.testing.assert_close(fd.var, full.cov.diagonal(), rtol=1e-11, atol=1e-13)
    # F3: VD = 1 / diag(precision)
    torch.testing.assert_close(vd.var, 1.0 / prec.diagonal(), rtol=1e-11, atol=1e-13)
    # F4: information form == per-parameter Woodbury form
    for i in range(P):
        h = Hw[:, i]
        Si = torch.eye(m, dtype=F64) + v_pred[i] * torch.outer(h, h)
        w_i = v_pred[i] - v_pred[i] ** 2 * h @ torch.linalg.solve(Si, h)
        torch.testing.assert_close(vd.var[i], w_i, rtol=1e-11, atol=1e-13)
    # F5: 0 < VD ≤ FD ≤ predicted prior variance
    tol = 1e-12 * v_pred
    assert bool((vd.var > 0).all())
    assert bool((vd.var <= fd.var + tol).all())
    assert bool((fd.var <= v_pred + tol).all())
    # F15: VD mean step uses the posterior variance: μ − μ⁻ = v_post ⊙ Hwᵀ ew
    torch.testing.assert_close(vd.mean - gamma * mu, vd.var * (Hw.T @ ew), rtol=1e-11, atol=1e-13)
    # spec A1 / lofi fact 16: the exact VD mean is the FD (= full EKF) mean, with VD variances
    torch.testing.assert_close(vdx.mean, fd.mean, rtol=1e-11, atol=1e-13)
    torch.testing.assert_close(vdx.var, vd.var, rtol=0, atol=0)
    # F12: gain identity K e = Σ_post Hᵀ R⁻¹ e
    torch.testing.assert_close(full.mean - gamma * mu, Sigma @ Hw.T @ ew, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("D", [1, 2, 5, 20])
def test_f13_closed_form_identical_parameters(D):
    """C = 1, H = h·1ᵀ, prior s·I, noise r, innovation e (spec/diagonal-ekf.md F13)."""
    s, h, r, e = 0.7, 1.3, 0.4, -0.9
    mu = torch.linspace(-1, 1, D, dtype=F64)
    Hw = torch.full((1, D), h / np.sqrt(r), dtype=F64)
    ew = torch.tensor([e / np.sqrt(r)], dtype=F64)
    v = torch.full((D,), s, dtype=F64)
    exact_step = s * h * e / (r + D * s * h * h)
    fd_var = s - s * s * h * h / (r + D * s * h * h)
    vd_step = s * h * e / (r + s * h * h)
    vd_var = s * r / (r + s * h * h)
    for kind in ("full", "fd", "vd-exact"):
        post = _one_step(kind, mu, v, Hw, ew)
        torch.testing.assert_close(post.mean - mu, torch.full((D,), exact_step, dtype=F64),
                                   rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(_one_step("fd", mu, v, Hw, ew).var, torch.full((D,), fd_var, dtype=F64),
                               rtol=1e-13, atol=0)
    torch.testing.assert_close(_one_step("full", mu, v, Hw, ew).marginal_variance(),
                               torch.full((D,), fd_var, dtype=F64), rtol=1e-13, atol=0)
    vd = _one_step("vd", mu, v, Hw, ew)
    torch.testing.assert_close(vd.mean - mu, torch.full((D,), vd_step, dtype=F64), rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(vd.var, torch.full((D,), vd_var, dtype=F64), rtol=1e-13, atol=0)
    torch.testing.assert_close(_one_step("vd-exact", mu, v, Hw, ew).var, vd.var, rtol=0, atol=0)


@pytest.mark.parametrize("kind", STRUCTURES)
def test_f16_zero_information_leaves_belief_unchanged(kind):
    mu, v, _, ew = _random_instance(3, 5, 2)
    post = _one_step(kind, mu, v, torch.zeros(2, 5, dtype=F64), ew)
    torch.testing.assert_close(post.mean, mu, rtol=0, atol=0)
    torch.testing.assert_close(post.marginal_variance(), v, rtol=4e-16, atol=0)  # VD: 1/(1/v)
    # F14: with dynamics and no data, exactly the predict step
    post = _one_step(kind, mu, v, torch.zeros(2, 5, dtype=F64), ew, gamma=0.8, q=0.1)
    torch.testing.assert_close(post.mean, 0.8 * mu, rtol=1e-15, atol=0)
    torch.testing.assert_close(post.marginal_variance(), 0.64 * v + 0.1, rtol=4e-16, atol=0)


@pytest.mark.parametrize("kind", STRUCTURES)
def test_f17_permutation_invariance(kind):
    mu, v, Hw, ew = _random_instance(11, 7, 3)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(0))
    a = _one_step(kind, mu, v, Hw, ew, 0.9, 0.05)
    b = _one_step(kind, mu[perm], v[perm], Hw[:, perm], ew, 0.9, 0.05)
    torch.testing.assert_close(b.mean, a.mean[perm], rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(b.covariance(), a.covariance()[perm][:, perm], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", STRUCTURES)
def test_predictive_cov_and_quad_use_the_predicted_belief(kind):
    mu, v, Hw, ew = _random_instance(5, 6, 2)
    g = torch.Generator().manual_seed(1)
    J = torch.randn(4, 3, 6, generator=g, dtype=F64)
    gamma, q = 0.9, 0.2
    post = _make_posterior(kind, mu, 1.0)
    _set_diagonal_prior(post, v)
    Sp = torch.diag(gamma ** 2 * v + q)
    expected = torch.einsum("ncp,pq,nkq->nck", J, Sp, J)
    torch.testing.assert_close(post.predictive_cov(J, gamma, q), expected, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(post.predictive_var(J, gamma, q), expected.diagonal(dim1=1, dim2=2),
                               rtol=1e-12, atol=1e-14)
    _, quad = post.propose(Hw, ew, gamma, q, J=J)
    torch.testing.assert_close(quad, expected, rtol=1e-12, atol=1e-14)
    # without dynamics: the current covariance
    Sc = post.covariance()
    torch.testing.assert_close(post.predictive_cov(J), torch.einsum("ncp,pq,nkq->nck", J, Sc, J),
                               rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", STRUCTURES)
def test_propose_with_jacobian_returns_same_belief(kind):
    """Asking for the one-step-ahead quad does not change the update."""
    mu, v, Hw, ew = _random_instance(8, 5, 2)
    J = torch.randn(3, 2, 5, generator=torch.Generator().manual_seed(2), dtype=F64)
    a = _make_posterior(kind, mu, 1.0)
    b = _make_posterior(kind, mu, 1.0)
    for p in (a, b):
        _set_diagonal_prior(p, v)
    pa, qa = a.propose(Hw, ew, 0.9, 0.1)
    pb, qb = b.propose(Hw, ew, 0.9, 0.1, J=J)
    assert qa is None and qb.shape == (3, 2, 2)
    a.commit(pa)
    b.commit(pb)
    torch.testing.assert_close(a.mean, b.mean, rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(a.covariance(), b.covariance(), rtol=1e-14, atol=1e-15)


# ---------------------------------------------------------------------------------------------
# likelihood whitening == EKF formulas
# ---------------------------------------------------------------------------------------------
def _softmax(f):
    z = np.exp(f - f.max())
    return z / z.sum()


def _spd(P, rng):
    A = rng.normal(size=(P, P))
    return A @ A.T / P + 0.2 * np.eye(P)


@pytest.mark.parametrize("seed", range(5))
def test_categorical_update_equals_pseudo_inverse_kalman(seed):
    """spec/lofi.md fact 30 and diagonal-ekf F9/F10: logit-space whitening == pinv EKF on probabilities."""
    rng = np.random.default_rng(seed)
    K, P = 4, 6
    f = rng.normal(size=K)
    J = rng.normal(size=(K, P))
    y = np.eye(K)[seed % K]
    mu = rng.normal(size=P)
    Sigma = _spd(P, rng)

    p = _softmax(f)
    R = np.diag(p) - np.outer(p, p)
    H = R @ J
    e = y - p
    S = H @ Sigma @ H.T + R
    assert np.linalg.matrix_rank(S, tol=1e-10) == K - 1  # F10: S is singular
    Sp = np.linalg.pinv(S, rcond=1e-10, hermitian=True)
    Kg = Sigma @ H.T @ Sp
    mu_ref = mu + Kg @ e
    Sig_ref = Sigma - Kg @ S @ Kg.T
    # information form with R⁺ (= Jᵀ R J) and drop-last-class with ordinary inverses (F9)
    Sig_info = np.linalg.inv(np.linalg.inv(Sigma) + J.T @ R @ J)
    Hd, Rd, ed = H[:-1], R[:-1, :-1], e[:-1]
    Sd = Hd @ Sigma @ Hd.T + Rd
    Kd = Sigma @ Hd.T @ np.linalg.inv(Sd)
    np.testing.assert_allclose(Sig_info, Sig_ref, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(mu + Kd @ ed, mu_ref, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(Sigma - Kd @ Sd @ Kd.T, Sig_ref, rtol=1e-9, atol=1e-11)

    Hw, ew = Categorical().whiten(_t(f)[None], _t(J)[None], _t(y)[None])
    assert Hw.shape == (1, K, P) and ew.shape == (1, K)
    post = FullCovariance(_t(mu), 1.0)
    post.cov = _t(Sigma)
    pending, _ = post.propose(Hw[0], ew[0])
    post.commit(pending)
    np.testing.assert_allclose(post.mean.numpy(), mu_ref, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(post.covariance().numpy(), Sig_ref, rtol=1e-10, atol=1e-10)
    # the whitened square root: HwᵀHw = Jᵀ R J, Hwᵀ ew = Jᵀ e
    np.testing.assert_allclose((Hw[0].T @ Hw[0]).numpy(), J.T @ R @ J, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose((Hw[0].T @ ew[0]).numpy(), J.T @ e, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_categorical_stream_equals_pseudo_inverse_ekf(batch_size):
    """A linear-logit stream through OnlineFilter == hand-coded pinv EKF (block-diagonal R per batch)."""
    rng = np.random.default_rng(7)
    D, K, n, s0 = 2, 3, 12, 0.8
    X = rng.normal(size=(n, D))
    labels = rng.integers(0, K, size=n)
    Y = np.eye(K)[labels]
    mu0 = 0.3 * rng.normal(size=K * D + K)
    post = FullCovariance(_t(mu0), s0)
    _filter(_linear_adapter(D, K), Categorical(), post, K).run(_t(X), _t(Y), batch_size=batch_size)

    Hall = _linear_design(X, K)
    P = Hall.shape[2]
    mu, Sig = mu0.copy(), s0 * np.eye(P)
    for i in range(0, n, batch_size):
        j = min(i + batch_size, n)
        Hs, Rs, es = [], [], []
        for t in range(i, j):
            p = _softmax(Hall[t] @ mu)
            R = np.diag(p) - np.outer(p, p)
            Hs.append(R @ Hall[t])
            Rs.append(R)
            es.append(Y[t] - p)
        H = np.vstack(Hs)
        Rb = np.zeros((len(Rs) * K, len(Rs) * K))
        for b, R in enumerate(Rs):
            Rb[b * K:(b + 1) * K, b * K:(b + 1) * K] = R
        S = H @ Sig @ H.T + Rb
        Kg = Sig @ H.T @ np.linalg.pinv(S, rcond=1e-10, hermitian=True)
        mu = mu + Kg @ np.concatenate(es)
        Sig = Sig - Kg @ S @ Kg.T
    np.testing.assert_allclose(post.mean.numpy(), mu, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(post.covariance().numpy(), Sig, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("gap", [5.0, 40.0, 400.0])
def test_categorical_update_is_exact_for_saturated_softmax(gap):
    """The observed class has probability down to 1e-174: the update still equals the information form
    Σ' = (Σ⁻¹ + Jᵀ R J)⁻¹, μ' = μ + Σ' Jᵀ (y − p), although ew = e/√p is huge for that class."""
    rng = np.random.default_rng(int(gap))
    K, P = 4, 6
    f = np.array([gap, 0.0, 0.5, -0.3])
    J = rng.normal(size=(K, P))
    y = np.eye(K)[1]
    mu = rng.normal(size=P)
    Sigma = _spd(P, rng)
    p = _softmax(f)
    R = np.diag(p) - np.outer(p, p)
    Sig_ref = np.linalg.inv(np.linalg.inv(Sigma) + J.T @ R @ J)
    mu_ref = mu + Sig_ref @ J.T @ (y - p)
    Hw, ew = Categorical().whiten(_t(f)[None], _t(J)[None], _t(y)[None])
    for kind in ("full", "vd-exact"):
        post = _make_posterior(kind, _t(mu), 1.0)
        if kind == "full":
            post.cov = _t(Sigma)
        else:
            post.var = _t(np.diag(Sigma))
            Sigma_d = np.diag(np.diag(Sigma))
            Sd = np.linalg.inv(np.linalg.inv(Sigma_d) + J.T @ R @ J)
            mu_ref, Sig_ref = mu + Sd @ J.T @ (y - p), Sd
        pending, _ = post.propose(Hw[0], ew[0])
        post.commit(pending)
        step = np.abs(mu_ref - mu).max()
        np.testing.assert_allclose(post.mean.numpy(), mu_ref, rtol=0, atol=1e-12 * step)
        if kind == "full":
            np.testing.assert_allclose(post.covariance().numpy(), Sig_ref, rtol=1e-10, atol=1e-13)
        else:
            np.testing.assert_allclose(1 / post.var.numpy(), 1 / np.diag(Sigma) + np.diag(J.T @ R @ J),
                                       rtol=1e-12)


def test_probit_predictive_limits():
    """spec/lofi.md fact 27: zero variance gives the softmax / sigmoid; variance shrinks logits."""
    f = _t([[2.0, -1.0, 0.5], [0.0, 3.0, -2.0]])
    zero = torch.zeros_like(f)
    torch.testing.assert_close(probit_probabilities(f, zero, binary=False), torch.softmax(f, -1),
                               rtol=1e-15, atol=1e-16)
    var = _t([[1.0, 2.0, 0.5], [4.0, 0.0, 1.0]])
    expected = torch.softmax(f / torch.sqrt(1 + np.pi * var / 8), -1)
    torch.testing.assert_close(probit_probabilities(f, var, binary=False), expected, rtol=1e-14, atol=0)
    huge = probit_probabilities(f, torch.full_like(f, 1e12), binary=False)
    torch.testing.assert_close(huge, torch.full_like(f, 1 / 3), rtol=0, atol=1e-4)
    f1, v1 = _t([[1.5], [-0.7]]), _t([[0.0], [3.0]])
    pb = probit_probabilities(f1, v1, binary=True)
    assert pb.shape == (2, 2)
    torch.testing.assert_close(pb.sum(1), torch.ones(2, dtype=F64), rtol=0, atol=1e-15)
    torch.testing.assert_close(pb[0, 1], torch.sigmoid(f1[0, 0]), rtol=1e-15, atol=0)
    torch.testing.assert_close(pb[1, 1], torch.sigmoid(f1[1, 0] / np.sqrt(1 + 3 * np.pi / 8)),
                               rtol=1e-15, atol=0)
    # uncertainty moves the probability towards 1/2
    assert abs(pb[1, 1].item() - 0.5) < abs(torch.sigmoid(f1[1, 0]).item() - 0.5)


@pytest.mark.parametrize("family", ["gaussian", "bernoulli", "poisson", "categorical"])
def test_whitening_matches_ekf_information(family):
    """HwᵀHw = Jᵀ R⁻¹… (Gaussian) or Jᵀ R J (canonical link), Hwᵀ ew = the score Jᵀ(y − mean)·…"""
    rng = np.random.default_rng(3)
    n, P = 5, 4
    C = {"gaussian": 2, "bernoulli": 1, "poisson": 1, "categorical": 3}[family]
    f = rng.normal(size=(n, C))
    J = rng.normal(size=(n, C, P))
    if family == "gaussian":
        r = np.array([0.3, 1.7])
        lik, state = Gaussian(r), Gaussian(r).initial_state(C, CPU, F64)
        Y = f + rng.normal(size=(n, C))
        mean = f
    elif family == "bernoulli":
        lik, state = Bernoulli(), None
        Y = rng.integers(0, 2, size=(n, 1)).astype(float)
        mean = 1 / (1 + np.exp(-f))
    elif family == "poisson":
        lik, state = Poisson(), None
        Y = rng.poisson(2.0, size=(n, 1)).astype(float)
        mean = np.exp(f)
    else:
        lik, state = Categorical(), None
        Y = np.eye(C)[rng.integers(0, C, size=n)]
        mean = np.stack([_softmax(row) for row in f])
    torch.testing.assert_close(lik.mean(_t(f)), _t(mean), rtol=1e-14, atol=1e-15)
    Hw, ew = lik.whiten(_t(f), _t(J), _t(Y), state)
    assert Hw.shape == (n, C, P) and ew.shape == (n, C)
    for i in range(n):
        if family == "gaussian":
            info = J[i].T @ np.diag(1 / r) @ J[i]
            score = J[i].T @ ((Y[i] - mean[i]) / r)
        else:
            if family == "categorical":
                R = np.diag(mean[i]) - np.outer(mean[i], mean[i])
            else:
                R = np.diag(mean[i])
                if family == "bernoulli":
                    R = np.diag(mean[i] * (1 - mean[i]))
            info = J[i].T @ R @ J[i]
            score = J[i].T @ (Y[i] - mean[i])
        np.testing.assert_allclose((Hw[i].T @ Hw[i]).numpy(), info, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose((Hw[i].T @ ew[i]).numpy(), score, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("family", ["bernoulli", "poisson"])
def test_scalar_glm_update_equals_textbook_ekf(family):
    """Full-covariance step from the whitened rows == EKF with H = R J, S = H Σ Hᵀ + R, K = Σ Hᵀ S⁻¹."""
    rng = np.random.default_rng(11)
    P = 5
    mu = rng.normal(size=P)
    Sigma = _spd(P, rng)
    J = rng.normal(size=(1, P))
    f = np.array([0.4])
    if family == "bernoulli":
        lik, y = Bernoulli(), np.array([1.0])
        m = 1 / (1 + np.exp(-f))
        R = m * (1 - m)
    else:
        lik, y = Poisson(), np.array([3.0])
        m = np.exp(f)
        R = m
    H = R[:, None] * J
    S = H @ Sigma @ H.T + np.diag(R)
    K = Sigma @ H.T @ np.linalg.inv(S)
    mu_ref = mu + K @ (y - m)
    Sig_ref = Sigma - K @ S @ K.T
    Hw, ew = lik.whiten(_t(f)[None], _t(J)[None], _t(y)[None])
    post = FullCovariance(_t(mu), 1.0)
    post.cov = _t(Sigma)
    pending, _ = post.propose(Hw[0], ew[0])
    post.commit(pending)
    np.testing.assert_allclose(post.mean.numpy(), mu_ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(post.covariance().numpy(), Sig_ref, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------------------------------------
# property tests over random streams
# ---------------------------------------------------------------------------------------------
@PROPERTY
@given(
    seed=st.integers(0, 2 ** 31 - 1),
    D=st.integers(1, 3),
    hidden=st.sampled_from([(), (2,), (3,)]),
    family=st.sampled_from(["gaussian", "bernoulli", "categorical"]),
    s0=st.floats(1e-3, 10.0),
    q=st.sampled_from([0.0, 1e-4, 0.1]),
    gamma=st.sampled_from([1.0, 0.99, 0.7]),
    batch_size=st.integers(1, 4),
    n=st.integers(1, 15),
)
def test_streams_keep_beliefs_valid(seed, D, hidden, family, s0, q, gamma, batch_size, n):
    rng = np.random.default_rng(seed)
    C = {"gaussian": 2, "bernoulli": 1, "categorical": 3}[family]
    X = _t(rng.normal(size=(n, D)) * 2)
    if family == "gaussian":
        lik = Gaussian(rng.uniform(0.01, 2.0, size=C))
        Y = _t(rng.normal(size=(n, C)) * 3)
    elif family == "bernoulli":
        lik = Bernoulli()
        Y = _t(rng.integers(0, 2, size=(n, 1)).astype(float))
    else:
        lik = Categorical()
        Y = _t(np.eye(C)[rng.integers(0, C, size=n)])
    net = make_mlp(D, hidden, C, "tanh", seed=seed % 1000)
    probe = _t(rng.normal(size=(3, D)))
    for kind in STRUCTURES:
        ad = make_adapter(net, CPU, F64, D)
        mu0 = ad.initial_theta() + _t(rng.normal(size=ad.n_params)) * 0.1
        post = _make_posterior(kind, mu0, s0)
        filt = _filter(ad, lik, post, C, gamma, q)
        for i in range(0, n, batch_size):
            _, var = _run_recorded(filt, X[i:i + batch_size], Y[i:i + batch_size])
            assert bool((var > 0).all()), (kind, var)
            Sig = post.covariance()
            scale = Sig.abs().max().item()
            assert torch.isfinite(post.mean).all()
            if kind == "full":
                assert (Sig - Sig.T).abs().max().item() <= 1e-12 * scale
                eig = torch.linalg.eigvalsh(0.5 * (Sig + Sig.T))
                assert eig.min().item() >= -1e-10 * scale, (eig.min().item(), scale)
            else:
                assert bool((post.var > 0).all())
            assert bool((post.marginal_variance() > 0).all())
            _, Jp = ad.forward_jacobian(post.mean, probe)
            assert bool((post.predictive_var(Jp) > 0).all())
            assert bool((post.predictive_var(Jp, gamma, q) > 0).all())


# ---------------------------------------------------------------------------------------------
# transactionality
# ---------------------------------------------------------------------------------------------
def _snapshot(post):
    return post.mean.clone(), post.covariance().clone()


def _assert_same(post, snap):
    assert torch.equal(post.mean, snap[0])
    assert torch.equal(post.covariance(), snap[1])


@pytest.mark.parametrize("kind", STRUCTURES)
@pytest.mark.parametrize("bad", ["nan-ew", "inf-Hw", "nan-Hw", "not-pd"])
@pytest.mark.parametrize("m", [1, 2])
def test_failed_propose_raises_and_keeps_belief(kind, bad, m):
    mu, v, Hw, ew = _random_instance(2, 4, m)
    post = _make_posterior(kind, mu, 1.0)
    # take one good step first (a structure may keep buffers between steps)
    pending, _ = post.propose(Hw, ew, 0.9, 0.1)
    post.commit(pending)
    if bad == "nan-ew":
        ew = ew.clone()
        ew[m - 1] = float("nan")
    elif bad == "inf-Hw":
        Hw = Hw.clone()
        Hw[0, 2] = float("inf")
    elif bad == "nan-Hw":
        Hw = Hw.clone()
        Hw[m - 1, 0] = float("nan")
    else:
        # a belief with a negative variance makes the step fail the PD / positivity checks
        neg = torch.tensor([-5.0, 0.3, 0.3, 0.3], dtype=F64)
        _set_diagonal_prior(post, neg)
        Hw = torch.zeros(m, 4, dtype=F64)
        # h = 1: S = 1 − 5 < 0 (Cholesky / square root fails); h = 0.1: S > 0, new variance < 0
        Hw[0, 0] = 1.0 if kind in ("full", "vd-exact") else 0.1
    snap = _snapshot(post)
    J = torch.ones(2, 1, 4, dtype=F64)
    with pytest.raises(FilterStepError):
        post.propose(Hw, ew, 1.0, 0.0)
    _assert_same(post, snap)
    with pytest.raises(FilterStepError):
        post.propose(Hw, ew, 0.9, 0.1, J=J)
    _assert_same(post, snap)
    # the structure still works after the failure
    if bad != "not-pd":
        _, _, Hw2, ew2 = _random_instance(3, 4, m)
        pending, _ = post.propose(Hw2, ew2)
        post.commit(pending)
        assert torch.isfinite(post.mean).all()
        assert torch.isfinite(post.covariance()).all()


@pytest.mark.parametrize("kind", STRUCTURES)
@pytest.mark.parametrize("batch_size,bad_row", [(1, 7), (3, 7), (3, 6), (4, 0)])
@pytest.mark.parametrize("adaptive", [False, True])
def test_run_failure_reports_rows_done_and_keeps_belief(kind, batch_size, bad_row, adaptive):
    D, n = 2, 12
    X, Y, _ = _linear_problem(6, n, D, 1)
    Y = Y.copy()
    Y[bad_row, 0] = np.nan
    ad = make_adapter(make_mlp(D, (3,), 1, "tanh", seed=1), CPU, F64, D)
    obs = "adaptive" if adaptive else 0.5

    def fresh():
        post = _make_posterior(kind, ad.initial_theta(), 0.5)
        return _filter(ad, Gaussian(obs), post, 1, gamma=0.95, q=0.01)

    filt = fresh()
    with pytest.raises(FilterStepError) as info:
        filt.run(_t(X), _t(Y), batch_size=batch_size)
    done = (bad_row // batch_size) * batch_size
    assert info.value.rows_done == done
    ref = fresh()
    if done:
        ref.run(_t(X[:done]), _t(Y[:done]), batch_size=batch_size)
    torch.testing.assert_close(filt.posterior.mean, ref.posterior.mean, rtol=0, atol=0)
    torch.testing.assert_close(filt.posterior.covariance(), ref.posterior.covariance(), rtol=0, atol=0)
    for key in ("r", "weight"):
        torch.testing.assert_close(filt.noise_state[key], ref.noise_state[key], rtol=0, atol=0)
    # nothing is lost: the stream continues after the bad row
    filt.run(_t(X[bad_row + 1:]), _t(Y[bad_row + 1:]), batch_size=batch_size)
    assert torch.isfinite(filt.posterior.mean).all()
    assert torch.isfinite(filt.noise_state["r"]).all()


# ---------------------------------------------------------------------------------------------
# adaptive observation variance (spec/lofi.md §2.9 C.2, fact 29)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("eps_min", [0.0, 0.2])
def test_adaptive_noise_matches_hand_recursion(batch_size, weighted, eps_min):
    D, C, n, s0, gamma, q = 2, 2, 10, 0.5, 0.95, 0.01
    X, Y, mu0 = _linear_problem(8, n, D, C)
    Y = 2.0 * Y  # residual variance well away from the 1e-6 floor
    w = np.linspace(0.5, 2.0, n) if weighted else np.ones(n)
    lik = Gaussian("adaptive", eps_min=eps_min)
    post = FullCovariance(_t(mu0), s0)
    filt = _filter(_linear_adapter(D, C), lik, post, C, gamma, q)
    seen = []

    def record(X_, f, quad, noise_state, predicted=None):
        seen.append(noise_state["r"].clone())
        return f

    filt.run(_t(X), _t(Y), w=_t(w) if weighted else None, batch_size=batch_size, record=record)

    H = _linear_design(X, C)
    P = H.shape[2]
    mu, Sig, r, total = mu0.copy(), s0 * np.eye(P), None, 0.0
    r_before = []
    for i in range(0, n, batch_size):
        j = min(i + batch_size, n)
        r_before.append(r)
        mu = gamma * mu
        Sig = gamma ** 2 * Sig + q * np.eye(P)
        for t in range(i, j):  # prior-predictive residuals, all at μ⁻ of this step
            total += w[t]
            eps = max(min(eps_min * w[t], 1.0), w[t] / total)  # the floor scales with the weight
            resid2 = np.mean((Y[t] - H[t] @ mu) ** 2)
            r = max((1 - eps) * (1.0 if r is None else r) + eps * resid2, 1e-6)
        Hb = H[i:j].reshape(-1, P)
        Rb = np.diag(np.repeat(r / w[i:j], C))
        S = Hb @ Sig @ Hb.T + Rb
        K = np.linalg.solve(S, Hb @ Sig).T
        mu = mu + K @ (Y[i:j].reshape(-1) - Hb @ mu)
        Sig = Sig - K @ S @ K.T
    np.testing.assert_allclose(filt.noise_state["r"].numpy(), np.full(C, r), rtol=1e-12)
    np.testing.assert_allclose(filt.noise_state["weight"].numpy(), w.sum(), rtol=1e-14)
    np.testing.assert_allclose(post.mean.numpy(), mu, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(post.covariance().numpy(), Sig, rtol=1e-10, atol=1e-13)
    # the record callback sees the noise state that held *before* each step (r̂_0 = 1 initially)
    assert len(seen) == len(r_before)
    np.testing.assert_allclose(seen[0].numpy(), np.ones(C))
    for got, want in zip(seen[1:], r_before[1:]):
        np.testing.assert_allclose(got.numpy(), np.full(C, want), rtol=1e-12)


def test_adaptive_noise_is_running_mean_of_squared_errors():
    """Fact 29: with ε_t = 1/t the estimate is the running mean of the prior-predictive MSEs."""
    D, C, n = 2, 3, 9
    X, Y, mu0 = _linear_problem(9, n, D, C)
    lik = Gaussian("adaptive")
    post = DiagonalCovariance(_t(mu0), 0.3, projection="vd")
    filt = _filter(_linear_adapter(D, C), lik, post, C)
    rows = iter(range(n))

    def mse(X_, f, quad, noise_state, predicted=None):
        i = next(rows)
        return ((_t(Y[i]) - f[0]) ** 2).mean().reshape(1, 1)

    mses = filt.run(_t(X), _t(Y), record=mse)
    assert mses.shape == (n, 1)
    np.testing.assert_allclose(filt.noise_state["r"].numpy(), np.full(C, mses.mean().item()), rtol=1e-12)


def test_adaptive_noise_is_floored():
    D, C, n = 1, 1, 4
    X = np.linspace(-1, 1, n)[:, None]
    Y = np.zeros((n, 1))
    lik = Gaussian("adaptive", min_variance=1e-3)
    post = FullCovariance(torch.zeros(2, dtype=F64), 1.0)
    filt = _filter(_linear_adapter(D, C), lik, post, C)
    filt.run(_t(X), _t(Y))  # zero residuals everywhere
    np.testing.assert_allclose(filt.noise_state["r"].numpy(), [1e-3], rtol=0)


# ---------------------------------------------------------------------------------------------
# sampling and small API contracts
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["full", "vd"])
def test_samples_have_the_belief_moments(kind):
    mu, v, Hw, ew = _random_instance(4, 3, 2, scale=2.0)
    post = _one_step(kind, mu, v, Hw, ew)
    n = 40000
    draws = post.sample(n, torch.Generator().manual_seed(0))
    assert draws.shape == (n, 3)
    Sig = post.covariance()
    sd = Sig.diagonal().sqrt()
    # mean within 5 standard errors, covariance entries within 5 standard errors (≈ σ_i σ_j √(2/n))
    assert ((draws.mean(0) - post.mean).abs() <= 5 * sd / np.sqrt(n)).all()
    emp = torch.cov(draws.T)
    assert ((emp - Sig).abs() <= 5 * torch.outer(sd, sd) * np.sqrt(2.0 / n)).all()
    # reproducible with the same generator seed
    again = post.sample(n, torch.Generator().manual_seed(0))
    assert torch.equal(draws, again)


def test_full_sample_falls_back_on_semidefinite_covariance():
    post = FullCovariance(torch.zeros(3, dtype=F64), 1.0)
    u = torch.tensor([1.0, 2.0, -1.0], dtype=F64)
    post.cov = torch.outer(u, u)  # rank one: Cholesky fails
    draws = post.sample(500, torch.Generator().manual_seed(1))
    assert torch.isfinite(draws).all()
    # every draw lies on the line spanned by u
    resid = draws - torch.outer(draws @ u / (u @ u), u)
    assert resid.abs().max().item() < 1e-10
    assert draws.std(0).min().item() > 0.1


def test_diagonal_rejects_unknown_options():
    with pytest.raises(ValueError, match="projection"):
        DiagonalCovariance(torch.zeros(2, dtype=F64), 1.0, projection="kl")
    with pytest.raises(ValueError, match="vd_mean"):
        DiagonalCovariance(torch.zeros(2, dtype=F64), 1.0, vd_mean="eq25")


def test_posteriors_do_not_alias_the_prior_mean():
    mu = torch.zeros(3, dtype=F64)
    for kind in STRUCTURES:
        post = _make_posterior(kind, mu, 1.0)
        pending, _ = post.propose(torch.ones(1, 3, dtype=F64), torch.ones(1, dtype=F64))
        post.commit(pending)
        assert torch.count_nonzero(mu) == 0
