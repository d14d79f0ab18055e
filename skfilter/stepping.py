"""Where a filter's steps run: on a compiled kernel when one serves the filter, else on the torch engine.

The torch engine (:mod:`skfilter.filtering`: :func:`~skfilter.filtering.filter_step`,
:func:`~skfilter.filtering.run_filter`) is the reference and runs every filter, on every device,
with any module, likelihood, weighting and hypotheses axis. The compiled kernels
(:mod:`skfilter.kernels`: numba functions on NumPy arrays) run the same step for the common filters
on the CPU, many rows per Python call. Neither imports the other: this module sits above both and
decides, step by step, which one runs.

:func:`run_filter` and :func:`filter_step` are the engine's functions with that dispatch in front:
:func:`run_filter` offers a block of rows to :func:`run_compiled` first — when the filter qualifies
(a single belief on the CPU in float64 or float32, the default MLP with its fused Jacobian, a
Gaussian, Bernoulli, categorical, assumed-density or moment-matched categorical likelihood, no
weighting stage or a built-in one under the Gaussian likelihood (WoLF), dynamics of a scalar decay
and process noise (one per block for the factored covariance), and a structure with a kernel:
:mod:`skfilter.kernels.lofi`, :mod:`~skfilter.kernels.diagonal`, :mod:`~skfilter.kernels.full`,
:mod:`~skfilter.kernels.factored`) the whole step runs compiled over preallocated buffers, one call for
thousands of rows; :func:`filter_step` offers one step of a stack of hypotheses (BOCD's run lengths)
to :func:`step_compiled`; :func:`linearized_compiled` and :func:`forward_compiled` serve
``predict``. Anything else, and any step a kernel cannot finish (stiff rows that need the
square-root forms, numerical failures, which then raise with the last good belief kept), runs on the
engine; both agree to rounding (tests/test_kernels.py). :func:`handed_back` counts the steps a
kernel started and handed to the engine.

:func:`plan_for` returns a :class:`KernelPlan` for a filter the kernels serve, or None.
:meth:`KernelPlan.run` feeds the rows to the structure's kernel in chunks of :data:`CHUNK_ROWS`
(progress and interrupts are served between chunks), hands every step a kernel stops at to the
engine's :func:`skfilter.filtering.filter_step`, and returns the new :class:`FilterState`.

Examples
--------
>>> import torch
>>> from skfilter import LoFiRegressor, stepping
>>> X, y = torch.randn(40, 3, dtype=torch.float64).numpy(), torch.randn(40, dtype=torch.float64).numpy()
>>> est = LoFiRegressor(hidden_layer_sizes=(8,), random_state=0).fit(X, y)
>>> stepping.plan_for(est._engine_parts(), est.filter_state_, None) is not None
True
"""

from __future__ import annotations

import abc
import functools
import math
import operator
import weakref

import numpy as np
import torch

from . import filtering
from .exceptions import FilterStepError
from ._array_ops import Recycler
from .filtering import FilterState, StepOutput
from .kernels import enabled
from .kernels.diagonal import diagonal_hypotheses, diagonal_rows
from .kernels.factored import (CHOLESKY, CHOLESKY_EXACT_NOISE, LOW_RANK, LOW_RANK_PLUS_NOISE, factored_hypotheses,
                               factored_rows)
from .kernels.full import full_hypotheses, full_rows
from .kernels.lofi import DONE, lofi_hypotheses, lofi_rows
from .kernels.mlp import mlp_program
from .kernels.observations import LIKELIHOOD_CODES, WEIGHTING_CODES
from .kernels.predictive import (DIAGONAL, FULL, LOFI, forward_rows, predict_factored_rows, predict_hypotheses,
                                 predict_rows, probit_factored_rows, probit_rows)
from .kernels.reversion import CPP_OU, OU, lofi_reversion_rows
from .kernels.reversion_diagonal import diagonal_reversion_rows
from .kernels.reversion_factored import factored_reversion_rows
from .kernels.reversion_full import full_reversion_rows
from .kernels.runlength import (diagonal_runlength_rows, factored_runlength_rows, full_runlength_rows,
                                lofi_runlength_rows)
from .kernels.stacked import stacked_row_products
from .likelihoods import (AssumedDensityCategorical, Bernoulli, Categorical, Gaussian, MomentMatchedCategorical,
                          robust_variance_consistency)
from .models import MLPAdapter
from .posteriors import (CholeskyFactor, DiagonalCovariance, FactoredCovariance, FullCovariance, LowRankPrecision,
                         stiffness_limit)

__all__ = ["run_filter", "filter_step", "run_compiled", "step_compiled", "linearized_compiled",
           "linearized_arrays_compiled", "probit_arrays_compiled", "forward_compiled", "handed_back", "plan_for",
           "RowState", "RunLengthPlan", "runlength_plan_for"]

_DTYPES = (torch.float64, torch.float32)
#: the NumPy dtype of each torch dtype the kernels take
_NP_DTYPES = {torch.float64: np.dtype(np.float64), torch.float32: np.dtype(np.float32)}
#: rows per kernel call (progress bars and interrupts are served between calls)
CHUNK_ROWS = 2048
#: models up to this many parameters get the call's buffers as their new belief (no copy; above,
#: a copy keeps the estimator from holding both buffer slots)
ZERO_COPY_PARAMS = 65_536
#: the full-covariance kernel serves models up to this many parameters; beyond, the step is two
#: passes over a P × P matrix, which the torch engine (posteriors/full.py: the same one-pass
#: ``Hw Σ`` plus BLAS's in-place rank update) does faster (digits, P = 3,760: 21.5 against
#: 24.6 ms/row; at P = 501 the kernel takes 46 µs/step against the engine's 144)
FULL_KERNEL_MAX_PARAMS = 1500
#: the LoFi kernel serves models up to this many parameters; beyond, its ``(L + m) × P`` rows no
#: longer stay in cache and the torch engine's column-blocked passes (posteriors/lofi.py) are faster
#: (measured, one thread: P = 7,510: kernel 0.70 ms/step, engine 0.79; P = 50,610: 5.1 and 5.3;
#: P = 648,010: 117 and 87)
LOFI_KERNEL_MAX_PARAMS = 100_000
#: the factored-covariance kernel serves models up to this many parameters (its per-block products
#: are those of the torch engine, whose per-step overhead no longer matters beyond)
FACTORED_KERNEL_MAX_PARAMS = 100_000


#: steps the kernels handed to the torch engine in this process (:func:`handed_back`):
#: a count the tests and benchmarks read to see that a stream stays compiled, not a timing
HANDED_BACK = [0]

#: the large arrays of the run-length pools and the beliefs they return (:func:`recycled_empty`): at
#: most this many, of at most this many bytes together (what an idle process may hold for recycling)
RECYCLED_MAX = 6
RECYCLED_MAX_BYTES = 1 << 28
RECYCLER = Recycler(RECYCLED_MAX, RECYCLED_MAX_BYTES)


def recycled_empty(shape, dtype):
    """An uninitialised array of ``shape`` and ``dtype`` from :data:`RECYCLER`
    (:class:`~skfilter._array_ops.Recycler`: a large array it made before that nothing refers to
    any more, else a new one): the compiled run-length filter over the full EKF would otherwise
    touch fresh memory for its ``(K + 1) P²`` pool and the ``K P²`` covariances it returns at every
    call (about 1 ms per MB of page faults, measured for the 2 MB covariances)."""
    return RECYCLER.empty(shape, dtype)

#: adapter → (MLP program, input map): the kernels' view of a default MLP, built once per adapter
_PROGRAMS = weakref.WeakKeyDictionary()
#: adapter → (key, plan): the last plan built for an adapter's filter (its buffers are per call)
_PLANS = weakref.WeakKeyDictionary()
#: the :class:`RunLengthPlan` of an adapter (:func:`runlength_plan_for`)
_RUNLENGTH_PLANS = weakref.WeakKeyDictionary()


def _program_of(adapter):
    """``((shapes, offsets, codes), input_map)`` of a default-MLP adapter (:func:`mlp_program`; the
    ``(1/scale, −offset/scale, bound)`` of a ``StandardizedMLP`` or None), cached per adapter."""
    try:
        return _PROGRAMS[adapter]
    except KeyError:
        pass
    layer_shapes, activations, input_map = adapter.architecture()
    _PROGRAMS[adapter] = out = (mlp_program(layer_shapes, activations), input_map)
    return out


def _mapped_rows(X, input_map):
    """The rows (a tensor, or a NumPy array) as the default MLP's first layer sees them
    (standardised, and clipped to the bound, for a ``StandardizedMLP``:
    :meth:`skfilter.models.MLPAdapter._inputs`)."""
    Xn = X if type(X) is np.ndarray else _numpy(X)
    if input_map is not None:
        inv, shift, bound = input_map
        Xn = np.multiply(Xn, inv, order="C")  # a new C-contiguous array, then in place (the same roundings)
        Xn += shift
        if bound is not None:  # np.clip's values (finite rows), by two ufuncs: np.clip costs ~5 µs a call
            np.maximum(Xn, -bound, out=Xn)
            np.minimum(Xn, bound, out=Xn)
        return Xn
    return np.ascontiguousarray(Xn)


def _kernel_rows(X, np_dtype):
    """Raw rows (a tensor or an array) as the kernels that map them take them: a C-contiguous array
    of the belief's dtype (itself when it is one)."""
    Xn = X if type(X) is np.ndarray else _numpy(X)
    if Xn.dtype is np_dtype and Xn.flags.c_contiguous:
        return Xn
    return np.ascontiguousarray(Xn, dtype=np_dtype)


@functools.lru_cache(maxsize=None)
def _no_map(np_dtype):
    """The map arguments of a model without an input map (never written)."""
    return np.empty(0, dtype=np_dtype), np.empty(0, dtype=np_dtype), np.inf


def map_arguments(input_map, np_dtype):
    """``(in_scale, in_shift, in_bound)`` of :func:`~skfilter.kernels.mlp.map_row` for an adapter's
    input map (:meth:`skfilter.models.MLPAdapter.architecture`) in ``np_dtype``: its arrays and
    bound (``inf`` for no clip); empty arrays for a model without one."""
    if input_map is None:
        return _no_map(np.dtype(np_dtype))
    inv, shift, bound = input_map
    return (np.ascontiguousarray(inv, dtype=np_dtype), np.ascontiguousarray(shift, dtype=np_dtype),
            np.inf if bound is None else float(bound))


def _serves_adapter(adapter):
    return (type(adapter) is MLPAdapter and getattr(adapter, "cpu_backend", "numpy") == "numpy"
            and "forward_jacobian" not in vars(adapter))  # a replaced linearisation is honoured


def linearized(adapter, structure, belief, X, centred=False):
    """``(f, diag(J Σ Jᵀ))`` of a single belief at the rows ``X`` by
    :func:`~skfilter.kernels.predictive.predict_rows`, as tensors ``(n, C)``, or None when the
    kernel does not serve this model/structure (or LoFi's capacitance is stiff). ``centred``: the
    diagonal of ``Π J Σ Jᵀ Π`` (``Π = I − 11ᵀ/C``)."""
    out = linearized_arrays(adapter, structure, belief, X, centred)
    return None if out is None else (torch.from_numpy(out[0]), torch.from_numpy(out[1]))


def _predictive_arguments(adapter, structure, belief):
    """``(code, first, second, mean)``: a single belief's arrays as :func:`~skfilter.kernels.predictive.predict_rows`
    takes them for its structure, or None when the kernels do not serve it."""
    mean = belief.mean
    if not _serves_adapter(adapter) or mean.dim() != 1 or not mean.is_cpu or mean.dtype not in _DTYPES:
        return None
    kind = type(structure)
    if kind is LowRankPrecision and structure.variant == "diagonal":
        code, first, second = LOFI, _numpy(belief.diagonal), _numpy(belief.low_rank)
    elif kind is DiagonalCovariance:
        code, first, second = DIAGONAL, _numpy(belief.var), np.empty((0, 0), dtype=_numpy(mean).dtype)
    elif kind is FullCovariance and mean.shape[0] <= FULL_KERNEL_MAX_PARAMS:
        code, first, second = FULL, _numpy(mean), _numpy(belief.cov)
    else:
        return None
    return code, first, second, _numpy(mean)


def _predictive_call(adapter, structure, belief, X):
    """``(arguments, f, var)``: the arguments :func:`~skfilter.kernels.predictive.predict_rows` and
    :func:`~skfilter.kernels.predictive.probit_rows` share for the rows ``X`` of a single belief (the
    rows, the model's program and input map, the belief's arrays, the outputs ``f`` and ``var`` to
    write, the stiffness limit), or None when the kernels do not serve the model or structure."""
    args = _predictive_arguments(adapter, structure, belief)
    if args is None:
        return None
    code, first, second, m = args
    (shapes, offsets, codes), input_map = _program_of(adapter)
    Xn = _kernel_rows(X, m.dtype)
    f = np.empty((Xn.shape[0], int(shapes[-1, 0])), dtype=m.dtype)
    var = np.empty_like(f)
    return ((Xn, shapes, offsets, codes, *map_arguments(input_map, m.dtype), m, code, first, second, f, var,
             stiffness_limit(m.dtype)), f, var)


class FactoredLayout:
    """Where the blocks of a :class:`~skfilter.posteriors.FactoredCovariance` of ``n_params``
    parameters lie, as the factored kernels take them: block ``b``'s parameters at
    ``positions[starts[b]:starts[b + 1]]``, its factor ``(ranks[b], D_b)`` flat from ``fstarts[b]``."""

    def __init__(self, structure, n_params):
        positions = structure.block_positions(n_params)
        self.positions = np.ascontiguousarray(torch.cat(positions).numpy(), dtype=np.int64)
        sizes = [int(p.numel()) for p in positions]
        self.starts = np.cumsum([0] + sizes).astype(np.int64)
        self.ranks = np.array([D if isinstance(kind, CholeskyFactor) else kind.rank
                               for kind, D in zip(structure.kinds, sizes)], dtype=np.int64)
        self.shapes = [(int(r), D) for r, D in zip(self.ranks, sizes)]
        self.fstarts = np.cumsum([0] + [r * D for r, D in self.shapes]).astype(np.int64)

    def flat_factors(self, factors, np_dtype, batch=()):
        """The factors of a belief as one flat array per hypothesis (``batch + (F,)``)."""
        out = np.empty(batch + (int(self.fstarts[-1]),), dtype=np_dtype)
        for (r, D), start, B in zip(self.shapes, self.fstarts, factors):
            out[..., start:start + r * D] = _numpy(B).reshape(*batch, r * D)
        return out


#: structure → {n_params: FactoredLayout}
_LAYOUTS = weakref.WeakKeyDictionary()


def factored_layout(structure, n_params):
    """The :class:`FactoredLayout` of ``structure`` at ``n_params`` parameters (built once)."""
    known = _LAYOUTS.setdefault(structure, {})
    layout = known.get(n_params)
    if layout is None:
        layout = known[n_params] = FactoredLayout(structure, n_params)
    return layout


def _factored_predictive(adapter, structure, belief, X):
    """The arguments of :func:`~skfilter.kernels.predictive.predict_factored_rows` and
    :func:`~skfilter.kernels.predictive.probit_factored_rows` up to the outputs, and ``f``, ``var``
    to write — or None when they do not serve this model or belief."""
    mean = belief.mean
    if (type(structure) is not FactoredCovariance or not _serves_adapter(adapter) or mean.dim() != 1
            or not mean.is_cpu or mean.dtype not in _DTYPES or mean.shape[0] > FACTORED_KERNEL_MAX_PARAMS):
        return None
    m = _numpy(mean)
    layout = factored_layout(structure, m.shape[0])
    (shapes, offsets, codes), input_map = _program_of(adapter)
    Xn = _kernel_rows(X, m.dtype)
    f = np.empty((Xn.shape[0], int(shapes[-1, 0])), dtype=m.dtype)
    var = np.empty_like(f)
    args = (Xn, shapes, offsets, codes, *map_arguments(input_map, m.dtype), m, layout.positions, layout.starts,
            layout.flat_factors(belief.factors, m.dtype), layout.fstarts, layout.ranks,
            np.ascontiguousarray(_numpy(belief.pending), dtype=m.dtype), f, var)
    return args, f, var


def linearized_arrays(adapter, structure, belief, X, centred=False):
    """:func:`linearized`'s ``(f, diag(J Σ Jᵀ))`` (``centred``: ``diag(Π J Σ Jᵀ Π)``) as NumPy arrays
    (one-row predictions skip the tensors), or None."""
    factored = _factored_predictive(adapter, structure, belief, X)
    if factored is not None:
        predict_factored_rows(*factored[0], bool(centred))
        return factored[1], factored[2]
    call = _predictive_call(adapter, structure, belief, X)
    if call is None or not predict_rows(*call[0], bool(centred)):
        return None
    return call[1], call[2]


def probit_arrays(adapter, structure, belief, X, n_classes):
    """``(f, proba)``: the logits at the mean and the probit class probabilities ``(n, n_classes)``
    of the linearised predictive (:func:`~skfilter.kernels.predictive.probit_rows`: the shift-free
    variances, then :func:`~skfilter.likelihoods.probit_probabilities`'s formulas) as NumPy arrays,
    in one compiled call; None when the kernels do not serve the model or structure."""
    factored = _factored_predictive(adapter, structure, belief, X)
    if factored is not None:
        proba = np.empty((factored[1].shape[0], n_classes), dtype=factored[1].dtype)
        probit_factored_rows(*factored[0], proba)
        return factored[1], proba
    call = _predictive_call(adapter, structure, belief, X)
    if call is None:
        return None
    f = call[1]
    proba = np.empty((f.shape[0], n_classes), dtype=f.dtype)
    if not probit_rows(*call[0], proba):
        return None
    return f, proba


def forward(adapter, mean, X):
    """The default MLP's outputs at ``mean (P,)`` for the rows ``X`` by
    :func:`~skfilter.kernels.predictive.forward_rows` (a tensor ``(n, C)``), or None when the kernel
    does not serve this model."""
    if not _serves_adapter(adapter) or mean.dim() != 1 or not mean.is_cpu or mean.dtype not in _DTYPES:
        return None
    program, input_map = _program_of(adapter)
    return torch.from_numpy(forward_array(program, input_map, _numpy(mean), X))


def forward_array(program, input_map, m, X):
    """:func:`forward`'s outputs as a NumPy array ``(n, C)``, from the adapter's program and input
    map (:func:`_program_of`, a plan's ``program``/``input_map``), the mean as an array ``m`` and
    the rows ``X`` (a tensor or an array of ``m``'s dtype)."""
    shapes, offsets, codes = program
    Xn = _kernel_rows(X, m.dtype)
    f = np.empty((Xn.shape[0], int(shapes[-1, 0])), dtype=m.dtype)
    forward_rows(Xn, shapes, offsets, codes, *map_arguments(input_map, m.dtype), m, f)
    return f


def _weighting_of(parts):
    """``(code, threshold)`` of a robust weighting the kernels compute (the built-in functions of
    :mod:`skfilter.weighting` under a Gaussian likelihood), ``(0, 1.0)`` without one, else None."""
    weighting = parts.weighting
    if weighting is None:
        return 0, 1.0
    code = WEIGHTING_CODES.get(type(weighting).__name__)
    if code is None or type(weighting).__module__ != "skfilter.weighting" or type(parts.likelihood) is not Gaussian:
        return None
    threshold = float(weighting.threshold)
    if not np.isfinite(threshold) or threshold <= 0.0:
        return None
    return code, threshold


def _dynamics_of(parts):
    """``(g, q)`` of dynamics the kernels support (decay and one process-noise value), else None."""
    dyn = parts.dynamics
    if dyn.is_static:
        return 1.0, 0.0
    if dyn.reset or dyn.inflates or float(dyn.reversion) != 0.0:
        return None
    q = dyn.process_noise
    if isinstance(q, torch.Tensor):
        if q.dim():
            return None
        q = float(q)
    return float(dyn.decay), float(q)


def plan_for(parts, state, record, hypotheses=False):
    """The :class:`KernelPlan` of a filter the kernels serve, else None (module docstring). With
    ``hypotheses``, for one step of a stack of beliefs (leading axis ``K``) whose caller records the
    predictive (:func:`step_compiled`)."""
    if state.log_weights is not None or (parts.weighting is not None and (hypotheses or _weighting_of(parts) is None)):
        return None
    if record is not None and getattr(record, "needs_belief", True):
        return None
    if hypotheses and record is None:
        return None
    adapter, structure = parts.adapter, parts.structure
    if not _serves_adapter(adapter):
        return None
    if type(parts.likelihood) not in (Gaussian, Bernoulli, Categorical, AssumedDensityCategorical,
                                      MomentMatchedCategorical):
        return None
    mean = state.belief.mean
    if mean.dim() != (2 if hypotheses else 1) or not mean.is_cpu or mean.dtype not in _DTYPES:
        return None
    factored = type(structure) is FactoredCovariance
    dyn = _factored_dynamics_of(parts, structure, mean) if factored else _dynamics_of(parts)
    if dyn is None:
        return None
    # one plan per adapter while its parts stay the same objects (a streaming loop calls this per row)
    key = (id(parts.likelihood), id(structure), id(parts.weighting), dyn, mean.shape[-1])
    cached = _PLANS.get(adapter)
    if cached is not None and cached[0] == key and cached[1].likelihood is parts.likelihood \
            and cached[1].structure is structure and cached[1].weighting is parts.weighting:
        return cached[1]
    plan = None
    if type(structure) is LowRankPrecision:
        if structure.variant == "diagonal" and structure.svd == "full" and structure.cpu_backend == "numpy" \
                and mean.shape[-1] <= LOFI_KERNEL_MAX_PARAMS:
            plan = LoFiPlan(parts, dyn)
    elif type(structure) is DiagonalCovariance:
        plan = DiagonalPlan(parts, dyn)
    elif type(structure) is FullCovariance and mean.shape[-1] <= FULL_KERNEL_MAX_PARAMS:
        plan = FullPlan(parts, dyn)
    elif factored and mean.shape[-1] <= FACTORED_KERNEL_MAX_PARAMS:
        plan = FactoredPlan(parts, dyn, mean.shape[-1])
    if plan is not None:
        _PLANS[adapter] = (key, plan)
    return plan


def _factored_dynamics_of(parts, structure, like):
    """``(g, (q_1, …, q_n))`` of dynamics the factored kernel supports — a decay and a process noise
    per block (:meth:`~skfilter.posteriors.FactoredCovariance.block_noise` of a float or a
    per-parameter ``Q``, as the structure's transition takes it) — else None."""
    dyn = parts.dynamics
    n_blocks = len(structure.kinds)
    if dyn.is_static:
        return 1.0, (0.0,) * n_blocks
    if dyn.reset or dyn.inflates or float(dyn.reversion) != 0.0:
        return None
    q = dyn.process_noise
    if isinstance(q, torch.Tensor) and (q.dim() > 1 or q.dim() == 1 and q.shape[0] != like.shape[-1]):
        return None
    noise = structure.block_noise(q, like)
    return float(dyn.decay), tuple(float(x) for x in noise.tolist())


@functools.lru_cache(maxsize=None)
def _constants(np_dtype):
    """``(ones(1), stiffness_limit, tiny)`` of a dtype, built once (the unit weight of an unweighted
    call, which the kernels never write; not flagged read-only, which numba would compile anew)."""
    return np.ones(1, dtype=np_dtype), stiffness_limit(np_dtype), float(np.finfo(np_dtype).tiny)


@functools.lru_cache(maxsize=None)
def _unused_records(C, np_dtype):
    """The record buffers passed to a kernel that does not record (shape ``(1, ·)``, never written)."""
    return (np.empty((1, C), dtype=np_dtype), np.empty((1, C, C), dtype=np_dtype), np.empty((1, C), dtype=np_dtype))


def _mark_row_failure(exc, state):
    """Annotate an exception raised inside a one-row kernel call as :meth:`KernelPlan.run` does:
    ``last_good_state`` the state before the row, no row done (``rows_done``; a ``FilterStepError``'s
    ``step`` 0)."""
    exc.last_good_state = state
    exc.rows_done = 0
    if isinstance(exc, FilterStepError):
        exc.step = 0


def _source_array(x, np_dtype):
    """``x`` as a kernel reads a belief: a writeable C-contiguous array of ``np_dtype`` (itself when
    it is one; numba compiles a read-only or strided array as another type)."""
    flags = x.flags
    if x.dtype is np_dtype and flags.c_contiguous and flags.writeable and flags.aligned:
        return x
    return np.array(x, dtype=np_dtype, order="C")


def _state_dtype(state):
    """The torch dtype of a :class:`FilterState`'s or a :class:`RowState`'s belief."""
    if type(state) is RowState:
        return torch.float64 if state.mean.dtype == np.float64 else torch.float32
    return state.belief.mean.dtype


def _numpy(t):
    try:
        return t.numpy()
    except RuntimeError:  # a tensor that requires grad
        return t.detach().numpy()


class RowState(tuple):
    """An estimator's filter state after a one-row step of the compiled LoFi kernel
    (:meth:`LoFiPlan.run_row`), held as the kernel wrote it: ``mean``, ``diagonal``, ``low_rank``
    (``Wᵀ``), the prior-predictive ``eta`` and ``m0``, the Gaussian noise vector ``[r_1 … r_C, Σw]``
    and the last whitening ``scale`` (adaptive noise; None otherwise), ``n_seen`` and ``n_steps``,
    with the belief and noise state it continues (``template``, ``noise``: their type, prior and
    fixed noise). A stream of one-row calls goes from one to the next without making a tensor;
    :meth:`state` makes the :class:`~skfilter.filtering.FilterState` (tensors viewing these arrays)
    once, when someone reads it. Never written after it is made (a tuple, made by :meth:`make`).

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import LoFiRegressor, stepping
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(30, 3)), rng.normal(size=30)
    >>> est = LoFiRegressor(hidden_layer_sizes=(8,), random_state=0).fit(X[:20], y[:20])
    >>> for i in range(20, 30):
    ...     _ = est.partial_fit(X[i:i + 1], y[i:i + 1])
    >>> est.filter_state_.n_seen  # the FilterState, made from the RowState the last call left
    30
    """

    __slots__ = ()

    #: one belief (no hypotheses axis), as :attr:`FilterState.log_weights` says
    log_weights = None

    mean = property(operator.itemgetter(0))
    diagonal = property(operator.itemgetter(1))
    low_rank = property(operator.itemgetter(2))
    eta = property(operator.itemgetter(3))
    m0 = property(operator.itemgetter(4))
    noise_vec = property(operator.itemgetter(5))
    scale = property(operator.itemgetter(6))
    n_seen = property(operator.itemgetter(7))
    n_steps = property(operator.itemgetter(8))
    template = property(operator.itemgetter(9))
    noise = property(operator.itemgetter(10))

    @classmethod
    def make(cls, mean, diagonal, low_rank, eta, m0, noise_vec, scale, n_seen, n_steps, template, noise, state=None):
        """A :class:`RowState` of these values (``state``: its :class:`~skfilter.filtering.FilterState`,
        when there is one already)."""
        return tuple.__new__(cls, (mean, diagonal, low_rank, eta, m0, noise_vec, scale, n_seen, n_steps, template,
                                   noise, [state]))

    def __reduce__(self):
        return tuple.__new__, (type(self), tuple(self))

    def state(self) -> FilterState:
        """The :class:`~skfilter.filtering.FilterState` of these arrays (made on the first call,
        the same object after): the belief of ``template``'s type over tensors viewing ``mean``,
        ``diagonal``, ``low_rank``, and for adaptive noise ``{'r', 'weight', 'scale'}`` viewing the
        noise vector and the whitening (else the ``noise`` it continues)."""
        mean, diagonal, low_rank, _, _, vec, scale, n_seen, n_steps, b, noise, made = self
        state = made[0]
        if state is None:
            belief = type(b)(torch.from_numpy(mean), torch.from_numpy(diagonal), torch.from_numpy(low_rank),
                             b.prior_precision, b.prior_mean, n_steps)
            if scale is not None:
                C = scale.shape[0]
                noise = {"r": torch.from_numpy(vec[:C]), "weight": torch.from_numpy(vec[C:].reshape(())),
                         "scale": torch.from_numpy(scale.reshape(C, 1))}
            state = made[0] = FilterState(belief, noise, n_seen)
        return state

    def state_dict(self) -> dict:
        """The values that define this state (for comparisons): its arrays and counts."""
        return {"mean": self.mean, "diagonal": self.diagonal, "low_rank": self.low_rank, "eta": self.eta,
                "m0": self.m0, "noise_vec": self.noise_vec, "scale": self.scale, "n_seen": self.n_seen,
                "n_steps": self.n_steps}


class KernelPlan(abc.ABC):
    """The shared driver of the structure kernels (module docstring). Subclasses set the belief
    buffers (:meth:`load`), call their kernel (:meth:`call`) and rebuild a belief (:meth:`belief`)."""

    def __init__(self, parts, dynamics):
        # the parts a plan needs, not the adapter: plans are cached per adapter (weakly), and a plan
        # holding it would keep the adapter alive
        self.structure, self.weighting = parts.structure, parts.weighting
        self.g, self.q = dynamics
        lik = parts.likelihood
        self.likelihood = lik
        self.code = LIKELIHOOD_CODES[type(lik).__name__]
        self.max_abs = float(lik.max_abs_output or 0.0)
        self.program, self.input_map = _program_of(parts.adapter)
        #: the model's outputs per row
        self.n_outputs = int(self.program[0][-1, 0])
        self.weight_kind, self.weight_c = _weighting_of(parts)
        self._maps = {}
        #: whether a step's outputs are those at the state's mean (no decay moves the mean first), so
        #: that :meth:`run_row` can check them against an output bound in the kernel
        self.checks_outputs = self.g == 1.0

    def row_bound(self, output_bound):
        """The kernel's output bound of a one-row call that also enforces ``output_bound`` (the
        estimator's largest accepted output, checked before learning: a row beyond it is handed
        back, and the full path raises its error)."""
        return output_bound if self.max_abs <= 0.0 else min(self.max_abs, output_bound)

    #: whether the structure's kernel maps the raw rows itself (:func:`~skfilter.kernels.mlp.map_row`)
    maps_inside = False

    def map_args(self, np_dtype):
        """:func:`map_arguments` of this plan's input map in ``np_dtype``, built once per dtype."""
        args = self._maps.get(np_dtype)
        if args is None:
            args = self._maps[np_dtype] = map_arguments(self.input_map, np_dtype)
        return args

    # -- noise state ------------------------------------------------------------------------
    def _noise_vector(self, noise, C, dtype):
        """Gaussian ``[r_1 … r_C, Σw]`` as the kernels take it (zeros for other likelihoods)."""
        out = np.zeros(C + 1, dtype=dtype)
        if isinstance(self.likelihood, Gaussian):
            out[:C] = _numpy(noise["r"])
            out[C] = float(noise["weight"])
        return out

    def _noise_params(self, C, dtype):
        """``(params, adaptive)`` of the likelihood's noise step, built once per ``(C, dtype)`` (the
        kernels only read ``params``; one-row calls would otherwise rebuild them every call)."""
        key = (C, np.dtype(dtype))
        known = self.__dict__.setdefault("_params_by_width", {}).get(key)
        if known is not None:
            return known
        lik = self.likelihood
        if isinstance(lik, MomentMatchedCategorical):  # its jitter (kernels.observations.whiten_rows)
            out = np.array([lik.epsilon, 0.0, 0.0, 0.0, 0.0, 0.0], dtype=dtype), False
        elif not isinstance(lik, Gaussian):
            out = np.zeros(6, dtype=dtype), False
        else:
            c = lik.robust_threshold or 0.0
            kappa = robust_variance_consistency(c, C) if c else 1.0
            params = [lik.eps_min, lik.min_variance, c, kappa, lik.residual_bound or 0.0, np.finfo(dtype).tiny]
            out = np.array(params, dtype=dtype), bool(lik.adaptive)
        self._params_by_width[key] = out
        return out

    def _noise_state(self, noise, vec, scale, C, final=False):
        """The likelihood's noise state after the kernel (``scale``: the last step's whitening):
        tensors wrapping copies, or with ``final`` (neither array is written again: a later call
        works on a copy of ``vec``) views of ``vec`` and ``scale`` (``torch.tensor`` of a float
        costs several ``from_numpy``; the 0-d weight has the belief's dtype either way)."""
        lik = self.likelihood
        if not isinstance(lik, Gaussian) or not lik.adaptive:
            return noise
        if not final:
            vec, scale = vec.copy(), scale.copy()
        return {"r": torch.from_numpy(vec[:C]), "weight": torch.from_numpy(vec[C:].reshape(())),
                "scale": torch.from_numpy(scale.reshape(C, 1))}

    # -- structure hooks ----------------------------------------------------------------------
    @abc.abstractmethod
    def load(self, state, np_dtype):
        """Copy the belief of ``state`` into this plan's buffers (slot 0)."""

    @abc.abstractmethod
    def call(self, X, Y, w, has_w, batch_size, common):
        """Run the kernel on these rows; returns ``(rows_done, status, slot)``."""

    @abc.abstractmethod
    def belief(self, slot, template, n_steps, final=False):
        """A new belief from buffer ``slot``; ``template`` the belief type's source. Fresh tensors,
        or with ``final`` (the call's last, the buffers are not written again) views of the buffers
        of this call for models up to :data:`ZERO_COPY_PARAMS` parameters."""

    def _tensor(self, array, final):
        """``array`` as a tensor: a view (``final`` and a small model) or a copy."""
        if final and self.n_params <= ZERO_COPY_PARAMS:
            return torch.from_numpy(array)
        return torch.from_numpy(array.copy())

    def settle(self, slot):
        """Prepare the next kernel call of a run after one that ended in ``slot``; returns the slot
        that holds the latest belief (by default slot 0, where the structure copies it)."""
        return 0

    def load_arrays(self, arrays, np_dtype, resumed=False):
        """:meth:`load` from the arrays of a belief (``resumed``: those :meth:`slot_arrays`
        returned, already of ``np_dtype`` and contiguous)."""
        raise NotImplementedError

    def slot_arrays(self, slot):
        """The arrays of the belief in buffer ``slot`` as :meth:`load_arrays` takes them, or None
        when the structure does not resume (:meth:`run`)."""
        return None

    # -- the driver -----------------------------------------------------------------------------
    def _inputs(self, X, Y, sample_weight, np_dtype):
        """``(X, Y, w, has_w)`` as the kernels take them: the rows as the default MLP's first layer
        sees them (standardised for a ``StandardizedMLP``), contiguous arrays."""
        Xn = _kernel_rows(X, np_dtype) if self.maps_inside else _mapped_rows(X, self.input_map)
        Yn = np.ascontiguousarray(_numpy(Y))
        has_w = sample_weight is not None
        w = np.ascontiguousarray(_numpy(sample_weight)) if has_w else _constants(np_dtype)[0]
        return Xn, Yn, w, has_w

    def step(self, state, X, Y, sample_weight, record):
        """One step on the rows for every hypothesis of ``state`` (leading axis ``K``), recording the
        predictive; ``(new_state, StepOutput)`` as :func:`~skfilter.filtering.filter_step` (``info``
        and ``weights`` None), or None when a hypothesis needs the torch engine (nothing changed)."""
        belief = state.belief
        dtype = belief.mean.dtype
        np_dtype = _numpy(belief.mean).dtype
        K, nb, C = belief.mean.shape[0], X.shape[0], Y.shape[1]
        Xn, Yn, w, has_w = self._inputs(X, Y, sample_weight, np_dtype)
        params, adaptive = self._noise_params(C, np_dtype)
        noises = np.zeros((K, C + 1), dtype=np_dtype)
        if isinstance(self.likelihood, Gaussian):
            noises[:, :C] = _numpy(state.noise["r"])
            noises[:, C] = _numpy(state.noise["weight"])
        rec = (np.empty((K, nb, C), dtype=np_dtype), np.empty((K, nb, C, C), dtype=np_dtype),
               np.empty((K, nb, C), dtype=np_dtype))
        scales = np.empty((K, C), dtype=np_dtype)
        common = dict(params=params, adaptive=adaptive, limit=stiffness_limit(np_dtype),
                      tiny=float(np.finfo(np_dtype).tiny), scales=scales, noises=noises, rec=rec)
        stacks = self.stack(belief, np_dtype)
        _, status = self.call_hypotheses(Xn, Yn, w, has_w, nb, stacks, common)
        if status != DONE:
            HANDED_BACK[0] += 1
            return None
        noise = state.noise
        if isinstance(self.likelihood, Gaussian) and self.likelihood.adaptive:
            noise = {"r": torch.from_numpy(noises[:, :C].copy()), "weight": torch.from_numpy(noises[:, C].copy()),
                     "scale": torch.from_numpy(scales)[..., None]}
        f, quad = torch.from_numpy(rec[0]), torch.from_numpy(rec[1])
        out = record(X, f, quad, state.noise, None)
        return (FilterState(self.unstack(stacks, belief), noise, state.n_seen + nb),
                StepOutput(None, None, out))

    @abc.abstractmethod
    def stack(self, belief, np_dtype):
        """Fresh arrays of a stacked belief for :meth:`call_hypotheses` (updated in place)."""

    @abc.abstractmethod
    def call_hypotheses(self, X, Y, w, has_w, batch_size, stacks, common):
        """Run the structure's hypotheses kernel; returns ``(k, status)``."""

    @abc.abstractmethod
    def unstack(self, stacks, template):
        """The stacked belief holding the arrays of :meth:`stack` (zero-copy)."""

    def run(self, parts, state, X, Y, sample_weight, batch_size, record, progress):
        belief = state.belief
        np_dtype = _NP_DTYPES[belief.mean.dtype]  # plan_for admits these dtypes only
        C = Y.shape[1]
        Xn, Yn, w, has_w = self._inputs(X, Y, sample_weight, np_dtype)
        params, adaptive = self._noise_params(C, np_dtype)
        n = Xn.shape[0]
        recording = record is not None
        if recording:
            rec = (np.empty((n, C), dtype=np_dtype), np.empty((n, C, C), dtype=np_dtype),
                   np.empty((n, C), dtype=np_dtype))
        else:  # never written: shared, per width and dtype
            rec = _unused_records(C, np_dtype)
        scale = np.empty(C, dtype=np_dtype)
        _, limit, tiny = _constants(np_dtype)
        common = dict(params=params, adaptive=adaptive, limit=limit, tiny=tiny, scale=scale, recording=recording)
        outs = []
        start = state.n_seen
        self.n_params = belief.mean.shape[-1]
        # a call continuing from the state the last call of this plan returned (a streaming loop of
        # one-row calls) takes its arrays as they are: no tensor conversions, no noise vector to build
        last, self._last = self.__dict__.get("_last"), None
        if last is not None and last[0] is belief and last[1] is state.noise and last[2] is np_dtype:
            self.load_arrays(last[3], np_dtype, resumed=True)
            noise_vec = last[4].copy()  # the last state's noise views it
        else:
            self.load(state, np_dtype)
            noise_vec = self._noise_vector(state.noise, C, np_dtype)
        noise_state, n_seen, n_steps = state.noise, state.n_seen, getattr(belief, "n_steps", None)
        row = 0
        try:
            while row < n:
                stop = min(n, row + max(CHUNK_ROWS - CHUNK_ROWS % batch_size, batch_size))
                common["noise"] = noise_vec
                common["rec"] = tuple(r[row:stop] for r in rec) if recording else rec
                done, status, slot = self.call(Xn[row:stop], Yn[row:stop], w[row:stop] if has_w else w, has_w,
                                               batch_size, common)
                if n_steps is not None:
                    n_steps += -(-done // batch_size)
                n_seen += done
                row += done
                final = status == DONE and row >= n  # the buffers are then the belief's (no copy)
                if done and adaptive:
                    noise_state = self._noise_state(noise_state, noise_vec, scale, C, final)
                if recording and done:
                    outs.append(self._records(record, X[row - done:row], *(r[row - done:row] for r in rec),
                                              noise_state))
                if not final:
                    slot = self.settle(slot)
                state = FilterState(self.belief(slot, belief, n_steps, final), noise_state, n_seen)
                if final and self.n_params <= ZERO_COPY_PARAMS:
                    arrays = self.slot_arrays(slot)
                    if arrays is not None:
                        self._last = (state.belief, noise_state, np_dtype, arrays, noise_vec)
                if status != DONE:  # the torch engine does this step (safe forms, or raises)
                    HANDED_BACK[0] += 1
                    nb = min(batch_size, n - row)
                    wb = None if sample_weight is None else sample_weight[row:row + nb]
                    state, output = filtering.filter_step(parts, state, X[row:row + nb], Y[row:row + nb], wb, record)
                    if recording:
                        outs.append(output.record)
                    row += nb
                    self.load(state, np_dtype)
                    noise_vec = self._noise_vector(state.noise, C, np_dtype)
                    noise_state, n_seen = state.noise, state.n_seen
                    n_steps = getattr(state.belief, "n_steps", None)
                if progress is not None:
                    progress(state.n_seen - start)
        except BaseException as exc:
            exc.last_good_state = state
            exc.rows_done = state.n_seen - start
            if isinstance(exc, FilterStepError):
                exc.step = exc.rows_done
            raise
        if not recording:
            return state, None
        return state, (torch.cat(outs) if outs else None)

    def forward_row(self, m, X):
        """The model's outputs at the mean ``m`` (an array) for rows ``X`` already as the kernels take
        them (a C-contiguous array of ``m``'s dtype), with this plan's constants: the kernel call of
        :func:`forward_array`."""
        f = np.empty((X.shape[0], self.n_outputs), dtype=m.dtype)
        shapes, offsets, codes = self.program
        forward_rows(X, shapes, offsets, codes, *self.map_args(m.dtype), m, f)
        return f

    def run_row(self, parts, state, X, Y, output_bound=None):
        """:meth:`run` for one row, unweighted, unrecorded, without progress (an estimator's lean
        one-row ``partial_fit``, :meth:`skfilter._estimator.BaseFilter._lean_fit`): ``X (1, D)`` and
        ``Y (1, C)`` NumPy arrays of the belief's dtype. The same kernel call and the same new state
        as :meth:`run` (bit for bit). ``output_bound`` (with :attr:`checks_outputs`): a row whose
        outputs exceed it is handed back unlearned. Returns the new state, or None when the kernel
        hands the step back (nothing learned, nothing counted: the caller's full path redoes it).
        Raises as :meth:`run`, with ``last_good_state`` (``state``) and ``rows_done`` (0). ``state``
        may be a :class:`RowState` (a structure's own one-row path left it)."""
        if type(state) is RowState:
            state = state.state()
        belief = state.belief
        np_dtype = _NP_DTYPES[belief.mean.dtype]
        C = Y.shape[1]
        Xn = X if self.maps_inside else _mapped_rows(X, self.input_map)
        params, adaptive, ones, limit, tiny, unused = self._row_constants(C, np_dtype)
        scale = np.empty(C, dtype=np_dtype)
        self.n_params = P = belief.mean.shape[-1]
        last, self._last = self.__dict__.get("_last"), None
        noise = state.noise
        if last is not None and last[0] is belief and last[1] is noise and last[2] is np_dtype:
            self.load_arrays(last[3], np_dtype, resumed=True)
            noise_vec = last[4].copy()  # the last state's noise views it
        else:
            self.load(state, np_dtype)
            noise_vec = self._noise_vector(noise, C, np_dtype)
        common = {"params": params, "adaptive": adaptive, "limit": limit, "tiny": tiny, "scale": scale,
                  "recording": False, "noise": noise_vec, "rec": unused}
        if output_bound is not None and self.checks_outputs:
            common["max_abs"] = self.row_bound(output_bound)
        try:
            done, status, slot = self.call(Xn, Y, ones, False, 1, common)
        except BaseException as exc:
            _mark_row_failure(exc, state)
            raise
        if status != DONE or not done:
            return None
        if adaptive:
            noise = self._noise_state(noise, noise_vec, scale, C, True)
        n_steps = getattr(belief, "n_steps", None)
        new = FilterState(self.belief(slot, belief, None if n_steps is None else n_steps + 1, True), noise,
                          state.n_seen + 1)
        if P <= ZERO_COPY_PARAMS:
            arrays = self.slot_arrays(slot)
            if arrays is not None:
                self._last = (new.belief, noise, np_dtype, arrays, noise_vec)
        return new

    def _row_constants(self, C, np_dtype):
        """What every one-row call of width ``C`` and this dtype passes unchanged: ``(params,
        adaptive, ones, limit, tiny, unused records)``."""
        known = self.__dict__.setdefault("_row_consts", {}).get((C, np_dtype))
        if known is None:
            known = self._row_consts[(C, np_dtype)] = (*self._noise_params(C, np_dtype), *_constants(np_dtype),
                                                       _unused_records(C, np_dtype))
        return known

    def _records(self, record, X, f, quad, r, noise_state):
        """The recorder's output for rows whose predictive the kernel computed: each row is passed as
        one hypothesis with its own noise state (``r`` before its step), so one call serves them all."""
        n = f.shape[0]
        ft = torch.from_numpy(f.copy())[:, None, :]
        qt = torch.from_numpy(quad.copy())[:, None, :, :]
        noise = {"r": torch.from_numpy(r.copy())} if isinstance(self.likelihood, Gaussian) else noise_state
        out = record(X, ft, qt, noise, None)
        return out.reshape(n, *out.shape[2:])


class LoFiPlan(KernelPlan):
    """Diagonal LoFi: :func:`~skfilter.kernels.lofi.lofi_rows`. The kernel reads the belief where it
    lies (``source``: the arrays of the state's tensors) and writes two fresh slots of this call, so
    no belief is copied on the way in; a one-row call's new belief is a view of its slot."""

    maps_inside = True

    def load(self, state, np_dtype):
        b = state.belief
        self.eta_shape = b.prior_precision.shape
        self.load_arrays((_numpy(b.mean), _numpy(b.diagonal), _numpy(b.low_rank),
                          _numpy(b.prior_precision).reshape(-1), _numpy(b.prior_mean)), np_dtype)

    def load_arrays(self, arrays, np_dtype, resumed=False):
        mean, diagonal, low_rank, eta, m0 = arrays
        if not resumed:  # the kernel takes writeable C-contiguous arrays of its dtype (only reads them)
            mean, diagonal, low_rank = (_source_array(x, np_dtype) for x in (mean, diagonal, low_rank))
        P, L = mean.shape[0], low_rank.shape[0]
        self.source = (mean, diagonal, low_rank)
        self.cur = -1
        self.means = np.empty((2, P), dtype=np_dtype)
        self.diags = np.empty((2, P), dtype=np_dtype)
        self.factors = np.empty((2, L, P), dtype=np_dtype)
        if self.g == 1.0 and self.q == 0.0:  # static: the kernel only reads them (no copy)
            if resumed:
                self.eta, self.m0 = eta, m0
            else:
                self.eta = np.ascontiguousarray(eta, dtype=np_dtype)
                self.m0 = np.ascontiguousarray(m0, dtype=np_dtype)
        else:  # the dynamics move them in the buffers of this call
            self.eta, self.m0 = eta.copy(), m0.copy()

    def slot_arrays(self, slot):
        if slot < 0:
            return (*self.source, self.eta, self.m0)
        return self.means[slot], self.diags[slot], self.factors[slot], self.eta, self.m0

    def call(self, X, Y, w, has_w, batch_size, c):
        shapes, offsets, codes = self.program
        rf, rq, rn = c["rec"]
        mean0, diag0, W0 = self.source
        out = lofi_rows(X, Y, w, has_w, batch_size, shapes, offsets, codes, *self.map_args(self.means.dtype), mean0,
                        diag0, W0, self.means, self.diags, self.factors, self.cur, self.code, c["noise"], c["params"],
                        c["adaptive"], c.get("max_abs", self.max_abs), self.weight_kind, self.weight_c, self.g, self.q,
                        self.eta, self.m0,
                        c["recording"], rf, rq, rn, c["limit"], c["tiny"], c["scale"])
        self.cur = out[2]
        return out

    def settle(self, slot):
        return slot  # the next call goes on from it (the kernel alternates the slots)

    def run_row(self, parts, state, X, Y, output_bound=None):
        """:meth:`KernelPlan.run_row` for a static LoFi (no decay, no process noise) with an output
        bound: the kernel reads the belief where it lies — the arrays of a :class:`RowState`, or of
        the tensors of a :class:`~skfilter.filtering.FilterState` — and writes one fresh slot, which
        the new :class:`RowState` holds as it is: no conversion, no copy of the belief, no tensor
        made per row. Anything else takes the general :meth:`KernelPlan.run_row`. The same kernel
        call (bit for bit)."""
        if self.g != 1.0 or self.q != 0.0 or output_bound is None:
            return KernelPlan.run_row(self, parts, state, X, Y, output_bound)
        C = Y.shape[1]
        return self.step_row(state, X, Y, self.row_arguments(C, _NP_DTYPES[_state_dtype(state)], output_bound))

    def row_arguments(self, C, np_dtype, output_bound):
        """What :meth:`step_row` passes unchanged for ``C`` outputs, a NumPy dtype and an output
        bound, built once per combination: ``(head, middle, tail, adaptive, np_dtype, C)`` (the
        kernel's constant arguments in three runs); None when this plan has no one-row step (decay
        or process noise: :meth:`KernelPlan.run_row`)."""
        if self.g != 1.0 or self.q != 0.0:
            return None
        key = (C, np_dtype, output_bound)
        known = self.__dict__.setdefault("_row_arguments", {}).get(key)
        if known is None:
            params, adaptive, ones, limit, tiny, (rf, rq, rn) = self._row_constants(C, np_dtype)
            shapes, offsets, codes = self.program
            head = (ones, False, 1, shapes, offsets, codes, *self.map_args(np_dtype))
            middle = (params, adaptive, self.row_bound(output_bound), self.weight_kind, self.weight_c, 1.0, 0.0)
            known = self._row_arguments[key] = (head, middle, (False, rf, rq, rn, limit, tiny), adaptive, np_dtype, C)
        return known

    def step_row(self, state, X, Y, arguments):
        """:meth:`run_row` with its constants resolved (:meth:`row_arguments`): the new
        :class:`RowState`, or None when the kernel hands the step back."""
        head, middle, tail, adaptive, np_dtype, C = arguments
        if type(state) is not RowState:
            state = self.row_state(state, C)
        mean0, W0 = state.mean, state.low_rank
        P = mean0.shape[0]
        means = np.empty((1, P), dtype=np_dtype)  # one row: the kernel writes slot 0 only
        diags = np.empty((1, P), dtype=np_dtype)
        factors = np.empty((1, W0.shape[0], P), dtype=np_dtype)
        scale = np.empty(C, dtype=np_dtype)
        noise_vec = state.noise_vec.copy()  # the state's noise views its vector
        try:
            done, status, _ = lofi_rows(X, Y, *head, mean0, state.diagonal, W0, means, diags, factors, -1, self.code,
                                        noise_vec, *middle, state.eta, state.m0, *tail, scale)
        except BaseException as exc:
            _mark_row_failure(exc, state.state())
            raise
        if status != DONE or not done:
            return None
        n_steps = state.n_steps
        return RowState.make(means[0], diags[0], factors[0], state.eta, state.m0, noise_vec,
                             scale if adaptive else None, state.n_seen + 1, None if n_steps is None else n_steps + 1,
                             state.template, state.noise)

    def probit_row(self, state, X, n_classes):
        """The probit class probabilities ``(n, n_classes)`` of the belief a :class:`RowState` holds
        for the rows ``X`` (an array of its dtype): :func:`probit_arrays`' kernel call on the same
        arrays (bit for bit), or None."""
        shapes, offsets, codes = self.program
        m = state.mean
        f = np.empty((X.shape[0], int(shapes[-1, 0])), dtype=m.dtype)
        var = np.empty_like(f)
        proba = np.empty((X.shape[0], n_classes), dtype=m.dtype)
        if not probit_rows(X, shapes, offsets, codes, *self.map_args(m.dtype), m, LOFI, state.diagonal,
                           state.low_rank, f, var, stiffness_limit(m.dtype), proba):
            return None
        return proba

    def row_state(self, state, C):
        """``state`` (a single-belief :class:`~skfilter.filtering.FilterState` of this plan's
        filter, ``C`` outputs) as a :class:`RowState` over its own arrays (views where they are
        already what the kernel reads; the noise as the kernel's vector), which it keeps as its
        :meth:`RowState.state`."""
        b = state.belief
        np_dtype = _NP_DTYPES[b.mean.dtype]
        mean, diagonal, low_rank = (_source_array(_numpy(x), np_dtype) for x in (b.mean, b.diagonal, b.low_rank))
        eta = np.ascontiguousarray(_numpy(b.prior_precision).reshape(-1), dtype=np_dtype)
        m0 = np.ascontiguousarray(_numpy(b.prior_mean), dtype=np_dtype)
        noise_vec = self._noise_vector(state.noise, C, np_dtype)
        return RowState.make(mean, diagonal, low_rank, eta, m0, noise_vec, None, state.n_seen,
                             getattr(b, "n_steps", None), b, state.noise, state)

    def stack(self, b, np_dtype):
        K = b.mean.shape[0]
        return [np.array(_numpy(x), dtype=np_dtype, order="C", copy=True) for x in
                (b.mean, b.diagonal, b.low_rank, b.prior_precision.reshape(K, -1), b.prior_mean)]

    def call_hypotheses(self, X, Y, w, has_w, batch_size, stacks, c):
        shapes, offsets, codes = self.program
        means, diags, factors, etas, m0s = stacks
        rf, rq, rn = c["rec"]
        return lofi_hypotheses(X, Y, w, has_w, batch_size, shapes, offsets, codes, *self.map_args(means.dtype), means, diags, factors, self.code,
                               c["noises"], c["params"], c["adaptive"], self.max_abs, self.g, self.q, etas, m0s,
                               rf, rq, rn, c["limit"], c["tiny"], c["scales"])

    def unstack(self, stacks, b):
        means, diags, factors, etas, m0s = (torch.from_numpy(x) for x in stacks)
        return type(b)(means, diags, factors, etas.reshape(b.prior_precision.shape), m0s, b.n_steps + 1)

    def belief(self, slot, template, n_steps, final=False):
        t = self._tensor
        if self.g == 1.0 and self.q == 0.0:  # static: the prior-predictive fields are the template's
            eta, m0 = template.prior_precision, template.prior_mean
        else:
            eta, m0 = t(self.eta, final).reshape(self.eta_shape), t(self.m0, final)
        mean, diag, W = self.slot_arrays(slot)[:3]
        if slot < 0:  # no step done: the source arrays are the state's own
            final = False
        return type(template)(t(mean, final), t(diag, final), t(W, final), eta, m0, n_steps)


class DiagonalPlan(KernelPlan):
    """VD-/FD-EKF: :func:`~skfilter.kernels.diagonal.diagonal_rows`."""

    def load(self, state, np_dtype):
        b = state.belief
        self.load_arrays((_numpy(b.mean), _numpy(b.var)), np_dtype)

    def load_arrays(self, arrays, np_dtype, resumed=False):
        mean, var = arrays
        P = mean.shape[0]
        self.means = np.empty((2, P), dtype=np_dtype)
        self.variances = np.empty((2, P), dtype=np_dtype)
        self.means[0], self.variances[0] = mean, var

    def slot_arrays(self, slot):
        return self.means[slot], self.variances[slot]

    def call(self, X, Y, w, has_w, batch_size, c):
        shapes, offsets, codes = self.program
        structure = self.structure
        rf, rq, rn = c["rec"]
        return diagonal_rows(X, Y, w, has_w, batch_size, shapes, offsets, codes, self.means, self.variances, 0,
                             structure.projection == "fd", structure.vd_mean == "exact", self.code, c["noise"],
                             c["params"], c["adaptive"], c.get("max_abs", self.max_abs), self.weight_kind, self.weight_c,
                             self.g, self.q,
                             c["recording"], rf, rq, rn,
                             c["limit"], c["tiny"], c["scale"])

    def settle(self, slot):
        if slot != 0:
            self.means[0], self.variances[0] = self.means[1], self.variances[1]
        return 0

    def belief(self, slot, template, n_steps, final=False):
        return type(template)(self._tensor(self.means[slot], final), self._tensor(self.variances[slot], final))

    def stack(self, b, np_dtype):
        return [np.array(_numpy(x), dtype=np_dtype, order="C", copy=True) for x in (b.mean, b.var)]

    def call_hypotheses(self, X, Y, w, has_w, batch_size, stacks, c):
        shapes, offsets, codes = self.program
        structure = self.structure
        rf, rq, rn = c["rec"]
        return diagonal_hypotheses(X, Y, w, has_w, batch_size, shapes, offsets, codes, stacks[0], stacks[1],
                                   structure.projection == "fd", structure.vd_mean == "exact", self.code, c["noises"],
                                   c["params"], c["adaptive"], self.max_abs, self.g, self.q, rf, rq, rn, c["limit"],
                                   c["tiny"], c["scales"])

    def unstack(self, stacks, b):
        return type(b)(torch.from_numpy(stacks[0]), torch.from_numpy(stacks[1]))


class FullPlan(KernelPlan):
    """The full-covariance EKF: :func:`~skfilter.kernels.full.full_rows`, ``Σ`` updated in place in
    a buffer of this call (one copy of the ``P × P`` matrix per call, none per step)."""

    def load(self, state, np_dtype):
        b = state.belief
        self.mean = _numpy(b.mean).copy()
        self.cov = np.array(_numpy(b.cov), dtype=np_dtype, order="C", copy=True)
        self.handed_out = False

    def call(self, X, Y, w, has_w, batch_size, c):
        if self.handed_out:  # the buffer is now a belief's: learn on in a copy
            self.cov = self.cov.copy()
            self.handed_out = False
        shapes, offsets, codes = self.program
        rf, rq, rn = c["rec"]
        return full_rows(X, Y, w, has_w, batch_size, shapes, offsets, codes, self.mean, self.cov, self.code,
                         c["noise"], c["params"], c["adaptive"], c.get("max_abs", self.max_abs), self.weight_kind,
                         self.weight_c, self.g,
                         self.q, c["recording"],
                         rf, rq, rn, c["limit"], c["tiny"], c["scale"])

    def belief(self, slot, template, n_steps, final=False):
        self.handed_out = True  # zero-copy: the next kernel call (if any) copies first
        return type(template)(torch.from_numpy(self.mean.copy()), torch.from_numpy(self.cov))

    def stack(self, b, np_dtype):
        return [np.array(_numpy(x), dtype=np_dtype, order="C", copy=True) for x in (b.mean, b.cov)]

    def call_hypotheses(self, X, Y, w, has_w, batch_size, stacks, c):
        shapes, offsets, codes = self.program
        rf, rq, rn = c["rec"]
        return full_hypotheses(X, Y, w, has_w, batch_size, shapes, offsets, codes, stacks[0], stacks[1], self.code,
                               c["noises"], c["params"], c["adaptive"], self.max_abs, self.g, self.q, rf, rq, rn,
                               c["limit"], c["tiny"], c["scales"])

    def unstack(self, stacks, b):
        return type(b)(torch.from_numpy(stacks[0]), torch.from_numpy(stacks[1]))


class FactoredPlan(KernelPlan):
    """LRKF, HiLoFi, LoLoFi (:class:`~skfilter.posteriors.FactoredCovariance`):
    :func:`~skfilter.kernels.factored.factored_rows`. Every block's factor lies flat in one buffer
    per slot (block ``b`` from ``fstarts[b]``), its parameters at ``positions[starts[b]:starts[b + 1]]``."""

    def __init__(self, parts, dynamics, n_params):
        g, q_blocks = dynamics
        super().__init__(parts, (g, 0.0))
        structure = parts.structure
        self.layout = layout = factored_layout(structure, n_params)
        self.positions, self.starts, self.ranks = layout.positions, layout.starts, layout.ranks
        self.shapes, self.fstarts = layout.shapes, layout.fstarts
        self.kinds = np.array([(CHOLESKY_EXACT_NOISE if kind.exact_process_noise else CHOLESKY)
                               if isinstance(kind, CholeskyFactor) else
                               (LOW_RANK_PLUS_NOISE if kind.keep_process_noise else LOW_RANK)
                               for kind in structure.kinds], dtype=np.int64)
        #: per dtype: the process noise per block, the machine epsilon
        self.block_noise = {np.dtype(t): np.array(q_blocks, dtype=t) for t in (np.float64, np.float32)}
        self.eps = {np.dtype(t): float(np.finfo(t).eps) for t in (np.float64, np.float32)}

    def flat_factors(self, factors, np_dtype, batch=()):
        """The factors of a belief as one flat array per hypothesis (``batch + (F,)``)."""
        return self.layout.flat_factors(factors, np_dtype, batch)

    def factor_views(self, flat, batch=()):
        """The factors of a flat buffer (``batch + (F,)``) as arrays ``batch + (r_b, D_b)`` (views)."""
        return [flat[..., s:s + r * D].reshape(*batch, r, D) for (r, D), s in zip(self.shapes, self.fstarts)]

    def _factors(self, flat, final, batch=()):
        """The factor tensors of a flat buffer (views with ``final`` and a small model, else copies)."""
        return tuple(self._tensor(v, final) for v in self.factor_views(flat, batch))

    def load(self, state, np_dtype):
        b = state.belief
        self.load_arrays((_numpy(b.mean), self.flat_factors(b.factors, np_dtype), _numpy(b.pending)), np_dtype)

    def load_arrays(self, arrays, np_dtype, resumed=False):
        mean, flat, pending = arrays
        self.means = np.empty((2, mean.shape[0]), dtype=np_dtype)
        self.factors = np.empty((2, flat.shape[0]), dtype=np_dtype)
        self.pendings = np.empty((2, pending.shape[0]), dtype=np_dtype)
        self.means[0], self.factors[0], self.pendings[0] = mean, flat, pending

    def slot_arrays(self, slot):
        return self.means[slot], self.factors[slot], self.pendings[slot]

    def call(self, X, Y, w, has_w, batch_size, c):
        shapes, offsets, codes = self.program
        rf, rq, rn = c["rec"]
        np_dtype = self.means.dtype
        return factored_rows(X, Y, w, has_w, batch_size, shapes, offsets, codes, self.means, self.factors,
                             self.pendings, 0, self.positions, self.starts, self.fstarts, self.ranks, self.kinds,
                             self.code, c["noise"], c["params"], c["adaptive"], c.get("max_abs", self.max_abs),
                             self.weight_kind, self.weight_c, self.g, self.block_noise[np_dtype], c["recording"], rf, rq, rn,
                             c["limit"], self.eps[np_dtype], c["tiny"], c["scale"])

    def settle(self, slot):
        if slot != 0:
            self.means[0], self.factors[0], self.pendings[0] = self.means[1], self.factors[1], self.pendings[1]
        return 0

    def belief(self, slot, template, n_steps, final=False):
        return type(template)(self._tensor(self.means[slot], final), self._factors(self.factors[slot], final),
                              self._tensor(self.pendings[slot], final))

    def stack(self, b, np_dtype):
        K = b.mean.shape[0]
        return [np.array(_numpy(b.mean), dtype=np_dtype, order="C", copy=True), self.flat_factors(b.factors, np_dtype, (K,)),
                np.array(_numpy(b.pending), dtype=np_dtype, order="C", copy=True)]

    def call_hypotheses(self, X, Y, w, has_w, batch_size, stacks, c):
        shapes, offsets, codes = self.program
        rf, rq, rn = c["rec"]
        np_dtype = stacks[0].dtype
        return factored_hypotheses(X, Y, w, has_w, batch_size, shapes, offsets, codes, stacks[0], stacks[1], stacks[2],
                                   self.positions, self.starts, self.fstarts, self.ranks, self.kinds, self.code,
                                   c["noises"], c["params"], c["adaptive"], self.max_abs, self.g, self.block_noise[np_dtype],
                                   rf, rq, rn, c["limit"], self.eps[np_dtype], c["tiny"], c["scales"])

    def unstack(self, stacks, b):
        K = stacks[0].shape[0]
        self.n_params = stacks[0].shape[1]
        return type(b)(torch.from_numpy(stacks[0]), self._factors(stacks[1], True, (K,)),
                       torch.from_numpy(stacks[2]))


# -- the dispatch ----------------------------------------------------------------------------------
class RunLengthPlan:
    """RL[K]-PR (BOCD with ``reset='prior'``, ``K`` run lengths kept) over a compiled filter — LoFi,
    the VD/FD-EKF, the full-covariance EKF or the factored covariance — and RL[K]-MMPR
    (``reset='moment-matched'``, ``moment_matched``; all but LoFi, which has no moment match) on the
    kernels of :mod:`skfilter.kernels.runlength`:
    many rows per call, the hypotheses in a pool of belief slots reordered by index (no belief
    copied per step; the full EKF's ``(K + 1) P²`` pool and the ``K P²`` covariances it returns in
    memory :func:`recycled_empty` reuses). Built by :func:`runlength_plan_for` around the base filter's
    :class:`KernelPlan`; :meth:`run` filters rows from a mixture state and returns the new one,
    stopping at a row the kernel cannot finish (the caller, :func:`skfilter.runlength.run_runlength`,
    runs that row on the engine)."""

    def __init__(self, base_plan, prior_belief, hazard, n_hypotheses, weighted_evidence=False, moment_matched=False):
        self.base = base_plan
        self.weighted_evidence = bool(weighted_evidence)
        #: the changepoint candidate starts from the kept hypotheses' moment-matched mixture (RL[K]-MMPR)
        self.moment_matched = bool(moment_matched)
        self.prior_belief = prior_belief
        self.log_h = math.log(hazard) if hazard > 0 else -math.inf
        self.log_s = math.log1p(-hazard) if hazard < 1 else -math.inf
        self.n_keep = int(n_hypotheses)
        self.hazard = hazard
        #: the state the last call returned and the pool it lives in (:meth:`run`)
        self._last = None
        #: whether the prior's covariance is diagonal (full EKF; set by :meth:`_pool`)
        self._prior_diagonal = False

    # -- per structure: the pool of belief slots, the kernel, the kept beliefs --------------------
    def slot_count(self, K_max):
        """The pool's slots: the ``K`` kept and the ``K + 1`` candidates of a row; over the full EKF a
        kept hypothesis is updated in its own slot and only the changepoint candidate needs another."""
        return K_max + 1 if isinstance(self.base, FullPlan) else 2 * K_max + 1

    def _pool(self, b, K, S, np_dtype):
        """The structure's slot arrays with the ``K`` hypotheses of the stacked belief ``b`` in the
        first slots, and the prior's arrays."""
        P = b.mean.shape[-1]
        pb = self.prior_belief
        if isinstance(self.base, LoFiPlan):
            L = b.low_rank.shape[-2]
            eta = _numpy(b.prior_precision).reshape(K, -1)
            pool = (np.empty((S, 1, P), dtype=np_dtype), np.empty((S, 1, P), dtype=np_dtype),
                    np.empty((S, 1, L, P), dtype=np_dtype), np.empty((S, eta.shape[1]), dtype=np_dtype),
                    np.empty((S, P), dtype=np_dtype))
            for array, value in zip(pool, (_numpy(b.mean)[:, None], _numpy(b.diagonal)[:, None],
                                           _numpy(b.low_rank)[:, None], eta, _numpy(b.prior_mean))):
                array[:K] = value
            prior = (pb.mean, pb.diagonal, pb.low_rank, pb.prior_precision.reshape(-1), pb.prior_mean)
        elif isinstance(self.base, DiagonalPlan):
            pool = (np.empty((S, 2, P), dtype=np_dtype), np.empty((S, 2, P), dtype=np_dtype))
            pool[0][:K, 0], pool[1][:K, 0] = _numpy(b.mean), _numpy(b.var)
            prior = (pb.mean, pb.var)
        elif isinstance(self.base, FactoredPlan):
            flat = self.base.flat_factors(b.factors, np_dtype, (K,))
            pool = (np.empty((S, 2, P), dtype=np_dtype), np.empty((S, 2, flat.shape[1]), dtype=np_dtype),
                    np.empty((S, 2, b.pending.shape[-1]), dtype=np_dtype))
            pool[0][:K, 0], pool[1][:K, 0], pool[2][:K, 0] = _numpy(b.mean), flat, _numpy(b.pending)
            prior = (pb.mean, torch.from_numpy(self.base.flat_factors(pb.factors, np_dtype)), pb.pending)
        else:
            pool = (np.empty((S, P), dtype=np_dtype), recycled_empty((S, P, P), np_dtype))
            pool[0][:K], pool[1][:K] = _numpy(b.mean), _numpy(b.cov)
            prior = (pb.mean, pb.cov)
            if self.__dict__.get("_diagonal_of") is not pb.cov:  # once per prior
                cov = _numpy(pb.cov)
                self._prior_diagonal = bool(np.count_nonzero(cov) == np.count_nonzero(np.diagonal(cov)))
                self._diagonal_of = pb.cov
        prior = tuple(np.ascontiguousarray(_numpy(x), dtype=np_dtype) for x in prior)
        return pool, prior

    def _call(self, Xn, Yn, w, has_w, pool, prior, noises, scales, keep, common, rec, evidence):
        plan = self.base
        shapes, offsets, codes = plan.program
        factored = isinstance(plan, FactoredPlan)
        q = plan.block_noise[Xn.dtype] if factored else plan.q
        tail = (*keep, self.n_keep, self.log_h, self.log_s, plan.code, common["params"], common["adaptive"],
                plan.max_abs, plan.g, q, common["limit"], common["tiny"], common["recording"], *rec, evidence,
                plan.weight_kind, plan.weight_c, self.weighted_evidence)
        if factored:
            return factored_runlength_rows(Xn, Yn, w, has_w, shapes, offsets, codes, *pool, noises, scales, *prior,
                                           plan.positions, plan.starts, plan.fstarts, plan.ranks, plan.kinds,
                                           plan.eps[Xn.dtype], *tail, self.moment_matched)
        if isinstance(plan, LoFiPlan):
            return lofi_runlength_rows(Xn, Yn, w, has_w, shapes, offsets, codes, *plan.map_args(Xn.dtype), *pool,
                                       noises, scales, *prior, *tail)
        if isinstance(plan, DiagonalPlan):
            structure = plan.structure
            return diagonal_runlength_rows(Xn, Yn, w, has_w, shapes, offsets, codes, *pool, noises, scales, *prior,
                                           structure.projection == "fd", structure.vd_mean == "exact", *tail,
                                           self.moment_matched)
        return full_runlength_rows(Xn, Yn, w, has_w, shapes, offsets, codes, *pool, noises, scales, *prior, *tail,
                                   self._prior_diagonal, self.moment_matched)

    def _belief(self, pool, idx, b, rows):
        """The kept hypotheses' stacked belief (copies of their slots, most probable first)."""
        t = torch.from_numpy
        k = len(idx)
        if isinstance(self.base, LoFiPlan):
            means, diags, factors, etas, m0s = pool
            return type(b)(t(means[idx, 0]), t(diags[idx, 0]), t(factors[idx, 0]),
                           t(etas[idx]).reshape(k, *b.prior_precision.shape[1:]), t(m0s[idx]), b.n_steps + rows)
        if isinstance(self.base, DiagonalPlan):
            return type(b)(t(pool[0][idx, 0]), t(pool[1][idx, 0]))
        if isinstance(self.base, FactoredPlan):
            factors = tuple(t(np.ascontiguousarray(v)) for v in self.base.factor_views(pool[1][idx, 0], (k,)))
            return type(b)(t(pool[0][idx, 0]), factors, t(pool[2][idx, 0]))
        covs = pool[1]
        out = recycled_empty((k, *covs.shape[1:]), covs.dtype)  # (fresh memory costs page faults)
        np.take(covs, idx, axis=0, out=out)
        return type(b)(t(pool[0][idx]), t(out))

    def run(self, mixture, run_lengths, X, Y, sample_weight, recording):
        """Filter the rows from ``mixture`` (a :class:`~skfilter.filtering.FilterState` with the
        hypotheses axis and normalised ``log_weights``) and its ``run_lengths``.

        Returns ``(mixture, run_lengths, log_evidence_increment, changepoint_probability, rows_done,
        done, records)``: ``done`` False when row ``rows_done`` must go to the engine (the state
        returned is that before it); ``records`` ``(f, quad, noise, weights)`` arrays of the rows
        done (candidates on axis 1, padded with zero weights), or None."""
        plan, b = self.base, mixture.belief
        np_dtype = _NP_DTYPES[b.mean.dtype]
        K = b.mean.shape[0]
        C = Y.shape[1]
        K_max = max(self.n_keep, K)
        S = self.slot_count(K_max)
        Xn, Yn, w, has_w = plan._inputs(X, Y, sample_weight, np_dtype)
        params, adaptive = plan._noise_params(C, np_dtype)
        _, limit, tiny = _constants(np_dtype)
        gaussian = isinstance(plan.likelihood, Gaussian)
        # a call continuing from the state the last call returned (one row per call) finds its
        # hypotheses where that call left them in the pool: nothing to allocate or copy in
        last, self._last = self._last, None
        if (last is not None and last[0] is mixture.belief and last[1] is mixture.noise
                and last[2] is mixture.log_weights and last[3] is run_lengths and last[4] == (np_dtype, C)):
            pool, prior, noises, scales, slots, log_weights, runs, counts = last[5]
        else:
            pool, prior = self._pool(b, K, S, np_dtype)
            noises = np.zeros((S, C + 1), dtype=np_dtype)
            scales = np.ones((S, C), dtype=np_dtype)
            if gaussian:
                noises[:K, :C] = _numpy(mixture.noise["r"])
                noises[:K, C] = _numpy(mixture.noise["weight"])
                scales[:K] = _numpy(mixture.noise["scale"]).reshape(K, C)
            slots = np.zeros(K_max, dtype=np.int64)
            slots[:K] = np.arange(K)
            log_weights = np.zeros(K_max, dtype=np.float64)
            log_weights[:K] = _numpy(mixture.log_weights)
            runs = np.zeros(K_max, dtype=np.int64)
            runs[:K] = _numpy(run_lengths)
            counts = np.array([K], dtype=np.int64)
        evidence = np.zeros(2, dtype=np.float64)
        m = Xn.shape[0] if recording else 1
        rec = (np.empty((m, K_max + 1, C), dtype=np_dtype), np.empty((m, K_max + 1, C, C), dtype=np_dtype),
               np.empty((m, K_max + 1, C), dtype=np_dtype), np.empty((m, K_max + 1), dtype=np_dtype))
        common = {"params": params, "adaptive": adaptive, "limit": limit, "tiny": tiny, "recording": recording}
        done, status = self._call(Xn, Yn, w, has_w, pool, prior, noises, scales, (slots, log_weights, runs, counts),
                                  common, rec, evidence)
        if status != DONE:
            HANDED_BACK[0] += 1
        if done == 0:
            return mixture, run_lengths, 0.0, None, 0, status == DONE, None
        k = int(counts[0])
        idx = slots[:k]
        belief = self._belief(pool, idx, b, done)
        noise = mixture.noise
        if gaussian:
            noise = {"r": torch.from_numpy(noises[idx, :C]), "weight": torch.from_numpy(noises[idx, C]),
                     "scale": torch.from_numpy(scales[idx]).reshape(k, C, 1)}
        # a copy (the pool's array moves on), in the belief's dtype
        new = FilterState(belief, noise, mixture.n_seen + done, torch.from_numpy(log_weights[:k].astype(np_dtype)))
        new_runs = torch.from_numpy(runs[:k].copy())
        if status == DONE:
            self._last = (belief, noise, new.log_weights, new_runs, (np_dtype, C),
                          (pool, prior, noises, scales, slots, log_weights, runs, counts))
        records = tuple(r[:done] for r in rec) if recording else None
        return new, new_runs, float(evidence[0]), float(evidence[1]), done, status == DONE, records


class ReversionPlan(RunLengthPlan):
    """RL[1]-OUPR* and CPP-OU (BOCD with ``reset='ou'`` / ``'cpp-ou'``: one hypothesis shrunk
    towards the reference) over LoFi, the VD/FD-EKF, the full-covariance EKF or the factored
    covariance (LRKF, HiLoFi, LoLoFi), on the kernels of :mod:`skfilter.kernels.reversion`
    (:func:`~skfilter.kernels.reversion.lofi_reversion_rows`,
    :func:`~skfilter.kernels.reversion_diagonal.diagonal_reversion_rows`,
    :func:`~skfilter.kernels.reversion_full.full_reversion_rows`,
    :func:`~skfilter.kernels.reversion_factored.factored_reversion_rows`), in :class:`RunLengthPlan`'s
    pool (``K = 1``; over LoFi the prior-predictive precision held with the prior's length — per
    parameter when the reference variance is, as the shrink then makes it; over the factored
    covariance the reference variance averaged per block, as the engine's shrink takes it). The
    base's dynamics and robust
    weighting (``weighted_evidence``: the scores under it) as the engine's. Built by
    :func:`runlength_plan_for`."""

    def __init__(self, base_plan, prior_belief, reference, hazard, reset, threshold, grid, weighted_evidence=False):
        super().__init__(base_plan, prior_belief, hazard, 1, weighted_evidence)
        self.reset, self.threshold = reset, float(threshold)
        self.reference = reference
        P = prior_belief.mean.shape[-1]
        np_dtype = _NP_DTYPES[prior_belief.mean.dtype]
        var = torch.as_tensor(reference.variance, dtype=prior_belief.mean.dtype)
        # LoFi's prior-predictive precision: per parameter under a per-parameter reference variance
        # (the engine's shrink broadcasts it so, even when the prior keeps one value), else as the prior's
        if isinstance(base_plan, LoFiPlan):
            self.eta_shape = (P,) if var.dim() > 0 else tuple(prior_belief.prior_precision.shape)
        if isinstance(base_plan, FactoredPlan):  # the shrink's Q = (1 − g²) v₀, averaged per block as the engine's
            block_var = base_plan.structure.block_noise(var, prior_belief.mean)
            self.ref = (np.ascontiguousarray(_numpy(reference.mean), dtype=np_dtype),
                        np.ascontiguousarray(_numpy(block_var), dtype=np_dtype))
        else:
            var = var.reshape(-1)
            self.ref = (np.ascontiguousarray(_numpy(reference.mean), dtype=np_dtype),
                        np.ascontiguousarray(_numpy(var.expand(P) if var.numel() == 1 else var), dtype=np_dtype))
        self.grid = np.asarray(grid, dtype=np.float64)

    #: pool slots: LoFi's hypothesis, its predicted belief, the start of a shrink and the step; the
    #: diagonal's and the factored covariance's hypothesis and the step (the predicted belief and the
    #: start in its first half); the full EKF's hypothesis, updated in place
    def slot_count(self, K_max):
        return 4 if isinstance(self.base, LoFiPlan) else 2

    def _pool(self, b, K, S, np_dtype):
        if not isinstance(self.base, LoFiPlan):
            return super()._pool(b, K, S, np_dtype)
        P = b.mean.shape[-1]
        E = math.prod(self.eta_shape)
        eta = _numpy(b.prior_precision).reshape(K, -1)
        pool = (np.empty((S, 1, P), dtype=np_dtype), np.empty((S, 1, P), dtype=np_dtype),
                np.empty((S, 1, b.low_rank.shape[-2], P), dtype=np_dtype), np.empty((S, E), dtype=np_dtype),
                np.empty((S, P), dtype=np_dtype))
        for array, value in zip(pool, (_numpy(b.mean)[:, None], _numpy(b.diagonal)[:, None],
                                       _numpy(b.low_rank)[:, None], np.broadcast_to(eta, (K, E)), _numpy(b.prior_mean))):
            array[:K] = value
        pb = self.prior_belief
        prior = (pb.mean, pb.diagonal, pb.low_rank, pb.prior_precision.reshape(-1), pb.prior_mean)
        return pool, tuple(np.ascontiguousarray(_numpy(x), dtype=np_dtype) for x in prior)

    def _belief(self, pool, idx, b, rows):
        if not isinstance(self.base, LoFiPlan):
            return super()._belief(pool, idx, b, rows)
        t = torch.from_numpy
        means, diags, factors, etas, m0s = pool
        before, after = self._run_lengths
        # the update count: from the prior's after a hard reset within these rows (run length 0 there)
        n_steps = self.prior_belief.n_steps + after + 1 if after < before + rows else b.n_steps + rows
        eta = t(etas[idx]).reshape(len(idx), *self.eta_shape)
        return type(b)(t(means[idx, 0]), t(diags[idx, 0]), t(factors[idx, 0]), eta, t(m0s[idx]), n_steps)

    def _call(self, Xn, Yn, w, has_w, pool, prior, noises, scales, keep, common, rec, evidence):
        plan = self.base
        shapes, offsets, codes = plan.program
        slots, log_weights, runs, counts = keep
        before = int(runs[0])
        reset = (OU if self.reset == "ou" else CPP_OU, self.threshold, self.grid)
        factored = isinstance(plan, FactoredPlan)
        tail = (plan.code, common["params"], common["adaptive"], plan.max_abs, plan.g,
                plan.block_noise[Xn.dtype] if factored else plan.q, common["limit"], common["tiny"],
                common["recording"], *rec, evidence, plan.weight_kind, plan.weight_c, self.weighted_evidence)
        bookkeeping = (slots, log_weights, runs, counts, self.log_h, self.log_s, *reset)
        if factored:
            result = factored_reversion_rows(Xn, Yn, w, has_w, shapes, offsets, codes, *pool, noises, scales, *prior,
                                             plan.positions, plan.starts, plan.fstarts, plan.ranks, plan.kinds,
                                             plan.eps[Xn.dtype], *self.ref, *bookkeeping, *tail)
        elif isinstance(plan, LoFiPlan):
            result = lofi_reversion_rows(Xn, Yn, w, has_w, shapes, offsets, codes, *plan.map_args(Xn.dtype), *pool,
                                         noises, scales, *prior, *self.ref, *bookkeeping, *tail)
        elif isinstance(plan, DiagonalPlan):
            structure = plan.structure
            result = diagonal_reversion_rows(Xn, Yn, w, has_w, shapes, offsets, codes, *pool, noises, scales, *prior,
                                             structure.projection == "fd", structure.vd_mean == "exact", *self.ref,
                                             *bookkeeping, *tail)
        else:
            result = full_reversion_rows(Xn, Yn, w, has_w, shapes, offsets, codes, *pool, noises, scales, *prior,
                                         self._prior_diagonal, *self.ref, *bookkeeping, *tail)
        self._run_lengths = (before, int(runs[0]))
        return result


def runlength_plan_for(parts, mixture, prior_belief, batch_size, *, hazard, n_hypotheses, reset="prior",
                       threshold=0.5, weighted_evidence=False, grid=(1.0,)):
    """The :class:`RunLengthPlan` of a run-length filter (the options of
    :func:`skfilter.runlength.runlength_step`) that the compiled kernel serves, else None: the
    kernels on, ``reset='prior'`` or ``'moment-matched'`` with an integer ``n_hypotheses``, one row
    per step, and a base filter whose single-belief step :func:`plan_for` gives to the LoFi
    (``'prior'`` only: LoFi has no moment match), diagonal, full or factored kernel (its dynamics and
    a built-in robust weighting — BOCD over WoLF — included; any likelihood the kernels have); the
    mixture's belief on the CPU in the prior's dtype. ``reset='ou'`` (``threshold``) and
    ``'cpp-ou'`` (the ``υ`` of ``grid``): :class:`ReversionPlan`, when it serves them."""
    if reset in ("ou", "cpp-ou"):
        return _reversion_plan_for(parts, mixture, prior_belief, batch_size, hazard, n_hypotheses, reset, threshold,
                                   weighted_evidence, grid)
    if not enabled() or reset not in ("prior", "moment-matched") or n_hypotheses is None or batch_size != 1:
        return None
    if mixture.log_weights is None:
        return None
    moment_matched = reset == "moment-matched"
    plan = plan_for(parts, FilterState(prior_belief, None, 0), None)
    if type(plan) not in ((DiagonalPlan, FullPlan, FactoredPlan) if moment_matched
                          else (LoFiPlan, DiagonalPlan, FullPlan, FactoredPlan)):
        return None
    mean = mixture.belief.mean
    if mean.dim() != 2 or not mean.is_cpu or mean.dtype != prior_belief.mean.dtype:
        return None
    # one per adapter and base plan, kept for its pool (one-row calls); not on the base plan, whose
    # reference back would make a cycle that keeps the pool alive until a garbage collection
    known = _RUNLENGTH_PLANS.get(parts.adapter)
    if type(known) is RunLengthPlan and known.base is plan and known.prior_belief is prior_belief \
            and known.hazard == hazard \
            and known.n_keep == int(n_hypotheses) and known.weighted_evidence == bool(weighted_evidence) \
            and known.moment_matched == moment_matched:
        return known
    _RUNLENGTH_PLANS[parts.adapter] = known = RunLengthPlan(plan, prior_belief, hazard, n_hypotheses,
                                                            weighted_evidence, moment_matched)
    return known


def _reversion_plan_for(parts, mixture, prior_belief, batch_size, hazard, n_hypotheses, reset, threshold,
                        weighted_evidence, grid):
    """The :class:`ReversionPlan` of ``reset='ou'``/``'cpp-ou'`` when the kernels serve it: one row
    per step, one hypothesis, a base filter whose single-belief step :func:`plan_for` gives to the
    LoFi (diagonal), the VD/FD-EKF, the full-covariance or the factored (LRKF, HiLoFi, LoLoFi)
    kernel — its dynamics (decay, one process-noise value; per block over the factored covariance)
    and a built-in robust weighting (BOCD over WoLF, ``weighted_evidence`` either way) included —, a
    CPU mixture in the prior's dtype, a ``grid`` decreasing from 1 to 0 or more
    (:data:`~skfilter.runlength.CPP_GRID`); else None (the engine)."""
    if not enabled() or batch_size != 1 or n_hypotheses != 1 or mixture.log_weights is None:
        return None
    plan = plan_for(parts, FilterState(prior_belief, None, 0), None)
    if type(plan) not in (LoFiPlan, DiagonalPlan, FullPlan, FactoredPlan):
        return None
    if parts.reference is None:
        return None
    if reset == "cpp-ou" and not (grid[0] == 1.0 and all(a > b for a, b in zip(grid, grid[1:])) and grid[-1] >= 0.0):
        return None
    mean = mixture.belief.mean
    if mean.dim() != 2 or mean.shape[0] != 1 or not mean.is_cpu or mean.dtype != prior_belief.mean.dtype:
        return None
    known = _RUNLENGTH_PLANS.get(parts.adapter)  # (as runlength_plan_for: no reference from the base plan)
    if isinstance(known, ReversionPlan) and known.base is plan and known.prior_belief is prior_belief \
            and known.hazard == hazard and known.reset == reset and known.threshold == float(threshold) \
            and known.reference is parts.reference and tuple(known.grid) == tuple(grid) \
            and known.weighted_evidence == bool(weighted_evidence):
        return known
    _RUNLENGTH_PLANS[parts.adapter] = known = ReversionPlan(plan, prior_belief, parts.reference, hazard, reset,
                                                            threshold, grid, weighted_evidence)
    return known


def run_compiled(parts, state, X, Y, sample_weight, batch_size, record, progress):
    """Filter the rows with a compiled kernel if the filter qualifies (module docstring).

    Returns ``None`` when it does not (the caller runs the torch engine), else ``(state, records)``
    as :func:`skfilter.filtering.run_filter`. Raises as the torch engine does, with
    ``last_good_state`` and ``rows_done`` on the exception.
    """
    if not enabled():
        return None
    plan = plan_for(parts, state, record)
    if plan is None:
        return None
    return plan.run(parts, state, X, Y, sample_weight, batch_size, record, progress)


def step_compiled(parts, state, X, Y, sample_weight, record):
    """One filter step of a stack of beliefs (hypotheses axis, e.g. BOCD's run lengths) on a
    compiled kernel (:meth:`KernelPlan.step`), when the filter qualifies and the caller records the
    predictive with a recorder that does not sample the belief (``record.needs_belief`` False).

    Returns ``None`` (the caller runs :func:`skfilter.filtering.filter_step`'s torch stages, which
    also serve any step a kernel cannot finish), else ``(state, StepOutput)`` with ``info`` and
    ``weights`` None.
    """
    if not enabled():
        return None
    plan = plan_for(parts, state, record, hypotheses=True)
    return None if plan is None else plan.step(state, X, Y, sample_weight, record)


def stacked_first_pass(diagonal, low_rank, rows, gram):
    """The first pass of the large-network LoFi step
    (:func:`~skfilter.posteriors.lofi.lofi_jacobian_products`'s ``first_pass``) on the compiled sweep
    :func:`~skfilter.kernels.stacked.stacked_row_products`: ``Π (k, 2k)`` (``gram=False``: its first
    ``k`` columns), or ``None`` for arrays it does not take (then BLAS forms ``Π``)."""
    dt = low_rank.dtype
    if (dt not in _NP_DTYPES.values() or rows.dtype != dt or diagonal.dtype != dt or low_rank.ndim != 2
            or rows.ndim != 2 or diagonal.ndim != 1 or not (low_rank.flags.c_contiguous and rows.flags.c_contiguous
                                                            and diagonal.flags.c_contiguous)):
        return None
    k = low_rank.shape[0] + rows.shape[0]
    out = np.empty((k, 2 * k), dtype=dt)
    stacked_row_products(low_rank, rows, diagonal, out, dt.type(0), dt.type(1))
    return out if gram else out[:, :k]


def _first_pass():
    """:func:`stacked_first_pass` when the kernels are on, else None (the engine's BLAS pass)."""
    return stacked_first_pass if enabled() else None


def run_filter(parts, state, X, Y, sample_weight=None, batch_size=1, record=None, progress=None, on_step=None):
    """:func:`skfilter.filtering.run_filter` with the compiled kernels offered the rows first.

    Without ``on_step`` (which must see every step's :class:`~skfilter.filtering.StepOutput`), the
    rows go to :func:`run_compiled`; when no kernel serves the filter, the torch engine filters them.
    Same arguments, result and failure contract (``last_good_state``, ``rows_done``) as the engine's.

    Examples
    --------
    >>> import torch
    >>> from skfilter import LoFiRegressor
    >>> from skfilter.stepping import run_filter
    >>> X = torch.randn(30, 2, dtype=torch.float64)
    >>> est = LoFiRegressor(hidden_layer_sizes=(4,), random_state=0).fit(X[:10].numpy(), X[:10, 0].numpy())
    >>> state, _ = run_filter(est._engine_parts(), est.filter_state_, X[10:], X[10:, :1])
    >>> state.n_seen - est.filter_state_.n_seen
    20
    """
    if on_step is None:
        compiled = run_compiled(parts, state, X, Y, sample_weight, batch_size, record, progress)
        if compiled is not None:
            return compiled
    return filtering.run_filter(parts, state, X, Y, sample_weight, batch_size, record, progress, on_step,
                                _first_pass())


def filter_step(parts, state, X, Y, sample_weight=None, record=None, workspace=None, buffers=None):
    """:func:`skfilter.filtering.filter_step` with a compiled kernel offered the step of a stack of
    hypotheses whose predictive is recorded (run-length filters: :func:`step_compiled`). Same
    arguments, result and errors as the engine's."""
    if record is not None and state.belief.mean.dim() == 2 and not getattr(record, "needs_belief", True):
        compiled = step_compiled(parts, state, X, Y, sample_weight, record)
        if compiled is not None:
            return compiled
    return filtering.filter_step(parts, state, X, Y, sample_weight, record, workspace, buffers, _first_pass())


def linearized_compiled(adapter, structure, belief, X, centred=False):
    """The linearised predictive ``(f, diag(J Σ Jᵀ))`` of a single belief at the rows ``X`` on a
    compiled kernel (:mod:`skfilter.kernels.predictive`), as tensors ``(n, C)`` — of a stack of
    ``K`` beliefs (a run-length mixture), ``(K, n, C)``, one kernel call per hypothesis — or ``None`` when the
    kernels are off or do not serve this model and structure (the caller's torch path then computes
    it). ``centred``: ``diag(Π J Σ Jᵀ Π)``, ``Π = I − 11ᵀ/C``, instead."""
    if not enabled():
        return None
    if belief.mean.dim() == 2:  # a stack of hypotheses (a run-length mixture)
        return _linearized_hypotheses(adapter, structure, belief, X, centred)
    return linearized(adapter, structure, belief, X, centred)


def _linearized_hypotheses(adapter, structure, belief, X, centred):
    """:func:`linearized` for a stack of ``K`` beliefs (leading axis) in one compiled call
    (:func:`~skfilter.kernels.predictive.predict_hypotheses`): tensors ``(K, n, C)``, or None."""
    mean = belief.mean
    if not _serves_adapter(adapter) or not mean.is_cpu or mean.dtype not in _DTYPES:
        return None
    np_dtype = _NP_DTYPES[mean.dtype]
    kind = type(structure)
    K = mean.shape[0]
    if kind is LowRankPrecision and structure.variant == "diagonal":
        code, firsts, seconds = LOFI, belief.diagonal, belief.low_rank
    elif kind is DiagonalCovariance:
        code, firsts, seconds = DIAGONAL, belief.var, None
    elif kind is FullCovariance and mean.shape[-1] <= FULL_KERNEL_MAX_PARAMS:
        code, firsts, seconds = FULL, mean, belief.cov
    else:
        return None
    means, firsts = _source_array(_numpy(mean), np_dtype), _source_array(_numpy(firsts), np_dtype)
    seconds = np.empty((K, 0, 0), dtype=np_dtype) if seconds is None else _source_array(_numpy(seconds), np_dtype)
    (shapes, offsets, codes), input_map = _program_of(adapter)
    Xn = _kernel_rows(X, np_dtype)
    f = np.empty((K, Xn.shape[0], int(shapes[-1, 0])), dtype=np_dtype)
    var = np.empty_like(f)
    if not predict_hypotheses(Xn, shapes, offsets, codes, *map_arguments(input_map, np_dtype), means, code, firsts,
                              seconds, f, var, stiffness_limit(np_dtype), bool(centred)):
        return None
    return torch.from_numpy(f), torch.from_numpy(var)


def probit_arrays_compiled(adapter, structure, belief, X, n_classes):
    """:func:`probit_arrays` when the kernels are on: ``(f, proba)`` as NumPy arrays, or ``None``."""
    if not enabled():
        return None
    return probit_arrays(adapter, structure, belief, X, n_classes)


def linearized_arrays_compiled(adapter, structure, belief, X, centred=False):
    """:func:`linearized_compiled`'s ``(f, diag(J Σ Jᵀ))`` (``centred``: ``diag(Π J Σ Jᵀ Π)``) as
    NumPy arrays ``(n, C)`` (``X`` a tensor or an array), or ``None``."""
    if not enabled():
        return None
    return linearized_arrays(adapter, structure, belief, X, centred)


def forward_compiled(adapter, mean, X):
    """The default MLP's outputs at ``mean`` for the rows ``X`` on a compiled kernel (the forward
    pass of :func:`linearized_compiled`, so plug-in and linearised means agree bit for bit), or
    ``None`` when the kernels are off or do not serve this model."""
    if not enabled():
        return None
    return forward(adapter, mean, X)


def handed_back() -> int:
    """Steps the compiled kernels started and handed to the torch engine (stiff rows, numerical
    failures) in this process so far: the difference over a call tells whether it stayed compiled.

    Examples
    --------
    >>> from skfilter import stepping
    >>> isinstance(stepping.handed_back(), int)
    True
    """
    return HANDED_BACK[0]
