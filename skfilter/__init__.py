"""skfilter: scikit-learn compatible Bayesian filters that learn neural networks online (PyTorch).

Estimators
----------
EKFRegressor, EKFClassifier
    Extended Kalman filters with full, VD-diagonal or FD-diagonal covariance.
"""

from .ekf import EKFClassifier, EKFRegressor
from .exceptions import FilterStepError

__version__ = "0.1.0.dev0"

__all__ = ["EKFRegressor", "EKFClassifier", "FilterStepError", "__version__"]
