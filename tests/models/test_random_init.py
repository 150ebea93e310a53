"""Random-weight models built on the meta device and materialised tensor by tensor: the same model as the
constructor builds (shapes, dtypes, tied weights, buffers), values a pure function of the seed, and a host
peak bounded by the weights rather than twice them."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import DiffusionGemmaForBlockDiffusion

from canvaslab.models import PRESETS, load_model
from canvaslab.models.random_init import meta_tensors


def tied_groups(model) -> list[list[str]]:
    groups: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        groups.setdefault(parameter.data_ptr(), []).append(name)
    return sorted(sorted(names) for names in groups.values() if len(names) > 1)


@pytest.fixture(scope="module")
def constructed():
    """The tiny preset built the ordinary way: every tensor allocated by the constructor, then initialised."""
    torch.manual_seed(0)
    return DiffusionGemmaForBlockDiffusion._from_config(PRESETS["tiny"].build_config(), dtype=torch.float32).eval()


def test_the_meta_build_is_the_constructors_model_with_nothing_left_on_meta(tiny, constructed):
    built, reference = tiny.model.state_dict(), constructed.state_dict()
    assert list(built) == list(reference)
    assert {k: (v.shape, v.dtype) for k, v in built.items()} == {k: (v.shape, v.dtype) for k, v in reference.items()}
    assert meta_tensors(tiny.model) == []
    assert tied_groups(tiny.model) == tied_groups(constructed) and tied_groups(constructed)
    for name, buffer in constructed.named_buffers():  # rotary frequencies, layer scalars: set by the constructor
        assert torch.equal(buffer, tiny.model.get_buffer(name)), name


def test_the_weights_are_a_function_of_the_seed(tiny):
    again, other = load_model("tiny", seed=0).model.state_dict(), load_model("tiny", seed=1).model.state_dict()
    built = tiny.model.state_dict()
    assert all(torch.equal(built[name], again[name]) for name in built)
    drawn = [name for name in built if name.endswith(("proj.weight", "gate_up_proj", "embed_tokens.weight"))]
    assert drawn and not any(torch.equal(built[name], other[name]) for name in drawn)
    assert all(0.01 < built[name].std() < 0.03 for name in drawn)  # transformers' initializer_range, 0.02


def test_a_meta_device_load_builds_nothing():
    assert meta_tensors(load_model("tiny", device="meta").model)


PEAK_PROBE = textwrap.dedent("""
    import json, resource, sys
    import torch
    from canvaslab.models import load_model
    def peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    config = sys.argv[1]
    load_model(config, dtype="float32", layers=1)  # imports and first-use allocations, then the measured load
    before = peak()
    model = load_model(config, dtype="float32").model
    weights = sum(t.numel() * t.element_size() for t in {t.data_ptr(): t for t in model.parameters()}.values())
    print(json.dumps({"rise": peak() - before, "weights": weights}))
""")


@pytest.mark.slow
def test_the_host_peak_of_a_build_is_about_the_weights(tmp_path):
    """A mid-size config (~300 MB of float32 weights, mostly experts shared by the encoder and the decoder):
    building it raises the process's high-water mark by about the weights, not twice them."""
    config = PRESETS["real-shapes"].build_config(layers=2)
    text = config.text_config
    text.vocab_size, text.hidden_size, text.num_experts, text.moe_intermediate_size = 16384, 1024, 32, 512
    text.intermediate_size, text.num_attention_heads, text.head_dim, text.global_head_dim = 1024, 4, 128, 256
    path = tmp_path / "config.json"
    path.write_text(config.to_json_string())
    done = subprocess.run([sys.executable, "-c", PEAK_PROBE, str(path)], capture_output=True, text=True, timeout=120,
                          env={"OMP_NUM_THREADS": "1", "PATH": "", "PYTHONPATH": ":".join(sys.path)})
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["weights"] > 200 * 2**20
    assert measured["rise"] < 1.3 * measured["weights"], measured
