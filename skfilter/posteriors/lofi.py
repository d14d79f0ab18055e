"""LoFi: diagonal-plus-low-rank precision (Chang et al. 2023, §3, Algorithms 1–3, App. A–B).

The belief is ``N(μ, Σ)`` with precision ``Σ⁻¹ = Υ + W Wᵀ``: ``Υ`` diagonal (``'diagonal'``) or
``η I`` (``'spherical'``, App. F), ``W ∈ R^{P×L}``. Dense ``Σ`` is never formed; products with it
use Woodbury::

    Σ = Υ⁻¹ − Υ⁻¹ W M⁻¹ Wᵀ Υ⁻¹,     M = I_L + Wᵀ Υ⁻¹ W.

One step (:func:`~skfilter.dynamics.apply_dynamics`, then :meth:`LowRankPrecision.update`), with ``m``
whitened pseudo-observation rows ``Hw``:

1. inflation (App. E, optional; applied to the previous posterior just before the predict step);
2. predict, exact in DLR form (Alg. 2, eqs. 15, 19, 25)::

       Υ⁻ = (γ² Υ⁻¹ + q I)⁻¹,   W⁻ = γ Υ⁻ Υ⁻¹ W chol(C),   C = (I_L + q Wᵀ Υ⁻ Υ⁻¹ W)⁻¹

   (spherical, Alg. 6, eqs. 108–109: ``η⁻ = η/(γ² + qη)``, ``λ⁻² = γ²λ²/((γ² + qη)(γ² + qη + qλ²))``);
3. update (Alg. 3): ``W̃ = [W⁻, Hwᵀ]`` (``P × (L + m)``); the mean from the *untruncated*
   rank-``(L+m)`` posterior, eq. 36 with its minus sign: with ``b = Hwᵀ ew`` (``= Hᵀ R⁻¹ e``),
   ``μ = μ⁻ + Υ⁻⁻¹ b − Υ⁻⁻¹ W̃ G W̃ᵀ Υ⁻⁻¹ b``, ``G = (I + W̃ᵀ Υ⁻⁻¹ W̃)⁻¹`` (Cholesky solve);
4. truncation by a thin SVD ``W̃ = Ũ Λ̃ Ṽᵀ``: ``W = (ŨΛ̃)[:, :L]``; diagonal LoFi adds the dropped
   mass to the diagonal, ``Υ = Υ⁻ + rowsum((ŨΛ̃)[:, L:]²)`` (eq. 39), so ``diag(Σ⁻¹)`` is exact;
   spherical LoFi drops it (F.5.1). Spherical LoFi may instead use the orthogonal-projection
   incremental SVD (``svd='orth'``, Alg. 8, F.5.2).

With ``L = 0`` the structure is VD-EKF with the exact mean (eqs. 46–52); with ``L ≥ P`` (and no
truncation ever happening) it is the full EKF.

Numerical safety (:func:`~skfilter.posteriors._base.stiffness_limit`).
The belief is stored as precision factors, so ``Σ`` is positive definite whatever the rounding and
an update only adds precision; what fails on stiff rows (whitened ``‖Υ^(-1/2) W̃‖² ≳ 1/eps``, rows
of ``1e8`` with noise ``1e-2``) are the plain forms of the solves: the Cholesky factor of
``I + W̃ᵀΥ⁻¹W̃``, the eigenvalues of ``W̃ᵀW̃`` that choose the truncation, the Woodbury differences of
the mean and of ``J Σ Jᵀ``. Past the limit they are replaced by QR / SVD / sum-of-squares forms of
the same quantities (:func:`lofi_update`, :func:`lowrank_quadratic_form`). Without truncation (``L ≥
P``) no update then increases a predictive variance; a truncation moves precision between
directions (the dropped part goes to the diagonal, eq. 39) and may increase the variance along some
— an approximation of LoFi, not rounding.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from .._array_ops import NUMPY_OPS, SCRATCH, TORCH_OPS, Disjoint, Recycler, as_numpy, as_tensor, chunk_width
from ..exceptions import FilterStepError
from ._base import (Structure, UpdateInfo, as_variance_vector, cholesky_or_raise, identity_plus_gram_factor,
                    reusable_array, stiffness_limit)

VARIANTS = ("diagonal", "spherical")
SVD_METHODS = ("full", "orth")


#: a belief smaller than this (bytes) is not written into the workspace: small arrays come from the
#: allocator's free lists at no cost, less than that of the checks of :meth:`LowRankPrecision._outputs`
REUSE_MIN_BYTES = 1 << 18
#: single NumPy beliefs of at least this many bytes take their arrays from a recycler when no dead
#: workspace is at hand (:meth:`LowRankPrecision._recycled_outputs`)
RECYCLE_MIN_BELIEF_BYTES = 1 << 24


class LowRankBelief(NamedTuple):
    """LoFi belief ``N(mean, (Υ + W Wᵀ)⁻¹)`` with hypotheses axes ``...``.

    Fields: ``mean (..., P)``; ``diagonal`` — ``Υ`` as ``(..., P)`` (diagonal LoFi) or ``η`` as
    ``(..., 1)`` (spherical); ``low_rank`` — ``Wᵀ`` stored as ``(..., L, P)`` contiguous rows (its
    Gram products and the stacking of new rows, eq. 32, then work on rows); ``prior_precision`` —
    the prior-predictive precision ``η_t`` (eq. 76, ``(...)``, or ``(..., P)`` under per-parameter
    process noise); ``prior_mean`` — the prior-predictive mean ``Γ_t μ₀`` (eq. 77), both for
    inflation (App. E); ``n_steps`` — updates so far (seeds Alg. 8's column order).
    """

    mean: torch.Tensor
    diagonal: torch.Tensor
    low_rank: torch.Tensor
    prior_precision: torch.Tensor
    prior_mean: torch.Tensor
    n_steps: int


def _torch(x):
    """A torch view of a NumPy array (zero-copy) or the tensor itself."""
    return torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else x


def _backend(ops, t):
    """``t`` (a tensor) as an array of the backend ``ops``."""
    return t.numpy() if ops is NUMPY_OPS else t


class _Fresh:
    """The ``out=`` operations of :mod:`~skfilter._array_ops` for tensors under autograd (``out=``
    is not differentiable): the result is computed as a new tensor, then copied into ``out``."""

    @staticmethod
    def _put(result, out):
        if out is None:
            return result
        out[...] = result
        return out

    matmul = staticmethod(lambda a, b, out: _Fresh._put(a @ b, out))
    multiply = staticmethod(lambda a, b, out: _Fresh._put(a * b, out))
    add = staticmethod(lambda a, b, out: _Fresh._put(a + b, out))
    reciprocal = staticmethod(lambda a, out: _Fresh._put(1.0 / a, out))
    sum_rows = staticmethod(lambda a, out: _Fresh._put(a.sum(-2), out))


def _whole(a, s, e):
    """The columns ``s:e`` of ``a`` when they are all of them (one block)."""
    return a


def _columns(a, s, e):
    """The columns ``s:e`` of ``a`` (the last axis)."""
    return a[..., s:e]


def _in_place_ops(ops, *arrays):
    """``ops`` for the ``out=`` operations, or :class:`_Fresh` when a tensor of ``arrays`` requires
    gradients (then a single block spans ``P`` and nothing is reused)."""
    if ops is TORCH_OPS and torch.is_grad_enabled() and any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in arrays):
        return _Fresh
    return ops


def _is_stiff(ops, square, n):
    """Whether the trace of ``square = I_n + Gᵀ G`` (``(..., n, n)``, any hypothesis) minus ``n``
    exceeds :func:`~skfilter.posteriors._base.stiffness_limit`: the plain Cholesky and Woodbury forms
    of ``square`` then lose more than half of the digits (a host value; non-finite values take the
    plain forms, whose checks report them)."""
    if ops is NUMPY_OPS:  # a single system (no leading axes)
        excess = float(square.trace()) - n
    else:
        excess = float(square.diagonal(dim1=-2, dim2=-1).sum(-1).amax()) - n
    return math.isfinite(excess) and excess > stiffness_limit(square.dtype)


class _StackedRows:
    """Column blocks of ``W̃ᵀ = [Wᵀ; rows]`` (``k = L + m`` rows of length ``P``) for the passes of
    :func:`lofi_update` and :func:`lofi_jacobian_products`, through one ``2k × c`` block temporary
    (:func:`~skfilter._array_ops.chunk_width` columns) that stays in the cache: ``fill(s, e)``
    writes ``W̃ᵀ`` of the columns ``s:e`` into its last ``k`` rows and ``(Υ⁻¹ W̃)ᵀ`` into its first
    ``k`` (``scale=False``: only ``W̃ᵀ``)."""

    def __init__(self, ops, io, diagonal, low_rank, rows, scratch):
        L, m, P = low_rank.shape[-2], rows.shape[-2], low_rank.shape[-1]
        self.L, self.k, self.io = L, L + m, io
        self.low_rank, self.rows, self.diagonal = low_rank, rows, diagonal
        batch = tuple(rows.shape[:-2])
        temp = scratch if scratch is not None else (lambda name, shape, like: ops.empty(shape, like=like))
        self.per_param = diagonal.shape[-1] == P  # Υ (..., P); spherical η (..., 1)
        self.inv_all = None if self.per_param else 1.0 / diagonal
        c = self.width = P if io is _Fresh else chunk_width(2 * self.k, P, rows)
        self.single = c >= P
        self.spans = [(0, P)] if self.single else [(s, min(P, s + c)) for s in range(0, P, c)]
        self.cut = _whole if self.single else _columns
        self.block = temp("lofi.block", batch + (2 * self.k, c), rows)
        self.inv = temp("lofi.inv", batch + (c,), rows) if self.per_param else None

    def fill(self, s, e, scale=True):
        """``(W̃ᵀ, (Υ⁻¹ W̃)ᵀ)`` of the columns ``s:e`` into the block; the block's columns."""
        k, L, c, cut, io = self.k, self.L, self.width, self.cut, self.io
        blk = self.block if e - s == c else self.block[..., :e - s]
        Fc = blk[..., k:, :]
        Fc[..., :L, :] = cut(self.low_rank, s, e)
        Fc[..., L:, :] = cut(self.rows, s, e)
        if scale:
            if self.per_param:
                ic = io.reciprocal(cut(self.diagonal, s, e), self.inv if e - s == c else self.inv[..., :e - s])
            else:
                ic = self.inv_all
            io.multiply(Fc, ic[..., None, :], blk[..., :k, :])
        return Fc, blk

    def products(self, gram=True):
        """``W̃ᵀ [Υ⁻¹ W̃, W̃]`` (``(k, 2k)``; ``gram=False``: ``W̃ᵀ Υ⁻¹ W̃`` only, ``(k, k)``), a sum
        over the blocks."""
        k = self.k
        total = None
        for s, e in self.spans:
            Fc, blk = self.fill(s, e)
            part = Fc @ (blk if gram else blk[..., :k, :]).swapaxes(-1, -2)
            total = part if total is None else total + part
        return total


def _second_pass_by_rows(passes, Vt, coef, mean, diagonal, new_mean, new_low_rank, new_diagonal, mass):
    """The second pass of :func:`lofi_update` for one NumPy belief whose rows are given by their
    Jacobian (``passes`` over ``S = [Wᵀ; J]``, ``Vt = Ṽᵀ T``, ``coef = Tᵀ c``): per block of columns
    one product with ``[Ṽᵀ T; cᵀ T]`` gives the kept rows ``Wᵀ = (ṼᵀT)[:L] S`` — written straight
    into ``new_low_rank`` — the dropped rows ``D = (ṼᵀT)[L:] S`` and the mean's ``(Tᵀc)ᵀ S``, so that
    ``μ = μ⁻ + Υ⁻¹ ∘ ((Tᵀc)ᵀ S)`` and ``Υ = Υ⁻ + colsum(D²)`` (eq. 39; ``new_diagonal`` None: spherical
    LoFi, which drops it) need no second product. ``mass``: a ``(c,)`` temporary."""
    L, k = passes.L, passes.k
    m = k - L
    t = torch.from_numpy
    head = t(np.ascontiguousarray(Vt[:L]))
    tail = t(np.concatenate([Vt[L:], coef.T]))  # ((m + 1), k): the dropped rows, then the mean's
    for s, e in passes.spans:
        Fc, blk = passes.fill(s, e, scale=False)  # S's columns s:e in the block's last k rows
        n = e - s
        # the products through torch's BLAS (these short-and-wide shapes: 0.4–0.75× NumPy's time,
        # measured in both dtypes), on views of the same memory
        Fc_t = t(Fc)
        torch.matmul(head, Fc_t, out=t(new_low_rank[:, s:e]))
        r = blk[:m + 1]  # (L ≥ 1: clear of the last k rows)
        torch.matmul(tail, Fc_t, out=t(r))
        if passes.per_param:
            shift = np.divide(r[m], diagonal[s:e], out=mass[:n])
        else:
            shift = np.multiply(r[m], passes.inv_all, out=mass[:n])
        np.add(mean[s:e], shift, out=new_mean[s:e])
        if new_diagonal is not None:
            D = r[:m]
            np.add(diagonal[s:e], np.einsum("ij,ij->j", D, D, out=mass[:n]), out=new_diagonal[s:e])


def lofi_update(ops, mean, diagonal, low_rank, Hw, ew, variant="diagonal", truncate=True, out=None,
                scratch=None, row_map=None, products=None):
    """One LoFi update (Alg. 3 / Alg. 7) of the predicted belief ``N(μ⁻, (Υ⁻ + W⁻W⁻ᵀ)⁻¹)`` with the
    ``m`` whitened rows ``Hw (..., m, P)``, ``ew (..., m)``; ``low_rank = W⁻ᵀ (..., L, P)``; arrays of
    the backend ``ops`` (:mod:`~skfilter._array_ops`; the NumPy one takes no leading axes).

    Works on ``W̃ᵀ = [W⁻ᵀ; Hw]`` (``k = L + m`` contiguous rows of length ``P``):

    * mean from the untruncated rank-``k`` posterior, eq. 36 with its minus sign: with
      ``b = Hwᵀ ew`` and ``G = (I + W̃ᵀ Υ⁻⁻¹ W̃)⁻¹``,
      ``μ = μ⁻ + Υ⁻⁻¹ b − Υ⁻⁻¹ W̃ G W̃ᵀ Υ⁻⁻¹ b = μ⁻ + (Υ⁻⁻¹ W̃) c``, ``c = [0; ew] − G (W̃ᵀ Υ⁻⁻¹ W̃)[:, L:] ew``
      — one ``k × k`` product ``W̃ᵀ Υ⁻⁻¹ W̃`` serves both ``G`` and ``W̃ᵀ Υ⁻⁻¹ b``; ``G`` by Cholesky;
    * truncation by the thin SVD ``W̃ = Ũ Λ̃ Ṽᵀ`` (eq. 37), computed as ``(ŨΛ̃)ᵀ = Ṽᵀ W̃ᵀ`` from the
      eigenvectors ``Ṽ`` of the ``k × k`` Gram matrix ``W̃ᵀ W̃`` (for spherical LoFi ``η`` times the
      product above): rows by decreasing singular value, no division by singular values (zero rows
      at start-up are harmless), and since ``Ṽ`` is orthogonal ``rowsum((ŨΛ̃)²) = rowsum(W̃²)`` to
      rounding, so the diagonal correction of eq. 39 is exact. The kept subspace agrees with a
      ``P × k`` SVD except at (near-)ties of singular values, where either is valid;
    * ``W = (ŨΛ̃)[:, :L]``; diagonal LoFi adds the dropped mass to ``Υ`` (eq. 39), spherical LoFi
      drops it (F.5.1).

    **Stiff rows** (:func:`~skfilter.posteriors._base.stiffness_limit`): when the trace of
    ``W̃ᵀ Υ⁻⁻¹ W̃`` exceeds ``eps^(-1/2)`` (inputs of ``1e8`` give ``1e18``) its Cholesky factorisation
    loses the identity to rounding and fails, and the eigenvalues of ``W̃ᵀW̃`` below ``eps·‖W̃‖²``
    are noise, so the truncation may drop a direction it should keep. The step then takes the
    square-root forms: ``F`` from the QR decomposition of ``[Υ⁻^(-1/2) W̃; I]``
    (:func:`~skfilter.posteriors._base.identity_plus_gram_factor`), the mean from its orthonormal
    ``Q`` as the Kalman step ``μ = μ⁻ + Υ⁻^(-1/2) Q[:P, L:] C⁻¹ ew`` (``C = F[L:, L:]``, the factor of
    ``S_w``; the same vector as eq. 36 since ``Υ⁻^(-1/2) W̃ R⁻¹ = Q[:P]`` and ``R⁻ᵀ[0; ew] = [0;
    C⁻¹ew]``, without its difference of nearly equal terms and the squared condition of ``G``), and
    ``Ṽ`` from the SVD of ``W̃ᵀ`` itself (singular values resolved to ``eps·‖W̃‖``, not
    ``eps·‖W̃‖²``). These are the same quantities as the plain forms'; the belief's form —
    precision factors, ``Υ > 0`` — keeps ``Σ`` positive definite whatever the rounding.

    The Cholesky factor ``F`` of ``I + W̃ᵀ Υ⁻⁻¹ W̃ = [[M, B], [Bᵀ, D]]`` also gives the innovation:
    its trailing ``m × m`` block is the Cholesky factor of the Schur complement
    ``D − Bᵀ M⁻¹ B = I + Hw Σ⁻ Hwᵀ`` (the whitened innovation covariance ``S_w``), so the
    evidence costs nothing extra (:class:`~skfilter.posteriors.UpdateInfo`).

    **Memory** (:mod:`~skfilter._array_ops`): ``W̃ᵀ`` is never formed whole. Two passes run over
    blocks of columns (:func:`~skfilter._array_ops.chunk_width`) — the ``k × 2k`` products, then the
    mean, the rotation and the dropped mass — through one ``2k ×`` block temporary that stays in the
    cache, so besides the results a step allocates nothing of size ``P``. ``scratch``, if given, is a
    callable ``scratch(name, shape, like)`` returning an array to reuse for the temporary ``name``
    (uninitialised; never part of a result); ``out = (μ, Υ, Wᵀ)``, if given, holds arrays (each
    ``None`` or of the result's shape, sharing no memory with the inputs) that receive the results
    instead of new ones (``Υ`` for diagonal LoFi only). The block sums change only the rounding of
    the products, and nothing at all when one block spans ``P``. (The square-root forms below take
    ``W̃ᵀ`` whole.)

    **Rows given by their Jacobian** (``row_map``, ``products``; :func:`lofi_jacobian_products`):
    every built-in likelihood whitens by a small matrix, ``Hw = A J`` (``A`` ``m × m``, block
    diagonal over the rows; :meth:`~skfilter.likelihoods.Likelihood.whitening_matrix`). Then
    ``Hw`` may be passed as ``J (m, P)`` with ``row_map = A`` and ``products`` the first pass's
    ``[Wᵀ; J] [Υ⁻¹[Wᵀ; J]; [Wᵀ; J]]ᵀ``, which the predictive ``J Σ Jᵀ`` was computed from: with
    ``T = diag(I_L, A)`` (so ``W̃ᵀ = T [Wᵀ; J]``) the step's ``k × k`` products are ``T Π Tᵀ``, the
    rotation ``Ṽᵀ W̃ᵀ = (Ṽᵀ T) [Wᵀ; J]`` and the mean's ``W̃ c = [W, Jᵀ] (Tᵀ c)``: the same
    quantities as from ``Hw`` (to rounding), with one pass over ``P`` instead of three (the
    predictive's, the whitening's and the first pass).

    Returns ``(μ, Υ, Wᵀ, F)`` (``Υ, Wᵀ`` None unless ``truncate``), after one check that every
    result is finite and ``G⁻¹`` positive definite (:class:`~skfilter.exceptions.FilterStepError`
    otherwise). ``Υ`` stays positive by construction, so only finiteness is checked; ``W`` is not
    summed: a non-finite ``W̃`` makes the eigendecomposition fail or ``Ṽ``, hence the dropped mass
    in ``Υ`` and, through ``G``, the mean non-finite.
    """
    L = low_rank.shape[-2]
    m = Hw.shape[-2]
    k = L + m
    P = low_rank.shape[-1]
    batch = tuple(Hw.shape[:-2])
    gram_needed = truncate and variant == "diagonal"
    io = _in_place_ops(ops, mean, diagonal, low_rank, Hw, ew)
    if io is _Fresh:
        scratch = out = None
    temp = scratch if scratch is not None else (lambda name, shape, like: ops.empty(shape, like=like))
    mean_out, diag_out, low_rank_out = (None, None, None) if out is None else out
    passes = _StackedRows(ops, io, diagonal, low_rank, Hw, scratch)
    single, spans, cut, fill, block = passes.single, passes.spans, passes.cut, passes.fill, passes.block
    c, per_param, inv, inv_all = passes.width, passes.per_param, passes.inv, passes.inv_all
    mix = None  # T = diag(I_L, A): W̃ᵀ = T [Wᵀ; rows] (rows given by their Jacobian)
    if row_map is None:
        products = passes.products(gram_needed)
        factors_t = block[..., k:, :] if single else None  # W̃ᵀ whole, when one block holds it
    else:
        mix = ops.zeros(batch + (k, k), like=Hw)
        mix[..., :L, :L] = ops.eye(L, like=Hw)
        mix[..., L:, L:] = row_map
        mix_t = mix.swapaxes(-1, -2)
        inner_rows = mix @ products[..., :, :k] @ mix_t
        gram_rows = mix @ products[..., :, k:2 * k] @ mix_t if gram_needed else None
        products = inner_rows if gram_rows is None else ops.concat_columns(inner_rows, gram_rows)
        factors_t = None  # no block holds W̃ᵀ: the second pass fills [Wᵀ; rows]
    inner = products[..., :, :k]  # W̃ᵀ Υ⁻¹ W̃, (k, k)
    rhs = inner[..., :, L:] @ ew[..., None]  # W̃ᵀ Υ⁻¹ b, (k, 1)
    if gram_needed:
        gram = products[..., :, k:]
    elif truncate:  # spherical: W̃ᵀ W̃ = η W̃ᵀ Υ⁻¹ W̃
        gram = inner * diagonal[..., None]
    system = inner + ops.eye(k, like=Hw)
    stiff = _is_stiff(ops, system, k)
    coef = None
    if stiff:  # square-root form: [Υ^(-1/2) W̃; I] = Q R, F = Rᵀ; the mean by the gain Υ^(-1/2) Q[:P, L:]
        if factors_t is None:  # the square-root forms take W̃ᵀ whole (stiff rows only)
            factors_t = ops.empty(batch + (k, P), like=Hw)
            factors_t[..., :L, :] = low_rank
            factors_t[..., L:, :] = Hw if row_map is None else row_map @ Hw
            mix = None  # W̃ᵀ itself from here on
        root = _torch(1.0 / diagonal).sqrt()
        F, Q = identity_plus_gram_factor(_torch(factors_t) * root[..., None, :], with_q=True)
        z = torch.linalg.solve_triangular(F[..., L:, L:], _torch(ew)[..., None], upper=False)  # C⁻¹ ew
        new_mean = mean + _backend(ops, root * (Q[..., :P, L:] @ z)[..., 0])
        if mean_out is not None:
            mean_out[...] = new_mean
            new_mean = mean_out
        ok, factor = (0 if ops is NUMPY_OPS else torch.zeros((), dtype=torch.int32)), _backend(ops, F)
    else:
        sol, ok, factor = ops.spd_solve(system, rhs, "LoFi update system")
        coef = -sol
        coef[..., L:, 0] += ew
        new_mean = mean_out if mean_out is not None else ops.empty(mean.shape, like=mean)
    new_diagonal = new_low_rank = None
    diagonal_variant = truncate and variant == "diagonal"
    if truncate:
        if stiff:  # the left singular vectors of W̃ᵀ: the eigenvectors of W̃ᵀW̃ without squaring it
            V = _backend(ops, torch.linalg.svd(_torch(factors_t), full_matrices=k > P).U)  # U: k × k
        else:
            V = ops.eigh_descending(gram, "LoFi truncation (eigh of W̃ᵀW̃)")
        Vt = V.swapaxes(-1, -2)  # (Ũ Λ̃)ᵀ = Ṽᵀ W̃ᵀ: its first L rows are kept, the others dropped
        if mix is not None:  # Ṽᵀ W̃ᵀ = (Ṽᵀ T) [Wᵀ; rows]
            Vt = Vt @ mix
        new_low_rank = low_rank_out
        if low_rank_out is None and not single:
            new_low_rank = ops.empty(batch + (L, P), like=Hw)
        new_diagonal = diagonal
        if diagonal_variant:
            new_diagonal = diag_out if diag_out is not None else ops.empty(diagonal.shape, like=diagonal)
            mass = temp("lofi.mass", batch + (c,), Hw) if m > 1 else None
    if coef is not None and mix is not None:  # W̃ c = [W, rowsᵀ] (Tᵀ c)
        coef = mix.swapaxes(-1, -2) @ coef
    if (factors_t is None and io is NUMPY_OPS and coef is not None and truncate and L > 0
            and low_rank.ndim == 2):  # rows given by their Jacobian, one NumPy belief
        if new_low_rank is None:
            new_low_rank = ops.empty((L, P), like=Hw)
        _second_pass_by_rows(passes, Vt, coef, mean, diagonal, new_mean, new_low_rank,
                             new_diagonal if diagonal_variant else None, temp("lofi.mass", (c,), Hw))
    elif coef is not None or truncate:  # second pass: μ = μ⁻ + (Υ⁻¹ W̃) c, Wᵀ = Ṽ[:, :L]ᵀ W̃ᵀ, eq. 39
        step = temp("lofi.step", batch + (c, 1), Hw) if coef is not None else None
        for s, e in spans:
            full = e - s == c
            if factors_t is not None:  # the block (or W̃ᵀ whole) already holds these columns
                Fc, blk = cut(factors_t, s, e), block if full else block[..., :e - s]
            else:
                Fc, blk = fill(s, e, scale=False)
            if coef is not None:  # (Υ⁻¹ W̃) c: from the block's Υ⁻¹ W̃ᵀ, or as Υ⁻¹ (W̃ c) after a refill
                sc = step if full else step[..., :e - s, :]
                if factors_t is not None:
                    io.matmul(blk[..., :k, :].swapaxes(-1, -2), coef, sc)
                else:
                    ic = io.reciprocal(cut(diagonal, s, e), inv if full else inv[..., :e - s]) if per_param else inv_all
                    io.multiply(io.matmul(Fc.swapaxes(-1, -2), coef, sc), ic[..., :, None], sc)
                io.add(cut(mean, s, e), sc[..., 0], cut(new_mean, s, e))
            if not truncate:
                continue
            if single and low_rank_out is None:  # one block, no workspace: Wᵀ the rows of a new array
                rotated = Vt @ Fc
                new_low_rank = rotated[..., :L, :]
            else:
                rotated = io.matmul(Vt, Fc, blk[..., :k, :])  # (Ũ Λ̃)ᵀ, into the block's first rows
                new_low_rank[..., :, s:e] = rotated[..., :L, :]
            if diagonal_variant:  # Υ = Υ⁻ + rowsum(dropped²) (eq. 39)
                if m == 1:
                    d0 = rotated[..., L, :]
                    io.add(cut(diagonal, s, e), io.multiply(d0, d0, d0), cut(new_diagonal, s, e))
                else:
                    D = rotated[..., L:, :]
                    io.add(cut(diagonal, s, e), io.sum_rows(io.multiply(D, D, D), mass if full else mass[..., :e - s]),
                           cut(new_diagonal, s, e))
    if not truncate:
        ops.check_finite([new_mean], ok, "LoFi update system")
        return new_mean, None, None, factor
    ops.check_finite([new_mean, new_diagonal], ok, "LoFi update system")
    return new_mean, new_diagonal, new_low_rank, factor


#: LoFi beliefs of at least this many parameters take the Jacobian-rows step (:class:`JacobianRows`):
#: one pass over ``P`` gives the predictive and the update's products (smaller beliefs run on the
#: compiled kernels, :mod:`skfilter.kernels`, whose operations follow the three-pass order)
JACOBIAN_ROWS_MIN_PARAMS = 100_000


def lofi_jacobian_products(ops, diagonal, low_rank, J, gram=True, scratch=None, first_pass=None):
    """The first pass of :func:`lofi_update` over the Jacobian rows ``J (m, P)`` instead of the
    whitened ones: ``Π = [Wᵀ; J] [Υ⁻¹[Wᵀ; J]; [Wᵀ; J]]ᵀ`` (``(k, 2k)``, ``k = L + m``; ``gram=False``:
    the first ``k`` columns only), and from it the prior predictive ``J Σ Jᵀ`` (``(m, m)``) by
    Woodbury (B.1, eq. 61) — ``Π_JJ − Π_JW M⁻¹ Π_WJ`` with ``M = I + Π_WW`` — the quantity of
    :func:`lowrank_quadratic_form` from the same products.

    ``first_pass``, if given, is a callable ``first_pass(diagonal, low_rank, J, gram)`` returning
    ``Π`` (NumPy arrays without leading axes), or ``None`` when it does not serve these arrays: the
    dispatch (:mod:`skfilter.stepping`) passes the compiled sweep
    (:func:`skfilter.kernels.stacked.stacked_row_products`); else ``Π`` is a BLAS product over
    blocks (:class:`_StackedRows`).

    Returns ``(Π, JΣJᵀ)``, or ``None`` when ``M`` is stiff (:func:`_is_stiff`: the caller then takes
    the square-root forms of :func:`lowrank_quadratic_form` and :func:`lofi_update`).

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter._array_ops import NUMPY_OPS
    >>> from skfilter.posteriors.lofi import lofi_jacobian_products, lofi_update
    >>> g = np.random.default_rng(0)
    >>> mean, ups, WT = g.standard_normal(50), g.random(50) + 0.5, g.standard_normal((3, 50)) / 7
    >>> J, A, e = g.standard_normal((2, 50)) / 7, g.standard_normal((2, 2)), g.standard_normal(2)
    >>> products, quad = lofi_jacobian_products(NUMPY_OPS, ups, WT, J)
    >>> Sigma = np.linalg.inv(np.diag(ups) + WT.T @ WT)
    >>> bool(np.allclose(quad, J @ Sigma @ J.T))
    True
    >>> by_rows = lofi_update(NUMPY_OPS, mean, ups, WT, J, e, row_map=A, products=products)
    >>> whitened = lofi_update(NUMPY_OPS, mean, ups, WT, A @ J, e)
    >>> all(np.allclose(a, b) for a, b in zip(by_rows[:3], whitened[:3]))
    True
    """
    L = low_rank.shape[-2]
    io = _in_place_ops(ops, diagonal, low_rank, J)
    products = None if first_pass is None or io is not NUMPY_OPS else first_pass(diagonal, low_rank, J, gram)
    if products is None:
        products = _StackedRows(ops, io, diagonal, low_rank, J, None if io is _Fresh else scratch).products(gram)
    k = products.shape[-2]
    inner = products[..., :, :k]
    quad = inner[..., L:, L:]
    if L:
        M = inner[..., :L, :L] + ops.eye(L, like=J)
        if _is_stiff(ops, M, L):
            return None
        X, ok, _ = ops.spd_solve(M, inner[..., :L, L:], "LoFi low-rank system")  # M⁻¹ Π_WJ, (L, m)
        if int(ok) != 0:
            return None
        quad = quad - inner[..., L:, :L] @ X
    return products, quad


class JacobianRows:
    """One step's Jacobian rows ``J`` and their products with a LoFi belief
    (:func:`lofi_jacobian_products`), from :meth:`LowRankPrecision.jacobian_rows`: :attr:`quad` is
    the prior predictive ``J Σ⁻ Jᵀ`` (``(n, C, C)``, a tensor) and :meth:`update` the LoFi update
    with the whitened rows ``Hw = A J`` given by ``A`` (:func:`lofi_update` with ``row_map``), so a
    step passes over ``P`` twice instead of four times (the predictive, the whitening, the update's
    two passes).

    Examples
    --------
    >>> import torch
    >>> from skfilter.posteriors.lofi import LowRankPrecision
    >>> import skfilter.posteriors.lofi as lofi
    >>> s = LowRankPrecision(rank=2)
    >>> b = s.prior(torch.zeros(6, dtype=torch.float64), 1.0)
    >>> J = torch.randn(1, 1, 6, dtype=torch.float64)
    >>> lofi.JACOBIAN_ROWS_MIN_PARAMS, saved = 0, lofi.JACOBIAN_ROWS_MIN_PARAMS
    >>> rows = s.jacobian_rows(b, J)
    >>> bool(torch.allclose(rows.quad, s.quadratic_form(b, J)))
    True
    >>> A, ew = torch.full((1, 1, 1), 2.0, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64)
    >>> new, _ = rows.update(A, ew)
    >>> ref, _ = s.update(b, (A @ J).reshape(1, 6), ew.reshape(1))
    >>> bool(torch.allclose(new.mean, ref.mean))
    True
    >>> lofi.JACOBIAN_ROWS_MIN_PARAMS = saved
    """

    def __init__(self, structure, belief, J_rows, products, quad, n, C):
        self.structure, self.belief, self.rows, self.products = structure, belief, J_rows, products
        self.n, self.C = n, C
        blocks = quad.reshape(n, C, n, C)
        idx = np.arange(n)
        self.quad = torch.from_numpy(np.ascontiguousarray(blocks[idx, :, idx, :]))  # the rows' own blocks

    def update(self, A, ew, workspace=None):
        """The update with ``Hw = A J`` (``A (n, C, C)``, ``ew (n, C)``, tensors): ``(belief, info)``
        as :meth:`LowRankPrecision.update`."""
        A_, ew_ = as_numpy(NUMPY_OPS, A, ew)
        row_map = np.zeros((self.n * self.C,) * 2, dtype=self.rows.dtype)
        for i in range(self.n):
            row_map[i * self.C:(i + 1) * self.C, i * self.C:(i + 1) * self.C] = A_[i]
        return self.structure._update_arrays(self.belief, self.rows, ew_.reshape(-1), workspace, row_map,
                                             self.products)


def lowrank_quadratic_form(ops, J, diagonal, low_rank, scratch=None):
    """``J Σ Jᵀ`` (``(..., n, C, C)``) for ``Σ = (Υ + W Wᵀ)⁻¹``, ``J (..., n, C, P)``,
    ``low_rank = Wᵀ (..., L, P)``, by Woodbury (B.1, eq. 61): ``J Υ⁻¹ Jᵀ − A M⁻¹ Aᵀ`` with
    ``A = J Υ⁻¹ W``, ``M = I + Wᵀ Υ⁻¹ W`` (Cholesky). Returns ``(quad, ok)`` (``ok`` None when
    ``L = 0``), arrays of the backend ``ops``.

    The difference cancels where ``J`` lies in the span of large-precision directions; when ``M`` is
    stiff (:func:`_is_stiff`) the same quantity is computed as a sum of squares, with ``Z = M⁻¹ Aᵀ``::

        J Σ Jᵀ = (J − Zᵀ Wᵀ) Υ⁻¹ (J − Zᵀ Wᵀ)ᵀ + Zᵀ Z

    (expand and use ``Wᵀ Υ⁻¹ Jᵀ = M Z``), taken from the orthonormal ``Q`` of the QR decomposition
    ``[Υ^(-1/2) W; I] = Q R`` (:func:`~skfilter.posteriors._base.identity_plus_gram_factor`): with
    ``J̄ = J Υ^(-1/2)`` and ``y = Q_topᵀ J̄ᵀ``, ``Υ^(-1/2)(Jᵀ − W Z) = J̄ᵀ − Q_top y`` and
    ``Z = Q_bot y``. Never negative, and accurate to the rounding of ``J`` and ``W`` rather than
    of ``J Υ⁻¹ Jᵀ``."""
    *batch, n, C, P = J.shape
    L = low_rank.shape[-2]
    io = _in_place_ops(ops, J, diagonal, low_rank)
    if io is _Fresh:
        scratch = None
    temp = scratch if scratch is not None else (lambda name, shape, like: ops.empty(shape, like=like))
    per_param = diagonal.shape[-1] == P  # Υ (..., P); spherical η (..., 1)
    inv_all = None if per_param else 1.0 / diagonal
    c = P if io is _Fresh else chunk_width(n * C + L, P, J)
    JU_block = temp("quad.JU", (*batch, n, C, c), J)
    WU_block = temp("quad.WU", (*low_rank.shape[:-2], L, c), J) if L else None
    inv = temp("quad.inv", (*diagonal.shape[:-1], c), J) if per_param else None
    quad = M = A = None  # sums over blocks of columns
    for s in range(0, P, c):
        e = min(P, s + c)
        w = e - s
        ic = io.reciprocal(diagonal[..., s:e], inv[..., :w]) if per_param else inv_all
        Jc = J[..., s:e]
        JUc = io.multiply(Jc, ic[..., None, None, :], JU_block[..., :w])  # J Υ⁻¹
        part = JUc @ Jc.swapaxes(-1, -2)
        quad = part if quad is None else quad + part
        if L:
            Wc = low_rank[..., s:e]
            part = Wc @ io.multiply(Wc, ic[..., None, :], WU_block[..., :w]).swapaxes(-1, -2)
            M = part if M is None else M + part
            part = JUc.reshape(*batch, n * C, w) @ Wc.swapaxes(-1, -2)  # (J Υ⁻¹ W), (nC, L)
            A = part if A is None else A + part
    if L == 0:
        return quad, None
    M = M + ops.eye(L, like=low_rank)  # I + Wᵀ Υ⁻¹ W
    if _is_stiff(ops, M, L):
        root = _torch(1.0 / diagonal).sqrt()
        Jr = (_torch(J) * root[..., None, None, :]).reshape(*batch, n * C, P)  # J Υ^(-1/2)
        _, Q = identity_plus_gram_factor(_torch(low_rank) * root[..., None, :], with_q=True)
        y = Jr @ Q[..., :P, :]  # (Q_topᵀ Jrᵀ)ᵀ, (nC, L)
        resid = (Jr - y @ Q[..., :P, :].swapaxes(-1, -2)).reshape(*batch, n, C, P)
        Z = (y @ Q[..., P:, :].swapaxes(-1, -2)).reshape(*batch, n, C, L)  # (M⁻¹Aᵀ)ᵀ = (Q_bot y)ᵀ
        quad = resid @ resid.swapaxes(-1, -2) + Z @ Z.swapaxes(-1, -2)
        return _backend(ops, quad), (0 if ops is NUMPY_OPS else torch.zeros((), dtype=torch.int32))
    X, ok, _ = ops.spd_solve(M, A.swapaxes(-1, -2), "LoFi low-rank system")  # M⁻¹ Aᵀ, (L, nC)
    correction = A.reshape(*batch, n, C, L) @ X.swapaxes(-1, -2).reshape(*batch, n, C, L).swapaxes(-1, -2)
    return quad - correction, ok


def capacitance_factor(inv_diagonal, low_rank):
    """The Woodbury capacitance of ``Σ = (Υ + W Wᵀ)⁻¹`` in torch, batch-generic over leading axes.

    ``inv_diagonal`` is ``Υ⁻¹`` (``(..., P)``, or ``(..., 1)`` for spherical ``Υ = η I``) and
    ``low_rank`` is ``Wᵀ`` (``(..., L, P)``, ``L ≥ 1``). Returns ``(UWT, Lc)``: the scaled factor
    ``UWT = (Υ⁻¹ W)ᵀ`` (``(..., L, P)``) and the lower Cholesky factor ``Lc`` (``(..., L, L)``) of
    ``M = I_L + Wᵀ Υ⁻¹ W``, so that ``Σ = Υ⁻¹ − UWTᵀ M⁻¹ UWT`` (for a stiff ``M``, :func:`_is_stiff`,
    from the QR form of :func:`~skfilter.posteriors._base.identity_plus_gram_factor`). Raises
    :class:`~skfilter.exceptions.FilterStepError` if ``M`` is not positive definite.

    Used by the torch-side solves, marginal variances and samples of :class:`LowRankPrecision`;
    :func:`lowrank_quadratic_form` and :func:`lofi_update` form their systems on their array
    backend (NumPy views on the CPU) and stay there.
    """
    UWT = low_rank * inv_diagonal[..., None, :]
    M = low_rank @ UWT.mT
    M.diagonal(dim1=-2, dim2=-1).add_(1.0)
    if _is_stiff(TORCH_OPS, M, M.shape[-1]):  # the square-root form (see lofi_update)
        return UWT, identity_plus_gram_factor(low_rank * inv_diagonal.sqrt()[..., None, :])
    return UWT, cholesky_or_raise(M, "LoFi low-rank system")


_NO_OUTPUTS = (None, None, None)


def _result(ops, array, given):
    """The tensor of a result: ``given`` (a workspace tensor the result was written into) or the
    backend array as a tensor."""
    return given if given is not None else as_tensor(ops, array)[0]


def _lower(F):
    return torch.tril(torch.as_tensor(np.ascontiguousarray(F)) if isinstance(F, np.ndarray) else F)


class LowRankPrecision(Structure):
    """LoFi: the belief ``N(μ, (Υ + W Wᵀ)⁻¹)`` (module docstring).

    Parameters
    ----------
    rank : int, default=10
        ``L ≥ 0``.
    variant : {'diagonal', 'spherical'}, default='diagonal'
    svd : {'full', 'orth'}, default='full'
        Truncation: thin SVD of ``W̃`` or (spherical only) the orthogonal-projection update.
    seed : int, default=0
        Seeds the random column order of ``svd='orth'`` (Alg. 8).
    cpu_backend : {'numpy', 'torch'}, default='numpy'
        Array library of the update for CPU beliefs without hypotheses axes
        (:mod:`~skfilter._array_ops`): NumPy views (lower per-operation overhead) or torch. GPU
        tensors and stacks of hypotheses always use torch.

    Examples
    --------
    >>> import torch
    >>> from skfilter.posteriors import LowRankPrecision
    >>> structure = LowRankPrecision(rank=1)
    >>> prior = structure.prior(torch.zeros(3, dtype=torch.float64), 1.0)
    >>> post, info = structure.update(prior, torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64),
    ...                               torch.tensor([1.0], dtype=torch.float64))
    >>> [round(v, 6) for v in post.mean.tolist()], round(float(info.log_det), 6)
    ([0.5, 0.0, 0.0], 0.693147)
    """

    belief_type = LowRankBelief

    def __init__(self, rank=10, variant="diagonal", svd="full", seed=0, cpu_backend="numpy"):
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}.")
        if svd not in SVD_METHODS:
            raise ValueError(f"svd must be one of {SVD_METHODS}, got {svd!r}.")
        if svd == "orth" and variant != "spherical":
            raise ValueError("svd='orth' needs orthonormal columns of W: use variant='spherical'.")
        if cpu_backend not in ("numpy", "torch"):
            raise ValueError(f"cpu_backend must be 'numpy' or 'torch', got {cpu_backend!r}.")
        self.rank, self.variant, self.svd = int(rank), variant, svd
        self.seed, self.cpu_backend = int(seed), cpu_backend

    def prior(self, mean, prior_variance):
        """``Υ₀ = η₀ I`` with ``η₀ = 1 / prior_variance``, ``W₀ = 0`` (spherical: a scalar variance)."""
        opts = {"device": mean.device, "dtype": mean.dtype}
        batch = tuple(mean.shape[:-1])
        P = mean.shape[-1]
        precision = 1.0 / as_variance_vector(prior_variance, mean)
        if self.variant == "spherical":
            if not bool((precision == precision[0]).all()):
                raise ValueError("Spherical LoFi needs one prior variance for all parameters.")
            diagonal = precision[:1].expand(*batch, 1).clone()
        else:
            diagonal = precision.expand(*batch, P).clone()
        eta0 = precision if not bool((precision == precision[0]).all()) else precision[0]
        return LowRankBelief(mean.clone(), diagonal, torch.zeros(*batch, self.rank, P, **opts),
                             eta0.expand(batch + tuple(eta0.shape)).clone(), mean.clone(), 0)

    def admissible_prior_variance(self, variance):
        """Spherical LoFi has one prior variance: the mean of per-parameter ones."""
        if self.variant == "spherical" and isinstance(variance, torch.Tensor) and variance.dim():
            return float(variance.mean())
        return variance

    def uses_host_arrays(self, belief) -> bool:
        """Whether :meth:`update` takes NumPy arrays for ``Hw``, ``ew`` (CPU, no hypotheses axes,
        ``cpu_backend='numpy'``), which lets the engine whiten on the host."""
        mean = belief.mean
        return self.cpu_backend == "numpy" and mean.dim() == 1 and mean.is_cpu

    def _ops(self, belief):
        return NUMPY_OPS if self.uses_host_arrays(belief) else TORCH_OPS

    # -- dynamics ------------------------------------------------------------------------------
    def transition(self, belief, g, Q, shift):
        """Exact DLR predict (Alg. 2 / Alg. 6) of ``Σ ← g² Σ + diag(Q)``, ``μ ← g μ + shift``::

            Υ⁻ = (g² Υ⁻¹ + Q)⁻¹,   W⁻ = g Υ⁻ Υ⁻¹ W chol(C),   C⁻¹ = I_L + Wᵀ Υ⁻¹ Υ⁻ Q W

        (eqs. 15, 19, 25; a diagonal ``Q`` commutes with the diagonal factors, so per-parameter noise
        keeps the form). Spherical (eqs. 108–109, scalar ``q`` only): ``η⁻ = η/(g² + qη)``,
        ``λ⁻² = g²λ²/((g² + qη)(g² + qη + qλ²))``. The prior-predictive precision and mean follow
        the same dynamics: ``η_t = (g²/η_{t−1} + Q)⁻¹``, ``Γ_t μ₀ = g Γ_{t−1} μ₀ + shift``.
        """
        has_q = isinstance(Q, torch.Tensor) or Q != 0.0
        if g == 1.0 and not has_q and shift is None:
            return belief
        mean, ups, WT, eta_pp, m0, n_steps = belief
        if self.variant == "spherical" and isinstance(Q, torch.Tensor):
            raise ValueError("Spherical LoFi needs one process-noise value for all parameters.")
        ups_p, WT_p = self._transition_factors(ups, WT, g, Q, has_q)
        mean = mean * g if g != 1.0 else mean
        m0 = m0 * g if g != 1.0 else m0
        if shift is not None:
            mean, m0 = mean + shift, m0 + shift
        eta_pp = 1.0 / (g * g / eta_pp + Q) if (g != 1.0 or has_q) else eta_pp
        return LowRankBelief(mean, ups_p, WT_p, eta_pp, m0, n_steps)

    def _transition_factors(self, ups, WT, g, Q, has_q):
        if self.variant == "spherical":
            eta = ups
            denom = g * g + Q * eta
            if WT.shape[-2]:
                lam2 = (WT * WT).sum(-1)
                scale = torch.sqrt(g * g / (denom * (denom + Q * lam2)))
                WT = WT * scale[..., None]
            return eta / denom, WT
        if not has_q:
            return ups / (g * g), WT / g
        ups_pred = 1.0 / (g * g / ups + Q)
        if WT.shape[-2] == 0 or g == 0.0:
            return ups_pred, WT * 0.0
        ratio = ups_pred / ups
        if _in_place_ops(TORCH_OPS, WT, ratio, Q) is _Fresh:  # under autograd: whole arrays, no out=
            DWT = WT * ratio[..., None, :]
            Mc = (WT * Q[..., None, :] if isinstance(Q, torch.Tensor) else WT * Q) @ DWT.mT
            Mc.diagonal(dim1=-2, dim2=-1).add_(1.0)
            return ups_pred, g * torch.linalg.solve_triangular(cholesky_or_raise(Mc, "LoFi predict system"), DWT,
                                                              upper=False)
        # D Wᵀ and Q Wᵀ over blocks of columns through reused temporaries (as lofi_update): the only
        # P-sized array allocated is the result
        P = WT.shape[-1]
        c = chunk_width(2 * WT.shape[-2], P, WT)
        single = c >= P
        spans = [(0, P)] if single else [(s, min(P, s + c)) for s in range(0, P, c)]
        cut = _whole if single else _columns
        temp = SCRATCH.getter(TORCH_OPS, self)
        D_block = temp("predict.DWT", WT.shape[:-1] + (c,), WT)
        Q_block = temp("predict.QWT", WT.shape[:-1] + (c,), WT)

        def scaled(s, e):  # the columns s:e of D Wᵀ, D = Υ⁻ Υ⁻¹
            return torch.mul(cut(WT, s, e), cut(ratio, s, e)[..., None, :],
                             out=D_block if e - s == c else D_block[..., :e - s])

        Mc = None
        for s, e in spans:
            DWT = scaled(s, e)
            q = cut(Q, s, e)[..., None, :] if isinstance(Q, torch.Tensor) else Q
            part = torch.mul(cut(WT, s, e), q, out=Q_block if e - s == c else Q_block[..., :e - s]) @ DWT.mT
            Mc = part if Mc is None else Mc + part
        Mc.diagonal(dim1=-2, dim2=-1).add_(1.0)  # C⁻¹ = I + Wᵀ Υ⁻¹ Υ⁻ Q W
        Lc = cholesky_or_raise(Mc, "LoFi predict system")
        # W⁻ = g D W chol(C); with C⁻¹ = L Lᵀ, chol(C) may be taken as L⁻ᵀ (only W Wᵀ matters)
        if single:
            return ups_pred, torch.linalg.solve_triangular(Lc, DWT, upper=False).mul_(g)
        WT_pred = torch.empty_like(WT)
        for s, e in spans:  # the triangular solve acts on each column alone
            WT_pred[..., s:e] = torch.linalg.solve_triangular(Lc, scaled(s, e), upper=False)
        return ups_pred, WT_pred.mul_(g)

    def _dlr_solve(self, ups, WT, v):
        """``(Υ + W Wᵀ)⁻¹ v`` by Woodbury (``WT = Wᵀ``, ``(..., L, P)``)."""
        ui = 1.0 / ups
        if WT.shape[-2] == 0:
            return ui * v
        UWT, Lc = capacitance_factor(ui, WT)
        return ui * v - (UWT.mT @ torch.cholesky_solve((UWT @ v[..., None]), Lc, upper=False))[..., 0]

    def inflate(self, belief, kind, factor):
        """App. E / F.6: the inflated posterior of the previous step, factor ``α``.

        Diagonal: ``W ← W/√(1+α)``; ``'simple'`` ``Υ ← Υ/(1+α)``; ``'bayesian'``/``'hybrid'``
        ``Υ ← Υ/(1+α) + α/(1+α) η_{t−1}`` (eqs. 80, 90); ``'bayesian'`` also moves the mean,
        ``μ ← μ + α η/(1+α) (Υ + WWᵀ)⁻¹ (Γμ₀ − μ)`` (eq. 79; spherical eq. 120 with ``η`` the
        spherical precision). Spherical ``'simple'``: ``η ← η/(1+α)`` (eqs. 123–125).
        """
        a = factor
        if a == 0.0:
            return belief
        mean, ups, WT, eta_pp, m0, n_steps = belief
        WT = WT / math.sqrt(1.0 + a)
        if self.variant == "diagonal":
            if kind == "simple":
                ups = ups / (1.0 + a)
            else:  # bayesian and hybrid share the covariance (eqs. 80, 90)
                ups = ups / (1.0 + a) + (a / (1.0 + a)) * (eta_pp[..., None] if eta_pp.dim() < ups.dim() else eta_pp)
        elif kind == "simple":  # spherical, eqs. 123–125
            ups = ups / (1.0 + a)
        if kind == "bayesian":  # eq. 79 (η_{t−1} prior-predictive) / eq. 120 (η spherical)
            eta = (eta_pp[..., None] if eta_pp.dim() < ups.dim() else eta_pp) if self.variant == "diagonal" else ups
            mean = mean + (a * eta / (1.0 + a)) * self._dlr_solve(ups.expand_as(mean), WT, m0 - mean)
        return LowRankBelief(mean, ups, WT, eta_pp, m0, n_steps)

    # -- the update ----------------------------------------------------------------------------
    def update(self, belief, Hw, ew, workspace=None):
        """:func:`lofi_update` on the backend of :meth:`_ops` (NumPy views of CPU tensors for a single
        belief unless ``cpu_backend='torch'``; torch for stacks of hypotheses and on GPUs);
        ``svd='orth'`` then replaces the truncation by Alg. 8. ``Hw``, ``ew`` may be NumPy arrays
        when :meth:`uses_host_arrays`. The returned belief always holds torch tensors.

        ``workspace`` (a dead belief, :meth:`Structure.update`): the new mean, ``Υ`` and ``Wᵀ`` are
        written into its arrays where they fit (:func:`~skfilter.posteriors._base.reusable_array`);
        the temporaries of the update are reused across steps (:class:`~skfilter._array_ops.Scratch`),
        so a step of a stream allocates nothing of size ``P``."""
        return self._update_arrays(belief, Hw, ew, workspace)

    def _update_arrays(self, belief, Hw, ew, workspace=None, row_map=None, products=None):
        """:meth:`update`; with ``row_map`` (:class:`JacobianRows`), ``Hw`` holds the Jacobian rows."""
        mean, ups, WT, eta_pp, m0, n_steps = belief
        ops = self._ops(belief)
        if ops is TORCH_OPS and isinstance(Hw, np.ndarray):
            Hw, ew = torch.from_numpy(Hw), torch.from_numpy(ew)
        full_svd = self.svd == "full"
        outs = self._outputs(workspace, belief, Hw, ew, full_svd)
        if outs is _NO_OUTPUTS and ops is NUMPY_OPS:
            outs = self._recycled_outputs(belief, full_svd)
        out = None if outs is _NO_OUTPUTS else tuple(None if t is None else as_numpy(ops, t)[0] for t in outs)
        with ops.quiet():
            new_mean, new_ups, new_WT, factor = lofi_update(
                ops, *as_numpy(ops, mean, ups, WT, Hw, ew), variant=self.variant, truncate=full_svd, out=out,
                scratch=self._scratch(ops), row_map=row_map, products=products)
        new_mean = _result(ops, new_mean, outs[0])
        if full_svd:
            new_WT = _result(ops, new_WT, outs[2])
            new_ups = ups if self.variant != "diagonal" else _result(ops, new_ups, outs[1])
        else:
            new_ups = ups
            Hw_t = torch.from_numpy(Hw) if isinstance(Hw, np.ndarray) else Hw
            if WT.dim() == 2:
                new_WT = self._orth_update(WT.T, Hw_t.T, n_steps).T.contiguous()
            else:  # Alg. 8 is sequential in its columns with data-dependent choices: one hypothesis at a time
                new_WT = torch.stack([self._orth_update(w.T, h.T, n_steps).T for w, h in
                                      zip(WT.reshape(-1, *WT.shape[-2:]), Hw_t.reshape(-1, *Hw_t.shape[-2:]))])
                new_WT = new_WT.reshape(WT.shape)
        L = WT.shape[-2]
        info = UpdateInfo(lambda: (_lower(factor)[..., L:, L:], torch.as_tensor(ew)))
        return LowRankBelief(new_mean, new_ups, new_WT, eta_pp, m0, n_steps + 1), info

    def _recycled_outputs(self, belief, full_svd):
        """Arrays for the new belief of a single NumPy belief of at least
        :data:`RECYCLE_MIN_BELIEF_BYTES` when no dead workspace is at hand (the second step of a
        call, whose predecessor is the caller's belief; the first when no spare is left): from this structure's
        :class:`~skfilter._array_ops.Recycler`, which hands out the arrays of a belief it made
        once nothing refers to them any more — typically the one the caller held before the last
        call — so a stream of calls touches no fresh memory (page faults). It keeps the arrays of
        at most three beliefs (the caller's, the stream's spare, the one being recycled)."""
        mean = belief.mean
        L = belief.low_rank.shape[-2]
        size = mean.numel() * (L + 2) * mean.element_size()
        if mean.dim() != 1 or size < RECYCLE_MIN_BELIEF_BYTES:
            return _NO_OUTPUTS
        table = SCRATCH.table(self)
        pool = table.get("beliefs")
        if pool is None:
            pool = table["beliefs"] = Recycler(max_count=9, max_bytes=3 * size, min_bytes=0)
        dtype = as_numpy(NUMPY_OPS, mean)[0].dtype
        new = lambda shape: torch.from_numpy(pool.empty(shape, dtype))  # noqa: E731
        return (new(mean.shape), new(mean.shape) if full_svd and self.variant == "diagonal" else None,
                new(belief.low_rank.shape) if full_svd and L > 0 else None)

    def _outputs(self, workspace, belief, Hw, ew, full_svd):
        """The arrays of the dead ``workspace`` belief that the update's mean, ``Υ`` and ``Wᵀ`` may
        be written into (``None`` each where there is none)."""
        if not isinstance(workspace, LowRankBelief) or workspace is belief:
            return _NO_OUTPUTS
        mean = belief.mean
        if mean.numel() * (belief.low_rank.shape[-2] + 2) * mean.element_size() < REUSE_MIN_BYTES:
            return _NO_OUTPUTS  # small arrays: the allocator recycles them for less than the checks
        guard = Disjoint(belief[:5])
        for a in (Hw, ew):  # arrays owning their memory are no views of the workspace's
            if not isinstance(a, np.ndarray) or a.base is not None:
                guard.add(a)
        wanted = (True, full_svd and self.variant == "diagonal", full_svd and belief.low_rank.shape[-2] > 0)
        outs = [None, None, None]
        for i in range(3):
            if wanted[i]:
                outs[i] = reusable_array(workspace[i], belief[i], guard)
                guard.add(outs[i])
        return tuple(outs)

    def _scratch(self, ops):
        """``scratch(name, shape, like)`` of :func:`lofi_update`: this structure's reused temporaries."""
        return SCRATCH.getter(ops, self)

    def _orth_update(self, W, G, step):
        """Alg. 8: orthogonal-projection incremental SVD of ``[W, G]`` (spherical, ``W = U diag(λ)``).

        Columns of ``G`` are taken in a random order drawn from ``(seed, step)`` (so a failed step
        does not change later ones). A residual ``v`` below ``√ε ‖g‖`` is rounding noise of a
        column already in ``span(U)`` and never enters the basis.
        """
        if W.shape[1] == 0:
            return W
        lam = W.norm(dim=0)
        U = W / lam.clamp_min(torch.finfo(W.dtype).tiny)
        U = torch.where(lam > 0, U, torch.zeros_like(U))
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        order = torch.randperm(G.shape[1], generator=gen).tolist()
        rel_tol = math.sqrt(torch.finfo(W.dtype).eps)
        for j in order:
            g = G[:, j]
            v = g - U @ (U.T @ g)
            nv, ng = v.norm(), g.norm()
            k = int(torch.argmin(lam))
            if bool((nv > lam[k]) & (nv > rel_tol * ng)):
                U = U.clone()
                lam = lam.clone()
                U[:, k] = v / nv
                lam[k] = nv
        return U * lam

    def jacobian_rows(self, belief, J, first_pass=None):
        """:class:`JacobianRows` of the Jacobian ``J (n, C, P)`` at a single belief held as NumPy
        views (:meth:`uses_host_arrays`) of at least :data:`JACOBIAN_ROWS_MIN_PARAMS` parameters
        under the truncating update (``svd='full'``); ``None`` otherwise, or when the low-rank
        system is stiff (the engine then takes :meth:`quadratic_form` and :meth:`update`).
        ``first_pass``: as :func:`lofi_jacobian_products`'."""
        P = belief.mean.shape[-1]
        if (P < JACOBIAN_ROWS_MIN_PARAMS or self.svd != "full" or belief.mean.dim() != 1 or J.dim() != 3
                or J.requires_grad or J.device.type != "cpu" or not self.uses_host_arrays(belief)):
            return None
        n, C, _ = J.shape
        rows, ups, WT = as_numpy(NUMPY_OPS, J.reshape(n * C, P), belief.diagonal, belief.low_rank)
        with NUMPY_OPS.quiet():
            found = lofi_jacobian_products(NUMPY_OPS, ups, WT, rows, gram=self.variant == "diagonal",
                                           scratch=self._scratch(NUMPY_OPS), first_pass=first_pass)
        if found is None or not np.isfinite(found[1]).all():
            return None
        return JacobianRows(self, belief, rows, found[0], found[1], n, C)

    # -- predictive ------------------------------------------------------------------------------
    def quadratic_form(self, belief, J):
        """``J Σ Jᵀ`` by Woodbury (B.1, eq. 61), :func:`lowrank_quadratic_form`; a tensor."""
        ops = NUMPY_OPS if (self.uses_host_arrays(belief) and J.device.type == "cpu"
                            and not J.requires_grad) else TORCH_OPS
        J_, ups_, WT_ = as_numpy(ops, J, belief.diagonal, belief.low_rank)
        with ops.quiet():
            quad, ok = lowrank_quadratic_form(ops, J_, ups_, WT_, scratch=self._scratch(ops))
        if ok is not None and int(ok) != 0:
            raise FilterStepError("The LoFi low-rank system is not positive definite (the belief is degenerate).")
        return as_tensor(ops, quad)[0]

    def _diagonal_vector(self, belief):
        ups = belief.diagonal
        return ups.expand(belief.mean.shape) if ups.shape[-1] == 1 else ups

    def marginal_variance(self, belief):
        """``diag(Σ) = Υ⁻¹ − colsum((Lc⁻¹ UWT)²)`` (Woodbury, :func:`capacitance_factor`), kept within
        its exact bounds ``1/(Υ + rowsum(W²))_i ≤ Σ_ii ≤ 1/Υ_i`` (``Σ_ii ≥ 1/(Σ⁻¹)_ii`` for any SPD
        matrix, and ``Σ⁻¹ ⪰ Υ``): the difference cancels for a parameter pinned by a stiff row, and the
        lower bound is then its value to first order."""
        ups = self._diagonal_vector(belief)
        ui = 1.0 / ups
        WT = belief.low_rank
        if WT.shape[-2] == 0:
            return ui.clone()
        UWT, Lc = capacitance_factor(ui, WT)
        A = torch.linalg.solve_triangular(Lc, UWT, upper=False)
        return torch.minimum(torch.maximum(ui - (A * A).sum(-2), 1.0 / (ups + (WT * WT).sum(-2))), ui)

    def precision(self, belief):
        """Dense ``Υ + W Wᵀ`` (tests and small models)."""
        return torch.diag_embed(self._diagonal_vector(belief)) + belief.low_rank.mT @ belief.low_rank

    def covariance(self, belief):
        return torch.linalg.inv(self.precision(belief))

    def sample(self, belief, n_samples, generator):
        """Exact DLR sampler (L-RVGA of Lambert, Bonnabel & Bach, Prop. 1).

        With ``M = I_L + Wᵀ Υ⁻¹ W`` and ``Lm = Υ⁻¹ W M⁻¹``: ``x ~ N(0, Υ⁻¹)``, ``ε ~ N(0, I_L)``,
        ``θ = μ + x − Lm (Wᵀ x) + Lm ε`` has covariance ``Υ⁻¹ − Υ⁻¹ W M⁻¹ Wᵀ Υ⁻¹ = (Υ + WWᵀ)⁻¹``.
        Cost ``O(PL² + L³)`` once, ``O(PL)`` per sample.
        """
        W = belief.low_rank.T
        P, L = W.shape
        opts = {"device": belief.mean.device, "dtype": belief.mean.dtype}
        ui = 1.0 / self._diagonal_vector(belief)
        x = torch.randn(n_samples, P, generator=generator, **opts) * ui.sqrt()
        if L == 0:
            return belief.mean + x
        UWT, Lc = capacitance_factor(ui, belief.low_rank)
        Lm = torch.cholesky_solve(UWT, Lc, upper=False).T  # Υ⁻¹ W M⁻¹ (M symmetric)
        eps = torch.randn(n_samples, L, generator=generator, **opts)
        return belief.mean + x + (eps - x @ W) @ Lm.T
