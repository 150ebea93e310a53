#!/usr/bin/env bash
# Train `mini` and its AR sibling on one GPU across several device calls, then evaluate both and run the
# studies on them. The same command each call, on a machine kept warm between calls: STATE keeps the
# training checkpoints, Inductor's cache and every finished result, so each call goes on where the last
# stopped. A cold machine (the warm one was given back between calls, and STATE with it) goes on from the
# portable state (canvaslab.training.portable: bf16 weights, factored second moments, ~30 MB) that each call
# ending in a pause packs into PACK/resume-KIND/: copy those folders into a carried folder and name it in
# RESUME_FROM (a resume that is not bit for bit: the card lists its steps). Stages:
#   1. the diffusion model trains (compiled leaves, --time-budget fixes its steps and writes STATE/steps.txt),
#      resumable, then is evaluated on the non-code tasks (STATE/d/);
#   2. the sibling trains on the same examples for the same steps, on the same GPU at the same time
#      (or, with SIBLING=after, once the diffusion model is done), then is evaluated (STATE/a/);
#      SIBLING=keep trains none: the installed `mini-ar` is the sibling (the device time goes to the model),
#      so its steps are no longer the model's: train one for them afterwards; SIBLING=none trains none and
#      uses none: no commit-order study (it compares with the sibling), for a call whose copied tree has no
#      room for the sibling's weights (one carrying RESUME_FROM);
#   3. the default (2,304-condition) noise study on the trained model (NOISE_PROCS processes on one store) and
#      the commit-order study (mini probe suite, the sibling as baseline; code needs bubblewrap, which the GPU
#      machine lacks) run in what time is left; both resume from their stores.
# Before DEADLINE_S every stage stops (training at a checkpoint) and PACK receives the finished models'
# weight shards and results.tgz (everything else but checkpoints, caches and the order study's raw records;
# STATE/result.json is its manifest). Shipping the models is a separate step: replace the checkpoint files of
# models/canvaslab-mini/ and models/canvaslab-mini-ar/ with PACK/diffusion/ and PACK/autoregressive/ (one commit).
#
#   bash benchmarks/mini_h200_calls.sh STATE PASSAGES PACK DEADLINE_S [TIME_BUDGET_S] [TOKEN_COUNTS]
#
# PASSAGES: `canvaslab mini passages`; TOKEN_COUNTS: benchmarks/mini_token_counts.py's token_counts.npy (the
# noise study's rare-token control). Environment: DEVICE (cuda), BATCH (512), EXAMPLES (600000), LR (7e-4),
# STEPS (most steps, 20000), COMPILE (leaves; empty: nothing compiled), NOISE_PROCS (3), ORDER_ARGS (--seeds 5
# --prompts-per-regime 20), SIBLING (beside: both models train at once; after: the sibling starts when the
# diffusion model is done; keep: no sibling is trained, the installed mini-ar serves; none: no sibling, no
# order study), RESUME_FROM (a folder of the resume-KIND/ folders an earlier call packed, for a cold machine),
# SUM_FORMAT (the training default), DATA (the data version, shipped or grammar: canvaslab.training.tasks), MIXTURE (overrides of the tasks' shares, e.g. add3=0.27,fact=0.10),
# TOKENIZER (a tokenizer folder from `canvaslab mini tokenizer` instead of the shipped one), PROSE_ANSWERS (a
# teacher's prose answers, `canvaslab mini distill`, that both models train on instead of the passages' own),
# EVAL_TASKS (the tasks evaluated after training, default add2,add3,word,fact,json,prose), EVAL_PER_TASK
# (held-out prompts per task, 100), STUDIES=0 (train and evaluate, no studies: the call ends when the models
# are done). A CPU dry run: TINY=1 DEVICE=cpu STEPS=2 BATCH=4 EXAMPLES=16 COMPILE= EVAL_PER_TASK=1 STUDIES=0.
set -u
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; }
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then usage; exit 0; fi
if [ $# -lt 4 ]; then usage >&2; exit 2; fi
invocation=()  # the manifest's command: the settings given, then the call
for name in DEVICE BATCH EXAMPLES LR STEPS COMPILE NOISE_PROCS ORDER_ARGS SIBLING RESUME_FROM SUM_FORMAT DATA MIXTURE \
            TOKENIZER PROSE_ANSWERS EVAL_TASKS EVAL_PER_TASK STUDIES TINY; do
  [ -n "${!name+set}" ] && invocation+=("$name=${!name}")
done
invocation+=(bash benchmarks/mini_h200_calls.sh "$@")
state=$1 passages=$2 pack=$3 deadline=$4 budget=${5:-700} counts=${6:+--token-counts $6}
here=$(cd "$(dirname "$0")" && pwd)
start=$SECONDS
left() { local s=$(( deadline - (SECONDS - start) )); echo $(( s > 1 ? s : 1 )); }
device=${DEVICE:-cuda} tiny=${TINY:+--tiny}
case ${SIBLING:=beside} in beside|after|keep|none) ;; *) echo "SIBLING must be beside, after, keep or none, not '$SIBLING'" >&2; exit 2;; esac
if [ -n "${RESUME_FROM:-}" ] && ! ls "$RESUME_FROM"/resume-*/state.pt > /dev/null 2>&1; then
  echo "RESUME_FROM '$RESUME_FROM' holds no resume-KIND/state.pt (the folders a paused call packs)" >&2
  exit 2
fi
if [ -n "${SUM_FORMAT:-}" ] && ! python -c 'import sys; from canvaslab.training.tasks.arithmetic import SUM_FORMATS as F
sys.exit(sys.argv[1] not in F)' "$SUM_FORMAT" 2>/dev/null; then
  echo "SUM_FORMAT '$SUM_FORMAT' is not a sum format of canvaslab.training.tasks.arithmetic (or canvaslab is not importable)" >&2
  exit 2
fi
if [ -n "${DATA:-}" ] && ! python -c 'import sys; from canvaslab.training.tasks import check_data
check_data(sys.argv[1])' "$DATA" 2>/dev/null; then
  echo "DATA '$DATA' is not a data version of canvaslab.training.tasks (or canvaslab is not importable)" >&2
  exit 2
fi
if [ -n "${MIXTURE:-}" ] && ! python -c 'import sys; from canvaslab.training.tasks import parse_shares
parse_shares(*sys.argv[1:])' "$MIXTURE" "${DATA:-shipped}" 2>/dev/null; then
  echo "MIXTURE '$MIXTURE' is not a list of TASK=SHARE overrides (or canvaslab is not importable)" >&2
  exit 2
fi
if [ -n "${EVAL_TASKS:-}" ] && ! python -c 'import sys; from canvaslab.training.tasks import EVAL_TASKS as T
tasks = [t for t in sys.argv[1].split(",") if t]
if not tasks or any(t not in T for t in tasks):
    sys.exit("EVAL_TASKS %r is not a comma-separated list of evaluated tasks (%s)" % (sys.argv[1], ",".join(T)))' "$EVAL_TASKS"; then
  exit 2
fi
if [ -n "${TOKENIZER:-}" ] && [ ! -f "$TOKENIZER/tokenizer.json" ]; then
  echo "TOKENIZER '$TOKENIZER' holds no tokenizer.json (make one with canvaslab mini tokenizer)" >&2
  exit 2
fi
if [ -n "${PROSE_ANSWERS:-}" ] && [ ! -f "$PROSE_ANSWERS" ]; then
  echo "PROSE_ANSWERS '$PROSE_ANSWERS' is no file (write one with canvaslab mini distill)" >&2
  exit 2
fi
if [ "$SIBLING" = keep ] && ! python -c 'from canvaslab.models.registry import model_folder
model_folder("mini-ar")' 2>/dev/null; then
  echo "SIBLING=keep needs the installed mini-ar (pip install ./models/canvaslab-mini-ar), and it is not installed" >&2
  exit 2
fi
mkdir -p "$state/bin" "$state/ckpt" "$state/portable" "$pack"
# a cold machine: each model without its exact checkpoint goes on from the portable state brought along
for carried in ${RESUME_FROM:+"$RESUME_FROM"/resume-*}; do
  kind=${carried##*/resume-}
  [ "$kind" = causal ] && { [ "$SIBLING" = keep ] || [ "$SIBLING" = none ]; } && continue  # no sibling trains
  if [ ! -f "$state/ckpt/$kind.pt" ] && [ ! -f "$state/portable/$kind/state.pt" ]; then
    mkdir -p "$state/portable/$kind" && cp "$carried"/* "$state/portable/$kind/"
  fi
done
export TORCHINDUCTOR_CACHE_DIR=$state/inductor
printf '#!/bin/sh\nexec python -c "from canvaslab.cli.main import main; main()" "$@"\n' > "$state/bin/canvaslab"
chmod +x "$state/bin/canvaslab"
export PATH="$state/bin:$PATH"
model=$state/d/diffusion  # the studies run on the trained checkpoints themselves
if [ "$SIBLING" = keep ]; then sibling=mini-ar; else sibling=$state/a/autoregressive; fi
stage_log() { echo "[$(( SECONDS - start )) s] $*" | tee -a "$state/calls.log"; }
stage_log "call starts, deadline $deadline s"
train() {  # train KIND OUT_FOLDER EVAL_MODEL EXTRA...
  local kind=$1 out=$2 model=$3; shift 3
  # training stops 60 s before the deadline (a model started late in the call too): checkpoint,
  # evaluation and packing fit in them
  local stop_after=$(( $(left) - 60 ))
  timeout "$(( $(left) - 30 ))" python "$here/mini_train_h200.py" --out "$out" --kinds "$kind" --eval-models "$model" \
      --eval-tasks "${EVAL_TASKS:-add2,add3,word,fact,json,prose}" --eval-per-task "${EVAL_PER_TASK:-100}" \
      --passages "$passages" --batch-size "${BATCH:-512}" \
      --lr "${LR:-7e-4}" --examples "${EXAMPLES:-600000}" --steps "${STEPS:-20000}" --device "$device" \
      --compile "${COMPILE-leaves}" --checkpoint-dir "$state/ckpt" --stop-after "$stop_after" $tiny \
      --portable-dir "$state/portable" \
      ${SUM_FORMAT:+--sum-format "$SUM_FORMAT"} ${DATA:+--data "$DATA"} ${MIXTURE:+--mixture "$MIXTURE"} ${TOKENIZER:+--tokenizer "$TOKENIZER"} \
      ${PROSE_ANSWERS:+--prose-answers "$PROSE_ANSWERS"} "$@"
}
if [ ! -f "$state/d/training.json" ]; then
  train diffusion "$state/d" diffusion --time-budget "$budget" --steps-file "$state/steps.txt" \
      >> "$state/train_diffusion.log" 2>&1 &
fi
train_sibling() {
  [ "$SIBLING" = keep ] && sibling_ready=1 && return
  [ "$SIBLING" = none ] && return
  if [ ! -f "$state/a/training.json" ] && [ -z "${sibling_started:-}" ]; then
    sibling_started=1 && stage_log "sibling trains"
    train causal "$state/a" autoregressive --steps-from "$state/steps.txt" >> "$state/train_autoregressive.log" 2>&1 &
  fi
}
# SIBLING=after: the sibling waits for the diffusion model, whose steps then run alone and faster
[ "$SIBLING" = beside ] && train_sibling
studies() {
  [ -f "$state/d/training.json" ] && train_sibling
  if [ -f "$state/d/training.json" ] && [ -z "${model_ready:-}" ]; then
    model_ready=1 && stage_log "model trained: $model"
  fi
  if [ -f "$state/a/training.json" ] && [ -z "${sibling_ready:-}" ]; then
    sibling_ready=1 && stage_log "sibling trained: $sibling"
  fi
  [ "${STUDIES:-1}" = 0 ] && noise_started=1 order_started=1 && return  # training and evaluation only
  if [ -n "${model_ready:-}" ] && [ ! -f "$state/noise_study/plan.json" ]; then
    # shellcheck disable=SC2086
    canvaslab noise-study plan --model "$model" --out "$state/noise_study" $counts >> "$state/noise_study.log" 2>&1
  fi
  if [ -f "$state/noise_study/plan.json" ] && [ -z "${noise_started:-}" ]; then
    noise_started=1 && stage_log "noise study runs"
    for _ in $(seq "${NOISE_PROCS:-3}"); do
      timeout "$(( $(left) - 40 ))" canvaslab noise-study run "$state/noise_study" --device "$device" \
          >> "$state/noise_study.log" 2>&1 &
    done
  fi
  if [ -n "${model_ready:-}" ] && [ -n "${sibling_ready:-}" ] && [ -z "${order_started:-}" ]; then
    order_started=1 && stage_log "order study runs"
    # shellcheck disable=SC2086
    timeout "$(( $(left) - 40 ))" canvaslab order-study --model "$model" --suite mini --device "$device" \
        --regimes math,factual,json,open_ended --baseline "$sibling" --out "$state/order_study" ${ORDER_ARGS:---seeds 5 --prompts-per-regime 20} \
        >> "$state/order_study.log" 2>&1 &
  fi
}
# the studies start as soon as their models exist; everything stops 40 s before the deadline
while [ "$(left)" -gt 40 ]; do
  studies
  if [ -n "${noise_started:-}" ] && { [ -n "${order_started:-}" ] || [ "$SIBLING" = none ]; } && ! jobs -r | grep -q .; then break; fi
  sleep 3
done
wait
stage_log "stages stopped"
ls "$state/d" "$state/a" >> "$state/calls.log" 2>&1
for model in d/diffusion a/autoregressive; do
  [ -d "$state/$model" ] && mkdir -p "$pack/${model#*/}" && cp "$state/$model"/model*.safetensors "$pack/${model#*/}/"
done
# a model still training travels as its portable state (a finished one travels as its weights above)
for model in d:diffusion a:causal; do
  if [ ! -f "$state/${model%%:*}/training.json" ] && [ -f "$state/portable/${model#*:}/state.pt" ]; then
    rm -rf "$pack/resume-${model#*:}" && mkdir -p "$pack/resume-${model#*:}"
    # state.pt and the shards it names only: a killed save's newer shards would overflow the transfer
    python -c 'import pathlib, sys; from canvaslab.training.portable import portable_files
print(*portable_files(pathlib.Path(sys.argv[1])), sep="\n")' "$state/portable/${model#*:}" |
        while read -r file; do cp "$file" "$pack/resume-${model#*:}/"; done
  fi
done
nvidia-smi --query-gpu=name,driver_version --format=csv > "$state/gpu.txt" 2>&1
python -c 'import sys
from canvaslab.environment import record_result
record_result(sys.argv[1], sys.argv[2], command=sys.argv[3:])' "$state" "mini and its sibling trained and evaluated \
on held-out prompts (d/, a/: training.json, quality, model card), the noise study and the commit-order study on them, \
as far as the deadline allowed (calls.log)" "${invocation[@]}" || stage_log "no manifest written"
tar -czf "$pack/results.tgz" --exclude='model*.safetensors' --exclude='./ckpt' --exclude='./inductor' \
    --exclude='./bin' --exclude='./portable' --exclude='./order_study/store/records' -C "$state" .
stage_log "packed"
ls -la "$pack" "$pack"/*
