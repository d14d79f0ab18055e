"""The decoupled EKF of factorization models (Gómez-Uribe & Karrer) against closed forms and the
paper's algorithms written out in NumPy:

* one entity holding every parameter: the DEKF is the EKF (a dense filter in the test), and with a
  Gaussian linear model the exact conjugate posterior (spec facts 3, 9);
* an event touching entities i and j leaves every other entity exactly as it was (fact 10);
* one DEKF step is Alg. 1 as printed (``A``, ``B = (I + A D)⁻¹``, ``C``, ``F``) for Bernoulli MF, and
  the diagonal blocks of the full EKF update from the block-diagonal prior (fact 9);
* the lazy predict over ``n`` steps equals ``n`` single steps and the augmented linear-Gaussian
  predict; the new-entity state is stationary (facts 13–15); Alg. 2's update is Alg. 1 on the
  augmented ``[ξ; ξ₀]`` (fact 16);
* the iterated EKF reaches the MAP (Eq. 40) and with one iteration is the EKF (facts 20–22);
* the estimators: ids of any hashable kind, unseen ids use the prior, memory grows with the
  entities seen, errors leave the estimator as it was.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch

from skfilter import FactorizationClassifier, FactorizationRegressor
from skfilter.exceptions import EntityColumnsWarning, FilterStepError
from skfilter.factorization import FactorizationFilter
from skfilter.factorization.dekf import drift_factors, lazy_predict
from skfilter.factorization.entities import EntityPrior
from skfilter.factorization.model import Slot
from skfilter.factorization.signals import LinearSignal, MatrixFactorization
from skfilter.likelihoods import Bernoulli, Gaussian, Poisson

F64 = torch.float64


def _t(a):
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


# -- one entity: the EKF ----------------------------------------------------------------------------

def test_one_entity_holding_every_parameter_is_the_ekf_and_the_conjugate_posterior():
    """A linear-Gaussian GLM whose parameters are one entity: Bayesian linear regression."""
    rng = np.random.default_rng(0)
    n, k, r, v = 40, 4, 0.3, 2.0
    X = rng.normal(size=(n, k))
    y = X @ rng.normal(size=k) + np.sqrt(r) * rng.normal(size=n)
    prior = EntityPrior(np.zeros(k), np.full(k, v))
    filt = FactorizationFilter(LinearSignal(), [Slot("all", k, True, prior)], 1, Gaussian(r))
    for i in range(n):
        filt.step([None], [_t(X[i])], _t([y[i]]))
    table = filt.tables["all"]
    cov = np.linalg.inv(np.eye(k) / v + X.T @ X / r)
    mean = cov @ X.T @ y / r
    np.testing.assert_allclose(table.mean[0].numpy(), mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(table.cov[0].numpy(), cov, rtol=1e-9, atol=1e-12)


def test_one_entity_bernoulli_is_the_dense_ekf():
    rng = np.random.default_rng(1)
    n, k, v = 30, 3, 1.5
    X = rng.normal(size=(n, k))
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ np.array([1.0, -2.0, 0.5])))).astype(float)
    filt = FactorizationFilter(LinearSignal(), [Slot("all", k, True, EntityPrior(np.zeros(k), np.full(k, v)))],
                               1, Bernoulli())
    m, P = np.zeros(k), v * np.eye(k)
    for i in range(n):
        filt.step([None], [_t(X[i])], _t([y[i]]))
        p = 1 / (1 + np.exp(-X[i] @ m))
        H = p * (1 - p) * X[i]  # ∂h/∂θ, R = p(1 − p) (spec fact 2)
        S = H @ P @ H + p * (1 - p)
        K = P @ H / S
        m, P = m + K * (y[i] - p), P - np.outer(K, H @ P)
    np.testing.assert_allclose(filt.tables["all"].mean[0].numpy(), m, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(filt.tables["all"].cov[0].numpy(), P, rtol=1e-9, atol=1e-12)


# -- matrix factorization: Alg. 1 ---------------------------------------------------------------------

def _mf_filter(a=3, n_users=5, n_items=4, seed=0, half_life=None, drift=0.0, learn_reference=True, likelihood=None):
    rng = np.random.default_rng(seed)
    M = rng.random((a, a))
    Pi = M @ M.T + 0.1 * np.eye(a)
    user = EntityPrior(np.full(a, 0.5), Pi, jitter=np.full(a, 0.1))
    item = EntityPrior(np.full(a, -0.5), 0.5 * Pi, jitter=np.full(a, 0.1))
    return FactorizationFilter(MatrixFactorization(a, biases=False), [Slot("user", 1, False, user),
                                                                      Slot("item", 1, False, item)],
                               1, likelihood or Bernoulli(), half_life=half_life, drift_variance=drift,
                               learn_reference=learn_reference, seed=seed)


def _ones():
    return [_t([1.0]), _t([1.0])]


def test_dekf_step_is_algorithm_1_as_printed_and_the_diagonal_blocks_of_the_ekf():
    filt = _mf_filter()
    rng = np.random.default_rng(2)
    for _ in range(15):  # some history, so that the blocks are not the prior
        filt.step([int(rng.integers(5)), int(rng.integers(4))], _ones(), _t([float(rng.random() < 0.5)]))
    u, i, yv = 2, 1, 1.0
    before = copy.deepcopy(filt.tables)
    mu_u, S_u = before["user"].mean[before["user"].ids[u]].numpy(), before["user"].cov[before["user"].ids[u]].numpy()
    mu_v, S_v = before["item"].mean[before["item"].ids[i]].numpy(), before["item"].cov[before["item"].ids[i]].numpy()
    filt.step([u, i], _ones(), _t([yv]))
    # Alg. 1 with J_u = μ_v, J_v = μ_u (canonical link), A = Σ_y = p(1 − p), φ = 1
    eta = mu_u @ mu_v
    p = 1 / (1 + np.exp(-eta))
    J = {"u": mu_v, "v": mu_u}
    q = {"u": S_u @ J["u"], "v": S_v @ J["v"]}
    D = J["u"] @ q["u"] + J["v"] @ q["v"]
    A = p * (1 - p)
    B = 1 / (1 + A * D)
    C, F = B * A, B * (yv - p)
    after_u = filt.tables["user"]
    np.testing.assert_allclose(after_u.mean[after_u.ids[u]].numpy(), mu_u + q["u"] * F, rtol=1e-10)
    np.testing.assert_allclose(after_u.cov[after_u.ids[u]].numpy(), S_u - C * np.outer(q["u"], q["u"]), rtol=1e-9,
                               atol=1e-12)
    after_v = filt.tables["item"]
    np.testing.assert_allclose(after_v.mean[after_v.ids[i]].numpy(), mu_v + q["v"] * F, rtol=1e-10)
    # the diagonal blocks of the full EKF update of the block-diagonal prior (fact 9)
    Sigma = np.block([[S_u, np.zeros((3, 3))], [np.zeros((3, 3)), S_v]])
    Jf = np.concatenate([J["u"], J["v"]])
    H = A * Jf
    K = Sigma @ H / (H @ Sigma @ H + A)
    full_cov = Sigma - np.outer(K, H @ Sigma)
    np.testing.assert_allclose(after_u.cov[after_u.ids[u]].numpy(), full_cov[:3, :3], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(after_v.cov[after_v.ids[i]].numpy(), full_cov[3:, 3:], rtol=1e-9, atol=1e-12)
    assert np.abs(full_cov[:3, 3:]).max() > 1e-6  # the cross block the DEKF drops (Eq. 17) is not zero


@pytest.mark.parametrize("half_life", [None, 50.0])
def test_an_event_leaves_the_entities_it_does_not_involve_exactly_as_they_were(half_life):
    filt = _mf_filter(half_life=half_life, drift=0.2)
    rng = np.random.default_rng(3)
    for _ in range(20):
        filt.step([int(rng.integers(5)), int(rng.integers(4))], _ones(), _t([float(rng.random() < 0.5)]))
    before = copy.deepcopy(filt.tables)
    filt.step([1, 3], _ones(), _t([1.0]))
    for name, involved in (("user", 1), ("item", 3)):
        old, new = before[name], filt.tables[name]
        assert old.ids == new.ids
        for row in range(old.n_entities):
            if row == old.ids[involved]:
                assert not torch.equal(old.mean[row], new.mean[row]) and not torch.equal(old.cov[row], new.cov[row])
                continue
            for field in old._fields():  # bit for bit
                assert torch.equal(getattr(old, field)[row], getattr(new, field)[row]), (name, row, field)


def test_new_entities_are_created_on_first_sight_and_in_order():
    filt = _mf_filter()
    filt.step(["ann", "book"], _ones(), _t([1.0]))
    filt.step(["bob", "book"], _ones(), _t([0.0]))
    assert filt.tables["user"].ids == {"ann": 0, "bob": 1} and filt.tables["item"].ids == {"book": 0}
    assert filt.tables["user"].n_entities == 2 and filt.nbytes() == (2 + 1) * ((3 + 9) * 8 + 8)


# -- dynamics: Alg. 2 ---------------------------------------------------------------------------------

def _random_state(rng, K, n=3):
    M = rng.normal(size=(n, 3 * K, 3 * K))
    joint = M @ np.swapaxes(M, -1, -2) + 0.1 * np.eye(3 * K)  # Cov of [ξ; ξ₀] (and a spare block)
    return {"mean": _t(rng.normal(size=(n, K))), "ref_mean": _t(rng.normal(size=(n, K))),
            "cov": _t(joint[:, :K, :K]), "cross": _t(joint[:, K:2 * K, :K]), "ref_cov": _t(joint[:, K:2 * K, K:2 * K]),
            "last_time": torch.zeros(n, dtype=torch.long)}


def test_lazy_predict_over_n_steps_is_n_single_steps_and_the_augmented_predict():
    rng = np.random.default_rng(4)
    K, alpha = 3, 0.9
    omega = _t(rng.random(K) + 0.1)
    state = _random_state(rng, K)
    lazy = lazy_predict(state, alpha, omega, torch.tensor([7, 7, 7]))
    stepped = state
    for _ in range(7):
        stepped = lazy_predict(stepped, alpha, omega, torch.tensor([1, 1, 1]))
    for key in ("mean", "cov", "cross", "ref_cov", "ref_mean"):
        np.testing.assert_allclose(lazy[key].numpy(), stepped[key].numpy(), rtol=1e-10, atol=1e-12)
    # the augmented linear-Gaussian predict: z = [ξ; ξ₀], G = [[αI, (1−α)I], [0, I]], Q = blockdiag(Ω, 0)
    G = np.block([[alpha * np.eye(K), (1 - alpha) * np.eye(K)], [np.zeros((K, K)), np.eye(K)]])
    Q = np.block([[np.diag(omega.numpy()), np.zeros((K, K))], [np.zeros((K, K)), np.zeros((K, K))]])
    b = 0
    m = np.concatenate([state["mean"][b].numpy(), state["ref_mean"][b].numpy()])
    P = np.block([[state["cov"][b].numpy(), state["cross"][b].numpy().T],
                  [state["cross"][b].numpy(), state["ref_cov"][b].numpy()]])
    for _ in range(7):
        m, P = G @ m, G @ P @ G.T + Q
    np.testing.assert_allclose(lazy["mean"][b].numpy(), m[:K], rtol=1e-10)
    np.testing.assert_allclose(lazy["cov"][b].numpy(), P[:K, :K], rtol=1e-10)
    np.testing.assert_allclose(lazy["cross"][b].numpy(), P[K:, :K], rtol=1e-10)
    # Δ = 0 is the identity; the semigroup property
    same = lazy_predict(state, alpha, omega, torch.tensor([0, 0, 0]))
    for key in ("mean", "cov", "cross"):
        np.testing.assert_allclose(same[key].numpy(), state[key].numpy(), rtol=1e-14)
    two = lazy_predict(lazy_predict(state, alpha, omega, torch.tensor([3, 3, 3])), alpha, omega, torch.tensor([4, 4, 4]))
    np.testing.assert_allclose(two["cov"].numpy(), lazy["cov"].numpy(), rtol=1e-10)


def test_the_new_entity_state_is_stationary_and_the_factors_are_stable():
    K, alpha, c = 2, 0.99, 0.3
    Pi = np.array([[1.0, 0.3], [0.3, 0.5]])
    omega = _t(np.full(K, (1 - alpha ** 2) * c))
    state = {"mean": _t([[0.4, -0.2]]), "ref_mean": _t([[0.4, -0.2]]), "cov": _t([Pi + c * np.eye(K)]),
             "cross": _t([Pi]), "ref_cov": _t([Pi]), "last_time": torch.zeros(1, dtype=torch.long)}
    for delta in (1, 13, 10_000):
        out = lazy_predict(state, alpha, omega, torch.tensor([delta]))
        for key in ("mean", "cov", "cross", "ref_cov"):
            np.testing.assert_allclose(out[key].numpy(), state[key].numpy(), rtol=1e-9, atol=1e-12)
    # α near 1 (half-life 10,000): (1 − α^{2Δ})/(1 − α²) without cancellation
    a, g = drift_factors(0.5 ** (1 / 10_000), torch.tensor([1, 2, 5]))
    np.testing.assert_allclose(g.numpy(), [1.0, 1 + a[0].item() ** 2, sum(a[0].item() ** (2 * j) for j in range(5))],
                               rtol=1e-12)


def test_lazy_and_eager_predicts_give_the_same_posterior():
    """Fact 17: bringing every entity forward at every step changes nothing for the observed ones."""
    lazy, eager = _mf_filter(half_life=20.0, drift=0.3), _mf_filter(half_life=20.0, drift=0.3)
    rng = np.random.default_rng(5)
    events = [(int(rng.integers(5)), int(rng.integers(4)), float(rng.random() < 0.5)) for _ in range(40)]
    for u, i, yv in events[:5]:
        for f in (lazy, eager):
            f.step([u, i], _ones(), _t([yv]))
    for u, i, yv in events[5:]:
        lazy.step([u, i], _ones(), _t([yv]))
        for name in ("user", "item"):  # eager: bring every entity to the event's time first
            table = eager.tables[name]
            rows = np.arange(table.n_entities)
            eager._predicted(name, rows, eager.time + 1, write=True)
        eager.step([u, i], _ones(), _t([yv]))
    for name in ("user", "item"):
        rows = np.arange(lazy.tables[name].n_entities)
        a = lazy._predicted(name, rows, lazy.time, write=False)
        b = eager._predicted(name, rows, eager.time, write=False)
        for key in ("mean", "cov", "ref_mean", "cross", "ref_cov"):
            np.testing.assert_allclose(a[key].numpy(), b[key].numpy(), rtol=1e-9, atol=1e-12)


def test_algorithm_2_update_is_algorithm_1_on_the_augmented_entity():
    """Fact 16: the reference blocks move as Alg. 1 on ``[ξ; ξ₀]`` with Jacobian ``[J, 0]``."""
    filt = _mf_filter(half_life=10.0, drift=0.2)
    rng = np.random.default_rng(6)
    for _ in range(12):
        filt.step([int(rng.integers(5)), int(rng.integers(4))], _ones(), _t([float(rng.random() < 0.5)]))
    u, i = 0, 2
    t_next = filt.time + 1
    pu = filt._predicted("user", np.array([filt.tables["user"].ids[u]]), t_next, write=False)
    pv = filt._predicted("item", np.array([filt.tables["item"].ids[i]]), t_next, write=False)
    filt.step([u, i], _ones(), _t([0.0]))
    mu_u, mu_v = pu["mean"][0].numpy(), pv["mean"][0].numpy()
    p = 1 / (1 + np.exp(-mu_u @ mu_v))
    # augmented blocks [ξ; ξ₀] for both entities
    aug = {}
    for key, st, J in (("u", pu, mu_v), ("v", pv, mu_u)):
        K = len(J)
        P = np.block([[st["cov"][0].numpy(), st["cross"][0].numpy().T], [st["cross"][0].numpy(), st["ref_cov"][0].numpy()]])
        aug[key] = (np.concatenate([st["mean"][0].numpy(), st["ref_mean"][0].numpy()]), P,
                    np.concatenate([J, np.zeros(K)]))
    D = sum(J @ P @ J for _, P, J in aug.values())
    A = p * (1 - p)
    B = 1 / (1 + A * D)
    table = filt.tables["user"]
    m, P, J = aug["u"]
    q = P @ J
    new_m, new_P = m + q * B * (0.0 - p), P - B * A * np.outer(q, q)
    row = table.ids[u]
    np.testing.assert_allclose(table.mean[row].numpy(), new_m[:3], rtol=1e-10)
    np.testing.assert_allclose(table.ref_mean[row].numpy(), new_m[3:], rtol=1e-10)
    np.testing.assert_allclose(table.cov[row].numpy(), new_P[:3, :3], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(table.cross[row].numpy(), new_P[3:, :3], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(table.ref_cov[row].numpy(), new_P[3:, 3:], rtol=1e-9, atol=1e-12)


def test_a_fixed_reference_never_moves_and_the_mean_reverts_to_it():
    filt = _mf_filter(half_life=5.0, drift=0.2, learn_reference=False)
    filt.step([0, 0], _ones(), _t([1.0]))
    table = filt.tables["user"]
    ref = table.ref_mean[0].clone()
    for _ in range(30):
        filt.step([0, 1], _ones(), _t([1.0]))
    torch.testing.assert_close(table.ref_mean[0], ref)
    assert float(table.cross.abs().max()) == 0.0
    far = filt._predicted("user", np.array([0]), filt.time + 10_000, write=False)
    torch.testing.assert_close(far["mean"][0], ref)


# -- the iterated EKF -------------------------------------------------------------------------------

def test_iterated_ekf_reaches_the_map_and_one_iteration_is_the_ekf():
    from scipy.optimize import minimize

    k, v = 3, 2.0
    x = np.array([0.8, -0.3, 1.2])
    prior = EntityPrior(np.zeros(k), np.full(k, v))

    def make(iterations):
        return FactorizationFilter(LinearSignal(), [Slot("all", k, True, prior)], 1, Poisson(), iterations=iterations,
                                   tol=1e-12)

    ekf, one, iekf = make(1), make(1), make(50)
    for f in (ekf, iekf):
        f.step([None], [_t(x)], _t([7.0]))
    # the MAP of the log posterior  y xᵀθ − exp(xᵀθ) − |θ|²/(2v)  (Eq. 40)
    res = minimize(lambda th: -(7.0 * x @ th - np.exp(x @ th) - th @ th / (2 * v)), np.zeros(k),
                   jac=lambda th: -(7.0 * x - np.exp(x @ th) * x - th / v), method="BFGS", options={"gtol": 1e-12})
    np.testing.assert_allclose(iekf.tables["all"].mean[0].numpy(), res.x, rtol=1e-7, atol=1e-9)
    # the EKF's single step overshoots (the paper's §6 warning), the MAP's log-rate is near log 7
    assert abs(float(x @ ekf.tables["all"].mean[0].numpy()) - np.log(7)) > abs(float(x @ res.x) - np.log(7))
    # with a Gaussian linear model the iterations stop after one step at the EKF (fact 22)
    g1 = FactorizationFilter(LinearSignal(), [Slot("all", k, True, prior)], 1, Gaussian(0.5))
    g5 = FactorizationFilter(LinearSignal(), [Slot("all", k, True, prior)], 1, Gaussian(0.5), iterations=5)
    for f in (g1, g5):
        f.step([None], [_t(x)], _t([1.5]))
    np.testing.assert_allclose(g5.tables["all"].mean[0].numpy(), g1.tables["all"].mean[0].numpy(), rtol=1e-10)
    np.testing.assert_allclose(g5.tables["all"].cov[0].numpy(), g1.tables["all"].cov[0].numpy(), rtol=1e-10)


# -- the estimators ---------------------------------------------------------------------------------

def _ratings(n=600, n_users=30, n_items=12, seed=0):
    rng = np.random.default_rng(seed)
    users, items = rng.integers(0, n_users, n), rng.integers(0, n_items, n)
    U, V = rng.normal(size=(n_users, 2)), rng.normal(size=(n_items, 2))
    y = 3 + 0.5 * rng.normal(size=n_users)[users] + (U[users] * V[items]).sum(1) + 0.2 * rng.normal(size=n)
    return users, items, y


def test_matrix_factorization_learns_ratings_and_reports_its_uncertainty():
    users, items, y = _ratings(n=1800)
    X = np.column_stack([users, items]).astype(object)
    reg = FactorizationRegressor(model="mf", n_factors=2, random_state=0).fit(X[:1500], y[:1500])
    mean, std = reg.predict(X[1500:], return_std=True)
    rmse = np.sqrt(np.mean((mean - y[1500:]) ** 2))
    assert rmse < 0.25 * np.std(y)  # noise 0.2 of a spread of 1.6
    assert 0.85 < np.mean(np.abs(mean - y[1500:]) < 2 * std) <= 1.0
    # FM with two id columns is MF with user, item and global biases
    fm = FactorizationRegressor(model="fm", n_factors=2, random_state=0).fit(X[:1500], y[:1500])
    np.testing.assert_allclose(fm.predict(X[1500:]), mean, rtol=1e-9)


def test_ids_of_any_kind_and_unseen_ids_use_the_prior():
    users, items, y = _ratings(n=1200)
    frame = pd.DataFrame({"user": [f"u{u}" for u in users], "item": pd.Categorical(items), "hour": users % 24})
    reg = FactorizationRegressor(model="mf", entity_columns=["user", "item"], n_factors=2, random_state=0)
    reg.fit(frame, y)
    assert reg.entity_columns_ == (0, 1) and reg.n_entities()["column 0"] == len(set(users))
    seen = frame.iloc[:1]
    unseen = seen.assign(user="nobody")
    m, s = reg.predict(unseen, return_std=True)
    seen_m, seen_s = reg.predict(seen, return_std=True)
    assert s[0] > 1.2 * seen_s[0]  # a new user is uncertain
    assert reg.n_entities()["column 0"] == len(set(users))  # predicting created nothing
    # 'auto' takes the string and categorical columns of a DataFrame (and its integer ones: "hour"
    # is an id column then, tests below)
    auto = FactorizationRegressor(model="mf", n_factors=2, random_state=0).fit(frame.drop(columns="hour"), y)
    assert auto.entity_columns_ == (0, 1)


# -- entity_columns='auto': which columns are ids (skfilter.factorization.columns) ---------------------
def test_integer_ids_in_an_array_are_learned_as_ids():
    """Issue 30: a NumPy array of integer user and item ids is a matrix of ids under 'auto', not two
    numeric features. On a small rank-2 rating stream (noise 0.2) the default's one-step-ahead RMSE
    is that of the ids named explicitly, and far below the same ids read as numbers (a float array)."""
    from skfilter.model_selection import prequential_predict

    users, items, y = _ratings(n=1500)
    X = np.column_stack([users, items])
    assert X.dtype.kind == "i"

    def one_step_rmse(est, X):
        pred = prequential_predict(est, X, y)
        return float(np.sqrt(np.nanmean((pred[300:] - y[300:]) ** 2)))

    auto = one_step_rmse(FactorizationRegressor(random_state=0), X)
    named = one_step_rmse(FactorizationRegressor(entity_columns=[0, 1], random_state=0), X)
    with pytest.warns(EntityColumnsWarning):  # the same ids as floats: numeric context, with a warning
        as_numbers = one_step_rmse(FactorizationRegressor(random_state=0), X.astype(float))
    assert auto == named
    assert auto < 0.6 * as_numbers and as_numbers > 0.9 * np.std(y[300:])
    assert FactorizationRegressor(random_state=0).fit(X, y).entity_columns_ == (0, 1)


def test_auto_reads_integer_string_and_categorical_columns_as_ids_and_floats_as_context():
    rng = np.random.default_rng(0)
    n = 60
    users, items = rng.integers(0, 6, n), rng.integers(0, 4, n)
    frame = pd.DataFrame({
        "user_int": users,                                    # int64: ids
        "price": rng.normal(size=n),                          # float: context
        "user_str": [f"u{u}" for u in users],                 # object of strings: ids
        "item_cat": pd.Categorical(items),                    # categorical: ids
        "promo": rng.random(n) < 0.5,                         # bool: context
        "item_nullable": pd.array(items, dtype="Int64"),      # nullable integer: ids
        "shop_string": pd.array([f"s{i % 3}" for i in range(n)], dtype="string"),  # string dtype: ids
        "item_uint": items.astype(np.uint8),                  # unsigned: ids
        "obj_ints": pd.Series(list(items), dtype=object),     # object of Python ints: ids
        "obj_floats": pd.Series(list(rng.normal(size=n)), dtype=object),  # object of floats: context
    })
    y = users + items + 0.1 * rng.normal(size=n)
    reg = FactorizationRegressor(n_factors=2, random_state=0).fit(frame, y)
    assert reg.entity_columns_ == (0, 2, 3, 5, 6, 7, 8)
    # one dtype per NumPy array: integers are ids, floats context, object arrays by their values
    assert FactorizationRegressor(random_state=0).fit(np.column_stack([users, items]), y).entity_columns_ == (0, 1)
    assert FactorizationRegressor(random_state=0).fit(rng.normal(size=(n, 2)), y).entity_columns_ == ()
    rows = [[f"u{u}", int(i), float(p)] for u, i, p in zip(users, items, rng.normal(size=n))]
    assert FactorizationRegressor(random_state=0).fit(rows, y).entity_columns_ == (0, 1)  # a list of lists
    assert FactorizationRegressor(random_state=0).fit(np.array(rows, dtype=object), y).entity_columns_ == (0, 1)
    # an integer column of a DataFrame is an id column: model='mf' names what it found
    three = pd.DataFrame({"user": users, "item": items, "hour": users % 3})
    with pytest.raises(ValueError, match=r"found 3: columns \[0, 1, 2\].*integer, string and categorical"):
        FactorizationRegressor(model="mf", random_state=0).fit(three, y)
    assert FactorizationRegressor(model="mf", entity_columns=["user", "item"], random_state=0).fit(
        three, y).entity_columns_ == (0, 1)


def test_a_float_column_is_never_read_as_ids_and_warns_when_it_looks_like_ids():
    """The rule never turns a float column into ids unless it is named; a float column of whole
    numbers with three or more distinct values (ids stacked with a float feature) warns, once per
    stream; naming the columns (or None) silences it; 0/1 indicators and real-valued floats do not warn."""
    import warnings

    from skfilter.model_selection import prequential_predict

    users, items, y = _ratings(n=200)
    stacked = np.column_stack([users, items, np.linspace(0, 1, 200)])  # float: ids stacked with a feature
    with pytest.warns(EntityColumnsWarning, match="is float but holds only whole numbers") as record:
        reg = FactorizationRegressor(random_state=0).fit(stacked, y)
    assert reg.entity_columns_ == () and reg.n_features_in_ == 3
    assert sorted(str(w.message)[:8] for w in record if w.category is EntityColumnsWarning) == ["Column 0", "Column 1"]
    with pytest.warns(EntityColumnsWarning) as record:  # the stream's first rows, learned again per call
        prequential_predict(FactorizationRegressor(random_state=0), stacked, y)
    assert len([w for w in record if w.category is EntityColumnsWarning]) == 2  # once per column
    with warnings.catch_warnings():
        warnings.simplefilter("error", EntityColumnsWarning)
        assert FactorizationRegressor(entity_columns=[0, 1], random_state=0).fit(stacked, y).entity_columns_ == (0, 1)
        assert FactorizationRegressor(entity_columns=None, random_state=0).fit(stacked, y).entity_columns_ == ()
        indicators = np.column_stack([users % 2, np.random.default_rng(0).normal(size=200)]).astype(float)
        assert FactorizationRegressor(random_state=0).fit(indicators, y).entity_columns_ == ()
        frame = pd.DataFrame({"user": users, "score": np.round(y, 1)})  # an int and a non-whole float column
        assert FactorizationRegressor(random_state=0).fit(frame, y).entity_columns_ == (0,)


def test_memory_grows_with_the_entities_seen():
    users, items, y = _ratings(n=300, n_users=100)
    X = np.column_stack([users, items]).astype(object)
    reg = FactorizationRegressor(model="mf", n_factors=3, random_state=0).partial_fit(X[:50], y[:50])
    small = reg.filter_.nbytes()
    reg.partial_fit(X[50:], y[50:])
    assert reg.filter_.nbytes() > small
    per_entity = (4 + 16) * 8 + 8  # a mean of 1 + 3, its 4 × 4 covariance and a time stamp
    assert reg.filter_.nbytes() == per_entity * (len(set(users)) + len(set(items))) + 3 * 8


def test_classifier_binary_and_multiclass():
    rng = np.random.default_rng(0)
    users, items = rng.integers(0, 20, 1500), rng.integers(0, 6, 1500)
    X = np.column_stack([users, items]).astype(object)
    clicks = (rng.random(1500) < 1 / (1 + np.exp(-(items - 2.5)))).astype(int)
    clf = FactorizationClassifier(model="mf", n_factors=2, random_state=0).fit(X, clicks)
    p = clf.predict_proba(np.array([[0, 5], [0, 0]], dtype=object))[:, 1]
    assert p[0] > 0.8 and p[1] < 0.2
    three = np.array(["low", "mid", "high"])[np.digitize(items, [2, 4])]
    multi = FactorizationClassifier(model="mf", n_factors=2, random_state=0).fit(X, three)
    assert multi.score(X, three) > 0.9 and multi.predict_proba(X[:3]).shape == (3, 3)
    draws = multi.sample_proba(X[:4], n_samples=5, random_state=0)
    assert draws.shape == (4, 3, 5) and np.allclose(draws.sum(1), 1)


def test_thompson_draws_share_an_entity_across_rows():
    users, items, y = _ratings(n=300)
    X = np.column_stack([users, items]).astype(object)
    reg = FactorizationRegressor(model="mf", n_factors=2, random_state=0).fit(X, y)
    cand = np.array([[0, 1], [0, 1]], dtype=object)  # the same event twice: the same draw
    s = reg.sample_y(cand, n_samples=50, random_state=1, include_noise=False)
    np.testing.assert_array_equal(s[0], s[1])
    m, std = reg.predict(cand[:1], return_std=True)
    draws = reg.sample_y(cand[:1], n_samples=4000, random_state=2, include_noise=True)[0]
    assert abs(draws.mean() - m[0]) < 4 * std[0] / np.sqrt(4000) + 0.05 * std[0]


def test_drift_follows_a_changing_taste():
    rng = np.random.default_rng(1)
    n = 1500
    users, items = rng.integers(0, 5, n), rng.integers(0, 5, n)
    flip = np.where(np.arange(n) < n // 2, 1.0, -1.0)
    y = 2 * flip * (items - 2) + 0.1 * rng.normal(size=n)
    X = np.column_stack([users, items]).astype(object)
    static = FactorizationRegressor(model="mf", n_factors=2, random_state=0)
    drifting = FactorizationRegressor(model="mf", n_factors=2, half_life=30, drift_variance=1.0, random_state=0)
    errors = {}
    for name, est in (("static", static), ("drifting", drifting)):
        est.partial_fit(X[:10], y[:10])
        se = []
        for i in range(10, n):
            se.append((est.predict(X[i:i + 1])[0] - y[i]) ** 2)
            est.partial_fit(X[i:i + 1], y[i:i + 1])
        errors[name] = np.mean(se[-300:])
    assert errors["drifting"] < 0.5 * errors["static"]


def test_bad_input_raises_before_learning_and_changes_nothing():
    users, items, y = _ratings(n=100)
    X = np.column_stack([users, items]).astype(object)
    reg = FactorizationRegressor(model="mf", n_factors=2, random_state=0).fit(X, y)
    before = reg.predict(X[:5])
    n_seen, time = reg.n_samples_seen_, reg.filter_.time
    for bad_X, bad_y in [(X[:2], [1.0, np.nan]), (np.array([[None, 1]], dtype=object), [1.0]), (X[:2, :1], [1.0, 2.0])]:
        with pytest.raises(ValueError):
            reg.partial_fit(bad_X, bad_y)
    assert reg.n_samples_seen_ == n_seen and reg.filter_.time == time
    np.testing.assert_array_equal(reg.predict(X[:5]), before)
    with pytest.raises(ValueError, match="exactly two"):
        FactorizationRegressor(model="mf", entity_columns=[0]).fit(X, y)
    with pytest.raises(ValueError, match="not numeric"):
        FactorizationRegressor(model="glm", entity_columns=[0]).fit(np.array([["a", "b"]], dtype=object), [1.0])


def test_a_failed_step_keeps_the_last_good_belief_and_learns_again():
    """The torch path (the compiled one has the same contract: tests/test_factorization_kernels.py)."""
    from skfilter.kernels import compiled_kernels

    with compiled_kernels(False):
        _failed_step_keeps_the_last_good_belief()


def _failed_step_keeps_the_last_good_belief():
    users, items, y = _ratings(n=100)
    X = np.column_stack([users, items]).astype(object)
    reg = FactorizationRegressor(model="mf", n_factors=2, obs_variance=1.0, random_state=0).fit(X[:50], y[:50])

    calls = {"n": 0}
    original = reg.filter_._update

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise FilterStepError("forced")
        return original(*args, **kwargs)

    reg.filter_._update = failing
    n_users = reg.filter_.tables["column 0"].n_entities
    with pytest.raises(FilterStepError):
        reg.partial_fit(X[50:60], y[50:60])
    assert reg.n_samples_seen_ == 52 and reg.filter_.time == 52
    # the failing row's new entities are gone again: exactly the ids of the 52 rows learned
    table = reg.filter_.tables["column 0"]
    assert table.n_entities == len(table.ids) == len(set(users[:52])) >= n_users
    assert set(table.ids) == set(users[:52].tolist())
    del reg.filter_._update
    reg.partial_fit(X[60:], y[60:])
    assert reg.n_samples_seen_ == 92


def test_poisson_counts_and_the_iterated_ekf():
    rng = np.random.default_rng(0)
    users, items = rng.integers(0, 10, 400), rng.integers(0, 5, 400)
    y = rng.poisson(np.exp(0.5 + 0.3 * (items - 2)))
    X = np.column_stack([users, items]).astype(object)
    for it in (1, 5):
        reg = FactorizationRegressor(model="mf", n_factors=2, likelihood="poisson", iterations=it, random_state=0)
        reg.fit(X, y)
        m = reg.predict(np.array([[0, 4], [0, 0]], dtype=object))
        assert m[0] > m[1]


def test_numeric_only_default_is_a_factorization_machine_of_the_features():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3)) * [1, 10, 100] + [0, 5, -50]
    y = X[:, 0] * X[:, 1] / 10 + 0.1 * rng.normal(size=200)
    reg = FactorizationRegressor(random_state=0).fit(X[:150], y[:150])
    assert reg.entity_columns_ == () and list(reg.filter_.tables) == ["context", "bias"]
    assert reg.score(X[150:], y[150:]) > 0.5


def test_recommend_by_thompson_sampling_and_by_the_mean():
    from skfilter.decision import recommend

    rng = np.random.default_rng(0)
    users, items = rng.integers(0, 10, 800), rng.integers(0, 6, 800)
    X = np.column_stack([users, items]).astype(object)
    reg = FactorizationRegressor(model="mf", n_factors=2, random_state=0).fit(X, items + 0.3 * rng.normal(size=800))
    cand = np.array([[3, item] for item in range(6)], dtype=object)
    np.testing.assert_array_equal(recommend(reg, cand, n=3, method="mean"), [5, 4, 3])
    picks = [recommend(reg, cand, random_state=s)[0] for s in range(30)]
    assert set(picks) <= {3, 4, 5} and picks.count(5) > 15  # well learned: Thompson mostly exploits
    # a never-seen item is uncertain: Thompson explores it sometimes, the mean rarely ranks it first
    cand_new = np.vstack([cand, np.array([[3, "new"]], dtype=object)])
    explored = [recommend(reg, cand_new, random_state=s)[0] for s in range(200)]
    assert 6 in explored
    # the draw is the model's: the same seed gives the same ranking
    np.testing.assert_array_equal(recommend(reg, cand, n=6, random_state=7), recommend(reg, cand, n=6, random_state=7))
    clicks = (items >= 4).astype(int)
    clf = FactorizationClassifier(model="mf", n_factors=2, random_state=0).fit(X, clicks)
    assert recommend(clf, cand, method="mean")[0] in (4, 5)
    assert recommend(clf, cand, method="mean", positive_class=0)[0] in (0, 1, 2, 3)
    with pytest.raises(ValueError, match="positive_class"):
        recommend(clf, cand, positive_class="click")


def test_the_user_guide_page_runs():
    """The code of doc/user_guide/factorization.md runs as written and learns what it says."""
    import pathlib
    import re

    page = pathlib.Path(__file__).resolve().parents[1] / "doc" / "user_guide" / "factorization.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    assert len(blocks) == 3
    ns: dict = {}
    exec(compile(blocks[0], str(page), "exec"), ns)  # noqa: S102 - our own documentation
    assert ns["reg"].entity_columns_ == (0, 1)  # integer ids in an array: ids
    exec(compile("\n".join(blocks[1:]), str(page), "exec"), ns)  # noqa: S102
    assert ns["reg"].entity_columns_ == (0, 1)  # a string and a categorical column; the float hour is context
    rating, mean, std = ns["rating"], ns["mean"], ns["std"]
    assert np.sqrt(np.mean((mean - rating[2500:]) ** 2)) < 0.7 * rating.std()
    assert 0.85 < np.mean(np.abs(mean - rating[2500:]) < 2 * std)
    assert ns["reg"].n_samples_seen_ == 3000


@pytest.mark.parametrize("make", [
    lambda: FactorizationRegressor(model="mf", n_factors=2, random_state=0),
    lambda: FactorizationRegressor(model="fm", n_factors=2, half_life=40, random_state=0),
    lambda: FactorizationClassifier(model="cp", n_factors=2, random_state=0),
])
def test_the_compiled_path_of_fit_equals_the_torch_path(make):
    from skfilter.kernels import compiled_kernels

    users, items, y = _ratings(n=300)
    X = np.column_stack([users, items, users % 7]).astype(object) if "cp" in repr(make()) else \
        np.column_stack([users, items]).astype(object)
    target = (y > 3).astype(int) if is_classifier_name(make()) else y
    with compiled_kernels(True):
        fast = make().fit(X[:200], target[:200]).partial_fit(X[200:], target[200:])
    with compiled_kernels(False):
        slow = make().fit(X[:200], target[:200]).partial_fit(X[200:], target[200:])
    out = "predict_proba" if is_classifier_name(fast) else "predict"
    np.testing.assert_allclose(getattr(fast, out)(X[:50]), getattr(slow, out)(X[:50]), rtol=1e-9, atol=1e-12)
    assert fast.n_samples_seen_ == slow.n_samples_seen_ == 300


def is_classifier_name(est):
    return type(est).__name__.endswith("Classifier")


@pytest.mark.parametrize("half_life", [None, 30.0])
def test_pickling_mid_stream_continues_the_stream_exactly(half_life):
    import pickle

    users, items, y = _ratings(n=200)
    X = np.column_stack([users, items]).astype(object)
    reg = FactorizationRegressor(model="mf", n_factors=2, half_life=half_life, random_state=0).fit(X[:100], y[:100])
    twin = pickle.loads(pickle.dumps(reg))
    reg.partial_fit(X[100:], y[100:])
    twin.partial_fit(X[100:], y[100:])
    np.testing.assert_array_equal(twin.predict(X[:20]), reg.predict(X[:20]))
    np.testing.assert_array_equal(twin.sample_y(X[:3], 4, random_state=0), reg.sample_y(X[:3], 4, random_state=0))


def test_numeric_context_in_one_block_or_one_entity_per_column():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 4))
    y = X @ [1.0, -1.0, 0.5, 0.0] + 0.1 * rng.normal(size=150)
    joint = FactorizationRegressor(model="glm", context_blocks="joint", random_state=0).fit(X, y)
    per_column = FactorizationRegressor(model="glm", context_blocks="per-column", random_state=0).fit(X, y)
    assert list(joint.filter_.tables) == ["context", "bias"]
    assert list(per_column.filter_.tables) == [f"context {j}" for j in range(4)] + ["bias"]
    # one block over the weights of a linear-Gaussian model: a correlated posterior; per column: not
    assert np.abs(np.asarray(joint.filter_.tables["context"].cov[0]) - np.diag(np.diag(
        np.asarray(joint.filter_.tables["context"].cov[0])))).max() > 1e-6
    for est in (joint, per_column):
        assert est.score(X, y) > 0.9
    with pytest.raises(ValueError, match="per-column"):
        FactorizationRegressor(model="mf", entity_columns=[0, 1], context_blocks="per-column").fit(
            np.column_stack([X[:, :2].round().astype(int), X[:, 2]]), y)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_cuda_factorization_matches_the_cpu():
    users, items, y = _ratings(n=200)
    X = np.column_stack([users, items]).astype(object)
    cpu = FactorizationRegressor(model="mf", n_factors=2, random_state=0, dtype="float64").fit(X, y)
    gpu = FactorizationRegressor(model="mf", n_factors=2, random_state=0, dtype="float64", device="cuda").fit(X, y)
    np.testing.assert_allclose(gpu.predict(X[:20]), cpu.predict(X[:20]), rtol=1e-8)


def test_predictions_are_for_the_next_event_under_drift():
    """``predict`` brings the blocks to the next step, the one the next update learns at."""
    users, items, y = _ratings(n=300)
    X = np.column_stack([users, items]).astype(object)
    reg = FactorizationRegressor(model="mf", n_factors=2, half_life=5, drift_variance=0.5, random_state=0).fit(X, y)
    f = reg.filter_
    u, i = reg.filter_.tables["column 0"].ids[users[0]], reg.filter_.tables["column 1"].ids[items[0]]
    nxt = [f._predicted(name, np.array([row]), f.time + 1, write=False)
           for name, row in (("column 0", u), ("column 1", i), ("bias", 0))]
    mu_u, mu_v, bias = (s["mean"][0].numpy() for s in nxt)
    expected = bias[0] + mu_u[0] + mu_v[0] + mu_u[1:] @ mu_v[1:]
    np.testing.assert_allclose(reg.predict(X[:1])[0], expected, rtol=1e-10)


def test_warm_start_n_iter_and_a_failed_refit_keeps_the_fitted_model():
    users, items, y = _ratings(n=200)
    X = np.column_stack([users, items]).astype(object)
    reg = FactorizationRegressor(model="mf", n_factors=2, n_epochs=2, random_state=0).fit(X[:100], y[:100])
    assert reg.n_iter_ == 2 and reg.n_samples_seen_ == 200
    reg.partial_fit(X[100:], y[100:])
    assert reg.n_iter_ == 3 and reg.n_samples_seen_ == 300
    warm = FactorizationRegressor(model="mf", n_factors=2, warm_start=True, random_state=0).fit(X[:100], y[:100])
    warm.fit(X[100:], y[100:])  # continues: as partial_fit
    cold = FactorizationRegressor(model="mf", n_factors=2, random_state=0).fit(X[:100], y[:100])
    cold.partial_fit(X[100:], y[100:])
    np.testing.assert_array_equal(warm.predict(X[:10]), cold.predict(X[:10]))
    assert warm.n_iter_ == 2
    before, filt = cold.predict(X[:10]), cold.filter_
    with pytest.raises(ValueError):  # a refit with bad targets: the fitted model stays
        cold.fit(X[:5], [1.0, 2.0, np.nan, 3.0, 4.0])
    assert cold.filter_ is filt and cold.n_samples_seen_ == 200
    np.testing.assert_array_equal(cold.predict(X[:10]), before)


LIKELIHOODS = ("gaussian", "poisson", "bernoulli", "categorical")


def _make(likelihood, half_life, model):
    kwargs = dict(model=model, n_factors=2, half_life=half_life, random_state=0)
    if likelihood in ("gaussian", "poisson"):
        return FactorizationRegressor(likelihood=likelihood, **kwargs)
    return FactorizationClassifier(**kwargs)


def _targets(likelihood, users, items, rng):
    score = np.sin(users) * (items - 2) / 2
    if likelihood == "gaussian":
        return score + 0.1 * rng.normal(size=len(users))
    if likelihood == "poisson":
        return rng.poisson(np.exp(0.5 * score))
    if likelihood == "bernoulli":
        return (score > 0).astype(int)
    return np.digitize(score, [-0.5, 0.5])


@pytest.mark.parametrize("likelihood", LIKELIHOODS)
@pytest.mark.parametrize("half_life", [None, 25.0])
@pytest.mark.parametrize("model", ["mf", "fm", "cp", "glm"])
def test_every_model_likelihood_and_dynamics(likelihood, half_life, model):
    """The matrix: fit, predict, draws and pickling mid-stream for every model × likelihood × dynamics."""
    import pickle

    rng = np.random.default_rng(0)
    n = 160
    users, items = rng.integers(0, 8, n), rng.integers(0, 5, n)
    cols = [users, items] + ([users % 3] if model == "cp" else [])
    X = np.column_stack(cols).astype(object)
    y = _targets(likelihood, users, items, rng)
    est = _make(likelihood, half_life, model).fit(X[:100], y[:100])
    twin = pickle.loads(pickle.dumps(est))
    for e in (est, twin):
        e.partial_fit(X[100:], y[100:])
    if isinstance(est, FactorizationClassifier):
        np.testing.assert_array_equal(est.predict_proba(X[:10]), twin.predict_proba(X[:10]))
        draws = est.sample_proba(X[:4], n_samples=3, random_state=0)
        assert draws.shape == (4, len(est.classes_), 3) and np.allclose(draws.sum(1), 1)
        assert est.score(X, y) > 0.5
    else:
        m, s = est.predict(X[:10], return_std=True)
        np.testing.assert_array_equal(m, twin.predict(X[:10]))
        assert np.all(np.isfinite(m)) and np.all(s > 0)
        assert est.sample_y(X[:4], n_samples=3, random_state=0).shape == (4, 3)
        if likelihood == "poisson":
            assert np.all(m > 0)


@pytest.mark.parametrize("compiled", [True, False])
def test_verbose_shows_a_progress_bar_and_learns_the_same(compiled, capsys):
    from skfilter.kernels import compiled_kernels

    users, items, y = _ratings(n=200)
    X = np.column_stack([users, items]).astype(object)
    with compiled_kernels(compiled):
        quiet = FactorizationRegressor(model="mf", n_factors=2, random_state=0).fit(X, y)
        loud = FactorizationRegressor(model="mf", n_factors=2, random_state=0, verbose=1).fit(X, y)
    assert "FactorizationRegressor" in capsys.readouterr().err
    np.testing.assert_array_equal(loud.predict(X[:10]), quiet.predict(X[:10]))
