"""The fast paths of the dense and diagonal EKF updates (issue 18): the compiled product ``H Σ`` of
:mod:`skfilter.posteriors.full`, and the dead *workspace* belief whose memory a step reuses.

* the compiled product agrees with the torch one to rounding, and every hypothesis of a stack gets
  exactly what it gets alone;
* a step given a workspace returns the same belief, bit for bit, as one without, writes it into the
  workspace's memory, and never touches its input beliefs; the estimators never change a belief they
  have handed out;
* float32 runs on every path.

No timing here: speed is measured by ``python -m skfilter.benchmarks speed``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from skfilter import EKFClassifier, EKFRegressor
from skfilter.posteriors import DiagonalCovariance, FullCovariance
from skfilter.posteriors import diagonal as diagonal_module
from skfilter.posteriors import full as full_module
from skfilter.posteriors.full import FullBelief

F64, F32 = torch.float64, torch.float32


@pytest.fixture
def kernel_everywhere(monkeypatch):
    """The compiled product for every size, row count and thread count (skipped without numba)."""
    pytest.importorskip("numba")
    monkeypatch.setattr(full_module, "_KERNEL_MIN_WORK", 0)
    monkeypatch.setattr(full_module, "_KERNEL_MAX_ROWS", 1 << 30)
    monkeypatch.setattr(full_module, "_KERNEL_MAX_THREADS", 1 << 30)
    if full_module._compiled_kernel() is None:
        pytest.skip("compiled kernels are switched off")


@pytest.fixture
def kernel_nowhere(monkeypatch):
    monkeypatch.setattr(full_module, "_KERNEL_MAX_ROWS", 0)


def _spd(P, rng, dtype=F64, batch=()):
    A = torch.as_tensor(rng.normal(size=(*batch, P, P)) / np.sqrt(P))
    return (A @ A.mT + 0.1 * torch.eye(P, dtype=F64)).to(dtype)


def _clone(belief):
    return type(belief)(*[v.clone() for v in belief])


def _equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------------------------------------
# the compiled product H Σ
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("P", [1, 3, 4, 7, 33, 130])
@pytest.mark.parametrize("m", [1, 2, 5, 16])
def test_compiled_product_agrees_with_torch(kernel_everywhere, P, m, dtype):
    rng = np.random.default_rng(P * 100 + m)
    cov = _spd(P, rng, dtype)
    H = torch.as_tensor(rng.normal(size=(m, P))).to(dtype)
    got = full_module._times_cov(H, cov)
    assert got.dtype == dtype and got.shape == (m, P)
    exact = H.double() @ cov.double()
    scale = H.double().abs() @ cov.double().abs()  # the rounding scale of every entry
    assert float(((got.double() - exact).abs() / scale).max()) <= 4 * torch.finfo(dtype).eps * max(P, 4) ** 0.5


def test_compiled_product_of_a_stack_is_each_alone(kernel_everywhere):
    rng = np.random.default_rng(1)
    K, m, P = 3, 4, 37
    cov = _spd(P, rng, batch=(K,))
    H = torch.as_tensor(rng.normal(size=(K, m, P)))
    stacked = full_module._times_cov(H, cov)
    for k in range(K):
        assert torch.equal(stacked[k], full_module._times_cov(H[k], cov[k]))


def test_compiled_product_skips_what_it_cannot_serve(kernel_everywhere):
    rng = np.random.default_rng(2)
    cov = _spd(6, rng)
    H = torch.as_tensor(rng.normal(size=(2, 6)))
    assert full_module._uses_kernel(H, cov)
    wide = torch.zeros(6, 12, dtype=F64)
    wide[:, ::2] = cov
    assert not full_module._uses_kernel(H, wide[:, ::2])  # a strided view
    assert not full_module._uses_kernel(H.to(F32), cov)  # mixed dtypes
    assert not full_module._uses_kernel(H, cov.requires_grad_())  # autograd
    cov = cov.detach()
    assert not full_module._uses_kernel(H.expand(2, 2, 6), cov)  # the rows batched, Σ not


@pytest.mark.parametrize("m", [1, 3])
def test_full_update_compiled_equals_torch(m, monkeypatch):
    """A stream of updates with the compiled product and with torch's agree to rounding."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(3 + m)
    P, T = 41, 25
    Hs = torch.as_tensor(rng.normal(size=(T, m, P)) * 0.3)
    es = torch.as_tensor(rng.normal(size=(T, m)))
    structure = FullCovariance()
    results = []
    for force in (True, False):
        with monkeypatch.context() as mp:
            mp.setattr(full_module, "_KERNEL_MIN_WORK", 0 if force else 1 << 62)
            mp.setattr(full_module, "_KERNEL_MAX_THREADS", 1 << 30)
            belief = structure.prior(torch.zeros(P, dtype=F64), 1.0)
            for H, e in zip(Hs, es):
                belief, _ = structure.update(belief, H, e)
            results.append(belief)
    torch.testing.assert_close(results[0].mean, results[1].mean, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(results[0].cov, results[1].cov, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------------------------------------
# workspace reuse: the same belief, in the dead belief's memory, inputs untouched
# ---------------------------------------------------------------------------------------------
def _structures():
    return {"full": FullCovariance(), "vd": DiagonalCovariance("vd", "paper"),
            "vd-exact": DiagonalCovariance("vd", "exact"), "fd": DiagonalCovariance("fd")}


def _reuse_stream(structure, prior, Hs, es, reuse):
    """Updates in order; with ``reuse`` each step gets the belief of two steps back as its
    workspace (as :func:`skfilter.filtering.run_filter` does) and the memory reuse is checked."""
    belief, previous = prior, None
    for H, e in zip(Hs, es):
        workspace = previous if reuse else None
        held = (_clone(belief), _clone(previous) if previous is not None else None)
        new, _ = structure.update(belief, H, e, workspace=workspace)
        assert _equal(belief, held[0])  # the input belief is never written
        if workspace is not None:
            big = "cov" if isinstance(new, FullBelief) else "var"
            assert getattr(new, big).data_ptr() == getattr(workspace, big).data_ptr()  # written in place
        previous, belief = belief, new
    return belief


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("K", [None, 3])
@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("kind, compiled", [("full", False), ("full", True), ("vd", False),
                                            ("vd-exact", False), ("fd", False)])
def test_workspace_reuse_gives_the_same_beliefs(kind, compiled, m, K, dtype, monkeypatch):
    monkeypatch.setattr(diagonal_module, "_REUSE_MIN_ENTRIES", 0)  # reuse at any size
    if compiled:
        pytest.importorskip("numba")
        monkeypatch.setattr(full_module, "_KERNEL_MIN_WORK", 0)
        monkeypatch.setattr(full_module, "_KERNEL_MAX_THREADS", 1 << 30)
    rng = np.random.default_rng(11)
    P, T = 23, 12
    batch = () if K is None else (K,)
    Hs = torch.as_tensor(rng.normal(size=(T, *batch, m, P)) * 0.4).to(dtype)
    es = torch.as_tensor(rng.normal(size=(T, *batch, m))).to(dtype)
    structure = _structures()[kind]
    prior = structure.prior(torch.as_tensor(rng.normal(size=(*batch, P)) * 0.1).to(dtype), 0.5)
    plain = _reuse_stream(structure, prior, Hs, es, reuse=False)
    reused = _reuse_stream(structure, prior, Hs, es, reuse=True)
    assert all(v.dtype == dtype for v in reused)
    assert _equal(plain, reused)
    for v in reused:
        assert torch.isfinite(v).all()


def test_diagonal_reuses_the_workspace_for_large_models_only():
    """P-sized arrays are reused where an allocation costs more than the check (large ``P``)."""
    for P, reused in ((diagonal_module._REUSE_MIN_ENTRIES, True), (501, False)):
        structure = DiagonalCovariance("fd")
        prior = structure.prior(torch.zeros(P, dtype=F64), 1.0)
        dead = _clone(prior)
        Hw, ew = torch.full((1, P), 1.0 / P, dtype=F64), torch.ones(1, dtype=F64)
        new, _ = structure.update(prior, Hw, ew, workspace=dead)
        assert (new.var.data_ptr() == dead.var.data_ptr()) is reused
        assert (new.mean.data_ptr() == dead.mean.data_ptr()) is reused
        assert _equal(new, structure.update(prior, Hw, ew)[0])


def test_workspace_sharing_memory_with_the_input_is_not_used(monkeypatch):
    """A workspace whose arrays alias the input belief's (a view of the same memory) is ignored."""
    monkeypatch.setattr(diagonal_module, "_REUSE_MIN_ENTRIES", 0)
    rng = np.random.default_rng(5)
    P = 9
    Hw, ew = torch.as_tensor(rng.normal(size=(2, P))), torch.as_tensor(rng.normal(size=2))
    for structure in _structures().values():
        belief = structure.prior(torch.zeros(P, dtype=F64), 1.0)
        alias = type(belief)(*[v.view(v.shape) for v in belief])  # other tensors, same memory
        held = _clone(belief)
        new, _ = structure.update(belief, Hw, ew, workspace=alias)
        assert _equal(belief, held)
        expected, _ = structure.update(held, Hw, ew)
        assert _equal(new, expected)


def test_full_update_float32_close_to_float64(kernel_everywhere):
    rng = np.random.default_rng(8)
    P, m = 30, 3
    cov = _spd(P, rng)
    mean = torch.as_tensor(rng.normal(size=P))
    Hw, ew = torch.as_tensor(rng.normal(size=(m, P)) * 0.3), torch.as_tensor(rng.normal(size=m))
    structure = FullCovariance()
    b64, _ = structure.update(FullBelief(mean, cov), Hw, ew)
    b32, info = structure.update(FullBelief(mean.float(), cov.float()), Hw.float(), ew.float(),
                                 workspace=FullBelief(torch.empty(P, dtype=F32), torch.empty(P, P, dtype=F32)))
    assert b32.mean.dtype == b32.cov.dtype == F32 and info.log_det.dtype == F32
    torch.testing.assert_close(b32.mean.double(), b64.mean, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(b32.cov.double(), b64.cov, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# estimators: the fast paths inside fit, and beliefs handed out stay as they were
# ---------------------------------------------------------------------------------------------
def _digits(n):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X[:n], y[:n]


def test_classifier_compiled_product_equals_torch_and_handed_out_beliefs_stay(monkeypatch):
    """``EKFClassifier`` with ``P = 610``, ten outputs a row: the compiled product serves every step
    (and every ``predict_proba``); the results equal torch's to rounding. A belief handed out
    (``posterior_``) is never written by later calls, although steps reuse dead beliefs' memory."""
    pytest.importorskip("numba")
    monkeypatch.setattr(full_module, "_KERNEL_MAX_THREADS", 1 << 30)
    X, y = _digits(60)
    fits = {}
    for compiled in (True, False):
        with monkeypatch.context() as mp:
            if not compiled:
                mp.setattr(full_module, "_KERNEL_MAX_ROWS", 0)
            est = EKFClassifier(hidden_layer_sizes=(8,), random_state=0).fit(X[:30], y[:30])
            handed = est.posterior_.belief
            snapshot = _clone(handed)
            est.partial_fit(X[30:], y[30:])
            assert _equal(handed, snapshot)
            fits[compiled] = (est.posterior_.belief, est.predict_proba(X[:10]))
    (b1, p1), (b0, p0) = fits[True], fits[False]
    torch.testing.assert_close(b1.mean, b0.mean, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(b1.cov, b0.cov, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(p1, p0, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("covariance", ["full", "vd", "fd"])
def test_regressor_float32_with_reuse(covariance):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(40, 4))
    y = np.sin(X).sum(1)
    est = EKFRegressor(hidden_layer_sizes=(6,), covariance=covariance, obs_variance=0.1, dtype="float32",
                       random_state=0)
    est.fit(X[:20], y[:20])
    handed = est.posterior_.belief
    snapshot = _clone(handed)
    est.partial_fit(X[20:], y[20:])
    assert _equal(handed, snapshot)
    belief = est.posterior_.belief
    assert all(v.dtype == F32 for v in belief)
    assert np.isfinite(est.predict(X)).all()


@pytest.mark.parametrize("K", [None, 2])
@pytest.mark.parametrize("g, Q", [(1.0, 0.0), (0.9, 0.0), (1.0, 0.01), (0.9, 0.01), (0.9, "vector")])
def test_transition_leaves_its_input_alone(g, Q, K):
    """``μ ← g μ + b``, ``Σ ← g² Σ + diag(Q)`` (the diagonal added on the new matrix, never on the
    input's)."""
    rng = np.random.default_rng(9)
    P = 6
    batch = () if K is None else (K,)
    if Q == "vector":
        Q = torch.as_tensor(rng.uniform(0.01, 0.1, size=P))
    shift = torch.as_tensor(rng.normal(size=P))
    mean = torch.as_tensor(rng.normal(size=(*batch, P)))
    for structure in _structures().values():
        belief = structure.prior(mean, 0.5)
        if isinstance(belief, FullBelief):
            belief = FullBelief(belief.mean, _spd(P, rng, batch=batch))
        held = _clone(belief)
        new = structure.transition(belief, g, Q, shift)
        assert _equal(belief, held)
        torch.testing.assert_close(new.mean, g * held.mean + shift, rtol=1e-15, atol=0)
        dense = structure.covariance(new)
        expected = g * g * structure.covariance(held) + torch.diag_embed(torch.as_tensor(Q, dtype=F64).expand(P))
        torch.testing.assert_close(dense, expected, rtol=1e-15, atol=0)
