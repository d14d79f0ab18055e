"""skfilter.plotting (issue 19): each figure on small synthetic data, headless (Agg), its artists and
labels, a PNG written; bad input raises ValueError; a clear ImportError without matplotlib."""

from __future__ import annotations

import sys

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from skfilter import BOCDRegressor, EKFClassifier, EKFRegressor, LoFiRegressor  # noqa: E402
from skfilter.model_selection import prequential_predict  # noqa: E402
from skfilter.plotting import (plot_coverage, plot_predictive_band, plot_prequential,  # noqa: E402
                               plot_reliability, plot_run_length)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _saved(ax, tmp_path, name):
    path = tmp_path / f"{name}.png"
    ax.figure.savefig(path)
    assert path.exists() and path.stat().st_size > 0
    return path


# -- data ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sine():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(120, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=120)
    reg = LoFiRegressor(hidden_layer_sizes=(16,), random_state=0).fit(X, y)
    return reg, X, y


@pytest.fixture(scope="module")
def linear_stream():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(150, 2))
    y = X @ [1.0, -2.0] + 0.1 * rng.normal(size=150)
    reg = EKFRegressor(hidden_layer_sizes=(), obs_variance=0.01, random_state=0)
    mean, std = prequential_predict(reg, X, y, return_std=True)
    return y, mean, std


@pytest.fixture(scope="module")
def class_stream():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(150, 2))
    y = np.where(X[:, 0] + X[:, 1] > 0.5, 2, np.where(X[:, 0] - X[:, 1] > 0, 1, 0))
    clf = EKFClassifier(hidden_layer_sizes=(), random_state=0)
    proba = prequential_predict(clf, X, y, method="predict_proba")
    return y, proba, clf.classes_


@pytest.fixture(scope="module")
def runlength_posterior():
    """Run-length posterior of a BOCD regressor learning a stream with a jump at row 40, row by row."""
    rng = np.random.default_rng(3)
    n = 80
    X = np.ones((n, 1))
    y = np.where(np.arange(n) < 40, 0.0, 3.0) + 0.1 * rng.normal(size=n)
    base = EKFRegressor(hidden_layer_sizes=(), prior_variance=4.0, obs_variance=0.01, random_state=0)
    bocd = BOCDRegressor(base, hazard=0.02, n_hypotheses=None)
    P = np.zeros((n, n + 1))
    for t in range(n):
        bocd.partial_fit(X[t:t + 1], y[t:t + 1])
        P[t, bocd.run_lengths_] = np.exp(bocd.runlength_log_posterior_)
    return P


# -- predictive band --------------------------------------------------------------------------------
def test_predictive_band_draws_mean_band_and_points(sine, tmp_path):
    reg, X, y = sine
    ax = plot_predictive_band(reg, X, y, k=2.0)
    assert isinstance(ax, Axes)
    assert len(ax.lines) == 1 and len(ax.collections) == 2  # band + scatter
    assert ax.get_xlabel() == "x0" and ax.get_ylabel() == "y"
    xs, mean_line = ax.lines[0].get_data()
    assert np.all(np.diff(xs) >= 0)  # sorted along the feature
    mean, std = reg.predict(X, return_std=True)
    order = np.argsort(X[:, 0], kind="stable")
    np.testing.assert_allclose(mean_line, mean[order])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["predictive mean", "mean ± 2·std", "observed"]
    _saved(ax, tmp_path, "band")


def test_predictive_band_on_given_axes_without_y_and_other_feature(sine):
    reg, X, _ = sine
    fig = Figure()
    ax0 = fig.subplots()
    X2 = np.column_stack([np.zeros(len(X)), X[:, 0]])
    reg2 = LoFiRegressor(hidden_layer_sizes=(8,), random_state=0).fit(X2, np.sin(X[:, 0]))
    ax = plot_predictive_band(reg2, X2, feature=1, k=1.0, ax=ax0)
    assert ax is ax0 and len(ax.collections) == 1 and ax.get_xlabel() == "x1"
    # a 1-d X is one feature
    ax = plot_predictive_band(reg, X[:, 0], ax=Figure().subplots())
    assert len(ax.lines) == 1


@pytest.mark.parametrize("kwargs, message", [
    ({"y": np.zeros(7)}, "inconsistent numbers of samples"),
    ({"y": "2d"}, "single output"),
    ({"k": 0.0}, "'k' parameter"),
    ({"feature": 3}, "feature=3"),
])
def test_predictive_band_bad_input(sine, kwargs, message):
    reg, X, y = sine
    if isinstance(kwargs.get("y"), str):
        kwargs = {"y": np.column_stack([y, y])}
    with pytest.raises(ValueError, match=message):
        plot_predictive_band(reg, X, **kwargs)


# -- prequential metrics ------------------------------------------------------------------------------
def test_prequential_regression_cumulative_and_windowed(linear_stream, tmp_path):
    y, mean, std = linear_stream
    ax = plot_prequential(y, mean, std=std)
    assert isinstance(ax, Axes)
    assert [line.get_label() for line in ax.lines] == ["rmse", "nlpd", "coverage"]
    assert ax.get_xlabel() == "row of the stream" and "cumulative" in ax.get_title()
    # the last cumulative value is the metric of the whole stream
    # (over the rows with a prediction: under the data-scaled prior row 0 has none, nan, and is left out)
    from skfilter.metrics import gaussian_nlpd
    has = np.isfinite(mean)
    assert not has[0] and has[1:].all()
    assert ax.lines[1].get_ydata()[-1] == pytest.approx(gaussian_nlpd(y[has], mean[has], std[has]))
    assert ax.lines[1].get_xdata()[0] == 1  # the curves start at the first row with a prediction
    _saved(ax, tmp_path, "prequential")

    ax = plot_prequential(y, mean, metrics="rmse", window=20, ax=Figure().subplots())
    assert len(ax.lines) == 1 and ax.get_ylabel() == "rmse" and "window of 20" in ax.get_title()
    rmse_last = np.sqrt(np.mean((y[-20:] - mean[-20:]) ** 2))
    assert ax.lines[0].get_ydata()[-1] == pytest.approx(rmse_last)


def test_prequential_callable_dict_and_max_points(linear_stream):
    y, mean, std = linear_stream
    ax = plot_prequential(y, mean, std=std, metrics={"max abs error": lambda t, m, s: np.max(np.abs(t - m))},
                          max_points=10, ax=Figure().subplots())
    xs, ys = ax.lines[0].get_data()
    assert ax.lines[0].get_label() == "max abs error" and len(xs) == 10 and xs[-1] == len(y) - 1
    assert np.all(np.diff(ys) >= 0)  # a running maximum


def test_prequential_classification(class_stream, tmp_path):
    y, proba, classes = class_stream
    ax = plot_prequential(y, proba, labels=classes)
    assert [line.get_label() for line in ax.lines] == ["accuracy", "log_loss"]
    acc = ax.lines[0].get_ydata()
    assert np.all((acc >= 0) & (acc <= 1))
    assert acc[-1] == pytest.approx(np.mean(classes[np.argmax(proba, axis=1)] == y))
    _saved(ax, tmp_path, "prequential_clf")
    ax = plot_prequential(y, proba, metrics=["brier", "ece"], window=30, ax=Figure().subplots())
    assert len(ax.lines) == 2


@pytest.mark.parametrize("case, message", [
    ("length", "same shape"),
    ("needs_std", "need the predictive std"),
    ("unknown", "Unknown prequential metric"),
    ("mixed", "mixes regression and classification"),
    ("window", "'window' parameter"),
    ("proba_sum", "sum to 1"),
    ("proba_length", "inconsistent numbers of samples"),
])
def test_prequential_bad_input(linear_stream, class_stream, case, message):
    y, mean, std = linear_stream
    yc, proba, _ = class_stream
    call = {
        "length": lambda: plot_prequential(y, mean[:-1]),
        "needs_std": lambda: plot_prequential(y, mean, metrics=["nlpd"]),
        "unknown": lambda: plot_prequential(y, mean, metrics=["r2"]),
        "mixed": lambda: plot_prequential(y, mean, metrics=["rmse", "accuracy"]),
        "window": lambda: plot_prequential(y, mean, window=0),
        "proba_sum": lambda: plot_prequential(yc, proba * 0.5),
        "proba_length": lambda: plot_prequential(yc[:-1], proba),
    }[case]
    with pytest.raises(ValueError, match=message):
        call()


# -- run-length posterior ------------------------------------------------------------------------------
def test_run_length_heat_map_follows_the_jump(runlength_posterior, tmp_path):
    P = runlength_posterior
    ax = plot_run_length(P)
    assert isinstance(ax, Axes)
    assert len(ax.images) == 1 and len(ax.lines) == 1
    assert ax.get_xlabel() == "row of the stream t" and ax.get_ylabel() == "run length r"
    assert len(ax.figure.axes) == 2  # the colour bar
    map_rl = ax.lines[0].get_ydata()
    np.testing.assert_array_equal(map_rl, np.argmax(P, axis=1))
    assert map_rl[39] >= 30 and map_rl[45] <= 6  # long run before the jump at row 40, short after
    _saved(ax, tmp_path, "runlength")

    ax = plot_run_length(P, log=False, colorbar=False, ax=Figure().subplots())
    assert len(ax.images) == 1 and len(ax.figure.axes) == 1


@pytest.mark.parametrize("bad, message", [
    (np.full(5, 0.2), "2D array"),
    (-np.full((3, 2), 0.5), "non-negative"),
    (np.full((3, 2), 0.9), "summing to at most one"),
    (np.zeros((3, 2)), "summing to at most one"),
    (np.array([[0.5, np.nan]]), "NaN"),
])
def test_run_length_bad_input(bad, message):
    with pytest.raises(ValueError, match=message):
        plot_run_length(bad)


# -- reliability ------------------------------------------------------------------------------------------
def test_reliability_binary(tmp_path):
    rng = np.random.default_rng(4)
    p = rng.uniform(size=400)
    y = np.where(rng.uniform(size=400) < p, "yes", "no")
    ax = plot_reliability(y, np.column_stack([1 - p, p]), n_bins=5)
    assert isinstance(ax, Axes) and len(ax.lines) == 2
    assert ax.get_xlabel() == "predicted probability of yes"
    mean_pred, frac = ax.lines[1].get_data()
    assert len(mean_pred) == 5 and np.max(np.abs(mean_pred - frac)) < 0.15  # calibrated by construction
    assert "ECE" in ax.lines[1].get_label()
    _saved(ax, tmp_path, "reliability")
    # 1-d probabilities of the positive class draw the same curve
    ax1 = plot_reliability(y, p, n_bins=5, ax=Figure().subplots())
    np.testing.assert_allclose(ax1.lines[1].get_ydata(), frac)


def test_reliability_multiclass(class_stream, tmp_path):
    y, proba, classes = class_stream
    ax = plot_reliability(y, proba, labels=classes)
    assert len(ax.lines) == 2
    assert ax.get_xlabel().startswith("confidence") and ax.get_ylabel() == "accuracy"
    _saved(ax, tmp_path, "reliability_multiclass")


@pytest.mark.parametrize("case, message", [
    ("sum", "sum to 1"),
    ("range", r"\[0, 1\]"),
    ("length", "inconsistent numbers of samples"),
    ("n_bins", "'n_bins' parameter"),
])
def test_reliability_bad_input(case, message):
    y = np.array([0, 1, 1, 0])
    proba = np.array([[0.8, 0.2], [0.3, 0.7], [0.1, 0.9], [0.6, 0.4]])
    call = {
        "sum": lambda: plot_reliability(y, proba * 0.9),
        "range": lambda: plot_reliability(y, np.array([0.1, 1.5, 0.2, 0.3])),
        "length": lambda: plot_reliability(y[:3], proba),
        "n_bins": lambda: plot_reliability(y, proba, n_bins=0),
    }[case]
    with pytest.raises(ValueError, match=message):
        call()


# -- coverage ----------------------------------------------------------------------------------------------
def test_coverage_calibrated_and_overconfident(linear_stream, tmp_path):
    rng = np.random.default_rng(5)
    y = rng.normal(size=2000)
    ax = plot_coverage(y, np.zeros(2000), np.ones(2000))
    assert isinstance(ax, Axes) and len(ax.lines) == 2
    assert ax.get_xlabel().startswith("nominal") and ax.get_ylabel() == "empirical coverage"
    nominal, empirical = ax.lines[1].get_data()
    assert len(nominal) == 20 and np.max(np.abs(nominal - empirical)) < 0.04
    _saved(ax, tmp_path, "coverage")
    # std half as large as it should be: below the diagonal
    ax = plot_coverage(y, np.zeros(2000), 0.5 * np.ones(2000), levels=[0.5, 0.9], ax=Figure().subplots())
    nominal, empirical = ax.lines[1].get_data()
    assert list(nominal) == [0.5, 0.9] and np.all(empirical < nominal)
    # prequential predictions of a filter, 2-d y
    # (row 0 has no prediction, nan, under the data-scaled prior: left out, not an error)
    ys, mean, std = linear_stream
    assert np.isnan(mean[0])
    ax = plot_coverage(ys[:, None], mean[:, None], std[:, None], ax=Figure().subplots())
    assert len(ax.lines) == 2
    from skfilter.metrics import interval_coverage
    nominal, empirical = ax.lines[1].get_data()
    from scipy.stats import norm
    assert empirical[-1] == pytest.approx(interval_coverage(ys[1:], mean[1:], std[1:],
                                                            n_std=norm.ppf(0.5 + 0.5 * nominal[-1])))
    with pytest.raises(ValueError, match="No row has a prediction"):
        plot_coverage(ys[:1], mean[:1], std[:1], ax=Figure().subplots())


@pytest.mark.parametrize("kwargs, message", [
    ({"mean": np.zeros(9)}, "same shape"),
    ({"std": -np.ones(10)}, "non-negative"),
    ({"levels": [0.5, 1.0]}, "strictly between 0 and 1"),
    ({"levels": []}, "non-empty|minimum of 1"),
])
def test_coverage_bad_input(kwargs, message):
    args = {"y_true": np.zeros(10), "mean": np.zeros(10), "std": np.ones(10)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        plot_coverage(args.pop("y_true"), args.pop("mean"), args.pop("std"), **args)


# -- optional dependency -------------------------------------------------------------------------------------
def test_clear_import_error_without_matplotlib(monkeypatch, linear_stream):
    y, mean, std = linear_stream
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    for fn, args in [(plot_coverage, (y, mean, std)), (plot_prequential, (y, mean)),
                     (plot_run_length, (np.eye(3),)), (plot_reliability, ([0, 1], [0.2, 0.7]))]:
        with pytest.raises(ImportError, match="pip install matplotlib"):
            fn(*args)


def test_module_imports_without_matplotlib(monkeypatch):
    import importlib

    import skfilter.plotting as plotting

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    try:
        importlib.reload(plotting)
        assert callable(plotting.plot_coverage)
    finally:
        monkeypatch.undo()
        importlib.reload(plotting)


def test_prequential_leaves_out_rows_without_prediction(linear_stream, class_stream):
    y, mean, std = linear_stream
    mean, std = mean.copy(), std.copy()
    mean[:5] = np.nan
    std[:5] = np.nan
    ax = plot_prequential(y, mean, std=std, metrics=["rmse", "nlpd"], ax=Figure().subplots())
    xs, rmse = ax.lines[0].get_data()
    assert xs[0] == 5 and xs[-1] == len(y) - 1 and np.all(np.isfinite(rmse))
    assert rmse[-1] == pytest.approx(np.sqrt(np.mean((y[5:] - mean[5:]) ** 2)))
    yc, proba, classes = class_stream
    proba = proba.copy()
    proba[:3] = np.nan
    ax = plot_prequential(yc, proba, labels=classes, ax=Figure().subplots())
    assert ax.lines[0].get_xdata()[0] == 3
    with pytest.raises(ValueError, match="No row has a prediction"):
        plot_prequential(y, np.full_like(y, np.nan))
