"""The commit-order table's title says what its brackets are: 95% prompt-clustered CIs when the bootstrap ran,
and no CIs with ``--bootstrap 0`` (the cells then hold no intervals)."""

from __future__ import annotations

from pathlib import Path

from canvaslab.reports.order_metrics import order_metrics_tables


def _title_and_tau(metrics) -> tuple[str, str]:
    table = order_metrics_tables(metrics)[0]
    return str(table.title), "\n".join(str(cell) for cell in table.columns[2].cells)


def test_the_title_names_the_cis_only_when_there_are_some(tmp_path, writers):
    with_cis = writers.order_study(tmp_path / "a", generations=15, regimes=("math",), n_bootstrap=20)  # 5 prompts
    title, tau = _title_and_tau(with_cis)
    assert "95% prompt-clustered CIs" in title and "[" in tau
    without = writers.order_study(tmp_path / "b", generations=12, regimes=("math",), n_bootstrap=0)
    title, tau = _title_and_tau(without)
    assert "CI" not in title.replace("no CIs", "") and "no CIs (--bootstrap 0)" in title, title
    assert "[" not in tau


def test_no_interval_is_printed_from_fewer_than_5_prompts(tmp_path, writers):
    metrics = writers.order_study(tmp_path, generations=12, regimes=("math",), n_bootstrap=20)  # 4 prompts x 3 seeds
    assert metrics["regimes"]["math"]["tau_b_ci"] is not None  # computed, kept in the JSON
    assert "[" not in _title_and_tau(metrics)[1]


def _read_the_output() -> str:
    page = (Path(__file__).resolve().parents[2] / "docs" / "commit-order-study.md").read_text(encoding="utf-8")
    return page.split("## Read the output", 1)[1].split("\n## ", 1)[0]


def test_the_page_explains_the_n_line_under_tau_b_and_the_title_without_cis(tmp_path, writers):
    metrics = writers.order_study(tmp_path, generations=12, regimes=("math",), n_bootstrap=0)
    title, tau = _title_and_tau(metrics)
    assert tau.splitlines()[-1] == f"n={metrics['regimes']['math']['n_generations']}"
    section = _read_the_output()
    assert "`n=K`" in section and "`n=0`" in section and "`n=1`" in section
    assert f"`{title.split(', ', 1)[1]}`" in section  # the title's words, as printed
