"""A study's plan: frozen, canonical, hashed, and registered in its folder before any unit runs.

Pre-registration for every study. A plan is plain JSON data (settings, prompts, model, everything that
decides what runs and which numbers come out); its canonical text (sorted keys, no spaces, UTF-8) is
hashed with sha256, and that hash is the study's identity: every stored record cites it. ``register``
writes ``DIR/store/plan.json`` (+ ``plan.sha256``) the first time and, on every later run into ``DIR``,
refuses a plan that differs, naming the first field that does, so a study never mixes results made under
two designs. ``--fresh`` starts over explicitly: the old folder is kept under a new name, never deleted.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

from canvaslab.errors import CanvaslabError
from canvaslab.io import JSON_LIMIT, NotRegularFile, check_real_folders, read_json, read_text, write_text_atomic

STORE_DIR = "store"
PLAN_FILE = "plan.json"
HASH_FILE = "plan.sha256"
STORE_FOLDERS = ("records", "failed", "locks")
PLAN_LIMIT = JSON_LIMIT  # io's one limit on a JSON document; a plan is kilobytes, a few MB with thousands of prompts
HASH_LIMIT = 64 * 1024  # plan.sha256 is one line


def canonical_json(value: Any) -> str:
    """The one text of ``value``: sorted keys, no whitespace, NaN refused (it has no JSON spelling)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_of(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def first_difference(old: Any, new: Any, path: str = "") -> str | None:
    """The dotted path of the first field (in sorted key order) where ``old`` and ``new`` differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            where = f"{path}.{key}" if path else str(key)
            if key not in old or key not in new:
                return where
            found = first_difference(old[key], new[key], where)
            if found:
                return found
        return None
    if isinstance(old, list) and isinstance(new, list):
        for index, (a, b) in enumerate(zip(old, new)):
            found = first_difference(a, b, f"{path}[{index}]")
            if found:
                return found
        return path if len(old) != len(new) else None  # one list is longer: name the list
    return None if old == new else (path or "(the plan)")


_ABSENT = object()  # a field one of two plans does not have


def _short(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    text = canonical_json(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _change(old: Any, new: Any) -> str:
    if old is _ABSENT or new is _ABSENT:
        return f"was {_short(old)}, now {_short(new)}"
    shortened = _short(old) != canonical_json(old) or _short(new) != canonical_json(new)
    if isinstance(old, list) and isinstance(new, list) and len(old) != len(new) and shortened:
        return f"had {len(old)} entries, now {len(new)}"  # their shortened texts may read the same
    return f"was {_short(old)}, now {_short(new)}"


def _lookup(value: Any, path: str) -> Any:
    """The value at a path ``first_difference`` returned (``_ABSENT`` where there is none)."""
    for part in path.replace("[", ".[").split("."):
        if not part:
            continue
        if part.startswith("["):
            index = int(part[1:-1])
            value = value[index] if isinstance(value, list) and index < len(value) else _ABSENT
        else:
            value = value.get(part, _ABSENT) if isinstance(value, dict) else _ABSENT
    return value


def frozen(study: str, plan: dict[str, Any]) -> dict[str, Any]:
    """The registered form: the study's name beside its plan, round-tripped through canonical JSON
    (tuples become lists, so the plan compares equal to what a later run reads back)."""
    return json.loads(canonical_json({"study": study, "plan": plan}))


def check_fresh(folder: Path | None) -> None:
    """Refuse (one line) ``--fresh`` on a folder that is a symbolic link: moving it aside would move the folder it
    points to. Commands call this before loading a model."""
    if folder is not None and os.path.islink(folder):
        raise CanvaslabError(f"{folder} is a symbolic link, not a study folder: --fresh moves only a real folder "
                             "aside, never one a link points to; give the folder itself")


def start_fresh(folder: Path) -> Path | None:
    """Move an existing study folder aside (``DIR.1``, ``DIR.2``, ...) so the study starts over; its new name.
    A folder that is a symbolic link is refused in one line (``check_fresh``)."""
    check_fresh(folder)
    # Absolute: renaming "." fails (EBUSY), and the new study must not follow a moved working directory
    folder = Path(folder).resolve()
    if not folder.exists() or not any(folder.iterdir()):
        return None
    number = 1
    while Path(f"{folder}.{number}").exists():
        number += 1
    kept = Path(f"{folder}.{number}")
    os.rename(folder, kept)
    return kept


def check_store(folder: Path) -> None:
    """Refuse (one line) a store whose folders (``store`` and those in it) are symbolic links or not folders:
    a store is read and written only inside real folders, never through a link to somewhere else."""
    for name in ("", *STORE_FOLDERS):
        check_real_folders(Path(folder) / STORE_DIR / name, below=folder)


def _not_a_file(error: NotRegularFile) -> CanvaslabError:
    return CanvaslabError(f"{error.path} is {error.kind}, not a regular file: a study store holds only the files "
                          "canvaslab writes; remove it, or use --fresh to start over (the folder is kept under a new "
                          "name)")


def non_finite_at(value: Any) -> tuple[str, float] | None:
    """The first (dotted path, number) where ``value`` holds a NaN or an infinity, if anywhere."""
    pending = [("", value)]
    while pending:  # a loop, not recursion: a parsed file may nest up to io.DEPTH_LIMIT deep
        path, value = pending.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return path or "(the plan)", value
        if isinstance(value, dict):
            pending += [(f"{path}.{key}" if path else str(key), item) for key, item in reversed(value.items())]
        elif isinstance(value, list):
            pending += [(f"{path}[{index}]", item) for index, item in reversed(list(enumerate(value)))]
    return None


def refuse_non_finite(data: Any, path: Path, fix: str) -> None:
    """Refuse (one line) a parsed plan holding NaN or Infinity. Python's JSON reader accepts those words, but a
    plan is hashed as strict JSON, which has no spelling for them (and a NaN margin would judge nothing)."""
    found = non_finite_at(data)
    if found is not None:
        raise CanvaslabError(f"{path} holds a non-finite number ({found[0]} is {found[1]}), which JSON has no "
                             f"spelling for: it was not written by canvaslab; {fix}")


def read_plan(path: Path) -> Any:
    """A registered ``plan.json``: a regular file (no link) of at most ``PLAN_LIMIT`` bytes, finite numbers only."""
    try:
        plan = read_json(path, max_bytes=PLAN_LIMIT)
    except NotRegularFile as error:
        raise _not_a_file(error) from None
    refuse_non_finite(plan, path, "restore it, or use --fresh to start over (the folder is kept under a new name)")
    return plan


def check_registered(folder: Path | None, study: str, plan: dict[str, Any]) -> bool:
    """Refuse (one line) a plan other than the one registered in ``folder``; True if one is registered.

    Commands call this before loading a model, so a mistaken rerun costs nothing."""
    if folder is None:
        return False
    check_store(folder)
    path = Path(folder) / STORE_DIR / PLAN_FILE
    if not os.path.lexists(path):
        return False
    registered = frozen(study, plan)
    try:
        old = read_plan(path)
    except (OSError, ValueError) as error:
        raise CanvaslabError(f"{path} is damaged ({error}); use --fresh to start over "
                             "(the folder is kept under a new name)") from None
    where = first_difference(old, registered)
    if where is not None:
        raise CanvaslabError(
            f"{folder} holds a study with another plan: {where} {_change(_lookup(old, where), _lookup(registered, where))}; rerun with the same choices, or --fresh to start over "
            "(the old folder is kept under a new name)")
    return True


def check_registered_study(folder: Path | None, study: str) -> None:
    """Refuse (one line) a folder whose registered plan is another study's. For studies whose plan can only be
    built with the model's tokenizer (the commit-order study encodes its prompts), this is what can be checked
    before the model loads; ``check_registered`` compares the whole plan once it is built."""
    if folder is None:
        return
    registered = registered_plan(Path(folder))
    if registered is not None and registered.get("study") != study:
        raise CanvaslabError(f"{folder} holds a study with another plan: study {_change(registered.get('study'), study)}; "
                             "give another folder, or --fresh to start over (the old folder is kept under a new name)")


def register(folder: Path, study: str, plan: dict[str, Any]) -> str:
    """Write the plan before any unit runs, or check it against the one registered; returns its sha256.

    Two processes registering the same plan at once both succeed (the text is the same; the write is atomic).
    """
    registered = frozen(study, plan)
    digest = sha256_of(registered)
    if not check_registered(folder, study, plan):
        store = Path(folder) / STORE_DIR
        write_text_atomic(store / PLAN_FILE, canonical_json(registered) + "\n", below=folder)
        write_text_atomic(store / HASH_FILE, f"{digest}  {PLAN_FILE}\n", below=folder)
    return digest


def registered_plan(folder: Path) -> dict[str, Any] | None:
    """The registered ``{"study", "plan"}`` of a folder, or None; refused (one line) when unreadable or not
    the text its ``plan.sha256`` names (records are checked against that hash: an edited plan would make
    every record look foreign)."""
    check_store(folder)
    store = Path(folder) / STORE_DIR
    if not os.path.lexists(store / PLAN_FILE):
        return None
    try:
        registered = read_plan(store / PLAN_FILE)
        digest = read_text(store / HASH_FILE, max_bytes=HASH_LIMIT).split()[0]
    except NotRegularFile as error:
        raise _not_a_file(error) from None
    except (OSError, ValueError, IndexError) as error:
        raise CanvaslabError(f"{store} is damaged: its {PLAN_FILE} or {HASH_FILE} cannot be read ({error})") from None
    _check_shape(registered, store / PLAN_FILE)
    if sha256_of(registered) != digest:
        raise CanvaslabError(f"{store / PLAN_FILE} is not the plan its {HASH_FILE} names: the store was edited")
    return registered


def _check_shape(registered: Any, path: Path) -> None:
    """Refuse (one line) a registered plan that is not what ``register`` writes: an object whose ``study`` is a
    text and whose ``plan`` is an object, every text UTF-8 (a lone surrogate escape such as ``\\ud800`` has no
    UTF-8 form, so the plan could not be hashed)."""
    if not (isinstance(registered, dict) and isinstance(registered.get("study"), str)
            and isinstance(registered.get("plan"), dict)):
        raise CanvaslabError(f"{path} is not a registered plan (an object naming its study and its plan): it was "
                             "not written by canvaslab")
    try:
        canonical_json(registered).encode("utf-8")
    except UnicodeEncodeError:
        raise CanvaslabError(f"{path} holds a lone surrogate escape (a text with no UTF-8 form): it was not written "
                             "by canvaslab") from None
