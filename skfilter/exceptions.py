"""Exceptions raised by skfilter."""


class FilterStepError(FloatingPointError):
    """A filter step produced non-finite values or lost positive-definiteness.

    The estimator keeps the belief it had after the last successful step; ``step`` is the
    zero-based index, within the call that failed, of the observation whose update failed.
    """

    def __init__(self, message, step=None):
        super().__init__(message)
        self.step = step
