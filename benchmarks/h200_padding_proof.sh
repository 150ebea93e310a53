#!/usr/bin/env bash
# Issue 11's real-shapes proof for padded rows, on one H200 (about 6 minutes; the runs before it took about a
# minute each at B up to 64 and 2 denoising passes).
#
#   bash benchmarks/h200_padding_proof.sh OUT_DIR
#
# Every run encodes the prompts inside the batch (--no-copy-prompt-cache): with --fill mixed the studied
# row is left-padded to the batch's longest prompt, and its prompt pass is compared over its real
# positions, like every later pass. Invariant runs must show 0 diverged and every pass matching; stock is
# the negative control and must diverge. Each study writes OUT_DIR/NAME/batch_study.json; a rerun resumes.
# On the lent H200 (transformers 5.17 in the image) carry a 5.23 wheel into /tmp/site, as in README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash benchmarks/h200_padding_proof.sh OUT_DIR}
mkdir -p "$out"
export PYTHONPATH="$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
# The B=1 repeat control runs in this process: a fresh one would rebuild the model for every study.
common=(--model real-shapes --layers 6 --device cuda --no-copy-prompt-cache --prompts 1 --steps 2 --modules-only
        --repeat-control same-process)

study() {  # NAME ARGS...: one study, its wall time and summary line appended to OUT_DIR/log.txt
  local name=$1; shift
  local start=$SECONDS
  if python -m canvaslab.cli.main batch-study "${common[@]}" "$@" --out "$out/$name" > "$out/$name.txt" 2>&1; then
    python - "$out/$name/batch_study.json" "$name" "$((SECONDS - start))" >> "$out/log.txt" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))["summary"]
print(sys.argv[2], f"{sys.argv[3]} s", json.dumps(summary))
PY
  else
    echo "$name FAILED after $((SECONDS - start)) s: see $name.txt" >> "$out/log.txt"
  fi
  tail -n 1 "$out/log.txt"
}

# In order of importance (a lease may end before the last): row 0 among other prompts (left-padded), its
# negative control, the studied prompt at row 5 over two canvases, two canvases at row 0, copies, stock at row 5.
study invariant_mixed --mode invariant --fill mixed --batch-sizes 1,2,3,4,5,6,7,8,32,64
study stock_mixed --mode stock --fill mixed --batch-sizes 1,2,8,64
study invariant_mixed_row5 --mode invariant --fill mixed --batch-sizes 1,8,32,64 --row 5 --max-new-tokens 512
study invariant_mixed_2_canvases --mode invariant --fill mixed --batch-sizes 1,2,8,64 --max-new-tokens 512
study invariant_copies --mode invariant --fill copies --batch-sizes 1,2,3,4,5,6,7,8,32,64
study stock_mixed_row5 --mode stock --fill mixed --batch-sizes 1,8 --row 5 --max-new-tokens 512
