"""``canvaslab mini train``: train `mini` and its autoregressive sibling, save both, evaluate, report.

Writes ``OUT/diffusion`` and ``OUT/autoregressive`` (transformers checkpoints, bf16 safetensors, with
the tokenizer and a generation config; ``--model OUT/diffusion`` and ``--baseline OUT/autoregressive``
load them), ``OUT/loss.png``, ``OUT/quality.json`` and ``OUT/MODEL_CARD.md``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion, Gemma4ForCausalLM, GenerationConfig
from transformers.models.diffusion_gemma.generation_diffusion_gemma import (DiffusionGemmaGenerationConfig,
                                                                             EntropyBoundSamplerConfig)

from canvaslab.environment import environment_fingerprint
from canvaslab.errors import CanvaslabError
from canvaslab.io import read_json, write_json_atomic
from canvaslab.models.mini import MINI_EOS_IDS, ar_sibling_config, load_mini_tokenizer, mini_config
from canvaslab.training.batches import Pool, generate_texts
from canvaslab.training.loop import TrainSettings, compile_parts, train
from canvaslab.training.objective import restore_experts, use_autocast_experts
from canvaslab.training.tasks import AnswerStyle, mixture_shares

# Sampler defaults shipped with `mini` (generation_config.json): the real model's, a 48-pass budget,
# two canvases of 128 (the longest training answers).
MINI_GENERATION = {
    "max_denoising_steps": 48, "t_min": 0.4, "t_max": 0.8, "stability_threshold": 1,
    "confidence_threshold": 0.005, "max_new_tokens": 256, "eos_token_id": MINI_EOS_IDS, "pad_token_id": 0,
}


def diffusion_generation_config(**overrides) -> DiffusionGemmaGenerationConfig:
    settings = {**MINI_GENERATION, **overrides}
    return DiffusionGemmaGenerationConfig(sampler_config=EntropyBoundSamplerConfig(entropy_bound=0.1), **settings)


@dataclass(frozen=True)
class RunSpec:
    out: Path
    passages: Path | None
    settings: TrainSettings
    device: str = "cuda"
    examples: int = 0  # pool size; 0 = steps x batch
    text_overrides: tuple = ()
    canvas_length: int = 128
    kinds: tuple[str, ...] = ("diffusion", "causal")
    compile_parts: str = ""  # "", "layers" or "leaves": what loop.compile_parts puts under torch.compile
    answers: AnswerStyle = AnswerStyle()  # how the training answers are written (sums)
    shares: tuple[tuple[str, float], ...] = ()  # overrides of tasks.MIXTURE's shares, as (task, share) pairs
    # Resumable training: each model's state is checkpointed in this folder, and a rerun with the same
    # spec goes on from there; past ``stop_at`` (time.monotonic()) training pauses (TrainingPaused).
    checkpoint_dir: Path | None = None
    stop_at: float | None = None
    # each model's portable state (canvaslab.training.portable) goes to portable_dir/KIND at a pause, and a
    # run without its checkpoint goes on from there (the state that can travel to another machine)
    portable_dir: Path | None = None
    # a tokenizer folder (`canvaslab mini tokenizer`) instead of the shipped one; the models' vocabulary is its size
    tokenizer: Path | None = None
    # the training data version (choices.DATA_VERSIONS): "shipped" (the shipped mini's generators) or "grammar"
    data: str = "shipped"


# Weight files stay under 16 MiB: they travel back from GPU machines with a per-file limit, and the
# shipped preset is kept in the repository as ordinary files.
MAX_SHARD_SIZE = "16MB"


def save_checkpoint(model, tokenizer, generation_config, folder: Path) -> None:
    """A bf16 checkpoint in shards under MAX_SHARD_SIZE that `--model DIR` and `from_pretrained` load."""
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True, max_shard_size=MAX_SHARD_SIZE)
    tokenizer.save_pretrained(folder)
    generation_config.save_pretrained(folder)


def load_tokenizer(folder: Path | None):
    """The tokenizer in ``folder``, or the shipped `mini` one."""
    if folder is None:
        return load_mini_tokenizer()
    if not (folder / "tokenizer.json").is_file():
        raise CanvaslabError(f"--tokenizer {folder}: no tokenizer.json there (make one with `canvaslab mini tokenizer`)")
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def prose_answers_record(path: Path) -> dict:
    """What a run's card says of its distilled prose answers: where they came from, and the file's hash."""
    data = read_json(path)
    return {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            **{key: data.get(key) for key in ("teacher", "decoding", "passages", "kept_own")}}


def _example_pool(spec: RunSpec, tokenizer) -> Pool:
    """The run's examples; a resumable run (``checkpoint_dir``) keeps them beside its checkpoints, named by
    what they are made from, so a later call (or the sibling's process) loads them instead of generating."""
    count = spec.examples or spec.settings.steps * spec.settings.batch_size
    # (prose answers only when given: the pools of runs without them keep their names)
    answers = {key: value for key, value in asdict(spec.answers).items() if key != "prose_answers"}
    if spec.answers.prose_answers is not None:
        answers["prose_answers"] = hashlib.sha256(Path(spec.answers.prose_answers).read_bytes()).hexdigest()
    made_from = {"count": count, "seed": spec.settings.seed, "max_answer_tokens": 2 * spec.canvas_length,
                 "vocabulary": len(tokenizer), "answers": answers,
                 "passages": hashlib.sha256(spec.passages.read_bytes()).hexdigest() if spec.passages else None}
    if spec.tokenizer is not None:  # (only then: the pools of runs on the shipped tokenizer keep their names)
        made_from["tokenizer"] = hashlib.sha256((spec.tokenizer / "tokenizer.json").read_bytes()).hexdigest()
    if spec.shares:  # (only then: the pools of runs without overrides keep their names)
        made_from["shares"] = mixture_shares(dict(spec.shares), spec.data)
    if spec.data != "shipped":  # (only then: the pools of shipped-data runs keep their names)
        made_from["data"] = spec.data
    cached = None
    if spec.checkpoint_dir is not None:
        key = hashlib.sha256(json.dumps(made_from, sort_keys=True).encode()).hexdigest()[:16]
        cached = spec.checkpoint_dir / f"pool-{key}.pt"
        if cached.exists():
            return Pool.load(cached)
    rows = generate_texts(spec.passages, count, spec.settings.seed, workers=min(16, os.cpu_count() or 1),
                          style=spec.answers, shares=dict(spec.shares) or None, data=spec.data)
    pool = Pool.build(tokenizer, rows, max_answer_tokens=made_from["max_answer_tokens"])
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        pool.save(cached)
    return pool


def train_models(spec: RunSpec, log=print, on_saved=None, on_entry=None) -> dict:
    """Train both models on the same pool; save them; return what the model card needs.

    ``on_entry(kind, entry)`` sees every logged history entry (e.g. to pass the step count a time budget
    fixed to a sibling trained at the same time on another device)."""
    tokenizer = load_tokenizer(spec.tokenizer)
    started = time.perf_counter()
    pool = _example_pool(spec, tokenizer)
    log(f"pool: {len(pool)} examples, {pool.tokens()} tokens, {time.perf_counter() - started:.1f} s")
    text = {"vocab_size": len(tokenizer), **dict(spec.text_overrides)}
    report = {"pool_examples": len(pool), "pool_tokens": pool.tokens(), "vocabulary": len(tokenizer),
              "settings": spec.settings.as_dict(),
              "answers": asdict(spec.answers), "data": spec.data,
              "mixture_shares": mixture_shares(dict(spec.shares), spec.data),
              "mixture_counts": {t: pool.tasks.count(t) for t in sorted(set(pool.tasks))}}
    if spec.answers.prose_answers is not None:
        report["prose_answers"] = prose_answers_record(Path(spec.answers.prose_answers))
    settings = spec.settings
    for kind in spec.kinds:
        torch.manual_seed(spec.settings.seed)
        random.seed(spec.settings.seed)
        if kind == "diffusion":
            model = DiffusionGemmaForBlockDiffusion(mini_config(spec.canvas_length, **text))
        else:
            model = Gemma4ForCausalLM(ar_sibling_config(**text))
        model.to(spec.device)
        if spec.device.startswith("cuda"):
            use_autocast_experts(model)
        if spec.compile_parts:
            log(f"{kind}: {compile_parts(model, spec.compile_parts)} modules compiled ({spec.compile_parts})")
        history = train(model, pool, settings, kind, canvas_length=spec.canvas_length,
                        progress=lambda e, k=kind: (log(f"{k} {e}"), on_entry and on_entry(k, e)),
                        checkpoint=spec.checkpoint_dir / f"{kind}.pt" if spec.checkpoint_dir else None,
                        stop=None if spec.stop_at is None else lambda step: time.monotonic() > spec.stop_at,
                        portable=spec.portable_dir / kind if spec.portable_dir else None)
        # The sibling gets the same budget: the steps (hence examples, in the same order) the diffusion
        # model ran, whatever its time budget made of them.
        settings = replace(settings, steps=history[-1]["step"] + 1, time_budget_s=0.0)
        restore_experts(model)
        name = "diffusion" if kind == "diffusion" else "autoregressive"
        generation = diffusion_generation_config() if kind == "diffusion" else GenerationConfig(
            eos_token_id=MINI_EOS_IDS, pad_token_id=0, bos_token_id=2, do_sample=False, max_new_tokens=256)
        save_checkpoint(model, tokenizer, generation, spec.out / name)
        if on_saved is not None:
            on_saved(spec.out / name)
        report[name] = {"parameters": sum(p.numel() for p in model.parameters()), "history": history,
                        "steps": history[-1]["step"] + 1,
                        "portable_resumes": history[-1].get("portable_resumes", []),
                        # the loop's own clock: it carries on across a paused and resumed run
                        "train_seconds": round(history[-1]["seconds"], 1)}
    report["environment"] = environment_fingerprint(device=torch.device(spec.device))
    write_json_atomic(spec.out / "training.json", report)
    return report


def evaluate_models(out: Path, passages: Path | None, per_task: int, device: str, seed: int = 0, log=print,
                    models: tuple[str, ...] = ("diffusion", "autoregressive"), tasks: tuple[str, ...] = (),
                    data: str = "shipped") -> dict:
    """Held-out quality of both saved models (``OUT/quality_MODELS.json``); ``tasks``: a subset of the
    evaluation tasks (e.g. code apart, on a machine with the sandbox), default all; ``data``: whose in-template
    held-out split (the data version the models were trained on)."""
    from canvaslab.models import load_model
    from canvaslab.training.evaluate import answer_causal, answer_diffusion, summarize
    from canvaslab.training.tasks import EVAL_TASKS, Mixture

    mixture = Mixture(passages, data=data)
    examples = [e for task in EVAL_TASKS if task in mixture.makers and (not tasks or task in tasks)
                for e in mixture.heldout(task, per_task, seed)]
    result = {"per_task": per_task, "seed": seed, "data": data, "generation": MINI_GENERATION, "samples": {}, "answers": {}}
    for name in models:
        tokenizer = load_tokenizer(out / name)  # each checkpoint carries the tokenizer it was trained with
        started = time.perf_counter()
        if name == "diffusion":
            loaded = load_model(str(out / name), device=device, dtype="bfloat16")
            answers = answer_diffusion(loaded, examples, seed=seed)
            result["environment"] = environment_fingerprint(loaded.model, loaded.device)
        else:
            causal = Gemma4ForCausalLM.from_pretrained(out / name, dtype=torch.bfloat16).to(device).eval()
            answers = answer_causal(causal, tokenizer, examples, max_new_tokens=256)
            result.setdefault("environment", environment_fingerprint(device=torch.device(device)))
        result[name] = summarize(examples, answers, passages)
        result[f"{name}_seconds"] = round(time.perf_counter() - started, 1)
        result["samples"][name] = [{"task": e.task, "prompt": e.prompt, "expected": e.answer, **a}
                                   for e, a in list(zip(examples, answers))[:: max(1, per_task // 4)]]
        result["answers"][name] = [{"task": e.task, "prompt": e.prompt, **a} for e, a in zip(examples, answers)]
        log(f"quality {name}: {result[name]}")
    suffix = "_".join(models) + ("_" + "_".join(tasks) if tasks else "")
    write_json_atomic(out / f"quality_{suffix}.json", result)
    return result
