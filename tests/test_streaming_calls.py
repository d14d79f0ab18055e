"""Row-by-row streaming (issue 18, per-call overhead): NumPy rows take a fast validation path in
``partial_fit``/``predict`` of a fitted estimator; every other input takes scikit-learn's path. Both
must learn and predict the same, and raise the same errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from skfilter import EKFClassifier, LoFiRegressor


def _stream(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)


def test_numpy_rows_and_lists_learn_the_same():
    X, y = _stream()
    a = LoFiRegressor(hidden_layer_sizes=(5,), rank=2, random_state=0).partial_fit(X[:5], y[:5])
    b = LoFiRegressor(hidden_layer_sizes=(5,), rank=2, random_state=0).partial_fit(X[:5], y[:5])
    for i in range(5, 40):
        a.partial_fit(X[i:i + 1], y[i:i + 1])  # fast path
        b.partial_fit(X[i:i + 1].tolist(), y[i:i + 1].tolist())  # scikit-learn's path
    np.testing.assert_array_equal(a.posterior_.mean.numpy(), b.posterior_.mean.numpy())
    np.testing.assert_array_equal(a.predict(X[:3]), b.predict(X[:3].tolist()))


@pytest.mark.parametrize("bad, error", [
    (lambda X, y: (X[:, :2], y), "features"),
    (lambda X, y: (np.where(X == X[0, 0], np.nan, X), y), "NaN"),
    (lambda X, y: (X, np.full_like(y, np.inf)), "infinity"),
    (lambda X, y: (X, y[:-1]), "inconsistent"),
    (lambda X, y: (np.ones(X.shape, dtype=np.int64), y), None),
])
def test_errors_on_the_fast_path_are_scikit_learns(bad, error):
    X, y = _stream()
    est = LoFiRegressor(hidden_layer_sizes=(5,), rank=2, random_state=0).partial_fit(X[:5], y[:5])
    Xb, yb = bad(X[5:10], y[5:10])
    if error is None:  # an int array takes scikit-learn's path and is converted
        est.partial_fit(Xb, yb)
        return
    before = est.posterior_.mean.clone()
    with pytest.raises(ValueError, match=error):
        est.partial_fit(Xb, yb)
    np.testing.assert_array_equal(est.posterior_.mean.numpy(), before.numpy())


def test_feature_names_keep_scikit_learns_checks():
    X, y = _stream()
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    est = LoFiRegressor(hidden_layer_sizes=(5,), rank=2, random_state=0).partial_fit(df[:5], y[:5])
    with pytest.warns(UserWarning, match="feature names"):
        est.partial_fit(X[5:6], y[5:6])
    with pytest.raises(ValueError, match="feature names"):
        est.partial_fit(df[["b", "a", "c"]][5:6], y[5:6])


def test_classifier_labels_on_the_fast_path():
    X, y = _stream()
    labels = np.where(y > 0, "up", "down")
    clf = EKFClassifier(hidden_layer_sizes=(4,), random_state=0).partial_fit(X[:5], labels[:5],
                                                                           classes=["down", "up"])
    for i in range(5, 40):
        clf.partial_fit(X[i:i + 1], labels[i:i + 1])
    assert set(clf.predict(X)) <= {"down", "up"}
    with pytest.raises(ValueError):
        clf.partial_fit(X[:1], np.array(["sideways"]))


def test_module_reflects_the_current_mean():
    X, y = _stream()
    est = LoFiRegressor(hidden_layer_sizes=(5,), rank=2, random_state=0).fit(X, y)
    import torch

    flat = torch.cat([p.detach().reshape(-1) for p in est.module_.parameters()])
    np.testing.assert_array_equal(flat.numpy(), est.posterior_.mean.numpy())
    est.partial_fit(X[:3], y[:3])
    flat = torch.cat([p.detach().reshape(-1) for p in est.module_.parameters()])
    np.testing.assert_array_equal(flat.numpy(), est.posterior_.mean.numpy())
