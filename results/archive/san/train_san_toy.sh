#!/bin/bash
# Quality check on the synthetic toy corpus (fairseq_shared.data.toydata), where a tiny model
# converges in a minute: vanilla vs SAN under the same number of updates.
# usage: results/archive/san/train_san_toy.sh NAME ARCH MAX_UPDATE [extra fairseq-train flags]
set -e
NAME=$1; ARCH=$2; MAXUP=$3; shift 3
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
.venv/bin/python -m fairseq_shared.cli.fairseq train work/toy/bin --cpu --seed 1 \
  --arch $ARCH --encoder-layers 2 --decoder-layers 6 \
  --encoder-embed-dim 64 --decoder-embed-dim 64 --encoder-ffn-embed-dim 128 --decoder-ffn-embed-dim 128 \
  --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings \
  --optimizer adam --adam-betas '(0.9, 0.98)' --lr 3e-3 --lr-scheduler inverse_sqrt --warmup-updates 100 \
  --dropout 0.1 --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
  --max-tokens 1000 --max-update $MAXUP --no-epoch-checkpoints --save-dir work/san/toy_$NAME \
  --log-format simple --log-interval 100 --num-workers 0 "$@" > work/san/toy_$NAME.train.log 2>&1
