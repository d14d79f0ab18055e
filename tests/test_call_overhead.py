"""Per-call overhead (issue 18): the shortcuts a row-by-row streaming loop takes must change nothing.

A river-style loop calls ``predict`` (or ``predict_proba``) and then ``partial_fit`` once per row.
Those calls skip scikit-learn's validation for plain rows (:meth:`BaseFilter._fast_rows`,
``_validate_fast``, the classifiers' ``_fast_label_index``), predict on NumPy arrays
(``_host_predict``), remember the settings validated from the same parameter objects, the
structural checks that passed, the dynamics, the model outputs a prediction computed for the row
about to be learned, and (wrappers) the weighting function, the structure snapshot and the prior
belief (:func:`skfilter._utils.memo_for`). Here every shortcut is compared with the full path —
the same stream with all of them switched off (:func:`full_paths`) — bit for bit, and bad input on
the shortcuts must raise the full path's error and leave the estimator exactly as it was.
No timings are asserted (those are the benchmark's: ``python -m skfilter.benchmarks speed``).
"""

from __future__ import annotations

import contextlib
import copy
import pickle
import warnings
from unittest import mock

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.base import clone

from skfilter import (BOCDRegressor, EKFClassifier, EKFRegressor, LoFiClassifier, LoFiRegressor, WoLFClassifier,
                      WoLFRegressor)
from skfilter._classification import FilterClassifierMixin
from skfilter._estimator import BaseFilter
from skfilter._regression import FilterRegressorMixin
from skfilter._utils import is_frozen, memo_for

from test_bad_input import assert_unchanged, snapshot


class _Forgetful(dict):
    """A memo table that never keeps anything: ``memo_for`` returns a fresh dict at every call."""

    def __getitem__(self, key):
        raise KeyError(key)

    def __setitem__(self, key, value):
        pass


@contextlib.contextmanager
def full_paths():
    """Switch every per-call shortcut off: scikit-learn's validation, the torch predictive, no memo."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(BaseFilter, "_fast_rows", return_value=None))
        stack.enter_context(mock.patch.object(BaseFilter, "_validate_fast", return_value=None))
        stack.enter_context(mock.patch.object(BaseFilter, "_remembered_outputs", return_value=None))
        stack.enter_context(mock.patch.object(FilterRegressorMixin, "_host_predict", return_value=None))
        stack.enter_context(mock.patch.object(FilterClassifierMixin, "_fast_label_index", return_value=None))
        stack.enter_context(mock.patch("skfilter._utils._MEMOS", _Forgetful()))
        yield


# ---------------------------------------------------------------------------------------------
# data and estimators
# ---------------------------------------------------------------------------------------------
def _regression(n=60, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)


def _labels(y, kind):
    if kind == "binary-str":
        return np.where(y > 0, "up", "down")
    return np.digitize(y, [-0.5, 0.5])  # 0, 1, 2


REGRESSORS = {
    "lofi": lambda: LoFiRegressor(hidden_layer_sizes=(6,), rank=2, random_state=0),
    "lofi-f32": lambda: LoFiRegressor(hidden_layer_sizes=(6,), rank=2, dtype="float32", random_state=0),
    "lofi-plugin": lambda: LoFiRegressor(hidden_layer_sizes=(6,), rank=2, predictive="plugin", random_state=0),
    "lofi-decay": lambda: LoFiRegressor(hidden_layer_sizes=(6,), rank=2, decay=0.99, process_noise=1e-4,
                                        random_state=0),
    "ekf-vd": lambda: EKFRegressor(hidden_layer_sizes=(6,), covariance="vd", random_state=0),
    "ekf-full-fixed-noise": lambda: EKFRegressor(hidden_layer_sizes=(6,), obs_variance=0.05, random_state=0),
    "ekf-fd-poisson": lambda: EKFRegressor(hidden_layer_sizes=(4,), covariance="fd", likelihood="poisson",
                                           random_state=0),
    "wolf": lambda: WoLFRegressor(LoFiRegressor(hidden_layer_sizes=(6,), rank=2, random_state=0)),
    "bocd": lambda: BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(6,), rank=2, random_state=0), n_hypotheses=3),
}

CLASSIFIERS = {
    "lofi-3": (lambda: LoFiClassifier(hidden_layer_sizes=(6,), rank=2, random_state=0), "multiclass"),
    "ekf-binary-str": (lambda: EKFClassifier(hidden_layer_sizes=(6,), covariance="vd", random_state=0),
                       "binary-str"),
    "wolf-3": (lambda: WoLFClassifier(LoFiClassifier(hidden_layer_sizes=(6,), rank=2, random_state=0)),
               "multiclass"),
}


def _targets(name, y):
    return np.abs(np.round(2 * y)) if "poisson" in name else y


def _filter_of(est):
    while hasattr(est, "estimator_"):
        est = est.estimator_
    return est


def _assert_same(a, b, path="state"):
    """Bit-for-bit equality of states (tensors, arrays, tuples, dicts, scalars)."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), f"{path}: tensors differ"
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype, f"{path}: {a.dtype} != {b.dtype}"
        np.testing.assert_array_equal(a, b, err_msg=path)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, tuple):
        assert len(a) == len(b), path
        for i, (u, v) in enumerate(zip(a, b)):
            _assert_same(u, v, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _assert_same_estimators(a, b):
    _assert_same(_filter_of(a).filter_state_, _filter_of(b).filter_state_, "filter_state_")
    if hasattr(a, "runlength_state_"):
        _assert_same(tuple(a.runlength_state_), tuple(b.runlength_state_), "runlength_state_")


def _predictions(est, X):
    if hasattr(est, "predict_proba"):
        return est.predict_proba(X), est.predict(X)
    return est.predict(X), *est.predict(X, return_std=True), *est.predict(X, return_std=True, include_noise=False)


def _assert_same_predictions(p, q):
    for u, v in zip(p, q):
        assert u.dtype == v.dtype and u.shape == v.shape
        np.testing.assert_array_equal(u, v)


def _river_loop(est, X, y, rows=range(10, 40), as_rows=lambda x: x[None], as_targets=lambda t: [t]):
    """``predict`` (every method) then ``partial_fit`` of each row, one row per call; returns the
    predictions made."""
    out = []
    for i in rows:
        out.append(_predictions(est, as_rows(X[i])))
        est.partial_fit(as_rows(X[i]), as_targets(y[i]))
    return out


# ---------------------------------------------------------------------------------------------
# the shortcuts give the full path's results
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(REGRESSORS))
def test_regressor_row_loop_equals_the_full_path(name):
    X, y = _regression()
    y = _targets(name, y)
    fast = REGRESSORS[name]().fit(X[:10], y[:10])
    full = REGRESSORS[name]().fit(X[:10], y[:10])
    got = _river_loop(fast, X, y)
    with full_paths():
        want = _river_loop(full, X, y)
    for p, q in zip(got, want):
        _assert_same_predictions(p, q)
    _assert_same_estimators(fast, full)
    _assert_same_predictions(_predictions(fast, X), _predictions(full, X))  # many rows at once


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_classifier_row_loop_equals_the_full_path(name):
    make, kind = CLASSIFIERS[name]
    X, y = _regression()
    labels = _labels(y, kind)
    classes = np.unique(labels)
    fast = make().partial_fit(X[:10], labels[:10], classes=classes)
    full = make().partial_fit(X[:10], labels[:10], classes=classes)
    got = _river_loop(fast, X, labels)
    with full_paths():
        want = _river_loop(full, X, labels)
    for p, q in zip(got, want):
        _assert_same_predictions(p, q)
    _assert_same_estimators(fast, full)


@pytest.mark.parametrize("as_rows, as_targets", [
    (lambda x: x[None], lambda t: [t]),  # the ndarray row and a list target (the river-style loop)
    (lambda x: x[None], lambda t: np.array([t])),
    (lambda x: [list(x)], lambda t: [t]),  # lists
    (lambda x: (tuple(x),), lambda t: (t,)),  # tuples
    (lambda x: [x], lambda t: [float(t)]),  # a list of ndarray rows
    (lambda x: np.asfortranarray(x[None]), lambda t: np.array([[t]])[:, 0]),
    (lambda x: pd.DataFrame(x[None]), lambda t: pd.Series([t])),  # pandas without names: full path
])
def test_input_types_learn_and_predict_the_same(as_rows, as_targets):
    X, y = _regression()
    ref = LoFiRegressor(hidden_layer_sizes=(6,), rank=2, random_state=0).fit(X[:10], y[:10])
    est = clone(ref).fit(X[:10], y[:10])
    want = _river_loop(ref, X, y)
    got = _river_loop(est, X, y, as_rows=as_rows, as_targets=as_targets)
    for p, q in zip(got, want):
        _assert_same_predictions(p, q)
    _assert_same_estimators(est, ref)


def test_dataframe_with_feature_names_equals_ndarray_rows():
    """A DataFrame-fitted estimator keeps scikit-learn's path (feature-name checks) at every call;
    it learns and predicts exactly as the estimator fed the same values as ndarray rows."""
    X, y = _regression()
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    named = LoFiRegressor(hidden_layer_sizes=(6,), rank=2, random_state=0).fit(df[:10], y[:10])
    plain = LoFiRegressor(hidden_layer_sizes=(6,), rank=2, random_state=0).fit(X[:10], y[:10])
    for i in range(10, 30):
        _assert_same_predictions(_predictions(named, df.iloc[[i]]), _predictions(plain, X[i][None]))
        named.partial_fit(df.iloc[[i]], [y[i]])
        plain.partial_fit(X[i][None], [y[i]])
    _assert_same_estimators(named, plain)
    with pytest.warns(UserWarning, match="feature names"):
        named.predict(X[:1])  # an ndarray for a named fit: the full path and its warning
    with pytest.raises(ValueError, match="feature names"):
        named.partial_fit(df[["b", "a", "c"]][:1], y[:1])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_float32_rows_equal_their_float64_values(dtype):
    X, y = _regression()
    X32 = X.astype(np.float32)
    a = LoFiRegressor(hidden_layer_sizes=(6,), rank=2, dtype=dtype, random_state=0).fit(X32[:10], y[:10])
    b = LoFiRegressor(hidden_layer_sizes=(6,), rank=2, dtype=dtype, random_state=0).fit(X32[:10], y[:10])
    got = _river_loop(a, X32, y)
    want = _river_loop(b, X32.astype(np.float64), y)
    for p, q in zip(got, want):
        _assert_same_predictions(p, q)
    _assert_same_estimators(a, b)


def test_predict_then_learn_a_different_row_or_a_reused_buffer():
    """The outputs a prediction remembers are used only for the same rows from the same state."""
    X, y = _regression()
    a = LoFiRegressor(hidden_layer_sizes=(6,), rank=2, random_state=0).fit(X[:10], y[:10])
    b = clone(a).fit(X[:10], y[:10])
    buffer = X[10][None].copy()
    for i in range(10, 30):
        buffer[0] = X[i]
        a.predict(buffer)
        buffer[0] = X[i + 1]  # the caller reuses its buffer: the remembered outputs are stale
        a.partial_fit(buffer, [y[i + 1]])
        a.predict(X[i][None])
        a.partial_fit(X[i + 2][None], [y[i + 2]])  # another row
        with full_paths():
            b.partial_fit(X[i + 1][None], [y[i + 1]])
            b.partial_fit(X[i + 2][None], [y[i + 2]])
    _assert_same_estimators(a, b)
    est = LoFiRegressor(hidden_layer_sizes=(6,), rank=2, random_state=0).fit(X[:10], y[:10])
    est.predict(X[10:11])
    assert est._remembered_outputs(X[11:12]) is None  # other rows
    est.predict(X[10:11])
    est.partial_fit(X[12:13], y[12:13])
    assert est._remembered_outputs(X[10:11]) is None  # forgotten by the call
    est.predict(X[10:11])
    est.fit(X[:10], y[:10])  # a new state
    assert est._remembered_outputs(X[10:11]) is None


def test_predict_leaves_the_instance_dictionary_unchanged():
    X, y = _regression()
    for est in (LoFiRegressor(hidden_layer_sizes=(6,), rank=2, random_state=0).fit(X, y),
                LoFiClassifier(hidden_layer_sizes=(6,), rank=2, random_state=0).fit(X, _labels(y, "multiclass"))):
        est.partial_fit(X[:1], est.predict(X[:1]))
        before = dict(vars(est))
        _predictions(est, X[:1])
        assert vars(est).keys() == before.keys()
        assert all(vars(est)[k] is v for k, v in before.items())


# ---------------------------------------------------------------------------------------------
# bad input on the shortcuts: the full path's error, the estimator unchanged
# ---------------------------------------------------------------------------------------------
def _error(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - compared below
            return type(exc), str(exc)
    return None


def _row(values, dtype=np.float64):
    return np.asarray(values, dtype=dtype)[None]


BAD_ROWS = {
    "nan": lambda x: _row(np.where(np.arange(x.size) == 1, np.nan, x)),
    "inf": lambda x: _row(np.where(np.arange(x.size) == 0, np.inf, x)),
    "nan-float32": lambda x: _row(np.where(np.arange(x.size) == 2, np.nan, x), np.float32),
    "inf-float32": lambda x: _row(np.where(np.arange(x.size) == 2, -np.inf, x), np.float32),
    "inf-list": lambda x: [[float("inf")] * x.size],
    "too-large": lambda x: _row(np.where(np.arange(x.size) == 0, 1e200, x)),
    "too-large-for-float32": lambda x: _row(np.where(np.arange(x.size) == 0, 1e12, x)),
    "narrow": lambda x: _row(x[:-1]),
    "wide": lambda x: _row(np.r_[x, 0.0]),
    "empty": lambda x: np.empty((0, x.size)),
    "1d": lambda x: x.copy(),
    "3d": lambda x: x[None, None],
    "ragged-list": lambda x: [list(x), list(x[:-1])],
    "string-list": lambda x: [["a"] * x.size],
    "nan-list": lambda x: [[float("nan")] * x.size],
    "complex": lambda x: _row(x) + 1j,
    "object": lambda x: _row(x).astype(object),
}

BAD_TARGETS = {
    "nan": lambda t: [np.nan],
    "inf-array": lambda t: np.array([np.inf]),
    "none": lambda t: [None],
    "string": lambda t: ["a"],
    "two": lambda t: [t, t],
    "none-at-all": lambda t: [],
    "scalar": lambda t: np.float64(t),
    "2d-wrong-width": lambda t: np.array([[t, t]]),
    "too-large": lambda t: [1e200],
}


def _bad_cases(est, x, t):
    cases = {f"X-{k}": (lambda f=f: (f(x), [t])) for k, f in BAD_ROWS.items()}
    cases.update({f"y-{k}": (lambda f=f: (x[None], f(t))) for k, f in BAD_TARGETS.items()})
    return cases


@pytest.mark.parametrize("name", ["lofi", "lofi-f32", "ekf-vd", "wolf", "bocd"])
def test_bad_rows_raise_the_full_paths_error_and_change_nothing(name):
    X, y = _regression()
    est = REGRESSORS[name]().fit(X[:10], y[:10])
    _river_loop(est, X, y, rows=range(10, 13))  # the memo is warm
    for case, make in _bad_cases(est, X[13], y[13]).items():
        Xb, yb = make()
        for method, call in (("partial_fit", lambda: est.partial_fit(Xb, yb)), ("predict", lambda: est.predict(Xb)),
                             ("predict-std", lambda: est.predict(Xb, return_std=True))):
            if method != "partial_fit" and case.startswith("y-"):
                continue
            with full_paths():
                twin = copy.deepcopy(est)
                want = _error(lambda: getattr(twin, method.split("-")[0])(
                    *((Xb, yb) if method == "partial_fit" else (Xb,)),
                    **({"return_std": True} if method == "predict-std" else {})))
            before = snapshot(est)
            got = _error(call)
            assert got == want, f"{case} ({method}): {got} != {want}"
            if got is not None:
                assert_unchanged(before, est)
    # and it keeps learning as the full path does
    twin = copy.deepcopy(est)
    _river_loop(est, X, y, rows=range(13, 20))
    with full_paths():
        _river_loop(twin, X, y, rows=range(13, 20))
    _assert_same_estimators(est, twin)


BAD_LABELS = {
    "unknown": lambda: np.array([7]),
    "unknown-list": lambda: [7],
    "unknown-string": lambda: np.array(["z"]),
    "non-integral": lambda: np.array([0.5]),
    "nan": lambda: np.array([np.nan]),
    "none": lambda: [None],
    "2d": lambda: np.array([[0, 1]]),
    "two-for-one-row": lambda: np.array([0, 1]),
    "bytes": lambda: np.array([b"a"]),
}


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_bad_labels_raise_the_full_paths_error_and_change_nothing(name):
    make, kind = CLASSIFIERS[name]
    X, y = _regression()
    labels = _labels(y, kind)
    est = make().partial_fit(X[:10], labels[:10], classes=np.unique(labels))
    _river_loop(est, X, labels, rows=range(10, 13))
    for case, bad in BAD_LABELS.items():
        yb = bad()
        with full_paths():
            twin = copy.deepcopy(est)
            want = _error(lambda: twin.partial_fit(X[13][None], yb))
        before = snapshot(est)
        got = _error(lambda: est.partial_fit(X[13][None], yb))
        assert got == want, f"{case}: {got} != {want}"
        if got is not None:
            assert_unchanged(before, est)
    for case, fn in BAD_ROWS.items():
        Xb = fn(X[13])
        with full_paths():
            want = _error(lambda: copy.deepcopy(est).predict_proba(Xb))
        before = snapshot(est)
        assert _error(lambda: est.predict_proba(Xb)) == want, case
        assert _error(lambda: est.predict(Xb)) == want, case
        assert_unchanged(before, est)


def test_integral_float_and_bool_labels_take_the_shortcut_correctly():
    X, y = _regression()
    labels = (y > 0).astype(int)
    a = EKFClassifier(hidden_layer_sizes=(4,), random_state=0).fit(X[:10], labels[:10])
    b = clone(a).fit(X[:10], labels[:10])
    for i in range(10, 40):
        a.partial_fit(X[i][None], np.array([float(labels[i])]) if i % 2 else np.array([bool(labels[i])]))
        with full_paths():
            b.partial_fit(X[i][None], [labels[i]])
    _assert_same_estimators(a, b)


# ---------------------------------------------------------------------------------------------
# what is remembered follows the parameters
# ---------------------------------------------------------------------------------------------
def test_set_params_between_calls_takes_effect():
    X, y = _regression()
    a = LoFiRegressor(hidden_layer_sizes=(6,), rank=2, random_state=0).fit(X[:10], y[:10])
    b = clone(a).fit(X[:10], y[:10])
    _river_loop(a, X, y, rows=range(10, 15))
    with full_paths():
        _river_loop(b, X, y, rows=range(10, 15))
    for est in (a, b):
        est.set_params(decay=0.98, process_noise=1e-3, predictive="plugin")
    _river_loop(a, X, y, rows=range(15, 25))
    with full_paths():
        _river_loop(b, X, y, rows=range(15, 25))
    _assert_same_estimators(a, b)
    assert a._dynamics.decay == 0.98 and a._dynamics.process_noise == 1e-3
    a.set_params(decay=1.5)  # invalid: raises at the next call, as without the memo
    with pytest.raises(ValueError, match="decay"):
        a.partial_fit(X[:1], y[:1])
    a.set_params(decay=1.0)
    a.partial_fit(X[:1], y[:1])
    a.set_params(rank=3)  # structural: partial_fit cannot continue
    with pytest.raises(ValueError, match="rank"):
        a.partial_fit(X[:1], y[:1])
    a.set_params(rank=2)
    a.partial_fit(X[:1], y[:1])
    a.set_params(module__foo=1)  # an unknown keyword for the default MLP's build: a new public attribute
    with pytest.raises(ValueError, match="module__foo"):
        a.partial_fit(X[:1], y[:1])


def test_unknown_attribute_and_mutable_parameters_are_checked_at_every_call():
    X, y = _regression()
    est = LoFiRegressor(hidden_layer_sizes=(6,), rank=2, random_state=0).fit(X[:10], y[:10])
    est.partial_fit(X[10:11], y[10:11])
    est.colour = "blue"  # neither a parameter nor a module__ keyword
    with pytest.raises(TypeError, match="colour"):
        est.partial_fit(X[11:12], y[11:12])
    del est.colour
    est.partial_fit(X[11:12], y[11:12])
    sizes = [6]
    est = LoFiRegressor(hidden_layer_sizes=sizes, rank=2, random_state=0).fit(X[:10], y[:10])
    est.partial_fit(X[10:11], y[10:11])
    assert "params" not in memo_for(est)  # a list may change in place: validated at every call
    sizes.append(0)
    with pytest.raises(ValueError, match="hidden layer size"):
        est.partial_fit(X[11:12], y[11:12])


def test_get_params_clone_and_pickle_after_streaming():
    X, y = _regression()
    est = LoFiRegressor(hidden_layer_sizes=(6,), rank=2, random_state=0).fit(X[:10], y[:10])
    params = est.get_params()
    _river_loop(est, X, y, rows=range(10, 20))
    assert est.get_params() == params
    assert not [k for k in vars(est) if k.startswith("_memo") or k.startswith("_cfg")]
    again = pickle.loads(pickle.dumps(est))
    twin = copy.deepcopy(est)
    fresh = clone(est)
    assert "params" not in memo_for(fresh) and "params" not in memo_for(again)
    _river_loop(est, X, y, rows=range(20, 30))
    _river_loop(again, X, y, rows=range(20, 30))
    with full_paths():
        _river_loop(twin, X, y, rows=range(20, 30))
    _assert_same_estimators(est, again)
    _assert_same_estimators(est, twin)
    fresh.fit(X[:10], y[:10])
    fresh.partial_fit(X[10:11], [y[10]])


def test_wrapper_parameters_between_calls():
    X, y = _regression()
    # the prior (and the threshold's scale) fixed by the first 10 rows: no longer rebuilt after them
    wolf = WoLFRegressor(LoFiRegressor(hidden_layer_sizes=(6,), rank=2, n_prior_rows=10,
                                       random_state=0)).fit(X[:10], y[:10])
    _river_loop(wolf, X, y, rows=range(10, 13))
    installed = wolf.weighting_
    wolf.partial_fit(X[13:14], y[13:14])
    assert wolf.weighting_ is installed  # the same weighting function, not rebuilt
    wolf.set_params(threshold=0.3)
    wolf.partial_fit(X[14:15], y[14:15])
    assert wolf.weighting_ is not installed and wolf.weighting_.threshold == 0.3
    assert wolf.estimator_._weighting is wolf.weighting_
    wolf.set_params(estimator__rank=3)  # a parameter of the base: partial_fit cannot continue
    with pytest.raises(ValueError, match="estimator__rank"):
        wolf.partial_fit(X[15:16], y[15:16])
    wolf.set_params(estimator__rank=2)
    wolf.partial_fit(X[15:16], y[15:16])
    wolf.estimator.set_params(rank=4)  # the base changed in place
    with pytest.raises(ValueError, match="estimator__rank"):
        wolf.partial_fit(X[16:17], y[16:17])
    wolf.estimator.set_params(rank=2)
    wolf.set_params(robust_noise=True)  # own structural parameter
    with pytest.raises(ValueError, match="robust_noise"):
        wolf.partial_fit(X[16:17], y[16:17])

    bocd = BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(6,), rank=2, random_state=0), n_hypotheses=3)
    bocd.fit(X[:10], y[:10])
    _river_loop(bocd, X, y, rows=range(10, 13))
    bocd.estimator.set_params(rank=3)
    with pytest.raises(ValueError, match="estimator__rank"):
        bocd.partial_fit(X[13:14], y[13:14])
    bocd.estimator.set_params(rank=2)
    bocd.set_params(hazard=0.2, n_hypotheses=2)  # not structural: take effect
    twin = copy.deepcopy(bocd)
    _river_loop(bocd, X, y, rows=range(13, 20))
    with full_paths():
        _river_loop(twin, X, y, rows=range(13, 20))
    _assert_same_estimators(bocd, twin)
    assert len(bocd.run_lengths_) <= 2


@pytest.mark.parametrize("value, frozen", [
    (None, True), (1, True), (1.5, True), ("auto", True), (True, True), (np.float64(2.0), True),
    (torch.float32, True), (torch.device("cpu"), True), ((50, 20), True), (((1,), "a"), True), (LoFiRegressor, True),
    ([50], False), ((50, [20]), False), (np.array([1.0]), False), ({"a": 1}, False), (torch.tensor(1.0), False),
    (LoFiRegressor(), False), (lambda x: x, False),
])
def test_is_frozen(value, frozen):
    assert is_frozen(value) is frozen


# ---------------------------------------------------------------------------------------------
# issue 29: classes passed at every call (river's bridge), the wrappers' structure shortcut
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("as_classes", [list, tuple, np.array], ids=["list", "tuple", "ndarray"])
def test_classes_passed_at_every_call_take_the_shortcut_and_a_change_still_raises(as_classes):
    X, y = _regression()
    labels = _labels(y, "multiclass")
    classes = as_classes([0, 1, 2])
    make = lambda: LoFiClassifier(hidden_layer_sizes=(6,), rank=2, random_state=0)  # noqa: E731
    fast = make().partial_fit(X[:10], labels[:10], classes=classes)
    full = make().partial_fit(X[:10], labels[:10], classes=classes)
    for i in range(10, 30):
        p = fast.predict_proba(X[i][None])
        fast.partial_fit(X[i][None], labels[i:i + 1], classes=classes)
        with full_paths():
            np.testing.assert_array_equal(p, full.predict_proba(X[i][None]))
            full.partial_fit(X[i][None], labels[i:i + 1], classes=classes)
    _assert_same_estimators(fast, full)
    # the same classes object: scikit-learn's label checks are not run again
    with mock.patch("skfilter._classification.encode_class_labels", side_effect=AssertionError("full path")):
        fast.partial_fit(X[30][None], labels[30:31], classes=classes)
    with full_paths():
        full.partial_fit(X[30][None], labels[30:31], classes=classes)
    # an unknown label, or classes changed (in place where the type allows): the full path's error
    if as_classes is tuple:
        changed = (0, 1, 3)
    else:
        changed = classes
        changed[2] = 3
    for yb, cls in ((np.array([7]), classes), ([7], classes), (labels[31:32], changed)):
        with full_paths():
            want = _error(lambda: copy.deepcopy(full).partial_fit(X[31][None], yb, classes=cls))
        before = snapshot(fast)
        assert want is not None and _error(lambda: fast.partial_fit(X[31][None], yb, classes=cls)) == want
        assert_unchanged(before, fast)


def test_river_bridge_classifier_equals_direct_calls():
    river = pytest.importorskip("river.compat")
    X, y = _regression()
    labels = _labels(y, "multiclass")
    model = river.convert_sklearn_to_river(LoFiClassifier(hidden_layer_sizes=(6,), rank=2, random_state=0),
                                           classes=[0, 1, 2])
    direct = LoFiClassifier(hidden_layer_sizes=(6,), rank=2, random_state=0)
    for i in range(40):
        x = {f"x{j}": v for j, v in enumerate(X[i])}
        if i:
            p = model.predict_proba_one(x)
            np.testing.assert_array_equal([p[0], p[1], p[2]], direct.predict_proba(X[i][None])[0])
        model.learn_one(x, labels[i])
        direct.partial_fit(X[i][None], labels[i:i + 1], classes=[0, 1, 2])
    _assert_same_estimators(model.estimator, direct)


@pytest.mark.parametrize("name", ["wolf", "bocd"])
def test_wrappers_check_their_structure_without_a_snapshot_while_nothing_changed(name):
    from skfilter._meta import FilterMetaEstimator

    X, y = _regression()
    est = REGRESSORS[name]().fit(X[:10], y[:10])
    est.partial_fit(X[10:11], y[10:11])
    with mock.patch.object(FilterMetaEstimator, "_structure_snapshot", side_effect=AssertionError("snapshot")):
        for i in range(11, 15):
            est.predict(X[i][None])
            est.partial_fit(X[i][None], y[i:i + 1])
    est.estimator.set_params(rank=3)  # a change is still seen
    with pytest.raises(ValueError, match="changed since the stream was started"):
        est.partial_fit(X[15][None], y[15:16])


def test_river_bridge_bad_rows_raise_the_full_paths_error_and_change_nothing():
    river = pytest.importorskip("river.compat")
    X, y = _regression()
    model = river.convert_sklearn_to_river(LoFiRegressor(hidden_layer_sizes=(6,), rank=2, random_state=0))
    names = [f"x{j}" for j in range(X.shape[1])]
    for i in range(12):
        model.predict_one(dict(zip(names, X[i])))
        model.learn_one(dict(zip(names, X[i])), y[i])
    est = model.estimator
    for bad, target in (([np.nan, 0.0, 1.0], 0.5), ([np.inf, 0.0, 1.0], 0.5), ([1e200, 0.0, 1.0], 0.5),
                        (list(X[12]), np.nan), (list(X[12]), None)):
        x = dict(zip(names, bad))
        with full_paths():
            want = _error(lambda: copy.deepcopy(est).partial_fit([list(x.values())], [target]))
        before = snapshot(est)
        assert want is not None and _error(lambda: model.learn_one(x, target)) == want
        assert_unchanged(before, est)
