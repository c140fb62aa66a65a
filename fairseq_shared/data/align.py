"""Length-based check that verse-numbered pairs really are translations of each other.

The RV1909 module declares KJV versification but numbers some passages the Spanish/Hebrew
way (e.g. Num 13:29-33, 1 Sam 24, 1 Kgs 22:43-53, Job 38:39-41:34): pairing those on the
verse number pairs a verse with its neighbour's translation. We run a Gale & Church (1993)
dynamic-programming alignment of the two verse sequences of a book (beads 1-1, 1-0, 0-1,
2-1, 1-2, 2-2; character lengths) and keep a numbered pair only when the best alignment
puts the two verses in a 1-1 bead with each other. Everything else is dropped and counted.
One change to Gale & Church: a verse left unaligned (1-0, 0-1) costs its prior only, not a
length term, because a verse that exists on one side only (the other module leaves that number
empty, or numbers it into the next chapter) is common here, and a length term would rather merge
it into a neighbour's bead.
"""

import math

# Gale & Church's priors (log probabilities) and variance per character.
_BEADS = {
    (1, 1): math.log(0.89),
    (1, 0): math.log(0.0099 / 2),
    (0, 1): math.log(0.0099 / 2),
    (2, 1): math.log(0.089 / 2),
    (1, 2): math.log(0.089 / 2),
    (2, 2): math.log(0.011),
}
VARIANCE = 6.8


def _norm_sf(z):
    """P(|N(0,1)| >= z) for z >= 0."""
    return math.erfc(z / math.sqrt(2.0))


def _length_cost(len_src, len_tgt, ratio):
    if len_src == 0 and len_tgt == 0:
        return 0.0
    mean = (len_src + len_tgt / ratio) / 2.0
    z = abs((len_src * ratio - len_tgt) / math.sqrt(max(mean, 1.0) * VARIANCE))
    return -math.log(max(_norm_sf(z), 1e-300))


def align_11(src_lens, tgt_lens, ratio=None, band=20):
    """Indices (i, j) of 1-1 beads of the best Gale-Church alignment of two length lists.

    ``ratio`` is the expected target/source length ratio (default: the ratio of the sums);
    the search is restricted to a band of ``band`` positions around the diagonal.
    """
    n, m = len(src_lens), len(tgt_lens)
    if n == 0 or m == 0:
        return []
    if ratio is None:
        ratio = max(sum(tgt_lens), 1) / max(sum(src_lens), 1)
    inf = float("inf")
    cost = {(0, 0): 0.0}
    back = {}
    width = band + abs(n - m)

    def diag(i):
        return i * m / n

    for i in range(n + 1):
        centre = diag(i)
        lo, hi = max(0, int(centre) - width), min(m, int(centre) + width + 1)
        for j in range(lo, hi + 1):
            if i == 0 and j == 0:
                continue
            best, arg = inf, None
            for (di, dj), prior in _BEADS.items():
                pi, pj = i - di, j - dj
                prev = cost.get((pi, pj))
                if prev is None:
                    continue
                c = prev - prior
                if di and dj:
                    c += _length_cost(sum(src_lens[pi:i]), sum(tgt_lens[pj:j]), ratio)
                if c < best:
                    best, arg = c, (di, dj)
            if arg is not None:
                cost[(i, j)] = best
                back[(i, j)] = arg
    if (n, m) not in cost:  # band too narrow: give up on this sequence
        return []
    pairs = []
    i, j = n, m
    while (i, j) != (0, 0):
        di, dj = back[(i, j)]
        if (di, dj) == (1, 1):
            pairs.append((i - 1, j - 1))
        i, j = i - di, j - dj
    return pairs[::-1]
