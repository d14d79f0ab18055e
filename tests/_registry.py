"""A registry of small estimator factories shared by the tests: every posterior structure, every
wrapper and every likelihood, so that a test can run over the whole matrix (tests/test_composition.py)
or pick one cell.

``make(structure, wrapper, likelihood, **overrides)`` returns an unfitted estimator; ``data(likelihood)``
a small stream ``(X, y)`` for it. Structures: :data:`STRUCTURES`; wrappers: :data:`WRAPPERS`;
likelihoods: :data:`REGRESSION_LIKELIHOODS` and :data:`CLASSIFICATION_LIKELIHOODS`.
"""

from __future__ import annotations

import numpy as np

import skfilter

#: a small network, so that every cell runs in a fraction of a second
SMALL = {"hidden_layer_sizes": (4,), "random_state": 0}

#: structure name -> (regressor class name, classifier class name, structure parameters)
STRUCTURES = {
    "ekf-full": ("EKFRegressor", "EKFClassifier", {"covariance": "full"}),
    "ekf-vd": ("EKFRegressor", "EKFClassifier", {"covariance": "vd"}),
    "ekf-fd": ("EKFRegressor", "EKFClassifier", {"covariance": "fd"}),
    "lofi": ("LoFiRegressor", "LoFiClassifier", {"rank": 3}),
    "lrkf": ("LRKFRegressor", "LRKFClassifier", {"rank": 5}),
    "hilofi": ("HiLoFiRegressor", "HiLoFiClassifier", {"hidden_rank": 3}),
    "lolofi": ("LoLoFiRegressor", "LoLoFiClassifier", {"hidden_rank": 3, "last_rank": 2}),
    "subspace": ("SubspaceRegressor", "SubspaceClassifier", {"n_components": 3, "warmup": 1.0}),
    "subspace-lofi": ("SubspaceRegressor", "SubspaceClassifier", {"n_components": 4, "covariance": "lofi",
                                                                 "rank": 2, "warmup": 1.0}),
    "pulse": ("PULSERegressor", "PULSEClassifier", {"n_components": 2, "warmup": 1.0}),
}

WRAPPERS = ("none", "wolf", "bocd")

REGRESSION_LIKELIHOODS = ("gaussian", "poisson")
CLASSIFICATION_LIKELIHOODS = ("bernoulli", "categorical", "moment-matched-binary", "moment-matched")
LIKELIHOODS = REGRESSION_LIKELIHOODS + CLASSIFICATION_LIKELIHOODS


def is_classification(likelihood: str) -> bool:
    return likelihood in CLASSIFICATION_LIKELIHOODS


def supports(structure: str, likelihood: str) -> bool:
    """Whether the structure's estimator has the likelihood (the moment-matched one is a
    ``likelihood`` parameter of the classifiers that have one)."""
    if not likelihood.startswith("moment-matched"):
        return True
    cls = getattr(skfilter, STRUCTURES[structure][1])
    return "likelihood" in cls._get_param_names()


def make_base(structure: str, likelihood: str, **overrides):
    """The unwrapped estimator of ``structure`` for ``likelihood``."""
    reg, clf, params = STRUCTURES[structure]
    params = {**SMALL, **params}
    if is_classification(likelihood):
        cls = getattr(skfilter, clf)
        if likelihood.startswith("moment-matched"):
            params["likelihood"] = "moment-matched"
    else:
        cls = getattr(skfilter, reg)
        params["likelihood"] = likelihood
        if likelihood == "poisson":
            params["obs_variance"] = 1.0  # ignored by Poisson; no noise estimate to start
    params.update(overrides)
    return cls(**params)


def make(structure: str, wrapper: str = "none", likelihood: str = "gaussian", **overrides):
    """An unfitted estimator: ``structure`` under ``wrapper`` with ``likelihood`` (module docstring)."""
    base = make_base(structure, likelihood, **overrides)
    if wrapper == "none":
        return base
    kind = "Classifier" if is_classification(likelihood) else "Regressor"
    if wrapper == "wolf":
        return getattr(skfilter, "WoLF" + kind)(base)
    if wrapper == "bocd":
        return getattr(skfilter, "BOCD" + kind)(base, n_hypotheses=3)
    raise ValueError(f"unknown wrapper {wrapper!r}")


def data(likelihood: str, n: int = 30, seed: int = 0):
    """A small stream ``(X, y)`` for ``likelihood``: 2 features; Gaussian targets, Poisson counts,
    two classes (Bernoulli, ``'moment-matched-binary'``) or three."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    score = X[:, 0] - 0.5 * X[:, 1]
    if likelihood == "gaussian":
        return X, np.sin(score) + 0.1 * rng.normal(size=n)
    if likelihood == "poisson":
        return X, rng.poisson(np.exp(0.5 * score)).astype(float)
    if likelihood in ("bernoulli", "moment-matched-binary"):
        return X, (score > 0).astype(int)
    return X, np.digitize(score, [-0.5, 0.5])
