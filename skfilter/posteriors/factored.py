"""Factored covariance: the square-root filters LRKF, HiLoFi and LoLoFi (Duran-Martin et al. 2025, Alg. 2–4).

Duran-Martin, Sánchez-Betancourt, Cartea & Murphy (2025), "Martingale posterior neural networks for
fast sequential decision making", keep the error covariance of the parameters in **covariance form**
as a block-diagonal matrix of square-root factors, and never form a ``D × D`` matrix of a low-rank
block. :class:`FactoredCovariance` is one structure for all of them: the parameters are partitioned
into blocks ``b`` (columns ``θ_b``, ``D_b`` of them), each with a factor ``B_b``:

* :class:`CholeskyFactor` — an upper-triangular ``U`` (``D_b × D_b``), ``Σ_b = UᵀU`` (HiLoFi's last
  layer, Alg. 2 line 13);
* :class:`LowRankFactor` ``(d)`` — a ``d × D_b`` factor ``C`` with orthogonal rows, ``Σ_b = CᵀC``,
  projected to rank ``d`` after every update (Alg. 2 line 12, Alg. 3, Alg. 4 / eq. 102).

=========  ==========================================================  ==================
filter     blocks                                                      constructor
=========  ==========================================================  ==================
LRKF       one ``LowRankFactor(d)`` over all parameters (Alg. 4)        :meth:`~FactoredCovariance.lrkf`
HiLoFi     ``hidden: LowRankFactor(d_h)``, ``last: CholeskyFactor()``   :meth:`~FactoredCovariance.hilofi`
           (Alg. 2)
LoLoFi     ``hidden: LowRankFactor(d_h)``, ``last: LowRankFactor(d_l)`` :meth:`~FactoredCovariance.lolofi`
           (Alg. 3)
=========  ==========================================================  ==================

**The predicted covariance and the pending process noise.** The paper's dynamics are a random walk
with ``Q = blockdiag(q_b I)``; it never forms ``Σ_{t|t−1} = BᵀB + q I`` but applies ``q`` inside
the update — in the innovation covariance, in the gains, and as the ``+q`` of the projection. The
belief therefore carries, per block, the process noise ``q_b`` added since the last update
(*pending*), so that ``Σ_b = B_bᵀ B_b + q_b I`` at every moment: :meth:`~FactoredCovariance.transition`
scales the factors and sets ``q_b ← g² q_b + Q_b``, :meth:`~FactoredCovariance.update` consumes it
(``q_b ← 0``), and every predictive quantity (:meth:`~FactoredCovariance.quadratic_form`, samples,
marginal variances) includes it — so the predictive covariance at ``x`` after the transition is the
``S`` the next update computes at ``x`` (the predicted-covariance convention of eq. 21).

**One update** (whitened rows ``Hw θ ≈ ew`` with unit noise, ``R = I``; :mod:`skfilter.filtering`),
with ``H_b`` the columns of ``Hw`` of block ``b`` (``m × D_b``) and ``q_b`` its pending noise — the
Alg. 2–4 of the paper with its typos corrected (the gain shapes of eq. 51, ``q`` counted once)::

    Sh    = Q_R( B_1 H_1ᵀ, √q_1 F_1, …, B_n H_nᵀ, √q_n F_n, I_m )       (m × m, upper-triangular)
            F_b (m × m) with F_bᵀ F_b = H_b H_bᵀ  (the R-factor of H_bᵀ; replaces
            √q_b H_bᵀ, which has D_b rows)
            ⇒ ShᵀSh = S = I + Σ_b H_b (B_bᵀB_b + q_b I) H_bᵀ                (Prop. D.2)
    V_b   = S⁻¹ H_b = Sh⁻¹ Sh⁻ᵀ H_b                                       (two triangular solves)
    K_bᵀ  = (V_b B_bᵀ) B_b + q_b V_b           (= V_b Σ_{b,t|t−1}; printed V_b C Cᵀ is ill-shaped)
    μ_b  ← μ_b + K_b ew
    U    ← Q_R( U − (U H_bᵀ) K_bᵀ,  K_bᵀ )                                (Cholesky, Alg. 2 l. 13)
    C    ← P_{d,+q_b}( C − (C H_bᵀ) K_bᵀ,  K_bᵀ )                         (low rank, eq. 102)
      or P_d( C − (C H_bᵀ) K_bᵀ,  K_bᵀ )             (LowRankFactor(keep_process_noise=False))

(:func:`~skfilter.posteriors.factors.stacked_qr_factor` is ``Q_R``,
:func:`~skfilter.posteriors.factors.best_rank_factor` is ``P_d`` / ``P_{d,+q}``.) The gains are the
blocks of the EKF gain ``Σ⁻ Hwᵀ S⁻¹`` of the block-diagonal predicted covariance, so **one step's mean
is the EKF's** from that covariance. The covariances are the paper's surrogates:

* Cholesky block: ``UᵀU ← (I − K_b H_b) UᵀU (I − K_b H_b)ᵀ + K_b K_bᵀ`` — the Joseph form *without*
  the process noise, which the paper drops from the last layer's posterior (eqs. 53, 77).
  ``CholeskyFactor(exact_process_noise=True)`` keeps it, adding the block ``√q_b (I − K_b H_b)ᵀ`` to
  the QR (eq. 76 keeps it, eqs. 53 and 77 drop it): the exact Joseph form of the block's predicted covariance.
* Low-rank block: ``CᵀC ←`` the best rank-``d`` approximation (Frobenius) of
  ``(I − K_b H_b) CᵀC (I − K_b H_b)ᵀ + K_b K_bᵀ + q_b I`` (eq. 54/99) — the exact
  ``q_b (I − K_b H_b)(I − K_b H_b)ᵀ`` replaced by ``q_b I``. LRKF's Alg. 4 line 16 and eq. 97 print
  ``P_d`` (no ``+q``), eq. 102 ``P_{d,+q}``; ``LowRankFactor(keep_process_noise=True)`` (the
  default of the class, LRKF and HiLoFi's hidden block) uses ``P_{d,+q}``, the projection of the
  surrogate the paper derives (eq. 101), Alg. 2 line 12 and Alg. 3; with ``q = 0`` (most of the
  paper's experiments) the two coincide. With ``d ≥ D_b`` the surrogate is kept exactly (``P_d`` of
  the stack with ``√q_b I`` appended), so LRKF at full rank with ``q = 0`` is the full EKF. With
  ``d < D_b``, directions the stack does not support receive no ``q_b``
  (:func:`~skfilter.posteriors.factors.best_rank_factor`).
* Low-rank block with ``keep_process_noise=False`` (LoLoFi, both blocks): ``CᵀC ←`` the best
  rank-``d`` approximation of ``(I − K_b H_b) CᵀC (I − K_b H_b)ᵀ + K_b K_bᵀ`` — the last-layer rule
  of eqs. 53/77 on a low-rank factor: ``q_b`` acts through ``S`` and the gain only, and never
  accumulates in the factor. With ``+q_b I`` every kept direction gains ``q_b`` per step (twice
  counting the next transition): those the rows do not reach grow without bound and, being the
  largest, are the ones ``P_d`` keeps — measured, LoLoFi's defaults then reached 0.75–0.85 training
  accuracy on scikit-learn's 3-blob check (one run of five 0.33), LoFi and HiLoFi 0.93
  (:class:`LowRankFactor`).

The cross-covariances between blocks are dropped after every update (the block-diagonal EVC of the
paper). This is **not** the decoupled EKF of
:class:`~skfilter.posteriors.BlockDiagonal`: DEKF keeps each block's exact marginal
``(I − K_b H_b) Σ_b``, which is larger than the paper's surrogate by ``K_b H_c Σ_c H_cᵀ K_bᵀ``
summed over the other blocks ``c``.

**Numerics.** Everything is in square-root form: ``Sh`` is a QR factor of a stack containing
``I_m`` (its diagonal is ≥ 1, no Cholesky factorisation can fail, no stiff-row cancellation), and
the new factors are QR / SVD factors, so every covariance is positive semi-definite whatever the
rounding. A step whose results are not finite raises
:class:`~skfilter.exceptions.FilterStepError`; beliefs are values, so the input belief is untouched.

**Cost** per step with ``m`` rows: ``O(Σ_b D_b (r_b + m)²)`` — ``O(D_l (D_l + m)²)`` for a Cholesky
block, ``O(D_b (d + m)²)`` for a low-rank one — and memory ``O(Σ_b r_b D_b)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..exceptions import FilterStepError
from ._base import Structure, UpdateInfo, as_variance_vector, sync_step
from .factors import best_rank_factor, stacked_qr_factor

__all__ = ["FactoredCovariance", "FactoredBelief", "CholeskyFactor", "LowRankFactor"]

#: initialisations of a :class:`LowRankFactor` whose rank is below its block's size (the paper's
#: "identity times a factor" cannot be represented)
LOW_RANK_INITS = ("random", "coordinates", "zero")


@dataclass(frozen=True)
class CholeskyFactor:
    """A full-rank block ``Σ_b = UᵀU`` with ``U`` upper-triangular (``D_b × D_b``): HiLoFi's last layer.

    Updated by ``U ← Q_R(U − (U H_bᵀ) K_bᵀ, K_bᵀ)`` (Alg. 2 line 13; :mod:`~skfilter.posteriors.factored`).

    Parameters
    ----------
    exact_process_noise : bool, default=False
        Keep the pending process noise ``q_b`` in the block's posterior by adding the block
        ``√q_b (I − K_b H_b)ᵀ`` to the QR: ``UᵀU ← (I − K_b H_b)(UᵀU + q_b I)(I − K_b H_b)ᵀ + K_b K_bᵀ``.
        The paper drops it (eqs. 53, 77): ``q_b`` then acts only through ``S`` and the gain.

    Examples
    --------
    >>> import torch
    >>> from skfilter.posteriors import CholeskyFactor, FactoredCovariance
    >>> structure = FactoredCovariance({"all": (slice(None), CholeskyFactor())})
    >>> prior = structure.prior(torch.zeros(2, dtype=torch.float64), torch.tensor([4.0, 9.0], dtype=torch.float64))
    >>> prior.factors[0].tolist()                                     # U_0 = diag(√v)
    [[2.0, 0.0], [0.0, 3.0]]
    """

    exact_process_noise: bool = False

    def __post_init__(self):
        if not isinstance(self.exact_process_noise, bool):
            raise TypeError(f"exact_process_noise must be a bool, got {self.exact_process_noise!r}.")


@dataclass(frozen=True)
class LowRankFactor:
    """A rank-``d`` block ``Σ_b = CᵀC``, ``C`` of shape ``d × D_b`` with orthogonal rows of non-increasing
    norms, updated by ``P_{d,+q}`` (Alg. 2 line 12, Alg. 3, eq. 102).

    Parameters
    ----------
    rank : int
        ``d ≥ 1``. With ``d ≥ D_b`` the block is exact (no truncation ever happens).
    init : {'random', 'coordinates', 'zero'}, default='random'
        The prior factor ``C_0`` when ``d < D_b``, where the paper's "identity times a factor" cannot
        be represented (the paper's experiments state "identity times a factor"); with prior variances ``v`` (``D_b``):

        * ``'random'`` — ``C_0 = O diag(√v)`` with ``O`` a random ``d × D_b`` matrix with orthonormal
          rows (seeded by the structure's ``seed`` and the block's position). For a spherical prior
          ``v I`` this is ``v`` times the orthogonal projection on a random ``d``-dimensional
          subspace — a best rank-``d`` approximation of ``v I`` (every one is such a projection) —
          that favours no parameter: each has expected prior variance ``(d / D_b) v``, and every
          parameter learns from the first step;
        * ``'coordinates'`` — ``√v`` on the first ``d`` coordinates of the block (also a best
          rank-``d`` approximation of ``v I``, the authors' development code's choice), the others
          frozen until process noise reaches them: the result depends on the flattening order;
        * ``'zero'`` — ``C_0 = 0`` (whatever ``d``): the block is frozen until process noise acts; in
          HiLoFi with ``q_h = 0`` the hidden layers keep their initial weights and the last layer is
          Bayesian linear regression on their features.

        The default is ``'random'``, the one choice that is both a best rank-``d`` approximation of
        the spherical prior and independent of how the parameters are ordered. With ``d ≥ D_b``,
        ``'random'`` and ``'coordinates'`` give the exact ``diag(√v)`` (padded with zero rows).
    keep_process_noise : bool, default=True
        Whether the pending process noise ``q_b`` enters the block's posterior factor:

        * ``True`` — ``C ← P_{d,+q_b}(C(I − K_b H_b)ᵀ, K_bᵀ)``, the best rank-``d`` approximation of the
          surrogate ``(I − K_b H_b) CᵀC (I − K_b H_b)ᵀ + K_b K_bᵀ + q_b I`` (eq. 102; Alg. 2 line 12,
          Alg. 3). The kept directions gain ``q_b`` at every step and a random walk's ``q_b`` again at
          the next transition: a direction the rows do not reach grows by ``q_b`` per step without
          bound, and since ``P_d`` keeps the largest variances, the factor fills with such directions;
        * ``False`` — ``C ← P_d(C(I − K_b H_b)ᵀ, K_bᵀ)``: ``q_b`` acts only through ``S`` and the
          gain (new directions through ``K_b K_bᵀ``, a step of size ``q_b`` along ``H_bᵀ`` in the
          mean), as the paper's last-layer rule (eqs. 53, 77; :class:`CholeskyFactor`) and LRKF's
          printed Alg. 4 line 16 / eq. 97. The surrogate is then at most the exact posterior of the
          predicted ``CᵀC + q_b I`` (it lacks ``q_b (I − K_b H_b)(I − K_b H_b)ᵀ ⪰ 0``): a direction the
          rows do not reach keeps its variance. LoLoFi's estimators use ``False`` for both blocks
          (:mod:`skfilter.low_rank`). (The authors' development code computes this too: its
          ``+q`` projection cancels ``q``.)

        With ``q_b = 0`` the two coincide.

    Examples
    --------
    >>> import torch
    >>> from skfilter.posteriors import FactoredCovariance, LowRankFactor
    >>> structure = FactoredCovariance({"all": (slice(None), LowRankFactor(2))}, seed=0)
    >>> C = structure.prior(torch.zeros(5, dtype=torch.float64), 3.0).factors[0]
    >>> tuple(C.shape), torch.allclose(C @ C.T, 3.0 * torch.eye(2, dtype=torch.float64))
    ((2, 5), True)
    """

    rank: int
    init: str = "random"
    keep_process_noise: bool = True

    def __post_init__(self):
        if isinstance(self.rank, bool) or int(self.rank) != self.rank or self.rank < 1:
            raise ValueError(f"rank must be a positive integer, got {self.rank!r}.")
        object.__setattr__(self, "rank", int(self.rank))
        if self.init not in LOW_RANK_INITS:
            raise ValueError(f"init must be one of {LOW_RANK_INITS}, got {self.init!r}.")
        if not isinstance(self.keep_process_noise, bool):
            raise TypeError(f"keep_process_noise must be a bool, got {self.keep_process_noise!r}.")


class FactoredBelief(NamedTuple):
    """``N(mean, blockdiag(B_bᵀ B_b + q_b I))`` with hypotheses axes ``...``.

    Fields: ``mean (..., P)``; ``factors``, one factor ``B_b`` per block (in the order of
    :attr:`FactoredCovariance.block_names`), ``(..., D_b, D_b)`` upper-triangular for a
    :class:`CholeskyFactor`, ``(..., d, D_b)`` for a :class:`LowRankFactor`; ``pending (..., n_blocks)``,
    the process noise ``q_b`` of each block added since its last update (module docstring).
    """

    mean: torch.Tensor
    factors: tuple
    pending: torch.Tensor


def _cols(v, ix):
    return v[..., ix]


def _scalar_shape(x, n_trailing):
    """``x (...)`` with ``n_trailing`` unit axes appended (to broadcast against matrices)."""
    return x.reshape(x.shape + (1,) * n_trailing)


class FactoredCovariance(Structure):
    """Block-diagonal covariance of square-root factors: LRKF, HiLoFi, LoLoFi (module docstring).

    Parameters
    ----------
    blocks : dict
        ``{name: (indices, kind)}``: ``indices`` a ``slice`` (``slice(None)``: all parameters) or a
        1-d integer tensor of the block's parameters in the flat ``θ`` — the blocks must partition
        ``0 … P−1`` (checked by :meth:`prior`); ``kind`` a :class:`CholeskyFactor` or a
        :class:`LowRankFactor`.
    seed : int, default=0
        Seeds the ``'random'`` initialisation of low-rank factors (:class:`LowRankFactor`).

    Attributes
    ----------
    block_names : tuple of str
    indices : tuple
    kinds : tuple

    Notes
    -----
    Process noise ``Q`` given per parameter (a ``(P,)`` tensor, e.g. from
    :meth:`skfilter.dynamics.Dynamics.per_block`, or the OU reversion's ``diag(Σ₀)`` term) is averaged
    within each block: the paper's dynamics are ``Q = blockdiag(q_b I)`` (§2), and a factor
    plus ``q_b I`` is what its update can carry without forming ``D_b × D_b`` matrices. Per-parameter
    prior variances are represented exactly (:meth:`prior`).

    Examples
    --------
    HiLoFi on a 5-parameter model whose last layer is the last 2 parameters:

    >>> import torch
    >>> from skfilter.posteriors import FactoredCovariance
    >>> structure = FactoredCovariance.hilofi(slice(0, 3), slice(3, 5), hidden_rank=2)
    >>> prior = structure.prior(torch.zeros(5, dtype=torch.float64), 1.0)
    >>> [tuple(f.shape) for f in prior.factors]
    [(2, 3), (2, 2)]
    >>> predicted = structure.transition(prior, 1.0, 0.1, None)       # q = 0.1 is pending
    >>> Hw = torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    >>> J = Hw[None]                                                  # the row as a Jacobian
    >>> S = 1.0 + structure.quadratic_form(predicted, J)[0, 0, 0]     # predictive covariance + R
    >>> post, info = structure.update(predicted, Hw, torch.tensor([2.2], dtype=torch.float64))
    >>> round(float(S), 12), round(float(info.log_det.exp()), 12)     # the update's S is the same
    (2.1, 2.1)
    >>> [round(v, 12) for v in post.mean.tolist()]                    # K = 1.1 / 2.1
    [0.0, 0.0, 0.0, 1.152380952381, 0.0]
    >>> post.pending.tolist()                                         # the update consumed q
    [0.0, 0.0]
    """

    belief_type = FactoredBelief

    def __init__(self, blocks: dict, seed: int = 0):
        if not isinstance(blocks, dict) or not blocks:
            raise ValueError("FactoredCovariance needs a non-empty dict {name: (indices, kind)}.")
        names, indices, kinds = [], [], []
        for name, spec in blocks.items():
            try:
                ix, kind = spec
            except (TypeError, ValueError):
                raise ValueError(f"Block {name!r}: expected (indices, kind), got {spec!r}.") from None
            if not isinstance(kind, (CholeskyFactor, LowRankFactor)):
                raise TypeError(f"Block {name!r}: kind must be CholeskyFactor() or LowRankFactor(rank), "
                                f"got {kind!r}.")
            if not isinstance(ix, slice):
                ix = torch.as_tensor(ix)
                if ix.dim() != 1 or ix.dtype == torch.bool or ix.is_floating_point():
                    raise ValueError(f"Block {name!r}: indices must be a slice or a 1-d integer array.")
                ix = ix.to(torch.long)
            names.append(str(name))
            indices.append(ix)
            kinds.append(kind)
        self.block_names = tuple(names)
        self.indices = tuple(indices)
        self.kinds = tuple(kinds)
        self.seed = int(seed)

    def __repr__(self):
        parts = ", ".join(f"{n}: {k!r}" for n, k in zip(self.block_names, self.kinds))
        return f"FactoredCovariance({{{parts}}}, seed={self.seed})"

    # -- constructors ------------------------------------------------------------------------------
    @classmethod
    def lrkf(cls, rank: int, init: str = "random", seed: int = 0) -> "FactoredCovariance":
        """LRKF (Alg. 4): one rank-``d`` factor over all parameters, ``Σ = CᵀC``.

        Parameters
        ----------
        rank : int
            ``d``; with ``d ≥ P`` and no process noise LRKF is the full EKF.
        init : {'random', 'coordinates', 'zero'}, default='random'
            ``C_0`` when ``d < P`` (:class:`LowRankFactor`).
        seed : int, default=0
            Seeds ``init='random'``.
        """
        return cls({"all": (slice(None), LowRankFactor(rank, init))}, seed=seed)

    @classmethod
    def hilofi(cls, hidden_indices, last_indices, hidden_rank: int, hidden_init: str = "random",
               exact_process_noise: bool = False, seed: int = 0) -> "FactoredCovariance":
        """HiLoFi (Alg. 2): a rank-``d_h`` factor for the hidden parameters, a Cholesky factor for the
        last layer's.

        Parameters
        ----------
        hidden_indices, last_indices : slice or 1-d integer tensor
            The two blocks (e.g. ``adapter.blocks['hidden']`` and ``adapter.blocks['last']`` of
            :mod:`skfilter.models`); together they must partition the parameters.
        hidden_rank : int
            ``d_h``.
        hidden_init : {'random', 'coordinates', 'zero'}, default='random'
            ``C_0`` of the hidden block when ``d_h < D_h`` (:class:`LowRankFactor`).
        exact_process_noise : bool, default=False
            Keep ``q_l`` in the last layer's posterior (:class:`CholeskyFactor`; the paper drops it).
        seed : int, default=0
            Seeds ``hidden_init='random'``.
        """
        return cls({"hidden": (hidden_indices, LowRankFactor(hidden_rank, hidden_init)),
                    "last": (last_indices, CholeskyFactor(exact_process_noise))}, seed=seed)

    @classmethod
    def lolofi(cls, hidden_indices, last_indices, hidden_rank: int, last_rank: int, init: str = "random",
               keep_process_noise: bool = False, seed: int = 0) -> "FactoredCovariance":
        """LoLoFi (Alg. 3): rank-``d_h`` and rank-``d_l`` factors for the hidden and last-layer
        parameters.

        Parameters
        ----------
        hidden_indices, last_indices : slice or 1-d integer tensor
            The two blocks; together they must partition the parameters.
        hidden_rank, last_rank : int
            ``d_h`` and ``d_l``; with ``d_l ≥ D_l`` the last block is HiLoFi's (for any ``q_l``).
        init : {'random', 'coordinates', 'zero'}, default='random'
            ``C_0`` of both blocks where their rank is below their size (:class:`LowRankFactor`).
        keep_process_noise : bool, default=False
            ``False``: the process noise acts through ``S`` and the gains only (the last-layer rule
            of eqs. 53, 77, on both factors; what :class:`~skfilter.LoLoFiClassifier` uses);
            ``True``: Alg. 3 as printed, ``P_{d,+q}`` on both (:class:`LowRankFactor`).
        seed : int, default=0
            Seeds ``init='random'``.
        """
        return cls({"hidden": (hidden_indices, LowRankFactor(hidden_rank, init, keep_process_noise)),
                    "last": (last_indices, LowRankFactor(last_rank, init, keep_process_noise))}, seed=seed)

    # -- helpers -----------------------------------------------------------------------------------
    def block_positions(self, P):
        """The parameter positions of every block for ``P`` parameters.

        Parameters
        ----------
        P : int
            The number of parameters.

        Returns
        -------
        list of torch.Tensor
            One 1-d ``long`` tensor per block (in :attr:`block_names` order).

        Raises
        ------
        ValueError
            Unless the blocks partition ``0 … P−1``.

        Examples
        --------
        >>> from skfilter.posteriors import FactoredCovariance
        >>> FactoredCovariance.hilofi(slice(0, 3), slice(3, 5), hidden_rank=2).block_positions(5)
        [tensor([0, 1, 2]), tensor([3, 4])]
        """
        every = torch.arange(P)
        parts = []
        for name, ix in zip(self.block_names, self.indices):
            pos = every[ix]
            if pos.numel() == 0:
                raise ValueError(f"Block {name!r} has no parameters.")
            parts.append(pos)
        cover = torch.cat(parts)
        if cover.numel() != P or not torch.equal(torch.sort(cover).values, every):
            raise ValueError(f"The blocks must partition the {P} parameters (each exactly once).")
        return parts

    def _prior_factor(self, position, kind, var):
        """``B_0`` of one block from its prior variances ``var (D_b,)`` (:meth:`prior`)."""
        D = var.shape[-1]
        root = var.sqrt()
        if isinstance(kind, CholeskyFactor):
            return torch.diag(root)
        d = kind.rank
        if kind.init == "zero":
            return var.new_zeros(d, D)
        if d >= D:
            return torch.cat([torch.diag(root), var.new_zeros(d - D, D)])
        if kind.init == "coordinates":
            C = var.new_zeros(d, D)
            C[torch.arange(d), torch.arange(d)] = root[:d]
            return C
        # 'random': orthonormal rows O (Q of a Gaussian matrix, drawn on the CPU in float64 so that
        # every device and dtype gets the same O), then rows made orthogonal (same Gram)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + position)
        G = torch.randn(D, d, generator=gen, dtype=torch.float64)
        O = torch.linalg.qr(G, mode="reduced").Q.mT.to(dtype=var.dtype, device=var.device)
        return best_rank_factor(O * root, rank=d)

    # -- structure interface -------------------------------------------------------------------------
    def prior(self, mean, prior_variance):
        """``N(mean, diag(v))`` with ``v = prior_variance`` (a float or ``(P,)``), exactly for Cholesky
        blocks (``U_0 = diag(√v_b)``) and low-rank blocks with ``d ≥ D_b`` (``diag(√v_b)`` padded with
        zero rows), and by the block's ``init`` for ``d < D_b`` (:class:`LowRankFactor`); no pending
        process noise."""
        var = as_variance_vector(prior_variance, mean)
        if bool((var < 0).any()):
            raise ValueError("prior_variance must be >= 0.")
        positions = self.block_positions(mean.shape[-1])
        batch = tuple(mean.shape[:-1])
        factors = []
        for i, (ix, kind) in enumerate(zip(positions, self.kinds)):
            B = self._prior_factor(i, kind, var[ix.to(var.device)])
            factors.append(B.expand(*batch, *B.shape).contiguous() if batch else B)
        pending = mean.new_zeros(*batch, len(self.kinds))
        return FactoredBelief(mean.clone(), tuple(factors), pending)

    def transition(self, belief, g, Q, shift):
        """``μ ← g μ + shift``, ``B_b ← g B_b``, ``q_b ← g² q_b + Q_b`` — exactly ``Σ ← g² Σ + Q``
        for ``Q = blockdiag(Q_b I)``; a per-parameter ``Q`` (``(P,)``) is averaged within each block
        (class Notes)."""
        has_q = isinstance(Q, torch.Tensor) or Q != 0.0
        if g == 1.0 and not has_q and shift is None:
            return belief
        mean, factors, pending = belief
        if g != 1.0:
            mean = mean * g
            factors = tuple(B * g for B in factors)
            pending = pending * (g * g)
        if has_q:
            pending = pending + self.block_noise(Q, pending)
        if shift is not None:
            mean = mean + shift
        return FactoredBelief(mean, factors, pending)

    def block_noise(self, Q, like):
        """``(n_blocks,)`` process noise per block from a float or a per-parameter ``(P,)`` ``Q`` (the
        mean of ``Q`` over each block's parameters: class Notes), in the dtype and device of ``like``.

        Examples
        --------
        >>> import torch
        >>> from skfilter.posteriors import FactoredCovariance
        >>> s = FactoredCovariance.hilofi(slice(0, 3), slice(3, 5), hidden_rank=2)
        >>> s.block_noise(torch.tensor([1e-3, 1e-3, 1e-3, 1e-2, 1e-2]), torch.zeros(1)).tolist()
        [0.0010000000474974513, 0.009999999776482582]
        """
        Q = torch.as_tensor(Q, dtype=like.dtype, device=like.device)
        if Q.dim() == 0:
            return Q.expand(len(self.kinds))
        return torch.stack([_cols(Q, ix).mean() for ix in self.indices])

    def update(self, belief, Hw, ew, workspace=None):
        """The corrected Alg. 2–4 step (module docstring) for all blocks and hypotheses at once.

        ``workspace`` is accepted for the interface and not used (the factors are small)."""
        mean, factors, pending = belief
        Hw, ew = torch.as_tensor(Hw), torch.as_tensor(ew)
        m = Hw.shape[-2]
        H = [_cols(Hw, ix) for ix in self.indices]
        q = [pending[..., b] for b in range(len(self.kinds))]
        root_q = [x.sqrt() for x in q]
        try:
            BH = [B @ Hb.mT for B, Hb in zip(factors, H)]  # B_b H_bᵀ, (..., r_b, m)
            rows = []
            for b, Hb in enumerate(H):
                F = torch.linalg.qr(Hb.mT, mode="r").R  # F_bᵀ F_b = H_b H_bᵀ, (..., min(D_b, m), m)
                rows += [BH[b], _scalar_shape(root_q[b], 2) * F]
            eye = torch.eye(m, dtype=Hw.dtype, device=Hw.device)
            Sh = stacked_qr_factor(*rows, eye)  # ShᵀSh = S, diagonal ≥ 1
            V = torch.linalg.solve_triangular(
                Sh, torch.linalg.solve_triangular(Sh.mT, Hw, upper=False), upper=True)  # S⁻¹ Hw
            new_mean = mean + torch.zeros_like(ew[..., :1])  # the broadcast shape, a new tensor
            new_factors = []
            for b, (ix, kind, B, Hb) in enumerate(zip(self.indices, self.kinds, factors, H)):
                Vb = _cols(V, ix)
                Kt = (Vb @ B.mT) @ B + _scalar_shape(q[b], 2) * Vb  # K_bᵀ = V_b Σ_{b,t|t−1}, (..., m, D_b)
                new_mean[..., ix] += (ew[..., None, :] @ Kt)[..., 0, :]
                kept = B - BH[b] @ Kt  # B (I − K_b H_b)ᵀ
                if isinstance(kind, CholeskyFactor):
                    extra = ()
                    if kind.exact_process_noise:
                        D = Hb.shape[-1]
                        ikh = torch.eye(D, dtype=Hw.dtype, device=Hw.device) - Hb.mT @ Kt  # (I − K_b H_b)ᵀ
                        extra = (_scalar_shape(root_q[b], 2) * ikh,)
                    new_factors.append(stacked_qr_factor(kept, Kt, *extra))
                elif kind.keep_process_noise:
                    new_factors.append(self._project(kept, Kt, kind.rank, q[b], root_q[b]))
                else:  # q_b acts through S and the gain only (LowRankFactor)
                    new_factors.append(best_rank_factor(kept, Kt, rank=kind.rank))
        except torch.linalg.LinAlgError as exc:  # an SVD / QR of non-finite values
            raise FilterStepError(f"The factored-covariance update failed ({exc}); the last good belief "
                                  "is kept.") from None
        failure, _ = sync_step([new_mean, *new_factors], positive=Sh.diagonal(dim1=-2, dim2=-1))
        if failure is not None:
            raise failure
        new_belief = FactoredBelief(new_mean, tuple(new_factors), torch.zeros_like(pending + new_mean[..., :1]))
        return new_belief, UpdateInfo(lambda: (Sh.mT, ew))

    @staticmethod
    def _project(kept, Kt, rank, q, root_q):
        """``P_{d,+q}(kept, Kt)``; with ``d ≥ D_b`` the surrogate ``keptᵀkept + KKᵀ + q I`` exactly
        (``√q I`` appended to the stack: the whole null space receives ``q``, whatever its basis)."""
        D = kept.shape[-1]
        if rank >= D:
            eye = torch.eye(D, dtype=kept.dtype, device=kept.device)
            return best_rank_factor(kept, Kt, _scalar_shape(root_q, 2) * eye, rank=rank)
        return best_rank_factor(kept, Kt, rank=rank, shift=q)

    # -- predictive ------------------------------------------------------------------------------
    def _projections(self, belief, J):
        """Per block ``(J_b B_bᵀ, J_b, q_b)`` for ``J (..., n, C, P)``."""
        out = []
        for b, (ix, B) in enumerate(zip(self.indices, belief.factors)):
            Jb = _cols(J, ix)
            out.append((Jb @ B.unsqueeze(-3).mT, Jb, _scalar_shape(belief.pending[..., b], 3)))
        return out

    def quadratic_form(self, belief, J):
        """``J Σ Jᵀ = Σ_b (J_b B_bᵀ)(J_b B_bᵀ)ᵀ + q_b J_b J_bᵀ`` (``(..., n, C, C)``), the pending
        process noise included."""
        total = 0.0
        for A, Jb, qb in self._projections(belief, J):
            total = total + A @ A.mT + qb * (Jb @ Jb.mT)
        return total

    def quadratic_diagonal(self, belief, J):
        """Diagonal of :meth:`quadratic_form` without forming it, ``(..., n, C)``."""
        total = 0.0
        for A, Jb, qb in self._projections(belief, J):
            total = total + (A * A).sum(-1) + qb[..., 0] * (Jb * Jb).sum(-1)
        return total

    def marginal_variance(self, belief):
        """``diag(Σ)``: the column sums of ``B_b²`` plus ``q_b``."""
        out = torch.empty_like(belief.mean)
        for b, (ix, B) in enumerate(zip(self.indices, belief.factors)):
            out[..., ix] = (B * B).sum(-2) + belief.pending[..., b, None]
        return out

    def covariance(self, belief):
        """Dense ``blockdiag(B_bᵀB_b + q_b I)`` (tests and small models)."""
        mean = belief.mean
        P = mean.shape[-1]
        out = mean.new_zeros(*mean.shape[:-1], P, P)
        for b, (ix, B) in enumerate(zip(self.block_positions(P), belief.factors)):
            block = B.mT @ B
            block.diagonal(dim1=-2, dim2=-1).add_(belief.pending[..., b, None])
            out[..., ix[:, None], ix[None, :]] = block
        return out

    def sample(self, belief, n_samples, generator):
        """``θ = μ + Σ_b (B_bᵀ z_b + √q_b z'_b)`` on the columns of block ``b``, ``z_b ~ N(0, I_{r_b})``,
        ``z'_b ~ N(0, I_{D_b})``: ``(n_samples, P)``. Cost ``O(n Σ_b r_b D_b)``."""
        mean = belief.mean
        opts = {"device": mean.device, "dtype": mean.dtype}
        out = mean.expand(n_samples, mean.shape[-1]).clone()
        for b, (ix, B) in enumerate(zip(self.indices, belief.factors)):
            z = torch.randn(n_samples, B.shape[-2], generator=generator, **opts)
            draw = z @ B
            qb = belief.pending[..., b]
            if bool(qb > 0):
                draw = draw + qb.sqrt() * torch.randn(n_samples, B.shape[-1], generator=generator, **opts)
            out[:, ix] += draw
        return out

    def moment_match(self, belief, log_weights):
        """The mixture ``Σ_k w_k N(μ_k, Σ_k)`` over the leading hypotheses axis, moment-matched in this
        structure (BOCD's RL-MMPR): ``μ̄ = Σ_k w_k μ_k``, ``q̄_b = Σ_k w_k q_{k,b}`` and per block the
        factor of ``Σ_k w_k (B_kᵀB_k + d_k d_kᵀ)``, ``d_k = μ_{k,b} − μ̄_b``, from the stack of the
        ``√w_k B_k`` and the rows ``√w_k d_kᵀ``: ``Q_R`` of it for a Cholesky block (exact), ``P_d``
        for a low-rank block (the best rank-``d`` approximation; exact when the stack has rank ≤ d)."""
        w = torch.softmax(log_weights, dim=0)
        root_w = w.sqrt()
        mean = torch.einsum("k,kp->p", w, belief.mean)
        factors = []
        for ix, kind, B in zip(self.indices, self.kinds, belief.factors):
            spread = root_w[:, None] * (_cols(belief.mean, ix) - _cols(mean, ix))  # (K, D_b)
            stack = (root_w[:, None, None] * B).reshape(-1, B.shape[-1])  # (K r_b, D_b)
            if isinstance(kind, CholeskyFactor):
                factors.append(stacked_qr_factor(stack, spread))
            else:
                factors.append(best_rank_factor(stack, spread, rank=kind.rank))
        pending = torch.einsum("k,kb->b", w, belief.pending)
        return FactoredBelief(mean, tuple(factors), pending)

    def uses_host_arrays(self, belief) -> bool:
        """Always ``False``: the engine's update runs on torch tensors (the compiled kernel,
        :mod:`skfilter.kernels.factored`, is chosen above the engine by :mod:`skfilter.stepping`)."""
        return False
