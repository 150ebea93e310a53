# Session 23: the default (2,304-condition) noise study on run 8 (the shipped `mini`), its plan registered on the CPU
# (rare control from the training pool's own token counts, benchmarks/mini_token_counts.py):
#   canvaslab noise-study plan --model mini --out .device-s22/noise_study --token-counts .device-s22/token_counts.npy
# (the plan and counts are in noise_study/ here). The same command each call on a warm machine: the store in
# /tmp/ns8 goes on where the last call stopped. Everything comes back as one noise.tgz (the store included, each
# call: a released machine loses it). Session 23 needed one call: 12 processes, 2,304 conditions in 345 s.
#   bash .device-s22/noise_call.sh RUN_S      (this file copied there; from the repository root; carry .whl/ and .device-s22/)
set -u
run_s=${1:-480}
[ -d /tmp/site/transformers ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
s=/tmp/ns8; mkdir -p $s
[ -f $s/noise_study/plan.json ] || { mkdir -p $s/noise_study && cp .device-s22/noise_study/plan.json .device-s22/noise_study/plan.sha256 $s/noise_study/; }
cl() { python -c "from canvaslab.cli.main import main; main()" "$@"; }
echo "call starts $(date -u +%T), $(ls $s/noise_study/store/records 2>/dev/null | wc -l) records" >> $s/noise.log
for i in $(seq ${PROCS:-12}); do timeout $run_s python -c "from canvaslab.cli.main import main; main()" noise-study run $s/noise_study --device cuda >> $s/noise.log 2>&1 & done
wait
ls $s/noise_study/store/records | wc -l > $s/records.txt
cl noise-study report $s/noise_study > $s/noise_report.txt 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv > $s/gpu.txt 2>&1
python -c "import transformers, torch; print(transformers.__version__, torch.__version__)" >> $s/gpu.txt
tar -czf $OUT/noise.tgz -C $s noise_study noise.log noise_report.txt records.txt gpu.txt
cat $s/records.txt; tail -30 $s/noise_report.txt
