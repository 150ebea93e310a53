"""The proof on the CPU for padded rows: prompts encoded inside the batch, left-padded by many lengths,
several canvases per generation, and the studied prompt at other rows than 0.

Every pass is compared, the padded prompt pass included (over the studied row's real positions). In
invariant mode no run may diverge and every pass must match; stock is the negative control. For every run,
``diverged`` must agree with the passes: a run diverged exactly when some compared pass differs.
"""

import pytest

from canvaslab.prompts import Prompt
from canvaslab.studies.batch_size import BatchStudySettings, run_batch_study
from canvaslab.studies.batch_size.study import _Runner, compare_run

# Two 32-token canvases, one denoising pass each; no end-of-sequence token, so the row runs both
# canvases alone as in any batch (a row that stops earlier alone would make fewer passes: another question).
GENERATION = {"max_new_tokens": 64, "max_denoising_steps": 1, "eos_token_id": []}
PASSES = 1 + 2 + 1  # the prompt pass, one decoder pass per canvas, the encoder over canvas 0 when it is done
STUDIED = "the man said that the water in the river was cold this morning"


def _consistent(run):
    assert run["diverged"] == (run["passes_matching"] < run["passes_total"]), run
    assert "passes_not_compared" not in run


def _ids(loaded, text):
    return loaded.tokenizer(text)["input_ids"]


def test_invariant_matches_alone_at_many_paddings(tiny_short_canvas):
    settings = BatchStudySettings(batch_sizes=[1, 4], fill="mixed", copy_prompt_cache=False, mode="invariant",
                                  generation=GENERATION)
    run = _Runner(tiny_short_canvas, settings)
    studied = _ids(tiny_short_canvas, STUDIED)
    reference = run([studied])
    for padding in (1, 13, 20):  # 13 = the studied prompt's own length
        longest = (studied * 3)[:len(studied) + padding]
        rows = [studied, longest, studied[:3], longest[:len(studied) + padding // 2]]
        result = compare_run(run, Prompt("p", STUDIED), rows, reference, 4, "mixed", "invariant")
        _consistent(result)
        assert result["left_padded"] and not result["diverged"], (padding, result["first_divergence"])
        assert result["passes_matching"] == result["passes_total"] == PASSES


@pytest.mark.parametrize("copy_prompt_cache", [False, True])
def test_invariant_matches_alone_at_another_row(tiny_short_canvas, copy_prompt_cache):
    settings = BatchStudySettings(batch_sizes=[1, 3, 5], fill="mixed", copy_prompt_cache=copy_prompt_cache,
                                  mode="invariant", generation=GENERATION, row=2)
    result = run_batch_study(tiny_short_canvas, [Prompt("short", "tell a story")], settings)
    passes = PASSES + copy_prompt_cache  # the copied cache's B=1 encoding is a pass of its own
    for run in result["runs"]:
        _consistent(run)
        assert run["row"] == 2 and run["left_padded"]
    summary = result["summary"]
    assert summary["diverged"] == 0 and summary["passes_matching"] == summary["passes_total"] == 2 * passes
    assert summary["equivalence_classes"] == [[1, 3, 5]] and summary["repeat_control_identical"]


def test_stock_diverges_at_another_row(tiny_short_canvas):
    settings = BatchStudySettings(batch_sizes=[1, 3], fill="mixed", copy_prompt_cache=False, mode="stock",
                                  generation=GENERATION, row=1)
    result = run_batch_study(tiny_short_canvas, [Prompt("short", "tell a story")], settings)
    (run,) = result["runs"]
    _consistent(run)
    assert run["diverged"] and run["passes_matching"] < run["passes_total"] == PASSES
    assert run["first_divergence"]["pass"] == "canvas 0 encoder" and run["origin"]["kind"] == "semantic"
