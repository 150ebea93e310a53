"""Random-weight models built without a second copy of their weights anywhere.

Building a model the ordinary way (its constructor on the target device, then transformers' initialisation)
needs far more device memory than the weights: the 30-layer real-shapes model, 47 GiB of bf16 weights, ran
out of memory on an 80 GB card. Here the parameters are first created on the meta device (no memory), then
allocated one tensor at a time on the target device and initialised in place with the model's own
``_init_weights``, from one seeded generator: the peak is the weights plus the largest initialiser's
temporary, and the values are a pure function of the seed (and of the device's generator, as before).

Buffers (rotary frequencies, layer scalars, embedding scales) are built for real on the target device by the
constructor: they are small, and some of them are set only there, not by ``_init_weights``.
"""

from __future__ import annotations

import torch
from accelerate import init_empty_weights
from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion
from transformers.initialization import no_init_weights


def build_random_model(config: DiffusionGemmaConfig, dtype: torch.dtype, device: torch.device, seed: int):
    """A random-weight DiffusionGemma on ``device`` in ``dtype``, its weights drawn from ``seed``."""
    with torch.device(device), init_empty_weights(include_buffers=False), no_init_weights():
        model = DiffusionGemmaForBlockDiffusion._from_config(config, dtype=dtype)
    if device.type != "meta":
        materialise_parameters(model, device)
        torch.manual_seed(seed)
        model.init_weights()  # every module's _init_weights in transformers' order, then the tied weights
    return model.eval()


def materialise_parameters(model: torch.nn.Module, device: torch.device) -> None:
    """Give each meta parameter uninitialised storage on ``device``, one tensor at a time. Tied copies (the
    output head that shares the embedding) are skipped: ``tie_weights`` points them at their source."""
    tied = set(getattr(model, "all_tied_weights_keys", {}) or {})
    for module_name, module in model.named_modules():
        for name, param in list(module._parameters.items()):
            full_name = f"{module_name}.{name}" if module_name else name
            if param is None or not param.is_meta or full_name in tied:
                continue
            module._parameters[name] = torch.nn.Parameter(
                torch.empty_like(param, device=device), requires_grad=param.requires_grad)


def meta_tensors(model: torch.nn.Module) -> list[str]:
    """Names of the parameters and buffers still on the meta device (none, in a usable model)."""
    tensors = list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers())
    return [name for name, tensor in tensors if tensor.is_meta]
