"""One event per call and prequential evaluation of the factorization estimators.

* the fast path of one-row ``predict``/``partial_fit`` (what a full validation accepted before goes
  straight to the compiled DEKF) gives bit for bit what the full validation gives, and the same
  errors, leaving the estimator as it was;
* a stream fed one row per call ends where one call over it ends (to rounding);
* ``prequential_fit_predict`` records each row's prediction inside the compiled DEKF: what
  ``predict`` then ``partial_fit`` of one row at a time give, from rows before it only.
"""

import copy

import numpy as np
import pandas as pd
import pytest
import torch

from skfilter import FactorizationClassifier, FactorizationRegressor
from skfilter.exceptions import FilterStepError
from skfilter.model_selection import prequential_predict

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _stream(n=240, seed=0, context=False):
    rng = np.random.default_rng(seed)
    u, i = rng.integers(0, 25, n), rng.integers(0, 12, n)
    y = 0.3 * (u % 5) - 0.2 * (i % 3) + 0.3 * rng.normal(size=n)
    cols = [u, i] + ([rng.normal(size=n)] if context else [])
    return np.column_stack(cols).astype(object), y


def _frame(X):
    frame = pd.DataFrame({"user": pd.Categorical([f"u{v}" for v in X[:, 0]]),
                          "item": pd.array([f"i{v}" for v in X[:, 1]], dtype="str")})
    for j in range(2, X.shape[1]):  # numeric context (one float block)
        frame[f"x{j}"] = X[:, j].astype(float)
    return frame


def _state(est):
    f = est.filter_
    tables = {k: (dict(t.ids), t.n_entities, t.mean[:t.n_entities].clone(), t.cov[:t.n_entities].clone(),
                  t.last_time[:t.n_entities].clone()) for k, t in f.tables.items()}
    noise = None if f.noise is None else {k: v.clone() for k, v in f.noise.items()}
    return f.time, est.n_samples_seen_, tables, noise


def _same_state(a, b, exact=True):
    assert a[0] == b[0] and a[1] == b[1]
    for k in a[2]:
        ids_a, n_a, *arrays_a = a[2][k]
        ids_b, n_b, *arrays_b = b[2][k]
        assert ids_a == ids_b and n_a == n_b
        for x, y in zip(arrays_a, arrays_b):
            assert (x.equal(y) if exact else np.allclose(x.numpy(), y.numpy(), rtol=1e-9, atol=1e-12)), k
    if a[3] is not None:
        for k in a[3]:
            assert a[3][k].equal(b[3][k]) if exact else np.allclose(a[3][k].numpy(), b[3][k].numpy(), rtol=1e-9)


def _slow(est):
    """The estimator with no fast-path cache: its next call runs the full validation."""
    est.__dict__.pop("_one_row", None)
    return est


@pytest.mark.parametrize("model, context, frame, options", [
    ("mf", False, False, {}), ("fm", True, False, {}), ("fm", False, True, {}), ("mf", True, True, {}),
    ("fm", True, False, {"dtype": "float32", "context_blocks": "per-column", "half_life": 30.0})])
def test_fast_path_equals_full_validation_bit_for_bit(model, context, frame, options):
    X, y = _stream(context=context)
    if context:
        X = np.column_stack([X, 2.0 * X[:, 2] + 1.0])
    data = _frame(X) if frame else X
    rows = [data.iloc[[t]] if frame else data[t:t + 1] for t in range(len(y))]
    kwargs = {} if frame else {"entity_columns": [0, 1]}
    fast = FactorizationRegressor(model=model, n_factors=3, random_state=0, **kwargs, **options)
    fast.fit(data.iloc[:120] if frame else data[:120], y[:120])
    slow = copy.deepcopy(fast)
    validations = []
    original = type(fast)._validate
    fast._validate = lambda *a, **k: validations.append(1) or original(fast, *a, **k)
    for t in range(120, len(y)):
        m_fast = fast.predict(rows[t])
        m_slow = _slow(slow).predict(rows[t])
        if t % 7 == 0:
            m_fast, s_fast = fast.predict(rows[t], return_std=True)
            assert np.array_equal(s_fast, _slow(slow).predict(rows[t], return_std=True)[1])
        assert np.array_equal(m_fast, m_slow) and m_fast.shape == m_slow.shape == (1,)
        target = pd.Series(y[t:t + 1], index=[t]) if frame else y[t:t + 1]
        fast.partial_fit(rows[t], target)
        _slow(slow).partial_fit(rows[t], target)
    _same_state(_state(fast), _state(slow))
    assert len(validations) < 10  # the rows went the fast way
    assert fast.n_iter_ == slow.n_iter_


def test_classifier_fast_path_equals_full_validation():
    X, y = _stream()
    labels = np.where(y > np.median(y), "up", "down")
    fast = FactorizationClassifier(model="mf", entity_columns=[0, 1], n_factors=3, random_state=0)
    fast.fit(X[:120], labels[:120])
    slow = copy.deepcopy(fast)
    for t in range(120, 200):
        p_fast = fast.predict_proba(X[t:t + 1])
        assert np.array_equal(p_fast, _slow(slow).predict_proba(X[t:t + 1]))
        assert fast.predict(X[t:t + 1])[0] == _slow(slow).predict(X[t:t + 1])[0]
        fast.partial_fit(X[t:t + 1], labels[t:t + 1], classes=["down", "up"])  # classes: ignored once fitted
        _slow(slow).partial_fit(X[t:t + 1], labels[t:t + 1], classes=["down", "up"])
    _same_state(_state(fast), _state(slow))
    assert vars(fast)["_one_row"].params is not None


def _bad_calls():
    nan_id = np.array([[np.nan, 1, 0.5]], dtype=object)
    return [
        ("width", lambda e: e.partial_fit(np.array([[1, 2]], dtype=object), np.array([0.5]))),
        ("width, predict", lambda e: e.predict(np.array([[1, 2, 0.5, 1.0]], dtype=object))),
        ("missing id", lambda e: e.partial_fit(nan_id, np.array([0.5]))),
        ("missing id, predict", lambda e: e.predict(nan_id)),
        ("inf context", lambda e: e.partial_fit(np.array([[1, 2, np.inf]], dtype=object), np.array([0.5]))),
        ("overflowing context", lambda e: e.partial_fit(np.array([[1, 2, 10 ** 400]], dtype=object), np.array([0.5]))),
        ("text context", lambda e: e.predict(np.array([[1, 2, "a"]], dtype=object))),
        ("nan target", lambda e: e.partial_fit(np.array([[1, 2, 0.5]], dtype=object), np.array([np.nan]))),
        ("text target", lambda e: e.partial_fit(np.array([[1, 2, 0.5]], dtype=object), np.array(["a"]))),
        ("two targets", lambda e: e.partial_fit(np.array([[1, 2, 0.5]], dtype=object), np.array([0.5, 1.0]))),
        ("1-D row", lambda e: e.predict(np.array([1, 2, 0.5], dtype=object))),
        ("diverging step", lambda e: e.partial_fit(np.array([[999, 2, 1e300]], dtype=object), np.array([0.5]))),
    ]


@pytest.mark.parametrize("name, call", _bad_calls(), ids=[c[0] for c in _bad_calls()])
def test_fast_path_errors_are_those_of_the_full_validation(name, call):
    X, y = _stream(context=True)
    fast = FactorizationRegressor(model="fm", entity_columns=[0, 1], n_factors=2, random_state=0).fit(X, y)
    fast.predict(X[:1])
    fast.partial_fit(X[:1], y[:1])  # the fast path is ready
    assert fast._fast_row(X[1:2]) is not None
    slow = _slow(copy.deepcopy(fast))
    assert "_one_row" in vars(fast)  # a copy leaves the original's fast path
    before = _state(fast)
    row = X[3:4]
    assert np.array_equal(fast.predict(row), _slow(slow).predict(row))  # read, then the bad call, then learned
    errors = []
    for est in (fast, slow):
        with pytest.raises(Exception) as info:
            call(est)
        errors.append(info.value)
    assert type(errors[0]) is type(errors[1]) and str(errors[0]) == str(errors[1])
    assert isinstance(errors[0], (ValueError, TypeError, FilterStepError))
    _same_state(_state(fast), before)  # nothing learned, no entity kept
    # and the fast path still works, as the full validation
    fast.partial_fit(row, y[3:4])
    _slow(slow).partial_fit(row, y[3:4])
    _same_state(_state(fast), _state(slow))
    assert np.array_equal(fast.predict(X[5:6]), _slow(slow).predict(X[5:6]))


def test_unseen_class_on_the_fast_path():
    X, y = _stream()
    labels = (y > 0).astype(int)
    clf = FactorizationClassifier(model="mf", entity_columns=[0, 1], n_factors=2, random_state=0).fit(X, labels)
    clf.partial_fit(X[:1], labels[:1])
    before = _state(clf)
    with pytest.raises(ValueError, match="labels not seen"):
        clf.partial_fit(X[:1], np.array([7]))
    _same_state(_state(clf), before)


def test_one_row_per_call_ends_where_one_call_ends():
    X, y = _stream(n=300, context=True)
    whole = FactorizationRegressor(model="fm", entity_columns=[0, 1], n_factors=3, random_state=0).fit(X[:50], y[:50])
    whole.partial_fit(X[50:], y[50:])
    rows = FactorizationRegressor(model="fm", entity_columns=[0, 1], n_factors=3, random_state=0).fit(X[:50], y[:50])
    for t in range(50, 300):
        rows.predict(X[t:t + 1])
        rows.partial_fit(X[t:t + 1], y[t:t + 1])
    _same_state(_state(rows), _state(whole), exact=False)
    assert np.allclose(rows.predict(X[:40]), whole.predict(X[:40]), rtol=1e-9)


@pytest.mark.parametrize("model, half_life", [("mf", None), ("fm", 40.0)])
def test_prequential_uses_earlier_rows_only_and_equals_the_loop(model, half_life):
    X, y = _stream(n=200, context=model == "fm")
    make = lambda: FactorizationRegressor(model=model, entity_columns=[0, 1], n_factors=3, half_life=half_life,
                                          random_state=0)
    mean, std = make().prequential_fit_predict(X, y, return_std=True)
    assert np.isnan(mean[0]) and np.isnan(std[0]) and np.all(np.isfinite(mean[1:])) and np.all(std[1:] > 0)
    # what predict then partial_fit of one row at a time give
    loop = make().fit(X[:1], y[:1])
    for t in range(1, 60):
        m, s = loop.predict(X[t:t + 1], return_std=True)
        assert np.allclose([m[0], s[0]], [mean[t], std[t]], rtol=1e-10, atol=1e-12)
        loop.partial_fit(X[t:t + 1], y[t:t + 1])
    # no leak: perturbing the rows from t on leaves the predictions before t as they were
    for t in (1, 17, 150):
        X2, y2 = X.copy(), y.copy()
        y2[t:] += 5.0
        X2[t:, 0] = X2[t:, 0] + 1000  # new users from t on
        m2 = make().prequential_fit_predict(X2, y2)
        assert np.array_equal(m2[:t], mean[:t], equal_nan=True)
        assert not np.allclose(m2[t + 1:], mean[t + 1:])
    est = make()
    assert np.array_equal(prequential_predict(est, X, y), mean, equal_nan=True)
    assert est.n_samples_seen_ == len(y)


def test_prequential_classifier_and_continuation():
    X, y = _stream(n=160)
    labels = (y > 0).astype(int)
    clf = FactorizationClassifier(model="mf", entity_columns=[0, 1], n_factors=2, random_state=0)
    proba = clf.prequential_fit_predict(X, labels, method="predict_proba")
    assert np.allclose(proba[0], 0.5) and np.allclose(proba.sum(axis=1), 1.0)
    # a block continuing the stream: as the rest of one prequential pass
    part = FactorizationClassifier(model="mf", entity_columns=[0, 1], n_factors=2, random_state=0)
    head = part.prequential_fit_predict(X[:70], labels[:70], method="predict_proba")
    tail = part.partial_fit_predict(X[70:], labels[70:], method="predict_proba")
    assert np.allclose(np.concatenate([head, tail]), proba, rtol=1e-10)
    assert np.array_equal(clf.prequential_fit_predict(X, labels), clf.classes_[np.argmax(proba, axis=1)])


def test_prequential_bad_input_leaves_the_estimator_as_it_was():
    X, y = _stream(n=60)
    est = FactorizationRegressor(model="mf", entity_columns=[0, 1], n_factors=2, random_state=0).fit(X, y)
    before = _state(est)
    y_bad = y.copy()
    y_bad[30] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        est.prequential_fit_predict(X, y_bad)
    _same_state(_state(est), before)


def test_fast_path_copies_and_threads():
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    X, y = _stream()
    est = FactorizationRegressor(model="mf", entity_columns=[0, 1], n_factors=2, random_state=0).fit(X, y)
    expected = [est.predict(X[t:t + 1]) for t in range(60)]  # the first builds the fast path
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda t: est.predict(X[t:t + 1]), list(range(60)) * 4))
    assert all(np.array_equal(g, expected[i % 60]) for i, g in enumerate(got))
    clone = pickle.loads(pickle.dumps(est))
    twin = copy.deepcopy(est)
    for other in (clone, twin):  # each learns into its own tables
        other.partial_fit(X[:1], y[:1])
        other.partial_fit(X[1:2], y[1:2])
        assert other.filter_.time == est.filter_.time + 2
    assert np.array_equal(est.predict(X[:1]), expected[0])
    assert np.array_equal(clone.predict(X[:1]), twin.predict(X[:1]))


def test_prequential_score_skips_the_row_before_any_data():
    from skfilter.model_selection import prequential_score

    X, y = _stream(n=120)
    scores = prequential_score(FactorizationRegressor(model="mf", entity_columns=[0, 1], n_factors=2, random_state=0),
                               X, y, scoring=["rmse", "nlpd", "coverage"])
    assert all(np.isfinite(v) for v in scores.values())


def test_kernels_switched_off_leave_the_fast_path():
    from skfilter.kernels import compiled_kernels

    X, y = _stream()
    est = FactorizationRegressor(model="mf", entity_columns=[0, 1], n_factors=2, random_state=0).fit(X, y)
    compiled = [est.predict(X[t:t + 1]) for t in range(5)]
    with compiled_kernels(False):
        assert est._fast_row(X[:1]) is None
        torch_engine = [est.predict(X[t:t + 1]) for t in range(5)]
    assert np.allclose(compiled, torch_engine, rtol=1e-12, atol=1e-12)


def _loop_prequential(est, X, y, **kwargs):
    """The prequential pass as a loop of predict and partial_fit over the prior's first rows (the
    path of a model the compiled DEKF does not serve), for comparison with the compiled pass."""
    n = len(y)
    classes = np.unique(y) if hasattr(est, "predict_proba") else None
    method = kwargs.pop("method", "predict")
    return est._prequential_loop(X, y, kwargs.pop("return_std", False), method, kwargs.pop("sample_weight", None),
                                 classes, n, min(est.n_prior_rows, n))


@pytest.mark.parametrize("case", ["mf", "fm-context-weights", "fm-float32-drift", "classifier"])
def test_compiled_prequential_is_the_loop_bit_for_bit(case):
    """The prior's first rows predicted inside the compiled DEKF (one validation, the filter
    restarted with each prefix's prior instead of built again) give the loop's predictions and
    leave the estimator in the loop's state, bit for bit."""
    X, y = _stream(n=130, context=case != "mf")
    kwargs = {"model": "mf" if case == "mf" else "fm", "entity_columns": [0, 1], "n_factors": 3, "random_state": 4,
              "n_prior_rows": 30}
    weights = np.random.default_rng(1).uniform(0.2, 2.0, len(y)) if case == "fm-context-weights" else None
    if case == "fm-float32-drift":
        kwargs.update(dtype="float32", half_life=25.0)
    if case == "classifier":
        make = lambda: FactorizationClassifier(**kwargs)
        y, method = (y > 0).astype(int), {"method": "predict_proba"}
    else:
        make = lambda: FactorizationRegressor(**kwargs)
        method = {"return_std": True}
    fast, slow = make(), make()
    got = fast.prequential_fit_predict(X, y, sample_weight=weights, **method)
    expected = _loop_prequential(slow, X, y, sample_weight=weights, **method)
    for a, b in zip(got if isinstance(got, tuple) else [got], expected if isinstance(expected, tuple) else [expected]):
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    _same_state(_state(fast), _state(slow))
    assert fast.n_iter_ == 1 and fast.__dict__.get("_stream_start") is None
    assert np.array_equal(fast.predict(X[:20]), slow.predict(X[:20]))


def test_prequential_of_a_model_outside_the_compiled_dekf_and_of_a_short_stream():
    X, y = _stream(n=70)
    labels = np.asarray(y > 0.2, dtype=int) + np.asarray(y > -0.2, dtype=int)  # three classes: the torch engine
    make = lambda: FactorizationClassifier(model="mf", entity_columns=[0, 1], n_factors=2, random_state=0,
                                           n_prior_rows=20)
    proba = make().prequential_fit_predict(X, labels, method="predict_proba")
    assert np.allclose(proba, _loop_prequential(make(), X, labels, method="predict_proba"), rtol=1e-12, atol=1e-14)
    short = FactorizationRegressor(model="mf", entity_columns=[0, 1], n_factors=2, random_state=0)
    mean = short.prequential_fit_predict(X[:30], y[:30])  # fewer rows than the prior's: still arriving
    assert np.isnan(mean[0]) and np.all(np.isfinite(mean[1:])) and short._stream_start is not None


def test_filter_restart_is_a_new_filter():
    """FactorizationFilter.restart with new priors: the filter a new one with them and the same
    seed would be (the same draws for the same entities, the same steps)."""
    X, y = _stream(n=80, context=True)
    make = lambda: FactorizationRegressor(model="fm", entity_columns=[0, 1], n_factors=3, random_state=2,
                                          half_life=30.0)
    reused = make().fit(X[:60], y[:60])  # a filter that has learned, with its compiled plan
    fresh = make().fit(X[60:], 3.0 * y[60:])
    ids, context = reused._validate(X[60:], None, False)
    reused._build(ids, context, 3.0 * y[60:, None], None, *reused._resolve(), seed=None, restart=True)
    assert reused.filter_.time == 0 and all(t.n_entities == 0 for t in reused.filter_.tables.values())
    reused.n_samples_seen_ = 0  # (the estimator's count: _build makes the filter only)
    reused.partial_fit(X[60:], 3.0 * y[60:])
    _same_state(_state(reused), _state(fresh))


def test_first_appearances_are_the_rows_the_tables_create():
    from skfilter.kernels.factorization import FirstAppearances, run_events_compiled

    X, y = _stream(n=40, context=True)
    make = lambda: FactorizationRegressor(model="fm", entity_columns=[0, 1], n_factors=3, random_state=1,
                                          half_life=20.0, n_prior_rows=1).fit(X[:1], y[:1])
    looked_up, given = make(), make()
    for est in (looked_up, given):
        est._build(*est._validate(X[:1], None, False), y[:1, None], None, *est._resolve(), restart=True)
    ids, context = given._validate(X, None, False)
    slot_ids, values = given._slot_ids(ids), given._slot_values(ids, context)
    appearances = FirstAppearances(given.filter_, slot_ids, 40)
    Y = torch.as_tensor(y[:30, None])
    run_events_compiled(looked_up.filter_, [None if s is None else s[:30] for s in slot_ids],
                        [v[:30] for v in values], Y, None)
    run_events_compiled(given.filter_, [None if s is None else s[:30] for s in slot_ids], [v[:30] for v in values],
                        Y, None, first_appearances=appearances)
    for est in (looked_up, given):
        est.n_samples_seen_ = 30
    _same_state(_state(given), _state(looked_up))
    with pytest.raises(ValueError, match="empty tables"):  # the tables are not empty any more
        run_events_compiled(given.filter_, [None if s is None else s[:5] for s in slot_ids], [v[:5] for v in values],
                            Y[:5], None, first_appearances=appearances)
