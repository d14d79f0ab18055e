"""Likelihood stages of the compiled step (numba): whitening and the online noise estimate.

Compiled counterparts of :meth:`skfilter.likelihoods.Likelihood.whiten` and
:meth:`skfilter.likelihoods.Gaussian.next_state` for one step of ``n`` rows, written over
preallocated buffers. Likelihood codes are those of :data:`LIKELIHOOD_CODES`:

* Gaussian: ``Hw = J r^{−1/2}``, ``ẽ = (y − f) r^{−1/2}``;
* Bernoulli: ``p = σ(f)``, ``v = p(1 − p)``, ``Hw = J √v``, ``ẽ = (y − p)/√v``;
* categorical (the exact logit-space update): ``p = softmax(f)``,
  ``Hw = diag(√p) (J − 1 pᵀJ)``, ``ẽ = (y − p)/√p``;
* assumed density filtering (:class:`~skfilter.likelihoods.AssumedDensityCategorical`, one logit or
  ``C``): ``Hw = B J``, ``ẽ`` from the row's prior predictive ``J Σ⁻ Jᵀ``, which the kernels then
  compute for every step;
* moment-matched (:class:`~skfilter.likelihoods.MomentMatchedCategorical`): ``m = softmax(f)``,
  ``R = diag(m) − m mᵀ + ε I = L Lᵀ``, ``Hw = L⁻¹ (diag(m) − m mᵀ) J``, ``ẽ = L⁻¹ (y − m)``
  (one logit: ``m = σ(f)``, ``R = m(1 − m) + ε``);

each row then scaled by ``√w`` of its sample weight. With a robust weighting (WoLF, Gaussian
likelihood; :func:`robust_step_weights`) the weight of a row is ``w · W²``, ``W`` computed from its
prior-predictive residual with the noise of the previous step, as in
:func:`skfilter.filtering.filter_step` (stage 4). The noise estimate is spec/lofi.md §2.9 (C.2)
with the optional outlier-robust step (``robust_threshold``) and winsorised carried residual
(``residual_bound``) of :class:`~skfilter.likelihoods.Gaussian`, folded over the ``n`` rows of the
step exactly as there (suffix products).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .linalg import cholesky_into, solve_lower

#: likelihood class name → code used by the compiled kernels
LIKELIHOOD_CODES = {"Gaussian": 0, "Bernoulli": 1, "Categorical": 2, "AssumedDensityCategorical": 3,
                    "MomentMatchedCategorical": 4}
#: the likelihood code whose whitening needs the rows' prior predictive ``J Σ⁻ Jᵀ``
PREDICTIVE_LIKELIHOOD = 3
#: the moment-matched likelihood's code: its jitter ``ε`` is the first entry of ``noise_params``
MOMENT_MATCHED_LIKELIHOOD = 4
#: weighting-function class name (:mod:`skfilter.weighting`) → code of :func:`robust_step_weights`
#: (Gaussian likelihood only); 0 is no weighting
WEIGHTING_CODES = {"IMQ": 1, "MahalanobisIMQ": 2, "ThresholdedMahalanobis": 3, "Huber": 4,
                   "PredictiveMahalanobisIMQ": 5}
#: the weighting code that needs the prior predictive ``J Σ⁻ Jᵀ`` of the rows
PREDICTIVE_WEIGHTING = 5


@njit(cache=True, nogil=True)
def outputs_within(F, bound):
    """Whether every ``|f|`` of the step is ``≤ bound`` (NaN is not)."""
    for i in range(F.shape[0]):
        for c in range(F.shape[1]):
            if not abs(F[i, c]) <= bound:
                return False
    return True


@njit(cache=True, nogil=True)
def gaussian_noise_step(noise, F, Y, w, has_weights, params, scale):
    """The online estimate C.2 over the ``n`` rows of a step (see
    :meth:`skfilter.likelihoods.Gaussian.next_state`).

    ``noise`` is ``[r_1 … r_C, Σw]`` (updated in place); ``params`` is ``[eps_min, min_variance,
    robust_threshold, κ, residual_bound, tiny]`` with ``0`` for an unused threshold or bound;
    ``scale (C,)`` receives this step's whitening ``r^{−1/2}`` (of the unbounded estimate).
    Returns False when the estimate is not finite (the step is then redone by the torch engine,
    which raises)."""
    n, C = F.shape
    eps_min, min_var, c_rob, kappa, bound, tiny = params[0], params[1], params[2], params[3], params[4], params[5]
    total = noise[C]
    mean_r = 0.0
    for c in range(C):
        mean_r += noise[c]
    mean_r /= C
    eps = np.empty(n)
    d = np.empty(n)
    for i in range(n):
        s = 0.0
        for c in range(C):
            e = Y[i, c] - F[i, c]
            s += e * e
        d[i] = s / C
        wi = w[i] if has_weights else 1.0
        total += wi
        eps[i] = wi / max(total, tiny) if total > 0.0 else 0.0
        if eps_min > 0.0:
            eps[i] = max(eps[i], min(eps_min * wi, 1.0))
        if c_rob > 0.0:
            z = d[i] / max(mean_r, tiny) - 1.0
            eps[i] *= c_rob * c_rob / (c_rob * c_rob + z * z)
            d[i] /= kappa
    # r_n = Π_i (1 − ε_i) r_0 + Σ_i ε_i d_i Π_{j>i} (1 − ε_j)
    after = 1.0
    acc = 0.0
    acc_bounded = 0.0
    level = noise[0] if C == 1 else mean_r
    cap = bound * bound * level
    for i in range(n - 1, -1, -1):
        acc += eps[i] * after * d[i]
        acc_bounded += eps[i] * after * min(d[i], cap)
        after *= 1.0 - eps[i]
    ok = True
    for c in range(C):
        base = after * noise[c]
        r = max(base + acc, min_var) if base + acc == base + acc else base + acc
        scale[c] = 1.0 / np.sqrt(r)
        if bound > 0.0:
            rb = base + acc_bounded
            r = max(rb, min_var) if rb == rb else rb
        if not np.isfinite(r):
            ok = False
        noise[c] = r
    noise[C] = total
    return ok


@njit(cache=True, nogil=True)
def _adf_binary(f, y, J, ew, s, sw, tiny):
    """:class:`~skfilter.likelihoods.AssumedDensityCategorical` for one logit, ``s = J Σ⁻ Jᵀ``."""
    kappa = 1.0 / np.sqrt(1.0 + (np.pi / 8.0) * s)
    p = 1.0 / (1.0 + np.exp(-kappa * f[0]))
    r = max(p * (1.0 - p), tiny)
    keep = max(1.0 - s * kappa * kappa * r, tiny)
    ew[0] = (y[0] - p) / np.sqrt(r * keep) * sw
    a = kappa * np.sqrt(r / keep) * sw
    row = J[0]
    for j in range(row.shape[0]):
        row[j] *= a


@njit(cache=True, nogil=True)
def _adf_categorical(f, y, J, ew, Q, sw, tiny, pj):
    """:class:`~skfilter.likelihoods.AssumedDensityCategorical` for ``C ≥ 2`` logits, ``Q = J Σ⁻ Jᵀ``:
    ``Hw = T Gᵀ J``, ``ew = T ẽ`` with ``Gᵀ J = diag(√p̃)(I − 1p̃ᵀ) K Π J`` and
    ``T = (I − GᵀQG)^{−½}`` (the torch code's steps); ``pj`` a ``(P,)`` work buffer."""
    C, P = J.shape
    dt = J.dtype
    # the shift-free variances, κ and p̃ = softmax(κ ⊙ f)
    A = np.empty((C, C), dtype=dt)
    rmean = np.empty(C, dtype=dt)
    for c in range(C):
        t = 0.0
        for k in range(C):
            t += Q[c, k]
        rmean[c] = t / C
    total = 0.0
    for c in range(C):
        total += rmean[c]
    total /= C
    kappa = np.empty(C, dtype=dt)
    z = np.empty(C, dtype=dt)
    for c in range(C):
        v = max(Q[c, c] - 2.0 * rmean[c] + total, 0.0) * (C / (C - 1.0))
        kappa[c] = 1.0 / np.sqrt(1.0 + (np.pi / 8.0) * v)
        z[c] = kappa[c] * f[c]
    top = z[0]
    for c in range(1, C):
        top = max(top, z[c])
    p = np.empty(C, dtype=dt)
    tot = 0.0
    for c in range(C):
        p[c] = np.exp(z[c] - top)
        tot += p[c]
    sp = np.empty(C, dtype=dt)
    for c in range(C):
        p[c] /= tot
        sp[c] = np.sqrt(max(p[c], tiny))
    # Ks = diag(√p̃)(I − 1p̃ᵀ) K Π Q Π K (I − p̃1ᵀ) diag(√p̃)
    for c in range(C):
        for k in range(C):
            A[c, k] = kappa[c] * (Q[c, k] - rmean[c] - rmean[k] + total) * kappa[k]
    colp = np.empty(C, dtype=dt)  # (A p̃)_c
    for c in range(C):
        t = 0.0
        for k in range(C):
            t += A[c, k] * p[k]
        colp[c] = t
    pAp = 0.0
    for c in range(C):
        pAp += p[c] * colp[c]
    Ks = np.empty((C, C), dtype=dt)
    for c in range(C):
        for k in range(C):
            Ks[c, k] = sp[c] * (A[c, k] - colp[c] - colp[k] + pAp) * sp[k]
    for c in range(C):
        for k in range(c + 1, C):
            avg = 0.5 * (Ks[c, k] + Ks[k, c])
            Ks[c, k] = avg
            Ks[k, c] = avg
    kv, W = np.linalg.eigh(Ks)
    T = np.empty((C, C), dtype=dt)
    for c in range(C):
        kv[c] = 1.0 / np.sqrt(1.0 - min(max(kv[c], 0.0), 0.9))  # AssumedDensityCategorical._MAX_CONTRACTION
    for c in range(C):
        for k in range(C):
            t = 0.0
            for e in range(C):
                t += W[c, e] * kv[e] * W[k, e]
            T[c, k] = t * sw
    et = np.empty(C, dtype=dt)
    for c in range(C):
        et[c] = (y[c] - p[c]) / sp[c]
    for c in range(C):
        t = 0.0
        for k in range(C):
            t += T[c, k] * et[k]
        ew[c] = t
    # J ← K Π J (rows), then p̃ᵀ(KΠJ) into pj, then Gᵀ J, then T (a column at a time)
    for j in range(P):
        m = 0.0
        for c in range(C):
            m += J[c, j]
        m /= C
        q = 0.0
        for c in range(C):
            J[c, j] = kappa[c] * (J[c, j] - m)
            q += p[c] * J[c, j]
        pj[j] = q
    col = np.empty(C, dtype=dt)
    for j in range(P):
        for c in range(C):
            col[c] = sp[c] * (J[c, j] - pj[j])
        for c in range(C):
            t = 0.0
            for k in range(C):
                t += T[c, k] * col[k]
            J[c, j] = t


@njit(cache=True, nogil=True)
def _moment_matched(f, y, J, ew, epsilon, sw):
    """:meth:`skfilter.likelihoods.MomentMatchedCategorical.whiten` of one row, in place and in its
    order of operations: ``m`` the softmax of the logits (sigmoid of one), ``G = diag(m) − m mᵀ``
    (``m(1 − m)``), ``R = G + ε I = L Lᵀ``; ``Hw = (L⁻¹ G) J``, ``ẽ = L⁻¹ (y − m)``; both times ``sw``."""
    C, P = J.shape
    if C == 1:
        m = 1.0 / (1.0 + np.exp(-f[0]))
        g = m * (1.0 - m)
        root = np.sqrt(g + epsilon)
        ew[0] = (y[0] - m) / root * sw
        s = g / root * sw
        row = J[0]
        for j in range(P):
            row[j] *= s
        return
    top = f[0]
    for c in range(1, C):
        top = max(top, f[c])
    m = np.empty(C, dtype=J.dtype)
    tot = 0.0
    for c in range(C):
        m[c] = np.exp(f[c] - top)
        tot += m[c]
    for c in range(C):
        m[c] /= tot
    G = np.empty((C, C), dtype=J.dtype)
    R = np.empty((C, C), dtype=J.dtype)
    for a in range(C):
        for b in range(C):
            G[a, b] = (m[a] if a == b else 0.0) - m[a] * m[b]
            R[a, b] = G[a, b] + (epsilon if a == b else 0.0)
    Lc = np.empty((C, C), dtype=J.dtype)
    cholesky_into(R, Lc)  # positive definite: ε > 0
    col = np.empty(C, dtype=J.dtype)
    for b in range(C):  # L⁻¹ G, column by column
        for a in range(C):
            col[a] = G[a, b]
        solve_lower(Lc, col)
        for a in range(C):
            G[a, b] = col[a] * sw
    source = J.copy()
    for a in range(C):  # Hw = (L⁻¹ G) J on whole rows
        row = J[a]
        for j in range(P):
            row[j] = 0.0
        for b in range(C):
            coef = G[a, b]
            src = source[b]
            for j in range(P):
                row[j] += coef * src[j]
    for c in range(C):
        ew[c] = y[c] - m[c]
    solve_lower(Lc, ew[:C])
    for c in range(C):
        ew[c] *= sw


@njit(cache=True, nogil=True)
def whiten_rows(code, f, y, J, scale, weight, ew, tiny, pj, quad, epsilon):
    """Whiten one row in place: ``J (C, P)`` becomes ``Hw`` and ``ew (C,)`` the whitened residual
    (module docstring), both times ``√weight``; ``scale (C,)`` is the Gaussian ``r^{−1/2}``, ``pj``
    a ``(P,)`` work buffer (categorical), ``quad (C, C)`` the row's ``J Σ⁻ Jᵀ`` (assumed density
    filtering; not read otherwise), ``epsilon`` the moment-matched likelihood's jitter."""
    C, P = J.shape
    sw = np.sqrt(weight)
    if code == MOMENT_MATCHED_LIKELIHOOD:
        _moment_matched(f, y, J, ew, epsilon, sw)
    elif code == 3:
        if C == 1:
            _adf_binary(f, y, J, ew, quad[0, 0], sw, tiny)
        else:
            _adf_categorical(f, y, J, ew, quad, sw, tiny, pj)
    elif code == 0:
        for c in range(C):
            s = scale[c] * sw
            ew[c] = (y[c] - f[c]) * scale[c] * sw
            row = J[c]
            for j in range(P):
                row[j] *= s
    elif code == 1:
        p = 1.0 / (1.0 + np.exp(-f[0]))
        v = max(p * (1.0 - p), tiny)
        sv = np.sqrt(v)
        ew[0] = (y[0] - p) / sv * sw
        row = J[0]
        s = sv * sw
        for j in range(P):
            row[j] *= s
    else:
        top = f[0]
        for c in range(1, C):
            top = max(top, f[c])
        tot = 0.0
        p = np.empty(C, dtype=J.dtype)
        for c in range(C):
            p[c] = np.exp(f[c] - top)
            tot += p[c]
        for c in range(C):
            p[c] /= tot
        for j in range(P):  # pᵀJ, row by row (contiguous passes)
            pj[j] = p[0] * J[0, j]
        for c in range(1, C):
            pc = p[c]
            row = J[c]
            for j in range(P):
                pj[j] += pc * row[j]
        for c in range(C):
            sp = np.sqrt(max(p[c], tiny))
            ew[c] = (y[c] - p[c]) / sp * sw
            s = sp * sw
            row = J[c]
            for j in range(P):
                row[j] = s * (row[j] - pj[j])


@njit(cache=True, nogil=True)
def observe_step(likelihood, F, Y, w, has_weights, noise, noise_params, adaptive, scale, H, ew, tiny, pj,
                 noise_before, quad):
    """Stages 5–6 of a step of ``nb = F.shape[0]`` rows: the Gaussian noise estimate (``adaptive``),
    then the whitening of each row's Jacobian block ``H[i C:(i+1) C]`` in place and of its residual
    into ``ew``. ``noise_before`` receives the noise vector before the step (to restore it when the
    step is handed back); ``quad (nb, C, C)`` holds the rows' ``J Σ⁻ Jᵀ`` when the likelihood needs
    them (:data:`PREDICTIVE_LIKELIHOOD`). Returns False when the estimate is not finite (nothing
    learned)."""
    nb, C = F.shape
    for c in range(noise.shape[0]):
        noise_before[c] = noise[c]
    if likelihood == 0:
        if adaptive:
            if not gaussian_noise_step(noise, F, Y, w, has_weights, noise_params, scale):
                for c in range(noise.shape[0]):
                    noise[c] = noise_before[c]
                return False
        else:
            for c in range(C):
                scale[c] = 1.0 / np.sqrt(noise[c])
    for i in range(nb):
        whiten_rows(likelihood, F[i], Y[i], H[i * C:(i + 1) * C], scale, w[i] if has_weights else 1.0,
                    ew[i * C:(i + 1) * C], tiny, pj, quad[i], noise_params[0])
    return True


@njit(cache=True, nogil=True)
def restore(noise, noise_before):
    """Undo :func:`observe_step`'s change of the noise vector (the step is handed back)."""
    for c in range(noise.shape[0]):
        noise[c] = noise_before[c]


@njit(cache=True, nogil=True)
def observation_buffers(batch, C, P, noise, dtype_like):
    """The work buffers of a step's observation stages for ``batch`` rows of ``C`` outputs:
    ``(F (batch, C), ew (batch·C,), scale (C,), pj (P,), noise_before)``."""
    dt = dtype_like.dtype
    return (np.empty((batch, C), dtype=dt), np.empty(batch * C, dtype=dt), np.empty(C, dtype=dt),
            np.empty(P, dtype=dt), noise.copy())


@njit(cache=True, nogil=True)
def record_outputs(F, noise, quad, rec_f, rec_quad, rec_noise, row):
    """Record a step's predictive — the outputs ``F (nb, C)``, ``J Σ⁻ Jᵀ`` ``quad (nb, C, C)`` and the
    noise variances before the step — into rows ``row … row + nb − 1`` of ``rec_f``, ``rec_quad``,
    ``rec_noise``."""
    nb, C = F.shape
    for i in range(nb):
        for c in range(C):
            rec_f[row + i, c] = F[i, c]
            rec_noise[row + i, c] = noise[c]
            for c2 in range(C):
                rec_quad[row + i, c, c2] = quad[i, c, c2]


@njit(cache=True, nogil=True)
def robust_step_weights(kind, threshold, F, Y, w, has_weights, noise, quad, out):
    """``out[i] = w_i · W_i²`` for the rows of a step under the Gaussian likelihood (``R = diag(r)`` of
    the previous step, ``noise[:C]``), the weights of :mod:`skfilter.weighting` with ``e = y − f``:

    1 IMQ ``W = (1 + ‖e/c‖²)^{−1/2}``; 2 Mahalanobis IMQ ``(1 + (e/c)ᵀR⁻¹(e/c))^{−1/2}``;
    3 thresholded ``1{eᵀR⁻¹e ≤ c}``; 4 Huber ``W² = min(1, c/‖R^{−1/2}e‖)``; 5 predictive
    Mahalanobis IMQ with ``S = quad_i + R`` in place of ``R``.

    Returns False when a predictive ``S`` is not positive definite (the torch stages then take
    its pseudo-inverse)."""
    nb, C = F.shape
    S = np.empty((C, C), dtype=F.dtype)
    Lc = np.empty((C, C), dtype=F.dtype)
    z = np.empty(C, dtype=F.dtype)
    tiny = np.finfo(F.dtype).tiny
    for i in range(nb):
        if kind == 1:
            q = 0.0
            for c in range(C):
                e = (Y[i, c] - F[i, c]) / threshold
                q += e * e
            W2 = 1.0 / (1.0 + q)
        elif kind == 5:
            for c in range(C):
                for c2 in range(C):
                    S[c, c2] = quad[i, c, c2]
                S[c, c] += noise[c]
            if C == 1:
                e = (Y[i, 0] - F[i, 0]) / threshold
                q = e * e / max(S[0, 0], tiny) if S[0, 0] > 0.0 else 0.0
            else:
                if not cholesky_into(S, Lc):
                    return False
                for c in range(C):
                    z[c] = (Y[i, c] - F[i, c]) / threshold
                solve_lower(Lc, z)
                q = 0.0
                for c in range(C):
                    q += z[c] * z[c]
            W2 = 1.0 / (1.0 + q)
        else:
            scaled = threshold if kind == 2 else 1.0
            d2 = 0.0
            for c in range(C):
                e = (Y[i, c] - F[i, c]) / scaled
                d2 += e * e / max(noise[c], tiny) if noise[c] > 0.0 else 0.0
            if kind == 2:
                W2 = 1.0 / (1.0 + d2)
            elif kind == 3:
                W2 = 1.0 if d2 <= threshold else 0.0
            else:
                d = np.sqrt(d2)
                W2 = threshold / max(d, tiny) if d > threshold else 1.0
        out[i] = (w[i] if has_weights else 1.0) * W2
    return True


@njit(cache=True, nogil=True)
def weigh_and_observe(likelihood, weight_kind, weight_c, F, Y, w, has_weights, noise, noise_params, adaptive,
                      scale, H, ew, tiny, pj, noise_before, quad, robust):
    """Stages 4–6 of a step: the robust weights (``weight_kind > 0``, :func:`robust_step_weights`,
    into ``robust``; ``quad`` the rows' ``J Σ⁻ Jᵀ`` for the predictive weighting), then
    :func:`observe_step` with the rows' weights ``w · W²`` (or ``w``). Returns False when the step
    must be handed back (nothing learned; the noise vector as before)."""
    if weight_kind > 0:  # WoLF: the weights from the noise of the previous step
        if not robust_step_weights(weight_kind, weight_c, F, Y, w, has_weights, noise, quad, robust):
            return False
        return observe_step(likelihood, F, Y, robust[:F.shape[0]], True, noise, noise_params, adaptive, scale, H,
                            ew, tiny, pj, noise_before, quad)
    return observe_step(likelihood, F, Y, w, has_weights, noise, noise_params, adaptive, scale, H, ew, tiny, pj,
                        noise_before, quad)
