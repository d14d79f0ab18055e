"""The compiled run-length step (RL[K]-PR over LoFi, the diagonal and full EKF and the factored covariance;
skfilter.kernels.runlength) against the torch engine.

Every configuration the kernel serves is fitted twice — compiled and with ``compiled_kernels(False)``
(the engine's :func:`skfilter.runlength.runlength_step` per row) — and the run lengths, their
weights, the beliefs, the noise states, the log evidence and the one-step-ahead predictions must
agree to rounding. Where a test requires the kernel to have served every row, the engine's
run-length step is patched to fail. Rows the kernel hands back (stiff rows, failures) and interrupts
must leave exactly the state the engine leaves.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from skfilter import (BOCDClassifier, BOCDRegressor, EKFClassifier, EKFRegressor, HiLoFiClassifier, HiLoFiRegressor,
                      LoFiClassifier, LoFiRegressor, LoLoFiClassifier, LoLoFiRegressor, LRKFClassifier, LRKFRegressor,
                      WoLFRegressor, runlength, stepping)
from skfilter._array_ops import Recycler
from skfilter.exceptions import FilterStepError
from skfilter.kernels import AVAILABLE, compiled_kernels
from skfilter.kernels.runlength import keep_order

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="numba is not installed: no compiled kernels")


def _stream(kind, n=70, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    if kind == "regression":
        y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
        y[n // 2:] += 3.0  # a changepoint
        return X, y
    classes = {"binary": 2, "multiclass": 3}[kind]
    score = X[:, 0] + 0.5 * X[:, 1]
    score[n // 2:] *= -1.0  # the relation flips
    return X, np.digitize(score, np.linspace(-0.8, 0.8, classes - 1))


def _close(a, b, rtol=1e-10):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(1.0, float(np.abs(b).max()) if b.size else 1.0))


def _assert_same_mixture(a, b, rtol=1e-10, factor_grams=False):
    """The run-length states of ``a`` and ``b`` agree to ``rtol``; with ``factor_grams`` the factored
    covariance's factors ``B`` through ``Bᵀ B`` (rows defined up to a rotation where singular values
    coincide)."""
    ra, rb = a.runlength_state_, b.runlength_state_
    assert ra.run_lengths.tolist() == rb.run_lengths.tolist()
    assert ra.filter.n_seen == rb.filter.n_seen
    assert ra.filter.log_weights.dtype == rb.filter.log_weights.dtype
    _close(ra.filter.log_weights.exp(), rb.filter.log_weights.exp(), rtol)
    for name in rb.filter.belief._fields:
        x, y = getattr(ra.filter.belief, name), getattr(rb.filter.belief, name)
        if isinstance(y, tuple):  # the factored covariance's factors (rows signed alike on both paths)
            assert len(x) == len(y), name
            for a, b in zip(x, y):
                assert a.shape == b.shape and a.dtype == b.dtype, name
                if factor_grams:
                    a, b = a.transpose(-1, -2) @ a, b.transpose(-1, -2) @ b
                _close(a, b, rtol)
            continue
        if not isinstance(y, torch.Tensor):
            assert x == y, name
            continue
        assert x.shape == y.shape and x.dtype == y.dtype, name
        if name == "low_rank":  # rows are defined up to sign: compare W Wᵀ
            x, y = x.transpose(-1, -2) @ x, y.transpose(-1, -2) @ y
        _close(x, y, rtol)
    if rb.filter.noise is not None:
        for key in rb.filter.noise:
            assert ra.filter.noise[key].shape == rb.filter.noise[key].shape, key
            _close(ra.filter.noise[key], rb.filter.noise[key], rtol)
    assert abs(ra.log_evidence - rb.log_evidence) <= rtol * max(1.0, abs(rb.log_evidence))
    assert abs(ra.changepoint_probability - rb.changepoint_probability) <= rtol


def _fit_both(make, X, y, prequential=True, **fit_kw):
    """``(compiled, engine, compiled predictions, engine predictions)``; the compiled fit must not run
    the engine's run-length step."""
    method = {"method": "predict_proba"} if "classes" in fit_kw else {}
    with compiled_kernels(False):
        ref = make()
        p_ref = ref.prequential_fit_predict(X, y, **method, **fit_kw) if prequential else ref.fit(X, y, **fit_kw)
    used = AssertionError("the engine's run-length step ran")
    with mock.patch.object(runlength, "runlength_step", side_effect=used):
        est = make()
        p = est.prequential_fit_predict(X, y, **method, **fit_kw) if prequential else est.fit(X, y, **fit_kw)
    return est, ref, p, p_ref


#: the base filters the compiled run-length step serves (LoFi, VD-/FD-EKF, full EKF, the factored
#: covariance: LRKF a low-rank factor, HiLoFi a low-rank and a Cholesky factor), small networks
BASES = {
    "lofi": lambda cls, **kw: (LoFiRegressor if cls == "reg" else LoFiClassifier)(hidden_layer_sizes=(6,), rank=3,
                                                                                  random_state=0, **kw),
    "vd": lambda cls, **kw: (EKFRegressor if cls == "reg" else EKFClassifier)(hidden_layer_sizes=(6,), covariance="vd",
                                                                              random_state=0, **kw),
    "fd": lambda cls, **kw: (EKFRegressor if cls == "reg" else EKFClassifier)(hidden_layer_sizes=(6,), covariance="fd",
                                                                              random_state=0, **kw),
    "full": lambda cls, **kw: (EKFRegressor if cls == "reg" else EKFClassifier)(hidden_layer_sizes=(6,),
                                                                                random_state=0, **kw),
    "lrkf": lambda cls, **kw: (LRKFRegressor if cls == "reg" else LRKFClassifier)(hidden_layer_sizes=(6,), rank=3,
                                                                                  random_state=0, **kw),
    "hilofi": lambda cls, **kw: (HiLoFiRegressor if cls == "reg" else HiLoFiClassifier)(hidden_layer_sizes=(6,),
                                                                                        hidden_rank=3,
                                                                                        random_state=0, **kw),
}

REGRESSION = {
    "fixed noise": dict(obs_variance=0.05),
    "auto noise": dict(),
    "adaptive noise": dict(obs_variance="adaptive"),
    "robust noise": dict(obs_variance="robust"),
    "decay and process noise": dict(decay=0.995, process_noise=1e-3),
}


@pytest.mark.parametrize("base, setting, K", [(b, s, 4) for b in BASES for s in REGRESSION]
                         + [(b, "auto noise", 1) for b in BASES])
def test_regression_on_the_kernel_equals_the_engine(base, setting, K):
    X, y = _stream("regression")
    make = lambda: BOCDRegressor(BASES[base]("reg", **REGRESSION[setting]), n_hypotheses=K,  # noqa: E731
                                 hazard=0.05)
    est, ref, p, p_ref = _fit_both(make, X, y)
    _assert_same_mixture(est, ref)
    _close(np.nan_to_num(p), np.nan_to_num(p_ref))
    ma, sa = est.predict(X[:5], return_std=True)
    mb, sb = ref.predict(X[:5], return_std=True)
    _close(ma, mb)
    _close(sa, sb)


@pytest.mark.parametrize("likelihood", ["adf", "categorical"])
@pytest.mark.parametrize("kind", ["binary", "multiclass"])
@pytest.mark.parametrize("base", ["lofi", "vd", "full", "hilofi"])
def test_classification_on_the_kernel_equals_the_engine(base, kind, likelihood):
    X, y = _stream(kind)
    make = lambda: BOCDClassifier(BASES[base]("clf", likelihood=likelihood, process_noise=1e-3),  # noqa: E731
                                  n_hypotheses=3, hazard=0.05)
    est, ref, p, p_ref = _fit_both(make, X, y, classes=np.unique(y))
    _assert_same_mixture(est, ref)
    _close(p, p_ref)
    _close(est.predict_proba(X[:5]), ref.predict_proba(X[:5]))


@pytest.mark.parametrize("base", list(BASES))
def test_sample_weights_float32_and_multi_output(base):
    X, y = _stream("regression")
    w = np.random.default_rng(3).uniform(0.0, 2.0, size=len(y))
    make = lambda: BOCDRegressor(BASES[base]("reg"), n_hypotheses=3, hazard=0.05)  # noqa: E731
    est, ref, _, _ = _fit_both(make, X, y, prequential=False, sample_weight=w)
    _assert_same_mixture(est, ref)
    Y2 = np.column_stack([y, -0.5 * y + 0.1 * X[:, 2]])
    est, ref, p, p_ref = _fit_both(make, X, Y2)
    _assert_same_mixture(est, ref)
    _close(np.nan_to_num(p), np.nan_to_num(p_ref))
    make32 = lambda: BOCDRegressor(BASES[base]("reg", dtype="float32"), n_hypotheses=3, hazard=0.05)  # noqa: E731
    est, ref, _, _ = _fit_both(make32, X, y, prequential=False)
    assert est.runlength_state_.filter.belief.mean.dtype == torch.float32
    _assert_same_mixture(est, ref, rtol=2e-4)


@pytest.mark.parametrize("evidence", ["weighted", "plain"])
@pytest.mark.parametrize("weighting", ["imq", "predictive-md"])
@pytest.mark.parametrize("base", ["lofi", "vd", "full", "hilofi"])
def test_bocd_over_wolf_on_the_kernel_equals_the_engine(base, weighting, evidence):
    """BOCD over WoLF: the robust weights inside each candidate's step, and the evidence under
    ``R / W²`` (``evidence='weighted'``) or ``R``, as on the engine; outliers do not open regimes."""
    X, y = _stream("regression")
    y[[12, 47]] += np.array([25.0, -40.0])  # outliers
    make = lambda: BOCDRegressor(WoLFRegressor(BASES[base]("reg"), weighting=weighting),  # noqa: E731
                                 n_hypotheses=3, hazard=0.05, evidence=evidence)
    est, ref, p, p_ref = _fit_both(make, X, y)
    _assert_same_mixture(est, ref)
    _close(np.nan_to_num(p), np.nan_to_num(p_ref))


@pytest.mark.parametrize("base", ["lofi", "full", "hilofi"])
def test_one_row_calls_equal_one_call(base):
    """Streams first: the mixture learned one row per call from row 0 is the one ``fit`` learns."""
    X, y = _stream("regression", n=60)
    make = lambda: BOCDRegressor(BASES[base]("reg"), n_hypotheses=4, hazard=0.05)  # noqa: E731
    whole = make().fit(X, y)
    rows = make()
    for i in range(len(y)):
        rows.partial_fit(X[i:i + 1], y[i:i + 1])
    _assert_same_mixture(rows, whole, rtol=1e-9)


def test_stiff_row_is_handed_to_the_engine():
    """A row of 1e7 makes a candidate's update stiff: the kernel stops before that row, the engine's
    run-length step does it (square-root forms where needed), and the kernel goes on after it."""
    X, y = _stream("regression", n=50)
    X[25] = 1e7
    make = lambda: BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(5,), rank=3, obs_variance=0.01,  # noqa: E731
                                               prior_variance=1.0, random_state=0), n_hypotheses=3, hazard=0.05)
    with compiled_kernels(False):
        ref = make().fit(X, y)
    steps = []
    original = runlength.runlength_step

    def counting(*args, **kwargs):
        steps.append(1)
        return original(*args, **kwargs)

    before = stepping.handed_back()
    with mock.patch.object(runlength, "runlength_step", counting):
        est = make().fit(X, y)
    assert 1 <= len(steps) < 25 and stepping.handed_back() > before  # not the 25 rows before it
    _assert_same_mixture(est, ref, rtol=1e-8)


def _stiff_row_outcomes(make, X, y):
    """Fit ``make()`` on the engine and on the kernels (which must hand at least one row back); both
    end alike — learned, or with the same error — and the two estimators are returned
    ``(kernels, engine)`` for the caller to compare their mixtures."""
    outcomes = []
    for on in (False, True):
        est = make()
        before = stepping.handed_back()
        with compiled_kernels(on):
            try:
                est.fit(X, y)
                outcomes.append((est, None))
            except FilterStepError as exc:
                outcomes.append((est, str(exc)))
        if on:
            assert stepping.handed_back() > before
    (ref, msg_ref), (est, msg) = outcomes
    assert msg == msg_ref
    return est, ref


def test_full_ekf_stiff_row_is_handed_to_the_engine():
    """Over the full EKF (candidates checked before any belief is written, kept ones updated in
    place): the kernel stops before a stiff row with the mixture as it was, the engine does that row
    (or raises as it does on its own) and the kernel goes on after it."""
    X, y = _stream("regression", n=50)
    X[25] = 1e7
    make = lambda: BOCDRegressor(EKFRegressor(hidden_layer_sizes=(5,), obs_variance=0.01,  # noqa: E731
                                              prior_variance=1.0, random_state=0), n_hypotheses=3, hazard=0.05)
    est, ref = _stiff_row_outcomes(make, X, y)
    _assert_same_mixture(est, ref, rtol=1e-8)


def test_full_ekf_diagonal_prior_shortcut_is_the_general_path(monkeypatch):
    """The changepoint candidate's ``J Σ₀`` and write from a diagonal prior's diagonal (no pass over
    ``Σ₀``) give the numbers of the general path that reads ``Σ₀``."""
    X, y = _stream("regression", n=40)
    make = lambda: BOCDRegressor(BASES["full"]("reg"), n_hypotheses=3, hazard=0.05)  # noqa: E731
    seen = []
    original = stepping.RunLengthPlan._pool

    def spy(self, *args):
        out = original(self, *args)
        seen.append(self._prior_diagonal)
        return out

    monkeypatch.setattr(stepping.RunLengthPlan, "_pool", spy)
    short = make().fit(X, y)
    assert seen and all(seen)

    def general(self, *args):
        out = original(self, *args)
        self._prior_diagonal = False
        return out

    monkeypatch.setattr(stepping.RunLengthPlan, "_pool", general)
    _assert_same_mixture(make().fit(X, y), short, rtol=1e-12)


def test_recycled_arrays_are_reused_only_when_unreferenced(monkeypatch):
    """:func:`skfilter.stepping.recycled_empty` (a :class:`skfilter._array_ops.Recycler`) hands out an
    array again only once no view, tensor or other name refers to it."""
    monkeypatch.setattr(stepping, "RECYCLER", Recycler(stepping.RECYCLED_MAX, stepping.RECYCLED_MAX_BYTES))
    shape = (3, 257, 257)
    a = stepping.recycled_empty(shape, np.float64)
    b = stepping.recycled_empty(shape, np.float64)
    assert b is not a
    t = torch.from_numpy(a[:2])
    a_id = id(a)
    del a
    c = stepping.recycled_empty(shape, np.float64)
    assert id(c) != a_id and c is not b  # a lives on in the tensor's view
    del t
    d = stepping.recycled_empty(shape, np.float64)
    assert id(d) == a_id
    assert stepping.recycled_empty((4, 4), np.float64).shape == (4, 4)  # small: plain np.empty
    # the bytes kept are bounded: unused arrays make room, one that does not fit is not kept
    monkeypatch.setattr(stepping, "RECYCLER", Recycler(stepping.RECYCLED_MAX, 3 * c.nbytes))
    kept_arrays = stepping.RECYCLER.arrays
    del b, c, d
    kept = [stepping.recycled_empty(shape, np.float64) for _ in range(4)]
    assert len(kept_arrays) == 3 and not any(k is x for k in kept[3:] for x in kept_arrays)
    del kept
    e = stepping.recycled_empty((6, 257, 257), np.float64)  # twice the size: two unused arrays make room
    assert sum(x.nbytes for x in kept_arrays) <= 3 * e.nbytes // 2 and any(x is e for x in kept_arrays)


def test_numerical_failure_keeps_the_last_good_mixture():
    """Logits beyond the bound raise the engine's error, with the rows before kept as there."""
    rng = np.random.default_rng(1)
    X = 300.0 * rng.normal(size=(60, 4))
    y = (X[:, 0] > 0).astype(int)
    make = lambda: BOCDClassifier(LoFiClassifier(hidden_layer_sizes=(5,), rank=2, prior_variance=1e4,  # noqa: E731
                                                 likelihood="categorical", random_state=0), n_hypotheses=3)
    outcomes = []
    for on in (False, True):
        est = make()
        with compiled_kernels(on):
            with pytest.raises(FilterStepError) as info:
                est.fit(X, y)
        outcomes.append((est, str(info.value)))
    (ref, msg_ref), (est, msg) = outcomes
    assert msg == msg_ref
    _assert_same_mixture(est, ref)


def test_interrupt_between_kernel_calls_keeps_the_rows_learned():
    X, y = _stream("regression", n=40)
    make = lambda: BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(5,), rank=2, obs_variance=0.1,  # noqa: E731
                                               n_prior_rows=4, random_state=0), n_hypotheses=3, hazard=0.05)
    est = make().fit(X[:4], y[:4])  # the prior's rows, then an interrupted call
    original = stepping.lofi_runlength_rows
    calls = [0]

    def interrupted(*args):
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        return original(*args)

    with mock.patch.object(stepping, "CHUNK_ROWS", 8), mock.patch.object(stepping, "lofi_runlength_rows", interrupted):
        with pytest.raises(KeyboardInterrupt):
            est.partial_fit(X[4:], y[4:])
    assert est.n_samples_seen_ == 4 + 16
    ref = make().fit(X[:4], y[:4]).partial_fit(X[4:20], y[4:20])
    _assert_same_mixture(est, ref)


@pytest.mark.parametrize("make", [
    lambda: BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(5,), rank=2), reset="ou", n_hypotheses=1),
    lambda: BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(5,), rank=2), n_hypotheses=None),
    lambda: BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(5,), rank=2, batch_size=2)),
    lambda: BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(5,), rank=2, variant="spherical")),
    lambda: BOCDRegressor(EKFRegressor(hidden_layer_sizes=(5,), covariance="vd", batch_size=2),
                          reset="moment-matched", n_hypotheses=2),
], ids=["ou", "exact", "batches", "spherical", "vd-moment-matched-batches"])
def test_what_the_kernel_does_not_serve_runs_on_the_engine(make):
    X, y = _stream("regression", n=30)
    used = AssertionError("kernel used")
    with mock.patch.object(stepping, "lofi_runlength_rows", side_effect=used), \
            mock.patch.object(stepping, "diagonal_runlength_rows", side_effect=used), \
            mock.patch.object(stepping, "factored_runlength_rows", side_effect=used):
        est = make().fit(X, y)
    assert est.n_samples_seen_ == 30


def test_lofi_has_no_moment_matched_reset_on_either_path():
    """LoFi has no moment match: the compiled run-length step does not take it, and the engine
    raises as it always has."""
    X, y = _stream("regression", n=10)
    make = lambda: BOCDRegressor(BASES["lofi"]("reg"), reset="moment-matched", n_hypotheses=2)  # noqa: E731
    with mock.patch.object(stepping, "lofi_runlength_rows", side_effect=AssertionError("kernel used")):
        with pytest.raises(NotImplementedError, match="moment"):
            make().fit(X, y)


#: log weights for the keep-order checks: exact ties, near-ties within the grid of ``2⁻³⁰``
#: (``KEEP_GRID``; they rank as tied), and neighbours a few grid steps apart (they do not)
_NEAR = 2.0 ** -30
_LOG_WEIGHTS = [-np.inf, -3.0, -1.0, -1.0, 0.0, -2.5, -1.0 + 1e-13, -1.0 - 3e-12, -1.0 + 0.4 * _NEAR,
                -1.0 + 3 * _NEAR, -1.0 - 2 * _NEAR, np.log(1 / 9), np.log(0.1) + np.log(10 / 9) - 1e-15,
                -2e10, -1e10]  # (far below log ν ≈ −8.6e9 the grid's key would overflow an integer)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(_LOG_WEIGHTS), min_size=1, max_size=9), st.integers(0, 10),
       st.randoms(use_true_random=False))
def test_keep_order_is_the_engines_choice(log_post, n_keep, rnd):
    """The kernel keeps the same hypotheses in the same order as the engine's ``_keep``: finite
    weights, decreasing on the grid of ``KEEP_GRID`` (near-ties are ties), ties to the longer run,
    at most ``n_keep``."""
    runs = list(range(len(log_post)))
    rnd.shuffle(runs)
    lp = np.array(log_post)
    out = np.empty(len(lp), dtype=np.int64)
    count = keep_order(lp, np.array(runs, dtype=np.int64), len(lp), n_keep, out)
    expected = runlength._keep(torch.tensor(lp), torch.tensor(runs), n_keep)
    assert out[:count].tolist() == expected.tolist()


def test_near_tied_weights_go_to_the_longer_run():
    """Weights equal to the last bits rank as tied (the longer run first) on both paths, whichever
    is larger after rounding; weights a few grid steps apart do not."""
    for lp in ([-1.0 - 1e-13, -1.0], [-1.0, -1.0 - 1e-13]):
        runs = [5, 0]
        expected = runlength._keep(torch.tensor(lp, dtype=torch.float64), torch.tensor(runs), 1)
        out = np.empty(2, dtype=np.int64)
        assert keep_order(np.array(lp), np.array(runs, dtype=np.int64), 2, 1, out) == 1
        assert expected.tolist() == [0] and out[0] == 0
    lp = [-1.0 - 4 * _NEAR, -1.0]
    assert runlength._keep(torch.tensor(lp, dtype=torch.float64), torch.tensor([5, 0]), 1).tolist() == [1]
    assert runlength._most_probable(torch.tensor([-1.0 - 1e-13, -1.0], dtype=torch.float64)) == 0


# ---------------------------------------------------------------------------------------------
# RL[1]-OUPR* and CPP-OU over LoFi (skfilter.kernels.reversion)
# ---------------------------------------------------------------------------------------------
REVERSION = [("ou", 0.5), ("ou", 0.95), ("cpp-ou", 0.5)]


@pytest.mark.parametrize("setting", ["fixed noise", "auto noise", "adaptive noise", "robust noise"])
@pytest.mark.parametrize("reset, threshold", REVERSION)
def test_reversion_regression_on_the_kernel_equals_the_engine(reset, threshold, setting):
    X, y = _stream("regression")
    make = lambda: BOCDRegressor(BASES["lofi"]("reg", **REGRESSION[setting]), n_hypotheses=1,  # noqa: E731
                                 hazard=0.1, reset=reset, threshold=threshold)
    est, ref, p, p_ref = _fit_both(make, X, y)
    _assert_same_mixture(est, ref)
    _close(np.nan_to_num(p), np.nan_to_num(p_ref))
    ma, sa = est.predict(X[:5], return_std=True)
    mb, sb = ref.predict(X[:5], return_std=True)
    _close(ma, mb)
    _close(sa, sb)


def test_reversion_resets_on_the_kernel():
    """The threshold 0.95 case resets (a run length below the rows seen), and the kernel did it."""
    X, y = _stream("regression")
    make = lambda: BOCDRegressor(BASES["lofi"]("reg"), n_hypotheses=1, hazard=0.1, reset="ou",  # noqa: E731
                                 threshold=0.95)
    est, ref, _, _ = _fit_both(make, X, y, prequential=False)
    assert int(est.runlength_state_.run_lengths[0]) < len(y) - 1
    _assert_same_mixture(est, ref)


@pytest.mark.parametrize("kind, likelihood", [("binary", "adf"), ("multiclass", "adf"),
                                              ("multiclass", "categorical")])
@pytest.mark.parametrize("reset", ["ou", "cpp-ou"])
def test_reversion_classification_on_the_kernel_equals_the_engine(reset, kind, likelihood):
    X, y = _stream(kind)
    make = lambda: BOCDClassifier(BASES["lofi"]("clf", likelihood=likelihood), n_hypotheses=1,  # noqa: E731
                                  hazard=0.1, reset=reset)
    est, ref, p, p_ref = _fit_both(make, X, y, classes=np.unique(y))
    _assert_same_mixture(est, ref)
    _close(p, p_ref)
    _close(est.predict_proba(X[:5]), ref.predict_proba(X[:5]))


@pytest.mark.parametrize("base, reset", [("lofi", "ou"), ("lofi", "cpp-ou"), ("vd", "ou"), ("full", "cpp-ou"),
                                         ("hilofi", "ou")])
def test_reversion_weights_float32_and_outputs(base, reset):
    X, y = _stream("regression", n=30 if base == "hilofi" else 70)  # (the engine's factored steps are slow)
    w = np.linspace(0.3, 2.0, len(y))
    make = lambda: BOCDRegressor(BASES[base]("reg"), n_hypotheses=1, hazard=0.1, reset=reset)  # noqa: E731
    est, ref, p, p_ref = _fit_both(make, X, y, sample_weight=w)
    _assert_same_mixture(est, ref)
    Y2 = np.column_stack([y, -0.5 * y + X[:, 2]])
    make = lambda: BOCDRegressor(BASES[base]("reg", dtype="float32"), n_hypotheses=1, hazard=0.1,  # noqa: E731
                                 reset=reset)
    est, ref, p, p_ref = _fit_both(make, X, Y2)
    _assert_same_mixture(est, ref, rtol=2e-4)


@pytest.mark.parametrize("reset", ["ou", "cpp-ou"])
def test_reversion_one_row_per_call_and_pickling(reset):
    import pickle

    X, y = _stream("regression")
    make = lambda: BOCDRegressor(BASES["lofi"]("reg"), n_hypotheses=1, hazard=0.1, reset=reset)  # noqa: E731
    whole = make().fit(X, y)
    rows = make()
    for i in range(len(y)):
        rows.partial_fit(X[i:i + 1], y[i:i + 1])
        if i == 30:
            rows = pickle.loads(pickle.dumps(rows))
    _assert_same_mixture(rows, whole, rtol=1e-9)


def test_reversion_stiff_row_is_handed_back_and_failure_keeps_the_state():
    X, y = _stream("regression", n=50)
    X[25] = 1e7  # a stiff row: the kernel hands it back, the engine's square-root forms learn it
    make = lambda: BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(5,), rank=3, obs_variance=0.01,  # noqa: E731
                                               prior_variance=1.0, random_state=0), n_hypotheses=1, hazard=0.1,
                                 reset="ou")
    before = stepping.HANDED_BACK[0]
    est = make().fit(X, y)
    with compiled_kernels(False):
        ref = make().fit(X, y)
    assert stepping.HANDED_BACK[0] > before
    _assert_same_mixture(est, ref, rtol=1e-6)
    # a step that fails on the engine after the kernel handed its row back: the state of the rows
    # before it is kept (the kernel's rows included), and the next rows are learned
    est = make().fit(X[:20], y[:20])
    n0 = est.runlength_state_.filter.n_seen
    with mock.patch.object(runlength, "runlength_step", side_effect=FilterStepError("injected")):
        with pytest.raises(FilterStepError, match="injected"):
            est.partial_fit(X[20:30], y[20:30])  # row 25 is stiff
    assert est.runlength_state_.filter.n_seen == n0 + 5
    est.partial_fit(X[30:35], y[30:35])
    assert est.runlength_state_.filter.n_seen == n0 + 10


def test_reversion_with_a_constant_per_parameter_reference_variance():
    """A reference variance given per parameter but all equal (the prior keeps one precision value,
    the shrink makes it per parameter): both paths run and agree, the precision per parameter."""
    from skfilter.dynamics import Reference

    X, y = _stream("regression", n=90)
    results = []
    for on in (True, False):
        with compiled_kernels(on):
            est = BOCDRegressor(LoFiRegressor(hidden_layer_sizes=(4,), rank=2, prior_variance=0.5, random_state=0),
                                n_hypotheses=1, reset="ou", threshold=0.9, hazard=0.1)
            est.partial_fit(X[:50], y[:50])
            inner = est.estimator_
            inner._reference = Reference(inner._reference.mean, torch.full_like(inner._reference.mean, 0.5))
            est.partial_fit(X[50:], y[50:])
            results.append(est)
    a, b = results
    assert a.runlength_state_.filter.belief.prior_precision.shape == (1, a.estimator_.n_params_)
    _assert_same_mixture(a, b)


# ---------------------------------------------------------------------------------------------
# RL[1]-OUPR* and CPP-OU over the VD/FD-EKF and the full EKF (kernels.reversion_diagonal,
# kernels.reversion_full); robust weighting and base dynamics over every compiled base
# ---------------------------------------------------------------------------------------------
#: the reversion kernels' bases: those of RL[K]-PR and LoLoFi (two low-rank factors)
REVERSION_BASES = {
    **BASES,
    "lolofi": lambda cls, **kw: (LoLoFiRegressor if cls == "reg" else LoLoFiClassifier)(hidden_layer_sizes=(6,),
                                                                                        hidden_rank=3, last_rank=2,
                                                                                        random_state=0, **kw),
}


def _reversion(base, cls="reg", reset="ou", threshold=0.5, wrap=None, evidence="weighted", **kw):
    """A maker of ``BOCD*(base, n_hypotheses=1, reset=…)`` (``wrap``: a WoLF weighting of the base)."""
    bocd = BOCDRegressor if cls == "reg" else BOCDClassifier

    def make():
        inner = REVERSION_BASES[base](cls, **kw)
        if wrap is not None:
            inner = WoLFRegressor(inner, weighting=wrap)
        return bocd(inner, n_hypotheses=1, hazard=0.1, reset=reset, threshold=threshold, evidence=evidence)

    return make


@pytest.mark.parametrize("kind", ["regression", "binary"])
@pytest.mark.parametrize("reset, threshold", REVERSION)
@pytest.mark.parametrize("base", ["vd", "fd", "full"])
def test_reversion_over_the_ekfs_on_the_kernel_equals_the_engine(base, reset, threshold, kind):
    """Every row on the kernel (the engine's step fails), the states, evidence and predictions the
    engine's; ``'ou'`` with ε = 0.95 resets within the stream."""
    X, y = _stream(kind)
    if kind == "regression":
        est, ref, p, p_ref = _fit_both(_reversion(base, reset=reset, threshold=threshold), X, y)
    else:
        make = _reversion(base, "clf", reset, threshold, likelihood="adf")
        est, ref, p, p_ref = _fit_both(make, X, y, classes=np.unique(y))
    _assert_same_mixture(est, ref)
    _close(np.nan_to_num(p), np.nan_to_num(p_ref))
    if (reset, threshold) == ("ou", 0.95):
        assert int(est.runlength_state_.run_lengths[0]) < len(y) - 1


@pytest.mark.parametrize("evidence", ["weighted", "plain"])
@pytest.mark.parametrize("reset, threshold", [("ou", 0.95), ("cpp-ou", 0.5)])
@pytest.mark.parametrize("base, weighting", [("lofi", "imq"), ("full", "predictive-md")])
def test_reversion_over_wolf_on_the_kernel_equals_the_engine(base, weighting, reset, threshold, evidence):
    """The base's robust weights inside the step and, with ``evidence='weighted'``, the scores under
    ``R / W²`` (each candidate's own weight), as on the engine."""
    X, y = _stream("regression", n=50 if reset == "cpp-ou" else 70)  # (CPP-OU's engine: 12 candidates a row)
    y[[12, 47]] += np.array([25.0, -40.0])  # outliers
    est, ref, p, p_ref = _fit_both(_reversion(base, reset=reset, threshold=threshold, wrap=weighting,
                                              evidence=evidence), X, y)
    _assert_same_mixture(est, ref)
    _close(np.nan_to_num(p), np.nan_to_num(p_ref))


# RL[K]-MMPR (reset='moment-matched') over the diagonal, full and factored kernels, and the
# moment-matched categorical likelihood's evidence
# ---------------------------------------------------------------------------------------------
MM_BASES = ["full", "vd", "fd", "hilofi", "lrkf"]
#: rows of the moment-matched streams: fewer over the factored structures, whose engine step (a QR
#: or SVD per candidate and for the matched prior) is the slow side of the comparison
MM_ROWS = {"hilofi": 44, "lrkf": 44}


def _mm_estimator(base, kind, K, **kw):
    if kind == "regression":
        return BOCDRegressor(BASES[base]("reg", **kw), n_hypotheses=K, hazard=0.1, reset="moment-matched")
    return BOCDClassifier(BASES[base]("clf", **kw), n_hypotheses=K, hazard=0.1, reset="moment-matched")


@pytest.mark.parametrize("K", [1, 4])
@pytest.mark.parametrize("kind", ["regression", "binary", "multiclass"])
@pytest.mark.parametrize("base", MM_BASES)
def test_moment_matched_reset_on_the_kernel_equals_the_engine(base, kind, K):
    """The changepoint candidate from the matched mixture of the kept (predicted) beliefs, on every
    row in the kernel: the run lengths (whose weights tie to the last bits: all hypotheses learn the
    same belief here, so only the hazard weighs them), weights, beliefs, noise states ('auto' noise),
    evidence and predictions equal the engine's; with ``K = 4`` the cut is active from the fourth
    row and changepoints are kept."""
    X, y = _stream(kind, n=MM_ROWS.get(base, 70))
    fit_kw = {} if kind == "regression" else {"classes": np.unique(y)}
    est, ref, p, p_ref = _fit_both(lambda: _mm_estimator(base, kind, K, process_noise=1e-3), X, y, **fit_kw)
    _assert_same_mixture(est, ref)
    _close(np.nan_to_num(p), np.nan_to_num(p_ref))
    if K == 4:
        runs = est.runlength_state_.run_lengths.tolist()
        assert len(runs) == 4 and min(runs) < len(y) // 2
    if kind == "regression":
        ma, sa = est.predict(X[:5], return_std=True)
        mb, sb = ref.predict(X[:5], return_std=True)
        _close(ma, mb)
        _close(sa, sb)
    else:
        _close(est.predict_proba(X[:5]), ref.predict_proba(X[:5]))


@pytest.mark.parametrize("base", MM_BASES)
def test_moment_matched_reset_of_distinct_hypotheses(base):
    """Hypotheses that hold different beliefs (learned under ``reset='prior'`` first): the matched
    prior's spread ``Σ_k w_k d_k d_kᵀ`` and the base's decay and process noise count, and the
    kernel's mixture still equals the engine's."""
    X, y = _stream("regression", n=MM_ROWS.get(base, 70))
    split = 20

    def fit(est):
        est.fit(X[:split], y[:split])
        est.set_params(reset="moment-matched")
        return est.prequential_fit_predict(X[split:], y[split:])

    make = lambda: BOCDRegressor(BASES[base]("reg", decay=0.995, process_noise=1e-3), n_hypotheses=4,  # noqa: E731
                                 hazard=0.1)
    with compiled_kernels(False):
        ref = make()
        p_ref = fit(ref)
    with mock.patch.object(runlength, "runlength_step", side_effect=AssertionError("the engine's step ran")):
        est = make()
        p = fit(est)
    _assert_same_mixture(est, ref)
    _close(np.nan_to_num(p), np.nan_to_num(p_ref))


@pytest.mark.parametrize("base, reset", [("lofi", "ou"), ("lofi", "cpp-ou"), ("vd", "ou"), ("fd", "ou"),
                                         ("full", "ou"), ("full", "cpp-ou")])
def test_reversion_with_base_dynamics_on_the_kernel_equals_the_engine(base, reset):
    """The base's decay and process noise move the hypothesis before its predictive and the OU map."""
    X, y = _stream("regression", n=50 if reset == "cpp-ou" else 70)
    make = _reversion(base, reset=reset, threshold=0.95, **REGRESSION["decay and process noise"])
    est, ref, p, p_ref = _fit_both(make, X, y)
    _assert_same_mixture(est, ref)
    _close(np.nan_to_num(p), np.nan_to_num(p_ref))


@pytest.mark.parametrize("base, reset", [("vd", "cpp-ou"), ("full", "ou"), ("full", "cpp-ou")])
def test_reversion_over_the_ekfs_one_row_per_call_and_pickling(base, reset):
    import pickle

    X, y = _stream("regression")
    make = _reversion(base, reset=reset, threshold=0.95)
    whole = make().fit(X, y)
    rows = make()
    for i in range(len(y)):
        rows.partial_fit(X[i:i + 1], y[i:i + 1])
        if i == 30:
            rows = pickle.loads(pickle.dumps(rows))
    _assert_same_mixture(rows, whole, rtol=1e-9)


@pytest.mark.parametrize("base", ["vd", "full", "hilofi"])
def test_reversion_over_the_ekfs_stiff_row_and_failure_keep_the_state(base):
    """A stiff row is handed back (the engine learns it or raises as it does alone); a row the engine
    fails after the kernel handed it back keeps the kernel's rows before it. (HiLoFi: one prior
    variance gives its low-rank factor equal singular values, its rows then defined up to a
    rotation: the factors' Grams are compared.)"""
    X, y = _stream("regression", n=50)
    X[25] = 1e7
    make = _reversion(base, reset="ou", threshold=0.5, obs_variance=0.01, prior_variance=1.0)
    est, ref = _stiff_row_outcomes(make, X, y)
    _assert_same_mixture(est, ref, rtol=1e-8, factor_grams=base == "hilofi")
    est = make().fit(X[:20], y[:20])
    n0 = est.runlength_state_.filter.n_seen
    with mock.patch.object(runlength, "runlength_step", side_effect=FilterStepError("injected")):
        with pytest.raises(FilterStepError, match="injected"):
            est.partial_fit(X[20:30], y[20:30])  # row 25 is stiff
    assert est.runlength_state_.filter.n_seen == n0 + 5


def test_reversion_full_ekf_diagonal_prior_shortcut_is_the_general_path(monkeypatch):
    """A hard reset's ``J Σ₀`` and write from a diagonal prior's diagonal give the numbers of the
    path that reads ``Σ₀``."""
    X, y = _stream("regression")
    make = _reversion("full", reset="ou", threshold=0.95)
    short = make().fit(X, y)
    original = stepping.RunLengthPlan._pool

    def general(self, *args):
        out = original(self, *args)
        self._prior_diagonal = False
        return out

    monkeypatch.setattr(stepping.RunLengthPlan, "_pool", general)
    _assert_same_mixture(make().fit(X, y), short, rtol=1e-12)


@pytest.mark.parametrize("base", ["full", "hilofi"])
def test_moment_matched_reset_one_row_calls_equal_one_call(base):
    X, y = _stream("regression", n=40)
    whole = _mm_estimator(base, "regression", 4).fit(X, y)
    rows = _mm_estimator(base, "regression", 4)
    for i in range(len(y)):
        rows.partial_fit(X[i:i + 1], y[i:i + 1])
    _assert_same_mixture(rows, whole, rtol=1e-9)


@pytest.mark.parametrize("base", ["full", "vd", "hilofi"])
def test_moment_matched_reset_stiff_row_is_handed_to_the_engine(base):
    """A stiff row under the matched reset: the kernel stops before it with the mixture as it was
    (over the full EKF the matched prior was written into the free slot only), the engine does it
    (or raises as it does on its own) and the kernel goes on after it."""
    X, y = _stream("regression", n=40)
    X[20] = 1e7
    est, ref = _stiff_row_outcomes(lambda: _mm_estimator(base, "regression", 3, obs_variance=0.01,
                                                         prior_variance=1.0), X, y)
    _assert_same_mixture(est, ref, rtol=1e-8)


@pytest.mark.parametrize("base, kind, reset", [("lofi", "binary", "prior"), ("lofi", "multiclass", "prior"),
                                               ("full", "binary", "prior"), ("full", "multiclass", "prior"),
                                               ("vd", "multiclass", "moment-matched"),
                                               ("lofi", "multiclass", "ou")])
def test_moment_matched_likelihood_on_the_kernel_equals_the_engine(base, kind, reset):
    """The moment-matched categorical likelihood's evidence is its Gaussian's,
    ``log N(y; m, G J Σ⁻ Jᵀ Gᵀ + R)`` (not the probit): the kernel's equals the engine's."""
    X, y = _stream(kind)
    dynamics = {} if reset == "ou" else {"process_noise": 1e-3}  # (OU over LoFi: compiled with static dynamics)
    make = lambda: BOCDClassifier(BASES[base]("clf", likelihood="moment-matched", **dynamics),  # noqa: E731
                                  n_hypotheses=1 if reset == "ou" else 3, hazard=0.05, reset=reset)
    est, ref, p, p_ref = _fit_both(make, X, y, classes=np.unique(y))
    _assert_same_mixture(est, ref)
    _close(p, p_ref)
    _close(est.predict_proba(X[:5]), ref.predict_proba(X[:5]))


def test_reversion_fd_ekf_over_wolf_on_the_kernel_equals_the_engine():
    """The FD-EKF's robust weights under ``'ou'`` (the weighted scores), as on the engine."""
    X, y = _stream("regression")
    y[[12, 47]] += np.array([25.0, -40.0])  # outliers
    est, ref, p, p_ref = _fit_both(_reversion("fd", reset="ou", threshold=0.95, wrap="imq"), X, y)
    _assert_same_mixture(est, ref)
    _close(np.nan_to_num(p), np.nan_to_num(p_ref))


# ---------------------------------------------------------------------------------------------
# RL[1]-OUPR* and CPP-OU over the factored covariance (kernels.reversion_factored): LRKF, HiLoFi,
# LoLoFi, their default process noise (base dynamics) included
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reset, threshold", REVERSION)
@pytest.mark.parametrize("base", ["hilofi", "lrkf", "lolofi"])
def test_reversion_over_the_factored_on_the_kernel_equals_the_engine(base, reset, threshold):
    """Every row on the kernel (the engine's step fails), the states, evidence and predictions the
    engine's; ``'ou'`` with ε = 0.95 resets within the stream."""
    X, y = _stream("regression", n=30 if reset == "cpp-ou" else 40)  # (the engine's factored steps are slow)
    est, ref, p, p_ref = _fit_both(_reversion(base, reset=reset, threshold=threshold), X, y)
    _assert_same_mixture(est, ref)
    _close(np.nan_to_num(p), np.nan_to_num(p_ref))
    if (reset, threshold) == ("ou", 0.95):
        assert int(est.runlength_state_.run_lengths[0]) < len(y) - 1


@pytest.mark.parametrize("case", ["binary adf", "static", "decay", "wolf", "wolf cpp-ou"])
def test_reversion_over_hilofi_classification_dynamics_and_wolf(case):
    """HiLoFi's classifier, static dynamics (no process noise: the hypothesis itself predicts), a
    decay, and WoLF's weights (the scores under them) on the kernel, as on the engine."""
    X, y = _stream("binary" if case == "binary adf" else "regression", n=30)
    if case == "binary adf":
        est, ref, p, p_ref = _fit_both(_reversion("hilofi", "clf", "ou", 0.95, likelihood="adf"), X, y,
                                       classes=np.unique(y))
    else:
        kw = {"static": dict(process_noise=0.0), "decay": dict(decay=0.995)}.get(case, {})
        if case.startswith("wolf"):
            y[[8, 24]] += np.array([25.0, -40.0])  # outliers
            kw = dict(wrap="imq")
        reset = "cpp-ou" if case == "wolf cpp-ou" else "ou"
        est, ref, p, p_ref = _fit_both(_reversion("hilofi", reset=reset, threshold=0.95, **kw), X, y)
    # (CPP-OU's υ = 0 zeroes the last layer's Cholesky factor, the pending noise then entering through
    # the gains only: a rank-deficient triangular factor, whose rows past its rank are not unique)
    _assert_same_mixture(est, ref, factor_grams=case == "wolf cpp-ou")
    _close(np.nan_to_num(p), np.nan_to_num(p_ref))


def test_reversion_over_hilofi_one_row_per_call_and_pickling():
    import pickle

    X, y = _stream("regression")
    make = _reversion("hilofi", reset="ou", threshold=0.95)
    whole = make().fit(X, y)
    rows = make()
    for i in range(len(y)):
        rows.partial_fit(X[i:i + 1], y[i:i + 1])
        if i == 30:
            rows = pickle.loads(pickle.dumps(rows))
    _assert_same_mixture(rows, whole, rtol=1e-9)
