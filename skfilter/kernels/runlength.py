"""Run-length filtering (BOCD: RL[K]-PR, RL[K]-MMPR) over LoFi, the VD/FD-EKF, the full EKF and the
factored covariance (LRKF, HiLoFi, LoLoFi), many rows per compiled call (numba).

The step of :func:`skfilter.runlength.runlength_step` with ``reset='prior'`` (thesis Alg. 8,
eqs. 3.46–3.53; the corrected line 13) or ``reset='moment-matched'`` (Alg. 9, eqs. 3.54–3.57, the
weights normalised; not over LoFi, which has no moment match) for one row per step, over a
compiled filter step:

1. candidates: each of the ``K`` kept hypotheses moved by the base's dynamics (``g``, ``q``) and
   one changepoint candidate (no dynamics of its own) with the noise state of the most probable
   hypothesis, from the prior belief (RL[K]-PR) or from the Gaussian of the structure
   moment-matched to the kept hypotheses' *predicted* beliefs with weights ``softmax(log ν)``
   (RL[K]-MMPR: :func:`diagonal_moment_match_into`, :func:`full_moment_match_into`,
   :func:`factored_moment_match_into`, read from the kept slots, written into the candidate's);
2. each candidate learns the row (:func:`~skfilter.kernels.lofi.lofi_rows`, the diagonal, the
   full or the factored kernel; with the base's robust weighting, WoLF, as there), recording its prior predictive
   ``f``, ``J Σ⁻ Jᵀ`` and noise;
3. its log predictive density of the row (:func:`log_predictive_row`: the likelihoods'
   ``log_predictive``, the moment-matched categorical's a Gaussian's; under a robust weighting with
   ``R / W²`` when the evidence is weighted), times the row's sample weight;
4. log joints ``ℓ_k + log ν(k) + log(1 − H)`` and ``ℓ₀ + log H``; their log-sum-exp is the row's
   evidence; the ``K`` largest are kept (:func:`keep_order`: ranked on a grid of ``2⁻³⁰`` in
   ``log ν``, ties to the longer run) and renormalised.

**No belief is copied per step.** Beliefs live in a pool of ``2K + 1`` slots. The kept hypotheses
are a list of slot indices; each candidate reads its source slot (or the prior) and writes a free
slot, and the kept candidates' slots become the new list. A step the LoFi kernel cannot finish
(stiff, non-finite, logits past the bound) stops the call before anything of that row is kept: the
slots of the kept hypotheses are never written, and the caller redoes the row on the torch engine.

Over the full EKF (:func:`full_runlength_rows`) a ``P × P`` covariance is too large to write for
a candidate that may be dropped: every candidate is checked first and only the kept ones are
written, each hypothesis in place in its own slot (``K + 1`` slots), with the next row's read of
``Σ`` in the same pass. Its moment-matched changepoint prior is written (with its ``J Σ̄``) into the
one slot no hypothesis holds, and updated there in place when kept; within a call it is built while
the previous row writes the kept covariances, in the same pass (:func:`full_write_read_match`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .linalg import cholesky_into, solve_lower
from .observations import MOMENT_MATCHED_LIKELIHOOD, robust_step_weights
from .diagonal import diagonal_rows
from .factored import CHOLESKY, CHOLESKY_EXACT_NOISE, best_rank_into, block_view, factored_rows, qr_factor_into
from .full import (full_linearise, full_solve, full_step_buffers, full_write, full_write_read, read_rows,
                   write_read_rows)
from .lofi import DONE, REDO_STEP, lofi_rows

#: likelihood codes (:data:`~skfilter.kernels.observations.LIKELIHOOD_CODES`)
_GAUSSIAN, _BERNOULLI = 0, 1

_LOG_2PI = math.log(2.0 * math.pi)

#: the hypotheses are ranked by their log weights rounded to multiples of ``1 / KEEP_GRID``
#: (:func:`weight_key`): weights equal to ~1e-9 relative count as tied (and go to the longer run), so
#: that rounding does not decide between candidates whose weights agree in exact arithmetic (the
#: moment-matched changepoint candidate and a continuing hypothesis can: both paths then keep the
#: same run lengths)
KEEP_GRID = 2.0 ** 30


@njit(cache=True, nogil=True)
def _probit_log_probability(likelihood, f, quad, y, tiny):
    """``log p(y)`` of a classification row under the probit predictive: one logit
    ``p₁ = σ(f / √(1 + π v / 8))`` with ``v = quad[0, 0]``; ``C`` logits the softmax of
    ``f_c / √(1 + π v_c / 8)`` with the shift-free variances ``v_c = C/(C − 1) [Π Q Π]_cc``
    (:func:`~skfilter.likelihoods.shift_free_logit_variance`); ``y`` the class index (one logit) or
    the one-hot row. Probabilities floored at ``tiny`` as :meth:`Likelihood.log_predictive`."""
    C = f.shape[0]
    if C == 1:
        z = f[0] / math.sqrt(1.0 + (math.pi / 8.0) * quad[0, 0])
        p1 = 1.0 / (1.0 + math.exp(-z))
        p = p1 if y[0] > 0.5 else 1.0 - p1
        return math.log(max(p, tiny))
    mean_all = 0.0
    rows = np.empty(C, dtype=f.dtype)
    for c in range(C):
        s = 0.0
        for c2 in range(C):
            s += quad[c, c2]
        rows[c] = s / C
        mean_all += rows[c]
    mean_all /= C
    z = np.empty(C, dtype=f.dtype)
    zmax = -np.inf
    for c in range(C):
        v = quad[c, c] - 2.0 * rows[c] + mean_all
        v = max(v, 0.0) * (C / (C - 1.0))
        z[c] = f[c] / math.sqrt(1.0 + (math.pi / 8.0) * v)
        zmax = max(zmax, z[c])
    total = 0.0
    for c in range(C):
        z[c] = math.exp(z[c] - zmax)
        total += z[c]
    p = 0.0
    for c in range(C):
        p += z[c] / total * y[c]
    return math.log(max(p, tiny))


@njit(cache=True, nogil=True)
def _gaussian_log_density(e, S, tiny):
    """``log N(e; 0, S)`` of a residual ``e (C,)`` (``S`` overwritten): one output with the variance
    floored at ``tiny``, else by the Cholesky factor of ``S`` — NaN when it is not positive definite
    (:meth:`skfilter.likelihoods.Likelihood.log_predictive`)."""
    C = e.shape[0]
    if C == 1:
        v = max(S[0, 0], tiny)
        return -0.5 * (e[0] * e[0] / v + math.log(v) + _LOG_2PI)
    Lc = np.empty((C, C), dtype=S.dtype)
    if not cholesky_into(S, Lc):
        return np.nan
    solve_lower(Lc, e)
    out = 0.0
    for c in range(C):
        out += e[c] * e[c] + 2.0 * math.log(Lc[c, c])
    return -0.5 * (out + C * _LOG_2PI)


@njit(cache=True, nogil=True)
def _moment_matched_predictive(f, quad, y, epsilon, inflate, e, S):
    """The predictive of :class:`~skfilter.likelihoods.MomentMatchedCategorical` (its inherited
    ``log_predictive``) into ``e``, ``S``: the mean ``m = softmax(f)`` (``σ(f)`` for one logit), the
    residual ``e = y − m`` and ``S = G (J Σ⁻ Jᵀ) Gᵀ + R`` with ``G = diag(m) − m mᵀ`` (``m(1 − m)``),
    ``R = G + ε I``; with a robust weight ``W``, ``+ (1/W² − 1) R`` (``inflate``)."""
    C = f.shape[0]
    m = np.empty(C, dtype=S.dtype)
    if C == 1:
        m[0] = 1.0 / (1.0 + math.exp(-f[0]))
    else:
        top = f[0]
        for c in range(1, C):
            top = max(top, f[c])
        total = 0.0
        for c in range(C):
            m[c] = math.exp(f[c] - top)
            total += m[c]
        for c in range(C):
            m[c] /= total
    G = np.empty((C, C), dtype=S.dtype)
    for a in range(C):
        e[a] = y[a] - m[a]
        for b in range(C):
            G[a, b] = (m[a] if a == b else 0.0) - m[a] * m[b]
    GQ = np.dot(G, np.ascontiguousarray(quad))
    for a in range(C):
        for b in range(C):
            t = 0.0
            for c in range(C):
                t += GQ[a, c] * G[b, c]
            R = G[a, b] + (epsilon if a == b else 0.0)
            S[a, b] = t + R
            if inflate != 0.0:
                S[a, b] += R * inflate


@njit(cache=True, nogil=True)
def log_predictive_row(likelihood, f, quad, noise, y, tiny, inflate, epsilon):
    """``log p(y | D)`` of one row under a candidate's linearised prior predictive
    (:meth:`skfilter.likelihoods.Likelihood.log_predictive`): Gaussian ``log N(y; f, J Σ⁻ Jᵀ + diag(r))``
    (thesis eq. 3.51; ``noise`` the variances ``r`` before the step; with a robust weight ``W`` the
    weighted likelihood's ``R / W²``: ``R`` plus ``inflate = 1/W² − 1`` times ``R``); the
    moment-matched categorical's Gaussian ``log N(y; m, G J Σ⁻ Jᵀ Gᵀ + R)`` (jitter ``epsilon``,
    :func:`_moment_matched_predictive`); the other classifiers' probit probability of the observed
    class (:func:`_probit_log_probability`). Returns NaN when a Gaussian predictive covariance is not
    positive definite."""
    C = f.shape[0]
    if likelihood != _GAUSSIAN and likelihood != MOMENT_MATCHED_LIKELIHOOD:
        return _probit_log_probability(likelihood, f, quad, y, tiny)
    S = np.empty((C, C), dtype=f.dtype)
    e = np.empty(C, dtype=f.dtype)
    if likelihood == MOMENT_MATCHED_LIKELIHOOD:
        _moment_matched_predictive(f, quad, y, epsilon, inflate, e, S)
        return _gaussian_log_density(e, S, tiny)
    for a in range(C):
        e[a] = y[a] - f[a]
        for b in range(C):
            S[a, b] = quad[a, b]
        S[a, a] += noise[a]
        if inflate != 0.0:
            S[a, a] += noise[a] * inflate
    return _gaussian_log_density(e, S, tiny)


@njit(cache=True, nogil=True)
def scored_log_predictive(likelihood, f, quad, noise, y1, w1, has_weights, weight_kind, weight_c, weighted_evidence,
                          tiny, w2, epsilon):
    """A candidate's score of one row (thesis eq. 3.51): :func:`log_predictive_row` of ``y1[0]``
    under its prior predictive ``f (1, C)``, ``quad (1, C, C)`` and noise variances ``noise``
    (before the step), times the row's sample weight ``w1[0]``; with a robust weighting
    (``weight_kind > 0``) and ``weighted_evidence``, under ``R / W²``, ``W`` the candidate's robust
    weight from that predictive (:func:`~skfilter.kernels.observations.robust_step_weights`, into
    the work array ``w2``; ``epsilon``: the moment-matched likelihood's, see :func:`log_predictive_row`).
    NaN when a predictive covariance is not positive definite."""
    inflate = 0.0
    if weighted_evidence and weight_kind > 0:
        if not robust_step_weights(weight_kind, weight_c, f, y1, w1, False, noise, quad, w2):
            return np.nan
        inflate = 1.0 / max(w2[0], tiny) - 1.0
    lp = log_predictive_row(likelihood, f[0], quad[0], noise, y1[0], tiny, inflate, epsilon)
    if has_weights:
        lp = lp * w1[0]
    return lp


@njit(cache=True, nogil=True)
def logsumexp(x, n):
    """``log Σ_{i<n} exp(x_i)`` (shifted by the largest; ``−∞`` when all are)."""
    m = -np.inf
    for i in range(n):
        if x[i] > m:
            m = x[i]
    if m == -np.inf:
        return m
    s = 0.0
    for i in range(n):
        s += math.exp(x[i] - m)
    return m + math.log(s)


@njit(cache=True, nogil=True)
def weight_key(log_weight):
    """The log weight on the grid the hypotheses are ranked on, ``⌊log ν · KEEP_GRID + ½⌋``
    (:data:`KEEP_GRID`): weights within ~1e-9 relative of each other share it. A float64 (as the
    engine's ``_weight_key``: an integer would overflow below ``log ν ≈ −8.6e9``, which a hypothesis
    meeting a jump far outside a tiny predictive variance reaches); ``−∞`` and NaN stay so. Two
    weights a few ulps apart can still fall on either side of a grid line (with a probability of
    about their difference over the grid's step)."""
    return np.floor(log_weight * KEEP_GRID + 0.5)


@njit(cache=True, nogil=True)
def keep_order(log_post, run_lengths, n, n_keep, out):
    """Indices of the kept candidates among the first ``n`` into ``out``, finite weights only, at
    most ``n_keep`` (``< 0``: all), ranked by :func:`weight_key` (decreasing), then by run length
    (the longer first), then by index — the order of :func:`skfilter.runlength._keep`. Returns their
    count."""
    count = 0
    for i in range(n):
        if not np.isfinite(log_post[i]):
            continue
        key = weight_key(log_post[i])
        # insertion into the sorted prefix (after every candidate that ranks as high)
        j = count
        while j > 0:
            prev = out[j - 1]
            prev_key = weight_key(log_post[prev])
            if prev_key > key or (prev_key == key and run_lengths[prev] >= run_lengths[i]):
                break
            out[j] = prev
            j -= 1
        out[j] = i
        count += 1
    if 0 <= n_keep < count:
        count = n_keep
    return count


@njit(cache=True, nogil=True)
def _free_slots(slots, K, used, dest):
    """The first ``K + 1`` pool slots not among the ``K`` kept hypotheses' ``slots`` into ``dest``."""
    for s in range(used.shape[0]):
        used[s] = False
    for k in range(K):
        used[slots[k]] = True
    j = 0
    for s in range(used.shape[0]):
        if j > K:
            break
        if not used[s]:
            dest[j] = s
            j += 1


@njit(cache=True, nogil=True)
def _most_probable(log_weights, K):
    """Index of the most probable of the ``K`` hypotheses: the largest :func:`weight_key` of their
    log weights, the first on ties (:func:`skfilter.runlength._most_probable`)."""
    best = 0
    best_key = weight_key(log_weights[0])
    for k in range(1, K):
        key = weight_key(log_weights[k])
        if key > best_key:
            best, best_key = k, key
    return best


@njit(cache=True, nogil=True)
def mixture_weights(log_weights, K, out):
    """The normalised weights ``w_k = softmax(log ν)_k`` of the ``K`` kept hypotheses into ``out``:
    the weights of the moment-matched reset (thesis eqs. 3.55–3.56, normalised;
    :meth:`skfilter.posteriors.Structure.moment_match`)."""
    top = log_weights[0]
    for k in range(1, K):
        top = max(top, log_weights[k])
    total = 0.0
    for k in range(K):
        out[k] = math.exp(log_weights[k] - top)
        total += out[k]
    for k in range(K):
        out[k] /= total


@njit(cache=True, nogil=True)
def diagonal_moment_match_into(means, variances, slots, weights, K, g, q, mean_out, var_out):
    """RL-MMPR's changepoint prior over the diagonal (thesis eqs. 3.55–3.57 projected on diagonal
    Gaussians, :meth:`skfilter.posteriors.DiagonalCovariance.moment_match`): the mixture of the ``K``
    hypotheses' *predicted* beliefs ``N(g μ_k, diag(g² v_k + q))`` (slots ``slots`` of ``means``,
    ``variances (S, P)``) with weights ``w``, ``μ̄ = Σ_k w_k g μ_k`` and
    ``v̄ = Σ_k w_k (g² v_k + q + (g μ_k − μ̄)²)``, into ``mean_out``, ``var_out``."""
    g2 = g * g
    for j in range(mean_out.shape[0]):
        mu = 0.0
        for k in range(K):
            mu += weights[k] * (g * means[slots[k], j])
        v = 0.0
        for k in range(K):
            dk = g * means[slots[k], j] - mu
            v += weights[k] * (g2 * variances[slots[k], j] + q + dk * dk)
        mean_out[j] = mu
        var_out[j] = v


@njit(cache=True, nogil=True)
def moment_matched_mean_into(means, slots, weights, K, g, mean_out):
    """``μ̄ = Σ_k w_k g μ_k`` (thesis eq. 3.55 over the predicted means) of the slots ``slots`` of
    ``means (S, P)`` into ``mean_out``."""
    for j in range(mean_out.shape[0]):
        mu = 0.0
        for k in range(K):
            mu += weights[k] * (g * means[slots[k], j])
        mean_out[j] = mu


@njit(cache=True, nogil=True)
def _spreads_into(means, slots, K, g, mean, spread):
    """``d_k = g μ_k − μ̄`` of the slots ``slots`` of ``means (S, P)`` into ``spread[:K]`` (``mean``:
    ``μ̄``, :func:`moment_matched_mean_into`)."""
    for k in range(K):
        src = means[slots[k]]
        dk = spread[k]
        for j in range(mean.shape[0]):
            dk[j] = g * src[j] - mean[j]


@njit(cache=True, nogil=True)
def _match_rows(covs, slots, weights, K, g2, q, spread, out, H, U, mh, zero, i, width):
    """The rows ``i … i + width − 1`` of ``Σ̄ = Σ_k w_k (g² Σ_k + q I + d_k d_kᵀ)`` (thesis eq. 3.57
    over the predicted beliefs ``Σ_k⁻ = g² Σ_k + q I``; ``Σ_k`` the slots ``slots`` of
    ``covs (S, P, P)``, ``d_k`` the rows of ``spread``) into ``out``, and their dot products with
    ``H[:mh]`` into ``U[:mh]`` (:func:`~skfilter.kernels.full.read_rows`): ``J Σ̄``. Row ``r`` of
    ``Σ̄`` is ``q e_r + Σ_k (w_k g²) Σ_k[r] + (w_k d_k[r]) d_k``, summed two hypotheses at a time (the
    second of an odd ``K`` with weight 0: the same sums) and, with ``width == 4``, for the four rows
    in one pass: each ``d_k`` loaded once for the four, each row of ``Σ̄`` loaded and stored once per
    two hypotheses."""
    P = out.shape[0]
    for r in range(i, i + width):
        row = out[r]
        for j in range(P):
            row[j] = 0.0
        row[r] = q
    for k in range(0, K, 2):
        k1 = k + 1 if k + 1 < K else k
        w0 = weights[k]
        w1 = weights[k1] if k + 1 < K else 0.0
        a0, a1 = w0 * g2, w1 * g2
        S0, S1 = covs[slots[k]], covs[slots[k1]]
        d0, d1 = spread[k], spread[k1]
        if width == 4:
            r0, r1, r2, r3 = out[i], out[i + 1], out[i + 2], out[i + 3]
            s00, s01, s02, s03 = S0[i], S0[i + 1], S0[i + 2], S0[i + 3]
            s10, s11, s12, s13 = S1[i], S1[i + 1], S1[i + 2], S1[i + 3]
            b00, b01, b02, b03 = w0 * d0[i], w0 * d0[i + 1], w0 * d0[i + 2], w0 * d0[i + 3]
            b10, b11, b12, b13 = w1 * d1[i], w1 * d1[i + 1], w1 * d1[i + 2], w1 * d1[i + 3]
            for j in range(P):
                x0 = d0[j]
                x1 = d1[j]
                r0[j] += (a0 * s00[j] + b00 * x0) + (a1 * s10[j] + b10 * x1)
                r1[j] += (a0 * s01[j] + b01 * x0) + (a1 * s11[j] + b11 * x1)
                r2[j] += (a0 * s02[j] + b02 * x0) + (a1 * s12[j] + b12 * x1)
                r3[j] += (a0 * s03[j] + b03 * x0) + (a1 * s13[j] + b13 * x1)
        else:
            for r in range(i, i + width):
                row, s0, s1 = out[r], S0[r], S1[r]
                b0, b1 = w0 * d0[r], w1 * d1[r]
                for j in range(P):
                    row[j] += (a0 * s0[j] + b0 * d0[j]) + (a1 * s1[j] + b1 * d1[j])
    read_rows(out, i, width, H, U, mh, zero)


@njit(cache=True, nogil=True)
def full_moment_match_into(means, covs, slots, weights, K, g, q, mean, spread, out, H, U, mh, zero):
    """RL-MMPR's changepoint prior over the full covariance (thesis eqs. 3.56–3.57,
    :meth:`skfilter.posteriors.FullCovariance.moment_match`): with the mixture's mean
    ``μ̄ = Σ_k w_k g μ_k`` (``mean``, :func:`moment_matched_mean_into`) and ``d_k = g μ_k − μ̄`` (into
    ``spread (≥ K, P)``), ``Σ̄ = Σ_k w_k (g² Σ_k + q I + d_k d_kᵀ)`` of the hypotheses' *predicted*
    beliefs ``N(g μ_k, g² Σ_k + q I)`` (slots ``slots`` of ``means``, ``covs (S, P, P)``) into
    ``out``, and in the same pass ``U[:mh] = H[:mh] Σ̄`` (the next step's ``J Σ̄``, each row of ``Σ̄``
    dotted with ``H`` while in cache; :func:`_match_rows`, four rows at a time): one pass reading the
    ``K`` covariances and writing ``Σ̄`` — no hypothesis' belief is copied. (Within a call,
    :func:`full_write_read_match` builds it while the covariances are written instead.)"""
    P = out.shape[0]
    _spreads_into(means, slots, K, g, mean, spread)
    i = 0
    while i < P:
        width = min(4, P - i)
        _match_rows(covs, slots, weights, K, g * g, q, spread, out, H, U, mh, zero, i, width)
        i += width


@njit(cache=True, nogil=True)
def full_write_read_match(covs, Vs, writes, n_writes, m, g2, q, dynamic, next_H, next_U, zero, slots, weights, K,
                          spread, free):
    """Phase 3 of a row of :func:`full_runlength_rows` fused with the next row's moment match, one
    pass over the pool, four rows at a time: for each write ``(k, source, destination, moves)`` of
    ``writes[:n_writes]`` the rows of ``Σ' = g² Σ + q I − V Vᵀ`` (``V = Vs[k]``; the dynamics only when
    ``moves``, else ``Σ' = Σ − V Vᵀ``) from the source slot into the destination slot and their
    ``J Σ'`` (:func:`~skfilter.kernels.full.write_read_rows`, as :func:`~skfilter.kernels.full.full_write_read`
    with ``next_H``, ``next_U`` of the destination), then, from those rows while they are in cache,
    the same rows of the next row's matched prior (thesis eqs. 3.56–3.57)::

        Σ̄ = Σ_k w_k (g² Σ_k' + q I + d_k d_kᵀ),   d_k = g μ_k' − μ̄,   μ̄ = Σ_k w_k g μ_k'

    of the ``K`` kept posteriors ``Σ_k'`` just written (slots ``slots``, weights ``w``: the kept
    hypotheses' normalised posterior weights, the next row's ``softmax(log ν)``; ``d_k`` in
    ``spread``) into the slot ``free`` that no kept hypothesis holds, with its ``J Σ̄``
    (``next_H[free]`` into ``next_U[free]``; :func:`_match_rows`) — the numbers of
    :func:`full_moment_match_into` at the start of the next row, without its pass over the ``K``
    covariances. A write whose source is another slot (the changepoint candidate's with one
    hypothesis) comes before the write of that slot (``writes`` in that order): row ``i`` of a write
    reads row ``i`` of its source only."""
    P = covs.shape[1]
    no_diag = np.empty(0, dtype=covs.dtype)
    out = covs[free]
    i = 0
    while i < P:
        width = min(4, P - i)
        for w in range(n_writes):
            src, d = writes[w, 1], writes[w, 2]
            if writes[w, 3] != 0:
                g2w, qw, dyn = g2, q, dynamic
            else:
                g2w, qw, dyn = 1.0, 0.0, False
            write_read_rows(covs[src], no_diag, covs[d], Vs[writes[w, 0]], m, g2w, qw, dyn, src == d, next_H[d],
                            next_U[d], m, zero, no_diag, i, width)
        _match_rows(covs, slots, weights, K, g2, q, spread, out, next_H[free], next_U[free], m, zero, i, width)
        i += width


@njit(cache=True, nogil=True)
def factored_moment_match_into(means, factors, pendings, slots, weights, K, g, q_blocks, positions, starts, fstarts,
                               ranks, kinds, eps, mean_out, factors_out, pending_out, stack):
    """RL-MMPR's changepoint prior over the factored covariance
    (:meth:`skfilter.posteriors.FactoredCovariance.moment_match`) of the hypotheses' *predicted*
    beliefs ``N(g μ_k, blockdiag(g² B_{k,b}ᵀB_{k,b} + (g² q_{k,b} + Q_b) I))`` (slots ``slots`` of the
    pools ``means (S, 2, P)``, ``factors (S, 2, F)``, ``pendings (S, 2, n_blocks)``, first halves;
    layout as :func:`~skfilter.kernels.factored.factored_rows`): ``μ̄ = Σ_k w_k g μ_k``,
    ``q̄_b = Σ_k w_k (g² q_{k,b} + Q_b)`` and per block the factor of
    ``Σ_k w_k (g² B_{k,b}ᵀB_{k,b} + d_k d_kᵀ)``, ``d_k = g μ_{k,b} − μ̄_b``, from the stack of the
    ``√w_k g B_{k,b}`` and the rows ``√w_k d_kᵀ`` (in ``stack``, ``≥ K (r_b + 1) D_b``): its
    ``Q_R`` for a Cholesky block (:func:`~skfilter.kernels.factored.qr_factor_into`, exact), its
    ``P_d`` for a low-rank block (:func:`~skfilter.kernels.factored.best_rank_into`) — thesis
    eqs. 3.55–3.57 in the structure; into ``mean_out``, ``factors_out``, ``pending_out``."""
    moment_matched_mean_into(means[:, 0], slots, weights, K, g, mean_out)
    g2 = g * g
    for b in range(ranks.shape[0]):
        t = 0.0
        for k in range(K):
            t += weights[k] * (pendings[slots[k], 0, b] * g2 + q_blocks[b])
        pending_out[b] = t
        s, e = starts[b], starts[b + 1]
        D = e - s
        r = ranks[b]
        N = block_view(stack, 0, K * (r + 1), D)
        for k in range(K):
            root = math.sqrt(weights[k])
            B = block_view(factors[slots[k], 0], fstarts[b], r, D)
            for u in range(r):
                for j in range(D):
                    N[k * r + u, j] = root * (g * B[u, j])
            for j in range(D):
                p = positions[s + j]
                N[K * r + k, j] = root * (g * means[slots[k], 0, p] - mean_out[p])
        out = block_view(factors_out, fstarts[b], r, D)
        if kinds[b] == CHOLESKY or kinds[b] == CHOLESKY_EXACT_NOISE:
            qr_factor_into(N, out)
        else:
            best_rank_into(N, 0.0, eps, out)


@njit(cache=True, nogil=True)
def _weigh_and_keep(likelihood, cand_f, cand_quad, cand_noise, y1, w1, has_weights, K, dest, slots, log_weights,
                    run_lengths, counts, n_keep, log_h, log_s, tiny, record, row, rec_f, rec_quad, rec_noise,
                    rec_weights, evidence, log_joint, cand_runs, order, new_slots, new_logw, new_runs, weight_kind,
                    weight_c, weighted_evidence, w2, epsilon):
    """Steps 3–4 of a row (module docstring) once its ``K + 1`` candidates have learned it into the
    slots ``dest``: their log predictive densities (times the row's weight ``w1[0]``; with a robust
    weighting and ``weighted_evidence``, under ``R / W²``, ``W`` each candidate's robust weight from
    its prior predictive, :func:`~skfilter.kernels.observations.robust_step_weights`; ``epsilon`` the
    moment-matched likelihood's jitter), the joints, the
    row's evidence, the ``K`` most probable kept (``slots``, ``log_weights``, ``run_lengths``,
    ``counts[0]`` rewritten), and with ``record`` the row's candidates into ``rec_*[row]``. Returns
    False (nothing changed) when a density is not finite or no candidate is left."""
    C = y1.shape[1]
    K_max = slots.shape[0]
    for k in range(K + 1):
        lp = scored_log_predictive(likelihood, cand_f[k], cand_quad[k], cand_noise[k, 0], y1, w1, has_weights,
                                   weight_kind, weight_c, weighted_evidence, tiny, w2, epsilon)
        if not np.isfinite(lp):
            return False
        if k < K:
            log_joint[k] = lp + log_weights[k] + log_s
            cand_runs[k] = run_lengths[k] + 1
        else:
            log_joint[k] = lp + log_h
            cand_runs[k] = 0
    step_evidence = logsumexp(log_joint, K + 1)
    for k in range(K + 1):
        log_joint[k] -= step_evidence
    kept = keep_order(log_joint, cand_runs, K + 1, n_keep, order)
    if kept == 0:
        return False
    if record:
        for k in range(K_max + 1):
            src = k if k <= K else K
            for c in range(C):
                rec_f[row, k, c] = cand_f[src, 0, c]
                rec_noise[row, k, c] = cand_noise[src, 0, c]
                for c2 in range(C):
                    rec_quad[row, k, c, c2] = cand_quad[src, 0, c, c2]
            rec_weights[row, k] = math.exp(log_weights[k]) if k < K else 0.0
    for i in range(kept):
        new_logw[i] = log_joint[order[i]]
        new_slots[i] = dest[order[i]]
        new_runs[i] = cand_runs[order[i]]
    norm = logsumexp(new_logw, kept)
    for i in range(kept):
        slots[i] = new_slots[i]
        log_weights[i] = new_logw[i] - norm
        run_lengths[i] = new_runs[i]
    counts[0] = kept
    evidence[0] += step_evidence
    evidence[1] = math.exp(log_joint[K])
    return True


@njit(cache=True, nogil=True)
def _bookkeeping_buffers(K_max, S, C, D, dt, xdt, ydt, wdt):
    """The per-call work arrays of a run-length kernel (the row, the candidates' records, the
    bookkeeping of :func:`_weigh_and_keep`)."""
    return (np.empty((1, D), dtype=xdt), np.empty((1, C), dtype=ydt), np.ones(1, dtype=wdt),
            np.empty((K_max + 1, 1, C), dtype=dt), np.empty((K_max + 1, 1, C, C), dtype=dt),
            np.empty((K_max + 1, 1, C), dtype=dt), np.empty(K_max + 1, dtype=np.int64), np.zeros(S, dtype=np.bool_),
            np.empty(K_max + 1, dtype=np.float64), np.empty(K_max + 1, dtype=np.int64),
            np.empty(K_max + 1, dtype=np.int64), np.empty(K_max, dtype=np.int64), np.empty(K_max, dtype=np.float64),
            np.empty(K_max, dtype=np.int64), np.empty(1, dtype=dt))


@njit(cache=True, nogil=True)
def load_row(X, Y, w, has_weights, row, x1, y1, w1):
    for d in range(X.shape[1]):
        x1[0, d] = X[row, d]
    for c in range(Y.shape[1]):
        y1[0, c] = Y[row, c]
    if has_weights:
        w1[0] = w[row]


@njit(cache=True, nogil=True)
def _begin_row(X, Y, w, has_weights, row, x1, y1, w1, slots, counts, used, dest, log_weights):
    """A row's start: the row into ``x1``, ``y1``, ``w1``, the ``K + 1`` free slots into ``dest``;
    returns ``K`` and the most probable hypothesis (whose noise the changepoint candidate takes)."""
    K = counts[0]
    load_row(X, Y, w, has_weights, row, x1, y1, w1)
    _free_slots(slots, K, used, dest)
    return K, _most_probable(log_weights, K)


@njit(cache=True, nogil=True)
def lofi_runlength_rows(X, Y, w, has_weights, shapes, offsets, codes, in_scale, in_shift, in_bound,
                        pool_means, pool_diags, pool_factors, pool_etas, pool_m0s, pool_noises, pool_scales,
                        prior_mean, prior_diag, prior_W, prior_eta, prior_m0,
                        slots, log_weights, run_lengths, counts, n_keep, log_h, log_s,
                        likelihood, noise_params, adaptive, max_abs, g, q, limit, tiny,
                        record, rec_f, rec_quad, rec_noise, rec_weights, evidence, weight_kind, weight_c,
                        weighted_evidence):
    """Filter the rows of ``X (n, D)``, ``Y (n, C)`` one per step by RL[K]-PR over LoFi (module
    docstring), in place on the pool and the hypotheses' bookkeeping.

    The pool: ``pool_means (S, 1, P)``, ``pool_diags (S, 1, P)``, ``pool_factors (S, 1, L, P)``
    (``Wᵀ``), ``pool_etas (S, E)``, ``pool_m0s (S, P)``, ``pool_noises (S, C + 1)`` (Gaussian
    ``[r, Σw]``), ``pool_scales (S, C)``, ``S ≥ 2 K_max + 1``; the prior belief ``prior_*`` (the
    changepoint candidate's source). The ``counts[0]`` kept hypotheses: slots ``slots``, normalised
    ``log_weights``, ``run_lengths`` (arrays of length ``K_max``, most probable first).
    ``n_keep``: ``K``. ``log_h``, ``log_s``: ``log H``, ``log(1 − H)``. With ``record``: each row's
    candidates' ``f``, ``J Σ⁻ Jᵀ``, noise variances and mixture weights (before the row; 0 for the
    changepoint candidate and for unused entries) into ``rec_f (n, K_max + 1, C)``, ``rec_quad``,
    ``rec_noise``, ``rec_weights (n, K_max + 1)``. ``evidence``: ``[Σ log p(y_t | D), changepoint
    probability of the last row]``, updated per row.

    Returns ``(rows_done, status)``: :data:`DONE`, or :data:`REDO_STEP` when the row ``rows_done``
    must be done by the torch engine (the kept hypotheses untouched).
    """
    n, D = X.shape
    C = Y.shape[1]
    K_max = slots.shape[0]
    (x1, y1, w1, cand_f, cand_quad, cand_noise, dest, used, log_joint, cand_runs, order, new_slots, new_logw,
     new_runs, w2) = _bookkeeping_buffers(K_max, pool_means.shape[0], C, D, pool_means.dtype, X.dtype, Y.dtype,
                                          w.dtype)
    for row in range(n):
        K, best = _begin_row(X, Y, w, has_weights, row, x1, y1, w1, slots, counts, used, dest, log_weights)
        for k in range(K + 1):  # every candidate learns the row into its own free slot
            d = dest[k]
            if k < K:
                src = slots[k]
                pool_noises[d, :] = pool_noises[src, :]
                pool_etas[d, :] = pool_etas[src, :]
                pool_m0s[d, :] = pool_m0s[src, :]
                done, status, cur = lofi_rows(x1, y1, w1, has_weights, 1, shapes, offsets, codes, in_scale, in_shift,
                                              in_bound, pool_means[src, 0], pool_diags[src, 0], pool_factors[src, 0],
                                              pool_means[d], pool_diags[d], pool_factors[d], -1, likelihood,
                                              pool_noises[d], noise_params, adaptive, max_abs, weight_kind, weight_c,
                                              g, q, pool_etas[d], pool_m0s[d], True, cand_f[k], cand_quad[k],
                                              cand_noise[k],
                                              limit, tiny, pool_scales[d])
            else:  # the changepoint candidate: the prior, the most probable hypothesis' noise, no dynamics
                pool_noises[d, :] = pool_noises[slots[best], :]
                pool_etas[d, :] = prior_eta
                pool_m0s[d, :] = prior_m0
                done, status, cur = lofi_rows(x1, y1, w1, has_weights, 1, shapes, offsets, codes, in_scale, in_shift,
                                              in_bound, prior_mean, prior_diag, prior_W,
                                              pool_means[d], pool_diags[d], pool_factors[d], -1, likelihood,
                                              pool_noises[d], noise_params, adaptive, max_abs, weight_kind, weight_c,
                                              1.0, 0.0, pool_etas[d], pool_m0s[d], True, cand_f[k], cand_quad[k],
                                              cand_noise[k],
                                              limit, tiny, pool_scales[d])
            if status != DONE:
                return row, REDO_STEP
        if not _weigh_and_keep(likelihood, cand_f, cand_quad, cand_noise, y1, w1, has_weights, K, dest, slots,
                               log_weights, run_lengths, counts, n_keep, log_h, log_s, tiny, record, row, rec_f,
                               rec_quad, rec_noise, rec_weights, evidence, log_joint, cand_runs, order, new_slots,
                               new_logw, new_runs, weight_kind, weight_c, weighted_evidence, w2,
                               noise_params[0]):
            return row, REDO_STEP
    return n, DONE


@njit(cache=True, nogil=True)
def full_runlength_rows(X, Y, w, has_weights, shapes, offsets, codes, pool_means, pool_covs, pool_noises, pool_scales,
                        prior_mean, prior_cov, slots, log_weights, run_lengths, counts, n_keep, log_h, log_s,
                        likelihood, noise_params, adaptive, max_abs, g, q, limit, tiny,
                        record, rec_f, rec_quad, rec_noise, rec_weights, evidence, weight_kind, weight_c,
                        weighted_evidence, prior_diagonal, moment_matched):
    """:func:`lofi_runlength_rows` over the full-covariance EKF: the pool ``pool_means (S, P)``,
    ``pool_covs (S, P, P)``, ``S ≥ K_max + 1``, the prior ``prior_mean``, ``prior_cov``
    (``prior_diagonal``: it is diagonal, and the changepoint candidate takes ``J Σ₀`` and writes
    ``Σ₀ − V Vᵀ`` from its diagonal without a pass over it — the same numbers); rows already as the
    model's first layer takes them (no input map).

    A row in three phases, so that a ``P × P`` belief is written only when it is kept and is updated
    **in place** (:mod:`skfilter.kernels.full`'s stages):

    1. every candidate's step up to its write (:func:`~skfilter.kernels.full.full_solve`: one pass
       reading its source ``Σ`` for ``J Σ⁻``, then every check), keeping its ``Vᵀ``, new mean and
       noise state; nothing of the pool is written, so a failing step leaves the kept hypotheses
       as they were;
    2. the weights and the ``K`` kept (:func:`_weigh_and_keep`);
    3. each kept candidate's ``Σ' = g² Σ + q I − V Vᵀ``: a hypothesis' in its own slot (its only
       reader), the changepoint candidate's from the prior into the slot no hypothesis held; a
       dropped candidate is never written. When another row follows, the same pass takes the
       next row's ``J Σ`` at the kept belief's predicted mean
       (:func:`~skfilter.kernels.full.full_write_read`), so a kept hypothesis costs one pass over
       its ``Σ`` per row (the first row of a call, two).

    With ``moment_matched`` (RL[K]-MMPR, thesis Alg. 9) the changepoint candidate starts from the
    moment-matched mixture of the kept hypotheses' predicted beliefs (eqs. 3.56–3.57,
    ``Σ̄ = Σ_k w_k (g² Σ_k + q I + d_k d_kᵀ)``), in the slot no hypothesis holds, and phase 3 updates it
    there in place. Its weights ``w = softmax(log ν)`` are the kept hypotheses' normalised weights
    after the previous row's phase 2 and its ``Σ_k`` the posteriors that row's phase 3 writes, so
    when another row follows phase 3 builds the next row's ``Σ̄`` (and its ``J Σ̄``) in the same pass
    as it writes them (:func:`full_write_read_match`, four rows of every kept ``Σ_k`` then of ``Σ̄``
    at a time): a hypothesis' ``Σ`` is read and written once per row, as under RL[K]-PR, and never
    copied. The first row of a call builds it in phase 1 instead (:func:`full_moment_match_into`,
    one pass over the ``K`` covariances, the same numbers); a row handed back leaves the kept slots as
    they were (``Σ̄`` is in the free slot only). With one hypothesis the matched prior is that
    hypothesis' predicted belief (``w = 1``, ``d = 0``: the engine's numbers exactly), so the
    changepoint candidate takes the hypothesis' step, written from its slot (in place when the
    hypothesis is dropped).

    The values are those of :func:`~skfilter.kernels.full.full_rows_from` step by step (same
    operations in the same order)."""
    n, D = X.shape
    C = Y.shape[1]
    P = pool_means.shape[1]
    S_slots = pool_means.shape[0]
    K_max = slots.shape[0]
    dt = pool_means.dtype
    (x1, y1, w1, cand_f, cand_quad, cand_noise, dest, used, log_joint, cand_runs, order, new_slots, new_logw,
     new_runs, w2) = _bookkeeping_buffers(K_max, S_slots, C, D, dt, X.dtype, Y.dtype, w.dtype)
    (acts, pre, delta, scratch, H, Ut, Vt, Sm, Lc, z, step_quad, robust, predicted, gain, F, ew, scale, pj,
     noise_before, ew_spare) = full_step_buffers(1, C, D, P, shapes, pool_noises[0], pool_means)
    zero = np.zeros(1, dtype=dt)[0]
    g2 = g * g
    dynamic = g != 1.0 or q != 0.0
    # each candidate's step before its write
    cand_V = np.empty((K_max + 1, C, P), dtype=dt)
    cand_mean = np.empty((K_max + 1, P), dtype=dt)
    cand_state = np.empty((K_max + 1, pool_noises.shape[1]), dtype=dt)
    cand_scale = np.empty((K_max + 1, C), dtype=dt)
    # per slot: the next row's predicted mean, outputs, J and J Σ, taken while its Σ was written
    next_pred = np.empty((S_slots, P), dtype=dt)
    next_F = np.empty((S_slots, 1, C), dtype=dt)
    next_H = np.empty((S_slots, C, P), dtype=dt)
    next_U = np.empty((S_slots, C, P), dtype=dt)
    ready = np.zeros(S_slots, dtype=np.bool_)
    no_diag = np.empty(0, dtype=dt)
    weights = np.empty(K_max, dtype=np.float64)
    spread = np.empty((K_max if moment_matched else 0, P), dtype=dt)
    # phase 3: (candidate, source slot or −1, slot, 1: with the dynamics)
    writes = np.empty((K_max + 1, 4), dtype=np.int64)
    prior_d = np.empty(P if prior_diagonal else 0, dtype=dt)
    for j in range(prior_d.shape[0]):
        prior_d[j] = prior_cov[j, j]
    for row in range(n):
        K = counts[0]
        best = _most_probable(log_weights, K)
        load_row(X, Y, w, has_weights, row, x1, y1, w1)
        for s in range(S_slots):
            used[s] = False
        for k in range(K):
            used[slots[k]] = True
            dest[k] = slots[k]
        for s in range(S_slots):
            if not used[s]:
                dest[K] = s
                break
        # one hypothesis under the matched reset: the matched prior is its predicted belief (w = 1,
        # d = 0) with its noise, so the changepoint candidate's step is its step; kept alone, either
        # is written in place in its slot
        single = moment_matched and K == 1
        if single and n_keep == 1:
            dest[K] = dest[0]
        # 1. every candidate up to its write
        for k in range(K + 1):
            if single and k == K:
                cand_V[k] = cand_V[0]
                cand_mean[k] = cand_mean[0]
                cand_state[k] = cand_state[0]
                cand_scale[k] = cand_scale[0]
                cand_f[k] = cand_f[0]
                cand_quad[k] = cand_quad[0]
                cand_noise[k] = cand_noise[0]
                continue
            if k < K:
                s = slots[k]
                cov_src = pool_covs[s]
                cand_state[k, :] = pool_noises[s, :]
                g2k, qk = g2, q
                if ready[s]:
                    pk, Fk, Hk, Uk = next_pred[s], next_F[s], next_H[s], next_U[s]
                else:
                    pk, Fk, Hk, Uk = predicted, F, H, Ut
                    full_linearise(pool_means[s], g, x1, 0, 1, shapes, offsets, codes, acts, pre, delta, scratch,
                                   pk, Fk, Hk)
                read = not ready[s]
                ready[s] = False
            else:  # the changepoint candidate: the most probable hypothesis' noise, no dynamics
                cand_state[k, :] = pool_noises[slots[best], :]
                g2k, qk = 1.0, 0.0
                pk, Fk, Hk, Uk = predicted, F, H, Ut
                if moment_matched:  # from the matched mixture in the free slot, with its J Σ̄
                    cov_src = pool_covs[dest[K]]
                    read = False
                    if ready[dest[K]]:  # built by the previous row's writes (full_write_read_match)
                        f = dest[K]
                        pk, Fk, Hk, Uk = next_pred[f], next_F[f], next_H[f], next_U[f]
                    else:  # the first row of the call: a pass of its own over the K covariances
                        mixture_weights(log_weights, K, weights)
                        moment_matched_mean_into(pool_means, slots, weights, K, g, pk)
                        full_linearise(pk, 1.0, x1, 0, 1, shapes, offsets, codes, acts, pre, delta, scratch, pk, Fk,
                                       Hk)
                        full_moment_match_into(pool_means, pool_covs, slots, weights, K, g, q, pk, spread, cov_src,
                                               Hk, Uk, C, zero)
                    ready[dest[K]] = False
                else:  # from the prior
                    cov_src = prior_cov
                    full_linearise(prior_mean, 1.0, x1, 0, 1, shapes, offsets, codes, acts, pre, delta, scratch, pk,
                                   Fk, Hk)
                    read = not prior_diagonal
                    if prior_diagonal:  # J Σ₀ = J diag(d): row i of Σ₀ dotted with J is d_i J_i
                        for c in range(C):
                            for j in range(P):
                                Uk[c, j] = prior_d[j] * Hk[c, j]
            if not full_solve(x1, y1, w1, has_weights, 0, 1, cov_src, read, Hk, Uk, Fk, pk, likelihood,
                              cand_state[k], noise_params, adaptive, max_abs, weight_kind, weight_c, g2k, qk, True,
                              cand_f[k], cand_quad[k], cand_noise[k], limit, tiny, zero, Sm, Lc, z, cand_V[k],
                              cand_mean[k], step_quad, robust, ew, cand_scale[k], pj, noise_before, ew_spare, no_diag):
                return row, REDO_STEP
        # 2. weights, the kept
        if not _weigh_and_keep(likelihood, cand_f, cand_quad, cand_noise, y1, w1, has_weights, K, dest, slots,
                               log_weights, run_lengths, counts, n_keep, log_h, log_s, tiny, record, row, rec_f,
                               rec_quad, rec_noise, rec_weights, evidence, log_joint, cand_runs, order, new_slots,
                               new_logw, new_runs, weight_kind, weight_c, weighted_evidence, w2,
                               noise_params[0]):
            return row, REDO_STEP
        # 3. the kept candidates' writes (with the next row's read), the changepoint candidate's first:
        #    with one hypothesis under the matched reset it reads that hypothesis' slot, which the
        #    hypothesis' own write then updates in place
        for i in range(counts[0]):
            if order[i] == K:
                for i2 in range(i, 0, -1):
                    order[i2] = order[i2 - 1]
                order[0] = K
                break
        kept = counts[0]
        more = row + 1 < n
        for i in range(kept):
            k = order[i]
            d = dest[k]
            if k < K:
                src, moves = d, 1
            elif single:  # the hypothesis' predicted belief: from its slot (in place when it is dropped)
                src, moves = dest[0], 1
            elif moment_matched:  # the matched prior is in its slot: in place
                src, moves = d, 0
            else:  # from the prior
                src, moves = -1, 0
            writes[i, 0] = k
            writes[i, 1] = src
            writes[i, 2] = d
            writes[i, 3] = moves
            pool_means[d, :] = cand_mean[k]
            pool_noises[d, :] = cand_state[k]
            pool_scales[d, :] = cand_scale[k]
            if more:
                full_linearise(pool_means[d], g, X, row + 1, 1, shapes, offsets, codes, acts, pre, delta, scratch,
                               next_pred[d], next_F[d], next_H[d])
                ready[d] = True
        if more and moment_matched and kept > 1:
            # the next row's matched prior, built while the kept posteriors are written: its weights
            # (the kept ones' normalised posterior weights), mean, spreads and linearisation now,
            # its Σ̄ and J Σ̄ in the pass, into the slot the next row finds free
            for s in range(S_slots):
                used[s] = False
            for i in range(kept):
                used[slots[i]] = True
            f = 0
            while used[f]:
                f += 1
            mixture_weights(log_weights, kept, weights)
            moment_matched_mean_into(pool_means, slots, weights, kept, g, next_pred[f])
            _spreads_into(pool_means, slots, kept, g, next_pred[f], spread)
            full_linearise(next_pred[f], 1.0, X, row + 1, 1, shapes, offsets, codes, acts, pre, delta, scratch,
                           next_pred[f], next_F[f], next_H[f])
            full_write_read_match(pool_covs, cand_V, writes, kept, C, g2, q, dynamic, next_H, next_U, zero, slots,
                                  weights, kept, spread, f)
            ready[f] = True
            continue
        for i in range(kept):
            k, src, d, moves = writes[i, 0], writes[i, 1], writes[i, 2], writes[i, 3]
            diag_src = no_diag
            if src < 0:
                cov_src = prior_cov
                if prior_diagonal:
                    diag_src = prior_d
            else:
                cov_src = pool_covs[src]
            if moves != 0:
                g2k, qk, dyn = g2, q, dynamic
            else:
                g2k, qk, dyn = 1.0, 0.0, False
            if more:
                full_write_read(cov_src, diag_src, pool_covs[d], cand_V[k], C, g2k, qk, dyn, src == d, next_H[d],
                                next_U[d], C, zero, no_diag)
            else:
                full_write(cov_src, pool_covs[d], cand_V[k], C, g2k, qk, dyn, src == d, no_diag)
    return n, DONE


@njit(cache=True, nogil=True)
def diagonal_runlength_rows(X, Y, w, has_weights, shapes, offsets, codes, pool_means, pool_vars, pool_noises,
                            pool_scales, prior_mean, prior_var, fd, exact_mean, slots, log_weights, run_lengths, counts,
                            n_keep, log_h, log_s, likelihood, noise_params, adaptive, max_abs, g, q, limit, tiny,
                            record, rec_f, rec_quad, rec_noise, rec_weights, evidence, weight_kind, weight_c,
                            weighted_evidence, moment_matched):
    """:func:`lofi_runlength_rows` over the VD/FD-EKF (:func:`~skfilter.kernels.diagonal.diagonal_rows`):
    the pool ``pool_means (S, 2, P)``, ``pool_vars (S, 2, P)`` with each belief in its slot's first
    half (a candidate copies its source there, ``2P`` numbers, and its step writes the second half,
    moved back after the row); rows already as the model's first layer takes them. With
    ``moment_matched`` (RL[K]-MMPR, thesis Alg. 9) the changepoint candidate starts from
    :func:`diagonal_moment_match_into` of the kept hypotheses (read in their slots, ``O(K P)``)
    instead of the prior."""
    n, D = X.shape
    C = Y.shape[1]
    P = pool_means.shape[2]
    K_max = slots.shape[0]
    (x1, y1, w1, cand_f, cand_quad, cand_noise, dest, used, log_joint, cand_runs, order, new_slots, new_logw,
     new_runs, w2) = _bookkeeping_buffers(K_max, pool_means.shape[0], C, D, pool_means.dtype, X.dtype, Y.dtype,
                                          w.dtype)
    weights = np.empty(K_max, dtype=np.float64)
    for row in range(n):
        K, best = _begin_row(X, Y, w, has_weights, row, x1, y1, w1, slots, counts, used, dest, log_weights)
        for k in range(K + 1):
            d = dest[k]
            if k < K:
                src = slots[k]
                pool_noises[d, :] = pool_noises[src, :]
                for j in range(P):
                    pool_means[d, 0, j] = pool_means[src, 0, j]
                    pool_vars[d, 0, j] = pool_vars[src, 0, j]
                gk, qk = g, q
            else:  # the changepoint candidate (no dynamics): the kept slots are still unwritten
                pool_noises[d, :] = pool_noises[slots[best], :]
                if moment_matched:
                    mixture_weights(log_weights, K, weights)
                    diagonal_moment_match_into(pool_means[:, 0], pool_vars[:, 0], slots, weights, K, g, q,
                                               pool_means[d, 0], pool_vars[d, 0])
                else:
                    for j in range(P):
                        pool_means[d, 0, j] = prior_mean[j]
                        pool_vars[d, 0, j] = prior_var[j]
                gk, qk = 1.0, 0.0
            done, status, cur = diagonal_rows(x1, y1, w1, has_weights, 1, shapes, offsets, codes, pool_means[d],
                                              pool_vars[d], 0, fd, exact_mean, likelihood, pool_noises[d], noise_params,
                                              adaptive, max_abs, weight_kind, weight_c, gk, qk, True, cand_f[k],
                                              cand_quad[k], cand_noise[k], limit, tiny, pool_scales[d])
            if status != DONE:
                return row, REDO_STEP
            for j in range(P):
                pool_means[d, 0, j] = pool_means[d, 1, j]
                pool_vars[d, 0, j] = pool_vars[d, 1, j]
        if not _weigh_and_keep(likelihood, cand_f, cand_quad, cand_noise, y1, w1, has_weights, K, dest, slots,
                               log_weights, run_lengths, counts, n_keep, log_h, log_s, tiny, record, row, rec_f,
                               rec_quad, rec_noise, rec_weights, evidence, log_joint, cand_runs, order, new_slots,
                               new_logw, new_runs, weight_kind, weight_c, weighted_evidence, w2,
                               noise_params[0]):
            return row, REDO_STEP
    return n, DONE


@njit(cache=True, nogil=True)
def factored_copy_into(mean, factors, pending, out_mean, out_factors, out_pending):
    """A factored belief ``(mean, factors, pending)`` (flat factors) into ``out_*``."""
    for j in range(mean.shape[0]):
        out_mean[j] = mean[j]
    for j in range(factors.shape[0]):
        out_factors[j] = factors[j]
    for j in range(pending.shape[0]):
        out_pending[j] = pending[j]


@njit(cache=True, nogil=True)
def factored_settle(pool_means, pool_factors, pool_pendings, d):
    """The belief a step wrote into the second half of pool slot ``d`` moved to its first half."""
    factored_copy_into(pool_means[d, 1], pool_factors[d, 1], pool_pendings[d, 1], pool_means[d, 0],
                       pool_factors[d, 0], pool_pendings[d, 0])


@njit(cache=True, nogil=True)
def factored_runlength_rows(X, Y, w, has_weights, shapes, offsets, codes, pool_means, pool_factors, pool_pendings,
                            pool_noises, pool_scales, prior_mean, prior_factors, prior_pending, positions, starts,
                            fstarts, ranks, kinds, eps, slots, log_weights, run_lengths, counts, n_keep, log_h, log_s,
                            likelihood, noise_params, adaptive, max_abs, g, q_blocks, limit, tiny, record, rec_f,
                            rec_quad, rec_noise, rec_weights, evidence, weight_kind, weight_c, weighted_evidence,
                            moment_matched):
    """:func:`lofi_runlength_rows` over the factored covariance (LRKF, HiLoFi, LoLoFi:
    :func:`~skfilter.kernels.factored.factored_rows`, block layout as there): the pool
    ``pool_means (S, 2, P)``, ``pool_factors (S, 2, F)``, ``pool_pendings (S, 2, n_blocks)`` with each
    belief in its slot's first half (a candidate copies its source there and its step writes the
    second half, moved back after the row, as :func:`diagonal_runlength_rows`); ``q_blocks`` the
    process noise per block; rows already as the model's first layer takes them. With
    ``moment_matched`` (RL[K]-MMPR, thesis Alg. 9) the changepoint candidate starts from
    :func:`factored_moment_match_into` of the kept hypotheses (read in their slots) instead of the
    prior."""
    n, D = X.shape
    C = Y.shape[1]
    K_max = slots.shape[0]
    no_noise = np.zeros_like(q_blocks)
    (x1, y1, w1, cand_f, cand_quad, cand_noise, dest, used, log_joint, cand_runs, order, new_slots, new_logw,
     new_runs, w2) = _bookkeeping_buffers(K_max, pool_means.shape[0], C, D, pool_means.dtype, X.dtype, Y.dtype,
                                          w.dtype)
    weights = np.empty(K_max, dtype=np.float64)
    size = 0
    if moment_matched:
        for b in range(ranks.shape[0]):
            size = max(size, K_max * (ranks[b] + 1) * (starts[b + 1] - starts[b]))
    stack = np.empty(size, dtype=pool_means.dtype)
    for row in range(n):
        K, best = _begin_row(X, Y, w, has_weights, row, x1, y1, w1, slots, counts, used, dest, log_weights)
        for k in range(K + 1):
            d = dest[k]
            if k < K:
                src = slots[k]
                pool_noises[d, :] = pool_noises[src, :]
                factored_copy_into(pool_means[src, 0], pool_factors[src, 0], pool_pendings[src, 0], pool_means[d, 0],
                                   pool_factors[d, 0], pool_pendings[d, 0])
                gk, qk = g, q_blocks
            else:  # the changepoint candidate (no dynamics): the kept slots are still unwritten
                pool_noises[d, :] = pool_noises[slots[best], :]
                if moment_matched:
                    mixture_weights(log_weights, K, weights)
                    factored_moment_match_into(pool_means, pool_factors, pool_pendings, slots, weights, K, g, q_blocks,
                                               positions, starts, fstarts, ranks, kinds, eps, pool_means[d, 0],
                                               pool_factors[d, 0], pool_pendings[d, 0], stack)
                else:
                    factored_copy_into(prior_mean, prior_factors, prior_pending, pool_means[d, 0],
                                       pool_factors[d, 0], pool_pendings[d, 0])
                gk, qk = 1.0, no_noise
            done, status, cur = factored_rows(x1, y1, w1, has_weights, 1, shapes, offsets, codes, pool_means[d],
                                              pool_factors[d], pool_pendings[d], 0, positions, starts, fstarts, ranks,
                                              kinds, likelihood, pool_noises[d], noise_params, adaptive, max_abs,
                                              weight_kind, weight_c, gk, qk, True, cand_f[k], cand_quad[k],
                                              cand_noise[k], limit, eps, tiny, pool_scales[d])
            if status != DONE:
                return row, REDO_STEP
            factored_settle(pool_means, pool_factors, pool_pendings, d)
        if not _weigh_and_keep(likelihood, cand_f, cand_quad, cand_noise, y1, w1, has_weights, K, dest, slots,
                               log_weights, run_lengths, counts, n_keep, log_h, log_s, tiny, record, row, rec_f,
                               rec_quad, rec_noise, rec_weights, evidence, log_joint, cand_runs, order, new_slots,
                               new_logw, new_runs, weight_kind, weight_c, weighted_evidence, w2,
                               noise_params[0]):
            return row, REDO_STEP
    return n, DONE
