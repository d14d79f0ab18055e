"""Benchmarks of the skfilter estimators, run as ``python -m skfilter.benchmarks <command>``.

Commands (one module each, registered in :data:`COMMANDS`):

``demo``  (:mod:`skfilter.benchmarks.demo`)
    Prequential (one-step-ahead) benchmark on the bundled UCI ``concrete`` stream: EKF with full,
    VD- and FD-diagonal covariance against scikit-learn's ``MLPRegressor`` and ``SGDRegressor``
    learning one row at a time. Prints a table and writes a figure and the table to ``--out``.
``speed`` (:mod:`skfilter.benchmarks.speed`)
    Microseconds per filter step on the concrete MLP 8-50-1 (``P = 501``) for a list of named
    configurations, beside ``MLPRegressor.partial_fit`` measured in the same process.

``uci``   (:mod:`skfilter.benchmarks.uci`)
    The LoFi paper's UCI regression benchmark (spec/lofi.md §5.6): FD/VD/FC-EKF, diagonal and
    spherical LoFi and replay-buffer SGD at ranks 1-50 on the 20 standard splits of eight datasets,
    hyper-parameters searched on held-out training rows; RMSE/NLPD/time tables beside the paper's.

``defaults`` (:mod:`skfilter.benchmarks.defaults`)
    Every estimator with default parameters on scikit-learn's bundled data sets (and concrete), raw
    and standardised, beside ``MLPClassifier``/``MLPRegressor``/``BayesianRidge``.

A command module exposes ``HELP`` (one line), ``add_arguments(parser)`` and ``main(args)`` (``args``
an :class:`argparse.Namespace`; returns an exit status). Adding a benchmark (e.g. the LoFi paper's UCI
benchmark, ``uci``) means writing such a module and adding its name to :data:`COMMANDS`.
Matplotlib, tqdm and the other optional dependencies are imported only by the commands that need them.
"""

#: command name -> module (relative to this package) implementing it
COMMANDS = {
    "demo": ".demo",
    "speed": ".speed",
    "uci": ".uci",
    "defaults": ".defaults",
}

__all__ = ["COMMANDS"]
