"""The decoupled EKF of factorization models (Gómez-Uribe & Karrer, §3.2–§3.3, §4.2; Alg. 1 and 2).

Each event (one observation ``y`` with ``d`` outputs) involves a few entities ``i`` (a user, an item,
the block of numeric context weights, the global bias), each a Gaussian block ``N(μ_i, Σ_i)`` of an
:class:`~skfilter.factorization.entities.EntityTable`. With a block-diagonal prior the exact update
leaves every other entity as it was (Eq. 12), and the DEKF keeps only the involved blocks of the
update, dropping the cross-blocks it would create (Eq. 17).

**Update** (Alg. 1, in whitened units). The likelihood (:mod:`skfilter.likelihoods`) turns the
linearised exponential-family observation into ``m`` whitened rows: with ``J_i = ∂λ/∂ξ_i`` at the
predicted means, ``H_i`` the whitened rows of block ``i`` and ``e`` the whitened residual
(Gaussian: ``J/√r`` and ``(y − λ)/√r``; Bernoulli, Poisson, categorical: the canonical-link Fisher
rows ``R^{1/2} J`` and ``R^{−1/2}(y − h)``),

    q_i = Σ_i H_iᵀ,   S = I + Σ_i H_i q_i,   μ_i += q_i S⁻¹ e,   Σ_i −= q_i S⁻¹ q_iᵀ,

which is Alg. 1 line by line (``D = Σ J_i q_i``, ``B = (I + A D)⁻¹``) with ``A`` absorbed by the
whitening, and the EKF when one entity holds every parameter.

**Drift towards a reference** (Alg. 2, Eq. 19): ``ξ_{i,t} = α(ξ_{i,t−1} − ξ_0i) + ξ_0i + ω``,
``ω ~ N(0, Ω)``, with the reference ``ξ_0i`` random and learned jointly through its
cross-covariance ``Σ_0i``. The predict step is **lazy**: an entity is brought forward only when an
event involves it, over the ``Δ`` steps since it was last seen, exactly (Eq. 23, Eq. 24 corrected):
with ``a = α^Δ`` and ``Q = (1 − α^{2Δ})/(1 − α²) Ω``,

    μ_i ← a (μ_i − μ_0i) + μ_0i
    Σ_i ← Q + a² Σ_i + (1 − a)² Σ_0i0 + (a − a²)(Σ_0i + Σ_0iᵀ)
    Σ_0i ← a Σ_0i + (1 − a) Σ_0i0,

and the update also moves the reference (``q_0i = Σ_0i H_iᵀ``: ``μ_0i += q_0i S⁻¹ e``,
``Σ_0i −= q_0i S⁻¹ q_iᵀ``, ``Σ_0i0 −= q_0i S⁻¹ q_0iᵀ``; Alg. 2 l. 17 with its lost minus signs).

**Iterated EKF** (§4.2, Eq. 41, decoupled as §3.6 of the notes derives it): the mean is iterated
towards the MAP of the involved entities under their block-diagonal prior by Fisher scoring with a
backtracking line search on the log posterior; the covariance uses the last linearisation point.
One iteration from the prior mean is the DEKF step.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..exceptions import FilterStepError
from ..likelihoods import Poisson

__all__ = ["lazy_predict", "dekf_update", "event_log_likelihood", "drift_factors"]


def drift_factors(alpha: float, delta: torch.Tensor, dtype=torch.float64):
    """``(a, g) = (α^Δ, (1 − α^{2Δ}) / (1 − α²))`` per entity for the elapsed steps ``delta``,
    computed stably (``expm1``) for ``α`` near 1; ``Δ = 0`` gives ``(1, 0)``."""
    delta = delta.to(dtype)
    if alpha <= 0.0:
        a = (delta == 0).to(dtype)
        return a, (delta > 0).to(dtype)
    log_a = math.log(alpha)
    a = torch.exp(delta * log_a)
    g = torch.expm1(2.0 * delta * log_a) / math.expm1(2.0 * log_a)
    return a, g


def lazy_predict(state: dict, alpha: float, omega: torch.Tensor, delta: torch.Tensor) -> dict:
    """The Δ-step predict of Alg. 2 (module docstring) for the blocks in ``state`` (a dict of
    ``mean (n, K)``, ``cov (n, K, K)``, ``ref_mean``, ``cross``, ``ref_cov``; ``omega (K,)`` the
    diagonal of ``Ω``; ``delta (n,)`` the elapsed steps). Returns a new dict; all right-hand sides
    use the old values."""
    a, g = drift_factors(alpha, delta, state["mean"].dtype)
    a1, a2 = a[:, None], a[:, None, None]
    cross, ref_cov = state["cross"], state["ref_cov"]
    out = dict(state)
    out["mean"] = a1 * (state["mean"] - state["ref_mean"]) + state["ref_mean"]
    cov = (g[:, None, None] * torch.diag(omega) + a2 * a2 * state["cov"] + (1 - a2) ** 2 * ref_cov
           + (a2 - a2 * a2) * (cross + cross.mT))
    out["cov"] = 0.5 * (cov + cov.mT)
    out["cross"] = a2 * cross + (1 - a2) * ref_cov
    return out


def dekf_update(blocks: list, H: list, e: torch.Tensor, residual=None):
    """One DEKF update of the involved blocks (module docstring), in whitened units.

    Parameters
    ----------
    blocks : list of dict
        Per involved entity: ``mean (K_i,)``, ``cov (K_i, K_i)`` and, with references,
        ``ref_mean``, ``cross``, ``ref_cov``.
    H : list of tensors (m, K_i)
        The whitened rows of each block.
    e : tensor (m,)
        The whitened residual.
    residual : tensor (m,), optional
        The residual the mean moves by (default ``e``); the iterated EKF passes its own.

    Returns
    -------
    list of dict
        The updated blocks (new tensors).
    """
    m = e.shape[0]
    q = [b["cov"] @ h.T for b, h in zip(blocks, H)]
    S = torch.eye(m, dtype=e.dtype, device=e.device) + sum(h @ qi for h, qi in zip(H, q))
    L, info = torch.linalg.cholesky_ex(0.5 * (S + S.T))
    if int(info) or not bool(torch.isfinite(L).all()):
        raise FilterStepError("The innovation covariance of the event is not positive definite (a non-finite "
                              "or degenerate belief); the last good belief is kept.")
    r = e if residual is None else residual
    u = torch.cholesky_solve(r.unsqueeze(-1), L)[:, 0]
    out = []
    for b, h, qi in zip(blocks, H, q):
        Z = torch.linalg.solve_triangular(L, qi.T, upper=False).T  # q S^{-1/2}: q S⁻¹ qᵀ = Z Zᵀ
        new = dict(b)
        new["mean"] = b["mean"] + qi @ u
        cov = b["cov"] - Z @ Z.T
        new["cov"] = 0.5 * (cov + cov.T)
        if "cross" in b:
            q0 = b["cross"] @ h.T
            Z0 = torch.linalg.solve_triangular(L, q0.T, upper=False).T
            new["ref_mean"] = b["ref_mean"] + q0 @ u
            new["cross"] = b["cross"] - Z0 @ Z.T
            ref_cov = b["ref_cov"] - Z0 @ Z0.T
            new["ref_cov"] = 0.5 * (ref_cov + ref_cov.T)
        out.append(new)
    return out


def event_log_likelihood(likelihood, f: torch.Tensor, Y: torch.Tensor, state=None) -> torch.Tensor:
    """``log p(y | λ = f)`` of one event's outputs ``f (1, d)`` (plug-in; for the iterated EKF's line
    search): Poisson exactly, the others through the likelihood's predictive with no parameter
    uncertainty."""
    if isinstance(likelihood, Poisson):
        f = f.clamp(max=likelihood.max_log_rate)
        return (Y * f - torch.exp(f) - torch.lgamma(Y + 1)).sum()
    quad = torch.zeros(f.shape + (f.shape[-1],), dtype=f.dtype, device=f.device)
    return likelihood.log_predictive(f, quad, Y, state).sum()


def finite_or_raise(*tensors):
    """Raise :class:`~skfilter.exceptions.FilterStepError` unless every tensor is finite."""
    for t in tensors:
        if not bool(torch.isfinite(t).all()):
            raise FilterStepError("The DEKF step produced non-finite values; the last good belief is kept. Try a "
                                  "smaller prior_variance, a larger obs_variance, or iterations > 1.")


def as_numpy_ids(column) -> list:
    """A column of entity ids as a list of hashable Python scalars (NumPy scalars unwrapped, so that
    ``1`` and ``np.int64(1)`` are the same entity)."""
    arr = np.asarray(column, dtype=object)
    return [v.item() if isinstance(v, np.generic) else v for v in arr]
