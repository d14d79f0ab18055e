"""Signals of the factorization models (skfilter.factorization.signals) against torch autograd.

Gómez-Uribe & Karrer, §2.1 (signals) and §3.4 (gradients, Eqs 25–26); spec facts 5 and 12, pitfalls 5–6.
"""

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from skfilter.factorization.signals import (CPFactorization, FactorizationMachine, LinearSignal,
                                            MatrixFactorization, Signal, slot_parameter_sizes)

# (signal, features per slot) configurations covering every class and option
CASES = {
    "linear": (LinearSignal(), [1, 3, 2]),
    "linear-one-slot": (LinearSignal(), [4]),
    "fm2": (FactorizationMachine(3), [1, 1, 4]),
    "fm2-nolinear": (FactorizationMachine(2, linear=False), [2, 3]),
    "fm3": (FactorizationMachine(2, order=3), [1, 2, 3]),
    "fm4-per-order": (FactorizationMachine(None, order=4, factors_per_order=(2, 3, 1)), [1, 1, 3]),
    "fm4-nolinear": (FactorizationMachine(2, order=4, linear=False), [5]),
    "fm1": (FactorizationMachine(3, order=1), [1, 2]),
    "mf": (MatrixFactorization(3), [1, 1]),
    "mf-nobias": (MatrixFactorization(3, biases=False), [1, 1]),
    "mf-context": (MatrixFactorization(2, context=True), [1, 1, 4]),
    "cp3": (CPFactorization(3, order=3), [1, 1, 1]),
    "cp3-nobias": (CPFactorization(2, order=3, biases=False), [1, 1, 1]),
    "cp4-context": (CPFactorization(2, order=4, context=True), [1, 1, 1, 1, 3]),
}


def make_inputs(signal, features, batch, dtype=torch.float64, seed=0, with_bias=True, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    params = [scale * torch.randn((*batch, n, signal.params_per_feature(s)), generator=g, dtype=torch.float64)
              for s, n in enumerate(features)]
    values = [torch.randn((*batch, n), generator=g, dtype=torch.float64) for n in features]
    bias = torch.randn(tuple(batch), generator=g, dtype=torch.float64) if with_bias else None
    cast = lambda t: None if t is None else t.to(dtype)  # noqa: E731
    return [cast(t) for t in params], [cast(t) for t in values], cast(bias)


def autograd_gradients(signal, params, values, bias):
    """∂λ/∂params by autograd of ``value`` (events are independent, so the gradient of the sum)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in params]
    b = None if bias is None else bias.detach().clone().requires_grad_(True)
    lam = signal.value(leaves, values, b)
    inputs = leaves + ([] if b is None else [b])
    grads = torch.autograd.grad(lam.sum(), inputs, allow_unused=True)
    grads = [torch.zeros_like(t) if gr is None else gr for gr, t in zip(grads, inputs)]
    return lam.detach(), grads[:len(params)], (None if b is None else grads[-1])


def assert_matches_autograd(signal, params, values, bias, rtol=1e-10, atol=1e-10):
    lam, grads, gb = signal.value_and_gradients(params, values, bias)
    lam_ref, grads_ref, gb_ref = autograd_gradients(signal, params, values, bias)
    torch.testing.assert_close(lam, lam_ref, rtol=rtol, atol=atol)
    torch.testing.assert_close(lam, signal.value(params, values, bias), rtol=rtol, atol=atol)
    assert len(grads) == len(params)
    for g, g_ref, t in zip(grads, grads_ref, params):
        assert g.shape == t.shape and g.dtype == t.dtype
        torch.testing.assert_close(g, g_ref, rtol=rtol, atol=atol)
    if bias is None:
        assert gb is None
    else:
        torch.testing.assert_close(gb, torch.ones_like(bias))
        torch.testing.assert_close(gb, gb_ref)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("B", [1, 5, 17])
@pytest.mark.parametrize("with_bias", [True, False])
def test_gradients_match_autograd(name, B, with_bias):
    signal, features = CASES[name]
    params, values, bias = make_inputs(signal, features, (B,), seed=B, with_bias=with_bias)
    assert_matches_autograd(signal, params, values, bias)


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_match_vmap_jacrev(name):
    """Per-event Jacobians by torch.func.jacrev of ``value`` on a single event (no batch axis), vmapped."""
    signal, features = CASES[name]
    params, values, bias = make_inputs(signal, features, (6,), seed=3)

    def f(p, x, b):
        return signal.value(p, x, b)

    jac = torch.func.vmap(torch.func.jacrev(f, argnums=(0, 2)))(params, values, bias)
    lam, grads, gb = signal.value_and_gradients(params, values, bias)
    for g, g_ref in zip(grads, jac[0]):
        torch.testing.assert_close(g, g_ref)
    torch.testing.assert_close(gb, jac[1])


@pytest.mark.parametrize("name", list(CASES))
def test_leading_batch_axes_and_single_event(name):
    signal, features = CASES[name]
    params, values, bias = make_inputs(signal, features, (3, 4), seed=7)
    lam, grads, gb = signal.value_and_gradients(params, values, bias)
    assert lam.shape == (3, 4) and gb.shape == (3, 4)
    assert_matches_autograd(signal, params, values, bias)
    # one event, no batch axis, equals the corresponding batched entry
    one = signal.value_and_gradients([t[1, 2] for t in params], [t[1, 2] for t in values], bias[1, 2])
    torch.testing.assert_close(one[0], lam[1, 2])
    for g1, g in zip(one[1], grads):
        torch.testing.assert_close(g1, g[1, 2])


@pytest.mark.parametrize("name", list(CASES))
def test_float32(name):
    signal, features = CASES[name]
    p64, v64, b64 = make_inputs(signal, features, (9,), seed=11, scale=0.7)
    p32, v32, b32 = make_inputs(signal, features, (9,), dtype=torch.float32, seed=11, scale=0.7)
    lam32, g32, gb32 = signal.value_and_gradients(p32, v32, b32)
    lam64, g64, _ = signal.value_and_gradients(p64, v64, b64)
    assert lam32.dtype == torch.float32 and gb32.dtype == torch.float32
    assert all(g.dtype == torch.float32 for g in g32)
    torch.testing.assert_close(lam32.double(), lam64, rtol=1e-4, atol=1e-4)
    for a, b in zip(g32, g64):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)
    assert_matches_autograd(signal, p32, v32, b32, rtol=1e-4, atol=1e-4)


def test_values_cast_to_params_dtype():
    signal, features = CASES["fm3"]
    params, values, bias = make_inputs(signal, features, (4,), seed=2)
    lam, grads, _ = signal.value_and_gradients(params, [v.float() for v in values], bias)
    assert lam.dtype == torch.float64 and all(g.dtype == torch.float64 for g in grads)


# --- model identities --------------------------------------------------------------------------------

@pytest.mark.parametrize("with_bias", [True, False])
def test_mf_equals_fm2_on_two_ids(with_bias):
    """MF with user/item biases = order-2 FM on two one-hot features (x = 1), b playing w (spec §2.4 item 5)."""
    mf, fm = MatrixFactorization(4), FactorizationMachine(4)
    params, _, bias = make_inputs(mf, [1, 1], (8,), seed=5, with_bias=with_bias)
    ones = [torch.ones(8, 1, dtype=torch.float64)] * 2
    lam_mf, g_mf, gb_mf = mf.value_and_gradients(params, None, bias)
    lam_fm, g_fm, gb_fm = fm.value_and_gradients(params, ones, bias)
    torch.testing.assert_close(lam_mf, lam_fm)
    for a, b in zip(g_mf, g_fm):
        torch.testing.assert_close(a, b)
    assert (gb_mf is None) == (gb_fm is None)
    # MF ignores the values of its id slots
    torch.testing.assert_close(mf.value(params, [torch.randn(8, 1, dtype=torch.float64)] * 2, bias), lam_mf)


def test_mf_without_biases_equals_fm2_without_linear_terms():
    mf, fm = MatrixFactorization(3, biases=False), FactorizationMachine(3, linear=False)
    params, _, _ = make_inputs(mf, [1, 1], (6,), seed=6)
    ones = [torch.ones(6, 1, dtype=torch.float64)] * 2
    torch.testing.assert_close(mf.value(params), fm.value(params, ones))
    torch.testing.assert_close(mf.value(params), (params[0] * params[1]).sum((-1, -2)))


@pytest.mark.parametrize("biases", [True, False])
@pytest.mark.parametrize("context", [True, False])
def test_cp_order2_equals_mf(biases, context):
    cp, mf = CPFactorization(3, order=2, biases=biases, context=context), \
        MatrixFactorization(3, biases=biases, context=context)
    features = [1, 1, 3] if context else [1, 1]
    params, values, bias = make_inputs(cp, features, (7,), seed=8)
    lam_cp, g_cp, gb_cp = cp.value_and_gradients(params, values, bias)
    lam_mf, g_mf, gb_mf = mf.value_and_gradients(params, values, bias)
    torch.testing.assert_close(lam_cp, lam_mf)
    for a, b in zip(g_cp, g_mf):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(gb_cp, gb_mf)


def test_mf_context_adds_linear_term():
    mf_ctx, mf = MatrixFactorization(2, context=True), MatrixFactorization(2)
    params, values, bias = make_inputs(mf_ctx, [1, 1, 4], (5,), seed=9)
    expected = mf.value(params[:2], None, bias) + (values[2] * params[2][..., 0]).sum(-1)
    torch.testing.assert_close(mf_ctx.value(params, values, bias), expected)
    _, grads, _ = mf_ctx.value_and_gradients(params, values, bias)
    torch.testing.assert_close(grads[2], values[2].unsqueeze(-1))


def test_mf_gradients_are_the_other_vectors():
    """Spec fact 12: ∂λ/∂ξ_u = ξ_v, ∂λ/∂ξ_v = ξ_u, ∂λ/∂b = 1."""
    mf = MatrixFactorization(3)
    params, _, bias = make_inputs(mf, [1, 1], (4,), seed=10)
    _, (gu, gv), gb = mf.value_and_gradients(params, None, bias)
    torch.testing.assert_close(gu[..., 0, 1:], params[1][..., 0, 1:])
    torch.testing.assert_close(gv[..., 0, 1:], params[0][..., 0, 1:])
    assert torch.all(gu[..., 0, 0] == 1) and torch.all(gv[..., 0, 0] == 1) and torch.all(gb == 1)


def test_cp_gradient_with_zero_entries():
    """Prefix/suffix products: exact where some ξ entries are zero (a division-based formula fails there)."""
    cp = CPFactorization(4, order=4, biases=False)
    params, _, _ = make_inputs(cp, [1] * 4, (6,), seed=12)
    params[1][..., 0, :2] = 0.0
    params[2][..., 0, 1] = 0.0
    assert_matches_autograd(cp, params, None, None)
    _, grads, _ = cp.value_and_gradients(params)
    xi = [t[..., 0, :] for t in params]
    torch.testing.assert_close(grads[0][..., 0, :], xi[1] * xi[2] * xi[3])


@pytest.mark.parametrize("name", ["mf", "mf-nobias"])
def test_mf_within_entity_hessian_is_zero(name):
    """Spec fact 5: λ is bilinear in (ξ_u, ξ_v): zero within-entity Hessian blocks, identity cross block."""
    mf, _ = CASES[name]
    params, _, bias = make_inputs(mf, [1, 1], (), seed=13)
    off = 1 if mf.biases else 0
    hess = torch.autograd.functional.hessian(lambda u, v: mf.value([u, v], None, bias), tuple(params))
    p = mf.n_params_per_feature
    assert torch.count_nonzero(hess[0][0]) == 0 and torch.count_nonzero(hess[1][1]) == 0
    cross = hess[0][1].reshape(p, p)
    expected = torch.zeros(p, p, dtype=torch.float64)
    expected[off:, off:] = torch.eye(mf.n_factors, dtype=torch.float64)
    torch.testing.assert_close(cross, expected)


def test_fm_with_zero_interactions_equals_linear():
    """FM with every v = 0 is the GLM (spec §2.4 item 5), in value and in the w-gradients."""
    fm, lin = FactorizationMachine(2, order=3), LinearSignal()
    features = [1, 2, 3]
    params, values, bias = make_inputs(fm, features, (5,), seed=14)
    for t in params:
        t[..., 1:] = 0.0
    lam_fm, g_fm, gb_fm = fm.value_and_gradients(params, values, bias)
    lam_lin, g_lin, gb_lin = lin.value_and_gradients([t[..., :1] for t in params], values, bias)
    torch.testing.assert_close(lam_fm, lam_lin)
    for a, b in zip(g_fm, g_lin):
        torch.testing.assert_close(a[..., :1], b)
        assert torch.count_nonzero(a[..., 1:]) == 0
    torch.testing.assert_close(gb_fm, gb_lin)


# --- FM of order 3 and 4 against explicit subset sums (Eq 5) and the ordered reading of Eq 25 ----------

FM_HIGH = FactorizationMachine(None, order=4, factors_per_order=(2, 3, 2))


def fm_subset_sum(fm, params, values, bias):
    """Eq 5 literally: sums over unordered l-subsets of the event's features (one event, no batch axis)."""
    theta = torch.cat(params, dim=-2)
    x = torch.cat(values, dim=-1)
    n = x.shape[0]
    lam = bias + (x * theta[:, 0]).sum()
    for l, sl in zip(range(2, fm.order + 1), fm._slices):
        v = theta[:, sl]
        for subset in itertools.combinations(range(n), l):
            idx = list(subset)
            lam = lam + x[idx].prod() * v[idx].prod(0).sum()
    return lam


def fm_ordered_gradient(fm, params, values, l):
    """Eq 25 read literally: ∂λ/∂v^l_{i,f} = x_i Σ over ORDERED distinct tuples (i_2..i_l) ≠ i (one event)."""
    theta = torch.cat(params, dim=-2)
    x = torch.cat(values, dim=-1)
    n = x.shape[0]
    v = theta[:, fm._slices[l - 2]]
    out = torch.zeros_like(v)
    for i in range(n):
        others = [j for j in range(n) if j != i]
        for tup in itertools.permutations(others, l - 1):
            idx = list(tup)
            out[i] += x[idx].prod() * v[idx].prod(0)
        out[i] *= x[i]
    return out


@pytest.mark.parametrize("features", [[1, 1, 1, 1], [2, 3], [1, 1, 4]])
def test_fm_high_order_matches_subset_sum_and_its_autograd(features):
    fm = FM_HIGH
    params, values, bias = make_inputs(fm, features, (4,), seed=len(features))
    lam, grads, _ = fm.value_and_gradients(params, values, bias)
    for b in range(4):
        p_b = [t[b].detach().clone().requires_grad_(True) for t in params]
        v_b = [t[b] for t in values]
        lam_b = fm_subset_sum(fm, p_b, v_b, bias[b])
        torch.testing.assert_close(lam[b], lam_b.detach())
        g_ref = torch.autograd.grad(lam_b, p_b)
        for g, gr in zip(grads, g_ref):
            torch.testing.assert_close(g[b], gr)


@pytest.mark.parametrize("l, factor", [(3, 2), (4, 6)])
def test_fm_ordered_reading_of_eq25_overcounts_by_factorial(l, factor):
    """Pitfall 6: the ordered-tuple reading of Eq 25 is (l−1)! times the subset (Eq 5) gradient."""
    fm = FM_HIGH
    features = [1, 2, 3]
    params, values, bias = make_inputs(fm, features, (3,), seed=20 + l)
    _, grads, _ = fm.value_and_gradients(params, values, bias)
    sl = fm._slices[l - 2]
    assert factor == math.factorial(l - 1)
    for b in range(3):
        p_b = [t[b] for t in params]
        v_b = [t[b] for t in values]
        ordered = fm_ordered_gradient(fm, p_b, v_b, l)
        ours = torch.cat([g[b] for g in grads], dim=-2)[:, sl]
        torch.testing.assert_close(ordered, factor * ours)
        assert not torch.allclose(ordered, ours)


def test_fm_order2_closed_form():
    """Eq 26: ∂λ/∂v_i = x_i Σ_{j≠i} x_j v_j, and λ = Σ_{i<j} x_i x_j v_i·v_j."""
    fm = FactorizationMachine(3, linear=False)
    params, values, _ = make_inputs(fm, [4], (2,), seed=30)
    lam, (g,), gb = fm.value_and_gradients(params, values)
    assert gb is None
    v, x = params[0], values[0]
    for b in range(2):
        expected = sum(x[b, i] * x[b, j] * (v[b, i] @ v[b, j]) for i in range(4) for j in range(i + 1, 4))
        torch.testing.assert_close(lam[b], expected)
        for i in range(4):
            torch.testing.assert_close(g[b, i], x[b, i] * sum(x[b, j] * v[b, j] for j in range(4) if j != i))


# --- layout helpers and validation --------------------------------------------------------------------

def test_params_per_feature_and_slot_sizes():
    assert LinearSignal().n_params_per_feature == 1
    fm = FactorizationMachine(3, order=3)
    assert fm.n_params_per_feature == 7 and fm.params_per_feature(5) == 7
    assert FactorizationMachine(3, order=3, linear=False).n_params_per_feature == 6
    assert FactorizationMachine(None, order=3, factors_per_order=(2, 5)).n_params_per_feature == 8
    assert MatrixFactorization(4).n_params_per_feature == 5
    assert MatrixFactorization(4, biases=False).n_params_per_feature == 4
    mfc = MatrixFactorization(4, context=True)
    assert [mfc.params_per_feature(s) for s in range(3)] == [5, 5, 1] and mfc.n_slots == 3
    assert slot_parameter_sizes(mfc, [1, 1, 6]) == [5, 5, 6]
    assert slot_parameter_sizes(CPFactorization(2, order=3, biases=False), [1, 1, 1]) == [2, 2, 2]
    assert slot_parameter_sizes(LinearSignal(), [3, 1]) == [3, 1]
    with pytest.raises(ValueError):
        slot_parameter_sizes(MatrixFactorization(2), [1, 1, 1])
    with pytest.raises(ValueError):
        slot_parameter_sizes(MatrixFactorization(2), [2, 1])
    assert isinstance(fm, Signal) and "FactorizationMachine" in repr(fm)


def test_validation_errors():
    with pytest.raises(ValueError):
        FactorizationMachine(0)
    with pytest.raises(ValueError):
        FactorizationMachine(2, order=3, factors_per_order=(2,))
    with pytest.raises(ValueError):
        FactorizationMachine(2, order=1, linear=False)
    with pytest.raises(ValueError):
        CPFactorization(2, order=1)
    mf = MatrixFactorization(2)
    with pytest.raises(ValueError):            # three slots for MF
        mf.value([torch.zeros(2, 1, 3)] * 3)
    with pytest.raises(ValueError):            # wrong p
        mf.value([torch.zeros(2, 1, 2)] * 2)
    with pytest.raises(ValueError):            # two features in an id slot
        mf.value([torch.zeros(2, 2, 3)] * 2)
    with pytest.raises(ValueError):            # context values missing
        MatrixFactorization(2, context=True).value([torch.zeros(2, 1, 3)] * 2 + [torch.zeros(2, 4, 1)])
    with pytest.raises(ValueError):            # values of the wrong shape
        LinearSignal().value([torch.zeros(2, 3, 1)], [torch.zeros(2, 2)])


# --- property-based ------------------------------------------------------------------------------------

@st.composite
def signal_and_shapes(draw):
    kind = draw(st.sampled_from(["linear", "fm", "mf", "cp"]))
    if kind == "linear":
        signal = LinearSignal()
        features = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))
    elif kind == "fm":
        order = draw(st.integers(1, 4))
        factors = draw(st.lists(st.integers(1, 3), min_size=order - 1, max_size=order - 1))
        linear = True if order == 1 else draw(st.booleans())
        signal = FactorizationMachine(None, order=order, factors_per_order=factors, linear=linear)
        features = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))
        if sum(features) == 0:
            features[0] = 1
    else:
        a = draw(st.integers(1, 4))
        biases, context = draw(st.booleans()), draw(st.booleans())
        order = 2 if kind == "mf" else draw(st.integers(2, 5))
        signal = (MatrixFactorization(a, biases=biases, context=context) if kind == "mf"
                  else CPFactorization(a, order=order, biases=biases, context=context))
        features = [1] * order + ([draw(st.integers(0, 3))] if context else [])
    B = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.floats(0.1, 2.0))
    with_bias = draw(st.booleans())
    return signal, features, B, seed, scale, with_bias


@settings(max_examples=25, deadline=None)
@given(signal_and_shapes())
def test_property_gradients_match_autograd(case):
    signal, features, B, seed, scale, with_bias = case
    params, values, bias = make_inputs(signal, features, (B,), seed=seed, with_bias=with_bias, scale=scale)
    assert_matches_autograd(signal, params, values, bias, rtol=1e-9, atol=1e-9)
