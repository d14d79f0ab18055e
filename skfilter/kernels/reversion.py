"""One hypothesis shrunk towards the reference — RL[1]-OUPR* and CPP-OU over LoFi — in one compiled
call (numba): ``reset='ou'`` and ``reset='cpp-ou'`` of :func:`skfilter.runlength.runlength_step`
(thesis Alg. 10, eq. 3.58; eqs. 3.14, 3.43–3.45; spec/bocd.md), equal to the engine's step to rounding.

Per row, from the hypothesis' belief ``N(μ, Σ)``, ``Σ = (Υ + WWᵀ)⁻¹`` (a static base filter: the
predicted belief is the belief), and the reference ``N(μ₀, diag(v₀))``:

1. the predictive of the row under the belief: ``f``, ``J`` at ``μ`` (:mod:`skfilter.kernels.mlp`)
   and ``J Σ Jᵀ`` by Woodbury (B.1, eq. 61: ``J Υ⁻¹ Jᵀ − Aᵀ A``, ``A = Lc⁻¹ Wᵀ Υ⁻¹ Jᵀ``,
   ``Lc Lcᵀ = I + Wᵀ Υ⁻¹ W``);
2. ``'ou'``: the same under the prior belief; ``ν = σ(log p₁ − log p₀ + log((1 − H)/H))``; if
   ``ν > threshold`` the start of the step is the belief shrunk by the OU map with ``g = ν``
   (below), else the prior (a hard reset, run length 0). ``'cpp-ou'``: for each ``υ`` of
   :data:`~skfilter.runlength.CPP_GRID` the predictive under the shrunk belief ``N(μ̄, Σ̄)``,
   ``μ̄ = υ μ + (1 − υ) μ₀``, ``Σ̄ = υ² Σ + (1 − υ²) diag(v₀)`` — ``f`` and ``J`` at ``μ̄`` and
   ``J Σ̄ Jᵀ = υ² J Σ Jᵀ + (1 − υ²) J diag(v₀) Jᵀ`` (one factorisation of the belief per row) —
   and the start the shrink with the ``υ`` of the largest predictive density (ties: the largest ``υ``);
3. the OU map in DLR form (:meth:`~skfilter.posteriors.LowRankPrecision.transition` with ``g``,
   ``Q = (1 − g²) v₀``, ``shift = (1 − g) μ₀``): ``Υ⁻ = (g² Υ⁻¹ + Q)⁻¹``,
   ``W⁻ = g Υ⁻ Υ⁻¹ W chol(C)``, ``C⁻¹ = I + Wᵀ Υ⁻¹ Υ⁻ Q W``, ``μ⁻ = g μ + shift``, and the
   prior-predictive precision and mean alike;
4. the row learned from the start by the LoFi step (:func:`~skfilter.kernels.lofi.lofi_rows`).

The hypothesis lives in the slots of :class:`skfilter.stepping.RunLengthPlan`'s pool (``K = 1``):
the start of a shrink is written into a free slot, the step into another, so that a row that cannot
be finished here (a stiff or failing system, outputs beyond the likelihood's bound, a non-finite
density) leaves the kept belief as it was, and the engine redoes that row.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .linalg import cholesky_into, gram_into, solve_lower, solve_lower_rows
from .lofi import DONE, REDO_STEP, lofi_rows
from .mlp import map_row, mlp_buffers, mlp_forward_jacobian
from .observations import outputs_within
from .runlength import log_predictive_row

#: reset codes of :func:`lofi_reversion_rows`
OU, CPP_OU = 0, 1


@njit(cache=True, nogil=True)
def _woodbury_factor(diag, W, inv, scaled, M, Lc, limit):
    """``Υ⁻¹`` into ``inv``, ``(Υ⁻¹ W)ᵀ`` into ``scaled`` and the Cholesky factor of
    ``I + Wᵀ Υ⁻¹ W`` into ``Lc``; False when that system is stiff (trace beyond ``limit``) or not
    positive definite."""
    L, P = W.shape
    for j in range(P):
        inv[j] = 1.0 / diag[j]
    if L == 0:
        return True
    for a in range(L):
        for j in range(P):
            scaled[a, j] = W[a, j] * inv[j]
    gram_into(W, scaled, M)
    trace = 0.0
    for a in range(L):
        trace += M[a, a]
        M[a, a] += 1.0
    return trace <= limit and cholesky_into(M, Lc)


@njit(cache=True, nogil=True)
def _woodbury_quad(J, inv, scaled, Lc, A, out):
    """``J Σ Jᵀ = J Υ⁻¹ Jᵀ − Aᵀ A`` (``(C, C)``) with ``A = Lc⁻¹ (Υ⁻¹W)ᵀ Jᵀ`` (:func:`_woodbury_factor`)."""
    C, P = J.shape
    L = scaled.shape[0]
    for c in range(C):
        for c2 in range(c + 1):
            s = 0.0
            for j in range(P):
                s += J[c, j] * J[c2, j] * inv[j]
            out[c, c2] = s
    if L > 0:
        gram_into(J, scaled, A)  # J Υ⁻¹ W, (C, L)
        for c in range(C):
            solve_lower(Lc, A[c, :L])
        for c in range(C):
            for c2 in range(c + 1):
                s = 0.0
                for a in range(L):
                    s += A[c, a] * A[c2, a]
                out[c, c2] -= s
    for c in range(C):
        for c2 in range(c):
            out[c2, c] = out[c, c2]


@njit(cache=True, nogil=True)
def _shrink(mean, diag, W, eta, m0, g, ref_mean, ref_var, mean_d, diag_d, W_d, eta_d, m0_d, work_LL, Lc):
    """The OU map of the module docstring (step 3) from ``(μ, Υ, Wᵀ, η, Γμ₀)`` into the ``_d``
    arrays (``η_d`` of length ``P`` for a reference variance per parameter, else 1; ``η`` of length
    1 or that of ``η_d``). False if ``C⁻¹`` is not positive definite."""
    L, P = W.shape
    g2 = g * g
    rho = 1.0 - g
    keep = 1.0 - g2
    for j in range(P):
        Q = keep * ref_var[j]
        ups = 1.0 / (g2 / diag[j] + Q)
        ratio = ups / diag[j]
        diag_d[j] = ups
        mean_d[j] = mean[j] * g + rho * ref_mean[j]
        m0_d[j] = m0[j] * g + rho * ref_mean[j]
        for a in range(L):
            W_d[a, j] = W[a, j] * ratio  # D Wᵀ, D = Υ⁻ Υ⁻¹
    for j in range(eta_d.shape[0]):  # η of length 1 (a scalar reference variance) or P
        e = eta[j] if eta.shape[0] > 1 else eta[0]
        eta_d[j] = 1.0 / (g2 / e + keep * ref_var[j])
    if L == 0:
        return True
    for a in range(L):  # C⁻¹ = I + Wᵀ Q D W
        for b in range(a + 1):
            s = 0.0
            for j in range(P):
                s += W[a, j] * keep * ref_var[j] * W_d[b, j]
            work_LL[a, b] = s
            work_LL[b, a] = s
        work_LL[a, a] += 1.0
    if not cholesky_into(work_LL, Lc):
        return False
    solve_lower_rows(Lc, W_d, g)  # W⁻ᵀ = g Lc⁻¹ D Wᵀ
    return True


@njit(cache=True, nogil=True)
def lofi_reversion_rows(X, Y, w, has_weights, shapes, offsets, codes, in_scale, in_shift, in_bound,
                        pool_means, pool_diags, pool_factors, pool_etas, pool_m0s, pool_noises, pool_scales,
                        prior_mean, prior_diag, prior_W, prior_eta, prior_m0, ref_mean, ref_var,
                        slots, log_weights, run_lengths, counts, log_h, log_s, reset, threshold, grid,
                        likelihood, noise_params, adaptive, max_abs, limit, tiny,
                        record, rec_f, rec_quad, rec_noise, rec_weights, evidence):
    """Filter the rows of ``X (n, D)``, ``Y (n, C)`` one per step by ``reset`` :data:`OU` (RL[1]-OUPR*,
    ``threshold`` its ``ε``) or :data:`CPP_OU` (the shrink of ``grid``) over LoFi (module docstring),
    in place on the pool of :func:`~skfilter.kernels.runlength.lofi_runlength_rows` (``S ≥ 3``
    slots; the hypothesis in ``slots[0]``, ``counts[0] = 1``), the prior belief ``prior_*`` and the
    reference ``ref_mean``, ``ref_var`` (``(P,)``; the shrink's target). ``evidence``: ``[Σ log p(y_t |
    D), changepoint probability of the last row]`` (``1 − ν`` or ``1 − υ``). With ``record`` each
    row's predictive under the belief, weight 1, into entry 0 of ``rec_*[row]`` (entry 1: weight 0).

    Returns ``(rows_done, status)``: :data:`~skfilter.kernels.lofi.DONE`, or
    :data:`~skfilter.kernels.lofi.REDO_STEP` when row ``rows_done`` must be done by the torch
    engine (the kept hypothesis untouched)."""
    n, D = X.shape
    C = Y.shape[1]
    P = pool_means.shape[2]
    L = pool_factors.shape[2]
    dt = pool_means.dtype
    acts, pre, delta, scratch = mlp_buffers(shapes, D, pool_means[0, 0])
    x1 = np.empty((1, D), dtype=X.dtype)
    y1 = np.empty((1, C), dtype=Y.dtype)
    w1 = np.ones(1, dtype=w.dtype)
    xm = np.empty(D, dtype=dt)
    F1 = np.empty((1, C), dtype=dt)
    f1 = F1[0]
    fu = np.empty(C, dtype=dt)
    J = np.empty((C, P), dtype=dt)
    Ju = np.empty((C, P), dtype=dt)
    quad1 = np.empty((C, C), dtype=dt)
    quadu = np.empty((C, C), dtype=dt)
    inv = np.empty(P, dtype=dt)
    scaled = np.empty((L, P), dtype=dt)
    M = np.empty((max(L, 1), max(L, 1)), dtype=dt)
    Lc = np.empty((max(L, 1), max(L, 1)), dtype=dt)
    A = np.empty((C, max(L, 1)), dtype=dt)
    mean_u = np.empty(P, dtype=dt)
    # the prior's factorisation, once per call
    inv0 = np.empty(P, dtype=dt)
    scaled0 = np.empty((L, P), dtype=dt)
    M0 = np.empty((max(L, 1), max(L, 1)), dtype=dt)
    Lc0 = np.empty((max(L, 1), max(L, 1)), dtype=dt)
    if reset == OU and not _woodbury_factor(prior_diag, prior_W, inv0, scaled0, M0, Lc0, limit):
        return 0, REDO_STEP
    dummy_f = np.empty((1, C), dtype=dt)
    dummy_q = np.empty((1, C, C), dtype=dt)
    dummy_r = np.empty((1, C), dtype=dt)
    n_grid = grid.shape[0]
    lps = np.empty(n_grid, dtype=np.float64)
    for row in range(n):
        for d in range(D):
            x1[0, d] = X[row, d]
        for c in range(C):
            y1[0, c] = Y[row, c]
        if has_weights:
            w1[0] = w[row]
        src = slots[0]
        dest = 0 if src != 0 else 1
        tmp = 3 - src - dest  # the third slot: the start of a shrink
        noise = pool_noises[src, :C]
        map_row(x1[0], in_scale, in_shift, in_bound, xm)
        mean = pool_means[src, 0]
        mlp_forward_jacobian(mean, xm, shapes, offsets, codes, acts, pre, delta, scratch, f1, J)
        if max_abs > 0.0 and not outputs_within(F1, max_abs):  # (0: no bound)
            return row, REDO_STEP
        if not _woodbury_factor(pool_diags[src, 0], pool_factors[src, 0], inv, scaled, M, Lc, limit):
            return row, REDO_STEP
        _woodbury_quad(J, inv, scaled, Lc, A, quad1)
        g = 1.0
        hard = False
        if reset == OU:
            mlp_forward_jacobian(prior_mean, xm, shapes, offsets, codes, acts, pre, delta, scratch, fu, Ju)
            _woodbury_quad(Ju, inv0, scaled0, Lc0, A, quadu)
            lp1 = log_predictive_row(likelihood, f1, quad1, noise, y1[0], tiny, 0.0, noise_params[0])
            lp0 = log_predictive_row(likelihood, fu, quadu, noise, y1[0], tiny, 0.0, noise_params[0])
            if has_weights:
                lp1 *= w1[0]
                lp0 *= w1[0]
            if not (np.isfinite(lp1) and np.isfinite(lp0)):
                return row, REDO_STEP
            log_cont, log_cp = lp1 + log_s, lp0 + log_h
            top = max(log_cont, log_cp)
            step_evidence = top + math.log(math.exp(log_cont - top) + math.exp(log_cp - top))
            nu = math.exp(log_cont - step_evidence)
            change = 1.0 - nu
            if nu > threshold:
                g = nu
            else:
                hard = True
        else:
            best = 0
            for u in range(n_grid):
                v = grid[u]
                if v == 1.0:
                    lp = log_predictive_row(likelihood, f1, quad1, noise, y1[0], tiny, 0.0, noise_params[0])
                else:
                    for j in range(P):
                        mean_u[j] = mean[j] * v + (1.0 - v) * ref_mean[j]
                    mlp_forward_jacobian(mean_u, xm, shapes, offsets, codes, acts, pre, delta, scratch, fu, Ju)
                    _woodbury_quad(Ju, inv, scaled, Lc, A, quadu)
                    v2 = v * v
                    for c in range(C):
                        for c2 in range(C):
                            s = 0.0
                            for j in range(P):
                                s += Ju[c, j] * Ju[c2, j] * ref_var[j]
                            quadu[c, c2] = v2 * quadu[c, c2] + (1.0 - v2) * s
                    lp = log_predictive_row(likelihood, fu, quadu, noise, y1[0], tiny, 0.0, noise_params[0])
                if has_weights:
                    lp *= w1[0]
                if not np.isfinite(lp):
                    return row, REDO_STEP
                lps[u] = lp
                if lp > lps[best]:
                    best = u
            g = grid[best]
            step_evidence = lps[best]
            change = 1.0 - g
        # the start of the step: the prior, the belief itself, or its shrink (into slot tmp)
        pool_noises[dest, :] = pool_noises[src, :]
        if hard:
            s_mean, s_diag, s_W = prior_mean, prior_diag, prior_W
            for j in range(pool_etas.shape[1]):
                pool_etas[dest, j] = prior_eta[j] if prior_eta.shape[0] > 1 else prior_eta[0]
            for j in range(P):
                pool_m0s[dest, j] = prior_m0[j]
        elif g == 1.0:
            s_mean, s_diag, s_W = pool_means[src, 0], pool_diags[src, 0], pool_factors[src, 0]
            pool_etas[dest, :] = pool_etas[src, :]
            pool_m0s[dest, :] = pool_m0s[src, :]
        else:
            if not _shrink(pool_means[src, 0], pool_diags[src, 0], pool_factors[src, 0], pool_etas[src], pool_m0s[src],
                           g, ref_mean, ref_var, pool_means[tmp, 0], pool_diags[tmp, 0], pool_factors[tmp, 0],
                           pool_etas[dest], pool_m0s[dest], M, Lc):
                return row, REDO_STEP
            s_mean, s_diag, s_W = pool_means[tmp, 0], pool_diags[tmp, 0], pool_factors[tmp, 0]
        if record:
            for k in range(rec_f.shape[1]):
                for c in range(C):
                    rec_f[row, k, c] = f1[c]
                    rec_noise[row, k, c] = noise[c]
                    for c2 in range(C):
                        rec_quad[row, k, c, c2] = quad1[c, c2]
                rec_weights[row, k] = 1.0 if k == 0 else 0.0
        done, status, cur = lofi_rows(x1, y1, w1, has_weights, 1, shapes, offsets, codes, in_scale, in_shift,
                                      in_bound, s_mean, s_diag, s_W, pool_means[dest], pool_diags[dest],
                                      pool_factors[dest], -1, likelihood, pool_noises[dest], noise_params, adaptive,
                                      max_abs, 0, 0.0, 1.0, 0.0, pool_etas[dest], pool_m0s[dest], False, dummy_f,
                                      dummy_q, dummy_r, limit, tiny, pool_scales[dest])
        if status != DONE:
            return row, REDO_STEP
        slots[0] = dest
        log_weights[0] = 0.0
        run_lengths[0] = 0 if hard else run_lengths[0] + 1
        evidence[0] += step_evidence
        evidence[1] = change
    return n, DONE
