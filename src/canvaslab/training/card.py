"""The loss curve (PNG) and the model card of a `mini` training run, from its ``training.json`` and
``quality.json``: every number on the card is read from those files."""

from __future__ import annotations

from pathlib import Path

from canvaslab.errors import CanvaslabError
from canvaslab.io import read_json
from canvaslab.training.tasks import MIXTURE


def plot_loss(training: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    for name, label in (("diffusion", "mini (diffusion, weighted canvas CE)"), ("autoregressive", "AR sibling (next-token CE)")):
        history = training.get(name, {}).get("history", [])
        axis.plot([e["step"] for e in history], [e["loss"] for e in history], label=label)
        content = [e for e in history if "content_loss" in e]
        if content:  # the answer tokens alone: what the weighted loss is mostly about
            axis.plot([e["step"] for e in content], [e["content_loss"] for e in content], linestyle="--",
                      label="mini, noised answer tokens only")
    axis.set_xlabel("step")
    axis.set_ylabel("training loss (nats/token)")
    axis.set_yscale("log")
    axis.legend()
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    plt.close(figure)
    return out


# Prose has no right answer: each proxy gets a row (evaluate.py), the word share first as on older cards
PROSE_METRICS = ("english_word_share", "english_bigram_share", "frequent_word_share")


def _quality_rows(quality: dict) -> list[str]:
    """One row per task either model was evaluated on (a run may train or evaluate only one of them), one per
    prose measure either has, and the references' frequent-word share where known."""
    diffusion, sibling = quality.get("diffusion", {}), quality.get("autoregressive", {})
    rows = ["| task | n | mini | AR sibling | mini median accept calls |", "| --- | --- | --- | --- | --- |"]
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for task in dict.fromkeys([*diffusion, *sibling]):
        entry, other = diffusion.get(task, {}), sibling.get(task, {})
        metrics = [m for m in PROSE_METRICS if m in entry or m in other] if task == "prose" else ["accuracy"]
        for metric in metrics:
            rows.append(f"| {task} ({metric}) | {entry.get('n', other.get('n'))} | {fmt(entry.get(metric))} | "
                        f"{fmt(other.get(metric))} | {entry.get('median_accept_calls', '-')} |")
    reference = next((m["prose"]["reference_frequent_word_share"] for m in (diffusion, sibling)
                      if "reference_frequent_word_share" in m.get("prose", {})), None)
    if reference is not None:
        rows += ["", f"Prose's frequent_word_share is the share of words among the passages' 20 most frequent; the "
                     f"held-out references' is {reference:.3f}. Runs of frequent words pass the word and pair shares "
                     "and sit far above it."]
    return rows


def merge_quality(parts: list[dict]) -> dict:
    """One evaluation from several calls (one per model or task subset, e.g. code where the sandbox
    runs): each model's per-task results joined, and where each part ran."""
    merged: dict = {"evaluations": []}
    for part in parts:
        for name in ("diffusion", "autoregressive"):
            if name in part:
                merged.setdefault(name, {}).update(part[name])
        merged.setdefault("per_task", part.get("per_task"))
        environment = part.get("environment", {})
        merged["evaluations"].append({
            "models": [name for name in ("diffusion", "autoregressive") if name in part],
            "tasks": sorted({task for name in ("diffusion", "autoregressive") for task in part.get(name, {})}),
            "device": environment.get("device"), "torch": environment.get("torch"),
            "transformers": environment.get("transformers")})
    return merged


def _shares(training: dict) -> str:
    shares = training.get("mixture_shares", MIXTURE)
    return ", ".join(f"{task} {share:.2f}" for task, share in shares.items())


# What makes two runs' examples the same (the pool is seeded; its size, tokens and per-task counts name it)
SAME_EXAMPLES = ("pool_examples", "pool_tokens", "mixture_counts", "answers")


def _with_sibling(training: dict, sibling: Path) -> dict:
    """``training`` with the autoregressive model of a run that trained only the sibling (``sibling`` holds its
    ``training.json``), refused unless it trained on the same examples for the same steps."""
    other = read_json(sibling / "training.json")
    if "autoregressive" not in other:
        raise CanvaslabError(f"{sibling}/training.json has no autoregressive model")
    differing = [key for key in SAME_EXAMPLES if other.get(key) != training.get(key)]
    steps = [training[name]["steps"] for name in ("diffusion",) if name in training]
    if differing or steps and other["autoregressive"]["steps"] != steps[0]:
        what = f"its {differing[0]}" if differing else "its step count"
        raise CanvaslabError(f"{sibling}: the sibling did not train on the same examples for the same steps ({what} "
                             "differs), so one card cannot compare them")
    return {**training, "autoregressive": other["autoregressive"]}


def write_card(run_dir: Path, sibling: Path | None = None) -> Path:
    """``MODEL_CARD.md`` in ``run_dir`` (and the loss curve ``loss.png`` beside it); ``sibling``: the folder of a
    run that trained only the autoregressive sibling, for the same examples and steps (its quality files too)."""
    training = read_json(run_dir / "training.json")
    quality_files = sorted(run_dir.glob("quality_*.json"))
    if sibling is not None:
        training = _with_sibling(training, sibling)
        quality_files += sorted(sibling.glob("quality_autoregressive*.json"))
    quality = merge_quality([read_json(path) for path in quality_files])
    plot_loss(training, run_dir / "loss.png")
    settings = training["settings"]
    models = [name for name in ("diffusion", "autoregressive") if name in training]
    lines = [
        "# canvaslab `mini` and its autoregressive sibling", "",
        "A DiffusionGemma (`DiffusionGemmaForBlockDiffusion`) trained from scratch by `canvaslab mini train`, and a",
        "Gemma 4 causal LM of the same dimensions trained on the same examples for the same steps.",
        "Objective and schedule: docs/mini-model.md.", "",
        "## Training", "",
        "- parameters: " + ", ".join(f"{name} {training[name]['parameters']:,}" for name in models),
        f"- batch {settings['batch_size']}, peak learning rate {settings['learning_rate']}, "
        f"warm-up {settings['warmup_steps']} steps, seed {settings['seed']}",
        f"- example pool: {training['pool_examples']:,} examples, {training['pool_tokens']:,} tokens",
        f"- mixture (examples per task): {training['mixture_counts']}",
        # an older training.json has no share overrides: its run drew tasks.MIXTURE's shares
        f"- task shares drawn: {_shares(training)}",
        # an older training.json has no answer style: its run wrote sums plainly
        f"- answers: {training.get('answers', {'sum_format': 'plain'})} (tasks.AnswerStyle)",
        # an older training.json has no data version: its run drew the shipped generators
        f"- training data version: {training.get('data', 'shipped')}",
    ]
    if "prose_answers" in training:  # canvaslab.training.distill
        taught = training["prose_answers"]
        lines.append(f"- prose answers: {taught['teacher']}'s {taught['decoding']} continuations of "
                     f"{taught['passages']:,} training passages (sequence-level distillation; file sha256 "
                     f"{taught['sha256'][:12]}...), not the passages' own")
    if "autoregressive" not in models:
        lines.append("- autoregressive sibling: not trained in this run")
    for name in models:
        last = training[name]["history"][-1]
        lines.append(f"- {name}: {training[name]['steps']} steps, final loss {last['loss']:.4f}, "
                     f"{last['tokens']:,} tokens processed, {training[name]['train_seconds']} s")
        if training[name].get("portable_resumes"):  # canvaslab.training.portable: close to, not bit for bit
            lines.append(f"  - went on from the portable state (bf16 weights, factored second moments, first moment "
                         f"restarted) after steps {', '.join(map(str, training[name]['portable_resumes']))}")
    lines += [f"- device: {training['environment'].get('device')}", "", "![loss](loss.png)", ""]
    if "diffusion" in quality or "autoregressive" in quality:
        lines += ["## Held-out quality", "",
                  f"{quality['per_task']} held-out prompts per task; mini through transformers' generate with its",
                  "default sampler settings (48-pass budget); the AR sibling greedy.", ""] + _quality_rows(quality)
        lines += ["", "Where each part was evaluated:", ""] + [
            f"- {', '.join(e['models'])} on {', '.join(e['tasks'])}: {e['device']} (torch {e['torch']}, "
            f"transformers {e['transformers']})" for e in quality["evaluations"]]
    out = run_dir / "MODEL_CARD.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out
