"""Full-covariance EKF (FCEKF; spec/diagonal-ekf.md §3.1, spec/lofi.md §4)."""

from __future__ import annotations

import torch

from ._base import Posterior, check_finite_positive, cholesky_or_raise


class FullCovariance(Posterior):
    """Dense covariance ``Σ`` (``P × P``), updated in ``O(P² m)`` per step.

    One step, with whitened rows ``Hw (m×P)`` and unit noise (eqs. 4–7 of the diagonal-EKF paper)::

        Σ⁻ = γ² Σ + q I,          μ⁻ = γ μ
        S  = I + Hw Σ⁻ Hwᵀ = L Lᵀ                      (m × m, Cholesky)
        V  = Σ⁻ Hwᵀ L⁻ᵀ                                (P × m)
        μ  = μ⁻ + V L⁻¹ ew                              (= μ⁻ + K e,  K = Σ⁻Hᵀ S⁻¹)
        Σ  = Σ⁻ − V Vᵀ                                  (= Σ⁻ − K S Kᵀ)

    ``Σ⁻`` is never formed: ``Σ⁻ Hwᵀ = γ² Σ Hwᵀ + q Hwᵀ``. :meth:`propose` computes the new mean,
    ``V`` and the new diagonal ``γ² diag(Σ) + q − rowsum(V ⊙ V)`` and checks them (finite, positive)
    without touching ``Σ``; :meth:`commit` then updates ``Σ`` in place (``Σ ← γ² Σ − V Vᵀ + q I``,
    one BLAS rank-``m`` update, no ``P × P`` temporary), which cannot fail. ``V Vᵀ`` is symmetric
    positive semi-definite, so the update keeps ``Σ`` symmetric and (up to rounding) PSD. A full PSD
    check would cost ``O(P³)``; the Cholesky factor of ``S`` and the sign of the new diagonal are
    checked instead. One observation row (``m = 1``) takes a scalar path without factorisations.

    Parameters
    ----------
    mean : tensor (P,)
        Prior mean.
    prior_variance : float
        ``Σ₀ = prior_variance · I``.
    """

    def __init__(self, mean: torch.Tensor, prior_variance: float):
        self.mean = mean.clone()
        P = mean.shape[0]
        self.cov = torch.eye(P, device=mean.device, dtype=mean.dtype) * prior_variance

    def propose(self, Hw, ew, gamma=1.0, q=0.0, J=None):
        m, P = Hw.shape
        A = Hw if J is None else torch.cat([Hw, J.reshape(-1, P)])
        SA = self.cov @ A.T  # Σ Aᵀ (Σ symmetric), then Σ⁻ Aᵀ = γ² Σ Aᵀ + q Aᵀ
        if gamma != 1.0:
            SA.mul_(gamma * gamma)
        if q:
            SA.add_(A.T, alpha=q)
        SHt = SA[:, :m]
        mu = self.mean * gamma if gamma != 1.0 else self.mean
        if m == 1:
            # S = 1 + h Σ⁻ hᵀ ≥ 1 for PSD Σ⁻; a negative S gives NaN, caught by the check below
            s = torch.dot(Hw[0], SHt[:, 0]).add_(1.0).sqrt_()
            L = s
            V = SHt / s
            mu = mu + V[:, 0] * (ew[0] / s)
        else:
            S = Hw @ SHt
            S.diagonal().add_(1.0)
            L = cholesky_or_raise(S)
            V = torch.linalg.solve_triangular(L, SHt.T, upper=False).T
            z = torch.linalg.solve_triangular(L, ew.unsqueeze(1), upper=False)
            mu = torch.addmm(mu.unsqueeze(1), V, z).squeeze(1)
        new_diag = self.cov.diagonal() * (gamma * gamma) if gamma != 1.0 else self.cov.diagonal()
        new_diag = new_diag - (V * V).sum(1)
        if q:
            new_diag = new_diag + q
        check_finite_positive(mu, new_diag, L)  # an overflowing row makes S (so L) infinite
        quad = None
        if J is not None:
            n, C, _ = J.shape
            SJ = SA[:, m:].T.reshape(n, C, P)  # rows of J Σ⁻
            quad = torch.bmm(J, SJ.transpose(1, 2))
        return (mu, V, gamma, q), quad

    def commit(self, pending):
        mu, V, gamma, q = pending
        if gamma != 1.0:
            self.cov.mul_(gamma * gamma)
        self.cov.addmm_(V, V.T, alpha=-1.0)
        if q:
            self.cov.diagonal().add_(q)
        self.mean = mu

    def predictive_cov(self, J, gamma=1.0, q=0.0):
        n, C, P = J.shape
        Jf = J.reshape(n * C, P)
        JS = Jf @ self.cov
        if gamma != 1.0:
            JS.mul_(gamma * gamma)
        if q:
            JS.add_(Jf, alpha=q)
        return torch.bmm(JS.view(n, C, P), J.transpose(1, 2))

    def marginal_variance(self):
        return self.cov.diagonal().clone()

    def covariance(self):
        return self.cov.clone()

    def sample(self, n_samples, generator):
        L, info = torch.linalg.cholesky_ex(self.cov)
        if int(info):
            # semidefinite to rounding: use the symmetric square root of the clipped spectrum
            w, U = torch.linalg.eigh(self.cov)
            L = U * w.clamp_min(0).sqrt()
        eps = torch.randn(n_samples, self.n_params, generator=generator,
                          device=self.mean.device, dtype=self.mean.dtype)
        return self.mean + eps @ L.T

    def state_dict(self):
        return {"mean": self.mean, "cov": self.cov}
