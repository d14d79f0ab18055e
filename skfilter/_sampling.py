"""Posterior-predictive sampling of the filter estimators: Thompson draws and predictive draws.

Two ways to sample the predictive of a belief ``N(μ, Σ)`` over the parameters of ``h(θ, x)``
(Duran-Martin et al. 2025, "Martingale posterior neural networks for fast sequential decision
making", §2 and Table 1):

* ``'thompson'`` — parameter space: ``θ_s ~ N(μ, Σ)``, then ``f_s = h(θ_s, x)`` at every row. One
  draw ``θ_s`` serves all the rows of ``X``, so each sample is a *function* draw, correlated across
  rows as the belief implies.
* ``'predictive'`` — outcome space (Alg. 1): each row's outputs ``f`` are drawn independently from
  the row's linearised predictive ``N(h(μ, x), J Σ Jᵀ)`` (jointly over the row's ``C`` outputs),
  with ``J = ∂h/∂θ`` at ``μ``. No parameter is sampled: the cost is that of
  ``predict(return_std=True)`` (one Jacobian per row) plus a ``C × C`` factorisation per row,
  instead of a ``P``-dimensional parameter draw and a forward pass per sample.

A mixture state (run-length hypotheses of :class:`~skfilter.BOCDRegressor`) first draws the
hypothesis by its weight, per sample (Thompson) or per row and sample (predictive).
"""

from __future__ import annotations

import torch

from ._utils import seed_from_random_state, torch_generator

#: the values of ``method`` of ``sample_y`` and ``sample_proba``
SAMPLING_METHODS = ("thompson", "predictive")


def psd_square_root(cov: torch.Tensor) -> torch.Tensor:
    """A factor ``L`` with ``L Lᵀ = cov`` for symmetric positive semi-definite ``cov (..., C, C)``:
    the square root of the diagonal for ``C = 1``, else ``V diag(√max(λ, 0))`` from the eigen
    decomposition (so a singular or slightly indefinite rounding of ``J Σ Jᵀ`` is no error)."""
    if cov.shape[-1] == 1:
        return cov.clamp_min(0.0).sqrt()
    lam, V = torch.linalg.eigh(0.5 * (cov + cov.mT))
    return V * lam.clamp_min(0.0).sqrt().unsqueeze(-2)


class PredictiveSamplingMixin:
    """The sampling machinery shared by the regressors and classifiers (module docstring)."""

    def _sampling_generator(self, random_state):
        return torch_generator(seed_from_random_state(random_state), self._device)

    def _joint_linearized(self, Xt, belief):
        """Outputs ``f (…, n, C)`` at the mean of ``belief`` and the per-row predictive covariance
        ``J Σ Jᵀ (…, n, C, C)`` (leading hypotheses axes as the belief's). One output: the diagonal of
        the linearised predictive (the compiled kernel where it serves). Several: the structure's
        quadratic form, chunked over the rows as :meth:`_linearized`."""
        if self._adapter.n_outputs == 1:
            f, v = self._linearized(Xt, belief)
            return f, v.unsqueeze(-1)
        mean = belief.mean
        n_hyp = 1 if mean.dim() == 1 else max(1, mean[..., 0].numel())
        fs, covs = [], []
        with torch.no_grad():
            for a, b in self._chunks(Xt.shape[0], n_hyp):
                f, J = self._adapter.forward_jacobian(mean, Xt[a:b])
                fs.append(f)
                covs.append(self._structure.quadratic_form(belief, J))
        return torch.cat(fs, dim=-2), torch.cat(covs, dim=-3)

    def _hypothesis_draws(self, shape, gen):
        """Indices of hypotheses drawn by their weights, of ``shape`` (None for a single belief)."""
        log_weights = self.filter_state_.log_weights
        if log_weights is None:
            return None
        probs = torch.softmax(log_weights.to(torch.float64), 0).cpu()
        seed = int(torch.randint(0, 2**62, (1,), generator=gen, device=gen.device).item())
        n = 1
        for s in shape:
            n *= s
        which = torch.multinomial(probs, n, replacement=True, generator=torch.Generator().manual_seed(seed))
        return which.reshape(shape)

    def _predictive_output_draws(self, Xt, n_samples, gen, noise=None):
        """``(n, S, C)`` draws of the outputs, each row independently from its linearised predictive
        ``N(f, J Σ Jᵀ + R)`` (Alg. 1); ``noise(f, noise_state) → (…, n, C)`` gives the diagonal ``R``
        (of each hypothesis; None: no noise). Also returns the hypothesis of each draw (``(n, S)``, None
        for a single belief)."""
        state = self.filter_state_
        with torch.no_grad():
            f, cov = self._joint_linearized(Xt, state.belief)
            if noise is not None:
                cov = cov + torch.diag_embed(noise(f, state.noise).to(cov.dtype))  # (…, n, C)
            L = psd_square_root(cov)  # (…, n, C, C)
            n, C = Xt.shape[0], f.shape[-1]
            which = self._hypothesis_draws((n, n_samples), gen)
            z = torch.randn((n, n_samples, C), generator=gen, device=f.device, dtype=f.dtype)
            if which is None:
                out = f.unsqueeze(1) + (L.unsqueeze(1) @ z.unsqueeze(-1)).squeeze(-1)
            else:
                which = which.to(f.device)
                rows = torch.arange(n, device=f.device).unsqueeze(1).expand(n, n_samples)
                f_sel, L_sel = f[which, rows], L[which, rows]  # (n, S, C), (n, S, C, C)
                out = f_sel + (L_sel @ z.unsqueeze(-1)).squeeze(-1)
        return out, which

    def _thompson_output_draws(self, Xt, n_samples, gen):
        """``(S, n, C)`` outputs ``h(θ_s, x)`` for ``θ_s ~ N(μ, Σ)``, one draw shared by every row,
        and the hypothesis of each draw (``(S,)``; None for a single belief)."""
        with torch.no_grad():
            thetas, which = self._parameter_samples(n_samples, gen)
            f = self._adapter.forward_batch(thetas, Xt)  # (S, n, C)
        return f, which
