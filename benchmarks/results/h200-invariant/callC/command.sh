set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD/src:$PWD/benchmarks:/tmp/site PYTHONUNBUFFERED=1
r=/tmp/rC; mkdir -p $r
ONLY=proof_30l_invariant_mixed,needle_30l SNAPSHOT=$OUT/run.tar.gz bash benchmarks/h200_speed_run.sh $r 250 > $r/speed_run_stdout.txt 2>&1
tar czf $OUT/run.tar.gz -C $r .
tail -12 $r/speed_run_stdout.txt | cut -c1-400; grep -hoE "'batch': [0-9]+|'identical': [a-zA-Z]+|'peak_memory_gib': [0-9.]+|out of memory" $r/needle_30l.txt | paste -sd' '
