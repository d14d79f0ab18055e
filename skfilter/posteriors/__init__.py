"""Posterior structures (the *posterior structure* axis of the engine).

A structure (:class:`Structure`) is a stateless object with pure functions over its *beliefs*,
immutable records of arrays (see :mod:`skfilter.posteriors._base`): ``prior``, ``transition`` (the
linear-Gaussian dynamics), ``inflate``, ``update`` (condition on whitened pseudo-observations
``Hw θ ≈ ew`` with unit noise, :mod:`skfilter.likelihoods`), ``quadratic_form`` (``J Σ Jᵀ``),
``sample``, ``moment_match``. Beliefs may carry leading hypotheses axes; every function handles them
in one batched operation.

============================  ========================  ==============================================
structure                     belief                    paper
============================  ========================  ==============================================
:class:`FullCovariance`       :class:`FullBelief`       diagonal-EKF paper §2.1 (FCEKF)
:class:`DiagonalCovariance`   :class:`DiagonalBelief`   diagonal-EKF paper §2.2 (FD/VD-EKF)
:class:`LowRankPrecision`     :class:`LowRankBelief`    LoFi paper §3 (LoFi)
:class:`BlockDiagonal`        :class:`BlockBelief`      one structure per parameter block (DEKF-style)
:class:`FactoredCovariance`   :class:`FactoredBelief`   martingale-posterior paper, Alg. 2–4 (LRKF,
                                                        HiLoFi, LoLoFi): blocks of
                                                        :class:`CholeskyFactor` / :class:`LowRankFactor`
                                                        square-root factors
============================  ========================  ==============================================
"""

from ._base import Posterior, Structure, UpdateInfo, map_belief, select_hypothesis, stack_beliefs, stiffness_limit
from .blocks import BlockBelief, BlockDiagonal
from .diagonal import DiagonalBelief, DiagonalCovariance
from .factored import CholeskyFactor, FactoredBelief, FactoredCovariance, LowRankFactor
from .full import FullBelief, FullCovariance
from .lofi import LowRankBelief, LowRankPrecision

__all__ = ["Posterior", "Structure", "UpdateInfo", "map_belief", "select_hypothesis", "stack_beliefs",
           "stiffness_limit",
           "FullCovariance", "FullBelief", "DiagonalCovariance", "DiagonalBelief",
           "LowRankPrecision", "LowRankBelief", "BlockDiagonal", "BlockBelief",
           "FactoredCovariance", "FactoredBelief", "CholeskyFactor", "LowRankFactor"]
