"""Docstring fragments the filter estimators share (the parameters after the structure's own, and
the attributes), so that a family of estimators writes its ``Parameters`` section once."""

from __future__ import annotations

#: ``predictive``'s choices, default and meaning per target kind
PREDICTIVE_TEXT = {
    "regressor": ("{'linearized', 'plugin', 'mc'}", "linearized",
                  "``'linearized'`` — mean ``h(μ, x)``, variance ``J Σ Jᵀ + R``"),
    "classifier": ("{'probit', 'plugin', 'mc'}", "probit",
                   "``'probit'`` — the generalised probit approximation under the linearised logits"),
}

#: the fitted attributes particular to regressors and classifiers
TARGET_ATTRS = {"regressor": "    n_outputs_ : int\n    obs_variance_ : ndarray of shape (n_outputs,)",
                "classifier": "    classes_ : ndarray of shape (n_classes,)"}

_TAIL = """\
    decay : float, default=1.0
        ``γ`` of the dynamics, in [0, 1].
    n_epochs : int, default=1
        Passes over the data in :meth:`fit` (``partial_fit`` always makes one).
    shuffle : bool, default=False
        Shuffle the rows before every pass after the first.
    batch_size : int, default=1
        {batch_size}
    predictive : {predictives}, default={predictive!r}
        How predictions integrate over the weights: {predictive_text};
        ``'plugin'`` the network at the posterior mean; ``'mc'`` the average over ``n_mc_samples``
        weight draws. Read at prediction time.
    n_mc_samples : int, default=100
        Parameter draws of the Monte-Carlo predictive.
    random_state : int, RandomState instance or None, default=None
        {seeds}
    device : str or torch.device, default='cpu'
        Where the belief lives and the filter runs.
    dtype : {{None, 'float64', 'float32'}}, default=None
        ``None``: float64 on the CPU, float32 on a GPU.
    verbose : int, default=0
        Show a progress bar while fitting when > 0.
    warm_start : bool, default=False
        When True, ``fit`` on a fitted estimator continues from the current belief.
{kwargs}

    Attributes
    ----------
    n_features_in_ : int
    n_params_ : int
        {n_params}
{attributes}    module_ : torch.nn.Module
        The network carrying the posterior mean{module_mean}.
    posterior_ : skfilter.posteriors.Posterior
        {posterior}
    filter_state_ : skfilter.filtering.FilterState
    n_samples_seen_ : int
    n_iter_ : int
    loss_curve_ : list of float
{target_attrs}
"""


def filter_tail_doc(target: str, *, batch_size: str, seeds: str, kwargs: str, n_params: str, posterior: str,
                    attributes: str = "", module_mean: str = "") -> str:
    """The parameters from ``decay`` on and the ``Attributes`` section of a filter estimator's
    docstring (``target`` ``'regressor'`` or ``'classifier'``); the arguments are the texts that
    differ between families (each already indented and wrapped as it should appear)."""
    choices, default, text = PREDICTIVE_TEXT[target]
    return _TAIL.format(batch_size=batch_size, predictives="{" + choices[1:-1] + "}", predictive=default,
                        predictive_text=text, seeds=seeds, kwargs=kwargs, n_params=n_params, posterior=posterior,
                        attributes=attributes, module_mean=module_mean, target_attrs=TARGET_ATTRS[target])
