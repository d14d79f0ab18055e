"""Numerically safe updates (issue 15): with a linear model and no process noise an update never
increases the predictive variance anywhere, even after rows with entries up to 1e8.

The streams mix entry magnitudes from 1e-3 (1e-8 in the property test) to 1e8 within a row, with an
observation variance of 1e-2, so a single row can shrink the variance along it by a factor 1e18 —
past what the plain update forms survive (the full covariance's ``Σ − VVᵀ`` lost positive
definiteness and failed the step; LoFi's ``I + W̃ᵀΥ⁻¹W̃`` stopped being numerically positive definite;
the block composite's ``S − Q_b`` cancelled). After every update, at a fixed set of probe inputs
``x`` (unit vectors, ordinary rows, the stream's own rows):

* the step succeeds and the belief is finite;
* the predictive variance ``x Σ xᵀ`` did not increase, up to a relative ``1e-9`` (float64; ``1e-4``
  float32) plus the rounding of the quadratic form in the structure's representation
  (``_rounding_scale``): ``P·eps·|x|ᵀ|Σ||x|`` for a covariance matrix (no covariance-form algorithm
  resolves a variance below that), the first-order rounding of LoFi's square-root evaluation,
  nothing for a diagonal;
* the variances are positive and a dense covariance is symmetric and positive semi-definite to
  rounding.

Oracles: the previous belief of the same stream (monotonicity), dense eigenvalues (definiteness),
and for the early steps of a well-conditioned stream the closed-form Bayesian linear regression.
LoFi keeps the guarantee where it has no truncation (rank ≥ P); with truncation the approximation
may move variance between directions (doc/algorithms.md), and only validity is tested.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skfilter import EKFRegressor, LoFiRegressor
from skfilter.posteriors import (BlockDiagonal, DiagonalCovariance, FullCovariance, LowRankPrecision,
                                  select_hypothesis, stack_beliefs)

PROPERTY = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

OBS_VARIANCE = 1e-2
REL_TOL = {torch.float64: 1e-9, torch.float32: 1e-4}


def _structure(kind, P):
    if kind == "full":
        return FullCovariance()
    if kind == "fd":
        return DiagonalCovariance("fd")
    if kind == "vd":
        return DiagonalCovariance("vd", vd_mean="exact")
    if kind == "vd-paper":
        return DiagonalCovariance("vd", vd_mean="paper")
    if kind == "lofi":
        return LowRankPrecision(rank=P + 1)
    if kind == "lofi-spherical":
        return LowRankPrecision(rank=P + 1, variant="spherical")
    if kind == "block-full":
        h = P // 2
        return BlockDiagonal({"a": (slice(0, h), FullCovariance()), "b": (slice(h, P), FullCovariance())})
    if kind == "block-mixed":
        h = P // 2
        return BlockDiagonal({"a": (slice(0, h), FullCovariance()), "b": (slice(h, P), DiagonalCovariance("fd"))})
    raise AssertionError(kind)


KINDS = ["full", "fd", "vd", "vd-paper", "lofi", "lofi-spherical", "block-full", "block-mixed"]


def _mixed_rows(rng, n, D, lo=-3.0, hi=8.0):
    """``n`` rows of ``D`` entries with log-uniform magnitudes in ``[10^lo, 10^hi]`` and random signs,
    plus a constant 1 (the bias of the linear model)."""
    mags = 10.0 ** rng.uniform(lo, hi, size=(n, D))
    return np.hstack([mags * rng.choice([-1.0, 1.0], size=(n, D)), np.ones((n, 1))])


def _covariance_blocks(structure, belief):
    """The dense covariance blocks a structure stores (covariance-form rounding), else ``None``."""
    if isinstance(structure, FullCovariance):
        return [(slice(None), belief.cov)]
    if isinstance(structure, BlockDiagonal):
        out = []
        for ix, s, b in zip(structure.indices, structure.structures, belief.blocks):
            out += [(ix, c) for _, c in (_covariance_blocks(s, b) or [])]
        return out
    return None


def _rounding_scale(structure, belief, X):
    """The rounding of the quadratic form ``x Σ xᵀ`` in the structure's representation, per probe:
    ``P·eps·|x|ᵀ|Σ||x|`` for a covariance matrix; for LoFi's precision factors, a square-root form,
    the first-order rounding of the whitened residual ``x Υ^(-1/2) − …`` whose squared norm is the
    value ``q``, ``2·eps·‖x Υ^(-1/2)‖·√q``, plus the squared relative rounding of the whitened factor
    ``(2·eps·‖Υ^(-1/2) W‖_F)²·q`` (both negligible in float64 at ordinary inputs; in float32 after
    rows of ``1e4`` the second is ``1e-4`` of the value); 0 for a diagonal."""
    eps = torch.finfo(X.dtype).eps
    if isinstance(structure, LowRankPrecision):
        ups = belief.diagonal
        norm2 = (belief.low_rank ** 2 / ups[..., None, :]).sum()
        q = _predictive(structure, belief, X).abs()
        xbar = (X * X / ups).sum(-1).sqrt()
        return 4 * eps * eps * norm2 * q + 2 * eps * xbar * q.sqrt()
    blocks = _covariance_blocks(structure, belief)
    out = torch.zeros(X.shape[0], dtype=X.dtype)
    if not blocks:
        return out
    for ix, cov in blocks:
        Xa = X[:, ix].abs()
        out += cov.shape[-1] * eps * ((Xa @ cov.abs()) * Xa).sum(-1)
    return out


def _predictive(structure, belief, X):
    return structure.quadratic_diagonal(belief, X[:, None, :])[:, 0]


def _check_valid(structure, belief, dtype):
    """Finite belief, positive variances, symmetric PSD (to rounding) dense covariance blocks."""
    for v in belief:
        if isinstance(v, torch.Tensor):
            assert torch.isfinite(v).all()
    var = structure.marginal_variance(belief)
    assert torch.isfinite(var).all() and bool((var > 0).all()), var
    eps = torch.finfo(dtype).eps
    for _, cov in _covariance_blocks(structure, belief) or []:
        scale = cov.abs().max()
        assert (cov - cov.mT).abs().max() <= 4 * eps * scale
        lam = torch.linalg.eigvalsh(cov.double()).min()
        assert lam >= -8 * cov.shape[-1] * eps * scale, (float(lam), float(scale))


def _run_stream(kind, X, y, dtype=torch.float64, m=1, probes=None):
    """Feed ``X, y`` in batches of ``m`` rows to ``kind``; check every update (module docstring).
    Returns the structure and the final belief."""
    P = X.shape[1]
    structure = _structure(kind, P)
    X = torch.as_tensor(X, dtype=dtype)
    y = torch.as_tensor(y, dtype=dtype)
    probes = X if probes is None else torch.cat([torch.as_tensor(probes, dtype=dtype), X])
    belief = structure.prior(torch.zeros(P, dtype=dtype), 1.0)
    prev = _predictive(structure, belief, probes)
    rel = REL_TOL[dtype]
    sd = math.sqrt(OBS_VARIANCE)
    for t in range(0, X.shape[0], m):
        rows = X[t:t + m]
        Hw = rows / sd
        ew = (y[t:t + m] - rows @ belief.mean) / sd
        slack = rel * prev.abs() + _rounding_scale(structure, belief, probes)
        belief, info = structure.update(belief, Hw, ew)
        _check_valid(structure, belief, dtype)
        cur = _predictive(structure, belief, probes)
        assert torch.isfinite(cur).all()
        excess = cur - prev - slack
        assert bool((excess <= 0).all()), (
            f"{kind}: step {t // m} increased the predictive variance at probe {int(excess.argmax())}: "
            f"{float(prev[excess.argmax()]):.6g} -> {float(cur[excess.argmax()]):.6g}")
        assert bool((cur > -_rounding_scale(structure, belief, probes)).all())
        assert math.isfinite(float(info.log_det)) and math.isfinite(float(info.mahalanobis2))
        prev = cur
    return structure, belief


def _probes(rng, D):
    return np.vstack([np.eye(D + 1), _mixed_rows(rng, 8, D, -1.0, 1.0), _mixed_rows(rng, 8, D)])


# ---------------------------------------------------------------------------------------------
# structures
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", KINDS)
def test_mixed_magnitude_stream_never_increases_variance(kind, seed, m):
    rng = np.random.default_rng(seed)
    D = 5
    X = _mixed_rows(rng, 36, D)
    theta = rng.normal(size=D + 1)
    y = X @ theta + math.sqrt(OBS_VARIANCE) * rng.normal(size=len(X))
    _run_stream(kind, X, y, m=m, probes=_probes(rng, D))


@pytest.mark.parametrize("kind", KINDS)
def test_repeated_huge_row_and_its_direction(kind):
    """The same 1e8 row again and again, then rows along it at other scales: each update conditions a
    direction the covariance already holds at the limit of its resolution (the plain full update made
    ``1 + h Σ hᵀ`` negative here)."""
    rng = np.random.default_rng(7)
    base = np.array([1e8, 3e-3, -2e7, 5.0, 1.0])
    X = np.vstack([base] * 4 + [base * s for s in (1e-6, 1e-3, 1.0, 1e-8)] + list(_mixed_rows(rng, 6, 4)))
    y = X @ rng.normal(size=5)
    _run_stream(kind, X, y, probes=_probes(rng, 4))


@pytest.mark.parametrize("kind", ["full", "fd", "vd", "lofi", "block-full"])
def test_float32_mixed_magnitudes(kind):
    rng = np.random.default_rng(3)
    X = _mixed_rows(rng, 24, 3, -2.0, 4.0)
    y = X @ rng.normal(size=4)
    _run_stream(kind, X, y, dtype=torch.float32, probes=_probes(rng, 3))


@pytest.mark.parametrize("kind", ["full", "lofi", "lofi-spherical"])
def test_well_conditioned_stream_matches_bayesian_linear_regression(kind):
    """Where no row is stiff the checks change nothing: the exact posterior of Bayesian linear
    regression (a dense NumPy oracle), for the structures that are exact on a linear model."""
    rng = np.random.default_rng(11)
    X = _mixed_rows(rng, 3, 4, -1.0, 1.0)
    y = X @ rng.normal(size=5)
    structure, belief = _run_stream(kind, X, y)
    prec = np.eye(5) + X.T @ X / OBS_VARIANCE
    cov = np.linalg.inv(prec)
    mean = cov @ (X.T @ y / OBS_VARIANCE)
    np.testing.assert_allclose(structure.covariance(belief).numpy(), cov, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(belief.mean.numpy(), mean, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("variant", ["diagonal", "spherical"])
@pytest.mark.parametrize("m", [1, 2])
def test_truncating_lofi_stays_valid_under_mixed_magnitudes(variant, m):
    """With rank < P the truncation moves precision between directions (not monotone even in exact
    arithmetic), but the belief stays finite with positive predictive variances everywhere."""
    rng = np.random.default_rng(5)
    D = 6
    X = torch.as_tensor(_mixed_rows(rng, 40, D))
    structure = LowRankPrecision(rank=2, variant=variant)
    belief = structure.prior(torch.zeros(D + 1, dtype=torch.float64), 1.0)
    probes = torch.as_tensor(_probes(rng, D))
    for t in range(0, len(X), m):
        Hw = X[t:t + m] / math.sqrt(OBS_VARIANCE)
        belief, _ = structure.update(belief, Hw, torch.as_tensor(rng.normal(size=Hw.shape[0])))
        q = _predictive(structure, belief, probes)
        assert torch.isfinite(q).all() and bool((q > 0).all())
        var = structure.marginal_variance(belief)
        assert torch.isfinite(var).all() and bool((var > 0).all())


def _exact_fd_variance(H, v):
    """FD-EKF variances ``v_i − v_i² h_iᵀ S⁻¹ h_i``, ``S = I + H diag(v) Hᵀ``, in exact rational
    arithmetic (Gauss–Jordan on the ``m × m`` system), rounded once to float."""
    H = [[Fraction(x) for x in row] for row in H]
    v = [Fraction(x) for x in v]
    m, P = len(H), len(v)
    S = [[Fraction(int(a == b)) + sum(H[a][k] * v[k] * H[b][k] for k in range(P)) for b in range(m)]
         for a in range(m)]
    inv = [[Fraction(int(a == b)) for b in range(m)] for a in range(m)]
    for c in range(m):
        p = S[c][c]
        S[c] = [x / p for x in S[c]]
        inv[c] = [x / p for x in inv[c]]
        for r in range(m):
            if r != c and S[r][c] != 0:
                f = S[r][c]
                S[r] = [x - f * y for x, y in zip(S[r], S[c])]
                inv[r] = [x - f * y for x, y in zip(inv[r], inv[c])]
    return [float(v[i] - v[i] ** 2 * sum(H[a][i] * inv[a][b] * H[b][i] for a in range(m) for b in range(m)))
            for i in range(P)]


@pytest.mark.parametrize("rows", [
    [[1e9, 1e-2, -1e-2]],                                   # one parameter explains the row
    [[1e9, 1e-2, -1e-2], [1e-2, 3.0, 1e-3]],                # … within a batch
    [[1e9, 1e-2, -1e-2], [-3e8, 1e-4, 2e-2]],               # two stiff rows on the same parameter
])
def test_fd_pinned_parameter_keeps_its_exact_variance(rows):
    """``v − colsum(Z²)`` returns 0 (a failed step) or a value with no correct digit for a parameter
    pinned by a stiff row; the excluded form gives the exact FD variance (rational-arithmetic
    oracle) to rounding."""
    Hw = torch.tensor(rows, dtype=torch.float64)
    v = torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64)
    structure = DiagonalCovariance("fd")
    post, _ = structure.update(structure.prior(torch.zeros(3, dtype=torch.float64), 1.0)._replace(var=v),
                               Hw, torch.ones(len(rows), dtype=torch.float64))
    np.testing.assert_allclose(post.var.numpy(), _exact_fd_variance(rows, v.tolist()), rtol=1e-12)


@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("kind", KINDS)
def test_stiff_update_of_stacked_hypotheses_equals_separate_updates(kind, m):
    """The stiff forms are batch-generic over the hypotheses axis (architecture.md): K beliefs
    updated in one call equal K separate updates, to the rounding of a stiff problem — batched and
    single products sum in different orders, and a stiff row amplifies that rounding: the
    covariance to ``1e-8`` of its pre-update scale (the rounding of ``u = Σhᵀ`` grows with the
    cancellation inside ``a``; for a LoFi stack with one stiff hypothesis all take the stiff forms,
    which differ from the plain ones by at most half of the digits), the mean to its condition
    times ``eps``."""
    rng = np.random.default_rng(1)
    D = 4
    structure = _structure(kind, D + 1)
    beliefs = [structure.prior(torch.zeros(D + 1, dtype=torch.float64), pv) for pv in (1.0, 0.3)]
    for k, b in enumerate(beliefs):  # a few stiff rows first, different for each hypothesis
        for row in _mixed_rows(rng, 3, D):
            b, _ = structure.update(b, torch.as_tensor(row[None] * 10.0), torch.ones(1, dtype=torch.float64))
        beliefs[k] = b
    Hw = torch.as_tensor(np.stack([_mixed_rows(rng, m, D) * 10.0 for _ in beliefs]))
    ew = torch.as_tensor(rng.normal(size=(len(beliefs), m)))
    stacked, info = structure.update(stack_beliefs(beliefs), Hw, ew)
    for k, b in enumerate(beliefs):
        alone, info_k = structure.update(b, Hw[k], ew[k])
        one = select_hypothesis(stacked, k)
        torch.testing.assert_close(one.mean, alone.mean, rtol=1e-5, atol=1e-8 * float(alone.mean.abs().max()))
        scale = float(structure.covariance(b).abs().max())
        torch.testing.assert_close(structure.covariance(one), structure.covariance(alone), rtol=0, atol=1e-8 * scale)
        torch.testing.assert_close(info.log_det[k], info_k.log_det, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# property test
# ---------------------------------------------------------------------------------------------


@st.composite
def _streams(draw):
    D = draw(st.integers(1, 5))
    n = draw(st.integers(1, 10))
    exps = draw(st.lists(st.floats(-8.0, 8.0), min_size=n * D, max_size=n * D))
    signs = draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=n * D, max_size=n * D))
    X = (np.array(signs) * 10.0 ** np.array(exps)).reshape(n, D)
    X = np.hstack([X, np.ones((n, 1))])
    theta = np.array(draw(st.lists(st.floats(-3.0, 3.0), min_size=D + 1, max_size=D + 1)))
    kind = draw(st.sampled_from(KINDS))
    m = draw(st.sampled_from([1, 2]))
    return kind, X, X @ theta, m


@PROPERTY
@given(_streams())
def test_property_update_never_increases_variance(stream):
    kind, X, y, m = stream
    rng = np.random.default_rng(0)
    _run_stream(kind, X, y, m=m, probes=_probes(rng, X.shape[1] - 1))


# ---------------------------------------------------------------------------------------------
# estimators
# ---------------------------------------------------------------------------------------------


def _estimator_stream(est, X, y, probes, dense):
    """Row by row, no probe's epistemic variance grows beyond rounding. For a dense covariance the
    rounding of ``p Σ pᵀ`` is ``P·eps·|p|ᵀ|Σ||p|`` at each of the two steps compared (a probe of
    ``1e5`` entries has a variance of ``1e-2`` as a difference of terms of ``1e7``)."""
    prev, prev_scale = None, None
    P1 = np.hstack([probes, np.ones((len(probes), 1))])
    for t in range(len(X)):
        est.partial_fit(X[t:t + 1], y[t:t + 1])
        _, std = est.predict(probes, return_std=True, include_noise=False)
        assert np.isfinite(std).all() and (std > 0).all()
        var = std ** 2
        cov = est.posterior_.covariance().numpy() if dense else None
        scale = None if cov is None else cov.shape[0] * np.finfo(float).eps * (
            (np.abs(P1) @ np.abs(cov)) * np.abs(P1)).sum(1)
        if prev is not None:
            slack = 1e-9 * prev
            if cov is not None:
                slack = slack + scale + prev_scale
            assert (var <= prev + slack).all(), (t, var - prev)
        prev, prev_scale = var, scale


@pytest.mark.parametrize("covariance", ["full", "fd", "vd"])
def test_linear_ekf_regressor_learns_through_huge_rows(covariance):
    rng = np.random.default_rng(2)
    D = 4
    X = _mixed_rows(rng, 30, D)[:, :D]
    y = X @ rng.normal(size=D) + 0.1 * rng.normal(size=30)
    probes = np.vstack([np.eye(D), _mixed_rows(rng, 6, D, -1.0, 1.0)[:, :D], X[:5]])
    est = EKFRegressor(hidden_layer_sizes=(), covariance=covariance, prior_variance=1.0,
                       obs_variance=OBS_VARIANCE, random_state=0)
    _estimator_stream(est, X, y, probes, dense=covariance == "full")


def test_linear_lofi_regressor_learns_through_huge_rows():
    rng = np.random.default_rng(2)
    D = 4
    X = _mixed_rows(rng, 30, D)[:, :D]
    y = X @ rng.normal(size=D) + 0.1 * rng.normal(size=30)
    probes = np.vstack([np.eye(D), _mixed_rows(rng, 6, D, -1.0, 1.0)[:, :D], X[:5]])
    est = LoFiRegressor(hidden_layer_sizes=(), rank=D + 1, prior_variance=1.0, obs_variance=OBS_VARIANCE,
                        random_state=0)
    _estimator_stream(est, X, y, probes, dense=False)
