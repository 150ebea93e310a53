set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD/src:$PWD/benchmarks:/tmp/site PYTHONUNBUFFERED=1
r=/tmp/rB; mkdir -p $r; S=$SECONDS
# B=1 alone first, 8 passes differenced (steps 8 vs 16) and 7 repeats: the 4-pass difference of call A scattered
timeout 60 python benchmarks/throughput.py --model real-shapes --layers 6 --device cuda --batch-sizes 1 \
  --modes stock,invariant --steps 8 --repeats 7 --out $r/throughput_6l_b1_steps8.json > $r/throughput_6l_b1_steps8.txt 2>&1
echo "b1 exit $? at $((SECONDS-S))" >> $r/log.txt
ONLY=proof_6l_invariant_mixed,needle_6l,proof_6l_stock_mixed,op_scan,gpu_tests,proof_6l_invariant_copies,compiled_run,proof_30l_invariant_mixed,needle_30l \
  SNAPSHOT=$OUT/run.tar.gz bash benchmarks/h200_speed_run.sh $r 520 > $r/speed_run_stdout.txt 2>&1
echo "speed run done $((SECONDS-S))" >> $r/log.txt
tar czf $OUT/run.tar.gz -C $r .
tail -30 $r/speed_run_stdout.txt | cut -c1-300; tail -3 $r/throughput_6l_b1_steps8.txt | cut -c1-250; cat $r/log.txt | tail -3
