"""Loading on a real GPU: a real-shapes preset built on the meta device peaks at its weights plus the largest
initialiser's temporary (not the weights twice, which kept 30 layers off an 80 GB card), and a checkpoint
loads straight to the device with the same values.
Run: ``python -m pytest -q -m gpu tests/gpu``.
"""

import pytest
import torch

from canvaslab.models import load_model
from canvaslab.models.random_init import meta_tensors

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

GIB = 2 ** 30


def weights_bytes(model) -> int:
    tensors = {t.data_ptr(): t for t in [*model.parameters(), *model.buffers()]}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def test_a_real_shapes_build_peaks_within_its_weights_and_2_gib():
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    loaded = load_model("real-shapes", device="cuda", layers=2)
    peak = torch.cuda.max_memory_allocated() - before
    assert meta_tensors(loaded.model) == []
    assert all(p.device.type == "cuda" for p in loaded.model.parameters())
    assert peak <= weights_bytes(loaded.model) + 2 * GIB, (peak / GIB, weights_bytes(loaded.model) / GIB)


def test_a_checkpoint_loads_straight_to_the_device_with_its_values(tmp_path):
    built = load_model("tiny", device="cuda", dtype="bfloat16")
    built.model.save_pretrained(tmp_path)
    built.tokenizer.save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path), device="cuda")
    assert all(p.device.type == "cuda" for p in loaded.model.parameters())
    reference = built.model.state_dict()
    for name, tensor in loaded.model.state_dict().items():
        assert torch.equal(tensor, reference[name]), name
