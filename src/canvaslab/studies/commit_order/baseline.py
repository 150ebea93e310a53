"""The autoregressive baseline: an ordinary causal LM answering the same probes, judged by the same scorers.

Seed 003 compared DiffusionGemma's accuracy with its autoregressive sibling (Gemma 4 26B-A4B) on the
scorable regimes. Here any transformers causal LM in a local directory (``local_files_only``: nothing is
downloaded) answers every probe once, greedily (no seeds: greedy decoding has no randomness), with the
same prompt encoding (``prompting``), the same token budget and the same scorers as the study, so the
two accuracies differ only by the model.

``run_baseline`` writes ``DIR/baseline.json`` and reuses it when a rerun asks for the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from canvaslab.capture.commit_trace import read_traces
from canvaslab.choices import checked_path
from canvaslab.environment import environment_fingerprint
from canvaslab.errors import CanvaslabError
from canvaslab.io import read_json, write_json_atomic
from canvaslab.models.loading import progress_bars_only_on_a_terminal, resolve_device, resolve_dtype
from canvaslab.models.registry import find_model, model_folder
from canvaslab.models.weights import folder_fingerprint
from canvaslab.scoring.probes import Probe, load_probe_suite, score
from canvaslab.scoring.prompting import encode_prompt, uses_chat_template

BASELINE_FILE = "baseline.json"


def check_baseline_path(path: str | Path) -> Path:
    """Fail early (before a long study) when ``path`` cannot be a local transformers checkpoint.

    Where no such folder exists, an installed model's name means that model if it is a causal LM, and the
    baseline its package names if it is a diffusion model (``mini``: ``mini-ar``)."""
    path = checked_path("--baseline", path).expanduser()
    if not path.exists():
        package = find_model(str(path))
        if package is not None and package.kind == "causal":
            path = package.folder
        elif package is not None:
            if package.baseline is None:
                raise CanvaslabError(f"--baseline {path}: the package of model {package.name!r} "
                                     f"({package.distribution}) names no baseline; give a checkpoint folder")
            path = model_folder(package.baseline)
    if not path.is_dir():
        raise CanvaslabError(f"--baseline {path}: not a directory (give a local transformers checkpoint folder)")
    if not (path / "config.json").is_file():
        raise CanvaslabError(f"--baseline {path}: no config.json, so not a transformers checkpoint")
    return path


def load_causal_lm(path: str | Path, *, device: str = "cpu", dtype: str = "auto"):
    """Model and tokenizer from a local folder; any loading problem is one line."""
    path = check_baseline_path(path)
    torch_dtype = "auto" if dtype == "auto" else resolve_dtype(dtype, torch.float32)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        with progress_bars_only_on_a_terminal():
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, local_files_only=True)
    except (OSError, ValueError, KeyError) as error:
        raise CanvaslabError(f"--baseline {path}: cannot load a causal LM ({str(error).splitlines()[0]})") from None
    if tokenizer.pad_token is None:  # batches are padded; a model without a pad token pads with EOS
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(resolve_device(device)).eval(), tokenizer


def run_baseline(path: str | Path, probes: Sequence[Probe], out_dir: str | Path, *, max_new_tokens: int,
                 device: str = "cpu", dtype: str = "auto", batch_size: int = 8,
                 progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Score the baseline on ``probes`` and write ``out_dir/baseline.json`` (reused when ``config`` matches)."""
    # the weights' fingerprint: a baseline.json of other weights at the same path (mini-ar retrained) is not reused
    config = {"model": str(Path(path).expanduser()), "weights": folder_fingerprint(check_baseline_path(path)),
              "probe_ids": [probe.probe_id for probe in probes], "max_new_tokens": max_new_tokens, "dtype": dtype,
              "decoding": "greedy"}
    target = Path(out_dir) / BASELINE_FILE
    if target.is_file() and read_json(target).get("config") == config:
        return read_json(target)
    model, tokenizer = load_causal_lm(path, device=device, dtype=dtype)
    answers = answer_probes(model, tokenizer, probes, max_new_tokens=max_new_tokens, batch_size=batch_size,
                            progress=progress)
    result = {
        "config": config,
        "chat_template": uses_chat_template(tokenizer),
        "environment": environment_fingerprint(None, model.device, baseline_model=type(model).__name__,
                                               baseline_dtype=str(model.dtype).removeprefix("torch.")),
        "regimes": accuracy_by_regime(answers),
        "generations": answers,
    }
    write_json_atomic(target, result)
    return result


def answer_probes(model, tokenizer, probes: Sequence[Probe], *, max_new_tokens: int, batch_size: int = 8,
                  progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Greedy answers in batches, each scored: ``[{probe_id, regime, text, correct}]`` in probe order."""
    if batch_size < 1:
        raise CanvaslabError(f"--batch-size must be at least 1, got {batch_size}")
    answers: list[dict[str, Any]] = []
    for start in range(0, len(probes), batch_size):
        batch = probes[start:start + batch_size]
        texts = greedy_texts(model, tokenizer, [encode_prompt(tokenizer, probe.prompt) for probe in batch],
                             max_new_tokens)
        answers.extend({"probe_id": probe.probe_id, "regime": probe.regime, "text": text,
                        "correct": score(probe, text)} for probe, text in zip(batch, texts))
        if progress is not None:
            progress(len(answers), len(probes))
    return answers


@torch.no_grad()
def greedy_texts(model, tokenizer, prompts: Sequence[list[int]], max_new_tokens: int) -> list[str]:
    """A batch through ``model.generate`` without sampling; the new tokens, decoded.

    Padding goes on the left, so every row's answer starts in the same column.
    """
    inputs = tokenizer.pad({"input_ids": list(prompts)}, padding=True, padding_side="left", return_tensors="pt")
    output = model.generate(**inputs.to(model.device), do_sample=False, max_new_tokens=max_new_tokens,
                            pad_token_id=tokenizer.pad_token_id)
    new_tokens = output[:, inputs["input_ids"].shape[1]:]
    return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)


def accuracy_by_regime(answers: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per regime: ``n`` answers, ``n_scored`` with a scorer, ``accuracy`` over those (null without one)."""
    regimes: dict[str, list[bool | None]] = {}
    for answer in answers:
        regimes.setdefault(answer["regime"], []).append(answer["correct"])
    return {name: _accuracy(values) for name, values in regimes.items()}


def _accuracy(values: list[bool | None]) -> dict[str, Any]:
    scored = [value for value in values if value is not None]
    return {"n": len(values), "n_scored": len(scored),
            "accuracy": sum(scored) / len(scored) if scored else None}


def baseline_summary(result: dict[str, Any]) -> dict[str, Any]:
    """What ``order_metrics.json`` keeps under ``baseline``: the model and its accuracy per regime."""
    return {"model": result["config"]["model"], "weights": result["config"].get("weights"), "file": BASELINE_FILE,
            "decoding": result["config"]["decoding"], "regimes": result["regimes"]}


def probes_of_traces(traces: str | Path, suite: str = "default") -> list[Probe]:
    """The probes a trace file's generations answered (in order of first appearance), looked up by id in
    ``suite``, so that a baseline can be scored on a study's probes without its store."""
    ids = list(dict.fromkeys((trace.regime, trace.prompt_id) for trace in read_traces(traces)))
    regimes = list(dict.fromkeys(regime for regime, _ in ids))
    known = {probe.probe_id: probe for probe in load_probe_suite(regimes, "all", suite=suite)}
    missing = [probe_id for _, probe_id in ids if probe_id not in known]
    if missing:
        raise CanvaslabError(f"{traces}: probe {missing[0]} is not in probe suite {suite!r} "
                             f"({len(missing)} of {len(ids)} missing); give the study's --suite")
    return [known[probe_id] for _, probe_id in ids]


def add_baseline(metrics: dict[str, Any], path: Path, probes: Sequence[Probe], out: Path, max_new_tokens: int,
                 device: str, dtype: str, batch_size: int,
                 progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Score the baseline, write baseline.json, and keep its accuracy in order_metrics.json under ``baseline``
    (the order study's ``baseline`` and ``canvaslab order-metrics --baseline``)."""
    result = run_baseline(path, probes, out, max_new_tokens=max_new_tokens, device=device, dtype=dtype,
                          batch_size=batch_size, progress=progress)
    metrics = {**metrics, "baseline": baseline_summary(result)}
    from canvaslab.studies.commit_order.study import METRICS_FILE

    write_json_atomic(Path(out) / METRICS_FILE, metrics)
    return metrics
