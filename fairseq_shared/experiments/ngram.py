"""Interpolated modified Kneser-Ney n-gram language models (Chen & Goodman 1998), pure Python.

The estimator is KenLM's (``lmplz``, interpolated, no pruning):

* each sentence is scored as ``w1 .. wm </s>`` with the context ``<s>`` at its start (one
  ``<s>``: the first word is predicted from the sentence start alone, as a bigram);
* adjusted counts ``a(g)``: the raw count for n-grams of the highest order and for n-grams
  that start with ``<s>`` (nothing can precede them); otherwise the number of distinct words
  seen to the left of ``g`` (continuation count);
* three discounts per order from the count-of-counts ``n1..n4`` of that order's adjusted
  counts: ``Y = n1 / (n1 + 2 n2)``, ``D1 = 1 - 2Y n2/n1``, ``D2 = 2 - 3Y n3/n2``,
  ``D3+ = 3 - 4Y n4/n3``;
* ``P(w | h) = (max(a(hw) - D(a(hw)), 0) + gamma(h) P(w | h')) / sum_x a(hx)`` with
  ``gamma(h) = sum_x D(a(hx))`` and ``h'`` = ``h`` without its first word; an ``h`` never
  seen as a context backs off entirely, ``P(w | h) = P(w | h')``;
* the unigram level interpolates with the uniform distribution over the vocabulary ``V``:
  ``P(w) = max(a(w) - D(a(w)), 0) / sum_x a(x) + gamma / |V|``.

``V`` is every word that can be predicted: the training words, ``</s>`` and ``<unk>`` (or a
vocabulary given explicitly; ``<s>`` is never predicted). **Unseen words**: a word outside
``V`` is read as ``<unk>``, both in training and in scoring; ``<unk>`` (like any word of
``V`` never seen in training) gets only the mass that the discounts pass down to the uniform
distribution, so every probability is positive and ``P(. | h)`` sums to 1 over ``V`` for
every context. ``order=1`` is the unigram model with the same rule (absolute discounting,
interpolated with the uniform distribution).
"""

import math
from collections import Counter, defaultdict
from typing import Dict, Hashable, Iterable, List, Optional, Sequence, Tuple

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
Discounts = Tuple[float, float, float]


def estimate_discounts(count_of_counts: Dict[int, int], order: int = 0) -> Discounts:
    """Chen & Goodman's (D1, D2, D3+) from {adjusted count: number of n-grams}."""
    n = [count_of_counts.get(k, 0) for k in (1, 2, 3, 4)]
    if min(n) == 0:
        raise ValueError(f"order {order}: count-of-counts n1..n4 = {n} has a zero; the corpus "
                         "is too small to estimate modified Kneser-Ney discounts (give "
                         "discounts= explicitly)")
    y = n[0] / (n[0] + 2 * n[1])
    d = (1 - 2 * y * n[1] / n[0], 2 - 3 * y * n[2] / n[1], 3 - 4 * y * n[3] / n[2])
    if not all(0 < dk <= k for k, dk in enumerate(d, 1)):
        raise ValueError(f"order {order}: discounts {d} from count-of-counts {n} are outside "
                         "(0, 1], (0, 2], (0, 3] (give discounts= explicitly)")
    return d


def _discount(d: Discounts, a: int) -> float:
    return 0.0 if a <= 0 else d[min(a, 3) - 1]


class KneserNey:
    """An interpolated modified Kneser-Ney model of ``order`` (1 = unigram).

    ``vocab``: the words that can be predicted (``eos`` and ``unk`` are added); default:
    the training words. ``discounts``: one (D1, D2, D3+) per order, lowest order first;
    default: estimated from the training data, where an order whose count-of-counts give no
    valid discounts is an error, or, with ``fallback`` (KenLM's ``--discount_fallback``,
    0.5 1 1.5), uses those (listed in ``fallback_orders``)."""

    def __init__(self, order: int, vocab: Optional[Iterable[Hashable]] = None,
                 discounts: Optional[Sequence[Discounts]] = None,
                 bos: Hashable = BOS, eos: Hashable = EOS, unk: Hashable = UNK,
                 fallback: Optional[Discounts] = None):
        if order < 1:
            raise ValueError(f"order: {order}; allowed: 1 or more")
        if discounts is not None and len(discounts) != order:
            raise ValueError(f"discounts: {len(discounts)} triples for order {order}; need "
                             f"one (D1, D2, D3+) per order")
        self.order, self.bos, self.eos, self.unk = order, bos, eos, unk
        self.fixed_vocab = None if vocab is None else set(vocab) | {eos, unk}
        if self.fixed_vocab is not None and bos in self.fixed_vocab:
            raise ValueError("vocab: the sentence start symbol is never predicted; leave it out")
        self.given_discounts, self.fallback = discounts, fallback
        self.fallback_orders: List[int] = []
        self.vocab: set = set()
        self.counts: List[Dict[tuple, int]] = []     # [k-1]: adjusted counts of k-grams
        self.context_total: List[Dict[tuple, int]] = []
        self.context_gamma: List[Dict[tuple, float]] = []
        self.discounts: List[Discounts] = []
        self.count_of_counts: List[Dict[int, int]] = []

    # ------------------------------------------------------------------ estimation
    def _map(self, sentence: Sequence[Hashable]) -> List[Hashable]:
        return [w if w in self.vocab else self.unk for w in sentence]

    def fit(self, sentences: Iterable[Sequence[Hashable]]) -> "KneserNey":
        sentences = [list(s) for s in sentences]
        if self.fixed_vocab is None:
            self.vocab = {w for s in sentences for w in s} | {self.eos, self.unk}
            self.vocab.discard(self.bos)
        else:
            self.vocab = set(self.fixed_vocab)
        n = self.order
        raw = [Counter() for _ in range(n)]
        for s in sentences:
            padded = [self.bos] + self._map(s) + [self.eos]
            for i in range(1, len(padded)):  # every predicted position
                for k in range(1, min(n, i + 1) + 1):
                    raw[k - 1][tuple(padded[i - k + 1:i + 1])] += 1
        left = [Counter() for _ in range(n)]  # [k-1]: distinct left words of each k-gram
        for k in range(2, n + 1):
            for g in raw[k - 1]:
                left[k - 2][g[1:]] += 1
        self.counts = []
        for k in range(1, n + 1):
            self.counts.append({g: (c if k == n or g[0] == self.bos else left[k - 1][g])
                                for g, c in raw[k - 1].items()})
        self.count_of_counts = [dict(Counter(a for a in c.values() if a <= 4))
                                for c in self.counts]
        self.discounts = list(self.given_discounts or [])
        self.fallback_orders = []
        for k, cc in enumerate(self.count_of_counts if not self.discounts else [], 1):
            try:
                self.discounts.append(estimate_discounts(cc, k))
            except ValueError:
                if self.fallback is None:
                    raise
                self.discounts.append(tuple(self.fallback))
                self.fallback_orders.append(k)
        self.context_total, self.context_gamma = [], []
        for k, (counts, d) in enumerate(zip(self.counts, self.discounts), 1):
            total, gamma = defaultdict(int), defaultdict(float)
            for g, a in counts.items():
                total[g[:-1]] += a
                gamma[g[:-1]] += _discount(d, a)
            self.context_total.append(dict(total))
            self.context_gamma.append(dict(gamma))
        return self

    # ------------------------------------------------------------------ scoring
    def prob(self, word: Hashable, context: Sequence[Hashable] = ()) -> float:
        """P(word | context); ``context`` is the preceding words, oldest first (it may start
        with the sentence start symbol). Words outside the vocabulary are ``<unk>``."""
        if not self.counts:
            raise RuntimeError("fit the model first")
        word = word if word in self.vocab else self.unk
        ctx = tuple(c if c == self.bos or c in self.vocab else self.unk for c in context)
        d = self.discounts[0]
        total = self.context_total[0][()]
        a = self.counts[0].get((word,), 0)
        p = (max(a - _discount(d, a), 0) + self.context_gamma[0][()] / len(self.vocab)) / total
        for k in range(2, min(self.order, len(ctx) + 1) + 1):
            h = ctx[len(ctx) - k + 1:]
            total = self.context_total[k - 1].get(h)
            if not total:
                continue  # an unseen context: this order adds nothing
            a = self.counts[k - 1].get(h + (word,), 0)
            d = self.discounts[k - 1]
            p = (max(a - _discount(d, a), 0) + self.context_gamma[k - 1][h] * p) / total
        return p

    def sentence_logprob(self, sentence: Sequence[Hashable]) -> Tuple[float, int, int]:
        """(natural log-probability of ``w1 .. wm </s>`` after ``<s>``, tokens scored = m + 1,
        of which ``<unk>`` or outside the vocabulary)."""
        padded = [self.bos] + list(sentence) + [self.eos]
        logp = 0.0
        for i in range(1, len(padded)):
            logp += math.log(self.prob(padded[i], padded[max(0, i - self.order + 1):i]))
        oov = sum(1 for w in sentence if w == self.unk or w not in self.vocab)
        return logp, len(padded) - 1, oov

    def evaluate(self, sentences: Iterable[Sequence[Hashable]]) -> Dict:
        """Per-token perplexity over every scored token (each sentence's words and its
        ``</s>``), as ``fairseq-eval-lm`` counts it; loss in bits per token."""
        logp, tokens, oov, lines = 0.0, 0, 0, 0
        for s in sentences:
            lp, t, o = self.sentence_logprob(s)
            logp, tokens, oov, lines = logp + lp, tokens + t, oov + o, lines + 1
        loss = -logp / tokens / math.log(2)
        return {"lines": lines, "tokens": tokens, "oov_tokens": oov,
                "loss_base2": loss, "perplexity": 2 ** loss}

    def summary(self) -> Dict:
        return {"order": self.order, "vocab": len(self.vocab),
                "ngrams": [len(c) for c in self.counts],
                "discounts": [list(d) for d in self.discounts],
                "fallback_orders": list(self.fallback_orders),
                "count_of_counts": [{str(k): v for k, v in sorted(cc.items())}
                                    for cc in self.count_of_counts]}
