"""``canvaslab serve``: an OpenAI-compatible HTTP server with dynamic batching (docs/serving.md)."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Optional

import typer

from canvaslab import choices
from canvaslab.cli import options
from canvaslab.cli.app import app
from canvaslab.errors import CanvaslabError


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
    max_batch: Annotated[int, typer.Option("--max-batch", help="most rows (choices) per batch",
                                           callback=options.whole_number(1, choices.MAX_BATCH))] = 8,
    batch_window_ms: Annotated[int, typer.Option("--batch-window-ms", help="how long the oldest waiting row waits "
                                                 "for others to share its batch",
                                                 callback=options.whole_number(0, 60_000))] = 10,
    max_queue: Annotated[int, typer.Option("--max-queue", help="most rows waiting; more are refused with 429",
                                           callback=options.whole_number(1, 1_000_000))] = 256,
    steps: options.Steps = None,
    layers: options.Layers = None,
    model_seed: options.ModelSeed = 0,
    api_key: Annotated[Optional[str], typer.Option("--api-key", envvar="CANVASLAB_API_KEY", show_envvar=True,
                                                   help="answer /v1 and the tokenizer's routes only with "
                                                        "'Authorization: Bearer KEY'", callback=_api_key)] = None,
    served_model_name: Annotated[Optional[str], typer.Option("--served-model-name", help="the model's name in the "
                                                             "API (default: --model as given)",
                                                             callback=_served_name)] = None,
) -> None:
    """Serve a model over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions) with dynamic
    batching; in invariant mode an answer is the same bytes whatever else is in flight."""
    from rich.console import Console

    from canvaslab.serving import bound_socket

    sock = bound_socket(host, port)  # a busy port is one line, before the model loads
    from canvaslab.models import load_model
    from canvaslab.serving import Engine, ServeSettings, create_app, serve_forever
    from canvaslab.serving.server import forced_stop_exit

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    loaded = load_model(model, dtype=dtype, device=device, layers=layers, seed=model_seed)
    name = served_model_name or model
    engine = Engine(loaded, ServeSettings(model=name, mode=mode, max_batch=max_batch,
                                          batch_window_ms=batch_window_ms, max_queue=max_queue, steps=steps))
    shown = f"[{host}]" if ":" in host else host
    if api_key is None and not loopback(host):
        console.print(f"warning: --host {host} is reachable beyond this machine and no --api-key is set: anyone who "
                      "reaches it can use the model")
    console.print(f"serving {model} as '{name}' ({mode} mode, {loaded.device}) at http://{shown}:{port}/v1; "
                  "Ctrl-C or SIGTERM answers the requests in flight, then stops")
    serve_forever(create_app(engine, api_key=api_key), sock, on_forced_stop=forced_stop_exit(
        lambda: console.print("stopped without waiting for the requests in flight")))
