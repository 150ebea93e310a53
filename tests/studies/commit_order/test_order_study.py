"""The order study end to end on the tiny preset: traces and measures written, resume after an interruption
without duplicates, settings mixing refused, the autoregressive baseline scored, and the CLI."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from canvaslab.cli.main import main
from canvaslab.errors import CanvaslabError
from canvaslab.io import read_json
from canvaslab.models.tokenizer import build_synthetic_tokenizer
from canvaslab.studies.commit_order.baseline import BASELINE_FILE, run_baseline
from canvaslab.scoring.probes import load_probe_suite
from canvaslab.studies.commit_order.study import (
    METRICS_FILE,
    PARQUET_FILE,
    TRACES_FILE,
    batches,
    plan_generations,
    run_order_study,
)
from canvaslab.capture.commit_trace import read_traces

GENERATION = {"max_denoising_steps": 3}
SEEDS = [0, 1]


@pytest.fixture(scope="module")
def probes():
    return load_probe_suite(["factual", "open_ended"], "confirmatory", per_regime=2, seed=0)


def _expected_ids(probes, seeds):
    return {f"{probe.probe_id}#{seed}" for probe in probes for seed in seeds}


def _study(tiny, probes, out, **kwargs):
    arguments = {"batch_size": 3, "generation": GENERATION, "n_bootstrap": 20, **kwargs}
    return run_order_study(tiny, probes, SEEDS, out_dir=out, **arguments)


def test_study_writes_traces_and_metrics_for_every_regime(tiny, probes, tmp_path):
    metrics = _study(tiny, probes, tmp_path, parquet=True)
    traces = list(read_traces(tmp_path / TRACES_FILE))
    assert {trace.generation_id for trace in traces} == _expected_ids(probes, SEEDS)
    for trace in traces:
        assert trace.budget == 3 and len(trace.content) == 256 and 1 <= len(trace.calls) <= 3
        assert {"prompt", "text", "tokens", "split", "stop_passes", "study_key"} <= set(trace.extra)
        assert trace.extra["split"] == "confirmatory"
        assert (trace.correct is None) == (trace.regime == "open_ended")
    written = read_json(tmp_path / METRICS_FILE)
    assert list(written["regimes"]) == ["factual", "open_ended"]  # the order asked for
    assert written["n_generations"] == 8 and written["regimes"]["factual"]["n_scored"] == 4
    assert written["study"]["seeds"] == SEEDS and written["study"]["generation"]["max_denoising_steps"] == 3
    assert written["environment"]["mode"] == "stock" and written["source"]["path"].endswith(TRACES_FILE)
    assert written["regimes"] == json.loads(json.dumps(metrics["regimes"]))
    assert len(list(read_traces(tmp_path / PARQUET_FILE))) == 8


def test_batches_hold_one_seed_and_every_pair_once(tiny, probes):
    plan = plan_generations(tiny.tokenizer, probes, SEEDS)
    grouped = batches(plan, 3)
    assert all(len({planned.seed for planned in batch}) == 1 and len(batch) <= 3 for batch in grouped)
    assert sorted(p.generation_id for batch in grouped for p in batch) == sorted(_expected_ids(probes, SEEDS))


def test_resume_after_an_interruption_has_no_duplicates_and_the_same_traces(tiny, probes, tmp_path):
    whole = tmp_path / "whole"
    _study(tiny, probes, whole)

    def interrupt_after_two(done, total, doing):
        if done >= 2:
            raise KeyboardInterrupt

    resumed = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        _study(tiny, probes, resumed, progress=interrupt_after_two)
    assert not (resumed / METRICS_FILE).exists() and len(list((resumed / "store" / "records").glob("*.json"))) == 2
    seen = []
    _study(tiny, probes, resumed, progress=lambda done, total, doing: seen.append(done))
    ids = [trace.generation_id for trace in read_traces(resumed / TRACES_FILE)]
    assert seen[0] == 2 and seen[-1] == 8
    assert len(ids) == len(set(ids)) == 8 and set(ids) == _expected_ids(probes, SEEDS)
    # batches are cut from the plan, not from what was pending: the resumed traces are the uninterrupted ones
    assert (resumed / TRACES_FILE).read_bytes() == (whole / TRACES_FILE).read_bytes()
    assert read_json(resumed / METRICS_FILE)["regimes"] == read_json(whole / METRICS_FILE)["regimes"]


def test_a_rerun_with_other_settings_or_other_probes_is_refused(tiny, probes, tmp_path):
    _study(tiny, probes[:1], tmp_path)
    with pytest.raises(CanvaslabError, match="another plan: plan.generation.max_denoising_steps was 3, now 2"):
        _study(tiny, probes[:1], tmp_path, generation={"max_denoising_steps": 2})
    with pytest.raises(CanvaslabError, match="another plan: plan.probes"):
        _study(tiny, probes[1:2], tmp_path)


def test_static_cache_is_refused_before_generating(tiny, probes, tmp_path, monkeypatch):
    monkeypatch.setattr(tiny.model.generation_config, "cache_implementation", "static")
    with pytest.raises(CanvaslabError, match="static"):
        _study(tiny, probes, tmp_path)
    assert not (tmp_path / TRACES_FILE).exists()


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A random 1-layer LlamaForCausalLM with the synthetic tokenizer, saved like a checkpoint."""
    path = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                         pad_token_id=0, eos_token_id=1, bos_token_id=2)
    LlamaForCausalLM(config).save_pretrained(path)
    build_synthetic_tokenizer(512).save_pretrained(path)
    return path


def test_baseline_scores_every_probe_with_accuracy_per_regime(tiny_llama, tmp_path):
    probes = load_probe_suite(["factual", "json", "open_ended"], "confirmatory", per_regime=2, seed=0)
    result = run_baseline(tiny_llama, probes, tmp_path, max_new_tokens=8, batch_size=4)
    assert [answer["probe_id"] for answer in result["generations"]] == [probe.probe_id for probe in probes]
    for regime in ("factual", "json"):
        summary = result["regimes"][regime]
        assert summary["n"] == summary["n_scored"] == 2 and 0.0 <= summary["accuracy"] <= 1.0
    assert result["regimes"]["open_ended"] == {"n": 2, "n_scored": 0, "accuracy": None}
    assert read_json(tmp_path / BASELINE_FILE) == json.loads(json.dumps(result))


def test_cli_study_with_baseline_prints_the_table(tiny_llama, tmp_path, capsys):
    out = tmp_path / "run"
    main(["order-study", "--regimes", "factual,json", "--seeds", "1", "--prompts-per-regime", "2",
          "--steps", "3", "--max-new-tokens", "8", "--batch-size", "4", "--bootstrap", "10",
          "--baseline", str(tiny_llama), "--out", str(out)])
    metrics = read_json(out / METRICS_FILE)
    assert set(metrics["baseline"]["regimes"]) == {"factual", "json"}
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in metrics["baseline"]["regimes"].values())
    assert metrics["study"]["command"]["prompts_per_regime"] == 2
    assert (out / BASELINE_FILE).is_file()
    captured = capsys.readouterr()
    printed = captured.out
    assert "AR acc" in printed and "factual" in printed and "json" in printed
    assert "pooled AUROC" in printed  # the same lines as order-metrics on the same traces
    _assert_phases_labelled(captured.err.splitlines())


def _assert_phases_labelled(lines: list[str]) -> None:
    """The baseline's probes are counted as probes, after the study's generations, never as generations."""
    baseline = lines.index("baseline: started, 0:00:00")
    assert all(line.startswith("commit-order study: ") for line in lines[:baseline]), lines
    assert all(line.startswith("baseline: ") for line in lines[baseline:]), lines
    assert lines[-1].startswith("baseline: 4/4 probes finished"), lines
    assert not any("running baseline" in line for line in lines), lines


def test_cli_refuses_a_missing_baseline_before_generating(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["order-study", "--regimes", "factual", "--seeds", "1", "--prompts-per-regime", "1",
              "--baseline", str(tmp_path / "nowhere"), "--out", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    assert "--baseline" in capsys.readouterr().err and not (tmp_path / "run").exists()


def _checkpoint(tiny, path, seed: int):
    torch.manual_seed(seed)
    type(tiny.model)._from_config(tiny.model.config).save_pretrained(path)
    tiny.tokenizer.save_pretrained(path)
    return path


def test_a_resume_with_retrained_weights_at_the_same_path_is_refused(tiny, tmp_path, capsys):
    """The plan names the weights, not only the path: a folder is never finished by another model."""
    model, out = _checkpoint(tiny, tmp_path / "ckpt", seed=1), tmp_path / "run"
    arguments = ["order-study", "--model", str(model), "--regimes", "factual", "--seeds", "1",
                 "--prompts-per-regime", "1", "--steps", "2", "--max-new-tokens", "8", "--bootstrap", "10",
                 "--out", str(out)]
    main(arguments)
    main(arguments)  # the same weights resume (nothing left to run)
    _checkpoint(tiny, model, seed=2)
    with pytest.raises(SystemExit) as exit_info:
        main(arguments)
    assert exit_info.value.code == 2
    assert "another plan: plan.model.weights" in capsys.readouterr().err


def test_the_baseline_is_not_reused_for_retrained_weights(tmp_path):
    """baseline.json is reused when its config matches; the same path with other weights must not match."""
    path = tmp_path / "llama"
    probes = load_probe_suite(["factual"], "confirmatory", per_regime=1, seed=0)
    configs = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        config = LlamaConfig(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                             pad_token_id=0, eos_token_id=1, bos_token_id=2)
        LlamaForCausalLM(config).save_pretrained(path)
        build_synthetic_tokenizer(512).save_pretrained(path)
        configs.append(run_baseline(path, probes, tmp_path, max_new_tokens=4, batch_size=1)["config"])
    assert configs[0]["model"] == configs[1]["model"] and configs[0]["weights"] != configs[1]["weights"]
    assert read_json(tmp_path / BASELINE_FILE)["config"] == configs[1]


def test_order_metrics_scores_a_baseline_on_the_probes_of_a_trace_file(tiny_llama, tmp_path, capsys):
    """A baseline for a study whose store is gone (or a retrained sibling): the traces name the probes."""
    study, measured = tmp_path / "study", tmp_path / "measured"
    main(["order-study", "--regimes", "factual,json", "--seeds", "1", "--prompts-per-regime", "2", "--steps", "2",
          "--max-new-tokens", "8", "--bootstrap", "10", "--out", str(study)])
    capsys.readouterr()
    main(["order-metrics", str(study / TRACES_FILE), "--out", str(measured), "--bootstrap", "10",
          "--baseline", str(tiny_llama), "--max-new-tokens", "8"])
    baseline = read_json(measured / BASELINE_FILE)
    traced = list(dict.fromkeys(trace.prompt_id for trace in read_traces(study / TRACES_FILE)))
    assert baseline["config"]["probe_ids"] == traced and baseline["config"]["max_new_tokens"] == 8
    assert set(read_json(measured / METRICS_FILE)["baseline"]["regimes"]) == {"factual", "json"}
    assert "AR acc" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:  # probes of another suite: one line, nothing scored
        main(["order-metrics", str(study / TRACES_FILE), "--out", str(tmp_path / "other"), "--bootstrap", "10",
              "--baseline", str(tiny_llama), "--suite", "mini"])
    assert exit_info.value.code == 2 and "not in probe suite 'mini'" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()


def test_order_metrics_writes_nothing_when_the_baseline_cannot_load(tmp_path, capsys):
    """A baseline that fails to load (here the diffusion model, not a causal LM) leaves no half-written folder,
    and the baseline's settings without --baseline are refused rather than ignored."""
    study = tmp_path / "study"
    main(["order-study", "--regimes", "factual", "--seeds", "1", "--prompts-per-regime", "1", "--steps", "2",
          "--max-new-tokens", "8", "--bootstrap", "10", "--out", str(study)])
    capsys.readouterr()
    from canvaslab.models.registry import model_folder

    for extra, message in ((["--baseline", str(model_folder("mini"))], "cannot load a causal LM"),
                           (["--suite", "mini"], "--suite sets how --baseline runs")):
        with pytest.raises(SystemExit) as exit_info:
            main(["order-metrics", str(study / TRACES_FILE), "--out", str(tmp_path / "measured"), *extra])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
        assert not (tmp_path / "measured").exists()
