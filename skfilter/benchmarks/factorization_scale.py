"""Throughput and memory of the DEKF on a large sparse matrix-factorization stream.

A rating stream over ``--users × --items`` (default 10⁵ × 10⁴) with uniform random pairs
(:func:`skfilter.benchmarks.factorization.make_stream`, ``n_factors`` latent factors, biases,
Gaussian noise) is learned by ``FactorizationRegressor(model='mf', n_factors=8)``:

* **the estimator** — built on the first ``--warmup`` rows (``fit``), then the remaining
  ``--events`` rows are learned by ``partial_fit`` in chunks of ``--chunk`` rows, timed per chunk
  (the compiled DEKF, :mod:`skfilter.kernels.factorization`: lazy entity lookup/creation, the
  update of the user, item and global-bias blocks; the entity tables grow as users and items
  appear); events/s overall and per chunk;
* **the torch engine** — ``--api-events`` more rows with the compiled kernels off
  (:func:`skfilter.kernels.compiled_kernels`): the reference path (multiclass models and the
  iterated EKF run there), on the grown tables;
* **one event per call and prequential evaluation** — on a smaller stream (``--call-users`` ×
  ``--call-items``, ``--preq-events`` rows), for MF and an order-2 factorization machine, with ids
  in a NumPy array and in a DataFrame (categorical user, string item): ``fit`` per event, the
  prequential pass (:func:`skfilter.model_selection.prequential_predict`: each row predicted inside
  the compiled DEKF before it is learned) per event and its ratio to ``fit`` (target ≤ 2), and
  ``predict`` then ``partial_fit`` of one row per call on the fitted estimator (``--calls`` rows,
  target ≤ 25 µs per event). Each figure is the best of ``--repeats`` timings in this process, in
  CPU time of the process (one thread: robust to other jobs on the machine);
* **multiclass FM on digits** (``--multiclass``, also in the full run) — scikit-learn's digits (1,797
  rows, 64 numeric columns, 10 classes) by ``FactorizationClassifier()`` (an order-2 FM, one block of
  ``10 × 9`` parameters per column, the assumed-density categorical update: the compiled
  :func:`~skfilter.kernels.factorization.factorization_events_multi`): ``fit``, ``partial_fit`` of
  a chunk and ``predict_proba`` then ``partial_fit`` of one row per call, in µs/event beside the
  target 50 µs, and the torch engine's µs/event (kernels off) on a few rows, with their ratio;
* **memory** — the belief's bytes (:meth:`~skfilter.factorization.FactorizationFilter.nbytes`: the
  means and covariance blocks of the entities seen) and the process's peak resident set size
  (``resource.getrusage``), with the number of entities seen.

Run as ``python -m skfilter.benchmarks factorization-scale`` (tables
``factorization_scale_table.md`` and ``factorization_calls_table.md`` under ``--out``;
``--calls-only``: the second only).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ._common import format_table, positive_int, write_text

HELP = "Factorization (DEKF): events/s and memory at 10^5 users x 10^4 items"


def peak_rss_mb():
    """Peak resident set size of this process in MB (``ru_maxrss``: KB on Linux), or None."""
    try:
        import resource
        import sys
    except ImportError:  # pragma: no cover - not on Windows
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 ** 2 if sys.platform == "darwin" else 1024)


def per_event_costs(n_users=1_000, n_items=200, n_events=30_000, n_calls=2_000, n_factors=8, repeats=3, seed=0,
                    progress=print):
    """Rows of the per-event costs (module docstring): ``fit``, the prequential pass and one event
    per call, in µs per event, for MF and FM (order 2) from NumPy and from a DataFrame."""
    import pandas as pd

    from .. import FactorizationRegressor
    from ..model_selection import prequential_predict
    from .factorization import make_stream

    stream = make_stream("ratings", n_users, n_items, n_events + n_calls, n_factors=4, seed=seed)
    X = np.column_stack([stream.user, stream.item]).astype(object)
    frame = pd.DataFrame({"user": pd.Categorical([f"u{u}" for u in stream.user]),
                          "item": pd.array([f"i{i}" for i in stream.item], dtype="str")})
    y = stream.y
    rows = []
    for model, label in (("mf", "MF"), ("fm", "FM order 2")):
        for kind in ("NumPy", "DataFrame"):
            data = X if kind == "NumPy" else frame

            def make():
                kwargs = {"entity_columns": [0, 1]} if kind == "NumPy" else {}
                return FactorizationRegressor(model=model, n_factors=n_factors, random_state=seed, **kwargs)

            def best(fn):
                times = []
                for _ in range(repeats):  # CPU time of this (one-thread) process: robust on a shared machine
                    t0 = time.process_time()
                    fn()
                    times.append(time.process_time() - t0)
                return min(times)

            head = data[:n_events] if kind == "NumPy" else data.iloc[:n_events]
            make().fit(head[:100], y[:100])  # compiled variants loaded
            fit_s = best(lambda: make().fit(head, y[:n_events])) / n_events
            preq_s = best(lambda: prequential_predict(make(), head, y[:n_events], return_std=True)) / n_events
            est = make().fit(head, y[:n_events])
            calls = [data[t:t + 1] if kind == "NumPy" else data.iloc[[t]] for t in range(n_events, n_events + n_calls)]
            targets = [y[t:t + 1] for t in range(n_events, n_events + n_calls)]

            def one_per_call():
                for row, target in zip(calls, targets):
                    est.predict(row)
                    est.partial_fit(row, target)

            call_s = best(one_per_call) / n_calls
            rows.append({"what": label, "input": kind, "fit": 1e6 * fit_s, "preq": 1e6 * preq_s,
                         "preq_ratio": preq_s / fit_s, "call": 1e6 * call_s, "call_ratio": call_s / fit_s})
            if progress:
                progress(f"  {label}, {kind}: fit {1e6 * fit_s:.2f} µs/event, prequential {1e6 * preq_s:.2f} µs/event "
                         f"({preq_s / fit_s:.2f}× fit), predict + partial_fit of one row {1e6 * call_s:.1f} µs/event")
    return rows


def multiclass_costs(n_fit=1_000, n_chunk=300, n_calls=100, n_torch=20, repeats=3, dtype="float64",
                     likelihood="adf", progress=print):
    """Rows of the multiclass FM costs on digits (module docstring), µs/event: the compiled DEKF's
    ``fit`` (``n_fit`` rows), ``partial_fit`` of ``n_chunk`` more, one row per call (``n_calls``),
    and the torch engine's ``partial_fit`` (``n_torch`` rows, kernels off), best of ``repeats``
    (process CPU time)."""
    import copy

    from sklearn.datasets import load_digits

    from .. import FactorizationClassifier
    from ..kernels import compiled_kernels
    from ..kernels.factorization import serves

    X, y = load_digits(return_X_y=True)
    n_fit = min(n_fit, len(y) - n_chunk - n_calls - n_torch)

    def make():
        return FactorizationClassifier(likelihood=likelihood, dtype=dtype, entity_columns=None, random_state=0)

    def best(fn):
        times = []
        for _ in range(repeats):
            t0 = time.process_time()
            fn()
            times.append(time.process_time() - t0)
        return min(times)

    make().fit(X[:60], y[:60])  # compiled variants loaded
    fit_s = best(lambda: make().fit(X[:n_fit], y[:n_fit])) / n_fit
    est = make().fit(X[:n_fit], y[:n_fit])
    assert serves(est.filter_)
    a, b = n_fit, n_fit + n_chunk
    chunk_s = best(lambda: copy.deepcopy(est).partial_fit(X[a:b], y[a:b])) / n_chunk
    rows_x = [X[t:t + 1] for t in range(b, b + n_calls)]
    rows_y = [y[t:t + 1] for t in range(b, b + n_calls)]

    def one_per_call():
        e = copy.deepcopy(est)
        for row, target in zip(rows_x, rows_y):
            e.predict_proba(row)
            e.partial_fit(row, target)

    call_s = best(one_per_call) / n_calls
    c = b + n_calls
    with compiled_kernels(False):
        torch_s = best(lambda: copy.deepcopy(est).partial_fit(X[c:c + n_torch], y[c:c + n_torch])) / n_torch
    label = f"FM order 2, digits (10 classes, {likelihood}, {dtype})"
    out = [{"what": label, "path": p, "us": 1e6 * s, "target": 50.0, "ratio": torch_s / s}
           for p, s in (("fit (compiled)", fit_s), ("partial_fit chunk (compiled)", chunk_s),
                        ("predict_proba + partial_fit, one row per call (compiled)", call_s),
                        ("partial_fit (torch engine)", torch_s))]
    if progress:
        progress(f"  {label}: fit {1e6 * fit_s:.0f} µs/event, partial_fit {1e6 * chunk_s:.0f}, one row per call "
                 f"{1e6 * call_s:.0f}, torch engine {1e6 * torch_s:.0f} ({torch_s / chunk_s:.1f}× the compiled "
                 "partial_fit); target 50 µs/event")
    return out


MULTICLASS_COLUMNS = [("what", "model", ""), ("path", "path", ""), ("us", "µs/event", ".0f"),
                      ("target", "target µs/event", ".0f"), ("ratio", "torch engine ÷ this", ".1f")]


CALL_COLUMNS = [("what", "model", ""), ("input", "ids", ""), ("fit", "fit µs/event", ".2f"),
                ("preq", "prequential µs/event", ".2f"), ("preq_ratio", "prequential ÷ fit (target ≤ 2)", ".2f"),
                ("call", "one row per call µs/event (target ≤ 25)", ".1f"),
                ("call_ratio", "one row per call ÷ fit", ".1f")]


def run(n_users=100_000, n_items=10_000, n_events=1_000_000, n_factors=8, warmup=1_000, api_events=5_000,
        chunk=100_000, seed=0, progress=print):
    """Returns ``(rows, chunks)``: the table rows and ``(events so far, events/s of the chunk)``."""
    from .. import FactorizationRegressor
    from ..kernels import compiled_kernels
    from .factorization import make_stream

    total = warmup + n_events + api_events
    stream = make_stream("ratings", n_users, n_items, total, n_factors=4, seed=seed)
    X = np.column_stack([stream.user, stream.item]).astype(object)
    rss0 = peak_rss_mb()
    est = FactorizationRegressor(model="mf", entity_columns=[0, 1], n_factors=n_factors, random_state=seed)
    est.fit(X[:warmup], stream.y[:warmup])
    f = est.filter_
    chunks = []
    start = time.perf_counter()
    t = warmup
    while t < warmup + n_events:
        stop = min(warmup + n_events, t + chunk)
        c0 = time.perf_counter()
        est.partial_fit(X[t:stop], stream.y[t:stop])
        chunks.append((stop - warmup, (stop - t) / (time.perf_counter() - c0)))
        if progress:
            progress(f"  {stop - warmup} events: {chunks[-1][1]:.0f} events/s")
        t = stop
    step_seconds = time.perf_counter() - start
    seen = est.n_entities()
    nbytes = f.nbytes()
    a0 = time.perf_counter()
    sl = slice(warmup + n_events, total)
    with compiled_kernels(False):
        est.partial_fit(X[sl], stream.y[sl])
    api_seconds = time.perf_counter() - a0
    rows = [
        {"what": "partial_fit, compiled DEKF (chunks)", "events": n_events, "rate": n_events / step_seconds,
         "us": 1e6 * step_seconds / n_events, "mb": nbytes / 2 ** 20, "rss": peak_rss_mb(),
         "users": seen.get("column 0"), "items": seen.get("column 1")},
        {"what": "partial_fit, torch engine (grown tables)", "events": api_events, "rate": api_events / api_seconds,
         "us": 1e6 * api_seconds / api_events, "mb": f.nbytes() / 2 ** 20, "rss": peak_rss_mb(),
         "users": est.n_entities().get("column 0"), "items": est.n_entities().get("column 1")},
    ]
    if progress:
        progress(f"  peak RSS before the model: {rss0:.0f} MB")
    return rows, chunks, rss0


COLUMNS = [("what", "path", ""), ("events", "events", ""), ("rate", "events/s", ".0f"), ("us", "µs/event", ".0f"),
           ("mb", "belief (MB)", ".1f"), ("rss", "peak RSS (MB)", ".0f"), ("users", "users seen", ""),
           ("items", "items seen", "")]


def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks factorization-scale``."""
    parser.add_argument("--users", type=positive_int, default=100_000)
    parser.add_argument("--items", type=positive_int, default=10_000)
    parser.add_argument("--events", type=positive_int, default=1_000_000,
                        help="events learned by the compiled path (the issue's size: 1,000,000)")
    parser.add_argument("--factors", type=positive_int, default=8, help="n_factors of the model")
    parser.add_argument("--warmup", type=positive_int, default=1_000, help="rows of the initial fit")
    parser.add_argument("--api-events", type=positive_int, default=5_000,
                        help="rows learned by the torch engine (kernels off) after them")
    parser.add_argument("--chunk", type=positive_int, default=100_000, help="rows per timed partial_fit call")
    parser.add_argument("--call-users", type=positive_int, default=1_000,
                        help="users of the stream of the per-event costs (one row per call, prequential)")
    parser.add_argument("--call-items", type=positive_int, default=200, help="items of that stream")
    parser.add_argument("--preq-events", type=positive_int, default=30_000,
                        help="rows of fit and of the prequential pass (the issue's size: 30,000)")
    parser.add_argument("--calls", type=positive_int, default=2_000,
                        help="rows fed one per call (predict, then partial_fit) after them")
    parser.add_argument("--repeats", type=positive_int, default=3, help="timings per figure (the best is kept)")
    parser.add_argument("--multiclass", action="store_true",
                        help="only the multiclass FM on digits (printed, and factorization_multiclass_table.md)")
    parser.add_argument("--calls-only", action="store_true",
                        help="only the per-event costs (table factorization_calls_table.md), not the scale run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke test: 2,000 users, 500 items, 2,000 events")
    parser.add_argument("--no-figure", action="store_true", help="(no figure: accepted for uniformity)")
    parser.add_argument("--out", type=Path, default=Path("doc"), help="folder of the table")


def main(args) -> int:
    """Run the scale benchmark (module docstring)."""
    if args.quick:
        args.users, args.items, args.events = 2_000, 500, 2_000
        args.warmup, args.api_events, args.chunk = 200, 200, 1_000
        args.call_users, args.call_items, args.preq_events, args.calls, args.repeats = 200, 50, 2_000, 200, 1
    start = time.perf_counter()
    if args.multiclass or not args.calls_only:
        multi = multiclass_costs(repeats=args.repeats, **({"n_fit": 200, "n_chunk": 50, "n_calls": 20, "n_torch": 3}
                                                          if args.quick else {}))
        print(format_table(multi, MULTICLASS_COLUMNS))
        note = ("\n\nscikit-learn's digits in file order, `FactorizationClassifier()` (order-2 FM, 8 factors, one "
                "block of 10 × 9 parameters per numeric column, assumed-density categorical update), one thread; "
                f"CPU time of the process, best of {args.repeats}. The rank-10 update of 64 blocks of 90 × 90 "
                "covariances is about 5.3 M multiply-adds per event.\n")
        path = write_text(args.out / "factorization_multiclass_table.md",
                          format_table(multi, MULTICLASS_COLUMNS, markdown=True) + note,
                          "factorization-scale --multiclass" + (" --quick" if args.quick else ""))
        print(f"  table written to {path}")
        if args.multiclass:
            return 0
    if not args.calls_only:
        rows, chunks, rss0 = run(args.users, args.items, args.events, args.factors, args.warmup, args.api_events,
                                 args.chunk, args.seed)
        print(format_table(rows, COLUMNS))
        rates = ", ".join(f"{n}: {r:.0f}" for n, r in chunks)
        note = (f"\n\n{args.users} users × {args.items} items, "
                f"`FactorizationRegressor(model='mf', n_factors={args.factors})` (user, item and global biases; "
                f"Gaussian ratings), one thread. Belief: the bytes of the entities' means and "
                f"covariance blocks; peak RSS of the whole process (Python, torch and the stream included; "
                f"{rss0:.0f} MB before the model was built). Events/s per chunk of {args.chunk} (events so far: "
                f"rate): {rates}. Wall time {time.perf_counter() - start:.0f} s.\n")
        cmd = "factorization-scale" + (" --quick" if args.quick else
                                       f" --users {args.users} --items {args.items} --events {args.events} "
                                       f"--factors {args.factors} --warmup {args.warmup} "
                                       f"--api-events {args.api_events}")
        path = write_text(args.out / "factorization_scale_table.md", format_table(rows, COLUMNS, markdown=True) + note,
                          cmd)
        print(f"  table written to {path}")
    calls = per_event_costs(args.call_users, args.call_items, args.preq_events, args.calls, args.factors, args.repeats,
                            args.seed)
    print(format_table(calls, CALL_COLUMNS))
    note = (f"\n\n{args.call_users} users × {args.call_items} items (uniform pairs, Gaussian ratings), "
            f"`FactorizationRegressor(n_factors={args.factors})` (`model='mf'`, or `'fm'` of order 2), float64, one "
            f"thread; CPU time of the process (robust to other jobs on the machine), best of {args.repeats}. "
            f"`fit` of {args.preq_events} rows; the prequential pass over the same rows "
            "(`skfilter.model_selection.prequential_predict(est, X, y, return_std=True)`: each row's prediction "
            f"recorded inside the compiled DEKF before the row is learned); then {args.calls} more rows fed one per "
            "call to the fitted estimator (`predict(row)` then `partial_fit(row, y_row)`; the rows sliced beforehand: "
            "`X[t:t+1]`, `frame.iloc[[t]]`). Ids: an object array with `entity_columns=[0, 1]`, or a DataFrame with "
            "a categorical user and a string item column.\n")
    cmd = "factorization-scale" + (" --quick" if args.quick else "") + " --calls-only" + (
        "" if args.quick else f" --factors {args.factors} --call-users {args.call_users} "
        f"--call-items {args.call_items} --preq-events {args.preq_events} --calls {args.calls} "
        f"--repeats {args.repeats}")
    path = write_text(args.out / "factorization_calls_table.md",
                      format_table(calls, CALL_COLUMNS, markdown=True) + note, cmd)
    print(f"  table written to {path}")
    return 0
