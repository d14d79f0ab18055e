"""The DEKF paper's simulations (Gómez-Uribe & Karrer, §5): parameter estimation and explore/exploit.

Bernoulli observations with the canonical (logit) link throughout, three models:

* **regression** — one entity of 10 parameters (full 10×10 covariance: the DEKF is the EKF), 100
  fixed contexts ``x ~ N(0, I₁₀)``, 5,000 events;
* **MF** — 100 users × 10 items, factors of length 5, no biases, 50,000 events;
* **TF** — CP factorization of a 3×3×4×4 array, rank 3, no biases, 5,000 events.

**Priors** (the paper's values, :data:`PROBLEMS`): the reference mean ``π`` is ``0.405465/10`` per
coordinate (regression), ``±√(0.405465/5)`` (users +, items −) and ``±(0.405465/3)^{1/4}`` (modes
1–3 +, mode 4 −), perturbed per entity by ``N(0, (0.05 |π|)²)`` per coordinate; ``Π`` is ``M Mᵀ``
with ``M`` uniform(0, 1) entries (positive definite, positive entries), rescaled to the paper's trace
(0.06454, 0.928935, 0.684561), drawn once per entity type and simulation; with drift,
``α = 0.5^(1/HL)`` (HL 500, 10,000, 500) and ``Ω = (1 − α²) c I`` (c 0.031340, 0.2866316, 0.274378),
so that the stationary spread of an entity around its reference is ``c I``.

**Data.** Static: ``ξ_i ~ N(π_i, Π)``. Dynamic: the reference ``ξ_0i ~ N(π_i, Π)``, the entity
starts at its stationary law ``N(ξ_0i, c I)`` and every entity drifts at every step by Eq. 19
(``ξ_t = α(ξ_{t−1} − ξ_0) + ξ_0 + ω_t``), simulated explicitly in chunks of steps. Contexts are
uniform: one of the 100 vectors, a (user, item) pair, a cell of the array; ``y_t ~ Bern(σ(λ_t))``.

**Experiment A** (:func:`estimation_run`): the prequential cumulative mean absolute error
``(1/t) Σ_{s≤t} |p_true,s − σ(λ(μ_s))|``, ``μ_s`` the (lazily predicted) means before the update on
event ``s``, for the DEKF — static (Alg. 1, prior ``N(π_i, Π)`` on static data, ``N(π_i, Π + c I)``
on drifting data), with drift and learned references (Alg. 2) and with drift towards the fixed
``π_i`` (``reference='fixed'``) — and for diagonal AdaGrad (:class:`AdaGrad`) on the per-event
Bernoulli negative log-likelihood of the same model from the same initial point ``π_i``.

**Experiment B** (:func:`bandit_run`): at each step ``k`` candidate contexts (regression: 10 of the
100 vectors; MF: a random user and all 10 items; TF: a random cell prefix ``(i₁, i₂, i₃)`` and the 4
values of the last mode); Thompson sampling (one joint posterior draw per step shared by the
candidates, :meth:`~skfilter.factorization.FactorizationFilter.sample_signal`), greedy on the
posterior mean, and random; only the chosen context is observed and learned. Regret
``Σ_s (p_best,s − p_chosen,s)``, normalised by the random policy's expected regret (a ratio of the
means over simulations); the random policy needs no learning: its expected regret per step is
``p_best − mean(p_candidates)``.

Run as ``python -m skfilter.benchmarks factorization-sim`` (tables ``factorization_estimation_table.md``
and ``factorization_bandit_table.md`` and figures ``img/factorization_estimation.png`` and
``img/factorization_bandit.png`` under ``--out``).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from ._common import format_table, positive_int, save_figure, write_text

HELP = "DEKF paper §5: parameter estimation against AdaGrad, explore/exploit (regression, MF, TF)"

LOGIT_06 = 0.405465  # log 1.5 = logit(0.6)

#: the paper's settings per model (§5): entity types (name, count, sign of π), factor length,
#: |π| per coordinate, trace of Π, half-life, c of Ω = (1 − α²) c I, events
PROBLEMS = {
    "regression": {"types": (("weights", 1, +1),), "K": 10, "pi": LOGIT_06 / 10, "trace": 10 * 0.006454,
                   "half_life": 500, "c": 0.031340, "events": 5_000, "contexts": 100},
    "MF": {"types": (("user", 100, +1), ("item", 10, -1)), "K": 5, "pi": math.sqrt(LOGIT_06 / 5),
           "trace": 5 * 0.185787, "half_life": 10_000, "c": 0.2866316, "events": 50_000},
    "TF": {"types": (("mode 1", 3, +1), ("mode 2", 3, +1), ("mode 3", 4, +1), ("mode 4", 4, -1)), "K": 3,
           "pi": (LOGIT_06 / 3) ** 0.25, "trace": 3 * 0.228187, "half_life": 500, "c": 0.274378, "events": 5_000},
}
#: relative size of the per-entity perturbation of π (standard deviation, per coordinate)
PI_JITTER = 0.05
#: AdaGrad learning rates tried on a separate tuning simulation; ε of its denominator
ADAGRAD_RATES = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
ADAGRAD_EPS = 1e-8
TUNING_SEED = 10_000
#: candidates per explore/exploit step
N_CANDIDATES = {"regression": 10, "MF": 10, "TF": 4}
#: the estimators of experiment A
ESTIMATION_METHODS = ("DEKF (Alg. 2, learned reference)", "DEKF (Alg. 2, fixed reference)",
                      "DEKF (Alg. 1, static)", "AdaGrad")
POLICIES = ("Thompson", "greedy", "random")


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def alpha_of(half_life: float) -> float:
    """``α = 0.5^(1/half_life)`` (§6 of the paper)."""
    return 0.5 ** (1.0 / float(half_life))


def random_pd(K: int, trace: float, rng) -> np.ndarray:
    """``M Mᵀ`` with uniform(0, 1) entries (positive definite, positive entries), scaled to ``trace``."""
    M = rng.random((K, K))
    P = M @ M.T
    return P * (trace / np.trace(P))


# -- the simulated world ---------------------------------------------------------------------------
class World:
    """One simulation of a problem: priors, true parameters (static or drifting) and contexts.

    Attributes
    ----------
    name, spec, K, dynamic, alpha, c
    pi : list of ndarray (n_s, K)
        Per entity type, the per-entity prior means ``π_i`` (also the model's).
    Pi : list of ndarray (K, K)
        Per entity type, ``Π``.
    ref : list of ndarray (n_s, K)
        The true reference vectors (static: the parameters).
    contexts : ndarray (100, 10) or None
        Regression's fixed context vectors.
    """

    def __init__(self, name: str, seed: int, dynamic: bool, rng=None):
        spec = PROBLEMS[name]
        self.name, self.spec, self.K, self.dynamic = name, spec, spec["K"], bool(dynamic)
        rng = np.random.default_rng(seed) if rng is None else rng
        self.alpha = alpha_of(spec["half_life"]) if dynamic else 1.0
        self.c = spec["c"] if dynamic else 0.0
        K = self.K
        self.sizes = [n for _, n, _ in spec["types"]]
        self.Pi = [random_pd(K, spec["trace"], rng) for _ in spec["types"]]
        self.pi = [sign * spec["pi"] * (1 + PI_JITTER * rng.standard_normal((n, K))) for _, n, sign in spec["types"]]
        self.ref = [p + rng.multivariate_normal(np.zeros(K), P, size=len(p)) for p, P in zip(self.pi, self.Pi)]
        self.contexts = rng.standard_normal((spec["contexts"], K)) if "contexts" in spec else None
        self._rng = rng
        self._dev = [math.sqrt(self.c) * rng.standard_normal(r.shape) for r in self.ref]  # stationary start

    @property
    def regression(self) -> bool:
        return self.contexts is not None

    def paths(self, n_steps: int, chunk: int = 2_000):
        """Yield ``(t0, [values (L, n_s, K)])`` for steps ``t0 … t0 + L − 1`` (1-based): the true
        parameters at each step, every entity drifting every step (Eq. 19); static: constant."""
        t0 = 1
        while t0 <= n_steps:
            L = min(chunk, n_steps - t0 + 1)
            out = []
            for s, ref in enumerate(self.ref):
                if not self.dynamic:
                    out.append(np.broadcast_to(ref, (L,) + ref.shape))
                    continue
                noise = math.sqrt((1 - self.alpha ** 2) * self.c) * self._rng.standard_normal((L,) + ref.shape)
                dev = np.empty_like(noise)
                d = self._dev[s]
                for i in range(L):
                    d = self.alpha * d + noise[i]
                    dev[i] = d
                self._dev[s] = d
                out.append(ref + dev)
            yield t0, out
            t0 += L

    def signal(self, params, index):
        """``λ`` of events from the parameters ``params[s] (n_s, K)`` at their time and the event
        indices ``index (n, n_types)`` (regression: ``(n, 1)`` context numbers)."""
        if self.regression:
            return self.contexts[index[:, 0]] @ params[0][0]
        prod = np.ones((len(index), self.K))
        for s, p in enumerate(params):
            prod = prod * p[index[:, s]]
        return prod.sum(-1)

    def draw_events(self, n: int, rng):
        """``n`` uniform event indices ``(n, n_types)``."""
        if self.regression:
            return rng.integers(0, len(self.contexts), (n, 1))
        return np.column_stack([rng.integers(0, m, n) for m in self.sizes])

    def candidates(self, rng):
        """The candidate events of one explore/exploit step, ``(k, n_types)``."""
        if self.regression:
            return rng.choice(len(self.contexts), N_CANDIDATES["regression"], replace=False)[:, None]
        first = [int(rng.integers(0, m)) for m in self.sizes[:-1]]
        last = np.arange(self.sizes[-1])
        return np.column_stack([np.full(len(last), f) for f in first] + [last])


# -- the estimators --------------------------------------------------------------------------------
class DEKF:
    """A :class:`~skfilter.factorization.FactorizationFilter` with the paper's priors (no global bias,
    ``biases=False``), its entities created up front at time 0 with the world's ``π_i``.

    ``variant``: ``'static'`` (Alg. 1), ``'learned'`` (Alg. 2) or ``'fixed'`` (Alg. 2 with the
    reference fixed at ``π_i``). On drifting data the static filter's prior is ``N(π_i, Π + c I)``.
    """

    def __init__(self, world: World, variant: str, seed: int = 0):
        import torch

        from ..factorization import FactorizationFilter
        from ..factorization.entities import EntityPrior
        from ..factorization.model import Slot
        from ..factorization.signals import CPFactorization, LinearSignal, MatrixFactorization
        from ..likelihoods import Bernoulli

        self.torch, self.world, self.variant = torch, world, variant
        K, spec = world.K, world.spec
        dynamic = variant != "static"
        extra = world.c if (variant == "static" and world.dynamic) else 0.0
        slots = []
        for (name, n, _), pi, Pi in zip(spec["types"], world.pi, world.Pi):
            prior = EntityPrior(pi.mean(0), Pi + extra * np.eye(K))
            if world.regression:
                slots.append(Slot(name, K, True, prior))
            else:
                slots.append(Slot(name, 1, False, prior))
        if world.regression:
            signal = LinearSignal()
        elif len(slots) == 2:
            signal = MatrixFactorization(K, biases=False)
        else:
            signal = CPFactorization(K, order=len(slots), biases=False)
        self.filter = FactorizationFilter(
            signal, slots, 1, Bernoulli(), bias_prior=None, half_life=spec["half_life"] if dynamic else None,
            drift_variance=spec["c"] if dynamic else 0.0, learn_reference=variant != "fixed", seed=seed)
        # create every entity at time 0 (stationary law: invariant under the lazy predict) with the
        # world's per-entity π_i (the table draws its own perturbation otherwise)
        for (name, n, _), pi in zip(spec["types"], world.pi):
            table = self.filter.tables[name]
            table.rows(list(range(n)) if not world.regression else [0], 0)
            value = torch.as_tensor(pi, dtype=table.dtype)
            table.mean[:n] = value
            if table.references:
                table.ref_mean[:n] = value
        self.ones = torch.ones(1, dtype=torch.float64)
        self.alpha = self.filter.alpha

    def _values(self, event):
        w = self.world
        if w.regression:
            return [self.torch.as_tensor(w.contexts[event[0]])]
        return [self.ones] * len(event)

    def _ids(self, event):
        return [None] if self.world.regression else [int(i) for i in event]

    def means(self, t: int):
        """Per entity type, the means ``(n_s, K)`` brought forward (lazily) to step ``t``."""
        out = []
        for name in (n for n, _, _ in self.world.spec["types"]):
            table = self.filter.tables[name]
            n = table.n_entities
            mean = table.mean[:n].numpy()
            if self.alpha is not None:
                delta = t - table.last_time[:n].numpy()
                ref = table.ref_mean[:n].numpy()
                mean = (self.alpha ** delta)[:, None] * (mean - ref) + ref
            out.append(mean)
        return out

    def predict(self, t: int, events):
        """``λ`` of ``events (n, n_types)`` under the means at step ``t`` (before its update)."""
        return self.world.signal(self.means(t), events)

    def thompson(self, t: int, events, generator):
        """One joint posterior draw of ``λ`` for the candidate ``events`` at step ``t``."""
        f = self.filter
        w = self.world
        if w.regression:
            ids = [[None] * len(events)]
            values = [self.torch.as_tensor(w.contexts[events[:, 0]])]
        else:
            ids = [list(map(int, events[:, s])) for s in range(events.shape[1])]
            values = [self.torch.ones(len(events), 1, dtype=self.torch.float64)] * events.shape[1]
        assert f.time == t - 1  # sample_signal draws at the next step, t: the one the update will learn
        lam = f.sample_signal(ids, values, 1, generator)
        return lam[0, :, 0].numpy()

    def update(self, t: int, event, y: float):
        assert self.filter.time == t - 1
        self.filter.step(self._ids(event), self._values(event), self.torch.tensor([float(y)], dtype=self.torch.float64))


class AdaGrad:
    """Diagonal (per-coordinate) AdaGrad on the per-event Bernoulli negative log-likelihood of the
    same model, from the world's ``π_i``: ``g = (σ(λ) − y) ∂λ/∂ξ``, ``G += g²``,
    ``ξ −= lr g / (√G + ε)`` for the involved entities only."""

    def __init__(self, world: World, lr: float, eps: float = ADAGRAD_EPS):
        self.world, self.lr, self.eps = world, float(lr), float(eps)
        self.params = [p.copy() for p in world.pi]
        self.G = [np.zeros_like(p) for p in world.pi]

    def predict(self, t, events):
        return self.world.signal(self.params, events)

    def gradients(self, event):
        """``∂λ/∂ξ`` of each involved entity (type, row, gradient)."""
        w = self.world
        if w.regression:
            return [(0, 0, w.contexts[event[0]])]
        vecs = [self.params[s][i] for s, i in enumerate(event)]
        out = []
        for s, i in enumerate(event):
            g = np.ones(w.K)
            for j, v in enumerate(vecs):
                if j != s:
                    g = g * v
            out.append((s, int(i), g))
        return out

    def loss(self, events, y):
        """Mean Bernoulli negative log-likelihood of ``events`` under the current parameters."""
        lam = self.world.signal(self.params, events)
        return float(np.mean(np.logaddexp(0.0, lam) - y * lam))

    def update(self, t, event, y):
        lam = float(self.world.signal(self.params, np.asarray(event)[None])[0])
        r = sigmoid(lam) - y
        for s, i, dl in self.gradients(event):  # all gradients at the pre-update point
            g = r * dl
            self.G[s][i] += g * g
            self.params[s][i] -= self.lr * g / (np.sqrt(self.G[s][i]) + self.eps)


# -- experiment A ----------------------------------------------------------------------------------
def estimation_run(name: str, seed: int, dynamic: bool, n_events: int, methods=ESTIMATION_METHODS,
                   adagrad_lr: float = 0.1):
    """One simulation of experiment A: ``{method: cumulative mean |p_true − p_pred| (n_events,)}``
    and ``{method: seconds}``."""
    world = World(name, seed, dynamic)
    rng = np.random.default_rng([seed, 1])
    events = world.draw_events(n_events, rng)
    uniforms = rng.random(n_events)
    p_true = np.empty(n_events)
    for t0, params in world.paths(n_events):
        sl = slice(t0 - 1, t0 - 1 + len(params[0]))
        ev = events[sl]
        if world.regression:
            p_true[sl] = sigmoid(np.einsum("lk,lk->l", world.contexts[ev[:, 0]], params[0][:, 0]))
        else:
            prod = np.ones((len(ev), world.K))
            for s in range(len(params)):
                prod = prod * params[s][np.arange(len(ev)), ev[:, s]]
            p_true[sl] = sigmoid(prod.sum(-1))
    y = (uniforms < p_true).astype(np.float64)
    curves, seconds = {}, {}
    for method in methods:
        if method == "AdaGrad":
            model = AdaGrad(world, adagrad_lr)
        else:
            variant = "learned" if "learned" in method else "fixed" if "fixed" in method else "static"
            if variant != "static" and not dynamic:
                continue
            model = DEKF(world, variant, seed=seed)
        err = np.empty(n_events)
        start = time.perf_counter()
        for t in range(1, n_events + 1):
            ev = events[t - 1]
            err[t - 1] = abs(p_true[t - 1] - sigmoid(float(model.predict(t, ev[None])[0])))
            model.update(t, ev, y[t - 1])
        seconds[method] = time.perf_counter() - start
        curves[method] = np.cumsum(err) / np.arange(1, n_events + 1)
    return curves, seconds


def tune_adagrad(name: str, dynamic: bool, n_events: int, rates=ADAGRAD_RATES):
    """The AdaGrad rate with the lowest final cumulative error on the tuning simulation."""
    scores = {}
    for lr in rates:
        curves, _ = estimation_run(name, TUNING_SEED, dynamic, n_events, methods=("AdaGrad",), adagrad_lr=lr)
        scores[lr] = float(curves["AdaGrad"][-1])
    return min(scores, key=scores.get), scores


# -- experiment B ----------------------------------------------------------------------------------
def normalised_regret(regret, random_regret):
    """Cumulative regret over cumulative random regret, ``(T,)``, from per-step regrets
    ``(n_sims, T)`` of a policy and of random: the ratio of the means over simulations."""
    num = np.cumsum(np.atleast_2d(regret), axis=1).mean(0)
    den = np.cumsum(np.atleast_2d(random_regret), axis=1).mean(0)
    return num / np.where(den > 0, den, np.nan)


def bandit_run(name: str, seed: int, dynamic: bool, n_steps: int, policies=POLICIES):
    """One simulation of experiment B: ``{policy: per-step regret (n_steps,)}`` and seconds. The
    policies see the same world, candidates and observation noise (common random numbers)."""
    import torch

    out, seconds = {}, {}
    for policy in policies:
        world = World(name, seed, dynamic)
        rng = np.random.default_rng([seed, 2])
        choice_rng = np.random.default_rng([seed, 3])
        gen = torch.Generator().manual_seed(seed)
        model = None if policy == "random" else DEKF(world, "learned" if dynamic else "static", seed=seed)
        regret = np.empty(n_steps)
        start = time.perf_counter()
        for t0, params in world.paths(n_steps):
            for j in range(len(params[0])):
                t = t0 + j
                cands = world.candidates(rng)
                u = rng.random()
                p = sigmoid(world.signal([pp[j] for pp in params], cands))
                if policy == "random":
                    regret[t - 1] = p.max() - p.mean()  # expected regret of a uniform choice
                    continue
                if policy == "Thompson":
                    score = model.thompson(t, cands, gen)
                else:
                    score = model.predict(t, cands)
                best = np.flatnonzero(score == score.max())
                k = int(best[0] if len(best) == 1 else choice_rng.choice(best))
                regret[t - 1] = p.max() - p[k]
                model.update(t, cands[k], float(u < p[k]))
        seconds[policy] = time.perf_counter() - start
        out[policy] = regret
    return out, seconds


# -- the command -----------------------------------------------------------------------------------
def _pool(fn, tasks, jobs):
    if jobs <= 1:
        return [fn(*t) for t in tasks]
    from joblib import Parallel, delayed

    return Parallel(n_jobs=jobs)(delayed(fn)(*t) for t in tasks)


def run_estimation(problems, sims, events, jobs=1, progress=print):
    """Experiment A over ``sims`` simulations; returns ``(rows, curves, rates)``."""
    rows, curves, rates = [], {}, {}
    for name in problems:
        n = events[name]
        for dynamic in (False, True):
            lr, scores = tune_adagrad(name, dynamic, n)
            rates[(name, dynamic)] = (lr, scores)
            results = _pool(estimation_run, [(name, s, dynamic, n, ESTIMATION_METHODS, lr) for s in range(sims)], jobs)
            setting = "drift" if dynamic else "static"
            for method in ESTIMATION_METHODS:
                runs = [r[0][method] for r in results if method in r[0]]
                if not runs:
                    continue
                c = np.mean(runs, axis=0)
                curves[(name, setting, method)] = c
                marks = {f"e{q}": float(c[min(n, q) - 1]) for q in (100, 1000)}
                label = method + (f" (lr {lr:g})" if method == "AdaGrad" else "")
                rows.append({"problem": name, "data": setting, "method": label,
                             **marks, "final": float(c[-1]),
                             "sd": float(np.std([r[-1] for r in runs], ddof=1)) if len(runs) > 1 else None,
                             "us": 1e6 * np.mean([r[1][method] for r in results]) / n})
            if progress:
                progress(f"  A {name} {setting}: done ({sims} simulations, AdaGrad lr {lr:g})")
    return rows, curves, rates


def run_bandit(problems, sims, steps, jobs=1, progress=print):
    """Experiment B over ``sims`` simulations; returns ``(rows, curves)``."""
    rows, curves = [], {}
    for name in problems:
        n = steps[name]
        for dynamic in (False, True):
            results = _pool(bandit_run, [(name, s, dynamic, n) for s in range(sims)], jobs)
            setting = "drift" if dynamic else "static"
            random = np.array([r[0]["random"] for r in results])
            for policy in POLICIES:
                reg = np.array([r[0][policy] for r in results])
                norm = normalised_regret(reg, random)
                curves[(name, setting, policy)] = norm
                q = n // 10
                rows.append({"problem": name, "data": setting, "policy": policy,
                             "n10": float(norm[q - 1]), "n50": float(norm[n // 2 - 1]), "final": float(norm[-1]),
                             "regret": float(np.cumsum(reg, axis=1)[:, -1].mean()),
                             "us": 1e6 * np.mean([r[1][policy] for r in results]) / n})
            if progress:
                progress(f"  B {name} {setting}: done ({sims} simulations)")
    return rows, curves


EST_COLUMNS = [("problem", "model", ""), ("data", "data", ""), ("method", "method", ""),
               ("e100", "error @100", ".4f"), ("e1000", "error @1000", ".4f"), ("final", "error @end", ".4f"),
               ("sd", "sd (sims)", ".4f"), ("us", "µs/event", ".0f")]
BANDIT_COLUMNS = [("problem", "model", ""), ("data", "data", ""), ("policy", "policy", ""),
                  ("n10", "regret/random @10%", ".3f"), ("n50", "@50%", ".3f"), ("final", "@end", ".3f"),
                  ("regret", "cum. regret @end", ".1f"), ("us", "µs/step", ".0f")]


def _plot_grid(curves, problems, kinds, ylabel, path, logy=False):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(problems), 2, figsize=(10, 3.2 * len(problems)), squeeze=False)
    letters = "abcdefgh"
    for r, name in enumerate(problems):
        for c, setting in enumerate(("static", "drift")):
            ax = axes[r, c]
            for kind in kinds:
                y = curves.get((name, setting, kind))
                if y is not None:
                    ax.plot(np.arange(1, len(y) + 1), y, label=kind)
            ax.set_title(f"({letters[2 * r + c]}) {'static' if setting == 'static' else 'dynamic'} {name}")
            ax.set_xlabel("t")
            ax.set_ylabel(ylabel)
            if logy:
                ax.set_yscale("log")
            ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks factorization-sim``."""
    parser.add_argument("--experiments", nargs="+", choices=("A", "B"), default=["A", "B"])
    parser.add_argument("--problems", nargs="+", choices=tuple(PROBLEMS), default=list(PROBLEMS))
    parser.add_argument("--sims", type=positive_int, default=5,
                        help="simulations per setting of experiment A (paper: 10)")
    parser.add_argument("--bandit-sims", type=positive_int, default=5,
                        help="simulations per setting of experiment B (paper: 10 static, 50 dynamic)")
    parser.add_argument("--mf-events", type=positive_int, default=PROBLEMS["MF"]["events"],
                        help="events of the MF stream in experiment A (paper: 50,000)")
    parser.add_argument("--bandit-steps", type=positive_int, default=5_000,
                        help="steps of the MF explore/exploit runs (regression and TF: at most their 5,000 events)")
    parser.add_argument("--jobs", type=positive_int, default=1, help="parallel processes over simulations")
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 simulation, 150 events, 100 steps")
    parser.add_argument("--no-figure", action="store_true", help="skip the figures")
    parser.add_argument("--out", type=Path, default=Path("doc"), help="folder of the tables (and img/ figures)")


def main(args) -> int:
    """Run experiments A and/or B (module docstring)."""
    problems = list(args.problems)
    if args.quick:
        args.sims = args.bandit_sims = 1
        args.mf_events, args.bandit_steps = 150, 100
    events = {p: (args.mf_events if p == "MF" else min(PROBLEMS[p]["events"], args.mf_events)) for p in problems}
    cmd = (f"factorization-sim --experiments {' '.join(args.experiments)} --problems {' '.join(problems)}"
           + (" --quick" if args.quick else f" --sims {args.sims} --bandit-sims {args.bandit_sims} "
              f"--mf-events {args.mf_events} --bandit-steps {args.bandit_steps}"))
    if "A" in args.experiments:
        start = time.perf_counter()
        rows, curves, rates = run_estimation(problems, args.sims, events, args.jobs)
        print(format_table(rows, EST_COLUMNS))
        tuning = "; ".join(f"{p} {'drift' if d else 'static'}: "
                           + ", ".join(f"{lr:g} → {s:.4f}" for lr, s in sc.items())
                           for (p, d), (_, sc) in rates.items())
        note = (f"\n\nMean over {args.sims} simulation(s) of the cumulative mean |p_true − p_pred| (prequential) at "
                f"events 100, 1000 and the end ({', '.join(f'{p}: {n}' for p, n in events.items())} events); "
                f"sd: across simulations at the end. AdaGrad's rate: the best final error on a tuning simulation "
                f"(seed {TUNING_SEED}): {tuning}. Wall time {time.perf_counter() - start:.0f} s.\n")
        path = write_text(args.out / "factorization_estimation_table.md",
                          format_table(rows, EST_COLUMNS, markdown=True) + note, cmd)
        print(f"  table written to {path}")
        if not args.no_figure:
            print("  figure written to", _plot_grid(curves, problems, ESTIMATION_METHODS,
                                                     "cumulative mean |p − p̂|",
                                                     args.out / "img" / "factorization_estimation.png", logy=True))
    if "B" in args.experiments:
        start = time.perf_counter()
        steps = {p: (args.bandit_steps if p == "MF" else min(PROBLEMS[p]["events"], args.bandit_steps))
                 for p in problems}
        rows, curves = run_bandit(problems, args.bandit_sims, steps, args.jobs)
        print(format_table(rows, BANDIT_COLUMNS))
        note = (f"\n\nCumulative regret normalised by the random policy's (ratio of the means over "
                f"{args.bandit_sims} simulation(s)) at 10 %, 50 % and 100 % of the steps "
                f"({', '.join(f'{p}: {n}' for p, n in steps.items())}); cumulative regret: mean over simulations. "
                f"Candidates per step: regression 10 of the 100 contexts, MF all 10 items "
                f"for a random user, TF the 4 values of the last mode for a random cell prefix. Wall time "
                f"{time.perf_counter() - start:.0f} s.\n")
        path = write_text(args.out / "factorization_bandit_table.md",
                          format_table(rows, BANDIT_COLUMNS, markdown=True) + note, cmd)
        print(f"  table written to {path}")
        if not args.no_figure:
            print("  figure written to", _plot_grid(curves, problems, POLICIES, "regret / random regret",
                                                     args.out / "img" / "factorization_bandit.png"))
    return 0
