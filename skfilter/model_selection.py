"""Prequential (one-step-ahead) evaluation of filter estimators."""

from __future__ import annotations


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
