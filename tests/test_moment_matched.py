"""The moment-matched classification likelihood (Duran-Martin et al. 2025, App. G.1.1, eq. 117 with
its sign corrected): ``R = diag(m) − m mᵀ + ε I`` is positive definite, ``diag(m) − m mᵀ`` has rank
``C − 1`` with null vector ``1``, and one filter step equals the dense EKF update with the Gaussian
``N(y | m(θ₀) + G J (θ − θ₀), R)``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from skfilter.likelihoods import MomentMatchedCategorical
from skfilter.posteriors import FullCovariance

DT = torch.float64


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 6), st.integers(0, 10_000), st.floats(1e-6, 1.0))
def test_r_is_positive_definite_and_its_multinomial_part_has_rank_c_minus_1(C, seed, eps):
    f = torch.randn(3, C, generator=torch.Generator().manual_seed(seed), dtype=DT) * 3
    lik = MomentMatchedCategorical(eps)
    R = lik.noise_covariance(f)
    m = torch.softmax(f, -1)
    for n in range(3):
        ev = torch.linalg.eigvalsh(R[n])
        assert float(ev.min()) >= eps * (1 - 1e-9)
        M = R[n] - eps * torch.eye(C, dtype=DT)
        assert torch.allclose(M, torch.diag(m[n]) - torch.outer(m[n], m[n]))
        assert torch.allclose(M @ torch.ones(C, dtype=DT), torch.zeros(C, dtype=DT), atol=1e-12)
        assert int(torch.linalg.matrix_rank(M, hermitian=True, rtol=1e-10)) == C - 1


@pytest.mark.parametrize("C", [1, 3])
def test_one_step_is_the_dense_ekf_with_the_moment_matched_gaussian(C):
    gen = torch.Generator().manual_seed(0)
    P, eps = 7, 0.05
    mu = torch.randn(P, generator=gen, dtype=DT)
    A = torch.randn(P, P, generator=gen, dtype=DT)
    Sigma = A @ A.T / P + 0.1 * torch.eye(P, dtype=DT)
    f = torch.randn(1, C, generator=gen, dtype=DT)
    J = torch.randn(1, C, P, generator=gen, dtype=DT)
    Y = torch.zeros(1, C, dtype=DT)
    Y[0, -1] = 1.0  # one-hot (C = 3) or the class index 1 (one logit)
    lik = MomentMatchedCategorical(eps)
    Hw, ew = lik.whiten(f, J, Y)
    structure = FullCovariance()
    post, _ = structure.update(structure.prior(mu, 1.0)._replace(cov=Sigma), Hw.reshape(-1, P), ew.reshape(-1))
    # the dense EKF with the Gaussian: observation matrix H = G J, noise R, innovation y − m
    m = torch.sigmoid(f[0]) if C == 1 else torch.softmax(f[0], -1)
    G = torch.diag(m * (1 - m)) if C == 1 else torch.diag(m) - torch.outer(m, m)
    H = G @ J[0]
    R = G + eps * torch.eye(C, dtype=DT)
    S = H @ Sigma @ H.T + R
    K = Sigma @ H.T @ torch.linalg.inv(S)
    mean = mu + K @ (Y[0] - m)
    cov = (torch.eye(P, dtype=DT) - K @ H) @ Sigma
    torch.testing.assert_close(post.mean, mean, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(post.cov, cov, rtol=1e-9, atol=1e-12)
    # the predictive covariance the weighting functions see is S
    torch.testing.assert_close(lik.predictive_covariance(f, (J[0] @ Sigma @ J[0].T)[None])[0], S)
    # and the log-determinant of the whitening is −½ log det R
    torch.testing.assert_close(lik.log_det_whitening(f)[0], -0.5 * torch.logdet(R))


@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), True, "0.1"])
def test_epsilon_must_be_positive(eps):
    with pytest.raises(ValueError, match="epsilon"):
        MomentMatchedCategorical(eps)


def test_the_update_moves_towards_the_observed_class():
    lik = MomentMatchedCategorical(0.01)
    f = torch.zeros(1, 3, dtype=DT)
    J = torch.eye(3, dtype=DT)[None]  # θ = the logits
    Y = torch.tensor([[0.0, 1.0, 0.0]], dtype=DT)
    Hw, ew = lik.whiten(f, J, Y)
    structure = FullCovariance()
    post, _ = structure.update(structure.prior(torch.zeros(3, dtype=DT), 1.0), Hw[0], ew[0])
    assert int(np.argmax(post.mean.numpy())) == 1


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([1, 2, 3, 5]), st.integers(0, 10_000), st.floats(1e-4, 1.0), st.floats(0.0, 3.0))
def test_compiled_whitening_equals_torch(C, seed, eps, weight):
    """The kernels' whitening of one row (skfilter.kernels.observations.whiten_rows, the
    moment-matched code) is :meth:`MomentMatchedCategorical.whiten` times ``√weight``."""
    pytest.importorskip("numba")
    from skfilter.kernels.observations import LIKELIHOOD_CODES, whiten_rows

    gen = torch.Generator().manual_seed(seed)
    f = torch.randn(1, C, generator=gen, dtype=DT) * 3
    J = torch.randn(1, C, 7, generator=gen, dtype=DT)
    label = int(torch.randint(0, max(C, 2), (1,), generator=gen))
    Y = torch.tensor([[float(label)]], dtype=DT) if C == 1 else torch.nn.functional.one_hot(
        torch.tensor([label]), C).to(DT)
    Hw, ew = MomentMatchedCategorical(eps).whiten(f, J, Y)
    J2, ew2 = J[0].numpy().copy(), np.empty(C)
    whiten_rows(LIKELIHOOD_CODES["MomentMatchedCategorical"], f[0].numpy(), Y[0].numpy(), J2, np.ones(C), weight,
                ew2, np.finfo(np.float64).tiny, np.empty(7), np.zeros((C, C)), eps)
    root = np.sqrt(weight)
    np.testing.assert_allclose(J2, root * Hw[0].numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ew2, root * ew[0].numpy(), rtol=1e-10, atol=1e-12)
