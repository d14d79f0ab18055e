"""WoLF: outlier-robust filtering by weighted observation likelihoods, over any skfilter filter.

:class:`WoLFRegressor` and :class:`WoLFClassifier` are meta-estimators. They fit a clone of a base
filter estimator (``EKFRegressor`` with any covariance, ``LoFiRegressor``, …) with a weighting
function installed in the engine's weighting stage (:mod:`skfilter.weighting`): at every row the
weight ``W ∈ [0, 1]`` is computed from the prior-predictive residual and the update uses
``R / W²`` instead of ``R`` (thesis §4.1–§4.3, Prop. 4.1, Alg. 11 in
its safe covariance form). There is no inner loop: the cost is the base filter's plus one scalar
per row. ``threshold → ∞`` gives the base filter exactly (unless ``robust_noise=True`` swapped the
base's ``'auto'`` noise estimate for ``'robust'``).

The weight applies to *learning*; the predictive a fitted WoLF estimator reports is the base
filter's plain one (``H Σ Hᵀ + R``). The online observation-noise estimate of the base regressor
(``obs_variance='auto'``) counts every row with its weight ``W²``, so an outlier neither moves the
mean nor holds the noise estimate up.

Robustness (thesis §4.5–4.6, Theorems 4.4–4.5; single-step statements about the linearised model):
the plain filter's posterior influence function grows quadratically in the size of a contaminated
target; with a weight satisfying ``sup W < ∞`` and ``sup W² ‖e‖ < ∞`` (IMQ, Mahalanobis-IMQ, TMD,
Huber) it is bounded.
"""

from __future__ import annotations

import operator
from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions

from ._meta import (RANDOM_STATE_DOC, FilterMetaEstimator, PredictingClassifierMixin, PredictingRegressorMixin,
                    is_filter)
from ._utils import check_fitted, is_frozen, memo_for
from ._validation import ValidatedParamsMixin, check_parameter_constraints, params_version
from .exceptions import FilterStepError
from .priors import target_scale
from .weighting import WEIGHTINGS, WeightingFunction, make_weighting

#: ``threshold='auto'`` per weighting: IMQ (regression) in units of the robust standard deviation
#: of the first rows' targets (:func:`skfilter.priors.target_scale`), the Mahalanobis weights in noise
#: (or predictive) standard deviations — four of them, "four standard deviations of tolerance" as
#: in the thesis' §4.7.4 — and TMD as a squared distance (4²). Measured on a 1-D MLP stream with
#: 2–30 % uniform outliers (tests/test_wolf.py): IMQ at 4 target deviations let outliers through
#: (errors 0.2–0.4 against 0.05 at one deviation).
AUTO_THRESHOLDS = {"imq": 1.0, "md": 4.0, "tmd": 16.0, "huber": 4.0, "predictive-md": 4.0}

#: the classifier's ``'predictive-md'`` threshold: two predictive standard deviations. On linearly
#: separable 2-D streams with flipped labels (``python -m skfilter.benchmarks wolf-labels``, 5 seeds,
#: doc/wolf_labels_table.md) ``c = 2`` raised held-out accuracy from 0.970 to 0.982 (EKF) and from
#: 0.959 to 0.974 (LoFi) under 30 % random flips, and from 0.962 to 0.986 / 0.956 to 0.985 when 40 % of
#: the labels far from the boundary were flipped; ``c = 4`` helped less or not at all. Class-conditional
#: flips (40 % of one class) move the noisy data's boundary itself, which no per-row weight can
#: undo: there the weights cost 2–3 points.
#: For ``K`` classes the threshold is ``2 √(K − 1)``: on digits (10 classes) ``c = 2`` cost 4 points
#: of accuracy (0.925 against LoFi's 0.961, defaults benchmark), ``c = 6`` none.
AUTO_CLASSIFIER_THRESHOLD = 2.0


class _WoLFMeta(ValidatedParamsMixin, FilterMetaEstimator):
    """Shared machinery of the WoLF meta-estimators (module docstring)."""

    #: scikit-learn's constraints of the parameters both WoLF estimators have
    _parameter_constraints: dict = {
        "estimator": [None, HasMethods(["fit", "partial_fit"])],
        "weighting": [StrOptions(set(WEIGHTINGS)), WeightingFunction, callable],
        "threshold": [StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")],
        "warm_start": ["boolean"],
        "verbose": ["verbose"],
        "random_state": ["random_state"],
    }
    #: the base estimator's own parameters are checked by its ``fit``; here only its methods
    _type_checked_params = ("estimator",)

    def _resolve_params(self) -> dict:
        check_parameter_constraints(self)
        return {"warm_start": bool(self.warm_start)}

    def _new_base(self):
        """A clone of the base filter. With ``robust_noise``, a regressor whose noise estimate is
        ``'auto'`` gets the outlier-robust one (``obs_variance='robust'``): the weights bound each
        outlier's influence on the mean, the robust estimate the influence on the noise level (under
        ``'auto'`` a discounted outlier still adds ``ε W² e²``, which for Huber weights grows without
        bound)."""
        base = super()._new_base()
        if not is_filter(base):
            raise TypeError(f"The base estimator of {type(self).__name__} must be a filter (EKF, LoFi, …), "
                            f"not the wrapper {type(base).__name__}.")
        if self._kind == "regressor" and self.robust_noise:
            noise = base.get_params().get("obs_variance")
            if isinstance(noise, str) and noise == "auto":
                base.set_params(obs_variance="robust")
        return base

    def _target_scale(self, y, sample_weight, classes=None):
        """The unit of the ``'auto'`` threshold, from the stream's first rows: for regression the
        root-mean-square robust standard deviation of the targets; for classification
        ``√(K − 1)`` with ``K`` the classes (``classes``, else those in ``y``) — the expected
        ``eᵀ S⁺ e`` of a one-hot residual grows with the ``K − 1`` dimensions of the simplex. 1.0
        where ``y`` cannot be read (the base estimator's validation then raises)."""
        if self._kind != "regressor":
            try:
                n_classes = len(np.unique(np.asarray(classes if classes is not None else y)))
            except (TypeError, ValueError):
                return 1.0
            return float(np.sqrt(max(n_classes - 1, 1)))
        try:
            Y = np.asarray(y)
            if Y.dtype.kind not in "biuf":  # complex, object, strings: the base's validation raises
                return 1.0
            Y = Y.astype(np.float64).reshape(Y.shape[0], -1)
            w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
            with np.errstate(all="ignore"):
                _, scale = target_scale(Y, w)
            value = float(np.sqrt(np.mean(scale ** 2)))
        except (TypeError, ValueError, IndexError):
            return 1.0
        return value if np.isfinite(value) and value > 0 else 1.0

    def _start_targets(self, base, y, sample_weight, first):
        """The targets (and weights) the ``'auto'`` threshold is scaled to: those of the rows that fix
        the base filter's prior (:mod:`skfilter.stream_start`) — its first ``n_prior_rows`` rows,
        the kept ones and this call's — or this call's when its prior uses no data."""
        limit = base._start_rows() if self._kind == "regressor" else None
        if limit is None:
            return y, sample_weight
        try:
            Y = np.asarray(y)
            if Y.dtype.kind == "c":  # complex targets: the base's validation raises (no ComplexWarning first)
                return y, sample_weight
            Y = Y.astype(np.float64).reshape(Y.shape[0], -1)
            w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).reshape(-1)
            if not first:
                kept = base._stream_start.rows()
                Y = np.concatenate([kept[1], Y])
                if w is not None or kept[2] is not None:
                    w_new = np.ones(Y.shape[0] - kept[1].shape[0]) if w is None else w
                    w = np.concatenate([np.ones(kept[1].shape[0]) if kept[2] is None else kept[2], w_new])
        except (TypeError, ValueError, IndexError):  # the base's validation says what is wrong
            return y, sample_weight
        return Y[:limit], None if w is None else w[:limit]

    def _weighting_function(self, target_scale):
        """The weighting function of the current parameters: a callable or
        :class:`~skfilter.weighting.WeightingFunction` as given; a name with ``threshold``, or for
        ``'auto'`` the value of :data:`AUTO_THRESHOLDS` (``'imq'`` regression: times the first
        call's target standard deviation ``target_scale``)."""
        if not isinstance(self.weighting, str):
            return make_weighting(self.weighting)
        threshold = self.threshold
        if isinstance(threshold, str):  # 'auto' (the constraint pass rejected anything else)
            threshold = AUTO_THRESHOLDS[self.weighting]
            if self.weighting == "imq" and self._kind == "regressor":
                threshold *= target_scale
            if self.weighting == "predictive-md" and self._kind == "classifier":
                threshold = AUTO_CLASSIFIER_THRESHOLD * target_scale
        return make_weighting(self.weighting, threshold)

    def _weighting_for(self, target_scale):
        """:meth:`_weighting_function`, the installed ``weighting_`` itself again while ``weighting``
        and ``threshold`` are the same objects, both values that cannot change in place (a name and
        a number), and the target scale is the same (a streaming loop asks at every call)."""
        key = (self.weighting, self.threshold, target_scale)
        memo = memo_for(self)
        known = memo.get("weighting")
        current = getattr(self, "weighting_", None)
        if known is not None and current is not None and known[1] is current \
                and all(map(operator.is_, known[0], key)):
            return current
        weighting = self._weighting_function(target_scale)
        if all(map(is_frozen, key)):
            memo["weighting"] = (key, weighting)
        return weighting

    def _prepare(self, first, y, sample_weight, classes=None):
        """``(base, scale, weighting, previous)``: the filter for this call (a new clone when
        ``first``) with the weighting of the current parameters installed, and the weighting it had."""
        self._check_params()
        if first:
            base = self._new_base()
            scale = self._target_scale(*self._start_targets(base, y, sample_weight, first), classes)
        else:
            check_fitted(self, "estimator_", named=True)
            self._check_structure_unchanged()
            base, scale = self.estimator_, self.target_scale_
            if self._kind == "regressor" and base._prior_pending:  # the stream's first rows are still arriving
                scale = self._target_scale(*self._start_targets(base, y, sample_weight, first))
        weighting = self._weighting_for(scale)
        previous = getattr(self, "weighting_", None)
        base._set_weighting(weighting)
        base._set_progress(self.verbose, type(self).__name__)
        return base, scale, weighting, previous

    def _filter_for(self, first, y, sample_weight):
        base, scale, weighting, _ = self._prepare(first, y, sample_weight)
        self._install(base, scale, weighting)
        return base

    def _run(self, call, X, y, sample_weight, first, **kwargs):
        """Fit (``first``: a new clone from the prior) or continue with the weighting installed.

        A call that fails validation leaves this estimator as it was (a new clone is installed only
        once it learned, or failed inside a step, where the rows learned are kept)."""
        base = None if first else self._prepared()
        if base is not None:  # nothing _prepare checks or installs has changed: the filter as it is
            return getattr(base, call)(X, y, sample_weight=sample_weight, **kwargs)
        base, scale, weighting, previous = self._prepare(first, y, sample_weight, kwargs.get("classes"))
        try:
            out = getattr(base, call)(X, y, sample_weight=sample_weight, **kwargs)
        except FilterStepError:
            self._install(base, scale, weighting)
            raise
        except BaseException:
            if not first:
                base._set_weighting(previous)
            raise
        if not first and self.__dict__.get("estimator_") is base and self.__dict__.get("target_scale_") is scale \
                and previous is weighting and self.__dict__.get("_fitted_structure") is not None:
            self._keep_prepared()
            return out  # installed as it was, its structure checked by _prepare: nothing to record again
        self._install(base, scale, weighting)
        self._keep_prepared()
        return out

    def _keep_prepared(self):
        """Remember, after a call that prepared and installed the filter, what :meth:`_prepared`
        compares: the settings of the current parameters, the installed filter, target scale,
        weighting and recorded structure, and the :func:`~skfilter._validation.params_version` of
        the base estimator and every estimator it wraps (none kept when one cannot say)."""
        memo = memo_for(self)
        memo.pop("prepared", None)
        d = self.__dict__
        cfg = memo.get("params")
        base = d.get("estimator_")
        if cfg is None or base is None or d.get("_fitted_structure") is None:
            return
        versions, stack = [], [] if self.estimator is None else [self.estimator]
        while stack:
            est = stack.pop()
            token = params_version(est)
            if token is None:
                return
            versions.append((est, token))
            stack.extend(v for v in vars(est).values() if isinstance(v, BaseEstimator))
        memo["prepared"] = (cfg, base, d.get("target_scale_"), d.get("weighting_"), d["_fitted_structure"],
                            tuple(versions))

    def _prepared(self):
        """The installed filter when a later call needs nothing of :meth:`_prepare` — the same
        settings (no parameter set since :meth:`_keep_prepared`), the same filter, target scale,
        weighting and recorded structure, no parameter of the base estimator (deep) set, and (a
        regressor) a stream whose first rows are complete — else None."""
        memo = memo_for(self)
        known = memo.get("prepared")
        if known is None:
            return None
        cfg, base, scale, weighting, recorded, versions = known
        d = self.__dict__
        if memo.get("params") is not cfg or d.get("estimator_") is not base or d.get("target_scale_") is not scale \
                or d.get("weighting_") is not weighting or d.get("_fitted_structure") is not recorded \
                or base.__dict__.get("_weighting") is not weighting:
            return None
        for est, token in versions:
            if memo_for(est).get("version") is not token:
                return None
        if self._kind == "regressor" and base._prior_pending:
            return None
        return base

    def _learn_rows(self, X, y, sample_weight=None, *, first, classes=None, record=False):
        kwargs = {} if classes is None else {"classes": classes}
        return self._run("_fit", X, y, sample_weight, first=first, reset=first, n_epochs=1, record=record,
                         loss=record, **kwargs)

    def _after_prequential(self, rec, y):
        if self._start_rows() is not None:
            inner = self._inner
            inner.n_iter_, inner.loss_curve_ = 1, [inner._record_loss(rec, y)]

    def _install(self, base, scale, weighting):
        self.estimator_ = base
        self.target_scale_ = scale
        self.weighting_ = weighting
        self._record_structure()

    # -- the conventions of the base estimators ------------------------------------------------
    @property
    def n_iter_(self):
        """Passes over the data made on the current stream (the base filter's ``n_iter_``)."""
        check_fitted(self, "estimator_", named=True)
        return self.estimator_.n_iter_

    @property
    def loss_curve_(self):
        """The mean prequential loss of every pass (the base filter's ``loss_curve_``: scored for a
        multi-pass ``fit`` and ``prequential_fit_predict``, NaN for the other passes)."""
        check_fitted(self, "estimator_", named=True)
        return self.estimator_.loss_curve_

    # -- fitting ------------------------------------------------------------------------------
    def fit(self, X, y, sample_weight=None):
        """Fit a clone of the base estimator from its prior with the robust weighting (with
        ``warm_start=True`` and a fitted estimator: continue the fitted clone's belief with the
        base's ``n_epochs`` passes).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs, one row per time step.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None
            Multiplies the robust weight ``W²`` of each row.

        Returns
        -------
        self : object
        """
        warm = self._check_params()["warm_start"] and hasattr(self, "estimator_")
        self._run("_fit_passes", X, y, sample_weight, first=not warm, reset=not warm)
        return self


_WEIGHTING_DOC = """weighting : {'imq', 'md', 'tmd', 'huber', 'predictive-md'}, WeightingFunction or callable, \
default=DEFAULT
        The weighting function ``W`` (:mod:`skfilter.weighting`): ``'imq'`` (thesis eq. 4.5),
        ``'md'`` Mahalanobis-IMQ under ``R`` (4.6), ``'tmd'`` thresholded squared Mahalanobis distance
        (4.7, the thesis' convention ``eᵀ R⁻¹ e ≤ c``), ``'huber'`` (an extension), ``'predictive-md'``
        IMQ of the Mahalanobis distance under the prior predictive ``S``; or a callable
        ``fn(residual, S) → W ∈ [0, 1]`` (``residual (1, n, C)``, ``S (1, n, C, C)``, ``W (1, n)``).
    threshold : 'auto' or float, default='auto'
        The ``c > 0`` of the weighting (``∞``-like values recover the base filter). ``'auto'``
        (:data:`skfilter.wolf.AUTO_THRESHOLDS`): for ``'imq'`` IMQ_AUTO; for ``'md'`` and
        ``'huber'`` four standard deviations of the distance (``c = 4``); for ``'predictive-md'``
        PMD_AUTO; for ``'tmd'`` ``c = 16`` (the squared distance). Ignored for a callable."""


class WoLFRegressor(RegressorMixin, PredictingRegressorMixin, _WoLFMeta):
    """Outlier-robust regression: a skfilter regressor learning with WoLF's weighted likelihood.

    Parameters
    ----------
    estimator : skfilter regressor, default=None
        The base filter (``EKFRegressor`` with any covariance, ``LoFiRegressor``, …), cloned by
        :meth:`fit`. ``None``: ``LoFiRegressor()`` with its defaults (data-scaled prior, online
        noise estimate), which runs at a cost linear in the number of weights.
    {weighting_doc}
    robust_noise : bool, default=False
        Run a base whose ``obs_variance`` is ``'auto'`` with ``'robust'``, the outlier-robust online
        noise estimate (WoLF-EWMA on the variance level). Under ``'auto'`` every row counts in the
        noise estimate with its weight ``W²`` and a bounded residual, which served the default IMQ
        weighting best; the robust estimate helped the Mahalanobis weights (which measure residuals
        in noise units) under heavy contamination: 30 % uniform outliers on a 1-D MLP stream, RMSE
        0.06 against 0.28–0.40 for ``'md'``, while costing IMQ and Huber (0.07–0.11 against
        0.05–0.07; tests/test_wolf.py). With ``False`` and a very large ``threshold`` WoLF is the
        base filter exactly. Other ``obs_variance`` values are left as they are.
    {conventions_doc}

    Attributes
    ----------
    estimator_ : regressor
        The fitted clone (its belief, noise estimate and predictive).
    weighting_ : skfilter.weighting.WeightingFunction
        The installed weighting function (its ``threshold`` the one in use).
    target_scale_ : float
        Standard deviation of the stream's first targets (the unit of ``'imq'``'s ``'auto'`` threshold).
    n_features_in_ : int
    posterior_ : skfilter.posteriors.Posterior
    n_samples_seen_ : int
    n_iter_ : int
    loss_curve_ : list of float

    See Also
    --------
    WoLFClassifier : the same for classifiers.
    skfilter.weighting : the weighting functions.

    Notes
    -----
    Duran-Martin et al., "Outlier-robust Kalman filtering through generalised Bayes" (ICML 2024), in
    the version of G. Duran-Martin's PhD thesis, §4.1–§4.4 (see the references page).
    ``predict(X, return_std=True)`` reports the base filter's plain predictive: the weights change
    what is learned, not what is predicted.

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import EKFRegressor, WoLFRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-2, 2, size=(300, 1)); y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=300)
    >>> y[::50] = 1e6  # six gross outliers
    >>> base = EKFRegressor(hidden_layer_sizes=(20,), random_state=0)
    >>> robust = WoLFRegressor(base).fit(X, y)
    >>> bool(np.abs(robust.predict([[0.5]]) - np.sin(1.0)).max() < 0.3)
    True
    """

    _kind = "regressor"
    _structural_params = (*_WoLFMeta._structural_params, "robust_noise")  # it set the clone's obs_variance

    def __init__(self, estimator=None, *, weighting="imq", threshold="auto", robust_noise=False, warm_start=False,
                 verbose=0, random_state=None):
        self.estimator = estimator
        self.weighting = weighting
        self.threshold = threshold
        self.robust_noise = robust_noise
        self.warm_start = warm_start
        self.verbose = verbose
        self.random_state = random_state

    _parameter_constraints = {**_WoLFMeta._parameter_constraints, "robust_noise": ["boolean"]}

    def _default_estimator(self):
        from .lofi import LoFiRegressor

        return LoFiRegressor()

    def partial_fit(self, X, y, sample_weight=None):
        """Continue learning from ``(X, y)`` (one pass, in row order) with the robust weighting.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : object
        """
        self._run("partial_fit", X, y, sample_weight, first=not hasattr(self, "estimator_"))
        return self


    @property
    def obs_variance_(self):
        """The base regressor's observation-noise variance per output."""
        return self.estimator_.obs_variance_


class WoLFClassifier(ClassifierMixin, PredictingClassifierMixin, _WoLFMeta):
    """Label-noise-robust classification: a skfilter classifier learning with a WoLF weight.

    The thesis defines WoLF for regression only. Here the weight of a row is the IMQ of the
    Mahalanobis distance of its one-hot residual ``e = y − p`` under the prior predictive
    covariance of the class probabilities, ``S = R J Σ⁻ Jᵀ R + R`` with ``R = diag(p) − p pᵀ``
    (``'predictive-md'``; pseudo-inverse, as ``1ᵀ S = 0``): ``W² = c² / (c² + eᵀ S⁺ e)``.

    Why its influence is bounded: a one-hot residual is bounded, but the plain update moves the mean
    by ``Σ Hᵀ S⁻¹ e``, whose size grows like ``1/√p_y`` as the probability ``p_y`` the filter gave
    the observed label goes to 0 — a confidently contradicted (e.g. flipped) label throws the belief
    far, and a few such rows can make a classifier diverge. ``eᵀ S⁺ e ≳ 1/p_y`` grows as fast, so
    the weighted shift ``W² Σ Hᵀ S⁻¹ e`` is bounded by ``c²/√(eᵀ S⁺ e)`` times a constant and
    vanishes for arbitrarily surprising labels (Theorem 4.5's condition, in the whitened distance).
    Rows the filter predicts well (``eᵀ S⁺ e ≪ c²``) keep ``W ≈ 1``.

    Parameters
    ----------
    estimator : skfilter classifier, default=None
        The base filter, cloned by :meth:`fit`. ``None``: ``LoFiClassifier()``.
    {weighting_doc}
    {conventions_doc}

    Attributes
    ----------
    estimator_ : classifier
        The fitted clone.
    classes_ : ndarray of shape (n_classes,)
    weighting_ : skfilter.weighting.WeightingFunction
        The installed weighting function (its ``threshold`` the one in use).
    target_scale_ : float
        ``√(K − 1)`` for ``K`` classes: the unit of the ``'auto'`` threshold.
    n_features_in_ : int
    posterior_ : skfilter.posteriors.Posterior
    n_samples_seen_ : int
    n_iter_ : int
    loss_curve_ : list of float

    See Also
    --------
    WoLFRegressor : the thesis' WoLF for regression.

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import EKFClassifier, WoLFClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 2)); y = (X[:, 0] + X[:, 1] > 0).astype(int)
    >>> y_noisy = np.where(rng.uniform(size=400) < 0.2, 1 - y, y)  # 20 % flipped labels
    >>> clf = WoLFClassifier(EKFClassifier(hidden_layer_sizes=(), random_state=0)).fit(X, y_noisy)
    >>> bool((clf.predict(X) == y).mean() > 0.9)
    True
    """

    _kind = "classifier"

    def __init__(self, estimator=None, *, weighting="predictive-md", threshold="auto", warm_start=False, verbose=0,
                 random_state=None):
        self.estimator = estimator
        self.weighting = weighting
        self.threshold = threshold
        self.warm_start = warm_start
        self.verbose = verbose
        self.random_state = random_state

    def _default_estimator(self):
        from .lofi import LoFiClassifier

        return LoFiClassifier()

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """Continue learning from ``(X, y)`` with the robust weighting.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        classes : array-like of shape (n_classes,), default=None
            All the classes of the stream; required on the first call.
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : object
        """
        self._run("partial_fit", X, y, sample_weight, first=not hasattr(self, "estimator_"), classes=classes)
        return self



_CONVENTIONS_DOC = """warm_start : bool, default=False
        When True, ``fit`` on a fitted estimator continues the fitted clone's belief (the base's
        ``n_epochs`` passes; ``n_iter_`` and ``loss_curve_`` go on counting); when False, every
        ``fit`` starts a new clone from the prior.
    verbose : int, default=0
        Show a progress bar (rows per second) while fitting when > 0.
    """ + RANDOM_STATE_DOC.replace("BASE", "``estimator``")

for _cls in (WoLFRegressor, WoLFClassifier):
    _cls.__doc__ = _cls.__doc__.replace("{conventions_doc}", _CONVENTIONS_DOC)

WoLFRegressor.__doc__ = WoLFRegressor.__doc__.replace(
    "{weighting_doc}", _WEIGHTING_DOC.replace("DEFAULT", "'imq'").replace(
        "IMQ_AUTO", "the robust standard deviation ``s_y`` of the stream's first targets (``c = s_y``)").replace(
        "PMD_AUTO", "``c = 4``"))
WoLFClassifier.__doc__ = WoLFClassifier.__doc__.replace(
    "{weighting_doc}", _WEIGHTING_DOC.replace("DEFAULT", "'predictive-md'").replace("IMQ_AUTO", "``c = 1``").replace(
        "PMD_AUTO", "``c = 2 √(K − 1)`` for ``K`` classes (:data:`skfilter.wolf.AUTO_CLASSIFIER_THRESHOLD`)"))
