"""The subspace EKF and PULSE (thesis §5.1–§5.2, Alg. 12 and 14 corrected) against closed forms:

* the subspace model's Jacobian is ``H A`` and with ``A = I``, ``θ* = 0`` it is the base model;
* the subspace EKF with ``d = D``, ``A = I``, ``θ* = 0`` (and with any rotation ``A``) is the full EKF;
* with a linear model it is the Kalman filter on ``z`` with observation matrix ``H A`` and
  observation ``y − H θ*`` (a dense NumPy filter in the test);
* PULSE's block update against Theorem 5.3's closed form ``K̂_z``, ``K̂_w`` in NumPy (means) and the
  precision blocks; the fixed-point sweeps reach it; the decoupled original differs;
* PULSE with a zero hidden subspace is Bayesian linear regression on the last layer;
* the warm-up options (fraction, count, separate data, a fitted warm-up reused for smaller ``d``)
  and the errors they raise, leaving the estimator unfitted.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from sklearn.base import clone

from skfilter import (EKFClassifier, EKFRegressor, PULSEClassifier, PULSERegressor, SubspaceClassifier,
                      SubspaceRegressor)
from skfilter.models import SubspaceAdapter, make_adapter, make_mlp
from skfilter.posteriors import BlockDiagonal, FullCovariance
from skfilter.posteriors.blocks import BlockBelief
from skfilter.warmup import SubspaceWarmup

CPU, F64 = torch.device("cpu"), torch.float64


def _stream(n=50, seed=0, classes=None, d_in=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d_in))
    score = np.sin(X[:, 0]) + 0.5 * X[:, 1]
    if classes:
        return X, np.digitize(score, np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]))
    return X, score + 0.1 * rng.normal(size=n)


def _warmup_at(module, X, y, components, offset, loss="mse", parameters=None):
    """A fitted warm-up with a chosen ``A`` and ``θ*`` (its module carries ``θ*``)."""
    warm = SubspaceWarmup(n_components=1, method="random", n_epochs=0, random_state=0)
    warm.fit(X, y, module=module, loss=loss, parameters=parameters)
    warm.components_ = torch.as_tensor(components, dtype=F64)
    warm.offset_ = torch.as_tensor(offset, dtype=F64)
    make_adapter(warm.module_, CPU, F64, X.shape[1]).write_to_module(warm.offset_)
    return warm


# -- the subspace model ------------------------------------------------------------------------------

def test_subspace_adapter_jacobian_is_the_base_jacobian_times_a():
    base = make_adapter(make_mlp(3, (5,), 2, "tanh", seed=0), CPU, F64, 3)
    gen = torch.Generator().manual_seed(0)
    A = torch.linalg.qr(torch.randn(base.n_params, 4, generator=gen, dtype=F64)).Q
    offset = base.initial_theta()
    model = SubspaceAdapter(base, A, offset)
    X = torch.randn(6, 3, generator=gen, dtype=F64)
    z = torch.randn(4, generator=gen, dtype=F64)
    f, J = model.forward_jacobian(z, X)
    fb, Jb = base.forward_jacobian(offset + A @ z, X)
    torch.testing.assert_close(f, fb)
    torch.testing.assert_close(J, Jb @ A)
    # against autograd through θ(z) = A z + θ*
    Jz = torch.func.jacrev(lambda zz: base.forward(offset + A @ zz, X))(z)
    torch.testing.assert_close(J, Jz)
    # batched hypotheses
    zs = torch.randn(3, 4, generator=gen, dtype=F64)
    fs, Js = model.forward_jacobian(zs, X)
    torch.testing.assert_close(Js[1], model.forward_jacobian(zs[1], X)[1])
    torch.testing.assert_close(model.forward_batch(zs, X)[2], model.forward(zs[2], X))


def test_subspace_adapter_with_identity_and_zero_offset_is_the_base_model():
    base = make_adapter(make_mlp(2, (3,), 1, seed=1), CPU, F64, 2)
    D = base.n_params
    model = SubspaceAdapter(base, torch.eye(D, dtype=F64), torch.zeros(D, dtype=F64))
    theta = torch.randn(D, dtype=F64)
    X = torch.randn(5, 2, dtype=F64)
    for a, b in zip(model.forward_jacobian(theta, X), base.forward_jacobian(theta, X)):
        torch.testing.assert_close(a, b)


def test_subspace_adapter_keeps_the_last_layer_coordinates():
    base = make_adapter(make_mlp(2, (3,), 2, seed=2), CPU, F64, 2)
    last = base.positions_of(["2.weight", "2.bias"])
    hidden = base.positions_of(["0.weight", "0.bias"])
    A = torch.linalg.qr(torch.randn(len(hidden), 2, dtype=F64)).Q
    offset = base.initial_theta()
    model = SubspaceAdapter(base, A, offset, projected=hidden, kept=last)
    assert model.n_params == 2 + len(last) and list(model.blocks) == ["hidden", "last"]
    phi = torch.randn(model.n_params, dtype=F64)
    theta = offset.clone()
    theta[hidden] += A @ phi[:2]
    theta[last] = phi[2:]
    torch.testing.assert_close(model.full_theta(phi), theta)
    X = torch.randn(4, 2, dtype=F64)
    f, J = model.forward_jacobian(phi, X)
    Jb = base.forward_jacobian(theta, X)[1]
    torch.testing.assert_close(J, torch.cat([Jb[..., hidden] @ A, Jb[..., last]], dim=-1))
    with pytest.raises(ValueError, match="partition"):
        SubspaceAdapter(base, A, offset, projected=hidden, kept=last[:-1])


# -- the subspace EKF --------------------------------------------------------------------------------

@pytest.mark.parametrize("obs_variance", [0.05, "auto"])
def test_subspace_ekf_with_identity_and_zero_offset_is_the_full_ekf(obs_variance):
    """d = D, A = I, θ* = 0 (a linear model, so that θ = 0 is not a degenerate point)."""
    X, y = _stream()
    net = make_mlp(3, (), 1, seed=0)
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
    common = dict(prior_variance=0.3, obs_variance=obs_variance, random_state=0)
    ekf = EKFRegressor(module=net, **common).fit(X, y)
    D = ekf.n_params_
    warm = _warmup_at(net, X, y, np.eye(D), np.zeros(D))
    sub = SubspaceRegressor(warmup=warm, n_components=D, **common).fit(X, y)
    for a, b in zip(ekf.predict(X, return_std=True), sub.predict(X, return_std=True)):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sub.posterior_.covariance(), ekf.posterior_.covariance(), rtol=1e-9, atol=1e-12)


def test_subspace_ekf_in_a_rotated_full_subspace_is_the_full_ekf():
    """Any orthonormal ``A`` with ``d = D`` and ``θ*`` the initial weights: the EKF in rotated
    coordinates under an isotropic prior (a non-linear MLP, a classifier too)."""
    X, y = _stream()
    net = make_mlp(3, (4,), 1, "tanh", seed=0)
    common = dict(prior_variance=0.3, obs_variance=0.05, random_state=0)
    ekf = EKFRegressor(module=net, **common).fit(X, y)
    D = ekf.n_params_
    warm = SubspaceWarmup(n_components=D, method="random", n_epochs=0, random_state=1).fit(X, y, module=net)
    sub = SubspaceRegressor(warmup=warm, n_components=D, **common).fit(X, y)
    for a, b in zip(ekf.predict(X, return_std=True), sub.predict(X, return_std=True)):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-11)
    A = warm.components_.numpy()
    np.testing.assert_allclose(A @ np.asarray(sub.posterior_.covariance()) @ A.T, np.asarray(ekf.posterior_.covariance()), atol=1e-10)
    # a smaller subspace is not the EKF (the test can fail)
    small = SubspaceRegressor(warmup=warm, n_components=5, **common).fit(X, y)
    assert not np.allclose(small.predict(X), ekf.predict(X), atol=1e-3)

    Xc, yc = _stream(classes=3)
    netc = make_mlp(3, (4,), 3, "tanh", seed=0)
    ekfc = EKFClassifier(module=netc, prior_variance=0.3, random_state=0).fit(Xc, yc)
    warmc = SubspaceWarmup(n_components=ekfc.n_params_, method="random", n_epochs=0, random_state=1)
    warmc.fit(Xc, yc, module=netc, loss="cross-entropy")
    subc = SubspaceClassifier(warmup=warmc, n_components=ekfc.n_params_, prior_variance=0.3, random_state=0)
    np.testing.assert_allclose(subc.fit(Xc, yc).predict_proba(Xc), ekfc.predict_proba(Xc), rtol=1e-8, atol=1e-10)


def test_subspace_ekf_of_a_linear_model_is_the_kalman_filter_on_z():
    """Fact 23: ``h(θ, x) = xᵀw + b`` gives the KF on ``z`` with rows ``H A`` and targets ``y − H θ*``."""
    X, y = _stream(n=30)
    net = make_mlp(3, (), 1, seed=0)
    D, d, v, r = 4, 2, 0.5, 0.1
    rng = np.random.default_rng(3)
    A = np.linalg.qr(rng.normal(size=(D, d)))[0]
    offset = rng.normal(size=D)
    warm = _warmup_at(net, X, y, A, offset)
    sub = SubspaceRegressor(warmup=warm, n_components=d, prior_variance=v, obs_variance=r).fit(X, y)
    H = np.hstack([X, np.ones((len(X), 1))])  # flat order: weight (1 × 3), bias
    m, P = np.zeros(d), v * np.eye(d)
    for h, target in zip(H, y):
        j = h @ A
        s = j @ P @ j + r
        k = P @ j / s
        m = m + k * (target - h @ (A @ m + offset))
        P = P - np.outer(k, j @ P)
    np.testing.assert_allclose(np.asarray(sub.posterior_.mean), m, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sub.posterior_.covariance(), P, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(sub.module_[0].weight.detach().numpy().ravel(), (A @ m + offset)[:3], atol=1e-12)


def test_subspace_lofi_at_full_rank_is_the_full_subspace_ekf():
    X, y = _stream()
    common = dict(n_components=6, prior_variance=0.2, obs_variance=0.05, random_state=0, hidden_layer_sizes=(5,))
    full = SubspaceRegressor(**common).fit(X, y)
    lofi = SubspaceRegressor(covariance="lofi", rank=6, **common).fit(X, y)
    np.testing.assert_allclose(lofi.predict(X, return_std=True), full.predict(X, return_std=True), rtol=1e-7)
    vd = SubspaceRegressor(covariance="vd", **common).fit(X, y)
    assert not np.allclose(vd.predict(X, return_std=True)[1], full.predict(X, return_std=True)[1], rtol=1e-3)


# -- PULSE: the block mean-field update ---------------------------------------------------------------

def _theorem_5_3(Pz, Pw, Z, W, R, e):
    """Theorem 5.3 as printed (with (5.39) corrected): the posterior precisions and ``K̂`` gains."""
    Ri = np.linalg.inv(R)
    Pz1 = np.linalg.inv(np.linalg.inv(Pz) + Z.T @ Ri @ Z)
    Pw1 = np.linalg.inv(np.linalg.inv(Pw) + W.T @ Ri @ W)
    Kz, Kw = Pz1 @ Z.T @ Ri, Pw1 @ W.T @ Ri
    o = len(e)
    Kz_hat = np.linalg.solve(np.eye(len(Pz)) - Kz @ W @ Kw @ Z, Kz @ (np.eye(o) - W @ Kw))
    Kw_hat = np.linalg.solve(np.eye(len(Pw)) - Kw @ Z @ Kz @ W, Kw @ (np.eye(o) - Z @ Kz))
    return Pz1, Pw1, Kz_hat @ e, Kw_hat @ e, Kz @ e, Kw @ e


@pytest.mark.parametrize("n_obs", [1, 3])
def test_pulse_block_update_is_theorem_5_3(n_obs):
    rng = np.random.default_rng(n_obs)
    dz, dw = 4, 3

    def spd(n):
        a = rng.normal(size=(n, n))
        return a @ a.T + 0.5 * np.eye(n)

    Pz, Pw = spd(dz), spd(dw)
    Z, W = rng.normal(size=(n_obs, dz)), rng.normal(size=(n_obs, dw))
    R = spd(n_obs)
    e = rng.normal(size=n_obs)
    mean = rng.normal(size=dz + dw)
    Pz1, Pw1, dz_hat, dw_hat, dz_dec, dw_dec = _theorem_5_3(Pz, Pw, Z, W, R, e)
    # whitened rows and residual, as the engine passes them (R = L Lᵀ)
    L = np.linalg.cholesky(R)
    Hw = np.linalg.solve(L, np.hstack([Z, W]))
    ew = np.linalg.solve(L, e)
    t = lambda a: torch.as_tensor(a, dtype=F64)  # noqa: E731
    results = {}
    for coupling in ("mean-field", "fixed-point", "decoupled", "marginal"):
        st = BlockDiagonal({"hidden": (slice(0, dz), FullCovariance()), "last": (slice(dz, dz + dw), FullCovariance())},
                           coupling=coupling, tol=1e-13, max_iter=1000)
        prior = st.prior(t(mean), 1.0)
        prior = BlockBelief(t(mean), (prior.blocks[0]._replace(cov=t(Pz)), prior.blocks[1]._replace(cov=t(Pw))))
        post, _ = st.update(prior, t(Hw), t(ew))
        results[coupling] = post
    for coupling in ("mean-field", "fixed-point"):
        post = results[coupling]
        np.testing.assert_allclose(post.mean.numpy(), mean + np.concatenate([dz_hat, dw_hat]), rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(post.blocks[0].cov.numpy(), Pz1, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(post.blocks[1].cov.numpy(), Pw1, rtol=1e-8, atol=1e-10)
    # the means are the joint EKF mean under blockdiag(P_z, P_w) (fact 25)
    Sigma = np.block([[Pz, np.zeros((dz, dw))], [np.zeros((dw, dz)), Pw]])
    H = np.hstack([Z, W])
    joint = Sigma @ H.T @ np.linalg.solve(H @ Sigma @ H.T + R, e)
    np.testing.assert_allclose(results["mean-field"].mean.numpy() - mean, joint, rtol=1e-8, atol=1e-10)
    # the original decoupled PULSE: K_z e and K_w e, other means
    dec = results["decoupled"]
    np.testing.assert_allclose(dec.mean.numpy(), mean + np.concatenate([dz_dec, dw_dec]), rtol=1e-8, atol=1e-10)
    assert not np.allclose(dec.mean.numpy(), results["mean-field"].mean.numpy(), atol=1e-4)
    # the decoupled EKF keeps the marginal blocks instead (not the precision blocks)
    assert not np.allclose(results["marginal"].blocks[1].cov.numpy(), Pw1, atol=1e-4)


def test_pulse_block_update_with_no_hidden_effect_is_the_last_layer_update():
    """Fact 26: ``Z̄ = 0`` gives ``K̂_w = K_w`` and leaves ``z`` as it was."""
    rng = np.random.default_rng(0)
    Pz, Pw = np.eye(2), np.diag([1.0, 2.0, 0.5])
    Z, W, R, e = np.zeros((1, 2)), rng.normal(size=(1, 3)), np.eye(1), rng.normal(size=1)
    _, Pw1, dz_hat, dw_hat, _, dw_dec = _theorem_5_3(Pz, Pw, Z, W, R, e)
    np.testing.assert_allclose(dz_hat, 0.0)
    np.testing.assert_allclose(dw_hat, dw_dec)


# -- PULSE through the estimators ---------------------------------------------------------------------

def test_pulse_with_a_zero_hidden_subspace_is_bayesian_linear_regression_on_the_last_layer():
    X, y = _stream(n=40)
    v, r, width = 0.7, 0.05, 6
    net = make_mlp(3, (width,), 1, "tanh", seed=0)
    hidden = ["0.weight", "0.bias"]
    base = make_adapter(copy.deepcopy(net), CPU, F64, 3)
    n_hidden = len(base.positions_of(hidden))
    warm = _warmup_at(net, X, y, np.zeros((n_hidden, 2)), base.initial_theta().numpy(), parameters=hidden)
    pulse = PULSERegressor(warmup=warm, n_components=2, prior_variance=v, obs_variance=r).fit(X, y)
    # BLR on the features of the fixed hidden layer (weights at θ*)
    with torch.no_grad():
        F = torch.tanh(torch.as_tensor(X) @ net[0].weight.T + net[0].bias).numpy()
    Phi = np.hstack([F, np.ones((len(X), 1))])
    w0 = np.concatenate([net[2].weight.detach().numpy().ravel(), net[2].bias.detach().numpy()])
    prec = np.eye(width + 1) / v + Phi.T @ Phi / r
    cov = np.linalg.inv(prec)
    mean = cov @ (w0 / v + Phi.T @ y / r)
    np.testing.assert_allclose(pulse.posterior_.mean[2:], mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(pulse.posterior_.covariance()[2:, 2:], cov, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(pulse.posterior_.mean[:2], 0.0, atol=1e-12)
    m, s = pulse.predict(X[:5], return_std=True)
    np.testing.assert_allclose(m, Phi[:5] @ mean, rtol=1e-8)
    np.testing.assert_allclose(s ** 2, np.einsum("ij,jk,ik->i", Phi[:5], cov, Phi[:5]) + r, rtol=1e-8)


def test_pulse_mean_updates_agree_and_the_original_differs():
    X, y = _stream()
    common = dict(n_components=4, hidden_layer_sizes=(6,), random_state=0, prior_variance=0.3, obs_variance=0.05)
    coupled = PULSERegressor(**common).fit(X, y)
    fixed = PULSERegressor(mean_update="fixed-point", tol=1e-13, max_iter=500, **common).fit(X, y)
    decoupled = PULSERegressor(mean_update="decoupled", **common).fit(X, y)
    np.testing.assert_allclose(fixed.predict(X), coupled.predict(X), rtol=1e-7, atol=1e-9)
    assert not np.allclose(decoupled.predict(X), coupled.predict(X), atol=1e-4)
    # a PULSE filter learns: better than the warm-up's network alone on a longer stream
    assert np.mean((coupled.predict(X) - y) ** 2) < np.var(y)


def test_pulse_per_block_process_noise():
    X, y = _stream()
    common = dict(n_components=3, hidden_layer_sizes=(5,), random_state=0, prior_variance=0.3, obs_variance=0.05)
    same = PULSERegressor(process_noise=1e-3, **common).fit(X, y)
    other = PULSERegressor(process_noise=1e-3, last_process_noise=1e-1, **common).fit(X, y)
    explicit = PULSERegressor(process_noise=1e-3, last_process_noise=1e-3, **common).fit(X, y)
    np.testing.assert_allclose(explicit.predict(X), same.predict(X))
    assert not np.allclose(other.predict(X, return_std=True)[1], same.predict(X, return_std=True)[1], rtol=1e-3)


def test_pulse_needs_a_last_layer_and_hidden_layers():
    X, y = _stream()
    with pytest.raises(ValueError, match="hidden parameters to project"):
        PULSERegressor(hidden_layer_sizes=(), n_components=1).fit(X, y)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Linear(3, 4)
            self.head = torch.nn.Linear(4, 1)

        def forward(self, x):
            return self.head(torch.tanh(self.body(x)))

    with pytest.raises(ValueError, match="last_layer"):
        PULSERegressor(module=Net(), n_components=2, prior_variance=0.1).fit(X, y)
    pulse = PULSERegressor(module=Net(), n_components=2, prior_variance=0.1, last_layer=["head.weight", "head.bias"],
                           random_state=0).fit(X, y)
    assert pulse.n_params_ == 2 + 5


# -- the warm-up through the estimators ---------------------------------------------------------------

def test_warmup_options():
    X, y = _stream(n=80)
    count = SubspaceRegressor(n_components=3, warmup=20, random_state=0).fit(X, y)
    assert count.warmup_.n_features_in_ == 3 and count.n_samples_seen_ == 80
    separate = SubspaceRegressor(n_components=3, warmup=(X[:30], y[:30]), random_state=0).fit(X[30:], y[30:])
    assert separate.n_samples_seen_ == 50
    # a fitted warm-up with d components serves any n_components ≤ d: the leading columns
    reused = SubspaceRegressor(n_components=2, warmup=count.warmup_, random_state=0).fit(X, y)
    np.testing.assert_allclose(reused.warmup_.components_[:, :2], count.warmup_.components_[:, :2])
    assert reused.n_params_ == 2
    # classification: the warm-up minimises the cross-entropy of the same labels
    Xc, yc = _stream(n=80, classes=3)
    clf = SubspaceClassifier(n_components=3, warmup=(Xc[:20], np.array(["a", "b", "c"])[yc[:20]]), random_state=0)
    clf.fit(Xc, np.array(["a", "b", "c"])[yc])
    assert clf.score(Xc, np.array(["a", "b", "c"])[yc]) > 0.5


def test_warmup_parameters_are_estimator_parameters():
    est = SubspaceRegressor(n_components=3, warmup__n_epochs=7, warmup__learning_rate=0.05)
    params = est.get_params()
    assert params["warmup__n_epochs"] == 7 and params["warmup__learning_rate"] == 0.05
    X, y = _stream()
    twin = clone(est).fit(X, y)
    assert twin.warmup_.n_epochs == 7 and twin.warmup_.learning_rate == 0.05
    assert len(twin.warmup_.loss_curve_) == 7


@pytest.mark.parametrize("make, match", [
    (lambda: SubspaceRegressor(n_components=30, warmup__n_epochs=5), "n_components=30"),
    (lambda: SubspaceRegressor(n_components=3, warmup=(np.zeros((4, 2)), np.zeros(4))), "features"),
    (lambda: SubspaceRegressor(n_components=3, warmup=(np.zeros((4, 3)), np.zeros(5))), "X_warmup"),
    (lambda: SubspaceRegressor(n_components=3, warmup=SubspaceWarmup()), "not fitted"),
    (lambda: SubspaceRegressor(n_components=3, warmup__learning_rate=-1.0), "learning_rate"),
    (lambda: SubspaceRegressor(n_components=3, warmup__colour=1), "colour"),
])
def test_bad_warmups_raise_before_anything_is_learned(make, match):
    X, y = _stream()
    est = make()
    with pytest.raises((ValueError, TypeError), match=match):
        est.fit(X, y)
    assert not hasattr(est, "filter_state_") and not hasattr(est, "warmup_")


def test_a_warmup_longer_than_the_first_call_waits_for_its_rows():
    # warmup=500 on a 50-row stream no longer raises (issue 29): the warm-up rows are the stream's
    # first 500 however they arrive; until then each call warms up again on all rows so far
    X, y = _stream(n=50)
    X2, y2 = _stream(n=50, seed=1)
    est = SubspaceRegressor(n_components=3, warmup=500, random_state=0).fit(X, y)
    assert est._prior_pending and est.n_samples_seen_ == 50 and np.all(np.isfinite(est.predict(X)))
    first = est.warmup_
    est.partial_fit(X2, y2)  # warms up again, on the 100 rows so far, and learns them again
    assert est._prior_pending and est.n_samples_seen_ == 100 and est.warmup_ is not first
    Xa, ya = np.vstack([X, X2]), np.concatenate([y, y2])
    twin = SubspaceRegressor(n_components=3, warmup=500, random_state=0).fit(Xa, ya)
    np.testing.assert_allclose(est.predict(Xa), twin.predict(Xa), rtol=1e-5, atol=1e-6)


def test_a_fitted_warmup_must_match_the_estimator():
    X, y = _stream(n=60)
    small = SubspaceRegressor(n_components=3, random_state=0).fit(X, y).warmup_
    with pytest.raises(ValueError, match="n_components=5"):
        SubspaceRegressor(n_components=5, warmup=small).fit(X, y)
    # PULSE projects the hidden layers only: a warm-up over every weight does not fit it
    with pytest.raises(ValueError, match="spans the parameters"):
        PULSERegressor(n_components=2, warmup=small).fit(X, y)
    with pytest.raises(ValueError, match="warmup__"):
        SubspaceRegressor(n_components=2, warmup=small, warmup__n_epochs=3).fit(X, y)
    pulse_warm = PULSERegressor(n_components=3, random_state=0).fit(X, y).warmup_
    assert PULSERegressor(n_components=2, warmup=pulse_warm).fit(X, y).n_params_ == 2 + 51


def test_bad_row_after_fitting_keeps_the_estimator_learning():
    X, y = _stream()
    for est in (SubspaceRegressor(n_components=3, random_state=0), PULSERegressor(n_components=3, random_state=0)):
        est.fit(X, y)
        before = est.predict(X[:3])
        with pytest.raises(ValueError):
            est.partial_fit(np.array([[np.nan, 0.0, 0.0]]), [0.0])
        np.testing.assert_array_equal(est.predict(X[:3]), before)
        est.partial_fit(X[:2], y[:2])
        assert est.n_samples_seen_ == len(X) + 2


def test_streaming_one_row_at_a_time_after_a_first_chunk():
    X, y = _stream(n=60)
    whole = PULSEClassifier(n_components=3, random_state=0, hidden_layer_sizes=(6,))
    Xc, yc = _stream(n=60, classes=2)
    whole.fit(Xc, yc)
    streamed = PULSEClassifier(n_components=3, random_state=0, hidden_layer_sizes=(6,))
    streamed.partial_fit(Xc[:40], yc[:40], classes=[0, 1])
    for i in range(40, 60):
        streamed.partial_fit(Xc[i:i + 1], yc[i:i + 1])
    assert streamed.n_samples_seen_ == 60
    # the warm-up saw the first call's rows in both cases, but a different number of them
    assert streamed.warmup_.n_iterates_ == whole.warmup_.n_iterates_


@pytest.mark.parametrize("make", [lambda: SubspaceRegressor(n_components=4, random_state=0),
                                  lambda: PULSERegressor(n_components=3, random_state=0)])
def test_a_fitted_subspace_filter_moves_to_another_dtype(make):
    X, y = _stream()
    est = make().fit(X, y)
    est.set_params(dtype="float32").partial_fit(X[:5], y[:5])
    assert est.predict(X[:2]).dtype == np.float32
    assert est._adapter.components.dtype == torch.float32 and est._adapter.offset.dtype == torch.float32
    assert est.n_samples_seen_ == len(X) + 5


def test_a_fitted_warmup_survives_clone_and_grid_search():
    """``clone`` (GridSearchCV, cross-validation) hands the filters the same fitted subspace."""
    from sklearn.model_selection import GridSearchCV

    X, y = _stream(n=80)
    warm = SubspaceRegressor(n_components=4, random_state=0).fit(X, y).warmup_
    twin = clone(SubspaceRegressor(n_components=2, warmup=warm))
    torch.testing.assert_close(twin.warmup.components_, warm.components_)
    assert twin.warmup is not warm  # a copy
    search = GridSearchCV(SubspaceRegressor(warmup=warm, random_state=0), {"n_components": [2, 4]}, cv=2).fit(X, y)
    assert search.best_estimator_.warmup_.components_.shape == warm.components_.shape
    assert not hasattr(clone(SubspaceWarmup()), "components_")


def test_a_tiny_warmup_warns_and_still_learns():
    X, y = _stream(n=60)
    # (the default is now warmup=200 rows of the stream: the fraction is asked for explicitly)
    est = SubspaceRegressor(n_components=3, warmup=0.5, random_state=0)
    with pytest.warns(UserWarning, match="only 2 row"):
        est.partial_fit(X[:4], y[:4])  # warmup=0.5 of a 4-row first call
    import warnings as w

    with w.catch_warnings():
        w.simplefilter("error")  # once per stream: not again as the prior's rows arrive
        for i in range(4, 60):
            est.partial_fit(X[i:i + 1], y[i:i + 1])
    assert est.n_samples_seen_ == 60 and np.all(np.isfinite(est.predict(X)))

    with w.catch_warnings():
        w.simplefilter("error")
        SubspaceRegressor(n_components=3, warmup=0.5, random_state=0).fit(X[:20], y[:20])  # 10 warm-up rows: no warning
        # a count of rows: the requested count decides, not the rows of the first call (issue 29)
        SubspaceRegressor(n_components=3, random_state=0).partial_fit(X[:4], y[:4])  # warmup=200
    with pytest.warns(UserWarning, match="only 5 row"):
        SubspaceRegressor(n_components=3, warmup=5, random_state=0).fit(X, y)
