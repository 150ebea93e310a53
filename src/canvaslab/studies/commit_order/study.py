"""Run the commit-order study: every (probe, seed) pair generated with the tracer on, then the measures.

Writes ``DIR/traces.jsonl`` (one line per generation, appended and fsynced as each batch finishes),
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

Resume. A rerun with the same ``out_dir`` skips the generation ids already in ``traces.jsonl`` (a line
cut short by a kill is dropped and redone). Every trace carries ``study_key``, a hash of the model and
of the settings that shape a generation: a rerun with other settings, or a file holding generations
this run does not plan, is refused instead of mixed into one result.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

from canvaslab.analysis.order_metrics import compute_order_metrics
from canvaslab.environment import environment_fingerprint
from canvaslab.errors import CanvaslabError
from canvaslab.generation import generate
from canvaslab.generation.runner import resolve_generation
from canvaslab.io import write_json_atomic
from canvaslab.studies.commit_order.probes import CODE_REGIMES, Probe
from canvaslab.studies.commit_order.prompting import encode_prompt, uses_chat_template
from canvaslab.studies.commit_order.sandbox import require_isolation
from canvaslab.capture.commit_trace import GenerationTrace, append_trace, export_parquet, read_traces
from canvaslab.studies.commit_order.tracer import CommitTracer, ensure_traceable, generation_id

TRACES_FILE = "traces.jsonl"
METRICS_FILE = "order_metrics.json"
PARQUET_FILE = "traces.parquet"

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class PlannedGeneration:
    """One (probe, seed) pair and its encoded prompt."""

    probe: Probe
    seed: int
    prompt_ids: tuple[int, ...]

    @property
    def generation_id(self) -> str:
        return generation_id(self.probe.probe_id, self.seed)


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
) -> dict[str, Any]:
    """Generate what ``out_dir`` does not hold yet, then measure; returns ``order_metrics.json``'s content.

    ``progress(done, total)`` is called once before the first batch and after every appended trace.
    ``config`` (e.g. the command line's choices) is stored under ``study``.
    """
    _check_arguments(probes, seeds, batch_size)
    ensure_traceable(loaded.model)
    out_dir = Path(out_dir)
    settings = resolve_generation(loaded.generation_defaults, generation)
    key = study_key(loaded, settings, mode, rng)
    plan = plan_generations(loaded.tokenizer, probes, seeds)
    traces_path = out_dir / TRACES_FILE
    done = finished_generations(traces_path, key, {planned.generation_id for planned in plan})
    pending = [planned for planned in plan if planned.generation_id not in done]
    notify = progress or (lambda finished, total: None)
    notify(len(done), len(plan))
    for batch in batches(pending, batch_size):
        for trace in generate_traces(loaded, batch, mode=mode, rng=rng, settings=settings, key=key):
            append_trace(traces_path, trace)
            done.add(trace.generation_id)
            notify(len(done), len(plan))
    study = {**(config or {}), **_study_settings(loaded, probes, seeds, settings, mode, rng, batch_size, key)}
    return write_metrics(out_dir, loaded, study, parquet=parquet, n_bootstrap=n_bootstrap,
                         bootstrap_seed=bootstrap_seed)


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


def study_key(loaded, settings: dict[str, Any], mode: str, rng: str) -> str:
    """A hash of what shapes a generation: the model, its dtype, the generation settings, mode and rng."""
    material = {"model": loaded.source, "dtype": str(loaded.model.dtype), "generation": settings,
                "mode": mode, "rng": rng}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:16]


def plan_generations(tokenizer, probes: Sequence[Probe], seeds: Sequence[int]) -> list[PlannedGeneration]:
    """Every (probe, seed) pair, seed-major, each prompt encoded once."""
    encoded = {probe.probe_id: tuple(encode_prompt(tokenizer, probe.prompt)) for probe in probes}
    return [PlannedGeneration(probe, seed, encoded[probe.probe_id]) for seed in seeds for probe in probes]


def finished_generations(traces_path: Path, key: str, planned: set[str]) -> set[str]:
    """The generation ids already in the trace file, after checking they belong to this study."""
    if not traces_path.exists() or traces_path.stat().st_size == 0:
        return set()
    done: set[str] = set()
    for trace in read_traces(traces_path):
        if trace.extra.get("study_key") != key:
            raise CanvaslabError(
                f"{traces_path} holds generations made with other settings (generation {trace.generation_id!r}: "
                f"study_key {trace.extra.get('study_key')!r}, this run {key!r}); use another --out"
            )
        if trace.generation_id not in planned:
            raise CanvaslabError(
                f"{traces_path} holds generation {trace.generation_id!r}, which this run does not plan "
                "(other regimes, seeds, prompts or split); use the same choices or another --out"
            )
        done.add(trace.generation_id)
    return done


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
    tracer = CommitTracer(loaded.model)
    output = generate(loaded, [list(planned.prompt_ids) for planned in batch], seed=seed, rng=rng,
                      requests=[planned.generation_id for planned in batch], observers=[tracer],
                      generation=settings, mode=mode)
    return tracer.traces(output.rows, [planned.probe for planned in batch], [seed] * len(batch),
                         settings=output.settings, extra={"study_key": key})


def _study_settings(loaded, probes: Sequence[Probe], seeds: Sequence[int], settings: dict[str, Any],
                    mode: str, rng: str, batch_size: int, key: str) -> dict[str, Any]:
    return {
        "study": "commit_order",
        "study_key": key,
        "model": loaded.source,
        "generation": settings,
        "mode": mode,
        "rng": rng,
        "batch_size": batch_size,
        "seeds": list(seeds),
        "regimes": list(dict.fromkeys(probe.regime for probe in probes)),
        "probe_ids": [probe.probe_id for probe in probes],
        "chat_template": uses_chat_template(loaded.tokenizer),
        "n_generations_planned": len(probes) * len(seeds),
    }


def write_metrics(out_dir: Path, loaded, study: dict[str, Any], *, parquet: bool, n_bootstrap: int,
                  bootstrap_seed: int) -> dict[str, Any]:
    """``order_metrics.json`` from the whole trace file, with environment and settings; optional Parquet."""
    traces_path = out_dir / TRACES_FILE
    metrics = compute_order_metrics(traces_path, n_bootstrap=n_bootstrap, seed=bootstrap_seed)
    # regimes in the order asked for, not in the file's order (batches are sorted by prompt length)
    metrics["regimes"] = {name: metrics["regimes"][name] for name in study["regimes"] if name in metrics["regimes"]}
    metrics["study"] = study
    metrics["environment"] = environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source,
                                                     mode=study["mode"], rng=study["rng"])
    write_json_atomic(out_dir / METRICS_FILE, metrics)
    if parquet:
        export_parquet(read_traces(traces_path), out_dir / PARQUET_FILE)
    return metrics
