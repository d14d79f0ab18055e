"""Full-covariance EKF (FCEKF; Chang, Jones & Murphy 2022, §2.1; LoFi paper §4)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from ._base import (_FLOOR_MARGIN, Structure, UpdateInfo, as_variance_vector, merge_hypotheses, psd_factor,
                    resolution_floored_innovation, stiffness_limit, sync_step)

#: rows of ``|Σ|`` per chunk of :func:`_abs_quadratic` (bounds its temporary to ``512 × P``)
_ABS_CHUNK = 512

#: the compiled product ``H Σ`` (:func:`skfilter.kernels.linalg.rows_times_symmetric`) serves ``m ≤ _KERNEL_MAX_ROWS`` rows of
#: ``H`` when ``m P² ≥ _KERNEL_MIN_WORK``: below, the call costs more than it saves; above, BLAS's
#: blocked GEMM wins (measured on one core: ``P = 3,760``, ``m = 10``: 8 ms against BLAS's 20 ms;
#: ``m = 32``: equal; ``P = 501``, ``m = 3``: 41 µs against 140 µs)
_KERNEL_MIN_WORK = 1 << 19
_KERNEL_MAX_ROWS = 16
#: torch intra-op threads up to which the one-thread kernel beats BLAS's threaded GEMM
_KERNEL_MAX_THREADS = 2
_kernel = None  # the compiled kernel, False where numba is missing (compiled on first use)


def _kernels_enabled():  # pragma: no cover - replaced on first call
    return True


def _compiled_kernel():
    """The compiled product :func:`skfilter.kernels.linalg.rows_times_symmetric`, or None (no
    numba, or compiled kernels switched off: ``SKFILTER_COMPILED=0``,
    :func:`skfilter.kernels.compiled_kernels`)."""
    global _kernel, _kernels_enabled
    if _kernel is None:
        from .. import kernels

        _kernels_enabled = kernels.enabled
        if kernels.AVAILABLE:
            from ..kernels.linalg import rows_times_symmetric

            _kernel = rows_times_symmetric
        else:  # pragma: no cover - exercised only without numba
            _kernel = False
    return _kernel if _kernel and _kernels_enabled() else None


def _uses_kernel(H, cov):
    m, P = H.shape[-2], cov.shape[-1]
    return (cov.device.type == "cpu" and cov.dtype in (torch.float32, torch.float64) and H.dtype == cov.dtype
            and H.shape[:-2] == cov.shape[:-2] and 1 <= m <= _KERNEL_MAX_ROWS and m * P * P >= _KERNEL_MIN_WORK
            and torch.get_num_threads() <= _KERNEL_MAX_THREADS and cov.is_contiguous()
            and not (cov.requires_grad or H.requires_grad) and _compiled_kernel() is not None)


def _times_cov(H, cov):
    """``H Σ`` for rows ``H (..., m, P)`` and a symmetric ``Σ (..., P, P)``: ``(..., m, P)``, computed as
    ``(Σ Hᵀ)ᵀ`` (rows of ``Σ`` times rows of ``H``), by the compiled kernel where it is faster."""
    if not _uses_kernel(H, cov):
        return (cov @ H.mT).mT
    kernel = _compiled_kernel()
    Hc = H.contiguous()
    out = torch.empty(Hc.shape, dtype=cov.dtype)
    zero = np.float64(0.0) if cov.dtype == torch.float64 else np.float32(0.0)
    A, Hn, On = cov.numpy(), Hc.numpy(), out.numpy()
    if cov.dim() == 2:
        kernel(A, Hn, On, zero)
    else:  # one hypothesis at a time: each as it would be alone
        A, Hn, On = (x.reshape(-1, *x.shape[-2:]) for x in (A, Hn, On))
        for k in range(A.shape[0]):
            kernel(A[k], Hn[k], On[k], zero)
    return out


def _spare(candidate, like, avoid=()):
    """``candidate`` (an array of a dead *workspace* belief, :meth:`Structure.update`) if a result
    shaped like ``like`` may be written into it: a tensor of the same shape, dtype and device,
    contiguous, outside autograd, and sharing no memory with the step's inputs ``avoid`` (a field
    passed through unchanged is shared by the beliefs of several steps); else None."""
    if (not isinstance(candidate, torch.Tensor) or candidate.shape != like.shape or candidate.dtype != like.dtype
            or candidate.device != like.device or not candidate.is_contiguous() or candidate.requires_grad):
        return None
    ptr = candidate.untyped_storage().data_ptr()
    for a in avoid:
        if a is candidate or (isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == ptr):
            return None
    return candidate


class FullBelief(NamedTuple):
    """``N(mean, cov)``: ``mean (..., P)``, ``cov (..., P, P)``."""

    mean: torch.Tensor
    cov: torch.Tensor


def _add_diagonal(M, Q):
    """``M + diag(Q)`` (a new tensor) for a float or ``(..., P)`` ``Q``."""
    out = M.clone()
    out.diagonal(dim1=-2, dim2=-1).add_(Q)
    return out


def _abs_quadratic(cov, h):
    """``|h|ᵀ |Σ| |h|`` (``cov (..., P, P)``, ``h (..., P)``), the rounding scale of ``h Σ hᵀ``,
    by row chunks."""
    ha = h.abs()
    total = torch.zeros(h.shape[:-1], dtype=h.dtype, device=h.device)
    for i in range(0, cov.shape[-1], _ABS_CHUNK):
        block = cov[..., i:i + _ABS_CHUNK, :].abs()
        total = total + ((block @ ha[..., :, None])[..., 0] * ha[..., i:i + _ABS_CHUNK]).sum(-1)
    return total


class FullCovariance(Structure):
    """Dense covariance ``Σ`` (``P × P``), updated in ``O(P² m)`` per step.

    Update with whitened rows ``Hw (m×P)`` and unit noise (eqs. 4–7 of the diagonal-EKF paper)::

        S  = I + Hw Σ Hwᵀ = C Cᵀ                        (m × m, Cholesky)
        V  = Σ Hwᵀ C⁻ᵀ                                  (P × m)
        μ' = μ + V C⁻¹ ew                               (= μ + K e,  K = Σ Hᵀ S⁻¹)
        Σ' = Σ − V Vᵀ                                   (= Σ − K S Kᵀ)

    ``V Vᵀ`` is symmetric positive semi-definite, so ``Σ'`` stays symmetric and, up to rounding,
    PSD. One observation row (``m = 1``) takes a scalar path without factorisations.

    **Stiff rows** (:func:`~skfilter.posteriors._base.stiffness_limit`).
    ``Σ − VVᵀ`` shrinks the variance along a row by ``1/(1 + a)``, ``a = h Σ hᵀ``, as a difference:
    for ``a ≳ 1/eps`` (an input of ``1e8`` with noise variance ``1e-2``: ``a ≈ 1e18``) the variance
    left along the row is below the rounding of the stored matrix, ``Σ'`` becomes indefinite, and a
    later row along that direction finds ``1 + h Σ hᵀ < 0``. The step checks, in its one host
    synchronisation, the trace of ``Hw Σ Hwᵀ`` (``a`` for one row), and whether the floor below could
    bind for some row by the ``O(mP)`` bound of ``|h|ᵀ|Σ||h|`` (a moderate ``a`` can be a cancellation
    too: a row repeated after a stiff one); when the trace exceeds the stiffness limit, the floor
    could bind (or the plain step fails its checks) the update is redone row by row (sequential
    conditioning on independent rows equals the batch update) with the innovation of
    :func:`~skfilter.posteriors._base.resolution_floored_innovation`::

        u = Σ hᵀ,   a = h u,   S = max(1 + a, a/(1 − ρ_min)),   ρ_min = κ·eps·|h|ᵀ|Σ||h| / a
        μ' = μ + u ew/S,    Σ' = Σ − (u/√S)(u/√S)ᵀ,    diag(Σ') ≥ ρ diag(Σ)

    — the Kalman update itself where the matrix resolves it, and otherwise the Kalman update with the
    noise raised to the matrix's resolution, so ``Σ'`` stays PSD and ``Σ' ⪯ Σ``: no predictive
    variance ``x Σ xᵀ`` grows. (A Joseph form ``(I − KH)Σ(I − KH)ᵀ + KKᵀ`` guards against errors
    in ``K``, not against this cancellation; done densely it costs ``O(P³)`` and in ``O(P²)`` it
    expands to the same rank-one difference.) ``|h|ᵀ|Σ||h|`` is bounded by ``(|h|·√diag Σ)²``
    (Cauchy–Schwarz, ``O(P)``) and computed (``O(P²)``) only where that bound would floor.

    A full PSD check would cost ``O(P³)``; the Cholesky factor of ``S``, the finiteness of the mean
    and the sign of the new diagonal are checked instead. Transition: ``μ ← g μ + b``,
    ``Σ ← g² Σ + diag(Q)``.

    **Cost** (CPU). A step makes two passes over ``Σ``: ``Hw Σ`` and the rank-``m`` update. For a
    large ``P`` and a few rows, ``Hw Σ`` runs compiled (numba; one pass over ``Σ``, four rows at a
    time), since BLAS's GEMM packs all of ``Σ`` first for so skinny a product (``P = 3,760``,
    ``m = 10``, one core: 8 ms against 20 ms); the update is one BLAS ``addr``/``addmm``/``baddbmm``.
    ``Σ'`` is written into the matrix of the dead ``workspace`` belief the engine passes (the belief
    of two steps back) instead of a fresh ``P × P`` allocation, whose page faults cost more than the
    update; the step's input belief is never written.

    Examples
    --------
    >>> import torch
    >>> from skfilter.posteriors import FullCovariance
    >>> structure = FullCovariance()
    >>> prior = structure.prior(torch.zeros(2, dtype=torch.float64), 1.0)
    >>> post, info = structure.update(prior, torch.tensor([[1.0, 0.0]], dtype=torch.float64),
    ...                               torch.tensor([1.0], dtype=torch.float64))
    >>> [round(v, 12) for v in post.mean.tolist()], [round(v, 12) for v in post.cov.diagonal().tolist()]
    ([0.5, 0.0], [0.5, 1.0])
    """

    belief_type = FullBelief

    def prior(self, mean, prior_variance):
        var = as_variance_vector(prior_variance, mean)
        cov = torch.diag_embed(var.expand_as(mean)).contiguous() if mean.dim() > 1 else torch.diag(var)
        return FullBelief(mean.clone(), cov)

    def transition(self, belief, g, Q, shift):
        mean, cov = belief
        noise = isinstance(Q, torch.Tensor) or Q != 0.0
        if g != 1.0:
            mean, cov = mean * g, cov * (g * g)
            if noise:  # on the new matrix: one P × P allocation and pass, not two
                cov.diagonal(dim1=-2, dim2=-1).add_(Q)
        elif noise:
            cov = _add_diagonal(cov, Q)
        if shift is not None:
            mean = mean + shift
        return FullBelief(mean, cov)

    def update(self, belief, Hw, ew, workspace=None):
        mean, cov = belief
        m = Hw.shape[-2]
        HS = _times_cov(Hw, cov)  # Hw Σ = (Σ Hwᵀ)ᵀ (Σ symmetric), (..., m, P)
        info = None
        if m == 1 and Hw.dim() == 2:  # one belief, one row: scalar innovation, fewest operations
            # S = 1 + h Σ hᵀ ≥ 1 for PSD Σ; a negative S gives NaN, caught by the check below
            s = torch.dot(Hw[0], HS[0]).add_(1.0).sqrt_()
            C = s
            Vt = HS / s  # Vᵀ, (1, P)
            mu = mean + Vt[0] * (ew[0] / s)
            watch = (s,)
        elif m == 1:
            a_rows = (Hw[..., 0, :] * HS[..., 0, :]).sum(-1)
            s = (a_rows + 1.0).sqrt()
            C = s[..., None, None]
            Vt = HS / C
            mu = mean + Vt[..., 0, :] * (ew[..., 0] / s)[..., None]
            a = s * s - 1.0
            watch = (a.amax(), a.amin())
            a_rows = a_rows[..., None]
        else:
            S = HS @ Hw.mT
            a_rows = S.diagonal(dim1=-2, dim2=-1).clone()  # h_j Σ h_jᵀ of every row
            a = a_rows.sum(-1)  # the trace of Hw Σ Hwᵀ
            S.diagonal(dim1=-2, dim2=-1).add_(1.0)
            C, info = torch.linalg.cholesky_ex(S)
            Vt = torch.linalg.solve_triangular(C, HS, upper=False)  # Vᵀ = C⁻¹ Hw Σ, (..., m, P)
            z = torch.linalg.solve_triangular(C, ew.unsqueeze(-1), upper=False)
            mu = mean + (z.mT @ Vt)[..., 0, :]
            watch = (a.amax(), a.amin())
        # Σ − V Vᵀ, one BLAS rank-m update (one pass over Σ), into the workspace's matrix when there is
        # one: a fresh P × P allocation per step makes the allocator return and re-fault pages
        out = None if workspace is None else _spare(workspace.cov, cov, (cov, mean, Hw, ew))
        if cov.dim() == 2 and m == 1:
            new_cov = torch.addr(cov, Vt[0], Vt[0], alpha=-1.0, out=out) if out is not None else \
                torch.addr(cov, Vt[0], Vt[0], alpha=-1.0)
        elif cov.dim() == 2:
            new_cov = torch.addmm(cov, Vt.mT, Vt, alpha=-1.0, out=out) if out is not None else \
                torch.addmm(cov, Vt.mT, Vt, alpha=-1.0)
        elif cov.dim() == 3:
            new_cov = torch.baddbmm(cov, Vt.mT, Vt, alpha=-1.0, out=out) if out is not None else \
                torch.baddbmm(cov, Vt.mT, Vt, alpha=-1.0)
        else:
            new_cov = cov - Vt.mT @ Vt
        new_diag = new_cov.diagonal(dim1=-2, dim2=-1)
        # cancellation along a row (class docstring): where the Cauchy–Schwarz bound (|h|·√diag Σ)² of
        # |h|ᵀ|Σ||h| (O(mP)) is so far above a = h Σ hᵀ that the resolution floor could bind
        # (κ·eps·bound·(1 + a) > a), the plain difference may leave a random sign along h (a moderate
        # a does not exclude it: a row repeated after a stiff one, a ≈ 3.6e3 against a bound 1.5e17)
        kappa_eps = _FLOOR_MARGIN * float(torch.finfo(cov.dtype).eps)
        root_diag = cov.diagonal(dim1=-2, dim2=-1).clamp_min(0.0).sqrt()
        if len(watch) == 1:  # one belief, one row: √bound watched, the rest on the host (fewest operations)
            watch += (torch.dot(Hw[0].abs(), root_diag),)
        else:
            bound = (Hw.abs() * root_diag[..., None, :]).sum(-1) ** 2
            bind = (kappa_eps * bound * (1.0 + a_rows) - a_rows).amax(-1)
            watch += (bind.amax(),)
        failure, watched = sync_step([mu, C], positive=new_diag, info=info, watch=watch)
        # stiffness: a = s² − 1 of the scalar innovation, or the trace of Hw Σ Hwᵀ (per hypothesis)
        if len(watched) == 2:
            high = low = watched[0] * watched[0] - 1.0
            binds = kappa_eps * watched[1] * watched[1] * (1.0 + low) - low
        else:
            high, low, binds = watched
        limit = stiffness_limit(cov.dtype)
        if failure is None and 0.0 <= low and high <= limit and not binds > 0.0:
            return FullBelief(mu, new_cov), UpdateInfo(lambda: (C.reshape(1, 1) if C.dim() == 0 else C, ew))
        safe, safe_info = self._update_floored(mean, cov, Hw, ew)
        if mean.dim() == 1:
            return safe, safe_info
        # a stack: the hypotheses whose plain step was fine keep it (as each would alone)
        keep = torch.isfinite(mu).all(-1) & (new_diag > 0).all(-1) & (a >= 0.0) & (a <= limit) & ~(bind > 0.0)
        if info is not None:
            keep &= info == 0
        return merge_hypotheses(keep, FullBelief(mu, new_cov), safe), safe_info

    def _update_floored(self, mean, cov, Hw, ew):
        """The update row by row with :func:`resolution_floored_innovation` (class docstring): the
        path of stiff rows. Raises :class:`FilterStepError` if the result is not finite."""
        eps = float(torch.finfo(cov.dtype).eps)
        prior_cov = cov
        e = ew.clone()
        m = Hw.shape[-2]
        forms = []  # a and its rounding scale of every row: checked finite (an overflow is a failure)
        for j in range(m):
            h = Hw[..., j, :]
            u = (cov @ h[..., :, None])[..., 0]
            a = (h * u).sum(-1)
            old_diag = cov.diagonal(dim1=-2, dim2=-1)
            scale = (h.abs() * old_diag.clamp_min(0.0).sqrt()).sum(-1) ** 2  # ≥ |h|ᵀ|Σ||h| (Cauchy–Schwarz)
            forms += [a, scale]
            S, rho = resolution_floored_innovation(a, scale, eps, lambda: _abs_quadratic(cov, h))
            V = u * S.rsqrt()[..., None]  # u/√S (0 where S = ∞)
            gain = V * S.rsqrt()[..., None]
            mean = mean + gain * e[..., j, None]
            if j + 1 < m:  # the residuals of the later rows at the new mean
                e[..., j + 1:] -= (Hw[..., j + 1:, :] @ gain[..., :, None])[..., 0] * e[..., j, None]
            new_cov = cov - V[..., :, None] * V[..., None, :]
            diag = new_cov.diagonal(dim1=-2, dim2=-1)
            diag.copy_(torch.maximum(diag, rho[..., None] * old_diag))  # Σ' ⪰ ρ Σ (exact arithmetic)
            cov = new_cov
        failure, _ = sync_step([mean, torch.stack(forms)], positive=cov.diagonal(dim1=-2, dim2=-1))
        if failure is not None:
            raise failure

        def factor():  # S = I + Hw Σ Hwᵀ of the predicted belief, raised to I where rounding left it below
            S = Hw @ (prior_cov @ Hw.mT)
            S.diagonal(dim1=-2, dim2=-1).add_(1.0)
            return psd_factor(S), ew

        return FullBelief(mean, cov), UpdateInfo(factor)

    def quadratic_form(self, belief, J):
        cov = belief.cov
        *batch, n, C, P = J.shape
        JS = _times_cov(J.reshape(*batch, n * C, P), cov)
        return JS.reshape(*batch, n, C, P) @ J.mT

    def quadratic_diagonal(self, belief, J):
        *batch, n, C, P = J.shape
        JS = _times_cov(J.reshape(*batch, n * C, P), belief.cov)
        return (JS.reshape(*batch, n, C, P) * J).sum(-1)

    def marginal_variance(self, belief):
        return belief.cov.diagonal(dim1=-2, dim2=-1).clone()

    def covariance(self, belief):
        return belief.cov.clone()

    def sample(self, belief, n_samples, generator):
        L, info = torch.linalg.cholesky_ex(belief.cov)
        if int(info):
            # semidefinite to rounding: use the symmetric square root of the clipped spectrum. The
            # eigenvalues within eigh's rounding (P·ε·λ_max) of 0 are 0: their square roots (~√ε
            # relative) would put every draw off the covariance's range by that much
            w, U = torch.linalg.eigh(belief.cov)
            tol = w.shape[-1] * torch.finfo(w.dtype).eps * w.abs().max()
            L = U * torch.where(w > tol, w, torch.zeros_like(w)).sqrt()
        eps = torch.randn(n_samples, belief.mean.shape[-1], generator=generator,
                          device=belief.mean.device, dtype=belief.mean.dtype)
        return belief.mean + eps @ L.T

    def moment_match(self, belief, log_weights):
        """``μ̄ = Σ_k w_k μ_k``, ``Σ̄ = Σ_k w_k (Σ_k + (μ_k − μ̄)(μ_k − μ̄)ᵀ)`` (exact; RL-MMPR, thesis §3.3.2)."""
        w = torch.softmax(log_weights, dim=0)
        mean = torch.einsum("k,kp->p", w, belief.mean)
        d = belief.mean - mean
        cov = torch.einsum("k,kpq->pq", w, belief.cov) + (d * w[:, None]).T @ d
        return FullBelief(mean, cov)
