"""The linearised predictive of a single belief at many inputs, compiled (numba).

For each row ``x``: the outputs ``f = h(μ, x)`` and the diagonal of ``J Σ Jᵀ`` (``J = ∂h/∂θ`` at
``μ``; spec/lofi.md §2.8 B.1; or of ``Π J Σ Jᵀ Π`` for the classifiers' logits less their mean),
what ``predict(return_std=True)`` and ``predict_proba`` need — without
forming ``J`` for all rows at once (one ``C × P`` block at a time):

* LoFi (``Σ = (Υ + W Wᵀ)⁻¹``, Woodbury, B.1 eq. 61): ``[J Υ⁻¹ Jᵀ]_cc − ‖Lc⁻¹ W Υ⁻¹ J_cᵀ‖²`` with
  ``Lc Lcᵀ = M = I + Wᵀ Υ⁻¹ W`` (one factorisation per call);
* diagonal: ``Σ_j J_cj² v_j``;
* full: ``J_c Σ J_cᵀ``;
* the factored covariance (LRKF, HiLoFi, LoLoFi: ``Σ = blockdiag(B_bᵀ B_b + q_b I)``, the pending
  process noise ``q_b`` included as :meth:`~skfilter.posteriors.FactoredCovariance.quadratic_form`
  has it): ``Σ_b ‖B_b J_{b,c}ᵀ‖² + q_b ‖J_{b,c}‖²`` (:func:`predict_factored_rows`).

A stiff ``M`` (trace beyond :func:`~skfilter.posteriors._base.stiffness_limit`, where the Woodbury
difference cancels) is reported and the caller takes the torch path's square-root form.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .linalg import FAST, cholesky_into, gram_into, solve_lower
from .mlp import map_row, mlp_buffers, mlp_forward, mlp_forward_jacobian

#: structure codes of :func:`predict_rows`
LOFI, DIAGONAL, FULL = 0, 1, 2


@njit(cache=True, nogil=True, fastmath=FAST)
def _weighted_square(row, weights):
    s = 0.0
    for j in range(row.shape[0]):
        s += row[j] * row[j] * weights[j]
    return s


@njit(cache=True, nogil=True)
def _row_jacobian(x, in_scale, in_shift, in_bound, x_row, mean, shapes, offsets, codes, acts, pre, delta, scratch, f,
                  J, centred):
    """One raw row's outputs ``f`` and Jacobian ``J (C, P)`` at ``mean`` (mapped as the first layer
    sees it); ``centred``: ``J``'s rows less their mean (``Π J``, ``Π = I − 11ᵀ/C``)."""
    map_row(x, in_scale, in_shift, in_bound, x_row)
    mlp_forward_jacobian(mean, x_row, shapes, offsets, codes, acts, pre, delta, scratch, f, J)
    C, P = J.shape
    if centred and C > 1:
        for j in range(P):
            s = 0.0
            for c in range(C):
                s += J[c, j]
            s /= C
            for c in range(C):
                J[c, j] -= s


@njit(cache=True, nogil=True)
def predict_rows(X, shapes, offsets, codes, in_scale, in_shift, in_bound, mean, kind, first, second, f_out, var_out,
                 limit, centred):
    """Write ``f (n, C)`` and ``diag(J Σ Jᵀ) (n, C)`` of the raw rows ``X (n, D)`` (each mapped as the
    first layer sees it, :func:`~skfilter.kernels.mlp.map_row`) at the belief ``mean`` with ``kind``
    :data:`LOFI` (``first`` = ``Υ (P,)``, ``second`` = ``Wᵀ (L, P)``), :data:`DIAGONAL` (``first`` =
    ``v (P,)``) or :data:`FULL` (``second`` = ``Σ``); ``centred``: ``diag(Π J Σ Jᵀ Π)`` with
    ``Π = I − 11ᵀ/C`` (``J``'s rows less their mean).
    Returns False (nothing usable) when LoFi's ``M`` is stiff or not positive definite."""
    n, D = X.shape
    dt = mean.dtype
    C = f_out.shape[1]
    P = mean.shape[0]
    acts, pre, delta, scratch = mlp_buffers(shapes, D, mean)
    x_row = np.empty(D, dtype=dt)
    J = np.empty((C, P), dtype=dt)
    weights = np.empty(P, dtype=dt)
    L = second.shape[0] if kind == LOFI else 0
    scaled = np.empty((L, P), dtype=dt)
    Lc = np.empty((max(L, 1), max(L, 1)), dtype=dt)
    A = np.empty((C, max(L, 1)), dtype=dt)
    if kind == LOFI:
        for j in range(P):
            weights[j] = 1.0 / first[j]
        if L > 0:
            for a in range(L):
                for j in range(P):
                    scaled[a, j] = second[a, j] * weights[j]
            M = np.empty((L, L), dtype=dt)
            gram_into(second, scaled, M)
            trace = 0.0
            for a in range(L):
                trace += M[a, a]
                M[a, a] += 1.0
            if not trace <= limit or not cholesky_into(M, Lc):
                return False
    elif kind == DIAGONAL:
        for j in range(P):
            weights[j] = first[j]
    for i in range(n):
        _row_jacobian(X[i], in_scale, in_shift, in_bound, x_row, mean, shapes, offsets, codes, acts, pre, delta,
                      scratch, f_out[i], J, centred)
        if kind == FULL:
            U = np.dot(second, J.T)  # Σ Jᵀ, (P, C)
            for c in range(C):
                s = 0.0
                for j in range(P):
                    s += J[c, j] * U[j, c]
                var_out[i, c] = s
            continue
        for c in range(C):
            var_out[i, c] = _weighted_square(J[c], weights)
        if L > 0:
            gram_into(J, scaled, A)  # J Υ⁻¹ W, (C, L)
            for c in range(C):
                solve_lower(Lc, A[c, :L])
                s = 0.0
                for a in range(L):
                    s += A[c, a] * A[c, a]
                var_out[i, c] -= s
    return True


@njit(cache=True, nogil=True)
def predict_hypotheses(X, shapes, offsets, codes, in_scale, in_shift, in_bound, means, kind, firsts, seconds, f_out,
                       var_out, limit, centred):
    """:func:`predict_rows` for each belief of a stack (a run-length mixture's ``K`` hypotheses):
    ``means (K, P)``, ``firsts``/``seconds`` the stacked arrays of each kind (``(K, ·)``; for
    :data:`DIAGONAL` ``seconds`` is unused, ``(K, 0, 0)``), into ``f_out[k]`` and ``var_out[k]``
    ``(K, n, C)``. Returns False when any hypothesis' LoFi ``M`` is stiff (nothing usable)."""
    for k in range(means.shape[0]):
        if not predict_rows(X, shapes, offsets, codes, in_scale, in_shift, in_bound, means[k], kind, firsts[k],
                            seconds[k], f_out[k], var_out[k], limit, centred):
            return False
    return True


@njit(cache=True, nogil=True)
def probit_rows(X, shapes, offsets, codes, in_scale, in_shift, in_bound, mean, kind, first, second, f_out, var_out,
                limit, proba_out):
    """The probit approximation of the linearised predictive's class probabilities ``proba (n, K)``
    of the raw rows ``X`` (:func:`~skfilter.likelihoods.probit_probabilities_array`'s formulas): the
    logits ``f`` and variances of :func:`predict_rows` — with ``C ≥ 2`` logits the shift-free
    variances ``C/(C − 1) · max(diag(Π J Σ Jᵀ Π), 0)`` (:func:`~skfilter.likelihoods.shift_free_logit_variance`)
    — scaled ``z = f / √(1 + π v / 8)``, then ``(1 − σ(z), σ(z))`` for one logit or the softmax
    (shifted by the row's largest ``z``). Returns False as :func:`predict_rows` does."""
    C = f_out.shape[1]
    if not predict_rows(X, shapes, offsets, codes, in_scale, in_shift, in_bound, mean, kind, first, second, f_out,
                        var_out, limit, C > 1):
        return False
    _probit(f_out, var_out, proba_out)
    return True


@njit(cache=True, nogil=True)
def _probit(f_out, var_out, proba_out):
    """:func:`probit_rows`' probabilities from the logits and their (shift-free for ``C ≥ 2``) variances."""
    C = f_out.shape[1]
    c8 = math.pi / 8.0
    for i in range(f_out.shape[0]):
        if C == 1:
            z = f_out[i, 0] / math.sqrt(1.0 + c8 * var_out[i, 0])
            p1 = 1.0 / (1.0 + math.exp(-z)) if z >= 0.0 else math.exp(z) / (1.0 + math.exp(z))
            proba_out[i, 0] = 1.0 - p1
            proba_out[i, 1] = p1
            continue
        factor = C / (C - 1.0)
        top = -np.inf
        for c in range(C):
            v = var_out[i, c]
            z = f_out[i, c] / math.sqrt(1.0 + c8 * (max(v, 0.0) * factor))
            proba_out[i, c] = z
            if z > top:
                top = z
        total = 0.0
        for c in range(C):
            e = math.exp(proba_out[i, c] - top)
            proba_out[i, c] = e
            total += e
        for c in range(C):
            proba_out[i, c] /= total


@njit(cache=True, nogil=True)
def predict_factored_rows(X, shapes, offsets, codes, in_scale, in_shift, in_bound, mean, positions, starts, factors,
                          fstarts, ranks, pend, f_out, var_out, centred):
    """:func:`predict_rows` for the factored covariance: block ``b``'s parameters at
    ``positions[starts[b]:starts[b + 1]]`` (``D_b`` of them), its factor ``B_b (r_b, D_b)`` flat in
    ``factors`` from ``fstarts[b]``, its pending process noise ``pend[b]``; writes ``f`` and
    ``diag(J Σ Jᵀ) = Σ_b ‖B_b J_{b,c}ᵀ‖² + q_b ‖J_{b,c}‖²`` (``centred``: of ``Π J``)."""
    n, D = X.shape
    dt = mean.dtype
    C = f_out.shape[1]
    P = mean.shape[0]
    acts, pre, delta, scratch = mlp_buffers(shapes, D, mean)
    x_row = np.empty(D, dtype=dt)
    J = np.empty((C, P), dtype=dt)
    Dmax = 0
    for b in range(ranks.shape[0]):
        Dmax = max(Dmax, starts[b + 1] - starts[b])
    gathered = np.empty(Dmax, dtype=dt)
    for i in range(n):
        _row_jacobian(X[i], in_scale, in_shift, in_bound, x_row, mean, shapes, offsets, codes, acts, pre, delta,
                      scratch, f_out[i], J, centred)
        for c in range(C):
            total = 0.0
            for b in range(ranks.shape[0]):
                s0, e0 = starts[b], starts[b + 1]
                Db = e0 - s0
                r = ranks[b]
                sq = 0.0
                for j in range(Db):
                    v = J[c, positions[s0 + j]]
                    gathered[j] = v
                    sq += v * v
                total += pend[b] * sq
                base = fstarts[b]
                for a in range(r):
                    row = base + a * Db
                    t = 0.0
                    for j in range(Db):
                        t += factors[row + j] * gathered[j]
                    total += t * t
            var_out[i, c] = total


@njit(cache=True, nogil=True)
def probit_factored_rows(X, shapes, offsets, codes, in_scale, in_shift, in_bound, mean, positions, starts, factors,
                         fstarts, ranks, pend, f_out, var_out, proba_out):
    """:func:`probit_rows` for the factored covariance (:func:`predict_factored_rows`)."""
    predict_factored_rows(X, shapes, offsets, codes, in_scale, in_shift, in_bound, mean, positions, starts, factors,
                          fstarts, ranks, pend, f_out, var_out, f_out.shape[1] > 1)
    _probit(f_out, var_out, proba_out)


@njit(cache=True, nogil=True)
def forward_rows(X, shapes, offsets, codes, in_scale, in_shift, in_bound, mean, f_out):
    """The outputs ``f (n, C)`` of the raw rows ``X`` at ``mean``: the forward pass of
    :func:`predict_rows` alone (the same arithmetic, so a plug-in prediction equals the mean of the
    linearised one bit for bit)."""
    n, D = X.shape
    acts, pre, _, _ = mlp_buffers(shapes, D, mean)
    x_row = np.empty(D, dtype=mean.dtype)
    for i in range(n):
        map_row(X[i], in_scale, in_shift, in_bound, x_row)
        mlp_forward(mean, x_row, shapes, offsets, codes, acts, pre, f_out[i])
