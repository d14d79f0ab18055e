"""Data-scaled priors: ``prior_variance='auto'``, the default that learns on raw tabular data.

A filter's prior ``N(θ₀, Σ₀)`` fixes the scale of every function it will consider. One
``prior_variance`` for all weights, around LeCun-initialised weights, assumes standardised inputs
and targets: on raw features of scale 16 (digits) the first layer's pre-activations have standard
deviation ~16·√(fan-in fraction), logits saturate and the filter diverges; on raw targets of scale
70 (diabetes) the prior predictive has scale 1 and the reported uncertainty covers nothing.

``'auto'`` has two parts, both fixed by the stream's first ``n_prior_rows`` rows, however they
arrive (:mod:`skfilter.stream_start`: until then each call sets them again from all rows so far).

**Standardised inputs.** The default MLP becomes a :class:`~skfilter.models.StandardizedMLP`: it
standardises every input by the mean and standard deviation of those rows
(:func:`input_standardization`), frozen for the life of the model. For the full-covariance filter
this is a reparametrisation of the first layer only; for diagonal and low-rank beliefs it is what
keeps them well conditioned (raw iris: VD-EKF 0.76 → 0.91 accuracy, as on standardised features).

**A start that does not represent the stream** (issue 29). The first rows may be few, sorted or
grouped: a feature can be constant in them (UCI concrete's fly ash is 0 in its first 50 rows, then
up to 200; image border pixels; one-hot and count columns) or vary far less than later (concrete's
superplasticizer: standard deviation 0.5 in the first 50 rows, 6 over the stream; any feature
estimated from 2 rows). A later row then reaches the first layer as tens or hundreds of standard
deviations, its Jacobian is that much larger than the prior expects, the predicted logits saturate
and the filter's steps overshoot without bound: ``FilterStepError`` (logits 1e4) for
``LoFiClassifier``/``EKFClassifier`` fitted on concrete's first 50 rows (raw or standardised) then
learning the rest, and for a 784-pixel stream whose first call had 2 rows, on its third row. Two
rules keep the prior's input scale sane:

* a feature that does not vary in the first rows (a single row included) takes the scale
  ``max(|mean|, s)``, ``s`` the median standard deviation of the features that do vary (with none
  varying, the median ``|mean|`` of the nonzero features): the spread of the data it comes with,
  not an arbitrary 1 (it was ``max(|mean|, 1)``: fly ash then reached the network as 0-200);
* the standardised inputs are clipped to ``±INPUT_BOUND`` = ±5 inside the model
  (:class:`~skfilter.models.StandardizedMLP`, the fused adapter and the compiled kernels alike).
  Honest standardised data rarely reach 5 (a normal feature once in 1.7 million rows); a feature
  whose first rows under-state its spread saturates there instead of sending the pre-activations
  to extremes. The pooled scale alone did not suffice (concrete with its prior from 2 rows,
  the 784-pixel stream: still ``FilterStepError``); clipped at 20 or 10 concrete learned but a
  3-feature stream whose first 4 rows under-state every spread 10-3000× still diverged (EKF with
  5 and 50 hidden units); at 5 (and 3, 2) it learns. On concrete (prequential, rows 50-499, prior
  from the first ``k`` = 1, 2, 5, 50 rows), clipping at 5 rather than 10 scored as well or better
  (classification accuracy 0.77-0.86 against 0.77-0.83, regression RMSE/σ 0.52-0.63 against
  0.52-0.64), where the old rule diverged at every ``k`` on the classification stream.

A feature constant in the first rows and of a much smaller unit than the others (a 0/1 column beside
columns in the hundreds) is under-used at first (its inputs are small), which is safe; the filter
can still grow its weights. A constant feature whose mean is rounded (yacht's hull columns over its
first 10 rows: ``m_i ≈ 1e-32``, not 0) counts as constant in the prior below (it gave first-layer
weights of 1e16 and logits of 3e14 on the next row).

Measured with ``python -m skfilter.benchmarks prior-rows`` (doc/prior_rows_table.md: 21 streams
from scikit-learn's and the UCI sets, raw features, EKF, LoFi, LRKF, HiLoFi, LoLoFi, WoLF and BOCD
with default parameters, prior from the first ``k`` rows, then one row at a time): with the
previous rule 13 of 126 (family, stream, ``k ≤ 5``) runs on 6 streams diverged, and concrete
classification at every ``k`` ≤ 50; with these rules no run diverges at any ``k`` from 1 to 200
except ``LoLoFiClassifier``, which also diverges with its prior from all rows on standardised
features (a fault of its update, not of the scaling).

The output side keeps :func:`target_scale`: from one or two rows it is crude (one row: scale
``max(|y|, 1)``) but did not diverge anywhere; a target constant over the first rows (naval: 0.95
for 234 rows, standard deviation 4e-4 after) gets scale 1, and the filter then hardly learns it.

**A prior scaled to the data.** The prior predictive matches the first two moments of those rows,
layer by layer, as the initialisation does for standardised data (LeCun: ``Var = 1/fan_in``):

* first layer, weight from input ``i``: variance ``1 / (D · m_i)`` with ``m_i = mean(x_i²)`` of the
  input as the first Linear sees it (1 once standardised; so that each pre-activation
  ``Σ_i w_i x_i`` has unit prior variance whatever the feature scales); its initial value (the
  prior mean) is the LeCun draw scaled by ``1/√m_i``. A feature that is zero, or constant in
  those rows once standardised (only rounding residue left), takes ``m_i = 1``: a variance of
  ``1/(D · 1e-32)`` would make every later row that varies in it stiff;
* hidden and output layers: variance ``1 / fan_in`` (the initialisation's);
* biases: variance 1 (prior mean 0);
* regression output ``c`` (targets ``y_c`` of centre ``ȳ_c`` and scale ``s_c``): the output layer's
  row ``c`` is scaled by ``s_c`` (prior mean and standard deviation), its bias has prior mean
  ``ȳ_c`` and variance ``s_c²``. ``ȳ_c`` and ``s_c`` are the median and the MAD-based standard
  deviation of those rows' targets (:func:`target_scale`: robust to outliers among them).

On standardised data (``m_i = 1``, ``ȳ = 0``, ``s = 1``) this is LeCun's initialisation with prior
variance ``1/fan_in`` per weight. The ``prior_scale`` factor multiplies every variance. For a user
module (not the default MLP) the per-layer fan-in rule applies to every parameter with two or more
axes (``1 / prod(shape[1:])``), 1 to the others, and no data scaling is done: standardise the
inputs (and targets) of a custom module.
"""

from __future__ import annotations

import numpy as np
import torch


def _moments(a: np.ndarray, weights=None):
    """Column-wise weighted mean and standard deviation of ``a (n, C)`` (unit weights for None or
    weights of no total), computed as ``numpy.average`` computes them (the same rounding)."""
    a = np.asarray(a, dtype=np.float64)
    w = np.ones(a.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    if not w.sum() > 0:
        w = np.ones(a.shape[0])
    if a.ndim != 2 or w.shape != a.shape[:1]:
        mean = np.average(a, axis=0, weights=w)
        return mean, np.sqrt(np.average((a - mean) ** 2, axis=0, weights=w))
    w = w[:, None]  # numpy.average's own steps, without its checks (a few µs per call on small arrays)
    total = w.sum(axis=0)
    mean = np.multiply(a, w).sum(axis=0) / total
    return mean, np.sqrt(np.multiply((a - mean) ** 2, w).sum(axis=0) / total)


#: standardised inputs of the default MLP are clipped to ``[−INPUT_BOUND, INPUT_BOUND]`` (module docstring)
INPUT_BOUND = 5.0


def input_standardization(X: np.ndarray, weights=None):
    """``(offset, scale)`` per feature of the rows ``X (n, D)`` a stream starts with: their
    (weighted) mean and standard deviation. A feature that does not vary in those rows (or a
    single row) keeps offset ``mean`` and gets scale ``max(|mean|, s)``, ``s`` the median standard
    deviation of the features that vary (with none varying, the median ``|mean|`` of the nonzero
    features; 1 if all are 0): the scale of the data it is seen with, not an arbitrary 1 (module
    docstring).

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter.priors import input_standardization
    >>> offset, scale = input_standardization(np.array([[1.0, 5.0, 0.0], [3.0, 5.0, 0.0]]))
    >>> offset.tolist(), scale.tolist()
    ([2.0, 5.0, 0.0], [1.0, 5.0, 1.0])
    """
    mean, std = _moments(X, weights)
    mag = np.abs(mean)
    varies = _varies(mean, std)
    if np.any(varies):
        pool = np.median(std[varies])
    else:
        pool = np.median(mag[mag > 0]) if np.any(mag > 0) else 1.0
    return mean, np.where(varies, std, np.maximum(mag, pool))


def _varies(mean, std):
    """Which features vary in the rows of moments ``(mean, std)``: a standard deviation above
    ``1e-8 · max(|mean|, 1)`` (below it, what is left after subtracting the mean is rounding)."""
    return std > 1e-8 * np.maximum(np.abs(mean), 1.0)


def _weighted_median(a: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """Column-wise weighted median of ``a (n, C)`` (the lower median for even total weight; unit
    weights for None)."""
    if w is None:  # unit weights: the cumulated weight first reaches n/2 at sorted position ⌈n/2⌉ − 1
        return np.sort(a, axis=0)[(a.shape[0] + 1) // 2 - 1]
    order = np.argsort(a, axis=0, kind="stable")
    a_sorted = np.take_along_axis(a, order, axis=0)
    cum = np.cumsum(w[order], axis=0)
    idx = np.argmax(cum >= 0.5 * cum[-1], axis=0)
    return a_sorted[idx, np.arange(a.shape[1])]


#: ``1 / Φ⁻¹(3/4)``: the median absolute deviation times this estimates a normal standard deviation
MAD_TO_STD = 1.482602218505602


def target_scale(Y: np.ndarray, weights=None):
    """``(centre, scale)`` per output of the targets ``Y (n, C)``, robust to outliers among them:
    the (weighted) median and ``1.4826 × median |y − median|`` (the normal standard deviation the
    median absolute deviation estimates). Where that is 0 (more than half the targets equal), the
    (weighted) standard deviation; where the targets do not vary at all (one row),
    ``max(|centre|, 1)``.

    A single gross outlier among the first rows (``y = 1e6`` among values of scale 1) moves neither:
    the prior and the first noise estimate of ``'auto'`` keep the scale of the other targets.

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter.priors import target_scale
    >>> centre, scale = target_scale(np.array([[1.0], [2.0], [3.0], [1e6]]))
    >>> centre.tolist(), scale.round(3).tolist()
    ([2.0], [1.483])
    """
    Y = np.asarray(Y, dtype=np.float64)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    if w is not None and not w.sum() > 0:
        w = None
    centre = _weighted_median(Y, w)
    mad = MAD_TO_STD * _weighted_median(np.abs(Y - centre), w)
    _, std = _moments(Y, w)
    fallback = np.maximum(np.abs(centre), 1.0)
    return centre, np.where(mad > 0, mad, np.where(std > 0, std, fallback))


def auto_prior(adapter, X: np.ndarray, Y: np.ndarray | None = None, prior_scale: float = 1.0, weights=None):
    """The data-scaled prior of the module docstring: ``(θ₀, σ₀²)``, two ``(P,)`` tensors on the
    adapter's device and dtype.

    Parameters
    ----------
    adapter : skfilter.models.ModuleAdapter
        Its ``initial_theta()`` is the unscaled initialisation.
    X : ndarray of shape (n, D)
        The first rows of the stream.
    Y : ndarray of shape (n, C) or None
        Regression targets of those rows (None for classification: logits keep unit scale).
    prior_scale : float
        Multiplies every prior variance.
    weights : ndarray of shape (n,) or None
        Sample weights of the rows (a row of weight 0 does not count, as in the update).

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter.models import make_adapter, make_mlp
    >>> from skfilter.priors import auto_prior
    >>> import torch
    >>> adapter = make_adapter(make_mlp(2, (3,), 1, seed=0), torch.device("cpu"), torch.float64, 2)
    >>> X = np.array([[10.0, 0.1], [-10.0, -0.1]])
    >>> mean, var = auto_prior(adapter, X)
    >>> var[:2].round(decimals=12).tolist()  # first hidden unit's weights: 1 / (D · mean(x_i²))
    [0.005, 50.0]
    """
    theta = adapter.initial_theta().clone()
    opts = {"dtype": theta.dtype, "device": theta.device}
    var = torch.ones_like(theta)
    layer_shapes = getattr(adapter, "_layer_shapes", None)
    if layer_shapes is None:  # any module: fan-in rule per parameter, no data scaling
        for name, shape, a, b in zip(adapter._names, adapter._shapes, adapter._offsets[:-1], adapter._offsets[1:]):
            if len(shape) >= 2:
                var[a:b] = 1.0 / float(np.prod(shape[1:]))
        return theta, var * prior_scale
    w = None if weights is None or not np.sum(weights) > 0 else np.asarray(weights, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    offset, scale = (getattr(adapter.module, k, None) for k in ("input_offset", "input_scale"))
    varies = np.ones(X.shape[1], dtype=bool)
    if offset is not None:  # a StandardizedMLP: the first Linear sees standardised inputs
        # a feature constant in these rows keeps, once standardised, rounding residue of size
        # ~eps: its m_i (~1e-32) would give its weights a prior variance ~1e31, which makes every
        # later step whose rows vary in that feature stiff (stiffness_limit: the compiled kernels
        # then hand each step to the torch engine's square-root forms, ~20x slower). A constant
        # feature gets m_i = 1, as an exactly zero one does.
        varies = _varies(*_moments(X, w))
        X = (X - offset.detach().cpu().double().numpy()) / scale.detach().cpu().double().numpy()
        bound = getattr(adapter.module, "input_bound", None)
        if bound is not None:
            X = np.clip(X, -bound, bound)
    m2 = np.average(X ** 2, axis=0, weights=w)
    # a feature constant in these rows has m2 = 0, or ~1e-32 where its mean is rounded: not a scale
    m2 = np.where((m2 > 1e-12 * max(float(m2.max(initial=0.0)), 1.0)) & varies, m2, 1.0)
    k = 0
    n_layers = len(layer_shapes)
    for l, (o, i) in enumerate(layer_shapes):
        W = theta[k:k + o * i].view(o, i)
        Wv = var[k:k + o * i].view(o, i)
        if l == 0:
            inv_sd = torch.as_tensor(1.0 / np.sqrt(m2), **opts)
            W.mul_(inv_sd)
            Wv.copy_((inv_sd * inv_sd / i).expand(o, i))
        else:
            Wv.fill_(1.0 / i)
        k += o * i
        if l == n_layers - 1 and Y is not None:
            ybar, s = (torch.as_tensor(v, **opts) for v in target_scale(Y, w))
            W.mul_(s[:, None])
            Wv.mul_((s * s)[:, None])
            theta[k:k + o] = ybar
            var[k:k + o] = s * s
        k += o
    return theta, var * prior_scale
