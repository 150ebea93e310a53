#!/usr/bin/env bash
# Train `mini` and its AR sibling on one GPU across several device calls, then evaluate both and run the
# studies on them. The same command each call, on a machine kept warm between calls: STATE keeps the
# training checkpoints, Inductor's cache and every finished result, so each call goes on where the last
# stopped. A cold machine (the warm one was given back between calls, and STATE with it) goes on from the
# portable state (canvaslab.training.portable: bf16 weights, factored second moments, ~30 MB) that each call
# ending in a pause packs into PACK/resume-KIND/: copy those folders into a carried folder and name it in
# RESUME_FROM (a resume that is not bit for bit: the card lists its steps). Stages:
#   1. the diffusion model trains (compiled leaves, --time-budget fixes its steps and writes STATE/steps.txt),
#      resumable, then is evaluated on the non-code tasks and shipped as the preset `mini`;
#   2. the sibling trains on the same examples for the same steps, on the same GPU at the same time
#      (or, with SIBLING=after, once the diffusion model is done), then is evaluated and shipped as `mini-ar`;
#      SIBLING=keep trains none: the shipped `mini-ar` stays the sibling (the device time goes to the model),
#      so its steps are no longer the model's: train it for them afterwards (issue 14 asks for the same budget),
#      as session 16 did for run 6 (benchmarks/results/mini_h200_run6/sibling/sibling_call.sh); SIBLING=none
#      trains none and uses none: no commit-order study (it compares with the sibling), for a call whose
#      copied tree has no room for mini-ar's weights (one carrying RESUME_FROM);
#   3. the default (2,304-condition) noise study on `mini` (NOISE_PROCS processes on one store) and the
#      commit-order study (mini probe suite, sibling as baseline; code needs bubblewrap, which the GPU
#      machine lacks) run in what time is left; both resume from their stores.
# Before DEADLINE_S every stage stops (training at a checkpoint) and PACK receives the finished models'
# weight shards and results.tgz (everything else but checkpoints, caches and the order study's raw records).
#
#   bash benchmarks/mini_h200_calls.sh STATE PASSAGES PACK DEADLINE_S [TIME_BUDGET_S] [TOKEN_COUNTS]
# Environment: DEVICE (cuda), BATCH (512), EXAMPLES (600000), LR (7e-4), STEPS (most steps, 20000),
# COMPILE (leaves), NOISE_PROCS (3), ORDER_ARGS (--seeds 5 --prompts-per-regime 20), SIBLING (beside: both
# models train at once; after: the sibling starts when the diffusion model is done; keep: no sibling is
# trained, the shipped one serves; none: no sibling, no order study), RESUME_FROM (a folder of the
# resume-KIND/ folders an earlier call packed, for a cold machine), SUM_FORMAT (the training
# default; run 5: padded), MIXTURE (overrides of the tasks' shares, e.g. add3=0.27,fact=0.10; run 7), TOKENIZER
# (a tokenizer folder from `canvaslab mini tokenizer` instead of the shipped one; run 8), PROSE_ANSWERS (a teacher's
# prose answers, `canvaslab mini distill`, that both models train on instead of the passages' own), EVAL_TASKS (the tasks
# evaluated on the GPU after training, default add2,add3,word,fact,json,prose), STUDIES=0 (train,
# evaluate and ship, no studies: the call ends when the models are done), TINY=1 with DEVICE=cpu STEPS=8 BATCH=4 EXAMPLES=200: a CPU dry run.
# Shipping copies the trained weights into the package's assets (the studies load `--model mini`), a dry run's tiny
# model too: run it from a copy of the tree, or `git checkout src/canvaslab/models/assets` afterwards.
set -u
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
if [ -n "${MIXTURE:-}" ] && ! python -c 'import sys; from canvaslab.training.tasks import parse_shares
parse_shares(sys.argv[1])' "$MIXTURE" 2>/dev/null; then
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
if [ "$SIBLING" = keep ] && ! python -c 'import sys; from canvaslab.models.mini import packaged_folder as f
sys.exit(not any(f("mini-ar").glob("model*.safetensors")))' 2>/dev/null; then
  echo "SIBLING=keep needs the shipped mini-ar's weights in the package, and there are none" >&2
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
assets=$(python -c 'from canvaslab.models.mini import packaged_folder; print(packaged_folder("mini").parent)')
ship() { rm -f "$assets/$2"/model*.safetensors* && cp "$1"/* "$assets/$2/"; }
stage_log() { echo "[$(( SECONDS - start )) s] $*" | tee -a "$state/calls.log"; }
stage_log "call starts, deadline $deadline s"
train() {  # train KIND OUT_FOLDER EVAL_MODEL EXTRA...
  local kind=$1 out=$2 model=$3; shift 3
  # training stops 60 s before the deadline (a model started late in the call too): checkpoint,
  # evaluation and packing fit in them
  local stop_after=$(( $(left) - 60 ))
  timeout "$(( $(left) - 30 ))" python "$here/mini_train_h200.py" --out "$out" --kinds "$kind" --eval-models "$model" \
      --eval-tasks "${EVAL_TASKS:-add2,add3,word,fact,json,prose}" --passages "$passages" --batch-size "${BATCH:-512}" \
      --lr "${LR:-7e-4}" --examples "${EXAMPLES:-600000}" --steps "${STEPS:-20000}" --device "$device" \
      --compile "${COMPILE:-leaves}" --checkpoint-dir "$state/ckpt" --stop-after "$stop_after" $tiny \
      --portable-dir "$state/portable" \
      ${SUM_FORMAT:+--sum-format "$SUM_FORMAT"} ${MIXTURE:+--mixture "$MIXTURE"} ${TOKENIZER:+--tokenizer "$TOKENIZER"} \
      ${PROSE_ANSWERS:+--prose-answers "$PROSE_ANSWERS"} "$@"
}
if [ ! -f "$state/d/training.json" ]; then
  train diffusion "$state/d" diffusion --time-budget "$budget" --steps-file "$state/steps.txt" \
      >> "$state/train_diffusion.log" 2>&1 &
fi
train_sibling() {
  [ "$SIBLING" = keep ] && shipped_mini_ar=1 && return
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
  # shipped again in every call: the next call's copy of the working tree removes files it does not know
  if [ -f "$state/d/training.json" ] && [ -z "${shipped_mini:-}" ]; then
    ship "$state/d/diffusion" mini && shipped_mini=1 && stage_log "mini shipped"
  fi
  if [ -f "$state/a/training.json" ] && [ -z "${shipped_mini_ar:-}" ]; then
    ship "$state/a/autoregressive" mini-ar && shipped_mini_ar=1 && stage_log "mini-ar shipped"
  fi
  [ "${STUDIES:-1}" = 0 ] && noise_started=1 order_started=1 && return  # training and evaluation only
  if [ -n "${shipped_mini:-}" ] && [ ! -f "$state/noise_study/plan.json" ]; then
    # shellcheck disable=SC2086
    canvaslab noise-study plan --model mini --out "$state/noise_study" $counts >> "$state/noise_study.log" 2>&1
  fi
  if [ -f "$state/noise_study/plan.json" ] && [ -z "${noise_started:-}" ]; then
    noise_started=1 && stage_log "noise study runs"
    for _ in $(seq "${NOISE_PROCS:-3}"); do
      timeout "$(( $(left) - 40 ))" canvaslab noise-study run "$state/noise_study" --device "$device" \
          >> "$state/noise_study.log" 2>&1 &
    done
  fi
  if [ -n "${shipped_mini:-}" ] && [ -n "${shipped_mini_ar:-}" ] && [ -z "${order_started:-}" ]; then
    order_started=1 && stage_log "order study runs"
    # shellcheck disable=SC2086
    timeout "$(( $(left) - 40 ))" canvaslab order-study --model mini --suite mini --device "$device" \
        --regimes math,factual,json,open_ended --baseline mini --out "$state/order_study" ${ORDER_ARGS:---seeds 5 --prompts-per-regime 20} \
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
tar -czf "$pack/results.tgz" --exclude='model*.safetensors' --exclude='./ckpt' --exclude='./inductor' \
    --exclude='./bin' --exclude='./portable' --exclude='./order_study/store/records' -C "$state" .
stage_log "packed"
ls -la "$pack" "$pack"/*
