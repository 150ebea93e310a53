"""canvaslab's optional parts (pyproject's extras) and the one line that names the one a command lacks.

``pip install canvaslab`` generates and runs the batch-size study; the packages of the other parts are
extras, imported only where a part needs them. A command or API call that needs a missing extra refuses in
one line naming the ``pip install`` that adds it (``require``), before any work starts; the CLI also turns an
import of a missing extra's package met later into that line (``missing_extra``).
"""

from __future__ import annotations

import importlib.util

from canvaslab.errors import CanvaslabError

# extra -> the import names of its packages (pyproject.toml's [project.optional-dependencies] installs them).
EXTRAS: dict[str, tuple[str, ...]] = {
    "analysis": ("scipy", "sklearn", "pyarrow", "pandas"),
    "report": ("matplotlib", "scipy", "sklearn", "pyarrow"),
    "serve": ("fastapi", "uvicorn", "prometheus_client"),
    "sandbox": ("pyseccomp",),
}
# What pip calls the packages whose import name differs.
DISTRIBUTIONS = {"sklearn": "scikit-learn", "prometheus_client": "prometheus-client"}


class MissingExtra(CanvaslabError):
    """A part of canvaslab whose extra is not installed."""


def install_line(extra: str) -> str:
    return f"pip install 'canvaslab[{extra}]'"


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that cannot be imported, or a module without a spec
        return False


def require(extra: str, purpose: str) -> None:
    """Refuse ``purpose`` (e.g. "canvaslab serve") unless every package of ``extra`` can be imported."""
    missing = [DISTRIBUTIONS.get(module, module) for module in EXTRAS[extra] if not installed(module)]
    if missing:
        raise MissingExtra(f"{purpose} needs the {extra} extra ({', '.join(missing)} not installed): "
                           f"{install_line(extra)}")


def missing_extra(error: ImportError) -> MissingExtra | None:
    """The one-line refusal for ``error`` if it is the import of an extra's package; None for any other."""
    top = (error.name or "").split(".")[0]
    extra = next((extra for extra, modules in EXTRAS.items() if top in modules), None)
    if extra is None:
        return None
    return MissingExtra(f"{DISTRIBUTIONS.get(top, top)} is not installed; it comes with the {extra} extra: {install_line(extra)}")
