"""Adaptive filtering for non-stationary streams: BOCD and the BONE run-length family over any filter.

:class:`BOCDRegressor` and :class:`BOCDClassifier` are meta-estimators. They fit a clone of a base
filter (``EKFRegressor`` with any covariance, ``LoFiRegressor``, a ``WoLFRegressor`` wrapping either,
…) as a **run-length mixture** (:mod:`skfilter.runlength`; BONE, thesis Ch. 3, §3.3): ``K``
beliefs, one per hypothesis about how long the current regime has lasted, updated in one batched
step and weighed by their posterior probability. Predictions are the mixture's:
``predict(X, return_std=True)`` returns its mean and total standard deviation, ``predict_proba`` its
class probabilities, ``sample_y`` and ``sample_proba`` draw a hypothesis by its weight and then from it
(per sample for ``method='thompson'``, per row and sample for ``method='predictive'``). As in the
thesis, the prediction for the next rows mixes the hypotheses kept after the last step (the
possibility of a changepoint at the next step itself is not mixed in).

Reset rules (``reset``):

* ``'prior'`` — RL[K]-PR: Bayesian online changepoint detection keeping the ``n_hypotheses`` most
  probable run lengths (``None``: all, exact BOCD; ``1``: the greedy RL[1]-PR);
* ``'moment-matched'`` — RL[K]-MMPR: a new regime starts from the Gaussian moment-matched to the
  mixture (dependence across regimes; full, diagonal and factored structures). With a model that does not
  depend on the run length — every skfilter model: the thesis' E3.5 re-centres its features at the
  segment start — all hypotheses then hold the same belief (the matched restart of identical beliefs
  is that belief), so the mixture predicts as the base filter and its run-length posterior reflects
  the hazard only (``python -m skfilter.benchmarks bocd-segments``);
* ``'ou'`` — RL[1]-OUPR*: one hypothesis, shrunk towards the prior by the probability that the regime
  continues, or reset when that probability is at most ``threshold`` (the thesis' best method on its
  drifting-classification and forecasting benchmarks);
* ``'cpp-ou'`` — the gradual baseline CPP-OU (an OU shrink at every step with the rate that best
  predicts the step's rows). The other gradual baseline, C-ACI, is the base filter itself with
  ``process_noise`` (no wrapper).

Conventions: a changepoint hypothesis starts from the prior itself and learns the rows of the step
that opens it (the thesis' convention; exact BOCD), with the noise estimate of the most probable
hypothesis. ``fit`` makes one pass whatever the base's ``n_epochs`` (a run length is a time). The
base's own dynamics (``process_noise``, ``decay``) move the continuing hypotheses before each step.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._meta import (RANDOM_STATE_DOC, FilterMetaEstimator, PredictingClassifierMixin, PredictingRegressorMixin,
                    is_filter)
from ._utils import check_fitted, memo_for, pass_progress, progress_bar, to_numpy
from ._validation import ValidatedParamsMixin, check_parameter_constraints, raise_invalid_parameter
from ._validation import restore_attributes
from .exceptions import FilterStepError
from .filtering import FilterState
from .runlength import RESETS, RunLengthState, initial_state, run_runlength


class _BOCDMeta(ValidatedParamsMixin, FilterMetaEstimator):
    """Shared machinery of the run-length meta-estimators (module docstring)."""

    #: the wrappers' predictions need the run-length state
    _fitted_attribute = "runlength_state_"

    def __init__(self, estimator=None, *, hazard=0.01, n_hypotheses=10, reset="prior", threshold=0.5,
                 evidence="weighted", warm_start=False, verbose=0, random_state=None):
        self.estimator = estimator
        self.hazard = hazard
        self.n_hypotheses = n_hypotheses
        self.reset = reset
        self.threshold = threshold
        self.evidence = evidence
        self.warm_start = warm_start
        self.verbose = verbose
        self.random_state = random_state

    def fit(self, X, y, sample_weight=None):
        """Learn the stream ``(X, y)`` from the prior, in row order, as a run-length mixture (with
        ``warm_start=True`` and a fitted estimator: continue the fitted mixture, as ``partial_fit``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets (class labels for a classifier).
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : object
        """
        self._check_params()  # warm_start is validated before it is read
        warm = bool(self.warm_start) and hasattr(self, "runlength_state_")
        self._run(X, y, sample_weight, first=not warm)
        return self


    # -- parameters ---------------------------------------------------------------------------
    #: scikit-learn's constraints of the parameters
    _parameter_constraints: dict = {
        "estimator": [None, HasMethods(["fit", "partial_fit"])],
        "hazard": [Interval(Real, 0, 1, closed="both")],
        "n_hypotheses": [None, Interval(Integral, 1, None, closed="left")],
        "reset": [StrOptions(set(RESETS))],
        "threshold": [Interval(Real, 0, 1, closed="both")],
        "evidence": [StrOptions({"weighted", "plain"})],
        "warm_start": ["boolean"],
        "verbose": ["verbose"],
        "random_state": ["random_state"],
    }
    #: the base estimator's own parameters are checked by its ``fit``; here only its methods
    _type_checked_params = ("estimator",)

    def _resolve_params(self):
        """The run-length step's options (:func:`skfilter.runlength.run_runlength`) after the
        constraint pass, and the check that ``'ou'``/``'cpp-ou'`` keep one hypothesis."""
        check_parameter_constraints(self)
        k = self.n_hypotheses
        if self.reset in ("ou", "cpp-ou") and k != 1:
            raise_invalid_parameter(self, "n_hypotheses",
                                    f"1 with reset={self.reset!r}, which keeps one hypothesis (set n_hypotheses=1)", k)
        return {"hazard": float(self.hazard), "n_hypotheses": None if k is None else int(k), "reset": self.reset,
                "threshold": float(self.threshold), "weighted_evidence": self.evidence == "weighted"}

    def _filter_for(self, first, y, sample_weight):
        if first:
            base = self._new_base()
            inner = base._filter_for(True, y, sample_weight) if isinstance(base, FilterMetaEstimator) else base
        else:
            check_fitted(self, "estimator_", named=True)
            self._check_structure_unchanged()
            base = self.estimator_
            inner = base._filter_for(False, y, sample_weight) if isinstance(base, FilterMetaEstimator) else base
        if not is_filter(inner):
            raise TypeError(f"{type(self).__name__} needs a filter estimator inside its estimator.")
        return base, inner

    # -- the loop -----------------------------------------------------------------------------
    def _run(self, X, y, sample_weight, first, classes=None, prequential=False):
        """Learn ``(X, y)`` as the run-length mixture; with ``prequential``, returns the mixture's
        one-step-ahead summaries of the rows (:meth:`_one_step_recorder`)."""
        options = self._check_params()
        # the stream's first rows are still arriving: this call learns them all again from a prior
        # set on all rows so far (skfilter.stream_start); if it fails, every estimator is as it was
        before = None if first else self._snapshot_chain()
        base, inner = self._filter_for(first, y, sample_weight)
        record = self._one_step_recorder(inner) if prequential else None
        kwargs = {} if classes is None else {"classes": classes}
        X, Y, w, cfg = inner._begin(X, y, sample_weight, reset=first, **kwargs)
        restart = inner.__dict__.pop("_restart", None)
        if restart is not None:
            try:
                return self._run_restart(base, inner, restart, X.shape[0], cfg, options, record)
            except BaseException:
                for est, state in before:
                    restore_attributes(est, state)
                raise
        if first:
            prior = inner.filter_state_  # the prior belief and initial noise state
            state = initial_state(prior)
            prior_noise = prior.noise
        else:
            state = self.runlength_state_
            prior_noise = self._prior_noise
            if prior_noise is not None:
                prior_noise = {k: v.to(device=cfg["device"], dtype=cfg["dtype"]) for k, v in prior_noise.items()}
            # moved with the estimator if the device changed
            state = state._replace(filter=inner.filter_state_, run_lengths=state.run_lengths.to(cfg["device"]))
        parts = inner._engine_parts()
        prior = FilterState(self._prior_belief(parts), prior_noise, 0)
        Xt, Yt = inner._tensor(X), inner._tensor(inner._target_matrix(Y))
        wt = None if w is None else inner._tensor(w)
        bar = progress_bar(self.verbose, Xt.shape[0], type(self).__name__)
        try:
            state, out = run_runlength(parts, state, prior, Xt, Yt, wt, cfg["batch_size"], record,
                                       pass_progress(bar), **options)
        except BaseException as exc:
            good = getattr(exc, "last_good_state", None)
            if good is not None and isinstance(exc, FilterStepError):
                self._install(base, inner, good, prior_noise)
            elif not first and good is not None:
                self._install(base, inner, good, prior_noise)
            raise
        finally:
            if bar is not None:
                bar.close()
        self._install(base, inner, state, prior_noise)
        # one pass (a run length is a time); scored when the one-step-ahead predictions were made
        if first or "n_iter_" not in self.__dict__:
            self.n_iter_, self.loss_curve_ = 0, []
        self.n_iter_ += 1
        self.loss_curve_.append(float("nan") if out is None else inner._prequential_loss(out, Yt))
        return out

    def _snapshot_chain(self):
        """``[(estimator, copy of its instance dictionary)]`` of this wrapper and the fitted
        estimators inside it, if the innermost filter's stream start is still open (else None)."""
        chain, est = [self], self.__dict__.get("estimator_")
        while est is not None:
            chain.append(est)
            est = est.__dict__.get("estimator_")
        if not getattr(chain[-1], "_prior_pending", False):
            return None
        return [(e, dict(e.__dict__)) for e in chain]

    def _run_restart(self, base, inner, restart, n_new, cfg, options, record):
        """The mixture from the prior again (which ``inner._begin`` set from all rows so far) over
        every row of the stream so far, in one pass; returns the record of the last ``n_new``."""
        prior = inner.filter_state_
        state, prior_noise = initial_state(prior), prior.noise
        parts = inner._engine_parts()
        X, Y, w = restart.rows()
        Xt, Yt = inner._tensor(X), inner._tensor(inner._target_matrix(Y))
        wt = None if w is None else inner._tensor(w)
        state, out = run_runlength(parts, state, FilterState(self._prior_belief(parts), prior_noise, 0), Xt, Yt,
                                   wt, cfg["batch_size"], record, None, **options)
        self._install(base, inner, state, prior_noise)
        self.n_iter_ = self.__dict__.get("n_iter_", 0) + 1  # one more pass (this call's rows)
        self.loss_curve_ = [*self.__dict__.get("loss_curve_", []), float("nan")]
        return None if out is None else out[-n_new:]

    def _prior_belief(self, parts):
        """The prior belief a new regime starts from, built from the reference once per structure
        and reference (a streaming loop asks at every call; beliefs are values, never modified)."""
        reference = parts.reference
        memo = memo_for(self)
        known = memo.get("prior")
        if known is not None and known[0] is parts.structure and known[1] is reference:
            return known[2]
        prior = parts.structure.prior(reference.mean, reference.variance)
        memo["prior"] = (parts.structure, reference, prior)
        return prior

    def _install(self, base, inner, state: RunLengthState, prior_noise):
        inner.filter_state_ = state.filter  # the base's predictive is the mixture's
        self.estimator_ = base
        self.runlength_state_ = state
        self._prior_noise = prior_noise
        self._record_structure()

    def _learn_rows(self, X, y, sample_weight=None, *, first, classes=None, record=False):
        return self._run(X, y, sample_weight, first=first, classes=classes, prequential=record)

    def _after_prequential(self, rec, y):
        if self._start_rows() is not None:
            self.n_iter_, self.loss_curve_ = 1, [self._inner._record_loss(rec, y)]

    # -- fitted attributes --------------------------------------------------------------------
    @property
    def run_lengths_(self):
        """Run lengths (rows) of the kept hypotheses, most probable first, ``(K,)``."""
        check_is_fitted(self, "runlength_state_")
        return to_numpy(self.runlength_state_.run_lengths).copy()

    @property
    def runlength_log_posterior_(self):
        """``log p(r_t = run_lengths_[k] | D_{1:t})`` of the kept hypotheses, ``(K,)``."""
        check_is_fitted(self, "runlength_state_")
        return to_numpy(self.runlength_state_.filter.log_weights).copy()

    @property
    def changepoint_probability_(self):
        """Posterior probability that the last step began a new regime (``p(r_t = 0 | D_{1:t})``
        before pruning; ``1 − ν`` for ``reset='ou'``)."""
        check_is_fitted(self, "runlength_state_")
        return float(self.runlength_state_.changepoint_probability)

    @property
    def map_run_length_(self):
        """The most probable run length."""
        return int(self.run_lengths_[int(np.argmax(self.runlength_log_posterior_))])

    @property
    def log_evidence_(self):
        """``log p(D_{1:t})``, the sum of the mixture's log one-step predictive densities of the rows."""
        check_is_fitted(self, "runlength_state_")
        return float(self.runlength_state_.log_evidence)

    # -- prequential --------------------------------------------------------------------------
    def _one_step_recorder(self, inner):
        """``record`` for :func:`skfilter.runlength.runlength_step`: the mixture's one-step-ahead
        summary of the rows (the base's predictive; ``'mc'`` is replaced by the linearised one)."""
        kind = inner.predictive if inner.predictive != "mc" else ("probit" if self._kind == "classifier"
                                                                  else "linearized")

        def record(f, quad, noise, weights):
            var = inner._output_variance(quad)
            per = inner._summarize(f, var, noise, kind)  # (K', B, ·)
            return inner._mix_summaries(per, weights)

        return record


_COMMON_DOC = """estimator : skfilter ESTIMATOR_KIND, default=None
        The base filter (any structure and likelihood, or a ``WoLF…`` wrapper of one), cloned by
        :meth:`fit`. ``None``: DEFAULT_BASE.
    hazard : float, default=0.01
        ``H``, the prior probability that a new regime begins at a step (constant hazard;
        ``0``: the base filter exactly).
    n_hypotheses : int or None, default=10
        ``K``, the run lengths kept (the most probable; ``None`` keeps all: exact BOCD, ``O(t)``
        beliefs at step ``t``; ``1`` the greedy RL[1]-PR). ``reset='ou'`` needs ``1``.
    reset : {'prior', 'moment-matched', 'ou', 'cpp-ou'}, default='prior'
        How a new regime starts: from the prior (RL[K]-PR, BOCD); from the Gaussian moment-matched
        to the mixture (RL[K]-MMPR; full, diagonal and factored structures, not LoFi); or RL[1]-OUPR* (OU shrink towards
        the prior by the continuation probability ``ν``, reset when ``ν ≤ threshold``). ``'cpp-ou'``
        is the thesis' gradual baseline CPP-OU (an OU shrink every step with the empirical-Bayes
        rate; no run lengths; ``hazard`` unused). ``'ou'`` and ``'cpp-ou'`` need ``n_hypotheses=1``.
    threshold : float, default=0.5
        ``ε`` of ``reset='ou'`` (0: never reset, 1: always reset).
    evidence : {'weighted', 'plain'}, default='weighted'
        Over a robust base (``WoLF…``): score the hypotheses with the weighted likelihood's
        predictive (``R / W²``), so that outliers the weights discount do not open new regimes;
        ``'plain'`` scores with ``R`` (the thesis' reading of §4.7.4). The same without weights.
    warm_start : bool, default=False
        When True, ``fit`` on a fitted estimator continues the fitted mixture (as ``partial_fit``;
        ``n_iter_`` and ``loss_curve_`` go on counting); when False, every ``fit`` starts from the prior.
    verbose : int, default=0
        Show a progress bar (rows per second) while fitting when > 0.
    """ + RANDOM_STATE_DOC.replace("BASE", "``estimator``") + """
        Every hypothesis of the mixture starts from that clone's prior: one seed, one initialisation."""

_ATTRIBUTES_DOC = """estimator_ : estimator
        The fitted clone of ``estimator``; its filter holds the mixture (its ``module_`` has the
        weights of the most probable hypothesis).
    run_lengths_ : ndarray of shape (K,)
    runlength_log_posterior_ : ndarray of shape (K,)
    changepoint_probability_ : float
    map_run_length_ : int
    log_evidence_ : float
    runlength_state_ : skfilter.runlength.RunLengthState
    n_features_in_ : int
    n_samples_seen_ : int
    n_iter_ : int
        Passes over the data made on the current stream: one per ``fit`` (counted from 0 again
        unless ``warm_start``), ``partial_fit`` or ``prequential_fit_predict`` call.
    loss_curve_ : list of float
        One entry per pass: the mean prequential loss of the mixture's one-step-ahead predictive
        (regressors: Gaussian negative log predictive density; classifiers: log loss), scored for
        ``prequential_fit_predict``; NaN for ``fit`` and ``partial_fit`` (one pass, as the base
        filters' single-pass ``fit``)."""


class BOCDRegressor(RegressorMixin, PredictingRegressorMixin, _BOCDMeta):
    """Regression on non-stationary streams: a skfilter regressor as a run-length mixture (BOCD).

    Parameters
    ----------
    COMMON

    Attributes
    ----------
    ATTRIBUTES

    See Also
    --------
    BOCDClassifier : the same for classifiers.
    skfilter.runlength : the run-length step.

    Notes
    -----
    Adams & MacKay (2007), "Bayesian online changepoint detection"; Duran-Martin et al., "A unifying
    framework for generalised Bayesian online learning in non-stationary environments" (BONE, TMLR
    2025), in the version of G. Duran-Martin's PhD thesis, Ch. 3, §3.3, Algorithms 8–10 (see the
    references page).

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import BOCDRegressor, EKFRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 1)); slope = np.where(np.arange(200) < 100, 2.0, -2.0)
    >>> y = slope * X[:, 0] + 0.1 * rng.normal(size=200)
    >>> base = EKFRegressor(hidden_layer_sizes=(), prior_variance=4.0, obs_variance=0.01, random_state=0)
    >>> reg = BOCDRegressor(base, hazard=0.01, n_hypotheses=5).fit(X, y)
    >>> 90 <= reg.map_run_length_ <= 101, bool(abs(reg.predict([[1.0]])[0] + 2.0) < 0.2)
    (True, True)
    """

    _kind = "regressor"

    def _default_estimator(self):
        from .lofi import LoFiRegressor

        return LoFiRegressor()

    def partial_fit(self, X, y, sample_weight=None):
        """Continue the stream with ``(X, y)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : object
        """
        self._run(X, y, sample_weight, first=not hasattr(self, "runlength_state_"))
        return self


class BOCDClassifier(ClassifierMixin, PredictingClassifierMixin, _BOCDMeta):
    """Classification on non-stationary streams: a skfilter classifier as a run-length mixture.

    Parameters
    ----------
    COMMON

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    ATTRIBUTES

    See Also
    --------
    BOCDRegressor : the same for regressors.

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import BOCDClassifier, EKFClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 2)); w = np.where(np.arange(400) < 200, 1.0, -1.0)
    >>> y = (w * X[:, 0] > 0).astype(int)  # the boundary flips at row 200
    >>> base = EKFClassifier(hidden_layer_sizes=(), random_state=0)
    >>> clf = BOCDClassifier(base, hazard=0.01).fit(X, y)
    >>> bool((clf.predict(X[300:]) == y[300:]).mean() > 0.9)
    True
    """

    _kind = "classifier"

    def _default_estimator(self):
        from .lofi import LoFiClassifier

        return LoFiClassifier()

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """Continue the stream with ``(X, y)``.

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
        first = not hasattr(self, "runlength_state_")
        if first and classes is None:
            raise ValueError("classes must be passed on the first call to partial_fit.")
        self._run(X, y, sample_weight, first=first, classes=classes)
        return self


for _cls, _kind, _default in ((BOCDRegressor, "regressor", "``LoFiRegressor()``"),
                              (BOCDClassifier, "classifier", "``LoFiClassifier()``")):
    _cls.__doc__ = _cls.__doc__.replace("COMMON", _COMMON_DOC.replace("ESTIMATOR_KIND", _kind).replace(
        "DEFAULT_BASE", _default)).replace("ATTRIBUTES", _ATTRIBUTES_DOC)
