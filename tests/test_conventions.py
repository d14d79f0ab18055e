"""scikit-learn conventions of the filter estimators (issue 19): ``n_iter_``, ``loss_curve_``
(the mean prequential loss per pass) and ``warm_start``, as :class:`~sklearn.neural_network.MLPRegressor`."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.metrics import log_loss

from skfilter import EKFClassifier, EKFRegressor, LoFiClassifier, LoFiRegressor

rng = np.random.default_rng(0)
X = rng.normal(size=(80, 3))
y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=80)
y_class = np.digitize(y, [-0.4, 0.4])  # three classes
y_binary = (y > 0).astype(int)

REGRESSORS = [
    LoFiRegressor(hidden_layer_sizes=(6,), rank=3, random_state=0),
    EKFRegressor(hidden_layer_sizes=(6,), random_state=0),
    EKFRegressor(hidden_layer_sizes=(6,), covariance="vd", random_state=0),
]
CLASSIFIERS = [
    LoFiClassifier(hidden_layer_sizes=(6,), rank=3, random_state=0),
    EKFClassifier(hidden_layer_sizes=(6,), random_state=0),
    EKFClassifier(hidden_layer_sizes=(6,), covariance="vd", random_state=0),
]
ALL = [(est, y) for est in REGRESSORS] + [(est, y_class) for est in CLASSIFIERS]
IDS = [f"{type(e).__name__}-{getattr(e, 'covariance', 'lofi')}" for e, _ in ALL]


def _fit_kwargs(est, target):
    return {"classes": np.unique(target)} if hasattr(est, "predict_proba") else {}


@pytest.mark.parametrize("est, target", ALL, ids=IDS)
def test_n_iter_counts_passes_of_fit_and_partial_fit(est, target):
    est = clone(est).set_params(n_epochs=3)
    est.fit(X, target)
    assert est.n_iter_ == 3 and len(est.loss_curve_) == 3
    est.partial_fit(X[:10], target[:10])
    est.partial_fit(X[10:20], target[10:20])
    assert est.n_iter_ == 5 and len(est.loss_curve_) == 5
    assert all(math.isnan(v) for v in est.loss_curve_[3:])  # partial_fit calls are not scored
    est.fit(X, target)  # warm_start=False: counted anew
    assert est.n_iter_ == 3 and len(est.loss_curve_) == 3
    fresh = clone(est).set_params(n_epochs=1)
    fresh.partial_fit(X, target, **_fit_kwargs(est, target))
    assert fresh.n_iter_ == 1 and len(fresh.loss_curve_) == 1


@pytest.mark.parametrize("est, target", ALL, ids=IDS)
@pytest.mark.parametrize("data_free", [False, True])
def test_loss_curve_is_the_prequential_loss_of_each_pass(est, target, data_free):
    """``prequential_fit_predict`` scores its pass by the loss of the predictions it returns (a
    regressor's row 0 before any data has none and is left out). With a prior that uses no data its
    predictions are those a multi-pass ``fit`` scores in its first pass (the same filter loop); a
    data-scaled prior fixed by the first rows differs there by construction (the prequential pass
    predicts those rows from the rows before them only)."""
    if data_free:
        est = clone(est).set_params(prior_variance=0.5, **({} if hasattr(est, "predict_proba")
                                                         else {"obs_variance": 0.05}))
    multi = clone(est).set_params(n_epochs=2).fit(X, target)
    assert all(np.isfinite(multi.loss_curve_))
    single = clone(est)
    if hasattr(est, "predict_proba"):
        proba = single.prequential_fit_predict(X, target, method="predict_proba")
        expected = log_loss(target, proba, labels=single.classes_)
    else:
        mean, std = single.prequential_fit_predict(X, target, return_std=True)
        expected = np.nanmean(0.5 * np.log(2 * np.pi * std ** 2) + (target - mean) ** 2 / (2 * std ** 2))
        assert np.isnan(mean[0]) != data_free
    if data_free:
        np.testing.assert_allclose(multi.loss_curve_[0], expected, rtol=1e-9)
    np.testing.assert_allclose(single.loss_curve_, [expected], rtol=1e-9)
    assert single.n_iter_ == 1


def test_loss_curve_of_a_binary_classifier_and_a_single_pass_fit():
    clf = EKFClassifier(hidden_layer_sizes=(6,), prior_variance=0.5, random_state=0, n_epochs=2).fit(X, y_binary)
    proba = clone(clf).set_params(n_epochs=1).prequential_fit_predict(X, y_binary, method="predict_proba")
    np.testing.assert_allclose(clf.loss_curve_[0], log_loss(y_binary, proba), rtol=1e-9)
    one = clone(clf).set_params(n_epochs=1).fit(X, y_binary)  # a plain fit does not pay for scoring
    assert one.n_iter_ == 1 and len(one.loss_curve_) == 1 and math.isnan(one.loss_curve_[0])


def test_loss_curve_with_mc_predictive_scores_the_linearized_predictive():
    reg = LoFiRegressor(hidden_layer_sizes=(6,), rank=3, random_state=0, n_epochs=2)
    lin = clone(reg).fit(X, y).loss_curve_
    mc = clone(reg).set_params(predictive="mc").fit(X, y).loss_curve_
    np.testing.assert_allclose(mc, lin, rtol=1e-12)


def test_multi_output_loss_sums_over_outputs():
    Y = np.column_stack([y, -y])
    reg = EKFRegressor(hidden_layer_sizes=(6,), prior_variance=0.5, obs_variance=0.05, random_state=0,
                       n_epochs=2).fit(X, Y)
    mean, std = clone(reg).set_params(n_epochs=1).prequential_fit_predict(X, Y, return_std=True)
    nlpd = 0.5 * np.log(2 * np.pi * std ** 2) + (Y - mean) ** 2 / (2 * std ** 2)
    np.testing.assert_allclose(reg.loss_curve_[0], nlpd.sum(1).mean(), rtol=1e-9)


@pytest.mark.parametrize("est, target", ALL, ids=IDS)
def test_warm_start_fit_continues_from_the_current_belief(est, target):
    warm = clone(est).set_params(warm_start=True)
    warm.fit(X[:40], target[:40]).fit(X[40:], target[40:])
    cold_then_partial = clone(est).fit(X[:40], target[:40]).partial_fit(X[40:], target[40:])
    method = "predict_proba" if hasattr(est, "predict_proba") else "predict"
    np.testing.assert_array_equal(getattr(warm, method)(X), getattr(cold_then_partial, method)(X))
    assert warm.n_samples_seen_ == 80 and warm.n_iter_ == 2 and len(warm.loss_curve_) == 2

    # n_epochs=2: the second fit makes two more passes, as one fit on the concatenation would
    twice = clone(est).set_params(warm_start=True, n_epochs=2)
    twice.fit(X, target).fit(X, target)
    four = clone(est).set_params(n_epochs=4).fit(X, target)
    np.testing.assert_array_equal(getattr(twice, method)(X), getattr(four, method)(X))
    assert twice.n_iter_ == 4 and twice.n_samples_seen_ == 320
    np.testing.assert_allclose(twice.loss_curve_, four.loss_curve_, rtol=1e-12)


@pytest.mark.parametrize("est, target", ALL, ids=IDS)
def test_warm_start_false_resets(est, target):
    est = clone(est)
    est.fit(X[:40], target[:40]).fit(X[40:], target[40:])
    fresh = clone(est).fit(X[40:], target[40:])
    method = "predict_proba" if hasattr(est, "predict_proba") else "predict"
    np.testing.assert_array_equal(getattr(est, method)(X), getattr(fresh, method)(X))
    assert est.n_samples_seen_ == 40 and est.n_iter_ == 1


def test_warm_start_is_a_plain_validated_parameter():
    reg = LoFiRegressor(hidden_layer_sizes=(6,), rank=3, random_state=0)
    assert reg.get_params()["warm_start"] is False
    reg.fit(X, y)
    reg.set_params(warm_start=True).partial_fit(X, y)  # not structural: no error
    assert reg.n_samples_seen_ == 160
    with pytest.raises(TypeError, match="warm_start"):
        clone(reg).set_params(warm_start="yes").fit(X, y)
    state = reg.filter_state_
    with pytest.raises(TypeError, match="warm_start"):
        reg.set_params(warm_start=1).fit(X, y)
    assert reg.filter_state_ is state
