"""Robust weighting functions: the engine's weighting stage (stage 4 of :func:`skfilter.filtering.filter_step`).

WoLF (weighted-observation likelihood filter; Duran-Martin et al. 2024; thesis §4.1–§4.4)
replaces the log-likelihood of a row by ``W²(y, ŷ) log p(y | θ)``: a generalised-Bayes update that,
for the (linearised) Gaussian likelihood, is the Kalman update with the observation covariance
``R`` replaced by ``R / W²`` (Prop. 4.1). ``ŷ`` is the prior-predictive mean of the row, so the weight
costs one scalar per row and no inner loop. ``W = 1`` is the plain filter; ``W = 0`` leaves the belief
unchanged (the safe covariance form divides by nothing).

Every weighting function here is an object called as ``weighting(residual, S, R)`` with

* ``residual`` ``(..., n, C)``: ``y − E[y | h(μ⁻, x)]``, the prior-predictive residual;
* ``S`` ``(..., n, C, C)``: the prior predictive covariance of ``y`` (``H Σ⁻ Hᵀ + R``, target units;
  computed only when :attr:`WeightingFunction.needs_covariance`);
* ``R`` ``(..., n, C, C)``: the observation covariance of the step (the noise state of ``t − 1``);

and returns ``W`` of shape ``(..., n)`` in ``[0, 1]``. The functions (thesis eqs. 4.5–4.7):

========================  =========================================================  ================
name                      ``W(y, ŷ)``                                                ``threshold c``
========================  =========================================================  ================
``'imq'`` (:class:`IMQ`)  ``(1 + ‖e‖² / c²)^{−1/2}`` (4.5)                           target units
``'md'``                  ``(1 + eᵀ R⁻¹ e / c²)^{−1/2}`` (4.6)                       noise std units
``'tmd'``                 ``1`` if ``eᵀ R⁻¹ e ≤ c`` else ``0`` (4.7)                 squared distance
``'huber'`` (extension)   ``W² = min(1, c / ‖R^{−1/2} e‖)`` (not in the thesis)      noise std units
``'predictive-md'``       ``(1 + eᵀ S⁺ e / c²)^{−1/2}`` (classification, see below)  predictive std
========================  =========================================================  ================

* TMD follows the thesis' convention: ``c`` bounds the **squared** Mahalanobis distance and the
  boundary counts as an inlier (the authors' code compares the unsquared distance with ``<``;
  ``c_squared = c_unsquared²``).
* Huber is a labelled extension: ``sup W ≤ 1`` and ``sup W² ‖e‖ < ∞``, so Theorem 4.5 applies (the
  influence is bounded) but, unlike IMQ, it is not re-descending (the mean shift stays bounded
  without going to 0).
* ``'predictive-md'`` measures the residual against the full prior predictive ``S`` (pseudo-inverse:
  the one-hot residual of a categorical target lives in the simplex, where ``1ᵀ S = 0``). It is the
  weight of :class:`~skfilter.WoLFClassifier`.

A user's callable ``fn(residual, S) → W`` is wrapped by :func:`make_weighting` (:class:`CallableWeighting`).
:func:`influence_bound` checks the conditions of Theorem 4.5 (``sup W < ∞``, ``sup W² ‖e‖ < ∞``) on a
grid, for any weighting function.
"""

from __future__ import annotations

import abc
import numbers

import numpy as np
import torch

WEIGHTINGS = ("imq", "md", "tmd", "huber", "predictive-md")


#: the size of a covariance's row sums, relative to its largest variance, below which
#: :func:`_quadratic` takes ``1`` as its null direction (categorical covariances: rounding, ~10⁻¹⁶)
_NULL_ONES_TOLERANCE = 1e-10


def _quadratic(residual, M):
    """``eᵀ M⁺ e`` for each row: ``residual (..., n, C)``, ``M (..., n, C, C)`` symmetric PSD.

    One output: ``e² / M``. Several: a Cholesky solve, or the pseudo-inverse where ``M`` is singular.

    A categorical likelihood's covariances (``diag p − ppᵀ``, and ``H Σ Hᵀ`` plus it) have ``M 1 = 0``,
    and their residuals ``e = y − p`` sum to 0. For every ``M`` whose rows sum to 0 (to
    :data:`_NULL_ONES_TOLERANCE` of its largest diagonal entry) the form is computed on the leading
    ``(C − 1) × (C − 1)`` block: with ``M 1 = 0`` and ``e ⊥ 1``, a solution ``x`` of ``M x = e`` may
    be shifted along ``1`` to ``x_C = 0``, so ``eᵀ M⁺ e = eᵀ x = e_rᵀ M_r⁻¹ e_r`` (``r``: the first
    ``C − 1`` coordinates; for ``diag p − ppᵀ`` it is ``Σ_c e_c² / p_c``, and ``1/p_y − 1`` for a
    label ``y``). The pseudo-inverse of the whole ``M`` would instead decide by its cutoff whether
    the null eigenvalue, rounding of size ``C ε ‖M‖``, is inverted: measured, WoLF over the full EKF
    and over LRKF at full rank, whose covariances agree to 10⁻¹⁶, got weights 5·10⁻⁵ apart on one
    row (``eᵀ M⁺ e`` 0.0300 against 0.0308), and their beliefs 10⁻⁶."""
    if residual.shape[-1] == 1:
        m = M[..., 0, 0]
        return torch.where(m > 0, residual[..., 0] ** 2 / m.clamp_min(torch.finfo(m.dtype).tiny),
                           torch.zeros_like(m))
    scale = M.diagonal(dim1=-2, dim2=-1).abs().amax(-1, keepdim=True)
    if bool((M.sum(-1).abs() <= _NULL_ONES_TOLERANCE * scale).all()):
        L, info = torch.linalg.cholesky_ex(M[..., :-1, :-1])
        if bool((info == 0).all()):
            z = torch.linalg.solve_triangular(L, residual[..., :-1].unsqueeze(-1), upper=False)
            return (z ** 2).sum((-2, -1))
    L, info = torch.linalg.cholesky_ex(M)
    if bool((info == 0).all()):
        z = torch.linalg.solve_triangular(L, residual.unsqueeze(-1), upper=False)
        return (z ** 2).sum((-2, -1))
    Mp = torch.linalg.pinv(M, hermitian=True)
    return torch.einsum("...i,...ij,...j->...", residual, Mp, residual)


def _imq(q):
    """``(1 + q)^{−1/2}`` for the distance ``q = d² / c²``, computed on ``e / c``: a threshold whose
    square overflows the dtype gives ``W = 1`` (``c → ∞``, the base filter) and a residual whose
    square overflows gives ``W = 0``, never ``inf / inf`` (NaN)."""
    return torch.rsqrt(1.0 + q)


class WeightingFunction(abc.ABC):
    """Base class: a weight ``W ∈ [0, 1]`` per row from the prior-predictive residual (module
    docstring). Subclasses implement :meth:`weights`.

    Parameters
    ----------
    threshold : float
        The function's ``c > 0`` (module docstring for its units).
    """

    #: whether the engine must compute the prior predictive covariance ``S`` for this function
    needs_covariance = False
    #: the engine calls ``weighting(residual, S, R)`` (``R``: observation covariance) for these
    takes_noise_covariance = True

    def __init__(self, threshold: float):
        threshold = float(threshold)
        if not threshold > 0:
            raise ValueError(f"threshold must be positive, got {threshold!r}.")
        self.threshold = threshold

    def __call__(self, residual, predictive_covariance=None, noise_covariance=None):
        return self.weights(residual, predictive_covariance, noise_covariance)

    @abc.abstractmethod
    def weights(self, residual, predictive_covariance, noise_covariance):
        """``W (..., n)`` of the rows (module docstring for the arguments)."""

    def __repr__(self):
        return f"{type(self).__name__}(threshold={self.threshold!r})"

    def __eq__(self, other):
        return type(self) is type(other) and self.threshold == other.threshold

    def __hash__(self):
        return hash((type(self), self.threshold))


class IMQ(WeightingFunction):
    """Inverse multi-quadratic weight (thesis eq. 4.5): ``W = (1 + ‖e‖² / c²)^{−1/2}``, i.e.
    ``W² = c² / (c² + ‖e‖²)``; ``c`` in the units of ``y``.

    ``W(ŷ, ŷ) = 1``, strictly decreasing in ``‖e‖``, ``W ‖e‖ → c`` and ``W² ‖e‖ → 0`` as
    ``‖e‖ → ∞`` (re-descending influence).

    Examples
    --------
    >>> import torch
    >>> from skfilter.weighting import IMQ
    >>> w = IMQ(threshold=2.0)(torch.tensor([[[0.0]], [[2.0]]], dtype=torch.float64))
    >>> (w ** 2).round(decimals=12).tolist()  # c² / (c² + e²)
    [[1.0], [0.5]]
    """

    takes_noise_covariance = False

    def weights(self, residual, predictive_covariance=None, noise_covariance=None):
        return _imq(((residual / self.threshold) ** 2).sum(-1))


class MahalanobisIMQ(WeightingFunction):
    """IMQ of the Mahalanobis distance under the observation covariance (thesis eq. 4.6):
    ``W = (1 + eᵀ R⁻¹ e / c²)^{−1/2}`` (``R``, not the innovation covariance ``S``). With
    ``R = σ² I`` it is :class:`IMQ` with threshold ``c σ``; ``c`` counts noise standard deviations.

    Examples
    --------
    >>> import torch
    >>> from skfilter.weighting import MahalanobisIMQ
    >>> R = torch.tensor([[[[4.0]]]], dtype=torch.float64)  # σ = 2
    >>> e = torch.tensor([[[2.0]]], dtype=torch.float64)
    >>> round(float(MahalanobisIMQ(threshold=1.0)(e, None, R) ** 2), 12)  # 1 / (1 + 1)
    0.5
    """

    def weights(self, residual, predictive_covariance, noise_covariance):
        return _imq(_quadratic(residual / self.threshold, noise_covariance))


class ThresholdedMahalanobis(WeightingFunction):
    """Detect-and-reject weight (thesis eq. 4.7, squared convention): ``W = 1`` if
    ``eᵀ R⁻¹ e ≤ c`` else ``0``. ``c`` bounds the **squared** distance (``c = 16``: four noise
    standard deviations for one output).

    Examples
    --------
    >>> import torch
    >>> from skfilter.weighting import ThresholdedMahalanobis
    >>> R = torch.ones(2, 1, 1, 1)
    >>> ThresholdedMahalanobis(threshold=9.0)(torch.tensor([[[3.0]], [[3.5]]]), None, R).tolist()
    [[1.0], [0.0]]
    """

    def weights(self, residual, predictive_covariance, noise_covariance):
        d2 = _quadratic(residual, noise_covariance)
        return (d2 <= self.threshold).to(residual.dtype)


class Huber(WeightingFunction):
    """Huber-type weight (an extension, not in the thesis): ``W² = min(1, c / ‖R^{−1/2} e‖)``.
    Bounded influence (``W² ‖e‖ → c σ``), not re-descending.

    Examples
    --------
    >>> import torch
    >>> from skfilter.weighting import Huber
    >>> R = torch.ones(2, 1, 1, 1)
    >>> (Huber(threshold=2.0)(torch.tensor([[[1.0]], [[8.0]]]), None, R) ** 2).tolist()
    [[1.0], [0.25]]
    """

    def weights(self, residual, predictive_covariance, noise_covariance):
        d = _quadratic(residual, noise_covariance).sqrt()
        w2 = torch.where(d > self.threshold, self.threshold / d.clamp_min(torch.finfo(d.dtype).tiny),
                         torch.ones_like(d))
        return w2.sqrt()


class PredictiveMahalanobisIMQ(WeightingFunction):
    """IMQ of the Mahalanobis distance under the prior predictive covariance ``S = H Σ⁻ Hᵀ + R``:
    ``W = (1 + eᵀ S⁺ e / c²)^{−1/2}`` (pseudo-inverse where ``S`` is singular).

    The weight of :class:`~skfilter.WoLFClassifier`. For a one-hot target the residual is bounded,
    but its *whitened* size is not: a label the filter gives probability ``p_y → 0`` has
    ``eᵀ S⁺ e ≳ 1/p_y → ∞``, and the plain update's mean shift grows like ``1/√p_y`` (a confidently
    wrong, e.g. flipped, label can throw the belief far). With this weight the shift is multiplied
    by ``W² ≤ c² / (eᵀ S⁺ e)``, so it stays bounded (and vanishes) as the label becomes arbitrarily
    surprising (Theorem 4.5's condition ``sup W² d < ∞`` in the whitened distance ``d``).

    Examples
    --------
    >>> import torch
    >>> from skfilter.weighting import PredictiveMahalanobisIMQ
    >>> S = torch.tensor([[[[0.25]]]], dtype=torch.float64)
    >>> e = torch.tensor([[[1.0]]], dtype=torch.float64)
    >>> round(float(PredictiveMahalanobisIMQ(threshold=2.0)(e, S, None) ** 2), 12)  # 4 / (4 + 4)
    0.5
    """

    needs_covariance = True
    takes_noise_covariance = False

    def weights(self, residual, predictive_covariance, noise_covariance=None):
        return _imq(_quadratic(residual / self.threshold, predictive_covariance))


class CallableWeighting(WeightingFunction):
    """A user's function ``fn(residual, S) → W`` (``S`` the prior predictive covariance) as a
    weighting function; its values are checked to lie in ``[0, 1]`` (a weight above one would
    sharpen the likelihood, and a negative or non-finite one has no meaning).

    Examples
    --------
    >>> import torch
    >>> from skfilter.weighting import CallableWeighting
    >>> half = CallableWeighting(lambda e, S: torch.full(e.shape[:-1], 0.5, dtype=e.dtype))
    >>> half(torch.zeros(1, 3, 1), torch.ones(1, 3, 1, 1)).tolist()
    [[0.5, 0.5, 0.5]]
    """

    needs_covariance = True
    takes_noise_covariance = False

    def __init__(self, function):
        if not callable(function):
            raise TypeError(f"weighting must be a name in {WEIGHTINGS} or a callable, got {function!r}.")
        self.function = function
        self.threshold = None

    def weights(self, residual, predictive_covariance, noise_covariance=None):
        w = torch.as_tensor(self.function(residual, predictive_covariance), dtype=residual.dtype,
                            device=residual.device)
        w = w.expand(residual.shape[:-1])
        if not bool(((w >= 0) & (w <= 1)).all()):
            raise ValueError("A weighting function must return weights in [0, 1]; got values outside "
                             f"(min {float(w.min()):.3g}, max {float(w.max()):.3g}).")
        return w

    def __repr__(self):
        return f"CallableWeighting({self.function!r})"

    def __eq__(self, other):
        return type(self) is type(other) and self.function is other.function

    def __hash__(self):
        return hash((type(self), id(self.function)))


_CLASSES = {"imq": IMQ, "md": MahalanobisIMQ, "tmd": ThresholdedMahalanobis, "huber": Huber,
            "predictive-md": PredictiveMahalanobisIMQ}


def make_weighting(weighting, threshold=None) -> WeightingFunction:
    """The weighting function for an estimator's ``weighting`` parameter: a name of
    :data:`WEIGHTINGS` with its ``threshold``, a :class:`WeightingFunction` (used as is), or a
    callable ``fn(residual, S) → W`` (:class:`CallableWeighting`).

    Examples
    --------
    >>> from skfilter.weighting import make_weighting
    >>> make_weighting("tmd", 16.0)
    ThresholdedMahalanobis(threshold=16.0)
    """
    if isinstance(weighting, WeightingFunction):
        return weighting
    if isinstance(weighting, str):
        if weighting not in _CLASSES:
            raise ValueError(f"weighting must be one of {WEIGHTINGS} or a callable, got {weighting!r}.")
        if not isinstance(threshold, numbers.Real) or isinstance(threshold, bool):
            raise TypeError(f"threshold must be a positive number, got {threshold!r}.")
        if not np.isfinite(threshold):
            raise ValueError(f"threshold must be finite, got {threshold!r}.")
        return _CLASSES[weighting](threshold)
    return CallableWeighting(weighting)


def influence_bound(weighting: WeightingFunction, n_outputs: int = 1, scale: float = 1.0,
                    largest: float = 1e12, n_points: int = 200) -> dict:
    """Check Theorem 4.5's conditions for ``weighting`` numerically: on a
    log-spaced grid of residual norms ``‖e‖ ∈ [1e−3, largest]·scale`` along one direction, with
    ``R = S = scale² I``, return ``{'sup_weight': max W, 'sup_influence': max W² ‖e‖,
    'tail_influence': W² ‖e‖ at the largest residual}``. An outlier-robust weight has a finite
    ``sup_influence`` that does not grow with ``largest``.

    Examples
    --------
    >>> from skfilter.weighting import IMQ, influence_bound
    >>> b = influence_bound(IMQ(threshold=1.0))
    >>> b["sup_weight"] <= 1.0, round(b["sup_influence"], 3)  # max of e / (1 + e²) is 1/2 at e = 1
    (True, 0.5)
    """
    e = torch.logspace(-3, float(np.log10(largest)), n_points, dtype=torch.float64) * scale
    direction = torch.ones(n_outputs, dtype=torch.float64) / np.sqrt(n_outputs)
    residual = (e[:, None] * direction)[:, None, :]  # (grid, 1, C)
    cov = (scale ** 2) * torch.eye(n_outputs, dtype=torch.float64).expand(n_points, 1, n_outputs, n_outputs)
    w = weighting(residual, cov, cov)[:, 0]
    influence = w ** 2 * e
    return {"sup_weight": float(w.max()), "sup_influence": float(influence.max()),
            "tail_influence": float(influence[-1])}
