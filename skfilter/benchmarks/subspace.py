"""Subspace EKF, PULSE and LoFi on a CNN stream, and their memory against the full EKF (thesis §5.5).

Duran-Martin (2025), thesis §5.5, streams Fashion-MNIST through a LeNet-5 with an extra 20-unit
dense layer and compares the subspace EKF (Alg. 12), PULSE (Theorem 5.3) and LoFi over the
subspace dimension / rank ``d``. Fashion-MNIST cannot be downloaded here; this command runs the
same protocol on scikit-learn's ``load_digits`` (1,797 8×8 images, pixels / 16).

**Showdown** (``--suite showdown``). The images in a fixed random order
(``numpy.random.default_rng(seed)``) are cut into a **warm-up slice** (the first ``N_WARMUP`` = 300
images, used only by the warm-ups), a **tuning slice** (the next ``N_TUNE`` = 200, used only by the
hyper-parameter sweep) and the **stream** (the remaining 1,297), streamed for ``--passes`` passes,
each a fresh permutation, one row at a time and one-step-ahead (each row's class is predicted
before it is learned; :func:`skfilter.model_selection.prequential_predict`). The network is
:func:`make_cnn`, a LeNet-style CNN for 8×8 images (``P = 3,890``) whose initial weights are drawn
once with ``torch.manual_seed(seed)``. Two Adam warm-ups (:class:`skfilter.warmup.SubspaceWarmup`,
``max(dims)`` components, ``WARMUP_SETTINGS``) are fitted on the warm-up slice, one over all the
weights (subspace EKF) and one over the hidden layers (PULSE); with the same seed they follow the
same Adam trajectory, so every method starts from the same weights ``θ*``:
``SubspaceClassifier(n_components=d)``, ``PULSEClassifier(n_components=d)`` and
``LoFiClassifier(rank=d, module=<the warm-up network>)`` for ``d`` in ``--dims``, the full EKF once,
and the warm-up network alone (frozen) as a reference. Every filter gets the same isotropic prior
variance ``σ²`` (of ``z`` and of the weights: ``A`` has orthonormal columns, so ``Σ_z = σ² I``
is ``σ² I`` on the weights restricted to the subspace) and the same random-walk process noise
``q I`` on the coordinates it learns; ``(σ², q)`` is picked by :func:`tune` on the tuning slice
(never on the stream): the grid ``TUNE_GRID``, the subspace EKF, PULSE and LoFi at ``d = 25``,
the best mean one-step-ahead accuracy of the three over the second of two passes over the
tuning slice.

Reported: the EWMA (span 100) of the one-step-ahead accuracy along the stream (one panel per
method, one line per ``d``; thesis Figs. 5.1–5.3), and the misclassification rate of the one-step
predictions over the **last pass** against the run time (seconds of the whole prequential run;
Fig. 5.4). Table: method, ``d``, parameters learned (``n_params_``), misclassification on the last
pass and over all passes, seconds, ms per step.

**Scale** (``--suite scale``). MLPs 64-``h``-``h``-10 on the digits for ``h`` in ``--widths``:
the full EKF (``EKFClassifier(covariance='full')``), ``SubspaceClassifier(n_components=50)``,
``PULSEClassifier(n_components=50)`` and ``LoFiClassifier(rank=50)``, each ``partial_fit`` one
row at a time: ``SCALE_WARMUP_STEPS`` untimed rows, then the median over ``--scale-steps`` timed
rows (:func:`~skfilter.benchmarks._common.time_repeats`). Memory: :func:`state_bytes`, the bytes
of every tensor in ``filter_state_`` plus the subspace model's ``A`` and ``θ*``, and the growth of
the process's peak resident set over the estimator's life (``VmHWM`` after resetting it through
``/proc/self/clear_refs``; Linux only, else ``—``). Ratios against the full EKF of the same
network, measured in the same process.

Run as ``python -m skfilter.benchmarks subspace`` (about 18 minutes on one thread of a 2-core
machine); ``--quick`` is a smoke test (seconds). Table: ``--out``/subspace_table.md; figures:
``--out``/img/subspace_ewma.png, subspace_showdown.png, subspace_scale.png.
"""

from __future__ import annotations

import time
from pathlib import Path
from statistics import median

import numpy as np

from ._common import (current_load, format_table, load_warning, positive_int, save_figure, time_repeats,
                      write_text)

HELP = "subspace EKF, PULSE and LoFi over d on a digits CNN stream (thesis §5.5); memory/time vs the full EKF"

DIMS = (1, 5, 10, 25, 50, 70, 100)
N_WARMUP = 300
N_TUNE = 200
EWMA_SPAN = 100
#: the warm-ups' settings (Adam on the warm-up slice, an iterate stored after every optimiser step)
WARMUP_SETTINGS = {"n_epochs": 30, "batch_size": 32, "learning_rate": 1e-2, "store": "step"}
#: (prior variance σ², process noise q) candidates of :func:`tune`
TUNE_GRID = tuple((s2, q) for s2 in (1e-5, 1e-4, 1e-3, 1e-2, 1e-1) for q in (0.0, 1e-6, 1e-5))
#: used without tuning (``--quick``, ``--no-tune``)
DEFAULT_PRIOR_VARIANCE = 1e-3
DEFAULT_PROCESS_NOISE = 0.0
METHODS = ("Subspace EKF", "PULSE", "LoFi")
SCALE_WIDTHS = (16, 32, 48, 64, 80)
SCALE_RANK = 50
SCALE_WARMUP_STEPS = 20


# -- the network and the data -------------------------------------------------------------------
def make_cnn(seed: int = 0):
    """A LeNet-style CNN for 8×8 images taking ``(n, 64)`` rows (float64, ``P = 3,890``).

    ``Unflatten → Conv2d(1, 6, 3, padding=1) → ReLU → MaxPool2d(2) → Conv2d(6, 16, 3, padding=1) →
    ReLU → MaxPool2d(2) → Flatten (16·2·2 = 64) → Linear(64, 32) → ReLU → Linear(32, 20) → ReLU →
    Linear(20, 10)``: the thesis' extra 20-unit penultimate layer, 210 last-layer weights as there.
    An ``nn.Sequential`` ending in ``nn.Linear``, so PULSE finds its last layer."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Unflatten(1, (1, 8, 8)),
        nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 20), nn.ReLU(), nn.Linear(20, 10),
    ).double()


def make_mlp(width: int, seed: int = 0):
    """The scale suite's MLP 64-``width``-``width``-10 (ReLU, float64): ``P = w² + 76 w + 10``."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 10)).double()


def hidden_names(module):
    """Names of the learned parameters outside the last layer (PULSE's projected ones)."""
    from ..models import last_layer

    last = last_layer(module)
    return [n for n, p in module.named_parameters() if p.requires_grad and not n.startswith(last + ".")]


def load_split(seed: int = 0, n_warmup: int = N_WARMUP, n_tune: int = N_TUNE, n_stream=None):
    """Digits (pixels / 16) in the order of ``default_rng(seed)``: warm-up, tuning and stream slices.

    Returns
    -------
    dict
        ``warmup``, ``tune``, ``stream``: ``(X, y)`` pairs (the stream cut to ``n_stream`` rows
        when given)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.target))
    X, y = digits.data[order] / 16.0, digits.target[order]
    a, b = n_warmup, n_warmup + n_tune
    end = None if n_stream is None else b + int(n_stream)
    return {"warmup": (X[:a], y[:a]), "tune": (X[a:b], y[a:b]), "stream": (X[b:end], y[b:end])}


def passes_order(n_rows: int, passes: int, seed: int):
    """``passes`` fresh permutations of ``range(n_rows)``, concatenated."""
    rng = np.random.default_rng(seed + 1)
    return np.concatenate([rng.permutation(n_rows) for _ in range(passes)])


def fit_warmups(module, X, y, n_components: int, seed: int = 0, **settings):
    """The two warm-ups on ``(X, y)``: over all the weights, and over the hidden layers (PULSE)."""
    from ..warmup import SubspaceWarmup

    kw = {**WARMUP_SETTINGS, **settings}
    full = SubspaceWarmup(n_components=n_components, random_state=seed, **kw).fit(
        X, y, module=module, loss="cross-entropy")
    hidden = SubspaceWarmup(n_components=n_components, random_state=seed, **kw).fit(
        X, y, module=module, loss="cross-entropy", parameters=hidden_names(module))
    return full, hidden


def make_filter(method: str, d: int, warm, warm_hidden, prior_variance: float, process_noise: float, seed: int = 0):
    """One estimator of the showdown, starting from the warm-up's weights."""
    from .. import EKFClassifier, LoFiClassifier, PULSEClassifier, SubspaceClassifier

    common = {"prior_variance": prior_variance, "process_noise": process_noise, "random_state": seed}
    if method == "Subspace EKF":
        return SubspaceClassifier(n_components=d, warmup=warm, **common)
    if method == "PULSE":
        return PULSEClassifier(n_components=d, warmup=warm_hidden, **common)
    if method == "LoFi":
        return LoFiClassifier(rank=d, module=warm.module_, **common)
    if method == "Full EKF":
        return EKFClassifier(covariance="full", module=warm.module_, **common)
    raise ValueError(f"unknown method {method!r}")


def prequential_correct(est, X, y):
    """One-step-ahead correctness (bool per row) and the seconds of the whole prequential run."""
    from ..model_selection import prequential_predict

    t0 = time.perf_counter()
    proba = prequential_predict(est, X, y, method="predict_proba", classes=np.arange(10))
    seconds = time.perf_counter() - t0
    return np.argmax(proba, axis=1) == y, seconds


def frozen_correct(module, X, y):
    """Correctness of the warm-up network alone (no filtering)."""
    import torch

    with torch.no_grad():
        logits = module(torch.as_tensor(X, dtype=torch.float64))
    return logits.argmax(1).numpy() == y


def ewma(values, span: int = EWMA_SPAN):
    """Exponentially weighted moving average (``pandas.Series.ewm(span=span)``)."""
    import pandas as pd

    return pd.Series(np.asarray(values, dtype=np.float64)).ewm(span=span).mean().to_numpy()


# -- tuning ---------------------------------------------------------------------------------------
def tune(warm, warm_hidden, X, y, d: int = 25, passes: int = 2, grid=TUNE_GRID, seed: int = 0, progress=print):
    """``(σ², q)`` of ``grid`` with the best mean one-step-ahead accuracy of the subspace EKF, PULSE and
    LoFi at ``d`` over the **last** of ``passes`` passes over the tuning slice ``(X, y)`` (the
    criterion of the reported metric, the last pass's misclassification). Returns ``(best, rows)``."""
    order = passes_order(len(y), passes, seed + 100)
    Xs, ys = X[order], y[order]
    last = slice(len(ys) - len(y), len(ys))
    rows = []
    for s2, q in grid:
        accs = {}
        for method in METHODS:
            try:
                correct, _ = prequential_correct(make_filter(method, d, warm, warm_hidden, s2, q, seed), Xs, ys)
                accs[method] = float(np.mean(correct[last]))
            except Exception as exc:  # noqa: BLE001 - a diverging setting is reported, not fatal
                accs[method] = float("nan")
                if progress:
                    progress(f"    σ²={s2:g} q={q:g} {method}: {type(exc).__name__}: {exc}")
        mean = float(np.mean(list(accs.values())))
        rows.append({"prior_variance": s2, "process_noise": q, **accs, "mean": mean})
        if progress:
            progress(f"  tune σ²={s2:<6g} q={q:<6g} " + "  ".join(f"{m} {a:.3f}" for m, a in accs.items())
                     + f"  mean {mean:.3f}")
    valid = [r for r in rows if np.isfinite(r["mean"])]
    best = max(valid, key=lambda r: r["mean"])
    return (best["prior_variance"], best["process_noise"]), rows


# -- the showdown -----------------------------------------------------------------------------------
def run_showdown(dims=DIMS, passes: int = 3, seed: int = 0, full_ekf: bool = True, do_tune: bool = True,
                 n_stream=None, warmup_settings=None, progress=print):
    """The §5.5 protocol on digits (module docstring). Returns a dict with ``rows``, ``curves``
    (label -> correctness along the stream), ``tuning`` rows, the chosen ``prior_variance`` and
    ``process_noise``, ``n_stream``, ``steps``, ``warmup_seconds``."""
    data = load_split(seed, n_stream=n_stream)
    (Xw, yw), (Xt, yt), (Xs, ys) = data["warmup"], data["tune"], data["stream"]
    d_max = max(dims)
    t0 = time.perf_counter()
    warm, warm_hidden = fit_warmups(make_cnn(seed), Xw, yw, d_max, seed, **(warmup_settings or {}))
    warmup_seconds = time.perf_counter() - t0
    if progress:
        progress(f"  warm-ups: {warmup_seconds:.1f} s, {warm.n_iterates_} iterates, last epoch loss "
                 f"{warm.loss_curve_[-1]:.3f}")
    tuning = []
    if do_tune:
        (s2, q), tuning = tune(warm, warm_hidden, Xt, yt, d=min(25, d_max), seed=seed, progress=progress)
    else:
        s2, q = DEFAULT_PRIOR_VARIANCE, DEFAULT_PROCESS_NOISE
    if progress:
        progress(f"  prior variance σ² = {s2:g}, process noise q = {q:g}")
    order = passes_order(len(ys), passes, seed)
    X, y = Xs[order], ys[order]
    last = slice(len(y) - len(ys), len(y))  # the last pass
    rows, curves = [], {}

    def record(method, d, n_params, correct, seconds):
        curves[(method, d)] = correct
        rows.append({"method": method, "d": d, "n_params": n_params, "err_last": 1 - float(np.mean(correct[last])),
                     "err_all": 1 - float(np.mean(correct)), "seconds": seconds,
                     "ms_step": None if seconds is None else 1e3 * seconds / len(y)})
        if progress:
            progress(f"  {method:<13} d={'—' if d is None else d:<4} P={n_params:<6} err(last pass) "
                     f"{rows[-1]['err_last']:.4f}  {'' if seconds is None else f'{seconds:7.1f} s'}")

    n_all = int(warm.offset_.shape[0])
    record("Warm-up only", None, 0, frozen_correct(warm.module_, X, y), None)
    for method in METHODS:
        for d in dims:
            est = make_filter(method, d, warm, warm_hidden, s2, q, seed)
            correct, seconds = prequential_correct(est, X, y)
            record(method, d, int(est.n_params_), correct, seconds)
    if full_ekf:
        est = make_filter("Full EKF", None, warm, warm_hidden, s2, q, seed)
        correct, seconds = prequential_correct(est, X, y)
        record("Full EKF", None, int(est.n_params_), correct, seconds)
    return {"rows": rows, "curves": curves, "tuning": tuning, "prior_variance": s2, "process_noise": q,
            "n_stream": len(ys), "steps": len(y), "passes": passes, "warmup_seconds": warmup_seconds,
            "n_cnn": n_all, "n_last": n_all - int(warm_hidden.positions_.shape[0])}


# -- memory ------------------------------------------------------------------------------------------
def _tensors(value, out):
    import torch

    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _tensors(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _tensors(v, out)
    return out


def tensor_bytes(value) -> int:
    """Bytes of the distinct tensors in ``value`` (a tensor or nested tuples / NamedTuples / lists /
    dicts of them; other leaves count 0): ``numel × element_size`` of each, a tensor met twice
    (same data pointer, shape and strides) counted once."""
    seen, total = set(), 0
    for t in _tensors(value, []):
        key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


def state_bytes(est) -> dict:
    """Memory of a fitted filter's state: ``belief`` (the tensors of ``filter_state_``: belief and
    noise state), ``subspace`` (the subspace model's ``A`` and ``θ*``, 0 for the other filters) and
    ``total``."""
    belief = tensor_bytes(tuple(est.filter_state_))
    adapter = getattr(est, "_adapter", None)
    sub = tensor_bytes([getattr(adapter, "components", None), getattr(adapter, "offset", None)])
    return {"belief": belief, "subspace": sub, "total": belief + sub}


def _peak_rss_reset() -> int | None:
    """Reset the process's peak RSS (``VmHWM``) to the current RSS; return the RSS in bytes (None off Linux)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return _proc_status("VmRSS")
    except OSError:
        return None


def _proc_status(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# -- the scale suite --------------------------------------------------------------------------------
def scale_filters(module, warm, warm_hidden, rank: int = SCALE_RANK, seed: int = 0):
    """The scale suite's estimators of one network (label -> estimator)."""
    from .. import EKFClassifier, LoFiClassifier, PULSEClassifier, SubspaceClassifier

    common = {"prior_variance": DEFAULT_PRIOR_VARIANCE, "random_state": seed}
    return {
        "Full EKF": EKFClassifier(covariance="full", module=warm.module_, **common),
        f"Subspace EKF (d={rank})": SubspaceClassifier(n_components=rank, warmup=warm, **common),
        f"PULSE (d={rank})": PULSEClassifier(n_components=rank, warmup=warm_hidden, **common),
        f"LoFi (rank {rank})": LoFiClassifier(rank=rank, module=warm.module_, **common),
    }


def run_scale(widths=SCALE_WIDTHS, steps: int = 200, rank: int = SCALE_RANK, seed: int = 0,
              warm_steps: int = SCALE_WARMUP_STEPS, progress=print):
    """Time per ``partial_fit`` row and state memory of each filter of :func:`scale_filters` for the
    MLP 64-w-w-10, ``w`` in ``widths``. Returns rows."""
    data = load_split(seed)
    (Xw, yw), (Xs, ys) = data["warmup"], data["stream"]
    classes = np.arange(10)
    rows = []
    for width in widths:
        module = make_mlp(width, seed)
        warm, warm_hidden = fit_warmups(module, Xw, yw, rank, seed, n_epochs=max(10, -(-rank // 10) + 1))
        ekf = None
        for label, est in scale_filters(module, warm, warm_hidden, rank, seed).items():
            rss0 = _peak_rss_reset()
            i = [0]

            def step(est=est, i=i):
                k = i[0] % len(ys)
                est.partial_fit(Xs[k:k + 1], ys[k:k + 1], classes=classes)
                i[0] += 1

            times = time_repeats(step, repeats=steps, warmup=warm_steps)
            peak = _proc_status("VmHWM")
            mem = state_bytes(est)
            row = {"width": width, "P": int(warm.offset_.shape[0]), "method": label, "n_params": int(est.n_params_),
                   "ms_step": 1e3 * median(times), "state_mb": mem["total"] / 2**20,
                   "belief_mb": mem["belief"] / 2**20, "subspace_mb": mem["subspace"] / 2**20,
                   "rss_mb": None if rss0 is None or peak is None else (peak - rss0) / 2**20}
            if label == "Full EKF":
                ekf = row
            row["time_ratio"] = row["ms_step"] / ekf["ms_step"]
            row["mem_ratio"] = row["state_mb"] / ekf["state_mb"]
            rows.append(row)
            del est
            if progress:
                progress(f"  P={row['P']:<6} {label:<24} {row['ms_step']:9.3f} ms/step  "
                         f"state {row['state_mb']:9.3f} MiB"
                         f"  ({row['time_ratio']:.3f}× time, {row['mem_ratio']:.4f}× memory of the full EKF)")
    return rows


# -- tables and figures -----------------------------------------------------------------------------
SHOWDOWN_COLUMNS = [("method", "method", ""), ("d", "d", ""), ("n_params", "parameters learned", ","),
                    ("err_last", "misclassification (last pass)", ".4f"),
                    ("err_all", "misclassification (all passes)", ".4f"), ("seconds", "seconds", ".1f"),
                    ("ms_step", "ms / step", ".2f")]
SCALE_COLUMNS = [("P", "P (network)", ","), ("method", "method", ""), ("n_params", "learned", ","),
                 ("ms_step", "ms / step (median)", ".3f"), ("time_ratio", "time / full EKF", ".3f"),
                 ("state_mb", "state MiB", ".3f"), ("subspace_mb", "of which A, θ* MiB", ".3f"),
                 ("mem_ratio", "memory / full EKF", ".4f"), ("rss_mb", "peak RSS growth MiB", ".1f")]
TUNE_COLUMNS = [("prior_variance", "σ²", "g"), ("process_noise", "q", "g")] + [
    (m, f"{m} accuracy", ".3f") for m in METHODS] + [("mean", "mean", ".3f")]


def plot_ewma(result, path) -> Path:
    """EWMA (span 100) of the one-step-ahead accuracy, one panel per method, one line per ``d``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = result["curves"]
    dims = sorted({d for (m, d) in curves if m in METHODS})
    cmap = plt.get_cmap("viridis")
    colours = {d: cmap(i / max(1, len(dims) - 1)) for i, d in enumerate(dims)}
    fig, axes = plt.subplots(1, len(METHODS), figsize=(13, 3.8), sharey=True)
    steps = np.arange(1, result["steps"] + 1)
    for ax, method in zip(axes, METHODS):
        for d in dims:
            if (method, d) in curves:
                ax.plot(steps, ewma(curves[(method, d)]), color=colours[d], lw=1, label=f"d = {d}")
        ax.plot(steps, ewma(curves[("Warm-up only", None)]), color="gray", ls="--", lw=1, label="warm-up only")
        if ("Full EKF", None) in curves:
            ax.plot(steps, ewma(curves[("Full EKF", None)]), color="black", ls=":", lw=1, label="full EKF")
        for p in range(1, result["passes"]):
            ax.axvline(p * result["n_stream"], color="lightgray", lw=0.8)
        ax.set_title(method)
        ax.set_xlabel("step (grey lines: passes)")
        ax.set_ylim(0.5, 1.005)
    axes[0].set_ylabel(f"EWMA (span {EWMA_SPAN}) of one-step accuracy")
    axes[-1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return save_figure(fig, path)


def plot_showdown(rows, path) -> Path:
    """Misclassification on the last pass against seconds: a marker per (method, d), a line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, method in enumerate(METHODS):
        sel = sorted((r for r in rows if r["method"] == method), key=lambda r: r["d"])
        colour = plt.get_cmap("tab10")(i)
        ax.plot([r["seconds"] for r in sel], [r["err_last"] for r in sel], "-o", color=colour, label=method, ms=4)
        for r in sel:
            ax.annotate(str(r["d"]), (r["seconds"], r["err_last"]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points", color=colour)
    for r in rows:
        if r["method"] == "Full EKF":
            ax.plot([r["seconds"]], [r["err_last"]], "k*", ms=10, label="full EKF")
        if r["method"] == "Warm-up only":
            ax.axhline(r["err_last"], color="gray", ls="--", lw=1, label="warm-up only")
    ax.set_ylim(0, 1.15 * max(r["err_last"] for r in rows))  # chance (0.9) is far above every method
    ax.set_xscale("log")
    ax.set_xlabel("run time of the stream (s, log scale)")
    ax.set_ylabel("misclassification, last pass (chance: 0.9)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_scale(rows, path) -> Path:
    """Time per step and state memory against ``P`` (log-log), a line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, method in enumerate(dict.fromkeys(r["method"] for r in rows)):
        sel = [r for r in rows if r["method"] == method]
        colour = "black" if method == "Full EKF" else plt.get_cmap("tab10")(i - 1)
        axes[0].plot([r["P"] for r in sel], [r["ms_step"] for r in sel], "-o", color=colour, label=method, ms=4)
        axes[1].plot([r["P"] for r in sel], [r["state_mb"] for r in sel], "-o", color=colour, label=method, ms=4)
    for ax, label in zip(axes, ("ms per step (median)", "state memory (MiB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("P, parameters of the MLP 64-w-w-10")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


# -- command ----------------------------------------------------------------------------------------
def add_arguments(parser) -> None:
    """Command-line options of ``python -m skfilter.benchmarks subspace``."""
    parser.add_argument("--suite", choices=("all", "showdown", "scale"), default="all",
                        help="the §5.5 showdown, the memory/time scale suite, or both")
    parser.add_argument("--dims", type=positive_int, nargs="+", default=list(DIMS),
                        help="subspace dimensions / LoFi ranks d")
    parser.add_argument("--passes", type=positive_int, default=3, help="passes over the stream (fresh order each)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the split, the network and the orders")
    parser.add_argument("--no-full-ekf", action="store_true", help="skip the full EKF in the showdown")
    parser.add_argument("--no-tune", action="store_true",
                        help=f"skip the (σ², q) sweep: σ² = {DEFAULT_PRIOR_VARIANCE:g}, "
                             f"q = {DEFAULT_PROCESS_NOISE:g}")
    parser.add_argument("--widths", type=positive_int, nargs="+", default=list(SCALE_WIDTHS),
                        help="hidden widths w of the scale suite's MLPs 64-w-w-10")
    parser.add_argument("--scale-steps", type=positive_int, default=200, help="timed rows per filter (scale)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: d in {1, 5}, one pass over 120 rows, no tuning, two small MLPs")
    parser.add_argument("--no-figure", action="store_true", help="skip the figures")
    parser.add_argument("--out", type=Path, default=Path("doc"), help="folder of the table (and img/ figures)")


def main(args) -> int:
    """Run the benchmark (module docstring)."""
    load = current_load()
    t_start = time.perf_counter()
    quick = args.quick
    dims = (1, 5) if quick else tuple(args.dims)
    passes = 1 if quick else args.passes
    widths = (8, 16) if quick else tuple(args.widths)
    scale_steps = 10 if quick else args.scale_steps
    parts = []
    show = scale = None
    if args.suite in ("all", "showdown"):
        print("showdown")
        show = run_showdown(dims, passes, args.seed, full_ekf=not args.no_full_ekf and not quick,
                            do_tune=not (args.no_tune or quick), n_stream=120 if quick else None,
                            warmup_settings={"n_epochs": 2} if quick else None)
        print(format_table(show["rows"], SHOWDOWN_COLUMNS))
        text = (f"## Showdown: one-step-ahead classification of a digits stream (thesis §5.5)\n\n"
                + format_table(show["rows"], SHOWDOWN_COLUMNS, markdown=True)
                + f"\n\nCNN of `P = {show['n_cnn']:,}` weights (last layer {show['n_last']}); stream of "
                f"{show['n_stream']:,} digits × {show['passes']} pass(es) = {show['steps']:,} one-step-ahead "
                f"predictions; misclassification on the last pass ({show['n_stream']:,} steps) and over all. "
                f"Warm-ups on {N_WARMUP} separate digits ({show['warmup_seconds']:.1f} s, not in the seconds). "
                f"Prior variance σ² = {show['prior_variance']:g}, process noise q = {show['process_noise']:g} "
                f"for every filter. Seconds: the whole prequential run (predict + update), one thread.\n")
        if show["tuning"]:
            text += (f"\n### Tuning of (σ², q) on the {N_TUNE} tuning digits (d = 25; accuracy on the second of 2 "
                     "passes)\n\n"
                     + format_table(show["tuning"], TUNE_COLUMNS, markdown=True) + "\n")
        parts.append(text)
    if args.suite in ("all", "scale"):
        print("scale")
        scale = run_scale(widths, scale_steps, rank=5 if quick else SCALE_RANK, seed=args.seed,
                          warm_steps=2 if quick else SCALE_WARMUP_STEPS)
        print(format_table(scale, SCALE_COLUMNS))
        rank = 5 if quick else SCALE_RANK
        parts.append(f"## Memory and time per step against the full EKF (MLP 64-w-w-10)\n\n"
                     + format_table(scale, SCALE_COLUMNS, markdown=True)
                     + f"\n\n`partial_fit` one row at a time: median of {scale_steps} timed rows after "
                     f"{2 if quick else SCALE_WARMUP_STEPS} untimed ones; d = rank = {rank}; σ² = "
                     f"{DEFAULT_PRIOR_VARIANCE:g}, q = 0. State: the tensors of `filter_state_` plus the subspace "
                     "model's A and θ* (float64). Peak RSS growth: rise of the process's peak resident set over "
                     "the estimator's life (reset before each).\n")
    total = time.perf_counter() - t_start
    warning = load_warning(load)
    if warning:
        print(warning)
    footer = f"\nTotal run time of the command: {total:.0f} s.\n" + (f"\n{warning}\n" if warning else "")
    options = (f"subspace --suite {args.suite} --passes {args.passes} --dims {' '.join(map(str, args.dims))} "
               f"--widths {' '.join(map(str, args.widths))} --scale-steps {args.scale_steps} --seed {args.seed}"
               + (" --no-full-ekf" if args.no_full_ekf else "") + (" --no-tune" if args.no_tune else "")
               + (" --quick" if quick else "")
               + f"; 1-min load average before the run: {'n/a' if load is None else f'{load:.1f}'}")
    path = write_text(args.out / "subspace_table.md", "\n".join(parts) + footer, options)
    print(f"  table written to {path} ({total:.0f} s)")
    if not args.no_figure:
        img = args.out / "img"
        if show is not None:
            print(f"  figure written to {plot_ewma(show, img / 'subspace_ewma.png')}")
            print(f"  figure written to {plot_showdown(show['rows'], img / 'subspace_showdown.png')}")
        if scale is not None:
            print(f"  figure written to {plot_scale(scale, img / 'subspace_scale.png')}")
    return 0
