"""The lean one-row path (issue 29): ``partial_fit`` of one plain row on the compiled kernels with
minimal Python (:meth:`BaseFilter._lean_fit`, :meth:`~skfilter.stepping.KernelPlan.run_row`)
and the lean one-row predictions (:meth:`BaseFilter._lean_rows`, ``_lean_outputs``).

Every case is compared with the full path (:func:`test_call_overhead.full_paths`: no memo, hence no
lean path) bit for bit, on estimators whose stream's first rows are complete (the lean path is never
taken while they are pending); the lean path must have been taken (counted), bad input must raise
the full path's error and change nothing, and a failing or interrupted step keeps the last good
belief.
"""

from __future__ import annotations

import copy
from unittest import mock

import numpy as np
import pytest
import torch

from skfilter import LoFiClassifier, LoFiRegressor, EKFRegressor, WoLFRegressor, kernels
from skfilter._estimator import BaseFilter
from skfilter.exceptions import FilterStepError
from skfilter import stepping
from skfilter.kernels.lofi import REDO_STEP

from test_bad_input import assert_unchanged, snapshot
from test_call_overhead import (BAD_ROWS, _assert_same_estimators, _assert_same_predictions, _error, _labels,
                                _predictions, _regression, full_paths)

N_PRIOR = 8  # the stream's first rows, complete after the first call of 10

pytestmark = pytest.mark.skipif(not kernels.AVAILABLE, reason="numba not installed")

REGRESSORS = {
    "lofi": lambda: LoFiRegressor(hidden_layer_sizes=(6,), rank=2, n_prior_rows=N_PRIOR, random_state=0),
    "lofi-f32": lambda: LoFiRegressor(hidden_layer_sizes=(6,), rank=2, n_prior_rows=N_PRIOR, dtype="float32",
                                      random_state=0),
    "lofi-decay": lambda: LoFiRegressor(hidden_layer_sizes=(6,), rank=2, n_prior_rows=N_PRIOR, decay=0.99,
                                        process_noise=1e-4, random_state=0),
    "ekf-vd": lambda: EKFRegressor(hidden_layer_sizes=(6,), covariance="vd", n_prior_rows=N_PRIOR, random_state=0),
    "wolf": lambda: WoLFRegressor(LoFiRegressor(hidden_layer_sizes=(6,), rank=2, n_prior_rows=N_PRIOR,
                                                random_state=0)),
}


def _classifier():
    return LoFiClassifier(hidden_layer_sizes=(6,), rank=2, n_prior_rows=N_PRIOR, random_state=0)


class _Count:
    """Counts the calls the lean path served (``_lean_fit`` returning True)."""

    def __init__(self):
        self.served = 0
        self._orig = BaseFilter._lean_fit

    def __enter__(self):
        count = self

        def lean_fit(est, *args):
            out = count._orig(est, *args)
            count.served += bool(out)
            return out

        self._patch = mock.patch.object(BaseFilter, "_lean_fit", lean_fit)
        self._patch.start()
        return self

    def __exit__(self, *exc):
        self._patch.stop()
        return False


def _loop(est, X, y, rows, as_rows=lambda x: x[None], as_targets=lambda t: np.array([t])):
    out = []
    for i in rows:
        out.append(_predictions(est, as_rows(X[i])))
        est.partial_fit(as_rows(X[i]), as_targets(y[i]))
    return out


def _assert_same_streams(got, want, a=None, b=None):
    """The predictions of two streams equal row by row, bit for bit (and, given, the estimators' states)."""
    assert len(got) == len(want)
    for p, q in zip(got, want):
        _assert_same_predictions(p, q)
    if a is not None:
        _assert_same_estimators(a, b)


@pytest.mark.parametrize("targets", ["array", "list"])
@pytest.mark.parametrize("name", sorted(REGRESSORS))
def test_regressor_lean_path_equals_the_full_path(name, targets):
    X, y = _regression()
    as_targets = (lambda t: np.array([t])) if targets == "array" else (lambda t: [t])
    lean = REGRESSORS[name]().fit(X[:10], y[:10])
    full = REGRESSORS[name]().fit(X[:10], y[:10])
    with _Count() as count:
        got = _loop(lean, X, y, range(10, 50), as_targets=as_targets)
    with full_paths():
        want = _loop(full, X, y, range(10, 50), as_targets=as_targets)
    assert count.served >= 38  # every call after the first of the loop (which makes the lean record)
    _assert_same_streams(got, want, lean, full)
    inner_a, inner_b = getattr(lean, "estimator_", lean), getattr(full, "estimator_", full)
    assert inner_a.n_iter_ == inner_b.n_iter_ and len(inner_a.loss_curve_) == len(inner_b.loss_curve_)
    _assert_same_predictions(_predictions(lean, X), _predictions(full, X))


def test_classifier_lean_path_equals_the_full_path():
    X, y = _regression()
    labels = _labels(y, "multiclass")
    classes = np.unique(labels)
    lean = _classifier().partial_fit(X[:10], labels[:10], classes=classes)
    full = _classifier().partial_fit(X[:10], labels[:10], classes=classes)
    with _Count() as count:
        got = _loop(lean, X, labels, range(10, 50))
        got += _loop(lean, X, labels, range(50, 55), as_targets=lambda t: [t])
    with full_paths():
        want = _loop(full, X, labels, range(10, 50)) + _loop(full, X, labels, range(50, 55), as_targets=lambda t: [t])
    assert count.served >= 43
    _assert_same_streams(got, want, lean, full)


def test_no_lean_path_while_the_first_rows_are_pending():
    X, y = _regression()
    est = LoFiRegressor(hidden_layer_sizes=(6,), rank=2, n_prior_rows=30, random_state=0).fit(X[:10], y[:10])
    twin = copy.deepcopy(est)
    with _Count() as count:
        _loop(est, X, y, range(10, 30))
        assert est._prior_pending is False  # the 30th row completed them (on the full path)
        assert count.served == 0
        _loop(est, X, y, range(30, 40))
        assert count.served >= 9
    with full_paths():
        _loop(twin, X, y, range(10, 40))
    _assert_same_estimators(est, twin)


def test_float32_rows_and_other_layouts_on_the_lean_path():
    X, y = _regression()
    lean = REGRESSORS["lofi"]().fit(X[:10], y[:10])
    full = REGRESSORS["lofi"]().fit(X[:10], y[:10])
    layouts = [lambda x: x[None].astype(np.float32), lambda x: np.asfortranarray(np.tile(x, (2, 1)))[:1],
               lambda x: [list(x)]]

    def readonly(x):
        r = x[None].copy()
        r.flags.writeable = False
        return r

    layouts.append(readonly)
    for k, as_rows in enumerate(layouts):
        rows = range(10 + 8 * k, 18 + 8 * k)
        got = _loop(lean, X, y, rows, as_rows=as_rows)
        with full_paths():
            want = _loop(full, X, y, rows, as_rows=as_rows)
        _assert_same_streams(got, want)
    _assert_same_estimators(lean, full)


BAD_TARGETS = {
    "nan": lambda t: np.array([np.nan]),
    "inf": lambda t: [np.inf],
    "huge": lambda t: np.array([1e300]),
    "two-outputs": lambda t: np.array([[t, t]]),
    "two-for-one-row": lambda t: np.array([t, t]),
    "string": lambda t: np.array(["a"]),
    "none": lambda t: [None],
}


@pytest.mark.parametrize("name", ["lofi", "lofi-f32", "wolf"])
def test_bad_input_on_the_lean_path_raises_the_full_paths_error_and_changes_nothing(name):
    X, y = _regression()
    est = REGRESSORS[name]().fit(X[:10], y[:10])
    _loop(est, X, y, range(10, 14))  # the lean record is made
    cases = {f"X-{k}": (f(X[14]), [y[14]]) for k, f in BAD_ROWS.items()}
    cases.update({f"y-{k}": (X[14][None], f(y[14])) for k, f in BAD_TARGETS.items()})
    cases["X-huge-row"] = (np.full((1, X.shape[1]), 1e200), [y[14]])
    cases["X-complex"] = (X[14][None].astype(np.complex128), [y[14]])
    for case, (Xb, yb) in cases.items():
        with full_paths():
            twin = copy.deepcopy(est)
            want = _error(lambda: twin.partial_fit(Xb, yb))
        before = snapshot(est)
        with _Count() as count:
            got = _error(lambda: est.partial_fit(Xb, yb))
        assert got == want, f"{case}: {got} != {want}"
        if got is not None:
            assert count.served == 0
            assert_unchanged(before, est)
        if case.startswith("X-"):
            with full_paths():
                want = _error(lambda: copy.deepcopy(est).predict(Xb))
            before = snapshot(est)
            assert _error(lambda: est.predict(Xb)) == want, case
            if want is not None:
                assert_unchanged(before, est)
    twin = copy.deepcopy(est)
    _loop(est, X, y, range(15, 25))
    with full_paths():
        _loop(twin, X, y, range(15, 25))
    _assert_same_estimators(est, twin)


def test_unseen_class_on_the_lean_path_raises_and_changes_nothing():
    X, y = _regression()
    labels = _labels(y, "multiclass")
    est = _classifier().partial_fit(X[:10], labels[:10], classes=np.unique(labels))
    _loop(est, X, labels, range(10, 14))
    for yb in (np.array([7]), [7], np.array([0.5]), np.array(["z"])):
        with full_paths():
            want = _error(lambda: copy.deepcopy(est).partial_fit(X[14][None], yb))
        before = snapshot(est)
        assert want is not None
        assert _error(lambda: est.partial_fit(X[14][None], yb)) == want
        assert_unchanged(before, est)


def test_output_too_large_on_the_lean_path_raises_the_full_paths_error():
    X, y = _regression()
    est = REGRESSORS["lofi"]().fit(X[:10], y[:10])
    _loop(est, X, y, range(10, 14))
    Xb = X[14][None]
    # an output limit this row's output exceeds (the real one needs outputs whose square overflows)
    limit = float(np.abs(est.predict(Xb)).max()) / 2
    with mock.patch("skfilter._estimator.output_limit", return_value=limit):
        est._keep_lean(est._check_params())  # the one-row path takes its bounds when it is set up
        with full_paths():
            want = _error(lambda: copy.deepcopy(est).partial_fit(Xb, [1.0]))
        for remembered in (True, False):  # the outputs of a prediction of the row, or a forward pass
            if remembered:
                est.predict(Xb)
            before = snapshot(est)
            with _Count() as count:
                assert want is not None and _error(lambda: est.partial_fit(Xb, [1.0])) == want
            assert count.served == 0
            assert_unchanged(before, est)


@pytest.mark.parametrize("exc", [FilterStepError("injected"), KeyboardInterrupt()])
def test_a_failed_or_interrupted_lean_step_keeps_the_last_good_belief(exc):
    X, y = _regression()
    est = REGRESSORS["lofi"]().fit(X[:10], y[:10])
    _loop(est, X, y, range(10, 14))
    state, n_iter, curve = est.filter_state_, est.n_iter_, list(est.loss_curve_)
    with _Count(), mock.patch.object(stepping, "lofi_rows", side_effect=exc):
        with pytest.raises(type(exc)) as info:
            est.partial_fit(X[14][None], [y[14]])
    assert info.value.rows_done == 0 and info.value.last_good_state is state
    assert est.filter_state_ is state and est.n_iter_ == n_iter and est.loss_curve_ == curve
    # and it goes on as the full path does
    twin = copy.deepcopy(est)
    _loop(est, X, y, range(14, 24))
    with full_paths():
        _loop(twin, X, y, range(14, 24))
    _assert_same_estimators(est, twin)


def test_a_step_the_kernel_hands_back_takes_the_full_path():
    X, y = _regression()
    lean = REGRESSORS["lofi"]().fit(X[:10], y[:10])
    full = REGRESSORS["lofi"]().fit(X[:10], y[:10])
    _loop(lean, X, y, range(10, 14))
    with full_paths():
        _loop(full, X, y, range(10, 14))
    original = stepping.lofi_rows

    def stiff(X_, *args):  # the kernel stops at row 14's step: the torch engine does it
        if X_.shape[0] and calls.append(1) is None and len(calls) <= 2:
            return 0, REDO_STEP, args[16]  # the last good belief: the slot the kernel was to read
        return original(X_, *args)

    before = stepping.handed_back()
    calls = []
    with _Count() as count, mock.patch.object(stepping, "lofi_rows", stiff):
        lean.partial_fit(X[14][None], [y[14]])  # lean: handed back, then the full path: handed back
    assert count.served == 0 and stepping.handed_back() - before == 1
    calls = [1]
    with full_paths(), mock.patch.object(stepping, "lofi_rows", stiff):
        full.partial_fit(X[14][None], [y[14]])
    _assert_same_estimators(lean, full)


def test_parameters_and_kernel_switch_between_lean_calls_take_effect():
    X, y = _regression()
    est = REGRESSORS["lofi"]().fit(X[:10], y[:10])
    twin = copy.deepcopy(est)
    _loop(est, X, y, range(10, 14))
    est.set_params(decay=0.98)
    with _Count() as count:
        est.partial_fit(X[14][None], [y[14]])
    assert count.served == 0  # new settings: the full path, which makes a new lean record
    with kernels.compiled_kernels(False), _Count() as count:
        est.partial_fit(X[15][None], [y[15]])
    assert count.served == 0
    with full_paths():
        _loop(twin, X, y, range(10, 14))
        twin.set_params(decay=0.98)
        twin.partial_fit(X[14][None], [y[14]])
        with kernels.compiled_kernels(False):
            twin.partial_fit(X[15][None], [y[15]])
    _assert_same_estimators(est, twin)


def test_lean_partial_fit_keeps_earlier_states_intact():
    """Beliefs are values: a state held by the caller is not written by later lean steps."""
    X, y = _regression()
    est = REGRESSORS["lofi"]().fit(X[:10], y[:10])
    _loop(est, X, y, range(10, 14))
    held = est.filter_state_
    copies = [t.clone() for t in held.belief[:3]]
    _loop(est, X, y, range(14, 24))
    for a, b in zip(held.belief[:3], copies):
        assert torch.equal(a, b)


def test_a_one_row_stream_holds_the_kernels_arrays_and_pickles_and_continues_as_it_would():
    import pickle

    X, y = _regression()
    est = REGRESSORS["lofi"]().fit(X[:10], y[:10])
    _loop(est, X, y, range(10, 20))
    held = vars(est)["_filter_state"]
    assert type(held) is stepping.RowState  # no tensors made per row
    assert held.state() is held.state() and est.filter_state_ is held.state()  # made once, when read
    twin = pickle.loads(pickle.dumps(est))
    assert type(vars(twin)["_filter_state"]) is stepping.RowState
    _assert_same_estimators(est, twin)
    with _Count() as count:
        got = _loop(est, X, y, range(20, 30))
        want = _loop(twin, X, y, range(20, 30))
    assert count.served >= 19
    _assert_same_streams(got, want, est, twin)


def test_wolf_one_row_calls_see_a_changed_base_parameter():
    X, y = _regression()
    est = REGRESSORS["wolf"]().fit(X[:10], y[:10])
    _loop(est, X, y, range(10, 20))
    est.set_params(estimator__rank=3)  # the stream's structure: the next call must refuse it
    with pytest.raises(ValueError, match="changed since the stream was started"):
        est.partial_fit(X[20][None], np.array([y[20]]))
    est.set_params(estimator__rank=2)  # back: the stream goes on
    lean, full = copy.deepcopy(est), copy.deepcopy(est)
    lean.set_params(threshold=0.5)  # a weighting parameter takes effect at the next one-row call
    full.set_params(threshold=0.5)
    with _Count() as count:
        got = _loop(lean, X, y, range(20, 30))
    with full_paths():
        want = _loop(full, X, y, range(20, 30))
    assert count.served >= 9
    _assert_same_streams(got, want, lean, full)
    assert lean.weighting_ is not None and lean.estimator_._weighting is lean.weighting_
