"""The page: self-contained (no URL of any kind), one column per folder with its environment, figures as
PNG and SVG beside it, a clear one-line error for bad folders, and small enough with 64 batch sizes and
686 generations."""

from __future__ import annotations

import errno
import json
import re
import shutil

import pytest

from canvaslab.cli.main import main
from canvaslab.errors import CanvaslabError, RunFailed
from canvaslab.api import report as build_report
from canvaslab.reports.html.batch_panel import glance_rows, origin_groups
from canvaslab.reports.html.op_scan_panel import class_matrix
from canvaslab.reports.readers import batch_study

# Anything a browser could fetch: a scheme URL, protocol-relative URL, or a src/href/url() that is not data: or #.
FETCHABLE = re.compile(r"(?i)(?:https?|ftp|wss?|file):|(?:src|href)\s*=\s*[\"'](?!data:|#)|url\((?!\s*[\"']?(?:data:|#))"
                       r"|@import|@font-face|<link\b|<iframe\b")


@pytest.fixture(scope="module")
def report(study_folders, tmp_path_factory):
    folders = study_folders["folders"]
    out = tmp_path_factory.mktemp("report") / "report.html"
    written = build_report([folders[n] for n in ("stock", "invariant", "order", "noise", "ops")], out)
    return written, out.read_text(encoding="utf-8")


def test_page_references_nothing_outside_itself(report):
    _, html = report
    # The study folders' paths are links a reader may follow (a click, never a load): nothing else leaves the page.
    links = re.findall(r'<a class="source" href="file:[^"]*">', html)
    assert len(links) == 5
    assert not FETCHABLE.findall(re.sub(r'<a class="source" href="file:[^"]*">', "", html)
                                 .replace('http-equiv="Content-Security-Policy"', ""))
    assert "default-src 'none'" in html


def test_every_study_has_a_section_and_each_folder_a_column_with_its_environment(report):
    written, html = report
    assert written.studies == {"batch_size": 2, "commit_order": 1, "unused_tokens": 1, "op_scan": 1}
    for anchor in ("batch", "order", "noise", "ops"):
        assert f'<section id="{anchor}"' in html
    assert "stock (stock, synthetic CPU)" in html and "invariant (invariant, synthetic CPU)" in html
    assert html.count('<article class="column">') == 5


def test_figures_are_written_as_png_and_svg_and_inlined(report):
    written, html = report
    names = {p.stem for p in written.figures}
    assert {"batch0-0-spread-heatmap-b3", "batch0-0-canvas-final", "order2-commit-raster", "order2-block-tau",
            "order2-auroc-reliability", "noise3-forest", "ops4-op-scan"} <= names
    for path in written.figures:
        assert path.stat().st_size > 1000
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" if path.suffix == ".png" else b"<svg" in path.read_bytes()
    assert html.count("<svg") == len(names)


def test_canvas_data_block_holds_one_dataset_per_batch_folder(report):
    _, html = report
    data = json.loads(re.search(r'<script type="application/json" id="canvas-data">(.*?)</script>', html, re.S).group(1))
    assert [d["key"] for d in data] == ["batch0-0", "batch1-0"]
    assert [s["B"] for s in data[0]["sizes"]] == [1, 2, 3, 4]


def test_results_at_a_glance_and_origins_come_from_the_summary_and_runs(study_folders):
    study = batch_study.read(study_folders["folders"]["stock"])
    rows = dict(glance_rows(study))
    assert rows["generation runs that diverged"] == "2 / 3"
    assert rows["final texts that changed"] == "1 / 3"
    assert rows["model passes identical to B=1 (every run)"] == "7 / 15"
    groups = origin_groups(study)
    assert [(g[2], g[3]) for g in groups] == [(2, "3-4"), (1, "2")]
    assert groups[0][1] == "dec.L0.router.proj:linear"  # reports.names.compact_module_path


def test_op_scan_classes_put_b1s_class_first():
    scan = {"batch_sizes": [1, 2, 3, 4], "ops": {"a": {"classes": [[3, 4], [1, 2]]}, "b": {"classes": [[1, 2, 3, 4]]}}}
    matrix, names, sizes = class_matrix(scan)
    assert matrix.tolist() == [[0, 0, 1, 1], [0, 0, 0, 0]] and names == ["a", "b"]


def test_large_study_stays_under_a_few_megabytes(tmp_path, writers):
    for name in ("batch", "order"):
        (tmp_path / name).mkdir()
    writers.batch_study(tmp_path / "batch", batch_sizes=tuple(range(1, 65)), passes=16, prompts=2)
    writers.order_study(tmp_path / "order", generations=686, regimes=("math", "code", "factual", "json", "open", "code2"),
                        calls=16, n_bootstrap=20)
    written = build_report([tmp_path / "batch", tmp_path / "order"], tmp_path / "out" / "report.html")
    assert written.size_bytes < 4_000_000, written.size_bytes
    html = written.html.read_text()
    assert html.count("<svg") >= 5


def test_bad_folders_are_one_line_errors_before_any_work(tmp_path, capsys):
    with pytest.raises(CanvaslabError, match="no such folder"):
        build_report([tmp_path / "missing"], tmp_path / "r.html")
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(tmp_path)])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert "no study output found" in error and len(error.splitlines()) == 1
    assert not (tmp_path / "report.html").exists()


def test_cli_writes_the_page_beside_the_first_folder_by_default(study_folders, capsys):
    folder = study_folders["folders"]["ops"]
    main(["report", str(folder)])
    assert (folder / "report.html").is_file() and (folder / "report-figures" / "ops0-op-scan.svg").is_file()
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["plan.json", "noise_study.json", "report"])
def test_the_page_must_be_an_html_file_so_no_study_file_is_written_over(study_folders, tmp_path, name):
    folder = tmp_path / "noise"
    shutil.copytree(study_folders["folders"]["noise"], folder)
    before = {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    with pytest.raises(CanvaslabError, match="name a .html file"):
        build_report([folder], folder / name)
    assert {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} == before


def test_a_page_that_cannot_be_written_is_one_line(study_folders, tmp_path, monkeypatch):
    from canvaslab.reports.html import page

    def read_only(*args):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(page, "_write_report", read_only)
    with pytest.raises(RunFailed, match="could not be written .Read-only file system"):
        build_report([study_folders["folders"]["ops"]], tmp_path / "r.html")


HOSTILE_ID = "<!--<script>$x^$ a[/x]"  # opens an HTML comment in a script block, math markup, rich markup


def _hostile_batch_study(folder, writers):
    """A batch study whose prompt id and one token's text are hostile (a prompt id is the user's text)."""
    writers.batch_study(folder)
    path = folder / "batch_study.json"
    data = json.loads(path.read_text().replace('"builtin-0"', json.dumps(HOSTILE_ID)))
    data["canvas_token_text"]["4"] = "<!--<script>"
    path.write_text(json.dumps(data))


def test_no_study_string_can_open_a_comment_or_close_the_data_block(tmp_path, writers):
    """Found by a red-team session: "<!--<script>" in a prompt id left the page's own script swallowed."""
    folder = tmp_path / "hostile"
    folder.mkdir()
    _hostile_batch_study(folder, writers)
    page = build_report([folder], tmp_path / "report.html").html.read_text(encoding="utf-8")
    block = page.split('id="canvas-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in block and ">" not in block
    datasets = json.loads(block)
    assert HOSTILE_ID in json.dumps(datasets, ensure_ascii=False)  # the text itself survives, escaped
    assert page.count("<script") == 2  # the data block and the page's own script, nothing planted


def test_hostile_prompt_ids_are_printed_and_drawn_as_text(tmp_path, writers, capsys):
    """A "$" is no math markup in the figures and "[/x]" no rich markup in the terminal (both raised)."""
    folder = tmp_path / "hostile"
    folder.mkdir()
    _hostile_batch_study(folder, writers)
    main(["report", str(folder)])
    assert "wrote" in capsys.readouterr().out
    from rich.console import Console

    from canvaslab.reports.batch_study import batch_study_table

    console = Console(record=True, width=200)
    console.print(batch_study_table(json.loads((folder / "batch_study.json").read_text())))
    assert "a[/x]" in console.export_text()


@pytest.mark.parametrize("damage", ["truncated", "runs_not_a_list", "prompt_id_missing", "batch_size_text"])
def test_a_damaged_result_file_is_a_one_line_error(tmp_path, writers, capsys, damage):
    """Found by a red-team session: every hand-edited or truncated batch_study.json ended in a traceback."""
    folder = tmp_path / damage
    folder.mkdir()
    writers.batch_study(folder)
    path = folder / "batch_study.json"
    data = json.loads(path.read_text())
    if damage == "truncated":
        path.write_text(path.read_text()[:-200])
    else:
        if damage == "runs_not_a_list":
            data["runs"] = "abc"
        elif damage == "prompt_id_missing":
            del data["runs"][0]["prompt_id"]
        else:
            data["runs"][0]["batch_size"] = "two"
        path.write_text(json.dumps(data))
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(folder)])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in error and len(error.strip().splitlines()) == 1
    assert "batch_study.json" in error and not (folder / "report.html").exists()


def test_order_tau_b_says_how_many_generations_it_rests_on(report, study_folders):
    _, html = report
    metrics = json.loads((study_folders["folders"]["order"] / "order_metrics.json").read_text())
    for summary in metrics["regimes"].values():
        defined = summary["n_generations"] - summary.get("undefined", {}).get("tau_b", {}).get("n", 0)
        assert f"(over {defined})" in html
