"""The filtering engine: pure filter steps over belief values (the engine's shape: see the architecture
page of the documentation).

A filter is made of :class:`EngineParts` — a model adapter (:mod:`skfilter.models`), a likelihood
(:mod:`skfilter.likelihoods`), a posterior structure (:mod:`skfilter.posteriors`), the dynamics
(:mod:`skfilter.dynamics`) with their reference (the prior), and an optional weighting function —
and its state is a :class:`FilterState` value: the belief, the likelihood's noise state and the
number of rows learned. :func:`filter_step` maps a state and a block of rows to the next state;
nothing is modified in place, so a failure or an interrupt anywhere inside a step leaves the state
the step started from, and an estimator installs a new state with one assignment.

One step, in this order::

    1. dynamics        belief⁻ = apply_dynamics(belief)                (inflation, γ, q, OU, reset)
    2. linearise       f = h(μ⁻, x),  J = ∂h/∂θ (μ⁻)                   (one batched call for K means)
    3. prior predictive  residual y − E[y | f],  S = G J Σ⁻ Jᵀ Gᵀ + R    (G = ∂E[y|f]/∂f; R of t−1)
    4. weight          w = weighting(residual, S)                      (robust weights; R ← R / w²)
    5. noise update    r_t from the prior-predictive residual, each row counting with its weight
    6. structure update  with the rows whitened by r_t, scaled by √(sample_weight) · w

Stage 3 is computed only when a weighting function, a recorder or the likelihood's whitening
(:class:`~skfilter.likelihoods.AssumedDensityCategorical`) needs ``J Σ⁻ Jᵀ``. Stage 5 (the online
observation-variance estimate, LoFi paper App. C.2) sits *after* the weight: an observation the
weighting function discounts also moves the noise estimate less (its ``ε_t`` is scaled by the weight
``sample_weight · w²``), and the weight itself is computed with the noise variance of the previous
step (the estimate being formed cannot judge the row that forms it).

Every array may carry leading hypotheses axes (``K`` beliefs, e.g. BOCD's run lengths): the model
adapter then returns ``f (K, n, C)`` and ``J (K, n, C, P)`` for the ``K`` means in one call and the
structure updates all hypotheses in one batched operation.

On the CPU, when both the likelihood and the structure take NumPy arrays (``host_arrays``,
:meth:`~skfilter.posteriors.LowRankPrecision.uses_host_arrays`), stage 6's whitening runs on
zero-copy NumPy views (:mod:`skfilter._array_ops`).  This engine runs every
filter on its own and imports no compiled code: :mod:`skfilter.stepping`, above it, offers the rows
to the compiled CPU kernels (:mod:`skfilter.kernels`) first, which run the same step for many rows
per call for the filters they serve and hand back to :func:`filter_step` any step they cannot
finish; the estimators call :func:`skfilter.stepping.run_filter`.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, NamedTuple, Optional

import torch

from ._array_ops import MAX_KEPT_BYTES, NUMPY_OPS, SCRATCH, as_numpy
from ._utils import LOCAL_REFS
from .dynamics import Dynamics, Reference, apply_dynamics
from .exceptions import FilterStepError
from .likelihoods import whitens_by_matrix


class EngineParts(NamedTuple):
    """What a filter is made of; every base estimator returns its parts from ``_engine_parts()``
    so that wrappers (robust weighting, run-length mixtures) compose them without code for the pair.

    Attributes
    ----------
    adapter : skfilter.models.ModuleAdapter
    likelihood : skfilter.likelihoods.Likelihood
    structure : skfilter.posteriors.Structure
    dynamics : skfilter.dynamics.Dynamics
    reference : skfilter.dynamics.Reference
        The prior ``N(μ₀, diag(σ₀²))``: target of mean reversion and resets.
    weighting : callable or None
        ``weighting(residual (..., n, C), S (..., n, C, C)) → w (..., n)`` with ``S`` the prior
        predictive covariance of ``y`` (:meth:`~skfilter.likelihoods.Likelihood.predictive_covariance`);
        ``R`` is scaled by ``1 / w²``. A function with ``takes_noise_covariance = True``
        (:mod:`skfilter.weighting`) is called as ``weighting(residual, S, R)``. ``None``: ``w = 1``.
    """

    adapter: Any
    likelihood: Any
    structure: Any
    dynamics: Dynamics
    reference: Reference
    weighting: Optional[Callable] = None


class FilterState(NamedTuple):
    """The value an estimator holds: ``belief``, the likelihood's ``noise`` state and ``n_seen``, the
    rows learned so far. A **mixture** state (run-length filters, :mod:`skfilter.runlength`) carries
    ``K`` hypotheses on the leading axis of ``belief`` and ``noise`` and their normalised
    ``log_weights`` ``(K,)``; an estimator's predictive is then the mixture's. ``log_weights=None``:
    one belief."""

    belief: Any
    noise: Any
    n_seen: int
    log_weights: Any = None


class StepOutput(NamedTuple):
    """A step's results besides the new state: the structure's :class:`~skfilter.posteriors.UpdateInfo`,
    the robust weights (None without weighting) and the recorder's output (None without one)."""

    info: Any
    weights: Any
    record: Any


def _needs_covariance(weighting) -> bool:
    return weighting is not None and getattr(weighting, "needs_covariance", True)


def _host_structure(structure, belief) -> bool:
    uses = getattr(structure, "uses_host_arrays", None)
    return uses is not None and uses(belief)


_TAKES_OUT = {}


def _takes_out(fn) -> bool:
    """Whether ``fn`` has an ``out`` parameter (cached per function)."""
    try:
        return _TAKES_OUT[fn]
    except KeyError:
        import inspect

        try:
            ok = "out" in inspect.signature(fn).parameters
        except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
            ok = False
        _TAKES_OUT[fn] = ok
        return ok


def _buffer(buffers, name, shape, like):
    """A tensor ``(shape)`` of ``like``'s dtype and device from the stream's ``buffers`` (kept per
    name and shape, so that a call's last, shorter batch does not replace the full batches'), or
    None without buffers."""
    if buffers is None:
        return None
    key = (name, tuple(shape))
    buf = buffers.get(key)
    if buf is None or buf.dtype != like.dtype or buf.device != like.device:
        buf = buffers[key] = torch.empty(shape, dtype=like.dtype, device=like.device)
    return buf


def filter_step(parts: EngineParts, state: FilterState, X, Y, sample_weight=None, record=None, workspace=None,
                buffers=None, first_pass=None):
    """One filter step on rows ``X (B, D)``, targets ``Y (B, C)``, ``sample_weight (B,)`` or None.

    Returns ``(new_state, StepOutput)`` (module docstring for the stages). ``record``, if given, is
    called as ``record(X, f, quad, noise, predicted)`` with the one-step-ahead predictive of these
    rows — model output ``f`` and ``J Σ⁻ Jᵀ`` at the predicted belief, the noise state before this
    step, and the predicted belief itself.
    Raises :class:`~skfilter.exceptions.FilterStepError` on a numerical failure; ``state`` is a value
    and is never modified. ``workspace``: a dead belief whose memory the new one may reuse
    (:meth:`~skfilter.posteriors.Structure.update`; :func:`run_filter` passes the belief of two steps
    back when nothing references it). ``buffers``: a dict the caller keeps for a stream, whose
    arrays receive ``J`` and ``Hw`` (for an adapter and likelihood that take ``out=``) instead of
    fresh ``P``-sized arrays at every step; only for callers that keep neither past the step (no
    ``on_step`` callback: an :class:`~skfilter.posteriors.UpdateInfo` may read ``Hw`` later).
    ``first_pass``: for a structure with ``jacobian_rows`` (large LoFi beliefs), the callable that
    forms the Jacobian rows' products with the belief
    (:func:`~skfilter.posteriors.lofi.lofi_jacobian_products`; the dispatch passes a compiled one).
    """
    structure, likelihood = parts.structure, parts.likelihood
    belief, noise = state.belief, state.noise
    # 1. dynamics
    dynamics = parts.dynamics
    predicted = belief if dynamics.is_static else apply_dynamics(structure, belief, dynamics, parts.reference)
    # 2. linearise at the predicted mean(s)
    adapter = parts.adapter
    if buffers is not None and "forward_jacobian" not in vars(adapter) and _takes_out(type(adapter).forward_jacobian):
        n_out = getattr(adapter, "n_outputs", None)
        shape = tuple(predicted.mean.shape[:-1]) + (X.shape[0], n_out, predicted.mean.shape[-1])
        f, J = adapter.forward_jacobian(predicted.mean, X, out=_buffer(buffers, "J", shape, predicted.mean))
    else:
        buffers = None  # Hw's buffer is sized like J's
        f, J = adapter.forward_jacobian(predicted.mean, X)
    bound = likelihood.max_abs_output
    if bound is not None:
        largest = float(abs(f).max())
        if not largest <= bound:  # NaN too
            raise FilterStepError(f"The model outputs reached {largest:.3g} (beyond {bound:g}). "
                                  f"{likelihood.divergence_advice} The last good belief is kept.")
    # 3. prior predictive; a structure that can forms the Jacobian rows' products with the belief
    # once, for the predictive and the update (whitened rows Hw = A J, A from the likelihood)
    rows = None
    jacobian_rows = getattr(structure, "jacobian_rows", None)
    if jacobian_rows is not None and whitens_by_matrix(likelihood) and not hasattr(structure, "names"):
        rows = jacobian_rows(predicted, J) if first_pass is None else jacobian_rows(predicted, J, first_pass)
    quad = None
    if record is not None or _needs_covariance(parts.weighting) or likelihood.needs_predictive:
        quad = rows.quad if rows is not None else structure.quadratic_form(predicted, J)
    # 4. weight
    robust = None
    w = sample_weight
    if parts.weighting is not None:
        residual = Y - (likelihood.mean(f) if quad is None else likelihood.predictive_mean(f, quad, noise))
        S = None if quad is None else likelihood.predictive_covariance(f, quad, noise)
        if getattr(parts.weighting, "takes_noise_covariance", False):
            weights = parts.weighting(residual, S, likelihood.noise_covariance(f, noise))
        else:
            weights = parts.weighting(residual, S)
        robust = torch.as_tensor(weights, dtype=f.dtype, device=f.device)
        robust = robust.expand(f.shape[:-1])
        w2 = robust * robust
        w = w2 if w is None else w * w2
    # 5. noise update
    new_noise = likelihood.next_state(noise, f, Y, w)
    if new_noise is not noise and not bool(torch.isfinite(new_noise["r"]).all()):
        raise FilterStepError("The online observation-variance estimate became non-finite; "
                              "the last good belief is kept.")
    # 6. whiten, weight, update
    if rows is not None:
        A, ew = likelihood.whitening_matrix(f, Y, new_noise, quad=quad)
        if w is not None:
            sw = torch.as_tensor(w, dtype=f.dtype) ** 0.5
            A = A * sw[..., None, None]
            ew = ew * sw[..., None]
        new_belief, info = rows.update(A, ew, workspace=workspace)
        out = record(X, f, quad, noise, predicted) if record is not None else None
        return FilterState(new_belief, new_noise, state.n_seen + X.shape[0]), StepOutput(info, robust, out)
    if likelihood.host_arrays and _host_structure(structure, predicted):
        f_, J_, Y_ = as_numpy(NUMPY_OPS, f, J, Y)  # CPU fast path (skfilter._array_ops)
        out = _buffer(buffers, "Hw", J.shape, J) if _takes_out(type(likelihood).whiten) else None
        if out is not None:
            Hw, ew = likelihood.whiten(f_, J_, Y_, {k: v.numpy() for k, v in new_noise.items()}, out=out.numpy())
        else:
            Hw, ew = likelihood.whiten(f_, J_, Y_, {k: v.numpy() for k, v in new_noise.items()})
        if w is not None:
            w = w.numpy()
    else:
        out = _buffer(buffers, "Hw", J.shape, J) if _takes_out(type(likelihood).whiten) else None
        extra = {"quad": quad} if likelihood.needs_predictive else {}
        if out is not None:
            Hw, ew = likelihood.whiten(f, J, Y, new_noise, out=out, **extra)
        else:
            Hw, ew = likelihood.whiten(f, J, Y, new_noise, **extra)
    if w is not None:
        sw = w ** 0.5
        Hw = Hw * sw[..., None, None]
        ew = ew * sw[..., None]
    *batch, n, m, P = Hw.shape
    Hw = Hw.reshape(*batch, n * m, P)
    ew = ew.reshape(*batch, n * m)
    active = getattr(parts.adapter, "active_blocks", None)
    if active is not None and hasattr(structure, "names"):
        new_belief, info = structure.update(predicted, Hw, ew, workspace=workspace, active=active(X))
    else:
        new_belief, info = structure.update(predicted, Hw, ew, workspace=workspace)
    out = record(X, f, quad, noise, predicted) if record is not None else None
    return FilterState(new_belief, new_noise, state.n_seen + n), StepOutput(info, robust, out)


def _is_dead(belief) -> bool:
    """Whether ``belief`` is referenced only by the caller's variable (and this call's argument), so
    that its memory may be reused; ``on_step`` callbacks, which could keep beliefs, disable reuse.
    (:data:`~skfilter._utils.LOCAL_REFS`: what a local's count reads on this Python.)"""
    return sys.getrefcount(belief) <= LOCAL_REFS + 1


#: beliefs of at least this many bytes are kept between calls as spare workspaces (:func:`run_filter`)
SPARE_MIN_BYTES = 1 << 24


def _belief_bytes(belief) -> int:
    return sum(t.numel() * t.element_size() for t in belief if isinstance(t, torch.Tensor))


def _stream_buffers(structure):
    """What a stream keeps between calls for ``structure`` (:func:`run_filter`): the ``J``/``Hw``
    buffers and the spare beliefs, in the structure's table of :data:`~skfilter._array_ops.SCRATCH`
    (this thread's, held weakly in the structure)."""
    table = SCRATCH.table(structure)
    kept = table.get("stream")
    if kept is None:
        kept = table["stream"] = {"buffers": {}, "spares": []}
    return kept


def _keep_for_next_call(kept, belief):
    """Drop the stream buffers ``kept`` holds for the next call when they add up to more than the
    belief's own size (or :data:`~skfilter._array_ops.MAX_KEPT_BYTES`): these buffers stay within
    about the belief's size (a batch of many rows' ``J`` is made again per call instead). Large
    beliefs keep more, to touch no fresh memory from call to call: the spare belief
    (:data:`SPARE_MIN_BYTES`) and, for LoFi, the arrays of dead beliefs its structure's recycler may
    hand out again (``LowRankPrecision._recycled_outputs``) — an idle estimator then holds up to about
    three times its belief besides these buffers."""
    buffers = kept["buffers"]
    held = sum(t.numel() * t.element_size() for t in buffers.values())
    if held > max(MAX_KEPT_BYTES, _belief_bytes(belief)):
        buffers.clear()


def _spare_workspace(spares):
    """A spare belief (:func:`run_filter`) nothing else references any more, or None."""
    while spares:
        belief = spares.pop()
        if sys.getrefcount(belief) <= LOCAL_REFS:  # this variable alone
            return belief
    return None


def run_filter(parts: EngineParts, state: FilterState, X, Y, sample_weight=None, batch_size=1,
               record=None, progress=None, on_step=None, first_pass=None):
    """Filter the rows of ``X`` in order, ``batch_size`` rows per step, from ``state``.

    Returns ``(state, records)``: the state after every row and the outputs of ``record`` (see
    :func:`filter_step`) concatenated over rows, or ``None``. ``on_step(state, output)``, if given,
    sees each step's result. On any exception (a :class:`~skfilter.exceptions.FilterStepError`, a
    ``KeyboardInterrupt``, …) the exception gets the attribute ``last_good_state``: the state after
    the rows learned before the failing step (``rows_done`` of them, also an attribute), which the
    caller installs; then it propagates. ``first_pass``: as :func:`filter_step`'s.
    """
    outs = []
    start = state.n_seen
    initial = state.belief  # held by the caller: never a workspace
    # J and Hw of every step in the same arrays, kept for the next call on the CPU (at most about the
    # belief's size: _keep_for_next_call); with large beliefs the last dead one of this call is kept
    # as the next call's first workspace. On a GPU torch's caching allocator already reuses memory.
    on_cpu = initial.mean.device.type == "cpu"
    kept = _stream_buffers(parts.structure) if on_step is None and on_cpu else None
    buffers = ({} if on_step is None else None) if kept is None else kept["buffers"]
    spares = kept["spares"] if kept is not None and _belief_bytes(initial) >= SPARE_MIN_BYTES else None
    previous = None
    # the row blocks as views, made at once (cheaper than slicing at every step)
    Xs, Ys = X.split(batch_size), Y.split(batch_size)
    ws = [None] * len(Xs) if sample_weight is None else sample_weight.split(batch_size)
    try:
        for Xb, Yb, wb in zip(Xs, Ys, ws):
            workspace = None
            if previous is not None and previous is not initial and on_step is None and _is_dead(previous):
                workspace = previous
            elif spares:
                workspace = _spare_workspace(spares)
            previous = None
            new_state, output = filter_step(parts, state, Xb, Yb, wb, record, workspace, buffers, first_pass)
            previous = state.belief
            state = new_state  # one assignment: the step is installed whole or not at all
            if record is not None:
                outs.append(output.record)
            if on_step is not None:
                on_step(state, output)
            if progress is not None:
                progress(state.n_seen - start)
    except BaseException as exc:
        try:
            exc.last_good_state = state
            exc.rows_done = state.n_seen - start
            if isinstance(exc, FilterStepError):
                exc.step = exc.rows_done
        except AttributeError:  # pragma: no cover - exceptions without a __dict__
            pass
        if kept is not None:
            _keep_for_next_call(kept, initial)
        raise
    if kept is not None:
        _keep_for_next_call(kept, initial)
    if spares is not None and previous is not None and previous is not initial:
        # the belief of the step before the last, which nothing outside this call ever saw (the
        # caller's own belief may be held by the user: it is never kept)
        spares[:] = [previous]
    previous = initial = workspace = None
    if record is None:
        return state, None
    return state, (torch.cat(outs) if outs else None)
