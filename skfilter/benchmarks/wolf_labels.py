"""WoLFClassifier on streams with flipped labels: held-out accuracy against the plain filter.

The thesis defines WoLF for regression only; :class:`~skfilter.WoLFClassifier` weights a row by the
IMQ of the Mahalanobis distance of its one-hot residual under the prior predictive covariance of
the class probabilities (``weighting='predictive-md'``, :mod:`skfilter.wolf`). This benchmark shows
what that buys and costs. Stream: ``x ~ N(0, I₂)``, label ``1[x₀ + x₁ > 0]``, 1,500 rows, then
corrupted by one of

* ``random`` — 30 % of the labels flipped at random (symmetric label noise);
* ``far`` — 40 % of the labels of the rows with margin ``|x₀ + x₁| > 1`` flipped (gross errors, the
  rows a confident filter contradicts most);
* ``one-class`` — 40 % of class 1 relabelled 0 (class-conditional noise: the noisy distribution's
  boundary itself moves, which no per-row weight can undo).

Scored on 2,000 clean held-out rows (accuracy against the true boundary), ``--seeds`` streams, for
``EKFClassifier(hidden_layer_sizes=(10,))`` and ``LoFiClassifier()`` alone and under WoLF at the
thresholds ``--thresholds`` (``auto`` is ``c = 2``).

Run as ``python -m skfilter.benchmarks wolf-labels``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._common import format_table, write_text

HELP = "WoLFClassifier vs the plain filter on streams with flipped labels"

CORRUPTIONS = ("random", "far", "one-class")


def make_stream(corruption: str, seed: int, n: int = 1500, n_test: int = 2000):
    """``(X, y_noisy, X_test, y_test)`` for one corruption (module docstring)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    margin = X[:, 0] + X[:, 1]
    y = (margin > 0).astype(int)
    u = rng.uniform(size=n)
    if corruption == "random":
        flip = u < 0.3
    elif corruption == "far":
        flip = (np.abs(margin) > 1) & (u < 0.4)
    elif corruption == "one-class":
        flip = (y == 1) & (u < 0.4)
    else:
        raise ValueError(f"corruption must be one of {CORRUPTIONS}, got {corruption!r}.")
    noisy = np.where(flip, 1 - y, y)
    X_test = rng.normal(size=(n_test, 2))
    return X, noisy, X_test, (X_test[:, 0] + X_test[:, 1] > 0).astype(int)


def bases(seed):
    """The base classifiers, by name."""
    from .. import EKFClassifier, LoFiClassifier

    return {"EKF (10 hidden)": EKFClassifier(hidden_layer_sizes=(10,), random_state=seed),
            "LoFi (default)": LoFiClassifier(random_state=seed)}


def run(seeds=(0, 1, 2, 3, 4), thresholds=("auto", 4.0), corruptions=CORRUPTIONS, progress=print) -> list:
    """Rows ``{corruption, base, method, accuracy, min_accuracy}`` (mean and minimum over seeds)."""
    from sklearn.base import clone

    from .. import WoLFClassifier

    acc = {}
    for corruption in corruptions:
        for seed in seeds:
            X, y, Xt, yt = make_stream(corruption, seed)
            for base_name, base in bases(seed).items():
                if progress:
                    progress(f"  {corruption:10s} seed {seed} {base_name}")
                methods = {"plain": clone(base)}
                methods.update({f"WoLF c={c}": WoLFClassifier(base, threshold=c) for c in thresholds})
                for method, est in methods.items():
                    score = float((est.fit(X, y).predict(Xt) == yt).mean())
                    acc.setdefault((corruption, base_name, method), []).append(score)
    return [{"corruption": k[0], "base": k[1], "method": k[2], "accuracy": float(np.mean(v)),
             "min_accuracy": float(np.min(v))} for k, v in acc.items()]


COLUMNS = [("corruption", "labels", ""), ("base", "base filter", ""), ("method", "method", ""),
           ("accuracy", "accuracy (mean)", ".4f"), ("min_accuracy", "min", ".3f")]


def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks wolf-labels``."""
    parser.add_argument("--seeds", type=int, default=5, help="streams per corruption")
    parser.add_argument("--thresholds", nargs="+", default=["auto", "4.0"], help="WoLF thresholds ('auto' or numbers)")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table as Markdown here")


def main(args) -> int:
    """Run the benchmark and print the table (module docstring)."""
    thresholds = tuple(t if t == "auto" else float(t) for t in args.thresholds)
    rows = run(tuple(range(args.seeds)), thresholds)
    print(format_table(rows, COLUMNS))
    if args.markdown is not None:
        write_text(args.markdown, format_table(rows, COLUMNS, markdown=True) + "\n")
        print(f"  table written to {args.markdown}")
    return 0
