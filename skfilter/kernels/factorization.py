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

__all__ = ["serves", "run_events_compiled", "predict_events_compiled", "kernel_plan", "KernelPlan",
           "record_width"]

SIG_LINEAR, SIG_FM2, SIG_CP = 0, 1, 2
#: the likelihoods: Gaussian (fixed or online noise), Bernoulli (the EKF update), Poisson, and Bernoulli
#: with the assumed-density update (:class:`~skfilter.likelihoods.AssumedDensityCategorical`, one logit); for
#: ``d > 1`` logits (:func:`factorization_events_multi`) the categorical likelihood with the EKF update
#: (:class:`~skfilter.likelihoods.Categorical`) or the assumed-density one
LIK_GAUSSIAN, LIK_ADAPTIVE, LIK_BERNOULLI, LIK_POISSON, LIK_BERNOULLI_ADF = 0, 1, 2, 3, 4
LIK_CATEGORICAL, LIK_CATEGORICAL_ADF = 5, 6
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


@njit(cache=True, nogil=True)
def _unpack_config(icfg, o):
    """The integer configuration of a kernel call (:class:`KernelPlan`): the flags of its head, then
    from offset ``o`` the blocks' sizes ``Ks``, the slots' feature counts and offsets, the value
    offsets, the symmetric-block flags and the tables' addresses ``ptrs (nblk, 7)``."""
    nblk, nslot, sig, fm_lin = icfg[0], icfg[1], icfg[2], icfg[3]
    cp_off, cp_order, cp_ctx, has_bias = icfg[4], icfg[5], icfg[6], icfg[7] != 0
    lik, dynamic, record, learn = icfg[8], icfg[9] != 0, icfg[10] != 0, icfg[11] != 0
    t_step, has_w, t0 = icfg[12], icfg[13] != 0, icfg[14]
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
    return (nblk, nslot, sig, fm_lin, cp_off, cp_order, cp_ctx, has_bias, lik, dynamic, record, learn, t_step, has_w,
            t0, Ks, nfeat, pfeat, voff, sym, ptrs)


@njit(cache=True, nogil=True)
def _ou_predict_block(ptrs, b, r, K, pcen, delta, log_alpha, g_den, omegas, PM, PRM, PC, PX):
    """The lazy predict of Alg. 2 for block ``b``'s entity row ``r`` over ``delta > 0`` steps (module
    docstring, step 1): with ``a = α^Δ`` and ``g = (α^{2Δ} − 1)/(α² − 1)``, the mean
    ``PM = a (μ − μ_ref) + μ_ref``, the covariance ``PC = a² Σ + (1 − a)² Σ_ref + (a − a²)(X + Xᵀ) +
    g ω I`` (symmetrised) and the cross-covariance ``PX = a X + (1 − a) Σ_ref`` into the step's
    scratch (``PRM``: the reference mean)."""
    cov = _cube(ptrs, b, _COV, K, pcen)
    mean = _mat(ptrs, b, _MEAN, K, pcen)
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


@njit(cache=True, nogil=True)
def _write_predicts(ptrs, rows, j, nblk, Ks, pcen, PRED, PM, PC, PX, t):
    """An event that learns nothing (weight 0): the blocks' lazy predicts (:func:`_ou_predict_block`)
    written to the tables and their clocks set to ``t``."""
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
    (nblk, nslot, sig, fm_lin, cp_off, cp_order, cp_ctx, has_bias, lik, dynamic, record, learn, t_step, has_w, t0,
     Ks, nfeat, pfeat, voff, sym, ptrs) = _unpack_config(icfg, _HEAD)
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
                _ou_predict_block(ptrs, b, r, K, pcen, delta, log_alpha, g_den, omegas, PM, PRM, PC, PX)
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
                _write_predicts(ptrs, rows, j, nblk, Ks, pcen, PRED, PM, PC, PX, t)
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


# -- several outputs (multiclass logits) ----------------------------------------------------------------

#: the multiclass kernel's configuration header: :data:`_HEAD`'s fields, then ``d``
_HEAD_MULTI = _HEAD + 1


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _softmax(z, out, d):
    """``out = softmax(z)`` over the first ``d`` entries (shifted by the largest, as torch)."""
    mx = z[0]
    for c in range(1, d):
        if z[c] > mx:
            mx = z[c]
    tot = 0.0
    for c in range(d):
        v = math.exp(z[c] - mx)
        out[c] = v
        tot += v
    for c in range(d):
        out[c] = out[c] / tot


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _shift_free(Q, d, v):
    """The shift-free logit variances of :func:`~skfilter.likelihoods.shift_free_logit_variance`:
    ``v_c = d/(d − 1) · max(0, Q_cc − 2 r_c + r̄)`` with ``r = Q 1 / d``, into ``v``."""
    tot = 0.0
    for c in range(d):
        s = 0.0
        for k in range(d):
            s += Q[c, k]
        v[c] = s / d
        tot += v[c]
    mean_row = tot / d
    for c in range(d):
        x = Q[c, c] - 2.0 * v[c] + mean_row
        v[c] = max(x, 0.0) * (d / (d - 1.0))


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _outputs(P, J, lamv, v, voff, nslot, nblk, Ks, Kcs, nfeat, pfeat, sig, fm_lin, cp_off, cp_order, cp_ctx, has_bias,
             s1, Pc, Jc, d):
    """The ``d`` logits ``λ_c`` at the block means ``P`` and their gradients into ``J``: output ``c``
    reads and writes section ``c`` (entries ``c K_b/d … (c + 1) K_b/d − 1``) of each block, the
    signal of one output (:func:`_signal`) on the sections of its parameters."""
    for c in range(d):
        for b in range(nblk):
            kc = Kcs[b]
            for i in range(kc):
                Pc[b, i] = P[b, c * kc + i]
        lamv[c] = _signal(Pc, Jc, v, voff, nslot, Kcs, nfeat, pfeat, sig, fm_lin, cp_off, cp_order, cp_ctx, has_bias,
                          s1)
        for b in range(nblk):
            kc = Kcs[b]
            for i in range(kc):
                J[b, c * kc + i] = Jc[b, i]


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _gain_pass(src, Jb, Ub, D, K, kc, d, rows_are_columns):
    """``U = Σ G`` (``(d, K)``: column ``c`` of ``Σ G`` in row ``c``) of one block, with ``G`` the
    block-diagonal gradient (output ``c``'s gradient ``J_c`` on section ``c``), and ``D += Gᵀ U``
    (the block's share of the logits' covariance ``J Σ Jᵀ``). ``rows_are_columns``: ``src`` is
    exactly symmetric, so rows are read for columns (contiguous). Returns ``Σ_ik src_ik²`` (a bound
    of ``max |src|²``; it vectorises, the largest value does not)."""
    ss = 0.0
    if rows_are_columns:
        for c in range(d):
            u = Ub[c]
            for i in range(K):
                u[i] = 0.0
            for k in range(kc):
                jk = Jb[c * kc + k]
                row = src[c * kc + k]
                for i in range(K):
                    x = row[i]
                    u[i] += jk * x
                    ss += x * x
    else:
        for i in range(K):
            row = src[i]
            for k in range(K):
                ss += row[k] * row[k]
            for c in range(d):
                acc = 0.0
                for k in range(kc):
                    acc += row[c * kc + k] * Jb[c * kc + k]
                Ub[c, i] = acc
    for c in range(d):
        for c2 in range(d):
            acc = 0.0
            for k in range(kc):
                acc += Jb[c * kc + k] * Ub[c2, c * kc + k]
            D[c, c2] += acc
    return ss


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _lowrank_update(src, dst, Za, Zb, K, d, symmetric, exact_sym, acc, write, vmax):
    """``dst = src − Zaᵀ Zb`` (``Za, Zb (d, K)``; ``src`` and ``dst`` may be the same array).

    ``symmetric`` (a covariance: ``Za = Zb``): the result is symmetrised as the torch engine does,
    ``½(C + Cᵀ)``: with ``exact_sym`` (``src`` exactly symmetric) row by row (then exact, the
    products' order being the same for ``(i, k)`` and ``(k, i)``), else the upper triangle from
    ``½(src + srcᵀ)`` and mirrored. Without ``write`` nothing is stored. Returns whether every value
    is finite and at most ``vmax`` in magnitude (what the table's dtype holds).

    The row branch subtracts four rows of ``Z`` per sweep, ``((a₀b₀ + a₁b₁) + (a₂b₂ + a₃b₃))``: the same
    products in the same order for ``(i, k)`` and ``(k, i)``, so an exactly symmetric ``src`` gives
    an exactly symmetric result."""
    ok = True
    if symmetric and not exact_sym:
        for i in range(K):
            for k in range(i, K):
                acc[k] = 0.5 * (src[i, k] + src[k, i])
            for r in range(d):
                zi = Za[r, i]
                zr = Zb[r]
                for k in range(i, K):
                    acc[k] -= zi * zr[k]
            for k in range(i, K):
                v = acc[k]
                if not abs(v) <= vmax:
                    ok = False
                if write:
                    dst[i, k] = v
                    dst[k, i] = v
        return ok
    for i in range(K):
        row = src[i]
        for k in range(K):
            acc[k] = row[k]
        r = 0
        while r + 4 <= d:  # four rows of Z per sweep of the row (a quarter of the loads and stores)
            a0, a1, a2, a3 = Za[r, i], Za[r + 1, i], Za[r + 2, i], Za[r + 3, i]
            b0, b1, b2, b3 = Zb[r], Zb[r + 1], Zb[r + 2], Zb[r + 3]
            for k in range(K):
                acc[k] -= (a0 * b0[k] + a1 * b1[k]) + (a2 * b2[k] + a3 * b3[k])
            r += 4
        while r < d:
            zi = Za[r, i]
            zr = Zb[r]
            for k in range(K):
                acc[k] -= zi * zr[k]
            r += 1
        if write:
            out = dst[i]
            for k in range(K):
                out[k] = acc[k]
        else:
            for k in range(K):
                if not abs(acc[k]) <= vmax:
                    ok = False
    return ok


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _cholesky(S, L, d):
    """``L Lᵀ = S`` (lower, ``d × d``); False unless ``S`` is positive definite with finite factors."""
    for i in range(d):
        for k in range(i + 1):
            s = S[i, k]
            for m in range(k):
                s -= L[i, m] * L[k, m]
            if i == k:
                if not (s > 0.0 and np.isfinite(s)):
                    return False
                L[i, i] = math.sqrt(s)
            else:
                L[i, k] = s / L[k, k]
                if not np.isfinite(L[i, k]):
                    return False
        for k in range(i + 1, d):
            L[i, k] = 0.0
    return True


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _whiten_categorical(lik, lamv, D, y, sw, tiny, d, M, e, p, sp, kap, v, A1, H0, Q, T):
    """The whitened rows ``H = M Gᵀ`` and residual ``e`` of one event with ``d`` logits: ``M (d, d)``
    such that each block's rows are ``M`` times its block-diagonal gradient (every output's rows
    mix the outputs' gradients by the same ``M``), times ``√w``.

    Categorical (:class:`~skfilter.likelihoods.Categorical`): ``p = softmax(λ)``,
    ``M = diag(√p)(I − 1pᵀ)``, ``e = (y − p)/√p``. Assumed density
    (:class:`~skfilter.likelihoods.AssumedDensityCategorical`, ``d`` logits): with the logits'
    covariance ``D = J Σ Jᵀ``, ``κ_c = (1 + π v_c/8)^{−½}`` (``v`` shift-free), ``p̃ = softmax(κ ⊙ λ)``,
    ``M = T diag(√p̃)(I − 1p̃ᵀ) K Π`` and ``e = T (y − p̃)/√p̃``, where
    ``T = (I − clip(GᵀDG, 0, 0.9))^{−½}`` from the eigendecomposition of
    ``diag(√p̃)(I − 1p̃ᵀ)ᵀ… K Π D Π K …`` as the likelihood computes it. Returns False if the
    eigendecomposition's input is not finite."""
    if lik == LIK_CATEGORICAL:
        _softmax(lamv, p, d)
        for r in range(d):
            sp[r] = math.sqrt(max(p[r], tiny))
            e[r] = (y[r] - p[r]) / sp[r] * sw
        for r in range(d):
            for c in range(d):
                M[r, c] = sp[r] * ((1.0 if r == c else 0.0) - p[c]) * sw
        return True
    _shift_free(D, d, v)
    for c in range(d):
        kap[c] = 1.0 / math.sqrt(1.0 + (math.pi / 8.0) * v[c])
        v[c] = kap[c] * lamv[c]  # (the tempered logits)
    _softmax(v, p, d)
    for c in range(d):
        sp[c] = math.sqrt(max(p[c], tiny))
    inv_d = 1.0 / d
    for c in range(d):  # K Π
        for c2 in range(d):
            A1[c, c2] = kap[c] * ((1.0 if c == c2 else 0.0) - inv_d)
    for c2 in range(d):  # diag(√p̃)(I − 1p̃ᵀ) K Π
        s = 0.0
        for c in range(d):
            s += p[c] * A1[c, c2]
        for r in range(d):
            H0[r, c2] = sp[r] * (A1[r, c2] - s)
    # Q = Π D Π (rows, then columns centred), K Q K, then (I − 1p̃ᵀ) on both sides
    for r in range(d):
        s = 0.0
        for c in range(d):
            s += D[r, c]
        s = s / d
        for c in range(d):
            Q[r, c] = D[r, c] - s
    for c in range(d):
        s = 0.0
        for r in range(d):
            s += Q[r, c]
        s = s / d
        for r in range(d):
            Q[r, c] = Q[r, c] - s
    for r in range(d):
        for c in range(d):
            Q[r, c] = kap[r] * Q[r, c] * kap[c]
    for r in range(d):
        s = 0.0
        for c in range(d):
            s += p[c] * Q[r, c]
        for c in range(d):
            Q[r, c] = Q[r, c] - s
    for c in range(d):
        s = 0.0
        for r in range(d):
            s += p[r] * Q[r, c]
        for r in range(d):
            Q[r, c] = Q[r, c] - s
    for r in range(d):
        for c in range(d):
            T[r, c] = sp[r] * Q[r, c] * sp[c]
    for r in range(d):
        for c in range(r, d):
            x = 0.5 * (T[r, c] + T[c, r])
            if not np.isfinite(x):
                return False
            Q[r, c] = x
            Q[c, r] = x
    ev, W = np.linalg.eigh(Q[:d, :d])
    for k in range(d):
        ev[k] = 1.0 / math.sqrt(1.0 - min(max(ev[k], 0.0), 0.9))
    for r in range(d):
        for c in range(d):
            s = 0.0
            for k in range(d):
                s += W[r, k] * ev[k] * W[c, k]
            T[r, c] = s
    for c in range(d):
        v[c] = (y[c] - p[c]) / sp[c]
    for r in range(d):
        s = 0.0
        for c in range(d):
            s += T[r, c] * v[c]
        e[r] = s * sw
        for c2 in range(d):
            s = 0.0
            for c in range(d):
                s += T[r, c] * H0[c, c2]
            M[r, c2] = s * sw
    return True


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def _record_multi(out, lamv, D, d, v, z, p):
    """``out = [λ (d), v (d), p (d)]``: the logits, their shift-free variances and the probit
    predictive ``softmax(λ_c / √(1 + π v_c / 8))`` (:func:`~skfilter.likelihoods.probit_probabilities`)."""
    _shift_free(D, d, v)
    for c in range(d):
        out[c] = lamv[c]
        out[d + c] = v[c]
        z[c] = lamv[c] / math.sqrt(1.0 + (math.pi / 8.0) * v[c])
    _softmax(z, p, d)
    for c in range(d):
        out[2 * d + c] = p[c]


def scratch_sizes_multi(nblk: int, Kmax: int, d: int):
    """Sizes of the scratch arrays ``(wdt, w64)`` of :func:`factorization_events_multi`."""
    kk = nblk * Kmax
    kc = max(Kmax // d, 1)
    return 3 * kk + 2 * kk * Kmax, 2 * kk + 2 * nblk * kc + 2 * nblk * d * Kmax + d * Kmax + 2 * Kmax + 7 * nblk \
        + 9 * d * d + 12 * d


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def factorization_events_multi(rows2, data, icfg, f64s, dts):
    """:func:`factorization_events` for ``d > 1`` outputs (the logits of a multiclass model, with the
    categorical likelihood or its assumed-density update).

    Block ``b`` holds ``d`` sections of ``K_b/d`` parameters, output ``c``'s in section ``c`` (the
    ``(d, n_s, p_s)`` layout of :class:`~skfilter.factorization.model.FactorizationFilter`): the
    gradient ``G_b (K_b, d)`` of the logits is block-diagonal, column ``c`` the gradient of the one-
    output signal (:func:`_signal`) on section ``c``. The likelihood's whitened rows are ``H_b = M G_bᵀ``
    with one ``M (d, d)`` for the event (:func:`_whiten_categorical`), so the DEKF update of
    :func:`~skfilter.factorization.dekf.dekf_update` (dekf notes §3.2, ``m = d`` rows) becomes, with
    ``U_b = Σ_b G_b``,

        D = Σ_b G_bᵀ U_b,  S = I + M D Mᵀ = L Lᵀ,  a = Mᵀ S⁻¹ e,  Z_b = L⁻¹ M U_bᵀ,
        μ_b += U_b a,  Σ_b −= Z_bᵀ Z_b

    (and with references ``U_0b = Σ_0b G_b``, ``Z_0b = L⁻¹ M U_0bᵀ``: ``μ_0b += U_0b a``,
    ``Σ_0b −= Z_0bᵀ Z_b``, ``Σ_0b0 −= Z_0bᵀ Z_0b``): one pass over each covariance for ``U_b`` and one
    for the rank-``d`` update, in place. ``D`` is also the logits' covariance ``J Σ Jᵀ`` of the
    prediction and of the assumed-density whitening.

    Arguments as :func:`factorization_events`, with ``icfg``'s header followed by ``d`` (then ``Ks``
    …), ``data (n, n_v + d + 1 + 3d)``: the values, the one-hot target ``Y (d)``, ``w`` and ``rec``
    (``[λ (d), v (d), p (d)]``: the logits, their shift-free variances and the probit predictive
    probabilities, :func:`_record_multi`), and ``f64s``: the configuration, the ``omegas``, the
    largest value of the tables' dtype, then scratch. A new block is checked before anything is
    written: the means in scratch, the covariances bounded (``‖Σ‖_F + Σ Z²``, at least their largest
    value, below a quarter of the dtype's largest value) or else computed once without writing and
    checked. Returns
    ``(events done, OK or FAILED)``."""
    n = data.shape[0]
    (nblk, nslot, sig, fm_lin, cp_off, cp_order, cp_ctx, has_bias, lik, dynamic, record, learn, t_step, has_w, t0,
     Ks, nfeat, pfeat, voff, sym, ptrs) = _unpack_config(icfg, _HEAD_MULTI)
    d = icfg[15]
    nv = voff[nslot]
    rows = rows2[:nblk]
    newat = rows2[nblk:]
    vals = data[:, :nv]
    Y = data[:, nv:nv + d]
    w = data[:, nv + d]
    rec = data[:, nv + d + 1:nv + 4 * d + 1]
    tiny = f64s[4]
    log_alpha, g_den = f64s[5], f64s[6]
    omegas = f64s[7:7 + nblk]
    vmax = f64s[7 + nblk]
    lim = 0.25 * vmax
    w64 = f64s[8 + nblk:]
    Kmax = 1
    for b in range(nblk):
        if Ks[b] > Kmax:
            Kmax = Ks[b]
    Kcs = np.empty(nblk, dtype=np.int64)
    for b in range(nblk):
        Kcs[b] = Ks[b] // d
    kcm = max(Kmax // d, 1)
    kk = nblk * Kmax
    kk2 = kk * Kmax
    noise = dts[0:3]
    pcen = dts[3:3 + kk].reshape((nblk, Kmax))
    pcov = dts[3 + kk:3 + kk + kk2].reshape((nblk, Kmax, Kmax))
    wdt = dts[3 + kk + kk2:]
    PM = wdt[0:kk].reshape((nblk, Kmax))
    PMp = wdt[kk:2 * kk].reshape((nblk, Kmax))
    PRM = wdt[2 * kk:3 * kk].reshape((nblk, Kmax))
    PC = wdt[3 * kk:3 * kk + kk2].reshape((nblk, Kmax, Kmax))
    PX = wdt[3 * kk + kk2:3 * kk + 2 * kk2].reshape((nblk, Kmax, Kmax))
    o = 0
    J = w64[o:o + kk].reshape((nblk, Kmax))
    o += kk
    Jp = w64[o:o + kk].reshape((nblk, Kmax))
    o += kk
    Pc = w64[o:o + nblk * kcm].reshape((nblk, kcm))
    o += nblk * kcm
    Jc = w64[o:o + nblk * kcm].reshape((nblk, kcm))
    o += nblk * kcm
    U = w64[o:o + nblk * d * Kmax].reshape((nblk, d, Kmax))
    o += nblk * d * Kmax
    Z = w64[o:o + nblk * d * Kmax].reshape((nblk, d, Kmax))
    o += nblk * d * Kmax
    U0 = w64[o:o + d * Kmax].reshape((d, Kmax))
    o += d * Kmax
    acc = w64[o:o + Kmax]
    o += Kmax
    s1 = w64[o:o + Kmax]
    o += Kmax
    PRED = w64[o:o + nblk]
    o += nblk
    smax = w64[o:o + nblk]
    o += nblk
    zmax = w64[o:o + nblk]
    o += nblk
    xmax = w64[o:o + nblk]  # (references: max |Σ_0b|, then max |Σ_0b0|)
    o += nblk
    rmax = w64[o:o + nblk]
    o += nblk
    z0max = w64[o:o + nblk]
    o += nblk
    o += nblk
    D = w64[o:o + d * d].reshape((d, d))
    o += d * d
    M = w64[o:o + d * d].reshape((d, d))
    o += d * d
    N = w64[o:o + d * d].reshape((d, d))
    o += d * d
    S = w64[o:o + d * d].reshape((d, d))
    o += d * d
    L = w64[o:o + d * d].reshape((d, d))
    o += d * d
    A1 = w64[o:o + d * d].reshape((d, d))
    o += d * d
    H0 = w64[o:o + d * d].reshape((d, d))
    o += d * d
    Qm = w64[o:o + d * d].reshape((d, d))
    o += d * d
    T = w64[o:o + d * d].reshape((d, d))
    o += d * d
    lamv = w64[o:o + d]
    lampv = w64[o + d:o + 2 * d]
    e = w64[o + 2 * d:o + 3 * d]
    u = w64[o + 3 * d:o + 4 * d]
    av = w64[o + 4 * d:o + 5 * d]
    p = w64[o + 5 * d:o + 6 * d]
    sp = w64[o + 6 * d:o + 7 * d]
    kap = w64[o + 7 * d:o + 8 * d]
    vv = w64[o + 8 * d:o + 9 * d]
    zz = w64[o + 9 * d:o + 10 * d]
    for b in range(nblk):
        for i in range(Kmax):
            J[b, i] = 0.0
            Jp[b, i] = 0.0
        for i in range(kcm):
            Jc[b, i] = 0.0
    for j in range(n):
        t = t0 + 1 + j * t_step
        wj = w[j] if has_w else 1.0
        upd = learn and wj > 0.0
        anynew = False
        # 1. the blocks, brought forward (into scratch; an unmoved block's covariances are read in place)
        for b in range(nblk):
            PRED[b] = 0.0
            if record and newat[b, j]:
                anynew = True
                if not learn:
                    continue
            r = rows[b, j]
            K = Ks[b]
            mean = _mat(ptrs, b, _MEAN, K, pcen)
            delta = 0
            if dynamic:
                delta = t - _times(ptrs, b, rows)[r]
                if delta < 0:
                    delta = 0
            if delta > 0:
                PRED[b] = 1.0
                _ou_predict_block(ptrs, b, r, K, pcen, delta, log_alpha, g_den, omegas, PM, PRM, PC, PX)
            else:
                for i in range(K):
                    PM[b, i] = mean[r, i]
                if dynamic:
                    rm = _mat(ptrs, b, _REF_MEAN, K, pcen)
                    for i in range(K):
                        PRM[b, i] = rm[r, i]
        # 1b. the one-step-ahead prediction, when the update's own (the same blocks) is not made
        if record and (anynew or not upd):
            for b in range(nblk):
                src = pcen[b] if newat[b, j] else PM[b]
                for i in range(Ks[b]):
                    PMp[b, i] = src[i]
            _outputs(PMp, Jp, lampv, vals[j], voff, nslot, nblk, Ks, Kcs, nfeat, pfeat, sig, fm_lin, cp_off, cp_order,
                     cp_ctx, has_bias, s1, Pc, Jc, d)
            for c in range(d):
                for c2 in range(d):
                    D[c, c2] = 0.0
            for b in range(nblk):
                K = Ks[b]
                if newat[b, j]:
                    _gain_pass(pcov[b], Jp[b], U[b], D, K, Kcs[b], d, sym[b] != 0)
                elif PRED[b] != 0.0:
                    _gain_pass(PC[b], Jp[b], U[b], D, K, Kcs[b], d, True)
                else:
                    _gain_pass(_cube(ptrs, b, _COV, K, pcen)[rows[b, j]], Jp[b], U[b], D, K, Kcs[b], d, sym[b] != 0)
            _record_multi(rec[j], lampv, D, d, vv, zz, p)
        if not learn:
            continue
        if not upd:  # skipped: the clock and the predict only
            if dynamic:
                _write_predicts(ptrs, rows, j, nblk, Ks, pcen, PRED, PM, PC, PX, t)
            continue
        # 2. the logits and their gradients; U_b = Σ_b G_b and D = Σ_b G_bᵀ U_b
        _outputs(PM, J, lamv, vals[j], voff, nslot, nblk, Ks, Kcs, nfeat, pfeat, sig, fm_lin, cp_off, cp_order, cp_ctx,
                 has_bias, s1, Pc, Jc, d)
        for c in range(d):
            if not np.isfinite(lamv[c]):
                return j, FAILED
            for c2 in range(d):
                D[c, c2] = 0.0
        for b in range(nblk):
            K = Ks[b]
            if PRED[b] != 0.0:
                smax[b] = _gain_pass(PC[b], J[b], U[b], D, K, Kcs[b], d, True)
            else:
                smax[b] = _gain_pass(_cube(ptrs, b, _COV, K, pcen)[rows[b, j]], J[b], U[b], D, K, Kcs[b], d,
                                     sym[b] != 0)
        if record:
            _record_multi(rec[j], lamv, D, d, vv, zz, p)
        # 3. whitening: H_b = M G_bᵀ, e (times √w)
        sw = math.sqrt(wj) if wj != 1.0 else 1.0
        if not _whiten_categorical(lik, lamv, D, Y[j], sw, tiny, d, M, e, p, sp, kap, vv, A1, H0, Qm, T):
            return j, FAILED
        # 4. S = I + M D Mᵀ = L Lᵀ (symmetrised), a = Mᵀ S⁻¹ e, N = L⁻¹ M
        for r in range(d):
            for c in range(d):
                s = 0.0
                for k in range(d):
                    s += M[r, k] * D[k, c]
                A1[r, c] = s
        for r in range(d):
            for c in range(d):
                s = 0.0
                for k in range(d):
                    s += A1[r, k] * M[c, k]
                S[r, c] = s + (1.0 if r == c else 0.0)
        for r in range(d):
            for c in range(r + 1, d):
                x = 0.5 * (S[r, c] + S[c, r])
                S[r, c] = x
                S[c, r] = x
        if not _cholesky(S, L, d):
            return j, FAILED
        for r in range(d):  # forward: L z = e
            s = e[r]
            for k in range(r):
                s -= L[r, k] * zz[k]
            zz[r] = s / L[r, r]
        for r in range(d - 1, -1, -1):  # back: Lᵀ u = z
            s = zz[r]
            for k in range(r + 1, d):
                s -= L[k, r] * u[k]
            u[r] = s / L[r, r]
        for c in range(d):
            s = 0.0
            for r in range(d):
                s += M[r, c] * u[r]
            av[c] = s
        for c in range(d):  # N = L⁻¹ M, column by column
            for r in range(d):
                s = M[r, c]
                for k in range(r):
                    s -= L[r, k] * N[k, c]
                N[r, c] = s / L[r, r]
        # 5. the new means (scratch), Z_b and the bounds; nothing written yet
        fits = True
        for b in range(nblk):
            K = Ks[b]
            r = rows[b, j]
            for i in range(K):
                acc[i] = PM[b, i]
            for c in range(d):
                ac = av[c]
                uc = U[b, c]
                for i in range(K):
                    acc[i] += ac * uc[i]
            for i in range(K):
                s = acc[i]
                if not abs(s) <= vmax:
                    return j, FAILED
                PM[b, i] = s
            zm = 0.0  # Σ Z², a bound of |Σ_q Z_qi Z_qk| (Cauchy–Schwarz)
            for q in range(d):
                zq = Z[b, q]
                for i in range(K):
                    zq[i] = 0.0
                for c in range(d):
                    nc = N[q, c]
                    uc = U[b, c]
                    for i in range(K):
                        zq[i] += nc * uc[i]
                for i in range(K):
                    zm += zq[i] * zq[i]
            zmax[b] = zm
            if not math.sqrt(smax[b]) + zm <= lim:  # (NaN: not fitting, then the check below finds it)
                fits = False
            if dynamic:
                srx = PX[b] if PRED[b] != 0.0 else _cube(ptrs, b, _CROSS, K, pcen)[r]
                rc = _cube(ptrs, b, _REF_COV, K, pcen)[r]
                xm = _gain_pass(srx, J[b], U0, Qm, K, Kcs[b], d, False)  # (Qm: a discarded Gᵀ U_0b)
                rm_ = 0.0
                for i in range(K):
                    for k in range(K):
                        rm_ += rc[i, k] * rc[i, k]
                for i in range(K):
                    s = PRM[b, i]
                    for c in range(d):
                        s += U0[c, i] * av[c]
                    PRM[b, i] = s
                    if not abs(s) <= vmax:
                        return j, FAILED
                # Z_0b into U's row of the block (U_b is no longer needed: Z_b and the means hold it)
                z0 = 0.0
                for q in range(d):
                    for i in range(K):
                        s = 0.0
                        for c in range(d):
                            s += N[q, c] * U0[c, i]
                        U[b, q, i] = s
                        z0 += s * s
                z0max[b] = z0
                xmax[b] = xm
                rmax[b] = rm_
                if not (math.sqrt(xm) + math.sqrt(z0 * zm) <= lim and math.sqrt(rm_) + z0 <= lim):
                    fits = False
        if not fits:  # a value might not fit the dtype: compute every new value once, unwritten
            for b in range(nblk):
                K = Ks[b]
                r = rows[b, j]
                src = PC[b] if PRED[b] != 0.0 else _cube(ptrs, b, _COV, K, pcen)[r]
                if not _lowrank_update(src, src, Z[b], Z[b], K, d, True, PRED[b] != 0.0 or sym[b] != 0, acc, False,
                                       vmax):
                    return j, FAILED
                if dynamic:
                    srx = PX[b] if PRED[b] != 0.0 else _cube(ptrs, b, _CROSS, K, pcen)[r]
                    rc = _cube(ptrs, b, _REF_COV, K, pcen)[r]
                    if not _lowrank_update(srx, srx, U[b], Z[b], K, d, False, False, acc, False, vmax):
                        return j, FAILED
                    if not _lowrank_update(rc, rc, U[b], U[b], K, d, True, sym[b] != 0, acc, False, vmax):
                        return j, FAILED
        # 6. written
        for b in range(nblk):
            r = rows[b, j]
            K = Ks[b]
            mean = _mat(ptrs, b, _MEAN, K, pcen)
            for i in range(K):
                mean[r, i] = PM[b, i]
            cov = _cube(ptrs, b, _COV, K, pcen)[r]
            pred = PRED[b] != 0.0
            if pred or zmax[b] != 0.0 or sym[b] == 0:
                _lowrank_update(PC[b] if pred else cov, cov, Z[b], Z[b], K, d, True, pred or sym[b] != 0, acc, True,
                                vmax)
            if dynamic:
                rm = _mat(ptrs, b, _REF_MEAN, K, pcen)
                for i in range(K):
                    rm[r, i] = PRM[b, i]
                cr = _cube(ptrs, b, _CROSS, K, pcen)[r]
                rc = _cube(ptrs, b, _REF_COV, K, pcen)[r]
                _lowrank_update(PX[b] if pred else cr, cr, U[b], Z[b], K, d, False, False, acc, True, vmax)
                _lowrank_update(rc, rc, U[b], U[b], K, d, True, sym[b] != 0, acc, True, vmax)
                _times(ptrs, b, rows)[r] = t
    return n, OK


# -- Python side ---------------------------------------------------------------------------------------

def scratch_sizes(nblk: int, Kmax: int):
    """Sizes of the scratch arrays ``(wdt, w64)`` of :func:`factorization_events`."""
    kk = nblk * Kmax
    return 3 * kk + 3 * kk * Kmax, 3 * kk + 5 * Kmax + nblk


def serves(filt) -> bool:
    """Whether :func:`run_events_compiled` handles ``filt`` (a
    :class:`~skfilter.factorization.model.FactorizationFilter`): the kernels on
    (:func:`skfilter.kernels.enabled`), CPU, float64 or float32, ``iterations == 1``, a linear signal,
    MF/CP (biases, context on or off) or an order-2 factorization machine (linear term on or off),
    one table per slot, and either one output with a Gaussian (fixed or online noise, not
    ``robust_threshold``), Bernoulli (EKF or assumed-density update) or Poisson likelihood, or ``d > 1``
    outputs (multiclass logits, :func:`factorization_events_multi`) with the categorical likelihood
    (EKF or assumed-density update)."""
    try:
        if not enabled() or filt.device.type != "cpu" or filt.dtype not in (torch.float64, torch.float32):
            return False
        if filt.iterations != 1:
            return False
        names = [s.name for s in filt.slots] + (["bias"] if filt.has_bias else [])
        if len(set(names)) != len(names) or not filt.slots:
            return False
        codes = filt.kernel_codes()
        if codes is None:
            return False
        d = filt.d
        if (d != 1) != (codes[-1] in (LIK_CATEGORICAL, LIK_CATEGORICAL_ADF)) or d < 1:
            return False
        for s, slot in enumerate(filt.slots):
            table = filt.tables[slot.name]
            if table.K != d * slot.n_features * filt.signal.params_per_feature(s) or table.dtype != filt.dtype:
                return False
            if table.references != (filt.alpha is not None):
                return False
        if filt.has_bias and filt.tables["bias"].K != d:
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
    (:func:`kernel_plan`); one-event calls (:meth:`predict_one`, :meth:`learn_one`) cost a few µs.
    A filter of ``d > 1`` outputs runs :func:`factorization_events_multi` (its header has ``d``; the
    events' target and record are ``d`` and ``3d`` columns wide, :func:`record_width`)."""

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
        self.d = d = filt.d
        self.multi = multi = d > 1
        self.kernel = factorization_events_multi if multi else factorization_events
        #: the columns of an event's target (``d``) and record (:func:`record_width`) in ``data``
        self.n_y, self.rec_width = d, record_width(filt)
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
        if multi:
            head = head + [d]
        self._sym_at = len(head) + len(Ks) + len(nfeat) + len(pfeat) + len(voff)
        self.icfg = np.concatenate([head, Ks, nfeat, pfeat, voff, np.zeros(nblk), np.zeros(7 * nblk)]).astype(np.int64)
        self._ptrs_at = len(self.icfg) - 7 * nblk
        self.icfg_predict = self.icfg.copy()
        self.icfg_predict[10:13] = (1, 0, 0)  # record, do not learn, every event at the next step
        Kmax = int(Ks.max())
        size_dt, size_64 = scratch_sizes_multi(nblk, Kmax, d) if multi else scratch_sizes(nblk, Kmax)
        fcfg = [float(getattr(lk, "eps_min", 0.0)), float(getattr(lk, "min_variance", 0.0)),
                -1.0 if bound is None else float(bound), float(getattr(lk, "max_log_rate", 30.0)),
                float(torch.finfo(filt.dtype).eps) ** 2, log_alpha, math.expm1(2.0 * log_alpha) if dynamic else 1.0]
        self._omegas_at = len(fcfg)
        tail = [float(torch.finfo(filt.dtype).max)] if multi else []  # (the multiclass kernel's bound)
        self.f64s = np.concatenate([fcfg, np.zeros(nblk), tail, np.zeros(size_64)]).astype(np.float64)
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
        ny = self.n_y
        self.data1 = np.zeros((1, nv + ny + 1 + self.rec_width), dtype=np.float64)
        self.data1[0, nv + ny] = 1.0
        self.values1 = self.data1[:, :nv]  # written by the caller of the one-event methods
        self.y1 = self.data1[0, nv:nv + ny]
        self.rec1 = self.data1[0, nv + ny + 1:]
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
        nblk, nv, ny = self.nblk, self.n_values, self.n_y
        rows2 = np.zeros((2 * nblk, n), dtype=np.int64)
        rows2[:nblk] = rows
        if newat is not None:
            rows2[nblk:] = newat
        data = np.empty((n, nv + ny + 1 + self.rec_width), dtype=np.float64)
        data[:, :nv] = vals
        data[:, nv:nv + ny] = Y.reshape(n, ny)
        data[:, nv + ny] = 1.0 if w is None else w
        icfg = icfg.copy()
        icfg[13], icfg[14] = int(w is not None), int(t0)
        with self.lock:
            self.sync()
            icfg[self._ptrs_at:] = self.icfg[self._ptrs_at:]  # the addresses as sync left them
            out = self.kernel(rows2, data, icfg, self.f64s, self.dts)
        if record is not None:
            record[:] = data[:, nv + ny + 1:]
        return out

    # -- one event ----------------------------------------------------------------------------------
    def predict_one(self, keys, vals=None):
        """``[λ, Var λ, r, a, b]`` (:func:`factorization_events`; ``d > 1``: ``[λ, v, p]``,
        :func:`factorization_events_multi`) of one event at the next step:
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
        self.kernel(self.rows1, self.data1, icfg, self.f64s, self.dts)
        return self.rec1

    def learn_one(self, keys, y, vals=None):
        """Learn one event (as ``filt.step``; its values in :attr:`values1` or ``vals``; ``y`` the
        target, for ``d > 1`` outputs the index of the event's class, or its one-hot row); on a
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
        if self.multi:
            y1 = self.y1
            if np.ndim(y):
                y1[:] = y
            else:
                y1[:] = 0.0
                y1[int(y)] = 1.0
        else:
            self.data1[0, self.n_values] = y
        icfg = self.icfg
        icfg[14] = t0
        done, status = self.kernel(self.rows1, self.data1, icfg, self.f64s, self.dts)
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


def record_width(filt) -> int:
    """The columns of the kernel's record of an event (:func:`predict_events_compiled`): 5,
    ``[λ, Var λ, r, a, b]``, for one output; ``3d``, ``[λ (d), v (d), p (d)]``, for ``d > 1``."""
    return 5 if filt.d == 1 else 3 * filt.d


def predict_events_compiled(filt, slot_ids, values) -> np.ndarray:
    """``[λ, Var λ, r, a, b]`` per event (:func:`factorization_events`, ``(n, 5)`` float64; for ``d > 1``
    outputs ``[λ, v, p]``, ``(n, 3d)``: :func:`factorization_events_multi`) of ``n`` events at the next step, as :meth:`~skfilter.factorization.model.FactorizationFilter.linearized`
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
    rec = np.zeros((n, plan.rec_width), dtype=np.float64)
    plan.call(rows, newat, _values_array(values, n), np.zeros((n, plan.n_y)), None, int(filt.time), plan.icfg_predict,
              rec)
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
    Y : tensor ``(n, d)`` (multiclass: one-hot rows)
    weights : ndarray ``(n,)`` or None
        ``w`` scales the event's precision; ``w <= 0`` skips the update (the clock advances).
    record : ndarray ``(n, record_width(filt))`` float64, optional
        Filled with each event's one-step-ahead prediction, made before it is learned (as
        :func:`predict_events_compiled` would give it then): ``[λ, Var λ, r, a, b]`` (``d > 1``:
        ``[λ, v, p]``).
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
    Yn = np.ascontiguousarray(np.asarray(Y.detach().cpu().numpy(), dtype=np.float64).reshape(n, plan.n_y))
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
