"""Extended Kalman filters with full or diagonal covariance: :class:`EKFRegressor`, :class:`EKFClassifier`.

The posterior structure is chosen by ``covariance`` (spec/diagonal-ekf.md §3):

* ``'full'`` — FCEKF, the dense ``P × P`` covariance (:class:`~skfilter.posteriors.FullCovariance`,
  ``O(P² C)`` per step);
* ``'vd'`` — VD-EKF, diagonal by precision matching (exclusive KL, §3.3);
* ``'fd'`` — FD-EKF, diagonal by variance matching (inclusive KL, §3.2).
"""

from __future__ import annotations

from ._classification import FilterClassifierMixin
from ._estimator import BaseFilter
from ._regression import FilterRegressorMixin
from .posteriors import DiagonalCovariance, FullCovariance

_COVARIANCES = ("full", "vd", "fd")


class _EKFStructure:
    """The EKF posterior structures (module docstring)."""

    _structure_structural_params = ("covariance", "vd_mean")

    def _check_structure_params(self):
        if self.covariance not in _COVARIANCES:
            raise ValueError(f"covariance must be one of {_COVARIANCES}, got {self.covariance!r}.")
        if self.vd_mean not in ("paper", "exact"):
            raise ValueError(f"vd_mean must be 'paper' or 'exact', got {self.vd_mean!r}.")
        return {}

    def _make_structure(self, cfg):
        if self.covariance == "full":
            return FullCovariance()
        return DiagonalCovariance(projection=self.covariance, vd_mean=self.vd_mean)


class EKFRegressor(_EKFStructure, FilterRegressorMixin, BaseFilter):
    """Neural-network regression by an extended Kalman filter over the weights.

    Each row of ``X`` is one time step: the network is linearised at the predicted mean and the
    Gaussian belief over its weights is updated in closed form (no learning rate). The belief gives
    the posterior predictive of ``y`` (``predict(X, return_std=True)``, ``sample_y``).

    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(50,)
        Hidden widths of the default MLP (ignored when ``module`` is given).
    activation : {'relu', 'tanh', 'logistic', 'identity', 'elu'}, default='relu'
        Hidden non-linearity of the default MLP.
    module : torch.nn.Module class or instance, default=None
        The network ``h(θ, x)``. A class is instantiated with the ``module__<name>`` keyword
        arguments (its random initialisation seeded by ``random_state``); an instance is copied and
        its current weights are the **prior mean** (never re-initialised). ``None``: the default
        MLP, LeCun-normal weights and zero biases.
    covariance : {'full', 'vd', 'fd'}, default='full'
        Posterior structure: dense covariance, or diagonal with VD (precision matching) or FD
        (variance matching) projection.
    vd_mean : {'exact', 'paper'}, default='exact'
        Mean update of VD-EKF: the KL-optimal EKF mean (spec/diagonal-ekf.md §6 A1; stable), or
        eq. 25 as in the authors' code (``'paper'``; diverges for prior variances ≳ 0.01 on
        standardised UCI data). Ignored for the other structures.
    prior_variance : 'auto' or float, default='auto'
        Prior covariance of the weights. ``'auto'`` (see :mod:`skfilter.priors`): each weight's
        prior variance is its initialisation variance (``1/fan_in``), the first layer's scaled per
        input feature by the inverse mean square of that feature in the first rows the estimator
        sees, so raw, unscaled features work; regressors also scale the output layer to the targets'
        standard deviation (and centre its bias on their mean), classifiers give the logits prior
        standard deviation √3. A float: ``prior_variance · I`` around the initial weights (the
        papers' parametrisation; standardise features and targets then).
    obs_variance : 'auto', 'adaptive', float or array of shape (n_outputs,), default='auto'
        Observation-noise variance ``r`` of the Gaussian likelihood. ``'auto'``: the online estimate
        of spec/lofi.md §2.9 (C.2) from the one-step-ahead residuals, forgetting with an exponential
        window of ~50 rows (``ε_min = 0.02``), so that the ±2σ band follows the current error;
        ``'adaptive'``: the paper's running mean (``ε_t = 1/t``); a float or array: fixed
        variance(s), in the targets' units. Ignored by the Poisson likelihood.
    likelihood : {'gaussian', 'poisson'}, default='gaussian'
        Observation model; 'poisson' uses a log link (counts).
    process_noise : float, default=0.0
        ``q`` of the dynamics ``θ_t = γ θ_{t−1} + N(0, q I)`` applied before every step.
    decay : float, default=1.0
        ``γ`` of the dynamics, in [0, 1].
    n_epochs : int, default=1
        Passes over the data in :meth:`fit` (``partial_fit`` always makes one).
    shuffle : bool, default=False
        Shuffle the rows before every pass after the first (the first is in row order).
    batch_size : int, default=1
        Rows per filter step; their pseudo-observations are conditioned on jointly, linearised at
        the same predicted mean (1 = one row at a time, the exact sequential filter).
    predictive : {'linearized', 'plugin', 'mc'}, default='linearized'
        How the posterior predictive is computed (see ``FilterRegressorMixin``).
    n_mc_samples : int, default=100
        Parameter draws of the Monte-Carlo predictive.
    random_state : int, RandomState instance or None, default=None
        Seeds the initial weights, the shuffles and the Monte-Carlo predictive.
    device : str or torch.device, default='cpu'
        Where the belief lives and the filter runs ('cpu', 'cuda', 'cuda:1', …).
    dtype : {None, 'float64', 'float32'}, default=None
        ``None``: float64 on the CPU, float32 on a GPU.
    verbose : int, default=0
        Show a progress bar while fitting when > 0.
    **module_kwargs
        ``module__<name>=value``: constructor arguments of a ``module`` class.

    Attributes
    ----------
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` had string column names.
    n_params_ : int
        ``P``, the number of parameters the filter learns.
    module_ : torch.nn.Module
        The network carrying the posterior mean.
    posterior_ : skfilter.posteriors.Posterior
        The belief ``N(μ, Σ)`` over the flat parameters: a read-only view (``covariance()``,
        ``marginal_variance()``, ``sample()``) of the belief value ``posterior_.belief``.
    filter_state_ : skfilter.filtering.FilterState
        The fitted state (belief, noise state, rows seen), replaced whole after every step.
    n_samples_seen_ : int
        Rows conditioned on so far (every pass counts).
    n_outputs_ : int
        Number of targets.
    obs_variance_ : ndarray of shape (n_outputs,)
        Observation variance the next step uses (the online estimate with 'adaptive').

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import EKFRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=200)
    >>> reg = EKFRegressor(hidden_layer_sizes=(20,), obs_variance=0.01, random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:2], return_std=True)
    >>> mean.shape, bool(np.all(std > 0.1))
    ((2,), True)
    """

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, covariance="full",
                 vd_mean="exact", prior_variance="auto", obs_variance="auto", likelihood="gaussian",
                 process_noise=0.0, decay=1.0, n_epochs=1, shuffle=False, batch_size=1,
                 predictive="linearized", n_mc_samples=100, random_state=None, device="cpu", dtype=None,
                 verbose=0, **module_kwargs):
        self._store_init_params(locals())


class EKFClassifier(_EKFStructure, FilterClassifierMixin, BaseFilter):
    """Neural-network classification by an extended Kalman filter over the weights.

    Binary or multiclass (any label type). Two classes use one logit (Bernoulli) with the default
    MLP; ``K`` logits use the Categorical likelihood with the exact logit-space update.

    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(50,)
        Hidden widths of the default MLP (ignored when ``module`` is given).
    activation : {'relu', 'tanh', 'logistic', 'identity', 'elu'}, default='relu'
        Hidden non-linearity of the default MLP.
    module : torch.nn.Module class or instance, default=None
        The network ``h(θ, x)``. A class is instantiated with the ``module__<name>`` keyword
        arguments (its random initialisation seeded by ``random_state``); an instance is copied and
        its current weights are the **prior mean** (never re-initialised). ``None``: the default
        MLP, LeCun-normal weights and zero biases.
    covariance : {'full', 'vd', 'fd'}, default='full'
        Posterior structure: dense covariance, or diagonal with VD (precision matching) or FD
        (variance matching) projection.
    vd_mean : {'exact', 'paper'}, default='exact'
        Mean update of VD-EKF: the KL-optimal EKF mean (spec/diagonal-ekf.md §6 A1; stable), or
        eq. 25 as in the authors' code (``'paper'``; diverges for prior variances ≳ 0.01 on
        standardised UCI data). Ignored for the other structures.
    prior_variance : 'auto' or float, default='auto'
        Prior covariance of the weights. ``'auto'`` (see :mod:`skfilter.priors`): each weight's
        prior variance is its initialisation variance (``1/fan_in``), the first layer's scaled per
        input feature by the inverse mean square of that feature in the first rows the estimator
        sees, so raw, unscaled features work; regressors also scale the output layer to the targets'
        standard deviation (and centre its bias on their mean), classifiers give the logits prior
        standard deviation √3. A float: ``prior_variance · I`` around the initial weights (the
        papers' parametrisation; standardise features and targets then).
    process_noise : float, default=0.0
        ``q`` of the dynamics ``θ_t = γ θ_{t−1} + N(0, q I)`` applied before every step.
    decay : float, default=1.0
        ``γ`` of the dynamics, in [0, 1].
    n_epochs : int, default=1
        Passes over the data in :meth:`fit` (``partial_fit`` always makes one).
    shuffle : bool, default=False
        Shuffle the rows before every pass after the first (the first is in row order).
    batch_size : int, default=1
        Rows per filter step; their pseudo-observations are conditioned on jointly, linearised at
        the same predicted mean (1 = one row at a time, the exact sequential filter).
    predictive : {'probit', 'plugin', 'mc'}, default='probit'
        How class probabilities are computed (see ``FilterClassifierMixin``).
    n_mc_samples : int, default=100
        Parameter draws of the Monte-Carlo predictive.
    random_state : int, RandomState instance or None, default=None
        Seeds the initial weights, the shuffles and the Monte-Carlo predictive.
    device : str or torch.device, default='cpu'
        Where the belief lives and the filter runs ('cpu', 'cuda', 'cuda:1', …).
    dtype : {None, 'float64', 'float32'}, default=None
        ``None``: float64 on the CPU, float32 on a GPU.
    verbose : int, default=0
        Show a progress bar while fitting when > 0.
    **module_kwargs
        ``module__<name>=value``: constructor arguments of a ``module`` class.

    Attributes
    ----------
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` had string column names.
    n_params_ : int
        ``P``, the number of parameters the filter learns.
    module_ : torch.nn.Module
        The network carrying the posterior mean.
    posterior_ : skfilter.posteriors.Posterior
        The belief ``N(μ, Σ)`` over the flat parameters: a read-only view (``covariance()``,
        ``marginal_variance()``, ``sample()``) of the belief value ``posterior_.belief``.
    filter_state_ : skfilter.filtering.FilterState
        The fitted state (belief, noise state, rows seen), replaced whole after every step.
    n_samples_seen_ : int
        Rows conditioned on so far (every pass counts).
    classes_ : ndarray of shape (n_classes,)

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import EKFClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); y = np.where(X[:, 0] + X[:, 1] > 0, "yes", "no")
    >>> clf = EKFClassifier(hidden_layer_sizes=(10,), random_state=0).fit(X, y)
    >>> clf.predict([[2.0, 2.0], [-2.0, -2.0]])
    array(['yes', 'no'], dtype='<U3')
    """

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, covariance="full",
                 vd_mean="exact", prior_variance="auto", process_noise=0.0, decay=1.0, n_epochs=1,
                 shuffle=False, batch_size=1, predictive="probit", n_mc_samples=100, random_state=None,
                 device="cpu", dtype=None, verbose=0, **module_kwargs):
        self._store_init_params(locals())
