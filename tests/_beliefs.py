"""Test fixtures: the stateful ``propose``/``commit`` holders the algebra tests were written against,
built on the engine's pure functions (a holder keeps a structure and its current belief value).

They let the closed-form and golden tests state their oracles on ``post.mean``, ``post.cov``,
``post.W`` … while every step runs through :meth:`Structure.update`,
:func:`skfilter.dynamics.apply_dynamics` and :func:`skfilter.filtering.run_filter`.
"""

from __future__ import annotations

import torch

from skfilter import posteriors as P
from skfilter.dynamics import Dynamics, Reference, apply_dynamics
from skfilter.filtering import EngineParts, FilterState, run_filter


class _Holder:
    structure = None
    inflation = None
    inflation_factor = 0.0

    def _dynamics(self, gamma, q):
        return Dynamics(decay=gamma, process_noise=q, inflation=self.inflation,
                        inflation_factor=self.inflation_factor)

    def _q(self, gamma, q):
        return q

    def predicted(self, gamma=1.0, q=0.0):
        return apply_dynamics(self.structure, self.belief, self._dynamics(gamma, self._q(gamma, q)),
                              self.reference)

    def propose(self, Hw, ew, gamma=1.0, q=0.0, J=None):
        predicted = self.predicted(gamma, q)
        quad = None if J is None else self.structure.quadratic_form(predicted, J)
        new, _ = self.structure.update(predicted, Hw, ew)
        return new, quad

    def commit(self, pending):
        self.belief = pending

    def predicted_mean(self, gamma=1.0, q=0.0):
        return self.predicted(gamma, q).mean

    def predictive_cov(self, J, gamma=1.0, q=0.0):
        return self.structure.quadratic_form(self.predicted(gamma, q), J)

    def predictive_var(self, J, gamma=1.0, q=0.0):
        return self.predictive_cov(J, gamma, q).diagonal(dim1=-2, dim2=-1)

    def marginal_variance(self):
        return self.structure.marginal_variance(self.belief)

    def covariance(self):
        return self.structure.covariance(self.belief)

    def sample(self, n_samples, generator):
        return self.structure.sample(self.belief, n_samples, generator)

    def state_dict(self):
        return P.Posterior(self.structure, self.belief).state_dict()

    @property
    def host_arrays(self):
        return bool(getattr(self.structure, "uses_host_arrays", lambda b: False)(self.belief))

    @property
    def n_params(self):
        return int(self.belief.mean.shape[-1])

    @property
    def mean(self):
        return self.belief.mean

    @mean.setter
    def mean(self, value):
        self.belief = self.belief._replace(mean=value)

    def to(self, device=None, dtype=None):
        self.belief = P.map_belief(lambda v: v.to(device=device, dtype=dtype), self.belief)
        self.reference = Reference(self.reference.mean.to(device=device, dtype=dtype), self.reference.variance)
        return self


class FullCovariance(_Holder):
    def __init__(self, mean, prior_variance):
        self.structure = P.FullCovariance()
        self.reference = Reference(mean.clone(), prior_variance)
        self.belief = self.structure.prior(mean, prior_variance)

    @property
    def cov(self):
        return self.belief.cov

    @cov.setter
    def cov(self, value):
        self.belief = self.belief._replace(cov=value)


class DiagonalCovariance(_Holder):
    def __init__(self, mean, prior_variance, projection="vd", vd_mean="paper"):
        self.structure = P.DiagonalCovariance(projection, vd_mean)
        self.projection, self.vd_mean = projection, vd_mean
        self.reference = Reference(mean.clone(), prior_variance)
        self.belief = self.structure.prior(mean, prior_variance)

    @property
    def var(self):
        return self.belief.var

    @var.setter
    def var(self, value):
        self.belief = self.belief._replace(var=value)


class LowRankPrecision(_Holder):
    def __init__(self, mean, prior_variance, rank=10, variant="diagonal", inflation=None, inflation_factor=0.0,
                 svd="full", steady_state=False, seed=0, cpu_backend="numpy"):
        if steady_state and variant != "spherical":
            raise ValueError("steady_state applies to variant='spherical' only.")
        self.structure = P.LowRankPrecision(rank=rank, variant=variant, svd=svd, seed=seed, cpu_backend=cpu_backend)
        Dynamics(inflation=inflation)  # validates the name
        self.inflation, self.inflation_factor = inflation, float(inflation_factor)
        self.steady_state = steady_state
        self.variant, self.rank, self.svd = variant, int(rank), svd
        self.eta0 = 1.0 / float(prior_variance)
        self.reference = Reference(mean.clone(), prior_variance)
        self.belief = self.structure.prior(mean, prior_variance)

    @property
    def cpu_backend(self):
        return self.structure.cpu_backend

    @cpu_backend.setter
    def cpu_backend(self, value):
        self.structure.cpu_backend = value

    def _q(self, gamma, q):
        return (1.0 - gamma * gamma) / self.eta0 if self.steady_state else q

    def _quad(self, J, ups, WT):
        return self.structure.quadratic_form(self.belief._replace(diagonal=ups, low_rank=WT), J)

    def precision(self):
        return self.structure.precision(self.belief)

    @property
    def ups(self):
        return self.belief.diagonal

    @ups.setter
    def ups(self, value):
        self.belief = self.belief._replace(diagonal=value)

    diagonal = ups

    @property
    def WT(self):
        return self.belief.low_rank

    @WT.setter
    def WT(self, value):
        self.belief = self.belief._replace(low_rank=value.contiguous())

    @property
    def W(self):
        return self.belief.low_rank.T

    @W.setter
    def W(self, value):
        self.belief = self.belief._replace(low_rank=value.T.contiguous())

    low_rank = WT

    @property
    def eta_pp(self):
        return float(self.belief.prior_precision)

    @property
    def prior_mean(self):
        return self.belief.prior_mean if self.inflation == "bayesian" else None

    @property
    def n_steps(self):
        return self.belief.n_steps

    @property
    def _seed(self):
        return self.structure.seed


class OnlineFilter:
    """The old stateful runner, over :func:`run_filter` (tests of the engine loop)."""

    def __init__(self, adapter, likelihood, posterior, decay=1.0, process_noise=0.0, noise_state=None):
        self.adapter, self.likelihood, self.posterior = adapter, likelihood, posterior
        self.decay, self.process_noise = float(decay), float(process_noise)
        self.noise_state = noise_state

    def _parts(self):
        post = self.posterior
        q = post._q(self.decay, self.process_noise)
        return EngineParts(self.adapter, self.likelihood, post.structure, post._dynamics(self.decay, q),
                           post.reference)

    def run(self, X, Y, w=None, batch_size=1, record=None, progress=None):
        state = FilterState(self.posterior.belief, self.noise_state, 0)
        try:
            state, out = run_filter(self._parts(), state, X, Y, w, batch_size, record, progress)
        except BaseException as exc:
            good = getattr(exc, "last_good_state", None)
            if good is not None:
                self.posterior.belief, self.noise_state = good.belief, good.noise
            raise
        self.posterior.belief, self.noise_state = state.belief, state.noise
        return out

    def step(self, X, Y, w=None, record=None):
        return self.run(X, Y, w, X.shape[0], record)


# -- helpers shared by the test modules ----------------------------------------------------------
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from pathlib import Path  # noqa: E402

CPU = torch.device("cpu")
F64 = torch.float64
REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"


def as_tensor_copy(a):
    """A float64 CPU tensor copy of ``a``."""
    return torch.tensor(np.asarray(a, dtype=np.float64))


def load_reference(name):
    """A golden stream of ``../shared/reference``; skips when the shared folder is absent."""
    path = REFERENCE / name
    if not REFERENCE.parent.is_dir():
        pytest.skip(f"the shared reference folder {REFERENCE.parent} is absent (not a full checkout)")
    assert path.is_file(), f"{path} is missing although {REFERENCE.parent} exists"
    return np.load(path)


def golden_net(d):
    """The 8-50-1 ReLU network of a golden stream, with its initial weights."""
    D = d["X"].shape[1]
    net = torch.nn.Sequential(torch.nn.Linear(D, 50), torch.nn.ReLU(), torch.nn.Linear(50, 1)).double()
    with torch.no_grad():
        net[0].weight.copy_(as_tensor_copy(d["W1"]))
        net[0].bias.copy_(as_tensor_copy(d["b1"]))
        net[2].weight.copy_(as_tensor_copy(d["W2"]))
        net[2].bias.copy_(as_tensor_copy(d["b2"]))
    return net


def make_filter(adapter, likelihood, posterior, n_outputs, gamma=1.0, q=0.0):
    """An :class:`OnlineFilter` with the likelihood's initial noise state (CPU, float64)."""
    state = likelihood.initial_state(n_outputs, CPU, F64)
    return OnlineFilter(adapter, likelihood, posterior, decay=gamma, process_noise=q, noise_state=state)


def record_output_and_variance(X, f, quad, noise_state, predicted=None):
    """``record`` callback: one-step-ahead output and epistemic variance per row."""
    return torch.cat([f, quad.diagonal(dim1=1, dim2=2)], dim=1)


def run_recorded(filt, X, Y, batch_size=1, w=None):
    """Run ``filt`` recording the one-step-ahead outputs and variances: ``(f, var)``."""
    out = filt.run(X, Y, w=w, batch_size=batch_size, record=record_output_and_variance)
    C = Y.shape[1]
    return out[:, :C], out[:, C:]
