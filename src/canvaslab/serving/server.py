"""Running the app under uvicorn: in the foreground (``canvaslab serve``) or in a thread (tests, benchmarks).

In the foreground uvicorn handles SIGTERM and Ctrl-C: it stops accepting connections, waits for every request
in flight (streams included) to be answered, then the app's lifespan stops the engine. Having drained, uvicorn
raises the signal it caught once more, under the handlers that were there before it ran (so that a parent sees
how its child ended); ``serve_forever`` takes that echo as the end of a graceful stop and returns. A second
Ctrl-C while draining is uvicorn's forced exit (``KeyboardInterrupt``), or, given ``on_forced_stop``, that
callback at once (``canvaslab serve`` prints one line and ends the process: ``forced_stop_exit``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from typing import Callable, Iterator, Optional

from canvaslab.errors import CanvaslabError


def bound_socket(host: str, port: int) -> socket.socket:
    """A listening-ready socket on ``host:port`` (port 0: a free one); one line if it cannot be had."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise CanvaslabError(f"--host {host}: cannot be resolved ({error.strerror})") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        raise CanvaslabError(f"--port {port}: cannot listen on {host}:{port} ({error.strerror})") from None
    sock.set_inheritable(True)
    return sock


class _Stopped(Exception):
    """SIGTERM raised again by uvicorn after it drained (see the module)."""


def _stopped(signum, frame) -> None:
    raise _Stopped


FORCED_STOP_EXIT = 130


def forced_stop_exit(message: Callable[[], None]) -> Callable[[], None]:
    """An ``on_forced_stop`` for a command: ``message()``, then the process ends at once with status 130. uvicorn's
    own forced exit cancels every request in flight, and each cancelled handler, the lifespan and the loop's
    teardown log a traceback; a server keeps nothing an orderly teardown would save, so it is skipped."""
    def stop() -> None:
        try:
            message()
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - a closed pipe must not keep the process alive
            pass
        finally:
            os._exit(FORCED_STOP_EXIT)

    return stop


def _server(config, on_forced_stop: Optional[Callable[[], None]]):
    """A uvicorn server whose second Ctrl-C calls ``on_forced_stop`` where one is given."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            if on_forced_stop is not None and self.should_exit and sig == signal.SIGINT:
                on_forced_stop()
            super().handle_exit(sig, frame)

    return Server(config)


def serve_forever(app, sock: socket.socket, log_level: str = "info",
                  on_forced_stop: Optional[Callable[[], None]] = None) -> None:
    """Serve ``app`` on ``sock`` until SIGTERM or Ctrl-C, then drain and return; a second Ctrl-C while draining
    calls ``on_forced_stop`` if given, else raises ``KeyboardInterrupt`` once uvicorn has forced its exit (the
    requests in flight were not all answered). Call it from the main thread."""
    import uvicorn

    config = uvicorn.Config(app, log_level=log_level, lifespan="on", timeout_graceful_shutdown=None)
    server = _server(config, on_forced_stop)
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        server.run(sockets=[sock])
    except (_Stopped, KeyboardInterrupt):
        if server.force_exit:
            raise KeyboardInterrupt from None
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def running_server(app, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 120) -> Iterator[str]:
    """``app`` under uvicorn in a thread on ``host`` (port 0: a free one); yields its base URL
    (``http://127.0.0.1:PORT``) and on exit shuts it down gracefully (in-flight requests are answered)."""
    import uvicorn

    sock = bound_socket(host, port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="canvaslab-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    try:
        bound_host, bound_port = sock.getsockname()[:2]
        yield f"http://{'[' + bound_host + ']' if ':' in bound_host else bound_host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(timeout=600)
        sock.close()
