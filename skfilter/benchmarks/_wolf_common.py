"""Helpers shared by the WoLF benchmarks (``wolf-tracking``, ``wolf-uci``, ``wolf-1d``; issue 16).

* :func:`timed_prequential` — one-step-ahead predictions (``prequential_fit_predict``) and their time.
* :func:`ogd_prequential` — the thesis' OGD baseline (spec/wolf-subspace-pulse.md §2.12: Adam on a
  FIFO replay buffer, ``n_inner`` gradient steps per observation; the authors' UCI script uses a
  buffer of one row, ``rebayes-mini`` ``FifoSGD(buffer_size=1)``) as a plain PyTorch loop.
* :func:`rmedse` — the root median squared error of eq. 4.45.
* :func:`grid_search` — the hyper-parameter choice on the first trial.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np


def rmedse(y, pred) -> float:
    """Root median squared error (thesis eq. 4.45): ``sqrt(median_t (y_t − ŷ_t)²)``.

    Parameters
    ----------
    y, pred : array-like of shape (n,)
        Observed (possibly corrupted) targets and one-step-ahead predictions.

    Returns
    -------
    float
        ``nan`` if any prediction is not finite (a diverged run).
    """
    y = np.asarray(y, dtype=np.float64).ravel()
    pred = np.asarray(pred, dtype=np.float64).ravel()
    if not np.all(np.isfinite(pred)):
        return float("nan")
    return float(np.sqrt(np.median((y - pred) ** 2)))


def timed_prequential(est, X, y):
    """``(predictions, seconds)`` of ``est.prequential_fit_predict(X, y)`` (each row predicted before
    it is learned; wall clock of the whole call)."""
    t0 = time.perf_counter()
    pred = est.prequential_fit_predict(X, y)
    return np.asarray(pred, dtype=np.float64), time.perf_counter() - t0


def ogd_prequential(X, y, *, lr, n_inner, hidden_layer_sizes, random_state=0, activation="relu"):
    """Online gradient descent with Adam (the thesis' OGD, §2.12), one-step-ahead predictions.

    For every row ``t``: predict ``ŷ_t = h(θ, x_t)`` with the current weights (recorded), then take
    ``n_inner`` Adam steps (``torch.optim.Adam(lr=lr)``, default betas) on the squared error
    ``(y_t − h(θ, x_t))²`` of that row: the authors' ``FifoSGD`` with ``buffer_size=1`` (the setting of
    their UCI script). The network is skfilter's default MLP (:func:`skfilter.models.make_mlp`,
    LeCun-normal weights, zero biases) drawn from ``random_state`` exactly as
    :class:`~skfilter.baselines.ReplaySGDRegressor` and the filters draw it (a float
    ``prior_variance``): the same initial weights as the filters it is compared with. The result equals
    ``ReplaySGDRegressor(buffer_size=1, n_inner=n_inner, optimizer='adam', lr=lr)``'s
    ``prequential_fit_predict`` (tests/test_wolf_benchmarks.py), without skorch's per-step overhead
    (~0.5 ms here), so that its time per step is a fair reference.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    y : ndarray of shape (n,)
    lr : float
    n_inner : int
    hidden_layer_sizes : tuple of int
    random_state : int, default=0
    activation : str, default='relu'

    Returns
    -------
    pred : ndarray of shape (n,)
        ``nan`` from the first row whose step gave non-finite weights on (diverged).
    seconds : float
        Wall-clock time of the loop.
    """
    import torch
    from sklearn.utils import check_random_state

    from ..models import make_mlp

    rng = check_random_state(random_state)
    seed = int(rng.randint(0, 2**31 - 1))
    net = make_mlp(X.shape[1], hidden_layer_sizes, 1, activation, seed)
    opt = torch.optim.Adam(net.parameters(), lr=float(lr))
    Xt = torch.as_tensor(np.asarray(X, dtype=np.float64))
    Yt = torch.as_tensor(np.asarray(y, dtype=np.float64)).reshape(-1, 1)
    n = Xt.shape[0]
    out = np.full(n, np.nan)
    t0 = time.perf_counter()
    for t in range(n):
        x, target = Xt[t:t + 1], Yt[t:t + 1]
        for k in range(int(n_inner)):
            opt.zero_grad(set_to_none=True)
            pred = net(x)
            if k == 0:
                out[t] = float(pred.detach())
            loss = ((pred - target) ** 2).mean()
            loss.backward()
            opt.step()
        if not math.isfinite(out[t]):
            out[t:] = np.nan
            break
    return out, time.perf_counter() - t0


def grid_points(grid: dict) -> list:
    """All combinations of ``grid`` (``{name: values}``) as dicts, in the grid's order."""
    names = list(grid)
    return [dict(zip(names, vals)) for vals in itertools.product(*(grid[k] for k in names))]


#: relative tolerance of :func:`grid_search`'s cost rule
COST_RTOL = 0.005


def grid_search(score, grid: dict, cost=None, rtol: float = COST_RTOL):
    """The point of ``grid`` with the lowest finite ``score(**point)``.

    With ``cost`` (a function of the point, e.g. its number of inner iterations), every point whose
    score is within ``rtol`` (relative) of the lowest counts as a tie, and the cheapest of them wins:
    iterations that do not change the error by more than 0.5 % are not paid for. Remaining ties go
    to the first point in grid order.

    Returns
    -------
    best : dict
    best_score : float
        ``nan`` (and the first point) when every point failed.
    """
    points = grid_points(grid)
    scores = []
    for point in points:
        try:
            s = float(score(**point))
        except Exception:  # noqa: BLE001 - a diverged or failed trial loses
            s = math.nan
        scores.append(s if math.isfinite(s) else math.inf)
    lowest = min(scores)
    if not math.isfinite(lowest):
        return points[0], math.nan
    if cost is None:
        i = scores.index(lowest)
        return points[i], lowest
    ties = [i for i, s in enumerate(scores) if s <= lowest * (1.0 + rtol)]
    i = min(ties, key=lambda j: (cost(points[j]), scores[j]))
    return points[i], scores[i]


def n_inner_cost(point: dict) -> float:
    """The cost of a grid point for :func:`grid_search`: its ``n_inner`` (1 without one)."""
    return float(point.get("n_inner", 1))


def format_params(params: dict) -> str:
    """``'c=4, n_inner=2'`` with compact numbers."""
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3g}"
        return str(v)

    return ", ".join(f"{k}={fmt(v)}" for k, v in params.items())
