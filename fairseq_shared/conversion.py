"""The arithmetic of turning per-position layer weights into shared ones.

Pure functions on tensors (the checkpoint side is :mod:`fairseq_shared.convert_sharing`).

- :func:`set_means`: a set's shared weight is the mean of its positions' weights, the
  least-squares choice: it minimises ``sum_pos ||W_pos - W_set||_F^2``.
- :func:`lora_factors`: a position's low-rank delta ``B A`` (B: out x R, A: R x in) for the
  residual ``W_pos - W_set``, from its truncated SVD ``U_R S_R V_R^T``, split evenly:
  ``B = U_R S_R^(1/2)``, ``A = S_R^(1/2) V_R^T``. ``B A`` is the best rank-R approximation of
  the residual (Eckart-Young), exact at R = min(out, in). The even split makes the factors
  balanced (``B^T B = A A^T = S_R``): neither is near zero, so gradients reach both
  (d/dB = G A^T, d/dA = B^T G), and gradient flow keeps ``B^T B - A A^T`` constant, so the
  balance holds while fine-tuning; PiSSA (Meng et al. 2024) initialises LoRA the same way.
  A LoRA whose delta is ``scale * B A`` gets both factors divided by ``sqrt(scale)``.
- :func:`relative_residual`: how far positions are from what replaces them,
  ``||W_pos - W_approx||_F / ||W_pos||_F`` over a group of tensors.
"""

from typing import Dict, List, Mapping, Sequence, Tuple

import torch


def set_members(assignment: Sequence[int]) -> List[List[int]]:
    """The positions of each set: ``[0, 1, 1, 0] -> [[0, 3], [1, 2]]``."""
    members: List[List[int]] = [[] for _ in range(max(assignment) + 1)]
    for position, s in enumerate(assignment):
        members[s].append(position)
    return members


def set_means(weights: Sequence[torch.Tensor], assignment: Sequence[int]) -> List[torch.Tensor]:
    """One tensor per set: the mean of its positions' ``weights`` (same shapes)."""
    if len(weights) != len(assignment):
        raise ValueError(f"{len(weights)} weights for {len(assignment)} positions")
    return [
        torch.stack([weights[p] for p in positions]).mean(0)
        for positions in set_members(assignment)
    ]


def lora_factors(residual: torch.Tensor, rank: int, scale: float = 1.0
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(B, A)`` with ``scale * B @ A`` the best rank-``rank`` approximation of ``residual``.

    ``residual`` is (out, in); B is (out, rank), A is (rank, in). Ranks above
    min(out, in) get zero columns/rows beyond it (the approximation is already exact).
    """
    if residual.dim() != 2:
        raise ValueError(f"need a matrix, got shape {tuple(residual.shape)}")
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    out_dim, in_dim = residual.shape
    u, s, vh = torch.linalg.svd(residual.double(), full_matrices=False)
    r = min(rank, s.numel())
    root = (s[:r] / scale).sqrt()
    b = torch.zeros(out_dim, rank, dtype=torch.float64)
    a = torch.zeros(rank, in_dim, dtype=torch.float64)
    b[:, :r] = u[:, :r] * root
    a[:r] = root[:, None] * vh[:r]
    return b.to(residual.dtype), a.to(residual.dtype)


def relative_residual(original: Mapping[str, torch.Tensor],
                      approx: Mapping[str, torch.Tensor]) -> float:
    """``||W - W'||_F / ||W||_F`` over the tensors of ``original`` (all names of it)."""
    diff = sum(float((original[k].double() - approx[k].double()).pow(2).sum()) for k in original)
    norm = sum(float(original[k].double().pow(2).sum()) for k in original)
    return (diff / norm) ** 0.5 if norm > 0 else 0.0


def position_residuals(originals: Sequence[Dict[str, torch.Tensor]],
                       approxes: Sequence[Dict[str, torch.Tensor]],
                       names: Sequence[str]) -> List[float]:
    """:func:`relative_residual` of every position over the tensors ``names``."""
    return [
        relative_residual({n: o[n] for n in names if n in o}, a)
        for o, a in zip(originals, approxes)
    ]
