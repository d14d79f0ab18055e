"""Figures of predictive distributions and streams (matplotlib, an optional dependency).

* :func:`plot_predictive_band`: the predictive mean ± ``k`` standard deviations of a regressor
  along one input feature;
* :func:`plot_prequential`: running (cumulative or moving-window) prequential metrics over a stream;
* :func:`plot_run_length`: heat map of a run-length posterior (BOCD) with its most probable run
  length;
* :func:`plot_reliability`: reliability diagram of a classifier's probabilities;
* :func:`plot_coverage`: nominal against empirical coverage of central Gaussian intervals;
* :func:`plot_cumulative_reward`: cumulative reward or regret of a bandit agent, or the best value
  found by a Bayesian optimiser (the ``history_`` of :mod:`skfilter.decision`).

matplotlib is imported only inside the functions: install it with ``pip install matplotlib`` (or
the ``demo`` extra, ``pip install 'skfilter[demo]'``). Every function draws on ``ax`` if given and
otherwise on a new figure from :func:`matplotlib.pyplot.subplots` (so that ``plt.show()`` and
notebooks show it; matplotlib chooses a non-interactive backend on a machine without a display),
returns the :class:`~matplotlib.axes.Axes`, and never calls ``plt.show()``. The metrics are those of
:mod:`skfilter.metrics` and :func:`skfilter.model_selection.prequential_score`.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions, validate_params
from sklearn.utils.validation import check_array, check_consistent_length

__all__ = ["plot_predictive_band", "plot_prequential", "plot_run_length", "plot_reliability", "plot_coverage",
           "plot_cumulative_reward"]

_INSTALL_HINT = ("skfilter.plotting needs matplotlib, an optional dependency: pip install matplotlib "
                 "(or the demo extra: pip install 'skfilter[demo]').")


def _require_matplotlib():
    """Import matplotlib or raise an ImportError that says how to install it."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc


def _get_axes(ax):
    """``ax``, or the Axes of a new pyplot figure."""
    if ax is not None:
        return ax
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    _, ax = plt.subplots()
    return ax


def _single_output(a, name):
    """``a`` as a 1-d float array; a 2-d array of one column is flattened, more columns are refused."""
    a = check_array(a, ensure_2d=False, dtype=np.float64, input_name=name)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-d (a single output), got shape {a.shape}.")
    return a


# -- predictive band ------------------------------------------------------------------------------
@validate_params({"k": [Interval(Real, 0, None, closed="neither")],
                  "feature": [Interval(Integral, 0, None, closed="left")]}, prefer_skip_nested_validation=True)
def plot_predictive_band(estimator, X, y=None, *, k=2.0, feature=0, ax=None):
    r"""Predictive mean and a ``mean ± k·std`` band of a fitted regressor along one input feature.

    Calls ``estimator.predict(X, return_std=True)`` and draws, against column ``feature`` of ``X``
    (sorted), the predictive mean as a line and the band :math:`\mu \pm k\sigma` (``std`` includes
    the observation noise), with the targets ``y`` as points if given. Made for inputs of one
    feature; with several, each row is drawn where its ``feature`` lies, the other features as they
    are in ``X`` (to draw a slice, pass a grid that varies ``feature`` and holds the others fixed).

    Parameters
    ----------
    estimator : fitted regressor
        Any single-output regressor whose ``predict`` takes ``return_std=True`` (skfilter's
        regressors, or a pipeline ending in one).
    X : array-like of shape (n_samples, n_features) or (n_samples,)
        Inputs at which to predict; 1-d: a single feature. Passed to ``predict`` as given (a
        DataFrame keeps its column names).
    y : array-like of shape (n_samples,), default=None
        Targets to draw as points (one per row of ``X``).
    k : float, default=2.0
        Half-width of the band in standard deviations (2: about 95 % for a Gaussian).
    feature : int, default=0
        The column of ``X`` on the horizontal axis.
    ax : matplotlib.axes.Axes, default=None
        Where to draw; default: a new figure.

    Returns
    -------
    ax : matplotlib.axes.Axes
        One line (the mean), one filled band and, with ``y``, one scatter collection; a legend.

    Raises
    ------
    ValueError
        ``y`` of another length than ``X``, ``y`` or the predictions with several outputs,
        ``feature`` out of range, or ``k <= 0``.
    ImportError
        Without matplotlib.

    Examples
    --------
    >>> import numpy as np
    >>> from matplotlib.figure import Figure
    >>> from skfilter import LoFiRegressor
    >>> from skfilter.plotting import plot_predictive_band
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, size=(100, 1)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=100)
    >>> reg = LoFiRegressor(hidden_layer_sizes=(16,), random_state=0).fit(X, y)
    >>> ax = plot_predictive_band(reg, X, y, k=2.0, ax=Figure().subplots())
    >>> len(ax.lines), len(ax.collections)
    (1, 2)
    """
    _require_matplotlib()
    k = float(k)
    X_given = X
    X_arr = check_array(X, ensure_2d=False, dtype=None, input_name="X")
    if X_arr.ndim == 1:
        X_arr = X_arr.reshape(-1, 1)
        X_given = X_arr
    if X_arr.ndim != 2:
        raise ValueError(f"X must be 1-d or 2-d, got shape {X_arr.shape}.")
    feature = int(feature)
    if feature >= X_arr.shape[1]:
        raise ValueError(f"feature={feature} but X has {X_arr.shape[1]} feature(s).")
    if y is not None:
        y = _single_output(y, "y")
        check_consistent_length(X_arr, y)
    res = estimator.predict(X_given, return_std=True)
    if not (isinstance(res, tuple) and len(res) == 2):
        raise TypeError(f"{type(estimator).__name__}.predict(X, return_std=True) must return (mean, std).")
    mean = _single_output(res[0], "the predicted mean")
    std = _single_output(res[1], "the predicted std")
    check_consistent_length(X_arr, mean, std)

    x = np.asarray(X_arr[:, feature], dtype=np.float64)
    order = np.argsort(x, kind="stable")
    xs, ms, ss = x[order], mean[order], std[order]
    names = getattr(estimator, "feature_names_in_", None)
    if names is None and hasattr(X_given, "columns"):
        names = np.asarray(X_given.columns)
    xlabel = str(names[feature]) if names is not None and len(names) > feature else f"x{feature}"

    ax = _get_axes(ax)
    (line,) = ax.plot(xs, ms, label="predictive mean")
    ax.fill_between(xs, ms - k * ss, ms + k * ss, color=line.get_color(), alpha=0.25, linewidth=0,
                    label=f"mean ± {k:g}·std")
    if y is not None:
        ax.scatter(x, y, s=10, color="black", alpha=0.6, label="observed", zorder=3)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("y")
    ax.legend(loc="best")
    return ax


# -- running prequential metrics -------------------------------------------------------------------
def _metric_kind(metrics, y_true, y_pred, std):
    """``True`` for classification metrics: from the metric names, else from the shapes."""
    from .model_selection import CLASSIFICATION_METRICS, REGRESSION_METRICS

    if metrics is not None and not isinstance(metrics, (str, dict)) and callable(metrics):
        metrics = (metrics,)
    names = [metrics] if isinstance(metrics, str) else list(metrics.values() if isinstance(metrics, dict)
                                                            else metrics or ())
    names = [m for m in names if isinstance(m, str)]
    from .metrics import SCORERS

    is_clf = set()
    for m in names:
        if m in CLASSIFICATION_METRICS or m in REGRESSION_METRICS:
            is_clf.add(m in CLASSIFICATION_METRICS)
        elif m in SCORERS:
            is_clf.add(SCORERS[m].kind == "classification")
    if len(is_clf) == 2:
        raise ValueError(f"metrics mixes regression and classification metrics: {names}.")
    if is_clf:
        return is_clf.pop()
    return std is None and np.ndim(y_true) == 1 and np.ndim(y_pred) == 2 and np.shape(y_pred)[1] >= 2


@validate_params({"window": [None, Interval(Integral, 1, None, closed="left")],
                  "max_points": [Interval(Integral, 2, None, closed="left")]}, prefer_skip_nested_validation=True)
def plot_prequential(y_true, y_pred, *, std=None, metrics=None, window=None, labels=None, max_points=500,
                     ax=None):
    r"""Running prequential metrics of one-step-ahead predictions over a stream.

    At each stream position ``t`` the metrics score the predictions of rows ``0..t`` (cumulative,
    ``window=None``) or of the last ``window`` rows (moving window), in stream order. The
    predictions are the one-step-ahead ones of :func:`skfilter.model_selection.prequential_predict`
    (each made before its row was learned), and the metrics those of
    :func:`skfilter.model_selection.prequential_score`: regressors ``'rmse'``, ``'mae'``,
    ``'nlpd'``, ``'coverage'`` (of ``mean ± 2·std``) and ``'interval_width'`` (the last three need
    ``std``); classifiers (``y_pred`` the probabilities of ``predict_proba``) ``'accuracy'``,
    ``'log_loss'``, ``'brier'`` and ``'ece'`` (any name that ``prequential_score`` accepts). All metrics
    share one vertical axis. Rows whose prediction is ``nan`` (a pipeline's first rows, before it
    has learned anything) are left out, and the curves start at the first row with a prediction.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Targets (labels for a classifier), in stream order.
    y_pred : array-like
        Regressors: predictive means, of the shape of ``y_true``. Classifiers: probabilities of
        shape (n_samples, n_classes), columns in the order of ``labels``. Rows of ``nan`` are left
        out.
    std : array-like of the shape of ``y_pred``, default=None
        Predictive standard deviations (regressors), e.g. from
        ``prequential_predict(..., return_std=True)``.
    metrics : str, callable, list of those, or dict, default=None
        As ``scoring`` of :func:`~skfilter.model_selection.prequential_score`: metric names, or
        callables ``metric(y, mean, std)`` (regressors) or ``metric(y, proba)`` (classifiers), or a
        dict ``{legend name: name or callable}``. ``None``: ``('accuracy', 'log_loss')`` for
        probabilities, ``('rmse',)`` otherwise, and ``('rmse', 'nlpd', 'coverage')`` with ``std``.
        Classification is recognised from the metric names, otherwise from the shapes (``y_true``
        1-d, ``y_pred`` 2-d with two or more columns, no ``std``).
    window : int, default=None
        Length of the moving window; ``None``: cumulative from the first row.
    labels : array-like of shape (n_classes,), default=None
        Classifiers: the classes of the columns of ``y_pred`` (``estimator.classes_``; default:
        the sorted distinct values of ``y_true``).
    max_points : int, default=500
        The metrics are evaluated at most at this many evenly spaced positions of the stream (each
        evaluation scores a whole prefix or window).
    ax : matplotlib.axes.Axes, default=None
        Where to draw; default: a new figure.

    Returns
    -------
    ax : matplotlib.axes.Axes
        One line per metric, labelled with its name; a legend.

    Raises
    ------
    ValueError
        Lengths that differ, unknown metric names, a metric that needs ``std`` without it,
        probabilities outside ``[0, 1]`` or rows not summing to one, or ``window < 1``.
    ImportError
        Without matplotlib.

    Examples
    --------
    >>> import numpy as np
    >>> from matplotlib.figure import Figure
    >>> from skfilter import EKFRegressor
    >>> from skfilter.model_selection import prequential_predict
    >>> from skfilter.plotting import plot_prequential
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2)); y = X @ [1.0, -2.0] + 0.1 * rng.normal(size=200)
    >>> reg = EKFRegressor(hidden_layer_sizes=(), obs_variance=0.01, random_state=0)
    >>> mean, std = prequential_predict(reg, X, y, return_std=True)
    >>> ax = plot_prequential(y, mean, std=std, metrics=("rmse", "nlpd"), window=50,
    ...                       ax=Figure().subplots())
    >>> [line.get_label() for line in ax.lines]
    ['rmse', 'nlpd']
    """
    from .metrics import check_probabilities
    from .model_selection import metric_function, needs_std, scoring_items

    _require_matplotlib()
    max_points = int(max_points)
    if window is not None:
        window = int(window)
    classifier = _metric_kind(metrics, y_true, y_pred, std)
    if metrics is None and not classifier:
        metrics = ("rmse",) if std is None else ("rmse", "nlpd", "coverage")
    items = scoring_items(metrics, classifier)

    pred = check_array(y_pred, ensure_2d=False, dtype=np.float64, ensure_all_finite="allow-nan",
                       input_name="y_pred")
    if std is not None:
        if classifier:
            raise ValueError("std is for regressors; classifiers pass their probabilities as y_pred.")
        std = check_array(std, ensure_2d=False, dtype=np.float64, ensure_all_finite="allow-nan", input_name="std")
        if std.shape != pred.shape:
            raise ValueError(f"std must have the shape of y_pred {pred.shape}, got {std.shape}.")
    if classifier:
        y_arr = np.asarray(y_true)
        if y_arr.ndim == 2 and y_arr.shape[1] == 1:
            y_arr = y_arr[:, 0]
    else:
        y_arr = check_array(y_true, ensure_2d=False, dtype=np.float64, input_name="y_true")
        if y_arr.shape != pred.shape:
            raise ValueError(f"y_true and y_pred must have the same shape, got {y_arr.shape} and {pred.shape}.")
    check_consistent_length(y_arr, pred)
    # rows without a prediction (nan: a pipeline's rows before it had learned anything) are left out
    finite = np.isfinite(pred.reshape(len(pred), -1)).all(axis=1)
    if std is not None:
        finite &= np.isfinite(std.reshape(len(std), -1)).all(axis=1)
    rows = np.flatnonzero(finite)
    y_arr, pred, std = y_arr[rows], pred[rows], None if std is None else std[rows]

    if classifier:
        _, proba, labels = check_probabilities(y_arr, pred, labels)  # validates the probabilities
        fns = [(n, s if callable(s) else metric_function(s, True, labels)) for n, s in items]
        args = (y_arr, proba)
    else:
        missing = [n for n, s in items if not callable(s) and needs_std(s) and std is None]
        if missing:
            raise ValueError(f"The metrics {missing} need the predictive std: pass std=.")
        fns = [(n, s if callable(s) else metric_function(s, False)) for n, s in items]
        args = (y_arr, pred, std)

    n = len(rows)
    if n == 0:
        raise ValueError("No row has a prediction (y_true is empty or y_pred all nan).")
    ends = np.unique(np.linspace(1, n, num=min(n, max_points)).round().astype(int))  # rows [start, end)
    starts = np.zeros_like(ends) if window is None else np.maximum(ends - window, 0)
    values = {name: np.empty(len(ends)) for name, _ in fns}
    for i, (a, b) in enumerate(zip(starts, ends)):
        part = tuple(None if v is None else v[a:b] for v in args)
        for name, fn in fns:
            values[name][i] = float(fn(*part))

    ax = _get_axes(ax)
    positions = rows[ends - 1]
    for name, _ in fns:
        ax.plot(positions, values[name], label=str(name))
    ax.set_xlabel("row of the stream")
    ax.set_ylabel(str(fns[0][0]) if len(fns) == 1 else "metric")
    ax.set_title("prequential metrics, " + ("cumulative" if window is None else f"moving window of {window} rows"))
    ax.legend(loc="best")
    return ax


# -- run-length posterior ----------------------------------------------------------------------------
@validate_params({"log": ["boolean"], "log_floor": [Interval(Real, 0, None, closed="neither")],
                  "colorbar": ["boolean"]}, prefer_skip_nested_validation=True)
def plot_run_length(posterior, *, log=True, log_floor=1e-6, colorbar=True, ax=None):
    r"""Heat map of a run-length posterior over a stream, with the most probable run length.

    Row ``t`` of ``posterior`` holds :math:`p(r_t = r \mid y_{1:t})` for the run lengths
    :math:`r = 0, 1, \ldots` (columns); the map puts the stream on the horizontal axis and the run
    length on the vertical one, and a line follows the MAP run length :math:`\arg\max_r` of each
    row. A :class:`~skfilter.BOCDRegressor` or :class:`~skfilter.BOCDClassifier` holds the
    posterior of the last step only (``run_lengths_`` and ``runlength_log_posterior_``, its kept
    hypotheses); gather the history by learning the stream row by row::

        P = np.zeros((n, n + 1))
        for t in range(n):
            bocd.partial_fit(X[t:t + 1], y[t:t + 1])
            P[t, bocd.run_lengths_] = np.exp(bocd.runlength_log_posterior_)

    (run lengths that were pruned, with ``n_hypotheses`` below ``n``, stay 0).

    Parameters
    ----------
    posterior : array-like of shape (n_steps, n_run_lengths)
        Posterior probabilities, non-negative, each row summing to at most one (a row may sum to
        less when run lengths are left out).
    log : bool, default=True
        Colour by the logarithm of the probability (from ``log_floor`` to 1); ``False``: linearly
        from 0 to 1.
    log_floor : float, default=1e-06
        With ``log=True``, the probability of the darkest colour; smaller ones (and 0) get it too.
    colorbar : bool, default=True
        Add a colour bar to the figure of ``ax``.
    ax : matplotlib.axes.Axes, default=None
        Where to draw; default: a new figure.

    Returns
    -------
    ax : matplotlib.axes.Axes
        One image (the heat map) and one line (the MAP run length).

    Raises
    ------
    ValueError
        ``posterior`` not 2-d, empty, negative or not finite, or with a row summing to more than
        one or to zero.
    ImportError
        Without matplotlib.

    Examples
    --------
    >>> import numpy as np
    >>> from matplotlib.figure import Figure
    >>> from skfilter import BOCDRegressor, EKFRegressor
    >>> from skfilter.plotting import plot_run_length
    >>> rng = np.random.default_rng(0)
    >>> n = 80; X = np.ones((n, 1)); y = np.where(np.arange(n) < 40, 0.0, 3.0) + 0.1 * rng.normal(size=n)
    >>> base = EKFRegressor(hidden_layer_sizes=(), prior_variance=4.0, obs_variance=0.01, random_state=0)
    >>> bocd = BOCDRegressor(base, hazard=0.02, n_hypotheses=None)
    >>> P = np.zeros((n, n + 1))
    >>> for t in range(n):
    ...     _ = bocd.partial_fit(X[t:t + 1], y[t:t + 1])
    ...     P[t, bocd.run_lengths_] = np.exp(bocd.runlength_log_posterior_)
    >>> ax = plot_run_length(P, ax=Figure().subplots())
    >>> len(ax.images), len(ax.lines)
    (1, 1)
    >>> int(ax.lines[0].get_ydata()[45])  # five rows after the jump
    5
    """
    _require_matplotlib()
    from matplotlib.colors import LogNorm, Normalize

    post = check_array(posterior, dtype=np.float64, input_name="posterior")
    if np.any(post < 0):
        raise ValueError("posterior must be non-negative (probabilities, not log-probabilities).")
    sums = post.sum(axis=1)
    if np.any(sums > 1.0 + 1e-4) or np.any(sums <= 0):
        raise ValueError("Each row of posterior must hold probabilities summing to at most one (and more than 0).")
    log_floor = float(log_floor)
    if log and log_floor >= 1:
        raise ValueError(f"log_floor must be below 1, got {log_floor!r}.")

    import matplotlib

    n_steps, n_runs = post.shape
    ax = _get_axes(ax)
    if log:
        cmap = matplotlib.colormaps["viridis"].with_extremes(under="#440154", bad="#440154")
        norm = LogNorm(vmin=log_floor, vmax=1.0)
        shown = np.maximum(post, log_floor)
    else:
        cmap, norm, shown = matplotlib.colormaps["viridis"], Normalize(vmin=0.0, vmax=1.0), post
    image = ax.imshow(shown.T, origin="lower", aspect="auto", cmap=cmap, norm=norm, interpolation="nearest",
                      extent=(-0.5, n_steps - 0.5, -0.5, n_runs - 0.5))
    ax.plot(np.arange(n_steps), np.argmax(post, axis=1), color="red", linewidth=1.0, label="MAP run length")
    ax.set_xlabel("row of the stream t")
    ax.set_ylabel("run length r")
    ax.legend(loc="upper left")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, label=r"$p(r_t = r \mid y_{1:t})$")
    return ax


# -- classifier calibration ------------------------------------------------------------------------
@validate_params({"n_bins": [Interval(Integral, 1, None, closed="left")]}, prefer_skip_nested_validation=True)
def plot_reliability(y_true, proba, *, n_bins=10, labels=None, ax=None):
    r"""Reliability diagram: predicted probability against observed frequency.

    Two classes: the probability of the second (positive) class against the fraction of rows of
    that class, in ``n_bins`` equal-width bins (:func:`sklearn.calibration.calibration_curve`).
    More classes: top-label confidence (the largest probability of a row) against accuracy (the
    fraction of rows whose most probable class is right), the same bins. A calibrated classifier
    follows the diagonal; below it is over-confident. The legend gives the top-label
    :func:`skfilter.metrics.expected_calibration_error` with the same bins.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Labels.
    proba : array-like of shape (n_samples, n_classes) or (n_samples,)
        Probabilities (``predict_proba``), columns in the order of ``labels``, rows summing to one;
        1-d: the probability of the second label of a binary problem.
    n_bins : int, default=10
        Number of equal-width bins on ``[0, 1]`` (empty bins are not drawn).
    labels : array-like of shape (n_classes,), default=None
        The classes of the columns (``estimator.classes_``; default: the sorted distinct values of
        ``y_true``).
    ax : matplotlib.axes.Axes, default=None
        Where to draw; default: a new figure.

    Returns
    -------
    ax : matplotlib.axes.Axes
        Two lines: the diagonal and the classifier's curve; a legend.

    Raises
    ------
    ValueError
        Lengths that differ, probabilities outside ``[0, 1]`` or rows not summing to one, labels
        of ``y_true`` missing from ``labels``, or ``n_bins < 1``.
    ImportError
        Without matplotlib.

    Examples
    --------
    >>> import numpy as np
    >>> from matplotlib.figure import Figure
    >>> from skfilter.plotting import plot_reliability
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(size=500); y = (rng.uniform(size=500) < p).astype(int)  # calibrated
    >>> ax = plot_reliability(y, p, n_bins=5, ax=Figure().subplots())
    >>> len(ax.lines), ax.get_xlabel()
    (2, 'predicted probability of 1')
    """
    from sklearn.calibration import calibration_curve

    from .metrics import check_probabilities, expected_calibration_error

    _require_matplotlib()
    n_bins = int(n_bins)
    y_arr = np.asarray(y_true)
    if y_arr.ndim == 2 and y_arr.shape[1] == 1:
        y_arr = y_arr[:, 0]
    one_hot, p, labels = check_probabilities(y_arr, proba, labels)
    p = np.clip(p, 0.0, 1.0)
    if p.shape[1] == 2:
        hit, conf = one_hot[:, 1], p[:, 1]
        xlabel, ylabel = f"predicted probability of {labels[1]}", f"observed frequency of {labels[1]}"
    else:
        top = np.argmax(p, axis=1)
        hit, conf = one_hot[np.arange(len(top)), top], p[np.arange(len(top)), top]
        xlabel, ylabel = "confidence (largest predicted probability)", "accuracy"
    frac, mean_conf = calibration_curve(hit, conf, n_bins=n_bins, strategy="uniform", pos_label=1)
    ece = expected_calibration_error(y_arr, p, n_bins=n_bins, labels=labels)

    ax = _get_axes(ax)
    ax.plot([0, 1], [0, 1], linestyle="--", color="gray", label="perfectly calibrated")
    ax.plot(mean_conf, frac, marker="o", label=f"classifier (ECE = {ece:.3f})")
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(loc="upper left")
    return ax


# -- regression calibration -------------------------------------------------------------------------
def _rows_with_a_prediction(y_true, mean, std):
    """``(y_true, mean, std)`` without the rows whose ``mean`` (or array ``std``) is ``nan`` in some
    output: the rows that have no prediction. Anything else (shapes, other non-finite values) is
    left for :mod:`skfilter.metrics` to check; all rows ``nan`` raise a ``ValueError``."""
    try:
        m = np.asarray(mean, dtype=np.float64)
        s = None if np.ndim(std) == 0 else np.asarray(std, dtype=np.float64)
    except (TypeError, ValueError):
        return y_true, mean, std  # not numbers: the metric's own check says so
    if m.ndim == 0 or len(m) == 0 or np.shape(y_true)[:1] != m.shape[:1]:
        return y_true, mean, std  # shapes the metric's own check refuses
    missing = np.isnan(m.reshape(len(m), -1)).any(axis=1)
    if s is not None and s.shape[:1] == m.shape[:1]:
        missing |= np.isnan(s.reshape(len(s), -1)).any(axis=1)
    if not missing.any():
        return y_true, mean, std
    if missing.all():
        raise ValueError("No row has a prediction (mean all nan).")
    keep = ~missing
    return np.asarray(y_true)[keep], m[keep], std if s is None or s.shape[:1] != m.shape[:1] else s[keep]


def plot_coverage(y_true, mean, std, *, levels=None, ax=None):
    r"""Nominal against empirical coverage of central Gaussian predictive intervals.

    For each nominal level :math:`p` the interval is :math:`\mu \pm z\sigma` with
    :math:`z = \Phi^{-1}\big((1 + p)/2\big)` (:func:`scipy.stats.norm.ppf`), and its empirical
    coverage is :func:`skfilter.metrics.interval_coverage` with ``n_std=z`` (averaged over the
    outputs). Calibrated predictions follow the diagonal; below it they are over-confident (the
    intervals too narrow), above it under-confident.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Targets.
    mean : array-like of the same shape
        Predictive means (``predict(X, return_std=True)`` or
        :func:`~skfilter.model_selection.prequential_predict`).
    std : array-like of the same shape, or float
        Predictive standard deviations. Rows whose ``mean`` or ``std`` is ``nan`` (no prediction:
        a prequential pass's first row under a data-scaled prior) are left out.
    levels : array-like of shape (n_levels,), default=None
        Nominal coverages, each in ``(0, 1)``; ``None``: ``np.linspace(0.05, 0.99, 20)``.
    ax : matplotlib.axes.Axes, default=None
        Where to draw; default: a new figure.

    Returns
    -------
    ax : matplotlib.axes.Axes
        Two lines: the diagonal and the empirical coverage; a legend.

    Raises
    ------
    ValueError
        Shapes that differ, non-finite values (other than rows without a prediction), negative
        ``std``, no row with a prediction, or levels outside ``(0, 1)``.
    ImportError
        Without matplotlib.

    Examples
    --------
    >>> import numpy as np
    >>> from matplotlib.figure import Figure
    >>> from skfilter.plotting import plot_coverage
    >>> rng = np.random.default_rng(0)
    >>> y = rng.normal(size=1000)
    >>> ax = plot_coverage(y, np.zeros(1000), np.ones(1000), ax=Figure().subplots())
    >>> nominal, empirical = ax.lines[1].get_data()
    >>> bool(np.max(np.abs(nominal - empirical)) < 0.05)
    True
    """
    from scipy.stats import norm

    from .metrics import interval_coverage

    _require_matplotlib()
    if levels is None:
        levels = np.linspace(0.05, 0.99, 20)
    levels = check_array(levels, ensure_2d=False, dtype=np.float64, input_name="levels")
    if levels.ndim != 1 or levels.size == 0:
        raise ValueError(f"levels must be a non-empty 1-d array, got shape {levels.shape}.")
    if np.any(levels <= 0) or np.any(levels >= 1):
        raise ValueError("levels must lie strictly between 0 and 1.")
    levels = np.sort(levels)
    # rows without a prediction (nan mean or std: a prequential pass's row 0 under a data-scaled
    # prior, a pipeline's rows before it had learned anything) are left out, as in plot_prequential
    y_true, mean, std = _rows_with_a_prediction(y_true, mean, std)
    z = norm.ppf(0.5 + 0.5 * levels)
    empirical = np.array([interval_coverage(y_true, mean, std, n_std=float(zi)) for zi in z])

    ax = _get_axes(ax)
    ax.plot([0, 1], [0, 1], linestyle="--", color="gray", label="calibrated")
    ax.plot(levels, empirical, marker="o", markersize=3, label="empirical")
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_xlabel("nominal coverage of the central interval")
    ax.set_ylabel("empirical coverage")
    ax.legend(loc="upper left")
    return ax


_HISTORY_LABELS = {"cumulative_reward": "cumulative reward", "regret": "cumulative regret",
                   "best_y": "best value found"}


@validate_params({"history": [dict, "array-like", HasMethods(["keys"])],
                  "key": [StrOptions(set(_HISTORY_LABELS)), None],
                  "x": [StrOptions({"step", "time"})]}, prefer_skip_nested_validation=True)
def plot_cumulative_reward(history, *, key=None, x="step", label=None, ax=None):
    """Cumulative reward (or regret) of a bandit agent, or the best value found by an optimiser.

    Draws one line from the ``history_`` of :class:`skfilter.decision.ContextualBandit` (``key``
    ``'cumulative_reward'`` or ``'regret'``) or :class:`skfilter.decision.BayesianOptimizer`
    (``'best_y'``) against the step or the agent's cumulative time. Call it once per agent on the
    same ``ax`` to compare agents.

    Parameters
    ----------
    history : dict or pandas.DataFrame
        A ``history_``: columns ``'step'``, ``'time'`` and ``key``.
    key : {'cumulative_reward', 'regret', 'best_y'}, default=None
        The column drawn; ``None``: ``'cumulative_reward'`` if present, else ``'best_y'``.
    x : {'step', 'time'}, default='step'
        The horizontal axis.
    label : str, default=None
        Legend entry of the line.
    ax : matplotlib.axes.Axes, default=None
        Where to draw; default: a new figure.

    Returns
    -------
    ax : matplotlib.axes.Axes

    Raises
    ------
    ValueError
        A history without the columns, of different lengths, or with non-finite values (a regret
        of NaN: the agent was not given the best reward).
    ImportError
        Without matplotlib.

    Examples
    --------
    >>> import numpy as np
    >>> from matplotlib.figure import Figure
    >>> from skfilter.plotting import plot_cumulative_reward
    >>> history = {"step": np.arange(1, 4), "time": [0.1, 0.2, 0.3], "cumulative_reward": [1, 1, 2]}
    >>> ax = plot_cumulative_reward(history, label="agent", ax=Figure().subplots())
    >>> ax.lines[0].get_ydata().tolist()
    [1.0, 1.0, 2.0]
    """
    _require_matplotlib()
    if key is None:
        key = "cumulative_reward" if "cumulative_reward" in history else "best_y"
    for name in (x, key):
        if name not in history:
            raise ValueError(f"history has no {name!r} column.")
    xs = check_array(np.asarray(history[x]), ensure_2d=False, dtype=np.float64, input_name=x)
    ys = check_array(np.asarray(history[key]), ensure_2d=False, dtype=np.float64, input_name=key)
    if xs.ndim != 1 or xs.shape != ys.shape:
        raise ValueError(f"history[{x!r}] and history[{key!r}] must be 1-d of the same length.")
    ax = _get_axes(ax)
    ax.plot(xs, ys, label=label)
    ax.set_xlabel("step" if x == "step" else "agent time (s)")
    ax.set_ylabel(_HISTORY_LABELS[key])
    if label is not None:
        ax.legend(loc="best")
    return ax
