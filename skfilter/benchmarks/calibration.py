"""Calibration of every default classifier: its log-loss beside the same estimator behind a post-hoc calibrator.

A Bayesian filter's class probabilities should need no calibrator fitted afterwards. For every
classifier of the defaults benchmark (:func:`skfilter.benchmarks.defaults.estimators`: every skfilter
classifier with default parameters, only ``random_state`` set, and ``MLPClassifier`` as a reference)
on scikit-learn's iris, wine, breast cancer and digits (standardised features by default, 30 % held
out, stratified, ``--seeds`` splits), this benchmark fits

* the estimator itself (``own``), and
* :class:`sklearn.calibration.CalibratedClassifierCV` of a clone with ``cv=3`` and
  ``method='sigmoid'`` (``calibrated``: three fits on two thirds of the training rows, each
  Platt-scaled on the third left out, averaged),

and reports, averaged over the splits, the held-out log-loss of both, their ratio ``own /
calibrated`` (issue 30's target for the skfilter classifiers: at most 1.1), the top-label expected
calibration error (:func:`skfilter.metrics.expected_calibration_error`, ``--n-bins`` equal-width
bins) and the accuracy of both. A fit that raises is reported in the ``error`` column.

Run as ``python -m skfilter.benchmarks calibration`` (``--quick``: one split, iris, wine and breast
cancer, a few minutes on 2 cores; the full run is dominated by the full-covariance EKF on digits),
``--markdown doc/calibration_table.md`` to write the table.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np

from ._common import format_table, write_text
from .defaults import CLASSIFICATION_SETS, estimators, held_out_split, load_dataset

HELP = ("every default classifier's log-loss and calibration error beside CalibratedClassifierCV(cv=3, "
        "method='sigmoid') of it")

#: the sets of ``--quick``
QUICK_SETS = ("iris", "wine", "breast_cancer")


def _scores(proba, y, classes, n_bins) -> dict:
    """Log-loss, top-label ECE and accuracy of probabilities ``proba`` (columns ``classes``)."""
    from sklearn.metrics import accuracy_score, log_loss

    from ..metrics import expected_calibration_error

    return {"log_loss": float(log_loss(y, proba, labels=classes)),
            "ece": float(expected_calibration_error(y, proba, n_bins=n_bins, labels=classes)),
            "accuracy": float(accuracy_score(y, classes[np.argmax(proba, axis=1)]))}


def evaluate(est, Xtr, ytr, Xte, yte, n_bins=10, cv=3) -> dict:
    """Scores of ``est`` and of ``CalibratedClassifierCV(clone(est), cv=cv, method='sigmoid')`` on the
    held-out rows (keys ``own_…`` and ``cal_…``), the seconds of both fits, ``error`` on failure."""
    from sklearn.base import clone
    from sklearn.calibration import CalibratedClassifierCV

    out = {"error": ""}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            own = clone(est).fit(Xtr, ytr)
            out.update({f"own_{k}": v for k, v in _scores(own.predict_proba(Xte), yte, own.classes_, n_bins).items()})
            t1 = time.perf_counter()
            cal = CalibratedClassifierCV(clone(est), cv=cv, method="sigmoid").fit(Xtr, ytr)
            out.update({f"cal_{k}": v for k, v in _scores(cal.predict_proba(Xte), yte, cal.classes_, n_bins).items()})
            out["fit_s"], out["cal_fit_s"] = t1 - t0, time.perf_counter() - t1
    except Exception as exc:  # noqa: BLE001 - reported in the table
        out["error"] = f"{type(exc).__name__}: {str(exc)[:60]}"
    return out


_KEYS = ("own_log_loss", "cal_log_loss", "own_ece", "cal_ece", "own_accuracy", "cal_accuracy", "fit_s", "cal_fit_s")


def run(datasets=CLASSIFICATION_SETS, seeds=(0, 1, 2), features="standardised", only=None, n_bins=10,
        progress=print) -> list:
    """Rows ``{dataset, features, estimator, metrics…, ratio}``, the metrics averaged over the splits
    ``seeds`` (``ratio``: mean own log-loss over mean calibrated log-loss).

    Parameters
    ----------
    datasets : sequence of str
        Among ``iris``, ``wine``, ``breast_cancer``, ``digits``.
    seeds : sequence of int
        Train/test splits (30 % held out, stratified) and the estimators' ``random_state``.
    features : {'standardised', 'raw', 'both'}
        ``StandardScaler`` fitted on the training rows, the raw features, or both.
    only : collection of str or None
        Estimator names (as in the table) to run; None: all.
    n_bins : int
        Bins of the expected calibration error.
    progress : callable or None

    Returns
    -------
    list of dict

    Examples
    --------
    >>> from skfilter.benchmarks.calibration import run
    >>> rows = run(["iris"], seeds=(0,), only={"EKFClassifier(fd)"}, progress=None)
    >>> rows[0]["estimator"], rows[0]["ratio"] > 0
    ('EKFClassifier(fd)', True)
    """

    kinds = ("raw", "standardised") if features == "both" else (features,)
    rows = []
    for name in datasets:
        X, y, _ = load_dataset(name)
        for kind in kinds:
            results = {}
            for seed in seeds:
                Xtr, Xte, ytr, yte = held_out_split(X, y, seed, kind, stratify=True)
                for est_name, est in estimators("classification", seed).items():
                    if only and est_name not in only:
                        continue
                    if progress:
                        progress(f"  {name:14s} {kind:12s} {est_name:24s} split {seed}")
                    results.setdefault(est_name, []).append(evaluate(est, Xtr, ytr, Xte, yte, n_bins))
            for est_name, runs in results.items():
                row = {"dataset": name, "features": kind, "estimator": est_name}
                for key in _KEYS:
                    vals = [r[key] for r in runs if key in r]
                    row[key] = float(np.mean(vals)) if vals else None
                own, cal = row["own_log_loss"], row["cal_log_loss"]
                row["ratio"] = own / cal if own is not None and cal else None
                errors = [r["error"] for r in runs if r["error"]]
                row["error"] = f"{len(errors)}/{len(runs)} failed: {errors[0]}" if errors else ""
                rows.append(row)
    return rows


COLUMNS = [("dataset", "dataset", ""), ("features", "features", ""), ("estimator", "estimator", ""),
           ("own_log_loss", "log-loss", ".3f"), ("cal_log_loss", "calibrated log-loss", ".3f"),
           ("ratio", "ratio", ".2f"), ("own_ece", "ECE", ".3f"), ("cal_ece", "calibrated ECE", ".3f"),
           ("own_accuracy", "accuracy", ".3f"), ("cal_accuracy", "calibrated accuracy", ".3f"),
           ("fit_s", "fit s", ".1f"), ("error", "error", "")]


def summary(rows, target=1.1) -> str:
    """One line per data set: how many skfilter classifiers have ``ratio ≤ target`` and the largest."""
    lines = []
    for name in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == name and not r["estimator"].startswith("MLP")
                and r["ratio"] is not None]
        if mine:
            worst = max(mine, key=lambda r: r["ratio"])
            ok = sum(r["ratio"] <= target for r in mine)
            lines.append(f"{name}: {ok}/{len(mine)} skfilter classifiers within {target}x of their calibrated "
                         f"selves; largest ratio {worst['ratio']:.2f} ({worst['estimator']}, {worst['features']})")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks calibration``."""
    parser.add_argument("--seeds", type=int, default=3, help="train/test splits per data set")
    parser.add_argument("--quick", action="store_true", help="one split; iris, wine and breast cancer only")
    parser.add_argument("--features", choices=("standardised", "raw", "both"), default="standardised",
                        help="features as given or standardised on the training rows")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these estimators (names as in the table)")
    parser.add_argument("--n-bins", type=int, default=10, help="equal-width bins of the expected calibration error")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table as Markdown here")


def main(args) -> int:
    """Run the benchmark and print the table (module docstring)."""
    datasets = QUICK_SETS if args.quick else CLASSIFICATION_SETS
    seeds = (0,) if args.quick else tuple(range(args.seeds))
    rows = run(datasets, seeds, args.features, args.only, args.n_bins)
    print(format_table(rows, COLUMNS))
    print(summary(rows))
    if args.markdown is not None:
        options = " ".join(["calibration", *(["--quick"] if args.quick else [f"--seeds {args.seeds}"]),
                            f"--features {args.features}", f"--n-bins {args.n_bins}"])
        write_text(args.markdown, format_table(rows, COLUMNS, markdown=True) + "\n\n" + summary(rows) + "\n",
                   generated_by=options)
        print(f"  table written to {args.markdown}")
    return 0
