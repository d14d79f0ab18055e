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

Every new block is computed into scratch and checked (finite, ``s > 0``) before it is written, so a
failing event leaves the tables as the previous event left them. New entities are created up front
in Python, in order of first appearance (the same random prior means as ``step`` draws), each with
``last_time`` its first event's time (a new entity's state is stationary under the predict, and
``Δ = 0`` at its first event as in ``step``).

Both engines agree to rounding (tests/test_factorization_kernels.py: ~1e-13 relative in float64,
~1e-5 in float32, where the kernel accumulates in float64 and rounds each stored value to the table's
dtype); the kernel lets LLVM reassociate its sums and fuse multiply-adds (``fastmath`` limited to
``reassoc`` and ``contract``, so that non-finite values are still detected). One compiled variant per
dtype serves up to 8 blocks (the per-block arrays are padded), compiled on first use and cached on
disk (``python -m skfilter.kernels`` compiles it ahead).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit

from . import enabled

__all__ = ["serves", "run_events_compiled"]

SIG_LINEAR, SIG_FM2, SIG_CP = 0, 1, 2
LIK_GAUSSIAN, LIK_ADAPTIVE, LIK_BERNOULLI, LIK_POISSON = 0, 1, 2, 3
OK, FAILED = 0, 1


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def factorization_events(rows, vals, voff, Y, w, has_w, t0, means, covs, lasts, ref_means, crosses, ref_covs,
                         nblk, nslot, Ks, nfeat, pfeat, sig, fm_lin, cp_off, cp_order, cp_ctx, has_bias, lik, noise,
                         eps_min, min_var, bound, max_log_rate, tiny, dynamic, log_alpha, g_den, omegas, sym):
    """Learn the events ``j = 0..n−1`` (time ``t0 + j + 1``) into the tables, in order.

    ``rows (nblk, n)``: each block's table row per event (slots, then the bias); ``vals (n, Σ n_s)``
    the slots' feature values (slot ``s`` at columns ``voff[s]:voff[s+1]``); ``Y (n,)``, ``w (n,)``;
    ``means``/``covs``/``lasts`` (and ``ref_means``/``crosses``/``ref_covs`` when ``dynamic``):
    per block its table's arrays (tuples, padded). ``noise``: ``[r, Σw, r^{−1/2}]`` of the Gaussian,
    updated after each learned event. ``sym[b]``: block ``b``'s table holds exactly symmetric
    covariances (its prior's is: every update and predict symmetrises), so the symmetrisation is the
    identity and is skipped. Returns ``(events learned, OK or FAILED)``: on FAILED the
    event at that index was not written."""
    n = Y.shape[0]
    dt = means[0].dtype
    Kmax = 1
    for b in range(nblk):
        if Ks[b] > Kmax:
            Kmax = Ks[b]
    PM = np.empty((nblk, Kmax), dtype=dt)
    PC = np.empty((nblk, Kmax, Kmax), dtype=dt)
    nr = nblk if dynamic else 1
    PRM = np.empty((nr, Kmax), dtype=dt)
    PX = np.empty((nr, Kmax, Kmax), dtype=dt)
    PRC = np.empty((nr, Kmax, Kmax), dtype=dt)
    PRED = np.zeros(nblk, dtype=np.bool_)  # brought forward (Δ > 0): the covariances are in PC, PX
    J = np.zeros((nblk, Kmax))
    Q = np.empty(Kmax)
    Q0 = np.empty(Kmax)
    Z = np.empty(Kmax)
    Z0 = np.empty(Kmax)
    QQ = np.empty((nblk, Kmax))
    s1 = np.empty(Kmax)
    for j in range(n):
        t = t0 + j + 1
        wj = w[j] if has_w else 1.0
        # 1. the blocks, brought forward (into scratch; an unmoved block's covariances are read in place)
        for b in range(nblk):
            r = rows[b, j]
            K = Ks[b]
            mean = means[b]
            cov = covs[b]
            delta = 0
            if dynamic:
                delta = t - lasts[b][r]
                if delta < 0:
                    delta = 0
            PRED[b] = delta > 0
            if delta > 0:
                a = math.exp(delta * log_alpha)
                g = math.expm1(2.0 * delta * log_alpha) / g_den
                rm = ref_means[b]
                cr = crosses[b]
                rc = ref_covs[b]
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
                    rm = ref_means[b]
                    for i in range(K):
                        PRM[b, i] = rm[r, i]
        if wj <= 0.0:  # skipped: the clock and the predict only
            if dynamic:
                for b in range(nblk):
                    r = rows[b, j]
                    K = Ks[b]
                    if PRED[b]:
                        for i in range(K):
                            means[b][r, i] = PM[b, i]
                            for k in range(K):
                                covs[b][r, i, k] = PC[b, i, k]
                                crosses[b][r, i, k] = PX[b, i, k]
                    lasts[b][r] = t
            continue
        # 2. the signal and its gradient per block
        lam = 0.0
        if sig == SIG_LINEAR:
            for s in range(nslot):
                term = 0.0
                for f in range(nfeat[s]):
                    x = vals[j, voff[s] + f]
                    term += x * PM[s, f]
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
                    x = vals[j, voff[s] + f]
                    if fm_lin:
                        lin += x * PM[s, f * p]
                    for k in range(na):
                        y = x * PM[s, f * p + fm_lin + k]
                        s1[k] += y
            term = 0.0
            for k in range(na):
                q2 = 0.0
                for s in range(nslot):
                    for f in range(nfeat[s]):
                        y = vals[j, voff[s] + f] * PM[s, f * p + fm_lin + k]
                        q2 += y * y
                term += s1[k] * s1[k] - q2
            lam = lin + 0.5 * term
            for s in range(nslot):
                for f in range(nfeat[s]):
                    x = vals[j, voff[s] + f]
                    if fm_lin:
                        J[s, f * p] = x
                    for k in range(na):
                        J[s, f * p + fm_lin + k] = x * (s1[k] - x * PM[s, f * p + fm_lin + k])
        else:  # CP / MF: modes 0..q−1 ([b,] ξ), then the context slot
            q = cp_order
            na = Ks[0] - cp_off
            for l in range(na):
                prod = PM[0, cp_off + l]
                for i in range(1, q):
                    prod *= PM[i, cp_off + l]
                lam += prod
            if cp_off:
                for i in range(q):
                    lam += PM[i, 0]
                    J[i, 0] = 1.0
            for i in range(q):
                for l in range(na):
                    if q == 2:
                        o = PM[1 - i, cp_off + l]
                    else:
                        has_p = i > 0
                        pre = 1.0
                        if has_p:
                            pre = PM[0, cp_off + l]
                            for m in range(1, i):
                                pre *= PM[m, cp_off + l]
                        has_s = i < q - 1
                        suf = 1.0
                        if has_s:
                            suf = PM[q - 1, cp_off + l]
                            for m in range(q - 2, i, -1):
                                suf *= PM[m, cp_off + l]
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
                    x = vals[j, voff[q] + f]
                    term += x * PM[q, f]
                    J[q, f] = x
                lam += term
        if has_bias:
            lam += PM[nslot, 0]
            J[nslot, 0] = 1.0
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
            src = PC[b] if PRED[b] else covs[b][rows[b, j]]
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
            src = PC[b] if PRED[b] else covs[b][r]
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
                srx = PX[b] if PRED[b] else crosses[b][r]
                rc = ref_covs[b]
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
            mean = means[b]
            cov = covs[b]
            for i in range(K):
                mean[r, i] = PM[b, i]
                for k in range(K):
                    cov[r, i, k] = PC[b, i, k]
            if dynamic:
                rm = ref_means[b]
                cr = crosses[b]
                rc = ref_covs[b]
                for i in range(K):
                    rm[r, i] = PRM[b, i]
                    for k in range(K):
                        cr[r, i, k] = PX[b, i, k]
                        rc[r, i, k] = PRC[b, i, k]
                lasts[b][r] = t
        noise[0] = r_new
        noise[1] = tot_new
        noise[2] = sc_new
    return n, OK


# -- Python side ---------------------------------------------------------------------------------------

def _codes(filt):
    """``(signal code, fm linear, cp offset, cp order, cp context, likelihood code)`` or None."""
    from ..factorization.signals import CPFactorization, FactorizationMachine, LinearSignal, MatrixFactorization
    from ..likelihoods import Bernoulli, Gaussian, Poisson

    sig = filt.signal
    n_slots = len(filt.slots)
    if type(sig) is LinearSignal:
        s = (SIG_LINEAR, 0, 0, 0, 0)
    elif type(sig) is FactorizationMachine:
        if sig.order != 2:
            return None
        s = (SIG_FM2, int(sig.linear), 0, 0, 0)
    elif type(sig) in (MatrixFactorization, CPFactorization):
        if n_slots != sig.n_slots or any(sl.context for sl in filt.slots[:sig.order]):
            return None
        if sig.context and not filt.slots[-1].context:
            return None
        s = (SIG_CP, 0, int(sig.biases), sig.order, int(sig.context))
    else:
        return None
    lik = filt.likelihood
    if type(lik) is Gaussian:
        if lik.robust_threshold is not None:
            return None
        code = LIK_ADAPTIVE if lik.adaptive else LIK_GAUSSIAN
        if filt.noise is None or tuple(filt.noise["r"].shape) != (1,):
            return None
    elif type(lik) is Bernoulli:
        code = LIK_BERNOULLI
    elif type(lik) is Poisson:
        code = LIK_POISSON
    else:
        return None
    return s + (code,)


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
        codes = _codes(filt)
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
    """Rows of ``keys`` (length ``n``) in ``table``, creating the new ones in order of first
    appearance with ``last_time`` their first event's time; returns ``(rows, new keys, their first
    event indices)``."""
    if keys is None:
        keys = [0] * n
    get = table.ids.get
    rows = np.fromiter((get(k, -1) for k in keys), dtype=np.int64, count=n)
    miss = np.flatnonzero(rows < 0)
    new, first = [], []
    if miss.size:
        seen = {}
        for j in miss.tolist():
            k = keys[j]
            if k not in seen:
                seen[k] = len(new)
                new.append(k)
                first.append(j)
        table.rows(new, t0 + 1 + first[0])
        created = np.fromiter((table.ids[k] for k in new), dtype=np.int64, count=len(new))
        table.last_time[torch.as_tensor(created)] = torch.as_tensor(t0 + 1 + np.asarray(first, dtype=np.int64))
        rows[miss] = np.fromiter((table.ids[keys[j]] for j in miss.tolist()), dtype=np.int64, count=miss.size)
    return rows, new, np.asarray(first, dtype=np.int64)


def _contiguous(table):
    for name in table._fields():
        value = getattr(table, name)
        if not value.is_contiguous():
            setattr(table, name, value.contiguous())


def run_events_compiled(filt, slot_ids, values, Y, weights) -> int:
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
    from ..exceptions import FilterStepError

    if not serves(filt):
        raise ValueError("run_events_compiled does not serve this filter (see serves); use FactorizationFilter.step.")
    codes = _codes(filt)
    sig, fm_lin, cp_off, cp_order, cp_ctx, lik = codes
    n = int(Y.shape[0])
    if n == 0:
        return 0
    t0 = int(filt.time)
    dynamic = filt.alpha is not None
    names = [s.name for s in filt.slots] + (["bias"] if filt.has_bias else [])
    nslot = len(filt.slots)
    nblk = len(names)
    tables = [filt.tables[k] for k in names]
    rng_states = [t.generator_state for t in tables]
    sizes = [(t.n_entities, len(t.ids)) for t in tables]
    rows = np.empty((nblk, n), dtype=np.int64)
    created = []
    for b, (slot, table) in enumerate(zip(filt.slots + [None] * (nblk - nslot), tables)):
        keys = None if slot is None or slot.context else slot_ids[b]
        if keys is not None and len(keys) != n:
            raise ValueError(f"slot {slot.name!r} has {len(keys)} ids for {n} events.")
        rows[b], new, first = _table_rows(table, keys, n, t0)
        created.append((new, first))
    for t in tables:
        _contiguous(t)
    vals = [np.asarray(v.detach().cpu().numpy(), dtype=np.float64).reshape(n, -1) for v in values]
    voff = np.zeros(nslot + 1, dtype=np.int64)
    for s, v in enumerate(vals):
        voff[s + 1] = voff[s] + v.shape[1]
    vals = np.ascontiguousarray(np.concatenate(vals, axis=1)) if vals else np.zeros((n, 0))
    Yn = np.ascontiguousarray(np.asarray(Y.detach().cpu().numpy(), dtype=np.float64).reshape(n))
    has_w = weights is not None
    w = np.ascontiguousarray(np.asarray(weights, dtype=np.float64).reshape(n)) if has_w else np.ones(1)
    np_dtype = np.float64 if filt.dtype == torch.float64 else np.float32
    Ks = np.array([t.K for t in tables], dtype=np.int64)
    nfeat = np.array([s.n_features for s in filt.slots], dtype=np.int64)
    pfeat = np.array([filt.signal.params_per_feature(s) for s in range(nslot)], dtype=np.int64)
    # per-block arrays, padded to a multiple of 8 blocks (one compiled variant per dtype up to 8 blocks)
    width = 8 * ((nblk + 7) // 8)
    dummy2 = np.zeros((1, 1), dtype=np_dtype)
    dummy3 = np.zeros((1, 1, 1), dtype=np_dtype)
    dummy1 = np.zeros(1, dtype=np.int64)
    pad = width - nblk

    def arrays(name, dummy):
        out = [getattr(t, name).numpy() for t in tables] if (dynamic or name in ("mean", "cov", "last_time")) \
            else [dummy] * nblk
        return tuple(out + [dummy] * pad)

    means, covs, lasts = arrays("mean", dummy2), arrays("cov", dummy3), arrays("last_time", dummy1)
    ref_means, crosses, ref_covs = arrays("ref_mean", dummy2), arrays("cross", dummy3), arrays("ref_cov", dummy3)
    omegas = np.array([float(filt.omega[k][0]) if dynamic else 0.0 for k in names], dtype=np.float64)
    log_alpha = math.log(filt.alpha) if dynamic else 0.0
    g_den = math.expm1(2.0 * log_alpha) if dynamic else 1.0
    lk = filt.likelihood
    noise = np.zeros(3, dtype=np_dtype)
    if lik in (LIK_GAUSSIAN, LIK_ADAPTIVE):
        noise[0] = float(filt.noise["r"][0])
        noise[1] = float(filt.noise["weight"])
        noise[2] = float(filt.noise["scale"].reshape(-1)[0])
    eps_min = float(getattr(lk, "eps_min", 0.0))
    min_var = float(getattr(lk, "min_variance", 0.0))
    bound = getattr(lk, "residual_bound", None)
    bound = -1.0 if bound is None else float(bound)
    max_log_rate = float(getattr(lk, "max_log_rate", 30.0))
    tiny = float(torch.finfo(filt.dtype).eps) ** 2
    # a table whose prior covariance is exactly symmetric holds only exactly symmetric covariances
    sym = np.array([bool(torch.equal(t._prior_cov, t._prior_cov.T)) for t in tables], dtype=np.bool_)
    done, status = factorization_events(
        rows, vals, voff, Yn, w, has_w, t0, means, covs, lasts, ref_means, crosses, ref_covs, nblk, nslot, Ks, nfeat,
        pfeat, sig, fm_lin, cp_off, cp_order, cp_ctx, bool(filt.has_bias), lik, noise, eps_min, min_var, bound,
        max_log_rate, tiny, dynamic, log_alpha, g_den, omegas, sym)
    done = int(done)
    filt.time = t0 + done
    if lik == LIK_ADAPTIVE and done > 0:
        opts = {"dtype": filt.dtype, "device": filt.device}
        filt.noise = {"r": torch.tensor([noise[0]], **opts), "weight": torch.tensor(noise[1], **opts),
                      "scale": torch.tensor([[noise[2]]], **opts)}
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
    err = FilterStepError(f"The DEKF step of event {done} of the chunk produced a non-finite value or an innovation "
                          "that is not positive; the events before it are learned and kept. Try a smaller "
                          "prior_variance, a larger obs_variance, or iterations > 1.")
    err.rows_done = done
    raise err
