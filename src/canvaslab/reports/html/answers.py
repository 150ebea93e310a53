"""The batch-size study's effect as text: per prompt and batch size, row 0's final answer beside B=1's with the
words that differ marked, and the pass where the two parted.

When no answer changed, one sentence says so and names the largest numeric difference the study measured
(the first divergence's largest absolute difference), so a page of identical texts still says how close the
runs came to changing one.
"""

from __future__ import annotations

import difflib
import re
from canvaslab.reports.html.canvas_grid import DIFFERS, size_series
from canvaslab.reports.html.markup import esc, plural, table
from canvaslab.reports.readers.batch_study import BatchRun, BatchStudy

_PIECES = re.compile(r"\s+|[^\s]+")


def marked_words(text: str, reference: str) -> str:
    """``text`` as HTML with each word that is not in ``reference`` at the matching place inside ``<mark>``."""
    ours, theirs = _PIECES.findall(text), _PIECES.findall(reference)
    html = []
    for tag, _, _, start, end in difflib.SequenceMatcher(a=theirs, b=ours, autojunk=False).get_opcodes():
        piece = esc("".join(ours[start:end]))
        html.append(piece if tag == "equal" or not piece.strip() else f"<mark>{piece}</mark>")
    return "".join(html)


def parted_at(study: BatchStudy, run: BatchRun) -> str:
    """Where the run left B=1: the first denoising pass whose canvas shows another token, else the first
    numeric difference (the canvases agreed), else nowhere."""
    reference = study.reference_paths.get(run.prompt_id)
    if run.path and reference:
        series = size_series(run.path, reference, run.batch_size, run.stop_passes)
        for index, state in enumerate(series["passes"]):
            if DIFFERS in state["state"]:
                return f"denoising pass {index + 1} (canvas {state['c']}, pass {state['s'] + 1})"
    first = run.record.get("first_divergence")
    if first:
        return f"numbers only, from {first['pass']} (no committed token differs)"
    return "never: identical to B=1"


def _answer(run: BatchRun, side: str) -> str | None:
    text = (run.record.get(side) or {}).get("text")
    return text if isinstance(text, str) else None


def answer_rows(study: BatchStudy, prompt: str) -> list[list[str]]:
    """Rows of HTML cells: batch size, final answer (changed words marked), verdict, where it parted."""
    runs = study.runs_of(prompt)
    reference = next((_answer(run, "reference") for run in runs if _answer(run, "reference") is not None), None)
    rows = [["1 (reference)", f'<span class="answer">{esc(reference)}</span>', "reference", "-"]]
    for run in runs:
        text = _answer(run, "run")
        if text is None or reference is None:
            cell, verdict = esc(text), "not recorded"
        else:
            cell = marked_words(text, reference)
            verdict = "changed" if run.record.get("text_changed") else "same text"
        rows.append([str(run.batch_size), f'<span class="answer">{cell}</span>', verdict, esc(parted_at(study, run))])
    return rows


def largest_difference(study: BatchStudy) -> tuple[float, BatchRun] | None:
    """The largest absolute difference of any run's first diverging output, and that run."""
    found = [(float(first["max_abs_diff"]), run) for run in study.runs
             if isinstance(first := run.record.get("first_divergence"), dict)
             and isinstance(first.get("max_abs_diff"), (int, float))]
    return max(found, key=lambda item: item[0]) if found else None


def verdict_sentence(study: BatchStudy) -> str:
    """One sentence, in words, of whether batching changed any answer on this machine."""
    runs = study.runs
    changed = [run for run in runs if run.record.get("text_changed")]
    if changed:
        prompts = list(dict.fromkeys(run.prompt_id for run in changed))
        sizes = sorted({run.batch_size for run in changed})
        return (f"Batching changed the answer in {len(changed)} of {plural(len(runs), 'run')}: "
                f"{plural(len(prompts), 'prompt')} ({', '.join(prompts)}) at batch "
                f"{'size' if len(sizes) == 1 else 'sizes'} {', '.join(map(str, sizes))}.")
    diverged = sum(1 for run in runs if run.record.get("diverged"))
    largest = largest_difference(study)
    numbers = ("" if largest is None else
               f" The largest numeric difference: {largest[0]:.3g} (prompt {largest[1].prompt_id}, "
               f"B={largest[1].batch_size}, at {largest[1].record['first_divergence']['pass']}).")
    if not diverged:
        return f"No answer changed on this machine: all {plural(len(runs), 'run')} are identical to B=1, bit for bit."
    return (f"No answer changed on this machine: all {plural(len(runs), 'run')} give B=1's text; "
            f"{diverged} of them differ from B=1 in their numbers only.{numbers}")


def answers_block(study: BatchStudy, prompt: str) -> str:
    return table(("batch size", "final answer (words differing from B=1 marked)", "text", "parted from B=1 at"),
                 answer_rows(study, prompt), raw=True)


__all__ = ["answer_rows", "answers_block", "largest_difference", "marked_words", "parted_at", "verdict_sentence"]
