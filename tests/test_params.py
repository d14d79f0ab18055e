"""Parameters of the estimators: structural parameters changed with ``set_params`` between
``fit`` and ``partial_fit`` (:func:`skfilter._validation.check_structural_params_unchanged`), the
``**`` catch-all, and the parameter documentation (plain class docstrings, signature order)."""

import doctest
import inspect
import re

import numpy as np
import pytest
import torch
from sklearn.base import clone
from torch import nn

import skfilter._classification
import skfilter._regression
import skfilter.ekf
import skfilter.lofi
import skfilter.model_selection
from skfilter import EKFClassifier, EKFRegressor, LoFiClassifier, LoFiRegressor


class Net(nn.Module):
    """A module class with constructor arguments (``module__n_in``, ``module__hidden``)."""

    def __init__(self, n_in=2, hidden=3, n_out=1):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, n_out))

    def forward(self, x):
        return self.body(x)


def _data(classifier, n=16, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if classifier:
        return X, (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int)
    return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)


SMALL = dict(hidden_layer_sizes=(3,), random_state=0)
FILTERS = {
    "EKFRegressor": lambda **kw: EKFRegressor(**{**SMALL, **kw}),
    "EKFClassifier": lambda **kw: EKFClassifier(**{**SMALL, **kw}),
    "LoFiRegressor": lambda **kw: LoFiRegressor(**{**SMALL, "rank": 2, **kw}),
    "LoFiClassifier": lambda **kw: LoFiClassifier(**{**SMALL, "rank": 2, **kw}),
}
#: (estimator, structural parameter, new value, extra constructor arguments)
STRUCTURAL = [
    ("EKFRegressor", "covariance", "vd", {}),
    ("EKFRegressor", "vd_mean", "paper", {"covariance": "vd"}),
    ("EKFRegressor", "hidden_layer_sizes", (4,), {}),
    ("EKFRegressor", "activation", "tanh", {}),
    ("EKFRegressor", "prior_variance", 0.25, {}),
    ("EKFRegressor", "obs_variance", 0.5, {}),
    ("EKFRegressor", "likelihood", "poisson", {}),
    ("EKFClassifier", "covariance", "fd", {}),
    ("EKFClassifier", "hidden_layer_sizes", (2, 2), {}),
    ("EKFClassifier", "prior_variance", 3.0, {}),
    ("LoFiRegressor", "rank", 3, {}),
    ("LoFiRegressor", "variant", "spherical", {}),
    ("LoFiRegressor", "hidden_layer_sizes", (5,), {}),
    ("LoFiRegressor", "prior_variance", 0.5, {}),
    ("LoFiClassifier", "rank", 1, {}),
    ("LoFiClassifier", "prior_variance", 2.0, {}),
]
NON_STRUCTURAL = [
    ("decay", 0.9),
    ("process_noise", 1e-3),
    ("batch_size", 4),
    ("predictive", "mc"),
    ("n_mc_samples", 7),
    ("shuffle", True),
    ("n_epochs", 2),
    ("verbose", 0),
]


def _same_belief(a, b):
    for x, y in zip(a.filter_state_.belief, b.filter_state_.belief):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y)
        else:
            assert x == y


def _check_structural_change(est, name, value, X, y):
    """``fit``; ``set_params(name=value)``: ``partial_fit`` raises (naming ``name``) and leaves the
    estimator as it was; ``fit`` then starts a new stream with the new value, as an estimator built
    with it; ``partial_fit`` goes on after that."""
    est.fit(X, y)
    before = est.filter_state_
    est.set_params(**{name: value})
    with pytest.raises(ValueError, match=re.escape(repr(name))):
        est.partial_fit(X, y)
    assert est.filter_state_ is before and est.n_samples_seen_ == len(X)
    assert est.get_params()[name] == value  # the new value stays set
    est.fit(X, y)
    fresh = clone(est).fit(X, y)
    _same_belief(est, fresh)
    assert est.n_samples_seen_ == len(X)
    est.partial_fit(X, y)  # the new stream continues
    assert est.n_samples_seen_ == 2 * len(X)


@pytest.mark.parametrize("name, param, value, extra", STRUCTURAL,
                         ids=[f"{e}-{p}" for e, p, _, _ in STRUCTURAL])
def test_structural_param_change_blocks_partial_fit_but_not_fit(name, param, value, extra):
    est = FILTERS[name](**extra)
    X, y = _data(name.endswith("Classifier"))
    if param == "likelihood":
        y = np.abs(np.round(3 * y))
    _check_structural_change(est, param, value, X, y)


@pytest.mark.parametrize("name", ["LoFiRegressor", "LoFiClassifier"])
def test_rank_change_is_used_by_the_next_fit(name):
    X, y = _data(name.endswith("Classifier"))
    est = FILTERS[name](rank=2).fit(X, y)
    assert est.posterior_.low_rank.shape[0] == 2
    est.set_params(rank=4)
    with pytest.raises(ValueError, match="'rank'"):
        est.partial_fit(X, y)
    assert est.posterior_.low_rank.shape[0] == 2
    est.fit(X, y)
    assert est.posterior_.low_rank.shape[0] == 4


@pytest.mark.parametrize("name", ["EKFRegressor", "EKFClassifier"])
def test_covariance_change_is_used_by_the_next_fit(name):
    X, y = _data(name.endswith("Classifier"))
    est = FILTERS[name]().fit(X, y)
    assert est.posterior_.covariance().shape == (est.n_params_, est.n_params_)
    assert type(est.posterior_.belief).__name__ == "FullBelief"
    est.set_params(covariance="vd")
    with pytest.raises(ValueError, match="'covariance'"):
        est.partial_fit(X, y)
    est.fit(X, y)
    assert type(est.posterior_.belief).__name__ == "DiagonalBelief"


@pytest.mark.parametrize("name", list(FILTERS))
def test_hidden_layer_sizes_change_is_used_by_the_next_fit(name):
    X, y = _data(name.endswith("Classifier"))
    est = FILTERS[name]().fit(X, y)
    n_params = est.n_params_
    est.set_params(hidden_layer_sizes=(6,))
    with pytest.raises(ValueError, match="'hidden_layer_sizes'"):
        est.partial_fit(X, y)
    assert est.n_params_ == n_params
    est.fit(X, y)
    assert est.n_params_ > n_params


@pytest.mark.parametrize("name", list(FILTERS))
def test_prior_variance_change_is_used_by_the_next_fit(name):
    X, y = _data(name.endswith("Classifier"))
    est = FILTERS[name](prior_variance=1.0).fit(X, y)
    est.set_params(prior_variance=0.01)
    with pytest.raises(ValueError, match="'prior_variance'"):
        est.partial_fit(X, y)
    est.fit(X, y)
    assert est._reference.variance == 0.01
    _same_belief(est, FILTERS[name](prior_variance=0.01).fit(X, y))


@pytest.mark.parametrize("name", list(FILTERS))
def test_module_kwarg_change_blocks_partial_fit_but_not_fit(name):
    classifier = name.endswith("Classifier")
    X, y = _data(classifier)
    est = FILTERS[name](module=Net, module__n_in=2, module__hidden=3, module__n_out=1)
    est.fit(X, y)
    assert est.n_params_ == 2 * 3 + 3 + 3 + 1
    est.set_params(module__hidden=5)
    with pytest.raises(ValueError, match="'module__hidden'"):
        est.partial_fit(X, y)
    assert est.n_params_ == 2 * 3 + 3 + 3 + 1
    est.fit(X, y)
    assert est.n_params_ == 2 * 5 + 5 + 5 + 1
    est.partial_fit(X, y)
    # a module__<name> added after the stream started changes the model too
    est.set_params(module__n_out=1)  # same value: accepted
    est.partial_fit(X, y)
    est.set_params(module__bias_free=True)
    with pytest.raises(ValueError, match="'module__bias_free'"):
        est.partial_fit(X, y)


@pytest.mark.parametrize("name", list(FILTERS))
@pytest.mark.parametrize("param, value", NON_STRUCTURAL, ids=[p for p, _ in NON_STRUCTURAL])
def test_non_structural_param_change_is_accepted_mid_stream(name, param, value):
    X, y = _data(name.endswith("Classifier"))
    est = FILTERS[name]().fit(X, y)
    est.set_params(**{param: value})
    est.partial_fit(X, y)
    assert est.n_samples_seen_ == 2 * len(X)
    assert est.get_params()[param] == value


@pytest.mark.parametrize("name", list(FILTERS))
def test_setting_a_structural_param_to_an_equal_value_is_accepted(name):
    X, y = _data(name.endswith("Classifier"))
    est = FILTERS[name]().fit(X, y)
    est.set_params(hidden_layer_sizes=[3], prior_variance="auto", activation="relu", module=None)
    est.partial_fit(X, y)
    assert est.n_samples_seen_ == 2 * len(X)


def test_non_structural_change_is_used_by_partial_fit():
    X, y = _data(False)
    a = FILTERS["EKFRegressor"]().fit(X, y)
    b = clone(a).fit(X, y)
    a.set_params(decay=0.5)
    a.partial_fit(X, y)
    b.partial_fit(X, y)
    assert not torch.equal(a.posterior_.mean, b.posterior_.mean)


def test_device_change_mid_stream_is_accepted():
    X, y = _data(False)
    est = FILTERS["LoFiRegressor"]().fit(X, y)
    est.set_params(dtype="float32")
    est.partial_fit(X, y)
    assert est.posterior_.mean.dtype == torch.float32


# ---------------------------------------------------------------------------------------------
# the ** catch-all
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(FILTERS))
def test_catch_all_name_never_raises_in_init_or_set_params(name):
    cls = type(FILTERS[name]())
    assert cls._catch_all_name() == "module_kwargs"
    names = [n for n in inspect.signature(cls).parameters]
    assert "module_kwargs" in names
    for value in (-1, "x", {}, [1]):
        est = cls(**{n: value for n in names})
        est.set_params(**{n: value for n in names})
        assert est.get_params()["module_kwargs"] is value
        with pytest.raises((TypeError, ValueError)):
            est.fit(*_data(name.endswith("Classifier")))


def test_module_kwargs_survive_clone_and_set_params():
    est = EKFRegressor(module=Net, module__hidden=4)
    assert est.get_params()["module__hidden"] == 4
    est.set_params(module__hidden=2, module__n_in=2)
    twin = clone(est)
    assert twin.module__hidden == 2 and twin.module__n_in == 2
    assert "module_kwargs" not in twin.get_params()


# ---------------------------------------------------------------------------------------------
# parameter documentation
# ---------------------------------------------------------------------------------------------
def _documented_params(doc):
    section = doc.split("Parameters\n    ----------\n", 1)[1].split("\n\n", 1)[0]
    return [m.group(1) for m in re.finditer(r"^    (\*{0,2}\w+)(?: :|$)", section, re.M)]


@pytest.mark.parametrize("cls", [EKFRegressor, EKFClassifier, LoFiRegressor, LoFiClassifier])
def test_every_parameter_documented_in_signature_order(cls):
    assert "Parameters" in vars(cls)["__doc__"]  # a plain class docstring, not inherited
    sig = [("**" + p.name) if p.kind == p.VAR_KEYWORD else p.name
           for p in inspect.signature(cls).parameters.values()]
    assert _documented_params(cls.__doc__) == sig


def test_baselines_document_every_parameter_in_signature_order():
    pytest.importorskip("skorch")
    from skfilter.baselines import ReplaySGDClassifier, ReplaySGDRegressor

    for cls in (ReplaySGDRegressor, ReplaySGDClassifier):
        sig = [("**" + p.name) if p.kind == p.VAR_KEYWORD else p.name
               for p in inspect.signature(cls).parameters.values()]
        assert _documented_params(cls.__doc__) == sig


def test_estimator_modules_import_no_private_name_of_another_estimator_module():
    import pathlib

    root = pathlib.Path(skfilter.ekf.__file__).parent
    estimator_modules = ("ekf", "lofi", "baselines")
    for mod in estimator_modules:
        src = (root / f"{mod}.py").read_text()
        for other in estimator_modules:
            assert not re.search(rf"from \.{other} import [^\n]*\b_\w+", src), (mod, other)


@pytest.mark.parametrize("module", [skfilter.ekf, skfilter.lofi, skfilter._regression,
                                    skfilter._classification, skfilter.model_selection])
def test_docstring_examples_run(module):
    res = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.attempted > 0 and res.failed == 0
