"""Model selection for streams: prequential (one-step-ahead) evaluation of filter estimators, and
:class:`StreamPrefixEstimator`, the resource of a successive-halving search that keeps time order."""

from __future__ import annotations

from numbers import Integral

import numpy as np
from scipy.sparse import issparse
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone
from sklearn.utils import get_tags
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions, validate_params
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_consistent_length, check_is_fitted

from ._utils import given_kwargs
from ._validation import check_parameter_constraints, restore_attributes

__all__ = ["prequential_predict", "prequential_score", "metric_function", "needs_std", "scoring_items",
           "StreamPrefixEstimator"]


@validate_params({"return_std": ["boolean"],
                  "method": [StrOptions({"predict", "predict_proba", "predict_log_proba"})]},
                 prefer_skip_nested_validation=False)  # the estimator's own validation runs
def prequential_predict(estimator, X, y, *, return_std=False, method="predict", sample_weight=None,
                        classes=None):
    """One-step-ahead predictions over a stream, each made before its row is learned.

    The estimator is fitted in place from its prior on ``(X, y)`` in row order, one pass, as
    :meth:`fit` with ``n_epochs=1`` would, and **the prediction of row** ``t`` **uses rows**
    ``0..t−1`` **only**: changing any row from ``t`` on leaves predictions ``0..t−1`` as they were.
    With a prior that uses no data, every prediction is computed inside the filter loop from the
    belief after rows ``0..t−1`` and the dynamics of step ``t`` (the predicted belief), from the
    Jacobians the update uses, with the estimator's ``predictive``. A data-scaled ``'auto'`` prior
    is set from the stream's first ``n_prior_rows`` rows (:mod:`skfilter.stream_start`): row 0,
    which no data precede, gets ``nan`` (regressors) or uniform probabilities (classifiers); each
    row ``t < n_prior_rows`` is predicted from the estimator fitted on rows ``0..t−1`` alone (its
    prior set from them), as a loop of ``predict`` and ``partial_fit`` would; the rows from
    ``n_prior_rows`` on, once the prior is fixed, inside the filter loop. (Before issue 29 the prior
    was scaled by the statistics of the whole stream passed here, so earlier figures were not
    strictly one-step-ahead.)

    Parameters
    ----------
    estimator : skfilter estimator, PartialPipeline, or estimator with partial_fit
        A filter estimator or a replay baseline: anything with the method
        ``prequential_fit_predict`` (which this function calls, and which documents the arguments
        below per estimator kind). Or a :class:`~skfilter.pipeline.PartialPipeline`, or any
        estimator with ``partial_fit`` (``SGDRegressor``, ``MLPRegressor``,
        ``PassiveAggressiveClassifier``, …): it is reset to unfitted (the objects are kept, so
        references to the steps see the refit), then each row ``t`` is transformed with the
        transformers' state after rows ``0..t−1`` (a ``StandardScaler``'s running statistics),
        predicted, and the whole pipeline is ``partial_fit`` on it: no statistic of row ``t`` or
        later enters its prediction. Row 0 has no earlier rows: if the final step is a skfilter
        estimator with a prior that uses no data (numeric ``prior_variance`` and, for regressors,
        ``obs_variance``), row 0 is predicted from that prior, its features transformed with the
        statistics of row 0 alone (its target is not used); otherwise (``'auto'`` priors adopt the
        scale of the stream's first targets, or an estimator that cannot predict before learning)
        regressors give ``nan`` for row 0 and classifiers uniform probabilities. A pipeline of
        stateless transformers (``FunctionTransformer``) before a skfilter estimator runs as one
        block through the estimator's own prequential pass; otherwise the rows are predicted and
        learned one at a time. Left fitted on the whole stream.
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
    if hasattr(estimator, "prequential_fit_predict"):  # a skfilter estimator: the filter loop itself
        return estimator.prequential_fit_predict(X, y, return_std=return_std, method=method,
                                                 sample_weight=sample_weight, classes=classes)
    if not hasattr(estimator, "partial_fit"):
        raise TypeError(f"prequential_predict needs a skfilter filter estimator, a PartialPipeline or an estimator "
                        f"with partial_fit, got {type(estimator).__name__}.")
    return _prequential_partial(estimator, X, y, return_std=return_std, method=method,
                                sample_weight=sample_weight, classes=classes)


def _reset_in_place(est):
    """Make ``est`` unfitted again, keeping the object (so the caller's references see the refit)."""
    from sklearn.base import clone

    fresh = clone(est)
    restore_attributes(est, fresh.__dict__)


def _data_free_prior(est):
    """True if the skfilter estimator's prior and noise use no data: no ``'auto'``-style (string)
    ``prior_variance``/``obs_variance``, which are set from the stream's first rows and targets."""
    params = est.get_params()
    return not any(isinstance(v, str) for k, v in params.items()
                   if k.split("__")[-1] in ("prior_variance", "obs_variance"))


def _predict_accepts_std(est):
    import inspect

    try:
        return "return_std" in inspect.signature(est.predict).parameters
    except (AttributeError, TypeError, ValueError):
        return False


def _rows(a, start, stop):
    if a is None:
        return None
    return a.iloc[start:stop] if hasattr(a, "iloc") else a[start:stop]


def _prequential_partial(estimator, X, y, *, return_std, method, sample_weight, classes):
    """Prequential pass of a :class:`~skfilter.pipeline.PartialPipeline` or any partial_fit estimator."""
    from sklearn.base import is_classifier

    from .pipeline import PartialPipeline, _is_passthrough, _is_stateless

    if method not in ("predict", "predict_proba", "predict_log_proba"):
        raise ValueError(f"method must be 'predict', 'predict_proba' or 'predict_log_proba', got {method!r}.")
    classifier = is_classifier(estimator)
    if classifier and return_std:
        raise ValueError("return_std=True is for regressors.")
    if not classifier and method != "predict":
        raise ValueError(f"method={method!r} is for classifiers.")
    pipe = isinstance(estimator, PartialPipeline)
    if pipe:
        estimator._check_partial_steps()
        final = estimator.steps[-1][1]
        if _is_passthrough(final):
            raise TypeError("prequential_predict needs a pipeline whose final step is an estimator.")
        for _, step in estimator.steps:
            if not _is_passthrough(step):
                _reset_in_place(step)
    else:
        final = estimator
        _reset_in_place(estimator)
    if return_std and not _predict_accepts_std(final):
        raise TypeError(f"return_std=True needs a final estimator whose predict takes return_std; "
                        f"{type(final).__name__}.predict does not.")
    y_arr = np.asarray(y)
    n = len(y_arr)
    if classifier:
        classes = np.unique(y_arr) if classes is None else np.asarray(classes)
    fit_kw = {"classes": classes} if classifier else {}

    # a skfilter final estimator whose prior uses no data can predict row 0 from its prior
    prior_ok = hasattr(final, "prequential_fit_predict") and _data_free_prior(final)
    # fast path: stateless transformers only and a skfilter estimator: transform all rows, then the
    # filter's own prequential loop (the same rows a row-by-row partial_fit would feed it; a
    # data-scaled prior is set there from the rows before each prediction, skfilter.stream_start)
    if pipe and hasattr(final, "prequential_fit_predict") and all(
            _is_passthrough(s) or (not hasattr(s, "partial_fit") and _is_stateless(s))
            for _, s in estimator.steps[:-1]):
        Xt = estimator._partial_transform(X, y)
        return final.prequential_fit_predict(Xt, y, return_std=return_std, method=method,
                                             sample_weight=sample_weight, classes=classes if classifier else None)

    preds, stds = [], []
    start = 0
    if pipe and prior_ok:
        # row 0 from the filter's prior: its features transformed with the statistics of row 0 alone
        # (no earlier rows exist; its target is not used), then learned, as partial_fit would
        Xt0 = estimator._partial_transform(_rows(X, 0, 1), _rows(y, 0, 1))
        res = final.prequential_fit_predict(Xt0, _rows(y, 0, 1), return_std=return_std, method=method,
                                            sample_weight=_rows(sample_weight, 0, 1),
                                            classes=classes if classifier else None)
        if return_std:
            preds.append(np.asarray(res[0])); stds.append(np.asarray(res[1]))
        else:
            preds.append(np.asarray(res))
        start = 1
    fitted = start == 1
    for t in range(start, n):
        xt, yt = _rows(X, t, t + 1), _rows(y, t, t + 1)
        if not fitted:  # nothing learned yet: no prediction (regressors) or uniform probabilities
            if classifier:
                k = len(classes)
                p = np.full((1, k), 1.0 / k)
                preds.append(classes[:1] if method == "predict" else (np.log(p) if method == "predict_log_proba" else p))
            else:
                shape = (1,) + y_arr.shape[1:]
                preds.append(np.full(shape, np.nan))
                if return_std:
                    stds.append(np.full(shape, np.nan))
        elif return_std:
            m, s = estimator.predict(xt, return_std=True)
            preds.append(np.asarray(m)); stds.append(np.asarray(s))
        else:
            preds.append(np.asarray(getattr(estimator, method)(xt)))
        kw = dict(fit_kw)
        if sample_weight is not None:
            kw["sample_weight"] = _rows(sample_weight, t, t + 1)
        estimator.partial_fit(xt, yt, **kw)
        fitted = True
    pred = np.concatenate(preds, axis=0)
    if return_std:
        return pred, np.concatenate(stds, axis=0)
    return pred


#: metrics of :func:`prequential_score` for regressors (``True``: needs the predictive std)
REGRESSION_METRICS = {"rmse": False, "mae": False, "nlpd": True, "coverage": True, "interval_width": True}
#: metrics of :func:`prequential_score` for classifiers
CLASSIFICATION_METRICS = ("accuracy", "log_loss", "brier", "ece")


def _scorer_names(classifier):
    """The names of :data:`skfilter.metrics.SCORERS` usable for regressors or classifiers."""
    from .metrics import SCORERS

    kind = "classification" if classifier else "regression"
    return tuple(n for n, sc in SCORERS.items() if sc.kind == kind)


def _needs_std(name):
    """Whether the regression metric ``name`` needs the predictive std."""
    return REGRESSION_METRICS.get(name, True)


def _regression_metric(name):
    from sklearn.metrics import mean_absolute_error, root_mean_squared_error

    from . import metrics

    if name in metrics.SCORERS:  # a skfilter scorer's value (greater is better) on these predictions
        sc = metrics.SCORERS[name]
        return lambda y, m, s: sc.sign * sc.metric(y, m, s, **sc.kwargs)
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

    if name in metrics.SCORERS:
        sc = metrics.SCORERS[name]
        return lambda y, p: sc.sign * sc.metric(y, p, labels=labels, **sc.kwargs)
    return {
        "accuracy": lambda y, p: accuracy_score(y, labels[np.argmax(p, axis=1)]),
        "log_loss": lambda y, p: log_loss(y, p, labels=labels),
        "brier": lambda y, p: metrics.brier_score(y, p, labels=labels),
        "ece": lambda y, p: metrics.expected_calibration_error(y, p, labels=labels),
    }[name]


def metric_function(name, classifier, labels=None):
    """The prequential metric ``name`` as a function of the predictions.

    Parameters
    ----------
    name : str
        A metric of :data:`REGRESSION_METRICS` / :data:`CLASSIFICATION_METRICS` or a scorer name of
        :data:`skfilter.metrics.SCORERS`.
    classifier : bool
        Whether the predictions are class probabilities.
    labels : array-like of shape (n_classes,), default=None
        The classes in column order (classifiers).

    Returns
    -------
    callable
        ``f(y, mean, std)`` for regressors, ``f(y, proba)`` for classifiers.

    Examples
    --------
    >>> from skfilter.model_selection import metric_function
    >>> float(metric_function("rmse", classifier=False)([0.0, 2.0], [0.0, 0.0], None))
    1.4142135623730951
    """
    return _classification_metric(name, labels) if classifier else _regression_metric(name)


def needs_std(name):
    """Whether the regression metric ``name`` needs the predictive standard deviation.

    Parameters
    ----------
    name : str

    Returns
    -------
    bool

    Examples
    --------
    >>> from skfilter.model_selection import needs_std
    >>> needs_std("rmse"), needs_std("nlpd")
    (False, True)
    """
    return _needs_std(name)


def scoring_items(scoring, classifier):
    """``[(name, metric)]`` of a ``scoring`` argument (:func:`prequential_score`).

    Parameters
    ----------
    scoring : str, callable, list of those, dict of name → those, or None
        None: ``('accuracy', 'log_loss')`` for classifiers, ``('rmse', 'nlpd', 'coverage')`` else.
    classifier : bool

    Returns
    -------
    list of (str, str or callable)
        Each metric's reported name and the metric (a name for :func:`metric_function`, or a callable).

    Examples
    --------
    >>> from skfilter.model_selection import scoring_items
    >>> scoring_items(["rmse", "mae"], classifier=False)
    [('rmse', 'rmse'), ('mae', 'mae')]
    """
    return _scoring_items(scoring, classifier)


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
    known = (CLASSIFICATION_METRICS if classifier else tuple(REGRESSION_METRICS)) + _scorer_names(classifier)
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
    both
    names of ``SCORERS``      :data:`skfilter.metrics.SCORERS` (``'neg_nlpd'``,
                              ``'coverage_error'``, ``'neg_interval_width'``, ``'neg_brier'``,
                              ``'neg_ece'``): the scorer's value, greater is better
    ========================  ===============================================================

    Pipelines and other ``partial_fit`` estimators are evaluated as in
    :func:`prequential_predict`; regressors' rows without a prediction (``nan``, before anything
    was learned) are left out of the metrics, and metrics that need a predictive std need a final
    estimator whose ``predict`` takes ``return_std``.

    Parameters
    ----------
    estimator : skfilter estimator, PartialPipeline, or estimator with partial_fit
        A filter estimator or a replay baseline (anything with ``prequential_fit_predict``), a
        :class:`~skfilter.pipeline.PartialPipeline` or any estimator with ``partial_fit`` (see
        :func:`prequential_predict`); a classifier if :func:`sklearn.base.is_classifier` says so.
        Left fitted on the whole stream.
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

    A pipeline, with a scaler learned online, scored by several metrics at once:

    >>> from sklearn.preprocessing import StandardScaler
    >>> from skfilter.pipeline import make_partial_pipeline
    >>> pipe = make_partial_pipeline(StandardScaler(), EKFRegressor(hidden_layer_sizes=(), obs_variance=0.01,
    ...                                                             random_state=0))
    >>> scores = prequential_score(pipe, X, y, scoring={"rmse": "rmse", "nlpd": "neg_nlpd"})
    >>> sorted(scores)
    ['nlpd', 'rmse']
    """
    from sklearn.base import is_classifier

    if not hasattr(estimator, "prequential_fit_predict") and not hasattr(estimator, "partial_fit"):
        raise TypeError(f"prequential_score needs a skfilter filter estimator, a PartialPipeline or an estimator "
                        f"with partial_fit, got {type(estimator).__name__}.")
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
    plain = hasattr(estimator, "prequential_fit_predict")
    final = estimator if plain else getattr(estimator, "_final_estimator", estimator)
    can_std = plain or _predict_accepts_std(final)
    need_std = any((callable(s) and can_std) or (not callable(s) and _needs_std(s)) for _, s in items)
    if need_std and not can_std:
        raise TypeError(f"The metrics {[n for n, s in items if not callable(s) and _needs_std(s)]} need a "
                        f"predictive std; {type(final).__name__}.predict has no return_std.")
    res = prequential_predict(estimator, X, y, return_std=need_std, sample_weight=sample_weight,
                              classes=classes)
    mean, std = res if need_std else (res, None)
    y_true = y_arr.astype(np.float64).reshape(np.shape(mean))
    # rows before the estimator had learned anything have no prediction (in an estimator's own loop,
    # the leading ones: the factorization estimators' row 0, whose 'auto' priors need data)
    keep = np.isfinite(mean).reshape(len(mean), -1).all(axis=1)
    if plain:
        keep = np.arange(len(keep)) >= (int(np.argmax(keep)) if keep.any() else len(keep))
    if not keep.all():
        y_true, mean = y_true[keep], mean[keep]
        std = None if std is None else std[keep]
    fns = [(n, s if callable(s) else _regression_metric(s)) for n, s in items]
    return {n: float(f(y_true, mean, std)) for n, f in fns}


# -- successive halving in time order ---------------------------------------------------------------
def _estimator_has(name):
    """For :func:`~sklearn.utils.metaestimators.available_if`: the (fitted or template) estimator has
    the method ``name``."""
    def check(self):
        return hasattr(getattr(self, "estimator_", self.estimator), name)

    return check


class StreamPrefixEstimator(MetaEstimatorMixin, BaseEstimator):
    """Fit an estimator on the first ``max_rows`` rows of the stream, in row order.

    The resource of a successive-halving search that keeps time order: scikit-learn's
    :class:`~sklearn.model_selection.HalvingGridSearchCV` with ``resource='n_samples'`` (its default)
    gives each candidate a **random** subsample of its training rows — a filter then learns a
    shuffled stream, from which it cannot learn what the order holds (drift, regimes) and with which
    it is compared to nothing it will meet. With ``resource='max_rows'`` the search sets this
    parameter instead: every candidate learns the first ``max_rows`` rows of its training fold, a
    time-ordered prefix, and the surviving candidates of each round get longer prefixes of the same
    stream. Use it with a :class:`~sklearn.model_selection.TimeSeriesSplit`, whose training folds
    are prefixes of the stream and whose validation rows follow them. The search's refit keeps the
    last round's ``max_rows`` (it is one of ``best_params_``): set it to ``None`` and fit again to
    learn the whole stream.

    Parameters
    ----------
    estimator : estimator
        The estimator to fit (a skfilter filter, wrapper or :class:`~skfilter.PartialPipeline`, or
        any estimator); cloned by :meth:`fit`. Its parameters are ``estimator__<name>``.
    max_rows : int or None, default=None
        The number of leading rows ``fit`` learns (``None``: all of them; fewer rows than this:
        all of them).

    Attributes
    ----------
    estimator_ : estimator
        The clone fitted on the prefix.
    n_rows_ : int
        The number of rows it learned.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.experimental import enable_halving_search_cv  # noqa: F401
    >>> from sklearn.model_selection import HalvingGridSearchCV, TimeSeriesSplit
    >>> from skfilter import EKFRegressor
    >>> from skfilter.model_selection import StreamPrefixEstimator
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 2)); y = X[:, 0] - X[:, 1] + 0.1 * rng.normal(size=400)
    >>> search = HalvingGridSearchCV(
    ...     StreamPrefixEstimator(EKFRegressor(hidden_layer_sizes=(), random_state=0)),
    ...     {"estimator__obs_variance": [1e-3, 1e-2, 1e-1, 1.0]}, resource="max_rows",
    ...     min_resources=50, max_resources=300, factor=2, cv=TimeSeriesSplit(n_splits=3)).fit(X, y)
    >>> search.n_resources_
    [50, 100, 200]
    >>> search.best_estimator_.n_rows_  # the refit keeps the last round's resource
    200
    >>> final = search.best_estimator_.set_params(max_rows=None).fit(X, y)  # the whole stream
    >>> final.n_rows_
    400
    """

    _parameter_constraints: dict = {
        "estimator": [HasMethods(["fit"])],
        "max_rows": [None, Interval(Integral, 1, None, closed="left")],
    }

    def __init__(self, estimator, *, max_rows=None):
        self.estimator = estimator
        self.max_rows = max_rows

    def fit(self, X, y=None, **fit_params):
        """Fit a clone of ``estimator`` on the first ``max_rows`` rows of ``(X, y)``, in row order.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows in time order.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs), default=None
        **fit_params
            Passed to the estimator's ``fit``; arrays with one entry per row (``sample_weight``)
            are cut to the same prefix.

        Returns
        -------
        self : object
        """
        check_parameter_constraints(self)
        X, y = _rows_of(X), None if y is None else _rows_of(y)
        if y is not None:
            check_consistent_length(X, y)
        n = X.shape[0] if hasattr(X, "shape") else len(X)
        k = n if self.max_rows is None else min(int(self.max_rows), n)
        params = {key: (_prefix(v, k) if _is_per_row(v, n) else v) for key, v in fit_params.items()}
        estimator = clone(self.estimator)
        estimator.fit(_prefix(X, k), None if y is None else _prefix(y, k), **params)
        self.estimator_, self.n_rows_ = estimator, k
        return self

    @property
    def n_features_in_(self):
        """Number of features seen by the fitted estimator."""
        return self.estimator_.n_features_in_

    @property
    def classes_(self):
        """The class labels of a fitted classifier."""
        return self.estimator_.classes_

    @available_if(_estimator_has("predict"))
    def predict(self, X, **predict_params):
        """The fitted estimator's ``predict`` (``return_std=True`` and the like pass through).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        **predict_params
            Passed to the estimator's ``predict``.

        Returns
        -------
        y_pred : ndarray, or what the estimator returns (e.g. ``(mean, std)``)
        """
        check_is_fitted(self)
        return self.estimator_.predict(X, **predict_params)

    @available_if(_estimator_has("predict_proba"))
    def predict_proba(self, X):
        """The fitted classifier's class probabilities.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        check_is_fitted(self)
        return self.estimator_.predict_proba(X)

    @available_if(_estimator_has("predict_log_proba"))
    def predict_log_proba(self, X):
        """The fitted classifier's log class probabilities.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        log_proba : ndarray of shape (n_samples, n_classes)
        """
        check_is_fitted(self)
        return self.estimator_.predict_log_proba(X)

    @available_if(_estimator_has("sample_y"))
    def sample_y(self, X, n_samples=1, random_state=None, method=None, include_noise=None):
        """Draws from the fitted regressor's predictive distribution.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=None
        method : {'thompson', 'predictive'}, default=None
            Passed to the estimator's ``sample_y`` when given (skfilter's regressors: parameter-space
            or outcome-space draws; None: the estimator's default).
        include_noise : bool, default=None
            Passed to the estimator's ``sample_y`` when given (None: its default).

        Returns
        -------
        y_samples : ndarray
        """
        check_is_fitted(self)
        return self.estimator_.sample_y(X, n_samples=n_samples, random_state=random_state,
                                        **given_kwargs(method=method, include_noise=include_noise))

    @available_if(_estimator_has("score"))
    def score(self, X, y, sample_weight=None):
        """The fitted estimator's ``score`` (R² for regressors, accuracy for classifiers).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        score : float
        """
        check_is_fitted(self)
        kwargs = {} if sample_weight is None else {"sample_weight": sample_weight}
        return self.estimator_.score(X, y, **kwargs)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        base = get_tags(self.estimator)
        tags.estimator_type = base.estimator_type
        tags.input_tags = base.input_tags
        tags.target_tags = base.target_tags
        tags.classifier_tags = base.classifier_tags
        tags.regressor_tags = base.regressor_tags
        tags.non_deterministic = base.non_deterministic
        return tags


def _is_per_row(value, n) -> bool:
    """Whether a fit parameter holds one entry per row (and is cut with them)."""
    return hasattr(value, "__len__") and not isinstance(value, (str, dict)) and len(value) == n


def _rows_of(a):
    """``a`` as given if it is an array, a DataFrame/Series or a list or tuple of rows, else as a
    NumPy array (any other array-like)."""
    return a if hasattr(a, "shape") or isinstance(a, (list, tuple)) else np.asarray(a)


def _prefix(a, k):
    """The first ``k`` rows of an array, sparse matrix, DataFrame, Series or list (see :func:`_rows_of`)."""
    if hasattr(a, "iloc"):
        return a.iloc[:k]
    if issparse(a):
        return a.tocsr()[:k]
    return _rows_of(a)[:k]
