"""The environment fingerprint: everything that can change a batch-variance result.

Batch effects depend on the GPU model, driver, CUDA, library versions, dtype and numeric flags (the seeds
saw different first-divergence sites on an H100 and an A100), so every result file carries these.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
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
