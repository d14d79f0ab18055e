"""Diagonal EKFs: VD-EKF (precision matching) and FD-EKF (variance matching), spec/diagonal-ekf.md §3."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._base import Structure, UpdateInfo, as_variance_vector, check_step


class DiagonalBelief(NamedTuple):
    """``N(mean, diag(var))``: ``mean (..., P)``, ``var (..., P)``."""

    mean: torch.Tensor
    var: torch.Tensor


def _as_matrix(C):
    return C.reshape(1, 1) if C.dim() == 0 else C


def _innovation(Hw, v, ew):
    """Whitened innovation factor: ``(C, Z, s)`` with ``S = I + Hw diag(v) Hwᵀ = C Cᵀ`` and
    ``Z = C⁻¹ Hw diag(v)``; ``m = 1`` without factorisation (``info`` None; for one belief ``C`` is
    then the scalar ``√S``)."""
    if Hw.dim() == 2 and Hw.shape[0] == 1:  # one belief, one row: fewest operations
        HV = Hw * v
        s = torch.dot(HV[0], Hw[0]).add_(1.0).sqrt_()
        return s, HV / s, None
    HV = Hw * v[..., None, :]
    if Hw.shape[-2] == 1:  # scalar innovation (NaN if S < 0, caught by the step's check)
        s = ((HV[..., 0, :] * Hw[..., 0, :]).sum(-1) + 1.0).sqrt()
        C = s[..., None, None]
        return C, HV / C, None
    S = HV @ Hw.mT
    S.diagonal(dim1=-2, dim2=-1).add_(1.0)
    C, info = torch.linalg.cholesky_ex(S)
    return C, torch.linalg.solve_triangular(C, HV, upper=False), info


class DiagonalCovariance(Structure):
    """Diagonal Gaussian ``N(μ, diag(v))`` with either KL projection of the one-step EKF posterior.

    Transition: ``μ ← g μ + b``, ``v ← g² v + Q`` (eq. 2 with diagonal ``Q``). Update with whitened
    rows ``Hw (m×P)`` and unit noise (so ``Hᵀ R⁻¹ H = HwᵀHw`` and ``Hᵀ R⁻¹ e = Hwᵀ ew``):

    * ``'fd'`` — FD-EKF, inclusive KL(p‖q), §3.2 (eqs. 10–12): ``S = I + Hw diag(v) Hwᵀ = CCᵀ``,
      ``Z = C⁻¹ Hw diag(v)``; ``μ' = μ + Zᵀ C⁻¹ ew`` (the exact EKF mean from the diagonal prior)
      and ``v' = v − colsum(Z ⊙ Z)`` (= the full EKF's marginal variances after one step).
    * ``'vd'`` — VD-EKF, exclusive KL(q‖p), §3.3 (eqs. 13, 25): ``1/v' = 1/v + colsum(Hw ⊙ Hw)``
      (diagonal of the EKF posterior precision). The mean is, with ``vd_mean='paper'``, eq. 25 as
      the authors' code: ``μ' = μ + v' ⊙ Hwᵀ ew`` using the *posterior* ``v'``; with
      ``vd_mean='exact'`` it is the KL-optimal EKF mean ``μ + v ⊙ Hwᵀ S⁻¹ ew`` (= LoFi with rank 0,
      spec/lofi.md eq. 49; see spec/diagonal-ekf.md §6 A1).

    Costs ``O(P m² + m³)`` per step.

    Parameters
    ----------
    projection : {'vd', 'fd'}, default='vd'
    vd_mean : {'paper', 'exact'}, default='paper'

    Examples
    --------
    >>> import torch
    >>> from skfilter.posteriors import DiagonalCovariance
    >>> structure = DiagonalCovariance("fd")
    >>> prior = structure.prior(torch.zeros(2, dtype=torch.float64), 1.0)
    >>> post, _ = structure.update(prior, torch.tensor([[1.0, 1.0]], dtype=torch.float64),
    ...                            torch.tensor([3.0], dtype=torch.float64))
    >>> post.mean.tolist(), post.var.tolist()
    ([1.0, 1.0], [0.6666666666666667, 0.6666666666666667])
    """

    belief_type = DiagonalBelief

    def __init__(self, projection: str = "vd", vd_mean: str = "paper"):
        if projection not in ("vd", "fd"):
            raise ValueError(f"projection must be 'vd' or 'fd', got {projection!r}.")
        if vd_mean not in ("paper", "exact"):
            raise ValueError(f"vd_mean must be 'paper' or 'exact', got {vd_mean!r}.")
        self.projection, self.vd_mean = projection, vd_mean

    def prior(self, mean, prior_variance):
        return DiagonalBelief(mean.clone(), as_variance_vector(prior_variance, mean).expand_as(mean).clone())

    def transition(self, belief, g, Q, shift):
        mean, var = belief
        if g != 1.0:
            mean, var = mean * g, var * (g * g)
        if shift is not None:
            mean = mean + shift
        if isinstance(Q, torch.Tensor) or Q != 0.0:
            var = var + Q
        return DiagonalBelief(mean, var)

    def update(self, belief, Hw, ew, workspace=None):
        mu, v = belief
        C = info = None
        if self.projection == "fd" or self.vd_mean == "exact":
            C, Z, info = _innovation(Hw, v, ew)
            if C.dim() == 0:  # the scalar path: C = √S
                mu = mu + Z[0] * (ew[0] / C)
            elif Hw.shape[-2] == 1:
                mu = mu + Z[..., 0, :] * (ew[..., 0] / C[..., 0, 0])[..., None]
            else:
                z = torch.linalg.solve_triangular(C, ew.unsqueeze(-1), upper=False)
                mu = mu + (Z.mT @ z)[..., 0]
        if self.projection == "fd":
            new_var = v - (Z * Z).sum(-2)
        else:
            new_var = 1.0 / (1.0 / v + (Hw * Hw).sum(-2))
            if self.vd_mean == "paper":
                Hte = Hw.T @ ew if Hw.dim() == 2 else (Hw.mT @ ew.unsqueeze(-1))[..., 0]
                mu = mu + new_var * Hte
        check_step([mu] + ([] if C is None else [C]), positive=new_var, info=info)
        if C is None:
            def factor():
                return _as_matrix(_innovation(Hw, v, ew)[0]), ew
        else:
            def factor():
                return _as_matrix(C), ew
        return DiagonalBelief(mu, new_var), UpdateInfo(factor)

    def quadratic_form(self, belief, J):
        return (J * belief.var[..., None, None, :]) @ J.mT

    def quadratic_diagonal(self, belief, J):
        return (J * J * belief.var[..., None, None, :]).sum(-1)

    def marginal_variance(self, belief):
        return belief.var.clone()

    def covariance(self, belief):
        return torch.diag_embed(belief.var)

    def sample(self, belief, n_samples, generator):
        eps = torch.randn(n_samples, belief.mean.shape[-1], generator=generator,
                          device=belief.mean.device, dtype=belief.mean.dtype)
        return belief.mean + eps * belief.var.sqrt()

    def moment_match(self, belief, log_weights):
        """``μ̄ = Σ_k w_k μ_k``, ``v̄ = Σ_k w_k (v_k + (μ_k − μ̄)²)``: the diagonal of the mixture's
        covariance (the KL projection onto diagonal Gaussians; spec/bone.md RL-MMPR)."""
        w = torch.softmax(log_weights, dim=0)
        mean = w @ belief.mean
        d = belief.mean - mean
        return DiagonalBelief(mean, w @ (belief.var + d * d))
