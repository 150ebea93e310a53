#!/usr/bin/env python
"""CPU seconds of one `mini` training step (loss + backward, full-size config, batch 16, the real mixture)
with and without the self-conditioning pass, alternated in one process (on a shared machine alternating
keeps the load the same for both).  python benchmarks/mini_step_cpu.py PROSE_TXT"""
import time, torch, random, json, statistics
from transformers import DiffusionGemmaForBlockDiffusion
from canvaslab.models.mini import mini_config, load_mini_tokenizer
from canvaslab.training.batches import Pool, generate_texts, diffusion_rows
from canvaslab.training.objective import DiffusionBatch, NoiseSchedule, diffusion_loss
torch.set_num_threads(1); torch.manual_seed(0)
pool = Pool.build(load_mini_tokenizer(), generate_texts(__import__("sys").argv[1], 512, 0), 256)
model = DiffusionGemmaForBlockDiffusion(mini_config()).train()
g, rr = torch.Generator().manual_seed(0), random.Random(0)
times = {True: [], False: []}
for i in range(10):
    for sc in (True, False):
        ids, mask, canvas = diffusion_rows(pool, rr.sample(range(len(pool)), 16), 128, rr)
        t = time.perf_counter()
        diffusion_loss(model, DiffusionBatch(ids, mask, canvas), NoiseSchedule(), g, None, sc).backward()
        if i >= 2: times[sc].append(time.perf_counter() - t)
with_sc, without = statistics.median(times[True]), statistics.median(times[False])
print(json.dumps({"batch": 16, "with_sc_pass_s": round(with_sc, 3), "without_s": round(without, 3),
                  "per_row_draw_expected_s": round(with_sc, 3), "per_step_draw_expected_s": round((with_sc + without) / 2, 3)}))
