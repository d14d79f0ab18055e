"""Square-root factors of sums of Gram matrices: the linear-algebra helpers of the low-rank filters.

The covariance-form low-rank filters (LRKF, HiLoFi, LoLoFi; Duran-Martin, Sánchez-Betancourt,
Cartea & Murphy 2025, "Martingale posterior neural networks for fast sequential decision making",
App. C) never form a ``D × D`` covariance: they hold factors ``B`` with ``Σ = BᵀB`` and combine
covariance terms by stacking factors. Two operations do all of it:

* :func:`stacked_qr_factor` — ``Q_R(B_1, …, B_K)`` (Prop. C.1): the upper-triangular ``R`` of the QR
  decomposition of the stacked blocks, a square root of the sum of their Grams,
  ``RᵀR = Σ_k B_kᵀ B_k``;
* :func:`best_rank_factor` — ``P_d(W_1, …, W_N)`` and ``P_{d,+a}`` (Prop. C.2, Cor. C.3): the
  ``d × D`` factor ``J`` whose Gram ``JᵀJ`` is the best rank-``d`` approximation, in Frobenius norm
  (Eckart–Young), of ``Σ_i W_iᵀ W_i + a I``. With ``N = [W_1; …; W_N] = U S Vᵀ`` (thin SVD,
  singular values ``σ_1 ≥ σ_2 ≥ …``), ``J = diag(√(σ_i² + a))_{i ≤ d} V[:, :d]ᵀ``: the eigenvectors
  of ``NᵀN + aI`` are those of ``NᵀN``, with eigenvalues ``σ_i² + a``.

Both act on the stack itself (Householder QR, thin SVD), never on its Gram matrix, whose eigen-
decomposition — the route the paper suggests for its cost — squares the condition number; the
cost is the same order, ``O(r² D)`` for an ``r × D`` stack. All functions take leading batch axes
(the hypotheses axis of a belief).
"""

from __future__ import annotations

import torch

__all__ = ["stacked_qr_factor", "best_rank_factor"]


def _stack(blocks) -> torch.Tensor:
    if not blocks:
        raise ValueError("At least one block is needed.")
    n = blocks[0].shape[-1]
    for b in blocks:
        if b.shape[-1] != n:
            raise ValueError(f"Every block needs the same number of columns; got {b.shape[-1]} and {n}.")
    batch = torch.broadcast_shapes(*(b.shape[:-2] for b in blocks))
    return torch.cat([b.expand(*batch, *b.shape[-2:]) for b in blocks], dim=-2)


def stacked_qr_factor(*blocks: torch.Tensor) -> torch.Tensor:
    r"""Upper-triangular square root of a sum of Gram matrices, ``Q_R(B_1, …, B_K)`` (App. C.1).

    Stacks ``M = [B_1; …; B_K]`` (``(Σ r_k) × n``) and returns the ``R`` of its QR decomposition,
    with rows signed so that its diagonal is non-negative:

    .. math:: R^\top R = M^\top M = \sum_k B_k^\top B_k .

    ``R`` is ``n × n`` when ``Σ r_k ≥ n``; with fewer rows it is ``(Σ r_k) × n`` (upper
    trapezoidal) and its Gram is still the sum. Householder QR is backward stable on ``M``: the
    factor is exact for a perturbation of the blocks of relative size ``eps``, without the
    ``eps · ‖M‖²`` error of a Cholesky factorisation of the summed Gram matrix.

    Parameters
    ----------
    *blocks : torch.Tensor
        Blocks of shape ``(..., r_k, n)``, the same ``n``; leading axes broadcast.

    Returns
    -------
    torch.Tensor
        ``R`` of shape ``(..., min(Σ r_k, n), n)``.

    Examples
    --------
    >>> import torch
    >>> from skfilter.posteriors.factors import stacked_qr_factor
    >>> a = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    >>> b = torch.tensor([[0.0, 3.0], [4.0, 0.0]], dtype=torch.float64)
    >>> R = stacked_qr_factor(a, b)
    >>> torch.allclose(R.T @ R, a.T @ a + b.T @ b), bool(R[1, 0] == 0)
    (True, True)
    """
    M = _stack(blocks)
    R = torch.linalg.qr(M, mode="r").R
    sign = torch.where(R.diagonal(dim1=-2, dim2=-1) < 0, -1.0, 1.0).to(R.dtype)
    return R * sign[..., :, None]


def best_rank_factor(*blocks: torch.Tensor, rank: int, shift=0.0, return_singular_values: bool = False):
    r"""Best rank-``d`` factor of a sum of Gram matrices plus a multiple of the identity,
    ``P_d`` / ``P_{d,+a}`` (App. C.2–C.3).

    With the stack ``N = [W_1; …; W_N]`` (``r × D``, ``r = Σ r_i``) and its thin SVD
    ``N = U S Vᵀ``:

    .. math::

        J = \operatorname{diag}\big(\sqrt{\sigma_1^2 + a}, …, \sqrt{\sigma_d^2 + a}\big)\,
            V_{:, 1:d}^\top \quad (d × D),
        \qquad J^\top J = V_d \operatorname{diag}(\sigma_i^2 + a) V_d^\top ,

    the best rank-``d`` approximation (Frobenius norm) of ``NᵀN + aI`` (eigenvectors of ``NᵀN``,
    eigenvalues raised by ``a``); its rows are orthogonal, ``J Jᵀ = diag(σ_i² + a)`` non-increasing,
    each signed so that its entry of largest magnitude is positive (the singular vectors' signs are
    the SVD routine's choice; this makes ``J`` — and samples ``zᵀJ`` — the same from any routine).
    The error is ``√(Σ_{d<i≤rank N} (σ_i² + a)² + (D − rank N) a²)`` — the discarded directions
    lose their ``a`` as well.

    Directions without support in ``N`` — zero singular values, or ``d > min(r, D)`` — have an
    arbitrary basis (the SVD routine's choice): those rows of ``J`` are zero, the
    shift ``a`` is not put on them, so the result never depends on the SVD routine's null space.
    (A singular value is zero when ``σ_i ≤ r·eps·σ_1``.)

    Parameters
    ----------
    *blocks : torch.Tensor
        ``W_i`` of shape ``(..., r_i, D)``, the same ``D``; leading axes broadcast.
    rank : int
        ``d ≥ 1``, the number of rows of the result.
    shift : float or torch.Tensor, default=0.0
        ``a ≥ 0``; a tensor of the leading (batch) shape gives one shift per batch entry.
    return_singular_values : bool, default=False
        Also return the singular values ``σ`` of ``N`` (all ``min(r, D)`` of them, for error
        diagnostics).

    Returns
    -------
    J : torch.Tensor
        Shape ``(..., d, D)``.
    sigma : torch.Tensor
        Shape ``(..., min(r, D))``; only with ``return_singular_values``.

    Examples
    --------
    >>> import torch
    >>> from skfilter.posteriors.factors import best_rank_factor
    >>> gen = torch.Generator().manual_seed(0)
    >>> W = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    >>> J = best_rank_factor(W, rank=4)            # d = rank N: exact
    >>> torch.allclose(J.T @ J, W.T @ W)
    True
    >>> J2 = best_rank_factor(W, rank=2)
    >>> e = torch.linalg.eigvalsh(W.T @ W).flip(0)  # eigenvalues, decreasing
    >>> torch.allclose(torch.linalg.norm(W.T @ W - J2.T @ J2), e[2:].square().sum().sqrt())
    True
    """
    if isinstance(rank, bool) or int(rank) != rank or rank < 1:
        raise ValueError(f"rank must be a positive integer, got {rank!r}.")
    rank = int(rank)
    N = _stack(blocks)
    r, D = N.shape[-2], N.shape[-1]
    _, sigma, Vh = torch.linalg.svd(N, full_matrices=False)  # sigma (..., k), Vh (..., k, D), k = min(r, D)
    k = sigma.shape[-1]
    keep = min(rank, k)
    s, V = sigma[..., :keep], Vh[..., :keep, :]
    eps = torch.finfo(N.dtype).eps
    supported = s > (max(r, D) * eps) * sigma[..., :1]
    a = torch.as_tensor(shift, dtype=N.dtype, device=N.device)
    if bool((a < 0).any()):
        raise ValueError(f"shift must be >= 0, got {shift!r}.")
    a = a[..., None] if a.dim() else a
    scale = torch.where(supported, (s * s + a).sqrt(), torch.zeros_like(s))
    # each row signed so that its entry of largest magnitude is positive: the SVD's signs are the
    # routine's choice, and a factor's samples z @ J depend on them
    top = V.gather(-1, V.abs().argmax(-1, keepdim=True))[..., 0]
    scale = torch.where(top < 0, -scale, scale)
    J = scale[..., :, None] * V
    if keep < rank:
        J = torch.cat([J, J.new_zeros(*J.shape[:-2], rank - keep, D)], dim=-2)
    return (J, sigma) if return_singular_values else J
