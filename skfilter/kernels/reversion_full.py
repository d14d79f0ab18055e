"""RL[1]-OUPR* and CPP-OU over the full-covariance EKF in one compiled call (numba): the steps of
:mod:`skfilter.kernels.reversion` (thesis Alg. 10, eq. 3.58; eqs. 3.14, 3.43–3.45) with the full
structure's pieces (:mod:`skfilter.kernels.full`'s stages):

* the predicted belief ``μ⁻ = g_b μ``, ``Σ⁻ = g_b² Σ + q_b I``, never formed: the OU map of the
  predicted belief with carry-over ``g`` is ``Σ̄ = g² g_b² Σ + g² q_b I + (1 − g²) diag(v₀)``, so a
  candidate's form is ``J Σ̄ Jᵀ = g² g_b² J Σ Jᵀ + J (g² q_b I + (1 − g²) diag(v₀)) Jᵀ`` from the raw
  ``J Σ Jᵀ`` of the belief, and the update's ``J Σ̄`` likewise from ``J Σ``
  (:func:`~skfilter.kernels.full.predicted_rows`);
* the candidates' raw forms: ``'ou'`` the continuing candidate's ``J Σ Jᵀ`` at ``μ⁻`` and the
  prior's ``J₀ Σ₀ J₀ᵀ`` (from its diagonal when it is diagonal); ``'cpp-ou'`` ``J_υ Σ J_υᵀ`` for every
  ``υ > 0`` of the grid, ``J_υ`` at ``μ̄_υ`` (``υ = 0``: ``J diag(v₀) Jᵀ``, no ``Σ``);
* the update from the start without dynamics, robust weighting included
  (:func:`~skfilter.kernels.full.full_solve`, every check before anything is written; the start's
  ``J Σ`` one pass over ``Σ``, or the first row's), then the write
  ``Σ' = g² g_b² Σ + g² q_b I + (1 − g²) diag(v₀) − V Vᵀ`` **in place** in the hypothesis' slot (a
  hard reset: ``Σ₀ − V Vᵀ`` from the prior, no read of ``Σ``) — fused with the next row's raw forms
  (:func:`~skfilter.kernels.full.full_write_quads`: the Jacobians of the next row are known once the
  new mean is, ``μ⁻`` and every ``μ̄_υ``; the forms from the lower triangle of ``Σ'``, half the
  products of ``J Σ'``).

So a row costs two passes over ``Σ`` — the write with the forms (``C`` rows per candidate, half
products), and the start's ``J Σ`` — and one at a hard reset; the first row of a call reads ``J Σ``
of every candidate in one pass instead of taking the forms from a write.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .full import full_solve, full_step_buffers, full_write, full_write_quads, full_write_read
from .linalg import rows_times_symmetric
from .lofi import DONE, REDO_STEP
from .mlp import mlp_forward_jacobian
from .observations import outputs_within
from .reversion import (OU, finish_reversion_row, ou_map_coefficients, record_reversion_row, reversion_choice,
                        score_candidates, shrunk_mean_into)
from .runlength import load_row


@njit(cache=True, nogil=True)
def _forms_of_rows(H, U, C, out):
    """``out[b] = H_b U_bᵀ`` for the blocks of ``C`` rows of ``H`` and ``U = H Σ`` (the quadratic
    forms ``H_b Σ H_bᵀ``)."""
    for b in range(out.shape[0]):
        for c in range(C):
            for c2 in range(C):
                s = 0.0
                for j in range(H.shape[1]):
                    s += H[b * C + c, j] * U[b * C + c2, j]
                out[b, c, c2] = s


@njit(cache=True, nogil=True)
def _candidate_quad_into(J, raw, g2, q, keep, ref_var, out):
    """``out = J Σ̄ Jᵀ = g2 J Σ Jᵀ + J (q I + keep diag(v₀)) Jᵀ`` from ``raw = J Σ Jᵀ`` (module docstring;
    ``g2 = 0``: ``raw`` not read)."""
    C, P = J.shape
    for c in range(C):
        for c2 in range(C):
            s = 0.0
            if keep != 0.0:
                for j in range(P):
                    s += J[c, j] * (q + keep * ref_var[j]) * J[c2, j]
            elif q != 0.0:
                for j in range(P):
                    s += J[c, j] * q * J[c2, j]
            out[c, c2] = s + (g2 * raw[c, c2] if g2 != 0.0 else 0.0)


@njit(cache=True, nogil=True)
def _linearise_blocks(mean, ref_mean, g_base, n_blocks, grid, x, shapes, offsets, codes, acts, pre, delta, scratch,
                      predicted, mean_u, cand_f, H_all):
    """The predicted mean ``μ⁻ = g_b μ`` into ``predicted``, and for the first ``n_blocks`` values
    ``υ`` of ``grid`` (``grid[0] = 1``: ``μ⁻`` itself) the outputs ``cand_f[u, 0]`` and the
    Jacobian rows ``H_all[u C:(u+1) C]`` at ``μ̄_υ = υ μ⁻ + (1 − υ) μ₀``."""
    C = cand_f.shape[2]
    for j in range(predicted.shape[0]):
        predicted[j] = mean[j] * g_base if g_base != 1.0 else mean[j]
    for u in range(n_blocks):
        if u == 0:
            point = predicted
        else:
            v, rho, keep = ou_map_coefficients(grid[u])
            shrunk_mean_into(predicted, ref_mean, v, rho, mean_u)
            point = mean_u
        mlp_forward_jacobian(point, x, shapes, offsets, codes, acts, pre, delta, scratch, cand_f[u, 0],
                             H_all[u * C:(u + 1) * C])


@njit(cache=True, nogil=True)
def full_reversion_rows(X, Y, w, has_weights, shapes, offsets, codes, pool_means, pool_covs, pool_noises, pool_scales,
                        prior_mean, prior_cov, prior_diagonal, ref_mean, ref_var, slots, log_weights, run_lengths,
                        counts, log_h, log_s, reset, threshold, grid, likelihood, noise_params, adaptive, max_abs,
                        g_base, q_base, limit, tiny, record, rec_f, rec_quad, rec_noise, rec_weights, evidence,
                        weight_kind, weight_c, weighted_evidence):
    """:func:`~skfilter.kernels.reversion.lofi_reversion_rows` over the full-covariance EKF (module
    docstring): the pool ``pool_means (S, P)``, ``pool_covs (S, P, P)``, the hypothesis updated in
    place in its slot ``slots[0]``; the prior ``prior_mean``, ``prior_cov`` (``prior_diagonal``: it is
    diagonal, read from its diagonal); ``grid`` decreasing from 1 (its positive values read ``Σ``);
    rows already as the model's first layer takes them. Returns ``(rows_done, status)``."""
    n, D = X.shape
    C = Y.shape[1]
    P = pool_means.shape[1]
    dt = pool_means.dtype
    (acts, pre, delta, scratch, H, Ut, Vt, Sm, Lc, z, step_quad, robust, predicted, gain, F, ew, scale, pj,
     noise_before, ew_spare) = full_step_buffers(1, C, D, P, shapes, pool_noises[0], pool_means)
    zero = np.zeros(1, dtype=dt)[0]
    no_diag = np.empty(0, dtype=dt)
    x1 = np.empty((1, D), dtype=X.dtype)
    y1 = np.empty((1, C), dtype=Y.dtype)
    w1 = np.ones(1, dtype=w.dtype)
    w2 = np.empty(1, dtype=dt)
    n_cand = 2 if reset == OU else grid.shape[0]
    # the candidates whose U = J Σ a pass over Σ gives: the continuing one ('ou'), every υ > 0 ('cpp-ou')
    n_read = 1
    if reset != OU:
        while n_read < n_cand and grid[n_read] > 0.0:
            n_read += 1
    cand_f = np.empty((n_cand, 1, C), dtype=dt)
    cand_quad = np.empty((n_cand, 1, C, C), dtype=dt)
    lps = np.empty(n_cand, dtype=np.float64)
    H_all = np.empty((n_read * C, P), dtype=dt)
    U_all = np.empty((n_read * C, P), dtype=dt)
    raw = np.empty((n_read, C, C), dtype=dt)  # J_υ Σ J_υᵀ of the blocks
    raw0 = np.zeros((1, C, C), dtype=dt)
    T = np.empty((n_read * C, 4), dtype=dt)
    mean_u = np.empty(P, dtype=dt)
    start_mean = np.empty(P, dtype=dt)
    q_diag = np.empty(P, dtype=dt)
    state = np.empty(pool_noises.shape[1], dtype=dt)
    step_f = np.empty((1, C), dtype=dt)
    step_q = np.empty((1, C, C), dtype=dt)
    step_r = np.empty((1, C), dtype=dt)
    prior_d = np.empty(P if prior_diagonal else 0, dtype=dt)
    for j in range(prior_d.shape[0]):
        prior_d[j] = prior_cov[j, j]
    g2b = g_base * g_base
    ready = False  # the blocks' J and forms of this row from the last write's pass
    for row in range(n):
        load_row(X, Y, w, has_weights, row, x1, y1, w1)
        s = slots[0]
        cov = pool_covs[s]
        noise = pool_noises[s, :C]
        # 1–2. the blocks' J Σ Jᵀ: one pass now (keeping U = J Σ), or from the last write's pass
        have_U = not ready
        if not ready:
            _linearise_blocks(pool_means[s], ref_mean, g_base, n_read, grid, x1[0], shapes, offsets, codes, acts, pre,
                              delta, scratch, predicted, mean_u, cand_f, H_all)
            rows_times_symmetric(cov, H_all, U_all, zero)
            _forms_of_rows(H_all, U_all, C, raw)
        ready = False
        if max_abs > 0.0 and not outputs_within(cand_f[0], max_abs):
            return row, REDO_STEP
        _candidate_quad_into(H_all[:C], raw[0], g2b, q_base, 0.0, ref_var, cand_quad[0, 0])
        if reset == OU:  # the prior's: J₀ into H, J₀ Σ₀ into Ut
            mlp_forward_jacobian(prior_mean, x1[0], shapes, offsets, codes, acts, pre, delta, scratch, cand_f[1, 0], H)
            if prior_diagonal:
                for c in range(C):
                    for j in range(P):
                        Ut[c, j] = prior_d[j] * H[c, j]
            else:
                rows_times_symmetric(prior_cov, H, Ut, zero)
            _forms_of_rows(H, Ut, C, cand_quad[1])
        else:
            for u in range(1, n_cand):
                v, rho, keep = ou_map_coefficients(grid[u])
                if u < n_read:
                    _candidate_quad_into(H_all[u * C:(u + 1) * C], raw[u], v * v * g2b, v * v * q_base, keep, ref_var,
                                         cand_quad[u, 0])
                else:  # υ = 0: the reference itself, J at μ₀ into H
                    shrunk_mean_into(predicted, ref_mean, v, rho, mean_u)
                    mlp_forward_jacobian(mean_u, x1[0], shapes, offsets, codes, acts, pre, delta, scratch,
                                         cand_f[u, 0], H)
                    _candidate_quad_into(H, raw0[0], 0.0, 0.0, keep, ref_var, cand_quad[u, 0])
        # 3–4. the scores, the choice
        if not score_candidates(likelihood, cand_f, cand_quad, n_cand, noise, y1, w1, has_weights, weight_kind,
                                weight_c, weighted_evidence, tiny, w2, lps, noise_params[0]):
            return row, REDO_STEP
        g, hard, step_evidence, change = reversion_choice(reset, lps, log_h, log_s, threshold, grid)
        if record:
            record_reversion_row(row, cand_f[0, 0], cand_quad[0, 0], noise, rec_f, rec_quad, rec_noise, rec_weights)
        # 5–6. the start and the update up to its write: f, J and J Σ (read: a pass for it) of the start
        state[:] = pool_noises[s]
        g2s, qs, per_param, read = g2b, q_base, False, False
        if hard:  # from the prior: its J₀, J₀ Σ₀ are in H, Ut already
            cov_src = prior_cov
            Fs, Hs, Us = cand_f[1], H, Ut
            g2s, qs = 1.0, 0.0
            start_mean[:] = prior_mean
        else:
            cov_src = cov
            u = 0  # the block of the start ('ou' shrunk: none)
            if g != 1.0:
                v, rho, keep = ou_map_coefficients(g)
                g2s, qs, per_param = v * v * g2b, v * v * q_base, True
                for j in range(P):
                    q_diag[j] = keep * ref_var[j]
                shrunk_mean_into(predicted, ref_mean, v, rho, start_mean)
                if reset == OU:
                    u = -1
                else:
                    while grid[u] != g:
                        u += 1
            else:
                start_mean[:] = predicted
            if u < 0:  # J̄ at μ̄
                mlp_forward_jacobian(start_mean, x1[0], shapes, offsets, codes, acts, pre, delta, scratch, F[0], H)
                Fs, Hs, Us, read = F, H, Ut, True
            elif u < n_read:
                Fs, Hs = cand_f[u], H_all[u * C:(u + 1) * C]
                if have_U:
                    Us = U_all[u * C:(u + 1) * C]
                else:
                    Us, read = Ut, True
            else:  # υ = 0: Σ̄ = diag(v₀), J at μ₀ in H; U unused (g² = 0)
                Fs, Hs, Us = cand_f[u], H, Ut
                for c in range(C):
                    for j in range(P):
                        Ut[c, j] = 0.0
        qd = q_diag if per_param else no_diag
        if not full_solve(x1, y1, w1, has_weights, 0, 1, cov_src, read, Hs, Us, Fs, start_mean, likelihood, state,
                          noise_params, adaptive, max_abs, weight_kind, weight_c, g2s, qs, True, step_f, step_q,
                          step_r, limit, tiny, zero, Sm, Lc, z, Vt, gain, step_quad, robust, ew, scale, pj,
                          noise_before, ew_spare, qd):
            return row, REDO_STEP
        # 7. the write in place (the kept belief changes only now), with the next row's forms
        pool_means[s, :] = gain
        pool_noises[s, :] = state
        pool_scales[s, :] = scale
        dynamic = g2s != 1.0 or qs != 0.0 or per_param  # (a hard reset: none)
        diag_src = prior_d if hard else no_diag
        if row + 1 < n:
            _linearise_blocks(pool_means[s], ref_mean, g_base, n_read, grid, X[row + 1], shapes, offsets, codes, acts,
                              pre, delta, scratch, predicted, mean_u, cand_f, H_all)
            full_write_quads(cov_src, diag_src, cov, Vt, C, g2s, qs, dynamic, not hard, H_all, C, raw, T, zero, qd)
            ready = True
        elif hard and prior_diagonal:
            full_write_read(cov_src, diag_src, cov, Vt, C, g2s, qs, False, False, H_all, U_all, 0, zero, qd)
        else:
            full_write(cov_src, cov, Vt, C, g2s, qs, dynamic, not hard, qd)
        finish_reversion_row(slots, s, log_weights, run_lengths, hard, evidence, step_evidence, change)
    return n, DONE
