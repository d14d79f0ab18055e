"""Likelihoods (the *likelihood* axis, M.1): moment-matched linear-Gaussian observations.

Every likelihood turns the model output ``f = h(μ⁻, x)`` (outputs or logits, ``(n, C)``), its
Jacobian ``J = ∂f/∂θ`` (``(n, C, P)``) and the target into a **whitened pseudo-observation**
``(Hw, ew)`` with unit noise: the linearised model ``A T(y) ≈ A ŷ + A H (θ − μ⁻) + N(0, I)`` with
``AᵀA = R⁺`` (Chang, Jones & Murphy 2022, §2.3; LoFi paper §3.2). Every posterior structure then applies
one update, ``Hw ∈ R^{m×P}, ew ∈ R^m``, whatever the likelihood; a weight ``w`` (``sample_weight``,
or later a robust weight) scales ``R`` by ``1/w``, i.e. ``Hw, ew`` by ``√w``.

The canonical-link families use ``H = R J`` (the derivative of the mean is the variance), so:

===========  ==================  ==============================  ====================================
family       mean ``ŷ``          ``Hw``                          ``ew``
===========  ==================  ==============================  ====================================
Gaussian     ``f``               ``J / √r``                      ``(y − f) / √r``
Bernoulli    ``p = σ(f)``        ``√(p(1−p)) J``                 ``(y − p) / √(p(1−p))``
Categorical  ``p = softmax(f)``  ``Sᵀ J``, ``S = (I − p1ᵀ)D^½``  ``e / √p`` (any solution of S ẽ = e)
Poisson      ``λ = exp(f)``      ``√λ J``                        ``(y − λ) / √λ``
===========  ==================  ==============================  ====================================

:class:`MomentMatchedCategorical` (not a canonical link) observes the class probabilities with
the Gaussian ``N(m, diag(m) − mmᵀ + εI)``: ``Hw = L⁻¹ G J``, ``ew = L⁻¹ (y − m)`` with ``LLᵀ = R``.

:class:`AssumedDensityCategorical` (the classifiers' default) is the Bernoulli / categorical
likelihood with the assumed-density-filtering (moment-matching) update: the same whitened form, with
a site ``Λ`` that depends on the row's prior predictive ``J Σ⁻ Jᵀ`` (``needs_predictive``); it equals
the canonical-link update above when ``J Σ⁻ Jᵀ = 0``.

Categorical (an exact square root, consistent with the LoFi paper's footnote 2):
``S Sᵀ = diag(p) − ppᵀ = R``, so ``HwᵀHw = Jᵀ R J`` (the Fisher / GGN) and
``Hwᵀ ew = Jᵀ S ẽ = Jᵀ e = Hᵀ R⁺ e`` because ``1ᵀe = 0``: the exact pseudo-inverse update, without
ever inverting the singular ``R``. The innovation covariance ``I + Hw Σ Hwᵀ`` is always positive
definite.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.special import expit
import torch


def _tiny(dtype):
    return torch.finfo(dtype).eps ** 2


def _scaled_rows(J, s, out):
    """``J * s`` (``s`` broadcast over the last axis), into ``out`` if given (an array of ``J``'s
    kind)."""
    if out is None:
        return J * s
    if isinstance(J, np.ndarray):
        return np.multiply(J, s, out=out)
    return torch.mul(J, s, out=out)


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

    #: whether :meth:`whiten` needs the rows' prior predictive ``J Σ⁻ Jᵀ`` (``quad=``, ``(..., n, C, C)``),
    #: which the engine then computes before whitening
    needs_predictive = False

    def mean(self, f: torch.Tensor) -> torch.Tensor:
        """Mean of the target given model output ``f`` (plug-in)."""
        raise NotImplementedError

    def predictive_mean(self, f, quad, state=None):
        """``E[y | D]`` under the linearised prior predictive (outputs ``f``, ``quad = J Σ⁻ Jᵀ``), the
        centre of the residual a weighting function sees: :meth:`mean` ``(f)`` (the linearisation's)
        unless a likelihood's predictive says otherwise."""
        return self.mean(f)

    def whiten(self, f, J, Y, state=None, out=None):
        """Whitened pseudo-observation ``(Hw (..., n, m, P), ew (..., n, m))`` (see module docstring);
        ``f (..., n, C)``, ``J (..., n, C, P)`` may carry hypotheses axes.

        ``out``, if given, is an array of the same kind as ``J`` (a tensor, or a NumPy array on the
        host path) with ``Hw``'s shape and dtype that receives ``Hw`` instead of a new array (it may
        not share memory with ``J``); a caller that owns a buffer for a stream passes it at every
        step, so that no ``P``-sized array is allocated per step."""
        raise NotImplementedError

    #: whether :meth:`whitening_matrix` is implemented (the whitened rows are ``A J``); read through
    #: :func:`whitens_by_matrix`, which also asks that the class defining ``whiten`` define it
    whitens_by_matrix = False

    def whitening_matrix(self, f, Y, state=None, quad=None):
        """``(A (..., n, C, C), ew (..., n, C))`` with :meth:`whiten`'s rows ``Hw = A J`` (to
        rounding): the whitening as a small matrix, for an engine that forms products of ``J``
        before it knows ``A`` (:class:`~skfilter.posteriors.lofi.JacobianRows`). ``quad`` is the
        prior predictive ``J Σ⁻ Jᵀ`` for likelihoods that need it. Implemented where
        :attr:`whitens_by_matrix`."""
        raise NotImplementedError(f"{type(self).__name__} does not whiten by a matrix.")

    def noise_covariance(self, f, state=None):
        """``R`` of each row in target units, ``(..., n, C, C)``: with the prior predictive
        ``J Σ⁻ Jᵀ`` it gives ``S = J Σ⁻ Jᵀ + R``, which weighting functions see."""
        raise NotImplementedError

    def predictive_covariance(self, f, quad, state=None):
        """The linearised prior predictive covariance of ``y``, ``(..., n, C, C)``, from the model
        outputs' ``quad = J Σ⁻ Jᵀ``: ``G quad Gᵀ + R`` with ``G = ∂E[y | f]/∂f``. For the canonical
        links of the exponential-family likelihoods here ``G = R`` (``H = R J``, the rows the update
        uses), so ``S = R quad R + R``; the Gaussian overrides it with ``quad + R``."""
        R = self.noise_covariance(f, state)
        return R @ quad @ R + R

    def log_predictive(self, f, quad, Y, state=None, weights=None):
        """``log p(y | D)`` of each row under the linearised prior predictive, ``(..., n)``: the
        evidence a run-length mixture weighs its hypotheses with (thesis eqs. 3.32, 3.51).

        Default (Gaussian, Poisson): ``log N(y; E[y | f], S)`` with ``S`` from
        :meth:`predictive_covariance` — for the Gaussian likelihood exactly eq. 3.51. With robust
        ``weights`` ``W (..., n)`` the observation covariance is ``R / W²`` (the predictive of WoLF's
        weighted likelihood, thesis §4.7.4). The classifiers override it with
        the probability of the observed class under the probit predictive (weights unused)."""
        S = self.predictive_covariance(f, quad, state)
        if weights is not None:
            w2 = (weights * weights).to(S.dtype).clamp_min(_tiny(S.dtype))
            S = S + self.noise_covariance(f, state) * (1.0 / w2 - 1.0)[..., None, None]
        e = Y - self.mean(f)
        C = e.shape[-1]
        if C == 1:
            v = S[..., 0, 0].clamp_min(_tiny(S.dtype))
            return -0.5 * (e[..., 0] ** 2 / v + torch.log(v) + math.log(2 * math.pi))
        L = torch.linalg.cholesky(S)
        z = torch.linalg.solve_triangular(L, e.unsqueeze(-1), upper=False)[..., 0]
        logdet = 2 * torch.log(L.diagonal(dim1=-2, dim2=-1)).sum(-1)
        return -0.5 * ((z * z).sum(-1) + logdet + C * math.log(2 * math.pi))

    def log_det_whitening(self, f, state=None):
        """``log|det A|`` of each row's whitening ``A`` (``AᵀA = R⁺``), ``(..., n)``; with the
        structure's :class:`~skfilter.posteriors.UpdateInfo` it gives the log predictive density."""
        raise NotImplementedError

    # observation-noise state (only the Gaussian likelihood has one)
    def initial_state(self, n_outputs, device, dtype):
        return None

    def next_state(self, state, f, Y, w):
        return state


def robust_ewma_weight2(deviation, threshold):
    """``W² = c² / (c² + δ²)``: the IMQ weight of the outlier-robust EWMA (thesis §4.7.5,
    eq. 4.54) for a deviation ``δ`` of an observation from the current level,
    in units of the level. Works on tensors and arrays."""
    c2 = threshold * threshold
    return c2 / (c2 + deviation * deviation)


@functools.lru_cache(maxsize=64)
def robust_variance_consistency(threshold: float, n_outputs: int) -> float:
    """``κ = E[W² z] / E[W²]`` for ``z ~ χ²_C / C`` and ``W² = c² / (c² + (z − 1)²)``.

    The robust noise estimate moves ``r`` by ``ε W² (d / κ − r)`` for a mean squared residual
    ``d``; dividing ``d`` by ``κ`` makes the true variance its fixed point under Gaussian residuals
    (the weights down-weight large ``d`` and would otherwise bias ``r`` low, by 23 % for ``c = 4``,
    ``C = 1``). Computed once per ``(c, C)`` by quadrature."""
    from scipy import integrate, stats

    density = stats.chi2(n_outputs, scale=1.0 / n_outputs).pdf
    w2 = lambda z: robust_ewma_weight2(z - 1.0, threshold)  # noqa: E731
    num = integrate.quad(lambda z: w2(z) * z * density(z), 0, np.inf, limit=200)[0]
    den = integrate.quad(lambda z: w2(z) * density(z), 0, np.inf, limit=200)[0]
    return num / den


class Gaussian(Likelihood):
    """Gaussian likelihood ``y ~ N(h(θ, x), diag(r))``.

    Parameters
    ----------
    obs_variance : float, array of shape (C,), or 'adaptive'
        Fixed observation variance(s), or ``'adaptive'`` for the online estimate of
        the LoFi paper's App. C.2: ``r̂_t = (1 − ε_t) r̂_{t−1} + ε_t mean_c (y_c − ŷ_c)²`` with
        ``ε_t = max(min(eps_min · w_t, 1), w_t / Σ_{s≤t} w_s)`` for a row of weight ``w_t`` (``1/t``
        without weights; a zero-weight row leaves ``r̂`` unchanged, and a row a robust weighting
        discounts moves it in proportion: :mod:`skfilter.weighting`), using the
        prior-predictive residual, floored at ``min_variance``; ``r̂_t`` is then used for the update
        of step ``t`` (so ``r̂_0`` is irrelevant, as in the paper).
    robust_threshold : float or None
        Make the online estimate outlier-robust (WoLF-EWMA on the variance level, thesis §4.7.5):
        each row's step ``ε_t`` is multiplied by ``W² = c² / (c² + (d_t / r̂_{t−1} − 1)²)`` and its
        ``d_t`` divided by :func:`robust_variance_consistency` ``κ`` (consistent under Gaussian
        residuals). The influence of one residual on ``r̂``, ``ε W² d / κ``, then vanishes as
        ``d → ∞`` (instead of growing as ``ε d``): one outlier cannot hold the estimate up.
    residual_bound : float or None
        Bound the influence of one row on the estimate carried to later rows
        (``obs_variance='auto'``): there its mean squared residual ``d_t`` counts as
        ``min(d_t, b² r̂_{t−1})``, a winsorised (Huber-type) residual, so one row moves the carried
        ``r̂`` by a factor of at most ``1 + ε_t (b² − 1)``. The row's own update is still whitened
        with the estimate that includes its whole residual (C.2: ``r̂_t`` is used for step ``t``),
        which keeps a gross residual from moving the mean by more than ``~1/√ε_t`` standard
        deviations. A prior-predictive residual holds the epistemic variance ``J Σ⁻ Jᵀ`` besides
        the noise; at an input far from the data (``x = 1e5`` after rows in ``[−2, 2]``) that part
        is ~10¹⁰ times the noise, and without the bound one such row multiplied ``r̂`` (hence every
        later ±2σ band) by 10⁶–10⁹ for hundreds of rows. Unlike ``robust_threshold`` the influence
        does not vanish for large residuals, so a lasting rise of the noise is still followed (by up
        to ``×(1 + ε (b² − 1))`` per row). Under Gaussian residuals the bias is
        ``E[min(χ²₁, b²)] − 1`` (``−1.2e−4`` for ``b = 4``).
    """

    def __init__(self, obs_variance=1.0, eps_min=0.0, min_variance=1e-6, robust_threshold=None,
                 residual_bound=None):
        self.obs_variance = obs_variance
        self.adaptive = isinstance(obs_variance, str)
        self.eps_min = float(eps_min)
        self.min_variance = float(min_variance)
        self.robust_threshold = None if robust_threshold is None else float(robust_threshold)
        self.residual_bound = None if residual_bound is None else float(residual_bound)

    def initial_state(self, n_outputs, device, dtype):
        """``{'r': (C,) variances, 'weight': Σ w, 'scale': (C, 1) r^{−1/2}}`` (the whitening factor,
        kept with ``r`` so that a fixed noise computes it once; after a step with ``residual_bound``
        it whitens that step's rows with the unbounded estimate, see :meth:`next_state`)."""
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

        With ``residual_bound`` the recursion runs twice: with the residuals as they are, for
        ``'scale'`` (the whitening of this step's rows), and with ``d_i`` capped at ``b² r̂_{t−1}``,
        for ``'r'`` (the estimate later steps, the predictive and the weighting use). Where no row
        reaches the cap the two are the same.
        """
        if not self.adaptive:
            return state
        r, total = state["r"], state["weight"]
        r_prev = r
        resid2 = ((Y - f) ** 2).mean(dim=-1)  # (..., n)
        n = resid2.shape[-1]
        w = torch.ones(n, dtype=r.dtype, device=r.device) if w is None else w
        # rows on the last axis; weights (n,) or, from a weighting stage over hypotheses, (..., n)
        totals = total[..., None] + torch.cumsum(w, -1)
        eps = torch.where(totals > 0, w / totals.clamp_min(_tiny(r.dtype)), torch.zeros_like(totals))
        if self.eps_min > 0:  # the floor scales with the row's weight: ε ≥ ε_min·w (≤ 1)
            eps = torch.maximum(eps, (self.eps_min * w).clamp(max=1.0))
        if self.robust_threshold is not None:  # outlier-robust EWMA of the variance level
            c, C = self.robust_threshold, Y.shape[-1]
            z = resid2 / r.mean(-1, keepdim=True).clamp_min(_tiny(r.dtype))
            eps = eps * robust_ewma_weight2(z - 1.0, c)
            resid2 = resid2 / robust_variance_consistency(c, C)
        if n == 1:
            base, gain = (1 - eps) * r_prev, eps
        else:
            keep = torch.flip(torch.cumprod(torch.flip(1 - eps, (-1,)), -1), (-1,))  # Π_{j≥i} (1 − ε_j)
            after = torch.cat([keep[..., 1:], torch.ones_like(keep[..., :1])], -1)  # Π_{j>i} (1 − ε_j)
            base, gain = keep[..., :1] * r_prev, eps * after

        def fold(d):  # r_n above, for the squared row residuals d (..., n), floored
            r_n = base + gain * d if n == 1 else base + (gain * d).sum(-1, keepdim=True)
            return r_n.clamp_min(self.min_variance)

        r = fold(resid2)
        scale = r.rsqrt()[..., None]
        if self.residual_bound is not None:  # the carried estimate counts each row at most b² r̂_{t−1}
            level = r_prev if r_prev.shape[-1] == 1 else r_prev.mean(-1, keepdim=True)
            r = fold(torch.minimum(resid2, (self.residual_bound * self.residual_bound) * level))
        return {"r": r, "weight": totals[..., -1], "scale": scale}

    def mean(self, f):
        return f

    host_arrays = True

    def whiten(self, f, J, Y, state, out=None):
        s = state["scale"]  # (..., C, 1): the step's r^{−1/2}, kept with r by initial_state/next_state
        if s.ndim > 2:  # one noise state per hypothesis: broadcast over the rows
            s = s[..., None, :, :]
        return _scaled_rows(J, s, out), (Y - f) * s[..., 0]

    whitens_by_matrix = True

    def whitening_matrix(self, f, Y, state, quad=None):
        """``A = diag(r^{−1/2})`` for every row."""
        s = state["scale"]
        if s.ndim > 2:
            s = s[..., None, :, :]
        s = torch.as_tensor(s, dtype=f.dtype)
        return torch.diag_embed(s[..., 0]).expand(*f.shape, f.shape[-1]), (Y - f) * s[..., 0]

    def noise_covariance(self, f, state):
        return torch.diag_embed(state["r"]).unsqueeze(-3).expand(*f.shape, f.shape[-1])

    def predictive_covariance(self, f, quad, state=None):
        """``S = J Σ⁻ Jᵀ + R`` (identity link)."""
        return quad + self.noise_covariance(f, state)

    def log_det_whitening(self, f, state):
        """``Σ_c log s_c`` of the whitening ``s = 'scale'`` of the step (``−½ Σ_c log r_c``)."""
        return torch.log(state["scale"][..., 0]).sum(-1, keepdim=True).expand(f.shape[:-1])

    def aleatoric_variance(self, f, state):
        """Observation-noise variance of each output, ``(..., n, C)`` (``r`` of shape ``(..., C)``:
        one noise state per hypothesis broadcasts over the rows)."""
        return state["r"].unsqueeze(-2).expand_as(f)


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

    def whiten(self, f, J, Y, state=None, out=None):
        p = torch.sigmoid(f)
        v = (p * (1 - p)).clamp_min(_tiny(f.dtype))
        sv = v.sqrt()
        return _scaled_rows(J, sv.unsqueeze(-1), out), (Y - p) / sv

    whitens_by_matrix = True

    def whitening_matrix(self, f, Y, state=None, quad=None):
        """``A = √(p(1 − p))`` (``1 × 1``)."""
        p = torch.sigmoid(f)
        sv = (p * (1 - p)).clamp_min(_tiny(f.dtype)).sqrt()
        return sv.unsqueeze(-1), (Y - p) / sv

    def _variance(self, f):
        p = torch.sigmoid(f)
        return (p * (1 - p)).clamp_min(_tiny(f.dtype))

    def noise_covariance(self, f, state=None):
        return self._variance(f).unsqueeze(-1)

    def log_predictive(self, f, quad, Y, state=None, weights=None):
        """``log p(y | D)`` with the probit predictive ``p₁ = σ(f / √(1 + π v / 8))``, ``(..., n)``."""
        p = probit_probabilities(f, quad.diagonal(dim1=-2, dim2=-1), binary=True)
        y1 = Y[..., 0]
        p_obs = torch.where(y1 > 0.5, p[..., 1], p[..., 0])
        return torch.log(p_obs.clamp_min(_tiny(f.dtype)))

    def log_det_whitening(self, f, state=None):
        return -0.5 * torch.log(self._variance(f))[..., 0]


class Categorical(Likelihood):
    """Categorical likelihood over ``C`` logits with the exact logit-space update (module docstring)."""

    max_abs_output = 1e4
    divergence_advice = _LOGIT_ADVICE

    def mean(self, f):
        return torch.softmax(f, dim=-1)

    def whiten(self, f, J, Y, state=None, out=None):
        p = torch.softmax(f, dim=-1)
        sp = p.clamp_min(_tiny(f.dtype)).sqrt()
        pJ = torch.einsum("...nc,...ncp->...np", p, J)  # pᵀJ for each row
        Hw = torch.sub(J, pJ.unsqueeze(-2), out=out)  # then scaled in place: one P-sized array
        return Hw.mul_(sp.unsqueeze(-1)), (Y - p) / sp

    whitens_by_matrix = True

    def whitening_matrix(self, f, Y, state=None, quad=None):
        """``A = diag(√p)(I − 1pᵀ)``."""
        p = torch.softmax(f, dim=-1)
        sp = p.clamp_min(_tiny(f.dtype)).sqrt()
        eye = torch.eye(f.shape[-1], dtype=f.dtype, device=f.device)
        return sp.unsqueeze(-1) * (eye - p.unsqueeze(-2)), (Y - p) / sp

    def noise_covariance(self, f, state=None):
        """``diag(p) − p pᵀ`` (singular: ``1ᵀ R = 0``)."""
        p = torch.softmax(f, dim=-1)
        return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)

    def log_predictive(self, f, quad, Y, state=None, weights=None):
        """``log p(y | D)`` of the one-hot ``Y`` under the probit predictive with the shift-free logit
        variances (:func:`shift_free_logit_variance`), ``(..., n)``."""
        p = probit_probabilities(f, shift_free_logit_variance(quad), binary=False)
        return torch.log((p * Y).sum(-1).clamp_min(_tiny(f.dtype)))

    def log_det_whitening(self, f, state=None):
        """``−½ Σ_c log p_c``: the whitening ``ẽ = e / √p`` (``R`` itself is singular, so the density
        is that of the whitened residual)."""
        p = torch.softmax(f, dim=-1).clamp_min(_tiny(f.dtype))
        return -0.5 * torch.log(p).sum(-1)


class MomentMatchedCategorical(Likelihood):
    """Gaussian likelihood moment-matched to the categorical: the class probabilities observed with
    noise ``R = diag(m) − m mᵀ + ε I`` (Duran-Martin et al. 2025, App. G.1.1, eq. 117; Ollivier 2018).

    The model outputs logits ``f``; the observation is the one-hot target ``y`` (or the class index
    ``y ∈ {0, 1}`` for a single logit) with mean ``m = softmax(f)`` (``σ(f)`` for one logit), linearised
    in ``θ`` through ``G J`` with ``G = ∂m/∂f = diag(m) − m mᵀ`` (``m(1 − m)`` for one logit), and
    covariance ``R = diag(m) − m mᵀ + ε I`` (eq. 117 prints ``+ m mᵀ``: a sign error; the
    multinomial's covariance is ``diag(m) − m mᵀ``, of rank ``C − 1`` with null vector ``1``, and
    ``ε > 0`` makes ``R`` positive definite). With ``R = L Lᵀ`` (Cholesky), the whitened
    pseudo-observation is ``Hw = L⁻¹ G J``, ``ew = L⁻¹ (y − m)``: one step of the filter is the EKF
    update with the Gaussian ``N(y | m̄(θ), R)`` of the linearised mean ``m̄``.

    Unlike :class:`Categorical` (the exact logit-space update with ``R⁺``), the observation noise has
    ``ε`` in every direction, so a confident wrong prediction (``m_c → 0``) moves the belief by a
    bounded amount.

    Parameters
    ----------
    epsilon : float, default=0.01
        ``ε > 0``, the jitter of ``R`` (the paper gives no value).

    Examples
    --------
    >>> import torch
    >>> from skfilter.likelihoods import MomentMatchedCategorical
    >>> lik = MomentMatchedCategorical(epsilon=0.1)
    >>> R = lik.noise_covariance(torch.zeros(1, 2, dtype=torch.float64))[0]   # m = (1/2, 1/2)
    >>> R.tolist()
    [[0.35, -0.25], [-0.25, 0.35]]
    """

    max_abs_output = 1e4
    divergence_advice = _LOGIT_ADVICE

    def __init__(self, epsilon=0.01):
        if not (isinstance(epsilon, (int, float)) and not isinstance(epsilon, bool) and math.isfinite(epsilon)
                and epsilon > 0):
            raise ValueError(f"epsilon must be a positive finite float, got {epsilon!r}.")
        self.epsilon = float(epsilon)

    def mean(self, f):
        return torch.sigmoid(f) if f.shape[-1] == 1 else torch.softmax(f, dim=-1)

    def _moments(self, f):
        """``(m, G, R)``: the mean ``(..., n, C)``, ``G = ∂m/∂f`` and ``R``, ``(..., n, C, C)``."""
        m = self.mean(f)
        if f.shape[-1] == 1:
            G = (m * (1 - m)).unsqueeze(-1)
        else:
            G = torch.diag_embed(m) - m.unsqueeze(-1) * m.unsqueeze(-2)
        eye = torch.eye(f.shape[-1], dtype=f.dtype, device=f.device)
        return m, G, G + self.epsilon * eye

    def whiten(self, f, J, Y, state=None, out=None):
        LG, ew = self.whitening_matrix(f, Y, state)
        Hw = torch.matmul(LG, J) if out is None else torch.matmul(LG, J, out=out)
        return Hw, ew

    whitens_by_matrix = True

    def whitening_matrix(self, f, Y, state=None, quad=None):
        """``A = L⁻¹ G`` (``R = L Lᵀ``), ``ew = L⁻¹ (y − m)``."""
        m, G, R = self._moments(f)
        L = torch.linalg.cholesky(R)
        LG = torch.linalg.solve_triangular(L, G, upper=False)  # L⁻¹ G
        ew = torch.linalg.solve_triangular(L, (Y - m).unsqueeze(-1), upper=False)[..., 0]
        return LG, ew

    def noise_covariance(self, f, state=None):
        """``R = diag(m) − m mᵀ + ε I`` (positive definite)."""
        return self._moments(f)[2]

    def predictive_covariance(self, f, quad, state=None):
        """``S = G J Σ⁻ Jᵀ Gᵀ + R`` with ``G = ∂m/∂f``."""
        _, G, R = self._moments(f)
        return G @ quad @ G.mT + R

    def log_det_whitening(self, f, state=None):
        """``−½ log det R``."""
        L = torch.linalg.cholesky(self._moments(f)[2])
        return -torch.log(L.diagonal(dim1=-2, dim2=-1)).sum(-1)


class Poisson(Likelihood):
    """Poisson likelihood with log link: ``y ~ Poisson(exp f)``, ``R = λ``, ``H = λ J``."""

    #: log-rates are clipped here before exponentiation to keep ``λ`` finite
    max_log_rate = 30.0

    def mean(self, f):
        return torch.exp(f.clamp(max=self.max_log_rate))

    def whiten(self, f, J, Y, state=None, out=None):
        lam = self.mean(f).clamp_min(_tiny(f.dtype))
        sl = lam.sqrt()
        return _scaled_rows(J, sl.unsqueeze(-1), out), (Y - lam) / sl

    whitens_by_matrix = True

    def whitening_matrix(self, f, Y, state=None, quad=None):
        """``A = diag(√λ)``."""
        lam = self.mean(f).clamp_min(_tiny(f.dtype))
        sl = lam.sqrt()
        return torch.diag_embed(sl), (Y - lam) / sl

    def aleatoric_variance(self, f, state):
        return self.mean(f)

    def noise_covariance(self, f, state=None):
        return torch.diag_embed(self.mean(f).clamp_min(_tiny(f.dtype)))

    def log_det_whitening(self, f, state=None):
        return -0.5 * torch.log(self.mean(f).clamp_min(_tiny(f.dtype))).sum(-1)


def whitens_by_matrix(likelihood) -> bool:
    """Whether ``likelihood``'s whitened rows are :meth:`~Likelihood.whitening_matrix` times ``J``:
    its class says so (:attr:`Likelihood.whitens_by_matrix`) and the class that defines its
    ``whiten`` also defines ``whitening_matrix`` (a subclass that overrides ``whiten`` alone keeps
    its own whitening).

    Examples
    --------
    >>> from skfilter.likelihoods import Bernoulli, whitens_by_matrix
    >>> class MyBernoulli(Bernoulli):
    ...     def whiten(self, f, J, Y, state=None, out=None):
    ...         return super().whiten(f, J, Y, state, out)
    >>> whitens_by_matrix(Bernoulli()), whitens_by_matrix(MyBernoulli())
    (True, False)
    """
    if not getattr(likelihood, "whitens_by_matrix", False):
        return False
    for cls in type(likelihood).__mro__:
        if "whiten" in vars(cls):
            return "whitening_matrix" in vars(cls)
    return False


def probit_probabilities(f: torch.Tensor, var: torch.Tensor, binary: bool) -> torch.Tensor:
    """Generalised probit predictive (LoFi paper App. B.2, eq. 64).

    ``p ≈ softmax(f_c / √(1 + π v_c / 8))`` for the logits' variances ``v_c``; for one logit
    ``p₁ = σ(f / √(1 + π v / 8))``. Returns class probabilities ``(..., n, K)`` (``K = 2`` if
    ``binary``; leading hypotheses axes are kept). The classifiers pass the shift-free variances
    of :func:`shift_free_logit_variance` (eq. 64 takes ``v_c = [F Σ Fᵀ]_cc``, which also counts the
    variance of a common shift of the logits, to which the softmax is blind).

    Examples
    --------
    >>> import torch
    >>> from skfilter.likelihoods import probit_probabilities
    >>> f = torch.tensor([[2.0]], dtype=torch.float64)
    >>> probit_probabilities(f, torch.zeros_like(f), binary=True)[0, 1].item() == torch.sigmoid(f).item()
    True
    >>> float(probit_probabilities(f, torch.full_like(f, 8 / torch.pi), binary=True)[0, 1])  # σ(2/√2)
    0.8044...
    """
    z = f / torch.sqrt(1.0 + (math.pi / 8.0) * var)
    if binary:
        p1 = torch.sigmoid(z[..., :1])
        return torch.cat([1 - p1, p1], dim=-1)
    return torch.softmax(z, dim=-1)


def probit_probabilities_array(f: np.ndarray, var: np.ndarray, binary: bool) -> np.ndarray:
    """:func:`probit_probabilities` on NumPy arrays ``(n, C)`` (the same formulas: the scaled logits
    ``z = f / √(1 + π v / 8)``, then the logistic sigmoid of a single logit or the softmax, shifted by
    the row's largest logit); what an estimator's host-side ``predict_proba`` returns for one belief
    on the CPU, where a row's few torch operations would cost more than their arithmetic. The
    classifiers pass the same shift-free variances as to :func:`probit_probabilities`
    (:func:`shift_free_logit_variance`).

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter.likelihoods import probit_probabilities_array
    >>> f = np.array([[2.0]])
    >>> float(probit_probabilities_array(f, np.full_like(f, 8 / np.pi), binary=True)[0, 1])  # σ(2/√2)
    0.8044...
    """
    z = f / np.sqrt(1.0 + (math.pi / 8.0) * var)
    if binary:
        p1 = expit(z[:, :1])
        return np.concatenate([1.0 - p1, p1], axis=1)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    e /= e.sum(axis=1, keepdims=True)
    return e


def shift_free_logit_variance(quad: torch.Tensor) -> torch.Tensor:
    """Per-logit variances for the probit predictive without the variance of a common shift:
    ``v_c = C/(C − 1) · [Π Q Π]_cc`` with ``Π = I − 11ᵀ/C``, for the logits' covariance
    ``Q = J Σ Jᵀ`` ``(..., n, C, C)``; one logit (``C = 1``): ``Q`` itself. Returns ``(..., n, C)``.

    The softmax is unchanged by adding the same number to every logit, so the categorical
    likelihood never learns the logits' common shift: its share of ``Q`` (under the ``'auto'``
    prior, the output biases' mean, and the output rows' mean direction) keeps its prior variance
    for ever, and eq. 64's ``v_c = Q_cc`` counts it as uncertainty (on iris it was ¾ of ``Q_cc``
    after the whole training set). ``Π Q Π`` is the covariance of the centred logits (invariant to
    ``Q + 1aᵀ + a1ᵀ`` for any ``a``); the factor ``C/(C − 1)`` makes ``v_c = σ²`` for independent
    logits of variance ``σ²``, the case eq. 64 is derived for, so it changes the probit only by the
    common shift's variance.

    Examples
    --------
    >>> import torch
    >>> from skfilter.likelihoods import shift_free_logit_variance
    >>> Q = 0.5 * torch.eye(3, dtype=torch.float64) + 4.0   # independent σ² = 0.5, a common shift of variance 4
    >>> shift_free_logit_variance(Q[None]).round(decimals=12).tolist()
    [[0.5, 0.5, 0.5]]
    """
    C = quad.shape[-1]
    if C == 1:
        return quad[..., 0]
    row = quad.mean(-1)  # (Q 1)_c / C
    centred = quad.diagonal(dim1=-2, dim2=-1) - 2.0 * row + row.mean(-1, keepdim=True)
    return centred.clamp_min(0.0) * (C / (C - 1.0))


class AssumedDensityCategorical(Likelihood):
    r"""Bernoulli (one logit) or categorical (``C`` logits) likelihood with the assumed-density-filtering
    update: the moments of the one-row posterior, computed from the probit predictive.

    The EKF update (:class:`Bernoulli`, :class:`Categorical`) linearises the likelihood at the
    predicted logits ``f̂`` as if they were known: ``R = diag(p) − ppᵀ`` at ``p = softmax(f̂)``. But
    the logits of a row are uncertain, ``f ~ N(f̂, S)`` with ``S = J Σ⁻ Jᵀ`` under the linearised
    model, and early in a stream ``S`` is large: the EKF then adds the curvature of ``p = ½`` to the
    precision of every early row, which later rows (learned near ``p = 0`` or 1, with little
    curvature) cannot move — a one-pass filter's logits stay small and its probabilities
    under-confident (breast cancer, one pass: logits of mean magnitude 3.8 where the batch MAP has
    4.7 under the same prior). Assumed density filtering (Opper 1998; Ghosh et al. 2016, among the
    LoFi paper's related methods) replaces the one-row posterior ``∝ p(y | f) N(f; f̂, S)`` by the Gaussian with its
    mean and covariance; with ``Z(m) = E_{N(f; m, S)}[p(y | f)]`` these are (Minka 2001)

    .. math::

        m^+ = \hat f + S g,\quad S^+ = S - S N S,\qquad g = \nabla_m \log Z,\ N = -\nabla^2_m \log Z,

    and ``Z`` is the probit predictive of :func:`probit_probabilities`:
    ``Z = σ(κ f̂)^y σ(−κ f̂)^{1−y}``, ``κ = (1 + π s / 8)^{−1/2}`` for one logit (``g = κ(y − p̃)``,
    ``N = κ² p̃(1 − p̃)``, ``p̃ = σ(κ f̂)``); ``Z = softmax(κ ⊙ f̂)_y`` with ``κ_c`` from the
    shift-free variances (:func:`shift_free_logit_variance`) for ``C`` logits (``g = Π κ ⊙ (y − p̃)``,
    ``N = Π K (diag p̃ − p̃p̃ᵀ) K Π``, ``K = diag κ``: the projection ``Π = I − 11ᵀ/C`` keeps the
    update blind to the logits' common shift, as the likelihood is). Since ``f`` is linear in ``θ``
    under the linearisation, the parameter update with those logit moments is
    ``μ⁺ = μ⁻ + Σ⁻Jᵀg``, ``Σ⁺ = Σ⁻ − Σ⁻JᵀNJΣ⁻``: the update of a whitened pseudo-observation
    ``(Hw, ew)`` with ``HwᵀHw``-site ``Λ = N(I − SN)⁻¹`` and ``Hwᵀ(I + HwΣ⁻Hwᵀ)⁻¹ew = Jᵀg``, which every
    posterior structure applies as it applies the others. With ``N = GGᵀ``, ``G = Π K S̃``,
    ``S̃ = (I − p̃1ᵀ) diag(p̃)^{½}`` (``S̃S̃ᵀ = diag p̃ − p̃p̃ᵀ``, as in :class:`Categorical`) and
    ``g = G ẽ``, ``ẽ = (y − p̃)/√p̃``, one such pair is

    .. math::

        H_w = T\,G^\top J,\quad e_w = T \tilde e,\qquad T = (I - G^\top S G)^{-1/2}

    (push-through: ``G T²Gᵀ = N(I − SN)⁻¹``): the categorical whitening of the tempered, centred
    Jacobian ``K Π J`` at ``p̃``, then the symmetric ``T``, with no pseudo-inverse. One logit:
    ``Hw = κ√(p̃(1 − p̃)) J / √(1 − sN)``, ``ew = (y − p̃) / √(p̃(1 − p̃)(1 − sN))``. With ``S = 0``
    (``κ = 1``, ``T = I``) this is the EKF update of :class:`Bernoulli` / :class:`Categorical`
    exactly. The eigenvalues of ``GᵀSG`` are those of ``N^{½} S N^{½}``: below 1 for the exact ``N``
    of a log-concave likelihood (the one-row posterior's logit covariance ``S − SNS`` is positive
    definite), below ``2/π`` for one logit's probit; the per-logit probit of ``C`` logits ignores
    their correlations and can overshoot, so they are capped at 0.9 (on iris and wine they reach
    0.4–0.6 in 95 % of the steps, at most 0.84; near 1, ``T`` would be ill-conditioned).

    Examples
    --------
    >>> import torch
    >>> from skfilter.likelihoods import AssumedDensityCategorical, Bernoulli
    >>> f, J, y = torch.tensor([[0.5]]), torch.tensor([[[1.0, 2.0]]]), torch.tensor([[1.0]])
    >>> adf = AssumedDensityCategorical()
    >>> Hw, ew = adf.whiten(f, J, y, quad=torch.zeros(1, 1, 1))    # no predictive variance: the EKF
    >>> Hb, eb = Bernoulli().whiten(f, J, y)
    >>> bool(torch.allclose(Hw, Hb) and torch.allclose(ew, eb))
    True
    >>> Hw, ew = adf.whiten(f, J, y, quad=torch.full((1, 1, 1), 4.0))  # this uncertain row moves further
    >>> bool(ew[0, 0] / Hw[0, 0, 0] > eb[0, 0] / Hb[0, 0, 0])
    True
    """

    max_abs_output = 1e4
    divergence_advice = _LOGIT_ADVICE
    needs_predictive = True

    #: the cap of the eigenvalues of ``GᵀSG`` (``C ≥ 2``; class docstring)
    _MAX_CONTRACTION = 0.9

    def mean(self, f):
        return torch.sigmoid(f) if f.shape[-1] == 1 else torch.softmax(f, dim=-1)

    def _tempered(self, f, quad):
        """``(κ, p̃)``: the probit factors and tempered probabilities, ``(..., n, C)`` (one logit:
        ``p̃`` of the positive class)."""
        kappa = torch.rsqrt(1.0 + (math.pi / 8.0) * shift_free_logit_variance(quad))
        z = kappa * f
        return kappa, (torch.sigmoid(z) if f.shape[-1] == 1 else torch.softmax(z, dim=-1))

    def whiten(self, f, J, Y, state=None, out=None, quad=None):
        A, ew = self.whitening_matrix(f, Y, state, quad)
        if f.shape[-1] == 1:
            return _scaled_rows(J, A, out), ew
        Hw = torch.matmul(A, J) if out is None else torch.matmul(A, J, out=out)
        return Hw, ew

    whitens_by_matrix = True

    def whitening_matrix(self, f, Y, state=None, quad=None):
        """``A = T Gᵀ`` (one logit: ``κ √(r / (1 − s κ² r))``), ``ew = T ẽ`` (class docstring)."""
        if quad is None:
            raise ValueError("AssumedDensityCategorical.whiten needs the rows' prior predictive quad = J Σ Jᵀ.")
        kappa, p = self._tempered(f, quad)
        tiny = _tiny(f.dtype)
        if f.shape[-1] == 1:
            s = quad[..., 0]  # (..., n, 1)
            r = (p * (1 - p)).clamp_min(tiny)
            keep = (1.0 - s * kappa * kappa * r).clamp_min(tiny)
            return (kappa * (r / keep).sqrt()).unsqueeze(-1), (Y - p) / (r * keep).sqrt()
        C = f.shape[-1]
        sp = p.clamp_min(tiny).sqrt()
        # Gᵀ = diag(√p̃)(I − 1p̃ᵀ) K Π (C × C, Π = I − 11ᵀ/C): the whitened rows are one product
        # (T Gᵀ) J, so no temporary of J's size is made (P can be 10⁶);  Gᵀ S G from K Π S Π K the
        # same way on both sides
        KP = kappa.unsqueeze(-1) * (torch.eye(C, dtype=f.dtype, device=f.device) - 1.0 / C)
        Gt = sp.unsqueeze(-1) * (KP - (p.unsqueeze(-1) * KP).sum(-2, keepdim=True))
        Q = quad - quad.mean(-1, keepdim=True)
        Q = Q - Q.mean(-2, keepdim=True)
        Q = kappa.unsqueeze(-1) * Q * kappa.unsqueeze(-2)
        Q = Q - (p.unsqueeze(-2) * Q).sum(-1, keepdim=True)  # (I − 1p̃ᵀ) on the right: rows minus Q p̃
        Q = Q - (p.unsqueeze(-1) * Q).sum(-2, keepdim=True)  # and on the left
        Ks = sp.unsqueeze(-1) * Q * sp.unsqueeze(-2)
        k, W = torch.linalg.eigh(0.5 * (Ks + Ks.mT))
        T = (W * (1.0 - k.clamp(0.0, self._MAX_CONTRACTION)).rsqrt().unsqueeze(-2)) @ W.mT
        ew = (T @ ((Y - p) / sp).unsqueeze(-1))[..., 0]
        return T @ Gt, ew

    def predictive_mean(self, f, quad, state=None):
        """The probit predictive's class probabilities ``p̃`` (one logit: of the positive class)."""
        p = probit_probabilities(f, shift_free_logit_variance(quad), binary=f.shape[-1] == 1)
        return p[..., 1:] if f.shape[-1] == 1 else p

    def predictive_covariance(self, f, quad, state=None):
        """``Cov[y | D] = diag(p̃) − p̃p̃ᵀ`` (one logit: ``p̃(1 − p̃)``), exactly, for the probit
        predictive's ``p̃``: a one-hot (or 0/1) target's covariance is fixed by its mean. A weighting
        function (:class:`~skfilter.WoLFClassifier`) then measures the surprise of a label
        ``(y − p̃)ᵀ S⁺ (y − p̃) = 1/p̃_y − 1`` by the probability the classifier reports."""
        p = self.predictive_mean(f, quad)
        if f.shape[-1] == 1:
            return (p * (1 - p)).clamp_min(_tiny(f.dtype)).unsqueeze(-1)
        return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)

    def noise_covariance(self, f, state=None):
        """``R`` of the EKF at the predicted logits: ``p(1 − p)`` or ``diag(p) − ppᵀ``."""
        if f.shape[-1] == 1:
            p = torch.sigmoid(f)
            return (p * (1 - p)).clamp_min(_tiny(f.dtype)).unsqueeze(-1)
        p = torch.softmax(f, dim=-1)
        return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)

    def log_predictive(self, f, quad, Y, state=None, weights=None):
        """``log p(y | D)`` under the probit predictive (``log Z`` above), ``(..., n)``."""
        binary = f.shape[-1] == 1
        p = probit_probabilities(f, shift_free_logit_variance(quad), binary=binary)
        if binary:
            p_obs = torch.where(Y[..., 0] > 0.5, p[..., 1], p[..., 0])
        else:
            p_obs = (p * Y).sum(-1)
        return torch.log(p_obs.clamp_min(_tiny(f.dtype)))
