#!/usr/bin/env bash
# Train `mini` on GPU 0 and its AR sibling on GPU 1 at the same time (same examples, same step count:
# the diffusion model's time budget fixes it, the sibling waits for that number), evaluate each on its
# GPU, and run the studies on the trained models until DEADLINE_S after the start: GPU 0 the default
# (2,304-condition) noise study beside the diffusion model's evaluation (resumable: its store keeps
# every finished condition), GPU 1 after the sibling the commit-order study on the mini probe suite with
# the sibling as baseline.
# Each trained model is copied into the package's preset folder (assets/mini, assets/mini-ar) of the
# canvaslab on PYTHONPATH as soon as it is saved, so the studies run on `--model mini` and
# `--baseline mini`, the commands a user types, and the noise study's plan names the preset.
# PACK_DIR receives each model's weight shards (PACK_DIR/diffusion, PACK_DIR/autoregressive) and
# results.tgz (everything else but the order study's raw traces; those come as traces.jsonl.gz beside
# it only when the whole pack stays under 62 MiB, the device's limit on what comes back).
#
#   bash benchmarks/mini_h200_both.sh PASSAGES RUN_DIR PACK_DIR [TIME_BUDGET_S] [EXAMPLES] [LR] [EVAL_PER_TASK]
#       [DEADLINE_S] [TOKEN_COUNTS]
# TOKEN_COUNTS: token_counts.npy of `canvaslab vocab-scan --tokenizer mini --corpus TRAINING_TEXT`, so the
# noise study's rare-token control is the training text's rarest tokens.
# Environment: BATCH (default 512), DEVICE (default cuda; DEVICE=cpu BATCH=4 ORDER_ARGS="--seeds 1
# --prompts-per-regime 1 --bootstrap 0" NOISE_BATCH=1 is a smoke test of this script on a CPU),
# ORDER_ARGS (default "--seeds 5 --prompts-per-regime 20"), NOISE_BATCH (default 8), STEPS (the most
# steps, default 4000), TINY=1 (a toy-sized model; with DEVICE=cpu STEPS=8: a dry run of the whole
# script in a few CPU minutes), GPUS (default "0 1": the diffusion model's GPU and the sibling's; "0 0" runs
# both on one GPU, which two launch-bound 15M-parameter trainings share at nearly full speed each).
set -u
passages=$1 run=$2 pack=$3 budget=${4:-360} examples=${5:-300000} lr=${6:-7e-4} per_task=${7:-100} deadline=${8:-560}
counts=${9:+--token-counts $9}
here=$(dirname "$0")
start=$SECONDS
left() { local s=$(( deadline - (SECONDS - start) )); echo $(( s > 1 ? s : 1 )); }
device=${DEVICE:-cuda} batch=${BATCH:-512} order_args=${ORDER_ARGS:---seeds 5 --prompts-per-regime 20}
noise_batch=${NOISE_BATCH:-8} tiny=${TINY:+--tiny} steps=${STEPS:-4000}
read -r gpu_diffusion gpu_sibling <<< "${GPUS:-0 1}"
assets=$(python -c 'from canvaslab.models.mini import packaged_folder; print(packaged_folder("mini").parent)')
mkdir -p "$run/bin" "$pack"
# `canvaslab` without an installed console script (the package travels as source on PYTHONPATH)
printf '#!/bin/sh\nexec python -c "from canvaslab.cli.main import main; main()" "$@"\n' > "$run/bin/canvaslab"
chmod +x "$run/bin/canvaslab"
export PATH="$run/bin:$PATH"
# code answers are scored only in the bubblewrap sandbox: without it, the other tasks and regimes
eval_tasks=add2,add3,word,fact,json,prose regimes=math,factual,json,open_ended
if python -c 'from canvaslab.studies.commit_order.sandbox import require_isolation; require_isolation()' \
    > "$run/sandbox_check.log" 2>&1; then eval_tasks= regimes=math,code_synthesis,factual,open_ended,json; fi
# ship SAVED_FOLDER PRESET: the trained model becomes the package's preset (weights, config, tokenizer)
ship() { rm -f "$assets/$2"/model*.safetensors* && cp "$1"/* "$assets/$2/"; }
common=(--passages "$passages" --batch-size "$batch" --device "$device" --lr "$lr" --examples "$examples"
        --eval-per-task "$per_task" --eval-tasks "$eval_tasks" --pack "$pack" --steps "$steps" $tiny)
CUDA_VISIBLE_DEVICES=$gpu_diffusion timeout "$(left)" python "$here/mini_train_h200.py" --out "$run/d" --kinds diffusion --eval-models diffusion \
    --time-budget "$budget" --steps-file "$run/steps.txt" "${common[@]}" > "$run/train_diffusion.log" 2>&1 &
diffusion=$!
(
  export CUDA_VISIBLE_DEVICES=$gpu_sibling
  [ "$device" = cpu ] && export CUDA_VISIBLE_DEVICES=
  timeout "$(left)" python "$here/mini_train_h200.py" --out "$run/a" --kinds causal --eval-models autoregressive \
      --steps-from "$run/steps.txt" "${common[@]}" > "$run/train_autoregressive.log" 2>&1
  ship "$run/a/autoregressive" mini-ar
  while [ ! -f "$run/shipped" ] && [ "$(left)" -gt 1 ]; do sleep 2; done
  # shellcheck disable=SC2086
  timeout "$(left)" canvaslab order-study --model mini --suite mini --regimes "$regimes" --device "$device" \
      $order_args --baseline mini --out "$run/order_study" > "$run/order_study.log" 2>&1
  echo "order-study exit $?" >> "$run/order_study.log"
) &
sibling=$!
# The studies start as soon as the diffusion model is saved, beside its evaluation: a GPU that a
# 15M-parameter model leaves mostly idle runs two such processes at nearly full speed each.
while [ ! -f "$run/d/diffusion/generation_config.json" ] && [ "$(left)" -gt 1 ]; do sleep 2; done
sleep 3
ship "$run/d/diffusion" mini && touch "$run/shipped"
canvaslab noise-study plan --model mini --out "$run/noise_study" $counts > "$run/noise_study.log" 2>&1
CUDA_VISIBLE_DEVICES=$gpu_diffusion timeout "$(( $(left) - 25 > 1 ? $(left) - 25 : 1 ))" canvaslab noise-study run "$run/noise_study" \
    --device "$device" --batch-size "$noise_batch" >> "$run/noise_study.log" 2>&1
echo "noise-study exit $?" >> "$run/noise_study.log"
wait "$diffusion"
wait "$sibling"
python - "$run" <<'PY'
import json, shutil, sys
from pathlib import Path
run = Path(sys.argv[1])
merged = json.loads((run / "d" / "training.json").read_text())
sibling = json.loads((run / "a" / "training.json").read_text())
merged["autoregressive"] = sibling["autoregressive"]
merged["environment_autoregressive"] = sibling["environment"]
(run / "training.json").write_text(json.dumps(merged, indent=1))
for folder in ("d", "a"):
    for quality in (run / folder).glob("quality_*.json"):
        shutil.copy(str(quality), str(run / quality.name))
PY
nvidia-smi --query-gpu=name,driver_version --format=csv > "$pack/gpu.txt" 2>&1
# the order study's store records repeat its traces: only its views travel in results.tgz (the records
# too if the study was cut short before writing them)
keep_records=(--exclude='./order_study/store/records')
[ -f "$run/order_study/order_metrics.json" ] || keep_records=()
tar -czf "$pack/results.tgz" --exclude='model*.safetensors' --exclude='traces.jsonl' "${keep_records[@]}" -C "$run" .
rm -f "$pack"/run-*.tgz
if [ -f "$run/order_study/traces.jsonl" ]; then
  gzip -c "$run/order_study/traces.jsonl" > "$run/traces.jsonl.gz"
  total=$(( $(du -cb "$pack" | tail -1 | cut -f1) + $(stat -c %s "$run/traces.jsonl.gz") ))
  [ "$total" -lt $(( 62 * 1024 * 1024 )) ] && [ "$(stat -c %s "$run/traces.jsonl.gz")" -lt $(( 16 * 1000 * 1000 )) ] \
      && cp "$run/traces.jsonl.gz" "$pack/"
fi
ls -la "$pack" "$pack"/*
