"""Run-length filtering: BONE's changepoint machinery over any filter, on the engine's hypotheses axis.

BONE (Duran-Martin et al. 2025), in its thesis version: Ch. 3, §3.1–§3.3. A run-length filter keeps
``K`` hypotheses about how many rows the current regime has lasted, each with its own belief (any
posterior structure, any likelihood, robust weighting included: the base filter's
:class:`~skfilter.filtering.EngineParts`), and weighs them by their posterior probability
``ν_t(r) = p(r_t = r | D_{1:t})``. One step on a block of rows (``batch_size`` rows, usually one):

**RL[K]-PR** (``reset='prior'``; Alg. 8, eqs. 3.46–3.53) — BOCD with the ``K`` most probable run
lengths (``K = None``: all of them, exact BOCD):

1. candidates: the ``K`` kept hypotheses moved by the base filter's dynamics (growth, ``r ← r + n``)
   and one changepoint hypothesis ``r = 0`` whose prior is the reference ``N(μ₀, Σ₀)`` itself (the
   stream's prior, no dynamics: Alg. 8's ``ℓ₀``), with the noise estimate of the most probable
   hypothesis (a regime change resets the parameters, not the noise level);
2. all ``K + 1`` go through one batched :func:`~skfilter.filtering.filter_step` (robust weights and
   update on the leading hypotheses axis — no loop over hypotheses); its recorder gives
   each candidate's log predictive density of the rows ``ℓ_k = log p(y | r_k, D_{1:t−1})``
   (:meth:`~skfilter.likelihoods.Likelihood.log_predictive`, from the *prior* predictive; under a
   robust weighting with ``R / W²`` by default, so that outliers the weights discount do not open
   regimes — ``weighted_evidence=False`` takes ``R``; for the Poisson
   likelihood a Gaussian approximation of the count's predictive, so the evidence is approximate);
3. log joints: growth ``ℓ_k + log ν_{t−1}(k) + log(1 − H)``; changepoint
   ``ℓ_0 + log Σ_k ν_{t−1}(k) + log H`` (the corrected line 13 of Alg. 8: the joints *before* this
   step, times the hazard);
4. the log evidence of the rows is the log-sum-exp of the joints; the ``K`` largest joints are kept
   and renormalised (eq. 3.36), ranked on a grid of ``2⁻³⁰`` in ``log ν`` (:func:`_keep`: weights
   equal to ~1e-9 relative tie) and ties to the longer run, so that the choice is deterministic and
   rounding does not make it.

With ``batch_size > 1`` a step holds several rows and changepoints fall on step boundaries only
(run lengths still count rows). The changepoint hypothesis follows the thesis' convention
(thesis §3.3.1): the rows of the step are the first rows of the new regime — evaluated under the
prior, *then learned* by the ``r = 0`` belief; with ``K = None`` this is exact BOCD (it equals
brute-force enumeration of all segmentations). The authors' library instead keeps the un-updated prior for ``r = 0``.

**RL[K]-MMPR** (``reset='moment-matched'``; Alg. 9, eqs. 3.54–3.57): as RL[K]-PR, but the
changepoint hypothesis starts from the Gaussian moment-matched to the mixture of the kept beliefs
after the base's dynamics, with weights ``ν_{t−1}`` (normalised, as the printed weights are not;
:meth:`~skfilter.posteriors.Structure.moment_match`), and no dynamics of its own.

**RL[1]-OUPR*** (``reset='ou'``; Alg. 10, eq. 3.58): one hypothesis. With ``p₁`` the predictive of
the rows under the previous posterior and ``p₀`` under the prior,
``ν = σ(log p₁ − log p₀ + log((1 − H)/H))`` is the probability that the regime continues. If
``ν > ε`` the prior of the step is the previous posterior shrunk towards the reference (OU,
``μ̄ = ν μ + (1 − ν) μ₀``, ``Σ̄ = ν² Σ + (1 − ν²) Σ₀``; :mod:`skfilter.dynamics`), else the reference
itself (hard reset); then the rows are learned in both branches.

**CPP-OU** (``reset='cpp-ou'``; eqs. 3.14, 3.43–3.45, a gradual baseline of Table 3.4, not a
run-length rule): one belief, shrunk every step towards the reference by the same OU map with the
``υ`` that maximises the predictive density of the rows (empirical Bayes), chosen among
:data:`CPP_GRID` — all candidates linearised in one batched call (Titsias et al. take a few gradient
steps on the same objective). ``changepoint_probability`` is ``1 − υ``.

**Compiled.** :func:`run_runlength` offers the rows to the compiled kernels first: RL[K]-PR
(``reset='prior'``, an integer ``K``) over every compiled base filter and RL[K]-MMPR
(``reset='moment-matched'``) over the compiled diagonal, full and factored ones (LoFi has no moment
match) (:class:`skfilter.stepping.RunLengthPlan`, :mod:`skfilter.kernels.runlength`), and
RL[1]-OUPR* and CPP-OU (``reset='ou'``, ``'cpp-ou'``) over LoFi, the VD/FD-EKF, the full-covariance
EKF and the factored covariance (LRKF, HiLoFi, LoLoFi), their dynamics (decay, process noise: one
value, or per block over the factored covariance) and a built-in robust weighting (BOCD over WoLF,
weighted evidence or not) included (:class:`skfilter.stepping.ReversionPlan`;
:mod:`skfilter.kernels.reversion`, ``reversion_diagonal``, ``reversion_full``,
``reversion_factored``), one row per step, under every likelihood the kernels have (the
moment-matched categorical's evidence included); both equal this module's step to rounding.
Everything else — exact BOCD, several rows per step — and any row a kernel cannot finish, runs
:func:`runlength_step`.

The state (:class:`RunLengthState`) holds the hypotheses as a mixture
:class:`~skfilter.filtering.FilterState` (``log_weights`` normalised), their run lengths, the log
evidence so far and the changepoint probability of the last step.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch

from .dynamics import Dynamics, apply_dynamics
from .exceptions import FilterStepError
from .filtering import FilterState
from .kernels.runlength import KEEP_GRID
from . import stepping
from .stepping import filter_step, runlength_plan_for
from .posteriors import map_belief

RESETS = ("prior", "moment-matched", "ou", "cpp-ou")

#: the values of ``υ`` (the probability that the parameters carry over) among which ``'cpp-ou'``
#: picks the empirical-Bayes one each step: dense near 1, where slow forgetting lives
CPP_GRID = (1.0, 0.9999, 0.999, 0.997, 0.99, 0.97, 0.9, 0.8, 0.6, 0.4, 0.2, 0.0)


class RunLengthState(NamedTuple):
    """A run-length filter's state: ``filter`` (a mixture :class:`~skfilter.filtering.FilterState`
    with ``K`` hypotheses and normalised ``log_weights``), ``run_lengths`` ``(K,)`` (``r``: the
    hypothesis' regime began ``r`` rows before the last one, so its belief holds ``r + 1`` rows, as
    in the thesis; the initial hypothesis, begun before the first row, counts one more),
    ``log_evidence`` (the
    sum of the log predictive densities of the rows so far, ``log p(D_{1:t})``) and
    ``changepoint_probability`` (the weight of ``r = 0`` after the last step, before pruning)."""

    filter: FilterState
    run_lengths: torch.Tensor
    log_evidence: float
    changepoint_probability: float


def _host_copyable(*tensors) -> bool:
    """Whether plain copies of these tensors may go through NumPy: on the CPU, without autograd."""
    return all(t.device.type == "cpu" and not t.requires_grad for t in tensors)


def _cat(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.cat([a, b])``; on the CPU by NumPy, single-threaded: torch's parallel copy of a
    stack of beliefs (e.g. ``(K + 1) × L × P``) waits for a second thread at every call, which on a
    machine whose cores are busy costs milliseconds per row (measured: BOCD K = 10 over LoFi-10 at
    P = 501 under a load of 3 on 2 cores, 23 ms/row against 1.4 ms with one torch thread). Same
    values (a copy). Trailing shapes that differ but broadcast — a prior-predictive precision kept
    as one value in one hypothesis and per parameter in another (after a shrink by a per-parameter
    reference variance) — are broadcast first."""
    if a.shape[1:] != b.shape[1:]:
        tail = torch.broadcast_shapes(a.shape[1:], b.shape[1:])
        a, b = a.expand(a.shape[0], *tail), b.expand(b.shape[0], *tail)
    if _host_copyable(a, b) and a.dtype == b.dtype:
        return torch.from_numpy(np.concatenate([a.numpy(), b.numpy()]))
    return torch.cat([a, b])


def _gather(v: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``v[index]`` along the leading axis (``index`` a 1-d integer tensor); on the CPU by NumPy, for
    the reason of :func:`_cat`."""
    if _host_copyable(v, index):
        return torch.from_numpy(np.take(v.numpy(), index.numpy(), axis=0))
    return v[index]


def _concat(a: Any, b: Any):
    """Concatenate two values along the leading hypotheses axis (tensors, beliefs, noise dicts)."""
    if isinstance(a, torch.Tensor):
        return _cat(a, b)
    if isinstance(a, dict):
        return {k: _cat(a[k], b[k]) for k in a}
    if isinstance(a, tuple):
        parts = [_concat(x, y) for x, y in zip(a, b)]
        return type(a)(*parts) if hasattr(a, "_fields") else tuple(parts)
    return a


def _take(value: Any, index: torch.Tensor):
    """The hypotheses ``index`` (a 1-d tensor) of a value with a leading hypotheses axis."""
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: _gather(v, index) for k, v in value.items()}
    return map_belief(lambda v: _gather(v, index), value)


def _with_axis(value: Any):
    """A value without hypotheses axis as one hypothesis (leading axis of length 1)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: v.unsqueeze(0) for k, v in value.items()}
    return map_belief(lambda v: v.unsqueeze(0), value)


def initial_state(prior: FilterState) -> RunLengthState:
    """The state before any row: one hypothesis, run length 0, the prior (log weight 0)."""
    mean = prior.belief.mean
    return RunLengthState(FilterState(_with_axis(prior.belief), _with_axis(prior.noise), prior.n_seen,
                                      torch.zeros(1, dtype=mean.dtype, device=mean.device)),
                          torch.zeros(1, dtype=torch.long, device=mean.device), 0.0, 0.0)


def _log_hazards(hazard: float):
    log_h = math.log(hazard) if hazard > 0 else -math.inf
    log_s = math.log1p(-hazard) if hazard < 1 else -math.inf
    return log_h, log_s


def runlength_step(parts, state: RunLengthState, prior: FilterState, X, Y, sample_weight=None, *,
                   hazard: float, n_hypotheses, reset: str = "prior", threshold: float = 0.5,
                   weighted_evidence: bool = False, record=None):
    """One run-length step on the rows ``X (B, D)``, ``Y (B, C)`` (module docstring).

    Parameters
    ----------
    parts : skfilter.filtering.EngineParts
        The base filter's parts (its dynamics apply to every continuing hypothesis before each step).
    state : RunLengthState
    prior : skfilter.filtering.FilterState
        The reference belief and initial noise state (no hypotheses axis): the changepoint prior.
    hazard : float
        ``H ∈ [0, 1]``, the prior probability of a changepoint at each step.
    n_hypotheses : int or None
        ``K``, the hypotheses kept (``None``: all).
    reset : {'prior', 'moment-matched', 'ou'}
    threshold : float
        ``ε`` of ``'ou'``.
    weighted_evidence : bool, default False
        With a robust weighting in ``parts``, score the hypotheses with ``R / W²`` (the weighted
        likelihood's predictive): an outlier the weights discount then opens no new regime.
        ``False``: with ``R`` (the thesis' natural reading). Without weighting both are the same.
        (The estimators' ``evidence`` parameter defaults to the weighted form.)
    record : callable, optional
        ``record(f, quad, noise, weights)`` with the candidates' prior-predictive outputs
        ``f (K', B, C)``, ``J Σ⁻ Jᵀ`` ``(K', B, C, C)``, their noise state and the weights ``(K',)``
        under which the mixture predicted these rows (0 for the changepoint candidate): the
        one-step-ahead prediction of the rows.

    Returns
    -------
    (RunLengthState, record_output)
    """
    if reset == "ou":
        return _oupr_step(parts, state, prior, X, Y, sample_weight, hazard=hazard, threshold=threshold,
                          weighted_evidence=weighted_evidence, record=record)
    if reset == "cpp-ou":
        return _cpp_step(parts, state, X, Y, sample_weight, weighted_evidence=weighted_evidence, record=record)
    log_h, log_s = _log_hazards(hazard)
    hyp = state.filter
    K = hyp.log_weights.shape[0]
    # the base's dynamics move the continuing hypotheses; a new regime starts from the reference
    # itself (Alg. 8's ℓ₀ under (μ₀, Σ₀)), or from the moment-matched mixture of the predicted beliefs
    predicted = apply_dynamics(parts.structure, hyp.belief, parts.dynamics, parts.reference)
    if reset == "moment-matched":
        cp_belief = parts.structure.moment_match(predicted, hyp.log_weights)
    else:
        cp_belief = prior.belief
    # the new regime keeps the stream's noise estimate: that of the most probable hypothesis
    cp_noise = None if hyp.noise is None else {k: v[_most_probable(hyp.log_weights)] for k, v in hyp.noise.items()}
    candidates = FilterState(_concat(predicted, _with_axis(cp_belief)), _concat(hyp.noise, _with_axis(cp_noise)),
                             hyp.n_seen)
    captured = {}

    def capture(X_, f, quad, noise, predicted):
        captured["f"], captured["quad"], captured["noise"] = f, quad, noise
        return None

    capture.needs_belief = False  # the compiled kernels may run the candidates' step (skfilter.kernels)

    new, step = filter_step(parts._replace(dynamics=Dynamics()), candidates, X, Y, sample_weight, capture)
    f, quad = captured["f"], captured["quad"]
    robust = step.weights if weighted_evidence else None
    lp = _log_predictive(parts.likelihood, f, quad, Y, captured["noise"], robust)  # (K+1, B)
    if sample_weight is not None:  # a row of weight w counts w times in the evidence, as in the update
        lp = lp * sample_weight.to(lp.dtype)
    lp = lp.sum(-1)
    if not bool(torch.isfinite(lp).all()):
        raise FilterStepError("A hypothesis' log predictive density is not finite; the last good state is kept.")
    log_joint = torch.cat([lp[:K] + hyp.log_weights + log_s, (lp[K] + log_h).reshape(1)])
    log_evidence_step = torch.logsumexp(log_joint, 0)
    log_post = log_joint - log_evidence_step
    cp_prob = float(log_post[K].exp())
    n_rows = X.shape[0]
    run_lengths = torch.cat([state.run_lengths + n_rows, torch.zeros(1, dtype=torch.long,
                                                                     device=state.run_lengths.device)])
    keep = _keep(log_post, run_lengths, n_hypotheses)
    log_post = log_post[keep]
    log_post = log_post - torch.logsumexp(log_post, 0)
    out = None
    if record is not None:
        weights = torch.cat([hyp.log_weights.exp(), torch.zeros(1, dtype=f.dtype, device=f.device)])
        out = record(f, quad, captured["noise"], weights)
    new_filter = FilterState(_take(new.belief, keep), _take(new.noise, keep), new.n_seen, log_post)
    return RunLengthState(new_filter, run_lengths[keep], state.log_evidence + float(log_evidence_step),
                          cp_prob), out


def _weight_key(log_weights):
    """The log weights on the grid the hypotheses are ranked on, ``⌊log ν · 2³⁰ + ½⌋`` (float64;
    :data:`~skfilter.kernels.runlength.KEEP_GRID`, the kernels' :func:`~skfilter.kernels.runlength.weight_key`):
    weights equal to ~1e-9 relative count as tied."""
    return torch.floor(log_weights.to(torch.float64) * KEEP_GRID + 0.5)


def _most_probable(log_weights) -> int:
    """Index of the most probable hypothesis: the largest :func:`_weight_key`, the first on ties."""
    return int(torch.argmax(_weight_key(log_weights)))


def _keep(log_post, run_lengths, n_hypotheses):
    """Indices of the hypotheses kept: finite weights, the ``n_hypotheses`` most probable, ranked by
    their weights on a grid (:func:`_weight_key`, decreasing), then by run length (the longer first),
    then by index — deterministically, and as the compiled kernels rank them
    (:func:`skfilter.kernels.runlength.keep_order`). Weights that agree in exact arithmetic (the
    moment-matched changepoint candidate can tie with a continuing hypothesis) may differ in their
    last bits; on the grid they tie, so rounding does not decide which one is kept."""
    finite = torch.isfinite(log_post)
    # sort by the weight's key, then by run length (both descending), then by index (stable)
    order = torch.argsort(run_lengths.to(torch.float64), descending=True, stable=True)
    order = order[torch.argsort(_weight_key(log_post)[order], descending=True, stable=True)]
    order = order[finite[order]]
    if n_hypotheses is not None:
        order = order[:n_hypotheses]
    return order


def _log_predictive(likelihood, f, quad, Y, noise, robust):
    """``likelihood.log_predictive`` with the robust weights when there are some."""
    if robust is None:
        return likelihood.log_predictive(f, quad, Y, noise)
    return likelihood.log_predictive(f, quad, Y, noise, weights=robust)


def _robust_weights(parts, f, quad, Y, noise):
    """The robust weights ``W (K', B)`` of the base's weighting stage for candidates linearised
    outside :func:`~skfilter.filtering.filter_step` (None without weighting)."""
    weighting = parts.weighting
    if weighting is None:
        return None
    likelihood = parts.likelihood
    residual = Y - likelihood.predictive_mean(f, quad, noise)
    S = likelihood.predictive_covariance(f, quad, noise)
    if getattr(weighting, "takes_noise_covariance", False):
        w = weighting(residual, S, likelihood.noise_covariance(f, noise))
    else:
        w = weighting(residual, S)
    return torch.as_tensor(w, dtype=f.dtype, device=f.device).expand(f.shape[:-1])


def _oupr_step(parts, state, prior, X, Y, sample_weight, *, hazard, threshold, weighted_evidence, record):
    """RL[1]-OUPR* (Alg. 10; module docstring)."""
    structure = parts.structure
    hyp = state.filter
    belief = map_belief(lambda v: v[0], hyp.belief)
    noise = None if hyp.noise is None else {k: v[0] for k, v in hyp.noise.items()}
    predicted = apply_dynamics(structure, belief, parts.dynamics, parts.reference)
    # the two predictives, in one batched linearisation: continue (previous posterior) and reset (prior)
    pair = _concat(_with_axis(predicted), _with_axis(prior.belief))
    f, J = parts.adapter.forward_jacobian(pair.mean, X)
    quad = structure.quadratic_form(pair, J)
    robust = _robust_weights(parts, f, quad, Y, noise) if weighted_evidence else None
    lp = _log_predictive(parts.likelihood, f, quad, Y, noise, robust)  # (2, B)
    if sample_weight is not None:
        lp = lp * sample_weight.to(lp.dtype)
    lp = lp.sum(-1)
    if not bool(torch.isfinite(lp).all()):
        raise FilterStepError("The log predictive density is not finite; the last good state is kept.")
    log_h, log_s = _log_hazards(hazard)
    log_cont, log_cp = lp[0] + log_s, lp[1] + log_h
    log_evidence_step = torch.logaddexp(log_cont, log_cp)
    nu = float(torch.exp(log_cont - log_evidence_step))  # ν, eq. 3.58
    if nu > threshold:  # continue, shrunk towards the reference
        start = predicted if nu == 1.0 else apply_dynamics(structure, predicted, Dynamics(reversion=1.0 - nu),
                                                           parts.reference)
        run = state.run_lengths + X.shape[0]
    else:  # hard reset to the reference
        start = prior.belief
        run = torch.zeros_like(state.run_lengths)
    out = None
    if record is not None:  # the one-step-ahead prediction: the previous posterior's
        out = record(f[:1], quad[:1], _with_axis(noise), torch.ones(1, dtype=f.dtype, device=f.device))
    new, _ = filter_step(parts._replace(dynamics=Dynamics()), FilterState(start, noise, hyp.n_seen), X, Y,
                         sample_weight)
    zero = torch.zeros(1, dtype=hyp.log_weights.dtype, device=hyp.log_weights.device)
    new_filter = FilterState(_with_axis(new.belief), _with_axis(new.noise), new.n_seen, zero)
    return RunLengthState(new_filter, run, state.log_evidence + float(log_evidence_step), 1.0 - nu), out


def _cpp_step(parts, state, X, Y, sample_weight, *, weighted_evidence, record):
    """CPP-OU (module docstring): the OU shrink with the empirical-Bayes ``υ`` of :data:`CPP_GRID`."""
    structure = parts.structure
    hyp = state.filter
    belief = map_belief(lambda v: v[0], hyp.belief)
    noise = None if hyp.noise is None else {k: v[0] for k, v in hyp.noise.items()}
    predicted = apply_dynamics(structure, belief, parts.dynamics, parts.reference)
    shrunk = [predicted if u == 1.0 else apply_dynamics(structure, predicted, Dynamics(reversion=1.0 - u),
                                                        parts.reference) for u in CPP_GRID]
    cands = shrunk[0]
    cands = _with_axis(cands)
    for b in shrunk[1:]:
        cands = _concat(cands, _with_axis(b))
    f, J = parts.adapter.forward_jacobian(cands.mean, X)
    quad = structure.quadratic_form(cands, J)
    robust = _robust_weights(parts, f, quad, Y, noise) if weighted_evidence else None
    lp = _log_predictive(parts.likelihood, f, quad, Y, noise, robust)
    if sample_weight is not None:
        lp = lp * sample_weight.to(lp.dtype)
    lp = lp.sum(-1)
    if not bool(torch.isfinite(lp).all()):
        raise FilterStepError("The log predictive density is not finite; the last good state is kept.")
    best = int(torch.argmax(lp))  # ties: the largest υ (the grid is in decreasing order)
    out = None
    if record is not None:  # the one-step-ahead prediction: the previous posterior's
        out = record(f[:1], quad[:1], _with_axis(noise), torch.ones(1, dtype=f.dtype, device=f.device))
    new, _ = filter_step(parts._replace(dynamics=Dynamics()), FilterState(shrunk[best], noise, hyp.n_seen), X, Y,
                         sample_weight)
    zero = torch.zeros(1, dtype=hyp.log_weights.dtype, device=hyp.log_weights.device)
    new_filter = FilterState(_with_axis(new.belief), _with_axis(new.noise), new.n_seen, zero)
    return RunLengthState(new_filter, state.run_lengths + X.shape[0], state.log_evidence + float(lp[best]),
                          1.0 - CPP_GRID[best]), out


def run_runlength(parts, state: RunLengthState, prior: FilterState, X, Y, sample_weight=None, batch_size=1,
                  record=None, progress=None, **options):
    """Filter the rows of ``X`` in order with :func:`runlength_step` (``options``: its keyword
    arguments). Returns ``(state, records)``; on any exception the exception carries
    ``last_good_state`` and ``rows_done``, as :func:`skfilter.filtering.run_filter`.

    The rows go to the compiled run-length kernels first when they serve the filter — RL[K]-PR,
    RL[K]-MMPR, RL[1]-OUPR* or CPP-OU (:func:`skfilter.stepping.runlength_plan_for`) — in chunks of :data:`~skfilter.stepping.CHUNK_ROWS`
    (progress and interrupts served between them); a row the kernel cannot finish, and every row
    when it does not serve, is a :func:`runlength_step` on the engine, which raises there if it
    must. Both give the same states and records, to rounding (tests/test_runlength_kernels.py)."""
    plan = runlength_plan_for(parts, state.filter, prior.belief, batch_size, grid=CPP_GRID, **options)
    outs = []
    start = state.filter.n_seen
    n = X.shape[0]
    row = 0
    try:
        while row < n:
            if plan is not None:
                stop = min(n, row + stepping.CHUNK_ROWS)
                wb = None if sample_weight is None else sample_weight[row:stop]
                mixture, runs, d_evidence, cp, done, finished, recs = plan.run(
                    state.filter, state.run_lengths, X[row:stop], Y[row:stop], wb, record is not None)
                if done:
                    state = RunLengthState(mixture, runs, state.log_evidence + d_evidence, cp)
                    if record is not None:  # the mixture's one-step-ahead prediction of each row
                        f, quad, r, weights = (torch.from_numpy(a) for a in recs)
                        for i in range(done):
                            noise = None if state.filter.noise is None else {"r": r[i]}
                            outs.append(record(f[i][:, None], quad[i][:, None], noise, weights[i]))
                    row += done
                if finished:
                    if progress is not None:
                        progress(state.filter.n_seen - start)
                    continue
            stop = min(n, row + batch_size)
            wb = None if sample_weight is None else sample_weight[row:stop]
            state, out = runlength_step(parts, state, prior, X[row:stop], Y[row:stop], wb, record=record, **options)
            if record is not None:
                outs.append(out)
            row = stop
            if progress is not None:
                progress(state.filter.n_seen - start)
    except BaseException as exc:
        try:
            exc.last_good_state = state
            exc.rows_done = state.filter.n_seen - start
        except AttributeError:  # pragma: no cover
            pass
        raise
    if record is None:
        return state, None
    return state, (torch.cat(outs) if outs else None)
