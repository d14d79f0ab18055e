"""RL[1]-OUPR* and CPP-OU over the factored covariance (LRKF, HiLoFi, LoLoFi) in one compiled call
(numba): the steps of :mod:`skfilter.kernels.reversion` (thesis Alg. 10, eq. 3.58; eqs. 3.14,
3.43–3.45) with the factored structure's pieces (:class:`~skfilter.posteriors.FactoredCovariance`,
``Σ = blockdiag(B_bᵀ B_b + p_b I)``, ``p_b`` the pending process noise of block ``b``):

* the predicted belief (:meth:`~skfilter.posteriors.FactoredCovariance.transition`):
  ``μ⁻ = g_b μ``, ``B_b⁻ = g_b B_b``, ``p_b⁻ = g_b² p_b + q_b``;
* the OU map with carry-over ``g`` (the same transition, ``Q = (1 − g²) v₀`` averaged within each
  block, as the engine's ``block_noise``): ``μ̄ = g μ⁻ + (1 − g) μ₀``, ``B̄_b = g B_b⁻``,
  ``p̄_b = g² p_b⁻ + (1 − g²) v̄₀_b`` (``v̄₀_b`` the block's mean reference variance);
* a candidate's predictive form, without forming its factors: with ``A_b = J_b B_b⁻ᵀ`` (``J`` at
  the candidate's mean), ``J Σ̄ Jᵀ = Σ_b g² A_b A_bᵀ + p̄_b J_b J_bᵀ`` (:func:`shrunk_quad_into`;
  ``'ou'``: the predicted belief, ``g = 1``, and the prior; ``'cpp-ou'``: every ``υ`` of the grid,
  ``υ = 0`` without ``A_b``);
* the update from the start: :func:`~skfilter.kernels.factored.factored_rows` without dynamics, with
  the base's robust weighting.

The pool is :func:`~skfilter.kernels.runlength.factored_runlength_rows`'s (``(S, 2, ·)`` per slot,
the belief in the first half), two slots: the hypothesis' and the other, into whose first half the
predicted belief (under dynamics) and then the start are written — a shrink in place, elementwise —
and whose second half the step writes, moved back after the row; a row handed back leaves the kept
belief as it was.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .factored import block_view, factored_rows, gather_blocks
from .lofi import DONE, REDO_STEP
from .mlp import mlp_buffers, mlp_forward_jacobian
from .observations import outputs_within
from .reversion import (OU, finish_reversion_row, ou_map_coefficients, record_reversion_row, reversion_choice,
                        score_candidates, shrunk_mean_into)
from .runlength import factored_copy_into, factored_settle, load_row


@njit(cache=True, nogil=True)
def shrunk_quad_into(Hb_flat, C, starts, factors, fstarts, ranks, pend, v, keep, ref_block_var, A, out):
    """``out = J Σ̄ Jᵀ`` (``(C, C)``) of one row's Jacobian gathered by blocks (``Hb_flat``,
    :func:`~skfilter.kernels.factored.gather_blocks` with ``m = C``) under the factored belief
    ``(factors, pend)`` shrunk by the OU map with carry-over ``v`` (``keep = 1 − v²``; ``v = 1``,
    ``keep = 0``: the belief itself): ``Σ_b v² A_b A_bᵀ + (v² p_b + keep v̄₀_b) J_b J_bᵀ``,
    ``A_b = J_b B_bᵀ`` (into the work array ``A (C, ≥ max r_b)``; not formed when ``v = 0``)."""
    for c in range(C):
        for c2 in range(C):
            out[c, c2] = 0.0
    v2 = v * v
    for b in range(ranks.shape[0]):
        s, e = starts[b], starts[b + 1]
        D = e - s
        r = ranks[b]
        J = block_view(Hb_flat, C * s, C, D)
        qb = pend[b] * v2 + keep * ref_block_var[b] if keep != 0.0 else pend[b] * v2
        if v2 != 0.0:
            B = block_view(factors, fstarts[b], r, D)
            for c in range(C):
                for u in range(r):
                    t = 0.0
                    for j in range(D):
                        t += J[c, j] * B[u, j]
                    A[c, u] = t
            for c in range(C):
                for c2 in range(c + 1):
                    t = 0.0
                    for u in range(r):
                        t += A[c, u] * A[c2, u]
                    out[c, c2] += v2 * t
        if qb != 0.0:
            for c in range(C):
                for c2 in range(c + 1):
                    t = 0.0
                    for j in range(D):
                        t += J[c, j] * J[c2, j]
                    out[c, c2] += qb * t
    for c in range(C):
        for c2 in range(c):
            out[c2, c] = out[c, c2]


@njit(cache=True, nogil=True)
def factored_reversion_rows(X, Y, w, has_weights, shapes, offsets, codes, pool_means, pool_factors, pool_pendings,
                            pool_noises, pool_scales, prior_mean, prior_factors, prior_pending, positions, starts,
                            fstarts, ranks, kinds, eps, ref_mean, ref_block_var, slots, log_weights, run_lengths,
                            counts, log_h, log_s, reset, threshold, grid, likelihood, noise_params, adaptive, max_abs,
                            g_base, q_blocks, limit, tiny, record, rec_f, rec_quad, rec_noise, rec_weights, evidence,
                            weight_kind, weight_c, weighted_evidence):
    """:func:`~skfilter.kernels.reversion.lofi_reversion_rows` over the factored covariance (module
    docstring; block layout as :func:`~skfilter.kernels.factored.factored_rows`): the pool
    ``pool_means (S, 2, P)``, ``pool_factors (S, 2, F)``, ``pool_pendings (S, 2, n_blocks)``,
    ``S ≥ 2``; the prior ``prior_mean``, ``prior_factors``, ``prior_pending``; the reference mean
    ``ref_mean (P,)`` and its variance averaged per block ``ref_block_var (n_blocks,)``; the base's
    dynamics ``g_base`` and ``q_blocks (n_blocks,)``; rows already as the model's first layer takes
    them. Returns ``(rows_done, status)``."""
    n, D_in = X.shape
    C = Y.shape[1]
    P = pool_means.shape[2]
    F = pool_factors.shape[2]
    n_blocks = pool_pendings.shape[2]
    dt = pool_means.dtype
    acts, pre, delta, scratch = mlp_buffers(shapes, D_in, pool_means[0, 0])
    x1 = np.empty((1, D_in), dtype=X.dtype)
    y1 = np.empty((1, C), dtype=Y.dtype)
    w1 = np.ones(1, dtype=w.dtype)
    w2 = np.empty(1, dtype=dt)
    n_cand = 2 if reset == OU else grid.shape[0]
    cand_f = np.empty((n_cand, 1, C), dtype=dt)
    cand_quad = np.empty((n_cand, 1, C, C), dtype=dt)
    lps = np.empty(n_cand, dtype=np.float64)
    H = np.empty((C, P), dtype=dt)
    Hb = np.empty(C * P, dtype=dt)
    A = np.empty((C, max(1, int(ranks.max()))), dtype=dt)
    mean_u = np.empty(P, dtype=dt)
    no_noise = np.zeros_like(q_blocks)
    dummy_f = np.empty((1, C), dtype=dt)
    dummy_q = np.empty((1, C, C), dtype=dt)
    dummy_r = np.empty((1, C), dtype=dt)
    dynamic = g_base != 1.0
    for b in range(n_blocks):
        if q_blocks[b] != 0.0:
            dynamic = True
    g2b = g_base * g_base
    for row in range(n):
        load_row(X, Y, w, has_weights, row, x1, y1, w1)
        src = slots[0]
        dest = 1 if src == 0 else 0
        noise = pool_noises[src, :C]
        d_mean, d_factors, d_pend = pool_means[dest, 0], pool_factors[dest, 0], pool_pendings[dest, 0]
        # 1. the predicted belief: under dynamics into the first half of slot dest, else the belief itself
        if dynamic:
            for j in range(P):
                d_mean[j] = pool_means[src, 0, j] * g_base
            for j in range(F):
                d_factors[j] = pool_factors[src, 0, j] * g_base
            for b in range(n_blocks):
                d_pend[b] = pool_pendings[src, 0, b] * g2b + q_blocks[b]
            b_mean, b_factors, b_pend = d_mean, d_factors, d_pend
        else:
            b_mean, b_factors, b_pend = pool_means[src, 0], pool_factors[src, 0], pool_pendings[src, 0]
        # 2. the predictives
        mlp_forward_jacobian(b_mean, x1[0], shapes, offsets, codes, acts, pre, delta, scratch, cand_f[0, 0], H)
        if max_abs > 0.0 and not outputs_within(cand_f[0], max_abs):
            return row, REDO_STEP
        gather_blocks(H, C, positions, starts, Hb)
        shrunk_quad_into(Hb, C, starts, b_factors, fstarts, ranks, b_pend, 1.0, 0.0, ref_block_var, A,
                         cand_quad[0, 0])
        if reset == OU:
            mlp_forward_jacobian(prior_mean, x1[0], shapes, offsets, codes, acts, pre, delta, scratch, cand_f[1, 0], H)
            gather_blocks(H, C, positions, starts, Hb)
            shrunk_quad_into(Hb, C, starts, prior_factors, fstarts, ranks, prior_pending, 1.0, 0.0, ref_block_var, A,
                             cand_quad[1, 0])
        else:
            for u in range(1, n_cand):
                v, rho, keep = ou_map_coefficients(grid[u])
                shrunk_mean_into(b_mean, ref_mean, v, rho, mean_u)
                mlp_forward_jacobian(mean_u, x1[0], shapes, offsets, codes, acts, pre, delta, scratch, cand_f[u, 0],
                                     H)
                gather_blocks(H, C, positions, starts, Hb)
                shrunk_quad_into(Hb, C, starts, b_factors, fstarts, ranks, b_pend, v, keep, ref_block_var, A,
                                 cand_quad[u, 0])
        # 3–4. the scores, the choice
        if not score_candidates(likelihood, cand_f, cand_quad, n_cand, noise, y1, w1, has_weights, weight_kind,
                                weight_c, weighted_evidence, tiny, w2, lps, noise_params[0]):
            return row, REDO_STEP
        g, hard, step_evidence, change = reversion_choice(reset, lps, log_h, log_s, threshold, grid)
        if record:
            record_reversion_row(row, cand_f[0, 0], cand_quad[0, 0], noise, rec_f, rec_quad, rec_noise, rec_weights)
        # 5. the start of the step into the first half of slot dest (a shrink in place, elementwise)
        if hard:
            factored_copy_into(prior_mean, prior_factors, prior_pending, d_mean, d_factors, d_pend)
        elif g == 1.0:
            if not dynamic:
                factored_copy_into(b_mean, b_factors, b_pend, d_mean, d_factors, d_pend)
        else:
            v, rho, keep = ou_map_coefficients(g)
            shrunk_mean_into(b_mean, ref_mean, v, rho, d_mean)
            for j in range(F):
                d_factors[j] = b_factors[j] * v
            for b in range(n_blocks):
                d_pend[b] = b_pend[b] * (v * v) + keep * ref_block_var[b]
        # 6. the row learned from the start (no dynamics), into the second half
        pool_noises[dest, :] = pool_noises[src, :]
        done, status, cur = factored_rows(x1, y1, w1, has_weights, 1, shapes, offsets, codes, pool_means[dest],
                                          pool_factors[dest], pool_pendings[dest], 0, positions, starts, fstarts,
                                          ranks, kinds, likelihood, pool_noises[dest], noise_params, adaptive,
                                          max_abs, weight_kind, weight_c, 1.0, no_noise, False, dummy_f, dummy_q,
                                          dummy_r, limit, eps, tiny, pool_scales[dest])
        if status != DONE:
            return row, REDO_STEP
        factored_settle(pool_means, pool_factors, pool_pendings, dest)
        finish_reversion_row(slots, dest, log_weights, run_lengths, hard, evidence, step_evidence, change)
    return n, DONE
