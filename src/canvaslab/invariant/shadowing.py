"""One way to replace an attribute of one object for a block: ``shadowed``.

canvaslab changes transformers' behaviour on the model instance only (a module's ``forward``, a model's
``_prepare_sampler``), never in transformers' files or classes: the instance gets its own attribute, which
shadows the class's, and on exit the instance is as it was: its own earlier attribute back if it had one,
else none (the class's shows through again).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterable


@contextlib.contextmanager
def shadowed(obj: Any, name: str, replacement: Any):
    """``obj.name`` is ``replacement`` on this instance for the block; restored on exit."""
    had_own = name in vars(obj)
    previous = vars(obj).get(name)
    setattr(obj, name, replacement)
    try:
        yield
    finally:
        if had_own:
            setattr(obj, name, previous)
        else:
            delattr(obj, name)


@contextlib.contextmanager
def all_shadowed(replacements: Iterable[tuple[Any, str, Any]]):
    """``shadowed`` for each ``(obj, name, replacement)``, all restored on exit."""
    with contextlib.ExitStack() as stack:
        for obj, name, replacement in replacements:
            stack.enter_context(shadowed(obj, name, replacement))
        yield
