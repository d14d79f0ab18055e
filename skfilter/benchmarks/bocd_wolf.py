"""Heavy-tailed piecewise regression: WoLF inside BOCD (thesis §4.7.4; spec/wolf-subspace-pulse.md §4.4).

**Stream** (eq. 4.48)::

    x_t ~ U[−2, 2],  φ(x) = (1, x, x²),  y_t ~ Student-t(φ(x_t)ᵀ θ_t, scale 1, dof 2.01)
    θ_0 ~ U[−3, 3]³;  θ_t = θ_{t−1} w.p. 0.99,  θ_t ~ U[−3, 3]³ w.p. p_ε = 0.01

``T = --steps`` (default 500; the thesis does not give ``T``, its figure suggests a first
changepoint near step 100).

**Methods** (Table 3.4, the linear model ``h(θ, x) = θᵀφ(x)`` — skfilter's linear layer on ``(x, x²)``
with its bias as the constant feature, zero prior mean — ``R = 1``; the thesis gives neither the
prior nor ``π``: prior ``N(0, 3 I₃)``, the covariance of the jump law ``U[−3, 3]³``, and ``π = 0.01``,
the true jump rate):

* ``LG+C-Static`` — the Kalman filter (``EKFRegressor``, no dynamics, no changepoints);
* ``LG+RL[inf]-PR`` — exact BOCD: ``BOCDRegressor(base, n_hypotheses=None)`` (all run lengths kept);
* ``WoLF+RL[inf]-PR*`` — the same over ``WoLFRegressor(base, weighting='imq', threshold=4)``: every
  hypothesis learns with the IMQ-weighted likelihood (eq. 4.49, ``W = (1 + (y − ŷ)²/c²)^{−1/2}``,
  ``c = 4``). The thesis does not say which noise the run-length evidence ``p(y_t | r_t, …)`` uses
  (spec/wolf-subspace-pulse.md §6.19), so both rows: ``evidence='plain'`` — each hypothesis'
  predictive with ``R`` (eq. 3.51 unchanged) — and ``evidence='weighted'`` (the estimators'
  default) — with ``R / W²`` at the hypothesis' own residual, the predictive of WoLF's weighted
  likelihood, so that an outlier the weights discount is no evidence for a new regime.

**Metrics** over ``--runs`` streams (seeds ``0 …``): the RMSE of the one-step-ahead predictions
against the observed ``y`` over the whole stream ("final RMSE", thesis Fig. 4.10 right; mean, sd,
median), the same against the clean mean ``φ(x_t)ᵀθ_t`` (the Student-t noise with 2.01 degrees of
freedom has a variance of ~200, so the RMSE against ``y`` is dominated by a few huge draws), the
number of detected changepoints (steps after which the most probable run length is 0; the true
jumps alongside), and the rolling RMSE over the previous 10 observations (Fig. 4.10 left; median
over runs, figure ``--out``/img/bocd_wolf_rmse.png).

**Figure** ``--out``/img/bocd_runlength.png (Fig. 4.11): one stream (seed 0) learned by
``partial_fit`` one row at a time; after each row the estimator's ``run_lengths_`` and
``runlength_log_posterior_`` give the column ``log p(r_t | y_{1:t})`` of the heat-map, one panel per
run-length method, with the MAP run length and the true changepoints.

The thesis reports figures only: WoLF+RL[inf]-PR* has the lowest error; LG+RL[inf]-PR resets on
outliers (over-segments); LG+C-Static is good until the first changepoint, then bad.

Run as ``python -m skfilter.benchmarks bocd-wolf`` (30 runs: ~1 min on one thread); the table goes to
``--out``/bocd_wolf_table.md.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ._bocd_common import Stepper, bocd, describe, linear_regressor
from ._common import format_table, positive_int, save_figure, write_text

HELP = "BOCD/BONE: heavy-tailed piecewise regression, WoLF inside BOCD (thesis §4.7.4), run-length heat-map"

N_STEPS = 500
HAZARD = 0.01
PRIOR_VARIANCE = 3.0
IMQ_C = 4.0
DOF = 2.01
WINDOW = 10
METHODS = ("LG+C-Static", "LG+RL[inf]-PR", "WoLF+RL[inf]-PR* (evidence R)", "WoLF+RL[inf]-PR* (evidence R/W²)")


def make_stream(seed: int, n_steps: int = N_STEPS, p_jump: float = 0.01, dof: float = DOF):
    """``(x, y, clean_mean, jumps)``: inputs, targets, ``φ(x_t)ᵀθ_t`` and the steps where ``θ`` jumped."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2.0, 2.0, size=n_steps)
    theta = rng.uniform(-3.0, 3.0, size=3)
    mean, jumps = np.empty(n_steps), []
    for t in range(n_steps):
        if t > 0 and rng.uniform() < p_jump:
            theta = rng.uniform(-3.0, 3.0, size=3)
            jumps.append(t)
        mean[t] = theta[0] + theta[1] * x[t] + theta[2] * x[t] ** 2
    y = mean + rng.standard_t(dof, size=n_steps)
    return x, y, mean, np.array(jumps, dtype=int)


def features(x):
    """``(x, x²)``: with the model's intercept, ``φ(x) = (1, x, x²)``."""
    x = np.asarray(x, dtype=np.float64)
    return np.stack([x, x * x], axis=1)


def make(method: str, hazard: float = HAZARD, c: float = IMQ_C):
    """The estimator of ``method`` (module docstring)."""
    from .. import WoLFRegressor

    base = linear_regressor(2, prior_variance=PRIOR_VARIANCE, obs_variance=1.0)
    if method == "LG+C-Static":
        return base
    if method == "LG+RL[inf]-PR":
        return bocd(base, hazard, None, "prior")
    if method == "WoLF+RL[inf]-PR* (evidence R)":
        return bocd(WoLFRegressor(base, weighting="imq", threshold=c), hazard, None, "prior", evidence="plain")
    if method == "WoLF+RL[inf]-PR* (evidence R/W²)":
        return bocd(WoLFRegressor(base, weighting="imq", threshold=c), hazard, None, "prior", evidence="weighted")
    raise ValueError(f"unknown method {method!r}")


def rolling_rmse(err, window: int = WINDOW):
    """RMSE of the errors of the last ``window`` steps (fewer at the start), per step."""
    e2 = np.concatenate([[0.0], np.cumsum(np.asarray(err, dtype=np.float64) ** 2)])
    t = np.arange(1, len(err) + 1)
    lo = np.maximum(t - window, 0)
    return np.sqrt((e2[t] - e2[lo]) / (t - lo))


def run_one(est, x, y):
    """``(predictions, detected changepoints)`` of one stream, row by row (the mixture's mean)."""
    st = Stepper(est, features(x), y)
    pred = np.empty(len(y))
    detected = 0
    for i in range(len(y)):
        pred[i] = st.step(i)[0]
        if st.is_bocd and st.map_run_length == 0:
            detected += 1
    return pred, detected


def run(runs: int = 30, n_steps: int = N_STEPS, methods=METHODS, progress=print):
    """Rows (one per method) and the median rolling RMSE per method ``(T,)``."""
    streams = [make_stream(seed, n_steps) for seed in range(runs)]
    rows, rolling = [], {}
    for method in methods:
        t0 = time.perf_counter()
        rmse_y, rmse_mean, cps, roll = [], [], [], []
        for x, y, mean, _ in streams:
            pred, detected = run_one(make(method), x, y)
            rmse_y.append(float(np.sqrt(np.mean((pred - y) ** 2))))
            rmse_mean.append(float(np.sqrt(np.mean((pred - mean) ** 2))))
            cps.append(detected)
            roll.append(rolling_rmse(pred - y))
        rolling[method] = np.median(roll, axis=0)
        a, b, c = describe(rmse_y), describe(rmse_mean), describe(cps)
        rows.append({"method": method, "rmse": a["mean"], "rmse_sd": a["sd"], "rmse_median": a["median"],
                     "rmse_mean": b["mean"], "rmse_mean_median": b["median"],
                     "cp": c["mean"] if method != "LG+C-Static" else None,
                     "jumps": float(np.mean([len(s[3]) for s in streams])),
                     "us_step": 1e6 * (time.perf_counter() - t0) / (runs * n_steps)})
        if progress:
            progress(f"  wolf {method}: RMSE {a['mean']:.3f} (vs clean mean {b['mean']:.3f}), "
                     f"changepoints {c['mean']:.1f}")
    return rows, rolling


COLUMNS = [("method", "method", ""), ("rmse", "RMSE vs y (mean)", ".3f"), ("rmse_sd", "sd", ".3f"),
           ("rmse_median", "median", ".3f"), ("rmse_mean", "RMSE vs clean mean (mean)", ".3f"),
           ("rmse_mean_median", "median", ".3f"), ("cp", "detected changepoints", ".1f"),
           ("jumps", "true jumps", ".1f"), ("us_step", "µs/step", ".0f")]


def runlength_trace(method, x, y):
    """``(run_lengths, log_posteriors, map)`` after every row, collected from the estimator's
    ``run_lengths_``, ``runlength_log_posterior_`` and ``map_run_length_`` by ``partial_fit`` per row."""
    X = features(x)
    est = make(method)
    rls, lps, maps = [], [], []
    for i in range(len(y)):
        est.partial_fit(X[i:i + 1], y[i:i + 1])
        rls.append(est.run_lengths_)
        lps.append(est.runlength_log_posterior_)
        maps.append(est.map_run_length_)
    return rls, lps, np.array(maps)


def heatmap_matrix(rls, lps, floor: float = -20.0):
    """``M[r, t] = log p(r_t = r | y_{1:t})`` (``floor`` where the run length is not kept)."""
    T = len(rls)
    size = max(int(r.max()) for r in rls) + 1
    M = np.full((size, T), floor)
    for t, (r, lp) in enumerate(zip(rls, lps)):
        M[r, t] = np.maximum(lp, floor)
    seen = np.nonzero((M > floor).any(axis=1))[0]
    return M[: int(seen.max()) + 2] if seen.size else M  # rows above the last one with mass: cut


def plot_runlength(path, seed: int = 0, n_steps: int = N_STEPS) -> Path:
    """The run-length posterior heat-map (module docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, y, mean, jumps = make_stream(seed, n_steps)
    methods = METHODS[1:]
    fig = plt.figure(figsize=(8, 2.2 + 2.6 * len(methods)))
    grid = fig.add_gridspec(1 + len(methods), 2, width_ratios=[40, 1], height_ratios=[1] + [1.3] * len(methods))
    top = fig.add_subplot(grid[0, 0])
    axes = [top] + [fig.add_subplot(grid[i + 1, 0], sharex=top) for i in range(len(methods))]
    t = np.arange(n_steps)
    top.plot(t, y, ".", ms=2, color="0.4", label="y (Student-t, 2.01 dof)")
    top.plot(t, mean, "-", lw=1, color="C3", label="φ(x_t)ᵀθ_t")
    lim = np.percentile(np.abs(y), 98) * 1.5
    top.set_ylim(-lim, lim)
    top.legend(loc="upper right", fontsize=7)
    top.set_title(f"one stream (seed {seed}); dashed: true changepoints", fontsize=9)
    for i, (ax, method) in enumerate(zip(axes[1:], methods)):
        rls, lps, maps = runlength_trace(method, x, y)
        M = heatmap_matrix(rls, lps)
        im = ax.imshow(M, origin="lower", aspect="auto", cmap="viridis", vmin=-20, vmax=0,
                       extent=(-0.5, n_steps - 0.5, -0.5, M.shape[0] - 0.5), interpolation="nearest")
        ax.plot(t, maps, "-", color="white", lw=0.8)
        ax.set_ylabel("run length r")
        ax.set_title(f"{method}: log p(r_t | y_1:t) (white: MAP run length; {int(np.sum(maps == 0))} resets)",
                     fontsize=9)
        fig.colorbar(im, cax=fig.add_subplot(grid[i + 1, 1]))
    for ax in axes:
        for j in jumps:
            ax.axvline(j, color="C1", lw=0.8, ls="--")
    axes[-1].set_xlabel("step t")
    fig.tight_layout()
    return save_figure(fig, path)


def plot_rolling(rolling, path) -> Path:
    """Median rolling RMSE (window 10) over runs, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    for method, r in rolling.items():
        ax.plot(np.arange(len(r)), r, lw=1, label=method)
    ax.set_yscale("log")
    ax.set_xlabel("step t")
    ax.set_ylabel(f"rolling RMSE ({WINDOW} steps)")
    ax.set_title("rolling RMSE of the one-step predictions against y, median over runs", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks bocd-wolf``."""
    parser.add_argument("--runs", type=positive_int, default=30, help="streams per method")
    parser.add_argument("--steps", type=positive_int, default=N_STEPS, help="stream length T")
    parser.add_argument("--no-figure", action="store_true", help="skip the figures")
    parser.add_argument("--out", type=Path, default=Path("doc"), help="folder of the table (and img/ figures)")


def main(args) -> int:
    """Run the WoLF + BOCD benchmark (module docstring)."""
    rows, rolling = run(args.runs, args.steps)
    print(format_table(rows, COLUMNS))
    path = write_text(args.out / "bocd_wolf_table.md", format_table(rows, COLUMNS, markdown=True) + "\n",
                      f"bocd-wolf --runs {args.runs} --steps {args.steps}")
    print(f"  table written to {path}")
    if not args.no_figure:
        print(f"  figure written to {plot_runlength(args.out / 'img' / 'bocd_runlength.png', 0, args.steps)}")
        print(f"  figure written to {plot_rolling(rolling, args.out / 'img' / 'bocd_wolf_rmse.png')}")
    return 0
