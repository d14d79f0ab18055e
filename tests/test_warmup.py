"""Tests of skfilter.warmup: the subspace EKF's warm-up phase (thesis Alg. 13, corrected)."""

import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.utils._param_validation import InvalidParameterError

from skfilter.models import make_adapter
from skfilter.warmup import SubspaceWarmup, top_right_singular_vectors

DTYPE = torch.float64


def make_net(n_in=2, hidden=6, n_out=1, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(n_in, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, n_out)).to(DTYPE)


def regression_data(n=48, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, 2))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.05 * rng.normal(size=n)
    return X, y


def n_learned(net):
    return sum(p.numel() for p in net.parameters() if p.requires_grad)


def fitted_attributes(est):
    return [k for k in vars(est) if k.endswith("_") and not k.startswith("_")]


def fit(net=None, X=None, y=None, loss="mse", parameters=None, **params):
    """A small warm-up on the regression data (settings overridable)."""
    X0, y0 = regression_data()
    params = {"n_components": 3, "n_epochs": 6, "batch_size": 16, "random_state": 0, **params}
    return SubspaceWarmup(**params).fit(X0 if X is None else X, y0 if y is None else y,
                                        module=make_net() if net is None else net, loss=loss,
                                        parameters=parameters)


# -- the SVD step -------------------------------------------------------------------------------------
@pytest.mark.parametrize("center", [False, True])
def test_top_right_singular_vectors_matches_numpy(center):
    rng = np.random.RandomState(1)
    M = rng.normal(size=(7, 20)) + 3.0
    A, s, ratio = top_right_singular_vectors(torch.as_tensor(M), 4, center=center)
    Mc = M - M.mean(axis=0) if center else M
    _, s_np, vt = np.linalg.svd(Mc, full_matrices=False)
    np.testing.assert_allclose(s.numpy(), s_np[:4], rtol=1e-10)
    np.testing.assert_allclose(ratio.numpy(), s_np[:4] ** 2 / np.sum(s_np ** 2), rtol=1e-10)
    for j in range(4):  # equal up to sign; the sign makes the largest-|.| entry positive
        v = vt[j] * np.sign(vt[j][np.argmax(np.abs(vt[j]))])
        np.testing.assert_allclose(A[:, j].numpy(), v, atol=1e-10)
        assert A[np.argmax(np.abs(A[:, j].numpy())), j] > 0
    np.testing.assert_allclose((A.T @ A).numpy(), np.eye(4), atol=1e-10)


def test_top_right_singular_vectors_rank_bound():
    M = torch.randn(3, 10, dtype=DTYPE)
    top_right_singular_vectors(M, 3)
    with pytest.raises(ValueError, match="n_iterates=3"):
        top_right_singular_vectors(M, 4)
    with pytest.raises(ValueError, match="= 2"):
        top_right_singular_vectors(M, 3, center=True)


# -- basic properties -----------------------------------------------------------------------------
def test_orthonormal_columns_and_shapes():
    net = make_net()
    w = fit(net)
    D = n_learned(net)
    A = w.components_
    assert A.shape == (D, 3) and A.dtype == DTYPE
    torch.testing.assert_close(A.T @ A, torch.eye(3, dtype=DTYPE), atol=1e-10, rtol=0)
    assert w.offset_.shape == (D,)
    assert torch.equal(w.positions_, torch.arange(D))
    assert w.parameter_names_ == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert w.n_iterates_ == 6 and len(w.loss_curve_) == 6
    assert all(isinstance(v, float) for v in w.loss_curve_)
    assert w.n_features_in_ == 2
    assert w.singular_values_.shape == (3,) and torch.all(w.singular_values_[:-1] >= w.singular_values_[1:])
    assert not hasattr(w, "iterates_")


def test_flat_order_matches_module_adapter():
    net = make_net()
    w = fit(net)
    adapter = make_adapter(w.module_, torch.device("cpu"), DTYPE, 2)
    torch.testing.assert_close(adapter.initial_theta(), w.offset_, atol=0, rtol=0)
    # and θ^(0) of the untouched module in the same order
    w0 = SubspaceWarmup(n_components=2, method="random", n_epochs=0, random_state=0).fit(
        *regression_data(), module=net)
    torch.testing.assert_close(w0.offset_, make_adapter(net, torch.device("cpu"), DTYPE, 2).initial_theta())


def test_offset_is_in_module_and_module_not_modified():
    net = make_net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    net.train()
    w = fit(net)
    assert net.training  # mode untouched
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k])
    assert not w.module_.training
    theta_module = torch.cat([p.detach().reshape(-1) for p in w.module_.parameters()])
    assert torch.equal(theta_module, w.offset_)
    assert not torch.equal(w.offset_, torch.cat([v.reshape(-1) for v in before.values()]))


def test_inverse_transform_and_transform():
    w = fit()
    d = 3
    torch.testing.assert_close(w.inverse_transform(torch.zeros(d, dtype=DTYPE)), w.offset_, atol=0, rtol=0)
    z = torch.randn(5, d, dtype=DTYPE)
    theta = w.inverse_transform(z)
    assert theta.shape == (5, len(w.offset_))
    torch.testing.assert_close(w.transform(theta), z, atol=1e-12, rtol=0)
    torch.testing.assert_close(w.transform(w.offset_), torch.zeros(d, dtype=DTYPE), atol=0, rtol=0)
    # θ* + A z for a 1-d z; the first k columns for a shorter z
    torch.testing.assert_close(w.inverse_transform(z[0]), w.offset_ + w.components_ @ z[0])
    torch.testing.assert_close(w.inverse_transform(z[0, :2]), w.offset_ + w.components_[:, :2] @ z[0, :2])
    torch.testing.assert_close(w.transform(theta, n_components=2), z[:, :2], atol=1e-12, rtol=0)
    with pytest.raises(ValueError):
        w.inverse_transform(torch.zeros(d + 1, dtype=DTYPE))
    with pytest.raises(ValueError):
        w.transform(torch.zeros(3, dtype=DTYPE))


# -- stored iterates ----------------------------------------------------------------------------------
@pytest.mark.parametrize("store, skip, stride, expected", [
    ("epoch", 2, 3, 3),   # epochs 3, 6, 9
    ("epoch", 0, 1, 10),
    ("epoch", 0, 3, 3),   # ⌊E/k⌋ for skip 0
    ("epoch", 6, 3, 2),   # ⌊(E − n)/k⌋ + 1 = ⌊4/3⌋ + 1
    ("epoch", 11, 1, 0),
    ("step", 2, 3, 13),   # 4 batches × 10 epochs = 40 steps: 3, 6, …, 39
    ("step", 10, 5, 7),   # 10, 15, …, 40
])
def test_number_of_stored_iterates(store, skip, stride, expected):
    X, y = regression_data(n=40)
    params = dict(n_epochs=10, batch_size=10, skip=skip, stride=stride, store=store, random_state=0)
    if expected == 0:
        with pytest.raises(ValueError, match="0 iterate"):
            SubspaceWarmup(n_components=1, **params).fit(X, y, module=make_net())
        return
    w = SubspaceWarmup(n_components=1, **params).fit(X, y, module=make_net())
    assert w.n_iterates_ == expected
    with pytest.raises(ValueError, match=f"{expected} iterate"):
        SubspaceWarmup(n_components=expected + 1, **params).fit(X, y, module=make_net())


def test_too_many_components_message_and_no_training():
    w = SubspaceWarmup(n_components=4, n_epochs=3, random_state=0)
    with pytest.raises(ValueError, match=r"3 iterate\(s\) stored.*more epochs.*stride.*store='step'"):
        w.fit(*regression_data(), module=make_net())
    assert fitted_attributes(w) == []
    with pytest.raises(ValueError, match="minus 1 for centring"):
        SubspaceWarmup(n_components=3, n_epochs=3, center=True, random_state=0).fit(
            *regression_data(), module=make_net())


def test_too_many_components_for_projected_parameters():
    net = make_net()  # last layer: 6 weights + 1 bias
    with pytest.raises(ValueError, match="projected parameters"):
        SubspaceWarmup(n_components=2, n_epochs=10, random_state=0).fit(
            *regression_data(), module=net, parameters=["2.bias"])
    with pytest.raises(ValueError, match="projected parameters"):
        SubspaceWarmup(n_components=n_learned(net) + 1, method="random", n_epochs=0).fit(
            *regression_data(), module=net)


def test_full_rank_subspace_contains_every_stored_iterate():
    # un-centred SVD with d = Ê: the span of A holds every stored iterate, θ* (the last one) included
    X, y = regression_data(n=12)
    w = SubspaceWarmup(n_components=6, n_epochs=2, batch_size=4, store="step", random_state=0).fit(
        X, y, module=make_net())
    assert w.n_iterates_ == 6
    A, theta = w.components_, w.offset_
    torch.testing.assert_close(A @ (A.T @ theta), theta, atol=1e-10, rtol=0)
    # but with fewer components θ* is generally not exactly in the span
    A2 = A[:, :2]
    assert torch.linalg.norm(A2 @ (A2.T @ theta) - theta) > 1e-6


@pytest.mark.parametrize("store", ["epoch", "step"])
def test_fit_takes_the_svd_of_the_stored_iterates(store, monkeypatch):
    # record the matrix fit hands to the SVD step; check it against θ* and an independent NumPy SVD
    import skfilter.warmup as warmup_module
    seen = []

    def recording(iterates, n_components, center=False):
        seen.append(iterates.clone())
        return top_right_singular_vectors(iterates, n_components, center)

    monkeypatch.setattr(warmup_module, "top_right_singular_vectors", recording)
    w = fit(parameters=["0.weight", "0.bias"], store=store, stride=2, n_components=3)
    (E_mat,) = seen
    assert E_mat.shape == (w.n_iterates_, len(w.positions_))
    assert w.n_iterates_ == (3 if store == "epoch" else 9)  # 6 epochs × 3 batches of 16 rows
    torch.testing.assert_close(E_mat[-1], w.offset_[w.positions_], atol=0, rtol=0)  # the last one stored
    assert torch.unique(E_mat, dim=0).shape[0] == w.n_iterates_  # distinct iterates
    _, s_np, vt = np.linalg.svd(E_mat.numpy(), full_matrices=False)
    np.testing.assert_allclose(w.singular_values_.numpy(), s_np[:3], rtol=1e-10)
    np.testing.assert_allclose(np.abs(vt[:3] @ w.components_.numpy()), np.eye(3), atol=1e-10)


def test_centered_svd_differs_from_raw():
    raw = fit(n_components=2)
    centered = fit(n_components=2, center=True)
    torch.testing.assert_close(raw.offset_, centered.offset_, atol=0, rtol=0)  # same training
    assert not torch.allclose(raw.components_, centered.components_)
    torch.testing.assert_close(centered.components_.T @ centered.components_, torch.eye(2, dtype=DTYPE),
                               atol=1e-10, rtol=0)


def test_prefix_property():
    big, small = fit(n_components=5), fit(n_components=2)
    torch.testing.assert_close(big.components_[:, :2], small.components_, atol=1e-12, rtol=0)
    big, small = fit(n_components=5, method="random"), fit(n_components=2, method="random")
    torch.testing.assert_close(big.components_[:, :2], small.components_, atol=1e-12, rtol=0)


# -- parameters= -------------------------------------------------------------------------------------
def test_parameters_restrict_positions_and_all_are_trained():
    net = make_net()
    hidden = ["0.weight", "0.bias"]
    w = fit(net, parameters=hidden)
    D_hidden = 2 * 6 + 6
    assert torch.equal(w.positions_, torch.arange(D_hidden))
    assert w.parameter_names_ == hidden
    assert w.components_.shape == (D_hidden, 3)
    torch.testing.assert_close(w.components_.T @ w.components_, torch.eye(3, dtype=DTYPE), atol=1e-10, rtol=0)
    theta0 = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    assert not torch.allclose(w.offset_[D_hidden:], theta0[D_hidden:])  # the last layer trained too
    assert not torch.allclose(w.offset_[:D_hidden], theta0[:D_hidden])
    # the unprojected coordinates are untouched by inverse_transform
    theta = w.inverse_transform(torch.ones(3, dtype=DTYPE))
    assert torch.equal(theta[D_hidden:], w.offset_[D_hidden:])
    # the same training as the full projection
    torch.testing.assert_close(w.offset_, fit(net).offset_, atol=0, rtol=0)


def test_parameters_in_module_order_and_non_contiguous():
    w = fit(parameters=["2.bias", "0.weight"])
    assert w.parameter_names_ == ["0.weight", "2.bias"]
    assert w.positions_.tolist() == list(range(12)) + [24]


def test_frozen_parameters_not_in_theta():
    net = make_net()
    net[0].bias.requires_grad_(False)
    bias0 = net[0].bias.detach().clone()
    w = fit(net)
    assert len(w.offset_) == n_learned(net) == 12 + 6 + 1
    assert torch.equal(w.module_[0].bias, bias0)
    torch.testing.assert_close(w.offset_, make_adapter(w.module_, torch.device("cpu"), DTYPE, 2).initial_theta())
    with pytest.raises(ValueError, match="Unknown parameter"):
        fit(net, parameters=["0.bias"])


# -- random projections --------------------------------------------------------------------------------
def test_random_method_orthonormal_and_seeded():
    X, y = regression_data()
    a = SubspaceWarmup(n_components=4, method="random", n_epochs=0, random_state=3).fit(X, y, module=make_net())
    b = SubspaceWarmup(n_components=4, method="random", n_epochs=0, random_state=3).fit(X, y, module=make_net())
    c = SubspaceWarmup(n_components=4, method="random", n_epochs=0, random_state=4).fit(X, y, module=make_net())
    torch.testing.assert_close(a.components_.T @ a.components_, torch.eye(4, dtype=DTYPE), atol=1e-10, rtol=0)
    assert torch.equal(a.components_, b.components_)
    assert not torch.allclose(a.components_, c.components_)
    assert a.singular_values_ is None and a.n_iterates_ == 0 and a.loss_curve_ == []
    theta0 = torch.cat([p.detach().reshape(-1) for p in make_net().parameters()])
    assert torch.equal(a.offset_, theta0)
    # with training: θ* is the last iterate, as for the SVD
    trained = fit(method="random", n_components=4)
    torch.testing.assert_close(trained.offset_, fit().offset_, atol=0, rtol=0)


# -- determinism, persistence, clone ------------------------------------------------------------------
def test_deterministic_given_random_state():
    a, b = fit(), fit()
    for name in ["components_", "singular_values_", "offset_"]:
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert a.loss_curve_ == b.loss_curve_
    c = fit(random_state=1)
    assert not torch.equal(a.offset_, c.offset_)


def test_pickle_round_trip_and_clone():
    w = fit()
    back = pickle.loads(pickle.dumps(w))
    for name in ["components_", "singular_values_", "offset_", "positions_"]:
        assert torch.equal(getattr(back, name), getattr(w, name))
    assert back.loss_curve_ == w.loss_curve_ and back.parameter_names_ == w.parameter_names_
    x = torch.randn(3, 2, dtype=DTYPE)
    assert torch.equal(back.module_(x), w.module_(x))
    # a fitted warm-up clones fitted (it is the filters' data: __sklearn_clone__); an unfitted one
    # as parameters only; refitting the parameters gives the same subspace
    kept = clone(w)
    assert kept is not w and torch.equal(kept.components_, w.components_)
    fresh = clone(SubspaceWarmup(**w.get_params()))
    assert fresh.get_params() == w.get_params() and fitted_attributes(fresh) == []
    refit = fresh.fit(*regression_data(), module=make_net())
    assert torch.equal(refit.components_, w.components_)


def test_tensor_inputs():
    X, y = regression_data()
    w = fit(X=torch.as_tensor(X, dtype=torch.float32), y=torch.as_tensor(y))
    torch.testing.assert_close(w.offset_, fit().offset_, atol=1e-6, rtol=0)
    assert w.offset_.dtype == DTYPE


# -- losses ------------------------------------------------------------------------------------------
def _classification(n=60, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, 2))
    return X, (X[:, 0] + X[:, 1] > 0).astype(int), rng


@pytest.mark.parametrize("loss", ["mse", "mse-2d", "cross-entropy", "binary-cross-entropy", "poisson", "callable"])
def test_losses_train(loss):
    X, labels, rng = _classification()
    n_out = 1
    if loss == "mse":
        y = X[:, 0] - 2 * X[:, 1]
    elif loss == "mse-2d":
        y, n_out, loss = np.c_[X[:, 0], -X[:, 1]], 2, "mse"
    elif loss == "cross-entropy":
        y, n_out = labels, 2
    elif loss == "binary-cross-entropy":
        y = labels.astype(float)
    elif loss == "poisson":
        y = rng.poisson(np.exp(0.8 * X[:, 0])).astype(float)
    else:
        y, loss = X[:, 0] - 2 * X[:, 1], (lambda out, target: (out.reshape(-1) - target).abs().mean())
    w = SubspaceWarmup(n_components=2, n_epochs=15, batch_size=16, learning_rate=0.05, random_state=0)
    w.fit(X, y, module=make_net(n_out=n_out), loss=loss)
    assert len(w.loss_curve_) == 15 and w.loss_curve_[-1] < w.loss_curve_[0]


def test_loss_shape_mismatch_raises_before_training():
    X, labels, _ = _classification()
    with pytest.raises(ValueError, match="column"):
        fit(X=X, y=np.c_[labels, labels].astype(float), net=make_net(n_out=1))
    with pytest.raises(ValueError, match="class index 2"):
        SubspaceWarmup(n_components=1, n_epochs=2).fit(X, labels + 1, module=make_net(n_out=2), loss="cross-entropy")
    late_bad = labels.copy()
    late_bad[-1] = 5  # outside the first batch: still caught before training
    with pytest.raises(ValueError, match="class index 5"):
        SubspaceWarmup(n_components=1, n_epochs=2, batch_size=8).fit(X, late_bad, module=make_net(n_out=2),
                                                                      loss="cross-entropy")
    with pytest.raises(ValueError, match="could not be evaluated"):
        fit(net=make_net(n_in=3))  # X has 2 columns
    with pytest.raises(ValueError, match="one logit"):
        SubspaceWarmup(n_components=1, n_epochs=2).fit(X, labels, module=make_net(n_out=2),
                                                       loss="binary-cross-entropy")
    with pytest.raises(ValueError, match="loss must be"):
        fit(loss="hinge")


# -- bad inputs and divergence -----------------------------------------------------------------------
def _bad_cases():
    X, y = regression_data()
    X_nan = X.copy()
    X_nan[3, 1] = np.nan
    y_inf = y.copy()
    y_inf[0] = np.inf
    return {
        "nan in X": (dict(), dict(X=X_nan)),
        "inf in y": (dict(), dict(y=y_inf)),
        "mismatched lengths": (dict(), dict(y=y[:-1])),
        "empty X": (dict(), dict(X=X[:0], y=y[:0])),
        "1-d X": (dict(), dict(X=X[:, 0])),
        "unknown parameter": (dict(), dict(parameters=["3.weight"])),
        "empty parameters": (dict(), dict(parameters=[])),
        "n_epochs 0 with svd": (dict(n_epochs=0), dict()),
        "negative learning rate": (dict(learning_rate=-1.0), dict()),
        "zero stride": (dict(stride=0), dict()),
        "bad store": (dict(store="batch"), dict()),
        "bool n_components": (dict(n_components=True), dict()),
        "not a module": (dict(), dict(module="mlp")),
        "negative counts": (dict(), dict(loss="poisson", y=-np.abs(y))),
        "non-integer classes": (dict(), dict(loss="cross-entropy", y=y)),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_bad_input_raises_before_training(case, monkeypatch):
    params, fit_args = _bad_cases()[case]
    X, y = regression_data()
    args = {"X": X, "y": y, "module": make_net(), **fit_args}
    trained = []
    monkeypatch.setattr(torch.optim.Adam, "step", lambda *a, **k: trained.append(1))
    w = SubspaceWarmup(**{"n_components": 2, "n_epochs": 3, "random_state": 0, **params})
    with pytest.raises(ValueError):
        w.fit(args.pop("X"), args.pop("y"), **args)
    assert trained == [] and fitted_attributes(w) == []
    if case == "negative learning rate":
        with pytest.raises(InvalidParameterError):
            w.fit(X, y, module=make_net())


def test_divergence_raises_and_keeps_previous_fit():
    X, y = regression_data()
    w = SubspaceWarmup(n_components=2, n_epochs=3, random_state=0).fit(X, y, module=make_net())
    previous = w.components_
    nan_loss = lambda out, target: (out.reshape(-1) - target).pow(2).mean() * float("nan")  # noqa: E731
    with pytest.raises(ValueError, match="diverged.*learning_rate"):
        w.fit(X, y, module=make_net(), loss=nan_loss)
    assert w.components_ is previous
    # a learning rate that blows the weights up: finite at the start, then exp((out − y)²) overflows
    steep = lambda out, target: torch.exp((out.reshape(-1) - target).pow(2)).mean()  # noqa: E731
    fresh = SubspaceWarmup(n_components=2, n_epochs=5, learning_rate=1e6, random_state=0)
    with torch.no_grad():
        assert torch.isfinite(steep(make_net()(torch.as_tensor(X)), torch.as_tensor(y)))
    steps = []
    original_step = torch.optim.Adam.step
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.optim.Adam, "step", lambda *a, **k: (steps.append(1), original_step(*a, **k))[1])
        with pytest.raises(ValueError, match="diverged"):
            fresh.fit(X, y, module=make_net(), loss=steep)
    assert len(steps) >= 1  # it trained, then diverged
    SubspaceWarmup(n_components=2, n_epochs=5, learning_rate=1e-3, random_state=0).fit(
        X, y, module=make_net(), loss=steep)  # a small step trains fine
    assert fitted_attributes(fresh) == []


def test_batch_size_larger_than_data_is_clipped():
    X, y = regression_data(n=10)
    w = SubspaceWarmup(n_components=2, n_epochs=3, batch_size=100, store="step", random_state=0).fit(
        X, y, module=make_net())
    assert w.n_iterates_ == 3  # one step per epoch
