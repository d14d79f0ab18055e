"""The default MLP's outputs and Jacobian for one input row, compiled (numba).

The same recursion as :func:`skfilter.models.mlp_forward_jacobian` (DESIGN.md, "Performance
principles": a hand-fused Jacobian), written as loops over preallocated buffers so that the whole
filter step of :mod:`skfilter.kernels` runs without Python or array allocation::

    z_l = W_l a_{l−1} + b_l,   a_l = φ_l(z_l),   a_0 = x,   f = z_L
    δ_L = I_C,   δ_l = (δ_{l+1} W_{l+1}) ⊙ φ_l'(z_l)                     (C × width_l)
    ∂f/∂W_l = δ_l ⊗ a_{l−1} (row-major like W_l),   ∂f/∂b_l = δ_l

``θ`` is laid out as ``named_parameters()`` of the ``nn.Sequential``: ``W_1, b_1, …, W_L, b_L``.
Activation codes are those of :data:`ACTIVATION_CODES`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: activation name (:data:`skfilter.models.ACTIVATIONS`) → code used by the compiled kernels
ACTIVATION_CODES = {"relu": 0, "tanh": 1, "logistic": 2, "identity": 3, "elu": 4}


def mlp_program(layer_shapes, activations):
    """``(shapes, offsets, codes)``: the int64 arrays the kernels take for an MLP with the given
    ``(out, in)`` layer shapes and hidden activation names."""
    shapes = np.asarray(layer_shapes, dtype=np.int64).reshape(-1, 2)
    sizes = shapes[:, 0] * shapes[:, 1] + shapes[:, 0]
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    codes = np.array([ACTIVATION_CODES[a] for a in activations], dtype=np.int64)
    return shapes, offsets, codes


@njit(cache=True, nogil=True)
def _activate(code, z):
    if code == 0:
        return z if not z <= 0.0 else 0.0  # NaN stays NaN, as np.maximum(z, 0)
    if code == 1:
        return np.tanh(z)
    if code == 2:
        return 1.0 / (1.0 + np.exp(-z))
    if code == 4:
        return z if z > 0.0 else np.expm1(z)
    return z


@njit(cache=True, nogil=True)
def _derivative(code, z, a):
    """``φ'(z)`` given ``a = φ(z)`` (as :meth:`skfilter._array_ops` computes it)."""
    if code == 0:
        return 1.0 if a > 0.0 else 0.0
    if code == 1:
        return 1.0 - a * a
    if code == 2:
        return a * (1.0 - a)
    if code == 4:
        return 1.0 if z > 0.0 else a + 1.0
    return 1.0


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def mlp_forward(theta, x, shapes, offsets, codes, acts, pre, f):
    """Forward pass of one row ``x``: writes the outputs into ``f (C,)``, the activations
    ``a_0 … a_{L−1}`` into the rows of ``acts`` and the hidden pre-activations into ``pre``."""
    n_layers = shapes.shape[0]
    for j in range(x.shape[0]):
        acts[0, j] = x[j]
    for l in range(n_layers):
        o, i, k = shapes[l, 0], shapes[l, 1], offsets[l]
        for u in range(o):
            s = theta[k + o * i + u]
            base = k + u * i
            for j in range(i):
                s += theta[base + j] * acts[l, j]
            if l < n_layers - 1:
                pre[l, u] = s
                acts[l + 1, u] = _activate(codes[l], s)
            else:
                f[u] = s


@njit(cache=True, nogil=True)
def mlp_forward_jacobian(theta, x, shapes, offsets, codes, acts, pre, delta, scratch, f, J):
    """Outputs ``f (C,)`` and Jacobian ``J (C, P)`` of the MLP at ``θ`` for one row ``x`` (module
    docstring); ``acts``, ``pre``, ``delta``, ``scratch`` are work buffers of width ≥ the widest layer
    (``delta``, ``scratch``: ``C`` rows)."""
    mlp_forward(theta, x, shapes, offsets, codes, acts, pre, f)
    n_layers = shapes.shape[0]
    C = shapes[n_layers - 1, 0]
    o, i, k = shapes[n_layers - 1, 0], shapes[n_layers - 1, 1], offsets[n_layers - 1]
    for c in range(C):
        row = J[c]
        for j in range(k, k + o * i + o):
            row[j] = 0.0
        for j in range(i):
            row[k + c * i + j] = acts[n_layers - 1, j]
        row[k + o * i + c] = 1.0
    for c in range(C):
        for u in range(C):
            delta[c, u] = 1.0 if c == u else 0.0
    for l in range(n_layers - 2, -1, -1):
        o, i, k = shapes[l, 0], shapes[l, 1], offsets[l]
        on, kn = shapes[l + 1, 0], offsets[l + 1]  # W_{l+1}: (on, o)
        code = codes[l]
        for c in range(C):
            for u in range(o):
                scratch[c, u] = 0.0
            for v in range(on):
                d = delta[c, v]
                if d != 0.0:
                    base = kn + v * o
                    for u in range(o):
                        scratch[c, u] += d * theta[base + u]
            for u in range(o):
                delta[c, u] = scratch[c, u] * _derivative(code, pre[l, u], acts[l + 1, u])
        for c in range(C):
            row = J[c]
            for u in range(o):
                d = delta[c, u]
                base = k + u * i
                for j in range(i):
                    row[base + j] = d * acts[l, j]
                row[k + o * i + u] = d


@njit(cache=True, nogil=True)
def map_row(x, in_scale, in_shift, in_bound, out):
    """``out ← clip(x ⊙ s + t, −b, b)``: a raw row ``x (D,)`` as a ``StandardizedMLP``'s first Linear
    sees it (:meth:`skfilter.models.MLPAdapter._inputs`: ``s = 1/scale``, ``t = −offset/scale``, the
    clip bound ``b``; ``inf`` for none), the same roundings as NumPy's ``x * s``, ``+ t``,
    ``maximum``/``minimum`` in the promoted dtype, then cast to ``out``'s; a plain copy when
    ``in_scale`` is empty (a model without an input map)."""
    if in_scale.shape[0] == 0:
        for j in range(x.shape[0]):
            out[j] = x[j]
        return
    for j in range(x.shape[0]):
        v = x[j] * in_scale[j]
        v = v + in_shift[j]
        if v < -in_bound:
            v = -in_bound
        if v > in_bound:
            v = in_bound
        out[j] = v


@njit(cache=True, nogil=True)
def mlp_buffers(shapes, n_inputs, dtype_like):
    """The work buffers of :func:`mlp_forward_jacobian` for an MLP of layer ``shapes`` on rows of
    ``n_inputs`` features: ``(acts, pre, delta, scratch)`` in the dtype of ``dtype_like``."""
    dt = dtype_like.dtype
    C = shapes[shapes.shape[0] - 1, 0]
    width = n_inputs
    for l in range(shapes.shape[0]):
        width = max(width, shapes[l, 0])
    return (np.empty((shapes.shape[0] + 1, width), dtype=dt), np.empty((shapes.shape[0], width), dtype=dt),
            np.empty((C, width), dtype=dt), np.empty((C, width), dtype=dt))
