"""``canvaslab serve``: an OpenAI-compatible HTTP server with dynamic batching (docs/serving.md).

``Engine`` holds the model, its queue and its one model thread; ``create_app`` wraps it in the FastAPI app;
``serve_forever`` and ``running_server`` run that app under uvicorn (in the foreground, or in a thread).
"""

from canvaslab.serving.app import create_app
from canvaslab.serving.engine import Engine, RowOutcome, ServeSettings, row_key
from canvaslab.serving.metrics import Metrics
from canvaslab.serving.protocol import APIError
from canvaslab.serving.server import (ServerOptions, bound_socket, raise_descriptor_limit, running_server,
                                      serve_forever)

__all__ = ["APIError", "Engine", "Metrics", "RowOutcome", "ServeSettings", "ServerOptions", "bound_socket",
           "create_app", "raise_descriptor_limit", "row_key", "running_server", "serve_forever"]
