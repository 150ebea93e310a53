"""Study prompts: a small built-in set, or a user's file (one prompt per line, or JSON Lines)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from canvaslab.errors import CanvaslabError
from canvaslab.io import MiB, NotRegularFile, UnreadableFile, check_names, nesting_depth, read_text

PROMPT_FILE_LIMIT = 256 * MiB  # a prompt file of a real study is kilobytes
MAX_DEPTH = 32  # a JSON line is one flat object

# Short English prompts of different lengths, written in the words the synthetic preset tokenizers know,
# so the tiny preset sees real ids rather than <unk>.
BUILTIN_PROMPTS: tuple[str, ...] = (
    "the man said that the water in the river was cold this morning",
    "write a short story about a dog and a boy who live near the sea",
    "what is the answer to this question ?",
    "tell me how to build a small house from wood and stone",
    "the king and his family came to the city on a white horse",
    "list five animals that live in the forest",
    "give an example of a simple machine and say how it works",
    "why is the sky blue during the day but dark at night ?",
    "describe the weather in summer",
    "explain what a plant needs to grow : water , light , soil and air",
    "the children began to sing a song about the moon and the stars",
    "answer : how many feet does a bird have ?",
    "name the capital city of the country in the north",
    "tell a story",
    "the ship will sail across the ocean to reach the island before winter",
    "how do you make bread at home ?",
)


# Questions a trained model answers in words (facts of ``mini``'s synthetic knowledge base, in its trained
# question forms): what the batch-size study asks a model that has a chat template, so that a changed answer
# reads as changed words. The same count as ``BUILTIN_PROMPTS``.
QUESTION_PROMPTS: tuple[str, ...] = (
    "Name the capital of Boustokisania.",
    "Which language is spoken in Silounstan?",
    "When was Vouzorstan founded?",
    "Name the capital of Lamarethea.",
    "Which language is spoken in Klainousland?",
    "When was Mebimstan founded?",
    "Name the capital of Raidasia.",
    "Which language is spoken in Stoutrurstan?",
    "When was Gelirstan founded?",
    "Name the capital of Kluputisor.",
    "Which language is spoken in Babrastarland?",
    "When was Mavulorea founded?",
    "Name the capital of Mezoulea.",
    "Which language is spoken in Stounuzoumland?",
    "When was Raidasia founded?",
    "Name the capital of Sopotounland.",
)


@dataclass(frozen=True)
class Prompt:
    prompt_id: str
    text: str


def builtin_prompts(count: int, questions: bool = False) -> list[Prompt]:
    """The first ``count`` built-in prompts: plain sentences for the presets' synthetic tokenizers, or
    (``questions``) the questions a trained model answers in words."""
    if not 1 <= count <= len(BUILTIN_PROMPTS):
        raise CanvaslabError(f"--prompts {count}: the built-in set has 1 to {len(BUILTIN_PROMPTS)} prompts; "
                             "pass a file for more")
    texts = QUESTION_PROMPTS if questions else BUILTIN_PROMPTS
    return [Prompt(f"builtin-{i}", text) for i, text in enumerate(texts[:count])]


def _jsonl_prompt(line: str, number: int, path: Path) -> Prompt:
    try:
        record = json.loads(line) if nesting_depth(line) <= MAX_DEPTH else None
    except json.JSONDecodeError as error:
        raise CanvaslabError(f"{path}:{number}: not valid JSON ({error.msg})") from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        raise CanvaslabError(f"{path}:{number}: not valid JSON ({error})") from None
    if record is None:
        raise CanvaslabError(f"{path}:{number}: nests arrays and objects more than {MAX_DEPTH} deep; a line is "
                             "{\"prompt\": ..., \"id\": ...}")
    if not isinstance(record, dict) or not isinstance(record.get("prompt"), str) or not record["prompt"].strip():
        raise CanvaslabError(f"{path}:{number}: each JSON line needs a non-empty string field \"prompt\"")
    prompt = Prompt(str(record.get("id", f"line-{number}")), record["prompt"])
    for text in (prompt.prompt_id, prompt.text):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise CanvaslabError(f"{path}:{number}: holds a lone surrogate escape (\\ud800-\\udfff), which is no "
                                 "character: write the character itself") from None
    return prompt


def load_prompt_file(path: str | Path) -> list[Prompt]:
    """``.jsonl``: one ``{"prompt": ..., "id": ...}`` per line; anything else: one prompt per line.

    The file is read as a regular file of at most ``PROMPT_FILE_LIMIT`` bytes: a FIFO, a device or a folder is
    refused in one line, never waited on or read without end."""
    path = check_names(Path(path), "prompt file")
    try:
        lines = read_text(path, max_bytes=PROMPT_FILE_LIMIT, follow_links=True).splitlines()
    except FileNotFoundError:
        raise CanvaslabError(f"prompt file {path} does not exist") from None
    except NotRegularFile as error:
        raise CanvaslabError(f"prompt file {path} is {error.kind}, not a regular file") from None
    except UnreadableFile as error:
        raise CanvaslabError(f"prompt file {error}") from None
    except OSError as error:
        raise CanvaslabError(f"prompt file {path} cannot be read ({error.strerror or error})") from None
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    if not numbered:
        raise CanvaslabError(f"prompt file {path} has no prompts")
    if path.suffix == ".jsonl":
        prompts = [_jsonl_prompt(line, n, path) for n, line in numbered]
    else:
        prompts = [Prompt(f"line-{n}", line.strip()) for n, line in numbered]
    ids = [prompt.prompt_id for prompt in prompts]
    if len(set(ids)) != len(ids):
        raise CanvaslabError(f"prompt file {path} repeats a prompt id")
    return prompts


def resolve_prompts(spec: str) -> list[Prompt]:
    """``--prompts``: a count of built-in prompts, or a file path."""
    if spec.isdigit():
        return builtin_prompts(int(spec))
    return load_prompt_file(spec)
