"""scikit-learn conventions of the wrappers (issue 19): ``n_iter_``, ``loss_curve_``, ``warm_start`` and
``verbose`` of :class:`~skfilter.WoLFRegressor`/:class:`~skfilter.WoLFClassifier` and the BOCD
estimators, as the base filters have them (tests/test_conventions.py); the progress bar of
``verbose=1``, which moves while the compiled kernels run (between their chunks of rows); and
(issue 30) the wrappers' ``random_state``, which seeds the clone of the base they fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.metrics import log_loss

import skfilter._estimator
from skfilter import (BOCDClassifier, BOCDRegressor, EKFClassifier, EKFRegressor, LoFiRegressor, WoLFClassifier,
                      WoLFRegressor)
from skfilter.compose import TargetScaledRegressor
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
    from skfilter import stepping

    bars, compiled = [], []
    monkeypatch.setattr(skfilter._estimator, "progress_bar",
                        lambda enabled, total, desc: bars.append(_RecordingBar(total)) or bars[-1] if enabled else None)
    run = stepping.run_compiled

    def recording_run(*args):
        out = run(*args)
        compiled.append(out is not None)
        return out

    monkeypatch.setattr(stepping, "run_compiled", recording_run)
    n = 3 * stepping.CHUNK_ROWS + 5
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


# ---------------------------------------------------------------------------------------------
# random_state of the wrappers (issue 30): it seeds the clone of the base, overriding the base's own
# ---------------------------------------------------------------------------------------------
def _unseeded(kind="regressor", **kw):
    cls = EKFRegressor if kind == "regressor" else EKFClassifier
    return cls(hidden_layer_sizes=(6,), **kw)


SEEDED = [
    (lambda base, **kw: WoLFRegressor(base, **kw), "regressor", y),
    (lambda base, **kw: WoLFClassifier(base, **kw), "classifier", y_class),
    (lambda base, **kw: BOCDRegressor(base, n_hypotheses=3, **kw), "regressor", y),
    (lambda base, **kw: BOCDClassifier(base, n_hypotheses=3, **kw), "classifier", y_class),
    (lambda base, **kw: BOCDRegressor(WoLFRegressor(base), n_hypotheses=2, **kw), "regressor", y),
    (lambda base, **kw: TargetScaledRegressor(base, **kw), "regressor", y),
]
SEEDED_IDS = ["wolf-reg", "wolf-clf", "bocd-reg", "bocd-clf", "bocd-wolf-reg", "target-scaled"]


def _fitted_predictions(est, target):
    est.fit(X, target)
    return est.predict_proba(X) if hasattr(est, "predict_proba") else np.column_stack(est.predict(X, return_std=True))


@pytest.mark.parametrize("make, kind, target", SEEDED, ids=SEEDED_IDS)
def test_wrapper_seed_makes_fits_repeatable_and_overrides_the_bases_own(make, kind, target):
    seeded = make(_unseeded(kind), random_state=0)
    once = _fitted_predictions(seeded, target)
    np.testing.assert_array_equal(once, _fitted_predictions(seeded, target))  # the same wrapper, twice
    np.testing.assert_array_equal(once, _fitted_predictions(clone(seeded), target))
    # random_state=0 fits as the base seeded with 0 would (None: the base's own seed)
    np.testing.assert_array_equal(once, _fitted_predictions(make(_unseeded(kind, random_state=0)), target))
    # a wrapper seed overrides the base's own; the base passed is left as it was
    base = _unseeded(kind, random_state=5)
    np.testing.assert_array_equal(once, _fitted_predictions(make(base, random_state=0), target))
    assert base.random_state == 5
    assert not np.array_equal(once, _fitted_predictions(make(_unseeded(kind), random_state=1), target))


def test_wrapper_seed_reaches_the_innermost_filter_and_every_hypothesis():
    est = BOCDRegressor(WoLFRegressor(_unseeded(random_state=7)), n_hypotheses=3, random_state=3).fit(X, y)
    assert est.estimator_.random_state == 3 and est._inner.random_state == 3
    assert est.estimator.random_state is None and est.estimator.estimator.random_state == 7
    again = clone(est).fit(X, y)  # every hypothesis of the mixture from the one seeded prior
    np.testing.assert_array_equal(est.runlength_log_posterior_, again.runlength_log_posterior_)
    np.testing.assert_array_equal(est.run_lengths_, again.run_lengths_)


def test_set_random_state_and_grid_search_reach_the_default_bases_seed():
    from sklearn.model_selection import GridSearchCV
    from sklearn.utils.estimator_checks import set_random_state

    for cls in (WoLFRegressor, WoLFClassifier, BOCDRegressor, BOCDClassifier, TargetScaledRegressor):
        est = cls()
        set_random_state(est, 4)
        assert est.random_state == 4 and clone(est).random_state == 4
    grid = GridSearchCV(WoLFRegressor(_unseeded()), {"random_state": [0, 1]}, cv=2).fit(X, y)
    reference = WoLFRegressor(_unseeded(random_state=grid.best_params_["random_state"])).fit(X, y)
    np.testing.assert_array_equal(grid.best_estimator_.predict(X), reference.predict(X))


def test_a_random_state_instance_is_handed_to_the_clone():
    rs = np.random.RandomState(0)
    est = WoLFRegressor(_unseeded(random_state=0), random_state=rs).fit(X, y)
    assert est.estimator_.random_state is rs
    np.testing.assert_array_equal(  # drawn from the same stream as the base given the instance
        est.predict(X), WoLFRegressor(_unseeded(random_state=np.random.RandomState(0))).fit(X, y).predict(X))


def test_changing_the_wrapper_seed_mid_stream_raises_as_the_bases_seed_does():
    est = WoLFRegressor(_unseeded(), random_state=0).partial_fit(X[:40], y[:40])
    est.set_params(random_state=1)
    with pytest.raises(ValueError, match="random_state"):
        est.partial_fit(X[40:], y[40:])
    est.set_params(random_state=0).partial_fit(X[40:], y[40:])  # set back: the stream goes on
    assert est.n_samples_seen_ == len(X)
