"""The machinery shared by the meta-estimators that wrap a filter (WoLF, BOCD).

A wrapper holds a base estimator as its ``estimator`` parameter (``None``: a documented default),
fits a clone of it, and changes how the clone learns through the engine's internal interface:
``_engine_parts()`` and ``_set_weighting()`` (robust weights), ``_begin()`` and ``filter_state_``
(wrappers that run their own loop over rows, such as the run-length filters). Wrappers compose:
:meth:`FilterMetaEstimator._filter_for` returns the innermost filter, prepared for the call, so that
``BOCDRegressor(WoLFRegressor(LoFiRegressor()))`` runs run-length mixtures of robust LoFi filters.

**Seeds.** A wrapper's ``random_state`` reaches the clone it fits (:func:`seed_clone`), the mechanism
of scikit-learn's meta-estimators (``BaggingRegressor``, …): ``None`` leaves every seed inside the
base as the base has it; a value is set on the clone as its own ``random_state`` and as every
``<…>__random_state`` inside it (a wrapped wrapper's, its base's), overriding theirs. So
``WoLFRegressor(random_state=0)`` fits as ``WoLFRegressor(LoFiRegressor(random_state=0))``, and
scikit-learn's ``set_random_state``, ``clone`` and ``GridSearchCV`` reach the seed of a default base.
"""

from __future__ import annotations

import operator
from numbers import Integral

from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone
from sklearn.utils import get_tags
from sklearn.utils._param_validation import Interval, StrOptions, validate_params

from ._sampling import SAMPLING_METHODS
from ._utils import check_fitted, is_frozen, memo_for
from ._validation import _same_value


_PARAM_NAMES: dict = {}
#: the attribute names of the estimators a wrapper's structure key reads, interned (``_structure_key``)
_NAMES: dict = {}

#: scikit-learn's constraints of ``sample_y`` / ``sample_proba`` (checked before the fitted filter's)
_SAMPLING_CONSTRAINTS = {"X": ["array-like"], "n_samples": [Interval(Integral, 1, None, closed="left")],
                         "random_state": ["random_state"], "method": [StrOptions(set(SAMPLING_METHODS))]}


def _param_values(est, prefix: str) -> dict:
    """``get_params(deep=True)`` of ``est`` with ``prefix``, read from the attributes (parameter
    names cached per class; ``module__`` keyword arguments included): a wrapper checks them at every
    ``partial_fit``, and scikit-learn's ``get_params`` costs ~1 ms on a filter."""
    cls = type(est)
    names = _PARAM_NAMES.get(cls)
    if names is None:
        names = _PARAM_NAMES[cls] = tuple(cls._get_param_names())
    out = {}
    for k in names + tuple(k for k in vars(est) if k.startswith("module__")):
        v = getattr(est, k, None)
        out[prefix + k] = v
        if isinstance(v, BaseEstimator):
            out.update(_param_values(v, f"{prefix}{k}__"))
    return out


def _same_objects(a, b) -> bool:
    """Whether the lists ``a`` and ``b`` hold the same objects (identity) in the same order."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


#: the numpydoc entry of a wrapper's ``random_state`` (``BASE``: how the docstring names its base)
RANDOM_STATE_DOC = """random_state : int, RandomState instance or None, default=None
        The seed of the clone of BASE that a stream starts with (``fit``, or the first
        ``partial_fit``): its network initialisation and every other draw it makes. ``None``: the
        base's own ``random_state`` (a default base has ``None``: a new initialisation at every
        ``fit``). Otherwise the value is set on the clone as its ``random_state`` and as every
        ``<…>__random_state`` inside it (a wrapped wrapper's and its base's, a pipeline's steps'),
        **overriding** the base's own: ``random_state=0`` fits as the base given ``random_state=0``
        would. The estimator passed as the base is never modified. An int gives the same fit
        every time; a ``RandomState`` instance is handed to the clone, which draws from it."""


def seed_clone(est, random_state):
    """Set ``random_state`` on the (cloned) estimator ``est`` as its ``random_state`` and every
    ``<…>__random_state`` of ``est.get_params(deep=True)`` (module docstring); ``None`` leaves
    ``est`` as it is. Returns ``est``."""
    if random_state is None or not hasattr(est, "get_params"):
        return est
    keys = [k for k in est.get_params(deep=True) if k == "random_state" or k.endswith("__random_state")]
    if keys:
        est.set_params(**dict.fromkeys(keys, random_state))
    return est


def is_filter(est) -> bool:
    """Whether ``est`` is a skfilter filter estimator (it has the engine's internal interface)."""
    return hasattr(est, "_engine_parts") and hasattr(est, "_set_weighting") and hasattr(est, "_begin")


class FilterMetaEstimator(MetaEstimatorMixin, BaseEstimator):
    """Base of the wrappers: the base estimator, its clone, delegation and tags (module docstring).

    Subclasses set ``_kind`` (``'regressor'`` or ``'classifier'``), implement
    :meth:`_default_estimator` and :meth:`_filter_for`, and keep the fitted clone in ``estimator_``.
    """

    _kind = None

    def _default_estimator(self):
        raise NotImplementedError

    def _base_template(self):
        return self._default_estimator() if self.estimator is None else self.estimator

    def _new_base(self):
        """A clone of the base estimator, checked to be a skfilter filter (or wrapper) of this kind,
        seeded by this wrapper's ``random_state`` (:func:`seed_clone`)."""
        base = clone(self._base_template())
        ok = is_filter(base) or isinstance(base, FilterMetaEstimator)
        if not ok or get_tags(base).estimator_type != self._kind:
            raise TypeError(f"estimator must be a skfilter filter {self._kind} (e.g. EKF or LoFi, or a wrapper "
                            f"of one); got {type(self.estimator).__name__}.")
        return seed_clone(base, self.random_state)

    #: own parameters that fix a fitted stream besides ``estimator`` (subclasses add theirs):
    #: ``random_state`` seeded the clone, as ``estimator__random_state`` would have
    _structural_params: tuple = ("random_state",)

    def _structure_snapshot(self) -> dict:
        """The values that fix the fitted stream: ``estimator`` (the object), every parameter of
        it (deep) and :attr:`_structural_params`."""
        snap = {"estimator": self.estimator}
        if self.estimator is not None:  # None: the default, which no set_params can change
            snap.update(_param_values(self.estimator, "estimator__"))
        snap.update({k: getattr(self, k) for k in self._structural_params})
        return snap

    def _record_structure(self):
        """Record :meth:`_structure_snapshot` (when a stream is installed); kept as it is when the
        recorded one was taken from (or checked against) the same objects
        (:meth:`_check_structure_unchanged`)."""
        memo = memo_for(self)
        key = self._structure_key()
        known = memo.get("structure")
        recorded = getattr(self, "_fitted_structure", None)
        if recorded is not None and key is not None and known is not None and known[0] is recorded \
                and _same_objects(known[1], key):
            return
        self._fitted_structure = self._structure_snapshot()
        if key is not None:
            memo["structure"] = (self._fitted_structure, key)

    def _check_structure_unchanged(self):
        """Raise ``ValueError`` (changing nothing) if ``set_params`` changed the base estimator, one
        of its parameters or a structural parameter since the stream began: ``estimator_`` is a
        clone made then, and ``partial_fit`` must not go on with the old one silently (as the base
        filters' structural parameters, :func:`skfilter._validation.check_structural_params_unchanged`).

        A streaming loop checks at every call: when the last check passed with the same recorded
        snapshot, the same ``estimator`` object whose instance dictionary has the same keys and the
        same parameter objects, all of values that cannot change in place
        (:func:`skfilter._utils.is_frozen`), and the same own structural parameter objects, it
        passes again without building the snapshot (scikit-learn's ``get_params`` costs ~1 ms on a
        filter, the snapshot ~10 µs)."""
        recorded = getattr(self, "_fitted_structure", None)
        if recorded is None:
            return
        memo = memo_for(self)
        key = self._structure_key()
        known = memo.get("structure")
        if key is not None and known is not None and known[0] is recorded and _same_objects(known[1], key):
            return
        current = self._structure_snapshot()
        changed = sorted(k for k in set(recorded) | set(current)
                         if k not in recorded or k not in current or not _same_value(current[k], recorded[k]))
        if changed:
            raise ValueError(
                f"{type(self).__name__}: the parameter(s) {changed} changed since the stream was started; "
                "estimator_ is the clone made then, so partial_fit cannot continue with them changed. "
                "Call fit to start a new stream with the new values (or set them back).")
        if key is not None:
            memo["structure"] = (recorded, key)

    def _structure_key(self):
        """The objects :meth:`_structure_snapshot` reads, for :meth:`_check_structure_unchanged`'s
        shortcut: ``estimator``, the keys and values of its instance dictionary (deep, through
        wrapped estimators), the own structural parameters; ``None`` when one of the values could
        change in place."""
        parts = [self.estimator]
        stack = [self.estimator] if self.estimator is not None else []
        # per estimator, the part of the key built from the same attribute objects last time (a
        # streaming loop rebuilds the key twice a call; is_frozen on every value is most of its cost)
        segments = memo_for(self).setdefault("structure_segments", {})
        while stack:
            est = stack.pop()
            state = vars(est)
            known = segments.get(id(est))
            # the same keys and value objects as last time, compared without building the tuples
            if known is not None and known[0] is est and len(known[1]) == len(state) \
                    and all(map(operator.is_, state, known[1])) and all(map(operator.is_, state.values(), known[2])):
                parts.extend(known[3])
                stack.extend(known[4])
                continue
            names = tuple(state)
            values = tuple(state.values())
            segment, nested = [_NAMES.setdefault(names, names)], []  # interned: the shortcut compares identity
            for k, v in state.items():
                if isinstance(v, BaseEstimator):
                    segment.append(v)
                    nested.append(v)
                elif k[0] != "_" and not is_frozen(v):
                    return None
                else:
                    segment.append(v)
            segments[id(est)] = (est, names, values, segment, nested)
            parts.extend(segment)
            stack.extend(nested)
        for k in self._structural_params:
            v = getattr(self, k)
            if not is_frozen(v):
                return None
            parts.append(v)
        return parts

    def _filter_for(self, first, y, sample_weight):
        """The innermost filter estimator, prepared for a call with targets ``y`` (``first``: a new
        clone, from the prior); installs what this wrapper needs in it and keeps it in
        ``estimator_``. For wrappers that run the filter themselves."""
        raise NotImplementedError

    @property
    def _inner(self):
        """The innermost (fitted) filter estimator."""
        est = self.estimator_
        while isinstance(est, FilterMetaEstimator):
            est = est.estimator_
        return est

    # -- prequential evaluation (the interface of skfilter.stream_start.prequential_fit_record) ---
    def _learn_rows(self, X, y, sample_weight=None, *, first, classes=None, record=False):
        """One pass over ``(X, y)`` as ``partial_fit`` (``first``: from the prior); with ``record``
        the one-step-ahead record of the rows (subclasses)."""
        raise NotImplementedError

    def _start_rows(self):
        """The rows that fix the base filter's data-scaled start (None: its prior uses no data)."""
        return self._new_base()._start_rows()

    def _row_summary(self, X):
        return self._inner._row_summary(X)

    def _uninformed_summary(self, n):
        return self._inner._uninformed_summary(n)

    def _stream_classes(self, y, classes):
        return self._base_template()._stream_classes(y, classes)

    def _check_prequential_args(self, return_std, method, classes):
        self._base_template()._check_prequential_args(return_std, method, classes)

    def _after_prequential(self, rec, y):
        """Bookkeeping after a prequential pass (``n_iter_``, ``loss_curve_``) (subclasses)."""

    def prequential_fit_predict(self, X, y, *, return_std=False, method="predict", sample_weight=None,
                                classes=None):
        """Fit from the prior and return every row's one-step-ahead prediction, made before the row
        is learned from the rows before it only (:func:`skfilter.model_selection.prequential_predict`).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        return_std : bool, default=False
            Regressors: also return the predictive standard deviation.
        method : {'predict', 'predict_proba', 'predict_log_proba'}, default='predict'
            Classifiers: labels, probabilities or log-probabilities.
        sample_weight : array-like of shape (n_samples,), default=None
        classes : array-like of shape (n_classes,), default=None
            Classifiers: all the classes of the stream (default: those in ``y``).

        Returns
        -------
        pred : ndarray, or ``(mean, std)`` with ``return_std``
        """
        from .stream_start import prequential_fit_record

        self._check_prequential_args(return_std, method, classes)
        rec = prequential_fit_record(self, X, y, sample_weight, classes)
        self._after_prequential(rec, y)
        return self._inner._prequential_outputs(rec, return_std, method)

    # -- delegation ---------------------------------------------------------------------------
    @property
    def n_features_in_(self):
        """Number of features seen by the base estimator."""
        return self.estimator_.n_features_in_

    @property
    def feature_names_in_(self):
        """Feature names seen by the base estimator (only when ``X`` had string column names)."""
        return self.estimator_.feature_names_in_

    @property
    def posterior_(self):
        """The base estimator's belief (:class:`~skfilter.posteriors.Posterior`)."""
        return self.estimator_.posterior_

    @property
    def n_samples_seen_(self):
        """Rows conditioned on so far."""
        return self.estimator_.n_samples_seen_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        base = get_tags(self._base_template())
        tags.input_tags = base.input_tags
        tags.target_tags.multi_output = base.target_tags.multi_output
        tags.non_deterministic = base.non_deterministic
        return tags


class PredictingRegressorMixin:
    """``predict`` and ``sample_y`` of a regression wrapper: those of its fitted filter, whose belief
    the wrapper shaped (WoLF: learned with weights; BOCD: a run-length mixture)."""

    #: the attribute that shows the wrapper is fitted
    _fitted_attribute = "estimator_"

    def predict(self, X, return_std=False, include_noise=True):
        """The posterior-predictive mean (and standard deviation) of ``y``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
        include_noise : bool, default=True
            Whether the standard deviation includes the observation noise.

        Returns
        -------
        y_mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        y_std : ndarray, only with ``return_std``
        """
        check_fitted(self, self._fitted_attribute, named=True)
        return self.estimator_.predict(X, return_std=return_std, include_noise=include_noise)

    @validate_params({**_SAMPLING_CONSTRAINTS, "include_noise": ["boolean"]}, prefer_skip_nested_validation=True)
    def sample_y(self, X, n_samples=1, random_state=None, method="thompson", include_noise=True):
        """Draws from the posterior predictive of ``y``: the fitted filter's ``sample_y`` (for a
        mixture: a hypothesis by its weight first).

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=None
        method : {'thompson', 'predictive'}, default='thompson'
            ``'thompson'``: parameter draws ``θ_s ~ N(μ, Σ)`` shared by all rows (function draws);
            ``'predictive'``: each row independently from its linearised predictive
            ``N(h(μ, x), J Σ Jᵀ + R)`` (Duran-Martin et al. 2025, Alg. 1).
        include_noise : bool, default=True
            ``False``: draws of the mean of ``y`` (no observation noise).

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples) or (n_samples_X, n_outputs, n_samples)
        """
        check_fitted(self, self._fitted_attribute, named=True)
        return self.estimator_.sample_y(X, n_samples=n_samples, random_state=random_state, method=method,
                                        include_noise=include_noise)


class PredictingClassifierMixin:
    """``classes_``, ``predict_proba``, ``predict_log_proba``, ``sample_proba``, ``sample_y`` and
    ``predict`` of a classification wrapper: those of its fitted filter."""

    _fitted_attribute = "estimator_"

    @property
    def classes_(self):
        """The class labels."""
        return self.estimator_.classes_

    def predict_proba(self, X):
        """The posterior-predictive class probabilities.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        check_fitted(self, self._fitted_attribute, named=True)
        return self.estimator_.predict_proba(X)

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        log_proba : ndarray of shape (n_samples, n_classes)
        """
        check_fitted(self, self._fitted_attribute, named=True)
        return self.estimator_.predict_log_proba(X)

    @validate_params(_SAMPLING_CONSTRAINTS, prefer_skip_nested_validation=True)
    def sample_proba(self, X, n_samples=1, random_state=None, method="thompson"):
        """Sampled class probabilities: the fitted filter's ``sample_proba``.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=None
        method : {'thompson', 'predictive'}, default='thompson'
            Logits from parameter draws shared by all rows, or drawn per row from the linearised
            ``N(h(μ, x), J Σ Jᵀ)`` (Duran-Martin et al. 2025, Alg. 1).

        Returns
        -------
        proba_samples : ndarray of shape (n_samples_X, n_classes, n_samples)
        """
        check_fitted(self, self._fitted_attribute, named=True)
        return self.estimator_.sample_proba(X, n_samples=n_samples, random_state=random_state, method=method)

    @validate_params(_SAMPLING_CONSTRAINTS, prefer_skip_nested_validation=True)
    def sample_y(self, X, n_samples=1, random_state=None, method="thompson"):
        """Sampled labels: the fitted filter's ``sample_y`` (probabilities as :meth:`sample_proba`,
        then a label from them).

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=None
        method : {'thompson', 'predictive'}, default='thompson'

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples)
        """
        check_fitted(self, self._fitted_attribute, named=True)
        return self.estimator_.sample_y(X, n_samples=n_samples, random_state=random_state, method=method)

    def predict(self, X):
        """The most probable class.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        y : ndarray of shape (n_samples,)
        """
        check_fitted(self, self._fitted_attribute, named=True)
        return self.estimator_.predict(X)
