"""How alike the layers of a stack are, and the layer-to-set patterns that follow from it.

Pure functions: tensors in, matrices and patterns out (running a model to get the layers'
outputs is :mod:`fairseq_shared.tools.learn_sharing`). Patterns are 0-based set indices per layer,
numbered by first appearance, as :func:`fairseq_shared.sharing.assignment.layer_assignment` returns.

Similarity of two layers:

- :func:`linear_cka` (Kornblith et al. 2019, "Similarity of Neural Network Representations
  Revisited"): linear centered kernel alignment of two layers' outputs on the same tokens,
  ``||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)`` with centered columns. 1 for identical
  representations, invariant to isotropic scaling and to orthogonal transforms of either.
- :func:`cosine_matrix`: cosine of the layers' flattened parameters.

Both matrices are Gram matrices of unit vectors (CKA: the normalised centered token-Gram
matrices; cosine: the normalised parameter vectors), symmetric with a unit diagonal. That
gives the grouping one objective: a partition into groups g maximises
``sum_g (1/|g|) sum_{i,j in g} S_ij``, which is ``N - sum_i ||phi_i - mean_g(phi)||^2``:
the total squared distance of the layers from their group's mean in that space (kernel
k-means). With the cosine of weights it is the loss of replacing each (normalised) layer by
its set's mean, which is what ``convert_sharing`` does.

- :func:`adjacent_partition`: the best partition into M *contiguous* groups (Xiao et al.'s
  adjacent blocks), exact, by dynamic programming over the split points.
- :func:`average_linkage`: M groups of any layers, by average-linkage agglomerative
  clustering (merge the two groups of highest mean pairwise similarity; ties to the
  earliest layers).
- :func:`threshold_adjacent` / :func:`threshold_linkage`: the number of groups follows
  from a threshold T instead: a layer joins the group of the layers before it while its
  similarity to *every* layer of that group is >= T (so every pair in a group is >= T; a
  plain chain rule would let a slow drift join layers far apart); clustering merges while
  the best mean pairwise similarity is >= T.
"""

from itertools import combinations
from typing import List, Sequence

import torch

from fairseq_shared.sharing.assignment import canonical


# ---------------------------------------------------------------------------- measures
def _centered(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return x - x.mean(0, keepdim=True)


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA of ``x`` (n, d1) and ``y`` (n, d2): rows are the same n tokens.

    A representation without variance (all rows equal) carries nothing to compare: 0.
    """
    if x.dim() != 2 or y.dim() != 2 or x.size(0) != y.size(0):
        raise ValueError(f"need (n, d) matrices over the same n rows, got {tuple(x.shape)} "
                         f"and {tuple(y.shape)}")
    x, y = _centered(x), _centered(y)
    cross = (y.t() @ x).pow(2).sum()
    norms = torch.linalg.matrix_norm(x.t() @ x) * torch.linalg.matrix_norm(y.t() @ y)
    return float(cross / norms) if norms > 0 else 0.0


def cka_matrix(features: Sequence[torch.Tensor]) -> torch.Tensor:
    """Linear CKA of every pair of ``features`` (each (n, d_l), same n rows): (L, L).

    Uses ``<X X^T, Y Y^T> = ||X^T Y||_F^2`` in whichever space is smaller: the (n, n)
    token Grams when n <= d, else the (d, d) cross-covariances.
    """
    xs = [_centered(f) for f in features]
    n = xs[0].size(0)
    if any(x.size(0) != n for x in xs):
        raise ValueError("every layer's features must cover the same tokens")
    L = len(xs)
    inner = torch.zeros(L, L, dtype=torch.float64)
    if n <= min(x.size(1) for x in xs):
        grams = [x @ x.t() for x in xs]
        for i, j in combinations(range(L), 2):
            inner[i, j] = inner[j, i] = (grams[i] * grams[j]).sum()
        for i in range(L):
            inner[i, i] = grams[i].pow(2).sum()
    else:
        for i in range(L):
            for j in range(i, L):
                inner[i, j] = inner[j, i] = (xs[i].t() @ xs[j]).pow(2).sum()
    norms = inner.diagonal().sqrt()
    outer = norms[:, None] * norms[None, :]
    out = torch.where(outer > 0, inner / outer.clamp_min(1e-300), torch.zeros_like(inner))
    out.fill_diagonal_(1.0)
    return out


def cosine_matrix(vectors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Cosine similarity of every pair of flattened ``vectors`` (e.g. a layer's parameters)."""
    v = torch.stack([x.double().flatten() for x in vectors])
    v = v / v.norm(dim=1, keepdim=True).clamp_min(1e-300)
    return v @ v.t()


# ---------------------------------------------------------------------------- objective
def group_score(sim: torch.Tensor, group: Sequence[int]) -> float:
    """``(1/|g|) sum_{i,j in g} S_ij``: |g| minus the group's squared scatter around its mean."""
    idx = torch.as_tensor(list(group))
    return float(sim[idx][:, idx].sum()) / len(group)


def partition_score(sim: torch.Tensor, assignment: Sequence[int]) -> float:
    """The objective every grouping here maximises (see the module docstring)."""
    groups: dict = {}
    for layer, s in enumerate(assignment):
        groups.setdefault(s, []).append(layer)
    return sum(group_score(sim, g) for g in groups.values())


def _check(sim: torch.Tensor, num_groups: int = None) -> int:
    if sim.dim() != 2 or sim.size(0) != sim.size(1):
        raise ValueError(f"need a square similarity matrix, got {tuple(sim.shape)}")
    N = sim.size(0)
    if num_groups is not None and not 1 <= num_groups <= N:
        raise ValueError(f"the number of sets must satisfy 1 <= M <= {N} (the layers), got "
                         f"{num_groups}")
    return N


# ---------------------------------------------------------------------------- patterns
def adjacent_partition(sim: torch.Tensor, num_groups: int) -> List[int]:
    """The contiguous partition into ``num_groups`` groups with the highest
    :func:`partition_score` (exact: dynamic programming over split points, O(M N^2))."""
    sim = sim.double()
    N, M = _check(sim, num_groups), num_groups
    prefix = torch.zeros(N + 1, N + 1, dtype=torch.float64)
    prefix[1:, 1:] = sim.cumsum(0).cumsum(1)

    def score(a: int, b: int) -> float:  # layers a..b-1
        block = prefix[b, b] - prefix[a, b] - prefix[b, a] + prefix[a, a]
        return float(block) / (b - a)

    neg = float("-inf")
    best = [[neg] * (N + 1) for _ in range(M + 1)]  # best[m][j]: layers 0..j-1 in m groups
    split = [[0] * (N + 1) for _ in range(M + 1)]
    best[0][0] = 0.0
    for m in range(1, M + 1):
        for j in range(m, N - (M - m) + 1):
            for i in range(m - 1, j):
                if best[m - 1][i] == neg:
                    continue
                value = best[m - 1][i] + score(i, j)
                if value > best[m][j] + 1e-12:  # ties: the earliest split found first
                    best[m][j], split[m][j] = value, i
    bounds, j = [], N
    for m in range(M, 0, -1):
        bounds.append((split[m][j], j))
        j = split[m][j]
    assignment = []
    for group, (a, b) in enumerate(reversed(bounds)):
        assignment += [group] * (b - a)
    return assignment


def _linkage(sim: torch.Tensor, stop) -> List[int]:
    groups = [[i] for i in range(sim.size(0))]
    while len(groups) > 1:
        best, pair = None, None
        for a, b in combinations(range(len(groups)), 2):  # groups stay ordered by first layer
            mean = float(sim[groups[a]][:, groups[b]].mean())
            if best is None or mean > best + 1e-12:
                best, pair = mean, (a, b)
        if stop(len(groups), best):
            break
        a, b = pair
        groups[a] = sorted(groups[a] + groups[b])
        del groups[b]
    assignment = [0] * sim.size(0)
    for g, members in enumerate(groups):
        for i in members:
            assignment[i] = g
    return canonical(assignment)


def average_linkage(sim: torch.Tensor, num_groups: int) -> List[int]:
    """``num_groups`` groups of any layers: average-linkage agglomerative clustering."""
    _check(sim, num_groups)
    return _linkage(sim.double(), lambda groups, best: groups <= num_groups)


def threshold_linkage(sim: torch.Tensor, threshold: float) -> List[int]:
    """Average-linkage clustering that merges while the best mean similarity is >= T."""
    _check(sim)
    return _linkage(sim.double(), lambda groups, best: best < threshold)


def threshold_adjacent(sim: torch.Tensor, threshold: float) -> List[int]:
    """Contiguous groups from layer 1: the next layer joins the current group while its
    similarity to every layer of the group is >= ``threshold``."""
    N = _check(sim)
    assignment, group = [0], [0]
    for i in range(1, N):
        if all(float(sim[i, j]) >= threshold for j in group):
            group.append(i)
        else:
            group = [i]
        assignment.append(assignment[-1] + (len(group) == 1))
    return assignment


def pattern_flag(assignment: Sequence[int]) -> str:
    """As ``--{stack}-share-strategy`` takes it: ``1,1,2,2,3,3``."""
    return ",".join(str(s + 1) for s in assignment)
