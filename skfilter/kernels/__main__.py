"""``python -m skfilter.kernels``: compile the kernels now (float64 and float32) into numba's on-disk
cache, so that the first fit does not pay for it (``make install`` runs this once)."""

from __future__ import annotations

import sys
import time


def warm_up(verbose=True) -> float:
    """Fit a tiny stream with every kernel in both dtypes (compiling and caching each); returns
    the seconds it took."""
    import numpy as np

    from .. import BOCDRegressor, EKFRegressor, HiLoFiRegressor, LoFiRegressor
    from . import AVAILABLE, compiled_kernels

    if not AVAILABLE:
        if verbose:
            print("numba is not installed: the compiled kernels are off.")
        return 0.0
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(8, 2)), rng.normal(size=8)
    t0 = time.perf_counter()
    with compiled_kernels(True):
        for dtype in ("float64", "float32"):
            for est in (LoFiRegressor(hidden_layer_sizes=(3,), rank=2, dtype=dtype),
                        EKFRegressor(hidden_layer_sizes=(3,), covariance="vd", dtype=dtype),
                        EKFRegressor(hidden_layer_sizes=(3,), covariance="full", dtype=dtype),
                        HiLoFiRegressor(hidden_layer_sizes=(3,), hidden_rank=2, dtype=dtype),
                        BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(3,), rank=2, dtype=dtype), n_hypotheses=2),
                        BOCDRegressor(HiLoFiRegressor(hidden_layer_sizes=(3,), hidden_rank=2, dtype=dtype),
                                      n_hypotheses=2),
                        BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(3,), rank=2, dtype=dtype), n_hypotheses=1,
                                      reset="ou")):
                est.fit(X, y)
                est.predict(X[:2], return_std=True)
        _warm_up_factorization()
        _warm_up_stacked()
    seconds = time.perf_counter() - t0
    if verbose:
        print(f"skfilter kernels compiled and cached in {seconds:.1f} s.")
    return seconds


def _warm_up_factorization():
    """The factorization DEKF kernels (:mod:`skfilter.kernels.factorization`, one variant per dtype) in both
    dtypes: a FactorizationRegressor fit, then a chunk through
    :func:`~skfilter.kernels.factorization.run_events_compiled` directly; a three-class
    FactorizationClassifier (the multiclass kernel)."""
    import numpy as np
    import torch

    from .. import FactorizationClassifier, FactorizationRegressor
    from .factorization import run_events_compiled, serves

    rng = np.random.default_rng(0)
    X = rng.integers(0, 4, size=(8, 2)).astype(object)
    y = rng.normal(size=8)
    for dtype in ("float64", "float32"):
        est = FactorizationRegressor(model="mf", n_factors=2, entity_columns=[0, 1], random_state=0, dtype=dtype)
        est.fit(X[:4], y[:4])
        filt = est.filter_
        if serves(filt):
            ids, context = est._split_columns(X[4:], False)
            Y = torch.as_tensor(y[4:, None], dtype=filt.dtype)
            run_events_compiled(filt, est._slot_ids(ids), est._slot_values(ids, context), Y, None)
        # the multiclass variant (three classes: factorization_events_multi)
        FactorizationClassifier(model="mf", n_factors=2, entity_columns=[0, 1], random_state=0,
                                dtype=dtype).fit(X, np.arange(8) % 3).predict_proba(X[:2])


def _warm_up_stacked():
    """The large-network LoFi step's first pass (:func:`~skfilter.kernels.stacked.stacked_row_products`)
    in both dtypes, on small arrays (the estimators take it from ``P = 100,000`` parameters on)."""
    import numpy as np

    from .stacked import stacked_row_products

    for dt in (np.float64, np.float32):
        W, J, ups = np.ones((2, 5), dt), np.ones((1, 5), dt), np.ones(5, dt)
        stacked_row_products(W, J, ups, np.empty((3, 6), dt), dt(0), dt(1))


if __name__ == "__main__":  # pragma: no cover - a command
    warm_up()
    sys.exit(0)
