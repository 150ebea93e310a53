"""The server against hostile connections: half-sent requests are cut off at the read deadline, the connection cap
makes room by closing the connection that waits longest on its client (or refuses a new one with an OpenAI-shaped
503), accept errors are logged at a bounded rate, the descriptor limit is raised, a second server on a port fails
at the port check, and the stop drains only what it received whole, within its deadline."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
from typer.testing import CliRunner

from canvaslab.cli.main import app as cli
from canvaslab.errors import CanvaslabError
from canvaslab.serving import Engine, ServerOptions, ServeSettings, bound_socket, create_app, running_server
from canvaslab.serving.server import AcceptErrorLog

from serving_helpers import STEPS

HALF_HEADER = b"GET /health HTTP/1.1\r\nHost: serve.test\r\n"


def _completion(extra_headers: bytes = b"", **fields) -> tuple[bytes, bytes]:
    """A completions request on ``tiny`` as (its head, blank line included; its body)."""
    body = json.dumps({"model": "tiny", "prompt": "the man said", "max_tokens": 4, "seed": 1, **fields}).encode()
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: serve.test\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n%s\r\n" % (len(body), extra_headers))
    return head, body


@contextlib.contextmanager
def _server(loaded, generate=None, **options):
    engine = Engine(loaded, ServeSettings("tiny", steps=STEPS), generate=generate)
    with running_server(create_app(engine), options=ServerOptions(**options)) as url:
        yield int(url.rsplit(":", 1)[1]), url


def _connect(port: int, data: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(data)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """True once the server closes the connection (the read blocks until then; the 60 s timeout only guards the
    suite when the server never does)."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.status, response.read()


def _answered_499s(url: str) -> int:
    found = re.search(rb'canvaslab_requests_total\{endpoint="/v1/completions",status="499"\} (\S+)',
                      _get(f"{url}/metrics")[1])
    return int(float(found.group(1))) if found else 0


# ---- the read deadline --------------------------------------------------------------------------------------

def test_half_a_header_is_cut_off_at_the_read_deadline(tiny):
    with _server(tiny, read_timeout_s=0.5) as (port, url):
        with _connect(port, HALF_HEADER) as slow, _connect(port) as silent:
            assert _closed_by_server(slow) and _closed_by_server(silent)
        assert _get(f"{url}/health")[0] == 200


def test_half_a_body_is_cut_off_without_a_traceback(tiny, caplog):
    uvicorn_errors = logging.getLogger("uvicorn.error")  # the server's own configuration is in place by now
    head, body = _completion()
    with _server(tiny, read_timeout_s=0.5) as (port, url):
        uvicorn_errors.addHandler(caplog.handler)
        try:
            with _connect(port, head + body[:10]) as slow:
                assert _closed_by_server(slow)
            while _answered_499s(url) < 1:  # the app saw the client go: its handler ended quietly
                pass
        finally:
            uvicorn_errors.removeHandler(caplog.handler)
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR], caplog.text


# ---- the connection cap -------------------------------------------------------------------------------------

def test_at_the_cap_a_new_connection_replaces_the_one_waiting_longest(tiny):
    with _server(tiny, max_connections=2) as (port, url):
        with _connect(port, HALF_HEADER) as oldest, _connect(port, HALF_HEADER) as newer:
            assert _get(f"{url}/health")[0] == 200  # a third connection: the oldest half-sent one made room
            assert _closed_by_server(oldest)
            newer.sendall(b"\r\n")  # the newer one was kept: it can finish its request
            assert newer.recv(65536).startswith(b"HTTP/1.1 200")


def test_at_the_cap_with_every_connection_answering_a_new_one_gets_a_503(tiny, gate):
    with _server(tiny, generate=gate, max_connections=1) as (port, _):
        with _connect(port, b"".join(_completion())) as busy:
            try:
                assert gate.entered.wait(60)  # its request is being answered
                with _connect(port, HALF_HEADER) as refused:
                    answer = b""
                    while chunk := refused.recv(65536):
                        answer += chunk
            finally:
                gate.release.set()
            assert busy.recv(65536).startswith(b"HTTP/1.1 200")
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "too_many_connections" and error["type"] == "server_error" and "1 connections" in \
        error["message"]


def test_the_default_cap_leaves_room_for_the_process_own_files():
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert ServerOptions().connection_cap() == soft - 256 and ServerOptions(max_connections=5).connection_cap() == 5


# ---- accept errors, the descriptor limit --------------------------------------------------------------------

def test_out_of_descriptor_accept_errors_are_logged_at_a_bounded_rate(caplog):
    class Loop:
        others = []

        def default_exception_handler(self, context):
            self.others.append(context)

    handler, loop = AcceptErrorLog(interval_s=3600), Loop()
    error = OSError(24, "Too many open files")
    with caplog.at_level(logging.ERROR, logger="canvaslab.serving"):
        for _ in range(5000):  # asyncio's retries of one flood: up to its backlog per loop tick
            handler(loop, {"message": AcceptErrorLog.MESSAGE, "exception": error})
        handler(loop, {"message": "something else"})
    assert len(caplog.records) == 1 and "Too many open files" in caplog.records[0].getMessage()
    assert loop.others == [{"message": "something else"}] and handler.left_out == 4999


def test_an_accept_flood_past_the_descriptor_limit_logs_a_few_lines_and_recovers(tmp_path):
    """A real server at 100 descriptors with a cap above them: 150 half-sent connections exhaust its descriptors;
    asyncio's retries would log thousands of tracebacks, the server logs one line, and once the read deadline
    frees descriptors /health answers again."""
    with _serve(tmp_path, ["--max-connections", "1000", "--read-timeout", "1"], descriptors=100) as server:
        server.wait_healthy()
        sockets = [_connect(server.port, HALF_HEADER) for _ in range(150)]
        server.wait_for_line("cannot accept connections")
        assert _get(f"http://127.0.0.1:{server.port}/health")[0] == 200  # in the backlog until descriptors free up
        for sock in sockets:
            sock.close()
        server.process.send_signal(signal.SIGTERM)
        log = server.ended()
    assert server.process.returncode == 0 and "Traceback" not in log
    assert 1 <= log.count("cannot accept connections") <= 3 and "out of system resource" not in log


def test_the_descriptor_limit_is_raised_to_the_hard_limit():
    script = textwrap.dedent("""
        import resource
        from canvaslab.serving import raise_descriptor_limit
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        print(raise_descriptor_limit() == hard == resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "True", done.stderr


# ---- the port check -----------------------------------------------------------------------------------------

def test_a_second_server_a_moment_later_fails_at_the_port_check(monkeypatch):
    """The first server's check holds the port (bound and listening) while its model loads; the second's check
    fails in one line before its model loads."""
    import canvaslab.models

    monkeypatch.setattr(canvaslab.models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    first = bound_socket("127.0.0.1", 0)
    port = first.getsockname()[1]
    with first:
        result = CliRunner().invoke(cli, ["serve", "--model", "tiny", "--port", str(port)])
        with pytest.raises(CanvaslabError, match=f"--port {port}"):
            bound_socket("127.0.0.1", port)
    assert result.exit_code == 2 and f"--port {port}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, fragment", [
    (["--max-connections", "0"], "--max-connections 0"),
    (["--read-timeout", "0"], "--read-timeout 0"),
    (["--drain-timeout", "-1"], "--drain-timeout -1"),
])
def test_a_bad_limit_is_one_line_and_exit_2(args, fragment, monkeypatch):
    import canvaslab.models

    monkeypatch.setattr(canvaslab.models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    result = CliRunner().invoke(cli, ["serve", "--model", "tiny", *args])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and fragment in lines[0], result.stderr


# ---- the stop -----------------------------------------------------------------------------------------------

class Served:
    """``canvaslab serve --model tiny`` in a child process, its output (log and access log) in a file."""

    def __init__(self, port: int, process: subprocess.Popen, log: Path):
        self.port, self.process, self.log = port, process, log

    def wait_for_line(self, fragment: str) -> None:
        while fragment not in self.log.read_text():
            assert self.process.poll() is None, self.log.read_text()
            time.sleep(0.05)  # polls the log; the test waits for the line, however long it takes

    def wait_healthy(self) -> None:
        self.wait_for_line("Application startup complete")
        assert _get(f"http://127.0.0.1:{self.port}/health")[0] == 200

    def wait_refused(self) -> None:
        """Until the server has closed its port (it handled the stop signal)."""
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=60).close()
            except ConnectionRefusedError:
                return

    def ended(self) -> str:
        """The log once the process has ended by itself."""
        self.process.wait(60)
        return self.log.read_text()


@contextlib.contextmanager
def _serve(tmp_path: Path, args: list[str], steps: int = 2, descriptors: int = 0) -> Iterator[Served]:
    """``canvaslab serve --model tiny`` in a child process (at ``descriptors`` open files, soft and hard, if given);
    killed on the way out if still running."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    def limit_descriptors():
        import resource

        if descriptors:
            resource.setrlimit(resource.RLIMIT_NOFILE, (descriptors, descriptors))

    log = tmp_path / "serve.log"
    with open(log, "w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "canvaslab.cli.main", "serve", "--model", "tiny", "--port",
                                    str(port), "--steps", str(steps), *args],
                                   env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=stderr,
                                   stderr=stderr, preexec_fn=limit_descriptors)
    try:
        yield Served(port, process, log)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_half_sent_body_does_not_hold_up_the_stop_and_the_access_log_can_be_off(tmp_path):
    head, body = _completion(b"expect: 100-continue\r\n")
    with _serve(tmp_path, ["--no-access-log"]) as server:
        server.wait_healthy()
        with _connect(server.port, head) as slow:
            assert slow.recv(65536).startswith(b"HTTP/1.1 100")  # the app is reading its body
            slow.sendall(body[:10])
            server.process.send_signal(signal.SIGTERM)
            log = server.ended()
            assert _closed_by_server(slow)
    assert server.process.returncode == 0 and "Traceback" not in log and "Application shutdown complete" in log
    assert "GET /health" not in log


def _request_in_flight(port: int) -> socket.socket:
    """A connection whose 8-row request is running in a batch (a long one at 1024 steps a canvas)."""
    client = _connect(port, b"".join(_completion(n=8)))
    while b"canvaslab_running_rows 0.0" in _get(f"http://127.0.0.1:{port}/metrics")[1]:
        pass
    return client


def test_past_the_drain_deadline_the_requests_in_flight_are_dropped_and_the_exit_is_0(tmp_path):
    with _serve(tmp_path, ["--drain-timeout", "1"], steps=1024) as server:
        server.wait_healthy()
        with _request_in_flight(server.port) as client:
            server.process.send_signal(signal.SIGTERM)
            log = server.ended()
            assert _closed_by_server(client)
    assert server.process.returncode == 0 and "Traceback" not in log, log
    assert log.strip().splitlines()[-1] == ("stopped after the 1 s drain deadline; the requests still in flight "
                                            "were dropped")
    assert '"GET /health HTTP/1.1" 200' in log  # the access log is on by default


def test_a_second_sigterm_stops_at_once_like_a_second_ctrl_c(tmp_path):
    with _serve(tmp_path, [], steps=1024) as server:
        server.wait_healthy()
        with _request_in_flight(server.port) as client:
            server.process.send_signal(signal.SIGTERM)
            server.wait_refused()
            server.process.send_signal(signal.SIGTERM)
            log = server.ended()
            assert _closed_by_server(client)
    assert server.process.returncode == 130 and "Traceback" not in log, log
    assert log.strip().splitlines()[-1] == "stopped without waiting for the requests in flight"
