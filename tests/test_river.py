"""river users (issue 19): river's ``compat.convert_sklearn_to_river`` bridge runs skfilter's
estimators one dict at a time, exactly as ``partial_fit``/``predict`` on single rows; the recipes
of doc/river.md run as printed."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("river", reason="river not installed (the river and dev extras install it)")

import pandas as pd  # noqa: E402
from river import compat  # noqa: E402
from sklearn.base import clone  # noqa: E402

from skfilter import BOCDRegressor, LoFiClassifier, LoFiRegressor, WoLFRegressor  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "doc" / "river.md"
FEATURES = ["a", "b", "c"]


def _stream(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.tanh(X @ [1.0, -1.0, 0.5]) + 0.1 * rng.normal(size=n)
    return X, y


def _one_row_at_a_time(estimator, X, y, predict):
    """Prequential predictions of ``estimator`` fed one row per ``partial_fit`` (``None`` first)."""
    preds = []
    for i in range(len(y)):
        preds.append(predict(estimator, X[i:i + 1])[0] if i else None)
        estimator.partial_fit(X[i:i + 1], y[i:i + 1], **({"classes": [0, 1]} if "Classifier" in type(
            estimator).__name__ else {}))
    return preds


@pytest.mark.parametrize("estimator", [
    LoFiRegressor(hidden_layer_sizes=(8,), random_state=0),
    WoLFRegressor(LoFiRegressor(hidden_layer_sizes=(8,), random_state=0)),
    BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(8,), random_state=0), n_hypotheses=3),
], ids=["lofi", "wolf", "bocd"])
def test_learn_one_predict_one_equal_partial_fit_on_single_rows(estimator):
    X, y = _stream()
    model = compat.convert_sklearn_to_river(clone(estimator))
    got = []
    for row, target in zip(X, y):
        x = dict(zip(FEATURES, row))
        got.append(model.predict_one(x))
        model.learn_one(x, target)
    want = _one_row_at_a_time(clone(estimator), X, y, lambda est, Z: est.predict(Z))
    assert got[0] == 0  # river's converter before the first learn_one
    np.testing.assert_array_equal(got[1:], want[1:])
    # the converter learns on its own copy, exposed as ``estimator``
    assert not hasattr(estimator, "filter_state_") and not hasattr(estimator, "estimator_")
    mean, std = model.estimator.predict(X[:5], return_std=True)
    one_by_one = [model.predict_one(dict(zip(FEATURES, row))) for row in X[:5]]
    np.testing.assert_allclose(mean, one_by_one, rtol=1e-12)  # batch of 5 vs single rows: rounding
    assert np.all(std > 0)


def test_classifier_predict_proba_one_and_key_order():
    X, y = _stream()
    labels = (y > 0).astype(int)
    model = compat.convert_sklearn_to_river(LoFiClassifier(hidden_layer_sizes=(8,), random_state=0), classes=[0, 1])
    for row, target in zip(X, labels):
        model.learn_one(dict(zip(FEATURES, row)), target)
    reference = LoFiClassifier(hidden_layer_sizes=(8,), random_state=0)
    for i in range(len(labels)):
        reference.partial_fit(X[i:i + 1], labels[i:i + 1], classes=[0, 1])
    shuffled_keys = {"c": X[0, 2], "a": X[0, 0], "b": X[0, 1]}  # the converter reorders by the first dict
    proba = model.predict_proba_one(shuffled_keys)
    np.testing.assert_allclose([proba[0], proba[1]], reference.predict_proba(X[:1])[0], rtol=0, atol=0)
    assert model.predict_one(shuffled_keys) == reference.predict(X[:1])[0]


def test_warm_up_on_a_batch_then_learn_one():
    X, y = _stream()
    reference = LoFiRegressor(hidden_layer_sizes=(8,), random_state=0).partial_fit(X[:40], y[:40])
    for i in range(40, len(y)):
        reference.partial_fit(X[i:i + 1], y[i:i + 1])
    # the recipe of doc/river.md: the wrapped estimator's partial_fit on an array in the fixed order
    model = compat.convert_sklearn_to_river(LoFiRegressor(hidden_layer_sizes=(8,), random_state=0))
    model.estimator.partial_fit(X[:40], y[:40])
    for row, target in zip(X[40:], y[40:]):
        model.learn_one(dict(zip(FEATURES, row)), target)
    np.testing.assert_array_equal(model.estimator.predict(X), reference.predict(X))
    # river's learn_many passes a DataFrame: the same rows, to rounding (another memory layout),
    # and the estimator then holds feature names that the one-row lists lack
    batched = compat.convert_sklearn_to_river(LoFiRegressor(hidden_layer_sizes=(8,), random_state=0))
    batched.learn_many(pd.DataFrame(X[:40], columns=FEATURES), pd.Series(y[:40]))
    with pytest.warns(UserWarning, match="feature names"):
        for row, target in zip(X[40:], y[40:]):
            batched.learn_one(dict(zip(FEATURES, row)), target)
    np.testing.assert_allclose(batched.estimator.predict(pd.DataFrame(X, columns=FEATURES)), reference.predict(X),
                               rtol=1e-10)


def _doc_blocks():
    return re.findall(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)


def test_the_recipes_of_doc_river_run_as_printed(capsys):
    blocks = _doc_blocks()
    assert len(blocks) == 3
    ns: dict = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"doc/river.md:{i}", "exec"), ns)
    out = capsys.readouterr().out
    # the numbers the page prints (since issue 29: the prior of the stream's first 50 rows, formerly
    # MAE: 54.975282 and Accuracy: 89.84%; since issue 30 the classifiers' assumed-density update,
    # formerly Accuracy: 89.92%, then 89.52% until the classifiers' wider 'auto' prior; doc/river.md
    # says what changed them)
    assert "MAE: 49.748082" in out and "Accuracy: 90.40%" in out, out
    mean, std = ns["mean"], ns["std"]
    assert mean.shape == std.shape == (1,) and std[0] > 0
    x, features = ns["x"], ns["features"]
    assert list(x) != features  # the dict's keys come in another order ...
    assert mean[0] == ns["model"].predict_one(x)  # ... and the row is still the converter's
