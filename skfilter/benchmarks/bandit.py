"""The digits contextual bandit: predictive against Thompson sampling (Duran-Martin et al. 2025, §5.2).

**Bandit** (the paper's MNIST bandit, Osband et al.'s bsuite, on scikit-learn's ``load_digits``:
MNIST cannot be downloaded here): each step shows one 8×8 digit (64 features, divided by 16 and
centred on the mean image); the agent chooses one of 10 arms (classes) and receives reward 1 if it
is the digit's class, else 0 — only for the chosen arm. The 1,797 images are streamed for
``--passes`` passes, each in a fresh random order (``numpy.random.default_rng(seed)``).

**Agents** (:class:`skfilter.decision.ContextualBandit`, per-arm heads: an MLP 64-``--hidden``-10
whose output ``a`` is arm ``a``'s expected reward; Gaussian likelihood on the 0/1 rewards):

* each filter of the registry (:func:`agents`: ``LoFiRegressor`` rank 10, the VD-diagonal
  ``EKFRegressor``; ``HiLoFiRegressor``, ``LoLoFiRegressor`` and ``LRKFRegressor`` are looked up
  in :mod:`skfilter` and run when present; "last layer only", ``HiLoFiRegressor`` with a zero hidden
  factor and no hidden process noise — Bayesian linear regression on the random hidden features,
  the last-layer baseline) with predictive sampling (Alg. 1, draws of the mean
  reward; for LoFi also ``predictive+R``, draws of the reward with the noise variance ``R = 0.1``),
  Thompson sampling (one parameter draw per step) and ε-greedy (ε = 0.05, App. G.1.3);
* ``Adam ε-greedy``: :class:`skfilter.baselines.ReplaySGDRegressor` (skorch), the same network,
  Adam with learning rate 1e-3, buffer 1, 5 inner steps (the paper's AdamW setting with its
  learning rate 1e-4 raised: 1e-4 barely moved in a few thousand steps).

**Reported**: cumulative reward (mean over ``--seeds`` seeds; a uniformly random agent earns 1/10
per step), the agent's seconds per run (select + update), and the predictive-vs-Thompson time ratio
beside the paper's (Table 2: LoFi 38.90 / 4.76 min = 8.2×; last-layer Laplace 191.55 / 1.36 =
140.8×). The ratio depends on the parameter count ``P``: Thompson sampling draws a
``P``-dimensional vector at every step; the network here is far smaller than the paper's LeNet.

Run as ``python -m skfilter.benchmarks bandit`` (about 16 minutes on one thread of a 2-core machine
with the defaults, most of it the factored filters on the torch engine); ``--quick`` is a smoke
test. Table: ``--out``/bandit_table.md; figure:
``--out``/img/bandit.png (cumulative reward against step).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._common import format_table, positive_int, save_figure, write_text

HELP = "digits contextual bandit: predictive vs Thompson sampling and epsilon-greedy (Adam baseline)"

#: the paper's Table 2 (minutes over 10 trials): (predictive, Thompson)
PAPER_TIMES = {"LoFi": (4.76, 38.90), "LLL": (1.36, 191.55)}
POLICIES = ("predictive", "thompson", "epsilon-greedy")


def load_contexts():
    """Digits as contexts: ``(X (1797, 64), labels (1797,))``, ``X`` = pixels / 16 minus the mean image."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    X = digits.data / 16.0
    return X - X.mean(0), digits.target


def _filter(name, hidden, **params):
    import skfilter

    cls = getattr(skfilter, name, None)
    if cls is None:
        return None
    return lambda seed: cls(hidden_layer_sizes=hidden, obs_variance=0.1, random_state=seed, **params)


def agents(hidden=(32,)):
    """The registry: label -> (factory ``make(seed)`` of the reward model, policies)."""
    table = {
        "LoFi": (_filter("LoFiRegressor", hidden, rank=10), POLICIES + ("predictive+R",)),
        "EKF (VD)": (_filter("EKFRegressor", hidden, covariance="vd"), POLICIES),
        "HiLoFi": (_filter("HiLoFiRegressor", hidden), POLICIES),
        "LoLoFi": (_filter("LoLoFiRegressor", hidden), POLICIES),
        "LRKF": (_filter("LRKFRegressor", hidden), POLICIES),
        # the last layer only: HiLoFi with its hidden factor zero and no hidden process noise keeps the
        # random hidden features and is Bayesian linear regression on them (the last-layer baseline)
        "Last layer only": (_filter("HiLoFiRegressor", hidden, init="zero", process_noise=0.0,
                                    last_process_noise=1e-3), POLICIES),
    }
    try:
        from ..baselines import ReplaySGDRegressor

        table["Adam"] = (lambda seed: ReplaySGDRegressor(hidden_layer_sizes=hidden, optimizer="adam", lr=1e-3,
                                                         buffer_size=1, n_inner=5, random_state=seed),
                         ("epsilon-greedy",))
    except ImportError:  # pragma: no cover - skorch is optional
        pass
    return {k: v for k, v in table.items() if v[0] is not None}


def run_one(model, policy, X, labels, passes, seed):
    """One bandit run; returns ``(cumulative reward (T,), seconds)``."""
    from ..decision import ContextualBandit

    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(labels)) for _ in range(passes)])
    noise = policy == "predictive+R"  # Alg. 1 with the reward's noise in the draws
    agent = ContextualBandit(model, n_arms=10, policy="predictive" if noise else policy, epsilon=0.05,
                             include_noise=noise, random_state=seed)
    for i in order:
        c = X[i:i + 1]
        arm = agent.select(c)
        agent.update(c, arm, (arm == labels[i]).astype(np.float64), best_reward=[1.0])
    h = agent.history_
    return h["cumulative_reward"], float(h["time"][-1])


def run(seeds=2, passes=2, hidden=(32,), methods=None, n_images=None, progress=print):
    """Every agent over ``seeds`` seeds (the first ``n_images`` digits; all when None). Returns
    ``(rows, curves)``."""
    X, labels = load_contexts()
    X, labels = X[:n_images], labels[:n_images]
    rows, curves = [], {}
    for name, (make, policies) in agents(hidden).items():
        if methods is not None and name not in methods:
            continue
        results = {policy: ([], []) for policy in policies}
        for seed in range(seeds):  # policies interleaved, so that a change of machine load hits them alike
            for policy in policies:
                cum, sec = run_one(make(seed), policy, X, labels, passes, seed)
                results[policy][0].append(cum)
                results[policy][1].append(sec)
        times = {}
        for policy, (rewards, secs) in results.items():
            label = f"{name} {policy}"
            curves[label] = np.mean(rewards, axis=0)
            times[policy] = float(np.mean(secs))
            rows.append({"agent": name, "policy": policy, "reward": float(np.mean([r[-1] for r in rewards])),
                         "reward_sd": float(np.std([r[-1] for r in rewards])), "steps": len(rewards[0]),
                         "seconds": times[policy], "ms_step": 1e3 * times[policy] / len(rewards[0])})
            if progress:
                progress(f"  {label:<28} reward {rows[-1]['reward']:8.1f} / {len(rewards[0])}   "
                         f"{times[policy]:7.1f} s/run")
        if "predictive" in times and "thompson" in times:
            for row in rows[-len(policies):]:  # the Thompson time over each predictive policy's
                row["speedup"] = times["thompson"] / times[row["policy"]] if row["policy"].startswith("predictive") \
                    else None
    return rows, curves


COLUMNS = [("agent", "agent", ""), ("policy", "policy", ""), ("reward", "cumulative reward (mean)", ".1f"),
           ("reward_sd", "sd", ".1f"), ("steps", "steps", ""), ("seconds", "s / run", ".1f"),
           ("ms_step", "ms / step", ".2f"), ("speedup", "TS time / PS time", ".2f")]


def plot(curves, path) -> Path:
    """Mean cumulative reward against step, one line per agent and policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plotting import plot_cumulative_reward

    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    agents_seen = list(dict.fromkeys(label.rsplit(" ", 1)[0] for label in curves))
    colours = {agent: plt.get_cmap("tab10")(i % 10) for i, agent in enumerate(agents_seen)}
    styles = {"predictive": "-", "thompson": "--", "epsilon-greedy": ":", "predictive+R": "-."}
    for label, c in curves.items():
        agent, policy = label.rsplit(" ", 1)
        plot_cumulative_reward({"step": np.arange(1, len(c) + 1), "time": np.zeros(len(c)), "cumulative_reward": c},
                               label=label, ax=ax)
        line = ax.get_lines()[-1]
        line.set_color(colours[agent])
        line.set_linestyle(styles.get(policy, "-"))
    n = len(next(iter(curves.values())))
    ax.plot([1, n], [0.1, 0.1 * n], color="gray", linestyle=(0, (1, 4)), label="random (1/10)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="colour: agent; line: policy",
              title_fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks bandit``."""
    parser.add_argument("--seeds", type=positive_int, default=2, help="runs per agent (the paper: 10)")
    parser.add_argument("--passes", type=positive_int, default=2, help="passes over the 1,797 digits")
    parser.add_argument("--hidden", type=positive_int, nargs="+", default=[32], help="hidden widths of the MLP")
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 seed, 60 steps, LoFi and Adam only")
    parser.add_argument("--no-figure", action="store_true", help="skip the figure")
    parser.add_argument("--out", type=Path, default=Path("doc"), help="folder of the table (and img/ figure)")


def main(args) -> int:
    """Run the benchmark (module docstring)."""
    hidden = tuple(args.hidden)
    if args.quick:  # 30 digits, one seed, two agents
        rows, curves = run(1, args.passes, hidden, methods=("LoFi", "Adam"), n_images=30)
    else:
        rows, curves = run(args.seeds, args.passes, hidden)
    print(format_table(rows, COLUMNS))
    paper = "; ".join(f"{k}: {ts:.2f} / {ps:.2f} min = {ts / ps:.1f}×" for k, (ps, ts) in PAPER_TIMES.items())
    note = (f"\n\nDigits bandit, {rows[0]['steps']} steps ({args.passes} passes), MLP 64-{'-'.join(map(str, hidden))}"
            f"-10 with per-arm heads; mean over {1 if args.quick else args.seeds} seed(s). A random agent earns "
            f"{rows[0]['steps'] / 10:.0f}. Time: the agent's select + update. Paper's Thompson/predictive time "
            f"ratio (Table 2, MNIST, LeNet): {paper}.\n")
    options = f"bandit --seeds {args.seeds} --passes {args.passes} --hidden {' '.join(map(str, hidden))}" + (
        " --quick" if args.quick else "")
    path = write_text(args.out / "bandit_table.md", format_table(rows, COLUMNS, markdown=True) + note, options)
    print(f"  table written to {path}")
    if not args.no_figure:
        print(f"  figure written to {plot(curves, args.out / 'img' / 'bandit.png')}")
    return 0
