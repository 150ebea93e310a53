#!/usr/bin/env bash
# Train `mini` on GPU 0 and its AR sibling on GPU 1 at the same time (same examples, same step count:
# the diffusion model's time budget fixes it, the sibling waits for that number), evaluate each on its
# GPU, then run the studies on the trained model until DEADLINE_S after the start: GPU 1 the
# commit-order study on the mini probe suite with the sibling as baseline, GPU 0 the default
# (2,304-condition) noise study, which resumes in a later run from its results.jsonl. Everything but
# the weight shards is packed into PACK_DIR/results.tgz.
#
#   bash benchmarks/mini_h200_both.sh PASSAGES RUN_DIR PACK_DIR [TIME_BUDGET_S] [EXAMPLES] [LR] [EVAL_PER_TASK]
#       [DEADLINE_S] [TOKEN_COUNTS]
# TOKEN_COUNTS: token_counts.npy of `canvaslab vocab-scan --tokenizer mini --corpus TRAINING_TEXT`, so the
# noise study's rare-token control is the training text's rarest tokens.
set -u
passages=$1 run=$2 pack=$3 budget=${4:-360} examples=${5:-300000} lr=${6:-7e-4} per_task=${7:-100} deadline=${8:-560}
counts=${9:+--token-counts $9}
here=$(dirname "$0")
start=$SECONDS
left() { local s=$(( deadline - (SECONDS - start) )); echo $(( s > 1 ? s : 1 )); }
device=${DEVICE:-cuda} batch=${BATCH:-512}  # DEVICE=cpu BATCH=4: a smoke test of this script on a CPU
mkdir -p "$run/bin" "$pack"
# `canvaslab` without an installed console script (the package travels as source on PYTHONPATH)
printf '#!/bin/sh\nexec python -c "from canvaslab.cli.main import main; main()" "$@"\n' > "$run/bin/canvaslab"
chmod +x "$run/bin/canvaslab"
export PATH="$run/bin:$PATH"
common=(--passages "$passages" --batch-size "$batch" --device "$device" --lr "$lr" --examples "$examples" --eval-per-task "$per_task"
        --pack "$pack" --steps 4000)
CUDA_VISIBLE_DEVICES=0 python "$here/mini_train_h200.py" --out "$run/d" --kinds diffusion --eval-models diffusion \
    --time-budget "$budget" --steps-file "$run/steps.txt" "${common[@]}" > "$run/train_diffusion.log" 2>&1 &
diffusion=$!
(
  export CUDA_VISIBLE_DEVICES=1
  python "$here/mini_train_h200.py" --out "$run/a" --kinds causal --eval-models autoregressive \
      --steps-from "$run/steps.txt" "${common[@]}" > "$run/train_autoregressive.log" 2>&1
  while [ ! -f "$run/d/diffusion/generation_config.json" ] && [ "$(left)" -gt 1 ]; do sleep 2; done
  sleep 5
  # code answers are scored only in the bubblewrap sandbox: without it, the other regimes
  regimes=math,factual,json,open_ended
  python -c 'from canvaslab.studies.commit_order.sandbox import require_isolation; require_isolation()' \
      > "$run/sandbox_check.log" 2>&1 && regimes=math,code_synthesis,factual,open_ended,json
  timeout "$(left)" canvaslab order-study --model "$run/d/diffusion" --suite mini --regimes "$regimes" --device "$device" --seeds 5 \
      --prompts-per-regime 20 --baseline "$run/a/autoregressive" --out "$run/order_study" > "$run/order_study.log" 2>&1
  echo "order-study exit $?" >> "$run/order_study.log"
) &
sibling=$!
wait "$diffusion"
canvaslab noise-study plan --model "$run/d/diffusion" --out "$run/noise_study" $counts > "$run/noise_study.log" 2>&1
CUDA_VISIBLE_DEVICES=0 timeout "$(left)" canvaslab noise-study run "$run/noise_study" --device "$device" --batch-size 8 \
    >> "$run/noise_study.log" 2>&1
echo "noise-study exit $?" >> "$run/noise_study.log"
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
tar -czf "$pack/results.tgz" --exclude='model*.safetensors' -C "$run" .
rm -f "$pack"/run-*.tgz
nvidia-smi --query-gpu=name,driver_version --format=csv > "$pack/gpu.txt" 2>&1
ls -la "$pack" "$pack"/*
