"""The first pass of the large-network LoFi step in one compiled sweep over the parameters.

A LoFi step at ``P ≥`` :data:`~skfilter.posteriors.lofi.JACOBIAN_ROWS_MIN_PARAMS` (the engine's
:func:`~skfilter.posteriors.lofi.lofi_jacobian_products`) starts with the products of the stacked
rows ``S = [Wᵀ; J]`` (``k = L + m`` rows of length ``P``) with the belief:

    ``Π = S [Υ⁻¹ S; S]ᵀ = [S Υ⁻¹ Sᵀ, S Sᵀ]``  (``k × 2k``; spec/lofi.md §2.4, Alg. 3 and B.1),

which give the prior predictive ``J Σ Jᵀ`` and the update's ``k × k`` systems. Through BLAS this is
a ``k × 2k × P`` matrix product on blocks that first copy ``S`` and scale it by ``Υ⁻¹`` (the copy and
the scaling cost about as much as the product). Both halves are symmetric, so
:func:`stacked_row_products` forms the ``k (k + 1) / 2`` distinct entries of each directly from the
rows, with ``Υ⁻¹`` applied on the fly: one read of ``S`` and ``Υ``, half the multiply-adds, nothing
written of size ``P``. Tiles of :data:`TILE` columns stay in the cache; within a tile four
entries of a row of ``Π`` are summed at once (each loaded element serves four products).

The sums run in the arrays' dtype with reassociation allowed (vectorised), so they agree with the
BLAS product to rounding (relative ``~1e-15`` in float64), not bit for bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: columns per tile: ``k`` rows of this many columns (160 KB at k = 20 in float64) stay in L2
TILE = 1024


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def stacked_row_products(low_rank, rows, diagonal, out, zero, one):
    """``out[:, :k] = S Υ⁻¹ Sᵀ`` and ``out[:, k:] = S Sᵀ`` for ``S = [low_rank; rows]``
    (``low_rank (L, P)``, ``rows (m, P)``, C-contiguous, one dtype) and ``Υ = diagonal`` (``(P,)``,
    or ``(1,)`` for spherical LoFi's ``η``); ``out (k, 2k)``; ``zero``, ``one`` scalars of the dtype
    (the sums stay in it)."""
    L, P = low_rank.shape
    m = rows.shape[0]
    k = L + m
    per_param = diagonal.shape[0] == P
    for a in range(k):
        for b in range(2 * k):
            out[a, b] = zero
    inv = np.empty(TILE, dtype=low_rank.dtype)
    tile = np.empty((k, TILE), dtype=low_rank.dtype)
    constant = one / diagonal[0]
    for s in range(0, P, TILE):
        e = min(P, s + TILE)
        n = e - s
        if per_param:
            for j in range(n):
                inv[j] = one / diagonal[s + j]
        else:
            for j in range(n):
                inv[j] = constant
        for a in range(L):
            tile[a, :n] = low_rank[a, s:e]
        for a in range(m):
            tile[L + a, :n] = rows[a, s:e]
        for a in range(k):
            ra = tile[a]
            b = a
            while b + 4 <= k:  # four entries of row a at once
                r0, r1, r2, r3 = tile[b], tile[b + 1], tile[b + 2], tile[b + 3]
                i0 = i1 = i2 = i3 = zero
                g0 = g1 = g2 = g3 = zero
                for j in range(n):
                    x = ra[j]
                    xi = x * inv[j]
                    i0 += xi * r0[j]
                    i1 += xi * r1[j]
                    i2 += xi * r2[j]
                    i3 += xi * r3[j]
                    g0 += x * r0[j]
                    g1 += x * r1[j]
                    g2 += x * r2[j]
                    g3 += x * r3[j]
                out[a, b] += i0
                out[a, b + 1] += i1
                out[a, b + 2] += i2
                out[a, b + 3] += i3
                out[a, k + b] += g0
                out[a, k + b + 1] += g1
                out[a, k + b + 2] += g2
                out[a, k + b + 3] += g3
                b += 4
            while b < k:
                rb = tile[b]
                i0 = g0 = zero
                for j in range(n):
                    x = ra[j]
                    i0 += x * inv[j] * rb[j]
                    g0 += x * rb[j]
                out[a, b] += i0
                out[a, k + b] += g0
                b += 1
    for a in range(k):  # the lower triangles
        for b in range(a):
            out[a, b] = out[b, a]
            out[a, k + b] = out[b, k + a]
