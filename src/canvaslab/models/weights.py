"""Which trained weights a ``--model`` names: an identity that study plans record.

A study resumed in its folder must run the weights it started with. A name such as ``mini`` or a checkpoint
path stays the same when the weights behind it are retrained (a new version of the ``canvaslab-mini`` package),
so plans record this fingerprint beside the name, and a resume with other weights is refused as another plan.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from canvaslab.models.registry import find_model

WEIGHT_SUFFIXES = (".safetensors", ".bin")
SAMPLES_PER_FILE = 16
SAMPLE_BYTES = 1 << 20


def checkpoint_folder(spec: str) -> Path | None:
    """The folder of trained weights ``spec`` names, resolved as ``load_model`` does, or None where the weights
    are random (a preset, or a ``config.json`` with a seed: those arguments identify them) or nothing exists."""
    from canvaslab.models.presets import PRESETS  # imports torch: only when a model is named

    if spec in PRESETS:
        return None
    package = find_model(spec)  # an installed model's name (one of this repository's, not installed: one line)
    if package is not None:
        return package.folder
    path = Path(spec).expanduser()
    return path if path.is_dir() else None


def _sample_offsets(size: int) -> list[int]:
    if size <= SAMPLES_PER_FILE * SAMPLE_BYTES:  # small files are read whole
        return list(range(0, size, SAMPLE_BYTES)) or [0]
    step = (size - SAMPLE_BYTES) / (SAMPLES_PER_FILE - 1)
    return [round(i * step) for i in range(SAMPLES_PER_FILE)]


def folder_fingerprint(folder: Path) -> str:
    """sha256 over each weight file's name and size and 16 evenly spaced 1 MiB samples of it (the whole file
    up to 16 MiB, so every byte of ``mini``: 0.03 s). Retraining changes every sample, and at most 16 MiB are
    read per file, whatever the checkpoint's size. It identifies a checkpoint; it is not a tamper check."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)):
        size = path.stat().st_size
        digest.update(f"{path.name}\0{size}\0".encode("utf-8"))
        with path.open("rb") as handle:
            for offset in _sample_offsets(size):
                handle.seek(offset)
                digest.update(handle.read(SAMPLE_BYTES))
    return "sha256-sampled:" + digest.hexdigest()


def weights_fingerprint(spec: str) -> str | None:
    """The fingerprint of the trained weights ``spec`` names; None for random weights (``checkpoint_folder``)."""
    folder = checkpoint_folder(spec)
    return None if folder is None else folder_fingerprint(folder)
