"""skorch and skfilter (issue 19): a skorch-trained ``net.module_`` seeds a filter as its prior
mean (examples/plot_skorch_prior.py), and the papers' gradient baselines run on skorch — online
gradient descent (``buffer_size=1``, tested by hand in test_baselines.py), replay-buffer SGD (by
hand there too) and replay-buffer Adam (by hand here)."""

import numpy as np
import pytest

skorch = pytest.importorskip("skorch", reason="skorch not installed (the baselines and dev extras install it)")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from skfilter import EKFRegressor, LoFiRegressor  # noqa: E402
from skfilter.baselines import ReplaySGDClassifier, ReplaySGDRegressor  # noqa: E402
from skfilter.model_selection import prequential_predict  # noqa: E402
from skfilter.models import make_mlp  # noqa: E402


@pytest.fixture(autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _data(n=120, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    return X, y


def _skorch_net(X, y):
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(X.shape[1], 16), nn.Tanh(), nn.Linear(16, 1))
    net = skorch.NeuralNetRegressor(module, max_epochs=60, lr=0.02, optimizer=torch.optim.Adam, batch_size=40,
                                    train_split=None, verbose=0)
    return net.fit(X.astype(np.float32), y.astype(np.float32)[:, None])


def _state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


# obs_variance fixed (0.01, the data's noise variance): a prior that uses no data, so that row 0 is
# predicted from the prior itself. (With obs_variance='auto' the first noise estimate is set from the
# stream's first rows, and prequential_predict gives nan for row 0, which no rows precede: issue 29.)
@pytest.mark.parametrize("make_filter", [
    lambda module: LoFiRegressor(module=module, rank=5, prior_variance=1e-3, obs_variance=0.01, random_state=0),
    lambda module: EKFRegressor(module=module, prior_variance=1e-3, obs_variance=0.01, random_state=0),
], ids=["lofi", "ekf"])
def test_skorch_module_is_the_prior_mean_and_is_left_untouched(make_filter):
    X, y = _data()
    net = _skorch_net(X[:80], y[:80])
    before = _state(net.module_)
    est = make_filter(net.module_)
    mean, std = prequential_predict(est, X[80:], y[80:], return_std=True)
    # the first one-step-ahead prediction is the skorch net's own (float32 weights, float64 filter)
    np.testing.assert_allclose(mean[0], net.predict(X[80:81].astype(np.float32))[0, 0], rtol=1e-5)
    assert std[0] > 0
    for key, value in _state(net.module_).items():  # copied, never modified
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)
    assert est.module_ is not net.module_
    # and the filter did learn: its weights moved from the skorch net's
    moved = [not torch.allclose(p.detach().double(), q.double())
             for p, q in zip(est.module_.parameters(), net.module_.parameters())]
    assert any(moved)


def test_seeded_filter_beats_the_frozen_net_and_a_random_prior_after_a_shift():
    X, y = _data(n=400)
    net = _skorch_net(X[:150], y[:150])
    y_shift = y[150:] + 0.3 * X[150:, 2]  # the world changes after the training rows
    frozen = net.predict(X[150:].astype(np.float32))[:, 0]
    seeded = prequential_predict(LoFiRegressor(module=net.module_, rank=5, prior_variance=1e-2, random_state=0),
                                 X[150:], y_shift)
    scratch = prequential_predict(LoFiRegressor(hidden_layer_sizes=(16,), activation="tanh", rank=5,
                                                random_state=0), X[150:], y_shift)
    # the filters' priors use data ('auto' noise; the default network's 'auto' prior): row 0, which no
    # rows precede, is nan (issue 29); every method is scored on the rows all of them predict
    rows = np.isfinite(seeded) & np.isfinite(scratch)
    assert not rows[0] and rows[1:].all()
    rmse = {name: np.sqrt(np.mean((pred[rows] - y_shift[rows]) ** 2)) for name, pred in
            [("frozen", frozen), ("seeded", seeded), ("scratch", scratch)]}
    # (0.16 against 0.35 and 0.25 here)
    assert rmse["seeded"] < 0.8 * rmse["frozen"] and rmse["seeded"] < 0.8 * rmse["scratch"], rmse


def test_replay_adam_is_torch_adam_on_the_mean_loss_of_the_buffer_by_hand():
    """B = 3, Adam: after each row, one Adam step on the mean squared error of the last three rows."""
    X, y = _data(9)
    lr, B = 0.02, 3
    reg = ReplaySGDRegressor(hidden_layer_sizes=(4,), buffer_size=B, optimizer="adam", lr=lr,
                             random_state=1).fit(X, y)
    assert isinstance(reg.net_, skorch.NeuralNetRegressor)  # the training machinery is skorch's
    assert isinstance(reg.net_.optimizer_, torch.optim.Adam)
    seed = np.random.RandomState(1).randint(0, 2**31 - 1)
    net = make_mlp(3, (4,), 1, "relu", seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    Xt, yt = torch.tensor(X), torch.tensor(y).reshape(-1, 1)
    for t in range(len(y)):
        lo = max(0, t + 1 - B)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(Xt[lo:t + 1]), yt[lo:t + 1]).backward()
        opt.step()
    flat = [torch.cat([p.detach().reshape(-1) for p in m.parameters()]) for m in (reg.module_, net)]
    torch.testing.assert_close(flat[0], flat[1])


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_baselines_run_on_skorch_nets(optimizer):
    X, y = _data(60)
    reg = ReplaySGDRegressor(hidden_layer_sizes=(8,), buffer_size=1, optimizer=optimizer, lr=0.01,
                             random_state=0).fit(X, y)
    clf = ReplaySGDClassifier(hidden_layer_sizes=(8,), buffer_size=10, optimizer=optimizer, lr=0.05,
                              random_state=0).fit(X, y > 0)
    assert isinstance(reg.net_, skorch.NeuralNetRegressor)
    assert isinstance(clf.net_, skorch.NeuralNet)
    assert np.isfinite(reg.predict(X)).all() and set(clf.predict(X)) <= {False, True}
