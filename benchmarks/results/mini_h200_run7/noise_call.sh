# Session 21, call 3 (a fresh machine): the noise study on run 7 again from the committed store (108 conditions),
# 10 processes for 320 s, then its interim report; everything comes back as one noise.tgz (at most 8 files return).
#   bash benchmarks/results/mini_h200_run7/noise_call.sh      (from the repository root; carry .whl/)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
s=/tmp/ns; mkdir -p $s/noise_study; here=benchmarks/results/mini_h200_run7/noise_study
cp $here/plan.json $here/plan.sha256 $s/noise_study/ && tar -xzf $here/store.tgz -C $s/noise_study
cl() { python -c "from canvaslab.cli.main import main; main()" "$@"; }
for i in $(seq 10); do timeout 320 python -c "from canvaslab.cli.main import main; main()" noise-study run $s/noise_study --device cuda >> $s/noise.log 2>&1 & done
wait
ls $s/noise_study/store/records | wc -l > $s/records.txt
cl noise-study report $s/noise_study > $s/noise_report.txt 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv > $s/gpu.txt 2>&1
python -c "import transformers, torch; print(transformers.__version__, torch.__version__)" >> $s/gpu.txt
tar -czf $OUT/noise.tgz -C $s noise_study/store noise_study/noise_study.json noise.log noise_report.txt records.txt gpu.txt
cat $s/records.txt; tail -4 $s/noise_report.txt
