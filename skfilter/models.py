"""Measurement models ``h(θ, x)`` over a flat parameter vector (the *model* axis of the engine).

A filter keeps a Gaussian belief over one flat vector ``θ`` of shape ``(P,)``. This module maps any
:class:`torch.nn.Module` to that view:

* :class:`ModuleAdapter` — the general path. ``forward(θ, X)`` is a functional call of the module
  with its parameters replaced by views into ``θ``; ``forward_jacobian(θ, X)`` returns the outputs and
  the per-row Jacobians ``∂h(θ, x_i)/∂θ`` of shape ``(n, C, P)`` using ``torch.func`` (``jacrev``
  vectorised over rows by ``vmap``).
* :class:`MLPAdapter` — a fused fast path for a :class:`torch.nn.Sequential` of ``Linear`` layers and
  element-wise activations (the default model). Forward pass and Jacobian are written by hand: with
  ``z_l = W_l a_{l-1} + b_l`` and ``a_l = φ(z_l)``, the back-propagated sensitivities are
  ``δ_L = I_C`` and ``δ_{l} = (δ_{l+1} W_{l+1}) ⊙ φ'(z_l)``, and the Jacobian blocks are
  ``∂f/∂W_l = δ_l ⊗ a_{l-1}`` and ``∂f/∂b_l = δ_l``, written straight into one ``(n, C, P)`` buffer.

The flat order is that of ``module.named_parameters()`` (for ``nn.Linear``: weight row-major, then
bias), so ``θ`` can be written back into the module with :meth:`ModuleAdapter.write_to_module`.
Only trainable parameters (``requires_grad=True``) are in ``θ``; frozen ones are constants of ``h``.

Hypotheses axes: ``forward`` and ``forward_jacobian`` take ``θ`` of shape ``(P,)`` or ``(..., P)``
(e.g. ``K`` run-length hypotheses of a changepoint filter, or ``S`` posterior samples) and return
``(..., n, C)`` and ``(..., n, C, P)`` in one batched call: broadcast matmuls on the fused path,
``vmap`` over the flattened leading axes on the general one. A 1-d ``θ`` takes the unbatched code,
unchanged (the per-step hot path).

Parameter blocks: every adapter has :attr:`ModuleAdapter.blocks`, an ordered ``{name: index}``
partition of ``0 … P−1`` (a ``slice`` when the block is contiguous in the flat order, else a 1-d
``LongTensor``), used by per-block dynamics and block-diagonal posteriors.

The default network (:func:`make_mlp`) uses LeCun-normal weights (truncated normal, variance
``1/fan_in``, as the papers' flax models) and zero biases.
"""

from __future__ import annotations

import copy
import math
import threading
from collections import OrderedDict

import numpy as np
import torch
from torch import nn

from ._array_ops import as_numpy, as_tensor, ops_for

ACTIVATIONS = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "logistic": nn.Sigmoid,
    "identity": nn.Identity,
    "elu": nn.ELU,
}

# std of a standard normal truncated to [-2, 2]; dividing by it makes the truncated draw unit-variance
_TRUNC_STD = 0.87962566103423978


def lecun_normal_(weight: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Fill ``weight`` (``(out, in)``) with LeCun-normal values: truncated normal, Var = 1/fan_in."""
    fan_in = weight.shape[1]
    # N(0, std²) truncated at ±2 std (of the untruncated normal): variance std² · _TRUNC_STD² = 1/fan_in
    std = math.sqrt(1.0 / fan_in) / _TRUNC_STD
    with torch.no_grad():
        torch.nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-2.0 * std, b=2.0 * std, generator=generator)
    return weight


def make_mlp(n_inputs: int, hidden_layer_sizes, n_outputs: int, activation: str = "relu",
             seed: int = 0) -> nn.Sequential:
    """Build the default MLP ``n_inputs → hidden… → n_outputs`` with LeCun-normal weights, zero biases.

    Parameters
    ----------
    n_inputs, n_outputs : int
        Input and output widths.
    hidden_layer_sizes : sequence of int
        Width of each hidden layer (may be empty: a linear model).
    activation : {'relu', 'tanh', 'logistic', 'identity', 'elu'}
        Hidden-layer non-linearity.
    seed : int
        Seed of the weight draw.

    Returns
    -------
    torch.nn.Sequential
        In float64 on the CPU; the caller moves it.

    Examples
    --------
    >>> from skfilter.models import make_mlp
    >>> net = make_mlp(8, (50,), 1, "relu", seed=0)
    >>> sum(p.numel() for p in net.parameters())
    501
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}.")
    gen = torch.Generator().manual_seed(int(seed))
    sizes = [int(n_inputs), *[int(h) for h in hidden_layer_sizes], int(n_outputs)]
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        lin = nn.Linear(fan_in, fan_out, dtype=torch.float64)
        lecun_normal_(lin.weight.data, gen)
        nn.init.zeros_(lin.bias)
        layers.append(lin)
        if i < len(sizes) - 2:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


class StandardizedMLP(nn.Sequential):
    """An MLP whose inputs are first standardised by fixed (not learned) statistics, and bounded:
    ``h(θ, x) = mlp(θ, clip((x − input_offset) / input_scale, −input_bound, input_bound))``.

    The default network under ``prior_variance='auto'`` (:mod:`skfilter.priors`): the statistics are
    those of the rows the stream starts with, frozen for the life of the model, so the filter's
    parameters are those of a network on standardised features. For the full-covariance filter this
    is only a reparametrisation of the first layer; for diagonal and low-rank beliefs it is what
    keeps them well conditioned, as it does gradient descent (a feature of mean 6 and spread 0.4
    couples every first-layer weight with its bias, a correlation a diagonal covariance cannot hold).
    The children and parameter names are those of the :class:`torch.nn.Sequential` it extends
    (``'0.weight'``, ``'0.bias'``, …); ``input_offset`` and ``input_scale`` are buffers.

    Parameters
    ----------
    *layers : torch.nn.Module
        The layers, as for :class:`torch.nn.Sequential`.
    input_offset, input_scale : torch.Tensor of shape (n_inputs,)
        Subtracted from, then dividing, every input row (``input_scale > 0``).
    input_bound : float or None, default=None
        The standardised inputs are clipped to ``[−input_bound, input_bound]`` (None: not clipped).
        The default network has :data:`skfilter.priors.INPUT_BOUND`: a row far outside what the
        first rows showed (a feature constant in them, data sorted by a feature) cannot send the
        pre-activations, and the filter with them, to extremes. The clip acts on the inputs, not
        on ``θ``: the Jacobian is that of the network at the clipped row.

    Examples
    --------
    >>> import torch
    >>> from skfilter.models import StandardizedMLP
    >>> net = StandardizedMLP(torch.nn.Linear(2, 1), input_offset=torch.tensor([10.0, 0.0]),
    ...                       input_scale=torch.tensor([2.0, 1.0]))
    >>> with torch.no_grad():
    ...     _ = net[0].weight.fill_(1.0), net[0].bias.zero_()
    >>> net(torch.tensor([[12.0, 3.0]])).item()  # (12 − 10)/2 + 3/1
    4.0
    """

    def __init__(self, *layers, input_offset, input_scale, input_bound=None):
        super().__init__(*layers)
        self.register_buffer("input_offset", torch.as_tensor(input_offset).clone())
        self.register_buffer("input_scale", torch.as_tensor(input_scale).clone())
        self.input_bound = None if input_bound is None else float(input_bound)

    def forward(self, x):
        z = (x - self.input_offset) / self.input_scale
        bound = getattr(self, "input_bound", None)  # None in modules pickled before the bound
        return super().forward(z if bound is None else z.clamp(-bound, bound))


def standardize_mlp(mlp: nn.Sequential, input_offset, input_scale, input_bound="default") -> StandardizedMLP:
    """The :class:`StandardizedMLP` with the layers (shared, not copied) of ``mlp``; ``input_bound``
    ``'default'``: :data:`skfilter.priors.INPUT_BOUND`."""
    if isinstance(input_bound, str) and input_bound == "default":
        from . import priors

        input_bound = priors.INPUT_BOUND
    like = next(mlp.parameters())
    as_t = lambda v: torch.as_tensor(v, dtype=like.dtype, device=like.device)  # noqa: E731
    return StandardizedMLP(*mlp.children(), input_offset=as_t(input_offset), input_scale=as_t(input_scale),
                           input_bound=input_bound)


def train_mode_layers(module: nn.Module) -> list:
    """Names (and classes) of the submodules of ``module`` in train mode whose output depends on
    train mode: dropout (``nn.Dropout*``, recurrent layers and ``nn.MultiheadAttention`` with
    ``dropout > 0``), batch norm (``nn.BatchNorm*``, ``nn.SyncBatchNorm``) and instance norm with
    ``track_running_stats=True``.

    A filter linearises one deterministic function ``h(θ, x)``; such a layer in train mode is
    random (dropout) or depends on the other rows of the batch and updates running statistics
    (batch norm), so the filter estimators refuse it (:func:`check_no_train_mode_layers`, on the
    list :class:`ModuleAdapter` records before putting the module in eval mode).
    """
    from torch.nn.modules.batchnorm import _BatchNorm
    from torch.nn.modules.dropout import _DropoutNd
    from torch.nn.modules.instancenorm import _InstanceNorm

    found = []
    for name, sub in module.named_modules():
        if not sub.training:
            continue
        mode_dependent = (
            isinstance(sub, (_DropoutNd, _BatchNorm))
            or (isinstance(sub, _InstanceNorm) and sub.track_running_stats)
            or (isinstance(sub, (nn.RNNBase, nn.MultiheadAttention)) and float(getattr(sub, "dropout", 0.0)) > 0)
        )
        if mode_dependent:
            found.append(f"{name or '<the module>'!r} ({type(sub).__name__})")
    return found


def check_no_train_mode_layers(found: list):
    """Raise ``ValueError`` naming the layers ``found`` by :func:`train_mode_layers`, with the fixes:
    remove them, or pass the module in eval mode (``module.eval()``: dropout off, batch norm with its
    running statistics as constants), which the filter then uses as is."""
    if found:
        raise ValueError(
            f"The module has layers whose behaviour depends on train mode: {', '.join(found)}. A filter "
            "linearises one deterministic network h(θ, x), and these layers are random (dropout) or "
            "depend on the batch and update running statistics (batch norm) in train mode. Remove them, "
            "or pass the module in eval mode (module.eval(), or call self.eval() at the end of your "
            "module's __init__): dropout is then off and batch norm uses its running statistics as "
            "constants."
        )


class ModuleAdapter:
    """Flat-parameter functional view of a torch module (general path, ``torch.func``).

    Parameters
    ----------
    module : torch.nn.Module
        Used as is (the caller copies it); moved to ``device``/``dtype`` and put in eval mode. Its
        layers whose behaviour depended on train mode (dropout, batch norm in train mode) are
        recorded first in :attr:`train_mode_layers` (the estimators refuse such a module).
    device : torch.device
    dtype : torch.dtype
    n_inputs : int
    blocks : dict, optional
        ``{block_name: [parameter names]}`` (names as in ``module.named_parameters()``): a
        partition of the learned parameters into named blocks. Default: :meth:`default_blocks`.

    Attributes
    ----------
    n_params : int
        ``P``, the length of ``θ``.
    n_outputs : int
        ``C``, the width of the module's output (a 1-d output counts as one).
    blocks : OrderedDict
        ``{name: index}`` partitioning ``0 … P−1``: a ``slice`` when the block's parameters are
        contiguous in the flat order, else a 1-d ``LongTensor`` of their (increasing) positions.
    """

    def __init__(self, module: nn.Module, device: torch.device, dtype: torch.dtype, n_inputs: int,
                 blocks: dict | None = None):
        #: :func:`train_mode_layers` of the module as given, before it is put in eval mode
        self.train_mode_layers = train_mode_layers(module)
        self.module = module.to(device=device, dtype=dtype).eval()
        self.device, self.dtype = device, dtype
        self._names, self._shapes, self._numels = [], [], []
        frozen = {}
        for name, p in self.module.named_parameters():
            if not p.requires_grad:  # frozen parameters are constants of h, not learned
                frozen[name] = p.detach()
                continue
            self._names.append(name)
            self._shapes.append(tuple(p.shape))
            self._numels.append(p.numel())
        if not self._names:
            raise ValueError("The module has no parameters to learn.")
        self.n_params = int(sum(self._numels))
        self._offsets = [0]
        for k in self._numels:
            self._offsets.append(self._offsets[-1] + k)
        self._buffers = {**dict(self.module.named_buffers()), **frozen}
        self.blocks = self._resolve_blocks(self.default_blocks() if blocks is None else blocks)
        with torch.no_grad():
            probe = self.forward(self.initial_theta(), torch.zeros(1, n_inputs, device=device, dtype=dtype))
        self.n_outputs = int(probe.shape[1])

    # -- parameter blocks --------------------------------------------------------------------
    def default_blocks(self) -> dict:
        """One block per top-level child (the first component of the parameter names), in flat
        order; the parameters of the last layer (:func:`last_layer`: the final ``nn.Linear`` of an
        ``nn.Sequential``, or the submodule a module names in ``last_layer_name``) form the block
        ``'last'``."""
        last = last_layer(self.module)
        groups: dict = OrderedDict()
        for name in self._names:
            in_last = last is not None and name.startswith(last + ".")
            groups.setdefault("last" if in_last else name.split(".", 1)[0], []).append(name)
        return groups

    def _resolve_blocks(self, mapping: dict) -> OrderedDict:
        """``{block: [parameter names]}`` → ``{block: slice or LongTensor}``, validated."""
        position = {name: j for j, name in enumerate(self._names)}
        owner: dict = {}
        out = OrderedDict()
        for block, names in mapping.items():
            if isinstance(names, str):
                names = [names]
            names = list(names)
            if not names:
                raise ValueError(f"Parameter block {block!r} is empty.")
            for name in names:
                if name not in position:
                    raise ValueError(
                        f"Parameter block {block!r} names {name!r}, which is not a learned parameter of "
                        f"the module; the learned parameters are {self._names}.")
                if name in owner:
                    raise ValueError(f"Parameter {name!r} is in two blocks: {owner[name]!r} and {block!r}.")
                owner[name] = block
            js = sorted(position[name] for name in names)
            if js == list(range(js[0], js[-1] + 1)):
                out[block] = slice(self._offsets[js[0]], self._offsets[js[-1] + 1])
            else:
                out[block] = torch.cat([torch.arange(self._offsets[j], self._offsets[j + 1]) for j in js])
        missing = [name for name in self._names if name not in owner]
        if missing:
            raise ValueError(f"The parameter blocks must cover every learned parameter; missing: {missing}.")
        return out

    @property
    def parameter_names(self) -> list:
        """Names of the learned parameters, in the flat order of ``θ``."""
        return list(self._names)

    def positions_of(self, names) -> torch.Tensor:
        """The flat positions (a 1-d ``LongTensor``, in increasing order) of the learned parameters
        ``names`` (as in ``module.named_parameters()``); ``ValueError`` for an unknown name."""
        position = {name: j for j, name in enumerate(self._names)}
        unknown = [n for n in names if n not in position]
        if unknown:
            raise ValueError(f"{unknown} are not learned parameters of the module; its learned parameters are "
                             f"{self._names}.")
        js = sorted({position[n] for n in names})
        if not js:
            return torch.zeros(0, dtype=torch.long)
        return torch.cat([torch.arange(self._offsets[j], self._offsets[j + 1]) for j in js])

    # -- flat θ ------------------------------------------------------------------------------
    def initial_theta(self) -> torch.Tensor:
        """The module's current weights as one flat vector (a copy): the prior mean."""
        return torch.cat([p.detach().reshape(-1) for p in self._learned_parameters()]).clone()

    def _learned_parameters(self):
        return [p for p in self.module.parameters() if p.requires_grad]

    def unflatten(self, theta: torch.Tensor) -> dict:
        """Views of ``θ`` shaped as the module's parameters, keyed by name."""
        return {
            name: theta[a:b].view(shape)
            for name, shape, a, b in zip(self._names, self._shapes, self._offsets[:-1], self._offsets[1:])
        }

    def write_to_module(self, theta: torch.Tensor) -> nn.Module:
        """Copy ``θ`` into the module's parameters and return the module."""
        with torch.no_grad():
            for p, a, b in zip(self._learned_parameters(), self._offsets[:-1], self._offsets[1:]):
                p.copy_(theta[a:b].view_as(p))
        return self.module

    # -- h(θ, X) and its Jacobian ------------------------------------------------------------
    def _call(self, theta, X):
        params = self.unflatten(theta)
        if self._buffers:
            params = {**params, **self._buffers}
        return torch.func.functional_call(self.module, params, (X,))

    def _forward1(self, theta, X):
        return self._call(theta, X).reshape(X.shape[0], -1)

    def forward(self, theta: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """``h(θ, X)``: shape ``(n, C)`` for ``θ (P,)``, ``(..., n, C)`` for ``θ (..., P)`` (``vmap``
        over the flattened leading axes)."""
        if theta.dim() == 1:
            return self._forward1(theta, X)
        lead = theta.shape[:-1]
        flat = theta.reshape(-1, theta.shape[-1])
        out = torch.func.vmap(self._forward1, in_dims=(0, None))(flat, X)
        return out.reshape(*lead, *out.shape[1:])

    def forward_batch(self, thetas: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """``h(θ_s, X)`` for S parameter vectors ``thetas`` (S, P): shape ``(S, n, C)``."""
        return self.forward(thetas, X)

    def forward_jacobian(self, theta: torch.Tensor, X: torch.Tensor):
        """Outputs ``(n, C)`` and Jacobians ``∂h(θ, x_i)/∂θ`` of shape ``(n, C, P)`` at ``θ (P,)``;
        ``(..., n, C)`` and ``(..., n, C, P)`` for ``θ (..., P)``."""

        def single(th, x):
            out = self._call(th, x.unsqueeze(0)).reshape(-1)
            return out, out

        rows = torch.func.vmap(torch.func.jacrev(single, has_aux=True), in_dims=(None, 0))
        if theta.dim() == 1:
            jac, out = rows(theta, X)
            return out.detach(), jac.detach()
        lead = theta.shape[:-1]
        jac, out = torch.func.vmap(rows, in_dims=(0, None))(theta.reshape(-1, theta.shape[-1]), X)
        return out.detach().reshape(*lead, *out.shape[1:]), jac.detach().reshape(*lead, *jac.shape[1:])


class MLPAdapter(ModuleAdapter):
    """Fused forward pass and Jacobian for ``Sequential(Linear, act, …, Linear)`` (see module doc).

    Supported activations: ReLU, Tanh, Sigmoid, Identity, ELU(alpha=1). Use :func:`make_adapter`,
    which picks this path when the module qualifies and the general one otherwise.
    """

    def __init__(self, module: nn.Sequential, device, dtype, n_inputs: int, blocks: dict | None = None):
        children = list(module.children())
        self._acts = [type(m) for m in children[1::2]]
        self._act_names = [_ACT_NAMES[a] for a in self._acts]
        #: 'numpy': the Jacobian of CPU tensors on NumPy views (:mod:`skfilter._array_ops`); 'torch'
        self.cpu_backend = "numpy"
        self._layer_shapes = [tuple(m.weight.shape) for m in children[0::2]]
        self._input_map = None  # (1/scale, −offset/scale, bound) of a StandardizedMLP, as tensors and arrays
        super().__init__(module, device, dtype, n_inputs, blocks)
        if isinstance(self.module, StandardizedMLP):
            inv = 1.0 / self.module.input_scale
            shift = -self.module.input_offset * inv
            bound = getattr(self.module, "input_bound", None)
            self._input_map = {"torch": (inv, shift, bound)}
            if inv.device.type == "cpu":
                self._input_map["numpy"] = (inv.numpy(), shift.numpy(), bound)

    def _inputs(self, ops, X_):
        """``X`` as the first Linear sees it: standardised for a :class:`StandardizedMLP` (one fused
        multiply-add, then the clip to ``±input_bound``), unchanged otherwise."""
        if self._input_map is None:
            return X_
        if isinstance(X_, torch.Tensor):
            inv, shift, bound = self._input_map["torch"]
            Z = torch.addcmul(shift, X_, inv)
            return Z if bound is None else Z.clamp_(-bound, bound)
        inv, shift, bound = self._input_map["numpy"]
        Z = X_ * inv + shift
        return Z if bound is None else np.clip(Z, -bound, bound, out=Z)

    def architecture(self):
        """``(layer_shapes, activations, input_map)``: the ``(out, in)`` of each Linear, the names of
        the hidden activations, and a ``StandardizedMLP``'s input map ``(1/scale, −offset/scale,
        bound)`` (NumPy arrays and the clip bound or None; None without one, or off the CPU) — what
        the compiled kernels (:mod:`skfilter.kernels`) need to run this MLP."""
        numpy_map = None if self._input_map is None else self._input_map.get("numpy")
        return list(self._layer_shapes), list(self._act_names), numpy_map

    def default_blocks(self) -> dict:
        """``{'hidden': all layers but the last, 'last': the last Linear's weight and bias}``
        (only ``'last'`` without hidden layers)."""
        if len(self._names) == 2:
            return OrderedDict(last=list(self._names))
        return OrderedDict(hidden=self._names[:-2], last=self._names[-2:])

    @staticmethod
    def supports(module: nn.Module) -> bool:
        """Whether ``module`` is a plain MLP the fused path can differentiate."""
        if type(module) not in (nn.Sequential, StandardizedMLP):
            return False
        children = list(module.children())
        if len(children) % 2 == 0:
            return False
        for i, m in enumerate(children):
            if i % 2 == 0:
                if type(m) is not nn.Linear or m.bias is None:
                    return False
            elif type(m) not in _ACT_NAMES or (type(m) is nn.ELU and m.alpha != 1.0):
                return False
        if not all(p.requires_grad for p in module.parameters()):
            return False
        names = [n for n, _ in module.named_parameters()]
        expected = [f"{i}.{k}" for i in range(0, len(children), 2) for k in ("weight", "bias")]
        return names == expected

    def forward(self, theta, X):
        """``h(θ, X)`` by the forward pass of :func:`mlp_forward_jacobian` (same backend, so the
        same rounding as the outputs returned with the Jacobian); ``θ (..., P)`` gives ``(..., n, C)``."""
        ops = ops_for(theta, prefer_numpy=self.cpu_backend == "numpy")
        theta_, X_ = as_numpy(ops, theta, X)
        X_ = self._inputs(ops, X_)
        z = _mlp_pass(ops, _mlp_layers(theta_, self._layer_shapes)[0], X_, self._act_names)[0]
        return as_tensor(ops, z)[0]

    def forward_batch(self, thetas, X):
        """``h(θ_s, X)`` for S parameter vectors at once (batched :meth:`forward`): ``(S, n, C)``."""
        return self.forward(thetas, X)

    def forward_jacobian(self, theta, X, out=None):
        """:func:`mlp_forward_jacobian` on NumPy views of CPU tensors (lower per-operation overhead,
        :mod:`skfilter._array_ops`) or on the tensors themselves (GPU, or ``cpu_backend='torch'``).

        ``out``, if given, is a contiguous tensor of ``J``'s shape ``(..., n, C, P)``, dtype and
        device that receives ``J`` instead of a new array, and is returned as ``J``: a caller that
        owns a buffer for the duration of a stream passes it at every step (a step never keeps
        ``J``), so that no ``P``-sized array is allocated per step."""
        ops = ops_for(theta, prefer_numpy=self.cpu_backend == "numpy")
        theta_, X_ = as_numpy(ops, theta, X)
        X_ = self._inputs(ops, X_)
        out_ = None
        if out is not None:
            shape = tuple(theta.shape[:-1]) + (X.shape[0], self._layer_shapes[-1][0], theta.shape[-1])
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape or out.dtype != theta.dtype \
                    or out.device != theta.device or not out.is_contiguous():
                raise ValueError(f"out must be a contiguous tensor of the Jacobian's shape {shape}, dtype "
                                 f"{theta.dtype} and device {theta.device}.")
            out_, = as_numpy(ops, out)
        f, J = mlp_forward_jacobian(ops, theta_, X_, self._layer_shapes, self._act_names, out=out_)
        if out is not None:
            return as_tensor(ops, f)[0], out
        return as_tensor(ops, f, J)


def _mlp_layers(theta, layer_shapes):
    """Views ``(W_l (..., o, i), b_l (..., o))`` of the flat ``θ (..., P)`` and the offset of each
    layer's block."""
    layers, offsets, k = [], [], 0
    if theta.ndim == 1:  # the per-step hot path: plain slices
        for o, i in layer_shapes:
            offsets.append(k)
            layers.append((theta[k:k + o * i].reshape(o, i), theta[k + o * i:k + o * i + o]))
            k += o * i + o
        return layers, offsets
    lead = tuple(theta.shape[:-1])
    for o, i in layer_shapes:
        offsets.append(k)
        layers.append((theta[..., k:k + o * i].reshape(lead + (o, i)), theta[..., k + o * i:k + o * i + o]))
        k += o * i + o
    return layers, offsets


def _mlp_pass(ops, layers, X, activations):
    """Forward pass: the output ``z_L``, the activations ``[a_0 = X, a_1, …]`` and the hidden
    pre-activations ``[z_1, …, z_{L−1}]``; with leading axes on the layers (``W (..., o, i)``),
    those of ``a_1, …`` and ``z`` are ``(..., n, width)`` (``X (n, D)`` is shared)."""
    acts, pre = [X], []
    a = X
    for l, (W, b) in enumerate(layers):
        if W.ndim == 2:
            z = a @ W.T + b
        else:
            z = a @ W.swapaxes(-1, -2) + b[..., None, :]
        if l < len(layers) - 1:
            pre.append(z)
            a = ops.activation(activations[l], z)
            acts.append(a)
    return z, acts, pre


def _split_last(a, o, i):
    """The view of ``a`` (``(..., o·i)``, its last axis contiguous) as ``(..., o, i)`` — a view
    always (an error rather than a copy), so that writing into it fills ``a``."""
    shape = tuple(a.shape[:-1]) + (o, i)
    if isinstance(a, np.ndarray):
        v = a.view()
        v.shape = shape  # raises instead of copying
        return v
    return a.view(shape)


def mlp_forward_jacobian(ops, theta, X, layer_shapes, activations, out=None):
    """Outputs ``f (n, C)`` and Jacobians ``J = ∂f/∂θ (n, C, P)`` of an MLP, by hand (module doc);
    for ``θ (..., P)`` (hypotheses axes) ``f (..., n, C)`` and ``J (..., n, C, P)``, in one batched pass.

    With ``z_l = a_{l−1} W_lᵀ + b_l``, ``a_l = φ_l(z_l)`` (``a_0 = X``) and ``f = z_L``: the
    sensitivities ``δ_L = I_C``, ``δ_l = (δ_{l+1} W_{l+1}) ⊙ φ_l'(z_l)`` (``(n, C, width)``), and
    the blocks ``∂f/∂W_l = δ_l ⊗ a_{l−1}`` (row-major like ``W_l``), ``∂f/∂b_l = δ_l``, written into
    one buffer. ``θ`` is laid out as ``named_parameters()``: ``W_1, b_1, …, W_L, b_L``.
    ``ops`` is the array backend (:mod:`skfilter._array_ops`); ``layer_shapes`` the ``(out, in)``
    of each layer; ``activations`` the names of the ``L − 1`` hidden activations. ``out``, if given,
    is an array of the backend with ``J``'s shape and dtype that receives ``J`` (every entry is
    written); the outer products are written into it directly, without temporaries of their size.
    """
    if theta.ndim != 1:
        return _mlp_forward_jacobian_batched(ops, theta, X, layer_shapes, activations, out)
    n = X.shape[0]
    layers, offsets = _mlp_layers(theta, layer_shapes)
    z, acts, pre = _mlp_pass(ops, layers, X, activations)
    C = z.shape[1]
    J = ops.empty((n, C, theta.shape[0]), like=X) if out is None else out
    # last layer: ∂f_c/∂W_L[c', j] = 1{c = c'} a_{L−1}[j], ∂f_c/∂b_L[c'] = 1{c = c'}
    o, i = layer_shapes[-1]
    k = offsets[-1]
    if C == 1:
        J[:, 0, k:k + i] = acts[-1]
        J[:, 0, k + i] = 1.0
    else:
        eye = ops.eye(C, like=X)
        ops.multiply(eye[None, :, :, None], acts[-1][:, None, None, :], _split_last(J[:, :, k:k + o * i], o, i))
        J[:, :, k + o * i:k + o * i + o] = eye
    delta = None
    for l in range(len(layers) - 2, -1, -1):
        W_next = layers[l + 1][0]
        d_act = ops.activation_derivative(activations[l], pre[l], acts[l + 1])
        delta = W_next[None] if delta is None else delta @ W_next  # (n or 1, C, width)
        if d_act is not None:
            delta = delta * d_act[:, None, :]
        o, i = layer_shapes[l]
        k = offsets[l]
        ops.multiply(delta[:, :, :, None], acts[l][:, None, None, :], _split_last(J[:, :, k:k + o * i], o, i))
        J[:, :, k + o * i:k + o * i + o] = delta
    return z, J


def _mlp_forward_jacobian_batched(ops, theta, X, layer_shapes, activations, out=None):
    """:func:`mlp_forward_jacobian` for ``θ (..., P)``: the same recursion with leading axes on the
    weights, activations and sensitivities (``X (n, D)`` shared, broadcast)."""
    n = X.shape[0]
    lead = tuple(theta.shape[:-1])
    layers, offsets = _mlp_layers(theta, layer_shapes)
    z, acts, pre = _mlp_pass(ops, layers, X, activations)
    C = z.shape[-1]
    J = ops.empty(lead + (n, C, theta.shape[-1]), like=X) if out is None else out
    o, i = layer_shapes[-1]
    k = offsets[-1]
    if C == 1:
        J[..., 0, k:k + i] = acts[-1]
        J[..., 0, k + i] = 1.0
    else:
        eye = ops.eye(C, like=X)
        a = acts[-1]
        ops.multiply(eye[:, :, None], a[..., None, None, :], _split_last(J[..., k:k + o * i], o, i))
        J[..., k + o * i:k + o * i + o] = eye
    delta = None
    for l in range(len(layers) - 2, -1, -1):
        W_next = layers[l + 1][0][..., None, :, :]  # (..., 1, C or width, width)
        d_act = ops.activation_derivative(activations[l], pre[l], acts[l + 1])
        delta = W_next if delta is None else delta @ W_next  # (..., n or 1, C, width)
        if d_act is not None:
            delta = delta * d_act[..., None, :]
        o, i = layer_shapes[l]
        k = offsets[l]
        ops.multiply(delta[..., None], acts[l][..., None, None, :], _split_last(J[..., k:k + o * i], o, i))
        J[..., k + o * i:k + o * i + o] = delta
    return z, J


#: activation module class → its name in :data:`ACTIVATIONS` (the fused path's supported set)
_ACT_NAMES = {cls: name for name, cls in ACTIVATIONS.items()}


def last_layer(module: nn.Module) -> str | None:
    """The name of ``module``'s last layer, for the filters that treat it apart (HiLoFi, LoLoFi):
    the child name of the final ``nn.Linear`` of an ``nn.Sequential`` ending in one; for any other
    module, the (dotted) submodule name in its attribute ``last_layer_name`` if it has one (a
    wrapper of a network, e.g. :class:`skfilter.decision.PerArmHeads`, declares it); else None."""
    declared = getattr(module, "last_layer_name", None)
    if isinstance(declared, str):
        return declared
    if not isinstance(module, nn.Sequential) or not len(module):
        return None
    name, child = list(module.named_children())[-1]
    return name if type(child) is nn.Linear else None


def last_layer_parameters(adapter, names=None, owner: str = "The filter") -> list:
    """The learned parameter names of the network's last layer, for the filters that treat it apart
    (HiLoFi, LoLoFi, PULSE): ``names`` (an estimator's ``last_layer``) checked against the adapter's
    learned parameters, or the parameters of :func:`last_layer` of ``adapter.module``.

    Raises ``ValueError`` for an unknown or repeated name, and, when the last layer is not found,
    one that tells ``owner``'s user to pass ``last_layer=[...]``.

    Examples
    --------
    >>> import torch
    >>> from skfilter.models import last_layer_parameters, make_adapter, make_mlp
    >>> adapter = make_adapter(make_mlp(2, (3,), 1, seed=0), torch.device("cpu"), torch.float64, 2)
    >>> last_layer_parameters(adapter)
    ['2.weight', '2.bias']
    """
    learned = adapter.parameter_names
    if names is not None:
        names = list(names)
        unknown = [n for n in names if n not in learned]
        if unknown:
            raise ValueError(f"last_layer names {unknown}, which are not learned parameters of the module; its "
                             f"learned parameters are {learned}.")
        if len(set(names)) != len(names):
            raise ValueError(f"last_layer names a parameter twice: {names}.")
        return names
    found = last_layer(adapter.module)
    chosen = [] if found is None else [n for n in learned if n.startswith(found + ".")]
    if not chosen:
        raise ValueError(
            f"{owner} could not find the last layer of the module (found automatically for the default MLP, an "
            "nn.Sequential ending in nn.Linear, and a module whose attribute last_layer_name names its last "
            "layer): pass its parameter names as last_layer=[...] (names as in module.named_parameters(), e.g. "
            "['head.weight', 'head.bias']).")
    return chosen


def make_adapter(module: nn.Module, device, dtype, n_inputs: int, fused: bool = True,
                 blocks: dict | None = None) -> ModuleAdapter:
    """Wrap ``module`` in the fused :class:`MLPAdapter` when it qualifies, else :class:`ModuleAdapter`;
    ``blocks`` (``{block: [parameter names]}``) overrides the default parameter blocks."""
    if fused and MLPAdapter.supports(module):
        return MLPAdapter(module, device, dtype, n_inputs, blocks)
    return ModuleAdapter(module, device, dtype, n_inputs, blocks)


#: serialises :func:`build_module`'s seeded construction of module classes (see there)
_BUILD_LOCK = threading.RLock()


def build_module(module, module_kwargs: dict, *, n_inputs: int, n_outputs: int,
                 hidden_layer_sizes, activation: str, seed: int) -> nn.Module:
    """Resolve an estimator's ``module`` parameter into a fresh module instance.

    * ``None``: the default MLP (:func:`make_mlp`), seeded by ``seed``.
    * a :class:`torch.nn.Module` subclass: instantiated with ``module_kwargs`` (the estimator's
      ``module__<name>`` parameters) under ``torch`` RNG state seeded by ``seed``. A user's class
      draws its initial weights from torch's *global* CPU generator in ``__init__`` (we cannot hand
      it a generator), and ``fork_rng`` + ``manual_seed`` only save, seed and restore that one global
      state: two threads doing so at once interleave their draws (the same seed gave different
      weights in threaded fits). The seed-and-construct therefore runs under a module-level lock.
      (Code outside :func:`build_module` that draws from the global generator at the same time can
      still interfere; the default MLP uses its own ``torch.Generator`` and needs no lock.)
    * an instance: deep-copied; its current weights are the prior mean and are never re-initialised.
    """
    if module is None:
        if module_kwargs:
            raise ValueError("module__* parameters were given but module is None.")
        return make_mlp(n_inputs, hidden_layer_sizes, n_outputs, activation, seed)
    if isinstance(module, type) and issubclass(module, nn.Module):
        with _BUILD_LOCK, torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return module(**module_kwargs)
    if isinstance(module, nn.Module):
        if module_kwargs:
            raise ValueError("module__* parameters only apply when module is a class, not an instance.")
        return copy.deepcopy(module)
    raise TypeError(f"module must be None, a torch.nn.Module subclass or instance; got {module!r}.")


class SubspaceAdapter:
    """A model adapter over an affine subspace of another adapter's parameters (thesis §5.1–§5.2).

    The filter's parameters are ``φ = (z, w)``: ``z`` (``d``) the coordinates of the projected
    parameters in a fixed subspace, and ``w`` the parameters kept as they are (PULSE's last layer;
    none for the subspace EKF). The network's flat parameters are

        ``θ(φ) = θ*`` with ``θ[projected] += A z`` and ``θ[kept] = w``,

    ``A`` (``D_sub × d``, orthonormal columns from a warm-up, :class:`skfilter.warmup.SubspaceWarmup`)
    and ``θ*`` (``D``) fixed, so ``h(φ, x) = h_base(θ(φ), x)`` and its Jacobian is the base Jacobian
    restricted to the projected positions times ``A`` next to the kept columns:
    ``∂h/∂z = (∂h/∂θ)[:, projected] A`` (``C × d``) and ``∂h/∂w = (∂h/∂θ)[:, kept]`` — nothing
    ``D × D`` is formed (Alg. 12 l. 6, ``J = H A``). With ``A = I``, ``θ* = 0`` and nothing kept,
    it is the base model.

    Parameters
    ----------
    base : ModuleAdapter
        The network's adapter (its flat ``θ``).
    components : torch.Tensor of shape (D_sub, d)
        ``A``.
    offset : torch.Tensor of shape (D,)
        ``θ*``; its entries at the kept positions are unused (``w`` replaces them).
    projected : torch.Tensor of shape (D_sub,), optional
        Flat positions of ``θ`` that ``A`` spans (default: all ``D``).
    kept : torch.Tensor, optional
        Flat positions of ``θ`` learned in their own coordinates (``w``), disjoint from
        ``projected``; with ``projected`` they must cover ``0 … D−1``.

    Attributes
    ----------
    n_params : int
        ``d + len(kept)``.
    blocks : OrderedDict
        ``{'hidden': slice(0, d), 'last': slice(d, n_params)}`` when parameters are kept, else
        ``{'subspace': slice(0, d)}``.

    Examples
    --------
    >>> import torch
    >>> from skfilter.models import SubspaceAdapter, make_adapter, make_mlp
    >>> base = make_adapter(make_mlp(2, (3,), 1, seed=0), torch.device("cpu"), torch.float64, 2)
    >>> A = torch.linalg.qr(torch.randn(base.n_params, 2, dtype=torch.float64)).Q
    >>> sub = SubspaceAdapter(base, A, base.initial_theta())
    >>> X = torch.ones(4, 2, dtype=torch.float64)
    >>> f, J = sub.forward_jacobian(torch.zeros(2, dtype=torch.float64), X)
    >>> J.shape, bool(torch.allclose(f, base.forward(base.initial_theta(), X)))
    (torch.Size([4, 1, 2]), True)
    """

    def __init__(self, base, components, offset, projected=None, kept=None):
        self.base = base
        like = base.initial_theta()
        opts = {"device": like.device, "dtype": like.dtype}
        D = base.n_params
        self.components = torch.as_tensor(components).to(**opts)
        self.offset = torch.as_tensor(offset).to(**opts).reshape(-1).clone()
        if self.offset.shape[0] != D:
            raise ValueError(f"The offset has {self.offset.shape[0]} entries but the network has {D} parameters.")
        self.projected = (torch.arange(D) if projected is None else torch.as_tensor(projected).long()).to(like.device)
        self.kept = (torch.zeros(0, dtype=torch.long) if kept is None else torch.as_tensor(kept).long()).to(like.device)
        if self.components.dim() != 2 or self.components.shape[0] != self.projected.shape[0]:
            raise ValueError(f"The components must have shape ({self.projected.shape[0]}, d) (one row per projected "
                             f"parameter); got {tuple(self.components.shape)}.")
        covered = torch.zeros(D, dtype=torch.long)
        covered[self.projected.cpu()] += 1
        covered[self.kept.cpu()] += 1
        if not bool((covered == 1).all()):
            raise ValueError("The projected and kept positions must partition the network's parameters.")
        self.n_components = int(self.components.shape[1])
        self.n_params = self.n_components + int(self.kept.shape[0])
        self._all_projected = projected is None or (self.kept.numel() == 0 and bool(
            (self.projected == torch.arange(D, device=like.device)).all()))
        if self.kept.numel():
            self.blocks = OrderedDict(hidden=slice(0, self.n_components), last=slice(self.n_components, self.n_params))
        else:
            self.blocks = OrderedDict(subspace=slice(0, self.n_components))

    # -- the attributes of a model adapter the engine reads --------------------------------------
    @property
    def module(self):
        return self.base.module

    @property
    def device(self):
        return self.base.device

    @property
    def dtype(self):
        return self.base.dtype

    @property
    def n_outputs(self):
        return self.base.n_outputs

    @property
    def train_mode_layers(self):
        return self.base.train_mode_layers

    # -- φ ↔ θ ---------------------------------------------------------------------------------
    def full_theta(self, phi: torch.Tensor) -> torch.Tensor:
        """``θ(φ)`` of shape ``(..., D)`` for ``φ (..., n_params)`` (class docstring)."""
        z = phi[..., :self.n_components]
        step = z @ self.components.T  # (..., D_sub)
        if self._all_projected:
            return self.offset + step
        theta = self.offset.expand(*phi.shape[:-1], self.offset.shape[0]).clone()
        theta[..., self.projected] += step
        if self.kept.numel():
            theta[..., self.kept] = phi[..., self.n_components:]
        return theta

    def initial_theta(self) -> torch.Tensor:
        """``φ₀ = (0, θ*[kept])``: the network at the offset."""
        return torch.cat([self.offset.new_zeros(self.n_components), self.offset[self.kept]])

    def write_to_module(self, phi: torch.Tensor):
        """Write ``θ(φ)`` into the network and return it."""
        return self.base.write_to_module(self.full_theta(phi))

    # -- h(φ, X) and its Jacobian --------------------------------------------------------------
    def forward(self, phi, X):
        """``h(θ(φ), X)``: ``(n, C)`` for ``φ (n_params,)``, ``(..., n, C)`` for ``φ (..., n_params)``."""
        return self.base.forward(self.full_theta(phi), X)

    def forward_batch(self, phis, X):
        """``h(θ(φ_s), X)`` for ``φ (S, n_params)``: ``(S, n, C)``."""
        return self.base.forward(self.full_theta(phis), X)

    def forward_jacobian(self, phi, X):
        """Outputs ``(…, n, C)`` and ``∂h/∂φ`` ``(…, n, C, n_params)``: the base Jacobian at
        ``θ(φ)`` with its projected columns multiplied by ``A`` (class docstring)."""
        f, J = self.base.forward_jacobian(self.full_theta(phi), X)
        Jz = (J if self._all_projected else J[..., self.projected]) @ self.components
        if not self.kept.numel():
            return f, Jz
        return f, torch.cat([Jz, J[..., self.kept]], dim=-1)

    def moved(self, device, dtype, n_inputs):
        """This adapter on another device/dtype (the network moved with it)."""
        base = make_adapter(self.base.module, device, dtype, n_inputs)
        return SubspaceAdapter(base, self.components, self.offset, None if self._all_projected else self.projected,
                               self.kept if self.kept.numel() else None)
