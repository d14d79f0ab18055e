"""Factorization models learned by the decoupled EKF (Gómez-Uribe & Karrer).

* :mod:`~skfilter.factorization.signals` — the signals ``λ(θ, x)`` (GLM, matrix and CP tensor
  factorization, factorization machines) with their gradients per entity;
* :mod:`~skfilter.factorization.columns` — which columns of ``X`` are entity ids under
  ``entity_columns='auto'`` (by their types), and the ambiguous case that warns;
* :mod:`~skfilter.factorization.entities` — the per-entity Gaussian blocks, growing with the ids seen;
* :mod:`~skfilter.factorization.dekf` — the DEKF update, the lazy predict of the drift towards a
  reference, the iterated EKF;
* :mod:`~skfilter.factorization.model` — a factorization model and its belief
  (:class:`FactorizationFilter`);
* :mod:`~skfilter.factorization.estimators` — :class:`FactorizationRegressor` and
  :class:`FactorizationClassifier`.
"""

from .estimators import FactorizationClassifier, FactorizationRegressor
from .model import FactorizationFilter

__all__ = ["FactorizationRegressor", "FactorizationClassifier", "FactorizationFilter"]
