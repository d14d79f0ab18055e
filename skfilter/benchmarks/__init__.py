"""Benchmarks of the skfilter estimators, run as ``python -m skfilter.benchmarks <command>``.

Commands (one module each, registered in :data:`COMMANDS`):

``demo``  (:mod:`skfilter.benchmarks.demo`)
    Prequential (one-step-ahead) benchmark on the bundled UCI ``concrete`` stream: EKF with full,
    VD- and FD-diagonal covariance against scikit-learn's ``MLPRegressor`` and ``SGDRegressor``
    learning one row at a time. Prints a table and writes a figure and the table to ``--out``.
``speed`` (:mod:`skfilter.benchmarks.speed`)
    The speed workloads of issue 18 (doc/speed.md) in sections (``--suite``): microseconds per filter
    step on the concrete MLP 8-50-1 (``P = 501``), the online noise estimate and process noise, the
    one-row ``predict`` + ``partial_fit`` loop, the digits fits (and the full EKF against its BLAS
    floor), LoFi at ``P = 648,010``, each beside scikit-learn measured in the same process.

``uci``   (:mod:`skfilter.benchmarks.uci`)
    The LoFi paper's UCI regression benchmark (spec/lofi.md §5.6): FD/VD/FC-EKF, diagonal and
    spherical LoFi and replay-buffer SGD at ranks 1-50 on the 20 standard splits of eight datasets,
    hyper-parameters searched on held-out training rows; RMSE/NLPD/time tables beside the paper's.

``defaults`` (:mod:`skfilter.benchmarks.defaults`)
    Every estimator with default parameters on scikit-learn's bundled data sets (and concrete), raw
    and standardised, beside ``MLPClassifier``/``MLPRegressor``/``BayesianRidge``.
``calibration`` (:mod:`skfilter.benchmarks.calibration`)
    Every default classifier's held-out log-loss, expected calibration error and accuracy beside the
    same estimator behind ``CalibratedClassifierCV(cv=3, method='sigmoid')`` (issue 30).
``prior-rows`` (:mod:`skfilter.benchmarks.prior_rows`)
    The ``'auto'`` prior set from the first ``k`` rows, then one row at a time (issue 29): divergences
    after a small or unrepresentative start, and prequential scores against ``k`` (the default ``N``).

``wolf-tracking`` (:mod:`skfilter.benchmarks.wolf_tracking`)
    WoLF's 2-D tracking experiment (thesis §4.7.1): KF, WoLF-IMQ, WoLF-TMD, KF-IW and KF-B under
    Student-t and mixture outliers; scaled RMSE and run time relative to the KF (Table 4.2).
``wolf-uci`` (:mod:`skfilter.benchmarks.wolf_uci`)
    WoLF on UCI regression with 10 % target outliers (§4.7.2): EKF, WoLF-IMQ, WoLF-TMD and OGD;
    RMedSE and time per step relative to OGD (Fig. 4.5).
``wolf-1d`` (:mod:`skfilter.benchmarks.wolf_1d`)
    WoLF for online 1-D MLP regression with outliers, sorted and unsorted inputs (§4.7.3), with the
    predictive band as a figure.

``wolf-labels`` (:mod:`skfilter.benchmarks.wolf_labels`)
    WoLFClassifier against the plain filter on 2-D streams with flipped labels (random, far from the
    boundary, class-conditional); held-out accuracy over seeds.

``inbetween`` (:mod:`skfilter.benchmarks.inbetween`)
    In-between uncertainty of HiLoFi and LRKF at several ranks on simulated two-cluster 1-D data
    (Duran-Martin et al. 2025, §5.1): predictive bands in a grid of panels, gap/cluster std ratios.

``bocd-drift`` (:mod:`skfilter.benchmarks.bocd_drift`)
    BONE's online classification with periodic drift (thesis E3.2): C-ACI, CPP-OU, RL[1]-PR and
    RL[1]-OUPR* tuned on one warm-up stream, prequential misclassification over 100 streams beside
    the authors' numbers, and the RL[K]-PR sweep over ``K`` and the hazard.
``bocd-jumps`` (:mod:`skfilter.benchmarks.bocd_jumps`)
    The same on the drift-and-jumps stream (E3.3).
``bocd-bandit`` (:mod:`skfilter.benchmarks.bocd_bandit`)
    Non-stationary 10-arm Bernoulli bandit with Thompson sampling over one run-length filter per
    arm (E3.4): final regret beside the authors'.
``bocd-segments`` (:mod:`skfilter.benchmarks.bocd_segments`)
    Piecewise-polynomial segmentation (E3.5): RMSE of one-step predictions and number of detected
    changepoints for RL[K]-PR, RL[K]-MMPR and RL[1]-OUPR*.
``bocd-wolf`` (:mod:`skfilter.benchmarks.bocd_wolf`)
    Heavy-tailed piecewise regression with WoLF inside BOCD (thesis §4.7.4): RMSE, detected
    changepoints, rolling RMSE and the run-length posterior heat-map.
``bocd-cost`` (:mod:`skfilter.benchmarks.bocd_cost`)
    µs per step of K = 10 against K = 1 run-length hypotheses over LoFi and the diagonal EKF on
    the concrete MLP (``P = 501``).

``bo`` (:mod:`skfilter.benchmarks.bo`)
    Bayesian optimisation on Ackley 2/5/10-D, Branin and Hartmann-6 with filter surrogates against a
    Matérn-5/2 Gaussian process (:class:`skfilter.decision.BayesianOptimizer`): best value and time.
``bandit`` (:mod:`skfilter.benchmarks.bandit`)
    The digits contextual bandit (:class:`skfilter.decision.ContextualBandit`): cumulative reward and
    time of predictive sampling, Thompson sampling and ε-greedy, and an ε-greedy Adam baseline.

``subspace`` (:mod:`skfilter.benchmarks.subspace`)
    The thesis' §5.5 showdown on a digits CNN stream: subspace EKF, PULSE and LoFi over the subspace
    dimension / rank ``d`` (EWMA accuracy, last-pass misclassification against run time), and the
    time per step and state memory of each against the full EKF on MLPs of growing size.
``factorization-sim`` (:mod:`skfilter.benchmarks.factorization_sim`)
    The DEKF paper's simulations (Gómez-Uribe & Karrer, §5): Bernoulli regression, MF and TF,
    static and drifting; cumulative mean absolute error of the DEKF (Alg. 1, Alg. 2 with learned or
    fixed references) against diagonal AdaGrad, and the regret of Thompson sampling, greedy and random
    recommendation normalised by random's.
``factorization-peers`` (:mod:`skfilter.benchmarks.factorization`)
    ``FactorizationRegressor``/``FactorizationClassifier`` (``'mf'``, ``'fm'``) against river's online
    FM, scikit-surprise's batch SVD and a global mean on simulated rating and click streams:
    one-step-ahead RMSE / log-loss, ±2σ coverage, time per event.
``factorization-scale`` (:mod:`skfilter.benchmarks.factorization_scale`)
    Events per second and memory (the belief's bytes, peak RSS) of the DEKF on a large sparse MF
    stream (10⁵ users × 10⁴ items).

A command module exposes ``HELP`` (one line), ``add_arguments(parser)`` and ``main(args)`` (``args``
an :class:`argparse.Namespace`; returns an exit status). Adding a benchmark (e.g. the LoFi paper's UCI
benchmark, ``uci``) means writing such a module and adding its name to :data:`COMMANDS`.
Every command prints its tables with pandas and tabulate (the ``dev`` extra); matplotlib, tqdm and the
other optional dependencies are imported only by the commands that need them. The shared helpers
(``_common``: streams, threads, timing, environment record, tables, files) build on threadpoolctl,
:mod:`timeit`, :func:`skfilter.show_versions`, pandas and joblib.
``python -m skfilter.benchmarks`` runs a command with at most its ``--threads`` (default 1) threads in
torch and the BLAS/OpenMP pools, restored afterwards.
"""

#: command name -> module (relative to this package) implementing it
COMMANDS = {
    "demo": ".demo",
    "speed": ".speed",
    "uci": ".uci",
    "defaults": ".defaults",
    "calibration": ".calibration",
    "prior-rows": ".prior_rows",
    "wolf-tracking": ".wolf_tracking",
    "wolf-uci": ".wolf_uci",
    "wolf-1d": ".wolf_1d",
    "wolf-labels": ".wolf_labels",
    "inbetween": ".inbetween",
    "bocd-drift": ".bocd_drift",
    "bocd-jumps": ".bocd_jumps",
    "bocd-bandit": ".bocd_bandit",
    "bocd-segments": ".bocd_segments",
    "bocd-wolf": ".bocd_wolf",
    "bocd-cost": ".bocd_cost",
    "bo": ".bo",
    "bandit": ".bandit",
    "subspace": ".subspace",
    "factorization-sim": ".factorization_sim",
    "factorization-peers": ".factorization",
    "factorization-scale": ".factorization_scale",
}

__all__ = ["COMMANDS"]
