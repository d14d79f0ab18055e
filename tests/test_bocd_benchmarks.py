"""Smoke tests of the BOCD / BONE benchmarks (issue 17): ``bocd-drift``, ``bocd-jumps``,
``bocd-bandit``, ``bocd-segments``, ``bocd-wolf``, ``bocd-cost``.

Tiny settings (short streams, few runs, one- or two-point grids) so that each runs in seconds. They
check the tables' rows and numbers, that the row-by-row stepper of the benchmarks gives the
estimators' own numbers, and qualitative claims of the thesis that can fail on these fixed seeds
(OUPR* beats RL[1]-PR on the periodic drift; OUPR* predicts the piecewise polynomial better than
the static filter and resets less than RL[1]-PR; WoLF+BOCD with the R/W² evidence resets less than
LG+BOCD and than WoLF+BOCD with the plain evidence on heavy tails; Thompson sampling beats a random
policy). Timings are not checked."""

import math

import numpy as np
import pytest
from sklearn.base import clone

from skfilter.benchmarks import COMMANDS
from skfilter.benchmarks import bocd_bandit, bocd_cost, bocd_drift, bocd_segments, bocd_wolf
from skfilter.benchmarks.__main__ import build_parser, main
from skfilter.benchmarks._bocd_common import Stepper, bocd, describe, linear_classifier, linear_regressor, tune

NAMES = ("bocd-drift", "bocd-jumps", "bocd-bandit", "bocd-segments", "bocd-wolf", "bocd-cost")


def _finite(row, keys):
    for k in keys:
        assert isinstance(row[k], float) and math.isfinite(row[k]), (k, row)


def test_commands_registered():
    for name in NAMES:
        assert name in COMMANDS
        assert build_parser().parse_args([name]).command == name
    args = build_parser().parse_args(["bocd-drift", "--runs", "3", "--sweep-ks", "1", "2"])
    assert args.runs == 3 and args.sweep_ks == [1, 2] and args.warmup_runs == 1


# -- shared helpers ---------------------------------------------------------------------------------
def test_linear_models_have_zero_prior_mean_and_no_intercept():
    X, y, _ = bocd_drift.periodic_drift(0, 40)
    clf = linear_classifier(2).fit(X, y)
    assert clf.n_params_ == 2  # no bias: the thesis' N(0, I_2) over the two coefficients
    reg = linear_regressor(2, prior_variance=2.0, obs_variance=1.0)
    reg.fit(np.zeros((1, 2)), [0.0])
    assert reg.n_params_ == 3  # (1, x, x²): the bias is the constant feature
    # prior N(0, 2 I); one row at x = 0 only informs the bias: variance 2·1/(2+1), slopes untouched
    np.testing.assert_allclose(np.asarray(reg.posterior_.marginal_variance()), [2.0, 2.0, 2.0 / 3.0], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(reg.posterior_.belief.mean), 0.0, atol=1e-15)


def test_stepper_matches_prequential_and_partial_fit():
    """The row-by-row stepper gives the estimators' prequential predictions and run lengths."""
    X, y, _ = bocd_drift.periodic_drift(1, 60)
    for est in (linear_classifier(2, process_noise=0.1), bocd(linear_classifier(2), 0.2, 3),
                bocd(linear_classifier(2), 0.3, 1, "ou"), bocd(linear_classifier(2), 0.0, 1, "cpp-ou")):
        ref = est.prequential_fit_predict(X, y, method="predict_proba", classes=[0, 1])
        st = Stepper(clone(est), X, y, classes=[0, 1])
        out = np.array([st.step(i) for i in range(len(y))])
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12)
    x, yr, _, _ = bocd_segments.make_stream(0)
    Xr = bocd_segments.features(x)[:40]
    yr = yr[:40]
    est = bocd_segments.make("RL[3]-PR")
    st = Stepper(bocd_segments.make("RL[3]-PR"), Xr, yr)
    for i in range(len(yr)):
        st.step(i)
        est.partial_fit(Xr[i:i + 1], yr[i:i + 1])
        np.testing.assert_array_equal(st.run_lengths, est.run_lengths_)
        np.testing.assert_allclose(st.log_posterior, est.runlength_log_posterior_, atol=1e-12)
        assert st.map_run_length == est.map_run_length_


def test_describe_and_tune():
    d = describe([1.0, 2.0, float("nan"), 3.0])
    assert d["failed"] == 1 and d["mean"] == 2.0 and d["median"] == 2.0 and d["max"] == 3.0
    best, score, scores = tune(lambda v: v, (3.0, float("nan"), 1.0, 1.0), lambda v: abs(v))
    assert best == 1.0 and score == 1.0 and len(scores) == 3
    with pytest.raises(RuntimeError):
        tune(lambda v: v, (1.0,), lambda v: float("nan"))


# -- drift / jumps ----------------------------------------------------------------------------------
TINY_GRIDS = {
    "C-ACI": ("q", (0.1,)),
    "CPP-OU": ("s", (1.0,)),
    "RL[1]-PR": ("π", (0.3, 0.4)),
    "RL[1]-OUPR*": ("π", (0.1, 0.2)),
}


def test_streams():
    X, y, theta = bocd_drift.periodic_drift(0)
    assert X.shape == (720, 2) and set(np.unique(y)) == {0, 1}
    np.testing.assert_allclose(np.linalg.norm(theta, axis=1), 10.0)
    np.testing.assert_allclose(theta[72], theta[0], atol=1e-12)  # 72 steps of 5° = one rotation
    X, y, theta = bocd_drift.drift_and_jumps(0)
    assert X.shape == (720, 2) and np.all(np.abs(theta) <= 2.0 + 0.5)


def test_drift_tiny_and_oupr_beats_rl1_pr():
    rows, sweep, tuning = bocd_drift.run("drift", runs=2, sweep_runs=1, sweep_ks=(1, 2), sweep_hazards=(0.3,),
                                         n_steps=150, grids=TINY_GRIDS, progress=None)
    by = {r["method"]: r for r in rows}
    assert list(by) == list(bocd_drift.METHODS)
    for r in rows:
        _finite(r, ("warmup", "mean", "sd", "median", "authors"))
        assert r["failed"] == 0 and 0.0 <= r["mean"] <= 1.0 and r["verdict"] in ("better", "match", "worse")
    assert [s["K"] for s in sweep] == ["RL[1]-PR", "RL[2]-PR"] and all(0 <= s["h=0.3"] <= 1 for s in sweep)
    assert set(tuning["RL[1]-PR"]) == {0.3, 0.4}
    # the thesis' claim (fact 27): RL[1]-OUPR* below RL[1]-PR, and below the authors' 0.146 + a margin
    assert by["RL[1]-OUPR*"]["mean"] < by["RL[1]-PR"]["mean"]
    assert by["RL[1]-OUPR*"]["mean"] < 0.2


def test_jumps_command_tiny(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bocd_drift, "GRIDS", TINY_GRIDS)
    assert main(["bocd-jumps", "--runs", "2", "--sweep-runs", "1", "--sweep-ks", "1", "--sweep-hazards", "0.1",
                 "--steps", "120", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "bocd_jumps_table.md").read_text()
    for method in bocd_drift.METHODS:
        assert f"| {method}" in text
    assert "0.235" in text and "RL[1]-PR" in capsys.readouterr().out


# -- bandit -----------------------------------------------------------------------------------------
def test_bandit_stepper_equals_partial_fit():
    """Thompson sampling's per-arm states are those of a BOCDClassifier fed the arm's rewards."""
    mu, rewards = bocd_bandit.make_bandit(3, 40)
    regret, pseudo, arms = bocd_bandit.thompson(bocd_bandit.make("RL[1]-OUPR*", 0.05), mu, rewards, 3)
    assert regret.shape == (40,) and np.all(np.diff(pseudo) >= -1e-12)
    a = int(np.bincount(arms).argmax())
    est = bocd_bandit.make("RL[1]-OUPR*", 0.05)
    steps = np.nonzero(arms == a)[0]
    for i, t in enumerate(steps):
        if i == 0:
            est.partial_fit([[0.0]], [rewards[t, a]], classes=[0, 1])
        else:
            est.partial_fit([[0.0]], [rewards[t, a]])
    # replay the same arm through the stepper
    st = Stepper(bocd_bandit.make("RL[1]-OUPR*", 0.05), np.zeros((2, 1)), np.array([0, 1]), classes=[0, 1])
    for t in steps:
        st.learn(st.X[:1], st.Y[int(rewards[t, a]):int(rewards[t, a]) + 1])
    np.testing.assert_allclose(st.mean_variance()[0], est.runlength_state_.filter.belief.mean[0].numpy(), atol=1e-12)


def test_bandit_command_tiny(tmp_path, monkeypatch):
    monkeypatch.setattr(bocd_bandit, "GRIDS", {m: (n, g[:1]) for m, (n, g) in bocd_bandit.GRIDS.items()})
    rows, curves = bocd_bandit.run(runs=2, n_steps=300, warmup_steps=50, progress=None)
    assert [r["method"] for r in rows] == list(bocd_bandit.METHODS)
    for r in rows:
        _finite(r, ("regret", "pseudo", "us_step"))
        assert curves[r["method"]].shape == (300,)
    # Thompson sampling beats playing arms at random (expected pseudo-regret of the uniform policy)
    random_pseudo = np.mean([np.sum(mu.max(1) - mu.mean(1)) for mu, _ in
                             (bocd_bandit.make_bandit(s, 300) for s in range(2))])
    for r in rows:
        assert r["pseudo"] < 0.7 * random_pseudo, (r["method"], r["pseudo"], random_pseudo)
    assert main(["bocd-bandit", "--runs", "1", "--steps", "100", "--warmup-steps", "30", "--no-figure",
                 "--out", str(tmp_path)]) == 0
    assert "2366.68" in (tmp_path / "bocd_bandit_table.md").read_text()


# -- segments ---------------------------------------------------------------------------------------
def test_segments_stream_is_continuous():
    x, y, mean, starts = bocd_segments.make_stream(314)
    assert np.all(np.diff(x) >= 0) and len(starts) == bocd_segments.N_SEGMENTS - 1
    jumps = np.abs(np.diff(mean))
    assert np.all(jumps[starts - 1] < 2.0)  # the curve is continuous at the segment boundaries


def test_segments_tiny(tmp_path):
    rows = bocd_segments.run(trials=3, ks=(2,), progress=None)
    by = {r["method"]: r for r in rows}
    assert list(by) == bocd_segments.methods_for((2,))
    for r in rows:
        _finite(r, ("rmse", "rmse_sd", "rmse_median", "rmse_max"))
    # plain features: the moment-matched restart is the kept belief itself, RL[K]-MMPR = C-Static
    assert by["RL[1]-MMPR"]["rmse"] == pytest.approx(by["C-Static"]["rmse"], rel=1e-9)
    assert by["RL[2]-MMPR"]["rmse"] == pytest.approx(by["C-Static"]["rmse"], rel=1e-9)
    assert by["RL[1]-MMPR"]["cp_mean"] == 0.0
    # the thesis' claims that survive the plain features: OUPR* predicts best, resets less than PR
    assert by["RL[1]-OUPR*"]["rmse"] < by["C-Static"]["rmse"]
    assert by["RL[1]-OUPR*"]["rmse"] < by["RL[1]-PR"]["rmse"]
    assert by["RL[1]-OUPR*"]["cp_mean"] < by["RL[1]-PR"]["cp_mean"]


# -- WoLF + BOCD ------------------------------------------------------------------------------------
def test_wolf_tiny_and_heatmap(tmp_path):
    rows, rolling = bocd_wolf.run(runs=3, n_steps=200, progress=None)
    by = {r["method"]: r for r in rows}
    assert list(by) == list(bocd_wolf.METHODS)
    for r in rows:
        _finite(r, ("rmse", "rmse_median", "rmse_mean", "jumps"))
        assert rolling[r["method"]].shape == (200,)
    # heavy tails: BOCD over the Gaussian filter over-segments; WoLF with the R/W² evidence does not
    weighted = by["WoLF+RL[inf]-PR* (evidence R/W²)"]
    assert weighted["cp"] < by["LG+RL[inf]-PR"]["cp"]
    assert weighted["cp"] < by["WoLF+RL[inf]-PR* (evidence R)"]["cp"]
    assert weighted["rmse_mean"] < by["LG+RL[inf]-PR"]["rmse_mean"]
    # without a weighting the two evidences agree; the estimators default to the weighted one
    x, y, _, _ = bocd_wolf.make_stream(1, 40)
    base = bocd_wolf.make("LG+C-Static")
    plain = bocd_wolf.run_one(bocd(base, 0.01, None, "prior", evidence="plain"), x, y)
    weighted_lg = bocd_wolf.run_one(bocd(clone(base), 0.01, None, "prior", evidence="weighted"), x, y)
    np.testing.assert_allclose(weighted_lg[0], plain[0], rtol=0, atol=1e-12)
    assert bocd_wolf.make("WoLF+RL[inf]-PR* (evidence R/W²)").get_params()["evidence"] == "weighted"
    # the heat-map's columns are normalised run-length posteriors
    x, y, _, _ = bocd_wolf.make_stream(0, 30)
    rls, lps, maps = bocd_wolf.runlength_trace("LG+RL[inf]-PR", x, y)
    assert len(rls) == 30 and all(np.isclose(np.exp(lp).sum(), 1.0) for lp in lps)
    M = bocd_wolf.heatmap_matrix(rls, lps)
    assert M.shape[1] == 30 and np.all(M <= 1e-12)
    np.testing.assert_allclose(bocd_wolf.rolling_rmse([3.0, 4.0], window=2), [3.0, np.sqrt(12.5)])
    path = bocd_wolf.plot_runlength(tmp_path / "img" / "rl.png", 0, 40)
    assert path.exists() and path.stat().st_size > 1000


# -- cost -------------------------------------------------------------------------------------------
def test_cost_tiny():
    rows = bocd_cost.run(n_rows=3, repeats=1, progress=None)
    assert [r["structure"] for r in rows] == list(bocd_cost.bases())
    for r in rows:
        _finite(r, ("base_us", "k1_us", "k10_us", "ratio"))
        assert r["n_params"] == 501
