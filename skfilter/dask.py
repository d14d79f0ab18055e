"""Dask: stream dask-array blocks into a filter, and predict with uncertainty on dask arrays.

:class:`dask_ml.wrappers.Incremental` feeds the blocks of a dask array, one after the other, to an
estimator's ``partial_fit``; every skfilter estimator, wrapper (WoLF, BOCD) and
:class:`~skfilter.pipeline.PartialPipeline` works inside it with its defaults. Its ``predict``,
however, takes no keyword arguments, so the filter's predictive standard deviation is lost. This
module adds it back:

* :func:`predict_blocks` — ``estimator.predict`` block by block on a dask array, with
  ``return_std=True`` returning a ``(mean, std)`` pair of dask arrays computed in one pass per block;
* :func:`predict_proba_blocks` — ``estimator.predict_proba`` block by block;
* :class:`Incremental` — :class:`dask_ml.wrappers.Incremental` whose ``predict`` accepts
  ``return_std`` (and the other keyword arguments of the wrapped ``predict``).

Learning is sequential in the rows (each update starts from the posterior of the previous one), so
``Incremental.fit`` runs one block after the other; what runs in parallel is prediction (one task
per block) and model selection (``GridSearchCV`` with joblib's dask backend, one fit per task).
Dask-ML shuffles the order of the blocks by default (``shuffle_blocks=True``), which suits rows
that are exchangeable; for a time series pass ``shuffle_blocks=False`` so the blocks are learned in
time order. See the "Scaling with dask" page of the documentation.

This module needs the ``dask`` extra: ``pip install "skfilter[dask]"`` (``dask[array]``,
``distributed``, ``dask-ml``).
"""

from __future__ import annotations

try:
    import dask.array as da
    from dask_ml.wrappers import Incremental as _DaskMLIncremental
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "skfilter.dask needs the dask extra: pip install 'skfilter[dask]' "
        "(dask[array], distributed and dask-ml)") from exc

import numpy as np
from sklearn.utils.validation import check_is_fitted

__all__ = ["Incremental", "predict_blocks", "predict_proba_blocks"]


def _as_row_blocked(X, caller):
    """``X`` as a 2-D dask array with all its columns in one block (blocks along the rows only)."""
    if not isinstance(X, da.Array):
        raise TypeError(f"{caller}: X must be a dask array, got {type(X).__name__}. Convert a dask DataFrame "
                        f"with X.to_dask_array(lengths=True); call the estimator directly on in-memory arrays.")
    if X.ndim != 2:
        raise ValueError(f"{caller}: X must be 2-D (n_samples, n_features), got {X.ndim} dimension(s).")
    if X.numblocks[1] > 1:
        X = X.rechunk({1: -1})
    return X


def _row_chunks(X, trailing_shape):
    """The chunks of an output with ``X``'s row blocks and one block of ``trailing_shape``."""
    return (X.chunks[0],) + tuple((size,) for size in trailing_shape)


def _probe(method, X):
    """The output of ``method`` on one row of zeros of ``X``'s width and dtype (for shapes and dtypes)."""
    return method(np.zeros((1, X.shape[1]), dtype=X.dtype))


def _predict_mean_and_std(block, estimator, predict_params, meta):
    if block.shape[0] == 0:  # an empty block (boolean masks make them): estimators reject 0 rows
        return meta
    mean, std = estimator.predict(block, return_std=True, **predict_params)
    return np.stack([mean, std], axis=-1)


def _predict(block, estimator, predict_params, meta):
    if block.shape[0] == 0:
        return meta
    return estimator.predict(block, **predict_params)


def _predict_proba(block, estimator, meta):
    if block.shape[0] == 0:
        return meta
    return estimator.predict_proba(block)


def predict_blocks(estimator, X, *, return_std=False, **predict_params):
    """``estimator.predict`` on a dask array, one task per block of rows.

    Parameters
    ----------
    estimator : fitted estimator
        Any fitted estimator with ``predict`` (a skfilter filter, wrapper or
        :class:`~skfilter.pipeline.PartialPipeline`). It is sent to the workers with the tasks.
    X : dask.array.Array of shape (n_samples, n_features)
        Blocked along the rows (blocks of any sizes, also unknown or empty ones, as boolean masks
        make them); blocked columns are joined into one block first.
    return_std : bool, default=False
        Also return the predictive standard deviation (regressors). Each block is predicted once:
        the mean and the standard deviation come from the same call.
    **predict_params
        Further keyword arguments of ``estimator.predict`` (``include_noise=False`` for the
        epistemic standard deviation only).

    Returns
    -------
    y_mean : dask.array.Array of shape (n_samples,) or (n_samples, n_outputs)
        Lazy predictions (``.compute()`` them), with the row blocks of ``X``.
    y_std : dask.array.Array of the same shape
        Only when ``return_std``.

    Raises
    ------
    TypeError
        If ``X`` is not a dask array.
    sklearn.exceptions.NotFittedError
        If the estimator is not fitted.

    See Also
    --------
    predict_proba_blocks : class probabilities on a dask array.
    Incremental : dask-ml's wrapper whose ``predict`` accepts ``return_std``.

    Examples
    --------
    >>> import numpy as np
    >>> import dask.array as da
    >>> from skfilter import LoFiRegressor
    >>> from skfilter.dask import predict_blocks
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2)); y = X @ [1.0, -0.5] + 0.1 * rng.normal(size=200)
    >>> reg = LoFiRegressor(hidden_layer_sizes=(), random_state=0).fit(X, y)
    >>> mean, std = predict_blocks(reg, da.from_array(X, chunks=(64, 2)), return_std=True)
    >>> mean.chunks
    ((64, 64, 64, 8),)
    >>> m, s = reg.predict(X, return_std=True)
    >>> bool(np.allclose(mean.compute(), m) and np.allclose(std.compute(), s))
    True
    """
    X = _as_row_blocked(X, "predict_blocks")
    check_is_fitted(estimator)
    if not return_std:
        meta = np.asarray(_probe(lambda Z: estimator.predict(Z, **predict_params), X))
        return X.map_blocks(_predict, estimator, predict_params, meta[:0], dtype=meta.dtype, meta=meta[:0],
                            chunks=_row_chunks(X, meta.shape[1:]), drop_axis=1 if meta.ndim == 1 else ())
    mean, _ = _probe(lambda Z: estimator.predict(Z, return_std=True, **predict_params), X)
    mean = np.asarray(mean)
    # one task per block returns mean and std stacked on a last axis of length 2
    stacked_shape = mean.shape[1:] + (2,)
    empty = np.empty((0,) + stacked_shape, dtype=mean.dtype)
    stacked = X.map_blocks(_predict_mean_and_std, estimator, predict_params, empty, dtype=mean.dtype, meta=empty,
                           chunks=_row_chunks(X, stacked_shape), new_axis=2 if mean.ndim == 2 else None)
    return stacked[..., 0], stacked[..., 1]


def predict_proba_blocks(estimator, X):
    """``estimator.predict_proba`` on a dask array, one task per block of rows.

    Parameters
    ----------
    estimator : fitted classifier
        Any fitted estimator with ``predict_proba`` (a skfilter classifier, wrapper or
        :class:`~skfilter.pipeline.PartialPipeline` ending in one).
    X : dask.array.Array of shape (n_samples, n_features)
        Blocked along the rows.

    Returns
    -------
    proba : dask.array.Array of shape (n_samples, n_classes)
        Lazy class probabilities, columns in the order of ``estimator.classes_``.

    See Also
    --------
    predict_blocks : predictions (and predictive standard deviations) on a dask array.

    Examples
    --------
    >>> import numpy as np
    >>> import dask.array as da
    >>> from skfilter import LoFiClassifier
    >>> from skfilter.dask import predict_proba_blocks
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2)); y = np.where(X[:, 0] > 0, "up", "down")
    >>> clf = LoFiClassifier(hidden_layer_sizes=(), random_state=0).fit(X, y)
    >>> proba = predict_proba_blocks(clf, da.from_array(X, chunks=(50, 2)))
    >>> proba.shape
    (200, 2)
    >>> bool(np.allclose(proba.compute(), clf.predict_proba(X)))
    True
    """
    X = _as_row_blocked(X, "predict_proba_blocks")
    check_is_fitted(estimator)
    meta = np.asarray(_probe(estimator.predict_proba, X))
    return X.map_blocks(_predict_proba, estimator, meta[:0], dtype=meta.dtype, meta=meta[:0],
                        chunks=_row_chunks(X, meta.shape[1:]))


class Incremental(_DaskMLIncremental):
    """:class:`dask_ml.wrappers.Incremental` whose ``predict`` also returns the predictive std.

    ``fit(X, y)`` on dask arrays clones the estimator and calls its ``partial_fit`` on one block
    after the other (``partial_fit`` continues from the fitted estimator); keyword arguments such
    as ``classes=`` reach every call. Everything but prediction is dask-ml's, parameters and
    defaults included. On a dask array, ``predict(X, return_std=True)`` returns a ``(mean, std)``
    pair of dask arrays (:func:`predict_blocks`) and ``predict_proba`` a dask array
    (:func:`predict_proba_blocks`), one task per block, empty blocks included.

    A filter learns its rows in order. Dask-ML's default ``shuffle_blocks=True`` feeds the blocks
    in a random order (seeded by ``random_state``): right for exchangeable rows, wrong for a time
    series — pass ``shuffle_blocks=False`` there (and for changepoint detection with the BOCD
    wrappers, whose run lengths are meaningless across shuffled blocks).

    Parameters
    ----------
    estimator : estimator with partial_fit
        A skfilter estimator, wrapper or :class:`~skfilter.pipeline.PartialPipeline`.
    scoring : str or callable, default=None
        As in dask-ml. (With dask-ml 2025.1 and dask 2026.8, the default ``'r2'`` of a regressor's
        ``score`` fails inside dask-ml on dask arrays; compute the predictions and score them with
        scikit-learn instead.)
    shuffle_blocks : bool, default=True
        Feed the blocks in a random order (dask-ml's default). ``False`` keeps their order.
    random_state : int, RandomState instance or None, default=None
        Seeds the order of the blocks when they are shuffled.
    assume_equal_chunks : bool, default=True
        As in dask-ml.
    predict_meta, predict_proba_meta, transform_meta : array-like, default=None
        As in dask-ml (output metadata; inferred when ``None``).

    Attributes
    ----------
    estimator_ : estimator
        The fitted estimator (a clone of ``estimator``).

    See Also
    --------
    predict_blocks, predict_proba_blocks

    Examples
    --------
    >>> import numpy as np
    >>> import dask.array as da
    >>> from skfilter import LoFiRegressor
    >>> from skfilter.dask import Incremental
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); y = X @ [1.0, -0.5] + 0.1 * rng.normal(size=300)
    >>> Xd, yd = da.from_array(X, chunks=(100, 2)), da.from_array(y, chunks=100)
    >>> inc = Incremental(LoFiRegressor(hidden_layer_sizes=(), random_state=0), shuffle_blocks=False)
    >>> inc = inc.fit(Xd, yd)
    >>> mean, std = inc.predict(Xd, return_std=True)
    >>> mean.compute().shape, bool(std.min().compute() > 0)
    ((300,), True)

    The blocks went through ``partial_fit`` in order, as one in-memory pass would:

    >>> reference = LoFiRegressor(hidden_layer_sizes=(), random_state=0)
    >>> for start in range(0, 300, 100):
    ...     reference = reference.partial_fit(X[start:start + 100], y[start:start + 100])
    >>> bool(np.allclose(mean.compute(), reference.predict(X)))
    True

    On a ``dask.distributed`` cluster (here an in-process one) the same calls run on its workers:

    >>> import dask
    >>> from dask.distributed import Client, LocalCluster
    >>> with LocalCluster(processes=False, n_workers=1, threads_per_worker=1,
    ...                   dashboard_address=":0") as cluster, Client(cluster):
    ...     inc = inc.partial_fit(Xd, yd)  # a second pass over the blocks
    ...     mean, std = dask.compute(*inc.predict(Xd, return_std=True))
    >>> inc.estimator_.n_samples_seen_, mean.shape
    (600, (300,))
    """

    def predict(self, X, return_std=False, **predict_params):
        """Predict for ``X``, block by block for a dask array.

        Parameters
        ----------
        X : dask.array.Array, dask DataFrame or array-like of shape (n_samples, n_features)
            A dask array gives dask arrays (:func:`predict_blocks`); a dask DataFrame gives
            dask-ml's output (no ``return_std``); an in-memory array gives the estimator's own.
        return_std : bool, default=False
            Also return the predictive standard deviation (regressors).
        **predict_params
            Further keyword arguments of the wrapped estimator's ``predict``.

        Returns
        -------
        y_mean : dask.array.Array or ndarray of shape (n_samples,) or (n_samples, n_outputs)
        y_std : same type and shape
            Only when ``return_std``.
        """
        self._check_method("predict")
        estimator = self._postfit_estimator
        if isinstance(X, da.Array):
            return predict_blocks(estimator, X, return_std=return_std, **predict_params)
        if not return_std and not predict_params:
            return super().predict(X)
        if hasattr(X, "npartitions"):
            raise TypeError("Incremental.predict: return_std and predict keywords need a dask array, not a dask "
                            "DataFrame; convert it with X.to_dask_array(lengths=True).")
        return estimator.predict(X, return_std=return_std, **predict_params)

    def predict_proba(self, X):
        """Class probabilities for ``X``, block by block for a dask array.

        Parameters
        ----------
        X : dask.array.Array, dask DataFrame or array-like of shape (n_samples, n_features)
            A dask array gives a dask array (:func:`predict_proba_blocks`); other inputs are
            handled as by dask-ml.

        Returns
        -------
        proba : dask.array.Array or ndarray of shape (n_samples, n_classes)
        """
        self._check_method("predict_proba")
        if isinstance(X, da.Array):
            return predict_proba_blocks(self._postfit_estimator, X)
        return super().predict_proba(X)
