#!/usr/bin/env bash
# Prepared in session 20 (no device time left then) for the next GPU session: run 7's AR sibling on run 7's
# examples in the same order for run 7's 3,500 steps, beside the noise study on run 7 going on from its store
# (108 of 2,304 conditions). The same command each call, on a machine kept warm between calls, like session 16's
# run-6 call (../mini_h200_run6/sibling/sibling_call.sh), and with the portable state for a lost machine:
# a call that pauses packs $OUT/pack/resume-causal/; carry it as RESUME_FROM/resume-causal/ on a cold machine.
#
#   bash benchmarks/results/mini_h200_run7/sibling_call.sh STATE PASSAGES DEADLINE_S
# Carried (ignored paths): .whl/ (transformers and the jsonschema family, on the GPU image), the passage file
# (sha256 777dc244...), RESUME_FROM where set. The run-7 plan and store come from this folder.
# Environment: DEVICE (cuda), NOISE_PROCS (6), RESUME_FROM; TINY=1 DEVICE=cpu STEPS=6 EXAMPLES=200 BATCH=4
# NOISE_PROCS=0 for a CPU dry run of the script.
set -u
state=$1 passages=$2 deadline=$3
here=$(cd "$(dirname "$0")" && pwd) repo=$(cd "$(dirname "$0")/../../.." && pwd)
start=$SECONDS
left() { local s=$(( deadline - (SECONDS - start) )); echo $(( s > 1 ? s : 1 )); }
device=${DEVICE:-cuda} out=${OUT:-$state/out}
if [ -n "${RESUME_FROM:-}" ] && [ ! -f "$RESUME_FROM/resume-causal/state.pt" ]; then
  echo "RESUME_FROM '$RESUME_FROM' holds no resume-causal/state.pt (what a paused call packs)" >&2; exit 2
fi
if [ -d "$repo/.whl" ] && [ ! -d /tmp/site/transformers ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$repo"/.whl/*.whl
fi
export PYTHONPATH=$repo/src:$repo/benchmarks${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
[ -d /tmp/site/transformers ] && export PYTHONPATH=$PYTHONPATH:/tmp/site
mkdir -p "$state/bin" "$state/ckpt" "$state/portable" "$out/pack" "$out/r"
export TORCHINDUCTOR_CACHE_DIR=$state/inductor
printf '#!/bin/sh\nexec python -c "from canvaslab.cli.main import main; main()" "$@"\n' > "$state/bin/canvaslab"
chmod +x "$state/bin/canvaslab" && export PATH=$state/bin:$PATH
if [ -n "${RESUME_FROM:-}" ] && [ ! -f "$state/ckpt/causal.pt" ] && [ ! -f "$state/portable/causal/state.pt" ]; then
  mkdir -p "$state/portable/causal" && cp "$RESUME_FROM"/resume-causal/* "$state/portable/causal/"
fi
if [ ! -d "$state/noise_study/store" ]; then
  mkdir -p "$state/noise_study" && cp "$here"/noise_study/plan.json "$here"/noise_study/plan.sha256 "$state/noise_study/" &&
      tar -xzf "$here/noise_study/store.tgz" -C "$state/noise_study"
fi
records() { ls "$state/noise_study/store/records" 2>/dev/null | wc -l; }
echo "[$((SECONDS-start)) s] call starts; records: $(records)" | tee -a "$state/calls.log"
for _ in $(seq "${NOISE_PROCS:-6}"); do
  timeout "$(( $(left) - 40 ))" canvaslab noise-study run "$state/noise_study" --device "$device" >> "$state/noise.log" 2>&1 &
done
if [ ! -f "$state/a/training.json" ]; then
  # run 7's recipe (canvaslab.training.recipe.SHIPPED): the same pool, order and steps as the shipped mini
  timeout "$(( $(left) - 30 ))" python "$repo/benchmarks/mini_train_h200.py" --out "$state/a" --kinds causal \
      --eval-models autoregressive --eval-tasks add2,add3,word,fact,json,prose --passages "$passages" \
      --batch-size "${BATCH:-512}" --lr 7e-4 --examples "${EXAMPLES:-600000}" --steps "${STEPS:-3500}" \
      --mixture add3=0.27,fact=0.10,code=0.07 --device "$device" --compile "${COMPILE:-leaves}" \
      --checkpoint-dir "$state/ckpt" --portable-dir "$state/portable" --stop-after "$(( $(left) - 60 ))" \
      --pack "$out/pack" ${TINY:+--tiny} >> "$state/train.log" 2>&1
fi
wait
echo "[$((SECONDS-start)) s] stages stopped; records: $(records)" | tee -a "$state/calls.log"
if [ ! -f "$state/a/training.json" ] && [ -f "$state/portable/causal/state.pt" ]; then
  rm -rf "$out/pack/resume-causal" && mkdir -p "$out/pack/resume-causal"
  python -c 'import pathlib, sys; from canvaslab.training.portable import portable_files
print(*portable_files(pathlib.Path(sys.argv[1])), sep="\n")' "$state/portable/causal" |
      while read -r file; do cp "$file" "$out/pack/resume-causal/"; done
fi
canvaslab noise-study report "$state/noise_study" > "$state/noise_report.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$state/gpu.txt" 2>&1
cp "$state"/train.log "$state"/noise.log "$state"/calls.log "$state"/noise_report.txt "$state"/gpu.txt "$out/r/" 2>/dev/null
cp "$state"/noise_study/noise_study.json "$out/r/" 2>/dev/null
[ -f "$state/a/training.json" ] && cp "$state"/a/*.json "$state"/a/*.md "$state"/a/*.png "$out/r/" 2>/dev/null
tar -czf "$out/r/store.tgz" -C "$state/noise_study" store
# one file: a device call returns at most 8 files from $OUT (session 21 lost r/'s extra ones)
tar -czf "$out/r.tgz" -C "$out" r && rm -rf "$out/r"
echo "[$((SECONDS-start)) s] packed"; tail -3 "$state/train.log"; tail -3 "$state/noise_report.txt"
