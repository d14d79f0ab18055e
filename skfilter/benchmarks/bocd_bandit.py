"""Non-stationary Bernoulli bandit with Thompson sampling (thesis §3.5.2, E3.4; spec/bone.md §4).

**Bandit** (Mellor & Shapiro 2013 §7.3): ``A = 10`` arms, ``T = 10,000`` steps; arm ``a`` pays
``y_t^{(a)} ~ Bern(μ_t^{(a)})`` with ``μ_0^{(a)} ~ U[0, 1]`` and a clipped random walk
``μ_t = min(max(μ_{t−1} + σ Z_t, 0), 1)``, ``Z_t ~ N(0, 1)``, arms independent. ``σ = √0.003 ≈ 0.055``
by default, the authors' test runs (the thesis text says 0.03: ``--walk-std 0.03``).

**Agents**: one filter per arm on the logit of its success probability — a 1-D logistic model
``y ~ Bern(σ(θ))``, prior ``N(0, s)``: ``EKFClassifier`` whose module is a zero-weight
``Linear(1, 1)`` fed the feature ``x = 0``, so that the logit is its bias ``θ`` alone (the slope
multiplies 0: its Jacobian is zero and it is never learned; the model is exactly 1-D and runs on the
fused fast path, ~0.7 ms per step against ~3 ms for a bias-free ``Linear`` on ``x = 1``), wrapped by
the method: ``C-ACI`` (``process_noise=q``),
``CPP-OU`` (``reset='cpp-ou'``, reset/prior variance ``s``), ``RL[1]-PR`` and ``RL[1]-OUPR*``
(hazard ``π``, ``ε = 0.5``). **Thompson sampling**: every step draw ``θ̃^{(a)} ~ N(μ^{(a)}, Σ^{(a)})``
from each arm's belief, play ``a_t = argmax_a θ̃^{(a)}`` (= argmax of ``σ(θ̃)``), observe only
``y_t^{(a_t)}`` and update only that arm's filter (the other arms' beliefs are left as they are: no
time passes for them, as in the authors' code).

**Regret** (the authors' notebook): ``Σ_t max_a y_t^{(a)} − Σ_t y_t^{(a_t)}`` with the *realised*
rewards of all arms as the oracle; also the expected (pseudo-)regret ``Σ_t max_a μ_t^{(a)} −
μ_t^{(a_t)}``. Mean and standard deviation of the final value over ``--runs`` bandits (seeds
``0 …``); the authors' mean final regret over 100 runs: OUPR* 2366.68, CPP-OU 2594.16, RL[1]-PR
4630.02 (C-ACI not printed; their C-ACI played the posterior mean, not a Thompson draw).

**Tuning**: each method's hyper-parameter on one warm-up bandit (seed 10,000,
``--warmup-steps`` steps), lowest realised regret over :data:`GRIDS`.

**Speed.** ``partial_fit`` of one row costs ~6-7 ms for a ``BOCDClassifier`` (validation and set-up;
measured on one thread of a loaded 2-core machine), i.e. ~1 min per 10,000-step run and method; the
agents therefore step the filters through :class:`~skfilter.benchmarks._bocd_common.Stepper` —
:func:`skfilter.runlength.runlength_step` / :func:`skfilter.filtering.filter_step` on the
estimator's engine, the same numbers as ``partial_fit`` (tests/test_bocd_benchmarks.py) at
0.15-0.9 ms per step (the table's last column). The arms' states are values shared between steps
(the engine never modifies a state in place).

Run as ``python -m skfilter.benchmarks bocd-bandit`` (``--runs 10``: ~4 min on one thread;
``--runs 100`` is the thesis' setting); the table goes to ``--out``/bocd_bandit_table.md.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ._bocd_common import Stepper, bocd, describe, fmt_grid, linear_classifier, tune
from ._common import format_table, positive_int, save_figure, write_text

HELP = "BOCD/BONE: non-stationary Bernoulli bandit with Thompson sampling (thesis E3.4)"

N_ARMS = 10
N_STEPS = 10_000
WALK_STD = float(np.sqrt(0.003))
WARMUP_SEED = 10_000
METHODS = ("C-ACI", "CPP-OU", "RL[1]-PR", "RL[1]-OUPR*")
HAZARDS = (0.001, 0.01, 0.05, 0.2)
GRIDS = {
    "C-ACI": ("q", (1e-4, 1e-3, 1e-2, 1e-1)),
    "CPP-OU": ("s", (1.0, 4.0)),
    "RL[1]-PR": ("π", HAZARDS),
    "RL[1]-OUPR*": ("π", HAZARDS),
}
#: the authors' mean final (realised) regret over 100 runs, T = 10,000 (spec/bone.md §4 E3.4 [REPO])
AUTHORS = {"C-ACI": None, "CPP-OU": 2594.16, "RL[1]-PR": 4630.02, "RL[1]-OUPR*": 2366.68}


def make_bandit(seed: int, n_steps: int = N_STEPS, n_arms: int = N_ARMS, walk_std: float = WALK_STD):
    """``(mu (T, A), rewards (T, A))``: success probabilities and realised rewards of every arm."""
    rng = np.random.default_rng(seed)
    mu = np.empty((n_steps, n_arms))
    m = rng.uniform(0.0, 1.0, size=n_arms)
    for t in range(n_steps):
        if t > 0:
            m = np.clip(m + walk_std * rng.normal(size=n_arms), 0.0, 1.0)
        mu[t] = m
    rewards = (rng.uniform(size=mu.shape) < mu).astype(int)
    return mu, rewards


def make(method: str, value):
    """One arm's estimator for ``method`` at the hyper-parameter ``value``."""
    if method == "C-ACI":
        return linear_classifier(1, 1.0, process_noise=value, intercept=True)
    if method == "CPP-OU":
        return bocd(linear_classifier(1, prior_variance=value, intercept=True), n_hypotheses=1, reset="cpp-ou")
    if method == "RL[1]-PR":
        return bocd(linear_classifier(1, intercept=True), hazard=value, n_hypotheses=1, reset="prior")
    if method == "RL[1]-OUPR*":
        return bocd(linear_classifier(1, intercept=True), hazard=value, n_hypotheses=1, reset="ou")
    raise ValueError(f"unknown method {method!r}")


def thompson(est, mu, rewards, seed: int):
    """Play one bandit with Thompson sampling over one clone of ``est`` per arm.

    Returns ``(realised_regret, pseudo_regret, arms)``: the cumulative regrets ``(T,)`` and the arms
    played."""
    n_steps, n_arms = rewards.shape
    rng = np.random.default_rng(seed + 1_000_003)
    st = Stepper(est, np.zeros((2, 1)), np.array([0, 1]), classes=[0, 1])
    x0, targets = st.X[:1], (st.Y[0:1], st.Y[1:2])  # the zero feature; encoded labels 0 and 1
    start = st.state
    m0, v0 = st.mean_variance()
    states = [start] * n_arms  # values: the engine never modifies a state in place
    # the logit is the bias, the last parameter of the layer (weight, bias)
    means = np.full(n_arms, float(m0[-1]))
    sds = np.full(n_arms, float(np.sqrt(v0[-1])))
    arms = np.empty(n_steps, dtype=int)
    for t in range(n_steps):
        a = int(np.argmax(rng.normal(means, sds)))
        arms[t] = a
        st.state = states[a]
        st.learn(x0, targets[int(rewards[t, a])])
        states[a] = st.state
        m, v = st.mean_variance()
        means[a], sds[a] = float(m[-1]), float(np.sqrt(max(float(v[-1]), 0.0)))
    idx = np.arange(n_steps)
    realised = np.cumsum(rewards.max(1) - rewards[idx, arms])
    pseudo = np.cumsum(mu.max(1) - mu[idx, arms])
    return realised, pseudo, arms


def run(runs: int = 10, n_steps: int = N_STEPS, warmup_steps: int = 2_000, walk_std: float = WALK_STD,
        methods=METHODS, grids=None, progress=print):
    """Tune and evaluate. Returns ``(rows, curves)``: one row per method and its mean cumulative
    realised regret ``(T,)``."""
    grids = GRIDS if grids is None else grids
    mu_w, r_w = make_bandit(WARMUP_SEED, warmup_steps, walk_std=walk_std)
    bandits = [make_bandit(seed, n_steps, walk_std=walk_std) for seed in range(runs)]
    rows, curves = [], {}
    for method in methods:
        name, grid = grids[method]
        best, best_score, _ = tune(lambda v, m=method: make(m, v), grid,
                                   lambda est: float(thompson(est, mu_w, r_w, WARMUP_SEED)[0][-1]))
        if progress:
            progress(f"  bandit {method}: {name} = {best:g} (warm-up regret {best_score:.0f} in {warmup_steps} steps)")
        t0 = time.perf_counter()
        realised, pseudo = [], []
        for seed, (mu, rewards) in enumerate(bandits):
            r, p, _ = thompson(make(method, best), mu, rewards, seed)
            realised.append(r)
            pseudo.append(p)
        sec = time.perf_counter() - t0
        dr, dp = describe([r[-1] for r in realised]), describe([p[-1] for p in pseudo])
        curves[method] = np.mean(realised, axis=0)
        rows.append({"method": method, "param": f"{name} = {best:g}", "grid": f"{name} ∈ {fmt_grid(grid)}",
                     "regret": dr["mean"], "regret_sd": dr["sd"], "pseudo": dp["mean"], "pseudo_sd": dp["sd"],
                     "authors": AUTHORS[method], "us_step": 1e6 * sec / (runs * n_steps)})
    return rows, curves


COLUMNS = [("method", "method", ""), ("param", "tuned", ""), ("regret", "final regret (mean)", ".1f"),
           ("regret_sd", "sd", ".1f"), ("pseudo", "pseudo-regret (mean)", ".1f"), ("pseudo_sd", "sd", ".1f"),
           ("authors", "authors' regret", ".2f"), ("us_step", "µs/step", ".0f")]


def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks bocd-bandit``."""
    parser.add_argument("--runs", type=positive_int, default=10, help="bandits per method (the thesis: 100)")
    parser.add_argument("--steps", type=positive_int, default=N_STEPS, help="steps per bandit")
    parser.add_argument("--warmup-steps", type=positive_int, default=2_000, help="steps of the tuning bandit")
    parser.add_argument("--walk-std", type=float, default=WALK_STD,
                        help="random-walk std of the success probabilities (thesis text: 0.03)")
    parser.add_argument("--no-figure", action="store_true", help="skip the regret figure")
    parser.add_argument("--out", type=Path, default=Path("doc"), help="folder of the table (and img/ figure)")


def plot(curves, path) -> Path:
    """Mean cumulative realised regret against time, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for method, c in curves.items():
        ax.plot(np.arange(1, len(c) + 1), c, label=method)
    ax.set_xlabel("step")
    ax.set_ylabel("regret (realised rewards)")
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, path)


def main(args) -> int:
    """Run the bandit benchmark (module docstring)."""
    rows, curves = run(args.runs, args.steps, args.warmup_steps, args.walk_std)
    print(format_table(rows, COLUMNS))
    grids = "; ".join(f"{r['method']}: {r['grid']}" for r in rows)
    path = write_text(args.out / "bocd_bandit_table.md", format_table(rows, COLUMNS, markdown=True)
                      + f"\n\nTuning grids (one warm-up bandit, seed {WARMUP_SEED}): {grids}.\n",
                      f"bocd-bandit --runs {args.runs} --steps {args.steps} --warmup-steps {args.warmup_steps} "
                      f"--walk-std {args.walk_std:g}")
    print(f"  table written to {path}")
    if not args.no_figure:
        print(f"  figure written to {plot(curves, args.out / 'img' / 'bocd_bandit.png')}")
    return 0
