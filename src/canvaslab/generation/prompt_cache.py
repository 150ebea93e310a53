"""The prompt's KV cache: the seeds' "copy the B1 prompt cache", and sliding-window layers kept at their window.

Copying: encode each prompt alone, then give every row its B=1 cache. transformers' generate needs at least
one uncached token, so the cache holds all prompt tokens but the last, encoded at batch size 1; the last token
is encoded inside the batch by generate itself. Rows of different lengths are left-padded (zeros in the cache,
False in the attention mask).

Windows: transformers' dynamic sliding-window layer keeps the last ``sliding_window - 1`` keys and values as a
view of the whole prompt's, so the whole prompt's stay allocated. At the real shapes with prompts of ~2,000
tokens that is half the cache: 25 GiB of 55 at B=128 and 30 layers (``benchmarks/results/h200-invariant/``).
``sliding_windows_compacted`` copies each such layer's window out as its encoder layer finishes (not while a
``TorchFunctionMode`` such as the capture recorder watches, other than the row-keyed draws' own: it would record the copies as the layer's ops, in a
batch of long prompts and not alone).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Callable, Sequence

import torch
from transformers import DynamicCache

from canvaslab.errors import CanvaslabError
from canvaslab.generation.sampler import foreign_function_modes
from canvaslab.models import anatomy


@torch.no_grad()
def _encode_alone(model, prompt_ids: Sequence[int]) -> DynamicCache:
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    ids = torch.tensor([list(prompt_ids)], device=model.device)
    positions = torch.arange(ids.shape[1], device=model.device)[None]
    anatomy.encoder(model)(input_ids=ids, cache=cache, position_ids=positions)
    return cache


def _left_pad(tensor: torch.Tensor, length: int) -> torch.Tensor:
    missing = length - tensor.shape[-2]
    return torch.nn.functional.pad(tensor, (0, 0, missing, 0)) if missing else tensor


def build_prompt_cache(model, prompts: Sequence[Sequence[int]], before_encoding: Callable[[list[int]], None] | None = None
                       ) -> tuple[DynamicCache, torch.Tensor, torch.Tensor]:
    """Returns ``(cache, last_tokens (B, 1), attention_mask (B, cached + 1))`` for ``model.generate``.

    Each distinct prompt is encoded once; ``before_encoding(rows)`` is told which rows share it first.
    """
    if any(len(prompt) < 2 for prompt in prompts):
        raise CanvaslabError("--copy-prompt-cache needs prompts of at least 2 tokens (the last is encoded in the batch)")
    rows_of: dict[tuple[int, ...], list[int]] = {}
    for row, prompt in enumerate(prompts):
        rows_of.setdefault(tuple(prompt[:-1]), []).append(row)
    alone: dict[tuple[int, ...], DynamicCache] = {}
    for key, rows in rows_of.items():
        if before_encoding is not None:
            before_encoding(rows)
        alone[key] = _encode_alone(model, key)
    caches = [alone[tuple(prompt[:-1])] for prompt in prompts]
    longest = max(range(len(prompts)), key=lambda row: len(prompts[row]))
    batched = copy.deepcopy(caches[longest])
    for layer_index, layer in enumerate(batched.layers):
        length = max(cache.layers[layer_index].keys.shape[-2] for cache in caches)
        layer.keys = torch.cat([_left_pad(c.layers[layer_index].keys, length) for c in caches])
        layer.values = torch.cat([_left_pad(c.layers[layer_index].values, length) for c in caches])
    cached = max(len(prompt) for prompt in prompts) - 1
    mask = torch.zeros(len(prompts), cached + 1, dtype=torch.long, device=model.device)
    for row, prompt in enumerate(prompts):
        mask[row, cached + 1 - len(prompt):] = 1
    last_tokens = torch.tensor([[prompt[-1]] for prompt in prompts], device=model.device)
    return batched, last_tokens, mask


def _compact(layer) -> None:
    """The layer's keys and values in storage of their own size (a view of a longer prompt's otherwise)."""
    for name in ("keys", "values"):
        tensor = getattr(layer, name, None)
        if torch.is_tensor(tensor) and tensor.untyped_storage().nbytes() > tensor.numel() * tensor.element_size():
            setattr(layer, name, tensor.clone(memory_format=torch.contiguous_format))


@contextlib.contextmanager
def sliding_windows_compacted(model):
    """For the block, each encoder attention layer's cache entry compacted right after the layer writes it (see
    the module): the same values, the memory of the window alone. Numerically nothing changes."""
    def compact(module, args, kwargs, output):
        if foreign_function_modes():  # a recorder would see the copies as the layer's ops
            return
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        layers = getattr(cache, "layers", None)
        if layers is not None and module.layer_idx < len(layers) and getattr(layers[module.layer_idx], "is_sliding", False):
            _compact(layers[module.layer_idx])

    handles = [module.register_forward_hook(compact, with_kwargs=True) for module in model.modules()
               if isinstance(module, anatomy.ENCODER_ATTENTION_CLASS)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
