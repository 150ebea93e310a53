#!/usr/bin/env bash
# Session 26: run 8's recipe with distilled prose answers (mini-ar's greedy continuations of the training
# passages, `canvaslab mini distill`), the diffusion model alone. The same command each call; RESUME=1 goes on
# from a carried resume folder (a cold machine).
[ -d /tmp/site/transformers ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src:$PWD/benchmarks:/tmp/site PYTHONUNBUFFERED=1
mkdir -p /tmp/s26 && [ -f /tmp/s26/prose.txt ] || gunzip -c .device-s26/prose.txt.gz > /tmp/s26/prose.txt
[ -f /tmp/s26/prose_answers.json ] || gunzip -c .device-s26/prose_answers.json.gz > /tmp/s26/prose_answers.json
sha256sum /tmp/s26/prose.txt /tmp/s26/prose_answers.json
STUDIES=0 SIBLING=none PROSE_ANSWERS=/tmp/s26/prose_answers.json \
    MIXTURE=add2=0.10,add3=0.27,fact=0.08,json=0.10,code=0.05,prose=0.26 STEPS=3500 \
    ${RESUME:+RESUME_FROM=$PWD/.device-s26/resume} \
    bash benchmarks/mini_h200_calls.sh /tmp/s26/state /tmp/s26/prose.txt "$OUT/pack" "${DEADLINE:-560}" 0
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
cp /tmp/s26/state/calls.log /tmp/s26/state/train_diffusion.log "$OUT/" 2>/dev/null
