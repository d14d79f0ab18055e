"""Scores of predictive distributions: is the uncertainty of a prediction honest?

Point scores (RMSE, accuracy) only judge the mean or the label. The functions here judge the whole
predictive distribution that skfilter's estimators return:

* regressors, ``mean, std = reg.predict(X, return_std=True)`` read as independent Gaussians
  ``N(mean, std²)`` per row and output: :func:`gaussian_nlpd` (a proper scoring rule),
  :func:`interval_coverage` and :func:`mean_interval_width` (calibration and sharpness of the
  ``mean ± n_std·std`` intervals);
* classifiers, ``proba = clf.predict_proba(X)``: :func:`brier_score` (a proper scoring rule) and
  :func:`expected_calibration_error`; for the log-loss use :func:`sklearn.metrics.log_loss`.

Scorers (``scorer(estimator, X, y, sample_weight=None) -> float``, greater is better) for
:class:`~sklearn.model_selection.GridSearchCV` (``scoring=``) and
:func:`~sklearn.model_selection.cross_val_score`: :data:`neg_nlpd_scorer`,
:data:`coverage_error_scorer`, :data:`neg_interval_width_scorer`, :data:`neg_brier_scorer`,
:data:`neg_ece_scorer`, or by name with :func:`get_scorer` (which falls back to
:func:`sklearn.metrics.get_scorer` for scikit-learn's names).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from sklearn.utils.validation import check_array, check_consistent_length

__all__ = [
    "check_probabilities",
    "gaussian_nlpd",
    "interval_coverage",
    "mean_interval_width",
    "nominal_coverage",
    "brier_score",
    "expected_calibration_error",
    "neg_nlpd_scorer",
    "coverage_error_scorer",
    "neg_interval_width_scorer",
    "neg_brier_scorer",
    "neg_ece_scorer",
    "get_scorer",
    "SCORERS",
]

_LOG_2PI = math.log(2.0 * math.pi)
#: tolerance on probabilities (float32 predictions sum to one only to about 1e-7 per term)
_PROBA_TOL = 1e-4


# -- input checks -------------------------------------------------------------------------------
def _as_2d(a, name):
    a = check_array(a, ensure_2d=False, dtype=np.float64, input_name=name)
    if a.ndim == 1:
        return a.reshape(-1, 1)
    if a.ndim != 2:
        raise ValueError(f"{name} must be 1-d or 2-d, got shape {a.shape}.")
    return a


def _check_multioutput(multioutput):
    if multioutput not in ("uniform_average", "raw_values"):
        raise ValueError(f"multioutput must be 'uniform_average' or 'raw_values', got {multioutput!r}.")


def _check_n_std(n_std):
    if isinstance(n_std, bool) or not isinstance(n_std, numbers.Real) or not (0 < n_std < math.inf):
        raise ValueError(f"n_std must be a positive finite number, got {n_std!r}.")
    return float(n_std)


def _check_weights(sample_weight, n):
    if sample_weight is None:
        return None
    w = check_array(sample_weight, ensure_2d=False, dtype=np.float64, input_name="sample_weight")
    if w.ndim != 1 or w.shape[0] != n:
        raise ValueError(f"sample_weight must have shape ({n},), got {w.shape}.")
    if np.any(w < 0) or not np.any(w > 0):
        raise ValueError("sample_weight must be non-negative with a positive sum.")
    return w


def _check_std(y_std, shape, *, strictly_positive):
    std = _as_2d(y_std, "y_std") if np.ndim(y_std) > 0 else np.full(shape, float(y_std))
    if std.shape != shape:
        raise ValueError(f"y_std has shape {np.shape(y_std)}, which does not match y_mean's {shape}.")
    if not np.all(np.isfinite(std)):
        raise ValueError("y_std contains NaN or infinity.")
    if strictly_positive and np.any(std <= 0):
        raise ValueError("y_std must be positive (the Gaussian density is undefined for std <= 0).")
    if np.any(std < 0):
        raise ValueError("y_std must be non-negative.")
    return std


def _check_gaussian(y_true, y_mean, y_std, *, strictly_positive):
    if np.ndim(y_true) != np.ndim(y_mean) or np.shape(y_true) != np.shape(y_mean):
        raise ValueError(f"y_true and y_mean must have the same shape, got {np.shape(y_true)} and "
                         f"{np.shape(y_mean)}.")
    y, mean = _as_2d(y_true, "y_true"), _as_2d(y_mean, "y_mean")
    std = _check_std(y_std, mean.shape, strictly_positive=strictly_positive)
    return y, mean, std


def _average(values, sample_weight, multioutput):
    """Mean over rows (weighted), then over outputs unless ``multioutput='raw_values'``."""
    _check_multioutput(multioutput)
    w = _check_weights(sample_weight, values.shape[0])
    per_output = np.average(values, axis=0, weights=w)
    if multioutput == "raw_values":
        return per_output
    return float(np.mean(per_output))


def _gaussian_nlpd_terms(y, mean, std):
    """Element-wise ``½ log(2π std²) + ½ ((y − mean) / std)²`` (nats), inputs broadcast, no checks
    beyond ``std > 0``. The single implementation behind :func:`gaussian_nlpd`."""
    y, mean, std = (np.asarray(a, dtype=np.float64) for a in (y, mean, std))
    if np.any(std <= 0):
        raise ValueError("y_std must be positive (the Gaussian density is undefined for std <= 0).")
    return 0.5 * _LOG_2PI + np.log(std) + 0.5 * ((y - mean) / std) ** 2


# -- regression -------------------------------------------------------------------------------
def gaussian_nlpd(y_true, y_mean, y_std, *, sample_weight=None, multioutput="uniform_average"):
    r"""Mean negative log predictive density of independent Gaussian predictions.

    Each target :math:`y_{ij}` (row :math:`i`, output :math:`j`) is scored under its predictive
    :math:`\mathcal N(\mu_{ij}, \sigma_{ij}^2)`:

    .. math::

        \mathrm{NLPD}_j = \frac{1}{n} \sum_{i=1}^n \Big[ \tfrac12 \log(2\pi\sigma_{ij}^2)
        + \frac{(y_{ij} - \mu_{ij})^2}{2\sigma_{ij}^2} \Big],

    averaged over the outputs :math:`j` (``multioutput='uniform_average'``). In nats, lower is
    better, and it depends on the units of ``y`` (rescaling ``y`` by :math:`c` adds
    :math:`\log c`). It is a proper scoring rule: it rewards a correct mean *and* a correct spread,
    and punishes an over-confident :math:`\sigma` without bound.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Observed targets.
    y_mean : array-like of the same shape
        Predictive means.
    y_std : array-like of the same shape, or float
        Predictive standard deviations, all positive (e.g. from ``predict(X, return_std=True)``).
    sample_weight : array-like of shape (n_samples,), default=None
        Weights of the rows in the mean (default: equal).
    multioutput : {'uniform_average', 'raw_values'}, default='uniform_average'
        Average the outputs, or return one value per output.

    Returns
    -------
    float or ndarray of shape (n_outputs,)

    Raises
    ------
    ValueError
        Shapes that differ, non-finite values, or ``y_std <= 0``.

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter.metrics import gaussian_nlpd
    >>> round(gaussian_nlpd([0.0, 0.0], [0.0, 0.0], [1.0, 1.0]), 4)  # ½ log(2π)
    0.9189
    >>> round(gaussian_nlpd([1.0], [0.0], [1.0]), 4)  # ½ log(2π) + ½
    1.4189
    """
    y, mean, std = _check_gaussian(y_true, y_mean, y_std, strictly_positive=True)
    return _average(_gaussian_nlpd_terms(y, mean, std), sample_weight, multioutput)


def nominal_coverage(n_std=2.0):
    r"""Probability that a Gaussian lands within ``n_std`` standard deviations of its mean.

    :math:`P(|Z| \le k) = \operatorname{erf}(k / \sqrt 2)` for :math:`Z \sim \mathcal N(0, 1)`: what
    :func:`interval_coverage` should be for calibrated Gaussian predictions.

    Parameters
    ----------
    n_std : float, default=2.0
        Half-width :math:`k` of the interval in standard deviations.

    Returns
    -------
    float

    Examples
    --------
    >>> from skfilter.metrics import nominal_coverage
    >>> round(nominal_coverage(2.0), 4), round(nominal_coverage(1.0), 4)
    (0.9545, 0.6827)
    """
    return math.erf(_check_n_std(n_std) / math.sqrt(2.0))


def interval_coverage(y_true, y_mean, y_std, n_std=2.0, *, sample_weight=None, multioutput="uniform_average"):
    r"""Fraction of targets inside the predictive interval ``mean ± n_std · std``.

    .. math::

        \mathrm{coverage}_j = \frac{1}{n} \sum_{i=1}^n
        \mathbf 1\big[\, |y_{ij} - \mu_{ij}| \le k\,\sigma_{ij} \,\big],
        \qquad k = \texttt{n\_std},

    averaged over the outputs. Calibrated Gaussian predictions cover
    :func:`nominal_coverage` ``(k)`` of the targets (95.45 % for :math:`k = 2`): less means
    over-confident, more under-confident. Read it with :func:`mean_interval_width` (a very wide
    interval covers everything).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_outputs)
    y_mean : array-like of the same shape
    y_std : array-like of the same shape, or float
        Non-negative standard deviations.
    n_std : float, default=2.0
        Half-width of the interval in standard deviations.
    sample_weight : array-like of shape (n_samples,), default=None
    multioutput : {'uniform_average', 'raw_values'}, default='uniform_average'

    Returns
    -------
    float or ndarray of shape (n_outputs,)
        In ``[0, 1]``.

    Raises
    ------
    ValueError
        Shapes that differ, non-finite values, ``y_std < 0`` or ``n_std <= 0``.

    Examples
    --------
    >>> from skfilter.metrics import interval_coverage
    >>> interval_coverage([0.0, 1.0, 3.0, -1.5], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0])
    0.75
    """
    n_std = _check_n_std(n_std)
    y, mean, std = _check_gaussian(y_true, y_mean, y_std, strictly_positive=False)
    inside = (np.abs(y - mean) <= n_std * std).astype(np.float64)
    return _average(inside, sample_weight, multioutput)


def mean_interval_width(y_std, n_std=2.0, *, sample_weight=None, multioutput="uniform_average"):
    r"""Mean width ``2 · n_std · std`` of the predictive intervals (sharpness; in the units of ``y``).

    .. math::

        \mathrm{width}_j = \frac{1}{n} \sum_{i=1}^n 2 k\, \sigma_{ij}, \qquad k = \texttt{n\_std},

    averaged over the outputs. Narrower is sharper; only meaningful next to
    :func:`interval_coverage`.

    Parameters
    ----------
    y_std : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Non-negative standard deviations.
    n_std : float, default=2.0
    sample_weight : array-like of shape (n_samples,), default=None
    multioutput : {'uniform_average', 'raw_values'}, default='uniform_average'

    Returns
    -------
    float or ndarray of shape (n_outputs,)

    Raises
    ------
    ValueError
        Non-finite or negative ``y_std``, or ``n_std <= 0``.

    Examples
    --------
    >>> from skfilter.metrics import mean_interval_width
    >>> mean_interval_width([1.0, 2.0])  # 2 · 2 · 1.5
    6.0
    """
    n_std = _check_n_std(n_std)
    std = _as_2d(y_std, "y_std")
    std = _check_std(std, std.shape, strictly_positive=False)
    return _average(2.0 * n_std * std, sample_weight, multioutput)


# -- classification ---------------------------------------------------------------------------
def check_probabilities(y_true, y_proba, labels=None):
    """Validate class labels and predicted probabilities (the checks of the classification metrics).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Class labels.
    y_proba : array-like of shape (n_samples, n_classes)
        Predicted probabilities; each row must sum to 1. A 1-d array is the probability of the
        second of two classes.
    labels : array-like of shape (n_classes,), default=None
        The classes in column order (sorted ``np.unique(y_true)`` when None).

    Returns
    -------
    one_hot : ndarray of shape (n_samples, n_classes)
    proba : ndarray of shape (n_samples, n_classes)
    labels : ndarray of shape (n_classes,)

    Examples
    --------
    >>> from skfilter.metrics import check_probabilities
    >>> one_hot, proba, labels = check_probabilities([0, 1], [[0.9, 0.1], [0.2, 0.8]])
    >>> one_hot.tolist(), labels.tolist()
    ([[1.0, 0.0], [0.0, 1.0]], [0, 1])
    """
    y_true = np.asarray(y_true)
    if y_true.ndim != 1:
        y_true = check_array(y_true, ensure_2d=False, dtype=None, input_name="y_true")
        if y_true.ndim == 2 and y_true.shape[1] == 1:
            y_true = y_true[:, 0]
        else:
            raise ValueError(f"y_true must be 1-d (one label per row), got shape {y_true.shape}.")
    proba = check_array(y_proba, ensure_2d=False, dtype=np.float64, input_name="y_proba")
    if proba.ndim == 1:  # binary: probability of the second (positive) label
        proba = np.column_stack([1.0 - proba, proba])
    if proba.ndim != 2:
        raise ValueError(f"y_proba must be 1-d (binary) or 2-d, got shape {proba.shape}.")
    check_consistent_length(y_true, proba)
    if y_true.shape[0] == 0:
        raise ValueError("y_true is empty.")
    if labels is None:
        labels = np.unique(y_true)
    else:
        labels = np.asarray(labels)
        if labels.ndim != 1 or len(np.unique(labels)) != len(labels):
            raise ValueError("labels must be a 1-d array of distinct labels.")
    if len(labels) != proba.shape[1]:
        raise ValueError(f"y_proba has {proba.shape[1]} columns but there are {len(labels)} labels "
                         f"({labels!r}); pass labels= with all the classes, in the columns' order.")
    if len(labels) < 2:
        raise ValueError("At least two labels are needed; pass labels= with all the classes.")
    if np.any(proba < -_PROBA_TOL) or np.any(proba > 1 + _PROBA_TOL):
        raise ValueError("y_proba must lie in [0, 1].")
    if np.any(np.abs(proba.sum(axis=1) - 1.0) > _PROBA_TOL):
        raise ValueError("The rows of y_proba must sum to 1.")
    order = np.argsort(labels, kind="stable")
    pos = np.searchsorted(labels[order], y_true)
    pos = np.clip(pos, 0, len(labels) - 1)
    found = labels[order][pos] == y_true
    if not np.all(found):
        raise ValueError(f"y_true contains labels not in labels: {np.unique(y_true[~found])!r}.")
    idx = order[pos]
    one_hot = np.zeros_like(proba)
    one_hot[np.arange(len(idx)), idx] = 1.0
    return one_hot, proba, labels


def brier_score(y_true, y_proba, labels=None, *, sample_weight=None):
    r"""Multiclass Brier score: mean squared distance between the one-hot label and the probabilities.

    .. math::

        \mathrm{BS} = \frac{1}{n} \sum_{i=1}^n \sum_{k=1}^K (p_{ik} - \mathbf 1[y_i = c_k])^2
        \in [0, 2].

    This is the *sum over classes* convention (Brier's original definition): for two classes it is
    **twice** :func:`sklearn.metrics.brier_score_loss` of the positive-class probability (which
    scores only that column), and it equals ``brier_score_loss(..., scale_by_half=False)`` in
    scikit-learn versions that have that option. A proper scoring rule; lower is better; 0 for
    certain and correct predictions, :math:`1 - 1/K` for the uniform prediction.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Labels.
    y_proba : array-like of shape (n_samples, n_classes) or (n_samples,)
        Probabilities, columns in the order of ``labels`` (``clf.classes_`` for
        ``clf.predict_proba``); rows sum to one. 1-d: the probability of the second label of a
        binary problem.
    labels : array-like of shape (n_classes,), default=None
        The classes of the columns (default: the sorted distinct values of ``y_true``; needed when
        ``y_true`` lacks a class).
    sample_weight : array-like of shape (n_samples,), default=None

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Mismatched shapes, probabilities outside ``[0, 1]`` or rows not summing to one, or labels of
        ``y_true`` missing from ``labels``.

    Examples
    --------
    >>> from skfilter.metrics import brier_score
    >>> brier_score(["a", "b"], [[1.0, 0.0], [0.5, 0.5]])  # (0 + 0.5) / 2
    0.25
    """
    one_hot, proba, _ = check_probabilities(y_true, y_proba, labels)
    sq = np.sum((proba - one_hot) ** 2, axis=1, keepdims=True)
    return _average(sq, sample_weight, "uniform_average")


def expected_calibration_error(y_true, y_proba, n_bins=15, labels=None, *, sample_weight=None):
    r"""Top-label expected calibration error with equal-width confidence bins.

    Each row's confidence is its largest probability :math:`\hat p_i = \max_k p_{ik}` and its
    prediction that class (the first on ties). The confidences are put into ``n_bins`` bins
    :math:`B_1 = [0, 1/M],\ B_m = ((m-1)/M, m/M]` (:math:`M` = ``n_bins``), and

    .. math::

        \mathrm{ECE} = \sum_{m=1}^M \frac{|B_m|}{n}\,
        \big|\operatorname{acc}(B_m) - \operatorname{conf}(B_m)\big|,

    with :math:`\operatorname{acc}(B_m)` the fraction of correct predictions and
    :math:`\operatorname{conf}(B_m)` the mean confidence of the rows in bin :math:`m` (weighted by
    ``sample_weight`` if given). In ``[0, 1]``, lower is better; 0 when, in every bin, the
    confidence matches the accuracy. Not a proper scoring rule (a constant prediction of the base
    rate has ECE near 0): report it with :func:`brier_score` or the log-loss.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
    y_proba : array-like of shape (n_samples, n_classes) or (n_samples,)
        As in :func:`brier_score`.
    n_bins : int, default=15
        Number of equal-width bins on ``[0, 1]``.
    labels : array-like of shape (n_classes,), default=None
        As in :func:`brier_score`.
    sample_weight : array-like of shape (n_samples,), default=None

    Returns
    -------
    float

    Raises
    ------
    ValueError
        As :func:`brier_score`, or ``n_bins < 1``.

    Examples
    --------
    >>> from skfilter.metrics import expected_calibration_error
    >>> # confidence 0.8 on every row, 3 of 4 right: |0.75 − 0.8| = 0.05
    >>> round(expected_calibration_error([0, 0, 0, 1], [[0.8, 0.2]] * 4), 6)
    0.05
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, numbers.Integral) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}.")
    one_hot, proba, _ = check_probabilities(y_true, y_proba, labels)
    w = _check_weights(sample_weight, proba.shape[0])
    w = np.ones(proba.shape[0]) if w is None else w
    top = np.argmax(proba, axis=1)
    conf = np.clip(proba[np.arange(len(top)), top], 0.0, 1.0)
    correct = one_hot[np.arange(len(top)), top]
    # bin m (0-based) holds confidences in (m/M, (m+1)/M]; bin 0 also holds 0
    bins = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)
    total = np.bincount(bins, weights=w, minlength=n_bins)
    gap = np.bincount(bins, weights=w * (correct - conf), minlength=n_bins)
    return float(np.sum(np.abs(gap)) / np.sum(total))


# -- scorers ------------------------------------------------------------------------------------
class _PredictiveScorer:
    """``scorer(estimator, X, y, sample_weight=None)``: a predictive metric, greater is better.

    ``kind='regression'`` calls ``estimator.predict(X, return_std=True)``, ``'classification'``
    ``estimator.predict_proba(X)`` (columns labelled by ``estimator.classes_``).
    """

    def __init__(self, name, metric, kind, sign=-1.0, **kwargs):
        self.name, self.metric, self.kind, self.sign, self.kwargs = name, metric, kind, sign, kwargs

    def __call__(self, estimator, X, y, sample_weight=None):
        if self.kind == "regression":
            if not hasattr(estimator, "predict"):
                raise TypeError(f"{self.name} needs a regressor with predict(X, return_std=True).")
            mean, std = estimator.predict(X, return_std=True)
            value = self.metric(y, mean, std, sample_weight=sample_weight, **self.kwargs)
        else:
            if not hasattr(estimator, "predict_proba"):
                raise TypeError(f"{self.name} needs a classifier with predict_proba.")
            proba = estimator.predict_proba(X)
            value = self.metric(y, proba, labels=getattr(estimator, "classes_", None),
                                sample_weight=sample_weight, **self.kwargs)
        return float(self.sign * value)

    def __repr__(self):
        return f"skfilter.metrics.get_scorer({self.name!r})"


def _coverage_error(y_true, y_mean, y_std, *, n_std=2.0, sample_weight=None):
    """``|interval_coverage − nominal_coverage(n_std)|``."""
    cov = interval_coverage(y_true, y_mean, y_std, n_std, sample_weight=sample_weight)
    return abs(cov - nominal_coverage(n_std))


def _interval_width(y_true, y_mean, y_std, *, n_std=2.0, sample_weight=None):
    return mean_interval_width(y_std, n_std, sample_weight=sample_weight)


#: ``−gaussian_nlpd`` of ``predict(X, return_std=True)``
neg_nlpd_scorer = _PredictiveScorer("neg_nlpd", gaussian_nlpd, "regression")
#: ``−|interval_coverage(n_std=2) − 0.9545|``: 0 for calibrated ±2σ intervals
coverage_error_scorer = _PredictiveScorer("coverage_error", _coverage_error, "regression", n_std=2.0)
#: ``−mean_interval_width(n_std=2)``
neg_interval_width_scorer = _PredictiveScorer("neg_interval_width", _interval_width, "regression", n_std=2.0)
#: ``−brier_score`` of ``predict_proba(X)``
neg_brier_scorer = _PredictiveScorer("neg_brier", brier_score, "classification")
#: ``−expected_calibration_error`` of ``predict_proba(X)`` (15 bins)
neg_ece_scorer = _PredictiveScorer("neg_ece", expected_calibration_error, "classification")

#: skfilter's scorers by name (see :func:`get_scorer`)
SCORERS = {s.name: s for s in (neg_nlpd_scorer, coverage_error_scorer, neg_interval_width_scorer,
                               neg_brier_scorer, neg_ece_scorer)}


def get_scorer(scoring):
    """A scorer ``(estimator, X, y) -> float`` (greater is better) from its name.

    skfilter's names are ``'neg_nlpd'`` (:func:`gaussian_nlpd`), ``'coverage_error'``
    (``−|coverage − nominal|`` of the ±2σ intervals, :func:`interval_coverage`),
    ``'neg_interval_width'`` (:func:`mean_interval_width`), ``'neg_brier'`` (:func:`brier_score`)
    and ``'neg_ece'`` (:func:`expected_calibration_error`); any other name is looked up with
    :func:`sklearn.metrics.get_scorer` (``'neg_log_loss'``, ``'neg_root_mean_squared_error'``, …).
    A callable is returned as is. Pass the result (not the name) as ``scoring=`` to
    scikit-learn's model selection tools, which do not know skfilter's names.

    Parameters
    ----------
    scoring : str or callable

    Returns
    -------
    callable

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.model_selection import cross_val_score
    >>> from skfilter import EKFRegressor
    >>> from skfilter.metrics import get_scorer
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(60, 2)); y = X @ [1.0, -1.0] + 0.1 * rng.normal(size=60)
    >>> reg = EKFRegressor(hidden_layer_sizes=(), obs_variance=0.01, random_state=0)
    >>> scores = cross_val_score(reg, X, y, cv=3, scoring=get_scorer("neg_nlpd"))
    >>> scores.shape
    (3,)
    """
    if callable(scoring):
        return scoring
    if isinstance(scoring, str) and scoring in SCORERS:
        return SCORERS[scoring]
    from sklearn.metrics import get_scorer as sklearn_get_scorer

    return sklearn_get_scorer(scoring)
