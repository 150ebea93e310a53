"""Every study as a typed, frozen plan: construct it (checked at once), then ``run(out)``.

A plan's fields are the study command's options, with the same names (``--batch-sizes`` is ``batch_sizes``),
the same defaults and the same checks: a bad value raises ``CanvaslabError`` with the line the command prints,
before anything loads. ``run`` registers the plan in ``out`` (a rerun with the same folder resumes; another
plan there is refused), runs what the folder lacks on the chosen executor and returns ``Results``.

    >>> from canvaslab import BatchSizeStudy
    >>> results = BatchSizeStudy(model="tiny", batch_sizes=(1, 2, 3)).run(out="runs/batch")  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from canvaslab import choices
from canvaslab.api.models import check_model_options, model_record
from canvaslab.api.results import Results
from canvaslab.errors import CanvaslabError
from canvaslab.extras import require

Progress = Callable[[int, int, str], None]  # (done, total, what is running)
Folder = Union[str, Path]


def _set(plan, name: str, value) -> None:
    object.__setattr__(plan, name, value)  # normalising a frozen plan's field in __post_init__


def _folder(out: Optional[Folder]) -> Optional[Path]:
    return None if out is None else choices.writable_folder("--out", out)


def _generation(steps: Optional[int], max_new_tokens: Optional[int]) -> dict[str, Any]:
    return {"max_denoising_steps": steps, "max_new_tokens": max_new_tokens}


class _Plan:
    """What every plan shares: its fields as a dict, the engine's options checked, and ``run``."""

    def to_dict(self) -> dict[str, Any]:
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def run(self, out: Optional[Folder] = None, *, executor: str = "local", ray_address: Optional[str] = None,
            workers: Optional[int] = None, retries: int = 0, fresh: bool = False,
            progress: Optional[Progress] = None) -> Results:
        """Run (or resume) the study in ``out`` (None: a temporary folder, nothing kept but the summary).

        ``executor``: ``local`` (this process, one model) or ``ray`` (a model-holding worker per GPU or CPU;
        ``ray_address``, ``workers``); ``retries``: times a failed unit is retried; ``fresh``: start over,
        keeping the folder's old study under a new name; ``progress(done, total, doing)``."""
        choices.engine_options(executor, ray_address, workers, retries)
        engine = {"executor": executor, "ray_address": ray_address, "workers": workers, "retries": retries,
                  "fresh": bool(fresh)}
        return self._run(_folder(out), engine, progress)

    def _run(self, out: Optional[Path], engine: dict[str, Any], progress: Optional[Progress]) -> Results:
        raise NotImplementedError


def _checked_engine_run(study, out: Optional[Path], engine: dict[str, Any], progress, loaded_for) -> Results:
    """The study engine's run of ``study``: a folder holding another plan, or a link given with ``fresh``, is
    refused before the model loads."""
    from canvaslab.studies.engine import run_study
    from canvaslab.studies.engine.plan import check_fresh, check_registered

    if engine["fresh"]:
        check_fresh(out)
    else:
        check_registered(out, study.name, study.plan())
    if engine["executor"] == "local":
        study.loaded = loaded_for()
    else:  # Ray workers load their own model: the prompts are checked here by its tokenizer, before any work
        from canvaslab.models.loading import load_tokenizer

        study.loaded = None
        study.check_prompts(load_tokenizer(study.model["spec"]))
    summary, outcome = run_study(study, out, progress=progress, **engine)
    return Results.of_run(study.name, out, summary, outcome)


@dataclass(frozen=True)
class BatchSizeStudy(_Plan):
    """Does a row's generation depend on what shares its batch? Row ``row`` of batches of each size against the
    same prompt alone (B=1), compared byte for byte, module by module and pass by pass (``canvaslab batch-study``).

    ``prompts``: a count of built-in prompts (1-16), a prompt file (.txt: one per line; .jsonl: ``{"prompt"}``)
    or a sequence of prompt texts."""

    model: str = "tiny"
    prompts: Union[int, str, Path, Sequence[str]] = 3
    batch_sizes: Union[str, Sequence[int]] = (1, 2, 3, 4)
    fill: str = "copies"
    row: int = 0
    copy_prompt_cache: bool = True
    rng: str = "row"
    mode: str = "stock"
    seed: int = 0
    dtype: str = "auto"
    device: str = "cpu"
    layers: Optional[int] = None
    model_seed: int = 0
    steps: Optional[int] = None
    max_new_tokens: Optional[int] = None
    record_ops: bool = True
    repeat_control: str = "fresh-process"

    def __post_init__(self) -> None:
        check_model_options(self.model, self.dtype, self.layers, self.model_seed, self.steps, self.max_new_tokens,
                            device=self.device)
        _set(self, "batch_sizes", tuple(choices.batch_sizes(self.batch_sizes)))
        choices.one_of("--fill", self.fill, choices.FILLS)
        choices.whole_number("--row", self.row, 0)
        choices.one_of("--rng", self.rng, choices.RNGS)
        choices.one_of("--mode", self.mode, choices.MODES)
        choices.whole_number("--seed", self.seed, 0, choices.MAX_SEED)
        choices.one_of("--repeat-control", self.repeat_control, choices.REPEAT_CONTROLS)
        if isinstance(self.prompts, int) and not isinstance(self.prompts, bool):
            choices.builtin_prompt_count(str(self.prompts))
        elif isinstance(self.prompts, str) and choices.builtin_prompt_count(self.prompts):
            _set(self, "prompts", int(self.prompts))
        elif isinstance(self.prompts, (list, tuple)):
            if not self.prompts or not all(isinstance(text, str) and text.strip() for text in self.prompts):
                raise CanvaslabError("prompts: give one or more non-empty prompt texts")
            for text in self.prompts:
                choices.unicode_text("prompts", text)
            _set(self, "prompts", tuple(self.prompts))
        elif not isinstance(self.prompts, (str, Path)):
            raise CanvaslabError(f"prompts {self.prompts!r}: give a count, a prompt file or prompt texts")
        from canvaslab.studies.batch_size.design import check_row

        check_row(self.row, self.batch_sizes, self.mode)

    def prompt_list(self):
        """The prompts as the study records them (ids and texts)."""
        from canvaslab.prompts import Prompt, builtin_prompts, load_prompt_file

        if isinstance(self.prompts, int):  # a trained model is asked questions it answers in words
            return builtin_prompts(self.prompts, questions=not _is_preset(self.model))
        if isinstance(self.prompts, tuple):
            return [Prompt(f"text-{i}", text) for i, text in enumerate(self.prompts)]
        return load_prompt_file(self.prompts)

    def _study(self):
        from canvaslab.studies.batch_size import BatchStudySettings
        from canvaslab.studies.batch_size.study import BatchSizeStudy as Units

        settings = BatchStudySettings(
            batch_sizes=list(self.batch_sizes), fill=self.fill, copy_prompt_cache=self.copy_prompt_cache,
            rng=self.rng, mode=self.mode, seed=self.seed, generation=_generation(self.steps, self.max_new_tokens),
            record_ops=self.record_ops, repeat_control=self.repeat_control, row=self.row)
        return Units(model_record(self.model, self.dtype, self.device, self.layers, self.model_seed),
                     self.prompt_list(), settings)

    def _run(self, out, engine, progress) -> Results:
        from canvaslab.models import load_model

        return _checked_engine_run(self._study(), out, engine, progress, lambda: load_model(
            self.model, dtype=self.dtype, device=self.device, layers=self.layers, seed=self.model_seed))


@dataclass(frozen=True)
class OpScan(_Plan):
    """Each batch-sensitive op at the model's real shapes over a grid of batch sizes: which batch sizes give
    B=1's bits (``canvaslab op-scan``). ``mode``: stock, rowwise, invariant, or both (stock and invariant);
    ``layers``: layers to build (the scan uses layer 0's ops, so one is enough)."""

    model: str = "tiny"
    mode: str = "both"
    batch_sizes: Union[str, Sequence[int]] = (1, 2, 3, 4, 5, 8, 16, 32)
    dtype: str = "auto"
    device: str = "cpu"
    layers: Optional[int] = None
    model_seed: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        check_model_options(self.model, self.dtype, self.layers, self.model_seed, device=self.device)
        choices.one_of("--mode", self.mode, choices.SCAN_MODES)
        _set(self, "batch_sizes", tuple(choices.batch_sizes(self.batch_sizes)))
        choices.whole_number("--seed", self.seed, 0, choices.MAX_SEED)

    def _run(self, out, engine, progress) -> Results:
        from canvaslab.models import load_model
        from canvaslab.studies.op_scan import OpScanStudy

        modes = ["stock", "invariant"] if self.mode == "both" else [self.mode]
        layers = self.layers or 1
        study = OpScanStudy(model_record(self.model, self.dtype, self.device, layers, self.model_seed), modes,
                            list(self.batch_sizes), self.seed)
        return _checked_engine_run(study, out, engine, progress, lambda: load_model(
            self.model, dtype=self.dtype, device=self.device, layers=layers, seed=self.model_seed))


@dataclass(frozen=True)
class CommitOrderStudy(_Plan):
    """In what order does the sampler commit canvas positions, per regime, and does its confidence predict
    correctness? (``canvaslab order-study``). Every (probe, seed) pair of the chosen regimes is generated with
    the commit tracer on, then measured. ``regimes``: None is the suite's own; ``baseline``: a local
    autoregressive checkpoint (or ``mini``) whose accuracy on the same probes is added."""

    BASELINE_PHASE = "baseline"  # what ``progress`` is told while the baseline scores the probes (not a field)

    model: str = "tiny"
    regimes: Union[None, str, Sequence[str]] = None
    seeds: int = 5
    prompts_per_regime: int = 20
    split: str = "confirmatory"
    suite: str = "default"
    batch_size: int = 8
    baseline: Optional[Folder] = None
    parquet: bool = False
    mode: str = "stock"
    rng: str = "row"
    steps: Optional[int] = None
    max_new_tokens: Optional[int] = None
    dtype: str = "auto"
    device: str = "cpu"
    layers: Optional[int] = None
    model_seed: int = 0
    bootstrap: int = 1000

    def __post_init__(self) -> None:
        require("analysis", "the commit-order study")  # its measures: scipy's tau, scikit-learn's AUROC
        check_model_options(self.model, self.dtype, self.layers, self.model_seed, self.steps, self.max_new_tokens,
                            device=self.device)
        choices.one_of("--suite", self.suite, choices.SUITES)
        _set(self, "regimes", choices.regimes(self.regimes, self.suite))
        choices.whole_number("--seeds", self.seeds, 1)
        choices.whole_number("--prompts-per-regime", self.prompts_per_regime, 1)
        choices.one_of("--split", self.split, choices.SPLITS)
        choices.whole_number("--batch-size", self.batch_size, 1)
        choices.one_of("--mode", self.mode, choices.MODES)
        choices.one_of("--rng", self.rng, choices.RNGS)
        choices.whole_number("--bootstrap", self.bootstrap, 0)
        if self.baseline is not None:
            from canvaslab.studies.commit_order.baseline import check_baseline_path

            check_baseline_path(Path(self.baseline))

    def _run(self, out, engine, progress) -> Results:
        if out is None:  # the study's traces are its result: a temporary folder keeps the summary only
            import tempfile

            with tempfile.TemporaryDirectory(prefix="canvaslab-order-") as scratch:
                return dataclasses.replace(self._run(Path(scratch), engine, progress), folder=None)
        from canvaslab.models import load_model
        from canvaslab.scoring.probes import load_probe_suite
        from canvaslab.studies.commit_order.study import OrderStudy, run_order_study
        from canvaslab.studies.engine.plan import check_registered_study

        check_registered_study(out, OrderStudy.name)  # the whole plan needs the tokenizer: checked after loading
        probes = load_probe_suite(list(self.regimes), self.split, self.prompts_per_regime, suite=self.suite)
        loaded = load_model(self.model, dtype=self.dtype, device=self.device, layers=self.layers,
                            seed=self.model_seed)
        config = {"command": {"model": self.model, "split": self.split, "suite": self.suite,
                              "prompts_per_regime": self.prompts_per_regime, "dtype": self.dtype,
                              "device": str(loaded.device), "layers": self.layers, "model_seed": self.model_seed}}
        metrics = run_order_study(
            loaded, probes, list(range(self.seeds)), out_dir=out, batch_size=self.batch_size, mode=self.mode,
            rng=self.rng, generation=_generation(self.steps, self.max_new_tokens), parquet=self.parquet,
            n_bootstrap=self.bootstrap, progress=progress, config=config,
            model=model_record(self.model, self.dtype, self.device, self.layers, self.model_seed), **engine)
        outcome = metrics.pop("outcome")
        if self.baseline is not None:
            del loaded
            metrics = self._add_baseline(metrics, probes, out, progress)
        return Results.of_run("commit_order", out, metrics, outcome)

    def _add_baseline(self, metrics, probes, out: Path, progress) -> dict[str, Any]:
        import gc

        import torch

        from canvaslab.studies.commit_order.baseline import add_baseline, check_baseline_path

        gc.collect()  # two models need not share the GPU
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return add_baseline(metrics, check_baseline_path(Path(self.baseline)), probes, out,
                            metrics["study"]["generation"]["max_new_tokens"], self.device, self.dtype,
                            self.batch_size, progress=None if progress is None else
                            lambda done, total: progress(done, total, self.BASELINE_PHASE))


@dataclass(frozen=True)
class NoiseStudy(_Plan):
    """Do unused tokens in the starting noise act as hidden mask symbols? The pre-registered equivalence study
    (``canvaslab noise-study plan`` and ``run``). ``register(out)`` writes the design and its hash before anything
    runs; ``run(out)`` registers it if the folder has none, then runs (or resumes) it. The execution options
    (``device``, ``dtype``, ``batch_size``, ``mode``, ``limit``) are not part of the registered design."""

    model: str = "tiny"
    design: str = "default"
    margin: Optional[float] = None
    token_counts: Optional[Folder] = None
    suite: str = "mini"
    pilot: Optional[Folder] = None
    seed: int = 0
    layers: Optional[int] = None
    model_seed: int = 0
    device: str = "cpu"
    dtype: str = "auto"
    batch_size: int = choices.NOISE_BATCH_SIZE
    mode: str = "stock"
    limit: Optional[int] = None
    max_prompts: Optional[int] = None

    def __post_init__(self) -> None:
        require("analysis", "the unused-token study")  # its equivalence test and power: scipy
        check_model_options(self.model, self.dtype, self.layers, self.model_seed, device=self.device)
        choices.one_of("--design", self.design, choices.NOISE_DESIGNS)
        if self.margin is not None:
            choices.positive_number("--margin", self.margin)
        if self.token_counts is not None:
            choices.readable_file("--token-counts", self.token_counts, (".npy",))
        choices.one_of("--suite", self.suite, choices.SUITES)
        if (self.design in choices.NOISE_CONFIRMATORY_DESIGNS) != (self.pilot is not None):
            raise CanvaslabError("--pilot DIR (a finished pilot) is needed by --design confirmatory and "
                                 "graded-confirmatory, and only by them")
        if self.max_prompts is not None and self.design != "graded-confirmatory":
            raise CanvaslabError("--max-prompts is for --design graded-confirmatory only")
        choices.optional_whole_number("--max-prompts", self.max_prompts, 5)
        if self.pilot is not None:
            choices.existing_folder("--pilot", self.pilot)
        choices.whole_number("--seed", self.seed, 0, choices.MAX_SEED)
        choices.whole_number("--batch-size", self.batch_size, 1)
        choices.one_of("--mode", self.mode, choices.MODES)
        choices.optional_whole_number("--limit", self.limit, 1)

    def register(self, out: Folder) -> "Registration":
        """Write ``out/plan.json`` and ``out/plan.sha256`` (``canvaslab noise-study plan``). A folder holding
        results of a registered plan is refused: a plan with results is never replaced."""
        return self._register(Path(out), replace=True)

    def _register(self, out: Path, replace: bool) -> "Registration":
        from canvaslab.studies.unused_tokens.plan import register_plan

        plan, digest = register_plan(out, self.model, design=self.design, margin=self.margin,
                                     token_counts=self.token_counts, seed=self.seed, layers=self.layers,
                                     model_seed=self.model_seed, replace=replace, suite=self.suite,
                                     pilot=self.pilot, device=self.device, dtype=self.dtype,
                                     max_prompts=self.max_prompts)
        return Registration(digest, plan.factors.n_conditions, plan.token_pools.rare_source["kind"], out.resolve(),
                            _first_pass_lines(plan))

    @classmethod
    def run_registered(cls, folder: Folder, *, device: str = "cpu", dtype: str = "auto",
                       batch_size: int = choices.NOISE_BATCH_SIZE, mode: str = "stock", limit: Optional[int] = None,
                       executor: str = "local", ray_address: Optional[str] = None, workers: Optional[int] = None,
                       retries: int = 0, fresh: bool = False, progress: Optional[Progress] = None) -> Results:
        """Run (or resume) whatever plan ``folder`` holds, however it was registered (``canvaslab noise-study
        run DIR``); ``fresh`` starts that plan over, keeping the old results under a new name."""
        choices.one_of("--dtype", dtype, choices.DTYPES)
        choices.whole_number("--batch-size", batch_size, 1)
        choices.one_of("--mode", mode, choices.MODES)
        choices.optional_whole_number("--limit", limit, 1)
        choices.engine_options(executor, ray_address, workers, retries)
        choices.existing_writable_folder("DIRECTORY", folder)
        require("analysis", "the unused-token study")
        from canvaslab.studies.unused_tokens.noise_study import run_noise_study

        report = run_noise_study(Path(folder), device=device, dtype=dtype, batch_size=batch_size, mode=mode,
                                 limit=limit, progress=progress, executor=executor, ray_address=ray_address,
                                 workers=workers, retries=retries, fresh=bool(fresh))
        outcome = report.pop("outcome")
        return Results.of_run("unused_tokens", Path(folder), report, outcome)

    def _run(self, out, engine, progress) -> Results:
        if out is None:
            raise CanvaslabError("the noise study runs in a folder that holds its registered plan: give out=DIR")
        out.mkdir(parents=True, exist_ok=True)
        self._register(out, replace=False)  # this plan, registered before anything runs; another one is refused
        return self.run_registered(out, device=self.device, dtype=self.dtype, batch_size=self.batch_size,
                                   mode=self.mode, limit=self.limit, progress=progress, **engine)


@dataclass(frozen=True)
class Registration:
    """A registered noise-study plan: its sha256, its number of conditions, the kind of its rare-token control."""

    sha256: str
    conditions: int
    rare_control: str
    folder: Path
    first_pass_lines: tuple[str, ...] = ()  # /3 plans: prompts, content positions, power


def _first_pass_lines(plan) -> tuple[str, ...]:
    design = plan.first_pass
    if design is None:
        return ()
    shares = list(design.baseline_special_share.values())
    lines = [f"{len(plan.factors.prompts)} prompts from suite {design.suite!r} ({design.split}), "
             f"{'with' if design.chat_template else 'without'} the chat template; {len(design.excluded_prompts)} "
             "left out for too few content positions",
             f"the no-plant first pass predicts a special or unused token at {sum(shares) / len(shares):.0%} of canvas "
             "positions (mean over prompts and seeds); plants go only where it predicts content"]
    if plan.graded is not None:
        from canvaslab.studies.unused_tokens.graded_plan import graded_summary

        return (*lines, *graded_summary(plan))
    if design.power is not None:
        power = design.power
        needed = "more than 100,000" if power["prompts_needed"] is None else power["prompts_needed"]
        lines.append(f"sized from the pilot: planning sd {power['planning_sd']:.3f} nats, {needed} "
                     f"prompts needed, {power['prompts_planned']} planned: TOST power "
                     f"{power['tost_power_per_comparison']:.2f} per comparison, joint >= "
                     f"{power['joint_power_lower_bound']:.2f}")
    return tuple(lines)


def _is_preset(model) -> bool:
    """A random-weight preset (``tiny``, ``real-shapes``), whose synthetic tokenizer knows plain words only."""
    return isinstance(model, str) and model in choices.PRESET_NAMES
