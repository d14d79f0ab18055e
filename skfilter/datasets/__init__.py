"""Datasets for examples, benchmarks and tests.

The UCI ``concrete`` regression set (1,030 rows, 8 inputs, with the 20 standard train/test splits of
the UCI uncertainty benchmark) ships with the package. The other sets of that benchmark are read from
a folder in the same layout (``data.txt``, ``index_features.txt``, ``index_target.txt``,
``index_train_k.txt``, ``index_test_k.txt``, ``n_splits.txt``), given as ``data_home``.
"""

from ._uci import UCI_DATASETS, default_data_home, load_uci, uci_n_splits

__all__ = ["UCI_DATASETS", "default_data_home", "load_uci", "uci_n_splits"]
