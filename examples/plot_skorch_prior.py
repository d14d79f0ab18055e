"""A skorch-trained network as the prior of an online filter
==========================================================

Train an MLP offline with skorch's :class:`~skorch.NeuralNetRegressor` on the first rows of a
regression stream, then hand its ``net.module_`` to :class:`skfilter.LoFiRegressor` as
``module=``: a module *instance* is copied and its current weights become the filter's prior mean,
so the filter starts from what SGD learned and fine-tunes it online, row by row, with a predictive
standard deviation. The stream drifts after the training rows (the target function's phase moves
slowly), which is where fine-tuning matters.

Three one-step-ahead (prequential) forecasters on the rest of the stream:

* **frozen skorch net** — the trained network, never updated; its "±2σ band" is a plug-in one,
  ±2 × its RMSE on the training rows;
* **LoFi from the skorch net** — the filter seeded by ``net.module_``;
* **LoFi from a random prior** — the same architecture learned online from scratch.

Each row is predicted before it is learned (:func:`skfilter.model_selection.prequential_predict`),
so the RMSE and the coverage of the ±2σ band are honest. The script prints both and writes the
running values to ``DIR/skorch_prior.png``.

Usage::

    python examples/plot_skorch_prior.py [--out DIR]

``DIR`` defaults to ``examples_output/`` under the current directory (created if needed).
Needs skorch (``pip install "skfilter[baselines]"``) and matplotlib.
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from skorch import NeuralNetRegressor  # noqa: E402
from torch import nn  # noqa: E402

from skfilter import LoFiRegressor  # noqa: E402
from skfilter.model_selection import prequential_predict  # noqa: E402

#: default folder of the figure, relative to the current directory
OUTPUT_DIR = Path("examples_output")
N_TRAIN, N_STREAM, N_FEATURES = 500, 1500, 4


def make_stream(seed=0):
    """``N_TRAIN + N_STREAM`` rows of ``y = sin(w·x + φ_t) + 0.5·x₂x₃ + noise``; the phase ``φ_t`` is
    fixed over the training rows, then drifts linearly to 1.5 by the end of the stream."""
    rng = np.random.default_rng(seed)
    n = N_TRAIN + N_STREAM
    X = rng.uniform(-2, 2, size=(n, N_FEATURES))
    phase = np.concatenate([np.zeros(N_TRAIN), np.linspace(0.0, 1.5, N_STREAM)])
    y = np.sin(X @ [1.0, -0.7, 0.0, 0.3] + phase) + 0.5 * X[:, 2] * X[:, 3] + 0.1 * rng.normal(size=n)
    return X, y


class MLP(nn.Module):
    """A 4-32-32-1 tanh network."""

    def __init__(self, n_inputs=N_FEATURES, width=32):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(n_inputs, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                                    nn.Linear(width, 1))

    def forward(self, x):
        return self.layers(x)


def train_offline(X, y):
    """skorch: Adam on the training rows (float32, as torch's default dtype), full-batch epochs."""
    torch.manual_seed(0)
    net = NeuralNetRegressor(MLP, max_epochs=300, lr=0.01, optimizer=torch.optim.Adam, batch_size=100,
                             train_split=None, verbose=0)
    net.fit(X.astype(np.float32), y.astype(np.float32)[:, None])
    return net


def running_mean(values, window=150):
    """Trailing mean over ``window`` rows (shorter at the start)."""
    csum = np.cumsum(np.insert(np.asarray(values, dtype=float), 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    return (csum[idx] - csum[lo]) / (idx - lo)


def main(out_dir=OUTPUT_DIR):
    """Train, fine-tune, compare; print the scores and write the figure; return its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    X, y = make_stream()
    X_train, y_train, X_stream, y_stream = X[:N_TRAIN], y[:N_TRAIN], X[N_TRAIN:], y[N_TRAIN:]

    net = train_offline(X_train, y_train)
    train_rmse = float(np.sqrt(np.mean((net.predict(X_train.astype(np.float32))[:, 0] - y_train) ** 2)))

    # The filter copies net.module_ (net is left as it is) and starts from its weights; the prior
    # variance sets how far it may move them.
    seeded = LoFiRegressor(module=net.module_, rank=10, prior_variance=1e-3, obs_variance="auto",
                           process_noise=1e-6, random_state=0)
    scratch = LoFiRegressor(hidden_layer_sizes=(32, 32), activation="tanh", rank=10, process_noise=1e-6,
                            random_state=0)

    frozen = net.predict(X_stream.astype(np.float32))[:, 0].astype(float)
    results = {"frozen skorch net": (frozen, np.full_like(frozen, train_rmse))}
    for name, est in [("LoFi from the skorch net", seeded), ("LoFi from a random prior", scratch)]:
        results[name] = prequential_predict(est, X_stream, y_stream, return_std=True)

    fig, (ax_rmse, ax_cover) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    t = np.arange(N_STREAM)
    print(f"skorch net: training RMSE {train_rmse:.3f} on {N_TRAIN} rows; then {N_STREAM} drifting rows")
    for name, (mean, std) in results.items():
        err2 = (mean - y_stream) ** 2
        inside = np.abs(mean - y_stream) <= 2 * std
        print(f"  {name:26s} prequential RMSE {np.sqrt(err2.mean()):.3f}   ±2σ coverage {inside.mean():.1%}")
        ax_rmse.plot(t, np.sqrt(running_mean(err2)), label=name)
        ax_cover.plot(t, running_mean(inside), label=name)
    ax_rmse.set_ylabel("running RMSE (150 rows)")
    ax_rmse.set_title("One-step-ahead error on a drifting stream")
    ax_rmse.legend()
    ax_cover.axhline(0.954, color="k", lw=0.8, ls="--", label="nominal 95.4 %")
    ax_cover.set_ylabel("running ±2σ coverage")
    ax_cover.set_xlabel("row of the stream (after the skorch training rows)")
    ax_cover.set_ylim(0, 1.05)
    fig.tight_layout()
    out_path = out_dir / "skorch_prior.png"
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    print(f"figure: {out_path}")
    return out_path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--out", type=Path, default=OUTPUT_DIR,
                        help="folder of the figure (default: examples_output/ under the current directory)")
    main(parser.parse_args().out)
