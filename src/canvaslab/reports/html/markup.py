"""Small HTML builders shared by the panels: escaped text, tables, the environment block, notes."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any, Iterable, Sequence

# Environment keys a reader of a result needs first, in this order (the rest is in the JSON).
ENVIRONMENT_KEYS = ("device", "mode", "dtype", "torch", "transformers", "cuda", "driver", "attn_implementation",
                    "experts_implementation", "rng", "cpu_capability", "deterministic_algorithms", "tf32_matmul")


def esc(value: Any) -> str:
    return escape("-" if value is None else str(value))


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, caption: str | None = None,
          cls: str = "data", raw: bool = False) -> str:
    """An HTML table; cells are escaped unless ``raw`` (then they are trusted markup)."""
    cell = (lambda v: str(v)) if raw else esc
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in headers) if any(headers) else ""
    thead = f"<thead><tr>{head}</tr></thead>" if head else ""
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f'<table class="{cls}">{cap}{thead}<tbody>{body}</tbody></table>'


def environment(env: dict[str, Any]) -> str:
    """The run's machine and software, as a compact definition list."""
    items = [(key, env[key]) for key in ENVIRONMENT_KEYS if key in env and env[key] not in (None, "")]
    source = env.get("model_source")
    if isinstance(source, dict):
        items.insert(1, ("model", " ".join(f"{k}={v}" for k, v in source.items() if v is not None)))
    if not items:
        return '<p class="note">no environment recorded</p>'
    return '<dl class="env">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items) + "</dl>"


def notes(lines: Iterable[str]) -> str:
    return "".join(f'<p class="note" role="note">{esc(line)}</p>' for line in lines)


def column(title: str, env: dict[str, Any], body: str, source: str) -> str:
    """One folder's column in a study section: title, environment, content."""
    brief = " · ".join(str(env[k]) for k in ("device", "mode", "dtype", "torch") if env.get(k)) or "not recorded"
    return (f'<article class="column"><h3>{esc(title)}</h3><p class="source">{path_link(source)}</p>'
            f'<details class="envbox"><summary>environment: {esc(brief)}</summary>{environment(env)}</details>'
            f'{body}</article>')


def section(anchor: str, title: str, intro: str, columns: Sequence[str]) -> str:
    return (f'<section id="{anchor}" aria-labelledby="{anchor}-h"><h2 id="{anchor}-h">{esc(title)}</h2>'
            f'<p class="intro">{esc(intro)}</p><div class="columns">{"".join(columns)}</div></section>')


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 generation``, ``2 generations`` (``nouns``: an irregular plural)."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def path_link(path: Any) -> str:
    """A local path as a link to the file (opened from disk, the page can follow it), its text the path."""
    target = Path(str(path)).resolve()
    return f'<a class="source" href="{esc(target.as_uri())}">{esc(path)}</a>'


def number(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def human_bytes(count: int | None) -> str:
    if count is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if count < 1000 or unit == "TB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.2f} {unit}"
        count /= 1000
    return str(count)
