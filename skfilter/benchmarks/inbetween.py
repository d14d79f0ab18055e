"""In-between uncertainty of HiLoFi and LRKF at several ranks (Duran-Martin et al. 2025, §5.1, Figs. 15, 17).

The paper fits a 4 × 128 ELU MLP in one pass to the 1-D data of van Amersfoort et al. (2021), whose
inputs form two clusters with a gap, and shows that HiLoFi's predictive becomes uncertain *between*
the clusters as the hidden rank grows, while LRKF needs a much larger rank (and about 3× more
covariance coefficients) for the same effect. Those data are not available here, so this benchmark
**simulates** them: ``--n`` inputs drawn uniformly from ``[−1.5, −0.5] ∪ [0.5, 1.5]`` (half each, in
random order), targets ``y = sin(2.5 x) + 0.5 x + N(0, 0.05²)``.

Settings: an ELU MLP with hidden widths ``--hidden`` (default 3 × 64, smaller than the paper's
4 × 128 so that every fit takes seconds on one core), the paper's ``q = 0`` and prior covariance
``0.5 I`` (``prior_variance=0.5``), ``init='random'``, a fixed observation variance ``0.05²``
(the paper sets ``R = 0``, which a filter with a Gaussian likelihood cannot; the bands plotted are the
**epistemic** part ``±2 √(J Σ Jᵀ)``, ``predict(..., include_noise=False)``, as the paper's).

Reported per fit: the number of covariance coefficients (HiLoFi ``D_l² + d_h D_h``, LRKF ``d P``),
the mean epistemic standard deviation in the gap ``|x| < 0.5`` and on the clusters, their ratio
(above 1: more uncertain between the clusters than on them), and the fit time. The figure
(``--out``/img/inbetween.png) has one panel per fit: data, predictive mean and ±2σ band.

Run as ``python -m skfilter.benchmarks inbetween`` (``--quick``: a small network, few rows and ranks).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ._common import format_table, int_at_least, limit_threads, save_figure, write_text

HELP = "in-between uncertainty of HiLoFi and LRKF at several ranks (Duran-Martin et al. 2025, §5.1): figure"

HIDDEN = (64, 64, 64)
HILOFI_RANKS = (1, 5, 20, 50)
LRKF_RANKS = (10, 50, 100, 200)
N_ROWS = 200
NOISE_STD = 0.05
COLUMNS = [("method", "method", ""), ("rank", "rank", ""), ("P", "P", ""),
           ("coefficients", "covariance coefficients", ","), ("gap_std", "gap std", ".3f"),
           ("cluster_std", "cluster std", ".3f"), ("ratio", "gap / cluster", ".2f"), ("seconds", "fit s", ".1f")]


def make_data(n: int = N_ROWS, seed: int = 0):
    """``(X (n, 1), y)``: the simulated in-between data (module docstring), in random order."""
    rng = np.random.default_rng(seed)
    side = np.where(rng.uniform(size=n) < 0.5, -1.0, 1.0)
    x = side * rng.uniform(0.5, 1.5, size=n)
    y = np.sin(2.5 * x) + 0.5 * x + NOISE_STD * rng.normal(size=n)
    return x[:, None], y


def make_filter(method: str, rank: int, hidden, seed: int = 0):
    """The estimator of one panel: the paper's settings (module docstring)."""
    from .. import HiLoFiRegressor, LRKFRegressor

    common = dict(hidden_layer_sizes=tuple(hidden), activation="elu", prior_variance=0.5, process_noise=0.0,
                  obs_variance=NOISE_STD ** 2, init="random", random_state=seed)
    if method == "HiLoFi":
        return HiLoFiRegressor(hidden_rank=rank, **common)
    return LRKFRegressor(rank=rank, **common)


def covariance_coefficients(est) -> int:
    """Numbers stored for the covariance: the sizes of the square-root factors (HiLoFi's Cholesky
    factor counted as ``D_l²``, as in the paper)."""
    return int(sum(f.numel() for f in est.posterior_.belief.factors))


def run(hidden=HIDDEN, hilofi_ranks=HILOFI_RANKS, lrkf_ranks=LRKF_RANKS, n=N_ROWS, seed=0, out=None,
        figure=True, progress=print) -> dict:
    """Fit every panel and summarise it (module docstring); returns ``rows``, ``fits``, ``text``,
    ``path`` (the table) and ``figure``."""
    X, y = make_data(n, seed)
    grid = np.linspace(-2.5, 2.5, 201)[:, None]
    gap = np.abs(grid[:, 0]) < 0.5
    cluster = (np.abs(grid[:, 0]) >= 0.5) & (np.abs(grid[:, 0]) <= 1.5)
    rows, fits = [], []
    with limit_threads(1):
        for method, ranks in (("HiLoFi", hilofi_ranks), ("LRKF", lrkf_ranks)):
            for rank in ranks:
                est = make_filter(method, rank, hidden, seed)
                t0 = time.perf_counter()
                est.fit(X, y)
                seconds = time.perf_counter() - t0
                mean, std = est.predict(grid, return_std=True, include_noise=False)
                row = {"method": method, "rank": int(rank), "P": int(est.n_params_),
                       "coefficients": covariance_coefficients(est),
                       "gap_std": float(std[gap].mean()), "cluster_std": float(std[cluster].mean()),
                       "seconds": seconds}
                row["ratio"] = row["gap_std"] / row["cluster_std"]
                rows.append(row)
                fits.append({"row": row, "mean": mean, "std": std})
                if progress is not None:
                    progress(f"  {method} rank {rank}: gap/cluster std {row['ratio']:.2f}, {seconds:.1f} s")
    header = (f"In-between uncertainty (simulated two-cluster 1-D data, n = {n}, one pass): ELU MLP "
              f"1-{'-'.join(map(str, hidden))}-1, q = 0, prior 0.5 I, R = {NOISE_STD}²; epistemic predictive "
              "std averaged over the gap |x| < 0.5 and over the clusters 0.5 ≤ |x| ≤ 1.5.")
    text = header + "\n\n" + format_table(rows, COLUMNS, markdown=True) + "\n"
    path = None
    if out is not None:
        args = f"inbetween --hidden {' '.join(map(str, hidden))} --n {n}"
        path = write_text(Path(out) / "inbetween_table.md", text, generated_by=args)
    fig_path = None
    if figure and out is not None:
        fig_path = plot(X, y, grid, fits, Path(out) / "img" / "inbetween.png")
    return {"rows": rows, "fits": fits, "text": text, "path": path, "figure": fig_path}


def plot(X, y, grid, fits, path) -> Path:
    """One panel per fit (HiLoFi on the first row, LRKF on the second): data, mean, ±2σ."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(f["row"]["method"] for f in fits))
    per_row = max(sum(f["row"]["method"] == m for f in fits) for m in methods)
    fig, axes = plt.subplots(len(methods), per_row, figsize=(3.2 * per_row, 2.8 * len(methods)), squeeze=False,
                             sharex=True, sharey=True)
    for i, m in enumerate(methods):
        panels = [f for f in fits if f["row"]["method"] == m]
        for j in range(per_row):
            ax = axes[i][j]
            if j >= len(panels):
                ax.axis("off")
                continue
            f = panels[j]
            ax.fill_between(grid[:, 0], f["mean"] - 2 * f["std"], f["mean"] + 2 * f["std"], color="tab:blue",
                            alpha=0.25, lw=0)
            ax.plot(grid[:, 0], f["mean"], c="tab:blue", lw=1.5)
            ax.scatter(X[:, 0], y, s=4, c="k", zorder=3)
            row = f["row"]
            ax.set_title(f"{m} rank {row['rank']} ({row['coefficients']:,} coef.)", fontsize=9)
            ax.set_ylim(-4, 4)
    fig.suptitle("Epistemic predictive mean ± 2σ after one pass (simulated in-between data)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks inbetween``."""
    parser.add_argument("--hidden", type=int_at_least(1), nargs="+", default=list(HIDDEN),
                        help="hidden widths of the ELU MLP")
    parser.add_argument("--hilofi-ranks", type=int_at_least(1), nargs="+", default=list(HILOFI_RANKS))
    parser.add_argument("--lrkf-ranks", type=int_at_least(1), nargs="+", default=list(LRKF_RANKS))
    parser.add_argument("--n", type=int_at_least(4), default=N_ROWS, help="rows of the stream")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a 2 × 16 network, 60 rows, two ranks each")
    parser.add_argument("--no-figure", action="store_true", help="skip the figure")
    parser.add_argument("--out", type=Path, default=Path("doc"),
                        help="folder of the Markdown table (inbetween_table.md) and of img/inbetween.png")


def main(args) -> int:
    """Run the benchmark and print the table."""
    if args.quick:
        args.hidden, args.hilofi_ranks, args.lrkf_ranks, args.n = [16, 16], [1, 10], [5, 50], 60
    res = run(tuple(args.hidden), tuple(args.hilofi_ranks), tuple(args.lrkf_ranks), args.n, args.seed,
              out=args.out, figure=not args.no_figure)
    print(format_table(res["rows"], COLUMNS))
    if res["path"] is not None:
        print(f"  table written to {res['path']}")
    if res["figure"] is not None:
        print(f"  figure written to {res['figure']}")
    return 0
