"""Likelihoods (the *likelihood* axis, M.1): moment-matched linear-Gaussian observations.

Every likelihood turns the model output ``f = h(μ⁻, x)`` (outputs or logits, ``(n, C)``), its
Jacobian ``J = ∂f/∂θ`` (``(n, C, P)``) and the target into a **whitened pseudo-observation**
``(Hw, ew)`` with unit noise: the linearised model ``A T(y) ≈ A ŷ + A H (θ − μ⁻) + N(0, I)`` with
``AᵀA = R⁺`` (spec/diagonal-ekf.md §2.3, spec/lofi.md §3). Every posterior structure then applies
one update, ``Hw ∈ R^{m×P}, ew ∈ R^m``, whatever the likelihood; a weight ``w`` (``sample_weight``,
or later a robust weight) scales ``R`` by ``1/w``, i.e. ``Hw, ew`` by ``√w``.

The canonical-link families use ``H = R J`` (the derivative of the mean is the variance), so:

=============  ====================  ============================  =====================================
family         mean ``ŷ``            ``Hw``                        ``ew``
=============  ====================  ============================  =====================================
Gaussian       ``f``                 ``J / √r``                    ``(y − f) / √r``
Bernoulli      ``p = σ(f)``          ``√(p(1−p)) J``               ``(y − p) / √(p(1−p))``
Categorical    ``p = softmax(f)``    ``Sᵀ J``, ``S = (I − p1ᵀ)D^½`` ``e / √p`` (any solution of S ẽ = e)
Poisson        ``λ = exp(f)``        ``√λ J``                      ``(y − λ) / √λ``
=============  ====================  ============================  =====================================

Categorical (spec/lofi.md §3, option d): ``S Sᵀ = diag(p) − ppᵀ = R``, so ``HwᵀHw = Jᵀ R J`` (the
Fisher / GGN) and ``Hwᵀ ew = Jᵀ S ẽ = Jᵀ e = Hᵀ R⁺ e`` because ``1ᵀe = 0``: the exact pseudo-inverse
update, without ever inverting the singular ``R``. The innovation covariance ``I + Hw Σ Hwᵀ`` is
always positive definite.
"""

from __future__ import annotations

import math

import torch


def _tiny(dtype):
    return torch.finfo(dtype).eps ** 2


class Likelihood:
    """Base class. Subclasses implement :meth:`mean` and :meth:`whiten`."""

    #: model outputs beyond this magnitude mean the filter diverged (``None``: no bound); the engine
    #: raises :class:`~skfilter.exceptions.FilterStepError` with :attr:`divergence_advice`
    max_abs_output = None

    #: what to change when outputs exceed :attr:`max_abs_output`
    divergence_advice = ""

    #: whether :meth:`whiten` is plain arithmetic that also runs on NumPy views of CPU tensors
    #: (state included), which the engine then uses (:mod:`skfilter._array_ops`)
    host_arrays = False

    def mean(self, f: torch.Tensor) -> torch.Tensor:
        """Mean of the target given model output ``f`` (plug-in)."""
        raise NotImplementedError

    def whiten(self, f, J, Y, state=None):
        """Whitened pseudo-observation ``(Hw (..., n, m, P), ew (..., n, m))`` (see module docstring);
        ``f (..., n, C)``, ``J (..., n, C, P)`` may carry hypotheses axes."""
        raise NotImplementedError

    def noise_covariance(self, f, state=None):
        """``R`` of each row in target units, ``(..., n, C, C)``: with the prior predictive
        ``J Σ⁻ Jᵀ`` it gives ``S = J Σ⁻ Jᵀ + R``, which weighting functions see."""
        raise NotImplementedError

    def log_det_whitening(self, f, state=None):
        """``log|det A|`` of each row's whitening ``A`` (``AᵀA = R⁺``), ``(..., n)``; with the
        structure's :class:`~skfilter.posteriors.UpdateInfo` it gives the log predictive density."""
        raise NotImplementedError

    # observation-noise state (only the Gaussian likelihood has one)
    def initial_state(self, n_outputs, device, dtype):
        return None

    def next_state(self, state, f, Y, w):
        return state


class Gaussian(Likelihood):
    """Gaussian likelihood ``y ~ N(h(θ, x), diag(r))``.

    Parameters
    ----------
    obs_variance : float, array of shape (C,), or 'adaptive'
        Fixed observation variance(s), or ``'adaptive'`` for the online estimate of
        spec/lofi.md §2.9 (C.2): ``r̂_t = (1 − ε_t) r̂_{t−1} + ε_t mean_c (y_c − ŷ_c)²`` with
        ``ε_t = max(eps_min, w_t / Σ_{s≤t} w_s)`` for a row with ``w_t > 0`` (``1/t`` without weights; a zero-weight row leaves ``r̂`` unchanged), using the
        prior-predictive residual, floored at ``min_variance``; ``r̂_t`` is then used for the update
        of step ``t`` (so ``r̂_0`` is irrelevant, as in the paper).
    """

    def __init__(self, obs_variance=1.0, eps_min=0.0, min_variance=1e-6):
        self.obs_variance = obs_variance
        self.adaptive = isinstance(obs_variance, str)
        self.eps_min = float(eps_min)
        self.min_variance = float(min_variance)

    def initial_state(self, n_outputs, device, dtype):
        """``{'r': (C,) variances, 'weight': Σ w, 'scale': (C, 1) r^{−1/2}}`` (the whitening factor,
        kept with ``r`` so that a fixed noise computes it once)."""
        if self.adaptive:
            r = torch.ones(n_outputs, device=device, dtype=dtype)
        else:
            r = torch.as_tensor(self.obs_variance, device=device, dtype=dtype).reshape(-1)
            r = r.expand(n_outputs).clone() if r.numel() == 1 else r.clone()
        return {"r": r, "weight": torch.zeros((), device=device, dtype=dtype), "scale": r.rsqrt()[..., None]}

    def next_state(self, state, f, Y, w):
        """Online estimate C.2 (eq. 66, mean over outputs as the reference code); fixed r: unchanged.

        The ``n`` rows of a step are folded in at once: with ``ε_i`` the step size of row ``i`` and
        ``d_i`` its mean squared prior-predictive residual, the recursion
        ``r_i = (1 − ε_i) r_{i−1} + ε_i d_i`` unrolls to
        ``r_n = Π_i (1 − ε_i) r_0 + Σ_i ε_i d_i Π_{j>i} (1 − ε_j)`` (suffix products, no division),
        then floored at ``min_variance`` (one floor per step; with one row per step, the default,
        this is the row-by-row recursion exactly).
        """
        if not self.adaptive:
            return state
        r, total = state["r"], state["weight"]
        resid2 = ((Y - f) ** 2).mean(dim=-1)  # (..., n)
        n = resid2.shape[-1]
        w = torch.ones(n, dtype=r.dtype, device=r.device) if w is None else w
        # rows on the last axis; weights (n,) or, from a weighting stage over hypotheses, (..., n)
        totals = total[..., None] + torch.cumsum(w, -1)
        eps = torch.where(totals > 0, w / totals.clamp_min(_tiny(r.dtype)), torch.zeros_like(totals))
        if self.eps_min > 0:  # the floor applies to rows that count (w > 0) only
            eps = torch.where(w > 0, eps.clamp(min=self.eps_min), eps)
        if n == 1:
            r = (1 - eps) * r + eps * resid2
        else:
            keep = torch.flip(torch.cumprod(torch.flip(1 - eps, (-1,)), -1), (-1,))  # Π_{j≥i} (1 − ε_j)
            after = torch.cat([keep[..., 1:], torch.ones_like(keep[..., :1])], -1)  # Π_{j>i} (1 − ε_j)
            r = keep[..., :1] * r + ((eps * after) * resid2).sum(-1, keepdim=True)
        r = r.clamp_min(self.min_variance)
        return {"r": r, "weight": totals[..., -1], "scale": r.rsqrt()[..., None]}

    def mean(self, f):
        return f

    host_arrays = True

    def whiten(self, f, J, Y, state):
        s = state["scale"]  # (..., C, 1): r^{−1/2}, kept with r by initial_state/next_state
        if s.ndim > 2:  # one noise state per hypothesis: broadcast over the rows
            s = s[..., None, :, :]
        return J * s, (Y - f) * s[..., 0]

    def noise_covariance(self, f, state):
        return torch.diag_embed(state["r"]).unsqueeze(-3).expand(*f.shape, f.shape[-1])

    def log_det_whitening(self, f, state):
        return (-0.5 * torch.log(state["r"]).sum(-1, keepdim=True)).expand(f.shape[:-1])

    def aleatoric_variance(self, f, state):
        """Observation-noise variance of each output, ``(n, C)``."""
        return state["r"].expand_as(f)


_LOGIT_ADVICE = ("Logits this large give probabilities of exactly 0 and 1: the filter diverged (its weights "
                 "grow without bound). Use prior_variance='auto' (the default, which scales the prior to the "
                 "features), standardise the features (sklearn.preprocessing.StandardScaler), or lower "
                 "prior_variance.")


class Bernoulli(Likelihood):
    """Bernoulli likelihood with a single logit: ``y ~ Bern(σ(f))``, ``R = p(1 − p)``, ``H = R J``."""

    #: ``σ(±40) = 1 − 4e−18``: logits of magnitude 10⁴ are never what data imply
    max_abs_output = 1e4
    divergence_advice = _LOGIT_ADVICE

    def mean(self, f):
        return torch.sigmoid(f)

    def whiten(self, f, J, Y, state=None):
        p = torch.sigmoid(f)
        v = (p * (1 - p)).clamp_min(_tiny(f.dtype))
        sv = v.sqrt()
        return J * sv.unsqueeze(-1), (Y - p) / sv

    def _variance(self, f):
        p = torch.sigmoid(f)
        return (p * (1 - p)).clamp_min(_tiny(f.dtype))

    def noise_covariance(self, f, state=None):
        return self._variance(f).unsqueeze(-1)

    def log_det_whitening(self, f, state=None):
        return -0.5 * torch.log(self._variance(f))[..., 0]


class Categorical(Likelihood):
    """Categorical likelihood over ``C`` logits with the exact logit-space update (module docstring)."""

    max_abs_output = 1e4
    divergence_advice = _LOGIT_ADVICE

    def mean(self, f):
        return torch.softmax(f, dim=-1)

    def whiten(self, f, J, Y, state=None):
        p = torch.softmax(f, dim=-1)
        sp = p.clamp_min(_tiny(f.dtype)).sqrt()
        pJ = torch.einsum("...nc,...ncp->...np", p, J)  # pᵀJ for each row
        Hw = sp.unsqueeze(-1) * (J - pJ.unsqueeze(-2))
        return Hw, (Y - p) / sp

    def noise_covariance(self, f, state=None):
        """``diag(p) − p pᵀ`` (singular: ``1ᵀ R = 0``)."""
        p = torch.softmax(f, dim=-1)
        return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)

    def log_det_whitening(self, f, state=None):
        """``−½ Σ_c log p_c``: the whitening ``ẽ = e / √p`` (``R`` itself is singular, so the density
        is that of the whitened residual)."""
        p = torch.softmax(f, dim=-1).clamp_min(_tiny(f.dtype))
        return -0.5 * torch.log(p).sum(-1)


class Poisson(Likelihood):
    """Poisson likelihood with log link: ``y ~ Poisson(exp f)``, ``R = λ``, ``H = λ J``."""

    #: log-rates are clipped here before exponentiation to keep ``λ`` finite
    max_log_rate = 30.0

    def mean(self, f):
        return torch.exp(f.clamp(max=self.max_log_rate))

    def whiten(self, f, J, Y, state=None):
        lam = self.mean(f).clamp_min(_tiny(f.dtype))
        sl = lam.sqrt()
        return J * sl.unsqueeze(-1), (Y - lam) / sl

    def aleatoric_variance(self, f, state):
        return self.mean(f)

    def noise_covariance(self, f, state=None):
        return torch.diag_embed(self.mean(f).clamp_min(_tiny(f.dtype)))

    def log_det_whitening(self, f, state=None):
        return -0.5 * torch.log(self.mean(f).clamp_min(_tiny(f.dtype))).sum(-1)


def probit_probabilities(f: torch.Tensor, var: torch.Tensor, binary: bool) -> torch.Tensor:
    """Generalised probit predictive (spec/lofi.md §2.8 B.2, eq. 64).

    ``p ≈ softmax(f_c / √(1 + π v_c / 8))`` with ``v_c = [F Σ Fᵀ]_cc``; for one logit
    ``p₁ = σ(f / √(1 + π v / 8))``. Returns class probabilities ``(n, K)`` (``K = 2`` if ``binary``).
    """
    z = f / torch.sqrt(1.0 + (math.pi / 8.0) * var)
    if binary:
        p1 = torch.sigmoid(z[:, :1])
        return torch.cat([1 - p1, p1], dim=1)
    return torch.softmax(z, dim=-1)
