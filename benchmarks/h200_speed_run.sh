#!/usr/bin/env bash
# Issue 15 on one H200, in one call (~9 minutes): GPU tests of the fused step, the real-shapes proof on the
# final code (prompts encoded in the batch), throughput and peak memory stock vs invariant (6 and 30 layers),
# the needle test (B = 64, 128), a profile at B = 32. Every stage logs its own failure and the next one runs;
# a stage is skipped when the time left is below its estimate.
#
#   bash benchmarks/h200_speed_run.sh OUT_DIR [SECONDS_AVAILABLE]
#
# Writes OUT_DIR/log.txt, gpu_tests.txt, proof.tar.gz, throughput_6l.json, needle_6l.json, throughput_30l.json,
# needle_30l.json, profile_b32.txt. On the lent H200 carry transformers >= 5.23 into /tmp/site first.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash benchmarks/h200_speed_run.sh OUT_DIR [SECONDS_AVAILABLE]}
budget=${2:-540}
mkdir -p "$out/proof"
export PYTHONPATH="$PWD/src:$PWD/benchmarks:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
log="$out/log.txt"

stage() {  # NAME ESTIMATE_S COMMAND...: run it if the time left allows; log its exit status and duration
  local name=$1 estimate=$2; shift 2
  if (( SECONDS + estimate > budget )); then echo "SKIPPED $name (needs ~${estimate} s, $((budget - SECONDS)) s left)" >> "$log"; return; fi
  local start=$SECONDS
  echo "== $name (t=${SECONDS}s)" >> "$log"
  "$@" >> "$log" 2>&1
  echo "== $name exit=$? after $((SECONDS - start)) s" >> "$log"
}

study() {  # NAME ARGS...: one batch study at real shapes (6 layers), prompts encoded in the batch
  local name=$1; shift
  python -m canvaslab.cli.main batch-study --model real-shapes --layers 6 --device cuda --no-copy-prompt-cache \
    --prompts 1 --steps 2 --modules-only --repeat-control same-process "$@" --out "$out/proof/$name" \
    > "$out/proof/$name.txt" 2>&1
  local rc=$?
  python -c "import json,sys; print(sys.argv[1], json.dumps(json.load(open(sys.argv[2]))['summary']))" \
    "$name" "$out/proof/$name/batch_study.json" || tail -n 5 "$out/proof/$name.txt"
  return $rc
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)"; } >> "$log" 2>&1
stage gpu_tests 130 bash -c "python -m pytest -q -p no:cacheprovider tests/gpu/test_fused_gpu.py tests/gpu/test_invariant_gpu.py \
  -k 'vocab or bf16 or whole_generation or row_reduce or cuda_graph' > '$out/gpu_tests.txt' 2>&1; rc=\$?; tail -n 3 '$out/gpu_tests.txt'; exit \$rc"
stage proof_invariant_mixed 40 study invariant_mixed --mode invariant --fill mixed --batch-sizes 1,2,3,4,5,6,7,8,32,64
stage proof_invariant_copies 35 study invariant_copies --mode invariant --fill copies --batch-sizes 1,2,3,8,32,64
stage throughput_6l 110 python benchmarks/throughput.py --model real-shapes --layers 6 --device cuda \
  --batch-sizes 1,32,64 --modes stock,invariant,invariant:eager --steps 4 --repeats 2 --out "$out/throughput_6l.json"
stage needle_6l 50 python benchmarks/needle.py --model real-shapes --layers 6 --device cuda --batch-sizes 64,128 \
  --mode invariant --steps 4 --out "$out/needle_6l.json"
stage profile_b32 45 python benchmarks/profile_generate.py --model real-shapes --layers 6 --device cuda \
  --modes invariant,stock --batch-sizes 32 --steps 2 --out "$out/profile_b32.txt"
stage proof_invariant_row5 30 study invariant_mixed_row5 --mode invariant --fill mixed --batch-sizes 1,8,64 --row 5
stage proof_stock_mixed 30 study stock_mixed --mode stock --fill mixed --batch-sizes 1,2,8
tar -czf "$out/proof.tar.gz" -C "$out" proof && rm -rf "$out/proof"
stage throughput_30l 130 python benchmarks/throughput.py --model real-shapes --layers 30 --device cuda \
  --batch-sizes 1,8,32 --modes stock,invariant --steps 4 --repeats 1 --out "$out/throughput_30l.json"
stage needle_30l 70 python benchmarks/needle.py --model real-shapes --layers 30 --device cuda --batch-sizes 64,128 \
  --mode invariant --steps 4 --out "$out/needle_30l.json"
echo "done at t=${SECONDS}s" >> "$log"
grep -E "^(==|SKIPPED|invariant|stock|done|\{)" "$log" | tail -n 60
