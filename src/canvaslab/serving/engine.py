"""Batching for ``canvaslab serve``: requests queue on the event loop, one model thread runs them.

Every choice of a request is one *row*. A row waits in a queue on the event loop. With ``batching="static"`` (the
default) a batching task takes the oldest row and, for up to ``batch_window_ms`` after that row arrived, gathers the
rows behind it that need the same number of canvases, up to ``max_batch`` rows; the batch then runs to its end on
the one model thread through canvaslab's ``generate``. With ``batching="continuous"`` rows join the running batch
at the next denoising pass and leave it when they finish (``canvaslab.serving.scheduler``). Both draw from per-row
random streams (``rng="row"``) in the server's mode.

A row's random stream is keyed by the row itself, never by its place in a batch: its key is a hash of its
prompt's token ids, its seed and its choice index (``row_key``), and the call-level seed is the constant 0.
With ``mode="invariant"`` the numerics are batch-invariant too, so a row's tokens, text and stop point are
the same bytes whatever shares its batch and wherever it sits in it.

A static batch that raises is rerun row by row, so one bad row fails only its own request. A row whose client went
away is dropped from the queue, or its result is dropped if it is already running.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import copy
import functools
import hashlib
import logging
import math
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from canvaslab.choices import BATCHINGS, MAX_SEED, one_of
from canvaslab.errors import CanvaslabError
from canvaslab.generation.row_randomness import DEFAULT_SAMPLING, RowSampling
from canvaslab.serving.metrics import Metrics
from canvaslab.serving.protocol import APIError, CompletionRequest, invalid

log = logging.getLogger("canvaslab.serving")


@dataclass(frozen=True)
class ServeSettings:
    """What the server answers to and how it batches."""

    model: str  # the model's name in the API (``--model`` as given)
    mode: str = "invariant"
    max_batch: int = 8
    batch_window_ms: float = 10.0
    max_queue: int = 256
    steps: Optional[int] = None  # max denoising steps per canvas (None: the model's)
    batching: str = "static"  # "static": whole batches; "continuous": rows join and leave at pass boundaries


def row_key(prompt_ids: Sequence[int], seed: int, index: int) -> str:
    """A row's random-stream key: its prompt's token ids, its seed and its choice index, nothing else."""
    material = f"{seed}|{index}|{','.join(map(str, prompt_ids))}".encode()
    return hashlib.blake2b(material, digest_size=16).hexdigest()


@dataclass(frozen=True)
class RowOutcome:
    """One choice's answer. ``batch_rows`` and ``batch_row`` say where it ran (never part of the body)."""

    text: str
    token_ids: list[int]
    finish_reason: str  # "stop": the text ended (end of sequence, padding, a stop string) within max_tokens
    stop_point: dict[str, Any]
    batch_rows: int
    batch_row: int
    stop_reason: Optional[str] = None  # the stop string that ended the text
    logprobs: Optional[list["TokenLogprob"]] = None  # one per token of token_ids, when asked for


@dataclass(frozen=True)
class TokenLogprob:
    """An emitted token's log-probability under the distribution its canvas was committed from (the row's last
    denoising pass of that canvas, temperature-scaled) and the ``top`` most likely tokens there."""

    token: int
    logprob: float
    top: list[tuple[int, float]]


@dataclass(eq=False)
class Row:
    prompt_ids: list[int]
    seed: int
    index: int  # the choice's index in its response (prompt-major: prompt * n + choice)
    max_tokens: int
    canvases: int  # canvases its generation needs: rows of one batch need the same number
    key: str
    future: asyncio.Future
    events: Optional[asyncio.Queue]  # a streaming request's chunks (shared by its rows)
    arrived: float
    cancelled: bool = False
    sent: str = ""  # the text streamed so far
    sampling: RowSampling = DEFAULT_SAMPLING
    stop: tuple[str, ...] = ()
    include_stop: bool = False
    logprobs: Optional[int] = None  # top alternatives per token (None: no log-probabilities)
    canvas_logprobs: list = field(default_factory=list)  # per committed canvas: its tokens' TokenLogprob

    @property
    def plain(self) -> bool:
        """Default sampling: the row can share the fused denoising step (a batch holds plain rows or others)."""
        return self.sampling == DEFAULT_SAMPLING


@dataclass
class Submission:
    seed: int
    prompt_tokens: int
    rows: list[Row]
    events: Optional[asyncio.Queue]
    prompt_ids: list[list[int]] = field(default_factory=list)


@dataclass
class _StreamState:
    canvas: int = 0
    passes: int = 0
    last: Optional[list[int]] = None
    committed: list[int] = field(default_factory=list)
    done: bool = False


class RowStream:
    """A row's chunks and log-probabilities from its drafts and committed canvases, as transformers' loop hands them
    over: a draft (the argmax canvas) after every denoising pass, each committed canvas (tokens after the
    end-of-sequence token already replaced by padding) at the canvas's end. A row's argmax canvas stops changing
    once its own stop fired, so emitting a draft only when it changed makes a row's chunks its own: the same
    whatever shares its passes."""

    def __init__(self, engine: "Engine", row: Row, loop: asyncio.AbstractEventLoop):
        self.engine, self.row, self.loop, self.state = engine, row, loop, _StreamState()

    def _emit(self, event: dict) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
            self.loop.call_soon_threadsafe(self.row.events.put_nowait, event)

    def draft(self, tokens: list[int]) -> None:
        state, row = self.state, self.row
        if state.done or row.cancelled or row.events is None:
            return
        state.passes += 1
        if tokens != state.last:
            state.last = tokens
            self._emit({"type": "draft", "index": row.index, "canvas": state.canvas, "pass": state.passes,
                        "token_ids": tokens, "text": self.engine.decode(tokens)})

    def commit(self, tokens: list[int], logits=None) -> None:
        state, row = self.state, self.row
        if row.logprobs is not None and logits is not None:
            import torch

            row.canvas_logprobs.append(token_logprobs(logits, torch.tensor(tokens), row.logprobs))
        if state.done or row.cancelled or row.events is None:
            return
        state.committed.extend(tokens)
        canvas, state.canvas, state.passes, state.last = state.canvas, state.canvas + 1, 0, None
        kept, text, stop = self.engine.answer(row, state.committed)
        state.done = stop is not None or len(kept) < len(state.committed) or len(kept) >= row.max_tokens
        if not state.done:  # hold back what a stop string completed by the next canvas would remove
            text = text[:len(text) - max((len(s) - 1 for s in row.stop), default=0)]
        if text.startswith(row.sent) and not text.endswith("\ufffd") and len(text) > len(row.sent):
            delta, row.sent = text[len(row.sent):], text
            self._emit({"type": "commit", "index": row.index, "canvas": canvas, "text": delta})


class _CanvasStreamer:
    """transformers' streamer protocol as DiffusionGemma's loop calls it (``put`` with the prompt, then with each
    committed canvas; ``put_draft`` after every pass), handed to each streaming row of the batch and each row that
    wants log-probabilities."""

    def __init__(self, engine: "Engine", streams: list[tuple[int, Row]], loop: asyncio.AbstractEventLoop):
        self.streams = [(b, RowStream(engine, row, loop)) for b, row in streams]
        self.prompt_seen = False
        # transformers then passes the pass's (temperature-scaled) logits instead of its argmax canvas
        self._takes_logits = any(row.logprobs is not None for _, row in streams)
        self.logits = None

    def put_draft(self, value=None, logits=None) -> None:
        if logits is not None:
            self.logits, value = logits, logits.argmax(dim=-1)
        value = value.tolist()
        for b, stream in self.streams:
            stream.draft(value[b])

    def put(self, value) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        tokens = value.tolist()
        for b, stream in self.streams:
            stream.commit(tokens[b], None if self.logits is None else self.logits[b])

    def end(self) -> None:
        pass


def token_logprobs(logits, tokens, top: int) -> list[TokenLogprob]:
    """Each position's token's log-probability under ``logits`` ``(positions, vocab)``, with the ``top`` best."""
    import torch

    logprobs = torch.log_softmax(logits.float(), dim=-1)
    chosen = logprobs.gather(-1, tokens.view(-1, 1).long()).view(-1).tolist()
    best = torch.topk(logprobs, top, dim=-1) if top else None
    rows = []
    for j, token in enumerate(tokens.tolist()):
        alternatives = list(zip(best.indices[j].tolist(), best.values[j].tolist())) if best is not None else []
        rows.append(TokenLogprob(token, chosen[j], alternatives))
    return rows


class Engine:
    """The model, its queue and its one worker thread. ``start`` and ``stop`` run on the serving event loop."""

    def __init__(self, loaded, settings: ServeSettings, *, generate: Optional[Callable] = None,
                 metrics: Optional[Metrics] = None):
        from canvaslab.generation.runner import context_refusal, max_prompt_tokens

        one_of("batching", settings.batching, BATCHINGS)
        if generate is None:
            from canvaslab.generation import generate
        self.loaded, self.settings, self._generate = loaded, settings, generate
        self.metrics = metrics or Metrics()
        config = loaded.model.config
        self.canvas_length = int(config.canvas_length)
        self.budget = int(loaded.generation_defaults.get("max_new_tokens") or self.canvas_length)
        self.max_prompt_tokens = max_prompt_tokens(config, self.budget)
        self._context_refusal = functools.partial(context_refusal, config, max_new_tokens=self.budget)
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:  # no request could ever be served
            raise CanvaslabError(self._context_refusal(1))
        self.vocab_size = int(config.text_config.vocab_size)
        self.max_model_len = getattr(config.text_config, "max_position_embeddings", None)
        eos = loaded.generation_defaults.get("eos_token_id")
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])
        pad = loaded.generation_defaults.get("pad_token_id")
        # where a text ends: the end-of-sequence token, or padding the model drew itself (never part of an answer)
        self.end_ids = self.eos_ids | ({int(pad)} if pad is not None else set())
        self._encoder = copy.deepcopy(loaded.tokenizer)  # the event loop's; the model thread uses the original
        self.has_chat_template = bool(getattr(self._encoder, "chat_template", None))
        self._pending: collections.deque[Row] = collections.deque()
        self._arrived: Optional[asyncio.Event] = None
        self._task: Optional[asyncio.Task] = None
        self._worker: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self.closing = False
        self.continuous = None  # the continuous batching task's state, from start on (batching="continuous")
        self.batch_sizes: collections.Counter[int] = collections.Counter()  # rows per batch (static) or pass
        self._batch_seconds = 0.0  # a moving average, for Retry-After

    # ---- what the HTTP layer asks ------------------------------------------------------------------------

    def canvases(self, max_tokens: int) -> int:
        return math.ceil(max_tokens / self.canvas_length)

    def encode(self, request: CompletionRequest) -> list[list[int]]:
        """The request's prompts as token ids (on the event loop's tokenizer), each checked against the context."""
        if len(request.prompts) == 1:
            return [self._encode(request.kind, request.prompt, "messages" if request.kind == "chat" else "prompt")]
        return [self._encode(request.kind, prompt, f"prompt[{i}]") for i, prompt in enumerate(request.prompts)]

    def tokenize(self, text: str) -> list[int]:
        return list(self._encoder(text)["input_ids"])

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self._encoder.decode(list(tokens), skip_special_tokens=True)

    def _encode(self, kind: str, prompt: Any, param: str) -> list[int]:
        if kind == "chat":
            if self.has_chat_template:
                try:
                    encoded = self._encoder.apply_chat_template(prompt, add_generation_prompt=True,
                                                                tokenize=True, return_dict=True)
                except Exception as error:  # the template refused the conversation (a jinja exception)
                    raise invalid("messages", f"the model's chat template refused these messages: {error}") \
                        from None
                ids = list(encoded["input_ids"])
            else:  # a model without a template: the contents as plain text, as `canvaslab generate` does
                ids = list(self._encoder("\n\n".join(m["content"] for m in prompt))["input_ids"])
        elif isinstance(prompt, str):
            ids = self.tokenize(prompt)
        else:
            ids = list(prompt)
            bad = next((token for token in ids if not 0 <= token < self.vocab_size), None)
            if bad is not None:
                raise invalid(param, f"token id {bad} is outside the model's vocabulary (0 to "
                              f"{self.vocab_size - 1})")
        if not ids:
            raise invalid(param, f"'{param}' encodes to no tokens")
        refusal = self._context_refusal(len(ids))
        if refusal is not None:
            raise invalid(param, refusal, "context_length_exceeded")
        return ids

    def submit(self, request: CompletionRequest, prompt_ids: list[list[int]]) -> Submission:
        """Queue the request's rows (on the event loop); 400 for a budget it exceeds, 429 if the queue is full."""
        max_tokens = request.max_tokens if request.max_tokens is not None else self.budget
        if max_tokens > self.budget:
            field_name = request.max_tokens_param
            raise invalid(field_name, f"'{field_name}' is {max_tokens}: this model generates at most {self.budget} "
                          "tokens")
        if self.settings.batching == "continuous":
            self._check_continuous(request)
        rows_asked = request.n * len(prompt_ids)
        if rows_asked > self.settings.max_queue:
            raise invalid("n", f"{rows_asked} choices: this server queues at most {self.settings.max_queue} rows")
        if self.closing or self._task is None:
            raise APIError(503, "the server is shutting down", type="server_error", code="shutting_down")
        if len(self._pending) + rows_asked > self.settings.max_queue:
            raise APIError(429, f"the queue is full ({len(self._pending)} of {self.settings.max_queue} rows "
                           "waiting); retry later", type="rate_limit_error", code="queue_full",
                           headers={"Retry-After": str(self.retry_after())})
        seed = request.seed if request.seed is not None else secrets.randbelow(MAX_SEED + 1)
        loop = asyncio.get_running_loop()
        events = asyncio.Queue() if request.stream else None
        now = loop.time()
        sampling = RowSampling(request.temperature, request.top_p)
        rows = [Row(list(ids), seed, p * request.n + choice, max_tokens, self.canvases(max_tokens),
                    row_key(ids, seed, choice), loop.create_future(), events, now, sampling=sampling,
                    stop=request.stop, include_stop=request.include_stop, logprobs=request.logprobs)
                for p, ids in enumerate(prompt_ids) for choice in range(request.n)]
        self._pending.extend(rows)
        self.metrics.queue_rows.set(len(self._pending))
        self._arrived.set()
        return Submission(seed, sum(map(len, prompt_ids)), rows, events, [list(ids) for ids in prompt_ids])

    @staticmethod
    def _check_continuous(request: CompletionRequest) -> None:
        """Continuous batching steps each row with the model's own sampler: a row's own temperature, top_p or
        log-probabilities are served by whole batches (``--batching static``)."""
        if RowSampling(request.temperature, request.top_p) != DEFAULT_SAMPLING:
            param = "temperature" if request.temperature != DEFAULT_SAMPLING.temperature else "top_p"
            raise invalid(param, f"'{param}' other than 1 is served with --batching static; this server batches "
                          "continuously, drawing with the model's own schedule", "unsupported_value")
        if request.logprobs is not None:
            raise invalid("logprobs", "log-probabilities are served with --batching static; this server batches "
                          "continuously", "unsupported_value")

    def cancel(self, rows: Sequence[Row]) -> None:
        """The client went away: its waiting rows leave the queue, its running rows' results are dropped."""
        for row in rows:
            if row.future.done():
                continue
            row.cancelled = True
            row.future.cancel()
            with contextlib.suppress(ValueError):
                self._pending.remove(row)
            self.metrics.cancelled_rows.inc()
        self.metrics.queue_rows.set(len(self._pending))

    def retry_after(self) -> int:
        batches = len(self._pending) / self.settings.max_batch + 1
        return max(1, math.ceil(self._batch_seconds * batches))

    @property
    def queued_rows(self) -> int:
        return len(self._pending)

    # ---- the model thread's helpers ----------------------------------------------------------------------

    def decode(self, tokens: Sequence[int]) -> str:
        return self.loaded.tokenizer.decode(list(tokens), skip_special_tokens=True)

    def end_position(self, tokens: Sequence[int]) -> Optional[int]:
        """Where the text ends: the first end-of-sequence or padding token (None: not in ``tokens``)."""
        return next((i for i, token in enumerate(tokens) if token in self.end_ids), None)

    def answer(self, row: Row, tokens: Sequence[int]) -> tuple[list[int], str, Optional[str]]:
        """``(tokens, text, stop)`` of a row's generated ``tokens``: cut at the text's end and at ``max_tokens``,
        the text cut before the first of the row's stop strings (``stop``: that string, else None), and the tokens
        then cut to the fewest whose text covers it."""
        end = self.end_position(tokens)
        tokens = list(tokens[:min(len(tokens) if end is None else end, row.max_tokens)])
        text = self.decode(tokens)
        found = [(text.find(stop), stop) for stop in row.stop if stop in text]
        if not found:
            return tokens, text, None
        at, stop = min(found)
        text = text[:at + len(stop)] if row.include_stop else text[:at]
        kept = next(k for k in range(len(tokens) + 1) if len(self.decode(tokens[:k])) >= at + len(stop))
        return tokens[:kept], text, stop

    # ---- lifetime ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.closing = False
        self._arrived = asyncio.Event()
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="canvaslab-model")
        if self.settings.batching == "continuous":
            from canvaslab.serving.scheduler import ContinuousBatching

            self.continuous = ContinuousBatching(self)
        self._task = asyncio.create_task(self._batches(), name="canvaslab-batches")

    async def stop(self) -> None:
        """Refuse new requests, finish every queued and running row, then stop the model thread."""
        self.closing = True
        if self._task is None:
            return
        self._arrived.set()
        await self._task
        self._task = None
        await asyncio.to_thread(self._worker.shutdown, wait=True)

    # ---- batching (event loop) ---------------------------------------------------------------------------

    def _drop_cancelled_head(self) -> None:
        while self._pending and self._pending[0].cancelled:
            self._pending.popleft()

    def _matching(self, head: Row) -> list[Row]:
        rows = [row for row in self._pending
                if row.canvases == head.canvases and row.plain == head.plain and not row.cancelled]
        return rows[: self.settings.max_batch]

    async def _batches(self) -> None:
        if self.continuous is not None:
            await self.continuous.run()
            return
        loop = asyncio.get_running_loop()
        window = self.settings.batch_window_ms / 1000
        while True:
            self._drop_cancelled_head()
            if not self._pending:
                if self.closing:
                    return
                self._arrived.clear()
                await self._arrived.wait()
                continue
            head = self._pending[0]
            deadline = head.arrived + window
            while len(self._matching(head)) < self.settings.max_batch and not head.cancelled:
                wait = deadline - loop.time()
                if wait <= 0:
                    break
                self._arrived.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), wait)
            if head.cancelled:
                continue
            batch = self._matching(head)
            taken = set(map(id, batch))
            self._pending = collections.deque(row for row in self._pending if id(row) not in taken)
            await self._run(batch, loop)

    async def _run(self, batch: list[Row], loop) -> None:
        self.metrics.queue_rows.set(len(self._pending))
        self.metrics.running_rows.set(len(batch))
        self.metrics.batch_rows.observe(len(batch))
        self.batch_sizes[len(batch)] += 1
        try:
            results = await loop.run_in_executor(self._worker, self._generate_batch, batch, loop)
        except Exception as error:  # the worker itself failed (not a generation: those are caught there)
            log.exception("the model thread failed")
            results = [error] * len(batch)
        finally:
            self.metrics.running_rows.set(0)
        for row, result in zip(batch, results):
            self._deliver(row, result)

    def _deliver(self, row: Row, result) -> None:
        if row.future.done():  # cancelled: the client is gone
            return
        if isinstance(result, BaseException):
            error = APIError(500, f"the generation of this request failed: {type(result).__name__}: {result}",
                             type="server_error", code="generation_failed")
            row.future.set_exception(error)
            row.future.exception()  # retrieved: a stream reads its events instead
            if row.events is not None:
                row.events.put_nowait({"type": "error", "index": row.index, "error": error})
            return
        row.future.set_result(result)
        if row.events is not None:
            delta = result.text[len(row.sent):] if result.text.startswith(row.sent) else ""
            row.events.put_nowait({"type": "final", "index": row.index, "text": delta, "outcome": result})

    # ---- generation (model thread) -----------------------------------------------------------------------

    def _generate_batch(self, batch: list[Row], loop) -> list:
        started = time.perf_counter()
        try:
            outcomes, passes = self._generate_rows(batch, loop)
        except Exception:
            log.exception("a batch of %d rows failed%s", len(batch), "; rerunning its rows one by one"
                          if len(batch) > 1 else "")
            if len(batch) == 1:
                self.metrics.failed_rows.inc()
                return [RuntimeError("the model raised while generating (see the server's log)")]
            self.metrics.batch_retries.inc()
            outcomes, passes = [], 0
            for row in batch:
                if row.cancelled:
                    outcomes.append(None)
                    continue
                try:
                    [outcome], row_passes = self._generate_rows([row], loop)
                    outcomes.append(outcome)
                    passes += row_passes
                except Exception as error:
                    log.exception("a row failed alone")
                    self.metrics.failed_rows.inc()
                    outcomes.append(RuntimeError(f"the model raised while generating ({type(error).__name__})"))
        seconds = time.perf_counter() - started
        tokens = sum(len(o.token_ids) for o in outcomes if isinstance(o, RowOutcome))
        self.metrics.batch_seconds.observe(seconds)
        self.metrics.passes.inc(passes)
        self.metrics.tokens.inc(tokens)
        self.metrics.passes_per_second.set(passes / seconds if seconds else 0)
        self.metrics.tokens_per_second.set(tokens / seconds if seconds else 0)
        self._batch_seconds = seconds if not self._batch_seconds else 0.8 * self._batch_seconds + 0.2 * seconds
        return outcomes

    def _generate_rows(self, rows: list[Row], loop) -> tuple[list[RowOutcome], int]:
        generation = self.generation_settings(rows[0])
        streams = [(b, row) for b, row in enumerate(rows) if row.events is not None or row.logprobs is not None]
        for row in rows:
            row.canvas_logprobs.clear()
        sampling = None if all(row.plain for row in rows) else {"sampling": [row.sampling for row in rows]}
        with self._streaming(streams, loop):
            output = self._generate(self.loaded, [row.prompt_ids for row in rows], seed=0, rng="row",
                                    requests=[row.key for row in rows], mode=self.settings.mode,
                                    generation=generation, **(sampling or {}))
        canvases = max(len(result.passes) for result in output.rows)
        passes = sum(max(result.passes[c] for result in output.rows if c < len(result.passes))
                     for c in range(canvases))
        return [self._outcome(row, result, len(rows), b) for b, (row, result) in
                enumerate(zip(rows, output.rows))], passes

    def _outcome(self, row: Row, result, batch_rows: int, batch_row: int) -> RowOutcome:
        end = self.end_position(result.tokens)
        # the canvases that made this row's tokens: a row that ended stops counting canvases its batch still ran
        used = len(result.stop_passes) if end is None else min(len(result.stop_passes), end // self.canvas_length + 1)
        stop_point = {"stop_passes": list(result.stop_passes[:used]), "passes": list(result.passes[:used]),
                      "eos_position": result.eos_position}
        tokens, text, stop = self.answer(row, result.tokens)
        finish = "stop" if stop is not None or (end is not None and end < row.max_tokens) else "length"
        logprobs = None
        if row.logprobs is not None:
            logprobs = [entry for canvas in row.canvas_logprobs for entry in canvas][:len(tokens)]
        return RowOutcome(text, tokens, finish, stop_point, batch_rows, batch_row, stop, logprobs)

    def generation_settings(self, row: Row) -> dict[str, Any]:
        """The generation settings of ``row`` (rows needing the same canvases share them)."""
        return {"max_denoising_steps": self.settings.steps, "max_new_tokens": row.canvases * self.canvas_length}

    def row_stream(self, row: Row, loop) -> Optional[RowStream]:
        """The chunks of a streaming row (None for a row that does not stream)."""
        return None if row.events is None else RowStream(self, row, loop)

    @contextlib.contextmanager
    def _streaming(self, streams: list[tuple[int, Row]], loop):
        """Pass a streamer to transformers' generate for the batch's streaming rows and the rows that want
        log-probabilities (it changes no result)."""
        if not streams:
            yield
            return
        from canvaslab.invariant.shadowing import shadowed

        model = self.loaded.model
        original, streamer = model.generate, _CanvasStreamer(self, streams, loop)

        def generate(*args, **kwargs):
            return original(*args, streamer=streamer, **kwargs)

        with shadowed(model, "generate", generate):
            yield
