"""The machinery shared by the meta-estimators that wrap a filter (WoLF, BOCD).

A wrapper holds a base estimator as its ``estimator`` parameter (``None``: a documented default),
fits a clone of it, and changes how the clone learns through the engine's internal interface:
``_engine_parts()`` and ``_set_weighting()`` (robust weights), ``_begin()`` and ``filter_state_``
(wrappers that run their own loop over rows, such as the run-length filters). Wrappers compose:
:meth:`FilterMetaEstimator._filter_for` returns the innermost filter, prepared for the call, so that
``BOCDRegressor(WoLFRegressor(LoFiRegressor()))`` runs run-length mixtures of robust LoFi filters.
"""

from __future__ import annotations

from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone
from sklearn.utils import get_tags


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
        """A clone of the base estimator, checked to be a skfilter filter (or wrapper) of this kind."""
        base = clone(self._base_template())
        ok = is_filter(base) or isinstance(base, FilterMetaEstimator)
        if not ok or get_tags(base).estimator_type != self._kind:
            raise TypeError(f"estimator must be a skfilter filter {self._kind} (e.g. EKF or LoFi, or a wrapper "
                            f"of one); got {type(self.estimator).__name__}.")
        return base

    def _filter_for(self, first, y, sample_weight):
        """The innermost filter estimator, prepared for a call with targets ``y`` (``first``: a new
        clone, from the prior); installs what this wrapper needs in it and keeps it in
        ``estimator_``. For wrappers that run the filter themselves."""
        raise NotImplementedError

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
