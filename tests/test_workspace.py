"""Reused memory in the LoFi step (issue 18: no per-step allocation of ``P``-sized arrays).

* a step given a dead *workspace* belief (as :func:`skfilter.filtering.run_filter` passes the belief
  of two steps back) returns the same belief, bit for bit, as one without, written into the
  workspace's memory; it never writes into its inputs, nor into a workspace array that a live belief
  shares (spherical LoFi's ``η``, ``svd='orth'``'s ``Υ``);
* a belief handed to the caller (``posterior_.belief``, a state an ``on_step`` callback keeps) is
  never changed by later steps;
* the passes over column blocks (:func:`skfilter._array_ops.chunk_width`) agree with one block to
  rounding, on the NumPy and torch paths, for stacks of hypotheses and in float32;
* the reused temporaries (:class:`skfilter._array_ops.Scratch`) never leak into a result, are not
  pickled, and a warm step allocates no ``P``-sized NumPy array (tracemalloc);
* ``out=`` of the MLP Jacobian and of the likelihoods' whitening gives the same arrays;
* the predictive ``J Σ Jᵀ`` stays differentiable in ``J``.

No timings here: the speed is measured by ``python -m skfilter.benchmarks speed``.
"""

from __future__ import annotations

import pickle
import tracemalloc

import numpy as np
import pytest
import torch

from skfilter import LoFiClassifier, LoFiRegressor, _array_ops
from skfilter._array_ops import NUMPY_OPS, SCRATCH, TORCH_OPS, may_overlap
from skfilter.filtering import filter_step, run_filter
from skfilter.likelihoods import Bernoulli, Categorical, Gaussian, Poisson
from skfilter.models import make_adapter, make_mlp
from skfilter.posteriors import LowRankPrecision
from skfilter.posteriors._base import reusable_array
from skfilter.posteriors import lofi as lofi_module
from skfilter.posteriors.lofi import lofi_update, lowrank_quadratic_form

DTYPES = [torch.float64, torch.float32]


def _snapshot(belief):
    return [t.clone() if isinstance(t, torch.Tensor) else t for t in belief]


def _same(belief, snapshot):
    return all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(belief, snapshot))


def _rows(structure, P, m, steps, dtype, seed, batch=(), host=True):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        Hw = torch.randn(*batch, m, P, generator=g, dtype=dtype) / P ** 0.5
        ew = torch.randn(*batch, m, generator=g, dtype=dtype)
        if host and structure.cpu_backend == "numpy" and not batch:
            Hw, ew = Hw.numpy(), ew.numpy()
        out.append((Hw, ew))
    return out


def _stream(structure, prior, rows, reuse):
    """Beliefs after each row block, passing the belief of two steps back as the workspace (the
    initial belief, held by the caller, never), as run_filter does; inputs checked untouched."""
    belief, previous, beliefs = prior, None, []
    for Hw, ew in rows:
        workspace = previous if reuse and previous is not prior else None
        before = _snapshot(belief)
        Hw0, ew0 = (Hw.copy(), ew.copy()) if isinstance(Hw, np.ndarray) else (Hw.clone(), ew.clone())
        new, _ = structure.update(belief, Hw, ew, workspace=workspace)
        assert _same(belief, before), "an update wrote into its input belief"
        assert np.array_equal(np.asarray(Hw), np.asarray(Hw0)) and np.array_equal(np.asarray(ew), np.asarray(ew0))
        if workspace is not None and structure.svd == "full":  # the new belief lives in the dead one's memory
            assert new.mean.data_ptr() == workspace.mean.data_ptr()
            if structure.rank:
                assert new.low_rank.data_ptr() == workspace.low_rank.data_ptr()
            if structure.variant == "diagonal":
                assert new.diagonal.data_ptr() == workspace.diagonal.data_ptr()
        previous, belief = belief, new
        beliefs.append(_snapshot(new))
    return beliefs


STRUCTURES = {
    "diagonal": dict(rank=3),
    "diagonal-rank0": dict(rank=0),
    "spherical": dict(rank=3, variant="spherical"),
    "spherical-orth": dict(rank=3, variant="spherical", svd="orth"),
    "diagonal-torch": dict(rank=3, cpu_backend="torch"),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", STRUCTURES)
@pytest.mark.parametrize("P", [40, 3000])
def test_workspace_gives_the_same_beliefs_bit_for_bit(name, P, dtype, monkeypatch):
    monkeypatch.setattr(_array_ops, "CHUNK_ELEMENTS", 4096)  # several blocks at P = 3000
    monkeypatch.setattr(lofi_module, "REUSE_MIN_BYTES", 0)  # small beliefs too go to the workspace
    structure = LowRankPrecision(**STRUCTURES[name])
    prior = structure.prior(torch.zeros(P, dtype=dtype), 0.5)
    rows = _rows(structure, P, 2, 8, dtype, seed=P)
    with_reuse = _stream(structure, prior, rows, reuse=True)
    without = _stream(structure, prior, rows, reuse=False)
    for a, b in zip(with_reuse, without):
        assert _same(a, b)


def test_workspace_for_stacks_of_hypotheses(monkeypatch):
    monkeypatch.setattr(_array_ops, "CHUNK_ELEMENTS", 4096)
    monkeypatch.setattr(lofi_module, "REUSE_MIN_BYTES", 0)
    structure = LowRankPrecision(rank=2)
    prior = structure.prior(torch.zeros(3, 2000, dtype=torch.float64), 0.5)
    rows = _rows(structure, 2000, 3, 6, torch.float64, seed=1, batch=(3,))
    for a, b in zip(_stream(structure, prior, rows, True), _stream(structure, prior, rows, False)):
        assert _same(a, b)


def test_workspace_arrays_are_checked():
    like = torch.zeros(5, dtype=torch.float64)
    good = torch.empty(5, dtype=torch.float64)
    assert reusable_array(good, like) is good
    assert reusable_array(torch.empty(6, dtype=torch.float64), like) is None
    assert reusable_array(torch.empty(5, dtype=torch.float32), like) is None
    assert reusable_array(torch.empty(10, dtype=torch.float64)[::2], like) is None
    assert reusable_array(torch.empty(5, dtype=torch.float64, requires_grad=True), like) is None
    assert reusable_array(good, like, avoid=[good[2:]]) is None  # shares memory with an input
    assert reusable_array(good, like, avoid=[good.numpy()[1:3]]) is None
    assert reusable_array(None, like) is None
    assert may_overlap(good, good[1:]) and not may_overlap(good, like)


@pytest.mark.parametrize("variant", ["diagonal", "spherical"])
def test_shared_fields_of_the_workspace_are_never_written(variant, monkeypatch):
    """Spherical LoFi passes η through: the workspace shares it with the live belief."""
    monkeypatch.setattr(lofi_module, "REUSE_MIN_BYTES", 0)
    structure = LowRankPrecision(rank=2, variant=variant)
    prior = structure.prior(torch.zeros(30, dtype=torch.float64), 0.5)
    (H1, e1), (H2, e2) = _rows(structure, 30, 2, 2, torch.float64, seed=3)
    b1, _ = structure.update(prior, H1, e1)
    # a workspace whose fields are the live belief's own arrays: nothing of it may be written
    held = _snapshot(b1)
    b2, _ = structure.update(b1, H2, e2, workspace=b1)
    assert _same(b1, held)
    ref, _ = structure.update(b1, H2, e2)
    assert _same(b2, _snapshot(ref))
    # a workspace sharing only η with the input
    ws = b1._replace(mean=torch.empty_like(b1.mean), low_rank=torch.empty_like(b1.low_rank))
    b3, _ = structure.update(b1, H2, e2, workspace=ws)
    assert _same(b1, held) and _same(b3, _snapshot(ref))
    assert (b3.diagonal.data_ptr() == b1.diagonal.data_ptr()) == (variant == "spherical")


# ---------------------------------------------------------------------------------------------
# beliefs handed out are values
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_belief_handed_out_is_never_changed(dtype):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 4)), np.arange(60) % 3
    est = LoFiClassifier(hidden_layer_sizes=(6,), rank=3, dtype=dtype, random_state=0).fit(X[:5], y[:5])
    held = est.posterior_.belief
    kept = _snapshot(held)
    est.partial_fit(X[5:30], y[5:30])  # many steps: beliefs two steps back are reused
    for i in range(30, 40):  # and row by row, as a streaming user calls it
        est.partial_fit(X[i:i + 1], y[i:i + 1])
    assert _same(held, kept)
    # states an on_step callback keeps are never reused
    parts = est._engine_parts()
    Xt = torch.as_tensor(X[40:], dtype=held.mean.dtype)
    Yt = torch.nn.functional.one_hot(torch.as_tensor(y[40:]), 3).to(held.mean.dtype)
    seen = []
    run_filter(parts, est.filter_state_, Xt, Yt, on_step=lambda s, o: seen.append((s.belief, _snapshot(s.belief))))
    assert len(seen) == 20
    for belief, snap in seen:
        assert _same(belief, snap)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_engine_stream_with_workspace_equals_without(dtype, monkeypatch):
    """filter_step with the workspace of two steps back, against the same steps without one."""
    monkeypatch.setattr(lofi_module, "REUSE_MIN_BYTES", 0)
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(30, 5)), rng.normal(size=30)
    est = LoFiRegressor(hidden_layer_sizes=(8,), rank=3, dtype=str(dtype)[6:], random_state=0).fit(X[:3], y[:3])
    parts = est._engine_parts()
    Xt, Yt = torch.as_tensor(X, dtype=dtype), torch.as_tensor(y[:, None], dtype=dtype)

    def stream(reuse):
        state, previous, out = est.filter_state_, None, []
        initial = state.belief
        for i in range(3, 30):
            workspace = previous if reuse and previous is not None and previous is not initial else None
            new, _ = filter_step(parts, state, Xt[i:i + 1], Yt[i:i + 1], workspace=workspace)
            previous, state = state.belief, new
            out.append(_snapshot(new.belief))
        return out

    for a, b in zip(stream(True), stream(False)):
        assert _same(a, b)


# ---------------------------------------------------------------------------------------------
# column blocks against one block
# ---------------------------------------------------------------------------------------------
def _one_update(ops, dtype, P, L, m, variant, batch=(), stiff=False, seed=0):
    g = np.random.default_rng(seed)
    np_dtype = np.float64 if dtype == torch.float64 else np.float32
    mean = g.standard_normal(batch + (P,)).astype(np_dtype)
    diag = (g.random(batch + (P,) if variant == "diagonal" else batch + (1,)) + 0.5).astype(np_dtype)
    W = (g.standard_normal(batch + (L, P)) / P ** 0.5).astype(np_dtype)
    H = (g.standard_normal(batch + (m, P)) / P ** 0.5 * (1e6 if stiff else 1.0)).astype(np_dtype)
    e = g.standard_normal(batch + (m,)).astype(np_dtype)
    args = (mean, diag, W, H, e)
    if ops is TORCH_OPS:
        args = tuple(torch.from_numpy(a) for a in args)
    return lofi_update(ops, *args, variant=variant), args


@pytest.mark.parametrize("stiff", [False, True])
@pytest.mark.parametrize("variant", ["diagonal", "spherical"])
@pytest.mark.parametrize("ops", [NUMPY_OPS, TORCH_OPS], ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_column_blocks_agree_with_one_block(ops, dtype, variant, stiff, monkeypatch):
    P, L, m = 5000, 4, 3
    batch = () if ops is NUMPY_OPS else (2,)
    (mean1, diag1, W1, F1), _ = _one_update(ops, dtype, P, L, m, variant, batch, stiff)
    monkeypatch.setattr(_array_ops, "CHUNK_ELEMENTS", 4096)  # blocks of 292 columns
    assert _array_ops.chunk_width(2 * (L + m), P, mean1) < P
    (mean2, diag2, W2, F2), _ = _one_update(ops, dtype, P, L, m, variant, batch, stiff)
    rtol = 1e-12 if dtype == torch.float64 else 2e-5
    for a, b in [(mean1, mean2), (diag1, diag2), (F1, F2)]:
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol * np.abs(a).max())
    # W up to the sign of each row: compare W Wᵀ-like products along the rows
    a, b = np.asarray(W1, dtype=np.float64), np.asarray(W2, dtype=np.float64)
    np.testing.assert_allclose(np.abs(b), np.abs(a), rtol=rtol * 10, atol=rtol * 10 * np.abs(a).max())


@pytest.mark.parametrize("per_parameter", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_predict_step_blocks_agree(dtype, per_parameter, monkeypatch):
    """The exact DLR predict with process noise (LowRankPrecision.transition) over column blocks."""
    P = 1200
    structure = LowRankPrecision(rank=3)
    belief = structure.prior(torch.zeros(P, dtype=dtype), 0.5)
    for Hw, ew in _rows(structure, P, 2, 3, dtype, seed=7):
        belief, _ = structure.update(belief, Hw, ew)
    g = torch.Generator().manual_seed(8)
    Q = torch.rand(P, generator=g, dtype=dtype) * 0.01 if per_parameter else 0.01
    held = _snapshot(belief)
    one = structure.transition(belief, 0.9, Q, None)
    monkeypatch.setattr(_array_ops, "CHUNK_ELEMENTS", 512)
    assert _array_ops.chunk_width(6, P, belief.mean) < P
    blocks = structure.transition(belief, 0.9, Q, None)
    assert _same(belief, held)  # the input is left alone
    rtol = 1e-13 if dtype == torch.float64 else 1e-5
    for a, b in zip(one[:3], blocks[:3]):
        torch.testing.assert_close(b, a, rtol=rtol, atol=rtol * float(a.abs().max()))
    # the predicted precision is the exact one: (g² Σ + Q)⁻¹
    cov = structure.covariance(belief)
    expected = 0.81 * cov + torch.diag(Q if per_parameter else torch.full((P,), Q, dtype=dtype))
    if dtype == torch.float64:
        torch.testing.assert_close(structure.covariance(blocks), expected, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("ops", [NUMPY_OPS, TORCH_OPS], ids=lambda o: o.name)
def test_quadratic_form_blocks_agree(ops, monkeypatch):
    g = np.random.default_rng(2)
    P, L = 1500, 3
    J = g.standard_normal((2, 3, P))
    diag = g.random(P) + 0.5
    W = g.standard_normal((L, P)) / P ** 0.5
    args = (J, diag, W) if ops is NUMPY_OPS else tuple(torch.from_numpy(a) for a in (J, diag, W))
    q1, _ = lowrank_quadratic_form(ops, *args)
    monkeypatch.setattr(_array_ops, "CHUNK_ELEMENTS", 1024)
    assert _array_ops.chunk_width(2 * 3 + L, P, J) < P
    q2, _ = lowrank_quadratic_form(ops, *args)
    cov = np.linalg.inv(np.diag(diag) + W.T @ W)
    expected = np.stack([J[i] @ cov @ J[i].T for i in range(2)])
    for q in (q1, q2):
        np.testing.assert_allclose(np.asarray(q), expected, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(q2), np.asarray(q1), rtol=1e-13, atol=1e-13 * float(np.abs(np.asarray(q1)).max()))


def test_quadratic_form_stays_differentiable():
    structure = LowRankPrecision(rank=2)
    prior = structure.prior(torch.zeros(20, dtype=torch.float64), 0.5)
    (H, e), = _rows(structure, 20, 2, 1, torch.float64, seed=4)
    belief, _ = structure.update(prior, H, e)
    J = torch.randn(1, 2, 20, dtype=torch.float64, requires_grad=True)
    quad = structure.quadratic_form(belief, J)
    (grad,) = torch.autograd.grad(quad.sum(), J)
    # Σ_ab (J Σ Jᵀ)_ab = uᵀ Σ u with u = Σ_c J_c: the gradient is 2 Σ u for every row c
    expected = (2.0 * J.detach().sum(1) @ structure.covariance(belief)).unsqueeze(1).expand_as(J)
    torch.testing.assert_close(grad, expected)


# ---------------------------------------------------------------------------------------------
# the temporaries
# ---------------------------------------------------------------------------------------------
def test_results_never_share_memory_with_temporaries():
    structure = LowRankPrecision(rank=3)
    prior = structure.prior(torch.zeros(500, dtype=torch.float64), 0.5)
    belief = prior
    for Hw, ew in _rows(structure, 500, 2, 4, torch.float64, seed=5):
        belief, _ = structure.update(belief, Hw, ew)
        J = torch.randn(2, 1, 500, dtype=torch.float64)
        quad = structure.quadratic_form(belief, J)
        table = SCRATCH._table(structure)
        assert table  # the structure keeps its temporaries
        for buf in table.values():
            for t in list(belief[:3]) + [quad]:
                assert not may_overlap(buf, t)
    state = pickle.dumps(structure)
    assert len(state) < 2000  # nothing of the temporaries is pickled
    clone = pickle.loads(state)
    assert not SCRATCH._table(clone)
    # one array per name, the same at every call; a new shape replaces it; clear() drops them all
    a = SCRATCH.get(NUMPY_OPS, clone, "t", (3, 4), np.zeros(1))
    assert SCRATCH.get(NUMPY_OPS, clone, "t", (3, 4), np.zeros(1)) is a
    assert SCRATCH.get(NUMPY_OPS, clone, "t", (2, 4), np.zeros(1)).shape == (2, 4)
    assert SCRATCH.get(NUMPY_OPS, clone, "t", (2, 4), np.zeros(1, dtype=np.float32)).dtype == np.float32
    SCRATCH.clear(clone)
    assert not SCRATCH._table(clone)


def test_a_warm_step_allocates_nothing_of_size_p():
    P = 200_000
    structure = LowRankPrecision(rank=4)
    prior = structure.prior(torch.zeros(P, dtype=torch.float64), 0.5)
    rows = _rows(structure, P, 3, 5, torch.float64, seed=6)
    beliefs = [prior]
    for Hw, ew in rows[:3]:  # warm: two beliefs in flight, temporaries made
        beliefs.append(structure.update(beliefs[-1], Hw, ew, workspace=beliefs[-2] if len(beliefs) > 2 else None)[0])
    workspace, belief = beliefs[-2], beliefs[-1]
    del beliefs
    Hw, ew = rows[3]
    tracemalloc.start()
    try:
        new, _ = structure.update(belief, Hw, ew, workspace=workspace)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert new.mean.data_ptr() == workspace.mean.data_ptr()
    assert peak < P * 8 / 4, f"a warm step allocated {peak} bytes"


# ---------------------------------------------------------------------------------------------
# out= of the Jacobian and of the whitening
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("lead", [(), (3,)])
@pytest.mark.parametrize("n_out", [1, 3])
def test_jacobian_into_a_given_buffer(backend, lead, n_out):
    module = make_mlp(4, (5, 6), n_out, activation="tanh", seed=0).double()
    adapter = make_adapter(module, torch.device("cpu"), torch.float64, 4)
    adapter.cpu_backend = backend
    theta = adapter.initial_theta().expand(*lead, -1).contiguous()
    theta = theta + 0.1 * torch.randn(theta.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    X = torch.randn(7, 4, dtype=torch.float64)
    f, J = adapter.forward_jacobian(theta, X)
    buf = torch.full(J.shape, float("nan"), dtype=torch.float64)
    f2, J2 = adapter.forward_jacobian(theta, X, out=buf)
    assert J2 is buf and torch.equal(J2, J) and torch.equal(f2, f)
    with pytest.raises(ValueError, match="out must be"):
        adapter.forward_jacobian(theta, X, out=torch.empty(J.shape, dtype=torch.float32))


@pytest.mark.parametrize("lik", [Gaussian(), Bernoulli(), Categorical(), Poisson()], ids=lambda l: type(l).__name__)
def test_whitening_into_a_given_buffer(lik):
    g = torch.Generator().manual_seed(1)
    C = 3 if isinstance(lik, (Categorical, Gaussian)) else 1
    f = torch.randn(4, C, dtype=torch.float64, generator=g)
    J = torch.randn(4, C, 9, dtype=torch.float64, generator=g)
    Y = torch.rand(4, C, dtype=torch.float64, generator=g)
    state = lik.initial_state(C, torch.device("cpu"), torch.float64) if isinstance(lik, Gaussian) else None
    Hw, ew = lik.whiten(f, J, Y, state)
    buf = torch.full(Hw.shape, float("nan"), dtype=torch.float64)
    Hw2, ew2 = lik.whiten(f, J, Y, state, out=buf)
    assert Hw2.data_ptr() == buf.data_ptr() and torch.equal(Hw2, Hw) and torch.equal(ew2, ew)
    if lik.host_arrays:  # the engine's NumPy path
        nbuf = np.full(Hw.shape, np.nan)
        Hw3, _ = lik.whiten(f.numpy(), J.numpy(), Y.numpy(), {k: v.numpy() for k, v in state.items()}, out=nbuf)
        assert Hw3 is nbuf and np.array_equal(nbuf, Hw.numpy())
