"""``canvaslab report``: study folders -> one self-contained ``report.html`` plus figures beside it.

Every folder is checked, and every study read, before any work starts (a missing folder, one holding no study
output, a damaged, linked or absurdly large result file is a one-line error). Figures go only into a real folder
beside the page (``NAME-figures``: a symbolic link there is refused), each written anew and renamed into place,
never through a link. Each study gets a section; each folder a column in it, headed by its environment, so
the same study in ``stock`` and ``invariant`` mode, or on two GPUs, sits side by side. The page holds
its style, script, data and figures inline (SVG, whose rasters are data: URIs) and a Content Security
Policy that forbids any request: opened from disk, it fetches nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Callable, Sequence

from canvaslab.choices import writable_file
from canvaslab.errors import CanvaslabError, RunFailed
from canvaslab.io import UnreadableFile, check_names, check_real_folders, disk_full, write_text_atomic
from canvaslab.reports.html.markup import esc, plural, section

REPORT_FILE = "report.html"


@dataclass(frozen=True)
class Section:
    """A study's section of the page: the reader of its folders, its anchor, title and intro, and the builder of
    one folder's column (``(study view, key, title, figures) -> html``, or ``(html, dataset)``)."""

    reader: ModuleType
    anchor: str
    title: str
    intro: str
    column: Callable
    measures: Callable | None = None  # study view -> [(measure, value)], the rows of the runs' comparison


@dataclass
class Report:
    html: Path
    figures: list[Path]
    studies: dict[str, int]  # study -> folders that held it
    size_bytes: int
    axes: dict[str, list] = field(default_factory=dict)  # figure name -> (x limits, y limits) of each of its axes


def check_folders(folders: Sequence[Path], sections: Sequence[Section]) -> list[Path]:
    """Refuse, before any work, folders that are missing or hold no study output."""
    if not folders:
        raise CanvaslabError("give at least one study folder")
    for folder in folders:
        check_names(folder, "a study folder")
        if not folder.exists():
            raise CanvaslabError(f"{folder}: no such folder")
        if not any(part.reader.find(folder) is not None for part in sections):
            files = ", ".join(part.reader.FILE for part in sections)
            raise CanvaslabError(f"{folder}: no study output found (looked for {files})")
    return list(folders)


def folder_labels(folders: Sequence[Path]) -> list[str]:
    """Short unique names: the folder's own name, with its parent's when two share it."""
    names = [f.stem if f.is_file() else f.resolve().name for f in folders]
    return [f"{f.resolve().parent.name}/{n}" if names.count(n) > 1 else n for f, n in zip(folders, names)]


def _title(label: str, environment: dict) -> str:
    extras = [environment.get(k) for k in ("mode", "device") if environment.get(k)]
    return f"{label} ({', '.join(map(str, extras))})" if extras else label


def _asset(name: str) -> str:
    return resources.files("canvaslab.reports.html").joinpath(name).read_text(encoding="utf-8")


def _controls(datasets: list[dict]) -> str:
    if not datasets:
        return ""
    legend = "".join(f'<span><span class="swatch s{i}"></span>{name}</span>'
                     for i, name in enumerate(("noise", "committed token", "differs from B=1")))
    return ('<div class="path-controls" role="group" aria-label="prompt, batch size and denoising pass">'
            '<label for="prompt-select">prompt</label><select id="prompt-select"></select>'
            '<label for="batch-select">batch size</label><select id="batch-select">'
            '<option value="">every batch size</option></select>'
            '<button type="button" id="play" aria-pressed="false" aria-controls="pass-slider">▶ play</button>'
            '<label for="pass-slider">denoising pass</label>'
            '<input type="range" id="pass-slider" min="0" max="0" step="1" value="0">'
            '<output id="pass-label" for="pass-slider" aria-live="polite"></output>'
            f'<div class="legend" aria-label="cell states">{legend}</div></div>'
            '<p class="intro">The prompt and batch size chosen here select the answers, canvas grids and spread '
            'figures below. Each grid is row 0\'s canvas at the selected denoising pass (positions row-major); '
            '<em>differs</em>: committed here or at B=1 on the same pass, with another token or only on one side. '
            'Hover a cell for its token and entropy. Use the slider (arrow keys) or play; after its stop a batch size '
            'keeps its final canvas.</p><div id="tip" role="tooltip"></div>')


def comparison_table(read: dict, sections: Sequence[Section], labels: list[str]) -> str:
    """The runs compared: one row per measure, one column per folder; rows whose values differ are marked."""
    rows: dict[tuple[str, str], dict[int, str]] = {}
    for part in sections:
        for index in range(len(labels)):
            study = read.get((part.anchor, index))
            if study is None:
                continue
            rows.setdefault(("", "study"), {})[index] = part.title
            for key in ("model", "mode", "device", "dtype"):
                rows.setdefault(("", key), {}).setdefault(index, str(_model_name(study.environment) if key == "model"
                                                                     else study.environment.get(key, "-")))
            for measure, value in (part.measures(study) if part.measures else []):
                rows.setdefault((part.title, measure), {})[index] = str(value)
    head = "".join(f'<th scope="col">{esc(label)}</th>' for label in labels)
    body = []
    for (title, measure), values in rows.items():
        cells = [values.get(i, "-") for i in range(len(labels))]
        differs = len(set(cells)) > 1
        name = f"{title}: {measure}" if title else measure
        body.append(f'<tr class="{"differs" if differs else "same"}"><th scope="row">{esc(name)}'
                    f'{" <span class=mark>≠ differs</span>" if differs else ""}</th>'
                    + "".join(f"<td>{esc(cell)}</td>" for cell in cells) + "</tr>")
    marked = sum(1 for row in body if 'class="differs"' in row)
    return (f'<section id="compare" aria-labelledby="compare-h"><h2 id="compare-h">Runs compared</h2>'
            f'<p class="intro">{plural(len(labels), "folder")} side by side: {plural(marked, "measure")} of '
            f'{len(body)} differ (marked ≠).</p><div class="scroll-x"><table class="data compare">'
            f'<thead><tr><th scope="col">measure</th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
            '</div></section>')


def _model_name(environment: dict) -> str:
    source = environment.get("model_source")
    if isinstance(source, dict):
        return str(source.get("name") or source.get("preset") or source.get("path") or "-")
    return str(environment.get("model", "-"))


def _script_safe_json(value) -> str:
    """JSON to embed in a <script> block: no "<", ">" or "&" at all (escaped as \\u003c...), so no study
    string (a prompt id, a token's text) can close the block or open "<!--", which would swallow the page's
    own script."""
    text = json.dumps(value, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# What a hand-edited or damaged result file raises in a reader or a panel (a key missing, a value of the
# wrong type, a number out of range, a truncated file): the user's input, so one line, not a traceback.
_DAMAGED = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError)


def _damaged(reader, folder: Path, error: Exception) -> CanvaslabError:
    return CanvaslabError(f"{reader.find(folder)} cannot be shown: it is damaged or was not written by this "
                          f"canvaslab ({type(error).__name__}: {error})")


def _read_study(reader, folder: Path):
    try:
        return reader.read(folder)
    except UnreadableFile:  # a link, a FIFO, a huge or deeply nested file: its own line says what it is
        raise
    except _DAMAGED as error:
        raise _damaged(reader, folder, error) from None


def _build_column(reader, build, study, folder: Path, key: str, label: str, figs):
    try:
        return build(study, key, _title(label, study.environment), figs)
    except _DAMAGED as error:
        raise _damaged(reader, folder, error) from None


def _page_file(out: Path) -> Path:
    """The page's path, refused in one line before any work when it cannot be written as an ``.html`` file
    (so that no study file, a plan or a result, is written over), or when the folder its figures go to is a
    symbolic link or not a folder (figures are written only in a real folder)."""
    check_names(out, "--out")
    if out.is_dir():
        raise CanvaslabError(f"--out {out} is a folder; name the page's file, e.g. {out / REPORT_FILE}")
    writable_file("--out", out, (".html",))
    check_real_folders(_figures_folder(out), below=out.parent)
    return out


def _figures_folder(out: Path) -> Path:
    return out.parent / f"{out.stem}-figures"


def build_report(folders: Sequence[Path], out: Path | None, sections: Sequence[Section]) -> Report:
    """Write ``report.html`` (default: inside the first folder) and its figures, a section per study of
    ``sections`` (the registry's, ``canvaslab.api.registry.report_sections``); return what was written.

    Every folder's study is read (and refused, if damaged or far too large) before anything is drawn."""
    folders = check_folders([Path(f) for f in folders], sections)
    out = Path(out) if out is not None else (folders[0] if folders[0].is_dir() else folders[0].parent) / REPORT_FILE
    out = _page_file(out)
    read = {(part.anchor, index): _read_study(part.reader, folder) for part in sections
            for index, folder in enumerate(folders) if part.reader.find(folder) is not None}
    try:
        return _write_report(folders, out, sections, read)
    except OSError as error:
        if not disk_full(error):
            raise RunFailed(f"the page {out} could not be written ({error.strerror or error}); the study folders "
                            "are unchanged") from None
        raise RunFailed(f"the disk is full ({error.strerror or error}): the report could not be written in "
                        f"{out.parent}; the study folders are unchanged: free some space and run the report "
                        "again") from None


def _write_report(folders: list[Path], out: Path, sections: Sequence[Section], read: dict) -> Report:
    from canvaslab.reports.html import figures  # matplotlib: the report extra

    figs = figures.FigureSet(_figures_folder(out), below=out.parent)
    labels = folder_labels(folders)
    datasets, parts, nav, studies = [], [], [], {}
    for part in sections:
        reader, anchor, title, intro, build = part.reader, part.anchor, part.title, part.intro, part.column
        columns = []
        figs.runs = [read[anchor, index] for index in range(len(folders)) if (anchor, index) in read]
        for index, (folder, label) in enumerate(zip(folders, labels)):
            if (anchor, index) not in read:
                continue
            built = _build_column(reader, build, read[anchor, index], folder, f"{anchor}{index}", label, figs)
            if isinstance(built, tuple):
                built, found = built
                datasets += found if isinstance(found, list) else [found] if found else []
            columns.append(built)
        if columns:
            studies[reader.STUDY] = len(columns)
            controls = _controls(datasets) if anchor == "batch" else ""
            parts.append(section(anchor, title, intro, columns).replace('<div class="columns">',
                                                                          controls + '<div class="columns">', 1))
            nav.append(f'<a href="#{anchor}">{esc(title)}</a>')
    if len(folders) > 1:
        parts.insert(0, comparison_table(read, sections, labels))
        nav.insert(0, '<a href="#compare">Runs compared</a>')
    page = (_asset("template.html")
            .replace("<!--TITLE-->", "canvaslab report")
            .replace("<!--SUBTITLE-->", esc("study folders: " + ", ".join(str(f) for f in folders)))
            .replace("<!--NAV-->", "".join(nav))
            .replace("<!--STYLE-->", _asset("report.css"))
            .replace("<!--SCRIPT-->", _asset("report.js"))
            .replace("<!--DATA-->", _script_safe_json(datasets))
            .replace("<!--BODY-->", "".join(parts)))
    write_text_atomic(out, page)
    return Report(html=out, figures=figs.written, studies=studies, size_bytes=out.stat().st_size,
                  axes=figs.limits)
