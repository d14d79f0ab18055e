"""LoFi estimators: diagonal-plus-low-rank precision filters (Chang, Durán-Martín, Shestopaloff, Jones & Murphy 2023).

:class:`LoFiRegressor` and :class:`LoFiClassifier` keep the precision ``Υ + W Wᵀ`` of rank ``L``
(:class:`~skfilter.posteriors.LowRankPrecision`): cost per step linear in the number of
parameters ``P``, ``O(P (L + C)²)``, no learning rate.
"""

from __future__ import annotations

from numbers import Integral, Real

from sklearn.utils._param_validation import Interval, StrOptions

from ._classification import FilterClassifierMixin, LikelihoodParameterMixin
from ._estimator import BaseFilter
from ._regression import FilterRegressorMixin
from ._validation import raise_invalid_parameter
from .dynamics import INFLATIONS, Dynamics
from .posteriors import LowRankPrecision
from .posteriors.lofi import SVD_METHODS, VARIANTS


class _LoFiStructure:
    """The LoFi posterior structure (LoFi paper §3)."""

    #: scikit-learn's constraints of the LoFi parameters (merged by the concrete estimators)
    _structure_parameter_constraints = {
        "rank": [Interval(Integral, 0, None, closed="left")],
        "variant": [StrOptions(set(VARIANTS))],
        "inflation": [None, StrOptions({i for i in INFLATIONS if i is not None})],
        "inflation_factor": [Interval(Real, 0, None, closed="left")],
        "svd": [StrOptions(set(SVD_METHODS))],
        "steady_state": ["boolean"],
    }

    def _check_structure_params(self):
        """After the constraint pass: the options that need ``variant='spherical'``."""
        if self.svd == "orth" and self.variant != "spherical":
            raise_invalid_parameter(self, "svd", "'full' unless variant='spherical' (svd='orth', the "
                                    "orthogonal-projection SVD, needs variant='spherical')", self.svd)
        if self.steady_state and self.variant != "spherical":
            raise_invalid_parameter(self, "steady_state", "False unless variant='spherical' (steady_state=True "
                                    "applies to variant='spherical' only)", self.steady_state)
        return {"rank": int(self.rank), "inflation_factor": float(self.inflation_factor)}

    _structure_structural_params = ("rank", "variant", "svd")

    def _make_structure(self, cfg):
        return LowRankPrecision(rank=cfg["rank"], variant=self.variant, svd=self.svd, seed=self._mc_seed)

    def _make_dynamics(self, cfg):
        """``decay``/``process_noise`` with LoFi's inflation (App. E); spherical ``steady_state``
        replaces ``q`` by ``(1 − γ²) / η₀`` (eq. 95), so that ``η`` stays ``η₀``."""
        q = cfg["process_noise"]
        if self.steady_state:  # spherical: the prior variance is one number
            q = (1.0 - cfg["decay"] ** 2) * float(self._reference.variance)
        return Dynamics(decay=cfg["decay"], process_noise=q, inflation=self.inflation,
                        inflation_factor=cfg["inflation_factor"])


class LoFiRegressor(_LoFiStructure, FilterRegressorMixin, BaseFilter):
    """Neural-network regression by LoFi, the low-rank extended Kalman filter.

    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(50,)
        Hidden widths of the default MLP (ignored when ``module`` is given; ``()`` is a linear
        model). 50 units: the LoFi paper's UCI setting.
    activation : {'relu', 'tanh', 'logistic', 'identity', 'elu'}, default='relu'
        Hidden non-linearity of the default MLP.
    module : torch.nn.Module class or instance, default=None
        The network ``h(θ, x)``. ``None``: the default MLP (``hidden_layer_sizes``, ``activation``;
        LeCun-normal weights, zero biases); with ``prior_variance='auto'`` it standardises its inputs
        by the mean and standard deviation of the stream's first ``n_prior_rows`` rows,
        frozen for the life of the model (:class:`~skfilter.models.StandardizedMLP`; ``module_``
        takes raw inputs). A class is instantiated with the ``module__<name>`` keyword arguments (its
        random initialisation seeded by ``random_state``); an instance is copied and its current
        weights are the **prior mean** (never re-initialised). A module of yours gets no input
        scaling: standardise its inputs (and regression targets) yourself.
    rank : int, default=10
        ``L``, the rank of the low-rank part of the precision (0 gives VD-EKF with the exact mean;
        ``L ≥ P`` the full EKF).
    variant : {'diagonal', 'spherical'}, default='diagonal'
        Diagonal ``Υ`` (Alg. 2–3) or spherical ``η I`` (App. F, Alg. 6–7).
    inflation : {None, 'bayesian', 'simple', 'hybrid'}, default=None
        Covariance inflation of App. E with factor ``inflation_factor``.
    inflation_factor : float, default=0.0
        ``α ≥ 0`` (0 = no inflation; 'simple' multiplies the covariance by ``1 + α`` per step).
    svd : {'full', 'orth'}, default='full'
        Rank truncation by a thin SVD, or (spherical only) the orthogonal-projection incremental
        SVD of Alg. 8.
    steady_state : bool, default=False
        Spherical only: variance-preserving dynamics ``q = (1 − γ²) · prior_variance`` (F.2).
    prior_variance : 'auto' or float, default='auto'
        Prior covariance of the weights. ``'auto'`` (:mod:`skfilter.priors`), made for raw,
        unscaled data: the default MLP standardises its inputs by the stream's first rows (see
        ``module``), each weight's prior variance is its initialisation variance ``1/fan_in``
        (biases 1), and the output layer is scaled to the spread of the stream's first targets, its
        bias centred on them (Gaussian likelihood; :func:`~skfilter.priors.target_scale`), so that
        the prior predictive has the targets' location and scale. A user ``module`` gets
        ``1/fan_in`` per weight matrix, 1 for the other parameters, and no data scaling. A float:
        ``prior_variance · I`` around the initial weights, inputs and targets used as given (the
        papers' parametrisation; standardise features and targets then).
    n_prior_rows : int, default=50
        How many of the stream's first rows set the data-scaled parts of ``'auto'`` (input scaling,
        targets' centre and scale, first noise estimate), however the rows arrive: until then every
        call sets them again from all rows so far and learns those rows again; then they are fixed
        (:mod:`skfilter.stream_start`). Unused when nothing is scaled to data.
    obs_variance : {'auto', 'robust', 'adaptive'}, float or array of shape (n_outputs,), default='auto'
        Observation-noise variance ``r`` of the Gaussian likelihood, in the targets' units squared.
        ``'auto'``: the online estimate of the LoFi paper's App. C.2 from the one-step-ahead
        residuals, forgetting with an exponential window of about 50 rows (``ε_min = 0.02``) and
        started at the squared scale of the stream's first targets, counted as 10 pseudo-rows, so that
        the ±2σ band follows the current error; ``'robust'``: the same estimate made outlier-robust
        (WoLF's robust EWMA on the variance level: a residual far larger than the current estimate
        explains moves it less; meant for :class:`~skfilter.WoLFRegressor`'s weights — alone it keeps
        the noise low and lets outliers move the mean more); ``'adaptive'``: the paper's running mean (``ε_t = 1/t``), which
        keeps the large errors of the first rows in the estimate for good; a float or array: fixed
        variance(s). ``obs_variance_`` is the value the next step uses. Ignored by the Poisson
        likelihood.
    likelihood : {'gaussian', 'poisson'}, default='gaussian'
        Observation model: Gaussian with variance ``obs_variance``, or Poisson for non-negative
        counts, the network giving the log-rate (log link; ``prior_variance='auto'`` then does not
        scale the output layer to the targets).
    process_noise : float, default=0.0
        ``q`` of the dynamics ``θ_t = γ θ_{t−1} + N(0, q I)`` applied before every step.
    decay : float, default=1.0
        ``γ`` of the dynamics, in [0, 1].
    n_epochs : int, default=1
        Passes over the data in :meth:`fit` (``partial_fit`` always makes one).
    shuffle : bool, default=False
        Shuffle the rows before every pass after the first (the first is in row order).
    batch_size : int, default=1
        Rows per filter step: their ``B·C`` pseudo-observation columns are appended to ``W`` in one
        update, linearised at the same predicted mean (faster, slightly less exact).
    predictive : {'linearized', 'plugin', 'mc'}, default='linearized'
        How predictions integrate over the weights: ``'linearized'`` linearises ``h`` at the
        posterior mean (Gaussian: mean ``h(μ, x)``, variance ``J Σ Jᵀ + r``); ``'plugin'`` uses the
        network at the posterior mean (no weight uncertainty); ``'mc'`` averages ``n_mc_samples``
        weight draws. Read at prediction time.
    n_mc_samples : int, default=100
        Parameter draws of the Monte-Carlo predictive (exact DLR sampler).
    random_state : int, RandomState instance or None, default=None
        Seeds the initial weights, the shuffles, the Monte-Carlo predictive and Alg. 8's order.
    device : str or torch.device, default='cpu'
        Where the belief lives and the filter runs ('cpu', 'cuda', 'cuda:1', …; other devices, or
        CUDA without a CUDA build of torch, raise ``ValueError`` in ``fit``). Changed on a fitted
        estimator, it moves the belief at the next ``partial_fit``.
    dtype : {None, 'float64', 'float32'}, default=None
        ``None``: float64 on the CPU, float32 on a GPU. Data are validated in this dtype (entries
        beyond ``finfo.max ** (1/4)`` are rejected before anything is learned).
    verbose : int, default=0
        Show a progress bar while fitting when > 0.
    warm_start : bool, default=False
        When True, ``fit`` on a fitted estimator continues from the current belief (its
        ``n_epochs`` passes are then those ``partial_fit`` would make, and ``n_iter_`` and
        ``loss_curve_`` go on counting); when False, every ``fit`` starts from the prior.
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
    n_iter_ : int
        Passes over the data made on the current stream: ``n_epochs`` per ``fit`` (counted from
        0 again unless ``warm_start``), 1 per ``partial_fit`` call.
    loss_curve_ : list of float
        One entry per pass (``len(loss_curve_) == n_iter_``): the mean prequential loss of the
        pass, each row scored by the one-step-ahead predictive made before the row was learned
        (the estimator's ``predictive``; the linearised one for ``'mc'``), unweighted; regressors:
        the Gaussian negative log predictive density (summed over outputs), classifiers: the log
        loss. Scored are the passes of a ``fit`` with ``n_epochs > 1`` and of
        ``prequential_fit_predict``; the others — a single-pass ``fit`` and every
        ``partial_fit`` call — are NaN, since recording the predictions costs 20–40 % of a pass
        on small networks (:func:`skfilter.model_selection.prequential_predict` scores streams).
    n_outputs_ : int
    obs_variance_ : ndarray of shape (n_outputs,)

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import LoFiRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=200)
    >>> reg = LoFiRegressor(rank=5, hidden_layer_sizes=(20,), obs_variance=0.01, random_state=0)
    >>> mean, std = reg.fit(X, y).predict(X[:2], return_std=True)
    >>> mean.shape
    (2,)
    """

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, rank=10,
                 variant="diagonal", inflation=None, inflation_factor=0.0, svd="full", steady_state=False,
                 prior_variance="auto",
                 n_prior_rows=50, obs_variance="auto", likelihood="gaussian", process_noise=0.0, decay=1.0,
                 n_epochs=1, shuffle=False, batch_size=1, predictive="linearized", n_mc_samples=100,
                 random_state=None, device="cpu", dtype=None, verbose=0, warm_start=False, **module_kwargs):
        self._store_init_params(locals())

    _parameter_constraints = {**BaseFilter._parameter_constraints,
                              **FilterRegressorMixin._target_parameter_constraints,
                              **_LoFiStructure._structure_parameter_constraints}


class LoFiClassifier(_LoFiStructure, LikelihoodParameterMixin, FilterClassifierMixin, BaseFilter):
    """Neural-network classification by LoFi, the low-rank extended Kalman filter.

    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(100,)
        Hidden widths of the default MLP (ignored when ``module`` is given); those of
        :class:`~sklearn.neural_network.MLPClassifier` (one pass of a 50-unit network fell ~2 points
        short of it on digits: ``python -m skfilter.benchmarks defaults``).
    activation : {'relu', 'tanh', 'logistic', 'identity', 'elu'}, default='relu'
        Hidden non-linearity of the default MLP.
    module : torch.nn.Module class or instance, default=None
        The network ``h(θ, x)``. ``None``: the default MLP (``hidden_layer_sizes``, ``activation``;
        LeCun-normal weights, zero biases); with ``prior_variance='auto'`` it standardises its inputs
        by the mean and standard deviation of the stream's first ``n_prior_rows`` rows,
        frozen for the life of the model (:class:`~skfilter.models.StandardizedMLP`; ``module_``
        takes raw inputs). A class is instantiated with the ``module__<name>`` keyword arguments (its
        random initialisation seeded by ``random_state``); an instance is copied and its current
        weights are the **prior mean** (never re-initialised). A module of yours gets no input
        scaling: standardise its inputs (and regression targets) yourself.
    rank : int, default=10
        ``L``, the rank of the low-rank part of the precision (0 gives VD-EKF with the exact mean;
        ``L ≥ P`` the full EKF).
    variant : {'diagonal', 'spherical'}, default='diagonal'
        Diagonal ``Υ`` (Alg. 2–3) or spherical ``η I`` (App. F, Alg. 6–7).
    inflation : {None, 'bayesian', 'simple', 'hybrid'}, default=None
        Covariance inflation of App. E with factor ``inflation_factor``.
    inflation_factor : float, default=0.0
        ``α ≥ 0`` (0 = no inflation; 'simple' multiplies the covariance by ``1 + α`` per step).
    svd : {'full', 'orth'}, default='full'
        Rank truncation by a thin SVD, or (spherical only) the orthogonal-projection incremental
        SVD of Alg. 8.
    steady_state : bool, default=False
        Spherical only: variance-preserving dynamics ``q = (1 − γ²) · prior_variance`` (F.2).
    prior_variance : 'auto' or float, default='auto'
        Prior covariance of the weights. ``'auto'`` (:mod:`skfilter.priors`), made for raw,
        unscaled features: the default MLP standardises its inputs by the stream's first rows (see
        ``module``) and each weight's prior variance is ten times its initialisation variance
        ``1/fan_in`` (biases 10), so that the logits have prior variance about 10 (narrower priors
        left one-pass classifiers under-confident: doc/calibration.md). A user ``module`` gets
        ``10/fan_in`` per weight matrix, 10 for the other parameters, and no data scaling. A float:
        ``prior_variance · I`` around the initial weights, inputs used as given (the papers'
        parametrisation; standardise the features then).
    n_prior_rows : int, default=50
        How many of the stream's first rows set the data-scaled parts of ``'auto'`` (input scaling,
        targets' centre and scale, first noise estimate), however the rows arrive: until then every
        call sets them again from all rows so far and learns those rows again; then they are fixed
        (:mod:`skfilter.stream_start`). Unused when nothing is scaled to data.
    {likelihood_doc}
    moment_matched_jitter : float, default=0.01
        ``ε > 0`` of the moment-matched likelihood (ignored by the others).
    process_noise : float, default=0.0
        ``q`` of the dynamics ``θ_t = γ θ_{t−1} + N(0, q I)`` applied before every step.
    decay : float, default=1.0
        ``γ`` of the dynamics, in [0, 1].
    n_epochs : int, default=1
        Passes over the data in :meth:`fit` (``partial_fit`` always makes one).
    shuffle : bool, default=False
        Shuffle the rows before every pass after the first (the first is in row order).
    batch_size : int, default=1
        Rows per filter step: their ``B·C`` pseudo-observation columns are appended to ``W`` in one
        update, linearised at the same predicted mean (faster, slightly less exact).
    predictive : {'probit', 'plugin', 'mc'}, default='probit'
        How class probabilities integrate over the weights: ``'probit'`` is the generalised probit
        approximation under the linearised logits ``N(h(μ, x), J Σ Jᵀ)``; ``'plugin'`` the softmax
        (sigmoid) of the network at the posterior mean; ``'mc'`` the average over ``n_mc_samples``
        weight draws. Read at prediction time.
    n_mc_samples : int, default=100
        Parameter draws of the Monte-Carlo predictive (exact DLR sampler).
    random_state : int, RandomState instance or None, default=None
        Seeds the initial weights, the shuffles, the Monte-Carlo predictive and Alg. 8's order.
    device : str or torch.device, default='cpu'
        Where the belief lives and the filter runs ('cpu', 'cuda', 'cuda:1', …; other devices, or
        CUDA without a CUDA build of torch, raise ``ValueError`` in ``fit``). Changed on a fitted
        estimator, it moves the belief at the next ``partial_fit``.
    dtype : {None, 'float64', 'float32'}, default=None
        ``None``: float64 on the CPU, float32 on a GPU. Data are validated in this dtype (entries
        beyond ``finfo.max ** (1/4)`` are rejected before anything is learned).
    verbose : int, default=0
        Show a progress bar while fitting when > 0.
    warm_start : bool, default=False
        When True, ``fit`` on a fitted estimator continues from the current belief (its
        ``n_epochs`` passes are then those ``partial_fit`` would make, and ``n_iter_`` and
        ``loss_curve_`` go on counting); when False, every ``fit`` starts from the prior.
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
    n_iter_ : int
        Passes over the data made on the current stream: ``n_epochs`` per ``fit`` (counted from
        0 again unless ``warm_start``), 1 per ``partial_fit`` call.
    loss_curve_ : list of float
        One entry per pass (``len(loss_curve_) == n_iter_``): the mean prequential loss of the
        pass, each row scored by the one-step-ahead predictive made before the row was learned
        (the estimator's ``predictive``; the linearised one for ``'mc'``), unweighted; regressors:
        the Gaussian negative log predictive density (summed over outputs), classifiers: the log
        loss. Scored are the passes of a ``fit`` with ``n_epochs > 1`` and of
        ``prequential_fit_predict``; the others — a single-pass ``fit`` and every
        ``partial_fit`` call — are NaN, since recording the predictions costs 20–40 % of a pass
        on small networks (:func:`skfilter.model_selection.prequential_predict` scores streams).
    classes_ : ndarray of shape (n_classes,)

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import LoFiClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); y = (X[:, 0] + X[:, 1] > 0).astype(int)
    >>> clf = LoFiClassifier(rank=5, hidden_layer_sizes=(10,), random_state=0).fit(X, y)
    >>> clf.predict([[2.0, 2.0], [-2.0, -2.0]])
    array([1, 0])
    """

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", *, module=None, rank=10,
                 variant="diagonal", inflation=None, inflation_factor=0.0, svd="full", steady_state=False,
                 prior_variance="auto", n_prior_rows=50, likelihood="adf",
                 moment_matched_jitter=0.01, process_noise=0.0, decay=1.0, n_epochs=1, shuffle=False, batch_size=1,
                 predictive="probit", n_mc_samples=100, random_state=None, device="cpu", dtype=None,
                 verbose=0, warm_start=False, **module_kwargs):
        self._store_init_params(locals())

    _parameter_constraints = {**BaseFilter._parameter_constraints,
                              **FilterClassifierMixin._target_parameter_constraints,
                              **FilterClassifierMixin._likelihood_parameter_constraints,
                              **_LoFiStructure._structure_parameter_constraints}
