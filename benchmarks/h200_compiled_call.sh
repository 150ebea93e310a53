#!/usr/bin/env bash
# Invariant mode's compiled path on one H200, in one short device call: the 6-layer proof / throughput /
# tracer-overhead process (benchmarks/h200_compiled_run.py), then the compiled path's GPU tests in the time left.
#
#   bash benchmarks/h200_compiled_call.sh OUT_DIR [SECONDS_AVAILABLE] [RUN_SECONDS]
#
# Writes OUT_DIR/log.txt, proof_compiled.json, throughput_compiled.json, tracer_overhead_fast.json, gpu_tests.txt.
# Carry transformers >= 5.24 into /tmp/site first (see benchmarks/compiled_gpu_commands.md).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash benchmarks/h200_compiled_call.sh OUT_DIR [SECONDS_AVAILABLE] [RUN_SECONDS]}
budget=${2:-185}
run_seconds=${3:-120}
mkdir -p "$out"
export PYTHONPATH="$PWD/src:$PWD/benchmarks:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
log="$out/log.txt"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python -c "import torch, triton, transformers; print(torch.__version__, torch.version.cuda, triton.__version__, transformers.__version__)"
  echo "== h200_compiled_run (t=${SECONDS}s)"
  timeout $((run_seconds + 30)) python benchmarks/h200_compiled_run.py --out "$out" --layers 6 --seconds "$run_seconds"
  echo "== h200_compiled_run exit=$? (t=${SECONDS}s)"
} >> "$log" 2>&1
left=$((budget - SECONDS - 5))
if (( left > 20 )); then
  echo "== gpu tests, ${left} s (t=${SECONDS}s)" >> "$log"
  timeout "$left" python -m pytest -q -p no:cacheprovider tests/gpu/test_compiled_gpu.py > "$out/gpu_tests.txt" 2>&1
  echo "== gpu tests exit=$? (t=${SECONDS}s)" >> "$log"
else
  echo "SKIPPED gpu tests (${left} s left)" >> "$log"
fi
tail -n 40 "$log"; tail -n 3 "$out/gpu_tests.txt" 2>/dev/null
