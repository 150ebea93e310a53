"""JSON Schema of ``plan.json``: a hand-edited or truncated plan fails with the field that is wrong,
as one line, instead of a KeyError deep inside the run."""

from __future__ import annotations

_INT_LIST = {"type": "array", "items": {"type": "integer"}}
_STR_LIST = {"type": "array", "items": {"type": "string"}}
_POSITIVE_INT_LIST = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 1}}


def _object(properties: dict, extra: bool = False, optional: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "required": sorted(set(properties) - set(optional)), "properties": properties,
            "additionalProperties": extra}


PLAN_SCHEMA = _object({
    "schema": {"enum": ["canvaslab.noise-study.plan/1", "canvaslab.noise-study.plan/2", "canvaslab.noise-study.plan/3",
                        "canvaslab.noise-study.plan/4"]},
    "question": {"type": "string"},
    "design": {"type": "string"},
    "design_why": {"type": "string"},
    "seed": {"type": "integer", "minimum": 0},
    "model": _object({
        "spec": {"type": "string"},
        "layers": {"type": ["integer", "null"], "minimum": 1},
        "model_seed": {"type": "integer"},
        "vocab_size": {"type": "integer", "minimum": 1},
        "canvas_length": {"type": "integer", "minimum": 1},
        "generation_defaults": {"type": "object"},
        "weights": {"type": ["string", "null"]},
    }, optional=("weights",)),  # plans registered before the weights' fingerprint have none
    "generation": _object({
        "rng": {"const": "row"},  # the pairing and the safeguard rest on per-row random streams
        "copy_prompt_cache": {"type": "boolean"},
        "max_new_tokens": {"type": "integer", "minimum": 1},
        "budget_sets": {"type": "string"},
        "other_settings": {"type": "string"},
    }),
    "factors": _object({
        "token_classes": {"type": "array", "minItems": 2, "items": {"enum": [
            "unused", "random", "rare", "never_seen", "seen_1_2", "seen_3_10", "seen_11_100", "common"]}},
        "counts": _POSITIVE_INT_LIST,
        "positions": {"type": "array", "minItems": 1, "items": {"enum": ["early", "middle", "late", "spread", "content", "later"]}},
        "prompts": {"type": "array", "minItems": 1, "items": _object({
            "prompt_id": {"type": "string"}, "text": {"type": "string"},
            "token_ids": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
        })},
        "seeds": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
        "budgets": _POSITIVE_INT_LIST,
    }),
    "token_pools": _object({
        "unused_blocks": {"type": "array", "items": {**_INT_LIST, "minItems": 2, "maxItems": 2}},
        "excluded_ids": _INT_LIST,
        "rare_ids": {**_INT_LIST, "minItems": 1},
        "rare_source": {"type": "object", "required": ["kind", "rule"]},
        "strata": {"type": "object", "additionalProperties": {**_INT_LIST, "minItems": 1}},
    }, optional=("strata",)),
    "outcomes": {"type": "array", "minItems": 1, "items": _object({
        "name": {"type": "string"}, "level": {"enum": ["position", "generation"]},
        "unit": {"type": "string"}, "definition": {"type": "string"},
    })},
    "analysis": _object({
        "comparisons": {"type": "array", "minItems": 1, "items": {**_STR_LIST, "minItems": 2, "maxItems": 2}},
        "primary_outcome": {"type": "string"},
        "margins": {"type": "object", "additionalProperties": {"type": "number", "exclusiveMinimum": 0}},
        "alpha": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "ci_level": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "decision_rule": {"type": "string"},
    }),
    "safeguard": {"type": "object", "required": ["compared"]},
    # /3 plans only
    "first_pass": _object({
        "suite": {"type": "string"},
        "split": {"type": "string"},
        "regimes": _STR_LIST,
        "chat_template": {"type": "boolean"},
        "neighbour_radius": {"type": "integer", "minimum": 0, "maximum": 16},
        "content_positions": {"type": "object", "additionalProperties": {**_INT_LIST, "minItems": 1}},
        "baseline_special_share": {"type": "object", "additionalProperties": {"type": "number"}},
        "excluded_prompts": {"type": "array", "items": {"type": "object"}},
        "margin_why": {"type": "string"},
        "power": {"type": ["object", "null"]},
        "registration": {"type": "object"},
    }),
    # /4 plans only
    "graded": _object({
        "dtype": {"const": "float32"},
        "strata": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["name", "range", "id_count"]}},
        "counts_source": {"type": "object", "required": ["sha256"]},
        "later": {"type": "object", "required": ["passes", "canvases", "content_positions", "committed_share"]},
    }),
}, optional=("first_pass", "graded"))
# A /3 plan must carry its first-pass design, and only a /3 plan may
PLAN_SCHEMA["allOf"] = [
    {"if": {"properties": {"schema": {"enum": ["canvaslab.noise-study.plan/3", "canvaslab.noise-study.plan/4"]}}},
     "then": {"required": ["first_pass"]}, "else": {"not": {"required": ["first_pass"]}}},
    # the frequency-graded design (/4) carries its strata, dtype and later canvases, and only /4 does
    {"if": {"properties": {"schema": {"const": "canvaslab.noise-study.plan/4"}}},
     "then": {"required": ["graded"]}, "else": {"not": {"required": ["graded"]}}},
]
