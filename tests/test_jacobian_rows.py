"""The Jacobian-rows LoFi step (``skfilter.posteriors.lofi.JacobianRows``, issue 31 item 3): one
pass over ``P`` gives the predictive ``J Σ Jᵀ`` and the update's products, the whitened rows are
``A J`` with ``A`` from :meth:`~skfilter.likelihoods.Likelihood.whitening_matrix`. It serves large
beliefs (``P ≥ JACOBIAN_ROWS_MIN_PARAMS``); here the threshold is lowered so that it serves small
models, and every result must equal the three-pass engine's to rounding."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_diabetes, load_iris

import skfilter._array_ops as array_ops
import skfilter.posteriors.lofi as lofi
from skfilter import stepping
from skfilter import LoFiClassifier, LoFiRegressor, WoLFClassifier, WoLFRegressor
from skfilter.exceptions import FilterStepError
from skfilter.kernels import compiled_kernels
from skfilter.likelihoods import (AssumedDensityCategorical, Bernoulli, Categorical, Gaussian,
                                  MomentMatchedCategorical, Poisson)
from skfilter.posteriors._base import stiffness_limit  # noqa: F401  (the limit the stiff case passes)
from skfilter.posteriors.lofi import NUMPY_OPS, lofi_jacobian_products, lofi_update

_IRIS = load_iris(return_X_y=True)
_PERM = np.random.default_rng(0).permutation(150)
X_IRIS = ((_IRIS[0] - _IRIS[0].mean(0)) / _IRIS[0].std(0))[_PERM]
Y_IRIS = _IRIS[1][_PERM]
X_DIAB, Y_DIAB = load_diabetes(return_X_y=True)


class _Counter:
    def __init__(self, monkeypatch):
        self.n = 0
        original = lofi.JacobianRows.update

        def counted(rows, *a, **k):
            self.n += 1
            return original(rows, *a, **k)

        monkeypatch.setattr(lofi.JacobianRows, "update", counted)


def _learn(make, X, y, weights, threshold, monkeypatch, first_pass=None):
    """Learn on the torch engine (the kernels off), its first pass on ``first_pass`` (None: BLAS)."""
    monkeypatch.setattr(lofi, "JACOBIAN_ROWS_MIN_PARAMS", threshold)
    monkeypatch.setattr(stepping, "_first_pass", lambda: first_pass)
    est = make()
    kw = {} if weights is None else {"sample_weight": weights[:40]}
    if hasattr(est, "predict_proba"):
        kw["classes"] = np.unique(y)
    with compiled_kernels(False):
        est.partial_fit(X[:40], y[:40], **kw)
        est.partial_fit(X[40:100], y[40:100], **({} if weights is None else {"sample_weight": weights[40:100]}))
        out = est.predict_proba(X) if hasattr(est, "predict_proba") else est.predict(X, return_std=True)
    return np.column_stack(out) if isinstance(out, tuple) else out


CASES = {
    "adf-multiclass": (lambda: LoFiClassifier(hidden_layer_sizes=(8,), rank=3, random_state=0), "iris"),
    "adf-binary": (lambda: LoFiClassifier(hidden_layer_sizes=(8,), rank=3, random_state=0), "iris2"),
    "categorical": (lambda: LoFiClassifier(hidden_layer_sizes=(8,), rank=3, likelihood="categorical",
                                           random_state=0), "iris"),
    "bernoulli": (lambda: LoFiClassifier(hidden_layer_sizes=(8,), rank=3, likelihood="categorical",
                                         random_state=0), "iris2"),
    "moment-matched": (lambda: LoFiClassifier(hidden_layer_sizes=(8,), rank=3, likelihood="moment-matched",
                                              random_state=0), "iris"),
    "gaussian-auto": (lambda: LoFiRegressor(hidden_layer_sizes=(8,), rank=3, random_state=0), "diabetes"),
    "gaussian-fixed-batch": (lambda: LoFiRegressor(hidden_layer_sizes=(8,), rank=3, obs_variance=0.5,
                                                   batch_size=3, random_state=0), "diabetes"),
    "poisson": (lambda: LoFiRegressor(hidden_layer_sizes=(8,), rank=3, likelihood="poisson",
                                      random_state=0), "counts"),
    "spherical-q": (lambda: LoFiRegressor(hidden_layer_sizes=(8,), rank=3, variant="spherical",
                                          process_noise=1e-4, random_state=0), "diabetes"),
    "wolf-regressor": (lambda: WoLFRegressor(LoFiRegressor(hidden_layer_sizes=(8,), rank=3, random_state=0)),
                       "diabetes"),
    "wolf-classifier": (lambda: WoLFClassifier(LoFiClassifier(hidden_layer_sizes=(8,), rank=3, random_state=0)),
                        "iris"),
}


def _data(name):
    if name == "iris":
        return X_IRIS, Y_IRIS
    if name == "iris2":
        return X_IRIS, (Y_IRIS == 1).astype(int)
    if name == "counts":
        return X_DIAB, np.round(Y_DIAB / 40.0)
    return X_DIAB, Y_DIAB


class _CountedFirstPass:
    """:func:`skfilter.stepping.stacked_first_pass` (the compiled sweep), counting the products it formed."""

    def __init__(self):
        self.n = 0

    def __call__(self, *args):
        out = stepping.stacked_first_pass(*args)
        self.n += out is not None
        return out


@pytest.mark.parametrize("first_pass", ["blas", "compiled"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_pass_step_equals_the_engine(case, weighted, first_pass, monkeypatch):
    make, data = CASES[case]
    X, y = _data(data)
    w = np.linspace(0.5, 2.0, len(y)) if weighted else None
    reference = _learn(make, X, y, w, 10 ** 12, monkeypatch)
    counter = _Counter(monkeypatch)
    compiled = _CountedFirstPass() if first_pass == "compiled" else None
    fused = _learn(make, X, y, w, 0, monkeypatch, compiled)
    assert counter.n > 0  # the one-pass step served the rows
    if compiled is not None:
        assert compiled.n == counter.n  # every first pass on the compiled sweep
    np.testing.assert_allclose(fused, reference, rtol=1e-9, atol=1e-12 * np.abs(reference).max())


@settings(max_examples=30, deadline=None)
@given(L=st.integers(0, 5), m=st.integers(1, 4), P=st.integers(1, 2600), spherical=st.booleans(),
       single=st.booleans(), seed=st.integers(0, 10 ** 6))
def test_compiled_first_pass_equals_the_blas_products(L, m, P, spherical, single, seed):
    """The compiled sweep's ``[Wᵀ; J] [Υ⁻¹[Wᵀ; J]; [Wᵀ; J]]ᵀ`` is the product of the stacked rows,
    across tile boundaries (``P`` up to 2.5 tiles), per-parameter and spherical ``Υ``, in both dtypes."""
    g = np.random.default_rng(seed)
    dt = np.float32 if single else np.float64
    W, J = g.standard_normal((L, P)).astype(dt), g.standard_normal((m, P)).astype(dt)
    ups = (g.random(1 if spherical else P) + 0.5).astype(dt)
    S = np.concatenate([W, J]).astype(np.float64)
    expected = S @ np.concatenate([S / ups.astype(np.float64), S]).T
    for gram in (True, False):
        got = stepping.stacked_first_pass(ups, W, J, gram)
        assert got.dtype == dt and got.shape == (L + m, 2 * (L + m) if gram else L + m)
        want = expected if gram else expected[:, :L + m]
        scale = np.sqrt(np.outer(np.diag(expected[:, L + m:]), np.diag(expected[:, L + m:]))).max() + 1.0
        np.testing.assert_allclose(got, want, rtol=0, atol=(3e-6 if single else 1e-13) * scale)
    # arrays it does not take go back to BLAS
    assert stepping.stacked_first_pass(ups, W.astype(np.float32 if not single else np.float64), J, True) is None
    assert stepping.stacked_first_pass(ups, np.asfortranarray(np.ones((2, 3), dt)), J[:, :3], True) is None


def test_float32_agrees(monkeypatch):
    make = lambda: LoFiClassifier(hidden_layer_sizes=(8,), rank=3, dtype="float32", random_state=0)  # noqa: E731
    a = _learn(make, X_IRIS, Y_IRIS, None, 10 ** 12, monkeypatch)
    b = _learn(make, X_IRIS, Y_IRIS, None, 0, monkeypatch)
    np.testing.assert_allclose(b, a, atol=2e-4)


def test_large_model_takes_it_by_default(monkeypatch):
    """Above the threshold (default) the engine's LoFi step is the one-pass step."""
    counter = _Counter(monkeypatch)
    monkeypatch.setattr(lofi, "JACOBIAN_ROWS_MIN_PARAMS", 2_000)
    est = LoFiClassifier(hidden_layer_sizes=(200,), rank=2, random_state=0)  # P = 1,803
    with compiled_kernels(False):
        est.fit(X_IRIS[:10], Y_IRIS[:10])
    assert counter.n == 0 and est.n_params_ < 2_000
    est = LoFiClassifier(hidden_layer_sizes=(400,), rank=2, random_state=0)  # P = 3,603
    with compiled_kernels(False):
        est.fit(X_IRIS[:10], Y_IRIS[:10])
    assert counter.n == 10


def test_one_row_per_call_equals_one_call(monkeypatch):
    monkeypatch.setattr(lofi, "JACOBIAN_ROWS_MIN_PARAMS", 0)
    a = LoFiClassifier(hidden_layer_sizes=(8,), rank=3, random_state=0)
    b = LoFiClassifier(hidden_layer_sizes=(8,), rank=3, random_state=0)
    with compiled_kernels(False):
        a.partial_fit(X_IRIS[:30], Y_IRIS[:30], classes=[0, 1, 2])
        for i in range(30):
            if i == 0:
                b.partial_fit(X_IRIS[:1], Y_IRIS[:1], classes=[0, 1, 2])
            else:
                b.partial_fit(X_IRIS[i:i + 1], Y_IRIS[i:i + 1])
        np.testing.assert_allclose(b.predict_proba(X_IRIS), a.predict_proba(X_IRIS), rtol=1e-10)


def test_failing_row_keeps_the_last_good_belief(monkeypatch):
    """(Past the stream start's ``n_prior_rows``.) A step that fails inside the one-pass update raises, keeps the belief of the rows before it,
    and the estimator learns the next good rows."""
    monkeypatch.setattr(lofi, "JACOBIAN_ROWS_MIN_PARAMS", 0)
    original = lofi.JacobianRows.update
    calls = []

    def failing_second(rows, *a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise FilterStepError("injected")
        return original(rows, *a, **k)

    est = LoFiRegressor(hidden_layer_sizes=(8,), rank=3, random_state=0)
    ref = LoFiRegressor(hidden_layer_sizes=(8,), rank=3, random_state=0)
    with compiled_kernels(False):
        est.partial_fit(X_DIAB[:60], Y_DIAB[:60])
        ref.partial_fit(X_DIAB[:61], Y_DIAB[:61])
        monkeypatch.setattr(lofi.JacobianRows, "update", failing_second)
        with pytest.raises(FilterStepError, match="injected"):
            est.partial_fit(X_DIAB[60:63], Y_DIAB[60:63])
        assert est.filter_state_.n_seen == 61  # the first row of the call was learned, the failing one was not
        np.testing.assert_allclose(est.predict(X_DIAB[:50]), ref.predict(X_DIAB[:50]), rtol=1e-12)
        est.partial_fit(X_DIAB[63:70], Y_DIAB[63:70])  # and it learns the next good rows
        ref.partial_fit(X_DIAB[63:70], Y_DIAB[63:70])
        np.testing.assert_allclose(est.predict(X_DIAB[:50]), ref.predict(X_DIAB[:50]), rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# lofi_update with the rows given by their Jacobian, against the whitened rows
# ---------------------------------------------------------------------------------------------
def _arrays(P, L, n, C, variant, seed, scale=1.0):
    g = np.random.default_rng(seed)
    mean = g.standard_normal(P)
    diag = g.random(P if variant == "diagonal" else 1) + 0.5
    W = g.standard_normal((L, P)) / P ** 0.5
    J = g.standard_normal((n * C, P)) / P ** 0.5 * scale
    A = np.zeros((n * C, n * C))
    for i in range(n):
        A[i * C:(i + 1) * C, i * C:(i + 1) * C] = g.standard_normal((C, C))
    e = g.standard_normal(n * C)
    return mean, diag, W, J, A, e


@pytest.mark.parametrize("blocks", [1, 7])
@pytest.mark.parametrize("variant", ["diagonal", "spherical"])
@pytest.mark.parametrize("shape", [(0, 1, 3), (4, 1, 3), (4, 2, 1), (2, 3, 2)])
def test_rows_by_jacobian_equal_whitened_rows(shape, variant, blocks, monkeypatch):
    L, n, C = shape
    P = 1200
    if blocks > 1:
        monkeypatch.setattr(array_ops, "CHUNK_ELEMENTS", 2 * (L + n * C) * P // blocks)
    mean, diag, W, J, A, e = _arrays(P, L, n, C, variant, seed=L + n + C)
    expected = lofi_update(NUMPY_OPS, mean, diag, W, A @ J, e, variant=variant)
    found = lofi_jacobian_products(NUMPY_OPS, diag, W, J, gram=variant == "diagonal")
    assert found is not None
    products, quad = found
    got = lofi_update(NUMPY_OPS, mean, diag, W, J, e, variant=variant, row_map=A, products=products)
    for a, b in zip(got[:3], expected[:3]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    # the predictive from the same products: J Σ Jᵀ with Σ = (Υ + WWᵀ)⁻¹
    d = diag if variant == "diagonal" else np.full(P, diag[0])
    Sigma = np.linalg.inv(np.diag(d) + W.T @ W)
    np.testing.assert_allclose(quad, J @ Sigma @ J.T, rtol=1e-9, atol=1e-13)


def test_stiff_rows_take_the_square_root_forms():
    """Rows so large that ``I + W̃ᵀΥ⁻¹W̃`` is stiff: the update forms ``A J`` and takes the QR forms;
    the result equals the whitened rows' update."""
    mean, diag, W, J, A, e = _arrays(300, 3, 1, 2, "diagonal", seed=5, scale=1e9)
    products, _ = lofi_jacobian_products(NUMPY_OPS, diag, W, J)
    got = lofi_update(NUMPY_OPS, mean, diag, W, J, e, row_map=A, products=products)
    expected = lofi_update(NUMPY_OPS, mean, diag, W, A @ J, e)
    for a, b in zip(got[:3], expected[:3]):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10 * np.abs(b).max())


def test_stiff_low_rank_system_falls_back():
    """A stiff ``M = I + WᵀΥ⁻¹W``: no products (the engine takes its square-root predictive)."""
    mean, diag, W, J, A, e = _arrays(300, 3, 1, 2, "diagonal", seed=6)
    assert lofi_jacobian_products(NUMPY_OPS, diag, W * 1e9, J) is None


# ---------------------------------------------------------------------------------------------
# whitening matrices: A J equals whiten's rows
# ---------------------------------------------------------------------------------------------
def _likelihood_cases(C):
    state = {"r": torch.full((C,), 0.7, dtype=torch.float64)}
    state["scale"] = state["r"].rsqrt()[..., None]
    out = [(Gaussian(), state), (Poisson(), None), (AssumedDensityCategorical(), None)]
    if C == 1:
        out.append((Bernoulli(), None))
    else:
        out += [(Categorical(), None), (MomentMatchedCategorical(), None)]
    return out


@settings(max_examples=25, deadline=None)
@given(C=st.integers(1, 4), n=st.integers(1, 3), seed=st.integers(0, 10 ** 6))
def test_whitening_matrix_times_jacobian_is_whiten(C, n, seed):
    g = torch.Generator().manual_seed(seed)
    f = torch.randn(n, C, generator=g, dtype=torch.float64) * 2
    J = torch.randn(n, C, 7, generator=g, dtype=torch.float64)
    Y = torch.rand(n, C, generator=g, dtype=torch.float64)
    R = torch.randn(n, C, C, generator=g, dtype=torch.float64)
    quad = R @ R.mT
    for lik, state in _likelihood_cases(C):
        extra = {"quad": quad} if lik.needs_predictive else {}
        Hw, ew = lik.whiten(f, J, Y, state, **extra)
        A, ew2 = lik.whitening_matrix(f, Y, state, quad=quad)
        torch.testing.assert_close(A @ J if A.shape[-1] == C else A * J, Hw, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(ew2, ew, rtol=1e-12, atol=1e-12)


def test_stream_buffers_kept_within_the_belief_size(monkeypatch):
    """The ``J`` buffers a stream keeps between calls (per structure, keyed by shape) are dropped at
    the end of a call when they outgrow the belief: an idle estimator holds about its belief's size."""
    from skfilter import filtering

    monkeypatch.setattr(filtering, "MAX_KEPT_BYTES", 0)
    with compiled_kernels(False):
        one = LoFiRegressor(hidden_layer_sizes=(8,), rank=3, random_state=0).fit(X_DIAB[:80], Y_DIAB[:80])
        kept = filtering._stream_buffers(one._structure)["buffers"]
        assert kept and all(shape[0] == 1 for _, shape in kept)  # one row per step: J is (1, 1, P)
        many = LoFiRegressor(hidden_layer_sizes=(8,), rank=3, batch_size=40, random_state=0)
        many.fit(X_DIAB[:80], Y_DIAB[:80])
        assert not filtering._stream_buffers(many._structure)["buffers"]  # (40, 1, P): larger than the belief


def test_recycled_beliefs_leave_held_arrays_alone_and_change_nothing(monkeypatch):
    """Large beliefs take their arrays from the structure's recycler when no dead workspace is at hand
    (the second step of a call): a stream of calls then touches no fresh memory. The arrays come
    back only once nothing refers to them — a user's tensor or NumPy view of an old belief keeps its
    values — and the results are those of fresh arrays, bit for bit."""
    from skfilter import filtering

    monkeypatch.setattr(lofi, "JACOBIAN_ROWS_MIN_PARAMS", 0)
    monkeypatch.setattr(filtering, "SPARE_MIN_BYTES", 0)
    monkeypatch.setattr(lofi, "REUSE_MIN_BYTES", 0)
    sizes = [3, 1, 2, 5, 1, 4, 2]

    def stream(recycle, hold):
        monkeypatch.setattr(lofi, "RECYCLE_MIN_BELIEF_BYTES", 0 if recycle else 1 << 62)
        est = LoFiRegressor(hidden_layer_sizes=(8,), rank=3, random_state=0)
        held, snapshots, start, addresses = [], [], 50, set()
        with compiled_kernels(False):
            est.partial_fit(X_DIAB[:50], Y_DIAB[:50])  # the prior's rows: later calls learn their own rows alone
            for n in sizes:
                est.partial_fit(X_DIAB[start:start + n], Y_DIAB[start:start + n])
                start += n
                belief = est.filter_state_.belief
                addresses.add(belief.low_rank.data_ptr())
                if hold:
                    held.append((belief.mean, belief.low_rank.numpy()))  # a tensor and a view, no belief
                    snapshots.append((belief.mean.clone(), belief.low_rank.numpy().copy()))
                del belief
            pool = lofi.SCRATCH.table(est._structure).get("beliefs")
        for (mean, view), (mean0, view0) in zip(held, snapshots):
            assert torch.equal(mean, mean0) and np.array_equal(view, view0)
        return est.predict(X_DIAB[:20], return_std=True), pool, len(addresses)

    fresh, no_pool, _ = stream(False, False)
    assert no_pool is None
    for hold in (True, False):
        got, pool, n_addresses = stream(True, hold)
        assert pool is not None and 0 < len(pool.arrays) <= 9
        if not hold:  # the memory of three beliefs goes round
            assert n_addresses <= 3
        np.testing.assert_array_equal(got[0], fresh[0])
        np.testing.assert_array_equal(got[1], fresh[1])
