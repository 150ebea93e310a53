"""The noise study's pre-registration: the whole design as one dataclass, its canonical JSON and hash.

Seed 000 fixed its rules before seeing any result; canvaslab makes that checkable. ``NoisePlan`` holds
everything that decides what runs and how it is judged: the model and generation settings, the factors
and their levels, the token pools, the outcome measures, the analysis (comparisons, equivalence margins,
decision rule) and the batch safeguard. ``canonical_json`` writes it with sorted keys, and the plan's
identity is the sha256 of that text (``plan_hash``). Conditions are not stored: ``conditions.py``
enumerates them deterministically from the plan, so the hash covers them too.

``plan.json`` is written in canonical form and ``plan.sha256`` beside it in ``sha256sum`` format. Loading
re-canonicalises the parsed file before hashing, so only a change of content (not of whitespace)
changes the hash, and refuses a plan whose content no longer matches ``plan.sha256``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jsonschema
from transformers import PreTrainedTokenizerBase

from canvaslab.errors import CanvaslabError
from canvaslab.io import MiB, NotRegularFile, read_bytes, read_json, write_text_atomic
from canvaslab.prompts import builtin_prompts
from canvaslab.studies.engine.plan import non_finite_at, refuse_non_finite
from canvaslab.studies.unused_tokens.first_pass import DESIGNS as FIRST_PASS_DESIGNS
from canvaslab.studies.unused_tokens.first_pass import FirstPassDesign
from canvaslab.studies.unused_tokens.first_pass import check_plan as check_first_pass_plan
from canvaslab.studies.unused_tokens.graded import DESIGNS as GRADED_DESIGNS
from canvaslab.studies.unused_tokens.graded import GradedDesign, check_graded_plan
from canvaslab.studies.unused_tokens.model_facts import ModelFacts
from canvaslab.studies.unused_tokens.plan_schema import PLAN_SCHEMA
from canvaslab.studies.unused_tokens.token_pools import TOKEN_CLASSES, TokenPools

PLAN_FILE = "plan.json"
HASH_FILE = "plan.sha256"
PLAN_LIMIT = 256 * MiB  # a plan with its token pools is a few MB
HASH_LIMIT = 64 * 1024  # plan.sha256 is one line
SCHEMA_ID = "canvaslab.noise-study.plan/2"
# Plans of earlier schemas still load (their hash is their own content) and run under today's rules;
# where a rule they state differs, the report lists it under ``deviations_from_plan``.
OLDER_SCHEMAS: dict[str, list[str]] = {
    "canvaslab.noise-study.plan/1": [
        "zero variance: this plan's decision rule judges identical differences on their exact mean "
        "(equivalent if |mean| < margin); they are reported as 'degenerate: zero variance' instead, never "
        "as equivalence, because no test can be made (issue 11)",
        "safeguard batches: this plan describes them as the next --batch-size pending conditions, which made "
        "the safeguard depend on where a run was interrupted; they are cut from the plan's conditions in "
        "plan order instead, the same for a resumed and an uninterrupted run (issue 11)",
    ],
}
QUESTION = ("Do the vocabulary's literal <unusedN> tokens, which text never produces but uniform canvas noise "
            "does, act as hidden mask symbols: does the model treat a planted unused token differently from "
            "an ordinary token planted at the same place in the same noise?")


@dataclass(frozen=True)
class DesignLevels:
    """The levels of the factors that vary between designs (token classes are always all three)."""

    counts: tuple[int, ...]
    positions: tuple[str, ...]
    prompts: int
    seeds: int
    budgets: tuple[int, ...]
    why: str


DESIGNS: dict[str, DesignLevels] = {
    "default": DesignLevels(
        counts=(1, 6, 24), positions=("early", "middle", "late", "spread"), prompts=16, seeds=2, budgets=(16, 48),
        why="3 token classes x 3 counts x 4 positions x 16 prompts x 2 seeds x 2 budgets = 2,304 conditions, "
            "seed 000's scale. Counts: one token alone, 6 (a fully random 256-token canvas holds 6.08 unused "
            "tokens on average at DiffusionGemma's vocabulary) and 24 (four times that). Positions: the "
            "canvas's first, middle and last third, and evenly spread. Prompts: all 16 built-in ones. "
            "Budgets: 48 denoising steps (the checkpoint's default) and 16 (a short budget, where early "
            "decisions weigh more). 768 matched cells of 3 token classes each.",
    ),
    "small": DesignLevels(
        counts=(1, 6), positions=("early", "late"), prompts=1, seeds=1, budgets=(3,),
        why="3 token classes x 2 counts x 2 positions x 1 prompt x 1 seed x 1 budget of 3 steps = 12 "
            "conditions in 4 matched cells: the design's machinery on a CPU in seconds, not a study.",
    ),
}

OUTCOMES: tuple[dict[str, str], ...] = (
    {"name": "first_pass_keeps", "level": "position", "unit": "proportion",
     "definition": "the first denoising pass's argmax at a planted position equals the planted token "
                   "(a mask symbol is never predicted back; an ordinary token may be)"},
    {"name": "final_replaced", "level": "position", "unit": "proportion",
     "definition": "the generated token at a planted position differs from the planted token"},
    {"name": "first_entropy", "level": "position", "unit": "nats",
     "definition": "entropy of the sampler's (temperature-scaled) distribution at a planted position on the "
                   "first pass, the quantity the entropy-bound sampler ranks positions by"},
    {"name": "first_accept_pass", "level": "position", "unit": "passes",
     "definition": "the first pass whose accepted set contains the planted position (1-based); a position "
                   "never accepted counts as budget + 1"},
    {"name": "text_changed", "level": "generation", "unit": "proportion",
     "definition": "the final text differs from the matched no-plant baseline (same prompt, seed, budget and "
                   "base noise, nothing planted)"},
    {"name": "tokens_changed", "level": "generation", "unit": "proportion",
     "definition": "fraction of the canvas's generated tokens that differ from the matched no-plant baseline"},
)
PRIMARY_OUTCOME = "first_pass_keeps"
DEFAULT_MARGINS = {"first_pass_keeps": 0.05, "final_replaced": 0.05, "first_entropy": 0.1,
                   "first_accept_pass": 1.0, "text_changed": 0.05, "tokens_changed": 0.02}
DECISION_RULE = (
    "Pairs: for every matched cell (prompt, seed, budget, count, position) the condition-level outcome of the "
    "unused condition minus that of the control condition; a position-level outcome is first averaged over "
    "the cell's planted positions. For each comparison and outcome: mean difference with a 95% t confidence "
    "interval; TOST = two one-sided paired t-tests of the mean difference against -margin and +margin; "
    "'equivalent' if the larger one-sided p-value is below alpha (equivalently, the 90% CI lies inside "
    "+-margin), else 'different' if the two-sided paired t-test p-value is below alpha, else 'inconclusive'. "
    "When all differences are identical (zero variance, n >= 2) no t statistic exists and no test is made: the "
    "verdict is 'degenerate: zero variance' with no p-value and no interval, never counted as equivalent "
    "(nor as different); fewer than 2 pairs is 'insufficient data'. "
    "Answer to the question: 'no' (unused tokens are not hidden masks) if the primary outcome is equivalent "
    "for both controls; 'yes' if it is different for both controls with the same sign; 'inconclusive' "
    "otherwise. Secondary outcomes are reported by the same rule, without multiplicity correction. The "
    "analysed runs are the single (batch of 1) runs; the batch safeguard is reported, never used to drop "
    "conditions."
)
SAFEGUARD = {
    "reference": "each condition run alone (a batch of 1): the result that is analysed",
    "batched": "each condition also run as a row of one batch: the conditions of one prompt, seed and budget, "
               "in plan order, cut into consecutive batches of --batch-size (never padded). The batches depend "
               "only on the plan and --batch-size, never on which conditions a resumed run still has to do "
               "(a batch is rerun whole when some of its conditions are already done); a condition alone in its "
               "batch is duplicated, so every batch has at least 2 rows",
    "compared": ["tokens", "stop", "accept_passes", "predictions", "entropy", "logits"],
    "rule": "the safeguard fires for a condition when any compared field of any of its batched rows differs "
            "from its single run, bit for bit; each firing is counted per field and listed by condition_id",
    "why": "with per-row random streams a row's draws do not depend on its batch, so any difference is the "
           "numerics' batch dependence (seed 000's safeguard found exactly this)",
}


@dataclass
class PlannedPrompt:
    prompt_id: str
    text: str
    token_ids: list[int]


@dataclass
class Factors:
    token_classes: list[str]
    counts: list[int]
    positions: list[str]
    prompts: list[PlannedPrompt]
    seeds: list[int]
    budgets: list[int]

    @property
    def n_conditions(self) -> int:
        levels = (self.token_classes, self.counts, self.positions, self.prompts, self.seeds, self.budgets)
        return math.prod(len(level) for level in levels)


@dataclass
class Analysis:
    comparisons: list[list[str]]
    primary_outcome: str
    margins: dict[str, float]
    alpha: float
    ci_level: float
    decision_rule: str


@dataclass
class NoisePlan:
    """The pre-registered design. Every field is hashed; change any and it is a different plan."""

    schema: str
    question: str
    design: str
    design_why: str
    seed: int
    model: ModelFacts
    generation: dict[str, Any]
    factors: Factors
    token_pools: TokenPools
    outcomes: list[dict[str, str]]
    analysis: Analysis
    safeguard: dict[str, Any]
    # plans of schema /3 only (studies.unused_tokens.first_pass); absent from the JSON of /1 and /2 plans, so
    # their hashes are what they were
    first_pass: FirstPassDesign | None = None
    # plans of schema /4 only (studies.unused_tokens.graded): absent from the JSON of earlier plans
    graded: GradedDesign | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("first_pass", "graded"):
            if data[name] is None:
                del data[name]
        if data["token_pools"]["strata"] is None:
            del data["token_pools"]["strata"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "NoisePlan":
        factors = dict(data["factors"], prompts=[PlannedPrompt(**p) for p in data["factors"]["prompts"]])
        first_pass = FirstPassDesign(**data["first_pass"]) if data.get("first_pass") is not None else None
        graded = GradedDesign(**data["graded"]) if data.get("graded") is not None else None
        return cls(**{**data, "model": ModelFacts(**data["model"]), "factors": Factors(**factors),
                      "token_pools": TokenPools(**data["token_pools"]), "analysis": Analysis(**data["analysis"]),
                      "first_pass": first_pass, "graded": graded})


def canonical_json(data: dict[str, Any]) -> str:
    """The one text a plan hashes as: sorted keys, 2-space indent, ASCII, trailing newline."""
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n"


def hash_plan_dict(data: dict[str, Any]) -> str:
    found = non_finite_at(data)
    if found is not None:  # the readers refuse such a file first; this keeps any other caller to one line
        raise CanvaslabError(f"the plan holds a non-finite number ({found[0]} is {found[1]}), which JSON has no "
                             "spelling for: it cannot be registered")
    return hashlib.sha256(canonical_json(data).encode("ascii")).hexdigest()


def plan_hash(plan: NoisePlan) -> str:
    """sha256 of the plan's canonical JSON: equal to ``sha256sum plan.json`` for a plan written here."""
    return hash_plan_dict(plan.to_dict())


def _planned_prompts(count: int, tokenizer: PreTrainedTokenizerBase) -> list[PlannedPrompt]:
    return [PlannedPrompt(p.prompt_id, p.text, list(tokenizer(p.text)["input_ids"])) for p in builtin_prompts(count)]


def build_plan(facts: ModelFacts, tokenizer: PreTrainedTokenizerBase, pools: TokenPools, *, design: str = "default",
               seed: int = 0, margin: float | None = None) -> NoisePlan:
    """The plan for ``design`` (``default``: 2,304 conditions; ``small``: 12, for CPU tests).

    ``seed`` is the first generation seed (the seed levels are ``seed, seed + 1, ...``) and also seeds the
    draws of planted positions and tokens. ``margin`` replaces the primary outcome's equivalence margin.
    """
    if design not in DESIGNS:
        raise CanvaslabError(f"--design {design!r} is not one of: {', '.join(DESIGNS)}")
    if margin is not None and not (margin > 0 and math.isfinite(margin)):
        raise CanvaslabError(f"--margin must be a positive finite number, got {margin}")
    if seed < 0:
        raise CanvaslabError(f"--seed must be >= 0, got {seed}")
    levels = DESIGNS[design]
    margins = dict(DEFAULT_MARGINS, **({PRIMARY_OUTCOME: float(margin)} if margin is not None else {}))
    factors = Factors(token_classes=list(TOKEN_CLASSES), counts=list(levels.counts), positions=list(levels.positions),
                      prompts=_planned_prompts(levels.prompts, tokenizer),
                      seeds=[seed + i for i in range(levels.seeds)], budgets=list(levels.budgets))
    generation = {"rng": "row", "copy_prompt_cache": False, "max_new_tokens": facts.canvas_length,
                  "budget_sets": "max_denoising_steps", "other_settings": "the model's generation_defaults"}
    analysis = Analysis(comparisons=[["unused", "random"], ["unused", "rare"]], primary_outcome=PRIMARY_OUTCOME,
                        margins=margins, alpha=0.05, ci_level=0.95, decision_rule=DECISION_RULE)
    return NoisePlan(schema=SCHEMA_ID, question=QUESTION, design=design, design_why=levels.why, seed=seed,
                     model=facts, generation=generation, factors=factors, token_pools=pools,
                     outcomes=[dict(o) for o in OUTCOMES], analysis=analysis, safeguard=dict(SAFEGUARD))


def save_plan(plan: NoisePlan, directory: str | Path) -> str:
    """Write ``plan.json`` (canonical) and ``plan.sha256``; returns the hash."""
    directory = Path(directory)
    digest = plan_hash(plan)
    write_text_atomic(directory / PLAN_FILE, canonical_json(plan.to_dict()))
    write_text_atomic(directory / HASH_FILE, f"{digest}  {PLAN_FILE}\n")
    return digest


def _read_plan_dict(path: Path) -> dict[str, Any]:
    if not os.path.lexists(path):
        raise CanvaslabError(f"{path} does not exist: write a plan first with `canvaslab noise-study plan --out DIR`")
    try:
        data = read_json(path, max_bytes=PLAN_LIMIT)
    except NotRegularFile as error:
        raise CanvaslabError(f"{path} is not a file ({error.kind}): write a plan first with `canvaslab noise-study "
                             "plan --out DIR`") from None
    except (OSError, ValueError) as error:
        raise CanvaslabError(f"{path} is not readable JSON: {error}") from None
    refuse_non_finite(data, path, "write a new plan with `canvaslab noise-study plan`")
    try:
        jsonschema.validate(data, PLAN_SCHEMA)
    except jsonschema.ValidationError as error:
        where = "/".join(str(part) for part in error.absolute_path) or "(top level)"
        raise CanvaslabError(f"{path} is not a noise-study plan: at {where}: {error.message}") from None
    return data


def recorded_hash(directory: str | Path) -> str:
    """The hash ``plan.sha256`` registered (its first field, ``sha256sum`` format)."""
    path = Path(directory) / HASH_FILE
    # Where results exist the plan cannot be registered again: the file must come back (the store's own
    # plan.json names the hash, as registered_plan_sha256).
    restore = "restore it, or write a new plan in a new folder with `canvaslab noise-study plan`"
    if not os.path.lexists(path):
        raise CanvaslabError(f"{path} is missing: the plan's registration is gone; {restore}")
    try:
        fields = read_bytes(path, max_bytes=HASH_LIMIT).decode("ascii", errors="replace").split()
    except NotRegularFile as error:
        raise CanvaslabError(f"{path} is {error.kind}, not a file: the plan's registration is gone; "
                             f"{restore}") from None
    except (OSError, ValueError) as error:
        raise CanvaslabError(f"{path} cannot be read ({error}): the plan's registration is gone; {restore}") from None
    if not fields:
        raise CanvaslabError(f"{path} is empty: the plan's registration is gone; {restore}")
    return fields[0]


def _refuse_results(directory: Path) -> None:
    """A plan with results is never replaced (checked before any model runs)."""
    from canvaslab.studies.engine.plan import STORE_DIR

    if any((directory / STORE_DIR / "records").glob("*.json")) or (directory / "results.jsonl").exists():
        raise CanvaslabError(f"{directory} already holds results of a registered plan; a plan with results is never "
                             "replaced: use a new folder")


def _graded_plan(model: str, facts: ModelFacts, pools: TokenPools, *, design: str, margin: float | None,
                 token_counts: str | Path | None, seed: int, layers: int | None, model_seed: int, suite: str,
                 pilot: str | Path | None, device: str, dtype: str, max_prompts: int | None) -> NoisePlan:
    """A /4 plan: checked before the model loads (counts file, dtype, pilot), built in float32."""
    from canvaslab.models import load_model
    from canvaslab.studies.unused_tokens import graded
    from canvaslab.studies.unused_tokens.first_pass_plan import check_choices
    from canvaslab.studies.unused_tokens.graded_plan import build_graded_plan, graded_strata, graded_pilot_statistics

    if (design == "graded-confirmatory") != (pilot is not None):
        raise CanvaslabError("--pilot DIR (a finished graded-pilot) is needed by --design graded-confirmatory, and "
                             "only by it")
    check_choices("confirmatory" if pilot is not None else design, margin, seed, None if pilot is None else Path(pilot))
    if dtype not in ("auto", graded.DTYPE):
        raise CanvaslabError(f"--dtype {dtype}: the graded designs fix the outcome's dtype at {graded.DTYPE}")
    graded_strata(pools, facts.vocab_size, token_counts)  # the counts file's refusals, before the model loads
    statistics = None if pilot is None else graded_pilot_statistics(Path(pilot), facts, suite)
    loaded = load_model(model, dtype=graded.DTYPE, device=device, layers=layers, seed=model_seed)
    return build_graded_plan(loaded, facts, pools, design=design, seed=seed, margin=margin, suite=suite,
                             statistics=statistics, token_counts=token_counts, max_prompts=max_prompts)


def plan_deviations(plan: NoisePlan) -> list[str]:
    """Where today's analysis departs from a rule an older plan states (empty for a current plan)."""
    return list(OLDER_SCHEMAS.get(plan.schema, []))


def load_plan(directory: str | Path) -> tuple[NoisePlan, str]:
    """The plan in ``directory`` and its hash, refusing one whose content no longer matches ``plan.sha256``."""
    data = _read_plan_dict(Path(directory) / PLAN_FILE)
    digest, registered = hash_plan_dict(data), recorded_hash(directory)
    if digest != registered:
        raise CanvaslabError(f"{Path(directory) / PLAN_FILE} was edited after it was registered (content hash "
                             f"{digest[:12]}..., {HASH_FILE} says {registered[:12]}...): write a new plan with "
                             "`canvaslab noise-study plan`")
    plan = NoisePlan.from_dict(data)
    check_first_pass_plan(plan)
    check_graded_plan(plan)
    return plan, digest


def register_plan(directory: str | Path, model: str, *, design: str = "default", margin: float | None = None,
                  token_counts: str | Path | None = None, seed: int = 0, layers: int | None = None,
                  model_seed: int = 0, replace: bool = True, suite: str = "mini", pilot: str | Path | None = None,
                  device: str = "cpu", dtype: str = "auto", max_prompts: int | None = None) -> tuple[NoisePlan, str]:
    """Build the plan these choices make and register it in ``directory``; returns it and its hash.

    The ``/3`` designs (``first_pass.DESIGNS``) run the model's first pass on ``device`` to find each prompt's
    content positions, from probe suite ``suite``; ``confirmatory`` is sized from the finished ``pilot`` folder.
    A folder holding results of a registered plan is refused (a plan with results is never replaced); so is a
    folder holding another plan when ``replace`` is False (a run must not redefine a registered study)."""
    from canvaslab.studies.unused_tokens.model_facts import read_model_facts
    from canvaslab.studies.unused_tokens.token_pools import build_token_pools

    directory = Path(directory)
    designs = (*DESIGNS, *FIRST_PASS_DESIGNS, *GRADED_DESIGNS)
    if design not in designs:
        raise CanvaslabError(f"--design {design!r} is not one of: {', '.join(designs)}")
    if max_prompts is not None and design != "graded-confirmatory":
        raise CanvaslabError("--max-prompts is for --design graded-confirmatory only")
    facts, tokenizer = read_model_facts(model, layers, model_seed)
    pools = build_token_pools(tokenizer, facts.vocab_size, facts.generation_defaults, token_counts)
    if design in GRADED_DESIGNS:
        plan = _graded_plan(model, facts, pools, design=design, margin=margin, token_counts=token_counts, seed=seed,
                            layers=layers, model_seed=model_seed, suite=suite, pilot=pilot, device=device,
                            dtype=dtype, max_prompts=max_prompts)
    elif design in FIRST_PASS_DESIGNS:
        from canvaslab.models import load_model
        from canvaslab.studies.unused_tokens.first_pass import pilot_statistics
        from canvaslab.studies.unused_tokens.first_pass_plan import build_first_pass_plan, check_choices

        check_choices(design, margin, seed, None if pilot is None else Path(pilot))
        statistics = None if pilot is None else pilot_statistics(Path(pilot), facts, pools, suite)
        loaded = load_model(model, dtype=dtype, device=device, layers=layers, seed=model_seed)
        plan = build_first_pass_plan(loaded, facts, pools, design=design, seed=seed, margin=margin, suite=suite,
                                     statistics=statistics, dtype=dtype)
    else:
        if pilot is not None:
            raise CanvaslabError("--pilot is for --design confirmatory only")
        plan = build_plan(facts, tokenizer, pools, design=design, seed=seed, margin=margin)
    if (directory / PLAN_FILE).exists() and recorded_hash(directory) == plan_hash(plan):
        return plan, plan_hash(plan)  # registered already: nothing to write
    _refuse_results(directory)
    if (directory / PLAN_FILE).exists() and not replace:
        raise CanvaslabError(f"{directory} holds another registered plan than this one: use a new folder, or "
                             "register this plan there first")
    return plan, save_plan(plan, directory)
