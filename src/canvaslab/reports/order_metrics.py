"""The commit-order study's terminal tables: one row per regime.

Twelve measures with confidence intervals do not fit 80 columns in one table, so by default they are
printed as two: commit order (rank correlations, batching, un-accepts) and confidence vs correctness
(calls, entropy, accuracy, AUROC). ``wide=True`` prints one table. The JSON holds every value. Regime names and
other text read from the metrics are shown with control characters escaped and never read as markup.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rich import box
from rich.table import Table
from rich.text import Text

from canvaslab.analysis import validity
from canvaslab.reports.names import plain
from canvaslab.terminal import printable

ORDER_COLUMNS = ("regime", "n", "tau_b", "tau16", "control", "tok/call", "same", "unacc")
CONFIDENCE_COLUMNS = ("regime", "calls", "H", "acc", "AUROC")
BASELINE_COLUMN = "AR acc"  # the autoregressive baseline's accuracy (``order-study --baseline``)


def order_metrics_tables(metrics: dict[str, Any], wide: bool = False) -> list[Table]:
    """The regime tables; with a scored baseline (``metrics["baseline"]``) the last one adds its accuracy."""
    cells = {regime: _cells(regime, summary, metrics.get("n_bootstrap")) for regime, summary in metrics["regimes"].items()}
    title = printable(f"commit order: {metrics['n_generations']} generations, {_intervals(metrics)}")
    extra = _baseline_column(metrics)
    if wide:
        return [_table(title, cells, ORDER_COLUMNS + CONFIDENCE_COLUMNS[1:], extra)]
    return [_table(title, cells, ORDER_COLUMNS, {}),
            _table("confidence vs correctness, per regime", cells, CONFIDENCE_COLUMNS, extra)]


def _intervals(metrics: dict[str, Any]) -> str:
    """What the brackets under a value are: none when the bootstrap was turned off (``--bootstrap 0``)."""
    if metrics.get("n_bootstrap") == 0:
        return "no CIs (--bootstrap 0)"
    return "95% prompt-clustered CIs"


def _baseline_column(metrics: dict[str, Any]) -> dict[str, list[str]]:
    """The autoregressive baseline's accuracy per regime, as one extra column (none without a baseline)."""
    if "baseline" not in metrics:
        return {}
    regimes = metrics["baseline"]["regimes"]
    return {BASELINE_COLUMN: [_accuracy_cell(regimes.get(name)) for name in metrics["regimes"]]}


def _accuracy_cell(summary: dict[str, Any] | None) -> str:
    if summary is None or summary["accuracy"] is None:
        return "-"
    return f"{summary['accuracy']:.2f}"


def _table(title: str, cells: dict[str, dict[str, str]], columns: Sequence[str],
           extra: Mapping[str, Sequence[str]]) -> Table:
    rows = [[row[name] for name in columns] + [values[index] for values in extra.values()]
            for index, row in enumerate(cells.values())]
    table = Table(title=plain(title), box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for index, name in enumerate([*columns, *extra]):
        # A column never narrower than its longest line: a narrow terminal wraps the table, not the numbers.
        width = max(len(line) for cell in [name, *(row[index] for row in rows)] for line in cell.split("\n"))
        table.add_column(name, justify="left" if index == 0 else "right", min_width=width)
    for row in rows:
        table.add_row(*map(plain, row))
    return table


def _cells(regime: str, summary: dict[str, Any], n_bootstrap: int | None = None) -> dict[str, str]:
    calls = summary["accept_calls"]
    rulings = validity.regime_rulings(summary, n_bootstrap)
    return {
        "regime": printable(regime),
        "n": printable(summary["n_generations"]),
        "tau_b": _ruled(summary["tau_b"], summary["tau_b_ci"], rulings.get("tau_b")) + f"\nn={defined_in(summary)}",
        "tau16": _ruled(summary["block_tau"]["16"], None, rulings.get("block_tau_16")),
        "control": _number(summary["control_tau"]),
        "tok/call": _number(summary["tokens_per_call"], 1),
        "same": _number(summary["same_call_fraction"], 2),
        "unacc": _number(summary["unaccept_events"], 1),
        "calls": printable(f"{calls['mean']:.1f}/{calls['budget']}"),
        "H": _number(summary["commit_entropy_mean"], 4),
        "acc": _number(summary["accuracy"], 2),
        "AUROC": _ruled(summary["auroc"], summary["auroc_ci"], rulings.get("auroc"), flagged=True),
    }


def _ruled(value: float | None, ci: list[float] | None, ruled: tuple | None, flagged: bool = False) -> str:
    """The value as the validity rules allow (interval, split share or '-'); the AUROC says why it has no interval."""
    ruling, support = ruled if ruled is not None else (None, None)
    text = validity.format_value(value, ci, ruling, support=support)
    if value is not None and ci is not None and ruling is not None and ruling.interval:
        text = text.replace(" [", "\n[", 1)
    if flagged and value is not None and ruling is not None and support is not None and support.minority is not None:
        text += f"\n{support.minority} {support.minority_name}{'' if support.minority == 1 else 's'}"
    return text


def defined_in(summary: Mapping[str, Any], measure: str = "tau_b") -> int:
    """How many of the regime's generations the measure is defined for: a mean over 2 of 100 generations must
    not read as a mean over 100 (JSON answers commit in one call, leaving tau_b undefined for most)."""
    return summary["n_generations"] - summary.get("undefined", {}).get(measure, {}).get("n", 0)


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _with_ci(value: float | None, ci: list[float] | None) -> str:
    if value is None:
        return "-"
    return _number(value) if ci is None else f"{value:.3f}\n[{ci[0]:.3f}, {ci[1]:.3f}]"


def pooled_auroc_line(pooled: dict[str, Any]) -> Text:
    value = _number(pooled["value"])
    flag = pooled["simpson_prone"]
    test = {True: "Simpson flag RAISED (pooling misrepresents the regimes)", False: "Simpson flag not raised",
            None: f"Simpson test undefined ({printable(pooled.get('simpson_reason'))})"}[flag]
    return plain(f"pooled AUROC {value} over {printable(pooled['n'])} generations, a diagnostic: {test}; "
                 "report within-regime AUROC")
