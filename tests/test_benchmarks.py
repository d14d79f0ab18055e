"""Smoke tests of ``python -m skfilter.benchmarks`` (not timed: they check that the commands run)."""

import json
import math

import numpy as np
import pytest

from skfilter.benchmarks import COMMANDS, _common, demo, speed
from skfilter.benchmarks.__main__ import build_parser, main


def test_demo_quick_writes_figure_and_table(tmp_path):
    pytest.importorskip("matplotlib")
    res = demo.run_demo(n_rows=60, out=tmp_path / "out", quick=True, verbose=False)
    names = [r["method"] for r in res.rows]
    assert names == ["EKF full", "EKF vd", "EKF fd", "LoFi rank 10", "MLPRegressor.partial_fit", "SGDRegressor.partial_fit"]
    for key in ("figure", "csv", "markdown"):
        assert res.paths[key].is_file() and res.paths[key].stat().st_size > 0
    assert res.paths["figure"].name == "prequential_concrete.png"
    for r in res.rows:
        assert r["error"] is None, r
        assert r["n_rows"] == 60
        for key in ("rmse", "rmse_after_warmup", "nlpd", "us_per_step", "ratio_vs_mlp"):
            assert math.isfinite(r[key]) and (key == "nlpd" or r[key] > 0), (key, r)
        # honest uncertainty next to the RMSE: ±2σ coverage and interval width (skfilter.metrics)
        assert 0.0 <= r["coverage_2std"] <= 1.0 and r["width_2std"] > 0, r
    csv_text = res.paths["csv"].read_text()
    assert csv_text.splitlines()[0].startswith("method,rmse,nlpd,coverage_2std,width_2std")
    md_header = res.paths["markdown"].read_text().splitlines()[2]
    assert "RMSE [MPa]" in md_header and "NLPD" in md_header and "±2σ cover" in md_header
    assert "±2σ cover" in res.table
    assert "EKF full" in res.paths["markdown"].read_text()
    # predictions are in MPa (the target's units), one per row
    run = res.runs["EKF full"]
    assert run["mean"].shape == (60,) and np.all(run["std"] > 0)


def test_demo_cli_without_figure(tmp_path, capsys):
    import torch

    threads = torch.get_num_threads()
    assert main(["demo", "--quick", "--n-rows", "30", "--out", str(tmp_path), "--no-figure"]) == 0
    out = capsys.readouterr().out
    assert "RMSE [MPa]" in out and "EKF full" in out and "NLPD" in out and "±2σ cover" in out
    assert (tmp_path / "prequential_concrete.csv").is_file()
    assert not (tmp_path / "prequential_concrete.png").exists()
    assert torch.get_num_threads() == threads  # --threads is undone after the command


def test_demo_score_uses_the_metrics_and_survives_bad_predictions():
    from skfilter.metrics import gaussian_nlpd, interval_coverage, mean_interval_width

    stream = _common.load_stream("concrete", n_rows=30, seed=0)
    rng = np.random.default_rng(0)
    mean = stream.y_raw + rng.normal(size=30)
    std = np.full(30, 1.5)
    row = demo.score({"error": None, "seconds": 1.0, "mean": mean, "std": std, "has_variance": True}, stream)
    assert row["nlpd"] == gaussian_nlpd(stream.y_raw, mean, std)
    assert row["coverage_2std"] == interval_coverage(stream.y_raw, mean, std, n_std=2.0)
    assert row["width_2std"] == mean_interval_width(std) == 6.0
    bad = demo.score({"error": None, "seconds": 1.0, "mean": mean, "std": np.zeros(30), "has_variance": True},
                     stream)
    assert math.isnan(bad["nlpd"]) and math.isnan(bad["coverage_2std"]) and math.isfinite(bad["rmse"])
    failed = demo.score({"error": "diverged", "seconds": 1.0}, stream)
    assert math.isnan(failed["coverage_2std"]) and math.isnan(failed["nlpd"])


def test_speed_tiny_returns_finite_numbers(tmp_path):
    path = tmp_path / "speed.json"
    res = speed.run_speed(n_rows=4, repeats=1, verbose=False, json_path=path, suites=["concrete"])
    names = [r["config"] for r in res["results"]]
    assert names == ["MLPRegressor.partial_fit"] + [c.name for c in speed.CONFIGS]
    for r in res["results"]:
        assert r["error"] is None, r
        for key in ("us_per_row", "us_per_step", "ratio_vs_mlp"):
            assert math.isfinite(r[key]) and r[key] > 0, (key, r)
        assert r["n_params"] == 501
    saved = json.loads(path.read_text())
    assert {"environment", "settings", "results"} <= set(saved)
    assert saved["results"][1]["config"] == "EKF full" and saved["results"][1]["target_us"] == 200.0


def test_speed_cli_parses_and_rejects_unknown_config(tmp_path, capsys):
    args = build_parser().parse_args(["speed", "--n-rows", "3", "--repeats", "1", "--dtype", "float32",
                                      "--only", "EKF vd", "--no-baseline"])
    assert (args.n_rows, args.repeats, args.dtype, args.only) == (3, 1, "float32", ["EKF vd"])
    assert main(["speed", "--n-rows", "2", "--repeats", "1", "--only", "EKF vd", "--no-baseline",
                 "--json", str(tmp_path / "s.json")]) == 0
    assert [r["config"] for r in json.loads((tmp_path / "s.json").read_text())["results"]] == ["EKF vd"]
    assert main(["speed", "--only", "no-such-config"]) == 2
    assert "unknown configuration" in capsys.readouterr().out


def test_speed_mnist_network_on_a_small_classifier():
    """The ``--network mnist`` path (784-d stream, ten classes, MLPClassifier baseline) with a
    narrow network, so that it runs in a unit test; the real configuration is MNIST_CONFIGS."""
    stream = speed.synthetic_image_stream(60, seed=1)
    assert stream.X.shape == (60, 784) and set(stream.y[:10]) == set(range(10))
    cfg = speed.lofi_classifier_config(2, 0.01, hidden=(6,))
    res = speed.run_speed(configs=[cfg], n_rows=3, repeats=1, verbose=False, network="mnist")
    rows = {r["config"]: r for r in res["results"]}
    assert set(rows) == {"LoFi r2 clf", "MLPClassifier.partial_fit", "MLPRegressor.partial_fit"}
    assert rows["LoFi r2 clf"]["error"] is None and rows["LoFi r2 clf"]["n_params"] == 785 * 6 + 7 * 10
    assert math.isfinite(rows["LoFi r2 clf"]["ratio_vs_mlp"])
    assert res["settings"]["suites"] == ["mnist"] and "784-500-500-10" in res["settings"]["mnist_model"]
    assert speed.MNIST_CONFIGS[0].make("cpu", "float64", 0, 1).hidden_layer_sizes == (500, 500)
    # against the products' floor, and in float32 against the run's dtype
    floored = speed.lofi_classifier_config(2, 0.01, hidden=(6,), relative_to=speed.MNIST_FLOOR_ROW,
                                           relative_target=1.3)
    single = speed.lofi_classifier_config(2, 0.01, hidden=(6,), dtype="float32", relative_to="LoFi r2 clf",
                                          relative_target=0.6)
    res = speed.run_speed(configs=[floored, single], n_rows=3, repeats=1, verbose=False, network="mnist",
                          baseline=False)
    rows = {r["config"]: r for r in res["results"]}
    assert set(rows) == {"LoFi r2 clf", "LoFi r2 clf float32", speed.MNIST_FLOOR_ROW}
    floor = rows[speed.MNIST_FLOOR_ROW]
    assert floor["n_params"] == 785 * 6 + 7 * 10 and floor["us_per_step"] > 0
    assert rows["LoFi r2 clf"]["ratio"] == pytest.approx(rows["LoFi r2 clf"]["us_per_step"] / floor["us_per_step"])
    assert rows["LoFi r2 clf float32"]["dtype"] == "float32" and rows["LoFi r2 clf"]["dtype"] == "float64"
    assert speed.MNIST_CONFIGS[1].make("cpu", "float64", 0, 1).dtype == "float32"
    with pytest.raises(ValueError, match="network"):
        speed.run_speed(network="imagenet", verbose=False)
    assert build_parser().parse_args(["speed", "--network", "mnist"]).network == "mnist"


def test_parser_lists_every_command():
    parser = build_parser()
    for name in COMMANDS:
        assert parser.parse_args([name]).command == name
    with pytest.raises(SystemExit):
        parser.parse_args([])


@pytest.mark.parametrize("argv", [["--help"]] + [[name, "--help"] for name in COMMANDS])
def test_every_help_text_prints(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m skfilter.benchmarks")
    if argv == ["--help"]:  # every command listed with its one-line help (a '%' in one once broke argparse)
        assert all(name in out for name in COMMANDS) and "10% target outliers" in out


def test_load_stream_standardises_on_the_warmup_prefix():
    s = _common.load_stream("concrete", n_rows=200, seed=0)
    assert s.X.shape == (200, 8) and s.n_warmup == 20
    np.testing.assert_allclose(s.X[:20].mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(s.y[:20].std(), 1)
    np.testing.assert_allclose(s.y * s.y_scale + s.y_mean, s.y_raw)
    # same order as the full stream's prefix
    full = _common.load_stream("concrete", seed=0)
    np.testing.assert_array_equal(full.order[:200], s.order)
    with pytest.raises(ValueError):
        _common.load_stream("concrete", n_rows=1)


def test_scores_and_table_helpers(tmp_path):
    from scipy.stats import norm

    y, m, s = np.array([0.0, 1.0, -2.0]), np.array([0.5, 0.0, 0.0]), np.array([1.0, 2.0, 0.5])
    np.testing.assert_allclose(_common.gaussian_nlpd(y, m, s), -norm.logpdf(y, m, s))
    from skfilter.metrics import gaussian_nlpd

    assert gaussian_nlpd(y, m, s) == pytest.approx(np.mean(_common.gaussian_nlpd(y, m, s)), rel=1e-12)
    np.testing.assert_allclose(_common.running_rmse([3.0, 4.0]), [3.0, 5.0 / np.sqrt(2)])
    # σ_t uses only the errors before t, shrunk to the prior variance by one pseudo-row
    np.testing.assert_allclose(_common.running_residual_std([2.0, 4.0, 0.0], 1.0),
                               np.sqrt([1.0, 5.0 / 2, 21.0 / 3]))
    cols = [("name", "name", ""), ("v", "value", ".2f")]
    text = _common.format_table([{"name": "a", "v": 1.0}, {"name": "bb", "v": float("nan")}], cols)
    assert "1.00" in text and "—" in text
    head, rule, first, second = text.splitlines()
    assert rule.startswith("------") and first.startswith("a ") and first.endswith(" 1.00")  # numbers right-aligned
    assert len(head) == len(rule) == len(first) == len(second.rstrip())
    md = _common.format_table([{"name": "a", "v": 1.0}], cols, markdown=True)
    assert md.splitlines()[0].startswith("| name") and "---:" in md
    assert md.splitlines()[2] == "| a      |    1.00 |"
    csv = _common.write_csv(tmp_path / "t.csv", [{"name": "a", "v": 0.5}, {"name": "b", "v": None}], ["name", "v"])
    assert csv.read_text().splitlines() == ["name,v", "a,0.5", "b,"]


def test_calibration_benchmark_rows_and_markdown(tmp_path, capsys):
    from skfilter.benchmarks import calibration

    rows = calibration.run(["iris"], seeds=(0,), only={"EKFClassifier(fd)", "MLPClassifier"}, progress=None)
    assert [r["estimator"] for r in rows] == ["EKFClassifier(fd)", "MLPClassifier"]
    for r in rows:
        assert r["error"] == "" and 0 < r["own_log_loss"] < 1 and 0 <= r["own_ece"] <= 1
        assert r["ratio"] == pytest.approx(r["own_log_loss"] / r["cal_log_loss"])
    assert "1/1 skfilter classifiers" in calibration.summary(rows, target=100.0)
    out = tmp_path / "calibration.md"
    assert main(["calibration", "--quick", "--only", "EKFClassifier(fd)", "--markdown", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("<!-- generated by python -m skfilter.benchmarks calibration --quick")
    assert "| breast_cancer |" in text and "calibrated log-loss" in text
