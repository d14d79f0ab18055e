"""Entity tables: the block-diagonal Gaussian belief of a factorization model, one block per entity.

Gómez-Uribe & Karrer (§3.2–§3.3) keep one Gaussian block per *entity* (a user, an item, a tensor
index, the block of numeric context weights, the global bias). An :class:`EntityTable` holds the
blocks of one entity type as rows of growing tensors, so that memory grows with the entities seen:

* ``mean (n, K)`` and ``cov (n, K, K)``: the block ``N(μ_i, Σ_i)`` of each entity's ``K`` parameters;
* with drift towards a reference (Alg. 2), the reference vector's mean ``ref_mean (n, K)``, its
  cross-covariance with the entity ``cross (n, K, K)`` (``Σ_0i = Cov(ξ_0i, ξ_i)``, rows index
  ``ξ_0i``) and its covariance ``ref_cov (n, K, K)``, and the time ``last_time (n,)`` the block was
  last brought forward.

An entity is created on first sight from the stationary distribution of the dynamics (Eqs. 20–21):
``μ_i = μ_0i = π_i``, ``Σ_i = Π_i + Ω_i / (1 − α_i²)``, ``Σ_0i = Σ_0i0 = Π_i`` (``Σ_i = Π_i`` without
dynamics). ``π_i`` is drawn per entity (:class:`EntityPrior`): factor coordinates at random around 0,
since a zero mean is a stationary point of a bilinear signal (nothing would ever be learned), biases
and linear weights at their given centre.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["EntityPrior", "EntityTable"]


class EntityPrior:
    """The prior ``N(π_i, Π_i)`` of a new entity's reference vector.

    Parameters
    ----------
    mean : array-like of shape (K,)
        The centre of ``π_i``.
    variance : array-like of shape (K,) or (K, K)
        The diagonal of ``Π_i``, or ``Π_i`` itself (symmetric positive semi-definite).
    jitter : array-like of shape (K,), optional
        Standard deviation of the random part of ``π_i`` (drawn once per entity, in creation order,
        from the table's generator); zero where absent.

    Examples
    --------
    >>> import numpy as np
    >>> from skfilter.factorization.entities import EntityPrior
    >>> prior = EntityPrior(np.zeros(3), np.full(3, 0.5), jitter=[0.0, 0.1, 0.1])
    >>> prior.size
    3
    """

    def __init__(self, mean, variance, jitter=None):
        self.mean = np.asarray(mean, dtype=np.float64).reshape(-1)
        variance = np.asarray(variance, dtype=np.float64)
        K = self.mean.shape[0]
        self.covariance = np.diag(variance.reshape(-1)) if variance.ndim <= 1 else variance
        self.jitter = np.zeros_like(self.mean) if jitter is None else np.asarray(jitter, dtype=np.float64).reshape(-1)
        if self.covariance.shape != (K, K) or self.jitter.shape != (K,):
            raise ValueError("mean, variance and jitter of an EntityPrior must have matching sizes.")
        if variance.ndim <= 1:  # a diagonal: symmetric, its eigenvalues the variances
            invalid = not np.all(variance >= -1e-12)
        else:
            invalid = not np.allclose(self.covariance, self.covariance.T) or \
                np.linalg.eigvalsh(self.covariance).min() < -1e-12
        if invalid or np.any(self.jitter < 0):
            raise ValueError("An EntityPrior's covariance must be symmetric positive semi-definite and its jitter "
                             "non-negative.")

    @property
    def variance(self) -> np.ndarray:
        """The diagonal of ``Π``."""
        return np.diag(self.covariance).copy()

    @property
    def size(self) -> int:
        return int(self.mean.shape[0])


class EntityTable:
    """The blocks of one entity type (module docstring), growing as new ids arrive.

    Parameters
    ----------
    prior : EntityPrior
        The reference prior of a new entity.
    stationary_variance : float or array of shape (K,)
        ``Ω / (1 − α²)`` added to ``Π`` in a new entity's covariance (0 without dynamics).
    references : bool
        Keep the reference state (Alg. 2); without it, only ``mean``, ``cov`` and ``last_time``.
    learn_reference : bool
        With ``references``: the reference vector is random with prior ``N(π_i, Π_i)`` and learned
        jointly (``Σ_0i = Σ_0i0 = Π_i`` at creation); False: it is the fixed ``π_i``
        (``Σ_0i = Σ_0i0 = 0``, so it never moves and the entity reverts to ``π_i``).
    dtype, device
        Of the tensors.
    seed : int
        Seeds the random part of the new entities' prior means.

    Attributes
    ----------
    ids : dict
        ``{id: row}``.
    n_entities : int
    """

    def __init__(self, prior: EntityPrior, stationary_variance=0.0, references=False, learn_reference=True,
                 dtype=torch.float64, device="cpu", seed=0):
        self.prior = prior
        self.K = prior.size
        self.references = bool(references)
        self.learn_reference = bool(learn_reference)
        self.dtype, self.device = dtype, torch.device(device)
        self.ids: dict = {}
        self.n_entities = 0
        self._rng = np.random.default_rng(seed)
        self._initial_draws = self._rng.bit_generator.state  # (restart)
        self._set_prior(prior, stationary_variance)
        opts = {"dtype": dtype, "device": self.device}
        K = self.K
        cap = 4
        self.mean = torch.zeros(cap, K, **opts)
        self.cov = torch.zeros(cap, K, K, **opts)
        self.last_time = torch.zeros(cap, dtype=torch.long, device=self.device)
        if self.references:
            self.ref_mean = torch.zeros(cap, K, **opts)
            self.cross = torch.zeros(cap, K, K, **opts)
            self.ref_cov = torch.zeros(cap, K, K, **opts)

    def _set_prior(self, prior: EntityPrior, stationary_variance):
        opts = {"dtype": self.dtype, "device": self.device}
        self.prior = prior
        self._prior_cov = torch.as_tensor(prior.covariance, **opts)
        self._stationary = torch.as_tensor(np.full(self.K, stationary_variance, dtype=np.float64), **opts)

    def restart(self, prior: EntityPrior, stationary_variance=0.0):
        """Empty the table and give it ``prior`` (of the same size): afterwards it is the table a
        new :class:`EntityTable` with this prior and the first one's settings and seed would be (the
        same draws for the same entities), keeping its tensors' capacity."""
        if prior.size != self.K:
            raise ValueError(f"restart needs a prior of size {self.K}, got {prior.size}.")
        self._set_prior(prior, stationary_variance)
        self.__dict__.pop("_new_cache", None)
        self.ids = {}
        self.n_entities = 0
        self._rng.bit_generator.state = self._initial_draws

    @property
    def generator_state(self):
        """The state of the generator of new entities' prior means (to undo a failed step)."""
        return self._rng.bit_generator.state

    @generator_state.setter
    def generator_state(self, state):
        self._rng.bit_generator.state = state

    def forget_after(self, n: int):
        """Drop the entities created after the first ``n`` (their ids and rows; the tensors keep
        their capacity): undoes the creations of a failed step."""
        if n >= self.n_entities:
            return
        for key in list(self.ids)[n:]:  # insertion order is creation order
            del self.ids[key]
        self.n_entities = n

    def skip_draws(self, n: int):
        """Advance the generator past the prior-mean draws of ``n`` new entities (as creating them
        would), without creating them."""
        self._rng.standard_normal((int(n), self.K))

    # -- state ------------------------------------------------------------------------------------
    def _fields(self):
        names = ["mean", "cov", "last_time"]
        if self.references:
            names += ["ref_mean", "cross", "ref_cov"]
        return names

    @property
    def capacity(self) -> int:
        return int(self.mean.shape[0])

    def _grow(self, needed: int):
        cap = self.capacity
        if needed <= cap:
            return
        new_cap = max(needed, 2 * cap)
        for name in self._fields():
            old = getattr(self, name)
            new = old.new_zeros((new_cap,) + tuple(old.shape[1:]))
            new[:cap] = old
            setattr(self, name, new)

    def new_blocks(self, n: int):
        """``(π (n, K), N(π, Π + stationary) covariance (K, K), Π (K, K))`` for ``n`` new entities."""
        opts = {"dtype": self.dtype, "device": self.device}
        draws = self.prior.mean + self.prior.jitter * self._rng.standard_normal((n, self.K))
        pi = torch.as_tensor(draws, **opts)
        Pi = self._prior_cov
        return pi, Pi + torch.diag(self._stationary), Pi

    def rows(self, ids, time: int, create: bool = True) -> np.ndarray:
        """Rows of ``ids`` (a sequence), creating the missing entities at ``time`` (or ``-1`` for a
        missing id when ``create`` is False)."""
        out = np.empty(len(ids), dtype=np.int64)
        fresh = []
        for j, key in enumerate(ids):
            row = self.ids.get(key)
            if row is None:
                if not create:
                    out[j] = -1
                    continue
                row = self.n_entities + len(fresh)
                self.ids[key] = row
                fresh.append(row)
            out[j] = row
        if fresh:
            self._create(len(fresh), time)
        return out

    def extend(self, keys, times):
        """Create the entities ``keys`` (none in the table, no repeats) in order, entity ``keys[i]``
        at time ``times[i]``: their rows and prior draws as :meth:`rows` would give them."""
        start = self.n_entities
        self.ids.update(zip(keys, range(start, start + len(keys))))
        self._create(len(keys), 0)
        times = np.asarray(times, dtype=np.int64)
        if self.device.type == "cpu":
            self.last_time.numpy()[start:start + len(keys)] = times
        else:
            self.last_time[start:start + len(keys)] = torch.as_tensor(times, device=self.device)

    def add(self, key, time: int) -> int:
        """Create the entity ``key`` (not in the table) at ``time`` and return its row: exactly
        ``rows([key], time)`` (the same prior draw; a few µs on the CPU)."""
        n = self.n_entities
        self._create(1, time)
        self.ids[key] = n
        return n

    def _create(self, n: int, time: int):
        """Append ``n`` entities at ``time``, their prior means drawn in order (on the CPU written
        through NumPy views of the tensors, the prior blocks made once per prior)."""
        start = self.n_entities
        self._grow(start + n)
        rows = slice(start, start + n)
        if self.device.type == "cpu":
            draws = self.prior.mean + self.prior.jitter * self._rng.standard_normal((n, self.K))
            cache = self.__dict__.get("_new_cache")
            if cache is None or cache[0] is not self._prior_cov or cache[1] is not self._stationary:
                Pi = self._prior_cov.numpy()
                cov = Pi.copy()  # Π + diag(stationary), as new_blocks adds them
                cov.reshape(-1)[::self.K + 1] += self._stationary.numpy()  # (the diagonal, a view)
                cache = (self._prior_cov, self._stationary, cov, Pi)
                self._new_cache = cache
            self.mean.numpy()[rows] = draws
            self.cov.numpy()[rows] = cache[2]
            self.last_time.numpy()[rows] = int(time)
            if self.references:
                self.ref_mean.numpy()[rows] = draws
                self.cross.numpy()[rows] = cache[3] if self.learn_reference else 0.0
                self.ref_cov.numpy()[rows] = cache[3] if self.learn_reference else 0.0
        else:
            pi, cov, Pi = self.new_blocks(n)
            self.mean[rows] = pi
            self.cov[rows] = cov
            self.last_time[rows] = int(time)
            if self.references:
                self.ref_mean[rows] = pi
                self.cross[rows] = Pi if self.learn_reference else 0.0
                self.ref_cov[rows] = Pi if self.learn_reference else 0.0
        self.n_entities = start + n

    def state(self, rows):
        """The blocks of ``rows`` (a LongTensor or ndarray): a dict of tensors (copies)."""
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.device)
        return {name: getattr(self, name)[idx] for name in self._fields()}

    def write(self, rows, state: dict):
        """Write ``state`` (as :meth:`state` returns) back into ``rows``."""
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.device)
        for name, value in state.items():
            getattr(self, name)[idx] = value

    def nbytes(self) -> int:
        """Bytes held by the entities seen (not the spare capacity)."""
        n = self.n_entities
        return int(sum(getattr(self, name)[:n].numel() * getattr(self, name).element_size()
                       for name in self._fields()))

    def to(self, device, dtype):
        """Move the tables (float fields to ``dtype``)."""
        for name in self._fields():
            value = getattr(self, name)
            setattr(self, name, value.to(device=device) if name == "last_time" else value.to(device=device, dtype=dtype))
        self._prior_cov = self._prior_cov.to(device=device, dtype=dtype)
        self._stationary = self._stationary.to(device=device, dtype=dtype)
        self.dtype, self.device = dtype, torch.device(device)
        return self
