"""Small dense linear algebra for the compiled step (numba): Cholesky with a failure flag and
triangular solves on ``k × k`` systems (``k = L + m``, a few tens), written as loops so that a
matrix that is not positive definite reports instead of raising inside compiled code."""

from __future__ import annotations

import math

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


@njit(cache=True, nogil=True, fastmath=FAST)
def solve_lower_rows(Lc, rows, g):
    """``rows ← g Lc⁻¹ rows`` for a lower-triangular ``Lc (L, L)`` and contiguous rows ``(L, P)``:
    forward substitution on whole rows (``L² P / 2`` multiply-adds, no temporary)."""
    L, P = rows.shape
    for a in range(L):
        row = rows[a]
        for b in range(a):
            c = Lc[a, b]
            if c != 0.0:
                other = rows[b]
                for j in range(P):
                    row[j] -= c * other[j]
        s = 1.0 / Lc[a, a]
        for j in range(P):
            row[j] *= s
    if g != 1.0:
        for a in range(L):
            row = rows[a]
            for j in range(P):
                row[j] *= g


@njit(cache=True, nogil=True, fastmath=FAST)
def solve_upper_t_rows(Lc, rows):
    """``rows ← Lc⁻ᵀ rows`` for a lower-triangular ``Lc (L, L)`` and contiguous rows ``(L, P)``:
    backward substitution on whole rows (with :func:`solve_lower_rows`, ``(Lc Lcᵀ)⁻¹ rows``)."""
    L, P = rows.shape
    for a in range(L - 1, -1, -1):
        row = rows[a]
        for b in range(a + 1, L):
            c = Lc[b, a]
            if c != 0.0:
                other = rows[b]
                for j in range(P):
                    row[j] -= c * other[j]
        s = 1.0 / Lc[a, a]
        for j in range(P):
            row[j] *= s


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


@njit(cache=True, nogil=True)
def _rotate_rows(R, i, k, c, s, start):
    """``[R_i; R_k] ← [c s; −s c] [R_i; R_k]`` on the columns from ``start`` (a Givens rotation)."""
    a = R[i]
    b = R[k]
    for j in range(start, R.shape[1]):
        x = a[j]
        y = b[j]
        a[j] = c * x + s * y
        b[j] = c * y - s * x


@njit(cache=True, nogil=True)
def _rotate_entries(W, first, i, k, c, s):
    """The rotation of :func:`_rotate_rows` on entries ``i``, ``k`` of the rows ``W[first:]``."""
    for a in range(first, W.shape[0]):
        x = W[a, i]
        y = W[a, k]
        W[a, i] = c * x + s * y
        W[a, k] = c * y - s * x


@njit(cache=True, nogil=True)
def triangular_update_into(U, W, V, out):
    """``out ← Q_R(U + Wᵀ V, V)``: the upper-triangular ``R`` (rows signed to a non-negative
    diagonal) with ``RᵀR = (U + WᵀV)ᵀ(U + WᵀV) + VᵀV``, for an upper-triangular ``U (D, D)`` and
    ``m`` rows ``W (m, D)``, ``V (m, D)`` — by Givens rotations, ``O(m D²)`` where a Householder QR
    of the ``(D + m) × D`` stack costs ``O(D³)``.

    The ``m`` rank-one terms ``w_a v_aᵀ`` are added one at a time (Golub & Van Loan, *Matrix
    Computations*, 4th ed., §6.5.1): rotations of rows ``(i − 1, i)`` from the bottom zero ``w_a``
    below its first entry, making ``R`` upper Hessenberg, ``w_a[0] v_aᵀ`` is added to the first row,
    and rotations of rows ``(i, i + 1)`` restore the triangle; each rotation also acts on the
    ``w`` still to come (they are expressed in the rotated basis). The rows ``v_a`` are then
    appended (§6.5.3: one rotation per column). ``W`` is overwritten."""
    D = U.shape[0]
    m = W.shape[0]
    for i in range(D):
        for j in range(D):
            out[i, j] = U[i, j]
    for a in range(m):
        w = W[a]
        for i in range(D - 1, 0, -1):  # zero w[i] against w[i − 1]
            if w[i] == 0.0:
                continue
            r = math.hypot(w[i - 1], w[i])
            c = w[i - 1] / r
            s = w[i] / r
            w[i - 1] = r
            w[i] = 0.0
            _rotate_rows(out, i - 1, i, c, s, i - 1)
            _rotate_entries(W, a + 1, i - 1, i, c, s)
        scale = w[0]
        v = V[a]
        for j in range(D):
            out[0, j] += scale * v[j]
        for i in range(D - 1):  # zero the subdiagonal entry out[i + 1, i] against out[i, i]
            if out[i + 1, i] == 0.0:
                continue
            r = math.hypot(out[i, i], out[i + 1, i])
            c = out[i, i] / r
            s = out[i + 1, i] / r
            _rotate_rows(out, i, i + 1, c, s, i)
            out[i + 1, i] = 0.0
            _rotate_entries(W, a + 1, i, i + 1, c, s)
    row = np.empty(D, dtype=out.dtype)
    for a in range(m):  # append the rows v_a
        for j in range(D):
            row[j] = V[a, j]
        for i in range(D):
            x = row[i]
            if x == 0.0:
                continue
            d = out[i, i]
            r = math.hypot(d, x)
            c = d / r
            s = x / r
            rr = out[i]
            for j in range(i, D):
                y = rr[j]
                z = row[j]
                rr[j] = c * y + s * z
                row[j] = c * z - s * y
            row[i] = 0.0
    for i in range(D):
        if out[i, i] < 0.0:
            for j in range(i, D):
                out[i, j] = -out[i, j]
