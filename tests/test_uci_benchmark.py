"""Smoke tests of ``python -m skfilter.benchmarks uci`` on a tiny configuration (bundled concrete)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

import skfilter.datasets
from skfilter.benchmarks import COMMANDS, uci
from skfilter.benchmarks.__main__ import main

BUNDLED = Path(skfilter.datasets.__file__).resolve().parent / "data"

try:  # the SGD baseline needs skorch, an optional dependency
    import skorch  # noqa: F401

    HAS_SKORCH = True
except ImportError:  # pragma: no cover
    HAS_SKORCH = False


def _tiny(out, *extra):
    return ["uci", "--data-home", str(BUNDLED), "--datasets", "concrete", "--splits", "1", "--n-train-max", "40",
            "--grid", "small", "--out", str(out), *extra]


def test_uci_is_registered():
    assert COMMANDS["uci"] == ".uci"


def test_uci_tiny_run_writes_tables_with_finite_numbers(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    methods = ["lofi-diag", "sgd-rb"] if HAS_SKORCH else ["lofi-diag"]
    assert main(_tiny(tmp_path, "--methods", *methods, "--ranks", "2")) == 0
    printed = capsys.readouterr().out
    assert "Test RMSE" in printed and "lofi-diag" in printed
    for name in ("results.jsonl", "search.jsonl", "results.csv", "summary.csv", "summary.json", "uci_results.md",
                 "uci_rmse_vs_rank_p1.png"):
        assert (tmp_path / name).is_file() and (tmp_path / name).stat().st_size > 0, name
    saved = json.loads((tmp_path / "summary.json").read_text())
    rows = {(r["method"], r["rank"]): r for r in saved["summary"]}
    assert set(rows) == {(m, "2") for m in methods}
    for r in rows.values():
        assert r["n_splits"] == 1 and r["n_failed"] == 0
        for key in ("rmse", "nlpd", "coverage", "us_per_step", "seconds_per_pass"):
            assert math.isfinite(r[key]), (key, r)
        assert 0.0 <= r["coverage"] <= 1.0
        assert r["rmse"] > 0 and r["us_per_step"] > 0
    assert rows[("lofi-diag", "2")]["paper_rmse"] == 8.54  # Table 3, concrete, 1 pass, rank 2
    # 4 filter trials (2 prior × 2 noise variances) and 2 learning rates, then one test run each
    assert len((tmp_path / "search.jsonl").read_text().splitlines()) == 4 + 2 * HAS_SKORCH
    runs = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(runs) == len(methods) and all(r["n_train"] == 40 and r["n_eval"] == 103 for r in runs)
    hp = {r["method"]: r["hp"] for r in runs}
    assert set(hp["lofi-diag"]) == {"prior_variance", "obs_variance"}
    assert not HAS_SKORCH or set(hp["sgd-rb"]) == {"lr"}
    md = (tmp_path / "uci_results.md").read_text()
    assert "(8.54 ± 1.15)" in md and "Chosen hyper-parameters" in md
    # ±2σ coverage and NLPD are reported next to the RMSE: tables, CSVs, terminal
    assert "### Test NLPD" in md and "### Test ±2σ coverage" in md
    assert "NLPD" in printed and "±2σ coverage" in printed
    assert {"rmse", "nlpd", "coverage"} <= set((tmp_path / "results.csv").read_text().splitlines()[0].split(","))
    assert {"nlpd", "nlpd_se", "coverage", "coverage_se"} <= set(
        (tmp_path / "summary.csv").read_text().splitlines()[0].split(","))
    assert all(0.0 <= r["coverage"] <= 1.0 for r in runs)


def test_uci_resumes_from_partial_results(tmp_path, capsys):
    args = _tiny(tmp_path, "--methods", "fdekf", "--no-figure")
    assert main(args) == 0
    first = (tmp_path / "results.jsonl").read_text()
    capsys.readouterr()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "search: 4 runs, 4 already cached, 0 to do" in out and "test runs: 1 runs, 1 already cached, 0 to do" in out
    assert (tmp_path / "results.jsonl").read_text() == first
    assert main([*args, "--fresh"]) == 0  # --fresh recomputes everything
    assert "4 runs, 0 already cached, 4 to do" in capsys.readouterr().out


def test_uci_killed_run_resumes_without_recomputing_finished_runs(tmp_path, monkeypatch, capsys):
    args = _tiny(tmp_path, "--methods", "fdekf", "--no-figure")
    calls, kill_at = [], [3]
    fit_and_score = uci._fit_and_score

    def killed_at_third_trial(*a, **k):
        calls.append(a[1])
        if len(calls) == kill_at[0]:
            raise KeyboardInterrupt  # the process is stopped in the middle of the search
        return fit_and_score(*a, **k)

    monkeypatch.setattr(uci, "_fit_and_score", killed_at_third_trial)
    with pytest.raises(KeyboardInterrupt):
        main(args)
    calls.clear()
    kill_at[0] = None
    capsys.readouterr()
    assert main(args) == 0
    assert "search: 4 runs, 2 already cached, 2 to do" in capsys.readouterr().out
    # the two trials finished before the kill are loaded: only the two others and the test run are fitted
    assert len(calls) == 3
    assert len((tmp_path / "search.jsonl").read_text().splitlines()) == 4


def test_uci_report_only_runs_nothing(tmp_path, capsys):
    assert main(_tiny(tmp_path, "--methods", "fdekf", "--no-figure")) == 0
    lines = (tmp_path / "search.jsonl").read_text(), (tmp_path / "results.jsonl").read_text()
    capsys.readouterr()
    assert main(_tiny(tmp_path, "--methods", "fdekf", "vdekf", "--no-figure", "--report-only")) == 0
    assert "search: 8 runs, 4 cached, 4 missing (report only: not run)" in capsys.readouterr().out
    assert ((tmp_path / "search.jsonl").read_text(), (tmp_path / "results.jsonl").read_text()) == lines
    rows = json.loads((tmp_path / "summary.json").read_text())["summary"]
    assert [r["method"] for r in rows] == ["fdekf"]


def test_uci_rejects_unknown_dataset(tmp_path, capsys):
    assert main(["uci", "--datasets", "no-such-set", "--out", str(tmp_path)]) == 2
    assert "unknown dataset" in capsys.readouterr().out


def test_configs_grid_and_helpers():
    cfgs = uci.make_configs(["fcekf", "sgd-rb", "lofi-diag", "fdekf"], [10, 1])
    assert [c.label for c in cfgs] == ["fdekf", "lofi-diag-1", "sgd-rb-1", "lofi-diag-10", "sgd-rb-10", "fcekf"]
    assert [c.rank_label for c in cfgs][0::5] == ["0", "full"]
    assert len(uci.grid_points(uci.Config("lofi-sph", 5), "default")) == 25
    assert len(uci.grid_points(uci.Config("sgd-rb", 5), "default")) == 8
    with pytest.raises(ValueError):
        uci.make_configs(["nope"], [1])
    assert uci._num(7.333) == "7.33" and uci._num(0.0912) == "0.0912" and uci._num(0.00123) == "0.00123"
    assert uci._num(0.004, ref=0.0912) == "0.0040"


def test_prepare_split_standardises_on_the_rows_learned():
    d = uci.prepare_split("concrete", 0, BUNDLED, n_train_max=100, validation_fraction=0.2)
    assert d["X"].shape == (80, 8) and d["X_eval"].shape == (20, 8)
    np.testing.assert_allclose(d["X"].mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(d["y"].std(), 1)
    test = uci.prepare_split("concrete", 0, BUNDLED)
    assert test["X"].shape == (927, 8) and test["X_eval"].shape == (103, 8)


@pytest.mark.skipif(not HAS_SKORCH, reason="the SGD baseline needs skorch")
def test_diverging_winner_falls_back_to_the_runner_up():
    task = {"dataset": "concrete", "split": 0, "method": "sgd-rb", "rank": 2, "passes": 1, "hp": {"lr": 1e3},
            "fallback_hps": [{"lr": 1e2}, {"lr": 1e-3}], "seed": 0, "data_home": str(BUNDLED), "n_train_max": 30,
            "validation_fraction": None, "threads": 1, "kind": "test", "key": "k"}
    rec = uci.evaluate(task)
    assert rec["error"] is None and rec["hp_rank"] == 2 and rec["hp_used"] == {"lr": 1e-3}
    assert rec["hp"] == {"lr": 1e3} and rec["n_fallbacks"] == 2 and math.isfinite(rec["rmse"])
    rec = uci.evaluate({**task, "fallback_hps": []})
    assert rec["error"].startswith("diverged") and math.isnan(rec["rmse"])


def test_uci_missing_data_folder_says_how_to_get_the_files(tmp_path, capsys):
    missing = tmp_path / "no-such-folder"
    assert main(["uci", "--quick", "--data-home", str(missing), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "concrete, yacht" in err and str(missing) in err
    for needed in ("data.txt", "index_features.txt", "index_target.txt", "n_splits.txt", "index_train_k.txt",
                   "--data-home", "SKFILTER_DATA_HOME", skfilter.datasets.UCI_SOURCE):
        assert needed in err, needed
    assert not (tmp_path / "out").exists()  # nothing run


def test_uci_quick_without_shared_data_exits_2(tmp_path, capsys, monkeypatch):
    # the layout of an installed package: no ../shared, no SKFILTER_DATA_HOME; only concrete is bundled
    import skfilter.datasets._uci as _uci

    monkeypatch.setattr(_uci, "default_data_home", lambda: None)
    monkeypatch.setattr(skfilter.datasets, "default_data_home", lambda: None)
    assert main(["uci", "--quick", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "yacht" in err and "concrete," not in err and "--datasets concrete" in err
    with pytest.raises(FileNotFoundError, match="SKFILTER_DATA_HOME"):
        skfilter.datasets.load_uci("yacht")
    skfilter.datasets.check_uci_data("concrete")  # bundled
    with pytest.raises(ValueError, match="Unknown"):
        skfilter.datasets.check_uci_data(["nope"])


def test_paper_tables_read_from_their_csv_text():
    from skfilter.benchmarks._uci_paper import paper_rmse, paper_seconds

    assert paper_rmse("concrete", "lofi-diag", 2, 1) == (8.54, 1.15)  # Table 3
    assert paper_rmse("yacht", "fcekf", None, 10) == (1.19, 0.27)  # Table 4, the "full" row
    assert paper_rmse("naval-propulsion-plant", "lrvga", 1, 1) is None  # an empty cell of the paper
    assert paper_rmse("concrete", "lofi-diag", 3, 1) is None and paper_rmse("protein-tertiary-structure",
                                                                              "fcekf", None, 1) is None
    assert paper_seconds("kin8nm", "lofi-sph", 50) == 19.59 and paper_seconds("concrete", "fdekf", None) is None
    assert all(isinstance(v, float) for v in paper_rmse("energy", "vdekf", None, 50))
