"""Diagonal EKFs: VD-EKF (precision matching) and FD-EKF (variance matching): Chang, Jones & Murphy 2022, §2.2."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._base import (Structure, UpdateInfo, as_variance_vector, check_step, identity_plus_gram_factor,
                    merge_hypotheses, stiffness_limit, sync_step)
from .full import _spare


class DiagonalBelief(NamedTuple):
    """``N(mean, diag(var))``: ``mean (..., P)``, ``var (..., P)``."""

    mean: torch.Tensor
    var: torch.Tensor


def _as_matrix(C):
    return C.reshape(1, 1) if C.dim() == 0 else C

#: the update writes into the workspace's arrays from this many variances (below, a fresh array
#: costs less than checking that the workspace's may be written)
_REUSE_MIN_ENTRIES = 1 << 15


def _addcmul(a, b, c, out, value=1.0):
    """``a + value · b ⊙ c`` (broadcast to ``a``'s shape), into ``out`` when it is given."""
    return torch.addcmul(a, b, c, value=value) if out is None else torch.addcmul(a, b, c, value=value, out=out)


def _add(a, b, out):
    return a + b if out is None else torch.add(a, b, out=out)


def _sub(a, b, out):
    return a - b if out is None else torch.sub(a, b, out=out)


def _innovation(Hw, v, ew, stiff=False):
    """Whitened innovation factor: ``(C, Z, info)`` with ``S = I + Hw diag(v) Hwᵀ = C Cᵀ`` and
    ``Z = C⁻¹ Hw diag(v)``; ``m = 1`` without factorisation (``info`` None; for one belief ``C`` is
    then the scalar ``√S``). With ``stiff`` (``m > 1``), ``C`` comes from the QR form
    :func:`~skfilter.posteriors._base.identity_plus_gram_factor` of ``G = Hw diag(√v)`` instead of
    the Cholesky factor of the Gram matrix (``info`` None)."""
    if Hw.dim() == 2 and Hw.shape[0] == 1:  # one belief, one row: fewest operations
        HV = Hw * v
        s = torch.dot(HV[0], Hw[0]).add_(1.0).sqrt_()
        return s, HV / s, None
    HV = Hw * v[..., None, :]
    if Hw.shape[-2] == 1:  # scalar innovation (NaN if S < 0, caught by the step's check)
        s = ((HV[..., 0, :] * Hw[..., 0, :]).sum(-1) + 1.0).sqrt()
        C = s[..., None, None]
        return C, HV / C, None
    if stiff:
        C, info = identity_plus_gram_factor(Hw * v.sqrt()[..., None, :]), None
    else:
        S = HV @ Hw.mT
        S.diagonal(dim1=-2, dim2=-1).add_(1.0)
        C, info = torch.linalg.cholesky_ex(S)
    return C, torch.linalg.solve_triangular(C, HV, upper=False), info


def _excluded_fd_variance(Hw, v, new_var, Z):
    """FD variances without cancellation for the coordinates an observation pins.

    ``v' = v − colsum(Z²)`` computes ``v_i (1 − q_i)``, ``q_i = v_i h_iᵀ S⁻¹ h_i``, as a difference that
    loses all digits when ``q_i → 1`` (one parameter explains a stiff row: a negative or zero
    variance). With ``S_{−i} = I + Σ_{j≠i} v_j h_j h_jᵀ`` (``h_j`` the
    column ``j`` of ``Hw``), Sherman–Morrison gives the same value as a sum of positive terms,

        v'_i = v_i / (1 + v_i h_iᵀ S_{−i}⁻¹ h_i),

    with ``S_{−i}`` formed without column ``i`` (never as ``S − v_i h_i h_iᵀ``) and factored by
    :func:`~skfilter.posteriors._base.identity_plus_gram_factor`; for one row it is
    ``v_i S_{−i} / S``. Used where ``q_i > 1/2`` — fewer than ``2m`` coordinates, since
    ``Σ_i q_i = tr(I − S⁻¹) < m`` — elsewhere the difference loses less than one bit. Returns the
    corrected variances (a new tensor)."""
    q = (Z * Z).sum(-2) / v
    pinned = (q > 0.5).nonzero().tolist()
    if not pinned:
        return new_var
    out = new_var.clone()
    G = Hw * v.sqrt()[..., None, :]
    for index in pinned:
        *b, i = index
        Gb = G[tuple(b)]
        g = Gb[:, i].clone()
        rest = Gb.clone()
        rest[:, i] = 0.0
        y = torch.linalg.solve_triangular(identity_plus_gram_factor(rest), g[:, None], upper=False)
        out[tuple(index)] = v[tuple(index)] / (1.0 + (y * y).sum())
    return out


class DiagonalCovariance(Structure):
    """Diagonal Gaussian ``N(μ, diag(v))`` with either KL projection of the one-step EKF posterior.

    Transition: ``μ ← g μ + b``, ``v ← g² v + Q`` (eq. 2 with diagonal ``Q``). Update with whitened
    rows ``Hw (m×P)`` and unit noise (so ``Hᵀ R⁻¹ H = HwᵀHw`` and ``Hᵀ R⁻¹ e = Hwᵀ ew``):

    * ``'fd'`` — FD-EKF, inclusive KL(p‖q), §3.2 (eqs. 10–12): ``S = I + Hw diag(v) Hwᵀ = CCᵀ``,
      ``Z = C⁻¹ Hw diag(v)``; ``μ' = μ + Zᵀ C⁻¹ ew`` (the exact EKF mean from the diagonal prior)
      and ``v' = v − colsum(Z ⊙ Z)`` (= the full EKF's marginal variances after one step).
    * ``'vd'`` — VD-EKF, exclusive KL(q‖p), §3.3 (eqs. 13, 25): ``1/v' = 1/v + colsum(Hw ⊙ Hw)``
      (diagonal of the EKF posterior precision). The mean is, with ``vd_mean='paper'``, eq. 25 as
      the authors' code: ``μ' = μ + v' ⊙ Hwᵀ ew`` using the *posterior* ``v'``; with
      ``vd_mean='exact'`` it is the KL-optimal EKF mean ``μ + v ⊙ Hwᵀ S⁻¹ ew`` (= LoFi with rank 0,
      LoFi paper eq. 49).

    Costs ``O(P m² + m³)`` per step.

    **Stiff rows** (:func:`~skfilter.posteriors._base.stiffness_limit`).
    VD's ``v'`` adds precisions and never cancels. FD's ``v − colsum(Z²)`` is a difference that
    loses every digit for a parameter that alone explains a row with ``h² v ≳ 1/eps`` (a row of
    ``1e8`` with noise ``1e-2``): zero or negative variances, a failed step. The step checks, in its
    one host synchronisation, ``a = Hw diag(v) Hwᵀ`` (its trace for ``m`` rows); past the limit, or
    when the plain step fails its checks, it is redone with the innovation factor of a QR
    decomposition (:func:`~skfilter.posteriors._base.identity_plus_gram_factor`; ``m > 1``) and FD's
    pinned parameters by the cancellation-free :func:`_excluded_fd_variance`. Both projections
    keep ``0 < v' ≤ v`` in floating point, so no predictive variance ``Σ_i x_i² v_i`` grows.

    Parameters
    ----------
    projection : {'vd', 'fd'}, default='vd'
    vd_mean : {'paper', 'exact'}, default='paper'

    Examples
    --------
    >>> import torch
    >>> from skfilter.posteriors import DiagonalCovariance
    >>> structure = DiagonalCovariance("fd")
    >>> prior = structure.prior(torch.zeros(2, dtype=torch.float64), 1.0)
    >>> post, _ = structure.update(prior, torch.tensor([[1.0, 1.0]], dtype=torch.float64),
    ...                            torch.tensor([3.0], dtype=torch.float64))
    >>> [round(v, 12) for v in post.mean.tolist()], [round(v, 12) for v in post.var.tolist()]
    ([1.0, 1.0], [0.666666666667, 0.666666666667])
    """

    belief_type = DiagonalBelief

    def __init__(self, projection: str = "vd", vd_mean: str = "paper"):
        if projection not in ("vd", "fd"):
            raise ValueError(f"projection must be 'vd' or 'fd', got {projection!r}.")
        if vd_mean not in ("paper", "exact"):
            raise ValueError(f"vd_mean must be 'paper' or 'exact', got {vd_mean!r}.")
        self.projection, self.vd_mean = projection, vd_mean

    def prior(self, mean, prior_variance):
        return DiagonalBelief(mean.clone(), as_variance_vector(prior_variance, mean).expand_as(mean).clone())

    def transition(self, belief, g, Q, shift):
        mean, var = belief
        noise = isinstance(Q, torch.Tensor) or Q != 0.0
        if g != 1.0:
            mean, var = mean * g, var * (g * g)
            if noise:  # on the new array
                var.add_(Q)
        elif noise:
            var = var + Q
        if shift is not None:
            mean = mean + shift
        return DiagonalBelief(mean, var)

    def update(self, belief, Hw, ew, workspace=None):
        outs = (None, None)
        if workspace is not None and belief.var.numel() >= _REUSE_MIN_ENTRIES:  # into the dead belief's arrays
            avoid = (belief.mean, belief.var, Hw, ew)
            outs = (_spare(workspace.mean, belief.mean, avoid), _spare(workspace.var, belief.var, avoid))
        mu, new_var, C, info = self._step(belief, Hw, ew, stiff=False, outs=outs)
        values = [mu] + ([] if C is None else [C])
        if C is None:  # VD with the paper's mean: no innovation, no cancellation
            check_step(values, positive=new_var, info=info)

            def factor():
                return _as_matrix(_innovation(Hw, belief.var, ew)[0]), ew

            return DiagonalBelief(mu, new_var), UpdateInfo(factor)
        # stiffness (stiffness_limit): a = S − 1 of the scalar innovation(s), or for m rows the trace
        # of Hw diag(v) Hwᵀ = ‖C‖²_F − m; past the limit, or on a failed check, the stiff forms
        m = Hw.shape[-2]
        if C.dim() == 0:  # a = C² − 1 on the host: no operation added to the scalar path
            watch = (C,)
        else:
            trace = (C * C).sum((-2, -1))
            watch = (trace.amax(),)
        failure, watched = sync_step(values, positive=new_var, info=info, watch=watch)
        limit = stiffness_limit(new_var.dtype)
        if failure is None and (watched[0] ** 2 - 1.0 if C.dim() == 0 else watched[0] - m) <= limit:
            return DiagonalBelief(mu, new_var), UpdateInfo(lambda: (_as_matrix(C), ew))
        mu_s, var_s, C_s, _ = self._step(belief, Hw, ew, stiff=True)
        check_step([mu_s, C_s], positive=var_s)
        safe = DiagonalBelief(mu_s, var_s)
        if mu.dim() > 1:  # a stack: the hypotheses whose plain step was fine keep it (as each would alone)
            a = trace - m
            keep = torch.isfinite(mu).all(-1) & (new_var > 0).all(-1) & torch.isfinite(new_var).all(-1) & (a <= limit)
            if info is not None:
                keep &= info == 0
            safe = merge_hypotheses(keep, DiagonalBelief(mu, new_var), safe)
            C_s = torch.where(keep[..., None, None], C, C_s)
        return safe, UpdateInfo(lambda: (_as_matrix(C_s), ew))

    def _step(self, belief, Hw, ew, stiff, outs=(None, None)):
        """The update's arithmetic: ``(μ', v', C, info)`` (``C``, ``info`` None for VD with the paper's
        mean), in the plain or the stiff forms (class docstring), unchecked. ``outs``: tensors shaped
        like the mean and the variances that ``μ'`` and ``v'`` may be written into (None: new ones)."""
        mu, v = belief
        mean_out, var_out = outs
        C = info = None
        one_row = Hw.dim() == 2 and Hw.shape[0] == 1  # one belief, one row: the scalar paths
        if self.projection == "fd" or self.vd_mean == "exact":
            C, Z, info = _innovation(Hw, v, ew, stiff)
            if C.dim() == 0:  # the scalar path: C = √S
                mu = _addcmul(mu, Z[0], ew[0] / C, mean_out)
            elif Hw.shape[-2] == 1:
                mu = _addcmul(mu, Z[..., 0, :], (ew[..., 0] / C[..., 0, 0])[..., None], mean_out)
            else:
                z = torch.linalg.solve_triangular(C, ew.unsqueeze(-1), upper=False)
                mu = _add(mu, (Z.mT @ z)[..., 0], mean_out)
        if self.projection == "fd":
            if one_row and not stiff:
                new_var = _addcmul(v, Z[0], Z[0], var_out, value=-1.0)  # v − z², one pass
            else:
                new_var = _sub(v, (Z * Z).sum(-2), var_out)
            if stiff:
                new_var = _excluded_fd_variance(Hw, v, new_var, Z)
        else:
            # 1/v' = 1/v + colsum(Hw ⊙ Hw), in place on one array
            new_var = torch.reciprocal(v) if var_out is None else torch.reciprocal(v, out=var_out)
            if one_row:
                new_var.addcmul_(Hw[0], Hw[0])
            else:
                new_var.add_((Hw * Hw).sum(-2))
            new_var.reciprocal_()
            if self.vd_mean == "paper":
                Hte = Hw[0] * ew[0] if one_row else (Hw.T @ ew if Hw.dim() == 2 else (Hw.mT @ ew.unsqueeze(-1))[..., 0])
                mu = _addcmul(mu, new_var, Hte, mean_out)
        return mu, new_var, C, info

    def quadratic_form(self, belief, J):
        return (J * belief.var[..., None, None, :]) @ J.mT

    def quadratic_diagonal(self, belief, J):
        return (J * J * belief.var[..., None, None, :]).sum(-1)

    def marginal_variance(self, belief):
        return belief.var.clone()

    def covariance(self, belief):
        return torch.diag_embed(belief.var)

    def sample(self, belief, n_samples, generator):
        eps = torch.randn(n_samples, belief.mean.shape[-1], generator=generator,
                          device=belief.mean.device, dtype=belief.mean.dtype)
        return belief.mean + eps * belief.var.sqrt()

    def moment_match(self, belief, log_weights):
        """``μ̄ = Σ_k w_k μ_k``, ``v̄ = Σ_k w_k (v_k + (μ_k − μ̄)²)``: the diagonal of the mixture's
        covariance (the KL projection onto diagonal Gaussians; RL-MMPR, thesis §3.3.2)."""
        w = torch.softmax(log_weights, dim=0)
        mean = w @ belief.mean
        d = belief.mean - mean
        return DiagonalBelief(mean, w @ (belief.var + d * d))
