"""Dynamics: the conditional prior of the parameters between two steps (the *dynamics* axis, M.3).

One object, :class:`Dynamics`, describes what happens to a belief before a step, for every posterior
structure. It composes, in this order,

1. **inflation** of the previous posterior (LoFi's App. E: ``'simple'``, ``'bayesian'``,
   ``'hybrid'``, factor ``α``; LoFi paper App. E); the full and diagonal structures support
   ``'simple'`` (``Σ ← (1 + α) Σ``);
2. the **linear-Gaussian transition** ``θ_t = g θ_{t−1} + b + N(0, diag(Q))`` with

   * decay ``γ`` and process noise ``q`` (a float, or one value per parameter — per block through
     :meth:`Dynamics.per_block`): ``θ_t = γ θ_{t−1} + N(0, q I)`` (LoFi paper §3.1, eqs. 3 and 14);
   * Ornstein–Uhlenbeck **mean reversion** towards a reference Gaussian ``N(μ₀, Σ₀)`` (the prior by
     default) at rate ``ρ ∈ [0, 1]`` — BONE's C-OU (thesis §3.1.4, eq. 3.13, with its ``γ`` equal to
     ``1 − ρ``): ``μ ← (1 − ρ) μ + ρ μ₀``, ``Σ ← (1 − ρ)² Σ + (1 − (1 − ρ)²) Σ₀``;

   together ``g = γ (1 − ρ)``, ``b = ρ μ₀``, ``Q = q + (1 − (1 − ρ)²) diag(Σ₀)``. ``ρ = 1`` is a
   reset to the reference (exactly, with ``q = 0``);
3. a **reset** to the reference (``reset=True``; BONE's prior reset PR), or a **moment-matched
   reset** over hypotheses (:meth:`skfilter.posteriors.Structure.moment_match`, RL-MMPR), which
   the hypotheses machinery calls.

Estimators keep their simple ``decay``/``process_noise`` parameters and build the object; the
engine (:mod:`skfilter.filtering`) only sees :class:`Dynamics`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

INFLATIONS = (None, "bayesian", "simple", "hybrid")


class Reference(NamedTuple):
    """A Gaussian ``N(mean, diag(variance))`` over the flat parameters: the prior of a stream, the
    target of mean reversion and of resets. ``variance`` is a float or a ``(P,)`` tensor."""

    mean: torch.Tensor
    variance: Any


@dataclass(frozen=True)
class Dynamics:
    """The conditional prior between steps (module docstring).

    Parameters
    ----------
    decay : float, default=1.0
        ``γ ∈ [0, 1]``.
    process_noise : float or tensor of shape (P,), default=0.0
        ``q ≥ 0``, one value or one per parameter.
    reversion : float, default=0.0
        OU rate ``ρ ∈ [0, 1]`` towards the reference (0: none; 1: reset).
    reset : bool, default=False
        Replace the belief by the reference before every step.
    inflation : {None, 'bayesian', 'simple', 'hybrid'}, default=None
    inflation_factor : float, default=0.0
        ``α ≥ 0``.

    Examples
    --------
    >>> from skfilter.dynamics import Dynamics
    >>> Dynamics().is_static, Dynamics(decay=0.99).is_static
    (True, False)
    >>> g, Q, shift = Dynamics(decay=0.5, reversion=0.5).transition(reference_variance=2.0)
    >>> g, Q, shift
    (0.25, 1.5, 0.5)
    """

    decay: float = 1.0
    process_noise: Any = 0.0
    reversion: float = 0.0
    reset: bool = False
    inflation: Any = None
    inflation_factor: float = 0.0

    def __post_init__(self):
        if not 0.0 <= float(self.decay) <= 1.0:
            raise ValueError(f"decay must be in [0, 1], got {self.decay!r}.")
        if not 0.0 <= float(self.reversion) <= 1.0:
            raise ValueError(f"reversion must be in [0, 1], got {self.reversion!r}.")
        if self.inflation not in INFLATIONS:
            raise ValueError(f"inflation must be one of {INFLATIONS}, got {self.inflation!r}.")
        if float(self.inflation_factor) < 0.0:
            raise ValueError(f"inflation_factor must be >= 0, got {self.inflation_factor!r}.")
        q = self.process_noise
        if isinstance(q, torch.Tensor) and q.dim() == 0:
            object.__setattr__(self, "process_noise", float(q))
        # computed once: the engine asks at every step
        object.__setattr__(self, "_static", self.decay == 1.0 and not self.has_process_noise
                           and self.reversion == 0.0 and not self.reset and not self.inflates)

    @property
    def inflates(self) -> bool:
        """Whether the inflation step changes the belief."""
        return self.inflation is not None and self.inflation_factor != 0.0

    @property
    def has_process_noise(self) -> bool:
        q = self.process_noise
        return isinstance(q, torch.Tensor) or q != 0.0

    @property
    def is_static(self) -> bool:
        """Whether the belief passes through unchanged (the predict step is the identity)."""
        return self._static

    def transition(self, reference_variance=None):
        """``(g, Q, shift)`` of the linear-Gaussian transition (module docstring, item 2):
        ``μ ← g μ + shift · μ₀``, ``Σ ← g² Σ + diag(Q)``; ``Q`` a float or a ``(P,)`` tensor."""
        rho = float(self.reversion)
        keep = 1.0 - rho
        g = float(self.decay) * keep
        Q = self.process_noise
        if rho:
            Q = Q + (1.0 - keep * keep) * reference_variance
        return g, Q, rho

    @staticmethod
    def per_block(values: dict, blocks: dict, n_params: int, default: float = 0.0, like=None) -> torch.Tensor:
        """A ``(P,)`` vector of per-parameter values from one value per named block.

        ``blocks`` maps block names to index tensors (e.g. :attr:`skfilter.models.ModuleAdapter.blocks`).
        """
        out = torch.full((n_params,), float(default), dtype=torch.float64 if like is None else like.dtype,
                         device=None if like is None else like.device)
        for name, value in values.items():
            if name not in blocks:
                raise ValueError(f"Unknown parameter block {name!r}; the blocks are {sorted(blocks)}.")
            out[blocks[name]] = float(value)
        return out


def apply_dynamics(structure, belief, dynamics: Dynamics, reference: Reference):
    """The belief after ``dynamics`` (module docstring), computed by ``structure``'s pure functions.

    ``reference`` is the prior ``N(μ₀, Σ₀)`` that reversion and resets aim at. Returns ``belief``
    itself when the dynamics are static.
    """
    if dynamics.is_static:
        return belief
    if dynamics.reset:
        prior = structure.prior(reference.mean, reference.variance)
        return structure.broadcast_like(prior, belief)
    if dynamics.inflates:
        belief = structure.inflate(belief, dynamics.inflation, float(dynamics.inflation_factor))
    g, Q, shift = dynamics.transition(reference.variance)
    return structure.transition(belief, g, Q, None if not shift else shift * reference.mean)
