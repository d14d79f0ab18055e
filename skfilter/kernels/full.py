"""The full-covariance EKF over many rows in one compiled call (numba).

The same step as :func:`skfilter.filtering.filter_step` with
:class:`~skfilter.posteriors.FullCovariance` (spec/diagonal-ekf.md §3.1) and the default MLP:
dynamics ``μ ← g μ``, ``Σ ← g² Σ + q I``; linearisation (:mod:`skfilter.kernels.mlp`); the recorded
predictive ``J Σ⁻ Jᵀ``; noise estimate and whitening (:mod:`skfilter.kernels.observations`); then
with the whitened rows ``Hw (m × P)``::

    U = Σ⁻ Hwᵀ,   S = I + Hw U = C Cᵀ,   V = U C⁻ᵀ,   μ' = μ⁻ + V C⁻¹ ẽ,   Σ' = Σ⁻ − V Vᵀ

``Uᵀ`` is read off ``Σ`` in one pass, four rows at a time
(:func:`~skfilter.kernels.linalg.rows_times_symmetric`), and ``Σ`` is updated **in place** in one
pass (with the dynamics folded in: ``Σ ← g² Σ + q I − V Vᵀ``), so a step reads the ``P × P``
matrix twice, writes it once and allocates nothing of that size. A step that needs the prior
predictive ``J Σ⁻ Jᵀ`` (recorded, or for the assumed-density likelihood or a predictive weighting)
reads ``Σ`` no more often: it takes ``Uᵀ = J Σ⁻`` of the raw rows in the one pass, ``J Σ⁻ Jᵀ`` from
it, and then ``Hw Σ⁻`` by applying the whitening — a linear map of each row's block, ``Hw = A J``,
for every likelihood — to ``Uᵀ`` (it was a third pass). Every
check comes before that write — the stiffness of ``S`` (trace of ``Hw Σ⁻ Hwᵀ`` within ``[0,``
:func:`~skfilter.posteriors._base.stiffness_limit` ``]``), its Cholesky factor, a finite mean and
a positive new diagonal ``diag(Σ⁻) − rowsum(V ⊙ V)`` — so a step that fails them is handed back to
the torch engine (safe forms, or the error it raises) with ``Σ`` as it was.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .linalg import FAST, all_finite, cholesky_into, rows_times_symmetric, solve_lower
from .lofi import DONE, REDO_STEP
from .mlp import mlp_buffers, mlp_forward_jacobian
from .observations import (PREDICTIVE_LIKELIHOOD, PREDICTIVE_WEIGHTING, observation_buffers, outputs_within,
                           record_outputs, restore, weigh_and_observe, whiten_rows)


@njit(cache=True, nogil=True)
def full_rows(X, Y, w, has_weights, batch, shapes, offsets, codes, mean, cov, likelihood, noise, noise_params,
              adaptive, max_abs, weight_kind, weight_c, g, q, record, rec_f, rec_quad, rec_noise, limit, tiny, scale_out):
    """Filter the rows of ``X`` from the belief ``N(mean (P,), cov (P, P))``, both updated in place
    after each completed step. Arguments otherwise and the return value as
    :func:`skfilter.kernels.lofi.lofi_rows` (``cur`` is always 0)."""
    return full_rows_from(X, Y, w, has_weights, batch, shapes, offsets, codes, mean, cov, mean, cov, True, likelihood,
                          noise, noise_params, adaptive, max_abs, weight_kind, weight_c, g, q, record, rec_f, rec_quad,
                          rec_noise, limit, tiny, scale_out)


@njit(cache=True, nogil=True)
def full_step_buffers(batch, C, D, P, shapes, noise, like):
    """The work buffers of full-covariance steps of up to ``batch`` rows of ``D`` features and ``C``
    outputs over ``P`` parameters (dtype of ``like``): ``(acts, pre, delta, scratch, H, Ut, Vt, S, Lc,
    z, step_quad, robust, predicted, gain, F, ew, scale, pj, noise_before, ew_spare)``."""
    dt = like.dtype
    m_full = batch * C
    acts, pre, delta, scratch = mlp_buffers(shapes, D, like)
    F, ew, scale, pj, noise_before = observation_buffers(batch, C, P, noise, like)
    return (acts, pre, delta, scratch, np.empty((m_full, P), dtype=dt), np.empty((m_full, P), dtype=dt),
            np.empty((m_full, P), dtype=dt), np.empty((m_full, m_full), dtype=dt), np.empty((m_full, m_full), dtype=dt),
            np.empty(m_full, dtype=dt), np.empty((batch, C, C), dtype=dt), np.empty(batch, dtype=dt),
            np.empty(P, dtype=dt), np.empty(P, dtype=dt), F, ew, scale, pj, noise_before, np.empty(C, dtype=dt))


@njit(cache=True, nogil=True)
def full_linearise(mean_src, g, X, row, nb, shapes, offsets, codes, acts, pre, delta, scratch, predicted, F, H):
    """Stages 1–2 of a step of the rows ``row … row + nb − 1``: the predicted mean ``μ⁻ = g μ`` into
    ``predicted``, the outputs ``F[i]`` and Jacobian rows ``J`` (``H[i C:(i+1) C]``) at ``μ⁻``."""
    C = F.shape[1]
    for j in range(predicted.shape[0]):
        predicted[j] = mean_src[j] * g
    for i in range(nb):
        mlp_forward_jacobian(predicted, X[row + i], shapes, offsets, codes, acts, pre, delta, scratch, F[i],
                             H[i * C:(i + 1) * C])


@njit(cache=True, nogil=True)
def predicted_rows(Ut, H, m, g2, q, q_diag):
    """``Uᵀ ← g² Uᵀ + H (q I + diag(q_diag))`` for the first ``m`` rows: ``J Σ`` into ``J Σ⁻`` under
    ``Σ⁻ = g² Σ + q I + diag(q_diag)`` (``q_diag`` empty: none)."""
    P = Ut.shape[1]
    if q_diag.shape[0] > 0:
        for r in range(m):
            for j in range(P):
                Ut[r, j] = g2 * Ut[r, j] + (q + q_diag[j]) * H[r, j]
    else:
        for r in range(m):
            for j in range(P):
                Ut[r, j] = g2 * Ut[r, j] + q * H[r, j]


@njit(cache=True, nogil=True)
def full_solve(X, Y, w, has_weights, row, nb, cov_src, read, H, Ut, F, predicted, likelihood, noise, noise_params,
               adaptive, max_abs, weight_kind, weight_c, g2, q, record, rec_f, rec_quad, rec_noise, limit, tiny, zero,
               S, Lc, z, Vt, gain, step_quad, robust, ew, scale, pj, noise_before, ew_spare, q_diag):
    """Stages 3–7 of a step up to (not including) the write of ``Σ``, after :func:`full_linearise`:
    ``Uᵀ = J Σ⁻`` (``read``: one pass over ``cov_src``, ``J Σ``; else ``Ut`` already holds ``J Σ``,
    e.g. from :func:`full_write_read`; then ``Σ⁻ = g² Σ + q I + diag(q_diag)`` applied,
    ``J Σ⁻ = g² J Σ + J (q I + diag(q_diag))``; ``q_diag`` of length ``P``, or empty for none — the
    OU map's ``(1 − g²) v₀`` of :mod:`skfilter.kernels.reversion_full`),
    the predictive ``J Σ⁻ Jᵀ``, noise estimate and whitening, ``S = I + Hw U = C Cᵀ``,
    ``Vᵀ = C⁻¹ Uᵀ`` into ``Vt`` and ``μ' = μ⁻ + V C⁻¹ ẽ`` into ``gain``, with every check of the step
    (module docstring). Returns False when the step must be handed back (``noise`` as before)."""
    C = F.shape[1]
    P = predicted.shape[0]
    m = nb * C
    per_param = q_diag.shape[0] > 0
    dynamic = g2 != 1.0 or q != 0.0 or per_param
    if max_abs > 0.0 and not outputs_within(F[:nb], max_abs):
        return False
    # 3. the prior predictive J Σ⁻ Jᵀ when recorded or needed: Uᵀ = J Σ⁻ (rows, one pass over Σ),
    #    then J U. The whitening (stage 6) is a linear map of each row's block (Hw = A J, every
    #    likelihood), so the same map applied to Uᵀ gives Hw Σ⁻ without a second pass over Σ
    predictive = record or weight_kind == PREDICTIVE_WEIGHTING or likelihood == PREDICTIVE_LIKELIHOOD
    if predictive:
        if read:
            rows_times_symmetric(cov_src, H[:m], Ut[:m], zero)
        if dynamic:
            predicted_rows(Ut, H, m, g2, q, q_diag)
        for i in range(nb):
            for c in range(C):
                for c2 in range(C):
                    s = 0.0
                    for j in range(P):
                        s += H[i * C + c, j] * Ut[i * C + c2, j]
                    step_quad[i, c, c2] = s
        if record:
            record_outputs(F[:nb], noise, step_quad, rec_f, rec_quad, rec_noise, row)
    # 4–5. noise estimate, whitening
    if not weigh_and_observe(likelihood, weight_kind, weight_c, F[:nb], Y[row:row + nb], w[row:row + nb],
                             has_weights, noise, noise_params, adaptive, scale, H[:m], ew, tiny, pj,
                             noise_before, step_quad, robust):
        return False
    if predictive:  # Uᵀ = A (J Σ⁻) = Hw Σ⁻, each row block by the whitening of its row
        for i in range(nb):
            weight = robust[i] if weight_kind > 0 else (w[row + i] if has_weights else 1.0)
            whiten_rows(likelihood, F[i], Y[row + i], Ut[i * C:(i + 1) * C], scale, weight, ew_spare, tiny, pj,
                        step_quad[i], noise_params[0])
    else:  # Uᵀ = Hw Σ⁻ (rows): one pass over Σ (rows_times_symmetric: four rows of Σ per pass over Hw)
        rows_times_symmetric(cov_src, H[:m], Ut[:m], zero)
        if dynamic:
            predicted_rows(Ut, H, m, g2, q, q_diag)
    # S = I + Hw U
    trace = 0.0
    for r in range(m):
        for r2 in range(m):
            s = 0.0
            for j in range(P):
                s += H[r, j] * Ut[r2, j]
            S[r, r2] = s
        trace += S[r, r]
    for r in range(m):
        for r2 in range(r):
            avg = 0.5 * (S[r, r2] + S[r2, r])
            S[r, r2] = avg
            S[r2, r] = avg
        S[r, r] += 1.0
    if not (trace >= 0.0 and trace <= limit) or not cholesky_into(S[:m, :m], Lc[:m, :m]):
        restore(noise, noise_before)
        return False
    for r in range(m):
        z[r] = ew[r]
    solve_lower(Lc[:m, :m], z[:m])  # C⁻¹ ẽ
    # Vᵀ = C⁻¹ Uᵀ (forward substitution on whole rows), the new mean and diagonal
    for r in range(m):
        vr = Vt[r]
        for j in range(P):
            vr[j] = Ut[r, j]
        for r2 in range(r):
            c = Lc[r, r2]
            other = Vt[r2]
            for j in range(P):
                vr[j] -= c * other[j]
        inv = 1.0 / Lc[r, r]
        for j in range(P):
            vr[j] *= inv
    ok = True
    for j in range(P):
        s = 0.0
        vv = 0.0
        for r in range(m):
            s += Vt[r, j] * z[r]
            vv += Vt[r, j] * Vt[r, j]
        gain[j] = predicted[j] + s
        if not g2 * cov_src[j, j] + q + (q_diag[j] if per_param else 0.0) - vv > 0.0:
            ok = False
    if not (ok and all_finite(gain)):
        restore(noise, noise_before)
        return False
    return True


@njit(cache=True, nogil=True)
def _write_row(cov_src, diag_src, cov, Vt, m, g2, q, dynamic, same, i, q_diag):
    """Row ``i`` of the write ``Σ ← g² Σ + q I + diag(q_diag) − V Vᵀ`` (from ``cov_src`` into
    ``cov``; with ``diag_src`` of length ``P``, from the diagonal matrix ``diag(diag_src)`` instead,
    not read; ``q_diag`` empty: none, and then ``dynamic`` says whether ``g ≠ 1`` or ``q ≠ 0``)."""
    P = cov.shape[0]
    ci = cov[i]
    if m == 1 and same and not dynamic:  # the common case: one output, in place, static
        v = Vt[0]
        vri = v[i]
        for j in range(P):
            ci[j] -= vri * v[j]
        return
    if diag_src.shape[0] == P:
        for j in range(P):
            ci[j] = 0.0
        ci[i] = diag_src[i]
        if dynamic:
            for j in range(P):
                ci[j] = ci[j] * g2
            ci[i] += q
            if q_diag.shape[0] > 0:
                ci[i] += q_diag[i]
    elif dynamic:
        si = cov_src[i]
        for j in range(P):
            ci[j] = si[j] * g2
        ci[i] += q
        if q_diag.shape[0] > 0:
            ci[i] += q_diag[i]
    elif not same:
        si = cov_src[i]
        for j in range(P):
            ci[j] = si[j]
    for r in range(m):
        vri = Vt[r, i]
        vr = Vt[r]
        for j in range(P):
            ci[j] -= vri * vr[j]


@njit(cache=True, nogil=True)
def full_write(cov_src, cov, Vt, m, g2, q, dynamic, same, q_diag):
    """The write of a step, one pass: ``Σ' = g² Σ + q I + diag(q_diag) − V Vᵀ`` from ``cov_src``
    into ``cov`` (``same``: the same array, in place; ``dynamic``: ``g ≠ 1``, ``q ≠ 0`` or a
    ``q_diag``, which is empty for none)."""
    no_diag = np.empty(0, dtype=cov.dtype)
    for i in range(cov.shape[0]):
        _write_row(cov_src, no_diag, cov, Vt, m, g2, q, dynamic, same, i, q_diag)


@njit(cache=True, nogil=True, fastmath=FAST)
def read_rows(cov, i, width, H, U, mh, zero):
    """``U[:mh, i:i + width] = H[:mh] Σ[i:i + width]ᵀ``: the rows ``i … i + width − 1`` of ``Σ``
    (``cov``, just written and in cache) dotted with the rows of ``H`` — four rows at a time
    (``width == 4``: one pass over each row of ``H`` for the four), else one by one. The loops and
    ``fastmath`` flags of :func:`~skfilter.kernels.linalg.rows_times_symmetric` (the same sums, to
    rounding)."""
    P = cov.shape[1]
    if width == 4:
        a0 = cov[i]
        a1 = cov[i + 1]
        a2 = cov[i + 2]
        a3 = cov[i + 3]
        for c in range(mh):
            h = H[c]
            s0 = zero
            s1 = zero
            s2 = zero
            s3 = zero
            for j in range(P):
                x = h[j]
                s0 += a0[j] * x
                s1 += a1[j] * x
                s2 += a2[j] * x
                s3 += a3[j] * x
            U[c, i] = s0
            U[c, i + 1] = s1
            U[c, i + 2] = s2
            U[c, i + 3] = s3
        return
    for ii in range(i, i + width):
        a0 = cov[ii]
        for c in range(mh):
            h = H[c]
            s0 = zero
            for j in range(P):
                s0 += a0[j] * h[j]
            U[c, ii] = s0


@njit(cache=True, nogil=True, fastmath=FAST)
def write_read_rows(cov_src, diag_src, cov, Vt, m, g2, q, dynamic, same, H, U, mh, zero, q_diag, i, width):
    """The rows ``i … i + width − 1`` of :func:`full_write_read`: their write (:func:`_write_row`),
    then their dot products with ``H[:mh]`` into ``U[:mh]`` (:func:`read_rows`) while in cache."""
    for ii in range(i, i + width):
        _write_row(cov_src, diag_src, cov, Vt, m, g2, q, dynamic, same, ii, q_diag)
    read_rows(cov, i, width, H, U, mh, zero)


@njit(cache=True, nogil=True, fastmath=FAST)
def full_write_read(cov_src, diag_src, cov, Vt, m, g2, q, dynamic, same, H, U, mh, zero, q_diag):
    """:func:`full_write` and, in the same pass, the next step's ``Uᵀ = H Σ'`` of its rows
    ``H[:mh]`` into ``U[:mh]`` (each row of ``Σ'`` dotted with the rows of ``H`` while it is in
    cache): one pass over ``Σ`` per step where the write and the next read take two. ``diag_src``
    (length ``P``, else empty): the source is ``diag(diag_src)`` (``cov_src`` not read). The dot
    products are those of :func:`~skfilter.kernels.linalg.rows_times_symmetric` (the same loops and
    ``fastmath`` flags: the same sums, to rounding — LLVM may vectorise them differently in another
    caller); the write is :func:`_write_row`'s, compiled without them (bit for bit
    :func:`full_write`). Four rows at a time (:func:`write_read_rows`)."""
    P = cov.shape[0]
    i = 0
    while i < P:
        width = min(4, P - i)
        write_read_rows(cov_src, diag_src, cov, Vt, m, g2, q, dynamic, same, H, U, mh, zero, q_diag, i, width)
        i += width


@njit(cache=True, nogil=True, fastmath=FAST)
def full_write_quads(cov_src, diag_src, cov, Vt, m, g2, q, dynamic, same, H, C, quads, T, zero, q_diag):
    """:func:`full_write` and, in the same pass, the quadratic forms ``quads[b] = H_b Σ' H_bᵀ``
    (``(C, C)``) of the blocks ``H_b = H[b C:(b+1) C]`` from the lower triangle of ``Σ'`` — each row
    dotted with ``H`` over ``j < i`` only, half the products of :func:`full_write_read`'s ``H Σ'``
    (the OU kernels' candidates, which need the forms, not ``H Σ'``)::

        [H Σ' Hᵀ]_{c c'} = Σ_i (H_ci Σ'_ii H_c'i + H_ci t_c'(i) + H_c'i t_c(i)),   t_c(i) = Σ_{j<i} Σ'_ij H_cj

    four rows of ``Σ'`` at a time (``T (rows of H, 4)``: their ``t``). ``diag_src``, ``q_diag`` as
    :func:`full_write_read`."""
    P = cov.shape[0]
    mh = H.shape[0]
    nb = mh // C
    for b in range(nb):
        for c in range(C):
            for c2 in range(C):
                quads[b, c, c2] = zero
    i = 0
    while i < P:
        width = min(4, P - i)
        for ii in range(i, i + width):
            _write_row(cov_src, diag_src, cov, Vt, m, g2, q, dynamic, same, ii, q_diag)
        if width == 4:
            a0 = cov[i]
            a1 = cov[i + 1]
            a2 = cov[i + 2]
            a3 = cov[i + 3]
            r = 0
            while r < mh:  # two rows of H at a time when there are: eight sums per loaded pair
                h = H[r]
                s0 = zero
                s1 = zero
                s2 = zero
                s3 = zero
                if r + 1 < mh:
                    e = H[r + 1]
                    t0 = zero
                    t1 = zero
                    t2 = zero
                    t3 = zero
                    for j in range(i):
                        x = h[j]
                        y = e[j]
                        s0 += a0[j] * x
                        s1 += a1[j] * x
                        s2 += a2[j] * x
                        s3 += a3[j] * x
                        t0 += a0[j] * y
                        t1 += a1[j] * y
                        t2 += a2[j] * y
                        t3 += a3[j] * y
                    T[r + 1, 0] = t0
                    T[r + 1, 1] = t1 + a1[i] * e[i]
                    T[r + 1, 2] = t2 + a2[i] * e[i] + a2[i + 1] * e[i + 1]
                    T[r + 1, 3] = t3 + a3[i] * e[i] + a3[i + 1] * e[i + 1] + a3[i + 2] * e[i + 2]
                else:
                    for j in range(i):
                        x = h[j]
                        s0 += a0[j] * x
                        s1 += a1[j] * x
                        s2 += a2[j] * x
                        s3 += a3[j] * x
                T[r, 0] = s0
                T[r, 1] = s1 + a1[i] * h[i]
                T[r, 2] = s2 + a2[i] * h[i] + a2[i + 1] * h[i + 1]
                T[r, 3] = s3 + a3[i] * h[i] + a3[i + 1] * h[i + 1] + a3[i + 2] * h[i + 2]
                r += 2
        else:
            for r in range(mh):
                h = H[r]
                for k in range(width):
                    a = cov[i + k]
                    s = zero
                    for j in range(i + k):
                        s += a[j] * h[j]
                    T[r, k] = s
        for k in range(width):
            ii = i + k
            d = cov[ii, ii]
            for b in range(nb):
                for c in range(C):
                    hc = H[b * C + c, ii]
                    for c2 in range(C):
                        hc2 = H[b * C + c2, ii]
                        quads[b, c, c2] += hc * (d * hc2 + T[b * C + c2, k]) + hc2 * T[b * C + c, k]
        i += width


@njit(cache=True, nogil=True)
def full_rows_from(X, Y, w, has_weights, batch, shapes, offsets, codes, mean_src, cov_src, mean, cov, same,
                   likelihood, noise, noise_params, adaptive, max_abs, weight_kind, weight_c, g, q, record, rec_f,
                   rec_quad, rec_noise, limit, tiny, scale_out):
    """:func:`full_rows` from the belief ``N(mean_src, cov_src)`` into ``mean``, ``cov`` (the first
    step reads the source and writes the destination in the same passes; later steps work in place
    on the destination). ``same``: the source arrays are the destination's (in place from the
    start). Each step is :func:`full_linearise`, :func:`full_solve` (every check) and
    :func:`full_write`."""
    n, D = X.shape
    C = Y.shape[1]
    P = mean.shape[0]
    (acts, pre, delta, scratch, H, Ut, Vt, S, Lc, z, step_quad, robust, predicted, gain, F, ew, scale, pj,
     noise_before, ew_spare) = full_step_buffers(batch, C, D, P, shapes, noise, mean)
    zero = np.zeros(1, dtype=mean.dtype)[0]
    no_diag = np.empty(0, dtype=mean.dtype)
    g2 = g * g
    dynamic = g != 1.0 or q != 0.0
    row = 0
    while row < n:
        nb = min(batch, n - row)
        m = nb * C
        full_linearise(mean_src, g, X, row, nb, shapes, offsets, codes, acts, pre, delta, scratch, predicted, F, H)
        if not full_solve(X, Y, w, has_weights, row, nb, cov_src, True, H, Ut, F, predicted, likelihood, noise,
                          noise_params, adaptive, max_abs, weight_kind, weight_c, g2, q, record, rec_f, rec_quad,
                          rec_noise, limit, tiny, zero, S, Lc, z, Vt, gain, step_quad, robust, ew, scale, pj,
                          noise_before, ew_spare, no_diag):
            return row, REDO_STEP, 0
        # the write: Σ ← g² Σ + q I − V Vᵀ, μ ← μ' (from the source into the destination)
        full_write(cov_src, cov, Vt, m, g2, q, dynamic, same, no_diag)
        for j in range(P):
            mean[j] = gain[j]
        for c in range(C):
            scale_out[c] = scale[c]
        mean_src = mean  # later steps in place
        cov_src = cov
        same = True
        row += nb
    return row, DONE, 0


@njit(cache=True, nogil=True)
def full_hypotheses(X, Y, w, has_weights, batch, shapes, offsets, codes, means, covs, likelihood, noises,
                    noise_params, adaptive, max_abs, g, q, rec_f, rec_quad, rec_noise, limit, tiny, scales):
    """One step for each of ``K`` full-covariance beliefs (stacks ``means (K, P)``, ``covs (K, P, P)``),
    in place; as :func:`skfilter.kernels.lofi.lofi_hypotheses`."""
    K = means.shape[0]
    for k in range(K):
        done, status, _ = full_rows(X, Y, w, has_weights, batch, shapes, offsets, codes, means[k], covs[k],
                                    likelihood, noises[k], noise_params, adaptive, max_abs, 0, 1.0, g, q, True, rec_f[k],
                                    rec_quad[k], rec_noise[k], limit, tiny, scales[k])
        if status != DONE:
            return k, status
    return K, DONE
