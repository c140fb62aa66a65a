"""Attention-weight sharing policies (Xiao et al. 2019, "SAN"): pure functions only.

A *policy* is a list of adjacent block sizes that sums to the number of layers, e.g.
``[1, 5]`` for six layers: layer 1 alone, layers 2-6 one block. The first layer of a
block is its *leader* (it computes attention); the others are *followers* (they reuse
the leader's attention). Layer indices here are 0-based; the flags and the papers count
from 1.

Similarity: ``mu(i, j) = 1 - JS(P_i || P_j)`` with the
Jensen-Shannon divergence in log base 2, so ``0 <= mu <= 1`` and identical attention
gives ``mu = 1``. Block similarity ``sim(m, n)`` is the mean of ``mu(i, j)`` over the
distinct ordered pairs ``i != j`` of layers ``m..n`` (mu is symmetric, so this equals
the mean over unordered pairs). A one-layer block has no pair; its similarity is
defined as 1 and a one-layer block is always allowed.

Grouping (the paper's procedure): from the first layer, take the *largest* block whose
similarity is strictly greater than ``theta``; continue after it. With mu in [0, 1],
``theta >= 1`` gives all one-layer blocks and ``theta < 0`` one block of every layer.
"""

from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from fairseq_shared.errors import FairseqSharedError
from fairseq_shared.sharing.assignment import comma_separated_ints

FLAGS = {
    "self": "--san-self-policy",
    "cross": "--san-cross-policy",
    "encoder": "--san-encoder-policy",
}


class PolicyError(FairseqSharedError):
    """An invalid SAN policy; the message names the flag and the allowed values."""


# ---------------------------------------------------------------------------------------
# policies
# ---------------------------------------------------------------------------------------


def _allowed(num_layers: int) -> str:
    return (
        f"comma-separated positive block sizes that sum to {num_layers} (the layer count), "
        f"e.g. {format_policy(paper_self_policy(num_layers))} or "
        f"{format_policy([1] * num_layers)} (no sharing)"
    )


def parse_policy(text, num_layers: int, flag: str = "--san-policy") -> List[int]:
    """Parse ``"1,5"`` (or a list of ints) into block sizes, validating against ``num_layers``."""
    if isinstance(text, str):
        try:  # the sharing patterns' syntax: "1,,5" or "1 5" is refused, not read as 1,5
            blocks = comma_separated_ints(text) if text.strip() else []
        except ValueError:
            raise PolicyError(
                f"{flag}: '{text}' is not a list of integers; allowed: {_allowed(num_layers)}"
            ) from None
    else:
        blocks = [int(b) for b in text]
    validate_policy(blocks, num_layers, flag)
    return blocks


def validate_policy(blocks: Sequence[int], num_layers: int, flag: str = "--san-policy") -> None:
    if not blocks:
        raise PolicyError(f"{flag}: empty policy; allowed: {_allowed(num_layers)}")
    bad = [b for b in blocks if b <= 0]
    if bad:
        raise PolicyError(
            f"{flag}: block sizes must be >= 1, got {format_policy(blocks)}; "
            f"allowed: {_allowed(num_layers)}"
        )
    if sum(blocks) != num_layers:
        raise PolicyError(
            f"{flag}: blocks {format_policy(blocks)} sum to {sum(blocks)} but the stack has "
            f"{num_layers} layers; allowed: {_allowed(num_layers)}"
        )


def format_policy(blocks: Sequence[int]) -> str:
    return ",".join(str(int(b)) for b in blocks)


def leaders(blocks: Sequence[int]) -> List[int]:
    """0-based index of each layer's block leader: ``[1, 2, 3] -> [0, 1, 1, 3, 3, 3]``."""
    out: List[int] = []
    start = 0
    for b in blocks:
        out.extend([start] * b)
        start += b
    return out


def layer_blocks(blocks: Sequence[int]) -> List[List[int]]:
    """0-based layers of each block, leader first: ``[1, 2] -> [[0], [1, 2]]``."""
    out: List[List[int]] = []
    start = 0
    for b in blocks:
        out.append(list(range(start, start + b)))
        start += b
    return out


def describe_policy(blocks: Optional[Sequence[int]]) -> str:
    """1-based blocks for logs and errors: ``[1, 5] -> "{1} {2-6}"``."""
    if blocks is None:
        return "none"
    return " ".join(
        f"{{{b[0] + 1}}}" if len(b) == 1 else f"{{{b[0] + 1}-{b[-1] + 1}}}"
        for b in layer_blocks(blocks)
    )


def paper_self_policy(num_layers: int) -> List[int]:
    """The paper's 6-layer self-attention policy {1},{2..6} generalised: {1},{2..N}."""
    return [1] if num_layers == 1 else [1, num_layers - 1]


def paper_cross_policy(num_layers: int) -> List[int]:
    """The paper's 6-layer encoder-decoder policy {1,2},{3,4},{5,6} generalised: pairs
    (a final one-layer block when N is odd)."""
    return [2] * (num_layers // 2) + [1] * (num_layers % 2)


def no_sharing(num_layers: int) -> List[int]:
    return [1] * num_layers


def is_trivial(blocks: Optional[Sequence[int]]) -> bool:
    return blocks is None or all(b == 1 for b in blocks)


# ---------------------------------------------------------------------------------------
# similarity
# ---------------------------------------------------------------------------------------


def _xlog2(p: Tensor, q: Tensor) -> Tensor:
    """p * log2(p / q) with 0 log 0 = 0 (q > 0 wherever p > 0 for the mixture)."""
    safe_q = torch.where(p > 0, q, torch.ones_like(q))
    safe_p = torch.where(p > 0, p, torch.ones_like(p))
    return torch.where(p > 0, p * torch.log2(safe_p / safe_q), torch.zeros_like(p))


def js_divergence(p: Tensor, q: Tensor, dim: int = -1) -> Tensor:
    """Jensen-Shannon divergence (log base 2, so in [0, 1]) along ``dim``."""
    p = p.double()
    q = q.double()
    m = 0.5 * (p + q)
    js = 0.5 * _xlog2(p, m).sum(dim) + 0.5 * _xlog2(q, m).sum(dim)
    return js.clamp(0.0, 1.0)


def pairwise_js_sums(dists: Tensor, weights: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Sum of JS divergences between every pair of layers.

    ``dists``: ``(L, ..., K)``, one distribution over the last axis per layer and item
    (items = heads x batch x query positions, in any layout shared by all layers).
    ``weights``: optional ``(...)`` 0/1 mask of items to count (e.g. non-pad queries).
    Returns ``(sums (L, L), count)`` so batches can be accumulated; ``mu = 1 - sums/count``.
    """
    L = dists.size(0)
    flat = dists.reshape(L, -1, dists.size(-1))
    w = (
        torch.ones(flat.size(1), dtype=torch.float64)
        if weights is None
        else weights.reshape(-1).double()
    )
    sums = torch.zeros(L, L, dtype=torch.float64)
    for i in range(L):
        for j in range(i + 1, L):
            s = (js_divergence(flat[i], flat[j]) * w).sum()
            sums[i, j] = sums[j, i] = s
    return sums, w.sum()


def similarity_matrix(dists: Tensor, weights: Optional[Tensor] = None) -> Tensor:
    """``mu(i, j) = 1 - mean JS`` between layers i and j (diagonal 1)."""
    sums, count = pairwise_js_sums(dists, weights)
    return 1.0 - sums / count.clamp(min=1e-12)


def block_similarity(mu: Tensor, start: int, end: int) -> float:
    """Mean of ``mu(i, j)`` over distinct pairs i != j in ``start..end`` (inclusive).
    One-layer blocks have similarity 1."""
    if end <= start:
        return 1.0
    sub = mu[start : end + 1, start : end + 1].double()
    n = end - start + 1
    off_diag = sub.sum() - sub.diagonal().sum()
    return float(off_diag / (n * (n - 1)))


def group_layers(mu: Tensor, theta: float) -> List[int]:
    """Greedy largest-block-first grouping from layer 1; returns block sizes."""
    L = mu.size(0)
    blocks: List[int] = []
    start = 0
    while start < L:
        end = start
        for cand in range(L - 1, start, -1):  # largest first
            if block_similarity(mu, start, cand) > theta:
                end = cand
                break
        blocks.append(end - start + 1)
        start = end + 1
    return blocks
