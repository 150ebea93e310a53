for sc in nested same; do
  PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/mini_train_h200.py --out runs/s25/toy_$sc --passages prose.txt \
    --steps 600 --batch-size 32 --lr 2e-3 --examples 19200 --warmup 30 --kinds diffusion --eval-per-task 0 \
    --mixture add2=0,add3=0,word=0,fact=0,fact_statement=0,json=0,code=0,prose=1 --device cpu --tiny \
    --self-conditioning-canvas $sc > runs/s25/toy_$sc.log 2>&1
  PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/mini_prose_denoise.py --model runs/s25/toy_$sc/diffusion --passages prose.txt \
    --per-task 64 --no-generation --out runs/s25/toy_${sc}_denoise.json >> runs/s25/toy_$sc.log 2>&1
done
