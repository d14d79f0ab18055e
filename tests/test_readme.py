"""The README's code runs as printed: what a newcomer copies must work.

Each ``## section`` of README.md with ```` ```python ```` blocks is run as one script (blocks in order,
sharing a namespace, as the README says "continuing the snippet above"), in a temporary working
directory.
"""

import re
from pathlib import Path

import matplotlib
import numpy as np
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(section: str) -> list[str]:
    """The ```python blocks of README section ``## <section>`` (up to the next ``## ``)."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert match, f"README has no section '## {section}'"
    return re.findall(r"^```python\n(.*?)^```", match.group(1), flags=re.S | re.M)


@pytest.fixture
def in_tmp_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    matplotlib.use("Agg")
    yield tmp_path
    import matplotlib.pyplot as plt

    plt.close("all")


def test_first_steps_pipeline_band_figure_and_search_on_a_local_cluster(in_tmp_dir):
    pytest.importorskip("dask.distributed", reason="the dask extra (dev installs it) is not installed")
    blocks = python_blocks("First steps")
    assert len(blocks) == 2
    ns: dict = {"__name__": "__main__"}  # as when the snippets are saved and run as a script
    exec(compile(blocks[0], "README:first-steps-1", "exec"), ns)
    # a fitted LoFiRegressor inside a PartialPipeline, with an uncertainty-band figure on disk
    from skfilter import LoFiRegressor, PartialPipeline

    pipe = ns["pipe"]
    assert isinstance(pipe, PartialPipeline) and isinstance(pipe[-1], LoFiRegressor)
    assert pipe[-1].n_samples_seen_ == 600
    assert np.all(ns["std"] > 0)
    assert (in_tmp_dir / "band.png").stat().st_size > 5_000
    exec(compile(blocks[1], "README:first-steps-2", "exec"), ns)
    search = ns["search"]
    assert set(search.best_params_) == {"lofiregressor__rank", "lofiregressor__obs_variance"}
    assert np.isfinite(search.best_score_) and search.best_score_ > 0.5  # R² on sin(x) + noise


def test_quickstart_runs_and_prints_what_the_readme_says(in_tmp_dir, capsys):
    ns: dict = {}
    for i, block in enumerate(python_blocks("Quickstart")):
        exec(compile(block, f"README:quickstart-{i}", "exec"), ns)
    out = capsys.readouterr().out
    assert "current regime began at row 250" in out
    rmse = [float(v) for v in re.findall(r"RMSE against sin\(x\): ([0-9.]+)", out)]
    assert len(rmse) == 2 and rmse[1] < rmse[0]  # WoLF beats the plain EKF under outliers
