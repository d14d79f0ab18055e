"""Run-length filters (issue 17): BOCD / RL[K]-PR, RL[K]-MMPR and RL[1]-OUPR* over any filter.

Facts from spec/bone.md §5 (numbered there).
"""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest
import torch
from scipy.special import expit, logsumexp
from scipy.stats import multivariate_normal
from sklearn.base import clone
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfilter import (BOCDClassifier, BOCDRegressor, EKFClassifier, EKFRegressor, LoFiClassifier, LoFiRegressor,
                      WoLFRegressor)

PRIOR_VAR, NOISE = 0.8, 0.3


def _linear_stream(T=7, D=2, seed=0, jump=True):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, D))
    w = np.where(np.arange(T)[:, None] < T // 2, 1.0, -1.5) if jump else np.ones((T, 1))
    y = (X * w).sum(1) + np.sqrt(NOISE) * rng.normal(size=T)
    return X, y


def _linear_base(**kw):
    return EKFRegressor(hidden_layer_sizes=(), prior_variance=PRIOR_VAR, obs_variance=NOISE, random_state=0, **kw)


def _segment_log_evidence(X, y, mu0):
    """log N(y; [X 1] μ₀, σ₀² [X 1][X 1]ᵀ + r I): a segment's marginal likelihood (linear-Gaussian)."""
    H = np.c_[X, np.ones(len(X))]
    return multivariate_normal(H @ mu0, PRIOR_VAR * H @ H.T + NOISE * np.eye(len(X))).logpdf(y)


def _brute_force(X, y, mu0, hazard):
    """Enumerate every segmentation (fact 12): returns log p(D) and p(first row of the last segment)."""
    T = len(y)
    log_terms, starts = [], []
    for cps in itertools.product([0, 1], repeat=T - 1):  # changepoint at rows 2..T
        bounds = [0] + [t + 1 for t, c in enumerate(cps) if c] + [T]
        log_prior = sum(np.log(hazard) if c else np.log1p(-hazard) for c in cps)
        log_lik = sum(_segment_log_evidence(X[a:b], y[a:b], mu0) for a, b in zip(bounds[:-1], bounds[1:]))
        log_terms.append(log_prior + log_lik)
        starts.append(bounds[-2])
    log_terms = np.array(log_terms)
    evidence = logsumexp(log_terms)
    post = {s: np.exp(logsumexp(log_terms[np.array(starts) == s]) - evidence) for s in set(starts)}
    return evidence, post


# ---------------------------------------------------------------------------------------------
# closed forms and limiting cases
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hazard", [0.1, 0.4])
def test_exact_bocd_equals_brute_force_enumeration(hazard):
    """Fact 12: K = ∞ RL-PR on a linear-Gaussian model = enumeration of all 2^(T−1) segmentations
    (run-length posterior and log evidence). The first segment appears twice in the recursion (the
    growth of the empty initial hypothesis, run length T, and the changepoint at the first row, run
    length T − 1), with identical beliefs: their weights add up to the brute force's."""
    X, y = _linear_stream()
    T = len(y)
    bocd = BOCDRegressor(_linear_base(), hazard=hazard, n_hypotheses=None).fit(X, y)
    mu0 = bocd.estimator_._reference.mean.numpy()
    evidence, post = _brute_force(X, y, mu0, hazard)
    np.testing.assert_allclose(bocd.log_evidence_, evidence, rtol=1e-10)
    ours = {}
    for r, lp in zip(bocd.run_lengths_, bocd.runlength_log_posterior_):
        start = max(T - 1 - int(r), 0)  # run length r: the last segment began at row T − 1 − r (0-based)
        ours[start] = ours.get(start, 0.0) + np.exp(lp)
    assert set(ours) == set(post)
    for s in post:
        np.testing.assert_allclose(ours[s], post[s], rtol=1e-9, atol=1e-14)


def test_hazard_zero_is_the_base_filter():
    """Fact 13: all the mass on growth; the mixture is the base filter (predictions, belief, evidence)."""
    X, y = _linear_stream(T=30)
    base = _linear_base()
    bocd = BOCDRegressor(base, hazard=0.0, n_hypotheses=3).fit(X, y)
    plain = clone(base).fit(X, y)
    assert len(bocd.run_lengths_) == 1 and bocd.run_lengths_[0] == 30
    np.testing.assert_allclose(bocd.estimator_.posterior_.mean.numpy()[0], plain.posterior_.mean.numpy(),
                               rtol=1e-12, atol=1e-14)
    m1, s1 = bocd.predict(X, return_std=True)
    m2, s2 = plain.predict(X, return_std=True)
    np.testing.assert_allclose(m1, m2, rtol=1e-12)
    np.testing.assert_allclose(s1, s2, rtol=1e-12)
    # the log evidence is the sum of the one-step log predictive densities (fact 7, Q = 0: batch form)
    H = np.c_[X, np.ones(len(X))]
    mu0 = bocd.estimator_._reference.mean.numpy()
    np.testing.assert_allclose(bocd.log_evidence_, _segment_log_evidence(X, y, mu0), rtol=1e-10)
    assert H.shape[1] == 3


def test_hazard_one_resets_at_every_step():
    """Fact 14: each step starts from the prior and learns its own row only."""
    X, y = _linear_stream(T=12)
    bocd = BOCDRegressor(_linear_base(), hazard=1.0, n_hypotheses=2).fit(X, y)
    last = clone(_linear_base()).fit(X[-1:], y[-1:])
    assert bocd.run_lengths_.tolist() == [0]
    np.testing.assert_allclose(bocd.estimator_.posterior_.mean.numpy()[0], last.posterior_.mean.numpy(), rtol=1e-12)


def test_large_k_is_exact_and_weights_are_normalised():
    """Fact 15: K ≥ T + 1 = K = ∞; weights sum to one, run lengths unique."""
    X, y = _linear_stream(T=9)
    a = BOCDRegressor(_linear_base(), hazard=0.2, n_hypotheses=None).fit(X, y)
    b = BOCDRegressor(_linear_base(), hazard=0.2, n_hypotheses=10).fit(X, y)
    np.testing.assert_allclose(np.sort(a.run_lengths_), np.sort(b.run_lengths_))
    assert a.log_evidence_ == pytest.approx(b.log_evidence_, rel=1e-12)
    c = BOCDRegressor(_linear_base(), hazard=0.2, n_hypotheses=3).fit(X, y)
    for est in (a, c):
        assert np.exp(est.runlength_log_posterior_).sum() == pytest.approx(1.0, abs=1e-12)
        assert len(set(est.run_lengths_.tolist())) == len(est.run_lengths_)
    assert len(c.run_lengths_) == 3
    assert np.all(np.diff(c.runlength_log_posterior_) <= 0)  # most probable first


def test_rl1_pr_is_the_argmax_rule():
    """Fact 16: RL[1]-PR resets iff p₀ π > p₁ (1 − π), step by step."""
    X, y = _linear_stream(T=25, seed=3)
    hazard = 0.3
    est = BOCDRegressor(_linear_base(), hazard=hazard, n_hypotheses=1)
    est.partial_fit(X[:1], y[:1])
    for t in range(1, 25):
        inner = est.estimator_
        mean, std = inner.predict(X[t:t + 1], return_std=True)  # continuation predictive
        p1 = multivariate_normal(mean[0], std[0] ** 2).logpdf(y[t])
        H = np.r_[X[t], 1.0]
        mu0 = inner._reference.mean.numpy()
        p0 = multivariate_normal(H @ mu0, PRIOR_VAR * H @ H + NOISE).logpdf(y[t])
        before = est.run_lengths_[0]
        est.partial_fit(X[t:t + 1], y[t:t + 1])
        reset = p0 + np.log(hazard) > p1 + np.log1p(-hazard)
        assert est.run_lengths_[0] == (0 if reset else before + 1)


def test_oupr_limits():
    """Fact 17: π = 0 → the base filter; π = 1 or ε = 1 → always reset; ε = 0 → never reset."""
    X, y = _linear_stream(T=20, seed=1)
    plain = clone(_linear_base()).fit(X, y)
    ou0 = BOCDRegressor(_linear_base(), hazard=0.0, n_hypotheses=1, reset="ou").fit(X, y)
    np.testing.assert_allclose(ou0.estimator_.posterior_.mean.numpy()[0], plain.posterior_.mean.numpy(),
                               rtol=1e-12, atol=1e-14)
    last = clone(_linear_base()).fit(X[-1:], y[-1:])
    for kw in (dict(hazard=1.0), dict(hazard=0.2, threshold=1.0)):
        ou = BOCDRegressor(_linear_base(), n_hypotheses=1, reset="ou", **kw).fit(X, y)
        assert ou.run_lengths_.tolist() == [0]
        np.testing.assert_allclose(ou.estimator_.posterior_.mean.numpy()[0], last.posterior_.mean.numpy(),
                                   rtol=1e-12)
    never = BOCDRegressor(_linear_base(), hazard=0.3, n_hypotheses=1, reset="ou", threshold=0.0).fit(X, y)
    assert never.run_lengths_.tolist() == [20]


def test_oupr_step_is_the_ou_shrink_with_nu_from_eq_3_58():
    """Fact 18 and Alg. 10: ν = σ(log p₁ − log p₀ + logit(1 − π)); prior μ̄ = ν μ + (1 − ν) μ₀,
    Σ̄ = ν² Σ + (1 − ν²) Σ₀, then the Kalman update with the row."""
    X, y = _linear_stream(T=10, seed=2)
    hazard = 0.2
    est = BOCDRegressor(_linear_base(), hazard=hazard, n_hypotheses=1, reset="ou", threshold=0.01)
    est.partial_fit(X[:9], y[:9])
    inner = est.estimator_
    mu = inner.posterior_.mean.numpy()[0]
    Sigma = inner.posterior_.covariance().numpy()[0]
    mu0 = inner._reference.mean.numpy()
    H = np.r_[X[9], 1.0]
    p1 = multivariate_normal(H @ mu, H @ Sigma @ H + NOISE).logpdf(y[9])
    p0 = multivariate_normal(H @ mu0, PRIOR_VAR * H @ H + NOISE).logpdf(y[9])
    nu = expit(p1 - p0 + np.log((1 - hazard) / hazard))
    m = nu * mu + (1 - nu) * mu0
    S = nu ** 2 * Sigma + (1 - nu ** 2) * PRIOR_VAR * np.eye(3)
    K = S @ H / (H @ S @ H + NOISE)
    m_new = m + K * (y[9] - H @ m)
    est.partial_fit(X[9:], y[9:])
    assert est.changepoint_probability_ == pytest.approx(1 - nu, rel=1e-10)
    np.testing.assert_allclose(est.estimator_.posterior_.mean.numpy()[0], m_new, rtol=1e-10)


def test_mmpr_with_one_hypothesis_resets_iff_hazard_above_half():
    """Fact 21: with K = 1 and normalised weights the moment-matched prior is the previous posterior,
    so the changepoint and growth candidates predict alike and the reset wins iff π > 1/2."""
    X, y = _linear_stream(T=15, seed=4)
    low = BOCDRegressor(_linear_base(), hazard=0.4, n_hypotheses=1, reset="moment-matched").fit(X, y)
    high = BOCDRegressor(_linear_base(), hazard=0.6, n_hypotheses=1, reset="moment-matched").fit(X, y)
    assert low.run_lengths_.tolist() == [15] and high.run_lengths_.tolist() == [0]
    # the same belief either way (the reset starts from the matched previous posterior)
    np.testing.assert_allclose(low.estimator_.posterior_.mean.numpy(), high.estimator_.posterior_.mean.numpy(),
                               rtol=1e-10)


def test_prequential_predictions_do_not_look_ahead_and_match_partial_fit():
    """Fact 23: the prediction of row t depends on rows < t only; it is the mixture's prediction
    after learning rows < t."""
    X, y = _linear_stream(T=20, seed=5)
    est = BOCDRegressor(_linear_base(), hazard=0.1, n_hypotheses=4)
    pred, std = est.prequential_fit_predict(X, y, return_std=True)
    y2 = y.copy()
    y2[12] += 100.0
    pred2 = BOCDRegressor(_linear_base(), hazard=0.1, n_hypotheses=4).prequential_fit_predict(X, y2)
    np.testing.assert_array_equal(pred[:13], pred2[:13])
    step = BOCDRegressor(_linear_base(), hazard=0.1, n_hypotheses=4).partial_fit(X[:12], y[:12])
    m, s = step.predict(X[12:13], return_std=True)
    np.testing.assert_allclose([pred[12], std[12]], [m[0], s[0]], rtol=1e-10)


def test_log_space_is_stable_on_long_streams_and_extreme_rows():
    """Fact 24: no NaN/inf over a long stream with a gross outlier."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 1))
    y = X[:, 0] + 0.1 * rng.normal(size=3000)
    y[1500] = 1e6
    est = BOCDRegressor(_linear_base(), hazard=0.001, n_hypotheses=3).fit(X, y)
    assert np.all(np.isfinite(est.runlength_log_posterior_)) and np.isfinite(est.log_evidence_)
    assert np.isfinite(est.predict(X[:5])).all()


# ---------------------------------------------------------------------------------------------
# composition: every structure, likelihood and wrapper; mixture predictions
# ---------------------------------------------------------------------------------------------
_SMALL = dict(hidden_layer_sizes=(5,), random_state=0)
_REGRESSORS = {
    "ekf-full": lambda: EKFRegressor(**_SMALL),
    "ekf-vd": lambda: EKFRegressor(covariance="vd", **_SMALL),
    "ekf-fd": lambda: EKFRegressor(covariance="fd", **_SMALL),
    "lofi": lambda: LoFiRegressor(rank=3, **_SMALL),
    "lofi-spherical": lambda: LoFiRegressor(rank=3, variant="spherical", **_SMALL),
    "poisson": lambda: EKFRegressor(likelihood="poisson", **_SMALL),
    "wolf-lofi": lambda: WoLFRegressor(LoFiRegressor(rank=3, **_SMALL)),
}
_MM_SUPPORTED = {"ekf-full", "ekf-vd", "ekf-fd", "poisson"}


def _jump_stream(n=80, poisson=False, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    sign = np.where(np.arange(n) < n // 2, 1.0, -1.0)
    f = sign * np.sin(X[:, 0]) + 0.3 * X[:, 1]
    y = rng.poisson(np.exp(0.5 * f)).astype(float) if poisson else f + 0.1 * rng.normal(size=n)
    return X, y


@pytest.mark.parametrize("reset", ["prior", "moment-matched", "ou", "cpp-ou"])
@pytest.mark.parametrize("name", list(_REGRESSORS))
def test_every_structure_likelihood_and_wrapper(name, reset):
    if reset == "moment-matched" and name not in _MM_SUPPORTED:
        with pytest.raises(NotImplementedError, match="moment"):
            BOCDRegressor(_REGRESSORS[name](), reset=reset).fit(*_jump_stream(poisson=name == "poisson"))
        return
    X, y = _jump_stream(poisson=name == "poisson")
    k = 1 if reset in ("ou", "cpp-ou") else 4
    est = BOCDRegressor(_REGRESSORS[name](), hazard=0.05, n_hypotheses=k, reset=reset).fit(X, y)
    mean, std = est.predict(X[:6], return_std=True)
    assert mean.shape == (6,) and np.all(np.isfinite(std)) and np.all(std > 0)
    assert est.sample_y(X[:3], n_samples=4, random_state=0).shape == (3, 4)
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict(X[:6]), mean)
    again.partial_fit(X[:5], y[:5])
    assert again.n_samples_seen_ == len(y) + 5
    assert 0.0 <= est.changepoint_probability_ <= 1.0


def test_hazard_zero_over_lofi_and_wolf_is_the_base():
    X, y = _jump_stream()
    for base in (LoFiRegressor(rank=3, **_SMALL), WoLFRegressor(EKFRegressor(**_SMALL), threshold=2.0)):
        bocd = BOCDRegressor(base, hazard=0.0, n_hypotheses=2).fit(X, y)
        plain = clone(base).fit(X, y)
        np.testing.assert_allclose(bocd.predict(X[:10]), plain.predict(X[:10]), rtol=1e-9, atol=1e-10)


def test_mixture_predictive_moments_and_sampling():
    """The mixture's mean and variance from the hypotheses' (law of total variance), and sample_y
    draws hypotheses by their weights."""
    X, y = _linear_stream(T=40, seed=6)
    est = BOCDRegressor(_linear_base(), hazard=0.2, n_hypotheses=4).fit(X, y)
    inner = est.estimator_
    w = np.exp(est.runlength_log_posterior_)
    assert len(w) > 1
    mean, std = est.predict(X[:3], return_std=True)
    H = np.c_[X[:3], np.ones(3)]
    mus, covs = inner.posterior_.mean.numpy(), inner.posterior_.covariance().numpy()
    m_k = H @ mus.T  # (3, K)
    v_k = np.einsum("nd,kde,ne->nk", H, covs, H) + NOISE
    m = m_k @ w
    v = (v_k + m_k ** 2) @ w - m ** 2
    np.testing.assert_allclose(mean, m, rtol=1e-10)
    np.testing.assert_allclose(std, np.sqrt(v), rtol=1e-10)
    draws = est.sample_y(X[:1], n_samples=20000, random_state=0)[0]
    assert abs(draws.mean() - m[0]) < 4 * np.sqrt(v[0] / 20000)
    assert abs(draws.var() / v[0] - 1) < 0.05


def test_classifier_adapts_to_a_flipped_boundary():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1200, 2))
    w = np.where(np.arange(1200) < 1000, 1.0, -1.0)
    y = (w * (X[:, 0] + X[:, 1]) > 0).astype(int)
    base = EKFClassifier(hidden_layer_sizes=(), random_state=0)
    plain = clone(base).prequential_fit_predict(X, y)
    labels = BOCDClassifier(base, hazard=0.01).prequential_fit_predict(X, y)
    after = slice(1020, 1200)  # one-step-ahead accuracy after the flip
    assert (labels[after] == y[after]).mean() > 0.9 > (plain[after] == y[after]).mean() + 0.2
    bocd = BOCDClassifier(base, hazard=0.01).fit(X, y)
    np.testing.assert_allclose(bocd.predict_proba(X[:5]).sum(1), 1.0)
    assert 950 <= 1200 - bocd.map_run_length_ <= 1030  # the last regime began near row 1000


def test_three_classes_and_lofi_classifier():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 2))
    y = np.digitize(X[:, 0], [-0.5, 0.5])
    y[150:] = 2 - y[150:]
    clf = BOCDClassifier(LoFiClassifier(hidden_layer_sizes=(8,), rank=3, random_state=0), hazard=0.02,
                         n_hypotheses=3).fit(X, y)
    assert clf.predict_proba(X[:4]).shape == (4, 3)
    assert (clf.predict(X[250:]) == y[250:]).mean() > 0.7


def test_bad_parameters_and_input_leave_it_unchanged():
    X, y = _linear_stream(T=10)
    with pytest.raises(ValueError, match="hazard"):
        BOCDRegressor(_linear_base(), hazard=1.5).fit(X, y)
    with pytest.raises(ValueError, match="n_hypotheses=1"):
        BOCDRegressor(_linear_base(), reset="ou").fit(X, y)
    with pytest.raises(ValueError, match="reset"):
        BOCDRegressor(_linear_base(), reset="sometimes").fit(X, y)
    est = BOCDRegressor(_linear_base(), n_hypotheses=3).fit(X, y)
    before = (est.run_lengths_.copy(), est.runlength_log_posterior_.copy(), est.log_evidence_)
    with pytest.raises(ValueError):
        est.partial_fit(X[:, :1], y)
    with pytest.raises(ValueError):
        est.partial_fit(X, np.full(len(y), np.nan))
    np.testing.assert_array_equal(est.run_lengths_, before[0])
    np.testing.assert_array_equal(est.runlength_log_posterior_, before[1])
    assert est.log_evidence_ == before[2]
    est.partial_fit(X, y)  # still learns


def test_batched_hypotheses_cost_one_update():
    """On the torch engine the K hypotheses go through one filter_step: the adapter is linearised
    once per step (the compiled run-length kernel, which serves this filter when the kernels are on,
    has its own tests: tests/test_runlength_kernels.py)."""
    from skfilter import runlength
    from skfilter.kernels import compiled_kernels

    X, y = _linear_stream(T=6)
    est = BOCDRegressor(_linear_base(), hazard=0.1, n_hypotheses=5)
    calls = []
    original = runlength.filter_step

    def counting(*args, **kwargs):
        calls.append(args[1].belief.mean.shape)
        return original(*args, **kwargs)

    runlength.filter_step = counting
    try:
        with compiled_kernels(False):
            est.fit(X, y)
    finally:
        runlength.filter_step = original
    assert len(calls) == 6
    assert calls[-1][0] == 6  # 5 kept + the changepoint candidate, in one call


@parametrize_with_checks([BOCDRegressor(EKFRegressor(hidden_layer_sizes=(4,), random_state=0), n_hypotheses=3),
                          BOCDRegressor(LoFiRegressor(random_state=0), reset="ou", n_hypotheses=1),
                          BOCDClassifier(EKFClassifier(hidden_layer_sizes=(4,), random_state=0), n_hypotheses=3),
                          BOCDClassifier(LoFiClassifier(random_state=0))],
                         expected_failed_checks=lambda est: {
                             "check_sample_weight_equivalence_on_dense_data": (
                                 "as for the base filters (tests/test_sklearn_compat.py): a weight scales one "
                                 "linearised update; repeated rows re-linearise and are separate time steps")})
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_torch_state_is_on_the_estimator_device():
    X, y = _linear_stream(T=8)
    est = BOCDRegressor(_linear_base(), n_hypotheses=2).fit(X, y)
    assert est.runlength_state_.filter.log_weights.dtype == torch.float64


def test_cpp_ou_picks_the_best_rate_and_upsilon_one_is_the_base():
    """CPP-OU (eq. 3.14, 3.45): on a stationary stream it keeps υ = 1 (the base filter); after a
    jump it shrinks (υ < 1) and predicts the new regime sooner than the base."""
    from skfilter.runlength import CPP_GRID

    X, y = _linear_stream(T=30, jump=False)
    est = BOCDRegressor(_linear_base(), reset="cpp-ou", n_hypotheses=1).fit(X, y)
    plain = clone(_linear_base()).fit(X, y)
    assert CPP_GRID[0] == 1.0
    rng = np.random.default_rng(0)
    X2 = rng.normal(size=(400, 2))
    y2 = np.where(np.arange(400) < 200, 1.0, -1.0) * X2.sum(1) + 0.3 * rng.normal(size=400)
    cpp = BOCDRegressor(_linear_base(), reset="cpp-ou", n_hypotheses=1).prequential_fit_predict(X2, y2)
    base = clone(_linear_base()).prequential_fit_predict(X2, y2)
    after = slice(210, 260)
    assert np.mean((cpp[after] - y2[after]) ** 2) < 0.5 * np.mean((base[after] - y2[after]) ** 2)
    assert est.changepoint_probability_ < 0.05
    assert np.isfinite(plain.predict(X[:2])).all()


def test_partial_fit_after_changing_the_base_raises():
    """A run-length mixture whose base estimator changed (``set_params(estimator=…)`` or
    ``estimator__…``) since the stream began raises on partial_fit and keeps its state; hazard,
    threshold and the like may change between calls."""
    X, y = _linear_stream(T=20)
    bocd = BOCDRegressor(WoLFRegressor(_linear_base()), hazard=0.1, n_hypotheses=3).fit(X, y)
    state = bocd.runlength_state_
    for change in ({"estimator": _linear_base()}, {"estimator__estimator__prior_variance": 2.0},
                   {"estimator__threshold": 3.0}):
        est = clone(bocd).fit(X, y)
        before = est.runlength_state_
        est.set_params(**change)
        with pytest.raises(ValueError, match="changed"):
            est.partial_fit(X, y)
        assert est.runlength_state_ is before
    bocd.set_params(hazard=0.2).partial_fit(X, y)
    assert bocd.n_samples_seen_ == 40 and bocd.runlength_state_ is not state
    pickle.loads(pickle.dumps(bocd)).partial_fit(X, y)


def test_every_reset_rule_restarts_from_the_reference_itself():
    """Alg. 8's ℓ₀ and Alg. 10's p₀ use (μ₀, Σ₀): with the base's process noise, 'always reset'
    under 'prior' (hazard 1) and under 'ou' (threshold 1) give the same belief (the dynamics move
    continuing hypotheses only)."""
    X, y = _linear_stream(T=12)
    base = _linear_base(process_noise=0.5)
    a = BOCDRegressor(base, hazard=1.0, n_hypotheses=1).fit(X, y)
    b = BOCDRegressor(base, hazard=0.3, n_hypotheses=1, reset="ou", threshold=1.0).fit(X, y)
    np.testing.assert_allclose(a.estimator_.posterior_.mean.numpy(), b.estimator_.posterior_.mean.numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(a.estimator_.posterior_.covariance().numpy(),
                               b.estimator_.posterior_.covariance().numpy(), rtol=1e-12)


def test_mixture_variance_has_no_cancellation_in_float32():
    """Two hypotheses with large equal means: the mixture keeps their epistemic variance."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 1))
    y = 1e4 + X[:, 0] + 0.01 * rng.normal(size=60)
    base = EKFRegressor(hidden_layer_sizes=(), dtype="float32", random_state=0)
    est = BOCDRegressor(base, hazard=0.3, n_hypotheses=3).fit(X, y)
    _, epi = est.predict(X[:3], return_std=True, include_noise=False)
    assert np.all(epi > 0)


def test_weighted_evidence_keeps_outliers_from_opening_regimes():
    """BOCD over WoLF: scored with R / W² (default) the outliers the weights discount do not look
    like changepoints; scored with R (evidence='plain') most of them do (spec/wolf §6.19)."""
    rng = np.random.default_rng(0)
    T = 300
    X = rng.normal(size=(T, 2))
    y = X.sum(1) + 0.1 * rng.normal(size=T)
    out = rng.uniform(size=T) < 0.05
    y[out] += rng.choice([-30.0, 30.0], size=out.sum())
    base = WoLFRegressor(EKFRegressor(hidden_layer_sizes=(), prior_variance=1.0, obs_variance=0.01,
                                      random_state=0), weighting="md", threshold=4.0)

    def n_changepoints(evidence):
        est = BOCDRegressor(base, hazard=0.01, n_hypotheses=5, evidence=evidence)
        count = 0
        for t in range(T):
            est.partial_fit(X[t:t + 1], y[t:t + 1])
            count += est.changepoint_probability_ > 0.5
        return count

    weighted, plain = n_changepoints("weighted"), n_changepoints("plain")
    assert weighted <= 2 < out.sum() // 2 <= plain
    # without weights the two are the same
    a = BOCDRegressor(_linear_base(), hazard=0.1, n_hypotheses=3, evidence="plain").fit(*_linear_stream())
    b = BOCDRegressor(_linear_base(), hazard=0.1, n_hypotheses=3).fit(*_linear_stream())
    assert a.log_evidence_ == b.log_evidence_
