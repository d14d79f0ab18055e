"""The scikit-learn layer shared by every filter estimator.

:class:`BaseFilter` turns the engine of :mod:`skfilter.filtering` into an estimator: it validates
hyper-parameters and data, builds the model, likelihood and posterior structure on the first
``fit``/``partial_fit``, streams rows through :class:`~skfilter.filtering.OnlineFilter`, and computes
predictives from the current belief. A concrete estimator names its posterior structure by
implementing :meth:`BaseFilter._make_structure` and combines :class:`FilterRegressorMixin` or
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

from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils import check_random_state
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from ._utils import check_fitted, magnitude_bound, memo_for, output_limit
from ._utils import pass_progress, progress_bar, resolve_device, resolve_dtype, targets_array
from ._utils import torch_generator
from .dynamics import Dynamics, Reference
from . import kernels
from . import stepping
from .filtering import EngineParts, FilterState
from .stepping import RowState, run_filter
from .posteriors import Posterior, map_belief, select_hypothesis
from .models import MLPAdapter, build_module, make_adapter, standardize_mlp
from .priors import auto_prior, input_standardization
from .stream_start import DEFAULT_PRIOR_ROWS, StreamStart, first_rows, generator_for, prequential_fit_record
from ._validation import DEVICE_PARAMETER_CONSTRAINTS, NETWORK_PARAMETER_CONSTRAINTS, ValidatedParamsMixin
from ._validation import check_data_magnitude, check_finite_output, check_network_params
from ._validation import check_no_unknown_kwargs, check_parameter_constraints, unchanged_on_error
from ._validation import PrefixedParamsMixin, check_structural_params_unchanged, restore_attributes

#: maximal number of Jacobian entries (rows × outputs × parameters) held at once when predicting
_PREDICT_CHUNK_ENTRIES = 1 << 23

#: the largest ``X`` (entries) whose model outputs a prediction remembers for the next ``partial_fit``
#: (:meth:`BaseFilter._remember_outputs`)
_REMEMBERED_OUTPUT_ENTRIES = 1 << 12


_NUMPY_DTYPES = {torch.float64: np.float64, torch.float32: np.float32}
_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)


class _Nothing:
    """A context manager doing nothing (cheaper than ``contextlib.nullcontext()`` per call)."""

    __slots__ = ()

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NOTHING = _Nothing()


def _no_grad_for(adapter):
    """``torch.no_grad()`` for an adapter whose outputs could carry autograd history (a user's
    module through torch.func); nothing for the fused MLP adapter, whose hand-written pass on
    tensors that never require grad (the belief, the rows) records none, and which a one-row
    prediction would otherwise pay ~2 µs to enter and leave."""
    if type(adapter) is MLPAdapter or not torch.is_grad_enabled():
        return _NOTHING
    return torch.no_grad()


def _largest(t) -> float:
    """``max |t|`` of a tensor as a float (NaN if any entry is NaN), on the host's NumPy view for a
    CPU tensor."""
    if t.device.type == "cpu" and not t.requires_grad:
        return float(np.abs(t.numpy()).max())
    return t.abs().max().item()


def _select_noise(noise, k):
    """Hypothesis ``k`` of a noise state with a leading hypotheses axis (None stays None)."""
    return None if noise is None else {key: value[k] for key, value in noise.items()}


def _n_epochs_of(est) -> int:
    """``est.n_epochs`` if it is an integer (validation reports anything else), else 1."""
    n = getattr(est, "n_epochs", 1)
    return n if isinstance(n, (int, np.integer)) and not isinstance(n, bool) else 1


_NAN = float("nan")


class _LeanPath:
    """What a fitted estimator's one-row calls reuse from its last call of the full path
    (:meth:`BaseFilter._keep_lean`): the settings ``cfg``, the engine ``parts`` and kernel ``plan``,
    the dtype, the row shape, the magnitude and output bounds and the plan's one-row constants.
    Kept in the estimator's memo until a call of the full path (:meth:`BaseFilter._begin`), a
    wrapper's new weighting or progress setting, or a restored instance dictionary forgets it."""

    __slots__ = ("cfg", "parts", "plan", "np_dtype", "shape", "bound", "bound2", "limit", "row_arguments")

    def __init__(self, est, cfg, parts, plan):
        self.cfg, self.parts, self.plan = cfg, parts, plan
        self.np_dtype = np.dtype(_NUMPY_DTYPES[est._dtype])  # (the instance: compared by identity)
        self.shape = (1, est.n_features_in_)
        self.bound = magnitude_bound(est._dtype)
        self.bound2 = self.bound * self.bound
        self.limit = output_limit(est._dtype)
        step = getattr(plan, "row_arguments", None)  # the plan's one-row step's constants (static LoFi)
        self.row_arguments = None if step is None or not plan.checks_outputs \
            else step(parts.adapter.n_outputs, self.np_dtype, self.limit)

    def kernel_row(self, est, X):
        """``(X, rows)`` for one plain row ``X`` — a float64/float32 ndarray of the fitted width
        whose ``‖x‖²`` is within the magnitude bound squared (so every entry is finite and within
        it; a NaN fails the test, a larger or overflowing sum takes the full path, which accepts or
        raises as it does), or a list or tuple of one row :meth:`BaseFilter._fast_rows` accepts —
        ``X`` as the full path's checks return it and ``rows`` as the kernels take it (``X``
        itself when it is a writeable C-contiguous array of the estimator's dtype); None for
        anything else."""
        t = type(X)
        if t is np.ndarray:
            dtype = X.dtype
            if X.shape != self.shape or (dtype is not _F64 and dtype is not _F32):
                return None
            row = X[0]
            if not float(row.dot(row)) <= self.bound2:
                return None
        elif (t is list or t is tuple) and len(X) == 1:  # river's bridge: the full path's fast check and conversion
            X = est._fast_rows(X, est._dtype)
            if X is None or X.shape != self.shape:
                return None
            dtype = X.dtype
        else:
            return None
        flags = X.flags
        if dtype is self.np_dtype and flags.c_contiguous and flags.writeable and flags.aligned:
            return X, X
        return X, np.array(X, dtype=self.np_dtype, order="C")


class BaseFilter(ValidatedParamsMixin, PrefixedParamsMixin, BaseEstimator):
    """Base class of the filter estimators (see the module docstring). Not for direct use."""

    # -- parameters ---------------------------------------------------------------------------
    #: scikit-learn's constraints of the parameters every filter has (concrete estimators merge
    #: these with their likelihood's and structure's: ``{**BaseFilter._parameter_constraints, …}``)
    _parameter_constraints: dict = {
        **NETWORK_PARAMETER_CONSTRAINTS,
        **DEVICE_PARAMETER_CONSTRAINTS,
        "prior_variance": [StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")],
        "n_prior_rows": [Interval(Integral, 1, None, closed="left")],
        "process_noise": [Interval(Real, 0, None, closed="left")],
        "decay": [Interval(Real, 0, 1, closed="both")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "warm_start": ["boolean"],
    }

    def _resolve_params(self) -> dict:
        """Validate the hyper-parameters (unknown keyword arguments, scikit-learn's constraint pass,
        then the checks that depend on the machine or on several parameters); returns the resolved
        settings (memoised by :meth:`~skfilter._validation.ValidatedParamsMixin._check_params`)."""
        check_no_unknown_kwargs(self, self._param_prefixes)
        check_parameter_constraints(self)
        device = resolve_device(self.device)
        cfg = {
            "device": device,
            "dtype": resolve_dtype(self.dtype, device),
            "prior_variance": self.prior_variance if isinstance(self.prior_variance, str)
            else float(self.prior_variance),
            "n_prior_rows": int(getattr(self, "n_prior_rows", DEFAULT_PRIOR_ROWS)),
            "process_noise": float(self.process_noise),
            "decay": float(self.decay),
            "batch_size": int(self.batch_size),
            "warm_start": bool(self.warm_start),
        }
        cfg.update(check_network_params(self))
        cfg.update(self._check_structure_params())
        cfg.update(self._check_target_params())
        return cfg

    def _prior(self, adapter, X, Y, cfg, weights=None):
        """The prior ``(θ₀, σ₀²)``: the module's weights and ``prior_variance``, or with
        ``prior_variance='auto'`` the data-scaled prior of :mod:`skfilter.priors` from the first rows
        ``X`` and (regressors) targets ``Y``."""
        if cfg["prior_variance"] != "auto":
            return adapter.initial_theta(), cfg["prior_variance"]
        mean0, var0 = auto_prior(adapter, X, self._prior_targets(Y), prior_scale=self._auto_prior_scale,
                                 weights=weights)
        adapter.write_to_module(mean0)
        return mean0, self._structure.admissible_prior_variance(var0)

    #: ``prior_scale`` of the ``'auto'`` prior (:func:`skfilter.priors.auto_prior`)
    _auto_prior_scale = 1.0

    def _initial_noise(self, n_outputs, cfg, Y, weights):
        """The likelihood's initial noise state (regressors may start it from the first targets)."""
        return self._likelihood.initial_state(n_outputs, cfg["device"], cfg["dtype"])

    def _prior_targets(self, Y):
        """Targets whose scale the ``'auto'`` prior adopts (regressors); None (classifiers)."""
        return None

    def _scaled_by_data(self, cfg) -> bool:
        """Whether this estimator's start uses data (:mod:`skfilter.stream_start`): the ``'auto'``
        prior of the default network (input standardisation; regressors: the targets' scale).
        Mixins and structures add theirs (the first noise estimate, a subspace warm-up)."""
        return cfg["prior_variance"] == "auto" and self.module is None

    def _prior_rows_limit(self, cfg):
        """The number of the stream's first rows that fix its data-scaled start, or None when
        nothing is scaled to data (:mod:`skfilter.stream_start`)."""
        return cfg["n_prior_rows"] if self._scaled_by_data(cfg) else None

    @property
    def _prior_pending(self) -> bool:
        """Whether the stream has not yet seen the rows that fix its prior (they are kept)."""
        return self.__dict__.get("_stream_start") is not None

    def _check_structure_params(self) -> dict:
        """Validate the structure-specific parameters (subclasses)."""
        return {}

    def _make_structure(self, cfg: dict):
        """The posterior structure (:class:`skfilter.posteriors.Structure`) of this estimator (subclasses)."""
        raise NotImplementedError

    def _make_dynamics(self, cfg: dict) -> Dynamics:
        """The dynamics the engine applies before every step, from ``decay``/``process_noise``."""
        return Dynamics(decay=cfg["decay"], process_noise=cfg["process_noise"])

    #: parameters fixed by the first ``fit``/``partial_fit`` of a stream (the model, the structure,
    #: the prior, the likelihood): changing one with ``set_params`` makes the next ``partial_fit``
    #: raise instead of going on with the old value (``fit`` starts anew with the new one)
    _structural_params = ("hidden_layer_sizes", "activation", "module", "prior_variance")
    #: the same for the target mixins and the structure mixins
    _target_structural_params: tuple = ()
    _structure_structural_params: tuple = ()

    # -- the engine parts (the internal interface wrappers compose) ----------------------------
    def _engine_parts(self) -> EngineParts:
        """The parts this fitted estimator's filter is made of (:class:`skfilter.filtering.EngineParts`).

        Meta-estimators (robust weighting, run-length mixtures) build on this: they take the base
        filter's adapter, likelihood, structure, dynamics and prior and run the engine
        (:func:`skfilter.filtering.filter_step`) with their own weighting or hypotheses axis; a
        weighting set with :meth:`_set_weighting` is part of the parts.
        """
        check_fitted(self, "filter_state_")
        return EngineParts(self._adapter, self._likelihood, self._structure, self._dynamics, self._reference,
                           getattr(self, "_weighting", None))

    def _set_weighting(self, weighting):
        """Install a weighting function (the engine's stage 4) on this estimator; for wrappers (a
        new one ends the one-row path's record, :meth:`_keep_lean`)."""
        if self.__dict__.get("_weighting") is not weighting:
            memo_for(self).pop("lean", None)
        self._weighting = weighting

    def _set_progress(self, verbose, desc):
        """Show the progress of this estimator's passes as a wrapper's: a bar named ``desc`` when
        ``verbose > 0`` (or this estimator's own ``verbose``); for wrappers that fit it. The setting
        in place is kept while it is the same (a wrapper sets it at every call: a new tuple would
        defeat the shortcuts keyed on this estimator's attribute objects, the lean path's included)."""
        current = self.__dict__.get("_progress")
        if current is None or type(current[0]) is not type(verbose) or current != (verbose, desc):
            memo_for(self).pop("lean", None)
            self._progress = (verbose, desc)

    # -- the fitted state (one value, swapped whole) -------------------------------------------
    @property
    def filter_state_(self) -> FilterState:
        """The filter's state (:class:`~skfilter.filtering.FilterState`): belief, noise state, rows
        seen. Held as set, or, after one-row calls of the compiled LoFi step, as the kernel's arrays
        (:class:`~skfilter.stepping.RowState`), made a ``FilterState`` when read."""
        try:
            state = self.__dict__["_filter_state"]
        except KeyError:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute 'filter_state_'") from None
        return state if type(state) is FilterState else state.state()

    @filter_state_.setter
    def filter_state_(self, state):
        self.__dict__["_filter_state"] = state

    @filter_state_.deleter
    def filter_state_(self):
        if self.__dict__.pop("_filter_state", None) is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute 'filter_state_'")

    def _has_state(self) -> bool:
        """Whether a filter state is held (``hasattr(self, 'filter_state_')`` without making one)."""
        return "_filter_state" in self.__dict__

    def __setstate__(self, state):
        if "filter_state_" in state:  # a pickle of an earlier version held it under its public name
            state = dict(state)
            state["_filter_state"] = state.pop("filter_state_")
        super().__setstate__(state)

    @property
    def posterior_(self) -> Posterior:
        """The belief over the flat parameters, as a read-only :class:`~skfilter.posteriors.Posterior`
        view (``posterior_.belief`` is the value itself)."""
        check_is_fitted(self)
        return Posterior(self._structure, self.filter_state_.belief)

    @property
    def n_samples_seen_(self) -> int:
        """Rows conditioned on so far (every pass counts)."""
        check_is_fitted(self)
        return self.__dict__["_filter_state"].n_seen  # (a RowState's too: nothing made)

    @property
    def _noise_state(self):
        return self.filter_state_.noise

    # -- data -----------------------------------------------------------------------------------
    def _tensor(self, a, dtype=None):
        """A new tensor of the estimator's dtype (or ``dtype``) and device holding a copy of ``a``."""
        dtype = dtype or self._dtype
        if self._device.type == "cpu":  # a NumPy copy wrapped: the same values, a few µs less
            return torch.from_numpy(np.array(a, dtype=_NUMPY_DTYPES[dtype], order="C", copy=True))
        return torch.tensor(np.ascontiguousarray(a), dtype=dtype, device=self._device)

    def _validate_X(self, X, reset):
        """``X`` checked as scikit-learn does, and (fitted estimators) against the magnitude bound of
        the estimator's dtype (:meth:`_check_data_magnitude`)."""
        if not reset and "_dtype" in self.__dict__:
            fast = self._fast_rows(X, self._dtype)
            if fast is not None:
                return fast
        X = validate_data(self, X, reset=reset, accept_sparse=False, dtype=[np.float64, np.float32],
                          ensure_all_finite=True)
        if not reset and hasattr(self, "_dtype"):
            self._check_data_magnitude(self._dtype, X=X)
        return X

    def _fast_rows(self, X, dtype):
        """What ``validate_data(self, X, reset=False, …)`` returns — and the magnitude check in
        ``dtype`` passes — for the rows a streaming loop passes to a fitted estimator, checked here
        in a few microseconds (scikit-learn's checks cost 20–60 µs a call); ``None`` for anything
        else, which then takes scikit-learn's path (its conversions, warnings and errors).

        Accepted: a 2-d float64/float32 ndarray (returned as is, as ``check_array`` does), or a list
        or tuple of rows of real numbers (converted to float64, as ``check_array`` converts a list),
        with the fitted number of features, at least one row, and every entry finite and within
        :func:`skfilter._utils.magnitude_bound` of ``dtype``; the estimator was fitted without
        feature names (a fitted DataFrame's names are checked, and warned about, by scikit-learn)."""
        t = type(X)
        if t is np.ndarray:
            if X.dtype != np.float64 and X.dtype != np.float32:
                return None
        elif t is list or t is tuple:
            try:
                X = np.asarray(X)
            except (ValueError, TypeError):  # ragged rows and the like: scikit-learn's error
                return None
            if X.dtype.kind not in "fiu":
                return None
            if X.dtype != np.float64:  # (a list of floats is one already: no second copy)
                X = X.astype(np.float64)
        else:
            return None
        if X.ndim != 2 or X.shape[0] == 0 or "feature_names_in_" in self.__dict__ \
                or X.shape[1] != self.__dict__.get("n_features_in_", -1):
            return None
        # as a Python float: a float32 maximum would be compared in float32, where the float64
        # bound is infinite (and an infinite entry would pass); False for NaN
        if not float(np.abs(X).max()) <= magnitude_bound(dtype):
            return None
        return X

    def _validate_weights(self, sample_weight, X):
        if sample_weight is None:
            return None
        w = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        if not np.all(np.isfinite(w)):
            raise ValueError("sample_weight must be finite.")
        return w

    def _check_data_magnitude(self, dtype, **arrays):
        """Reject data the filter's arithmetic cannot hold in ``dtype`` (validation in the
        estimator's own dtype, before anything is learned): an entry above
        :func:`skfilter._utils.magnitude_bound` (``finfo(dtype).max ** (1/4)``) makes ``h``, ``J`` or
        ``J Σ Jᵀ`` overflow, and a float64 value beyond the float32 range would become infinite in a
        float32 estimator. ``arrays``: ``name=array``."""
        bound = magnitude_bound(dtype)
        for key, a in arrays.items():
            if a is not None:
                check_data_magnitude(key, a, bound, dtype)

    def _check_model_outputs(self, X):
        """Reject rows at which the network's output at the current mean is not finite or so large
        that its square overflows (one forward pass of the rows, before any is learned; its cost is
        a small fraction of a step's forward-and-Jacobian per row). The outputs a prediction of the
        same rows from the same state computed are used instead when remembered
        (:meth:`_remember_outputs`: a streaming loop predicts a row, then learns it)."""
        limit = output_limit(self._dtype)
        biggest = self._remembered_outputs(X)
        if biggest is not None:
            if not biggest <= limit:
                self._raise_output_too_large(biggest, limit)
            return
        Xt, mean = self._tensor(X), self.filter_state_.belief.mean
        with _no_grad_for(self._adapter):
            for a in range(0, Xt.shape[0], 1 << 16):
                rows = Xt[a:a + (1 << 16)]
                # the compiled forward pass when it serves (a tenth of the adapter's cost for one row)
                f = stepping.forward_compiled(self._adapter, mean, rows) if mean.dim() == 1 else None
                biggest = _largest(self._adapter.forward(mean, rows) if f is None else f)
                if not biggest <= limit:  # NaN too
                    self._raise_output_too_large(biggest, limit)

    def _raise_output_too_large(self, biggest, limit):
        raise ValueError(
            f"X has rows at which the network's output at the current parameters is {biggest:.3g} "
            f"(not finite, or above {limit:.3g}, whose square overflows in {self._dtype}): the "
            "inputs are too large for the network; nothing was learned. Standardise X (e.g. "
            "sklearn.preprocessing.StandardScaler).")

    def _remember_outputs(self, X, f, by_forward=False):
        """Remember, for the next ``partial_fit``'s :meth:`_check_model_outputs`, the largest
        ``|h(μ, x)|`` of the rows ``X`` (validated, NumPy) that a prediction computed as ``f`` at the
        current mean(s) ``μ`` of the current state (small ``X`` only; a copy, so that a caller
        reusing its buffer cannot make it stale). Only outputs computed as the check computes them:
        by the adapter's ``forward`` (``by_forward``), or by the fused MLP adapter, whose
        ``forward_jacobian`` runs the same forward pass. Returns that largest ``|h|`` (None if not
        remembered)."""
        if X.size <= _REMEMBERED_OUTPUT_ENTRIES and (by_forward or type(self._adapter) is MLPAdapter):
            biggest = _largest(f)
            memo_for(self)["outputs"] = (self.filter_state_, X.copy(), biggest)
            return biggest
        return None

    def _remembered_outputs(self, X):
        """The largest ``|h(μ, x)|`` remembered by :meth:`_remember_outputs` if it was for the
        current state and for rows equal to ``X``; ``None`` otherwise. Forgets it either way."""
        known = memo_for(self).pop("outputs", None)
        if known is None:
            return None
        state, rows, biggest = known
        if state is self.filter_state_ and rows.shape == X.shape and bool((rows == X).all()):
            return biggest
        return None

    def _check_finite_prediction(self, *values):
        """Raise ``ValueError`` instead of returning a non-finite prediction."""
        check_finite_output(values, "The prediction of", self)

    # -- building the filter ------------------------------------------------------------------
    def _initialize(self, X, cfg, n_outputs, Y=None, weights=None, rng=None):
        """Build module, adapter, likelihood, prior belief and noise state for a new stream from its
        first rows ``X`` (targets ``Y``, weights ``weights``), drawing the network and the seeds
        from ``rng`` (default: ``random_state``'s generator)."""
        rng = check_random_state(self.random_state) if rng is None else rng
        seed = int(rng.randint(0, 2**31 - 1))
        module = build_module(
            self.module, self._prefixed("module__"), n_inputs=X.shape[1], n_outputs=n_outputs,
            hidden_layer_sizes=cfg["hidden_layer_sizes"], activation=self.activation, seed=seed,
        )
        if self.module is None and cfg["prior_variance"] == "auto":  # skfilter.priors: standardised inputs
            module = standardize_mlp(module, *input_standardization(X, weights))
        adapter = make_adapter(module, cfg["device"], cfg["dtype"], X.shape[1])
        self._check_module_outputs(adapter.n_outputs)
        self._device, self._dtype = cfg["device"], cfg["dtype"]
        self._shuffle_rng = np.random.RandomState(int(rng.randint(0, 2**31 - 1)))
        self._mc_seed = int(rng.randint(0, 2**31 - 1))
        self._likelihood = self._make_likelihood(adapter.n_outputs, cfg)
        adapter = self._reparametrize(adapter, X, Y, weights, cfg)
        self._adapter = adapter
        self._structure = self._make_structure(cfg)
        mean0, var0 = self._prior(adapter, X, Y, cfg, weights)
        self._reference = Reference(mean0, var0)
        prior = self._structure.prior(mean0, var0)
        noise = self._initial_noise(adapter.n_outputs, cfg, Y, weights)
        self.n_params_ = adapter.n_params
        self._structural_values = {k: getattr(self, k) for k in self._structural_param_names()}
        self.filter_state_ = FilterState(prior, noise, 0)

    def _reparametrize(self, adapter, X, Y, weights, cfg):
        """The model the filter learns, from the network's adapter: the adapter itself (subclasses that
        learn other coordinates, e.g. a subspace of the weights, return their own adapter)."""
        return adapter

    def _structural_param_names(self):
        return (self._structural_params + self._target_structural_params + self._structure_structural_params
                + tuple(k for k in vars(self) if k.startswith("module__")))

    def _stream(self, X, Y, w, cfg, n_epochs, record=False, loss=False):
        """Filter ``(X, Y, w)`` ``n_epochs`` times (shuffled after the first pass if ``shuffle``).

        With ``record``, returns the one-step-ahead predictive of every row made before its update
        (see :meth:`_one_step_recorder`), as a tensor with one row per input row (of the last
        pass). Every completed pass adds 1 to ``n_iter_``; with ``loss`` (or ``record``), it also
        appends the pass's mean prequential loss to ``loss_curve_`` (:meth:`_prequential_loss`).
        """
        parts = self._engine_parts()
        if record:
            record = self._one_step_recorder(cfg)
        elif loss:  # the predictive the compiled kernels compute: never the Monte-Carlo one
            record = self._one_step_recorder(cfg, self._loss_predictive())
        else:
            record = None
        Xt, Yt = self._tensor(X), self._tensor(self._target_matrix(Y))
        wt = None if w is None else self._tensor(w)
        n = Xt.shape[0]
        wrapper_verbose, desc = self.__dict__.get("_progress", (0, type(self).__name__))
        bar = progress_bar(self.verbose or wrapper_verbose, n_epochs * n, desc)
        out = None
        try:
            for epoch in range(n_epochs):
                if epoch > 0 and self.shuffle:
                    perm = torch.as_tensor(self._shuffle_rng.permutation(n), device=Xt.device)
                    Xe, Ye, we = Xt[perm], Yt[perm], None if wt is None else wt[perm]
                else:
                    Xe, Ye, we = Xt, Yt, wt
                progress = pass_progress(bar, epoch * n)
                try:
                    state, out = run_filter(parts, self.filter_state_, Xe, Ye, we, cfg["batch_size"], record,
                                            progress)
                except BaseException as exc:  # a failed step or an interrupt: keep the rows learned
                    if hasattr(exc, "last_good_state"):
                        self.filter_state_ = exc.last_good_state
                    raise
                self.filter_state_ = state  # one assignment: the new state is installed whole
                self.n_iter_ = self.__dict__.get("n_iter_", 0) + 1
                curve = self.__dict__.setdefault("loss_curve_", [])
                curve.append(float("nan") if record is None else self._prequential_loss(out, Ye))
        finally:
            if bar is not None:
                bar.close()
        return out

    # -- fitting --------------------------------------------------------------------------------
    def _fit(self, X, y, sample_weight, *, reset, classes=None, n_epochs=None, record=False, loss=None):
        """Validate, (re)build on a new stream, and filter. ``loss``: score every pass in
        ``loss_curve_`` (default: only when ``record`` — the predictions are then computed anyway;
        ``fit`` scores multi-pass fits only, ``partial_fit`` never; an unscored pass gets NaN).
        Returns the one-step-ahead record of the last pass with ``record``."""
        new_stream = reset or not self._has_state()
        # the stream's first rows are still arriving: this call learns them all again, from a prior
        # set on all rows so far (skfilter.stream_start); if it fails the estimator is as it was
        before = dict(self.__dict__) if not new_stream and self._prior_pending else None
        X, Y, w, cfg = self._begin(X, y, sample_weight, reset=reset, classes=classes)
        passes = cfg["n_epochs"] if n_epochs is None else n_epochs
        loss = record if loss is None else loss
        restart = self.__dict__.pop("_restart", None)
        if self._prior_pending:  # passes of this call, for a later restart
            self._stream_start = self._stream_start.with_passes(passes)
        if restart is None:
            if new_stream or "n_iter_" not in self.__dict__:
                self.n_iter_, self.loss_curve_ = 0, []
            out = self._stream(X, Y, w, cfg, passes, record, loss)
            self._keep_lean(cfg)
            return out
        try:
            self.n_iter_, self.loss_curve_ = 0, []
            for call in restart.replayed():  # every earlier call again (a multi-pass fit scored, as fit does)
                self._stream(call.X, call.Y, call.sample_weight, cfg, call.n_passes, False, call.n_passes > 1)
            return self._stream(X, Y, w, cfg, passes, record, loss)
        except BaseException:
            restore_attributes(self, before)
            raise

    def _begin(self, X, y, sample_weight, *, reset, classes=None):
        """Everything ``fit``/``partial_fit`` do before learning: validate the parameters and the
        data, build the filter on the first call of a stream (``reset`` or unfitted), move it to
        the current device/dtype. Returns ``(X, Y, w, cfg)``: the rows, the encoded targets, the
        sample weights and the resolved settings, ready for the engine. Leaves the estimator as it
        was on any error. Wrappers that run their own loop (:mod:`skfilter.bocd`) start here."""
        memo = memo_for(self)
        memo.pop("lean", None)  # this call may build anew what the one-row path's record holds
        with unchanged_on_error(self):
            cfg = self._check_params()
            first = reset or not self._has_state()
            if not first:
                # passed before for these parameter objects (the same cfg: see _check_params)
                known = memo.get("structural")
                if known is None or known[0] is not cfg or known[1] is not self._structural_values:
                    check_structural_params_unchanged(self, self._structural_values)
                    memo["structural"] = (cfg, self._structural_values)
            fast = None if first else self._validate_fast(X, y, cfg["dtype"])
            if fast is None:
                X, y = validate_data(self, X, y, reset=first, accept_sparse=False,
                                     dtype=[np.float64, np.float32], ensure_all_finite=True,
                                     **self._y_validation_kwargs())
            else:
                X, y = fast
            if X.shape[0] == 0:
                raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
            w = self._validate_weights(sample_weight, X)
            Y = self._encode_targets(y, first=first, classes=classes)
            # X passed the magnitude bound on the fast path
            self._check_data_magnitude(cfg["dtype"], X=None if fast is not None else X, y=Y, sample_weight=w)
            start = None if first else self.__dict__.get("_stream_start")
            if first:
                self._start_stream(X, Y, w, cfg)
            elif start is not None:  # the prior again, from every row so far (skfilter.stream_start)
                start = start.add(X.copy(), Y.copy(), None if w is None else w.copy())
                self._initialize(*start.prior_rows()[:1], cfg, self._n_model_outputs(), *start.prior_rows()[1:],
                                 rng=generator_for(self.random_state, start))
                self._stream_start = None if start.complete else start
                self._restart = start
            elif cfg["device"] != self._device or cfg["dtype"] != self._dtype:
                self._move(cfg["device"], cfg["dtype"])
            if first:  # the module as built, before the adapter put it in eval mode
                from .models import check_no_train_mode_layers
                check_no_train_mode_layers(self._adapter.train_mode_layers)
            self._check_model_outputs(X)
        # the dynamics of these settings and this prior (built again only when either changed)
        known = memo.get("dynamics")
        if known is not None and known[0] is cfg and known[1] is self._reference:
            self._dynamics = known[2]
        else:
            self._dynamics = self._make_dynamics(cfg)
            memo["dynamics"] = (cfg, self._reference, self._dynamics)
        return X, Y, w, cfg

    # -- the lean one-row path ---------------------------------------------------------------------
    def _keep_lean(self, cfg):
        """Remember, after a call of the full path, what :meth:`_lean_fit` needs and what stays
        constant between one-row calls (:class:`_LeanPath`: the kernel plan, the engine parts, the
        dtype, the bounds), keyed on the objects it was derived from; forget it when this estimator
        does not qualify (a stream whose first rows are pending, a progress bar, ``batch_size > 1``,
        another device, no compiled kernel for its filter)."""
        memo = memo_for(self)
        memo.pop("lean", None)
        d = self.__dict__
        structural = memo.get("structural")
        dynamics = memo.get("dynamics")
        progress = d.get("_progress")
        if self._prior_pending or "_restart" in d or structural is None or structural[0] is not cfg \
                or structural[1] is not d.get("_structural_values") or dynamics is None or dynamics[0] is not cfg \
                or dynamics[2] is not d.get("_dynamics") or cfg["batch_size"] != 1 or self.verbose \
                or (progress is not None and progress[0]) or cfg["device"] != self._device \
                or cfg["dtype"] != self._dtype or self._device.type != "cpu" or "feature_names_in_" in d \
                or "n_iter_" not in d or "loss_curve_" not in d or not kernels.enabled():
            return
        state = self.filter_state_
        if state.log_weights is not None or state.belief.mean.dim() != 1:
            return
        parts = self._engine_parts()
        plan = stepping.plan_for(parts, state, None)
        if plan is None:
            return
        memo["lean"] = _LeanPath(self, cfg, parts, plan)

    def _lean_fit(self, X, y, classes) -> bool:
        """``partial_fit`` of one plain row on the compiled kernel with minimal Python, when nothing
        the full path checks or builds has changed since a call of the full path (:meth:`_keep_lean`):
        the same settings (:meth:`_check_params`), the same engine parts, a stream whose first rows
        are complete, the kernels on, and a row the full path's fast checks would pass as is (a
        C-contiguous float64/float32 ndarray, or a list, of the fitted width, finite and within the
        magnitude bound; targets the mixin's :meth:`_lean_targets` reads). Returns False — nothing
        done — for anything else, which then takes the full path (its conversions and its errors).
        Same state as the full path, bit for bit; a failed step keeps the last good belief; bad
        outputs raise the full path's error with nothing learned."""
        memo = memo_for(self)
        lean = memo.get("lean")
        if lean is None:
            return False
        d = self.__dict__
        # the settings validated for the current parameters (_check_params' memo) are those of the
        # last full call; what that call built is in place (a full call, a wrapper's new weighting
        # or progress setting, a restored instance dictionary forget the record)
        if memo.get("params") is not lean.cfg or not kernels.enabled():
            return False
        state = d.get("_filter_state")  # a FilterState, or the RowState the last one-row call left
        if state is None or state.log_weights is not None:
            return False
        rows = lean.kernel_row(self, X)
        if rows is None:
            return False
        Y = self._lean_targets(y, classes, lean.bound)
        if Y is None:
            return False
        plan = lean.plan
        if not plan.checks_outputs:
            # the full path's check of the outputs and its error (nothing changed yet): the outputs a
            # prediction of the same row computed from this state (bytes equal), else a forward pass
            X = rows[0]
            known = memo_for(self).pop("outputs", None)
            if known is not None and known[0] is state and known[1].shape == X.shape \
                    and known[1].dtype == X.dtype and known[1].tobytes() == X.tobytes():
                if not known[2] <= lean.limit:
                    self._raise_output_too_large(known[2], lean.limit)
            else:
                self._check_model_outputs(X)
        # else the kernel checks them (the step's outputs are those at the mean): a row beyond the
        # limit is handed back unlearned, and the full path raises its error
        flags = Y.flags  # the kernel reads a writeable C-contiguous array of its dtype
        if Y.dtype is not lean.np_dtype or not (flags.c_contiguous and flags.writeable and flags.aligned):
            Y = np.array(Y, dtype=lean.np_dtype, order="C")
        try:
            if lean.row_arguments is not None:  # a static LoFi: its one-row step, constants resolved
                new = plan.step_row(state, rows[1], Y, lean.row_arguments)
            else:
                new = plan.run_row(lean.parts, state, rows[1], Y, lean.limit)
        except BaseException as exc:  # a failed step or an interrupt: the last good state (no row learned)
            if hasattr(exc, "last_good_state"):
                d["_filter_state"] = exc.last_good_state
            raise
        if new is None:  # handed back by the kernel: the full path does the step (torch engine)
            return False
        d["_filter_state"] = new
        d["n_iter_"] += 1
        d["loss_curve_"].append(_NAN)
        return True

    def _lean_targets(self, y, classes, bound):
        """The ``(1, C)`` float64 target matrix of one row's ``y`` as the full path makes it, when
        it needs none of the full path's conversions and passes its checks; None otherwise (mixins)."""
        return None

    def _start_stream(self, X, Y, w, cfg):
        """Build the filter for a new stream from its first rows and keep them while they are fewer
        than the rows that fix a data-scaled prior (:mod:`skfilter.stream_start`)."""
        limit = self._prior_rows_limit(cfg)
        rng = check_random_state(self.random_state)
        keep = limit is not None and X.shape[0] < limit
        state = rng.get_state() if keep else None
        Xp, Yp, wp = (X, Y, w) if limit is None else first_rows(X, Y, w, limit)
        self._initialize(Xp, cfg, self._n_model_outputs(), Yp, wp, rng=rng)
        self._stream_start = None if not keep else StreamStart.begin(
            X.copy(), Y.copy(), None if w is None else w.copy(), limit=limit, rng_state=state)

    def _prequential_fit_record(self, X, y, sample_weight=None, classes=None):
        """Fit from the prior on ``(X, y)`` in one pass and return the one-step-ahead record of
        every row (``prequential_fit_predict``), each predicted from the rows before it only
        (:func:`~skfilter.stream_start.prequential_fit_record`). Sets ``n_iter_ = 1`` and the
        pass's mean prequential loss (rows predicted from data) in ``loss_curve_``."""
        rec = prequential_fit_record(self, X, y, sample_weight, classes)
        if self._start_rows() is not None:
            self.n_iter_, self.loss_curve_ = 1, [self._record_loss(rec, y)]
        return rec

    # the interface of skfilter.stream_start.prequential_fit_record (wrappers have it too)
    def _learn_rows(self, X, y, sample_weight=None, *, first, classes=None, record=False):
        """One pass of ``partial_fit`` over ``(X, y)`` (``first``: from the prior); with ``record``
        the one-step-ahead record of the rows, made inside the filter loop."""
        return self._fit(X, y, sample_weight, reset=first, classes=classes, n_epochs=1, record=record, loss=record)

    def _start_rows(self):
        """The rows that fix this estimator's data-scaled start (None: its prior uses no data)."""
        return self._prior_rows_limit(self._check_params())

    def _row_summary(self, X):
        """The predictive summary of the rows ``X`` from the current state (the record's format)."""
        return self._predictive_summary(self._tensor(self._validate_X(X, reset=False)))

    def _record_loss(self, summaries, y) -> float:
        """The mean prequential loss of the one-step-ahead ``summaries`` of a pass against its targets
        ``y``, over the rows that have a prediction (a regressor's row 0 of a data-scaled prior has
        none: NaN); NaN where the targets cannot be read."""
        try:
            Y = self._tensor(self._target_matrix(self._encode_targets(np.asarray(y), first=False)))
        except (TypeError, ValueError, IndexError):
            return float("nan")
        rows = torch.isfinite(summaries).all(-1)
        if not bool(rows.any()):
            return float("nan")
        return self._prequential_loss(summaries[rows], Y[rows])

    def _stream_classes(self, y, classes):
        """The classes a prequential pass starts with (classifiers: ``classes`` or those in ``y``)."""
        return classes

    def _uninformed_summary(self, n):
        """The predictive summary of ``n`` rows predicted before any data (target mixins)."""
        raise NotImplementedError

    def _validate_fast(self, X, y, dtype):
        """``(X, y)`` when a fitted estimator gets plain rows that scikit-learn's ``validate_data``
        would return unchanged (or, for lists, convert as here) and that pass the magnitude bound
        of ``dtype`` — :meth:`_fast_rows` ``X`` and matching numeric targets (an ndarray, or a list
        or tuple that ``numpy.asarray`` makes one) — checked here in a few microseconds; ``None``
        for anything else (scikit-learn's path then validates, converts, or raises its own error).
        A row-by-row streaming loop calls ``partial_fit`` once per row: scikit-learn's checks cost
        ~0.2–0.5 ms a call."""
        y = targets_array(y)
        if y is None:
            return None
        if y.ndim == 0 or not self._fast_targets_ok(y):
            return None
        X = self._fast_rows(X, dtype)
        if X is None or y.shape[0] != X.shape[0]:
            return None
        return X, y

    def _fast_targets_ok(self, y) -> bool:
        """Whether ``y`` needs none of scikit-learn's target validation (target mixins)."""
        return False

    @property
    def module_(self):
        """The network with the current posterior mean as its weights (for a run-length mixture,
        the most probable hypothesis'); the weights are written on access."""
        check_is_fitted(self)
        state = self.filter_state_
        mean = state.belief.mean
        if state.log_weights is not None:
            mean = mean[int(torch.argmax(state.log_weights))]
        return self._adapter.write_to_module(mean)

    def _move(self, device, dtype):
        """Move a fitted estimator to another device/dtype (after ``set_params(device=...)``)."""
        moved = getattr(self._adapter, "moved", None)  # a reparametrised model moves itself
        self._adapter = (moved(device, dtype, self.n_features_in_) if moved is not None
                         else make_adapter(self._adapter.module, device, dtype, self.n_features_in_))
        move = lambda v: v.to(device=device, dtype=dtype)  # noqa: E731
        belief, noise, n_seen, log_weights = self.filter_state_
        noise = None if noise is None else {k: move(v) for k, v in noise.items()}
        log_weights = None if log_weights is None else move(log_weights)
        self._reference = Reference(move(self._reference.mean), self._reference.variance)
        self.filter_state_ = FilterState(map_belief(move, belief), noise, n_seen, log_weights)
        self._device, self._dtype = device, dtype

    def fit(self, X, y, sample_weight=None):
        """Learn from the stream ``(X, y)`` starting from the prior, in row order.

        Makes ``n_epochs`` passes (the first in row order; later ones shuffled if ``shuffle``).
        With ``warm_start=True`` a fitted estimator continues from its current belief (as
        ``n_epochs`` more passes of ``partial_fit`` would) instead of starting from the prior.
        Sets ``n_iter_`` (passes made on this stream) and ``loss_curve_`` (the mean prequential
        loss of every pass when ``n_epochs > 1``; NaN for a single pass).

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
        # recording the one-step-ahead predictive costs 20–40 % of a pass on small networks: only a
        # multi-pass fit, whose loss curve is the point, pays for it (a single pass gets NaN)
        warm = self._check_params()["warm_start"] and self._has_state()
        return self._fit_passes(X, y, sample_weight, reset=not warm)

    def _fit_passes(self, X, y, sample_weight=None, *, reset):
        """``fit``'s ``n_epochs`` passes, from the prior (``reset``) or from the current belief;
        for wrappers that fit this estimator (``warm_start`` is theirs then)."""
        self._fit(X, y, sample_weight, reset=reset, loss=_n_epochs_of(self) > 1)
        return self

    # -- predictive machinery -----------------------------------------------------------------
    def _predict_tensor(self, X):
        return self._predict_rows(X)[1]

    def _predict_rows(self, X):
        """The validated rows ``X`` (NumPy) and their tensor, for a prediction."""
        lean = self._lean_rows(X)
        if lean is not None:
            return lean[1], torch.from_numpy(lean[2])
        check_fitted(self, "filter_state_")
        X = self._validate_X(X, reset=False)  # includes the magnitude bound of the estimator's dtype
        return X, self._tensor(X)

    def _lean_rows(self, X):
        """``(lean, X, rows)`` for a prediction's one plain row (a float64/float32 ndarray of the
        fitted width, finite, within the magnitude bound, or a list or tuple of one row that
        :meth:`_fast_rows` accepts) by an estimator on the lean path (:meth:`_keep_lean`; ``lean``
        its :class:`_LeanPath`): ``X`` as :meth:`_validate_X` returns it and ``rows`` what
        :meth:`_tensor` makes of it, as an array, checked with a few operations — ``X`` itself when
        it has the estimator's dtype (predictions only read it); None for anything else (the full
        path's checks and errors)."""
        lean = memo_for(self).get("lean")
        if lean is None:
            return None
        rows = lean.kernel_row(self, X)
        return None if rows is None else (lean, *rows)

    def _lean_outputs(self, X):
        """``(state, f, biggest)``: the default MLP's outputs ``f (1, C)`` (NumPy) at the current
        mean for a prediction's one plain row ``X`` on the lean path, computed as the compiled
        forward pass of the full path computes them (bit for bit), remembered for the next
        ``partial_fit`` (:meth:`_remember_outputs`; ``biggest`` the largest ``|f|``); None when the
        lean path does not serve (:meth:`_lean_rows`, the kernels off, a mixture state)."""
        memo = memo_for(self)
        lean = memo.get("lean")
        if lean is None or not kernels.enabled():
            return None
        state = self.__dict__["_filter_state"]
        if state.log_weights is not None:
            return None
        got = lean.kernel_row(self, X)
        if got is None:
            return None
        X, rows = got
        plan = lean.plan
        f = plan.forward_row(state.mean if type(state) is RowState else state.belief.mean.numpy(), rows)
        biggest = abs(f.item()) if f.size == 1 else float(np.abs(f).max())
        if not plan.checks_outputs:  # the lean partial_fit of this row checks them with these
            memo["outputs"] = (state, X.copy(), biggest)
        return state, f, biggest

    def _chunks(self, n, n_hypotheses=1):
        per_row = max(1, n_hypotheses * self._adapter.n_outputs * self.n_params_)
        size = max(1, _PREDICT_CHUNK_ENTRIES // per_row)
        return [(i, min(i + size, n)) for i in range(0, n, size)]

    def _linearized(self, Xt, belief=None, centred=False):
        """Model output ``f (…, n, C)`` at the posterior mean and the diagonal of ``J Σ Jᵀ``,
        ``(…, n, C)`` (LoFi paper App. B.1; the current belief, or ``belief`` — with hypotheses
        axes, for each hypothesis — with no predict step). ``centred``: the diagonal of
        ``Π J Σ Jᵀ Π`` instead, ``Π = I − 11ᵀ/C`` (the outputs less their mean)."""
        belief = self.filter_state_.belief if belief is None else belief
        mean = belief.mean
        if mean.dim() <= 2:  # one belief, or one hypotheses axis, on the CPU: the compiled kernel when it serves
            out = stepping.linearized_compiled(self._adapter, self._structure, belief, Xt, centred=centred)
            if out is not None:
                return out

        def diagonal(J):
            return self._structure.quadratic_diagonal(belief, J - J.mean(-2, keepdim=True) if centred else J)

        n_hyp = 1 if mean.dim() == 1 else max(1, mean[..., 0].numel())
        with _no_grad_for(self._adapter):
            n = Xt.shape[0]
            if n <= max(1, _PREDICT_CHUNK_ENTRIES // max(1, n_hyp * self._adapter.n_outputs * self.n_params_)):
                f, J = self._adapter.forward_jacobian(mean, Xt)  # one chunk (as _chunks)
                return f, diagonal(J)
            fs, vs = [], []
            for a, b in self._chunks(n, n_hyp):
                f, J = self._adapter.forward_jacobian(mean, Xt[a:b])
                fs.append(f)
                vs.append(diagonal(J))
            return torch.cat(fs, dim=-2), torch.cat(vs, dim=-2)

    def _output_variance(self, quad):
        """The outputs' variances a predictive summary takes from their covariance ``quad
        (…, n, C, C)``: its diagonal (the classifiers: without the logits' common shift)."""
        return quad.diagonal(dim1=-2, dim2=-1)

    @torch.no_grad()
    def _plugin(self, Xt, belief=None):
        belief = self.filter_state_.belief if belief is None else belief
        if belief.mean.dim() == 1:  # the forward pass of the compiled linearised predictive, if it serves
            f = stepping.forward_compiled(self._adapter, belief.mean, Xt)
            if f is not None:
                return f
        return self._adapter.forward(belief.mean, Xt)

    def _parameter_samples(self, n_samples, gen):
        """``n_samples`` draws of ``θ`` from the current belief with the generator ``gen``,
        ``(S, P)``, and the index of the hypothesis each came from (``(S,)``; None for a single
        belief): a mixture state draws the hypothesis by its weight first."""
        state = self.filter_state_
        if state.log_weights is None:
            return self._structure.sample(state.belief, n_samples, gen), None
        probs = torch.softmax(state.log_weights, 0).to(torch.float64).cpu()
        seed = int(torch.randint(0, 2**62, (1,), generator=gen, device=gen.device).item())
        which = torch.multinomial(probs, n_samples, replacement=True, generator=torch.Generator().manual_seed(seed))
        thetas = torch.empty(n_samples, self.n_params_, dtype=self._dtype, device=self._device)
        for k in torch.unique(which).tolist():
            rows = (which == k).nonzero().flatten()
            thetas[rows.to(self._device)] = self._structure.sample(select_hypothesis(state.belief, k), len(rows), gen)
        return thetas, which

    @torch.no_grad()
    def _sampled_outputs(self, Xt, n_samples, seed, belief=None):
        """``h(θ_s, X)`` for ``θ_s ~ N(μ, Σ)``: shape ``(S, n, C)`` (same draws for every row); of
        the current belief, or of ``belief`` (no hypotheses axes)."""
        if belief is None:
            thetas = self._parameter_samples(n_samples, torch_generator(seed, self._device))[0]
        else:
            thetas = self._structure.sample(belief, n_samples, torch_generator(seed, self._device))
        return self._adapter.forward_batch(thetas, Xt)

    def _one_step_recorder(self, cfg, predictive=None):
        """A ``record`` callable for :func:`skfilter.filtering.filter_step` computing the estimator's
        predictive (its ``predictive`` parameter, or ``predictive``) of the rows about to be
        learned, from the predicted belief."""
        gen = torch_generator(self._mc_seed, self._device)
        structure = self._structure
        kind = self.predictive if predictive is None else predictive

        def record(X, f, quad, noise_state, predicted):
            if kind == "mc":
                thetas = structure.sample(predicted, self.n_mc_samples, gen)
                return self._summarize(self._adapter.forward_batch(thetas, X), None, noise_state, "mc")
            return self._summarize(f, self._output_variance(quad), noise_state, kind)

        # only the Monte-Carlo predictive samples the predicted belief; the others need f and J Σ⁻ Jᵀ,
        # which the compiled kernels (skfilter.kernels) compute for every row of a call
        record.needs_belief = kind == "mc"
        return record

    def _loss_predictive(self):
        """The predictive ``loss_curve_`` scores: the estimator's, except that ``'mc'`` (which
        would take the filter off the compiled kernels) is replaced by the linearised one."""
        return self._linearized_predictive if self.predictive == "mc" else self.predictive

    def _prequential_loss(self, summaries, Y) -> float:
        """The mean loss of the one-step-ahead predictive summaries ``(n, ·)`` of a pass against its
        targets ``Y`` (the likelihood's ``(n, C)`` matrix, in the pass's row order) (mixins)."""
        raise NotImplementedError

    def _predictive_summary(self, Xt, rows=None):
        """The estimator's predictive at ``Xt`` from the current belief (see :meth:`_summarize`);
        for a mixture state (``filter_state_.log_weights``), the mixture of the hypotheses'
        predictives (:meth:`_mix_summaries`). ``rows``: ``Xt`` as validated NumPy rows, whose
        model outputs are then remembered for the next ``partial_fit`` (:meth:`_remember_outputs`)."""
        state = self.filter_state_
        if state.log_weights is None:
            return self._summary_of(state.belief, state.noise, Xt, rows)
        weights = torch.softmax(state.log_weights, 0)
        if self.predictive == "mc":  # the structures sample one belief at a time
            per = torch.stack([self._summary_of(select_hypothesis(state.belief, k), _select_noise(state.noise, k),
                                                Xt) for k in range(weights.shape[0])])
        else:
            per = self._summary_of(state.belief, state.noise, Xt, rows)  # all hypotheses in one batch
        return self._mix_summaries(per, weights)

    def _summary_of(self, belief, noise, Xt, rows=None):
        """The predictive summary of ``belief`` with noise state ``noise`` (leading hypotheses axes
        allowed except for ``predictive='mc'``). With ``rows`` (``belief`` is the current one), the
        outputs at the mean are remembered (:meth:`_remember_outputs`)."""
        if self.predictive == "mc":
            return self._summarize(self._sampled_outputs(Xt, self.n_mc_samples, self._mc_seed, belief), None,
                                   noise, "mc")
        if self.predictive == "plugin":
            f = self._plugin(Xt, belief)
            if rows is not None:
                self._remember_outputs(rows, f, by_forward=True)
            return self._summarize(f, None, noise, "plugin")
        f, v = self._linearized(Xt, belief)
        if rows is not None:
            self._remember_outputs(rows, f)
        return self._summarize(f, v, noise, self.predictive)

    def _mix_summaries(self, summaries, weights):
        """The summary of the mixture ``Σ_k w_k p_k`` from the hypotheses' summaries ``(K, n, ·)``
        and weights ``(K,)`` (target mixins)."""
        raise NotImplementedError

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
