"""Posterior structures (the *posterior structure* axis, A.1 of DESIGN.md).

Each structure holds a Gaussian belief ``N(μ, Σ)`` over the flat parameters in its own
parametrisation and implements one filter step for whitened pseudo-observations
(:mod:`skfilter.likelihoods`): predict with the dynamics ``θ_t = γ θ_{t−1} + N(0, q I)``, then
condition on ``Hw θ ≈ ew`` with unit noise. Steps are transactional: :meth:`Posterior.propose`
computes the new belief without touching the current one (raising
:class:`~skfilter.exceptions.FilterStepError` on a numerical failure) and :meth:`Posterior.commit`
installs it.
"""

from ._base import Posterior
from .diagonal import DiagonalCovariance
from .full import FullCovariance
from .lofi import LowRankPrecision

__all__ = ["Posterior", "FullCovariance", "DiagonalCovariance", "LowRankPrecision"]
