"""Which columns of ``X`` hold entity ids under ``entity_columns='auto'``: the rule and its warning.

A factorization model reads each column of ``X`` either as **entity ids** (a user, an item, … —
one block of parameters per distinct value) or as **numeric context** (a feature multiplying a
weight). ``entity_columns='auto'`` decides per column by its type (an object column by the types
of its values), never by the values themselves:

=====================================================  ===============  ================================
column                                                 read as          e.g.
=====================================================  ===============  ================================
integer dtype (NumPy ``int``/``uint``, pandas         ids              user and item ids in an integer
``Int64``, …)                                                           array; MovieLens' ``userId``
string, pandas ``category``, dates; object column      ids              ``'u17'``, ``pd.Categorical``
of strings or other non-numbers
object column whose values are all integers            ids              a list of lists of ints
float dtype; boolean; object column holding a float    numeric context  a price, a 0/1 flag
=====================================================  ===============  ================================

So ``np.array([[user, item], …])`` of integers is a matrix of ids, as a recommender user writes it,
and a float column is never read as ids unless ``entity_columns`` names it. A quantity stored as
integers (a time stamp, a count) is read as ids too: cast it to float, or name the id columns. A
NumPy array has one dtype for all its columns: stacking integer ids with a float feature
(``np.column_stack``) makes every column float, i.e. context — name the id columns
(``entity_columns=[0, 1]``) or use a DataFrame, whose columns keep their types.

That last case is ambiguous, and the estimators warn about it
(:class:`~skfilter.exceptions.EntityColumnsWarning`): a **float column that looks like ids** — every
value a non-negative whole number, at least :data:`MIN_LEVELS` distinct values — stays numeric
context, with a warning, once per stream. It is judged on the rows that fix the columns (a stream's first call, or
its first ``n_prior_rows`` rows while they arrive). A float feature of whole numbers (a count, a
year) warns too: naming the columns (``entity_columns=[…]``, or ``None`` for none) decides and
silences it.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["column_kind", "entity_column_roles", "ambiguity_message"]

#: a float column of whole numbers with at least this many distinct values warns: ``{0, 1}``
#: indicators (one-hot context) are the same model whichever way they are read
MIN_LEVELS = 3


def _object_kind(values) -> str:
    """How an object column is read, by its values: every value an integer (not a bool) → ids;
    every value a real number, one of them not an integer (or a bool) → ``'context'``; anything
    else (strings, ``None``, tuples, …) → ids."""
    integral = True
    for v in values:
        if isinstance(v, (bool, np.bool_)):
            integral = False
        elif isinstance(v, (numbers.Integral, np.integer)):
            continue
        elif isinstance(v, (numbers.Real, np.floating)):
            integral = False
        else:
            return "ids"
    return "ids" if integral else "context"


def column_kind(column, dtype) -> str:
    """``'ids'`` or ``'context'``: how ``entity_columns='auto'`` reads one column (module docstring).

    Parameters
    ----------
    column : array-like of shape (n_samples,)
        The column's values (a NumPy column or a pandas Series).
    dtype : numpy or pandas dtype
        Its dtype (a DataFrame column's own, a NumPy array's).

    Returns
    -------
    kind : {'ids', 'context'}

    Examples
    --------
    >>> import numpy as np
    >>> column_kind(np.array([3, 1, 3]), np.dtype(int)), column_kind(np.array([0.5, 2.0]), np.dtype(float))
    ('ids', 'context')
    """
    from pandas.api.types import is_bool_dtype, is_integer_dtype, is_numeric_dtype, is_object_dtype

    if is_bool_dtype(dtype):
        return "context"
    if is_integer_dtype(dtype):
        return "ids"
    if is_numeric_dtype(dtype):
        return "context"
    if is_object_dtype(dtype):
        return _object_kind(np.asarray(column, dtype=object).ravel())
    return "ids"  # strings, categoricals, dates


def _looks_like_ids(column) -> bool:
    """Whether a context column holds only non-negative whole numbers, at least :data:`MIN_LEVELS`
    distinct values (module docstring)."""
    import pandas as pd

    try:
        values = np.asarray(column, dtype=np.float64).ravel()
    except (TypeError, ValueError, OverflowError):  # the model's validation reports the column
        return False
    finite = values[np.isfinite(values)]
    if finite.size == 0 or finite.min() < 0 or not np.all(finite == np.round(finite)):
        return False
    return len(pd.unique(finite)) >= MIN_LEVELS


def entity_column_roles(X):
    """The positions of the columns ``entity_columns='auto'`` reads as ids, and the context columns
    that look like ids (module docstring).

    Parameters
    ----------
    X : pandas.DataFrame or ndarray of shape (n_samples, n_features)

    Returns
    -------
    positions : tuple of int
        The id columns, in order.
    ambiguous : tuple of int
        The columns read as numeric context whose values look like ids: non-negative whole
        numbers, at least :data:`MIN_LEVELS` distinct (the estimators warn about them with
        :class:`~skfilter.exceptions.EntityColumnsWarning`).

    Examples
    --------
    >>> import numpy as np
    >>> entity_column_roles(np.array([[0, 3], [1, 3], [0, 2]]))  # user and item ids in an int array
    ((0, 1), ())
    >>> ids_and_price = np.array([[0, 3, 9.5], [1, 1, 2.0], [2, 2, 4.0]])  # stacked: all float
    >>> entity_column_roles(ids_and_price)
    ((), (0, 1))
    """
    import pandas as pd

    if isinstance(X, pd.DataFrame):
        columns = [(X.iloc[:, j], X.dtypes.iloc[j]) for j in range(X.shape[1])]
    else:
        X = np.asarray(X)
        columns = [(X[:, j], X.dtype) for j in range(X.shape[1])]
    ids, ambiguous = [], []
    for j, (column, dtype) in enumerate(columns):
        if column_kind(column, dtype) == "ids":
            ids.append(j)
        elif _looks_like_ids(column):
            ambiguous.append(j)
    return tuple(ids), tuple(ambiguous)


def ambiguity_message(j) -> str:
    """The text of the :class:`~skfilter.exceptions.EntityColumnsWarning` about context column ``j``."""
    return (f"Column {j} is float but holds only whole numbers: entity_columns='auto' "
            "reads it as numeric context, not as entity ids. If it holds ids (e.g. integer ids stacked with a "
            "float feature into one float array), name the id columns with entity_columns (or pass integer ids "
            "in an integer array or a DataFrame column); entity_columns=None reads every column as context "
            "and silences this warning.")
