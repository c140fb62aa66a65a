"""The fixed-size answers (issue 55, item 5) from hand-made comparisons: each states its seeds,
its verdicts and, where a gap is not resolved, how many seeds a side would resolve it; the
fastest model at beam 1 is picked among those not resolved below vanilla 3+3 only."""

from harness import budget_answers
from harness.statistics import compare


def final(name, seeds, params=2_400_000):
    return {s: {"name": name, "seed": s, "params": params} for s in range(1, seeds + 1)}


def test_the_answers_state_seeds_verdicts_and_the_seeds_a_gap_needs():
    finals = {"vanilla": final("vanilla", 3), "cycle_rev_2L": final("cycle_rev_2L", 3),
              "vanilla_2L_narrow": final("vanilla_2L_narrow", 1, 2_409_984),
              "cycle_rev_2L_depthcond": final("cycle_rev_2L_depthcond", 1, 2_426_368),
              "nodec_ffn": final("nodec_ffn", 1)}
    pool = (0.6, 11)
    worse = compare([30.0, 30.5, 29.5], [27.0], pool)
    close = compare([30.0, 30.5, 29.5], [31.0], pool)
    loss = compare([5.46, 5.47, 5.45], [5.45], (0.04, 11))
    versus = {"vanilla_2L_narrow": {"bleu": worse, "valid_loss": loss,
                                    "pair": {"name": "cycle_rev_2L", "bleu": worse,
                                             "valid_loss": loss}},
              "cycle_rev_2L_depthcond": {"bleu": close, "valid_loss": loss,
                                         "pair": {"name": "cycle_rev_2L", "bleu": close,
                                                  "valid_loss": loss}},
              "cycle_rev_2L": {"bleu": close, "valid_loss": loss},
              "nodec_ffn": {"bleu": worse, "valid_loss": loss}}
    cells = {n: {"ratios": {"1": [1.0, None, None, r], "32": [1.0, None, None, r / 3]},
                 "mb": "9.71 / 3.05"}
             for n, r in [("vanilla", 7.9), ("cycle_rev_2L", 5.3), ("vanilla_2L_narrow", 7.3),
                          ("cycle_rev_2L_depthcond", 5.5)]}
    beam1 = {n: {"bleu": 27.0, "speed": s, "ratio": s / 6500, "engines": "ct2_int8", "timed": "s1"}
             for n, s in [("vanilla", 6500), ("cycle_rev_2L", 3800), ("nodec_ffn", 9000),
                          ("cycle_rev_2L_depthcond", 4200)]}
    narrow, depth, fastest = budget_answers.lines(finals, versus, {}, None, None, cells, beam1)
    assert narrow.startswith("- **Narrower or shared, at one size and depth** (6+6): "
                             "`vanilla_2L_narrow` (2,409,984 parameters, 1 seed) against "
                             "`cycle_rev_2L` (3 seeds), equal updates: valid loss not resolved: ")
    assert "BLEU worse: -3.00 [" in narrow
    assert "7.30 / 2.43 (ct2_int8, 3.05 MB)" in narrow and "x0.58 vanilla 3+3" in narrow
    assert depth.startswith("- **`cycle_rev_2L_depthcond`** (2,426,368 parameters, 1 seed) "
                            "against vanilla 3+3 (3 seeds)")
    assert "BLEU not resolved: +1.00 [" in depth and "(4 seeds a side would resolve it)" in depth
    assert depth.count("against") == 2 and "against `cycle_rev_2L` (3 seeds)" in depth
    # nodec_ffn is the fastest at beam 1, but resolved below vanilla 3+3: vanilla itself wins
    assert fastest.startswith("- **Fastest at beam 1 within vanilla 3+3's BLEU** (batch 32, one "
                              "thread; the 3 configurations timed at beam 1 and not resolved "
                              "below it at beam 4): vanilla 3+3, 6,500 tok/s per thread")
    # nothing asked for before the runs exist
    assert budget_answers.lines({"vanilla": final("vanilla", 3)}, {}, {}, None, None, {}, {}) == []
