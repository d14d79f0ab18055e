"""The compiled DEKF of multiclass factorization models (skfilter.kernels.factorization,
``factorization_events_multi``) against the torch engine: ``d > 1`` logits with the categorical
likelihood (EKF update, ``likelihood='categorical'``) or its assumed-density update (the default),
every signal a classifier can have, float64 and float32, weights, drift, failures, one row per call,
predictions and pickling."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

from skfilter import FactorizationClassifier
from skfilter.exceptions import FilterStepError
from skfilter.kernels import AVAILABLE, compiled_kernels

from tests.test_factorization_kernels import _assert_same, _chunk, _events, _torch_steps, _weights

pytestmark = [pytest.mark.skipif(not AVAILABLE, reason="numba is not installed: no compiled kernels"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

if AVAILABLE:
    from skfilter.kernels.factorization import predict_events_compiled, run_events_compiled, serves

N_FIT, N = 6, 30
N_CLASSES = 4


def _data(n, n_ids=2, n_ctx=2, seed=0):
    rng = np.random.default_rng(seed)
    X = np.empty((n, n_ids + n_ctx), dtype=object)
    for j in range(n_ids):
        X[:, j] = rng.integers(0, 6, n).tolist()
    for j in range(n_ctx):
        X[:, n_ids + j] = rng.normal(size=n).tolist()
    y = rng.integers(0, N_CLASSES, n)
    y[:N_CLASSES] = np.arange(N_CLASSES)
    return X, y


def _classifier(model, likelihood, dtype="float64", half_life=None, reference="learned", n_ids=2, **kw):
    return FactorizationClassifier(model=model, n_factors=2, entity_columns=list(range(n_ids)), likelihood=likelihood,
                                   dtype=dtype, half_life=half_life, reference=reference, random_state=0, **kw)


def _compare(model, likelihood, dtype="float64", half_life=None, reference="learned", weighted=False, n_ids=2,
             n_ctx=2, split=True, **kw):
    X, y = _data(N_FIT + N, n_ids, n_ctx, seed=len(model) + 3 * weighted)
    est = _classifier(model, likelihood, dtype, half_life, reference, n_ids, **kw)
    with compiled_kernels(False):
        est.fit(X[:N_FIT], y[:N_FIT])
    f1 = est.filter_
    f2 = copy.deepcopy(f1)
    assert f2.d == N_CLASSES and serves(f2)
    slot_ids, values, Y = _events(est, X[N_FIT:], y[N_FIT:])
    w = _weights(N, 2) if weighted else None
    _torch_steps(f1, slot_ids, values, Y, w)
    cut = N // 3 if split else N
    assert run_events_compiled(f2, *_chunk(slot_ids, values, Y, w, 0, cut)) == cut
    if split:
        assert run_events_compiled(f2, *_chunk(slot_ids, values, Y, w, cut, N)) == N - cut
    _assert_same(f1, f2, 1e-10 if dtype == "float64" else 2e-4)
    for table in f2.tables.values():  # every covariance written is exactly symmetric, as the torch engine's
        cov = table.cov[:table.n_entities]
        assert torch.equal(cov, cov.mT)
    return est, f1, f2


@pytest.mark.parametrize("model, n_ids, n_ctx", [("fm", 2, 2), ("glm", 2, 1), ("mf", 2, 2), ("cp", 3, 0),
                                                 ("fm", 1, 3)])
@pytest.mark.parametrize("likelihood", ["adf", "categorical"])
def test_signals_and_likelihoods(model, n_ids, n_ctx, likelihood):
    _compare(model, likelihood, n_ids=n_ids, n_ctx=n_ctx)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("half_life, reference, weighted", [(None, "learned", True), (3.0, "learned", False),
                                                            (3.0, "fixed", True)])
def test_dynamics_dtypes_weights(dtype, half_life, reference, weighted):
    _compare("fm", "adf" if weighted else "categorical", dtype, half_life, reference, weighted, split=not weighted)


def test_per_column_context_blocks_and_no_linear_term():
    # digits' layout: one block per numeric column (context_blocks='per-column')
    _compare("fm", "adf", n_ids=1, n_ctx=3, context_blocks="per-column")
    _compare("mf", "categorical", biases=False)


def test_predictions_are_the_torch_engine_s():
    X, y = _data(60, seed=5)
    for likelihood in ("adf", "categorical"):
        kernel = _classifier("fm", likelihood).fit(X[:40], y[:40])
        with compiled_kernels(False):
            torch_engine = _classifier("fm", likelihood).fit(X[:40], y[:40])
            assert not serves(torch_engine.filter_)
            p_torch = torch_engine.predict_proba(X[40:])
        X_new = X[40:].copy()
        X_new[::3, 0] = 1000  # unseen ids: their prior
        p_kernel = kernel.predict_proba(X[40:])
        assert p_kernel.shape == (20, N_CLASSES) and np.allclose(p_kernel.sum(1), 1.0)
        np.testing.assert_allclose(p_kernel, p_torch, rtol=1e-9, atol=1e-12)
        with compiled_kernels(False):
            p_torch_new = torch_engine.predict_proba(X_new)
        np.testing.assert_allclose(kernel.predict_proba(X_new), p_torch_new, rtol=1e-9, atol=1e-12)
        # one row per call (the fast path) predicts what a batch does
        np.testing.assert_allclose(kernel.predict_proba(X[40:41]), p_kernel[:1], rtol=1e-12)


def test_prequential_is_the_torch_engine_s_loop():
    X, y = _data(80, seed=7)
    preq = _classifier("fm", "adf").prequential_fit_predict(X, y, method="predict_proba")
    with compiled_kernels(False):
        loop = _classifier("fm", "adf").prequential_fit_predict(X, y, method="predict_proba")
    assert preq.shape == (80, N_CLASSES)
    np.testing.assert_allclose(preq, loop, rtol=1e-8, atol=1e-12)


def test_one_row_per_call_ends_where_one_call_ends():
    X, y = _data(70, seed=11)
    whole = _classifier("fm", "adf").fit(X[:20], y[:20])
    rows = copy.deepcopy(whole)
    whole.partial_fit(X[20:], y[20:])
    for t in range(20, 70):  # predict then partial_fit of one row: the fast path, one kernel call each
        rows.predict_proba(X[t:t + 1])
        rows.partial_fit(X[t:t + 1], y[t:t + 1])
    assert rows.__dict__.get("_one_row") is not None and rows.n_samples_seen_ == whole.n_samples_seen_
    _assert_same(whole.filter_, rows.filter_, 1e-12)


def test_failure_leaves_the_tables_as_the_event_before():
    X, y = _data(N_FIT + 20, seed=3)
    X[N_FIT + 9, 0] = 100  # a new entity at the failing event
    est = _classifier("fm", "categorical")
    with compiled_kernels(False):
        est.fit(X[:N_FIT], y[:N_FIT])
    slot_ids, values, Y = _events(est, X[N_FIT:], y[N_FIT:])
    values[-1] = values[-1].clone()
    values[-1][9, 0] = 1e300  # a logit that overflows: a non-finite signal
    reference = copy.deepcopy(est.filter_)
    _torch_steps(reference, slot_ids, values, Y, None, 0, 9)
    probe = copy.deepcopy(reference)
    with pytest.raises(FilterStepError):
        _torch_steps(probe, slot_ids, values, Y, None, 9, 10)
    f2 = est.filter_
    with pytest.raises(FilterStepError) as failure:
        run_events_compiled(f2, slot_ids, values, Y, None)
    assert failure.value.rows_done == 9
    _assert_same(reference, f2, 1e-10)
    assert 100 not in f2.tables["column 0"].ids


def test_covariance_bound_falls_back_to_a_checked_pass():
    # a covariance beyond the in-place bound (its squares overflow): the event is computed once
    # unwritten and checked, then written, still as the torch engine (a zero context: the huge
    # block takes no part in the innovation)
    est, f1, f2 = _compare("glm", "categorical", n_ctx=1, split=False)
    X, y = _data(10, 2, 1, seed=9)
    slot_ids, values, Y = _events(est, X, y)
    values[-1] = torch.zeros_like(values[-1])
    for f in (f1, f2):
        t = f.tables["context"]
        t.cov[0] = 1e300 * torch.eye(t.K, dtype=torch.float64)
    _torch_steps(f1, slot_ids, values, Y, None, 0, 4)
    run_events_compiled(f2, *_chunk(slot_ids, values, Y, None, 0, 4))
    _assert_same(f1, f2, 1e-10)
    assert float(f2.tables["context"].cov[0, 0, 0]) == 1e300


def test_pickle_and_not_served_options():
    X, y = _data(40, seed=13)
    est = _classifier("fm", "adf").fit(X, y)
    est.predict_proba(X[:1])  # (a fast-path cache: not pickled)
    copy2 = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(copy2.predict_proba(X), est.predict_proba(X))
    copy2.partial_fit(X[:5], y[:5])
    est.partial_fit(X[:5], y[:5])
    _assert_same(est.filter_, copy2.filter_, 0.0)
    # iterated EKF and FM order 3: the torch engine
    assert not serves(_classifier("fm", "adf", iterations=2).fit(X, y).filter_)
    assert not serves(_classifier("fm", "categorical", order=3).fit(X, y).filter_)
    with compiled_kernels(False):
        assert not serves(est.filter_)
    rec = predict_events_compiled(est.filter_, est._slot_ids(est._split_columns(X[:3], False)[0]),
                                  est._slot_values(*est._split_columns(X[:3], False)))
    assert rec.shape == (3, 3 * N_CLASSES)
