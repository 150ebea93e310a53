"""CPU time per decoder pass of one B=1 generate (rng="row"), and how many torch calls per pass go through
the per-row multinomial function mode. Run under old and new code to compare (noise_study_speed_mini.md).

Usage: PYTHONPATH=src python benchmarks/noise_study_pass_cost.py MODEL PASSES REPEATS
"""

import sys
import time

import torch

from canvaslab.generation import generate, sampler
from canvaslab.models import load_model


def main(model: str, passes: int, repeats: int) -> None:
    torch.set_num_threads(1)
    loaded = load_model(model, dtype="float32")
    ids = loaded.tokenizer("the man said that the water in the river was cold")["input_ids"]
    settings = {"max_denoising_steps": passes}
    generate(loaded, [ids], seed=0, generation=settings)  # warm-up
    calls, original = [0], sampler.RowKeyedMultinomial.__torch_function__

    def counting(self, func, types, args=(), kwargs=None):
        calls[0] += 1
        return original(self, func, types, args, kwargs)

    sampler.RowKeyedMultinomial.__torch_function__ = counting
    ran = generate(loaded, [ids], seed=0, generation=settings).rows[0].passes[0]
    sampler.RowKeyedMultinomial.__torch_function__ = original
    print(model, "torch calls through the mode per pass:", round(calls[0] / ran, 1))
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        output = generate(loaded, [ids], seed=0, generation=settings)
        best = min(best, time.process_time() - start)
    print(model, f"B=1, {ran} passes: {best / ran * 1000:.1f} ms CPU per pass (best of {repeats}, 1 thread); "
                 f"first tokens {output.rows[0].tokens[:8]}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
