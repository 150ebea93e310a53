#!/usr/bin/env bash
# Everything one GPU call measures, on whichever card it finds (an H100 or an H200), within a time budget:
# the card's own limits (copy bandwidth, bf16 matmul peak) and the model's pass limits on it; loading (the
# 30-layer preset built on the device, a 6-layer checkpoint saved and loaded straight to the device: time,
# peak host and device memory); the steady-state pass per row at 6 and 30 layers, B = 1 and 32, invariant
# beside stock, as ratios to the limits; the kernels of one replayed pass by class (profiles at 6 and 30
# layers: their difference over 24 layers is the kernels per layer); the 30-layer model at B = 32 with
# 1,024-token prompts (memory by phase); then the GPU tests and the proofs on the same code (6 and 30
# layers, stock as the negative control, the needle test, the op scan).
#
#   bash benchmarks/gpu_run.sh OUT_DIR [SECONDS_AVAILABLE]
#
# Timing stages run first, alone on the GPU; a stage is skipped when the time left is below its estimate
# and cut at the budget; every stage logs its status and the next one runs. Writes OUT_DIR/log.txt, one
# file per stage and OUT_DIR/result.json (the manifest).
# Environment: MODEL (real-shapes), DEVICE (cuda), L6 / L30 (the two depths: 6, 30), SMALL (batch sizes
# timed for both modes: 1,32; stock at the deep depth only at the first, where it fits an 80 GB card),
# PROMPT (filler prompt tokens of the long-prompt stages: 1024), NEEDLE (64,128), STEPS (passes of the short
# timed calls: 4), ONLY=name,name (only those stages), SKIP=name,name (not those), SNAPSHOT=FILE.tar.gz
# (also a tarball of OUT_DIR after every stage, for a transfer that takes few files).
# Python modules in /tmp/site come first on the path (a newer transformers carried to the GPU machine).
# A dry run on the CPU (every command, toy sizes):
#   MODEL=tiny DEVICE=cpu L6=1 L30=2 SMALL=1,2 PROMPT=16 NEEDLE=2 bash benchmarks/gpu_run.sh /tmp/dry 900
set -uo pipefail
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; }
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then usage; exit 0; fi
if (( $# < 1 )); then usage >&2; exit 2; fi
invocation=()  # the manifest's command: the settings given, then the call
for name in MODEL DEVICE L6 L30 SMALL PROMPT NEEDLE STEPS ONLY SKIP SNAPSHOT; do
  [[ -n "${!name+set}" ]] && invocation+=("$name=${!name}")
done
invocation+=(bash benchmarks/gpu_run.sh "$@")
cd "$(dirname "$0")/.."
out=$1
budget=${2:-540}
model=${MODEL:-real-shapes} device=${DEVICE:-cuda} l6=${L6:-6} l30=${L30:-30}
small=${SMALL:-1,32} prompt=${PROMPT:-1024} needle=${NEEDLE:-64,128} steps=${STEPS:-4}
first=${small%%,*} last=${small##*,}
mkdir -p "$out/proof"
export PYTHONPATH="$PWD/src:$PWD/benchmarks:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
log="$out/log.txt"
py=$(command -v python3 || command -v python)

snapshot() { [[ -n "${SNAPSHOT:-}" ]] && tar -czf "$SNAPSHOT" -C "$out" . ; true; }

stage() {  # NAME ESTIMATE_S COMMAND...: run it if the time left allows, cut at the budget; log status and duration
  local name=$1 estimate=$2; shift 2
  [[ -n "${ONLY:-}" && ",$ONLY," != *",$name,"* ]] && return
  [[ -n "${SKIP:-}" && ",$SKIP," == *",$name,"* ]] && return
  local left=$((budget - SECONDS))
  if (( estimate > left )); then echo "SKIPPED $name (needs ~${estimate} s, ${left} s left)" >> "$log"; return; fi
  local start=$SECONDS
  echo "== $name (t=${SECONDS}s)" >> "$log"
  timeout "$left" bash -c '"$@"' _ "$@" > "$out/$name.txt" 2>&1  # bash -c: the command may be a function
  echo "== $name exit=$? after $((SECONDS - start)) s" >> "$log"
  snapshot
}

throughput() {  # LAYERS BATCHES MODES NAME
  "$py" benchmarks/throughput.py --model "$model" --layers "$1" --device "$device" --batch-sizes "$2" \
    --modes "$3" --steps "$steps" --repeats 2 --out "$out/$4.json"
}

checkpoint() {  # LAYERS: build and save, then load the checkpoint in a fresh process (its own host peak)
  local folder; folder=$(mktemp -d)
  "$py" benchmarks/load_memory.py --model "$model" --layers "$1" --device "$device" --save "$folder/ckpt" \
    --out "$out/load/build_${1}l.json" &&
  "$py" benchmarks/load_memory.py --model "$folder/ckpt" --device "$device" --out "$out/load/checkpoint_${1}l.json"
  local status=$?
  rm -rf "$folder"
  return $status
}

study() {  # LAYERS NAME ARGS...: one batch study, prompts encoded in the batch, 2 passes
  local layers=$1 name=$2; shift 2
  "$py" -m canvaslab.cli.main batch-study --model "$model" --layers "$layers" --device "$device" \
    --no-copy-prompt-cache --prompts 1 --steps 2 --modules-only --repeat-control same-process "$@" \
    --out "$out/proof/$name" || return
  "$py" -c "import json,sys; print(sys.argv[1], json.dumps(json.load(open(sys.argv[2]))['summary']))" \
    "$name" "$out/proof/$name/batch_study.json"
}

export model device out steps py
export -f throughput checkpoint study

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  "$py" -c "import torch, transformers; print(torch.__version__, transformers.__version__)"
} >> "$log" 2>&1

# Timing and memory, alone on the GPU
stage limits 30 "$py" benchmarks/card_limits.py --model "$model" --layers "$l6,$l30" --device "$device" \
  --out "$out/limits.json"
stage load_30l 60 "$py" benchmarks/load_memory.py --model "$model" --layers "$l30" --device "$device" \
  --out "$out/load/load_${l30}l.json"
stage throughput_6l 70 throughput "$l6" "$small" stock,invariant throughput_6l
stage throughput_30l 80 throughput "$l30" "$first" stock,invariant throughput_30l
stage throughput_30l_large 60 throughput "$l30" "$last" invariant throughput_30l_large
stage ratios 20 "$py" benchmarks/card_limits.py --model "$model" --layers "$l6,$l30" --device "$device" \
  --out "$out/limits.json" --speed "$out"/throughput_*.json
stage memory_30l 70 "$py" benchmarks/memory_probe.py --model "$model" --layers "$l30" --device "$device" \
  --batch-size "$last" --steps 2 --filler-tokens "$prompt,$prompt" --out "$out/memory_${l30}l_b${last}.json"
stage profile_6l 50 "$py" benchmarks/profile_generate.py --model "$model" --layers "$l6" --device "$device" \
  --modes "" --steady --batch-sizes "$small" --steps 16 --out "$out/profile_${l6}l_steady.txt"
stage profile_30l 70 "$py" benchmarks/profile_generate.py --model "$model" --layers "$l30" --device "$device" \
  --modes "" --steady --batch-sizes "$small" --steps 16 --out "$out/profile_${l30}l_steady.txt"
stage checkpoint_6l 80 checkpoint "$l6"

# Correctness on the same code
stage gpu_tests 150 "$py" -m pytest -q -p no:cacheprovider tests/gpu tests/invariant/test_triton_kernels.py
stage proof_6l_invariant_mixed 50 study "$l6" invariant_6l_mixed --mode invariant --fill mixed \
  --batch-sizes "1,2,3,4,5,8,$last"
stage proof_6l_stock_mixed 30 study "$l6" stock_6l_mixed --mode stock --fill mixed --batch-sizes 1,2,8
stage proof_30l_invariant_mixed 70 study "$l30" invariant_30l_mixed --mode invariant --fill mixed \
  --batch-sizes "1,8,$last"
stage needle_30l 80 "$py" benchmarks/needle.py --model "$model" --layers "$l30" --device "$device" \
  --batch-sizes "$last" --filler-tokens "$prompt,$prompt" --mode invariant --steps 4 --out "$out/needle_${l30}l.json"
stage needle_6l 60 "$py" benchmarks/needle.py --model "$model" --layers "$l6" --device "$device" \
  --batch-sizes "$needle" --mode invariant --steps 4 --out "$out/needle_${l6}l.json"
# The scan's vocabulary-sized ops take 16 GiB a tensor at B=64: that size only where the card has 100 GiB or more
card_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
scan_sizes="1,2,3,4,5,8,16,$last"
(( ${card_mib:-0} >= 100 * 1024 )) && scan_sizes+=",64"
stage op_scan 200 "$py" -m canvaslab.cli.main op-scan --model "$model" --device "$device" --mode both \
  --batch-sizes "$scan_sizes" --out "$out/op_scan"
echo "done at t=${SECONDS}s" >> "$log"
"$py" -c 'import sys
from canvaslab.environment import record_result
record_result(sys.argv[1], sys.argv[2], command=sys.argv[3:])' "$out" "one GPU call on whichever card came: its \
limits, loading's time and memory, steady-state passes against the limits, profiles, the deep model with long \
prompts, then the GPU tests and the proofs (log.txt: every stage's status and time)" "${invocation[@]}" \
  >> "$log" 2>&1 || echo "no manifest written" >> "$log"
snapshot
cat "$log"
grep -hE "^(invariant|stock)_" "$out"/proof_*.txt 2>/dev/null
grep -hE "passed|failed" "$out/gpu_tests.txt" 2>/dev/null | tail -n 2
true
