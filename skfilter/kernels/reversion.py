"""One hypothesis shrunk towards the reference — RL[1]-OUPR* and CPP-OU — in one compiled call
(numba): ``reset='ou'`` and ``reset='cpp-ou'`` of :func:`skfilter.runlength.runlength_step` (thesis
Alg. 10, eq. 3.58; eqs. 3.14, 3.43–3.45; spec/bocd.md), equal to the engine's step to rounding.

This module holds the reversion logic every base structure shares and the kernel over LoFi; the
diagonal (VD/FD-EKF), full-covariance EKF and factored-covariance (LRKF, HiLoFi, LoLoFi) kernels are
in :mod:`skfilter.kernels.reversion_diagonal`, :mod:`skfilter.kernels.reversion_full` and
:mod:`skfilter.kernels.reversion_factored`. Per row, from the hypothesis' belief ``N(μ, Σ)``, its
noise state and the reference ``N(μ₀, diag(v₀))``, the prior belief ``N(m₀, Σ₀)`` (a hard reset's):

1. the predicted belief ``N(μ⁻, Σ⁻)``: the base filter's dynamics ``μ⁻ = g_b μ``,
   ``Σ⁻ = g_b² Σ + q_b I`` (as :func:`skfilter.runlength._oupr_step`'s ``apply_dynamics`` before
   anything else; static dynamics: the belief itself);
2. the candidates' prior predictives of the row, ``f`` and ``J`` at the candidate's mean
   (:mod:`skfilter.kernels.mlp`) and ``J Σ_cand Jᵀ`` (the structure's quadratic form):
   ``'ou'`` the predicted belief and the prior; ``'cpp-ou'`` for each ``υ`` of
   :data:`~skfilter.runlength.CPP_GRID` the predicted belief shrunk by the OU map below with
   ``g = υ`` (``f``, ``J`` at ``μ̄_υ``; ``J Σ̄_υ Jᵀ = υ² J Σ⁻ Jᵀ + (1 − υ²) J diag(v₀) Jᵀ``);
3. the scores (:func:`score_candidates`): each candidate's log predictive density of the row, times
   its sample weight; under a robust weighting of the base (BOCD over WoLF) and ``weighted_evidence``,
   with ``R / W²``, ``W`` the candidate's robust weight from its own predictive;
4. the choice (:func:`reversion_choice`): ``'ou'``: ``ν = σ(ℓ₁ − ℓ₀ + log((1 − H)/H))``, the start of
   the step the predicted belief shrunk with ``g = ν`` if ``ν > ε`` (the threshold), else the prior (a
   hard reset, run length 0); the row's evidence ``log(e^{ℓ₁}(1 − H) + e^{ℓ₀} H)``, its changepoint
   probability ``1 − ν``. ``'cpp-ou'``: the shrink with the ``υ`` of the largest score (ties: the
   largest ``υ``), evidence that score, changepoint probability ``1 − υ``;
5. the OU map (:func:`ou_map_coefficients`; :meth:`skfilter.dynamics.Dynamics.transition` with
   ``reversion = 1 − g``): ``μ̄ = g μ⁻ + (1 − g) μ₀``, ``Σ̄ = g² Σ⁻ + (1 − g²) diag(v₀)`` — over
   LoFi in DLR form (:meth:`~skfilter.posteriors.LowRankPrecision.transition` with
   ``Q = (1 − g²) v₀``): ``Ῡ = (g² Υ⁻⁻¹ + Q)⁻¹``, ``W̄ = g Ῡ Υ⁻⁻¹ W⁻ chol(C)``,
   ``C⁻¹ = I + W⁻ᵀ Υ⁻⁻¹ Ῡ Q W⁻``, the prior-predictive precision and mean alike;
6. the row learned from the start by the base filter's step without dynamics, its robust weighting
   included (:func:`~skfilter.kernels.lofi.lofi_rows`, the diagonal, the full, the factored kernel);
7. the bookkeeping (:func:`finish_reversion_row`): run length ``+1`` or 0, evidence, and with
   ``record`` the predictive of the predicted belief, weight 1 (:func:`record_reversion_row`).

Over LoFi the predictive quadratic form is Woodbury's (B.1, eq. 61: ``J Υ⁻¹ Jᵀ − Aᵀ A``,
``A = Lc⁻¹ Wᵀ Υ⁻¹ Jᵀ``, ``Lc Lcᵀ = I + Wᵀ Υ⁻¹ W``), one factorisation of the predicted belief serving
every ``υ`` of the grid.

The hypothesis lives in the slots of :class:`skfilter.stepping.RunLengthPlan`'s pool (``K = 1``):
the predicted belief, the start of a shrink and the step are written into free slots, so that a row
that cannot be finished here (a stiff or failing system, outputs beyond the likelihood's bound, a
non-finite density) leaves the kept belief as it was, and the engine redoes that row.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .linalg import cholesky_into, gram_into, solve_lower, solve_lower_rows
from .lofi import DONE, REDO_STEP, lofi_predict, lofi_rows
from .mlp import map_row, mlp_buffers, mlp_forward_jacobian
from .observations import outputs_within
from .runlength import load_row, scored_log_predictive

#: reset codes of the reversion kernels
OU, CPP_OU = 0, 1


@njit(cache=True, nogil=True)
def ou_map_coefficients(g):
    """``(g, ρ, 1 − g²)`` of the OU map towards the reference with carry-over ``g``: the numbers of
    :meth:`skfilter.dynamics.Dynamics.transition` with ``reversion = ρ = 1 − g`` (``g`` taken back as
    ``1 − ρ``, as there), so that ``μ̄ = g μ + ρ μ₀`` and ``Σ̄ = g² Σ + (1 − g²) diag(v₀)`` round as
    the engine's (thesis eq. 3.13)."""
    rho = 1.0 - g
    g = 1.0 - rho
    return g, rho, 1.0 - g * g


@njit(cache=True, nogil=True)
def shrunk_mean_into(mean, ref_mean, g, rho, out):
    """``out = g μ + ρ μ₀`` (the OU map's mean, :func:`ou_map_coefficients`)."""
    for j in range(out.shape[0]):
        out[j] = mean[j] * g + rho * ref_mean[j]


@njit(cache=True, nogil=True)
def score_candidates(likelihood, cand_f, cand_quad, n_cand, noise, y1, w1, has_weights, weight_kind, weight_c,
                     weighted_evidence, tiny, w2, lps, epsilon):
    """Step 3 of the module docstring: the scores of the first ``n_cand`` candidates' predictives
    ``cand_f (·, 1, C)``, ``cand_quad (·, 1, C, C)`` into ``lps``
    (:func:`~skfilter.kernels.runlength.scored_log_predictive`, all under the hypothesis' ``noise``).
    False when one is not finite (the engine raises there)."""
    for k in range(n_cand):
        lp = scored_log_predictive(likelihood, cand_f[k], cand_quad[k], noise, y1, w1, has_weights, weight_kind,
                                   weight_c, weighted_evidence, tiny, w2, epsilon)
        if not np.isfinite(lp):
            return False
        lps[k] = lp
    return True


@njit(cache=True, nogil=True)
def reversion_choice(reset, lps, log_h, log_s, threshold, grid):
    """Step 4 of the module docstring from the scores ``lps`` (``'ou'``: ``[ℓ₁, ℓ₀]``; ``'cpp-ou'``
    one per ``υ`` of ``grid``): ``(g, hard, step_evidence, change)`` — the OU map's carry-over
    (1: none), whether the step starts from the prior, the row's log evidence and changepoint
    probability."""
    if reset == OU:
        log_cont, log_cp = lps[0] + log_s, lps[1] + log_h
        top = max(log_cont, log_cp)
        step_evidence = top + math.log(math.exp(log_cont - top) + math.exp(log_cp - top))
        nu = math.exp(log_cont - step_evidence)
        if nu > threshold:
            return nu, False, step_evidence, 1.0 - nu
        return 1.0, True, step_evidence, 1.0 - nu
    best = 0
    for u in range(1, grid.shape[0]):
        if lps[u] > lps[best]:
            best = u
    return grid[best], False, lps[best], 1.0 - grid[best]


@njit(cache=True, nogil=True)
def record_reversion_row(row, f, quad, noise, rec_f, rec_quad, rec_noise, rec_weights):
    """The row's one-step-ahead prediction, that of the predicted belief (``f (C,)``, ``quad (C, C)``,
    ``noise``), weight 1, into entry 0 of ``rec_*[row]``; the other entries weight 0."""
    C = f.shape[0]
    for k in range(rec_f.shape[1]):
        for c in range(C):
            rec_f[row, k, c] = f[c]
            rec_noise[row, k, c] = noise[c]
            for c2 in range(C):
                rec_quad[row, k, c, c2] = quad[c, c2]
        rec_weights[row, k] = 1.0 if k == 0 else 0.0


@njit(cache=True, nogil=True)
def finish_reversion_row(slots, dest, log_weights, run_lengths, hard, evidence, step_evidence, change):
    """Step 7 of the module docstring: the hypothesis now in slot ``dest``, weight 1, its run length
    0 after a hard reset else one more; the row's evidence added, its changepoint probability kept."""
    slots[0] = dest
    log_weights[0] = 0.0
    run_lengths[0] = 0 if hard else run_lengths[0] + 1
    evidence[0] += step_evidence
    evidence[1] = change


@njit(cache=True, nogil=True)
def other_slots(src, out):
    """The pool slots ``0 … len(out)`` other than ``src``, in order, into ``out``."""
    j = 0
    for s in range(out.shape[0] + 1):
        if s != src:
            out[j] = s
            j += 1


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
    """The OU map of the module docstring (step 5) over LoFi from ``(μ, Υ, Wᵀ, η, Γμ₀)`` into the
    ``_d`` arrays (``η_d`` of length ``P`` for a reference variance per parameter, else 1; ``η`` of
    length 1 or that of ``η_d``). False if ``C⁻¹`` is not positive definite."""
    L, P = W.shape
    g, rho, keep = ou_map_coefficients(g)
    g2 = g * g
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
                        likelihood, noise_params, adaptive, max_abs, g_base, q_base, limit, tiny,
                        record, rec_f, rec_quad, rec_noise, rec_weights, evidence, weight_kind, weight_c,
                        weighted_evidence):
    """Filter the rows of ``X (n, D)``, ``Y (n, C)`` one per step by ``reset`` :data:`OU` (RL[1]-OUPR*,
    ``threshold`` its ``ε``) or :data:`CPP_OU` (the shrink of ``grid``) over LoFi (module docstring),
    in place on the pool of :func:`~skfilter.kernels.runlength.lofi_runlength_rows` (``S ≥ 4``
    slots: the hypothesis in ``slots[0]``, ``counts[0] = 1``; its predicted belief under the base's
    dynamics ``g_base``, ``q_base``, the start of a shrink and the step in the others), the prior
    belief ``prior_*`` and the reference ``ref_mean``, ``ref_var`` (``(P,)``; the shrink's target).
    ``weight_kind``, ``weight_c``: the base's robust weighting (0: none), ``weighted_evidence`` the
    scores under it. ``evidence``: ``[Σ log p(y_t | D), changepoint probability of the last row]``.
    With ``record`` each row's predictive under the predicted belief, weight 1, into entry 0 of
    ``rec_*[row]`` (entry 1: weight 0).

    Returns ``(rows_done, status)``: :data:`~skfilter.kernels.lofi.DONE`, or
    :data:`~skfilter.kernels.lofi.REDO_STEP` when row ``rows_done`` must be done by the torch
    engine (the kept hypothesis untouched)."""
    n, D = X.shape
    C = Y.shape[1]
    P = pool_means.shape[2]
    L = pool_factors.shape[2]
    E = pool_etas.shape[1]
    dt = pool_means.dtype
    dynamic = g_base != 1.0 or q_base != 0.0
    acts, pre, delta, scratch = mlp_buffers(shapes, D, pool_means[0, 0])
    x1 = np.empty((1, D), dtype=X.dtype)
    y1 = np.empty((1, C), dtype=Y.dtype)
    w1 = np.ones(1, dtype=w.dtype)
    w2 = np.empty(1, dtype=dt)
    xm = np.empty(D, dtype=dt)
    n_cand = 2 if reset == OU else grid.shape[0]
    cand_f = np.empty((n_cand, 1, C), dtype=dt)
    cand_quad = np.empty((n_cand, 1, C, C), dtype=dt)
    J = np.empty((C, P), dtype=dt)
    Ju = np.empty((C, P), dtype=dt)
    inv = np.empty(P, dtype=dt)
    scaled = np.empty((L, P), dtype=dt)
    M = np.empty((max(L, 1), max(L, 1)), dtype=dt)
    Lc = np.empty((max(L, 1), max(L, 1)), dtype=dt)
    A = np.empty((C, max(L, 1)), dtype=dt)
    mean_u = np.empty(P, dtype=dt)
    eta_pred = np.empty(E, dtype=dt)
    m0_pred = np.empty(P, dtype=dt)
    free = np.empty(3, dtype=np.int64)
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
    lps = np.empty(n_cand, dtype=np.float64)
    for row in range(n):
        load_row(X, Y, w, has_weights, row, x1, y1, w1)
        src = slots[0]
        other_slots(src, free)
        dest, tmp, pred = free[0], free[1], free[2]
        noise = pool_noises[src, :C]
        # 1. the predicted belief (slot pred under dynamics, else the belief itself)
        if dynamic:
            if not lofi_predict(pool_means[src, 0], pool_diags[src, 0], pool_factors[src, 0], pool_means[pred, 0],
                                pool_diags[pred, 0], pool_factors[pred, 0], L, g_base, q_base, M, inv):
                return row, REDO_STEP
            for j in range(E):  # the prior-predictive precision and mean under the same dynamics
                eta_pred[j] = 1.0 / (g_base * g_base / pool_etas[src, j] + q_base)
            for j in range(P):
                m0_pred[j] = pool_m0s[src, j] * g_base if g_base != 1.0 else pool_m0s[src, j]
            b = pred
            b_eta, b_m0 = eta_pred, m0_pred
        else:
            b = src
            b_eta, b_m0 = pool_etas[src], pool_m0s[src]
        mean = pool_means[b, 0]
        # 2. the predictives
        map_row(x1[0], in_scale, in_shift, in_bound, xm)
        f1 = cand_f[0, 0]
        mlp_forward_jacobian(mean, xm, shapes, offsets, codes, acts, pre, delta, scratch, f1, J)
        if max_abs > 0.0 and not outputs_within(cand_f[0], max_abs):  # (0: no bound)
            return row, REDO_STEP
        if not _woodbury_factor(pool_diags[b, 0], pool_factors[b, 0], inv, scaled, M, Lc, limit):
            return row, REDO_STEP
        _woodbury_quad(J, inv, scaled, Lc, A, cand_quad[0, 0])
        if reset == OU:
            mlp_forward_jacobian(prior_mean, xm, shapes, offsets, codes, acts, pre, delta, scratch, cand_f[1, 0], Ju)
            _woodbury_quad(Ju, inv0, scaled0, Lc0, A, cand_quad[1, 0])
        else:
            for u in range(1, n_cand):
                v, rho, keep = ou_map_coefficients(grid[u])
                shrunk_mean_into(mean, ref_mean, v, rho, mean_u)
                quadu = cand_quad[u, 0]
                mlp_forward_jacobian(mean_u, xm, shapes, offsets, codes, acts, pre, delta, scratch, cand_f[u, 0], Ju)
                _woodbury_quad(Ju, inv, scaled, Lc, A, quadu)
                v2 = v * v
                for c in range(C):
                    for c2 in range(C):
                        s = 0.0
                        for j in range(P):
                            s += Ju[c, j] * Ju[c2, j] * ref_var[j]
                        quadu[c, c2] = v2 * quadu[c, c2] + keep * s
        # 3–4. the scores, the choice
        if not score_candidates(likelihood, cand_f, cand_quad, n_cand, noise, y1, w1, has_weights, weight_kind,
                                weight_c, weighted_evidence, tiny, w2, lps, noise_params[0]):
            return row, REDO_STEP
        g, hard, step_evidence, change = reversion_choice(reset, lps, log_h, log_s, threshold, grid)
        # 5. the start of the step: the prior, the predicted belief, or its shrink (into slot tmp)
        pool_noises[dest, :] = pool_noises[src, :]
        if hard:
            s_mean, s_diag, s_W = prior_mean, prior_diag, prior_W
            for j in range(E):
                pool_etas[dest, j] = prior_eta[j] if prior_eta.shape[0] > 1 else prior_eta[0]
            for j in range(P):
                pool_m0s[dest, j] = prior_m0[j]
        elif g == 1.0:
            s_mean, s_diag, s_W = pool_means[b, 0], pool_diags[b, 0], pool_factors[b, 0]
            pool_etas[dest, :] = b_eta
            pool_m0s[dest, :] = b_m0
        else:
            if not _shrink(pool_means[b, 0], pool_diags[b, 0], pool_factors[b, 0], b_eta, b_m0, g, ref_mean, ref_var,
                           pool_means[tmp, 0], pool_diags[tmp, 0], pool_factors[tmp, 0], pool_etas[dest],
                           pool_m0s[dest], M, Lc):
                return row, REDO_STEP
            s_mean, s_diag, s_W = pool_means[tmp, 0], pool_diags[tmp, 0], pool_factors[tmp, 0]
        if record:
            record_reversion_row(row, f1, cand_quad[0, 0], noise, rec_f, rec_quad, rec_noise, rec_weights)
        # 6. the row learned from the start (no dynamics)
        done, status, cur = lofi_rows(x1, y1, w1, has_weights, 1, shapes, offsets, codes, in_scale, in_shift,
                                      in_bound, s_mean, s_diag, s_W, pool_means[dest], pool_diags[dest],
                                      pool_factors[dest], -1, likelihood, pool_noises[dest], noise_params, adaptive,
                                      max_abs, weight_kind, weight_c, 1.0, 0.0, pool_etas[dest], pool_m0s[dest], False,
                                      dummy_f, dummy_q, dummy_r, limit, tiny, pool_scales[dest])
        if status != DONE:
            return row, REDO_STEP
        finish_reversion_row(slots, dest, log_weights, run_lengths, hard, evidence, step_evidence, change)
    return n, DONE
