"""Sliding-window layers of the prompt's cache hold their window alone (``prompt_cache.sliding_windows_compacted``):
transformers' dynamic sliding-window layer keeps a view of the whole prompt's keys and values, so a prompt
longer than the window kept them all allocated."""

import torch
from transformers import DynamicCache

from canvaslab.generation import generate
from canvaslab.generation.prompt_cache import sliding_windows_compacted
from canvaslab.models import anatomy


def _ids(model, length):
    return torch.arange(length) % (model.config.get_text_config(decoder=True).vocab_size - 10) + 10


def _encode(model, length):
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    ids = _ids(model, length)[None]
    anatomy.encoder(model)(input_ids=ids, cache=cache, position_ids=torch.arange(length)[None])
    return cache


def _storage_rows(tensor):
    return tensor.untyped_storage().nbytes() // (tensor.element_size() * tensor.shape[0] * tensor.shape[1] * tensor.shape[3])


def test_a_long_prompts_sliding_layers_keep_only_their_window(tiny):
    window = tiny.model.config.get_text_config(decoder=True).sliding_window
    stock = _encode(tiny.model, window + 100)
    with sliding_windows_compacted(tiny.model):
        compacted = _encode(tiny.model, window + 100)
    sliding = [i for i, layer in enumerate(stock.layers) if layer.is_sliding]
    assert sliding and len(sliding) < len(stock.layers)
    for i in sliding:
        assert _storage_rows(stock.layers[i].keys) == window + 100  # the view keeps the whole prompt
        for name in ("keys", "values"):
            kept = getattr(compacted.layers[i], name)
            assert kept.shape[2] == window - 1 and _storage_rows(kept) == window - 1
            assert torch.equal(kept, getattr(stock.layers[i], name))
    for i in set(range(len(stock.layers))) - set(sliding):  # full-attention layers are left as they are
        assert torch.equal(compacted.layers[i].keys, stock.layers[i].keys)


def test_generate_compacts_the_encoders_cache_and_removes_its_hooks(tiny):
    encoder_attention = next(m for m in tiny.model.modules() if isinstance(m, anatomy.ENCODER_ATTENTION_CLASS))
    window = tiny.model.config.get_text_config(decoder=True).sliding_window
    seen = []

    def keys_rows(module, args, kwargs):
        cache = kwargs["cache"]
        seen.extend(_storage_rows(layer.keys) for layer in cache.layers if layer.is_sliding and layer.keys.numel())
    handle = anatomy.decoder(tiny.model).register_forward_pre_hook(keys_rows, with_kwargs=True)
    try:
        generate(tiny, [_ids(tiny.model, window + 50).tolist()], generation={"max_denoising_steps": 1}, mode="invariant")
    finally:
        handle.remove()
    assert seen and max(seen) == window - 1
    assert not encoder_attention._forward_hooks


def test_a_recorder_sees_no_compaction(tiny):
    """Under a TorchFunctionMode (the capture recorder is one) the windows are left as transformers keeps them: the
    copies would be recorded as the attention layer's ops in a batch of long prompts and not for a short one alone."""
    from torch.overrides import TorchFunctionMode

    class Seen(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.clones = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.clones += func is torch.Tensor.clone
            return func(*args, **(kwargs or {}))

    window = tiny.model.config.get_text_config(decoder=True).sliding_window
    with sliding_windows_compacted(tiny.model), Seen() as seen:
        cache = _encode(tiny.model, window + 100)
    assert seen.clones == 0
    assert any(_storage_rows(layer.keys) == window + 100 for layer in cache.layers if layer.is_sliding)
