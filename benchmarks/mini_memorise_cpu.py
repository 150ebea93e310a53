#!/usr/bin/env python
"""Does the diffusion objective memorise facts (or learn to add) about as fast as next-token prediction does?

Run 3's `mini` recalled 0% of the knowledge base's facts while its autoregressive sibling, trained on the
same examples, recalled 99%. This trains a small DiffusionGemma and a small Gemma 4 causal LM (same text
dimensions, float32, CPU, one thread) on fact questions about ``--countries`` countries only, the same
examples in the same order, and every ``--eval-every`` steps reads how many of their facts (3 attributes
per country, each asked in a training phrasing) each model gets exactly right, teacher-forced:

- ``causal``: argmax of the next-token logits over the value's tokens, given the answer so far;
- ``diffusion``: argmax over the value's tokens when only the value is noised (the rest of the answer
  clean: ``value_exact_value_noised``) and when the whole canvas is noise (generate's first pass:
  ``value_exact_all_noised``);
- ``bidirectional``: a control without DiffusionGemma's encoder/decoder split: the causal model's Gemma 4
  stack with bidirectional attention over prompt + answer (LLaDA-style), the answer noised as in the
  diffusion objective (same rates, weights and noise), scored like ``diffusion``.

``--task prose --passages FILE`` trains on prose continuations (the passage file of ``canvaslab mini
passages``) and reports where the generated prose ends (``generated_ending``): does the model place its end
near the references' length, or fill the canvas as run 4's `mini` does?

``--task add2`` asks 2-digit sums instead (all operand pairs of the training split, any phrasing) and
scores 60 held-out sums, pairs never seen in training, the same ways: the value is the sum's digits. Run 4's
`mini` learned the facts with more steps but not the sums; this asks whether that holds at toy size.

The history also has the gradient norm before clipping. Ablations of the diffusion model (``--ablation``):
``mask-noise`` (noised positions get ``<mask>``, which generate never uses: absorbing instead of uniform
noise), ``untied`` (the decoder gets its own copy of the layers instead of sharing the encoder's),
``encoder-lm`` (plus the encoder's next-token loss on the answer; the encoder is a causal LM over the
shared layers), and ``--adapt-from-causal N`` (start from a causal model trained N steps first).

    python benchmarks/mini_memorise_cpu.py --steps 800 --countries 10 --out FILE.json [--kinds diffusion,causal]
        [--task fact|add2] [--layers 2]
"""

from __future__ import annotations

import argparse
import copy
import random
import re
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import DiffusionGemmaForBlockDiffusion, Gemma4ForCausalLM

from canvaslab.environment import environment_fingerprint
from canvaslab.io import write_json_atomic
from canvaslab.models import anatomy
from canvaslab.models.loading import LoadedModel
from canvaslab.models.mini import ar_sibling_config, load_mini_tokenizer, mini_config
from canvaslab.models.presets import REAL_GENERATION_DEFAULTS
from canvaslab.training import chat, loop, objective
from canvaslab.training.evaluate import answer_diffusion, english_fraction, judge
from canvaslab.training.batches import Pool, _left_pad
from canvaslab.training.loop import TrainSettings, train
from canvaslab.training.objective import DiffusionBatch, NoiseSchedule, decoder_logits, encode_prefix
from canvaslab.training.tasks import RUN4_STYLE, Mixture, arithmetic, knowledge
from canvaslab.training.tasks.base import Example, draw

SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
         "head_dim": 32, "global_head_dim": 32, "moe_intermediate_size": 32, "num_experts": 4}
CANVAS = 16  # fact answers are at most 13 tokens, 2-digit sums 12
ADD2_PROBES = 60
MASK_ID = 4


def fact_questions(rng: random.Random, countries: int):
    """Training-split fact questions about the first ``countries`` countries of the knowledge base."""
    names = {country.name for country in knowledge.knowledge_base()[:countries]}
    while True:
        example = draw(knowledge.question, rng, "train")
        if any(name in example.answer for name in names):
            yield example


SUM_FORMAT = "plain"  # --sum-format: how the tasks write a sum (arithmetic.SUM_FORMATS)
DIGITS = 2  # --task add2 / add3


def addition(rng: random.Random) -> Example:
    """A sum of two DIGITS-digit numbers, written in SUM_FORMAT by the tasks' own writer."""
    return arithmetic.addition(rng, DIGITS, SUM_FORMAT)


def training_examples(task: str, rng: random.Random, countries: int, prose_mixture: Mixture | None = None):
    if task == "fact":
        yield from fact_questions(rng, countries)
    make = prose_mixture.makers["prose"] if task == "prose" else addition
    while True:
        yield draw(make, rng, "train")


def value_probes(tokenizer, task: str, countries: int, split: str = "heldout"):
    """(prompt ids, answer ids, value token span) for each probe: one training-phrased question per fact,
    or ADD2_PROBES held-out sums; and the probes' examples."""
    rng, probes, seen, chosen = random.Random("memorise-probes"), [], set(), []
    if task == "fact":
        examples, wanted, value_of = fact_questions(rng, countries), 3 * countries, lambda e: e.reference["answers"][0]
    else:
        examples = iter(lambda: draw(addition, rng, split), None)
        wanted, value_of = ADD2_PROBES, lambda e: re.findall(r"[0-9]+", e.answer)[-1]  # the sum as written
    while len(probes) < wanted:
        example = next(examples)
        if example.answer in seen:  # a fact's answer names the country, the attribute and the value
            continue
        seen.add(example.answer)
        chosen.append(example)
        probes.append(_probe(tokenizer, example, value_of(example)))
    return probes, chosen


def _generated(model, tokenizer, examples) -> list[dict]:
    """canvaslab's generate (transformers' loop, the real model's sampler defaults, one canvas) on ``examples``."""
    defaults = {key: value for key, value in REAL_GENERATION_DEFAULTS.items() if key != "eos_token_id"}
    loaded = LoadedModel(model.eval(), tokenizer, {"kind": "toy"},
                         {**defaults, "max_new_tokens": CANVAS, "eos_token_id": [1, 106]})
    rows = answer_diffusion(loaded, examples, batch_size=len(examples))
    model.train()
    return rows


@torch.no_grad()
def generated_ending(model, tokenizer, examples, passages) -> dict:
    """Where generated prose ends: median answer tokens (the held-out references' median beside it), the share
    of answers that end inside the canvas, median accept calls and the English-word share."""
    rows = _generated(model, tokenizer, examples)
    lengths = [CANVAS if row["eos_position"] is None else row["eos_position"] for row in rows]
    references = [len(tokenizer(e.answer, add_special_tokens=False)["input_ids"]) for e in examples]
    return {"generate_median_answer_tokens": statistics.median(lengths),
            "reference_median_answer_tokens": statistics.median(references),
            "generate_ended_share": sum(row["eos_position"] is not None for row in rows) / len(rows),
            "generate_median_passes": statistics.median(row["passes"] for row in rows),
            "generate_english_share": statistics.fmean(english_fraction(row["text"], passages) for row in rows),
            "generate_sample": rows[0]["text"]}


@torch.no_grad()
def generated_exact(model, tokenizer, examples) -> dict:
    """Share of the examples that canvaslab's generate answers right by the study's own scorer, and the
    median accept calls."""
    rows = _generated(model, tokenizer, examples)
    scores = [bool(judge(example, row["text"])) for example, row in zip(examples, rows)]
    return {"generate_exact": sum(scores) / len(scores),
            "generate_median_passes": statistics.median(row["passes"] for row in rows),
            "generate_sample": rows[0]["text"]}


def _probe(tokenizer, example, value: str) -> tuple[list[int], list[int], tuple[int, int]]:
    answer_text = chat.answer_text(example.answer)
    start = answer_text.rindex(value)  # a sum's value is its last number
    before = tokenizer(answer_text[: start - 1], add_special_tokens=False)["input_ids"]
    through = tokenizer(answer_text[: start + len(value)], add_special_tokens=False)["input_ids"]
    answer = tokenizer(answer_text, add_special_tokens=False)["input_ids"]
    assert answer[: len(through)] == through and through[: len(before)] == before, example.answer
    prompt = tokenizer(chat.prompt_text(example.prompt), add_special_tokens=False)["input_ids"]
    return prompt, answer, (len(before), len(through))


def _exact(predicted: torch.Tensor, answers, spans) -> float:
    hits = [bool((predicted[r, s:e] == torch.tensor(a[s:e])).all()) for r, (a, (s, e)) in enumerate(zip(answers, spans))]
    return sum(hits) / len(hits)


def _scores(name: str, predicted: torch.Tensor, answers, spans) -> dict:
    """Exact value, and the share right of its last token and of the one before (a sum's units and tens digit)."""
    def token_right(offset):
        return sum(int(predicted[r, e - offset]) == a[e - offset] for r, (a, (_, e)) in enumerate(zip(answers, spans))) / len(spans)
    return {name: _exact(predicted, answers, spans), f"{name}_last_token": token_right(1),
            f"{name}_token_before_last": token_right(2)}


def _noise(shape, vocab: int, generator: torch.Generator, mask_noise: bool) -> torch.Tensor:
    if mask_noise:
        return torch.full(shape, MASK_ID, dtype=torch.long)
    return torch.randint(0, vocab, shape, generator=generator)


@torch.no_grad()
def recall_causal(model, probes) -> dict:
    rows = [p + a for p, a, _ in probes]
    width = max(len(p) for p, _, _ in probes) + CANVAS
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, : len(row)], mask[r, : len(row)] = torch.tensor(row), 1
    predicted = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
    # the logits at position t predict token t + 1: shift them onto the answer's positions
    shifted = torch.stack([predicted[r, len(p) - 1:len(p) - 1 + CANVAS] for r, (p, _, _) in enumerate(probes)])
    return _scores("value_exact", shifted, [a for _, a, _ in probes], [s for _, _, s in probes])


def _canvases(probes, vocab: int, generator: torch.Generator, mask_noise: bool):
    clean = torch.zeros((len(probes), CANVAS), dtype=torch.long)
    for r, (_, answer, _) in enumerate(probes):
        clean[r, : len(answer)] = torch.tensor(answer)
    value_noised = clean.clone()
    for r, (_, _, (s, e)) in enumerate(probes):
        value_noised[r, s:e] = _noise((e - s,), vocab, generator, mask_noise)
    return clean, {"value_exact_value_noised": value_noised,
                   "value_exact_all_noised": _noise(clean.shape, vocab, generator, mask_noise)}


@torch.no_grad()
def recall_diffusion(model, probes, generator: torch.Generator, mask_noise: bool = False) -> dict:
    ids, mask = _left_pad([p for p, _, _ in probes], 0)
    clean, canvases = _canvases(probes, model.config.text_config.vocab_size, generator, mask_noise)
    batch = DiffusionBatch(ids, mask, clean)
    cache = encode_prefix(model, batch)
    answers, spans = [a for _, a, _ in probes], [s for _, _, s in probes]
    return {key: value for name, canvas in canvases.items()
            for key, value in _scores(name, decoder_logits(model, cache, batch, canvas).argmax(-1), answers, spans).items()}


def _joined(prompts, canvases) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded prompt + canvas rows, the attention mask, and where each canvas sits."""
    width = max(map(len, prompts)) + CANVAS
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask, where = torch.zeros_like(ids), torch.zeros_like(ids, dtype=torch.bool)
    for r, (prompt, canvas) in enumerate(zip(prompts, canvases)):
        ids[r, : len(prompt) + CANVAS] = torch.cat([torch.tensor(prompt), canvas])
        mask[r, : len(prompt) + CANVAS], where[r, len(prompt):len(prompt) + CANVAS] = 1, True
    return ids, mask, where


@torch.no_grad()
def recall_bidirectional(model, probes, generator: torch.Generator) -> dict:
    clean, canvases = _canvases(probes, model.config.vocab_size, generator, False)
    answers, spans, prompts = [a for _, a, _ in probes], [s for _, _, s in probes], [p for p, _, _ in probes]
    result = {}
    for name, canvas in canvases.items():
        ids, mask, where = _joined(prompts, canvas)
        predicted = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)[where].view(len(probes), CANVAS)
        result.update(_scores(name, predicted, answers, spans))
    return result


def train_bidirectional(model, pool: Pool, settings: TrainSettings, progress) -> None:
    """The diffusion objective's noise and weights on one bidirectional stack over prompt + answer."""
    optimizer, generator = loop._optimizer(model, settings), torch.Generator().manual_seed(settings.seed)
    schedule, vocab = settings.schedule, model.config.vocab_size
    model.train()
    for step in range(settings.steps):
        for group in optimizer.param_groups:
            group["lr"] = loop._learning_rate(settings, step)
        rows = [(step * settings.batch_size + i) % len(pool) for i in range(settings.batch_size)]
        canvas = torch.zeros((len(rows), CANVAS), dtype=torch.long)
        for r, index in enumerate(rows):
            canvas[r, : len(pool.answers[index])] = torch.tensor(pool.answers[index])
        rate = schedule.rates(len(rows), generator, "cpu")
        noisy, noised = objective.noise_canvas(canvas, rate, vocab, generator)
        ids, mask, where = _joined([pool.prompts[i] for i in rows], noisy)
        logits = model(input_ids=ids, attention_mask=mask).logits[where].view(len(rows), CANVAS, -1)
        loss = objective.weighted_canvas_loss(logits, canvas, noised, schedule, shown=noisy)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % settings.log_every == 0 or step == settings.steps - 1:
            progress({"step": step, "loss": round(float(loss.detach()), 4), "grad_norm": round(float(grad_norm), 4)})


def encoder_lm_loss(model, batch: DiffusionBatch) -> torch.Tensor:
    """The encoder's next-token loss on the canvas's answer tokens (the ``encoder-lm`` ablation)."""
    length, answer = batch.encoder_ids.shape[1], batch.canvas != 0
    ids = torch.cat([batch.encoder_ids, batch.canvas], 1)
    positions = torch.arange(ids.shape[1])[None]
    hidden = anatomy.encoder(model)(input_ids=ids, attention_mask=torch.cat([batch.encoder_mask, answer], 1),
                                    position_ids=positions).last_hidden_state
    cap = model.config.text_config.final_logit_softcapping
    logits = torch.tanh(model.lm_head(hidden[:, length - 1:-1]) / cap) * cap
    losses = F.cross_entropy(logits.flatten(0, 1), batch.canvas.reshape(-1), reduction="none")
    return (losses * answer.reshape(-1)).sum() / answer.sum()


def apply_ablation(name: str) -> None:
    """Patch the objective as the ablation says (this process only; generate is never involved)."""
    if name == "mask-noise":
        uniform = objective.noise_canvas

        def absorbing(canvas, rate, vocab_size, generator, keep=None):
            _, noised = uniform(canvas, rate, vocab_size, generator, keep)
            return torch.where(noised, torch.full_like(canvas, MASK_ID), canvas), noised

        objective.noise_canvas = absorbing
    elif name == "encoder-lm":
        denoising = loop.diffusion_loss

        def with_encoder_lm(model, batch, *args, **kwargs):
            return denoising(model, batch, *args, **kwargs) + encoder_lm_loss(model, batch)

        loop.diffusion_loss = with_encoder_lm


def build(kind: str, ablation: str, text: dict):
    if kind == "causal":
        return Gemma4ForCausalLM(ar_sibling_config(**text))
    if kind == "bidirectional":
        config = ar_sibling_config(**text)
        config.use_bidirectional_attention, config.is_causal = "all", False
        return Gemma4ForCausalLM(config)
    model = DiffusionGemmaForBlockDiffusion(mini_config(CANVAS, **text))
    if ablation == "untied":
        model.model.decoder.layers = copy.deepcopy(model.model.decoder.layers)
    return model


def load_causal_weights(diffusion, causal) -> None:
    """A causal model's text weights into the diffusion model's text encoder (the decoder shares them)."""
    state = {name[len("model."):]: t for name, t in causal.state_dict().items() if name.startswith("model.")}
    missing, unexpected = diffusion.get_submodule(anatomy.ENCODER_TEXT).load_state_dict(state, strict=False)
    assert not missing and not unexpected, (missing, unexpected)


def main() -> None:
    global SUM_FORMAT, DIGITS, CANVAS
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--countries", type=int, default=10)
    parser.add_argument("--task", default="fact", choices=("fact", "add2", "add3", "prose"))
    parser.add_argument("--passages", type=Path, help="--task prose: the passage file (`canvaslab mini passages`)")
    parser.add_argument("--canvas", type=int, default=CANVAS, help="canvas length (the columns format needs ~40 for add2)")
    parser.add_argument("--layers", type=int, default=SMALL["num_hidden_layers"], help="text layers of every model")
    parser.add_argument("--hidden", type=int, default=SMALL["hidden_size"],
                        help="hidden size of every model (MLP 2x, experts 1/2x, heads of 32)")
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--kinds", default="diffusion,causal")
    parser.add_argument("--ablation", default="none", choices=("none", "mask-noise", "untied", "encoder-lm"))
    parser.add_argument("--adapt-from-causal", type=int, default=0)
    parser.add_argument("--kept-weight", type=float, default=None)
    parser.add_argument("--pad-weight", type=float, default=None)
    parser.add_argument("--self-conditioning", type=float, default=None)
    parser.add_argument("--probe-split", default="heldout", choices=("heldout", "train"),
                        help="add2: score held-out sums (default) or sums of the training split (memorised?)")
    parser.add_argument("--max-rate", type=float, default=None, help="NoiseSchedule.max_rate")
    parser.add_argument("--rate-power", type=float, default=None, help="NoiseSchedule.rate_power (> 1: more low rates)")
    parser.add_argument("--sum-format", default="plain", choices=arithmetic.SUM_FORMATS,
                        help="add2/add3: how the sum is written (canvaslab.training.tasks.arithmetic)")
    parser.add_argument("--suffix-noise", type=float, default=None, help="NoiseSchedule.suffix_probability")
    parser.add_argument("--logit-adjustment", action="store_true",
                        help="NoiseSchedule.logit_adjustment (off in every toy result before session 13)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0,
                        help="initial weights, noise, batch order and training examples (0: every result before session 14)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.task == "prose" and (args.passages is None or not args.passages.is_file()):
        parser.error("--task prose needs --passages FILE (make one with `canvaslab mini passages`)")
    SUM_FORMAT, CANVAS = args.sum_format, args.canvas
    DIGITS = 3 if args.task == "add3" else 2
    torch.set_num_threads(args.threads)
    apply_ablation(args.ablation)
    schedule = NoiseSchedule()
    for name, value in (("kept_weight", args.kept_weight), ("pad_weight", args.pad_weight),
                        ("self_conditioning_probability", args.self_conditioning),
                        ("suffix_probability", args.suffix_noise), ("max_rate", args.max_rate),
                        ("rate_power", args.rate_power), ("logit_adjustment", args.logit_adjustment or None)):
        if value is not None:
            schedule = replace(schedule, **{name: value})
    settings = TrainSettings(steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr, warmup_steps=30,
                             log_every=args.eval_every, schedule=schedule, seed=args.seed)
    tokenizer = load_mini_tokenizer()
    prose_mixture = Mixture(args.passages, RUN4_STYLE) if args.task == "prose" else None
    example_rng = random.Random("memorise-train" if args.seed == 0 else f"memorise-train/{args.seed}")
    questions = training_examples(args.task, example_rng, args.countries, prose_mixture)
    rows = [(args.task, chat.prompt_text(e.prompt), chat.answer_text(e.answer))
            for e in (next(questions) for _ in range(args.steps * args.batch_size))]
    pool = Pool.build(tokenizer, rows, max_answer_tokens=CANVAS)
    if args.task == "prose":  # no value to score: where the generated prose ends, through generate
        probes, probe_examples = [], prose_mixture.heldout("prose", ADD2_PROBES, 0)
    else:
        probes, probe_examples = value_probes(tokenizer, args.task, args.countries, args.probe_split)
    text = {**SMALL, "num_hidden_layers": args.layers, "hidden_size": args.hidden, "intermediate_size": 2 * args.hidden,
            "moe_intermediate_size": args.hidden // 2, "num_attention_heads": args.hidden // 32}
    report = {"settings": settings.as_dict(), "model": text, "canvas_length": CANVAS, "task": args.task,
              "countries": args.countries if args.task == "fact" else None, "probes": len(probes),
              "ablation": args.ablation, "runs": {}}
    for kind in args.kinds.split(","):
        torch.manual_seed(args.seed)
        model = build(kind, args.ablation, text)
        if kind == "diffusion" and args.adapt_from_causal:
            causal = Gemma4ForCausalLM(ar_sibling_config(**text))
            train(causal, pool, replace(settings, steps=args.adapt_from_causal), "causal")
            report["adapted_from_causal"] = {"steps": args.adapt_from_causal, **recall_causal(causal, probes)}
            load_causal_weights(model, causal)
        curve, started = [], time.perf_counter()

        def evaluate(entry, model=model, kind=kind, curve=curve):
            if args.task == "prose":
                curve.append({**entry, **generated_ending(model, tokenizer, probe_examples, args.passages)})
                print(kind, curve[-1], flush=True)
                return
            generator = torch.Generator().manual_seed(1)
            recall = {"causal": lambda: recall_causal(model, probes),
                      "bidirectional": lambda: recall_bidirectional(model, probes, generator),
                      "diffusion": lambda: recall_diffusion(model, probes, generator, args.ablation == "mask-noise")}[kind]()
            if kind == "diffusion" and args.task != "fact" and args.ablation != "mask-noise":
                recall.update(generated_exact(model, tokenizer, probe_examples))
            curve.append({**entry, **recall})
            print(kind, curve[-1], flush=True)

        if kind == "bidirectional":
            train_bidirectional(model, pool, settings, evaluate)
        else:
            train(model, pool, settings, kind, canvas_length=CANVAS, progress=evaluate)
        report["runs"][kind] = {"curve": curve, "seconds": round(time.perf_counter() - started, 1)}
    report["environment"] = environment_fingerprint(device=torch.device("cpu"))
    write_json_atomic(args.out, report)


if __name__ == "__main__":
    main()
