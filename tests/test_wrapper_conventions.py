"""scikit-learn conventions of the wrappers (issue 19): ``n_iter_``, ``loss_curve_``, ``warm_start`` and
``verbose`` of :class:`~skfilter.WoLFRegressor`/:class:`~skfilter.WoLFClassifier` and the BOCD
estimators, as the base filters have them (tests/test_conventions.py); and the progress bar of
``verbose=1``, which moves while the compiled kernels run (between their chunks of rows)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.metrics import log_loss

import skfilter._estimator
from skfilter import (BOCDClassifier, BOCDRegressor, EKFClassifier, EKFRegressor, LoFiRegressor, WoLFClassifier,
                      WoLFRegressor)
from skfilter.model_selection import prequential_predict

rng = np.random.default_rng(0)
X = rng.normal(size=(80, 3))
y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=80)
y_class = (y > 0).astype(int)

WRAPPERS = [
    (WoLFRegressor(EKFRegressor(hidden_layer_sizes=(6,), random_state=0)), y),
    (WoLFClassifier(EKFClassifier(hidden_layer_sizes=(6,), random_state=0)), y_class),
    (BOCDRegressor(EKFRegressor(hidden_layer_sizes=(6,), random_state=0), n_hypotheses=3), y),
    (BOCDClassifier(EKFClassifier(hidden_layer_sizes=(6,), random_state=0), n_hypotheses=3), y_class),
    (BOCDRegressor(WoLFRegressor(EKFRegressor(hidden_layer_sizes=(6,), random_state=0)), n_hypotheses=2), y),
]
IDS = ["wolf-reg", "wolf-clf", "bocd-reg", "bocd-clf", "bocd-wolf-reg"]


def _is_bocd(est):
    return isinstance(est, (BOCDRegressor, BOCDClassifier))


def _classes(target):
    return {"classes": np.unique(target)} if target.dtype.kind == "i" else {}


def _predictions(est):
    if hasattr(est, "predict_proba"):
        return est.predict_proba(X)
    return np.column_stack(est.predict(X, return_std=True))


@pytest.mark.parametrize("est, target", WRAPPERS, ids=IDS)
def test_n_iter_and_loss_curve_count_the_passes(est, target):
    est = clone(est)
    est.fit(X, target)
    assert est.n_iter_ == 1 and len(est.loss_curve_) == 1 and math.isnan(est.loss_curve_[0])  # one pass: unscored
    est.partial_fit(X[:10], target[:10])
    est.partial_fit(X[10:20], target[10:20])
    assert est.n_iter_ == 3 and len(est.loss_curve_) == 3 and all(math.isnan(v) for v in est.loss_curve_)
    est.fit(X, target)  # warm_start=False: counted anew
    assert est.n_iter_ == 1


@pytest.mark.parametrize("est, target", WRAPPERS, ids=IDS)
def test_loss_curve_of_prequential_fit_predict_is_its_prequential_loss(est, target):
    """The scored pass: the mean loss of the one-step-ahead predictions the wrapper returned
    (Gaussian NLPD for regressors, log loss for classifiers)."""
    est = clone(est)
    if hasattr(est, "predict_proba"):
        proba = est.prequential_fit_predict(X, target, method="predict_proba", classes=np.unique(target))
        expected = log_loss(target, proba, labels=np.unique(target))
    else:
        mean, std = est.prequential_fit_predict(X, target, return_std=True)
        # row 0 has no prediction before any data (NaN), left out of the score
        expected = np.nanmean(0.5 * np.log(2 * np.pi * std ** 2) + 0.5 * ((target - mean) / std) ** 2)
    assert est.n_iter_ == 1
    assert est.loss_curve_[0] == pytest.approx(expected, rel=1e-6)


def test_wolf_multi_pass_fit_scores_every_pass():
    est = WoLFRegressor(EKFRegressor(hidden_layer_sizes=(6,), n_epochs=3, random_state=0)).fit(X, y)
    assert est.n_iter_ == 3 and len(est.loss_curve_) == 3 and all(np.isfinite(est.loss_curve_))
    assert est.loss_curve_ is est.estimator_.loss_curve_  # the same mechanism: the base filter's


@pytest.mark.parametrize("est, target", WRAPPERS, ids=IDS)
def test_warm_start_fit_continues_from_the_fitted_belief(est, target):
    warm = clone(est).set_params(warm_start=True).fit(X[:40], target[:40])
    first = warm.estimator_
    warm.fit(X[40:], target[40:])
    assert warm.estimator_ is first  # continued, not cloned again
    stream = clone(est).fit(X[:40], target[:40])
    stream.partial_fit(X[40:], target[40:])
    np.testing.assert_array_equal(_predictions(warm), _predictions(stream))
    assert warm.n_samples_seen_ == len(X) and warm.n_iter_ == stream.n_iter_ == 2
    # warm_start=False (the default) starts again from the prior
    cold = clone(est).fit(X[:40], target[:40])
    cold.fit(X[40:], target[40:])
    assert cold.n_samples_seen_ == len(X) - 40 and cold.n_iter_ == 1
    fresh = clone(est).fit(X[40:], target[40:])
    np.testing.assert_array_equal(_predictions(cold), _predictions(fresh))


@pytest.mark.parametrize("est, target", WRAPPERS, ids=IDS)
def test_verbose_shows_a_progress_bar_with_rows_per_second(est, target, capfd):
    clone(est).fit(X, target)
    assert capfd.readouterr().err == ""  # verbose=0: silent
    clone(est).set_params(verbose=1).fit(X, target)
    err = capfd.readouterr().err
    assert type(est).__name__ in err and "row/s" in err


class _RecordingBar:
    """Stands in for the tqdm bar: records the position after every update."""

    def __init__(self, total):
        self.total, self.n, self.positions, self.closed = total, 0, [], False

    def update(self, k):
        self.n += k
        self.positions.append(self.n)

    def close(self):
        self.closed = True


def test_base_filter_bar_moves_between_kernel_chunks(monkeypatch):
    """A long one-pass fit runs in the compiled kernels, which return to Python every
    ``CHUNK_ROWS`` rows: the bar is updated there, not only at the end."""
    from skfilter import kernels
    from skfilter.kernels import _dispatch

    bars, compiled = [], []
    monkeypatch.setattr(skfilter._estimator, "progress_bar",
                        lambda enabled, total, desc: bars.append(_RecordingBar(total)) or bars[-1] if enabled else None)
    run = kernels.run_compiled

    def recording_run(*args):
        out = run(*args)
        compiled.append(out is not None)
        return out

    monkeypatch.setattr(kernels, "run_compiled", recording_run)
    n = 3 * _dispatch.CHUNK_ROWS + 5
    Xl = np.random.default_rng(1).normal(size=(n, 2))
    LoFiRegressor(hidden_layer_sizes=(4,), rank=2, random_state=0, verbose=1).fit(Xl, Xl[:, 0])
    assert compiled == [True]
    (bar,) = bars
    assert bar.closed and bar.total == n
    assert bar.positions[-1] == n
    assert [p for p in bar.positions if 0 < p < n]  # moved while the kernels ran
    assert bar.positions == sorted(bar.positions)


def test_wrapper_bar_is_the_base_filters_bar_under_the_wrappers_name(monkeypatch):
    names = []
    monkeypatch.setattr(skfilter._estimator, "progress_bar",
                        lambda enabled, total, desc: names.append((enabled, desc)) or None)
    WoLFRegressor(EKFRegressor(hidden_layer_sizes=(4,), random_state=0), verbose=1).fit(X, y)
    assert names == [(1, "WoLFRegressor")]
    names.clear()
    WoLFRegressor(EKFRegressor(hidden_layer_sizes=(4,), random_state=0)).fit(X, y)
    assert names == [(0, "WoLFRegressor")]


def test_prequential_predict_of_a_wrapper_keeps_working_with_verbose(capfd):
    est = BOCDRegressor(EKFRegressor(hidden_layer_sizes=(4,), random_state=0), n_hypotheses=2, verbose=1)
    mean = prequential_predict(est, X, y)
    assert mean.shape == y.shape and "row/s" in capfd.readouterr().err


@pytest.mark.parametrize("est, target", [(LoFiRegressor(hidden_layer_sizes=(4,), rank=2, random_state=0), y),
                                         (EKFClassifier(hidden_layer_sizes=(4,), random_state=0), y_class)],
                         ids=["lofi-reg", "ekf-clf"])
def test_base_filter_verbose_bar_and_silence(est, target, capfd):
    clone(est).fit(X, target)
    clone(est).partial_fit(X, target, **_classes(target))
    assert capfd.readouterr().err == ""
    clone(est).set_params(verbose=1, n_epochs=2).fit(X, target)
    err = capfd.readouterr().err
    assert type(est).__name__ in err and "row/s" in err
