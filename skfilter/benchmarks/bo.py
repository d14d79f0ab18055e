"""Bayesian optimisation with filter surrogates against a Gaussian process (Duran-Martin et al. 2025, §5.4).

**Problems** (minimisation; standard formulas and domains, e.g. Surjanovic & Bingham's Virtual
Library of Simulation Experiments):

* Ackley, ``d = 2, 5, 10``: ``f(x) = −20 exp(−0.2 √(Σ x_i² / d)) − exp(Σ cos(2π x_i) / d) + 20 + e`` on
  ``[−32.768, 32.768]^d``; minimum 0 at ``x = 0``.
* Branin: ``f(x) = (x₂ − 5.1 x₁²/(4π²) + 5 x₁/π − 6)² + 10 (1 − 1/(8π)) cos x₁ + 10`` on
  ``[−5, 10] × [0, 15]``; minimum 0.397887.
* Hartmann-6: ``f(x) = −Σ_i α_i exp(−Σ_j A_ij (x_j − P_ij)²)`` with the usual ``α, A, P`` on
  ``[0, 1]^6``; minimum −3.32237.

**Loop** (:class:`skfilter.decision.BayesianOptimizer`): ``--n-initial`` uniform points, then one
point per step chosen on a fresh scrambled Sobol set of ``--n-candidates`` points by the
acquisition (``--acquisition``; default ``'thompson'``: one function draw, argmin; the paper's
TS-style rule). The surrogates (:data:`SURROGATES`, a registry of factories; names such as
``'HiLoFiRegressor'`` and ``'LRKFRegressor'`` are looked up in :mod:`skfilter` and skipped when
absent) see the unit cube and standardised targets
(:class:`~skfilter.compose.TargetScaledRegressor` refitted with the scaler at every step):

* the filters (MLP 2×50, ReLU — one hidden layer of 20 for the full-covariance EKF, whose
  ``O(P²)`` step is too slow at ``P ≈ 3,000`` — fixed noise variance 1e-3 of the standardised
  targets; LoFi's rank, HiLoFi's hidden rank and LRKF's rank 10, their compiled steps 0.2–0.6 ms
  at ``P = 2,901``) are refitted
  on all the points with ``n_epochs=5`` at every step (``refit=True``; one pass per new point
  learned far too little on these problems in trials with 30 steps);
* ``GP``: scikit-learn's :class:`~sklearn.gaussian_process.GaussianProcessRegressor` with a
  Matérn-5/2 kernel times a constant, ``normalize_y=True``, a small nugget (``alpha=1e-6``) and
  its marginal-likelihood fit at every step (the paper's GP kept lengthscale 0.1 untuned).

**Reported**: the median and interquartile range of the best value found after ``--n-iter``
evaluations over ``--seeds`` seeds, the mean wall-clock seconds per run (surrogate fits and
acquisition; the function evaluations are free), and random search with as many evaluations.

Run as ``python -m skfilter.benchmarks bo`` (about 5-8 minutes on one thread of a 2-core machine
with the defaults); ``--quick`` is a smoke test of seconds. Table: ``--out``/bo_table.md;
figure: ``--out``/img/bo.png (best value against step, median over seeds).
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np

from ._common import format_table, positive_int, save_figure, write_text

HELP = "Bayesian optimisation (Ackley 2/5/10-D, Branin, Hartmann-6): filter surrogates against a Matérn-5/2 GP"


# -- problems -------------------------------------------------------------------------------------
def ackley(x):
    """Ackley's function (minimum 0 at the origin)."""
    x = np.asarray(x, dtype=np.float64)
    d = x.size
    return float(-20.0 * np.exp(-0.2 * np.sqrt(np.sum(x ** 2) / d)) - np.exp(np.sum(np.cos(2 * np.pi * x)) / d)
                 + 20.0 + np.e)


def branin(x):
    """Branin's function (minimum 0.397887)."""
    x1, x2 = float(x[0]), float(x[1])
    b, c, t = 5.1 / (4 * np.pi ** 2), 5 / np.pi, 1 / (8 * np.pi)
    return (x2 - b * x1 ** 2 + c * x1 - 6.0) ** 2 + 10.0 * (1 - t) * np.cos(x1) + 10.0


_H6_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
_H6_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8],
                  [17, 8, 0.05, 10, 0.1, 14]], dtype=np.float64)
_H6_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                         [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])


def hartmann6(x):
    """The 6-D Hartmann function (minimum −3.32237)."""
    x = np.asarray(x, dtype=np.float64)
    return float(-np.sum(_H6_ALPHA * np.exp(-np.sum(_H6_A * (x - _H6_P) ** 2, axis=1))))


#: name -> (function, bounds, known minimum)
PROBLEMS = {
    "Ackley-2": (ackley, [[-32.768, 32.768]] * 2, 0.0),
    "Ackley-5": (ackley, [[-32.768, 32.768]] * 5, 0.0),
    "Ackley-10": (ackley, [[-32.768, 32.768]] * 10, 0.0),
    "Branin": (branin, [[-5.0, 10.0], [0.0, 15.0]], 0.397887),
    "Hartmann-6": (hartmann6, [[0.0, 1.0]] * 6, -3.32237),
}


# -- surrogates -------------------------------------------------------------------------------------
def _scaled(regressor):
    from ..compose import TargetScaledRegressor

    return TargetScaledRegressor(regressor)


def _filter(name, hidden=(50, 50), **params):
    """A factory of a skfilter filter surrogate named ``name`` (None when skfilter has no such
    estimator: a later one joins the benchmark when it is merged)."""
    import skfilter

    cls = getattr(skfilter, name, None)
    if cls is None:
        return None

    def make(seed):
        return _scaled(cls(hidden_layer_sizes=hidden, obs_variance=1e-3, n_epochs=5, random_state=seed, **params))

    return make


def _gp(seed):
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern

    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * Matern(length_scale=0.2, length_scale_bounds=(1e-3, 1e1), nu=2.5)
    return GaussianProcessRegressor(kernel, alpha=1e-6, normalize_y=True, random_state=seed)


def surrogates():
    """The registry: label -> factory ``make(seed)`` (filters absent from skfilter are skipped)."""
    table = {
        "LoFi": _filter("LoFiRegressor", rank=10),
        "EKF (full, 1×20)": _filter("EKFRegressor", hidden=(20,)),
        "HiLoFi": _filter("HiLoFiRegressor", hidden_rank=10),
        "LRKF": _filter("LRKFRegressor", rank=10),
        "GP (Matérn-5/2)": _gp,
    }
    return {k: v for k, v in table.items() if v is not None}


# -- runs -------------------------------------------------------------------------------------------
def run_one(make, problem, seed, n_iter, n_initial, n_candidates, acquisition):
    """One BO run; returns ``(best_y per step (n_iter,), seconds)``."""
    from ..decision import BayesianOptimizer

    func, bounds, _ = PROBLEMS[problem]
    opt = BayesianOptimizer(make(seed), bounds=bounds, acquisition=acquisition, n_candidates=n_candidates,
                            n_initial_points=n_initial, refit=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the GP's lengthscale-bound ConvergenceWarning
        start = time.perf_counter()
        opt.minimize(func, n_iter)
        seconds = time.perf_counter() - start
    return opt.history_["best_y"], seconds


def random_search(problem, seed, n_iter):
    func, bounds, _ = PROBLEMS[problem]
    b = np.asarray(bounds)
    rng = np.random.default_rng(seed)
    values = [func(b[:, 0] + rng.random(len(b)) * (b[:, 1] - b[:, 0])) for _ in range(n_iter)]
    return np.minimum.accumulate(values)


def run(problems=tuple(PROBLEMS), seeds=10, n_iter=50, n_initial=5, n_candidates=512, acquisition="thompson",
        methods=None, progress=print):
    """Every surrogate on every problem over ``seeds`` seeds. Returns ``(rows, curves)``: one table
    row per (problem, method) and the median best-value curve of each."""
    registry = surrogates()
    if methods is not None:
        registry = {k: v for k, v in registry.items() if k in methods}
    rows, curves = [], {}
    for problem in problems:
        _, bounds, minimum = PROBLEMS[problem]
        entries = [(name, make) for name, make in registry.items()] + [("random search", None)]
        for name, make in entries:
            finals, times, paths = [], [], []
            for seed in range(seeds):
                if make is None:
                    path, sec = random_search(problem, seed, n_iter), 0.0
                else:
                    path, sec = run_one(make, problem, seed, n_iter, n_initial, n_candidates, acquisition)
                paths.append(path)
                finals.append(path[-1])
                times.append(sec)
            q1, med, q3 = np.percentile(finals, [25, 50, 75])
            rows.append({"problem": problem, "d": len(bounds), "method": name, "median": med, "q1": q1, "q3": q3,
                         "minimum": minimum, "seconds": float(np.mean(times)) if make is not None else None})
            curves[(problem, name)] = np.median(paths, axis=0)
            if progress:
                progress(f"  {problem:<10} {name:<16} median best {med:9.4f}  [{q1:.4f}, {q3:.4f}]  "
                         f"{np.mean(times):6.2f} s/run")
    return rows, curves


COLUMNS = [("problem", "problem", ""), ("d", "d", ""), ("method", "surrogate", ""),
           ("median", "best value (median)", ".4f"), ("q1", "25 %", ".4f"), ("q3", "75 %", ".4f"),
           ("minimum", "true minimum", ".4f"), ("seconds", "s / run", ".2f")]


def plot(curves, problems, path) -> Path:
    """Median best value against step, one panel per problem."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(problems), figsize=(3.2 * len(problems), 3.0), squeeze=False)
    for ax, problem in zip(axes[0], problems):
        for (p, name), c in curves.items():
            if p == problem:
                ax.plot(np.arange(1, len(c) + 1), c, label=name, linestyle="--" if name == "random search" else "-")
        ax.axhline(PROBLEMS[problem][2], color="gray", linewidth=0.8)
        ax.set_title(problem)
        ax.set_xlabel("evaluations")
    axes[0, 0].set_ylabel("best value (median)")
    axes[0, -1].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks bo``."""
    parser.add_argument("--seeds", type=positive_int, default=10, help="runs per problem and surrogate")
    parser.add_argument("--n-iter", type=positive_int, default=50, help="function evaluations per run")
    parser.add_argument("--n-initial", type=positive_int, default=5, help="uniform initial points")
    parser.add_argument("--n-candidates", type=positive_int, default=512, help="Sobol candidates per step")
    parser.add_argument("--acquisition", choices=("thompson", "predictive", "ei"), default="thompson")
    parser.add_argument("--problems", nargs="+", choices=tuple(PROBLEMS), default=list(PROBLEMS))
    parser.add_argument("--quick", action="store_true", help="smoke test: 2 seeds, 8 evaluations, Branin only")
    parser.add_argument("--no-figure", action="store_true", help="skip the figure")
    parser.add_argument("--out", type=Path, default=Path("doc"), help="folder of the table (and img/ figure)")


def main(args) -> int:
    """Run the benchmark (module docstring)."""
    if args.quick:
        args.seeds, args.n_iter, args.problems, args.n_candidates = 2, 8, ["Branin"], 64
    rows, curves = run(args.problems, args.seeds, args.n_iter, args.n_initial, args.n_candidates, args.acquisition)
    print(format_table(rows, COLUMNS))
    options = (f"bo --seeds {args.seeds} --n-iter {args.n_iter} --n-initial {args.n_initial} "
               f"--n-candidates {args.n_candidates} --acquisition {args.acquisition} "
               f"--problems {' '.join(args.problems)}")
    note = (f"\n\nMinimisation; best value after {args.n_iter} evaluations ({args.n_initial} uniform, then one per "
            f"step on {args.n_candidates} scrambled Sobol candidates, acquisition '{args.acquisition}'), median and "
            f"quartiles over {args.seeds} seeds; seconds per run: surrogate fits and acquisition.\n")
    path = write_text(args.out / "bo_table.md", format_table(rows, COLUMNS, markdown=True) + note, options)
    print(f"  table written to {path}")
    if not args.no_figure:
        print(f"  figure written to {plot(curves, args.problems, args.out / 'img' / 'bo.png')}")
    return 0
