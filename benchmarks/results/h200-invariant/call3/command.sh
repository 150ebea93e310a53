set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD/src:$PWD/benchmarks:/tmp/site PYTHONUNBUFFERED=1
o=/tmp/o; mkdir -p $o; S=$SECONDS
snap() { tar czf $OUT/run.tar.gz -C $o . ; }
timeout 60 python benchmarks/.cast_probe.py > $o/cast.txt 2>&1
( timeout 200 python benchmarks/rotary_probe.py --model real-shapes --layers 2 --device cuda --first-pass --out $o/rotary_probe.json > $o/rotary.txt 2>&1 ) &
timeout 220 python -m pytest -q -p no:cacheprovider -rf tests/gpu/test_cublas_gpu.py tests/gpu/test_compiled_gpu.py > $o/gpu_tests_partial.txt 2>&1
wait; echo "parallel done $((SECONDS-S))" >> $o/times.txt; snap
timeout 150 python benchmarks/throughput.py --model real-shapes --layers 30 --device cuda --batch-sizes 32,1 --modes stock,invariant --steps 4 --repeats 1 --out $o/throughput_30l.json > $o/throughput_30l.txt 2>&1
echo "t30 done $((SECONDS-S))" >> $o/times.txt; snap
timeout 80 python benchmarks/throughput.py --model real-shapes --layers 6 --device cuda --batch-sizes 1,32,64 --modes invariant --steps 4 --repeats 1 --out $o/throughput_6l.json > $o/throughput_6l.txt 2>&1
echo "t6 done $((SECONDS-S))" >> $o/times.txt; snap
timeout 120 python benchmarks/memory_probe.py --layers 30 --batch-size 128 --out $o/memory_30l_b128.json > $o/memory.txt 2>&1
echo "mem done $((SECONDS-S))" >> $o/times.txt; snap
cat $o/cast.txt; grep -E "vs|fused=" $o/rotary.txt | cut -c1-400; tail -15 $o/gpu_tests_partial.txt
grep -hoE "'mode': '[a-z:]+', 'batch': [0-9]+|'pass_ms_per_row_step': [0-9.]+|'peak_memory_gib': [0-9.]+" $o/throughput_*.txt | paste -sd' ' | sed 's/'"'"'mode/\nmode/g'
tail -3 $o/throughput_30l.txt | cut -c1-300; cat $o/memory.txt | cut -c1-250 | tail -30; cat $o/times.txt
