#!/usr/bin/env python
"""Does stored prose read as English? Measures that word salad of frequent words cannot pass.

The English-word share and the word-pair share (``canvaslab.training.evaluate``) are passed by runs of frequent
words ("the the, of the, to to of"): every pair of them occurs somewhere in the passages. Beside them this
script gives, per set of answers to the same held-out prose prompts:

- ``sibling_nll``: the AR sibling's mean negative log-likelihood (nats per token) of the answer given the prompt,
  the generative perplexity that diffusion-LM papers report (lower: more like the training text);
- ``frequent_word_share`` (``evaluate.frequent_word_fraction``): the share of words among the passages' 20 most
  frequent ones; English prose sits near the references' value, frequent-word salad far above it;
- ``repeated_word_share``: the share of words equal to the word before ("the the");
- ``distinct_words_first_30``: distinct words among the first 30 (fewer when shorter), a length-matched
  repetition measure.

Each is read beside the held-out references (the passages' own continuations) and the sibling's answers,
greedy and sampled at temperature 0.8 (the diffusion sampler's first-pass temperature). The answers are the
prose answers of quality files (``benchmarks/mini_quality.py``, ``canvaslab mini train``) to the first
``--per-task`` held-out prose prompts; the judge is the installed ``mini-ar`` unless ``--judge`` names another.

    python benchmarks/mini_prose_judge.py --passages prose.txt --answers NAME=quality.json [...] --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.errors import CanvaslabError
from canvaslab.io import write_json_atomic
from canvaslab.models.registry import find_model
from canvaslab.training import chat
from canvaslab.training.evaluate import (answer_causal, english_bigram_fraction, english_fraction,
                                         frequent_word_fraction, frequent_words, split_words)
from canvaslab.training.run import load_tokenizer
from canvaslab.training.tasks import Mixture


@torch.no_grad()
def sibling_token_scores(model, tokenizer, prompt: str, text: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The causal model's loss (nats) and argmax hit at each token of ``text``, read after the chat prompt."""
    prompt_ids = tokenizer(chat.prompt_text(prompt), add_special_tokens=False)["input_ids"]
    answer_ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)
    logits = model(input_ids=torch.cat([torch.tensor(prompt_ids), answer_ids])[None]).logits[0].float()
    logits = logits[len(prompt_ids) - 1: -1]
    return F.cross_entropy(logits, answer_ids, reduction="none"), logits.argmax(-1) == answer_ids


def sibling_nll(model, tokenizer, prompt: str, text: str) -> float | None:
    losses, _ = sibling_token_scores(model, tokenizer, prompt, text)
    return float(losses.mean()) if len(losses) else None


def judged(texts: list[str], prompts: list[str], model, tokenizer, passages: Path) -> dict:
    rows = []
    for prompt, text in zip(prompts, texts):
        words = split_words(text)
        rows.append({
            "word_share": english_fraction(text, passages), "word_pairs": english_bigram_fraction(text, passages),
            "sibling_nll": sibling_nll(model, tokenizer, prompt, text),
            "frequent_word_share": frequent_word_fraction(text, passages),
            "repeated_word_share": sum(a == b for a, b in zip(words, words[1:])) / (len(words) - 1)
            if len(words) > 1 else None,
            "distinct_words_first_30": len(set(words[:30])) / len(words[:30]) if words else None,
            "words": len(words)})
    summary = {}
    for key in rows[0]:
        values = [row[key] for row in rows if row[key] is not None]
        summary[key] = round(statistics.fmean(values), 4) if key != "words" else statistics.median(values)
    return {"summary": summary, "samples": texts[:3]}


def judge_folder(judge: str) -> Path:
    """The checkpoint folder of ``--judge``: an installed causal model (``mini-ar``) or a folder."""
    package = find_model(judge)
    if package is not None:
        if package.kind != "causal":
            raise CanvaslabError(f"--judge {judge}: a {package.kind} model; the judge is a causal LM (mini-ar)")
        return package.folder
    folder = Path(judge)
    if not (folder / "config.json").is_file():
        raise CanvaslabError(f"--judge {judge}: neither an installed causal model nor a checkpoint folder")
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=Path, required=True, help="the prose passages the answers were scored with")
    parser.add_argument("--answers", action="append", default=[], help="NAME=quality JSON with prose answers "
                        "(repeatable)")
    parser.add_argument("--per-task", type=int, default=100, help="held-out prose prompts the answer files hold")
    parser.add_argument("--judge", default="mini-ar", help="the causal judge: an installed model's name or a "
                        "checkpoint folder (default mini-ar)")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    args = parser.parse_args()
    if any("=" not in item for item in args.answers):
        parser.error("each --answers is NAME=QUALITY.json")
    sets = dict(item.split("=", 1) for item in args.answers)
    missing = [path for path in [*sets.values(), args.passages] if not Path(path).is_file()]
    if missing:
        parser.error(f"no such file: {missing[0]}")
    examples = Mixture(args.passages).heldout("prose", args.per_task, 0)
    prompts = {"references": [e.prompt for e in examples]}
    stored = {}
    for name, path in sets.items():
        quality = json.loads(Path(path).read_text())
        # Each data version has its own held-out prose prompts; a set is read beside its own version's references
        heldout = Mixture(args.passages, data=quality.get("data") or "shipped").heldout("prose", args.per_task, 0)
        answers = [a for a in quality["answers"]["diffusion"] if a["task"] == "prose" and a.get("split") in
                   (None, "in_template")]
        if [a["prompt"] for a in answers] != [e.prompt for e in heldout]:
            parser.error(f"{path}: its prose prompts are not the {args.per_task} held-out ones in order")
        stored[name], prompts[name] = [a["text"] for a in answers], [e.prompt for e in heldout]
        if [e.answer for e in heldout] != [e.answer for e in examples]:  # another data version's passages
            own = f"references ({quality['data']})"
            stored[own], prompts[own] = [e.answer for e in heldout], prompts[name]
    try:
        judge = judge_folder(args.judge)
    except CanvaslabError as error:
        parser.error(str(error))
    tokenizer = load_tokenizer(judge)
    model = AutoModelForCausalLM.from_pretrained(str(judge), dtype=torch.float32).eval()
    texts = {"references": [e.answer for e in examples]}
    for name, temperature in (("sibling greedy", None), ("sibling sampled T=0.8", 0.8)):
        torch.manual_seed(0)
        answers = answer_causal(model, tokenizer, examples, max_new_tokens=256, batch_size=len(examples),
                                temperature=temperature)
        texts[name] = [a["text"] for a in answers]
    texts.update(stored)
    report = {"per_task": args.per_task, "frequent_words": sorted(frequent_words(str(args.passages))), "sets": {}}
    for name, answers in texts.items():
        report["sets"][name] = judged(answers, prompts.get(name, prompts["references"]), model, tokenizer,
                                      args.passages)
        print(name, report["sets"][name]["summary"], flush=True)
    report["environment"] = environment_fingerprint(None, torch.device("cpu"), judge=args.judge)
    write_json_atomic(args.out, report)
    record_result(args.out, shows="stored prose answers judged beside the references and the sibling's: the "
                  "judge's likelihood (nats per token), word and word-pair shares, frequent, repeated and distinct words",
                  environment=report["environment"])


if __name__ == "__main__":
    main()
