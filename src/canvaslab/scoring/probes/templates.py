"""The wording of each regime's prompt: one place, so every probe of a regime asks the same way.

Templates ask for an answer shape the scorer can read (a final number, a fenced code block, a bare JSON
object) without forcing it: the scorers are tolerant (``extraction``), so a model that ignores the
format is judged on its content where possible. Changing a template changes the study; the exploratory
half is where such choices are frozen.
"""

from __future__ import annotations

import json
from typing import Any


def math_prompt(question: str) -> str:
    """GSM8K: reason briefly, end with the number (the scorer takes the last number in the answer)."""
    return (
        "Solve the following math word problem. Reason briefly, then give the final answer as a "
        f"number on the last line in the form '#### <number>'.\n\n{question}"
    )


def code_completion_prompt(code_prefix: str) -> str:
    """HumanEval: complete a function whose signature and docstring are given."""
    code = code_prefix.lstrip("\n")  # HumanEval prompts often open with blank lines
    return (
        "Complete the following Python function. Reply with the complete function in one "
        f"```python code block.\n\n```python\n{code}```"
    )


def code_synthesis_prompt(description: str, example_test: str) -> str:
    """MBPP-style: a one-sentence task plus one of its tests, so the call signature is unambiguous."""
    return (
        f"{description}\nYour code should pass this test:\n\n{example_test}\n\n"
        "Reply with the Python code in one ```python code block."
    )


def factual_prompt(question: str) -> str:
    """Short factual recall: a short answer is asked for (the scorer matches aliases inside it)."""
    return f"Answer the question with a short answer.\n\nQuestion: {question}"


def open_ended_prompt(instruction: str) -> str:
    """Open-ended instructions are given as they are."""
    return instruction


def json_prompt(instruction: str, schema: dict[str, Any]) -> str:
    """Constrained JSON: the instruction names the values, the schema constrains the shape."""
    return (
        f"{instruction}\nThe object must validate against this JSON Schema:\n"
        f"{json.dumps(schema, separators=(',', ':'))}\nReply with the JSON object only."
    )
