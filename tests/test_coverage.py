"""Honest uncertainty (issue 15): why LoFi's ±2σ band can be narrow, on the 1-D toy of the report.

The toy: ``y = sin(x) + σ ε``, ``x ~ U[−2, 2]``, a one-hidden-layer ReLU MLP (``P = 151`` for the
default 50 units, ``P = 61`` for 20). What was measured (doc/user_guide.md, "Why LoFi's band can be
narrow"):

* **defect — the ``'auto'`` noise estimate** took the whole prior-predictive residual of a row as
  noise. At an input far from the data the residual is almost all epistemic (``J Σ⁻ Jᵀ`` is ~10¹⁰
  times the noise at ``x = 1e5``, the squared residual 10⁸–10¹⁰ times): one such row multiplied
  ``r̂`` by 10⁶–10⁹ and the predictive std at ``x = 2`` by 10³–10⁴ (0.14 → 144 … 0.22 → 2321 over
  four seeds), for hundreds of rows. Fixed by a bounded influence per row on the estimate carried
  to later rows (``Gaussian(residual_bound=4)``): it grows by ``×(1 + 15 ε)`` (×1.3) at most, while
  the row's own update is still whitened with its whole residual.
* **not a defect — the algebra**: the estimator's belief equals a dense NumPy implementation of the
  spec's Alg. 2/3 to 1e-7, and LoFi with ``rank ≥ P`` gives the full EKF's band to 1e-10.
* **inherent — the truncation** keeps the diagonal of the information of the rows exactly (eq. 39)
  and drops the rest: at held-out inputs LoFi's epistemic variance differs from the exact posterior
  variance of the same linearised rows (×0.5–0.7 with few rows and small noise, ×1.0–2.0 with many).
* **inherent — one linearised pass**: the band is the spread of the filter's own Gaussian belief; the
  error of the one-pass mean is not in it. With few rows and small noise that error dominates, for
  the full EKF as much as for LoFi, and the exact variance of the same rows does not restore the
  coverage.
* **inherent — the far row's effect at fixed noise** comes from the mean it moves (the Jacobian at
  ``x = 2`` is re-evaluated at a new mean), not from the covariance update, for the full EKF too.

Every configuration below was checked to be numerically stable: a relative perturbation of ±1e-12
of the targets changes the reported std by < 1e-9 (6.9e-5 for rank = P at σ = 0.02, where only
quantities of one trajectory are compared). Some others are not, for the full EKF as well: at
``prior_variance=1``, ``obs_variance=0.01`` (or ``obs_variance=4e-4`` on some seeds) rounding
differences grow to O(1) within ~50 rows, the EKF against itself with targets × (1 + 1e-13)
included, so LoFi(rank ≥ P) is compared with the EKF only where both are stable.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from skfilter import EKFRegressor, LoFiRegressor
from skfilter.likelihoods import Gaussian


def _sine(n, seed, noise=0.1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(n, 1))
    return X, np.sin(X[:, 0]) + noise * rng.normal(size=n)


def _jacobian(est, theta, X):
    f, J = est._adapter.forward_jacobian(torch.as_tensor(theta), torch.as_tensor(X, dtype=torch.float64))
    return f.numpy()[:, 0], J.numpy()[:, 0, :]


def _fit_recording_jacobians(est, X, y):
    """Fit ``est`` on ``(X, y)`` row by row in one pass and return the Jacobian of every row at the
    mean the filter linearised it at, ``(n, P)`` (the first row at the prior mean). ``est`` must have
    its prior fixed by the first row (``n_prior_rows=1``, or a prior that uses no data): with more
    prior rows the second call would set the prior again and learn row 0 again, on a new adapter
    (issue 29), and the rows recorded would not be one pass from one prior."""
    est.partial_fit(X[:1], y[:1])
    assert not est._prior_pending
    _, J0 = _jacobian(est, est._reference.mean, X[:1])
    rows = [J0]
    adapter = est._adapter
    forward_jacobian = adapter.forward_jacobian

    def recording(theta, Xb):
        f, J = forward_jacobian(theta, Xb)
        rows.append(np.asarray(J)[:, 0, :].copy())
        return f, J

    adapter.forward_jacobian = recording
    try:
        est.partial_fit(X[1:], y[1:])
    finally:
        del adapter.forward_jacobian
    return np.concatenate(rows)


def _exact_information(est, jacobians, r):
    """The precision of the exact Gaussian posterior given the same linearised rows:
    ``Σ₀⁻¹ + Σ_t J_tᵀ J_t / r`` (static dynamics)."""
    v0 = est._reference.variance
    v0 = v0.numpy() if torch.is_tensor(v0) else np.full(est.n_params_, float(v0))
    return np.diag(1.0 / v0) + jacobians.T @ jacobians / r


# --------------------------------------------------------------------------------------------------
# defect: one far input row and the 'auto' noise estimate
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", [LoFiRegressor, EKFRegressor])
@pytest.mark.parametrize("seed", [0, 2])
def test_one_far_input_row_does_not_blow_up_the_default_band(cls, seed):
    """Before: r̂ ×1.5e6 / ×4e8 and the std at x = 2 ×1000 / ×10000 (LoFi, seeds 0 / 2) after one
    row at x = 1e5. After: r̂ ×1.3 at most (one row's bounded influence), the std within ×1.2."""
    X, y = _sine(300, seed)
    # the prior set from all 300 rows of the fit (n_prior_rows=300), as before issue 29, where the
    # figures were measured: this test is about the noise estimate, not the prior's rows. (With the
    # default 50 prior rows the far row moves the mean, hence the band at x = 2, further on seed 2:
    # std ×1.55 (LoFi) / ×1.30 (EKF) — the fixed-noise effect of the last test below, while r̂
    # stays bounded.)
    est = cls(n_prior_rows=300, random_state=seed).fit(X, y)
    _, std_before = est.predict([[2.0]], return_std=True)
    r_before = est.obs_variance_.copy()
    est.partial_fit([[1e5]], [np.sin(1e5)])
    _, std_after = est.predict([[2.0]], return_std=True)
    assert np.all(est.obs_variance_ <= r_before * (1 + 15 * 0.02) * (1 + 1e-12))
    # within ×2.5: the default MLP clips standardised inputs to ±5 (skfilter.priors), so the far row
    # is learned as a row at the edge of the data, whose target moves the mean a little (×1.28 on
    # seed 0 with EKF, ×1.9 on seed 2 with LoFi); before the noise estimate was bounded this was ×1000 / ×10000
    assert std_after[0] < 2.5 * std_before[0]
    # the band after 100 more in-range rows is that of a twin that never saw the far row (within 20 %)
    twin = cls(n_prior_rows=300, random_state=seed).fit(X, y)
    X2, y2 = _sine(100, seed + 10)
    est.partial_fit(X2, y2)
    twin.partial_fit(X2, y2)
    Xte = np.linspace(-2.0, 2.0, 41)[:, None]
    ratio = est.predict(Xte, return_std=True)[1] / twin.predict(Xte, return_std=True)[1]
    assert 0.8 <= np.median(ratio) <= 1.2


@pytest.mark.parametrize("y_far", [0.0, 1e3])
def test_one_outlying_target_moves_the_default_noise_estimate_boundedly(y_far):
    """A gross target error in range (y = 1e3 at x = 0) is bounded the same way."""
    X, y = _sine(300, 0)
    est = LoFiRegressor(random_state=0).fit(X, y)
    r_before = est.obs_variance_.copy()
    est.partial_fit([[0.0] if y_far else [1e5]], [y_far])
    assert np.all(est.obs_variance_ <= r_before * 1.3 * (1 + 1e-12))


def test_gross_target_moves_the_mean_boundedly_and_learning_goes_on():
    """y = −1e11 at an ordinary input: the row is whitened with the estimate that holds its whole
    residual (C.2: r̂_t serves step t), so it moves the mean by a bounded amount; the estimate
    carried on grows by ``×(1 + 15 ε)`` at most, and the next ordinary rows are learned as usual. (Bounding the
    whitening too would fit the mean to −1e11 and break the next step.)"""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=30)
    # n_prior_rows=20: the prior is fixed by the 20 rows of the fit, so the gross row is learned by
    # the filter. (With the default 50 the stream is still in its start: the row would join the rows
    # that set the prior — the targets' scale and the first noise estimate from a target of −1e11 —
    # by design, issue 29; this test is about a gross row after that.)
    est = EKFRegressor(hidden_layer_sizes=(3,), n_prior_rows=20, random_state=0).fit(X[:20], y[:20])
    assert not est._prior_pending
    r_before = est.obs_variance_.copy()
    est.partial_fit([[0.0, 0.0]], [-1e11])
    assert np.all(est.obs_variance_ <= r_before * (1 + 15 / 31) * (1 + 1e-12))  # ε = 1/(10 + 21)
    assert np.all(np.abs(est.predict(X)) < 1e3)
    est.partial_fit(X[20:], y[20:])
    mean, std = est.predict(X, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std)) and np.all(std < 5.0)


def _state(r, weight, K=None):
    r = torch.as_tensor(r, dtype=torch.float64)
    w = torch.tensor(float(weight), dtype=torch.float64)
    if K is not None:
        r, w = r.expand(K, *r.shape).clone(), w.expand(K).clone()
    return {"r": r, "weight": w, "scale": r.rsqrt()[..., None]}


def test_residual_bound_caps_the_influence_of_one_row():
    """``min(d, b² r̂)``: one row moves r̂ by ``×(1 + ε (b² − 1))`` at most; below the bound the
    estimate is the plain one, bit for bit."""
    bounded = Gaussian("adaptive", eps_min=0.02, residual_bound=4.0)
    plain = Gaussian("adaptive", eps_min=0.02)
    state = _state([2.0], 100.0)  # ε = max(0.02, 1/101) = 0.02
    f = torch.zeros(1, 1, dtype=torch.float64)
    huge = torch.full((1, 1), 1e4, dtype=torch.float64)
    after = bounded.next_state(state, f, huge, None)
    assert float(after["r"][0]) == pytest.approx(2.0 * (0.98 + 0.02 * 16))
    assert float(plain.next_state(state, f, huge, None)["r"][0]) == pytest.approx(2.0 * 0.98 + 0.02 * 1e8)
    # the row's own update is whitened with the estimate that holds its whole residual (as before)
    assert torch.equal(after["scale"], plain.next_state(state, f, huge, None)["scale"])
    lik_before = bounded.log_det_whitening(f, plain.next_state(state, f, huge, None))
    assert torch.equal(bounded.log_det_whitening(f, after), lik_before)
    small = torch.full((1, 1), 3.0, dtype=torch.float64)  # 9 < 16 · 2
    assert torch.equal(bounded.next_state(state, f, small, None)["r"], plain.next_state(state, f, small, None)["r"])
    # several rows in one step and a hypotheses axis: each row bounded by the r̂ the step starts from
    state_k = _state([2.0, 2.0], 100.0, K=3)
    f3 = torch.zeros(3, 4, 2, dtype=torch.float64)
    Y3 = torch.full((3, 4, 2), 1e4, dtype=torch.float64)
    r3 = bounded.next_state(state_k, f3, Y3, None)["r"]
    eps = np.maximum(0.02, 1.0 / (100.0 + np.arange(1, 5)))
    expected = 2.0
    for e in eps:
        expected = (1 - e) * expected + e * 32.0
    assert r3.shape == (3, 2)
    assert torch.allclose(r3, torch.full((3, 2), expected, dtype=torch.float64), rtol=1e-12)


def test_residual_bound_is_inactive_on_gaussian_residuals():
    """On N(0, s²) residuals the bounded and plain estimates agree (bias E[min(χ², 16)] − 1 = −1.2e−4)."""
    rng = np.random.default_rng(0)
    bounded = Gaussian("adaptive", eps_min=0.02, residual_bound=4.0)
    plain = Gaussian("adaptive", eps_min=0.02)
    a = b = _state([0.25], 10.0)
    f = torch.zeros(1, 1, dtype=torch.float64)
    for e in 0.5 * rng.normal(size=3000):
        Y = torch.full((1, 1), float(e), dtype=torch.float64)
        a, b = bounded.next_state(a, f, Y, None), plain.next_state(b, f, Y, None)
    assert float(a["r"][0]) == pytest.approx(float(b["r"][0]), rel=0.02)
    assert float(a["r"][0]) == pytest.approx(0.25, rel=0.25)


def test_robust_and_fixed_noise_are_unchanged_by_the_bound():
    """The bound belongs to 'auto' only: 'robust' keeps its redescending weights, 'adaptive' is the
    paper's running mean, a fixed variance stays fixed."""
    X, y = _sine(50, 0)
    for ov in ("robust", "adaptive", 0.01):
        est = LoFiRegressor(hidden_layer_sizes=(10,), obs_variance=ov, random_state=0).fit(X, y)
        assert est._likelihood.residual_bound is None
    assert LoFiRegressor(random_state=0).fit(X, y)._likelihood.residual_bound == 4.0


# --------------------------------------------------------------------------------------------------
# not a defect: the algebra
# --------------------------------------------------------------------------------------------------

def test_full_rank_lofi_band_is_the_full_ekf_band():
    """rank ≥ P: no truncation ever happens, and the whole predictive (mean, epistemic and total
    std) is the full-covariance EKF's (measured: 1.3e−12 in the mean, 1.3e−11 in the std)."""
    X, y = _sine(200, 0)
    kw = dict(hidden_layer_sizes=(20,), obs_variance=0.01, random_state=0)
    lofi = LoFiRegressor(rank=61, **kw).fit(X, y)
    ekf = EKFRegressor(**kw).fit(X, y)
    assert lofi.n_params_ == 61
    Xte = np.linspace(-2.0, 2.0, 41)[:, None]
    for include_noise in (True, False):
        m1, s1 = lofi.predict(Xte, return_std=True, include_noise=include_noise)
        m2, s2 = ekf.predict(Xte, return_std=True, include_noise=include_noise)
        np.testing.assert_allclose(m1, m2, rtol=0, atol=1e-8)
        np.testing.assert_allclose(s1, s2, rtol=1e-7)


def test_lofi_belief_is_the_dense_spec_update():
    """The estimator's belief after 200 rows equals Alg. 3 written densely (W̃ = [W, h], mean from the
    untruncated precision, top-L SVD, dropped mass on the diagonal, eq. 36–39) along the same rows,
    and its linearised predictive variance equals ``J Σ Jᵀ`` of that dense belief."""
    X, y = _sine(200, 1, noise=0.02)
    r, L = 4e-4, 10
    est = LoFiRegressor(obs_variance=r, rank=L, random_state=1).fit(X, y)
    mu = est._reference.mean.numpy().copy()
    ups = 1.0 / est._reference.variance.numpy()
    W = np.zeros((mu.size, L))
    for t in range(len(y)):
        f, J = _jacobian(est, mu, X[t:t + 1])
        h, e = J[0] / np.sqrt(r), (y[t] - f[0]) / np.sqrt(r)
        Wt = np.concatenate([W, h[:, None]], axis=1)
        mu = mu + np.linalg.solve(np.diag(ups) + Wt @ Wt.T, h * e)
        U, s, _ = np.linalg.svd(Wt, full_matrices=False)
        W, ups = (U * s)[:, :L], ups + ((U * s)[:, L:] ** 2).sum(1)
    np.testing.assert_allclose(est.posterior_.mean.numpy(), mu, rtol=0, atol=1e-6)
    Sigma = np.linalg.inv(np.diag(ups) + W @ W.T)
    Xte = np.linspace(-2.0, 2.0, 21)[:, None]
    _, Jt = _jacobian(est, est.posterior_.mean, Xte)
    _, epi = est.predict(Xte, return_std=True, include_noise=False)
    np.testing.assert_allclose(epi ** 2, np.einsum("np,pq,nq->n", Jt, Sigma, Jt), rtol=1e-5)


# --------------------------------------------------------------------------------------------------
# inherent: the truncation, the one-pass linearised mean, the far row at fixed noise
# --------------------------------------------------------------------------------------------------

def test_truncation_keeps_the_diagonal_of_the_information_and_changes_the_band():
    """Few rows, small noise (σ = 0.02, 200 rows, r = σ², rank 10, P = 151). Along the filter's own
    linearisation points: ``diag(Υ + W Wᵀ)`` is the diagonal of the exact information of those rows
    (eq. 39/41: only off-diagonal information is dropped), and at held-out inputs LoFi's epistemic
    variance is a fraction of the exact posterior variance of the same rows (measured median ratio
    0.65, below 1 at 76 % of the inputs; seeds 1, 2: 0.51, 0.67). With rank ≥ P the ratio is 1."""
    X, y = _sine(200, 0, noise=0.02)
    r = 4e-4
    Xte = np.linspace(-1.95, 1.95, 79)[:, None]
    ratios = {}
    for L in (10, 151):
        # n_prior_rows=1: the prior of the first row, as the figures were measured (before issue 29 the
        # first call fixed it), and as _fit_recording_jacobians needs
        est = LoFiRegressor(obs_variance=r, rank=L, n_prior_rows=1, random_state=0)
        jac = _fit_recording_jacobians(est, X, y)
        info = _exact_information(est, jac, r)
        Sigma = est.posterior_.covariance().numpy()
        np.testing.assert_allclose(np.diag(np.linalg.inv(Sigma)), np.diag(info), rtol=1e-6)
        _, Jt = _jacobian(est, est.posterior_.mean, Xte)
        v = np.einsum("np,pq,nq->n", Jt, Sigma, Jt)
        v_exact = np.einsum("np,pq,nq->n", Jt, np.linalg.inv(info), Jt)
        ratios[L] = v / v_exact
    assert np.allclose(ratios[151], 1.0, rtol=1e-6)
    # 0.42 since a one-row prior scales its (constant) input by the pooled rule of skfilter.priors
    # (issue 29; 0.65 with the former scale max(|mean|, 1)): still a fraction of the exact variance
    assert 0.3 <= np.median(ratios[10]) <= 0.85
    assert np.mean(ratios[10] < 1.0) >= 0.6


def test_band_does_not_hold_the_error_of_the_one_pass_mean():
    """σ = 0.02, 200 rows, r = σ² (the true noise), 20 hidden units, seed 0. The filter's mean after
    one linearised pass is off by more than its own band says, for the full EKF as for LoFi:
    measured coverage of held-out targets 0.69 (LoFi, rank 10) and 0.83 (EKF); RMSE of the mean to
    sin(x) 0.053 (LoFi) and 0.023 (EKF) against median epistemic stds of 0.009 and 0.008. With the
    exact posterior variance of the same linearised rows (median std 0.009) LoFi still covers 0.69:
    the variance is not what is missing. The Monte-Carlo predictive (300 parameter draws through the
    network) is wider and covers 0.89."""
    X, y = _sine(200, 0, noise=0.02)
    Xte, yte = _sine(500, 99, noise=0.02)
    r = 4e-4
    kw = dict(hidden_layer_sizes=(20,), obs_variance=r, random_state=0)
    # the priors the figures were measured with (before issue 29 a prior was fixed by the first call):
    # LoFi learned row by row from the prior of the first row (n_prior_rows=1, which
    # _fit_recording_jacobians needs), the EKF and the Monte-Carlo LoFi from that of all 200 rows
    lofi = LoFiRegressor(rank=10, n_prior_rows=1, **kw)
    kw["n_prior_rows"] = len(X)
    jac = _fit_recording_jacobians(lofi, X, y)
    mean, std = lofi.predict(Xte, return_std=True)
    _, epi = lofi.predict(Xte, return_std=True, include_noise=False)
    cover = np.mean(np.abs(yte - mean) <= 2 * std)
    _, Jt = _jacobian(lofi, lofi.posterior_.mean, Xte)
    v_exact = np.einsum("np,pq,nq->n", Jt, np.linalg.inv(_exact_information(lofi, jac, r)), Jt)
    cover_exact_var = np.mean(np.abs(yte - mean) <= 2 * np.sqrt(v_exact + r))
    rmse_f = np.sqrt(np.mean((mean - np.sin(Xte[:, 0])) ** 2))
    ekf = EKFRegressor(**kw).fit(X, y)
    m_e, s_e = ekf.predict(Xte, return_std=True)
    cover_ekf = np.mean(np.abs(yte - m_e) <= 2 * s_e)
    mc = LoFiRegressor(rank=10, predictive="mc", n_mc_samples=300, **kw).fit(X, y)
    m_mc, s_mc = mc.predict(Xte, return_std=True)
    cover_mc = np.mean(np.abs(yte - m_mc) <= 2 * s_mc)
    assert 0.6 <= cover <= 0.8
    assert abs(cover_exact_var - cover) <= 0.03
    assert 0.75 <= cover_ekf <= 0.9
    assert rmse_f > 2.5 * np.median(epi)
    assert cover_mc > cover + 0.05


@pytest.mark.parametrize("cls, seed", [(LoFiRegressor, 1), (EKFRegressor, 3)])
def test_far_row_at_fixed_noise_moves_the_band_through_the_mean(cls, seed):
    """obs_variance fixed (0.01), 500 rows: one row at x = 1e5 takes the epistemic std at x = 2 from
    0.047 to 0.229 (LoFi, seed 1) and from 0.048 to 0.152 (full EKF, seed 3). The covariance update
    is not the cause: at the Jacobian of the old mean and at that of the new mean alike the new
    covariance gives a smaller variance than the old one. The new mean is: the row (with a residual
    ~10³ where the linearisation means nothing) moves it by O(1), and the Jacobian at x = 2,
    re-evaluated there, sees directions the rows in range never constrained."""
    X, y = _sine(500, seed)
    # the prior of all 500 rows (n_prior_rows=500), as the figures were measured before issue 29 (with
    # the default 50 the ratio is ×2.0 on both seeds: the effect is there, its size was measured here)
    est = cls(obs_variance=0.01, n_prior_rows=500, random_state=seed).fit(X, y)
    Sigma0, mu0 = est.posterior_.covariance().numpy(), est.posterior_.mean.numpy().copy()
    _, J0 = _jacobian(est, mu0, [[2.0]])
    _, epi0 = est.predict([[2.0]], return_std=True, include_noise=False)
    est.partial_fit([[1e5]], [np.sin(1e5)])
    Sigma1, mu1 = est.posterior_.covariance().numpy(), est.posterior_.mean.numpy()
    _, J1 = _jacobian(est, mu1, [[2.0]])
    _, epi1 = est.predict([[2.0]], return_std=True, include_noise=False)
    q = lambda J, S: float(np.sqrt(J[0] @ S @ J[0]))  # noqa: E731
    assert epi1[0] > 2.5 * epi0[0]
    assert epi1[0] == pytest.approx(q(J1, Sigma1), rel=1e-6)
    assert q(J0, Sigma1) <= q(J0, Sigma0) * (1 + 1e-9)
    assert q(J1, Sigma1) <= q(J1, Sigma0) * (1 + 1e-9)
    assert np.linalg.norm(mu1 - mu0) > 0.3
