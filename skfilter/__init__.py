"""skfilter: scikit-learn compatible Bayesian filters for online learning of neural networks."""

__version__ = "0.1.0.dev0"
