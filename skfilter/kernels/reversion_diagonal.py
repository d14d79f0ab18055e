"""RL[1]-OUPR* and CPP-OU over the VD/FD-EKF (a diagonal covariance) in one compiled call (numba):
the steps of :mod:`skfilter.kernels.reversion` (thesis Alg. 10, eq. 3.58; eqs. 3.14, 3.43–3.45)
with the diagonal structure's pieces:

* the predicted belief ``μ⁻ = g_b μ``, ``v⁻ = g_b² v + q_b``
  (:meth:`~skfilter.posteriors.DiagonalCovariance.transition`);
* the predictive quadratic form ``J diag(v) Jᵀ``; for the ``υ`` of CPP-OU's grid
  ``J diag(υ² v⁻ + (1 − υ²) v₀) Jᵀ`` with ``J`` at ``μ̄_υ``;
* the OU map ``μ̄ = g μ⁻ + (1 − g) μ₀``, ``v̄ = g² v⁻ + (1 − g²) v₀``, elementwise;
* the update from the start: :func:`~skfilter.kernels.diagonal.diagonal_rows` without dynamics,
  with the base's robust weighting.

The pool is :func:`~skfilter.kernels.runlength.diagonal_runlength_rows`'s (``(S, 2, P)`` per slot,
the belief in the first half): the start is written into the first half of a free slot and the step
into its second half, so that a row handed back leaves the kept belief as it was.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .diagonal import diagonal_rows
from .lofi import DONE, REDO_STEP
from .mlp import mlp_buffers, mlp_forward_jacobian
from .observations import outputs_within
from .reversion import (OU, finish_reversion_row, ou_map_coefficients, record_reversion_row, reversion_choice,
                        score_candidates, shrunk_mean_into)
from .runlength import load_row


@njit(cache=True, nogil=True)
def diagonal_quad_into(J, var, out):
    """``out = J diag(var) Jᵀ`` (``(C, C)``, symmetric)."""
    C, P = J.shape
    for c in range(C):
        for c2 in range(c + 1):
            s = 0.0
            for j in range(P):
                s += J[c, j] * var[j] * J[c2, j]
            out[c, c2] = s
            out[c2, c] = s


@njit(cache=True, nogil=True)
def diagonal_reversion_rows(X, Y, w, has_weights, shapes, offsets, codes, pool_means, pool_vars, pool_noises,
                            pool_scales, prior_mean, prior_var, fd, exact_mean, ref_mean, ref_var, slots, log_weights,
                            run_lengths, counts, log_h, log_s, reset, threshold, grid, likelihood, noise_params,
                            adaptive, max_abs, g_base, q_base, limit, tiny, record, rec_f, rec_quad, rec_noise,
                            rec_weights, evidence, weight_kind, weight_c, weighted_evidence):
    """:func:`~skfilter.kernels.reversion.lofi_reversion_rows` over the VD/FD-EKF (module
    docstring; ``fd``, ``exact_mean`` as :func:`~skfilter.kernels.diagonal.diagonal_rows`): the pool
    ``pool_means``, ``pool_vars (S, 2, P)``, ``S ≥ 2``; the prior ``prior_mean``, ``prior_var``; rows
    already as the model's first layer takes them. Returns ``(rows_done, status)``."""
    n, D = X.shape
    C = Y.shape[1]
    P = pool_means.shape[2]
    dt = pool_means.dtype
    acts, pre, delta, scratch = mlp_buffers(shapes, D, pool_means[0, 0])
    x1 = np.empty((1, D), dtype=X.dtype)
    y1 = np.empty((1, C), dtype=Y.dtype)
    w1 = np.ones(1, dtype=w.dtype)
    w2 = np.empty(1, dtype=dt)
    n_cand = 2 if reset == OU else grid.shape[0]
    cand_f = np.empty((n_cand, 1, C), dtype=dt)
    cand_quad = np.empty((n_cand, 1, C, C), dtype=dt)
    lps = np.empty(n_cand, dtype=np.float64)
    J = np.empty((C, P), dtype=dt)
    mean_p = np.empty(P, dtype=dt)  # the predicted belief
    var_p = np.empty(P, dtype=dt)
    mean_u = np.empty(P, dtype=dt)
    var_u = np.empty(P, dtype=dt)
    dummy_f = np.empty((1, C), dtype=dt)
    dummy_q = np.empty((1, C, C), dtype=dt)
    dummy_r = np.empty((1, C), dtype=dt)
    g2b = g_base * g_base
    for row in range(n):
        load_row(X, Y, w, has_weights, row, x1, y1, w1)
        src = slots[0]
        dest = 1 if src == 0 else 0
        noise = pool_noises[src, :C]
        # 1. the predicted belief
        for j in range(P):
            mean_p[j] = pool_means[src, 0, j] * g_base if g_base != 1.0 else pool_means[src, 0, j]
            var_p[j] = pool_vars[src, 0, j] * g2b + q_base if g_base != 1.0 else pool_vars[src, 0, j] + q_base
        # 2. the predictives
        mlp_forward_jacobian(mean_p, x1[0], shapes, offsets, codes, acts, pre, delta, scratch, cand_f[0, 0], J)
        if max_abs > 0.0 and not outputs_within(cand_f[0], max_abs):
            return row, REDO_STEP
        diagonal_quad_into(J, var_p, cand_quad[0, 0])
        if reset == OU:
            mlp_forward_jacobian(prior_mean, x1[0], shapes, offsets, codes, acts, pre, delta, scratch, cand_f[1, 0], J)
            diagonal_quad_into(J, prior_var, cand_quad[1, 0])
        else:
            for u in range(1, n_cand):
                v, rho, keep = ou_map_coefficients(grid[u])
                shrunk_mean_into(mean_p, ref_mean, v, rho, mean_u)
                for j in range(P):
                    var_u[j] = var_p[j] * (v * v) + keep * ref_var[j]
                mlp_forward_jacobian(mean_u, x1[0], shapes, offsets, codes, acts, pre, delta, scratch, cand_f[u, 0],
                                     J)
                diagonal_quad_into(J, var_u, cand_quad[u, 0])
        # 3–4. the scores, the choice
        if not score_candidates(likelihood, cand_f, cand_quad, n_cand, noise, y1, w1, has_weights, weight_kind,
                                weight_c, weighted_evidence, tiny, w2, lps, noise_params[0]):
            return row, REDO_STEP
        g, hard, step_evidence, change = reversion_choice(reset, lps, log_h, log_s, threshold, grid)
        # 5. the start of the step into the first half of slot dest
        start_mean, start_var = pool_means[dest, 0], pool_vars[dest, 0]
        if hard:
            start_mean[:] = prior_mean
            start_var[:] = prior_var
        elif g == 1.0:
            start_mean[:] = mean_p
            start_var[:] = var_p
        else:
            v, rho, keep = ou_map_coefficients(g)
            shrunk_mean_into(mean_p, ref_mean, v, rho, start_mean)
            for j in range(P):
                start_var[j] = var_p[j] * (v * v) + keep * ref_var[j]
        if record:
            record_reversion_row(row, cand_f[0, 0], cand_quad[0, 0], noise, rec_f, rec_quad, rec_noise, rec_weights)
        # 6. the row learned from the start (no dynamics), into the second half
        pool_noises[dest, :] = pool_noises[src, :]
        done, status, cur = diagonal_rows(x1, y1, w1, has_weights, 1, shapes, offsets, codes, pool_means[dest],
                                          pool_vars[dest], 0, fd, exact_mean, likelihood, pool_noises[dest],
                                          noise_params, adaptive, max_abs, weight_kind, weight_c, 1.0, 0.0, False,
                                          dummy_f, dummy_q, dummy_r, limit, tiny, pool_scales[dest])
        if status != DONE:
            return row, REDO_STEP
        for j in range(P):
            pool_means[dest, 0, j] = pool_means[dest, 1, j]
            pool_vars[dest, 0, j] = pool_vars[dest, 1, j]
        finish_reversion_row(slots, dest, log_weights, run_lengths, hard, evidence, step_evidence, change)
    return n, DONE
