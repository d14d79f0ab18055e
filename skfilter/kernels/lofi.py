"""LoFi (diagonal variant) over many rows in one compiled call (numba).

The same step as :func:`skfilter.filtering.filter_step` with :class:`~skfilter.posteriors.LowRankPrecision`
(``variant='diagonal'``, ``svd='full'``) and the default MLP: dynamics (exact DLR predict, Alg. 2,
for a scalar decay ``g`` and process noise ``q``), linearisation (:mod:`skfilter.kernels.mlp`), the
one-step-ahead predictive ``J Σ⁻ Jᵀ`` when recorded (Woodbury, B.1), the noise estimate and
whitening (:mod:`skfilter.kernels.observations`), and the update of :func:`~skfilter.posteriors.lofi.lofi_update`
(Alg. 3 with eq. 36's mean and the SVD truncation of eqs. 37–39, the SVD from the eigenvectors of
the ``k × k`` Gram ``W̃ᵀW̃``).

Beliefs live in two buffer slots that alternate: a step reads slot ``cur`` and writes slot
``1 − cur``, so when a step cannot be finished here — a stiff system (the plain forms lose half the
digits, :func:`~skfilter.posteriors._base.stiffness_limit`), a non-finite or non-positive-definite
result, logits beyond the likelihood's bound — the kernel stops with the last good belief intact in
slot ``cur`` and the torch engine redoes that step (safe forms, or the error it raises).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .linalg import (FAST, all_finite, cholesky_into, cholesky_solve, combine_rows, gram_into, solve_lower,
                     solve_lower_rows)
from .mlp import map_row, mlp_buffers, mlp_forward_jacobian
from .observations import (PREDICTIVE_LIKELIHOOD, PREDICTIVE_WEIGHTING, observation_buffers, outputs_within,
                           record_outputs, restore, weigh_and_observe)

#: status codes returned by the kernels
DONE, REDO_STEP = 0, 1


@njit(cache=True, nogil=True)
def lofi_predict(mean_src, diag_src, W_src, mean_dst, diag_dst, tilde, L, g, q, work_LL, ratio):
    """Exact DLR predict of ``Σ ← g² Σ + q I``, ``μ ← g μ`` (Alg. 2; see
    :meth:`~skfilter.posteriors.LowRankPrecision.transition`): writes ``μ⁻``, ``Υ⁻`` and ``W⁻ᵀ``
    (into ``tilde[:L]``); ``work_LL (L, L)`` and ``ratio (P,)`` are work buffers. Returns False if the
    predict system is not positive definite."""
    P = mean_src.shape[0]
    for j in range(P):
        mean_dst[j] = mean_src[j] * g
    if q == 0.0:
        g2 = g * g
        for j in range(P):
            diag_dst[j] = diag_src[j] / g2
        for a in range(L):
            for j in range(P):
                tilde[a, j] = W_src[a, j] / g
        return True
    g2 = g * g
    for j in range(P):  # Υ⁻ = (g² Υ⁻¹ + q)⁻¹ = Υ r and D = Υ⁻ Υ⁻¹ = r, r = 1/(g² + q Υ): one division
        r = 1.0 / (g2 + q * diag_src[j])
        ratio[j] = r
        diag_dst[j] = diag_src[j] * r
    if L == 0:
        return True
    if g == 0.0:
        for a in range(L):
            for j in range(P):
                tilde[a, j] = 0.0
        return True
    for a in range(L):  # D Wᵀ with D = Υ⁻ Υ⁻¹
        for j in range(P):
            tilde[a, j] = W_src[a, j] * ratio[j]
    # C⁻¹ = I + q Wᵀ D W = Lc Lcᵀ;  W⁻ᵀ = g Lc⁻¹ D Wᵀ (chol(C) taken as Lc⁻ᵀ: only W Wᵀ matters)
    gram_into(W_src, tilde[:L], work_LL)  # Wᵀ D W (symmetric)
    for a in range(L):
        for b in range(L):
            work_LL[a, b] = q * work_LL[a, b] + (1.0 if a == b else 0.0)
    Lc = np.empty((L, L), dtype=tilde.dtype)
    if not cholesky_into(work_LL, Lc):
        return False
    solve_lower_rows(Lc, tilde[:L], g)
    return True


@njit(cache=True, nogil=True)
def lofi_rows(X, Y, w, has_weights, batch, shapes, offsets, codes, in_scale, in_shift, in_bound, mean0, diag0, W0,
              means, diags, factors, cur, likelihood, noise, noise_params, adaptive, max_abs, weight_kind, weight_c, g, q, eta, m0, record, rec_f, rec_quad,
              rec_noise, limit, tiny, scale_out):
    """Filter the rows of ``X (n, D)`` (raw: each is mapped as the model's first layer sees it by
    :func:`~skfilter.kernels.mlp.map_row` with ``in_scale``, ``in_shift``, ``in_bound``) with targets
    ``Y (n, C)``, ``batch`` rows per step, from the belief ``mean0 (P,)``, ``diag0 (P,)``, ``W0 (L, P)``
    (``Wᵀ``; only read) when ``cur`` is −1, else from slot ``cur`` of the work buffers
    ``means (2, P)``, ``diags (2, P)``, ``factors (2, L, P)``. The first step writes slot 0, each
    later one the other slot: a one-row call reads the estimator's belief where it lies and writes a
    fresh slot (no copy of the belief on the way in).

    ``weight_kind``, ``weight_c``: the robust weighting (:data:`~skfilter.kernels.observations.WEIGHTING_CODES`,
    0 for none) and its threshold. ``noise``: Gaussian ``[r_1 … r_C, Σw]`` (see :func:`~skfilter.kernels.observations.gaussian_noise_step`;
    fixed when not ``adaptive``), updated in place after each completed step; ``eta`` (``(1,)`` or ``(P,)``) and
    ``m0 (P,)`` the prior-predictive precision and mean, moved by the dynamics. With ``record`` the
    predictive of every row before its update goes to ``rec_f (n, C)``, ``rec_quad (n, C, C)`` and
    ``rec_noise (n, C)`` (``r`` before the step). ``scale_out (C,)`` receives the whitening
    ``r^{−1/2}`` of the last completed step (the Gaussian noise state's ``'scale'``).

    Returns ``(rows_done, status, cur)``: ``status`` :data:`DONE`, or :data:`REDO_STEP` when the step
    starting at ``rows_done`` must be done by the torch engine from the belief in slot ``cur`` (−1:
    the source belief).
    """
    n, D = X.shape
    dt = means.dtype
    C = Y.shape[1]
    P = means.shape[1]
    L = factors.shape[1]
    m_full = batch * C
    k_full = L + m_full
    dynamic = g != 1.0 or q != 0.0
    acts, pre, delta, scratch = mlp_buffers(shapes, D, means[0])
    x_row = np.empty(D, dtype=dt)
    tilde = np.empty((k_full, P), dtype=dt)  # W̃ᵀ = [W⁻ᵀ; Hw]
    scaled = np.empty((k_full, P), dtype=dt)  # (Υ⁻⁻¹ W̃)ᵀ
    system = np.empty((k_full, k_full), dtype=dt)
    Lc = np.empty((k_full, k_full), dtype=dt)
    coef = np.empty(k_full, dtype=dt)
    F, ew, scale, pj, noise_before = observation_buffers(batch, C, P, noise, means[0])
    inv_diag = np.empty(P, dtype=dt)
    work_LL = np.empty((max(L, 1), max(L, 1)), dtype=dt)
    work_L = np.empty(max(L, 1), dtype=dt)
    dropped = np.empty((m_full, P), dtype=dt)  # (ŨΛ̃)ᵀ rows past L
    inner_buf = np.empty((k_full, k_full), dtype=dt)
    step_quad = np.empty((batch, C, C), dtype=dt)
    robust = np.empty(batch, dtype=dt)
    step_row = np.empty((1, P), dtype=dt)
    gram_buf = np.empty((k_full, k_full), dtype=dt)
    row = 0
    while row < n:
        nb = min(batch, n - row)
        m = nb * C
        k = L + m
        if cur < 0:
            nxt = 0
            mean_src, diag_src, W_src = mean0, diag0, W0
        else:
            nxt = 1 - cur
            mean_src, diag_src, W_src = means[cur], diags[cur], factors[cur]
        mean_dst, diag_dst, W_dst = means[nxt], diags[nxt], factors[nxt]
        # 1. dynamics: the predicted belief goes to slot nxt (mean, Υ⁻) and tilde[:L] (W⁻ᵀ)
        if dynamic:
            if not lofi_predict(mean_src, diag_src, W_src, mean_dst, diag_dst, tilde, L, g, q, work_LL, inv_diag):
                return row, REDO_STEP, cur
        else:
            for j in range(P):
                mean_dst[j] = mean_src[j]
                diag_dst[j] = diag_src[j]
            for a in range(L):
                for j in range(P):
                    tilde[a, j] = W_src[a, j]
        # 2. linearise every row of the step at μ⁻
        for i in range(nb):
            map_row(X[row + i], in_scale, in_shift, in_bound, x_row)
            mlp_forward_jacobian(mean_dst, x_row, shapes, offsets, codes, acts, pre, delta, scratch, F[i],
                                 tilde[L + i * C:L + (i + 1) * C])
        if max_abs > 0.0 and not outputs_within(F[:nb], max_abs):
            return row, REDO_STEP, cur
        for j in range(P):
            inv_diag[j] = 1.0 / diag_dst[j]
        for a in range(k):
            for j in range(P):
                scaled[a, j] = tilde[a, j] * inv_diag[j]
        # 3. the prior predictive (recorded, or for a predictive weighting):
        #    J Σ⁻ Jᵀ = J Υ⁻¹ Jᵀ − A M⁻¹ Aᵀ, A = J Υ⁻¹ W, M = I + Wᵀ Υ⁻¹ W
        if record or weight_kind == PREDICTIVE_WEIGHTING or likelihood == PREDICTIVE_LIKELIHOOD:
            gram_into(tilde[:k], scaled[:k], inner_buf)
            inner = inner_buf[:k, :k]
            trace = 0.0
            for a in range(L):
                trace += inner[a, a]
            if not trace <= limit:
                return row, REDO_STEP, cur
            if L > 0 and not cholesky_into(inner[:L, :L] + np.eye(L, dtype=dt), Lc[:L, :L]):
                return row, REDO_STEP, cur
            for i in range(nb):
                for c in range(C):
                    for c2 in range(C):
                        a, b = L + i * C + c, L + i * C + c2
                        s = inner[a, b]
                        if L > 0:
                            for u in range(L):
                                work_L[u] = inner[u, b]
                            solve_lower(Lc[:L, :L], work_L)
                            t = 0.0
                            for u in range(L):
                                coef[u] = inner[u, a]
                            solve_lower(Lc[:L, :L], coef[:L])
                            for u in range(L):
                                t += coef[u] * work_L[u]
                            s -= t
                        step_quad[i, c, c2] = s
            if record:
                record_outputs(F[:nb], noise, step_quad, rec_f, rec_quad, rec_noise, row)
        # 4–5. noise estimate (Gaussian), then whitening of each row
        if not weigh_and_observe(likelihood, weight_kind, weight_c, F[:nb], Y[row:row + nb], w[row:row + nb],
                                 has_weights, noise, noise_params, adaptive, scale, tilde[L:k], ew, tiny, pj,
                                 noise_before, step_quad, robust):
            return row, REDO_STEP, cur
        for a in range(L, k):
            for j in range(P):
                scaled[a, j] = tilde[a, j] * inv_diag[j]
        # 6. update (lofi_update): G = (I + W̃ᵀΥ⁻¹W̃)⁻¹, μ = μ⁻ + (Υ⁻¹W̃) ([0; ẽ] − G (W̃ᵀΥ⁻¹W̃)[:, L:] ẽ)
        gram_into(tilde[:k], scaled[:k], inner_buf)
        inner = inner_buf[:k, :k]
        trace = 0.0
        for a in range(k):
            trace += inner[a, a]
            for b in range(k):
                system[a, b] = inner[a, b]
            system[a, a] += 1.0
        if not trace <= limit:
            restore(noise, noise_before)
            return row, REDO_STEP, cur
        ok = cholesky_into(system[:k, :k], Lc[:k, :k])
        if ok:
            for a in range(k):
                s = 0.0
                for b in range(m):
                    s += inner[a, L + b] * ew[b]
                coef[a] = s
            cholesky_solve(Lc[:k, :k], coef[:k])
            for a in range(k):
                coef[a] = -coef[a]
            for b in range(m):
                coef[L + b] += ew[b]
            combine_rows(coef[:k].reshape(1, k), scaled[:k], step_row)  # (Υ⁻¹W̃) c, one pass over the rows
            for j in range(P):
                mean_dst[j] += step_row[0, j]
            # truncation: eigenvectors of the Gram W̃ᵀW̃ by decreasing eigenvalue
            gram_into(tilde[:k], tilde[:k], gram_buf)
            _, V = np.linalg.eigh(gram_buf[:k, :k])
            Vt = np.ascontiguousarray(V[:, ::-1].T)
            if L > 0:
                combine_rows(Vt[:L], tilde[:k], W_dst)
            combine_rows(Vt[L:k], tilde[:k], dropped[:k - L])
            for a in range(k - L):
                for j in range(P):
                    diag_dst[j] += dropped[a, j] * dropped[a, j]
            ok = all_finite(mean_dst) and all_finite(diag_dst)
        if not ok:
            restore(noise, noise_before)
            return row, REDO_STEP, cur
        for c in range(C):
            scale_out[c] = scale[c]
        if dynamic:
            for j in range(eta.shape[0]):
                eta[j] = 1.0 / (g * g / eta[j] + q)
            if g != 1.0:
                for j in range(P):
                    m0[j] *= g
        cur = nxt
        row += nb
    return row, DONE, cur


@njit(cache=True, nogil=True)
def lofi_hypotheses(X, Y, w, has_weights, batch, shapes, offsets, codes, in_scale, in_shift, in_bound, means, diags,
                    factors, likelihood,
                    noises, noise_params, adaptive, max_abs, g, q, etas, m0s, rec_f, rec_quad, rec_noise, limit,
                    tiny, scales):
    """One step on the rows ``X`` for each of ``K`` beliefs (a hypotheses axis, e.g. BOCD's run
    lengths): :func:`lofi_rows` per hypothesis, in place on the stacks ``means (K, P)``,
    ``diags (K, P)``, ``factors (K, L, P)``, ``noises (K, C+1)``, ``etas (K, ·)``, ``m0s (K, P)``, with
    the predictive of each recorded into ``rec_f[k]``, ``rec_quad[k]``, ``rec_noise[k]``. Returns
    ``(k, status)``: :data:`DONE` with ``k = K``, or :data:`REDO_STEP` at the first hypothesis the
    kernel cannot finish (the stacks are then partly updated: the caller discards them)."""
    K, P = means.shape
    L = factors.shape[1]
    slot_means = np.empty((2, P), dtype=means.dtype)
    slot_diags = np.empty((2, P), dtype=means.dtype)
    slot_factors = np.empty((2, L, P), dtype=means.dtype)
    for k in range(K):
        done, status, cur = lofi_rows(X, Y, w, has_weights, batch, shapes, offsets, codes, in_scale, in_shift,
                                      in_bound, means[k], diags[k], factors[k], slot_means, slot_diags,
                                      slot_factors, -1, likelihood, noises[k], noise_params, adaptive, max_abs, 0, 1.0, g, q,
                                      etas[k], m0s[k], True, rec_f[k], rec_quad[k], rec_noise[k], limit, tiny,
                                      scales[k])
        if status != DONE:
            return k, status
        if cur < 0:  # no rows
            continue
        means[k] = slot_means[cur]
        diags[k] = slot_diags[cur]
        factors[k] = slot_factors[cur]
    return K, DONE
