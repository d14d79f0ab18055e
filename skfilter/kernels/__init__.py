"""Compiled filter steps for the CPU (numba): many rows per Python call.

:func:`skfilter.filtering.run_filter` hands a block of rows to :func:`run_compiled` first; when the
filter qualifies — a single belief on the CPU in float64 or float32, the default MLP (fused
Jacobian, :mod:`skfilter.kernels.mlp`), a Gaussian, Bernoulli or categorical likelihood, no
weighting stage or a built-in one under the Gaussian likelihood (WoLF), dynamics of a scalar decay
and process noise, and a structure with a kernel (:mod:`skfilter.kernels.lofi`,
:mod:`~skfilter.kernels.diagonal`, :mod:`~skfilter.kernels.full`) — the whole step runs compiled
over preallocated buffers, one call for thousands of rows. :func:`step_compiled` does one step for
a stack of hypotheses (BOCD), :func:`linearized_compiled` the predictive of ``predict``. Anything
else, and any step a kernel cannot finish (stiff rows that need the square-root forms, numerical
failures, which then raise with the last good belief kept), runs on the torch engine, which stays
the reference: both agree to rounding (tests/test_kernels.py).

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

import numpy as np
import torch

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


def run_compiled(parts, state, X, Y, sample_weight, batch_size, record, progress):
    """Filter the rows with a compiled kernel if the filter qualifies (module docstring).

    Returns ``None`` when it does not (the caller runs the torch engine), else ``(state, records)``
    as :func:`skfilter.filtering.run_filter`. Raises as the torch engine does, with
    ``last_good_state`` and ``rows_done`` on the exception.
    """
    if not enabled():
        return None
    from ._dispatch import plan_for

    plan = plan_for(parts, state, record)
    if plan is None:
        return None
    return plan.run(parts, state, X, Y, sample_weight, batch_size, record, progress)


def handed_back() -> int:
    """Steps the compiled kernels started and handed to the torch engine (stiff rows, numerical
    failures) in this process so far: the difference over a call tells whether it stayed compiled.

    Examples
    --------
    >>> from skfilter import kernels
    >>> isinstance(kernels.handed_back(), int)
    True
    """
    from ._dispatch import HANDED_BACK

    return HANDED_BACK[0]


def step_compiled(parts, state, X, Y, sample_weight, record):
    """One filter step of a stack of beliefs (hypotheses axis, e.g. BOCD's run lengths) on a
    compiled kernel, when the filter qualifies and the caller records the predictive with a
    recorder that does not sample the belief (``record.needs_belief`` False).

    Returns ``None`` (the caller runs :func:`skfilter.filtering.filter_step`'s torch stages, which
    also serve any step a kernel cannot finish), else ``(state, StepOutput)`` with ``info`` and
    ``weights`` None.
    """
    if not enabled():
        return None
    from ._dispatch import step_compiled as step

    return step(parts, state, X, Y, sample_weight, record)


def linearized_compiled(adapter, structure, belief, X, centred=False):
    """The linearised predictive ``(f, diag(J Σ Jᵀ))`` of a single belief at the rows ``X`` on a
    compiled kernel (:mod:`skfilter.kernels.predictive`), or ``None`` when the kernels are off or do
    not serve this model and structure (the caller's torch path then computes it). ``centred``:
    ``diag(Π J Σ Jᵀ Π)``, ``Π = I − 11ᵀ/C``, instead."""
    if not enabled():
        return None
    from ._dispatch import linearized

    return linearized(adapter, structure, belief, X, centred)


def linearized_arrays_compiled(adapter, structure, belief, X, centred=False):
    """:func:`linearized_compiled`'s ``(f, diag(J Σ Jᵀ))`` (``centred``: ``diag(Π J Σ Jᵀ Π)``) as
    NumPy arrays ``(n, C)`` (``X`` a tensor or an array), or ``None``."""
    if not enabled():
        return None
    from ._dispatch import linearized_arrays

    return linearized_arrays(adapter, structure, belief, X, centred)


def forward_compiled(adapter, mean, X):
    """The default MLP's outputs at ``mean`` for the rows ``X`` on a compiled kernel (the forward
    pass of :func:`linearized_compiled`, so plug-in and linearised means agree bit for bit), or
    ``None`` when the kernels are off or do not serve this model."""
    if not enabled():
        return None
    from ._dispatch import forward

    return forward(adapter, mean, X)


__all__ = ["AVAILABLE", "compiled_kernels", "enabled", "forward_compiled", "handed_back", "linearized_arrays_compiled",
           "linearized_compiled",
           "run_compiled", "step_compiled"]
