"""Speed of the filters on the workloads of issue 18, each beside scikit-learn timed in the same process.

Every figure is reported next to the reference unit, scikit-learn's
``MLPRegressor(hidden_layer_sizes=(50,)).partial_fit`` on one row per call of the concrete stream
(``P = 501``, float64, CPU), measured in the same run: absolute microseconds vary with the machine
and its load, ratios much less. The targets of issue 18 were set when that reference took
:data:`ISSUE_MLP_US` = 561 µs/row, so each absolute target is also given as a ratio to it (LoFi-10
≤ 70 µs = 0.125×). Sections (``--suite``; the default runs the cheap ones, about half a minute):

``concrete``
    µs per filter step on the UCI concrete MLP 8-50-1 (``P = 501``), one row per step, for
    :data:`CONFIGS`: EKF full/VD/FD, LoFi rank 10, and LoFi rank 10 with the online noise estimate
    (``obs_variance='adaptive'``) and with process noise (``process_noise=1e-4``), the last two also
    as added µs and % over plain LoFi rank 10 (target ≤ +10 %). Each estimator is fitted on a
    warm-up stream of :data:`WARMUP_ROWS` rows, then timed while ``partial_fit`` learns ``--n-rows``
    further rows in one call (the median over ``--repeats`` calls, each continuing the belief). The
    reference and the configurations are timed round-robin, one call of each in turn
    (:func:`interleave`), so that a burst of other work slows them alike.
``streaming``
    A river-style loop, ``predict(x_t)`` then ``partial_fit(x_t, y_t)`` with one 1×D row per call,
    for LoFi rank 10: µs/row, and its overhead over the in-loop step, the same rows inside
    :func:`~skfilter.model_selection.prequential_predict` (which also predicts every row before
    learning it; target ≤ 100 µs/row); the overhead over one ``partial_fit`` call of the rows is
    also stored. The same loop of ``MLPRegressor`` for reference.
``calls``
    Issue 29's per-call costs, every figure a ratio to another measured in the same run (the calls
    timed round-robin). **Later calls with default parameters**: ``LoFiRegressor((50,), rank=10)``
    with ``prior_variance='auto'`` (and the other defaults), the µs/row of its first call (``fit`` of
    ``--n-rows`` rows from scratch) and of a later ``partial_fit`` of as many rows, also after a first
    call of 20 rows in which one feature is constant (concrete's fly ash is 0 in many rows: the case
    whose ``'auto'`` prior made later steps stiff), with the steps the compiled kernels handed to the
    torch engine per call (:func:`skfilter.stepping.handed_back`; 0 expected). **One-row calls**:
    ``predict`` + ``partial_fit`` of one row per call for ``LoFiRegressor``, ``predict_proba`` +
    ``partial_fit`` for ``LoFiClassifier`` (three classes from the target's quantiles), ``WoLFRegressor``
    and ``BOCDRegressor`` (default ``n_hypotheses``, :data:`CALLS_BOCD_ROWS` rows) around the same
    ``LoFiRegressor``, each as a ratio to its own per-row cost inside one ``partial_fit`` of the same
    rows (targets :data:`CALL_TARGETS`: 1.5, 1.7, 2, 2), and river's bridge
    (``river.compat.convert_sklearn_to_river``: ``predict_one``/``predict_proba_one`` + ``learn_one``
    on dicts) as a ratio to the direct one-row calls (target 1.2; skipped without river). Each ratio
    is the median over the rounds of the round's ratio (both timed in every round, one after the
    other), so that the machine's faster and slower spells cancel.
``digits``
    ``LoFiClassifier().fit(X, y)`` on scikit-learn's digits (1,797 rows, 64 raw features, 10
    classes; the default MLP), wall seconds (median of ``--fit-repeats`` fits from scratch), beside
    ``MLPClassifier().fit(X, y)`` (target: no slower).
``digits-ekf`` (not in the default run: a fit takes about a minute)
    ``EKFClassifier().fit(X, y)`` on digits (full covariance, ``P = 3,760``), beside its BLAS floor:
    two ``(P, P) @ (P, C)`` products per row (``C = 10``), timed with torch and numpy in the same
    dtype in the same process, the faster one times the number of rows (target ≤ 1.5×).
``mnist`` (not in the default run; also ``--network mnist``)
    LoFi rank 10 on the 784-500-500-10 classification MLP of the LoFi paper's image experiments
    (``P = 648,010``), on a synthetic stream of 784 standard-normal features and ten classes (the
    cost does not depend on the data), ms/step, beside the step's own matrix products at the same
    shapes with the same BLAS, timed in the same process (:func:`lofi_products_floor`; target ≤ 1.3×
    them), the same step in float32 (target ≤ 0.6× float64: "about half") and
    ``MLPClassifier((500, 500)).partial_fit``; on a GPU ≤ 0.14 ms. Default 100 timed rows per call
    (issue 31: no page fault per step over a 100-row call).

Every row also gets the process's minor page faults per step and the system-CPU share of the timed
calls (:func:`~skfilter.benchmarks._common.time_repeats_usage`): a step that allocates fresh large
buffers faults new pages in every time, which shows there even when the peak memory stays flat.

``--dtype float32`` applies to every filter (the scikit-learn references stay float64); ``--threads``
(default 1) sets torch's threads and, through threadpoolctl, those of the BLAS libraries numpy and
scikit-learn call. ``--json [PATH]`` writes the record (environment, machine, settings, rows),
``--markdown [PATH]`` the table. To time another structure, append a :class:`SpeedConfig` to
:data:`CONFIGS`; ``--batch-sizes 1 8 32`` times every per-step configuration at each batch size.

Run as ``python -m skfilter.benchmarks speed`` (``make bench``); doc/speed.md has the protocol.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import shlex
import sys
import time
import warnings
from dataclasses import dataclass
from statistics import median

import numpy as np

from ._common import (DEFAULT_THREADS, current_load, environment, format_table, load_stream, load_warning,
                      positive_int, synchronize, time_repeats_usage, write_text)

HELP = ("issue 18's speed workloads (EKF/LoFi per step at P=501, streaming loop, digits fits, P=648,010) "
        "vs MLPRegressor.partial_fit")

#: rows fitted before timing on the concrete stream (builds the model, runs the first steps)
WARMUP_ROWS = 50
#: rows fitted before timing on the synthetic 784-d stream (every class once)
MNIST_WARMUP_ROWS = 10
#: rows per timed call on concrete (``concrete`` and ``streaming`` sections) when ``n_rows`` is None
DEFAULT_N_ROWS = 500
#: rows per timed call of the ``mnist`` section when ``n_rows`` is None (a CPU step takes ~0.1 s;
#: issue 31 counts the page faults of a 100-row call)
DEFAULT_MNIST_ROWS = 100
#: µs/row of ``MLPRegressor((50,)).partial_fit`` on concrete when issue 18's targets were measured
ISSUE_MLP_US = 561.0
#: name of the reference row (the unit of the ratios)
REFERENCE = "MLPRegressor.partial_fit"

#: sections of the benchmark, in run order, with a one-line description
SECTIONS = {
    "concrete": "µs/step of EKF full/VD/FD and LoFi r10 (+ adaptive noise, + process noise), MLP 8-50-1, P=501",
    "streaming": "predict + partial_fit one row per call (LoFi r10, MLPRegressor), overhead over the in-loop step",
    "calls": "later calls with default parameters; one-row calls (LoFi, WoLF, BOCD, river) vs the in-call row",
    "runlength": ("BOCD (RL[K]-PR, K = 1 and 10) over LoFi r10, the full EKF, HiLoFi r10 and the VD-EKF; RL[K]-MMPR "
                  "(mm) over the last three; ou/cpp-ou over LoFi r10, the full EKF, the VD-EKF and HiLoFi r10; "
                  "µs/step vs the base step"),
    "digits": "LoFiClassifier().fit vs MLPClassifier().fit on digits",
    "digits-ekf": "EKFClassifier().fit on digits (P=3,760) vs its BLAS floor (slow: ~1 min)",
    "mnist": "LoFi r10 at P=648,010 (784-500-500-10), ms/step, page faults (slow on a CPU)",
}
#: sections run when neither ``--suite`` nor ``--only`` is given
DEFAULT_SUITES = ("concrete", "streaming", "calls", "digits")

#: issue 18's budgets (float64, one thread, one row per step, the CI machine kind)
STREAM_OVERHEAD_TARGET_US = 100.0
RELATIVE_TARGET = 1.10
#: issue 31: LRKF, HiLoFi and LoLoFi of rank 10 at most this many times LoFi rank 10's step
FACTORED_TARGET_RATIO = 3.0
MNIST_TARGET_US = {"float64": 20_000.0, "float32": 10_000.0, "cuda": 140.0}
DIGITS_TARGET_RATIO = 1.0
EKF_FLOOR_TARGET_RATIO = 1.5


@dataclass
class SpeedConfig:
    """One timed per-step configuration.

    Parameters
    ----------
    name : str
        Label in the table.
    make : callable
        ``make(device, dtype, seed, batch_size) -> estimator`` with ``partial_fit``; an unfitted
        skfilter estimator.
    batch_size : int, default=1
        Rows per filter step (passed to ``make``).
    target_us : float or None
        Budget in µs per step, shown beside the measurement (budgets are for batch size 1).
    structure : str
        Posterior structure, for the record.
    relative_to : str or None
        Name of another configuration this one is compared with (its added cost).
    relative_target : float or None
        Budget as a ratio to ``relative_to``'s µs/step (1.10: at most 10 % more).
    """

    name: str
    make: object
    batch_size: int = 1
    target_us: float | None = None
    structure: str = ""
    relative_to: str | None = None
    relative_target: float | None = None


def ekf_config(covariance, prior_variance, target_us=None, batch_size=1, obs_variance=0.1) -> SpeedConfig:
    """A :class:`SpeedConfig` of :class:`~skfilter.EKFRegressor` with the given ``covariance``."""

    def make(device, dtype, seed, batch_size):
        from .. import EKFRegressor

        return EKFRegressor(hidden_layer_sizes=(50,), covariance=covariance, prior_variance=prior_variance,
                            obs_variance=obs_variance, batch_size=batch_size, device=device, dtype=dtype,
                            random_state=seed)

    return SpeedConfig(f"EKF {covariance}", make, batch_size, target_us, covariance)


def lofi_config(rank, prior_variance, target_us=None, batch_size=1, obs_variance=0.1, variant="diagonal",
                process_noise=0.0, name=None, relative_to=None, relative_target=None) -> SpeedConfig:
    """A :class:`SpeedConfig` of :class:`~skfilter.LoFiRegressor` of rank ``rank`` on the MLP 8-50-1.

    ``name`` defaults to ``'LoFi r<rank>'`` (``' sph'`` appended for the spherical variant).
    """

    def make(device, dtype, seed, batch_size):
        from .. import LoFiRegressor

        return LoFiRegressor(hidden_layer_sizes=(50,), rank=rank, variant=variant, prior_variance=prior_variance,
                             obs_variance=obs_variance, process_noise=process_noise, batch_size=batch_size,
                             device=device, dtype=dtype, random_state=seed)

    if name is None:
        name = f"LoFi r{rank}" + ("" if variant == "diagonal" else " sph")
    return SpeedConfig(name, make, batch_size, target_us, f"lofi-{variant} L={rank}", relative_to, relative_target)


def factored_config(kind, rank, prior_variance, target_ratio=None, batch_size=1, obs_variance=0.1,
                    process_noise=1e-3) -> SpeedConfig:
    """A :class:`SpeedConfig` of the factored-covariance regressors on the MLP 8-50-1 —
    ``kind`` ``'LRKF'`` (``rank``), ``'HiLoFi'`` (``hidden_rank``) or ``'LoLoFi'`` (``hidden_rank``
    and ``last_rank``) — with their default process noise, compared with LoFi rank 10
    (``target_ratio``: issue 31's ≤ 3×)."""

    def make(device, dtype, seed, batch_size):
        from .. import HiLoFiRegressor, LoLoFiRegressor, LRKFRegressor

        common = dict(hidden_layer_sizes=(50,), prior_variance=prior_variance, obs_variance=obs_variance,
                      process_noise=process_noise, batch_size=batch_size, device=device, dtype=dtype,
                      random_state=seed)
        if kind == "LRKF":
            return LRKFRegressor(rank=rank, **common)
        if kind == "HiLoFi":
            return HiLoFiRegressor(hidden_rank=rank, **common)
        return LoLoFiRegressor(hidden_rank=rank, last_rank=rank, **common)

    return SpeedConfig(f"{kind} r{rank}", make, batch_size, None, f"factored {kind.lower()} d={rank}",
                       "LoFi r10" if target_ratio else None, target_ratio)


def lofi_classifier_config(rank, prior_variance, hidden=(500, 500), batch_size=1, target_us=None, dtype=None,
                           relative_to=None, relative_target=None) -> SpeedConfig:
    """A :class:`SpeedConfig` of :class:`~skfilter.LoFiClassifier` (rank ``rank``) on an MLP with
    the given hidden widths (the ``mnist`` configuration); ``dtype`` fixes its dtype whatever the
    run's (its name then says it)."""

    def make(device, run_dtype, seed, batch_size):
        from .. import LoFiClassifier

        return LoFiClassifier(hidden_layer_sizes=hidden, rank=rank, prior_variance=prior_variance,
                              batch_size=batch_size, device=device, dtype=dtype or run_dtype, random_state=seed)

    name = f"LoFi r{rank} clf" + (f" {dtype}" if dtype else "")
    return SpeedConfig(name, make, batch_size, target_us, f"lofi-diagonal L={rank}", relative_to, relative_target)


def lofi_products_floor(layer_shapes, rank, n_classes, dtype="float64", repeats=5, seed=0) -> float:
    """Seconds per step of the matrix products of a LoFi step (rank ``rank``, ``C = n_classes``
    logits, one row) on an MLP with ``layer_shapes`` ``[(out, in), …]``, at the step's shapes with
    the same BLAS (NumPy's), in this process: the one-pass step's two ``P``-long products
    (:class:`~skfilter.posteriors.lofi.JacobianRows`) — ``[Wᵀ; J] [Υ⁻¹[Wᵀ; J]; [Wᵀ; J]]ᵀ``
    (``k × 2k × P``, ``k = L + C``) and the rotation ``(ṼᵀT) [Wᵀ; J]`` (``k × k × P``) with the mean's
    ``P × k`` product — and the Jacobian's outer products ``δ_l ⊗ a_{l−1}`` and sensitivities
    ``δ_l W_l`` (:func:`~skfilter.models.mlp_forward_jacobian`). Each product is timed alone (the
    best of ``repeats``), operands prepared beforehand; their sum is the floor the ``mnist`` row is
    compared with (issue 31: the step within 1.3× of it). (With the kernels on, the step forms the
    first product without BLAS, on the compiled sweep of :mod:`skfilter.kernels.stacked`: its two
    symmetric halves in half the multiply-adds, the ``Υ⁻¹`` scaling on the fly — below its share of
    this floor.)"""
    np_dtype = np.dtype(dtype)
    g = np.random.default_rng(seed)
    P = sum(o * i + o for o, i in layer_shapes)
    k = rank + n_classes
    rows = g.standard_normal((k, P)).astype(np_dtype)
    both = g.standard_normal((2 * k, P)).astype(np_dtype)
    small = g.standard_normal((k, k)).astype(np_dtype)
    coef = g.standard_normal((k, 1)).astype(np_dtype)
    out_rows = np.empty((k, P), dtype=np_dtype)
    J = np.empty((n_classes, P), dtype=np_dtype)
    layers = [(g.standard_normal((o, i)).astype(np_dtype), g.standard_normal(i).astype(np_dtype),
               g.standard_normal((n_classes, o)).astype(np_dtype)) for o, i in layer_shapes]

    def jacobian():
        start = 0
        for W, a, delta in layers:
            o, i = W.shape
            view = J[:, start:start + o * i].reshape(n_classes, o, i)
            np.multiply(delta[:, :, None], a[None, None, :], out=view)
            J[:, start + o * i:start + o * i + o] = delta
            delta @ W  # the sensitivities of the layer below
            start += o * i + o

    products = [lambda: rows @ both.T, lambda: np.matmul(small, rows, out=out_rows), lambda: rows.T @ coef,
                jacobian]
    total = 0.0
    for fn in products:
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        total += min(times)
    return total


def with_batch_sizes(configs, batch_sizes) -> list:
    """Each configuration at each batch size (``name`` suffixed ``' b8'`` etc. for sizes other than 1).

    Parameters
    ----------
    configs : list of SpeedConfig
    batch_sizes : sequence of int

    Returns
    -------
    list of SpeedConfig
        Budgets (``target_us``) are kept for batch size 1 only; ``relative_to`` points at the same
        batch size.
    """
    out = []
    for cfg in configs:
        for b in batch_sizes:
            b = int(b)
            if b < 1:
                raise ValueError(f"batch sizes must be positive, got {b}.")
            suffix = "" if b == 1 else f" b{b}"
            out.append(dataclasses.replace(
                cfg, name=cfg.name + suffix, batch_size=b, target_us=cfg.target_us if b == 1 else None,
                relative_to=None if cfg.relative_to is None else cfg.relative_to + suffix))
    return out


#: the per-step configurations of the ``concrete`` section, in table order (issue 18's budgets)
CONFIGS = [
    ekf_config("full", 0.1, target_us=200.0),
    ekf_config("vd", 0.01, target_us=40.0),
    ekf_config("fd", 0.1, target_us=40.0),
    lofi_config(10, 0.1, target_us=70.0),
    lofi_config(10, 0.1, obs_variance="adaptive", name="LoFi r10 adaptive", relative_to="LoFi r10",
                relative_target=RELATIVE_TARGET),
    lofi_config(10, 0.1, process_noise=1e-4, name="LoFi r10 q", relative_to="LoFi r10",
                relative_target=RELATIVE_TARGET),
    factored_config("LRKF", 10, 0.1, target_ratio=FACTORED_TARGET_RATIO),
    factored_config("HiLoFi", 10, 0.1, target_ratio=FACTORED_TARGET_RATIO),
    factored_config("LoLoFi", 10, 0.1, target_ratio=FACTORED_TARGET_RATIO),
]

#: the ``mnist`` section's floor row: the step's own matrix products (:func:`lofi_products_floor`)
MNIST_FLOOR_ROW = "LoFi r10 clf products"
#: issue 31: the step within this ratio of its products' floor
MNIST_FLOOR_TARGET_RATIO = 1.3
#: issue 31: float32 at about half of float64 (this ratio of the float64 step)
MNIST_FLOAT32_TARGET_RATIO = 0.6
#: the ``mnist`` section: the 784-500-500-10 classifier of the LoFi paper's image experiments, in
#: the run's dtype against its products' floor, and in float32 against it
MNIST_CONFIGS = [lofi_classifier_config(10, 0.01, relative_to=MNIST_FLOOR_ROW, relative_target=MNIST_FLOOR_TARGET_RATIO),
                 lofi_classifier_config(10, 0.01, dtype="float32", relative_to="LoFi r10 clf",
                                        relative_target=MNIST_FLOAT32_TARGET_RATIO)]

#: networks of the legacy ``--network`` option (``'mnist'`` = ``--suite mnist``)
NETWORKS = ("concrete", "mnist")

#: rows of the sections that are not lists of configurations (``--only`` accepts any of them)
STREAM_ROWS = ("LoFi r10 stream loop", "LoFi r10 one call", "LoFi r10 prequential", "LoFi r10 stream overhead",
               "LoFi r10 overhead vs prequential", "MLPRegressor stream loop")
DIGITS_ROWS = ("LoFiClassifier.fit", "MLPClassifier.fit")
#: rows of the ``calls`` section (issue 29), in table order
CALL_ROWS = ("defaults first call", "defaults later call", "defaults first call, 20 rows, constant feature",
             "defaults later call after it",
             "LoFi reg in-call row", "LoFi reg predict+partial_fit 1 row",
             "LoFi clf in-call row", "LoFi clf predict_proba+partial_fit 1 row",
             "WoLF in-call row", "WoLF predict+partial_fit 1 row",
             "BOCD in-call row", "BOCD predict+partial_fit 1 row",
             "river LoFi reg predict_one+learn_one", "river LoFi clf predict_proba_one+learn_one")
#: issue 29's targets of the one-row rows: a ratio to the row named (measured in the same run)
CALL_TARGETS = {
    "LoFi reg predict+partial_fit 1 row": ("LoFi reg in-call row", 1.5),
    "LoFi clf predict_proba+partial_fit 1 row": ("LoFi clf in-call row", 1.7),
    "WoLF predict+partial_fit 1 row": ("WoLF in-call row", 2.0),
    "BOCD predict+partial_fit 1 row": ("BOCD in-call row", 2.0),
    "river LoFi reg predict_one+learn_one": ("LoFi reg predict+partial_fit 1 row", 1.2),
    "river LoFi clf predict_proba_one+learn_one": ("LoFi clf predict_proba+partial_fit 1 row", 1.2),
}
#: rows per timed call of the BOCD rows of the ``calls`` section (a step costs ``n_hypotheses`` LoFi steps)
CALLS_BOCD_ROWS = 100
#: rows of the first call that has a constant feature (``calls`` section)
CALLS_CONSTANT_ROWS = 20
EKF_ROWS = ("EKFClassifier.fit", "BLAS floor (2 GEMMs/row)")
#: the ``runlength`` section's bases and run-length counts; its rows are named by :func:`_runlength_name`
RUNLENGTH_BASES = ("LoFi r10", "EKF full", "HiLoFi r10")
RUNLENGTH_KS = (1, 10)
#: rows per timed call of the ``runlength`` section (a step of K = 10 is 11 base steps)
RUNLENGTH_ROWS = 100
#: issue 31's budget: a step of ``K`` run lengths updates ``K + 1`` candidates, at most 1.3 × (K + 1) base steps
RUNLENGTH_TARGET_FACTOR = 1.3


#: the ``runlength`` section's other resets (one hypothesis, shrunk towards the prior) and their bases
RUNLENGTH_RESETS = ("ou", "cpp-ou")
RUNLENGTH_RESET_BASES = ("LoFi r10", "EKF full", "EKF vd", "HiLoFi r10")
#: the bases of the moment-matched reset's rows (RL[K]-MMPR, each ``K`` of :data:`RUNLENGTH_KS`; LoFi
#: has no moment match), and the bases timed for them only (step and RL[K]-PR rows, for comparison)
RUNLENGTH_MM_BASES = ("EKF full", "EKF vd", "HiLoFi r10")
RUNLENGTH_MM_ONLY_BASES = tuple(b for b in RUNLENGTH_MM_BASES if b not in RUNLENGTH_BASES)


def _runlength_name(base, K=None, reset="prior"):
    """The ``runlength`` section's row of a base filter (``K`` None) or of BOCD with ``K`` over it
    (the resets of :data:`RUNLENGTH_RESETS`: ``K = 1``, named by the reset; ``'moment-matched'``:
    ``BOCD mm K=… over …``)."""
    if reset == "moment-matched":
        return f"BOCD mm K={K} over {base}"
    if reset != "prior":
        return f"BOCD {reset} over {base}"
    return f"{base} step" if K is None else f"BOCD K={K} over {base}"


#: ``(base, K, reset)`` of the ``runlength`` section's rows, in order (``K`` None: the base's step;
#: every base of the resets' rows has its step among the first rows)
RUNLENGTH_CASES = ([(b, k, "prior") for b in RUNLENGTH_BASES + RUNLENGTH_MM_ONLY_BASES
                    for k in (None, *RUNLENGTH_KS)]
                   + [(b, 1, r) for b in RUNLENGTH_RESET_BASES for r in RUNLENGTH_RESETS]
                   + [(b, k, "moment-matched") for b in RUNLENGTH_MM_BASES for k in RUNLENGTH_KS])
RUNLENGTH_ROWS_NAMES = tuple(_runlength_name(*case) for case in RUNLENGTH_CASES)


def section_workloads(configs=None, mnist_configs=None) -> dict:
    """Names of the rows each section produces: ``{section: [name, ...]}`` (what ``--only`` selects)."""
    return {
        "concrete": [c.name for c in (CONFIGS if configs is None else configs)],
        "streaming": list(STREAM_ROWS),
        "calls": list(CALL_ROWS),
        "runlength": list(RUNLENGTH_ROWS_NAMES),
        "digits": list(DIGITS_ROWS),
        "digits-ekf": list(EKF_ROWS),
        "mnist": [c.name for c in (MNIST_CONFIGS if mnist_configs is None else mnist_configs)],
    }


def synthetic_image_stream(n_rows, seed=0, n_features=784, n_classes=10):
    """Standard-normal rows with labels cycling through the classes first (so that any warm-up
    prefix of ``n_classes`` rows or more holds every class), then random: a stand-in for MNIST
    when only the cost per step is measured."""
    from sklearn.utils import Bunch

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    y = rng.integers(0, n_classes, size=n_rows)
    y[:n_classes] = np.arange(n_classes)
    return Bunch(X=X, y=y, name="synthetic 784-d, 10 classes")


def _rows(stream, start, n):
    """``n`` rows of the stream from ``start`` on, wrapping around its end."""
    idx = (start + np.arange(n)) % len(stream.y)
    return stream.X[idx], stream.y[idx]


def _usage_fields(usage, n_steps) -> dict:
    """Resource columns of a row from :func:`time_repeats_usage`'s ``usage`` over ``n_steps`` steps."""
    cpu = (usage["user_s"] or 0.0) + (usage["system_s"] or 0.0)
    return {
        "faults_per_step": None if usage["minflt"] is None else usage["minflt"] / max(n_steps, 1),
        # (differenced usages, as of the prequential row, can come out slightly negative)
        "sys_share": min(max(usage["system_s"] / cpu, 0.0), 1.0) if cpu > 0 else None,
        "user_s": usage["user_s"], "system_s": usage["system_s"], "minflt": usage["minflt"],
        "majflt": usage["majflt"], "maxrss_growth_mb": usage["maxrss_growth_mb"],
    }


def _row(section, name, **kw) -> dict:
    """A result row with every generic key present."""
    row = {"section": section, "config": name, "structure": "", "batch_size": 1, "device": "cpu",
           "dtype": "float64", "n_params": None, "n_rows": None, "error": None, "value": None, "unit": "",
           "target": None, "meets": None, "ref": None, "ratio": None, "target_ratio": None, "meets_ratio": None,
           "target_us": None}
    row.update(kw)
    return row


def interleave(fns, repeats=5, warmup=1, device="cpu") -> list:
    """Time several calls round-robin: each ``fn`` is called ``warmup`` times untimed, then
    ``repeats`` rounds call every ``fn`` once in turn, so that a burst of other work on a shared
    machine slows all of them alike instead of one (which would distort their ratios).

    Parameters
    ----------
    fns : list of callable
    repeats : int, default=5
    warmup : int, default=1
    device : str or torch.device, default='cpu'
        Synchronised around each timed call.

    Returns
    -------
    list
        Per ``fn``, ``(times, usage)``: seconds per timed call and the summed
        :func:`~skfilter.benchmarks._common.usage_delta` of its timed calls; or the
        :class:`~skfilter.exceptions.FilterStepError` it raised (it is then not called again).
    """
    from ..exceptions import FilterStepError

    out = [None] * len(fns)
    for k, fn in enumerate(fns):
        try:
            for _ in range(warmup):
                fn()
        except FilterStepError as exc:
            out[k] = exc
    live = [k for k in range(len(fns)) if out[k] is None]
    times = {k: [] for k in live}
    usage = {k: None for k in live}
    for _ in range(repeats):
        for k in list(live):
            try:
                [dt], delta = time_repeats_usage(fns[k], repeats=1, warmup=0, device=device)
            except FilterStepError as exc:
                out[k] = exc
                live.remove(k)
                continue
            times[k].append(dt)
            usage[k] = delta if usage[k] is None else {
                key: None if v is None or usage[k][key] is None else usage[k][key] + v for key, v in delta.items()}
    for k in live:
        out[k] = (times[k], usage[k])
    return out


class _Prepared:
    """A configuration ready to time: ``fn`` (the timed call) and ``finish((times, usage) or
    error) -> row``."""

    def __init__(self, fn, finish):
        self.fn, self.finish = fn, finish


def prepare_config(cfg: SpeedConfig, stream, n_rows=DEFAULT_N_ROWS, device="cpu", dtype="float64", seed=0,
                   warmup_rows=WARMUP_ROWS, section="concrete", unit="µs/step") -> _Prepared:
    """Build ``cfg``'s estimator and fit it on the warm-up rows (``stream``: from
    :func:`~skfilter.benchmarks._common.load_stream` or :func:`synthetic_image_stream`); the timed
    call learns the next ``n_rows`` rows in one ``partial_fit``. Its row (:func:`run_prepared`)
    holds ``us_per_row`` (median), ``us_per_row_min``, ``us_per_step`` (per filter step of
    ``batch_size`` rows), ``value`` in ``unit``, ``n_params``, ``times`` (seconds per call),
    ``faults_per_step``, ``sys_share`` and the other resource counts, ``error``."""
    from ..exceptions import FilterStepError

    est = cfg.make(device, dtype, seed, cfg.batch_size)
    Xw, yw = _rows(stream, 0, warmup_rows)
    X, y = _rows(stream, warmup_rows, n_rows)
    row = _row(section, cfg.name, structure=cfg.structure, batch_size=cfg.batch_size, device=str(device),
               dtype=str(getattr(est, "dtype", None) or dtype), target_us=cfg.target_us, n_rows=n_rows, unit=unit)
    if cfg.relative_to is not None:
        row.update(ref=cfg.relative_to, target_ratio=cfg.relative_target)
    else:
        row.update(ref=REFERENCE, target_ratio=None if cfg.target_us is None else cfg.target_us / ISSUE_MLP_US)
    try:
        est.fit(Xw, yw)
        fn = lambda: est.partial_fit(X, y)  # noqa: E731
    except FilterStepError as exc:
        def fn(exc=exc):
            raise exc

    def finish(result):
        if isinstance(result, Exception):
            row.update(error=str(result), us_per_row=float("nan"), us_per_step=float("nan"), value=float("nan"),
                       n_params=getattr(est, "n_params_", None))
            return row
        times, usage = result
        steps = math.ceil(n_rows / cfg.batch_size)
        us_step = 1e6 * median(times) / steps
        scale = 1e-3 if unit == "ms/step" else 1.0
        row.update(
            n_params=int(est.n_params_),
            times=times,
            us_per_row=1e6 * median(times) / n_rows,
            us_per_row_min=1e6 * min(times) / n_rows,
            us_per_step=us_step,
            value=us_step * scale,
            target=None if cfg.target_us is None else cfg.target_us * scale,
            **_usage_fields(usage, steps * len(times)),
        )
        return row

    return _Prepared(fn, finish)


def _mnist_floor_row(cfg, stream, device, dtype, seed, repeats) -> dict:
    """The ``mnist`` section's :data:`MNIST_FLOOR_ROW`: :func:`lofi_products_floor` at the shapes of
    ``cfg``'s network (read from an estimator fitted on the warm-up rows)."""
    est = cfg.make(device, dtype, seed, 1)
    est.fit(*_rows(stream, 0, MNIST_WARMUP_ROWS))
    layer_shapes = [tuple(p.shape) for name, p in est.module_.named_parameters() if name.endswith("weight")]
    rank, C = est.rank, len(est.classes_)
    seconds = lofi_products_floor(layer_shapes, rank, C, dtype=str(dtype), repeats=repeats, seed=seed)
    us = 1e6 * seconds
    return _row("mnist", MNIST_FLOOR_ROW, structure=f"k×2k×P + k×k×P + P×k, J (k = L + C = {rank + C})",
                device=str(device), dtype=str(dtype), n_params=int(est.n_params_), unit="ms/step", value=us * 1e-3,
                us_per_step=us, us_per_row=us)


def run_prepared(prepared, repeats=5, device="cpu") -> list:
    """Time :class:`_Prepared` configurations round-robin (:func:`interleave`); their rows."""
    results = interleave([p.fn for p in prepared], repeats=repeats, warmup=1, device=device)
    return [p.finish(r) for p, r in zip(prepared, results)]


def _mlp(classifier, hidden, seed):
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    return (MLPClassifier if classifier else MLPRegressor)(hidden_layer_sizes=hidden, random_state=seed)


def prepare_mlp_baseline(stream, n_rows=DEFAULT_N_ROWS, seed=0, hidden=(50,), classifier=False,
                         warmup_rows=WARMUP_ROWS, section="reference") -> _Prepared:
    """scikit-learn's ``MLPRegressor`` (``classifier``: ``MLPClassifier``, classes from the whole
    stream) ``partial_fit`` on one row per call, ``n_rows`` calls per timed repeat, ready to time;
    its row has the keys of :func:`prepare_config`'s (``value`` in µs/row)."""
    est = _mlp(classifier, hidden, seed)
    name = "MLPClassifier.partial_fit" if classifier else REFERENCE
    kw = {"classes": np.unique(stream.y)} if classifier else {}
    Xw, yw = _rows(stream, 0, warmup_rows)
    X, y = _rows(stream, warmup_rows, n_rows)
    for t in range(warmup_rows):
        est.partial_fit(Xw[t:t + 1], yw[t:t + 1], **kw)

    def loop():
        for t in range(n_rows):
            est.partial_fit(X[t:t + 1], y[t:t + 1], **kw)

    def finish(result):
        times, usage = result
        n_params = sum(c.size for c in est.coefs_) + sum(b.size for b in est.intercepts_)
        us = 1e6 * median(times) / n_rows
        return _row(section, name, structure="sklearn (Adam)", ref=None if section == "reference" else REFERENCE,
                    n_rows=n_rows, n_params=int(n_params), times=times, us_per_row=us,
                    us_per_row_min=1e6 * min(times) / n_rows, us_per_step=us, value=us, unit="µs/row",
                    **_usage_fields(usage, n_rows * len(times)))

    return _Prepared(loop, finish)


def time_streaming(stream, n_rows=DEFAULT_N_ROWS, repeats=5, device="cpu", dtype="float64", seed=0,
                   config=None) -> list:
    """The ``streaming`` section: a user's loop of one-row ``predict`` + ``partial_fit`` calls.

    Parameters
    ----------
    stream : Bunch
        The concrete stream.
    n_rows : int, default=500
        Rows per timed loop (and per timed one-call reference).
    repeats : int, default=5
    device, dtype : str
    seed : int, default=0
    config : SpeedConfig, optional
        The filter (default: LoFi rank 10 of :data:`CONFIGS`).

    Returns
    -------
    list of dict
        Rows :data:`STREAM_ROWS`: the filter's loop (µs/row); the same rows in one ``partial_fit``
        call (the in-loop step) and inside ``prequential_predict`` (which also predicts each row;
        the model build is differenced out); the loop's overhead over the one call (which counts
        the predict calls' own work too) and over the prequential rows (issue 18's measure), both
        against :data:`STREAM_OVERHEAD_TARGET_US`; and ``MLPRegressor``'s loop (``overhead_us``
        over its ``partial_fit`` alone is added by :func:`run_speed`).
    """
    from ..model_selection import prequential_predict

    cfg = config or lofi_config(10, 0.1)
    Xw, yw = _rows(stream, 0, WARMUP_ROWS)
    X, y = _rows(stream, WARMUP_ROWS, n_rows)
    common = {"structure": cfg.structure, "device": str(device), "dtype": str(dtype), "n_rows": n_rows,
              "unit": "µs/row", "ref": REFERENCE}
    rows = []

    def add(name, times, usage, n_params, **kw):
        us = 1e6 * median(times) / n_rows
        rows.append(_row("streaming", name, **common, n_params=n_params, times=times, us_per_row=us,
                         us_per_row_min=1e6 * min(times) / n_rows, us_per_step=us, value=us,
                         **_usage_fields(usage, n_rows * repeats), **kw))

    est = cfg.make(device, dtype, seed, 1)
    est.fit(Xw, yw)
    P = int(est.n_params_)

    def loop():
        for t in range(n_rows):
            x_t = X[t:t + 1]
            est.predict(x_t)
            est.partial_fit(x_t, y[t:t + 1])

    # the same rows inside prequential_predict, after the same warm-up rows: a fresh estimator learns
    # warm-up + timed rows, less one that learns the warm-up rows only (which removes the model build)
    Xa, ya = _rows(stream, 0, WARMUP_ROWS + n_rows)
    mlp = _mlp(False, (50,), seed)
    for t in range(WARMUP_ROWS):
        mlp.partial_fit(Xw[t:t + 1], yw[t:t + 1])

    def mlp_loop():
        for t in range(n_rows):
            x_t = X[t:t + 1]
            mlp.predict(x_t)
            mlp.partial_fit(x_t, y[t:t + 1])

    timed = interleave([loop, lambda: est.partial_fit(X, y),
                        lambda: prequential_predict(cfg.make(device, dtype, seed, 1), Xa, ya),
                        lambda: prequential_predict(cfg.make(device, dtype, seed, 1), Xw, yw), mlp_loop],
                       repeats=repeats, warmup=1, device=device)
    for r in timed:
        if isinstance(r, Exception):
            raise r
    (t_loop, u_loop), (t_one, u_one), (t_all, u_all), (t_warm, u_warm), (t_mlp, u_mlp) = timed
    add(STREAM_ROWS[0], t_loop, u_loop, P)
    add(STREAM_ROWS[1], t_one, u_one, P)
    us = 1e6 * (median(t_all) - median(t_warm)) / n_rows
    usage = {k: None if u_all[k] is None or u_warm[k] is None else u_all[k] - u_warm[k] for k in u_all}
    rows.append(_row("streaming", STREAM_ROWS[2], **common, n_params=P, times=t_all, times_warmup_only=t_warm,
                     us_per_row=us, us_per_step=us, value=us, **_usage_fields(usage, n_rows * repeats)))
    loop_us, one_us, preq_us = (r["us_per_row"] for r in rows)
    for name, base in ((STREAM_ROWS[3], one_us), (STREAM_ROWS[4], preq_us)):
        rows.append(_row("streaming", name, **common, n_params=P, value=loop_us - base, us_per_step=loop_us - base,
                         target=STREAM_OVERHEAD_TARGET_US, target_us=STREAM_OVERHEAD_TARGET_US,
                         target_ratio=STREAM_OVERHEAD_TARGET_US / ISSUE_MLP_US))
    add(STREAM_ROWS[5], t_mlp, u_mlp, int(sum(c.size for c in mlp.coefs_) + sum(b.size for b in mlp.intercepts_)))
    rows[-1].update(structure="sklearn (Adam)", device="cpu", dtype="float64")
    return rows


def time_calls(stream, n_rows=DEFAULT_N_ROWS, repeats=5, device="cpu", dtype="float64", seed=0) -> list:
    """The ``calls`` section (module docstring): rows :data:`CALL_ROWS`, µs/row each, with ``ratio``
    to the row named in ``ref`` and ``handed_back`` (steps the compiled kernels handed to the torch
    engine per timed call, the later-call rows)."""
    from .. import BOCDRegressor, LoFiClassifier, LoFiRegressor, WoLFRegressor, stepping

    def reg():
        return LoFiRegressor(hidden_layer_sizes=(50,), rank=10, device=device, dtype=dtype, random_state=seed)

    def clf():
        return LoFiClassifier(hidden_layer_sizes=(50,), rank=10, device=device, dtype=dtype, random_state=seed)

    makers = {"LoFi reg": reg, "LoFi clf": clf, "WoLF": lambda: WoLFRegressor(reg()),
              "BOCD": lambda: BOCDRegressor(reg())}
    X, y = stream.X, stream.y
    labels = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    n_rows = int(n_rows)
    Xw, yw = _rows(stream, 0, WARMUP_ROWS)
    Xa, ya = _rows(stream, WARMUP_ROWS, n_rows)
    Xb, yb = _rows(stream, WARMUP_ROWS + n_rows, n_rows)
    # a first call in which one feature is constant (the most frequent value of the column with most ties)
    ties = [np.unique(X[:, j], return_counts=True) for j in range(X.shape[1])]
    j = int(np.argmax([c.max() for _, c in ties]))
    value = ties[j][0][np.argmax(ties[j][1])]
    same = np.flatnonzero(X[:, j] == value)[:CALLS_CONSTANT_ROWS]
    rest = np.setdiff1d(np.arange(len(y)), same)[:n_rows]
    fns, names, counts, sizes = [], [], {}, {}
    fitted = {}

    def counted(name, fn):
        def run():
            before = stepping.handed_back()
            fn()
            counts.setdefault(name, []).append(stepping.handed_back() - before)
        return run

    def first_call(Xf, yf):
        def fit():
            fitted["last"] = reg().fit(Xf, yf)
        return fit

    later = reg().fit(Xa, ya)
    later_c = reg().fit(X[same], y[same])
    fns += [counted(CALL_ROWS[0], first_call(Xa, ya)), counted(CALL_ROWS[1], lambda: later.partial_fit(Xb, yb)),
            counted(CALL_ROWS[2], first_call(X[same], y[same])),
            counted(CALL_ROWS[3], lambda: later_c.partial_fit(X[rest], y[rest]))]
    names += list(CALL_ROWS[:4])
    sizes.update({CALL_ROWS[0]: n_rows, CALL_ROWS[1]: n_rows, CALL_ROWS[2]: len(same), CALL_ROWS[3]: len(rest)})
    loops = {}
    for label, make in makers.items():
        n = min(n_rows, CALLS_BOCD_ROWS) if label == "BOCD" else n_rows
        targets = labels if label == "LoFi clf" else y
        Xl = _rows(stream, WARMUP_ROWS, n)[0]
        yl, yw_ = targets[(WARMUP_ROWS + np.arange(n)) % len(y)], targets[:WARMUP_ROWS]
        kw = {"classes": np.unique(labels)} if label == "LoFi clf" else {}
        one, rows = make(), make()
        one.partial_fit(Xw, yw_, **kw)
        rows.partial_fit(Xw, yw_, **kw)
        predict = rows.predict_proba if label == "LoFi clf" else rows.predict

        def loop(rows=rows, predict=predict, Xl=Xl, yl=yl, n=n):
            for t in range(n):
                x = Xl[t:t + 1]
                predict(x)
                rows.partial_fit(x, yl[t:t + 1])

        fns += [lambda one=one, Xl=Xl, yl=yl: one.partial_fit(Xl, yl), loop]
        i = CALL_ROWS.index(f"{label} in-call row")
        names += [CALL_ROWS[i], CALL_ROWS[i + 1]]
        sizes.update({names[-2]: n, names[-1]: n})
        loops[label] = (Xl, yl, yw_, kw)
    try:
        from river import compat
    except ImportError:  # pragma: no cover - river is optional
        compat = None
    if compat is not None:
        features = [f"x{i}" for i in range(X.shape[1])]
        for label, make, name in (("LoFi reg", reg, CALL_ROWS[12]), ("LoFi clf", clf, CALL_ROWS[13])):
            Xl, yl, yw_, kw = loops[label]
            model = compat.convert_sklearn_to_river(make(), **kw)
            for t in range(WARMUP_ROWS):
                model.learn_one(dict(zip(features, Xw[t])), yw_[t])
            dicts = [dict(zip(features, row)) for row in Xl]
            predict = model.predict_proba_one if label == "LoFi clf" else model.predict_one

            def river_loop(model=model, predict=predict, dicts=dicts, yl=yl):
                for x, t in zip(dicts, yl):
                    predict(x)
                    model.learn_one(x, t)

            fns.append(river_loop)
            names.append(name)
            sizes[name] = len(yl)
    timed = interleave(fns, repeats=repeats, warmup=1, device=device)
    rows_out, by = [], {}
    for name, result in zip(names, timed):
        if isinstance(result, Exception):
            raise result
        times, usage = result
        n = sizes[name]
        us = 1e6 * median(times) / n
        row = _row("calls", name, structure="lofi-diagonal L=10", device=str(device), dtype=str(dtype), n_rows=n,
                   n_params=int(later.n_params_),
                   times=times, us_per_row=us, us_per_row_min=1e6 * min(times) / n, us_per_step=us, value=us,
                   unit="µs/row", **_usage_fields(usage, n * len(times)))
        cpu = (usage["user_s"] or 0.0) + (usage["system_s"] or 0.0)
        # the process's CPU time per row: what a loaded machine's waits do not add to (one thread)
        row["cpu_us_per_row"] = 1e6 * cpu / (n * len(times)) if cpu > 0 else None
        if name in counts:
            row["handed_back"] = max(counts[name][1:] or counts[name])  # the timed calls (not the warm-up)
        rows_out.append(row)
        by[name] = row
    # the later call against the first; the later call after a constant feature against the plain later call
    for later_name, first_name in ((CALL_ROWS[1], CALL_ROWS[0]), (CALL_ROWS[3], CALL_ROWS[1])):
        by[later_name].update(ref=first_name, ratio=by[later_name]["value"] / by[first_name]["value"])
    for name, (ref, target) in CALL_TARGETS.items():
        if name in by and ref in by:
            # the median of the rounds' ratios (interleave times both in each round, side by side):
            # the machine's slower and faster spells cancel within a round
            per_round = [(a / by[name]["n_rows"]) / (b / by[ref]["n_rows"])
                         for a, b in zip(by[name]["times"], by[ref]["times"])]
            by[name].update(ref=ref, ratio=median(per_round), target_ratio=target)
            cpu, cpu_ref = by[name].get("cpu_us_per_row"), by[ref].get("cpu_us_per_row")
            if cpu and cpu_ref:
                by[name]["cpu_ratio"] = cpu / cpu_ref
    for label in makers:
        base, loop = by[f"{label} in-call row"], by[CALL_ROWS[CALL_ROWS.index(f"{label} in-call row") + 1]]
        loop["overhead_us"] = loop["value"] - base["value"]
    return rows_out


def time_runlength(stream, n_rows=RUNLENGTH_ROWS, repeats=5, device="cpu", dtype="float64", seed=0) -> list:
    """The ``runlength`` section: µs/step of LoFi r10, of the full EKF, of HiLoFi r10 and of the
    VD-EKF (regressors, default parameters otherwise, MLP 8-50-1) and of
    ``BOCDRegressor(base, n_hypotheses=K)`` for each ``K`` of :data:`RUNLENGTH_KS` (hazard 0.01,
    ``reset='prior'``), each a later ``partial_fit`` of ``n_rows`` rows, timed round-robin
    (:func:`interleave`); each BOCD row's ``ratio`` is the median of the rounds' ratios to its base's
    step, beside the target ``1.3 × (K + 1)``. The resets of :data:`RUNLENGTH_RESETS` (``K = 1``)
    over each of :data:`RUNLENGTH_RESET_BASES`, and ``reset='moment-matched'`` over
    :data:`RUNLENGTH_MM_BASES` (each ``K``) likewise (:data:`RUNLENGTH_CASES`)."""
    from .. import BOCDRegressor, EKFRegressor, HiLoFiRegressor, LoFiRegressor

    bases = {"LoFi r10": lambda: LoFiRegressor(hidden_layer_sizes=(50,), rank=10, device=device, dtype=dtype,
                                               random_state=seed),
             "EKF full": lambda: EKFRegressor(hidden_layer_sizes=(50,), device=device, dtype=dtype,
                                              random_state=seed),
             "HiLoFi r10": lambda: HiLoFiRegressor(hidden_layer_sizes=(50,), hidden_rank=10, device=device,
                                                   dtype=dtype, random_state=seed),
             "EKF vd": lambda: EKFRegressor(hidden_layer_sizes=(50,), covariance="vd", device=device, dtype=dtype,
                                            random_state=seed)}
    Xw, yw = _rows(stream, 0, WARMUP_ROWS)
    Xa, ya = _rows(stream, WARMUP_ROWS, int(n_rows))
    fns, names, n_params = [], [], None
    cases = RUNLENGTH_CASES
    for base, K, reset in cases:
        est = bases[base]() if K is None else BOCDRegressor(bases[base](), n_hypotheses=K, reset=reset)
        est.fit(Xw, yw)
        if K is None:
            n_params = int(est.n_params_)
        snapshot = pickle.dumps(est)
        # the same later call every round, each on its own copy of the fitted state (made untimed)
        copies = [pickle.loads(snapshot) for _ in range(repeats + 1)]

        def call(copies=copies):
            copies.pop().partial_fit(Xa, ya)

        fns.append(call)
        names.append(_runlength_name(base, K, reset))
    timed = interleave(fns, repeats=repeats, warmup=1, device=device)
    rows, by = [], {}
    for name, result in zip(names, timed):
        if isinstance(result, Exception):
            raise result
        times, usage = result
        us = 1e6 * median(times) / int(n_rows)
        row = _row("runlength", name, device=str(device), dtype=str(dtype), n_rows=int(n_rows), n_params=n_params,
                   times=times,
                   us_per_step=us, value=us, unit="µs/step", **_usage_fields(usage, int(n_rows) * len(times)))
        rows.append(row)
        by[name] = row
    for base, K, reset in cases:
        if K is None:
            continue
        ref = by[_runlength_name(base)]
        row = by[_runlength_name(base, K, reset)]
        per_round = [a / b for a, b in zip(row["times"], ref["times"])]
        row.update(ref=ref["config"], ratio=median(per_round), target_ratio=RUNLENGTH_TARGET_FACTOR * (K + 1))
    return rows


def load_digits_stream(n_rows=None):
    """scikit-learn's digits, raw features (0–16), in the file's order; the first ``n_rows`` rows."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    if n_rows is not None:
        X, y = X[:int(n_rows)], y[:int(n_rows)]
    return X.astype(np.float64), y


def _fit_rows(specs, X, y, repeats, device="cpu", warmup_rows=20) -> list:
    """Wall seconds of ``make().fit(X, y)`` for each spec ``(section, name, make, row_kw)``: the
    median of ``repeats`` fits from scratch, the specs' fits interleaved (:func:`interleave`), after
    one untimed fit of each on ``warmup_rows`` rows (loads code, compiles, fills caches).

    Returns
    -------
    list of (dict, estimator)
        The row and the last fitted estimator of each spec.
    """
    fitted = [[] for _ in specs]

    def fitter(k, make):
        def fit():
            fitted[k][:] = []  # the previous fit (a P × P covariance for the EKF) freed first
            fitted[k].append(make().fit(X, y))

        return fit

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MLPClassifier's ConvergenceWarning
        for _, _, make, _ in specs:
            make().fit(X[:warmup_rows], y[:warmup_rows])
        timed = interleave([fitter(k, spec[2]) for k, spec in enumerate(specs)], repeats=repeats, warmup=0,
                           device=device)
    out = []
    n = len(y)
    for (section, name, _, kw), result, ests in zip(specs, timed, fitted):
        if isinstance(result, Exception):
            raise result
        times, usage = result
        est = ests[-1]
        n_params = getattr(est, "n_params_", None)
        if n_params is None and hasattr(est, "coefs_"):
            n_params = sum(c.size for c in est.coefs_) + sum(b.size for b in est.intercepts_)
        row = _row(section, name, n_rows=n, n_params=None if n_params is None else int(n_params), times=times,
                   value=median(times), unit="s", us_per_row=1e6 * median(times) / n,
                   us_per_step=1e6 * median(times) / n, **_usage_fields(usage, n * len(times)))
        row.update(kw)
        if hasattr(est, "n_iter_"):
            row["n_iter"] = int(est.n_iter_)
        out.append((row, est))
    return out


def time_digits(repeats=3, device="cpu", dtype="float64", seed=0, n_rows=None, hidden=None) -> list:
    """The ``digits`` section: ``LoFiClassifier().fit`` vs ``MLPClassifier().fit`` (wall seconds,
    their fits interleaved).

    Parameters
    ----------
    repeats : int, default=3
        Fits from scratch per estimator (median).
    device, dtype : str
    seed : int, default=0
    n_rows : int, optional
        Only the first rows of digits (tests); default all 1,797.
    hidden : tuple of int, optional
        Hidden widths of both networks (tests); default each estimator's default.
    """
    from sklearn.neural_network import MLPClassifier

    from .. import LoFiClassifier

    X, y = load_digits_stream(n_rows)
    kw = {} if hidden is None else {"hidden_layer_sizes": hidden}
    (lofi, _), (mlp, _) = _fit_rows([
        ("digits", "LoFiClassifier.fit", lambda: LoFiClassifier(random_state=seed, device=device, dtype=dtype, **kw),
         {"structure": "lofi-diagonal L=10", "dtype": str(dtype), "device": str(device)}),
        ("digits", "MLPClassifier.fit", lambda: MLPClassifier(random_state=seed, **kw),
         {"structure": "sklearn (Adam, 200 epochs max)"}),
    ], X, y, repeats, device=device)
    lofi.update(ref="MLPClassifier.fit", ratio=lofi["value"] / mlp["value"], target=DIGITS_TARGET_RATIO * mlp["value"],
                target_ratio=DIGITS_TARGET_RATIO)
    return [lofi, mlp]


def blas_floor(P, C, n_steps=30, dtype="float64", device="cpu", seed=0) -> dict:
    """Seconds per step of two ``(P, P) @ (P, C)`` products, the dense work of a full-covariance
    step with ``C`` outputs, timed with torch (on ``device``) and numpy (CPU) in ``dtype``.

    Returns
    -------
    dict
        ``torch_s``, ``numpy_s`` (median per step over ``n_steps``; ``numpy_s`` None off the CPU),
        ``floor_s`` (the smaller), ``library`` (which).
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    tdt = getattr(torch, str(dtype))
    A = torch.randn(P, P, generator=gen, dtype=tdt).to(device)
    B = torch.randn(P, C, generator=gen, dtype=tdt).to(device)
    out = {}

    def pair_torch():
        A @ B
        A @ B

    times, _ = time_repeats_usage(pair_torch, repeats=n_steps, warmup=2, device=device)
    out["torch_s"] = median(times)
    out["numpy_s"] = None
    if torch.device(device).type == "cpu":
        An, Bn = A.numpy(), B.numpy()

        def pair_numpy():
            An @ Bn
            An @ Bn

        times, _ = time_repeats_usage(pair_numpy, repeats=n_steps, warmup=2)
        out["numpy_s"] = median(times)
    out["library"] = "numpy" if out["numpy_s"] is not None and out["numpy_s"] < out["torch_s"] else "torch"
    out["floor_s"] = out["torch_s"] if out["library"] == "torch" else out["numpy_s"]
    del A, B
    return out


def time_digits_ekf(repeats=1, device="cpu", dtype="float64", seed=0, n_rows=None, hidden=None,
                    floor_steps=30) -> list:
    """The ``digits-ekf`` section: ``EKFClassifier().fit`` on digits beside its BLAS floor
    (:func:`blas_floor` × the number of rows).

    Parameters
    ----------
    repeats : int, default=1
        Fits from scratch (median).
    device, dtype : str
    seed : int, default=0
    n_rows : int, optional
        Only the first rows of digits (tests).
    hidden : tuple of int, optional
        Hidden widths (tests); default the estimator's (50,), ``P = 3,760``.
    floor_steps : int, default=30
        Timed GEMM pairs of the floor.
    """
    from .. import EKFClassifier

    X, y = load_digits_stream(n_rows)
    kw = {} if hidden is None else {"hidden_layer_sizes": hidden}
    [(ekf, est)] = _fit_rows([("digits-ekf", "EKFClassifier.fit",
                               lambda: EKFClassifier(random_state=seed, device=device, dtype=dtype, **kw),
                               {"structure": "full", "dtype": str(dtype), "device": str(device)})],
                             X, y, repeats, device=device)
    n = len(y)
    K = len(est.classes_)
    C = 1 if K == 2 else K
    P = int(est.n_params_)
    del est
    floor = blas_floor(P, C, n_steps=floor_steps, dtype=dtype, device=device, seed=seed)
    floor_total = floor["floor_s"] * n
    ekf.update(ref=EKF_ROWS[1], ratio=ekf["value"] / floor_total, target=EKF_FLOOR_TARGET_RATIO * floor_total,
               target_ratio=EKF_FLOOR_TARGET_RATIO, n_outputs=C)
    row = _row("digits-ekf", EKF_ROWS[1], structure=f"2 × ({P},{P})@({P},{C}) per row, {floor['library']}",
               device=str(device), dtype=str(dtype), n_params=P, n_rows=n, value=floor_total, unit="s",
               us_per_row=1e6 * floor["floor_s"], us_per_step=1e6 * floor["floor_s"],
               floor_torch_us_per_step=1e6 * floor["torch_s"],
               floor_numpy_us_per_step=None if floor["numpy_s"] is None else 1e6 * floor["numpy_s"],
               floor_library=floor["library"], n_outputs=C)
    return [ekf, row]


def _relate(results) -> None:
    """Fill the ratio columns: to the reference ``MLPRegressor.partial_fit`` (``ratio_vs_mlp`` for
    every row with µs per row; ``ratio`` for rows whose ``ref`` is the reference) and to another
    configuration (``relative_to`` rows: ``added_us``, ``added_pct``); then ``meets``."""
    by_name = {r["config"]: r for r in results}
    ref = by_name.get(REFERENCE)
    ref_us = ref["us_per_row"] if ref is not None and ref.get("error") is None else None
    if ref is not None and ref_us:
        ref.update(ref=REFERENCE, ratio=1.0)
    for r in results:
        if ref_us and r.get("us_per_row") is not None:
            r["ratio_vs_mlp"] = r["us_per_row"] / ref_us
        if r["ref"] == REFERENCE and r is not ref:
            r["ratio"] = r["us_per_step"] / ref_us if ref_us else None
        elif r["ref"] in by_name and r["section"] in ("concrete", "mnist"):
            base = by_name[r["ref"]]
            b = base.get("us_per_step")
            if b and r.get("us_per_step") is not None and math.isfinite(b):
                scale = 1e-3 if r["unit"] == "ms/step" else 1.0
                r.update(ratio=r["us_per_step"] / b, added_us=r["us_per_step"] - b,
                         added_pct=100.0 * (r["us_per_step"] / b - 1.0), target=r["target_ratio"] * b * scale)
        if r["config"] == "MLPRegressor stream loop" and ref_us:
            r["overhead_us"] = r["us_per_row"] - ref_us
        r["meets"] = _verdict(r["value"], r["target"])
        r["meets_ratio"] = _verdict(r["ratio"], r["target_ratio"])


def _verdict(value, target):
    """'yes' when ``value <= target``, 'no' otherwise, None without both (or a non-finite value)."""
    if value is None or target is None or not math.isfinite(value):
        return None
    return "yes" if value <= target else "no"


def _fmt(value, unit):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if unit == "s":
        return f"{value:.2f}"
    if unit == "ms/step":
        return f"{value:.1f}"
    return f"{value:.0f}"


def _fmt_ratio(value):
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def display_rows(results) -> list:
    """The table's cells (strings) of every result row."""
    out = []
    for r in results:
        fps, sys_share = r.get("faults_per_step"), r.get("sys_share")
        out.append({
            "section": r["section"], "config": r["config"],
            "P": "—" if r.get("n_params") is None else f"{r['n_params']:,}", "dtype": r["dtype"],
            "measured": _fmt(r["value"], r["unit"]), "unit": r["unit"],
            "target": "—" if r["target"] is None else "≤ " + _fmt(r["target"], r["unit"]),
            "meets": r["meets"] or "—",
            "ratio": _fmt_ratio(r["ratio"]),
            "target_ratio": "—" if r["target_ratio"] is None else "≤ " + _fmt_ratio(r["target_ratio"]),
            "meets_ratio": r["meets_ratio"] or "—", "ref": r["ref"] or "—",
            "faults": "—" if fps is None else (f"{fps:.1f}" if fps < 100 else f"{fps:,.0f}"),
            "sys": "—" if sys_share is None else f"{100 * sys_share:.0f}",
        })
    return out


COLUMNS = [("config", "workload", ""), ("section", "section", ""), ("P", "P", ""), ("dtype", "dtype", ""),
           ("measured", "measured", ""), ("unit", "unit", ""), ("target", "target", ""), ("meets", "meets", ""),
           ("ratio", "× ref", ""), ("target_ratio", "target × ref", ""), ("meets_ratio", "meets ×", ""),
           ("ref", "ref", ""), ("faults", "faults/step", ""), ("sys", "sys %", "")]


def notes(results, settings, env) -> list:
    """Lines printed (and written to the Markdown file) below the table."""
    lines = []
    by_name = {r["config"]: r for r in results}
    ref = by_name.get(REFERENCE)
    if ref is not None:
        lines.append(f"Reference: {REFERENCE} (MLP 8-50-1, one row per call, float64, CPU) took "
                     f"{ref['us_per_row']:.0f} µs/row in this run ({ISSUE_MLP_US:.0f} when issue 18's targets were "
                     f"set); '× ref' divides by the row named in 'ref', measured in this run; 'target × ref' is "
                     f"the issue's target as such a ratio (absolute targets ÷ {ISSUE_MLP_US:.0f} µs).")
    for r in results:
        if r.get("added_pct") is not None:
            lines.append(f"{r['config']}: {r['added_us']:+.0f} µs/row ({r['added_pct']:+.0f} %) over {r['ref']} "
                         f"(target ≤ {100 * (r['target_ratio'] - 1):+.0f} %).")
    if STREAM_ROWS[3] in by_name:
        loop_us, one_us, preq_us, ov_one, ov_preq = (by_name[n]["value"] for n in STREAM_ROWS[:5])
        lines.append(f"Streaming: predict + partial_fit one row per call costs {loop_us:.0f} µs/row against "
                     f"{one_us:.0f} in one partial_fit call of the same rows (overhead {ov_one:.0f} µs/row, the "
                     f"predictions included) and {preq_us:.0f} inside prequential_predict (overhead {ov_preq:.0f}).")
        mlp_loop = by_name.get(STREAM_ROWS[5])
        if mlp_loop is not None and mlp_loop.get("overhead_us") is not None:
            lines.append(f"MLPRegressor's loop: {mlp_loop['value']:.0f} µs/row, {mlp_loop['overhead_us']:+.0f} over "
                         "its partial_fit alone (the predict call).")
    if CALL_ROWS[1] in by_name:
        first, later, first_c, later_c = (by_name[n] for n in CALL_ROWS[:4])
        lines.append(f"Later calls, default parameters (LoFiRegressor((50,), rank=10), prior_variance='auto'): "
                     f"{later['value']:.0f} µs/row against {first['value']:.0f} in the first call "
                     f"({later['ratio']:.2f}×; {later.get('handed_back')} steps handed to the torch engine per "
                     f"call); after a first call of {first_c['n_rows']} rows with a constant feature, "
                     f"{later_c['value']:.0f} µs/row ({later_c['ratio']:.2f}× the later call above; "
                     f"{later_c.get('handed_back')} handed back).")
        for name, (ref, target) in CALL_TARGETS.items():
            r = by_name.get(name)
            if r is not None and r.get("ratio") is not None:
                cpu = f" (CPU time: {r['cpu_ratio']:.2f}×)" if r.get("cpu_ratio") else ""
                lines.append(f"{name}: {r['value']:.0f} µs/row = {r['ratio']:.2f}× {ref} "
                             f"({by_name[ref]['value']:.0f}; the median of the rounds' ratios){cpu}; "
                             f"target ≤ {target}×: {r['meets_ratio']}.")
    runlength_rows = [_runlength_name(*case) for case in RUNLENGTH_CASES if case[1] is not None]
    for name in runlength_rows:
        r = by_name.get(name)
        if r is not None and r.get("ratio") is not None:
            lines.append(f"{r['config']}: {r['value']:.0f} µs/step = {r['ratio']:.2f}× {r['ref']} "
                         f"({by_name[r['ref']]['value']:.0f}; median of the rounds' ratios, later partial_fit "
                         f"calls of {r['n_rows']} rows); target ≤ 1.3 × (K + 1) = {r['target_ratio']:.1f}×: "
                         f"{r['meets_ratio']}.")
    if "MLPClassifier.fit" in by_name and "LoFiClassifier.fit" in by_name:
        d, m = by_name["LoFiClassifier.fit"], by_name["MLPClassifier.fit"]
        lines.append(f"Digits ({d['n_rows']} rows): LoFiClassifier().fit {d['value']:.2f} s (P = {d['n_params']:,}, "
                     f"{d['us_per_row']:.0f} µs/row), MLPClassifier().fit {m['value']:.2f} s ({m.get('n_iter')} "
                     f"epochs); medians of {settings['fit_repeats']} fits.")
    if EKF_ROWS[1] in by_name:
        f, e = by_name[EKF_ROWS[1]], by_name["EKFClassifier.fit"]
        numpy_us = f["floor_numpy_us_per_step"]
        numpy_us = "—" if numpy_us is None else f"{numpy_us:,.0f}"
        lines.append(f"EKFClassifier().fit: {e['us_per_step']:,.0f} µs/row; BLAS floor {f['us_per_step']:,.0f} "
                     f"µs/row (torch {f['floor_torch_us_per_step']:,.0f}, numpy {numpy_us}).")
    lines.append(f"µs/step: median over {settings['repeats']} partial_fit calls of {settings['n_rows']} rows each "
                 f"(after a warm-up fit of {WARMUP_ROWS} rows and one untimed call); faults/step: minor page faults "
                 "of the process per step over the timed calls; sys %: system share of the CPU time.")
    load = settings["load_average_before"]
    load = "n/a" if load is None else f"{load:.2f}"
    src = env.get("source")
    if src:
        lines.append(f"Source: skfilter {env['skfilter']} at commit {src['commit'][:10]}"
                     + (" with uncommitted changes" if src["dirty"] else "") + ".")
    lines.append(f"Machine: {env['cpu_model']}, {env['cpu_count']} CPUs; torch {env['torch']} with "
                 f"{env['torch_threads']} thread(s), BLAS threads {settings['blas_threads']}, OMP_NUM_THREADS="
                 f"{env['OMP_NUM_THREADS']}; 1-min load average before the run {load}.")
    return lines


def _resolve_suites(suites, network):
    if network not in NETWORKS:
        raise ValueError(f"network must be one of {NETWORKS}, got {network!r}.")
    if suites is None:
        suites = ("mnist",) if network == "mnist" else DEFAULT_SUITES
    if isinstance(suites, str):
        suites = (suites,)
    suites = list(SECTIONS) if "all" in suites else list(suites)
    unknown = [s for s in suites if s not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown suite(s) {unknown}; choose from {list(SECTIONS)} or 'all'.")
    return [s for s in SECTIONS if s in suites]


def run_speed(configs=None, n_rows=None, repeats=5, device="cpu", dtype="float64", seed=0, baseline=True,
              json_path=None, verbose=True, network="concrete", suites=None, mnist_configs=None, fit_repeats=3,
              ekf_repeats=1, digits_rows=None, digits_hidden=None, markdown_path=None, blas_threads=None,
              command=None) -> dict:
    """Run the chosen sections and the reference; print and optionally save the table.

    Parameters
    ----------
    configs : list of SpeedConfig, optional
        The ``concrete`` section's configurations (default :data:`CONFIGS`); with
        ``network='mnist'`` those of the ``mnist`` section instead (legacy).
    n_rows : int, optional
        Rows per timed call of the per-step and streaming sections; default
        :data:`DEFAULT_N_ROWS` (concrete, streaming) and :data:`DEFAULT_MNIST_ROWS` (mnist).
    repeats : int, default=5
        Timed calls per configuration (median reported).
    device : str, default='cpu'
    dtype : {'float64', 'float32'}, default='float64'
        Of every filter (the scikit-learn references stay float64).
    seed : int, default=0
    baseline : bool, default=True
        Time the reference ``MLPRegressor.partial_fit`` (and ``MLPClassifier.partial_fit`` in the
        ``mnist`` section).
    json_path : path-like, optional
        Write ``{"environment", "settings", "results", "notes"}`` as JSON there.
    verbose : bool, default=True
    network : {'concrete', 'mnist'}, default='concrete'
        Legacy: ``'mnist'`` with ``suites=None`` runs the ``mnist`` section only.
    suites : sequence of str, optional
        Sections of :data:`SECTIONS` (or ``'all'``); default :data:`DEFAULT_SUITES`.
    mnist_configs : list of SpeedConfig, optional
        The ``mnist`` section's configurations (default :data:`MNIST_CONFIGS`).
    fit_repeats : int, default=3
        Fits per estimator in the ``digits`` section.
    ekf_repeats : int, default=1
        Fits in the ``digits-ekf`` section.
    digits_rows : int, optional
        Only the first rows of digits (tests).
    digits_hidden : tuple of int, optional
        Hidden widths of the digits networks (tests; default each estimator's).
    markdown_path : path-like, optional
        Write the table and notes as Markdown there.
    blas_threads : int, optional
        Recorded in the settings (the caller limits the BLAS threads).
    command : str, optional
        The command line, recorded in the Markdown file's header.

    Returns
    -------
    dict
        ``results`` (list of row dicts: ``value``/``unit``, ``target``, ``ratio`` to ``ref``,
        ``target_ratio``, ``meets``, ``ratio_vs_mlp`` = µs/row ÷ the reference's,
        ``faults_per_step``, ``sys_share``, ...), ``table``, ``notes``, ``environment``,
        ``settings``, ``seconds``.
    """
    load_before = current_load()
    t0 = time.perf_counter()
    suites = _resolve_suites(suites, network)
    if n_rows is not None and int(n_rows) < 1 or int(repeats) < 1 or int(fit_repeats) < 1 or int(ekf_repeats) < 1:
        raise ValueError("n_rows and the repeats must be positive.")
    repeats = int(repeats)
    if network == "mnist" and configs is not None and mnist_configs is None:
        mnist_configs, configs = configs, None
    configs = CONFIGS if configs is None else configs
    mnist_configs = MNIST_CONFIGS if mnist_configs is None else mnist_configs
    rows_main = DEFAULT_N_ROWS if n_rows is None else int(n_rows)
    rows_mnist = DEFAULT_MNIST_ROWS if n_rows is None else int(n_rows)
    say = print if verbose else (lambda *a, **k: None)
    concrete = load_stream("concrete", seed=seed)
    results = []
    if baseline and "concrete" not in suites:
        say(f"  timing {REFERENCE} (reference) ...", flush=True)
        results.extend(run_prepared([prepare_mlp_baseline(concrete, rows_main, seed)], repeats))
    for section in suites:
        say(f"  [{section}] {SECTIONS[section]}", flush=True)
        if section == "concrete":
            # the reference and the configurations timed round-robin (one call of each in turn)
            prepared = [prepare_mlp_baseline(concrete, rows_main, seed)] if baseline else []
            prepared += [prepare_config(cfg, concrete, rows_main, device, dtype, seed) for cfg in configs]
            say(f"  timing {', '.join(([REFERENCE] if baseline else []) + [c.name for c in configs])} "
                f"(interleaved) ...", flush=True)
            results.extend(run_prepared(prepared, repeats, device))
        elif section == "streaming":
            results.extend(time_streaming(concrete, rows_main, repeats, device, dtype, seed))
        elif section == "calls":
            results.extend(time_calls(concrete, rows_main, repeats, device, dtype, seed))
        elif section == "runlength":
            results.extend(time_runlength(concrete, RUNLENGTH_ROWS if n_rows is None else rows_main, repeats, device,
                                          dtype, seed))
        elif section == "digits":
            results.extend(time_digits(fit_repeats, device, dtype, seed, digits_rows, digits_hidden))
        elif section == "digits-ekf":
            results.extend(time_digits_ekf(ekf_repeats, device, dtype, seed, digits_rows, digits_hidden))
        elif section == "mnist":
            stream = synthetic_image_stream(MNIST_WARMUP_ROWS + rows_mnist, seed)
            target = MNIST_TARGET_US["cuda" if str(device).startswith("cuda") else str(dtype)]
            prepared = []
            for cfg in mnist_configs:
                if cfg.target_us is None and cfg.batch_size == 1 and cfg.relative_to is None:
                    cfg = dataclasses.replace(cfg, target_us=target)
                prepared.append(prepare_config(cfg, stream, rows_mnist, device, dtype, seed,
                                               warmup_rows=MNIST_WARMUP_ROWS, section="mnist", unit="ms/step"))
            if baseline:
                prepared.append(prepare_mlp_baseline(stream, rows_mnist, seed, hidden=(500, 500), classifier=True,
                                                     warmup_rows=MNIST_WARMUP_ROWS, section="mnist"))
            say(f"  timing {', '.join(c.name for c in mnist_configs)}"
                + (", MLPClassifier((500, 500)).partial_fit" if baseline else "") + " (interleaved) ...", flush=True)
            results.extend(run_prepared(prepared, repeats, device))
            floored = [c for c in mnist_configs if c.relative_to == MNIST_FLOOR_ROW]
            if floored and not str(device).startswith("cuda"):
                results.append(_mnist_floor_row(floored[0], stream, device, dtype, seed, repeats))
        synchronize(device)
    _relate(results)
    env = environment()
    settings = {"suites": suites, "dataset": "concrete (standardised, shuffled with seed %d)" % seed,
                "model": "MLP 8-50-1 ReLU", "n_rows": rows_main, "mnist_rows": rows_mnist, "repeats": repeats,
                "fit_repeats": int(fit_repeats), "ekf_repeats": int(ekf_repeats), "digits_rows": digits_rows,
                "warmup_rows": WARMUP_ROWS, "mnist_warmup_rows": MNIST_WARMUP_ROWS, "device": str(device),
                "dtype": str(dtype), "blas_threads": blas_threads, "load_average_before": load_before,
                "issue_mlp_us": ISSUE_MLP_US, "command": command}
    if "mnist" in suites:
        settings["mnist_model"] = "MLP 784-500-500-10 ReLU on synthetic 784-d standard-normal rows, 10 classes"
    shown = display_rows(results)
    table = format_table(shown, COLUMNS)
    lines = notes(results, settings, env)
    warning = load_warning(load_before)
    if warning:
        lines.append(warning)
    for r in results:
        if r["error"]:
            lines.append(f"{r['config']}: failed ({r['error']})")
    say("")
    say(table)
    say("")
    for line in lines:
        say("  " + line)
    out = {"results": results, "table": table, "notes": lines, "environment": env, "settings": settings,
           "seconds": time.perf_counter() - t0}
    settings["seconds"] = out["seconds"]
    if json_path is not None:
        path = write_text(json_path, json.dumps({k: out[k] for k in ("environment", "settings", "results", "notes")},
                                                indent=2, default=str) + "\n")
        out["json_path"] = path
        say(f"  results written to {path}")
    if markdown_path is not None:
        load = "n/a" if load_before is None else f"{load_before:.2f}"
        path = write_text(markdown_path, format_table(shown, COLUMNS, markdown=True) + "\n\n"
                          + "\n".join(f"- {line}" for line in lines) + "\n",
                          f"{(command or 'speed').removeprefix('python -m skfilter.benchmarks ')}; 1-min load average before the run: {load}")
        out["markdown_path"] = path
        say(f"  table written to {path}")
    return out


#: ``--json`` / ``--markdown`` without a path
DEFAULT_JSON = "doc/speed.json"
DEFAULT_MARKDOWN = "doc/speed_table.md"


def add_arguments(parser) -> None:
    """Add the ``speed`` options to an :class:`argparse.ArgumentParser`."""
    parser.add_argument("--suite", nargs="+", metavar="NAME", default=None, choices=[*SECTIONS, "all"],
                        help=f"sections to run: {', '.join(SECTIONS)} or all (default: {' '.join(DEFAULT_SUITES)}; "
                             "with --only: every section holding a named workload)")
    parser.add_argument("--only", nargs="+", metavar="NAME", default=None,
                        help="time only these workloads (names as in the table; a streaming/digits row runs its "
                             "whole section)")
    parser.add_argument("--device", default="cpu", help="torch device of the filters ('cpu', 'cuda', ...)")
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"], help="filter dtype")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed calls per configuration (median)")
    parser.add_argument("--n-rows", type=positive_int, default=None,
                        help=f"rows per timed call (default {DEFAULT_N_ROWS}; {DEFAULT_MNIST_ROWS} for mnist)")
    parser.add_argument("--fit-repeats", type=positive_int, default=3, help="fits per estimator on digits (median)")
    parser.add_argument("--ekf-repeats", type=positive_int, default=1, help="EKFClassifier fits in digits-ekf")
    parser.add_argument("--digits-rows", type=positive_int, default=None, help="first rows of digits only")
    parser.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1], metavar="B",
                        help="rows per filter step; every per-step configuration is timed at each size")
    parser.add_argument("--no-baseline", action="store_true", help="skip the scikit-learn partial_fit references")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help="torch and BLAS threads (0: the libraries' defaults)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", nargs="?", const=DEFAULT_JSON, default=None,
                        help=f"write the record as JSON (no PATH: {DEFAULT_JSON})")
    parser.add_argument("--markdown", metavar="PATH", nargs="?", const=DEFAULT_MARKDOWN, default=None,
                        help=f"write the table as Markdown (no PATH: {DEFAULT_MARKDOWN})")
    parser.add_argument("--network", choices=NETWORKS, default="concrete",
                        help="legacy: 'mnist' = --suite mnist (LoFi r10 on MLP 784-500-500-10, P=648,010)")


def main(args) -> int:
    """Run :func:`run_speed` with parsed command-line ``args``; exit status 0 (2 on a bad name or device)."""
    from .._utils import resolve_device

    try:
        resolve_device(args.device)
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    suites = args.suite
    if suites is None and args.network == "mnist":
        suites = ["mnist"]
    configs, mnist_configs = CONFIGS, MNIST_CONFIGS
    if args.only:
        workloads = section_workloads()
        chosen = _resolve_suites(suites or list(SECTIONS), "concrete")
        names = {n for s in chosen for n in workloads[s]}
        unknown = [n for n in args.only if n not in names]
        if unknown:
            print(f"unknown configuration(s) {unknown}; choose from {sorted(names)}")
            return 2
        suites = [s for s in chosen if any(n in workloads[s] for n in args.only)]
        configs = [c for c in CONFIGS if c.name in args.only]
        mnist_configs = [c for c in MNIST_CONFIGS if c.name in args.only]
    configs = with_batch_sizes(configs, args.batch_sizes)
    mnist_configs = with_batch_sizes(mnist_configs, args.batch_sizes)
    command = "python -m skfilter.benchmarks speed" + "".join(" " + shlex.quote(a) for a in sys.argv[2:]) \
        if len(sys.argv) > 1 and sys.argv[1] == "speed" else None
    run_speed(configs, n_rows=args.n_rows, repeats=args.repeats, device=args.device, dtype=args.dtype,
              seed=args.seed, baseline=not args.no_baseline, json_path=args.json, suites=suites,
              mnist_configs=mnist_configs, fit_repeats=args.fit_repeats, ekf_repeats=args.ekf_repeats,
              digits_rows=args.digits_rows, markdown_path=args.markdown, blas_threads=args.threads or None,
              command=command)
    return 0
