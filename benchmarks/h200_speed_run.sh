#!/usr/bin/env bash
# Invariant mode's speed and correctness on one GPU (an H200), in one call: throughput and peak memory, stock
# against invariant (6 and 30 layers), the tracer's overhead on the fast paths, profiles at B = 32 and the kernel
# settings sweep; then the correctness evidence on the same code: the real-shapes proof (prompts encoded in the
# batch, 6 and 30 layers, stock as the negative control), the proof on the compiled path, the needle test
# (B = 64, 128), the op scan, cuBLAS's row invariance and the GPU tests.
#
#   bash benchmarks/h200_speed_run.sh OUT_DIR [SECONDS_AVAILABLE]
#
# Timing stages run alone on the GPU; the correctness stages then run in two parallel lanes (their results
# are bits, not times), and the 30-layer ones alone again (their memory). Every stage logs its own failure
# and the next one runs; a stage is skipped when the time left is below its estimate, and cut at the budget.
# Writes OUT_DIR/log.txt, one file per stage and OUT_DIR/result.json (the manifest).
# Environment: MODEL (real-shapes), DEVICE (cuda), L6 / L30 (the two depths: 6, 30), SMALL (batch sizes timed
# for both modes: 1,8,32), BIG (invariant alone: 64), NEEDLE (64,128), REPEATS (timed rounds per throughput
# cell: 1), ONLY=name,name (only those stages), SHAPES (a sweep.json of h200_kernel_sweep.py whose recorded
# shapes the kernel stages use; default: record them; MODEL=tiny: toy sizes), COMPILED_PATH (compiled, or graphs for a CPU dry run),
# SNAPSHOT=FILE.tar.gz (also a tarball of OUT_DIR after each phase, for a transfer that takes few files).
# Python modules in /tmp/site come first on the path (a newer transformers carried to the GPU machine).
# A dry run on the CPU (every command, toy sizes):
#   MODEL=tiny DEVICE=cpu L6=2 L30=2 SMALL=1,2 BIG=2 NEEDLE=2,3 COMPILED_PATH=graphs \
#     bash benchmarks/h200_speed_run.sh /tmp/dry 900
set -uo pipefail
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; }
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then usage; exit 0; fi
if (( $# < 1 )); then usage >&2; exit 2; fi
invocation=()  # the manifest's command: the settings given, then the call
for name in MODEL DEVICE L6 L30 SMALL BIG NEEDLE REPEATS ONLY SHAPES COMPILED_PATH SNAPSHOT; do
  [[ -n "${!name+set}" ]] && invocation+=("$name=${!name}")
done
invocation+=(bash benchmarks/h200_speed_run.sh "$@")
cd "$(dirname "$0")/.."
out=$1
budget=${2:-370}
model=${MODEL:-real-shapes} device=${DEVICE:-cuda} l6=${L6:-6} l30=${L30:-30}
small=${SMALL:-1,8,32} big=${BIG:-64} needle=${NEEDLE:-64,128}
kernels=()  # h200_kernel_sweep.py's shapes: recorded (or SHAPES's); toy sizes with the tiny model
[[ -n "${SHAPES:-}" ]] && kernels+=(--shapes "$SHAPES")
[[ "$model" == tiny ]] && kernels+=(--tiny)
mkdir -p "$out/proof"
export PYTHONPATH="$PWD/src:$PWD/benchmarks:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
log="$out/log.txt"

stage() {  # NAME ESTIMATE_S COMMAND...: run it if the time left allows, cut at the budget; log status and duration
  local name=$1 estimate=$2; shift 2
  [[ -n "${ONLY:-}" && ",$ONLY," != *",$name,"* ]] && return
  local left=$((budget - SECONDS))
  if (( estimate > left )); then echo "SKIPPED $name (needs ~${estimate} s, ${left} s left)" >> "$log"; return; fi
  local start=$SECONDS
  echo "== $name (t=${SECONDS}s)" >> "$log"
  timeout "$left" bash -c '"$@"' _ "$@" > "$out/$name.txt" 2>&1  # bash -c: the command may be a function
  echo "== $name exit=$? after $((SECONDS - start)) s" >> "$log"
}

study() {  # LAYERS NAME ARGS...: one batch study, prompts encoded in the batch, 2 passes
  local layers=$1 name=$2; shift 2
  python -m canvaslab.cli.main batch-study --model "$model" --layers "$layers" --device "$device" \
    --no-copy-prompt-cache --prompts 1 --steps 2 --modules-only --repeat-control same-process "$@" \
    --out "$out/proof/$name" || return
  python -c "import json,sys; print(sys.argv[1], json.dumps(json.load(open(sys.argv[2]))['summary']))" \
    "$name" "$out/proof/$name/batch_study.json"
}

throughput() {  # LAYERS BATCHES MODES NAME
  python benchmarks/throughput.py --model "$model" --layers "$1" --device "$device" --batch-sizes "$2" \
    --modes "$3" --steps 4 --repeats "${REPEATS:-1}" --out "$out/$4.json"
}

snapshot() { [[ -n "${SNAPSHOT:-}" ]] && tar -czf "$SNAPSHOT" -C "$out" . ; true; }

export model device out
export -f study throughput

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  python -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)"
} >> "$log" 2>&1

# Timing, alone on the GPU (stock at B = 64 would not fit: invariant only there)
stage throughput_6l 60 throughput "$l6" "$small" stock,invariant throughput_6l
stage throughput_6l_b64 30 throughput "$l6" "$big" invariant throughput_6l_b64
stage throughput_30l 60 throughput "$l30" "$small" stock,invariant throughput_30l
stage tracer_fast 40 python benchmarks/tracer_overhead.py --model "$model" --layers "$l6" --device "$device" \
  --mode invariant --batch-size "${small##*,}" --steps 8 --repeats 3 --out "$out/tracer_overhead_fast.json"
stage profile_b32 30 python benchmarks/profile_generate.py --model "$model" --layers "$l6" --device "$device" \
  --modes invariant --batch-sizes "${small##*,}" --steps 2 --out "$out/profile_b32_tables.txt"
stage profile_30l_b32 60 python benchmarks/profile_generate.py --model "$model" --layers "$l30" --device "$device" \
  --modes invariant --batch-sizes "${small##*,}" --steps 2 --rows 40 --out "$out/profile_30l_b32_tables.txt"
# kernel settings: the experts' grouped tiles, vocabulary products per canvas through cuBLAS
stage kernel_sweep 150 python benchmarks/h200_kernel_sweep.py --out "$out/kernels" --budget 140 \
  --stages grouped,canvas_cublas "${kernels[@]}"
snapshot

# Correctness, two lanes at once
lane_proof() {
  stage proof_6l_invariant_mixed 45 study "$l6" invariant_6l_mixed --mode invariant --fill mixed \
    --batch-sizes "1,2,3,4,5,6,7,8,${small##*,},$big"
  stage needle_6l 55 python benchmarks/needle.py --model "$model" --layers "$l6" --device "$device" \
    --batch-sizes "$needle" --mode invariant --steps 4 --out "$out/needle_6l.json"
  stage proof_6l_stock_mixed 30 study "$l6" stock_6l_mixed --mode stock --fill mixed --batch-sizes 1,2,8
  # every batch-sensitive op of one layer, stock and invariant, over B = 1..64 (the dense products' cuBLAS path too)
  stage op_scan 200 python -m canvaslab.cli.main op-scan --model "$model" --device "$device" --mode both \
    --batch-sizes "1,2,3,4,5,8,16,${small##*,},$big" --out "$out/op_scan"
}
lane_tests() {
  stage gpu_tests 110 python -m pytest -v -p no:cacheprovider tests/gpu tests/invariant/test_triton_kernels.py
  stage proof_6l_invariant_copies 40 study "$l6" invariant_6l_copies --mode invariant --fill copies \
    --batch-sizes "1,2,3,8,${small##*,},$big"
  # the proof on the compiled static-cache path (compiles first: a minute or more at 6 layers)
  stage compiled_proof 110 python benchmarks/compiled_proof.py --model "$model" --layers "$l6" --device "$device" \
    --path "${COMPILED_PATH:-compiled}" --fills copies,mixed --batch-sizes "1,2,8,${small##*,}" --steps 4 \
    --seconds 100 --out "$out/compiled/proof_compiled.json"
  stage cublas_invariance 40 python benchmarks/h200_kernel_sweep.py --out "$out/cublas" --budget 60 \
    --stages cublas_1k,cublas_default "${kernels[@]}"
}
lane_proof & lane_tests & wait
snapshot

# 30 layers, alone (51 GB of weights)
stage proof_30l_invariant_mixed 50 study "$l30" invariant_30l_mixed --mode invariant --fill mixed --batch-sizes "$small"
stage needle_30l 75 python benchmarks/needle.py --model "$model" --layers "$l30" --device "$device" \
  --batch-sizes "$needle" --mode invariant --steps 4 --out "$out/needle_30l.json"
echo "done at t=${SECONDS}s" >> "$log"
python -c 'import sys
from canvaslab.environment import record_result
record_result(sys.argv[1], sys.argv[2], command=sys.argv[3:])' "$out" "invariant mode against stock on one GPU: \
throughput and peak memory, tracer overhead, profiles, kernel settings (timed alone), then the real-shapes proof, \
the compiled path's proof, the needle test, the op scan, cuBLAS invariance and the GPU tests (log.txt: every \
stage's status and time)" "${invocation[@]}" >> "$log" 2>&1 || echo "no manifest written" >> "$log"
snapshot
cat "$log"
grep -hE "^(invariant|stock)_" "$out"/proof_*.txt
grep -hE "passed|failed" "$out/gpu_tests.txt" | tail -n 2
grep -hoE "'mode': '[a-z:]+', 'batch': [0-9]+|'pass_ms_per_row_step': [0-9.]+|'peak_memory_gib': [0-9.]+" \
  "$out"/throughput_*.txt | paste -sd' ' | sed 's/'"'"'mode/\nmode/g'
