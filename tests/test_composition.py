"""Everything composes: every posterior structure × every wrapper × every likelihood (issue 20).

For each cell of the matrix (:mod:`tests._registry`): ``fit`` learns and predicts (regressors: finite
mean and positive standard deviation, ``sample_y`` of the right shape; classifiers: probabilities that
sum to one), a first ``partial_fit`` equals ``fit`` (both followed by a ``partial_fit``), and an
estimator pickled between the chunks and restored continues exactly as the one that was not. The
moment-matched likelihood is the ``likelihood`` parameter of every classifier. A CUDA
parametrisation runs one cell per structure on the GPU when there is one.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone

from tests._registry import LIKELIHOODS, STRUCTURES, WRAPPERS, data, is_classification, make, supports

CELLS = [(s, w, lik) for s in STRUCTURES for w in WRAPPERS for lik in LIKELIHOODS if supports(s, lik)]


def _fit_kwargs(est, y):
    return {"classes": np.unique(y)} if is_classification_est(est) else {}


def is_classification_est(est):
    return type(est).__name__.endswith("Classifier")


def _outputs(est, X):
    """What the estimator predicts, as arrays to compare."""
    if is_classification_est(est):
        proba = est.predict_proba(X)
        assert np.allclose(proba.sum(axis=1), 1.0)
        return [proba, est.predict(X)]
    mean, std = est.predict(X, return_std=True)
    assert np.isfinite(mean).all() and (std > 0).all()
    return [mean, std]


@pytest.mark.parametrize("structure, wrapper, likelihood", CELLS, ids=["-".join(c) for c in CELLS])
def test_every_structure_wrapper_and_likelihood_compose(structure, wrapper, likelihood):
    X, y = data(likelihood)
    est = make(structure, wrapper, likelihood)
    k = len(X) // 2
    kwargs = _fit_kwargs(est, y)
    # the 'auto' prior adopts the first call's rows: fit on the first chunk, then partial_fit
    whole = clone(est).fit(X[:k], y[:k]).partial_fit(X[k:], y[k:])
    expected = _outputs(whole, X)
    if not is_classification(likelihood):
        draws = whole.sample_y(X[:5], n_samples=4, random_state=0)
        assert draws.shape == (5, 4) and np.isfinite(draws).all()
        if likelihood == "poisson":
            assert (draws >= 0).all() and np.array_equal(draws, np.round(draws))

    # partial_fit on the first chunk = fit on it; pickled between the chunks = not pickled
    streamed = clone(est).partial_fit(X[:k], y[:k], **kwargs)
    restored = pickle.loads(pickle.dumps(streamed))
    streamed.partial_fit(X[k:], y[k:])
    restored.partial_fit(X[k:], y[k:])
    for a, b, c in zip(expected, _outputs(streamed, X), _outputs(restored, X)):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12)
        np.testing.assert_array_equal(c, b)


CUDA_CELLS = [(s, lik) for s in STRUCTURES for lik in ("gaussian", "categorical")]


@pytest.mark.parametrize("structure, likelihood", CUDA_CELLS, ids=["-".join(c) for c in CUDA_CELLS])
def test_cuda_matches_cpu(structure, likelihood):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    X, y = data(likelihood)
    cpu = make(structure, "none", likelihood, dtype="float64").fit(X, y)
    gpu = make(structure, "none", likelihood, dtype="float64", device="cuda").fit(X, y)
    for a, b in zip(_outputs(cpu, X), _outputs(gpu, X)):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("wrapper", WRAPPERS)
@pytest.mark.parametrize("likelihood", ["gaussian", "categorical"])
def test_full_rank_lrkf_is_the_full_ekf_under_every_wrapper(wrapper, likelihood):
    """The wrappers only see the structure through its interface: at full rank and ``q = 0`` LRKF
    is the full EKF, wrapped or not."""
    X, y = data(likelihood, n=30)
    ekf = make("ekf-full", wrapper, likelihood, process_noise=0.0).fit(X, y)
    P = (ekf.estimator_ if wrapper != "none" else ekf).n_params_
    lrkf = make("lrkf", wrapper, likelihood, rank=P, process_noise=0.0).fit(X, y)
    for a, b in zip(_outputs(ekf, X), _outputs(lrkf, X)):
        np.testing.assert_allclose(b, a, rtol=1e-7, atol=1e-9)
