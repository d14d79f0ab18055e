"""Replay-buffer SGD/Adam baselines of the LoFi paper as scikit-learn estimators (LoFi paper §4, App. D).

:class:`ReplaySGDRegressor` and :class:`ReplaySGDClassifier` learn the same networks as the filters
by gradient descent on a sliding window of the stream ("SGD-RB", "replay SGD"; Adam-RB with
``optimizer='adam'``; online gradient descent, OGD, with ``buffer_size=1``):

1. a FIFO buffer holds the last ``B = buffer_size`` rows;
2. each new row is appended (the oldest row drops out once ``B`` rows are held);
3. ``n_inner`` optimiser steps are taken on the **mean** loss over the rows in the buffer
   (squared error for regression, cross-entropy on logits for classification), with learning
   rate ``lr``.

The network is built exactly as the filters build theirs (:func:`skfilter.models.build_module`,
seeded by the first draw of ``check_random_state(random_state)``), so a baseline and a filter with
the same ``random_state`` start from the same weights, and ``fit`` makes the same (optionally
shuffled) passes over the rows.

The training machinery is skorch's: the fitted estimator holds a
:class:`skorch.NeuralNetRegressor` (classifier: :class:`skorch.NeuralNet` with a cross-entropy
criterion) as ``net_``, whose module, criterion and optimiser do every step through skorch's
``NeuralNet.train_step`` (``infer`` → ``get_loss`` → ``backward`` → ``optimizer.step``, with the
``on_grad_computed`` callback hook). The per-row loop calls ``train_step`` directly instead of
``net_.partial_fit``: ``partial_fit`` on a 10-row buffer builds a ``Dataset`` and a ``DataLoader``,
checks the data and records history and callbacks for every row, which measured ~1,100-1,300 µs per
row on the concrete MLP 8-50-1 (2-core CI-class machine, one torch thread), against ~440-500 µs
through ``train_step`` and ~340-390 µs for a bare torch loop; the resulting weights are identical.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from ._utils import progress_bar, resolve_device, resolve_dtype
from .exceptions import FilterStepError
from .models import build_module
from ._validation import (
    DEVICE_PARAMETER_CONSTRAINTS,
    NETWORK_PARAMETER_CONSTRAINTS,
    ValidatedParamsMixin,
    check_class_module_outputs,
    check_network_params,
    check_no_unknown_kwargs,
    check_parameter_constraints,
    raise_invalid_parameter,
    encode_class_labels,
    regression_target_matrix,
    PrefixedParamsMixin,
    ProbabilisticClassifierMixin,
    unchanged_on_error,
)

try:  # skorch is an optional dependency of skfilter: only these baselines need it
    import skorch
except ImportError as _exc:  # pragma: no cover - exercised only without skorch
    skorch = None
    _SKORCH_ERROR = _exc
else:
    _SKORCH_ERROR = None

__all__ = ["ReplaySGDRegressor", "ReplaySGDClassifier"]

#: optimiser names accepted by ``optimizer`` (a ``torch.optim.Optimizer`` subclass is accepted too)
OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}

#: prefixes of the keyword parameters stored like skorch's (``module__<name>``, ``optimizer__<name>``)
_KWARG_PREFIXES = ("module__", "optimizer__")


def _to_tensor(a, dtype, device) -> torch.Tensor:
    """A copy of the array ``a`` as a tensor (also for read-only arrays, e.g. memory maps)."""
    return torch.from_numpy(np.array(a, copy=True)).to(device=device, dtype=dtype)


def _isfinite(t: torch.Tensor) -> bool:
    """Whether a scalar tensor is finite."""
    return bool(torch.isfinite(t.detach()).all())


def _all_finite(tensors) -> bool:
    """Whether every tensor in ``tensors`` is finite (one reduction and one host sync)."""
    norms = torch._foreach_norm(tensors) if hasattr(torch, "_foreach_norm") else [t.norm() for t in tensors]
    return bool(torch.isfinite(torch.stack([n.to(torch.float64) for n in norms])).all())


class _ReplayBase(ValidatedParamsMixin, PrefixedParamsMixin, BaseEstimator):
    """Shared machinery of the replay-buffer baselines (module docstring). Not for direct use."""

    _param_prefixes = _KWARG_PREFIXES

    # -- parameters ---------------------------------------------------------------------------
    #: scikit-learn's constraints of the baselines' parameters (``module__*``/``optimizer__*``
    #: keyword arguments are checked by :func:`~skfilter._validation.check_no_unknown_kwargs` and
    #: by the module and optimiser they are given to)
    _parameter_constraints: dict = {
        **NETWORK_PARAMETER_CONSTRAINTS,
        **DEVICE_PARAMETER_CONSTRAINTS,
        "buffer_size": [Interval(Integral, 1, None, closed="left")],
        "n_inner": [Interval(Integral, 1, None, closed="left")],
        "optimizer": [StrOptions(set(OPTIMIZERS)), type],
        "lr": [Interval(Real, 0, None, closed="neither")],
    }

    def _resolve_params(self) -> dict:
        if skorch is None:  # pragma: no cover
            raise ImportError("The replay-buffer baselines need skorch: pip install skorch") from _SKORCH_ERROR
        check_no_unknown_kwargs(self, self._param_prefixes)
        check_parameter_constraints(self)
        device = resolve_device(self.device)
        opt = self.optimizer
        if isinstance(opt, str):
            opt = OPTIMIZERS[opt]
        elif not issubclass(opt, torch.optim.Optimizer):
            raise_invalid_parameter(self, "optimizer", f"a str among {sorted(OPTIMIZERS)} or a "
                                    "torch.optim.Optimizer subclass", opt)
        cfg = {
            "device": device,
            "dtype": resolve_dtype(self.dtype, device),
            "buffer_size": int(self.buffer_size),
            "n_inner": int(self.n_inner),
            "lr": float(self.lr),
            "optimizer": opt,
        }
        cfg.update(check_network_params(self))
        return cfg

    # -- building -------------------------------------------------------------------------------
    def _initialize(self, X, cfg):
        """Build the module (same seed derivation as the filters), the skorch net and the buffer."""
        rng = check_random_state(self.random_state)
        seed = int(rng.randint(0, 2**31 - 1))
        module = build_module(
            self.module, self._prefixed("module__"), n_inputs=X.shape[1], n_outputs=self._n_model_outputs(),
            hidden_layer_sizes=cfg["hidden_layer_sizes"], activation=self.activation, seed=seed,
        )
        module = module.to(device=cfg["device"], dtype=cfg["dtype"])
        with torch.no_grad():
            probe = module(torch.zeros(1, X.shape[1], device=cfg["device"], dtype=cfg["dtype"]))
        self._check_module_outputs(int(probe.reshape(1, -1).shape[1]))
        net_kwargs = {f"optimizer__{k}": v for k, v in self._prefixed("optimizer__").items()}
        self.net_ = self._make_net(module, cfg, net_kwargs)
        self.net_.initialize()
        self.module_ = self.net_.module_
        self._params = list(self.module_.parameters())
        # the filters draw their shuffle seed second: same shuffled passes for the same random_state
        self._shuffle_rng = np.random.RandomState(int(rng.randint(0, 2**31 - 1)))
        self._device, self._dtype = cfg["device"], cfg["dtype"]
        B = cfg["buffer_size"]
        self._buf_X = torch.zeros(B, X.shape[1], device=cfg["device"], dtype=cfg["dtype"])
        self._buf_Y = self._empty_targets(B, cfg)
        self._buf_pos = 0  # where the next row goes (the oldest row once the buffer is full)
        self._buf_count = 0
        self._snapshot = None
        self.n_samples_seen_ = 0
        self._reset_residuals(cfg)

    def _make_net(self, module, cfg, net_kwargs):
        return self._net_class()(
            module=module, optimizer=cfg["optimizer"], lr=cfg["lr"], batch_size=cfg["buffer_size"],
            max_epochs=cfg["n_inner"], train_split=None, callbacks="disable", device=cfg["device"], verbose=0,
            **self._criterion_kwargs(), **net_kwargs,
        )

    def _state_tensors(self):
        """Parameters and optimiser-state tensors: what a failed row must restore."""
        opt = self.net_.optimizer_
        state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
        return [p.data for p in self._params] + state

    def _take_snapshot(self):
        """Copy the parameters and optimiser state before a row (one fused copy per row)."""
        tensors = self._state_tensors()
        snap = self._snapshot
        if snap is None or len(snap) != len(tensors):  # _move() drops the snapshot
            self._snapshot = [t.detach().clone() for t in tensors]
        else:
            torch._foreach_copy_(snap, tensors)
        self._snapshot_len = len(tensors)

    def _restore_snapshot(self):
        """Undo the steps of the current row (the optimiser state it created, if any, is dropped)."""
        tensors = self._state_tensors()
        if len(tensors) != self._snapshot_len:  # the optimiser made its state during this row
            self.net_.optimizer_.state.clear()
            tensors = self._state_tensors()
        with torch.no_grad():
            torch._foreach_copy_(tensors, self._snapshot[: len(tensors)])

    def _move(self, device, dtype):
        """Move a fitted estimator to another device/dtype (after ``set_params(device=...)``)."""
        self.net_.module_.to(device=device, dtype=dtype)
        for s in self.net_.optimizer_.state.values():
            for k, v in s.items():
                if torch.is_tensor(v) and v.dim() > 0:
                    s[k] = v.to(device=device, dtype=dtype)
        self.net_.device = device
        self._buf_X = self._buf_X.to(device=device, dtype=dtype)
        self._buf_Y = self._buf_Y.to(device=device, dtype=dtype if self._buf_Y.is_floating_point() else None)
        self._move_residuals(device, dtype)
        self._snapshot = None
        self._device, self._dtype = device, dtype

    # -- fitting --------------------------------------------------------------------------------
    def _fit(self, X, y, sample_weight=None, *, reset, classes=None, n_epochs=None, record=False):
        """Validate, (re)initialise if needed, then stream the rows (see :meth:`_stream`)."""
        with unchanged_on_error(self):
            if sample_weight is not None:
                raise ValueError(f"{type(self).__name__} does not support sample_weight.")
            cfg = self._check_params()
            first = reset or not hasattr(self, "net_")
            if not first:
                check_is_fitted(self)
            X, y = validate_data(self, X, y, reset=first, accept_sparse=False, dtype=np.float64,
                                 ensure_all_finite=True, **self._y_validation_kwargs())
            Y = self._encode_targets(y, first=first, classes=classes)
            if first:
                self._initialize(X, cfg)
            elif cfg["device"] != self._device or cfg["dtype"] != self._dtype:
                self._move(cfg["device"], cfg["dtype"])
            else:  # lr / optimizer__* may have been changed by set_params since the last call
                for group in self.net_.optimizer_.param_groups:
                    group["lr"] = cfg["lr"]
            Xt = _to_tensor(X, self._dtype, self._device)
            Yt = self._target_tensor(Y)
        n_epochs = cfg["n_epochs"] if n_epochs is None else n_epochs
        return self._stream(Xt, Yt, n_epochs, cfg["n_inner"], record=record, fresh=first)

    def _stream(self, Xt, Yt, n_epochs, n_inner, record=False, fresh=False):
        """``n_epochs`` passes over the rows (later ones shuffled if ``shuffle``), one buffer update
        and ``n_inner`` optimiser steps per row. With ``record``, returns the one-step-ahead output
        (the prediction of each row before any step that uses it) of the last pass."""
        net = self.net_
        B = self._buf_X.shape[0]
        n = Xt.shape[0]
        bar = progress_bar(self.verbose, n_epochs * n, type(self).__name__)
        out = self._record_buffer(n) if record else None
        try:
            for epoch in range(n_epochs):
                if epoch > 0 and self.shuffle:
                    perm = torch.as_tensor(self._shuffle_rng.permutation(n), device=Xt.device)
                    Xe, Ye = Xt[perm], Yt[perm]
                else:
                    Xe, Ye = Xt, Yt
                if epoch > 0 or fresh:
                    self._reset_residuals(None)
                for i in range(n):
                    pos, count = self._buf_pos, self._buf_count
                    self._take_snapshot()
                    old_x, old_y = self._buf_X[pos].clone(), self._buf_Y[pos].clone()
                    self._buf_X[pos] = Xe[i]
                    self._buf_Y[pos] = Ye[i]
                    m = min(count + 1, B)
                    batch = (self._buf_X[:m], self._buf_Y[:m])
                    first_out = None
                    for k in range(n_inner):
                        step = net.train_step(batch)
                        if k == 0:
                            first_out = step["y_pred"][pos].detach()
                    if not (_isfinite(step["loss"]) and _all_finite(self._state_tensors())):
                        self._restore_snapshot()
                        self._buf_X[pos], self._buf_Y[pos] = old_x, old_y
                        raise FilterStepError(
                            f"{type(self).__name__}: the optimiser step on row {i} of pass {epoch} gave "
                            f"non-finite weights (lr={self.lr!r} is probably too large); the weights "
                            "and optimiser state before that row are kept.", step=i)
                    self._buf_pos, self._buf_count = (pos + 1) % B, m
                    if out is not None and epoch == n_epochs - 1:
                        self._record(out, i, first_out, Ye[i])
                    self._update_residuals(first_out, Ye[i])
                    self.n_samples_seen_ += 1
                    if bar is not None:
                        bar.update(1)
        finally:
            net.module_.eval()
            if bar is not None:
                bar.close()
        return out

    def fit(self, X, y):
        """Learn from the stream ``(X, y)`` starting from fresh weights and an empty buffer.

        Makes ``n_epochs`` passes over the rows: the first in row order, later ones shuffled if
        ``shuffle`` (the passes form one long stream; the buffer carries over between passes).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs, one row per time step.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets.

        Returns
        -------
        self : object
        """
        self._fit(X, y, reset=True)
        return self

    # -- prediction ---------------------------------------------------------------------------
    @torch.no_grad()
    def _forward(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, accept_sparse=False, dtype=np.float64, ensure_all_finite=True)
        module = self.net_.module_
        module.eval()
        Xt = _to_tensor(X, self._dtype, self._device)
        return module(Xt).reshape(X.shape[0], -1)

    @property
    def buffer_X_(self):
        """Rows held in the replay buffer, oldest first: ndarray of shape (n_buffered, n_features)."""
        check_is_fitted(self)
        return self._buffer_order(self._buf_X).detach().cpu().numpy().astype(np.float64)

    def _buffer_order(self, buf):
        B = buf.shape[0]
        if self._buf_count < B:
            return buf[: self._buf_count]
        idx = [(self._buf_pos + j) % B for j in range(B)]
        return buf[idx]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


class ReplaySGDRegressor(RegressorMixin, _ReplayBase):
    """Neural-network regression by SGD/Adam on a FIFO replay buffer (SGD-RB; OGD for ``B = 1``).

    After each new row the buffer of the last ``buffer_size`` rows is updated and ``n_inner``
    optimiser steps are taken on its mean squared error (LoFi paper §4, App. D; built on skorch, see the
    module docstring). The baseline of the LoFi paper's UCI and image experiments.

    A point estimate has no parameter uncertainty: ``predict(X, return_std=True)`` returns the
    root-mean-square of the one-step-ahead errors (each row predicted before any step that uses
    it) over the last pass, the same for every input (a plug-in Gaussian predictive, for NLPD).

    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(50,)
        Hidden widths of the default MLP (ignored when ``module`` is given; ``()`` is a linear
        model), as the filters' (50 units: the LoFi paper's UCI setting).
    activation : {'relu', 'tanh', 'logistic', 'identity', 'elu'}, default='relu'
        Hidden non-linearity of the default MLP.
    module : torch.nn.Module class or instance, default=None
        The network. A class is instantiated with the ``module__<name>`` keyword arguments (its
        initialisation seeded by ``random_state``); an instance is copied and trained from its
        current weights. ``None``: the filters' default MLP (LeCun-normal weights, zero biases),
        drawn as a filter with the same ``random_state`` draws it: the same initial weights as a
        filter with a float ``prior_variance`` (under the filters' default ``'auto'`` their MLP
        also standardises its inputs and, for regression, scales its output layer to the targets).
        The inputs are used as given: standardise the features (and regression targets), as for
        scikit-learn's MLPs.
    buffer_size : int, default=10
        ``B``, rows kept in the FIFO replay buffer (1: online gradient descent).
    n_inner : int, default=1
        Optimiser steps on the buffer's mean loss after each new row.
    optimizer : {'sgd', 'adam', 'adamw'} or torch.optim.Optimizer subclass, default='adam'
        The optimiser (skorch convention: further arguments as ``optimizer__<name>=value``, e.g.
        ``optimizer__momentum=0.9``, ``optimizer__weight_decay=1e-4``). The default is Adam
        because its steps are bounded by about ``lr`` per weight whatever the scale of the
        inputs; a plain ``'sgd'`` step grows with ``|x|²`` and diverges with the default ``lr``
        on unstandardised inputs of magnitude ~10 (use ``optimizer='sgd'`` for the paper's
        SGD-RB, on standardised data).
    lr : float, default=0.01
        Learning rate.
    n_epochs : int, default=1
        Passes over the data in :meth:`fit` (``partial_fit`` always makes one).
    shuffle : bool, default=False
        Shuffle the rows before every pass after the first (the first is in row order).
    random_state : int, RandomState instance or None, default=None
        Seeds the initial weights and the shuffles (drawn as the filters draw theirs).
    device : str or torch.device, default='cpu'
        Where the network is trained ('cpu', 'cuda', 'cuda:1', …).
    dtype : {None, 'float64', 'float32'}, default=None
        ``None``: float64 on the CPU, float32 on a GPU.
    verbose : int, default=0
        Show a progress bar while fitting when > 0.
    **kwargs
        ``module__<name>=value`` (constructor arguments of a ``module`` class) and
        ``optimizer__<name>=value`` (optimiser arguments), as in skorch.

    Attributes
    ----------
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` had string column names.
    net_ : skorch.NeuralNet
        The initialised skorch net (``net_.module_``, ``net_.optimizer_``, ``net_.criterion_``)
        that takes every optimiser step.
    module_ : torch.nn.Module
        The trained network (``net_.module_``).
    buffer_X_ : ndarray of shape (n_buffered, n_features)
        The rows in the replay buffer, oldest first.
    n_samples_seen_ : int
        Rows learned so far (every pass counts).
    n_outputs_ : int
        Number of targets.
    noise_variance_ : ndarray of shape (n_outputs,)
        Mean squared one-step-ahead error per output, over the rows of the last pass of
        :meth:`fit` and of the :meth:`partial_fit` calls that followed it.

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter.baselines import ReplaySGDRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 3)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=300)
    >>> reg = ReplaySGDRegressor(hidden_layer_sizes=(20,), buffer_size=10, optimizer="adam", lr=0.01,
    ...                          n_epochs=3, shuffle=True, random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:2], return_std=True)
    >>> mean.shape, reg.buffer_X_.shape, bool(std[0] < 0.5)
    ((2,), (10, 3), True)
    """

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, buffer_size=10, n_inner=1,
                 optimizer="adam", lr=0.01, n_epochs=1, shuffle=False, random_state=None, device="cpu",
                 dtype=None, verbose=0, **kwargs):
        self._store_init_params(locals())

    # -- targets --------------------------------------------------------------------------------
    def _net_class(self):
        return skorch.NeuralNetRegressor

    def _criterion_kwargs(self):
        return {"criterion": torch.nn.MSELoss}

    def _y_validation_kwargs(self):
        return {"multi_output": True, "y_numeric": True}

    def _encode_targets(self, y, first, classes=None):
        return regression_target_matrix(self, y, first)

    def _n_model_outputs(self):
        return self.n_outputs_

    def _check_module_outputs(self, n_outputs):
        if n_outputs != self.n_outputs_:
            raise ValueError(f"The module has {n_outputs} output(s) but y has {self.n_outputs_}.")

    def _empty_targets(self, B, cfg):
        return torch.zeros(B, self.n_outputs_, device=cfg["device"], dtype=cfg["dtype"])

    def _target_tensor(self, Y):
        return _to_tensor(Y, self._dtype, self._device)

    # -- one-step-ahead residuals (plug-in noise variance) -------------------------------------
    def _reset_residuals(self, cfg):
        device = self._device if cfg is None else cfg["device"]
        dtype = self._dtype if cfg is None else cfg["dtype"]
        self._sq_err = torch.zeros(self.n_outputs_, device=device, dtype=dtype)
        self._n_err = 0

    def _move_residuals(self, device, dtype):
        self._sq_err = self._sq_err.to(device=device, dtype=dtype)

    def _update_residuals(self, f, y):
        self._sq_err += (y - f) ** 2
        self._n_err += 1

    def _current_noise_variance(self):
        if self._n_err == 0:
            return torch.ones_like(self._sq_err)
        return self._sq_err / self._n_err

    def _record_buffer(self, n):
        return torch.empty(n, 2 * self.n_outputs_, device=self._device, dtype=self._dtype)

    def _record(self, out, i, f, y):
        C = self.n_outputs_
        out[i, :C] = f
        out[i, C:] = self._current_noise_variance()  # before this row's error is known

    @property
    def noise_variance_(self):
        """Mean squared one-step-ahead error per output (see the class docstring)."""
        check_is_fitted(self)
        return self._current_noise_variance().detach().cpu().numpy().astype(np.float64)

    # -- public API -----------------------------------------------------------------------------
    def partial_fit(self, X, y):
        """Continue learning from ``(X, y)`` (one pass, in row order); the first call starts afresh.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)

        Returns
        -------
        self : object
        """
        self._fit(X, y, reset=False, n_epochs=1)
        return self

    def _shape_output(self, a):
        return a[:, 0] if self._y_ndim == 1 else a

    def predict(self, X, return_std=False):
        """Network output at ``X`` (and the plug-in predictive standard deviation).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return ``sqrt(noise_variance_)`` for every row (class docstring).

        Returns
        -------
        y_mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        y_std : ndarray of the same shape
            Only when ``return_std``.
        """
        f = self._forward(X).detach().cpu().numpy().astype(np.float64)
        mean = self._shape_output(f)
        if not return_std:
            return mean
        std = np.broadcast_to(np.sqrt(self.noise_variance_), f.shape).copy()
        return mean, self._shape_output(std)

    def prequential_fit_predict(self, X, y, *, return_std=False, method="predict", sample_weight=None,
                                classes=None):
        """Fit from the initial weights on the stream ``(X, y)`` (one pass, in row order) and return
        the one-step-ahead prediction of every row, made before any optimiser step that uses it.

        The estimator is left fitted on the whole stream, as after ``fit`` with ``n_epochs=1``. This
        is the interface :func:`skfilter.model_selection.prequential_predict` calls.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        return_std : bool, default=False
            Also return the plug-in standard deviation: the root-mean-square of the one-step-ahead
            errors of the rows before (class docstring).
        method : {'predict'}, default='predict'
            Regressors predict means only.
        sample_weight : None
            Not supported (an error unless ``None``).
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
        >>> from skfilter.baselines import ReplaySGDRegressor
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(50, 2)); y = X @ [1.0, -2.0]
        >>> reg = ReplaySGDRegressor(hidden_layer_sizes=(), optimizer="adam", random_state=0)
        >>> mean, std = reg.prequential_fit_predict(X, y, return_std=True)
        >>> mean.shape, std.shape, reg.n_samples_seen_
        ((50,), (50,), 50)
        """
        if classes is not None:
            raise ValueError("classes only applies to classifiers.")
        if method != "predict":
            raise ValueError(f"method must be 'predict' for a regressor, got {method!r}.")
        rec = self._fit(X, y, sample_weight, reset=True, n_epochs=1, record=True)
        C = self.n_outputs_
        rec = rec.detach().cpu().numpy().astype(np.float64)
        mean = self._shape_output(rec[:, :C])
        if not return_std:
            return mean
        return mean, self._shape_output(np.sqrt(rec[:, C:]))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags


class ReplaySGDClassifier(ProbabilisticClassifierMixin, ClassifierMixin, _ReplayBase):
    """Neural-network classification by SGD/Adam on a FIFO replay buffer (SGD-RB, Adam-RB, OGD).

    After each new row the buffer of the last ``buffer_size`` rows is updated and ``n_inner``
    optimiser steps are taken on its mean cross-entropy (LoFi paper §4, App. D; built on skorch, see the
    module docstring). The module outputs logits: one per class, or a single logit (sigmoid,
    binary cross-entropy) for two classes, which the default MLP uses, as the filter classifiers.

    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(50,)
        Hidden widths of the default MLP (ignored when ``module`` is given; ``()`` is a linear
        model), as the filters' (50 units: the LoFi paper's UCI setting).
    activation : {'relu', 'tanh', 'logistic', 'identity', 'elu'}, default='relu'
        Hidden non-linearity of the default MLP.
    module : torch.nn.Module class or instance, default=None
        The network. A class is instantiated with the ``module__<name>`` keyword arguments (its
        initialisation seeded by ``random_state``); an instance is copied and trained from its
        current weights. ``None``: the filters' default MLP (LeCun-normal weights, zero biases),
        drawn as a filter with the same ``random_state`` draws it: the same initial weights as a
        filter with a float ``prior_variance`` (under the filters' default ``'auto'`` their MLP
        also standardises its inputs and, for regression, scales its output layer to the targets).
        The inputs are used as given: standardise the features (and regression targets), as for
        scikit-learn's MLPs.
    buffer_size : int, default=10
        ``B``, rows kept in the FIFO replay buffer (1: online gradient descent).
    n_inner : int, default=1
        Optimiser steps on the buffer's mean loss after each new row.
    optimizer : {'sgd', 'adam', 'adamw'} or torch.optim.Optimizer subclass, default='adam'
        The optimiser (skorch convention: further arguments as ``optimizer__<name>=value``, e.g.
        ``optimizer__momentum=0.9``, ``optimizer__weight_decay=1e-4``). The default is Adam
        because its steps are bounded by about ``lr`` per weight whatever the scale of the
        inputs; a plain ``'sgd'`` step grows with ``|x|²`` and diverges with the default ``lr``
        on unstandardised inputs of magnitude ~10 (use ``optimizer='sgd'`` for the paper's
        SGD-RB, on standardised data).
    lr : float, default=0.01
        Learning rate.
    n_epochs : int, default=1
        Passes over the data in :meth:`fit` (``partial_fit`` always makes one).
    shuffle : bool, default=False
        Shuffle the rows before every pass after the first (the first is in row order).
    random_state : int, RandomState instance or None, default=None
        Seeds the initial weights and the shuffles (drawn as the filters draw theirs).
    device : str or torch.device, default='cpu'
        Where the network is trained ('cpu', 'cuda', 'cuda:1', …).
    dtype : {None, 'float64', 'float32'}, default=None
        ``None``: float64 on the CPU, float32 on a GPU.
    verbose : int, default=0
        Show a progress bar while fitting when > 0.
    **kwargs
        ``module__<name>=value`` (constructor arguments of a ``module`` class) and
        ``optimizer__<name>=value`` (optimiser arguments), as in skorch.

    Attributes
    ----------
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` had string column names.
    net_ : skorch.NeuralNet
        The initialised skorch net (``net_.module_``, ``net_.optimizer_``, ``net_.criterion_``)
        that takes every optimiser step.
    module_ : torch.nn.Module
        The trained network (``net_.module_``).
    buffer_X_ : ndarray of shape (n_buffered, n_features)
        The rows in the replay buffer, oldest first.
    n_samples_seen_ : int
        Rows learned so far (every pass counts).
    classes_ : ndarray of shape (n_classes,)

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter.baselines import ReplaySGDClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); y = np.where(X[:, 0] + X[:, 1] > 0, "yes", "no")
    >>> clf = ReplaySGDClassifier(hidden_layer_sizes=(10,), optimizer="adam", lr=0.01,
    ...                           random_state=0).fit(X, y)
    >>> clf.predict([[2.0, 2.0], [-2.0, -2.0]])
    array(['yes', 'no'], dtype='<U3')
    """

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, buffer_size=10, n_inner=1,
                 optimizer="adam", lr=0.01, n_epochs=1, shuffle=False, random_state=None, device="cpu",
                 dtype=None, verbose=0, **kwargs):
        self._store_init_params(locals())

    # -- targets --------------------------------------------------------------------------------
    def _net_class(self):
        return skorch.NeuralNet

    def _criterion_kwargs(self):
        return {"criterion": torch.nn.BCEWithLogitsLoss if self._binary_logit else torch.nn.CrossEntropyLoss}

    def _y_validation_kwargs(self):
        return {}

    def _encode_targets(self, y, first, classes=None):
        return encode_class_labels(self, y, first, classes)

    def _n_model_outputs(self):
        K = len(self.classes_)
        return 1 if K == 2 else K

    def _check_module_outputs(self, n_outputs):
        check_class_module_outputs(n_outputs, len(self.classes_))
        self._binary_logit = n_outputs == 1

    def _empty_targets(self, B, cfg):
        if self._binary_logit:
            return torch.zeros(B, 1, device=cfg["device"], dtype=cfg["dtype"])
        return torch.zeros(B, device=cfg["device"], dtype=torch.long)

    def _target_tensor(self, index):
        if self._binary_logit:
            return _to_tensor(index.reshape(-1, 1), self._dtype, self._device)
        return _to_tensor(index, torch.long, self._device)

    def _reset_residuals(self, cfg):
        pass

    def _move_residuals(self, device, dtype):
        pass

    def _update_residuals(self, f, y):
        pass

    def _record_buffer(self, n):
        return torch.empty(n, len(self.classes_), device=self._device, dtype=self._dtype)

    def _probs(self, logits):
        if logits.shape[-1] == 1:
            p1 = torch.sigmoid(logits)
            return torch.cat([1 - p1, p1], dim=-1)
        return torch.softmax(logits, dim=-1)

    def _record(self, out, i, f, y):
        out[i] = self._probs(f.reshape(1, -1))[0]

    # -- public API -----------------------------------------------------------------------------
    def partial_fit(self, X, y, classes=None):
        """Continue learning from ``(X, y)`` (one pass, in row order).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        classes : array-like of shape (n_classes,), default=None
            All the classes of the stream; required on the first call, optional afterwards.

        Returns
        -------
        self : object
        """
        if not hasattr(self, "net_") and classes is None:
            raise ValueError("classes must be passed on the first call to partial_fit.")
        self._fit(X, y, reset=False, classes=classes, n_epochs=1)
        return self

    def predict_proba(self, X):
        """Class probabilities of the network (softmax or sigmoid of its logits).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Columns in the order of ``classes_``.
        """
        return self._probs(self._forward(X)).detach().cpu().numpy().astype(np.float64)

    def prequential_fit_predict(self, X, y, *, return_std=False, method="predict", sample_weight=None,
                                classes=None):
        """Fit from the initial weights on the stream ``(X, y)`` (one pass, in row order) and return
        the one-step-ahead prediction of every row, made before any optimiser step that uses it.

        The estimator is left fitted on the whole stream, as after ``fit`` with ``n_epochs=1``. This
        is the interface :func:`skfilter.model_selection.prequential_predict` calls.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        return_std : False
            Regressors only; must be ``False``.
        method : {'predict', 'predict_proba', 'predict_log_proba'}, default='predict'
            Labels, class probabilities or their logarithms.
        sample_weight : None
            Not supported (an error unless ``None``).
        classes : array-like of shape (n_classes,), default=None
            All the classes of the stream (default: those in ``y``).

        Returns
        -------
        pred : ndarray of shape (n_samples,) or (n_samples, n_classes)
            Labels, or probabilities with columns in the order of ``classes_``.

        Examples
        --------
        >>> import numpy as np
        >>> from skfilter.baselines import ReplaySGDClassifier
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(50, 2)); y = (X[:, 0] > 0).astype(int)
        >>> clf = ReplaySGDClassifier(hidden_layer_sizes=(), optimizer="adam", random_state=0)
        >>> clf.prequential_fit_predict(X, y, method="predict_proba").shape
        (50, 2)
        """
        if return_std:
            raise ValueError("return_std is only available for regressors.")
        if method not in ("predict", "predict_proba", "predict_log_proba"):
            raise ValueError(f"method must be 'predict', 'predict_proba' or 'predict_log_proba', got {method!r}.")
        rec = self._fit(X, y, sample_weight, reset=True, classes=classes, n_epochs=1, record=True)
        proba = rec.detach().cpu().numpy().astype(np.float64)
        if method == "predict_proba":
            return proba
        if method == "predict_log_proba":
            with np.errstate(divide="ignore"):
                return np.log(proba)
        return self.classes_[np.argmax(proba, axis=1)]
