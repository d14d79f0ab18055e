"""Square-root low-rank covariance filters: LRKF, HiLoFi and LoLoFi (Duran-Martin et al. 2025, Alg. 2–4).

Duran-Martin, Sánchez-Betancourt, Cartea & Murphy (2025), "Martingale posterior neural networks for
fast sequential decision making", keep the error covariance of the weights in covariance form as
square-root factors (:class:`~skfilter.posteriors.FactoredCovariance`):

==============================  =============================================  =====================================
estimators                      covariance                                     cost per row (``C`` outputs)
==============================  =============================================  =====================================
:class:`LRKFRegressor`,         one rank-``d`` factor over all ``P`` weights   ``O(P (d + C)²)``
:class:`LRKFClassifier`         (Alg. 4)
:class:`HiLoFiRegressor`,       hidden layers rank ``d_h``, last layer full    ``O(D_h (d_h + C)² + D_l (D_l + C)²)``
:class:`HiLoFiClassifier`       Cholesky factor (Alg. 2)
:class:`LoLoFiRegressor`,       hidden layers rank ``d_h``, last layer rank    ``O(D_h (d_h + C)² + D_l (d_l + C)²)``
:class:`LoLoFiClassifier`       ``d_l`` (Alg. 3)
==============================  =============================================  =====================================

``D_l`` is the number of last-layer weights (weight matrix and bias), ``D_h = P − D_l``. The
cross-covariance between the hidden and the last layer is dropped after every step (the paper's
block-diagonal covariance). The last layer is found automatically for the default MLP and for an
``nn.Sequential`` ending in ``nn.Linear``; for another module pass its parameter names as
``last_layer``.

**Process noise.** The dynamics are the random walk ``θ_t = θ_{t−1} + N(0, Q)`` with
``Q = blockdiag(q_h I, q_l I)`` (LRKF: ``q I``): ``process_noise`` is ``q`` (``q_h``), and
``last_process_noise`` (HiLoFi, LoLoFi) is ``q_l`` (``None``: the same as ``q_h``). Besides keeping
the filter adaptive, ``q`` is what lets a rank-deficient factor learn new directions: with
``q = 0`` the gain of a low-rank block stays in the row space of its factor, so the weights of that
block only ever move in the subspace of the prior factor (``init``).

LRKF and HiLoFi's hidden layers keep ``+q I`` in the projection of their factor (eq. 102,
``P_{d,+q}``). LoLoFi's two factors do not (``LowRankFactor(keep_process_noise=False)``): ``q`` acts
through ``S`` and the gains only, the paper's last-layer rule (eqs. 53, 77), so that with
``d_l ≥ D_l`` its last layer is HiLoFi's. Under ``P_{d,+q}`` a direction the rows never reach gains
``q`` at every step and, the largest, is kept, filling the rank-``d`` factors with directions no data
informs: LoLoFi's defaults then reached 0.75–0.85 training accuracy on scikit-learn's three-blob
check (``check_classifiers_train``; now 0.92–0.93, LoFi and HiLoFi 0.93–0.94).
"""

from __future__ import annotations

from numbers import Integral, Real

import torch
from sklearn.utils._param_validation import Interval, StrOptions

from ._classification import FilterClassifierMixin, LikelihoodParameterMixin
from ._docstrings import filter_tail_doc
from ._estimator import BaseFilter
from ._regression import FilterRegressorMixin
from ._validation import raise_invalid_parameter
from .dynamics import Dynamics
from .models import last_layer_parameters
from .posteriors import CholeskyFactor, FactoredCovariance, LowRankFactor
from .posteriors.factored import LOW_RANK_INITS

__all__ = ["LRKFRegressor", "LRKFClassifier", "HiLoFiRegressor", "HiLoFiClassifier", "LoLoFiRegressor",
           "LoLoFiClassifier"]

_NONNEGATIVE = Interval(Real, 0, None, closed="left")


class _FactoredStructure:
    """The square-root factored covariance of the paper (module docstring), on the parameter blocks
    ``'hidden'`` and ``'last'``. Subclasses set :attr:`_layout` and the rank parameters."""

    #: ``'lrkf'`` (one block), ``'hilofi'`` or ``'lolofi'`` (two blocks)
    _layout = "lrkf"

    _structure_parameter_constraints = {
        "init": [StrOptions(set(LOW_RANK_INITS))],
    }

    #: the constraints of the two-block structures (HiLoFi, LoLoFi)
    _two_block_constraints = {
        "last_layer": [None, list, tuple],
        "last_process_noise": [None, _NONNEGATIVE],
    }

    def _check_structure_params(self):
        """After the constraint pass: ``last_layer`` holds parameter names (strings)."""
        names = getattr(self, "last_layer", None)
        if names is not None and (not names or not all(isinstance(n, str) for n in names)):
            raise_invalid_parameter(self, "last_layer", "None or a non-empty list of parameter names (str)",
                                    names)
        return {}

    def _blocks(self):
        """``{'hidden': positions, 'last': positions}`` of the fitted adapter (``'hidden'`` absent for
        a model that is one linear layer); raises ``ValueError`` when the last layer is not found."""
        adapter = self._adapter
        P = adapter.n_params
        last = adapter.positions_of(last_layer_parameters(adapter, self.last_layer, type(self).__name__))
        hidden = torch.ones(P, dtype=torch.bool)
        hidden[last] = False
        blocks = {}
        if bool(hidden.any()):
            blocks["hidden"] = hidden.nonzero().flatten()
        blocks["last"] = last
        return blocks

    def _make_structure(self, cfg):
        seed = self._mc_seed
        if self._layout == "lrkf":
            return FactoredCovariance.lrkf(int(self.rank), init=self.init, seed=seed)
        blocks = self._blocks()
        self._parameter_blocks = blocks
        if self._layout == "hilofi":
            last = CholeskyFactor(bool(self.exact_process_noise))
            hidden = LowRankFactor(int(self.hidden_rank), self.init)
        else:
            # the process noise acts through S and the gains, never accumulates in a factor
            # (LowRankFactor(keep_process_noise=False); module docstring)
            last = LowRankFactor(int(self.last_rank), self.init, keep_process_noise=False)
            hidden = LowRankFactor(int(self.hidden_rank), self.init, keep_process_noise=False)
        spec = {"last": (blocks["last"], last)}
        if "hidden" in blocks:
            spec = {"hidden": (blocks["hidden"], hidden), **spec}
        return FactoredCovariance(spec, seed=seed)

    def _make_dynamics(self, cfg):
        """``decay`` and the random walk ``Q = blockdiag(q_h I, q_l I)`` (module docstring)."""
        q = cfg["process_noise"]
        q_last = getattr(self, "last_process_noise", None)
        if self._layout != "lrkf" and q_last is not None and float(q_last) != q:
            q = Dynamics.per_block({name: (float(q_last) if name == "last" else q)
                                    for name in self._parameter_blocks},
                                   self._parameter_blocks, self._adapter.n_params, like=self._reference.mean)
        return Dynamics(decay=cfg["decay"], process_noise=q)


class _LRKF(_FactoredStructure):
    _layout = "lrkf"
    _structure_structural_params = ("rank", "init")
    _structure_parameter_constraints = {**_FactoredStructure._structure_parameter_constraints,
                                        "rank": [Interval(Integral, 1, None, closed="left")]}


class _HiLoFi(_FactoredStructure):
    _layout = "hilofi"
    _structure_structural_params = ("hidden_rank", "init", "exact_process_noise", "last_layer")
    _structure_parameter_constraints = {**_FactoredStructure._structure_parameter_constraints,
                                        **_FactoredStructure._two_block_constraints,
                                        "hidden_rank": [Interval(Integral, 1, None, closed="left")],
                                        "exact_process_noise": ["boolean"]}


class _LoLoFi(_FactoredStructure):
    _layout = "lolofi"
    _structure_structural_params = ("hidden_rank", "last_rank", "init", "last_layer")
    _structure_parameter_constraints = {**_FactoredStructure._structure_parameter_constraints,
                                        **_FactoredStructure._two_block_constraints,
                                        "hidden_rank": [Interval(Integral, 1, None, closed="left")],
                                        "last_rank": [Interval(Integral, 1, None, closed="left")]}


# -- docstrings (the parameters the six estimators share, written once) ------------------------------

_NETWORK_DOC = """\
    hidden_layer_sizes : tuple of int, default={hidden}
        Hidden widths of the default MLP (ignored when ``module`` is given; ``()`` is a linear
        model{linear}).
    activation : {{'relu', 'tanh', 'logistic', 'identity', 'elu'}}, default='relu'
        Hidden non-linearity of the default MLP.
    module : torch.nn.Module class or instance, default=None
        The network ``h(θ, x)``. ``None``: the default MLP (LeCun-normal weights, zero biases), which
        with ``prior_variance='auto'`` standardises its inputs by the stream's first rows
        (:class:`~skfilter.models.StandardizedMLP`). A class is instantiated with the
        ``module__<name>`` keyword arguments (seeded by ``random_state``); an instance is copied and
        its weights are the prior mean. A module of yours gets no input scaling."""

_RANK_DOCS = {
    "lrkf": """\
    rank : int, default=50
        ``d``, the rank of the factor ``C`` (``d × P``) of the covariance ``Σ = CᵀC`` of all the
        weights (Alg. 4). With ``d ≥ P`` and ``process_noise=0`` the filter is the full EKF.
    init : {'random', 'coordinates', 'zero'}, default='random'
        The prior factor when ``d < P``, where the prior ``diag(v)`` cannot be represented
        (:class:`~skfilter.posteriors.LowRankFactor`): ``'random'`` — ``diag(√v)`` projected on a
        random ``d``-dimensional subspace (independent of the parameter order); ``'coordinates'`` —
        ``√v`` on the first ``d`` parameters; ``'zero'`` — no prior uncertainty (the weights move
        only once process noise acts).""",
    "hilofi": """\
    hidden_rank : int, default=50
        ``d_h``, the rank of the factor of the hidden layers' covariance (Alg. 2).
    init : {'random', 'coordinates', 'zero'}, default='random'
        The hidden layers' prior factor when ``d_h < D_h`` (:class:`~skfilter.posteriors.LowRankFactor`):
        ``'random'`` — ``diag(√v)`` projected on a random ``d_h``-dimensional subspace;
        ``'coordinates'`` — ``√v`` on the first ``d_h`` hidden weights; ``'zero'`` — the hidden
        layers start certain (with ``process_noise=0`` they keep their initial weights and the last
        layer is Bayesian linear regression on their features). The last layer's prior is exact.
    exact_process_noise : bool, default=False
        Keep the last layer's process noise in its posterior (the exact Joseph form); the paper
        drops it (eqs. 53, 77), so that ``q_l`` acts only through the gain.
    last_layer : list of str, default=None
        Parameter names (as in ``module.named_parameters()``) of the last layer, for a module whose
        last layer is not found automatically (found: the default MLP and an ``nn.Sequential``
        ending in ``nn.Linear``).""",
    "lolofi": """\
    hidden_rank : int, default=50
        ``d_h``, the rank of the factor of the hidden layers' covariance (Alg. 3).
    last_rank : int, default=50
        ``d_l``, the rank of the factor of the last layer's covariance; with ``d_l ≥ D_l`` the last
        layer is HiLoFi's (for any ``q_l``), and with ``q_h = 0`` too LoLoFi is HiLoFi.
    init : {'random', 'coordinates', 'zero'}, default='random'
        The prior factor of each block whose rank is below its size
        (:class:`~skfilter.posteriors.LowRankFactor`): ``'random'`` — ``diag(√v)`` projected on a
        random subspace; ``'coordinates'`` — ``√v`` on the block's first weights; ``'zero'`` — no
        prior uncertainty.
    last_layer : list of str, default=None
        Parameter names (as in ``module.named_parameters()``) of the last layer, for a module whose
        last layer is not found automatically (found: the default MLP and an ``nn.Sequential``
        ending in ``nn.Linear``).""",
}

_PRIOR_DOC = {
    "regressor": """\
    prior_variance : 'auto' or float, default='auto'
        Prior covariance of the weights. ``'auto'`` (:mod:`skfilter.priors`): inputs standardised
        by the stream's first rows (default MLP), each weight's variance its initialisation variance
        ``1/fan_in`` (biases 1), the output layer scaled to the spread of the stream's first targets.
        A float: ``prior_variance · I`` around the initial weights (standardise the data then).
        A low-rank block keeps the part of this prior its ``init`` represents.
    n_prior_rows : int, default=50
        How many of the stream's first rows set the data-scaled parts of ``'auto'`` (input scaling,
        targets' centre and scale, first noise estimate), however the rows arrive: until then every
        call sets them again from all rows so far and learns those rows again; then they are fixed
        (:mod:`skfilter.stream_start`). Unused when nothing is scaled to data.
    obs_variance : {'auto', 'robust', 'adaptive'}, float or array of shape (n_outputs,), default='auto'
        Observation-noise variance ``R`` of the Gaussian likelihood: the online estimate from the
        one-step-ahead residuals (``'auto'``, as :class:`~skfilter.LoFiRegressor`), its
        outlier-robust form (``'robust'``), the running mean (``'adaptive'``), or fixed variance(s).
    likelihood : {'gaussian', 'poisson'}, default='gaussian'
        Gaussian with variance ``obs_variance``, or Poisson with a log link for counts.""",
    "classifier": """\
    prior_variance : 'auto' or float, default='auto'
        Prior covariance of the weights. ``'auto'`` (:mod:`skfilter.priors`): inputs standardised
        by the stream's first rows (default MLP), each weight's variance ten times its
        initialisation variance ``1/fan_in`` (biases 10; doc/calibration.md). A float: ``prior_variance · I`` around the
        initial weights (standardise the features then). A low-rank block keeps the part of this
        prior its ``init`` represents.
    n_prior_rows : int, default=50
        How many of the stream's first rows set the data-scaled parts of ``'auto'`` (input scaling,
        targets' centre and scale, first noise estimate), however the rows arrive: until then every
        call sets them again from all rows so far and learns those rows again; then they are fixed
        (:mod:`skfilter.stream_start`). Unused when nothing is scaled to data.
    {likelihood_doc}
    moment_matched_jitter : float, default=0.01
        ``ε > 0`` of the moment-matched likelihood (ignored by the others).""",
}

_NOISE_DOC = {
    "lrkf": """\
    process_noise : float, default={q}
        ``q`` of the random walk ``θ_t = γ θ_{{t−1}} + N(0, q I)``; it also lets the rank-``d``
        factor take in new directions (module docstring). The paper uses ``1e-6`` on standardised
        data; the defaults (``1e-3`` for regressors, ``1e-2`` for classifiers) learned far more in
        one pass on the defaults benchmark (``python -m skfilter.benchmarks defaults``).""",
    "two": """\
    process_noise : float, default={q}
        ``q_h`` of the random walk of the hidden weights (and ``q_l`` unless
        ``last_process_noise`` is given); it lets the rank-``d_h`` factor take in new directions
        (module docstring). The paper uses ``1e-6`` on standardised data; the defaults (``1e-3`` for
        regressors, ``1e-2`` for classifiers) learned far more in one pass on the defaults benchmark
        (``python -m skfilter.benchmarks defaults``).
    last_process_noise : float, default=None
        ``q_l`` of the last layer's random walk; ``None``: ``process_noise``.""",
    "lolofi classifier": """\
    process_noise : float, default={q}
        ``q_h`` of the random walk of the hidden weights (and ``q_l`` if ``last_process_noise`` is
        None). LoLoFi's hidden factor (rank ``d_h``, far below the hidden layers' size) holds no
        variance outside its span, so the hidden weights learn in the other directions only through
        the gain ``q_h H_hᵀ S⁻¹`` (a gradient step of size ``q_h``; module docstring): the default
        ``3e-2`` is what the hidden layers need in one pass (digits, defaults benchmark: accuracy
        0.956 against 0.935 with ``1e-2``; a larger hidden rank does not help: 0.936 at ``d_h = 100``).
        The paper uses ``1e-6`` on standardised data.
    last_process_noise : float or None, default=0.01
        ``q_l`` of the last layer's random walk (``None``: ``process_noise``). It enters the
        predictive variance of the logits, so it stays at ``1e-2``: ``q_l = 0.1`` widened the class
        probabilities (digits log-loss 0.205 against 0.155) without more accuracy.""",
}

def _doc(summary, layout, target, hidden, q, example):
    key = "lrkf" if layout == "lrkf" else "lolofi classifier" if (layout, target) == ("lolofi", "classifier") else "two"
    noise = _NOISE_DOC[key].format(q=q)
    rest = filter_tail_doc(
        target,
        batch_size="Rows per filter step (one update of their ``B·C`` pseudo-observations, linearised at the\n"
                   "        same mean).",
        seeds="Seeds the initial weights, the shuffles, the ``'random'`` prior factors and the Monte-Carlo\n"
              "        predictive.",
        kwargs="    **module_kwargs\n        ``module__<name>=value``: constructor arguments of a ``module`` class.",
        n_params="``P``, the number of parameters the filter learns.",
        posterior="The belief over the flat parameters (a :class:`~skfilter.posteriors.FactoredCovariance`\n"
                  "        belief: ``posterior_.belief.factors`` are the square-root factors of the blocks).")
    network = _NETWORK_DOC.format(hidden=hidden, linear=": then ``'hidden'`` is empty" if layout != "lrkf"
                                  else "")
    return "\n\n".join([summary, "    Parameters\n    ----------\n" + network + "\n" + _RANK_DOCS[layout]
                        + "\n" + _PRIOR_DOC[target] + "\n" + noise + "\n" + rest.rstrip("\n"),
                        "    Examples\n    --------\n" + example]) + "\n    "


class LRKFRegressor(_LRKF, FilterRegressorMixin, BaseFilter):
    __doc__ = _doc("""Neural-network regression by LRKF, the square-root low-rank Kalman filter.

    The covariance of all the weights is ``CᵀC`` with ``C`` of rank ``d`` (Duran-Martin et al. 2025,
    Alg. 4 / App. F.2): each step is the EKF step from ``CᵀC + q I``, the new factor the best rank-``d``
    approximation of the surrogate posterior covariance (eq. 99–102). Cost ``O(P (d + C)²)`` per row.""",
                   "lrkf", "regressor", "(50,)", "0.001", """\
    >>> import numpy as np
    >>> from skfilter import LRKFRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=200)
    >>> reg = LRKFRegressor(rank=10, hidden_layer_sizes=(20,), random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:2], return_std=True)
    >>> mean.shape, bool((std > 0).all())
    ((2,), True)""")

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, rank=50, init="random",
                 prior_variance="auto",
                 n_prior_rows=50, obs_variance="auto", likelihood="gaussian", process_noise=1e-3, decay=1.0,
                 n_epochs=1, shuffle=False, batch_size=1, predictive="linearized", n_mc_samples=100,
                 random_state=None, device="cpu", dtype=None, verbose=0, warm_start=False, **module_kwargs):
        self._store_init_params(locals())

    _parameter_constraints = {**BaseFilter._parameter_constraints,
                              **FilterRegressorMixin._target_parameter_constraints,
                              **_LRKF._structure_parameter_constraints}


class LRKFClassifier(_LRKF, LikelihoodParameterMixin, FilterClassifierMixin, BaseFilter):
    __doc__ = _doc("""Neural-network classification by LRKF, the square-root low-rank Kalman filter.

    The covariance of all the weights is ``CᵀC`` with ``C`` of rank ``d`` (Duran-Martin et al. 2025,
    Alg. 4 / App. F.2). Cost ``O(P (d + C)²)`` per row.""",
                   "lrkf", "classifier", "(50,)", "0.01", """\
    >>> import numpy as np
    >>> from skfilter import LRKFClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); y = (X[:, 0] + X[:, 1] > 0).astype(int)
    >>> clf = LRKFClassifier(rank=10, hidden_layer_sizes=(10,), random_state=0).fit(X, y)
    >>> clf.predict([[2.0, 2.0], [-2.0, -2.0]])
    array([1, 0])""")

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, rank=50, init="random",
                 prior_variance="auto",
                 n_prior_rows=50, likelihood="adf", moment_matched_jitter=0.01, process_noise=1e-2,
                 decay=1.0, n_epochs=1, shuffle=False, batch_size=1, predictive="probit", n_mc_samples=100,
                 random_state=None, device="cpu", dtype=None, verbose=0, warm_start=False, **module_kwargs):
        self._store_init_params(locals())

    _parameter_constraints = {**BaseFilter._parameter_constraints,
                              **FilterClassifierMixin._target_parameter_constraints,
                              **FilterClassifierMixin._likelihood_parameter_constraints,
                              **_LRKF._structure_parameter_constraints}


class HiLoFiRegressor(_HiLoFi, FilterRegressorMixin, BaseFilter):
    __doc__ = _doc("""Neural-network regression by HiLoFi: a full last-layer covariance, low-rank hidden layers.

    The last layer's covariance is a full Cholesky factor ``UᵀU``, the hidden layers' ``CᵀC`` with
    ``C`` of rank ``d_h``, their cross-covariance dropped (Duran-Martin et al. 2025, Alg. 2). Cost
    ``O(D_h (d_h + C)² + D_l (D_l + C)²)`` per row; with ``init='zero'`` and no process noise it is
    Bayesian linear regression on the features of the (fixed) hidden layers.""",
                   "hilofi", "regressor", "(50,)", "0.001", """\
    >>> import numpy as np
    >>> from skfilter import HiLoFiRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=200)
    >>> reg = HiLoFiRegressor(hidden_rank=10, hidden_layer_sizes=(20,), random_state=0).fit(X, y)
    >>> [tuple(f.shape) for f in reg.posterior_.belief.factors]    # C (d_h × D_h), U (D_l × D_l)
    [(10, 80), (21, 21)]""")

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, hidden_rank=50, init="random",
                 exact_process_noise=False, last_layer=None, prior_variance="auto",
                 n_prior_rows=50, obs_variance="auto",
                 likelihood="gaussian", process_noise=1e-3, last_process_noise=None, decay=1.0, n_epochs=1,
                 shuffle=False, batch_size=1, predictive="linearized", n_mc_samples=100, random_state=None,
                 device="cpu", dtype=None, verbose=0, warm_start=False, **module_kwargs):
        self._store_init_params(locals())

    _parameter_constraints = {**BaseFilter._parameter_constraints,
                              **FilterRegressorMixin._target_parameter_constraints,
                              **_HiLoFi._structure_parameter_constraints}


class HiLoFiClassifier(_HiLoFi, LikelihoodParameterMixin, FilterClassifierMixin, BaseFilter):
    __doc__ = _doc("""Neural-network classification by HiLoFi: a full last-layer covariance, low-rank hidden layers.

    The last layer's covariance is a full Cholesky factor, the hidden layers' of rank ``d_h``
    (Duran-Martin et al. 2025, Alg. 2). The last layer has ``C (n_hidden + 1)`` weights for ``C``
    logits: its factor costs ``O(D_l³)`` per row, so keep the last hidden layer narrow with many
    classes, or use :class:`LoLoFiClassifier`.""",
                   "hilofi", "classifier", "(50,)", "0.01", """\
    >>> import numpy as np
    >>> from skfilter import HiLoFiClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); y = (X[:, 0] + X[:, 1] > 0).astype(int)
    >>> clf = HiLoFiClassifier(hidden_rank=10, hidden_layer_sizes=(10,), random_state=0).fit(X, y)
    >>> clf.predict([[2.0, 2.0], [-2.0, -2.0]])
    array([1, 0])""")

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, hidden_rank=50, init="random",
                 exact_process_noise=False, last_layer=None, prior_variance="auto",
                 n_prior_rows=50, likelihood="adf",
                 moment_matched_jitter=0.01, process_noise=1e-2, last_process_noise=None, decay=1.0, n_epochs=1,
                 shuffle=False, batch_size=1, predictive="probit", n_mc_samples=100, random_state=None,
                 device="cpu", dtype=None, verbose=0, warm_start=False, **module_kwargs):
        self._store_init_params(locals())

    _parameter_constraints = {**BaseFilter._parameter_constraints,
                              **FilterClassifierMixin._target_parameter_constraints,
                              **FilterClassifierMixin._likelihood_parameter_constraints,
                              **_HiLoFi._structure_parameter_constraints}


class LoLoFiRegressor(_LoLoFi, FilterRegressorMixin, BaseFilter):
    __doc__ = _doc("""Neural-network regression by LoLoFi: low-rank last-layer and hidden-layer covariances.

    Both blocks' covariances are low-rank factors, ``d_l`` for the last layer and ``d_h`` for the
    hidden layers, their cross-covariance dropped (Duran-Martin et al. 2025, Alg. 3), the process
    noise acting through the gains only (module docstring). Cost ``O(D_h (d_h + C)² + D_l (d_l + C)²)``
    per row, linear in ``P``.""",
                   "lolofi", "regressor", "(50,)", "0.001", """\
    >>> import numpy as np
    >>> from skfilter import LoLoFiRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=200)
    >>> reg = LoLoFiRegressor(hidden_rank=10, last_rank=5, hidden_layer_sizes=(20,), random_state=0).fit(X, y)
    >>> [tuple(f.shape) for f in reg.posterior_.belief.factors]
    [(10, 80), (5, 21)]""")

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, hidden_rank=50, last_rank=50,
                 init="random", last_layer=None, prior_variance="auto",
                 n_prior_rows=50, obs_variance="auto", likelihood="gaussian",
                 process_noise=1e-3, last_process_noise=None, decay=1.0, n_epochs=1, shuffle=False, batch_size=1,
                 predictive="linearized", n_mc_samples=100, random_state=None, device="cpu", dtype=None, verbose=0,
                 warm_start=False, **module_kwargs):
        self._store_init_params(locals())

    _parameter_constraints = {**BaseFilter._parameter_constraints,
                              **FilterRegressorMixin._target_parameter_constraints,
                              **_LoLoFi._structure_parameter_constraints}


class LoLoFiClassifier(_LoLoFi, LikelihoodParameterMixin, FilterClassifierMixin, BaseFilter):
    __doc__ = _doc("""Neural-network classification by LoLoFi: low-rank last-layer and hidden-layer covariances.

    Both blocks' covariances are low-rank factors (Duran-Martin et al. 2025, Alg. 3), the process
    noise acting through the gains only (module docstring); the paper's choice "whenever the output
    layer or the input to the last layer is high dimensional".""",
                   "lolofi", "classifier", "(50,)", "0.03", """\
    >>> import numpy as np
    >>> from skfilter import LoLoFiClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); y = (X[:, 0] + X[:, 1] > 0).astype(int)
    >>> clf = LoLoFiClassifier(hidden_rank=10, last_rank=5, hidden_layer_sizes=(10,), random_state=0).fit(X, y)
    >>> clf.predict([[2.0, 2.0], [-2.0, -2.0]])
    array([1, 0])""")

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, hidden_rank=50, last_rank=50,
                 init="random", last_layer=None, prior_variance="auto", n_prior_rows=50, likelihood="adf",
                 moment_matched_jitter=0.01, process_noise=3e-2, last_process_noise=1e-2, decay=1.0, n_epochs=1,
                 shuffle=False, batch_size=1, predictive="probit", n_mc_samples=100, random_state=None,
                 device="cpu", dtype=None, verbose=0, warm_start=False, **module_kwargs):
        self._store_init_params(locals())

    _parameter_constraints = {**BaseFilter._parameter_constraints,
                              **FilterClassifierMixin._target_parameter_constraints,
                              **FilterClassifierMixin._likelihood_parameter_constraints,
                              **_LoLoFi._structure_parameter_constraints}
