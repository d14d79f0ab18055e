"""Warm-up phase of the subspace EKF: a projection matrix ``A`` and an offset ``θ*`` from training.

The subspace EKF (Duran-Martin (2025), thesis §5.1, eqs. 5.1–5.2) filters a low-dimensional
``z ∈ R^d`` instead of the network's ``θ ∈ R^D``, through the affine map

    θ(z) = θ* + A z,        A ∈ R^{D×d} with orthonormal columns (Aᵀ A = I_d).

:class:`SubspaceWarmup` builds ``A`` and ``θ*`` before any filtering, from warm-up data
(thesis §5.1.2, Alg. 13, after Larsen et al. 2022): train the network with Adam on minibatches,
stack the parameter iterates as the rows of a matrix ``E_mat`` (``Ê × D``), take ``A`` as the top-``d``
right-singular vectors of ``E_mat`` and ``θ*`` as the last iterate. ``method='random'`` instead draws
``A`` from a Gaussian matrix orthonormalised by QR (Li et al. 2018).
:func:`top_right_singular_vectors` is the SVD step on its own.
"""

from __future__ import annotations

import copy
import math
from numbers import Integral, Real

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._validation import check_parameter_constraints, raise_invalid_parameter

__all__ = ["SubspaceWarmup", "top_right_singular_vectors"]

#: the built-in warm-up losses (mean over the batch); ``loss`` may also be a callable
LOSSES = ("mse", "cross-entropy", "binary-cross-entropy", "poisson")


def _fix_column_signs(columns: torch.Tensor) -> torch.Tensor:
    """Flip each column so that its entry of largest magnitude (the first one on a tie) is positive."""
    largest = columns.abs().argmax(dim=0)
    signs = torch.sign(columns[largest, torch.arange(columns.shape[1], device=columns.device)])
    signs[signs == 0] = 1
    return columns * signs


def top_right_singular_vectors(iterates, n_components: int, center: bool = False):
    """The top right-singular vectors of a matrix of stacked iterates (the SVD step of Alg. 13).

    With ``M = U Σ Vᵀ`` the thin SVD of ``iterates`` (``Ê × D``, one iterate per row; with
    ``center=True`` the column means are subtracted first), returns ``A = [V_{:,1} … V_{:,d}]``.

    Parameters
    ----------
    iterates : torch.Tensor or array-like of shape (n_iterates, n_parameters)
        The stacked iterates (the thesis stacks the raw, un-centred ones).
    n_components : int
        ``d``, at most ``min(n_iterates, n_parameters)`` (at most ``n_iterates − 1`` when centred:
        centring removes one dimension).
    center : bool, default=False
        Subtract the mean iterate before the SVD (principal directions of the trajectory's spread
        rather than of its raw positions).

    Returns
    -------
    components : torch.Tensor of shape (n_parameters, n_components)
        ``A``: orthonormal columns ordered by decreasing singular value, each signed so that its
        entry of largest magnitude is positive (deterministic signs).
    singular_values : torch.Tensor of shape (n_components,)
        The matching singular values ``σ_1 ≥ … ≥ σ_d``.
    explained_ratio : torch.Tensor of shape (n_components,)
        ``σ_i² / Σ_j σ_j²`` over all singular values: the share of the (centred) matrix's squared
        Frobenius norm along each component (the explained variance ratio when centred).

    Raises
    ------
    ValueError
        If ``n_components`` exceeds the rank bound above, or ``iterates`` is not a finite 2-d matrix.
    """
    matrix = torch.as_tensor(iterates)
    if not matrix.is_floating_point():
        matrix = matrix.to(torch.get_default_dtype())
    if matrix.ndim != 2 or matrix.shape[0] < 1 or matrix.shape[1] < 1:
        raise ValueError(f"iterates must be a non-empty 2-d matrix (n_iterates, n_parameters); "
                         f"got shape {tuple(matrix.shape)}.")
    if not torch.isfinite(matrix).all():
        raise ValueError("iterates contain NaN or infinity.")
    n_iterates, n_parameters = matrix.shape
    available = min(n_iterates - 1 if center else n_iterates, n_parameters)
    if not isinstance(n_components, Integral) or not 1 <= n_components <= available:
        raise ValueError(f"n_components must be an integer between 1 and min(n_iterates{' − 1' if center else ''}, "
                         f"n_parameters) = {available} (n_iterates={n_iterates}, n_parameters={n_parameters}, "
                         f"center={center}); got {n_components!r}.")
    if center:
        matrix = matrix - matrix.mean(dim=0, keepdim=True)
    _, singular_values, right_t = torch.linalg.svd(matrix, full_matrices=False)
    components = _fix_column_signs(right_t[:n_components].T)
    energy = singular_values.square()
    explained_ratio = energy[:n_components] / energy.sum()
    return components.contiguous(), singular_values[:n_components].clone(), explained_ratio


def _random_orthonormal_columns(n_rows: int, n_columns: int, seed: int, dtype, device) -> torch.Tensor:
    """``Q`` of the QR decomposition of a standard Gaussian ``n_rows × n_columns`` matrix, with the
    signs that make ``R``'s diagonal positive (a unique, seed-determined ``Q``). Column ``j`` is
    drawn before column ``j + 1``, so the first ``k`` columns do not depend on ``n_columns``."""
    gaussian = np.random.RandomState(seed).standard_normal((n_columns, n_rows)).T
    q, r = torch.linalg.qr(torch.as_tensor(gaussian, dtype=torch.float64))
    signs = torch.sign(torch.diagonal(r))
    signs[signs == 0] = 1
    return (q * signs).to(dtype=dtype, device=device).contiguous()


def _stored_counts(n_events: int, skip: int, stride: int) -> list[int]:
    """The 1-based event counts (epochs or optimiser steps) whose iterate is stored: ``c ≥ skip``
    and ``c mod stride = 0``."""
    return [c for c in range(max(skip, 1), n_events + 1) if c % stride == 0]


class SubspaceWarmup(BaseEstimator):
    """Projection matrix and offset of the subspace EKF from a warm-up training run.

    The subspace EKF (Duran-Martin (2025), thesis §5.1) writes the network's flat parameters as
    ``θ(z) = θ* + A z`` and filters ``z ∈ R^d``. This estimator computes ``A`` and ``θ*`` by the
    warm-up phase of thesis §5.1.2, Alg. 13 (after Larsen et al. 2022), corrected:

    1. train a copy of ``module`` with Adam (learning rate ``learning_rate``) on minibatches of the
       warm-up data for ``E = n_epochs`` epochs, minimising the mean loss (the negative
       log-likelihood of eq. 5.3 up to scale for the built-in losses);
    2. after epoch ``e`` (``store='epoch'``, as the printed algorithm) or optimiser step ``e``
       (``store='step'``, as the thesis' prose "store the iterates every k steps"), 1-based, if
       ``e ≥ skip`` and ``e mod stride = 0``, append the flat parameter vector ``θ^(e)`` as a new row
       of ``E_mat`` (``Ê × D``);
    3. ``E_mat = U Σ Vᵀ``; ``A = [V_{:,1} … V_{:,d}]``, the top-``d`` right-singular vectors (of the
       raw, un-centred iterates as in the thesis; ``center=True`` subtracts their mean first);
    4. ``θ* = θ^(E)``, the last iterate.

    Corrections to the printed Alg. 13: per-epoch vs per-step storage is configurable (the
    algorithm and the prose disagree); the batch count is the number of batches ``B`` (the
    algorithm mixes ``M`` and ``B``); ``A`` is the first ``d`` right-singular vectors (its typeset
    definition is garbled); ``d ≤ min(Ê, D)`` is enforced, since there are only ``Ê`` singular
    vectors. For ``store='epoch'`` and ``skip`` a positive multiple of ``stride``,
    ``Ê = ⌊(E − skip)/stride⌋ + 1``; for ``skip = 0`` it is ``⌊E/stride⌋`` (``θ^(0)`` is never stored).

    ``method='random'`` is the random subspace of Li et al. 2018: ``A`` is the ``Q`` factor of the
    QR decomposition of a standard Gaussian ``D × d`` matrix (signs making ``R``'s diagonal
    positive, so ``A`` depends only on ``random_state``); ``θ*`` is still the last Adam iterate, or
    the module's initial weights with ``n_epochs=0``.

    With ``parameters`` (a list of parameter names) the subspace spans only those parameters'
    flat positions: the SVD is taken over those columns of ``E_mat``, and ``A`` has
    ``D_sub = len(positions_)`` rows. PULSE (thesis §5.2) projects the hidden layers this way and
    keeps the last layer's own coordinates. Every learned parameter is still trained by Adam.

    A warm-up fitted with ``d`` components serves any subspace dimension ``k ≤ d``: ``A``'s columns
    are ordered by decreasing singular value, so ``components_[:, :k]`` is the top-``k`` subspace
    (the same as a fit with ``n_components=k`` and the same ``random_state``; for
    ``method='random'`` too, since the Gaussian columns are drawn in order).

    Parameters
    ----------
    n_components : int, default=10
        ``d``, the subspace dimension: at most the number of stored iterates ``Ê`` (``Ê − 1`` when
        centred; ``method='svd'``) and at most the number of projected parameters ``D_sub``.
    method : {'svd', 'random'}, default='svd'
        ``'svd'``: the SVD of the iterates (Larsen et al. 2022); ``'random'``: an orthonormalised
        Gaussian matrix (Li et al. 2018).
    n_epochs : int, default=20
        ``E``, passes over the warm-up data; at least 1 for ``'svd'``, 0 allowed for ``'random'``
        (no training: ``θ*`` is the module's initial weights).
    batch_size : int, default=32
        Minibatch size; each epoch splits a fresh random permutation of the rows into disjoint
        batches, the last one possibly smaller. Clipped to the number of rows.
    learning_rate : float, default=0.01
        Adam's step size (plain :class:`torch.optim.Adam`).
    skip : int, default=0
        ``n``: iterates of epochs (steps) before ``skip`` are not stored.
    stride : int, default=1
        ``k``: store every ``k``-th epoch's (step's) iterate.
    store : {'epoch', 'step'}, default='epoch'
        Count epochs or optimiser steps for the ``skip``/``stride`` rule.
    center : bool, default=False
        Centre the stored iterates before the SVD (the thesis uses the raw iterates).
    random_state : int, RandomState instance or None, default=None
        Seeds the batch order and the random projection. Fits with the same integer seed are
        identical.

    Attributes
    ----------
    components_ : torch.Tensor of shape (D_sub, n_components)
        ``A``, orthonormal columns in decreasing order of singular value (``'svd'``), each signed
        so its entry of largest magnitude is positive. Module's dtype and device.
    singular_values_ : torch.Tensor of shape (n_components,) or None
        The singular values of ``E_mat`` along the components (``'svd'``); None for ``'random'``.
    explained_variance_ratio_ : torch.Tensor of shape (n_components,) or None
        ``σ_i² / Σ_j σ_j²``: the share of ``E_mat``'s squared Frobenius norm (its variance when
        centred) along each component; None for ``'random'``.
    offset_ : torch.Tensor of shape (D,)
        ``θ*`` over all learned parameters: the last iterate (or the initial weights).
    positions_ : torch.LongTensor of shape (D_sub,)
        The flat positions in ``θ`` that the components span, increasing (``arange(D)`` when
        ``parameters`` is None).
    parameter_names_ : list of str
        The projected parameters' names, in the module's order.
    module_ : torch.nn.Module
        A deep copy of ``module`` holding ``θ*``, in eval mode.
    n_iterates_ : int
        ``Ê``, the number of stored iterates (0 for ``'random'``, which stores none).
    loss_curve_ : list of float
        Mean training loss of each epoch (the batch losses averaged with the batch sizes as
        weights, at the weights each batch was evaluated at).
    n_features_in_ : int
        Number of columns of the warm-up ``X``.

    Notes
    -----
    The flat order of ``θ`` is that of ``[p for n, p in module.named_parameters() if p.requires_grad]``,
    each flattened with ``reshape(-1)`` and concatenated: the ``θ`` of the skfilter filters.
    Frozen parameters (``requires_grad=False``) are neither trained nor in ``θ``. The module copy
    is trained in eval mode (dropout and batch statistics off, as in the filters). The matrix of
    iterates is not kept after ``fit``.

    References
    ----------
    Duran-Martin (2025), thesis §5.1.2, Alg. 13.
    Larsen, Fort, Becker, Ganguli (2022), "How many degrees of freedom do we need to train deep
    networks: a loss landscape perspective", ICLR.
    Li, Farkhoor, Liu, Yosinski (2018), "Measuring the intrinsic dimension of objective
    landscapes", ICLR.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from skfilter.warmup import SubspaceWarmup
    >>> rng = np.random.RandomState(0)
    >>> X = rng.normal(size=(64, 2))
    >>> y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=64)
    >>> _ = torch.manual_seed(0)
    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
    >>> warmup = SubspaceWarmup(n_components=3, n_epochs=5, batch_size=16, random_state=0)
    >>> warmup = warmup.fit(X, y, module=net)
    >>> warmup.components_.shape, warmup.offset_.shape, warmup.n_iterates_
    (torch.Size([33, 3]), torch.Size([33]), 5)
    >>> A = warmup.components_
    >>> torch.allclose(A.T @ A, torch.eye(3, dtype=torch.float64))
    True
    >>> torch.equal(warmup.inverse_transform(torch.zeros(3, dtype=torch.float64)), warmup.offset_)
    True
    """

    _parameter_constraints = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "method": [StrOptions({"svd", "random"})],
        "n_epochs": [Interval(Integral, 0, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "skip": [Interval(Integral, 0, None, closed="left")],
        "stride": [Interval(Integral, 1, None, closed="left")],
        "store": [StrOptions({"epoch", "step"})],
        "center": ["boolean"],
        "random_state": ["random_state"],
    }

    def __init__(self, n_components=10, *, method="svd", n_epochs=20, batch_size=32, learning_rate=1e-2,
                 skip=0, stride=1, store="epoch", center=False, random_state=None):
        self.n_components = n_components
        self.method = method
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.skip = skip
        self.stride = stride
        self.store = store
        self.center = center
        self.random_state = random_state

    # -- fit -----------------------------------------------------------------------------------
    def __sklearn_clone__(self):
        """A fitted warm-up clones as itself, fitted (a deep copy): it is data of the filters that
        reuse it (``SubspaceRegressor(warmup=fitted)``), and ``clone`` — ``GridSearchCV``,
        ``cross_val_score`` — must hand them the same subspace. An unfitted one clones as any
        estimator (its parameters only)."""
        if hasattr(self, "components_"):
            import copy

            return copy.deepcopy(self)
        return super().__sklearn_clone__()

    def fit(self, X, y, *, module, loss="mse", parameters=None) -> "SubspaceWarmup":
        """Train a copy of ``module`` on ``(X, y)`` and compute ``A`` and ``θ*``.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Warm-up inputs (finite), converted to the module's dtype and device.
        y : array-like or torch.Tensor of shape (n_samples,) or (n_samples, n_outputs)
            Warm-up targets, by ``loss``:

            * ``'mse'``: floats, ``(n,)`` or ``(n, C)``; the outputs and targets are both reshaped to
              ``(n, −1)`` and must then agree; mean squared error over all entries.
            * ``'cross-entropy'``: ``(n,)`` integer class indices; the module outputs logits ``(n, C)``.
            * ``'binary-cross-entropy'``: ``(n,)`` labels in ``{0, 1}`` (soft labels in ``[0, 1]`` are
              accepted); the module outputs one logit per row, ``(n, 1)`` or ``(n,)``.
            * ``'poisson'``: non-negative counts, ``(n,)`` or ``(n, C)``; the module outputs the log
              rate (``torch.nn.PoissonNLLLoss(log_input=True, full=False)``); reshaped as for ``'mse'``.
            * a callable: ``loss(outputs, targets)`` returns a scalar tensor; it gets the module's raw
              outputs for the batch and the batch's targets as a tensor (``int64`` when ``y`` is
              integer, else the module's dtype), unreshaped.
        module : torch.nn.Module
            The network; deep-copied, never modified. Its current weights are ``θ^(0)``.
        loss : {'mse', 'cross-entropy', 'binary-cross-entropy', 'poisson'} or callable, default='mse'
            The training loss (a mean over the batch).
        parameters : list of str or None, default=None
            Names (as in ``module.named_parameters()``) of the learned parameters the subspace spans;
            None: all of them.

        Returns
        -------
        self : SubspaceWarmup

        Raises
        ------
        ValueError
            On invalid settings or data (before any training), if ``n_components`` exceeds the
            number of stored iterates or projected parameters, or if the training diverges
            (a non-finite loss). A failed fit leaves the estimator as it was.
        """
        check_parameter_constraints(self)
        if self.method == "svd" and self.n_epochs == 0:
            raise_invalid_parameter(self, "n_epochs", "at least 1 with method='svd' (0 is allowed for "
                                    "method='random' only)", self.n_epochs)
        if not isinstance(module, torch.nn.Module):
            raise ValueError(f"module must be a torch.nn.Module instance; got {type(module).__name__}.")
        loss_function = _make_loss(loss)
        network = copy.deepcopy(module).eval()
        named = [(name, p) for name, p in network.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("module has no learned parameters (every parameter has requires_grad=False).")
        dtype, device = named[0][1].dtype, named[0][1].device
        if not dtype.is_floating_point:
            raise ValueError(f"module's parameters must be floating point; got {dtype}.")
        positions, projected_names = _projected_positions(named, parameters)
        inputs = _check_inputs(X, dtype, device)
        targets = _check_targets(y, loss, len(inputs), dtype, device)

        n_rows = len(inputs)
        batch_size = min(self.batch_size, n_rows)
        n_batches = math.ceil(n_rows / batch_size)
        n_events = self.n_epochs * (n_batches if self.store == "step" else 1)
        stored = set(_stored_counts(n_events, self.skip, self.stride)) if self.method == "svd" else set()
        self._check_n_components(len(stored), len(positions), n_batches)
        if self.n_epochs:
            _check_loss_evaluates(network, loss, loss_function, inputs, targets, batch_size)

        rng = check_random_state(self.random_state)
        shuffle_seed, projection_seed = (int(s) for s in rng.randint(np.iinfo(np.int32).max, size=2))
        learned = [p for _, p in named]
        iterates = torch.empty((len(stored), len(positions)), dtype=dtype, device=device)
        loss_curve = self._train(network, learned, loss_function, inputs, targets, batch_size,
                                 shuffle_seed, stored, positions, iterates)
        offset = _flat(learned)
        if not torch.isfinite(offset).all():
            raise ValueError(_diverged_message(self.learning_rate))

        if self.method == "svd":
            components, singular_values, explained = top_right_singular_vectors(
                iterates, self.n_components, center=self.center)
        else:
            components = _random_orthonormal_columns(len(positions), self.n_components, projection_seed,
                                                     dtype, device)
            singular_values = explained = None
        del iterates

        self.components_ = components
        self.singular_values_ = singular_values
        self.explained_variance_ratio_ = explained
        self.offset_ = offset
        self.positions_ = positions
        self.parameter_names_ = projected_names
        self.module_ = network
        self.n_iterates_ = len(stored)
        self.loss_curve_ = loss_curve
        self.n_features_in_ = inputs.shape[1]
        return self

    def _check_n_components(self, n_iterates: int, n_projected: int, n_batches: int) -> None:
        """``d ≤ D_sub`` always; ``d ≤ Ê`` (``Ê − 1`` centred) for the SVD."""
        d = self.n_components
        if d > n_projected:
            raise ValueError(f"n_components={d} exceeds the number of projected parameters ({n_projected}); "
                             f"lower n_components or project more parameters.")
        if self.method != "svd":
            return
        available = n_iterates - 1 if self.center else n_iterates
        if d > available:
            unit = "epochs" if self.store == "epoch" else f"optimiser steps ({n_batches} per epoch)"
            centred = " (minus 1 for centring)" if self.center else ""
            raise ValueError(
                f"n_components={d} exceeds the number of stored iterates{centred}: {n_iterates} iterate(s) "
                f"stored (store={self.store!r}: the {unit} e ≥ skip={self.skip} with e % stride={self.stride} "
                f"== 0 over n_epochs={self.n_epochs}), so at most {max(available, 0)} components. Store more "
                f"iterates: more epochs (n_epochs), a smaller stride or skip, or store='step'; or lower "
                f"n_components.")

    def _train(self, network, learned, loss_function, inputs, targets, batch_size, shuffle_seed,
               stored, positions, iterates) -> list[float]:
        """Adam over shuffled minibatches; writes the stored iterates (projected positions) into the
        rows of ``iterates``; returns the per-epoch mean loss."""
        optimizer = torch.optim.Adam(learned, lr=self.learning_rate)
        shuffler = np.random.RandomState(shuffle_seed)
        n_rows = len(inputs)
        loss_curve, step, row = [], 0, 0
        for epoch in range(1, self.n_epochs + 1):
            order = torch.as_tensor(shuffler.permutation(n_rows), device=inputs.device)
            epoch_loss = 0.0
            for start in range(0, n_rows, batch_size):
                batch = order[start:start + batch_size]
                optimizer.zero_grad(set_to_none=True)
                batch_loss = loss_function(network(inputs[batch]), targets[batch])
                value = float(batch_loss.detach())
                if not math.isfinite(value):
                    raise ValueError(_diverged_message(self.learning_rate))
                batch_loss.backward()
                optimizer.step()
                epoch_loss += value * len(batch)
                step += 1
                if self.store == "step" and step in stored:
                    iterates[row] = _flat(learned)[positions]
                    row += 1
            if self.store == "epoch" and epoch in stored:
                iterates[row] = _flat(learned)[positions]
                row += 1
            loss_curve.append(epoch_loss / n_rows)
        optimizer.zero_grad(set_to_none=True)
        return loss_curve

    # -- maps between θ and z ---------------------------------------------------------------------
    def transform(self, theta, n_components=None) -> torch.Tensor:
        """Subspace coordinates of flat parameters: ``z = Aᵀ (θ[positions] − θ*[positions])``.

        Parameters
        ----------
        theta : torch.Tensor or array-like of shape (D,) or (..., D)
        n_components : int or None, default=None
            Use the first ``k`` columns of ``A`` (the top-``k`` subspace); None: all ``d``.

        Returns
        -------
        z : torch.Tensor of shape (k,) or (..., k)
        """
        check_is_fitted(self, "components_")
        components = self._leading_components(n_components)
        theta = torch.as_tensor(theta, dtype=self.offset_.dtype, device=self.offset_.device)
        if theta.ndim < 1 or theta.shape[-1] != len(self.offset_):
            raise ValueError(f"theta must have {len(self.offset_)} entries in its last axis; "
                             f"got shape {tuple(theta.shape)}.")
        return (theta[..., self.positions_] - self.offset_[self.positions_]) @ components

    def inverse_transform(self, z) -> torch.Tensor:
        """Flat parameters of subspace coordinates: ``θ = θ*`` with ``θ[positions] += A z``.

        Parameters
        ----------
        z : torch.Tensor or array-like of shape (k,) or (..., k), k ≤ n_components
            Coordinates along the first ``k`` columns of ``A``.

        Returns
        -------
        theta : torch.Tensor of shape (D,) or (..., D)
        """
        check_is_fitted(self, "components_")
        z = torch.as_tensor(z, dtype=self.offset_.dtype, device=self.offset_.device)
        if z.ndim < 1 or not 1 <= z.shape[-1] <= self.components_.shape[1]:
            raise ValueError(f"z must have between 1 and n_components={self.components_.shape[1]} entries "
                             f"in its last axis; got shape {tuple(z.shape)}.")
        components = self.components_[:, :z.shape[-1]]
        theta = self.offset_.expand(*z.shape[:-1], len(self.offset_)).clone()
        theta[..., self.positions_] += z @ components.T
        return theta

    def _leading_components(self, n_components):
        d = self.components_.shape[1]
        if n_components is None:
            return self.components_
        if not isinstance(n_components, Integral) or isinstance(n_components, bool) or not 1 <= n_components <= d:
            raise ValueError(f"n_components must be an integer between 1 and {d}; got {n_components!r}.")
        return self.components_[:, :n_components]


# -- helpers of fit ----------------------------------------------------------------------------------
def _flat(learned) -> torch.Tensor:
    """The learned parameters as one flat vector (a copy), in ``named_parameters()`` order."""
    return torch.cat([p.detach().reshape(-1) for p in learned]).clone()


def _diverged_message(learning_rate) -> str:
    return (f"The warm-up diverged: the training loss became NaN or infinite (learning_rate={learning_rate}). "
            f"Lower learning_rate.")


def _projected_positions(named, parameters):
    """The flat positions and names of the projected parameters (all learned ones for None)."""
    sizes = [p.numel() for _, p in named]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    learned_names = [name for name, _ in named]
    if parameters is None:
        chosen = set(learned_names)
    else:
        if isinstance(parameters, str) or not all(isinstance(n, str) for n in parameters):
            raise ValueError(f"parameters must be None or a list of parameter names; got {parameters!r}.")
        parameters = list(parameters)
        if not parameters:
            raise ValueError("parameters is an empty list; pass None to project every learned parameter.")
        duplicates = sorted({n for n in parameters if parameters.count(n) > 1})
        if duplicates:
            raise ValueError(f"parameters lists the name(s) {duplicates} more than once.")
        unknown = [n for n in parameters if n not in learned_names]
        if unknown:
            raise ValueError(f"Unknown parameter name(s) {unknown}: the module's learned parameters "
                             f"(requires_grad=True) are {learned_names}.")
        chosen = set(parameters)
    device = named[0][1].device
    names = [name for name in learned_names if name in chosen]
    positions = torch.cat([torch.arange(int(starts[i]), int(starts[i + 1]), device=device)
                           for i, name in enumerate(learned_names) if name in chosen])
    return positions, names


def _check_inputs(X, dtype, device) -> torch.Tensor:
    if isinstance(X, torch.Tensor):
        inputs = X.detach()
    else:
        try:
            inputs = torch.as_tensor(np.array(X, dtype=np.float64))  # a copy: X may be read-only
        except (TypeError, ValueError) as error:
            raise ValueError(f"X must be a numeric array of shape (n_samples, n_features): {error}") from None
    if inputs.ndim != 2 or inputs.shape[0] < 1 or inputs.shape[1] < 1:
        raise ValueError(f"X must have shape (n_samples, n_features) with at least one row and column; "
                         f"got shape {tuple(inputs.shape)}.")
    inputs = inputs.to(dtype=dtype, device=device)
    if not torch.isfinite(inputs).all():
        raise ValueError("X contains NaN or infinity.")
    return inputs


def _check_targets(y, loss, n_rows, dtype, device) -> torch.Tensor:
    values = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    if values.dtype == object or not (np.issubdtype(values.dtype, np.number) or values.dtype == bool):
        raise ValueError(f"y must be numeric; got dtype {values.dtype}.")
    if values.ndim not in (1, 2) or len(values) != n_rows:
        raise ValueError(f"y must have shape (n_samples,) or (n_samples, n_outputs) with n_samples={n_rows} "
                         f"(the rows of X); got shape {values.shape}.")
    if not np.isfinite(values.astype(np.float64)).all():
        raise ValueError("y contains NaN or infinity.")
    if loss == "cross-entropy":
        if values.ndim != 1 or np.any(values < 0) or np.any(values != np.round(values)):
            raise ValueError("y must be a 1-d array of non-negative integer class indices for loss='cross-entropy'.")
        return torch.as_tensor(values.astype(np.int64), device=device)
    if loss == "binary-cross-entropy":
        if values.ndim != 1 or np.any(values < 0) or np.any(values > 1):
            raise ValueError("y must be a 1-d array of labels in {0, 1} for loss='binary-cross-entropy'.")
    if loss == "poisson" and np.any(values < 0):
        raise ValueError("y must hold non-negative counts for loss='poisson'.")
    if callable(loss) and np.issubdtype(values.dtype, np.integer):
        return torch.as_tensor(values.astype(np.int64), device=device)
    return torch.as_tensor(values.astype(np.float64), device=device).to(dtype)


def _as_rows(outputs, targets):
    """Outputs and targets reshaped to ``(n, −1)``; their shapes must then agree."""
    n = len(targets)
    outputs, targets = outputs.reshape(n, -1), targets.reshape(n, -1)
    if outputs.shape != targets.shape:
        raise ValueError(f"the module's outputs have {outputs.shape[1]} column(s) per row and y has "
                         f"{targets.shape[1]}.")
    return outputs, targets


def _mse(outputs, targets):
    return F.mse_loss(*_as_rows(outputs, targets))


def _poisson(outputs, targets):
    return F.poisson_nll_loss(*_as_rows(outputs, targets), log_input=True, full=False)


def _cross_entropy(outputs, targets):
    if outputs.ndim != 2 or len(outputs) != len(targets):
        raise ValueError(f"loss='cross-entropy' needs logits of shape (n, n_classes); the module outputs "
                         f"shape {tuple(outputs.shape)}.")
    return F.cross_entropy(outputs, targets)


def _binary_cross_entropy(outputs, targets):
    if outputs.numel() != len(targets):
        raise ValueError(f"loss='binary-cross-entropy' needs one logit per row; the module outputs shape "
                         f"{tuple(outputs.shape)}.")
    return F.binary_cross_entropy_with_logits(outputs.reshape(-1), targets)


_LOSS_FUNCTIONS = {"mse": _mse, "poisson": _poisson, "cross-entropy": _cross_entropy,
                   "binary-cross-entropy": _binary_cross_entropy}


def _make_loss(loss):
    if callable(loss):
        def user_loss(outputs, targets):
            value = loss(outputs, targets)
            if not isinstance(value, torch.Tensor) or value.numel() != 1:
                raise ValueError("the loss callable must return a scalar tensor.")
            return value.reshape(())
        return user_loss
    if isinstance(loss, str) and loss in _LOSS_FUNCTIONS:
        return _LOSS_FUNCTIONS[loss]
    raise ValueError(f"loss must be one of {list(LOSSES)} or a callable; got {loss!r}.")


def _check_loss_evaluates(network, loss, loss_function, inputs, targets, batch_size) -> None:
    """Evaluate the loss once on the first batch (no gradient) so that a shape mismatch raises a
    ValueError before training; for cross-entropy, first check every class index against the number
    of logits (an index out of range would fail mid-training, or assert on a GPU)."""
    try:
        with torch.no_grad():
            outputs = network(inputs[:batch_size])
            if loss == "cross-entropy" and outputs.ndim == 2 and int(targets.max()) >= outputs.shape[1]:
                raise ValueError(f"y has class index {int(targets.max())} but the module outputs "
                                 f"{outputs.shape[1]} logits per row.")
            loss_function(outputs, targets[:batch_size])
    except ValueError:
        raise
    except (RuntimeError, IndexError, TypeError) as error:
        raise ValueError(f"The loss could not be evaluated on the module's outputs for the first batch: "
                         f"{error}") from None
