"""lm-evaluation-harness, unchanged, against `canvaslab serve`: the server started as a user starts it, then
`lm_eval` (its own command line) driving it through `local-completions` and `local-chat-completions` on a small
local generation task (a JSONL written here, `generate_until` with `until` stops; nothing downloaded). Writes
what lm_eval reports per model type and what the server counted (requests by status, tokens).

    python benchmarks/lm_eval_serve.py --model mini --steps 8 --out OUT
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.io import write_json_atomic

# question, answer: short factual prompts whose answers end at a newline
QUESTIONS = [
    ("What is the capital of France?", "Paris"), ("What is two plus three?", "five"),
    ("What color is the sky on a clear day?", "blue"), ("How many legs does a dog have?", "four"),
    ("What is the opposite of hot?", "cold"), ("What do bees make?", "honey"),
    ("What is frozen water called?", "ice"), ("Which animal says moo?", "cow"),
]
TASK = """task: canvaslab_qa
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "Q: {{{{question}}}}\\nA:"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n", "Q:"]
  max_gen_toks: {max_tokens}
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: true
"""
KINDS = {"local-completions": "/v1/completions", "local-chat-completions": "/v1/chat/completions"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_task(folder: Path, max_tokens: int) -> None:
    data = folder / "canvaslab_qa.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in QUESTIONS))
    (folder / "canvaslab_qa.yaml").write_text(TASK.format(data=data, max_tokens=max_tokens))


def start_server(args, port: int, log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "canvaslab.cli.main", "serve", "--model", args.model, "--device", args.device,
               "--port", str(port), "--max-batch", "8", "--batch-window-ms", "50"]
    if args.steps:
        command += ["--steps", str(args.steps)]
    with log.open("w") as output:  # a file, not a pipe: nobody reads the server's log while it runs
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + args.start_timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return process
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise SystemExit(f"the server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)


def run_lm_eval(kind: str, port: int, args, tasks: Path, out: Path) -> dict:
    model_args = (f"model={args.model},base_url=http://127.0.0.1:{port}{KINDS[kind]},tokenizer_backend=None,"
                  f"tokenized_requests=False,num_concurrent={args.concurrent},max_retries=1,timeout=600")
    command = [sys.executable, "-m", "lm_eval", "--model", kind, "--model_args", model_args, "--tasks", "canvaslab_qa",
               "--include_path", str(tasks), "--output_path", str(out / kind), "--log_samples", "--seed", "0"]
    if kind == "local-chat-completions":
        command.append("--apply_chat_template")
    if args.limit:
        command += ["--limit", str(args.limit)]
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(out / "hf-datasets")}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"lm_eval --model {kind} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    results = json.loads(next((out / kind).rglob("results_*.json")).read_text())
    samples = [json.loads(line) for path in (out / kind).rglob("samples_*.jsonl") for line in path.open()]
    scores = {key: value for key, value in results["results"]["canvaslab_qa"].items() if key != "alias"}
    return {"command": command, "seconds": seconds, "scores": scores, "samples": len(samples),
            "answers": [{"question": s["doc"]["question"], "response": s["resps"][0][0],
                         "exact_match": s.get("exact_match")} for s in samples]}


def server_counts(port: int) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    counts = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "canvaslab_requests_total":
                counts[f"{sample.labels['endpoint']} {sample.labels['status']}"] = sample.value
            elif sample.name == "canvaslab_generated_tokens_total":
                counts["generated_tokens"] = sample.value
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mini", help="what `canvaslab serve --model` takes (default mini)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=None, help="max denoising steps per canvas (default: the model's)")
    parser.add_argument("--max-tokens", type=int, default=32, help="the task's max_gen_toks")
    parser.add_argument("--limit", type=int, default=None, help="questions per model type (default: all 8)")
    parser.add_argument("--concurrent", type=int, default=4, help="lm_eval's num_concurrent")
    parser.add_argument("--start-timeout", type=float, default=600)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one lm_eval run may take")
    parser.add_argument("--out", type=Path, required=True, help="result folder: writes lm_eval_serve.json there")
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    result = {"environment": environment_fingerprint(), "config": {k: v for k, v in vars(args).items() if k != "out"},
              "lm_eval_version": _version("lm_eval"), "runs": {}}
    with tempfile.TemporaryDirectory() as scratch:
        tasks = Path(scratch)
        write_task(tasks, args.max_tokens)
        server = start_server(args, port, tasks / "server.log")
        try:
            for kind in KINDS:
                result["runs"][kind] = run_lm_eval(kind, port, args, tasks, Path(scratch) / "lm_eval")
                print({kind: result["runs"][kind]["scores"], "seconds": round(result["runs"][kind]["seconds"], 1)},
                      flush=True)
            result["server"] = server_counts(port)
        finally:
            server.terminate()
            server.wait(timeout=600)
    path = args.out / "lm_eval_serve.json"
    write_json_atomic(path, result)
    record_result(path, shows="lm-evaluation-harness's local-completions and local-chat-completions, unchanged, "
                  "against `canvaslab serve` on a local generate_until task: its scores, answers and the server's "
                  "request counts by status", environment=result["environment"])
    print(result["server"])


def _version(package: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(package.replace("_", "-"))


if __name__ == "__main__":
    main()
