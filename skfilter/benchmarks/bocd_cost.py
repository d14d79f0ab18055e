"""Per-step cost of K = 10 against K = 1 run-length hypotheses (issue 17; spec/bone.md §3.3 Alg. 8).

RL[K]-PR updates ``K + 1`` candidate beliefs per step (the ``K`` kept run lengths grown by one row
and the changepoint hypothesis) in **one** batched :func:`~skfilter.filtering.filter_step` on the
hypotheses axis, then keeps the ``K`` most probable. Its cost is therefore that of a batched update of
``K + 1`` beliefs plus the per-step overhead; ``K = 10`` (11 candidates) against ``K = 1``
(2 candidates) is 5.5× the belief work. The target of issue 17 is **≤ 3×** per step.

**Set-up** (as :mod:`skfilter.benchmarks.speed`): the concrete MLP 8-50-1 (``P = 501``, ReLU), the
standardised concrete stream, float64, one thread, CPU. For each structure — ``LoFiRegressor``
(rank 10, diagonal variant) and the diagonal ``EKFRegressor(covariance='vd')`` — the base alone and
``BOCDRegressor(base, hazard=0.01, n_hypotheses=K, reset='prior')`` for ``K ∈ {1, 10}``: each
estimator learns ``WARMUP_ROWS`` rows (model built, ``K`` hypotheses filled), then
``partial_fit`` learns ``--n-rows`` further rows in one call; µs per row is the median over
``--repeats`` such calls (each continuing the stream and the mixture), all in one process,
interleaved (each round times every estimator once).

Run as ``python -m skfilter.benchmarks bocd-cost``; the table goes to ``--out``/bocd_cost_table.md.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ._common import current_load, format_table, load_stream, load_warning, positive_int, write_text

HELP = "BOCD/BONE: µs per step of K = 10 vs K = 1 run-length hypotheses (LoFi, VD; MLP 8-50-1, P = 501)"

WARMUP_ROWS = 30
HAZARD = 0.01


def bases():
    """The base regressors by structure name (the concrete MLP 8-50-1)."""
    from .. import EKFRegressor, LoFiRegressor

    return {
        "LoFi (rank 10)": lambda: LoFiRegressor(hidden_layer_sizes=(50,), rank=10, random_state=0),
        "VD (diagonal)": lambda: EKFRegressor(hidden_layer_sizes=(50,), covariance="vd", random_state=0),
    }


def _timed(est, X, y, start: int, n_rows: int) -> float:
    """µs per row of one ``partial_fit`` call on rows ``start … start + n_rows − 1`` (wrapping)."""
    idx = np.arange(start, start + n_rows) % len(y)
    t0 = time.perf_counter()
    est.partial_fit(X[idx], y[idx])
    return 1e6 * (time.perf_counter() - t0) / n_rows


def run(n_rows: int = 100, repeats: int = 5, ks=(1, 10), progress=print):
    """Rows ``{structure, base_us, K=<k>_us…, ratio, n_params}``."""
    from .. import BOCDRegressor

    data = load_stream("concrete")
    X, y = data.X, data.y
    rows = []
    for name, make_base in bases().items():
        ests = {"base": make_base()}
        for k in ks:
            ests[k] = BOCDRegressor(make_base(), hazard=HAZARD, n_hypotheses=k)
        for est in ests.values():
            est.fit(X[:WARMUP_ROWS], y[:WARMUP_ROWS])
        us = {key: [] for key in ests}
        for r in range(repeats):  # interleaved: each round times every estimator once, on the next rows
            for key, est in ests.items():
                us[key].append(_timed(est, X, y, WARMUP_ROWS + r * n_rows, n_rows))
        med = {key: float(np.median(v)) for key, v in us.items()}
        row = {"structure": name, "n_params": int(ests["base"].n_params_), "base_us": med["base"]}
        for k in ks:
            row[f"k{k}_us"] = med[k]
        row["ratio"] = med[ks[-1]] / med[ks[0]]
        row["target"] = "≤ 3×"
        row["ok"] = "yes" if row["ratio"] <= 3.0 else "no"
        rows.append(row)
        if progress:
            progress(f"  {name}: base {med['base']:.0f} µs, " + ", ".join(f"K={k} {med[k]:.0f} µs" for k in ks)
                     + f", ratio {row['ratio']:.2f}")
    return rows


def columns(ks=(1, 10)):
    return ([("structure", "structure", ""), ("n_params", "P", ""), ("base_us", "base µs/step", ".0f")]
            + [(f"k{k}_us", f"K = {k} µs/step", ".0f") for k in ks]
            + [("ratio", f"K={ks[-1]} / K={ks[0]}", ".2f"), ("target", "target", ""), ("ok", "met", "")])


def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks bocd-cost``."""
    parser.add_argument("--n-rows", type=positive_int, default=100, help="rows per timed partial_fit call")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed calls per estimator")
    parser.add_argument("--out", type=Path, default=Path("doc"), help="folder of the Markdown table")


def main(args) -> int:
    """Run the cost benchmark (module docstring)."""
    load = current_load()
    rows = run(args.n_rows, args.repeats)
    print(format_table(rows, columns()))
    warning = load_warning(load)
    if warning:
        print(warning)
    note = f"\n{warning}\n" if warning else ""
    path = write_text(args.out / "bocd_cost_table.md", format_table(rows, columns(), markdown=True) + "\n" + note,
                      f"bocd-cost --n-rows {args.n_rows} --repeats {args.repeats}; 1-min load average before the "
                      f"run: {'n/a' if load is None else f'{load:.1f}'}")
    print(f"  table written to {path}")
    return 0
