"""The compiled factored-covariance step (LRKF, HiLoFi, LoLoFi: skfilter.kernels.factored) against the
torch engine, which is the reference.

Every configuration the kernel serves is fitted twice — compiled and with ``compiled_kernels(False)``
— and the means, the factors of every block (a low-rank factor's rows signed by the same rule on
both paths), the pending process noise, the noise states and the predictions must agree to rounding
(1e-12 relative in float64). Where a test requires the kernel to have served every row, the engine's
``FactoredCovariance.update`` is patched to fail. Steps the kernel hands back (stiff rows, failures,
interrupts) must leave exactly the state the engine leaves.
"""

from __future__ import annotations

import pickle
from unittest import mock

import numpy as np
import pytest
import torch

from skfilter import (BOCDRegressor, HiLoFiClassifier, HiLoFiRegressor, LoLoFiClassifier, LoLoFiRegressor,
                      LRKFClassifier, LRKFRegressor, WoLFRegressor, stepping)
from skfilter.exceptions import FilterStepError
from skfilter.kernels import AVAILABLE, compiled_kernels
from skfilter.posteriors import FactoredCovariance

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="numba is not installed: no compiled kernels")


def _regression(n=60, d=3, outputs=1, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    f = np.sin(X[:, :1]) + 0.5 * X[:, 1:2] * np.arange(1, outputs + 1)
    y = f + 0.1 * rng.normal(size=(n, outputs))
    return X, (y[:, 0] if outputs == 1 else y)


def _classification(n=60, d=4, classes=3, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.digitize(X[:, 0] + 0.5 * X[:, 1], np.linspace(-1, 1, classes - 1))


def _fit_both(make, X, y, fit_kw=None):
    """``(compiled, torch)``: the estimator fitted with and without the kernels; the compiled fit
    must not run the engine's update."""
    fit_kw = fit_kw or {}
    with compiled_kernels(False):
        ref = make().fit(X, y, **fit_kw)
    used = AssertionError("the torch engine's factored update ran")
    with compiled_kernels(True), mock.patch.object(FactoredCovariance, "update", side_effect=used):
        est = make().fit(X, y, **fit_kw)
    return est, ref


def _close(a, b, rtol):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(1.0, float(np.abs(b).max()) if b.size else 1.0))


def _assert_same_belief(a, b, rtol):
    assert type(a) is type(b)
    assert a.mean.shape == b.mean.shape and a.mean.dtype == b.mean.dtype
    _close(a.mean, b.mean, rtol)
    _close(a.pending, b.pending, rtol)
    assert len(a.factors) == len(b.factors)
    for x, y in zip(a.factors, b.factors):  # low-rank rows signed alike on both paths (best_rank_factor)
        assert x.shape == y.shape and x.dtype == y.dtype
        _close(x, y, rtol)


def _assert_same_state(a, b, rtol=1e-12):
    sa, sb = a.filter_state_, b.filter_state_
    assert sa.n_seen == sb.n_seen
    _assert_same_belief(sa.belief, sb.belief, rtol)
    if isinstance(sb.noise, dict):
        for key in sb.noise:
            assert sa.noise[key].shape == sb.noise[key].shape and sa.noise[key].dtype == sb.noise[key].dtype
            _close(sa.noise[key], sb.noise[key], rtol)


def _assert_same_predictions(a, b, X, rtol=1e-12):
    if hasattr(b, "predict_proba"):
        np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(X), rtol=rtol, atol=rtol)
    else:
        ma, sa = a.predict(X, return_std=True)
        mb, sb = b.predict(X, return_std=True)
        _close(ma, mb, rtol)
        _close(sa, sb, rtol)


#: every kind of block: LRKF (a low-rank factor with +q), HiLoFi (+ a Cholesky factor, with and
#: without the exact process noise), LoLoFi (two low-rank factors without +q); a rank at or above
#: the block size (the exact surrogate, √q I appended); the other initialisations
STRUCTURES = {
    "lrkf": lambda **kw: LRKFRegressor(rank=3, **kw),
    "hilofi": lambda **kw: HiLoFiRegressor(hidden_rank=3, **kw),
    "hilofi-exact-noise": lambda **kw: HiLoFiRegressor(hidden_rank=3, exact_process_noise=True, **kw),
    "lolofi": lambda **kw: LoLoFiRegressor(hidden_rank=3, last_rank=4, **kw),
    "lrkf-full-rank": lambda **kw: LRKFRegressor(rank=40, **kw),
    "lolofi-last-full-rank": lambda **kw: LoLoFiRegressor(hidden_rank=2, last_rank=12, **kw),
    "lrkf-coordinates": lambda **kw: LRKFRegressor(rank=3, init="coordinates", **kw),
    "hilofi-zero": lambda **kw: HiLoFiRegressor(hidden_rank=3, init="zero", **kw),
}
SETTINGS = {
    "fixed-noise": dict(obs_variance=0.05, prior_variance=0.5, process_noise=0.0),
    "auto": dict(),
    "adaptive": dict(obs_variance="adaptive", prior_variance=0.3),
    "robust": dict(obs_variance="robust"),
    "decay+process-noise": dict(decay=0.995, process_noise=1e-3, obs_variance="adaptive"),
    "batch-3": dict(batch_size=3),
}
#: the structures run under every setting; the others under two
MAIN = ("lrkf", "hilofi", "lolofi")
CASES = [(s, k) for s in STRUCTURES for k in SETTINGS if s in MAIN or k in ("auto", "decay+process-noise")]


@pytest.mark.parametrize("structure,setting", CASES)
def test_regressor_kernel_equals_torch_engine(structure, setting):
    X, y = _regression()
    make = lambda: STRUCTURES[structure](hidden_layer_sizes=(5,), random_state=0,  # noqa: E731
                                         **SETTINGS[setting])
    est, ref = _fit_both(make, X, y)
    _assert_same_state(est, ref)
    _assert_same_predictions(est, ref, X[:7])


@pytest.mark.parametrize("make", [
    lambda: HiLoFiRegressor(hidden_layer_sizes=(5,), hidden_rank=3, process_noise=1e-3, last_process_noise=1e-2,
                            random_state=0),
    lambda: LoLoFiRegressor(hidden_layer_sizes=(5,), hidden_rank=3, last_rank=2, process_noise=3e-2,
                            last_process_noise=1e-3, decay=0.99, random_state=0),
], ids=["hilofi", "lolofi"])
def test_process_noise_per_block(make):
    """``last_process_noise``: a per-parameter ``Q``, one value per block in the kernel."""
    X, y = _regression()
    est, ref = _fit_both(make, X, y)
    _assert_same_state(est, ref)


CLASSIFIERS = {
    "lrkf": lambda **kw: LRKFClassifier(rank=3, **kw),
    "hilofi": lambda **kw: HiLoFiClassifier(hidden_rank=3, **kw),
    "lolofi": lambda **kw: LoLoFiClassifier(hidden_rank=3, last_rank=4, **kw),
}


@pytest.mark.parametrize("likelihood", ["adf", "categorical"])
@pytest.mark.parametrize("n_classes", [2, 4])
@pytest.mark.parametrize("structure", list(CLASSIFIERS))
def test_classifier_kernel_equals_torch_engine(structure, n_classes, likelihood):
    """Bernoulli (two classes, exact update), categorical, and assumed density filtering (one logit
    and ``C``: the rows' prior predictive computed in the kernel)."""
    X, y = _classification(classes=n_classes)
    make = lambda: CLASSIFIERS[structure](hidden_layer_sizes=(5,), likelihood=likelihood,  # noqa: E731
                                          random_state=0)
    est, ref = _fit_both(make, X, y)
    _assert_same_state(est, ref)
    _assert_same_predictions(est, ref, X[:9])


@pytest.mark.parametrize("structure", MAIN)
def test_float32_multi_output_and_sample_weights(structure):
    X, Y = _regression(outputs=2)
    w = np.random.default_rng(3).uniform(0.0, 2.0, size=len(X))
    w[5] = 0.0
    make = lambda: STRUCTURES[structure](hidden_layer_sizes=(5,), random_state=0)  # noqa: E731
    est, ref = _fit_both(make, X, Y, {"sample_weight": w})
    _assert_same_state(est, ref)
    _assert_same_predictions(est, ref, X[:5])
    make32 = lambda: STRUCTURES[structure](hidden_layer_sizes=(5,), dtype="float32", random_state=0)  # noqa: E731
    est, ref = _fit_both(make32, X, Y, {"sample_weight": w})
    assert est.filter_state_.belief.mean.dtype == torch.float32
    _assert_same_state(est, ref, rtol=2e-4)


@pytest.mark.parametrize("weighting", ["imq", "predictive-md"])
@pytest.mark.parametrize("structure", ["lrkf", "hilofi"])
def test_wolf_weighting_on_the_kernel_equals_torch_engine(structure, weighting):
    X, y = _regression()
    y[::9] += 8.0  # outliers
    make = lambda: WoLFRegressor(STRUCTURES[structure](hidden_layer_sizes=(5,), random_state=0),  # noqa: E731
                                 weighting=weighting)
    est, ref = _fit_both(make, X, y)
    _assert_same_state(est.estimator_, ref.estimator_)
    _assert_same_predictions(est, ref, X[:7])


@pytest.mark.parametrize("reset", ["prior", "moment-matched"])
@pytest.mark.parametrize("structure", ["lrkf", "hilofi"])
def test_run_length_hypotheses_on_the_kernel_equal_torch_engine(structure, reset):
    """BOCD over a factored base: RL[K]-PR in the run-length kernel (skfilter/kernels/runlength.py;
    tests/test_runlength_kernels.py has its matrix), the moment-matched reset's candidates (a stack of
    K beliefs, one step per row) in the factored kernel's hypotheses loop; the run-length posterior,
    beliefs and predictions equal the engine's."""
    X, y = _regression()
    y[30:] += 3.0  # a changepoint
    make = lambda: BOCDRegressor(STRUCTURES[structure](hidden_layer_sizes=(5,), random_state=0),  # noqa: E731
                                 n_hypotheses=4, reset=reset)
    est, ref = _fit_both(make, X, y)
    ra, rb = est.runlength_state_, ref.runlength_state_
    if reset == "prior":
        assert ra.run_lengths.tolist() == rb.run_lengths.tolist()
        _close(ra.filter.log_weights.exp(), rb.filter.log_weights.exp(), 1e-10)
        _assert_same_belief(ra.filter.belief, rb.filter.belief, 1e-10)
    # (the moment-matched reset makes hypotheses of tied weights and equal beliefs, kept by a
    # rounding-level difference: the same mixture, other run-length labels)
    assert abs(ra.log_evidence - rb.log_evidence) <= 1e-10 * max(1.0, abs(rb.log_evidence))
    _assert_same_predictions(est, ref, X[:7], rtol=1e-10)


def test_row_by_row_calls_equal_one_call_and_pickles():
    """One row per call from row 0 (the kernel resuming its buffers), a pickled copy continuing, and
    one call over the rows: the same state."""
    X, y = _regression(40)
    make = lambda: HiLoFiRegressor(hidden_layer_sizes=(5,), hidden_rank=3, random_state=0)  # noqa: E731
    with compiled_kernels(False):
        ref = make().fit(X, y)
    est = make()
    for i in range(20):
        est.partial_fit(X[i:i + 1], y[i:i + 1])
    est = pickle.loads(pickle.dumps(est))
    for i in range(20, 40):
        est.predict(X[i:i + 1])
        est.partial_fit(X[i:i + 1], y[i:i + 1])
    _assert_same_state(est, ref, rtol=1e-11)


def test_stiff_row_is_handed_to_the_torch_engine():
    """A row of 1e7 makes ``S`` stiff: the kernel stops before it and the engine takes its QR form;
    the rows before it are the kernel's."""
    X, y = _regression(50)
    X[25] = 1e7
    make = lambda: LRKFRegressor(hidden_layer_sizes=(5,), rank=3, obs_variance=0.01, prior_variance=1.0,  # noqa: E731
                                 random_state=0)
    calls = []
    original = FactoredCovariance.update

    def counting(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    with compiled_kernels(False):
        ref = make().fit(X, y)
    before = stepping.handed_back()
    with mock.patch.object(FactoredCovariance, "update", counting):
        est = make().fit(X, y)
    assert 1 <= len(calls) <= 25 and stepping.handed_back() > before
    _assert_same_state(est, ref, rtol=1e-9)


def test_numerical_failure_keeps_the_last_good_belief():
    """Logits beyond the bound raise the engine's error with the rows before kept, as there; the
    next good row is learned on both paths alike."""
    X, y = _classification(40, classes=3)
    X = X * 300.0
    make = lambda: HiLoFiClassifier(hidden_layer_sizes=(5,), hidden_rank=2, prior_variance=1e4,  # noqa: E731
                                    likelihood="categorical", random_state=0)
    outcomes = []
    for on in (False, True):
        est = make()
        with compiled_kernels(on):
            with pytest.raises(FilterStepError) as info:
                est.fit(X, y)
        outcomes.append((est, str(info.value)))
    (ref, msg_ref), (est, msg) = outcomes
    assert msg == msg_ref
    assert est.n_samples_seen_ == ref.n_samples_seen_
    _assert_same_state(est, ref, rtol=1e-10)


def test_interrupt_between_kernel_calls_keeps_the_rows_learned():
    X, y = _regression(50)
    make = lambda: LoLoFiRegressor(hidden_layer_sizes=(5,), hidden_rank=2, last_rank=3, prior_variance=0.5,  # noqa: E731
                                   obs_variance=0.1, random_state=0)
    original = stepping.factored_rows
    calls = [0]

    def interrupted(*args):
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        return original(*args)

    est = make()
    with mock.patch.object(stepping, "CHUNK_ROWS", 8), mock.patch.object(stepping, "factored_rows", interrupted):
        with pytest.raises(KeyboardInterrupt):
            est.fit(X, y)
    assert est.n_samples_seen_ == 16
    with compiled_kernels(False):
        ref = make().fit(X[:16], y[:16])
    _assert_same_state(est, ref)


def test_triangular_update_is_the_qr_of_the_stack():
    """:func:`~skfilter.kernels.linalg.triangular_update_into` (Givens rotations) against the
    Householder QR of the stack it replaces."""
    from skfilter.kernels.linalg import triangular_update_into
    from skfilter.posteriors.factors import stacked_qr_factor

    rng = np.random.default_rng(0)
    for D, m in [(1, 1), (5, 1), (7, 3), (12, 4)]:
        U = np.triu(rng.normal(size=(D, D)))
        W, V = rng.normal(size=(m, D)), rng.normal(size=(m, D))
        W[0, -1] = 0.0  # a zero entry skips its rotation
        expected = stacked_qr_factor(torch.from_numpy(U + W.T @ V), torch.from_numpy(V)).numpy()
        out = np.empty((D, D))
        triangular_update_into(U, W.copy(), V, out)
        np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)
        assert np.all(np.diag(out) >= 0) and np.allclose(np.tril(out, -1), 0.0)


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("make", [
    lambda **kw: HiLoFiClassifier(hidden_rank=3, **kw),
    lambda **kw: LoLoFiClassifier(hidden_rank=3, last_rank=4, **kw),
], ids=["hilofi", "lolofi"])
def test_moment_matched_likelihood_on_the_kernel(make, n_classes):
    """The moment-matched categorical (App. G.1.1, one logit and ``C``) whitened in the kernel."""
    X, y = _classification(classes=n_classes)
    est, ref = _fit_both(lambda: make(hidden_layer_sizes=(5,), likelihood="moment-matched", random_state=0), X, y)
    _assert_same_state(est, ref)
    _assert_same_predictions(est, ref, X[:9])


@pytest.mark.parametrize("r, m, zero_rows, shift", [(3, 1, 0, 0.0), (5, 3, 0, 0.1), (4, 2, 2, 0.0), (3, 1, 3, 0.2),
                                                    (6, 4, 1, 0.05)])
def test_orthogonal_update_is_the_projection_of_the_stack(r, m, zero_rows, shift):
    """:func:`~skfilter.kernels.factored.orthogonal_update_into` (the SVD through the span of the
    factor's orthogonal rows and the gain) against the engine's ``P_{d,+a}`` of the whole stack,
    rows signed alike; zero rows of the factor (unsupported directions) and a zero factor included."""
    from skfilter.kernels.factored import orthogonal_update_into
    from skfilter.posteriors.factors import best_rank_factor

    rng = np.random.default_rng(r * 10 + m)
    D = 17
    O = np.linalg.qr(rng.normal(size=(D, r)))[0].T  # orthonormal rows
    B = np.sort(rng.uniform(0.1, 2.0, size=r))[::-1, None] * O
    B[r - zero_rows:] = 0.0
    H, Kt = rng.normal(size=(m, D)), rng.normal(size=(m, D)) * 0.3
    BH = B @ H.T
    expected = best_rank_factor(torch.from_numpy(B - BH @ Kt), torch.from_numpy(Kt), rank=r, shift=shift).numpy()
    out = np.empty((r, D))
    orthogonal_update_into(np.ascontiguousarray(B), BH, Kt, shift, np.finfo(np.float64).eps, out)
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("structure", ["lrkf", "hilofi"])
def test_sample_y_is_the_same_on_both_paths(structure):
    """Thompson draws ``θ = μ + Σ_b B_bᵀ z_b`` depend on the factors' rows, which both paths sign by
    the same rule: the same draws for the same seed, compiled or not."""
    X, y = _regression()
    est, ref = _fit_both(lambda: STRUCTURES[structure](hidden_layer_sizes=(5,), random_state=0), X, y)
    a = est.sample_y(X[:6], n_samples=4, random_state=3)
    b = ref.sample_y(X[:6], n_samples=4, random_state=3)
    _close(a, b, 1e-10)


# ---------------------------------------------------------------------------------------------
# the compiled predictive (kernels.predictive.predict_factored_rows / probit_factored_rows)
# ---------------------------------------------------------------------------------------------
def _predict_both(est, X):
    """``(compiled, torch)`` predictions of a fitted estimator; the compiled ones must not take the
    structure's torch predictive."""
    method = est.predict_proba if hasattr(est, "predict_proba") else (lambda Z: est.predict(Z, return_std=True))
    with compiled_kernels(False):
        ref = method(X)
    used = AssertionError("the torch predictive ran")
    with mock.patch.object(FactoredCovariance, "quadratic_form", side_effect=used), \
            mock.patch.object(FactoredCovariance, "quadratic_diagonal", side_effect=used):
        got = method(X)
    return got, ref


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("structure", list(STRUCTURES))
def test_predictive_on_the_kernel_equals_torch_engine(structure, dtype):
    X, y = _regression(outputs=2 if structure == "lolofi" else 1)
    est = STRUCTURES[structure](random_state=0, dtype=dtype, process_noise=1e-3).fit(X[:40], y[:40])
    (m1, s1), (m2, s2) = _predict_both(est, X[40:])
    rtol = 1e-12 if dtype == "float64" else 2e-5
    _close(m1, m2, rtol)
    _close(s1, s2, rtol)


@pytest.mark.parametrize("n_classes", [2, 4])
@pytest.mark.parametrize("structure", list(CLASSIFIERS))
def test_class_probabilities_on_the_kernel_equal_torch_engine(structure, n_classes):
    X, y = _classification(classes=n_classes)
    est = CLASSIFIERS[structure](random_state=0).fit(X, y)
    p1, p2 = _predict_both(est, X)
    np.testing.assert_allclose(p1, p2, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(p1.sum(1), 1.0, rtol=1e-12)
