"""Small dense linear algebra for the compiled step (numba): Cholesky with a failure flag and
triangular solves on ``k × k`` systems (``k = L + m``, a few tens), written as loops so that a
matrix that is not positive definite reports instead of raising inside compiled code."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def cholesky_into(A, Lc):
    """Lower Cholesky factor of the leading ``k × k`` block of symmetric ``A`` into ``Lc``; returns
    False if ``A`` is not (numerically) positive definite or not finite."""
    k = Lc.shape[0]
    for j in range(k):
        s = A[j, j]
        for p in range(j):
            s -= Lc[j, p] * Lc[j, p]
        if not s > 0.0:  # NaN too
            return False
        d = np.sqrt(s)
        Lc[j, j] = d
        for i in range(j + 1, k):
            t = A[i, j]
            for p in range(j):
                t -= Lc[i, p] * Lc[j, p]
            Lc[i, j] = t / d
        for i in range(j):
            Lc[i, j] = 0.0
    return True


@njit(cache=True, nogil=True)
def solve_lower(Lc, b):
    """``Lc⁻¹ b`` in place (``b (k,)``)."""
    k = Lc.shape[0]
    for i in range(k):
        s = b[i]
        for p in range(i):
            s -= Lc[i, p] * b[p]
        b[i] = s / Lc[i, i]


@njit(cache=True, nogil=True)
def solve_upper_t(Lc, b):
    """``Lc⁻ᵀ b`` in place (``b (k,)``)."""
    k = Lc.shape[0]
    for i in range(k - 1, -1, -1):
        s = b[i]
        for p in range(i + 1, k):
            s -= Lc[p, i] * b[p]
        b[i] = s / Lc[i, i]


@njit(cache=True, nogil=True)
def cholesky_solve(Lc, b):
    """``(Lc Lcᵀ)⁻¹ b`` in place."""
    solve_lower(Lc, b)
    solve_upper_t(Lc, b)


@njit(cache=True, nogil=True)
def all_finite(x):
    """Whether every entry of the 1-d ``x`` is finite (one pass)."""
    s = 0.0
    for j in range(x.shape[0]):
        s += x[j]
    return np.isfinite(s)


#: below this many multiply-adds :func:`combine_rows` runs loops of contiguous ``axpy`` (BLAS's call
#: overhead dominates the ~10⁴–10⁵ flops of a small model's step); above it BLAS
BLAS_THRESHOLD = 400_000


#: reassociation lets numba vectorise the dot products; no other fast-math flag, so NaN and ∞ still
#: propagate to the step's checks
FAST = {"reassoc", "contract"}


@njit(cache=True, nogil=True)
def gram_into(A, B, out):
    """``out[:k, :k2] = A Bᵀ`` for row blocks ``A (k, P)``, ``B (k2, P)`` by BLAS (measured faster
    than vectorised loops from the smallest models on: LoFi-10 at P = 501, 30 against 53 µs/step)."""
    k = A.shape[0]
    k2 = B.shape[0]
    if k == 0 or k2 == 0:
        return
    out[:k, :k2] = np.dot(A, B.T)


@njit(cache=True, nogil=True, fastmath=FAST)
def combine_rows(M, A, out):
    """``out = M A`` for a small ``M (r, k)`` and rows ``A (k, P)`` (``out (r, P)``): loops of
    ``axpy`` over contiguous rows for small products, BLAS for large ones."""
    r, k = M.shape
    P = A.shape[1]
    if r * k * P > BLAS_THRESHOLD:
        np.dot(M, A, out)
        return
    for a in range(r):
        row = out[a]
        for j in range(P):
            row[j] = 0.0
        for b in range(k):
            c = M[a, b]
            if c != 0.0:
                src = A[b]
                for j in range(P):
                    row[j] += c * src[j]


@njit(cache=True, nogil=True, fastmath=FAST)
def rows_times_symmetric(A, H, out, zero):
    """``out = H A`` for a symmetric ``A (P, P)`` and rows ``H (m, P)`` (C-contiguous), as the dot
    products of the rows of ``A`` with those of ``H`` — ``(A Hᵀ)ᵀ``, the rounding of ``A @ H.T`` —
    four rows of ``A`` at a time (each loaded element of ``H`` serves four accumulators): one pass
    over ``A``, where BLAS's GEMM first packs all of ``A`` for so skinny a product. ``zero``: 0 in
    the dtype of the accumulators."""
    P = A.shape[0]
    m = H.shape[0]
    i = 0
    while i + 4 <= P:
        a0 = A[i]
        a1 = A[i + 1]
        a2 = A[i + 2]
        a3 = A[i + 3]
        for c in range(m):
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
            out[c, i] = s0
            out[c, i + 1] = s1
            out[c, i + 2] = s2
            out[c, i + 3] = s3
        i += 4
    while i < P:
        a0 = A[i]
        for c in range(m):
            h = H[c]
            s0 = zero
            for j in range(P):
                s0 += a0[j] * h[j]
            out[c, i] = s0
        i += 1
