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
"""

from __future__ import annotations

import abc
import contextlib

import numpy as np
import scipy.linalg
import scipy.special
import torch

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
