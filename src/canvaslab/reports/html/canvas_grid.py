"""The denoising path's data: per batch size, the state of each of row 0's canvas positions at each pass.

A cell is *noise* (not accepted on this pass), *committed* (accepted), or *differs from B=1*: accepted
here or at B=1 on the same pass, with another token or only on one side. Noise cells are never compared
(their tokens are fresh random draws). Passes are matched by (canvas, pass within canvas); when B=1
stopped earlier, a pass is compared with B=1's last pass of that canvas (its final canvas).

The page receives this compactly: one state character per position and pass, B=1's tokens and entropy
in full, other batch sizes' tokens and entropy only where they differ from the matched B=1 pass.
"""

from __future__ import annotations

from typing import Any, Sequence

from canvaslab.reports.readers.batch_study import BatchStudy, CanvasPass

NOISE, COMMITTED, DIFFERS = "0", "1", "2"
ENTROPY_SCALE = 100  # entropy is sent in hundredths of a nat


def matched_reference(reference: Sequence[CanvasPass], canvas: int, step: int) -> int | None:
    """Index of B=1's pass to compare with (canvas, step): the same, or that canvas's last one."""
    candidates = [i for i, p in enumerate(reference) if p.canvas == canvas and p.step <= step]
    return candidates[-1] if candidates else None


def cell_states(state: CanvasPass, reference: CanvasPass | None) -> str:
    """One character per position: noise / committed / differs from the matched B=1 pass."""
    cells = []
    for position, (token, accepted) in enumerate(zip(state.tokens, state.accepted)):
        if reference is not None:
            ref_accepted = reference.accepted[position]
            if accepted != ref_accepted or (accepted and token != reference.tokens[position]):
                cells.append(DIFFERS)
                continue
        cells.append(COMMITTED if accepted else NOISE)
    return "".join(cells)


def _entropy(values: Sequence[float] | None) -> list[int] | None:
    return None if values is None else [round(v * ENTROPY_SCALE) for v in values]


def _sparse(values: Sequence[Any] | None, base: Sequence[Any] | None) -> dict[str, Any] | list | None:
    """Full list without a base; else ``{position: value}`` where the value differs from the base."""
    if values is None:
        return None
    if base is None or len(base) != len(values):
        return list(values)
    return {str(i): v for i, (v, b) in enumerate(zip(values, base)) if v != b}


def size_series(path: Sequence[CanvasPass], reference: Sequence[CanvasPass] | None, batch_size: int,
                stops: Sequence[int | None]) -> dict[str, Any]:
    """One batch size's passes for the page (``reference`` None for B=1 itself)."""
    passes = []
    for state in path:
        index = matched_reference(reference, state.canvas, state.step) if reference else None
        base = reference[index] if index is not None else None
        entropy = _entropy(state.entropy)
        passes.append({
            "c": state.canvas, "s": state.step, "ref": index, "state": cell_states(state, base),
            "tok": _sparse(state.tokens, base.tokens if base else None),
            "ent": _sparse(entropy, _entropy(base.entropy) if base else None),
        })
    return {"B": batch_size, "stops": list(stops), "passes": passes}


def canvas_dataset(study: BatchStudy, prompt_id: str, key: str, title: str) -> dict[str, Any] | None:
    """Everything the page's canvas grids need for one prompt of one study, or None if not recorded."""
    reference = study.reference_paths.get(prompt_id)
    runs = [run for run in study.runs_of(prompt_id) if run.path]
    if not reference or not runs:
        return None
    sizes = [size_series(reference, None, 1, study.reference_stops.get(prompt_id, []))]
    sizes += [size_series(run.path, reference, run.batch_size, run.stop_passes) for run in runs]
    used = {t for p in reference for t in p.tokens} | {
        int(t) for run in sizes[1:] for p in run["passes"] if isinstance(p["tok"], dict) for t in p["tok"].values()}
    used |= {t for run in sizes[1:] for p in run["passes"] if isinstance(p["tok"], list) for t in p["tok"]}
    return {
        "key": key, "title": title, "prompt": prompt_id, "width": len(reference[0].tokens), "sizes": sizes,
        "text": {str(t): study.token_text[t] for t in sorted(used) if t in study.token_text},
    }


def state_counts(series: dict[str, Any]) -> list[dict[str, int]]:
    """Per pass of one batch size: how many cells are noise, committed and differing (what the grid shows)."""
    return [{"noise": p["state"].count(NOISE), "committed": p["state"].count(COMMITTED),
             "differs": p["state"].count(DIFFERS)} for p in series["passes"]]


def showcase_prompt(study: BatchStudy) -> str | None:
    """The prompt the page replays: the first whose text changed, else the first diverged, else the first."""
    for test in ("text_changed", "diverged"):
        for prompt in study.prompt_ids:
            if any(run.record.get(test) for run in study.runs_of(prompt)) and prompt in study.reference_paths:
                return prompt
    recorded = [p for p in study.prompt_ids if p in study.reference_paths]
    return recorded[0] if recorded else (study.prompt_ids[0] if study.prompt_ids else None)
