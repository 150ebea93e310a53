#!/usr/bin/env bash
# Session 25: prose-only A/B arms at a matched, short budget (1,000 steps, batch 512, seed 0, the shipped
# tokenizer, --compile leaves, 300,000 prose examples): one arm per call, `ARM=name LR=x POWER=y bash ...`.
set -u
[ -d /tmp/site/transformers ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src:$PWD/benchmarks:/tmp/site PYTHONUNBUFFERED=1
mkdir -p /tmp/s25 && [ -f /tmp/s25/prose.txt ] || gunzip -c .device-s25/prose.txt.gz > /tmp/s25/prose.txt
sha256sum /tmp/s25/prose.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
start=$(date +%s)
timeout 570 python benchmarks/mini_train_h200.py --out /tmp/s25/$ARM --passages /tmp/s25/prose.txt \
    --steps ${STEPS:-1000} --batch-size 512 --lr $LR --rate-power ${POWER:-1} --examples 300000 --warmup 100 \
    --kinds diffusion --eval-models diffusion --eval-tasks prose --eval-per-task 100 --compile leaves \
    --mixture add2=0,add3=0,word=0,fact=0,fact_statement=0,json=0,code=0,prose=1 > /tmp/s25/$ARM.log 2>&1
echo "rc $? after $(( $(date +%s) - start )) s" >> /tmp/s25/$ARM.log
mkdir -p "$OUT/$ARM"
cp /tmp/s25/$ARM/quality*.json /tmp/s25/$ARM/training.json /tmp/s25/$ARM/loss.png "$OUT/$ARM/" 2>/dev/null
gzip -c /tmp/s25/$ARM.log > "$OUT/$ARM/train.log.gz"
tail -5 /tmp/s25/$ARM.log
