"""Dask (issue 19): dask-ml's ``Incremental`` with its defaults streams dask-array blocks into the
filters' ``partial_fit``; predictions with ``return_std`` and ``predict_proba`` on dask arrays
(:mod:`skfilter.dask`); ``GridSearchCV`` on a ``dask.distributed`` cluster through joblib's dask
backend. Everything runs against real ``LocalCluster`` schedulers."""

from __future__ import annotations

import importlib
import itertools
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("dask.array", reason="dask extra not installed")
pytest.importorskip("distributed", reason="dask extra not installed")
pytest.importorskip("dask_ml", reason="dask extra not installed")

import dask  # noqa: E402
import dask.array as da  # noqa: E402
import dask.dataframe as dd  # noqa: E402
import pandas as pd  # noqa: E402
import joblib  # noqa: E402
from dask_ml.wrappers import Incremental as DaskMLIncremental  # noqa: E402
from distributed import Client, LocalCluster, get_task_stream  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402
from sklearn.model_selection import GridSearchCV, TimeSeriesSplit  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from skfilter import (BOCDClassifier, BOCDRegressor, EKFClassifier, LoFiClassifier,  # noqa: E402
                      LoFiRegressor, WoLFRegressor, make_partial_pipeline)
from skfilter.dask import Incremental, predict_blocks, predict_proba_blocks  # noqa: E402

#: blocks of different sizes, one of a single row
CHUNKS = (60, 1, 89)


@pytest.fixture(scope="module")
def client():
    """An in-process distributed cluster (threads): dask-ml's graphs run on a real scheduler."""
    with LocalCluster(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=":0") as cluster, \
            Client(cluster) as c:
        yield c


def _data(n=150, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.tanh(X @ np.linspace(1.0, -1.0, d)) + 0.1 * rng.normal(size=n)
    return X, y


def _labels(y):
    return np.where(y > 0, "up", "down")


def _blocks(a):
    bounds = np.cumsum((0,) + CHUNKS)
    return [a[start:stop] for start, stop in zip(bounds[:-1], bounds[1:])]


def _dask(a, rows=CHUNKS):
    return da.from_array(a, chunks=(rows,) + a.shape[1:])


def _stream(estimator, X, y, order, **kwargs):
    """``estimator`` (a clone) after ``partial_fit`` on the blocks of ``CHUNKS`` in ``order``."""
    est = clone(estimator)
    Xb, yb = _blocks(X), _blocks(y)
    for i in order:
        est.partial_fit(Xb[i], yb[i], **kwargs)
    return est


def _matching_block_order(fitted, estimator, X, y, **kwargs):
    """The block orders whose in-memory ``partial_fit`` stream predicts exactly as ``fitted``."""
    method = "predict_proba" if hasattr(fitted, "predict_proba") else "predict"
    target = getattr(fitted, method)(X)
    return [order for order in itertools.permutations(range(len(CHUNKS)))
            if np.array_equal(getattr(_stream(estimator, X, y, order, **kwargs), method)(X), target)]


def _assert_close(blockwise, whole):
    """Block-by-block predictions equal those on all rows at once to rounding: torch's batched
    products sum in an order that depends on the batch size (differences of about 1e-16)."""
    np.testing.assert_allclose(blockwise, whole, rtol=1e-12, atol=1e-15)


def _small_lofi(**kw):
    return LoFiRegressor(hidden_layer_sizes=(8,), rank=3, random_state=0, **kw)


# -- dask-ml's Incremental with its defaults ----------------------------------------------------


@pytest.mark.parametrize("estimator", [
    _small_lofi(),
    WoLFRegressor(_small_lofi()),
    BOCDRegressor(_small_lofi(), n_hypotheses=3),
    make_partial_pipeline(StandardScaler(), _small_lofi()),
], ids=["lofi", "wolf", "bocd", "partial_pipeline"])
def test_dask_ml_incremental_defaults_stream_every_block_once_into_partial_fit(client, estimator):
    X, y = _data()
    inc = DaskMLIncremental(estimator, random_state=0)  # shuffle_blocks=True, as dask-ml's default
    assert inc.get_params()["shuffle_blocks"] is True
    inc.fit(_dask(X), _dask(y))
    # the fitted estimator is the in-memory stream of the three blocks in one (shuffled) order
    assert len(_matching_block_order(inc.estimator_, estimator, X, y)) == 1
    pred = inc.predict(_dask(X))
    assert isinstance(pred, da.Array)
    _assert_close(pred.compute(), inc.estimator_.predict(X))


@pytest.mark.parametrize("estimator", [EKFClassifier(hidden_layer_sizes=(8,), random_state=0),
                                       BOCDClassifier(LoFiClassifier(hidden_layer_sizes=(8,), random_state=0),
                                                      n_hypotheses=3)],
                         ids=["ekf", "bocd"])
def test_dask_ml_incremental_defaults_for_a_classifier_with_classes(client, estimator):
    X, y = _data()
    labels = _labels(y)
    inc = DaskMLIncremental(estimator, random_state=1).fit(_dask(X), _dask(labels), classes=["down", "up"])
    assert list(inc.estimator_.classes_) == ["down", "up"]
    assert len(_matching_block_order(inc.estimator_, estimator, X, labels, classes=["down", "up"])) == 1
    proba = inc.predict_proba(_dask(X))
    _assert_close(proba.compute(), inc.estimator_.predict_proba(X))
    np.testing.assert_array_equal(inc.predict(_dask(X)).compute(), inc.estimator_.predict(X))


def test_shuffle_blocks_false_keeps_time_order(client):
    X, y = _data()
    inc = Incremental(_small_lofi(), shuffle_blocks=False).fit(_dask(X), _dask(y))
    reference = _stream(_small_lofi(), X, y, range(len(CHUNKS)))
    np.testing.assert_array_equal(inc.predict(X), reference.predict(X))


def test_partial_fit_continues_from_the_fitted_estimator(client):
    X, y = _data()
    inc = Incremental(_small_lofi(), shuffle_blocks=False).fit(_dask(X[:100], 50), _dask(y[:100], 50))
    inc.partial_fit(_dask(X[100:], 50), _dask(y[100:], 50))
    reference = _small_lofi()
    for start in range(0, 150, 50):
        reference.partial_fit(X[start:start + 50], y[start:start + 50])
    np.testing.assert_array_equal(inc.predict(X), reference.predict(X))


# -- predictions with return_std / predict_proba on dask arrays ---------------------------------


@pytest.mark.parametrize("estimator", [
    _small_lofi(),
    WoLFRegressor(_small_lofi()),
    BOCDRegressor(_small_lofi(), n_hypotheses=3),
    make_partial_pipeline(StandardScaler(), _small_lofi()),
], ids=["lofi", "wolf", "bocd", "partial_pipeline"])
def test_incremental_predict_return_std_on_dask_equals_in_memory(client, estimator):
    X, y = _data()
    inc = Incremental(estimator, random_state=0).fit(_dask(X), _dask(y))
    mean, std = inc.predict(_dask(X), return_std=True)
    assert isinstance(mean, da.Array) and isinstance(std, da.Array)
    assert mean.chunks == std.chunks == (CHUNKS,)
    m, s = inc.estimator_.predict(X, return_std=True)
    _assert_close(mean.compute(), m)
    _assert_close(std.compute(), s)
    assert np.all(s > 0)
    # in-memory input: the estimator's own output; no keyword: the mean alone, as a dask array
    for got, want in zip(inc.predict(X, return_std=True), (m, s)):
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, want)
    _assert_close(inc.predict(_dask(X)).compute(), m)


def test_predict_blocks_passes_keywords_and_handles_multi_output_and_unknown_chunks(client):
    X, y = _data()
    Y = np.column_stack([y, -2 * y])
    reg = _small_lofi().fit(X, Y)
    Xd = _dask(X)
    mean, std = predict_blocks(reg, Xd, return_std=True, include_noise=False)
    m, s = reg.predict(X, return_std=True, include_noise=False)
    assert mean.shape == std.shape == (150, 2)
    _assert_close(mean.compute(), m)
    _assert_close(std.compute(), s)
    assert np.all(s < reg.predict(X, return_std=True)[1])  # epistemic only: smaller than with the noise
    _assert_close(predict_blocks(reg, Xd).compute(), m)
    # blocks of unknown sizes (a boolean mask) and blocked columns
    keep = X[:, 0] > 0
    keep[60] = False  # the one-row block becomes empty
    masked = Xd[da.from_array(keep, chunks=(CHUNKS,))]
    assert np.isnan(masked.chunks[0]).any()
    assert [block.shape[0] for block in dask.compute(*masked.to_delayed().ravel())][1] == 0
    _assert_close(predict_blocks(reg, masked).compute(), reg.predict(X[keep]))
    by_columns = da.from_array(X, chunks=(50, 1))
    _assert_close(predict_blocks(reg, by_columns, return_std=True)[1].compute(),
                                  reg.predict(X, return_std=True)[1])


def test_incremental_predicts_on_empty_blocks_and_dataframes(client):
    X, y = _data()
    inc = Incremental(_small_lofi(), shuffle_blocks=False).fit(_dask(X), _dask(y))
    keep = X[:, 0] > 0
    keep[60] = False  # the one-row block becomes empty
    masked = _dask(X)[da.from_array(keep, chunks=(CHUNKS,))]
    mean, std = inc.predict(masked, return_std=True)
    _assert_close(mean.compute(), inc.estimator_.predict(X[keep]))
    _assert_close(std.compute(), inc.estimator_.predict(X[keep], return_std=True)[1])
    _assert_close(inc.predict(masked).compute(), inc.estimator_.predict(X[keep]))
    frame = dd.from_pandas(pd.DataFrame(X), npartitions=3)
    _assert_close(np.asarray(inc.predict(frame).compute()), inc.estimator_.predict(X))
    with pytest.raises(TypeError, match="to_dask_array"):
        inc.predict(frame, return_std=True)
    labels = _labels(y)
    clf = Incremental(LoFiClassifier(hidden_layer_sizes=(8,), random_state=0), shuffle_blocks=False)
    clf.fit(_dask(X), _dask(labels), classes=["down", "up"])
    _assert_close(clf.predict_proba(masked).compute(), clf.estimator_.predict_proba(X[keep]))
    np.testing.assert_array_equal(clf.predict(masked).compute(), clf.estimator_.predict(X[keep]))


def test_predict_proba_blocks_equals_in_memory(client):
    X, y = _data()
    clf = LoFiClassifier(hidden_layer_sizes=(8,), random_state=0).fit(X, _labels(y))
    proba = predict_proba_blocks(clf, _dask(X))
    assert proba.chunks == (CHUNKS, (2,))
    np.testing.assert_array_equal(proba.compute(), clf.predict_proba(X))
    np.testing.assert_array_equal(predict_blocks(clf, _dask(X)).compute(), clf.predict(X))


def test_bad_input():
    X, y = _data()
    reg = _small_lofi()
    with pytest.raises(NotFittedError):
        predict_blocks(reg, _dask(X))
    reg.fit(X, y)
    with pytest.raises(TypeError, match="must be a dask array.*to_dask_array"):
        predict_blocks(reg, X)
    with pytest.raises(ValueError, match="must be 2-D"):
        predict_blocks(reg, _dask(y))
    with pytest.raises(NotFittedError):
        Incremental(_small_lofi()).predict(_dask(X), return_std=True)


# -- imports without the extra ------------------------------------------------------------------


def test_import_skfilter_does_not_import_dask():
    code = "import sys, skfilter, skfilter.model_selection, skfilter.pipeline; print('dask' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_import_skfilter_dask_without_the_extra_names_it(monkeypatch):
    for name in ("dask", "dask.array", "dask_ml", "dask_ml.wrappers"):
        monkeypatch.setitem(sys.modules, name, None)  # "not installed": importing it raises ImportError
    monkeypatch.delitem(sys.modules, "skfilter.dask")
    with pytest.raises(ImportError, match=r"skfilter\[dask\]"):
        importlib.import_module("skfilter.dask")
    monkeypatch.undo()
    assert importlib.import_module("skfilter.dask").predict_blocks is predict_blocks


# -- GridSearchCV on a two-process cluster through joblib's dask backend ------------------------


def test_grid_search_on_a_process_cluster_equals_the_sequential_one():
    X, y = _data(n=240)
    grid = {"obs_variance": [0.01, 0.1], "prior_variance": [0.1, 1.0], "rank": [1, 4]}
    search = GridSearchCV(LoFiRegressor(hidden_layer_sizes=(8,), random_state=0), grid,
                          cv=TimeSeriesSplit(n_splits=3))
    sequential = clone(search).fit(X, y)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as c:
        with get_task_stream(c) as tasks, joblib.parallel_config(backend="dask"):
            search.fit(X, y)
        addresses = set(c.scheduler_info()["workers"])
    assert len(addresses) == 2
    ran_on = {task["worker"] for task in tasks.data}
    assert ran_on and ran_on <= addresses  # the fits ran on the cluster's worker processes
    np.testing.assert_array_equal(search.cv_results_["mean_test_score"], sequential.cv_results_["mean_test_score"])
    assert search.best_params_ == sequential.best_params_
    np.testing.assert_array_equal(search.predict(X), sequential.predict(X))


# -- doc/scaling.md runs as printed ---------------------------------------------------------------


def test_the_scaling_page_runs_as_printed(capsys):
    """The page's blocks in order, as one script run as ``__main__`` (the Quick start's guard)."""
    page = (Path(__file__).resolve().parents[1] / "doc" / "scaling.md").read_text(encoding="utf-8")
    assert "## Quick start" in page
    blocks = re.findall(r"^```python\n(.*?)^```", page, flags=re.S | re.M)
    assert len(blocks) == 3
    ns: dict = {"__name__": "__main__"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"doc/scaling.md:{i}", "exec"), ns)
    search = ns["search"]
    assert set(search.best_params_) == {"obs_variance", "prior_variance", "rank"}
    assert search.best_score_ > 0.9  # R² of sin(x) + noise
    assert str(search.best_params_) in capsys.readouterr().out
    assert ns["proba"].shape == (600, 2)
    np.testing.assert_allclose(ns["proba"].compute().sum(axis=1), 1.0)
    mean, std = ns["mean"], ns["std"]
    _assert_close(mean.compute(), ns["fitted"].predict(ns["X"]))
    _assert_close(std.compute(), ns["fitted"].predict(ns["X"], return_std=True, include_noise=False)[1])
