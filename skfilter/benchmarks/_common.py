"""Helpers shared by the benchmark commands: data streams, scores, timing, tables."""

from __future__ import annotations

import contextlib
import csv
import math
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

#: fraction of the stream whose statistics standardise it (the warm-up prefix)
WARMUP_FRACTION = 0.1
#: fewest rows in the warm-up prefix (short streams)
MIN_WARMUP = 10


# -- data ---------------------------------------------------------------------------------------
def load_stream(name: str = "concrete", n_rows=None, seed: int = 0, warmup_fraction: float = WARMUP_FRACTION,
                data_home=None) -> Bunch:
    """A UCI regression set as a stream: rows in a fixed shuffled order, standardised on a prefix.

    The rows of the whole data set (no train/test split) are permuted with
    ``numpy.random.default_rng(seed)``, then cut to the first ``n_rows``. ``X`` and ``y`` are
    standardised with the mean and standard deviation of the **warm-up prefix**: the first
    ``max(MIN_WARMUP, ceil(warmup_fraction · n))`` rows of the stream. No statistic of a later row
    is used, so the one-step-ahead scores after the prefix involve no look-ahead; inside the prefix
    only these two moments are shared (the usual convention of the UCI benchmarks standardises with
    the whole training set instead).

    Parameters
    ----------
    name : str, default='concrete'
        Dataset name for :func:`skfilter.datasets.load_uci` (``'concrete'`` is bundled).
    n_rows : int or None, default=None
        Keep only the first ``n_rows`` rows of the shuffled stream (all when None).
    seed : int, default=0
        Seed of the row permutation.
    warmup_fraction : float, default=0.1
        Fraction of the stream used to compute the standardisation statistics.
    data_home : path-like, optional
        Passed to :func:`~skfilter.datasets.load_uci`.

    Returns
    -------
    Bunch
        ``X``, ``y`` (standardised, float64), ``X_raw``, ``y_raw`` (original units), ``x_mean``,
        ``x_scale``, ``y_mean``, ``y_scale``, ``n_warmup``, ``order`` (the permutation), ``name``.
    """
    from ..datasets import load_uci

    ds = load_uci(name, data_home=data_home)
    order = np.random.default_rng(seed).permutation(ds.data.shape[0])
    if n_rows is not None:
        if int(n_rows) < 2:
            raise ValueError(f"n_rows must be at least 2, got {n_rows!r}.")
        order = order[: int(n_rows)]
    X_raw, y_raw = ds.data[order], ds.target[order]
    n = len(y_raw)
    n_warmup = min(n, max(MIN_WARMUP, math.ceil(warmup_fraction * n)))
    x_mean, x_scale = X_raw[:n_warmup].mean(0), _scale(X_raw[:n_warmup].std(0))
    y_mean, y_scale = float(y_raw[:n_warmup].mean()), float(_scale(y_raw[:n_warmup].std()))
    return Bunch(
        X=(X_raw - x_mean) / x_scale, y=(y_raw - y_mean) / y_scale, X_raw=X_raw, y_raw=y_raw,
        x_mean=x_mean, x_scale=x_scale, y_mean=y_mean, y_scale=y_scale, n_warmup=n_warmup,
        order=order, name=name,
    )


def _scale(std):
    """Standard deviations with zeros (constant columns) replaced by one."""
    std = np.asarray(std, dtype=np.float64)
    return np.where(std > 0, std, 1.0)


# -- scores -------------------------------------------------------------------------------------
def gaussian_nlpd(y, mean, std):
    """Negative log predictive density of ``y`` under ``N(mean, std²)``, per row.

    Parameters
    ----------
    y, mean, std : array-like of shape (n,)

    Returns
    -------
    ndarray of shape (n,)
        ``½ log(2π std²) + ½ ((y − mean) / std)²`` (nats); :func:`skfilter.metrics.gaussian_nlpd`
        (the one implementation, used here) is their mean.
    """
    from ..metrics import _gaussian_nlpd_terms

    return _gaussian_nlpd_terms(y, mean, std)


def running_rmse(errors):
    """RMSE of the first ``t + 1`` errors, for every ``t``.

    Parameters
    ----------
    errors : array-like of shape (n,)

    Returns
    -------
    ndarray of shape (n,)
    """
    e2 = np.asarray(errors, dtype=np.float64) ** 2
    return np.sqrt(np.cumsum(e2) / np.arange(1, len(e2) + 1))


def running_residual_std(errors, prior_variance: float = 1.0):
    """Plug-in predictive std from the one-step errors seen **before** each row.

    ``σ²_t = (prior_variance + Σ_{s<t} e_s²) / (1 + t)``: the mean square of the past errors, shrunk
    towards ``prior_variance`` by one pseudo-observation (so the first row gets ``prior_variance``).
    Used to score baselines that give no predictive variance.

    Parameters
    ----------
    errors : array-like of shape (n,)
        One-step-ahead errors ``y_t − ŷ_t``.
    prior_variance : float, default=1.0

    Returns
    -------
    ndarray of shape (n,)
    """
    e2 = np.asarray(errors, dtype=np.float64) ** 2
    past = np.concatenate([[0.0], np.cumsum(e2)[:-1]])
    return np.sqrt((prior_variance + past) / np.arange(1, len(e2) + 1))


# -- timing -------------------------------------------------------------------------------------
#: default torch intra-op threads of the benchmark commands (see :func:`set_threads`)
DEFAULT_THREADS = 1


def set_threads(n_threads):
    """Set torch's intra-op thread count; ``None`` or ``0`` leaves torch's default. Returns the count in force.

    The commands default to :data:`DEFAULT_THREADS` = 1: at ``P = 501`` a filter step is a chain of small
    kernels that gain nothing from a second thread (measured: full covariance 245 µs/step with one or
    two threads on an idle 2-core machine), while multi-threaded BLAS calls with several columns stall
    for milliseconds whenever another process holds one of the cores, which makes timings on a shared
    machine erratic.
    """
    import torch

    if n_threads:
        torch.set_num_threads(int(n_threads))
    return torch.get_num_threads()


@contextlib.contextmanager
def torch_threads(n_threads):
    """Context manager: :func:`set_threads` inside, torch's previous thread count restored after."""
    import torch

    before = torch.get_num_threads()
    try:
        yield set_threads(n_threads)
    finally:
        torch.set_num_threads(before)


def synchronize(device) -> None:
    """Wait for queued work on ``device`` (a no-op on the CPU)."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_repeats(fn, repeats: int = 5, warmup: int = 1, device="cpu"):
    """Wall-clock seconds of ``fn()`` over ``repeats`` runs, after ``warmup`` untimed runs.

    Parameters
    ----------
    fn : callable
        Called with no argument.
    repeats : int, default=5
    warmup : int, default=1
    device : str or torch.device, default='cpu'
        Synchronised before and after each timed run.

    Returns
    -------
    list of float
        One duration per repeat (use :func:`statistics.median`).
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return times


def resource_usage() -> dict:
    """CPU times, page faults and peak memory of this process so far (the counters of
    :func:`resource.getrusage`; CPU times from :func:`os.times` and fault counts ``None`` where the
    platform has no :mod:`resource` module, e.g. Windows).

    Returns
    -------
    dict
        ``user_s``, ``system_s`` (CPU seconds, all threads), ``minflt``, ``majflt`` (minor and major
        page faults), ``maxrss_mb`` (peak resident set size in MiB).
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        t = os.times()
        return {"user_s": t.user, "system_s": t.system, "minflt": None, "majflt": None, "maxrss_mb": None}
    ru = resource.getrusage(resource.RUSAGE_SELF)
    # ru_maxrss is in KiB on Linux, in bytes on macOS
    scale = 1 / 2**20 if platform.system() == "Darwin" else 1 / 2**10
    return {"user_s": ru.ru_utime, "system_s": ru.ru_stime, "minflt": ru.ru_minflt, "majflt": ru.ru_majflt,
            "maxrss_mb": ru.ru_maxrss * scale}


def usage_delta(before: dict, after: dict) -> dict:
    """Difference of two :func:`resource_usage` snapshots (``None`` where either is ``None``);
    ``maxrss_mb`` becomes ``maxrss_growth_mb``, the rise of the peak resident set size."""
    out = {}
    for key in ("user_s", "system_s", "minflt", "majflt", "maxrss_mb"):
        a, b = before.get(key), after.get(key)
        out["maxrss_growth_mb" if key == "maxrss_mb" else key] = None if a is None or b is None else b - a
    return out


def time_repeats_usage(fn, repeats: int = 5, warmup: int = 1, device="cpu"):
    """:func:`time_repeats` that also reports the process's resource use over the timed runs.

    Minor page faults and system CPU time per call reveal allocation churn: a step that allocates
    fresh large buffers (and frees them) faults in new pages every time, which shows as system time
    even when the peak memory does not grow.

    Parameters
    ----------
    fn : callable
    repeats : int, default=5
    warmup : int, default=1
    device : str or torch.device, default='cpu'

    Returns
    -------
    times : list of float
        Seconds per timed run.
    usage : dict
        :func:`usage_delta` over all the timed runs together (warm-up excluded).
    """
    for _ in range(warmup):
        fn()
    synchronize(device)
    before = resource_usage()
    times = time_repeats(fn, repeats=repeats, warmup=0, device=device)
    return times, usage_delta(before, resource_usage())


def machine_info() -> dict:
    """CPU model and the thread settings of the BLAS/OpenMP libraries, to store beside timings
    (complements :func:`environment`).

    Returns
    -------
    dict
        ``cpu_model`` (from ``/proc/cpuinfo`` on Linux, else :func:`platform.processor`), ``system``,
        ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` (the environment
        variables, ``None`` when unset), ``torch_interop_threads``.
    """
    import torch

    model = None
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {"cpu_model": model or platform.processor() or platform.machine(),
            "system": f"{platform.system()} {platform.release()}"}
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        info[var] = os.environ.get(var)
    info["torch_interop_threads"] = torch.get_num_interop_threads()
    return info


def median(values):
    """Median of a non-empty sequence (``nan`` if empty)."""
    return statistics.median(values) if len(values) else float("nan")


def current_load():
    """The 1-minute load average, or None where the platform has none."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def environment() -> dict:
    """Versions and machine facts to store beside timings."""
    import sklearn
    import torch

    from .. import __version__

    return {
        "skfilter": __version__,
        "torch": torch.__version__,
        "sklearn": sklearn.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def load_warning(load=None):
    """A warning line if the machine was busy (1-min load average above the CPU count), else None.

    Parameters
    ----------
    load : float, optional
        The load average to judge, e.g. read with :func:`os.getloadavg` before the benchmark ran
        (it then does not count the benchmark itself); default: the current one.


    Timings on a shared, oversubscribed machine are unreliable; multi-threaded BLAS calls in
    particular can take 100× longer when their threads are descheduled.
    """
    if load is None:
        if not hasattr(os, "getloadavg"):
            return None
        load = os.getloadavg()[0]
    cpus = os.cpu_count() or 1
    if load > cpus:
        return (f"WARNING: the 1-minute load average before the run ({load:.1f}) exceeded the CPU count "
                f"({cpus}): other processes compete for the cores and timings may be unreliable "
                "(try again on an idle machine).")
    return None


def int_at_least(low: int):
    """An ``argparse`` type accepting integers ``>= low``."""
    import argparse

    def parse(text) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value

    parse.__name__ = f"int>={low}"
    return parse


#: ``argparse`` type: an integer >= 1
positive_int = int_at_least(1)


# -- tables -------------------------------------------------------------------------------------
def _cell(value, fmt):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, str):
        return value
    return format(value, fmt) if fmt else str(value)


def format_table(rows, columns, markdown: bool = False) -> str:
    """Render ``rows`` (dicts) as an aligned text table or a Markdown table.

    Parameters
    ----------
    rows : list of dict
    columns : list of (key, header, fmt)
        ``fmt`` a format spec for numbers (``'.2f'``) or ``''``; missing, ``None`` and non-finite
        values print as ``—``.
    markdown : bool, default=False
        Pipe-separated Markdown instead of space-aligned text.

    Returns
    -------
    str
    """
    head = [h for _, h, _ in columns]
    body = [[_cell(r.get(k), f) for k, _, f in columns] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]

    def line(cells, sep):
        out = []
        for i, c in enumerate(cells):
            out.append(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]))
        return sep.join(out)

    if markdown:
        rule = ["-" * widths[0]] + ["-" * (w - 1) + ":" for w in widths[1:]]
        lines = [line(head, " | "), " | ".join(rule)] + [line(b, " | ") for b in body]
        return "\n".join("| " + s + " |" for s in lines)
    lines = [line(head, "  "), "  ".join("-" * w for w in widths)] + [line(b, "  ") for b in body]
    return "\n".join(lines)


def write_csv(path, rows, columns) -> Path:
    """Write ``rows`` (dicts) to ``path`` with one column per ``(key, header, fmt)``; raw values."""
    path = Path(path)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([k for k, _, _ in columns])
        for r in rows:
            w.writerow(["" if r.get(k) is None else r.get(k) for k, _, _ in columns])
    return path
