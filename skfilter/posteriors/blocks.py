"""Block-diagonal composite structure: one posterior structure per parameter block.

The parameters are partitioned into named blocks (the last layer and the hidden layers of an MLP,
one block per user or item of a factorization model, …; :attr:`skfilter.models.ModuleAdapter.blocks`)
and the belief is ``Σ = blockdiag(Σ_1, …, Σ_B)``, each block in its own structure (full, diagonal,
LoFi, or another composite).

**Update** (the decoupled EKF, Gómez-Uribe & Karrer 2021, §3.2, generalised to any structure per block). The exact
EKF posterior of a block-diagonal prior is not block-diagonal; its diagonal blocks are obtained
exactly by conditioning each block on the observation with the other blocks' uncertainty treated as
noise. In whitened units (``R = I``), with ``H_b`` the columns of ``Hw`` of block ``b`` and
``Q_b = H_b Σ_b H_bᵀ``:

    S = I + Σ_b Q_b,       N_b = S − Q_b = I + Σ_{c≠b} Q_c = C_b C_bᵀ,
    block b is updated by its own structure with rows  C_b⁻¹ H_b  and residual  C_b⁻¹ ew,

all from the same predicted belief. For a full block this is exactly DEKF's
``K_b = Σ_b H_bᵀ S⁻¹``, ``Σ_b' = Σ_b − K_b S K_bᵀ`` (the marginal block of the exact posterior); for
LoFi or diagonal blocks it is that block's projection of it. With a single block ``N = I`` and the
composite is its block's structure.

**Mean-field update** (``coupling='mean-field'``: PULSE, thesis §5.2, Theorem 5.3 and Alg. 14 as
corrected). The block mean-field posterior ``q(θ) = Π_b N(θ_b | m_b, Σ_b)`` of recursive variational
inference under the linearised likelihood keeps each block's *precision* block of the exact
posterior, ``Σ_b'⁻¹ = Σ_b⁻¹ + H_bᵀ H_b``, while the means solve the coupled fixed point
``Δ_b = Σ_b' H_bᵀ (e − Σ_{c≠b} H_c Δ_c)``, whose solution is the exact joint mean update
``Δ_b = Σ_b H_bᵀ S⁻¹ e`` (Theorem 5.3's ``K̂``, without its two ``d × d`` inverses). Block ``b`` is
therefore updated by its own structure with rows ``H_b`` and residual ``r_b = (I + Q_b) S⁻¹ e``
(its own gain ``Σ_b H_bᵀ (I + Q_b)⁻¹`` then gives that ``Δ_b``). ``coupling='fixed-point'`` solves
the same fixed point by Gauss–Seidel sweeps over the blocks,
``r_b ← e − Σ_{c≠b} Q_c (I + Q_c)⁻¹ r_c`` (``m × m`` algebra only), stopping when no ``r_b`` moves
by more than ``tol · max(1, ‖e‖)`` or after ``max_iter`` sweeps; ``coupling='decoupled'`` is the
original PULSE, each block updated as if the others were known (``r_b = e``). ``N_b`` is summed over the other blocks directly (never
``S − Q_b``, which cancels when block ``b`` dominates the row) and factored by
:func:`~skfilter.posteriors._base.psd_factor` (Cholesky, or the eigenvalues raised to the bound
``N_b ⪰ I`` where the rounding of a stiff row left them below); each block's own update is
numerically safe, and the blocks' covariances only shrink, so no
predictive variance grows. **Sparse updates**: a block whose rows are all zero (the row does
not involve it) is left as it is, exactly; the engine passes the blocks a row activates
(``active``) when the model adapter knows them, and the other blocks cost nothing.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._base import Structure, UpdateInfo, psd_factor


class BlockBelief(NamedTuple):
    """``mean (..., P)`` (the blocks' means, assembled) and ``blocks``, one belief per block (in the
    order of :attr:`BlockDiagonal.names`)."""

    mean: torch.Tensor
    blocks: tuple


def _index(idx):
    return (Ellipsis, idx)


class BlockDiagonal(Structure):
    """One structure per parameter block, block-diagonal covariance (module docstring).

    Parameters
    ----------
    blocks : dict
        ``{name: (indices, structure)}``: ``indices`` a ``slice`` or a 1-d integer tensor of the
        block's parameters in the flat ``θ``; the blocks must partition ``0 … P−1``.
    coupling : {'marginal', 'mean-field', 'fixed-point', 'decoupled'}, default='marginal'
        How the blocks share an observation (module docstring): the marginal blocks of the exact
        posterior (the decoupled EKF), the block mean-field posterior with the exact coupled means
        (PULSE), the same solved by fixed-point sweeps, or the original decoupled PULSE.
    tol, max_iter : float, int
        Stopping rule of ``coupling='fixed-point'``.

    Examples
    --------
    >>> import torch
    >>> from skfilter.posteriors import BlockDiagonal, FullCovariance, DiagonalCovariance
    >>> structure = BlockDiagonal({"a": (slice(0, 2), FullCovariance()),
    ...                            "b": (slice(2, 3), DiagonalCovariance("fd"))})
    >>> prior = structure.prior(torch.zeros(3, dtype=torch.float64), 1.0)
    >>> post, _ = structure.update(prior, torch.tensor([[1.0, 0.0, 1.0]], dtype=torch.float64),
    ...                            torch.tensor([3.0], dtype=torch.float64))
    >>> [round(v, 12) for v in post.mean.tolist()]
    [1.0, 0.0, 1.0]
    """

    belief_type = BlockBelief

    COUPLINGS = ("marginal", "mean-field", "fixed-point", "decoupled")

    def __init__(self, blocks: dict, coupling: str = "marginal", tol: float = 1e-10, max_iter: int = 100):
        if not blocks:
            raise ValueError("BlockDiagonal needs at least one block.")
        if coupling not in self.COUPLINGS:
            raise ValueError(f"coupling must be one of {self.COUPLINGS}; got {coupling!r}.")
        self.coupling, self.tol, self.max_iter = coupling, float(tol), int(max_iter)
        self.names = tuple(blocks)
        self.indices = tuple(blocks[n][0] for n in self.names)
        self.structures = tuple(blocks[n][1] for n in self.names)
        # blocks as consecutive slices in order: the mean is assembled by one concatenation
        starts = [ix.start for ix in self.indices if isinstance(ix, slice)]
        self._consecutive = len(starts) == len(self.indices) and all(
            a.stop == b.start for a, b in zip(self.indices[:-1], self.indices[1:])) and starts[0] in (0, None)

    # -- helpers -------------------------------------------------------------------------------
    def _assemble(self, parts, like):
        if self._consecutive:
            return torch.cat(parts, dim=-1)
        out = torch.empty_like(like)
        for ix, part in zip(self.indices, parts):
            out[_index(ix)] = part
        return out

    @staticmethod
    def _part(v, ix):
        return v[_index(ix)] if isinstance(v, torch.Tensor) and v.dim() else v

    # -- structure interface ---------------------------------------------------------------------
    def prior(self, mean, prior_variance):
        var = prior_variance
        blocks = tuple(s.prior(mean[_index(ix)], self._part(var, ix))
                       for ix, s in zip(self.indices, self.structures))
        return BlockBelief(mean.clone(), blocks)

    def transition(self, belief, g, Q, shift):
        blocks = tuple(s.transition(b, g, self._part(Q, ix), None if shift is None else shift[_index(ix)])
                       for ix, s, b in zip(self.indices, self.structures, belief.blocks))
        return BlockBelief(self._assemble([b.mean for b in blocks], belief.mean), blocks)

    def inflate(self, belief, kind, factor):
        blocks = tuple(s.inflate(b, kind, factor) for s, b in zip(self.structures, belief.blocks))
        return BlockBelief(self._assemble([b.mean for b in blocks], belief.mean), blocks)

    def update(self, belief, Hw, ew, workspace=None, active=None):
        """Decoupled update of the blocks (module docstring); ``active`` (names) limits it to the
        blocks a row involves (the others must have zero rows in ``Hw``)."""
        Hw, ew = torch.as_tensor(Hw), torch.as_tensor(ew)
        m = Hw.shape[-2]
        chosen = [i for i, n in enumerate(self.names) if active is None or n in active]
        H = {i: Hw[_index(self.indices[i])] for i in chosen}
        Q = {i: self.structures[i].quadratic_form(belief.blocks[i], H[i].unsqueeze(-3)).squeeze(-3)
             for i in chosen}
        eye = torch.eye(m, dtype=Hw.dtype, device=Hw.device)
        blocks = list(belief.blocks)
        if self.coupling != "marginal" and len(chosen) > 1:
            residuals = self._mean_field_residuals(chosen, Q, ew, eye)
            for i in chosen:
                spare = None if workspace is None else workspace.blocks[i]
                blocks[i], _ = self.structures[i].update(blocks[i], H[i], residuals[i], workspace=spare)
            chosen = []
        for i in chosen:
            if len(chosen) == 1:
                Hb, eb = H[i], ew
            else:  # N_b = I + Σ_{c≠b} Q_c summed directly: S − Q_b cancels when Q_b dominates
                Cb = psd_factor(eye + sum(Q[c] for c in chosen if c != i))
                Hb = torch.linalg.solve_triangular(Cb, H[i], upper=False)
                eb = torch.linalg.solve_triangular(Cb, ew.unsqueeze(-1), upper=False)[..., 0]
            spare = None if workspace is None else workspace.blocks[i]
            blocks[i], _ = self.structures[i].update(blocks[i], Hb, eb, workspace=spare)
        blocks = tuple(blocks)
        mean = self._assemble([b.mean for b in blocks], belief.mean)

        def factor():
            return psd_factor(eye + sum(Q.values())), ew

        return BlockBelief(mean, blocks), UpdateInfo(factor)

    def _mean_field_residuals(self, chosen, Q, ew, eye):
        """``{b: r_b}``: the residual block ``b``'s own update needs for the mean-field means
        (module docstring), by ``coupling``."""
        if self.coupling == "decoupled":
            return {i: ew for i in chosen}
        if self.coupling == "mean-field":  # r_b = (I + Q_b) S⁻¹ e, S = I + Σ_c Q_c
            L = psd_factor(eye + sum(Q.values()))
            u = torch.cholesky_solve(ew.unsqueeze(-1), L)
            return {i: (u + Q[i] @ u)[..., 0] for i in chosen}
        # fixed point by Gauss–Seidel sweeps: r_b ← e − Σ_{c≠b} M_c r_c with M_c = Q_c (I + Q_c)⁻¹
        M = {i: torch.linalg.solve(eye + Q[i], Q[i]) for i in chosen}  # (I + Q)⁻¹ Q = Q (I + Q)⁻¹
        r = {i: ew for i in chosen}
        moved = {i: M[i] @ ew.unsqueeze(-1) for i in chosen}
        bound = self.tol * torch.clamp(torch.linalg.vector_norm(ew, dim=-1).max(), min=1.0)
        for _ in range(self.max_iter):
            change = ew.new_zeros(())
            for i in chosen:
                new = ew - sum(moved[c] for c in chosen if c != i)[..., 0]
                change = torch.maximum(change, torch.linalg.vector_norm(new - r[i], dim=-1).max())
                r[i], moved[i] = new, M[i] @ new.unsqueeze(-1)
            if change <= bound:
                break
        return r

    def quadratic_form(self, belief, J):
        return sum(s.quadratic_form(b, J[_index(ix)])
                   for ix, s, b in zip(self.indices, self.structures, belief.blocks))

    def quadratic_diagonal(self, belief, J):
        return sum(s.quadratic_diagonal(b, J[_index(ix)])
                   for ix, s, b in zip(self.indices, self.structures, belief.blocks))

    def marginal_variance(self, belief):
        return self._assemble([s.marginal_variance(b) for s, b in zip(self.structures, belief.blocks)],
                              belief.mean)

    def covariance(self, belief):
        P = belief.mean.shape[-1]
        out = belief.mean.new_zeros(*belief.mean.shape[:-1], P, P)
        for ix, s, b in zip(self.indices, self.structures, belief.blocks):
            idx = torch.arange(P)[ix] if isinstance(ix, slice) else ix
            out[..., idx[:, None], idx[None, :]] = s.covariance(b)
        return out

    def sample(self, belief, n_samples, generator):
        parts = [s.sample(b, n_samples, generator) for s, b in zip(self.structures, belief.blocks)]
        like = belief.mean.expand(n_samples, *belief.mean.shape)
        return self._assemble(parts, like)

    def moment_match(self, belief, log_weights):
        blocks = tuple(s.moment_match(b, log_weights) for s, b in zip(self.structures, belief.blocks))
        return BlockBelief(self._assemble([b.mean for b in blocks], belief.mean[0]), blocks)

    def uses_host_arrays(self, belief) -> bool:
        return False
