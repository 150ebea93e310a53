"""Running the app under uvicorn: in the foreground (``canvaslab serve``) or in a thread (tests, benchmarks).

In the foreground uvicorn handles SIGTERM and Ctrl-C: it stops accepting connections, waits for every request
in flight (streams included) to be answered, then the app's lifespan stops the engine. Having drained, uvicorn
raises the signal it caught once more, under the handlers that were there before it ran (so that a parent sees
how its child ended); ``serve_forever`` takes that echo as the end of a graceful stop and returns. A second
Ctrl-C while draining is uvicorn's forced exit (``KeyboardInterrupt``), or, given ``on_forced_stop``, that
callback at once (``canvaslab serve`` prints one line and ends the process: ``forced_stop_exit``); a second
SIGTERM is the same.

Hostile connections (``ServerOptions``): every connection must deliver a whole request (headers and body) within
``read_timeout_s`` of its first byte (a connection that sends nothing: of its opening, or of its last answer), or
it is closed; at ``max_connections`` a new connection takes the place of the one that has waited longest on its
client (half a request, or idle between requests), and when every connection is busy being answered it gets a 503
in OpenAI's shape and is closed. The drain after a stop signal closes the connections still sending a request
and, past ``drain_timeout_s``, ends the process, dropping what is unfinished. The event loop logs "out of
descriptors" accept errors at most once per ``ACCEPT_ERROR_INTERVAL_S``, with a count.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from canvaslab.errors import CanvaslabError
from canvaslab.serving.protocol import error_body

log = logging.getLogger("canvaslab.serving")

# Descriptors kept out of the default cap: the process's own files (lazy imports, the tokenizer, logs) and the
# connections asyncio accepts in one turn of its loop (up to ACCEPT_BATCH) before the cap sees them.
DESCRIPTOR_RESERVE = 256
ACCEPT_BATCH = 64
BACKLOG = 2048  # the kernel's queue of connections not yet accepted
ACCEPT_ERROR_INTERVAL_S = 10.0


@dataclass(frozen=True)
class ServerOptions:
    """How the server guards itself against its clients (see the module) and whether it logs each request."""

    max_connections: Optional[int] = None  # None: the descriptor limit less DESCRIPTOR_RESERVE
    read_timeout_s: float = 30.0
    drain_timeout_s: float = 120.0
    access_log: bool = True

    def connection_cap(self) -> int:
        if self.max_connections is not None:
            return self.max_connections
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        limit = 65536 if soft == resource.RLIM_INFINITY else soft
        return max(1, limit - DESCRIPTOR_RESERVE)


def raise_descriptor_limit() -> int:
    """Raises this process's soft limit on open descriptors to its hard limit (the usual soft 1,024 is a few
    hundred connections); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def bound_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one); one line if it cannot be had. It listens at once,
    so a second server started on the port later fails here (two sockets with SO_REUSEADDR may both bind a
    port that nobody listens on yet)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise CanvaslabError(f"--host {host}: cannot be resolved ({error.strerror})") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError as error:
        sock.close()
        raise CanvaslabError(f"--port {port}: cannot listen on {host}:{port} ({error.strerror})") from None
    sock.set_inheritable(True)
    return sock


class AcceptErrorLog:
    """An event loop's exception handler that logs "out of descriptors" accept errors at most once per
    ``interval_s``, with how many it left out; anything else goes to the loop's default handler.

    On such an error asyncio logs a traceback and schedules a retry of its accept loop, then goes on accepting,
    up to ``backlog`` times in one turn of the loop (hundreds of megabytes of log a minute under a connection
    flood); the retries still pending when the server closes its socket fail once more each (``_start_serving``
    on a closed socket) and are left out as well."""

    MESSAGE = "socket.accept() out of system resource"

    def __init__(self, interval_s: float = ACCEPT_ERROR_INTERVAL_S):
        self.interval_s, self.last, self.left_out = interval_s, -float("inf"), 0

    def __call__(self, loop, context: dict) -> None:
        message = context.get("message", "")
        if message.startswith("Exception in callback") and "._start_serving(" in message:
            self.left_out += 1
            return
        if message != self.MESSAGE:
            loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now - self.last < self.interval_s:
            self.left_out += 1
            return
        error = context.get("exception")
        log.error("cannot accept connections: %s (%d more such errors in the last %.0f s)",
                  getattr(error, "strerror", None) or error, self.left_out, self.interval_s)
        self.last, self.left_out = now, 0


def _raw_answer(status: int, reason: str, body: dict, headers: dict[str, str]) -> bytes:
    """A whole HTTP/1.1 answer that closes its connection, for a connection refused before any request was read
    (h11 answers only a request it has parsed)."""
    content = json.dumps(body).encode()
    lines = [f"HTTP/1.1 {status} {reason}", "content-type: application/json", f"content-length: {len(content)}",
             "connection: close", *(f"{name}: {value}" for name, value in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + content


def _guarded_protocol(cap: int, read_timeout_s: float):
    """uvicorn's h11 protocol with the connection cap and the read deadline of the module's docstring."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    refusal = _raw_answer(503, "Service Unavailable", error_body(
        f"the server is at its limit of {cap} connections, each busy with a request; retry later", "server_error",
        None, "too_many_connections"), {"retry-after": "1"})

    class GuardedH11Protocol(H11Protocol):
        stopping = False  # set on the class by the server when its stop begins
        by_wait: dict = {}  # this server's connections, longest waiting on its client first (a dict keeps order)
        read_deadline = None
        refused = False

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm_read_deadline()
            if self.stopping:  # accepted in the loop's last turn before the port closed: nothing will drain it
                self.cut()
            elif len(self.connections) > cap:
                self._make_room()

        def connection_lost(self, exc) -> None:
            if self.read_deadline is not None:
                self.read_deadline.cancel()
            self.by_wait.pop(self, None)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.refused:
                return  # read and dropped: closing with unread data would reset the connection, answer and all
            if self.conn.their_state is h11.IDLE and not self.conn.trailing_data[0]:
                self._arm_read_deadline()  # the first byte of a request on a kept-alive connection
            super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_read_deadline()  # it now waits on its client for the next request

        def shutdown(self) -> None:
            if self.reading():  # a request not received whole is not drained
                self.cut()
            else:
                super().shutdown()

        def reading(self) -> bool:
            """The server waits on the client: for a request, or for the rest of one, before answering."""
            return (self.conn.their_state in (h11.IDLE, h11.SEND_BODY)
                    and self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE))

        def cut(self) -> None:
            if not self.transport.is_closing():
                self.transport.close()

        def _arm_read_deadline(self) -> None:
            if self.read_deadline is not None:
                self.read_deadline.cancel()
            self.by_wait.pop(self, None)
            self.by_wait[self] = None  # the newest wait
            self.read_deadline = self.loop.call_later(read_timeout_s, self._read_timed_out)

        def _read_timed_out(self) -> None:
            if self.reading():
                self.cut()

        def _make_room(self) -> None:
            oldest = next((other for other in self.by_wait
                           if other is not self and other.reading() and not other.transport.is_closing()), None)
            if oldest is not None:
                oldest.cut()
            else:  # the answer, then end of stream; the socket closes when the client does, or at the deadline
                self.refused = True
                self.transport.write(refusal)
                self.transport.write_eof()

    return GuardedH11Protocol


class _Stopped(Exception):
    """SIGTERM raised again by uvicorn after it drained (see the module)."""


def _stopped(signum, frame) -> None:
    raise _Stopped


FORCED_STOP_EXIT = 130


def forced_stop_exit(message: Callable[[], None], status: int = FORCED_STOP_EXIT) -> Callable[[], None]:
    """An ``on_forced_stop`` for a command: ``message()``, then the process ends at once with ``status``. uvicorn's
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
            os._exit(status)

    return stop


def _server(app, options: ServerOptions, log_level: str, on_forced_stop: Optional[Callable[[], None]] = None,
            on_stop: Optional[Callable[[], None]] = None):
    """A uvicorn server for ``app`` under ``options``; a second stop signal calls ``on_forced_stop`` where one is
    given, and the first calls ``on_stop``."""
    import uvicorn

    protocol = _guarded_protocol(options.connection_cap(), options.read_timeout_s)
    # uvicorn's backlog is also how many connections asyncio accepts in one turn of its loop
    config = uvicorn.Config(app, log_level=log_level, lifespan="on", timeout_graceful_shutdown=None,
                            access_log=options.access_log, backlog=ACCEPT_BATCH, http=protocol)

    class Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            import asyncio

            asyncio.get_running_loop().set_exception_handler(AcceptErrorLog())
            await super().startup(sockets=sockets)
            for sock in sockets or []:
                sock.listen(BACKLOG)  # asyncio set the kernel's queue to ACCEPT_BATCH: a burst waits there instead

        async def shutdown(self, sockets=None) -> None:
            protocol.stopping = True
            await super().shutdown(sockets=sockets)

        def handle_exit(self, sig, frame) -> None:
            if self.should_exit and sig in (signal.SIGINT, signal.SIGTERM):
                if on_forced_stop is not None:
                    on_forced_stop()
                self.force_exit = True
            elif on_stop is not None:
                on_stop()
            super().handle_exit(sig, frame)

    return Server(config)


def serve_forever(app, sock: socket.socket, log_level: str = "info", options: ServerOptions = ServerOptions(),
                  on_forced_stop: Optional[Callable[[], None]] = None,
                  on_drain_timeout: Optional[Callable[[], None]] = None) -> None:
    """Serve ``app`` on ``sock`` until SIGTERM or Ctrl-C, then drain and return; a second SIGTERM or Ctrl-C while
    draining calls ``on_forced_stop`` if given, else raises ``KeyboardInterrupt`` once uvicorn has forced its exit
    (the requests in flight were not all answered). A drain still running ``options.drain_timeout_s`` after the
    signal calls ``on_drain_timeout`` (from another thread: it must end the process), else forces uvicorn's exit.
    Call it from the main thread."""
    deadline: list[threading.Timer] = []

    def drain_expired() -> None:
        if on_drain_timeout is not None:
            on_drain_timeout()
        server.force_exit = True

    def start_drain_clock() -> None:
        deadline.append(threading.Timer(options.drain_timeout_s, drain_expired))
        deadline[0].daemon = True
        deadline[0].start()

    server = _server(app, options, log_level, on_forced_stop, on_stop=start_drain_clock)
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        server.run(sockets=[sock])
    except (_Stopped, KeyboardInterrupt):
        if server.force_exit:
            raise KeyboardInterrupt from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        for timer in deadline:
            timer.cancel()


@contextlib.contextmanager
def running_server(app, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 120,
                   options: ServerOptions = ServerOptions(access_log=False)) -> Iterator[str]:
    """``app`` under uvicorn in a thread on ``host`` (port 0: a free one); yields its base URL
    (``http://127.0.0.1:PORT``) and on exit shuts it down gracefully (in-flight requests are answered)."""
    sock = bound_socket(host, port)
    server = _server(app, options, "warning")
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
