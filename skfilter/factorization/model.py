"""A factorization model and its DEKF belief: entity tables, a signal, a likelihood, dynamics and time.

:class:`FactorizationFilter` is what the estimators (:mod:`skfilter.factorization.estimators`) run:
it maps an event — the ids of the entities in each *slot* (user, item, …), the numeric context and
the target — to the blocks it involves, brings them forward (the lazy predict of Alg. 2), computes
the signal and its per-entity Jacobians (:mod:`skfilter.factorization.signals`), whitens them with
the likelihood (:mod:`skfilter.likelihoods`) and applies the DEKF update
(:func:`~skfilter.factorization.dekf.dekf_update`), or the decoupled iterated EKF. Predictions are the
linearised predictive of the signal under the (lazily predicted) blocks; an id never seen uses the
prior of its type.

**Layout.** Slot ``s`` holds ``n_s`` features with ``p_s`` parameters each (an id: one feature of
value 1; the numeric context: one block with one feature per column) and, for ``d`` outputs
(multiclass logits), an entity's block is ``(d, n_s, p_s)`` flattened: each output has its own
parameters, the covariance of the block couples them. The global bias (when the signal has one) is
a one-entity table of ``d`` parameters involved in every event.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from ..kernels.factorization import (LIK_ADAPTIVE, LIK_BERNOULLI, LIK_BERNOULLI_ADF, LIK_CATEGORICAL,
                                      LIK_CATEGORICAL_ADF, LIK_GAUSSIAN, LIK_POISSON, SIG_CP, SIG_FM2, SIG_LINEAR)
from ..likelihoods import AssumedDensityCategorical, Bernoulli, Categorical, Gaussian, Poisson
from .dekf import dekf_update, event_log_likelihood, finite_or_raise, lazy_predict
from .entities import EntityPrior, EntityTable
from .signals import CPFactorization, FactorizationMachine, LinearSignal, MatrixFactorization

__all__ = ["Slot", "FactorizationFilter"]


class Slot(NamedTuple):
    """One slot of an event: ``name`` (its entity table), ``n_features`` per entity, whether its
    features are ids (value 1) or the numeric context, and ``prior`` of a new entity."""

    name: str
    n_features: int
    context: bool
    prior: EntityPrior


class FactorizationFilter:
    """The DEKF over the entity tables of a factorization model (module docstring).

    Parameters
    ----------
    signal : skfilter.factorization.signals.Signal
    slots : list of Slot
        In the signal's slot order.
    n_outputs : int
        ``d``.
    likelihood : skfilter.likelihoods.Likelihood
    bias_prior : EntityPrior or None
        Prior of the global bias (``d`` parameters); None when the signal has none.
    half_life : float or None
        Drift towards a reference with ``α = 0.5^(1/half_life)`` (Alg. 2); None: static (Alg. 1).
    drift_variance : float
        ``c`` of ``Ω = (1 − α²) c I``: the stationary spread of an entity around its reference.
    learn_reference : bool
        Learn the reference vectors (Alg. 2) or keep them at ``π`` (``'fixed'``).
    iterations : int
        1: the DEKF step; more: the decoupled iterated EKF with at most this many Fisher-scoring
        iterations (line search, stopping at ``tol``).
    tol : float
    dtype, device, seed
    """

    def __init__(self, signal, slots, n_outputs, likelihood, bias_prior=None, half_life=None, drift_variance=0.0,
                 learn_reference=True, iterations=1, tol=1e-8, dtype=torch.float64, device="cpu", seed=0):
        self.signal, self.slots, self.d = signal, list(slots), int(n_outputs)
        self.likelihood = likelihood
        self.dtype, self.device = dtype, torch.device(device)
        self.iterations, self.tol = int(iterations), float(tol)
        self.half_life = half_life
        self.alpha = None if half_life is None else 0.5 ** (1.0 / float(half_life))
        self.drift_variance = float(drift_variance)
        dynamic = self.alpha is not None
        stationary = self.drift_variance if dynamic else 0.0  # Ω/(1 − α²) = c
        rng = np.random.default_rng(seed)
        self.tables = {}
        self.omega = {}
        for slot in self.slots + ([Slot("bias", 1, False, bias_prior)] if bias_prior is not None else []):
            self.tables[slot.name] = EntityTable(slot.prior, stationary, references=dynamic,
                                                 learn_reference=learn_reference, dtype=dtype, device=device,
                                                 seed=int(rng.integers(2**31 - 1)))
            if dynamic:
                omega = (1.0 - self.alpha ** 2) * self.drift_variance
                self.omega[slot.name] = torch.full((slot.prior.size,), omega, dtype=dtype, device=self.device)
        self.has_bias = bias_prior is not None
        self.time = 0
        self.noise = likelihood.initial_state(self.d, self.device, dtype)

    def restart(self, slot_priors, bias_prior=None, drift_variance=0.0):
        """Forget everything learned and take new priors (``slot_priors`` in slot order, each the
        size of its slot's, and the bias prior if the model has a bias) and drift variance: the
        filter a new one with these and the first one's other arguments and seed would be (the same
        draws for the same entities), without building its tables and compiled plan again."""
        if len(slot_priors) != len(self.slots) or (bias_prior is None) == self.has_bias:
            raise ValueError("restart needs one prior per slot, and a bias prior exactly when the model has a bias.")
        self.drift_variance = float(drift_variance)
        dynamic = self.alpha is not None
        stationary = self.drift_variance if dynamic else 0.0
        self.slots = [slot._replace(prior=prior) for slot, prior in zip(self.slots, slot_priors)]
        for slot in self.slots + ([Slot("bias", 1, False, bias_prior)] if self.has_bias else []):
            self.tables[slot.name].restart(slot.prior, stationary)
            if dynamic:
                omega = (1.0 - self.alpha ** 2) * self.drift_variance
                self.omega[slot.name] = torch.full((slot.prior.size,), omega, dtype=self.dtype, device=self.device)
        self.time = 0
        self.noise = self.likelihood.initial_state(self.d, self.device, self.dtype)
        plan = self.__dict__.get("_kernel_plan")
        if plan is not None:
            plan.set_priors()

    def kernel_codes(self):
        """The model as the compiled DEKF (:mod:`skfilter.kernels.factorization`) takes it:
        ``(signal code, FM linear term, CP bias offset, CP order, CP context, likelihood code)``, or
        None for a model it does not run (an FM of order ≠ 2, context on an entity slot, a robust
        or multi-output Gaussian, a one-logit categorical, another likelihood or signal). ``d > 1``
        logits: the categorical likelihood, EKF or assumed-density update."""
        sig = self.signal
        n_slots = len(self.slots)
        if type(sig) is LinearSignal:
            s = (SIG_LINEAR, 0, 0, 0, 0)
        elif type(sig) is FactorizationMachine:
            if sig.order != 2:
                return None
            s = (SIG_FM2, int(sig.linear), 0, 0, 0)
        elif type(sig) in (MatrixFactorization, CPFactorization):
            if n_slots != sig.n_slots or any(sl.context for sl in self.slots[:sig.order]):
                return None
            if sig.context and not self.slots[-1].context:
                return None
            s = (SIG_CP, 0, int(sig.biases), sig.order, int(sig.context))
        else:
            return None
        lik = self.likelihood
        if type(lik) is Gaussian:
            if lik.robust_threshold is not None:
                return None
            code = LIK_ADAPTIVE if lik.adaptive else LIK_GAUSSIAN
            if self.noise is None or tuple(self.noise["r"].shape) != (1,):
                return None
        elif type(lik) is Bernoulli:
            code = LIK_BERNOULLI
        elif type(lik) is AssumedDensityCategorical:
            code = LIK_BERNOULLI_ADF if self.d == 1 else LIK_CATEGORICAL_ADF
        elif type(lik) is Categorical and self.d > 1:
            code = LIK_CATEGORICAL
        elif type(lik) is Poisson:
            code = LIK_POISSON
        else:
            return None
        return s + (code,)

    def __getstate__(self):
        # the compiled kernel's plan views this object's tensors: a copy builds its own
        state = dict(self.__dict__)
        state.pop("_kernel_plan", None)
        return state

    # -- blocks ------------------------------------------------------------------------------------
    def _predicted(self, name, rows, time, write):
        """The blocks ``rows`` of table ``name`` brought forward to ``time`` (written back if ``write``)."""
        table = self.tables[name]
        state = table.state(rows)
        if self.alpha is not None:
            delta = (time - state["last_time"]).clamp_min(0)
            if bool((delta > 0).any()):
                state = lazy_predict(state, self.alpha, self.omega[name], delta)
            state["last_time"] = torch.full_like(state["last_time"], int(time))
            if write:
                table.write(rows, state)
        return state

    def _prior_blocks(self, name, n):
        """Blocks of ``n`` unseen entities of table ``name``: the prior centre, covariance
        ``Π + Ω/(1 − α²) + diag(jitter²)`` (the random part of ``π`` is not drawn)."""
        table = self.tables[name]
        opts = {"dtype": self.dtype, "device": self.device}
        mean = torch.as_tensor(table.prior.mean, **opts).expand(n, -1)
        _, cov, _ = table.new_blocks(0)
        cov = cov + torch.diag(torch.as_tensor(table.prior.jitter ** 2, **opts))
        return {"mean": mean, "cov": cov.expand(n, -1, -1)}

    # -- the signal ---------------------------------------------------------------------------------
    def _signal(self, means, values, bias):
        """``λ (n, d)`` and the Jacobians ``[J_s (n, d, K_s)]`` (+ bias ``(n, d, d)``) from the blocks'
        means ``[(n, K_s)]``, the slot values ``[(n, n_s)]`` and the bias means ``(n, d)``."""
        n, d = values[0].shape[0] if values else bias.shape[0], self.d
        params = []
        for slot, mean in zip(self.slots, means):
            p = mean.shape[-1] // (d * slot.n_features)
            params.append(mean.reshape(n * d, slot.n_features, p))
        vals = [v.repeat_interleave(d, dim=0) for v in values]
        b = None if bias is None else bias.reshape(n * d)
        lam, grads, _ = self.signal.value_and_gradients(params, vals, b)
        eye = torch.eye(d, dtype=lam.dtype, device=lam.device)
        J = []
        for g in grads:  # (n·d, n_s, p) → block-diagonal over outputs (n, d, d·n_s·p)
            g = g.reshape(n, d, -1)
            J.append((eye[None, :, :, None] * g[:, :, None, :]).reshape(n, d, -1))
        if bias is not None:
            J.append(eye.expand(n, d, d))
        return lam.reshape(n, d), J

    def _event_blocks(self, ids, n, time, write, create):
        """Per slot (and the bias), the predicted blocks of ``n`` event rows: ``(names, rows, states)``;
        ``ids[s]`` the ids of slot ``s`` per row (ignored for the context slot, one entity)."""
        names, rows, states = [], [], []
        for slot, slot_ids in zip(self.slots, ids):
            keys = [0] * n if slot.context else slot_ids
            rows.append(self.tables[slot.name].rows(keys, time, create=create))
            names.append(slot.name)
        if self.has_bias:
            names.append("bias")
            rows.append(self.tables["bias"].rows([0] * n, time, create=True))
        for name, r in zip(names, rows):
            known = r >= 0
            if known.all():
                states.append(self._predicted(name, r, time, write))
                continue
            prior = self._prior_blocks(name, len(r))
            state = {"mean": prior["mean"].clone(), "cov": prior["cov"].clone()}
            if known.any():
                seen = self._predicted(name, r[known], time, write)
                idx = torch.as_tensor(np.flatnonzero(known), device=self.device)
                state["mean"][idx] = seen["mean"]
                state["cov"][idx] = seen["cov"]
            states.append(state)
        return names, rows, states

    # -- learning -----------------------------------------------------------------------------------
    def step(self, ids, values, y, weight=1.0):
        """Learn one event: ``ids[s]`` the id of slot ``s`` (ignored for the context slot),
        ``values[s]`` the slot's feature values ``(n_s,)`` tensor, ``y (d,)`` the target row."""
        self.time += 1
        t = self.time
        names, rows, states = self._event_blocks([[i] for i in ids], 1, t, write=False, create=True)
        if weight <= 0:  # no update, but the blocks were brought forward to this time
            for name, r, state in zip(names, rows, states):
                if self.alpha is not None:
                    self.tables[name].write(r, state)
            return
        blocks = [{k: v[0] for k, v in s.items() if k != "last_time"} for s in states]
        vals = [v.reshape(1, -1) for v in values]
        Y = y.reshape(1, self.d)
        new_blocks, noise = self._update(blocks, vals, Y, float(weight))
        for new in new_blocks:
            finite_or_raise(*new.values())
        for name, r, old, new in zip(names, rows, states, new_blocks):  # the predict and the update, at once
            written = {k: v.unsqueeze(0) for k, v in new.items()}
            if "last_time" in old:
                written["last_time"] = old["last_time"]
            self.tables[name].write(r, written)
        self.noise = noise

    def _linearise(self, blocks, vals):
        n_slots = len(self.slots)
        means = [b["mean"].unsqueeze(0) for b in blocks[:n_slots]]
        bias = blocks[n_slots]["mean"].unsqueeze(0) if self.has_bias else None
        f, J = self._signal(means, vals, bias)
        return f, [j[0] for j in J]

    def _whiten(self, f, J, Y, noise, weight, blocks):
        sizes = [j.shape[-1] for j in J]
        Jcat = torch.cat(J, dim=-1).unsqueeze(0)  # (1, d, K)
        if getattr(self.likelihood, "needs_predictive", False):  # assumed density: the logits' J Σ⁻ Jᵀ
            quad = sum(j @ b["cov"] @ j.mT for j, b in zip(J, blocks))
            Hw, ew = self.likelihood.whiten(f, Jcat, Y, noise, quad=quad.unsqueeze(0))
        else:
            Hw, ew = self.likelihood.whiten(f, Jcat, Y, noise)
        Hw, ew = Hw[0], ew[0]
        if weight != 1.0:
            Hw, ew = Hw * math.sqrt(weight), ew * math.sqrt(weight)
        return list(torch.split(Hw, sizes, dim=-1)), ew

    def _update(self, blocks, vals, Y, weight):
        """The DEKF (or decoupled IEKF) update of one event's predicted blocks."""
        f, J = self._linearise(blocks, vals)
        finite_or_raise(f)
        noise = self.likelihood.next_state(self.noise, f, Y, torch.tensor([weight], dtype=f.dtype,
                                                                         device=f.device))
        H, e = self._whiten(f, J, Y, noise, weight, blocks)
        if self.iterations == 1:
            return dekf_update(blocks, H, e), noise
        return self._iterated_update(blocks, vals, Y, weight, noise, H, e), noise

    def _log_posterior(self, theta, blocks, vals, Y, weight, chols, noise):
        probe = [dict(b, mean=t) for b, t in zip(blocks, theta)]
        f, _ = self._linearise(probe, vals)
        value = weight * event_log_likelihood(self.likelihood, f, Y, noise)
        for t, b, L in zip(theta, blocks, chols):
            z = torch.linalg.solve_triangular(L, (t - b["mean"]).unsqueeze(-1), upper=False)
            value = value - 0.5 * (z * z).sum()
        return value

    def _iterated_update(self, blocks, vals, Y, weight, noise, H, e):
        """The decoupled iterated EKF (§4.2): Fisher scoring on the involved blocks' log posterior
        with backtracking, from the prior means; the covariance from the last linearisation."""
        theta = [b["mean"] for b in blocks]
        chols = [torch.linalg.cholesky(b["cov"]) for b in blocks]
        current = self._log_posterior(theta, blocks, vals, Y, weight, chols, noise)
        for _ in range(self.iterations):
            offset = sum(h @ (t - b["mean"]) for h, t, b in zip(H, theta, blocks))
            moved = dekf_update(blocks, H, e, residual=e + offset)  # μ + q S⁻¹ r at this linearisation
            step = [m["mean"] - t for m, t in zip(moved, theta)]
            size = 1.0
            for _ in range(30):  # backtracking on the log posterior
                trial = [t + size * s for t, s in zip(theta, step)]
                value = self._log_posterior(trial, blocks, vals, Y, weight, chols, noise)
                if bool(torch.isfinite(value)) and float(value) >= float(current) - 1e-12 * abs(float(current)):
                    break
                size *= 0.5
            else:
                break
            theta, current = trial, value
            f, J = self._linearise([dict(b, mean=t) for b, t in zip(blocks, theta)], vals)
            H, e = self._whiten(f, J, Y, noise, weight, blocks)
            if max(float((size * s).abs().max()) for s in step) <= self.tol:
                break
        offset = sum(h @ (t - b["mean"]) for h, t, b in zip(H, theta, blocks))
        final = dekf_update(blocks, H, e, residual=e + offset)
        for new, t in zip(final, theta):
            new["mean"] = t  # the MAP the iterations reached (the last step's update, to tol)
        return final

    # -- predictions --------------------------------------------------------------------------------
    def linearized(self, ids, values):
        """``(λ (n, d), Cov(λ) (n, d, d))`` of ``n`` events at the next step: the blocks brought
        forward to ``time + 1``, as the next event's update will see them (nothing is written;
        unseen ids use the prior)."""
        n = len(values[0])
        names, rows, states = self._event_blocks(ids, n, self.time + 1, write=False, create=False)
        n_slots = len(self.slots)
        means = [s["mean"] for s in states[:n_slots]]
        bias = states[n_slots]["mean"] if self.has_bias else None
        f, J = self._signal(means, list(values), bias)
        quad = sum(j @ s["cov"] @ j.mT for j, s in zip(J, states))
        return f, quad

    def sample_signal(self, ids, values, n_samples, generator):
        """``λ (n_samples, n, d)`` from joint draws of the involved blocks at the next step (as
        :meth:`linearized`): each entity is drawn once per sample and shared by every row that
        involves it (Thompson sampling over candidates)."""
        names, rows, states = self._event_blocks(ids, len(values[0]), self.time + 1, write=False, create=False)
        n_slots = len(self.slots)
        drawn = []
        for r, s in zip(rows, states):
            keys, inverse = np.unique(np.where(r >= 0, r, -1 - np.arange(len(r))), return_inverse=True)
            first = np.array([np.flatnonzero(inverse == k)[0] for k in range(len(keys))])
            idx = torch.as_tensor(first, device=self.device)
            mean, cov = s["mean"][idx], s["cov"][idx]
            L = torch.linalg.cholesky(cov + 1e-12 * torch.eye(cov.shape[-1], dtype=cov.dtype, device=cov.device))
            eps = torch.randn((n_samples,) + tuple(mean.shape), generator=generator, dtype=mean.dtype)
            draws = mean + (L @ eps.to(mean.device).unsqueeze(-1))[..., 0]
            drawn.append(draws[:, torch.as_tensor(inverse, device=self.device)])
        out = []
        for k in range(n_samples):
            means = [dr[k] for dr in drawn[:n_slots]]
            bias = drawn[n_slots][k] if self.has_bias else None
            f, _ = self._signal(means, list(values), bias)
            out.append(f)
        return torch.stack(out)

    def nbytes(self) -> int:
        """Bytes of the belief (every table's entities)."""
        return sum(t.nbytes() for t in self.tables.values())

    def to(self, device, dtype):
        for t in self.tables.values():
            t.to(device, dtype)
        self.omega = {k: v.to(device=device, dtype=dtype) for k, v in self.omega.items()}
        if self.noise is not None:
            self.noise = {k: v.to(device=device, dtype=dtype) for k, v in self.noise.items()}
        self.dtype, self.device = dtype, torch.device(device)
        return self
