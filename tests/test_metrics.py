"""skfilter.metrics (predictive scores, scorers) and model_selection.prequential_score."""

import math

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.base import clone
from sklearn.metrics import brier_score_loss, log_loss
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score

from skfilter import EKFClassifier, EKFRegressor
from skfilter import metrics
from skfilter.metrics import (
    brier_score,
    coverage_error_scorer,
    expected_calibration_error,
    gaussian_nlpd,
    get_scorer,
    interval_coverage,
    mean_interval_width,
    neg_brier_scorer,
    neg_ece_scorer,
    neg_interval_width_scorer,
    neg_nlpd_scorer,
    nominal_coverage,
)
from skfilter.model_selection import prequential_predict, prequential_score


def _gauss(n=50, k=None, seed=0):
    rng = np.random.default_rng(seed)
    shape = (n,) if k is None else (n, k)
    mean = rng.normal(size=shape)
    std = rng.uniform(0.2, 2.0, size=shape)
    y = mean + std * rng.normal(size=shape) * 1.3
    return y, mean, std


# -- regression metrics -------------------------------------------------------------------------
def test_gaussian_nlpd_matches_scipy_and_averages_outputs():
    y, m, s = _gauss()
    assert gaussian_nlpd(y, m, s) == pytest.approx(-np.mean(norm.logpdf(y, m, s)), rel=1e-12)
    y2, m2, s2 = _gauss(40, 3, seed=1)
    per_output = -norm.logpdf(y2, m2, s2).mean(axis=0)
    np.testing.assert_allclose(gaussian_nlpd(y2, m2, s2, multioutput="raw_values"), per_output, rtol=1e-12)
    assert gaussian_nlpd(y2, m2, s2) == pytest.approx(per_output.mean(), rel=1e-12)
    w = np.arange(1.0, 51.0)
    assert gaussian_nlpd(y, m, s, sample_weight=w) == pytest.approx(
        -np.average(norm.logpdf(y, m, s), weights=w), rel=1e-12)
    assert gaussian_nlpd(y, m, 1.5) == pytest.approx(-np.mean(norm.logpdf(y, m, 1.5)))  # scalar std
    assert isinstance(gaussian_nlpd(y, m, s), float)


def test_benchmark_helper_uses_the_public_nlpd():
    from skfilter.benchmarks import _common

    y, m, s = _gauss(5)
    np.testing.assert_allclose(_common.gaussian_nlpd(y, m, s), -norm.logpdf(y, m, s), rtol=1e-12)
    assert np.mean(_common.gaussian_nlpd(y, m, s)) == pytest.approx(gaussian_nlpd(y, m, s), rel=1e-12)


def test_nlpd_limits():
    y = np.linspace(-1, 1, 11)
    # perfect means: ½ log(2π σ²), which goes to −∞ as σ → 0
    assert gaussian_nlpd(y, y, 1e-3) == pytest.approx(0.5 * math.log(2 * math.pi * 1e-6))
    # for a fixed error the NLPD is smallest at σ = |error| (proper: a calibrated σ wins)
    sig = np.array([0.25, 0.5, 1.0, 2.0])
    vals = [gaussian_nlpd(y + 0.5 * np.sign(y + 0.01), y, s) for s in sig]
    assert int(np.argmin(vals)) == 1


def test_calibrated_random_predictions():
    rng = np.random.default_rng(0)
    n = 200_000
    mean = rng.normal(size=n)
    std = rng.uniform(0.5, 3.0, size=n)
    y = mean + std * rng.normal(size=n)
    for k in (1.0, 2.0, 3.0):
        assert interval_coverage(y, mean, std, n_std=k) == pytest.approx(nominal_coverage(k), abs=0.005)
    assert gaussian_nlpd(y, mean, std) == pytest.approx(np.mean(0.5 * np.log(2 * np.pi * std**2)) + 0.5, abs=0.01)
    # over-confident (σ halved) under-covers and scores worse
    assert interval_coverage(y, mean, std / 2) < 0.75
    assert gaussian_nlpd(y, mean, std / 2) > gaussian_nlpd(y, mean, std)


def test_interval_coverage_and_width_by_formula():
    y, m, s = _gauss(100, 2, seed=3)
    inside = np.abs(y - m) <= 2 * s
    assert interval_coverage(y, m, s) == pytest.approx(inside.mean())
    np.testing.assert_allclose(interval_coverage(y, m, s, multioutput="raw_values"), inside.mean(axis=0))
    assert interval_coverage(y, m, s, n_std=1.0) == pytest.approx((np.abs(y - m) <= s).mean())
    # the interval is closed; std 0 is allowed (a point interval)
    assert interval_coverage([2.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]) == pytest.approx(2 / 3)
    assert interval_coverage(m, m, 1e-9) == 1.0  # perfect means
    assert mean_interval_width(s) == pytest.approx(np.mean(4 * s))
    np.testing.assert_allclose(mean_interval_width(s, n_std=1.0, multioutput="raw_values"), (2 * s).mean(axis=0))
    assert mean_interval_width([1.0, 3.0], sample_weight=[3.0, 1.0]) == pytest.approx(4 * 1.5)
    assert nominal_coverage(2.0) == pytest.approx(0.9544997361)


@pytest.mark.parametrize("bad", [
    lambda: gaussian_nlpd([0.0, 1.0], [0.0, 1.0], [1.0, -1.0]),
    lambda: gaussian_nlpd([0.0, 1.0], [0.0, 1.0], [1.0, 0.0]),
    lambda: gaussian_nlpd([0.0, 1.0], [0.0, 1.0, 2.0], [1.0, 1.0]),
    lambda: gaussian_nlpd([0.0, 1.0], [[0.0], [1.0]], [1.0, 1.0]),
    lambda: gaussian_nlpd([0.0, 1.0], [0.0, 1.0], [1.0, 1.0, 1.0]),
    lambda: gaussian_nlpd([0.0, np.nan], [0.0, 1.0], [1.0, 1.0]),
    lambda: gaussian_nlpd([0.0, 1.0], [0.0, 1.0], [1.0, np.inf]),
    lambda: gaussian_nlpd([0.0, 1.0], [0.0, 1.0], -1.0),
    lambda: gaussian_nlpd([0.0, 1.0], [0.0, 1.0], [1.0, 1.0], multioutput="variance_weighted"),
    lambda: gaussian_nlpd([0.0, 1.0], [0.0, 1.0], [1.0, 1.0], sample_weight=[1.0]),
    lambda: gaussian_nlpd([0.0, 1.0], [0.0, 1.0], [1.0, 1.0], sample_weight=[1.0, -1.0]),
    lambda: interval_coverage([0.0, 1.0], [0.0, 1.0], [1.0, -0.5]),
    lambda: interval_coverage([0.0, 1.0], [0.0, 1.0], [1.0, 1.0], n_std=0.0),
    lambda: interval_coverage([0.0, 1.0], [0.0], [1.0]),
    lambda: mean_interval_width([1.0, -1.0]),
    lambda: mean_interval_width([1.0, 1.0], n_std=-2.0),
    lambda: mean_interval_width(np.ones((2, 2, 2))),
])
def test_regression_metrics_reject_bad_input(bad):
    with pytest.raises(ValueError):
        bad()


# -- classification metrics -----------------------------------------------------------------------
def _proba(n=60, k=3, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(k), size=n)
    y = np.array([rng.choice(k, p=row) for row in p])
    return y, p


def test_brier_score_by_formula_and_sklearn_binary_convention():
    y, p = _proba()
    onehot = np.eye(3)[y]
    assert brier_score(y, p) == pytest.approx(np.mean(np.sum((p - onehot) ** 2, axis=1)))
    # string labels: columns follow the sorted labels
    names = np.array(["a", "b", "c"])
    assert brier_score(names[y], p) == pytest.approx(brier_score(y, p))
    # binary: twice scikit-learn's brier_score_loss of the positive column; 1-d input = that column
    yb, pb = _proba(80, 2, seed=1)
    assert brier_score(yb, pb) == pytest.approx(2 * brier_score_loss(yb, pb[:, 1]))
    assert brier_score(yb, pb[:, 1]) == pytest.approx(brier_score(yb, pb))
    w = np.linspace(0.1, 2.0, 60)
    assert brier_score(y, p, sample_weight=w) == pytest.approx(
        np.average(np.sum((p - onehot) ** 2, axis=1), weights=w))


def test_brier_limits_and_labels():
    y = np.array([0, 1, 2, 1])
    assert brier_score(y, np.eye(3)[y]) == 0.0  # certain and right
    assert brier_score(y, np.full((4, 3), 1 / 3)) == pytest.approx(1 - 1 / 3)  # uniform
    assert brier_score(y, np.eye(3)[(y + 1) % 3]) == pytest.approx(2.0)  # certain and wrong
    # y without class 2: labels= names the columns
    assert brier_score([0, 1], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], labels=[0, 1, 2]) == 0.0
    assert brier_score(["x", "z"], [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], labels=["y", "x", "z"]) == 0.0


@pytest.mark.parametrize("fn", [brier_score, expected_calibration_error])
@pytest.mark.parametrize("args", [
    ([0, 1], [[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]),                    # lengths differ
    ([0, 1, 2], [[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]),                 # more labels than columns
    ([0, 1], [[1.2, -0.2], [0.5, 0.5]]),                               # outside [0, 1]
    ([0, 1], [[0.6, 0.6], [0.5, 0.5]]),                                # rows do not sum to one
    ([0, 1], [[0.5, 0.5], [np.nan, 0.5]]),                             # NaN
    ([[0, 1], [1, 0]], [[0.5, 0.5], [0.5, 0.5]]),                      # 2-d y_true
    ([0, 0], [[0.5, 0.5], [0.5, 0.5]]),                                # one label, two columns
])
def test_classification_metrics_reject_bad_input(fn, args):
    with pytest.raises(ValueError):
        fn(*args)


def test_classification_metrics_reject_unknown_label_and_bad_bins():
    with pytest.raises(ValueError, match="not in labels"):
        brier_score([0, 5], [[0.5, 0.5], [0.5, 0.5]], labels=[0, 1])
    with pytest.raises(ValueError, match="n_bins"):
        expected_calibration_error([0, 1], [[0.5, 0.5], [0.5, 0.5]], n_bins=0)


def _ece_loop(y, p, n_bins):
    conf, pred = p.max(axis=1), p.argmax(axis=1)
    correct = (pred == y).astype(float)
    total = 0.0
    for m in range(n_bins):
        lo, hi = m / n_bins, (m + 1) / n_bins
        inb = (conf > lo) & (conf <= hi) if m > 0 else (conf >= lo) & (conf <= hi)
        if inb.any():
            total += inb.mean() * abs(correct[inb].mean() - conf[inb].mean())
    return total


@pytest.mark.parametrize("n_bins", [1, 5, 15])
def test_ece_matches_a_direct_loop(n_bins):
    y, p = _proba(300, 4, seed=2)
    assert expected_calibration_error(y, p, n_bins=n_bins) == pytest.approx(_ece_loop(y, p, n_bins), abs=1e-12)


def test_ece_limits():
    y = np.array([0, 1, 2, 1, 0])
    assert expected_calibration_error(y, np.eye(3)[y]) == 0.0  # certain and right
    assert expected_calibration_error(y, np.eye(3)[(y + 1) % 3]) == 1.0  # certain and wrong
    # calibrated random binary predictions: P(y = 1) = p
    rng = np.random.default_rng(0)
    p1 = rng.uniform(size=100_000)
    yb = (rng.uniform(size=p1.size) < p1).astype(int)
    proba = np.column_stack([1 - p1, p1])
    assert expected_calibration_error(yb, proba) < 0.01
    # over-confident: probabilities pushed towards 0/1
    sharp = np.clip(0.5 + 1.8 * (p1 - 0.5), 0, 1)
    assert expected_calibration_error(yb, np.column_stack([1 - sharp, sharp])) > 0.1
    # weights: a row of weight 0 is ignored
    assert expected_calibration_error([0, 1], [[0.9, 0.1], [0.9, 0.1]], sample_weight=[1.0, 0.0]) == (
        pytest.approx(0.1))


def test_log_loss_is_scikit_learns():
    assert not hasattr(metrics, "log_loss")  # reuse sklearn.metrics.log_loss, no copy
    X, y = _clf_data()
    clf = EKFClassifier(hidden_layer_sizes=(4,), random_state=0).fit(X, y)
    assert get_scorer("neg_log_loss")(clf, X, y) == pytest.approx(-log_loss(y, clf.predict_proba(X)))


# -- scorers ------------------------------------------------------------------------------------
def _reg_data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    return X, y


def _clf_data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.digitize(X[:, 0] + 0.3 * rng.normal(size=n), [-0.5, 0.5])
    return X, y


def test_scorers_are_minus_the_metrics():
    X, y = _reg_data()
    reg = EKFRegressor(hidden_layer_sizes=(5,), obs_variance=0.1, random_state=0).fit(X, y)
    m, s = reg.predict(X, return_std=True)
    assert neg_nlpd_scorer(reg, X, y) == pytest.approx(-gaussian_nlpd(y, m, s))
    assert coverage_error_scorer(reg, X, y) == pytest.approx(-abs(interval_coverage(y, m, s) - nominal_coverage(2)))
    assert neg_interval_width_scorer(reg, X, y) == pytest.approx(-mean_interval_width(s))
    w = np.linspace(0.5, 1.5, len(y))
    assert neg_nlpd_scorer(reg, X, y, sample_weight=w) == pytest.approx(-gaussian_nlpd(y, m, s, sample_weight=w))
    Xc, yc = _clf_data()
    clf = EKFClassifier(hidden_layer_sizes=(5,), random_state=0).fit(Xc, yc)
    P = clf.predict_proba(Xc)
    assert neg_brier_scorer(clf, Xc, yc) == pytest.approx(-brier_score(yc, P))
    assert neg_ece_scorer(clf, Xc, yc) == pytest.approx(-expected_calibration_error(yc, P))
    # a test fold without one of the classes still scores (labels from classes_)
    keep = yc != 2
    assert math.isfinite(neg_brier_scorer(clf, Xc[keep], yc[keep]))
    with pytest.raises(TypeError):
        neg_brier_scorer(object(), Xc, yc)


def test_get_scorer_names_and_fallback():
    for name in ("neg_nlpd", "coverage_error", "neg_interval_width", "neg_brier", "neg_ece"):
        assert get_scorer(name) is metrics.SCORERS[name]
        assert name in repr(get_scorer(name))
    assert get_scorer(neg_nlpd_scorer) is neg_nlpd_scorer
    from sklearn.metrics import get_scorer as sk_get_scorer

    assert repr(get_scorer("neg_mean_squared_error")) == repr(sk_get_scorer("neg_mean_squared_error"))
    with pytest.raises(ValueError):
        get_scorer("no_such_scorer")


def test_grid_search_and_cross_val_score_with_the_scorers():
    X, y = _reg_data(60)
    est = EKFRegressor(hidden_layer_sizes=(5,), obs_variance=0.1, random_state=0)
    cv = KFold(3)
    gs = GridSearchCV(est, param_grid={"prior_variance": [0.1, 1.0]}, scoring=neg_nlpd_scorer, cv=cv).fit(X, y)
    assert gs.best_params_["prior_variance"] in (0.1, 1.0)
    assert np.all(np.isfinite(gs.cv_results_["mean_test_score"]))
    # the best score is minus the mean NLPD of the folds, computed by hand
    by_hand = []
    for tr, te in cv.split(X):
        fitted = clone(est).set_params(**gs.best_params_).fit(X[tr], y[tr])
        by_hand.append(-gaussian_nlpd(y[te], *fitted.predict(X[te], return_std=True)))
    assert gs.best_score_ == pytest.approx(np.mean(by_hand))
    # several metrics at once, refit on one of them
    multi = GridSearchCV(est, param_grid={"prior_variance": [0.1, 1.0]}, cv=cv, refit="nlpd",
                         scoring={"nlpd": neg_nlpd_scorer, "coverage": get_scorer("coverage_error"),
                                  "rmse": get_scorer("neg_root_mean_squared_error")}).fit(X, y)
    assert {"mean_test_nlpd", "mean_test_coverage", "mean_test_rmse"} <= set(multi.cv_results_)
    for name in ("neg_nlpd", "coverage_error", "neg_interval_width"):
        scores = cross_val_score(est, X, y, cv=cv, scoring=get_scorer(name))
        assert scores.shape == (3,) and np.all(np.isfinite(scores))
        assert name == "neg_nlpd" or np.all(scores <= 0)
    Xc, yc = _clf_data()
    clf = EKFClassifier(hidden_layer_sizes=(5,), random_state=0)
    for name in ("neg_brier", "neg_ece"):
        scores = cross_val_score(clf, Xc, yc, cv=cv, scoring=get_scorer(name))
        assert scores.shape == (3,) and np.all(np.isfinite(scores)) and np.all(scores <= 0)


# -- prequential_score --------------------------------------------------------------------------
class _Counting(EKFRegressor):
    """Counts the prequential passes."""

    calls = 0

    def prequential_fit_predict(self, X, y, **kwargs):
        type(self).calls += 1
        return super().prequential_fit_predict(X, y, **kwargs)


def test_prequential_score_regressor_is_one_pass_and_matches_the_formulas():
    X, y = _reg_data(80)
    params = dict(hidden_layer_sizes=(5,), obs_variance=0.1, random_state=0)
    mean, std = prequential_predict(EKFRegressor(**params), X, y, return_std=True)
    # the 'auto' prior is scaled by data: row 0, which no rows precede, has no prediction (NaN);
    # the metrics are over the rows that have one (rows 1..)
    assert np.isnan(mean[0]) and np.isnan(std[0]) and np.isfinite(mean[1:]).all()
    yk, mk, sk = y[1:], mean[1:], std[1:]
    _Counting.calls = 0
    est = _Counting(**params)
    scores = prequential_score(est, X, y, scoring=["rmse", "mae", "nlpd", "coverage", "interval_width"])
    assert _Counting.calls == 1 and list(scores) == ["rmse", "mae", "nlpd", "coverage", "interval_width"]
    assert scores["rmse"] == pytest.approx(np.sqrt(np.mean((yk - mk) ** 2)))
    assert scores["mae"] == pytest.approx(np.mean(np.abs(yk - mk)))
    assert scores["nlpd"] == pytest.approx(-np.mean(norm.logpdf(yk, mk, sk)))
    assert scores["coverage"] == pytest.approx(np.mean(np.abs(yk - mk) <= 2 * sk))
    assert scores["interval_width"] == pytest.approx(np.mean(4 * sk))
    assert est.n_features_in_ == 2  # left fitted
    # default metrics, a dict with a callable, a single name
    assert list(prequential_score(EKFRegressor(**params), X, y)) == ["rmse", "nlpd", "coverage"]
    out = prequential_score(EKFRegressor(**params), X, y,
                            scoring={"err": "rmse", "max_z": lambda yt, m, s: np.max(np.abs(yt - m) / s)})
    assert out["err"] == pytest.approx(scores["rmse"])
    assert out["max_z"] == pytest.approx(np.max(np.abs(yk - mk) / sk))
    assert list(prequential_score(EKFRegressor(**params), X, y, scoring="mae")) == ["mae"]


def test_prequential_score_multioutput_regressor():
    X, y = _reg_data(50)
    Y = np.column_stack([y, -y])
    params = dict(hidden_layer_sizes=(4,), obs_variance=0.1, random_state=0)
    mean, std = prequential_predict(EKFRegressor(**params), X, Y, return_std=True)
    # row 0 has no prediction under the data-scaled prior (NaN in every output): left out of the metrics
    assert np.isnan(mean[0]).all() and np.isfinite(mean[1:]).all()
    Yk, mk, sk = Y[1:], mean[1:], std[1:]
    scores = prequential_score(EKFRegressor(**params), X, Y, scoring=["nlpd", "rmse"])
    assert scores["nlpd"] == pytest.approx(-np.mean(norm.logpdf(Yk, mk, sk)))
    assert scores["rmse"] == pytest.approx(np.mean(np.sqrt(np.mean((Yk - mk) ** 2, axis=0))))


def test_prequential_score_classifier():
    X, y = _clf_data(90)
    names = np.array(["lo", "mid", "hi"])[y]
    params = dict(hidden_layer_sizes=(5,), random_state=0)
    proba = prequential_predict(EKFClassifier(**params), X, names, method="predict_proba")
    clf = EKFClassifier(**params)
    scores = prequential_score(clf, X, names, scoring=("accuracy", "log_loss", "brier", "ece"))
    labels = clf.classes_
    assert scores["accuracy"] == pytest.approx(np.mean(labels[proba.argmax(1)] == names))
    assert scores["log_loss"] == pytest.approx(log_loss(names, proba, labels=labels))
    assert scores["brier"] == pytest.approx(brier_score(names, proba, labels=labels))
    assert scores["ece"] == pytest.approx(expected_calibration_error(names, proba, labels=labels))
    assert list(prequential_score(EKFClassifier(**params), X, names)) == ["accuracy", "log_loss"]
    # classes= names a class the stream never shows
    out = prequential_score(EKFClassifier(**params), X, names, scoring=["brier"], classes=["hi", "lo", "mid", "new"])
    assert math.isfinite(out["brier"])


def test_prequential_score_rejects_unknown_metrics():
    X, y = _reg_data(20)
    with pytest.raises(ValueError, match="Unknown prequential metric"):
        prequential_score(EKFRegressor(hidden_layer_sizes=(), random_state=0), X, y, scoring=["accuracy"])
    Xc, yc = _clf_data(20)
    with pytest.raises(ValueError, match="Unknown prequential metric"):
        prequential_score(EKFClassifier(hidden_layer_sizes=(), random_state=0), Xc, yc, scoring="nlpd")
    with pytest.raises(ValueError):
        prequential_score(EKFRegressor(hidden_layer_sizes=(), random_state=0), X, y, scoring=[])
    with pytest.raises(TypeError):
        prequential_score(object(), X, y)


def test_prequential_score_on_a_replay_baseline():
    pytest.importorskip("skorch")
    from skfilter.baselines import ReplaySGDRegressor

    X, y = _reg_data(40)
    reg = ReplaySGDRegressor(hidden_layer_sizes=(4,), random_state=0)
    scores = prequential_score(reg, X, y, scoring=["rmse", "nlpd", "coverage"])
    assert all(math.isfinite(v) for v in scores.values())


def test_module_docstring_examples_run():
    import doctest

    from skfilter import model_selection

    for mod in (metrics, model_selection):
        res = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert res.attempted > 0 and res.failed == 0, mod


def test_ece_hand_computed_two_bins():
    # confidences 0.6 (right), 0.6 (wrong) in (0.4, 0.6]; 0.9, 0.9 (both right) in (0.8, 1.0]:
    # ECE = 2/4 |0.5 − 0.6| + 2/4 |1.0 − 0.9| = 0.1
    y = [0, 1, 0, 1]
    p = [[0.6, 0.4], [0.6, 0.4], [0.9, 0.1], [0.1, 0.9]]
    assert expected_calibration_error(y, p, n_bins=5) == pytest.approx(0.1, abs=1e-12)
    # one bin: |3/4 − 0.75| = 0
    assert expected_calibration_error(y, p, n_bins=1) == pytest.approx(0.0, abs=1e-12)
