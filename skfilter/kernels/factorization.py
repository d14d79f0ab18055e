"""The decoupled EKF of factorization models over a chunk of events in one compiled call (numba).

:meth:`skfilter.factorization.model.FactorizationFilter.step` learns one event in torch (~350 µs);
:func:`run_events_compiled` learns ``n`` events in order, exactly as ``n`` calls of ``step`` would,
in one call of a compiled loop (a few µs per event). Per event and per involved block (each slot's
entity, then the global bias):

1. the lazy predict of Alg. 2 over the ``Δ = t − last_time`` steps since the block was last seen
   (:func:`skfilter.factorization.dekf.lazy_predict`, skipped at ``Δ = 0`` as there);
2. the signal ``λ`` and its gradient per block (:mod:`skfilter.factorization.signals`): linear
   ``x``; order-2 factorization machine ``x_f (Σ_g y_g − y_f)``; CP/MF the products of the other
   modes' factors (prefix and suffix products);
3. the whitening of the likelihood (:mod:`skfilter.likelihoods`): Gaussian with a fixed noise or the
   online estimate of :meth:`~skfilter.likelihoods.Gaussian.next_state` (the row is whitened with the
   unbounded estimate, the residual-bounded one is carried), Bernoulli ``√(p(1−p))``, Poisson
   ``√λ`` with the log-rate clipped at :attr:`~skfilter.likelihoods.Poisson.max_log_rate``; a weight
   ``w`` scales the whitened row by ``√w``;
4. the ``d = 1`` DEKF update (:func:`~skfilter.factorization.dekf.dekf_update`):
   ``q_i = Σ_i h_iᵀ``, ``s = 1 + Σ_i h_i q_i``, ``μ_i += q_i e / s``, ``Σ_i −= q_i q_iᵀ / s``
   (symmetrised), and the reference blocks with ``q_0i = Σ_0i h_iᵀ``.

**Predictions.** With ``record`` the loop also writes each event's one-step-ahead prediction
before learning it (the signal and ``Var λ = Σ_i J_i Σ_i J_iᵀ`` at the predicted blocks, an entity
new at that event at its prior, as :meth:`~skfilter.factorization.model.FactorizationFilter.linearized`
gives it, and the likelihood's predictive): a prequential pass costs about what learning costs
(:func:`run_events_compiled` with ``record``). Without learning it predicts a batch of events at the
next step (:func:`predict_events_compiled`).

Every new block is computed into scratch and checked (finite, ``s > 0``) before it is written, so a
failing event leaves the tables as the previous event left them. New entities are created up front
in Python, in order of first appearance (the same random prior means as ``step`` draws), each with
``last_time`` its first event's time (a new entity's state is stationary under the predict, and
``Δ = 0`` at its first event as in ``step``).

Both engines agree to rounding (tests/test_factorization_kernels.py: ~1e-13 relative in float64,
~1e-5 in float32, where the kernel accumulates in float64 and rounds each stored value to the table's
dtype); the kernel lets LLVM reassociate its sums and fuse multiply-adds (``fastmath`` limited to
``reassoc`` and ``contract``, so that non-finite values are still detected). The kernel takes five
packed arrays (:class:`KernelPlan` builds them once per filter; the tables are passed by address),
so that a call costs about 1 µs beyond its events: one event per call
(:meth:`KernelPlan.predict_one`, :meth:`KernelPlan.learn_one`) is cheap. One compiled variant per
dtype serves any number of blocks, compiled on first use and cached on disk (``python -m
skfilter.kernels`` compiles it ahead).
"""

from __future__ import annotations

import math
import threading

import numpy as np
import torch
import numba
from numba import njit, types
from numba.extending import intrinsic

from ..exceptions import FilterStepError
from . import enabled

__all__ = ["serves", "run_events_compiled", "predict_events_compiled", "kernel_plan", "KernelPlan"]

SIG_LINEAR, SIG_FM2, SIG_CP = 0, 1, 2
#: the likelihoods: Gaussian (fixed or online noise), Bernoulli (the EKF update), Poisson, and Bernoulli
#: with the assumed-density update (:class:`~skfilter.likelihoods.AssumedDensityCategorical`, one logit)
LIK_GAUSSIAN, LIK_ADAPTIVE, LIK_BERNOULLI, LIK_POISSON, LIK_BERNOULLI_ADF = 0, 1, 2, 3, 4
OK, FAILED = 0, 1


_FASTMATH = {"reassoc", "contract"}

#: the header of the kernel's integer configuration (then Ks, nfeat, pfeat, voff, sym, ptrs)
_HEAD = 15
#: the fields of a block's row of ``ptrs``: the addresses of its table's arrays, then its capacity
_MEAN, _COV, _LAST, _REF_MEAN, _CROSS, _REF_COV, _CAP = range(7)


@intrinsic
def _as_pointer(typingctx, address, like):
    """The address ``address`` (an integer) as a pointer to ``like``'s dtype."""
    ptr = types.CPointer(like.dtype)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(ptr))

    return ptr(address, like), codegen


@njit(cache=True, nogil=True)
def _mat(ptrs, b, field, K, like):
    """Block ``b``'s table array ``field`` of shape ``(capacity, K)`` (a view of the tensor's memory)."""
    return numba.carray(_as_pointer(ptrs[b, field], like), (ptrs[b, _CAP], K))


@njit(cache=True, nogil=True)
def _cube(ptrs, b, field, K, like):
    """Block ``b``'s table array ``field`` of shape ``(capacity, K, K)``."""
    return numba.carray(_as_pointer(ptrs[b, field], like), (ptrs[b, _CAP], K, K))


@njit(cache=True, nogil=True)
def _times(ptrs, b, like):
    """Block ``b``'s ``last_time`` ``(capacity,)`` (``like``: an int64 array)."""
    return numba.carray(_as_pointer(ptrs[b, _LAST], like), (ptrs[b, _CAP],))


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _signal(P, J, v, voff, nslot, Ks, nfeat, pfeat, sig, fm_lin, cp_off, cp_order, cp_ctx, has_bias, s1):
    """The signal ``λ`` of one event at the block means ``P (nblk, Kmax)`` (its feature values ``v``),
    and its gradient per block into ``J`` (the entries of each block's ``K`` it touches)."""
    lam = 0.0
    if sig == SIG_LINEAR:
        for s in range(nslot):
            term = 0.0
            for f in range(nfeat[s]):
                x = v[voff[s] + f]
                term += x * P[s, f]
                J[s, f] = x
            lam += term
    elif sig == SIG_FM2:
        p = pfeat[0]
        na = p - fm_lin
        lin = 0.0
        for k in range(na):
            s1[k] = 0.0
        for s in range(nslot):
            for f in range(nfeat[s]):
                x = v[voff[s] + f]
                if fm_lin:
                    lin += x * P[s, f * p]
                for k in range(na):
                    y = x * P[s, f * p + fm_lin + k]
                    s1[k] += y
        term = 0.0
        for k in range(na):
            q2 = 0.0
            for s in range(nslot):
                for f in range(nfeat[s]):
                    y = v[voff[s] + f] * P[s, f * p + fm_lin + k]
                    q2 += y * y
            term += s1[k] * s1[k] - q2
        lam = lin + 0.5 * term
        for s in range(nslot):
            for f in range(nfeat[s]):
                x = v[voff[s] + f]
                if fm_lin:
                    J[s, f * p] = x
                for k in range(na):
                    J[s, f * p + fm_lin + k] = x * (s1[k] - x * P[s, f * p + fm_lin + k])
    else:  # CP / MF: modes 0..q−1 ([b,] ξ), then the context slot
        q = cp_order
        na = Ks[0] - cp_off
        for l in range(na):
            prod = P[0, cp_off + l]
            for i in range(1, q):
                prod *= P[i, cp_off + l]
            lam += prod
        if cp_off:
            for i in range(q):
                lam += P[i, 0]
                J[i, 0] = 1.0
        for i in range(q):
            for l in range(na):
                if q == 2:
                    o = P[1 - i, cp_off + l]
                else:
                    has_p = i > 0
                    pre = 1.0
                    if has_p:
                        pre = P[0, cp_off + l]
                        for m in range(1, i):
                            pre *= P[m, cp_off + l]
                    has_s = i < q - 1
                    suf = 1.0
                    if has_s:
                        suf = P[q - 1, cp_off + l]
                        for m in range(q - 2, i, -1):
                            suf *= P[m, cp_off + l]
                    if has_p and has_s:
                        o = pre * suf
                    elif has_p:
                        o = pre
                    else:
                        o = suf
                J[i, cp_off + l] = o
        if cp_ctx:
            term = 0.0
            for f in range(nfeat[q]):
                x = v[voff[q] + f]
                term += x * P[q, f]
                J[q, f] = x
            lam += term
    if has_bias:
        lam += P[nslot, 0]
        J[nslot, 0] = 1.0
    return lam


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def factorization_events(rows2, data, icfg, f64s, dts):
    """Learn (and/or predict) the events ``j = 0..n−1`` (time ``t0 + j + 1``) into the tables, in order.

    Five arguments (a call costs a few µs: one event per call is cheap), each a packed array
    (:class:`KernelPlan` builds them):

    * ``rows2 (2 nblk, n)`` int64: each block's table row per event (slots, then the bias), then
      ``newat``: 1 where the block's entity is new at that event;
    * ``data (n, n_v + 7)`` float64: the slots' feature values ``vals`` (slot ``s`` at columns
      ``voff[s]:voff[s+1]``), ``y``, the weight ``w``, and ``rec`` (5 columns, written);
    * ``icfg`` int64: ``[nblk, nslot, signal, fm linear, cp offset, cp order, cp context, bias,
      likelihood, dynamic, record, learn, time step, weighted, t0]``, then ``Ks (nblk)``, ``nfeat
      (nslot)``, ``pfeat (nslot)``, ``voff (nslot + 1)``, ``sym (nblk)`` and ``ptrs (nblk, 7)``: per
      block the addresses of its table's ``mean``, ``cov``, ``last_time`` (and ``ref_mean``,
      ``cross``, ``ref_cov`` when dynamic) and its capacity (the arrays are viewed in place:
      :class:`KernelPlan` keeps the tensors alive and current);
    * ``f64s`` float64: ``[eps_min, min_var, residual bound, max log-rate, tiny, log α,
      expm1(2 log α)]``, ``omegas (nblk)``, then scratch;
    * ``dts`` (the tables' dtype): ``noise = [r, Σw, r^{−1/2}]`` of the Gaussian (updated after each
      learned event), ``pcen (nblk, Kmax)``, ``pcov (nblk, Kmax, Kmax)`` (an unseen entity's prior
      per block), then scratch.

    ``sym[b]``: block ``b``'s table holds exactly symmetric covariances (its prior's is: every
    update and predict symmetrises), so the symmetrisation is the identity and is skipped.

    With ``record``, each event's one-step-ahead prediction is written to ``rec[j]`` before the
    event is learned: ``[λ, Var λ, r, a, b]`` at the predicted blocks, a block new at that event
    (``newat[b, j]``) at its prior ``N(pcen[b], pcov[b])`` (as an unseen id is predicted), with
    ``(a, b)`` the predictive (Gaussian: mean and standard deviation with the noise ``r``; Poisson:
    mean and standard deviation; Bernoulli: the probit probabilities of 0 and 1). Without
    ``learn`` nothing is written to the tables (a block new at ``j`` is not read: its row may be
    anything); with time step 0 every event is at time ``t0 + 1`` (a batch of predictions).
    Returns ``(events done, OK or FAILED)``: on FAILED the event at that index was not written."""
    n = data.shape[0]
    nblk, nslot, sig, fm_lin = icfg[0], icfg[1], icfg[2], icfg[3]
    cp_off, cp_order, cp_ctx, has_bias = icfg[4], icfg[5], icfg[6], icfg[7] != 0
    lik, dynamic, record, learn = icfg[8], icfg[9] != 0, icfg[10] != 0, icfg[11] != 0
    t_step, has_w, t0 = icfg[12], icfg[13] != 0, icfg[14]
    o = _HEAD
    Ks = icfg[o:o + nblk]
    o += nblk
    nfeat = icfg[o:o + nslot]
    o += nslot
    pfeat = icfg[o:o + nslot]
    o += nslot
    voff = icfg[o:o + nslot + 1]
    o += nslot + 1
    sym = icfg[o:o + nblk]
    o += nblk
    ptrs = icfg[o:o + 7 * nblk].reshape((nblk, 7))
    nv = voff[nslot]
    rows = rows2[:nblk]
    newat = rows2[nblk:]
    vals = data[:, :nv]
    Y = data[:, nv]
    w = data[:, nv + 1]
    rec = data[:, nv + 2:nv + 7]
    eps_min, min_var, bound, max_log_rate, tiny = f64s[0], f64s[1], f64s[2], f64s[3], f64s[4]
    log_alpha, g_den = f64s[5], f64s[6]
    omegas = f64s[7:7 + nblk]
    w64 = f64s[7 + nblk:]
    Kmax = 1
    for b in range(nblk):
        if Ks[b] > Kmax:
            Kmax = Ks[b]
    kk = nblk * Kmax
    kk2 = kk * Kmax
    noise = dts[0:3]
    pcen = dts[3:3 + kk].reshape((nblk, Kmax))
    pcov = dts[3 + kk:3 + kk + kk2].reshape((nblk, Kmax, Kmax))
    wdt = dts[3 + kk + kk2:]
    # scratch (passed in: no allocation per call)
    PM = wdt[0:kk].reshape((nblk, Kmax))
    PMp = wdt[kk:2 * kk].reshape((nblk, Kmax))
    PRM = wdt[2 * kk:3 * kk].reshape((nblk, Kmax))
    PC = wdt[3 * kk:3 * kk + kk2].reshape((nblk, Kmax, Kmax))
    PX = wdt[3 * kk + kk2:3 * kk + 2 * kk2].reshape((nblk, Kmax, Kmax))
    PRC = wdt[3 * kk + 2 * kk2:3 * kk + 3 * kk2].reshape((nblk, Kmax, Kmax))
    J = w64[0:kk].reshape((nblk, Kmax))
    Jp = w64[kk:2 * kk].reshape((nblk, Kmax))
    QQ = w64[2 * kk:3 * kk].reshape((nblk, Kmax))
    o = 3 * kk
    Q = w64[o:o + Kmax]
    Q0 = w64[o + Kmax:o + 2 * Kmax]
    Z = w64[o + 2 * Kmax:o + 3 * Kmax]
    Z0 = w64[o + 3 * Kmax:o + 4 * Kmax]
    s1 = w64[o + 4 * Kmax:o + 5 * Kmax]
    PRED = w64[o + 5 * Kmax:o + 5 * Kmax + nblk]  # brought forward (Δ > 0): the covariances are in PC, PX
    for b in range(nblk):
        for i in range(Kmax):
            J[b, i] = 0.0
            Jp[b, i] = 0.0
    for j in range(n):
        t = t0 + 1 + j * t_step
        wj = w[j] if has_w else 1.0
        # 1. the blocks, brought forward (into scratch; an unmoved block's covariances are read in place)
        for b in range(nblk):
            PRED[b] = 0.0
            if record and not learn and newat[b, j]:
                continue
            r = rows[b, j]
            K = Ks[b]
            mean = _mat(ptrs, b, _MEAN, K, pcen)
            cov = _cube(ptrs, b, _COV, K, pcen)
            delta = 0
            if dynamic:
                delta = t - _times(ptrs, b, rows)[r]
                if delta < 0:
                    delta = 0
            PRED[b] = 1.0 if delta > 0 else 0.0
            if delta > 0:
                a = math.exp(delta * log_alpha)
                g = math.expm1(2.0 * delta * log_alpha) / g_den
                rm = _mat(ptrs, b, _REF_MEAN, K, pcen)
                cr = _cube(ptrs, b, _CROSS, K, pcen)
                rc = _cube(ptrs, b, _REF_COV, K, pcen)
                gom = g * omegas[b]
                aa = a * a
                oa2 = (1.0 - a) * (1.0 - a)
                am = a - aa
                for i in range(K):
                    PM[b, i] = a * (mean[r, i] - rm[r, i]) + rm[r, i]
                    PRM[b, i] = rm[r, i]
                for i in range(K):
                    for k in range(i, K):
                        v1 = aa * cov[r, i, k] + oa2 * rc[r, i, k] + am * (cr[r, i, k] + cr[r, k, i])
                        v2 = aa * cov[r, k, i] + oa2 * rc[r, k, i] + am * (cr[r, k, i] + cr[r, i, k])
                        if i == k:
                            v1 += gom
                            v2 += gom
                        v = 0.5 * (v1 + v2)
                        PC[b, i, k] = v
                        PC[b, k, i] = v
                        PX[b, i, k] = a * cr[r, i, k] + (1.0 - a) * rc[r, i, k]
                        PX[b, k, i] = a * cr[r, k, i] + (1.0 - a) * rc[r, k, i]
            else:
                for i in range(K):
                    PM[b, i] = mean[r, i]
                if dynamic:
                    rm = _mat(ptrs, b, _REF_MEAN, K, pcen)
                    for i in range(K):
                        PRM[b, i] = rm[r, i]
        # 1b. the one-step-ahead prediction (a block new at this event: its prior)
        if record:
            for b in range(nblk):
                if newat[b, j]:
                    for i in range(Ks[b]):
                        PMp[b, i] = pcen[b, i]
                else:
                    for i in range(Ks[b]):
                        PMp[b, i] = PM[b, i]
            lamp = _signal(PMp, Jp, vals[j], voff, nslot, Ks, nfeat, pfeat, sig, fm_lin, cp_off, cp_order, cp_ctx,
                           has_bias, s1)
            quad = 0.0
            for b in range(nblk):
                K = Ks[b]
                if newat[b, j]:
                    src = pcov[b]
                elif PRED[b] != 0.0:
                    src = PC[b]
                else:
                    src = _cube(ptrs, b, _COV, K, pcen)[rows[b, j]]
                for i in range(K):
                    v = 0.0
                    for k in range(K):
                        v += src[i, k] * Jp[b, k]
                    quad += Jp[b, i] * v
            rv = noise[0]
            rec[j, 0] = lamp
            rec[j, 1] = quad
            rec[j, 2] = rv
            if lik == LIK_POISSON:
                vq = min(quad, 60.0)
                m = math.exp(min(lamp + 0.5 * vq, max_log_rate))
                rec[j, 3] = m
                rec[j, 4] = math.sqrt(math.expm1(vq) * m * m + m)
            elif lik == LIK_BERNOULLI or lik == LIK_BERNOULLI_ADF:
                z = lamp / math.sqrt(1.0 + (math.pi / 8.0) * quad)
                p1 = 1.0 / (1.0 + math.exp(-z))
                rec[j, 3] = 1.0 - p1
                rec[j, 4] = p1
            else:
                rec[j, 3] = lamp
                rec[j, 4] = math.sqrt(quad + rv)
            if not learn:
                continue
        if wj <= 0.0:  # skipped: the clock and the predict only
            if dynamic:
                for b in range(nblk):
                    r = rows[b, j]
                    K = Ks[b]
                    if PRED[b] != 0.0:
                        mean = _mat(ptrs, b, _MEAN, K, pcen)
                        cov = _cube(ptrs, b, _COV, K, pcen)
                        cr = _cube(ptrs, b, _CROSS, K, pcen)
                        for i in range(K):
                            mean[r, i] = PM[b, i]
                            for k in range(K):
                                cov[r, i, k] = PC[b, i, k]
                                cr[r, i, k] = PX[b, i, k]
                    _times(ptrs, b, rows)[r] = t
            continue
        # 2. the signal and its gradient per block
        lam = _signal(PM, J, vals[j], voff, nslot, Ks, nfeat, pfeat, sig, fm_lin, cp_off, cp_order, cp_ctx,
                      has_bias, s1)
        if not np.isfinite(lam):
            return j, FAILED
        # 3. whitening (H = c J, e)
        y = Y[j]
        r_new = noise[0]
        tot_new = noise[1]
        sc_new = noise[2]
        if lik == LIK_GAUSSIAN:
            c = noise[2]
            e = (y - lam) * c
        elif lik == LIK_ADAPTIVE:
            r_prev = noise[0]
            d2 = (y - lam) * (y - lam)
            tot_new = noise[1] + wj
            eps = 0.0
            if tot_new > 0:
                eps = wj / max(tot_new, tiny)
            if eps_min > 0:
                eps = max(eps, min(eps_min * wj, 1.0))
            base = (1.0 - eps) * r_prev
            r_unb = max(base + eps * d2, min_var)
            c = 1.0 / math.sqrt(r_unb)
            sc_new = c
            if bound >= 0:
                r_new = max(base + eps * min(d2, (bound * bound) * r_prev), min_var)
            else:
                r_new = r_unb
            e = (y - lam) * c
        elif lik == LIK_BERNOULLI:
            pr = 1.0 / (1.0 + math.exp(-lam))
            v = max(pr * (1.0 - pr), tiny)
            c = math.sqrt(v)
            e = (y - pr) / c
        elif lik == LIK_BERNOULLI_ADF:  # AssumedDensityCategorical.whiten, one logit
            sq = 0.0  # the logit's prior predictive variance J Σ⁻ Jᵀ
            for b in range(nblk):
                K = Ks[b]
                src = PC[b] if PRED[b] != 0.0 else _cube(ptrs, b, _COV, K, pcen)[rows[b, j]]
                for i in range(K):
                    v = 0.0
                    for k in range(K):
                        v += src[i, k] * J[b, k]
                    sq += J[b, i] * v
            kap = 1.0 / math.sqrt(1.0 + (math.pi / 8.0) * sq)
            pr = 1.0 / (1.0 + math.exp(-(kap * lam)))
            v = max(pr * (1.0 - pr), tiny)
            keep = max(1.0 - sq * kap * kap * v, tiny)
            c = kap * math.sqrt(v / keep)
            e = (y - pr) / math.sqrt(v * keep)
        else:
            rate = max(math.exp(min(lam, max_log_rate)), tiny)
            c = math.sqrt(rate)
            e = (y - rate) / c
        if wj != 1.0:
            sw = math.sqrt(wj)
            e = e * sw
        else:
            sw = 1.0
        for b in range(nblk):
            for i in range(Ks[b]):
                J[b, i] = J[b, i] * c * sw
        # 4. the DEKF update (into scratch), checked, then written
        acc = 0.0
        for b in range(nblk):
            K = Ks[b]
            src = PC[b] if PRED[b] != 0.0 else _cube(ptrs, b, _COV, K, pcen)[rows[b, j]]
            hq = 0.0
            for i in range(K):
                v = 0.0
                for k in range(K):
                    v += src[i, k] * J[b, k]
                QQ[b, i] = v
                hq += J[b, i] * v
            acc += hq
        S = 1.0 + acc
        if not (S > 0.0 and np.isfinite(S)):
            return j, FAILED
        L = math.sqrt(S)
        u = (e / L) / L
        for b in range(nblk):
            K = Ks[b]
            r = rows[b, j]
            src = PC[b] if PRED[b] != 0.0 else _cube(ptrs, b, _COV, K, pcen)[r]
            for i in range(K):
                Q[i] = QQ[b, i]
                Z[i] = Q[i] / L
            chk = 0.0  # v·0 is 0 for a finite v, NaN otherwise
            for i in range(K):
                v = PM[b, i] + Q[i] * u
                PM[b, i] = v
                chk += v * 0.0
            if sym[b]:  # an exactly symmetric Σ: Σ − Z Zᵀ is too, and 0.5(C + Cᵀ) = C bit for bit
                for i in range(K):
                    zi = Z[i]
                    for k in range(K):
                        v = src[i, k] - zi * Z[k]
                        PC[b, i, k] = v
                        chk += v * 0.0
            else:
                for i in range(K):
                    for k in range(i, K):
                        v = 0.5 * ((src[i, k] - Z[i] * Z[k]) + (src[k, i] - Z[k] * Z[i]))
                        PC[b, i, k] = v
                        PC[b, k, i] = v
                        chk += v * 0.0
            if dynamic:
                srx = PX[b] if PRED[b] != 0.0 else _cube(ptrs, b, _CROSS, K, pcen)[r]
                rc = _cube(ptrs, b, _REF_COV, K, pcen)
                for i in range(K):
                    v = 0.0
                    for k in range(K):
                        v += srx[i, k] * J[b, k]
                    Q0[i] = v
                    Z0[i] = v / L
                for i in range(K):
                    v = PRM[b, i] + Q0[i] * u
                    PRM[b, i] = v
                    chk += v * 0.0
                    zi = Z0[i]
                    for k in range(K):
                        v = srx[i, k] - zi * Z[k]
                        PX[b, i, k] = v
                        chk += v * 0.0
                    if sym[b]:
                        for k in range(K):
                            v = rc[r, i, k] - zi * Z0[k]
                            PRC[b, i, k] = v
                            chk += v * 0.0
                    else:
                        for k in range(i, K):
                            v = 0.5 * ((rc[r, i, k] - Z0[i] * Z0[k]) + (rc[r, k, i] - Z0[k] * Z0[i]))
                            PRC[b, i, k] = v
                            PRC[b, k, i] = v
                            chk += v * 0.0
            if not chk == 0.0:
                return j, FAILED
        for b in range(nblk):
            r = rows[b, j]
            K = Ks[b]
            mean = _mat(ptrs, b, _MEAN, K, pcen)
            cov = _cube(ptrs, b, _COV, K, pcen)
            for i in range(K):
                mean[r, i] = PM[b, i]
                for k in range(K):
                    cov[r, i, k] = PC[b, i, k]
            if dynamic:
                rm = _mat(ptrs, b, _REF_MEAN, K, pcen)
                cr = _cube(ptrs, b, _CROSS, K, pcen)
                rc = _cube(ptrs, b, _REF_COV, K, pcen)
                for i in range(K):
                    rm[r, i] = PRM[b, i]
                    for k in range(K):
                        cr[r, i, k] = PX[b, i, k]
                        rc[r, i, k] = PRC[b, i, k]
                _times(ptrs, b, rows)[r] = t
        noise[0] = r_new
        noise[1] = tot_new
        noise[2] = sc_new
    return n, OK


# -- Python side ---------------------------------------------------------------------------------------

def scratch_sizes(nblk: int, Kmax: int):
    """Sizes of the scratch arrays ``(wdt, w64)`` of :func:`factorization_events`."""
    kk = nblk * Kmax
    return 3 * kk + 3 * kk * Kmax, 3 * kk + 5 * Kmax + nblk


def serves(filt) -> bool:
    """Whether :func:`run_events_compiled` handles ``filt`` (a
    :class:`~skfilter.factorization.model.FactorizationFilter`): the kernels on
    (:func:`skfilter.kernels.enabled`), CPU, float64 or float32, one output, ``iterations == 1``, a
    linear signal, MF/CP (biases, context on or off) or an order-2 factorization machine (linear term
    on or off), a Gaussian (fixed or online noise, not ``robust_threshold``), Bernoulli or Poisson
    likelihood, one table per slot."""
    try:
        if not enabled() or filt.device.type != "cpu" or filt.dtype not in (torch.float64, torch.float32):
            return False
        if filt.d != 1 or filt.iterations != 1:
            return False
        names = [s.name for s in filt.slots] + (["bias"] if filt.has_bias else [])
        if len(set(names)) != len(names) or not filt.slots:
            return False
        codes = filt.kernel_codes()
        if codes is None:
            return False
        for s, slot in enumerate(filt.slots):
            table = filt.tables[slot.name]
            if table.K != slot.n_features * filt.signal.params_per_feature(s) or table.dtype != filt.dtype:
                return False
            if table.references != (filt.alpha is not None):
                return False
        if filt.has_bias and filt.tables["bias"].K != 1:
            return False
        if codes[0] == SIG_FM2 and len({filt.signal.params_per_feature(s) for s in range(len(filt.slots))}) != 1:
            return False
        return True
    except (AttributeError, KeyError, IndexError, TypeError):
        return False


def _table_rows(table, keys, n, t0):
    """Rows of ``keys`` (length ``n``; None: the one entity, key 0, of a context or bias table) in
    ``table``, creating the new ones in order of first appearance with ``last_time`` their first
    event's time; returns ``(rows, new keys, their first event indices)``."""
    ids = table.ids
    if keys is None:
        row = ids.get(0)
        if row is None:
            table.extend([0], np.array([t0 + 1]))
            return np.full(n, ids[0], dtype=np.int64), [0], np.zeros(1, dtype=np.int64)
        return np.full(n, row, dtype=np.int64), [], _NO_EVENTS
    get = ids.get
    rows = np.fromiter((get(k, -1) for k in keys), dtype=np.int64, count=n)
    miss = np.flatnonzero(rows < 0)
    if not miss.size:
        return rows, [], _NO_EVENTS
    start = table.n_entities
    seen, new, first, found = {}, [], [], []
    for j in miss.tolist():  # one pass: each missing key's new row, the new keys in order
        k = keys[j]
        r = seen.get(k)
        if r is None:
            r = seen[k] = start + len(new)
            new.append(k)
            first.append(j)
        found.append(r)
    first = np.asarray(first, dtype=np.int64)
    table.extend(new, t0 + 1 + first)
    rows[miss] = found
    return rows, new, first


_NO_EVENTS = np.zeros(0, dtype=np.int64)


def _contiguous(table):
    for name in table._fields():
        value = getattr(table, name)
        if not value.is_contiguous():
            setattr(table, name, value.contiguous())


class KernelPlan:
    """What :func:`factorization_events` needs of a filter (:func:`serves` accepts it), built once:
    its configuration, the prior of an unseen entity per block, scratch, and the addresses of the
    tables' arrays (refreshed when a table's tensors are replaced: growth, ``to``; the plan holds
    the tensors). With a Gaussian likelihood the filter's noise state becomes tensors viewing the
    plan's ``noise`` array, which the kernel updates in place. Cached on the filter
    (:func:`kernel_plan`); one-event calls (:meth:`predict_one`, :meth:`learn_one`) cost a few µs."""

    def __init__(self, filt):
        sig, fm_lin, cp_off, cp_order, cp_ctx, lik = filt.kernel_codes()
        self.filt = filt
        self.dtype = filt.dtype
        self.np_dtype = np.float64 if filt.dtype == torch.float64 else np.float32
        self.dynamic = dynamic = filt.alpha is not None
        self.names = [s.name for s in filt.slots] + (["bias"] if filt.has_bias else [])
        self.nslot, self.nblk = len(filt.slots), len(self.names)
        self.tables = [filt.tables[k] for k in self.names]
        self.lik = lik
        self.gaussian = lik in (LIK_GAUSSIAN, LIK_ADAPTIVE)
        nblk = self.nblk
        lk = filt.likelihood
        bound = getattr(lk, "residual_bound", None)
        log_alpha = math.log(filt.alpha) if dynamic else 0.0
        Ks = np.array([t.K for t in self.tables], dtype=np.int64)
        nfeat = np.array([s.n_features for s in filt.slots], dtype=np.int64)
        pfeat = np.array([filt.signal.params_per_feature(s) for s in range(self.nslot)], dtype=np.int64)
        voff = np.concatenate([[0], np.cumsum(nfeat)]).astype(np.int64)
        self.n_values = nv = int(voff[-1])
        head = [nblk, self.nslot, sig, fm_lin, cp_off, cp_order, cp_ctx, int(filt.has_bias), lik, int(dynamic), 0, 1,
                1, 0, 0]
        assert len(head) == _HEAD
        self._sym_at = len(head) + len(Ks) + len(nfeat) + len(pfeat) + len(voff)
        self.icfg = np.concatenate([head, Ks, nfeat, pfeat, voff, np.zeros(nblk), np.zeros(7 * nblk)]).astype(np.int64)
        self._ptrs_at = len(self.icfg) - 7 * nblk
        self.icfg_predict = self.icfg.copy()
        self.icfg_predict[10:13] = (1, 0, 0)  # record, do not learn, every event at the next step
        Kmax = int(Ks.max())
        size_dt, size_64 = scratch_sizes(nblk, Kmax)
        fcfg = [float(getattr(lk, "eps_min", 0.0)), float(getattr(lk, "min_variance", 0.0)),
                -1.0 if bound is None else float(bound), float(getattr(lk, "max_log_rate", 30.0)),
                float(torch.finfo(filt.dtype).eps) ** 2, log_alpha, math.expm1(2.0 * log_alpha) if dynamic else 1.0]
        self._omegas_at = len(fcfg)
        self.f64s = np.concatenate([fcfg, np.zeros(nblk), np.zeros(size_64)]).astype(np.float64)
        kk = nblk * Kmax
        self.dts = np.zeros(3 + kk + kk * Kmax + size_dt, dtype=self.np_dtype)
        self.noise = self.dts[0:3]
        self._prior_mean = self.dts[3:3 + kk].reshape(nblk, Kmax)
        self._prior_cov = self.dts[3 + kk:3 + kk + kk * Kmax].reshape(nblk, Kmax, Kmax)
        self.set_priors()
        self._tensors = ()
        #: serialises the calls: the scratch and the one-event buffers are shared (callers of the
        #: one-event methods hold it while they fill and read the buffers)
        self.lock = threading.Lock()
        # one-event buffers: rows and new flags, and [values, y, w, record]
        self.rows1 = np.zeros((2 * nblk, 1), dtype=np.int64)
        self.rows_flat = self.rows1[:nblk, 0]
        self.new_flat = self.rows1[nblk:, 0]
        self.data1 = np.zeros((1, nv + 7), dtype=np.float64)
        self.data1[0, nv + 1] = 1.0
        self.values1 = self.data1[:, :nv]  # written by the caller of the one-event methods
        self.rec1 = self.data1[0, nv + 2:]
        self.refresh()

    def set_priors(self):
        """Write what the kernel reads of the tables' priors: the prior mean and covariance of an
        unseen id per block (:meth:`FactorizationFilter._prior_blocks`), whether each prior
        covariance is exactly symmetric, the drift variances Ω (after
        :meth:`FactorizationFilter.restart`); the noise state is read at the next call."""
        filt = self.filt
        for b, table in enumerate(self.tables):
            K = table.K
            # a table whose prior covariance is exactly symmetric holds only exactly symmetric covariances
            cov = table._prior_cov.cpu().numpy().copy()
            sym = int(np.array_equal(cov, cov.T))
            self.icfg[self._sym_at + b] = self.icfg_predict[self._sym_at + b] = sym
            self.f64s[self._omegas_at + b] = float(filt.omega[self.names[b]][0]) if self.dynamic else 0.0
            # Π + diag(stationary) + diag(jitter²), in the tables' precision, as the torch engine adds them
            diagonal = cov.reshape(-1)[::K + 1]  # (a view)
            diagonal += table._stationary.cpu().numpy()
            diagonal += (table.prior.jitter ** 2).astype(self.np_dtype)
            self._prior_mean[b, :K] = table.prior.mean
            self._prior_cov[b, :K, :K] = cov
        self._noise_dict = None

    def current(self) -> bool:
        """Whether the addresses are those of the tables' tensors."""
        for t, tensors in zip(self.tables, self._tensors):
            if t.mean is not tensors[0] or t.cov is not tensors[1] or t.last_time is not tensors[2]:
                return False
            if self.dynamic and (t.ref_mean is not tensors[3] or t.cross is not tensors[4]
                                 or t.ref_cov is not tensors[5]):
                return False
        return True

    def refresh(self):
        """Hold the tables' current tensors and write their addresses and capacities."""
        for t in self.tables:
            _contiguous(t)
        self._tensors = tuple(tuple(getattr(t, name) for name in t._fields()) for t in self.tables)
        ptrs = np.zeros((self.nblk, 7), dtype=np.int64)
        for b, tensors in enumerate(self._tensors):
            for field, tensor in enumerate(tensors):
                ptrs[b, field] = tensor.data_ptr()
            ptrs[b, _CAP] = tensors[0].shape[0]
        for icfg in (self.icfg, self.icfg_predict):
            icfg[self._ptrs_at:] = ptrs.reshape(-1)

    def sync(self):
        """Make the plan current (the tables' tensors, the filter's noise state)."""
        if not self.current():
            self.refresh()
        f = self.filt
        if self.gaussian and f.noise is not self._noise_dict:  # the filter's noise: views of ours
            buf = self.noise
            buf[0] = float(f.noise["r"].reshape(-1)[0])
            buf[1] = float(f.noise["weight"])
            buf[2] = float(f.noise["scale"].reshape(-1)[0])
            f.noise = self._noise_dict = {"r": torch.from_numpy(buf[0:1]),
                                          "weight": torch.from_numpy(buf[1:2]).reshape(()),
                                          "scale": torch.from_numpy(buf[2:3]).reshape(1, 1)}

    def call(self, rows, newat, vals, Y, w, t0, icfg, record=None):
        """Run the kernel on ``n`` events (arrays as :func:`factorization_events` before packing);
        ``record``: an ``(n, 5)`` array that gets ``rec``."""
        n = Y.shape[0]
        nblk, nv = self.nblk, self.n_values
        rows2 = np.zeros((2 * nblk, n), dtype=np.int64)
        rows2[:nblk] = rows
        if newat is not None:
            rows2[nblk:] = newat
        data = np.empty((n, nv + 7), dtype=np.float64)
        data[:, :nv] = vals
        data[:, nv] = Y
        data[:, nv + 1] = 1.0 if w is None else w
        icfg = icfg.copy()
        icfg[13], icfg[14] = int(w is not None), int(t0)
        with self.lock:
            self.sync()
            icfg[self._ptrs_at:] = self.icfg[self._ptrs_at:]  # the addresses as sync left them
            out = factorization_events(rows2, data, icfg, self.f64s, self.dts)
        if record is not None:
            record[:] = data[:, nv + 2:]
        return out

    # -- one event ----------------------------------------------------------------------------------
    def predict_one(self, keys, vals=None):
        """``[λ, Var λ, r, a, b]`` (:func:`factorization_events`) of one event at the next step:
        ``keys`` the id of each block (its table's key: 0 for the context and the bias), its
        feature values in :attr:`values1` (or ``vals``, ``(1, n_values)``). Writes nothing. The
        caller holds :attr:`lock` (and reads the returned view, a buffer, under it)."""
        self.sync()
        rows, new = self.rows_flat, self.new_flat
        b = 0
        for table, key in zip(self.tables, keys):
            r = table.ids.get(key)
            if r is None:
                new[b] = 1
                rows[b] = 0
            else:
                new[b] = 0
                rows[b] = r
            b += 1
        if vals is not None and vals is not self.values1:
            self.values1[:] = vals
        icfg = self.icfg_predict
        icfg[14] = self.filt.time
        factorization_events(self.rows1, self.data1, icfg, self.f64s, self.dts)
        return self.rec1

    def learn_one(self, keys, y, vals=None):
        """Learn one event (as ``filt.step``; its values in :attr:`values1` or ``vals``); on a
        numerical failure nothing is kept (its new entities are dropped with their prior draws) and
        :class:`~skfilter.exceptions.FilterStepError` is raised. The caller holds :attr:`lock`."""
        f = self.filt
        t0 = f.time
        rows = self.rows_flat
        created = None
        b = 0
        for table, key in zip(self.tables, keys):
            r = table.ids.get(key)
            if r is None:
                if created is None:
                    created = []
                created.append((table, table.n_entities, table.generator_state))
                r = table.add(key, t0 + 1)
            rows[b] = r
            b += 1
        self.sync()  # after the creations (a table may have grown)
        if vals is not None and vals is not self.values1:
            self.values1[:] = vals
        self.data1[0, self.n_values] = y
        icfg = self.icfg
        icfg[14] = t0
        done, status = factorization_events(self.rows1, self.data1, icfg, self.f64s, self.dts)
        if status == OK:
            f.time = t0 + 1
            return
        for table, n0, state in created or ():
            table.forget_after(n0)
            table.generator_state = state
        raise _step_error(0)


def _step_error(done):
    err = FilterStepError(f"The DEKF step of event {done} of the chunk produced a non-finite value or an innovation "
                          "that is not positive; the events before it are learned and kept. Try a smaller "
                          "prior_variance, a larger obs_variance, or iterations > 1.")
    err.rows_done = done
    return err


def kernel_plan(filt) -> KernelPlan:
    """The :class:`KernelPlan` of ``filt`` (one :func:`serves` accepts), cached on it."""
    plan = filt.__dict__.get("_kernel_plan")
    if plan is None or plan.dtype != filt.dtype or plan.filt is not filt:
        plan = KernelPlan(filt)
        filt.__dict__["_kernel_plan"] = plan
    return plan


def _values_array(values, n):
    vals = [np.asarray(v.detach().cpu().numpy(), dtype=np.float64).reshape(n, -1) for v in values]
    return np.ascontiguousarray(np.concatenate(vals, axis=1)) if vals else np.zeros((n, 0))


def predict_events_compiled(filt, slot_ids, values) -> np.ndarray:
    """``[λ, Var λ, r, a, b]`` per event (:func:`factorization_events`, ``(n, 5)`` float64) of ``n``
    events at the next step, as :meth:`~skfilter.factorization.model.FactorizationFilter.linearized`
    (the blocks brought forward to ``time + 1``, an unseen id at its prior; nothing is written)."""
    if not serves(filt):
        raise ValueError("predict_events_compiled does not serve this filter (see serves).")
    plan = kernel_plan(filt)
    n = len(values[0]) if values else len(slot_ids[0])
    rows = np.zeros((plan.nblk, n), dtype=np.int64)
    for b, table in enumerate(plan.tables):
        keys = slot_ids[b] if b < plan.nslot and slot_ids[b] is not None else None
        get = table.ids.get
        rows[b] = np.fromiter((get(k, -1) for k in keys), dtype=np.int64, count=n) if keys is not None else \
            get(0, -1)
    newat = rows < 0
    rows[newat] = 0
    rec = np.zeros((n, 5), dtype=np.float64)
    plan.call(rows, newat, _values_array(values, n), np.zeros(n), None, int(filt.time), plan.icfg_predict, rec)
    return rec


class FirstAppearances:
    """The rows that a stream's first ``n`` events take in entity tables that start empty (a new
    filter, or one that :meth:`~skfilter.factorization.model.FactorizationFilter.restart` emptied):
    per block, each event's rank of first appearance (its row), the new ids in that order and the
    event at which each first appears. Ids are created in order of first appearance, so for every
    prefix of the events these are the rows :func:`run_events_compiled` creates; a caller that
    learns each prefix again on a restarted filter (the prequential pass over the events that set
    an ``'auto'`` prior) finds them once, then passes them as ``first_appearances``.

    Parameters
    ----------
    filt : FactorizationFilter
        One that :func:`serves` accepts (its blocks: the slots, then the bias).
    slot_ids : list over ``filt.slots`` of sequences of at least ``n`` ids (``None`` for the context slot)
    n : int
    """

    def __init__(self, filt, slot_ids, n):
        plan = kernel_plan(filt)
        self.n = int(n)
        self.blocks = []
        for b, slot in enumerate(filt.slots + [None] * (plan.nblk - plan.nslot)):
            if slot is None or slot.context:  # one entity, key 0, at the first event
                self.blocks.append((np.zeros(self.n, dtype=np.int64), [0], np.zeros(1, dtype=np.int64)))
                continue
            keys = slot_ids[b]
            rank: dict = {}
            rows = np.fromiter((rank.setdefault(keys[j], len(rank)) for j in range(self.n)), dtype=np.int64,
                               count=self.n)
            first = np.unique(rows, return_index=True)[1].astype(np.int64)  # by rank: its first event
            self.blocks.append((rows, list(rank), first))

    def rows(self, b, n):
        """``(rows (n,), new ids, their first events)`` of block ``b`` for the first ``n`` events."""
        rows, new, first = self.blocks[b]
        m = int(np.searchsorted(first, n))
        return rows[:n], new[:m], first[:m]


def run_events_compiled(filt, slot_ids, values, Y, weights, record=None, first_appearances=None) -> int:
    """Learn ``n`` events in order into ``filt``'s tables, exactly as ``n`` calls of
    ``filt.step(ids, values, y, weight)`` would (same rows and entity creation order, time stamps
    and noise state).

    Parameters
    ----------
    filt : FactorizationFilter
        One that :func:`serves` accepts.
    slot_ids : list over ``filt.slots`` of sequences of ``n`` ids (``None`` for the context slot)
    values : list over ``filt.slots`` of tensors ``(n, n_s)``
    Y : tensor ``(n, 1)``
    weights : ndarray ``(n,)`` or None
        ``w`` scales the event's precision; ``w <= 0`` skips the update (the clock advances).
    record : ndarray ``(n, 5)`` float64, optional
        Filled with each event's one-step-ahead prediction, made before it is learned (as
        :func:`predict_events_compiled` would give it then): ``[λ, Var λ, r, a, b]``.
    first_appearances : FirstAppearances, optional
        The rows of these events (found for ``slot_ids`` beforehand, for at least ``n`` events),
        when every table is empty: the ids are not looked up.

    Returns
    -------
    int
        The number of events learned (``n``).

    Raises
    ------
    FilterStepError
        On a numerical failure at event ``k`` (its ``rows_done`` is ``k``): the events before ``k``
        are learned and kept, event ``k`` is not written (not even its lazy predict), the entities
        first seen at ``k`` or later are removed again (ids, ``n_entities`` and the tables' random
        draws) and the time and noise are those after event ``k − 1``.
    ValueError
        If :func:`serves` is False for ``filt``.
    """
    if not serves(filt):
        raise ValueError("run_events_compiled does not serve this filter (see serves); use FactorizationFilter.step.")
    n = int(Y.shape[0])
    if n == 0:
        return 0
    plan = kernel_plan(filt)
    t0 = int(filt.time)
    nslot, nblk = plan.nslot, plan.nblk
    tables = plan.tables
    rng_states = [t.generator_state for t in tables]
    sizes = [(t.n_entities, len(t.ids)) for t in tables]
    rows = np.empty((nblk, n), dtype=np.int64)
    newat = np.zeros((nblk, n), dtype=np.int64) if record is not None else None
    created = []
    if first_appearances is not None and (first_appearances.n < n or any(t.n_entities for t in tables)):
        raise ValueError("first_appearances needs empty tables and rows for every event.")
    for b, (slot, table) in enumerate(zip(filt.slots + [None] * (nblk - nslot), tables)):
        keys = None if slot is None or slot.context else slot_ids[b]
        if keys is not None and len(keys) != n:
            raise ValueError(f"slot {slot.name!r} has {len(keys)} ids for {n} events.")
        if first_appearances is None:
            rows[b], new, first = _table_rows(table, keys, n, t0)
        else:
            rows[b], new, first = first_appearances.rows(b, n)
            table.extend(new, t0 + 1 + first)
        created.append((new, first))
        if record is not None:
            newat[b, first] = 1
    vals = _values_array(values, n)
    Yn = np.ascontiguousarray(np.asarray(Y.detach().cpu().numpy(), dtype=np.float64).reshape(n))
    has_w = weights is not None
    w = np.ascontiguousarray(np.asarray(weights, dtype=np.float64).reshape(n)) if has_w else None
    icfg = plan.icfg.copy()
    icfg[10] = int(record is not None)
    done, status = plan.call(rows, newat, vals, Yn, w, t0, icfg, record)
    done = int(done)
    filt.time = t0 + done
    if status == OK:
        return done
    # undo the entities first seen at the failing event or later (and their prior draws)
    for table, (n0, _), state, (new, first) in zip(tables, sizes, rng_states, created):
        keep = int(np.searchsorted(first, done, side="left"))
        if keep == len(new):
            continue
        for key in new[keep:]:
            del table.ids[key]
        table.n_entities = n0 + keep
        table.generator_state = state
        if keep:
            table.skip_draws(keep)
    raise _step_error(done)
