set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD/src:$PWD/benchmarks:/tmp/site PYTHONUNBUFFERED=1
r=/tmp/rA; mkdir -p $r; S=$SECONDS
ONLY=throughput_6l,throughput_6l_b64,throughput_30l,profile_b32,profile_30l_b32 REPEATS=3 SNAPSHOT=$OUT/run.tar.gz \
  bash benchmarks/h200_speed_run.sh $r 430 > $r/speed_run_stdout.txt 2>&1
echo "speed run done $((SECONDS-S))" >> $r/log.txt
timeout 70 python -m canvaslab.cli.main op-scan --model real-shapes --device cuda --mode both \
  --batch-sizes 1,2,3,4,5,8,16,32,64 --out $r/op_scan > $r/op_scan.txt 2>&1
echo "op scan exit $? at $((SECONDS-S))" >> $r/log.txt
timeout 60 python benchmarks/tracer_overhead.py --model real-shapes --layers 6 --device cuda --batch-size 8 --steps 8 \
  --mode invariant --repeats 5 --out $r/tracer_overhead_fast.json > $r/tracer.txt 2>&1
echo "tracer exit $? at $((SECONDS-S))" >> $r/log.txt
tar czf $OUT/run.tar.gz -C $r .
tail -25 $r/speed_run_stdout.txt; tail -4 $r/op_scan.txt | cut -c1-600; tail -3 $r/tracer.txt | cut -c1-400; cat $r/log.txt | tail -4
