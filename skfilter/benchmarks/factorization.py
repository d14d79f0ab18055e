"""Factorization models by the DEKF against online and batch peers on simulated rating and click streams.

**Streams** (:func:`make_stream`): ``n_users × n_items`` with latent factors and biases,
``λ = μ + b_u + b_i + ξ_uᵀξ_i`` with ``b ~ N(0, 0.3²)``, ``ξ ~ N(0, s² I)``, ``s = (0.25/a)^{1/4}``
(so that the interaction ``ξ_uᵀξ_i`` has standard deviation 0.5), ``a = 4``; events are uniform
random (user, item) pairs. Ratings:
``y = λ + N(0, 0.5²)`` with ``μ = 3.5``; clicks: ``y ~ Bern(σ(λ))`` with ``μ = −1``.

**Protocol.** Every method sees the first ``--warmup`` events as a batch (the estimators' priors
and river's intercept are set from them, no score), then the rest of the stream **prequentially**
in blocks of ``--block`` events (default 10; 1 is strictly one-step-ahead): predict the block,
score it, learn it. (A one-row ``partial_fit`` per event costs the estimator's per-call state copy,
tens of milliseconds, hence the blocks.) Scores: one-step-ahead RMSE
(ratings) or log-loss (clicks) over the scored events and over the second half of the stream, the
coverage of the ±2σ predictive interval (ratings, for the methods that give one), and the
wall-clock time per event (predict + learn).

**Methods.**

* ``FactorizationRegressor``/``FactorizationClassifier`` with ``model='mf'`` and ``model='fm'``
  (``n_factors=4``, all else default), driven through the public API (``predict``/``predict_proba``
  then ``partial_fit`` of the block);
* river's ``facto.FMRegressor``/``FMClassifier`` (``n_factors=4``, one dict
  ``{'user': u, 'item': i}`` per event through ``predict_one`` (the block) then ``learn_one``, SGD with the learning
  rate chosen on a separate stream among :data:`RIVER_RATES`, intercept started at the warm-up
  mean);
* scikit-surprise's ``SVD`` (``n_factors=4``, defaults otherwise): **batch, not online** — fitted
  once on the first half of the stream (20 epochs) and scored on the second half, an upper reference
  for what the data allow;
* the global running mean (click rate), with the running residual spread as its interval.

Run as ``python -m skfilter.benchmarks factorization-peers`` (table
``factorization_peers_table.md`` under ``--out``).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

from ._common import format_table, positive_int, write_text

HELP = "Factorization models (DEKF) against river's online FM, surprise's SVD and a global mean"

N_FACTORS = 4
RIVER_RATES = (0.005, 0.01, 0.02, 0.05, 0.1)
TUNING_SEED = 10_000
CLIP = 1e-4


def make_stream(kind: str, n_users: int = 200, n_items: int = 100, n_events: int = 10_000, n_factors: int = N_FACTORS,
                seed: int = 0) -> Bunch:
    """A simulated stream (module docstring): ``user``, ``item`` (int ids per event), ``y``, the true mean
    ``mean`` (rating mean or click probability) and ``kind``."""
    if kind not in ("ratings", "clicks"):
        raise ValueError(f"kind must be 'ratings' or 'clicks', got {kind!r}.")
    rng = np.random.default_rng(seed)
    bu, bi = 0.3 * rng.standard_normal(n_users), 0.3 * rng.standard_normal(n_items)
    scale = (0.25 / n_factors) ** 0.25
    U, V = scale * rng.standard_normal((n_users, n_factors)), scale * rng.standard_normal((n_items, n_factors))
    users, items = rng.integers(0, n_users, n_events), rng.integers(0, n_items, n_events)
    lam = bu[users] + bi[items] + np.einsum("nk,nk->n", U[users], V[items])
    if kind == "ratings":
        mean = 3.5 + lam
        y = mean + 0.5 * rng.standard_normal(n_events)
    else:
        mean = 1.0 / (1.0 + np.exp(-(lam - 1.0)))
        y = (rng.random(n_events) < mean).astype(np.int64)
    return Bunch(user=users, item=items, y=y, mean=mean, kind=kind)


def _rows(stream, sl):
    return np.column_stack([stream.user[sl], stream.item[sl]]).astype(object)


# -- the methods: each returns (prediction, std or None) per scored event, and seconds ---------------
def run_skfilter(stream, model: str, warmup: int, seed: int = 0, block: int = 1):
    from .. import FactorizationClassifier, FactorizationRegressor

    ratings = stream.kind == "ratings"
    cls = FactorizationRegressor if ratings else FactorizationClassifier
    est = cls(model=model, entity_columns=[0, 1], n_factors=N_FACTORS, random_state=seed)
    X = _rows(stream, slice(None))
    est.fit(X[:warmup], stream.y[:warmup])
    n = len(stream.y)
    pred, std = np.empty(n - warmup), np.empty(n - warmup) if ratings else None
    start = time.perf_counter()
    for t in range(warmup, n, block):
        x = X[t:t + block]
        sl = slice(t - warmup, t - warmup + len(x))
        if ratings:
            pred[sl], std[sl] = est.predict(x, return_std=True)
        else:
            pred[sl] = est.predict_proba(x)[:, 1]
        est.partial_fit(x, stream.y[t:t + block])
    return pred, std, time.perf_counter() - start


def _river_model(kind, lr, intercept, seed):
    from river import facto, optim

    cls = facto.FMRegressor if kind == "ratings" else facto.FMClassifier
    return cls(n_factors=N_FACTORS, weight_optimizer=optim.SGD(lr), latent_optimizer=optim.SGD(lr),
               intercept=intercept, intercept_lr=lr,
               latent_initializer=optim.initializers.Normal(mu=0.0, sigma=0.1, seed=seed), seed=seed)


def run_river(stream, warmup: int, lr: float, seed: int = 0, block: int = 1):
    ratings = stream.kind == "ratings"
    y0 = stream.y[:warmup].mean()
    intercept = float(y0) if ratings else float(math.log(y0 / (1 - y0)))
    model = _river_model(stream.kind, lr, intercept, seed)
    rows = [{"user": f"u{u}", "item": f"i{i}"} for u, i in zip(stream.user, stream.item)]
    target = [float(v) if ratings else bool(v) for v in stream.y]
    for t in range(warmup):
        model.learn_one(rows[t], target[t])
    n = len(stream.y)
    pred = np.empty(n - warmup)
    start = time.perf_counter()
    for t in range(warmup, n, block):
        stop = min(n, t + block)
        for j in range(t, stop):
            pred[j - warmup] = model.predict_one(rows[j]) if ratings else model.predict_proba_one(rows[j])[True]
        for j in range(t, stop):
            model.learn_one(rows[j], target[j])
    return pred, None, time.perf_counter() - start


def tune_river(kind, n_users, n_items, n_events, warmup, block=1):
    """River's learning rate with the best score on a separate stream (seed :data:`TUNING_SEED`)."""
    stream = make_stream(kind, n_users, n_items, n_events, seed=TUNING_SEED)
    scores = {lr: score(stream, run_river(stream, warmup, lr, block=block)[0], warmup)[0] for lr in RIVER_RATES}
    return min(scores, key=scores.get), scores


def run_surprise(stream, split: int, seed: int = 0):
    """Batch SVD fitted on events ``[0, split)``; predictions for ``[split, n)``."""
    import pandas as pd
    from surprise import SVD, Dataset, Reader

    ratings = stream.kind == "ratings"
    frame = pd.DataFrame({"user": stream.user[:split], "item": stream.item[:split],
                          "y": stream.y[:split].astype(np.float64)})
    scale = (float(stream.y.min()) - 1, float(stream.y.max()) + 1) if ratings else (0.0, 1.0)
    data = Dataset.load_from_df(frame, Reader(rating_scale=scale))
    start = time.perf_counter()
    algo = SVD(n_factors=N_FACTORS, random_state=seed).fit(data.build_full_trainset())
    pred = np.array([algo.predict(u, i).est for u, i in zip(stream.user[split:], stream.item[split:])])
    return pred, None, time.perf_counter() - start


def run_global_mean(stream, warmup: int):
    y = stream.y.astype(np.float64)
    n = len(y)
    csum = np.cumsum(y)
    mean = csum[warmup - 1:n - 1] / np.arange(warmup, n)
    sq = np.cumsum((y - y[:warmup].mean()) ** 2)  # spread around the warm-up mean, past events only
    std = np.sqrt(sq[warmup - 1:n - 1] / np.arange(warmup, n))
    return mean, std, 0.0


# -- scores -------------------------------------------------------------------------------------------
def score(stream, pred, first: int, std=None):
    """``(RMSE or log-loss, coverage of ±2σ or None)`` of the predictions of events ``first…``."""
    y = stream.y[first:].astype(np.float64)
    pred = np.asarray(pred, dtype=np.float64)[-len(y):]
    if stream.kind == "ratings":
        value = float(np.sqrt(np.mean((y - pred) ** 2)))
    else:
        p = np.clip(pred, CLIP, 1 - CLIP)
        value = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    cover = None
    if std is not None and stream.kind == "ratings":
        s = np.asarray(std)[-len(y):]
        cover = float(np.mean(np.abs(y - pred) <= 2 * s))
    return value, cover


def oracle(stream, first):
    """The score of the true means (the noise floor)."""
    return score(stream, stream.mean[first:], first)[0]


def run(kinds=("ratings", "clicks"), n_users=200, n_items=100, n_events=10_000, warmup=200, seed=0, block=10,
        progress=print):
    """Every method on each stream kind; returns ``rows``."""
    rows = []
    half = n_events // 2
    for kind in kinds:
        stream = make_stream(kind, n_users, n_items, n_events, seed=seed)
        lr, grid = tune_river(kind, n_users, n_items, n_events, warmup, block)
        scored = n_events - warmup
        results = {
            "DEKF MF (FactorizationRegressor)" if kind == "ratings" else "DEKF MF (FactorizationClassifier)":
                run_skfilter(stream, "mf", warmup, seed, block),
            "DEKF FM (FactorizationRegressor)" if kind == "ratings" else "DEKF FM (FactorizationClassifier)":
                run_skfilter(stream, "fm", warmup, seed, block),
            f"river FM (SGD lr {lr:g})": run_river(stream, warmup, lr, seed, block),
            "global mean": run_global_mean(stream, warmup),
        }
        for name, (pred, std, sec) in results.items():
            all_value, cover = score(stream, pred, warmup, std)
            second, cover2 = score(stream, pred, half, std)
            rows.append({"stream": kind, "method": name, "all": all_value, "second": second,
                         "cover": cover2, "us": 1e6 * sec / scored if sec else None})
        pred, _, sec = run_surprise(stream, half, seed)
        rows.append({"stream": kind, "method": "surprise SVD (batch: fit on 1st half)",
                     "all": None, "second": score(stream, pred, half)[0], "cover": None,
                     "us": 1e6 * sec / half})
        rows.append({"stream": kind, "method": "true mean (noise floor)", "all": oracle(stream, warmup),
                     "second": oracle(stream, half), "cover": None, "us": None})
        if progress:
            progress(f"  {kind}: done (river lr grid " + ", ".join(f"{k:g} → {v:.4f}" for k, v in grid.items()) + ")")
    return rows


COLUMNS = [("stream", "stream", ""), ("method", "method", ""), ("all", "all scored events", ".4f"),
           ("second", "2nd half", ".4f"), ("cover", "±2σ coverage (2nd half)", ".3f"), ("us", "µs/event", ".0f")]


def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks factorization-peers``."""
    parser.add_argument("--users", type=positive_int, default=200)
    parser.add_argument("--items", type=positive_int, default=100)
    parser.add_argument("--events", type=positive_int, default=10_000)
    parser.add_argument("--warmup", type=positive_int, default=200, help="first events seen as a batch, unscored")
    parser.add_argument("--block", type=positive_int, default=10,
                        help="events predicted, then learned, together (1: strictly one-step-ahead)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke test: 30 users, 20 items, 600 events")
    parser.add_argument("--no-figure", action="store_true", help="(no figure: accepted for uniformity)")
    parser.add_argument("--out", type=Path, default=Path("doc"), help="folder of the table")


def main(args) -> int:
    """Run the peer comparison (module docstring)."""
    if args.quick:
        args.users, args.items, args.events, args.warmup = 30, 20, 600, 100
    start = time.perf_counter()
    rows = run(n_users=args.users, n_items=args.items, n_events=args.events, warmup=args.warmup, seed=args.seed,
               block=args.block)
    print(format_table(rows, COLUMNS))
    note = (f"\n\nRatings: one-step-ahead RMSE; clicks: log-loss. {args.users} users × {args.items} items, "
            f"{args.events} events, the first {args.warmup} seen as a batch (unscored); prequential scores over the "
            f"rest and over the second half, in blocks of {args.block} events (each block predicted, then learned: "
            f"``predict`` + ``partial_fit`` of {args.block} rows; river: ``predict_one`` then ``learn_one`` per "
            f"row). surprise's SVD is not online: fitted once on the first half and scored "
            f"on the second (its time: fit + predict per training event). Wall time "
            f"{time.perf_counter() - start:.0f} s.\n")
    cmd = "factorization-peers" + (" --quick" if args.quick else
                                   f" --users {args.users} --items {args.items} --events {args.events} "
                                   f"--warmup {args.warmup} --block {args.block} --seed {args.seed}")
    path = write_text(args.out / "factorization_peers_table.md", format_table(rows, COLUMNS, markdown=True) + note, cmd)
    print(f"  table written to {path}")
    return 0
