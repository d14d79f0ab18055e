"""Posterior-predictive sampling: ``sample_y(method='thompson'|'predictive')`` and ``sample_proba``.

Closed forms: for a linear-Gaussian model ``h(θ, x) = J(x) θ`` the Thompson draws of the rows of
``X`` are jointly ``N(J μ, J Σ Jᵀ + r I)`` (correlated across rows: a function draw), the
predictive draws (Duran-Martin et al. 2025, Alg. 1) are independent across rows with the same
marginals; for a network, the predictive draws of one row have the linearised moments
``N(h(μ, x), J Σ Jᵀ + R)`` jointly over the outputs.
"""

import pickle

import numpy as np
import pytest
import torch
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import InvalidParameterError

from skfilter import (BOCDClassifier, BOCDRegressor, EKFClassifier, EKFRegressor, LoFiClassifier, LoFiRegressor,
                      WoLFClassifier, WoLFRegressor, make_partial_pipeline)

N_DRAWS = 40_000


def _linear_data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = X @ [1.0, -2.0] + 0.5 + 0.3 * rng.normal(size=n)
    return X, y


def _jacobian_and_cov(est, X):
    """``f (n, C)``, ``J (n, C, P)`` at the posterior mean and the dense ``Σ`` of a fitted filter."""
    mean = est.filter_state_.belief.mean
    f, J = est._adapter.forward_jacobian(mean, est._tensor(X))
    return f.numpy(), J.numpy(), est.posterior_.covariance().numpy()


def _regressors():
    small = dict(hidden_layer_sizes=(), random_state=0)
    return [EKFRegressor(**small), EKFRegressor(covariance="vd", **small), EKFRegressor(covariance="fd", **small),
            LoFiRegressor(rank=2, **small)]


@pytest.mark.parametrize("est", _regressors(), ids=["full", "vd", "fd", "lofi"])
def test_linear_model_draws_match_closed_form(est):
    """Thompson: rows jointly N(Jμ, JΣJᵀ + rI); predictive: the same marginals, independent rows."""
    X, y = _linear_data(20)
    est.fit(X, y)
    Xq = np.array([[4.0, 4.0], [4.2, 3.9], [-3.0, 1.0]])  # far out: epistemic variance above the noise
    f, J, Sigma = _jacobian_and_cov(est, Xq)
    r = float(est.obs_variance_[0])
    cov = J[:, 0] @ Sigma @ J[:, 0].T + r * np.eye(3)
    for method, expected_cov in [("thompson", cov), ("predictive", np.diag(np.diag(cov)))]:
        draws = est.sample_y(Xq, n_samples=N_DRAWS, random_state=1, method=method)
        assert draws.shape == (3, N_DRAWS)
        se = np.sqrt(np.diag(cov) / N_DRAWS)
        assert np.all(np.abs(draws.mean(1) - f[:, 0]) < 4 * se), method
        emp = np.cov(draws)
        scale = np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
        # the standard error of an empirical covariance entry is at most ~ √(2/S) of the scale
        np.testing.assert_array_less(np.abs(emp - expected_cov) / scale, 5 * np.sqrt(2 / N_DRAWS), err_msg=method)
    # the two close rows are strongly correlated under the belief: Thompson keeps it, predictive not
    rho = cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1])
    assert rho > 0.1


def test_predictive_draws_are_joint_over_outputs():
    """Two outputs of a network: each row's draws have the linearised mean and 2×2 covariance."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 2))
    Y = np.c_[np.sin(X[:, 0]) + X[:, 1], np.sin(X[:, 0]) - X[:, 1]] + 0.1 * rng.normal(size=(20, 2))
    est = EKFRegressor(hidden_layer_sizes=(6,), random_state=0).fit(X, Y)
    Xq = np.array([[4.0, 0.0], [-3.0, 3.0], [0.0, 4.0], [3.0, 3.0], [-4.0, -1.0]])  # far out
    f, J, Sigma = _jacobian_and_cov(est, Xq)
    R = np.diag(est.obs_variance_)
    draws = est.sample_y(Xq, n_samples=N_DRAWS, random_state=3, method="predictive")
    assert draws.shape == (5, 2, N_DRAWS)
    rhos = []
    for i in range(5):
        cov = J[i] @ Sigma @ J[i].T + R
        rhos.append(abs(cov[0, 1]) / np.sqrt(cov[0, 0] * cov[1, 1]))
        np.testing.assert_allclose(draws[i].mean(1), f[i], atol=4 * np.sqrt(np.diag(cov).max() / N_DRAWS))
        scale = np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
        np.testing.assert_array_less(np.abs(np.cov(draws[i]) - cov) / scale, 5 * np.sqrt(2 / N_DRAWS))
    assert max(rhos) > 0.1  # output correlations worth testing
    # agree with predict(return_std=True)
    mean, std = est.predict(Xq, return_std=True)
    np.testing.assert_allclose(draws.std(-1), std, rtol=0.03)


def test_predictive_draws_of_lofi_network_match_predict():
    X, y = _linear_data()
    est = LoFiRegressor(hidden_layer_sizes=(16,), rank=3, random_state=0).fit(X, np.sin(y))
    Xq = X[:4]
    mean, std = est.predict(Xq, return_std=True)
    draws = est.sample_y(Xq, n_samples=N_DRAWS, random_state=0, method="predictive")
    np.testing.assert_allclose(draws.mean(1), mean, atol=4 * std.max() / np.sqrt(N_DRAWS))
    np.testing.assert_allclose(draws.std(1), std, rtol=0.03)


def test_poisson_predictive_draws():
    """Log-rate from N(f, JΣJᵀ), then the count: mean exp(f + v/2), variance (eᵛ − 1)m² + m."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 1))
    y = rng.poisson(np.exp(0.5 + 0.7 * X[:, 0]))
    est = EKFRegressor(hidden_layer_sizes=(), likelihood="poisson", random_state=0).fit(X, y)
    Xq = np.array([[0.0], [1.5], [3.5]])  # the last far out: a wide log-normal rate
    mean, std = est.predict(Xq, return_std=True)
    draws = est.sample_y(Xq, n_samples=N_DRAWS, random_state=0, method="predictive")
    assert np.all(draws == np.round(draws)) and np.all(draws >= 0)
    np.testing.assert_allclose(draws.mean(1), mean, rtol=0.03)
    np.testing.assert_allclose(draws.std(1), std, rtol=0.06)


def _gauss_hermite_sigmoid_mean(m, v, n=80):
    """``E[σ(f)]`` for ``f ~ N(m, v)`` by Gauss–Hermite quadrature."""
    t, w = np.polynomial.hermite_e.hermegauss(n)
    return np.array([np.sum(w / (1 + np.exp(-(mi + np.sqrt(vi) * t)))) / np.sqrt(2 * np.pi)
                     for mi, vi in zip(m, v)])


@pytest.mark.parametrize("Est", [EKFClassifier, LoFiClassifier])
def test_binary_classifier_draws(Est):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] + 0.5 * rng.normal(size=60) > 0).astype(int)
    kw = dict(rank=2) if Est is LoFiClassifier else {}
    est = Est(hidden_layer_sizes=(), random_state=0, **kw).fit(X, y)
    # the third point far from the boundary, but not so far that a draw's σ(f) rounds to 1 (its
    # logit would be infinite)
    Xq = np.array([[0.3, 0.0], [0.35, 0.05], [2.0, -1.0]])
    f, J, Sigma = _jacobian_and_cov(est, Xq)
    cov = J[:, 0] @ Sigma @ J[:, 0].T
    # predictive: E[σ(f)] by quadrature, and the label frequencies
    P = est.sample_proba(Xq, n_samples=N_DRAWS, random_state=0, method="predictive")
    assert P.shape == (3, 2, N_DRAWS)
    np.testing.assert_allclose(P.sum(1), 1.0)
    expected = _gauss_hermite_sigmoid_mean(f[:, 0], np.diag(cov))
    np.testing.assert_allclose(P[:, 1].mean(1), expected, atol=4 * 0.5 / np.sqrt(N_DRAWS))
    labels = est.sample_y(Xq, n_samples=N_DRAWS, random_state=0, method="predictive")
    assert set(np.unique(labels)) <= {0, 1}
    np.testing.assert_allclose((labels == 1).mean(1), expected, atol=4 * 0.5 / np.sqrt(N_DRAWS))
    # logits: Thompson is a function draw (covariance JΣJᵀ across rows), predictive independent
    for method, expected_cov in [("thompson", cov), ("predictive", np.diag(np.diag(cov)))]:
        p1 = est.sample_proba(Xq, n_samples=N_DRAWS, random_state=5, method=method)[:, 1]
        logits = np.log(p1) - np.log1p(-p1)
        scale = np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
        np.testing.assert_array_less(np.abs(np.cov(logits) - expected_cov) / scale, 5 * np.sqrt(2 / N_DRAWS),
                                     err_msg=method)


def test_multiclass_shapes_and_labels():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 2))
    y = np.array(["a", "b", "c"])[(X[:, 0] > 0).astype(int) + (X[:, 1] > 0)]
    est = EKFClassifier(hidden_layer_sizes=(4,), random_state=0).fit(X, y)
    for method in ("thompson", "predictive"):
        P = est.sample_proba(X[:5], n_samples=7, random_state=0, method=method)
        assert P.shape == (5, 3, 7)
        np.testing.assert_allclose(P.sum(1), 1.0)
        labels = est.sample_y(X[:5], n_samples=7, random_state=0, method=method)
        assert labels.shape == (5, 7) and set(np.unique(labels)) <= {"a", "b", "c"}
    # the predictive logits of a row are N(f, JΣJᵀ) jointly over the classes; softmax identifies
    # them up to a constant, so test the differences to the first class, A f with A = [−1 | I]
    Xq = X[:3] * 3
    f, J, Sigma = _jacobian_and_cov(est, Xq)
    A = np.c_[-np.ones(2), np.eye(2)]
    P = est.sample_proba(Xq, n_samples=N_DRAWS, random_state=0, method="predictive")
    for i in range(3):
        d = np.log(P[i, 1:]) - np.log(P[i, :1])  # (2, S)
        cov = A @ J[i] @ Sigma @ J[i].T @ A.T
        np.testing.assert_allclose(d.mean(1), A @ f[i], atol=4 * np.sqrt(np.diag(cov).max() / N_DRAWS))
        scale = np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
        np.testing.assert_array_less(np.abs(np.cov(d) - cov) / scale, 5 * np.sqrt(2 / N_DRAWS))


def test_regression_shapes():
    X, y = _linear_data(60)
    single = EKFRegressor(hidden_layer_sizes=(3,), random_state=0).fit(X, y)
    multi = EKFRegressor(hidden_layer_sizes=(3,), random_state=0).fit(X, np.c_[y, -y, y ** 2])
    column = EKFRegressor(hidden_layer_sizes=(3,), random_state=0).fit(X, y[:, None])
    for method in ("thompson", "predictive"):
        assert single.sample_y(X[:4], 5, random_state=0, method=method).shape == (4, 5)
        assert single.sample_y(X[:4], random_state=0, method=method).shape == (4, 1)
        assert multi.sample_y(X[:4], 5, random_state=0, method=method).shape == (4, 3, 5)
        assert column.sample_y(X[:4], 5, random_state=0, method=method).shape == (4, 1, 5)


def test_reproducible_and_default_is_thompson():
    X, y = _linear_data(60)
    est = LoFiRegressor(hidden_layer_sizes=(5,), rank=2, random_state=0).fit(X, y)
    for method in ("thompson", "predictive"):
        a = est.sample_y(X[:5], 4, random_state=7, method=method)
        np.testing.assert_array_equal(a, est.sample_y(X[:5], 4, random_state=7, method=method))
        assert not np.array_equal(a, est.sample_y(X[:5], 4, random_state=8, method=method))
    np.testing.assert_array_equal(est.sample_y(X[:5], 4, random_state=7),
                                  est.sample_y(X[:5], 4, random_state=7, method="thompson"))
    rs = np.random.RandomState(0)
    first = est.sample_y(X[:5], 4, random_state=rs, method="predictive")
    assert not np.array_equal(first, est.sample_y(X[:5], 4, random_state=rs, method="predictive"))


def test_predictive_draws_are_independent_of_n_samples_cost():
    """The predictive draws of one row do not depend on the other rows (per-row independence)."""
    X, y = _linear_data(80)
    est = EKFRegressor(hidden_layer_sizes=(4,), random_state=0).fit(X, y)
    draws = est.sample_y(X[:50], n_samples=2000, random_state=0, method="predictive")
    corr = np.corrcoef(draws)
    off = corr[~np.eye(50, dtype=bool)]
    assert np.abs(off).max() < 5 / np.sqrt(2000)


def test_bocd_mixture_draws_match_mixture_moments():
    """A run-length mixture: the draws' mean and variance are the mixture's (predict)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(160, 1))
    y = np.where(np.arange(160) < 80, 2.0, -1.0) * X[:, 0] + 0.2 * rng.normal(size=160)
    est = BOCDRegressor(EKFRegressor(hidden_layer_sizes=(), random_state=0), hazard=0.05, n_hypotheses=4).fit(X, y)
    weights = np.exp(est.estimator_.filter_state_.log_weights.numpy())
    assert np.sort(weights)[-2] > 0.01  # a mixture worth testing
    Xq = np.array([[1.0], [-2.0]])
    mean, std = est.predict(Xq, return_std=True)
    for method in ("thompson", "predictive"):
        draws = est.sample_y(Xq, n_samples=N_DRAWS, random_state=0, method=method)
        np.testing.assert_allclose(draws.mean(1), mean, atol=4 * std.max() / np.sqrt(N_DRAWS), err_msg=method)
        np.testing.assert_allclose(draws.std(1), std, rtol=0.03, err_msg=method)


def _fitted_wrappers():
    X, y = _linear_data(80)
    labels = (y > 0).astype(int)
    base_r = EKFRegressor(hidden_layer_sizes=(3,), random_state=0)
    base_c = EKFClassifier(hidden_layer_sizes=(3,), random_state=0)
    regs = [WoLFRegressor(base_r), BOCDRegressor(base_r, n_hypotheses=3), BOCDRegressor(WoLFRegressor(base_r)),
            make_partial_pipeline(StandardScaler(), base_r)]
    clfs = [WoLFClassifier(base_c), BOCDClassifier(base_c, n_hypotheses=3),
            make_partial_pipeline(StandardScaler(), base_c)]
    return X, [r.fit(X, y) for r in regs], [c.fit(X, labels) for c in clfs]


def _inner(est):
    if hasattr(est, "steps"):
        return est.steps[-1][1], est[:-1].transform
    return est.estimator_, (lambda X: X)


def test_wrappers_and_pipelines_pass_method_through():
    X, regs, clfs = _fitted_wrappers()
    for est in regs + clfs:
        inner, transform = _inner(est)
        for method in ("thompson", "predictive"):
            np.testing.assert_array_equal(est.sample_y(X[:4], 3, random_state=2, method=method),
                                          inner.sample_y(transform(X[:4]), 3, random_state=2, method=method))
    for est in clfs:
        inner, transform = _inner(est)
        P = est.sample_proba(X[:4], 3, random_state=2, method="predictive")
        assert P.shape == (4, 2, 3)
        np.testing.assert_array_equal(P, inner.sample_proba(transform(X[:4]), 3, random_state=2,
                                                            method="predictive"))


def test_bad_method_is_rejected_and_leaves_estimator_unchanged():
    X, regs, clfs = _fitted_wrappers()
    plain_r = EKFRegressor(hidden_layer_sizes=(3,), random_state=0).fit(X, X[:, 0])
    plain_c = LoFiClassifier(hidden_layer_sizes=(3,), random_state=0).fit(X, X[:, 0] > 0)
    for est in [plain_r, plain_c] + regs + clfs:
        before = pickle.dumps(est)
        with pytest.raises(InvalidParameterError, match="method"):
            est.sample_y(X[:2], 2, random_state=0, method="gibbs")
        if hasattr(est, "predict_proba"):
            with pytest.raises(InvalidParameterError, match="method"):
                est.sample_proba(X[:2], 2, random_state=0, method="Thompson")
        with pytest.raises(InvalidParameterError, match="n_samples"):
            est.sample_y(X[:2], 0, method="predictive")
        assert pickle.dumps(est) == before


def test_predictive_sampling_does_not_sample_parameters(monkeypatch):
    """Alg. 1 draws in outcome space: the structure's parameter sampler is never called."""
    X, y = _linear_data(60)
    est = LoFiRegressor(hidden_layer_sizes=(8,), rank=2, random_state=0).fit(X, y)

    def fail(*args, **kwargs):
        raise AssertionError("parameter-space sampling")

    monkeypatch.setattr(type(est._structure), "sample", fail)
    est.sample_y(X[:3], 5, random_state=0, method="predictive")
    with pytest.raises(AssertionError, match="parameter-space"):
        est.sample_y(X[:3], 5, random_state=0, method="thompson")


def test_thompson_default_matches_previous_draws():
    """The default is today's Thompson draw: θ_s from the structure's sampler with the seed drawn
    from ``random_state``, then the outputs and the noise in the same order."""
    from skfilter._utils import seed_from_random_state, torch_generator

    X, y = _linear_data(60)
    est = EKFRegressor(hidden_layer_sizes=(4,), random_state=0).fit(X, y)
    gen = torch_generator(seed_from_random_state(3), torch.device("cpu"))
    thetas = est._structure.sample(est.filter_state_.belief, 6, gen)
    f = est._adapter.forward_batch(thetas, est._tensor(X[:5]))
    r = est.filter_state_.noise["r"]
    expected = (f + r.sqrt() * torch.randn(f.shape, generator=gen, dtype=f.dtype)).numpy()[:, :, 0].T
    np.testing.assert_allclose(est.sample_y(X[:5], 6, random_state=3), expected)


@pytest.mark.parametrize("method", ["thompson", "predictive"])
def test_draws_without_noise(method):
    """``include_noise=False``: the linear model's draws have covariance JΣJᵀ (no r), and Poisson
    gives rates, not counts."""
    X, y = _linear_data(20)
    est = EKFRegressor(hidden_layer_sizes=(), random_state=0).fit(X, y)
    Xq = np.array([[4.0, 4.0], [-3.0, 1.0]])
    f, J, Sigma = _jacobian_and_cov(est, Xq)
    var = np.diag(J[:, 0] @ Sigma @ J[:, 0].T)
    draws = est.sample_y(Xq, n_samples=N_DRAWS, random_state=0, method=method, include_noise=False)
    np.testing.assert_allclose(draws.var(1), var, rtol=5 * np.sqrt(2 / N_DRAWS))
    np.testing.assert_allclose(est.predict(Xq, return_std=True, include_noise=False)[1] ** 2, var, rtol=1e-9)
    poisson = EKFRegressor(hidden_layer_sizes=(), likelihood="poisson", random_state=0).fit(X, np.round(np.abs(y)))
    rates = poisson.sample_y(Xq, 50, random_state=0, method=method, include_noise=False)
    assert np.all(rates > 0) and not np.all(rates == np.round(rates))


def test_predictive_sampling_is_cheaper_than_thompson_for_a_dense_covariance():
    """The full EKF's Thompson draw factorises the P × P covariance at every call; predictive
    sampling touches it only through J Σ Jᵀ (measured 28× cheaper at P = 2,201; asserted 2×)."""
    import timeit

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 20))
    est = EKFRegressor(hidden_layer_sizes=(100,), random_state=0).fit(X, np.sin(X[:, 0]))
    assert est.n_params_ == 2201

    def best(method):
        return min(timeit.repeat(lambda: est.sample_y(X[:10], 1, random_state=0, method=method), number=2,
                                 repeat=3))

    best("predictive"), best("thompson")  # warm-up
    assert best("predictive") < 0.5 * best("thompson")
