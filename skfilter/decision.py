"""Sequential decisions with a learned predictive: contextual bandits and Bayesian optimisation.

* :class:`ContextualBandit` — an agent that chooses one of ``n_arms`` arms per context with an online
  reward model (any skfilter regressor or binary classifier, or any estimator with ``partial_fit``
  for ε-greedy), and learns from the chosen arm's reward only. Policies (Duran-Martin et al. 2025,
  Alg. 1 and Table 1): a *predictive* sample of each arm's reward (outcome space), a *Thompson*
  sample (one parameter draw evaluated at every arm), or ε-greedy on the predictive mean.
* :class:`PerArmHeads` — the torch module behind the *per-arm heads* encoding: a body with one
  output per arm, of which the row's arm (its last input column) is returned, so that an update
  observes the chosen arm's output only, with no change to the filters.
* :class:`BayesianOptimizer` — a Bayesian-optimisation loop over a box with any regressor that has
  ``predict(X, return_std=True)`` as the surrogate (skfilter regressors, or scikit-learn's
  :class:`~sklearn.gaussian_process.GaussianProcessRegressor`), scrambled Sobol candidates
  (:class:`scipy.stats.qmc.Sobol`) and Thompson, predictive or expected-improvement acquisition.
* :func:`expected_improvement` — the closed form of Jones et al. (1998).
* :func:`recommend` — rank candidate events (items for a user, …) by one Thompson draw of the model
  shared by all candidates, or by the posterior mean (Gómez-Uribe & Karrer, §5.2).

The agents are scikit-learn-style objects: constructor parameters only (validated at the first call
through scikit-learn's ``_parameter_constraints``), a ``random_state``, fitted attributes ending in
``_`` and a ``history_`` that :func:`skfilter.plotting.plot_cumulative_reward` draws.
"""

from __future__ import annotations

import inspect
import time
from numbers import Integral, Real

import numpy as np
import torch
from scipy.stats import norm, qmc
from sklearn.base import BaseEstimator, clone, is_classifier
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions, validate_params
from sklearn.utils.validation import check_array
from torch import nn

from ._validation import unchanged_on_error
from .models import last_layer, make_mlp

__all__ = ["PerArmHeads", "ContextualBandit", "BayesianOptimizer", "expected_improvement", "recommend"]


class PerArmHeads(nn.Module):
    """Per-arm heads: ``h(θ, [c, a]) = body(c)_a``, the output of arm ``a`` of a body with one output
    per arm.

    The input's last column holds the arm index ``a ∈ {0, …, n_arms − 1}``, the others the context
    ``c``. The module selects the arm's output with a one-hot mask (no integer indexing, so it runs
    under ``torch.func``), so the Jacobian of the other arms' heads is zero: a filter update with the
    chosen arm's reward observes that output only, as in the paper's bandit with one network output
    per action (Duran-Martin et al. 2025, §5.2).

    Parameters
    ----------
    body : torch.nn.Module
        Maps contexts ``(n, n_features)`` to ``(n, n_arms)`` rewards (or logits).
    n_arms : int
        Number of arms (outputs of ``body``).

    Examples
    --------
    >>> import torch
    >>> from skfilter.decision import PerArmHeads
    >>> heads = PerArmHeads(torch.nn.Linear(2, 3, dtype=torch.float64), n_arms=3)
    >>> X = torch.tensor([[1.0, 2.0, 0.0], [1.0, 2.0, 2.0]], dtype=torch.float64)
    >>> out = heads(X)
    >>> out.shape, bool(torch.allclose(out[:, 0], heads.body(X[:, :2])[[0, 1], [0, 2]]))
    (torch.Size([2, 1]), True)
    """

    def __init__(self, body: nn.Module, n_arms: int):
        super().__init__()
        self.body = body
        self.n_arms = int(n_arms)

    @property
    def last_layer_name(self):
        """``'body.<name>'`` when the body is an ``nn.Sequential`` ending in ``nn.Linear`` (or declares
        its own last layer), else None: the last layer that HiLoFi/LoLoFi treat apart
        (:func:`skfilter.models.last_layer`)."""
        inner = last_layer(self.body)
        return None if inner is None else f"body.{inner}"

    def forward(self, X):
        out = self.body(X[..., :-1])
        arms = torch.arange(self.n_arms, dtype=X.dtype, device=X.device)
        onehot = (X[..., -1:] == arms).to(out.dtype)
        return (out * onehot).sum(-1, keepdim=True)


def _innermost_prefix(est) -> str:
    """The ``get_params`` prefix of the estimator that holds the network (``''``, ``'estimator__'``,
    ``'estimator__estimator__'``, a pipeline's ``'<last step>__'``)."""
    keys = [k for k in est.get_params(deep=True) if k == "module" or k.endswith("__module")]
    if not keys:
        raise ValueError("encoding='heads' needs an estimator with a 'module' parameter (a skfilter filter, "
                         "wrapper or PartialPipeline, or a skfilter.baselines estimator).")
    return max(keys, key=len)[: -len("module")]


def _accepts(method, name) -> bool:
    try:
        return name in inspect.signature(method).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins
        return False


class ContextualBandit(BaseEstimator):
    """A contextual-bandit agent over an online reward model (Duran-Martin et al. 2025, Alg. 1).

    At each step the agent sees contexts ``c`` (one per row), scores every arm ``a`` and plays the
    best; the environment reveals the reward of the played arm only, and the model learns from that
    ``(c, a, r)`` row alone (``partial_fit``). Scores by ``policy``:

    * ``'predictive'`` — predictive sampling (Alg. 1): one independent draw per arm from the
      linearised posterior predictive of its mean reward, ``ŷ_a ~ N(h(μ, x_a), J_a Σ J_aᵀ)``
      (``sample_y(method='predictive', include_noise=False)``); no parameter is sampled. With
      ``include_noise=True`` the draw is of the reward itself, ``N(h(μ, x_a), J_a Σ J_aᵀ + R)``, as
      Alg. 1 is written (the paper does not say which its MNIST bandit used); the noise then adds
      exploration that does not shrink with the data.
    * ``'thompson'`` — Thompson sampling (Table 1): one parameter draw ``θ_s ~ N(μ, Σ)`` per step,
      evaluated at every arm (and every row of the step): ``ŷ_a = h(θ_s, x_a)``
      (``sample_y(method='thompson', include_noise=False)``).
    * ``'epsilon-greedy'`` — with probability ``epsilon`` a uniformly random arm, otherwise the arm of
      largest predictive mean (App. G.1.3: ε = 0.05); any estimator with ``predict`` serves.

    With a binary classifier as the model (rewards in ``{0, 1}``) the score is the (sampled)
    probability of reward 1 (``sample_proba``, ``predict_proba``); Alg. 1's argmax over sampled
    rewards is then an argmax over sampled success probabilities. Before the first update the arms
    are drawn uniformly (no model yet).

    Arm encodings:

    * ``'heads'`` — per-arm heads: the model's network gets one output per arm and returns the played
      one (:class:`PerArmHeads`; the model sees ``[c, a]``). The default MLP of the estimator (its
      ``hidden_layer_sizes`` and ``activation``) becomes the body, or the estimator's ``module``
      instance, which must output ``n_arms`` columns. The module sees raw contexts (no
      standardisation): scale them beforehand. In a :class:`~skfilter.PartialPipeline` the
      transformers would see the arm column too: use ``'features'`` there.
    * ``'features'`` — arm-as-feature: the model sees ``[c, arm_features[a]]`` and has one output.

    Parameters
    ----------
    estimator : estimator, default=None
        The reward model, cloned: a regressor, or a classifier for rewards in ``{0, 1}``. Needs
        ``partial_fit``; ``sample_y`` (``sample_proba``) with ``method`` for the sampling policies.
        ``None``: ``LoFiRegressor(hidden_layer_sizes=(50,))``.
    n_arms : int, default=2
        Number of arms (``>= 2``).
    encoding : {'heads', 'features'}, default='heads'
        Per-arm heads or arm-as-feature.
    arm_features : array-like of shape (n_arms, n_arm_features), default=None
        The arms' features, for ``encoding='features'``; ``None``: one-hot arms (the identity).
    policy : {'predictive', 'thompson', 'epsilon-greedy'}, default='predictive'
    epsilon : float in [0, 1], default=0.05
        Exploration rate of ``'epsilon-greedy'``.
    include_noise : bool, default=False
        Whether the ``'predictive'`` draws of a regressor include the observation noise ``R``.
    random_state : int, RandomState instance or None, default=None
        Seeds the arm choices and the samples, and the clone of an estimator that has no seed
        (``random_state=None`` in it and in every estimator inside it, as the default): its network
        and every other draw it makes. An estimator's own seed is kept.

    Attributes
    ----------
    estimator_ : estimator
        The reward model learned so far (after the first :meth:`update`).
    n_features_in_ : int
        Width of the contexts.
    history_ : dict of ndarray
        One entry per updated row: ``'step'`` (1, 2, …), ``'arm'``, ``'reward'``,
        ``'cumulative_reward'``, ``'regret'`` (cumulative ``Σ (best_reward − reward)``; NaN when
        :meth:`update` was not given ``best_reward``) and ``'time'`` (the agent's cumulative seconds
        in :meth:`select` and :meth:`update`).

    See Also
    --------
    skfilter.plotting.plot_cumulative_reward : draw ``history_``.

    References
    ----------
    Duran-Martin, G., Sánchez-Betancourt, L., Shestopaloff, A. Y., Murphy, K. (2025). Martingale
    posterior neural networks for fast sequential decision making. Alg. 1, Table 1, §5.2.

    Examples
    --------
    Two arms whose mean rewards depend on the sign of the context:

    >>> import numpy as np
    >>> from skfilter import EKFRegressor
    >>> from skfilter.decision import ContextualBandit
    >>> rng = np.random.default_rng(0)
    >>> agent = ContextualBandit(EKFRegressor(hidden_layer_sizes=(), obs_variance=0.25, random_state=0),
    ...                          n_arms=2, random_state=0)
    >>> for t in range(300):
    ...     c = rng.normal(size=(1, 1))
    ...     means = np.array([c[0, 0], -c[0, 0]])
    ...     arm = agent.select(c)
    ...     _ = agent.update(c, arm, means[arm] + 0.5 * rng.normal(size=1), best_reward=[means.max()])
    >>> h = agent.history_
    >>> sorted(h)
    ['arm', 'cumulative_reward', 'regret', 'reward', 'step', 'time']
    >>> bool(h["regret"][-1] < 0.1 * 300)  # a random agent's regret grows as 0.8 per step
    True
    """

    _parameter_constraints = {
        "estimator": [HasMethods(["partial_fit", "predict"]), None],
        "n_arms": [Interval(Integral, 2, None, closed="left")],
        "encoding": [StrOptions({"heads", "features"})],
        "arm_features": ["array-like", None],
        "policy": [StrOptions({"predictive", "thompson", "epsilon-greedy"})],
        "epsilon": [Interval(Real, 0, 1, closed="both")],
        "include_noise": ["boolean"],
        "random_state": ["random_state"],
    }

    def __init__(self, estimator=None, n_arms=2, *, encoding="heads", arm_features=None, policy="predictive",
                 epsilon=0.05, include_noise=False, random_state=None):
        self.estimator = estimator
        self.n_arms = n_arms
        self.encoding = encoding
        self.arm_features = arm_features
        self.policy = policy
        self.epsilon = epsilon
        self.include_noise = include_noise
        self.random_state = random_state

    # -- set-up ---------------------------------------------------------------------------------
    def _start(self, n_features):
        """Validate the parameters and set the per-run state (first call)."""
        self._validate_params()
        arm_features = None
        if self.encoding == "features":
            arm_features = (np.eye(self.n_arms) if self.arm_features is None
                            else check_array(self.arm_features, dtype=np.float64, input_name="arm_features"))
            if arm_features.shape[0] != self.n_arms:
                raise ValueError(f"arm_features has {arm_features.shape[0]} rows but n_arms={self.n_arms}.")
        estimator = self._base_estimator()
        needs = {"predictive": "sample", "thompson": "sample"}.get(self.policy)
        if needs and not hasattr(estimator, "sample_proba" if is_classifier(estimator) else "sample_y"):
            raise ValueError(f"policy={self.policy!r} needs an estimator with "
                             f"{'sample_proba' if is_classifier(estimator) else 'sample_y'}; use "
                             "policy='epsilon-greedy' for this one.")
        self._rng = check_random_state(self.random_state)
        self._arm_matrix = arm_features
        self.n_features_in_ = int(n_features)
        self._model = None
        self._elapsed = 0.0
        self._hist = {k: [] for k in ("arm", "reward", "regret_step", "time")}

    def _base_estimator(self):
        if self.estimator is not None:
            return self.estimator
        from .lofi import LoFiRegressor

        return LoFiRegressor(hidden_layer_sizes=(50,))

    def _new_model(self):
        """A clone of the estimator; with per-arm heads its network wrapped in :class:`PerArmHeads`."""
        model = clone(self._base_estimator())
        params = model.get_params(deep=True)
        seeds = [k for k in params if k == "random_state" or k.endswith("__random_state")]
        drawn = None
        if seeds and all(params[k] is None for k in seeds):  # no seed anywhere: the agent's (class docstring)
            drawn = int(self._rng.randint(0, 2**31 - 1))
            model.set_params(**dict.fromkeys(seeds, drawn))
        if self.encoding == "heads":
            prefix = _innermost_prefix(model)
            module = params[prefix + "module"]
            seed = params.get(prefix + "random_state")
            if not isinstance(seed, Integral):
                seed = drawn if drawn is not None else int(self._rng.randint(0, 2**31 - 1))
            if module is None:
                body = make_mlp(self.n_features_in_, params.get(prefix + "hidden_layer_sizes", (50,)), self.n_arms,
                                params.get(prefix + "activation", "relu"), seed=seed)
            elif isinstance(module, nn.Module):
                body = module
                with torch.no_grad():
                    like = next(body.parameters(), torch.zeros((), dtype=torch.float64))
                    out = body(torch.zeros((1, self.n_features_in_), dtype=like.dtype, device=like.device))
                if out.shape != (1, self.n_arms):
                    raise ValueError(f"encoding='heads' needs the estimator's module to map {self.n_features_in_} "
                                     f"context features to n_arms={self.n_arms} outputs; it gives {tuple(out.shape)}.")
            else:
                raise ValueError("encoding='heads' needs the estimator's module to be None (its default MLP) or "
                                 "a torch.nn.Module instance with n_arms outputs.")
            model.set_params(**{prefix + "module": PerArmHeads(body, self.n_arms)})
        return model

    # -- rows -----------------------------------------------------------------------------------
    def _check_context(self, context):
        context = check_array(context, dtype=np.float64, input_name="context")
        if hasattr(self, "n_features_in_") and context.shape[1] != self.n_features_in_:
            raise ValueError(f"context has {context.shape[1]} features, but the agent was started with "
                             f"{self.n_features_in_}.")
        return context

    def _rows(self, context, arms):
        """The model's inputs for the pairs ``(context_i, arms_i)``."""
        if self.encoding == "heads":
            return np.column_stack([context, arms.astype(np.float64)])
        return np.column_stack([context, self._arm_matrix[arms]])

    def _scores(self, context):
        """``(n, n_arms)`` scores of every arm (class docstring)."""
        n, A = context.shape[0], self.n_arms
        rows = self._rows(np.repeat(context, A, axis=0), np.tile(np.arange(A), n))
        model = self._model
        classifier = is_classifier(model)
        if self.policy == "epsilon-greedy":
            s = model.predict_proba(rows)[:, -1] if classifier else model.predict(rows)
        elif classifier:
            s = model.sample_proba(rows, 1, random_state=self._rng, method=self.policy)[:, -1, 0]
        else:
            noise = self.include_noise and self.policy == "predictive"
            kw = {"include_noise": noise} if _accepts(model.sample_y, "include_noise") else {}
            s = model.sample_y(rows, 1, random_state=self._rng, method=self.policy, **kw)
        return np.asarray(s, dtype=np.float64).reshape(n, A)

    # -- public ---------------------------------------------------------------------------------
    def select(self, context):
        """The arm to play for each context row.

        Parameters
        ----------
        context : array-like of shape (n_samples, n_features)

        Returns
        -------
        arm : ndarray of shape (n_samples,)
            Integers in ``[0, n_arms)``.
        """
        with unchanged_on_error(self):
            return self._select(context)

    def _select(self, context):
        context = self._check_context(context)
        if not hasattr(self, "_rng"):
            self._start(context.shape[1])
        start = time.perf_counter()
        n = context.shape[0]
        if self._model is None:
            arms = self._rng.randint(0, self.n_arms, size=n)
        else:
            if self.policy == "epsilon-greedy":
                explore = self._rng.random_sample(n) < self.epsilon
                random_arms = self._rng.randint(0, self.n_arms, size=n)
            arms = np.argmax(self._scores(context), axis=1)
            if self.policy == "epsilon-greedy":
                arms = np.where(explore, random_arms, arms)
        self._elapsed += time.perf_counter() - start
        return arms.astype(np.intp)

    def update(self, context, arm, reward, best_reward=None):
        """Learn from the played arms' rewards (only those: the others are not observed).

        Parameters
        ----------
        context : array-like of shape (n_samples, n_features)
        arm : array-like of shape (n_samples,)
            The arms played, integers in ``[0, n_arms)``.
        reward : array-like of shape (n_samples,)
            Their rewards (``{0, 1}`` for a classifier model).
        best_reward : array-like of shape (n_samples,), default=None
            The best arm's reward (or mean reward) of each row, when known, for the regret.

        Returns
        -------
        self : object
        """
        with unchanged_on_error(self):
            return self._update(context, arm, reward, best_reward)

    def _update(self, context, arm, reward, best_reward):
        context = self._check_context(context)
        n = context.shape[0]
        arm = np.asarray(arm)
        reward = check_array(reward, ensure_2d=False, dtype=np.float64, input_name="reward").reshape(-1)
        if arm.shape != (n,) or reward.shape != (n,):
            raise ValueError(f"arm and reward must have shape ({n},) like the context rows; got {arm.shape} and "
                             f"{reward.shape}.")
        if arm.dtype.kind not in "iu" and not (arm.dtype.kind == "f" and np.all(arm == np.round(arm))):
            raise ValueError("arm must hold integers.")
        arm = arm.astype(np.intp)
        if np.any((arm < 0) | (arm >= self.n_arms)):
            raise ValueError(f"arm must lie in [0, {self.n_arms}).")
        if best_reward is not None:
            best_reward = check_array(best_reward, ensure_2d=False, dtype=np.float64,
                                      input_name="best_reward").reshape(-1)
            if best_reward.shape != (n,):
                raise ValueError(f"best_reward must have shape ({n},).")
        if not hasattr(self, "_rng"):
            self._start(context.shape[1])
        classifier = is_classifier(self._base_estimator())
        if classifier and not np.all((reward == 0) | (reward == 1)):
            raise ValueError("A classifier reward model needs rewards in {0, 1}.")
        start = time.perf_counter()
        model = self._model if self._model is not None else self._new_model()
        rows = self._rows(context, arm)
        if classifier:
            model.partial_fit(rows, reward.astype(int), classes=[0, 1])
        else:
            model.partial_fit(rows, reward)
        self._model = self.estimator_ = model
        self._elapsed += time.perf_counter() - start
        self._hist["arm"].append(arm)
        self._hist["reward"].append(reward)
        self._hist["regret_step"].append(np.full(n, np.nan) if best_reward is None else best_reward - reward)
        self._hist["time"].append(np.full(n, self._elapsed))
        return self

    @property
    def history_(self):
        """The per-row history (class docstring)."""
        if not getattr(self, "_hist", {}).get("arm"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("This ContextualBandit has no history yet: call update first.")
        arm = np.concatenate(self._hist["arm"])
        reward = np.concatenate(self._hist["reward"])
        return {"step": np.arange(1, arm.size + 1), "arm": arm, "reward": reward,
                "cumulative_reward": np.cumsum(reward),
                "regret": np.cumsum(np.concatenate(self._hist["regret_step"])),
                "time": np.concatenate(self._hist["time"])}


@validate_params({"mean": ["array-like"], "std": ["array-like"], "best": [Real], "xi": [Interval(Real, 0, None,
                  closed="left")], "maximize": ["boolean"]}, prefer_skip_nested_validation=True)
def expected_improvement(mean, std, best, *, xi=0.0, maximize=False):
    """Expected improvement over ``best`` of ``Y ~ N(mean, std²)`` (Jones et al. 1998).

    Minimisation: ``EI = E[max(best − ξ − Y, 0)] = (best − ξ − m) Φ(z) + s φ(z)`` with
    ``z = (best − ξ − m) / s``; maximisation: ``E[max(Y − best − ξ, 0)]``. ``s = 0`` gives
    ``max(best − ξ − m, 0)``.

    Parameters
    ----------
    mean, std : array-like of the same shape
        Predictive means and standard deviations (``std >= 0``).
    best : float
        The best value observed so far.
    xi : float >= 0, default=0.0
        Margin ``ξ`` an improvement must exceed.
    maximize : bool, default=False

    Returns
    -------
    ei : ndarray of the shape of ``mean``

    References
    ----------
    Jones, D. R., Schonlau, M., Welch, W. J. (1998). Efficient global optimization of expensive
    black-box functions. Journal of Global Optimization 13, 455–492, eq. (15).

    Examples
    --------
    >>> from skfilter.decision import expected_improvement
    >>> round(float(expected_improvement([0.0], [1.0], best=0.0)[0]), 6)  # φ(0) = 1/√(2π)
    0.398942
    """
    mean = np.asarray(mean, dtype=np.float64)
    std = np.asarray(std, dtype=np.float64)
    if mean.shape != std.shape:
        raise ValueError(f"mean and std must have the same shape, got {mean.shape} and {std.shape}.")
    if np.any(std < 0) or not np.all(np.isfinite(std)) or not np.all(np.isfinite(mean)):
        raise ValueError("std must be finite and non-negative, mean finite.")
    gain = (mean - best - xi) if maximize else (best - xi - mean)
    with np.errstate(all="ignore"):  # |z| huge: Φ and φ saturate to 0/1 and 0, as they should
        z = np.where(std > 0, gain / np.where(std > 0, std, 1.0), 0.0)
        ei = np.where(std > 0, gain * norm.cdf(z) + std * norm.pdf(z), np.maximum(gain, 0.0))
    return np.maximum(ei, 0.0)


@validate_params({"estimator": [HasMethods(["predict"])], "candidates": ["array-like"],
                  "n": [Interval(Integral, 1, None, closed="left")], "method": [StrOptions({"thompson", "mean"})],
                  "positive_class": "no_validation", "random_state": ["random_state"]},
                 prefer_skip_nested_validation=True)
def recommend(estimator, candidates, *, n=1, method="thompson", positive_class=None, random_state=None):
    """Rank candidate events by a fitted model: the ``n`` best rows of ``candidates``.

    ``candidates`` holds one row per candidate (e.g. a user's id with each candidate item's id, as
    the model's ``X``). ``method='thompson'`` scores every candidate with **one** draw of the model
    (Thompson sampling; for the factorization models each entity is drawn once and shared by every
    candidate that involves it: :meth:`~skfilter.FactorizationRegressor.sample_y`),
    ``'mean'`` with the posterior mean (greedy). Regressors are ranked by the draw (or mean) of the
    expected target without noise, classifiers by the probability of ``positive_class`` (default:
    the last class, e.g. a click). Gómez-Uribe & Karrer, §5.2: Thompson sampling over candidates,
    against greedy recommendation on the posterior mean.

    Parameters
    ----------
    estimator : fitted skfilter estimator
        A regressor with ``sample_y(..., include_noise=False)`` or a classifier with
        ``sample_proba`` (Thompson); any estimator with ``predict``/``predict_proba`` (mean).
    candidates : array-like or DataFrame of shape (n_candidates, n_features)
    n : int, default=1
        How many to return (at most ``n_candidates``).
    method : {'thompson', 'mean'}, default='thompson'
    positive_class : label, optional
        The class whose probability ranks a classifier's candidates.
    random_state : int, RandomState instance or None, default=None
        Seeds the Thompson draw.

    Returns
    -------
    ndarray of int
        Row positions of the best candidates, best first.

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import FactorizationRegressor
    >>> from skfilter.decision import recommend
    >>> rng = np.random.default_rng(0)
    >>> users, items = rng.integers(0, 10, 800), rng.integers(0, 5, 800)
    >>> X = np.column_stack([users, items]).astype(object)
    >>> reg = FactorizationRegressor(model="mf", n_factors=2, random_state=0).fit(X, items + rng.normal(size=800))
    >>> candidates = np.array([[3, item] for item in range(5)], dtype=object)
    >>> recommend(reg, candidates, n=2, method="mean")
    array([4, 3])
    """
    if is_classifier(estimator):
        classes = list(estimator.classes_)
        label = classes[-1] if positive_class is None else positive_class
        if label not in classes:
            raise ValueError(f"positive_class={label!r} is not one of the classes {classes}.")
        k = classes.index(label)
        if method == "thompson":
            scores = np.asarray(estimator.sample_proba(candidates, n_samples=1, random_state=random_state))[:, k, 0]
        else:
            scores = np.asarray(estimator.predict_proba(candidates))[:, k]
    elif method == "thompson":
        draws = np.asarray(estimator.sample_y(candidates, n_samples=1, random_state=random_state, include_noise=False))
        scores = draws.reshape(draws.shape[0], -1)[:, 0]
    else:
        scores = np.asarray(estimator.predict(candidates)).reshape(len(candidates), -1)[:, 0]
    return np.argsort(-scores, kind="stable")[: min(int(n), len(scores))]


class BayesianOptimizer(BaseEstimator):
    """Bayesian optimisation over a box with any probabilistic regressor as the surrogate.

    Each :meth:`suggest` scores a fresh scrambled Sobol set of ``n_candidates`` points in ``bounds``
    (:class:`scipy.stats.qmc.Sobol`) and returns the best candidate by ``acquisition``
    (Duran-Martin et al. 2025, §5.4); :meth:`observe` gives the surrogate the value found. The
    surrogate sees the box mapped to the unit cube. Acquisitions (for minimisation; signs flip with
    ``maximize``):

    * ``'thompson'`` — one *function* draw over all candidates (``sample_y(method='thompson')``:
      one parameter draw for a skfilter regressor, with the observation noise left out (``R = 0``,
      as the paper); the joint draw of a Gaussian process), then its argmin;
    * ``'predictive'`` — an independent draw at each candidate from its predictive
      ``N(m(x), s(x)²)`` (Alg. 1's outcome-space sampling), then the argmin. Unlike a function
      draw it has no correlation across candidates: among many candidates with the same predictive
      the largest deviation wins, so it explores more than a function draw;
    * ``'ei'`` — the largest expected improvement (:func:`expected_improvement`).

    The first ``n_initial_points`` suggestions are uniform in the box; the surrogate first learns
    from all of them at once (so that the filters' ``'auto'`` priors see the targets' scale).
    A surrogate with ``partial_fit`` then learns each new point once (unless ``refit``); one without
    (a Gaussian process) is refitted on all points at every :meth:`observe`.

    Parameters
    ----------
    surrogate : regressor, default=None
        Has ``predict(X, return_std=True)``; for ``'thompson'``, ``sample_y``. Cloned. ``None``:
        ``LoFiRegressor(hidden_layer_sizes=(50, 50), rank=10)``.
    bounds : array-like of shape (n_dims, 2)
        Lower and upper bound of each coordinate (lower < upper, finite).
    acquisition : {'thompson', 'predictive', 'ei'}, default='thompson'
    n_candidates : int, default=1024
        Sobol candidates per suggestion (a power of 2 keeps the sequence balanced).
    n_initial_points : int, default=5
        Uniform points before the surrogate is used (``>= 1``).
    maximize : bool, default=False
        Maximise instead of minimise.
    xi : float >= 0, default=0.0
        Margin of ``'ei'``.
    refit : bool, default=False
        ``True``: fit the surrogate on all the observations at every :meth:`observe` (``fit``, with
        the surrogate's own ``n_epochs`` for a filter) instead of learning each new point once with
        ``partial_fit``. Always so for a surrogate without ``partial_fit``. With budgets of tens of
        evaluations one pass per point learns little: refit a filter with a few passes
        (``n_epochs=5``, a small fixed ``obs_variance`` on standardised targets), as the ``bo``
        benchmark does.
    random_state : int, RandomState instance or None, default=None
        Seeds the initial points, the Sobol scrambling and the draws.

    Attributes
    ----------
    surrogate_ : regressor
        The surrogate learned so far (after ``n_initial_points`` observations).
    X_ : ndarray of shape (n_observed, n_dims)
    y_ : ndarray of shape (n_observed,)
        The observations so far.
    best_x_ : ndarray of shape (n_dims,)
    best_y_ : float
        The best observation.
    history_ : dict of ndarray
        ``'step'``, ``'y'``, ``'best_y'`` (best so far) and ``'time'`` (cumulative seconds in
        :meth:`suggest` and :meth:`observe`), one entry per observation.

    References
    ----------
    Duran-Martin et al. (2025), §5.4. Jones, Schonlau, Welch (1998), expected improvement.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process import GaussianProcessRegressor
    >>> from sklearn.gaussian_process.kernels import Matern
    >>> from skfilter.decision import BayesianOptimizer
    >>> gp = GaussianProcessRegressor(Matern(0.3, length_scale_bounds="fixed", nu=2.5), normalize_y=True)
    >>> opt = BayesianOptimizer(gp, bounds=[[-2.0, 2.0]], acquisition="ei", random_state=0)
    >>> _ = opt.minimize(lambda x: float((x[0] - 0.5) ** 2), n_iter=15)
    >>> bool(abs(opt.best_x_[0] - 0.5) < 0.01), opt.history_["best_y"].shape
    (True, (15,))
    """

    _parameter_constraints = {
        "surrogate": [HasMethods(["fit", "predict"]), None],
        "bounds": ["array-like"],
        "acquisition": [StrOptions({"thompson", "predictive", "ei"})],
        "n_candidates": [Interval(Integral, 1, None, closed="left")],
        "n_initial_points": [Interval(Integral, 1, None, closed="left")],
        "maximize": ["boolean"],
        "xi": [Interval(Real, 0, None, closed="left")],
        "refit": ["boolean"],
        "random_state": ["random_state"],
    }

    def __init__(self, surrogate=None, bounds=None, *, acquisition="thompson", n_candidates=1024,
                 n_initial_points=5, maximize=False, xi=0.0, refit=False, random_state=None):
        self.surrogate = surrogate
        self.bounds = bounds
        self.acquisition = acquisition
        self.n_candidates = n_candidates
        self.n_initial_points = n_initial_points
        self.maximize = maximize
        self.xi = xi
        self.refit = refit
        self.random_state = random_state

    def _start(self):
        self._validate_params()
        if self.bounds is None:
            raise ValueError("bounds must be given: an array of shape (n_dims, 2).")
        bounds = check_array(self.bounds, dtype=np.float64, input_name="bounds")
        if bounds.shape[1] != 2 or not np.all(bounds[:, 0] < bounds[:, 1]):
            raise ValueError("bounds must have shape (n_dims, 2) with lower < upper in every row.")
        surrogate = self.surrogate
        if surrogate is None:
            from .lofi import LoFiRegressor

            surrogate = LoFiRegressor(hidden_layer_sizes=(50, 50), rank=10)
        if self.acquisition == "thompson" and not hasattr(surrogate, "sample_y"):
            raise ValueError("acquisition='thompson' needs a surrogate with sample_y.")
        self._rng = check_random_state(self.random_state)
        self._bounds = bounds
        self._template = surrogate
        self.n_features_in_ = bounds.shape[0]
        self._model = None
        self._U, self._y, self._times = [], [], []
        self._elapsed = 0.0

    def _to_unit(self, X):
        lo, hi = self._bounds[:, 0], self._bounds[:, 1]
        return (X - lo) / (hi - lo)

    def _from_unit(self, U):
        lo, hi = self._bounds[:, 0], self._bounds[:, 1]
        return lo + U * (hi - lo)

    def _acquisition_scores(self, U):
        """Scores to maximise at the unit-cube candidates ``U``."""
        model = self._model
        sign = 1.0 if self.maximize else -1.0
        if self.acquisition == "ei":
            kw = {"include_noise": False} if _accepts(model.predict, "include_noise") else {}
            mean, std = model.predict(U, return_std=True, **kw)
            best = float(np.max(self._y) if self.maximize else np.min(self._y))
            return expected_improvement(np.ravel(mean), np.ravel(std), best, xi=self.xi, maximize=self.maximize)
        seed = int(self._rng.randint(0, 2**31 - 1))
        sample_y = getattr(model, "sample_y", None)
        if sample_y is not None and _accepts(sample_y, "method"):
            kw = {"include_noise": False} if _accepts(sample_y, "include_noise") else {}
            draw = sample_y(U, 1, random_state=seed, method=self.acquisition, **kw)
        elif self.acquisition == "thompson":
            draw = sample_y(U, 1, random_state=seed)  # a Gaussian process: a joint draw
        else:
            mean, std = model.predict(U, return_std=True)
            draw = np.ravel(mean) + np.ravel(std) * np.random.default_rng(seed).standard_normal(U.shape[0])
        return sign * np.ravel(draw)

    def suggest(self):
        """The next point to evaluate.

        Returns
        -------
        x : ndarray of shape (n_dims,)
        """
        with unchanged_on_error(self):
            return self._suggest()

    def _suggest(self):
        if not hasattr(self, "_rng"):
            self._start()
        start = time.perf_counter()
        d = self.n_features_in_
        if self._model is None:
            u = self._rng.random_sample(d)
        else:
            sobol = qmc.Sobol(d, scramble=True, seed=int(self._rng.randint(0, 2**31 - 1)))
            with np.errstate(all="ignore"):
                import warnings

                with warnings.catch_warnings():  # a non-power-of-2 count only unbalances the sequence
                    warnings.simplefilter("ignore", UserWarning)
                    U = sobol.random(self.n_candidates)
            u = U[int(np.argmax(self._acquisition_scores(U)))]
        self._elapsed += time.perf_counter() - start
        return self._from_unit(u)

    def observe(self, x, y):
        """Give the surrogate the values ``y`` found at ``x``.

        Parameters
        ----------
        x : array-like of shape (n_dims,) or (n_points, n_dims)
        y : float or array-like of shape (n_points,)

        Returns
        -------
        self : object
        """
        with unchanged_on_error(self):
            return self._observe(x, y)

    def _observe(self, x, y):
        if not hasattr(self, "_rng"):
            self._start()
        X = check_array(np.atleast_2d(np.asarray(x, dtype=np.float64)), input_name="x")
        y = check_array(np.atleast_1d(np.asarray(y, dtype=np.float64)), ensure_2d=False, input_name="y").ravel()
        if X.shape[1] != self.n_features_in_ or y.shape != (X.shape[0],):
            raise ValueError(f"x must have {self.n_features_in_} coordinates per point and y one value per point; "
                             f"got x {X.shape} and y {y.shape}.")
        start = time.perf_counter()
        U = self._to_unit(X)
        self._U.extend(U)
        self._y.extend(y)
        n = len(self._y)
        if n >= self.n_initial_points:
            online = hasattr(self._template, "partial_fit") and not self.refit
            if self._model is None or not online:
                model = clone(self._template) if self._model is None else self._model
                every = (np.asarray(self._U), np.asarray(self._y))
                self._model = model.partial_fit(*every) if online else model.fit(*every)
            else:
                self._model.partial_fit(U, y)
            self.surrogate_ = self._model
        self._elapsed += time.perf_counter() - start
        self._times.extend([self._elapsed] * len(y))
        return self

    def optimize(self, func, n_iter):
        """Run ``n_iter`` rounds of :meth:`suggest`, ``func(x)``, :meth:`observe`.

        Parameters
        ----------
        func : callable
            ``func(x) -> float`` for ``x`` of shape ``(n_dims,)``.
        n_iter : int
            Evaluations of ``func`` (the initial points included).

        Returns
        -------
        self : object
        """
        if not callable(func):
            raise TypeError("func must be callable.")
        if not isinstance(n_iter, Integral) or n_iter < 1:
            raise ValueError(f"n_iter must be a positive integer, got {n_iter!r}.")
        for _ in range(int(n_iter)):
            x = self.suggest()
            self.observe(x, float(func(x)))
        return self

    def minimize(self, func, n_iter):
        """:meth:`optimize` for ``maximize=False`` (a ValueError otherwise).

        Parameters
        ----------
        func : callable
        n_iter : int

        Returns
        -------
        self : object
        """
        if self.maximize:
            raise ValueError("minimize needs maximize=False; use optimize.")
        return self.optimize(func, n_iter)

    def _check_observed(self):
        if not getattr(self, "_y", None):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("This BayesianOptimizer has observed nothing yet: call observe first.")

    @property
    def X_(self):
        """The observed points (in the box)."""
        self._check_observed()
        return self._from_unit(np.asarray(self._U))

    @property
    def y_(self):
        """The observed values."""
        self._check_observed()
        return np.asarray(self._y, dtype=np.float64)

    @property
    def best_x_(self):
        """The best observed point."""
        y = self.y_
        return self.X_[int(np.argmax(y) if self.maximize else np.argmin(y))]

    @property
    def best_y_(self):
        """The best observed value."""
        y = self.y_
        return float(np.max(y) if self.maximize else np.min(y))

    @property
    def history_(self):
        """Per observation: ``'step'``, ``'y'``, ``'best_y'``, ``'time'``."""
        y = self.y_
        best = np.maximum.accumulate(y) if self.maximize else np.minimum.accumulate(y)
        return {"step": np.arange(1, y.size + 1), "y": y, "best_y": best, "time": np.asarray(self._times)}
