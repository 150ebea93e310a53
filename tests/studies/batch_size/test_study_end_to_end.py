"""The study end to end on the tiny preset: its numbers must be consistent with each other."""

import json

import pytest

from canvaslab.cli.main import main
from canvaslab.io import read_json
from canvaslab.prompts import builtin_prompts
from canvaslab.studies.batch_size import BatchStudySettings, run_batch_study

SUMMARY_KEYS = {"runs", "diverged", "text_changed", "stop_changed", "passes_total", "passes_matching",
                "bytes_compared", "equivalence_classes", "repeat_control_identical"}
STEPS = 3


def _check_consistent(result, n_prompts, sizes):
    summary = result["summary"]
    assert set(summary) == SUMMARY_KEYS
    assert summary["runs"] == len(result["runs"]) == n_prompts * (len(sizes) - 1)
    assert summary["passes_matching"] <= summary["passes_total"]
    assert summary["passes_total"] >= summary["runs"] * STEPS
    assert summary["text_changed"] <= summary["diverged"] and summary["stop_changed"] <= summary["diverged"]
    assert sorted(b for group in summary["equivalence_classes"] for b in group) == sizes
    assert summary["repeat_control_identical"] is True
    assert summary["bytes_compared"] == sum(run["bytes_compared"] for run in result["runs"]) > 0
    for run in result["runs"]:
        assert run["batch_size"] != 1
        # diverged exactly when some compared pass differs
        assert run["diverged"] == (run["passes_matching"] < run["passes_total"])
        assert run["diverged"] == (run["first_divergence"] is not None or run["run"]["tokens"] != run["reference"]["tokens"])
        if run["left_padded"]:
            assert run["origin"]["kind"] == "semantic"
        elif run["first_divergence"]:
            assert 0 < run["first_divergence"]["fraction_changed"] <= 1
            assert run["origin"]["name"]
        else:
            assert run["passes_matching"] == run["passes_total"] and not run["text_changed"]
        # batch sizes in one class have identical signatures
        same = next(group for group in summary["equivalence_classes"] if run["batch_size"] in group)
        assert (1 in same) == (not run["diverged"])
    env = result["environment"]
    assert {"device", "torch", "transformers", "dtype", "tf32_matmul", "deterministic_algorithms",
            "attn_implementation", "experts_implementation", "mode"} <= set(env)


def test_cli_study_writes_consistent_json(tmp_path, capsys):
    main(["batch-study", "--prompts", "2", "--batch-sizes", "1,2,3", "--steps", str(STEPS), "--out", str(tmp_path)])
    result = read_json(tmp_path / "batch_study.json")
    _check_consistent(result, 2, [1, 2, 3])
    assert result["repeat_control"]["process"] == "fresh-process"  # the default
    assert len(list((tmp_path / "store" / "records").glob("*.json"))) == 2  # one record per prompt
    out = capsys.readouterr().out
    assert "runs diverged" in out and "batch_study.json" in out
    # on x86 CPUs the tiny float32 model really does depend on batch size
    assert result["summary"]["diverged"] >= 1


def test_mixed_fill_and_encoder_studied(tiny):
    settings = BatchStudySettings(batch_sizes=[1, 2, 3], fill="mixed", copy_prompt_cache=False,
                                  repeat_control="same-process", generation={"max_denoising_steps": STEPS})
    result = run_batch_study(tiny, builtin_prompts(2), settings)
    _check_consistent(result, 2, [1, 2, 3])
    padded = {run["prompt_id"]: run["left_padded"] for run in result["runs"]}
    # builtin-0 (13 tokens) shares its batch with builtin-1 (15 tokens): it is left-padded, the other is not
    assert padded == {"builtin-0": True, "builtin-1": False}


def test_interrupted_study_resumes_without_redoing_prompts(tmp_path, tiny):
    settings = BatchStudySettings(batch_sizes=[1, 2, 3], repeat_control="same-process",
                                  generation={"max_denoising_steps": STEPS})
    prompts = builtin_prompts(2)
    seen = []

    def interrupt_after_first_prompt(done, total, doing):
        seen.append((done, total, doing))
        if done == 1:  # the first prompt (its reference and both batched runs) is stored: stop here
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_batch_study(tiny, prompts, settings, out_dir=tmp_path, progress=interrupt_after_first_prompt)
    # progress counts finished prompts (units)
    assert seen == [(0, 2, ""), (0, 2, "builtin-0"), (1, 2, "")]
    assert [read_json(p)["unit"] for p in (tmp_path / "store" / "records").glob("*.json")] == ["builtin-0"]
    resumed_calls = []
    resumed = run_batch_study(tiny, prompts, settings, out_dir=tmp_path,
                              progress=lambda done, total, doing: resumed_calls.append((done, doing)))
    assert resumed_calls == [(1, ""), (1, "builtin-1"), (2, "")]  # builtin-0 was not run again
    fresh = run_batch_study(tiny, prompts, settings)
    assert [r["signature"] for r in resumed["runs"]] == [r["signature"] for r in fresh["runs"]]
    assert resumed["summary"] == fresh["summary"] and resumed["runs"] == fresh["runs"]


def test_a_study_whose_prompts_failed_raises_instead_of_summarising_what_ran(tiny, tmp_path, monkeypatch):
    """Every run raising (transformers 5.25's renamed RMSNorm attribute did this in invariant mode) once
    returned a summary of zero runs, which reads like a study with nothing to report."""
    import canvaslab.studies.batch_size.study as study_module
    from canvaslab.errors import CanvaslabError

    def broken_generate(*args, **kwargs):
        raise AttributeError("'DiffusionGemmaRMSNorm' object has no attribute 'eps'")

    monkeypatch.setattr(study_module, "generate", broken_generate)
    settings = BatchStudySettings(batch_sizes=[1, 2], repeat_control="same-process",
                                  generation={"max_denoising_steps": 1})
    with pytest.raises(CanvaslabError, match=r"incomplete: prompts: 0 ran, 0 skipped as already done, 2 failed "
                                             r"\(first: builtin-0: AttributeError: .*'eps'"):
        run_batch_study(tiny, builtin_prompts(2), settings, out_dir=tmp_path)
    failed = sorted(read_json(p)["unit"] for p in (tmp_path / "store" / "failed").glob("*.json"))
    assert failed == ["builtin-0", "builtin-1"]
