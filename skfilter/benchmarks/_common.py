"""Helpers shared by the benchmark commands: data streams, scores, timing, tables."""

from __future__ import annotations

import contextlib
import math
import os
import platform
import timeit
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
    x_mean, x_scale = X_raw[:n_warmup].mean(0), nonzero_scale(X_raw[:n_warmup].std(0))
    y_mean, y_scale = float(y_raw[:n_warmup].mean()), float(nonzero_scale(y_raw[:n_warmup].std()))
    return Bunch(
        X=(X_raw - x_mean) / x_scale, y=(y_raw - y_mean) / y_scale, X_raw=X_raw, y_raw=y_raw,
        x_mean=x_mean, x_scale=x_scale, y_mean=y_mean, y_scale=y_scale, n_warmup=n_warmup,
        order=order, name=name,
    )


def nonzero_scale(std):
    """Standard deviations with zeros (constant columns) replaced by one: the divisors that
    standardise a stream."""
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
        ``−log N(y; mean, std²)`` (nats, :func:`scipy.stats.norm.logpdf`); their mean is
        :func:`skfilter.metrics.gaussian_nlpd`.
    """
    from scipy.stats import norm

    return -norm.logpdf(np.asarray(y, dtype=np.float64), np.asarray(mean, dtype=np.float64),
                        np.asarray(std, dtype=np.float64))


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


# -- threads and timing -------------------------------------------------------------------------
#: default thread count of the benchmark commands (see :func:`limit_threads`)
DEFAULT_THREADS = 1


@contextlib.contextmanager
def limit_threads(n_threads):
    """Context manager: at most ``n_threads`` threads in torch and the native BLAS/OpenMP pools;
    ``None`` or ``0`` leaves the libraries' defaults. Yields the torch thread count in force.

    Both are needed: :func:`threadpoolctl.threadpool_limits` sets the pools it finds (OpenBLAS,
    the OpenMP runtimes), but it does not control torch's intra-op pool. Measured with torch 2.13
    (OpenMP backend): it sees torch's ``libgomp`` and lowers ``omp_get_max_threads`` of the
    calling thread only, other threads keep torch's count, and torch's statically linked MKL is
    not among the pools it finds; :func:`torch.set_num_threads` sets torch's own count (ATen, MKL,
    OpenMP) and is restored on exit.

    The commands default to :data:`DEFAULT_THREADS` = 1: at ``P = 501`` a filter step is a chain of
    small kernels that gain nothing from a second thread (measured: full covariance 245 µs/step with
    one or two threads on an idle 2-core machine), while multi-threaded BLAS calls with several
    columns stall for milliseconds whenever another process holds one of the cores, which makes
    timings on a shared machine erratic.
    """
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    if not n_threads:
        yield before
        return
    try:
        with threadpool_limits(limits=int(n_threads)):
            torch.set_num_threads(int(n_threads))
            yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def synchronize(device) -> None:
    """Wait for queued work on ``device`` (a no-op on the CPU)."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_repeats(fn, repeats: int = 5, warmup: int = 1, device="cpu"):
    """Wall-clock seconds of ``fn()`` over ``repeats`` runs (:class:`timeit.Timer`, one call per
    run), after ``warmup`` untimed runs; ``device`` is synchronised before and after each timed run.
    The garbage collector stays as it was (``timeit`` turns it off by default; a filter's own
    allocations are part of what is measured).

    Returns
    -------
    list of float
        One duration per repeat (use :func:`statistics.median`).
    """
    import gc

    collecting = gc.isenabled()

    def setup():
        if collecting:
            gc.enable()
        synchronize(device)

    def call():
        fn()
        synchronize(device)

    for _ in range(warmup):
        fn()
    return timeit.Timer(call, setup=setup).repeat(repeat=repeats, number=1)


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


# -- environment --------------------------------------------------------------------------------
def current_load():
    """The 1-minute load average, or None where the platform has none."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def source_revision() -> dict | None:
    """The git commit of the measured package and whether its files differ from it (``None``
    outside a git checkout, e.g. an installed wheel).

    Returns
    -------
    dict or None
        ``commit`` (hex), ``dirty`` (bool: uncommitted changes under the package directory).
    """
    import subprocess

    pkg = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "-C", str(pkg), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(pkg), "status", "--porcelain", "--", "."], capture_output=True,
                                text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())} if commit else None


def environment() -> dict:
    """What to store beside timings: :func:`skfilter.show_versions` (``versions``) plus the machine,
    threads, load and source commit, flattened for the tables' notes.

    Returns
    -------
    dict
        ``skfilter``, ``torch``, ``sklearn``, ``numpy``, ``python`` (versions), ``machine``,
        ``processor``, ``cpu_model``, ``system``, ``cpu_count``, ``torch_threads``,
        ``torch_interop_threads``, ``cuda`` (first GPU's name or None), ``compiled_kernels``,
        ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` (None when unset),
        ``load_average``, ``source`` (:func:`source_revision`) and ``versions`` (the whole
        ``show_versions(as_dict=True)``, thread pools included).
    """
    from .. import show_versions

    info = show_versions(as_dict=True)
    deps, tinfo = info["dependencies"], info["torch"]
    env = {
        "skfilter": info["skfilter"], "torch": tinfo["version"], "sklearn": deps["scikit-learn"],
        "numpy": deps["numpy"], "python": platform.python_version(), "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(), "cpu_model": _cpu_model(),
        "system": f"{platform.system()} {platform.release()}", "cpu_count": os.cpu_count(),
        "torch_threads": tinfo["num_threads"], "torch_interop_threads": tinfo["num_interop_threads"],
        "cuda": tinfo["devices"][0] if tinfo["devices"] else None, "compiled_kernels": info["compiled_kernels"],
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "source": source_revision(), "versions": info,
    }
    env.update({var: os.environ.get(var) for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")})
    return env


def load_warning(load=None):
    """A warning line if the machine was busy (1-min load average above the CPU count), else None.

    Parameters
    ----------
    load : float, optional
        The load average to judge, e.g. read with :func:`current_load` before the benchmark ran
        (it then does not count the benchmark itself); default: the current one.

    Timings on a shared, oversubscribed machine are unreliable; multi-threaded BLAS calls in
    particular can take 100× longer when their threads are descheduled.
    """
    load = current_load() if load is None else load
    cpus = os.cpu_count() or 1
    if load is not None and load > cpus:
        return (f"WARNING: the 1-minute load average before the run ({load:.1f}) exceeded the CPU count "
                f"({cpus}): other processes compete for the cores and timings may be unreliable "
                "(try again on an idle machine).")
    return None


def missing_uci_data(command: str, datasets, data_home=None) -> int | None:
    """``None`` when the UCI files of ``datasets`` are found, else exit status 2 after printing to
    stderr which are missing and how to get them (:func:`skfilter.datasets.check_uci_data`).

    Parameters
    ----------
    command : str
        The benchmark's name, prefixed to the message.
    datasets : sequence of str
    data_home : path-like, optional
        Default :func:`skfilter.datasets.default_data_home`.
    """
    import sys

    from ..datasets import check_uci_data, default_data_home

    home = default_data_home() if data_home is None else data_home
    try:
        check_uci_data(datasets, home)
    except FileNotFoundError as exc:
        hint = ("\n  Without downloading: --datasets concrete runs on the bundled concrete set."
                if home is None and list(datasets) != ["concrete"] else "")
        print(f"{command}: {exc}{hint}", file=sys.stderr)
        return 2
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
    """Render ``rows`` (dicts) as an aligned text table or a Markdown table (pandas + tabulate).

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
        The first column left-aligned, the others right-aligned.
    """
    import pandas as pd

    frame = pd.DataFrame([[_cell(r.get(k), f) for k, _, f in columns] for r in rows],
                         columns=[h for _, h, _ in columns], dtype=object)
    return frame.to_markdown(index=False, tablefmt="pipe" if markdown else "simple", disable_numparse=True,
                             colalign=["left"] + ["right"] * (len(columns) - 1))


def write_text(path, text: str, generated_by: str | None = None) -> Path:
    """Write ``text`` to ``path`` (parent folders created), after the line
    ``<!-- generated by python -m skfilter.benchmarks <generated_by> -->`` and a blank line when
    ``generated_by`` (the command and its options) is given; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if generated_by is not None:
        text = f"<!-- generated by python -m skfilter.benchmarks {generated_by} -->\n\n" + text
    path.write_text(text)
    return path


def save_figure(fig, path, dpi: int = 110) -> Path:
    """Save a matplotlib figure to ``path`` (parent folders created) and close it; returns the path."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def write_csv(path, rows, keys) -> Path:
    """Write ``rows`` (dicts) to ``path``, one column per key of ``keys`` in that order; raw values
    (:meth:`pandas.DataFrame.to_csv`, missing values empty)."""
    import pandas as pd

    path = Path(path)
    pd.DataFrame(list(rows), columns=list(keys)).to_csv(path, index=False)
    return path
