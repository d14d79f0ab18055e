"""The factored-covariance structure: LRKF, HiLoFi, LoLoFi (spec/hilofi.md §2.3–2.5, §4 facts 3–13).

Oracles, none of them the code under test:

* :class:`~skfilter.posteriors.FullCovariance` (the dense EKF, itself tested against closed forms);
* closed-form Bayesian linear regression on the last layer's features;
* the corrected Alg. 2–4 written densely in this file (:func:`_dense_paper_step`: the EKF gain of the
  block-diagonal predicted covariance, the Joseph-form surrogates, the best rank-``d`` approximation
  by a dense eigendecomposition);
* Loewner order, rotations and sample moments.

Structures are driven directly (``transition`` then ``update``) with whitened rows, random or the
Jacobians of a small tanh network evaluated at the current mean (an EKF stream).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skfilter.dynamics import Dynamics, Reference
from skfilter.exceptions import FilterStepError
from skfilter.filtering import EngineParts, FilterState, run_filter
from skfilter.stepping import plan_for
from skfilter.likelihoods import Gaussian
from skfilter.models import make_adapter, make_mlp
from skfilter.posteriors import (CholeskyFactor, FactoredBelief, FactoredCovariance, FullCovariance,
                                 LowRankFactor, Posterior, select_hypothesis, stack_beliefs)

F64 = torch.float64
PROPERTY = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])

# the tanh network f(θ, x) = w2 · tanh(W1 x + b1) + b2, 2 inputs, 3 hidden units: θ = [W1 (row-major),
# b1, w2, b2], the last layer last (as the default MLP adapter flattens it)
N_IN, N_HID = 2, 3
P = N_IN * N_HID + 2 * N_HID + 1  # 13
HIDDEN, LAST = slice(0, N_IN * N_HID + N_HID), slice(N_IN * N_HID + N_HID, P)
D_H, D_L = 9, 4
R_OBS = 0.05


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _features(theta, x):
    W1 = theta[:N_IN * N_HID].reshape(N_HID, N_IN)
    b1 = theta[N_IN * N_HID:N_IN * N_HID + N_HID]
    return torch.cat([torch.tanh(x @ W1.T + b1), torch.ones(x.shape[0], 1, dtype=x.dtype)], dim=1)


def _net(theta, x):
    return _features(theta, x) @ theta[LAST]


def _stream(seed, n):
    g = _gen(seed)
    X = torch.randn(n, N_IN, generator=g, dtype=F64)
    truth = torch.randn(P, generator=g, dtype=F64)
    Y = _net(truth, X) + math.sqrt(R_OBS) * torch.randn(n, generator=g, dtype=F64)
    mu0 = 0.5 * torch.randn(P, generator=g, dtype=F64)
    return X, Y, mu0


def _run(structure, belief, X, Y, q=None, rows=1):
    """An EKF stream: per step the transition (process noise ``q``), the Jacobian of the network at the
    predicted mean, the update with whitened rows. Returns the final belief."""
    for t in range(0, X.shape[0], rows):
        if q is not None:
            belief = structure.transition(belief, 1.0, q, None)
        x, y = X[t:t + rows], Y[t:t + rows]
        J = torch.func.jacrev(_net)(belief.mean, x)
        Hw = J / math.sqrt(R_OBS)
        ew = (y - _net(belief.mean, x)) / math.sqrt(R_OBS)
        belief, _ = structure.update(belief, Hw, ew)
    return belief


def _gram(B):
    return B.mT @ B


def _block_noise(q_hidden, q_last):
    q = torch.empty(P, dtype=F64)
    q[HIDDEN], q[LAST] = q_hidden, q_last
    return q


# ---------------------------------------------------------------------------------------------
# exact limiting cases (fact 10)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rank", [P, P + 3])
@pytest.mark.parametrize("rows", [1, 2])
def test_lrkf_at_full_rank_without_process_noise_is_the_full_ekf(rank, rows):
    X, Y, mu0 = _stream(0, 40)
    lrkf, full = FactoredCovariance.lrkf(rank), FullCovariance()
    a = _run(lrkf, lrkf.prior(mu0, 0.8), X, Y, rows=rows)
    b = _run(full, full.prior(mu0, 0.8), X, Y, rows=rows)
    torch.testing.assert_close(a.mean, b.mean, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(lrkf.covariance(a), b.cov, rtol=1e-9, atol=1e-11)
    assert a.factors[0].shape == (rank, P)


def test_lrkf_at_full_rank_with_process_noise_keeps_the_surrogate_exactly():
    """d ≥ D: P_{d,+q} keeps (I − KH)Σ(I − KH)ᵀ + KKᵀ + qI, the whole of it (null space included)."""
    g = _gen(3)
    lrkf = FactoredCovariance.lrkf(P, init="zero")  # a rank-deficient factor: the stack has rank m
    belief = lrkf.transition(lrkf.prior(torch.zeros(P, dtype=F64), 1.0), 1.0, 0.3, None)
    Hw, ew = torch.randn(2, P, generator=g, dtype=F64), torch.randn(2, generator=g, dtype=F64)
    post, _ = lrkf.update(belief, Hw, ew)
    mean, grams, _ = _dense_paper_step(lrkf, belief, Hw, ew)
    torch.testing.assert_close(post.mean, mean, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(_gram(post.factors[0]), grams[0], rtol=1e-10, atol=1e-12)


def test_hilofi_with_a_zero_hidden_factor_is_bayesian_linear_regression_on_the_last_layer():
    X, Y, mu0 = _stream(1, 30)
    s_hidden, s_last = 0.7, 0.6
    var = torch.full((P,), s_hidden, dtype=F64)
    var[LAST] = s_last
    hilofi = FactoredCovariance.hilofi(HIDDEN, LAST, hidden_rank=3, hidden_init="zero")
    post = _run(hilofi, hilofi.prior(mu0, var), X, Y, rows=1)
    assert torch.equal(post.mean[HIDDEN], mu0[HIDDEN])  # K_h = 0: frozen
    assert torch.equal(post.factors[0], torch.zeros(3, D_H, dtype=F64))
    Phi = _features(mu0, X)  # the features of the frozen hidden layers
    precision = torch.eye(D_L, dtype=F64) / s_last + Phi.T @ Phi / R_OBS
    cov = torch.linalg.inv(precision)
    mean = cov @ (mu0[LAST] / s_last + Phi.T @ Y / R_OBS)
    torch.testing.assert_close(post.mean[LAST], mean, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(_gram(post.factors[1]), cov, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("hidden_rank,q_hidden", [(1, 0.0), (3, 0.01), (D_H, 0.002)])
@pytest.mark.parametrize("q_last", [0.0, 0.01])
def test_lolofi_with_full_last_rank_is_hilofi(hidden_rank, q_hidden, q_last):
    """LoLoFi's factors take the process noise through ``S`` and the gains only (eqs. 53, 77), so with
    ``d_l ≥ D_l`` its last block is HiLoFi's Cholesky block for any ``q_l`` (the HiLoFi compared has
    the same rule on its hidden factor)."""
    X, Y, mu0 = _stream(2, 25)
    hilofi = FactoredCovariance({"hidden": (HIDDEN, LowRankFactor(hidden_rank, keep_process_noise=False)),
                                 "last": (LAST, CholeskyFactor())})
    lolofi = FactoredCovariance.lolofi(HIDDEN, LAST, hidden_rank, last_rank=D_L)
    q = _block_noise(q_hidden, q_last)
    a = _run(hilofi, hilofi.prior(mu0, 0.5), X, Y, q=q)
    b = _run(lolofi, lolofi.prior(mu0, 0.5), X, Y, q=q)
    torch.testing.assert_close(a.mean, b.mean, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(_gram(a.factors[1]), _gram(b.factors[1]), rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(_gram(a.factors[0]), _gram(b.factors[0]), rtol=1e-8, atol=1e-10)
    # Alg. 3 as printed (P_{d,+q} on both factors) against Alg. 2 as printed (P_{d,+q} on the hidden one):
    # the same for q_l = 0 and any q_h (spec/hilofi.md, acceptance (c)); for q_l > 0 the printed
    # LoLoFi keeps +q_l I in the last projection, HiLoFi drops it (P4)
    printed = FactoredCovariance.lolofi(HIDDEN, LAST, hidden_rank, last_rank=D_L, keep_process_noise=True)
    hilofi_printed = FactoredCovariance.hilofi(HIDDEN, LAST, hidden_rank)
    c = _run(printed, printed.prior(mu0, 0.5), X, Y, q=q)
    d = _run(hilofi_printed, hilofi_printed.prior(mu0, 0.5), X, Y, q=q)
    if q_last:
        assert float((_gram(d.factors[1]) - _gram(c.factors[1])).abs().max()) > 1e-4
    else:
        torch.testing.assert_close(c.mean, d.mean, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(_gram(c.factors[0]), _gram(d.factors[0]), rtol=1e-8, atol=1e-10)
        torch.testing.assert_close(_gram(c.factors[1]), _gram(d.factors[1]), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("keep", [True, False])
def test_a_direction_the_rows_never_reach_keeps_its_variance_unless_noise_is_kept(keep):
    """Rows on the first two of four coordinates, a full-rank factor, random walk ``q`` per step: the
    two unreached coordinates keep ``v`` (``keep_process_noise=False``) or grow to ``v + T q`` in the
    factor (``True``, the ``+q I`` of eq. 102); the reached block is the same in both up to that
    bookkeeping of ``q`` (the gain sees ``CᵀC + q I`` either way)."""
    v, q, T = 0.5, 0.01, 30
    structure = FactoredCovariance({"all": (slice(None), LowRankFactor(4, keep_process_noise=keep))})
    belief = structure.prior(torch.zeros(4, dtype=F64), v)
    g = _gen(3)
    for _ in range(T):
        belief = structure.transition(belief, 1.0, q, None)
        Hw = torch.zeros(1, 4, dtype=F64)
        Hw[0, :2] = torch.randn(2, generator=g, dtype=F64)
        belief, _ = structure.update(belief, Hw, torch.randn(1, generator=g, dtype=F64))
    gram = _gram(belief.factors[0])
    expected = v + T * q if keep else v
    torch.testing.assert_close(gram[2:, 2:], expected * torch.eye(2, dtype=F64), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(gram[:2, 2:], torch.zeros(2, 2, dtype=F64), rtol=0, atol=1e-12)
    assert float(torch.linalg.eigvalsh(gram[:2, :2]).max()) < v  # the reached block contracted


# ---------------------------------------------------------------------------------------------
# one step against the corrected algorithms written densely (facts 3–6)
# ---------------------------------------------------------------------------------------------
def _best_rank(T, d):
    lam, V = torch.linalg.eigh(T)
    lam, V = lam.flip(-1)[..., :d], V.flip(-1)[..., :d]
    return (V * lam) @ V.mT


def _dense_paper_step(structure, belief, Hw, ew):
    """The corrected Alg. 2–4 from the predicted belief, densely: returns the mean, the new Gram of every
    block and ``S``."""
    blocks = list(zip(structure.indices, structure.kinds, belief.factors))
    predicted = [_gram(B) + belief.pending[b] * torch.eye(B.shape[-1], dtype=F64)
                 for b, (_, _, B) in enumerate(blocks)]
    S = torch.eye(Hw.shape[0], dtype=F64) + sum(Hw[:, ix] @ Sp @ Hw[:, ix].T
                                                for (ix, _, _), Sp in zip(blocks, predicted))
    mean = belief.mean.clone()
    grams = []
    for b, ((ix, kind, B), Sp) in enumerate(zip(blocks, predicted)):
        Hb = Hw[:, ix]
        K = Sp @ Hb.T @ torch.linalg.inv(S)  # the block of the EKF gain
        mean[ix] = mean[ix] + K @ ew
        A = torch.eye(B.shape[-1], dtype=F64) - K @ Hb
        if isinstance(kind, CholeskyFactor):
            inner = Sp if kind.exact_process_noise else _gram(B)  # the paper drops q_l (eq. 77)
            grams.append(A @ inner @ A.T + K @ K.T)
        else:
            T = A @ _gram(B) @ A.T + K @ K.T
            if kind.keep_process_noise:  # eq. 102's +q I (LoLoFi's factors drop it: eqs. 53, 77)
                T = T + belief.pending[b] * torch.eye(B.shape[-1], dtype=F64)
            grams.append(_best_rank(T, min(kind.rank, B.shape[-1])))
    return mean, grams, S


CONFIGS = {
    "hilofi": lambda: FactoredCovariance.hilofi(HIDDEN, LAST, 3),
    "hilofi-exact-q": lambda: FactoredCovariance.hilofi(HIDDEN, LAST, 3, exact_process_noise=True),
    "lolofi": lambda: FactoredCovariance.lolofi(HIDDEN, LAST, 3, 2),
    "lolofi-printed": lambda: FactoredCovariance.lolofi(HIDDEN, LAST, 3, 2, keep_process_noise=True),
    "lrkf": lambda: FactoredCovariance.lrkf(4),
    "lrkf-full": lambda: FactoredCovariance.lrkf(P),
}


def _random_belief(structure, seed, scale=0.7):
    """A belief with random factors (Cholesky blocks upper-triangular) and random mean."""
    g = _gen(seed)
    factors = []
    for ix, kind in zip(structure.indices, structure.kinds):
        D = len(range(P)[ix])
        if isinstance(kind, CholeskyFactor):
            factors.append(scale * torch.randn(D, D, generator=g, dtype=F64).triu())
        else:
            factors.append(scale * torch.randn(kind.rank, D, generator=g, dtype=F64))
    mean = torch.randn(P, generator=g, dtype=F64)
    return FactoredBelief(mean, tuple(factors), torch.zeros(len(factors), dtype=F64))


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), m=st.integers(1, 3), config=st.sampled_from(sorted(CONFIGS)),
       q_hidden=st.sampled_from([0.0, 0.02, 0.3]), q_last=st.sampled_from([0.0, 0.05]),
       decay=st.sampled_from([1.0, 0.9]))
def test_transition_then_update_is_the_corrected_paper_step(seed, m, config, q_hidden, q_last, decay):
    structure = CONFIGS[config]()
    belief = _random_belief(structure, seed)
    g = _gen(seed + 1)
    Hw, ew = torch.randn(m, P, generator=g, dtype=F64), torch.randn(m, generator=g, dtype=F64)
    predicted = structure.transition(belief, decay, _block_noise(q_hidden, q_last), None)
    post, info = structure.update(predicted, Hw, ew)
    mean, grams, S = _dense_paper_step(structure, predicted, Hw, ew)
    # fact 4 / 10d: the mean is the EKF's from the block-diagonal predicted covariance
    full = FullCovariance()
    ekf, ekf_info = full.update(full.prior(predicted.mean, 1.0)._replace(cov=structure.covariance(predicted)), Hw, ew)
    torch.testing.assert_close(post.mean, ekf.mean, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(post.mean, mean, rtol=1e-9, atol=1e-10)
    # fact 3: Shᵀ Sh = S; the evidence is the EKF's
    C = info.innovation_cholesky
    torch.testing.assert_close(C @ C.mT, S, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(info.log_det, ekf_info.log_det, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(info.mahalanobis2, ekf_info.mahalanobis2, rtol=1e-9, atol=1e-10)
    # facts 5 and 6: the surrogate Grams (Cholesky: q dropped unless exact; low rank: best rank d of +qI)
    for B, gram in zip(post.factors, grams):
        torch.testing.assert_close(_gram(B), gram, rtol=1e-8, atol=1e-10)
    assert torch.equal(post.pending, torch.zeros_like(post.pending))


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), q_last=st.sampled_from([0.01, 0.2]))
def test_the_printed_last_layer_gain_double_counts_process_noise(seed, q_last):
    """Alg. 2 line 17 as printed, K_lᵀ = V_l Σ_{l,t|t−1} + q_l V_l, is not the EKF gain (P2)."""
    structure = CONFIGS["hilofi"]()
    belief = structure.transition(_random_belief(structure, seed), 1.0, _block_noise(0.0, q_last), None)
    g = _gen(seed + 1)
    Hw, ew = torch.randn(1, P, generator=g, dtype=F64), torch.randn(1, generator=g, dtype=F64)
    post, info = structure.update(belief, Hw, ew)
    C = info.innovation_cholesky
    V_l = torch.cholesky_solve(Hw[:, LAST], C)  # S⁻¹ L
    U = belief.factors[1]
    printed = V_l @ (_gram(U) + q_last * torch.eye(D_L, dtype=F64)) + q_last * V_l
    corrected = V_l @ _gram(U) + q_last * V_l
    torch.testing.assert_close(post.mean[LAST], belief.mean[LAST] + corrected.T @ ew, rtol=1e-10, atol=1e-12)
    assert float((belief.mean[LAST] + printed.T @ ew - post.mean[LAST]).abs().max()) > 1e-8


# ---------------------------------------------------------------------------------------------
# invariants (facts 7–9)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", ["hilofi", "lolofi", "lrkf"])
def test_factors_keep_their_form_over_a_stream(config):
    structure = CONFIGS[config]()
    X, Y, mu0 = _stream(4, 20)
    belief = structure.prior(mu0, 0.5)
    for t in range(20):
        belief = _run(structure, belief, X[t:t + 1], Y[t:t + 1], q=_block_noise(1e-3, 1e-3))
        for kind, B in zip(structure.kinds, belief.factors):
            if isinstance(kind, CholeskyFactor):
                assert B.shape == (D_L, D_L)
                assert torch.equal(B, B.triu())
            else:
                assert B.shape[0] == kind.rank
                rows = B @ B.T
                norms = rows.diagonal()
                off = rows - torch.diag(norms)
                assert float(off.abs().max()) <= 1e-10 * float(norms.max())
                assert bool((norms[:-1] >= norms[1:] * (1 - 1e-12)).all())


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), config=st.sampled_from(["hilofi", "lolofi", "lrkf"]),
       q=st.sampled_from([0.0, 0.1]))
def test_the_update_depends_on_the_grams_only(seed, config, q):
    """Fact 8: B → O B (O orthogonal) changes no mean, Gram or gain."""
    structure = CONFIGS[config]()
    belief = structure.transition(_random_belief(structure, seed), 1.0, q, None)
    g = _gen(seed + 7)
    rotated = tuple(torch.linalg.qr(torch.randn(B.shape[0], B.shape[0], generator=g, dtype=F64)).Q @ B
                    for B in belief.factors)
    Hw, ew = torch.randn(2, P, generator=g, dtype=F64), torch.randn(2, generator=g, dtype=F64)
    a, _ = structure.update(belief, Hw, ew)
    b, _ = structure.update(belief._replace(factors=rotated), Hw, ew)
    torch.testing.assert_close(a.mean, b.mean, rtol=1e-10, atol=1e-12)
    for x, y in zip(a.factors, b.factors):
        torch.testing.assert_close(_gram(x), _gram(y), rtol=1e-9, atol=1e-12)


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), m=st.integers(1, 3),
       config=st.sampled_from(["hilofi", "lolofi", "lrkf", "lrkf-full"]))
def test_without_process_noise_every_block_shrinks(seed, m, config):
    """Fact 9: with q = 0, B_{t−1}ᵀB_{t−1} − B_tᵀB_t ⪰ 0 for every block."""
    structure = CONFIGS[config]()
    belief = _random_belief(structure, seed)
    g = _gen(seed + 3)
    Hw, ew = torch.randn(m, P, generator=g, dtype=F64), torch.randn(m, generator=g, dtype=F64)
    post, _ = structure.update(belief, Hw, ew)
    for before, after in zip(belief.factors, post.factors):
        diff = _gram(before) - _gram(after)
        assert float(torch.linalg.eigvalsh(diff).min()) >= -1e-10 * max(1.0, float(_gram(before).abs().max()))


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_negligible_rows_leave_the_belief_unchanged(config):
    """Fact 10e: R → ∞ (whitened rows → 0) with q = 0: K → 0, nothing moves."""
    structure = CONFIGS[config]()
    belief = _random_belief(structure, 5)
    g = _gen(6)
    Hw, ew = 1e-9 * torch.randn(2, P, generator=g, dtype=F64), 1e-9 * torch.randn(2, generator=g, dtype=F64)
    post, info = structure.update(belief, Hw, ew)
    torch.testing.assert_close(post.mean, belief.mean, rtol=0, atol=1e-15)
    for a, b in zip(post.factors, belief.factors):
        torch.testing.assert_close(_gram(a), _gram(b), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(info.log_det, torch.zeros((), dtype=F64), rtol=0, atol=1e-14)


# ---------------------------------------------------------------------------------------------
# predictive, hypotheses, transition
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_the_predictive_covariance_after_the_transition_is_the_next_updates_innovation(config):
    """Fact 13 (predicted-covariance convention): I + Hw Σ⁻ Hwᵀ from quadratic_form is the S of update."""
    structure = CONFIGS[config]()
    belief = structure.transition(_random_belief(structure, 8), 0.95, _block_noise(0.05, 0.2), None)
    g = _gen(9)
    J = torch.randn(3, 2, P, generator=g, dtype=F64)  # 3 points, 2 outputs
    quad = structure.quadratic_form(belief, J)
    dense = structure.covariance(belief)
    torch.testing.assert_close(quad, J @ dense @ J.mT, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(structure.quadratic_diagonal(belief, J), quad.diagonal(dim1=-2, dim2=-1),
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(structure.marginal_variance(belief), dense.diagonal(), rtol=1e-12, atol=1e-14)
    for i in range(3):
        _, info = structure.update(belief, J[i], torch.zeros(2, dtype=F64))
        C = info.innovation_cholesky
        torch.testing.assert_close(C @ C.mT, torch.eye(2, dtype=F64) + quad[i], rtol=1e-10, atol=1e-12)


def test_transition_scales_the_factors_and_accumulates_pending_noise():
    structure = FactoredCovariance.hilofi(HIDDEN, LAST, 2)
    belief = _random_belief(structure, 10)
    q = torch.linspace(0.0, 1.2, P, dtype=F64)
    once = structure.transition(belief, 0.8, q, None)
    twice = structure.transition(once, 0.5, 0.1, torch.ones(P, dtype=F64))
    for b, ix in enumerate(structure.indices):
        torch.testing.assert_close(once.pending[b], q[ix].mean())  # per-parameter noise: the block's mean
        torch.testing.assert_close(twice.pending[b], 0.25 * q[ix].mean() + 0.1)
    torch.testing.assert_close(twice.mean, 0.4 * belief.mean + 1.0)
    # exactly Σ ← g² Σ + Q for Q = blockdiag(q_b I)
    Q = torch.diag(torch.cat([torch.full((D_H,), float(q[HIDDEN].mean())), torch.full((D_L,), float(q[LAST].mean()))]))
    torch.testing.assert_close(structure.covariance(once), 0.64 * structure.covariance(belief) + Q.to(F64))
    # static dynamics: the belief itself; 'simple' inflation: (1 + α) Σ
    assert structure.transition(belief, 1.0, 0.0, None) is belief
    torch.testing.assert_close(structure.covariance(structure.inflate(once, "simple", 0.3)),
                               1.3 * structure.covariance(once))
    with pytest.raises(ValueError, match="simple"):
        structure.inflate(once, "bayesian", 0.3)


@pytest.mark.parametrize("config", ["hilofi", "lolofi", "lrkf"])
def test_a_stack_of_hypotheses_is_updated_as_each_alone(config):
    structure = CONFIGS[config]()
    beliefs = [structure.transition(_random_belief(structure, 20 + k), 1.0, 0.05 * k, None) for k in range(3)]
    stack = stack_beliefs(beliefs)
    g = _gen(30)
    Hw, ew = torch.randn(3, 2, P, generator=g, dtype=F64), torch.randn(3, 2, generator=g, dtype=F64)
    post, info = structure.update(stack, Hw, ew)
    J = torch.randn(3, 4, 1, P, generator=g, dtype=F64)
    quad = structure.quadratic_form(stack, J)
    for k in range(3):
        alone, alone_info = structure.update(beliefs[k], Hw[k], ew[k])
        mine = select_hypothesis(post, k)
        torch.testing.assert_close(mine.mean, alone.mean, rtol=1e-12, atol=1e-13)
        for a, b in zip(mine.factors, alone.factors):
            torch.testing.assert_close(_gram(a), _gram(b), rtol=1e-11, atol=1e-13)
        torch.testing.assert_close(info.log_det[k], alone_info.log_det, rtol=1e-12, atol=1e-13)
        torch.testing.assert_close(quad[k], structure.quadratic_form(beliefs[k], J[k]), rtol=1e-12, atol=1e-13)
        torch.testing.assert_close(structure.marginal_variance(stack)[k], structure.marginal_variance(beliefs[k]))
    # hypotheses from one prior share its factors
    prior = structure.prior(torch.zeros(2, P, dtype=F64), 0.5)
    assert torch.equal(prior.factors[0][0], prior.factors[0][1])
    assert prior.pending.shape == (2, len(structure.kinds))


# ---------------------------------------------------------------------------------------------
# moment matching and sampling
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_moment_match_of_identical_components_is_the_component(config):
    structure = CONFIGS[config]()
    one = structure.transition(_random_belief(structure, 40), 1.0, 0.1, None)
    matched = structure.moment_match(stack_beliefs([one] * 3), torch.tensor([0.3, -1.0, 2.0], dtype=F64))
    torch.testing.assert_close(matched.mean, one.mean, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(matched.pending, one.pending)
    torch.testing.assert_close(structure.covariance(matched), structure.covariance(one), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("config", ["hilofi-exact-q", "lrkf-full", "lolofi"])
def test_moment_match_has_the_mixture_moments(config):
    """Cholesky and full-rank blocks: the mixture's moments exactly; low-rank blocks: their best rank d."""
    structure = CONFIGS[config]()
    beliefs = [structure.transition(_random_belief(structure, 50 + k), 1.0, 0.1 * k, None) for k in range(3)]
    logw = torch.tensor([0.1, -0.4, 0.9], dtype=F64)
    matched = structure.moment_match(stack_beliefs(beliefs), logw)
    w = torch.softmax(logw, 0)
    mean = sum(wk * b.mean for wk, b in zip(w, beliefs))
    cov = sum(wk * (structure.covariance(b) + torch.outer(b.mean - mean, b.mean - mean)) for wk, b in zip(w, beliefs))
    torch.testing.assert_close(matched.mean, mean, rtol=1e-12, atol=1e-13)
    pending = sum(wk * b.pending for wk, b in zip(w, beliefs))
    torch.testing.assert_close(matched.pending, pending)
    for b, (ix, kind, B) in enumerate(zip(structure.indices, structure.kinds, matched.factors)):
        D = len(range(P)[ix])
        target = cov[ix, ix] - pending[b] * torch.eye(D, dtype=F64)
        if isinstance(kind, LowRankFactor) and kind.rank < D:
            target = _best_rank(target, kind.rank)
        torch.testing.assert_close(_gram(B), target, rtol=1e-9, atol=1e-11)


def test_samples_have_the_belief_moments():
    structure = FactoredCovariance.hilofi(HIDDEN, LAST, 2)
    belief = structure.transition(_random_belief(structure, 60), 1.0, _block_noise(0.05, 0.3), None)
    n = 100_000
    draws = structure.sample(belief, n, _gen(61))
    assert draws.shape == (n, P)
    cov = structure.covariance(belief)
    sd = cov.diagonal().sqrt()
    assert bool(((draws.mean(0) - belief.mean).abs() <= 5 * sd / math.sqrt(n)).all())
    centred = draws - belief.mean
    emp = centred.T @ centred / n
    tol = 5 * torch.sqrt((torch.outer(cov.diagonal(), cov.diagonal()) + cov ** 2) / n)
    assert bool(((emp - cov).abs() <= tol).all())
    # the same generator state gives the same draws; the view's sample is the structure's
    torch.testing.assert_close(Posterior(structure, belief).sample(7, _gen(1)), structure.sample(belief, 7, _gen(1)))


# ---------------------------------------------------------------------------------------------
# prior, failures, engine
# ---------------------------------------------------------------------------------------------
def test_prior_factors():
    mean = torch.zeros(P, dtype=F64)
    var = torch.linspace(0.5, 2.0, P, dtype=F64)
    # Cholesky and low rank with d ≥ D_b: exact, per-parameter variances included
    for structure in (FactoredCovariance.hilofi(HIDDEN, LAST, D_H), FactoredCovariance.lrkf(P + 2)):
        prior = structure.prior(mean, var)
        torch.testing.assert_close(structure.covariance(prior), torch.diag(var))
        assert torch.equal(prior.pending, torch.zeros(len(structure.kinds), dtype=F64))
    # d < D_b
    coords = FactoredCovariance.lrkf(3, init="coordinates").prior(mean, var).factors[0]
    expected = torch.zeros(3, P, dtype=F64)
    expected[range(3), range(3)] = var[:3].sqrt()
    torch.testing.assert_close(coords, expected)
    zero = FactoredCovariance.lrkf(P, init="zero").prior(mean, var).factors[0]
    assert torch.equal(zero, torch.zeros(P, P, dtype=F64))
    C = FactoredCovariance.lrkf(3, seed=5).prior(mean, 2.0).factors[0]
    torch.testing.assert_close(C @ C.T, 2.0 * torch.eye(3, dtype=F64))  # √v × orthonormal rows
    torch.testing.assert_close(C, FactoredCovariance.lrkf(3, seed=5).prior(mean, 2.0).factors[0])  # seeded
    assert not torch.allclose(_gram(C), _gram(FactoredCovariance.lrkf(3, seed=6).prior(mean, 2.0).factors[0]))
    Cv = FactoredCovariance.lrkf(3, seed=5).prior(mean, var).factors[0]  # O diag(√v), rows made orthogonal
    O = C / math.sqrt(2.0)
    torch.testing.assert_close(_gram(Cv), var.sqrt()[:, None] * _gram(O) * var.sqrt()[None, :])
    rows = Cv @ Cv.T
    torch.testing.assert_close(rows, torch.diag(rows.diagonal()), rtol=0, atol=1e-12)


def test_invalid_configurations_are_rejected():
    with pytest.raises(ValueError, match="rank"):
        LowRankFactor(0)
    with pytest.raises(ValueError, match="init"):
        LowRankFactor(2, init="identity")
    with pytest.raises(TypeError, match="keep_process_noise"):
        LowRankFactor(2, keep_process_noise="no")
    with pytest.raises(TypeError, match="kind"):
        FactoredCovariance({"a": (slice(None), "full")})
    with pytest.raises(ValueError, match="non-empty"):
        FactoredCovariance({})
    with pytest.raises(ValueError, match="partition"):
        FactoredCovariance.hilofi(slice(0, 5), slice(4, P), 2).prior(torch.zeros(P, dtype=F64), 1.0)
    with pytest.raises(ValueError, match="partition"):
        FactoredCovariance.hilofi(slice(0, 5), slice(6, P), 2).prior(torch.zeros(P, dtype=F64), 1.0)
    # index tensors are blocks too (any order)
    structure = FactoredCovariance.hilofi(torch.arange(0, P, 2), torch.arange(1, P, 2), 2)
    assert [B.shape for B in structure.prior(torch.zeros(P, dtype=F64), 1.0).factors] == [(2, 7), (6, 6)]


@pytest.mark.parametrize("config", ["hilofi", "lolofi", "lrkf"])
@pytest.mark.parametrize("bad", ["nan-ew", "inf-Hw", "nan-Hw"])
def test_a_failed_update_raises_and_leaves_the_belief_untouched(config, bad):
    structure = CONFIGS[config]()
    belief = structure.transition(_random_belief(structure, 70), 1.0, 0.1, None)
    snapshot = [t.clone() for t in (belief.mean, *belief.factors, belief.pending)]
    g = _gen(71)
    Hw, ew = torch.randn(2, P, generator=g, dtype=F64), torch.randn(2, generator=g, dtype=F64)
    if bad == "nan-ew":
        ew[1] = float("nan")
    elif bad == "inf-Hw":
        Hw[0, 2] = float("inf")
    else:
        Hw[1, P - 1] = float("nan")
    with pytest.raises(FilterStepError):
        structure.update(belief, Hw, ew)
    for before, now in zip(snapshot, (belief.mean, *belief.factors, belief.pending)):
        assert torch.equal(before, now)
    post, _ = structure.update(belief, torch.randn(2, P, generator=g, dtype=F64), torch.zeros(2, dtype=F64))
    assert torch.isfinite(post.mean).all()


@pytest.mark.parametrize("compiled", [True, False])
def test_run_filter_runs_the_structure_compiled_or_on_the_torch_path(compiled):
    """The compiled kernel claims the structure (skfilter/kernels/factored.py) when the kernels are on;
    on either path run_filter's step gives the full EKF at full rank."""
    from skfilter.kernels import compiled_kernels

    adapter = make_adapter(make_mlp(N_IN, (N_HID,), 1, "tanh", seed=0), torch.device("cpu"), F64, N_IN)
    X, Y, _ = _stream(80, 15)
    mu0 = adapter.initial_theta()
    likelihood = Gaussian(R_OBS)
    results = {}
    with compiled_kernels(compiled):
        for name, structure in [("full", FullCovariance()), ("lrkf", FactoredCovariance.lrkf(P)),
                                ("hilofi", FactoredCovariance.hilofi(adapter.blocks["hidden"], adapter.blocks["last"],
                                                                     2))]:
            parts = EngineParts(adapter, likelihood, structure, Dynamics(), Reference(mu0.clone(), 0.5))
            state = FilterState(structure.prior(mu0, 0.5), likelihood.initial_state(1, torch.device("cpu"), F64), 0)
            if name != "full":
                assert type(plan_for(parts, state, None)).__name__ == "FactoredPlan"
            state, _ = run_filter(parts, state, X, Y[:, None], batch_size=1)
            results[name] = (state.belief, structure)
    full_belief = results["full"][0]
    lrkf_belief, lrkf = results["lrkf"]
    torch.testing.assert_close(lrkf_belief.mean, full_belief.mean, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(lrkf.covariance(lrkf_belief), full_belief.cov, rtol=1e-9, atol=1e-11)
    assert torch.isfinite(results["hilofi"][0].mean).all()


@pytest.mark.parametrize("reset", ["prior", "moment-matched"])
def test_run_length_mixtures_batch_the_structure(reset):
    """BOCD's K hypotheses in one call: LRKF at full rank with q = 0 is the full EKF's mixture (the
    moment-matched reset is exact at full rank)."""
    from skfilter.runlength import initial_state, run_runlength

    adapter = make_adapter(make_mlp(N_IN, (N_HID,), 1, "tanh", seed=1), torch.device("cpu"), F64, N_IN)
    X, Y, _ = _stream(90, 12)
    mu0 = adapter.initial_theta()
    likelihood = Gaussian(R_OBS)
    out = {}
    for name, structure in [("full", FullCovariance()), ("lrkf", FactoredCovariance.lrkf(P)),
                            ("hilofi", FactoredCovariance.hilofi(adapter.blocks["hidden"], adapter.blocks["last"], 2))]:
        parts = EngineParts(adapter, likelihood, structure, Dynamics(), Reference(mu0.clone(), 0.5))
        prior = FilterState(structure.prior(mu0, 0.5), likelihood.initial_state(1, torch.device("cpu"), F64), 0)
        state, _ = run_runlength(parts, initial_state(prior), prior, X, Y[:, None], hazard=0.1, n_hypotheses=4,
                                 reset=reset)
        out[name] = (state, structure)
    full, (lrkf, structure) = out["full"][0], out["lrkf"]
    assert lrkf.filter.belief.mean.shape == (4, P)
    torch.testing.assert_close(lrkf.filter.belief.mean, full.filter.belief.mean, rtol=1e-8, atol=1e-9)
    torch.testing.assert_close(structure.covariance(lrkf.filter.belief), full.filter.belief.cov, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(lrkf.filter.log_weights, full.filter.log_weights, rtol=1e-8, atol=1e-9)
    assert math.isclose(lrkf.log_evidence, full.log_evidence, rel_tol=1e-9)
    assert torch.isfinite(out["hilofi"][0].filter.belief.mean).all()


@pytest.mark.parametrize("config", ["hilofi", "lolofi", "lrkf", "lrkf-full"])
def test_stiff_rows_never_make_a_predictive_variance_grow(config):
    """Rows of 1e1 … 1e10 (whitened): the square-root forms keep every step finite, and with q = 0 no
    J Σ Jᵀ grows beyond rounding (Structure.update's contract)."""
    structure = CONFIGS[config]()
    belief = structure.prior(torch.zeros(P, dtype=F64), 1.0)
    g = _gen(100)
    probes = torch.randn(20, 1, P, generator=g, dtype=F64)
    for t in range(30):
        scale = 10.0 ** (1 + t % 10)
        Hw = scale * torch.randn(1, P, generator=g, dtype=F64)
        before = structure.quadratic_diagonal(belief, probes)
        belief, info = structure.update(belief, Hw, torch.randn(1, generator=g, dtype=F64))
        after = structure.quadratic_diagonal(belief, probes)
        assert torch.isfinite(belief.mean).all() and torch.isfinite(info.log_det).all()
        assert bool((after <= before * (1 + 1e-9) + 1e-15).all())


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), m=st.integers(1, 3), rank=st.integers(1, 6),
       q=st.sampled_from([0.0, 0.01, 0.3]))
def test_lrkf_covariance_error_is_within_prop_f3(seed, m, rank, q):
    """Prop. F.3 (fact 12): ‖Σ_EKF − CᵀC‖_F ≤ q (2‖KH‖_F + ‖KH‖_F²) + √(Σ_{k>d} λ_k²), λ the eigenvalues of
    the surrogate (I − KH) CᵀC (I − KH)ᵀ + KKᵀ + qI, Σ_EKF the Joseph form of the predicted CᵀC + qI."""
    structure = FactoredCovariance.lrkf(rank)
    belief = structure.transition(_random_belief(structure, seed), 1.0, q, None)
    g = _gen(seed + 11)
    Hw, ew = torch.randn(m, P, generator=g, dtype=F64), torch.randn(m, generator=g, dtype=F64)
    post, _ = structure.update(belief, Hw, ew)
    C = belief.factors[0]
    predicted = structure.covariance(belief)
    S = torch.eye(m, dtype=F64) + Hw @ predicted @ Hw.T
    K = predicted @ Hw.T @ torch.linalg.inv(S)
    A = torch.eye(P, dtype=F64) - K @ Hw
    exact = A @ predicted @ A.T + K @ K.T
    surrogate = A @ _gram(C) @ A.T + K @ K.T + q * torch.eye(P, dtype=F64)
    lam = torch.linalg.eigvalsh(surrogate).flip(0)
    kh = torch.linalg.norm(K @ Hw)
    bound = q * (2 * kh + kh ** 2) + lam[rank:].square().sum().sqrt()
    assert float(torch.linalg.norm(exact - _gram(post.factors[0]))) <= float(bound) * (1 + 1e-9) + 1e-12


def test_a_zero_factor_gains_only_the_directions_the_rows_support():
    """P19: C_0 = 0 with q > 0 and d < D: P_{d,+q} keeps the m observed directions (σ² + q) and puts no q
    on arbitrary null-space directions (those rows stay zero); the mean moves by the q-gain."""
    structure = FactoredCovariance.lrkf(3, init="zero")
    belief = structure.transition(structure.prior(torch.zeros(P, dtype=F64), 1.0), 1.0, 0.5, None)
    g = _gen(12)
    Hw, ew = torch.randn(1, P, generator=g, dtype=F64), torch.randn(1, generator=g, dtype=F64)
    post, info = structure.update(belief, Hw, ew)
    C = post.factors[0]
    assert torch.equal(C[1:], torch.zeros(2, P, dtype=F64))
    h = Hw[0]
    s = 1.0 + 0.5 * h @ h
    torch.testing.assert_close(post.mean, 0.5 * h * ew[0] / s)  # K = q hᵀ / S
    kt = 0.5 * h / s  # the only row of the stack: Kᵀ
    torch.testing.assert_close(_gram(C), (kt @ kt + 0.5) * torch.outer(kt, kt) / (kt @ kt))
    torch.testing.assert_close(info.log_det, torch.log(s))
