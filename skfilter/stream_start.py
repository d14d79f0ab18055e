"""The first rows of a stream, kept until the data-scaled prior is fixed.

Everything ``'auto'`` estimates from data — the default network's input standardisation, the
targets' centre and scale, the first noise estimate (:mod:`skfilter.priors`), a subspace filter's
warm-up, a robust wrapper's threshold — is set from the **first** ``n_prior_rows`` **rows of the
stream, however they arrive**. A call that starts a stream with fewer rows keeps them in a
:class:`StreamStart`; every later call adds its rows, sets the prior again from all the rows so far
and learns every kept call again from it, in order, the new one last (:func:`replay`). From row
``n_prior_rows`` on the record is dropped and the prior is frozen. Hence:

* a stream fed one row per call and the same rows in one call reach the same belief once
  ``n_prior_rows`` rows have been seen (to rounding: the compiled kernels may group rows
  differently);
* a prediction made before row ``n_prior_rows`` uses only the rows seen so far (the prior is never
  scaled by rows the estimator has not been given);
* a one-row-per-call stream pays about ``n_prior_rows² / 2`` filter steps over its first
  ``n_prior_rows`` rows, once.

The kept rows are part of the state: they are pickled and cloned with the estimator, and a call that
fails (bad input, a numerical failure or an interrupt while learning them again) leaves the
estimator as it was before the call.

The choice of :data:`DEFAULT_PRIOR_ROWS` is measured in doc/prior_rows_table.md.

Examples
--------
>>> import numpy as np
>>> from skfilter.stream_start import StreamStart
>>> start = StreamStart.begin(np.zeros((2, 3)), np.zeros((2, 1)), None, limit=5)
>>> start = start.add(np.ones((4, 3)), np.ones((4, 1)), None)
>>> start.n_rows, start.complete
(6, True)
>>> X, Y, w = start.prior_rows()
>>> X.shape, w is None
((5, 3), True)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._validation import restore_attributes

#: rows of the stream that fix a data-scaled prior by default (measured: doc/prior_rows_table.md)
DEFAULT_PRIOR_ROWS = 50


class Call(NamedTuple):
    """One call's validated rows ``X (n, D)``, targets ``Y`` (as the estimator encoded them),
    sample weights (or None) and the passes it made over them."""

    X: np.ndarray
    Y: np.ndarray
    sample_weight: np.ndarray | None
    n_passes: int = 1


class StreamStart(NamedTuple):
    """The calls of a stream that has seen fewer than ``limit`` rows (module docstring), and the
    state of the random generator that built the estimator at the first of them (so that building
    it again draws the same initial network)."""

    calls: tuple
    n_rows: int
    limit: int
    rng_state: tuple | None = None

    @classmethod
    def begin(cls, X, Y, sample_weight, *, limit, n_passes=1, rng_state=None):
        """The record of a stream's first call (kept even when it holds ``limit`` rows or more:
        :attr:`complete` then says the prior is fixed)."""
        return cls((Call(X, Y, sample_weight, int(n_passes)),), int(X.shape[0]), int(limit), rng_state)

    def add(self, X, Y, sample_weight, n_passes=1) -> StreamStart:
        """This record with one more call."""
        return self._replace(calls=self.calls + (Call(X, Y, sample_weight, int(n_passes)),),
                             n_rows=self.n_rows + int(X.shape[0]))

    def with_passes(self, n_passes) -> StreamStart:
        """This record with the last call's number of passes set to ``n_passes``."""
        last = self.calls[-1]._replace(n_passes=int(n_passes))
        return self._replace(calls=self.calls[:-1] + (last,))

    @property
    def complete(self) -> bool:
        """Whether ``limit`` rows have been seen: the prior is then fixed for good."""
        return self.n_rows >= self.limit

    def rows(self):
        """``(X, Y, w)``: the rows of every call, concatenated in order (``w`` None when no call
        had sample weights; a call without them counts weight 1 per row). ``X`` may be DataFrames
        (the factorization models keep their calls as given)."""
        X = concatenate_rows([c.X for c in self.calls])
        Y = concatenate_rows([c.Y for c in self.calls])
        if all(c.sample_weight is None for c in self.calls):
            return X, Y, None
        w = np.concatenate([np.ones(c.X.shape[0]) if c.sample_weight is None else
                            np.asarray(c.sample_weight, dtype=np.float64) for c in self.calls])
        return X, Y, w

    def replayed(self):
        """The calls before the last, to be learned again from a new prior: runs of one-pass calls
        merged into one call (a pass over rows in order is the same however they were split), a
        multi-pass call (``fit`` with ``n_epochs > 1``) on its own."""
        out, run = [], []
        for call in self.calls[:-1] + (None,):
            if call is not None and call.n_passes == 1:
                run.append(call)
                continue
            if run:
                out.append(run[0] if len(run) == 1 else _merged(run))
                run = []
            if call is not None:
                out.append(call)
        return out

    def prior_rows(self):
        """``(X, Y, w)`` of the first ``min(limit, n_rows)`` rows: those that set the prior."""
        X, Y, w = self.rows()
        k = min(self.limit, self.n_rows)
        return X[:k], Y[:k], None if w is None else w[:k]


def concatenate_rows(parts):
    """The rows of ``parts`` (arrays, lists or DataFrames of the same kind) in order."""
    if len(parts) == 1:
        return parts[0]
    if hasattr(parts[0], "iloc"):
        import pandas as pd

        return pd.concat(parts, ignore_index=True)
    return np.concatenate([np.asarray(p) for p in parts])


def copy_rows(a):
    """A copy of the rows ``a`` that later changes to the caller's buffer cannot reach."""
    if a is None:
        return None
    if hasattr(a, "copy") and not isinstance(a, list):
        return a.copy()
    return np.array(a, dtype=object if not hasattr(a, "__array__") and not _numeric_list(a) else None)


def _numeric_list(a):
    try:
        np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return True


def _merged(calls):
    """One one-pass call of the rows of ``calls``, in order."""
    X, Y, w = StreamStart(tuple(calls), 0, 0).rows()
    return Call(X, Y, w, 1)


def first_rows(X, Y, sample_weight, limit):
    """``(X, Y, w)`` cut to their first ``limit`` rows (the rows that set a data-scaled prior)."""
    if X.shape[0] <= limit:
        return X, Y, sample_weight
    return X[:limit], Y[:limit], None if sample_weight is None else sample_weight[:limit]


def generator_for(random_state, start: StreamStart | None):
    """The ``numpy.random.RandomState`` that builds an estimator: the one of ``random_state``
    (:func:`sklearn.utils.check_random_state`) at a stream's first call, and at every rebuild during
    the stream's start a generator in the state that one had then, so that the initial network and
    the estimator's seeds are drawn again the same (also for ``random_state=None``)."""
    from sklearn.utils import check_random_state

    if start is not None and start.rng_state is not None:
        rng = np.random.RandomState()
        rng.set_state(start.rng_state)
        return rng
    return check_random_state(random_state)


def prequential_record(X, y, sample_weight, k, *, start, learn, summary, uninformed, record_rest):
    """The one-step-ahead record ``(n, ·)`` of a stream ``(X, y)`` whose first ``k`` rows fix the
    estimator's prior, each row predicted from the rows before it only.

    Row 0, which no data precede, gets ``uninformed(1)`` (after ``start(X₀, y₀, w₀)`` started the
    stream on it, so that the estimator knows its outputs); rows ``1..k−1`` are predicted one at a
    time, ``summary(X_t)`` from the estimator as it is, then learned, ``learn(X_t, y_t, w_t)`` (which
    sets the prior again from the rows so far); the rows from ``k`` on are learned in one call,
    ``record_rest(X, y, w)``, that records its one-step-ahead predictive inside the filter loop.
    The callables return tensors of one row per row (``start`` and ``learn`` return nothing)."""
    import torch
    from sklearn.utils import _safe_indexing
    from sklearn.utils.validation import _num_samples

    n = _num_samples(X)
    w = None if sample_weight is None else np.asarray(sample_weight)

    def rows(a, b):
        return (_safe_indexing(X, slice(a, b)), _safe_indexing(y, slice(a, b)),
                None if w is None else w[a:b])

    start(*rows(0, 1))
    out = [uninformed(1)]
    for t in range(1, min(k, n)):
        Xt, yt, wt = rows(t, t + 1)
        out.append(summary(Xt))
        learn(Xt, yt, wt)
    if n > k:
        out.append(record_rest(*rows(max(k, 1), n)))
    return torch.cat([o.to(out[-1].dtype) for o in out])


def prequential_fit_record(est, X, y, sample_weight=None, classes=None):
    """Fit ``est`` (a filter or a wrapper of one) from its prior on ``(X, y)`` in one pass and
    return the one-step-ahead record of every row, each predicted from the rows before it only.

    A prior that uses no data: one call recorded inside the filter loop (row 0 predicted from the
    prior). A data-scaled one: :func:`prequential_record` with the estimator's ``n`` start rows.
    ``est`` provides ``_learn_rows(X, y, w, first=, classes=, record=)``, ``_start_rows()``,
    ``_row_summary(X)``, ``_uninformed_summary(n)`` and ``_stream_classes(y, classes)``. Bad input
    leaves ``est`` as it was (a numerical failure keeps the rows learned before it)."""
    from .exceptions import FilterStepError

    k = est._start_rows()
    if k is None:
        return est._learn_rows(X, y, sample_weight, first=True, classes=classes, record=True)
    classes = est._stream_classes(y, classes)
    before = dict(est.__dict__)
    try:
        return prequential_record(
            X, y, sample_weight, k,
            start=lambda X0, y0, w0: est._learn_rows(X0, y0, w0, first=True, classes=classes),
            learn=lambda Xt, yt, wt: est._learn_rows(Xt, yt, wt, first=False),
            summary=est._row_summary, uninformed=est._uninformed_summary,
            record_rest=lambda Xr, yr, wr: est._learn_rows(Xr, yr, wr, first=False, record=True))
    except BaseException as exc:
        if not isinstance(exc, FilterStepError):
            restore_attributes(est, before)
        raise
