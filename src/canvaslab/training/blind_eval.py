"""Evaluating a `mini` release on the blind test set: once, on the registered set, recorded.

The set (``tasks.blind``) is registered by its sha256 in ``blind_set.json``, committed before any model saw it.
An evaluation regenerates the set and refuses to start when its hash differs from the registered one (the
generator changed: the changed set is a new set, with a registration of its own). A record file lists each
release evaluated (``canvaslab-mini 1.1.0``) and where its result lies; a release already in it is refused,
unless the caller says the run is a re-run, which the record then marks as one. Scores are k/n per task with a
Wilson interval, printed through the analysis layer's validity rules (no interval from fewer than 5 right or 5
wrong answers; a task every item of which gets the same score is flagged).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


from canvaslab.analysis import validity
from canvaslab.errors import CanvaslabError
from canvaslab.io import read_json, write_json_atomic
from canvaslab.training.evaluate import judge
from canvaslab.training.tasks import blind
from canvaslab.training.tasks.base import Example

CONFIDENCE = 0.95


def checked_set(registration: dict[str, Any]) -> list[Example]:
    """The blind set regenerated from its registration, refused when its sha256 is not the registered one or when
    an item now reaches a training or held-out template (``blind.reaching_items``)."""
    if registration.get("generator_version") != blind.GENERATOR_VERSION:
        raise CanvaslabError(f"blind set: registered for generator {registration.get('generator_version')!r}, this is "
                             f"{blind.GENERATOR_VERSION!r}; a changed generator needs a new registration, committed "
                             "before any evaluation")
    found = blind.set_sha256(registration["per_task"], registration["seed"])
    if found != registration["sha256"]:
        raise CanvaslabError(f"blind set: the regenerated set's sha256 {found[:12]}... is not the registered "
                             f"{registration['sha256'][:12]}...; the generator changed: refusing to evaluate")
    reaching = blind.reaching_items(registration["per_task"], registration["seed"])
    if reaching:
        raise CanvaslabError(f"blind set: {len(reaching)} item(s) now reach a training or held-out template (first: "
                             f"{reaching[0]!r}): the set is no longer blind; refusing to evaluate")
    return blind.blind_examples(registration["per_task"], registration["seed"])


def read_record(path: Path) -> dict[str, Any]:
    """The record of evaluations (empty where the file does not exist yet)."""
    if not path.exists():
        return {"evaluations": []}
    record = read_json(path)
    if not isinstance(record, dict) or not isinstance(record.get("evaluations"), list):
        raise CanvaslabError(f"{path}: not a blind-set record (no list 'evaluations')")
    return record


def check_release(record: dict[str, Any], release: str, sha256: str, rerun: bool) -> None:
    """Refuse a release already evaluated on this set, unless ``rerun``."""
    done = [e for e in record["evaluations"] if e["release"] == release and e["set_sha256"] == sha256]
    if done and not rerun:
        raise CanvaslabError(f"{release} was already evaluated on the blind set ({done[0]['result']}, "
                             f"{done[0]['date']}): one evaluation per release; pass --rerun to evaluate it again, "
                             "recorded as a re-run")
    if rerun and not done:
        raise CanvaslabError(f"--rerun: {release} has no evaluation on the blind set in the record to run again")


def add_to_record(path: Path, release: str, sha256: str, result: str, rerun: bool) -> dict[str, Any]:
    """Append one evaluation to the record file and write it."""
    record = read_record(path)
    record["evaluations"].append({
        "release": release, "set_sha256": sha256, "result": result, "rerun": rerun,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
    write_json_atomic(path, record)
    return record


def wilson(k: int, n: int) -> list[float]:
    from scipy.stats import binomtest  # lazily: the set itself needs no scipy (the ``analysis`` extra)

    interval = binomtest(k, n).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return [float(interval.low), float(interval.high)]


def task_score(scores: Sequence[bool]) -> dict[str, Any]:
    """k/n, the share, its Wilson interval and the validity ruling (what may be printed of them)."""
    n, k = len(scores), sum(bool(s) for s in scores)
    right_is_minority = k < n - k
    support = validity.Support(generations=n, clusters=n, minority=min(k, n - k),
                               minority_name="right answer" if right_is_minority else "wrong answer",
                               zero_variance=k in (0, n))
    ruling = validity.rule(support)
    return {"k": k, "n": n, "accuracy": k / n if n else None, "wilson_95": wilson(k, n) if n else None,
            "ruling": ruling.to_dict(), "support": {"items": n, "minority": support.minority,
                                                    "minority_name": support.minority_name}}


def score_text(cell: dict[str, Any]) -> str:
    """``k/n (share [low, high])`` as the validity rules allow, with their flags."""
    ruling = validity.Ruling.from_dict(cell["ruling"])
    value = validity.format_value(cell["accuracy"], cell["wilson_95"], ruling, digits=2)
    return f"{cell['k']}/{cell['n']} ({value}){validity.flag_text(ruling)}"


def evaluate(examples: Sequence[Example], answer: Callable[[list[Example]], list[dict]]) -> dict[str, Any]:
    """Every item answered (one call per task) and scored by its checker: per-task scores and every answer."""
    summary, rows = {}, []
    for task in blind.BLIND_TASKS:
        items = [e for e in examples if e.task == task]
        answers = answer(items)
        scores = [bool(judge(e, a["text"])) for e, a in zip(items, answers)]
        summary[task] = task_score(scores)
        rows += [{"task": e.task, "key": e.key, "prompt": e.prompt, **a, "score": s}
                 for e, a, s in zip(items, answers, scores)]
    return {"summary": summary, "answers": rows}


def markdown(result: dict[str, Any]) -> str:
    """The per-task table of one evaluation."""
    lines = [f"| task | {result['release']} |", "| --- | --- |"]
    lines += [f"| {task} | {score_text(cell)} |" for task, cell in result["summary"].items()]
    return "\n".join(lines) + "\n"


def answerer(package, device: str, dtype: str, batch_size: int) -> tuple[Callable, dict[str, Any], dict[str, Any]]:
    """A function from examples to answers for the model (loaded once), how it generates, and the environment."""
    import torch

    from canvaslab.environment import environment_fingerprint

    if package.kind == "diffusion":
        from canvaslab.models import load_model
        from canvaslab.training.evaluate import answer_diffusion
        from canvaslab.training.run import MINI_GENERATION

        loaded = load_model(str(package.folder), device=device, dtype=dtype)
        return (lambda items: answer_diffusion(loaded, items, batch_size=batch_size, seed=0),
                {"sampler": "the checkpoint's own (entropy bound)", "seed": 0, **MINI_GENERATION},
                environment_fingerprint(loaded.model, loaded.device))
    from transformers import Gemma4ForCausalLM

    from canvaslab.training.evaluate import answer_causal
    from canvaslab.training.run import load_tokenizer

    tokenizer = load_tokenizer(package.folder)
    causal = Gemma4ForCausalLM.from_pretrained(package.folder, dtype=getattr(torch, dtype)).to(device).eval()
    return (lambda items: answer_causal(causal, tokenizer, items, max_new_tokens=256, batch_size=batch_size),
            {"sampler": "greedy", "max_new_tokens": 256}, environment_fingerprint(device=torch.device(device)))


def _relative(path: Path, start: Path) -> str:
    try:
        return str(path.resolve().relative_to(start.resolve()))
    except ValueError:
        return str(path.resolve())


def run_release(package, examples: Sequence[Example], registration: dict[str, Any], out: Path, record: Path, *,
                rerun: bool, device: str, dtype: str, batch_size: int) -> str:
    """Evaluate the release, write ``out/blind_<model>.json`` and its table with their manifest, and add the
    evaluation to the record; the table."""
    import time

    from canvaslab.environment import record_result

    started = time.perf_counter()
    answer, generation, environment = answerer(package, device, dtype, batch_size)
    result = {"release": package.distribution, "model": package.name, "kind": package.kind, "rerun": rerun,
              "registration": registration, "device": device, "dtype": dtype, "batch_size": batch_size,
              "generation": generation, **evaluate(examples, answer),
              "seconds": round(time.perf_counter() - started, 1), "environment": environment}
    out.mkdir(parents=True, exist_ok=True)
    path = write_json_atomic(out / f"blind_{package.name}.json", result)
    table = markdown(result)
    (out / f"blind_{package.name}.md").write_text(table, encoding="utf-8")
    shows = (f"{package.distribution} on the registered blind test set ({registration['items']} items, sha256 "
             f"{registration['sha256'][:12]}...): per task k/n, Wilson 95% interval, validity ruling, every answer"
             + (" (a re-run)" if rerun else ""))
    record_result(path, shows=shows, environment=environment)
    record_result(out / f"blind_{package.name}.md", shows=f"the table of {path.name}", environment=environment)
    add_to_record(record, package.distribution, registration["sha256"], _relative(path, record.parent), rerun)
    record_result(record, shows="every evaluation on the blind set: release, set sha256, result file, date, re-run "
                  "or not (the command is the latest evaluation's)", environment=environment)
    return table
