"""Parameter and target validation shared by every skfilter estimator (filters and baselines).

scikit-learn convention: ``__init__`` stores its arguments unvalidated; ``fit``/``partial_fit``
validate them with these functions, inside :func:`unchanged_on_error`, so that bad input raises a
clear error and leaves the estimator exactly as it was.
"""

from __future__ import annotations

import inspect
import numbers

import numpy as np
import torch
from sklearn.utils._param_validation import InvalidParameterError, Interval, Options, StrOptions
from sklearn.utils._param_validation import make_constraint
from sklearn.utils.multiclass import check_classification_targets

from ._utils import check_fitted, is_frozen, memo_for
from .exceptions import FilterStepError
from .models import ACTIVATIONS

__all__ = [
    "NETWORK_PARAMETER_CONSTRAINTS",
    "DEVICE_PARAMETER_CONSTRAINTS",
    "ValidatedParamsMixin",
    "check_parameter_constraints",
    "raise_invalid_parameter",
    "check_network_params",
    "check_no_unknown_kwargs",
    "encode_class_labels",
    "check_class_module_outputs",
    "check_data_magnitude",
    "check_finite_output",
    "regression_target_matrix",
    "unchanged_on_error",
    "forget_params",
    "params_version",
    "restore_attributes",
    "check_structural_params_unchanged",
    "PrefixedParamsMixin",
    "ProbabilisticClassifierMixin",
]


class unchanged_on_error:
    """Context manager: restore ``est.__dict__`` if the block raises anything but a
    :class:`FilterStepError`.

    A filter-step failure is not bad input: the estimator keeps the belief (or weights) from before
    the failing step, which the streaming loop has already put back. (A class rather than a
    generator context manager: it is entered at every ``fit``/``partial_fit`` call.)
    """

    __slots__ = ("est", "snapshot")

    def __init__(self, est):
        self.est = est

    def __enter__(self):
        self.snapshot = dict(vars(self.est))

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and not issubclass(exc_type, FilterStepError):
            restore_attributes(self.est, self.snapshot)
        return False


def _same_value(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, (np.ndarray, list, tuple)) or isinstance(b, (np.ndarray, list, tuple)):
        try:
            return np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
        except (ValueError, TypeError):
            return False
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - objects without a usable ==
        return False


def check_structural_params_unchanged(est, fitted_values: dict):
    """Raise ``ValueError`` if a parameter that fixed the fitted stream's model, structure or prior
    (``fitted_values``, recorded by the first ``fit``/``partial_fit``) was changed with ``set_params``:
    ``partial_fit`` cannot continue a stream with another model, and must not silently keep the old."""
    current = {k for k in vars(est) if k.startswith("module__")}
    changed = sorted(k for k in set(fitted_values) | current
                     if k not in fitted_values or not hasattr(est, k) or not _same_value(getattr(est, k), fitted_values[k]))
    if changed:
        raise ValueError(
            f"{type(est).__name__}: the parameter(s) {changed} changed since the stream was started, "
            "and they fix the model, the posterior structure or the prior; partial_fit cannot continue "
            "with them changed. Call fit to start a new stream with the new values (or set them back)."
        )


def check_no_unknown_kwargs(est, prefixes):
    """Reject attributes that are neither parameters nor ``<prefix><name>`` keyword arguments."""
    known = set(est._get_param_names())
    unknown = [k for k in vars(est) if not (k in known or k.startswith(("_",) + tuple(prefixes)) or k.endswith("_"))]
    if unknown:
        names = " and ".join(f"{p}<name>" for p in prefixes)
        catch_all = est._catch_all_name() if hasattr(est, "_catch_all_name") else None
        hint = (f" ({catch_all!r} is the name of the catch-all, not a parameter: pass {names} "
                "keywords themselves)" if catch_all in unknown else "")
        raise TypeError(
            f"{type(est).__name__} got unexpected keyword argument(s) {unknown}; besides the "
            f"documented parameters only {names} arguments are accepted{hint}."
        )


def check_network_params(est) -> dict:
    """The network settings after the constraint pass (:data:`NETWORK_PARAMETER_CONSTRAINTS`):
    ``hidden_layer_sizes`` as a tuple (an int is one layer), each entry checked to be an integer
    ``>= 1`` (a check of the entries, which the constraints cannot express), and ``n_epochs``."""
    hls = est.hidden_layer_sizes
    hls = (hls,) if isinstance(hls, numbers.Integral) else tuple(hls)
    bad = [h for h in hls if isinstance(h, (bool, np.bool_)) or not isinstance(h, numbers.Integral) or h < 1]
    if bad:
        raise_invalid_parameter(est, "hidden_layer_sizes", "an int >= 1 or a sequence of them (each hidden "
                                "layer size an integer >= 1)", est.hidden_layer_sizes)
    return {"hidden_layer_sizes": tuple(int(h) for h in hls), "n_epochs": int(est.n_epochs)}


# -- scikit-learn's parameter constraints ----------------------------------------------------------
#: constraints of the default network's parameters (filters and gradient baselines)
NETWORK_PARAMETER_CONSTRAINTS = {
    "hidden_layer_sizes": ["array-like", Interval(numbers.Integral, 1, None, closed="left")],
    "activation": [StrOptions(set(ACTIVATIONS))],
    "module": [None, torch.nn.Module, type],
    "n_epochs": [Interval(numbers.Integral, 1, None, closed="left")],
    "shuffle": ["boolean"],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
}

#: constraints of ``device`` and ``dtype`` (the device's availability and float64 on MPS are
#: checked by :func:`skfilter._utils.resolve_device` / :func:`~skfilter._utils.resolve_dtype`)
DEVICE_PARAMETER_CONSTRAINTS = {
    "device": [None, str, torch.device],
    "dtype": [None, StrOptions({"float32", "float64"}), Options(torch.dtype, {torch.float32, torch.float64}),
              Options(type, {float, np.float32, np.float64}),
              Options(np.dtype, {np.dtype(np.float32), np.dtype(np.float64)})],
}

#: constraints that accept a bool (the others, numeric intervals, do not: ``True`` is no count)
_BOOL_CONSTRAINTS = ("boolean", "verbose")


def raise_invalid_parameter(est, name, must_be, value):
    """Raise scikit-learn's ``InvalidParameterError`` (a ``ValueError`` and a ``TypeError``) for a
    check the constraints cannot express (entries of a sequence, a value that depends on another
    parameter), worded as scikit-learn's: ``The 'name' parameter of Est must be must_be. Got value
    instead.``"""
    raise InvalidParameterError(f"The {name!r} parameter of {type(est).__name__} must be {must_be}. "
                                f"Got {value!r} instead.")


def check_parameter_constraints(est):
    """Validate ``est``'s parameters against its ``_parameter_constraints`` (scikit-learn's
    ``BaseEstimator._validate_params``), and reject a bool given for a number: scikit-learn counts
    ``True`` as the integer 1, which for a count, a variance or a rate is a mistake."""
    est._validate_params()
    for name, constraints in est._parameter_constraints.items():
        value = getattr(est, name, None)
        if isinstance(value, (bool, np.bool_)) and not any(
                isinstance(c, str) and c in _BOOL_CONSTRAINTS for c in constraints):
            allowed = [str(make_constraint(c)) for c in constraints]
            raise_invalid_parameter(est, name, ", ".join(allowed[:-1]) + (" or " if len(allowed) > 1 else "")
                                    + allowed[-1] + " (not a bool)", value)


class ValidatedParamsMixin:
    """Parameter validation through scikit-learn's constraints, once per parameter values.

    :meth:`_check_params` returns the resolved settings of :meth:`_resolve_params` (which starts
    with :func:`check_parameter_constraints`, then checks what depends on several parameters).
    A streaming loop calls it at every ``partial_fit`` (one row costs ~80 µs in all): the settings
    are remembered (:func:`skfilter._utils.memo_for`) and returned again until a public attribute
    is set or deleted (:meth:`__setattr__`, ``set_params``; :func:`forget_params` where the instance
    dictionary is replaced whole), provided every parameter is a value that cannot change in place
    (:func:`skfilter._utils.is_frozen`: numbers, strings, devices, dtypes, classes, tuples of them)
    or is named in :attr:`_type_checked_params` (a parameter whose check depends on its type only,
    such as a wrapper's ``estimator``). Anything else (a list, an array, a module instance) is
    validated at every call.
    """

    #: parameters whose validation depends on their type only: the same object passes again
    _type_checked_params: tuple = ()

    def _check_params(self) -> dict:
        """Validate the hyper-parameters; returns the resolved settings (a dict nobody modifies),
        remembered until a public attribute is set or deleted (:meth:`__setattr__`)."""
        memo = memo_for(self)
        cfg = memo.get("params")
        if cfg is not None:
            return cfg
        cfg = self._resolve_params()
        state = self.__dict__
        reusable = self._type_checked_params
        if all(is_frozen(v) or k in reusable for k, v in state.items() if k[0] != "_" and k[-1] != "_"):
            memo["params"] = cfg
        return cfg

    def _resolve_params(self) -> dict:
        """The constraint pass; subclasses add their checks and return the resolved settings."""
        check_parameter_constraints(self)
        return {}

    def __setattr__(self, name, value):
        """Set the attribute; setting a parameter (a public name without a trailing underscore)
        forgets the settings :meth:`_check_params` remembered."""
        if name[0] != "_" and name[-1] != "_":
            forget_params(self)
        super().__setattr__(name, value)

    def __delattr__(self, name):
        if name[0] != "_" and name[-1] != "_":
            forget_params(self)
        super().__delattr__(name)


def forget_params(est):
    """Forget the settings :meth:`ValidatedParamsMixin._check_params` remembered for ``est`` (its
    parameters were set, or its instance dictionary replaced), and its :func:`params_version`."""
    memo = memo_for(est)
    memo.pop("params", None)
    memo.pop("version", None)


def params_version(est):
    """A token of ``est``'s parameters (a :class:`ValidatedParamsMixin`): the same object until one
    of them is set or deleted (:func:`forget_params`), then a new one; None for an estimator that
    does not say when its parameters change (not a :class:`ValidatedParamsMixin`)."""
    if not isinstance(est, ValidatedParamsMixin):
        return None
    memo = memo_for(est)
    token = memo.get("version")
    if token is None:
        token = memo["version"] = object()
    return token


def restore_attributes(est, attributes):
    """Make ``est``'s instance dictionary ``attributes`` (a snapshot taken before a call that
    failed, or another estimator's), forgetting everything remembered for the replaced one (its
    memo, :func:`skfilter._utils.memo_for`: settings, one-row records, shortcuts)."""
    state = vars(est)
    state.clear()
    state.update(attributes)
    memo_for(est).clear()


def encode_class_labels(est, y, first, classes=None) -> np.ndarray:
    """Class indices of the labels ``y`` into ``est.classes_`` (set on the ``first`` call from
    ``classes`` or the labels seen); unknown labels and changed ``classes`` are errors."""
    check_classification_targets(y)
    if first:
        classes = np.unique(y) if classes is None else np.unique(np.asarray(classes))
        if len(classes) < 2:
            raise ValueError(f"{type(est).__name__} needs at least two classes; got one class only: {classes!r}.")
        est.classes_ = classes
    elif classes is not None and not np.array_equal(np.unique(np.asarray(classes)), est.classes_):
        raise ValueError(f"classes={classes!r} differs from the classes of the first call, {est.classes_!r}.")
    unseen = np.setdiff1d(np.unique(y), est.classes_)
    if unseen.size:
        raise ValueError(f"y contains labels {unseen!r} that are not in classes_ {est.classes_!r}.")
    return np.searchsorted(est.classes_, y)


def check_class_module_outputs(n_outputs, n_classes):
    """A network for ``K`` classes has ``K`` logits, or one logit when ``K = 2``."""
    if n_outputs != n_classes and not (n_classes == 2 and n_outputs == 1):
        raise ValueError(
            f"The module has {n_outputs} output(s); {n_classes} classes need {n_classes} logits"
            + (" or a single logit." if n_classes == 2 else ".")
        )


def check_data_magnitude(name, a, bound, dtype_name):
    """Raise ``ValueError`` if a finite array ``a`` has an entry with ``|value| > bound``
    (:func:`skfilter._utils.magnitude_bound` of the estimator's dtype ``dtype_name``, a name or a
    torch dtype): such values make the filter's products overflow, and are rejected before
    anything is learned."""
    a = np.asarray(a)
    if a.size == 0 or a.dtype.kind not in "fiu":
        return
    biggest = float(np.abs(a).max())
    if biggest > bound:
        dtype_name = str(dtype_name).replace("torch.", "")
        raise ValueError(
            f"{name} has an entry of magnitude {biggest:.3g}, above {bound:.3g}, the largest accepted with "
            f"dtype={dtype_name!r}: the filter's products of such values (the network output, its Jacobian "
            f"J, J Σ Jᵀ) overflow. Standardise the data (e.g. sklearn.preprocessing.StandardScaler)"
            + (" or use dtype='float64'." if dtype_name == "float32" else ".")
        )


def check_finite_output(values, what, est=None):
    """Raise ``ValueError`` if a prediction or model output is not finite (overflow at inputs far
    from the data), instead of returning NaN or infinity. ``what`` names it (followed by the class
    name of ``est`` if given)."""
    for v in values:
        if not np.isfinite(v).all():
            if est is not None:
                what = f"{what} {type(est).__name__}"
            raise ValueError(
                f"{what} is not finite for some rows of X (the network overflows at these inputs: "
                "their magnitude is too large for the current parameters). Standardise X, or predict "
                "at inputs closer to the data."
            )


def regression_target_matrix(est, y, first) -> np.ndarray:
    """Targets as an ``(n, C)`` float64 matrix; records ``n_outputs_`` (and the shape of ``y``) on
    the ``first`` call and checks the number of outputs afterwards.

    ``y`` must hold numbers: ``None`` or other non-numeric objects (an ``object`` array) and values
    that are not finite once converted raise ``ValueError``.
    """
    y = np.asarray(y)
    if y.dtype.kind == "O":
        bad = [v for v in y.ravel() if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real)]
        if bad:
            raise ValueError(
                f"y must hold real numbers; it contains {bad[0]!r} ({type(bad[0]).__name__}). Missing "
                "targets (None) cannot be learned: drop those rows."
            )
    y = y.astype(np.float64)
    if not np.isfinite(y).all():
        raise ValueError("y contains NaN, infinity or None (missing targets): every target must be a finite "
                         "number; drop the rows without one.")
    width = 1 if y.ndim == 1 else y.shape[1]
    if first:
        est._y_ndim = y.ndim
        est.n_outputs_ = width
    elif width != est.n_outputs_:
        raise ValueError(f"y has {width} output(s) but the estimator was fitted with {est.n_outputs_}.")
    return y.reshape(y.shape[0], width)


#: ``{class: parameter names}`` and ``{class: name of the ** parameter}``, computed once per class
_PARAM_NAMES: dict = {}
_CATCH_ALL: dict = {}


class PrefixedParamsMixin:
    """skorch's parameter convention for scikit-learn estimators.

    Keyword arguments ``<prefix><name>=value`` (``prefix`` in :attr:`_param_prefixes`, e.g.
    ``module__hidden=64``) are stored as attributes under their own names, returned by
    :meth:`get_params` and accepted by :meth:`set_params`, so that ``clone`` and ``GridSearchCV``
    handle them like any other parameter. Names with other prefixes are rejected by ``fit``
    (:func:`check_no_unknown_kwargs`), never by ``__init__``.

    The name of ``__init__``'s ``**`` catch-all itself (``module_kwargs``, ``kwargs``) is one of
    those other names: passed explicitly (``Est(module_kwargs=...)``, as scikit-learn's
    ``check_do_not_raise_errors_in_init_or_set_params`` does with every name of the signature), it
    is stored, returned by :meth:`get_params`, accepted by :meth:`set_params`, and rejected by
    ``fit`` like any other unknown keyword argument; ``__init__`` and ``set_params`` never raise
    for it.
    """

    _param_prefixes: tuple = ("module__",)

    @classmethod
    def _get_param_names(cls):
        """scikit-learn's parameter names of ``__init__``, computed once per class (scikit-learn
        inspects the signature at every call; ``fit`` and ``partial_fit`` ask at every call)."""
        names = _PARAM_NAMES.get(cls)
        if names is None:
            names = _PARAM_NAMES[cls] = super()._get_param_names()
        return names

    @classmethod
    def _catch_all_name(cls):
        """The name of ``__init__``'s ``**`` parameter (``None`` if it has none); once per class."""
        if cls in _CATCH_ALL:
            return _CATCH_ALL[cls]
        name = None
        init = cls.__init__
        if init is not object.__init__:
            for p in inspect.signature(init).parameters.values():
                if p.kind == p.VAR_KEYWORD:
                    name = p.name
        _CATCH_ALL[cls] = name
        return name

    def _is_extra_param(self, key) -> bool:
        """Whether ``key`` is stored through the ``**`` catch-all: a ``<prefix><name>`` or the
        catch-all's own name."""
        return key.startswith(self._param_prefixes) or key == self._catch_all_name()

    def _store_init_params(self, params: dict):
        """Store ``__init__``'s arguments (its ``locals()``) as attributes, unvalidated (scikit-learn
        convention); the entries of its ``**`` catch-all (``**module_kwargs``) under their own names."""
        params = dict(params)
        params.pop("self")
        params.pop("__class__", None)
        catch_all = self._catch_all_name()
        extra = params.pop(catch_all, {}) if catch_all is not None else {}
        for key, value in {**params, **extra}.items():
            setattr(self, key, value)

    def _prefixed(self, prefix: str) -> dict:
        """The stored ``<prefix><name>`` arguments as ``{name: value}``."""
        return {k[len(prefix):]: v for k, v in vars(self).items() if k.startswith(prefix)}

    def get_params(self, deep=True):
        params = super().get_params(deep=deep)
        params.update({k: v for k, v in vars(self).items() if self._is_extra_param(k)})
        return params

    def set_params(self, **params):
        for key in [k for k in params if self._is_extra_param(k)]:
            setattr(self, key, params.pop(key))
        return super().set_params(**params)


class ProbabilisticClassifierMixin:
    """``predict`` and ``predict_log_proba`` of a classifier from its ``predict_proba`` (columns in
    the order of ``classes_``)."""

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X):
        """Most probable class under :meth:`predict_proba`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        y : ndarray of shape (n_samples,)
        """
        check_fitted(self, "filter_state_")  # check_is_fitted, fast for the filters
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]
