"""skfilter.decision: the contextual-bandit agent, per-arm heads, expected improvement and the
Bayesian-optimisation loop."""

import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate
from scipy.stats import norm
from sklearn.exceptions import NotFittedError
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import Matern
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import InvalidParameterError

from skfilter import (BOCDRegressor, EKFClassifier, EKFRegressor, LoFiClassifier, LoFiRegressor, WoLFRegressor,
                      make_partial_pipeline)
from skfilter.decision import BayesianOptimizer, ContextualBandit, PerArmHeads, expected_improvement

# -- a linear contextual bandit: arm a pays w_a · c + noise ---------------------------------------
ARM_WEIGHTS = np.array([[1.0, 0.0], [-1.0, 0.5], [0.0, -1.0]])


def _run_bandit(agent, n_steps=300, seed=0, batch=1):
    rng = np.random.default_rng(seed)
    earned, best = 0.0, 0.0
    for _ in range(n_steps // batch):
        c = rng.normal(size=(batch, 2))
        means = c @ ARM_WEIGHTS.T
        arm = agent.select(c)
        reward = means[np.arange(batch), arm] + 0.3 * rng.normal(size=batch)
        agent.update(c, arm, reward, best_reward=means.max(1))
        earned += means[np.arange(batch), arm].sum()
        best += means.max(1).sum()
    return earned, best


@pytest.mark.parametrize("policy", ["predictive", "thompson", "epsilon-greedy"])
def test_bandit_learns_linear_problem(policy):
    """Mean reward of the played arms clearly above a random agent's (0) and near the oracle's."""
    agent = ContextualBandit(EKFRegressor(hidden_layer_sizes=(), obs_variance=0.09, random_state=0), n_arms=3,
                             policy=policy, epsilon=0.05, random_state=0)
    earned, best = _run_bandit(agent)
    # the oracle earns E[max_a w_a·c] ≈ 0.9 per step; a random agent 0
    assert earned > 0.8 * best, (earned, best)
    h = agent.history_
    assert h["step"].tolist() == list(range(1, 301))
    np.testing.assert_allclose(h["cumulative_reward"], np.cumsum(h["reward"]))
    assert np.all(np.diff(h["time"]) >= 0) and np.all(np.diff(h["regret"]) > -1.5)


def test_bandit_arm_features_encoding_learns():
    """Arm-as-feature: reward = −‖c − z_a‖² with arm features z_a, one network output."""
    Z = np.array([[1.0, 1.0], [-1.0, 1.0], [0.0, -1.5]])
    rng = np.random.default_rng(1)
    agent = ContextualBandit(EKFRegressor(hidden_layer_sizes=(32,), random_state=0), n_arms=3,
                             encoding="features", arm_features=Z, random_state=0)
    regret = []
    for _ in range(600):
        c = rng.normal(size=(1, 2))
        means = -((c - Z) ** 2).sum(1)
        arm = agent.select(c)[0]
        agent.update(c, [arm], [means[arm] + 0.1 * rng.normal()])
        regret.append(means.max() - means[arm])
    random_regret = 2.9  # E[max − mean over arms] of this problem (Monte Carlo)
    assert np.mean(regret[-200:]) < 0.3 * random_regret


@pytest.mark.parametrize("encoding", ["features", "heads"])
def test_agent_seed_seeds_an_unseeded_model_and_keeps_a_seeded_one(encoding):
    """The agent's random_state seeds a model without a seed (its network too, with arm features),
    so two runs of the same agent agree; a model's own seed is kept (issue 30)."""
    rng = np.random.default_rng(0)
    contexts, noise = rng.normal(size=(30, 1, 2)), 0.1 * rng.normal(size=30)

    def run(model):
        agent = ContextualBandit(model, n_arms=3, encoding=encoding, random_state=0)
        for c, e in zip(contexts, noise):
            arm = agent.select(c)
            agent.update(c, arm, [float(c[0, 0]) * (arm[0] - 1) + e])
        return agent

    unseeded = EKFRegressor(hidden_layer_sizes=(4,))
    first, second = run(unseeded), run(unseeded)
    np.testing.assert_array_equal(first.history_["arm"], second.history_["arm"])
    arm_columns = np.eye(3)[np.zeros(5, dtype=int)] if encoding == "features" else np.zeros((5, 1))
    rows = np.c_[contexts[:5, 0, :], arm_columns]  # the model's inputs for arm 0
    np.testing.assert_array_equal(first.estimator_.predict(rows), second.estimator_.predict(rows))
    assert unseeded.random_state is None and isinstance(first.estimator_.random_state, int)
    assert run(EKFRegressor(hidden_layer_sizes=(4,), random_state=7)).estimator_.random_state == 7


def test_random_agent_regret_reference():
    """The reference regret of a uniform agent used above."""
    Z = np.array([[1.0, 1.0], [-1.0, 1.0], [0.0, -1.5]])
    c = np.random.default_rng(0).normal(size=(20000, 1, 2))
    means = -((c - Z) ** 2).sum(-1)
    assert abs(np.mean(means.max(1) - means.mean(1)) - 2.9) < 0.1


def _fitted_linear_heads(model):
    agent = ContextualBandit(model, n_arms=3, random_state=0)
    rng = np.random.default_rng(0)
    for _ in range(30):
        c = rng.normal(size=(1, 2))
        arm = agent.select(c)
        agent.update(c, arm, c @ ARM_WEIGHTS[arm].T)
    return agent


# n_prior_rows=30: the 30 rows of _fitted_linear_heads fix the data-scaled prior, so that the update
# below is learned from a fixed prior. (With the default, 50, the stream is still in its start: the
# update sets the prior again from all 31 rows, its target 5.0 moves the targets' scale and so every
# arm's predictive — by design, issue 29 — which is not what this test is about.)
@pytest.mark.parametrize("model", [EKFRegressor(hidden_layer_sizes=(), n_prior_rows=30, random_state=0),
                                   EKFRegressor(hidden_layer_sizes=(), covariance="vd", n_prior_rows=30,
                                                random_state=0),
                                   LoFiRegressor(hidden_layer_sizes=(), rank=2, n_prior_rows=30, random_state=0)],
                         ids=["full", "vd", "lofi"])
def test_update_observes_only_the_chosen_arm(model):
    """Per-arm heads with a linear body share no parameters: an update of arm 1 leaves the predictive
    of arms 0 and 2 as it was and moves arm 1's."""
    agent = _fitted_linear_heads(model)
    est = agent.estimator_
    assert not est._prior_pending  # the prior is fixed before the update below
    c = np.array([[0.3, -1.2]])
    rows = np.column_stack([np.repeat(c, 3, 0), np.arange(3)])
    mean0, std0 = est.predict(rows, return_std=True, include_noise=False)  # epistemic: the belief's
    agent.update(c, [1], [5.0])
    mean1, std1 = est.predict(rows, return_std=True, include_noise=False)
    np.testing.assert_allclose(mean1[[0, 2]], mean0[[0, 2]], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(std1[[0, 2]], std0[[0, 2]], rtol=1e-10)
    assert abs(mean1[1] - mean0[1]) > 0.1 and std1[1] < std0[1]


def test_per_arm_heads_module_selects_the_arm_output():
    import torch

    body = torch.nn.Linear(2, 4, dtype=torch.float64)
    heads = PerArmHeads(body, 4)
    X = torch.tensor(np.c_[np.random.default_rng(0).normal(size=(8, 2)), np.arange(8) % 4])
    expected = body(X[:, :2])[torch.arange(8), (torch.arange(8) % 4)]
    torch.testing.assert_close(heads(X)[:, 0], expected)
    # the Jacobian of the other heads' rows is zero (torch.func, as the filters differentiate)
    from skfilter.models import make_adapter

    adapter = make_adapter(heads, torch.device("cpu"), torch.float64, 3)
    theta = torch.cat([p.detach().reshape(-1) for p in heads.parameters()])
    _, J = adapter.forward_jacobian(theta, X[:1])  # arm 0: weight rows 1..3 and biases 1..3 untouched
    W = J[0, 0, :8].reshape(4, 2)
    b = J[0, 0, 8:]
    assert torch.all(W[1:] == 0) and torch.all(b[1:] == 0) and torch.all(b[0] == 1)


@pytest.mark.parametrize("model, policy", [
    (EKFRegressor(hidden_layer_sizes=(4,), covariance="fd", random_state=0), "thompson"),
    (WoLFRegressor(EKFRegressor(hidden_layer_sizes=(4,), random_state=0)), "predictive"),
    (BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(4,), random_state=0), n_hypotheses=3), "predictive"),
    (BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(4,), random_state=0), n_hypotheses=3), "thompson"),
    (EKFClassifier(hidden_layer_sizes=(4,), random_state=0), "predictive"),
    (LoFiClassifier(hidden_layer_sizes=(4,), random_state=0), "thompson"),
    (make_partial_pipeline(StandardScaler(), EKFRegressor(hidden_layer_sizes=(4,), random_state=0)), "predictive"),
], ids=["fd", "wolf", "bocd-ps", "bocd-ts", "ekf-clf", "lofi-clf", "pipeline"])
def test_heads_compose_with_every_estimator(model, policy):
    encoding = "features" if hasattr(model, "steps") else "heads"  # a scaler would see the arm index
    agent = ContextualBandit(model, n_arms=3, encoding=encoding, policy=policy, random_state=0)
    rng = np.random.default_rng(0)
    for _ in range(15):
        c = rng.normal(size=(2, 2))
        arm = agent.select(c)
        assert arm.shape == (2,) and np.all((0 <= arm) & (arm < 3))
        agent.update(c, arm, (rng.random(2) < 0.5).astype(float))
    assert agent.history_["arm"].shape == (30,)
    if encoding == "heads":
        assert "PerArmHeads" in repr(agent.estimator_.get_params(deep=True))


def test_replay_sgd_baseline_epsilon_greedy():
    pytest.importorskip("skorch")
    from skfilter.baselines import ReplaySGDRegressor

    agent = ContextualBandit(ReplaySGDRegressor(hidden_layer_sizes=(), optimizer="adam", lr=0.05, random_state=0),
                             n_arms=3, policy="epsilon-greedy", epsilon=0.05, random_state=0)
    earned, best = _run_bandit(agent, n_steps=300)
    assert earned > 0.5 * best
    with pytest.raises(ValueError, match="sample_y"):
        ContextualBandit(ReplaySGDRegressor(), n_arms=3, policy="thompson").select(np.zeros((1, 2)))


def test_epsilon_greedy_explores_at_rate_epsilon():
    """After learning that arm 0 is best everywhere, a fraction ε(A−1)/A of the choices is another arm."""
    agent = ContextualBandit(EKFRegressor(hidden_layer_sizes=(), random_state=0), n_arms=4,
                             policy="epsilon-greedy", epsilon=0.3, random_state=0)
    rng = np.random.default_rng(0)
    c = rng.normal(size=(200, 2))
    arms = np.tile(np.arange(4), 50)
    agent.update(c, arms, np.where(arms == 0, 10.0, 0.0))
    arms = agent.select(rng.normal(size=(8000, 2)))
    p = 0.3 * 3 / 4
    other = np.mean(arms != 0)
    assert abs(other - p) < 4 * np.sqrt(p * (1 - p) / 8000)
    assert np.all(np.bincount(arms[arms != 0], minlength=4)[1:] > 0.2 * 8000 * p / 3)


def test_bandit_reproducible():
    def run(seed):
        agent = ContextualBandit(LoFiRegressor(hidden_layer_sizes=(8,), random_state=0), n_arms=3, random_state=seed)
        _run_bandit(agent, n_steps=40)
        return agent.history_["arm"]

    np.testing.assert_array_equal(run(0), run(0))
    assert not np.array_equal(run(0), run(1))


def test_bandit_parameter_and_input_validation():
    with pytest.raises(InvalidParameterError, match="policy"):
        ContextualBandit(policy="ucb").select(np.zeros((1, 2)))
    with pytest.raises(InvalidParameterError, match="include_noise"):
        ContextualBandit(include_noise="yes").select(np.zeros((1, 2)))
    with pytest.raises(InvalidParameterError, match="n_arms"):
        ContextualBandit(n_arms=1).select(np.zeros((1, 2)))
    with pytest.raises(ValueError, match="arm_features"):
        ContextualBandit(n_arms=3, encoding="features", arm_features=np.eye(2)).select(np.zeros((1, 2)))
    with pytest.raises(NotFittedError):
        ContextualBandit().history_
    agent = _fitted_linear_heads(EKFRegressor(hidden_layer_sizes=(), random_state=0))
    before = pickle.dumps(agent)
    for bad in [dict(arm=[3], reward=[1.0]), dict(arm=[0.5], reward=[1.0]), dict(arm=[0], reward=[np.nan]),
                dict(arm=[0, 1], reward=[1.0])]:
        with pytest.raises(ValueError):
            agent.update(np.zeros((1, 2)), **bad)
        assert pickle.dumps(agent) == before
    with pytest.raises(ValueError, match="features"):
        agent.select(np.zeros((1, 3)))
    assert pickle.dumps(agent) == before
    import torch

    wrong = ContextualBandit(EKFRegressor(module=torch.nn.Linear(2, 2, dtype=torch.float64)), n_arms=3)
    with pytest.raises(ValueError, match="n_arms=3 outputs"):
        wrong.update(np.zeros((1, 2)), [0], [1.0])
    right = ContextualBandit(EKFRegressor(module=torch.nn.Linear(2, 3, dtype=torch.float64)), n_arms=3)
    right.update(np.ones((1, 2)), [2], [1.0])
    assert isinstance(right.estimator_.module, PerArmHeads) and right.estimator_.module.body.out_features == 3
    clf_agent = ContextualBandit(EKFClassifier(hidden_layer_sizes=()), n_arms=2)
    with pytest.raises(ValueError, match=r"\{0, 1\}"):
        clf_agent.update(np.zeros((1, 2)), [0], [0.5])


# -- expected improvement ----------------------------------------------------------------------------
@pytest.mark.parametrize("m, s, best, xi", [(0.0, 1.0, 0.0, 0.0), (1.3, 0.4, 0.2, 0.0), (-2.0, 3.0, 0.5, 0.1),
                                            (0.7, 1e-3, 0.6, 0.0)])
def test_expected_improvement_against_integration(m, s, best, xi):
    def integrand(y, sign):
        gain = (best - xi - y) if sign < 0 else (y - best - xi)
        return max(gain, 0.0) * norm.pdf(y, m, s)

    for maximize, sign in [(False, -1), (True, 1)]:
        numeric = integrate.quad(integrand, m - 12 * s, m + 12 * s, args=(sign,), points=[best - xi, best + xi],
                                 epsabs=1e-12, limit=200)[0]
        got = expected_improvement([m], [s], best, xi=xi, maximize=maximize)[0]
        assert got == pytest.approx(numeric, rel=1e-6, abs=1e-10)


def test_expected_improvement_limits_and_validation():
    np.testing.assert_allclose(expected_improvement([1.0, 3.0], [0.0, 0.0], 2.0), [1.0, 0.0])
    np.testing.assert_allclose(expected_improvement([1.0, 3.0], [0.0, 0.0], 2.0, maximize=True), [0.0, 1.0])
    with pytest.raises(ValueError, match="std"):
        expected_improvement([0.0], [-1.0], 0.0)
    with pytest.raises(InvalidParameterError):
        expected_improvement([0.0], [1.0], 0.0, xi=-1.0)


# -- Bayesian optimisation ---------------------------------------------------------------------------
def _quadratic(x):
    return float(np.sum((np.asarray(x) - 0.3) ** 2))


def _random_search_best(d, n, seed):
    rng = np.random.RandomState(seed)
    return min(_quadratic(rng.uniform(-2, 2, size=d)) for _ in range(n))


@pytest.mark.parametrize("acquisition", ["thompson", "predictive", "ei"])
@pytest.mark.parametrize("d", [1, 2])
def test_bo_finds_quadratic_minimum_and_beats_random_search(acquisition, d):
    """30 evaluations of ‖x − 0.3‖² on [−2, 2]^d, 5 seeds, an EKF surrogate refitted with 5 passes.
    Random search with 30 points reaches ≈ 0.17 on average in 2-D (≈ 0.004 in 1-D, where only
    the distance to the minimum is tested)."""
    n_iter = 30
    found, random = [], []
    for seed in range(5):
        surrogate = EKFRegressor(hidden_layer_sizes=(20,), obs_variance=1e-4, n_epochs=5, random_state=seed)
        opt = BayesianOptimizer(surrogate, bounds=[[-2.0, 2.0]] * d, acquisition=acquisition, n_candidates=256,
                                refit=True, random_state=seed)
        opt.minimize(_quadratic, n_iter=n_iter)
        found.append(opt.best_y_)
        random.append(_random_search_best(d, n_iter, seed))
        assert opt.history_["best_y"][-1] == opt.best_y_ == _quadratic(opt.best_x_)
    assert np.median(found) < 0.01
    if d == 2:
        assert np.mean(found) < 0.5 * np.mean(random), (found, random)


def test_bo_online_surrogate_learns_each_point_once():
    """refit=False: partial_fit with the initial points at once, then one new point per observe."""
    opt = BayesianOptimizer(EKFRegressor(hidden_layer_sizes=(), random_state=0), bounds=[[0, 1]] * 2,
                            n_initial_points=4, random_state=0)
    opt.minimize(_quadratic, n_iter=3)
    assert not hasattr(opt, "surrogate_")
    opt.minimize(_quadratic, n_iter=4)
    assert opt.surrogate_.n_samples_seen_ == 7


def test_bo_gaussian_process_baseline_and_maximize():
    gp = GaussianProcessRegressor(Matern(nu=2.5), normalize_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for acquisition in ("thompson", "predictive", "ei"):
            opt = BayesianOptimizer(gp, bounds=[[-2.0, 2.0]] * 2, acquisition=acquisition, maximize=True,
                                    n_candidates=256, random_state=0)
            opt.optimize(lambda x: -_quadratic(x), n_iter=20)
            assert opt.best_y_ > -0.05, acquisition
            assert np.all(np.diff(opt.history_["best_y"]) >= 0)
    with pytest.raises(ValueError, match="maximize"):
        opt.minimize(_quadratic, 2)


def test_bo_reproducible_and_in_bounds():
    def run(seed):
        opt = BayesianOptimizer(LoFiRegressor(hidden_layer_sizes=(10,), random_state=0), bounds=[[0, 1], [-5, -4]],
                                n_candidates=64, random_state=seed)
        return opt.minimize(lambda x: float(x[0] - x[1]), n_iter=12).X_

    X = run(0)
    np.testing.assert_array_equal(X, run(0))
    assert not np.array_equal(X, run(1))
    assert np.all((X[:, 0] >= 0) & (X[:, 0] <= 1) & (X[:, 1] >= -5) & (X[:, 1] <= -4))


def test_bo_validation_leaves_optimizer_unchanged():
    with pytest.raises(InvalidParameterError, match="acquisition"):
        BayesianOptimizer(bounds=[[0, 1]], acquisition="ucb").suggest()
    with pytest.raises(ValueError, match="bounds"):
        BayesianOptimizer(bounds=[[1, 0]]).suggest()
    with pytest.raises(ValueError, match="bounds"):
        BayesianOptimizer().suggest()
    with pytest.raises(ValueError, match="sample_y"):
        BayesianOptimizer(_NoSample(), bounds=[[0, 1]]).suggest()
    opt = BayesianOptimizer(EKFRegressor(hidden_layer_sizes=(), random_state=0), bounds=[[0, 1]], random_state=0)
    opt.minimize(_quadratic, 6)
    before = pickle.dumps(opt)
    for x, y in [([0.5, 0.5], 1.0), ([0.5], np.nan), ([[0.1], [0.2]], [1.0])]:
        with pytest.raises(ValueError):
            opt.observe(x, y)
        assert pickle.dumps(opt) == before
    with pytest.raises(NotFittedError):
        BayesianOptimizer(bounds=[[0, 1]]).best_x_


class _NoSample:
    def fit(self, X, y):
        return self

    def predict(self, X, return_std=False):
        return np.zeros(len(X))

    def get_params(self, deep=True):
        return {}


@given(m=st.floats(-50, 50), s=st.floats(0, 20), best=st.floats(-50, 50), xi=st.floats(0, 5))
@settings(max_examples=200, deadline=None)
def test_expected_improvement_properties(m, s, best, xi):
    """EI ≥ max(gain, 0) (Jensen) and EI ≤ max(gain, 0) + s φ(0) (``E[max(g + sZ, 0)] ≤ max(g, 0) +
    s E[max(Z, 0)]``), the maximisation form is the minimisation form of −Y, and EI does not
    decrease with the spread s (the payoff is convex)."""
    ei = expected_improvement([m], [s], best, xi=xi)[0]
    gain = best - xi - m
    assert ei >= max(gain, 0.0) - 1e-9 * (1 + abs(gain))
    assert ei <= max(gain, 0.0) + s * norm.pdf(0) + 1e-9 * (1 + abs(gain))
    assert expected_improvement([-m], [s], -best, xi=xi, maximize=True)[0] == pytest.approx(ei, rel=1e-12, abs=1e-12)
    assert expected_improvement([m], [s + 1.0], best, xi=xi)[0] >= ei - 1e-9 * (1 + abs(gain))


def test_per_arm_heads_declare_the_body_s_last_layer_for_hilofi():
    """HiLoFi/LoLoFi treat the last layer apart: through per-arm heads it is the body's final
    ``nn.Linear`` (``last_layer_name``), found without ``last_layer=``."""
    import torch

    from skfilter import HiLoFiRegressor
    from skfilter.models import last_layer

    body = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    assert last_layer(PerArmHeads(body, 4)) == "body.2"
    assert last_layer(PerArmHeads(torch.nn.Linear(3, 4), 4)) is None  # no Sequential: not declared
    rng = np.random.default_rng(0)
    bandit = ContextualBandit(HiLoFiRegressor(hidden_layer_sizes=(8,), hidden_rank=5, random_state=0),
                              n_arms=4, random_state=0)
    for _ in range(20):
        context = rng.normal(size=(1, 3))
        arm = bandit.select(context)
        bandit.update(context, arm, np.array([float(context[0, 0] > 0)]))
    factors = bandit.estimator_.posterior_.belief.factors
    # hidden block: rank 5 over 3·8 + 8 = 32 weights; last layer: Cholesky over 8·4 + 4 = 36 weights
    assert [tuple(f.shape) for f in factors] == [(5, 32), (36, 36)]
