"""Custom networks: ``module=`` a ``torch.nn.Module`` class, or a pre-trained instance
===================================================================================

1. **A class with ``module__<name>`` arguments** (as in skorch). The estimator instantiates the
   class with those keyword arguments (under a torch seed drawn from ``random_state``) at the first
   ``fit``/``partial_fit``. The arguments are ordinary hyper-parameters: they appear in
   ``get_params`` and can be tuned with ``set_params`` or ``GridSearchCV``. The class must produce
   the right output width itself (here one output for one target).
2. **An instance**: it is deep-copied, and its current weights are the *prior mean* of the filter
   (never re-initialised). A network pre-trained offline with SGD can so be refined online with
   ``prior_variance`` setting how far the filter may move it.

Any differentiable module works (Jacobians by ``torch.func``); plain ``Sequential`` MLPs of
``Linear`` layers and ReLU/Tanh/Sigmoid/ELU/Identity use a faster hand-written Jacobian.

Usage::

    python examples/custom_module.py
"""

import numpy as np
import torch
from torch import nn

from skfilter import EKFRegressor
from skfilter.model_selection import prequential_predict


class ResidualMLP(nn.Module):
    """``y = w·x + MLP(x)``: a linear skip connection plus a small tanh network."""

    def __init__(self, n_inputs, width=16):
        super().__init__()
        self.skip = nn.Linear(n_inputs, 1)
        self.hidden = nn.Linear(n_inputs, width)
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        return self.skip(x) + self.out(torch.tanh(self.hidden(x)))


rng = np.random.default_rng(0)


def make_stream(n, shift=0.0):
    X = rng.uniform(-2, 2, size=(n, 3))
    y = X @ [1.0, -0.5, 0.0] + np.sin(2 * X[:, 2] + shift) + 0.1 * rng.normal(size=n)
    return X, y


# -- 1. a module class with module__ keyword arguments -------------------------------------------
X, y = make_stream(600)
reg = EKFRegressor(module=ResidualMLP, module__n_inputs=3, module__width=16,
                   obs_variance=0.01, prior_variance=0.5, random_state=0)
reg.fit(X[:500], y[:500])
mean, std = reg.predict(X[500:], return_std=True)
print("1. module=ResidualMLP")
print(f"   P = {reg.n_params_} parameters; module__ arguments are parameters:",
      {k: v for k, v in reg.get_params().items() if k.startswith("module__")})
print(f"   test RMSE {np.sqrt(np.mean((mean - y[500:]) ** 2)):.3f}, mean predictive std {std.mean():.3f}")
reg.set_params(module__width=32).fit(X[:500], y[:500])  # refit from the prior with a wider net
print(f"   after set_params(module__width=32): P = {reg.n_params_}")

# -- 2. a pre-trained instance as the prior mean -------------------------------------------------
# Pre-train offline with Adam on old data ...
X_old, y_old = make_stream(2000)
torch.manual_seed(0)
net = ResidualMLP(3, width=16)
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
Xt, yt = torch.tensor(X_old, dtype=torch.float32), torch.tensor(y_old, dtype=torch.float32)
for _ in range(300):
    opt.zero_grad()
    loss = ((net(Xt).squeeze(1) - yt) ** 2).mean()
    loss.backward()
    opt.step()
print(f"\n2. pre-trained instance (offline MSE {loss.item():.4f})")

# ... then the world drifts a little (a phase shift), and the filter adapts online from the
# pre-trained weights. Its first one-step-ahead prediction is the pre-trained network's output.
X_new, y_new = make_stream(300, shift=0.5)
snapshot = {k: v.clone() for k, v in net.state_dict().items()}
online = EKFRegressor(module=net, prior_variance=0.01, obs_variance=0.01, random_state=0)
pred, pred_std = prequential_predict(online, X_new, y_new, return_std=True)
with torch.no_grad():
    first = net(torch.tensor(X_new[:1], dtype=torch.float32)).item()
print(f"   first prequential prediction {pred[0]:.4f} = pre-trained net {first:.4f}")
with torch.no_grad():
    frozen = net(torch.tensor(X_new, dtype=torch.float32)).squeeze(1).numpy()
for name, p in [("frozen pre-trained net", frozen), ("EKF refined online", pred)]:
    print(f"   {name:23s} RMSE on the last 100 rows of the drifted stream: "
          f"{np.sqrt(np.mean((p[-100:] - y_new[-100:]) ** 2)):.3f}")
# The instance passed in is copied, never modified; the learned weights live in module_.
print("   the user's net is untouched:",
      all(torch.equal(snapshot[k], v) for k, v in net.state_dict().items()))
print("   online.module_ is a copy:", online.module_ is not net,
      "| its dtype:", next(online.module_.parameters()).dtype)
