"""How many first rows should set the ``'auto'`` prior? And does a small first call diverge?

Issue 29: ``prior_variance='auto'`` standardises the inputs (and scales the prior, and a regressor's
first noise estimate) with the statistics of the first rows of a stream (:mod:`skfilter.priors`).
This benchmark simulates a stream whose prior was set from its first ``k`` rows and then frozen:
``partial_fit(X[:k], y[:k])`` (one call), then every later row learned one at a time, each
predicted before it is learned (the prequential protocol; the filter's own one-step-ahead record,
which is what a ``predict`` before every one-row ``partial_fit`` returns). Beside it, ``k='all'``:
the prior set from every row of the stream (``prequential_fit_predict``), not honest, the reference.

Streams: scikit-learn's bundled sets (diabetes as regression; breast cancer, wine, digits, iris as
classification) and the UCI regression sets found in ``--uci-home`` (each twice: regression of the
target in its own units, and classification of "target above its median"), raw features, row order
kept, the first ``--max-rows`` rows (digits: at most 300, the full EKF's step is ~30 ms there).
Estimators: the families EKF, LoFi, LRKF, HiLoFi, LoLoFi, WoLF(LoFi) and BOCD(LoFi), default
parameters (``random_state`` only).

Scores, on the rows from ``--score-from`` on (default: the largest ``k`` of the run, so that every
``k`` is scored on the same rows): regression RMSE in units of the stream's target standard
deviation, classification log-loss and accuracy. ``failed``: the stream raised (``FilterStepError``
on divergence) or predicted a non-finite value. ``ms/step``: time of the prequential pass per row,
what a re-learning warm-up multiplies by ``N(N+1)/2`` (one-row calls re-learn every row so far).

Run as ``python -m skfilter.benchmarks prior-rows --k 1 2 5`` (divergence check) or
``--k 10 20 50 100 200 all`` (choice of N); ``--markdown`` writes the summary table.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np

from ._common import format_table, write_text

HELP = "prior set from the first k rows, then one row at a time: divergences and prequential scores"

SKLEARN_SETS = {"diabetes": "regression", "breast_cancer": "classification", "wine": "classification",
                "digits": "classification", "iris": "classification"}
UCI_SETS = ("concrete", "energy", "kin8nm", "naval-propulsion-plant", "power-plant", "wine-quality-red", "yacht",
            "bostonHousing")
FAMILIES = ("EKF", "LoFi", "LRKF", "HiLoFi", "LoLoFi", "WoLF", "BOCD")
ROW_CAP = {"digits": 300}


def streams(uci_home=None, max_rows=600, names=None):
    """``[(name, task, X, y)]``: every stream of the module docstring, first ``max_rows`` rows."""
    from sklearn import datasets

    out = []
    for name, task in SKLEARN_SETS.items():
        if names and name not in names:
            continue
        X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
        n = min(max_rows, ROW_CAP.get(name, max_rows))
        out.append((name, task, np.asarray(X[:n], float), y[:n]))
    if uci_home is not None:
        from ..datasets import load_uci

        for name in UCI_SETS:
            if (names and name not in names) or not (Path(uci_home) / name / "data.txt").exists():
                continue
            d = load_uci(name, data_home=uci_home)
            X, y = np.asarray(d.data[:max_rows], float), np.asarray(d.target[:max_rows], float)
            out.append((name, "regression", X, y))
            out.append((name + ">median", "classification", X, (y > np.median(y)).astype(int)))
    return out


def make_estimator(family, task, seed=0):
    """The family's estimator with default parameters (WoLF and BOCD around LoFi)."""
    import skfilter as sf

    suffix = "Classifier" if task == "classification" else "Regressor"
    if family in ("WoLF", "BOCD"):
        return getattr(sf, family + suffix)(getattr(sf, "LoFi" + suffix)(random_state=seed))
    return getattr(sf, family + suffix)(random_state=seed)


def _prequential_rest(est, family, task, X, y):
    """Learn ``(X, y)`` row by row on the fitted ``est`` and return the one-step-ahead predictions
    (probabilities or means) made before each row is learned."""
    from .._utils import to_numpy

    if family == "BOCD":
        rec = est._run(X, y, None, first=False, prequential=True)
        inner = est._inner
    else:
        inner = est.estimator_ if family == "WoLF" else est
        rec = inner._fit(X, y, None, reset=False, n_epochs=1, record=True)
    rec = to_numpy(rec)
    return rec if task == "classification" else rec[:, 0]


def run_stream(family, task, X, y, k, score_from, seed=0) -> dict:
    """One stream: the prior from the first ``k`` rows (``'all'``: every row), then row by row."""
    from sklearn.metrics import log_loss

    est = make_estimator(family, task, seed)
    classes = np.unique(y) if task == "classification" else None
    kw = {} if classes is None else {"classes": classes}
    out = {"failed": 0, "error": ""}
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if k == "all":
                method = {"method": "predict_proba"} if classes is not None else {}
                pred = np.asarray(est.prequential_fit_predict(X, y, **method, **kw))
                t1 = time.perf_counter()
                pred = pred[score_from:]
            else:
                est.partial_fit(X[:k], y[:k], **kw)
                t1 = time.perf_counter()
                pred = _prequential_rest(est, family, task, X[k:], y[k:])[score_from - k:]
        steps = len(X) - (0 if k == "all" else k)
        out["ms_step"] = 1e3 * (time.perf_counter() - t1) / max(steps, 1)
        if not np.all(np.isfinite(pred)):
            raise FloatingPointError("non-finite prediction")
    except Exception as exc:  # noqa: BLE001 - reported
        out["failed"] = 1
        out["error"] = f"{type(exc).__name__}: {str(exc)[:50]}"
        return out
    yt = y[score_from:]
    if task == "classification":
        out["log_loss"] = float(log_loss(yt, np.clip(pred, 1e-15, 1), labels=classes))
        out["accuracy"] = float(np.mean(classes[np.argmax(pred, axis=1)] == yt))
    else:
        out["rmse"] = float(np.sqrt(np.mean((pred - yt) ** 2)) / np.std(y))
    return out


def run(ks=(1, 2, 5), families=FAMILIES, uci_home=None, max_rows=600, names=None, score_from=None,
        progress=print, on_stream=None) -> list:
    """Rows ``{stream, task, family, k, failed, rmse | log_loss, accuracy, ms_step, error}``; a stream
    with fewer than ``score_from + 20`` rows is left out. ``on_stream(rows)`` after every stream."""
    numeric = [k for k in ks if k != "all"]
    start = max(numeric) if score_from is None and numeric else (score_from or 0)
    rows = []
    for name, task, X, y in streams(uci_home, max_rows, names):
        if len(X) < start + 20:
            if progress:
                progress(f"  {name}: {len(X)} rows, too short to score from row {start}: left out")
            continue
        for family in families:
            for k in ks:
                r = run_stream(family, task, X, y, k, start)
                r.update(stream=name, task=task, family=family, k=str(k))
                rows.append(r)
                if progress:
                    score = r.get("rmse", r.get("log_loss"))
                    progress(f"  {name:26s} {family:7s} k={k!s:4s} "
                             + (f"FAILED {r['error']}" if r["failed"] else f"{score:.3f}  {r['ms_step']:.2f} ms/step"))
        if on_stream is not None:
            on_stream(rows)
    return rows


def summary(rows) -> list:
    """Per ``(k, family)``: failures, and the mean score over the streams none of the ``k`` failed
    on (regression RMSE/σ_y; classification log-loss and accuracy)."""
    ks = list(dict.fromkeys(r["k"] for r in rows))
    out = []
    for family in dict.fromkeys(r["family"] for r in rows):
        fam = [r for r in rows if r["family"] == family]
        ok = {s for s in {r["stream"] for r in fam} if not any(r["failed"] for r in fam if r["stream"] == s)}
        for k in ks:
            sel = [r for r in fam if r["k"] == k]
            good = [r for r in sel if r["stream"] in ok]
            mean = lambda key: (float(np.mean(v)) if (v := [r[key] for r in good if key in r]) else None)  # noqa: E731
            out.append({"family": family, "k": k, "failed": sum(r["failed"] for r in sel),
                        "streams": len(sel), "failed_on": ", ".join(r["stream"] for r in sel if r["failed"]),
                        "rmse": mean("rmse"), "log_loss": mean("log_loss"), "accuracy": mean("accuracy"),
                        "ms_step": mean("ms_step")})
    return out


COLUMNS = [("family", "family", ""), ("k", "prior rows", ""), ("failed", "failed", "d"), ("streams", "streams", "d"),
           ("rmse", "RMSE/σ_y", ".3f"), ("log_loss", "log-loss", ".3f"), ("accuracy", "accuracy", ".3f"),
           ("ms_step", "ms/step", ".2f"), ("failed_on", "failed on", "")]
DETAIL = [("stream", "stream", ""), ("family", "family", ""), ("k", "k", ""), ("rmse", "RMSE/σ_y", ".3f"),
          ("log_loss", "log-loss", ".3f"), ("accuracy", "accuracy", ".3f"), ("ms_step", "ms/step", ".2f"),
          ("error", "error", "")]


def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks prior-rows``."""
    parser.add_argument("--k", nargs="+", default=["1", "2", "5"], help="first-call sizes (integers or 'all')")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES))
    parser.add_argument("--datasets", nargs="+", default=None, help="only these streams")
    parser.add_argument("--uci-home", type=Path, default=None, help="folder of the UCI data sets (data + splits)")
    parser.add_argument("--max-rows", type=int, default=600)
    parser.add_argument("--score-from", type=int, default=None)
    parser.add_argument("--details", action="store_true", help="also print every stream")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the summary as Markdown here")
    parser.add_argument("--json", type=Path, default=None, help="also write every stream's row as JSON here")


def main(args) -> int:
    """Run the benchmark and print the summary (module docstring)."""
    ks = [k if k == "all" else int(k) for k in args.k]
    def save(rows):
        if args.json is not None:
            import json

            write_text(args.json, json.dumps(rows, indent=1) + "\n")

    rows = run(ks, args.families, args.uci_home, args.max_rows, args.datasets, args.score_from, on_stream=save)
    if args.details:
        print(format_table(rows, DETAIL))
    table = summary(rows)
    print(format_table(table, COLUMNS))
    if args.markdown is not None:
        write_text(args.markdown, format_table(table, COLUMNS, markdown=True) + "\n")
        print(f"  table written to {args.markdown}")
    return 0
