"""Tests of the measurement models ``h(θ, x)`` (skfilter/models.py).

The fused :class:`MLPAdapter` (hand-written forward pass and Jacobian) is checked against the general
:class:`ModuleAdapter` (``torch.func.jacrev`` through ``functional_call``), and both against plain
module calls and central finite differences, which depend on neither.
"""

from __future__ import annotations

import copy
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from torch import nn

from skfilter.models import ModuleAdapter, MLPAdapter, build_module, last_layer, make_adapter, make_mlp

CPU = torch.device("cpu")
F64 = torch.float64
ACTIVATIONS = ["relu", "tanh", "logistic", "identity", "elu"]
HIDDEN = [(), (7,), (6, 5)]


def _random_theta(n_params, seed, scale=0.7):
    gen = torch.Generator().manual_seed(seed)
    return scale * torch.randn(n_params, generator=gen, dtype=F64)


def _random_X(n, d, seed):
    gen = torch.Generator().manual_seed(seed + 1000)
    return torch.randn(n, d, generator=gen, dtype=F64)


def _finite_difference_jacobian(adapter, theta, X, h=1e-6):
    """Central differences of ``adapter.forward`` w.r.t. θ: ``(n, C, P)``."""
    cols = []
    for k in range(theta.shape[0]):
        e = torch.zeros_like(theta)
        e[k] = h
        cols.append((adapter.forward(theta + e, X) - adapter.forward(theta - e, X)) / (2 * h))
    return torch.stack(cols, dim=-1)


# ---------------------------------------------------------------------------------------------
# fused MLP path == general torch.func path
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cpu_backend", ["numpy", "torch"])
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("n_outputs", [1, 3])
@pytest.mark.parametrize("hidden", HIDDEN, ids=["linear", "1hidden", "2hidden"])
def test_fused_jacobian_matches_torch_func(activation, n_outputs, hidden, cpu_backend):
    """Both array backends of the fused Jacobian (NumPy views on the CPU, torch on GPUs;
    skfilter._array_ops) against torch.func."""
    D, n = 4, 9
    net = make_mlp(D, hidden, n_outputs, activation, seed=3)
    fused = make_adapter(copy.deepcopy(net), CPU, F64, D)
    fused.cpu_backend = cpu_backend
    general = make_adapter(copy.deepcopy(net), CPU, F64, D, fused=False)
    assert type(fused) is MLPAdapter
    assert type(general) is ModuleAdapter
    assert fused.n_params == general.n_params == sum(p.numel() for p in net.parameters())
    assert fused.n_outputs == general.n_outputs == n_outputs

    X = _random_X(n, D, seed=len(hidden) * 10 + n_outputs)
    # a random θ (non-zero biases, generic pre-activations) and the module's own initial θ
    for theta in (_random_theta(fused.n_params, seed=5), fused.initial_theta()):
        f1, J1 = fused.forward_jacobian(theta, X)
        f2, J2 = general.forward_jacobian(theta, X)
        assert f1.shape == f2.shape == (n, n_outputs)
        assert f1.dtype == J1.dtype == F64 and J1.is_contiguous()
        assert J1.shape == J2.shape == (n, n_outputs, fused.n_params)
        torch.testing.assert_close(f1, f2, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(J1, J2, rtol=1e-12, atol=1e-12)
        # forward agrees with forward_jacobian and between paths
        torch.testing.assert_close(fused.forward(theta, X), f1, rtol=1e-13, atol=1e-13)
        torch.testing.assert_close(general.forward(theta, X), f1, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("activation", ["tanh", "logistic", "elu", "relu"])
def test_fused_jacobian_matches_finite_differences(activation):
    """An oracle independent of both adapters (ReLU/ELU kinks are avoided a.s. by random θ)."""
    D = 3
    net = make_mlp(D, (4, 3), 2, activation, seed=1)
    ad = make_adapter(net, CPU, F64, D)
    assert isinstance(ad, MLPAdapter)
    theta = _random_theta(ad.n_params, seed=11)
    X = _random_X(5, D, seed=2)
    _, J = ad.forward_jacobian(theta, X)
    J_fd = _finite_difference_jacobian(ad, theta, X)
    torch.testing.assert_close(J, J_fd, rtol=1e-6, atol=1e-7)


def test_forward_matches_the_module_call():
    D = 5
    net = make_mlp(D, (8,), 2, "tanh", seed=4)
    ad = make_adapter(copy.deepcopy(net), CPU, F64, D)
    X = _random_X(6, D, seed=0)
    with torch.no_grad():
        expected = net(X)
    torch.testing.assert_close(ad.forward(ad.initial_theta(), X), expected, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("hidden", HIDDEN, ids=["linear", "1hidden", "2hidden"])
def test_forward_batch_matches_looping_forward(fused, hidden):
    D, S, n = 3, 4, 7
    ad = make_adapter(make_mlp(D, hidden, 2, "elu", seed=2), CPU, F64, D, fused=fused)
    thetas = torch.stack([_random_theta(ad.n_params, seed=s) for s in range(S)])
    X = _random_X(n, D, seed=9)
    out = ad.forward_batch(thetas, X)
    assert out.shape == (S, n, 2)
    for s in range(S):
        torch.testing.assert_close(out[s], ad.forward(thetas[s], X), rtol=1e-13, atol=1e-13)


# ---------------------------------------------------------------------------------------------
# make_mlp
# ---------------------------------------------------------------------------------------------
def test_make_mlp_parameter_count_and_layout():
    net = make_mlp(8, (50,), 1, "relu", seed=0)
    assert sum(p.numel() for p in net.parameters()) == 501 == (8 + 2) * 50 + 1
    assert [type(m) for m in net] == [nn.Linear, nn.ReLU, nn.Linear]
    assert all(p.dtype == F64 for p in net.parameters())
    # the UCI sizes quoted in spec/lofi.md fact 31: P = (D + 2) * 50 + 1
    for D, P in [(13, 751), (6, 401), (11, 651)]:
        assert sum(p.numel() for p in make_mlp(D, (50,), 1).parameters()) == P
    # linear model: a single Linear layer, no activation
    lin = make_mlp(8, (), 1, "identity")
    assert [type(m) for m in lin] == [nn.Linear]
    assert sum(p.numel() for p in lin.parameters()) == 9


def test_make_mlp_zero_biases_and_lecun_scale():
    fan_in, fan_out = 400, 500  # 200,000 weights: sample std known to ~0.2 %
    net = make_mlp(fan_in, (fan_out,), 3, "tanh", seed=7)
    for lin in (net[0], net[2]):
        assert torch.count_nonzero(lin.bias) == 0
    W = net[0].weight.detach()
    target = 1.0 / math.sqrt(fan_in)
    N = W.numel()
    assert abs(W.mean().item()) < 5 * target / math.sqrt(N)
    # std of a sample std is about σ/√(2N); allow 6 of those plus nothing else
    assert abs(W.std().item() - target) < 6 * target / math.sqrt(2 * N)
    # the draw is truncated at two (pre-scaling) standard deviations
    assert W.abs().max().item() <= 2 * target / 0.87962566103423978 * (1 + 1e-12)
    # and it is not a Gaussian without truncation: some mass near the bound but none beyond
    assert W.abs().max().item() > 1.5 * target
    # second layer fan_in = 500
    W2 = net[2].weight.detach()
    assert W2.abs().max().item() <= 2 / math.sqrt(fan_out) / 0.87962566103423978 * (1 + 1e-12)


def test_make_mlp_is_deterministic_by_seed():
    a = make_mlp(6, (10, 4), 2, "relu", seed=123)
    b = make_mlp(6, (10, 4), 2, "relu", seed=123)
    c = make_mlp(6, (10, 4), 2, "relu", seed=124)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert not all(torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters()))
    # the global torch RNG is not consumed or used
    torch.manual_seed(0)
    d = make_mlp(6, (10, 4), 2, "relu", seed=123)
    for pa, pd in zip(a.parameters(), d.parameters()):
        assert torch.equal(pa, pd)


def test_make_mlp_rejects_unknown_activation():
    with pytest.raises(ValueError, match="activation"):
        make_mlp(3, (4,), 1, "softplus")


# ---------------------------------------------------------------------------------------------
# which modules take the fused path
# ---------------------------------------------------------------------------------------------
class TwoLinear(nn.Module):
    """A custom forward: y = W2 tanh(W1 x + b1) + x·v (skip connection, no bias on the second)."""

    def __init__(self, d=3, h=4, c=2):
        super().__init__()
        self.inner = nn.Linear(d, h)
        self.outer = nn.Linear(h, c, bias=False)
        self.skip = nn.Parameter(torch.linspace(-1, 1, d * c).reshape(c, d))

    def forward(self, x):
        return self.outer(torch.tanh(self.inner(x))) + x @ self.skip.T


@pytest.mark.parametrize(
    "module",
    [
        nn.Sequential(nn.Linear(3, 4, bias=False), nn.ReLU(), nn.Linear(4, 1)),
        nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1, bias=False)),
        nn.Sequential(nn.Linear(3, 4), nn.ReLU()),  # ends with an activation
        nn.Sequential(nn.Linear(3, 4), nn.Softplus(), nn.Linear(4, 1)),  # unsupported activation
        nn.Sequential(nn.Linear(3, 4), nn.ELU(alpha=0.5), nn.Linear(4, 1)),  # ELU alpha != 1
        nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1)),
        nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 1)),  # no activation between
        TwoLinear(),
    ],
    ids=["bias-less-first", "bias-less-last", "trailing-act", "softplus", "elu-alpha", "batchnorm",
         "linear-linear", "custom"],
)
def test_supports_rejects_non_plain_mlps(module):
    assert not MLPAdapter.supports(module)
    ad = make_adapter(module, CPU, F64, 3)
    assert type(ad) is ModuleAdapter


def test_supports_accepts_plain_mlps():
    for act in ACTIVATIONS:
        for hidden in HIDDEN:
            assert MLPAdapter.supports(make_mlp(3, hidden, 2, act))
    net = nn.Sequential(nn.Linear(3, 4), nn.ELU(alpha=1.0), nn.Linear(4, 1))
    assert MLPAdapter.supports(net)
    # a subclass of Sequential is not "plain"
    class MySeq(nn.Sequential):
        pass

    assert not MLPAdapter.supports(MySeq(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)))
    assert type(make_adapter(make_mlp(3, (4,), 1), CPU, F64, 3, fused=False)) is ModuleAdapter


# ---------------------------------------------------------------------------------------------
# flat θ ↔ module
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fused", [True, False])
def test_write_to_module_round_trip(fused):
    D = 4
    net = make_mlp(D, (5,), 2, "tanh", seed=0)
    ad = make_adapter(net, CPU, F64, D, fused=fused)
    theta = _random_theta(ad.n_params, seed=3)
    module = ad.write_to_module(theta)
    assert module is ad.module
    torch.testing.assert_close(ad.initial_theta(), theta, rtol=0, atol=0)
    # the flat order is named_parameters order, weight row-major then bias
    flat = torch.cat([p.detach().reshape(-1) for _, p in module.named_parameters()])
    assert torch.equal(flat, theta)
    torch.testing.assert_close(module[0].weight.detach()[1], theta[D:2 * D], rtol=0, atol=0)
    X = _random_X(3, D, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(module(X), ad.forward(theta, X), rtol=1e-14, atol=1e-14)
    # unflatten gives views into θ with the parameter shapes
    views = ad.unflatten(theta)
    assert [tuple(v.shape) for v in views.values()] == [tuple(p.shape) for p in module.parameters()]
    assert views["0.weight"].data_ptr() == theta.data_ptr()
    # initial_theta is a copy, not a view
    t0 = ad.initial_theta()
    t0.add_(1.0)
    assert torch.equal(ad.initial_theta(), theta)


def test_custom_module_with_buffers_through_module_adapter():
    """BatchNorm in eval mode: running statistics are buffers, used but not learned."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5), nn.Tanh(), nn.Linear(5, 2)).double()
    with torch.no_grad():
        net[1].running_mean.copy_(torch.linspace(-0.5, 0.5, 5, dtype=F64))
        net[1].running_var.copy_(torch.linspace(0.5, 2.0, 5, dtype=F64))
    ad = make_adapter(copy.deepcopy(net), CPU, F64, 3)
    assert type(ad) is ModuleAdapter
    # parameters only: 3*5+5 + 5+5 (BN affine) + 5*2+2
    assert ad.n_params == 20 + 10 + 12
    assert ad.n_outputs == 2
    X = _random_X(6, 3, seed=4)
    net.eval()
    with torch.no_grad():
        expected = net(X)
    theta0 = ad.initial_theta()
    torch.testing.assert_close(ad.forward(theta0, X), expected, rtol=1e-14, atol=1e-14)
    # eval mode: the running statistics are not updated by a forward pass
    rm = ad.module[1].running_mean.clone()
    ad.forward(theta0, X)
    assert torch.equal(ad.module[1].running_mean, rm)
    theta = theta0 + 0.1 * _random_theta(ad.n_params, seed=2)
    f, J = ad.forward_jacobian(theta, X)
    torch.testing.assert_close(f, ad.forward(theta, X), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(J, _finite_difference_jacobian(ad, theta, X), rtol=1e-6, atol=1e-7)


def test_custom_forward_through_module_adapter():
    model = TwoLinear().double()
    ad = make_adapter(copy.deepcopy(model), CPU, F64, 3)
    assert type(ad) is ModuleAdapter
    assert ad.n_params == (3 * 4 + 4) + 4 * 2 + 6
    theta = _random_theta(ad.n_params, seed=8)
    X = _random_X(4, 3, seed=3)
    f, J = ad.forward_jacobian(theta, X)
    # closed form: the Jacobian w.r.t. the skip matrix is x in output row c
    names = [n for n, _ in model.named_parameters()]
    assert names == ["skip", "inner.weight", "inner.bias", "outer.weight"]
    for c in range(2):
        torch.testing.assert_close(J[:, c, c * 3:(c + 1) * 3], X, rtol=0, atol=1e-15)
        other = 1 - c
        assert torch.count_nonzero(J[:, c, other * 3:(other + 1) * 3]) == 0
    torch.testing.assert_close(J, _finite_difference_jacobian(ad, theta, X), rtol=1e-6, atol=1e-7)
    # write back and call the module itself
    m = ad.write_to_module(theta)
    with torch.no_grad():
        torch.testing.assert_close(m(X), f, rtol=1e-14, atol=1e-14)


def test_module_adapter_one_dimensional_output_counts_as_one():
    class Squeeze(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 1)

        def forward(self, x):
            return self.lin(x).squeeze(-1)

    ad = make_adapter(Squeeze(), CPU, F64, 3)
    assert ad.n_outputs == 1
    f, J = ad.forward_jacobian(ad.initial_theta(), _random_X(5, 3, seed=0))
    assert f.shape == (5, 1) and J.shape == (5, 1, 4)


def test_module_adapter_rejects_parameterless_module():
    with pytest.raises(ValueError, match="no parameters"):
        ModuleAdapter(nn.Sequential(nn.ReLU()), CPU, F64, 3)


def test_build_module_resolves_none_class_and_instance():
    net = build_module(None, {}, n_inputs=4, n_outputs=2, hidden_layer_sizes=(6,), activation="tanh",
                       seed=5)
    ref = make_mlp(4, (6,), 2, "tanh", seed=5)
    for a, b in zip(net.parameters(), ref.parameters()):
        assert torch.equal(a, b)
    # a class is instantiated under a seeded RNG: reproducible, global RNG untouched
    state = torch.random.get_rng_state()
    m1 = build_module(TwoLinear, {"h": 6}, n_inputs=3, n_outputs=2, hidden_layer_sizes=(),
                      activation="relu", seed=9)
    assert torch.equal(torch.random.get_rng_state(), state)
    m2 = build_module(TwoLinear, {"h": 6}, n_inputs=3, n_outputs=2, hidden_layer_sizes=(),
                      activation="relu", seed=9)
    assert m1.inner.out_features == 6
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    # an instance is deep-copied, weights kept
    inst = TwoLinear()
    m3 = build_module(inst, {}, n_inputs=3, n_outputs=2, hidden_layer_sizes=(), activation="relu", seed=0)
    assert m3 is not inst
    assert all(torch.equal(a, b) for a, b in zip(m3.parameters(), inst.parameters()))
    with pytest.raises(ValueError):
        build_module(None, {"h": 3}, n_inputs=3, n_outputs=2, hidden_layer_sizes=(), activation="relu",
                     seed=0)
    with pytest.raises(ValueError):
        build_module(inst, {"h": 3}, n_inputs=3, n_outputs=2, hidden_layer_sizes=(), activation="relu",
                     seed=0)
    with pytest.raises(TypeError):
        build_module("mlp", {}, n_inputs=3, n_outputs=2, hidden_layer_sizes=(), activation="relu", seed=0)


def test_jacobian_of_linear_model_is_the_design_row():
    """h(θ, x) = W x + b: ∂h_c/∂W[c, :] = x, ∂h_c/∂b[c] = 1, zero elsewhere (closed form)."""
    D, C, n = 3, 2, 4
    ad = make_adapter(make_mlp(D, (), C, "identity"), CPU, F64, D)
    X = _random_X(n, D, seed=6)
    theta = _random_theta(ad.n_params, seed=1)
    f, J = ad.forward_jacobian(theta, X)
    expected = np.zeros((n, C, C * D + C))
    for c in range(C):
        expected[:, c, c * D:(c + 1) * D] = X.numpy()
        expected[:, c, C * D + c] = 1.0
    np.testing.assert_array_equal(J.numpy(), expected)
    W = theta[:C * D].view(C, D)
    b = theta[C * D:]
    torch.testing.assert_close(f, X @ W.T + b, rtol=1e-14, atol=1e-14)


# ---------------------------------------------------------------------------------------------
# hypotheses axes: θ (..., P) in one batched call
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["numpy", "torch", "general"])
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("n_outputs", [1, 3])
@pytest.mark.parametrize("hidden", HIDDEN, ids=["linear", "1hidden", "2hidden"])
def test_batched_forward_jacobian_equals_separate_calls(path, activation, n_outputs, hidden):
    """K = 3 different θ in one call == 3 calls (fused NumPy / torch backends, general path)."""
    D, n, K = 4, 5, 3
    ad = make_adapter(make_mlp(D, hidden, n_outputs, activation, seed=1), CPU, F64, D,
                      fused=path != "general")
    if path != "general":
        ad.cpu_backend = path
    thetas = torch.stack([_random_theta(ad.n_params, seed=20 + k) for k in range(K)])
    X = _random_X(n, D, seed=3)
    f, J = ad.forward_jacobian(thetas, X)
    assert f.shape == (K, n, n_outputs) and J.shape == (K, n, n_outputs, ad.n_params)
    out = ad.forward(thetas, X)
    assert out.shape == (K, n, n_outputs)
    torch.testing.assert_close(ad.forward_batch(thetas, X), out, rtol=0, atol=0)
    for k in range(K):
        fk, Jk = ad.forward_jacobian(thetas[k], X)
        torch.testing.assert_close(f[k], fk, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(J[k], Jk, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(out[k], fk, rtol=1e-12, atol=1e-12)
    # any leading shape: (2, 3, P)
    thetas2 = torch.stack([thetas, thetas.flip(0)])
    f2, J2 = ad.forward_jacobian(thetas2, X)
    assert f2.shape == (2, K, n, n_outputs) and J2.shape == (2, K, n, n_outputs, ad.n_params)
    torch.testing.assert_close(f2[1], f.flip(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(J2[1], J.flip(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ad.forward(thetas2, X)[0], out, rtol=1e-12, atol=1e-12)


def test_batched_forward_jacobian_custom_module():
    ad = make_adapter(TwoLinear().double(), CPU, F64, 3)
    thetas = torch.stack([_random_theta(ad.n_params, seed=k) for k in range(3)])
    X = _random_X(4, 3, seed=1)
    f, J = ad.forward_jacobian(thetas, X)
    for k in range(3):
        fk, Jk = ad.forward_jacobian(thetas[k], X)
        torch.testing.assert_close(f[k], fk, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(J[k], Jk, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# parameter blocks
# ---------------------------------------------------------------------------------------------
def _assert_partition(blocks, n_params):
    idx = torch.cat([torch.arange(n_params)[ix] for ix in blocks.values()])
    assert torch.equal(idx.sort().values, torch.arange(n_params))


def test_blocks_of_the_default_mlp():
    ad = make_adapter(make_mlp(8, (50,), 1, "relu"), CPU, F64, 8)
    assert type(ad) is MLPAdapter
    assert list(ad.blocks) == ["hidden", "last"]
    assert ad.blocks["hidden"] == slice(0, 8 * 50 + 50)
    assert ad.blocks["last"] == slice(450, 501) and ad.n_params == 501
    ad = make_adapter(make_mlp(3, (4, 5), 2, "tanh"), CPU, F64, 3)
    k = 3 * 4 + 4 + 4 * 5 + 5
    assert ad.blocks == {"hidden": slice(0, k), "last": slice(k, ad.n_params)}
    ad = make_adapter(make_mlp(3, (), 2, "identity"), CPU, F64, 3)
    assert ad.blocks == {"last": slice(0, 8)}


def test_blocks_of_a_sequential_through_module_adapter():
    net = make_mlp(3, (4, 5), 2, "tanh")
    assert last_layer(net) == "4"
    ad = make_adapter(net, CPU, F64, 3, fused=False)
    assert list(ad.blocks) == ["0", "2", "last"]
    assert ad.blocks["0"] == slice(0, 16) and ad.blocks["2"] == slice(16, 41)
    assert ad.blocks["last"] == slice(41, 53) and ad.n_params == 53
    # not ending in Linear: no 'last'
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2), nn.Tanh()).double()
    assert last_layer(net) is None
    ad = make_adapter(net, CPU, F64, 3)
    assert list(ad.blocks) == ["0", "2"]
    _assert_partition(ad.blocks, ad.n_params)


def test_blocks_of_a_custom_module_and_user_mapping():
    ad = make_adapter(TwoLinear().double(), CPU, F64, 3)
    assert last_layer(ad.module) is None
    # parameters: skip (6), inner.weight (12), inner.bias (4), outer.weight (8)
    assert ad.blocks == {"skip": slice(0, 6), "inner": slice(6, 22), "outer": slice(22, 30)}
    user = {"net": ["inner.weight", "inner.bias", "outer.weight"], "skip": ["skip"]}
    ad = make_adapter(TwoLinear().double(), CPU, F64, 3, blocks=user)
    assert list(ad.blocks) == ["net", "skip"]
    assert ad.blocks["net"] == slice(6, 30) and ad.blocks["skip"] == slice(0, 6)
    # not contiguous in the flat order: an index tensor
    user = {"a": ["skip", "outer.weight"], "b": ["inner.weight", "inner.bias"]}
    ad = make_adapter(TwoLinear().double(), CPU, F64, 3, blocks=user)
    assert ad.blocks["a"].dtype == torch.long
    assert torch.equal(ad.blocks["a"], torch.cat([torch.arange(0, 6), torch.arange(22, 30)]))
    assert ad.blocks["b"] == slice(6, 22)
    _assert_partition(ad.blocks, ad.n_params)
    # a user mapping on the fused path
    ad = make_adapter(make_mlp(3, (4,), 1, "relu"), CPU, F64, 3,
                      blocks={"w": ["0.weight", "2.weight"], "b": ["0.bias", "2.bias"]})
    assert type(ad) is MLPAdapter and list(ad.blocks) == ["w", "b"]
    _assert_partition(ad.blocks, ad.n_params)


@pytest.mark.parametrize("blocks, match", [
    ({"a": ["skip", "inner.weight"]}, "missing"),
    ({"a": ["skip", "inner.weight", "inner.bias"], "b": ["outer.weight", "skip"]}, "two blocks"),
    ({"a": ["skip", "inner.weight", "inner.bias", "outer.weight", "nope"]}, "not a learned parameter"),
    ({"a": ["skip", "inner.weight", "inner.bias", "outer.weight"], "b": []}, "empty"),
])
def test_bad_block_mappings_are_rejected(blocks, match):
    with pytest.raises(ValueError, match=match):
        make_adapter(TwoLinear().double(), CPU, F64, 3, blocks=blocks)


def test_frozen_parameters_are_not_in_blocks():
    net = TwoLinear().double()
    net.skip.requires_grad_(False)
    ad = make_adapter(net, CPU, F64, 3)
    assert ad.blocks == {"inner": slice(0, 16), "outer": slice(16, 24)}
    with pytest.raises(ValueError, match="not a learned parameter"):
        make_adapter(net, CPU, F64, 3, blocks={"a": ["skip", "inner.weight", "inner.bias", "outer.weight"]})


# ---------------------------------------------------------------------------------------------
# build_module under threads
# ---------------------------------------------------------------------------------------------
class _SlowInit(nn.Module):
    """Draws from the global RNG in several steps (room for threads to interleave)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(6, 6) for _ in range(5))
        self.extra = nn.Parameter(torch.randn(40))


def test_build_module_is_deterministic_under_threads():
    def build(seed):
        m = build_module(_SlowInit, {}, n_inputs=6, n_outputs=6, hidden_layer_sizes=(),
                         activation="relu", seed=seed)
        return torch.cat([p.detach().reshape(-1) for p in m.parameters()])

    seeds = [s % 4 for s in range(30)]
    expected = {s: build(s) for s in set(seeds)}
    assert not torch.equal(expected[0], expected[1])
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(build, seeds))
    for s, r in zip(seeds, results):
        assert torch.equal(r, expected[s])
