"""What a client of ``canvaslab serve`` sees while it drains after SIGTERM, as docs/serving.md says it: the port
is closed at once (a new connection, ``/health`` included, is refused; no 503 is answered), and the request in
flight is still answered."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

SERVING = Path(__file__).resolve().parents[2] / "docs" / "serving.md"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _health(port: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status
    finally:
        connection.close()


def _running_rows(port: int) -> float:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/metrics")
        metrics = connection.getresponse().read().decode()
    finally:
        connection.close()
    return float(re.search(r"^canvaslab_running_rows (\S+)$", metrics, re.M).group(1))


def _until_refused(port: int) -> list:
    """The statuses of /health until a connection is refused (the server has seen the signal), then "refused"; a
    connection that reached the port as it closed is closed unanswered ("reset")."""
    seen = []
    while True:
        try:
            seen.append(_health(port))
        except ConnectionRefusedError:
            return [*seen, "refused"]
        except (ConnectionResetError, http.client.RemoteDisconnected):
            seen.append("reset")


def test_while_draining_new_connections_are_refused_as_the_page_says():
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "canvaslab.cli.main", "serve", "--model", "tiny", "--port",
                                str(port), "--steps", "4"], env={**os.environ, "OMP_NUM_THREADS": "1"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    answer = {}

    def post():
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        connection.request("POST", "/v1/completions", json.dumps({"model": "tiny", "prompt": "the man said",
                                                                   "n": 8, "max_tokens": 256, "seed": 1}),
                           {"content-type": "application/json"})
        response = connection.getresponse()
        answer.update(status=response.status, body=json.loads(response.read()))

    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                assert _health(port) == 200
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1]
                time.sleep(0.2)
        client = threading.Thread(target=post)
        client.start()
        while _running_rows(port) == 0:  # until the server is running the request (read, queued and batched)
            assert client.is_alive()
        process.send_signal(signal.SIGTERM)
        seen = _until_refused(port)
        draining = client.is_alive()
        client.join(300)
        process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert draining, "the request finished before the probe: no drain was observed"
    assert set(seen) <= {200, "reset", "refused"} and seen[-1] == "refused"  # never a 503
    assert answer["status"] == 200 and process.returncode == 0
    page = SERVING.read_text(encoding="utf-8")
    assert "503 while shutting down" not in page
    stop = page.split("**SIGTERM or Ctrl-C**", 1)[1].split("\n\n", 1)[0]
    assert "refused" in stop and "no 503" in stop, stop
