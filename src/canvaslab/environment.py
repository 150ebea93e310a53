"""The environment fingerprint: everything that can change a batch-variance result.

Batch effects depend on the GPU model, driver, CUDA, library versions, dtype and numeric flags (the seeds
saw different first-divergence sites on an H100 and an A100), so every result file carries these.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

import torch
import transformers


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_driver() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        output = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return output.strip().splitlines()[0] if output.strip() else None


def _compiles(model) -> bool:
    """Whether transformers' generate compiles for this model (a static cache, compile not disabled)."""
    from transformers.generation.configuration_utils import ALL_STATIC_CACHE_IMPLEMENTATIONS

    config = getattr(model, "generation_config", None)
    return config is not None and config.cache_implementation in ALL_STATIC_CACHE_IMPLEMENTATIONS \
        and not getattr(config, "disable_compile", False)


def environment_fingerprint(model=None, device: torch.device | None = None, **extra: Any) -> dict[str, Any]:
    on_cuda = device is not None and device.type == "cuda"
    text_config = model.config.text_config if model is not None else None
    return {
        "device": torch.cuda.get_device_name(device) if on_cuda else _cpu_model(),
        "device_type": device.type if device is not None else "cpu",
        "driver": _nvidia_driver() if on_cuda else None,
        "cuda": torch.version.cuda,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "dtype": str(model.dtype).removeprefix("torch.") if model is not None else None,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "attn_implementation": getattr(model.config, "_attn_implementation", None) if model is not None else None,
        "experts_implementation": getattr(text_config, "_experts_implementation", None),
        "inference_mode": "torch.no_grad (transformers' generate)",
        "torch_compile": _compiles(model),
        **extra,
    }


MANIFEST_NAME = "result.json"


def _git_commit(where: Path) -> dict[str, Any]:
    """The commit of the checkout holding ``where`` and whether its tracked files differ from it."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"git_commit": commit, "git_dirty": bool(status) if status is not None else None}


def _canvaslab_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("canvaslab")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return None


def record_result(path: str | Path, shows: str, *, command: list[str] | None = None,
                  environment: dict[str, Any] | None = None) -> Path:
    """Record in the manifest of ``path``'s folder (``result.json``) how the file or folder ``path`` was made.

    One manifest per result folder: the command (``sys.argv`` unless given), canvaslab's version, the git
    commit of the code (and whether the checkout had uncommitted changes), the date, the environment
    fingerprint and what the result shows. A folder written by several commands lists each under ``runs``,
    keyed by the file it made, so rerunning a command replaces its own entry and keeps the others.
    """
    import datetime
    import shlex
    import sys

    from canvaslab.io import read_json, write_json_atomic

    path = Path(path)
    folder = path if path.is_dir() else path.parent
    manifest_path = folder / MANIFEST_NAME
    manifest = read_json(manifest_path) if manifest_path.is_file() else {"runs": []}
    run = {
        "file": "." if path == folder else path.name,
        "command": shlex.join(command if command is not None else [Path(sys.argv[0]).name, *sys.argv[1:]]),
        "shows": shows,
        "canvaslab_version": _canvaslab_version(),
        **_git_commit(Path(__file__).resolve().parent),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment": environment if environment is not None else environment_fingerprint(),
    }
    manifest["runs"] = [kept for kept in manifest.get("runs", []) if kept.get("file") != run["file"]] + [run]
    return write_json_atomic(manifest_path, manifest)
