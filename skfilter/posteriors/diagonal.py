"""Diagonal EKFs: VD-EKF (precision matching) and FD-EKF (variance matching), spec/diagonal-ekf.md §3."""

from __future__ import annotations

import torch

from ._base import Posterior, check_finite_positive, cholesky_or_raise


class DiagonalCovariance(Posterior):
    """Diagonal Gaussian ``N(μ, diag(v))`` with either KL projection of the one-step EKF posterior.

    Predict: ``μ⁻ = γ μ``, ``v⁻ = γ² v + q`` (eq. 2 with diagonal ``Q``). Update with whitened
    rows ``Hw (m×P)`` and unit noise (so ``Hᵀ R⁻¹ H = HwᵀHw`` and ``Hᵀ R⁻¹ e = Hwᵀ ew``):

    * ``'fd'`` — FD-EKF, inclusive KL(p‖q), §3.2 (eqs. 10–12): ``S = I + Hw diag(v⁻) Hwᵀ = LLᵀ``,
      ``Z = L⁻¹ Hw diag(v⁻)``; ``μ = μ⁻ + Zᵀ L⁻¹ ew`` (the exact EKF mean from the diagonal prior)
      and ``v = v⁻ − colsum(Z ⊙ Z)`` (= the full EKF's marginal variances after one step).
    * ``'vd'`` — VD-EKF, exclusive KL(q‖p), §3.3 (eqs. 13, 25): ``1/v = 1/v⁻ + colsum(Hw ⊙ Hw)``
      (diagonal of the EKF posterior precision). The mean is, by default (``vd_mean='paper'``),
      eq. 25 as the authors' code: ``μ = μ⁻ + v ⊙ Hwᵀ ew`` using the *posterior* ``v``; with
      ``vd_mean='exact'`` it is the KL-optimal EKF mean ``μ⁻ + v⁻ ⊙ Hwᵀ S⁻¹ ew`` (= LoFi with rank 0,
      spec/lofi.md eq. 49; see spec/diagonal-ekf.md §6 A1).

    Costs ``O(P m² + m³)`` per step.
    """

    def __init__(self, mean: torch.Tensor, prior_variance: float, projection: str = "vd",
                 vd_mean: str = "paper"):
        if projection not in ("vd", "fd"):
            raise ValueError(f"projection must be 'vd' or 'fd', got {projection!r}.")
        if vd_mean not in ("paper", "exact"):
            raise ValueError(f"vd_mean must be 'paper' or 'exact', got {vd_mean!r}.")
        self.projection, self.vd_mean = projection, vd_mean
        self.mean = mean.clone()
        self.var = torch.full_like(mean, float(prior_variance))

    def _predicted_var(self, gamma, q):
        v = self.var
        if gamma != 1.0:
            v = v * (gamma * gamma)
        if q:
            v = v + q
        return v

    def propose(self, Hw, ew, gamma=1.0, q=0.0, J=None):
        v = self._predicted_var(gamma, q)
        mu = self.mean * gamma if gamma != 1.0 else self.mean
        L = None
        if self.projection == "fd" or self.vd_mean == "exact":
            HV = Hw * v
            if Hw.shape[0] == 1:  # scalar innovation: no factorisation (NaN if S < 0, caught below)
                s = torch.dot(HV[0], Hw[0]).add_(1.0).sqrt_()
                L = s
                Z = HV / s
                mu = mu + Z[0] * (ew[0] / s)
            else:
                S = HV @ Hw.T
                S.diagonal().add_(1.0)
                L = cholesky_or_raise(S)
                Z = torch.linalg.solve_triangular(L, HV, upper=False)
                z = torch.linalg.solve_triangular(L, ew.unsqueeze(1), upper=False)
                mu = torch.addmm(mu.unsqueeze(1), Z.T, z).squeeze(1)
        if self.projection == "fd":
            new_var = v - (Z * Z).sum(0)
        else:
            new_var = 1.0 / (1.0 / v + (Hw * Hw).sum(0))
            if self.vd_mean == "paper":
                mu = mu + new_var * (Hw.T @ ew)
        check_finite_positive(mu, new_var, *(() if L is None else (L,)))  # overflow makes S infinite
        quad = None
        if J is not None:
            quad = torch.bmm(J * v, J.transpose(1, 2))
        return (mu, new_var), quad

    def commit(self, pending):
        self.mean, self.var = pending

    def predictive_cov(self, J, gamma=1.0, q=0.0):
        return torch.bmm(J * self._predicted_var(gamma, q), J.transpose(1, 2))

    def predictive_var(self, J, gamma=1.0, q=0.0):
        return (J * J * self._predicted_var(gamma, q)).sum(-1)

    def marginal_variance(self):
        return self.var.clone()

    def covariance(self):
        return torch.diag(self.var)

    def sample(self, n_samples, generator):
        eps = torch.randn(n_samples, self.n_params, generator=generator,
                          device=self.mean.device, dtype=self.mean.dtype)
        return self.mean + eps * self.var.sqrt()

    def state_dict(self):
        return {"mean": self.mean, "var": self.var}
