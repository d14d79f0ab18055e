"""VD-EKF and FD-EKF over many rows in one compiled call (numba).

The same step as :func:`skfilter.filtering.filter_step` with
:class:`~skfilter.posteriors.DiagonalCovariance` (spec/diagonal-ekf.md §3.2–§3.3) and the default
MLP: dynamics ``μ ← g μ``, ``v ← g² v + q``; linearisation (:mod:`skfilter.kernels.mlp`); the
recorded predictive ``J diag(v⁻) Jᵀ``; noise estimate and whitening
(:mod:`skfilter.kernels.observations`); then with the whitened rows ``Hw (m × P)``:

* VD (``vd_mean='paper'``, eq. 25): ``1/v' = 1/v + colsum(Hw ⊙ Hw)``, ``μ' = μ + v' ⊙ Hwᵀ ẽ``;
* FD (eqs. 10–12) and VD with the exact mean: ``S = I + Hw diag(v) Hwᵀ = C Cᵀ``,
  ``Z = C⁻¹ Hw diag(v)``, ``μ' = μ + Zᵀ C⁻¹ ẽ``; FD ``v' = v − colsum(Z ⊙ Z)``, VD as above.

A step whose checks fail — a stiff innovation (trace of ``Hw diag(v) Hwᵀ`` beyond
:func:`~skfilter.posteriors._base.stiffness_limit`, where FD's difference loses its digits), a
non-positive variance, a non-finite mean — is handed back to the torch engine with the belief it
started from (two alternating buffer slots, as :mod:`skfilter.kernels.lofi`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .linalg import all_finite, cholesky_into, solve_lower
from .lofi import DONE, REDO_STEP
from .mlp import mlp_buffers, mlp_forward_jacobian
from .observations import (PREDICTIVE_LIKELIHOOD, PREDICTIVE_WEIGHTING, observation_buffers, outputs_within,
                           record_outputs, restore, weigh_and_observe)


@njit(cache=True, nogil=True)
def diagonal_rows(X, Y, w, has_weights, batch, shapes, offsets, codes, means, variances, cur, fd, exact_mean,
                  likelihood, noise, noise_params, adaptive, max_abs, weight_kind, weight_c, g, q, record, rec_f,
                  rec_quad, rec_noise, limit, tiny, scale_out):
    """Filter the rows of ``X`` from the belief in slot ``cur`` of ``means (2, P)``,
    ``variances (2, P)`` (``fd``: FD-EKF, else VD-EKF with the paper's or, ``exact_mean``, the
    exact mean). Arguments and return value as :func:`skfilter.kernels.lofi.lofi_rows`."""
    n, D = X.shape
    dt = means.dtype
    C = Y.shape[1]
    P = means.shape[1]
    m_full = batch * C
    acts, pre, delta, scratch = mlp_buffers(shapes, D, means[0])
    H = np.empty((m_full, P), dtype=dt)
    HV = np.empty((m_full, P), dtype=dt)
    S = np.empty((m_full, m_full), dtype=dt)
    Lc = np.empty((m_full, m_full), dtype=dt)
    z = np.empty(m_full, dtype=dt)
    col = np.empty(m_full, dtype=dt)
    step_quad = np.empty((batch, C, C), dtype=dt)
    robust = np.empty(batch, dtype=dt)
    F, ew, scale, pj, noise_before = observation_buffers(batch, C, P, noise, means[0])
    dynamic = g != 1.0 or q != 0.0
    innovation = fd or exact_mean
    row = 0
    while row < n:
        nb = min(batch, n - row)
        m = nb * C
        nxt = 1 - cur
        mean_src, var_src = means[cur], variances[cur]
        mean, var = means[nxt], variances[nxt]
        # 1. dynamics into slot nxt (the predicted belief)
        if dynamic:
            g2 = g * g
            for j in range(P):
                mean[j] = mean_src[j] * g
                var[j] = var_src[j] * g2 + q
        else:
            for j in range(P):
                mean[j] = mean_src[j]
                var[j] = var_src[j]
        # 2. linearise at μ⁻
        for i in range(nb):
            mlp_forward_jacobian(mean, X[row + i], shapes, offsets, codes, acts, pre, delta, scratch, F[i],
                                 H[i * C:(i + 1) * C])
        if max_abs > 0.0 and not outputs_within(F[:nb], max_abs):
            return row, REDO_STEP, cur
        # 3. the prior predictive J diag(v⁻) Jᵀ (recorded, or for a predictive weighting)
        if record or weight_kind == PREDICTIVE_WEIGHTING or likelihood == PREDICTIVE_LIKELIHOOD:
            for i in range(nb):
                for c in range(C):
                    for c2 in range(c + 1):
                        s = 0.0
                        a, b = H[i * C + c], H[i * C + c2]
                        for j in range(P):
                            s += a[j] * var[j] * b[j]
                        step_quad[i, c, c2] = s
                        step_quad[i, c2, c] = s
            if record:
                record_outputs(F[:nb], noise, step_quad, rec_f, rec_quad, rec_noise, row)
        # 4–5. noise estimate, whitening
        if not weigh_and_observe(likelihood, weight_kind, weight_c, F[:nb], Y[row:row + nb], w[row:row + nb],
                                 has_weights, noise, noise_params, adaptive, scale, H[:m], ew, tiny, pj,
                                 noise_before, step_quad, robust):
            return row, REDO_STEP, cur
        # 6. update
        if innovation:
            for r in range(m):
                for j in range(P):
                    HV[r, j] = H[r, j] * var[j]
            trace = 0.0
            for r in range(m):
                for r2 in range(r + 1):
                    s = 0.0
                    for j in range(P):
                        s += HV[r, j] * H[r2, j]
                    S[r, r2] = s
                    S[r2, r] = s
                trace += S[r, r]
                S[r, r] += 1.0
            if not (trace <= limit and trace >= 0.0) or not cholesky_into(S[:m, :m], Lc[:m, :m]):
                restore(noise, noise_before)
                return row, REDO_STEP, cur
            for r in range(m):
                z[r] = ew[r]
            solve_lower(Lc[:m, :m], z[:m])  # C⁻¹ ẽ
            for j in range(P):  # column j of Z = C⁻¹ Hw diag(v)
                for r in range(m):
                    col[r] = HV[r, j]
                solve_lower(Lc[:m, :m], col[:m])
                s = 0.0
                zz = 0.0
                for r in range(m):
                    s += col[r] * z[r]
                    zz += col[r] * col[r]
                mean[j] += s
                if fd:
                    var[j] = var[j] - zz
        if not fd:
            for j in range(P):
                hh = 0.0
                he = 0.0
                for r in range(m):
                    hh += H[r, j] * H[r, j]
                    he += H[r, j] * ew[r]
                v_new = 1.0 / (1.0 / var[j] + hh)
                var[j] = v_new
                if not exact_mean:
                    mean[j] += v_new * he
        ok = all_finite(mean)
        for j in range(P):
            if not var[j] > 0.0:
                ok = False
        if not (ok and all_finite(var)):
            restore(noise, noise_before)
            return row, REDO_STEP, cur
        for c in range(C):
            scale_out[c] = scale[c]
        cur = nxt
        row += nb
    return row, DONE, cur


@njit(cache=True, nogil=True)
def diagonal_hypotheses(X, Y, w, has_weights, batch, shapes, offsets, codes, means, variances, fd, exact_mean,
                        likelihood, noises, noise_params, adaptive, max_abs, g, q, rec_f, rec_quad, rec_noise, limit,
                        tiny, scales):
    """One step for each of ``K`` diagonal beliefs (stacks ``means``, ``variances (K, P)``), in place;
    as :func:`skfilter.kernels.lofi.lofi_hypotheses`."""
    K, P = means.shape
    slot_means = np.empty((2, P), dtype=means.dtype)
    slot_vars = np.empty((2, P), dtype=means.dtype)
    for k in range(K):
        slot_means[0] = means[k]
        slot_vars[0] = variances[k]
        done, status, cur = diagonal_rows(X, Y, w, has_weights, batch, shapes, offsets, codes, slot_means, slot_vars,
                                          0, fd, exact_mean, likelihood, noises[k], noise_params, adaptive, max_abs,
                                          0, 1.0, g, q, True, rec_f[k], rec_quad[k], rec_noise[k], limit, tiny, scales[k])
        if status != DONE:
            return k, status
        means[k] = slot_means[cur]
        variances[k] = slot_vars[cur]
    return K, DONE
