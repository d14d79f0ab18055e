"""The scikit-learn layer shared by every filter estimator.

:class:`BaseFilter` turns the engine of :mod:`skfilter.filtering` into an estimator: it validates
hyper-parameters and data, builds the model, likelihood and posterior structure on the first
``fit``/``partial_fit``, streams rows through :class:`~skfilter.filtering.OnlineFilter`, and computes
predictives from the current belief. A concrete estimator names its posterior structure by
implementing :meth:`BaseFilter._make_posterior` and combines :class:`FilterRegressorMixin` or
:class:`FilterClassifierMixin` (targets, likelihood and predictive) with it.

Guarantees (DESIGN.md, conventions):

* ``__init__`` only stores parameters; ``module__<name>`` keyword arguments are stored too and are
  part of :meth:`get_params`, as in skorch.
* A call that fails validation leaves the estimator exactly as it was (the instance dictionary is
  restored).
* A filter step that fails numerically raises :class:`~skfilter.exceptions.FilterStepError`; the
  belief after the last good step is kept and ``n_samples_seen_`` counts the rows learned.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from ._utils import check_scalar, progress_bar, resolve_device, resolve_dtype, torch_generator
from .filtering import OnlineFilter
from .models import build_module, make_adapter
from ._validation import check_int, check_network_params, check_no_unknown_kwargs, unchanged_on_error
from ._validation import PrefixedParamsMixin

#: maximal number of Jacobian entries (rows × outputs × parameters) held at once when predicting
_PREDICT_CHUNK_ENTRIES = 1 << 23


class BaseFilter(PrefixedParamsMixin, BaseEstimator):
    """Base class of the filter estimators (see the module docstring). Not for direct use."""

    # -- parameters ---------------------------------------------------------------------------
    def _check_params(self) -> dict:
        """Validate the hyper-parameters shared by every filter; returns the resolved settings."""
        check_no_unknown_kwargs(self, self._param_prefixes)
        device = resolve_device(self.device)
        cfg = {
            "device": device,
            "dtype": resolve_dtype(self.dtype, device),
            "prior_variance": check_scalar(self.prior_variance, "prior_variance", low=0.0, include_low=False),
            "process_noise": check_scalar(self.process_noise, "process_noise", low=0.0),
            "decay": check_scalar(self.decay, "decay", low=0.0, high=1.0),
            "batch_size": check_int(self.batch_size, "batch_size", 1),
        }
        cfg.update(check_network_params(self))
        cfg.update(self._check_structure_params())
        cfg.update(self._check_target_params())
        return cfg

    def _check_structure_params(self) -> dict:
        """Validate the structure-specific parameters (subclasses)."""
        return {}

    def _make_posterior(self, mean: torch.Tensor, cfg: dict):
        """Build the prior belief of the posterior structure around ``mean`` (subclasses)."""
        raise NotImplementedError

    # -- data -----------------------------------------------------------------------------------
    def _tensor(self, a, dtype=None):
        return torch.tensor(np.ascontiguousarray(a), dtype=dtype or self._dtype, device=self._device)

    def _validate_X(self, X, reset):
        return validate_data(self, X, reset=reset, accept_sparse=False, dtype=[np.float64, np.float32],
                             ensure_all_finite=True)

    def _validate_weights(self, sample_weight, X):
        if sample_weight is None:
            return None
        w = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        if not np.all(np.isfinite(w)):
            raise ValueError("sample_weight must be finite.")
        return w

    # -- building the filter ------------------------------------------------------------------
    def _initialize(self, X, cfg, n_outputs):
        """Build module, adapter, likelihood, prior belief and noise state for a new stream."""
        rng = check_random_state(self.random_state)
        seed = int(rng.randint(0, 2**31 - 1))
        module = build_module(
            self.module, self._prefixed("module__"), n_inputs=X.shape[1], n_outputs=n_outputs,
            hidden_layer_sizes=cfg["hidden_layer_sizes"], activation=self.activation, seed=seed,
        )
        adapter = make_adapter(module, cfg["device"], cfg["dtype"], X.shape[1])
        self._check_module_outputs(adapter.n_outputs)
        self._device, self._dtype = cfg["device"], cfg["dtype"]
        self._adapter = adapter
        self._shuffle_rng = np.random.RandomState(int(rng.randint(0, 2**31 - 1)))
        self._mc_seed = int(rng.randint(0, 2**31 - 1))
        self._likelihood = self._make_likelihood(adapter.n_outputs, cfg)
        self.posterior_ = self._make_posterior(adapter.initial_theta(), cfg)
        self._noise_state = self._likelihood.initial_state(adapter.n_outputs, cfg["device"], cfg["dtype"])
        self.n_params_ = adapter.n_params
        self.n_samples_seen_ = 0
        self.module_ = adapter.module

    def _filter(self, cfg):
        return OnlineFilter(self._adapter, self._likelihood, self.posterior_, decay=cfg["decay"],
                            process_noise=cfg["process_noise"], noise_state=self._noise_state)

    def _stream(self, X, Y, w, cfg, n_epochs, record=False):
        """Filter ``(X, Y, w)`` ``n_epochs`` times (shuffled after the first pass if ``shuffle``).

        With ``record``, returns the one-step-ahead predictive of every row made before its update
        (see :meth:`_one_step_recorder`), as a tensor with one row per input row.
        """
        flt = self._filter(cfg)
        record = self._one_step_recorder(cfg) if record else None
        Xt, Yt = self._tensor(X), self._tensor(self._target_matrix(Y))
        wt = None if w is None else self._tensor(w)
        n = Xt.shape[0]
        bar = progress_bar(self.verbose, n_epochs * n, type(self).__name__)
        out = None
        try:
            for epoch in range(n_epochs):
                if epoch > 0 and self.shuffle:
                    perm = torch.as_tensor(self._shuffle_rng.permutation(n), device=Xt.device)
                    Xe, Ye, we = Xt[perm], Yt[perm], None if wt is None else wt[perm]
                else:
                    Xe, Ye, we = Xt, Yt, wt
                done_before = self.n_samples_seen_
                progress = None
                if bar is not None:
                    progress = lambda j, b=bar, s=epoch * n: b.update(s + j - b.n)  # noqa: E731
                try:
                    out = flt.run(Xe, Ye, we, cfg["batch_size"], record, progress)
                except BaseException as exc:  # a failed step or an interrupt: count the rows learned
                    self.n_samples_seen_ = done_before + getattr(exc, "rows_done", 0)
                    raise
                self.n_samples_seen_ = done_before + n
        finally:
            self._noise_state = flt.noise_state
            self._adapter.write_to_module(self.posterior_.mean)
            if bar is not None:
                bar.close()
        return out

    # -- fitting --------------------------------------------------------------------------------
    def _fit(self, X, y, sample_weight, *, reset, classes=None, n_epochs=None, record=False):
        with unchanged_on_error(self):
            cfg = self._check_params()
            first = reset or not hasattr(self, "posterior_")
            if not first:
                check_is_fitted(self)
            X, y = validate_data(self, X, y, reset=first, accept_sparse=False,
                                 dtype=[np.float64, np.float32], ensure_all_finite=True,
                                 **self._y_validation_kwargs())
            if X.shape[0] == 0:
                raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
            w = self._validate_weights(sample_weight, X)
            Y = self._encode_targets(y, first=first, classes=classes)
            if first:
                self._initialize(X, cfg, self._n_model_outputs())
            elif cfg["device"] != self._device or cfg["dtype"] != self._dtype:
                self._move(cfg["device"], cfg["dtype"])
        return self._stream(X, Y, w, cfg, cfg["n_epochs"] if n_epochs is None else n_epochs, record)

    def _move(self, device, dtype):
        """Move a fitted estimator to another device/dtype (after ``set_params(device=...)``)."""
        self._adapter = make_adapter(self._adapter.module, device, dtype, self.n_features_in_)
        self.module_ = self._adapter.module
        self.posterior_.to(device=device, dtype=dtype)
        if self._noise_state is not None:
            self._noise_state = {k: v.to(device=device, dtype=dtype) for k, v in self._noise_state.items()}
        self._device, self._dtype = device, dtype

    def fit(self, X, y, sample_weight=None):
        """Learn from the stream ``(X, y)`` starting from the prior, in row order.

        Makes ``n_epochs`` passes (the first in row order; later ones shuffled if ``shuffle``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs, one row per time step.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights; a weight ``w`` divides the observation variance by ``w``
            (``w = 0``: the row is not learned from).

        Returns
        -------
        self : object
        """
        self._fit(X, y, sample_weight, reset=True)
        return self

    # -- predictive machinery -----------------------------------------------------------------
    def _predict_tensor(self, X):
        check_is_fitted(self)
        X = self._validate_X(X, reset=False)
        return self._tensor(X)

    def _chunks(self, n):
        per_row = max(1, self._adapter.n_outputs * self.n_params_)
        size = max(1, _PREDICT_CHUNK_ENTRIES // per_row)
        return [(i, min(i + size, n)) for i in range(0, n, size)]

    @torch.no_grad()
    def _linearized(self, Xt, full=False):
        """Model output ``f (n, C)`` at the posterior mean and ``J Σ Jᵀ``: diagonal ``(n, C)``,
        or ``(n, C, C)`` if ``full`` (spec/lofi.md §2.8 B.1; the current belief, no predict step)."""
        mean = self.posterior_.mean
        fs, vs = [], []
        for a, b in self._chunks(Xt.shape[0]):
            f, J = self._adapter.forward_jacobian(mean, Xt[a:b])
            fs.append(f)
            vs.append(self.posterior_.predictive_cov(J) if full else self.posterior_.predictive_var(J))
        return torch.cat(fs), torch.cat(vs)

    @torch.no_grad()
    def _plugin(self, Xt):
        return self._adapter.forward(self.posterior_.mean, Xt)

    def _parameter_samples(self, n_samples, seed):
        gen = torch_generator(seed, self._device)
        return self.posterior_.sample(n_samples, gen)

    @torch.no_grad()
    def _sampled_outputs(self, Xt, n_samples, seed):
        """``h(θ_s, X)`` for ``θ_s ~ N(μ, Σ)``: shape ``(S, n, C)`` (same draws for every row)."""
        thetas = self._parameter_samples(n_samples, seed)
        return self._adapter.forward_batch(thetas, Xt)

    def _predicted_parameter_samples(self, n_samples, generator, gamma, q):
        """Draws from the predicted belief ``N(γμ, γ²Σ + qI)``: ``γθ + √q ε`` with ``θ ~ N(μ, Σ)``."""
        thetas = self.posterior_.sample(n_samples, generator)
        if gamma != 1.0:
            thetas = thetas * gamma
        if q:
            thetas = thetas + q ** 0.5 * torch.randn(thetas.shape, generator=generator,
                                                     device=thetas.device, dtype=thetas.dtype)
        return thetas

    def _one_step_recorder(self, cfg):
        """A ``record`` callable for :meth:`OnlineFilter.step` computing the estimator's predictive
        (its ``predictive`` parameter) of the rows about to be learned, from the predicted belief."""
        gen = torch_generator(self._mc_seed, self._device)
        gamma, q = cfg["decay"], cfg["process_noise"]

        def record(X, f, quad, noise_state):
            if self.predictive == "mc":
                thetas = self._predicted_parameter_samples(self.n_mc_samples, gen, gamma, q)
                return self._summarize(self._adapter.forward_batch(thetas, X), None, noise_state, "mc")
            return self._summarize(f, quad.diagonal(dim1=1, dim2=2), noise_state, self.predictive)

        return record

    def _predictive_summary(self, Xt):
        """The estimator's predictive at ``Xt`` from the current belief (see :meth:`_summarize`)."""
        if self.predictive == "mc":
            return self._summarize(self._sampled_outputs(Xt, self.n_mc_samples, self._mc_seed), None,
                                   self._noise_state, "mc")
        if self.predictive == "plugin":
            return self._summarize(self._plugin(Xt), None, self._noise_state, "plugin")
        f, v = self._linearized(Xt)
        return self._summarize(f, v, self._noise_state, self.predictive)

    # -- target-specific hooks (mixins) ----------------------------------------------------------
    def _summarize(self, f, var, noise_state, kind):
        """Predictive summary ``(n, ·)`` from outputs ``f (n, C)`` and epistemic variances
        ``var (n, C)`` (linearised), or from sampled outputs ``f (S, n, C)`` (``kind='mc'``)."""
        raise NotImplementedError

    def _target_matrix(self, y_encoded):
        """Targets as the ``(n, C)`` float matrix the likelihood observes."""
        return y_encoded

    def _check_module_outputs(self, n_outputs):
        """Raise if the module's output width does not fit the targets (mixins)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu").numpy()
