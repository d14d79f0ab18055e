"""Signals of factorization models and their analytic gradients, for the decoupled EKF.

The decoupled EKF (DEKF) of Gómez-Uribe & Karrer groups the parameters into *entities* (a user, an
item, a feature, the global bias) and keeps one covariance block per entity. For every observation it
needs the scalar signal ``λ`` (the natural parameter before the link, Gómez-Uribe & Karrer, §2.1) and
the gradient ``∂λ/∂ξ_i`` with respect to the parameters ``ξ_i`` of every entity the observation involves
(Gómez-Uribe & Karrer, §3.4, Eqs 25–26). This module computes both, batched over events, in closed
form (no autograd), for

- :class:`LinearSignal`: GLM / univariate regression, ``λ = w_0 + Σ x_f w_f``;
- :class:`FactorizationMachine`: Rendle's factorization machine of any order (Eqs 4–5);
- :class:`MatrixFactorization`: ``λ = w_0 + b_u + b_v + ξ_u·ξ_v``;
- :class:`CPFactorization`: CP/PARAFAC tensor factorization of order q.

Conventions
-----------
An event involves ``m`` *slots* (one covariance block per slot, in a fixed order set by the model).
Slot ``s`` holds ``n_s`` *features*, each with a value ``x`` (1 for an entity id, the numeric value
for a context column) and a parameter vector of length ``p_s = signal.params_per_feature(s)``.
With any leading batch shape ``batch`` (``(B,)`` for ``B`` events, ``(S, B)`` for posterior samples,
or ``()`` for one event):

- ``params[s]``: tensor ``batch + (n_s, p_s)``;
- ``values[s]``: tensor ``batch + (n_s,)`` (cast to the dtype of ``params[s]``);
- ``bias``: the global bias ``w_0`` with shape ``batch`` (its own entity in the DEKF, involved in every
  event), or ``None`` (no global bias: ``w_0 = 0``).

``value`` returns ``λ`` with shape ``batch``. ``value_and_gradients`` returns ``(λ, grads,
grad_bias)`` with ``grads[s] = ∂λ/∂params[s]`` of the shape of ``params[s]`` and ``grad_bias`` a tensor
of ones of shape ``batch`` (``∂λ/∂w_0 = 1``), or ``None`` when ``bias`` is ``None``.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

__all__ = [
    "Signal",
    "LinearSignal",
    "FactorizationMachine",
    "MatrixFactorization",
    "CPFactorization",
    "slot_parameter_sizes",
]


def _check_positive_int(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return value


class Signal:
    """Abstract signal ``λ(ξ)`` of an exponential-family factorization model.

    The DEKF (Gómez-Uribe & Karrer, §3.2, Algorithm 1) linearizes the mean ``h(λ)`` around the current
    means; what it needs from the model is ``λ`` and ``∂λ/∂ξ_i`` for each involved entity ``i``
    (Gómez-Uribe & Karrer, §2.1 for the signals, §3.4 for the gradients, Eqs 25–26). Subclasses give
    both in closed form, batched over events (see the module docstring for the shapes).

    Attributes
    ----------
    n_params_per_feature : int
        ``p``, the length of the parameter vector of one feature (of the id slots, where a numeric
        context slot has its own size: see :meth:`params_per_feature`).
    n_slots : int or None
        The number of slots an event must have, or ``None`` for any number.
    """

    n_params_per_feature: int = 1
    n_slots: Optional[int] = None

    def params_per_feature(self, slot: int) -> int:
        """Length ``p_s`` of the parameter vector of one feature of slot ``slot``."""
        return self.n_params_per_feature

    def features_per_slot(self, slot: int) -> Optional[int]:
        """The number of features slot ``slot`` must hold, or ``None`` for any number."""
        return None

    # -- to implement ------------------------------------------------------------------------------
    def value(self, params: Sequence[Tensor], values: Optional[Sequence[Tensor]] = None,
              bias: Optional[Tensor] = None) -> Tensor:
        """The signal ``λ``, shape ``batch``."""
        raise NotImplementedError

    def value_and_gradients(self, params: Sequence[Tensor], values: Optional[Sequence[Tensor]] = None,
                            bias: Optional[Tensor] = None) -> Tuple[Tensor, List[Tensor], Optional[Tensor]]:
        """``(λ, [∂λ/∂params[s] for each slot s], ∂λ/∂bias or None)``."""
        raise NotImplementedError

    # -- helpers -----------------------------------------------------------------------------------
    def _check(self, params, values, need_values=True):
        if self.n_slots is not None and len(params) != self.n_slots:
            raise ValueError(f"{type(self).__name__} expects {self.n_slots} slots, got {len(params)}.")
        if need_values:
            if values is None or len(values) != len(params):
                raise ValueError(f"values must be a list of {len(params)} tensors, one per slot.")
        for s, theta in enumerate(params):
            p_s = self.params_per_feature(s)
            if theta.dim() < 2 or theta.shape[-1] != p_s:
                raise ValueError(f"params[{s}] must have shape batch + (n_s, {p_s}), got {tuple(theta.shape)}.")
            n_s = self.features_per_slot(s)
            if n_s is not None and theta.shape[-2] != n_s:
                raise ValueError(f"slot {s} of {type(self).__name__} holds {n_s} feature(s), "
                                 f"got params[{s}] of shape {tuple(theta.shape)}.")
            if need_values and values[s].shape != theta.shape[:-1]:
                raise ValueError(f"values[{s}] must have shape {tuple(theta.shape[:-1])}, "
                                 f"got {tuple(values[s].shape)}.")

    @staticmethod
    def _add_bias(lam, bias):
        if bias is None:
            return lam, None
        return lam + bias, torch.ones_like(bias)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._repr_args().items())
        return f"{type(self).__name__}({args})"

    def _repr_args(self):
        return {}


class LinearSignal(Signal):
    """Linear signal of a GLM / univariate regression (Gómez-Uribe & Karrer, §2.1 and §3.4).

    .. math::  λ = w_0 + \\sum_s \\sum_f x_{s,f} w_{s,f}, \\qquad
               ∂λ/∂w_{s,f} = x_{s,f}, \\qquad ∂λ/∂w_0 = 1.

    Every feature has one parameter (``p = 1``): its weight ``w``. Any number of slots, each with any
    number of features.

    Examples
    --------
    >>> import torch
    >>> sig = LinearSignal()
    >>> params = [torch.tensor([[[2.0]]]), torch.tensor([[[1.0], [3.0]]])]   # B = 1: slots of 1 and 2 features
    >>> values = [torch.tensor([[1.0]]), torch.tensor([[0.5, -1.0]])]
    >>> lam, grads, gb = sig.value_and_gradients(params, values, bias=torch.tensor([0.25]))
    >>> lam
    tensor([-0.2500])
    >>> grads[1]
    tensor([[[ 0.5000],
             [-1.0000]]])
    """

    n_params_per_feature = 1

    def value(self, params, values=None, bias=None):
        self._check(params, values)
        lam = None
        for theta, x in zip(params, values):
            term = (x.to(theta.dtype) * theta[..., 0]).sum(-1)
            lam = term if lam is None else lam + term
        if lam is None:
            raise ValueError("an event needs at least one slot.")
        return lam if bias is None else lam + bias

    def value_and_gradients(self, params, values=None, bias=None):
        lam = self.value(params, values, None)
        grads = [x.to(theta.dtype).unsqueeze(-1).expand_as(theta) for theta, x in zip(params, values)]
        lam, gb = self._add_bias(lam, bias)
        return lam, grads, gb


def _elementary_symmetric(y: Tensor, order: int) -> List[Tensor]:
    """Elementary symmetric polynomials ``e_0..e_order`` of ``y`` over axis -2 (Newton's identities).

    ``e_j = Σ_{f_1<…<f_j} Π_i y_{f_i}``; with the power sums ``P_i = Σ_f y_f^i``,
    ``e_j = (1/j) Σ_{i=1..j} (−1)^{i−1} e_{j−i} P_i``. Shapes: ``y`` is ``batch + (n, a)``, each ``e_j``
    is ``batch + (a,)``. Loops only over the order, never over features or events.
    """
    power_sums = [None]
    yi = y
    for i in range(1, order + 1):
        if i > 1:
            yi = yi * y
        power_sums.append(yi.sum(-2))
    e = [torch.ones_like(power_sums[1])] if order >= 1 else [torch.ones(y.shape[:-2] + y.shape[-1:],
                                                                         dtype=y.dtype, device=y.device)]
    for j in range(1, order + 1):
        acc = e[j - 1] * power_sums[1]
        for i in range(2, j + 1):
            term = e[j - i] * power_sums[i]
            acc = acc - term if i % 2 == 0 else acc + term
        e.append(acc / j)
    return e


def _leave_one_out(e: List[Tensor], y: Tensor, degree: int) -> Tensor:
    """``e^{(−f)}_degree``: the elementary symmetric polynomial of all features but ``f``, for every ``f``.

    No division: ``e^{(−f)}_0 = 1``, ``e^{(−f)}_j = e_j − y_f e^{(−f)}_{j−1}``. Returns ``batch + (n, a)``.
    """
    out = torch.ones_like(y)
    for j in range(1, degree + 1):
        out = e[j].unsqueeze(-2) - y * out
    return out


class FactorizationMachine(Signal):
    """Rendle's factorization machine of order q (Gómez-Uribe & Karrer, §2.1, Eqs 4–5; §3.4, Eqs 25–26).

    .. math::
        λ = w_0 + \\sum_f x_f w_f + \\sum_{l=2}^{q} \\sum_{f_1<\\dots<f_l}
            \\Big(\\prod_{j=1}^{l} x_{f_j}\\Big) \\sum_{k=1}^{a_l} \\prod_{j=1}^{l} v^{(l)}_{f_j,k},

    the inner sum running over the unordered ``l``-subsets of the event's features, all slots together.
    With ``y^{(l)}_{f,k} = x_f v^{(l)}_{f,k}`` the order-``l`` term is ``Σ_k e_l(y^{(l)}_{·,k})``, the
    elementary symmetric polynomial of degree ``l`` over the features. It is computed with Newton's
    identities (order 2: ``½[(Σ_f y_f)² − Σ_f y_f²]``), in ``O(n q Σ_l a_l)``. Gradients:

    .. math::
        ∂λ/∂w_f = x_f, \\qquad
        ∂λ/∂v^{(l)}_{f,k} = x_f\\, e_{l-1}\\big(y^{(l)}_{g,k} : g \\ne f\\big), \\qquad ∂λ/∂w_0 = 1,

    with the leave-one-out polynomials from ``e^{(−f)}_j = e_j − y_f e^{(−f)}_{j−1}`` (no division).

    Eq. 25 of the paper writes the gradient as a sum over *distinct* indices ``i_2 ≠ … ≠ i_l``; read as
    ordered tuples it overcounts the order-``l`` term by ``(l−1)!``. This class follows Eq. 5: sums over
    unordered subsets (Gómez-Uribe & Karrer, §3.4; see the spec's pitfall list).

    Parameters
    ----------
    n_factors : int
        ``a_l``, the number of factors of every order ``l = 2..q`` (unless ``factors_per_order``).
    order : int, default=2
        ``q``, the highest interaction order (1 = linear only).
    factors_per_order : sequence of int, optional
        ``(a_2, …, a_q)``: per-order numbers of factors (length ``order − 1``); overrides ``n_factors``.
    linear : bool, default=True
        Include the linear terms ``x_f w_f``. Without them the layout has no ``w``.

    Notes
    -----
    Per-feature parameter layout (``p = [linear] + Σ_l a_l``)::

        [w, v^(2)_1..v^(2)_{a_2}, …, v^(q)_1..v^(q)_{a_q}]

    With two one-hot features (``x = 1``: a user and an item) and a global bias, order 2 is matrix
    factorization with user, item and global biases; with all ``v = 0`` it is :class:`LinearSignal`.

    Examples
    --------
    >>> import torch
    >>> fm = FactorizationMachine(n_factors=2)          # p = 1 + 2: [w, v_1, v_2]
    >>> params = [torch.tensor([[[0.5, 1.0, 0.0]]]),     # user: w = 0.5, v = (1, 0)
    ...           torch.tensor([[[0.0, 2.0, 3.0]]])]     # item: w = 0,   v = (2, 3)
    >>> values = [torch.ones(1, 1), torch.ones(1, 1)]
    >>> lam, grads, gb = fm.value_and_gradients(params, values, bias=torch.tensor([1.0]))
    >>> lam                                              # 1 + 0.5 + 0 + (1*2 + 0*3)
    tensor([3.5000])
    >>> grads[0]                                         # [x_u, x_u x_v v_v]
    tensor([[[1., 2., 3.]]])
    """

    def __init__(self, n_factors: int, order: int = 2, factors_per_order: Optional[Sequence[int]] = None,
                 linear: bool = True):
        self.order = _check_positive_int("order", order)
        if factors_per_order is None:
            self.n_factors = _check_positive_int("n_factors", n_factors)
            factors = [self.n_factors] * (self.order - 1)
        else:
            factors = [_check_positive_int("factors_per_order[i]", a) for a in factors_per_order]
            if len(factors) != self.order - 1:
                raise ValueError(f"factors_per_order must give order - 1 = {self.order - 1} numbers "
                                 f"(a_2..a_q), got {len(factors)}.")
            self.n_factors = n_factors
        self.factors_per_order = tuple(factors)
        self.linear = bool(linear)
        if not self.linear and self.order == 1:
            raise ValueError("an order-1 factorization machine needs linear=True.")
        # offsets of each order's block in the feature layout
        start = 1 if self.linear else 0
        self._slices = []
        for a in self.factors_per_order:
            self._slices.append(slice(start, start + a))
            start += a
        self.n_params_per_feature = start

    def _repr_args(self):
        return {"n_factors": self.n_factors, "order": self.order,
                "factors_per_order": self.factors_per_order, "linear": self.linear}

    @staticmethod
    def _concat(params, values):
        if len(params) == 0:
            raise ValueError("an event needs at least one slot.")
        theta = params[0] if len(params) == 1 else torch.cat(list(params), dim=-2)
        dtype = theta.dtype
        xs = [x.to(dtype) for x in values]
        x = xs[0] if len(xs) == 1 else torch.cat(xs, dim=-1)
        return theta, x

    def _order_terms(self, theta, x, with_grad):
        """λ without the bias; and, if with_grad, ∂λ/∂theta of shape batch + (N, p)."""
        lam = (x * theta[..., 0]).sum(-1) if self.linear else None
        grad = torch.empty_like(theta) if with_grad else None
        if with_grad and self.linear:
            grad[..., 0] = x
        xu = x.unsqueeze(-1)
        for l, sl in zip(range(2, self.order + 1), self._slices):
            y = xu * theta[..., sl]                                  # batch + (N, a_l)
            if l == 2:
                s1 = y.sum(-2)
                term = 0.5 * (s1 * s1 - (y * y).sum(-2)).sum(-1)
                if with_grad:
                    grad[..., sl] = xu * (s1.unsqueeze(-2) - y)
            else:
                e = _elementary_symmetric(y, l)
                term = e[l].sum(-1)
                if with_grad:
                    grad[..., sl] = xu * _leave_one_out(e, y, l - 1)
            lam = term if lam is None else lam + term
        return lam, grad

    def value(self, params, values=None, bias=None):
        self._check(params, values)
        theta, x = self._concat(params, values)
        lam, _ = self._order_terms(theta, x, with_grad=False)
        return lam if bias is None else lam + bias

    def value_and_gradients(self, params, values=None, bias=None):
        self._check(params, values)
        theta, x = self._concat(params, values)
        lam, grad = self._order_terms(theta, x, with_grad=True)
        if len(params) == 1:
            grads = [grad]
        else:
            grads = list(torch.split(grad, [t.shape[-2] for t in params], dim=-2))
        lam, gb = self._add_bias(lam, bias)
        return lam, grads, gb


class CPFactorization(Signal):
    """CP/PARAFAC tensor factorization of order q (Gómez-Uribe & Karrer, §2.1; §3.4, corrected).

    .. math::
        λ = w_0 + \\sum_{i=1}^{q} b_i + \\sum_{l=1}^{a} \\prod_{i=1}^{q} ξ_{i,l}, \\qquad
        ∂λ/∂ξ_i = \\bigodot_{j \\ne i} ξ_j, \\qquad ∂λ/∂b_i = 1, \\qquad ∂λ/∂w_0 = 1.

    The paper prints the gradient with garbled indices; the correct one is the elementwise product of
    the other modes' vectors, computed here with prefix and suffix products (no division, exact for
    zero entries). ``q = 2`` is matrix factorization.

    Parameters
    ----------
    n_factors : int
        ``a``, the rank.
    order : int, default=3
        ``q``, the number of modes (slots), ``q >= 2``.
    biases : bool, default=True
        Give each entity a scalar bias ``b_i``.
    context : bool, default=False
        Add a last slot holding a block of ``n_ctx`` numeric context features that enter linearly,
        ``λ += Σ_c x_c β_c``, one parameter each (``params_per_feature(q) == 1``).

    Notes
    -----
    Slots ``0..q−1`` are the modes: exactly one feature each, an entity id with ``x = 1``; their
    ``values`` are **ignored** (may be ``None`` without context; with context the id slots' entries of
    ``values`` are still ignored, only ``values[q]`` is used). Per-feature layout of a mode slot::

        biases=True:   [b, ξ_1..ξ_a]      (p = 1 + a)
        biases=False:  [ξ_1..ξ_a]         (p = a)

    Examples
    --------
    >>> import torch
    >>> cp = CPFactorization(n_factors=2, order=3, biases=False)
    >>> params = [torch.tensor([[[1.0, 2.0]]]), torch.tensor([[[3.0, 4.0]]]), torch.tensor([[[5.0, 6.0]]])]
    >>> lam, grads, gb = cp.value_and_gradients(params)
    >>> lam                                  # 1*3*5 + 2*4*6
    tensor([63.])
    >>> grads[0]                             # (3*5, 4*6)
    tensor([[[15., 24.]]])
    >>> gb is None
    True
    """

    def __init__(self, n_factors: int, order: int = 3, biases: bool = True, context: bool = False):
        self.n_factors = _check_positive_int("n_factors", n_factors)
        self.order = _check_positive_int("order", order, minimum=2)
        self.biases = bool(biases)
        self.context = bool(context)
        self._off = 1 if self.biases else 0
        self.n_params_per_feature = self._off + self.n_factors
        self.n_slots = self.order + (1 if self.context else 0)

    def _repr_args(self):
        return {"n_factors": self.n_factors, "order": self.order, "biases": self.biases,
                "context": self.context}

    def params_per_feature(self, slot: int) -> int:
        if not 0 <= slot < self.n_slots:
            raise IndexError(f"slot {slot} out of range for {self.n_slots} slots.")
        if self.context and slot == self.order:
            return 1
        return self.n_params_per_feature

    def features_per_slot(self, slot: int) -> Optional[int]:
        if self.context and slot == self.order:
            return None
        return 1

    def _check_cp(self, params, values):
        self._check(params, values, need_values=False)
        if self.context:
            if values is None or len(values) != self.n_slots or values[-1] is None:
                raise ValueError(f"with context=True, values must be a list of {self.n_slots} entries "
                                 "whose last one holds the context values (the others are ignored).")
            if values[-1].shape != params[-1].shape[:-1]:
                raise ValueError(f"values[{self.order}] must have shape {tuple(params[-1].shape[:-1])}, "
                                 f"got {tuple(values[-1].shape)}.")

    def _factors(self, params):
        return [params[i][..., 0, self._off:] for i in range(self.order)]   # each batch + (a,)

    def _base_value(self, params, values, xis):
        if self.order == 2:
            prod = xis[0] * xis[1]
        else:
            prod = xis[0]
            for xi in xis[1:]:
                prod = prod * xi
        lam = prod.sum(-1)
        if self.biases:
            for i in range(self.order):
                lam = lam + params[i][..., 0, 0]
        if self.context:
            theta = params[-1]
            lam = lam + (values[-1].to(theta.dtype) * theta[..., 0]).sum(-1)
        return lam

    def value(self, params, values=None, bias=None):
        self._check_cp(params, values)
        lam = self._base_value(params, values, self._factors(params))
        return lam if bias is None else lam + bias

    def value_and_gradients(self, params, values=None, bias=None):
        self._check_cp(params, values)
        xis = self._factors(params)
        lam = self._base_value(params, values, xis)
        q = self.order
        if q == 2:
            others = [xis[1], xis[0]]
        else:
            # prefix[i] = ξ_0 ⊙ … ⊙ ξ_{i−1}, suffix[i] = ξ_{i+1} ⊙ … ⊙ ξ_{q−1}
            prefix = [None] * q
            suffix = [None] * q
            acc = None
            for i in range(q):
                prefix[i] = acc
                acc = xis[i] if acc is None else acc * xis[i]
            acc = None
            for i in reversed(range(q)):
                suffix[i] = acc
                acc = xis[i] if acc is None else acc * xis[i]
            others = [p if s is None else (s if p is None else p * s) for p, s in zip(prefix, suffix)]
        grads = []
        for i in range(q):
            if self.biases:
                g = torch.empty_like(params[i])
                g[..., 0, 0] = 1
                g[..., 0, 1:] = others[i]
            else:
                g = others[i].unsqueeze(-2)
            grads.append(g)
        if self.context:
            theta = params[-1]
            grads.append(values[-1].to(theta.dtype).unsqueeze(-1).expand_as(theta))
        lam, gb = self._add_bias(lam, bias)
        return lam, grads, gb


class MatrixFactorization(CPFactorization):
    """Matrix factorization (Gómez-Uribe & Karrer, §2.1; §3.4): CP factorization with two slots.

    .. math::
        λ = w_0 + b_u + b_v + ξ_u·ξ_v, \\qquad ∂λ/∂ξ_u = ξ_v, \\quad ∂λ/∂ξ_v = ξ_u, \\quad
        ∂λ/∂b_u = ∂λ/∂b_v = ∂λ/∂w_0 = 1.

    Exactly two slots (user, item), one feature each, ``x = 1``: the ``values`` of these slots are
    **ignored** (pass ``None`` without context). It equals the order-2 :class:`FactorizationMachine`
    on the two one-hot features (with ``biases=True``, ``b`` playing ``w``). ``λ`` is bilinear, so the
    within-entity blocks of its Hessian are zero.

    Parameters
    ----------
    n_factors : int
        ``a``, the length of ``ξ``.
    biases : bool, default=True
        Per-entity scalar biases. Layout ``[b, ξ_1..ξ_a]`` (``p = 1 + a``); without, ``[ξ_1..ξ_a]``
        (``p = a``). The global bias ``w_0`` is the ``bias`` argument either way (``None`` allowed).
    context : bool, default=False
        A third slot of numeric context features entering linearly (one parameter each), as in
        :class:`CPFactorization`.

    Examples
    --------
    >>> import torch
    >>> mf = MatrixFactorization(n_factors=2)
    >>> user = torch.tensor([[[0.5, 1.0, 2.0]]])          # B = 1: b_u = 0.5, ξ_u = (1, 2)
    >>> item = torch.tensor([[[-1.0, 3.0, 4.0]]])         # b_v = -1, ξ_v = (3, 4)
    >>> lam, grads, gb = mf.value_and_gradients([user, item], bias=torch.tensor([0.1]))
    >>> lam                                               # 0.1 + 0.5 - 1 + 11
    tensor([10.6000])
    >>> grads[0]                                          # [1, ξ_v]
    tensor([[[1., 3., 4.]]])
    """

    def __init__(self, n_factors: int, biases: bool = True, context: bool = False):
        super().__init__(n_factors, order=2, biases=biases, context=context)

    def _repr_args(self):
        return {"n_factors": self.n_factors, "biases": self.biases, "context": self.context}


def slot_parameter_sizes(signal: Signal, features_per_slot: Sequence[int]) -> List[int]:
    """Each slot's DEKF block size ``n_s · p_s`` (the number of parameters of that slot's entity).

    Parameters
    ----------
    signal : Signal
    features_per_slot : sequence of int
        ``n_s`` for every slot.

    Examples
    --------
    >>> slot_parameter_sizes(MatrixFactorization(4, context=True), [1, 1, 3])
    [5, 5, 3]
    >>> slot_parameter_sizes(FactorizationMachine(3, order=3), [1, 2])
    [7, 14]
    """
    features_per_slot = list(features_per_slot)
    if signal.n_slots is not None and len(features_per_slot) != signal.n_slots:
        raise ValueError(f"{type(signal).__name__} has {signal.n_slots} slots, got {len(features_per_slot)}.")
    sizes = []
    for s, n_s in enumerate(features_per_slot):
        _check_positive_int(f"features_per_slot[{s}]", n_s, minimum=0)
        fixed = signal.features_per_slot(s)
        if fixed is not None and n_s != fixed:
            raise ValueError(f"slot {s} of {type(signal).__name__} holds {fixed} feature(s), got {n_s}.")
        sizes.append(n_s * signal.params_per_feature(s))
    return sizes
