"""Meta-estimators that compose a filter with a transformation of its targets.

:class:`TargetScaledRegressor` learns a regressor on affinely scaled targets and maps its whole
predictive distribution back: the mean, the standard deviation (``predict(X, return_std=True)``)
and samples (``sample_y``). scikit-learn's :class:`~sklearn.compose.TransformedTargetRegressor`
maps the mean only and does not pass ``return_std`` through, and it has no ``partial_fit``.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, RegressorMixin, clone
from sklearn.preprocessing import StandardScaler
from sklearn.utils import get_tags
from sklearn.utils._param_validation import HasMethods
from sklearn.utils.validation import check_array, has_fit_parameter

from ._meta import RANDOM_STATE_DOC, seed_clone
from ._utils import check_fitted, given_kwargs
from ._validation import ValidatedParamsMixin, unchanged_on_error

__all__ = ["TargetScaledRegressor"]


class TargetScaledRegressor(ValidatedParamsMixin, MetaEstimatorMixin, RegressorMixin, BaseEstimator):
    """A regressor learning on affinely scaled targets, its predictive mapped back to ``y``'s units.

    The targets are transformed as ``z = (y − a) / s`` per output by an affine ``transformer``
    (a :class:`~sklearn.preprocessing.StandardScaler` by default) and the ``regressor`` learns
    ``z``. Its predictive mean, standard deviation and samples are mapped back exactly:
    ``mean_y = a + s · mean_z``, ``std_y = |s| · std_z``, ``y_s = a + s · z_s``.

    The transformer is fitted once, on the targets of the first ``fit``/``partial_fit`` call of a
    stream, and then kept: the filter's belief is in the scaled units, and a scale that moved later
    would silently change the meaning of everything learned before. A stream whose first call
    holds a single row (as in :func:`~skfilter.model_selection.prequential_predict`) gets
    ``a = y₀`` and ``s = 1`` (a standard deviation of one value is 0; the scaler keeps the unit
    scale): start it with a few dozen rows, or fit the scaler on a burn-in window yourself and pass
    it frozen, ``transformer=sklearn.frozen.FrozenEstimator(StandardScaler().fit(y_burn_in))``
    (``fit`` leaves a frozen estimator as it is, and ``clone`` keeps it).

    Parameters
    ----------
    regressor : regressor, default=None
        The regressor of the scaled targets (a skfilter filter, a wrapper, a
        :class:`~skfilter.PartialPipeline`, or any regressor; ``partial_fit`` needs one with
        ``partial_fit``, ``return_std`` and ``sample_y`` one with those). ``None``:
        ``LoFiRegressor()``. Cloned by the first call of a stream: ``partial_fit`` continues with
        that clone, ``regressor_`` (replacing ``regressor`` raises; parameters set on it with
        ``set_params(regressor__<name>=…)`` take effect at the next ``fit``, and those of the
        running stream are set on ``regressor_``).
    transformer : transformer, default=None
        An affine, per-output transformer of ``y`` (``fit``, ``transform``, ``inverse_transform``):
        ``StandardScaler``, ``MinMaxScaler``, ``RobustScaler``, ``MaxAbsScaler``, … ``None``:
        ``StandardScaler()``. Its ``a`` and ``s`` are read from ``inverse_transform`` of 0 and 1,
        and its affinity is checked at a third point. Cloned and fitted by the first call of a
        stream (a :class:`~sklearn.frozen.FrozenEstimator` is neither).
    RANDOM_STATE

    Attributes
    ----------
    regressor_ : regressor
        The fitted clone of ``regressor``.
    transformer_ : transformer
        The fitted transformer of the targets.
    offset_ : ndarray of shape (n_outputs,)
        ``a``, the value of ``y`` at ``z = 0``.
    scale_ : ndarray of shape (n_outputs,)
        ``s``, the change of ``y`` per unit of ``z``.
    n_features_in_ : int
    n_outputs_ : int

    See Also
    --------
    sklearn.compose.TransformedTargetRegressor : any invertible target transformation, the mean only.

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import EKFRegressor
    >>> from skfilter.compose import TargetScaledRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2)); y = 1000.0 + 50.0 * X[:, 0] + 5.0 * rng.normal(size=200)
    >>> base = EKFRegressor(hidden_layer_sizes=(), prior_variance=1.0, obs_variance=0.01, random_state=0)
    >>> reg = TargetScaledRegressor(base).fit(X, y)  # the fixed variances are in standardised units
    >>> mean, std = reg.predict([[1.0, 0.0]], return_std=True)
    >>> bool(abs(mean[0] - 1050.0) < 5.0), bool(3.0 < std[0] < 8.0)
    (True, True)
    """

    _parameter_constraints: dict = {
        "regressor": [None, HasMethods(["fit", "predict"])],
        "transformer": [None, HasMethods(["fit", "transform", "inverse_transform"])],
        "random_state": ["random_state"],
    }
    _type_checked_params = ("regressor", "transformer")

    def __init__(self, regressor=None, *, transformer=None, random_state=None):
        self.regressor = regressor
        self.transformer = transformer
        self.random_state = random_state

    def _regressor_template(self):
        if self.regressor is not None:
            return self.regressor
        from .lofi import LoFiRegressor

        return LoFiRegressor()

    # -- targets ------------------------------------------------------------------------------
    def _target_matrix(self, y):
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
        if y.ndim not in (1, 2):
            raise ValueError(f"y must be 1-d or 2-d, got shape {y.shape}.")
        return y, y.reshape(y.shape[0], -1)

    def _fit_transformer(self, Y, sample_weight):
        """The fitted transformer and its ``(a, s)``; checks that it is affine per output."""
        transformer = clone(StandardScaler() if self.transformer is None else self.transformer)
        if sample_weight is not None and has_fit_parameter(transformer, "sample_weight"):
            transformer.fit(Y, None, sample_weight=sample_weight)
        else:
            transformer.fit(Y, None)
        width = Y.shape[1]
        points = np.array([np.zeros(width), np.ones(width), np.full(width, 3.0)])
        back = np.asarray(transformer.inverse_transform(points), dtype=np.float64).reshape(3, -1)
        if back.shape[1] != width:
            raise ValueError(f"transformer maps {width} output(s) to {back.shape[1]}; it must keep each output.")
        offset, scale = back[0], back[1] - back[0]
        if not (np.all(np.isfinite(back)) and np.all(scale != 0)
                and np.allclose(back[2], offset + 3.0 * scale, rtol=1e-9, atol=1e-12 * np.abs(back).max())):
            raise ValueError(f"transformer {transformer!r} is not an invertible affine map of each output "
                             "(inverse_transform(z) = a + s·z): the standard deviation cannot be mapped back.")
        return transformer, offset, scale

    def _scaled(self, y, Y):
        Z = np.asarray(self.transformer_.transform(Y), dtype=np.float64)
        return Z[:, 0] if y.ndim == 1 else Z

    # -- fitting ------------------------------------------------------------------------------
    def _learn(self, X, y, sample_weight, first, method, **kwargs):
        with unchanged_on_error(self):
            self._check_params()
            y, Y = self._target_matrix(y)
            if not first:
                check_fitted(self, "regressor_", named=True)
                if Y.shape[1] != self.n_outputs_:
                    raise ValueError(f"y has {Y.shape[1]} output(s) but the estimator was fitted with "
                                     f"{self.n_outputs_}.")
                if self.regressor is not self._fitted_regressor:
                    raise ValueError("TargetScaledRegressor: the parameter 'regressor' changed since the stream "
                                     "was started; call fit to start a new stream with it.")
            else:
                self.transformer_, self.offset_, self.scale_ = self._fit_transformer(Y, sample_weight)
                self.regressor_ = seed_clone(clone(self._regressor_template()), self.random_state)
                self.n_outputs_ = Y.shape[1]
                self._y_ndim = y.ndim
                self._fitted_regressor = self.regressor
            if sample_weight is not None:
                kwargs["sample_weight"] = sample_weight
            getattr(self.regressor_, method)(X, self._scaled(y, Y), **kwargs)
        return self

    def fit(self, X, y, sample_weight=None):
        """Fit the transformer on ``y`` and the regressor on the scaled targets (a new stream).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None
            Passed to the regressor (and to the transformer's ``fit`` if it takes it).

        Returns
        -------
        self : object
        """
        return self._learn(X, y, sample_weight, True, "fit")

    def partial_fit(self, X, y, sample_weight=None):
        """Continue the stream with ``(X, y)`` (the first call fits the transformer on its targets).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : object
        """
        return self._learn(X, y, sample_weight, "regressor_" not in self.__dict__, "partial_fit")

    # -- predicting ---------------------------------------------------------------------------
    def _back(self, Z, shift=True):
        """``a + s·Z`` (``shift``) or ``|s|·Z`` for an output array of the regressor: ``(n,)`` for
        one 1-d target, ``(n, C)``, or samples ``(n, S)`` / ``(n, C, S)``."""
        a, s = (self.offset_, self.scale_) if shift else (np.zeros_like(self.offset_), np.abs(self.scale_))
        Z = np.asarray(Z, dtype=np.float64)
        if self._y_ndim == 1:
            return a[0] + s[0] * Z
        shape = (1, -1) + (1,) * (Z.ndim - 2)  # the outputs axis is the second
        return a.reshape(shape) + s.reshape(shape) * Z

    def predict(self, X, return_std=False, **predict_params):
        """The predictive mean (and standard deviation) of ``y``, mapped back from the scaled targets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the standard deviation, ``|s| · std_z``.
        **predict_params
            Passed to the regressor's ``predict`` (e.g. ``include_noise=False``).

        Returns
        -------
        y_mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        y_std : ndarray of the same shape, only with ``return_std``
        """
        check_fitted(self, "regressor_", named=True)
        if not return_std:
            return self._back(self.regressor_.predict(X, **predict_params))
        mean, std = self.regressor_.predict(X, return_std=True, **predict_params)
        return self._back(mean), self._back(std, shift=False)

    def sample_y(self, X, n_samples=1, random_state=None, method=None, include_noise=None):
        """Draws from the predictive of ``y``: the regressor's draws of the scaled target, mapped back.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=None
        method : {'thompson', 'predictive'}, default=None
            Passed to the regressor's ``sample_y`` when given (skfilter's regressors: parameter-space
            or outcome-space draws; None: the regressor's default).
        include_noise : bool, default=None
            Passed to the regressor's ``sample_y`` when given (None: its default).

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples) or (n_samples_X, n_outputs, n_samples)
        """
        check_fitted(self, "regressor_", named=True)
        return self._back(self.regressor_.sample_y(X, n_samples=n_samples, random_state=random_state,
                                                   **given_kwargs(method=method, include_noise=include_noise)))

    # -- delegation ---------------------------------------------------------------------------
    @property
    def n_features_in_(self):
        """Number of features seen by the regressor."""
        return self.regressor_.n_features_in_

    @property
    def feature_names_in_(self):
        """Feature names seen by the regressor (only when ``X`` had string column names)."""
        return self.regressor_.feature_names_in_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        base = get_tags(self._regressor_template())
        tags.input_tags = base.input_tags
        tags.target_tags.multi_output = base.target_tags.multi_output
        tags.non_deterministic = base.non_deterministic
        return tags


TargetScaledRegressor.__doc__ = TargetScaledRegressor.__doc__.replace(
    "RANDOM_STATE", RANDOM_STATE_DOC.replace("BASE", "``regressor``"))
