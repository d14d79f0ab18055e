"""skfilter.compose.TargetScaledRegressor: a regressor on affinely scaled targets whose predictive
mean, standard deviation and samples are mapped back to ``y``'s units (issue 19: scikit-learn's
``TransformedTargetRegressor`` does not pass ``return_std`` through)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.compose import TransformedTargetRegressor
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import GridSearchCV, TimeSeriesSplit
from sklearn.preprocessing import FunctionTransformer, MinMaxScaler, QuantileTransformer, StandardScaler
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfilter import BOCDRegressor, EKFRegressor, LoFiRegressor, WoLFRegressor, make_partial_pipeline
from skfilter.compose import TargetScaledRegressor
from skfilter.model_selection import prequential_predict

rng = np.random.default_rng(0)
X = rng.normal(size=(150, 2))
y = 500.0 + 40.0 * X[:, 0] - 10.0 * X[:, 1] + 3.0 * rng.normal(size=150)
Y2 = np.column_stack([y, -0.01 * y + rng.normal(size=150)])


def _base(**kw):
    return EKFRegressor(**{"hidden_layer_sizes": (), "prior_variance": 1.0, "obs_variance": 0.05, "random_state": 0,
                           **kw})


@pytest.mark.parametrize("transformer", [None, StandardScaler(), MinMaxScaler(feature_range=(-2, 3))])
@pytest.mark.parametrize("target", ["1d", "2d"])
def test_mean_std_and_samples_are_the_analytic_back_transform(transformer, target):
    """The base regressor fitted on ``z = T(y)`` by hand, and its predictive mapped back with
    ``a = T⁻¹(0)``, ``s = T⁻¹(1) − T⁻¹(0)``, equals the meta-estimator's."""
    Y = y if target == "1d" else Y2
    reg = TargetScaledRegressor(_base(), transformer=transformer).fit(X, Y)
    scaler = clone(transformer or StandardScaler()).fit(Y.reshape(len(Y), -1))
    Z = scaler.transform(Y.reshape(len(Y), -1))
    manual = _base().fit(X, Z[:, 0] if target == "1d" else Z)
    a = scaler.inverse_transform(np.zeros((1, Z.shape[1])))[0]
    s = scaler.inverse_transform(np.ones((1, Z.shape[1])))[0] - a
    np.testing.assert_allclose(reg.offset_, a)
    np.testing.assert_allclose(reg.scale_, s)
    mz, sz = manual.predict(X[:7], return_std=True)
    mean, std = reg.predict(X[:7], return_std=True)
    if target == "1d":
        a, s = a[0], s[0]
    np.testing.assert_allclose(mean, a + s * mz, rtol=1e-12)
    np.testing.assert_allclose(std, np.abs(s) * sz, rtol=1e-12)
    np.testing.assert_allclose(reg.predict(X[:7]), mean, rtol=1e-12)
    draws = reg.sample_y(X[:7], n_samples=4, random_state=3)
    zs = manual.sample_y(X[:7], n_samples=4, random_state=3)
    expected = a + s * zs if target == "1d" else a[None, :, None] + s[None, :, None] * zs
    np.testing.assert_allclose(draws, expected, rtol=1e-12)
    assert draws.shape == ((7, 4) if target == "1d" else (7, 2, 4))


def test_fixed_variances_in_standardised_units_give_calibrated_predictions_in_raw_units():
    noise = (3.0 / y[:100].std()) ** 2  # the noise variance in standardised units
    reg = TargetScaledRegressor(_base(obs_variance=noise)).fit(X[:100], y[:100])
    mean, std = reg.predict(X[100:], return_std=True)
    z = (y[100:] - mean) / std
    assert abs(np.mean(z ** 2) - 1) < 0.5  # calibrated in raw units (noise std 3 on a scale of 40)
    assert np.sqrt(np.mean((y[100:] - mean) ** 2)) < 5.0


def test_transformed_target_regressor_fails_where_this_works():
    ttr = TransformedTargetRegressor(regressor=_base(), transformer=StandardScaler()).fit(X, y)
    with pytest.raises((TypeError, AttributeError)):  # it passes return_std=True on, then fails on the tuple
        ttr.predict(X[:3], return_std=True)
    mean, std = TargetScaledRegressor(_base()).fit(X, y).predict(X[:3], return_std=True)
    assert mean.shape == std.shape == (3,)


def test_partial_fit_keeps_the_first_calls_scale_and_streams_like_fit():
    streamed = TargetScaledRegressor(_base())
    streamed.partial_fit(X[:50], y[:50])
    offset, scale = streamed.offset_.copy(), streamed.scale_.copy()
    for a in range(50, 150, 25):
        streamed.partial_fit(X[a:a + 25], y[a:a + 25])
    np.testing.assert_array_equal(streamed.offset_, offset)  # fixed after the first call
    np.testing.assert_array_equal(streamed.scale_, scale)
    np.testing.assert_allclose(offset, [y[:50].mean()])
    # the same as fitting the base on the stream scaled by the first 50 rows
    manual = _base()
    z = (y - y[:50].mean()) / y[:50].std()
    manual.partial_fit(X[:50], z[:50])
    manual.partial_fit(X[50:], z[50:])
    np.testing.assert_allclose(streamed.predict(X[:5]), y[:50].mean() + y[:50].std() * manual.predict(X[:5]),
                               rtol=1e-9)


def test_frozen_transformer_from_a_burn_in_window_is_used_as_is():
    burn_in = StandardScaler().fit(y[:30, None])
    reg = TargetScaledRegressor(_base(), transformer=FrozenEstimator(burn_in))
    for i in range(30, 60):  # one row per call: the burn-in scale, not the first row's
        reg.partial_fit(X[i:i + 1], y[i:i + 1])
    assert reg.transformer_.estimator is burn_in
    np.testing.assert_allclose(reg.scale_, burn_in.scale_)
    np.testing.assert_allclose(reg.offset_, burn_in.mean_)
    # without it, a first call of one row has no spread: unit scale, centred on that row
    single = TargetScaledRegressor(_base()).partial_fit(X[:1], y[:1])
    np.testing.assert_allclose(single.scale_, [1.0])
    np.testing.assert_allclose(single.offset_, y[:1])


@pytest.mark.parametrize("transformer", [QuantileTransformer(n_quantiles=20),
                                         FunctionTransformer(np.log1p, np.expm1)])
def test_a_transformer_that_is_not_affine_is_rejected(transformer):
    reg = TargetScaledRegressor(_base(), transformer=transformer)
    with pytest.raises(ValueError, match="affine"):
        reg.fit(X, np.abs(y))
    assert not hasattr(reg, "regressor_")


def test_bad_input_leaves_it_unchanged():
    reg = TargetScaledRegressor(_base()).fit(X[:50], y[:50])
    before = dict(vars(reg))
    with pytest.raises(ValueError, match="output"):
        reg.partial_fit(X[:5], Y2[:5])
    with pytest.raises(ValueError):
        reg.partial_fit(X[:5], np.full(5, np.nan))
    with pytest.raises(InvalidParameterError, match="'regressor' parameter"):
        clone(reg).set_params(regressor=object()).fit(X, y)
    assert vars(reg).keys() == before.keys() and all(vars(reg)[k] is before[k] for k in before)
    reg.set_params(regressor=_base(decay=0.9))
    with pytest.raises(ValueError, match="'regressor' changed"):
        reg.partial_fit(X[:5], y[:5])
    reg.fit(X[:5], y[:5])  # fit starts a new stream with it
    assert reg.regressor_.decay == 0.9


@pytest.mark.parametrize("base", [WoLFRegressor(LoFiRegressor(hidden_layer_sizes=(4,), rank=2, random_state=0)),
                                  BOCDRegressor(_base(), n_hypotheses=2),
                                  make_partial_pipeline(StandardScaler(), _base())],
                         ids=["wolf", "bocd", "pipeline"])
def test_composes_with_wrappers_pipelines_and_prequential_predict(base):
    """prequential_predict feeds one row per call: the scaler is fitted on a burn-in window and
    frozen, as the first row alone has no spread."""
    reg = TargetScaledRegressor(base, transformer=FrozenEstimator(StandardScaler().fit(y[:30, None])))
    mean, std = prequential_predict(reg, X, y, return_std=True)
    assert mean.shape == std.shape == y.shape and np.all(std[1:] > 0)  # row 0 has no prediction (NaN)
    assert np.sqrt(np.mean((y[100:] - mean[100:]) ** 2)) < 30.0


def test_grid_search_and_pickle():
    search = GridSearchCV(TargetScaledRegressor(_base()), {"regressor__obs_variance": [0.01, 0.1]},
                          cv=TimeSeriesSplit(n_splits=3)).fit(X, y)
    assert search.best_estimator_.predict(X[:2]).shape == (2,)
    reg = TargetScaledRegressor(_base()).fit(X[:80], y[:80])
    copy = pickle.loads(pickle.dumps(reg))
    reg.partial_fit(X[80:], y[80:])
    copy.partial_fit(X[80:], y[80:])
    np.testing.assert_array_equal(copy.predict(X, return_std=True), reg.predict(X, return_std=True))


@parametrize_with_checks([TargetScaledRegressor(EKFRegressor(hidden_layer_sizes=(5,), random_state=0)),
                          TargetScaledRegressor(LoFiRegressor(random_state=0), transformer=MinMaxScaler())],
                         expected_failed_checks=lambda est: {
                             "check_sample_weight_equivalence_on_dense_data": (
                                 "as for the base filters (tests/test_sklearn_compat.py): a weight scales one "
                                 "linearised update; repeated rows re-linearise")})
def test_sklearn_compatible(estimator, check):
    check(estimator)


@pytest.mark.parametrize("wrap", ["target-scaled", "stream-prefix"])
def test_sample_y_passes_the_sampling_method_through(wrap):
    """``method='predictive'`` reaches the filter: independent draws per row with the predictive's
    mean and standard deviation (in the targets' units); a regressor without ``method`` still works
    when it is not given."""
    from sklearn.gaussian_process import GaussianProcessRegressor

    from skfilter import LoFiRegressor
    from skfilter.compose import TargetScaledRegressor
    from skfilter.model_selection import StreamPrefixEstimator

    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 2))
    y = 100 * X[:, 0] + 5 + rng.normal(size=100)
    make = TargetScaledRegressor if wrap == "target-scaled" else StreamPrefixEstimator
    est = make(LoFiRegressor(hidden_layer_sizes=(5,), random_state=0)).fit(X, y)
    draws = est.sample_y(X[:3], 20_000, random_state=0, method="predictive")
    mean, std = est.predict(X[:3], return_std=True)
    np.testing.assert_allclose(draws.mean(-1), mean, atol=5 * std.max() / np.sqrt(20_000))
    np.testing.assert_allclose(draws.std(-1), std, rtol=0.03)
    thompson = est.sample_y(X[:3], 2, random_state=0)
    np.testing.assert_array_equal(thompson, est.sample_y(X[:3], 2, random_state=0, method="thompson"))
    gp = make(GaussianProcessRegressor(optimizer=None)).fit(X[:30], y[:30])
    assert gp.sample_y(X[:3], 2, random_state=0).shape == (3, 2)
