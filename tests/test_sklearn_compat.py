"""scikit-learn's estimator checks over every public estimator.

Two sets: the configurations below (small networks, every structure and option worth its own run),
and every public estimator as a user constructs it, ``Est()`` with no arguments (wrappers with their
default base; issue 30), enumerated from the package's public modules so that a new estimator is
checked without being listed here. Expected failures are listed here, once, each with the reason it
is expected.
"""

import inspect

from sklearn.base import BaseEstimator
from sklearn.pipeline import Pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

import skfilter
import skfilter.baselines
import skfilter.compose
import skfilter.model_selection
from skfilter import (EKFClassifier, EKFRegressor, FactorizationClassifier, FactorizationRegressor, HiLoFiClassifier, HiLoFiRegressor, LoFiClassifier, LoFiRegressor,
                      LoLoFiClassifier, LoLoFiRegressor, LRKFClassifier, LRKFRegressor, PULSEClassifier,
                      PULSERegressor, SubspaceClassifier, SubspaceRegressor)

#: check name -> reason, shared by every filter estimator
EXPECTED_FAILED_CHECKS = {
    "check_sample_weight_equivalence_on_dense_data": (
        "A weight w scales the precision of one observation (R/w), applied in a single update "
        "linearised at one point; repeating the row w times re-linearises the network between "
        "updates and changes the order of the stream, so the beliefs differ for a non-linear model "
        "(they agree for a linear-Gaussian model, which tests/test_estimators.py checks)."
    ),
}


def _estimators():
    small = dict(hidden_layer_sizes=(10,), random_state=0)
    return [
        EKFRegressor(**small),
        EKFRegressor(covariance="vd", prior_variance=0.01, **small),
        EKFRegressor(covariance="fd", **small),
        EKFClassifier(**small),
        EKFClassifier(covariance="vd", prior_variance=0.01, **small),
        EKFClassifier(covariance="fd", **small),
        LoFiRegressor(rank=3, **small),
        LoFiRegressor(rank=2, variant="spherical", svd="orth", **small),
        LoFiClassifier(rank=3, **small),
        LRKFRegressor(rank=20, **small),
        LRKFClassifier(rank=20, **small),
        HiLoFiRegressor(hidden_rank=3, **small),
        HiLoFiClassifier(hidden_rank=3, **small),
        HiLoFiClassifier(hidden_rank=3, likelihood="moment-matched", **small),
        # three passes: check_regressors_train asks for R² > 0.5 on its training data, which one pass
        # of a rank-5 last layer does not reliably reach (0.26-0.54 over random_state 0-4, with the
        # prior of the first call's 200 rows as with that of the first 50 since issue 29: 0.543 ->
        # 0.471 at random_state=0); with n_epochs=3, 0.57-0.63
        LoLoFiRegressor(hidden_rank=10, last_rank=5, n_epochs=3, **small),
        LoLoFiClassifier(hidden_rank=10, last_rank=10, **small),
        SubspaceRegressor(n_components=5, **small),
        SubspaceRegressor(n_components=5, covariance="lofi", rank=2, **small),
        SubspaceClassifier(n_components=5, **small),
        PULSERegressor(n_components=3, **small),
        PULSEClassifier(n_components=3, **small),
        PULSEClassifier(n_components=3, mean_update="fixed-point", likelihood="moment-matched", **small),
        FactorizationRegressor(n_factors=2, random_state=0),
        FactorizationRegressor(model="glm", half_life=50, random_state=0),
        FactorizationClassifier(n_factors=2, random_state=0),
    ]


@parametrize_with_checks(_estimators(), expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS)
def test_sklearn_compatible(estimator, check):
    check(estimator)


#: the public modules whose ``__all__`` lists estimators
PUBLIC_MODULES = (skfilter, skfilter.baselines, skfilter.compose, skfilter.model_selection)
#: public estimators that cannot be constructed without arguments, and why
NEEDS_ARGUMENTS = {"StreamPrefixEstimator": "wraps the estimator it is given; it has no default one"}


def _public_estimator_classes():
    """Every public estimator class (``PartialPipeline`` is scikit-learn's ``Pipeline`` of given steps)."""
    found = {}
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, BaseEstimator) and not issubclass(obj, Pipeline):
                found[name] = obj
    return found


def _required_arguments(cls):
    return [p.name for p in inspect.signature(cls.__init__).parameters.values()
            if p.name != "self" and p.default is inspect.Parameter.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _defaults():
    """``Est()`` for every public estimator that can be constructed so."""
    return [cls() for name, cls in sorted(_public_estimator_classes().items()) if not _required_arguments(cls)]


def _expected_failed_defaults(est):
    """The sample-weight equivalence of the filters (and of the wrappers and compositions of them):
    as above. The gradient baselines pass every check."""
    return {} if isinstance(est, (skfilter.baselines.ReplaySGDRegressor, skfilter.baselines.ReplaySGDClassifier)) \
        else EXPECTED_FAILED_CHECKS


def test_every_public_estimator_constructed_without_arguments_is_checked():
    classes = _public_estimator_classes()
    checked = {type(est).__name__ for est in _defaults()}
    assert {name for name, cls in classes.items() if _required_arguments(cls)} == set(NEEDS_ARGUMENTS)
    assert checked == set(classes) - set(NEEDS_ARGUMENTS)
    assert {"EKFRegressor", "WoLFClassifier", "BOCDRegressor", "FactorizationClassifier", "PULSERegressor",
            "TargetScaledRegressor", "ReplaySGDClassifier"} <= checked


@parametrize_with_checks(_defaults(), expected_failed_checks=_expected_failed_defaults)
def test_sklearn_compatible_as_constructed_without_arguments(estimator, check):
    """A wrapper built with no arguments fits a default base whose seed its own ``random_state``
    sets (``set_random_state`` reaches it), so two fits agree (``check_fit_idempotent``, …)."""
    check(estimator)


def test_catch_all_name_is_stored_and_rejected_by_fit_only():
    """``Est(module_kwargs=...)`` (the ``**`` catch-all's own name, as the check above passes it) and
    ``set_params(module_kwargs=...)`` never raise; the value is a parameter like a ``module__<name>``
    one (``get_params``, ``clone``) and ``fit`` rejects it as an unknown keyword argument."""
    import numpy as np
    import pytest
    from sklearn.base import clone

    reg = EKFRegressor(hidden_layer_sizes=(3,), module_kwargs={"hidden": 4}, module__bias=True)
    assert reg.get_params()["module_kwargs"] == {"hidden": 4}
    assert reg.get_params()["module__bias"] is True
    reg.set_params(module_kwargs=3.0, module__bias=False)
    twin = clone(reg)
    assert twin.get_params()["module_kwargs"] == 3.0 and twin.module__bias is False
    X, y = np.zeros((4, 2)), np.zeros(4)
    with pytest.raises(TypeError, match="module_kwargs"):
        twin.fit(X, y)
    assert not hasattr(twin, "filter_state_")
    # a fresh estimator accepts the name in set_params too
    assert LoFiRegressor().set_params(module_kwargs=-1).module_kwargs == -1
