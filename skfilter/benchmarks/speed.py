"""Microseconds per filter step on the UCI concrete MLP 8-50-1 (``P = 501``), beside scikit-learn.

Each configuration of :data:`CONFIGS` (a named estimator and batch size) is fitted on a short
warm-up stream (which builds the model and runs the first steps), then timed while
``partial_fit`` learns ``--n-rows`` further rows of the standardised concrete stream in one call;
the time per row is the median over ``--repeats`` such calls (each continues the same belief). The
per-call input validation is included, amortised over the rows. The baseline, scikit-learn's
``MLPRegressor(hidden_layer_sizes=(50,)).partial_fit`` on one row per call (always on the CPU), is
timed the same way in the same process. Targets are the per-step budgets of the project (full
covariance ≤ 400 µs, diagonal ≤ 150 µs at batch size 1, float64, CPU).

To benchmark another structure, append a :class:`SpeedConfig` to :data:`CONFIGS` (e.g. LoFi rank
10); ``--batch-sizes 1 8 32`` times every configuration at each batch size (:func:`with_batch_sizes`).

``--network mnist`` times LoFi rank 10 on the 784-500-500-10 classification MLP of the LoFi paper's
image experiments (``P = 648,010``) instead, on a synthetic stream of 784 standard-normal features
with ten classes (the timing does not depend on the data), beside
``MLPClassifier((500, 500)).partial_fit``; with ``--device cuda`` this is the GPU measurement of
spec/lofi.md §5 (use small ``--n-rows``/``--repeats`` on a CPU: a step there takes tens of ms).

Run as ``python -m skfilter.benchmarks speed`` (``make bench``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._common import (
    DEFAULT_THREADS,
    current_load,
    environment,
    format_table,
    load_stream,
    load_warning,
    median,
    positive_int,
    synchronize,
    time_repeats,
    torch_threads,
)

HELP = "µs per filter step (EKF full/vd/fd, MLP 8-50-1, P=501) vs MLPRegressor.partial_fit"

#: rows fitted before timing (builds the model, runs the first steps)
WARMUP_ROWS = 50


@dataclass
class SpeedConfig:
    """One timed configuration.

    Parameters
    ----------
    name : str
        Label in the table.
    make : callable
        ``make(device, dtype, seed, batch_size) -> estimator`` with ``partial_fit``; an unfitted
        skfilter regressor on the default MLP 8-50-1.
    batch_size : int, default=1
        Rows per filter step (passed to ``make``).
    target_us : float or None
        Budget in µs per step, shown beside the measurement (budgets are for batch size 1).
    structure : str
        Posterior structure, for the table.
    """

    name: str
    make: object
    batch_size: int = 1
    target_us: float | None = None
    structure: str = ""


def ekf_config(covariance, prior_variance, target_us=None, batch_size=1, obs_variance=0.1) -> SpeedConfig:
    """A :class:`SpeedConfig` of :class:`~skfilter.EKFRegressor` with the given ``covariance``."""

    def make(device, dtype, seed, batch_size):
        from .. import EKFRegressor

        return EKFRegressor(hidden_layer_sizes=(50,), covariance=covariance, prior_variance=prior_variance,
                            obs_variance=obs_variance, batch_size=batch_size, device=device, dtype=dtype,
                            random_state=seed)

    return SpeedConfig(f"EKF {covariance}", make, batch_size, target_us, covariance)


def lofi_config(rank, prior_variance, target_us=None, batch_size=1, obs_variance=0.1,
                variant="diagonal") -> SpeedConfig:
    """A :class:`SpeedConfig` of :class:`~skfilter.LoFiRegressor` of rank ``rank``."""

    def make(device, dtype, seed, batch_size):
        from .. import LoFiRegressor

        return LoFiRegressor(hidden_layer_sizes=(50,), rank=rank, variant=variant, prior_variance=prior_variance,
                             obs_variance=obs_variance, batch_size=batch_size, device=device, dtype=dtype,
                             random_state=seed)

    name = f"LoFi r{rank}" + ("" if variant == "diagonal" else " sph")
    return SpeedConfig(name, make, batch_size, target_us, f"lofi-{variant} L={rank}")


def lofi_classifier_config(rank, prior_variance, hidden=(500, 500), batch_size=1) -> SpeedConfig:
    """A :class:`SpeedConfig` of :class:`~skfilter.LoFiClassifier` (rank ``rank``) on an MLP with
    the given hidden widths (the ``--network mnist`` configuration)."""

    def make(device, dtype, seed, batch_size):
        from .. import LoFiClassifier

        return LoFiClassifier(hidden_layer_sizes=hidden, rank=rank, prior_variance=prior_variance,
                              batch_size=batch_size, device=device, dtype=dtype, random_state=seed)

    return SpeedConfig(f"LoFi r{rank} clf", make, batch_size, None, f"lofi-diagonal L={rank}")


def with_batch_sizes(configs, batch_sizes) -> list:
    """Each configuration at each batch size (``name`` suffixed ``' b8'`` etc. for sizes other than 1).

    Parameters
    ----------
    configs : list of SpeedConfig
    batch_sizes : sequence of int

    Returns
    -------
    list of SpeedConfig
        Budgets (``target_us``) are kept for batch size 1 only.
    """
    out = []
    for cfg in configs:
        for b in batch_sizes:
            b = int(b)
            if b < 1:
                raise ValueError(f"batch sizes must be positive, got {b}.")
            out.append(dataclasses.replace(cfg, name=cfg.name if b == 1 else f"{cfg.name} b{b}", batch_size=b,
                                           target_us=cfg.target_us if b == 1 else None))
    return out


#: the timed configurations, in table order
CONFIGS = [
    ekf_config("full", 0.1, target_us=400.0),
    ekf_config("vd", 0.01, target_us=150.0),
    ekf_config("fd", 0.1, target_us=150.0),
    lofi_config(10, 0.1, target_us=150.0),
]

#: ``--network mnist``: the 784-500-500-10 classifier of the LoFi paper's image experiments
MNIST_CONFIGS = [lofi_classifier_config(10, 0.01)]

#: networks of ``--network``: stream, configurations, baseline, description
NETWORKS = ("concrete", "mnist")


def synthetic_image_stream(n_rows, seed=0, n_features=784, n_classes=10):
    """Standard-normal rows with labels cycling through the classes first (so that any warm-up
    prefix of ``n_classes`` rows or more holds every class), then random: a stand-in for MNIST
    when only the cost per step is measured."""
    from sklearn.utils import Bunch

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    y = rng.integers(0, n_classes, size=n_rows)
    y[:n_classes] = np.arange(n_classes)
    return Bunch(X=X, y=y, name="synthetic 784-d, 10 classes")


def _rows(stream, start, n):
    """``n`` rows of the stream from ``start`` on, wrapping around its end."""
    idx = (start + np.arange(n)) % len(stream.y)
    return stream.X[idx], stream.y[idx]


def time_config(cfg: SpeedConfig, stream, n_rows=500, repeats=5, device="cpu", dtype="float64", seed=0) -> dict:
    """Time one configuration (see the module docstring).

    Parameters
    ----------
    cfg : SpeedConfig
    stream : Bunch
        From :func:`~skfilter.benchmarks._common.load_stream`.
    n_rows : int, default=500
        Rows learned per timed ``partial_fit`` call.
    repeats : int, default=5
        Timed calls (the median is reported).
    device, dtype : str
    seed : int, default=0

    Returns
    -------
    dict
        ``us_per_row`` (median), ``us_per_row_min``, ``us_per_step`` (per filter step of
        ``batch_size`` rows), ``n_params``, ``times`` (seconds per call), ``error``.
    """
    from ..exceptions import FilterStepError

    est = cfg.make(device, dtype, seed, cfg.batch_size)
    Xw, yw = _rows(stream, 0, WARMUP_ROWS)
    X, y = _rows(stream, WARMUP_ROWS, n_rows)
    row = {"config": cfg.name, "structure": cfg.structure, "batch_size": cfg.batch_size, "device": str(device),
           "dtype": str(dtype), "target_us": cfg.target_us, "n_rows": n_rows, "error": None}
    try:
        est.fit(Xw, yw)
        times = time_repeats(lambda: est.partial_fit(X, y), repeats=repeats, warmup=1, device=device)
    except FilterStepError as exc:
        row.update(error=str(exc), us_per_row=float("nan"), us_per_step=float("nan"),
                   n_params=getattr(est, "n_params_", None))
        return row
    steps = math.ceil(n_rows / cfg.batch_size)
    row.update(
        n_params=int(est.n_params_),
        times=times,
        us_per_row=1e6 * median(times) / n_rows,
        us_per_row_min=1e6 * min(times) / n_rows,
        us_per_step=1e6 * median(times) / steps,
    )
    if cfg.target_us is not None:
        row["meets_target"] = "yes" if row["us_per_step"] <= cfg.target_us else "no"
    return row


def time_mlp_baseline(stream, n_rows=500, repeats=5, seed=0, hidden=(50,), classifier=False) -> dict:
    """Time scikit-learn's ``MLPRegressor`` (or ``MLPClassifier``) ``partial_fit`` on one row per
    call (CPU).

    Parameters
    ----------
    stream : Bunch
    n_rows : int, default=500
        Calls per timed repeat.
    repeats : int, default=5
    seed : int, default=0
    hidden : tuple of int, default=(50,)
    classifier : bool, default=False
        ``MLPClassifier`` (classes from the whole stream) instead of ``MLPRegressor``.

    Returns
    -------
    dict
        Same keys as :func:`time_config`.
    """
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    Xw, yw = _rows(stream, 0, WARMUP_ROWS)
    X, y = _rows(stream, WARMUP_ROWS, n_rows)
    if classifier:
        est, name = MLPClassifier(hidden_layer_sizes=hidden, random_state=seed), "MLPClassifier.partial_fit"
        kw = {"classes": np.unique(stream.y)}
    else:
        est, name = MLPRegressor(hidden_layer_sizes=hidden, random_state=seed), "MLPRegressor.partial_fit"
        kw = {}
    for t in range(WARMUP_ROWS):
        est.partial_fit(Xw[t:t + 1], yw[t:t + 1], **kw)

    def loop():
        for t in range(n_rows):
            est.partial_fit(X[t:t + 1], y[t:t + 1], **kw)

    times = time_repeats(loop, repeats=repeats, warmup=1)
    n_params = sum(c.size for c in est.coefs_) + sum(b.size for b in est.intercepts_)
    return {"config": name, "structure": "sklearn (Adam)", "batch_size": 1,
            "device": "cpu", "dtype": "float64", "target_us": None, "n_rows": n_rows, "error": None,
            "n_params": int(n_params), "times": times, "us_per_row": 1e6 * median(times) / n_rows,
            "us_per_row_min": 1e6 * min(times) / n_rows, "us_per_step": 1e6 * median(times) / n_rows}


COLUMNS = [
    ("config", "configuration", ""),
    ("batch_size", "batch", ""),
    ("n_params", "P", ""),
    ("device", "device", ""),
    ("dtype", "dtype", ""),
    ("us_per_step", "µs/step (median)", ".0f"),
    ("us_per_row", "µs/row", ".0f"),
    ("us_per_row_min", "µs/row (min)", ".0f"),
    ("target_us", "target µs/step", ".0f"),
    ("meets_target", "meets", ""),
    ("ratio_vs_mlp", "× MLP.partial_fit", ".3f"),
]


def run_speed(configs=None, n_rows=500, repeats=5, device="cpu", dtype="float64", seed=0, baseline=True,
              json_path=None, verbose=True, network="concrete") -> dict:
    """Time every configuration and the scikit-learn baseline; print and optionally save a table.

    Parameters
    ----------
    configs : list of SpeedConfig, optional
        Default :data:`CONFIGS`.
    n_rows : int, default=500
        Rows per timed call.
    repeats : int, default=5
        Timed calls per configuration (median reported).
    device : str, default='cpu'
    dtype : {'float64', 'float32'}, default='float64'
    seed : int, default=0
    baseline : bool, default=True
        Also time ``MLPRegressor.partial_fit``.
    json_path : path-like, optional
        Write ``{"environment", "settings", "results"}`` as JSON there.
    verbose : bool, default=True
    network : {'concrete', 'mnist'}, default='concrete'
        ``'mnist'``: :data:`MNIST_CONFIGS` on :func:`synthetic_image_stream` (784-500-500-10),
        beside ``MLPClassifier((500, 500)).partial_fit``.

    Returns
    -------
    dict
        ``results`` (list of row dicts; ``ratio_vs_mlp`` = µs/row ÷ the baseline's), ``table``,
        ``environment``, ``settings``, ``seconds``.
    """
    load_before = current_load()
    t0 = time.perf_counter()
    if int(n_rows) < 1 or int(repeats) < 1:
        raise ValueError("n_rows and repeats must be positive.")
    n_rows, repeats = int(n_rows), int(repeats)
    if network not in NETWORKS:
        raise ValueError(f"network must be one of {NETWORKS}, got {network!r}.")
    mnist = network == "mnist"
    configs = (MNIST_CONFIGS if mnist else CONFIGS) if configs is None else configs
    say = print if verbose else (lambda *a, **k: None)
    stream = synthetic_image_stream(WARMUP_ROWS + n_rows, seed) if mnist else load_stream("concrete", seed=seed)
    results = []
    for cfg in configs:
        say(f"  timing {cfg.name} ...", flush=True)
        results.append(time_config(cfg, stream, n_rows, repeats, device, dtype, seed))
    synchronize(device)
    if baseline:
        say("  timing MLPRegressor.partial_fit ...", flush=True)
        results.append(time_mlp_baseline(stream, n_rows, repeats, seed, hidden=(500, 500) if mnist else (50,),
                                         classifier=mnist))
        ref = results[-1]["us_per_row"]
        for r in results:
            r["ratio_vs_mlp"] = r["us_per_row"] / ref
    env = environment()
    settings = {"dataset": stream.name if mnist else "concrete (standardised, shuffled with seed %d)" % seed,
                "model": "MLP 784-500-500-10 ReLU" if mnist else "MLP 8-50-1 ReLU",
                "n_rows": n_rows, "repeats": repeats, "warmup_rows": WARMUP_ROWS, "device": str(device),
                "dtype": str(dtype), "load_average_before": load_before}
    table = format_table(results, COLUMNS)
    say("")
    say(table)
    say("")
    for r in results:
        if r["error"]:
            say(f"  {r['config']}: failed ({r['error']})")
    say(f"  µs/row: median over {repeats} partial_fit calls of {n_rows} rows each (after a warm-up fit "
        f"of {WARMUP_ROWS} rows and one untimed call); µs/step = per filter step of `batch` rows.")
    say("  × MLP.partial_fit = µs/row ÷ scikit-learn " + ("MLPClassifier((500, 500))" if mnist else "MLPRegressor((50,))")
        + ".partial_fit on one row per call (CPU, same process).")
    say(f"  torch {env['torch']}, {env['torch_threads']} torch threads, {env['cpu_count']} CPUs, load "
        f"average {env['load_average']}.")
    warning = load_warning(load_before)
    if warning:
        say("  " + warning)
    out = {"results": results, "table": table, "environment": env, "settings": settings,
           "seconds": time.perf_counter() - t0}
    if json_path is not None:
        path = Path(json_path)
        if path.parent != Path(""):
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({k: out[k] for k in ("environment", "settings", "results")}, indent=2,
                                   default=str) + "\n")
        out["json_path"] = path
        say(f"  results written to {path}")
    return out


def add_arguments(parser) -> None:
    """Add the ``speed`` options to an :class:`argparse.ArgumentParser`."""
    parser.add_argument("--device", default="cpu", help="torch device of the filters ('cpu', 'cuda', ...)")
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"], help="filter dtype")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed calls per configuration (median)")
    parser.add_argument("--n-rows", type=positive_int, default=500, help="rows per timed partial_fit call")
    parser.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1], metavar="B",
                        help="rows per filter step; every configuration is timed at each size")
    parser.add_argument("--only", nargs="+", metavar="NAME", default=None,
                        help="time only these configurations (names as in the table)")
    parser.add_argument("--no-baseline", action="store_true", help="skip MLPRegressor.partial_fit")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help="torch intra-op threads (0: torch's default, one per core)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", default=None, help="write the results as JSON")
    parser.add_argument("--network", choices=NETWORKS, default="concrete",
                        help="'concrete': MLP 8-50-1 (P=501); 'mnist': LoFi r10 on MLP 784-500-500-10 (P=648,010)")


def main(args) -> int:
    """Run :func:`run_speed` with parsed command-line ``args``; exit status 0 (2 on a bad name or device)."""
    from .._utils import resolve_device

    try:
        resolve_device(args.device)
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    available = MNIST_CONFIGS if args.network == "mnist" else CONFIGS
    configs = available
    if args.only:
        names = {c.name for c in available}
        unknown = [n for n in args.only if n not in names]
        if unknown:
            print(f"unknown configuration(s) {unknown}; choose from {sorted(names)}")
            return 2
        configs = [c for c in available if c.name in args.only]
    configs = with_batch_sizes(configs, args.batch_sizes)
    with torch_threads(args.threads):
        run_speed(configs, n_rows=args.n_rows, repeats=args.repeats, device=args.device, dtype=args.dtype,
                  seed=args.seed, baseline=not args.no_baseline, json_path=args.json, network=args.network)
    return 0
