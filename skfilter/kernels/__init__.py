"""Compiled filter steps for the CPU (numba): many rows per Python call.

Each structure with a kernel has a row loop (``*_rows``: a stream of one belief) and a hypotheses
loop (``*_hypotheses``: one step for a stack of ``K`` beliefs, BOCD's run-length candidates) —
:mod:`skfilter.kernels.lofi`, :mod:`~skfilter.kernels.diagonal`, :mod:`~skfilter.kernels.full`,
:mod:`~skfilter.kernels.factored` (LRKF, HiLoFi, LoLoFi) —
the run-length filter RL[K]-PR over each of them and RL[K]-MMPR over all but LoFi
(:mod:`~skfilter.kernels.runlength`) and its OU / CPP-OU resets (:mod:`~skfilter.kernels.reversion`, ``reversion_diagonal``, ``reversion_full``,
``reversion_factored``), over the
default MLP's fused forward pass and Jacobian (:mod:`~skfilter.kernels.mlp`), the
likelihoods' noise estimate and whitening (:mod:`~skfilter.kernels.observations`) and the
predictive of ``predict`` (:mod:`~skfilter.kernels.predictive`); the factorization models' DEKF
has its own (:mod:`~skfilter.kernels.factorization`), and the large-network LoFi step (on the
engine) its first pass over the parameters (:mod:`~skfilter.kernels.stacked`). The kernels work
on NumPy arrays and know nothing of the torch engine (:mod:`skfilter.filtering`): :mod:`skfilter.stepping` decides which of
the two runs a step, converts states to and from the kernels' buffers, and hands every step a kernel
cannot finish (stiff rows that need the square-root forms, numerical failures) to the engine, which
stays the reference: both agree to rounding (tests/test_kernels.py).

Kernels are compiled on first use and cached on disk (numba's ``cache=True``): the first fit after
installation pays ~10 s per structure once, or ``python -m skfilter.kernels`` compiles them all
ahead (``make install`` does). numba keys a cached function on its own file only: after editing a
kernel module, delete ``skfilter/kernels/__pycache__`` so that its callers are recompiled too.
``SKFILTER_COMPILED=0`` in the environment, or :func:`compiled_kernels` as a context manager, turns
them off; without numba installed they are off.

Examples
--------
>>> from skfilter import kernels
>>> with kernels.compiled_kernels(False):
...     kernels.enabled()
False
"""

from __future__ import annotations

import contextlib
import os
import threading

try:  # numba is a dependency; a platform without its wheels falls back to the torch engine
    import numba  # noqa: F401
    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only without numba
    AVAILABLE = False

_state = threading.local()


#: ``os.environ``'s own mapping and its key for ``SKFILTER_COMPILED`` (POSIX: bytes), read directly by
#: :func:`_environment_flag`: ``os.environ.get`` encodes the key and decodes the value (~1–3 µs), paid
#: by every one-row call
_ENV_DATA = getattr(os.environ, "_data", None)
try:
    _ENV_KEY = os.environ.encodekey("SKFILTER_COMPILED")
except (AttributeError, TypeError):  # pragma: no cover - an unusual os.environ
    _ENV_DATA = _ENV_KEY = None
#: ``[raw value, flag]``: the last raw value of the variable read and the flag it gives
_ENV_SEEN = [object(), True]


def _environment_flag() -> bool:
    """Whether ``SKFILTER_COMPILED`` leaves the kernels on; parsed again only when the variable's
    raw value in ``os.environ`` is another object than last time (it is set or unset through
    ``os.environ``, which replaces that object)."""
    if _ENV_DATA is not None:
        raw = _ENV_DATA.get(_ENV_KEY)
        seen = _ENV_SEEN
        if raw is seen[0]:
            return seen[1]
    else:  # pragma: no cover - an unusual os.environ
        raw = None
    flag = os.environ.get("SKFILTER_COMPILED", "1").strip().lower() not in ("0", "false", "no", "off")
    if _ENV_DATA is not None:
        _ENV_SEEN[:] = [raw, flag]
    return flag


def enabled() -> bool:
    """Whether compiled kernels are used (numba importable, not switched off)."""
    flag = getattr(_state, "enabled", None)
    if flag is None:
        flag = _environment_flag()
    return AVAILABLE and flag


@contextlib.contextmanager
def compiled_kernels(on: bool = True):
    """Use (``on=True``) or bypass the compiled kernels inside the ``with`` block (this thread).

    Parameters
    ----------
    on : bool, default=True

    Examples
    --------
    >>> from skfilter.kernels import compiled_kernels, enabled
    >>> with compiled_kernels(False):
    ...     print(enabled())
    False
    """
    before = getattr(_state, "enabled", None)
    _state.enabled = bool(on)
    try:
        yield
    finally:
        _state.enabled = before


__all__ = ["AVAILABLE", "compiled_kernels", "enabled"]
