python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD/src:$PWD/benchmarks:/tmp/site PYTHONUNBUFFERED=1
timeout 200 python -m pytest -q -p no:cacheprovider -rf tests/invariant/test_triton_kernels.py > $OUT/gpu_triton_kernels_tests.txt 2>&1
tail -5 $OUT/gpu_triton_kernels_tests.txt
