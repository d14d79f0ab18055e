"""A stream that starts small or unrepresentative does not diverge (issue 29, item 4).

Measured before the change: UCI concrete's fly-ash column is 0 in its first 50 rows, which gave it
scale 1 (``max(|mean|, 1)``) while its later values reach 200: ``LoFiClassifier``/``EKFClassifier``
fitted on 50 rows then learning the rest raised ``FilterStepError`` (logits 1e4); a 784-feature
image stream whose first call had 2 rows diverged on its third row. The rule now
(:mod:`skfilter.priors`): a feature that does not vary in the first rows takes the median spread of
those that do, and the standardised inputs are clipped to ``±INPUT_BOUND``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from skfilter import EKFClassifier, LoFiClassifier, LoFiRegressor
from skfilter.datasets import load_uci
from skfilter.models import StandardizedMLP, make_adapter
from skfilter.priors import INPUT_BOUND, input_standardization


@pytest.mark.parametrize("make", [lambda: LoFiClassifier(random_state=0), lambda: EKFClassifier(random_state=0)],
                         ids=["LoFiClassifier", "EKFClassifier"])
def test_concrete_with_fly_ash_zero_in_the_first_call_learns(make):
    d = load_uci("concrete")
    X, y = d.data[:400], (d.target[:400] > np.median(d.target)).astype(int)
    assert np.all(X[:50, 2] == 0) and X[50:, 2].max() > 100  # fly ash
    clf = make().fit(X[:50], y[:50])
    clf.partial_fit(X[50:300], y[50:300])  # raised FilterStepError
    assert (clf.predict(X[300:]) == y[300:]).mean() >= 0.7
    assert np.all(np.isfinite(clf.predict_log_proba(X[300:])))


def _images(n=150, side=24, seed=0):
    """Image-like rows: a lit centre of values 0-255, border pixels 0 except in later rows."""
    rng = np.random.default_rng(seed)
    im = np.zeros((n, side, side))
    im[:, 4:-4, 4:-4] = rng.uniform(0, 255, size=(n, side - 8, side - 8)) * (rng.random((n, side - 8, side - 8)) < 0.4)
    im[50:, 1:3, :] = rng.uniform(0, 255, size=(n - 50, 2, side))
    X = im.reshape(n, -1)
    s = X[:, 150:250].mean(axis=1)
    return X, (s > np.median(s)).astype(int)


def test_two_row_start_of_a_wide_stream_does_not_diverge():
    X, y = _images()
    assert X.shape[1] >= 500
    clf = LoFiClassifier(random_state=0).partial_fit(X[:2], y[:2], classes=[0, 1])
    for t in range(2, len(X), 10):  # diverged on the third row
        clf.partial_fit(X[t:t + 10], y[t:t + 10])
    assert np.all(np.isfinite(clf.predict_log_proba(X)))


def test_constant_features_take_the_spread_of_the_varying_ones():
    X = np.array([[0.0, 5.0, 100.0, 1.0], [0.0, 5.0, 300.0, 3.0], [0.0, 5.0, 200.0, 2.0]])
    offset, scale = input_standardization(X)
    spread = np.median(X[:, 2:].std(axis=0))
    np.testing.assert_allclose(offset, X.mean(axis=0))
    np.testing.assert_allclose(scale, [spread, spread, X[:, 2].std(), X[:, 3].std()])
    # one row: nothing varies, the median magnitude of the nonzero features
    np.testing.assert_allclose(input_standardization(np.array([[200.0, 0.0, -3.0]]))[1], [200.0, 101.5, 101.5])


def test_clipped_inputs_give_the_same_outputs_and_jacobian_on_both_adapters():
    rng = np.random.default_rng(0)
    X = rng.normal(loc=[5.0, -300.0, 0.0], scale=[0.5, 40.0, 1.0], size=(30, 3))
    X[:, 2] = 0.0
    reg = LoFiRegressor(hidden_layer_sizes=(4,), random_state=0).fit(X, X[:, 0])
    assert isinstance(reg.module_, StandardizedMLP) and reg.module_.input_bound == INPUT_BOUND
    Xfar = X[:6] + np.array([100.0, 0.0, 1e4])  # beyond the bound in two features
    fused = make_adapter(reg.module_, torch.device("cpu"), torch.float64, 3)
    general = make_adapter(reg.module_, torch.device("cpu"), torch.float64, 3, fused=False)
    theta, Xt = reg.posterior_.mean, torch.as_tensor(Xfar)
    f1, J1 = fused.forward_jacobian(theta, Xt)
    f2, J2 = general.forward_jacobian(theta, Xt)
    torch.testing.assert_close(f1, f2, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(J1, J2, rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        np.testing.assert_allclose(reg.module_(Xt).numpy().ravel(), reg.predict(Xfar), rtol=1e-10)
    # the first layer sees the clipped row: a farther row predicts the same
    np.testing.assert_allclose(reg.predict(Xfar), reg.predict(Xfar + np.array([1e3, 0.0, 1e5])), rtol=1e-12)


def test_prior_rows_benchmark_runs_a_small_stream():
    from skfilter.benchmarks import prior_rows

    rows = prior_rows.run(ks=(2, "all"), families=("LoFi", "WoLF"), names=["iris"], max_rows=60, progress=None)
    assert len(rows) == 4 and not any(r["failed"] for r in rows)
    table = prior_rows.summary(rows)
    assert {t["k"] for t in table} == {"2", "all"} and all(0 <= t["accuracy"] <= 1 for t in table)
