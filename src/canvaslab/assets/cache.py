"""Where prepared assets live: one cache root, chosen the same way by every command.

Order: an explicit ``--cache-dir``, then the ``CANVASLAB_CACHE`` environment variable, then
``~/.cache/canvaslab``. Assets sit in fixed sub-folders of the root (``tokenizers/gemma3``), so a
prepared cache can be copied between machines as one folder.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV_VAR = "CANVASLAB_CACHE"


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """The canvaslab cache root (not created here: readers must not leave empty folders behind)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    from_env = os.environ.get(CACHE_ENV_VAR)
    if from_env:
        return Path(from_env).expanduser()
    return Path.home() / ".cache" / "canvaslab"
