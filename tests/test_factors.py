"""The App. C helpers of the low-rank filters (spec/hilofi.md §2.1, §4 facts 1–2)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from skfilter.posteriors.factors import best_rank_factor, stacked_qr_factor

f64 = torch.float64


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=f64)


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.integers(1, 5), min_size=1, max_size=4), n=st.integers(1, 6), seed=st.integers(0, 10**6))
def test_stacked_qr_factor_is_an_upper_square_root_of_the_summed_grams(rows, n, seed):
    blocks = [randn(r, n, seed=seed + i) for i, r in enumerate(rows)]
    R = stacked_qr_factor(*blocks)
    gram = sum(b.T @ b for b in blocks)
    assert R.shape == (min(sum(rows), n), n)
    torch.testing.assert_close(R.T @ R, gram, rtol=1e-10, atol=1e-10)
    assert torch.equal(R, R.triu())
    assert bool((R.diagonal() >= 0).all())
    if torch.linalg.matrix_rank(gram) == n:  # positive definite: R is its (unique) Cholesky factor
        torch.testing.assert_close(R, torch.linalg.cholesky(gram).T, rtol=1e-6, atol=1e-8)


def test_stacked_qr_factor_batches_and_broadcasts():
    a, b = randn(3, 2, 4, seed=1), randn(1, 4, seed=2)
    R = stacked_qr_factor(a, b)
    assert R.shape == (3, 3, 4)
    for k in range(3):
        torch.testing.assert_close(R[k].T @ R[k], a[k].T @ a[k] + b.T @ b)


def test_stacked_qr_factor_rejects_mismatched_columns():
    with pytest.raises(ValueError, match="same number of columns"):
        stacked_qr_factor(randn(2, 3), randn(2, 4))


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.integers(1, 4), min_size=1, max_size=3), D=st.integers(2, 9), rank=st.integers(1, 9),
       shift=st.sampled_from([0.0, 0.3, 2.0]), seed=st.integers(0, 10**6))
def test_best_rank_factor_is_the_eckart_young_truncation_plus_shift(rows, D, rank, shift, seed):
    blocks = [randn(r, D, seed=seed + i) for i, r in enumerate(rows)]
    N = torch.cat(blocks)
    J, sigma = best_rank_factor(*blocks, rank=rank, shift=shift, return_singular_values=True)
    assert J.shape == (rank, D)
    # rows orthogonal, J Jᵀ diagonal and non-increasing
    G = J @ J.T
    torch.testing.assert_close(G, torch.diag(G.diagonal()), rtol=0, atol=1e-9)
    assert bool((G.diagonal()[:-1] >= G.diagonal()[1:] - 1e-9).all())
    # JᵀJ = V_d diag(σ² + a) V_dᵀ on the supported directions (the data here have full row rank)
    lam, vec = torch.linalg.eigh(N.T @ N)
    lam, vec = lam.flip(0), vec.flip(1)
    k = min(rank, N.shape[0], D)
    expected = (vec[:, :k] * (lam[:k] + shift)) @ vec[:, :k].T
    torch.testing.assert_close(J.T @ J, expected, rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(sigma.square(), lam[:sigma.shape[0]].clamp_min(0), rtol=1e-8, atol=1e-8)
    if shift == 0.0:  # Eckart–Young error
        err = torch.linalg.norm(N.T @ N - J.T @ J)
        torch.testing.assert_close(err, lam[k:].clamp_min(0).square().sum().sqrt(), rtol=1e-6, atol=1e-8)


def test_best_rank_factor_is_exact_at_full_rank_without_shift():
    W1, W2 = randn(3, 5, seed=3), randn(2, 5, seed=4)
    J = best_rank_factor(W1, W2, rank=5)
    torch.testing.assert_close(J.T @ J, W1.T @ W1 + W2.T @ W2)


def test_best_rank_factor_is_the_best_rank_d_approximation_of_the_shifted_sum():
    """Against a dense eigendecomposition of NᵀN + aI (the matrix the factor approximates)."""
    N = randn(3, 6, seed=5)
    a = 0.7
    J = best_rank_factor(N, rank=2, shift=a)
    lam, vec = torch.linalg.eigh(N.T @ N + a * torch.eye(6, dtype=f64))
    best = (vec[:, -2:] * lam[-2:]) @ vec[:, -2:].T
    torch.testing.assert_close(J.T @ J, best)


def test_unsupported_directions_get_no_shift_and_do_not_depend_on_the_null_space():
    """P19: C = 0 (or d > rank N) — the rows without support are zero, the shift is not put on an
    arbitrary null-space basis."""
    J = best_rank_factor(torch.zeros(2, 4, dtype=f64), rank=3, shift=1.0)
    assert torch.equal(J, torch.zeros(3, 4, dtype=f64))
    w = randn(1, 4, seed=6)
    J = best_rank_factor(w, torch.zeros(2, 4, dtype=f64), rank=3, shift=0.5)
    torch.testing.assert_close(J.T @ J, w.T @ w + 0.5 * (w.T @ w) / (w @ w.T))
    assert torch.equal(J[1:], torch.zeros(2, 4, dtype=f64))


def test_best_rank_factor_batches_with_a_shift_per_batch_entry():
    N = randn(2, 3, 5, seed=7)
    shift = torch.tensor([0.0, 1.5], dtype=f64)
    J = best_rank_factor(N, rank=2, shift=shift)
    for k in range(2):
        torch.testing.assert_close(J[k].T @ J[k], (best_rank_factor(N[k], rank=2, shift=float(shift[k]))).T
                                   @ best_rank_factor(N[k], rank=2, shift=float(shift[k])))


@pytest.mark.parametrize("rank", [0, -1, 1.5, True])
def test_best_rank_factor_rejects_bad_ranks(rank):
    with pytest.raises(ValueError, match="rank"):
        best_rank_factor(randn(2, 3), rank=rank)


def test_best_rank_factor_rejects_a_negative_shift():
    with pytest.raises(ValueError, match="shift"):
        best_rank_factor(randn(2, 3), rank=1, shift=-1.0)
