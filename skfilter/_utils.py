"""Small shared helpers: device and dtype resolution, tensor conversion, seeds, progress bars, and
the per-estimator memo of the per-call fast paths."""

from __future__ import annotations

import sys

import weakref

import numpy as np
import torch


#: device types an estimator can run on: the CPU, CUDA, and Apple's MPS (float32 only) when
#: this torch build and machine have it
_DEVICE_TYPES = ("cpu", "cuda", "mps")


def resolve_device(device) -> torch.device:
    """Return a :class:`torch.device` for ``device`` ('cpu', 'cuda', 'cuda:1', 'mps', a device or None).

    Raises
    ------
    ValueError
        If the name is not a device torch knows, the device type is not supported (only
        ``'cpu'``, ``'cuda'`` and ``'mps'``; ``'meta'``, ``'xpu'``, … are not), or the device is
        not available on this machine (CUDA or MPS missing, a CUDA index beyond the devices present).
    """
    if device is None:
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ValueError(f"device={device!r} is not a valid torch device.") from exc
    if dev.type not in _DEVICE_TYPES:
        raise ValueError(f"device={device!r} is not supported; use 'cpu', 'cuda' (or 'cuda:<index>') or 'mps'.")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} was requested but CUDA is not available.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device={device!r} was requested but only {torch.cuda.device_count()} CUDA "
                             "device(s) are available.")
    if dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError(f"device={device!r} was requested but MPS is not available (this torch build "
                             "or machine has no Apple-silicon GPU support); use 'cpu' or 'cuda'.")
    return dev


_DTYPES = {
    "float64": torch.float64,
    "double": torch.float64,
    "float32": torch.float32,
    "float": torch.float32,
}


def resolve_dtype(dtype, device: torch.device) -> torch.dtype:
    """Return the torch floating dtype for ``dtype``.

    ``None`` means float64 on the CPU (exact filtering) and float32 on an accelerator (speed).
    Accepts torch dtypes, numpy dtypes and their names.
    """
    if dtype is None:
        return torch.float64 if device.type == "cpu" else torch.float32
    if isinstance(dtype, torch.dtype):
        out = dtype
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError as exc:
            raise ValueError(f"dtype={dtype!r} is not understood; use 'float32' or 'float64'.") from exc
        out = _DTYPES.get(name)
    if out not in (torch.float32, torch.float64):
        raise ValueError(f"dtype={dtype!r} is not supported; use 'float32' or 'float64'.")
    if out == torch.float64 and device.type == "mps":
        raise ValueError(f"dtype={dtype!r} is not supported on device 'mps' (no float64 there); use 'float32'.")
    return out


_BOUNDS: dict = {}


def magnitude_bound(dtype: torch.dtype) -> float:
    """The largest ``|value|`` of data (``X``, ``y``, ``sample_weight``) accepted in ``dtype``:
    ``finfo(dtype).max ** (1/4)`` (about ``1.2e77`` for float64, ``4.3e9`` for float32).

    A filter step forms products of degree up to four in the data — ``J Σ Jᵀ`` is quadratic in
    ``x``, a step moves ``θ`` in proportion to ``y`` and the next step squares the model output
    again — so data beyond this bound can make ``h``, ``J`` or ``J Σ Jᵀ`` overflow; it is
    rejected before any row is learned (standardise the data, or use float64).
    """
    bound = _BOUNDS.get(dtype)
    if bound is None:  # computed once per dtype (a streaming loop asks at every call)
        bound = _BOUNDS[dtype] = float(torch.finfo(dtype).max) ** 0.25
    return bound


_OUTPUT_LIMITS: dict = {}


def output_limit(dtype: torch.dtype) -> float:
    """The largest model output accepted before learning, ``finfo(dtype).max ** (1/2)`` (its square
    must not overflow); computed once per dtype."""
    limit = _OUTPUT_LIMITS.get(dtype)
    if limit is None:
        limit = _OUTPUT_LIMITS[dtype] = float(torch.finfo(dtype).max) ** 0.5
    return limit


# -- per-call fast paths ---------------------------------------------------------------------------
#: ``{estimator: memo dict}``, held weakly: values derived from an estimator's parameters and state
#: that a streaming loop (one row per ``predict``/``partial_fit`` call) would otherwise recompute at
#: every call. Kept outside the instance dictionary, so that it is never part of the estimator's
#: state: not pickled, copied, cloned or compared, and ``predict`` leaves ``__dict__`` unchanged.
#: Every entry is keyed by the identity of the objects it was derived from and is only a shortcut
#: to what the full computation would return.
_MEMOS = weakref.WeakKeyDictionary()


def memo_for(est) -> dict:
    """The memo dict of ``est`` (see :data:`_MEMOS`); a fresh, unkept dict if ``est`` cannot be
    weakly referenced."""
    try:
        return _MEMOS[est]
    except KeyError:
        memo = _MEMOS[est] = {}
        return memo
    except TypeError:  # pragma: no cover - not weakly referenceable or unhashable
        return {}


#: parameter value types that cannot change in place (with tuples and frozensets of them, numpy
#: scalars and classes): parameters of only these types can be validated once per value
_FROZEN_TYPES = frozenset({type(None), bool, int, float, complex, str, bytes, torch.device, torch.dtype})


def is_frozen(value) -> bool:
    """Whether ``value`` cannot change without being replaced (see :data:`_FROZEN_TYPES`), so that
    a result derived from it may be reused while the same object is in place."""
    t = type(value)
    if t in _FROZEN_TYPES or isinstance(value, (np.generic, np.dtype, type)):
        return True
    if t is tuple or t is frozenset:
        return all(is_frozen(v) for v in value)
    return False


def check_fitted(est, attribute: str, named: bool = False):
    """``sklearn.utils.validation.check_is_fitted(est)`` (``named``: ``check_is_fitted(est,
    attribute)``), where ``attribute`` is in the instance dictionary of every fitted ``est``:
    scikit-learn's check (tags, then attributes; ~5 µs, far more for a wrapper whose tags build its
    default base estimator) runs only when ``attribute`` is absent, for it always passes otherwise."""
    if attribute not in est.__dict__:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(est, attribute if named else None)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """``t`` as a NumPy array on the host (detached; a copy only when it is not on the CPU)."""
    return t.detach().to("cpu").numpy()


def torch_generator(seed: int, device: torch.device) -> torch.Generator:
    """A torch generator on ``device`` seeded with ``seed``."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return gen


def seed_from_random_state(random_state) -> int:
    """Draw a 31-bit integer seed from a scikit-learn style ``random_state``."""
    from sklearn.utils import check_random_state

    return int(check_random_state(random_state).randint(0, 2**31 - 1))


def progress_bar(enabled, total: int, desc: str):
    """A tqdm progress bar over ``total`` rows when ``enabled`` (``verbose > 0``) and tqdm is
    installed, else ``None``; callers ``update`` and ``close`` it."""
    if not enabled or total <= 0:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is optional
        return None
    return tqdm(total=total, desc=desc, unit="row", leave=False)


def pass_progress(bar, offset: int = 0):
    """The ``progress(rows_done)`` callback of a pass over rows (the engines call it between steps
    and between chunks of the compiled kernels) that moves ``bar`` to ``offset + rows_done``;
    ``None`` without a bar."""
    if bar is None:
        return None
    return lambda rows_done: bar.update(offset + rows_done - bar.n)


def given_kwargs(**params) -> dict:
    """The keyword arguments that are not None: what a wrapper passes on only when its caller gave
    it (so that an inner estimator without the parameter keeps working when it is not given)."""
    return {k: v for k, v in params.items() if v is not None}


def targets_array(y):
    """``y`` as an ndarray for the fast target checks of a streaming call: an ndarray as it is, a
    list or tuple as ``numpy.asarray`` makes it one; None for anything else (or a list NumPy cannot
    read), which then takes scikit-learn's validation and its errors."""
    t = type(y)
    if t is np.ndarray:
        return y
    if t is list or t is tuple:
        try:
            return np.asarray(y)
        except (ValueError, TypeError):
            return None
    return None


def _refs_of_a_local() -> int:
    probe = object()
    return sys.getrefcount(probe)


def _refs_of_a_listed_item() -> int:
    box = [object()]
    return sys.getrefcount(box[0])


#: ``sys.getrefcount(x)`` of an object held by one local variable of the calling function only: 2
#: before CPython 3.14 (the variable and the call's argument), 1 where locals are loaded as borrowed
#: references (3.14); reuse checks count the references they expect on top of it
LOCAL_REFS = _refs_of_a_local()
#: ``sys.getrefcount(items[i])`` of an object held by one list only (the list and the subscript's result)
LISTED_REFS = _refs_of_a_listed_item()
