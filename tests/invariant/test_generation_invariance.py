"""The proof on the CPU: in invariant mode row 0's generation does not depend on its batch.

Batch sizes 1..8, 32 and 64, with bit-identical copies and with other prompts of other lengths (row 0
left-padded), every recorded byte of every pass must match B=1; stock mode is the negative control and
must diverge on this tiny float32 model.
"""

import pytest

from canvaslab.prompts import builtin_prompts
from canvaslab.studies.batch_size import BatchStudySettings, run_batch_study

SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 32, 64]


@pytest.mark.parametrize("fill", ["copies", "mixed"])
def test_invariant_mode_matches_b1_byte_for_byte(tiny, fill):
    settings = BatchStudySettings(batch_sizes=SIZES, fill=fill, mode="invariant", generation={"max_denoising_steps": 2})
    result = run_batch_study(tiny, builtin_prompts(1), settings)
    summary = result["summary"]
    if fill == "mixed":  # the other rows hold other prompts, longer ones too: row 0 is left-padded
        assert any(run["left_padded"] for run in result["runs"])
    assert summary["runs"] == len(SIZES) - 1
    assert summary["diverged"] == 0 and summary["text_changed"] == 0 and summary["stop_changed"] == 0
    # every pass: the B=1 prompt cache, the encoder over the last prompt token, two decoder passes
    assert summary["passes_matching"] == summary["passes_total"] == (len(SIZES) - 1) * 4
    assert summary["equivalence_classes"] == [SIZES]
    assert result["environment"]["mode"] == "invariant" and result["environment"]["replaced_ops"]


def test_stock_mode_is_the_negative_control(tiny):
    settings = BatchStudySettings(batch_sizes=[1, 2, 8], mode="stock", generation={"max_denoising_steps": 2})
    summary = run_batch_study(tiny, builtin_prompts(1), settings)["summary"]
    assert summary["diverged"] == 2 and summary["passes_matching"] < summary["passes_total"]


def test_invariant_mode_takes_the_compiled_generate_path(tiny, monkeypatch):
    """The mode no longer refuses transformers' compiled static-cache path: it runs it with canvaslab's
    backend (``tests/generation/test_compiled_path.py`` checks that path's results)."""
    from canvaslab.invariant import generation_mode

    monkeypatch.setattr(tiny.model.generation_config, "cache_implementation", "static")
    with generation_mode(tiny.model, "invariant"):
        pass


@pytest.mark.parametrize("mode", ["invariant", "stock"])
def test_without_the_copied_prompt_cache_the_padded_prompt_pass_is_compared(tiny, mode):
    """The whole prompt is encoded in the batch: row 0's padded prompt pass is compared over its real
    positions, and every later pass; invariant must match them all, stock must still diverge."""
    settings = BatchStudySettings(batch_sizes=[1, 2, 3, 8], fill="mixed", copy_prompt_cache=False, mode=mode,
                                  generation={"max_denoising_steps": 2})
    result = run_batch_study(tiny, builtin_prompts(1), settings)
    summary = result["summary"]
    assert all(run["left_padded"] and "passes_not_compared" not in run for run in result["runs"])
    if mode == "invariant":
        assert summary["diverged"] == 0 and summary["passes_matching"] == summary["passes_total"] == 9
        assert summary["equivalence_classes"] == [[1, 2, 3, 8]]
    else:
        assert summary["diverged"] == 3 and summary["passes_matching"] < summary["passes_total"]
