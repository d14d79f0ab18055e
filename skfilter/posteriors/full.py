"""Full-covariance EKF (FCEKF; spec/diagonal-ekf.md §3.1, spec/lofi.md §4)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._base import Structure, UpdateInfo, as_variance_vector, check_step


class FullBelief(NamedTuple):
    """``N(mean, cov)``: ``mean (..., P)``, ``cov (..., P, P)``."""

    mean: torch.Tensor
    cov: torch.Tensor


def _add_diagonal(M, Q):
    """``M + diag(Q)`` (a new tensor) for a float or ``(..., P)`` ``Q``."""
    out = M.clone()
    out.diagonal(dim1=-2, dim2=-1).add_(Q)
    return out


class FullCovariance(Structure):
    """Dense covariance ``Σ`` (``P × P``), updated in ``O(P² m)`` per step.

    Update with whitened rows ``Hw (m×P)`` and unit noise (eqs. 4–7 of the diagonal-EKF paper)::

        S  = I + Hw Σ Hwᵀ = C Cᵀ                        (m × m, Cholesky)
        V  = Σ Hwᵀ C⁻ᵀ                                  (P × m)
        μ' = μ + V C⁻¹ ew                               (= μ + K e,  K = Σ Hᵀ S⁻¹)
        Σ' = Σ − V Vᵀ                                   (= Σ − K S Kᵀ)

    ``V Vᵀ`` is symmetric positive semi-definite, so ``Σ'`` stays symmetric and (up to rounding)
    PSD. A full PSD check would cost ``O(P³)``; the Cholesky factor of ``S``, the finiteness of
    the mean and the sign of the new diagonal are checked instead. One observation row (``m = 1``)
    takes a scalar path without factorisations. Transition: ``μ ← g μ + b``, ``Σ ← g² Σ + diag(Q)``.

    Examples
    --------
    >>> import torch
    >>> from skfilter.posteriors import FullCovariance
    >>> structure = FullCovariance()
    >>> prior = structure.prior(torch.zeros(2, dtype=torch.float64), 1.0)
    >>> post, info = structure.update(prior, torch.tensor([[1.0, 0.0]], dtype=torch.float64),
    ...                               torch.tensor([1.0], dtype=torch.float64))
    >>> post.mean.tolist(), post.cov.diagonal().tolist()
    ([0.5, 0.0], [0.5, 1.0])
    """

    belief_type = FullBelief

    def prior(self, mean, prior_variance):
        var = as_variance_vector(prior_variance, mean)
        cov = torch.diag_embed(var.expand_as(mean)).contiguous() if mean.dim() > 1 else torch.diag(var)
        return FullBelief(mean.clone(), cov)

    def transition(self, belief, g, Q, shift):
        mean, cov = belief
        if g != 1.0:
            mean, cov = mean * g, cov * (g * g)
        if shift is not None:
            mean = mean + shift
        if isinstance(Q, torch.Tensor) or Q != 0.0:
            cov = _add_diagonal(cov, Q)
        return FullBelief(mean, cov)

    def update(self, belief, Hw, ew, workspace=None):
        mean, cov = belief
        m = Hw.shape[-2]
        SH = cov @ Hw.mT  # Σ Hwᵀ (Σ symmetric), (..., P, m)
        info = None
        if m == 1 and Hw.dim() == 2:  # one belief, one row: scalar innovation, fewest operations
            # S = 1 + h Σ hᵀ ≥ 1 for PSD Σ; a negative S gives NaN, caught by the check below
            s = torch.dot(Hw[0], SH[:, 0]).add_(1.0).sqrt_()
            C = s
            V = SH / s
            mu = mean + V[:, 0] * (ew[0] / s)
        elif m == 1:
            s = ((Hw[..., 0, :] * SH[..., :, 0]).sum(-1) + 1.0).sqrt()
            C = s[..., None, None]
            V = SH / C
            mu = mean + V[..., :, 0] * (ew[..., 0] / s)[..., None]
        else:
            S = Hw @ SH
            S.diagonal(dim1=-2, dim2=-1).add_(1.0)
            C, info = torch.linalg.cholesky_ex(S)
            V = torch.linalg.solve_triangular(C, SH.mT, upper=False).mT
            z = torch.linalg.solve_triangular(C, ew.unsqueeze(-1), upper=False)
            mu = mean + (V @ z)[..., 0]
        # Σ − V Vᵀ into the workspace's matrix when there is one (a fresh P × P allocation per step
        # makes the allocator return and re-fault pages: several times the cost of the update)
        out = None
        if workspace is not None and workspace.cov is not cov and workspace.cov.shape == cov.shape \
                and workspace.cov.dtype == cov.dtype and workspace.cov.device == cov.device:
            out = workspace.cov
        if cov.dim() == 2 and m == 1:  # one BLAS rank-1 update (one pass over Σ)
            new_cov = torch.addr(cov, V[:, 0], V[:, 0], alpha=-1.0, out=out) if out is not None else \
                torch.addr(cov, V[:, 0], V[:, 0], alpha=-1.0)
        elif cov.dim() == 2:
            new_cov = torch.addmm(cov, V, V.mT, alpha=-1.0, out=out) if out is not None else \
                torch.addmm(cov, V, V.mT, alpha=-1.0)
        elif cov.dim() == 3:
            new_cov = torch.baddbmm(cov, V, V.mT, alpha=-1.0)
        else:
            new_cov = cov - V @ V.mT
        check_step([mu, C], positive=new_cov.diagonal(dim1=-2, dim2=-1), info=info)
        return FullBelief(mu, new_cov), UpdateInfo(lambda: (C.reshape(1, 1) if C.dim() == 0 else C, ew))

    def quadratic_form(self, belief, J):
        cov = belief.cov
        *batch, n, C, P = J.shape
        JS = J.reshape(*batch, n * C, P) @ cov
        return JS.reshape(*batch, n, C, P) @ J.mT

    def quadratic_diagonal(self, belief, J):
        *batch, n, C, P = J.shape
        JS = J.reshape(*batch, n * C, P) @ belief.cov
        return (JS.reshape(*batch, n, C, P) * J).sum(-1)

    def marginal_variance(self, belief):
        return belief.cov.diagonal(dim1=-2, dim2=-1).clone()

    def covariance(self, belief):
        return belief.cov.clone()

    def sample(self, belief, n_samples, generator):
        L, info = torch.linalg.cholesky_ex(belief.cov)
        if int(info):
            # semidefinite to rounding: use the symmetric square root of the clipped spectrum
            w, U = torch.linalg.eigh(belief.cov)
            L = U * w.clamp_min(0).sqrt()
        eps = torch.randn(n_samples, belief.mean.shape[-1], generator=generator,
                          device=belief.mean.device, dtype=belief.mean.dtype)
        return belief.mean + eps @ L.T

    def moment_match(self, belief, log_weights):
        """``μ̄ = Σ_k w_k μ_k``, ``Σ̄ = Σ_k w_k (Σ_k + (μ_k − μ̄)(μ_k − μ̄)ᵀ)`` (exact; spec/bone.md RL-MMPR)."""
        w = torch.softmax(log_weights, dim=0)
        mean = torch.einsum("k,kp->p", w, belief.mean)
        d = belief.mean - mean
        cov = torch.einsum("k,kpq->pq", w, belief.cov) + (d * w[:, None]).T @ d
        return FullBelief(mean, cov)
