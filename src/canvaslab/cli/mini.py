"""``canvaslab mini train`` (train `mini` and its AR sibling), ``canvaslab mini passages`` (cut the
assets corpus into the prose passages the training mixture uses), ``canvaslab mini distill`` (a teacher's prose
answers for training) and ``canvaslab mini card`` (a run's model card, again, from its files)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from canvaslab.cli import options
from canvaslab.cli.app import CanvaslabTyper, app
from canvaslab.errors import CanvaslabError
from canvaslab.extras import require
from canvaslab.io import check_names
from canvaslab.terminal import printable
from canvaslab.training.recipe import SHIPPED
from canvaslab.training.tasks import AnswerStyle, check_data, parse_shares

mini_app = CanvaslabTyper(help="the trained miniature DiffusionGemma: prepare data, train, evaluate", no_args_is_help=True)
app.add_typer(mini_app, name="mini")


@mini_app.command("passages")
def passages(
    corpus: Path = typer.Option(..., "--corpus", help="the corpus from `canvaslab assets corpus`"),
    out: Path = typer.Option(..., "--out", help="passage file to write (one passage per line)"),
) -> None:
    """Cut the corpus's narrative sources (Jane Austen, State of the Union) into prose passages."""
    from canvaslab.training.tasks.prose import prepare_passages

    check_names(corpus, "--corpus")
    count = prepare_passages(corpus, _out_file(out))
    typer.echo(printable(f"wrote {count:,} passages to {out}"))


def _out_folder(out: Path) -> Path:
    """``--out`` as a folder: refused in one line when its name is too long or a file is there."""
    check_names(out, "--out")
    if out.exists() and not out.is_dir():
        raise CanvaslabError(f"--out {out} is a file; give a folder (a new one, or an empty one)")
    return out


def _out_file(out: Path) -> Path:
    """``--out`` as a file: refused in one line when its name is too long or a folder is there."""
    check_names(out, "--out")
    if out.is_dir():
        raise CanvaslabError(f"--out {out} is a folder; give a file name")
    return out


def _check_passages(passages_file: Optional[Path]) -> None:
    if passages_file is not None:
        check_names(passages_file, "--passages")
    if passages_file is not None and not passages_file.is_file():
        raise CanvaslabError(f"--passages {passages_file}: no such file (make one with `canvaslab mini passages`)")


@mini_app.command("distill")
def distill(
    passages_file: Path = typer.Option(..., "--passages", help="prose passages (`canvaslab mini passages`)"),
    out: Path = typer.Option(..., "--out", help="prose answers file to write (JSON), for `mini train --prose-answers`"),
    teacher: str = typer.Option("mini-ar", "--teacher", help="the autoregressive teacher: `mini-ar` (`mini`'s "
                                "sibling, package canvaslab-mini-ar) or a checkpoint folder"),
    device: str = typer.Option("cpu", "--device", help="cpu (float32) or cuda (bf16)", callback=options.device),
    batch_size: int = typer.Option(64, "--batch-size", min=1, max=65536, help="prompts per generate call"),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", min=1, max=1024, help="longest continuation, tokens"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="only the first N training passages (a trial)"),
) -> None:
    """Have a teacher continue every training passage (greedy); `mini train --prose-answers` then trains on those
    continuations instead of the passages' own (sequence-level distillation). Held-out passages are left out.
    The default passage file's 32,171 training passages took 30 minutes on two CPU cores."""
    from canvaslab.models.loading import resolve_device
    from canvaslab.models.registry import find_model
    from canvaslab.training.distill import distill_prose
    from canvaslab.training.run import load_tokenizer

    _check_passages(passages_file)
    _out_file(out)
    package = find_model(teacher)  # `mini-ar` not installed: the line that says how to install it
    if package is not None and package.kind != "causal":
        raise CanvaslabError(f"--teacher {teacher}: a {package.kind} model; the teacher is a causal LM (`mini-ar`)")
    folder = package.folder if package is not None else Path(teacher)
    if not (folder / "config.json").is_file():
        raise CanvaslabError(f"--teacher {teacher}: neither an installed causal model (`mini-ar`) nor a checkpoint "
                             "folder (no config.json there)")
    if out.exists():
        raise CanvaslabError(f"--out {out} exists: choose a new file (a finished file is never overwritten)")
    resolve_device(device)
    tokenizer = load_tokenizer(folder if (folder / "tokenizer.json").is_file() else None)
    distill_prose(passages_file, folder, tokenizer, out, teacher_name=teacher, device=device, batch_size=batch_size,
                  max_new_tokens=max_new_tokens, limit=limit, log=typer.echo)
    typer.echo(printable(f"wrote {out}"))


@mini_app.command("tokenizer")
def tokenizer(
    passages_file: Optional[Path] = typer.Option(None, "--passages", help="prose passages (`canvaslab mini passages`)"),
    out: Path = typer.Option(..., "--out", help="folder for the tokenizer files"),
    vocab_size: Optional[int] = typer.Option(None, "--vocab-size", help="ids in all: specials, BPE and <unusedN> "
                                             "(default: the shipped tokenizer's)"),
    tail_unused: Optional[int] = typer.Option(None, "--tail-unused", help="ids of the high <unusedN> block, at least "
                                              "(default: the shipped tokenizer's)"),
) -> None:
    """Retrain the `mini` BPE tokenizer (the shipped one: `--passages` from the default corpus, seed 0)."""
    from canvaslab.training.tokenizer import MIN_VOCAB_SIZE, TAIL_UNUSED, VOCAB_SIZE, build_mini_tokenizer, unused_ids

    vocab_size = VOCAB_SIZE if vocab_size is None else vocab_size
    tail_unused = TAIL_UNUSED if tail_unused is None else tail_unused
    _check_passages(passages_file)
    _out_folder(out)
    if tail_unused < 1 or vocab_size < MIN_VOCAB_SIZE + tail_unused:
        raise CanvaslabError(f"--vocab-size {vocab_size} --tail-unused {tail_unused}: the BPE needs at least "
                             f"{MIN_VOCAB_SIZE} ids besides the tail, and the tail at least 1")
    built = build_mini_tokenizer(passages_file, out, vocab_size=vocab_size, tail_unused=tail_unused)
    typer.echo(printable(f"wrote {out}: {len(built):,} ids, {len(unused_ids(built))} <unusedN>"))


@mini_app.command("train")
def train(
    out: Path = typer.Option(..., "--out", help="folder for both checkpoints, loss.png, quality.json, MODEL_CARD.md"),
    passages_file: Optional[Path] = typer.Option(None, "--passages", help="prose passages (`canvaslab mini passages`)"),
    steps: int = typer.Option(SHIPPED.steps, "--steps", min=1),
    batch_size: int = typer.Option(SHIPPED.batch_size, "--batch-size", min=1),
    learning_rate: float = typer.Option(SHIPPED.learning_rate, "--lr"),
    examples: int = typer.Option(SHIPPED.examples, "--examples", min=0,
                                 help="training examples drawn into the pool, in order (0: steps x batch size)"),
    seed: int = typer.Option(0, "--seed"),
    device: str = typer.Option("cuda", "--device", help="cuda (bf16 autocast) or cpu (float32)",
                               callback=options.device),
    eval_per_task: int = typer.Option(100, "--eval-per-task", min=0, help="held-out prompts per task (0: skip)"),
    compile_parts: str = typer.Option("", "--compile", help="put parts under torch.compile: 'leaves' (norms, MLPs, "
                                      "routers: ~1.3x on an H200 after ~1.5 min) or 'layers' (~2.3x after ~5.5 min)"),
    sum_format: str = typer.Option(AnswerStyle.sum_format, "--sum-format", help="how addition answers write sums: "
                                   "'plain' (= 91, the shipped mini's), 'padded' (24 + 67 = 091: every digit at a fixed place) "
                                   "or 'columns' (the school method, units first)"),
    mixture: str = typer.Option(SHIPPED.mixture, "--mixture", help="change some tasks' training shares (the rest keep "
                                "tasks.MIXTURE's; all are then scaled to sum to 1); '' for tasks.MIXTURE's own"),
    tokenizer_dir: Optional[Path] = typer.Option(None, "--tokenizer", help="a tokenizer folder (`canvaslab mini "
                                                 "tokenizer`) instead of the shipped one; the vocabulary is its size"),
    logit_adjustment: bool = typer.Option(False, "--logit-adjustment/--no-logit-adjustment", help="the loss reads the logits plus the log "
                                          "of its weights, which then no longer bias the predictions (docs/mini-model.md)"),
    prose_answers: Optional[Path] = typer.Option(None, "--prose-answers", help="train both models on a teacher's prose "
                                                 "answers (`canvaslab mini distill`) instead of the passages' own"),
    data: str = typer.Option("shipped", "--data", help="training data version: 'shipped' (the shipped mini's "
                             "generators) or 'grammar' (tasks composed of many parts, worked math answers; "
                             "--sum-format does not apply)"),
) -> None:
    """Train `mini` and its autoregressive sibling on the same examples, then evaluate both on held-out prompts.

    The defaults are the shipped `mini`'s recipe (training.recipe.SHIPPED); it was trained with `--compile leaves`."""
    require("report", "canvaslab mini train")  # its model card's loss curve: matplotlib, at the end
    from canvaslab.models.loading import resolve_device
    from canvaslab.training.card import write_card
    from canvaslab.training.loop import TrainSettings
    from canvaslab.training.run import RunSpec, evaluate_models, train_models
    from canvaslab.training.tasks.prose import checked_answers_file

    _check_passages(passages_file)
    if _out_folder(out).exists() and any(out.iterdir()):
        raise CanvaslabError(f"--out {out} is not empty: choose a new folder (a finished run is never overwritten)")
    for option, path in (("--tokenizer", tokenizer_dir), ("--prose-answers", prose_answers)):
        if path is not None:
            check_names(path, option)
    if tokenizer_dir is not None and not (tokenizer_dir / "tokenizer.json").is_file():
        raise CanvaslabError(f"--tokenizer {tokenizer_dir}: no tokenizer.json there (make one with `canvaslab mini tokenizer`)")
    if compile_parts not in ("", "layers", "leaves"):
        raise CanvaslabError(f"--compile {compile_parts!r}: choose 'layers' or 'leaves'")
    if check_data(data) == "grammar" and sum_format != AnswerStyle.sum_format:
        raise CanvaslabError(f"--sum-format {sum_format}: the grammar data writes its own worked sums; leave it out "
                             "with --data grammar")
    answers = AnswerStyle(sum_format, checked_answers_file(prose_answers, passages_file))
    shares = tuple(parse_shares(mixture, data).items())
    resolve_device(device)
    settings = TrainSettings(steps=steps, batch_size=batch_size, learning_rate=learning_rate, seed=seed,
                             warmup_steps=min(100, steps // 10 + 1))
    if logit_adjustment:
        settings = replace(settings, schedule=replace(settings.schedule, logit_adjustment=True))
    train_models(RunSpec(out, passages_file, settings, device=device, examples=examples, compile_parts=compile_parts,
                         answers=answers, shares=shares, tokenizer=tokenizer_dir, data=data),
                 log=typer.echo)
    if eval_per_task:
        evaluate_models(out, passages_file, eval_per_task, device, seed=seed, log=typer.echo, data=data)
    typer.echo(printable(f"wrote {write_card(out)}"))


@mini_app.command("card")
def card(
    run: Path = typer.Argument(..., help="a training run's folder (its training.json and quality_*.json)"),
    sibling: Optional[Path] = typer.Option(None, "--sibling", help="the folder of a run that trained only the AR "
                                           "sibling, on the same examples for the same steps"),
) -> None:
    """Write the run's MODEL_CARD.md and loss.png again from its files (with a sibling trained apart)."""
    require("report", "canvaslab mini card")
    from canvaslab.training.card import write_card

    for folder in (run, sibling):
        if folder is not None:
            check_names(folder, "--sibling" if folder is sibling else "RUN")
        if folder is not None and not (folder / "training.json").is_file():
            raise CanvaslabError(f"{folder}: no training.json, so not a training run's folder")
    typer.echo(printable(f"wrote {write_card(run, sibling=sibling)}"))


BLIND_RECORD = Path("benchmarks/results/mini-blind/record.json")


@mini_app.command("blind-set")
def blind_set(
    out: Path = typer.Option(..., "--out", help="JSONL file to write: the registered blind test set"),
) -> None:
    """Write the blind test set (one item a line: task, prompt, reference, checker), checked against its
    registered sha256."""
    from canvaslab.io import write_text_atomic
    from canvaslab.training.blind_eval import checked_set
    from canvaslab.training.tasks import blind

    _out_file(out)
    registration = blind.registered()
    checked_set(registration)
    write_text_atomic(out, blind.set_bytes(registration["per_task"], registration["seed"]).decode("ascii"))
    typer.echo(printable(f"wrote {out}: {registration['items']} items, sha256 {registration['sha256']}"))


@mini_app.command("blind-eval")
def blind_eval(
    model: str = typer.Option("mini", "--model", help="an installed model: mini (diffusion) or mini-ar (causal)"),
    out: Path = typer.Option(..., "--out", help="new folder for the answers, the table and result.json"),
    record: Path = typer.Option(BLIND_RECORD, "--record", help="the record of evaluations, release -> result"),
    rerun: bool = typer.Option(False, "--rerun/--first-run",
                               help="evaluate a release already in the record again (recorded as a re-run)"),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda", callback=options.device),
    dtype: str = typer.Option("float32", "--dtype", help="compute dtype: float32 (CPU) or bfloat16",
                              callback=options.one_of(("float32", "bfloat16"))),
    batch_size: int = typer.Option(1, "--batch-size", min=1, max=4096, help="rows per generate call (1 on a CPU: a "
                                   "finished row does not wait on one that runs to the pass budget)"),
    registration_file: Optional[Path] = typer.Option(None, "--registration", hidden=True,
                                                     help="another registration file (tests)"),
) -> None:
    """Evaluate one release of a `mini` model once on the registered blind test set: the set is regenerated and
    its hash checked first, and a release already in the record is refused unless --rerun."""
    require("analysis", "canvaslab mini blind-eval")  # scipy: the Wilson intervals
    from canvaslab.models.registry import model_package
    from canvaslab.training.blind_eval import check_release, checked_set, read_record
    from canvaslab.training.tasks import blind

    for path, option in ((out, "--out"), (record, "--record")):
        check_names(path, option)
    if _out_folder(out).exists() and any(out.iterdir()):
        raise CanvaslabError(f"--out {out} is not empty: choose a new folder")
    if record == BLIND_RECORD and not record.exists():  # relative: elsewhere it would miss the committed record
        raise CanvaslabError(f"no record of evaluations at {record}: run from the repository root, or pass "
                             "--record FILE")
    package = model_package(model)
    registration = blind.registered(registration_file) if registration_file else blind.registered()
    check_release(read_record(record), package.distribution, registration["sha256"], rerun)
    examples = checked_set(registration)
    from canvaslab.training.blind_eval import run_release

    table = run_release(package, examples, registration, out, record, rerun=rerun, device=device, dtype=dtype,
                        batch_size=batch_size)
    for line in table.splitlines():
        typer.echo(printable(line))
    typer.echo(printable(f"wrote {out}; recorded in {record}"))
