"""``canvaslab serve`` on the command line: bad options are one line and exit 2 before anything loads; the real
command serves, and on SIGTERM answers the request in flight before it exits."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from typer.testing import CliRunner

from canvaslab.cli.main import app


@pytest.mark.parametrize("args, fragment", [
    (["--mode", "fast"], "--mode 'fast'"),
    (["--batching", "dynamic"], "--batching 'dynamic'"),
    (["--port", "0"], "--port 0"),
    (["--port", "70000"], "--port 70000"),
    (["--max-batch", "0"], "--max-batch 0"),
    (["--batch-window-ms", "-1"], "--batch-window-ms -1"),
    (["--max-queue", "0"], "--max-queue 0"),
    (["--steps", "0"], "--steps 0"),
    (["--dtype", "int8"], "--dtype 'int8'"),
    (["--host", " "], "--host"),
])
def test_a_bad_option_is_one_line_and_exit_2(args, fragment, monkeypatch):
    import canvaslab.models

    monkeypatch.setattr(canvaslab.models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    result = CliRunner().invoke(app, ["serve", "--model", "tiny", *args])
    assert result.exit_code == 2 and "Traceback" not in result.output + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr


def test_a_busy_port_is_one_line_before_the_model_loads(monkeypatch):
    import canvaslab.models

    monkeypatch.setattr(canvaslab.models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", "--model", "tiny", "--port", str(port)])
    assert result.exit_code == 2 and f"--port {port}" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read()


def _serve_with_a_request_in_flight(steps: int):
    """A ``canvaslab serve`` process on tiny, and a client thread whose 24-row request is running in a batch."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "canvaslab.cli.main", "serve", "--model", "tiny", "--port",
                                str(port), "--steps", str(steps)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while True:
        try:
            assert json.loads(_get(f"{url}/health"))["status"] == "ok"
            break
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1]
            time.sleep(0.2)
    answer = {}

    def post():
        request = urllib.request.Request(f"{url}/v1/completions", method="POST",
                                         data=json.dumps({"model": "tiny", "prompt": "the man said", "n": 24,
                                                          "seed": 1}).encode(),
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                answer.update(status=response.status, body=json.loads(response.read()))
        except OSError as error:
            answer.update(error=error)

    client = threading.Thread(target=post)
    client.start()
    deadline = time.monotonic() + 60
    while b"canvaslab_running_rows 0.0" in _get(f"{url}/metrics"):  # until its first batch runs
        assert client.is_alive() and time.monotonic() < deadline
        time.sleep(0.02)
    return process, client, answer


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_stop_signal_answers_the_request_in_flight_then_exits_cleanly(stop):
    process, client, answer = _serve_with_a_request_in_flight(steps=2)
    try:
        process.send_signal(stop)
        client.join(300)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert answer["status"] == 200 and len(answer["body"]["choices"]) == 24
    # drained: a clean exit, not the signal's status, and not the message of a second Ctrl-C
    assert process.returncode == 0 and "Traceback" not in stderr and "without waiting" not in stderr
    assert "Shutting down" in stderr and "Application shutdown complete" in stderr


def test_a_second_ctrl_c_stops_at_once_with_one_line_and_no_traceback():
    process, client, answer = _serve_with_a_request_in_flight(steps=1024)  # still running after 0.5 s
    try:
        process.send_signal(signal.SIGINT)
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
        client.join(60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1] == "stopped without waiting for the requests in flight"
    assert "error" in answer  # the request in flight was not answered: its connection closed
