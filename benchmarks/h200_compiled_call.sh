#!/usr/bin/env bash
# Invariant mode's compiled path on one H200, in one short device call (issue 15 points 1, 2, 6, 7):
#   (a) the compiled path's GPU tests (2 layers; -rA, full failure text), in the background, and at once
#   (b-d) one 6-layer process (benchmarks/h200_compiled_run.py): the byte-for-byte proof (B = 1..8, 32, 64,
#       copies and mixed), throughput of invariant:compiled vs invariant (fused, CUDA graphs) vs stock at
#       B = 1, 32, 64 (timed after the tests end, so the two processes do not share the GPU while timing),
#       the commit tracer's overhead on the compiled path.
# Compilation (Dynamo, AOTAutograd, Inductor) is CPU work: the two processes compile side by side.
#
#   bash benchmarks/h200_compiled_call.sh OUT_DIR [SECONDS] [PROOF_SHARE]
#
# Writes OUT_DIR/log.txt, gpu_tests.txt, proof_compiled.json, throughput_compiled.json, tracer_overhead_fast.json.
# Carry transformers >= 5.24 into /tmp/site first (see benchmarks/compiled_gpu_commands.md).
# DRY=1 dry-runs it on a CPU (tiny model, the traced backend, small sizes; the GPU tests skip).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash benchmarks/h200_compiled_call.sh OUT_DIR [SECONDS]}
budget=${2:-330} proof_share=${3:-0.55}
mkdir -p "$out"
export PYTHONPATH="$PWD/src:$PWD/benchmarks:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
log="$out/log.txt"
done_marker=$(mktemp -u /tmp/gpu_tests_done.XXXXXX)
if [[ -n "${DRY:-}" ]]; then
  export TRITON_INTERPRET=1
  run_args=(--model tiny --device cpu --layers 2 --backend traced --proof-sizes 1,2,3 --throughput-sizes 1,2
            --stock-max-batch 1 --steps 2)
else
  run_args=(--layers 6 --proof-sizes 1,2,3,4,5,6,7,8,32,64 --throughput-sizes 1,32,64 --steps 4)
fi
{ echo "== $(date -u +%FT%TZ) commit $(cat COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tail -n 2
  python -c "import torch, triton, transformers; print(torch.__version__, torch.version.cuda, triton.__version__, transformers.__version__)"
} >> "$log" 2>&1
( timeout $((budget - 20)) python -m pytest -rA --tb=long -p no:cacheprovider tests/gpu/test_compiled_gpu.py \
    > "$out/gpu_tests.txt" 2>&1
  echo "== gpu tests exit=$? (t=${SECONDS}s)" >> "$out/gpu_tests.txt"; touch "$done_marker" ) &
tests=$!
echo "== h200_compiled_run (t=${SECONDS}s)" >> "$log"
timeout $((budget - 5)) python benchmarks/h200_compiled_run.py --out "$out" --seconds $((budget - 25)) \
  --proof-share "$proof_share" \
  --tracer-paths compiled --quiet-after "$done_marker" "${run_args[@]}" >> "$log" 2>&1
echo "== h200_compiled_run exit=$? (t=${SECONDS}s)" >> "$log"
wait "$tests"
rm -f "$done_marker"
tail -n 30 "$log"; grep -E "PASSED|FAILED|ERROR|passed|failed|exit=" "$out/gpu_tests.txt" | tail -n 8
