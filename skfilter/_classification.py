"""Classification targets: Bernoulli / Categorical likelihoods and class-probability predictives."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.base import ClassifierMixin

from ._estimator import _numpy
from ._validation import ProbabilisticClassifierMixin, check_class_module_outputs, check_int, encode_class_labels
from .likelihoods import Bernoulli, Categorical, probit_probabilities

_CLASSIFICATION_PREDICTIVES = ("probit", "plugin", "mc")


class FilterClassifierMixin(ProbabilisticClassifierMixin, ClassifierMixin):
    """Targets, likelihood and predictive of the filter classifiers.

    The module outputs logits: one per class (Categorical likelihood with the exact logit-space
    update, spec/lofi.md §3), or a single logit for two classes (Bernoulli). The default MLP has a
    single logit for two classes, as :class:`~sklearn.neural_network.MLPClassifier`.

    Class probabilities (``predictive`` parameter; spec/lofi.md §2.8):

    * ``'probit'`` — generalised probit approximation of ``E[softmax(f)]`` under the linearised
      ``f ~ N(h(μ, x), J Σ Jᵀ)`` (B.2, eq. 64);
    * ``'plugin'`` — ``softmax(h(μ, x))``;
    * ``'mc'`` — average of ``softmax(h(θ_s, x))`` over ``n_mc_samples`` draws ``θ_s ~ N(μ, Σ)``.
    """

    def _check_target_params(self):
        if self.predictive not in _CLASSIFICATION_PREDICTIVES:
            raise ValueError(f"predictive must be one of {_CLASSIFICATION_PREDICTIVES}, got {self.predictive!r}.")
        check_int(self.n_mc_samples, "n_mc_samples", 1)
        return {}

    def _y_validation_kwargs(self):
        return {}

    def _encode_targets(self, y, first, classes=None):
        return encode_class_labels(self, y, first, classes)

    def _n_model_outputs(self):
        K = len(self.classes_)
        return 1 if K == 2 else K

    def _check_module_outputs(self, n_outputs):
        check_class_module_outputs(n_outputs, len(self.classes_))

    def _make_likelihood(self, n_outputs, cfg):
        return Bernoulli() if n_outputs == 1 else Categorical()

    def _target_matrix(self, index):
        if self._adapter.n_outputs == 1:
            return index.reshape(-1, 1).astype(np.float64)
        return np.eye(len(self.classes_))[index]

    # -- predictive -----------------------------------------------------------------------------
    def _summarize(self, f, var, noise_state, kind):
        """Class probabilities ``(n, K)`` (class docstring)."""
        binary = f.shape[-1] == 1

        def probs(logits):
            if binary:
                p1 = torch.sigmoid(logits)
                return torch.cat([1 - p1, p1], dim=-1)
            return torch.softmax(logits, dim=-1)

        if kind == "mc":
            return probs(f).mean(0)
        if kind == "plugin":
            return probs(f)
        return probit_probabilities(f, var, binary)

    def predict_proba(self, X):
        """Posterior-predictive class probabilities.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Columns in the order of ``classes_``.
        """
        return _numpy(self._predictive_summary(self._predict_tensor(X)))

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """Continue learning from ``(X, y)`` (one pass, in row order).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        classes : array-like of shape (n_classes,), default=None
            All the classes of the stream; required on the first call, optional afterwards.
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : object
        """
        if not hasattr(self, "filter_state_") and classes is None:
            raise ValueError("classes must be passed on the first call to partial_fit.")
        self._fit(X, y, sample_weight, reset=False, classes=classes, n_epochs=1)
        return self

    def _check_prequential_args(self, return_std, method):
        if return_std:
            raise ValueError("return_std is only available for regressors.")
        if method not in ("predict", "predict_proba", "predict_log_proba"):
            raise ValueError(
                f"method must be 'predict', 'predict_proba' or 'predict_log_proba', got {method!r}."
            )

    def _prequential_output(self, rec, return_std, method):
        proba = _numpy(rec)
        if method == "predict_proba":
            return proba
        if method == "predict_log_proba":
            with np.errstate(divide="ignore"):
                return np.log(proba)
        if method == "predict":
            return self.classes_[np.argmax(proba, axis=1)]
        raise ValueError(f"method must be 'predict', 'predict_proba' or 'predict_log_proba', got {method!r}.")
