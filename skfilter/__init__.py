"""skfilter: scikit-learn compatible Bayesian filters that learn neural networks online (PyTorch).

Estimators
----------
EKFRegressor, EKFClassifier
    Extended Kalman filters with full, VD-diagonal or FD-diagonal covariance.
LoFiRegressor, LoFiClassifier
    LoFi: diagonal-plus-low-rank precision, cost linear in the number of parameters.
LRKFRegressor, LRKFClassifier, HiLoFiRegressor, HiLoFiClassifier, LoLoFiRegressor, LoLoFiClassifier
    Square-root low-rank covariance filters (LRKF over all weights; HiLoFi and LoLoFi with a
    separate last-layer block).
WoLFRegressor, WoLFClassifier
    Outlier-robust (weighted-likelihood) filtering over any of the above.
SubspaceRegressor, SubspaceClassifier, PULSERegressor, PULSEClassifier
    Filters in a low-dimensional subspace of the weights found by an Adam warm-up (the subspace EKF),
    or of the hidden layers with a full-covariance last layer (PULSE), for large networks.
FactorizationRegressor, FactorizationClassifier
    Matrix/tensor factorization, factorization machines and GLMs over entity ids (users, items, …)
    learned online by the decoupled EKF, with uncertainty, drift and new entities.
BOCDRegressor, BOCDClassifier
    Run-length mixtures (Bayesian online changepoint detection and the BONE family) over any of the
    above, for non-stationary streams.
"""

from .bocd import BOCDClassifier, BOCDRegressor
from .ekf import EKFClassifier, EKFRegressor
from .exceptions import FilterStepError
from .factorization import FactorizationClassifier, FactorizationRegressor
from .lofi import LoFiClassifier, LoFiRegressor
from .low_rank import (HiLoFiClassifier, HiLoFiRegressor, LoLoFiClassifier, LoLoFiRegressor, LRKFClassifier,
                       LRKFRegressor)
from .pipeline import PartialPipeline, make_partial_pipeline
from .subspace import PULSEClassifier, PULSERegressor, SubspaceClassifier, SubspaceRegressor
from ._show_versions import show_versions
from .wolf import WoLFClassifier, WoLFRegressor

__version__ = "0.1.0.dev0"

__all__ = ["EKFRegressor", "EKFClassifier", "LoFiRegressor", "LoFiClassifier", "LRKFRegressor",
           "LRKFClassifier", "HiLoFiRegressor", "HiLoFiClassifier", "LoLoFiRegressor", "LoLoFiClassifier",
           "SubspaceRegressor", "SubspaceClassifier", "PULSERegressor", "PULSEClassifier",
           "FactorizationRegressor", "FactorizationClassifier",
           "WoLFRegressor", "WoLFClassifier",
           "BOCDRegressor", "BOCDClassifier", "FilterStepError", "PartialPipeline", "make_partial_pipeline",
           "show_versions", "__version__"]
