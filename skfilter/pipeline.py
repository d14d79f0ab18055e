"""Pipelines that learn online: scikit-learn's :class:`~sklearn.pipeline.Pipeline` with ``partial_fit``.

scikit-learn's ``Pipeline`` has no ``partial_fit``, so a filter behind a ``StandardScaler`` could
only be refitted from scratch. :class:`PartialPipeline` adds it: each transformer that has
``partial_fit`` updates its statistics with the new rows, the rows are transformed, and the final
estimator continues learning from them. Everything else (``fit``, ``predict``, ``get_params``,
``set_params``, ``clone``, pickling, ``GridSearchCV``) is scikit-learn's ``Pipeline``.
"""

from __future__ import annotations

import numpy as np
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.utils import get_tags
from sklearn.utils.metaestimators import available_if

__all__ = ["PartialPipeline", "make_partial_pipeline"]

#: transformers without ``partial_fit`` suggested in the error for a stateful one
_ALTERNATIVES = ("StandardScaler, MinMaxScaler, MaxAbsScaler (partial_fit), IncrementalPCA (partial_fit, "
                 "in chunks of at least n_components rows), or a stateless FunctionTransformer/Normalizer")


def _is_passthrough(step):
    return step is None or (isinstance(step, str) and step == "passthrough")


def _is_stateless(transformer):
    """True for transformers that learn nothing from data (scikit-learn's ``requires_fit=False`` tag)."""
    try:
        return not get_tags(transformer).requires_fit
    except Exception:  # an object without scikit-learn tags: assume it learns
        return False


def _final_has(attr):
    def check(self):
        final = self._final_estimator
        if _is_passthrough(final):
            return attr == "partial_fit"
        return hasattr(final, attr)

    return check


class PartialPipeline(Pipeline):
    """A scikit-learn :class:`~sklearn.pipeline.Pipeline` that also learns online with ``partial_fit``.

    ``partial_fit(X, y)`` updates each transformer that has ``partial_fit`` (``StandardScaler``,
    ``MinMaxScaler``, ``IncrementalPCA``, …) with the rows, transforms them, and passes them to the
    final estimator's ``partial_fit``. Stateless transformers (``FunctionTransformer``,
    ``Normalizer``; scikit-learn's ``requires_fit=False`` tag) and ``'passthrough'``/``None`` steps
    are applied as they are. A transformer that learns from data but has no ``partial_fit``
    (``PCA``, ``QuantileTransformer``, …) cannot be updated online: ``partial_fit`` raises a
    :class:`TypeError` naming it, before any step has learned anything.

    Streaming statistics are honest, not retroactive: ``StandardScaler.partial_fit`` keeps running
    means and variances, so the rows of the first calls are scaled with the statistics of the rows
    seen so far (the first row alone is scaled with its own mean, to zero), and rows already learned
    are not re-scaled when later rows move the statistics. Rows of one call are scaled with the
    statistics after that whole call.

    ``fit``, ``predict``, ``predict_proba``, ``score`` and the rest are those of
    :class:`~sklearn.pipeline.Pipeline` (``fit`` fits every step on all the rows, in batch);
    ``predict`` passes keyword arguments such as ``return_std=True`` to the final estimator, whose
    uncertainty is that of the transformed problem (transformers do not propagate uncertainty).

    Parameters
    ----------
    steps : list of tuples
        ``(name, transformer)`` pairs, the last ``(name, estimator)``, as in
        :class:`~sklearn.pipeline.Pipeline`. Parameters are addressed as ``<name>__<parameter>``
        (``lofiregressor__rank``) by ``set_params`` and ``GridSearchCV``.
    transform_input : list of str, default=None
        As in :class:`~sklearn.pipeline.Pipeline` (metadata routing only).
    memory : str or object with the joblib.Memory interface, default=None
        Caches the transformers of ``fit`` (not of ``partial_fit``), as in
        :class:`~sklearn.pipeline.Pipeline`.
    verbose : bool, default=False
        Print the time of each step of ``fit``.

    See Also
    --------
    make_partial_pipeline : build one from estimators, naming the steps after their classes.
    skfilter.model_selection.prequential_score : one-step-ahead evaluation of a pipeline.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.preprocessing import StandardScaler
    >>> from skfilter import LoFiRegressor
    >>> from skfilter.pipeline import make_partial_pipeline
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(5.0, 3.0, size=(300, 2)); y = X @ [0.5, -0.2] + 0.05 * rng.normal(size=300)
    >>> pipe = make_partial_pipeline(StandardScaler(), LoFiRegressor(hidden_layer_sizes=(), random_state=0))
    >>> for start in range(0, 300, 50):
    ...     pipe = pipe.partial_fit(X[start:start + 50], y[start:start + 50])
    >>> mean, std = pipe.predict(X[:3], return_std=True)
    >>> mean.shape, std.shape
    ((3,), (3,))
    >>> bool(np.all(std > 0))
    True
    """

    def _check_partial_steps(self):
        """Raise before learning if some transformer can neither be updated nor is stateless."""
        self._validate_steps()
        for name, step in self.steps[:-1]:
            if _is_passthrough(step) or hasattr(step, "partial_fit") or _is_stateless(step):
                continue
            raise TypeError(
                f"PartialPipeline.partial_fit: step {name!r} ({type(step).__name__}) learns from data but has "
                f"no partial_fit, so it cannot be updated online. Use a transformer with partial_fit or a "
                f"stateless one ({_ALTERNATIVES}), or fit the pipeline in batch with fit().")
        final = self.steps[-1][1]
        if not _is_passthrough(final) and not hasattr(final, "partial_fit"):
            raise TypeError(f"PartialPipeline.partial_fit: the final step {self.steps[-1][0]!r} "
                            f"({type(final).__name__}) has no partial_fit.")

    def _partial_transform(self, X, y):
        """Update (``partial_fit``) or apply each transformer in turn; the transformed rows."""
        Xt = X
        for _, step in self.steps[:-1]:
            if _is_passthrough(step):
                continue
            if hasattr(step, "partial_fit"):
                step.partial_fit(Xt, y)
            elif not self._is_fitted_step(step):
                step.fit(Xt, y)  # stateless: fitting only records the input's shape
            Xt = step.transform(Xt)
        return Xt

    @staticmethod
    def _is_fitted_step(step):
        from sklearn.utils.validation import check_is_fitted
        from sklearn.exceptions import NotFittedError

        try:
            check_is_fitted(step)
        except NotFittedError:
            return False
        return True

    @available_if(_final_has("partial_fit"))
    def partial_fit(self, X, y=None, classes=None, sample_weight=None):
        """Continue learning from the rows ``(X, y)``: update the transformers, then the final estimator.

        Each transformer with ``partial_fit`` is updated with ``X`` (as transformed by the steps
        before it) and then transforms it; stateless transformers only transform. The final
        estimator's ``partial_fit`` gets the transformed rows, ``y``, and ``classes`` and
        ``sample_weight`` when they are given (``sample_weight`` goes to the final estimator only).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs), default=None
        classes : array-like of shape (n_classes,), default=None
            Classifiers: all the classes of the stream (required by most classifiers on the first
            call).
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the rows for the final estimator.

        Returns
        -------
        self : PartialPipeline

        Raises
        ------
        TypeError
            If a transformer learns from data but has no ``partial_fit`` (e.g. ``PCA``), or the
            final estimator has no ``partial_fit``; nothing has been learned then.
        """
        self._check_partial_steps()
        Xt = self._partial_transform(X, y)
        final = self.steps[-1][1]
        if not _is_passthrough(final):
            kwargs = {}
            if classes is not None:
                kwargs["classes"] = classes
            if sample_weight is not None:
                kwargs["sample_weight"] = sample_weight
            final.partial_fit(Xt, y, **kwargs)
        return self

    def _transform_before_final(self, X):
        Xt = X
        for _, step in self.steps[:-1]:
            if not _is_passthrough(step):
                Xt = step.transform(Xt)
        return Xt

    @available_if(_final_has("sample_y"))
    def sample_y(self, X, *args, **kwargs):
        """Samples of the final estimator's predictive distribution at the transformed ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        *args, **kwargs
            Passed to the final estimator's ``sample_y`` (``n_samples``, ``random_state``,
            ``method``).

        Returns
        -------
        ndarray
            The final estimator's samples.
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        return self.steps[-1][1].sample_y(self._transform_before_final(X), *args, **kwargs)

    @available_if(_final_has("sample_proba"))
    def sample_proba(self, X, *args, **kwargs):
        """Sampled class probabilities of the final estimator at the transformed ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        *args, **kwargs
            Passed to the final estimator's ``sample_proba`` (``n_samples``, ``random_state``,
            ``method``).

        Returns
        -------
        ndarray of shape (n_samples, n_classes, n_samples_drawn)
            The final estimator's sampled probabilities.
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        return self.steps[-1][1].sample_proba(self._transform_before_final(X), *args, **kwargs)


def make_partial_pipeline(*steps, memory=None, verbose=False):
    """A :class:`PartialPipeline` of the estimators ``steps``, named after their classes.

    As :func:`sklearn.pipeline.make_pipeline`: the steps are named by their lowercased class names
    (``standardscaler``, ``lofiregressor``; a number is appended to repeated names), so that
    hyperparameters are ``lofiregressor__rank`` in ``set_params`` and ``GridSearchCV``.

    Parameters
    ----------
    *steps : list of estimators
        Transformers, then the final estimator.
    memory : str or object with the joblib.Memory interface, default=None
        Caches the transformers of ``fit``.
    verbose : bool, default=False
        Print the time of each step of ``fit``.

    Returns
    -------
    PartialPipeline

    Examples
    --------
    >>> from sklearn.preprocessing import StandardScaler
    >>> from skfilter import LoFiRegressor
    >>> from skfilter.pipeline import make_partial_pipeline
    >>> pipe = make_partial_pipeline(StandardScaler(), LoFiRegressor())
    >>> [name for name, _ in pipe.steps]
    ['standardscaler', 'lofiregressor']
    >>> pipe.set_params(lofiregressor__rank=5).get_params()["lofiregressor__rank"]
    5
    """
    named = make_pipeline(*steps).steps
    return PartialPipeline(named, memory=memory, verbose=verbose)
