"""The commit-order page's drill-down and its autoregressive baseline: every generation's prompt, answer and
scorer's verdict beside the baseline's answer to the same prompt, and the baseline's accuracy per regime.

The baseline is the sibling model's greedy generations (``baseline.json`` beside ``order_metrics.json``, summed
up in the metrics' ``baseline``). A code generation shows the sandbox's output when its trace recorded it.
"""

from __future__ import annotations

from typing import Any

from canvaslab.io import read_json
from canvaslab.reports.html.markup import esc, number, plural
from canvaslab.reports.readers import RESULT_LIMIT, is_file
from canvaslab.reports.readers.order_metrics import OrderStudy, iter_traces

MAX_DRILL_ROWS = 2_000  # generations listed on the page; the traces hold them all
SANDBOX_KEYS = ("sandbox", "sandbox_output", "stdout", "stderr")  # what a code trace may carry of its run
BASELINE_FILE = "baseline.json"


def baseline_accuracy(study: OrderStudy, regime: str) -> str:
    """The autoregressive baseline's accuracy in ``regime``, with its count, or "-" when it was not run."""
    summary = ((study.metrics.get("baseline") or {}).get("regimes") or {}).get(regime)
    if not summary:
        return "-"
    if summary.get("accuracy") is None:
        return f"not scored ({plural(int(summary.get('n') or 0), 'generation')})"
    return f"{number(summary['accuracy'])} (n={summary.get('n_scored', summary.get('n'))})"


def baseline_answers(study: OrderStudy) -> dict[str, dict[str, Any]]:
    """The baseline's generation per prompt id (``probe_id``), from ``baseline.json`` when it lies beside."""
    path = study.source.parent / BASELINE_FILE
    if not is_file(path):
        return {}
    data = read_json(path, max_bytes=RESULT_LIMIT)
    return {str(g.get("probe_id")): g for g in data.get("generations", []) if isinstance(g, dict)}


def verdict(correct: Any) -> str:
    return "correct" if correct is True else "wrong" if correct is False else "not scored"


def _sandbox(extra: dict[str, Any], regime: str) -> str:
    found = [f"<pre>{esc(extra[key])}</pre>" for key in SANDBOX_KEYS if extra.get(key)]
    if found:
        return "".join(found)
    return '<span class="muted">sandbox output not recorded</span>' if "code" in regime else "-"


def drill_down(study: OrderStudy) -> str:
    """Every generation (up to ``MAX_DRILL_ROWS``), folded: prompt, answer, verdict, sandbox, baseline's answer."""
    if not study.trace_files:
        return ""
    baseline = baseline_answers(study)
    rows, total = [], 0
    for trace in iter_traces(study.trace_files):
        total += 1
        if len(rows) >= MAX_DRILL_ROWS:
            continue
        extra = trace.extra or {}
        ar = baseline.get(trace.prompt_id) or {}
        rows.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in (
            esc(trace.generation_id), esc(trace.regime), esc(extra.get("prompt")),
            f'<span class="answer">{esc(extra.get("text"))}</span>', verdict(trace.correct),
            _sandbox(extra, trace.regime),
            f'<span class="answer">{esc(ar.get("text"))}</span>' if ar else "-",
            verdict(ar.get("correct")) if ar else "-")) + "</tr>")
    listed = "" if total <= MAX_DRILL_ROWS else f" (the first {MAX_DRILL_ROWS} listed)"
    head = "".join(f'<th scope="col">{h}</th>' for h in (
        "generation", "regime", "prompt", "answer", "verdict", "sandbox (code)", "baseline's answer",
        "baseline's verdict"))
    return (f'<details class="drill"><summary>every generation: {plural(total, "generation")}{listed}, with its '
            f'prompt, answer, the scorer\'s verdict and the autoregressive baseline\'s answer</summary>'
            f'<div class="scroll"><table class="data"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
            '</tbody></table></div></details>')


def order_measures(study: OrderStudy) -> list[tuple[str, str]]:
    """The rows a comparison of runs shows for this study: per regime accuracy (beside the baseline's), τ_b and
    AUROC; the pooled AUROC."""
    rows = []
    for regime, summary in study.regimes.items():
        rows += [(f"{regime}: generations", str(summary.get("n_generations", "-"))),
                 (f"{regime}: accuracy", number(summary.get("accuracy"))),
                 (f"{regime}: autoregressive baseline's accuracy", baseline_accuracy(study, regime)),
                 (f"{regime}: τ_b", number(summary.get("tau_b"))),
                 (f"{regime}: AUROC", number(summary.get("auroc")))]
    pooled = study.metrics.get("pooled_auroc") or {}
    return rows + [("pooled AUROC", number(pooled.get("value")))]
