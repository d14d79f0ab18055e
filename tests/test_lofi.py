"""Tests of LoFi: :class:`~skfilter.posteriors.LowRankPrecision` and the LoFi estimators.

Oracles used here, none of them the code under test:

* the golden stream ``../shared/reference/lofi_concrete.npz`` from an independent JAX implementation
  (cross-checked by an independent NumPy one), through the engine and through the estimator API;
* dense NumPy linear algebra on small problems: the exact predicted covariance ``γ²Σ + qI``, the
  information-form EKF update, the best rank-``L`` approximation by a dense eigendecomposition, the
  inflation maps of App. E written as dense precision / mode formulas;
* :class:`FullCovariance` (full EKF) and :class:`DiagonalCovariance` ('vd', exact mean) as the
  limiting cases ``L ≥ P``, early steps (``t·C ≤ L``) and ``L = 0``; closed-form Bayesian linear
  regression for the linear-Gaussian model;
* the checkable facts of spec/lofi.md §6 (facts 1, 3–5, 6, 7–11, 13–15, 17–18, 20–25, 26, 28).

Comparisons are on ``W Wᵀ`` (never ``W`` itself: the SVD basis is arbitrary up to sign/rotation).
"""

from __future__ import annotations

import itertools
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skfilter import LoFiClassifier, LoFiRegressor
from skfilter.exceptions import FilterStepError
from skfilter.kernels import compiled_kernels
from skfilter.likelihoods import Categorical, Gaussian
from skfilter.model_selection import prequential_predict
from skfilter.models import make_adapter, make_mlp
from _beliefs import CPU, F64, DiagonalCovariance, FullCovariance, LowRankPrecision  # noqa: F401
from _beliefs import as_tensor_copy as _t, golden_net as _golden_net, load_reference as _load_reference

from _beliefs import make_filter as _filter, record_output_and_variance as _record, run_recorded as _run_recorded


PROPERTY = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
VARIANTS = ["diagonal", "spherical"]
INFLATIONS = ["simple", "hybrid", "bayesian"]


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _np(t):
    return t.detach().cpu().numpy().astype(np.float64).copy()


def _ups_vec(post):
    u = _np(post.diagonal)
    return np.full(post.n_params, u[0]) if u.size == 1 else u


def _dense_precision(post):
    W = _np(post.low_rank).T
    return np.diag(_ups_vec(post)) + W @ W.T


def _dense_cov(post):
    return np.linalg.inv(_dense_precision(post))


def _close(actual, expected, rtol=1e-10, atol_rel=1e-12):
    """Relative comparison, with an absolute floor relative to the largest expected entry."""
    expected = np.asarray(expected, dtype=np.float64)
    scale = max(float(np.abs(expected).max(initial=0.0)), 1e-300)
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), expected, rtol=rtol, atol=atol_rel * scale)


def _random_state(seed, P, L, variant="diagonal", mean_shift=0.0, **kw):
    """A LoFi belief with a random DLR / SPL precision (spherical: ``W = U diag(λ)``, ``UᵀU = I``).

    The prior (``η₀ = η`` for spherical) is ``N(μ₀, 1/η₀ I)`` with μ₀ drawn here; the current mean
    is ``μ₀ + mean_shift · z``.
    """
    rng = np.random.default_rng(seed)
    mu0 = rng.normal(size=P)
    if variant == "diagonal":
        eta0 = 0.8
        ups = 0.5 + 2.0 * rng.uniform(size=P)
        W = rng.normal(size=(P, L))
    else:
        eta0 = 0.5 + 2.0 * rng.uniform()
        ups = np.array([eta0])
        U, _ = np.linalg.qr(rng.normal(size=(P, L)))
        W = U * (0.5 + 2.0 * rng.uniform(size=L))
    post = LowRankPrecision(_t(mu0), 1.0 / eta0, rank=L, variant=variant, **kw)
    post.ups = _t(ups)
    post.W = _t(W)
    post.mean = _t(mu0 + mean_shift * rng.normal(size=P))
    return post, mu0


def _rows(seed, m, P, scale=1.0):
    g = np.random.default_rng(seed)
    return _t(scale * g.normal(size=(m, P))), _t(g.normal(size=m))


def _step(post, Hw, ew, gamma=1.0, q=0.0):
    pending, _ = post.propose(Hw, ew, gamma, q)
    post.commit(pending)


def _zero_info_step(post, gamma=1.0, q=0.0):
    """A step with one uninformative row (``Hw = 0``): the committed belief is the predicted one."""
    P = post.n_params
    _step(post, torch.zeros(1, P, dtype=F64), torch.zeros(1, dtype=F64), gamma, q)


def _top_rank(A, L):
    """Best rank-L approximation of a symmetric PSD matrix (Eckart–Young)."""
    lam, V = np.linalg.eigh(A)
    lam, V = lam[::-1][:L], V[:, ::-1][:, :L]
    return (V * lam) @ V.T








def _mlp_stream(seed, n, D, hidden, C, activation="tanh"):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    Y = np.sin(X @ rng.normal(size=(D, C))) + 0.2 * rng.normal(size=(n, C))
    ad = make_adapter(make_mlp(D, hidden, C, activation, seed=seed), CPU, F64, D)
    return ad, _t(X), _t(Y)


def _sampler_map(post):
    """Run :meth:`sample` with the standard-normal draws replaced by basis vectors.

    Returns ``(draws − μ)`` for ``n = P + L`` draws: the ``P`` first rows are the images of the
    ``P`` basis vectors of the ``(n, P)`` draw, the ``L`` last ones of the ``(n, L)`` draw, so the
    rows span the sampler's affine map and ``rowsᵀ rows`` is the covariance it produces, exactly.
    """
    P, L = post.W.shape
    assert P != L
    n = P + L

    def fake(*size, generator=None, dtype=None, device=None, **kw):
        shape = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else tuple(size)
        assert len(shape) == 2 and shape[0] == n, shape
        out = torch.zeros(shape, dtype=dtype or F64)
        if shape[1] == P:
            out[:P] = torch.eye(P, dtype=out.dtype)
        elif shape[1] == L:
            out[P:] = torch.eye(L, dtype=out.dtype)
        elif shape[1] == P + L:
            out[:] = torch.eye(P + L, dtype=out.dtype)
        else:  # pragma: no cover - an unexpected draw
            raise AssertionError(shape)
        return out

    with mock.patch.object(torch, "randn", fake):
        draws = post.sample(n, torch.Generator().manual_seed(0))
    return _np(draws) - _np(post.mean)[None, :]


def _dense_lofi_step(mu, Pr, Hw, ew, gamma, q, inflation=None, alpha=0.0, eta_pp=None, m0=None):
    """One LoFi step with no truncation, densely: inflation (App. E), predict (eq. 16), update (26)."""
    P = len(mu)
    eye = np.eye(P)
    if inflation == "simple" and alpha:
        Pr = Pr / (1 + alpha)
    elif inflation in ("hybrid", "bayesian") and alpha:
        Pr_new = (Pr + alpha * eta_pp * eye) / (1 + alpha)
        if inflation == "bayesian":  # eq. 79 = mode of the tempered product (fact 23)
            mu = np.linalg.solve(Pr_new, (Pr @ mu + alpha * eta_pp * m0) / (1 + alpha))
        Pr = Pr_new
    Sig = gamma ** 2 * np.linalg.inv(Pr) + q * eye
    mu = gamma * mu
    Pr_post = np.linalg.inv(Sig) + Hw.T @ Hw
    mu = mu + np.linalg.solve(Pr_post, Hw.T @ ew)
    return mu, Pr_post


# ---------------------------------------------------------------------------------------------
# golden stream from the independent implementation
# ---------------------------------------------------------------------------------------------




def _golden_close(actual, expected):
    expected = np.asarray(expected)
    np.testing.assert_allclose(actual, expected, rtol=1e-8, atol=1e-10 * np.abs(expected).max())


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "torch.func"])
def test_lofi_reproduces_golden_concrete_through_engine(fused):
    d = _load_reference("lofi_concrete.npz")
    assert str(d["kind"]) == "lofi"
    D = d["X"].shape[1]
    ad = make_adapter(_golden_net(d), CPU, F64, D, fused=fused)
    assert ad.n_params == d["mu_final"].shape[0] == 501
    R, q, rank = float(d["R"]), float(d["q"]), int(d["rank"])
    post = LowRankPrecision(ad.initial_theta(), float(d["prior_var"]), rank=rank)
    filt = _filter(ad, Gaussian(R), post, 1, gamma=1.0, q=q)
    f, var = _run_recorded(filt, _t(d["X"]), _t(d["y"]).reshape(-1, 1))

    _golden_close(f.numpy()[:, 0], d["yhat"])
    _golden_close(var.numpy()[:, 0] + R, d["yvar"])
    _golden_close(post.mean.numpy(), d["mu_final"])
    f_test, J_test = ad.forward_jacobian(post.mean, _t(d["X_test"]))
    _golden_close(f_test.numpy()[:, 0], d["yhat_test"])
    _golden_close(post.predictive_var(J_test).numpy()[:, 0] + R, d["yvar_test"])
    _golden_close(post.predictive_cov(J_test).numpy()[:, 0, 0] + R, d["yvar_test"])
    assert post.W.shape == (501, rank)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled-kernel", "torch-engine"])
def test_lofi_reproduces_golden_concrete_through_estimator(compiled):
    """On both paths of the estimator (skfilter.kernels and the torch engine)."""
    with compiled_kernels(compiled):
        _check_golden_through_estimator()


def _check_golden_through_estimator():
    d = _load_reference("lofi_concrete.npz")
    net = _golden_net(d)
    w_before = [p.detach().clone() for p in net.parameters()]
    R, q, rank = float(d["R"]), float(d["q"]), int(d["rank"])
    assert rank == 10
    reg = LoFiRegressor(module=net, rank=10, prior_variance=float(d["prior_var"]), obs_variance=R,
                        process_noise=q)
    mean, std = prequential_predict(reg, d["X"], d["y"], return_std=True)
    assert mean.shape == std.shape == (d["X"].shape[0],)
    _golden_close(mean, d["yhat"])
    _golden_close(std ** 2, d["yvar"])
    _golden_close(_np(reg.posterior_.mean), d["mu_final"])
    mean_test, std_test = reg.predict(d["X_test"], return_std=True)
    _golden_close(mean_test, d["yhat_test"])
    _golden_close(std_test ** 2, d["yvar_test"])
    # the module instance given is the prior mean and is not modified
    for p, p0 in zip(net.parameters(), w_before):
        assert torch.equal(p.detach(), p0)


# ---------------------------------------------------------------------------------------------
# limiting cases (spec/lofi.md §6 facts 13–15, 17)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("gamma,q", [(1.0, 0.0), (1.0, 0.05), (0.9, 0.02)])
def test_early_steps_equal_full_ekf(variant, gamma, q):
    """Fact 14: precision exact while t·C ≤ L, mean exact while (t−1)·C ≤ L (W₀ = 0)."""
    D, hidden, C, L, s0 = 3, (4,), 2, 7, 0.8
    R = np.array([0.3, 0.1])
    ad, X, Y = _mlp_stream(0, 5, D, hidden, C)
    P = ad.n_params
    assert P == 26
    lofi = LowRankPrecision(ad.initial_theta(), s0, rank=L, variant=variant)
    full = FullCovariance(ad.initial_theta(), s0)
    f_lofi = _filter(ad, Gaussian(R), lofi, C, gamma, q)
    f_full = _filter(ad, Gaussian(R), full, C, gamma, q)
    for t in range(1, 6):
        out_l = f_lofi.step(X[t - 1:t], Y[t - 1:t], record=_record)
        out_f = f_full.step(X[t - 1:t], Y[t - 1:t], record=_record)
        if (t - 1) * C <= L:
            # the one-step-ahead predictive uses the belief after t−1 steps, exact if (t−1)·C ≤ L
            _close(out_l.numpy(), out_f.numpy(), rtol=1e-9)
            _close(_np(lofi.mean), _np(full.mean), rtol=1e-9)
        cov_l, cov_f = _dense_cov(lofi), _np(full.covariance())
        if t * C <= L:
            _close(cov_l, cov_f, rtol=1e-9, atol_rel=1e-11)
            _close(_np(lofi.covariance()), cov_f, rtol=1e-9, atol_rel=1e-11)
        else:  # the comparison is sensitive: truncation loses information after that
            assert np.abs(cov_l - cov_f).max() > 1e-6 * np.abs(cov_f).max()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("gamma,q", [(1.0, 0.0), (1.0, 0.01), (0.95, 0.02)])
def test_full_rank_equals_full_ekf_over_a_stream(variant, gamma, q):
    """Fact 13: L = P gives the full EKF (mean, covariance, one-step-ahead predictive)."""
    D, hidden, C, s0, n = 3, (4,), 2, 0.5, 30
    R = np.array([0.2, 0.05])
    ad, X, Y = _mlp_stream(1, n, D, hidden, C)
    P = ad.n_params
    lofi = LowRankPrecision(ad.initial_theta(), s0, rank=P, variant=variant)
    full = FullCovariance(ad.initial_theta(), s0)
    f1, v1 = _run_recorded(_filter(ad, Gaussian(R), lofi, C, gamma, q), X, Y)
    f2, v2 = _run_recorded(_filter(ad, Gaussian(R), full, C, gamma, q), X, Y)
    _close(_np(lofi.mean), _np(full.mean), rtol=1e-8, atol_rel=1e-10)
    _close(_dense_cov(lofi), _np(full.covariance()), rtol=1e-7, atol_rel=1e-9)
    _close(_dense_precision(lofi), np.linalg.inv(_np(full.covariance())), rtol=1e-7, atol_rel=1e-9)
    _close(f1.numpy(), f2.numpy(), rtol=1e-8, atol_rel=1e-10)
    _close(v1.numpy(), v2.numpy(), rtol=1e-7, atol_rel=1e-9)


@pytest.mark.parametrize("gamma,q", [(1.0, 0.0), (1.0, 0.05), (0.9, 0.02)])
@pytest.mark.parametrize("batch_size", [1, 3])
def test_zero_rank_equals_vd_ekf_with_exact_mean(gamma, q, batch_size):
    """Fact 15: L = 0 is VD-EKF with the exact mean (eqs. 46–52)."""
    D, hidden, C, s0, n = 3, (4,), 2, 0.7, 40
    R = np.array([0.3, 0.1])
    ad, X, Y = _mlp_stream(2, n, D, hidden, C)
    lofi = LowRankPrecision(ad.initial_theta(), s0, rank=0)
    vd = DiagonalCovariance(ad.initial_theta(), s0, projection="vd", vd_mean="exact")
    f1, v1 = _run_recorded(_filter(ad, Gaussian(R), lofi, C, gamma, q), X, Y, batch_size)
    f2, v2 = _run_recorded(_filter(ad, Gaussian(R), vd, C, gamma, q), X, Y, batch_size)
    assert lofi.W.shape == (ad.n_params, 0)
    _close(_np(lofi.mean), _np(vd.mean), rtol=1e-10)
    _close(1.0 / _np(lofi.ups), _np(vd.var), rtol=1e-10)
    _close(_np(lofi.marginal_variance()), _np(vd.var), rtol=1e-10)
    _close(f1.numpy(), f2.numpy(), rtol=1e-10)
    _close(v1.numpy(), v2.numpy(), rtol=1e-10)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("L", [4, 6, 9])
def test_linear_gaussian_rank_at_least_T_is_bayesian_linear_regression(variant, L):
    """Facts 14/17: L ≥ T on a linear-Gaussian model gives the BLR posterior even when L < P."""
    D, T, s0, R = 5, 4, 0.7, 0.2
    rng = np.random.default_rng(3)
    X = rng.normal(size=(T, D))
    y = X @ rng.normal(size=D) + 0.3 + 0.4 * rng.normal(size=T)
    ad = make_adapter(make_mlp(D, (), 1, "identity", seed=0), CPU, F64, D)
    mu0 = _np(ad.initial_theta())
    post = LowRankPrecision(ad.initial_theta(), s0, rank=L, variant=variant)
    _filter(ad, Gaussian(R), post, 1).run(_t(X), _t(y).reshape(-1, 1))

    Xa = np.hstack([X, np.ones((T, 1))])  # θ = [w, b]
    prec = np.eye(D + 1) / s0 + Xa.T @ Xa / R
    mu = np.linalg.solve(prec, mu0 / s0 + Xa.T @ y / R)
    _close(_np(post.mean), mu, rtol=1e-10)
    _close(_dense_precision(post), prec, rtol=1e-10)
    _close(_np(post.covariance()), np.linalg.inv(prec), rtol=1e-10, atol_rel=1e-12)
    if variant == "spherical":  # the spherical part is data-independent
        _close(_np(post.ups), [1.0 / s0], rtol=1e-14)


@pytest.mark.parametrize("batch_size", [3, 4, 5])
def test_estimator_batches_equal_single_steps_on_linear_gaussian_model(batch_size):
    """Linear model, rank ≥ T (< P): a batch of B rows equals B single steps, and both equal BLR."""
    D, T, s0, R = 20, 12, 0.6, 0.3
    rng = np.random.default_rng(4)
    X = rng.normal(size=(T, D))
    y = X @ rng.normal(size=D) / np.sqrt(D) + 0.5 * rng.normal(size=T)
    kw = dict(hidden_layer_sizes=(), activation="identity", rank=T, prior_variance=s0, obs_variance=R,
              random_state=0)
    one = LoFiRegressor(batch_size=1, **kw).fit(X, y)
    many = LoFiRegressor(batch_size=batch_size, **kw).fit(X, y)
    assert one.n_params_ == D + 1 > T
    _close(_np(many.posterior_.mean), _np(one.posterior_.mean), rtol=1e-9, atol_rel=1e-11)
    _close(_dense_precision(many.posterior_), _dense_precision(one.posterior_), rtol=1e-9, atol_rel=1e-11)
    Xa = np.hstack([X, np.ones((T, 1))])
    prec = np.eye(D + 1) / s0 + Xa.T @ Xa / R
    _close(_dense_precision(many.posterior_), prec, rtol=1e-9, atol_rel=1e-11)
    # BLR mean: Pr μ_T = η₀ μ₀ + Xᵀy/R for the same prior mean μ₀ (the estimator's initial weights)
    mu0 = (prec @ _np(one.posterior_.mean) - Xa.T @ y / R) * s0
    _close(prec @ _np(many.posterior_.mean), mu0 / s0 + Xa.T @ y / R, rtol=1e-9, atol_rel=1e-11)
    p1, s1 = one.predict(X[:3], return_std=True)
    p2, s2 = many.predict(X[:3], return_std=True)
    _close(p2, p1, rtol=1e-9)
    _close(s2, s1, rtol=1e-9)


def test_spherical_zero_rank_keeps_spherical_covariance():
    """Fact 18: spherical L = 0 never changes η from data; the mean is the fixed-covariance EKF mean."""
    P, eta0, gamma, q = 6, 2.0, 0.9, 0.1
    mu = np.random.default_rng(5).normal(size=P)
    post = LowRankPrecision(_t(mu), 1.0 / eta0, rank=0, variant="spherical")
    eta = eta0
    for k in range(5):
        Hw, ew = _rows(100 + k, 2, P)
        _step(post, Hw, ew, gamma, q)
        eta = eta / (gamma ** 2 + q * eta)
        Hn, en = _np(Hw), _np(ew)
        mu = gamma * mu + Hn.T @ np.linalg.solve(Hn @ Hn.T / eta + np.eye(2), en) / eta
        _close(_np(post.ups), [eta], rtol=1e-13)
        _close(_np(post.mean), mu, rtol=1e-11)
        _close(_np(post.marginal_variance()), np.full(P, 1 / eta), rtol=1e-13)


# ---------------------------------------------------------------------------------------------
# predict step (facts 1, 3, 4, 5, 6)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("gamma,q", [(0.9, 0.3), (1.0, 0.3), (0.5, 1e-3), (0.9, 0.0), (0.0, 0.4)])
def test_predict_step_equals_dense_predicted_covariance(variant, gamma, q):
    """Facts 1/5: (Υ⁻ + W⁻W⁻ᵀ)⁻¹ = γ²Σ + qI, μ⁻ = γμ (eqs. 16 → 19/25; spherical eqs. 108–109)."""
    P, L = 7, 3
    post, _ = _random_state(10, P, L, variant)
    mu, Sig = _np(post.mean), _dense_cov(post)
    ups, W = _ups_vec(post), _np(post.W)
    target = gamma ** 2 * Sig + q * np.eye(P)
    # through predictive_cov with J = I
    _close(_np(post.predictive_cov(torch.eye(P, dtype=F64)[None], gamma, q))[0], target, rtol=1e-10)
    # through a step with an uninformative row: the committed belief is the predicted one
    _zero_info_step(post, gamma, q)
    _close(_np(post.mean), gamma * mu, rtol=1e-14)
    _close(np.linalg.inv(_dense_precision(post)), target, rtol=1e-10, atol_rel=1e-12)
    new_ups = _ups_vec(post)
    if variant == "diagonal":
        _close(new_ups, 1.0 / (gamma ** 2 / ups + q), rtol=1e-13)  # eq. 19
    else:
        eta = ups[0]
        _close(new_ups, np.full(P, eta / (gamma ** 2 + q * eta)), rtol=1e-13)  # eq. 108
        lam2 = (W * W).sum(0)
        d = gamma ** 2 + q * eta
        lam2_pred = gamma ** 2 * lam2 / (d * (d + q * lam2))  # eq. 109
        Wn = _np(post.W)
        _close(np.sort((Wn * Wn).sum(0)), np.sort(lam2_pred), rtol=1e-10, atol_rel=1e-13)
        # U unchanged: the new columns lie in span(U) and stay orthogonal
        U = W / np.sqrt(lam2)
        assert np.abs(Wn - U @ (U.T @ Wn)).max() < 1e-12 * np.abs(Wn).max(initial=1.0)
        G = Wn.T @ Wn
        assert np.abs(G - np.diag(np.diag(G))).max() < 1e-12 * np.abs(G).max(initial=1.0)
    # fact 4: 0 < Υ⁻ ≤ Υ/γ² and Υ⁻ ≤ 1/q
    assert (new_ups > 0).all()
    if gamma > 0:
        assert (new_ups <= ups / gamma ** 2 * (1 + 1e-13)).all()
    if q > 0:
        assert (new_ups <= 1 / q * (1 + 1e-13)).all()
    if gamma == 0.0:  # reset to the prior N(0, qI)
        assert np.abs(_np(post.W)).max(initial=0.0) == 0.0
        _close(new_ups, np.full(P, 1 / q), rtol=1e-14)


@pytest.mark.parametrize("variant", VARIANTS)
def test_static_predict_is_identity_and_q0_scales_precision(variant):
    """Fact 3: q = 0, γ = 1 leaves (Υ, W) unchanged; q = 0 scales the precision by 1/γ²."""
    P, L = 6, 2
    post, _ = _random_state(11, P, L, variant)
    ups, W = _np(post.ups), _np(post.W)
    _zero_info_step(post, 1.0, 0.0)
    np.testing.assert_array_equal(_np(post.ups), ups)
    _close(_np(post.W) @ _np(post.W).T, W @ W.T, rtol=1e-13, atol_rel=1e-15)
    pr = _dense_precision(post)
    _zero_info_step(post, 0.8, 0.0)
    _close(_dense_precision(post), pr / 0.64, rtol=1e-13, atol_rel=1e-15)


def test_steady_state_keeps_eta_and_ignores_q():
    """Fact 6 (F.2): q = (1 − γ²)/η₀ ⇒ η stays η₀; λ² → γ²λ²/(1 + qλ²) (eq. 112); the given q is unused."""
    P, L, gamma = 7, 3, 0.9
    a, _ = _random_state(12, P, L, "spherical", steady_state=True)
    b, _ = _random_state(12, P, L, "spherical", steady_state=True)
    eta0 = a.eta0
    assert _np(a.ups)[0] == pytest.approx(eta0, rel=1e-15)
    q_ss = (1 - gamma ** 2) / eta0
    for k in range(6):
        Sig = _dense_cov(a)
        lam2 = np.sort((_np(a.W) ** 2).sum(0))
        target = gamma ** 2 * Sig + q_ss * np.eye(P)
        _close(_np(a.predictive_cov(torch.eye(P, dtype=F64)[None], gamma, 0.3))[0], target, rtol=1e-10)
        if k % 2 == 0:
            _zero_info_step(a, gamma, 0.3)
            _zero_info_step(b, gamma, 0.0)
            _close(np.linalg.inv(_dense_precision(a)), target, rtol=1e-10)
            _close(np.sort((_np(a.W) ** 2).sum(0)), gamma ** 2 * lam2 / (1 + q_ss * lam2), rtol=1e-10)
        else:
            Hw, ew = _rows(200 + k, 2, P)
            _step(a, Hw, ew, gamma, 0.3)
            _step(b, Hw, ew, gamma, 0.0)
        _close(_np(a.ups), [eta0], rtol=1e-13)
        _close(_np(b.ups), [eta0], rtol=1e-13)
        _close(_np(a.mean), _np(b.mean), rtol=1e-13)
        _close(_dense_precision(a), _dense_precision(b), rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# update step (facts 7–11)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("gamma,q", [(1.0, 0.0), (0.9, 0.3)])
@pytest.mark.parametrize("L,m", [(2, 3), (3, 1), (1, 2)])
def test_update_step_equals_dense_truncated_update(variant, gamma, q, L, m):
    """Facts 7–11: exact mean (eq. 36), best rank-L W (eqs. 37–38), exact diag of the precision
    (eq. 39, diagonal only), orthogonal decreasing columns, Υ ≥ Υ⁻."""
    P = 9
    post, _ = _random_state(20 + L + m, P, L, variant)
    Hw, ew = _rows(30 + L, m, P)
    Hn, en = _np(Hw), _np(ew)
    mu, Sig, ups = _np(post.mean), _dense_cov(post), _ups_vec(post)
    Pr_pred = np.linalg.inv(gamma ** 2 * Sig + q * np.eye(P))
    if variant == "diagonal":
        ups_pred = 1.0 / (gamma ** 2 / ups + q)  # eq. 19
    else:
        ups_pred = np.full(P, ups[0] / (gamma ** 2 + q * ups[0]))  # eq. 108
    WtWt = Pr_pred - np.diag(ups_pred) + Hn.T @ Hn  # W̃ W̃ᵀ, dense
    Pr_star = Pr_pred + Hn.T @ Hn  # eq. 34: the exact one-step posterior precision
    mu_exact = gamma * mu + np.linalg.solve(Pr_star, Hn.T @ en)

    _step(post, Hw, ew, gamma, q)
    W = _np(post.W)
    _close(_np(post.mean), mu_exact, rtol=1e-10)  # fact 8
    _close(W @ W.T, _top_rank(WtWt, L), rtol=1e-9, atol_rel=1e-11)  # fact 10 (Eckart–Young)
    new_ups = _ups_vec(post)
    if variant == "diagonal":  # fact 7 / eq. 39
        _close(np.diag(_dense_precision(post)), np.diag(Pr_star), rtol=1e-12)
        _close(new_ups, ups_pred + np.diag(WtWt - _top_rank(WtWt, L)), rtol=1e-10)
    else:  # spherical: the dropped mass is discarded
        _close(new_ups, ups_pred, rtol=1e-13)
    assert (new_ups >= ups_pred * (1 - 1e-13)).all()  # fact 11
    G = W.T @ W  # fact 9: orthogonal columns, decreasing norms
    assert np.abs(G - np.diag(np.diag(G))).max() < 1e-10 * np.abs(G).max()
    assert (np.diff(np.diag(G)) <= 1e-12 * np.abs(G).max()).all()


# ---------------------------------------------------------------------------------------------
# incremental SVD by orthogonal projection (fact 25, Alg. 8)
# ---------------------------------------------------------------------------------------------
def _orth_oracle(W, G, order):
    """Alg. 8 in NumPy on W = U diag(λ): returns the new W (columns in place)."""
    lam = np.linalg.norm(W, axis=0)
    U = np.where(lam > 0, W / np.where(lam > 0, lam, 1.0), 0.0)
    for j in order:
        v = G[:, j] - U @ (U.T @ G[:, j])
        nv = np.linalg.norm(v)
        k = int(np.argmin(lam))
        if nv > lam[k]:
            U[:, k], lam[k] = v / nv, nv
    return U * lam


@pytest.mark.parametrize("gamma,q", [(1.0, 0.0), (0.9, 0.2)])
def test_svd_orth_keeps_orthonormal_basis_and_replaces_only_larger(gamma, q):
    P, L = 8, 3
    post = LowRankPrecision(_t(np.zeros(P)), 1.0, rank=L, variant="spherical", svd="orth", seed=3)
    n_replaced = n_kept = 0
    for k in range(14):
        scale = 2.0 if k < 4 else (0.05 if k % 2 else 3.0)  # small rows must not replace anything
        m = 1 if k % 3 else 2
        Hw, ew = _rows(300 + k, m, P, scale)
        Hn = _np(Hw)
        mu, Sig, eta = _np(post.mean), _dense_cov(post), _np(post.ups)[0]
        # the predicted W⁻ = U diag(λ⁻) (eq. 109; exact, see the predict test)
        W = _np(post.W)
        lam2 = (W * W).sum(0)
        d = gamma ** 2 + q * eta
        W_pred = W * np.sqrt(gamma ** 2 / (d * (d + q * lam2)))
        lam_before = np.sort(np.linalg.norm(W_pred, axis=0))
        candidates = [_orth_oracle(W_pred, Hn.T, order) for order in itertools.permutations(range(m))]
        Pr_star = np.linalg.inv(gamma ** 2 * Sig + q * np.eye(P)) + Hn.T @ Hn

        _step(post, Hw, ew, gamma, q)
        Wn = _np(post.W)
        # the mean uses the untruncated posterior (eq. 114)
        _close(_np(post.mean), gamma * mu + np.linalg.solve(Pr_star, Hn.T @ _np(ew)), rtol=1e-10)
        assert any(np.allclose(Wn @ Wn.T, c @ c.T, rtol=1e-10, atol=1e-12 * np.abs(c).max() ** 2)
                   for c in candidates)
        Gm = Wn.T @ Wn  # U orthonormal ⇔ WᵀW diagonal
        assert np.abs(Gm - np.diag(np.diag(Gm))).max() < 1e-10 * max(np.abs(Gm).max(), 1e-300)
        lam_after = np.sort(np.linalg.norm(Wn, axis=0))
        assert (lam_after >= lam_before * (1 - 1e-12)).all()  # sorted λ non-decreasing
        _close(_np(post.ups), [eta / d], rtol=1e-13)  # η unchanged by data
        if scale < 0.1 and k >= 4:
            # ‖v‖ ≤ ‖g‖ < min λ: nothing is replaced, W = W⁻
            assert np.linalg.norm(Hn, axis=1).max() < lam_before.min()
            _close(Wn @ Wn.T, W_pred @ W_pred.T, rtol=1e-12, atol_rel=1e-14)
            n_kept += 1
        elif not np.allclose(lam_after, lam_before):
            n_replaced += 1
    assert n_replaced >= 4 and n_kept >= 3


def test_svd_orth_is_reproducible_with_its_seed():
    P, L = 6, 2
    posts = [LowRankPrecision(_t(np.zeros(P)), 1.0, rank=L, variant="spherical", svd="orth", seed=7)
             for _ in range(2)]
    for k in range(6):
        Hw, ew = _rows(400 + k, 3, P)
        for p in posts:
            _step(p, Hw, ew)
    assert torch.equal(posts[0].W, posts[1].W) and torch.equal(posts[0].mean, posts[1].mean)


_ORTH_NOISE_BUG = (
    "LowRankPrecision._orth_update (skfilter/posteriors/lofi.py, `if bool(nv > lam[k])`): a residual "
    "v = (I − UUᵀ)g that is zero up to rounding (‖v‖ ~ 1e-16, whenever pseudo-observation columns are "
    "linearly dependent: always for the categorical likelihood, whose rows satisfy Σ_c √p_c Hw_c = 0, "
    "or for L > P) still beats a λ = 0 slot, so v/‖v‖ — rounding noise, not orthogonal to U — enters "
    "the basis; later projections against the non-orthonormal U break UᵀU = I and the spherical "
    "predict (eq. 109, which reads λ off the column norms) is no longer exact")


def test_svd_orth_stays_orthonormal_with_dependent_columns():
    """Fact 25 with a repeated pseudo-observation column (L < P)."""
    P, L = 4, 3
    post = LowRankPrecision(_t(np.zeros(P)), 1.0, rank=L, variant="spherical", svd="orth", seed=0)
    g = _t([[1.0, 2.0, 3.0, 4.0]])
    for Hw in (torch.cat([g, g]), _t([[1.0, -1.0, 0.5, 0.0]]), _t([[0.0, 1.0, -2.0, 1.0]])):
        _step(post, Hw, torch.zeros(Hw.shape[0], dtype=F64))
    W = _np(post.W)
    G = W.T @ W
    assert np.abs(G - np.diag(np.diag(G))).max() < 1e-10 * np.abs(G).max()
    # consequence: the spherical predict step is no longer the exact γ²Σ + qI
    Sig = _dense_cov(post)
    got = _np(post.predictive_cov(torch.eye(P, dtype=F64)[None], 0.9, 0.3))[0]
    _close(got, 0.81 * Sig + 0.3 * np.eye(P), rtol=1e-10)


def test_svd_orth_classifier_keeps_orthonormal_basis():
    """Fact 25 through the estimator: 3-class LoFiClassifier(variant='spherical', svd='orth')."""
    X, y = _blobs(3, seed=3)
    clf = LoFiClassifier(hidden_layer_sizes=(8,), rank=5, variant="spherical", svd="orth", random_state=0)
    for i in range(0, 20, 2):
        clf.partial_fit(X[i:i + 2], y[i:i + 2], classes=[0, 1, 2])
        W = _np(clf.posterior_.low_rank).T
        lam = np.linalg.norm(W, axis=0)
        U = W[:, lam > 0] / lam[lam > 0]
        assert np.abs(U.T @ U - np.eye(U.shape[1])).max() < 1e-8


def test_svd_orth_with_zero_rank_is_spherical_zero_rank():
    """Fact 18 for svd='orth': with L = 0 there is nothing to replace."""
    P = 4
    a = LowRankPrecision(_t(np.ones(P)), 0.5, rank=0, variant="spherical", svd="orth")
    b = LowRankPrecision(_t(np.ones(P)), 0.5, rank=0, variant="spherical")
    Hw, ew = _rows(900, 2, P)
    for p in (a, b):
        _step(p, Hw, ew, 0.9, 0.1)
    _close(_np(a.mean), _np(b.mean), rtol=1e-14)
    _close(_np(a.ups), _np(b.ups), rtol=1e-14)


# ---------------------------------------------------------------------------------------------
# inflation (facts 20–24)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("inflation", INFLATIONS)
def test_inflation_with_zero_factor_is_identity(variant, inflation):
    """Fact 20."""
    P, L = 6, 3
    a, _ = _random_state(40, P, L, variant, mean_shift=1.0, inflation=inflation, inflation_factor=0.0)
    b, _ = _random_state(40, P, L, variant, mean_shift=1.0)
    J = _t(np.random.default_rng(0).normal(size=(2, 2, P)))
    for k in range(5):
        _close(_np(a.predictive_cov(J, 0.9, 0.05)), _np(b.predictive_cov(J, 0.9, 0.05)), rtol=1e-14)
        Hw, ew = _rows(500 + k, 2, P)
        _step(a, Hw, ew, 0.9, 0.05)
        _step(b, Hw, ew, 0.9, 0.05)
        _close(_np(a.mean), _np(b.mean), rtol=1e-14)
        _close(_dense_precision(a), _dense_precision(b), rtol=1e-14)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("alpha", [0.3, 2.0])
def test_simple_inflation_multiplies_covariance(variant, alpha):
    """Fact 21 (eq. 83): Σ → (1+α)Σ, mean unchanged."""
    P, L = 7, 3
    post, _ = _random_state(41, P, L, variant, inflation="simple", inflation_factor=alpha)
    mu, Sig = _np(post.mean), _dense_cov(post)
    got = _np(post.predictive_cov(torch.eye(P, dtype=F64)[None]))[0]
    _close(got, (1 + alpha) * Sig, rtol=1e-10)
    # with dynamics: γ²(1+α)Σ + qI
    got = _np(post.predictive_cov(torch.eye(P, dtype=F64)[None], 0.9, 0.1))[0]
    _close(got, 0.81 * (1 + alpha) * Sig + 0.1 * np.eye(P), rtol=1e-10)
    _zero_info_step(post)
    _close(_dense_cov(post), (1 + alpha) * Sig, rtol=1e-10)
    _close(_np(post.mean), mu, rtol=1e-15)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("alpha", [0.3, 2.0])
def test_hybrid_inflation_keeps_mean_and_mixes_prior_precision(variant, alpha):
    """Facts 22/24 (eqs. 89–91; spherical 126–128): Pr → (Pr + αηI)/(1+α), mean unchanged."""
    P, L = 7, 3
    post, _ = _random_state(42, P, L, variant, mean_shift=1.0, inflation="hybrid", inflation_factor=alpha)
    mu, Pr, eta = _np(post.mean), _dense_precision(post), post.eta0
    expected = (Pr + alpha * eta * np.eye(P)) / (1 + alpha)
    _zero_info_step(post)
    _close(_np(post.mean), mu, rtol=1e-15)
    _close(_dense_precision(post), expected, rtol=1e-12)
    if variant == "spherical":  # ή = η (fact 24)
        _close(_np(post.ups), [eta], rtol=1e-14)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("alpha", [0.3, 2.0])
def test_bayesian_inflation_pulls_mean_toward_prior_predictive(variant, alpha):
    """Facts 22/23 (eqs. 79–81): same precision as hybrid; the mean is the mode of the tempered
    posterior times the tempered prior predictive, strictly closer to Γμ₀."""
    P, L = 7, 3
    post, mu0 = _random_state(43, P, L, variant, mean_shift=1.0, inflation="bayesian", inflation_factor=alpha)
    mu, Pr, eta = _np(post.mean), _dense_precision(post), post.eta0
    Pr_new = (Pr + alpha * eta * np.eye(P)) / (1 + alpha)
    mode = np.linalg.solve(Pr_new, (Pr @ mu + alpha * eta * mu0) / (1 + alpha))
    _zero_info_step(post)
    new = _np(post.mean)
    _close(new, mode, rtol=1e-11)
    _close(_dense_precision(post), Pr_new, rtol=1e-12)
    assert np.linalg.norm(new - mu0) < np.linalg.norm(mu - mu0)
    assert (new - mu) @ (mu0 - mu) > 0


@pytest.mark.parametrize("variant", VARIANTS)
def test_bayesian_inflation_leaves_prior_predictive_mean_unchanged(variant):
    """Fact 23: μ = Γμ₀ ⇒ unchanged. With γ < 1 and no data, μ_t = γᵗ μ₀ = Γ_t μ₀ at every step, so
    the tracked prior-predictive mean must follow Γ_t."""
    P, L, gamma = 6, 2, 0.8
    post, mu0 = _random_state(44, P, L, variant, mean_shift=0.0, inflation="bayesian", inflation_factor=1.5)
    for t in range(1, 5):
        _zero_info_step(post, gamma, 0.05)
        _close(_np(post.mean), gamma ** t * mu0, rtol=1e-12)


@pytest.mark.parametrize("variant", VARIANTS)
def test_bayesian_inflation_with_huge_factor_returns_prior_predictive(variant):
    """Fact 23: α → ∞ gives N(Γμ₀, η⁻¹ I)."""
    P, L = 6, 2
    post, mu0 = _random_state(45, P, L, variant, mean_shift=2.0, inflation="bayesian", inflation_factor=1e9)
    _zero_info_step(post)
    _close(_np(post.mean), mu0, rtol=1e-6, atol_rel=1e-7)
    _close(_dense_cov(post), np.eye(P) / post.eta0, rtol=1e-6, atol_rel=1e-7)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("inflation", INFLATIONS)
@pytest.mark.parametrize("gamma,q", [(1.0, 0.0), (0.9, 0.05)])
def test_inflated_full_rank_stream_equals_dense_inflated_filter(variant, inflation, gamma, q):
    """L = P: inflation + predict + update over a stream equals the dense filter with the inflation
    maps of App. E, tracking η_t (eq. 76) and Γ_t μ₀ (eq. 77)."""
    P, alpha, eta0 = 5, 0.4, 1.3
    mu0 = np.random.default_rng(46).normal(size=P)
    post = LowRankPrecision(_t(mu0), 1.0 / eta0, rank=P, variant=variant, inflation=inflation,
                            inflation_factor=alpha)
    mu, Pr, eta_pp, m0 = mu0.copy(), eta0 * np.eye(P), eta0, mu0.copy()
    for k in range(8):
        Hw, ew = _rows(600 + k, 2, P)
        _step(post, Hw, ew, gamma, q)
        mu, Pr = _dense_lofi_step(mu, Pr, _np(Hw), _np(ew), gamma, q, inflation, alpha, eta_pp, m0)
        eta_pp = 1.0 / (gamma ** 2 / eta_pp + q)
        m0 = gamma * m0
        _close(_np(post.mean), mu, rtol=1e-9, atol_rel=1e-11)
        _close(_dense_precision(post), Pr, rtol=1e-9, atol_rel=1e-11)


def test_bayesian_inflation_through_engine_linearises_at_predicted_mean():
    """On a linear-Gaussian model with L = P, the engine must equal the dense inflated Kalman filter."""
    D, T, s0, R, alpha, gamma, q = 3, 6, 0.7, 0.2, 0.5, 1.0, 0.0
    rng = np.random.default_rng(47)
    X = rng.normal(size=(T, D))
    y = X @ rng.normal(size=D) + 0.3 + 0.4 * rng.normal(size=T)
    ad = make_adapter(make_mlp(D, (), 1, "identity", seed=1), CPU, F64, D)
    mu0 = _np(ad.initial_theta())
    P = D + 1
    post = LowRankPrecision(ad.initial_theta(), s0, rank=P, inflation="bayesian", inflation_factor=alpha)
    f, _ = _run_recorded(_filter(ad, Gaussian(R), post, 1, gamma, q), _t(X), _t(y).reshape(-1, 1))
    Xa = np.hstack([X, np.ones((T, 1))])
    mu, Pr, eta_pp, m0 = mu0.copy(), np.eye(P) / s0, 1 / s0, mu0.copy()
    yhat = np.zeros(T)
    for t in range(T):
        # inflate, then predict: μ_{t|t−1}; the linear model's innovation is y − x·μ_{t|t−1}
        Pr_i = (Pr + alpha * eta_pp * np.eye(P)) / (1 + alpha)
        mu_i = np.linalg.solve(Pr_i, (Pr @ mu + alpha * eta_pp * m0) / (1 + alpha))
        yhat[t] = Xa[t] @ (gamma * mu_i)
        Hw = Xa[t:t + 1] / np.sqrt(R)
        mu, Pr = _dense_lofi_step(mu, Pr, Hw, (y[t:t + 1] - yhat[t]) / np.sqrt(R), gamma, q,
                                  "bayesian", alpha, eta_pp, m0)
        eta_pp, m0 = 1 / (gamma ** 2 / eta_pp + q), gamma * m0
    _close(f.numpy()[:, 0], yhat, rtol=1e-9)
    _close(_np(post.mean), mu, rtol=1e-9)


# ---------------------------------------------------------------------------------------------
# predictive, marginals and the sampler (facts 26, 28)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("L", [0, 3])
@pytest.mark.parametrize("gamma,q", [(1.0, 0.0), (0.9, 0.2)])
def test_predictive_cov_equals_dense_quadratic_form(variant, L, gamma, q):
    """Fact 26: J Σ⁻ Jᵀ by Woodbury equals the dense form; also the quad of propose(J=...)."""
    P = 8
    post, _ = _random_state(50 + L, P, L, variant)
    J = _t(np.random.default_rng(1).normal(size=(4, 3, P)))
    Sig_pred = gamma ** 2 * _dense_cov(post) + q * np.eye(P)
    expected = np.einsum("ncp,pq,ndq->ncd", _np(J), Sig_pred, _np(J))
    _close(_np(post.predictive_cov(J, gamma, q)), expected, rtol=1e-10)
    _close(_np(post.predictive_var(J, gamma, q)), np.einsum("ncc->nc", expected), rtol=1e-10)
    Hw, ew = _rows(51, 2, P)
    (_, quad) = post.propose(Hw, ew, gamma, q, J=J)
    _close(_np(quad), expected, rtol=1e-10)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("L", [0, 1, 4])
def test_marginal_variance_covariance_precision_match_dense(variant, L):
    P = 9
    post, _ = _random_state(60 + L, P, L, variant)
    Pr = _dense_precision(post)
    _close(_np(post.precision()), Pr, rtol=1e-15)
    _close(_np(post.covariance()), np.linalg.inv(Pr), rtol=1e-11, atol_rel=1e-13)
    _close(_np(post.marginal_variance()), np.diag(np.linalg.inv(Pr)), rtol=1e-11)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("L", [0, 2, 4])
def test_sampler_affine_map_is_an_exact_square_root(variant, L):
    """Fact 28, exactly: feeding basis vectors as the N(0, I) draws exposes the sampler's map M;
    MᵀM must be (Υ + WWᵀ)⁻¹ and the map must be the one of the docstring (L-RVGA Prop. 1)."""
    P = 6
    post, _ = _random_state(70 + L, P, L, variant)
    rows = _sampler_map(post)
    Sig = _dense_cov(post)
    _close(rows.T @ rows, Sig, rtol=1e-12, atol_rel=1e-13)
    # the docstring formula: θ = μ + x − Lm Wᵀ x + Lm ε, x = Υ^{-1/2} z, Lm = Υ⁻¹ W M⁻¹
    ui, W = 1.0 / _ups_vec(post), _np(post.W)
    M = np.eye(L) + W.T @ (ui[:, None] * W)
    Lm = np.linalg.solve(M, (ui[:, None] * W).T).T
    A = np.diag(np.sqrt(ui)) - Lm @ W.T @ np.diag(np.sqrt(ui))  # z ↦ θ − μ
    _close(rows[:P], A.T, rtol=1e-12, atol_rel=1e-13)
    _close(rows[P:], Lm.T, rtol=1e-12, atol_rel=1e-13)
    _close(A @ A.T + Lm @ Lm.T, Sig, rtol=1e-12, atol_rel=1e-13)


@pytest.mark.parametrize("variant", VARIANTS)
def test_sampler_moments_statistically(variant):
    """Fact 28, statistically: 200k draws on P = 6, L = 3 have mean μ and covariance (Υ + WWᵀ)⁻¹."""
    P, L, n = 6, 3, 200_000
    post, _ = _random_state(80, P, L, variant)
    draws = post.sample(n, torch.Generator().manual_seed(0))
    assert draws.shape == (n, P) and draws.dtype == F64
    d = _np(draws)
    Sig = _dense_cov(post)
    sd = np.sqrt(np.diag(Sig))
    assert (np.abs(d.mean(0) - _np(post.mean)) <= 5 * sd / np.sqrt(n)).all()
    emp = np.cov(d.T)
    se = np.sqrt((np.outer(np.diag(Sig), np.diag(Sig)) + Sig ** 2) / n)
    assert (np.abs(emp - Sig) <= 5 * se).all()
    # and not the prior's or the diagonal part's covariance (the check has power)
    assert np.abs(emp - np.diag(1 / _ups_vec(post))).max() > 20 * se.max()
    again = post.sample(n, torch.Generator().manual_seed(0))
    assert torch.equal(draws, again)


# ---------------------------------------------------------------------------------------------
# property test over random small streams
# ---------------------------------------------------------------------------------------------
@PROPERTY
@given(
    seed=st.integers(0, 2 ** 31 - 1),
    D=st.integers(1, 3),
    hidden=st.sampled_from([(), (3,), (2, 2)]),
    family=st.sampled_from(["gaussian", "categorical"]),
    rank=st.integers(0, 8),
    variant=st.sampled_from(["diagonal", "spherical", "spherical-orth"]),
    inflation=st.sampled_from([None, "simple", "hybrid", "bayesian"]),
    alpha=st.sampled_from([0.0, 0.1, 1.0]),
    gq=st.tuples(st.sampled_from([1.0, 0.95, 0.5]), st.sampled_from([0.0, 1e-3, 0.3])),
    steady=st.booleans(),
    s0=st.sampled_from([0.1, 1.0, 10.0]),
    batch_size=st.integers(1, 3),
    n=st.integers(1, 12),
)
def test_random_streams_keep_beliefs_valid(seed, D, hidden, family, rank, variant, inflation, alpha, gq,
                                            steady, s0, batch_size, n):
    gamma, q = gq
    orth = variant.endswith("orth")
    if orth:  # domain kept to independent columns and L ≥ 1 (dependent columns: dedicated tests above)
        family = "gaussian"
    C = 3 if family == "categorical" else 2
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    if family == "categorical":
        Y = np.eye(C)[rng.integers(0, C, size=n)]
        lik = Categorical()
    else:
        Y = rng.normal(size=(n, C))
        lik = Gaussian(np.array([0.5, 0.1]))
    ad = make_adapter(make_mlp(D, hidden, C, "tanh", seed=seed % 1000), CPU, F64, D)
    P = ad.n_params
    sph = variant.startswith("spherical")
    if orth:
        rank = min(max(rank, 1), P)
        batch_size = min(batch_size, max(1, P // C))
    post = LowRankPrecision(ad.initial_theta(), s0, rank=rank, variant="spherical" if sph else "diagonal",
                            inflation=inflation, inflation_factor=alpha,
                            svd="orth" if orth else "full", steady_state=bool(steady and sph),
                            seed=seed % 7)
    filt = _filter(ad, lik, post, C, gamma, q)
    f, var = _run_recorded(filt, _t(X), _t(Y), batch_size)
    assert torch.isfinite(f).all()
    assert (var > 0).all() and torch.isfinite(var).all()  # one-step-ahead predictive variances
    ups = _ups_vec(post)
    assert np.isfinite(ups).all() and (ups > 0).all()
    assert post.W.shape == (P, rank) and torch.isfinite(post.W).all()
    if sph and steady and (inflation != "simple" or alpha == 0.0):  # simple inflation moves η
        _close(_np(post.ups), [1 / s0], rtol=1e-12)
    Pr = _dense_precision(post)
    assert np.linalg.eigvalsh(Pr).min() >= ups.min() * (1 - 1e-10)
    cov = _np(post.covariance())
    _close(cov, cov.T, rtol=1e-8, atol_rel=1e-10)
    np.linalg.cholesky((cov + cov.T) / 2)  # PD
    _close(_np(post.marginal_variance()), np.diag(cov), rtol=1e-7, atol_rel=1e-10)
    assert (_np(post.marginal_variance()) > 0).all()
    if rank and rank != P:
        rows = _sampler_map(post)
        _close(rows.T @ rows, cov, rtol=1e-7, atol_rel=1e-9)
    if sph:  # the spherical structure needs orthogonal columns of W
        G = _np(post.W).T @ _np(post.W)
        assert np.abs(G - np.diag(np.diag(G))).max(initial=0.0) <= 1e-8 * np.abs(G).max(initial=1e-300)
    Jt = _t(rng.normal(size=(2, C, P)))
    pc = _np(post.predictive_cov(Jt, gamma, q))
    expected = np.einsum("ncp,pq,ndq->ncd", _np(Jt), _np(post.predictive_cov(
        torch.eye(P, dtype=F64)[None], gamma, q))[0], _np(Jt))
    _close(pc, expected, rtol=1e-7, atol_rel=1e-10)
    assert (np.einsum("ncc->nc", pc) > 0).all()


# ---------------------------------------------------------------------------------------------
# transactionality
# ---------------------------------------------------------------------------------------------
def _lofi_snapshot(post):
    return {k: (v.clone() if isinstance(v, torch.Tensor) else v)
            for k, v in vars(post).items() if k in ("mean", "ups", "W", "eta_pp", "prior_mean")}


def _assert_lofi_same(post, snap):
    for k, v in snap.items():
        now = getattr(post, k)
        if isinstance(v, torch.Tensor):
            assert torch.equal(now, v), k
        else:
            assert now == v, k


@pytest.mark.parametrize("cpu_backend", ["numpy", "torch"])
@pytest.mark.parametrize("variant", ["diagonal", "spherical", "spherical-orth"])
@pytest.mark.parametrize("bad", ["nan-ew", "inf-Hw", "nan-Hw"])
@pytest.mark.parametrize("m", [1, 2])
def test_failed_propose_raises_and_keeps_belief(variant, bad, m, cpu_backend):
    P, L = 5, 2
    post = LowRankPrecision(_t(np.random.default_rng(0).normal(size=P)), 0.5, rank=L,
                            variant="spherical" if variant.startswith("sph") else "diagonal",
                            svd="orth" if variant.endswith("orth") else "full",
                            inflation="bayesian", inflation_factor=0.2, cpu_backend=cpu_backend)
    for k in range(3):  # some good steps first
        _step(post, *_rows(700 + k, m, P), 0.9, 0.1)
    Hw, ew = _rows(710, m, P)
    if bad == "nan-ew":
        ew[m - 1] = float("nan")
    elif bad == "inf-Hw":
        Hw[0, 2] = float("inf")
    else:
        Hw[m - 1, 0] = float("nan")
    snap = _lofi_snapshot(post)
    J = torch.ones(2, 1, P, dtype=F64)
    with pytest.raises(FilterStepError):
        post.propose(Hw, ew, 1.0, 0.0)
    _assert_lofi_same(post, snap)
    with pytest.raises(FilterStepError):
        post.propose(Hw, ew, 0.9, 0.1, J=J)
    _assert_lofi_same(post, snap)
    # still usable
    _step(post, *_rows(720, m, P), 0.9, 0.1)
    assert torch.isfinite(post.mean).all() and torch.isfinite(post.W).all()
    assert np.isfinite(_dense_cov(post)).all()


def test_failed_orth_propose_does_not_change_later_steps():
    P, L, m = 6, 2, 3
    posts = [LowRankPrecision(_t(np.zeros(P)), 1.0, rank=L, variant="spherical", svd="orth", seed=1)
             for _ in range(2)]
    Hw, ew = _rows(800, m, P)
    ew[0] = float("nan")
    with pytest.raises(FilterStepError):
        posts[0].propose(Hw, ew)
    for k in range(8):
        Hw, ew = _rows(810 + k, m, P)
        for p in posts:
            _step(p, Hw, ew)
    _close(_np(posts[0].W) @ _np(posts[0].W).T, _np(posts[1].W) @ _np(posts[1].W).T, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# classification
# ---------------------------------------------------------------------------------------------
def _blobs(n_classes, seed, n=400):
    """Well-separated Gaussian blobs (centres on a circle of radius 3, unit spread), standardised."""
    rng = np.random.default_rng(seed)
    angles = 2 * np.pi * np.arange(n_classes) / n_classes
    centers = 3.0 * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    y = rng.integers(0, n_classes, size=n)
    X = centers[y] + rng.normal(size=(n, 2))
    return (X - X.mean(0)) / X.std(0), y


@pytest.mark.parametrize("n_classes", [2, 3])
def test_classifier_learns_blobs(n_classes):
    X, y = _blobs(n_classes, seed=n_classes)
    clf = LoFiClassifier(hidden_layer_sizes=(8,), rank=5, random_state=0)
    clf.fit(X[:300], y[:300])
    assert list(clf.classes_) == list(range(n_classes))
    proba = clf.predict_proba(X[300:])
    assert proba.shape == (100, n_classes)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-12)
    assert (proba >= 0).all() and (proba <= 1).all()
    acc = (clf.predict(X[300:]) == y[300:]).mean()
    assert acc >= 0.85, acc
    assert (proba.argmax(1) == clf.predict(X[300:])).all()
    # prequential (one-step-ahead) accuracy is also well above chance
    pre = prequential_predict(LoFiClassifier(hidden_layer_sizes=(8,), rank=5, random_state=0), X, y)
    assert (pre == y).mean() >= 1.0 / n_classes + 0.3


@pytest.mark.parametrize("variant,svd", [("diagonal", "full"), ("spherical", "full"), ("spherical", "orth")])
@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("dynamics", [(1.0, 0.0), (0.95, 0.01)])
def test_numpy_and_torch_cpu_backends_agree(variant, svd, m, dynamics):
    """The NumPy/LAPACK update used for CPU tensors and the torch update used on GPUs
    (:mod:`skfilter._array_ops`) compute the same belief step by step."""
    P, L = 40, 4
    gamma, q = dynamics
    mean = _t(np.random.default_rng(3).normal(size=P))
    posts = {be: LowRankPrecision(mean, 0.3, rank=L, variant=variant, svd=svd, inflation="hybrid",
                                  inflation_factor=0.05, cpu_backend=be) for be in ("numpy", "torch")}
    for k in range(25):
        Hw, ew = _rows(900 + k, m, P)
        for post in posts.values():
            _step(post, Hw, ew, gamma, q)
    a, b = posts["numpy"], posts["torch"]
    _close(_np(a.mean), _np(b.mean), rtol=1e-10)
    _close(_np(a.ups), _np(b.ups), rtol=1e-10)
    # W is defined up to the signs of its columns (eigenvectors): compare W Wᵀ
    _close(_np(a.W) @ _np(a.W).T, _np(b.W) @ _np(b.W).T, rtol=1e-9)
    # the predictive J Σ Jᵀ of both backends, against the dense covariance
    J = _t(np.random.default_rng(4).normal(size=(3, 2, P)))
    dense = np.einsum("ncp,pq,ndq->ncd", _np(J), _dense_cov(a), _np(J))
    for post in (a, b):
        quad = post._quad(J, post.ups, post.WT)  # of the current belief (predictive_cov would inflate)
        assert isinstance(quad, torch.Tensor) and quad.shape == (3, 2, 2)
        _close(_np(quad), dense, rtol=1e-8)
    _close(_np(a.predictive_cov(J, gamma, q)), _np(b.predictive_cov(J, gamma, q)), rtol=1e-9)
    assert a.WT.dtype == b.WT.dtype == torch.float64 and a.WT.is_contiguous()


def test_cpu_backend_is_validated():
    with pytest.raises(ValueError, match="cpu_backend"):
        LowRankPrecision(torch.zeros(3, dtype=F64), 1.0, rank=1, cpu_backend="jax")


def test_numpy_backend_keeps_float32():
    post = LowRankPrecision(torch.zeros(6, dtype=torch.float32), 1.0, rank=2)
    Hw, ew = _rows(5, 1, 6)
    post.commit(post.propose(Hw.float(), ew.float())[0])
    assert post.mean.dtype == post.ups.dtype == post.WT.dtype == torch.float32
