"""Regression targets: Gaussian or Poisson likelihood, posterior-predictive moments and samples."""

from __future__ import annotations

import numbers
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions, validate_params
from sklearn.utils.validation import check_is_fitted

from . import stepping
from ._sampling import SAMPLING_METHODS, PredictiveSamplingMixin
from ._validation import raise_invalid_parameter, regression_target_matrix
from ._utils import targets_array, to_numpy
from .likelihoods import Gaussian, Poisson
from .priors import target_scale

_REGRESSION_LIKELIHOODS = ("gaussian", "poisson")

#: ``ε_min`` of ``obs_variance='auto'``: the online noise estimate (LoFi paper App. C.2) forgets with an
#: exponential window of about 1/0.02 = 50 rows, so that the large residuals of the first rows, made
#: while the network was still learning, do not keep the noise estimate (and the ±2σ band) too wide
#: for good; ``'adaptive'`` is the paper's running mean (``ε_t = 1/t``).
AUTO_NOISE_FORGETTING = 0.02

#: pseudo-rows of the prior on the noise variance of ``obs_variance='auto'`` (started at the variance
#: of the stream's first targets)
AUTO_NOISE_PRIOR_ROWS = 10.0

#: ``b`` of ``obs_variance='auto'``: a row's squared residual counts at most ``b² = 16`` times the
#: current noise estimate (:class:`~skfilter.likelihoods.Gaussian` ``residual_bound``), so that one
#: row moves the estimate by at most ``×(1 + 15 ε)`` (×1.3 at ``ε = 0.02``). The prior-predictive
#: residual holds the epistemic variance besides the noise: without the bound, one row at ``x = 1e5``
#: (after 300 rows in ``[−2, 2]``) multiplied ``r̂`` by 10⁶–10⁹ and the predictive std at ``x = 2`` by
#: 10³–10⁴ (tests/test_coverage.py). On Gaussian residuals the bound is inactive but for one row in
#: 16,000 (diabetes, concrete: RMSE, NLPD and coverage unchanged to 1 %).
AUTO_NOISE_RESIDUAL_BOUND = 4.0

#: ``c`` of ``obs_variance='robust'``: the ``'auto'`` estimate made outlier-robust (WoLF-EWMA on the
#: variance level, :class:`~skfilter.likelihoods.Gaussian`); a squared residual 4 times its expected
#: size gets weight 1/2
ROBUST_NOISE_THRESHOLD = 4.0

#: the string values of ``obs_variance``
_NOISE_ESTIMATES = ("auto", "robust", "adaptive")
_REGRESSION_PREDICTIVES = ("linearized", "plugin", "mc")


class FilterRegressorMixin(PredictiveSamplingMixin, RegressorMixin):
    """Targets, likelihood and predictive of the filter regressors.

    Predictive moments of ``y`` at a new input (``predictive`` parameter; LoFi paper §3.3, App. B.1):

    * ``'linearized'`` — ``h`` linearised at the posterior mean: ``f ~ N(h(μ, x), J Σ Jᵀ)``.
      Gaussian: mean ``h(μ, x)``, variance ``J Σ Jᵀ + r``. Poisson (log link): the rate
      ``λ = exp f`` is log-normal, mean ``m = exp(h + v/2)``, epistemic variance ``(eᵛ − 1) m²``,
      plus the Poisson variance ``m``.
    * ``'plugin'`` — the network at the posterior mean; epistemic variance 0.
    * ``'mc'`` — ``n_mc_samples`` parameter draws ``θ_s ~ N(μ, Σ)`` (fixed per fitted estimator, so
      predictions are deterministic): sample mean and variance of the output, plus the noise.
    """

    _target_structural_params = ("likelihood", "obs_variance")
    #: the predictive ``loss_curve_`` scores when ``predictive='mc'`` (:meth:`BaseFilter._loss_predictive`)
    _linearized_predictive = "linearized"

    def _prequential_loss(self, summaries, Y) -> float:
        """The Gaussian negative log predictive density of the targets ``Y (n, C)`` under the
        one-step-ahead predictive moments ``summaries (n, 3C)`` (mean; epistemic and aleatoric
        variance): summed over the outputs, averaged over the rows (unweighted)."""
        C = Y.shape[-1]
        mean = summaries[:, :C]
        var = (summaries[:, C:2 * C] + summaries[:, 2 * C:]).clamp_min(torch.finfo(summaries.dtype).tiny)
        nlpd = 0.5 * (torch.log(2 * np.pi * var) + (Y - mean) ** 2 / var)
        return float(nlpd.sum(-1).mean())

    #: scikit-learn's constraints of the regression parameters (merged by the concrete estimators)
    _target_parameter_constraints = {
        "likelihood": [StrOptions(set(_REGRESSION_LIKELIHOODS))],
        "predictive": [StrOptions(set(_REGRESSION_PREDICTIVES))],
        "n_mc_samples": [Interval(Integral, 1, None, closed="left")],
        "obs_variance": [StrOptions(set(_NOISE_ESTIMATES)), Interval(Real, 0, None, closed="neither"), "array-like"],
    }

    def _check_target_params(self):
        """After the constraint pass: an ``obs_variance`` array must be 1-d, non-empty, finite and
        positive (the constraints check its type only)."""
        r = self.obs_variance
        if not isinstance(r, (str, numbers.Real)):
            try:
                arr = np.asarray(r, dtype=np.float64)
            except (TypeError, ValueError):
                arr = None
            if arr is None or arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
                raise_invalid_parameter(self, "obs_variance", "'auto', 'robust', 'adaptive', a positive finite "
                                        "number or a 1-d array of them", r)
        return {}

    def _initial_noise(self, n_outputs, cfg, Y, weights):
        """``obs_variance='auto'`` starts the online estimate at the variance of the stream's first
        targets, counted as :data:`AUTO_NOISE_PRIOR_ROWS` pseudo-rows (a prior on ``r``): the first
        residuals then refine it instead of replacing it (with ``ε_1 = 1`` one lucky first
        prediction would make the filter believe the data noise-free)."""
        state = super()._initial_noise(n_outputs, cfg, Y, weights)
        if not (isinstance(self.obs_variance, str) and self.obs_variance in ("auto", "robust")) \
                or self.likelihood == "poisson":
            return state
        _, scale = target_scale(Y, weights)
        r = torch.full_like(state["r"], float(np.mean(scale ** 2)))
        weight = torch.full_like(state["weight"], AUTO_NOISE_PRIOR_ROWS)
        return {"r": r, "weight": weight, "scale": r.rsqrt()[..., None]}

    def _scaled_by_data(self, cfg) -> bool:
        """The ``'auto'`` prior, or the first noise estimate of ``obs_variance='auto'``/``'robust'``
        (started at the first targets' variance)."""
        noise = self.obs_variance
        return super()._scaled_by_data(cfg) or (isinstance(noise, str) and noise in ("auto", "robust")
                                                and self.likelihood != "poisson")

    def _prior_targets(self, Y):
        """The ``'auto'`` prior adopts the targets' scale under the Gaussian likelihood."""
        return None if self.likelihood == "poisson" else Y

    def _y_validation_kwargs(self):
        return {"multi_output": True, "y_numeric": True}

    def _fast_targets_ok(self, y) -> bool:
        return y.ndim in (1, 2) and y.dtype.kind in "fiu" and bool(np.isfinite(y).all())

    def _lean_targets(self, y, classes, bound):
        """One row's targets for the lean path (:meth:`~skfilter._estimator.BaseFilter._lean_fit`):
        what :func:`~skfilter._validation.regression_target_matrix` returns for a numeric ndarray
        of shape ``(1,)`` (one output) or ``(1, n_outputs_)``, finite and within ``bound`` (a list or
        tuple as ``numpy.asarray`` makes it one, as the full path's fast check does)."""
        t = type(y)
        if (t is np.ndarray and y.shape == (1,) and y.dtype.kind in "fiu") or (
                t is list and len(y) == 1 and type(y[0]) in (float, int)):
            if self.n_outputs_ == 1:  # one number (river's bridge passes [y]): it alone is converted
                v = float(y[0])
                if not -bound <= v <= bound:  # (False for NaN)
                    return None
                return np.array([[v]])
        y = targets_array(y)
        if y is None:
            return None
        if y.dtype.kind not in "fiu":
            return None
        C = self.n_outputs_
        if y.shape != (1, C) and (C != 1 or y.shape != (1,)):
            return None
        Y = y.reshape(1, C) if y.dtype == np.float64 else y.astype(np.float64).reshape(1, C)
        row = Y[0]
        if not float(row.dot(row)) <= bound * bound:  # every |y_j| within the bound, finite (NaN fails)
            return None
        return Y

    def _encode_targets(self, y, first, classes=None):
        # numbers only: None / non-numeric objects / NaN are a ValueError before anything is learned
        Y = regression_target_matrix(self, y, first)
        width = self.n_outputs_
        poisson = self.likelihood == "poisson" if first else self._is_poisson()
        if poisson and np.any(Y < 0):
            raise ValueError("The Poisson likelihood needs non-negative targets (counts).")
        r = self.obs_variance
        if first and not poisson and not isinstance(r, str) and np.ndim(r) == 1 and len(r) != width:
            raise ValueError(f"obs_variance has {len(r)} entries but y has {width} output(s).")
        return Y

    def _n_model_outputs(self):
        return self.n_outputs_

    def _is_poisson(self):
        """Whether the fitted likelihood is Poisson (the ``likelihood`` parameter may have changed since)."""
        return isinstance(self._likelihood, Poisson)

    def _check_module_outputs(self, n_outputs):
        if n_outputs != self.n_outputs_:
            raise ValueError(f"The module has {n_outputs} output(s) but y has {self.n_outputs_}.")

    def _make_likelihood(self, n_outputs, cfg):
        if self.likelihood == "poisson":
            return Poisson()
        if isinstance(self.obs_variance, str) and self.obs_variance in ("auto", "robust"):
            # the online estimate with a forgetting floor (module docstring); 'auto' bounds one row's
            # influence (winsorised residual), 'robust' makes it vanish for outliers (redescending)
            if self.obs_variance == "robust":
                return Gaussian("adaptive", eps_min=AUTO_NOISE_FORGETTING, robust_threshold=ROBUST_NOISE_THRESHOLD)
            return Gaussian("adaptive", eps_min=AUTO_NOISE_FORGETTING, residual_bound=AUTO_NOISE_RESIDUAL_BOUND)
        return Gaussian(self.obs_variance)

    def partial_fit(self, X, y, sample_weight=None):
        """Continue learning from ``(X, y)`` (one pass, in row order); the first call starts from the prior.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : object
        """
        if sample_weight is None and self._lean_fit(X, y, None):  # one plain row of a stream
            return self
        self._fit(X, y, sample_weight, reset=False, n_epochs=1, loss=False)
        return self

    # -- predictive -----------------------------------------------------------------------------
    def _summarize(self, f, var, noise_state, kind):
        """``(n, 3C)``: mean, epistemic variance, aleatoric variance of ``y`` (class docstring)."""
        poisson = self._is_poisson()
        if kind == "mc":
            out = self._likelihood.mean(f) if poisson else f
            mean, epi = out.mean(0), out.var(0, correction=0)
        elif kind == "plugin":
            mean, epi = self._likelihood.mean(f), torch.zeros_like(f)
        else:
            if poisson:
                var = var.clamp(max=60.0)
                mean = torch.exp((f + var / 2).clamp(max=self._likelihood.max_log_rate))
                epi = torch.expm1(var) * mean * mean
            else:
                mean, epi = f, var
        alea = mean if poisson else self._likelihood.aleatoric_variance(mean, noise_state)
        return torch.cat([mean, epi, alea], dim=-1)

    def _uninformed_summary(self, n):
        """NaN moments: no prediction of the targets' location and scale before any target."""
        return torch.full((n, 3 * self.n_outputs_), float("nan"), dtype=self._dtype, device=self._device)

    def _mix_summaries(self, summaries, weights):
        """Moments of the mixture ``Σ_k w_k p_k(y)`` from the hypotheses' ``(mean, epistemic,
        aleatoric)`` summaries ``(K, n, 3C)``: mean ``m = Σ w_k m_k``; aleatoric ``Σ w_k a_k``;
        epistemic ``Σ w_k (e_k + m_k²) − m²`` (the spread of the hypotheses' means counts as
        uncertainty about ``h``), so that the total is the mixture's variance."""
        C = summaries.shape[-1] // 3
        w = weights.to(summaries.dtype).reshape(-1, *([1] * (summaries.dim() - 1)))
        m_k, e_k, a_k = summaries[..., :C], summaries[..., C:2 * C], summaries[..., 2 * C:]
        mean = (w * m_k).sum(0)
        epi = (w * (e_k + (m_k - mean) ** 2)).sum(0)  # Σ w_k (e_k + m_k²) − m², without cancellation
        return torch.cat([mean, epi, (w * a_k).sum(0)], dim=-1)

    def _shape_output(self, a):
        return a[:, 0] if self._y_ndim == 1 else a

    def predict(self, X, return_std=False, include_noise=True):
        """Posterior-predictive mean of ``y`` (and its standard deviation).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the standard deviation of the posterior predictive of ``y``.
        include_noise : bool, default=True
            Whether that standard deviation includes the observation noise (the posterior
            predictive of ``y``) or is only the epistemic part (uncertainty about ``h(θ, x)``).

        Returns
        -------
        y_mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        y_std : ndarray of the same shape
            Only when ``return_std``.
        """
        if not return_std and self.predictive == "linearized" and type(self.__dict__.get("_likelihood")) is Gaussian:
            lean = self._lean_outputs(X)  # one plain row on the lean path: _host_predict's mean, bit for bit
            if lean is not None:
                mean = lean[1][:, 0] if self._y_ndim == 1 else lean[1]
                if not lean[2] < np.inf:
                    self._check_finite_prediction(mean)
                return mean
        rows, Xt = self._predict_rows(X)
        fast = self._host_predict(rows, Xt, return_std, include_noise)
        if fast is not None:
            return fast
        summary = self._predictive_summary(Xt, rows)
        C = self.n_outputs_
        mean = self._shape_output(to_numpy(summary[:, :C]))
        if not return_std:
            self._check_finite_prediction(mean)
            return mean
        var = summary[:, C:2 * C] + (summary[:, 2 * C:] if include_noise else 0.0)
        std = self._shape_output(to_numpy(var.clamp_min(0).sqrt()))
        self._check_finite_prediction(mean, std)  # a ValueError, never a NaN or infinite prediction
        return mean, std

    def _host_predict(self, rows, Xt, return_std, include_noise):
        """:meth:`predict`'s result on NumPy arrays for the common case — one belief on the CPU,
        ``predictive='linearized'``, the Gaussian likelihood — where the summary's torch operations
        (a few µs of dispatch each) would cost more than the arithmetic: mean ``f``, variance
        ``J Σ Jᵀ + r``, the same floating-point operations as :meth:`_summarize` and
        :meth:`predict` (so the same numbers; the square root is torch's). ``None`` for every other
        case."""
        state = self.filter_state_
        if self.predictive != "linearized" or Xt.device.type != "cpu" or not isinstance(self._likelihood, Gaussian):
            return None
        if state.log_weights is not None:
            return self._host_predict_mixture(rows, Xt, return_std, include_noise)
        # the mean alone: the compiled forward pass, the same arithmetic as the linearised
        # predictive's (bit for bit), without its Jacobian and the k × k factorisation of LoFi
        f = None if return_std else stepping.forward_compiled(self._adapter, state.belief.mean, Xt)
        if f is None:
            f, v = self._linearized(Xt)
        biggest = self._remember_outputs(rows, f)
        mean = self._shape_output(f.numpy())
        finite_mean = biggest is not None and biggest < np.inf  # max |f|: NaN or inf iff an entry is
        if not return_std:
            if not finite_mean:
                self._check_finite_prediction(mean)
            return mean
        var = v.numpy()
        if include_noise:  # Gaussian.aleatoric_variance is r, broadcast over the rows
            if type(self._likelihood) is Gaussian:
                var = var + state.noise["r"].numpy()
            else:
                var = var + self._likelihood.aleatoric_variance(f, state.noise).numpy()
        else:
            var = var + 0.0
        # torch's square root, as the torch path (on the CPU it is not always correctly rounded)
        std = self._shape_output(torch.from_numpy(np.maximum(var, 0.0)).sqrt_().numpy())
        self._check_finite_prediction(*((std,) if finite_mean else (mean, std)))
        return mean, std

    def _host_predict_mixture(self, rows, Xt, return_std, include_noise):
        """:meth:`_host_predict` for a mixture state (a run-length filter's ``K`` hypotheses with
        normalised ``log_weights``, one hypotheses axis): the hypotheses' linearised predictives in
        one compiled call when it serves (:meth:`_linearized`), then the mixture's moments of
        :meth:`_mix_summaries` on NumPy arrays — mean ``Σ w_k f_k``, epistemic
        ``Σ w_k (v_k + (f_k − m)²)``, aleatoric ``Σ w_k r_k``. ``None`` when the belief has more
        axes or the Gaussian noise state is not one ``r`` per hypothesis."""
        state = self.filter_state_
        noise = state.noise
        if state.belief.mean.dim() != 2 or type(self._likelihood) is not Gaussian or noise is None \
                or noise["r"].dim() != 2:
            return None
        f, v = self._linearized(Xt)
        biggest = self._remember_outputs(rows, f)
        lw = state.log_weights.numpy()
        w = np.exp(lw - lw.max())
        w = (w / w.sum())[:, None, None]
        F = f.numpy()
        m = (w * F).sum(0)
        mean = self._shape_output(m)
        finite_mean = biggest is not None and biggest < np.inf
        if not return_std:
            if not finite_mean:
                self._check_finite_prediction(mean)
            return mean
        var = (w * (v.numpy() + (F - m) ** 2)).sum(0)
        if include_noise:
            var = var + (w[:, :, 0] * noise["r"].numpy()).sum(0)
        std = self._shape_output(torch.from_numpy(np.maximum(var, 0.0)).sqrt_().numpy())
        self._check_finite_prediction(*((std,) if finite_mean else (mean, std)))
        return mean, std

    @validate_params({"X": ["array-like"], "n_samples": [Interval(Integral, 1, None, closed="left")],
                      "random_state": ["random_state"], "method": [StrOptions(set(SAMPLING_METHODS))],
                      "include_noise": ["boolean"]}, prefer_skip_nested_validation=True)
    def sample_y(self, X, n_samples=1, random_state=None, method="thompson", include_noise=True):
        """Draw from the posterior predictive of ``y``, in parameter space or in outcome space.

        * ``method='thompson'`` (Thompson sampling; Duran-Martin et al. 2025, Table 1): ``θ_s ~ N(μ, Σ)``,
          then ``y ~ p(y | h(θ_s, x))``. One parameter draw is shared by all rows of ``X`` (a function
          draw, as :meth:`sklearn.gaussian_process.GaussianProcessRegressor.sample_y`), so samples
          are correlated across inputs as the belief implies. Costs a ``P``-dimensional draw and a
          forward pass per sample.
        * ``method='predictive'`` (predictive sampling, Duran-Martin et al. 2025, Alg. 1): every row
          independently from its linearised posterior predictive, jointly over its outputs,
          ``y ~ N(h(μ, x), J Σ Jᵀ + R)`` with ``J = ∂h/∂θ`` at ``μ`` and ``R = diag(r)`` the
          observation noise (the moments of ``predict(return_std=True)`` with
          ``predictive='linearized'``, whatever the ``predictive`` parameter). Poisson likelihood:
          the log-rate is drawn from ``N(h(μ, x), J Σ Jᵀ)`` and the count from
          ``Poisson(exp(log-rate))``. No parameter is sampled: the cost is one Jacobian per row,
          independent of ``n_samples``.

        A run-length mixture (:class:`~skfilter.BOCDRegressor`) first draws the hypothesis by its
        weight: per sample for ``'thompson'``, per row and sample for ``'predictive'``.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=None
        method : {'thompson', 'predictive'}, default='thompson'
            Parameter-space function draws or independent per-row predictive draws.
        include_noise : bool, default=True
            ``False``: draws of the mean of ``y`` given the parameters, without the observation
            noise — ``h(θ_s, x)`` (Thompson) or ``N(h(μ, x), J Σ Jᵀ)`` (predictive); Poisson: the
            rate ``exp f`` instead of a count. Decision rules that compare the means of actions
            (Thompson sampling, Bayesian optimisation with ``R = 0``) use these.

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples) or (n_samples_X, n_outputs, n_samples)

        Examples
        --------
        >>> import numpy as np
        >>> from skfilter import EKFRegressor
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(200, 1)); y = 2 * X[:, 0] + 0.1 * rng.normal(size=200)
        >>> reg = EKFRegressor(hidden_layer_sizes=(), random_state=0).fit(X, y)
        >>> draws = reg.sample_y(X[:3], n_samples=5000, random_state=0, method="predictive")
        >>> draws.shape
        (3, 5000)
        >>> mean, std = reg.predict(X[:3], return_std=True)
        >>> bool(np.allclose(draws.mean(axis=1), mean, atol=0.01))
        True
        """
        Xt = self._predict_tensor(X)
        gen = self._sampling_generator(random_state)
        poisson = self._is_poisson()
        with torch.no_grad():
            if method == "predictive":
                noise = self._likelihood.aleatoric_variance if include_noise and not poisson else None
                y, _ = self._predictive_output_draws(Xt, n_samples, gen, noise)  # (n, S, C)
                if poisson:
                    y = self._likelihood.mean(y)
                    y = torch.poisson(y, generator=gen) if include_noise else y
                y = to_numpy(y).transpose(0, 2, 1)  # (n, C, S)
            else:
                f, which = self._thompson_output_draws(Xt, n_samples, gen)  # (S, n, C)
                if poisson:
                    y = self._likelihood.mean(f)
                    y = torch.poisson(y, generator=gen) if include_noise else y
                elif not include_noise:
                    y = f
                else:
                    r = self._noise_state["r"]
                    if which is not None:  # each draw with the noise of its hypothesis
                        r = r[which.to(r.device)].unsqueeze(-2)
                    y = f + r.sqrt() * torch.randn(f.shape, generator=gen, device=f.device, dtype=f.dtype)
                y = to_numpy(y).transpose(1, 2, 0)  # (n, C, S)
        self._check_finite_prediction(y)
        return y[:, 0, :] if self._y_ndim == 1 else y

    @property
    def obs_variance_(self):
        """Observation-noise variance per output used by the next step (fixed or online estimate)."""
        check_is_fitted(self)
        if self._is_poisson():
            raise AttributeError("obs_variance_ exists only for the Gaussian likelihood.")
        return to_numpy(self._noise_state["r"]).copy()

    def prequential_fit_predict(self, X, y, *, return_std=False, method="predict", sample_weight=None,
                                classes=None):
        """Fit from the prior on the stream ``(X, y)`` (one pass, in row order) and return the
        one-step-ahead prediction of every row, made before the row is learned.

        The prediction of row ``t`` uses the belief after rows ``0..t−1`` and the dynamics of step
        ``t`` (the predicted belief) and is computed inside the filter loop, from the Jacobians the
        update uses, with the estimator's ``predictive``. The estimator is left fitted on the
        whole stream, as after ``fit`` with ``n_epochs=1``. This is the interface
        :func:`skfilter.model_selection.prequential_predict` calls.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        return_std : bool, default=False
            Also return the predictive standard deviation (observation noise included).
        method : {'predict'}, default='predict'
            Regressors predict means only.
        sample_weight : array-like of shape (n_samples,), default=None
            As in :meth:`fit`.
        classes : None
            Classifiers only; must be ``None``.

        Returns
        -------
        mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        std : ndarray of the same shape
            Only with ``return_std=True``.

        Examples
        --------
        >>> import numpy as np
        >>> from skfilter import EKFRegressor
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(100, 2)); y = X @ [1.0, -2.0] + 0.1 * rng.normal(size=100)
        >>> reg = EKFRegressor(hidden_layer_sizes=(), obs_variance=0.01, random_state=0)
        >>> mean, std = reg.prequential_fit_predict(X, y, return_std=True)
        >>> mean.shape, reg.n_samples_seen_
        ((100,), 100)
        """
        self._check_prequential_args(return_std, method, classes)
        return self._prequential_outputs(self._prequential_fit_record(X, y, sample_weight), return_std, method)

    def _check_prequential_args(self, return_std, method, classes):
        """``prequential_fit_predict``'s arguments that a regressor takes (before anything is learned)."""
        if classes is not None:
            raise ValueError("classes only applies to classifiers.")
        if method != "predict":
            raise ValueError(f"method must be 'predict' for a regressor, got {method!r}.")

    def _prequential_outputs(self, rec, return_std, method):
        """Means (and standard deviations) from a one-step-ahead record ``(n, 3C)``."""
        C = self.n_outputs_
        mean = self._shape_output(to_numpy(rec[:, :C]))
        if not return_std:
            return mean
        return mean, self._shape_output(to_numpy((rec[:, C:2 * C] + rec[:, 2 * C:]).clamp_min(0).sqrt()))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags
