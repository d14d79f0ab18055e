"""The scripts of ``examples/`` run and write their outputs only under an output folder."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))


def _run(script, cwd, *args):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_and_writes_only_under_examples_output(script, tmp_path):
    pytest.importorskip("matplotlib")
    proc = _run(script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert all(w.startswith("examples_output/") for w in written), written


def test_plot_example_writes_its_figure_under_out(tmp_path):
    pytest.importorskip("matplotlib")
    proc = _run(EXAMPLES[0].parent / "plot_prequential_regression.py", tmp_path, "--out", "figs")
    assert proc.returncode == 0, proc.stderr
    figure = tmp_path / "figs" / "prequential_regression.png"
    assert figure.is_file() and figure.stat().st_size > 0
    assert [p.name for p in tmp_path.iterdir()] == ["figs"]
