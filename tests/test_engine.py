"""The rewritten engine: hypotheses axes, atomic steps, the weighting stage, block composites,
dynamics (OU reversion, resets, per-parameter noise) and thread-safe fits.

Everything in float64 with small ``P``; each test states a closed form or an independent oracle
(dense algebra, separate unbatched runs, an estimator fitted on a prefix of the stream).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from torch import nn

from skfilter import EKFRegressor, LoFiClassifier, LoFiRegressor
from skfilter.dynamics import Dynamics, Reference, apply_dynamics
from skfilter.filtering import EngineParts, FilterState, filter_step
from skfilter.kernels import compiled_kernels
from skfilter.likelihoods import AssumedDensityCategorical, Bernoulli, Categorical, Gaussian, Poisson
from skfilter.models import make_adapter, make_mlp
from skfilter.posteriors import (BlockDiagonal, DiagonalCovariance, FullBelief, FullCovariance,
                                 LowRankPrecision, select_hypothesis, stack_beliefs)

DT = torch.float64
CPU = torch.device("cpu")
TOL = dict(rtol=1e-10, atol=1e-10)


def _t(a):
    return torch.as_tensor(a, dtype=DT)


def _close(a, b, msg=""):
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    assert a.shape == b.shape, f"{msg}: shapes {tuple(a.shape)} != {tuple(b.shape)}"
    torch.testing.assert_close(a, b, **TOL, msg=lambda m: f"{msg}: {m}")


# ---------------------------------------------------------------------------------------------
# structures under test
# ---------------------------------------------------------------------------------------------
P_SMALL = 7
PA = 3  # first block of the composite


def _structures():
    return {
        "full": FullCovariance(),
        "vd-paper": DiagonalCovariance("vd", "paper"),
        "fd": DiagonalCovariance("fd"),
        "vd-exact": DiagonalCovariance("vd", "exact"),
        "lofi-diag": LowRankPrecision(rank=2),
        "lofi-sph": LowRankPrecision(rank=2, variant="spherical"),
        "lofi-sph-orth": LowRankPrecision(rank=2, variant="spherical", svd="orth"),
        "block": BlockDiagonal({"a": (slice(0, PA), FullCovariance()),
                                "b": (slice(PA, P_SMALL), LowRankPrecision(rank=2))}),
    }


STRUCTURE_NAMES = list(_structures())


def _is_spherical(structure):
    return isinstance(structure, LowRankPrecision) and structure.variant == "spherical"


def _random_belief(structure, P, gen, n_updates=3):
    """A belief of ``structure`` from a random prior, after ``n_updates`` random updates (m=2)."""
    mean = torch.randn(P, generator=gen, dtype=DT)
    if _is_spherical(structure):
        var = float(0.5 + torch.rand((), generator=gen, dtype=DT))
    else:
        var = 0.5 + torch.rand(P, generator=gen, dtype=DT)
    belief = structure.prior(mean, var)
    for _ in range(n_updates):
        Hw = torch.randn(2, P, generator=gen, dtype=DT)
        ew = torch.randn(2, generator=gen, dtype=DT)
        belief, _ = structure.update(belief, Hw, ew)
    return belief


def _dense_cov(structure, belief):
    return structure.covariance(belief)


def _compare_beliefs(structure, batched, separate, msg):
    """Batched belief (K hypotheses) against a list of K unbatched beliefs."""
    for k, single in enumerate(separate):
        b_k = select_hypothesis(batched, k)
        _close(b_k.mean, single.mean, f"{msg} mean[{k}]")
        _close(_dense_cov(structure, b_k), _dense_cov(structure, single), f"{msg} cov[{k}]")
        if isinstance(structure, LowRankPrecision):  # W Wᵀ (W itself is defined up to rotation)
            _close(b_k.low_rank.mT @ b_k.low_rank, single.low_rank.mT @ single.low_rank, f"{msg} WWt[{k}]")
            _close(b_k.diagonal, single.diagonal, f"{msg} diagonal[{k}]")
        if isinstance(structure, BlockDiagonal):
            lo_b, lo_s = b_k.blocks[1], single.blocks[1]
            _close(lo_b.low_rank.mT @ lo_b.low_rank, lo_s.low_rank.mT @ lo_s.low_rank, f"{msg} block WWt[{k}]")


DYNAMICS = {"static": Dynamics(), "decay-q": Dynamics(decay=0.9, process_noise=0.01)}


def _check_hypotheses_axis(name, dyn_name, K, m, seed):
    structure = _structures()[name]
    P = P_SMALL
    gen = torch.Generator().manual_seed(seed)
    beliefs = [_random_belief(structure, P, gen) for _ in range(K)]
    stacked = stack_beliefs(beliefs)
    assert stacked.mean.shape == (K, P)
    dynamics = DYNAMICS[dyn_name]
    reference = Reference(torch.zeros(P, dtype=DT), 1.0)
    Hw = torch.randn(K, m, P, generator=gen, dtype=DT)
    ew = torch.randn(K, m, generator=gen, dtype=DT)

    pred_b = apply_dynamics(structure, stacked, dynamics, reference)
    pred_s = [apply_dynamics(structure, b, dynamics, reference) for b in beliefs]
    _compare_beliefs(structure, pred_b, pred_s, f"{name}/{dyn_name} predicted")

    post_b, info_b = structure.update(pred_b, Hw, ew)
    outs = [structure.update(pred_s[k], Hw[k], ew[k]) for k in range(K)]
    _compare_beliefs(structure, post_b, [o[0] for o in outs], f"{name}/{dyn_name} K={K} m={m} updated")

    # UpdateInfo: batched == separate == dense S_w = I + Hw Σ⁻ Hwᵀ
    maha_b, logdet_b = info_b.mahalanobis2, info_b.log_det
    assert maha_b.shape == (K,) and logdet_b.shape == (K,)
    for k in range(K):
        Sigma = _dense_cov(structure, pred_s[k])
        S = torch.eye(m, dtype=DT) + Hw[k] @ Sigma @ Hw[k].T
        maha_dense = ew[k] @ torch.linalg.solve(S, ew[k])
        logdet_dense = torch.logdet(S)
        _close(outs[k][1].mahalanobis2, maha_dense, f"{name} separate mahalanobis2[{k}]")
        _close(outs[k][1].log_det, logdet_dense, f"{name} separate log_det[{k}]")
        _close(maha_b[k], maha_dense, f"{name} batched mahalanobis2[{k}]")
        _close(logdet_b[k], logdet_dense, f"{name} batched log_det[{k}]")


# ---------------------------------------------------------------------------------------------
# 1. hypotheses axis, structure level
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("dyn_name", list(DYNAMICS))
@pytest.mark.parametrize("name", STRUCTURE_NAMES)
def test_hypotheses_axis_structure(name, dyn_name, m):
    _check_hypotheses_axis(name, dyn_name, K=3, m=m, seed=0)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(name=st.sampled_from(STRUCTURE_NAMES), dyn_name=st.sampled_from(list(DYNAMICS)),
       K=st.integers(1, 4), m=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_hypotheses_axis_structure_property(name, dyn_name, K, m, seed):
    _check_hypotheses_axis(name, dyn_name, K, m, seed)


# ---------------------------------------------------------------------------------------------
# 2. hypotheses axis, engine level (one filter_step for K beliefs == K filter_steps)
# ---------------------------------------------------------------------------------------------
N_IN = 3

LIKELIHOODS = {
    "gaussian": (lambda: Gaussian(0.5), 2),
    "gaussian-adaptive": (lambda: Gaussian("adaptive"), 2),
    "bernoulli": (lambda: Bernoulli(), 1),
    "categorical": (lambda: Categorical(), 3),
    "adf-binary": (lambda: AssumedDensityCategorical(), 1),
    "adf": (lambda: AssumedDensityCategorical(), 3),
    "poisson": (lambda: Poisson(), 1),
}


def _targets(name, n, C, gen):
    if name.startswith("gaussian"):
        return torch.randn(n, C, generator=gen, dtype=DT)
    if name in ("bernoulli", "adf-binary"):
        return torch.randint(0, 2, (n, 1), generator=gen).to(DT)
    if name in ("categorical", "adf"):
        return torch.eye(C, dtype=DT)[torch.randint(0, C, (n,), generator=gen)]
    return torch.randint(0, 4, (n, 1), generator=gen).to(DT)


@pytest.mark.parametrize("structure_name", ["full", "vd-exact", "lofi-diag"])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("lik_name", list(LIKELIHOODS))
def test_hypotheses_axis_engine(lik_name, fused, structure_name):
    make_lik, C = LIKELIHOODS[lik_name]
    likelihood = make_lik()
    adapter = make_adapter(make_mlp(N_IN, (4,), C, "tanh", seed=0), CPU, DT, N_IN, fused=fused)
    structure = _structures()[structure_name]
    P = adapter.n_params
    theta0 = adapter.initial_theta()
    reference = Reference(theta0, 0.5)
    parts = EngineParts(adapter, likelihood, structure, Dynamics(decay=0.95, process_noise=0.01), reference)
    gen = torch.Generator().manual_seed(1)
    K = 3
    beliefs = [structure.prior(theta0 + 0.3 * torch.randn(P, generator=gen, dtype=DT), 0.5 + 0.2 * k)
               for k in range(K)]
    noise0 = likelihood.initial_state(C, CPU, DT)
    state_b = FilterState(stack_beliefs(beliefs), noise0, 0)
    states_s = [FilterState(b, noise0, 0) for b in beliefs]
    for step, n in enumerate([1, 2, 1]):  # one row, then a block of two rows, then one row
        X = torch.randn(n, N_IN, generator=gen, dtype=DT)
        Y = _targets(lik_name, n, C, gen)
        state_b, out_b = filter_step(parts, state_b, X, Y)
        outs = [filter_step(parts, s, X, Y) for s in states_s]
        states_s = [o[0] for o in outs]
        assert state_b.belief.mean.shape == (K, P)
        assert state_b.n_seen == states_s[0].n_seen
        _compare_beliefs(structure, state_b.belief, [s.belief for s in states_s], f"{lik_name} step {step}")
        for k in range(K):
            _close(out_b.info.mahalanobis2[k], outs[k][1].info.mahalanobis2, f"{lik_name} mahalanobis2")
            _close(out_b.info.log_det[k], outs[k][1].info.log_det, f"{lik_name} log_det")
        if lik_name == "gaussian-adaptive":
            r_b = state_b.noise["r"]
            assert r_b.shape == (K, C), r_b.shape  # the noise state gets the hypotheses axis
            for k in range(K):
                _close(r_b[k], states_s[k].noise["r"], f"adaptive r[{k}] step {step}")
                _close(state_b.noise["scale"][k], states_s[k].noise["scale"], f"adaptive scale[{k}]")
        elif lik_name == "gaussian":
            assert state_b.noise["r"].shape == (C,)


# ---------------------------------------------------------------------------------------------
# 3. atomicity: an exception anywhere inside a step leaves the last good state
# ---------------------------------------------------------------------------------------------
N_ROWS = 16


def _data(classifier):
    rng = np.random.RandomState(0)
    X = rng.randn(N_ROWS + 8, N_IN)
    if classifier:
        y = np.arange(len(X)) % 3  # every prefix of >= 3 rows holds every class
    else:
        y = np.sin(X[:, 0]) + 0.1 * rng.randn(len(X))
    return X, y


ESTIMATORS = {
    "ekf-full": lambda: EKFRegressor((4,), covariance="full", obs_variance=0.2, prior_variance=0.5,
                                     random_state=0, dtype="float64"),
    "ekf-vd": lambda: EKFRegressor((4,), covariance="vd", obs_variance=0.2, prior_variance=0.5,
                                   random_state=0, dtype="float64"),
    "lofi-reg": lambda: LoFiRegressor((4,), rank=2, obs_variance=0.2, prior_variance=0.5,
                                      random_state=0, dtype="float64"),
    "lofi-clf": lambda: LoFiClassifier((4,), rank=2, prior_variance=0.5, random_state=0, dtype="float64"),
}


def _structure_class(est_name):
    return {"ekf-full": FullCovariance, "ekf-vd": DiagonalCovariance}.get(est_name, LowRankPrecision)


def _likelihood_class(est_name):
    return AssumedDensityCategorical if est_name == "lofi-clf" else Gaussian


def _predictions(est, X):
    if isinstance(est, LoFiClassifier):
        return [est.predict(X), est.predict_proba(X)]
    mean, std = est.predict(X, return_std=True)
    return [est.predict(X), mean, std]


def _fail_on_call(j, exc):
    """A replacement for a method that fails on its ``j``-th call and otherwise calls the original."""
    calls = [0]

    def install(cls, name):
        orig = getattr(cls, name)

        def wrapper(*args, **kwargs):
            calls[0] += 1
            if calls[0] == j:
                raise exc("injected failure")
            return orig(*args, **kwargs)

        return mock.patch.object(cls, name, wrapper)

    return install


def _targets_of_injection(est_name):
    from skfilter.models import MLPAdapter

    return [(_structure_class(est_name), "update"), (MLPAdapter, "forward_jacobian"),
            (_likelihood_class(est_name), "whiten"), (_likelihood_class(est_name), "next_state")]


def _fit_full(est_name, X, y):
    return ESTIMATORS[est_name]().fit(X, y)


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
@pytest.mark.parametrize("method", ["fit", "partial_fit"])
@pytest.mark.parametrize("est_name", list(ESTIMATORS))
def test_atomic_steps(est_name, method, exc):
    """Failures injected into the torch engine's stages (the compiled kernels, which do not call
    them, have their own atomicity tests in tests/test_kernels.py)."""
    with compiled_kernels(False):
        _check_atomic_steps(est_name, method, exc)


def _check_atomic_steps(est_name, method, exc):
    classifier = est_name == "lofi-clf"
    X, y = _data(classifier)
    Xq = X[-5:]
    X, y = X[:N_ROWS], y[:N_ROWS]
    Xmore, ymore = _data(classifier)[0][N_ROWS:N_ROWS + 4], _data(classifier)[1][N_ROWS:N_ROWS + 4]
    head = 6  # partial_fit: rows learned by a first, successful call
    for target_cls, attr in _targets_of_injection(est_name):
        for j in (1, 5, 9):
            est = ESTIMATORS[est_name]()
            if method == "partial_fit":
                kw = {"classes": [0, 1, 2]} if classifier else {}
                est.partial_fit(X[:head], y[:head], **kw)
            with _fail_on_call(j, exc)(target_cls, attr), pytest.raises(exc):
                if method == "fit":
                    est.fit(X, y)
                else:
                    est.partial_fit(X[head:], y[head:])
            n = est.n_samples_seen_
            assert n < N_ROWS
            if method == "partial_fit":
                assert n >= head
            if n < 3:  # the reference needs every class (classifier) / at least one row
                continue
            ref = _fit_full(est_name, X[:n], y[:n])
            what = f"{est_name} {method} {exc.__name__} in {target_cls.__name__}.{attr} call {j} (n={n})"
            for a, b in zip(_predictions(est, Xq), _predictions(ref, Xq)):
                assert np.array_equal(a, b), what
            for pa, pb in zip(est.module_.parameters(), ref.module_.parameters()):  # module_ = last good mean
                assert torch.equal(pa, pb), what + " (module_ weights)"
            # it keeps learning afterwards, exactly as the reference
            est.partial_fit(Xmore, ymore)
            ref.partial_fit(Xmore, ymore)
            assert est.n_samples_seen_ == n + len(Xmore)
            for a, b in zip(_predictions(est, Xq), _predictions(ref, Xq)):
                assert np.array_equal(a, b), what + " (after a later partial_fit)"


# ---------------------------------------------------------------------------------------------
# 4. the weighting stage
# ---------------------------------------------------------------------------------------------
def _regression_data(n=25, C=1, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, N_IN)
    Y = np.stack([np.sin(X[:, c]) for c in range(C)], axis=1) + 0.1 * rng.randn(n, C)
    return X, (Y[:, 0] if C == 1 else Y)


WEIGHTED = {
    "ekf-full": lambda obs: EKFRegressor((4,), covariance="full", obs_variance=obs, prior_variance=0.5,
                                         random_state=0, dtype="float64"),
    "lofi": lambda obs: LoFiRegressor((4,), rank=2, obs_variance=obs, prior_variance=0.5, random_state=0,
                                      dtype="float64"),
}


@pytest.mark.parametrize("w", [0.5, 2.0])
@pytest.mark.parametrize("est_name", list(WEIGHTED))
def test_constant_weighting_equals_scaled_noise(est_name, w):
    X, y = _regression_data()
    obs = 0.3
    est = WEIGHTED[est_name](obs)
    est._set_weighting(lambda residual, S: w)
    est.fit(X, y)
    assert est._engine_parts().weighting is not None, "fit dropped the weighting installed before it"
    scaled = WEIGHTED[est_name](obs / w**2).fit(X, y)
    plain = WEIGHTED[est_name](obs).fit(X, y)
    m_w, s_w = est.predict(X, return_std=True, include_noise=False)
    m_s, s_s = scaled.predict(X, return_std=True, include_noise=False)
    np.testing.assert_allclose(m_w, m_s, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(s_w, s_s, rtol=1e-10, atol=1e-10)
    assert not np.allclose(m_w, plain.predict(X))  # the weight matters
    # partial_fit keeps using it
    est.partial_fit(X[:5], y[:5])
    scaled.partial_fit(X[:5], y[:5])
    np.testing.assert_allclose(est.predict(X), scaled.predict(X), rtol=1e-10, atol=1e-10)


class _Recorder:
    def __init__(self, needs_covariance=None):
        self.calls = []
        if needs_covariance is not None:
            self.needs_covariance = needs_covariance

    def __call__(self, residual, S):
        self.calls.append((residual.clone(), None if S is None else S.clone()))
        return torch.ones(residual.shape[:-1], dtype=residual.dtype)


def test_weighting_receives_prior_predictive_residual_and_S():
    C, n = 2, 3
    X, Y = _regression_data(n=12, C=C)
    est = LoFiRegressor((4,), rank=2, obs_variance=[0.3, 0.7], prior_variance=0.5, process_noise=0.01,
                        decay=0.95, batch_size=n, random_state=0, dtype="float64")
    rec = _Recorder()
    est._set_weighting(rec)
    est.fit(X, Y)
    assert len(rec.calls) == 12 // n
    for residual, S in rec.calls:
        assert residual.shape == (n, C)
        assert S.shape == (n, C, C)
    # now one step by hand, against a dense oracle: S = J Σ⁻ Jᵀ + R at the predicted belief
    parts = est._engine_parts()
    assert parts.weighting is rec
    state = est.filter_state_
    Xt, Yt = _t(X[:n]), _t(Y[:n])
    rec.calls.clear()
    filter_step(parts, state, Xt, Yt)
    (residual, S), = rec.calls
    predicted = apply_dynamics(parts.structure, state.belief, parts.dynamics, parts.reference)
    Sigma = parts.structure.covariance(predicted)
    f, J = parts.adapter.forward_jacobian(predicted.mean, Xt)
    expected = torch.einsum("ncp,pq,ndq->ncd", J, Sigma, J) + torch.diag(_t([0.3, 0.7]))
    _close(S, expected, "S given to the weighting")
    _close(residual, Yt - f, "residual given to the weighting")
    # the prior-predictive residual is at the *predicted* mean (dynamics applied), not the posterior
    f_post = parts.adapter.forward(state.belief.mean, Xt)
    assert not torch.allclose(residual, Yt - f_post)


def test_weighting_without_covariance_gets_none():
    X, y = _regression_data(n=8)
    est = EKFRegressor((4,), obs_variance=0.3, random_state=0, dtype="float64")
    rec = _Recorder(needs_covariance=False)
    est._set_weighting(rec)
    est.fit(X, y)
    assert len(rec.calls) == 8
    assert all(S is None for _, S in rec.calls)
    assert all(r.shape == (1, 1) for r, _ in rec.calls)
    # and with the attribute True it gets S
    rec2 = _Recorder(needs_covariance=True)
    est._set_weighting(rec2)
    est.partial_fit(X, y)
    assert all(S is not None and S.shape == (1, 1, 1) for _, S in rec2.calls)


# ---------------------------------------------------------------------------------------------
# 5. block composite
# ---------------------------------------------------------------------------------------------
class _TwoHeads(nn.Module):
    """Output 0 depends only on ``a``'s parameters, output 1 only on ``b``'s."""

    def __init__(self):
        super().__init__()
        self.a = make_mlp(N_IN, (3,), 1, "tanh", seed=1)
        self.b = make_mlp(N_IN, (3,), 1, "tanh", seed=2)

    def forward(self, x):
        return torch.cat([self.a(x), self.b(x)], dim=-1)


def test_block_separable_equals_independent_filters():
    r = [0.3, 0.6]
    adapter = make_adapter(_TwoHeads(), CPU, DT, N_IN)
    assert list(adapter.blocks) == ["a", "b"]
    ix_a, ix_b = adapter.blocks["a"], adapter.blocks["b"]
    structure = BlockDiagonal({"a": (ix_a, FullCovariance()), "b": (ix_b, FullCovariance())})
    theta0 = adapter.initial_theta()
    dyn = Dynamics(decay=0.99, process_noise=1e-3)
    parts = EngineParts(adapter, Gaussian(r), structure, dyn, Reference(theta0, 0.5))
    state = FilterState(structure.prior(theta0, 0.5), parts.likelihood.initial_state(2, CPU, DT), 0)

    singles = []
    for seed, ix, rc in ((1, ix_a, r[0]), (2, ix_b, r[1])):
        ad = make_adapter(make_mlp(N_IN, (3,), 1, "tanh", seed=seed), CPU, DT, N_IN)
        _close(ad.initial_theta(), theta0[ix], "head weights")
        p = EngineParts(ad, Gaussian(rc), FullCovariance(), dyn, Reference(theta0[ix], 0.5))
        singles.append([p, FilterState(FullCovariance().prior(theta0[ix], 0.5), p.likelihood.initial_state(1, CPU, DT), 0)])

    gen = torch.Generator().manual_seed(3)
    for step in range(20):
        X = torch.randn(1, N_IN, generator=gen, dtype=DT)
        Y = torch.randn(1, 2, generator=gen, dtype=DT)
        state, _ = filter_step(parts, state, X, Y)
        for c, single in enumerate(singles):
            single[1], _ = filter_step(single[0], single[1], X, Y[:, c:c + 1])
    for c, ((_, s), ix) in enumerate(zip(singles, (ix_a, ix_b))):
        _close(state.belief.blocks[c].mean, s.belief.mean, f"block {c} mean")
        _close(state.belief.blocks[c].cov, s.belief.cov, f"block {c} cov")
        _close(state.belief.mean[ix], s.belief.mean, f"assembled mean of block {c}")


@pytest.mark.parametrize("inner", ["full", "vd-paper", "fd", "lofi-diag", "lofi-sph"])
def test_single_block_is_the_structure(inner):
    base = _structures()[inner]
    block = BlockDiagonal({"all": (slice(0, P_SMALL), _structures()[inner])})
    gen = torch.Generator().manual_seed(5)
    mean = torch.randn(P_SMALL, generator=gen, dtype=DT)
    b_base, b_block = base.prior(mean, 0.7), block.prior(mean, 0.7)
    dyn, ref = Dynamics(decay=0.9, process_noise=0.01), Reference(mean, 0.7)
    for step in range(5):
        m = 1 + step % 3
        Hw = torch.randn(m, P_SMALL, generator=gen, dtype=DT)
        ew = torch.randn(m, generator=gen, dtype=DT)
        b_base, i_base = base.update(apply_dynamics(base, b_base, dyn, ref), Hw, ew)
        b_block, i_block = block.update(apply_dynamics(block, b_block, dyn, ref), Hw, ew)
        inner_belief = b_block.blocks[0]
        for field in b_base._fields:
            a, b = getattr(b_base, field), getattr(inner_belief, field)
            if isinstance(a, torch.Tensor):
                assert torch.equal(a, b), f"{inner} step {step}: field {field} differs"
            else:
                assert a == b
        assert torch.equal(b_block.mean, b_base.mean)
        _close(i_block.mahalanobis2, i_base.mahalanobis2, "mahalanobis2")
        _close(i_block.log_det, i_base.log_det, "log_det")


def _random_spd(n, gen):
    A = torch.randn(n, n, generator=gen, dtype=DT)
    return A @ A.T / n + 0.3 * torch.eye(n, dtype=DT)


@pytest.mark.parametrize("m", [1, 2, 4])
def test_block_update_is_the_marginal_of_the_exact_posterior(m):
    """DEKF (spec/dekf.md): each block of the decoupled update is the marginal block of the exact
    full-EKF posterior from the block-diagonal prior, for any (non-separable) Jacobian."""
    P, Pa = P_SMALL, PA
    gen = torch.Generator().manual_seed(m)
    sa, sb = slice(0, Pa), slice(Pa, P)
    structure = BlockDiagonal({"a": (sa, FullCovariance()), "b": (sb, FullCovariance())})
    mean = torch.randn(P, generator=gen, dtype=DT)
    Sa, Sb = _random_spd(Pa, gen), _random_spd(P - Pa, gen)
    prior = structure.prior(mean, 1.0)
    prior = prior._replace(blocks=(FullBelief(mean[sa].clone(), Sa), FullBelief(mean[sb].clone(), Sb)))
    Hw = torch.randn(m, P, generator=gen, dtype=DT)
    ew = torch.randn(m, generator=gen, dtype=DT)
    post, info = structure.update(prior, Hw, ew)

    Sigma = torch.block_diag(Sa, Sb)
    S = torch.eye(m, dtype=DT) + Hw @ Sigma @ Hw.T
    K = Sigma @ Hw.T @ torch.linalg.inv(S)
    mu = mean + K @ ew
    cov = Sigma - K @ S @ K.T
    for c, ix in enumerate((sa, sb)):
        _close(post.blocks[c].mean, mu[ix], f"block {c} mean")
        _close(post.blocks[c].cov, cov[ix, ix], f"block {c} cov")
    _close(post.mean, mu, "assembled mean")
    _close(info.log_det, torch.logdet(S), "log_det")
    _close(info.mahalanobis2, ew @ torch.linalg.solve(S, ew), "mahalanobis2")


@pytest.mark.parametrize("b_kind", ["full", "lofi-diag"])
def test_block_sparse_update_leaves_inactive_block(b_kind):
    P, Pa = P_SMALL, PA
    b_struct = _structures()[b_kind]
    structure = BlockDiagonal({"a": (slice(0, Pa), FullCovariance()), "b": (slice(Pa, P), b_struct)})
    gen = torch.Generator().manual_seed(9)
    belief = _random_belief(structure, P, gen)
    Hw = torch.randn(2, P, generator=gen, dtype=DT)
    Hw[:, Pa:] = 0.0
    ew = torch.randn(2, generator=gen, dtype=DT)
    sparse, _ = structure.update(belief, Hw, ew, active={"a"})
    dense, _ = structure.update(belief, Hw, ew)
    for field in belief.blocks[1]._fields:
        a, b = getattr(sparse.blocks[1], field), getattr(belief.blocks[1], field)
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b), field
        else:
            assert a == b, field
    assert torch.equal(sparse.mean[Pa:], belief.mean[Pa:])
    _close(sparse.blocks[0].mean, dense.blocks[0].mean, "active block mean")
    _close(sparse.blocks[0].cov, dense.blocks[0].cov, "active block cov")
    assert not torch.allclose(sparse.blocks[0].mean, belief.blocks[0].mean)


# ---------------------------------------------------------------------------------------------
# 6. dynamics
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, variance", [
    (name, variance) for name in ["full", "vd-paper", "fd", "lofi-diag", "lofi-sph", "block"]
    for variance in ["scalar", "vector"] if not (name == "lofi-sph" and variance == "vector")
])  # spherical LoFi has one prior variance for all parameters
def test_reversion_one_is_a_reset(name, variance):
    structure = _structures()[name]
    gen = torch.Generator().manual_seed(11)
    P = P_SMALL
    mean0 = torch.randn(P, generator=gen, dtype=DT)
    var0 = 0.8 if variance == "scalar" else 0.5 + torch.rand(P, generator=gen, dtype=DT)
    belief = structure.prior(mean0, var0)
    for _ in range(4):  # learn some rows
        belief, _ = structure.update(belief, torch.randn(2, P, generator=gen, dtype=DT),
                                     torch.randn(2, generator=gen, dtype=DT))
    ref = Reference(mean0, var0)
    ou = apply_dynamics(structure, belief, Dynamics(reversion=1.0), ref)
    reset = apply_dynamics(structure, belief, Dynamics(reset=True), ref)
    _close(ou.mean, reset.mean, f"{name} mean")
    _close(structure.covariance(ou), structure.covariance(reset), f"{name} cov")
    _close(structure.covariance(reset), torch.diag(torch.as_tensor(var0, dtype=DT).expand(P)), "reset cov")
    _close(reset.mean, mean0, "reset mean")
    # the next update from either agrees too
    Hw, ew = torch.randn(2, P, generator=gen, dtype=DT), torch.randn(2, generator=gen, dtype=DT)
    a, _ = structure.update(ou, Hw, ew)
    b, _ = structure.update(reset, Hw, ew)
    _close(a.mean, b.mean, f"{name} mean after an update")
    _close(structure.covariance(a), structure.covariance(b), f"{name} cov after an update")


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.8])
@pytest.mark.parametrize("decay", [1.0, 0.9])
def test_ou_reversion_full_dense(rho, decay):
    structure = FullCovariance()
    gen = torch.Generator().manual_seed(13)
    P = P_SMALL
    mean0 = torch.randn(P, generator=gen, dtype=DT)
    var0 = 0.5 + torch.rand(P, generator=gen, dtype=DT)
    belief = FullBelief(torch.randn(P, generator=gen, dtype=DT), _random_spd(P, gen))
    out = apply_dynamics(structure, belief, Dynamics(decay=decay, reversion=rho), Reference(mean0, var0))
    keep = 1.0 - rho
    _close(out.mean, decay * keep * belief.mean + rho * mean0, "OU mean")
    _close(out.cov, (decay * keep) ** 2 * belief.cov + (1 - keep**2) * torch.diag(var0), "OU cov")
    if decay == 1.0:  # the brief's form: (1-ρ)μ + ρμ0, (1-ρ)²Σ + (1-(1-ρ)²)Σ0
        _close(out.mean, (1 - rho) * belief.mean + rho * mean0, "OU mean (closed form)")


@pytest.mark.parametrize("name", ["lofi-diag", "full", "vd-paper", "block"])
@pytest.mark.parametrize("decay", [1.0, 0.9])
def test_per_parameter_process_noise(name, decay):
    structure = _structures()[name]
    gen = torch.Generator().manual_seed(17)
    P = P_SMALL
    belief = _random_belief(structure, P, gen, n_updates=4)
    q = 0.05 * torch.rand(P, generator=gen, dtype=DT)
    q[1] = 0.0
    ref = Reference(torch.zeros(P, dtype=DT), 1.0)
    expected = decay**2 * structure.covariance(belief) + torch.diag(q)
    via_dyn = apply_dynamics(structure, belief, Dynamics(decay=decay, process_noise=q), ref)
    direct = structure.transition(belief, decay, q, None)
    _close(structure.covariance(via_dyn), expected, f"{name} apply_dynamics")
    _close(structure.covariance(direct), expected, f"{name} transition")
    _close(via_dyn.mean, decay * belief.mean, f"{name} mean")
    # per block, through Dynamics.per_block
    if name == "block":
        qb = Dynamics.per_block({"a": 0.02, "b": 0.0}, {"a": slice(0, PA), "b": slice(PA, P)}, P)
        out = apply_dynamics(structure, belief, Dynamics(process_noise=qb), ref)
        _close(structure.covariance(out), structure.covariance(belief) + torch.diag(qb), "per-block noise")


# ---------------------------------------------------------------------------------------------
# 7. threaded fits are deterministic
# ---------------------------------------------------------------------------------------------
class _GlobalRNGNet(nn.Module):
    """Initialises its weights from torch's *global* generator (nn.Linear's default init)."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(N_IN, 6)
        self.l2 = nn.Linear(6, 1)
        # redrawn one entry at a time: many global-RNG calls, so that an unserialised seed-and-construct
        # in another thread interleaves with these draws (the race the build lock prevents)
        with torch.no_grad():
            for p in self.parameters():
                flat = p.view(-1)
                for i in range(flat.numel()):
                    flat[i] = 0.5 * float(torch.randn(()))

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x)))


@pytest.mark.parametrize("module", [_GlobalRNGNet, None], ids=["module-class", "default-mlp"])
def test_threaded_fits_are_deterministic(module):
    X, y = _regression_data(n=30)
    proto = EKFRegressor((6,), module=module, random_state=0, obs_variance=0.2, dtype="float64")
    serial = clone(proto).fit(X, y).predict(X)

    def job(_):
        return clone(proto).fit(X, y).predict(X)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(job, range(20)))
    for i, r in enumerate(results):
        assert np.array_equal(r, serial), f"threaded fit {i} differs from the serial fit"


def _huber_weighting(residual, S):
    """A residual- and S-dependent weight (so hypotheses get different weights)."""
    d2 = (residual.unsqueeze(-2) @ torch.linalg.solve(S, residual.unsqueeze(-1)))[..., 0, 0]
    return torch.clamp(1.0 / d2.clamp_min(1e-12).sqrt(), max=1.0) * 0.5 + 0.5


@pytest.mark.parametrize("with_sample_weight", [False, True])
@pytest.mark.parametrize("lik_name", ["gaussian", "gaussian-adaptive"])
def test_hypotheses_axis_engine_with_weighting(lik_name, with_sample_weight):
    """Item 2 with the weighting stage on: per-hypothesis weights (K, n) must act per hypothesis, in
    the structure update and in the online noise estimate alike."""
    make_lik, C = LIKELIHOODS[lik_name]
    likelihood = make_lik()
    adapter = make_adapter(make_mlp(N_IN, (4,), C, "tanh", seed=0), CPU, DT, N_IN)
    structure = FullCovariance()
    P = adapter.n_params
    theta0 = adapter.initial_theta()
    parts = EngineParts(adapter, likelihood, structure, Dynamics(), Reference(theta0, 0.5), _huber_weighting)
    gen = torch.Generator().manual_seed(2)
    K = 3
    beliefs = [structure.prior(theta0 + 0.5 * torch.randn(P, generator=gen, dtype=DT), 0.5) for _ in range(K)]
    noise0 = likelihood.initial_state(C, CPU, DT)
    state_b = FilterState(stack_beliefs(beliefs), noise0, 0)
    states_s = [FilterState(b, noise0, 0) for b in beliefs]
    for step, n in enumerate([1, 3, 2]):
        X = torch.randn(n, N_IN, generator=gen, dtype=DT)
        Y = 2.0 * torch.randn(n, C, generator=gen, dtype=DT)
        sw = (0.5 + torch.rand(n, generator=gen, dtype=DT)) if with_sample_weight else None
        state_b, out_b = filter_step(parts, state_b, X, Y, sw)
        outs = [filter_step(parts, s, X, Y, sw) for s in states_s]
        states_s = [o[0] for o in outs]
        assert out_b.weights.shape == (K, n)
        for k in range(K):
            _close(out_b.weights[k], outs[k][1].weights, f"robust weights[{k}] step {step}")
        if lik_name == "gaussian-adaptive":
            for k in range(K):
                _close(state_b.noise["r"][k], states_s[k].noise["r"], f"adaptive r[{k}] step {step}")
        _compare_beliefs(structure, state_b.belief, [s.belief for s in states_s], f"{lik_name} step {step}")


# ---------------------------------------------------------------------------------------------
# memory reuse of dead beliefs (run_filter's workspace) never touches a belief anyone holds
# ---------------------------------------------------------------------------------------------
def test_workspace_reuse_never_touches_held_beliefs():
    from skfilter import EKFRegressor
    from skfilter.filtering import run_filter

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3)), rng.normal(size=40)
    est = EKFRegressor(hidden_layer_sizes=(5,), prior_variance=0.1, random_state=0).fit(X[:5], y[:5])
    held = est.posterior_.belief
    held_cov = held.cov.clone()
    est.partial_fit(X[5:], y[5:])  # 35 steps: beliefs two steps back are reused
    assert torch.equal(held.cov, held_cov)  # the belief from before the call is untouched
    # states kept by an on_step callback are never reused either
    parts = est._engine_parts()
    kept = []
    Xt, Yt = torch.as_tensor(X[5:]), torch.as_tensor(y[5:, None])
    state, _ = run_filter(parts, est.filter_state_, Xt, Yt, on_step=lambda s, o: kept.append((s, s.belief.cov.clone())))
    for s, cov in kept:
        assert torch.equal(s.belief.cov, cov)
    # and reuse does not change the result: the same stream with every belief held equals the reused one
    # (both on the torch engine; an on_step callback keeps the compiled kernels out)
    with compiled_kernels(False):
        again, _ = run_filter(parts, est.filter_state_, Xt, Yt)
    assert torch.equal(again.belief.cov, state.belief.cov) and torch.equal(again.belief.mean, state.belief.mean)
