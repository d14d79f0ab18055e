"""Subspace filters for large networks: the subspace EKF and PULSE (Duran-Martin 2025, thesis §5.1–§5.2).

A full-covariance filter over ``D`` weights holds ``D²`` numbers. These filters learn a few
coordinates instead, fixed by a warm-up (:class:`~skfilter.warmup.SubspaceWarmup`: Adam on the first
rows, the top-``d`` right-singular vectors ``A`` of its iterates and its last iterate ``θ*``):

===================================  =========================================================  ================================
estimators                           parameters the filter learns                               cost per row (``C`` outputs)
===================================  =========================================================  ================================
:class:`SubspaceRegressor`,          ``z`` (``d``) with ``θ = A z + θ*`` (thesis Alg. 12, the   ``O(C D d + d³)``; memory
:class:`SubspaceClassifier`          EKF in the subspace; any structure over ``z``)             ``O(D d + d²)``
:class:`PULSERegressor`,             the hidden layers' ``z`` (``ψ = A z + ψ*``) and the last   ``O(C D d + d³ + D_l³)``
:class:`PULSEClassifier`             layer ``w`` itself, block mean-field ``N(z) N(w)``
                                     (Theorem 5.3, Alg. 14 corrected)
===================================  =========================================================  ================================

**Subspace EKF** (§5.1, Alg. 12 corrected). ``h(z, x) = h(A z + θ*, x)`` with Jacobian
``J = H A`` (``H = ∂h/∂θ`` at ``A μ + θ*``, never a ``D × D`` matrix); the EKF (or VD/FD-EKF, or
LoFi when ``d`` is large: ``covariance``) runs on ``z``, prior ``N(0, Σ_z)``. With ``A = I`` and
``θ* = 0`` it is the EKF on the weights.

**PULSE** (§5.2). The hidden weights are projected, ``ψ = A z + ψ*``, the last layer ``w`` keeps its
own coordinates, and the belief is ``N(z | m_z, P_z) N(w | m_w, P_w)``: each block's precision is
that block of the exact (linearised) posterior, ``P⁻¹ ← P⁻¹ + J_bᵀ R⁻¹ J_b``, and the means solve
the coupled fixed point of Theorem 5.3, whose solution is the joint EKF mean update under the prior
``blockdiag(P_z, P_w)`` (:class:`~skfilter.posteriors.BlockDiagonal` with ``coupling='mean-field'``;
``mean_update='fixed-point'`` iterates the fixed point with its stopping rule,
``'decoupled'`` is the original PULSE of Cartea et al. 2023). With a zero-dimensional effect of the
hidden block (``P_z = 0``) it is Bayesian linear regression on the last layer.

**Warm-up** (``warmup``): the stream's first ``warmup`` rows (default 200), however they arrive —
they are kept with the rows that fix the ``'auto'`` prior, one mechanism (:mod:`skfilter.stream_start`):
until they have all arrived each call warms up again on all rows so far and learns them again —, a
fraction of the first ``fit``/``partial_fit`` call's rows (rows of zero ``sample_weight`` left out; the
warm-up does not weight the others), separate data ``(X_warmup, y_warmup)``, or a fitted
:class:`~skfilter.warmup.SubspaceWarmup` (reused as is: its network, ``A`` and ``θ*``; one warm-up
with ``d`` components serves every ``n_components ≤ d``). ``warmup__<name>`` parameters set the
internal warm-up (``warmup__n_epochs=50``, ``warmup__learning_rate=1e-3``, …). The filter then
learns from every row of the stream, the warm-up rows included.

**Prior.** ``z ~ N(0, Σ_z)`` with ``Σ_z`` the diagonal of ``Aᵀ diag(v) A``, ``v`` the prior variance
of the weights (``prior_variance``: ``'auto'`` scales it to the data as for the other filters, a
float ``σ²`` gives ``Σ_z = σ² I``); PULSE's last layer ``w ~ N(w*, diag(v_last))`` around the
warm-up's last iterate (thesis: ``N(w^(E), σ_w² I)``).
"""

from __future__ import annotations

import copy
import math
import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.utils._param_validation import HasMethods, Interval, RealNotInt, StrOptions

from ._classification import FilterClassifierMixin, LikelihoodParameterMixin
from ._docstrings import filter_tail_doc
from ._estimator import BaseFilter
from ._regression import FilterRegressorMixin
from ._validation import raise_invalid_parameter
from .dynamics import Dynamics
from .likelihoods import Poisson
from .models import SubspaceAdapter, last_layer_parameters, make_adapter
from .posteriors import BlockDiagonal, DiagonalCovariance, FullCovariance, LowRankPrecision
from .priors import auto_prior
from .warmup import SubspaceWarmup

__all__ = ["SubspaceRegressor", "SubspaceClassifier", "PULSERegressor", "PULSEClassifier"]

#: fewer warm-up rows than this get a warning (the subspace is fixed for the life of the model)
_FEW_WARMUP_ROWS = 10

#: PULSE's ``mean_update`` → the coupling of :class:`~skfilter.posteriors.BlockDiagonal`
_MEAN_UPDATES = {"coupled": "mean-field", "fixed-point": "fixed-point", "decoupled": "decoupled"}


def _check_warmup_data(value):
    """``(X_warmup, y_warmup)`` as arrays, or ``ValueError``."""
    if len(value) != 2:
        raise ValueError("warmup as data must be a pair (X_warmup, y_warmup).")
    Xw, yw = np.asarray(value[0]), np.asarray(value[1])
    if Xw.ndim != 2 or Xw.shape[0] == 0 or yw.shape[0] != Xw.shape[0]:
        raise ValueError(f"warmup=(X_warmup, y_warmup) needs a 2-d X_warmup with at least one row and as many "
                         f"targets; got shapes {Xw.shape} and {yw.shape}.")
    return Xw, yw


class _SubspaceModel:
    """What the subspace filters share: the warm-up, the subspace model and its prior (module docstring).

    Subclasses set :attr:`_layout` (``'subspace'`` or ``'pulse'``) and the structure."""

    _layout = "subspace"
    _param_prefixes = ("module__", "warmup__")

    _subspace_parameter_constraints = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "warmup": [Interval(RealNotInt, 0, 1, closed="right"), Interval(Integral, 1, None, closed="left"), tuple,
                   HasMethods(["fit", "inverse_transform"])],
    }

    def _check_subspace_params(self):
        w = self.warmup
        if isinstance(w, tuple):
            _check_warmup_data(w)
        elif isinstance(w, SubspaceWarmup) and not hasattr(w, "components_"):
            raise_invalid_parameter(self, "warmup", "a fraction, a number of rows, (X_warmup, y_warmup) or a "
                                    "fitted SubspaceWarmup (this one is not fitted)", w)
        elif isinstance(w, SubspaceWarmup) and self._prefixed("warmup__"):
            raise ValueError("warmup__* parameters set the internal warm-up; they do not apply to a fitted "
                             "SubspaceWarmup given as warmup.")
        return {}

    # -- the warm-up: the stream's first rows (skfilter.stream_start) ------------------------------
    def _warmup_from_stream(self) -> bool:
        """Whether the warm-up learns from the stream's own first rows (a count or a fraction)."""
        return not isinstance(self.warmup, (tuple, SubspaceWarmup))

    def _scaled_by_data(self, cfg) -> bool:
        """The ``'auto'`` prior, or a warm-up on the stream's first rows."""
        return super()._scaled_by_data(cfg) or self._warmup_from_stream()

    def _warmup_count(self):
        """The rows of the stream the warm-up learns from: ``warmup`` rows (an integer), or the
        fraction ``warmup`` of the first call's rows (fixed by that call); None for separate data."""
        if not self._warmup_from_stream():
            return None
        if isinstance(self.warmup, Integral):
            return int(self.warmup)
        return self.__dict__.get("_warmup_rows_of_stream")

    def _prior_rows_limit(self, cfg):
        """The rows kept at the start of the stream: those of the prior and of the warm-up (one
        mechanism, :mod:`skfilter.stream_start`: until the warm-up's rows have all arrived, each call
        warms up again on all rows so far and learns them again)."""
        limit = super()._prior_rows_limit(cfg)
        count = self._warmup_count()
        return limit if count is None else max(limit or 0, count)

    def _start_stream(self, X, Y, w, cfg):
        if self._warmup_from_stream() and not isinstance(self.warmup, Integral):  # a fraction of this call
            self._warmup_rows_of_stream = max(1, int(math.ceil(float(self.warmup) * X.shape[0])))
        # the few-rows warning once per stream, at its first call: not again at each rebuild while
        # the stream's first rows arrive (skfilter.stream_start)
        self._starting_stream = True
        try:
            super()._start_stream(X, Y, w, cfg)
        finally:
            del self._starting_stream

    def _warmup_loss(self):
        """The warm-up's negative log-likelihood, the filter's likelihood's (one logit: binary)."""
        if isinstance(self._likelihood, Poisson):
            return "poisson"
        if not hasattr(self, "classes_"):
            return "mse"
        return "binary-cross-entropy" if self._network_outputs == 1 else "cross-entropy"

    def _warmup_rows(self, X, Y, weights=None):
        """The warm-up data: the stream's first rows ``X`` (as many as the warm-up takes, or all so
        far while fewer have arrived; rows of zero sample weight left out, as the filter's update
        leaves them) or separate data."""
        w = self.warmup
        if isinstance(w, tuple):
            Xw, yw = _check_warmup_data(w)
            Xw = np.asarray(Xw, dtype=np.float64)
            if Xw.shape[1] != X.shape[1]:
                raise ValueError(f"X_warmup has {Xw.shape[1]} features but X has {X.shape[1]}.")
            return Xw, self._warmup_targets(yw)
        k = min(X.shape[0], self._warmup_count() or X.shape[0])
        rows = slice(0, k)
        if weights is not None and np.any(np.asarray(weights[:k]) > 0):
            rows = np.flatnonzero(np.asarray(weights[:k]) > 0)
        return X[rows], self._warmup_targets(Y[rows], encoded=True)

    def _warmup_targets(self, y, encoded=False):
        """Targets in the form :meth:`SubspaceWarmup.fit` takes for :meth:`_warmup_loss`."""
        if hasattr(self, "classes_"):
            if not encoded:
                y = np.asarray(y)
                unknown = np.setdiff1d(np.unique(y), self.classes_)
                if unknown.size:
                    raise ValueError(f"y_warmup has labels {unknown.tolist()} that the stream does not have "
                                     f"(classes {self.classes_.tolist()}).")
                y = np.searchsorted(self.classes_, y)
            y = np.asarray(y).reshape(-1)
            return y.astype(np.float64) if self._warmup_loss() == "binary-cross-entropy" else y.astype(np.int64)
        Y = np.asarray(y, dtype=np.float64)
        return Y.reshape(Y.shape[0], -1)

    def _projected_names(self, adapter):
        """Names of the parameters the subspace spans: all (subspace EKF) or the hidden layers (PULSE)."""
        names = adapter.parameter_names
        if self._layout == "subspace":
            return names
        last = self._last_layer_names(adapter)
        return [n for n in names if n not in last]

    def _last_layer_names(self, adapter):
        """PULSE's last layer: ``last_layer`` or the one found in the module; it may not be all."""
        chosen = last_layer_parameters(adapter, self.last_layer, type(self).__name__)
        if len(chosen) == len(adapter.parameter_names):
            raise ValueError(f"{type(self).__name__} needs hidden parameters to project: the last layer {chosen} "
                             "holds every learned parameter of the module. Use a network with hidden layers.")
        return chosen

    def _fitted_warmup(self, base, X, Y, weights, cfg):
        """The warm-up of this stream and the network's adapter it belongs to."""
        if isinstance(self.warmup, SubspaceWarmup):
            warm = self.warmup
            base = make_adapter(copy.deepcopy(warm.module_), cfg["device"], cfg["dtype"], X.shape[1])
            self._check_module_outputs(base.n_outputs)
            if warm.offset_.shape[0] != base.n_params:
                raise ValueError("The fitted SubspaceWarmup does not match its own module.")
            projected = base.positions_of(self._projected_names(base))
            if not torch.equal(torch.as_tensor(warm.positions_).cpu().long(), projected.cpu()):
                raise ValueError(
                    f"The fitted SubspaceWarmup spans the parameters {list(warm.parameter_names_)}, but "
                    f"{type(self).__name__} projects {self._projected_names(base)}: fit the warm-up with "
                    "parameters=those names.")
            if warm.components_.shape[1] < int(self.n_components):
                raise ValueError(f"n_components={int(self.n_components)} but the fitted SubspaceWarmup has "
                                 f"{warm.components_.shape[1]} components: lower n_components or refit the warm-up.")
            return warm, base
        Xw, Yw = self._warmup_rows(X, Y, weights)
        count = self._warmup_count()
        if count is not None and count < _FEW_WARMUP_ROWS and self.__dict__.get("_starting_stream"):
            warnings.warn(
                f"{type(self).__name__}'s warm-up learns from only {count} row(s); its subspace (A, θ*) is fixed "
                "for the life of the model. Warm up on more rows (warmup=200), separate data "
                "(warmup=(X_warmup, y_warmup)), or a fitted skfilter.warmup.SubspaceWarmup.", UserWarning,
                stacklevel=6)
        names = self._projected_names(base)
        warm = SubspaceWarmup(n_components=int(self.n_components), random_state=self._mc_seed,
                              **self._prefixed("warmup__"))
        warm.fit(Xw, Yw, module=base.module, loss=self._warmup_loss(),
                 parameters=None if self._layout == "subspace" else names)
        return warm, base

    def _reparametrize(self, adapter, X, Y, weights, cfg):
        """The warm-up, then the subspace model ``θ(φ)`` over the network's adapter (module docstring)."""
        base = adapter
        self._network_outputs = adapter.n_outputs
        given = isinstance(self.warmup, SubspaceWarmup)
        if not given and cfg["prior_variance"] == "auto":  # the data-scaled start of the warm-up
            mean0, _ = auto_prior(base, X, self._prior_targets(Y), prior_scale=self._auto_prior_scale,
                                  weights=weights)
            base.write_to_module(mean0)
        warm, base = self._fitted_warmup(base, X, Y, weights, cfg)
        opts = {"device": cfg["device"], "dtype": cfg["dtype"]}
        d = int(self.n_components)
        A = torch.as_tensor(warm.components_)[:, :d].to(**opts)
        offset = torch.as_tensor(warm.offset_).to(**opts)
        projected = torch.as_tensor(warm.positions_).long()
        kept = None
        if self._layout == "pulse":
            kept = base.positions_of(self._last_layer_names(base))
        base.write_to_module(offset)
        if cfg["prior_variance"] == "auto":
            _, var_full = auto_prior(base, X, self._prior_targets(Y), prior_scale=self._auto_prior_scale,
                                     weights=weights)
        else:
            var_full = torch.full_like(offset, cfg["prior_variance"])
        var_full = var_full.to(**opts)
        if cfg["prior_variance"] == "auto":  # diag(Aᵀ diag(v) A)
            var_z = (A * A).T @ var_full[projected.to(var_full.device)]
        else:  # σ² I, as Aᵀ (σ² I) A for orthonormal A
            var_z = torch.full((d,), cfg["prior_variance"], **opts)
        var_phi = var_z if kept is None else torch.cat([var_z, var_full[kept.to(var_full.device)]])
        model = SubspaceAdapter(base, A, offset, projected, kept)
        self._subspace_prior = (model.initial_theta(), var_phi)
        self.warmup_ = warm
        return model

    def _prior(self, adapter, X, Y, cfg, weights=None):
        """``(φ₀, σ₀²)`` of the subspace model (module docstring)."""
        mean0, var0 = self._subspace_prior
        return mean0, self._structure.admissible_prior_variance(var0)


class _Subspace(_SubspaceModel):
    """The subspace EKF: one structure over ``z``."""

    _layout = "subspace"
    _structure_structural_params = ("n_components", "warmup", "covariance", "rank")
    _structure_parameter_constraints = {
        **_SubspaceModel._subspace_parameter_constraints,
        "covariance": [StrOptions({"full", "vd", "fd", "lofi"})],
        "rank": [Interval(Integral, 1, None, closed="left")],
    }

    def _check_structure_params(self):
        return self._check_subspace_params()

    def _make_structure(self, cfg):
        if self.covariance == "full":
            return FullCovariance()
        if self.covariance == "lofi":
            return LowRankPrecision(rank=int(self.rank), variant="diagonal", svd="full", seed=self._mc_seed)
        return DiagonalCovariance(projection=self.covariance, vd_mean="exact")


class _PULSE(_SubspaceModel):
    """PULSE: the hidden subspace and the last layer, block mean-field."""

    _layout = "pulse"
    _structure_structural_params = ("n_components", "warmup", "last_layer")
    _structure_parameter_constraints = {
        **_SubspaceModel._subspace_parameter_constraints,
        "mean_update": [StrOptions(set(_MEAN_UPDATES))],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "last_layer": [None, list, tuple],
        "last_process_noise": [None, Interval(Real, 0, None, closed="left")],
    }

    def _check_structure_params(self):
        names = self.last_layer
        if names is not None and (not names or not all(isinstance(n, str) for n in names)):
            raise_invalid_parameter(self, "last_layer", "None or a non-empty list of parameter names (str)", names)
        return self._check_subspace_params()

    def _make_structure(self, cfg):
        return BlockDiagonal({name: (ix, FullCovariance()) for name, ix in self._model_blocks.items()},
                             coupling=_MEAN_UPDATES[self.mean_update], tol=float(self.tol),
                             max_iter=int(self.max_iter))

    def _reparametrize(self, adapter, X, Y, weights, cfg):
        model = super()._reparametrize(adapter, X, Y, weights, cfg)
        self._model_blocks = model.blocks
        return model

    def _make_dynamics(self, cfg):
        """``decay`` and the random walk ``Q = blockdiag(q_h I, q_l I)`` on ``(z, w)``."""
        q = cfg["process_noise"]
        if self.last_process_noise is not None and float(self.last_process_noise) != q:
            q = Dynamics.per_block({"hidden": q, "last": float(self.last_process_noise)}, self._model_blocks,
                                   self._adapter.n_params, like=self._reference.mean)
        return Dynamics(decay=cfg["decay"], process_noise=q)


# -- docstrings (the parameters the four estimators share, written once) -----------------------------

_NETWORK_DOC = """\
    hidden_layer_sizes : tuple of int, default=(50,)
        Hidden widths of the default MLP (ignored when ``module`` or a fitted ``warmup`` is given).
    activation : {'relu', 'tanh', 'logistic', 'identity', 'elu'}, default='relu'
        Hidden non-linearity of the default MLP.
    module : torch.nn.Module class or instance, default=None
        The network ``h(θ, x)``: ``None`` for the default MLP (inputs standardised by the first
        call's rows with ``prior_variance='auto'``), a class (instantiated with the ``module__<name>``
        arguments, seeded by ``random_state``) or an instance (copied; its weights start the
        warm-up). Any differentiable module: the Jacobian is taken by ``torch.func``."""

_SUBSPACE_DOC = {
    "subspace": """\
    n_components : int, default=20
        ``d``, the dimension of the subspace ``θ = A z + θ*`` the filter learns in (at most the
        number of iterates the warm-up stores: ``warmup__n_epochs`` with its default storage).
    warmup : int, float, (X_warmup, y_warmup) or fitted SubspaceWarmup, default=200
        The warm-up that fixes ``A`` and ``θ*`` (module docstring): the stream's first ``warmup``
        rows however they arrive (until they have all arrived, each call warms up again on all rows
        so far), a fraction of the first call's rows, separate data, or a fitted
        :class:`~skfilter.warmup.SubspaceWarmup` (its network, ``A`` and ``θ*``; ``module`` ignored).
    covariance : {'full', 'vd', 'fd', 'lofi'}, default='full'
        The belief over ``z``: dense ``d × d`` (thesis), diagonal by precision (``'vd'``) or variance
        (``'fd'``) matching, or LoFi's diagonal-plus-low-rank precision of rank ``rank`` for large ``d``.
    rank : int, default=10
        LoFi's rank with ``covariance='lofi'`` (ignored otherwise).""",
    "pulse": """\
    n_components : int, default=20
        ``d_hidden``, the dimension of the hidden layers' subspace ``ψ = A z + ψ*``.
    warmup : int, float, (X_warmup, y_warmup) or fitted SubspaceWarmup, default=200
        The warm-up that fixes ``A`` and ``ψ*`` and the last layer's prior mean (module docstring):
        the stream's first ``warmup`` rows however they arrive (each call warms up again on all rows
        so far until then), a fraction of the first call's rows, separate data, or a
        :class:`~skfilter.warmup.SubspaceWarmup` fitted with ``parameters=`` the hidden layers'
        names (its network is used; ``module`` is then ignored).
    mean_update : {'coupled', 'fixed-point', 'decoupled'}, default='coupled'
        The means of the block mean-field update: the exact solution of the coupled fixed point
        (thesis Theorem 5.3, as the joint EKF mean), the fixed point solved by sweeps until no
        residual moves by more than ``tol`` (relative to the innovation) or ``max_iter`` sweeps,
        or the original decoupled PULSE (each block updated as if the other were known).
    tol : float, default=1e-10
        Stopping tolerance of ``mean_update='fixed-point'``.
    max_iter : int, default=100
        Sweeps of ``mean_update='fixed-point'`` at most.
    last_layer : list of str, default=None
        Parameter names of the last layer (found automatically for the default MLP and an
        ``nn.Sequential`` ending in ``nn.Linear``).""",
}

_PRIOR_DOC = {
    "regressor": """\
    prior_variance : 'auto' or float, default='auto'
        Prior variance ``v`` of the weights, carried to ``z`` as the diagonal of ``Aᵀ diag(v) A``
        (module docstring). ``'auto'`` (:mod:`skfilter.priors`): standardised inputs (default
        MLP), ``1/fan_in`` per weight, the output layer scaled to the stream's first targets (also
        the warm-up's start). A float ``σ²``: ``Σ_z = σ² I``.
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
        Gaussian with variance ``obs_variance``, or Poisson with a log link for counts (the
        warm-up then minimises the Poisson loss).""",
    "classifier": """\
    prior_variance : 'auto' or float, default='auto'
        Prior variance ``v`` of the weights, carried to ``z`` as the diagonal of ``Aᵀ diag(v) A``.
        ``'auto'`` (:mod:`skfilter.priors`): standardised inputs (default MLP), three times the
        initialisation variance ``1/fan_in`` per weight. A float ``σ²``: ``Σ_z = σ² I``.
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
    "subspace": """\
    process_noise : float, default=0.0
        ``q`` of the random walk ``z_t = γ z_{t−1} + N(0, q I)`` in the subspace.""",
    "pulse": """\
    process_noise : float, default=0.0
        ``q_h`` of the random walk of ``z`` (and of ``w`` unless ``last_process_noise`` is given).
    last_process_noise : float, default=None
        ``q_l`` of the last layer's random walk; ``None``: ``process_noise``.""",
}

_COORDINATES = {"subspace": "``z``", "pulse": "``(z, w)``, a :class:`~skfilter.posteriors.BlockDiagonal` belief"}


def _doc(summary, layout, target, example):
    rest = filter_tail_doc(
        target,
        batch_size="Rows per filter step.",
        seeds="Seeds the initial weights, the warm-up's batches, the shuffles and the Monte-Carlo predictive.",
        kwargs="""    **kwargs
        ``module__<name>=value``: constructor arguments of a ``module`` class;
        ``warmup__<name>=value``: parameters of the internal
        :class:`~skfilter.warmup.SubspaceWarmup` (``n_epochs``, ``batch_size``, ``learning_rate``,
        ``skip``, ``stride``, ``store``, ``center``, ``method``).""",
        n_params="The number of coordinates the filter learns: ``d`` (subspace) or ``d + D_last`` (PULSE).",
        attributes="""    warmup_ : SubspaceWarmup
        The fitted warm-up of this stream (``components_`` is ``A``, ``offset_`` is ``θ*``); pass it
        as ``warmup`` to reuse it.
""",
        module_mean=" ``θ(μ)``",
        posterior=f"The belief over the learned coordinates ``φ`` ({_COORDINATES[layout]}).")
    return "\n\n".join([summary, "    Parameters\n    ----------\n" + _NETWORK_DOC + "\n" + _SUBSPACE_DOC[layout]
                        + "\n" + _PRIOR_DOC[target] + "\n" + _NOISE_DOC[layout] + "\n" + rest.rstrip("\n"),
                        "    Examples\n    --------\n" + example]) + "\n    "


class SubspaceRegressor(_Subspace, FilterRegressorMixin, BaseFilter):
    __doc__ = _doc("""Neural-network regression by the subspace EKF: the EKF on ``z`` with ``θ = A z + θ*``.

    ``A`` (``D × d``, orthonormal columns) and ``θ*`` come from an Adam warm-up on the first rows
    (thesis §5.1, Alg. 12–13; module docstring). Cost ``O(C D d + d³)`` per row, memory
    ``O(D d + d²)``: for networks whose full covariance does not fit.""", "subspace", "regressor", """\
    >>> import numpy as np
    >>> from skfilter import SubspaceRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=200)
    >>> reg = SubspaceRegressor(n_components=5, hidden_layer_sizes=(20,), random_state=0).fit(X, y)
    >>> reg.n_params_, reg.warmup_.components_.shape
    (5, torch.Size([101, 5]))""")

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, n_components=20, warmup=200,
                 covariance="full", rank=10, prior_variance="auto",
                 n_prior_rows=50, obs_variance="auto", likelihood="gaussian",
                 process_noise=0.0, decay=1.0, n_epochs=1, shuffle=False, batch_size=1, predictive="linearized",
                 n_mc_samples=100, random_state=None, device="cpu", dtype=None, verbose=0, warm_start=False,
                 **kwargs):
        self._store_init_params(locals())

    _parameter_constraints = {**BaseFilter._parameter_constraints,
                              **FilterRegressorMixin._target_parameter_constraints,
                              **_Subspace._structure_parameter_constraints}


class SubspaceClassifier(_Subspace, LikelihoodParameterMixin, FilterClassifierMixin, BaseFilter):
    __doc__ = _doc("""Neural-network classification by the subspace EKF: the EKF on ``z`` with ``θ = A z + θ*``.

    ``A`` and ``θ*`` come from an Adam warm-up on the first rows (thesis §5.1, Alg. 12–13; module
    docstring); the thesis' CNN experiment (§5.5) finds it no better than chance for ``d ≤ 10`` there
    and as good as LoFi from ``d ≈ 100``.""", "subspace", "classifier", """\
    >>> import numpy as np
    >>> from skfilter import SubspaceClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); y = (X[:, 0] + X[:, 1] > 0).astype(int)
    >>> clf = SubspaceClassifier(n_components=5, hidden_layer_sizes=(10,), random_state=0).fit(X, y)
    >>> clf.predict([[2.0, 2.0], [-2.0, -2.0]])
    array([1, 0])""")

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, n_components=20, warmup=200,
                 covariance="full", rank=10, prior_variance="auto", n_prior_rows=50, likelihood="adf",
                 moment_matched_jitter=0.01, process_noise=0.0, decay=1.0, n_epochs=1, shuffle=False, batch_size=1,
                 predictive="probit", n_mc_samples=100, random_state=None, device="cpu", dtype=None, verbose=0,
                 warm_start=False, **kwargs):
        self._store_init_params(locals())

    _parameter_constraints = {**BaseFilter._parameter_constraints,
                              **FilterClassifierMixin._target_parameter_constraints,
                              **FilterClassifierMixin._likelihood_parameter_constraints,
                              **_Subspace._structure_parameter_constraints}


class PULSERegressor(_PULSE, FilterRegressorMixin, BaseFilter):
    __doc__ = _doc("""Neural-network regression by PULSE: a hidden-layer subspace and a full last layer.

    The hidden weights are ``ψ = A z + ψ*`` (``A`` from an Adam warm-up), the last layer ``w`` keeps
    its own coordinates, and the belief ``N(z) N(w)`` is updated by the coupled block mean-field
    step (thesis §5.2, Theorem 5.3 and Alg. 14 corrected; module docstring). Cost
    ``O(C D d + d³ + D_l³)`` per row.""", "pulse", "regressor", """\
    >>> import numpy as np
    >>> from skfilter import PULSERegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=200)
    >>> reg = PULSERegressor(n_components=5, hidden_layer_sizes=(20,), random_state=0).fit(X, y)
    >>> reg.n_params_  # d + the last layer's 20 weights and bias
    26""")

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, n_components=20, warmup=200,
                 mean_update="coupled", tol=1e-10, max_iter=100, last_layer=None, prior_variance="auto", n_prior_rows=50,
                 obs_variance="auto", likelihood="gaussian", process_noise=0.0, last_process_noise=None, decay=1.0,
                 n_epochs=1, shuffle=False, batch_size=1, predictive="linearized", n_mc_samples=100,
                 random_state=None, device="cpu", dtype=None, verbose=0, warm_start=False, **kwargs):
        self._store_init_params(locals())

    _parameter_constraints = {**BaseFilter._parameter_constraints,
                              **FilterRegressorMixin._target_parameter_constraints,
                              **_PULSE._structure_parameter_constraints}


class PULSEClassifier(_PULSE, LikelihoodParameterMixin, FilterClassifierMixin, BaseFilter):
    __doc__ = _doc("""Neural-network classification by PULSE: a hidden-layer subspace and a full last layer.

    The hidden weights are ``ψ = A z + ψ*`` (``A`` from an Adam warm-up), the last layer keeps its
    own coordinates with a full covariance (thesis §5.2, Theorem 5.3 and Alg. 14 corrected). The
    last layer has ``C (n_hidden + 1)`` weights for ``C`` logits: keep the last hidden layer narrow
    with many classes (the thesis uses 20 units for 10 classes).""", "pulse", "classifier", """\
    >>> import numpy as np
    >>> from skfilter import PULSEClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); y = (X[:, 0] + X[:, 1] > 0).astype(int)
    >>> clf = PULSEClassifier(n_components=5, hidden_layer_sizes=(10,), random_state=0).fit(X, y)
    >>> clf.predict([[2.0, 2.0], [-2.0, -2.0]])
    array([1, 0])""")

    def __init__(self, hidden_layer_sizes=(50,), activation="relu", *, module=None, n_components=20, warmup=200,
                 mean_update="coupled", tol=1e-10, max_iter=100, last_layer=None, prior_variance="auto", n_prior_rows=50,
                 likelihood="adf", moment_matched_jitter=0.01, process_noise=0.0, last_process_noise=None,
                 decay=1.0, n_epochs=1, shuffle=False, batch_size=1, predictive="probit", n_mc_samples=100,
                 random_state=None, device="cpu", dtype=None, verbose=0, warm_start=False, **kwargs):
        self._store_init_params(locals())

    _parameter_constraints = {**BaseFilter._parameter_constraints,
                              **FilterClassifierMixin._target_parameter_constraints,
                              **FilterClassifierMixin._likelihood_parameter_constraints,
                              **_PULSE._structure_parameter_constraints}
