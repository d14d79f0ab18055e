"""Datasets for examples, benchmarks and tests.

The UCI ``concrete`` regression set (1,030 rows, 8 inputs, with the 20 standard train/test splits of
the UCI uncertainty benchmark) ships with the package. The other sets of that benchmark are read from
a folder in the same layout (``data.txt``, ``index_features.txt``, ``index_target.txt``,
``index_train_k.txt``, ``index_test_k.txt``, ``n_splits.txt``), given as ``data_home`` or by the
``SKFILTER_DATA_HOME`` environment variable; they are published at :data:`UCI_SOURCE` (the files of
``UCI_Datasets/<name>/data/`` go into ``<data_home>/<name>/``). :func:`check_uci_data` says which are
missing and how to get them.
"""

from ._uci import UCI_DATASETS, UCI_FILES, UCI_SOURCE, check_uci_data, default_data_home, load_uci, uci_n_splits

__all__ = ["UCI_DATASETS", "UCI_FILES", "UCI_SOURCE", "check_uci_data", "default_data_home", "load_uci",
           "uci_n_splits"]
