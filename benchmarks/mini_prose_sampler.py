#!/usr/bin/env python
"""`mini`'s held-out prose under other sampler settings than its defaults, stored as the quality benchmark stores
answers (so ``mini_prose_judge.py`` reads them): does a colder temperature or a tighter entropy bound make it
English, or only more frequent words?

    python benchmarks/mini_prose_sampler.py --passages prose.txt --setting t_min=0.1,t_max=0.2 --out FILE.json
        [--per-task 100] [--model mini]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from canvaslab.environment import environment_fingerprint
from canvaslab.errors import CanvaslabError
from canvaslab.generation.runner import resolve_generation
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.training.evaluate import answer_diffusion, summarize
from canvaslab.training.tasks import Mixture


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="mini")
    parser.add_argument("--passages", type=Path, required=True)
    parser.add_argument("--setting", required=True, help="generation overrides, e.g. t_min=0.1,t_max=0.2")
    parser.add_argument("--per-task", type=int, default=100)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    try:
        setting = {k: int(v) if v.isdigit() else float(v)  # step counts and thresholds are integers
                   for k, v in (item.split("=", 1) for item in args.setting.split(",") if item)}
    except ValueError:
        parser.error(f"--setting {args.setting!r} is not KEY=NUMBER[,KEY=NUMBER...]")
    try:
        resolve_generation({}, setting)  # generate's own check of the keys, before the model loads
    except CanvaslabError as error:
        parser.error(str(error))
    loaded = load_model(args.model, dtype="float32", device="cpu")
    examples = Mixture(args.passages).heldout("prose", args.per_task, 0)
    answers = answer_diffusion(loaded, examples, seed=0, generation=setting)
    for example, answer in zip(examples, answers):
        answer.update(task=example.task, prompt=example.prompt)
    summary = summarize(examples, answers, args.passages)
    print(args.setting, summary, flush=True)
    write_json_atomic(args.out, {"per_task": args.per_task, "seed": 0, "setting": setting,
                                 "generation": {**loaded.generation_defaults, **setting},
                                 "diffusion": summary, "answers": {"diffusion": answers},
                                 "environment": environment_fingerprint(loaded.model, loaded.device)})


if __name__ == "__main__":
    main()
