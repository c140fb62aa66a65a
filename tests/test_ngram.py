"""Interpolated modified Kneser-Ney (fairseq_shared.experiments.ngram) on corpora small enough to compute
by hand: the closed forms, the adjusted counts, the discounts, normalisation, unseen words."""

import math
import random

import pytest

from fairseq_shared.experiments.ngram import BOS, EOS, UNK, KneserNey, estimate_discounts

TINY = [["a", "b"], ["a", "c"], ["b", "c"]]
D = [(0.5, 1.0, 1.0), (0.5, 1.0, 1.0)]


def test_unigram_without_discount_is_the_closed_form_mle():
    corpus = [["a", "a", "b"], ["b", "c"]]  # scored: a a b </s> b c </s>
    lm = KneserNey(1, discounts=[(0.0, 0.0, 0.0)]).fit(corpus)
    counts, n = {"a": 2, "b": 2, "c": 1, EOS: 2}, 7
    for w, c in counts.items():
        assert lm.prob(w) == pytest.approx(c / n)
    res = lm.evaluate(corpus)
    entropy = -sum(c / n * math.log(c / n) for c in counts.values())
    assert res["tokens"] == 7 and res["lines"] == 2
    assert res["perplexity"] == pytest.approx(math.exp(entropy))
    assert res["loss_base2"] == pytest.approx(entropy / math.log(2))


def test_unigram_discount_goes_to_the_uniform_distribution_and_unseen_words_are_unk():
    lm = KneserNey(1, discounts=[(0.5, 0.5, 0.5)]).fit([["a", "a", "b"], ["b", "c"]])
    assert lm.vocab == {"a", "b", "c", EOS, UNK}
    mass = 0.5 * 4 / 7 / 5  # four seen words give 0.5 each to the 5 words of V
    assert lm.prob("a") == pytest.approx(1.5 / 7 + mass)
    assert lm.prob("c") == pytest.approx(0.5 / 7 + mass)
    assert lm.prob(UNK) == pytest.approx(mass)
    assert lm.prob("never-seen") == lm.prob(UNK)
    assert sum(lm.prob(w) for w in lm.vocab) == pytest.approx(1.0)
    lp, tokens, oov = lm.sentence_logprob(["a", "zzz"])
    assert (tokens, oov) == (3, 1)
    assert lp == pytest.approx(math.log(lm.prob("a") * lm.prob(UNK) * lm.prob(EOS)))


def test_adjusted_counts_are_continuation_counts_except_at_the_top_and_after_bos():
    lm = KneserNey(3, discounts=[(0.5, 1, 1)] * 3).fit(TINY + [["a", "b"]])
    uni = {g[0]: a for g, a in lm.counts[0].items()}
    # distinct left neighbours: a <- {<s>}, b <- {a, <s>}, c <- {a, b}, </s> <- {b, c}
    assert uni == {"a": 1, "b": 2, "c": 2, EOS: 2}
    assert lm.counts[1][(BOS, "a")] == 3  # starts with <s>: the raw count
    assert lm.counts[1][("a", "b")] == 1  # only <s> precedes it
    assert lm.counts[2][(BOS, "a", "b")] == 2  # the highest order: raw counts
    assert lm.counts[2][("a", "b", EOS)] == 2


def test_bigram_probabilities_by_hand():
    lm = KneserNey(2, discounts=D).fit(TINY)
    # unigram: continuation counts a 1, b 2, c 2, </s> 2 (total 7); gamma 0.5 + 3 * 1 = 3.5
    p1 = {w: (max(a - (0.5 if a == 1 else 1.0), 0) + 3.5 / 5) / 7
          for w, a in {"a": 1, "b": 2, "c": 2, EOS: 2, UNK: 0}.items()}
    for w, p in p1.items():
        assert lm.prob(w) == pytest.approx(p)
    # context a: (a b) 1, (a c) 1 -> total 2, gamma 0.5 + 0.5
    assert lm.prob("b", ["a"]) == pytest.approx((0.5 + 1.0 * p1["b"]) / 2)
    assert lm.prob("a", ["a"]) == pytest.approx(p1["a"] / 2)
    # context <s>: (<s> a) 2, (<s> b) 1 -> total 3, gamma 1.0 + 0.5
    assert lm.prob("a", [BOS]) == pytest.approx((1.0 + 1.5 * p1["a"]) / 3)
    # a context never seen (here <unk>) adds nothing: the unigram distribution
    assert lm.prob("a", ["zzz"]) == pytest.approx(p1["a"])
    # a sentence: P(a | <s>) P(b | a) P(</s> | b); context b: (b </s>) 1, (b c) 1
    lp, tokens, _ = lm.sentence_logprob(["a", "b"])
    expected = lm.prob("a", [BOS]) * lm.prob("b", ["a"]) * (0.5 + p1[EOS]) / 2
    assert tokens == 3 and lp == pytest.approx(math.log(expected))


def _markov_corpus(seed, sentences=600, vocab=300):
    """Zipf-distributed first words, then mostly one of a few successors: enough repeated
    n-grams of every order up to 5 for the count-of-counts n1..n4."""
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(vocab)]
    out = []
    for _ in range(sentences):
        w = rng.choices(range(vocab), weights)[0]
        s = [w]
        for _ in range(rng.randint(0, 8)):
            w = (w * 7 + rng.choices((1, 2, 3, 50), (8, 3, 1, 1))[0]) % vocab
            s.append(w)
        out.append([f"w{i}" for i in s])
    return out


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_probabilities_sum_to_one_over_the_vocabulary_for_every_context(order):
    lm = KneserNey(order).fit(_markov_corpus(order))  # discounts estimated
    assert len(lm.discounts) == order
    for k, (d1, d2, d3) in enumerate(lm.discounts, 1):
        assert 0 < d1 <= 1 and 0 < d2 <= 2 and 0 < d3 <= 3, (k, lm.discounts)
    contexts = [(), (BOS,), (BOS, "w0"), ("w0", "w1", "w0", "w0"), ("w3", "w211", "w2"),
                ("zzz",), ("w1", "zzz", "w0"), (BOS, "w11", "w299", "w10")]
    for ctx in contexts:
        total = sum(lm.prob(w, ctx) for w in lm.vocab)
        assert total == pytest.approx(1.0, abs=1e-12), ctx
        assert lm.prob(UNK, ctx) > 0


def test_higher_orders_fit_their_training_data_better():
    corpus = _markov_corpus(7)
    ppl = [KneserNey(n, fallback=(0.5, 1, 1.5)).fit(corpus).evaluate(corpus)["perplexity"]
           for n in (1, 2, 3)]
    assert ppl[0] > ppl[1] > ppl[2]


def test_discounts_follow_chen_and_goodman():
    y = 10 / (10 + 2 * 4)
    d = estimate_discounts({1: 10, 2: 4, 3: 2, 4: 1})
    assert d == pytest.approx((1 - 2 * y * 4 / 10, 2 - 3 * y * 2 / 4, 3 - 4 * y * 1 / 2))
    with pytest.raises(ValueError, match=r"order 2: count-of-counts n1..n4 = \[3, 0, 1, 1\]"):
        estimate_discounts({1: 3, 3: 1, 4: 1}, 2)
    with pytest.raises(ValueError, match="too small"):
        KneserNey(2).fit(TINY)
    lm = KneserNey(2, fallback=(0.5, 1, 1.5)).fit(TINY)  # KenLM's --discount_fallback
    assert lm.fallback_orders == [1, 2] and lm.discounts == [(0.5, 1, 1.5)] * 2


def test_bad_arguments_name_what_is_allowed():
    with pytest.raises(ValueError, match="order: 0; allowed: 1 or more"):
        KneserNey(0)
    with pytest.raises(ValueError, match="one \\(D1, D2, D3\\+\\) per order"):
        KneserNey(2, discounts=[(0.5, 1, 1)])
    with pytest.raises(ValueError, match="never predicted"):
        KneserNey(2, vocab=[BOS, "a"])


def test_an_explicit_vocabulary_maps_other_training_words_to_unk():
    lm = KneserNey(1, vocab=["a", "b"], discounts=[(0.0, 0.0, 0.0)]).fit([["a", "b", "c"]])
    assert lm.vocab == {"a", "b", EOS, UNK}
    assert lm.prob("c") == lm.prob(UNK) == pytest.approx(1 / 4)
