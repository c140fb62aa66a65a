#!/bin/bash
# Train one model for the SAN speed benchmark on the Bible corpus (2 CPU threads).
# usage: [OMP_NUM_THREADS=N] results/archive/san/train_san_bench.sh NAME ARCH STOP_HOURS|--max-update=N [extra fairseq-train flags]
set -e
NAME=$1; ARCH=$2; LIMIT=$3; shift 3
if [[ $LIMIT == --max-update=* ]]; then LIMITFLAGS="--max-update ${LIMIT#--max-update=}"; else LIMITFLAGS="--stop-time-hours $LIMIT --max-update 100000"; fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} MKL_NUM_THREADS=${OMP_NUM_THREADS:-2}
.venv/bin/python -m fairseq_shared.cli.fairseq train work/bible/bin --cpu --seed 1 \
  --arch $ARCH --encoder-layers 3 --decoder-layers 6 \
  --encoder-embed-dim 256 --decoder-embed-dim 256 --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 \
  --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings \
  --optimizer adam --adam-betas '(0.9, 0.98)' --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 300 \
  --dropout 0.1 --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
  --max-tokens 3000 $LIMITFLAGS --no-epoch-checkpoints --save-dir work/san/$NAME \
  --log-format simple --log-interval 25 --num-workers 0 "$@" > work/san/$NAME.train.log 2>&1
