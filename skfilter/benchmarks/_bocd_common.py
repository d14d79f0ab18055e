"""Helpers shared by the BOCD / BONE benchmarks (issue 17; spec/bone.md §3.3, §4 "Chapter 3").

* **Linear models as the thesis writes them.** The thesis' M.1 models are linear in given
  features, ``h(θ, x) = θᵀφ(x)``, with prior ``N(0, σ₀² I)`` over exactly those coefficients.
  skfilter's linear default (``hidden_layer_sizes=()``) carries a bias and starts from random
  weights, so the benchmarks pass a zero-weight ``torch.nn.Linear`` as ``module=``
  (:func:`linear_module`); with ``prior_variance=σ₀²`` (a float) the prior is ``N(0, σ₀² I)`` around
  it. Without a constant feature (the classification streams) the layer has no bias; when ``φ``
  contains the constant 1 (``φ(x) = (1, x, x²)``; the bandit's per-arm logit) the 1 is the layer's
  bias and the other features its inputs — the same model, on skfilter's fused fast path.
* **Method builders** for the thesis' Table 3.4: C-ACI is the base filter with ``process_noise=q``
  (eq. 3.15); CPP-OU is ``reset='cpp-ou'`` (eq. 3.14); RL[K]-PR ``reset='prior'`` (eq. 3.18, Alg. 8);
  RL[K]-MMPR ``reset='moment-matched'`` (eq. 3.57, Alg. 9); RL[1]-OUPR* ``reset='ou'`` (eqs.
  3.19–3.20, Alg. 10).
* :class:`Stepper` drives an estimator's run-length filter one row at a time through
  :func:`skfilter.runlength.runlength_step` (or a plain filter through
  :func:`skfilter.filtering.filter_step`) and exposes the state after every row: the run lengths,
  their log posterior, the one-step-ahead prediction. ``partial_fit`` per row gives the same but
  costs ~6 ms per call in validation (measured, 1 thread); the stepper costs what
  ``prequential_fit_predict`` costs per row (~1-2 ms at ``P ≤ 3``). It uses the same private set-up
  calls as :meth:`skfilter.bocd._BOCDMeta._run` (benchmark code only; tests/test_bocd_benchmarks.py
  checks it against ``prequential_fit_predict`` and ``partial_fit``).
* Tuning on one independent warm-up run (spec/bone.md §6.3: "the notebooks tune on one independent
  warm-up simulation and test on 100 fresh simulations"): :func:`tune`.
"""

from __future__ import annotations

import math

import numpy as np

#: the changepoint threshold ε of RL[1]-OUPR* in every experiment (the thesis' natural default)
OUPR_THRESHOLD = 0.5


# -- models ---------------------------------------------------------------------------------------
def linear_module(n_inputs: int, intercept: bool = False):
    """``Sequential(Linear(n_inputs, 1, bias=intercept))`` with zero weights (the prior mean ``μ₀ = 0``).

    With ``intercept`` the module is a one-layer MLP that skfilter's fused adapter differentiates in
    closed form (:class:`skfilter.models.MLPAdapter`, ~0.7 ms per BOCD step at ``P ≤ 3``); without,
    the general adapter's ``torch.func`` Jacobian (~2-3 ms per step)."""
    import torch

    m = torch.nn.Sequential(torch.nn.Linear(n_inputs, 1, bias=intercept, dtype=torch.float64))
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
    return m


def linear_classifier(n_inputs: int, prior_variance: float = 1.0, process_noise: float = 0.0,
                      intercept: bool = False):
    """Logistic regression ``y ~ Bern(σ(θᵀx))`` (plus an intercept with ``intercept``), prior
    ``N(0, prior_variance · I)`` over all coefficients, the Bernoulli EKF (mean-space linearisation,
    ``R = p(1 − p)``: the authors' ExpfamEKF)."""
    from .. import EKFClassifier

    return EKFClassifier(hidden_layer_sizes=(), module=linear_module(n_inputs, intercept),
                         prior_variance=float(prior_variance), process_noise=float(process_noise))


def linear_regressor(n_inputs: int, prior_variance: float = 1.0, obs_variance: float = 1.0,
                     process_noise: float = 0.0, intercept: bool = True):
    """Linear-Gaussian regression ``y ~ N(θᵀx (+ b), R)``, prior ``N(0, prior_variance · I)`` over all
    coefficients, known ``R = obs_variance``: the Kalman filter with ``F = I``. Features
    ``(x, x²)`` with the intercept are the thesis' ``φ(x) = (1, x, x²)``."""
    from .. import EKFRegressor

    return EKFRegressor(hidden_layer_sizes=(), module=linear_module(n_inputs, intercept),
                        prior_variance=float(prior_variance), obs_variance=float(obs_variance),
                        process_noise=float(process_noise))


def bocd(base, hazard=0.01, n_hypotheses=1, reset="prior", evidence="plain"):
    """``BOCDClassifier`` or ``BOCDRegressor`` (by the base's kind) with ``ε = 0.5``; the thesis'
    run-length evidence with ``R`` (``evidence='plain'``) unless told otherwise."""
    from sklearn.base import is_classifier

    from .. import BOCDClassifier, BOCDRegressor

    cls = BOCDClassifier if is_classifier(base) else BOCDRegressor
    return cls(base, hazard=float(hazard), n_hypotheses=n_hypotheses, reset=reset, threshold=OUPR_THRESHOLD,
               evidence=evidence)


# -- scores ---------------------------------------------------------------------------------------
def misclassification(est, X, y) -> float:
    """Prequential misclassification rate: each ``y_t`` predicted (the more probable class of the
    one-step-ahead predictive, made with ``D_{1:t−1}``) before it is learned. A run whose filter
    fails (:class:`~skfilter.exceptions.FilterStepError`, e.g. logits beyond 10⁴ under a large
    ``process_noise``) scores ``nan``."""
    from ..exceptions import FilterStepError

    try:
        proba = est.prequential_fit_predict(X, y, method="predict_proba", classes=[0, 1])
    except FilterStepError:
        return float("nan")
    return float(np.mean(np.argmax(proba, axis=1) != y))


def describe(values) -> dict:
    """``mean``, ``sd``, ``median``, ``min``, ``q1``, ``q3``, ``max`` and ``failed`` (non-finite values,
    excluded from the others) of a sequence of per-run scores."""
    v = np.asarray(values, dtype=np.float64)
    ok = v[np.isfinite(v)]
    if ok.size == 0:
        return {"mean": float("nan"), "sd": float("nan"), "median": float("nan"), "min": float("nan"),
                "q1": float("nan"), "q3": float("nan"), "max": float("nan"), "failed": int(v.size)}
    q1, med, q3 = np.percentile(ok, [25, 50, 75])
    return {"mean": float(ok.mean()), "sd": float(ok.std(ddof=1)) if ok.size > 1 else 0.0, "median": float(med),
            "min": float(ok.min()), "q1": float(q1), "q3": float(q3), "max": float(ok.max()),
            "failed": int(v.size - ok.size)}


def tune(make, grid, score):
    """The grid point with the lowest ``score(make(point))`` (first one on ties; ``nan`` = failed).

    Parameters
    ----------
    make : callable
        ``make(point) → estimator``.
    grid : sequence
    score : callable
        ``score(estimator) → float`` on the warm-up run.

    Returns
    -------
    (best_point, best_score, {point: score})
    """
    scores = {}
    for point in grid:
        scores[point] = score(make(point))
    finite = [(s, i) for i, s in enumerate(scores.values()) if math.isfinite(s)]
    if not finite:
        raise RuntimeError("every grid point failed on the warm-up run")
    s, i = min(finite)
    return list(scores)[i], s, scores


def fmt_grid(values) -> str:
    """``{a, b, c}`` with compact numbers."""
    return "{" + ", ".join(f"{v:g}" for v in values) + "}"


# -- stepping one row at a time ---------------------------------------------------------------------
class Stepper:
    """An estimator's filter stepped one row at a time, its state visible after every row.

    ``Stepper(est, X, y, classes=None)`` sets up ``est`` (a clone is not made: pass a fresh
    estimator) on the stream ``(X, y)`` exactly as ``fit`` would and stops before the first row.
    :meth:`step` learns row ``i`` and returns the one-step-ahead summary of that row made before
    learning it (the row ``prequential_fit_predict`` returns: regression ``(mean, variance,
    noise variance)`` per output, classification the class probabilities). After a step,
    :attr:`run_lengths` and :attr:`log_posterior` are those of the kept hypotheses (most probable
    first) and :attr:`changepoint_probability` that of the last step.

    A ``BOCD…`` estimator steps through :func:`skfilter.runlength.runlength_step` with its options; a
    plain filter (C-ACI, C-Static) through :func:`skfilter.filtering.filter_step` (one hypothesis of
    run length ``t``, never reset).
    """

    def __init__(self, est, X, y, classes=None):
        from .. import BOCDClassifier, BOCDRegressor
        from ..filtering import FilterState
        from ..runlength import initial_state

        self.estimator = est
        kw = {} if classes is None else {"classes": classes}
        self.is_bocd = isinstance(est, (BOCDClassifier, BOCDRegressor))
        if self.is_bocd:
            # the set-up of skfilter.bocd._BOCDMeta._run (first call), without its loop
            self.options = est._check_params()
            _, inner = est._filter_for(True, y, None)
            Xv, Yv, _, _ = inner._begin(X, y, None, reset=True, **kw)
            first = inner.filter_state_
            self.parts = inner._engine_parts()
            ref = self.parts.reference
            self.prior = FilterState(self.parts.structure.prior(ref.mean, ref.variance), first.noise, 0)
            self.state = initial_state(first)
            self._record = est._one_step_recorder(inner)
        else:
            inner = est
            Xv, Yv, _, cfg = inner._begin(X, y, None, reset=True, **kw)
            self.parts = inner._engine_parts()
            self.state = inner.filter_state_
            self._record = inner._one_step_recorder(cfg)
        self.inner = inner
        self.X = inner._tensor(Xv)
        self.Y = inner._tensor(inner._target_matrix(Yv))
        self.n_done = 0

    def step(self, i, X=None, Y=None):
        """Learn row ``i`` of the stream (or the given tensors ``X (1, D)``, ``Y (1, C)``); returns the
        one-step-ahead summary of the row as a 1-d NumPy array."""
        from ..stepping import filter_step
        from ..runlength import runlength_step

        Xi = self.X[i:i + 1] if X is None else X
        Yi = self.Y[i:i + 1] if Y is None else Y
        if self.is_bocd:
            self.state, out = runlength_step(self.parts, self.state, self.prior, Xi, Yi, None, record=self._record,
                                             **self.options)
        else:
            self.state, step_out = filter_step(self.parts, self.state, Xi, Yi, None, self._record)
            out = step_out.record
        self.n_done += 1
        return None if out is None else out.detach().cpu().numpy().reshape(-1)

    def learn(self, X, Y):
        """Learn one row given as tensors, without the prediction (bandits: the played arm)."""
        from ..stepping import filter_step
        from ..runlength import runlength_step

        if self.is_bocd:
            self.state, _ = runlength_step(self.parts, self.state, self.prior, X, Y, None, **self.options)
        else:
            self.state, _ = filter_step(self.parts, self.state, X, Y, None)
        self.n_done += 1

    # -- state --------------------------------------------------------------------------------
    @property
    def belief(self):
        """The belief (with a leading hypotheses axis for a run-length filter)."""
        return self.state.filter.belief if self.is_bocd else self.state.belief

    @property
    def run_lengths(self):
        if self.is_bocd:
            return self.state.run_lengths.cpu().numpy()
        return np.array([self.n_done])

    @property
    def log_posterior(self):
        if self.is_bocd:
            return self.state.filter.log_weights.detach().cpu().numpy()
        return np.zeros(1)

    @property
    def map_run_length(self) -> int:
        rl, lp = self.run_lengths, self.log_posterior
        return int(rl[int(np.argmax(lp))])

    @property
    def changepoint_probability(self) -> float:
        return float(self.state.changepoint_probability) if self.is_bocd else 0.0

    def mean_variance(self):
        """Mean and marginal variance of the most probable hypothesis' belief, NumPy ``(P,)`` each."""
        belief = self.belief
        var = self.parts.structure.marginal_variance(belief)
        mean = belief.mean
        if self.is_bocd:
            k = int(np.argmax(self.log_posterior))
            mean, var = mean[k], var[k]
        return mean.detach().cpu().numpy(), var.detach().cpu().numpy()
