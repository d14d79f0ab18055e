"""Successive halving that keeps time order (issue 19): with ``resource='max_rows'`` of
:class:`skfilter.model_selection.StreamPrefixEstimator`, every candidate of a
``HalvingGridSearchCV``/``HalvingRandomSearchCV`` learns a time-ordered prefix of its training fold,
where ``resource='n_samples'`` (scikit-learn's default) gives it a random subsample."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import loguniform
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.experimental import enable_halving_search_cv  # noqa: F401
from sklearn.model_selection import HalvingGridSearchCV, HalvingRandomSearchCV, TimeSeriesSplit
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfilter import EKFClassifier, EKFRegressor, LoFiRegressor
from skfilter.metrics import get_scorer
from skfilter.model_selection import StreamPrefixEstimator

#: the rows (their time index) every fit of a RowRecorder learned, in the order learned
LEARNED: list = []


class RowRecorder(RegressorMixin, BaseEstimator):
    """Records the time index (column 0) of the rows it is fitted on; predicts their mean target."""

    def __init__(self, alpha=1.0):
        self.alpha = alpha

    def fit(self, X, y, sample_weight=None):
        X = np.asarray(X)
        LEARNED.append((X[:, 0].astype(int).copy(), None if sample_weight is None else np.asarray(sample_weight)))
        self.mean_ = float(np.mean(y))
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X):
        return np.full(len(X), self.mean_ * self.alpha)


def _stream(n=240):
    t = np.arange(n)
    X = np.column_stack([t, np.random.default_rng(0).normal(size=n)])
    return X, np.sin(t / 20.0)


def test_every_candidate_learns_a_time_ordered_prefix():
    X, y = _stream()
    LEARNED.clear()
    search = HalvingGridSearchCV(StreamPrefixEstimator(RowRecorder()), {"estimator__alpha": [0.5, 0.8, 1.0, 1.2]},
                                 resource="max_rows", min_resources=20, max_resources=160, factor=2,
                                 cv=TimeSeriesSplit(n_splits=3), refit=False).fit(X, y)
    assert search.n_resources_ == [20, 40, 80]
    assert len(LEARNED) == sum(search.n_candidates_) * 3
    sizes = set()
    for rows, _ in LEARNED:
        np.testing.assert_array_equal(rows, np.arange(len(rows)))  # the first rows, in time order
        sizes.add(len(rows))
    # every round's prefix (TimeSeriesSplit's first training fold has 60 rows: 80 is cut to it)
    assert sizes == {20, 40, 60, 80}


def test_the_default_resource_breaks_time_order():
    """What the meta-estimator avoids: ``resource='n_samples'`` subsamples rows at random."""
    X, y = _stream()
    LEARNED.clear()
    HalvingGridSearchCV(RowRecorder(), {"alpha": [0.5, 0.8, 1.0, 1.2]}, min_resources=20, factor=2,
                        cv=TimeSeriesSplit(n_splits=3), refit=False, random_state=0).fit(X, y)
    first_round = [rows for rows, _ in LEARNED if len(rows) == 20]
    assert first_round and not any(np.array_equal(rows, np.arange(20)) for rows in first_round)
    assert not all(np.all(np.diff(rows) > 0) and rows[-1] - rows[0] == 19 for rows in first_round)


def test_fit_cuts_per_row_fit_parameters_to_the_prefix_and_keeps_others():
    X, y = _stream(50)
    LEARNED.clear()
    w = np.linspace(0.5, 1.5, 50)
    est = StreamPrefixEstimator(RowRecorder(), max_rows=12).fit(X, y, sample_weight=w)
    rows, weights = LEARNED[-1]
    np.testing.assert_array_equal(rows, np.arange(12))
    np.testing.assert_array_equal(weights, w[:12])
    assert est.n_rows_ == 12
    assert StreamPrefixEstimator(RowRecorder(), max_rows=500).fit(X, y).n_rows_ == 50  # all there is
    assert StreamPrefixEstimator(RowRecorder()).fit(X, y).n_rows_ == 50
    with pytest.raises(InvalidParameterError, match="'max_rows' parameter"):
        StreamPrefixEstimator(RowRecorder(), max_rows=0).fit(X, y)


def test_a_filter_learns_the_prefix_exactly_as_fitted_on_it():
    X, y = _stream(100)
    base = EKFRegressor(hidden_layer_sizes=(4,), random_state=0)
    est = StreamPrefixEstimator(base, max_rows=40).fit(X, y)
    direct = clone(base).fit(X[:40], y[:40])
    np.testing.assert_array_equal(est.predict(X, return_std=True), direct.predict(X, return_std=True))
    np.testing.assert_array_equal(est.sample_y(X[:3], n_samples=2, random_state=0),
                                  direct.sample_y(X[:3], n_samples=2, random_state=0))
    assert est.n_features_in_ == 2


def test_halving_random_search_over_log_uniform_variances_with_a_filter():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(360, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=360)
    search = HalvingRandomSearchCV(
        StreamPrefixEstimator(LoFiRegressor(hidden_layer_sizes=(8,), rank=2, random_state=0)),
        {"estimator__prior_variance": loguniform(1e-2, 1e1), "estimator__obs_variance": loguniform(1e-3, 1e0)},
        n_candidates=6, resource="max_rows", min_resources=45, max_resources=180, factor=2,
        cv=TimeSeriesSplit(n_splits=2), scoring=get_scorer("neg_nlpd"), random_state=0).fit(X, y)
    assert search.n_resources_ == [45, 90, 180]
    assert search.best_estimator_.n_rows_ == 180
    mean, std = search.best_estimator_.predict(X[:5], return_std=True)
    assert mean.shape == std.shape == (5,) and np.all(std > 0)


def test_a_classifier_inside_keeps_classifier_behaviour():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 2))
    y = (X[:, 0] > 0).astype(int)
    est = StreamPrefixEstimator(EKFClassifier(hidden_layer_sizes=(), random_state=0), max_rows=80).fit(X, y)
    assert est.predict_proba(X[:3]).shape == (3, 2) and est.score(X, y) > 0.8
    np.testing.assert_array_equal(est.classes_, [0, 1])
    assert not hasattr(StreamPrefixEstimator(EKFRegressor()), "predict_proba")


@parametrize_with_checks([StreamPrefixEstimator(EKFRegressor(hidden_layer_sizes=(5,), random_state=0), max_rows=1000),
                          StreamPrefixEstimator(EKFClassifier(hidden_layer_sizes=(5,), random_state=0))],
                         expected_failed_checks=lambda est: {
                             "check_sample_weight_equivalence_on_dense_data": (
                                 "as for the base filters (tests/test_sklearn_compat.py): a weight scales one "
                                 "linearised update; repeated rows re-linearise")})
def test_sklearn_compatible(estimator, check):
    check(estimator)
