"""Replay-buffer SGD/Adam baselines (skfilter.baselines): scikit-learn checks and behaviour."""

import numpy as np
import pytest

pytest.importorskip("skorch")

import torch  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

from skfilter import EKFRegressor, FilterStepError, LoFiRegressor  # noqa: E402
from skfilter.baselines import ReplaySGDClassifier, ReplaySGDRegressor  # noqa: E402
from skfilter.model_selection import prequential_predict  # noqa: E402
from skfilter.models import make_mlp  # noqa: E402


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One torch thread: these tiny steps only lose time to thread synchronisation on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


#: check name -> reason (none: every scikit-learn check passes)
EXPECTED_FAILED_CHECKS: dict = {}


def _estimators():
    small = dict(hidden_layer_sizes=(10,), random_state=0)
    return [
        # the defaults (ReplaySGDRegressor(), ReplaySGDClassifier()) are checked with every public
        # estimator's in tests/test_sklearn_compat.py: the checks' partial_fit data (make_blobs,
        # |x| ~ 10) made plain SGD at lr=0.01 diverge, so the default optimiser is Adam
        ReplaySGDRegressor(optimizer="adam", lr=0.01, n_epochs=3, shuffle=True, **small),
        ReplaySGDRegressor(buffer_size=1, optimizer="adam", lr=0.01, **small),
        ReplaySGDClassifier(optimizer="adam", lr=0.01, n_epochs=3, shuffle=True, **small),
    ]


@parametrize_with_checks(_estimators(), expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def _data(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    return X, y


def test_buffer_is_fifo_of_the_last_rows():
    X, y = _data(23)
    reg = ReplaySGDRegressor(hidden_layer_sizes=(5,), buffer_size=5, random_state=0)
    reg.partial_fit(X[:3], y[:3])
    np.testing.assert_array_equal(reg.buffer_X_, X[:3])  # not yet full: all rows, oldest first
    reg.partial_fit(X[3:23], y[3:23])
    np.testing.assert_array_equal(reg.buffer_X_, X[18:23])  # full: the last five, oldest first
    assert reg.n_samples_seen_ == 23


def _flat(module):
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def test_each_row_is_one_step_on_the_mean_loss_of_the_buffer():
    """B = 3, SGD: after each row, one step on the mean squared error of the last three rows."""
    X, y = _data(7)
    lr, B = 0.05, 3
    reg = ReplaySGDRegressor(hidden_layer_sizes=(4,), buffer_size=B, optimizer="sgd", lr=lr,
                             random_state=1).fit(X, y)
    seed = np.random.RandomState(1).randint(0, 2**31 - 1)
    net = make_mlp(3, (4,), 1, "relu", seed)
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    Xt, yt = torch.tensor(X), torch.tensor(y).reshape(-1, 1)
    for t in range(len(y)):
        lo = max(0, t + 1 - B)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(Xt[lo:t + 1]), yt[lo:t + 1]).backward()
        opt.step()
    torch.testing.assert_close(_flat(reg.module_), _flat(net))


def test_buffer_of_one_is_online_gradient_descent_by_hand():
    """B = 1: θ ← θ − lr ∇(h(θ, x_t) − y_t)², computed with torch.autograd for three rows."""
    X, y = _data(3)
    lr = 0.1
    reg = ReplaySGDRegressor(hidden_layer_sizes=(6,), buffer_size=1, optimizer="sgd", lr=lr,
                             random_state=3).fit(X, y)
    seed = np.random.RandomState(3).randint(0, 2**31 - 1)
    net = make_mlp(3, (6,), 1, "relu", seed)
    params = [p.detach().clone().requires_grad_(True) for p in net.parameters()]
    W1, b1, W2, b2 = params
    for t in range(3):
        x = torch.tensor(X[t])
        out = W2 @ torch.relu(W1 @ x + b1) + b2
        loss = ((out - y[t]) ** 2).sum()
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            params = [(p - lr * g).requires_grad_(True) for p, g in zip(params, grads)]
        W1, b1, W2, b2 = params
    torch.testing.assert_close(_flat(reg.module_), torch.cat([p.detach().reshape(-1) for p in params]))


def test_same_initial_weights_as_the_filters():
    X, y = _data(5)
    reg = ReplaySGDRegressor(random_state=7, lr=1e-12).fit(X[:1], y[:1])
    for flt in (LoFiRegressor(random_state=7), EKFRegressor(covariance="fd", random_state=7)):
        prior = flt.fit(X[:1], y[:1]).posterior_  # one row barely moves the mean... use the module init
        net = make_mlp(3, (50,), 1, "relu", np.random.RandomState(7).randint(0, 2**31 - 1))
        torch.testing.assert_close(_flat(reg.module_), _flat(net), atol=1e-9, rtol=0)
        assert prior.mean.shape == _flat(net).shape


def test_reproducible_with_random_state_and_partial_fit_continues():
    X, y = _data(60)
    a = ReplaySGDRegressor(hidden_layer_sizes=(8,), optimizer="adam", lr=0.01, n_epochs=3, shuffle=True,
                           random_state=0).fit(X, y)
    b = clone(a).fit(X, y)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    c = clone(a).set_params(random_state=1).fit(X, y)
    assert not np.allclose(a.predict(X), c.predict(X))
    # fit on all rows == partial_fit in two pieces (one pass, no shuffle)
    one = ReplaySGDRegressor(hidden_layer_sizes=(8,), optimizer="adam", lr=0.01, random_state=0).fit(X, y)
    two = ReplaySGDRegressor(hidden_layer_sizes=(8,), optimizer="adam", lr=0.01, random_state=0)
    two.partial_fit(X[:25], y[:25]).partial_fit(X[25:], y[25:])
    np.testing.assert_allclose(one.predict(X), two.predict(X), rtol=0, atol=1e-12)


def test_n_inner_steps_and_optimizer_kwargs():
    X, y = _data(30)
    base = dict(hidden_layer_sizes=(8,), optimizer="sgd", lr=0.01, random_state=0)
    one = ReplaySGDRegressor(**base).fit(X, y)
    three = ReplaySGDRegressor(n_inner=3, **base).fit(X, y)
    mom = ReplaySGDRegressor(optimizer__momentum=0.9, **base).fit(X, y)
    assert mom.get_params()["optimizer__momentum"] == 0.9
    assert mom.net_.optimizer_.param_groups[0]["momentum"] == 0.9
    assert three.net_.optimizer_.param_groups[0]["lr"] == 0.01
    errs = [np.mean((m.predict(X) - y) ** 2) for m in (one, three)]
    assert errs[1] < errs[0]  # three steps per row fit the stream better than one
    assert clone(mom).get_params()["optimizer__momentum"] == 0.9
    with pytest.raises(TypeError, match="unexpected keyword"):
        ReplaySGDRegressor(bogus=1).fit(X, y)
    with pytest.raises(ValueError, match="optimizer"):
        ReplaySGDRegressor(optimizer="lbfgsx").fit(X, y)


def test_prequential_predictions_and_plugin_std():
    X, y = _data(50)
    reg = ReplaySGDRegressor(hidden_layer_sizes=(8,), lr=0.02, random_state=0)
    mean, std = prequential_predict(reg, X, y, return_std=True)
    assert mean.shape == std.shape == (50,)
    assert std[0] == 1.0  # nothing seen yet
    # the first prediction is the initial network's; the noise variance is the mean squared error
    init = make_mlp(3, (8,), 1, "relu", np.random.RandomState(0).randint(0, 2**31 - 1))
    np.testing.assert_allclose(mean[0], init(torch.tensor(X[:1])).item())
    np.testing.assert_allclose(reg.noise_variance_, [np.mean((y - mean) ** 2)])
    np.testing.assert_allclose(std[1:], np.sqrt(np.cumsum((y - mean) ** 2)[:-1] / np.arange(1, 50)))
    m, s = reg.predict(X[:4], return_std=True)
    np.testing.assert_allclose(s, np.sqrt(reg.noise_variance_[0]))


def test_divergence_raises_and_keeps_the_last_good_weights():
    X, y = _data(40)
    reg = ReplaySGDRegressor(hidden_layer_sizes=(8,), lr=0.01, random_state=0).fit(X[:10], y[:10])
    before = _flat(reg.module_).clone()
    reg.set_params(lr=1e200)
    with pytest.raises(FilterStepError, match="non-finite"):
        reg.partial_fit(X[10:] * 1e100, y[10:] * 1e100)
    # the first row's step overflows: it is undone and the weights of the first ten rows kept
    assert reg.n_samples_seen_ == 10
    torch.testing.assert_close(_flat(reg.module_), before)
    np.testing.assert_array_equal(reg.buffer_X_, X[:10])
    reg.set_params(lr=0.01).partial_fit(X[10:], y[10:])  # and learning goes on
    assert reg.n_samples_seen_ == 40 and torch.isfinite(_flat(reg.module_)).all()


def test_defaults_learn_unstandardised_blobs_without_diverging():
    """Default-constructed baselines on the data of scikit-learn's partial_fit checks (make_blobs,
    inputs of magnitude ~10), where plain SGD with lr=0.01 overflowed within ten rows."""
    from sklearn.datasets import make_blobs

    X, y = make_blobs(n_samples=50, random_state=1)
    assert ReplaySGDRegressor().get_params()["optimizer"] == "adam"
    for seed in range(3):
        reg = ReplaySGDRegressor(random_state=seed).partial_fit(X, y)
        assert np.all(np.isfinite(reg.predict(X)))
        clf = ReplaySGDClassifier(random_state=seed).partial_fit(X, y, classes=np.unique(y))
        assert np.all(np.isfinite(clf.predict_proba(X)))
    with pytest.raises(FilterStepError, match="non-finite"):  # the old default, for the record
        ReplaySGDRegressor(optimizer="sgd", lr=0.01, random_state=0).partial_fit(X, y)


def test_bad_input_leaves_fitted_estimator_unchanged():
    X, y = _data(20)
    reg = ReplaySGDRegressor(hidden_layer_sizes=(5,), random_state=0).fit(X, y)
    before = _flat(reg.module_).clone()
    with pytest.raises(ValueError):
        reg.partial_fit(X[:, :2], y)
    torch.testing.assert_close(_flat(reg.module_), before)
    assert reg.n_features_in_ == 3


def test_classifier_binary_and_multiclass():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    y2 = np.where(X[:, 0] > 0, "a", "b")
    clf = ReplaySGDClassifier(hidden_layer_sizes=(8,), optimizer="adam", lr=0.02, random_state=0).fit(X, y2)
    assert clf.net_.module_[-1].out_features == 1 and clf.score(X, y2) > 0.9
    y3 = np.digitize(X[:, 0], [-0.5, 0.5])
    clf3 = ReplaySGDClassifier(hidden_layer_sizes=(8,), optimizer="adam", lr=0.02, n_epochs=3,
                               random_state=0).fit(X, y3)
    P = clf3.predict_proba(X)
    assert P.shape == (200, 3) and np.allclose(P.sum(1), 1)
    assert clf3.score(X, y3) > 0.8
    with pytest.raises(ValueError, match="classes must be passed"):
        ReplaySGDClassifier().partial_fit(X, y3)


def test_classifier_prequential_probabilities():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] > 0).astype(int)
    clf = ReplaySGDClassifier(hidden_layer_sizes=(5,), optimizer="adam", lr=0.05, random_state=0)
    P = prequential_predict(clf, X, y, method="predict_proba")
    assert P.shape == (60, 2) and np.allclose(P.sum(1), 1)
    labels = prequential_predict(clone(clf), X, y)
    np.testing.assert_array_equal(labels, clf.classes_[P.argmax(1)])
    with pytest.raises(ValueError, match="return_std"):
        prequential_predict(clone(clf), X, y, return_std=True)


def test_docstring_examples_run():
    import doctest

    import skfilter.baselines as mod

    res = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.attempted > 0 and res.failed == 0
