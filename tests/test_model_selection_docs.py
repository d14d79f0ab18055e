"""The code of doc/model_selection.md runs as written (its blocks in order, one namespace), and
does what the page says: the halving rounds' prefixes and a scaled regressor in ``y``'s units."""

from __future__ import annotations

import pathlib
import re

import numpy as np

PAGE = pathlib.Path(__file__).resolve().parents[1] / "doc" / "model_selection.md"


def test_model_selection_page_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 3
    namespace: dict = {}
    exec(compile("\n".join(blocks), str(PAGE), "exec"), namespace)  # noqa: S102 - our own documentation
    assert namespace["halving"].n_resources_ == [50, 100, 200, 400]
    assert namespace["halving"].n_candidates_ == [8, 4, 2, 1]
    mean, std = namespace["mean"], namespace["std"]
    y_raw = namespace["y_raw"]
    assert np.sqrt(np.mean((mean - y_raw[400:]) ** 2)) < 0.3 * y_raw.std()  # in the units of y_raw
    assert np.all(std > 0) and namespace["draws"].shape == (5, 3)
    assert namespace["stream"].n_features_in_ == 3
    np.testing.assert_allclose(namespace["stream"].offset_, [y_raw[:50].mean()])
    assert "[50, 100, 200, 400]" in capsys.readouterr().out
