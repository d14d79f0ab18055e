"""Persistence (issue 19): every estimator pickles and ``joblib.dump``s mid-stream and the copy
resumes with identical predictions; a belief fitted on CUDA is loaded and continued on the CPU."""

from __future__ import annotations

import pickle

import joblib
import numpy as np
import pytest
import torch
from sklearn.base import clone

from skfilter import (BOCDClassifier, BOCDRegressor, EKFClassifier, EKFRegressor, LoFiClassifier, LoFiRegressor,
                      WoLFClassifier, WoLFRegressor)

HAS_CUDA = torch.cuda.is_available()

rng = np.random.default_rng(1)
X = rng.normal(size=(120, 3))
y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=120)
y_class = np.digitize(y, [-0.4, 0.4])
HALF = 60

ESTIMATORS = [
    LoFiRegressor(hidden_layer_sizes=(8,), rank=3, random_state=0),
    EKFRegressor(hidden_layer_sizes=(8,), random_state=0),
    EKFRegressor(hidden_layer_sizes=(8,), covariance="vd", random_state=0),
    LoFiClassifier(hidden_layer_sizes=(8,), rank=3, random_state=0),
    EKFClassifier(hidden_layer_sizes=(8,), random_state=0),
    EKFClassifier(hidden_layer_sizes=(8,), covariance="vd", random_state=0),
    WoLFRegressor(EKFRegressor(hidden_layer_sizes=(8,), random_state=0)),
    BOCDRegressor(EKFRegressor(hidden_layer_sizes=(8,), random_state=0), n_hypotheses=3),
    WoLFRegressor(LoFiRegressor(hidden_layer_sizes=(8,), rank=3, random_state=0), weighting="md"),
    WoLFClassifier(EKFClassifier(hidden_layer_sizes=(8,), random_state=0)),
    BOCDClassifier(LoFiClassifier(hidden_layer_sizes=(8,), rank=3, random_state=0), n_hypotheses=3),
    BOCDRegressor(WoLFRegressor(LoFiRegressor(hidden_layer_sizes=(8,), rank=3, random_state=0)), n_hypotheses=2),
    BOCDRegressor(EKFRegressor(hidden_layer_sizes=(8,), covariance="vd", random_state=0), reset="ou",
                  n_hypotheses=1),
]
IDS = ["lofi-reg", "ekf-full-reg", "ekf-vd-reg", "lofi-clf", "ekf-full-clf", "ekf-vd-clf", "wolf-reg", "bocd-reg",
       "wolf-lofi-md-reg", "wolf-clf", "bocd-lofi-clf", "bocd-wolf-reg", "bocd-ou-vd-reg"]
WRAPPERS = slice(6, None)


def _is_classifier(est):
    return hasattr(est, "predict_proba")


def _predictions(est):
    if _is_classifier(est):
        return est.predict_proba(X), est.predict(X)
    return est.predict(X, return_std=True)


def _roundtrips(est, tmp_path):
    yield pickle.loads(pickle.dumps(est))
    path = tmp_path / "estimator.joblib"
    joblib.dump(est, path)
    yield joblib.load(path)


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_pickle_and_joblib_mid_stream_resume_identically(est, tmp_path):
    target = y_class if _is_classifier(est) else y
    est = clone(est).fit(X[:HALF], target[:HALF])
    before = _predictions(est)
    copies = list(_roundtrips(est, tmp_path))
    for copy in copies:  # the loaded copy predicts as the original before anything more is learned
        for a, b in zip(_predictions(copy), before):
            np.testing.assert_array_equal(a, b)
    est.partial_fit(X[HALF:], target[HALF:])
    expected = _predictions(est)
    for copy in copies:
        copy.partial_fit(X[HALF:], target[HALF:])
        assert copy.n_samples_seen_ == est.n_samples_seen_ == len(X)
        for a, b in zip(_predictions(copy), expected):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("est", ESTIMATORS[:3], ids=IDS[:3])
def test_pickled_copy_keeps_the_conventions_attributes(est):
    est = clone(est).set_params(n_epochs=2).fit(X[:HALF], y[:HALF])
    copy = pickle.loads(pickle.dumps(est))
    assert copy.n_iter_ == est.n_iter_ == 2
    np.testing.assert_array_equal(copy.loss_curve_, est.loss_curve_)
    copy.set_params(warm_start=True).fit(X[HALF:], y[HALF:])
    est.set_params(warm_start=True).fit(X[HALF:], y[HALF:])
    np.testing.assert_array_equal(copy.predict(X), est.predict(X))
    np.testing.assert_array_equal(copy.loss_curve_, est.loss_curve_)


@pytest.mark.parametrize("est", ESTIMATORS[WRAPPERS], ids=IDS[WRAPPERS])
def test_pickled_wrapper_keeps_its_conventions_and_warm_starts_identically(est, tmp_path):
    target = y_class if _is_classifier(est) else y
    est = clone(est).set_params(warm_start=True).fit(X[:HALF], target[:HALF])
    for copy in _roundtrips(est, tmp_path):
        assert copy.n_iter_ == est.n_iter_ == 1
        np.testing.assert_array_equal(copy.loss_curve_, est.loss_curve_)
        assert copy.get_params()["warm_start"] is True
        copy.fit(X[HALF:], target[HALF:])  # warm: continues the loaded stream
        assert copy.n_samples_seen_ == len(X) and copy.n_iter_ == 2
    est.fit(X[HALF:], target[HALF:])
    for a, b in zip(_predictions(copy), _predictions(est)):
        np.testing.assert_array_equal(a, b)


def _innermost_filter(est):
    """The fitted filter inside a (possibly nested) wrapper, or the filter itself."""
    while hasattr(est, "estimator_"):
        est = est.estimator_
    return est


def test_pickle_of_an_unfitted_estimator_and_a_module_instance():
    est = EKFRegressor(module=torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)),
                       random_state=0)
    copy = pickle.loads(pickle.dumps(est))
    est.fit(X[:HALF], y[:HALF])
    copy.fit(X[:HALF], y[:HALF])
    np.testing.assert_array_equal(copy.predict(X), est.predict(X))
    again = pickle.loads(pickle.dumps(est))
    again.partial_fit(X[HALF:], y[HALF:])
    est.partial_fit(X[HALF:], y[HALF:])
    np.testing.assert_array_equal(again.predict(X), est.predict(X))


def _on_device(est, device):
    """A clone of ``est`` whose filter runs on ``device`` in float64 (a wrapper's innermost base)."""
    est = clone(est)
    if hasattr(est, "estimator"):
        path = "estimator__estimator" if hasattr(est.estimator, "estimator") else "estimator"
        return est.set_params(**{f"{path}__device": device, f"{path}__dtype": "float64"})
    return est.set_params(device=device, dtype="float64")


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_fitted_on_cuda_loaded_and_continued_on_the_cpu(est, tmp_path):
    """A filter moves with ``set_params(device='cpu')``; a wrapper's fitted filter (the clone its
    ``fit`` made, ``estimator_``, inner-most for nested wrappers) is moved the same way, and the
    wrapper's own state (run lengths, prior noise) follows at the next ``partial_fit``."""
    target = y_class if _is_classifier(est) else y
    est = _on_device(est, "cuda")
    est.fit(X[:HALF], target[:HALF])
    assert _innermost_filter(est).filter_state_.belief.mean.device.type == "cuda"
    for copy in _roundtrips(est, tmp_path):
        _innermost_filter(copy).set_params(device="cpu")
        copy.partial_fit(X[HALF:], target[HALF:])
        assert copy.n_samples_seen_ == len(X)
        assert _innermost_filter(copy).filter_state_.belief.mean.device.type == "cpu"
        reference = pickle.loads(pickle.dumps(est))
        reference.partial_fit(X[HALF:], target[HALF:])  # on CUDA
        for a, b in zip(_predictions(copy), _predictions(reference)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("est", ESTIMATORS[WRAPPERS], ids=IDS[WRAPPERS])
def test_loaded_wrapper_continues_after_its_filter_is_moved(est, tmp_path):
    """The move of the CUDA test above, to another dtype on the CPU (this runs everywhere): the
    loaded wrapper's filter, moved with ``set_params``, continues the stream in the new dtype, close
    to the unmoved original."""
    target = y_class if _is_classifier(est) else y
    est = _on_device(est, "cpu").fit(X[:HALF], target[:HALF])
    for copy in _roundtrips(est, tmp_path):
        _innermost_filter(copy).set_params(dtype="float32")
        copy.partial_fit(X[HALF:], target[HALF:])
        assert _innermost_filter(copy).filter_state_.belief.mean.dtype == torch.float32
        assert copy.n_samples_seen_ == len(X)
        reference = pickle.loads(pickle.dumps(est)).partial_fit(X[HALF:], target[HALF:])
        for a, b in zip(_predictions(copy), _predictions(reference)):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)
