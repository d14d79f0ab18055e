"""Prequential (one-step-ahead) evaluation of filter estimators."""

from __future__ import annotations

import numpy as np


def prequential_predict(estimator, X, y, *, return_std=False, method="predict", sample_weight=None,
                        classes=None):
    """One-step-ahead predictions over a stream, each made before its row is learned.

    The estimator is fitted in place from its prior on ``(X, y)`` in row order, one pass, as
    :meth:`fit` with ``n_epochs=1`` would; the prediction of row ``t`` uses the belief after rows
    ``0..t−1`` and the dynamics of step ``t`` (the predicted belief), and is computed inside the
    filter loop from the Jacobians the update uses, with the estimator's ``predictive``.

    Parameters
    ----------
    estimator : skfilter estimator
        A filter estimator or a replay baseline: anything with the method
        ``prequential_fit_predict`` (which this function calls, and which documents the arguments
        below per estimator kind). Left fitted on the whole stream.
    X : array-like of shape (n_samples, n_features)
    y : array-like of shape (n_samples,) or (n_samples, n_outputs)
    return_std : bool, default=False
        Regressors: also return the predictive standard deviation (observation noise included).
    method : {'predict', 'predict_proba', 'predict_log_proba'}, default='predict'
        What to return for classifiers.
    sample_weight : array-like of shape (n_samples,), default=None
    classes : array-like, default=None
        Classifiers: all classes of the stream (default: those in ``y``).

    Returns
    -------
    pred : ndarray
        Means (regressors), labels or probabilities (classifiers), one row per input row.
    std : ndarray
        Only with ``return_std=True``.

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import EKFRegressor
    >>> from skfilter.model_selection import prequential_predict
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(100, 2)); y = X @ [1.0, -2.0] + 0.1 * rng.normal(size=100)
    >>> reg = EKFRegressor(hidden_layer_sizes=(), obs_variance=0.01, random_state=0)
    >>> mean, std = prequential_predict(reg, X, y, return_std=True)
    >>> bool(abs(mean[-1] - y[-1]) < 3 * std[-1])
    True
    """
    if not hasattr(estimator, "prequential_fit_predict"):
        raise TypeError(f"prequential_predict needs a skfilter filter estimator, got {type(estimator).__name__}.")
    return estimator.prequential_fit_predict(X, y, return_std=return_std, method=method,
                                             sample_weight=sample_weight, classes=classes)


#: metrics of :func:`prequential_score` for regressors (``True``: needs the predictive std)
REGRESSION_METRICS = {"rmse": False, "mae": False, "nlpd": True, "coverage": True, "interval_width": True}
#: metrics of :func:`prequential_score` for classifiers
CLASSIFICATION_METRICS = ("accuracy", "log_loss", "brier", "ece")


def _regression_metric(name):
    from sklearn.metrics import mean_absolute_error, root_mean_squared_error

    from . import metrics

    return {
        "rmse": lambda y, m, s: root_mean_squared_error(y, m),
        "mae": lambda y, m, s: mean_absolute_error(y, m),
        "nlpd": lambda y, m, s: metrics.gaussian_nlpd(y, m, s),
        "coverage": lambda y, m, s: metrics.interval_coverage(y, m, s, n_std=2.0),
        "interval_width": lambda y, m, s: metrics.mean_interval_width(s, n_std=2.0),
    }[name]


def _classification_metric(name, labels):
    from sklearn.metrics import accuracy_score, log_loss

    from . import metrics

    return {
        "accuracy": lambda y, p: accuracy_score(y, labels[np.argmax(p, axis=1)]),
        "log_loss": lambda y, p: log_loss(y, p, labels=labels),
        "brier": lambda y, p: metrics.brier_score(y, p, labels=labels),
        "ece": lambda y, p: metrics.expected_calibration_error(y, p, labels=labels),
    }[name]


def _scoring_items(scoring, classifier):
    """``[(name, str metric name or callable)]`` from ``scoring``."""
    if scoring is None:
        scoring = ("accuracy", "log_loss") if classifier else ("rmse", "nlpd", "coverage")
    if isinstance(scoring, str) or callable(scoring):
        scoring = (scoring,)
    if isinstance(scoring, dict):
        items = list(scoring.items())
    else:
        items = []
        for s in scoring:
            if callable(s):
                items.append((getattr(s, "__name__", repr(s)), s))
            else:
                items.append((s, s))
    if not items:
        raise ValueError("scoring names no metric.")
    known = CLASSIFICATION_METRICS if classifier else tuple(REGRESSION_METRICS)
    for name, s in items:
        if not callable(s) and s not in known:
            kind = "classifiers" if classifier else "regressors"
            raise ValueError(f"Unknown prequential metric {s!r} for {kind}; use one of {list(known)} or a "
                             "callable.")
    if len({n for n, _ in items}) != len(items):
        raise ValueError(f"Duplicate metric names in scoring: {[n for n, _ in items]}.")
    return items


def prequential_score(estimator, X, y, *, scoring=None, sample_weight=None, classes=None):
    """Scores of the one-step-ahead predictions of one prequential pass.

    Runs :func:`prequential_predict` once (the estimator's ``prequential_fit_predict``: each row is
    predicted from the belief after the rows before it, then learned) and scores all the
    predictions with every metric of ``scoring``. Regressors are asked for the predictive standard
    deviation (``return_std=True``) when a metric needs it; classifiers for their probabilities
    (``method='predict_proba'``), from which the labels are the most probable class.

    Metric names (the values are the metrics themselves, not "greater is better" scores):

    ========================  ===============================================================
    regressors
    ``'rmse'``                root-mean-square error of the means (per output, then averaged)
    ``'mae'``                 mean absolute error of the means
    ``'nlpd'``                :func:`skfilter.metrics.gaussian_nlpd` (nats)
    ``'coverage'``            :func:`skfilter.metrics.interval_coverage` of ``mean ± 2 std``
    ``'interval_width'``      :func:`skfilter.metrics.mean_interval_width` (``4 std``)
    classifiers
    ``'accuracy'``            fraction of rows whose most probable class is right
    ``'log_loss'``            :func:`sklearn.metrics.log_loss` (nats)
    ``'brier'``               :func:`skfilter.metrics.brier_score` (sum over classes)
    ``'ece'``                 :func:`skfilter.metrics.expected_calibration_error` (15 bins)
    ========================  ===============================================================

    Parameters
    ----------
    estimator : skfilter estimator
        A filter estimator or a replay baseline (anything with ``prequential_fit_predict``); a
        classifier if :func:`sklearn.base.is_classifier` says so. Left fitted on the whole stream.
    X : array-like of shape (n_samples, n_features)
    y : array-like of shape (n_samples,) or (n_samples, n_outputs)
    scoring : str, callable, list of those, or dict, default=None
        The metrics: names of the table above or callables, called on the one-step-ahead
        predictions as ``metric(y, mean, std)`` (regressors) or ``metric(y, proba)`` (classifiers;
        the columns of ``proba`` follow ``estimator.classes_``); a dict maps result names to names
        or callables (a callable in a list is named by its ``__name__``). ``None``:
        ``('rmse', 'nlpd', 'coverage')`` for regressors, ``('accuracy', 'log_loss')`` for
        classifiers.
    sample_weight : array-like of shape (n_samples,), default=None
        Passed to the updates (as in :func:`prequential_predict`); the metrics weigh all rows
        equally.
    classes : array-like, default=None
        Classifiers: all classes of the stream (default: those in ``y``).

    Returns
    -------
    dict
        ``{name: value}``, one float per metric (in the order of ``scoring``).

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import EKFRegressor
    >>> from skfilter.model_selection import prequential_score
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2)); y = X @ [1.0, -2.0] + 0.1 * rng.normal(size=200)
    >>> reg = EKFRegressor(hidden_layer_sizes=(), obs_variance=0.01, random_state=0)
    >>> scores = prequential_score(reg, X, y, scoring=["rmse", "nlpd", "coverage"])
    >>> sorted(scores)
    ['coverage', 'nlpd', 'rmse']
    >>> bool(scores["coverage"] > 0.9)
    True
    """
    from sklearn.base import is_classifier

    if not hasattr(estimator, "prequential_fit_predict"):
        raise TypeError(f"prequential_score needs a skfilter filter estimator, got {type(estimator).__name__}.")
    classifier = is_classifier(estimator)
    items = _scoring_items(scoring, classifier)
    y_arr = np.asarray(y)
    if classifier:
        proba = prequential_predict(estimator, X, y, method="predict_proba", sample_weight=sample_weight,
                                    classes=classes)
        labels = np.asarray(estimator.classes_)
        y_true = y_arr.ravel() if y_arr.ndim == 2 and y_arr.shape[1] == 1 else y_arr
        fns = [(n, s if callable(s) else _classification_metric(s, labels)) for n, s in items]
        return {n: float(f(y_true, proba)) for n, f in fns}
    need_std = any(callable(s) or REGRESSION_METRICS[s] for _, s in items)
    res = prequential_predict(estimator, X, y, return_std=need_std, sample_weight=sample_weight,
                              classes=classes)
    mean, std = res if need_std else (res, None)
    y_true = y_arr.astype(np.float64).reshape(np.shape(mean))
    fns = [(n, s if callable(s) else _regression_metric(s)) for n, s in items]
    return {n: float(f(y_true, mean, std)) for n, f in fns}
