"""``canvaslab noise-study plan|run``: the pre-registered unused-token noise study (seed 000).

``plan`` writes the design and its hash before anything runs; ``run`` runs (or resumes) a registered plan
and refuses one that changed after its first result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from canvaslab.cli import options
from canvaslab.cli.app import CanvaslabTyper, app

noise_app = CanvaslabTyper(help="The unused-token noise study: register a plan, then run it.", no_args_is_help=True)
app.add_typer(noise_app, name="noise-study")

from canvaslab.choices import NOISE_BATCH_SIZE, SUITES
from canvaslab.choices import NOISE_DESIGNS as DESIGNS
from canvaslab.terminal import printable


@noise_app.command("plan")
def plan_command(
    model: options.Model = "tiny",
    out: Annotated[Path, typer.Option("--out", help="folder for plan.json and plan.sha256; the run writes there too",
                                      callback=options.writable_folder)] = ...,
    design: Annotated[str, typer.Option("--design", help="schema /4 (controls graded by training frequency, float32, "
                                        "a later-pass arm; needs --token-counts): graded-pilot, graded-confirmatory "
                                        "(sized from --pilot), graded-smoke; schema /3 (first-pass outcomes): pilot, "
                                        "confirmatory (sized from --pilot), smoke (CPU tests); schema /2: default "
                                        "(2,304 conditions, GPU), small (CPU tests)",
                                        callback=options.one_of(DESIGNS))] = "default",
    margin: Annotated[Optional[float], typer.Option("--margin", help="equivalence margin of the primary outcome "
                                                    "(/3: 0.25 nats; /2: 0.05)",
                                                    callback=options.positive_number)] = None,
    suite: Annotated[str, typer.Option("--suite", help="/3 designs: the probe suite the prompts come from",
                                       callback=options.one_of(SUITES))] = "mini",
    pilot: Annotated[Optional[Path], typer.Option("--pilot", help="--design confirmatory: the finished pilot's "
                                                  "folder, whose variance sizes the design",
                                                  callback=options.existing_folder)] = None,
    device: options.Device = "cpu",
    dtype: options.Dtype = "auto",
    token_counts: Annotated[Optional[Path], typer.Option(
        "--token-counts", help="token_counts.npy of `canvaslab vocab-scan --corpus`: the rare control's least "
                               "frequent tokens", callback=options.readable_file((".npy",)))] = None,
    max_prompts: Annotated[Optional[int], typer.Option(
        "--max-prompts", help="--design graded-confirmatory: at most N prompts (what the run's time allows); the plan "
                              "states the power they give", callback=options.whole_number(5))] = None,
    seed: options.Seed = 0,
    layers: options.Layers = None,
    model_seed: options.ModelSeed = 0,
) -> None:
    """Register the design: factors, outcomes, analysis, margins, decision rule; prints its hash. The /3 designs
    run the model's first pass once per prompt and seed (on --device) to find where it writes content."""
    from rich.console import Console

    from canvaslab.api import NoiseStudy

    plan = NoiseStudy(model=model, design=design, margin=margin, token_counts=token_counts, suite=suite, pilot=pilot,
                      seed=seed, layers=layers, model_seed=model_seed, device=device, dtype=dtype, max_prompts=max_prompts)
    registration = plan.register(out)
    console = Console()
    console.print(f"{registration.conditions} conditions ({design}); rare-token control: "
                  f"{printable(registration.rare_control)}", markup=False, emoji=False, highlight=False)
    for line in registration.first_pass_lines:
        console.print(line, highlight=False)
    console.print(printable(f"wrote {out / 'plan.json'}"), markup=False, emoji=False, highlight=False)
    console.print(f"plan sha256 {registration.sha256}", highlight=False)


@noise_app.command("run")
def run_command(
    directory: Annotated[Path, typer.Argument(help="the folder `noise-study plan --out` wrote",
                                              callback=options.existing_writable_folder)],
    device: options.Device = "cpu",
    dtype: options.Dtype = "auto",
    batch_size: Annotated[int, typer.Option("--batch-size", help="rows of the safeguard's batched runs (36: one "
                                                                 "per prompt, seed and budget of the default design)",
                                            callback=options.whole_number(1))] = NOISE_BATCH_SIZE,
    mode: options.Mode = "stock",
    limit: Annotated[Optional[int], typer.Option("--limit", help="run at most N more conditions, then report",
                                                 callback=options.whole_number(1))] = None,
    executor: options.Executor = "local",
    ray_address: options.RayAddress = None,
    workers: options.Workers = None,
    retries: options.Retries = 0,
    fresh: Annotated[bool, typer.Option("--fresh/--no-fresh", help="start the registered plan over: the folder's results are "
                                                        "kept under a new name (DIR.1, ...), the plan copied back")] = False,
) -> None:
    """Run (or resume) a registered plan; stores every condition (DIR/store), writes noise_study.json, prints the effects."""
    engine = options.engine_options(executor, ray_address, workers, retries, fresh)  # before any import
    from canvaslab.api import NoiseStudy

    options.run_and_print("unused_tokens", lambda progress: NoiseStudy.run_registered(
        directory, device=device, dtype=dtype, batch_size=batch_size, mode=mode, limit=limit, progress=progress,
        **engine), directory)


@noise_app.command("report")
def report_command(
    directory: Annotated[Path, typer.Argument(help="a folder `noise-study run` has run in (finished or not)",
                                              callback=options.existing_writable_folder)],
    against: Annotated[Optional[Path], typer.Option(
        "--against", help="another run of the same registered plan (another device or mode): also print, per "
                          "outcome, how far the two differ condition by condition", callback=options.existing_folder)] = None,
    agreement_out: Annotated[Optional[Path], typer.Option(
        "--agreement-out", help="with --against: write the comparison as JSON here",
        callback=options.writable_file)] = None,
) -> None:
    """Analyse the conditions stored so far, running nothing: writes noise_study.json, prints the effects (with
    --against, also the per-condition agreement with another run of the plan)."""
    from rich.console import Console

    from canvaslab.reports.noise_study import noise_study_table
    from canvaslab.studies.unused_tokens.noise_study import REPORT_FILE, report_noise_study

    if agreement_out is not None and against is None:
        from canvaslab.errors import CanvaslabError

        raise CanvaslabError("--agreement-out needs --against DIR (the run to compare with)")
    agreement = _agreement(directory, against)
    report = report_noise_study(directory)
    console = Console()
    console.print(noise_study_table(report), crop=False)
    console.print(printable(f"wrote {directory / REPORT_FILE}"), markup=False, emoji=False, highlight=False)
    if not report["complete"]:
        console.print(f"{report['conditions_run']} of {report['conditions_total']} conditions stored: an interim "
                      "look, the plan's decision rule is for the whole design (`noise-study run` resumes it)",
                      highlight=False)
    if agreement is not None:
        from canvaslab.reports.noise_study import agreement_table

        console.print(agreement_table(agreement), crop=False)
        if agreement_out is not None:
            from canvaslab.io import write_json_atomic

            write_json_atomic(agreement_out, agreement)
            console.print(printable(f"wrote {agreement_out}"), markup=False, emoji=False, highlight=False)


def _agreement(directory: Path, against: Optional[Path]):
    """The per-condition comparison with ``against`` (checked before anything is written), or None."""
    if against is None:
        return None
    from canvaslab.studies.unused_tokens.agreement import compare_runs

    return compare_runs(directory, against)

