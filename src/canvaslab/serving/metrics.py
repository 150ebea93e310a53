"""The server's Prometheus metrics (``GET /metrics``), in a registry of its own per server.

Rates (passes/s, tokens/s, requests/s) are the counters' ``rate()`` in Prometheus; the last batch's rates are
also gauges, for a glance without a Prometheus server.
"""

from __future__ import annotations

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram,
                               disable_created_metrics, generate_latest)

disable_created_metrics()  # no ``*_created`` series: a timestamp per series that scrapers would store as a value

BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256)
PASS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self):
        self.registry = registry = CollectorRegistry()
        self.requests = Counter("canvaslab_requests", "HTTP requests answered, by endpoint and status code",
                                ["endpoint", "status"], registry=registry)
        self.latency = Histogram("canvaslab_request_latency_seconds", "time from a request's arrival to the last "
                                 "byte of its answer (streams included)", ["endpoint"], buckets=LATENCY_BUCKETS,
                                 registry=registry)
        self.first_chunk = Histogram("canvaslab_time_to_first_chunk_seconds", "time from a streamed request's "
                                     "arrival to its first chunk after the role chunk", ["endpoint"],
                                     buckets=LATENCY_BUCKETS, registry=registry)
        self.queue_rows = Gauge("canvaslab_queue_rows", "rows (one per choice) waiting for a batch",
                                registry=registry)
        self.running_rows = Gauge("canvaslab_running_rows", "rows in the batch the model is running",
                                  registry=registry)
        self.batch_rows = Histogram("canvaslab_batch_rows", "rows per batch formed", buckets=BATCH_BUCKETS,
                                    registry=registry)
        self.batch_seconds = Histogram("canvaslab_batch_seconds", "wall time of one batch's generation",
                                       buckets=LATENCY_BUCKETS, registry=registry)
        self.pass_rows = Histogram("canvaslab_pass_rows", "rows per decoder pass (continuous batching)",
                                   buckets=BATCH_BUCKETS, registry=registry)
        self.pass_seconds = Histogram("canvaslab_pass_seconds", "wall time of one decoder pass, joining rows' "
                                      "prompts included (continuous batching)", buckets=PASS_BUCKETS,
                                      registry=registry)
        self.passes = Counter("canvaslab_decoder_passes", "batched decoder passes run", registry=registry)
        self.tokens = Counter("canvaslab_generated_tokens", "completion tokens answered", registry=registry)
        self.passes_per_second = Gauge("canvaslab_last_batch_passes_per_second", "the last batch's decoder "
                                       "passes per second", registry=registry)
        self.tokens_per_second = Gauge("canvaslab_last_batch_tokens_per_second", "the last batch's completion "
                                       "tokens per second", registry=registry)
        self.cancelled_rows = Counter("canvaslab_cancelled_rows", "rows whose client went away before the answer",
                                      registry=registry)
        self.failed_rows = Counter("canvaslab_failed_rows", "rows whose generation failed even alone",
                                   registry=registry)
        self.batch_retries = Counter("canvaslab_batch_retries", "batches that failed and were rerun row by row",
                                     registry=registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
