"""WoLF (issue 16): weighting functions, the meta-estimators, the robustness theory and the EWMA.

Facts from spec/wolf-subspace-pulse.md §2.4, §3 and §5 (numbered there).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfilter import EKFClassifier, EKFRegressor, LoFiClassifier, LoFiRegressor, WoLFClassifier, WoLFRegressor
from skfilter.ewma import RobustEWMA, steady_state_gain
from skfilter.likelihoods import robust_variance_consistency
from skfilter.weighting import (
    IMQ,
    CallableWeighting,
    Huber,
    MahalanobisIMQ,
    PredictiveMahalanobisIMQ,
    ThresholdedMahalanobis,
    influence_bound,
    make_weighting,
)

HUGE = 1e150  # a threshold whose square is finite: every weight is exactly 1 (c → ∞)
D64 = torch.float64


def _e(*values):
    return torch.tensor(values, dtype=D64).reshape(-1, 1, 1)


def _R(var, n):
    return torch.full((n, 1, 1, 1), float(var), dtype=D64)


# ---------------------------------------------------------------------------------------------
# weighting functions: values and limits (§2.4, facts 5–8)
# ---------------------------------------------------------------------------------------------
def test_imq_values_and_limits():
    w = IMQ(2.0)
    e = torch.logspace(-3, 12, 60, dtype=D64).reshape(-1, 1, 1)
    W = w(e)[:, 0]
    assert float(w(_e(0.0))) == 1.0  # W(ŷ, ŷ) = 1
    assert bool((W[1:] < W[:-1]).all())  # strictly decreasing in ‖e‖
    np.testing.assert_allclose(W ** 2, 4.0 / (4.0 + e[:, 0, 0] ** 2), rtol=1e-14)
    big = e[-1, 0, 0]
    assert abs(float(W[-1] * big) - 2.0) < 1e-9  # W ‖e‖ → c
    assert float(W[-1] ** 2 * big) < 1e-11  # W² ‖e‖ → 0 (re-descending)
    # several outputs: the Euclidean norm
    np.testing.assert_allclose(w(torch.tensor([[[3.0, 4.0]]], dtype=D64)) ** 2, [[4.0 / 29.0]], rtol=1e-14)


def test_md_with_isotropic_noise_is_imq_with_scaled_threshold_and_square_root_invariant():
    e = torch.randn(7, 1, 1, dtype=D64, generator=torch.Generator().manual_seed(0)) * 5
    sigma = 3.0
    np.testing.assert_allclose(MahalanobisIMQ(1.5)(e, None, _R(sigma ** 2, 7)), IMQ(1.5 * sigma)(e), rtol=1e-13)
    # several outputs: any R, the quadratic form eᵀ R⁻¹ e
    A = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=D64)
    e2 = torch.tensor([[[1.0, -2.0]]], dtype=D64)
    d2 = float(e2[0, 0] @ torch.linalg.solve(A, e2[0, 0]))
    np.testing.assert_allclose(MahalanobisIMQ(2.0)(e2, None, A.expand(1, 1, 2, 2)) ** 2, [[4 / (4 + d2)]],
                               rtol=1e-13)


def test_tmd_is_a_step_at_the_squared_distance():
    R = _R(4.0, 4)
    w = ThresholdedMahalanobis(9.0)(_e(0.0, 6.0, 6.0 + 1e-9, 100.0), None, R)[:, 0]  # d² = e²/4
    assert w.tolist() == [1.0, 1.0, 0.0, 0.0]  # boundary d² = 9 counts as an inlier (thesis: ≤)


def test_huber_bounded_not_redescending():
    R = _R(1.0, 3)
    w = Huber(2.0)(_e(1.0, 2.0, 1e8), None, R)[:, 0]
    assert w[:2].tolist() == [1.0, 1.0]
    np.testing.assert_allclose(float(w[2] ** 2 * 1e8), 2.0, rtol=1e-12)  # W² ‖e‖ → c σ


def test_predictive_md_uses_the_pseudo_inverse_on_the_simplex():
    p = torch.tensor([0.7, 0.2, 0.1], dtype=D64)
    S = (torch.diag(p) - torch.outer(p, p)).expand(1, 1, 3, 3)  # singular: 1ᵀ S = 0
    e = (torch.tensor([0.0, 0.0, 1.0], dtype=D64) - p).reshape(1, 1, 3)
    d2 = float(e[0, 0] @ torch.linalg.pinv(S[0, 0], hermitian=True) @ e[0, 0])
    np.testing.assert_allclose(PredictiveMahalanobisIMQ(2.0)(e, S) ** 2, [[4 / (4 + d2)]], rtol=1e-10)
    assert d2 > 5  # a label of probability 0.1 is far out


def test_predictive_md_on_the_simplex_does_not_depend_on_rounding():
    """``eᵀ S⁺ e = 1/p_y − 1`` for ``S = diag p − ppᵀ``, ``e = y − p`` (one-hot ``y``), however the null
    eigenvalue of ``S`` rounds: 200 random ``p`` (3–10 classes, some near 0 or 1), ``S`` built as
    the engine builds it and also with a rounding-sized symmetric perturbation. The pseudo-inverse
    of the whole ``S`` got some of these 3 % wrong (when its cutoff inverted the null eigenvalue)."""
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        C = int(torch.randint(3, 11, (1,), generator=g))
        p = torch.softmax(4 * torch.randn(C, generator=g, dtype=D64), 0)
        y = int(torch.randint(0, C, (1,), generator=g))
        e = (torch.nn.functional.one_hot(torch.tensor(y), C).to(D64) - p).reshape(1, 1, C)
        S = torch.diag(p) - torch.outer(p, p)
        noise = 1e-17 * torch.randn(C, C, generator=g, dtype=D64)
        expected = 4 / (4 + (1 / p[y] - 1))
        for M in (S, S + 0.5 * (noise + noise.T)):
            w2 = float(PredictiveMahalanobisIMQ(2.0)(e, M.expand(1, 1, C, C))[0, 0] ** 2)
            np.testing.assert_allclose(w2, float(expected), rtol=1e-9)


@pytest.mark.parametrize("weighting", [IMQ(1.0), MahalanobisIMQ(1.0), ThresholdedMahalanobis(1.0), Huber(1.0),
                                       PredictiveMahalanobisIMQ(1.0)])
def test_every_builtin_weight_satisfies_theorem_4_5(weighting):
    b1 = influence_bound(weighting, largest=1e6)
    b2 = influence_bound(weighting, largest=1e12)
    assert b1["sup_weight"] <= 1.0
    assert np.isfinite(b2["sup_influence"]) and b2["sup_influence"] <= b1["sup_influence"] * (1 + 1e-9)


def test_the_plain_filter_fails_theorem_4_5():
    one = CallableWeighting(lambda e, S: torch.ones(e.shape[:-1], dtype=e.dtype))
    assert influence_bound(one, largest=1e12)["sup_influence"] > 1e11


def test_make_weighting_and_callables():
    assert make_weighting("md", 3.0) == MahalanobisIMQ(3.0)
    w = IMQ(2.0)
    assert make_weighting(w) is w
    with pytest.raises(ValueError, match="weighting must be one of"):
        make_weighting("cauchy", 1.0)
    with pytest.raises(ValueError, match="positive"):
        make_weighting("imq", -1.0)
    with pytest.raises(TypeError):
        make_weighting("imq", "big")
    bad = CallableWeighting(lambda e, S: 2.0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        bad(torch.zeros(1, 1, 1, dtype=D64), torch.ones(1, 1, 1, 1, dtype=D64))


# ---------------------------------------------------------------------------------------------
# threshold → ∞ is the base filter exactly (fact 8), for every structure and likelihood
# ---------------------------------------------------------------------------------------------
_SMALL = dict(hidden_layer_sizes=(6,), random_state=0)
_BASE_REGRESSORS = {
    "ekf-full": lambda: EKFRegressor(**_SMALL),
    "ekf-vd": lambda: EKFRegressor(covariance="vd", **_SMALL),
    "ekf-fd": lambda: EKFRegressor(covariance="fd", **_SMALL),
    "lofi": lambda: LoFiRegressor(rank=3, **_SMALL),
    "lofi-spherical": lambda: LoFiRegressor(rank=3, variant="spherical", **_SMALL),
    "ekf-poisson": lambda: EKFRegressor(likelihood="poisson", **_SMALL),
    "ekf-fixed-noise": lambda: EKFRegressor(obs_variance=0.3, **_SMALL),
}
_BASE_CLASSIFIERS = {
    "ekf-full": lambda: EKFClassifier(**_SMALL),
    "ekf-vd": lambda: EKFClassifier(covariance="vd", **_SMALL),
    "lofi": lambda: LoFiClassifier(rank=3, **_SMALL),
}


def _regression_stream(n=60, poisson=False, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    f = np.sin(X[:, 0]) + 0.5 * X[:, 1]
    y = rng.poisson(np.exp(0.5 * f)).astype(float) if poisson else f + 0.1 * rng.normal(size=n)
    return X, y


def _same_belief(a, b):
    """The same belief to rounding: the base filter may run on the compiled CPU kernel
    (:mod:`skfilter.kernels`) and the wrapper on the torch engine, which agree to ~1e-14; LoFi's
    ``W`` is compared through ``W Wᵀ`` (its rows are determined up to sign)."""
    np.testing.assert_allclose(a.posterior_.mean.numpy(), b.posterior_.mean.numpy(), rtol=1e-12, atol=1e-14)
    for name in ("cov", "var", "diagonal", "low_rank"):
        if hasattr(a.posterior_.belief, name):
            x, y = getattr(a.posterior_.belief, name).numpy(), getattr(b.posterior_.belief, name).numpy()
            if name == "low_rank":
                x, y = x.T @ x, y.T @ y
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-14 * max(1.0, float(np.abs(y).max())))


@pytest.mark.parametrize("name", list(_BASE_REGRESSORS))
@pytest.mark.parametrize("weighting", ["imq", "md", "tmd", "huber", "predictive-md"])
def test_wolf_regressor_with_huge_threshold_is_the_base_filter(name, weighting):
    base = _BASE_REGRESSORS[name]()
    X, y = _regression_stream(poisson="poisson" in name)
    wolf = WoLFRegressor(base, weighting=weighting, threshold=HUGE, robust_noise=False).fit(X, y)
    plain = clone(base).fit(X, y)
    _same_belief(wolf, plain)
    np.testing.assert_allclose(wolf.predict(X[:5], return_std=True)[1], plain.predict(X[:5], return_std=True)[1],
                               rtol=1e-12)


def test_robust_noise_is_the_only_other_change():
    """With ``robust_noise=True`` a base with ``obs_variance='auto'`` runs with ``'robust'``; with
    a huge threshold WoLF is then that base exactly (and the default, False, the base itself)."""
    X, y = _regression_stream()
    _same_belief(WoLFRegressor(EKFRegressor(**_SMALL), threshold=HUGE).fit(X, y), EKFRegressor(**_SMALL).fit(X, y))
    wolf = WoLFRegressor(EKFRegressor(**_SMALL), threshold=HUGE, robust_noise=True).fit(X, y)
    assert wolf.estimator_.obs_variance == "robust" and wolf.estimator.obs_variance == "auto"
    _same_belief(wolf, EKFRegressor(obs_variance="robust", **_SMALL).fit(X, y))


@pytest.mark.parametrize("name", list(_BASE_CLASSIFIERS))
@pytest.mark.parametrize("n_classes", [2, 3])
def test_wolf_classifier_with_huge_threshold_is_the_base_filter(name, n_classes):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 3))
    y = np.digitize(X[:, 0] + 0.3 * X[:, 1], [-0.5, 0.5][: n_classes - 1])
    base = _BASE_CLASSIFIERS[name]()
    wolf = WoLFClassifier(base, threshold=HUGE).fit(X, y)
    _same_belief(wolf, clone(base).fit(X, y))


# ---------------------------------------------------------------------------------------------
# WoLF-IMQ over the full EKF = a dense NumPy implementation of Alg. 11 (safe covariance form)
# ---------------------------------------------------------------------------------------------
def _numpy_mlp(theta, x, n_in, n_hidden):
    """``h = W2 tanh(W1 x + b1) + b2`` and its Jacobian in torch's flat order (W1, b1, W2, b2)."""
    k = n_hidden * n_in
    W1 = theta[:k].reshape(n_hidden, n_in)
    b1 = theta[k:k + n_hidden]
    W2 = theta[k + n_hidden:k + 2 * n_hidden]
    b2 = theta[-1]
    a = np.tanh(W1 @ x + b1)
    f = W2 @ a + b2
    da = W2 * (1 - a ** 2)
    J = np.concatenate([np.outer(da, x).ravel(), da, a, [1.0]])
    return f, J


@pytest.mark.parametrize("q", [0.0, 1e-3])
def test_wolf_imq_full_ekf_matches_dense_numpy(q):
    rng = np.random.default_rng(3)
    n_in, n_hidden, T, c, r, s0 = 2, 4, 40, 0.8, 0.05, 0.5
    X = rng.normal(size=(T, n_in))
    y = np.sin(X[:, 0]) - X[:, 1] + np.sqrt(r) * rng.normal(size=T)
    y[::7] += 30.0  # outliers
    base = EKFRegressor(hidden_layer_sizes=(n_hidden,), activation="tanh", prior_variance=s0, obs_variance=r,
                        process_noise=q, random_state=0)
    wolf = WoLFRegressor(base, weighting="imq", threshold=c).fit(X, y)
    mu = wolf.estimator_._reference.mean.numpy().copy()  # the prior mean: the module's initial weights
    P = mu.size
    Sigma = s0 * np.eye(P)
    for t in range(T):
        Sigma = Sigma + q * np.eye(P)
        f, J = _numpy_mlp(mu, X[t], n_in, n_hidden)
        e = y[t] - f
        w2 = c * c / (c * c + e * e)
        S_w = w2 * J @ Sigma @ J + r
        K = w2 * Sigma @ J / S_w
        mu = mu + K * e
        Sigma = Sigma - np.outer(K, J @ Sigma)
    np.testing.assert_allclose(wolf.posterior_.mean.numpy(), mu, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(wolf.posterior_.belief.cov.numpy(), Sigma, rtol=1e-8, atol=1e-11)


# ---------------------------------------------------------------------------------------------
# robustness theory (§3): posterior influence of one contaminated observation
# ---------------------------------------------------------------------------------------------
def _kl(m0, S0, m1, S1):
    """KL(N(m0, S0) ‖ N(m1, S1))."""
    d = m0.size
    S1_inv = np.linalg.inv(S1)
    diff = m1 - m0
    return 0.5 * (np.trace(S1_inv @ S0) - d + diff @ S1_inv @ diff
                  + np.linalg.slogdet(S1)[1] - np.linalg.slogdet(S0)[1])


def _one_step(prior_mean, prior_cov, x, y, r, weighting):
    """One update of a linear-Gaussian model ``y = xᵀθ + N(0, r)`` by the full-covariance filter
    of skfilter, through the engine's weighting stage (the estimator with ``hidden_layer_sizes=()``)."""
    from skfilter.dynamics import Dynamics, Reference
    from skfilter.filtering import EngineParts, FilterState, filter_step
    from skfilter.likelihoods import Gaussian
    from skfilter.models import make_adapter
    from skfilter.posteriors import FullBelief, FullCovariance

    D = x.size
    lin = torch.nn.Linear(D, 1, bias=False, dtype=D64)
    adapter = make_adapter(lin, torch.device("cpu"), D64, D)
    lik = Gaussian(r)
    parts = EngineParts(adapter, lik, FullCovariance(), Dynamics(), Reference(torch.as_tensor(prior_mean), 1.0),
                        weighting)
    state = FilterState(FullBelief(torch.as_tensor(prior_mean.copy()), torch.as_tensor(prior_cov.copy())),
                        lik.initial_state(1, torch.device("cpu"), D64), 0)
    new, _ = filter_step(parts, state, torch.as_tensor(x[None]), torch.tensor([[y]], dtype=D64))
    return new.belief.mean.numpy(), new.belief.cov.numpy()


def _pif(prior_mean, prior_cov, x, y, y_c, r, weighting):
    """Definition 4.2: KL(contaminated ‖ clean)."""
    m, S = _one_step(prior_mean, prior_cov, x, y, r, weighting)
    mc, Sc = _one_step(prior_mean, prior_cov, x, y_c, r, weighting)
    return _kl(mc, Sc, m, S), mc


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), dim=st.integers(1, 4), c=st.floats(0.3, 5.0), r=st.floats(0.05, 3.0))
def test_plain_filter_influence_is_unbounded_and_wolf_imq_bounded(seed, dim, c, r):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(dim, dim))
    prior_cov = A @ A.T + 0.5 * np.eye(dim)
    prior_mean = rng.normal(size=dim)
    x = rng.normal(size=dim)
    x /= max(np.linalg.norm(x), 1e-3) / 1.5
    y = float(x @ prior_mean + rng.normal())
    scales = [1e1, 1e3, 1e5, 1e7, 1e9]
    plain = [_pif(prior_mean, prior_cov, x, y, y + s, r, None)[0] for s in scales]
    # Theorem 4.4 / Lemma 4.12: exactly quadratic along a ray (×1e4 per two decades)
    for a, b in zip(plain[:-1], plain[1:]):
        assert b > 0.5e4 * a
    robust = [_pif(prior_mean, prior_cov, x, y, y + s, r, IMQ(c)) for s in scales]
    pifs = [p for p, _ in robust]
    # Theorem 4.5: bounded, converging to KL(prior ‖ clean WoLF posterior) (fact 12)
    m, S = _one_step(prior_mean, prior_cov, x, y, r, IMQ(c))
    limit = _kl(prior_mean, prior_cov, m, S)
    np.testing.assert_allclose(pifs[-2:], [limit, limit], rtol=1e-2, atol=1e-8)
    np.testing.assert_allclose(pifs[-1], limit, rtol=1e-4, atol=1e-8)
    assert all(np.isfinite(pifs))  # finite everywhere (a hump at moderate |y − ŷ|, then the limit)
    # the mean shift is re-descending (fact 15)
    shifts = [np.linalg.norm(mc - prior_mean) for _, mc in robust]
    assert shifts[-1] < 1e-5 * (1 + shifts[0])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), c=st.floats(1.0, 30.0))
def test_tmd_influence_is_the_constant_kl_beyond_the_threshold(seed, c):
    rng = np.random.default_rng(seed)
    dim, r = 3, 0.5
    A = rng.normal(size=(dim, dim))
    prior_cov, prior_mean, x = A @ A.T + np.eye(dim), rng.normal(size=dim), rng.normal(size=dim)
    y = float(x @ prior_mean)
    m, S = _one_step(prior_mean, prior_cov, x, y, r, ThresholdedMahalanobis(c))
    limit = _kl(prior_mean, prior_cov, m, S)
    for s in (np.sqrt(c * r) * 1.01 + 1e-9, 1e3, 1e9):  # squared distance s²/r > c
        pif, mc = _pif(prior_mean, prior_cov, x, y, y + s, r, ThresholdedMahalanobis(c))
        np.testing.assert_allclose(pif, limit, rtol=1e-9, atol=1e-12)
        np.testing.assert_array_equal(mc, prior_mean)  # W = 0: no update at all (fact 4)


def test_covariance_ordering_for_weights_in_zero_one():
    """Σ⁻ ⪰ Σ_WoLF ⪰ Σ_KF, monotone in w (fact 9)."""
    rng = np.random.default_rng(0)
    A = rng.normal(size=(3, 3))
    prior_cov, prior_mean, x = A @ A.T + np.eye(3), rng.normal(size=3), rng.normal(size=3)
    covs = []
    for w in (0.0, 0.3, 0.7, 1.0):
        fixed = CallableWeighting(lambda e, S, w=w: torch.full(e.shape[:-1], w, dtype=e.dtype))
        covs.append(_one_step(prior_mean, prior_cov, x, 5.0, 0.5, fixed)[1])
    np.testing.assert_allclose(covs[0], prior_cov, rtol=1e-14)
    for big, small in zip(covs[:-1], covs[1:]):
        assert np.linalg.eigvalsh(big - small).min() >= -1e-12


# ---------------------------------------------------------------------------------------------
# the meta-estimators
# ---------------------------------------------------------------------------------------------
def test_one_huge_target_no_longer_breaks_the_fit():
    """Issue 16: one y = 1e6 moved the EKF's predictions by 3e8–3e11 for good and held the noise
    estimate near 1e9."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(300, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=300)
    y[150] = 1e6
    Xt = np.linspace(-2, 2, 21)[:, None]
    error = lambda est: np.abs(est.predict(Xt) - np.sin(2 * Xt[:, 0])).max()  # noqa: E731
    fixed = EKFRegressor(hidden_layer_sizes=(20,), obs_variance=0.01, random_state=0).fit(X, y)
    assert error(fixed) > 1e3  # fixed noise: the outlier is learned as data
    for base in (EKFRegressor(hidden_layer_sizes=(20,), obs_variance=0.01, random_state=0),
                 EKFRegressor(hidden_layer_sizes=(20,), random_state=0)):
        robust = WoLFRegressor(base).fit(X, y)
        assert error(robust) < 0.3
        assert robust.obs_variance_[0] < 0.1


@pytest.mark.parametrize("weighting", ["imq", "md", "tmd"])
def test_default_wolf_regressor_learns_through_ten_percent_outliers(weighting):
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, size=(500, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=500)
    out = rng.uniform(size=500) < 0.1
    y[out] = rng.uniform(-20, 20, size=out.sum())
    Xt = np.linspace(-2, 2, 41)[:, None]
    rmse = lambda est: np.sqrt(np.mean((est.predict(Xt) - np.sin(2 * Xt[:, 0])) ** 2))  # noqa: E731
    plain = LoFiRegressor(random_state=0).fit(X, y)
    robust = WoLFRegressor(LoFiRegressor(random_state=0), weighting=weighting).fit(X, y)
    assert rmse(robust) < 0.1 < rmse(plain)


@pytest.mark.parametrize("flips", ["random", "far"])
def test_wolf_classifier_resists_flipped_labels(flips):
    """30 % random flips, or 40 % of the labels far from the boundary flipped (gross label
    errors): the weighted filter ends closer to the true boundary (5-seed means in the
    ``wolf-labels`` benchmark; 3-seed means here: one seed is a coin toss within a few tenths of a
    percent — with the prior of the stream's first 50 rows (issue 29) seed 0 of 'far' gives
    0.973 < 0.9795 while the 3-seed mean keeps the claim). The classifiers' wider ``'auto'`` prior
    (issue 30: logit variance 10, was 3) follows noisy labels more in one pass: 3-seed means with
    30 % random flips 0.973 (plain) / 0.983 (WoLF) at ×3, 0.964 / 0.973 at ×10; 'far' flips
    0.953 / 0.986 and 0.960 / 0.987 — WoLF's margin holds, the absolute bar is 0.97."""
    def accuracies(seed):
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(1500, 2))
        margin = X[:, 0] + X[:, 1]
        y = (margin > 0).astype(int)
        if flips == "random":
            noisy = np.where(rng.uniform(size=1500) < 0.3, 1 - y, y)
        else:
            idx = (np.abs(margin) > 1) & (rng.uniform(size=1500) < 0.4)
            noisy = np.where(idx, 1 - y, y)
        Xt = rng.normal(size=(2000, 2))
        yt = (Xt[:, 0] + Xt[:, 1] > 0).astype(int)
        base = EKFClassifier(hidden_layer_sizes=(10,), random_state=seed)
        acc = lambda est: (est.predict(Xt) == yt).mean()  # noqa: E731
        return acc(clone(base).fit(X, noisy)), acc(WoLFClassifier(base).fit(X, noisy))

    plain, robust = np.mean([accuracies(seed) for seed in range(3)], axis=0)
    assert robust > plain + 0.003 and robust > 0.97


def test_predict_reports_the_plain_predictive_and_sample_y_pickle_work():
    X, y = _regression_stream()
    wolf = WoLFRegressor(EKFRegressor(**_SMALL)).fit(X, y)
    mean, std = wolf.predict(X[:4], return_std=True)
    m2, s2 = wolf.estimator_.predict(X[:4], return_std=True)
    np.testing.assert_array_equal(mean, m2)
    np.testing.assert_array_equal(std, s2)
    assert wolf.sample_y(X[:4], n_samples=3, random_state=0).shape == (4, 3)
    again = pickle.loads(pickle.dumps(wolf))
    np.testing.assert_array_equal(again.predict(X[:4]), mean)
    again.partial_fit(X[:5], y[:5])  # the weighting survives pickling
    assert isinstance(again.estimator_._engine_parts().weighting, IMQ)


def test_partial_fit_equals_fit_and_bad_input_leaves_it_unchanged():
    X, y = _regression_stream()
    a = WoLFRegressor(EKFRegressor(**_SMALL)).fit(X, y)
    from skfilter.priors import target_scale

    b = WoLFRegressor(EKFRegressor(**_SMALL))
    b.partial_fit(X[:30], y[:30])
    # the 'auto' IMQ threshold is the robust scale of the rows so far while fewer than n_prior_rows
    # (50) have arrived, then of the stream's first 50 rows for good (issue 29)
    assert b.weighting_.threshold == pytest.approx(target_scale(y[:30, None])[1][0])
    before = b.posterior_.mean.clone()
    with pytest.raises(ValueError):
        b.partial_fit(X[:3, :2], y[:3])
    np.testing.assert_array_equal(b.posterior_.mean.numpy(), before.numpy())
    assert b.weighting_.threshold == pytest.approx(target_scale(y[:30, None])[1][0])  # unchanged too
    b.partial_fit(X[30:], y[30:])
    assert b.n_samples_seen_ == 60
    assert b.weighting_.threshold == pytest.approx(target_scale(y[:50, None])[1][0])
    assert a.weighting_.threshold == pytest.approx(target_scale(y[:50, None])[1][0])
    # ... so with the 'auto' prior, noise and threshold too, fit and partial_fit in two calls give
    # the same belief (the prior is fixed by the stream's first rows however they arrive)
    np.testing.assert_allclose(a.posterior_.mean.numpy(), b.posterior_.mean.numpy(), rtol=1e-10, atol=1e-12)
    # with explicit prior and noise and threshold, fit and partial_fit in two calls give the same belief
    explicit = EKFRegressor(prior_variance=0.5, obs_variance=0.1, **_SMALL)
    c = WoLFRegressor(explicit, threshold=0.5).fit(X, y)
    d = WoLFRegressor(explicit, threshold=0.5)
    d.partial_fit(X[:30], y[:30]).partial_fit(X[30:], y[30:])
    np.testing.assert_allclose(c.posterior_.mean.numpy(), d.posterior_.mean.numpy(), rtol=1e-12, atol=1e-14)


def test_grid_search_over_nested_and_own_parameters():
    X, y = _regression_stream(80)
    y[::9] += 25
    search = GridSearchCV(WoLFRegressor(LoFiRegressor(hidden_layer_sizes=(6,), random_state=0)),
                          {"estimator__rank": [2, 4], "threshold": [0.5, "auto"]}, cv=2, error_score="raise")
    search.fit(X, y)
    assert set(search.best_params_) == {"estimator__rank", "threshold"}


def test_default_base_estimators_learn_raw_data():
    """``estimator=None``: LoFi with its defaults (the defaults benchmark has the full picture)."""
    from sklearn.datasets import load_diabetes, load_iris

    X, y = load_diabetes(return_X_y=True)
    reg = WoLFRegressor().fit(X[:300], y[:300])
    assert type(reg.estimator_).__name__ == "LoFiRegressor"
    assert np.sqrt(np.mean((reg.predict(X[300:]) - y[300:]) ** 2)) < 0.9 * y[300:].std()
    from sklearn.model_selection import train_test_split

    Xtr, Xte, ytr, yte = train_test_split(*load_iris(return_X_y=True), test_size=0.3, random_state=0)
    clf = WoLFClassifier().fit(Xtr, ytr)
    assert (clf.predict(Xte) == yte).mean() > 0.9


def test_wrong_estimator_kind_is_a_type_error():
    with pytest.raises(TypeError, match="regressor"):
        WoLFRegressor(EKFClassifier()).fit(np.zeros((3, 2)), [0, 1, 0])
    from sklearn.linear_model import Ridge, SGDRegressor

    with pytest.raises(TypeError, match="'estimator' parameter.*'partial_fit'"):  # no partial_fit
        WoLFRegressor(Ridge()).fit(np.zeros((3, 2)), [0.0, 1.0, 0.0])
    with pytest.raises(TypeError, match="skfilter filter"):
        WoLFRegressor(SGDRegressor()).fit(np.zeros((3, 2)), [0.0, 1.0, 0.0])


@parametrize_with_checks([WoLFRegressor(EKFRegressor(hidden_layer_sizes=(5,), random_state=0)),
                          WoLFRegressor(LoFiRegressor(random_state=0), weighting="tmd"),
                          WoLFClassifier(EKFClassifier(hidden_layer_sizes=(5,), random_state=0)),
                          WoLFClassifier(LoFiClassifier(random_state=0), weighting="md")],
                         expected_failed_checks=lambda est: {
                             "check_sample_weight_equivalence_on_dense_data": (
                                 "as for the base filters (tests/test_sklearn_compat.py): a weight scales one "
                                 "linearised update; repeated rows re-linearise")})
def test_sklearn_compatible(estimator, check):
    check(estimator)


# ---------------------------------------------------------------------------------------------
# the outlier-robust noise estimate and EWMA (§2.5, facts 17–19)
# ---------------------------------------------------------------------------------------------
def test_robust_noise_estimate_is_consistent_and_one_outlier_cannot_hold_it_up():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1500, 1))
    y = 2.0 * X[:, 0] + 0.5 * rng.normal(size=1500)
    kw = dict(hidden_layer_sizes=(), random_state=0)
    clean = EKFRegressor(obs_variance="robust", **kw).fit(X, y)
    assert abs(clean.obs_variance_[0] / 0.25 - 1) < 0.25  # consistent under Gaussian residuals
    y_bad = y.copy()
    y_bad[1400] = 1e6
    auto = EKFRegressor(obs_variance=0.25, **kw)
    robust = WoLFRegressor(EKFRegressor(**kw)).fit(X, y_bad)
    assert robust.obs_variance_[0] < 0.5
    assert auto.get_params()["obs_variance"] == 0.25


def test_consistency_factor_values():
    assert abs(robust_variance_consistency(4.0, 1) - 0.9) < 0.1
    assert robust_variance_consistency(1e6, 1) == pytest.approx(1.0, rel=1e-6)


def test_ewma_limits_and_steady_state():
    rng = np.random.default_rng(0)
    y = rng.normal(size=400)
    kf = RobustEWMA(0.01, 1.0).filter(y)
    huge = RobustEWMA(0.01, 1.0, threshold=1e150).filter(y)
    np.testing.assert_array_equal(kf.means, huge.means)  # c → ∞: the Kalman EWMA (fact 19)
    np.testing.assert_allclose(kf.gains[-1, 0], steady_state_gain(0.01, 1.0), rtol=1e-6)  # fact 18
    assert steady_state_gain(0.01, 1.0) == pytest.approx(0.0951, abs=1e-4)
    # KF = EWMA with α = k_t (Prop. 4.19)
    m = 0.0
    for t in range(400):
        m = kf.gains[t, 0] * y[t] + (1 - kf.gains[t, 0]) * m
    assert m == pytest.approx(kf.means[-1, 0], rel=1e-12)
    # a gross outlier: m_t → m_{t−1}, s_t → s_{t−1} + q (not s_{t−1}: §6.12)
    ew = RobustEWMA(0.01, 1.0, threshold=0.05)
    ew.filter(y[:100])
    m_prev, s_prev = ew.mean_.copy(), ew.variance_.copy()
    ew.update(1e12)
    np.testing.assert_allclose(ew.mean_, m_prev, atol=1e-20)
    np.testing.assert_allclose(ew.variance_, s_prev + 0.01, rtol=1e-12)
    with pytest.raises(ValueError):
        ew.update(np.nan)


def test_wolf_labels_benchmark_smoke():
    from skfilter.benchmarks import wolf_labels

    # a mean over 3 seeds (as test_wolf_classifier_resists_flipped_labels): one seed is a coin toss
    # within a few tenths of a percent (seed 0 after issue 29's prior: 0.973 against 0.9795)
    rows = wolf_labels.run(seeds=(0, 1, 2), thresholds=("auto",), corruptions=("far",), progress=None)
    by = {(r["base"], r["method"]): r["accuracy"] for r in rows}
    assert len(rows) == 4 and all(np.isfinite(v) for v in by.values())
    for base in ("EKF (10 hidden)", "LoFi (default)"):
        assert by[(base, "WoLF c=auto")] > by[(base, "plain")]


# ---------------------------------------------------------------------------------------------
# review findings
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_huge_thresholds_give_weight_one_not_nan(dtype):
    """``threshold → ∞`` is the base filter: a threshold whose square overflows the dtype (c² in
    float32 beyond 3.4e38, or a Python float beyond 1.8e308) must give W = 1, not NaN (inf / inf)
    or an OverflowError; a residual whose square overflows must give W = 0."""
    from skfilter.weighting import IMQ, MahalanobisIMQ, PredictiveMahalanobisIMQ

    e = torch.tensor([[[0.5]], [[3.0]]], dtype=dtype)
    R = torch.ones(2, 1, 1, 1, dtype=dtype)
    for c in (1e20, 1e200):
        for fn in (IMQ(c), MahalanobisIMQ(c), PredictiveMahalanobisIMQ(c)):
            w = fn(e, R, R)
            assert w.dtype == dtype
            np.testing.assert_array_equal(w.numpy(), 1.0)
    big = torch.tensor([[[1e30]]], dtype=dtype) if dtype == torch.float32 else torch.tensor([[[1e200]]], dtype=dtype)
    R1 = torch.ones(1, 1, 1, 1, dtype=dtype)
    for fn in (IMQ(1.0), MahalanobisIMQ(1.0), PredictiveMahalanobisIMQ(1.0)):
        assert float(fn(big, R1, R1)) == 0.0


def test_wolf_with_huge_threshold_in_float32_is_the_base():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2)).astype(np.float32)
    y = X.sum(1) + 0.1 * rng.normal(size=40)
    base = EKFRegressor(hidden_layer_sizes=(), obs_variance=0.1, prior_variance=1.0, dtype="float32",
                        random_state=0)
    wolf = WoLFRegressor(base, threshold=1e25, robust_noise=False).fit(X, y)
    plain = clone(base).fit(X, y)
    np.testing.assert_allclose(wolf.predict(X), plain.predict(X), rtol=1e-5)


def test_partial_fit_after_changing_the_base_or_robust_noise_raises():
    """As the base filters (their structural parameters), a wrapper whose ``estimator`` (or a
    parameter of it, or ``robust_noise``) changed since the stream began must not go on with the
    old one silently: partial_fit raises and leaves the fitted state as it was; fit starts anew."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 2))
    y = X.sum(1)
    base = EKFRegressor(hidden_layer_sizes=(), obs_variance="auto", random_state=0)
    wolf = WoLFRegressor(base).fit(X, y)
    n = wolf.n_samples_seen_
    for change in ({"estimator": LoFiRegressor(random_state=0)}, {"estimator__hidden_layer_sizes": (3,)},
                   {"robust_noise": True}):
        est = clone(wolf).set_params(estimator=clone(base)).fit(X, y)
        est.set_params(**change)
        with pytest.raises(ValueError, match="changed"):
            est.partial_fit(X, y)
        assert est.n_samples_seen_ == n
        est.fit(X, y)  # a new stream takes the new values
        est.partial_fit(X, y)
    # unchanged parameters (and a changed threshold, which is not structural) go on
    wolf.set_params(threshold=2.0).partial_fit(X, y)
    assert wolf.n_samples_seen_ == 2 * n
    # a pickled estimator keeps going
    again = pickle.loads(pickle.dumps(wolf))
    again.partial_fit(X, y)


def test_classifier_auto_threshold_grows_with_the_classes():
    """c = 2 √(K − 1): on digits c = 2 cost 4 points of accuracy (defaults benchmark)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    for K in (2, 3, 10):
        y = np.arange(40) % K
        clf = WoLFClassifier(EKFClassifier(hidden_layer_sizes=(), random_state=0)).fit(X, y)
        assert clf.weighting_.threshold == pytest.approx(2.0 * np.sqrt(K - 1))
    clf = WoLFClassifier(EKFClassifier(hidden_layer_sizes=(), random_state=0))
    clf.partial_fit(X[:5], np.zeros(5, dtype=int), classes=np.arange(5))  # classes, not the first labels
    assert clf.weighting_.threshold == pytest.approx(4.0)


def test_prequential_interfaces_of_the_wrappers():
    """prequential_fit_predict (and model_selection.prequential_predict) through WoLF: the base's
    one-step-ahead predictions with the weights in the updates."""
    from skfilter.model_selection import prequential_predict

    X, y = _regression_stream()
    wolf = WoLFRegressor(EKFRegressor(**_SMALL), threshold=HUGE, robust_noise=False)
    mean, std = wolf.prequential_fit_predict(X, y, return_std=True)
    plain_mean, plain_std = EKFRegressor(**_SMALL).prequential_fit_predict(X, y, return_std=True)
    np.testing.assert_allclose(mean, plain_mean, rtol=1e-12, atol=1e-13)  # torch engine vs compiled kernel
    np.testing.assert_allclose(std, plain_std, rtol=1e-12)
    assert prequential_predict(WoLFRegressor(EKFRegressor(**_SMALL)), X, y).shape == y.shape
    labels = (y > 0).astype(int)
    proba = WoLFClassifier(EKFClassifier(**_SMALL)).prequential_fit_predict(X, labels, method="predict_proba")
    assert proba.shape == (len(y), 2)
