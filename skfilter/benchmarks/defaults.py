"""Every estimator with its default parameters on scikit-learn's bundled data sets, raw and standardised.

First use is part of the product: a user who writes ``EKFClassifier().fit(X, y)`` on raw tabular
data must get a model that learned. This benchmark fits every skfilter estimator **with default
parameters** (only ``random_state`` set) on each data set, once on the raw features (and raw
targets) and once after standardising the features (``StandardScaler`` fitted on the training
rows), and scores the held-out rows (30 %, stratified for classification, ``--seeds`` splits).
Beside them, the defaults of scikit-learn's ``MLPClassifier``/``MLPRegressor`` (200 epochs of
Adam) and ``BayesianRidge`` (which also reports a predictive std).

* classification — iris, wine, breast cancer, digits: accuracy and log-loss;
* regression — diabetes and the bundled UCI concrete (raw targets in their own units): RMSE,
  Gaussian NLPD and the coverage of the reported ±2σ band (``predict(X, return_std=True)``).

A fit that raises (e.g. :class:`~skfilter.exceptions.FilterStepError` on divergence) is reported in
the ``error`` column. Targets of the issue: no divergence anywhere; classifiers' accuracy within two
points of ``MLPClassifier``; regressors' ±2σ coverage between 90 % and 98 %.

**Streaming** (``--streaming``, issue 29): every default filter fed the raw rows of each set in
their own order, one row per call from row 0 — ``predict`` (``predict_proba``) of the row, then
``partial_fit`` of it — beside :func:`~skfilter.model_selection.prequential_predict` of the same rows
in one call. Both are one-step-ahead (each row predicted from the rows before it only; row 0, before
any data, has no regression prediction); the table gives the prequential accuracy and log-loss, or
RMSE, NLPD and ±2σ coverage, of the row-by-row loop over rows 1.., the largest difference between
the two sequences of predictions (to rounding: the prior is fixed by the stream's first
``n_prior_rows`` rows however they arrive), any failure, and µs per row of the loop
(``--stream-rows`` first rows of each set, default 400).

Run as ``python -m skfilter.benchmarks defaults`` (``--quick`` for one split and the small sets).
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np

from ._common import format_table, write_text

HELP = "every estimator with default parameters on sklearn's bundled data sets, raw and standardised"

CLASSIFICATION_SETS = ("iris", "wine", "breast_cancer", "digits")
REGRESSION_SETS = ("diabetes", "concrete")


def held_out_split(X, y, seed, features, stratify):
    """``(X_train, X_test, y_train, y_test)``: 30 % of the rows held out (split ``seed``, stratified
    by the labels with ``stratify``), the features ``'raw'`` or ``'standardised'`` by a
    ``StandardScaler`` fitted on the training rows (the protocol of the defaults and calibration
    benchmarks)."""
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y if stratify else None)
    if features == "standardised":
        scaler = StandardScaler().fit(Xtr)
        Xtr, Xte = scaler.transform(Xtr), scaler.transform(Xte)
    return Xtr, Xte, ytr, yte


def load_dataset(name):
    """``(X, y, task)`` of a bundled data set (``task`` 'classification' or 'regression')."""
    from sklearn import datasets

    if name == "concrete":
        from ..datasets import load_uci

        d = load_uci("concrete")
        return np.asarray(d.data, dtype=float), np.asarray(d.target, dtype=float), "regression"
    X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    return X, y, "classification" if name in CLASSIFICATION_SETS else "regression"


def estimators(task, seed):
    """``{name: unfitted estimator}`` with default parameters (``random_state`` only; the WoLF and
    BOCD meta-estimators' default base, LoFi, with its ``random_state`` set)."""
    from sklearn.linear_model import BayesianRidge
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    from .. import (BOCDClassifier, BOCDRegressor, EKFClassifier, EKFRegressor, FactorizationClassifier,
                    FactorizationRegressor, HiLoFiClassifier, HiLoFiRegressor,
                    LoFiClassifier, LoFiRegressor, LoLoFiClassifier, LoLoFiRegressor, LRKFClassifier, LRKFRegressor,
                    PULSEClassifier, PULSERegressor, SubspaceClassifier, SubspaceRegressor, WoLFClassifier,
                    WoLFRegressor)

    if task == "classification":
        return {
            "EKFClassifier": EKFClassifier(random_state=seed),
            "EKFClassifier(vd)": EKFClassifier(covariance="vd", random_state=seed),
            "EKFClassifier(fd)": EKFClassifier(covariance="fd", random_state=seed),
            "LoFiClassifier": LoFiClassifier(random_state=seed),
            "LRKFClassifier": LRKFClassifier(random_state=seed),
            "HiLoFiClassifier": HiLoFiClassifier(random_state=seed),
            "LoLoFiClassifier": LoLoFiClassifier(random_state=seed),
            "SubspaceClassifier": SubspaceClassifier(random_state=seed),
            "PULSEClassifier": PULSEClassifier(random_state=seed),
            "FactorizationClassifier": FactorizationClassifier(random_state=seed),
            "WoLFClassifier": WoLFClassifier(LoFiClassifier(random_state=seed)),
            "BOCDClassifier": BOCDClassifier(LoFiClassifier(random_state=seed)),
            "MLPClassifier": MLPClassifier(random_state=seed),
        }
    return {
        "EKFRegressor": EKFRegressor(random_state=seed),
        "EKFRegressor(vd)": EKFRegressor(covariance="vd", random_state=seed),
        "EKFRegressor(fd)": EKFRegressor(covariance="fd", random_state=seed),
        "LoFiRegressor": LoFiRegressor(random_state=seed),
        "LRKFRegressor": LRKFRegressor(random_state=seed),
        "HiLoFiRegressor": HiLoFiRegressor(random_state=seed),
        "LoLoFiRegressor": LoLoFiRegressor(random_state=seed),
        "SubspaceRegressor": SubspaceRegressor(random_state=seed),
        "PULSERegressor": PULSERegressor(random_state=seed),
        "FactorizationRegressor": FactorizationRegressor(random_state=seed),
        "WoLFRegressor": WoLFRegressor(LoFiRegressor(random_state=seed)),
        "BOCDRegressor": BOCDRegressor(LoFiRegressor(random_state=seed)),
        "MLPRegressor": MLPRegressor(random_state=seed),
        "BayesianRidge": BayesianRidge(),
    }


def evaluate(est, task, Xtr, ytr, Xte, yte) -> dict:
    """Fit ``est`` and score the held-out rows (module docstring); ``error`` on failure."""
    from sklearn.metrics import accuracy_score, log_loss

    from ..metrics import gaussian_nlpd, interval_coverage

    out = {"error": ""}
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(Xtr, ytr)
            if task == "classification":
                proba = est.predict_proba(Xte)
                out["accuracy"] = accuracy_score(yte, est.classes_[np.argmax(proba, axis=1)])
                out["log_loss"] = log_loss(yte, proba, labels=est.classes_)
            else:
                try:
                    mean, std = est.predict(Xte, return_std=True)
                except TypeError:  # no predictive std (MLPRegressor)
                    mean, std = est.predict(Xte), None
                out["rmse"] = float(np.sqrt(np.mean((mean - yte) ** 2)))
                if std is not None:
                    out["nlpd"] = float(gaussian_nlpd(yte, mean, std))
                    out["coverage"] = float(interval_coverage(yte, mean, std, n_std=2.0))
    except Exception as exc:  # noqa: BLE001 - reported in the table
        out["error"] = f"{type(exc).__name__}: {str(exc)[:60]}"
    out["fit_s"] = time.perf_counter() - t0
    return out


def run(datasets=CLASSIFICATION_SETS + REGRESSION_SETS, seeds=(0, 1, 2), only=None, progress=print) -> list:
    """Rows ``{dataset, features, estimator, metrics…}`` averaged over the splits ``seeds``."""
    rows = []
    for name in datasets:
        X, y, task = load_dataset(name)
        for features in ("raw", "standardised"):
            results = {}
            for seed in seeds:
                Xtr, Xte, ytr, yte = held_out_split(X, y, seed, features, stratify=task == "classification")
                for est_name, est in estimators(task, seed).items():
                    if only and est_name not in only:
                        continue
                    if progress:
                        progress(f"  {name:14s} {features:12s} {est_name:18s} split {seed}")
                    results.setdefault(est_name, []).append(evaluate(est, task, Xtr, ytr, Xte, yte))
            for est_name, runs in results.items():
                row = {"dataset": name, "features": features, "estimator": est_name}
                errors = [r["error"] for r in runs if r["error"]]
                for key in ("accuracy", "log_loss", "rmse", "nlpd", "coverage", "fit_s"):
                    vals = [r[key] for r in runs if key in r]
                    row[key] = float(np.mean(vals)) if vals else None
                row["error"] = f"{len(errors)}/{len(runs)} failed: {errors[0]}" if errors else ""
                rows.append(row)
    return rows


def stream(est, task, X, y) -> dict:
    """One row per call from row 0 beside one ``prequential_predict`` call (module docstring)."""
    from sklearn.base import clone

    from ..metrics import gaussian_nlpd, interval_coverage
    from ..model_selection import prequential_predict

    out = {"error": ""}
    classes = np.unique(y) if task == "classification" else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            one = clone(est)
            if task == "classification":
                whole = prequential_predict(one, X, y, method="predict_proba", classes=classes)
            else:
                whole, _ = prequential_predict(one, X, y, return_std=True)
            loop = clone(est)
            preds, stds = [], []
            t0 = time.perf_counter()
            for t in range(X.shape[0]):
                if t == 0:
                    preds.append(np.full(len(classes), 1.0 / len(classes)) if classes is not None else np.nan)
                    stds.append(np.nan)
                    loop.partial_fit(X[:1], y[:1], **({"classes": classes} if classes is not None else {}))
                    continue
                if classes is not None:
                    preds.append(loop.predict_proba(X[t:t + 1])[0])
                else:
                    m, sd = loop.predict(X[t:t + 1], return_std=True)
                    preds.append(m[0])
                    stds.append(sd[0])
                loop.partial_fit(X[t:t + 1], y[t:t + 1])
            out["us_per_row"] = (time.perf_counter() - t0) / X.shape[0] * 1e6
        preds = np.asarray(preds)
        out["max_diff"] = float(np.nanmax(np.abs(preds - whole)))
        if classes is not None:
            from sklearn.metrics import accuracy_score, log_loss

            out["accuracy"] = accuracy_score(y[1:], classes[np.argmax(preds[1:], axis=1)])
            out["log_loss"] = log_loss(y[1:], np.clip(preds[1:], 1e-15, 1), labels=classes)
        else:
            mean, std = preds[1:], np.asarray(stds[1:])
            out["rmse"] = float(np.sqrt(np.mean((mean - y[1:]) ** 2)))
            out["nlpd"] = float(gaussian_nlpd(y[1:], mean, std))
            out["coverage"] = float(interval_coverage(y[1:], mean, std, n_std=2.0))
    except Exception as exc:  # noqa: BLE001 - reported in the table
        out["error"] = f"{type(exc).__name__}: {str(exc)[:60]}"
    return out


def run_streaming(datasets=CLASSIFICATION_SETS + REGRESSION_SETS, n_rows=400, only=None, progress=print) -> list:
    """Rows ``{dataset, estimator, metrics…}`` of the streaming section (module docstring)."""
    rows = []
    for name in datasets:
        X, y, task = load_dataset(name)
        X, y = X[:n_rows], y[:n_rows]
        for est_name, est in estimators(task, 0).items():
            if est_name in ("MLPClassifier", "MLPRegressor", "BayesianRidge") or (only and est_name not in only):
                continue
            if progress:
                progress(f"  {name:14s} {est_name:18s} one row per call")
            rows.append({"dataset": name, "estimator": est_name, **stream(est, task, X, y)})
    return rows


STREAM_COLUMNS = [("dataset", "dataset", ""), ("estimator", "estimator", ""), ("accuracy", "accuracy", ".3f"),
                  ("log_loss", "log-loss", ".3f"), ("rmse", "RMSE", ".2f"), ("nlpd", "NLPD", ".2f"),
                  ("coverage", "±2σ coverage", ".3f"), ("max_diff", "max |row by row − one call|", ".1e"),
                  ("us_per_row", "µs/row", ".0f"), ("error", "error", "")]


COLUMNS = [("dataset", "dataset", ""), ("features", "features", ""), ("estimator", "estimator", ""),
           ("accuracy", "accuracy", ".3f"), ("log_loss", "log-loss", ".3f"), ("rmse", "RMSE", ".2f"),
           ("nlpd", "NLPD", ".2f"), ("coverage", "±2σ coverage", ".3f"), ("fit_s", "fit s", ".1f"),
           ("error", "error", "")]


def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks defaults``."""
    parser.add_argument("--seeds", type=int, default=3, help="train/test splits per data set")
    parser.add_argument("--quick", action="store_true", help="one split, iris/wine/diabetes only")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these estimators (names as in the table)")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table as Markdown here")
    parser.add_argument("--streaming", action="store_true",
                        help="the streaming section: one row per call from row 0 beside one prequential call")
    parser.add_argument("--stream-rows", type=int, default=400, help="first rows of each set (streaming section)")


def main(args) -> int:
    """Run the benchmark and print the table (module docstring)."""
    datasets = ("iris", "wine", "diabetes") if args.quick else CLASSIFICATION_SETS + REGRESSION_SETS
    if args.streaming:
        rows = run_streaming(datasets, args.stream_rows, args.only)
        table = format_table(rows, STREAM_COLUMNS)
        print(table)
        if args.markdown is not None:
            write_text(args.markdown, format_table(rows, STREAM_COLUMNS, markdown=True) + "\n")
            print(f"  table written to {args.markdown}")
        return 0
    seeds = (0,) if args.quick else tuple(range(args.seeds))
    rows = run(datasets, seeds, args.only)
    table = format_table(rows, COLUMNS)
    print(table)
    if args.markdown is not None:
        write_text(args.markdown, format_table(rows, COLUMNS, markdown=True) + "\n")
        print(f"  table written to {args.markdown}")
    return 0
