"""The commit-order study on the study engine: every (probe, seed) pair is a unit, generated with the tracer on.

Views written from the store: ``DIR/traces.jsonl`` (one line per generation, in plan order),
``DIR/order_metrics.json`` (``canvaslab.analysis.order_metrics`` plus the environment and the study's
settings under ``study``) and, on request, ``DIR/traces.parquet``.

Randomness. Every pair is its own request: a batch holds pairs of one seed, generate gets that seed and
per row the request key ``generation_id(probe, seed)``. With ``rng="row"`` every random draw of a pair
(canvas noise, sampling, renoising) comes from streams keyed by (seed, probe, canvas, step), so the
draws do not depend on which batch or row the pair landed in. What can still depend on the batch under
``mode="stock"``: numeric batch effects (the batch-size study) and the left padding of shorter prompts,
which shifts their positions (pairs are batched in order of prompt length to keep padding small).
``mode="invariant"`` is meant to remove both; ``batch_size=1`` always does. With ``rng="stock"`` the
batch shares torch's global stream, so a pair's trace depends on its batch.

Batches (the engine's groups) are cut from the plan's pairs, never from those still pending, so a resumed
study batches, and therefore traces, exactly as an uninterrupted one. The plan holds the prompts' token
ids (encoded once, by the tokenizer alone), the resolved generation settings, mode, rng and batch size:
a rerun with other choices into the same folder is refused (the engine's pre-registration).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

from canvaslab.analysis.order_metrics import compute_order_metrics
from canvaslab.environment import environment_fingerprint
from canvaslab.errors import CanvaslabError
from canvaslab.generation import generate
from canvaslab.generation.runner import resolve_generation
from canvaslab.io import write_json_atomic
from canvaslab.scoring.probes import CODE_REGIMES, Probe
from canvaslab.scoring.prompting import encode_prompt, uses_chat_template
from canvaslab.scoring.sandbox import require_isolation
from canvaslab.capture.commit_trace import GenerationTrace, export_parquet, read_traces, write_traces
from canvaslab.studies.engine import Study, run_study
from canvaslab.studies.engine.plan import frozen, sha256_of
from canvaslab.studies.commit_order.tracer import CommitTracer, ensure_traceable, generation_id

TRACES_FILE = "traces.jsonl"
METRICS_FILE = "order_metrics.json"
PARQUET_FILE = "traces.parquet"

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class PlannedGeneration:
    """One (probe, seed) pair and its encoded prompt."""

    probe: Probe
    seed: int
    prompt_ids: tuple[int, ...]

    @property
    def generation_id(self) -> str:
        return generation_id(self.probe.probe_id, self.seed)


class OrderStudy(Study):
    """A unit is one (probe, seed) generation; a group is one planned batch (one seed)."""

    name = "commit_order"
    unit_label = "generations"

    def __init__(self, model: dict[str, Any], probes: Sequence[Probe], seeds: Sequence[int], prompt_ids: dict,
                 generation: dict[str, Any], *, batch_size: int = 8, mode: str = "stock", rng: str = "row",
                 chat_template: bool = False, loaded=None):
        _check_arguments(probes, seeds, batch_size)
        self.model, self.probes, self.seeds = model, list(probes), list(seeds)
        self.prompt_ids = {pid: tuple(ids) for pid, ids in prompt_ids.items()}
        self.generation, self.batch_size, self.mode, self.rng = generation, batch_size, mode, rng
        self.chat_template, self.loaded = chat_template, loaded

    def __getstate__(self):
        return {**self.__dict__, "loaded": None}

    def plan(self) -> dict[str, Any]:
        return {"model": self.model, "generation": self.generation, "mode": self.mode, "rng": self.rng,
                "batch_size": self.batch_size, "seeds": self.seeds, "chat_template": self.chat_template,
                "probes": [{**asdict(p), "prompt_ids": list(self.prompt_ids[p.probe_id])} for p in self.probes]}

    def planned(self) -> list[PlannedGeneration]:
        return [PlannedGeneration(probe, seed, self.prompt_ids[probe.probe_id]) for seed in self.seeds
                for probe in self.probes]

    def units(self) -> list[str]:
        return [planned.generation_id for planned in self.planned()]

    @staticmethod
    def units_of_plan(plan: dict[str, Any], folder: Path | None = None) -> list[str]:
        return [generation_id(probe["probe_id"], seed) for seed in plan["seeds"] for probe in plan["probes"]]

    def groups(self) -> list[list[str]]:
        return [[planned.generation_id for planned in batch] for batch in batches(self.planned(), self.batch_size)]

    def prepare(self):
        from canvaslab.models import load_study_model

        loaded = self.loaded or load_study_model(self.model)
        ensure_traceable(loaded.model, self.mode)
        return loaded

    def worker_info(self, loaded) -> dict[str, Any]:
        return {"model_source": loaded.source,
                "environment": environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source,
                                                       mode=self.mode, rng=self.rng)}

    def run_group(self, loaded, group: list[str], todo: list[str]):
        """The whole planned batch is generated (its rows shape each other's numbers); ``todo``'s traces are kept."""
        planned = {p.generation_id: p for p in self.planned()}
        batch = [planned[unit] for unit in group]
        key = sha256_of(frozen(self.name, self.plan()))[:16]
        for trace in generate_traces(loaded, batch, mode=self.mode, rng=self.rng, settings=self.generation, key=key):
            if trace.generation_id in todo:
                yield trace.generation_id, trace.to_record()

    def write_views(self, folder, records, workers) -> dict[str, Any]:
        folder = Path(folder)
        order = [unit for group in self.groups() for unit in group]  # the order an uninterrupted run appended
        write_traces(folder / TRACES_FILE, [GenerationTrace.from_record(records[u]) for u in order if u in records])
        worker = next(iter(workers.values()), {})
        study = {**self.config, **self._settings(worker.get("model_source"))}
        return write_metrics(folder, worker.get("environment"), study, parquet=self.parquet,
                             n_bootstrap=self.n_bootstrap, bootstrap_seed=self.bootstrap_seed)

    # What the views need beyond the plan (set by run_order_study; not part of the study's identity).
    config: dict[str, Any] = {}
    parquet, n_bootstrap, bootstrap_seed = False, 1000, 0

    def _settings(self, model_source) -> dict[str, Any]:
        return {
            "study": "commit_order",
            "study_key": sha256_of(frozen(self.name, self.plan()))[:16],
            "model": model_source,
            "generation": self.generation,
            "mode": self.mode,
            "rng": self.rng,
            "batch_size": self.batch_size,
            "seeds": self.seeds,
            "regimes": list(dict.fromkeys(probe.regime for probe in self.probes)),
            "probe_ids": [probe.probe_id for probe in self.probes],
            "chat_template": self.chat_template,
            "n_generations_planned": len(self.probes) * len(self.seeds),
        }


def order_study_for(loaded, probes: Sequence[Probe], seeds: Sequence[int], *, model: dict[str, Any] | None = None,
                    batch_size: int = 8, mode: str = "stock", rng: str = "row",
                    generation: dict[str, Any] | None = None) -> OrderStudy:
    """The study of ``probes`` x ``seeds`` on ``loaded`` (its tokenizer encodes the prompts for the plan)."""
    _check_arguments(probes, seeds, batch_size)
    settings = resolve_generation(loaded.generation_defaults, generation)
    prompt_ids = {probe.probe_id: encode_prompt(loaded.tokenizer, probe.prompt) for probe in probes}
    if model is None:
        from canvaslab.studies.batch_size.study import model_plan

        model = model_plan(loaded)
    return OrderStudy(model, probes, seeds, prompt_ids, settings, batch_size=batch_size, mode=mode, rng=rng,
                      chat_template=uses_chat_template(loaded.tokenizer), loaded=loaded)


def run_order_study(
    loaded,
    probes: Sequence[Probe],
    seeds: Sequence[int],
    *,
    out_dir: str | Path,
    batch_size: int = 8,
    mode: str = "stock",
    rng: str = "row",
    generation: dict[str, Any] | None = None,
    progress: Progress | None = None,
    parquet: bool = False,
    n_bootstrap: int = 1000,
    bootstrap_seed: int = 0,
    config: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    **engine: Any,
) -> dict[str, Any]:
    """Generate what ``out_dir`` does not hold yet, then measure; returns ``order_metrics.json``'s content.

    ``progress(done, total, doing)`` counts finished generations. ``config`` (e.g. the command line's
    choices) is stored under ``study``; ``engine``: ``run_study``'s options (executor, retries, ...).
    """
    study = order_study_for(loaded, probes, seeds, model=model, batch_size=batch_size, mode=mode, rng=rng,
                            generation=generation)
    study.config, study.parquet = dict(config or {}), parquet
    study.n_bootstrap, study.bootstrap_seed = n_bootstrap, bootstrap_seed
    metrics, outcome = run_study(study, out_dir, progress=progress, **engine)
    metrics["outcome"] = {"ran": outcome.ran, "skipped": outcome.skipped, "failed": outcome.failed,
                         "by_others": outcome.by_others}
    return metrics


def _check_arguments(probes: Sequence[Probe], seeds: Sequence[int], batch_size: int) -> None:
    if not probes or not seeds:
        raise CanvaslabError("the order study needs at least one probe and one seed")
    if batch_size < 1:
        raise CanvaslabError(f"--batch-size must be at least 1, got {batch_size}")
    if len({probe.probe_id for probe in probes}) != len(probes):
        raise CanvaslabError("a probe is listed twice")
    if len(set(seeds)) != len(seeds) or any(seed < 0 for seed in seeds):
        raise CanvaslabError(f"seeds must be distinct and >= 0, got {list(seeds)}")
    if any(probe.regime in CODE_REGIMES for probe in probes):
        require_isolation()  # before any generation: code is scored only in the sandbox, which may be refused


def plan_generations(tokenizer, probes: Sequence[Probe], seeds: Sequence[int]) -> list[PlannedGeneration]:
    """Every (probe, seed) pair, seed-major, each prompt encoded once."""
    encoded = {probe.probe_id: tuple(encode_prompt(tokenizer, probe.prompt)) for probe in probes}
    return [PlannedGeneration(probe, seed, encoded[probe.probe_id]) for seed in seeds for probe in probes]


def batches(pending: Sequence[PlannedGeneration], batch_size: int) -> list[list[PlannedGeneration]]:
    """Batches of one seed each, prompts of similar length together (less left padding)."""
    result: list[list[PlannedGeneration]] = []
    for _, group in groupby(pending, key=lambda planned: planned.seed):
        ordered = sorted(group, key=lambda planned: (len(planned.prompt_ids), planned.generation_id))
        result.extend(ordered[start:start + batch_size] for start in range(0, len(ordered), batch_size))
    return result


def generate_traces(loaded, batch: Sequence[PlannedGeneration], *, mode: str, rng: str,
                    settings: dict[str, Any], key: str) -> list[GenerationTrace]:
    """Generate one batch (one seed) with the tracer on; one scored trace per row."""
    seed = batch[0].seed
    tracer = CommitTracer(loaded.model, mode)
    output = generate(loaded, [list(planned.prompt_ids) for planned in batch], seed=seed, rng=rng,
                      requests=[planned.generation_id for planned in batch], observers=[tracer],
                      generation=settings, mode=mode)
    return tracer.traces(output.rows, [planned.probe for planned in batch], [seed] * len(batch),
                         settings=output.settings, extra={"study_key": key})


def write_metrics(out_dir: Path, environment: dict[str, Any] | None, study: dict[str, Any], *, parquet: bool,
                  n_bootstrap: int, bootstrap_seed: int) -> dict[str, Any]:
    """``order_metrics.json`` from the whole trace file, with environment and settings; optional Parquet."""
    traces_path = out_dir / TRACES_FILE
    metrics = compute_order_metrics(traces_path, n_bootstrap=n_bootstrap, seed=bootstrap_seed)
    # regimes in the order asked for, not in the file's order (batches are sorted by prompt length)
    metrics["regimes"] = {name: metrics["regimes"][name] for name in study["regimes"] if name in metrics["regimes"]}
    metrics["study"] = study
    metrics["environment"] = environment
    write_json_atomic(out_dir / METRICS_FILE, metrics)
    if parquet:
        export_parquet(read_traces(traces_path), out_dir / PARQUET_FILE)
    return metrics
