"""The interface every posterior structure implements."""

from __future__ import annotations

import math

import torch

from ..exceptions import FilterStepError


class Posterior:
    """Gaussian belief over flat parameters ``θ ∈ R^P``; see :mod:`skfilter.posteriors`.

    Subclasses set ``self.mean`` (``(P,)``) and implement the abstract methods below.
    """

    mean: torch.Tensor

    #: whether :meth:`propose` also takes ``Hw``, ``ew`` as NumPy arrays (CPU beliefs; see
    #: :mod:`skfilter._array_ops`), which lets the engine whiten on the host
    host_arrays = False

    @property
    def n_params(self) -> int:
        return int(self.mean.shape[0])

    def propose(self, Hw, ew, gamma=1.0, q=0.0, J=None):
        """Predict with ``(γ, q)`` then update with whitened rows ``Hw (m, P)``, ``ew (m,)``.

        Returns ``(pending, quad)``: ``pending`` is passed to :meth:`commit`; ``quad`` is
        ``J Σ_{t|t−1} Jᵀ`` of shape ``(n, C, C)`` for the optional ``J (n, C, P)`` (the
        one-step-ahead predictive of the rows being learned), else ``None``.
        """
        raise NotImplementedError

    def predicted_mean(self, gamma=1.0, q=0.0) -> torch.Tensor:
        """``μ_{t|t−1}``, the mean after the dynamics, where the next step linearises ``h``."""
        return self.mean * gamma if gamma != 1.0 else self.mean

    def commit(self, pending) -> None:
        """Install a belief returned by :meth:`propose`."""
        raise NotImplementedError

    def predictive_cov(self, J, gamma=1.0, q=0.0):
        """``J Σ' Jᵀ`` (``(n, C, C)``) for ``Σ'`` the covariance after the dynamics ``(γ, q)``."""
        raise NotImplementedError

    def predictive_var(self, J, gamma=1.0, q=0.0):
        """Diagonal of :meth:`predictive_cov`, ``(n, C)``."""
        return self.predictive_cov(J, gamma, q).diagonal(dim1=1, dim2=2)

    def marginal_variance(self) -> torch.Tensor:
        """``diag(Σ)``, shape ``(P,)``."""
        raise NotImplementedError

    def covariance(self) -> torch.Tensor:
        """Dense ``Σ`` (``(P, P)``); for tests and small models."""
        raise NotImplementedError

    def sample(self, n_samples: int, generator: torch.Generator) -> torch.Tensor:
        """``n_samples`` draws ``θ ~ N(μ, Σ)``, shape ``(n_samples, P)``."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        """The tensors that define the belief (references, not copies)."""
        raise NotImplementedError

    def to(self, device=None, dtype=None):
        """Move every state tensor; returns ``self``."""
        for k, v in vars(self).items():
            if isinstance(v, torch.Tensor):
                setattr(self, k, v.to(device=device, dtype=dtype))
        return self


def cholesky_or_raise(S: torch.Tensor, what: str = "innovation covariance") -> torch.Tensor:
    """Lower Cholesky factor of SPD ``S``; :class:`FilterStepError` if it is not positive definite."""
    L, info = torch.linalg.cholesky_ex(S)
    if int(info.max()) if info.dim() else int(info):
        raise FilterStepError(f"The {what} is not positive definite (the belief is degenerate).")
    return L


def check_finite_positive(mean: torch.Tensor, variances: torch.Tensor, *others: torch.Tensor,
                          info: torch.Tensor | None = None, what: str = "innovation covariance",
                          positive: bool = True) -> None:
    """Raise :class:`FilterStepError` unless ``mean`` (and ``others``) are finite, ``variances``
    finite and (if ``positive``) > 0, and (if given) the ``info`` of :func:`torch.linalg.cholesky_ex` of the ``what``
    matrix is 0.

    One host synchronisation: a sum is non-finite if any term is (``inf − inf`` is NaN; a finite
    sum overflowing to ``inf`` means values near the float range, a failure as well), and ``amin``
    propagates NaN.
    """
    parts = [t.sum() for t in (mean, variances, *others)]
    n_sums = len(parts)
    if positive:
        parts.append(variances.amin())
    if info is not None:
        parts.append(info.max().to(mean.dtype) if info.dim() else info.to(mean.dtype))
    vals = torch.stack(parts).tolist()
    if info is not None and vals[-1] != 0:
        raise FilterStepError(f"The {what} is not positive definite (the belief is degenerate).")
    if not (all(math.isfinite(v) for v in vals[:n_sums]) and (not positive or vals[n_sums] > 0)):
        raise FilterStepError(
            "The filter step produced non-finite values or non-positive variances; "
            "the last good belief is kept. Try a smaller prior_variance or a larger obs_variance."
        )
