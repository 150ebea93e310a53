#!/usr/bin/env bash
# Session 24: run 8's recipe on prose alone (a diagnostic, not a model to ship): is prose limited by its share
# of the mixture or by the budget? The same command each call; RESUME=1 goes on from a carried resume folder.
[ -d /tmp/site/transformers ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src:$PWD/benchmarks:/tmp/site PYTHONUNBUFFERED=1
mkdir -p /tmp/s24 && [ -f /tmp/s24/prose.txt ] || gunzip -c .device-s24/prose.txt.gz > /tmp/s24/prose.txt
sha256sum /tmp/s24/prose.txt
STUDIES=0 SIBLING=none EVAL_TASKS=prose \
    MIXTURE=add2=0,add3=0,word=0,fact=0,fact_statement=0,json=0,code=0,prose=1 STEPS=3500 \
    ${RESUME:+RESUME_FROM=$PWD/.device-s24/resume} \
    bash benchmarks/mini_h200_calls.sh /tmp/s24/state /tmp/s24/prose.txt "$OUT/pack" "${DEADLINE:-560}" 0
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
cp /tmp/s24/state/calls.log /tmp/s24/state/train_diffusion.log "$OUT/" 2>/dev/null
