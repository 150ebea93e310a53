"""`canvaslab serve` under hostile connections at a 1,024-descriptor limit: N slow clients each hold a half-sent
request (half a header or half a body, reopened a second after the server closes it) while a normal client keeps
asking /health and /v1/completions; then SIGTERM with those half-sent requests still held, and a second server
started on the busy port. Per scenario: the normal client's answers and latencies (alone first, for a third of
the attack's time, then under attack), what the slow clients got (cut, refused with 503), the server's log size
and its accept-error lines, the stop's time and exit status.

Scenarios: `cap` (the server's defaults: the connection cap below the descriptor limit) and `flood` (a
`--max-connections` above the descriptor limit, so accepts fail with "Too many open files": the log stays
bounded). Localhost only; every phase has a bound in time and count.

    python benchmarks/serve_hostile.py --model tiny --steps 2 --descriptors 1024 --slow 1100 --seconds 30 \\
        --read-timeout 10 --reopen-after 1 --out OUT
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.io import write_json_atomic

HALF_HEADER = b"GET /health HTTP/1.1\r\nHost: slow.client\r\n"
ACCEPT_ERROR = "cannot accept connections"


def half_body(model: str) -> bytes:
    body = json.dumps({"model": model, "prompt": "the man said", "max_tokens": 4}).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: slow.client\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(body)) + body[:len(body) // 2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(args, port: int, log: Path, extra: list[str]) -> subprocess.Popen:
    """``canvaslab serve`` in a child process whose descriptor limit, soft and hard, is ``--descriptors``."""
    def limit_descriptors():
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.descriptors, args.descriptors))

    command = [sys.executable, "-m", "canvaslab.cli.main", "serve", "--model", args.model, "--port", str(port),
               "--steps", str(args.steps), "--read-timeout", str(args.read_timeout), *extra]
    with open(log, "w") as out:
        return subprocess.Popen(command, stdout=out, stderr=out, preexec_fn=limit_descriptors,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})


def wait_for(log: Path, process: subprocess.Popen, fragment: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while fragment not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the server did not say {fragment!r}:\n{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)


async def slow_client(port: int, request: bytes, reopen_after_s: float, stop: asyncio.Event,
                      tally: collections.Counter) -> None:
    """Holds a half-sent request until the server closes it, then opens another ``reopen_after_s`` later, until
    ``stop``."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            tally["connect_failed"] += 1
            await asyncio.sleep(reopen_after_s)
            continue
        tally["opened"] += 1
        try:
            writer.write(request)
            answer = await reader.read(65536)
        except (ConnectionResetError, BrokenPipeError):
            answer = b""
        tally["refused_503" if answer.startswith(b"HTTP/1.1 503") else "cut"] += 1
        writer.close()
        await asyncio.sleep(reopen_after_s)


def summary(seconds: list[float]) -> dict:
    if not seconds:
        return {"n": 0}
    ordered = sorted(seconds)
    return {"n": len(ordered), "p50_s": round(statistics.median(ordered), 4),
            "p99_s": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 4), "max_s": round(ordered[-1], 4)}


async def normal_client(url: str, model: str, until: float) -> dict:
    """/health and a short completion, one after the other, until ``until``: each answer's status and latency."""
    answers = collections.defaultdict(lambda: {"statuses": collections.Counter(), "seconds": []})
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        while time.monotonic() < until:
            for path, body in (("/health", None), ("/v1/completions", {"model": model, "prompt": "the man said",
                                                                       "max_tokens": 8, "seed": 1})):
                started = time.perf_counter()
                try:
                    response = await (client.get(path) if body is None else client.post(path, json=body))
                    status = str(response.status_code)
                except httpx.HTTPError as error:
                    status = type(error).__name__
                answers[path]["statuses"][status] += 1
                answers[path]["seconds"].append(time.perf_counter() - started)
    return {path: {"statuses": dict(seen["statuses"]), "latency": summary(seen["seconds"])}
            for path, seen in answers.items()}


async def attack(args, port: int, process: subprocess.Popen, log: Path) -> dict:
    url = f"http://127.0.0.1:{port}"
    quiet = await normal_client(url, args.model, time.monotonic() + args.seconds / 3)  # the same machine, no attack
    stop, tally = asyncio.Event(), collections.Counter()
    requests = [HALF_HEADER, half_body(args.model)]
    slow = [asyncio.create_task(slow_client(port, requests[i % 2], args.reopen_after, stop, tally))
            for i in range(args.slow)]
    deadline = time.monotonic() + args.seconds
    while tally["opened"] < args.slow and time.monotonic() < deadline:  # every slow client has sent its half
        await asyncio.sleep(0.05)
    held = tally["opened"]
    normal = await normal_client(url, args.model, time.monotonic() + args.seconds)
    stop.set()
    stopping, drained = time.monotonic(), None
    process.send_signal(signal.SIGTERM)  # the slow clients still hold their half-sent requests
    while process.poll() is None and time.monotonic() - stopping < 300:
        if drained is None and "Application shutdown complete" in log.read_text(errors="replace"):
            drained = time.monotonic() - stopping
        await asyncio.sleep(0.05)
    stop_seconds = time.monotonic() - stopping
    _, pending = await asyncio.wait(slow, timeout=30)
    for task in pending:
        task.cancel()
    return {"normal_client_alone": quiet, "slow_clients_connected_before_the_normal_client": held,
            "normal_client": normal,
            "slow_clients": dict(tally), "stop": {
                "seconds_to_drained": None if drained is None else round(drained, 2),
                "seconds_to_exit": round(stop_seconds, 2), "exit_status": process.poll()}}


def scenario(args, name: str, extra: list[str], folder: Path) -> dict:
    port, log = free_port(), folder / f"{name}.log"
    process = start_server(args, port, log, extra)
    try:
        wait_for(log, process, "Application startup complete", timeout_s=300)
        started = log.stat().st_size
        result = asyncio.run(attack(args, port, process, log))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = log.read_text(errors="replace")
    result["server_log"] = {"bytes_during_the_attack": log.stat().st_size - started,
                            "accept_error_lines": text.count(ACCEPT_ERROR),
                            "asyncio_accept_tracebacks": text.count("out of system resource"),
                            "tracebacks": text.count("Traceback")}
    result["server_options"] = extra
    return result


def busy_port(args, folder: Path) -> dict:
    """A second server started on the port of one that is up: its exit status, its output's lines, whether it
    got as far as loading the model."""
    port, first_log = free_port(), folder / "first.log"
    first = start_server(args, port, first_log, [])
    try:
        wait_for(first_log, first, "Application startup complete", timeout_s=300)
        started = time.monotonic()
        second = subprocess.run([sys.executable, "-m", "canvaslab.cli.main", "serve", "--model", args.model, "--port",
                                 str(port)], capture_output=True, text=True, timeout=300)
        output = (second.stdout + second.stderr).strip().splitlines()
        return {"exit_status": second.returncode, "output_lines": len(output), "output": output[:3],
                "loaded_the_model": any(line.startswith("serving ") for line in output),
                "seconds": round(time.monotonic() - started, 2)}
    finally:
        first.send_signal(signal.SIGTERM)
        try:
            first.wait(120)
        except subprocess.TimeoutExpired:
            first.kill()
            first.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="preset, installed model, checkpoint directory or config.json")
    parser.add_argument("--steps", type=int, default=2, help="max denoising steps per canvas")
    parser.add_argument("--descriptors", type=int, default=1024, help="the server's descriptor limit, soft and hard")
    parser.add_argument("--slow", type=int, default=1100, help="slow clients, each holding a half-sent request")
    parser.add_argument("--seconds", type=float, default=30, help="how long the normal client asks under attack")
    parser.add_argument("--read-timeout", type=float, default=10, help="the server's --read-timeout")
    parser.add_argument("--reopen-after", type=float, default=1.0,
                        help="seconds a slow client waits before it opens a new connection after one was closed")
    parser.add_argument("--scenarios", default="cap,flood", help="comma-separated: cap, flood")
    parser.add_argument("--out", type=Path, required=True, help="result folder: writes serve_hostile.json there")
    args = parser.parse_args()
    names = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    if not names or set(names) - {"cap", "flood"}:
        parser.error(f"--scenarios {args.scenarios!r}: give cap, flood or both")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < args.slow + 256:
        parser.error(f"--slow {args.slow}: this process may open only {hard} descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the slow clients' own connections

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "serve_hostile.json"
    result = {"environment": environment_fingerprint(), "config": {k: v for k, v in vars(args).items() if k != "out"},
              "scenarios": {}}
    options = {"cap": [], "flood": ["--max-connections", str(4 * args.descriptors)]}
    with tempfile.TemporaryDirectory() as logs:
        for name in names:
            result["scenarios"][name] = scenario(args, name, options[name], Path(logs))
            write_json_atomic(path, result)
            print({name: result["scenarios"][name]}, flush=True)
        result["busy_port"] = busy_port(args, Path(logs))
    write_json_atomic(path, result)
    print({"busy_port": result["busy_port"]}, flush=True)
    record_result(path, shows="`canvaslab serve` at a descriptor limit under slow clients holding half-sent requests: "
                  "the normal client's answers and latencies, the slow clients' outcomes, the log's size and accept "
                  "errors, the stop with half-sent requests held, and a second server on the busy port",
                  environment=result["environment"])


if __name__ == "__main__":
    main()
