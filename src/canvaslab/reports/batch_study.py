"""The batch-size study's terminal table: one row per batched run, fitting 80 columns.

Module paths are shortened (``reports.names``); ``wide=True`` adds the passes column and prints the
full paths. The JSON result keeps every detail. Every value read from the result (prompt ids, module paths,
pass labels) is shown with its control characters escaped and never read as markup.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Column, Table

from canvaslab.reports.names import cell, compact_location, compact_module_path, plain
from canvaslab.terminal import printable


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}%"


def _changed(run) -> str:
    """What of row 0's result changed with the batch: ``text``, ``stop`` (the stopping point), both, or ``-``."""
    return ", ".join(part for part, flag in (("text", run["text_changed"]), ("stop", run["stop_changed"])) if flag) or "-"


def _origin_cell(run, name) -> str:
    origin, first = run["origin"], run["first_divergence"]
    if not origin:
        return "-"
    if first and origin["name"] == first["call"]:
        return "itself" if origin["inputs_identical"] else "earlier, unrecorded"
    return printable(name(origin["name"])) + ("" if origin["inputs_identical"] else " (inputs differed)")


def _first_cell(run, wide: bool) -> str:
    first = run["first_divergence"]
    if not first:
        return "none"
    return printable(f"{first['pass']} {first['call']}" if wide else compact_location(first["pass"], first["call"]))


def batch_study_table(result: dict[str, Any], wide: bool = False) -> Table:
    name = (lambda path: path) if wide else compact_module_path
    origins = [_origin_cell(run, name) for run in result["runs"]]
    # The origin is usually the first divergence itself: then the caption says so and the column is left out.
    show_origin = wide or any(origin not in ("itself", "-") for origin in origins)
    table = _WordWrapTable(title="batch-size study: the prompt as a row of a batch vs alone (B=1); router/logits: "
                           "% changed in the first differing decoder pass",
                           box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=GAP)
    # Names wrap between words (see _WordWrapTable) and fold only where even that cannot fit; numbers never do.
    table.add_column("prompt", overflow="fold")
    table.add_column("B", justify="right", no_wrap=True)
    table.add_column("first divergence", overflow="fold")
    if show_origin:
        table.add_column("origin", overflow="fold")
    for header in ("router", "logits", *(["passes"] if wide else [])):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("changed", no_wrap=True)
    for run, origin in zip(result["runs"], origins):
        table.add_row(
            cell(run["prompt_id"]), cell(run["batch_size"]), plain(_first_cell(run, wide)),
            *([plain(origin)] if show_origin else []),
            plain(_pct(run["router_scores_changed_pct"])), plain(_pct(run["final_logits_changed_pct"])),
            *([cell(f"{run['passes_matching']}/{run['passes_total']}")] if wide else []), plain(_changed(run)),
        )
    caption = _caption(result)
    if not show_origin and "itself" in origins:
        caption += "; origin: in every diverged run the first divergence itself (its inputs matched)"
    table.caption = plain(caption)
    return table


class _WordWrapTable(Table):
    """A table whose text columns wrap between words, never inside a module path, wherever the console has room
    for their longest words. rich alone narrows the widest wrapping columns evenly, which cuts
    ``enc.rotary_emb[full_attention]`` in two while the origin column beside it could have wrapped instead."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        self.padding = GAP
        if not _narrow_between_words(self, console, options):
            self.padding = (0, 0, 0, 0)  # the box's divider alone between columns, before a name is cut
            _narrow_between_words(self, console, options)
        yield from super().__rich_console__(console, options)


GAP = (0, 1, 0, 0)


def _narrow_between_words(table: Table, console: Console, options: ConsoleOptions) -> bool:
    """Narrow the wrapping columns, the last first (origin, then first divergence, then prompt), each at most
    down to its longest word, until the table fits. False where that is not enough: rich's own folding decides."""
    wrapping = [column for column in table.columns if not column.no_wrap]
    for column in wrapping:
        column.width = None  # a table printed twice is fitted anew for each console
    excess = Measurement.get(console, options.update_width(10**6), table).maximum - options.max_width
    for column in reversed(wrapping):
        if excess <= 0:
            break
        longest_word, longest_line = _span(console, options, column)
        column.width = longest_line - min(excess, longest_line - longest_word)
        excess -= longest_line - column.width
    if excess > 0:
        for column in wrapping:
            column.width = None
    return excess <= 0


def _span(console: Console, options: ConsoleOptions, column: Column) -> tuple[int, int]:
    """A column's content width: (its longest word, its longest line), header included."""
    spans = [Measurement.get(console, options.update_width(10**6), cell) for cell in (column.header, *column.cells)]
    return max(span.minimum for span in spans), max(span.maximum for span in spans)


def _caption(result: dict[str, Any]) -> str:
    summary = result["summary"]
    caption = (
        f"{summary['diverged']}/{summary['runs']} runs diverged, {summary['text_changed']} changed text, "
        f"{summary['stop_changed']} changed stopping point; model passes identical to B=1 "
        f"{summary['passes_matching']}/{summary['passes_total']} (every run's prompt-encoding and denoising passes); {summary['bytes_compared']:,} bytes compared; batch sizes that agree: "
        f"{summary['equivalence_classes']}; repeat B=1 identical: {summary['repeat_control_identical']}"
        f"{_repeat_where(result.get('repeat_control'))}"
    )
    return printable(caption)


def _repeat_where(repeat: dict | None) -> str:
    return f" ({repeat['process']})" if repeat else ""
