"""The few array operations of a filter step that are not plain arithmetic, for two backends.

Used by the LoFi update and predictive (:func:`skfilter.posteriors.lofi.lofi_update`,
:func:`~skfilter.posteriors.lofi.lowrank_quadratic_form`), the fused MLP forward pass and Jacobian
(:func:`skfilter.models.mlp_forward_jacobian`) and, through the engine
(:class:`skfilter.filtering.OnlineFilter`), the Gaussian whitening.

A step written against :data:`TORCH_OPS` or :data:`NUMPY_OPS` (plus ``+ − * / @ **``, indexing,
slice assignment, ``.T``, ``reshape`` and ``swapaxes``, which both array types share) runs unchanged
on torch tensors or NumPy arrays.

Why two: on the CPU a small torch operation costs ~5–15 µs of dispatch, against ~1–3 µs for the
same NumPy/LAPACK call, and a LoFi step on a small network is dozens of small operations — the
dispatch, not the arithmetic, sets its cost (DESIGN.md, performance principles). For CPU tensors the
posterior structures therefore run the update on zero-copy NumPy views of their tensors and wrap
the results back (:func:`as_numpy`, :func:`as_tensor`); on a GPU they use torch. Both paths compute
the same quantities in the same order, and the tests run both on the CPU.

**Memory.** At large ``P`` a step's cost is the passes over its ``(rows, P)`` arrays, and a fresh
array of hundreds of megabytes costs as much again in page faults and system time as the arithmetic
that fills it. The passes of the LoFi update and predictive therefore run over column blocks of
:func:`chunk_width` columns whose temporaries stay in the cache and are reused across steps
(:class:`Scratch`, one set per owner and thread), the array operations take ``out=``
(:meth:`_Ops.matmul`, :meth:`_Ops.multiply`, …), and a new belief is written into the arrays of a
dead one when the engine passes it (``workspace``, :meth:`skfilter.posteriors.Structure.update`).
On a GPU the blocks are the whole rows (one launch per operation) and temporaries come from
torch's caching allocator, which already reuses its memory.
"""

from __future__ import annotations

import abc
import contextlib
import math
import sys
import threading
import weakref

import numpy as np
import scipy.linalg
import scipy.special
import torch

from ._utils import LISTED_REFS, LOCAL_REFS
from .exceptions import FilterStepError


class _Ops(abc.ABC):
    """Interface (abstract): see :class:`_TorchOps` and :class:`_NumpyOps`."""

    name = ""

    @abc.abstractmethod
    def spd_solve(self, A, b, what):
        """``A⁻¹ b`` (``b`` a vector or a matrix of right-hand sides) for symmetric positive-definite
        ``A`` by Cholesky; returns ``(x, ok, factor)`` where ``ok`` (0 on success) is a backend
        scalar, checked later in the step's single synchronisation, and ``factor`` holds the lower
        Cholesky factor in its lower triangle (the upper triangle is unspecified). The torch
        backend takes stacks of systems (leading axes); the NumPy one a single system."""

    @abc.abstractmethod
    def eigh_descending(self, A, what):
        """Eigenvectors of symmetric ``A`` as columns, by decreasing eigenvalue."""

    @abc.abstractmethod
    def check_finite(self, tensors, ok, what):
        """Raise :class:`FilterStepError` unless ``ok`` holds and every array is finite."""

    def quiet(self):
        """Context in which non-finite intermediate values stay silent (they are checked)."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def empty(self, shape, like):
        """Uninitialised array of ``shape`` with the dtype (and device) of ``like``."""

    @abc.abstractmethod
    def eye(self, n, like):
        """``I_n`` with the dtype (and device) of ``like``."""

    @abc.abstractmethod
    def zeros(self, shape, like):
        """Zero array of ``shape`` with the dtype (and device) of ``like``."""

    @abc.abstractmethod
    def concat_columns(self, a, b):
        """``[a, b]``: ``a`` and ``b`` side by side along the last axis (a new array)."""

    # element-wise and matrix products into given arrays (``out`` may be a strided view)
    @abc.abstractmethod
    def matmul(self, a, b, out):
        """``a @ b`` written into ``out``; returns ``out``."""

    @abc.abstractmethod
    def multiply(self, a, b, out):
        """``a * b`` (broadcast) written into ``out``; returns ``out``."""

    @abc.abstractmethod
    def add(self, a, b, out):
        """``a + b`` (broadcast) written into ``out``; returns ``out``."""

    @abc.abstractmethod
    def subtract(self, a, b, out):
        """``a − b`` (broadcast) written into ``out``; returns ``out``."""

    @abc.abstractmethod
    def reciprocal(self, a, out):
        """``1 / a`` written into ``out`` (the same values as ``1.0 / a``); returns ``out``."""

    @abc.abstractmethod
    def sum_rows(self, a, out):
        """``a.sum(-2)`` written into ``out``; returns ``out``."""

    @abc.abstractmethod
    def activation(self, name, z):
        """``φ(z)`` for the activation ``name`` ('relu', 'tanh', 'logistic', 'identity', 'elu')."""

    def activation_derivative(self, name, z, a):
        """``φ'(z)`` given ``z`` and ``a = φ(z)``; ``None`` for the identity (``φ' = 1``)."""
        if name == "tanh":
            return 1.0 - a * a
        if name == "logistic":
            return a * (1.0 - a)
        if name == "identity":
            return None
        return self._derivative(name, z, a)

    @abc.abstractmethod
    def _derivative(self, name, z, a):
        """``φ'(z)`` of the activations that need backend functions ('relu', 'elu')."""


def _fail_not_pd(what):
    return FilterStepError(f"The {what} is not positive definite (the belief is degenerate).")


_NONFINITE = ("The filter step produced non-finite values or non-positive variances; the last good "
              "belief is kept. Try a smaller prior_variance or a larger obs_variance.")


class _TorchOps(_Ops):
    name = "torch"

    def spd_solve(self, A, b, what):
        Lc, info = torch.linalg.cholesky_ex(A)
        if b.dim() == A.dim():
            return torch.cholesky_solve(b, Lc, upper=False), info.max(), Lc
        return torch.cholesky_solve(b.unsqueeze(-1), Lc, upper=False).squeeze(-1), info.max(), Lc

    def eigh_descending(self, A, what):
        try:
            return torch.linalg.eigh(A)[1].flip(-1)
        except torch.linalg.LinAlgError as exc:  # non-finite input
            raise FilterStepError(f"The {what} failed on non-finite values; the last good belief is kept.") from exc

    def empty(self, shape, like):
        return torch.empty(shape, dtype=like.dtype, device=like.device)

    def eye(self, n, like):
        return torch.eye(n, dtype=like.dtype, device=like.device)

    def zeros(self, shape, like):
        return torch.zeros(shape, dtype=like.dtype, device=like.device)

    def concat_columns(self, a, b):
        return torch.cat([a, b], dim=-1)

    def matmul(self, a, b, out):
        return torch.matmul(a, b, out=out)

    @staticmethod
    def _to(out, a, b):
        """``a``, ``b`` broadcast to ``out``'s shape where it is larger than theirs (torch would
        resize ``out`` instead, as NumPy broadcasts the inputs)."""
        if torch.broadcast_shapes(a.shape, b.shape) != out.shape:
            return a.expand(out.shape), b.expand(out.shape)
        return a, b

    def multiply(self, a, b, out):
        return torch.mul(*self._to(out, a, b), out=out)

    def add(self, a, b, out):
        return torch.add(*self._to(out, a, b), out=out)

    def subtract(self, a, b, out):
        return torch.sub(*self._to(out, a, b), out=out)

    def reciprocal(self, a, out):
        return torch.reciprocal(a, out=out)

    def sum_rows(self, a, out):
        return torch.sum(a, dim=-2, out=out)

    def activation(self, name, z):
        return _TORCH_ACTIVATIONS[name](z)

    def _derivative(self, name, z, a):
        if name == "relu":
            return torch.sign(a)  # a = relu(z) ≥ 0: sign(a) = 1{z > 0}, in one operation
        return torch.where(z > 0, torch.ones_like(a), a + 1.0)  # elu (α = 1)

    def check_finite(self, tensors, ok, what):
        # one host synchronisation: a sum is non-finite if any term is (inf − inf is NaN)
        parts = [t.sum() for t in tensors] + [ok.to(tensors[0].dtype)]
        vals = torch.stack(parts).tolist()
        if vals[-1] != 0:
            raise _fail_not_pd(what)
        if not all(np.isfinite(vals[:-1])):
            raise FilterStepError(_NONFINITE)


class _NumpyOps(_Ops):
    """NumPy arithmetic; the small factorisations call LAPACK directly (``potrf``/``potrs``,
    ``syevd`` through :func:`scipy.linalg.get_lapack_funcs`), which costs ~2 µs against ~11 µs for
    ``scipy.linalg.cho_factor``/``cho_solve`` and their input checks."""

    name = "numpy"

    def __init__(self):
        self._lapack = {}

    def _funcs(self, A):
        funcs = self._lapack.get(A.dtype)
        if funcs is None:
            funcs = self._lapack[A.dtype] = scipy.linalg.get_lapack_funcs(("potrf", "potrs", "syevd"), (A,))
        return funcs

    def spd_solve(self, A, b, what):
        potrf, potrs, _ = self._funcs(A)
        c, info = potrf(A.T, lower=1, clean=0)  # A symmetric: A.T is its Fortran-ordered view
        if info != 0:
            return np.full_like(b, np.nan), 1, c
        x, info = potrs(c, b, lower=1)
        return x, info, c

    def eigh_descending(self, A, what):
        _, _, syevd = self._funcs(A)
        _, V, info = syevd(A.T, compute_v=1, lower=1)
        if info != 0:
            raise FilterStepError(f"The {what} failed (LAPACK syevd info={info}); the last good belief is kept.")
        return V[:, ::-1]

    def check_finite(self, tensors, ok, what):
        if ok != 0:
            raise _fail_not_pd(what)
        if not np.isfinite(sum(t.sum() for t in tensors)):  # inf − inf is NaN: one test for all
            raise FilterStepError(_NONFINITE)

    def quiet(self):
        return np.errstate(all="ignore")

    def empty(self, shape, like):
        return np.empty(shape, dtype=like.dtype)

    def eye(self, n, like):
        return np.eye(n, dtype=like.dtype)

    def zeros(self, shape, like):
        return np.zeros(shape, dtype=like.dtype)

    def concat_columns(self, a, b):
        return np.concatenate([a, b], axis=-1)

    def matmul(self, a, b, out):
        return np.matmul(a, b, out=out)

    def multiply(self, a, b, out):
        return np.multiply(a, b, out=out)

    def add(self, a, b, out):
        return np.add(a, b, out=out)

    def subtract(self, a, b, out):
        return np.subtract(a, b, out=out)

    def reciprocal(self, a, out):
        return np.divide(1.0, a, out=out)

    def sum_rows(self, a, out):
        return np.sum(a, axis=-2, out=out)

    def activation(self, name, z):
        if name == "relu":
            return np.maximum(z, 0.0)
        if name == "tanh":
            return np.tanh(z)
        if name == "logistic":
            return scipy.special.expit(z)
        if name == "identity":
            return z
        return np.where(z > 0, z, np.expm1(z))  # elu (α = 1)

    def _derivative(self, name, z, a):
        if name == "relu":
            return np.sign(a)
        return np.where(z > 0, 1.0, a + 1.0)  # elu (α = 1)


_TORCH_ACTIVATIONS = {
    "relu": torch.relu,
    "tanh": torch.tanh,
    "logistic": torch.sigmoid,
    "identity": lambda z: z,
    "elu": torch.nn.functional.elu,
}

TORCH_OPS = _TorchOps()
NUMPY_OPS = _NumpyOps()


def ops_for(t, prefer_numpy: bool = True) -> _Ops:
    """The backend for ``t``: NumPy for a NumPy array, or for a CPU tensor unless ``prefer_numpy``
    is False; torch otherwise."""
    if isinstance(t, np.ndarray):
        return NUMPY_OPS
    return NUMPY_OPS if prefer_numpy and t.device.type == "cpu" and not t.requires_grad else TORCH_OPS


def as_numpy(ops: _Ops, *tensors):
    """Zero-copy NumPy views of CPU tensors when ``ops`` is NumPy; the tensors unchanged otherwise."""
    if ops is TORCH_OPS:
        return tensors
    return tuple(t if isinstance(t, np.ndarray) else t.numpy() for t in tensors)


def as_tensor(ops: _Ops, *arrays):
    """Tensors sharing memory with the NumPy results when ``ops`` is NumPy; unchanged otherwise."""
    if ops is TORCH_OPS:
        return arrays
    return tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays)


# -- reused temporaries ----------------------------------------------------------------------------

#: elements of one column block of the passes over ``(rows, P)`` arrays on the CPU (8 MiB in
#: float64): large enough that the Python overhead per block is small against its arithmetic, small
#: enough that a block's temporaries stay in the last-level cache between the operations of a pass
#: (measured at P = 648,010, 20 rows: 2¹⁸–2²¹ within 10 %, 2²⁰ the fastest)
CHUNK_ELEMENTS = 1 << 20

#: columns of a block at least (a block of many rows, e.g. a predictive over many samples)
MIN_CHUNK = 256

#: the largest temporary (bytes) a :class:`Scratch` keeps between calls; larger ones are allocated
#: per call (a predictive over many rows), so that what an idle estimator holds stays small
MAX_KEPT_BYTES = 1 << 25


def chunk_width(rows: int, n_cols: int, like) -> int:
    """Columns per block for passes over ``rows`` arrays of ``n_cols`` columns like ``like``: all of
    them on a GPU (one launch per operation) or when ``rows × n_cols`` is at most twice
    :data:`CHUNK_ELEMENTS` (a second pass over blocks would copy them again for nothing), else
    blocks of equal width near :data:`CHUNK_ELEMENTS` ``/ rows`` columns (at least :data:`MIN_CHUNK`)."""
    rows = max(rows, 1)
    if (isinstance(like, torch.Tensor) and like.device.type != "cpu") or rows * n_cols <= 2 * CHUNK_ELEMENTS:
        return max(n_cols, 1)
    width = max(MIN_CHUNK, CHUNK_ELEMENTS // rows)
    n_blocks = -(-n_cols // width)
    return -(-n_cols // n_blocks)


class Recycler:
    """Large uninitialised NumPy arrays, handed out again once nothing refers to them.

    Fresh memory costs a page fault per page on first touch (on a virtual machine mostly system
    time, about 1 ms per MB measured); a filter that returns new arrays at every call — a belief the
    caller keeps, a run-length pool — would pay it on every call, although the arrays of the call
    before are dead by then. :meth:`empty` gives one of the arrays this recycler made when nothing
    but the recycler refers to it (CPython's reference count: a NumPy view, a tensor of
    :func:`torch.from_numpy` and any holder of either keep a reference), else a new one. At most
    ``max_count`` arrays of at most ``max_bytes`` together are kept (the least recently used unused
    ones make room; one that does not fit while the others are in use is not kept); arrays below
    ``min_bytes`` are plain ``np.empty``.

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter._array_ops import Recycler
    >>> pool = Recycler(max_count=2, max_bytes=1 << 24, min_bytes=0)
    >>> a = pool.empty((4, 4), np.float64)
    >>> pool.empty((4, 4), np.float64) is a  # a is still referenced
    False
    >>> address = a.ctypes.data
    >>> del a
    >>> pool.empty((4, 4), np.float64).ctypes.data == address  # reused
    True
    """

    def __init__(self, max_count, max_bytes, min_bytes=1 << 20):
        self.max_count, self.max_bytes, self.min_bytes = int(max_count), int(max_bytes), int(min_bytes)
        #: the arrays made, most recently used last
        self.arrays = []
        self._lock = threading.Lock()

    def empty(self, shape, dtype):
        """An uninitialised array of ``shape`` and ``dtype`` (class docstring)."""
        dtype = np.dtype(dtype)
        shape = tuple(int(n) for n in shape)
        if math.prod(shape) * dtype.itemsize < self.min_bytes:
            return np.empty(shape, dtype=dtype)
        arrays = self.arrays
        with self._lock:
            for i in range(len(arrays)):
                arr = arrays[i]  # referenced by the list and this name alone when unused
                if arr.shape == shape and arr.dtype == dtype and sys.getrefcount(arr) == LOCAL_REFS + 1:
                    arrays.append(arrays.pop(i))
                    return arr
            arr = np.empty(shape, dtype=dtype)
            while len(arrays) >= self.max_count or sum(a.nbytes for a in arrays) + arr.nbytes > self.max_bytes:
                free = [i for i in range(len(arrays)) if sys.getrefcount(arrays[i]) == LISTED_REFS]
                if not free:
                    return arr
                del arrays[free[0]]
            arrays.append(arr)
            return arr


class Scratch:
    """Temporaries reused across calls, one set per *owner* (an object that uses them, e.g. a
    posterior structure) and thread, held weakly in the owner (so nothing is added to what is
    pickled or copied, and they go with it).

    :meth:`get` returns an uninitialised array of the requested shape with the dtype and device of
    ``like``, the same one at every call with that ``name``, shape, dtype and device (a new shape
    replaces the kept array: one per name). Such arrays must never escape the call that uses them —
    nothing returned to a caller may be, or view, a scratch array. On a GPU nothing is kept (torch's
    caching allocator already reuses its memory); nor is an array over :data:`MAX_KEPT_BYTES`.
    """

    def __init__(self):
        self._local = threading.local()

    def _table(self, owner):
        tables = getattr(self._local, "tables", None)
        if tables is None:
            tables = self._local.tables = weakref.WeakKeyDictionary()
        table = tables.get(owner)
        if table is None:
            table = tables[owner] = {}
        return table

    def table(self, owner):
        """The dict of what ``owner`` keeps in this thread (held weakly in ``owner``): the
        temporaries of :meth:`get`, keyed ``(backend, name)``, and whatever else a caller keeps for
        it under keys of its own (e.g. :func:`skfilter.filtering.run_filter`'s stream buffers)."""
        return self._table(owner)

    def get(self, ops, owner, name, shape, like):
        """The temporary ``name`` of ``owner`` (class docstring); ``ops`` is its backend."""
        return self.getter(ops, owner)(name, shape, like)

    def getter(self, ops, owner):
        """``get(name, shape, like)`` for ``owner`` and the backend ``ops`` (the owner's table looked
        up once, for the several temporaries of one call)."""
        table = self._table(owner)

        def get(name, shape, like):
            shape = tuple(shape)
            if ops is TORCH_OPS and like.device.type != "cpu":
                return ops.empty(shape, like)
            key = (ops.name, name)
            buf = table.get(key)
            if buf is not None and buf.shape == shape and buf.dtype == like.dtype:
                return buf
            buf = ops.empty(shape, like)
            if buf.nbytes <= MAX_KEPT_BYTES:
                table[key] = buf
            else:
                table.pop(key, None)
            return buf

        return get

    def clear(self, owner):
        """Drop the temporaries ``owner`` keeps in this thread."""
        tables = getattr(self._local, "tables", None)
        if tables is not None:
            tables.pop(owner, None)


_CPU = torch.device("cpu")

try:  # NumPy ≥ 2
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # pragma: no cover - NumPy 1.x
    _byte_bounds = np.byte_bounds

#: the process-wide :class:`Scratch`
SCRATCH = Scratch()


def byte_span(a):
    """``(start, end, device)`` of the memory ``a`` (a NumPy array or a tensor) may touch: a
    tensor's whole storage, an array's extent. ``None`` for an empty array."""
    if isinstance(a, np.ndarray):
        if a.size == 0:
            return None
        lo, hi = _byte_bounds(a)
        return lo, hi, _CPU
    storage = a.untyped_storage()
    size = storage.nbytes()
    if size == 0:
        return None
    lo = storage.data_ptr()
    return lo, lo + size, a.device


class Disjoint:
    """The memory of some arrays (:func:`byte_span`, taken once), to test others against.

    Examples
    --------
    >>> import torch
    >>> a = torch.zeros(4)
    >>> guard = Disjoint([a])
    >>> guard.overlaps(a[2:]), guard.overlaps(torch.zeros(4))
    (True, False)
    """

    __slots__ = ("_spans",)

    def __init__(self, arrays=()):
        self._spans = []
        for a in arrays:
            self.add(a)

    def add(self, a):
        """Include the memory of ``a`` (None: nothing)."""
        span = None if a is None else byte_span(a)
        if span is not None:
            self._spans.append(span)

    def overlaps(self, a) -> bool:
        """Whether ``a`` may share memory with one of the arrays."""
        span = byte_span(a)
        if span is None:
            return False
        lo, hi, device = span
        return any(lo < e and s < hi and device == d for s, e, d in self._spans)


def may_overlap(a, b) -> bool:
    """Whether the arrays ``a`` and ``b`` (NumPy arrays or tensors, mixed) may share memory
    (conservative: storages or extents that intersect)."""
    return Disjoint([a]).overlaps(b)
