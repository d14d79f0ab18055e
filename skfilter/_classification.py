"""Classification targets: Bernoulli / Categorical likelihoods and class-probability predictives."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import ClassifierMixin
from sklearn.utils._param_validation import Interval, StrOptions, validate_params

from . import kernels, stepping
from ._sampling import SAMPLING_METHODS, PredictiveSamplingMixin
from ._utils import memo_for, targets_array, to_numpy
from ._validation import ProbabilisticClassifierMixin, check_class_module_outputs, encode_class_labels
from .likelihoods import (AssumedDensityCategorical, Bernoulli, Categorical, MomentMatchedCategorical,
                          probit_probabilities, shift_free_logit_variance)

_CLASSIFICATION_PREDICTIVES = ("probit", "plugin", "mc")


#: the numpydoc entry of the filter classifiers' ``likelihood`` parameter
#: (:class:`LikelihoodParameterMixin` puts it where a docstring says ``{likelihood_doc}``)
LIKELIHOOD_PARAMETER_DOC = """likelihood : {'adf', 'categorical', 'moment-matched'}, default='adf'
        ``'adf'``: Bernoulli on one logit (two classes), categorical otherwise, with the
        assumed-density-filtering update (the moments of each row's posterior under its uncertain
        logits, :class:`~skfilter.likelihoods.AssumedDensityCategorical`; one pass of the EKF update
        leaves the probabilities under-confident); ``'categorical'``: the same likelihood with the
        EKF's exact logit-space update (the LoFi paper's); ``'moment-matched'``: the Gaussian on the
        class probabilities with covariance ``diag(m) − m mᵀ + ε I`` (Duran-Martin et al. 2025,
        App. G.1.1, eq. 117; :class:`~skfilter.likelihoods.MomentMatchedCategorical`)."""


class LikelihoodParameterMixin:
    """For classifiers with a ``likelihood`` parameter (``'adf'``, ``'categorical'`` or ``'moment-matched'``) and
    ``moment_matched_jitter``: both are fixed for a stream (changing either makes the next
    ``partial_fit`` raise); merge :attr:`FilterClassifierMixin._likelihood_parameter_constraints`
    into the estimator's constraints. Put it before :class:`FilterClassifierMixin` in the bases."""

    _target_structural_params = ("likelihood", "moment_matched_jitter")

    def __init_subclass__(cls, **kwargs):
        """Put the ``likelihood`` entry (:data:`LIKELIHOOD_PARAMETER_DOC`) where a subclass's
        docstring says ``{likelihood_doc}``."""
        super().__init_subclass__(**kwargs)
        if cls.__doc__ and "{likelihood_doc}" in cls.__doc__:
            cls.__doc__ = cls.__doc__.replace("{likelihood_doc}", LIKELIHOOD_PARAMETER_DOC)


#: the types of a label :meth:`FilterClassifierMixin._lean_targets` looks up as it is (a one-item list)
_PLAIN_LABELS = frozenset({int, float, bool, str, np.int64, np.int32, np.float64, np.bool_, np.str_})


class FilterClassifierMixin(PredictiveSamplingMixin, ProbabilisticClassifierMixin, ClassifierMixin):
    """Targets, likelihood and predictive of the filter classifiers.

    The module outputs logits: one per class (Categorical likelihood with the exact logit-space
    update, LoFi paper §3.2), or a single logit for two classes (Bernoulli). The default MLP has a
    single logit for two classes, as :class:`~sklearn.neural_network.MLPClassifier`.

    Class probabilities (``predictive`` parameter; LoFi paper §3.3, App. B.2):

    * ``'probit'`` — generalised probit approximation of ``E[softmax(f)]`` under the linearised
      ``f ~ N(h(μ, x), J Σ Jᵀ)`` (B.2, eq. 64), with the logits' variances less that of their
      common shift, which the softmax ignores (:func:`~skfilter.likelihoods.shift_free_logit_variance`);
    * ``'plugin'`` — ``softmax(h(μ, x))``;
    * ``'mc'`` — average of ``softmax(h(θ_s, x))`` over ``n_mc_samples`` draws ``θ_s ~ N(μ, Σ)``.
    """

    #: logits of prior variance about 10 under the ``'auto'`` prior (every variance ×10; doc/calibration.md,
    #: "The prior, once the update is assumed-density"): under the EKF update a wide prior made the
    #: one-step update overshoot (×3 was its best); under the assumed-density update, which tempers
    #: each step by the logits' predictive variance, ×10 lowered the held-out log-loss of every
    #: network classifier on iris, wine, breast cancer and digits at the same or higher accuracy, and
    #: the prequential log-loss of every family on the 12 raw classification streams of
    #: ``python -m skfilter.benchmarks prior-rows`` with no failure
    _auto_prior_scale = 10.0
    #: the predictive ``loss_curve_`` scores when ``predictive='mc'`` (:meth:`BaseFilter._loss_predictive`)
    _linearized_predictive = "probit"

    def _prequential_loss(self, summaries, Y) -> float:
        """The log loss of the one-step-ahead class probabilities ``summaries (n, K)`` of the
        targets ``Y`` (the likelihood's matrix: the class index ``(n, 1)`` for two classes, one-hot
        ``(n, K)`` otherwise), averaged over the rows (unweighted); probabilities are clipped at
        the dtype's ``eps`` as :func:`sklearn.metrics.log_loss` does."""
        index = Y[:, 0].long() if Y.shape[-1] == 1 else Y.argmax(-1)
        p = summaries.gather(-1, index[:, None].to(summaries.device))[:, 0]
        eps = torch.finfo(summaries.dtype).eps
        return float(-torch.log(p.clamp(eps, 1 - eps)).mean())

    #: scikit-learn's constraints of the classification parameters (merged by the concrete estimators)
    _target_parameter_constraints = {
        "predictive": [StrOptions(set(_CLASSIFICATION_PREDICTIVES))],
        "n_mc_samples": [Interval(Integral, 1, None, closed="left")],
    }

    #: the ``likelihood`` parameter's constraints, for classifiers that have one (merged by them):
    #: ``'adf'`` (Bernoulli / categorical with the assumed-density-filtering update,
    #: :class:`~skfilter.likelihoods.AssumedDensityCategorical`), ``'categorical'`` (the same
    #: likelihood with the EKF update) or the moment-matched Gaussian
    #: (:class:`~skfilter.likelihoods.MomentMatchedCategorical`) with jitter ``moment_matched_jitter``
    _likelihood_parameter_constraints = {
        "likelihood": [StrOptions({"adf", "categorical", "moment-matched"})],
        "moment_matched_jitter": [Interval(Real, 0, None, closed="neither")],
    }

    def _check_target_params(self):
        """Nothing beyond the constraint pass."""
        return {}

    def _y_validation_kwargs(self):
        return {}

    def _fast_targets_ok(self, y) -> bool:
        return y.ndim == 1 and (y.dtype.kind in "iubU" or (y.dtype.kind == "f" and bool(np.isfinite(y).all())))

    def _encode_targets(self, y, first, classes=None):
        if not first and (classes is None or self._known_classes(classes)):
            index = self._fast_label_index(y)
            if index is not None:
                return index
        out = encode_class_labels(self, y, first, classes)
        if type(classes) in (list, tuple) or (type(classes) is np.ndarray and classes.ndim == 1):  # remembered
            memo_for(self)["classes"] = (classes, classes.copy() if type(classes) is np.ndarray else list(classes),
                                         self.classes_)
        return out

    def _lean_targets(self, y, classes, bound):
        """One row's label for the lean path (:meth:`~skfilter._estimator.BaseFilter._lean_fit`):
        the target matrix of :meth:`_fast_label_index`'s class index (a known label; ``classes``
        None or those of an earlier call), else None (the full path, its errors). A list or tuple
        as ``numpy.asarray`` makes it one, as the full path's fast check does."""
        t = type(y)
        if t is np.ndarray:
            label = y[0] if y.shape == (1,) and y.dtype.kind in "iubfU" else None
        elif t is list and len(y) == 1:  # river's bridge
            label = y[0] if type(y[0]) in _PLAIN_LABELS else None
        else:
            label = None
        if label is not None and (classes is None or self._known_classes(classes)):
            rows = memo_for(self).get("label_rows")  # {label: its target row}, for these classes_
            if rows is None or rows[0] is not self.__dict__.get("classes_"):
                rows = memo_for(self)["label_rows"] = self._label_rows()
            if rows[1] is not None:
                # a label equal to a class (integral floats, bools and strings included, as
                # _fast_label_index finds them); anything else: the checks below
                row = rows[1].get(label)
                if row is not None:
                    return row
        y = targets_array(y)
        if y is None:
            return None
        if y.shape != (1,) or (classes is not None and not self._known_classes(classes)):
            return None
        index = self._fast_label_index(y)
        return None if index is None else self._target_matrix(index)

    def _label_rows(self):
        """``(classes_, {label: (1, C) target row})`` for :meth:`_lean_targets` — each class (as a
        Python scalar) with the row :meth:`_target_matrix` makes of its index (never written) —
        or ``(classes_, None)`` when ``classes_`` are not numbers or strings."""
        known = self.classes_
        if known.dtype.kind not in "iubfU":
            return known, None
        return known, {label: self._target_matrix(np.array([k])) for k, label in enumerate(known.tolist())}

    def _known_classes(self, classes) -> bool:
        """Whether ``classes`` is the list, tuple or array a previous call passed (the same object,
        with the same items), which :func:`~skfilter._validation.encode_class_labels` found equal to
        the same ``classes_`` then: river's bridge passes its ``classes`` at every ``learn_one``."""
        known = memo_for(self).get("classes")
        if known is None or known[0] is not classes or known[2] is not self.__dict__.get("classes_") \
                or len(classes) != len(known[1]):
            return False
        if type(classes) is np.ndarray:
            return classes.dtype == known[1].dtype and classes.shape == known[1].shape \
                and bool(np.array_equal(classes, known[1]))
        try:
            return all(a is b or (type(a) is type(b) and bool(a == b)) for a, b in zip(classes, known[1]))
        except (TypeError, ValueError):  # items without a plain ==: the full check
            return False

    #: at most this many labels take :meth:`_fast_label_index` (scikit-learn warns about a
    #: continuous-looking target from 21 labels on, which the full path then does)
    _FAST_LABELS = 20

    def _fast_label_index(self, y):
        """What :func:`~skfilter._validation.encode_class_labels` returns for a later call's few
        labels (an ndarray of at most :attr:`_FAST_LABELS`), when it would neither raise nor warn —
        1-d labels of a kind ``type_of_target`` calls binary or multiclass (integers, booleans,
        strings, integral finite floats) of the same kind as ``classes_``, all of them in
        ``classes_`` — checked in a few µs (scikit-learn's ``check_classification_targets`` costs
        ~0.1–0.3 ms a call); ``None`` otherwise, for the full path and its errors."""
        if type(y) is not np.ndarray or y.ndim != 1 or not 0 < y.shape[0] <= self._FAST_LABELS:
            return None
        kind, known = y.dtype.kind, self.classes_
        if kind == "f":  # sklearn: "continuous" unless every value is an integer
            if not np.isfinite(y).all() or (y != y.astype(np.int64).astype(y.dtype)).any():
                return None
        elif kind not in "iubU":
            return None
        numeric = kind != "U"
        if known.dtype.kind not in ("iubf" if numeric else "U"):
            return None
        index = np.searchsorted(known, y)
        if (index >= known.shape[0]).any() or (known[np.minimum(index, known.shape[0] - 1)] != y).any():
            return None  # an unknown label: the full path raises
        return index

    def _n_model_outputs(self):
        K = len(self.classes_)
        return 1 if K == 2 else K

    def _check_module_outputs(self, n_outputs):
        check_class_module_outputs(n_outputs, len(self.classes_))

    def _make_likelihood(self, n_outputs, cfg):
        """The ``likelihood`` parameter's: the assumed-density-filtering update (``'adf'``), Bernoulli
        (one logit) or Categorical with the EKF update (``'categorical'``, and classifiers without the
        parameter), or the moment-matched Gaussian (``'moment-matched'``)."""
        kind = getattr(self, "likelihood", "categorical")
        if kind == "moment-matched":
            return MomentMatchedCategorical(float(self.moment_matched_jitter))
        if kind == "adf":
            return AssumedDensityCategorical()
        return Bernoulli() if n_outputs == 1 else Categorical()

    def _target_matrix(self, index):
        if self._adapter.n_outputs == 1:
            return index.reshape(-1, 1).astype(np.float64)
        return np.eye(len(self.classes_))[index]

    # -- predictive -----------------------------------------------------------------------------
    def _output_variance(self, quad):
        """The logits' variances the probit takes from their covariance ``quad (…, n, C, C)``: without
        the common shift's (:func:`~skfilter.likelihoods.shift_free_logit_variance`)."""
        return shift_free_logit_variance(quad)

    def _linearized(self, Xt, belief=None, centred=False):
        """Logits at the mean and, for ``C ≥ 2`` logits, their shift-free variances
        ``C/(C − 1) · diag(Π J Σ Jᵀ Π)`` (the centred Jacobian ``Π J``, one row at a time)."""
        if self._adapter.n_outputs == 1:
            return super()._linearized(Xt, belief)
        f, v = super()._linearized(Xt, belief, centred=True)
        C = f.shape[-1]
        return f, v.clamp_min(0.0) * (C / (C - 1.0))

    def _summarize(self, f, var, noise_state, kind):
        """Class probabilities ``(n, K)`` (class docstring)."""
        binary = f.shape[-1] == 1

        def probs(logits):
            if binary:
                p1 = torch.sigmoid(logits)
                return torch.cat([1 - p1, p1], dim=-1)
            return torch.softmax(logits, dim=-1)

        if kind == "mc":
            return probs(f).mean(0)
        if kind == "plugin":
            return probs(f)
        return probit_probabilities(f, var, binary)

    def _uninformed_summary(self, n):
        """Uniform class probabilities: no prediction before any label."""
        K = len(self.classes_)
        return torch.full((n, K), 1.0 / K, dtype=self._dtype, device=self._device)

    def _stream_classes(self, y, classes):
        """``classes``, or the labels of ``y`` (a pass that starts on one row must know them all)."""
        if classes is not None:
            return classes
        try:
            return np.unique(np.asarray(y))
        except TypeError:  # mixed label types: the validation of the first row says what is wrong
            return None

    def _mix_summaries(self, summaries, weights):
        """``Σ_k w_k p_k``: the mixture's class probabilities from the hypotheses' ``(K, n, K_c)``."""
        w = weights.to(summaries.dtype).reshape(-1, *([1] * (summaries.dim() - 1)))
        return (w * summaries).sum(0)

    def predict_proba(self, X):
        """Posterior-predictive class probabilities.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Columns in the order of ``classes_``.
        """
        proba = self._lean_proba(X)
        if proba is not None:
            return proba
        rows, Xt = self._predict_rows(X)
        proba = self._host_proba(rows, Xt)
        if proba is None:
            proba = to_numpy(self._predictive_summary(Xt, rows))
        self._check_finite_prediction(proba)  # a ValueError, never NaN probabilities
        return proba

    def _lean_proba(self, X):
        """:meth:`predict_proba` of one plain row (:meth:`_lean_rows`) by an estimator whose last
        calls were one-row steps (its state a :class:`~skfilter.stepping.RowState`), in one compiled
        call on the state's arrays (:meth:`~skfilter.stepping.LoFiPlan.probit_row`: the formulas of
        :meth:`_host_proba`); None for anything else."""
        state = self.__dict__.get("_filter_state")
        if type(state) is not stepping.RowState or self.predictive != "probit":
            return None
        got = self._lean_rows(X)
        if got is None or not kernels.enabled():
            return None
        proba = got[0].plan.probit_row(state, got[2], len(self.classes_))
        if proba is None:
            return None
        if not float(proba.sum()) < np.inf:  # NaN or infinite logits
            self._check_finite_prediction(proba)
        return proba

    def _host_proba(self, rows, Xt):
        """:meth:`predict_proba`'s probabilities on NumPy arrays for the common case — one belief on
        the CPU, ``predictive='probit'``, a compiled linearised predictive
        (:func:`skfilter.stepping.probit_arrays_compiled`, one call) — where the summary's few
        torch operations per call would cost more than their arithmetic for a row or a few (the
        formulas of the torch path, with the same shift-free variances as :meth:`_linearized`:
        ``C/(C − 1) · diag(Π J Σ Jᵀ Π)`` for ``C ≥ 2`` logits); None for every other case. The
        outputs at the mean are remembered for the next ``partial_fit`` as the torch path does."""
        state = self.__dict__["_filter_state"]
        if state.log_weights is not None or self.predictive != "probit" or Xt.device.type != "cpu":
            return None
        out = stepping.probit_arrays_compiled(self._adapter, self._structure, self.filter_state_.belief, rows,
                                              len(self.classes_))
        if out is None:
            return None
        f, proba = out
        lean = memo_for(self).get("lean")
        if lean is None or not lean.plan.checks_outputs:  # else the lean partial_fit's kernel checks them
            self._remember_outputs(rows, torch.from_numpy(f))
        return proba

    def _sampled_probabilities(self, X, n_samples, random_state, method):
        """``(n, S, K)`` sampled class probabilities (:meth:`sample_proba`) and the generator."""
        Xt = self._predict_tensor(X)
        gen = self._sampling_generator(random_state)
        with torch.no_grad():
            if method == "predictive":
                f, _ = self._predictive_output_draws(Xt, n_samples, gen)  # (n, S, C)
            else:
                f = self._thompson_output_draws(Xt, n_samples, gen)[0].transpose(0, 1)  # (n, S, C)
            if f.shape[-1] == 1:
                p1 = torch.sigmoid(f)
                proba = torch.cat([1 - p1, p1], dim=-1)
            else:
                proba = torch.softmax(f, dim=-1)
        return proba, gen

    @validate_params({"X": ["array-like"], "n_samples": [Interval(Integral, 1, None, closed="left")],
                      "random_state": ["random_state"], "method": [StrOptions(set(SAMPLING_METHODS))]},
                     prefer_skip_nested_validation=True)
    def sample_proba(self, X, n_samples=1, random_state=None, method="thompson"):
        """Sampled class probabilities ``softmax(f)`` for logits ``f`` drawn from the posterior.

        * ``method='thompson'`` (Thompson sampling; Duran-Martin et al. 2025, Table 1): logits
          ``f = h(θ_s, x)`` with ``θ_s ~ N(μ, Σ)``, one parameter draw shared by all rows (a function
          draw).
        * ``method='predictive'`` (predictive sampling, Duran-Martin et al. 2025, Alg. 1): every row's
          logits independently from the linearised ``N(h(μ, x), J Σ Jᵀ)``; no parameter is sampled.

        With one logit (two classes) the probabilities are ``(1 − σ(f), σ(f))``. A run-length
        mixture draws the hypothesis by its weight first. The average of many draws approaches
        ``predict_proba`` with ``predictive='mc'`` (Thompson) or ``E[softmax(f)]`` under the
        linearised predictive, which ``predictive='probit'`` approximates (predictive).

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=None
        method : {'thompson', 'predictive'}, default='thompson'

        Returns
        -------
        proba_samples : ndarray of shape (n_samples_X, n_classes, n_samples)
            Columns in the order of ``classes_``.

        Examples
        --------
        >>> import numpy as np
        >>> from skfilter import EKFClassifier
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(200, 2)); y = (X[:, 0] > 0).astype(int)
        >>> clf = EKFClassifier(hidden_layer_sizes=(), random_state=0).fit(X, y)
        >>> P = clf.sample_proba(X[:4], n_samples=10, random_state=0, method="predictive")
        >>> P.shape, bool(np.allclose(P.sum(axis=1), 1.0))
        ((4, 2, 10), True)
        """
        proba = to_numpy(self._sampled_probabilities(X, n_samples, random_state, method)[0])
        self._check_finite_prediction(proba)
        return proba.transpose(0, 2, 1)

    @validate_params({"X": ["array-like"], "n_samples": [Interval(Integral, 1, None, closed="left")],
                      "random_state": ["random_state"], "method": [StrOptions(set(SAMPLING_METHODS))]},
                     prefer_skip_nested_validation=True)
    def sample_y(self, X, n_samples=1, random_state=None, method="thompson"):
        """Draw labels from the posterior predictive: probabilities as :meth:`sample_proba`, then
        ``y ~ Cat(p)``.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=None
        method : {'thompson', 'predictive'}, default='thompson'
            Parameter-space function draws or independent per-row predictive draws of the logits
            (:meth:`sample_proba`).

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples)
            Labels from ``classes_``.

        Examples
        --------
        >>> import numpy as np
        >>> from skfilter import EKFClassifier
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(200, 2)); y = np.where(X[:, 0] > 0, "a", "b")
        >>> clf = EKFClassifier(hidden_layer_sizes=(), random_state=0).fit(X, y)
        >>> clf.sample_y(X[:2], n_samples=3, random_state=0, method="predictive").shape
        (2, 3)
        """
        proba, gen = self._sampled_probabilities(X, n_samples, random_state, method)
        self._check_finite_prediction(to_numpy(proba))
        n, S, K = proba.shape
        index = torch.multinomial(proba.reshape(n * S, K).clamp_min(0.0), 1, generator=gen).reshape(n, S)
        return self.classes_[to_numpy(index)]

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """Continue learning from ``(X, y)`` (one pass, in row order).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        classes : array-like of shape (n_classes,), default=None
            All the classes of the stream; required on the first call, optional afterwards.
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : object
        """
        if sample_weight is None and self._lean_fit(X, y, classes):  # one plain row of a stream
            return self
        if not self._has_state() and classes is None:
            raise ValueError("classes must be passed on the first call to partial_fit.")
        self._fit(X, y, sample_weight, reset=False, classes=classes, n_epochs=1, loss=False)
        return self

    def prequential_fit_predict(self, X, y, *, return_std=False, method="predict", sample_weight=None,
                                classes=None):
        """Fit from the prior on the stream ``(X, y)`` (one pass, in row order) and return the
        one-step-ahead prediction of every row, made before the row is learned.

        The prediction of row ``t`` uses the belief after rows ``0..t−1`` and the dynamics of step
        ``t`` (the predicted belief) and is computed inside the filter loop, from the Jacobians the
        update uses, with the estimator's ``predictive``. The estimator is left fitted on the
        whole stream, as after ``fit`` with ``n_epochs=1``. This is the interface
        :func:`skfilter.model_selection.prequential_predict` calls.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        return_std : False
            Regressors only; must be ``False``.
        method : {'predict', 'predict_proba', 'predict_log_proba'}, default='predict'
            Labels, class probabilities or their logarithms.
        sample_weight : array-like of shape (n_samples,), default=None
            As in :meth:`fit`.
        classes : array-like of shape (n_classes,), default=None
            All the classes of the stream (default: those in ``y``).

        Returns
        -------
        pred : ndarray of shape (n_samples,) or (n_samples, n_classes)
            Labels, or probabilities with columns in the order of ``classes_``.

        Examples
        --------
        >>> import numpy as np
        >>> from skfilter import EKFClassifier
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(200, 2)); y = (X[:, 0] > 0).astype(int)
        >>> clf = EKFClassifier(hidden_layer_sizes=(), random_state=0)
        >>> proba = clf.prequential_fit_predict(X, y, method="predict_proba", classes=[0, 1, 2])
        >>> proba.shape, bool(np.allclose(proba.sum(axis=1), 1.0))
        ((200, 3), True)
        """
        self._check_prequential_args(return_std, method, classes)
        return self._prequential_outputs(self._prequential_fit_record(X, y, sample_weight, classes), return_std,
                                         method)

    def _check_prequential_args(self, return_std, method, classes):
        """``prequential_fit_predict``'s arguments that a classifier takes (before anything is learned)."""
        if return_std:
            raise ValueError("return_std is only available for regressors.")
        if method not in ("predict", "predict_proba", "predict_log_proba"):
            raise ValueError(
                f"method must be 'predict', 'predict_proba' or 'predict_log_proba', got {method!r}."
            )

    def _prequential_outputs(self, rec, return_std, method):
        """Labels, probabilities or log-probabilities from a one-step-ahead record ``(n, K)``."""
        proba = to_numpy(rec)
        if method == "predict_proba":
            return proba
        if method == "predict_log_proba":
            with np.errstate(divide="ignore"):
                return np.log(proba)
        return self.classes_[np.argmax(proba, axis=1)]
