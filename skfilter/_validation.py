"""Parameter and target validation shared by every skfilter estimator (filters and baselines).

scikit-learn convention: ``__init__`` stores its arguments unvalidated; ``fit``/``partial_fit``
validate them with these functions, inside :func:`unchanged_on_error`, so that bad input raises a
clear error and leaves the estimator exactly as it was.
"""

from __future__ import annotations

import inspect
import numbers

import numpy as np
from sklearn.utils.multiclass import check_classification_targets

from ._utils import check_fitted
from .exceptions import FilterStepError
from .models import ACTIVATIONS

__all__ = [
    "check_int",
    "check_network_params",
    "check_no_unknown_kwargs",
    "encode_class_labels",
    "check_class_module_outputs",
    "check_data_magnitude",
    "check_finite_output",
    "regression_target_matrix",
    "unchanged_on_error",
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
            state = vars(self.est)
            state.clear()
            state.update(self.snapshot)
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


def check_int(value, name, low):
    """``int(value)`` if ``value`` is an integer (not a bool) ``>= low``, else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}.")
    return int(value)


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
    """Validate ``hidden_layer_sizes``, ``activation``, ``n_epochs`` and ``shuffle``."""
    hls = est.hidden_layer_sizes
    if isinstance(hls, numbers.Integral) and not isinstance(hls, bool):
        hls = (hls,)
    try:
        hls = tuple(hls)
    except TypeError as exc:
        raise ValueError(f"hidden_layer_sizes must be a sequence of ints, got {hls!r}.") from exc
    hls = tuple(check_int(h, "each hidden layer size", 1) for h in hls)
    if est.activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {est.activation!r}.")
    if not isinstance(est.shuffle, (bool, np.bool_)):
        raise ValueError(f"shuffle must be a bool, got {est.shuffle!r}.")
    return {"hidden_layer_sizes": hls, "n_epochs": check_int(est.n_epochs, "n_epochs", 1)}


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
