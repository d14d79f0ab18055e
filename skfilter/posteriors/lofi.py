"""LoFi: diagonal-plus-low-rank precision (spec/lofi.md §2.1–§2.8, Chang et al. 2023).

The belief is ``N(μ, Σ)`` with precision ``Σ⁻¹ = Υ + W Wᵀ``: ``Υ`` diagonal (``'diagonal'``) or
``η I`` (``'spherical'``, App. F), ``W ∈ R^{P×L}``. Dense ``Σ`` is never formed; products with it
use Woodbury::

    Σ = Υ⁻¹ − Υ⁻¹ W M⁻¹ Wᵀ Υ⁻¹,     M = I_L + Wᵀ Υ⁻¹ W.

One step (:meth:`LowRankPrecision.propose`), with ``m`` whitened pseudo-observation rows ``Hw``:

1. inflation (App. E, optional; applied to the previous posterior just before the predict step);
2. predict, exact in DLR form (Alg. 2, eqs. 15, 19, 25)::

       Υ⁻ = (γ² Υ⁻¹ + q I)⁻¹,   W⁻ = γ Υ⁻ Υ⁻¹ W chol(C),   C = (I_L + q Wᵀ Υ⁻ Υ⁻¹ W)⁻¹

   (spherical, Alg. 6, eqs. 108–109: ``η⁻ = η/(γ² + qη)``, ``λ⁻² = γ²λ²/((γ² + qη)(γ² + qη + qλ²))``);
3. update (Alg. 3): ``W̃ = [W⁻, Hwᵀ]`` (``P × (L + m)``); the mean from the *untruncated*
   rank-``(L+m)`` posterior, eq. 36 with its minus sign: with ``b = Hwᵀ ew`` (``= Hᵀ R⁻¹ e``),
   ``μ = μ⁻ + Υ⁻⁻¹ b − Υ⁻⁻¹ W̃ G W̃ᵀ Υ⁻⁻¹ b``, ``G = (I + W̃ᵀ Υ⁻⁻¹ W̃)⁻¹`` (Cholesky solve);
4. truncation by a thin SVD ``W̃ = Ũ Λ̃ Ṽᵀ``: ``W = (ŨΛ̃)[:, :L]``; diagonal LoFi adds the dropped
   mass to the diagonal, ``Υ = Υ⁻ + rowsum((ŨΛ̃)[:, L:]²)`` (eq. 39), so ``diag(Σ⁻¹)`` is exact;
   spherical LoFi drops it (F.5.1). Spherical LoFi may instead use the orthogonal-projection
   incremental SVD (``svd='orth'``, Alg. 8, F.5.2).

With ``L = 0`` the structure is VD-EKF with the exact mean (eqs. 46–52); with ``L ≥ P`` (and no
truncation ever happening) it is the full EKF.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._array_ops import as_numpy, as_tensor, ops_for
from ..exceptions import FilterStepError
from ._base import Posterior, cholesky_or_raise

VARIANTS = ("diagonal", "spherical")
INFLATIONS = (None, "bayesian", "simple", "hybrid")
SVD_METHODS = ("full", "orth")


def _cholesky_solve(Lc, B):
    return torch.cholesky_solve(B, Lc, upper=False)


def lofi_update(ops, mu_p, ups_p, WT_p, Hw, ew, rank, variant="diagonal", truncate=True):
    """One LoFi update (Alg. 3 / Alg. 7) of the predicted belief ``N(μ⁻, (Υ⁻ + W⁻W⁻ᵀ)⁻¹)`` with the
    ``m`` whitened rows ``Hw (m, P)``, ``ew (m,)``; arrays of the backend ``ops``
    (:mod:`~skfilter._array_ops`).

    Works on ``W̃ᵀ = [W⁻ᵀ; Hw]`` (``k = L + m`` contiguous rows of length ``P``):

    * mean from the untruncated rank-``k`` posterior, eq. 36 with its minus sign: with
      ``b = Hwᵀ ew`` and ``G = (I + W̃ᵀ Υ⁻⁻¹ W̃)⁻¹``,
      ``μ = μ⁻ + Υ⁻⁻¹ b − Υ⁻⁻¹ W̃ G W̃ᵀ Υ⁻⁻¹ b = μ⁻ + (Υ⁻⁻¹ W̃) c``, ``c = [0; ew] − G (W̃ᵀ Υ⁻⁻¹ W̃)[:, L:] ew``
      — one ``k × k`` product ``W̃ᵀ Υ⁻⁻¹ W̃`` serves both ``G`` and ``W̃ᵀ Υ⁻⁻¹ b``; ``G`` by Cholesky;
    * truncation by the thin SVD ``W̃ = Ũ Λ̃ Ṽᵀ`` (eq. 37), computed as ``(ŨΛ̃)ᵀ = Ṽᵀ W̃ᵀ`` from the
      eigenvectors ``Ṽ`` of the ``k × k`` Gram matrix ``W̃ᵀ W̃`` (for spherical LoFi ``η`` times the
      product above): rows by decreasing singular value, no division by singular values (zero rows
      at start-up are harmless), and since ``Ṽ`` is orthogonal ``rowsum((ŨΛ̃)²) = rowsum(W̃²)`` to
      rounding, so the diagonal correction of eq. 39 is exact. The kept subspace agrees with a
      ``P × k`` SVD except at (near-)ties of singular values, where either is valid;
    * ``W = (ŨΛ̃)[:, :L]``; diagonal LoFi adds the dropped mass to ``Υ`` (eq. 39), spherical LoFi
      drops it (F.5.1).

    Returns ``(μ, Υ, Wᵀ)`` (``Υ, Wᵀ`` None unless ``truncate``), after one check that every
    result is finite and ``G⁻¹`` positive definite (:class:`~skfilter.exceptions.FilterStepError`
    otherwise). ``Υ`` stays positive by construction, so only finiteness is checked; ``W`` is not
    summed: a non-finite ``W̃`` makes the eigendecomposition fail or ``Ṽ``, hence the dropped mass
    in ``Υ`` and, through ``G``, the mean non-finite.
    """
    L = rank
    k = L + Hw.shape[0]
    # R = [(Υ⁻¹ W̃)ᵀ; W̃ᵀ], (2k, P): one product W̃ᵀ Rᵀ gives W̃ᵀ Υ⁻¹ W̃ and the Gram matrix W̃ᵀ W̃
    gram_needed = truncate and variant == "diagonal"
    R = ops.empty((2 * k if gram_needed else k, WT_p.shape[1]), like=Hw)
    WtT = R[k:] if gram_needed else ops.empty((k, WT_p.shape[1]), like=Hw)
    WtT[:L] = WT_p
    WtT[L:] = Hw
    R[:k] = WtT * (1.0 / ups_p)
    UWT = R[:k]  # (Υ⁻¹ W̃)ᵀ; its last m rows are Υ⁻¹ Hwᵀ
    ZG = WtT @ R.T
    Z = ZG[:, :k]  # W̃ᵀ Υ⁻¹ W̃, (k, k)
    rhs = Z[:, L:] @ ew  # W̃ᵀ Υ⁻¹ b
    if gram_needed:
        gram = ZG[:, k:]
    elif truncate:  # spherical: W̃ᵀ W̃ = η W̃ᵀ Υ⁻¹ W̃
        gram = Z * ups_p
    Z = Z + ops.eye(k, like=Hw)
    sol, ok = ops.spd_solve(Z, rhs, "LoFi update system")
    coef = -sol
    coef[L:] += ew
    mu = mu_p + UWT.T @ coef
    if not truncate:
        ops.check_finite([mu], ok, "LoFi update system")
        return mu, None, None, ok
    V = ops.eigh_descending(gram, "LoFi truncation (eigh of W̃ᵀW̃)")
    UST = V.T @ WtT  # (Ũ Λ̃)ᵀ
    WT_new = UST[:L]
    if variant == "diagonal":
        dropped = UST[L:]
        ups_new = ups_p + (dropped[0] * dropped[0] if dropped.shape[0] == 1 else (dropped * dropped).sum(0))
    else:
        ups_new = ups_p
    ops.check_finite([mu, ups_new], ok, "LoFi update system")
    return mu, ups_new, WT_new, ok


def lowrank_quadratic_form(ops, J, ups, WT):
    """``J Σ Jᵀ`` (``(n, C, C)``) for ``Σ = (Υ + W Wᵀ)⁻¹``, ``J (n, C, P)``, ``WT = Wᵀ (L, P)``, by
    Woodbury (B.1, eq. 61): ``J Υ⁻¹ Jᵀ − A M⁻¹ Aᵀ`` with ``A = J Υ⁻¹ W``, ``M = I + Wᵀ Υ⁻¹ W``
    (Cholesky). Returns ``(quad, ok)`` (``ok`` None when ``L = 0``), arrays of the backend ``ops``."""
    n, C, P = J.shape
    JU = J * (1.0 / ups)  # J Υ⁻¹
    quad = JU @ J.swapaxes(1, 2)
    L = WT.shape[0]
    if L == 0:
        return quad, None
    UWT = WT * (1.0 / ups)
    M = WT @ UWT.T + ops.eye(L, like=WT)
    A = JU.reshape(n * C, P) @ WT.T  # (J Υ⁻¹ W), (nC, L)
    X, ok = ops.spd_solve(M, A.T, "LoFi low-rank system")  # M⁻¹ Aᵀ, (L, nC)
    return quad - A.reshape(n, C, L) @ X.T.reshape(n, C, L).swapaxes(1, 2), ok


class LowRankPrecision(Posterior):
    """LoFi belief ``N(μ, (Υ + W Wᵀ)⁻¹)`` (module docstring).

    Parameters
    ----------
    mean : tensor (P,)
        Prior mean ``μ₀``.
    prior_variance : float
        ``η₀⁻¹``: the prior is ``N(μ₀, η₀⁻¹ I)``, ``Υ₀ = η₀ I``, ``W₀ = 0``.
    rank : int
        ``L ≥ 0``.
    variant : {'diagonal', 'spherical'}
    inflation : {None, 'bayesian', 'simple', 'hybrid'}
        Covariance inflation of App. E (spherical forms F.6) with factor ``inflation_factor`` (α).
    inflation_factor : float
        ``α ≥ 0``; ``α = 0`` is the identity.
    svd : {'full', 'orth'}
        Truncation: thin SVD of ``W̃`` or (spherical only) the orthogonal-projection update.
    steady_state : bool
        Spherical only: the variance-preserving dynamics of F.2, ``q = (1 − γ²)/η₀`` (eq. 95),
        replacing the given ``q``; then ``η`` stays ``η₀``.
    seed : int
        Seeds the random column order of ``svd='orth'`` (Alg. 8).
    cpu_backend : {'numpy', 'torch'}
        Array library of the update for CPU tensors (:mod:`~skfilter._array_ops`):
        NumPy views (lower per-operation overhead, the default) or torch. GPU tensors always use torch.
    """

    def __init__(self, mean, prior_variance, rank=10, variant="diagonal", inflation=None,
                 inflation_factor=0.0, svd="full", steady_state=False, seed=0, cpu_backend="numpy"):
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}.")
        if inflation not in INFLATIONS:
            raise ValueError(f"inflation must be one of {INFLATIONS}, got {inflation!r}.")
        if svd not in SVD_METHODS:
            raise ValueError(f"svd must be one of {SVD_METHODS}, got {svd!r}.")
        if svd == "orth" and variant != "spherical":
            raise ValueError("svd='orth' needs orthonormal columns of W: use variant='spherical'.")
        if steady_state and variant != "spherical":
            raise ValueError("steady_state applies to variant='spherical' only.")
        if cpu_backend not in ("numpy", "torch"):
            raise ValueError(f"cpu_backend must be 'numpy' or 'torch', got {cpu_backend!r}.")
        self.cpu_backend = cpu_backend
        self.variant, self.inflation, self.svd = variant, inflation, svd
        self.inflation_factor = float(inflation_factor)
        self.steady_state = bool(steady_state)
        self.rank = int(rank)
        P = mean.shape[0]
        eta0 = 1.0 / float(prior_variance)
        self.eta0 = eta0
        self.mean = mean.clone()
        opts = {"device": mean.device, "dtype": mean.dtype}
        # diagonal: Υ as a vector; spherical: Υ = η I kept as a length-1 vector
        self.ups = torch.full((P,) if variant == "diagonal" else (1,), eta0, **opts)
        # W is stored transposed, (L, P) row-major: its Gram products and the stacking of new rows
        # (eq. 32) then work on contiguous rows; ``W`` is the (P, L) view.
        self.WT = torch.zeros(self.rank, P, **opts)
        # prior-predictive precision η_t (eq. 76) and mean Γ_t μ₀ (eq. 77), for inflation
        self.eta_pp = eta0
        self.prior_mean = mean.clone() if inflation == "bayesian" else None
        self._seed = int(seed)
        self.n_steps = 0

    @property
    def host_arrays(self) -> bool:
        return self.cpu_backend == "numpy" and self.mean.device.type == "cpu"

    @property
    def W(self) -> torch.Tensor:
        """The low-rank factor ``W`` (``(P, L)``, a view of the stored ``WT``)."""
        return self.WT.T

    @W.setter
    def W(self, value: torch.Tensor):
        self.WT = value.T.contiguous()

    # -- helpers -------------------------------------------------------------------------------
    def _q(self, gamma, q):
        return (1.0 - gamma * gamma) / self.eta0 if self.steady_state else q

    def _dlr_solve(self, ups, WT, v):
        """``(Υ + W Wᵀ)⁻¹ v`` by Woodbury (``WT = Wᵀ``, ``(L, P)``)."""
        ui = 1.0 / ups
        if WT.shape[0] == 0:
            return ui * v
        UWT = WT * ui
        M = WT @ UWT.T
        M.diagonal().add_(1.0)
        Lc = cholesky_or_raise(M, "LoFi low-rank system")
        return ui * v - UWT.T @ _cholesky_solve(Lc, (UWT @ v).unsqueeze(1)).squeeze(1)

    def _inflate(self, mu, ups, WT, eta_pp, m0):
        """App. E / F.6: the inflated posterior of step t−1 (identity for α = 0 or None)."""
        a = self.inflation_factor
        if self.inflation is None or a == 0.0:
            return mu, ups, WT
        WT = WT / math.sqrt(1.0 + a)
        if self.variant == "diagonal":
            if self.inflation == "simple":
                ups = ups / (1.0 + a)
            else:  # bayesian and hybrid share the covariance (eqs. 80, 90)
                ups = ups / (1.0 + a) + (a / (1.0 + a)) * eta_pp
        elif self.inflation == "simple":  # spherical, eqs. 123–125
            ups = ups / (1.0 + a)
        if self.inflation == "bayesian":  # eq. 79 (η_{t−1} prior-predictive) / eq. 120 (η spherical)
            eta = eta_pp if self.variant == "diagonal" else ups
            mu = mu + (a * eta / (1.0 + a)) * self._dlr_solve(ups, WT, m0 - mu)
        return mu, ups, WT

    def _predict(self, ups, WT, gamma, q):
        """Exact DLR predict (Alg. 2 / Alg. 6): returns ``(Υ⁻, W⁻ᵀ)`` (``WT = Wᵀ``, ``(L, P)``)."""
        if gamma == 1.0 and not q:
            return ups, WT
        if self.variant == "spherical":
            eta = ups
            denom = gamma * gamma + q * eta
            if WT.shape[0]:
                lam2 = (WT * WT).sum(1)
                scale = torch.sqrt(gamma * gamma / (denom * (denom + q * lam2)))
                WT = WT * scale[:, None]
            return eta / denom, WT
        if not q:
            return ups / (gamma * gamma), WT / gamma
        ups_pred = 1.0 / (gamma * gamma / ups + q)
        if WT.shape[0] == 0 or gamma == 0.0:
            return ups_pred, WT * 0.0
        DWT = WT * (ups_pred / ups)
        Mc = q * (WT @ DWT.T)
        Mc.diagonal().add_(1.0)  # C⁻¹ = I + q Wᵀ Υ⁻ Υ⁻¹ W
        Lc = cholesky_or_raise(Mc, "LoFi predict system")
        # W⁻ = γ D W chol(C); with C⁻¹ = L Lᵀ, chol(C) may be taken as L⁻ᵀ (only W Wᵀ matters)
        return ups_pred, gamma * torch.linalg.solve_triangular(Lc, DWT, upper=False)

    def _predicted(self, gamma, q):
        """The predicted belief ``(μ⁻, Υ⁻, W⁻)`` after inflation and dynamics."""
        q = self._q(gamma, q)
        mu, ups, WT = self._inflate(self.mean, self.ups, self.WT, self.eta_pp, self.prior_mean)
        ups_p, WT_p = self._predict(ups, WT, gamma, q)
        mu_p = mu * gamma if gamma != 1.0 else mu
        return mu_p, ups_p, WT_p

    def _ups_vec(self, ups):
        return ups.expand(self.n_params) if ups.numel() == 1 else ups

    def _orth_update(self, W, G, step):
        """Alg. 8: orthogonal-projection incremental SVD of ``[W, G]`` (spherical, ``W = U diag(λ)``).

        Columns of ``G`` are taken in a random order drawn from ``(seed, step)`` (so a failed,
        uncommitted step does not change later ones). A residual ``v`` below ``√ε ‖g‖`` is rounding
        noise of a column already in ``span(U)`` and never enters the basis.
        """
        if W.shape[1] == 0:
            return W
        lam = W.norm(dim=0)
        U = W / lam.clamp_min(torch.finfo(W.dtype).tiny)
        U = torch.where(lam > 0, U, torch.zeros_like(U))
        gen = torch.Generator().manual_seed(self._seed * 1_000_003 + step)
        order = torch.randperm(G.shape[1], generator=gen).tolist()
        rel_tol = math.sqrt(torch.finfo(W.dtype).eps)
        for j in order:
            g = G[:, j]
            v = g - U @ (U.T @ g)
            nv, ng = v.norm(), g.norm()
            k = int(torch.argmin(lam))
            if bool((nv > lam[k]) & (nv > rel_tol * ng)):
                U = U.clone()
                lam = lam.clone()
                U[:, k] = v / nv
                lam[k] = nv
        return U * lam

    # -- the step --------------------------------------------------------------------------------
    def propose(self, Hw, ew, gamma=1.0, q=0.0, J=None):
        """Predict (inflation and dynamics, in torch), then the update of :func:`lofi_update` on
        the backend of :func:`~skfilter._array_ops.ops_for`: NumPy views of CPU tensors unless
        ``cpu_backend='torch'``. ``Hw``, ``ew`` may be NumPy arrays when :attr:`host_arrays`
        (the engine whitens on the host); the committed belief is always torch tensors."""
        q_eff = self._q(gamma, q)
        mu_p, ups_p, WT_p = self._predicted(gamma, q)
        quad = None
        if J is not None:
            quad = self._quad(J, ups_p, WT_p)
        ops = ops_for(Hw, prefer_numpy=self.cpu_backend == "numpy")
        full_svd = self.svd == "full"
        with ops.quiet():
            mu, ups_new, WT_new, ok = lofi_update(ops, *as_numpy(ops, mu_p, ups_p, WT_p, Hw, ew), rank=self.rank,
                                                  variant=self.variant, truncate=full_svd)
        mu, = as_tensor(ops, mu)
        if full_svd:
            ups_new, WT_new = as_tensor(ops, ups_new, WT_new)
        else:  # Alg. 8 on the torch tensors
            Hw_t = torch.from_numpy(Hw) if isinstance(Hw, np.ndarray) else Hw
            WT_new = self._orth_update(WT_p.T, Hw_t.T, self.n_steps).T.contiguous()
            ups_new = ups_p
        eta_pp = 1.0 / (gamma * gamma / self.eta_pp + q_eff)
        m0 = None if self.prior_mean is None else self.prior_mean * gamma
        return (mu, ups_new, WT_new, eta_pp, m0), quad

    def commit(self, pending):
        self.mean, self.ups, self.WT, self.eta_pp, self.prior_mean = pending
        self.n_steps += 1

    def predicted_mean(self, gamma=1.0, q=0.0):
        """``μ_{t|t−1}``: ``γ μ́`` with ``μ́`` the (Bayesian-)inflated mean (eq. 79), else ``γ μ``."""
        if self.inflation != "bayesian" or self.inflation_factor == 0.0:
            return super().predicted_mean(gamma, q)
        return self._predicted(gamma, q)[0]

    # -- predictive ------------------------------------------------------------------------------
    def _quad(self, J, ups, WT):
        """``J Σ Jᵀ`` for ``Σ = (Υ + W Wᵀ)⁻¹`` by Woodbury (B.1, eq. 61): ``(n, C, C)``, with
        ``A = J Υ⁻¹ W``: ``J Υ⁻¹ Jᵀ − A (I + Wᵀ Υ⁻¹ W)⁻¹ Aᵀ``. On the backend of ``J``
        (:mod:`skfilter._array_ops`); returns a tensor."""
        ops = ops_for(J, prefer_numpy=self.cpu_backend == "numpy")
        J_, ups_, WT_ = as_numpy(ops, J, ups, WT)
        with ops.quiet():
            quad, ok = lowrank_quadratic_form(ops, J_, ups_, WT_)
        if ok is not None and int(ok) != 0:
            raise FilterStepError("The LoFi low-rank system is not positive definite (the belief is degenerate).")
        return as_tensor(ops, quad)[0]

    def predictive_cov(self, J, gamma=1.0, q=0.0):
        _, ups, WT = self._predicted(gamma, q)
        return self._quad(J, ups, WT)

    def marginal_variance(self):
        ui = 1.0 / self._ups_vec(self.ups)
        if self.W.shape[1] == 0:
            return ui.clone()
        UW = ui[:, None] * self.W
        M = self.W.T @ UW
        M.diagonal().add_(1.0)
        Lc = cholesky_or_raise(M, "LoFi low-rank system")
        A = torch.linalg.solve_triangular(Lc, UW.T, upper=False)
        return ui - (A * A).sum(0)

    def precision(self):
        """Dense ``Υ + W Wᵀ`` (tests and small models)."""
        return torch.diag(self._ups_vec(self.ups)) + self.W @ self.W.T

    def covariance(self):
        return torch.linalg.inv(self.precision())

    def sample(self, n_samples, generator):
        """Exact DLR sampler (spec/lofi.md §2.8 item 2; L-RVGA Prop. 1).

        With ``M = I_L + Wᵀ Υ⁻¹ W`` and ``Lm = Υ⁻¹ W M⁻¹``: ``x ~ N(0, Υ⁻¹)``, ``ε ~ N(0, I_L)``,
        ``θ = μ + x − Lm (Wᵀ x) + Lm ε`` has covariance ``Υ⁻¹ − Υ⁻¹ W M⁻¹ Wᵀ Υ⁻¹ = (Υ + WWᵀ)⁻¹``.
        Cost ``O(PL² + L³)`` once, ``O(PL)`` per sample.
        """
        P, L = self.W.shape
        opts = {"device": self.mean.device, "dtype": self.mean.dtype}
        ui = 1.0 / self._ups_vec(self.ups)
        x = torch.randn(n_samples, P, generator=generator, **opts) * ui.sqrt()
        if L == 0:
            return self.mean + x
        UW = ui[:, None] * self.W
        M = self.W.T @ UW
        M.diagonal().add_(1.0)
        Lc = cholesky_or_raise(M, "LoFi low-rank system")
        Lm = torch.cholesky_solve(UW.T, Lc, upper=False).T  # Υ⁻¹ W M⁻¹ (M symmetric)
        eps = torch.randn(n_samples, L, generator=generator, **opts)
        return self.mean + x + (eps - x @ self.W) @ Lm.T

    def state_dict(self):
        out = {"mean": self.mean, "ups": self.ups, "W": self.W}  # W: a (P, L) view
        if self.prior_mean is not None:
            out["prior_mean"] = self.prior_mean
        return out

