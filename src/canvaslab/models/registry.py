"""Trained models installed as packages, found through the entry-point group ``canvaslab.models``.

canvaslab itself ships no weights. A trained model is a distribution of its own (``mini`` is
``canvaslab-mini``, kept in this repository under ``models/``) that registers one entry point per model:

    [project.entry-points."canvaslab.models"]
    mini = "canvaslab_mini:preset"

The entry point's name is the model's name (``--model mini``); its value is a function without arguments
returning a dict with these keys (a third party ships a model the same way, without importing canvaslab):

- ``folder`` (str or Path): an ordinary transformers checkpoint folder (``config.json``, weights, tokenizer);
- ``kind``: ``"diffusion"`` (a DiffusionGemma: ``--model NAME``) or ``"causal"`` (a causal LM: a baseline
  or a teacher);
- ``description``: one line saying what the model is;
- ``baseline`` (optional, default None): the name of the registered causal model that answers the same
  prompts autoregressively (``order-study --baseline NAME`` uses it).

Other keys are refused (a misspelt key would otherwise be lost). ``--baseline`` and ``mini distill --teacher``
also take a causal model's own name. The preset names (``tiny``, ``real-shapes``) always mean the presets.

Nothing here imports torch: the command line checks ``--model`` with it while options are parsed. Every way
a lookup can fail is one line (``CanvaslabError``): a model canvaslab knows but is not installed says how to
install it, a broken package names its distribution.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from canvaslab.errors import CanvaslabError, one_line
from canvaslab.io import check_names

ENTRY_POINT_GROUP = "canvaslab.models"
KINDS = ("diffusion", "causal")
REQUIRED_KEYS = ("folder", "kind", "description")
OPTIONAL_KEYS = ("baseline",)

# The models of this repository, by name: the folder of their distribution under ``models/``.
KNOWN_MODELS = {"mini": "models/canvaslab-mini", "mini-ar": "models/canvaslab-mini-ar"}


@dataclass(frozen=True)
class ModelPackage:
    """One registered model, as its entry point describes it (checked), and the distribution it came from."""

    name: str
    folder: Path
    kind: str
    description: str
    baseline: str | None
    distribution: str


def _entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=ENTRY_POINT_GROUP))


def _distribution(entry_point: metadata.EntryPoint) -> str:
    dist = getattr(entry_point, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else f"the distribution of {entry_point.value}"


def installed_models() -> dict[str, str]:
    """Every registered model's name and the distribution (name and version) that registers it, by name.
    The entry points are not loaded: a broken package shows up only when its model is used."""
    return {entry_point.name: _distribution(entry_point)
            for entry_point in sorted(_entry_points(), key=lambda entry_point: entry_point.name)}


def not_installed_message(name: str) -> str:
    return (f"model {name!r} is not installed: install it with `pip install ./{KNOWN_MODELS[name]}` "
            "from a clone of the canvaslab repository")


def is_model_name(name: str) -> bool:
    """Whether ``name`` means a registered model: installed, or one of this repository's (``KNOWN_MODELS``)."""
    return name in KNOWN_MODELS or any(entry_point.name == name for entry_point in _entry_points())


def find_model(name: str) -> ModelPackage | None:
    """The registered model ``name``, checked; None where the name is no model's (not installed and not one
    of ``KNOWN_MODELS``). A model of ``KNOWN_MODELS`` that is not installed raises its install line."""
    found = [entry_point for entry_point in _entry_points() if entry_point.name == name]
    if not found:
        if name in KNOWN_MODELS:
            raise CanvaslabError(not_installed_message(name))
        return None
    if len(found) > 1:
        sources = ", ".join(sorted(_distribution(entry_point) for entry_point in found))
        raise CanvaslabError(f"model {name!r} is registered by more than one distribution ({sources}): "
                             "uninstall all but one")
    return _checked(name, found[0])


def find_diffusion_model(name: str) -> ModelPackage | None:
    """``find_model``, refusing a causal model: what ``--model`` takes (canvaslab studies DiffusionGemma models)."""
    package = find_model(name)
    if package is not None and package.kind != "diffusion":
        raise CanvaslabError(f"model {name!r} is a {package.kind} LM, not a DiffusionGemma: give it as a baseline "
                             "or a teacher, not as --model")
    return package


def model_package(name: str) -> ModelPackage:
    """The registered model ``name``, checked (``find_model``); an unknown name is one line too."""
    package = find_model(name)
    if package is None:
        installed = ", ".join(installed_models()) or "none"
        raise CanvaslabError(f"model {name!r} is not registered (installed models: {installed})")
    return package


def model_folder(name: str) -> Path:
    """The checkpoint folder of the registered model ``name``."""
    return model_package(name).folder


def baseline_of(name: str) -> str | None:
    """The name of the causal model that is the registered model ``name``'s baseline (``mini``: ``mini-ar``),
    or None where its package names none."""
    return model_package(name).baseline


def _checked(name: str, entry_point: metadata.EntryPoint) -> ModelPackage:
    distribution = _distribution(entry_point)

    def broken(problem: str) -> CanvaslabError:
        return CanvaslabError(one_line(f"model {name!r} from {distribution} is broken: {problem}; "
                                       f"reinstall or uninstall {distribution.split(' ')[0]}"))

    described = _described(entry_point, broken)
    if not isinstance(described, dict):
        raise broken(f"its entry point {entry_point.value} returned {type(described).__name__}, "
                     f"not a dict with {', '.join(REQUIRED_KEYS)}")
    missing = [key for key in REQUIRED_KEYS if key not in described]
    unknown = sorted(str(key) for key in described if key not in REQUIRED_KEYS + OPTIONAL_KEYS)
    if missing or unknown:
        problem = f"lacks {', '.join(missing)}" if missing else f"has unknown keys {', '.join(unknown)}"
        raise broken(f"the dict of its entry point {entry_point.value} {problem} "
                     f"(keys: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)})")
    kind = _checked_kind(described["kind"], broken)
    description = _checked_text(described["description"], "description", broken)
    baseline = _checked_baseline(described.get("baseline"), broken)
    return ModelPackage(name, _checked_folder(described["folder"], broken), kind, description, baseline, distribution)


def _described(entry_point: metadata.EntryPoint, broken) -> Any:
    """What the entry point's function returns. Third-party code ends there in one line naming its package,
    whatever it raises: an exception, ``sys.exit()`` (which would end canvaslab as if it had finished) or another
    ``BaseException``. Only Ctrl-C is the user's, and goes on as such."""
    try:
        return entry_point.load()()
    except KeyboardInterrupt:
        raise
    except SystemExit as error:
        raise broken(f"its entry point {entry_point.value} called sys.exit({one_line(repr(error.code), 80)})") \
            from None
    except BaseException as error:  # noqa: BLE001 - any failure of third-party code is that package's, in one line
        detail = one_line(error, 200)
        raise broken(f"its entry point {entry_point.value} raised {type(error).__name__}"
                     + (f" ({detail})" if detail else "")) from None


def _checked_folder(folder: Any, broken) -> Path:
    if not isinstance(folder, (str, os.PathLike)):
        raise broken(f"its folder is a {type(folder).__name__}, not a path")
    try:
        path = check_names(folder)
    except CanvaslabError as error:
        raise broken(f"its folder is unusable: {error}") from None
    if not path.is_dir():
        raise broken(f"its folder {path} does not exist")
    if not (path / "config.json").is_file():
        raise broken(f"its folder {path} has no config.json")
    return path


def _checked_kind(kind: Any, broken) -> str:
    if kind not in KINDS:
        raise broken(f"its kind {kind!r} is not one of {', '.join(KINDS)}")
    return kind


def _checked_text(text: Any, key: str, broken) -> str:
    if not isinstance(text, str) or not text.strip() or len(text.splitlines()) != 1:
        raise broken(f"its {key} is not one line of text")
    return text.strip()


def _checked_baseline(baseline: Any, broken) -> str | None:
    if baseline is not None and (not isinstance(baseline, str) or not baseline.strip()):
        raise broken(f"its baseline {baseline!r} is not a model name")
    return baseline
