"""Exceptions raised by skfilter."""


class FilterStepError(FloatingPointError):
    """A filter step produced non-finite values or lost positive-definiteness.

    The estimator keeps the belief it had after the last successful step.

    Attributes
    ----------
    step : int or None
        Zero-based index, within the pass over the data that failed (rows in the order of that
        pass), of the first row of the step whose update failed.
    rows_done : int or None
        Rows of that pass learned before the failure (equal to ``step``).
    """

    def __init__(self, message, step=None):
        super().__init__(message)
        self.step = step
        self.rows_done = step


class EntityColumnsWarning(UserWarning):
    """``entity_columns='auto'`` met a column it may read otherwise than meant.

    A factorization estimator (:class:`~skfilter.FactorizationRegressor`,
    :class:`~skfilter.FactorizationClassifier`) reads integer, string and categorical columns as
    entity ids and float columns as numeric context; it warns about a float column of non-negative
    whole numbers, which looks like ids (:mod:`skfilter.factorization.columns`). Naming the columns
    with ``entity_columns`` (or ``None``: no ids) silences it.
    """
