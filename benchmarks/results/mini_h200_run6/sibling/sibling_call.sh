#!/usr/bin/env bash
# Session 16: the AR sibling for run 6's 3,000 steps (same pool, same order) beside the last 216 conditions of
# run 6's noise study. The same command each call, on a machine kept warm between calls.
set -u
start=$SECONDS
[ -d /tmp/site/transformers ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src:$PWD/benchmarks:/tmp/site PYTHONUNBUFFERED=1
S=$PWD/.device-ckpt; mkdir -p $S/bin $OUT/r
export TORCHINDUCTOR_CACHE_DIR=$S/inductor
printf '#!/bin/sh\nexec python -c "from canvaslab.cli.main import main; main()" "$@"\n' > $S/bin/canvaslab; chmod +x $S/bin/canvaslab
export PATH=$S/bin:$PATH
if [ ! -d $S/noise_study ]; then
  mkdir -p $S/noise_study && cp .device-s9/plan.json .device-s9/plan.sha256 $S/noise_study/ && tar -xzf .device-s9/store.tgz -C $S/noise_study
fi
echo "[$((SECONDS-start)) s] call starts; records: $(ls $S/noise_study/store/records | wc -l)" | tee -a $S/calls.log
for i in 1 2 3 4 5 6; do timeout 480 canvaslab noise-study run $S/noise_study --device cuda >> $S/noise.log 2>&1 & done
if [ ! -f $S/a/training.json ]; then
  timeout 530 python benchmarks/mini_train_h200.py --out $S/a --kinds causal --eval-models autoregressive \
    --eval-tasks add2,add3,word,fact,json,prose --passages .device-s9/prose.txt --batch-size 512 --lr 7e-4 \
    --examples 600000 --steps 3000 --device cuda --compile leaves --checkpoint-dir $S/ckpt --stop-after 470 \
    --pack $OUT/pack >> $S/train.log 2>&1
fi
wait
echo "[$((SECONDS-start)) s] stages stopped; records: $(ls $S/noise_study/store/records | wc -l)" | tee -a $S/calls.log
canvaslab noise-study report $S/noise_study > $S/noise_report.txt 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv > $S/gpu.txt 2>&1
cp $S/train.log $S/noise.log $S/calls.log $S/noise_report.txt $S/gpu.txt $S/noise_study/noise_study.json $OUT/r/ 2>/dev/null
[ -f $S/a/training.json ] && cp $S/a/*.json $S/a/*.md $S/a/*.png $OUT/r/
tar -czf $OUT/r/store.tgz -C $S/noise_study store
echo "[$((SECONDS-start)) s] packed"; tail -5 $S/train.log; tail -3 $S/noise_report.txt
