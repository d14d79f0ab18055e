"""Defaults never diverge from a small or unrepresentative start (issue 29, item 4): every estimator
family with default parameters, fed raw real streams one row per call from row 0 (a prediction
before each row, then ``partial_fit`` of it), raises no ``FilterStepError`` and predicts finite
values — on scikit-learn's bundled sets, the UCI sets in ``../shared`` (a binary target for the
classifiers: above the median), a wide stream (≥ 500 features) and streams whose features are
constant in the rows that set the prior and vary later (UCI concrete's fly ash: 0 in its first 50
rows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn import datasets

import skfilter
import skfilter.datasets

UCI_HOME = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "uci"

#: rows of each stream (the default prior is fixed by the first 50, so most rows come after it)
N_ROWS = 110


def _uci(name):
    if name == "concrete":
        data = skfilter.datasets.load_uci("concrete")
    else:
        if not (UCI_HOME / name).exists():
            pytest.skip(f"the UCI set {name} is not in {UCI_HOME}")
        data = skfilter.datasets.load_uci(name, data_home=UCI_HOME)
    return np.asarray(data.data, dtype=float), np.asarray(data.target, dtype=float).ravel()


def _wide_digits():
    """Digits at 3× resolution: 576 raw pixel features in 0..16, the border ones 0 for many rows."""
    X, y = datasets.load_digits(return_X_y=True)
    return np.kron(X.reshape(-1, 8, 8), np.ones((3, 3))).reshape(len(X), -1), y.astype(float)


LOADERS = {
    "diabetes": lambda: datasets.load_diabetes(return_X_y=True),
    "breast_cancer": lambda: datasets.load_breast_cancer(return_X_y=True),
    "wine": lambda: datasets.load_wine(return_X_y=True),
    "digits-576": _wide_digits,
    "concrete": lambda: _uci("concrete"),
    "energy": lambda: _uci("energy"),
    "naval-propulsion-plant": lambda: _uci("naval-propulsion-plant"),
    "yacht": lambda: _uci("yacht"),
    "kin8nm": lambda: _uci("kin8nm"),
}


def _stream(name, kind, n=N_ROWS):
    """The first ``n`` rows of a dataset in its own order (sorted and grouped rows included), raw;
    classification: the dataset's classes, or a regression target above its median."""
    X, y = LOADERS[name]()
    if name == "digits-576":  # a wide stream: fewer rows (its steps cost ~100× concrete's)
        n = min(n, 25)
    X, y = np.asarray(X, dtype=float)[:n], np.asarray(y, dtype=float)[:n]
    if kind == "classifier" and name in ("diabetes", "concrete", "energy", "naval-propulsion-plant", "yacht",
                                          "kin8nm"):
        y = (y > np.median(y)).astype(int)
    return X, y


def _make(family, kind):
    K = "Regressor" if kind == "regressor" else "Classifier"
    if family in ("WoLF", "BOCD"):
        return getattr(skfilter, family + K)()
    return getattr(skfilter, family + K)(random_state=0)


def _row_by_row(est, X, y, kind):
    classes = np.unique(y) if kind == "classifier" else None
    est.partial_fit(X[:1], y[:1], **({"classes": classes} if classes is not None else {}))
    for t in range(1, X.shape[0]):
        out = est.predict_proba(X[t:t + 1]) if kind == "classifier" else est.predict(X[t:t + 1])
        assert np.isfinite(out).all(), f"row {t}: non-finite prediction {out}"
        est.partial_fit(X[t:t + 1], y[t:t + 1])
    return est


CASES = (
    [("LoFi", kind, name) for name in LOADERS for kind in ("regressor", "classifier")
     if not (name in ("breast_cancer", "wine", "digits-576") and kind == "regressor")
     and not (name == "naval-propulsion-plant" and kind == "classifier")]  # one class in its first rows
    + [("EKF", kind, name) for name in ("diabetes", "concrete", "wine", "naval-propulsion-plant")
       for kind in ("regressor", "classifier") if not (name == "wine" and kind == "regressor")
       and not (name == "naval-propulsion-plant" and kind == "classifier")]
    + [(family, kind, "concrete") for family in ("LRKF", "HiLoFi", "LoLoFi", "WoLF")
       for kind in ("regressor", "classifier")]
    + [("LoLoFi", "classifier", "breast_cancer"),
       ("HiLoFi", "regressor", "yacht")]
)


@pytest.mark.parametrize("family, kind, name", CASES)
def test_defaults_learn_row_by_row_from_row_0(family, kind, name):
    X, y = _stream(name, kind)
    est = _row_by_row(_make(family, kind), X, y, kind)
    assert est.n_samples_seen_ == X.shape[0]


@pytest.mark.parametrize("family, kind", [("BOCD", "regressor"), ("BOCD", "classifier"), ("Subspace", "regressor"),
                                          ("PULSE", "classifier")])
def test_slow_families_learn_row_by_row_from_row_0(family, kind):
    """The run-length mixture and the subspace filters (which warm up again at every call of their
    first rows) on a shorter stream of concrete, its fly-ash column constant throughout the rows
    that set the prior."""
    X, y = _stream("concrete", kind, n=60)
    est = _make(family, kind)
    if family in ("Subspace", "PULSE"):
        est.set_params(warmup=30)
    _row_by_row(est, X, y, kind)


@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_factorization_defaults_learn_row_by_row(kind):
    rng = np.random.default_rng(0)
    users, items = rng.integers(0, 20, 80), rng.integers(0, 15, 80)
    X = np.column_stack([users, items, rng.normal(size=80) * 100])
    y = users % 3 + items % 2 + 0.1 * rng.normal(size=80)
    if kind == "classifier":
        y = (y > np.median(y)).astype(int)
    est = getattr(skfilter, "Factorization" + ("Regressor" if kind == "regressor" else "Classifier"))(
        entity_columns=[0, 1])
    _row_by_row(est, X, y, kind)
