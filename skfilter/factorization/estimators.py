"""scikit-learn estimators of factorization models learned online by the decoupled EKF.

:class:`FactorizationRegressor` (Gaussian ratings, or Poisson counts) and
:class:`FactorizationClassifier` (clicks: Bernoulli; several classes: categorical logits) learn a
factorization model (:mod:`skfilter.factorization.signals`) from a stream of events, one row per
event, with the DEKF of Gómez-Uribe & Karrer (:mod:`skfilter.factorization.dekf`): each row updates
only the entities it involves, new entities are created on first sight from the prior, and with
``half_life`` every entity drifts towards a learned reference vector (an exact lazy predict over the
rows since it was last seen).

**The rows.** ``X`` holds entity ids in the ``entity_columns`` (integers, strings, pandas
categoricals: any hashable values) and numeric context in the other columns. ``entity_columns='auto'``
reads each column by its type (:mod:`skfilter.factorization.columns`): integer, string, object-of-
strings and categorical columns are ids; float and boolean columns are numeric context. So an integer
array ``[[user, item], …]`` is a matrix of ids, and a float array (what scikit-learn's checks mostly
feed) a model of numeric features only; a float column is never read as ids unless named, and one
of non-negative whole numbers, which looks like ids, warns
(:class:`~skfilter.exceptions.EntityColumnsWarning`). The numeric context is standardised by the first
call's rows (frozen, as the network filters do). An id never seen gets the prior of its column at
prediction time.

**Models** (``model``):

* ``'fm'`` — factorization machine of order ``order`` (Rendle; paper Eq. 4–5) over every id (a
  one-hot feature) and every numeric column, with a global bias; two id columns and no context give
  matrix factorization with user, item and global biases;
* ``'mf'`` — matrix factorization ``λ = w₀ + b_u + b_v + ξ_uᵀξ_v`` (two id columns; ``biases=False``
  drops the biases), plus a linear term in the context;
* ``'cp'`` — CP tensor factorization of the order of the number of id columns
  ``λ = w₀ + Σ_i b_i + Σ_l Π_i ξ_{i,l}``, plus a linear term in the context;
* ``'glm'`` — a generalised linear model: one weight per id and per numeric column.

**Speed.** Where the compiled DEKF serves the model (:func:`skfilter.kernels.factorization.serves`),
``fit``/``partial_fit`` learn a few µs per event, ``predict`` runs in the kernel too, and
:meth:`~FactorizationRegressor.prequential_fit_predict` (what
:func:`skfilter.model_selection.prequential_predict` calls) records each row's one-step-ahead
prediction inside the kernel's loop. One event per call (``predict`` then ``partial_fit`` of one row,
the online-serving pattern) takes a fast path: a one-row NumPy array or DataFrame of a kind (width,
dtype, feature names, columns' dtypes) that a full validation accepted before goes straight to the
kernel, ids looked up in the entity tables; anything else, and every error, takes the full
validation (same results bit for bit, same errors, nothing learned on an error).
"""

from __future__ import annotations

import math
import numbers
import os
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

from .._utils import memo_for, pass_progress, progress_bar, resolve_device, resolve_dtype
from ..exceptions import EntityColumnsWarning, FilterStepError
from .. import kernels as _kernels
from ..kernels.factorization import (FirstAppearances, kernel_plan, predict_events_compiled, record_width,
                                     run_events_compiled, serves)
from .._validation import PrefixedParamsMixin, ValidatedParamsMixin, check_parameter_constraints
from .._validation import params_version, restore_attributes
from ..likelihoods import (AssumedDensityCategorical, Bernoulli, Categorical, Gaussian, Poisson, probit_probabilities,
                           shift_free_logit_variance)
from ..priors import input_standardization, target_scale
from ..stream_start import DEFAULT_PRIOR_ROWS, StreamStart, copy_rows, generator_for
from .columns import ambiguity_message, entity_column_roles
from .dekf import as_numpy_ids
from .entities import EntityPrior
from .model import FactorizationFilter, Slot
from .signals import CPFactorization, FactorizationMachine, LinearSignal, MatrixFactorization

__all__ = ["FactorizationRegressor", "FactorizationClassifier"]

MODELS = ("fm", "mf", "cp", "glm")

#: ``context_blocks='auto'`` keeps the numeric context in one block up to this many parameters
#: (its covariance costs the square per event), one block per column above
_JOINT_CONTEXT_SIZE = 512

#: events per call of the compiled DEKF (about 0.1 s on MF: an interrupt waits at most that long)
_KERNEL_CHUNK = 1 << 16
#: events per call with a progress bar (``verbose > 0``)
_PROGRESS_CHUNK = 1 << 12

#: the online noise estimate of ``obs_variance='auto'`` (as the network regressors')
_AUTO_NOISE = {"eps_min": 0.02, "residual_bound": 4.0}


_ENV_KEY = "SKFILTER_COMPILED"
_ENV_DATA = getattr(os.environ, "_data", None)  # CPython's mapping behind os.environ
_ENV_RAW_KEY = os.environ.encodekey(_ENV_KEY) if hasattr(os.environ, "encodekey") else None
_env_seen = [object(), False]  # the raw value of the variable last seen, and enabled() then


def _kernels_on() -> bool:
    """:func:`skfilter.kernels.enabled`, without reading the environment when it has not changed (its
    thread's switch, :func:`skfilter.kernels.compiled_kernels`, read each time)."""
    state = getattr(_kernels, "_state", None)
    if state is None or _ENV_DATA is None or _ENV_RAW_KEY is None:
        return _kernels.enabled()
    flag = getattr(state, "enabled", None)
    if flag is not None:
        return bool(_kernels.AVAILABLE and flag)
    raw = _ENV_DATA.get(_ENV_RAW_KEY)
    if raw is not _env_seen[0]:
        _env_seen[:] = [raw, _kernels.enabled()]
    return _env_seen[1]


def _n_rows(X):
    from sklearn.utils.validation import _num_samples

    return _num_samples(X)


def _take(a, start, stop):
    """Rows ``start:stop`` of an array, list or DataFrame (None stays None)."""
    if a is None:
        return None
    if hasattr(a, "iloc"):
        return a.iloc[start:stop]
    if isinstance(a, np.ndarray):
        return a[start:stop]
    return np.asarray(a, dtype=object if not hasattr(a, "__array__") else None)[start:stop] \
        if not isinstance(a, list) else a[start:stop]


class _OneRow:
    """What full validations of one-row calls established, so that the next ones skip them (the fast
    path of :meth:`_FactorizationBase._fast_row`): the fitted filter and its kernel plan, the array
    dtypes and the DataFrame columns (names and dtypes) that passed, the column roles, the context's
    standardisation, the parameters the last ``partial_fit`` validated, and buffers for the row."""

    def __init__(self, est):
        import pandas as pd

        f = est.filter_
        self.filt = f
        self.plan = kernel_plan(f)
        self.width = int(est.n_features_in_)
        self.shape = (1, self.width)
        self.np_dtype = np.float32 if f.dtype == torch.float32 else np.float64
        self.y_ndim = getattr(est, "_y_ndim", 1)
        self.names = getattr(est, "feature_names_in_", None)
        self.dtypes = set()  # of arrays
        self.frame = pd.DataFrame
        self.series = pd.Series
        self.col_data = None  # the column labels' array of a DataFrame that passed
        self.categories = {}
        self.ent = tuple(est.entity_columns_)
        self.ctx = tuple(j for j in range(self.width) if j not in self.ent)
        n_ctx = est._n_context
        off = [float(v) for v in est._context_offset] if n_ctx else []
        scale = [float(v) for v in est._context_scale] if n_ctx else []
        self.ctx_cols = tuple(zip(self.ctx, off, scale))
        self.f32 = f.dtype == torch.float32
        self.params = None  # the parameters' version token (_validation.params_version) after a validation
        self.last = (None, None)  # the array last read and its row: keys and values still hold it
        self.classes = None
        if hasattr(est, "classes_"):
            try:
                self.classes = {c: i for i, c in enumerate(est.classes_.tolist())}
            except TypeError:
                self.classes = None
        plan = self.plan
        self.keys = [0] * plan.nblk
        self.vals = plan.values1  # the kernel's one-event buffer: ids have value 1
        self.vals[0, :len(self.ent)] = 1.0

    def remember_frame(self, X):
        """Accept DataFrames with the columns (names, dtypes and block layout) of ``X``, which passed."""
        import pandas as pd

        self.names_list = list(self.names)
        layout = []
        for blk in X._mgr.blocks:
            values = blk.values
            cols = blk.mgr_locs.indexer
            if not isinstance(cols, slice) or (cols.step or 1) != 1:
                layout = None
                break
            if type(values) is np.ndarray:
                kind = "numpy"
            elif isinstance(values.dtype, pd.CategoricalDtype):
                kind = "category"
            else:
                kind = "arrow" if hasattr(values, "_pa_array") else "other"
            if kind != "numpy" and cols.stop - cols.start != 1:
                layout = None
                break
            layout.append((type(values), values.dtype, cols, kind))
        self.layout = None if layout is None else tuple(layout)
        self.row = [None] * self.width
        self.strings = {}
        self.checked = None
        self.col_data = X.columns._data

    def frame_row(self, X):
        """The values of the one row of the DataFrame ``X`` as Python objects (as
        ``np.asarray(column, dtype=object)`` gives them), or None when its columns, their dtypes or
        its block layout are not those that passed, or a value is missing."""
        mgr = X._mgr
        axes = mgr.axes
        if axes[0]._data is not self.col_data and axes[0].tolist() != self.names_list:
            return None
        if len(axes[1]) != 1 or self.layout is None:
            return None
        blocks = mgr.blocks
        if len(blocks) != len(self.layout):
            return None
        row = self.row
        checked = blocks is self.checked  # the blocks of the last frame checked (their dtypes and places)
        for blk, (vtype, dtype, cols, kind) in zip(blocks, self.layout):
            values = blk.values
            if type(values) is not vtype:
                return None
            if not checked and ((values.dtype is not dtype and values.dtype != dtype) or blk.mgr_locs.indexer != cols):
                return None
            c = cols.start
            if kind == "numpy":
                row[c:cols.stop] = values[:, 0].tolist()
            elif kind == "category":
                code = int(values._codes[0])
                if code < 0:
                    return None
                cats = self.categories.get(id(dtype))
                if cats is None or cats[0] is not dtype:
                    cats = self.categories[id(dtype)] = (dtype, dtype.categories.tolist())
                row[c] = cats[1][code]
            elif kind == "arrow":  # immutable: the value of the same array is the same
                pa = values._pa_array
                seen = self.strings.get(c)
                if seen is not None and seen[0] is pa:
                    row[c] = seen[1]
                else:
                    v = pa.to_pylist()[0]
                    self.strings[c] = (pa, v)
                    row[c] = v
            else:
                row[c] = values[0]
        self.checked = blocks
        return row


class _FactorizationBase(ValidatedParamsMixin, PrefixedParamsMixin, BaseEstimator):
    """What the regressor and the classifier share (module docstring)."""

    #: the prior variance of the numeric context's linear weights is this × s² / n_context
    _context_scale_factor = 1.0

    #: no ``<prefix>__`` keyword arguments (the mixin is here for its parameter store)
    _param_prefixes: tuple = ()

    _parameter_constraints = {
        "model": [StrOptions(set(MODELS))],
        "entity_columns": [StrOptions({"auto"}), None, list, tuple],
        "n_factors": [Interval(numbers.Integral, 1, None, closed="left")],
        "order": [Interval(numbers.Integral, 2, None, closed="left")],
        "biases": ["boolean"],
        "prior_variance": [StrOptions({"auto"}), Interval(numbers.Real, 0, None, closed="neither")],
        "bias_variance": [StrOptions({"auto"}), Interval(numbers.Real, 0, None, closed="neither")],
        "init_scale": [Interval(numbers.Real, 0, None, closed="left")],
        "half_life": [None, Interval(numbers.Real, 0, None, closed="neither")],
        "drift_variance": [StrOptions({"auto"}), Interval(numbers.Real, 0, None, closed="left")],
        "reference": [StrOptions({"learned", "fixed"})],
        "context_blocks": [StrOptions({"auto", "joint", "per-column"})],
        "iterations": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "n_epochs": [Interval(numbers.Integral, 1, None, closed="left")],
        "warm_start": ["boolean"],
        "verbose": ["verbose"],
        "random_state": ["random_state"],
        "n_prior_rows": [Interval(numbers.Integral, 1, None, closed="left")],
        "device": [str, torch.device],
        "dtype": [None, StrOptions({"float64", "float32"})],
    }

    # -- parameters ---------------------------------------------------------------------------------
    def _resolve(self):
        check_parameter_constraints(self)
        device = resolve_device(self.device)
        return device, resolve_dtype(self.dtype, device)

    # -- the rows -----------------------------------------------------------------------------------
    def _split_columns(self, X, first):
        """``(ids per entity column, numeric context (n, n_ctx) float64)`` of ``X``; on the first call
        the entity columns are fixed (``entity_columns_``)."""
        import pandas as pd

        frame = X if isinstance(X, pd.DataFrame) else None
        arr = None if frame is not None else np.asarray(X, dtype=object if not isinstance(X, np.ndarray) else None)
        if arr is not None and arr.ndim != 2:
            raise ValueError(f"Expected a 2D array of rows, got an array of shape {arr.shape}: reshape your data "
                             "with array.reshape(-1, 1) for a single feature or array.reshape(1, -1) for a single "
                             "sample.")
        n_cols = frame.shape[1] if frame is not None else arr.shape[1]
        if first:
            self.entity_columns_ = self._entity_positions(frame, arr, n_cols)
        ent = self.entity_columns_
        ids, ctx = [], []
        for j in range(n_cols):
            col = frame.iloc[:, j] if frame is not None else arr[:, j]
            if j in ent:
                values = as_numpy_ids(col)
                if any(v is None or (isinstance(v, float) and not math.isfinite(v)) for v in values):
                    raise ValueError(f"Entity column {j} has missing or infinite ids (None, NaN or inf).")
                ids.append(values)
            else:
                try:
                    ctx.append(np.asarray(col, dtype=np.float64))
                except OverflowError:
                    raise ValueError(f"Column {j} holds a value too large for float64.") from None
                except (TypeError, ValueError):
                    raise ValueError(f"Column {j} is not numeric; name it in entity_columns if it holds entity "
                                     "ids.") from None
        n = len(frame) if frame is not None else arr.shape[0]
        context = np.column_stack(ctx) if ctx else np.zeros((n, 0))
        if not np.all(np.isfinite(context)):
            raise ValueError("Input X contains NaN or infinity in its numeric columns.")
        return ids, context

    def _entity_positions(self, frame, arr, n_cols):
        spec = self.entity_columns
        if spec is None:
            return ()
        if isinstance(spec, str):  # 'auto': by the columns' types (skfilter.factorization.columns)
            positions, ambiguous = entity_column_roles(frame if frame is not None else arr)
            # a stream's first rows are learned again at every call until n_prior_rows have arrived
            # (skfilter.stream_start): a column is warned about once per stream
            warned = self.__dict__.get("_warned_columns", ()) if "_restarting" in self.__dict__ else ()
            for j in ambiguous:
                if j not in warned:
                    warnings.warn(ambiguity_message(j), EntityColumnsWarning, stacklevel=6)
            self._warned_columns = tuple(sorted(set(warned) | set(ambiguous)))
            return positions
        out = []
        names = list(frame.columns) if frame is not None else None
        for c in spec:
            if isinstance(c, (numbers.Integral, np.integer)) and not isinstance(c, bool):
                if not 0 <= int(c) < n_cols:
                    raise ValueError(f"entity_columns names column {c}, but X has {n_cols} columns.")
                out.append(int(c))
            elif names is not None and c in names:
                out.append(names.index(c))
            else:
                raise ValueError(f"entity_columns names {c!r}, which is not a column of X.")
        if len(set(out)) != len(out):
            raise ValueError(f"entity_columns names a column twice: {list(spec)}.")
        return tuple(sorted(out))

    def _validate(self, X, y, first):
        """Validated ``(ids, context, y)``; leaves nothing changed on error."""
        import pandas as pd

        X_in = X
        if first:
            # scikit-learn's bookkeeping (n_features_in_, feature_names_in_) and its checks of X
            validate_data(self, X, reset=True, dtype=None, ensure_all_finite=False, skip_check_array=False)
        else:
            validate_data(self, X, reset=False, dtype=None, ensure_all_finite=False)
        if not isinstance(X, pd.DataFrame):
            X = np.asarray(X) if hasattr(X, "__array__") else np.asarray(X, dtype=object)
        if getattr(X, "shape", (1,))[0] == 0:
            raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
        ids, context = self._split_columns(X, first)
        if not first and context.shape[1] != self._n_context:
            raise ValueError(f"X has {context.shape[1]} numeric columns; the model was fitted with {self._n_context}.")
        if not first and len(context) == 1:
            self._remember(X_in)
        return ids, context

    # -- building the model -------------------------------------------------------------------------
    def _signal_and_slots(self, n_ids, n_ctx, scale, factor_var, bias_var, jitter, context_var=None):
        """The signal and its slots (module docstring), with each slot's entity prior."""
        model, a = self.model, int(self.n_factors)
        if (model in ("mf", "cp") and n_ids < 2) or (model == "mf" and n_ids != 2):
            found = f"found {n_ids}: columns {list(self.entity_columns_)}"
            if isinstance(self.entity_columns, str):
                found += (" (entity_columns='auto' reads integer, string and categorical columns as ids, float and "
                          "boolean ones as numeric context)")
            if n_ids < 2:
                raise ValueError(f"model={model!r} needs at least two entity columns (mf exactly two); {found}. Set "
                                 "entity_columns, or use model='fm' or 'glm'.")
            raise ValueError(f"model='mf' needs exactly two entity columns (user, item); {found}. Name them with "
                             "entity_columns (the others are then numeric context), or use model='cp' for more.")
        context = n_ctx > 0

        def prior(n_linear, n_factor, n_features=1, linear_var=bias_var):
            var = np.full(n_linear + n_factor, factor_var)
            var[:n_linear] = linear_var
            jit = np.full(n_linear + n_factor, jitter)
            jit[:n_linear] = 0.0
            if n_features > 1:
                var, jit = np.tile(var, n_features), np.tile(jit, n_features)
            return EntityPrior(np.zeros(var.shape[0]), var, jit)

        slots = []
        if model in ("glm", "fm"):
            signal = LinearSignal() if model == "glm" else FactorizationMachine(a, order=int(self.order))
            n_fac = signal.n_params_per_feature - 1
            slots = [Slot(f"column {j}", 1, False, prior(1, n_fac)) for j in self.entity_columns_]
            if context and self._context_per_column:  # one entity per numeric column
                slots += [Slot(f"context {j}", 1, True, prior(1, n_fac, 1, context_var)) for j in range(n_ctx)]
            elif context:
                slots.append(Slot("context", n_ctx, True, prior(1, n_fac, n_ctx, context_var)))
        else:
            cls = MatrixFactorization if model == "mf" else CPFactorization
            kwargs = {"biases": bool(self.biases), "context": context}
            if model == "cp":
                kwargs["order"] = n_ids
            signal = cls(a, **kwargs)
            n_lin = 1 if self.biases else 0
            slots = [Slot(f"column {j}", 1, False, prior(n_lin, a)) for j in self.entity_columns_]
            if context:
                slots.append(Slot("context", n_ctx, True, prior(1, 0, n_ctx, context_var)))
        return signal, slots

    def _build(self, ids, context, Y, weights, device, dtype, rng=None, seed=None, restart=False):
        """The filter and its prior from the stream's first rows (``ids``, ``context``, ``Y``,
        ``weights``), its generator seeded by ``seed`` (default: drawn from ``rng``, by default
        ``random_state``'s generator). ``restart``: the current filter, built from other rows of
        the same stream with the same seed, takes the new prior instead
        (:meth:`FactorizationFilter.restart`: the same filter, not built again)."""
        if seed is None:
            rng = check_random_state(self.random_state) if rng is None else rng
            seed = int(rng.randint(2**31 - 1))
        n_ctx = context.shape[1]
        self._n_context = n_ctx
        if n_ctx:
            self._context_offset, self._context_scale = input_standardization(context, weights)
        d = self._n_outputs_model()
        centre, scale, output_scales = self._target_statistics(Y, weights)
        a = int(self.n_factors)
        # 'auto': the prior interaction term has spread s/2 whatever the number of features an
        # event involves (m features: m(m − 1)/2 pairs of a products each in a factorization machine)
        m = len(ids) + n_ctx
        pairs = max(1, m * (m - 1) // 2) if self.model == "fm" else 1
        factor_var = 0.5 * scale / math.sqrt(a * pairs) if self.prior_variance == "auto" else \
            float(self.prior_variance)
        bias_var = (0.5 * scale) ** 2 if self.bias_variance == "auto" else float(self.bias_variance)
        jitter = float(self.init_scale) * math.sqrt(factor_var)
        # the context's linear weights: a prior linear term of the targets' whole spread (logits: a
        # spread of √10, FactorizationClassifier._context_scale_factor), whatever the number of columns
        context_var = (self._context_scale_factor * scale ** 2 / max(n_ctx, 1) if self.bias_variance == "auto"
                       else float(self.bias_variance))
        p = 1 + (0 if self.model == "glm" else a * (int(self.order) - 1) if self.model == "fm" else 0)
        if self.context_blocks == "auto":
            self._context_per_column = self.model in ("fm", "glm") and d * n_ctx * p > _JOINT_CONTEXT_SIZE
        else:
            if self.context_blocks == "per-column" and self.model not in ("fm", "glm"):
                raise ValueError(f"context_blocks='per-column' applies to model='fm' and 'glm'; model={self.model!r} "
                                 "has one block of linear context weights.")
            self._context_per_column = self.context_blocks == "per-column"
        signal, slots = self._signal_and_slots(len(ids), n_ctx, scale, factor_var, bias_var, jitter, context_var)
        if d > 1:  # d outputs: every block holds d copies of its features' parameters
            slots = [s._replace(prior=EntityPrior(np.tile(s.prior.mean, d), np.tile(s.prior.variance, d),
                                                   np.tile(s.prior.jitter, d))) for s in slots]
        global_var = scale ** 2 if self.bias_variance == "auto" else float(self.bias_variance)
        bias_prior = EntityPrior(np.broadcast_to(centre, (d,)), np.full(d, global_var))  # every model has one
        drift = self.drift_variance
        if drift == "auto":
            drift = factor_var
        if restart:
            self.filter_.restart([s.prior for s in slots], bias_prior, float(drift))
        else:
            self.filter_ = FactorizationFilter(
                signal, slots, d, self._make_likelihood(d), bias_prior=bias_prior, half_life=self.half_life,
                drift_variance=float(drift), learn_reference=self.reference == "learned",
                iterations=int(self.iterations), tol=float(self.tol), dtype=dtype, device=device, seed=seed)
        self.filter_.noise = self._initial_noise(self.filter_.noise, output_scales)

    def _slot_values(self, ids, context):
        """Per slot, the feature values ``(n, n_s)`` as tensors (ids: ones; the context standardised)."""
        f = self.filter_
        n = context.shape[0]
        opts = {"dtype": f.dtype, "device": f.device}
        values = [torch.ones(n, 1, **opts) for _ in ids]
        if self._n_context:
            standardised = torch.as_tensor((context - self._context_offset) / self._context_scale, **opts)
            values += list(standardised.split(1, dim=1)) if self._context_per_column else [standardised]
        return values

    def _slot_ids(self, ids):
        n_context_slots = (self._n_context if self._context_per_column else 1) if self._n_context else 0
        return list(ids) + [None] * n_context_slots

    # -- fitting ------------------------------------------------------------------------------------
    def _fit(self, X, y, sample_weight, reset, classes=None, passes=None, record=False):
        """Learn ``(X, y)`` (``passes`` passes; default ``n_epochs`` for a refit, else 1); with
        ``record``, one pass that returns each row's one-step-ahead prediction (:meth:`_one_pass`)."""
        device, dtype = self._resolve()
        if passes is None:
            passes = int(self.n_epochs) if reset else 1
        if reset and self.warm_start and hasattr(self, "filter_") and not record:
            reset = False  # fit continues the stream
        first = reset or not hasattr(self, "filter_")
        if not first and not record and self.__dict__.get("_stream_start") is not None:
            return self._restart(X, y, sample_weight, classes, passes)
        # a refit replaces the fitted attributes with new objects: on failure the old ones come back
        previous = dict(vars(self)) if first and hasattr(self, "filter_") else None
        try:  # validation changes nothing of a fitted estimator; a failed first call leaves it as it was
            ids, context = self._validate(X, y, first)
            Y = self._encode(y, first, classes, len(context))
            w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).reshape(-1)
            if w is not None and (w.shape[0] != len(context) or not np.all(np.isfinite(w)) or np.any(w < 0)):
                raise ValueError("sample_weight must be finite, non-negative and have one entry per row.")
            if w is not None and not np.any(w > 0):
                raise ValueError("sample_weight has only zeros: nothing to learn from.")
            if first:
                self._start_stream(X, y, sample_weight, ids, context, Y, w, device, dtype, passes)
                self.n_samples_seen_, self.n_iter_ = 0, 0
            elif (device, dtype) != (self.filter_.device, self.filter_.dtype):
                self.filter_.to(device, dtype)
            if not first and not record:
                self._note_params()
        except BaseException:
            if first:
                self._forget()
            if previous is not None:
                vars(self).update(previous)
            raise
        values = self._slot_values(ids, context)
        Yt = torch.as_tensor(np.array(Y, dtype=np.float64), dtype=self.filter_.dtype, device=self.filter_.device)
        slot_ids = self._slot_ids(ids)
        n = len(context)
        rec = None
        if record:
            rec = np.zeros((n, record_width(self.filter_))) if serves(self.filter_) else []
        bar = progress_bar(self.verbose, passes * n, type(self).__name__)
        try:
            for epoch in range(passes):
                self._one_pass(n, slot_ids, values, Yt, w, pass_progress(bar, epoch * n), record=rec)
                self.n_iter_ = self.__dict__.get("n_iter_", 0) + 1
        finally:
            if bar is not None:
                bar.close()
        return rec if record else self

    def _one_pass(self, n, slot_ids, values, Yt, w, progress=None, record=None):
        """Learn the ``n`` rows once, in order: the compiled DEKF when it serves the model, else the
        torch engine row by row (undoing a failed row); ``progress(rows_done)`` between chunks/rows.
        ``record``: an ``(n, record_width)`` array that the compiled DEKF fills with each row's prediction made
        before the row is learned (``run_events_compiled``), or a list that gets each row's
        ``(λ, Cov λ)`` (torch engine)."""
        chunk = _KERNEL_CHUNK if progress is None else _PROGRESS_CHUNK
        if serves(self.filter_):  # the compiled DEKF, in chunks (an interrupt is seen between them)
            for a in range(0, n, chunk):
                b = min(n, a + chunk)
                chunk_ids = [None if s is None else s[a:b] for s in slot_ids]
                try:
                    done = run_events_compiled(self.filter_, chunk_ids, [v[a:b] for v in values], Yt[a:b],
                                               None if w is None else w[a:b],
                                               record=None if record is None else record[a:b])
                except FilterStepError as err:  # the kernel kept the events before the failing one
                    self.n_samples_seen_ += int(getattr(err, "rows_done", 0))
                    raise
                self.n_samples_seen_ += done
                if progress is not None:
                    progress(b)
            return
        for i in range(n):
            row_ids = [None if s is None else s[i] for s in slot_ids]
            if record is not None:
                record.append(self.filter_.linearized([[r] for r in row_ids], [v[i:i + 1] for v in values]))
            backup = self._snapshot_rows()
            try:
                self.filter_.step(row_ids, [v[i] for v in values], Yt[i], 1.0 if w is None else float(w[i]))
            except BaseException:
                self._restore_rows(backup)
                raise
            self.n_samples_seen_ += 1
            if progress is not None and ((i + 1) % 64 == 0 or i + 1 == n):
                progress(i + 1)

    # -- the stream's first rows (skfilter.stream_start) ------------------------------------------
    def _start_stream(self, X, y, sample_weight, ids, context, Y, w, device, dtype, passes):
        """Build the filter from the stream's first ``n_prior_rows`` rows (the targets' centre and
        scale, the context's standardisation) and keep the call while fewer have arrived."""
        limit = int(self.n_prior_rows)
        restarting = self.__dict__.pop("_restarting", None)
        rng = generator_for(self.random_state, restarting)
        keep = len(context) < limit
        state = rng.get_state() if keep else None
        k = min(limit, len(context))
        self._build([i[:k] for i in ids], context[:k], Y[:k], None if w is None else w[:k], device, dtype, rng=rng)
        self._stream_start = None if not keep else StreamStart.begin(
            copy_rows(X), copy_rows(y), copy_rows(w), limit=limit, n_passes=passes,
            rng_state=state if restarting is None else restarting.rng_state)

    def _restart(self, X, y, sample_weight, classes, passes):
        """A call while the stream's first ``n_prior_rows`` rows are still arriving: the model built
        again from all rows so far and every row learned again in one pass (a multi-pass ``fit`` on
        fewer rows counts as one pass then). Bad input raises before anything changes; a failure
        while learning leaves the estimator as it was before the call."""
        start = self._stream_start
        n = _n_rows(X)
        self._validate(X, y, False)  # bad rows raise here, nothing changed
        self._encode(y, False, classes, n)
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).reshape(-1)
        if w is not None and (w.shape[0] != n or not np.all(np.isfinite(w)) or np.any(w < 0)):
            raise ValueError("sample_weight must be finite, non-negative and have one entry per row.")
        start = start.add(copy_rows(X), copy_rows(y), copy_rows(w), passes)
        Xall, yall, wall = start.rows()
        before = dict(vars(self))
        labels = self.__dict__.get("classes_")
        try:
            self._forget()
            self._restarting = start
            self._fit(Xall, yall, wall, reset=True, classes=labels, passes=1)
        except BaseException:
            restore_attributes(self, before)
            raise
        self._stream_start = None if start.complete else start._replace(calls=start.calls)
        return self

    def _forget(self):
        for k in [k for k in vars(self) if k.endswith("_") and not k.startswith("__")] + ["_n_context"]:
            if k in vars(self):
                delattr(self, k)

    def _snapshot_rows(self):
        """Enough to undo one step: the time, the noise state, the tables' sizes and generators (a
        failed step raises before writing anything, so only its new entities and the clock need
        undoing; ids are added in creation order, so the sizes say which)."""
        f = self.filter_
        return f.time, f.noise, {k: (t.n_entities, t.generator_state) for k, t in f.tables.items()}

    def _restore_rows(self, backup):
        f = self.filter_
        f.time, f.noise, sizes = backup
        for k, (n, rng_state) in sizes.items():
            f.tables[k].forget_after(n)
            f.tables[k].generator_state = rng_state

    def fit(self, X, y, sample_weight=None):
        """Learn from the events ``(X, y)`` in row order, starting from the prior.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            Entity ids in ``entity_columns``, numeric context elsewhere.
        y : array-like
            Targets.
        sample_weight : array-like of shape (n_samples,), optional
            A weight ``w`` scales the event's precision (its noise is ``R / w``); 0 skips it.

        Returns
        -------
        self
        """
        return self._fit(X, y, sample_weight, reset=True)

    # -- one row per call: the fast path -------------------------------------------------------------
    def __getstate__(self):
        state = dict(super().__getstate__())  # (object.__getstate__ gives __dict__ itself)
        state.pop("_one_row", None)  # the filter's kernel buffers: a copy builds its own
        return state

    def _remember(self, X):
        """After ``X`` (one row) passed the full validation of a fitted estimator whose model the
        compiled DEKF serves: accept rows like it on the fast path from now on."""
        import pandas as pd

        f = self.__dict__.get("filter_")
        if f is None or not serves(f):
            return
        one = self.__dict__.get("_one_row")
        if one is None or one.filt is not f or one.plan is not f.__dict__.get("_kernel_plan"):
            one = self._one_row = _OneRow(self)
        if type(X) is np.ndarray:
            if one.names is None and X.ndim == 2 and X.dtype.kind in "biufOU":
                one.dtypes.add(X.dtype)
        elif type(X) is pd.DataFrame and one.names is not None:
            one.remember_frame(X)

    def _fast_row(self, X):
        """``(plan, keys, values)`` of a one-row ``X`` of a kind that passed the full validation before
        (:meth:`_remember`), or None: anything else (and every error) takes the full validation."""
        one = self.__dict__.get("_one_row")
        if one is None or self.__dict__.get("filter_") is not one.filt or not _kernels_on():
            return None
        plan = one.plan
        if plan is not one.filt.__dict__.get("_kernel_plan") or plan.dtype is not one.filt.dtype:
            return None
        try:
            if type(X) is np.ndarray:
                if X.dtype not in one.dtypes or X.shape != one.shape:  # dtypes: none with feature names
                    return None
                row = X[0].tolist()
                if X is one.last[0] and row == one.last[1]:  # the row just read (predict, then partial_fit)
                    return plan, one.keys, one.vals
            elif type(X) is one.frame and one.col_data is not None:
                row = one.frame_row(X)
                if row is None:
                    return None
            else:
                return None
            one.last = (None, None)  # the buffers are about to change
            keys = one.keys
            b = 0
            for j in one.ent:
                v = row[j]
                if type(v) is not int and type(v) is not str:
                    if isinstance(v, np.generic):
                        v = v.item()
                    if v is None or (isinstance(v, float) and not math.isfinite(v)):
                        return None
                    hash(v)
                keys[b] = v
                b += 1
            if one.ctx:
                vals = one.vals
                k = len(one.ent)
                for j, off, scale in one.ctx_cols:
                    v = row[j]
                    if type(v) is not float:
                        if isinstance(v, np.generic):
                            v = v.item()
                        if not isinstance(v, (int, float)):
                            return None
                        v = float(v)
                    if not math.isfinite(v):
                        return None
                    z = (v - off) / scale
                    vals[0, k] = float(np.float32(z)) if one.f32 else z
                    k += 1
        except Exception:  # anything unusual: the full validation says what is wrong
            return None
        one.last = (X, row) if type(X) is np.ndarray else (None, None)
        return plan, keys, one.vals

    def _fast_learn(self, X, y, sample_weight, classes):
        """``partial_fit`` of one row on the fast path; False when it does not apply. (``classes``
        only counts on the first call: the full path ignores it on a fitted estimator, as here.)"""
        if sample_weight is not None or self.__dict__.get("_stream_start") is not None:
            return False  # (while the stream's first rows arrive, each call builds the model again)
        one = self.__dict__.get("_one_row")
        if one is None or one.params is None:
            return False
        if type(y) is one.series:  # a Series slice: its values, as np.asarray(y) reads them
            y = y._values
        if type(y) is not np.ndarray or y.shape != (1,):
            return False
        try:
            if memo_for(self).get("version") is not one.params:  # set_params since the last validation
                return False
            target = self._fast_target(y, one)
        except Exception:  # the full validation says what is wrong
            return False
        if target is None:
            return False
        if one.f32:  # the target as the full path passes it: a float32 tensor
            target = float(np.float32(target))
        with one.plan.lock:  # the row's buffers are the plan's
            parsed = self._fast_row(X)
            if parsed is None:
                return False
            plan, keys, vals = parsed
            plan.learn_one(keys, target, vals)
        d = self.__dict__  # (fitted attributes: no parameter's memo to forget)
        d["n_samples_seen_"] += 1
        d["n_iter_"] += 1
        return True

    def _fast_predict(self, X):
        """The kernel's record ``[λ, Var λ, r, a, b]`` of a one-row ``X`` on the fast path, or None."""
        one = self.__dict__.get("_one_row")
        if one is None:
            return None
        with one.plan.lock:  # the row's buffers are the plan's: concurrent predictions wait
            parsed = self._fast_row(X)
            if parsed is None:
                return None
            return parsed[0].predict_one(parsed[1], parsed[2]).copy()

    def _note_params(self):
        """After the parameters passed the validation of a ``partial_fit`` on this filter."""
        one = self.__dict__.get("_one_row")
        if one is not None and one.filt is self.__dict__.get("filter_"):
            # the token of these parameter values: another object once one is set (set_params)
            one.params = None if self.verbose else params_version(self)

    # -- predictions --------------------------------------------------------------------------------
    # -- predictions --------------------------------------------------------------------------------
    def _predict_rows(self, X):
        """``(rec, None)`` with ``rec (n, record_width)`` the compiled DEKF's predictions
        (:func:`~skfilter.kernels.factorization.predict_events_compiled`), or ``(None, (λ, Cov λ))``
        from the torch engine where the kernel does not serve the model; one plain row of a kind
        seen before takes the fast path (:meth:`_fast_row`)."""
        rec = self._fast_predict(X)
        if rec is not None:
            return rec[None, :], None
        check_is_fitted(self, "filter_")
        ids, context = self._validate(X, None, first=False)
        slot_ids, values = self._slot_ids(ids), self._slot_values(ids, context)
        if serves(self.filter_):
            return predict_events_compiled(self.filter_, slot_ids, values), None
        return None, self.filter_.linearized(slot_ids, values)

    def _np_dtype(self):
        return np.float32 if self.filter_.dtype == torch.float32 else np.float64

    # -- prequential evaluation -------------------------------------------------------------------
    def partial_fit_predict(self, X, y, *, return_std=False, method="predict", sample_weight=None, classes=None):
        """Predict each row of ``(X, y)`` one step ahead, then learn it, continuing the stream: the
        predictions a loop of ``predict`` (or ``predict_proba``) and ``partial_fit`` of one row
        would make, in one pass (the compiled DEKF records them inside its loop where it serves the
        model; the torch engine row by row otherwise).

        Row ``t``'s prediction uses the rows before it only. On an unfitted estimator the first row
        has no prediction (regressors: ``nan``; classifiers: uniform probabilities, the first class)
        since the ``'auto'`` priors adopt the scale of the first call's targets; the model is built
        from it, as a first ``partial_fit`` of that row would, and the other rows continue it. Bad
        input raises before anything is learned. Arguments and returns as
        :meth:`prequential_fit_predict`."""
        self._check_prequential(return_std, method)
        n = _n_rows(X)
        if hasattr(self, "filter_"):
            rec = self._fit(X, y, sample_weight, reset=False, classes=classes, passes=1, record=True)
            return self._format(0, self._record_body(rec), return_std, method)
        if self._is_classifier and classes is None and y is not None:
            classes = np.unique(np.asarray(y))
        previous = dict(vars(self))
        try:
            self._fit(_take(X, 0, 1), _take(y, 0, 1), _take(sample_weight, 0, 1), reset=False, classes=classes,
                      passes=1)
            if n == 1:
                return self._format(1, None, return_std, method)
            rec = self._fit(_take(X, 1, n), _take(y, 1, n), _take(sample_weight, 1, n), reset=False, passes=1,
                            record=True)
        except FilterStepError:
            raise
        except BaseException:  # bad input: nothing learned
            restore_attributes(self, previous)
            raise
        return self._format(1, self._record_body(rec), return_std, method)

    @staticmethod
    def _record_body(rec):
        if isinstance(rec, np.ndarray):
            return rec, None
        return None, (torch.cat([r[0] for r in rec]), torch.cat([r[1] for r in rec]))

    def prequential_fit_predict(self, X, y, *, return_std=False, method="predict", sample_weight=None,
                                classes=None):
        """Fit from the prior on the stream ``(X, y)`` (one pass, in row order) and return the
        one-step-ahead prediction of every row, made before the row is learned.

        The prediction of row ``t`` uses the belief after rows ``0..t−1`` at step ``t`` (the lazily
        predicted blocks; an id not seen yet at its prior): what ``predict`` then ``partial_fit`` of
        one row at a time would give, recorded inside the compiled DEKF's loop where it serves the
        model (the torch engine row by row otherwise). Row 0 has no earlier rows: regressors give
        ``nan`` (and ``nan`` std), classifiers uniform probabilities (the first class), and the
        model is built from row 0, as a first ``partial_fit`` of it would (the ``'auto'`` priors
        adopt its scale; :meth:`partial_fit_predict` continues a fitted stream). The estimator is
        left fitted on the whole stream. This is the interface
        :func:`skfilter.model_selection.prequential_predict` calls.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) (or (n_samples, n_outputs) for regressors)
        return_std : bool, default=False
            Regressors: also return the predictive standard deviation (observation noise included).
        method : {'predict', 'predict_proba', 'predict_log_proba'}, default='predict'
            Classifiers: labels, class probabilities or their logarithms.
        sample_weight : array-like of shape (n_samples,), default=None
            As in :meth:`fit`.
        classes : array-like, default=None
            Classifiers: all the classes of the stream (default: those in ``y``).

        Returns
        -------
        pred : ndarray
            Means (regressors), labels or probabilities (classifiers), one row per input row.
        std : ndarray
            Only with ``return_std=True``.
        """
        self._check_prequential(return_std, method)
        previous = dict(vars(self))
        self._forget()
        try:
            out = self._prequential_from_start(X, y, return_std, method, sample_weight, classes)
            self.n_iter_ = 1  # one pass (row 0 and the rest)
            return out
        except FilterStepError:
            raise
        except BaseException:  # bad input: the estimator as it was
            restore_attributes(self, previous)
            raise

    def _prequential_from_start(self, X, y, return_std, method, sample_weight, classes):
        """The prequential pass from the prior: row 0 without a prediction, rows before the prior
        is fixed (the first ``n_prior_rows``) predicted then learned one at a time, each from the
        rows before it (the model built again from them), the rest recorded inside the filter loop."""
        n = _n_rows(X)
        k = min(int(self.n_prior_rows), n)
        if self._is_classifier and classes is None and y is not None:
            classes = np.unique(np.asarray(y))
        if n > k and _kernels_on():
            out = self._prequential_compiled(X, y, return_std, method, sample_weight, classes, k)
            if out is not None:
                return out
            self._forget()  # a model the compiled DEKF does not serve: the loop (it warned already)
            return self._prequential_loop(X, y, return_std, method, sample_weight, classes, n, k, quiet=True)
        return self._prequential_loop(X, y, return_std, method, sample_weight, classes, n, k)

    def _prequential_compiled(self, X, y, return_std, method, sample_weight, classes, k):
        """:meth:`_prequential_from_start` inside the compiled DEKF, from one validation of the
        stream: row ``t < k`` is predicted by the model of rows ``0..t−1`` — the filter restarted
        with their prior (:meth:`FactorizationFilter.restart`: the filter a new build would give),
        then one :func:`~skfilter.kernels.factorization.run_events_compiled` call over rows ``0..t``
        with row ``t``'s weight 0, whose record of row ``t`` is what ``predict`` after
        ``partial_fit`` of rows ``0..t−1`` computes (the rows of these events in the emptied
        tables found once, :class:`~skfilter.kernels.factorization.FirstAppearances`); the rest
        recorded in one pass over all rows by the model built from the first ``k``, which the
        estimator keeps (a ``fit`` of the stream). Bit for bit the loop of
        :meth:`_prequential_loop`. None if the compiled DEKF does not serve the model; on a
        numerical failure in rows ``0..k−1`` the loop runs instead, so that it raises where, and
        leaves what, a loop of ``predict`` and ``partial_fit`` would."""
        device, dtype = self._resolve()
        ids, context = self._validate(X, y, True)
        n = len(context)
        Y = self._encode(y, True, classes, n)
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).reshape(-1)
        if w is not None and (w.shape[0] != n or not np.all(np.isfinite(w)) or np.any(w < 0)):
            raise ValueError("sample_weight must be finite, non-negative and have one entry per row.")
        if w is not None and not np.any(w[:1] > 0):
            raise ValueError("sample_weight has only zeros: nothing to learn from.")
        # every build draws the same seed, as the rebuilds of a stream's start do (generator_for)
        seed = int(generator_for(self.random_state, None).randint(2**31 - 1))

        def build(t):
            self._build([i[:t] for i in ids], context[:t], Y[:t], None if w is None else w[:t], device, dtype,
                        seed=seed, restart=t > 1)

        def rows(a, b):
            return ([None if s is None else s[a:b] for s in self._slot_ids([i[a:b] for i in ids])],
                    self._slot_values([i[a:b] for i in ids], context[a:b]),
                    torch.as_tensor(Y[a:b], dtype=self.filter_.dtype, device=self.filter_.device),
                    None if w is None else w[a:b])

        d = self._n_outputs_model()  # (the record's width: record_width)
        width = 5 if d == 1 else 3 * d
        head, scratch = np.zeros((k, width)), np.zeros((k, width))
        # rows 0..t learned with row t's weight 0: its prediction recorded, nothing learned from it
        weights = np.ones(k) if w is None else w[:k].copy()
        try:
            for t in range(1, k):  # row t from the model of rows 0..t-1
                build(t)
                if t == 1:
                    if not serves(self.filter_):  # (a restart keeps the model's structure)
                        return None
                    # the rows of the first k events in the tables each restart empties
                    appearances = FirstAppearances(self.filter_, rows(0, k)[0], k)
                slot_ids, values, Yt, _ = rows(0, t + 1)
                last, weights[t] = weights[t], 0.0
                run_events_compiled(self.filter_, slot_ids, values, Yt, weights[:t + 1], record=scratch[:t + 1],
                                    first_appearances=appearances)
                weights[t] = last
                head[t] = scratch[t]
        except FilterStepError:
            self._forget()
            return self._prequential_loop(X, y, return_std, method, sample_weight, classes, n, k, quiet=True)
        build(k)
        self._stream_start = None
        self.n_samples_seen_, self.n_iter_ = 0, 0
        slot_ids, values, Yt, wt = rows(0, n)
        rec = np.zeros((n, width))
        self._one_pass(n, slot_ids, values, Yt, wt, record=rec)
        rec[1:k] = head[1:]
        return self._format(1, (rec[1:], None), return_std, method)

    def _prequential_loop(self, X, y, return_std, method, sample_weight, classes, n, k, quiet=False):
        """:meth:`_prequential_from_start` as a loop of ``predict`` and ``partial_fit`` of one row
        over the first ``k`` rows (``quiet``: without the entity columns' warnings, given before)."""
        if quiet:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", EntityColumnsWarning)
                return self._prequential_loop(X, y, return_std, method, sample_weight, classes, n, k)
        outs = [self.partial_fit_predict(_take(X, 0, 1), _take(y, 0, 1), return_std=return_std, method=method,
                                         sample_weight=_take(sample_weight, 0, 1), classes=classes)]
        for t in range(1, k):
            row = _take(X, t, t + 1)
            if self._is_classifier:
                outs.append(getattr(self, method)(row))
            else:
                outs.append(self.predict(row, return_std=return_std))
            self._fit(row, _take(y, t, t + 1), _take(sample_weight, t, t + 1), reset=False)
        if n > k:
            outs.append(self.partial_fit_predict(_take(X, k, n), _take(y, k, n), return_std=return_std,
                                                 method=method, sample_weight=_take(sample_weight, k, n)))
        if return_std:
            return (np.concatenate([np.asarray(o[0]) for o in outs]),
                    np.concatenate([np.asarray(o[1]) for o in outs]))
        return np.concatenate([np.asarray(o) for o in outs])

    def n_entities(self):
        """``{entity column: number of entities seen}``."""
        check_is_fitted(self, "filter_")
        return {name: t.n_entities for name, t in self.filter_.tables.items()
                if name not in ("bias", "context")}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.categorical = True
        tags.input_tags.allow_nan = False
        return tags


_MODEL_DOC = """\
    model : {{'fm', 'mf', 'cp', 'glm'}}, default='fm'
        The signal ``λ`` (module docstring).
    entity_columns : 'auto', None or list of int or str, default='auto'
        Columns of ``X`` holding entity ids (positions, or names of a DataFrame's columns); the others
        are numeric context. ``None``: none. ``'auto'``: by each column's type, fixed by the first call
        of a stream (:mod:`skfilter.factorization.columns`) — integer, string and categorical columns
        (a NumPy array of integer user and item ids, a DataFrame's ``int64`` ``userId``) are ids;
        float and boolean columns are numeric context, never ids unless named here; a float
        column of non-negative whole numbers (three or more distinct) warns
        (:class:`~skfilter.exceptions.EntityColumnsWarning`): ids stacked with a float feature
        into one float array are floats — name them, ``entity_columns=[0, 1]``. A quantity stored
        as integers (a time stamp, a count) is read as ids: cast it to float, or name the ids.
    n_factors : int, default=8
        ``a``, the length of each entity's factor vector (per order for ``model='fm'``).
    order : int, default=2
        Order of the factorization machine (``model='fm'``): interactions of up to ``order`` features.
    biases : bool, default=True
        Entity biases in ``'mf'`` and ``'cp'``.
    prior_variance : 'auto' or float, default='auto'
        Prior variance ``Π`` of each factor coordinate; ``'auto'``: ``s / (2√(a P))`` for targets of
        scale ``s`` ({scale}) and ``P`` pairs of features in an event (1 but for
        ``model='fm'``), so that the prior interaction term has standard deviation ``s/2``.
    n_prior_rows : int, default=50
        How many of the stream's first rows set what is scaled to data (the targets' centre and
        scale behind the ``'auto'`` priors and the first noise estimate, the numeric context's
        standardisation), however they arrive: until then every call builds the model again from all
        rows so far and learns them again (:mod:`skfilter.stream_start`); then they are fixed.
    bias_variance : 'auto' or float, default='auto'
        Prior variance of entity biases (``'auto'``: ``(s/2)²``), of the numeric context's linear
        weights (``{context} s² / n_context``) and of the global bias (``s²``, centred on {centre}).
    init_scale : float, default=0.5
        A new entity's prior mean of its factors is drawn ``N(0, (init_scale·√Π)²)`` once (a zero
        mean is a stationary point of a bilinear signal: nothing would ever be learned).
    half_life : float or None, default=None
        ``None``: static parameters (Alg. 1). A number of rows: every entity drifts towards its
        reference vector with memory ``α = 0.5^(1/half_life)`` (Alg. 2, Eq. 19; the paper's
        half-life parametrisation): its deviation from the reference halves in ``half_life`` rows.
    drift_variance : 'auto' or float, default='auto'
        ``c`` of the drift noise ``Ω = (1 − α²) c I``: the stationary spread of an entity around its
        reference (``'auto'``: the factor prior variance). Ignored without ``half_life``.
    reference : {{'learned', 'fixed'}}, default='learned'
        The reference vectors are learned jointly (Alg. 2) or fixed at the prior mean.
    context_blocks : {{'auto', 'joint', 'per-column'}}, default='auto'
        The entities of the numeric context (``'fm'``, ``'glm'``): one block of all the columns'
        parameters (their correlations kept), or one entity per column (the paper's factorization
        machine, whose entities are its features; a cost per event linear in the columns).
        ``'auto'``: one block up to 512 parameters (outputs × columns × parameters per column).
    iterations : int, default=1
        1: the DEKF step. More: the decoupled iterated EKF (Fisher scoring to the MAP of the involved
        entities with a line search; §4.2), safer for strongly non-linear outcomes with a vague prior.
    tol : float, default=1e-08
        Stopping tolerance of the iterations (largest step of a parameter)."""

_REST_DOC = """\
    n_epochs : int, default=1
        Passes over the rows in :meth:`fit` (``partial_fit`` always makes one).
    warm_start : bool, default=False
        When True, ``fit`` on a fitted estimator continues its stream (``n_epochs`` more passes)
        instead of starting from the prior.
    verbose : int, default=0
        Show a progress bar over the rows while fitting when > 0.
    random_state : int, RandomState instance or None, default=None
        Seeds the new entities' prior means and the draws of ``sample_y``/``sample_proba``.
    device : str or torch.device, default='cpu'
        Where the entity tables live ('cpu', 'cuda', …).
    dtype : {None, 'float64', 'float32'}, default=None
        ``None``: float64 on the CPU, float32 on a GPU."""


class FactorizationRegressor(RegressorMixin, _FactorizationBase):
    __doc__ = f"""Online factorization-model regression (ratings, counts) by the decoupled EKF.

    Each row is one event; it updates only the entities it involves (module docstring). With
    ``likelihood='gaussian'`` the target is ``y ~ N(λ, r)``; with ``'poisson'`` a count
    ``y ~ Poisson(exp λ)``.

    Parameters
    ----------
{_MODEL_DOC.format(scale=":func:`skfilter.priors.target_scale`", centre="the targets' median", context="")}
    obs_variance : 'auto' or float, default='auto'
        Gaussian noise variance ``r``; ``'auto'``: the online estimate of the network regressors,
        started at the squared scale of the first call's targets.
    likelihood : {{'gaussian', 'poisson'}}, default='gaussian'
        Gaussian ratings with variance ``obs_variance``, or Poisson counts with a log link.
{_REST_DOC}

    Attributes
    ----------
    filter_ : skfilter.factorization.FactorizationFilter
        The entity tables and the model.
    entity_columns_ : tuple of int
    n_features_in_ : int
    n_samples_seen_ : int
        Events learned (every pass counts).
    n_iter_ : int
        Passes made on the current stream.
    n_outputs_ : int
    obs_variance_ : ndarray of shape (n_outputs,)

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import FactorizationRegressor
    >>> rng = np.random.default_rng(0)
    >>> users, items = rng.integers(0, 20, 500), rng.integers(0, 10, 500)
    >>> taste = rng.normal(size=(20, 2)) @ rng.normal(size=(2, 10))
    >>> X = np.column_stack([users, items])  # an integer array: entity_columns='auto' reads both as ids
    >>> y = 3 + taste[users, items] + 0.1 * rng.normal(size=500)
    >>> reg = FactorizationRegressor(model="mf", n_factors=2, random_state=0).fit(X[:400], y[:400])
    >>> mean, std = reg.predict(X[400:], return_std=True)
    >>> bool(np.sqrt(np.mean((mean - y[400:]) ** 2)) < np.std(y))
    True
    >>> reg.entity_columns_
    (0, 1)
    """

    _parameter_constraints = {**_FactorizationBase._parameter_constraints,
                              "obs_variance": [StrOptions({"auto"}), Interval(numbers.Real, 0, None, closed="neither")],
                              "likelihood": [StrOptions({"gaussian", "poisson"})]}

    def __init__(self, model="fm", *, entity_columns="auto", n_factors=8, order=2, biases=True,
                 prior_variance="auto", n_prior_rows=50, bias_variance="auto", init_scale=0.5, half_life=None,
                 drift_variance="auto",
                 reference="learned", context_blocks="auto", iterations=1, tol=1e-8, obs_variance="auto",
                 likelihood="gaussian", n_epochs=1, warm_start=False, verbose=0, random_state=None, device="cpu",
                 dtype=None):
        self._store_init_params(locals())

    def _encode(self, y, first, classes, n):
        if y is None:
            raise ValueError("requires y to be passed, but the target y is None.")
        Y = np.asarray(y, dtype=np.float64) if not isinstance(y, np.ndarray) or y.dtype != object else None
        if Y is None:
            try:
                Y = np.asarray(y, dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError("y must be numeric.") from None
        if Y.ndim == 0 or Y.shape[0] != n:
            raise ValueError(f"X has {n} rows but y has {Y.shape[0] if Y.ndim else 0}.")
        if Y.ndim > 2:
            raise ValueError("y must be 1-d or 2-d.")
        if not np.all(np.isfinite(Y)):
            raise ValueError("Input y contains NaN or infinity.")
        Y2 = Y.reshape(n, -1)
        if first:
            self._y_ndim = Y.ndim
            self.n_outputs_ = Y2.shape[1]
        elif Y2.shape[1] != self.n_outputs_:
            raise ValueError(f"y has {Y2.shape[1]} outputs; the model was fitted with {self.n_outputs_}.")
        if self.likelihood == "poisson" and np.any(Y2 < 0):
            raise ValueError("The Poisson likelihood needs non-negative targets (counts).")
        return Y2

    def _n_outputs_model(self):
        return self.n_outputs_

    def _target_statistics(self, Y, weights):
        """``(centre per output, the prior's scale, the scale per output for the first noise)``."""
        if self.likelihood == "poisson":
            return np.log(np.average(Y, axis=0, weights=weights) + 0.5), 1.0, None
        centre, scale = target_scale(Y, weights)
        return centre, float(np.mean(scale)), scale

    def _make_likelihood(self, d):
        if self.likelihood == "poisson":
            return Poisson()
        if isinstance(self.obs_variance, str):
            return Gaussian("adaptive", **_AUTO_NOISE)
        return Gaussian(float(self.obs_variance))

    def _initial_noise(self, state, scale):
        if self.likelihood == "poisson" or not isinstance(self.obs_variance, str):
            return state
        r = torch.full_like(state["r"], float(np.mean(scale ** 2)))
        return {"r": r, "weight": torch.full_like(state["weight"], 10.0), "scale": r.rsqrt()[..., None]}

    def partial_fit(self, X, y, sample_weight=None):
        """Learn from the events ``(X, y)`` (one pass, in row order), continuing the stream."""
        if self._fast_learn(X, y, sample_weight, None):
            return self
        return self._fit(X, y, sample_weight, reset=False)

    def _fast_target(self, y, one):
        if self._y_ndim != 1 or y.dtype.kind not in "biuf":
            return None
        v = float(y[0])
        if not math.isfinite(v) or (v < 0 and self.likelihood == "poisson"):
            return None
        return v

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    @property
    def obs_variance_(self):
        check_is_fitted(self, "filter_")
        noise = self.filter_.noise
        return None if noise is None else noise["r"].detach().cpu().numpy().copy()

    def _shape(self, a):
        return a[:, 0] if self._y_ndim == 1 else a

    _is_classifier = False

    def _check_prequential(self, return_std, method):
        if method != "predict":
            raise ValueError(f"method must be 'predict' for a regressor, got {method!r}.")

    def _moments(self, rec, lin):
        """``(mean, std)`` arrays ``(n, d)`` from the kernel's records or the torch ``(λ, Cov λ)``."""
        if rec is not None:
            dt = self._np_dtype()
            return rec[:, 3:4].astype(dt), rec[:, 4:5].astype(dt)
        f, quad = lin
        var = quad.diagonal(dim1=-2, dim2=-1)
        if self.likelihood == "poisson":
            v = var.clamp(max=60.0)
            mean = torch.exp((f + v / 2).clamp(max=Poisson.max_log_rate))
            total = torch.expm1(v) * mean * mean + mean
        else:
            mean = f
            total = var + self.filter_.likelihood.aleatoric_variance(f, self.filter_.noise)
        return mean.detach().cpu().numpy(), torch.sqrt(total).detach().cpu().numpy()

    def _format(self, n_head, body, return_std, method):
        mean, std = self._moments(*body) if body is not None else (None, None)
        if n_head:
            d = self.n_outputs_
            dt = self._np_dtype()
            nan = np.full((n_head, d), np.nan, dtype=dt)
            mean = nan if mean is None else np.concatenate([nan, mean])
            std = nan.copy() if std is None else np.concatenate([nan, std])
        if not return_std:
            return self._shape(mean)
        return self._shape(mean), self._shape(std)

    def predict(self, X, return_std=False):
        """Predictive mean of ``y`` (and standard deviation) for the events ``X`` (linearised; the
        compiled DEKF computes it where it serves the model)."""
        rec, lin = self._predict_rows(X)
        if rec is not None and not return_std:
            mean = rec[:, 3].astype(self._np_dtype())
            return mean if self._y_ndim == 1 else mean[:, None]
        mean, std = self._moments(rec, lin)
        if not return_std:
            return self._shape(mean)
        return self._shape(mean), self._shape(std)

    def sample_y(self, X, n_samples=1, random_state=None, include_noise=True):
        """Thompson draws of ``y`` for the events ``X``, shape ``(n, n_samples)`` (``(n, n_outputs,
        n_samples)`` for several outputs): each entity is drawn once per sample and shared by the
        rows involving it; with ``include_noise`` the observation noise is added."""
        check_is_fitted(self, "filter_")
        ids, context = self._validate(X, None, first=False)
        gen = torch.Generator().manual_seed(int(check_random_state(random_state).randint(2**31 - 1)))
        lam = self.filter_.sample_signal(self._slot_ids(ids), self._slot_values(ids, context), n_samples, gen)
        if self.likelihood == "poisson":
            rate = torch.exp(lam.clamp(max=Poisson.max_log_rate))
            draws = torch.poisson(rate.cpu(), generator=gen) if include_noise else rate
        else:
            draws = lam
            if include_noise:
                r = self.filter_.likelihood.aleatoric_variance(lam, self.filter_.noise)
                draws = lam + torch.sqrt(r) * torch.randn(lam.shape, generator=gen, dtype=lam.dtype).to(lam.device)
        out = draws.detach().cpu().numpy()  # (S, n, d)
        out = np.moveaxis(out, 0, -1)  # (n, d, S)
        return out[:, 0, :] if self._y_ndim == 1 else out


class FactorizationClassifier(ClassifierMixin, _FactorizationBase):
    __doc__ = f"""Online factorization-model classification (clicks, choices) by the decoupled EKF.

    Two classes: one logit ``λ`` with a Bernoulli likelihood (the paper's experiments); more: one
    logit per class (each entity holds a factor vector per class) with the categorical likelihood.
    Probabilities integrate the logit's uncertainty by the probit approximation.

    Parameters
    ----------
{_MODEL_DOC.format(scale="``s = 1`` on the logit scale", centre="0", context="10")}
    likelihood : {{'adf', 'categorical'}}, default='adf'
        How a labelled event updates the entities: ``'adf'``, assumed density filtering — the
        moments of the one-event posterior under the logits' uncertainty ``J Σ⁻ Jᵀ``
        (:class:`~skfilter.likelihoods.AssumedDensityCategorical`, the network classifiers'
        default; the compiled DEKF runs it for two classes); ``'categorical'``, the paper's EKF
        update (Bernoulli for two classes), which linearises the likelihood at the predicted logits
        as if they were known and leaves one-pass probabilities under-confident (``doc/calibration.md``:
        on iris / wine / breast cancer, held-out log-loss 0.322 / 0.173 / 0.138 with the EKF update
        and the earlier context prior, 0.221 / 0.077 / 0.103 with ``'adf'`` and the present one).
{_REST_DOC}

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    filter_ : skfilter.factorization.FactorizationFilter
    entity_columns_ : tuple of int
    n_features_in_ : int
    n_samples_seen_ : int
        Events learned (every pass counts).
    n_iter_ : int
        Passes made on the current stream.

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter import FactorizationClassifier
    >>> rng = np.random.default_rng(0)
    >>> users, items = rng.integers(0, 30, 2000), rng.integers(0, 8, 2000)
    >>> X = np.column_stack([users, items])  # integer user and item ids
    >>> clicks = (rng.random(2000) < 1 / (1 + np.exp(-(items - 3.5)))).astype(int)
    >>> clf = FactorizationClassifier(model="mf", n_factors=2, random_state=0).fit(X, clicks)
    >>> clf.predict_proba([[0, 7], [0, 0]])[:, 1].round(1)
    array([0.9, 0.1])
    """

    def __init__(self, model="fm", *, entity_columns="auto", n_factors=8, order=2, biases=True,
                 prior_variance="auto", n_prior_rows=50, bias_variance="auto", init_scale=0.5, half_life=None,
                 drift_variance="auto",
                 reference="learned", context_blocks="auto", iterations=1, tol=1e-8, likelihood="adf", n_epochs=1,
                 warm_start=False, verbose=0, random_state=None, device="cpu", dtype=None):
        self._store_init_params(locals())

    _parameter_constraints = {**_FactorizationBase._parameter_constraints,
                              "likelihood": [StrOptions({"adf", "categorical"})]}

    def _encode(self, y, first, classes, n):
        if y is None:
            raise ValueError("requires y to be passed, but the target y is None.")
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            import warnings

            from sklearn.exceptions import DataConversionWarning

            warnings.warn("A column-vector y was passed when a 1d array was expected; it is raveled.",
                          DataConversionWarning, stacklevel=4)
            y = y[:, 0]
        if y.ndim != 1 or y.shape[0] != n:
            raise ValueError(f"y must be 1-d with one label per row ({n}); got shape {y.shape}.")
        if first:
            kind = type_of_target(y, input_name="y")
            if kind not in ("binary", "multiclass"):
                raise ValueError(f"Unknown label type: {kind}. FactorizationClassifier needs binary or multiclass "
                                 "labels.")
            labels = np.unique(y) if classes is None else np.asarray(classes)
            if classes is not None and not np.all(np.isin(np.unique(y), labels)):
                raise ValueError("y holds labels that are not in classes.")
            if len(labels) < 2 and classes is None:
                raise ValueError("The number of classes has to be greater than one; got 1 class.")
            self.classes_ = labels
        unknown = ~np.isin(y, self.classes_)
        if unknown.any():
            raise ValueError(f"y holds labels not seen in the first call: {np.unique(y[unknown]).tolist()}.")
        index = np.searchsorted(self.classes_, y) if np.all(self.classes_[:-1] <= self.classes_[1:]) else \
            np.array([int(np.flatnonzero(self.classes_ == v)[0]) for v in y])
        K = len(self.classes_)
        if K == 2:
            return index.reshape(-1, 1).astype(np.float64)
        return np.eye(K)[index]

    #: the context's prior logit variance (``10 / n_context`` per weight): under the assumed-density
    #: update the network classifiers' ``3`` left the logits of linearly separable sets too small
    #: after one pass (``doc/calibration.md``: log-loss iris/wine/breast cancer/digits 0.281/0.122/
    #: 0.122/0.195 at 3, 0.221/0.077/0.103/0.165 at 10, accuracy 0.926/0.994/0.957/0.953 at 3,
    #: 0.941/0.988/0.961/0.955 at 10)
    _context_scale_factor = 10.0

    def _n_outputs_model(self):
        return 1 if len(self.classes_) == 2 else len(self.classes_)

    def _target_statistics(self, Y, weights):
        return np.zeros(Y.shape[1]), 1.0, None

    def _make_likelihood(self, d):
        if self.likelihood == "adf":
            return AssumedDensityCategorical()
        return Bernoulli() if d == 1 else Categorical()

    def _initial_noise(self, state, scale):
        return state

    def partial_fit(self, X, y, sample_weight=None, classes=None):
        """Learn from the events ``(X, y)`` (one pass, in row order); ``classes`` on the first call
        names every label the stream will hold."""
        if self._fast_learn(X, y, sample_weight, classes):
            return self
        return self._fit(X, y, sample_weight, reset=False, classes=classes)

    def _fast_target(self, y, one):
        # two classes: the 0/1 target; more: the class index (the kernel's one-hot row, KernelPlan.learn_one)
        if one.classes is None:
            return None
        index = one.classes.get(y[0])
        return None if index is None else float(index)

    _is_classifier = True

    def _check_prequential(self, return_std, method):
        if return_std:
            raise ValueError("return_std is only available for regressors.")
        if method not in ("predict", "predict_proba", "predict_log_proba"):
            raise ValueError(f"method must be 'predict', 'predict_proba' or 'predict_log_proba', got {method!r}.")

    def _proba(self, rec, lin):
        if rec is not None:  # the kernel's record ends with the class probabilities (record_width)
            return rec[:, rec.shape[1] - max(len(self.classes_), 2):].astype(self._np_dtype())
        f, quad = lin
        p = probit_probabilities(f, shift_free_logit_variance(quad), binary=f.shape[-1] == 1)
        return p.detach().cpu().numpy()

    def _format(self, n_head, body, return_std, method):
        proba = self._proba(*body) if body is not None else None
        if n_head:
            K = len(self.classes_)
            uniform = np.full((n_head, K), 1.0 / K, dtype=self._np_dtype())
            proba = uniform if proba is None else np.concatenate([uniform, proba])
        if method == "predict_proba":
            return proba
        if method == "predict_log_proba":
            with np.errstate(divide="ignore"):
                return np.log(proba)
        return self.classes_[np.argmax(proba, axis=1)]

    def predict_proba(self, X):
        """Class probabilities ``(n, n_classes)`` under the linearised logits (probit approximation;
        the compiled DEKF computes them where it serves the model)."""
        return self._proba(*self._predict_rows(X))

    def predict(self, X):
        """The most probable class of each event."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def sample_proba(self, X, n_samples=1, random_state=None):
        """Thompson draws of the class probabilities, ``(n, n_classes, n_samples)`` (entities drawn
        once per sample, shared by the rows that involve them)."""
        check_is_fitted(self, "filter_")
        ids, context = self._validate(X, None, first=False)
        gen = torch.Generator().manual_seed(int(check_random_state(random_state).randint(2**31 - 1)))
        lam = self.filter_.sample_signal(self._slot_ids(ids), self._slot_values(ids, context), n_samples, gen)
        if lam.shape[-1] == 1:
            p1 = torch.sigmoid(lam)
            p = torch.cat([1 - p1, p1], dim=-1)
        else:
            p = torch.softmax(lam, dim=-1)
        return np.moveaxis(p.detach().cpu().numpy(), 0, -1)
