"""Prequential (one-step-ahead) benchmark on the UCI concrete stream: EKFs and LoFi against SGD baselines.

The 1,030 rows of the bundled UCI ``concrete`` data set (8 inputs, compressive strength in MPa) are
streamed once in a fixed shuffled order (seed 0). Every method predicts row ``t`` from rows
``0..t−1`` only, then learns row ``t``; the scores are averaged over all rows. Inputs and target are
standardised with the statistics of the first 10 % of the stream (the warm-up prefix, see
:func:`skfilter.benchmarks._common.load_stream`); errors are reported in the original units (MPa).

Methods (all on the MLP 8-50-1 with ReLU, ``P = 501`` parameters, except SGDRegressor):

* ``EKF full`` — :class:`~skfilter.EKFRegressor` ``covariance='full'``;
* ``EKF vd`` — diagonal, precision matching (the paper's VD mean update; it needs a small
  ``prior_variance``, its mean step is not the exact EKF mean and overshoots with a wide prior);
* ``EKF fd`` — diagonal, variance matching;
* ``LoFi rank 10`` — :class:`~skfilter.LoFiRegressor`, diagonal-plus-rank-10 precision;
* ``MLPRegressor.partial_fit`` — scikit-learn's MLP (50 hidden units, Adam, default learning rate)
  fed one row per ``partial_fit`` call;
* ``SGDRegressor.partial_fit`` — a linear model by SGD, one row per call.

The filters' predictive standard deviation is their posterior predictive (``J Σ Jᵀ + r``, from
:func:`skfilter.model_selection.prequential_predict`). The baselines give none; their NLPD uses the
root-mean-square of their own past one-step errors (:func:`~skfilter.benchmarks._common.running_residual_std`).

The filters' hyper-parameters (:func:`default_methods`) are set by hand from the scale of the
standardised data — noise variance ``r = 0.1`` (a residual of about a third of the target's spread),
prior variance ``0.1`` around the LeCun-normal initial weights (``0.01`` for VD) — not tuned by a
search; on this stream the full EKF's RMSE moves by about 0.4 MPa between prior variance 0.1 and 1.

Run as ``python -m skfilter.benchmarks demo`` (``make demo``); it prints a table and writes
``prequential_concrete.png``, ``prequential_concrete.csv`` and ``prequential_concrete.md`` to ``--out``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

from ..metrics import gaussian_nlpd, interval_coverage, mean_interval_width
from ._common import (DEFAULT_THREADS, current_load, environment, format_table, int_at_least, load_stream,
                      load_warning, running_residual_std, running_rmse, save_figure, write_csv)

HELP = "prequential benchmark on UCI concrete (EKF full/vd/fd vs sklearn partial_fit); table + figure"

#: rows streamed by ``--quick`` when ``--n-rows`` is not given
QUICK_ROWS = 200
#: file stem of the outputs in ``--out``
STEM = "prequential_concrete"
#: the baseline the per-step cost ratios refer to
REFERENCE = "MLPRegressor.partial_fit"


@dataclass
class Method:
    """A named method of the benchmark.

    Parameters
    ----------
    name : str
        Label in the table and figure.
    make : callable
        ``make(seed) -> estimator``, an unfitted estimator.
    kind : {'filter', 'sklearn'}
        ``'filter'``: scored with :func:`~skfilter.model_selection.prequential_predict`;
        ``'sklearn'``: ``predict`` then ``partial_fit`` on one row at a time.
    params : dict
        Hyper-parameters shown in the output files.
    """

    name: str
    make: object
    kind: str = "filter"
    params: dict = field(default_factory=dict)


def _filter(name, estimator, **structure):
    """A filter :class:`Method` on the MLP 8-50-1 (``estimator``: a skfilter class name)."""
    params = dict(hidden_layer_sizes=(50,), activation="relu", **structure)

    def make(seed):
        import skfilter

        return getattr(skfilter, estimator)(**params, random_state=seed)

    return Method(name, make, "filter", params)


def _mlp(seed):
    from sklearn.neural_network import MLPRegressor

    return MLPRegressor(hidden_layer_sizes=(50,), random_state=seed)


def _sgd(seed):
    from sklearn.linear_model import SGDRegressor

    return SGDRegressor(random_state=seed)


def default_methods() -> list:
    """The methods of the benchmark, in table order (see the module docstring).

    Returns
    -------
    list of Method
    """
    out = [_filter(f"EKF {cov}", "EKFRegressor", covariance=cov, prior_variance=pv, obs_variance=0.1)
           for cov, pv in (("full", 0.1), ("vd", 0.01), ("fd", 0.1))]
    out.append(_filter("LoFi rank 10", "LoFiRegressor", rank=10, prior_variance=0.1, obs_variance=0.1))
    out.append(Method(REFERENCE, _mlp, "sklearn", {"hidden_layer_sizes": (50,), "solver": "adam",
                                                   "learning_rate_init": 1e-3}))
    out.append(Method("SGDRegressor.partial_fit", _sgd, "sklearn", {"learning_rate": "invscaling",
                                                                    "eta0": 0.01}))
    return out


def prequential_sklearn(est, X, y, first_prediction: float = 0.0):
    """One-step-ahead predictions of a scikit-learn ``partial_fit`` regressor, one row per call.

    Row ``t`` is predicted by ``est.predict`` **before** ``est.partial_fit`` sees it; the first row
    (nothing learned yet) gets ``first_prediction``.

    Parameters
    ----------
    est : regressor with ``partial_fit``
    X : ndarray of shape (n, d)
    y : ndarray of shape (n,)
    first_prediction : float, default=0.0
        Prediction of row 0 (0 is the warm-up mean on the standardised scale).

    Returns
    -------
    pred : ndarray of shape (n,)
    seconds_fit : float
        Time spent in ``partial_fit`` calls.
    seconds_total : float
        Time of the whole loop (predictions and updates).
    """
    n = len(y)
    pred = np.empty(n)
    t_fit = 0.0
    t0 = time.perf_counter()
    for t in range(n):
        xt = X[t:t + 1]
        pred[t] = first_prediction if t == 0 else est.predict(xt)[0]
        t1 = time.perf_counter()
        est.partial_fit(xt, y[t:t + 1])
        t_fit += time.perf_counter() - t1
    return pred, t_fit, time.perf_counter() - t0


def run_method(method: Method, stream: Bunch, seed: int = 0) -> dict:
    """Stream ``stream`` through ``method``; one-step predictions in original units and timings.

    Parameters
    ----------
    method : Method
    stream : Bunch
        From :func:`~skfilter.benchmarks._common.load_stream`.
    seed : int, default=0
        ``random_state`` of the estimator.

    Returns
    -------
    dict
        ``mean``, ``std`` (predictive, MPa; ``std`` from past residuals for baselines), ``seconds``
        (the whole prequential loop), ``error`` (message if the run failed, else None),
        ``has_variance``.
    """
    from ..exceptions import FilterStepError
    from ..model_selection import prequential_predict

    X, y, ys = stream.X, stream.y, stream.y_scale
    est = method.make(seed)
    out = {"error": None, "has_variance": method.kind == "filter"}
    if method.kind == "filter":
        t0 = time.perf_counter()
        try:
            mean, std = prequential_predict(est, X, y, return_std=True)
        except FilterStepError as exc:
            out.update(mean=None, std=None, seconds=time.perf_counter() - t0,
                       error=f"diverged at row {getattr(exc, 'rows_done', '?')}: {exc}")
            return out
        out["seconds"] = time.perf_counter() - t0
    else:
        mean, out["seconds_fit"], out["seconds"] = prequential_sklearn(est, X, y)
        std = running_residual_std(y - mean, prior_variance=1.0)
    out["mean"] = stream.y_mean + ys * np.asarray(mean, dtype=np.float64)
    out["std"] = ys * np.asarray(std, dtype=np.float64)
    return out


def score(run: dict, stream: Bunch) -> dict:
    """Table row of one run: RMSE over all rows and after the warm-up prefix, NLPD, ±2σ coverage and
    mean ±2σ interval width (:mod:`skfilter.metrics`, original units), cost.

    Parameters
    ----------
    run : dict
        From :func:`run_method`.
    stream : Bunch

    Returns
    -------
    dict
    """
    n = len(stream.y_raw)
    row = {"seconds": run["seconds"], "us_per_step": 1e6 * run["seconds"] / n, "n_rows": n,
           "error": run["error"]}
    if run["error"] is not None:
        row.update(rmse=float("nan"), rmse_after_warmup=float("nan"), nlpd=float("nan"),
                   coverage_2std=float("nan"), width_2std=float("nan"))
        return row
    err = stream.y_raw - run["mean"]
    k = stream.n_warmup if stream.n_warmup < n else 0
    row["rmse"] = float(np.sqrt(np.mean(err**2)))
    row["rmse_after_warmup"] = float(np.sqrt(np.mean(err[k:] ** 2)))
    mean, std = run["mean"], run["std"]
    if np.all(np.isfinite(mean)) and np.all(np.isfinite(std)) and np.all(std > 0):
        row["nlpd"] = gaussian_nlpd(stream.y_raw, mean, std)
        row["coverage_2std"] = interval_coverage(stream.y_raw, mean, std, n_std=2.0)
        row["width_2std"] = mean_interval_width(std, n_std=2.0)
    else:  # the metrics reject non-finite predictions and std <= 0
        row.update(nlpd=float("nan"), coverage_2std=float("nan"), width_2std=float("nan"))
    row["nlpd_source"] = "posterior predictive" if run["has_variance"] else "past residuals"
    return row


COLUMNS = [("method", "method", ""), ("rmse", "RMSE [MPa]", ".3f"), ("nlpd", "NLPD", ".3f"),
           ("coverage_2std", "±2σ cover", ".3f"), ("width_2std", "±2σ width [MPa]", ".2f"),
           ("rmse_after_warmup", "RMSE t≥warm-up", ".3f"), ("nlpd_source", "σ from", ""),
           ("seconds", "fit [s]", ".2f"), ("us_per_step", "µs/step", ".0f"),
           ("ratio_vs_mlp", f"× {REFERENCE}", ".2f")]


def plot(runs: dict, stream: Bunch, path, focus: str = "EKF full", last: int = 100):
    """Write the two-panel figure: running RMSE of every method; ``focus``'s last predictions.

    Parameters
    ----------
    runs : dict
        ``name -> run`` from :func:`run_method`.
    stream : Bunch
    path : path-like
        Image file to write (format from the suffix).
    focus : str, default='EKF full'
        Method shown with its ± 2 std band in the right panel.
    last : int, default=100
        Steps shown in the right panel.

    Returns
    -------
    pathlib.Path
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(stream.y_raw)
    steps = np.arange(1, n + 1)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.5))
    skip = min(5, n - 1)  # the first few running RMSEs rest on one or two errors
    top = 0.0
    for name, run in runs.items():
        if run["error"] is not None:
            continue
        curve = running_rmse(stream.y_raw - run["mean"])
        top = max(top, float(np.max(curve[skip:])))
        ax0.plot(steps, curve, label=name, lw=1.4)
    ax0.axvline(stream.n_warmup, color="0.6", ls=":", lw=1, label="end of warm-up prefix")
    ax0.set_ylim(0, 1.1 * top if top > 0 else None)
    ax0.set_xlabel("step t (rows seen)")
    ax0.set_ylabel("running one-step-ahead RMSE [MPa]")
    ax0.set_title(f"UCI {stream.name}: prequential RMSE")
    ax0.grid(True, alpha=0.3)
    ax0.legend(fontsize=8)

    run = runs.get(focus)
    k = max(0, n - last)
    idx = np.arange(k, n)
    if run is not None and run["error"] is None:
        m, s = run["mean"][k:], run["std"][k:]
        ax1.errorbar(idx, m, yerr=2 * s, fmt="o", ms=3, color="C0", ecolor="C0", alpha=0.6, elinewidth=1,
                     capsize=0, label=f"{focus}: one-step mean ± 2 std")
        inside = np.mean(np.abs(stream.y_raw[k:] - m) <= 2 * s)
        ax1.set_title(f"{focus}, last {n - k} steps ({100 * inside:.0f}% inside ± 2 std)")
    else:
        ax1.set_title(f"{focus}: no predictions")
    ax1.plot(idx, stream.y_raw[k:], "kx", ms=4, label="truth")
    ax1.set_xlabel("step t")
    ax1.set_ylabel("compressive strength [MPa]")
    ax1.grid(True, alpha=0.3)
    ax1.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)


def run_demo(n_rows=None, out="demo_output", quick: bool = False, seed: int = 0, methods=None,
             figure: bool = True, verbose: bool = True) -> Bunch:
    """Run the benchmark, print the table and write figure, CSV and Markdown to ``out``.

    Parameters
    ----------
    n_rows : int or None, default=None
        Rows of the stream (all 1,030 when None; :data:`QUICK_ROWS` with ``quick``).
    out : path-like, default='demo_output'
        Output folder (created).
    quick : bool, default=False
        A short stream (when ``n_rows`` is not given), for smoke tests.
    seed : int, default=0
        Seed of the row order and of the estimators' ``random_state``.
    methods : list of Method, optional
        Default :func:`default_methods`.
    figure : bool, default=True
        Write the figure (needs matplotlib).
    verbose : bool, default=True
        Print progress and the table.

    Returns
    -------
    Bunch
        ``rows`` (table rows, dicts), ``runs`` (name -> predictions), ``stream``, ``table`` (text),
        ``paths`` (dict of written files), ``seconds`` (total).
    """
    load_before = current_load()
    t_start = time.perf_counter()
    if n_rows is None and quick:
        n_rows = QUICK_ROWS
    stream = load_stream("concrete", n_rows=n_rows, seed=seed)
    methods = default_methods() if methods is None else methods
    say = print if verbose else (lambda *a, **k: None)
    n = len(stream.y_raw)
    say(f"UCI concrete, {n} rows in shuffled order (seed {seed}); X, y standardised with the first "
        f"{stream.n_warmup} rows; one-step-ahead predictions, one pass.")
    runs, rows = {}, []
    for m in methods:
        say(f"  {m.name:<28s}", end="", flush=True)
        run = run_method(m, stream, seed=seed)
        runs[m.name] = run
        row = {"method": m.name, **score(run, stream)}
        rows.append(row)
        say(f"{run['seconds']:7.2f} s" + (f"  ({run['error']})" if run["error"] else ""))
    ref = next((r for r in rows if r["method"] == REFERENCE), None)
    for r in rows:
        r["ratio_vs_mlp"] = r["us_per_step"] / ref["us_per_step"] if ref else float("nan")
        r["params"] = next(m.params for m in methods if m.name == r["method"])

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table = format_table(rows, COLUMNS)
    env = environment()
    notes = [
        f"UCI concrete, {n} rows, shuffled with seed {seed}; standardised with the first "
        f"{stream.n_warmup} rows (warm-up prefix); RMSE in MPa, NLPD in nats per row (original units).",
        "±2σ cover = fraction of rows with |y − mean| ≤ 2σ (calibrated Gaussians: 0.954); ±2σ width = "
        "mean 4σ in MPa (skfilter.metrics.interval_coverage, mean_interval_width).",
        "µs/step = whole prequential loop (one-step prediction + update) / rows; "
        f"× {REFERENCE} = ratio of µs/step to that baseline, same process.",
        "Baselines have no predictive variance: their NLPD and ±2σ coverage use the RMS of their past "
        "one-step errors as σ.",
        f"torch {env['torch']}, {env['torch_threads']} torch threads, {env['cpu_count']} CPUs, "
        f"scikit-learn {env['sklearn']}.",
    ]
    warning = load_warning(load_before)
    if warning:
        notes.append(warning)
    paths = {
        "csv": write_csv(out / f"{STEM}.csv", rows, [k for k, _, _ in COLUMNS] + ["error"]),
        "markdown": out / f"{STEM}.md",
    }
    md = [f"# Prequential benchmark, UCI concrete ({n} rows)", "", format_table(rows, COLUMNS, markdown=True),
          ""] + [f"- {s}" for s in notes] + [""] + [
        f"- {m.name}: {m.params}" for m in methods]
    paths["markdown"].write_text("\n".join(md) + "\n")
    if figure:
        paths["figure"] = plot(runs, stream, out / f"{STEM}.png")
    seconds = time.perf_counter() - t_start
    say("")
    say(table)
    say("")
    for s in notes:
        say("  " + s)
    say("")
    for key, p in paths.items():
        say(f"{key:>9s}: {Path(p).resolve()}")
    say(f"total {seconds:.1f} s")
    return Bunch(rows=rows, runs=runs, stream=stream, table=table, paths=paths, seconds=seconds)


def add_arguments(parser) -> None:
    """Add the ``demo`` options to an :class:`argparse.ArgumentParser`."""
    parser.add_argument("--n-rows", type=int_at_least(2), default=None,
                        help=f"limit the stream to its first N rows (default: all; {QUICK_ROWS} with --quick)")
    parser.add_argument("--out", default="demo_output", help="output folder (created)")
    parser.add_argument("--quick", action="store_true", help="short stream, for a smoke test")
    parser.add_argument("--seed", type=int, default=0, help="seed of the row order and the estimators")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help="torch intra-op threads (0: torch's default, one per core)")
    parser.add_argument("--no-figure", action="store_true", help="skip the matplotlib figure")


def main(args) -> int:
    """Run :func:`run_demo` with parsed command-line ``args`` (``--threads`` is applied by
    :func:`skfilter.benchmarks.__main__.main`); exit status 0."""
    run_demo(n_rows=args.n_rows, out=args.out, quick=args.quick, seed=args.seed, figure=not args.no_figure)
    return 0
