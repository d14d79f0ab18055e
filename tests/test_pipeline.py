"""PartialPipeline / make_partial_pipeline and prequential evaluation of pipelines and other
partial_fit estimators (issue 19)."""

from __future__ import annotations

import doctest
import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.decomposition import PCA, IncrementalPCA
from sklearn.linear_model import SGDClassifier, SGDRegressor
from sklearn.model_selection import GridSearchCV, TimeSeriesSplit
from sklearn.preprocessing import FunctionTransformer, StandardScaler

import skfilter.model_selection
import skfilter.pipeline
from skfilter import LoFiClassifier, LoFiRegressor, PartialPipeline, make_partial_pipeline
from skfilter.model_selection import prequential_predict, prequential_score


def _data(n=120, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(4.0, 2.0, size=(n, d))
    y = (X - 4.0) @ np.linspace(1.0, -1.0, d) + 0.1 * rng.normal(size=n)
    return X, y


def _lofi(**kw):
    kw.setdefault("hidden_layer_sizes", ())
    kw.setdefault("random_state", 0)
    return LoFiRegressor(**kw)


def test_names_and_params():
    pipe = make_partial_pipeline(StandardScaler(), _lofi(rank=3))
    assert isinstance(pipe, PartialPipeline)
    assert [n for n, _ in pipe.steps] == ["standardscaler", "lofiregressor"]
    assert pipe.get_params()["lofiregressor__rank"] == 3
    c = clone(pipe.set_params(lofiregressor__rank=4))
    assert isinstance(c, PartialPipeline) and c.get_params()["lofiregressor__rank"] == 4


def test_partial_fit_over_chunks_equals_manual_loop():
    X, y = _data()
    pipe = make_partial_pipeline(StandardScaler(), _lofi())
    scaler, est = StandardScaler(), _lofi()
    for start in range(0, len(y), 30):
        xs, ys = X[start:start + 30], y[start:start + 30]
        pipe.partial_fit(xs, ys)
        scaler.partial_fit(xs)
        est.partial_fit(scaler.transform(xs), ys)
    np.testing.assert_allclose(pipe.named_steps["standardscaler"].mean_, scaler.mean_)
    m1, s1 = pipe.predict(X[:10], return_std=True)
    m2, s2 = est.predict(scaler.transform(X[:10]), return_std=True)
    np.testing.assert_array_equal(m1, m2)
    np.testing.assert_array_equal(s1, s2)
    assert pipe.score(X, y) == est.score(scaler.transform(X), y)
    assert pipe.sample_y(X[:4], n_samples=3, random_state=0).shape == est.sample_y(
        scaler.transform(X[:4]), n_samples=3, random_state=0).shape


def test_stateless_and_passthrough_steps_are_applied():
    X, y = _data()
    pipe = PartialPipeline([("log", FunctionTransformer(np.tanh)), ("skip", "passthrough"), ("none", None),
                            ("lofi", _lofi())])
    pipe.partial_fit(X[:50], y[:50]).partial_fit(X[50:], y[50:])
    est = _lofi().partial_fit(np.tanh(X[:50]), y[:50]).partial_fit(np.tanh(X[50:]), y[50:])
    np.testing.assert_array_equal(pipe.predict(X[:5]), est.predict(np.tanh(X[:5])))


def test_transformer_without_partial_fit_is_a_clear_type_error_before_learning():
    X, y = _data()
    pipe = make_partial_pipeline(StandardScaler(), PCA(n_components=2), _lofi())
    with pytest.raises(TypeError, match=r"'pca' \(PCA\).*no partial_fit.*IncrementalPCA"):
        pipe.partial_fit(X, y)
    assert not hasattr(pipe.named_steps["standardscaler"], "mean_")  # nothing learned
    assert not hasattr(pipe.named_steps["lofiregressor"], "filter_state_")
    ok = make_partial_pipeline(StandardScaler(), IncrementalPCA(n_components=2), _lofi())
    for start in range(0, len(y), 40):
        ok.partial_fit(X[start:start + 40], y[start:start + 40])
    assert ok.predict(X[:3]).shape == (3,)


def test_final_estimator_without_partial_fit_has_no_partial_fit():
    from sklearn.linear_model import Ridge

    pipe = make_partial_pipeline(StandardScaler(), Ridge())
    assert not hasattr(pipe, "partial_fit")
    with pytest.raises(TypeError, match="prequential_predict needs"):
        prequential_predict(pipe, *_data())


def test_fit_and_predict_params():
    X, y = _data()
    pipe = make_partial_pipeline(StandardScaler(), _lofi()).fit(X, y)
    mean, std = pipe.predict(X[:5], return_std=True)
    assert mean.shape == std.shape == (5,) and np.all(std > 0)


def test_grid_search_with_time_series_split():
    X, y = _data(n=150)
    pipe = make_partial_pipeline(StandardScaler(), _lofi(hidden_layer_sizes=(4,)))
    gs = GridSearchCV(pipe, {"lofiregressor__rank": [1, 3]}, cv=TimeSeriesSplit(n_splits=3))
    gs.fit(X, y)
    assert gs.best_params_["lofiregressor__rank"] in (1, 3)
    assert isinstance(gs.best_estimator_, PartialPipeline)
    gs.best_estimator_.partial_fit(X[:10], y[:10])


def test_pickle_mid_stream_then_continue_equals_uninterrupted():
    X, y = _data()
    a = make_partial_pipeline(StandardScaler(), _lofi(rank=2))
    b = make_partial_pipeline(StandardScaler(), _lofi(rank=2))
    a.partial_fit(X[:60], y[:60])
    b.partial_fit(X[:60], y[:60])
    b = pickle.loads(pickle.dumps(b))
    a.partial_fit(X[60:], y[60:])
    b.partial_fit(X[60:], y[60:])
    m1, s1 = a.predict(X[:8], return_std=True)
    m2, s2 = b.predict(X[:8], return_std=True)
    np.testing.assert_array_equal(m1, m2)
    np.testing.assert_array_equal(s1, s2)


def test_classifier_pipeline_with_classes():
    rng = np.random.default_rng(1)
    X = rng.normal(3.0, 2.0, size=(120, 2))
    y = np.where(X[:, 0] > 3.0, "b", "a")
    pipe = make_partial_pipeline(StandardScaler(), LoFiClassifier(hidden_layer_sizes=(), random_state=0))
    pipe.partial_fit(X[:40], y[:40], classes=["a", "b"])
    pipe.partial_fit(X[40:], y[40:])
    assert list(pipe.classes_) == ["a", "b"]
    assert pipe.predict_proba(X[:5]).shape == (5, 2)
    assert pipe.score(X, y) > 0.8
    proba = prequential_predict(pipe, X, y, method="predict_proba", classes=["a", "b"])
    assert proba.shape == (120, 2)
    scores = prequential_score(pipe, X, y, scoring=["accuracy", "log_loss", "neg_brier"])
    assert set(scores) == {"accuracy", "log_loss", "neg_brier"} and scores["accuracy"] > 0.7


@pytest.mark.parametrize("n", [1, 2, 5])
def test_prequential_auto_prior_does_not_predict_row_0_from_its_target(n):
    X, y = _data(n=n)
    mean, std = prequential_predict(make_partial_pipeline(StandardScaler(), _lofi()), X, y, return_std=True)
    assert np.isnan(mean[0]) and np.isnan(std[0]) and np.all(np.isfinite(mean[1:]))


def test_prequential_pipeline_equals_row_by_row_partial_fit():
    X, y = _data(n=40)
    pipe = make_partial_pipeline(StandardScaler(), _lofi(prior_variance=1.0, obs_variance=0.01))
    mean, std = prequential_predict(pipe, X, y, return_std=True)
    ref = make_partial_pipeline(StandardScaler(), _lofi(prior_variance=1.0, obs_variance=0.01))
    manual_mean, manual_std = [], []
    first = _lofi(prior_variance=1.0, obs_variance=0.01).prequential_fit_predict(np.zeros((1, 3)), y[:1],
                                                                               return_std=True)
    manual_mean.append(first[0][0]); manual_std.append(first[1][0])
    ref.partial_fit(X[:1], y[:1])
    for t in range(1, len(y)):
        m, s = ref.predict(X[t:t + 1], return_std=True)
        manual_mean.append(m[0]); manual_std.append(s[0])
        ref.partial_fit(X[t:t + 1], y[t:t + 1])
    np.testing.assert_allclose(mean, manual_mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(std, manual_std, rtol=1e-12, atol=1e-12)
    # left fitted on the whole stream, as the reference
    np.testing.assert_allclose(pipe.predict(X[:5]), ref.predict(X[:5]), rtol=1e-12, atol=1e-12)
    # a second call starts from scratch again
    mean2 = prequential_predict(pipe, X, y)
    np.testing.assert_array_equal(mean2, mean)


def test_prequential_pipeline_has_no_look_ahead():
    X, y = _data(n=60)
    t = 30
    base = prequential_predict(make_partial_pipeline(StandardScaler(), _lofi()), X, y, return_std=True)
    X2, y2 = X.copy(), y.copy()
    X2[t + 1:] = 100.0 * X2[t + 1:] + 50.0  # the scaler statistics of later rows change a lot
    y2[t + 1:] = -y2[t + 1:] + 7.0
    alt = prequential_predict(make_partial_pipeline(StandardScaler(), _lofi()), X2, y2, return_std=True)
    np.testing.assert_array_equal(base[0][:t + 1], alt[0][:t + 1])
    np.testing.assert_array_equal(base[1][:t + 1], alt[1][:t + 1])
    assert not np.allclose(base[0][t + 1:], alt[0][t + 1:])


def test_stateless_pipeline_uses_the_filter_loop_identically():
    X, y = _data(n=50)
    est = _lofi(prior_variance=1.0, obs_variance=0.01)
    pipe = PartialPipeline([("tanh", FunctionTransformer(np.tanh)), ("lofi", clone(est))])
    got = prequential_predict(pipe, X, y, return_std=True)
    want = prequential_predict(clone(est), np.tanh(X), y, return_std=True)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_plain_skfilter_path_unchanged():
    X, y = _data(n=50)
    got = prequential_predict(_lofi(), X, y, return_std=True)
    want = _lofi().prequential_fit_predict(X, y, return_std=True)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_any_partial_fit_estimator_row_by_row():
    X, y = _data(n=60)
    sgd = SGDRegressor(random_state=0, learning_rate="constant", eta0=0.01)
    pred = prequential_predict(sgd, X - 4.0, y)
    assert np.isnan(pred[0]) and np.all(np.isfinite(pred[1:]))
    ref = SGDRegressor(random_state=0, learning_rate="constant", eta0=0.01).partial_fit(X[:1] - 4.0, y[:1])
    assert pred[1] == ref.predict(X[1:2] - 4.0)[0]
    scores = prequential_score(sgd, X - 4.0, y, scoring=["rmse", "mae"])
    assert set(scores) == {"rmse", "mae"} and np.isfinite(scores["rmse"])
    with pytest.raises(TypeError, match="return_std"):
        prequential_score(sgd, X, y, scoring=["nlpd"])
    pipe = make_partial_pipeline(StandardScaler(), SGDClassifier(loss="log_loss", random_state=0))
    yc = (y > 0).astype(int)
    proba = prequential_predict(pipe, X, yc, method="predict_proba")
    np.testing.assert_allclose(proba[0], [0.5, 0.5])
    assert prequential_score(pipe, X, yc, scoring="accuracy")["accuracy"] > 0.5


def test_several_metrics_at_once():
    X, y = _data(n=80)
    pipe = make_partial_pipeline(StandardScaler(), _lofi())
    scores = prequential_score(pipe, X, y, scoring={"rmse": "rmse", "nlpd": "nlpd", "neg": "neg_nlpd",
                                                    "cov": "coverage_error",
                                                    "my": lambda yt, m, s: float(np.mean(s))})
    assert list(scores) == ["rmse", "nlpd", "neg", "cov", "my"]
    assert scores["neg"] == pytest.approx(-scores["nlpd"])
    assert scores["cov"] <= 0.0 and scores["my"] > 0.0


@pytest.mark.parametrize("module", [skfilter.pipeline, skfilter.model_selection])
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_sklearn_partial_fit_estimators_in_pipelines():
    import warnings

    from sklearn.linear_model import PassiveAggressiveClassifier
    from sklearn.neural_network import MLPRegressor

    X, y = _data(n=60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PassiveAggressive is deprecated in recent scikit-learn
        mlp = make_partial_pipeline(StandardScaler(), MLPRegressor(hidden_layer_sizes=(4,), random_state=0))
        pred = prequential_predict(mlp, X, y)
        assert np.isnan(pred[0]) and np.all(np.isfinite(pred[1:]))
        pa = make_partial_pipeline(StandardScaler(), PassiveAggressiveClassifier(random_state=0))
        labels = prequential_predict(pa, X, (y > 0).astype(int))
    assert labels.shape == (60,) and set(np.unique(labels)) <= {0, 1}


def test_batch_fit_accepts_any_transformer():
    X, y = _data()
    pipe = make_partial_pipeline(StandardScaler(), PCA(n_components=2), _lofi()).fit(X, y)
    assert pipe.predict(X[:3], return_std=True)[1].shape == (3,)
