"""Keep every number: each plan's run gives the summary the layers give when driven the way the commands drove
them before the Python API (the command bodies of d5f9fed, reproduced with the same layer functions), minus
what differs between two runs of anything (the environment record, a result's own path). The plans' sha256s,
the studies' identities, are equal too, so a folder written before the API resumes under it.

Checked once by hand against the old commit's command itself (worktree of d5f9fed, same settings as the
README's smallest runs): batch_study.json, noise_study.json, plan.json and every store/plan.sha256 equal; the
order study differs in source.path only; the op scan in the three ops c39e0df added (the other 17, equal)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

from canvaslab import BatchSizeStudy, CommitOrderStudy, NoiseStudy, OpScan, open_results
from canvaslab.io import read_json
from canvaslab.models import load_model
from canvaslab.studies.engine import run_study

# The model as the commands recorded it in a plan (random weights: no fingerprint), tiny's defaults.
SPEC = {"spec": "tiny", "dtype": "auto", "device": "cpu", "layers": None, "seed": 0}


def comparable(summary: dict, *paths: str) -> dict:
    """``summary`` without its environment record and the given dotted paths (a result's own folder)."""
    summary = copy.deepcopy(summary)
    summary.pop("environment", None)
    for path in paths:
        *parents, last = path.split(".")
        node = summary
        for part in parents:
            node = node[part]
        node.pop(last)
    return summary


def plan_sha256(folder: Path) -> str:
    return (Path(folder) / "store" / "plan.sha256").read_text().split()[0]


def test_the_spec_has_no_weights_fingerprint():
    from canvaslab.models.weights import weights_fingerprint

    assert weights_fingerprint("tiny") is None  # SPEC is what the commands recorded for tiny


def test_batch_size_study(tiny, tmp_path):
    from canvaslab.prompts import resolve_prompts
    from canvaslab.studies.batch_size import BatchStudySettings, run_batch_study
    from canvaslab.studies.batch_size.study import BatchSizeStudy as Units

    api = BatchSizeStudy(prompts=2, batch_sizes=(1, 2), steps=2, repeat_control="same-process").run(
        out=tmp_path / "api")
    settings = BatchStudySettings(batch_sizes=[1, 2], fill="copies", copy_prompt_cache=True, rng="row",
                                  mode="stock", seed=0, generation={"max_denoising_steps": 2, "max_new_tokens": None},
                                  record_ops=True, repeat_control="same-process", row=0)
    before, outcome = run_study(Units(SPEC, resolve_prompts("2"), settings, loaded=tiny), tmp_path / "layers")
    assert outcome.ran == api.outcome.ran == 2
    assert comparable(api.summary) == comparable(before)
    assert api.summary["environment"].keys() == before["environment"].keys()
    assert plan_sha256(tmp_path / "api") == plan_sha256(tmp_path / "layers")
    assert open_results(tmp_path / "api").to_pandas()["unit"].tolist() == \
        open_results(tmp_path / "layers").to_pandas()["unit"].tolist()

    # the layer's own entry point (its plan names the loaded model otherwise): the same comparison and summary
    direct = run_batch_study(tiny, resolve_prompts("2"), settings)
    for key in ("runs", "summary", "equivalence_classes_per_prompt", "reference_canvas_paths",
                "canvas_token_text", "repeat_control"):
        assert api.summary[key] == direct[key], key


def test_op_scan(tmp_path):
    from canvaslab.studies.op_scan import OpScanStudy, scan_ops

    api = OpScan(batch_sizes=(1, 2, 3)).run(out=tmp_path / "api")
    loaded = load_model("tiny", layers=1)  # what op-scan loads: one layer
    before, _ = run_study(OpScanStudy({**SPEC, "layers": 1}, ["stock", "invariant"], [1, 2, 3], 0, loaded=loaded),
                          tmp_path / "layers")
    assert comparable(api.summary) == comparable(before)
    assert plan_sha256(tmp_path / "api") == plan_sha256(tmp_path / "layers")
    assert api.summary["scans"][0] == scan_ops(loaded, [1, 2, 3], "stock")


def test_op_scan_command(tmp_path):
    """The command, through the installed entry point, writes what the plan writes."""
    api = OpScan(mode="stock", batch_sizes=(1, 2)).run(out=tmp_path / "api")
    done = subprocess.run([sys.executable, "-m", "canvaslab.cli.main", "op-scan", "--mode", "stock",
                           "--batch-sizes", "1,2", "--out", str(tmp_path / "cli")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert comparable(read_json(tmp_path / "cli" / "op_scan.json")) == comparable(api.summary)
    assert plan_sha256(tmp_path / "api") == plan_sha256(tmp_path / "cli")


def test_commit_order_study(tiny, tmp_path):
    from canvaslab.scoring.probes import load_probe_suite
    from canvaslab.studies.commit_order.study import run_order_study

    api = CommitOrderStudy(regimes="math", seeds=2, prompts_per_regime=2, steps=2, max_new_tokens=16,
                           bootstrap=20).run(out=tmp_path / "api")
    probes = load_probe_suite(["math"], "confirmatory", 2, suite="default")
    config = {"command": {"model": "tiny", "split": "confirmatory", "suite": "default", "prompts_per_regime": 2,
                          "dtype": "auto", "device": str(tiny.device), "layers": None, "model_seed": 0}}
    before = run_order_study(tiny, probes, [0, 1], out_dir=tmp_path / "layers", batch_size=8, mode="stock",
                             rng="row", generation={"max_denoising_steps": 2, "max_new_tokens": 16}, parquet=False,
                             n_bootstrap=20, progress=None, config=config, model=SPEC)
    outcome = before.pop("outcome")
    assert outcome["ran"] == api.outcome.ran == 4
    assert comparable(api.summary, "source.path") == comparable(before, "source.path")
    assert plan_sha256(tmp_path / "api") == plan_sha256(tmp_path / "layers")
    assert (tmp_path / "api" / "traces.jsonl").read_bytes() == (tmp_path / "layers" / "traces.jsonl").read_bytes()


def test_noise_study(tmp_path):
    from canvaslab.studies.unused_tokens.model_facts import read_model_facts
    from canvaslab.studies.unused_tokens.noise_study import run_noise_study
    from canvaslab.studies.unused_tokens.plan import build_plan, save_plan
    from canvaslab.studies.unused_tokens.token_pools import build_token_pools

    api = NoiseStudy(design="small").run(out=tmp_path / "api")
    facts, tokenizer = read_model_facts("tiny", None, 0)  # `noise-study plan` before the API
    pools = build_token_pools(tokenizer, facts.vocab_size, facts.generation_defaults, None)
    digest = save_plan(build_plan(facts, tokenizer, pools, design="small", seed=0, margin=None), tmp_path / "layers")
    before = run_noise_study(tmp_path / "layers")  # `noise-study run` before the API
    outcome = before.pop("outcome")
    assert outcome["ran"] == api.outcome.ran == 12
    assert comparable(api.summary) == comparable(before)
    assert (tmp_path / "api" / "plan.sha256").read_text().split()[0] == digest
    assert (tmp_path / "api" / "plan.json").read_bytes() == (tmp_path / "layers" / "plan.json").read_bytes()
    assert plan_sha256(tmp_path / "api") == plan_sha256(tmp_path / "layers")


def test_every_registered_study_is_compared_here():
    """A study added to the registry gets a comparison above (what its layers give without its plan)."""
    import canvaslab

    compared = {"batch_size", "op_scan", "commit_order", "unused_tokens"}
    assert set(canvaslab.STUDIES) == compared, \
        "a new study: add its layers-vs-plan comparison to tests/api/test_same_numbers.py"
