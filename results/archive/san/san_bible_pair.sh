#!/bin/bash
# The trained vanilla / SAN pair on the Bible corpus behind results/archive/san/san_bible.md.
#
#   results/archive/san/san_bible_pair.sh [STOP_HOURS]        (default 1.4; needs work/bible, see README)
#   SKIP_TRAIN=1 results/archive/san/san_bible_pair.sh         (steps 2-6 on the existing checkpoints)
#
# 1. Trains both models from scratch at the same time, one thread each, same seed and flags
#    (d=256, encoder 3 / decoder 6 layers); SAN = the paper's policy self 1,5 / cross 2,2,2.
#    Checkpoints every 200 updates.
# 2. Takes the latest update count that both runs saved (equal updates, as in the paper).
# 3. Learns a policy from the trained vanilla model (Figure-2-style heat-maps).
# 4. Times decoding (wall clock, interleaved, 2 threads: beam 1/4 x batch 1/64, free and forced
#    to reference lengths), scores BLEU/chrF on the full test set and measures the cache.
# 5. Times the same grid by CPU time (robust to other jobs on the machine).
# 6. Paired bootstrap significance of the BLEU/chrF difference (sacreBLEU).
set -e
cd "$(dirname "$0")/../../.."  # the checkout
HOURS=${1:-1.4}
PY=.venv/bin/python
if [ -z "$SKIP_TRAIN" ]; then
OMP_NUM_THREADS=1 results/archive/san/train_san_bench.sh bible_vanilla shared_transformer "$HOURS" \
  --save-interval-updates 200 --keep-interval-updates 12 &
OMP_NUM_THREADS=1 results/archive/san/train_san_bench.sh bible_san transformer_san "$HOURS" \
  --save-interval-updates 200 --keep-interval-updates 12 --san-self-policy 1,5 --san-cross-policy 2,2,2 &
wait
fi

updates() { ls work/san/$1 | sed -n 's/^checkpoint_[0-9]*_\([0-9]*\)\.pt$/\1/p' | sort -n; }
COMMON=$(comm -12 <(updates bible_vanilla | sort) <(updates bible_san | sort) | sort -n | tail -1)
echo "common update count: $COMMON"
V=$(ls work/san/bible_vanilla/checkpoint_*_"$COMMON".pt)
S=$(ls work/san/bible_san/checkpoint_*_"$COMMON".pt)

$PY -m fairseq_shared.cli.learn_policy "$V" --data work/bible/bin --subset valid \
  --sweep 0.6,0.7,0.75,0.8,0.85,0.9 --out-dir work/san/bible_vanilla_policy
cp work/san/bible_vanilla_policy/similarity.png results/archive/san/san_similarity_bible_trained.png
cp work/san/bible_vanilla_policy/policy.json results/archive/san/san_policy_bible_trained.json
cp work/san/bible_vanilla_policy/sweep.md results/archive/san/san_policy_sweep_bible_trained.md

OMP_NUM_THREADS=2 $PY results/archive/san/bench_san.py --data work/bible --vanilla "$V" --san "$S" \
  --threads 2 --repeats 3 --subset-small 40 --subset-large 256 --large-batch 64 \
  --out results/archive/san/san_bible.md

# 5. Contention-robust timing: the process's CPU time, one thread, 5 interleaved rounds.
OMP_NUM_THREADS=1 $PY results/archive/san/bench_san_cpu.py --data work/bible/bin \
  --models vanilla="$V",san_output="$S",san_context=work/san/bible_san/checkpoint_context.pt \
  --sentences 32 --large-batch 32 --rounds 5 --forced-len 30 --out results/archive/san/san_bible_cpu.json

# 6. Is the BLEU difference significant? Hypotheses of the full test set, decoded as in the
#    BLEU row of step 4 (beam 4, batch 64, max length 1.2 x source + 10), then
#    sacreBLEU's paired bootstrap resampling (1000 samples) against the vanilla model.
$PY -m fairseq_shared.cli.time_generate work/bible -c vanilla="$V" -c san="$S" --baseline vanilla \
  --warmup 0 --repeats 1 --threads 2 --out work/san/bible_pair_decode \
  -- --beam 4 --lenpen 1.0 --batch-size 64 --max-len-a 1.2 --max-len-b 10 --cpu
.venv/bin/sacrebleu work/bible/raw/test.en -i work/san/bible_pair_decode/hyp.vanilla.txt \
  work/san/bible_pair_decode/hyp.san.txt -m bleu chrf --paired-bs -f text | tee results/archive/san/san_bible_significance.txt
