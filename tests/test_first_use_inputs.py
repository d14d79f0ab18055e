"""No input breaks an estimator (issue 15).

Every defect below was measured on the code before the change; each test fails there and passes
now. The contract: bad input is a clear ``ValueError``/``TypeError`` before anything is learned,
leaving the estimator exactly as it was; a failed step keeps the last good state; and after any
rejected call the estimator learns the next good rows exactly as one that never saw the bad call.
"""

import copy
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.base import is_regressor
from torch import nn

from skfilter import EKFRegressor, LoFiClassifier, LoFiRegressor
from skfilter._utils import magnitude_bound, resolve_device
from skfilter.exceptions import FilterStepError
from skfilter.models import train_mode_layers


def _sine(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 1))
    return X, np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)


def _state(est, X):
    """What must not change on a rejected call: predictions (mean and std), rows seen, belief."""
    mean, std = est.predict(X, return_std=True) if is_regressor(est) else (est.predict_proba(X), None)
    return mean, std, est.n_samples_seen_, copy.deepcopy(est.posterior_.state_dict())


def _assert_same_state(a, b):
    np.testing.assert_array_equal(a[0], b[0])
    if a[1] is not None:
        np.testing.assert_array_equal(a[1], b[1])
    assert a[2] == b[2]
    assert a[3].keys() == b[3].keys()
    for k in a[3]:
        va, vb = a[3][k], b[3][k]
        assert (torch.equal(va, vb) if torch.is_tensor(va) else va == vb), k


def _rejected_then_learns_like_a_fresh_one(make, X, y, bad_call, exc=ValueError, match=None):
    """``bad_call(est)`` raises before anything is learned; afterwards ``est`` learns good rows
    exactly as an estimator that never saw it."""
    est = make().fit(X[:30], y[:30])
    before = _state(est, X)
    with pytest.raises(exc, match=match):
        bad_call(est)
    _assert_same_state(before, _state(est, X))
    est.partial_fit(X[30:], y[30:])
    ref = make().fit(X[:30], y[:30]).partial_fit(X[30:], y[30:])
    np.testing.assert_array_equal(est.predict(X), ref.predict(X))
    assert est.n_samples_seen_ == ref.n_samples_seen_ == len(X)
    return est


# ---------------------------------------------------------------------------------------------
# defects measured before the change
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [EKFRegressor, LoFiRegressor])
def test_huge_target_is_rejected_and_the_estimator_keeps_learning(cls):
    """y = 1e200 was learned (counted in n_samples_seen_), predict returned NaN and every later
    partial_fit failed at step 0."""
    X, y = _sine()
    make = lambda: cls(hidden_layer_sizes=(8,), random_state=0)  # noqa: E731
    est = _rejected_then_learns_like_a_fresh_one(make, X, y, lambda e: e.partial_fit(X[:1], [1e200]),
                                                 match="magnitude.*Standardise")
    assert np.all(np.isfinite(est.predict(X, return_std=True)))


@pytest.mark.parametrize("bad", [1e300, 1e100, -1e80])
def test_huge_input_is_rejected_before_any_row_is_learned(bad):
    """A finite x whose products overflow (the step's h, J or J Σ Jᵀ) is rejected up front: the rows
    before it in the same call are not learned either."""
    X, y = _sine()
    Xb = X[30:].copy()
    Xb[7, 0] = bad
    make = lambda: EKFRegressor(hidden_layer_sizes=(5,), random_state=0)  # noqa: E731
    _rejected_then_learns_like_a_fresh_one(make, X, y, lambda e: e.partial_fit(Xb, y[30:]), match="X has an entry")


def test_model_output_overflow_is_rejected_before_learning():
    """Inputs within the magnitude bound at which the network at the current mean overflows (here
    a module squaring its input four times) are rejected by one forward pass before learning."""

    class Pow(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(1, 1)

        def forward(self, x):
            return self.lin(x ** 16)

    X, y = _sine()
    make = lambda: EKFRegressor(module=Pow, random_state=0)  # noqa: E731
    _rejected_then_learns_like_a_fresh_one(make, X, y, lambda e: e.partial_fit([[1e30]], [0.0]),
                                           match="network's output")
    with pytest.raises(ValueError, match="network's output"):
        EKFRegressor(module=Pow, random_state=0).fit(np.r_[X, [[1e30]]], np.r_[y, 0.0])


def test_far_input_is_legitimate_data():
    """x = 1e5 is finite and its products fit in float64: it is data, learned (not rejected)."""
    X, y = _sine()
    est = LoFiRegressor(hidden_layer_sizes=(8,), random_state=0).fit(X, y)
    est.partial_fit([[1e5]], [0.0])
    assert est.n_samples_seen_ == len(X) + 1
    assert np.all(np.isfinite(est.predict([[2.0]], return_std=True)))


def test_float32_estimator_validates_in_its_own_dtype():
    """dtype='float32' validated in float64: 1e40 passed and the step failed after rows were learned."""
    X, y = _sine()
    Xb = X.copy()
    Xb[5, 0] = 1e40
    est = EKFRegressor(hidden_layer_sizes=(8,), dtype="float32", random_state=0)
    with pytest.raises(ValueError, match="float32"):
        est.fit(Xb, y)
    assert not hasattr(est, "filter_state_")
    make = lambda: EKFRegressor(hidden_layer_sizes=(8,), dtype="float32", random_state=0)  # noqa: E731
    _rejected_then_learns_like_a_fresh_one(make, X, y, lambda e: e.partial_fit(Xb[:10], y[:10]), match="float32")
    _rejected_then_learns_like_a_fresh_one(make, X, y, lambda e: e.partial_fit(X[:3], [0.0, 1e39, 0.0]),
                                           match="y has an entry")
    # the bound is that of the dtype: the same value is fine in float64
    assert magnitude_bound(torch.float32) < 1e10 < magnitude_bound(torch.float64)
    EKFRegressor(hidden_layer_sizes=(3,), random_state=0).fit(np.r_[X, [[1e10]]], np.r_[y, 0.0])


@pytest.mark.parametrize("y_bad", [
    lambda y: np.array([*y[:3], None, *y[4:10]], dtype=object),
    lambda y: [*y[:3], None, *y[4:10]],
])
def test_none_target_is_a_clear_error_before_learning(y_bad):
    """A y column holding None failed inside a step after a row was learned, with advice about
    prior_variance."""
    X, y = _sine()
    est = EKFRegressor(hidden_layer_sizes=(8,), random_state=0)
    with pytest.raises(ValueError, match="None"):
        est.fit(X[:10], y_bad(y))
    assert not hasattr(est, "filter_state_")
    make = lambda: EKFRegressor(hidden_layer_sizes=(8,), random_state=0)  # noqa: E731
    _rejected_then_learns_like_a_fresh_one(make, X, y, lambda e: e.partial_fit(X[:10], y_bad(y)), match="None")


def test_classifiers_still_take_object_labels():
    X, y = _sine()
    labels = np.where(y > 0, "up", "down").astype(object)
    clf = LoFiClassifier(hidden_layer_sizes=(3,), random_state=0).fit(X, labels)
    assert set(clf.predict(X)) <= {"up", "down"}


def test_prediction_never_returns_nan():
    """predict(X, return_std=True) at 1e155 returned a NaN std without a word."""
    X, y = _sine()
    reg = EKFRegressor(hidden_layer_sizes=(8,), random_state=0).fit(X, y)
    clf = LoFiClassifier(hidden_layer_sizes=(3,), random_state=0).fit(X, y > 0)
    for big in (1e155, 1e300, -1e100):
        for call in (lambda: reg.predict([[big]], return_std=True), lambda: reg.predict([[big]]),
                     lambda: reg.sample_y([[big]], 3), lambda: clf.predict_proba([[big]]),
                     lambda: clf.predict([[big]])):
            with pytest.raises(ValueError, match="magnitude"):
                call()


def test_non_finite_prediction_is_a_value_error():
    """A prediction that overflows within the magnitude bound (a module squaring its input) is a
    ValueError, not NaN or infinity."""

    class Square(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(1, 1)

        def forward(self, x):
            return self.lin(x ** 8)

    X, y = _sine()
    reg = EKFRegressor(module=Square, random_state=0).fit(X, y)
    for call in (lambda: reg.predict([[1e50]], return_std=True), lambda: reg.sample_y([[1e50]], 2)):
        with pytest.raises(ValueError, match="not finite"):
            call()
    assert np.all(np.isfinite(reg.predict(X, return_std=True)))


@pytest.mark.parametrize("device", ["mps", "meta", "xpu", "cuda:99"])
def test_unsupported_or_unavailable_device(device):
    """device='mps' raised a raw torch RuntimeError."""
    if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.device_count() > 99:
        pytest.skip("a machine with 100 GPUs")
    if device == "mps" and torch.backends.mps.is_available():
        pytest.skip("MPS is available here")
    with pytest.raises(ValueError, match="device"):
        resolve_device(device)
    X, y = _sine()
    est = EKFRegressor(hidden_layer_sizes=(3,), device=device)
    with pytest.raises(ValueError, match="device"):
        est.fit(X, y)
    assert not hasattr(est, "filter_state_")


TRAIN_MODE_MODULES = {
    "dropout": lambda: nn.Sequential(nn.Linear(1, 4), nn.Dropout(0.1), nn.ReLU(), nn.Linear(4, 1)),
    "batchnorm": lambda: nn.Sequential(nn.Linear(1, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 1)),
    "instancenorm": lambda: nn.Sequential(nn.Linear(1, 4), nn.Unflatten(1, (1, 4)),
                                          nn.InstanceNorm1d(1, track_running_stats=True), nn.Flatten(),
                                          nn.Linear(4, 1)),
}


@pytest.mark.parametrize("name", sorted(TRAIN_MODE_MODULES))
def test_train_mode_layers_are_refused_with_the_fix(name):
    """A module with Dropout/BatchNorm was silently run in eval mode."""
    X, y = _sine()
    module = TRAIN_MODE_MODULES[name]()
    est = EKFRegressor(module=module, random_state=0)
    with pytest.raises(ValueError, match=r"train mode.*'1'|train mode.*'2'") as info:
        est.fit(X, y)
    assert "module.eval()" in str(info.value) and "deterministic" in str(info.value)
    assert not hasattr(est, "filter_state_")
    # documented behaviour: a module passed in eval mode is used as is (dropout off, running stats)
    est = EKFRegressor(module=module.eval(), random_state=0).fit(X, y)
    assert np.all(np.isfinite(est.predict(X)))
    # modules whose output does not depend on train mode are accepted in train mode
    assert train_mode_layers(nn.Sequential(nn.Linear(1, 4), nn.LayerNorm(4), nn.InstanceNorm1d(4))) == []


# ---------------------------------------------------------------------------------------------
# property: no finite input breaks an estimator
# ---------------------------------------------------------------------------------------------
def _magnitudes():
    """Finite floats spanning 1e-300 … 1e300, signs mixed (and exact zero)."""
    return st.one_of(
        st.just(0.0),
        st.builds(lambda s, e, m: s * m * 10.0 ** e, st.sampled_from([-1.0, 1.0]),
                  st.integers(-300, 299), st.floats(1.0, 9.99)),
    )


PROPERTY_ESTIMATORS = {
    "ekf-full": lambda: EKFRegressor(hidden_layer_sizes=(3,), random_state=0),
    "ekf-vd": lambda: EKFRegressor(hidden_layer_sizes=(3,), covariance="vd", random_state=0),
    "lofi": lambda: LoFiRegressor(hidden_layer_sizes=(3,), rank=2, random_state=0),
    "lofi-clf": lambda: LoFiClassifier(hidden_layer_sizes=(3,), rank=2, random_state=0),
}


@pytest.mark.parametrize("name", sorted(PROPERTY_ESTIMATORS))
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_finite_input_breaks_an_estimator(name, data):
    """Either a clear error with the state bit-identical, or a finite belief that keeps learning."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    clf = name.endswith("clf")
    y = (X[:, 0] > 0).astype(int) if clf else np.sin(X[:, 0]) + 0.1 * rng.normal(size=30)
    n = data.draw(st.integers(1, 3))
    Xb = np.array(data.draw(st.lists(_magnitudes(), min_size=2 * n, max_size=2 * n))).reshape(n, 2)
    yb = (np.array(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))) if clf
          else np.array(data.draw(st.lists(_magnitudes(), min_size=n, max_size=n))))
    est = PROPERTY_ESTIMATORS[name]().fit(X[:20], y[:20])
    before = _state(est, X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            est.partial_fit(Xb, yb)
        except (ValueError, FilterStepError) as exc:
            assert str(exc)
            if isinstance(exc, ValueError):  # rejected before anything was learned
                _assert_same_state(before, _state(est, X))
            else:
                assert est.n_samples_seen_ == 20 + exc.rows_done
        else:
            assert est.n_samples_seen_ == 20 + n
    # whatever happened, the belief is finite and the estimator learns the next good rows
    assert all(torch.isfinite(v).all() for v in est.posterior_.state_dict().values() if torch.is_tensor(v))
    est.partial_fit(X[20:], y[20:])
    pred = _state(est, X)
    assert np.all(np.isfinite(pred[0])) and (pred[1] is None or np.all(np.isfinite(pred[1])))
