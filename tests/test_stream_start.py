"""A data-scaled prior fixed by the stream's first rows however they arrive (issue 29,
:mod:`skfilter.stream_start`): one row per call and one call reach the same belief; prequential
predictions use earlier rows only; failures, pickling, cloning and multi-pass fits during the
first rows behave as after them."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone

import skfilter
from skfilter import LoFiClassifier, LoFiRegressor
from skfilter.exceptions import FilterStepError
from skfilter.model_selection import prequential_predict

from _registry import STRUCTURES, data, is_classification, make

#: rows that fix the prior in these tests (small, so that the first rows are learned again cheaply)
N_PRIOR = 6
N_ROWS = 12

#: the subspace filters here warm up on a few rows on purpose
pytestmark = pytest.mark.filterwarnings("ignore:.*warm-up learns from only:UserWarning")


def _make(structure, wrapper="none", likelihood="gaussian", **overrides):
    params = {"n_prior_rows": N_PRIOR, **overrides}
    if structure.startswith(("subspace", "pulse")):
        params["warmup"] = N_PRIOR  # the warm-up's rows are the stream's first rows too
    return make(structure, wrapper, likelihood, **params)


def _predict(est, X):
    return est.predict_proba(X) if hasattr(est, "predict_proba") else est.predict(X)


def _one_row_per_call(est, X, y, classes=None):
    for i in range(X.shape[0]):
        kwargs = {"classes": classes} if classes is not None and i == 0 else {}
        est.partial_fit(X[i:i + 1], y[i:i + 1], **kwargs)
    return est


CELLS = ([(s, "none", "gaussian") for s in STRUCTURES]
         + [(s, w, "gaussian") for s in ("ekf-full", "lofi", "hilofi") for w in ("wolf", "bocd")]
         + [("lofi", "none", "categorical"), ("ekf-vd", "wolf", "bernoulli"), ("lolofi", "bocd", "categorical")])


@pytest.mark.parametrize("structure, wrapper, likelihood", CELLS)
def test_one_row_per_call_reaches_the_belief_of_one_call(structure, wrapper, likelihood):
    X, y = data(likelihood, n=N_ROWS + 4)
    classes = np.unique(y) if is_classification(likelihood) else None
    whole = _make(structure, wrapper, likelihood).fit(X[:N_ROWS], y[:N_ROWS])
    rows = _one_row_per_call(_make(structure, wrapper, likelihood), X[:N_ROWS], y[:N_ROWS], classes)
    np.testing.assert_allclose(_predict(rows, X[N_ROWS:]), _predict(whole, X[N_ROWS:]), rtol=1e-9, atol=1e-10)
    # before the prior is fixed: the belief of the rows so far, as if they were all there is
    few = _one_row_per_call(_make(structure, wrapper, likelihood), X[:3], y[:3], classes)
    np.testing.assert_allclose(_predict(few, X[N_ROWS:]),
                               _predict(_make(structure, wrapper, likelihood).fit(X[:3], y[:3]), X[N_ROWS:]),
                               rtol=1e-9, atol=1e-10)


@settings(max_examples=15, deadline=None)
@given(cuts=st.lists(st.integers(1, N_ROWS - 1), max_size=4, unique=True))
def test_how_the_rows_are_split_into_calls_does_not_matter(cuts):
    X, y = data("gaussian", n=N_ROWS + 4)
    est = LoFiRegressor(hidden_layer_sizes=(4,), rank=2, n_prior_rows=N_PRIOR, random_state=0)
    bounds = [0, *sorted(cuts), N_ROWS + 4]
    for a, b in zip(bounds[:-1], bounds[1:]):
        est.partial_fit(X[a:b], y[a:b])
    whole = clone(est).fit(X, y)
    np.testing.assert_allclose(est.predict(X), whole.predict(X), rtol=1e-9)
    assert est.n_samples_seen_ == whole.n_samples_seen_ == N_ROWS + 4


def test_a_random_state_of_none_draws_the_network_once():
    X, y = data("gaussian", n=N_ROWS)
    np.random.seed(3)
    rows = _one_row_per_call(LoFiRegressor(hidden_layer_sizes=(4,), n_prior_rows=N_PRIOR), X, y)
    np.random.seed(3)
    whole = LoFiRegressor(hidden_layer_sizes=(4,), n_prior_rows=N_PRIOR).fit(X, y)
    np.testing.assert_allclose(rows.predict(X), whole.predict(X), rtol=1e-9)


def test_only_the_first_rows_set_the_prior():
    X, y = data("gaussian", n=40)
    a = LoFiRegressor(hidden_layer_sizes=(4,), n_prior_rows=N_PRIOR, random_state=0).fit(X, y)
    X2 = X.copy()
    X2[N_PRIOR:] *= 3.0  # rows after the prior's: the input scaling must not see them
    b = LoFiRegressor(hidden_layer_sizes=(4,), n_prior_rows=N_PRIOR, random_state=0).fit(X2[:N_PRIOR], y[:N_PRIOR])
    a_first = LoFiRegressor(hidden_layer_sizes=(4,), n_prior_rows=N_PRIOR, random_state=0).fit(X[:N_PRIOR],
                                                                                               y[:N_PRIOR])
    np.testing.assert_array_equal(a_first.module_.input_scale.numpy(), a.module_.input_scale.numpy())
    np.testing.assert_array_equal(b.module_.input_scale.numpy(), a.module_.input_scale.numpy())


PREQUENTIAL_CELLS = [("ekf-full", "none", "gaussian"), ("lofi", "none", "categorical"), ("lrkf", "none", "gaussian"),
                     ("lolofi", "none", "gaussian"), ("subspace", "none", "gaussian"), ("pulse", "none", "gaussian"),
                     ("lofi", "wolf", "gaussian"), ("lofi", "bocd", "gaussian"), ("ekf-vd", "wolf", "bernoulli")]


@pytest.mark.parametrize("structure, wrapper, likelihood", PREQUENTIAL_CELLS)
@pytest.mark.parametrize("t", [2, N_PRIOR + 2])
def test_prequential_predictions_use_earlier_rows_only(structure, wrapper, likelihood, t):
    X, y = data(likelihood, n=N_ROWS + 2)
    X2, y2 = X.copy(), y.copy()
    X2[t:] += 0.5
    if not is_classification(likelihood):
        y2[t:] = 3 * y2[t:] + 1
    method = "predict_proba" if is_classification(likelihood) else "predict"
    kw = {"classes": np.unique(y)} if is_classification(likelihood) else {}
    a = prequential_predict(_make(structure, wrapper, likelihood), X, y, method=method, **kw)
    b = prequential_predict(_make(structure, wrapper, likelihood), X2, y2, method=method, **kw)
    np.testing.assert_array_equal(a[:t], b[:t])
    assert not np.array_equal(a[t:], b[t:])
    if not is_classification(likelihood):
        assert np.isnan(a[0]) and np.isfinite(a[1:]).all()  # nothing to predict row 0 from
    else:
        np.testing.assert_allclose(a[0], 1.0 / a.shape[1])


def test_prequential_predict_is_the_loop_of_predict_and_partial_fit():
    X, y = data("gaussian", n=N_ROWS)
    est = LoFiRegressor(hidden_layer_sizes=(4,), n_prior_rows=N_PRIOR, random_state=0)
    mean, std = prequential_predict(clone(est), X, y, return_std=True)
    loop = clone(est).partial_fit(X[:1], y[:1])
    for t in range(1, N_PRIOR):
        m, s = loop.predict(X[t:t + 1], return_std=True)
        np.testing.assert_allclose([mean[t], std[t]], [m[0], s[0]], rtol=1e-10)
        loop.partial_fit(X[t:t + 1], y[t:t + 1])


def test_a_pipeline_predicts_from_earlier_rows_only():
    from sklearn.preprocessing import StandardScaler

    from skfilter import make_partial_pipeline

    X, y = data("gaussian", n=N_ROWS)
    pipe = make_partial_pipeline(StandardScaler(), LoFiRegressor(hidden_layer_sizes=(4,), n_prior_rows=N_PRIOR,
                                                                 random_state=0))
    a = prequential_predict(clone(pipe), X, y)
    X2 = X.copy()
    X2[5:] *= 10
    b = prequential_predict(clone(pipe), X2, y)
    np.testing.assert_array_equal(a[:5], b[:5])


def test_bad_input_during_the_first_rows_leaves_the_estimator_as_it_was():
    X, y = data("gaussian", n=N_ROWS)
    est = LoFiRegressor(hidden_layer_sizes=(4,), n_prior_rows=N_PRIOR, random_state=0).partial_fit(X[:2], y[:2])
    before = pickle.dumps(est)
    bad = X[2:3].copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        est.partial_fit(bad, y[2:3])
    with pytest.raises(ValueError, match="features"):
        est.partial_fit(X[2:3, :1], y[2:3])
    assert pickle.dumps(est) == before
    _one_row_per_call(est, X[2:], y[2:])
    whole = LoFiRegressor(hidden_layer_sizes=(4,), n_prior_rows=N_PRIOR, random_state=0).fit(X, y)
    np.testing.assert_allclose(est.predict(X), whole.predict(X), rtol=1e-9)


def test_a_failure_while_learning_the_first_rows_again_loses_nothing(monkeypatch):
    X, y = data("gaussian", n=N_ROWS)
    est = LoFiRegressor(hidden_layer_sizes=(4,), n_prior_rows=N_PRIOR, random_state=0).partial_fit(X[:3], y[:3])
    kept = est.predict(X)
    from skfilter import _estimator

    real = _estimator.run_filter

    def failing(parts, state, *args, **kwargs):
        exc = FilterStepError("injected", step=0)
        exc.last_good_state = state  # as the engine reports a failed step
        raise exc

    monkeypatch.setattr(_estimator, "run_filter", failing)
    with pytest.raises(FilterStepError):
        est.partial_fit(X[3:4], y[3:4])

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(_estimator, "run_filter", interrupted)
    with pytest.raises(KeyboardInterrupt):
        est.partial_fit(X[3:4], y[3:4])
    monkeypatch.setattr(_estimator, "run_filter", real)
    np.testing.assert_array_equal(est.predict(X), kept)
    assert est.n_samples_seen_ == 3
    _one_row_per_call(est, X[3:], y[3:])  # and it learns on
    whole = LoFiRegressor(hidden_layer_sizes=(4,), n_prior_rows=N_PRIOR, random_state=0).fit(X, y)
    np.testing.assert_allclose(est.predict(X), whole.predict(X), rtol=1e-9)


def test_pickling_and_cloning_during_the_first_rows():
    X, y = data("categorical", n=N_ROWS)
    est = LoFiClassifier(hidden_layer_sizes=(4,), n_prior_rows=N_PRIOR, random_state=0)
    est.partial_fit(X[:2], y[:2], classes=[0, 1, 2])
    copy = pickle.loads(pickle.dumps(est))
    assert not hasattr(clone(est), "filter_state_")
    _one_row_per_call(est, X[2:], y[2:])
    _one_row_per_call(copy, X[2:], y[2:])
    np.testing.assert_array_equal(est.predict_proba(X), copy.predict_proba(X))


def test_multi_pass_fit_and_warm_start_during_the_first_rows():
    X, y = data("gaussian", n=N_ROWS)
    est = LoFiRegressor(hidden_layer_sizes=(4,), n_prior_rows=N_PRIOR, n_epochs=3, random_state=0).fit(X[:3], y[:3])
    assert est.n_iter_ == 3 and len(est.loss_curve_) == 3
    est.partial_fit(X[3:4], y[3:4])  # the three passes over rows 0-2 again, then row 3
    assert est.n_iter_ == 4 and est.n_samples_seen_ == 3 * 3 + 1
    est.set_params(warm_start=True, n_epochs=1)
    est.fit(X[4:], y[4:])
    assert est.n_samples_seen_ == 3 * 3 + 1 + N_ROWS - 4


def test_structural_changes_during_the_first_rows_raise_as_after():
    X, y = data("gaussian", n=N_ROWS)
    est = LoFiRegressor(hidden_layer_sizes=(4,), n_prior_rows=N_PRIOR, random_state=0).partial_fit(X[:2], y[:2])
    est.set_params(hidden_layer_sizes=(5,))
    with pytest.raises(ValueError, match="hidden_layer_sizes"):
        est.partial_fit(X[2:3], y[2:3])


def test_a_data_free_prior_keeps_no_rows():
    X, y = data("gaussian", n=N_ROWS)
    est = LoFiRegressor(hidden_layer_sizes=(4,), prior_variance=0.5, obs_variance=0.1, random_state=0)
    est.partial_fit(X[:1], y[:1])
    assert est.__dict__.get("_stream_start") is None
    mean = prequential_predict(clone(est), X, y)
    assert np.isfinite(mean).all()  # row 0 from the prior


@pytest.mark.parametrize("name", ["n_prior_rows"])
def test_the_number_of_prior_rows_is_validated(name):
    X, y = data("gaussian", n=4)
    for bad in (0, -1, 2.5, "many"):
        with pytest.raises((ValueError, TypeError), match=name):
            getattr(skfilter, "EKFRegressor")(**{name: bad}).fit(X, y)


def _events(n=30, seed=0):
    rng = np.random.default_rng(seed)
    users, items = rng.integers(0, 6, n), rng.integers(0, 5, n)
    X = np.column_stack([users, items, 50 + 20 * rng.normal(size=n)])
    return X, users % 3 + items % 2 + 0.1 * rng.normal(size=n)


@pytest.mark.parametrize("frame", [False, True])
def test_factorization_one_row_per_call_reaches_the_model_of_one_call(frame):
    import pandas as pd

    X, y = _events()
    if frame:
        X = pd.DataFrame({"user": X[:, 0].astype(int).astype(str), "item": X[:, 1].astype(int), "ctx": X[:, 2]})
        X["item"] = X["item"].astype("category")
    make = lambda: skfilter.FactorizationRegressor(entity_columns=[0, 1] if not frame else "auto",  # noqa: E731
                                                   n_factors=2, n_prior_rows=N_PRIOR, random_state=0)
    whole = make().fit(X[:20], y[:20])
    rows = make()
    for t in range(20):
        rows.partial_fit(X[t:t + 1], y[t:t + 1])
    np.testing.assert_allclose(rows.predict(X[20:]), whole.predict(X[20:]), rtol=1e-9)


@pytest.mark.parametrize("t", [2, N_PRIOR + 3])
def test_factorization_prequential_predictions_use_earlier_rows_only(t):
    X, y = _events()
    X2, y2 = X.copy(), 3 * y + 1
    X2[t:, 2] += 40
    y2[:t] = y[:t]
    est = skfilter.FactorizationRegressor(entity_columns=[0, 1], n_factors=2, n_prior_rows=N_PRIOR, random_state=0)
    a, b = prequential_predict(clone(est), X, y), prequential_predict(clone(est), X2, y2)
    np.testing.assert_array_equal(a[:t], b[:t])
    assert np.isnan(a[0]) and np.isfinite(a[1:]).all()
