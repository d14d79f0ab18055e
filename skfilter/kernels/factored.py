"""LRKF, HiLoFi and LoLoFi — the factored covariance — over many rows in one compiled call (numba).

The same step as :func:`skfilter.filtering.filter_step` with
:class:`~skfilter.posteriors.FactoredCovariance` (Duran-Martin et al. 2025, Alg. 2–4 with the
corrections of :mod:`skfilter.posteriors.factored`) and the default MLP: dynamics ``μ ← g μ``,
``B_b ← g B_b``, ``q_b ← g² q_b + Q_b`` (the pending process noise of block ``b``); linearisation
(:mod:`skfilter.kernels.mlp`); the recorded predictive ``J Σ⁻ Jᵀ = Σ_b (J_b B_bᵀ)(J_b B_bᵀ)ᵀ +
q_b J_b J_bᵀ``; noise estimate and whitening (:mod:`skfilter.kernels.observations`); then, with the
whitened rows ``Hw (m × P)`` and ``H_b`` the columns of block ``b``::

    S     = I + Σ_b (B_b H_bᵀ)ᵀ(B_b H_bᵀ) + q_b H_b H_bᵀ = L Lᵀ          (m × m, Cholesky)
    V_b   = S⁻¹ H_b                                    (two triangular solves on whole rows)
    K_bᵀ  = (V_b B_bᵀ) B_b + q_b V_b,     μ_b ← μ_b + K_b ẽ
    B_b   ← Q_R(B_b − (B_b H_bᵀ) K_bᵀ, K_bᵀ[, √q_b (I − K_b H_b)ᵀ])      (a Cholesky block)
          or P_d / P_{d,+q}(B_b − (B_b H_bᵀ) K_bᵀ, K_bᵀ)                   (a low-rank block)

The engine forms ``Sh`` (``ShᵀSh = S``) as the QR factor of a stack holding ``I_m``; the kernel
forms ``S`` itself, which agrees to rounding while ``S`` is not stiff, and hands a stiff step (the
trace of ``S − I`` beyond :func:`~skfilter.posteriors._base.stiffness_limit`) back to the engine,
as the other kernels do.

**The factor decompositions** (``Q_R`` and ``P_d`` of :mod:`skfilter.posteriors.factors`), chosen by
measurement (numba over LAPACK, one thread, float64; the ``(d + m) × D`` stack of LRKF rank 10 at
P = 501 is ``11 × 501``):

========================================================  =========  ==================================
route for the ``k × D`` stack ``N``                       µs         accuracy of the kept factor
========================================================  =========  ==================================
thin SVD of ``N`` (``gesdd``, as the engine)              230        backward stable
Householder QR of ``Nᵀ`` (``D × k``), SVD of its ``R``    55–66      backward stable (the same SVD)
the span of ``B``'s orthogonal rows and ``K``:            41         backward stable
``[Vᵀ, Q₂]`` and the SVD of a ``k × k`` matrix
(:func:`orthogonal_update_into`)
Gram ``N Nᵀ``, its eigendecomposition, ``Uᵀ N``           19         squares the condition number
========================================================  =========  ==================================

A low-rank factor keeps orthogonal rows (every ``P_d`` output and every prior has them), so the
kernel takes the third route whenever ``d + m ≤ D_b`` (at rank 50, ``51 × 450``: 518 against 920 µs
for the second, whose ``Q`` it never forms), the second otherwise (the stack then has at least as
many rows as columns) — not the Gram: the factors' small singular values are the posterior's most
certain directions, which the Gram's ``eps · σ_1²`` error would blur, and the engine (a thin SVD)
would then be matched only to ``eps · κ²``. A Cholesky block's ``Q_R`` is the QR of ``U`` plus
``m`` rank-one terms plus ``m`` rows, by Givens rotations in ``O(m D²)``
(:func:`~skfilter.kernels.linalg.triangular_update_into`; a Householder QR of the
``(D_l + m) × D_l`` stack took 51 µs for the default MLP's last layer, ``52 × 51``), its rows signed
to a non-negative diagonal as the engine's; with ``exact_process_noise`` (``D_l`` more rows) the
Householder QR. Rows of a low-rank factor are signed as the engine's (the entry of largest
magnitude positive), so both paths give the same factor, not only the same covariance.

Beliefs live in two buffer slots that alternate (as :mod:`skfilter.kernels.lofi`): a step reads slot
``cur`` and writes slot ``1 − cur``; a step the kernel cannot finish (stiff ``S``, logits beyond the
likelihood's bound, a non-finite result) stops the kernel with the last good belief in slot ``cur``
and the torch engine redoes it (the QR form, or the error it raises).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .linalg import all_finite, cholesky_into, solve_lower_rows, solve_upper_t_rows, triangular_update_into
from .lofi import DONE, REDO_STEP
from .mlp import mlp_buffers, mlp_forward_jacobian
from .observations import (PREDICTIVE_LIKELIHOOD, PREDICTIVE_WEIGHTING, observation_buffers, outputs_within,
                           record_outputs, restore, weigh_and_observe)

#: block kinds (``kinds``): a Cholesky factor (``CholeskyFactor()``), one keeping the process noise
#: in its posterior (``CholeskyFactor(exact_process_noise=True)``), a low-rank factor projected with
#: ``+q`` (``LowRankFactor(keep_process_noise=True)``) and one without
#: (``LowRankFactor(keep_process_noise=False)``)
CHOLESKY, CHOLESKY_EXACT_NOISE, LOW_RANK_PLUS_NOISE, LOW_RANK = 0, 1, 2, 3


@njit(cache=True, nogil=True)
def gather_blocks(H, m, positions, starts, out):
    """The first ``m`` rows of ``H (·, P)`` by blocks: block ``b``'s columns ``positions[starts[b]:
    starts[b + 1]]`` as a contiguous ``m × D_b`` matrix at ``out[m · starts[b]:]``."""
    for b in range(starts.shape[0] - 1):
        s, e = starts[b], starts[b + 1]
        D = e - s
        base = m * s
        for i in range(m):
            row = H[i]
            o = base + i * D
            for j in range(D):
                out[o + j] = row[positions[s + j]]


@njit(cache=True, nogil=True)
def block_view(flat, start, rows, cols):
    """``flat[start : start + rows·cols]`` as a C-contiguous ``rows × cols`` matrix (a view)."""
    return flat[start:start + rows * cols].reshape((rows, cols))


@njit(cache=True, nogil=True)
def qr_factor_into(N, out):
    """``Q_R(N)``: the ``R`` (``D × D``, ``k ≥ D`` rows of ``N (k, D)``) of ``N``'s Householder QR
    with its rows signed to a non-negative diagonal (:func:`skfilter.posteriors.factors.stacked_qr_factor`),
    into ``out``."""
    _, R = np.linalg.qr(N)
    D = out.shape[0]
    for a in range(D):
        s = -1.0 if R[a, a] < 0.0 else 1.0
        for j in range(D):
            out[a, j] = s * R[a, j]


@njit(cache=True, nogil=True)
def best_rank_into(N, shift, eps, out):
    """``P_{d,+a}(N)`` (:func:`skfilter.posteriors.factors.best_rank_factor`) into ``out (d, D)``:
    ``diag(√(σ_i² + a)) V[:, :d]ᵀ`` from the thin SVD ``N = U diag(σ) Vᵀ``, rows of directions with
    ``σ_i ≤ max(k, D) · eps · σ_1`` (and past ``min(k, D)``) zero, each row signed so that its entry of
    largest magnitude is positive (as the engine's). The SVD is that of the small ``R``
    of a Householder QR (of ``Nᵀ`` for a wide ``N``, else of ``N``; module docstring)."""
    k, D = N.shape
    d = out.shape[0]
    if k <= D:
        Q, R = np.linalg.qr(N.T)  # Nᵀ = Q R: N = Rᵀ Qᵀ, its right singular vectors Q × those of Rᵀ
        _, sigma, vh = np.linalg.svd(np.ascontiguousarray(R.T))
        keep = min(d, k)
        Vh = np.dot(np.ascontiguousarray(vh[:keep]), np.ascontiguousarray(Q.T))
    else:
        _, R = np.linalg.qr(N)  # N = Q R: the right singular vectors of R
        _, sigma, Vh = np.linalg.svd(R)
        keep = min(d, D)
    _signed_rows_into(sigma, Vh, keep, shift, max(k, D) * eps * sigma[0], out)


@njit(cache=True, nogil=True)
def _signed_rows_into(sigma, Vh, keep, shift, tol, out):
    """``out[i] = ±√(σ_i² + a) Vh[i]`` for ``i < keep`` with ``σ_i > tol`` (signed so that the row's
    entry of largest magnitude is positive), the other rows zero."""
    D = out.shape[1]
    for a in range(out.shape[0]):
        row = out[a]
        if a < keep and sigma[a] > tol:
            scale = np.sqrt(sigma[a] * sigma[a] + shift)
            src = Vh[a]
            top = 0
            for j in range(1, D):
                if abs(src[j]) > abs(src[top]):
                    top = j
            if src[top] < 0.0:
                scale = -scale
            for j in range(D):
                row[j] = scale * src[j]
        else:
            for j in range(D):
                row[j] = 0.0


@njit(cache=True, nogil=True)
def orthogonal_update_into(B, BH, Kt, shift, eps, out):
    """``P_{d,+a}(B − (B Hᵀ) Kᵀ, Kᵀ)`` into ``out (d, D)`` for a factor ``B (r, D)`` with orthogonal
    rows (every low-rank factor of the filter: the output of ``P_d`` and every prior) and
    ``r + m ≤ D``: the stack lies in the span of ``B``'s rows and ``K``'s columns, so its SVD is that
    of an ``(r + m) × (r + m)`` matrix.

    With ``B = S V`` (``V`` the supported rows normalised, orthonormal), ``K`` (``D × m``, the
    gain: ``Kt`` is ``Kᵀ``) split as ``Vᵀ P + Q₂ R₂`` (projected off ``V`` twice — classical Gram–Schmidt with one
    reorthogonalisation — then a Householder QR of the rest)::

        Nᵀ = [Bᵀ − K (B Hᵀ)ᵀ, K] = [Vᵀ, Q₂] M,   M = [[S − P (B Hᵀ)ᵀ, P], [−R₂ (B Hᵀ)ᵀ, R₂]]

    and with ``M = U Σ Wᵀ`` the right singular vectors of ``N`` are the rows of
    ``U_{:,i}ᵀ [V; Q₂ᵀ]``: ``O(D (r + m) d)`` for the last product, where the QR of the ``D × (r + m)``
    stack costs ``O(D (r + m)²)`` and forms its ``Q`` as well. The singular values are ``M``'s (``[Vᵀ, Q₂]``
    has orthonormal columns), the supported rows and signs as :func:`best_rank_into`."""
    r, D = B.shape
    m = Kt.shape[0]
    dt = B.dtype
    norms = np.empty(r, dtype=dt)
    rows = np.empty(r, dtype=np.int64)
    n_sup = 0
    for u in range(r):
        t = 0.0
        for j in range(D):
            t += B[u, j] * B[u, j]
        if t > 0.0:
            rows[n_sup] = u
            norms[n_sup] = np.sqrt(t)
            n_sup += 1
    V = np.empty((n_sup, D), dtype=dt)
    for i in range(n_sup):
        inv = 1.0 / norms[i]
        src = B[rows[i]]
        for j in range(D):
            V[i, j] = src[j] * inv
    A = Kt.copy()
    P = np.zeros((n_sup, m), dtype=dt)
    if n_sup > 0:
        for _ in range(2):
            delta = np.dot(V, A.T)  # (n_sup, m)
            A -= np.dot(np.ascontiguousarray(delta.T), V)
            P += delta
    Q2, R2 = np.linalg.qr(np.ascontiguousarray(A.T))  # (D, m), (m, m)
    n = n_sup + m
    M = np.zeros((n, n), dtype=dt)
    for i in range(n_sup):
        M[i, i] = norms[i]
        for i2 in range(n_sup):
            t = 0.0
            for a in range(m):
                t += P[i, a] * BH[rows[i2], a]
            M[i, i2] -= t
        for a in range(m):
            M[i, n_sup + a] = P[i, a]
    for a in range(m):
        for i2 in range(n_sup):
            t = 0.0
            for c in range(m):
                t += R2[a, c] * BH[rows[i2], c]
            M[n_sup + a, i2] = -t
        for c in range(m):
            M[n_sup + a, n_sup + c] = R2[a, c]
    U, sigma, _ = np.linalg.svd(M)
    keep = min(out.shape[0], n)
    Ut = np.ascontiguousarray(U[:, :keep].T)  # (keep, n)
    Vh = np.dot(np.ascontiguousarray(Ut[:, n_sup:]), np.ascontiguousarray(Q2.T))
    if n_sup > 0:
        Vh += np.dot(np.ascontiguousarray(Ut[:, :n_sup]), V)
    _signed_rows_into(sigma, Vh, keep, shift, max(r + m, D) * eps * sigma[0], out)


@njit(cache=True, nogil=True)
def factored_quadratic(Hb_flat, nb, C, positions_starts, factors, fstarts, ranks, pend, out):
    """``J Σ⁻ Jᵀ`` of each of ``nb`` rows (``C`` outputs) from their Jacobians gathered by blocks
    (:func:`gather_blocks` with ``m = nb · C``) and the factored belief: ``Σ_b A Aᵀ + q_b J_b J_bᵀ``,
    ``A = J_b B_bᵀ`` (the pending process noise included), into ``out (nb, C, C)``."""
    m = nb * C
    for i in range(nb):
        for c in range(C):
            for c2 in range(C):
                out[i, c, c2] = 0.0
    for b in range(ranks.shape[0]):
        s, e = positions_starts[b], positions_starts[b + 1]
        D = e - s
        r = ranks[b]
        J = block_view(Hb_flat, m * s, m, D)
        B = block_view(factors, fstarts[b], r, D)
        A = np.dot(J, B.T)  # (m, r)
        qb = pend[b]
        for i in range(nb):
            for c in range(C):
                a = i * C + c
                for c2 in range(C):
                    a2 = i * C + c2
                    t = 0.0
                    for u in range(r):
                        t += A[a, u] * A[a2, u]
                    if qb != 0.0:
                        for j in range(D):
                            t += qb * J[a, j] * J[a2, j]
                    out[i, c, c2] += t


@njit(cache=True, nogil=True)
def factored_update(Hb_flat, m, ew, positions, starts, factors_src, fstarts, ranks, kinds, pend, eps, limit,
                    mean, factors_dst, S, Lc, V_flat, stack):
    """The update of the module docstring: from the whitened rows gathered by blocks (``Hb_flat``,
    :func:`gather_blocks`), the residuals ``ew (m,)`` and the predicted factors ``factors_src`` with
    pending noise ``pend``, adds the gain step to ``mean`` and writes the new factors to
    ``factors_dst``. ``S``, ``Lc`` (``≥ m × m``), ``V_flat`` (``≥ m P``) and ``stack`` are work
    buffers. Returns False when the step must be handed back (stiff ``S``, non-finite values)."""
    n_blocks = ranks.shape[0]
    for a in range(m):
        for c in range(m):
            S[a, c] = 0.0
    BHs = []
    for b in range(n_blocks):
        s, e = starts[b], starts[b + 1]
        D = e - s
        Hb = block_view(Hb_flat, m * s, m, D)
        B = block_view(factors_src, fstarts[b], ranks[b], D)
        BH = np.dot(B, Hb.T)  # B_b H_bᵀ, (r_b, m)
        BHs.append(BH)
        r = ranks[b]
        for a in range(m):
            for c in range(a + 1):
                t = 0.0
                for u in range(r):
                    t += BH[u, a] * BH[u, c]
                S[a, c] += t
        qb = pend[b]
        if qb != 0.0:
            for a in range(m):
                ha = Hb[a]
                for c in range(a + 1):
                    hc = Hb[c]
                    t = 0.0
                    for j in range(D):
                        t += ha[j] * hc[j]
                    S[a, c] += qb * t
    trace = 0.0
    for a in range(m):
        trace += S[a, a]
        for c in range(a):
            S[c, a] = S[a, c]
        S[a, a] += 1.0
    if not (trace <= limit and trace >= 0.0):
        return False
    if not cholesky_into(S[:m, :m], Lc[:m, :m]):
        return False
    # V = S⁻¹ Hw, block by block (rows of the same m × D_b matrices)
    for b in range(n_blocks):
        s, e = starts[b], starts[b + 1]
        D = e - s
        Hb = block_view(Hb_flat, m * s, m, D)
        Vb = block_view(V_flat, m * s, m, D)
        for a in range(m):
            for j in range(D):
                Vb[a, j] = Hb[a, j]
        solve_lower_rows(Lc[:m, :m], Vb, 1.0)  # V_b = S⁻¹ H_b
        solve_upper_t_rows(Lc[:m, :m], Vb)
    for b in range(n_blocks):
        s, e = starts[b], starts[b + 1]
        D = e - s
        r = ranks[b]
        kind = kinds[b]
        qb = pend[b]
        Hb = block_view(Hb_flat, m * s, m, D)
        Vb = block_view(V_flat, m * s, m, D)
        B = block_view(factors_src, fstarts[b], r, D)
        Kt = np.dot(np.dot(Vb, B.T), B)  # K_bᵀ = V_b B_bᵀ B_b + q_b V_b, (m, D_b)
        if qb != 0.0:
            for a in range(m):
                for j in range(D):
                    Kt[a, j] += qb * Vb[a, j]
        for j in range(D):
            t = 0.0
            for a in range(m):
                t += ew[a] * Kt[a, j]
            mean[positions[s + j]] += t
        out = block_view(factors_dst, fstarts[b], r, D)
        if kind == CHOLESKY:  # Q_R(B − (B Hᵀ) Kᵀ, Kᵀ) by rotations, B upper-triangular
            W = np.empty((m, D), dtype=mean.dtype)
            BH = BHs[b]
            for a in range(m):
                for j in range(D):
                    W[a, j] = -BH[j, a]
            if not (all_finite(W.ravel()) and all_finite(Kt.ravel())):
                return False
            triangular_update_into(B, W, Kt, out)
            continue
        if (kind == LOW_RANK or kind == LOW_RANK_PLUS_NOISE) and r + m <= D:  # the span of B's rows and K
            if not (all_finite(Kt.ravel()) and all_finite(BHs[b].ravel())):
                return False
            orthogonal_update_into(B, BHs[b], Kt, qb if kind == LOW_RANK_PLUS_NOISE else 0.0, eps, out)
            continue
        extra = 0
        if kind == CHOLESKY_EXACT_NOISE:
            extra = D
        elif kind == LOW_RANK_PLUS_NOISE and r >= D:
            extra = D
        rows = r + m + extra
        N = block_view(stack, 0, rows, D)
        kept = np.dot(BHs[b], Kt)  # (B_b H_bᵀ) K_bᵀ
        for u in range(r):
            for j in range(D):
                N[u, j] = B[u, j] - kept[u, j]
        for a in range(m):
            for j in range(D):
                N[r + a, j] = Kt[a, j]
        if extra:
            root_q = np.sqrt(qb)
            for i in range(D):
                for j in range(D):
                    N[r + m + i, j] = 0.0
            if kind == CHOLESKY_EXACT_NOISE:  # √q (I − K_b H_b)ᵀ = √q (I − H_bᵀ K_bᵀ)
                for i in range(D):
                    for j in range(D):
                        t = 0.0
                        for a in range(m):
                            t += Hb[a, i] * Kt[a, j]
                        N[r + m + i, j] = root_q * ((1.0 if i == j else 0.0) - t)
            else:  # d ≥ D_b: the surrogate exactly, √q I appended
                for i in range(D):
                    N[r + m + i, i] = root_q
        if not all_finite(stack[:rows * D]):
            return False
        if kind == CHOLESKY_EXACT_NOISE:
            qr_factor_into(N, out)
        elif kind == LOW_RANK_PLUS_NOISE and r < D:
            best_rank_into(N, qb, eps, out)
        else:
            best_rank_into(N, 0.0, eps, out)
    return all_finite(mean) and all_finite(factors_dst)


@njit(cache=True, nogil=True)
def factored_rows(X, Y, w, has_weights, batch, shapes, offsets, codes, means, factors, pendings, cur, positions,
                  starts, fstarts, ranks, kinds, likelihood, noise, noise_params, adaptive, max_abs, weight_kind,
                  weight_c, g, q_blocks, record, rec_f, rec_quad, rec_noise, limit, eps, tiny, scale_out):
    """Filter the rows of ``X`` (as the model's first layer sees them) from the belief in slot ``cur``
    of ``means (2, P)``, ``factors (2, F)`` (every block's factor ``B_b``, ``ranks[b] × D_b``, flat
    from ``fstarts[b]``) and ``pendings (2, n_blocks)``; block ``b`` holds the parameters
    ``positions[starts[b]:starts[b + 1]]`` and is of kind ``kinds[b]`` (:data:`CHOLESKY` …); the
    dynamics are the decay ``g`` and the process noise ``q_blocks (n_blocks,)`` per block; ``eps`` the
    dtype's machine epsilon. Other arguments and the return value as
    :func:`skfilter.kernels.lofi.lofi_rows`."""
    n, D_in = X.shape
    dt = means.dtype
    C = Y.shape[1]
    P = means.shape[1]
    n_blocks = ranks.shape[0]
    m_full = batch * C
    acts, pre, delta, scratch = mlp_buffers(shapes, D_in, means[0])
    H = np.empty((m_full, P), dtype=dt)
    Hb_flat = np.empty(m_full * P, dtype=dt)
    V_flat = np.empty(m_full * P, dtype=dt)
    S = np.empty((m_full, m_full), dtype=dt)
    Lc = np.empty((m_full, m_full), dtype=dt)
    predicted = np.empty(factors.shape[1], dtype=dt)
    pend = np.empty(n_blocks, dtype=dt)
    size = 1
    for b in range(n_blocks):
        D = starts[b + 1] - starts[b]
        size = max(size, (ranks[b] + m_full + D) * D)
    stack = np.empty(size, dtype=dt)
    step_quad = np.empty((batch, C, C), dtype=dt)
    robust = np.empty(batch, dtype=dt)
    F, ew, scale, pj, noise_before = observation_buffers(batch, C, P, noise, means[0])
    dynamic = g != 1.0
    for b in range(n_blocks):
        if q_blocks[b] != 0.0:
            dynamic = True
    row = 0
    while row < n:
        nb = min(batch, n - row)
        m = nb * C
        nxt = 1 - cur
        mean = means[nxt]
        # 1. dynamics: μ⁻ into slot nxt, the predicted factors and pending noise into work buffers
        for j in range(P):
            mean[j] = means[cur, j] * g if dynamic else means[cur, j]
        for j in range(factors.shape[1]):
            predicted[j] = factors[cur, j] * g if dynamic else factors[cur, j]
        for b in range(n_blocks):
            pend[b] = pendings[cur, b] * (g * g) + q_blocks[b] if dynamic else pendings[cur, b]
        # 2. linearise at μ⁻
        for i in range(nb):
            mlp_forward_jacobian(mean, X[row + i], shapes, offsets, codes, acts, pre, delta, scratch, F[i],
                                 H[i * C:(i + 1) * C])
        if max_abs > 0.0 and not outputs_within(F[:nb], max_abs):
            return row, REDO_STEP, cur
        # 3. the prior predictive (recorded, or for a predictive weighting / likelihood)
        if record or weight_kind == PREDICTIVE_WEIGHTING or likelihood == PREDICTIVE_LIKELIHOOD:
            gather_blocks(H, m, positions, starts, Hb_flat)
            factored_quadratic(Hb_flat, nb, C, starts, predicted, fstarts, ranks, pend, step_quad)
            if record:
                record_outputs(F[:nb], noise, step_quad, rec_f, rec_quad, rec_noise, row)
        # 4–5. noise estimate, whitening
        if not weigh_and_observe(likelihood, weight_kind, weight_c, F[:nb], Y[row:row + nb], w[row:row + nb],
                                 has_weights, noise, noise_params, adaptive, scale, H[:m], ew, tiny, pj,
                                 noise_before, step_quad, robust):
            return row, REDO_STEP, cur
        # 6. update
        gather_blocks(H, m, positions, starts, Hb_flat)
        if not factored_update(Hb_flat, m, ew, positions, starts, predicted, fstarts, ranks, kinds, pend, eps, limit,
                               mean, factors[nxt], S, Lc, V_flat, stack):
            restore(noise, noise_before)
            return row, REDO_STEP, cur
        for b in range(n_blocks):
            pendings[nxt, b] = 0.0
        for c in range(C):
            scale_out[c] = scale[c]
        cur = nxt
        row += nb
    return row, DONE, cur


@njit(cache=True, nogil=True)
def factored_hypotheses(X, Y, w, has_weights, batch, shapes, offsets, codes, means, factors, pendings, positions,
                        starts, fstarts, ranks, kinds, likelihood, noises, noise_params, adaptive, max_abs, g,
                        q_blocks, rec_f, rec_quad, rec_noise, limit, eps, tiny, scales):
    """One step for each of ``K`` factored beliefs (stacks ``means (K, P)``, ``factors (K, F)``,
    ``pendings (K, n_blocks)``), in place; as :func:`skfilter.kernels.lofi.lofi_hypotheses`."""
    K, P = means.shape
    slot_means = np.empty((2, P), dtype=means.dtype)
    slot_factors = np.empty((2, factors.shape[1]), dtype=means.dtype)
    slot_pend = np.empty((2, pendings.shape[1]), dtype=means.dtype)
    for k in range(K):
        slot_means[0] = means[k]
        slot_factors[0] = factors[k]
        slot_pend[0] = pendings[k]
        done, status, cur = factored_rows(X, Y, w, has_weights, batch, shapes, offsets, codes, slot_means,
                                          slot_factors, slot_pend, 0, positions, starts, fstarts, ranks, kinds,
                                          likelihood, noises[k], noise_params, adaptive, max_abs, 0, 1.0, g, q_blocks,
                                          True, rec_f[k], rec_quad[k], rec_noise[k], limit, eps, tiny, scales[k])
        if status != DONE:
            return k, status
        means[k] = slot_means[cur]
        factors[k] = slot_factors[cur]
        pendings[k] = slot_pend[cur]
    return K, DONE
