"""The interface of a posterior structure: beliefs are values, steps are pure functions.

A *structure* (:class:`Structure`) is a stateless description — full covariance, diagonal, LoFi,
a block composite — with pure functions over *beliefs*: immutable records of arrays
(:class:`typing.NamedTuple` subclasses) holding the mean and the structure's covariance or precision
factors. Every function accepts a belief whose arrays carry optional leading **hypotheses** axes
(``mean`` of shape ``(P,)`` for one filter, ``(K, P)`` for ``K`` hypotheses as BOCD keeps them) and
handles all hypotheses in one batched operation; the arrays of the results carry the same axes.

A filter step is the dynamics (:func:`skfilter.dynamics.apply_dynamics`, through the structure's
``transition`` and ``inflate``) then ``update`` with whitened
pseudo-observations ``Hw θ ≈ ew`` of unit noise (:mod:`skfilter.likelihoods`). Neither touches its
input: an estimator installs the returned belief only after the whole step has succeeded, so no
exception — a numerical failure or a ``KeyboardInterrupt`` — can leave a mixed state.
"""

from __future__ import annotations

import abc
import functools
import math
from typing import Any, NamedTuple

import numpy as np
import torch

from .._array_ops import Disjoint
from ..exceptions import FilterStepError


def _map(fn, v):
    if isinstance(v, torch.Tensor):
        return fn(v)
    if isinstance(v, tuple):  # a nested belief (NamedTuple) or a tuple of beliefs (block composites)
        mapped = [_map(fn, x) for x in v]
        return type(v)(*mapped) if hasattr(v, "_fields") else tuple(mapped)
    return v


def map_belief(fn, belief):
    """Apply ``fn`` to every tensor of ``belief``, nested beliefs included (other fields — counters,
    ``None`` — are shared by all hypotheses and pass through); a new belief."""
    return _map(fn, belief)


def _stack(vals):
    first = vals[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(list(vals))
    if isinstance(first, tuple):
        parts = [_stack(list(x)) for x in zip(*vals)]
        return type(first)(*parts) if hasattr(first, "_fields") else tuple(parts)
    return first


def stack_beliefs(beliefs):
    """Stack beliefs of one structure along a new leading hypotheses axis."""
    return _stack(list(beliefs))


def select_hypothesis(belief, k):
    """The belief of hypothesis ``k`` (drops the leading hypotheses axis)."""
    return map_belief(lambda v: v[k], belief)


class UpdateInfo:
    """What an update learned about its observation, in whitened units (computed on access).

    With the whitened innovation covariance ``S_w = I + Hw Σ⁻ Hwᵀ = C Cᵀ`` (``C`` lower Cholesky,
    ``(..., m, m)``) and the whitened residual ``ew`` (``(..., m)``):

    * :attr:`mahalanobis2` — ``ewᵀ S_w⁻¹ ew = ‖C⁻¹ ew‖²``, the squared Mahalanobis distance of the
      observation under the prior predictive;
    * :attr:`log_det` — ``log det S_w = 2 Σ log diag C``.

    The likelihood turns them into the log predictive density of the observation (BOCD's evidence):
    with the whitening ``Hw = A J``, ``ew = A (y − ŷ)``, ``AᵀA = R⁻¹``,
    ``log N(y; ŷ, J Σ⁻ Jᵀ + R) = −½ (mahalanobis2 + log_det + m log 2π) + log|det A|``.

    ``factor`` is a callable returning ``(C, ew)`` (so that structures whose update never forms
    ``C`` pay for it only when it is asked for).
    """

    __slots__ = ("_factor", "_cache")

    def __init__(self, factor):
        self._factor = factor
        self._cache = None

    def _chol(self):
        if self._cache is None:
            C, ew = self._factor()
            self._cache = (torch.as_tensor(C), torch.as_tensor(ew))
        return self._cache

    @property
    def innovation_cholesky(self) -> torch.Tensor:
        """Lower Cholesky factor ``C`` of ``S_w``, ``(..., m, m)``."""
        return self._chol()[0]

    @property
    def mahalanobis2(self) -> torch.Tensor:
        """``ewᵀ S_w⁻¹ ew``, shape ``(...)``."""
        C, ew = self._chol()
        z = torch.linalg.solve_triangular(C, ew.unsqueeze(-1), upper=False)
        return (z * z).sum((-2, -1))

    @property
    def log_det(self) -> torch.Tensor:
        """``log det S_w``, shape ``(...)``."""
        C, _ = self._chol()
        return 2.0 * torch.log(C.diagonal(dim1=-2, dim2=-1)).sum(-1)

    def log_predictive_density(self, log_det_whitening) -> torch.Tensor:
        """``log N(y; ŷ, S)`` given ``log|det A|`` of the whitening (see the class docstring)."""
        m = self._chol()[1].shape[-1]
        return -0.5 * (self.mahalanobis2 + self.log_det + m * math.log(2 * math.pi)) + log_det_whitening


class Structure(abc.ABC):
    """A posterior structure: pure functions over its beliefs (module docstring).

    Every belief has a field ``mean`` (``(..., P)``). Subclasses implement the abstract methods;
    each states the maths it implements with the spec section.
    """

    #: the :class:`typing.NamedTuple` class of this structure's beliefs
    belief_type: type = NamedTuple

    @abc.abstractmethod
    def prior(self, mean: torch.Tensor, prior_variance) -> Any:
        """The prior belief ``N(mean, diag(prior_variance))`` (``prior_variance`` a float or a
        ``(P,)`` tensor); ``mean`` may carry hypotheses axes."""

    @abc.abstractmethod
    def update(self, belief, Hw, ew, workspace=None):
        """Condition on ``Hw θ ≈ ew`` with unit noise: ``Hw (..., m, P)``, ``ew (..., m)``.

        Returns ``(belief, info)`` with ``info`` an :class:`UpdateInfo`. Raises
        :class:`~skfilter.exceptions.FilterStepError` (and returns nothing) when the result is not
        finite or a matrix that must be positive definite is not. Every structure keeps its update
        numerically safe for stiff rows (:func:`stiffness_limit`): with a linear model and no process
        noise, no update makes a predictive variance ``J Σ Jᵀ`` grow beyond rounding (LoFi: unless its
        truncation moves precision). ``workspace``, if given, is a *dead* belief of this structure
        (nothing references it any more; the engine checks) whose large arrays the new belief may be
        written into instead of fresh memory — never ``belief``.
        """

    @abc.abstractmethod
    def quadratic_form(self, belief, J) -> torch.Tensor:
        """``J Σ Jᵀ`` for ``J (..., n, C, P)``: ``(..., n, C, C)``."""

    def quadratic_diagonal(self, belief, J) -> torch.Tensor:
        """Diagonal of :meth:`quadratic_form`, ``(..., n, C)``."""
        return self.quadratic_form(belief, J).diagonal(dim1=-2, dim2=-1)

    @abc.abstractmethod
    def marginal_variance(self, belief) -> torch.Tensor:
        """``diag(Σ)``, ``(..., P)``."""

    @abc.abstractmethod
    def covariance(self, belief) -> torch.Tensor:
        """Dense ``Σ`` (``(..., P, P)``); for tests and small models."""

    @abc.abstractmethod
    def sample(self, belief, n_samples: int, generator: torch.Generator) -> torch.Tensor:
        """``n_samples`` draws ``θ ~ N(μ, Σ)`` of a belief without hypotheses axes: ``(n_samples, P)``."""

    def moment_match(self, belief, log_weights) -> Any:
        """The Gaussian of this structure closest (KL) to the mixture ``Σ_k w_k N(μ_k, Σ_k)`` over the
        leading hypotheses axis, ``w = softmax(log_weights)``; the result has no hypotheses axis."""
        raise NotImplementedError(f"{type(self).__name__} has no moment-matched reset.")

    @abc.abstractmethod
    def transition(self, belief, g, Q, shift):
        """The linear-Gaussian transition ``μ ← g μ + shift``, ``Σ ← g² Σ + diag(Q)`` (``Q`` a float or
        ``(P,)``; ``shift`` None or ``(P,)``) — LoFi paper §3.1, thesis eq. 3.13."""

    def inflate(self, belief, kind, factor):
        """Covariance inflation of the previous posterior (LoFi paper App. E). The base class knows
        ``'simple'`` only, ``Σ ← (1 + α) Σ``, through :meth:`transition`."""
        if kind != "simple":
            raise ValueError(f"{type(self).__name__} supports inflation='simple' only, got {kind!r}.")
        return self.transition(belief, (1.0 + factor) ** 0.5, 0.0, None)

    def admissible_prior_variance(self, variance):
        """The closest prior variance this structure can represent (per-parameter variances are
        kept by every structure but spherical LoFi, which takes their mean)."""
        return variance

    # helpers shared by the structures -------------------------------------------------------
    @staticmethod
    def n_params(belief) -> int:
        return int(belief.mean.shape[-1])

    @staticmethod
    def broadcast_like(belief, like):
        """``belief`` (no hypotheses axes) repeated over the hypotheses axes of ``like``."""
        batch = like.mean.shape[:-1]
        if not batch:
            return belief
        return map_belief(lambda v: v.expand(*batch, *v.shape).contiguous(), belief)


def sync_step(values, positive=None, info=None, watch=(), what="innovation covariance"):
    """The checks of :func:`check_step` in one host synchronisation, without raising.

    Returns ``(failure, watched)``: ``failure`` is ``None`` or the :class:`FilterStepError` that
    :func:`check_step` raises, ``watched`` the host values (floats) of the 0-d tensors ``watch`` —
    quantities a structure decides on after the step (its stiffness). A 0-d tensor of ``values`` is
    used as it is (no ``sum``).
    """
    parts = [t if t.dim() == 0 else t.sum() for t in values]
    n_sums = len(parts)
    dtype = values[0].dtype
    if positive is not None:
        parts.append(positive.sum())
        parts.append(positive.amin())
    n_checked = len(parts)
    parts += [w if w.dtype == dtype else w.to(dtype) for w in watch]
    if info is not None:
        parts.append(info.max().to(dtype) if info.dim() else info.to(dtype))
    vals = torch.stack(parts).tolist()
    watched = vals[n_checked:n_checked + len(watch)]
    if info is not None and vals[-1] != 0:
        return FilterStepError(f"The {what} is not positive definite (the belief is degenerate)."), watched
    finite = all(math.isfinite(v) for v in vals[:n_sums + (1 if positive is not None else 0)])
    if not finite or (positive is not None and not vals[n_sums + 1] > 0):
        return FilterStepError(
            "The filter step produced non-finite values or non-positive variances; "
            "the last good belief is kept. Try a smaller prior_variance or a larger obs_variance."
        ), watched
    return None, watched


def check_step(values, positive=None, info=None, what="innovation covariance"):
    """Raise :class:`FilterStepError` unless every array in ``values`` is finite, every entry of
    ``positive`` (if given) is finite and > 0, and ``info`` (of :func:`torch.linalg.cholesky_ex`,
    if given) is 0 everywhere.

    One host synchronisation: a sum is non-finite if any term is (``inf − inf`` is NaN; a finite sum
    overflowing to ``inf`` means values near the float range, a failure as well), and ``amin``
    propagates NaN.
    """
    failure, _ = sync_step(values, positive, info, what=what)
    if failure is not None:
        raise failure


def cholesky_or_raise(S: torch.Tensor, what: str = "innovation covariance") -> torch.Tensor:
    """Lower Cholesky factor of SPD ``S`` (batched); :class:`FilterStepError` if it is not positive
    definite."""
    L, info = torch.linalg.cholesky_ex(S)
    if int(info.max()) if info.dim() else int(info):
        raise FilterStepError(f"The {what} is not positive definite (the belief is degenerate).")
    return L


# -- numerically safe forms (spec/diagonal-ekf.md §6 P2) -------------------------------------------
#
# An update with whitened rows ``h`` and unit noise shrinks the variance along ``h`` by the factor
# ``1/(1 + a)``, ``a = h Σ hᵀ``. The plain forms (``Σ − VVᵀ``, ``v − colsum(Z²)``, Cholesky of a Gram
# matrix ``I + GGᵀ``, Woodbury ``Υ⁻¹ − …``) compute that factor as a difference of numbers of size
# ``1`` and lose about ``log10(a)`` digits: past ``a ≈ 1/eps`` the result has no correct digit and
# may be negative — a covariance that is no longer positive definite, a failed Cholesky factor, a
# negative variance. A row whose ``a`` exceeds :func:`stiffness_limit` is *stiff*; the structures keep
# their plain (fast) forms below it, where at most half the digits are lost, and switch to forms
# without the cancellation above it:
#
# * factor forms (diagonal, LoFi, the innovation covariance of a batch): the factor of ``I + GGᵀ``
#   from a QR decomposition of the stacked ``[Gᵀ; I]`` (:func:`identity_plus_gram_factor`), whose
#   singular values are all ≥ 1, so the factor is exact for a perturbation of ``G`` of relative size
#   ``eps`` instead of one of ``GGᵀ``; excluded sums of positive terms instead of differences;
# * the dense covariance (:class:`~skfilter.posteriors.FullCovariance`), which no algorithm can hold
#   more accurately than its rounding: the update never shrinks a direction below the resolution of
#   the matrix (:func:`resolution_floored_innovation`).


@functools.lru_cache(maxsize=None)
def stiffness_limit(dtype) -> float:
    """``eps^(-1/2)`` of ``dtype`` (a torch or NumPy dtype; ``6.7e7`` for float64, ``2.9e3`` for
    float32): the largest whitened quadratic form ``a = h Σ hᵀ`` (or trace of ``H Σ Hᵀ`` for a batch
    of rows) for which the plain update forms keep at least half of the digits (notes above)."""
    eps = torch.finfo(dtype).eps if isinstance(dtype, torch.dtype) else np.finfo(dtype).eps
    return float(eps) ** -0.5


def identity_plus_gram_factor(G: torch.Tensor, with_q: bool = False):
    """Lower-triangular ``C`` with positive diagonal and ``C Cᵀ = I + G Gᵀ``, for rows ``G (..., k, n)``.

    By the QR decomposition of the stacked ``A = [Gᵀ; I_k] = Q R`` (``(n + k) × k``): ``AᵀA = I + GGᵀ
    = RᵀR``, ``C = Rᵀ`` (rows of ``R`` signed to a positive diagonal). ``A`` has full column rank with
    all singular values ≥ 1, so Householder QR is backward stable on ``A`` itself: ``C`` is the exact
    factor for ``G`` perturbed by ``eps`` relative to its columns — a square-root form, with none of
    the Gram matrix's ``eps · ‖G‖²`` error that makes its Cholesky factorisation fail when ``‖G‖² ≳
    1/eps``. Costs ``O(n k²)``, a small multiple of forming ``GGᵀ``.

    With ``with_q`` returns ``(C, Q)``, ``Q (..., n + k, k)`` with orthonormal columns (signed like
    ``C``): its top block is ``Gᵀ C⁻ᵀ`` and its bottom block ``C⁻ᵀ``, so products with
    ``(I + GᵀG)⁻¹ = C⁻ᵀC⁻¹`` can be taken from ``Q`` without a triangular solve.
    """
    k = G.shape[-2]
    eye = torch.eye(k, dtype=G.dtype, device=G.device).expand(*G.shape[:-2], k, k)
    A = torch.cat([G.mT, eye], dim=-2)
    if with_q:
        Q, R = torch.linalg.qr(A, mode="reduced")
    else:
        R = torch.linalg.qr(A, mode="r").R
    sign = torch.where(R.diagonal(dim1=-2, dim2=-1) < 0, -1.0, 1.0).to(R.dtype)
    C = (R * sign[..., :, None]).mT
    return (C, Q * sign[..., None, :]) if with_q else C


def psd_factor(S: torch.Tensor, floor: float = 1.0) -> torch.Tensor:
    """Lower-triangular ``C`` with ``C Cᵀ = S`` for a symmetric ``S (..., m, m)`` known to satisfy
    ``S ⪰ floor · I`` in exact arithmetic (an innovation covariance ``I + Σ_b H_b Σ_b H_bᵀ`` formed
    from dense covariances, whose rounding may leave it indefinite).

    Cholesky; where that fails, the symmetric square root ``U diag(√λ)`` of the eigendecomposition
    with the eigenvalues raised to ``floor`` (the known bound, so only rounding is changed), made
    triangular by a QR decomposition of its transpose (``U diag(√λ) = RᵀQᵀ``: ``C = Rᵀ``). Raises
    :class:`FilterStepError` for non-finite ``S``. One host synchronisation.
    """
    L, info = torch.linalg.cholesky_ex(S)
    if not (int(info.max()) if info.dim() else int(info)):
        return L
    if not bool(torch.isfinite(S).all()):
        raise FilterStepError("The innovation covariance is not finite (the belief is degenerate).")
    lam, U = torch.linalg.eigh(0.5 * (S + S.mT))
    root = U * lam.clamp_min(floor).sqrt()[..., None, :]
    R = torch.linalg.qr(root.mT, mode="r").R
    sign = torch.where(R.diagonal(dim1=-2, dim2=-1) < 0, -1.0, 1.0).to(R.dtype)
    return (R * sign[..., :, None]).mT


def merge_hypotheses(keep, plain, safe):
    """Per hypothesis, the belief ``plain`` where ``keep`` (a bool tensor of the hypotheses axes) and
    ``safe`` elsewhere: a stack whose step needed the stiff forms for some hypotheses keeps, for the
    others, the plain result each would get alone (their update never depends on the rest of the
    stack). Non-tensor fields are taken from ``safe``."""
    def pick(p, s):
        if not isinstance(p, torch.Tensor):
            return s
        return torch.where(keep.reshape(keep.shape + (1,) * (p.dim() - keep.dim())), p, s)
    return type(safe)(*[pick(p, s) for p, s in zip(plain, safe)])


def resolution_floored_innovation(a: torch.Tensor, scale: torch.Tensor, eps: float, exact_scale=None):
    """The innovation variance ``S`` of a dense-covariance update ``Σ' = Σ − uuᵀ/S``, ``u = Σhᵀ``,
    ``a = h Σ hᵀ`` (whitened, unit noise; all shapes ``(...)``), and the fraction ``ρ = 1 − a/S`` of
    the variance along ``h`` that it keeps. Returns ``(S, ρ)``.

    Exact arithmetic uses ``S = 1 + a``, ``ρ = 1/(1 + a)``. A ``P × P`` matrix stored with relative
    rounding ``eps`` does not resolve a quadratic form along ``h`` below ``eps·|h|ᵀ|Σ||h|``: shrinking
    below it leaves a random sign along ``h``, and a direction of negative variance is amplified by
    every later update (``σ' = σ/(1 + σh²)``) until a step fails. The fraction kept is therefore
    floored at ``ρ_min = κ·eps·|h|ᵀ|Σ||h|/a`` (``κ = 16``, a margin for the rounding of ``u`` and of
    the stored entries)::

        S = max(1 + a, a / (1 − ρ_min)),   ρ = max(1/(1 + a), ρ_min)     (0 < ρ_min < 1)
        S = ∞ (no update),                 ρ = 1                          (ρ_min ≥ 1 or a ≤ 0)

    — the exact update with the observation noise raised to what the matrix can represent. It is
    still a Kalman update, so ``Σ'`` is positive semi-definite, ``Σ' ⪯ Σ`` (no variance grows
    anywhere) and ``Σ' ⪰ ρ Σ``; wherever ``ρ_min ≤ 1/(1 + a)`` it is the exact update.

    ``scale`` is ``|h|ᵀ|Σ||h|`` or an upper bound of it; ``exact_scale``, if given, a callable
    returning the exact value, called (once) only where the bound would floor or skip the update.
    """
    exact = 1.0 + a
    tiny = torch.finfo(a.dtype).tiny
    rho_min = _FLOOR_MARGIN * eps * scale / a.clamp_min(tiny)
    floored = rho_min * exact > 1.0
    if exact_scale is not None and bool(floored.any()):
        rho_min = _FLOOR_MARGIN * eps * torch.minimum(scale, exact_scale()) / a.clamp_min(tiny)
        floored = rho_min * exact > 1.0
    S = torch.where(floored, a / (1.0 - rho_min), exact)
    rho = torch.where(floored, rho_min, 1.0 / exact)
    skip = (rho_min >= 1.0) | ~(a > 0)
    return torch.where(skip, torch.full_like(S, math.inf), S), torch.where(skip, torch.ones_like(rho), rho)


#: κ of :func:`resolution_floored_innovation`
_FLOOR_MARGIN = 16.0


def reusable_array(candidate, like: torch.Tensor, avoid=(), shape=None):
    """``candidate`` (a field of a dead *workspace* belief, :meth:`Structure.update`) if a result
    shaped like ``like`` (or ``shape``) may be written into it, else ``None``.

    It must be a tensor of that shape with the dtype and device of ``like``, contiguous, outside
    autograd, and share no memory with the arrays ``avoid`` (the step's inputs: a field a structure
    passes through unchanged, such as spherical LoFi's ``η``, is shared by the beliefs of several
    steps, and the workspace may hold it too) — a list of arrays or a
    :class:`~skfilter._array_ops.Disjoint` (whose spans are then taken once for several fields)."""
    if not isinstance(candidate, torch.Tensor) or candidate.requires_grad:
        return None
    if candidate.shape != (like.shape if shape is None else tuple(shape)):
        return None
    if candidate.dtype != like.dtype or candidate.device != like.device or not candidate.is_contiguous():
        return None
    guard = avoid if isinstance(avoid, Disjoint) else Disjoint(avoid)
    return None if guard.overlaps(candidate) else candidate


def as_variance_vector(prior_variance, like: torch.Tensor) -> torch.Tensor:
    """``prior_variance`` (a float or a ``(P,)`` array) as a ``(P,)`` tensor like ``like``'s last axis."""
    v = torch.as_tensor(prior_variance, dtype=like.dtype, device=like.device)
    return v.expand(like.shape[-1]).clone() if v.dim() == 0 else v.clone()


class Posterior:
    """A read-only view of a belief with its structure's functions as methods (``est.posterior_``).

    Fields of the belief are attributes (``mean``, ``cov``, ``var``, ``diagonal``, ``low_rank``, …).

    Parameters
    ----------
    structure : Structure
    belief : NamedTuple
        A belief of ``structure`` (no hypotheses axes for :meth:`sample`).

    Examples
    --------
    >>> import torch
    >>> from skfilter.posteriors import FullCovariance, Posterior
    >>> structure = FullCovariance()
    >>> view = Posterior(structure, structure.prior(torch.zeros(2, dtype=torch.float64), 2.0))
    >>> view.marginal_variance().tolist(), view.n_params
    ([2.0, 2.0], 2)
    """

    __slots__ = ("structure", "belief")

    def __init__(self, structure, belief):
        object.__setattr__(self, "structure", structure)
        object.__setattr__(self, "belief", belief)

    def __getattr__(self, name):
        if name in ("structure", "belief"):  # during unpickling, before the slots are set
            raise AttributeError(name)
        return getattr(self.belief, name)

    def __setattr__(self, name, value):
        raise AttributeError("A posterior view is read-only; beliefs are values (see skfilter.posteriors).")

    def __getstate__(self):
        return (self.structure, self.belief)

    def __setstate__(self, state):
        object.__setattr__(self, "structure", state[0])
        object.__setattr__(self, "belief", state[1])

    def __repr__(self):
        return f"Posterior({type(self.structure).__name__}, P={self.n_params})"

    @property
    def n_params(self) -> int:
        return int(self.belief.mean.shape[-1])

    @property
    def host_arrays(self) -> bool:
        """Whether the structure's update runs on NumPy views for this belief."""
        return bool(getattr(self.structure, "uses_host_arrays", lambda b: False)(self.belief))

    def covariance(self):
        """Dense ``Σ``."""
        return self.structure.covariance(self.belief)

    def marginal_variance(self):
        """``diag(Σ)``."""
        return self.structure.marginal_variance(self.belief)

    def predictive_cov(self, J):
        """``J Σ Jᵀ`` for ``J (n, C, P)``."""
        return self.structure.quadratic_form(self.belief, J)

    def predictive_var(self, J):
        """Diagonal of :meth:`predictive_cov`."""
        return self.structure.quadratic_diagonal(self.belief, J)

    def sample(self, n_samples, generator):
        """``n_samples`` draws ``θ ~ N(μ, Σ)``."""
        return self.structure.sample(self.belief, n_samples, generator)

    def state_dict(self) -> dict:
        """The belief's tensors by field name (references: beliefs are never modified in place)."""
        return {k: v for k, v in self.belief._asdict().items() if isinstance(v, torch.Tensor)}
