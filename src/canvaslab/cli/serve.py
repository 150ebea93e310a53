"""``canvaslab serve``: an OpenAI-compatible HTTP server with dynamic batching (docs/serving.md)."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Optional

import typer

from canvaslab import choices
from canvaslab.cli import options
from canvaslab.cli.app import app
from canvaslab.errors import CanvaslabError
from canvaslab.extras import require


def _host(ctx, param, value):
    if not value or not value.strip() or any(ch.isspace() for ch in value):
        raise CanvaslabError(f"{options.option_name(param)} {value!r}: give a host name or address, e.g. 127.0.0.1")
    return value


def _api_key(ctx, param, value):
    if value is not None and (not value.strip() or any(ch.isspace() for ch in value)):
        raise CanvaslabError(f"{options.option_name(param)}: give a key without spaces (or leave it out)")
    return value


def _served_name(ctx, param, value):
    if value is not None and not value.strip():
        raise CanvaslabError(f"{options.option_name(param)}: give a name")
    return value


def loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (a name other than localhost counts as reachable)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@app.command("serve")
def serve(
    model: options.Model,
    mode: Annotated[str, typer.Option("--mode", help="invariant (a row's answer does not depend on what shares its "
                                                     "batch) | stock | rowwise", callback=options.one_of(choices.MODES))]
    = "invariant",
    device: options.Device = "cpu",
    dtype: options.Dtype = "auto",
    host: Annotated[str, typer.Option("--host", help="address to listen on (default: this machine only)",
                                      callback=_host)] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="port to listen on", callback=options.whole_number(1, 65535))]
    = 8000,
    batching: Annotated[str, typer.Option("--batching", help="continuous (rows join and leave the running batch at "
                                          "each denoising pass) | static (a batch runs until its last row ends)",
                                          callback=options.one_of(choices.BATCHINGS))] = "static",
    max_batch: Annotated[int, typer.Option("--max-batch", help="most rows (choices) per batch",
                                           callback=options.whole_number(1, choices.MAX_BATCH))] = 8,
    batch_window_ms: Annotated[int, typer.Option("--batch-window-ms", help="static batching: how long the oldest "
                                                 "waiting row waits for others to share its batch",
                                                 callback=options.whole_number(0, 60_000))] = 10,
    max_queue: Annotated[int, typer.Option("--max-queue", help="most rows waiting; more are refused with 429",
                                           callback=options.whole_number(1, 1_000_000))] = 256,
    steps: options.Steps = None,
    layers: options.Layers = None,
    model_seed: options.ModelSeed = 0,
    # ---- hostile connections and the stop (docs/serving.md, "Connections")
    max_connections: Annotated[Optional[int], typer.Option(
        "--max-connections", help="most open connections; at the cap a new one replaces the one waiting longest "
        "on its client, else gets 503 (default: the descriptor limit less 256)",
        callback=options.whole_number(1))] = None,
    read_timeout: Annotated[float, typer.Option("--read-timeout", help="seconds a client has to send a whole "
                                                "request (headers and body)", callback=options.positive_number)]
    = 30.0,
    drain_timeout: Annotated[float, typer.Option("--drain-timeout", help="seconds the stop waits for requests in "
                                                 "flight before dropping them and exiting 0",
                                                 callback=options.positive_number)] = 120.0,
    access_log: Annotated[bool, typer.Option("--access-log/--no-access-log", help="one log line per request")]
    = True,
    api_key: Annotated[Optional[str], typer.Option("--api-key", envvar="CANVASLAB_API_KEY", show_envvar=True,
                                                   help="answer /v1 and the tokenizer's routes only with "
                                                        "'Authorization: Bearer KEY'", callback=_api_key)] = None,
    served_model_name: Annotated[Optional[str], typer.Option("--served-model-name", help="the model's name in the "
                                                             "API (default: --model as given)",
                                                             callback=_served_name)] = None,
) -> None:
    """Serve a model over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions) with dynamic
    batching; in invariant mode an answer is the same bytes whatever else is in flight."""
    require("serve", "canvaslab serve")
    from rich.console import Console

    from canvaslab.serving import ServerOptions, bound_socket, raise_descriptor_limit

    raise_descriptor_limit()
    sock = bound_socket(host, port)  # a busy port is one line, before the model loads
    from canvaslab.models import load_model
    from canvaslab.serving import Engine, ServeSettings, create_app, serve_forever
    from canvaslab.serving.server import forced_stop_exit

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    loaded = load_model(model, dtype=dtype, device=device, layers=layers, seed=model_seed)
    name = served_model_name or model
    engine = Engine(loaded, ServeSettings(model=name, mode=mode, max_batch=max_batch,
                                          batch_window_ms=batch_window_ms, max_queue=max_queue, steps=steps,
                                          batching=batching))
    shown = f"[{host}]" if ":" in host else host
    if api_key is None and not loopback(host):
        console.print(f"warning: --host {host} is reachable beyond this machine and no --api-key is set: anyone who "
                      "reaches it can use the model")
    console.print(f"serving {model} as '{name}' ({mode} mode, {batching} batching, {loaded.device}) at "
                  f"http://{shown}:{port}/v1; Ctrl-C or SIGTERM answers the requests in flight, then stops")
    limits = ServerOptions(max_connections=max_connections, read_timeout_s=read_timeout,
                           drain_timeout_s=drain_timeout, access_log=access_log)
    serve_forever(create_app(engine, api_key=api_key), sock, options=limits, on_forced_stop=forced_stop_exit(
        lambda: console.print("stopped without waiting for the requests in flight")),
        on_drain_timeout=forced_stop_exit(lambda: console.print(
            f"stopped after the {drain_timeout:g} s drain deadline; the requests still in flight were dropped"),
            status=0))
