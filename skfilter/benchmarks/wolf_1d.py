"""WoLF for online 1-D MLP regression with outliers, sorted and unsorted inputs (thesis §4.7.3).

The experiment of spec/wolf-subspace-pulse.md §4.3 (thesis Figs. 4.6-4.7, MLP measurement model).

**Stream** (eq. 4.46, ``T = 1500``)::

    x_t ~ U[−3, 3]
    y_t = 0.2 x_t + 10 cos(π x_t) + x_t³ + V_t,   V_t ~ N(0, 3)  (variance 3)   w.p. 0.95
    y_t = U_t,                                     U_t ~ U[−40, 40]              w.p. p_ε = 0.05

either in the order drawn (``unsorted``, i.i.d.) or sorted by ``x`` (``sorted``: a correlated,
non-stationary source). Trial ``i`` draws its stream with seed ``314 + i``.

**Model.** MLP 1-10-10-1 with ReLU (eq. 4.47, ``D = 141``), slowly drifting parameters
``θ_t = θ_{t−1} + N(0, Q)``, ``Q = 10⁻⁴ I`` (``process_noise=1e-4``), raw inputs and targets (as in
the thesis), the same LeCun-normal initial weights for every method of a trial.

**Methods.**

* ``EKF`` — :class:`~skfilter.EKFRegressor` (full covariance) with an explicit prior variance and
  observation variance (``prior_variance``, ``obs_variance``: the thesis gives neither);
* ``WoLF-IMQ`` / ``WoLF-TMD`` — :class:`~skfilter.WoLFRegressor` over that EKF, ``weighting='imq'``
  (eq. 4.5, ``c`` in the units of ``y``) / ``'tmd'`` (eq. 4.7, squared Mahalanobis distance under
  ``R``);
* ``OGD`` — Adam, one row per step, ``n_inner`` steps
  (:func:`~skfilter.benchmarks._wolf_common.ogd_prequential`, the thesis' OGD, §2.12).

(The thesis' EKF-IW and EKF-B are not run here.)

**Hyper-parameters** (the thesis tuned everything on the first trial, values not reported): the grid
point (:data:`GRIDS`) with the lowest mean RMedSE over ``--tune-trials`` (default 2) tuning trials
(seeds ``300 + j``, not among the evaluated ones), separately for each ordering (OGD: points within
0.5 % of the lowest count as ties, won by the fewest inner steps). Two tuning trials rather than one
because single runs of this small network vary a lot from seed to seed (a dead-ReLU run can score
10× worse).

**Metric.** RMedSE (eq. 4.45) of the one-step-ahead predictions (``prequential_fit_predict``) against
the observed targets, outliers included: mean, standard deviation and median over ``--trials``
trials (Fig. 4.6 shows the mean and spread); for information also the RMSE against the clean mean
``0.2x + 10cos(πx) + x³`` over the second half of the stream; time per step of the fastest trial and
relative to the EKF.

**Figure** (``--out``/img/wolf_1d.png, matplotlib Agg backend): one run of each ordering (trial 1),
the predictive mean ± 2 standard deviations (observation noise included) of the EKF and of WoLF-IMQ
over the stream's points (outliers marked) and the clean mean: unsorted, the belief after the pass,
``predict(X_grid, return_std=True)``; sorted, where that belief only describes the right end (the
parameters drift), the one-step-ahead predictive of every row
(``prequential_fit_predict(X, y, return_std=True)``), which for sorted inputs is a curve in ``x``.

Run as ``python -m skfilter.benchmarks wolf-1d`` (10 trials per ordering: a few minutes);
``--trials``, ``--orderings``, ``--no-figure``; the Markdown table goes to ``--out`` (``doc/``).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from ._common import (current_load, format_table, limit_threads, load_warning, positive_int, save_figure,
                      write_text)
from ._wolf_common import format_params, grid_search, n_inner_cost, ogd_prequential, rmedse, timed_prequential

HELP = "WoLF for online 1-D MLP regression with outliers, sorted/unsorted (thesis §4.7.3): RMedSE, figure"

ORDERINGS = ("unsorted", "sorted")
METHODS = ("EKF", "WoLF-IMQ", "WoLF-TMD", "OGD")
HIDDEN = (10, 10)
N_STEPS = 1500
P_OUTLIER = 0.05
NOISE_VARIANCE = 3.0
PROCESS_NOISE = 1e-4

#: hyper-parameter grids searched on the tuning trials
GRIDS = {
    "EKF": {"prior_variance": (1.0, 10.0, 100.0), "obs_variance": (3.0, 10.0)},
    "WoLF-IMQ": {"prior_variance": (1.0, 10.0, 100.0), "obs_variance": (3.0, 10.0), "c": (3.0, 6.0, 12.0)},
    "WoLF-TMD": {"prior_variance": (1.0, 10.0, 100.0), "obs_variance": (3.0, 10.0), "c": (9.0, 16.0, 36.0)},
    "OGD": {"lr": (1e-3, 3e-3, 1e-2, 3e-2), "n_inner": (1, 2, 5)},
}

#: the thesis' qualitative result per ordering (Figs. 4.6-4.7; no numbers)
THESIS = {
    "sorted": {"EKF": "—", "WoLF-IMQ": "lowest mean and spread (with EKF-IW)", "WoLF-TMD": "—", "OGD": "—"},
    "unsorted": {"EKF": "—", "WoLF-IMQ": "lowest (with EKF-IW)", "WoLF-TMD": "—", "OGD": "—"},
}


def clean_mean(x):
    """``0.2 x + 10 cos(π x) + x³`` (eq. 4.46 with ``θ* = (0.2, −10, 1, 1)``)."""
    x = np.asarray(x, dtype=np.float64)
    return 0.2 * x + 10.0 * np.cos(np.pi * x) + x ** 3


def make_stream(seed: int, ordering: str = "unsorted", n_steps: int = N_STEPS, p_outlier: float = P_OUTLIER):
    """One stream (module docstring): ``X (n, 1)``, ``y``, ``f`` (clean mean), ``outlier`` (bool)."""
    if ordering not in ORDERINGS:
        raise ValueError(f"ordering must be one of {ORDERINGS}, got {ordering!r}.")
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3.0, 3.0, n_steps)
    if ordering == "sorted":
        x = np.sort(x)
    f = clean_mean(x)
    outlier = rng.uniform(size=n_steps) < p_outlier
    y = np.where(outlier, rng.uniform(-40.0, 40.0, n_steps), f + rng.normal(size=n_steps) * math.sqrt(NOISE_VARIANCE))
    return {"X": x[:, None], "y": y, "f": f, "outlier": outlier, "seed": seed}


def make_filter(method: str, params: dict, seed: int):
    """The unfitted skfilter estimator of ``method`` (EKF, or WoLF over the EKF)."""
    from .. import EKFRegressor, WoLFRegressor

    ekf = EKFRegressor(hidden_layer_sizes=HIDDEN, activation="relu", covariance="full",
                       prior_variance=float(params["prior_variance"]), obs_variance=float(params["obs_variance"]),
                       process_noise=PROCESS_NOISE, random_state=seed)
    if method == "EKF":
        return ekf
    return WoLFRegressor(ekf, weighting={"WoLF-IMQ": "imq", "WoLF-TMD": "tmd"}[method], threshold=float(params["c"]))


def run_method(method: str, params: dict, stream: dict):
    """``(predictions, seconds, fitted estimator or None)`` of one method on one stream."""
    from ..exceptions import FilterStepError

    if method == "OGD":
        pred, sec = ogd_prequential(stream["X"], stream["y"], lr=params["lr"], n_inner=int(params["n_inner"]),
                                    hidden_layer_sizes=HIDDEN, random_state=stream["seed"])
        return pred, sec, None
    est = make_filter(method, params, stream["seed"])
    try:
        pred, sec = timed_prequential(est, stream["X"], stream["y"])
    except FilterStepError:
        return np.full(len(stream["y"]), np.nan), math.nan, None
    return pred, sec, est


def tune(ordering: str, tune_trials: int = 2, grids=None, n_steps: int = N_STEPS) -> dict:
    """Per method, the grid point with the lowest mean RMedSE over the tuning streams."""
    grids = GRIDS if grids is None else grids
    streams = [make_stream(300 + j, ordering, n_steps) for j in range(tune_trials)]
    chosen = {}
    for method in METHODS:
        def score(**point):
            return float(np.mean([rmedse(s["y"], run_method(method, point, s)[0]) for s in streams]))
        chosen[method], _ = grid_search(score, grids[method], cost=n_inner_cost)
    return chosen


def run_ordering(ordering: str, n_trials: int = 10, tune_trials: int = 2, grids=None, n_steps: int = N_STEPS,
                 progress=print) -> dict:
    """Tune, then evaluate every method on trials ``1..n_trials``; keeps the trial-1 fits for the figure."""
    t0 = time.perf_counter()
    params = tune(ordering, tune_trials, grids, n_steps)
    if progress:
        progress(f"  {ordering}: tuned in {time.perf_counter() - t0:.0f} s: "
                 + "; ".join(f"{m} {format_params(p)}" for m, p in params.items()))
    per = {m: {"rmedse": [], "rmse_clean": [], "seconds": []} for m in METHODS}
    example = None
    for i in range(1, n_trials + 1):
        stream = make_stream(314 + i, ordering, n_steps)
        half = slice(n_steps // 2, None)
        fits = {}
        for m in METHODS:
            pred, sec, est = run_method(m, params[m], stream)
            fits[m] = est
            per[m]["rmedse"].append(rmedse(stream["y"], pred))
            per[m]["rmse_clean"].append(float(np.sqrt(np.mean((stream["f"][half] - pred[half]) ** 2))))
            per[m]["seconds"].append(sec)
        if i == 1:
            example = {"stream": stream, "fits": fits}
    rows = []
    ekf_best = np.nanmin(per["EKF"]["seconds"]) if np.any(np.isfinite(per["EKF"]["seconds"])) else math.nan
    for m in METHODS:
        e = np.asarray(per[m]["rmedse"], dtype=np.float64)
        best = np.nanmin(per[m]["seconds"]) if np.any(np.isfinite(per[m]["seconds"])) else math.nan
        rows.append({
            "ordering": ordering, "method": m, "mean": float(np.nanmean(e)), "std": float(np.nanstd(e)),
            "median": float(np.nanmedian(e)), "failed": int(np.sum(~np.isfinite(e))),
            "rmse_clean": float(np.nanmedian(per[m]["rmse_clean"])),
            "us_per_step": best / n_steps * 1e6, "time_ratio": best / ekf_best,
            "thesis": THESIS[ordering][m], "params": format_params(params[m]),
        })
    return {"ordering": ordering, "params": params, "per_trial": per, "rows": rows, "example": example}


COLUMNS = [("ordering", "ordering", ""), ("method", "method", ""), ("mean", "mean RMedSE", ".2f"),
           ("std", "std", ".2f"), ("median", "median RMedSE", ".2f"),
           ("rmse_clean", "RMSE vs clean f (2nd half)", ".2f"),
           ("us_per_step", "µs/step", ".0f"), ("time_ratio", "time ×EKF", ".2f"),
           ("thesis", "thesis (Figs. 4.6-4.7)", ""), ("params", "hyper-parameters (tuning trials)", "")]


def plot_example(results, path) -> Path:
    """The figure of the module docstring (one panel per ordering)."""
    import matplotlib
    from sklearn.base import clone

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6.5 * len(results), 4.6), squeeze=False)
    grid = np.linspace(-3.0, 3.0, 400)[:, None]
    for ax, res in zip(axes[0], results):
        ex = res["example"]
        s = ex["stream"]
        ax.scatter(s["X"][~s["outlier"], 0], s["y"][~s["outlier"]], s=4, c="0.6", label="inliers", zorder=1)
        ax.scatter(s["X"][s["outlier"], 0], s["y"][s["outlier"]], s=10, c="crimson", marker="x", label="outliers",
                   zorder=2)
        ax.plot(grid[:, 0], clean_mean(grid[:, 0]), c="k", lw=1, ls="--", label="clean mean", zorder=3)
        online = res["ordering"] == "sorted"
        for m, color in (("EKF", "tab:orange"), ("WoLF-IMQ", "tab:blue")):
            est = ex["fits"].get(m)
            if est is None:
                continue
            if online:  # x increases along the stream: the one-step-ahead band is a curve in x
                xs = s["X"][:, 0]
                mean, std = clone(est).prequential_fit_predict(s["X"], s["y"], return_std=True)
            else:  # the belief after the pass, on a grid
                xs = grid[:, 0]
                mean, std = est.predict(grid, return_std=True)
            ax.plot(xs, mean, c=color, lw=1.8, label=f"{m} mean", zorder=4)
            ax.fill_between(xs, mean - 2 * std, mean + 2 * std, color=color, alpha=0.15, lw=0, zorder=0)
            for edge in (mean - 2 * std, mean + 2 * std):  # band edges drawn: the two bands overlap
                ax.plot(xs, edge, c=color, lw=0.7, ls="-", alpha=0.9, zorder=3,
                        label=f"{m} ±2σ" if edge is not None and edge[0] < mean[0] else None)
        ax.set_ylim(-45, 45)
        ax.set_xlabel("x")
        ax.set_ylabel("y")
        ax.set_title(f"{res['ordering']} inputs, trial 1: "
                     + ("one-step-ahead predictive along the stream" if online
                        else "predict(x, return_std=True) after one pass"))
        ax.legend(fontsize=7, loc="lower right", ncol=2)
    fig.tight_layout()
    return save_figure(fig, path)


def run(orderings=ORDERINGS, n_trials=10, tune_trials=2, out=None, figure=True, grids=None, n_steps=N_STEPS,
        progress=print) -> dict:
    """Run the benchmark (module docstring); returns ``rows``, ``text``, ``path``, ``figure``."""
    import torch

    load = current_load()
    with limit_threads(1):
        results = [run_ordering(o, n_trials, tune_trials, grids, n_steps, progress) for o in orderings]
    rows = [r for res in results for r in res["rows"]]
    header = (f"1-D MLP regression with 5 % U[−40, 40] outliers (thesis §4.7.3): MLP 1-10-10-1 ReLU, Q = 1e-4 I, "
              f"T = {n_steps}; RMedSE of the one-step-ahead predictions (outliers included) over {n_trials} trials "
              f"per ordering; µs/step of the fastest trial (one thread, torch {torch.__version__}).")
    warn = load_warning(load)
    text = header + "\n\n" + format_table(rows, COLUMNS, markdown=True) + "\n" + (f"\n{warn}\n" if warn else "")
    path = write_text(Path(out) / "wolf_1d_table.md", text) if out is not None else None
    fig_path = None
    if figure and out is not None:
        fig_path = plot_example(results, Path(out) / "img" / "wolf_1d.png")
    return {"rows": rows, "results": results, "text": text, "path": path, "figure": fig_path}


def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks wolf-1d``."""
    parser.add_argument("--trials", type=positive_int, default=10, help="evaluated trials per ordering")
    parser.add_argument("--tune-trials", type=positive_int, default=2, help="tuning trials per ordering")
    parser.add_argument("--steps", type=positive_int, default=N_STEPS, help="stream length T")
    parser.add_argument("--orderings", nargs="+", choices=ORDERINGS, default=list(ORDERINGS))
    parser.add_argument("--no-figure", action="store_true", help="skip the figure")
    parser.add_argument("--out", type=Path, default=Path("doc"),
                        help="folder of the Markdown table (wolf_1d_table.md) and of img/wolf_1d.png")


def main(args) -> int:
    """Run the benchmark and print the table."""
    res = run(args.orderings, args.trials, args.tune_trials, out=args.out, figure=not args.no_figure,
              n_steps=args.steps)
    print(format_table(res["rows"], COLUMNS))
    if res["path"] is not None:
        print(f"  table written to {res['path']}")
    if res["figure"] is not None:
        print(f"  figure written to {res['figure']}")
    return 0
