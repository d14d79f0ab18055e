"""The filtering engine: one step is predict → linearise → weight → update (DESIGN.md).

:class:`OnlineFilter` ties a model adapter (:mod:`skfilter.models`), a likelihood
(:mod:`skfilter.likelihoods`), a posterior structure (:mod:`skfilter.posteriors`) and the dynamics
``θ_t = γ θ_{t−1} + N(0, q I)`` (static by default). For a batch of ``B`` rows it

1. linearises ``h`` at the predicted mean ``μ⁻ = γ μ``: outputs ``f`` and Jacobians ``J``;
2. optionally records the one-step-ahead predictive of those rows from the predicted belief
   (``f`` and ``J Σ⁻ Jᵀ``), before their targets are used (prequential evaluation);
3. whitens the observation through the likelihood, scales it by ``√w`` (a weight ``w`` scales
   ``R`` by ``1/w``), and stacks the ``B·m`` pseudo-observation rows;
4. asks the structure for the predicted-and-updated belief and commits it, together with the
   likelihood's noise state, only if the step succeeded.

On the CPU, when both the likelihood and the posterior structure take NumPy arrays
(``host_arrays``), step 3 runs on zero-copy NumPy views (:mod:`skfilter._array_ops`: a small torch
operation costs several times a NumPy one, and a step on a small network is dozens of them).

A failed step raises :class:`~skfilter.exceptions.FilterStepError` with the belief after the last
good step left in place.
"""

from __future__ import annotations

import torch

from ._array_ops import NUMPY_OPS, as_numpy
from .exceptions import FilterStepError


class OnlineFilter:
    """Runs filter steps over a stream of rows.

    Parameters
    ----------
    adapter : skfilter.models.ModuleAdapter
    likelihood : skfilter.likelihoods.Likelihood
    posterior : skfilter.posteriors.Posterior
    decay, process_noise : float
        ``γ`` and ``q`` of the dynamics.
    noise_state : dict or None
        The likelihood's observation-noise state (Gaussian ``r``).
    """

    def __init__(self, adapter, likelihood, posterior, decay=1.0, process_noise=0.0, noise_state=None):
        self.adapter = adapter
        self.likelihood = likelihood
        self.posterior = posterior
        self.decay = float(decay)
        self.process_noise = float(process_noise)
        self.noise_state = noise_state

    def step(self, X, Y, w=None, record=None):
        """One filter step on rows ``X (B, D)``, targets ``Y (B, C)``, weights ``w (B,)`` or None.

        ``record``, if given, is called as ``record(X, f, quad, noise_state)`` with the
        one-step-ahead predictive of these rows — model output ``f (B, C)`` and ``J Σ⁻ Jᵀ``
        ``(B, C, C)`` at the predicted belief, and the noise state that held before this step —
        after the new belief is computed and before it is installed (so ``self.posterior`` still
        holds the previous belief); its return value is returned.
        """
        post, gamma, q = self.posterior, self.decay, self.process_noise
        mu_pred = post.predicted_mean(gamma, q)
        f, J = self.adapter.forward_jacobian(mu_pred, X)
        noise = self.likelihood.next_state(self.noise_state, f, Y, w)
        if noise is not self.noise_state and not bool(torch.isfinite(noise["r"]).all()):
            raise FilterStepError("The online observation-variance estimate became non-finite; "
                                  "the last good belief is kept.")
        if self.likelihood.host_arrays and post.host_arrays:
            # CPU fast path (skfilter._array_ops): whiten NumPy views, which the posterior takes
            f_, J_, Y_ = as_numpy(NUMPY_OPS, f, J, Y)
            Hw, ew = self.likelihood.whiten(f_, J_, Y_, {k: v.numpy() for k, v in noise.items()})
            if w is not None:
                w = w.numpy()
        else:
            Hw, ew = self.likelihood.whiten(f, J, Y, noise)
        if w is not None:
            sw = w ** 0.5
            Hw = Hw * sw[:, None, None]
            ew = ew * sw[:, None]
        P = Hw.shape[-1]
        want = record is not None
        pending, quad = post.propose(Hw.reshape(-1, P), ew.reshape(-1), gamma, q, J if want else None)
        out = record(X, f, quad, self.noise_state) if want else None
        post.commit(pending)
        self.noise_state = noise
        return out

    def run(self, X, Y, w=None, batch_size=1, record=None, progress=None):
        """Filter the rows of ``X`` in order, ``batch_size`` rows per step.

        Returns the outputs of ``record`` (see :meth:`step`) concatenated over rows, or ``None``.
        On a failed step, raises :class:`~skfilter.exceptions.FilterStepError` whose ``rows_done``
        is the number of rows learned before it; the belief after those rows is kept.
        """
        outs = []
        i = 0
        # the row blocks as views, made at once (cheaper than slicing at every step)
        Xs, Ys = X.split(batch_size), Y.split(batch_size)
        ws = [None] * len(Xs) if w is None else w.split(batch_size)
        try:
            for Xb, Yb, wb in zip(Xs, Ys, ws):
                j = i + Xb.shape[0]
                out = self.step(Xb, Yb, wb, record)
                if record is not None:
                    outs.append(out)
                i = j
                if progress is not None:
                    progress(j)
        except FilterStepError as exc:
            exc.step = i
            exc.rows_done = i
            raise
        except BaseException as exc:  # e.g. KeyboardInterrupt: the rows before i were learned
            try:
                exc.rows_done = i
            except AttributeError:  # pragma: no cover - exceptions without a __dict__
                pass
            raise
        if record is None:
            return None
        return torch.cat(outs) if outs else None
