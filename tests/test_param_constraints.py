"""Parameter validation through scikit-learn's constraint machinery (issue 19).

Every public estimator declares ``_parameter_constraints`` for exactly its constructor parameters
(``get_params(deep=False)``; the ``**`` catch-all of ``module__<name>``/``optimizer__<name>``
keyword arguments is checked by ``fit`` separately), and ``fit`` rejects a value that violates a
constraint with scikit-learn's ``InvalidParameterError`` (a ``ValueError`` and a ``TypeError``),
naming the parameter, before anything is learned: an unfitted estimator stays unfitted, a fitted
one keeps its state object for object.
"""

from __future__ import annotations

import inspect
from numbers import Integral

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone, is_classifier
from sklearn.pipeline import Pipeline
from sklearn.utils._param_validation import (InvalidParameterError, Interval, StrOptions,
                                             generate_invalid_param_val, make_constraint)

import skfilter
import skfilter.baselines
import skfilter.compose
import skfilter.model_selection
from skfilter import EKFClassifier, EKFRegressor

SMALL = {"hidden_layer_sizes": (3,), "random_state": 0}


def _public_estimator_classes():
    """The public estimators (``PartialPipeline`` is scikit-learn's ``Pipeline``, with its constraints)."""
    found = {}
    for module in (skfilter, skfilter.baselines, skfilter.compose, skfilter.model_selection):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, BaseEstimator) and not issubclass(obj, Pipeline):
                found[name] = obj
    return found


CLASSES = _public_estimator_classes()


def _small(cls):
    """A quick instance of ``cls``: a small network, or a wrapper of a small EKF."""
    names = cls._get_param_names()
    if "regressor" in names:
        return cls(EKFRegressor(**SMALL))
    if "estimator" in names:
        base = EKFClassifier(**SMALL) if cls.__name__.endswith("Classifier") else EKFRegressor(**SMALL)
        return cls(base)
    if "n_factors" in names:  # the factorization models: no network
        return cls(n_factors=2, random_state=0)
    if "n_components" in names:  # the subspace filters: d at most the few weights of the small network
        return cls(**SMALL, n_components=2)
    return cls(**SMALL)


def _data(est):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 2))
    y = (X[:, 0] > 0).astype(int) if is_classifier(est) else X[:, 0] + 0.1 * rng.normal(size=12)
    return X, y


def test_every_public_estimator_is_covered():
    assert {"EKFRegressor", "EKFClassifier", "LoFiRegressor", "LoFiClassifier", "WoLFRegressor", "WoLFClassifier",
            "BOCDRegressor", "BOCDClassifier", "ReplaySGDRegressor", "ReplaySGDClassifier",
            "TargetScaledRegressor", "StreamPrefixEstimator"} <= set(CLASSES)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_constraints_cover_exactly_the_constructor_parameters(name):
    cls = CLASSES[name]
    assert set(cls._parameter_constraints) == set(_small(cls).get_params(deep=False))
    # keyword arguments of the catch-all are parameters too, but checked by fit, not by a constraint
    if "module" in cls._get_param_names():
        assert set(cls(module__width=3).get_params(deep=False)) - set(cls._parameter_constraints) == {"module__width"}


class _NoValue:
    """Satisfies no constraint (not a number, string, bool, class, callable or estimator)."""

    def __repr__(self):
        return "<no value>"


def _satisfies(constraints, value):
    return any(make_constraint(c).is_satisfied_by(value) for c in constraints)


def _invalid_values(constraints):
    """Values violating every constraint of a parameter: an object of no admissible kind, and the
    out-of-range value scikit-learn generates for each interval and string option."""
    values = [_NoValue()]
    for c in constraints:
        if isinstance(c, (Interval, StrOptions)):
            try:
                bad = generate_invalid_param_val(make_constraint(c))
            except NotImplementedError:  # pragma: no cover - no value outside the interval
                continue
            if not _satisfies(constraints, bad):
                values.append(bad)
        if isinstance(c, Interval) and c.type is Integral and not _satisfies(constraints, 2.5):
            values.append(2.5)
    return values


CASES = [(name, param, value) for name, cls in sorted(CLASSES.items())
         for param, constraints in sorted(cls._parameter_constraints.items())
         for value in _invalid_values(constraints)]


@pytest.mark.parametrize("name, param, value", CASES,
                         ids=[f"{n}-{p}-{type(v).__name__}:{v!r}"[:80] for n, p, v in CASES])
def test_an_invalid_value_raises_at_fit_and_changes_nothing(name, param, value):
    est = _small(CLASSES[name])
    X, y = _data(est)
    bad = clone(est).set_params(**{param: value})  # set_params never validates
    with pytest.raises(InvalidParameterError, match=f"'{param}' parameter of {name}"):
        bad.fit(X, y)
    assert not [k for k in vars(bad) if k.endswith("_") and not k.startswith("_")]  # still unfitted
    # a fitted estimator: the error comes first, and its state is the same objects afterwards
    est.fit(X, y)
    before = dict(vars(est))
    est.set_params(**{param: value})
    calls = [lambda: est.fit(X, y)] + ([lambda: est.partial_fit(X, y)] if hasattr(est, "partial_fit") else [])
    for call in calls:
        with pytest.raises(InvalidParameterError, match=f"'{param}' parameter"):
            call()
        after = vars(est)
        assert after.keys() == before.keys()
        assert all(after[k] is before[k] for k in before if k != param)


@pytest.mark.parametrize("param, value", [("batch_size", True), ("n_epochs", np.True_), ("decay", True),
                                          ("obs_variance", True), ("rank", False)])
def test_a_bool_is_not_a_number(param, value):
    """scikit-learn's intervals count ``True`` as 1; for a count or a variance it is a mistake."""
    est = skfilter.LoFiRegressor(**SMALL, **{param: value})
    X, y = _data(est)
    with pytest.raises(InvalidParameterError, match=f"'{param}' parameter of LoFiRegressor") as info:
        est.fit(X, y)
    assert isinstance(value, np.bool_) or "not a bool" in str(info.value)


@pytest.mark.parametrize("params, name", [
    ({"hidden_layer_sizes": (3, 0)}, "hidden_layer_sizes"),
    ({"hidden_layer_sizes": (2.5,)}, "hidden_layer_sizes"),
    ({"obs_variance": [1.0, -1.0]}, "obs_variance"),
    ({"obs_variance": [[1.0]]}, "obs_variance"),
    ({"svd": "orth"}, "svd"),
    ({"steady_state": True}, "steady_state"),
])
def test_checks_beyond_the_constraints_raise_the_same_error(params, name):
    """Entries of a sequence and values that depend on another parameter are checked after the
    constraint pass, with the same error type and wording."""
    est = skfilter.LoFiRegressor(**{**SMALL, **params})
    X, y = _data(est)
    with pytest.raises(InvalidParameterError, match=f"'{name}' parameter of LoFiRegressor"):
        est.fit(X, y)
    assert not hasattr(est, "filter_state_")


def test_bocd_one_hypothesis_rules_and_a_valid_value_passes():
    est = skfilter.BOCDRegressor(EKFRegressor(**SMALL), reset="ou")
    X, y = _data(est)
    with pytest.raises(InvalidParameterError, match="'n_hypotheses' parameter"):
        est.fit(X, y)
    est.set_params(n_hypotheses=1).fit(X, y)
    assert est.n_samples_seen_ == len(X)


def test_validation_runs_once_per_parameter_values(monkeypatch):
    """The constraint pass is memoised: a streaming loop does not pay for it at every call, and a
    changed value is validated again."""
    from sklearn.base import BaseEstimator as SkBase

    est = EKFRegressor(**SMALL)
    X, y = _data(est)
    calls = []
    original = SkBase._validate_params
    monkeypatch.setattr(SkBase, "_validate_params", lambda self: calls.append(1) or original(self))
    est.fit(X, y)
    n = len(calls)
    for i in range(5):
        est.partial_fit(X[i:i + 1], y[i:i + 1])
    assert len(calls) <= n + 1  # at most once more (the fitted attributes change the memo's key once)
    m = len(calls)
    est.set_params(decay=0.99)
    est.partial_fit(X[:1], y[:1])
    assert len(calls) == m + 1
    est.set_params(decay=2.0)
    with pytest.raises(InvalidParameterError, match="'decay'"):
        est.partial_fit(X[:1], y[:1])


@pytest.mark.parametrize("kwargs, name", [({"method": "transform"}, "method"), ({"return_std": "yes"}, "return_std")])
def test_public_functions_validate_their_scalar_options(kwargs, name):
    from skfilter.model_selection import prequential_predict

    est = EKFRegressor(**SMALL)
    X, y = _data(est)
    with pytest.raises(InvalidParameterError, match=f"'{name}' parameter of prequential_predict"):
        prequential_predict(est, X, y, **kwargs)
    assert not hasattr(est, "filter_state_")


def test_plotting_functions_validate_their_scalar_options():
    pytest.importorskip("matplotlib")
    from skfilter.plotting import plot_reliability, plot_run_length

    with pytest.raises(InvalidParameterError, match="'n_bins' parameter of plot_reliability"):
        plot_reliability([0, 1], [[0.5, 0.5], [0.2, 0.8]], n_bins=1.5)
    with pytest.raises(InvalidParameterError, match="'log_floor' parameter of plot_run_length"):
        plot_run_length(np.full((2, 2), 0.5), log_floor=-1.0)
