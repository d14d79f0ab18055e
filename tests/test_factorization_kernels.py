"""The compiled DEKF of factorization models (skfilter.kernels.factorization) against the torch
reference: ``run_events_compiled`` must learn a chunk of events exactly as the same number of
``FactorizationFilter.step`` calls (every table field, the entity ids and creation order, hence the
random prior means, the time and the noise state), and fail as ``step`` does."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
import torch

from skfilter import FactorizationClassifier, FactorizationRegressor
from skfilter.exceptions import FilterStepError
from skfilter.factorization.entities import EntityPrior
from skfilter.factorization.model import FactorizationFilter, Slot
from skfilter.factorization.signals import CPFactorization, FactorizationMachine
from skfilter.kernels import AVAILABLE, compiled_kernels
from skfilter.likelihoods import Bernoulli, Gaussian, Poisson

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="numba is not installed: no compiled kernels")

if AVAILABLE:
    from skfilter.kernels.factorization import run_events_compiled, serves

N_FIT, N = 4, 36

# (model, id columns, context columns, estimator keywords)
SIGNALS = {
    "glm": ("glm", 2, 0, {}),
    "glm-ctx": ("glm", 1, 2, {}),
    "mf": ("mf", 2, 0, {}),
    "mf-nobias-ctx": ("mf", 2, 2, {"biases": False}),
    "mf-ctx": ("mf", 2, 3, {}),
    "mf-nobias": ("mf", 2, 0, {"biases": False}),
    "cp3": ("cp", 3, 0, {}),
    "cp3-ctx": ("cp", 3, 2, {}),
    "cp4-nobias": ("cp", 4, 0, {"biases": False}),
    "fm": ("fm", 2, 0, {}),
    "fm-ctx": ("fm", 2, 3, {}),
    "fm-1id-ctx": ("fm", 1, 2, {}),
}
LIKELIHOODS = ("adaptive", "fixed", "bernoulli", "bernoulli-adf", "poisson")
DYNAMICS = (None, "learned", "fixed")


def _data(n, n_ids, n_ctx, likelihood, seed=0, n_entities=9):
    rng = np.random.default_rng(seed)
    X = np.empty((n, n_ids + n_ctx), dtype=object)
    for j in range(n_ids):  # the same id range in every column: the same id in two tables
        X[:, j] = rng.integers(0, n_entities, n).tolist()
    for j in range(n_ctx):
        X[:, n_ids + j] = rng.normal(size=n).tolist()
    if likelihood.startswith("bernoulli"):
        y = (rng.random(n) < 0.4).astype(int)
        y[:2] = [0, 1]
    elif likelihood == "poisson":
        y = rng.poisson(2.0, n).astype(float)
    else:
        y = 1.5 + rng.normal(size=n)
    return X, y


def _estimator(signal, likelihood, dynamic, dtype, n_factors=2, obs_variance=0.5):
    model, n_ids, n_ctx, kw = SIGNALS[signal]
    kw = dict(kw, model=model, n_factors=n_factors, entity_columns=list(range(n_ids)), random_state=0, dtype=dtype,
              half_life=None if dynamic is None else 4.0, reference=dynamic or "learned")
    if likelihood == "bernoulli":  # the EKF update
        return FactorizationClassifier(likelihood="categorical", **kw)
    if likelihood == "bernoulli-adf":  # the assumed-density update (the default)
        return FactorizationClassifier(**kw)
    if likelihood == "poisson":
        return FactorizationRegressor(likelihood="poisson", **kw)
    return FactorizationRegressor(obs_variance="auto" if likelihood == "adaptive" else obs_variance, **kw)


def _events(est, X, y):
    """``(slot_ids, values, Y)`` of the rows, as the estimator hands them to its filter."""
    ids, context = est._split_columns(X, False)
    Y = torch.as_tensor(est._encode(y, False, None, len(context)), dtype=est.filter_.dtype)
    return est._slot_ids(ids), est._slot_values(ids, context), Y


def _torch_steps(filt, slot_ids, values, Y, w, start=0, stop=None):
    stop = Y.shape[0] if stop is None else stop
    for i in range(start, stop):
        filt.step([None if s is None else s[i] for s in slot_ids], [v[i] for v in values], Y[i],
                  1.0 if w is None else float(w[i]))


def _chunk(slot_ids, values, Y, w, start, stop):
    return ([None if s is None else s[start:stop] for s in slot_ids], [v[start:stop] for v in values], Y[start:stop],
            None if w is None else w[start:stop])


def _assert_same(f1, f2, rtol):
    assert f1.time == f2.time
    for name, a in f1.tables.items():
        b = f2.tables[name]
        assert a.n_entities == b.n_entities, name
        assert list(a.ids.items()) == list(b.ids.items()), name
        assert a._rng.bit_generator.state == b._rng.bit_generator.state, name
        m = a.n_entities
        for field in a._fields():
            x, z = getattr(a, field)[:m], getattr(b, field)[:m]
            assert x.dtype == z.dtype, (name, field)
            if field == "last_time":
                assert torch.equal(x, z), (name, field)
                continue
            x, z = x.double(), z.double()
            scale = float(x.abs().max()) + 1e-30
            err = float((x - z).abs().max()) / scale
            assert err <= rtol, (name, field, err)
    if f1.noise is None:
        assert f2.noise is None
    else:
        for k, v in f1.noise.items():
            assert f2.noise[k].shape == v.shape and f2.noise[k].dtype == v.dtype, k
            torch.testing.assert_close(f2.noise[k].double(), v.double(), rtol=rtol, atol=0.0)


def _weights(n, seed):
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.3, 2.0, n)
    w[rng.random(n) < 0.2] = 0.0
    w[:3] = [1.0, 0.0, 2.5]
    return w


def _check(signal, likelihood, dynamic, dtype, weighted, split=True):
    model, n_ids, n_ctx, _ = SIGNALS[signal]
    X, y = _data(N_FIT + N, n_ids, n_ctx, likelihood, seed=hash((signal, likelihood)) % 1000)
    est = _estimator(signal, likelihood, dynamic, dtype)
    with compiled_kernels(False):
        est.fit(X[:N_FIT], y[:N_FIT])
    f1 = est.filter_
    f2 = copy.deepcopy(f1)
    assert serves(f2)
    slot_ids, values, Y = _events(est, X[N_FIT:], y[N_FIT:])
    w = _weights(N, 1) if weighted else None
    _torch_steps(f1, slot_ids, values, Y, w)
    cut = N // 3 if split else N  # two chunks: entities seen in the first are known to the second
    assert run_events_compiled(f2, *_chunk(slot_ids, values, Y, w, 0, cut)) == cut
    if split:
        assert run_events_compiled(f2, *_chunk(slot_ids, values, Y, w, cut, N)) == N - cut
    _assert_same(f1, f2, 1e-10 if dtype == "float64" else 2e-4)


@pytest.mark.parametrize("signal", list(SIGNALS))
@pytest.mark.parametrize("likelihood", LIKELIHOODS)
def test_signals_and_likelihoods(signal, likelihood):
    i = list(SIGNALS).index(signal) + LIKELIHOODS.index(likelihood)
    _check(signal, likelihood, DYNAMICS[i % 3], "float64", weighted=i % 2 == 1)


@pytest.mark.parametrize("likelihood, dynamic, dtype, weighted",
                         list(itertools.product(LIKELIHOODS, DYNAMICS, ("float64", "float32"), (False, True))))
def test_dynamics_dtypes_weights(likelihood, dynamic, dtype, weighted):
    i = LIKELIHOODS.index(likelihood) + 2 * DYNAMICS.index(dynamic) + int(weighted)
    _check(list(SIGNALS)[i % len(SIGNALS)], likelihood, dynamic, dtype, weighted, split=i % 2 == 0)


def _direct_filter(signal, bias, half_life, dtype=torch.float64, likelihood=None):
    """A FactorizationFilter built by hand: two id slots and a context slot of 2 features."""
    rng = np.random.default_rng(3)

    def prior(slot, n_features):
        K = n_features * signal.params_per_feature(slot)
        return EntityPrior(np.zeros(K), rng.uniform(0.2, 0.5, K), jitter=np.full(K, 0.3))

    slots = [Slot("user", 1, False, prior(0, 1)), Slot("friend", 1, False, prior(1, 1)),
             Slot("context", 2, True, prior(2, 2))]
    bias_prior = EntityPrior([0.5], [1.0]) if bias else None
    return FactorizationFilter(signal, slots, 1, likelihood or Gaussian(0.7), bias_prior=bias_prior,
                               half_life=half_life, drift_variance=0.2, dtype=dtype, seed=5)


def _direct_events(n, seed=0, dtype=torch.float64):
    rng = np.random.default_rng(seed)
    users = rng.integers(0, 6, n).tolist()
    slot_ids = [users, users[::-1], None]  # the same entity type, different tables
    values = [torch.ones(n, 1, dtype=dtype), torch.ones(n, 1, dtype=dtype),
              torch.as_tensor(rng.normal(size=(n, 2)), dtype=dtype)]
    Y = torch.as_tensor(1.0 + rng.normal(size=(n, 1)), dtype=dtype)
    return slot_ids, values, Y


@pytest.mark.parametrize("linear, bias, half_life", [(False, True, None), (False, False, 3.0), (True, False, None)])
def test_direct_fm_without_linear_or_bias(linear, bias, half_life):
    f1 = _direct_filter(FactorizationMachine(2, linear=linear), bias, half_life)
    f2 = copy.deepcopy(f1)
    assert serves(f2)
    events = _direct_events(30)
    _torch_steps(f1, *events, None)
    run_events_compiled(f2, *events, None)
    _assert_same(f1, f2, 1e-10)


def test_direct_cp_with_context_and_poisson():
    f1 = _direct_filter(CPFactorization(2, order=2, context=True), True, 2.0, likelihood=Poisson())
    f2 = copy.deepcopy(f1)
    slot_ids, values, Y = _direct_events(30)
    Y = Y.abs().round()
    _torch_steps(f1, slot_ids, values, Y, None)
    run_events_compiled(f2, slot_ids, values, Y, None)
    _assert_same(f1, f2, 1e-10)


def test_not_served():
    X, y = _data(12, 2, 1, "adaptive")
    fitted = lambda est: est.fit(X, y).filter_  # noqa: E731
    with compiled_kernels(False):
        mf = fitted(FactorizationRegressor(model="mf", n_factors=2, entity_columns=[0, 1], random_state=0))
        assert not serves(mf)  # kernels off
        iterated = fitted(FactorizationRegressor(model="mf", n_factors=2, entity_columns=[0, 1], iterations=2))
        fm3 = fitted(FactorizationRegressor(model="fm", order=3, n_factors=2, entity_columns=[0, 1]))
        labels = np.arange(12) % 3
        multiclass = FactorizationClassifier(model="mf", n_factors=2, entity_columns=[0, 1]).fit(X, labels).filter_
    assert serves(mf)
    assert not serves(iterated)
    assert not serves(fm3)
    assert multiclass.d == 3 and serves(multiclass)  # (the multiclass kernel: tests/test_factorization_multiclass.py)
    bernoulli3 = copy.deepcopy(multiclass)
    bernoulli3.likelihood = Bernoulli()  # (a one-logit likelihood on three logits)
    assert not serves(bernoulli3)
    robust = copy.deepcopy(mf)
    robust.likelihood = Gaussian("adaptive", robust_threshold=4.0)
    assert not serves(robust)
    on_gpu = copy.deepcopy(mf)
    on_gpu.device = torch.device("cuda")  # (as a CUDA filter reports it; no GPU needed)
    assert not serves(on_gpu)
    half = copy.deepcopy(mf)
    half.dtype = torch.float16
    assert not serves(half)
    with pytest.raises(ValueError, match="does not serve"):
        run_events_compiled(fm3, [[0], [1]], [torch.ones(1, 1, dtype=torch.float64)] * 2,
                            torch.zeros(1, 1, dtype=torch.float64), None)


@pytest.mark.parametrize("dynamic, fail_at", [("learned", 9), (None, 0), ("fixed", 17)])
def test_failure_keeps_the_events_before(dynamic, fail_at):
    X, y = _data(N_FIT + 30, 2, 1, "fixed", seed=4)
    # new entities at and after the failing event: ids 100, 101 first seen there
    X[N_FIT + fail_at, 0] = 100
    X[N_FIT + fail_at + 2, 1] = 101
    y = y.copy()
    y[N_FIT + fail_at] = 1e308  # a whitened residual (y − λ)/√r that overflows: a non-finite mean
    est = _estimator("mf-ctx", "fixed", dynamic, "float64", obs_variance=1e-2)
    with compiled_kernels(False):
        est.fit(X[:N_FIT], y[:N_FIT])
    slot_ids, values, Y = _events(est, X[N_FIT:], y[N_FIT:])
    w = np.ones(30)
    reference = copy.deepcopy(est.filter_)
    _torch_steps(reference, slot_ids, values, Y, w, 0, fail_at)
    probe = copy.deepcopy(reference)
    with pytest.raises(FilterStepError):  # the torch step fails there too
        _torch_steps(probe, slot_ids, values, Y, w, fail_at, fail_at + 1)
    f2 = est.filter_
    with pytest.raises(FilterStepError) as failure:
        run_events_compiled(f2, slot_ids, values, Y, w)
    assert failure.value.rows_done == fail_at
    _assert_same(reference, f2, 1e-10)  # the events before kept; sizes, ids, draws, time restored
    assert 100 not in f2.tables["column 0"].ids and 101 not in f2.tables["column 1"].ids
    # and the stream goes on from there as the torch engine's
    keep = [i for i in range(30) if i != fail_at]
    rest = ([None if s is None else [s[i] for i in keep] for s in slot_ids], [v[keep] for v in values], Y[keep],
            w[keep])
    rest = _chunk(*rest, fail_at, len(keep))
    _torch_steps(reference, *rest)
    run_events_compiled(f2, *rest)
    _assert_same(reference, f2, 1e-10)


def test_empty_chunk():
    f = _direct_filter(FactorizationMachine(2), True, None)
    slot_ids, values, Y = _direct_events(0)
    assert run_events_compiled(f, slot_ids, values, Y, None) == 0
    assert f.time == 0
