"""Streaming classification with ``partial_fit``: two moons arriving in mini-batches
=================================================================================

A stream of 40 mini-batches of 25 points from :func:`sklearn.datasets.make_moons` is fed to an
:class:`skfilter.EKFClassifier` with ``partial_fit``. Every batch is first scored with the current
belief (test-then-train), so the printed accuracy is an honest online estimate. The first call names
all classes with ``classes=``, as for any scikit-learn incremental classifier.

At the end, ``predict_proba`` shows how the (probit) predictive is confident on the moons and
closer to 1/2 far from the data, where the weights are uncertain.

Usage::

    python examples/streaming_classification.py
"""

import numpy as np
from sklearn.datasets import make_moons

from skfilter import EKFClassifier

N_BATCHES, BATCH = 40, 25

X_all, y_all = make_moons(n_samples=N_BATCHES * BATCH, noise=0.15, random_state=0)
labels = np.array(["upper", "lower"])[y_all]  # make_moons: 0 = upper moon; any label type works

clf = EKFClassifier(hidden_layer_sizes=(16, 16), activation="tanh", covariance="full",
                    prior_variance=0.5, random_state=0)

correct = []
for b in range(N_BATCHES):
    X, y = X_all[b * BATCH:(b + 1) * BATCH], labels[b * BATCH:(b + 1) * BATCH]
    if b == 0:
        clf.partial_fit(X, y, classes=["lower", "upper"])  # every class of the stream, once
        continue
    correct.append(clf.predict(X) == y)  # test on the batch before learning from it ...
    clf.partial_fit(X, y)                # ... then learn from it (one filter step per row)
    if b % 5 == 0 or b == N_BATCHES - 1:
        recent = np.concatenate(correct[-5:]).mean()
        print(f"batch {b:2d}  rows seen {clf.n_samples_seen_:4d}  accuracy on the last 5 batches "
              f"(before learning them): {recent:.2f}")

print(f"online accuracy over the whole stream: {np.concatenate(correct).mean():.3f}")

points = np.array([[0.0, 1.0],    # on the upper moon
                   [1.0, -0.5],   # on the lower moon
                   [0.5, 0.25],   # between the moons
                   [4.0, 4.0]])   # far from any data
proba = clf.predict_proba(points)
print("\nclasses_:", clf.classes_)
for x, p in zip(points, proba):
    print(f"x = {x}  P = {np.round(p, 3)}")
