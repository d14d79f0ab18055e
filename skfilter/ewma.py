"""The outlier-robust exponentially weighted moving average (WoLF-EWMA).

Thesis §4.7.5, eqs. 4.50–4.57. An EWMA ``m_t = α y_t + (1 − α) m_{t−1}``
is the Kalman filter of the local-level model ``z_t = z_{t−1} + N(0, q)``, ``y_t = z_t + N(0, r)`` with a
time-varying gain ``k_t`` (Prop. 4.19); its steady-state gain is ``k* = (−q + √(q² + 4 q r)) / (2 r)``
(``q``, ``r`` variances: ``q = 0.01``, ``r = 1`` give ``k* = 0.0951``, the thesis' ``α = 0.095``).
WoLF replaces ``r`` by ``r / w_t²`` with the IMQ weight of the prior-predictive residual,
``w_t = (1 + (y_t − m_{t−1})² / c²)^{−1/2}`` (4.54), so that in the safe forms (``s_p = s_{t−1} + q``)::

    k_t = w_t² s_p / (w_t² s_p + r)
    s_t = s_p r / (w_t² s_p + r)              (= k_t r / w_t²)
    m_t = m_{t−1} + k_t (y_t − m_{t−1})

As ``|y_t| → ∞``: ``m_t → m_{t−1}`` and ``s_t → s_{t−1} + q`` (the thesis writes ``s_{t−1}``).
``c = ∞`` is the Kalman EWMA. All of ``q``, ``r`` and ``s`` are variances; the authors' blog code
(un-squared ``c``, ``w⁴``, ``s = k r``) is not reproduced.

The same weighting makes skfilter's online observation-noise estimate robust
(``obs_variance='robust'``, :class:`skfilter.likelihoods.Gaussian`).
"""

from __future__ import annotations

import numbers

import numpy as np


class RobustEWMA:
    """Streaming outlier-robust EWMA (module docstring), one level per column.

    Parameters
    ----------
    process_variance : float
        ``q ≥ 0``: how fast the level may drift per step.
    obs_variance : float
        ``r > 0``: the noise variance of an observation around the level.
    threshold : float, default=numpy.inf
        IMQ soft threshold ``c > 0`` in the units of ``y``; ``inf`` gives the plain Kalman EWMA.
    initial_mean : float or array-like, default=0.0
        ``m_0``.
    initial_variance : float or array-like, default=1.0
        ``s_0``, the variance of ``m_0``.

    Attributes
    ----------
    mean_ : ndarray of shape (n_columns,)
        The current level ``m_t``.
    variance_ : ndarray of shape (n_columns,)
        Its variance ``s_t``.
    gain_ : ndarray of shape (n_columns,)
        The last gain ``k_t`` (the EWMA's ``α`` at step ``t``).
    weight_ : ndarray of shape (n_columns,)
        The last IMQ weight ``w_t``.
    n_steps_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter.ewma import RobustEWMA
    >>> y = np.r_[np.zeros(50), 1e6, np.zeros(5)]  # one gross outlier
    >>> plain = RobustEWMA(0.01, 1.0).filter(y)
    >>> robust = RobustEWMA(0.01, 1.0, threshold=0.05).filter(y)
    >>> bool(plain.means[-1, 0] > 1e4), bool(abs(robust.means[-1, 0]) < 1e-3)
    (True, True)
    """

    def __init__(self, process_variance, obs_variance, threshold=np.inf, initial_mean=0.0, initial_variance=1.0):
        self.process_variance = process_variance
        self.obs_variance = obs_variance
        self.threshold = threshold
        self.initial_mean = initial_mean
        self.initial_variance = initial_variance

    def _check(self):
        for name, low, strict in (("process_variance", 0.0, False), ("obs_variance", 0.0, True),
                                  ("threshold", 0.0, True)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError(f"{name} must be a number, got {v!r}.")
            if np.isnan(v) or (v <= low if strict else v < low) or (name != "threshold" and not np.isfinite(v)):
                raise ValueError(f"{name} must be {'>' if strict else '≥'} {low:g} and finite, got {v!r}.")

    def reset(self, n_columns=1):
        """Start from ``(initial_mean, initial_variance)`` with ``n_columns`` levels."""
        self._check()
        self.mean_ = np.broadcast_to(np.asarray(self.initial_mean, dtype=np.float64), (n_columns,)).copy()
        self.variance_ = np.broadcast_to(np.asarray(self.initial_variance, dtype=np.float64), (n_columns,)).copy()
        if np.any(self.variance_ < 0) or not np.all(np.isfinite(self.variance_)):
            raise ValueError("initial_variance must be non-negative and finite.")
        self.gain_ = np.zeros(n_columns)
        self.weight_ = np.ones(n_columns)
        self.n_steps_ = 0
        return self

    def update(self, y):
        """Condition on one observation per column (``y`` a scalar or ``(n_columns,)``); returns
        the new level ``m_t``. A non-finite ``y`` raises ``ValueError`` and changes nothing."""
        y = np.atleast_1d(np.asarray(y, dtype=np.float64))
        if not hasattr(self, "mean_"):
            self.reset(y.shape[0])
        if y.shape != self.mean_.shape:
            raise ValueError(f"y has shape {y.shape}, expected {self.mean_.shape}.")
        if not np.all(np.isfinite(y)):
            raise ValueError("y must be finite.")
        q, r, c = float(self.process_variance), float(self.obs_variance), float(self.threshold)
        residual = y - self.mean_
        w2 = np.ones_like(residual) if np.isinf(c) else c * c / (c * c + residual * residual)
        s_pred = self.variance_ + q
        denom = w2 * s_pred + r
        gain = w2 * s_pred / denom
        self.mean_ = self.mean_ + gain * residual
        self.variance_ = s_pred * r / denom
        self.gain_, self.weight_ = gain, np.sqrt(w2)
        self.n_steps_ += 1
        return self.mean_.copy()

    def filter(self, y):
        """Run from the initial state over the rows of ``y`` (``(T,)`` or ``(T, n_columns)``).

        Returns
        -------
        result : EWMAResult
            ``means``, ``variances``, ``gains`` and ``weights``, each of shape ``(T, n_columns)``.
        """
        y = np.asarray(y, dtype=np.float64)
        y2 = y.reshape(len(y), -1)
        self.reset(y2.shape[1])
        out = np.empty((4, *y2.shape))
        for t, row in enumerate(y2):
            self.update(row)
            out[:, t] = self.mean_, self.variance_, self.gain_, self.weight_
        return EWMAResult(*out)


class EWMAResult:
    """Per-step outputs of :meth:`RobustEWMA.filter` (arrays of shape ``(T, n_columns)``)."""

    def __init__(self, means, variances, gains, weights):
        self.means, self.variances, self.gains, self.weights = means, variances, gains, weights

    def __repr__(self):
        return f"EWMAResult(T={self.means.shape[0]}, n_columns={self.means.shape[1]})"


def steady_state_gain(process_variance: float, obs_variance: float) -> float:
    """``k* = (−q + √(q² + 4 q r)) / (2 r)``: the limit of the Kalman EWMA's gain.

    Examples
    --------
    >>> from skfilter.ewma import steady_state_gain
    >>> round(steady_state_gain(0.01, 1.0), 4)
    0.0951
    """
    q, r = float(process_variance), float(obs_variance)
    return float((-q + np.sqrt(q * q + 4 * q * r)) / (2 * r))
