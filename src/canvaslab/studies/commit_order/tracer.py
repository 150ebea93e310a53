"""``CommitTracer``: what ``EntropyBoundSampler.accept_canvas`` did on every call, per row of a batch.

The tracer is an observer of ``canvaslab.generation.generate`` (the runner wraps the sampler's
``accept_canvas`` on the instance; transformers is not edited). On every call it keeps, per row, the
accepted mask and each position's entropy of the logits the sampler was given, computed exactly as the
sampler computes it (``Categorical(logits=logits).entropy()``, on the device) and moved to the CPU in
one transfer per call. Memory is one ``(rows, canvas)`` float32 array and one bool array per call.

After generate, ``traces`` turns the calls into one ``GenerationTrace`` per row
(docs/trace-format.md), keeping only what belongs to that row:

- Calls: a finished row of a batch still passes through ``accept_canvas`` until the whole batch stops;
  those calls would not exist at batch size 1, so each canvas keeps only the row's own passes
  (``RowResult.passes``). Canvases after the row's first EOS are dropped for the same reason.
- Content: a position is content if its final token is neither EOS nor padding and comes before the
  first EOS (EOS and pad ids from the generation settings).
- Several canvases: positions are numbered across the concatenated canvases (``canvas * length +
  position``), as the format says. A call of canvas ``c`` lists the positions of earlier canvases that
  were accepted on their canvas's last call (a finished canvas is final: carrying them forward keeps
  them from counting as un-accepts), and gives entropy 0.0 to positions outside canvas ``c`` (the
  sampler gave them no logits on this call; the measures only read a position's entropy on its own
  canvas's calls). Each call carries an extra key ``canvas``.

Transformers' own compiled static-cache path (stock and rowwise modes) cannot be traced: there
transformers replaces ``accept_canvas`` with a compiled copy cached on the model, which bypasses the
runner's wrapper; ``ensure_traceable`` refuses it. Invariant mode's compiled path
(``canvaslab.generation.compiled_path``) keeps the sampler eager, so the tracer sees every call there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from canvaslab.errors import CanvaslabError
from canvaslab.generation.runner import RowResult
from canvaslab.invariant import Mode, mode_named
from canvaslab.models.loading import compiles_generate
from canvaslab.scoring.probes import Probe, score_with_detail
from canvaslab.capture.commit_trace import AcceptCall, GenerationTrace

# A scorer gives ``correct`` or (``correct``, the sandbox's detail or None): the detail goes to the trace's
# optional ``sandbox`` key.
Scorer = Callable[[Probe, str], "bool | None | tuple[bool | None, str | None]"]


def generation_id(probe_id: str, seed: int) -> str:
    """The id of one (probe, seed) generation; also its request key for the per-row random streams."""
    return f"{probe_id}#{seed}"


def ensure_traceable(model, mode: str | Mode = "stock") -> None:
    """Refuse a model whose generate would run the compiled sampler the tracer cannot see (stock and rowwise
    modes; invariant mode's compiled path keeps the sampler eager)."""
    if compiles_generate(model) and not mode_named(mode).takes_compiled_path(model):
        raise CanvaslabError(
            f"cannot trace a model whose generation_config.cache_implementation is "
            f"{model.generation_config.cache_implementation!r}: on that path transformers replaces the sampler's accept_canvas with "
            "a compiled copy cached on the model, which the commit-order tracer cannot observe; set "
            "cache_implementation=None (dynamic cache) or disable_compile=True, or use --mode invariant"
        )


@dataclass
class TracedCall:
    """One ``accept_canvas`` call for the whole batch: ``entropy`` (rows, canvas) float32, ``accepted`` bool."""

    step: int
    canvas: int
    entropy: np.ndarray
    accepted: np.ndarray


class CommitTracer:
    """Observer for ``generate(..., observers=[tracer])``; one generate call at a time."""

    def __init__(self, model=None, mode: str = "stock"):
        if model is not None:
            ensure_traceable(model, mode)
        self._pending: list[tuple[int, int, torch.Tensor]] = []  # (step, canvas, packed on the device)
        self._calls: list[TracedCall] = []
        self._canvas = -1
        self._last_step: int | None = None

    def on_phase(self, phase: str) -> None:
        """A new generate starts: forget the previous one's calls."""
        if phase == "generate":
            self._pending, self._calls = [], []
            self._canvas, self._last_step = -1, None

    def on_accept(self, *, logits: torch.Tensor, accepted_mask: torch.Tensor, accepted_canvas: torch.Tensor,
                  cur_step: int, entropy: torch.Tensor | None = None) -> None:
        # ``entropy`` is the sampler's own (the runner hands it over); recomputed only if it is missing.
        # validate_args=False skips a host sync.
        if entropy is None:
            entropy = torch.distributions.Categorical(logits=logits, validate_args=False).entropy()
        # Kept on the device: read back once, after generate, rather than synchronising every call.
        packed = torch.cat([entropy.float(), accepted_mask.float()], dim=-1)
        step = int(cur_step)
        self._pending.append((step, self._canvas_of(step), packed))

    @property
    def calls(self) -> list[TracedCall]:
        """Every call so far, read back from the device in one transfer."""
        if self._pending:
            packed = torch.stack([p for _, _, p in self._pending]).cpu().numpy()
            width = packed.shape[-1] // 2
            for (step, canvas, _), call in zip(self._pending, packed):
                self._calls.append(TracedCall(step, canvas, call[:, :width].copy(), call[:, width:] > 0.5))
            self._pending = []
        return self._calls

    def _canvas_of(self, step: int) -> int:
        # cur_step counts down within a canvas and restarts at the budget on the next one.
        if self._last_step is None or step >= self._last_step:
            self._canvas += 1
        self._last_step = step
        return self._canvas

    def traces(
        self,
        rows: Sequence[RowResult],
        probes: Sequence[Probe],
        seeds: Sequence[int],
        *,
        settings: dict[str, Any],
        scorer: Scorer = score_with_detail,
        extra: dict[str, Any] | None = None,
    ) -> list[GenerationTrace]:
        """One trace per row; ``settings`` are the generation's resolved settings (``GenerationOutput.settings``).

        ``probes[i]`` and ``seeds[i]`` say what row ``i`` generated; ``scorer(probe, text)`` gives
        ``correct``, or ``correct`` and the sandbox's detail of a code answer (kept as ``sandbox``);
        ``extra`` keys are added to every trace.
        """
        if not len(rows) == len(probes) == len(seeds):
            raise CanvaslabError(f"{len(rows)} rows, {len(probes)} probes and {len(seeds)} seeds: one each per row")
        if not self.calls:
            raise CanvaslabError("the tracer saw no accept_canvas call: was it passed to generate as an observer?")
        canvases = self._calls_by_canvas()
        return [
            self._trace(index, row, probe, seed, canvases, settings, scorer, extra or {})
            for index, (row, probe, seed) in enumerate(zip(rows, probes, seeds))
        ]

    def _calls_by_canvas(self) -> list[list[TracedCall]]:
        canvases: list[list[TracedCall]] = [[] for _ in range(self.calls[-1].canvas + 1)]
        for call in self.calls:
            canvases[call.canvas].append(call)
        return canvases

    def _trace(self, index: int, row: RowResult, probe: Probe, seed: int, canvases: list[list[TracedCall]],
               settings: dict[str, Any], scorer: Scorer, extra: dict[str, Any]) -> GenerationTrace:
        width = canvases[0][0].entropy.shape[1]
        eos_ids, pad_id = _special_ids(settings)
        kept = kept_canvases(row, eos_ids, width)
        tokens = row.tokens[: kept * width]
        scored = scorer(probe, row.text)
        correct, detail = scored if isinstance(scored, tuple) else (scored, None)
        return GenerationTrace(
            generation_id=generation_id(probe.probe_id, seed),
            regime=probe.regime,
            prompt_id=probe.probe_id,
            seed=seed,
            budget=int(settings["max_denoising_steps"]),
            content=content_mask(tokens, eos_ids, pad_id),
            calls=row_calls(canvases[:kept], index, row.passes[:kept]),
            correct=correct,
            extra={"prompt": probe.prompt, "text": row.text, "tokens": tokens, "split": probe.split,
                   "stop_passes": row.stop_passes[:kept], **({} if detail is None else {"sandbox": detail}),
                   **extra},
        )


def _special_ids(settings: dict[str, Any]) -> tuple[set[int], int | None]:
    eos = settings.get("eos_token_id")
    eos_ids = set() if eos is None else set(eos if isinstance(eos, (list, tuple)) else [eos])
    return eos_ids, settings.get("pad_token_id")


def kept_canvases(row: RowResult, eos_ids: set[int], width: int) -> int:
    """Canvases that belong to the row: up to the one holding its first EOS (later ones are batch padding)."""
    first_eos = next((i for i, token in enumerate(row.tokens) if token in eos_ids), None)
    return len(row.passes) if first_eos is None else min(len(row.passes), first_eos // width + 1)


def content_mask(tokens: Sequence[int], eos_ids: set[int], pad_id: int | None) -> list[bool]:
    """True for tokens before the first EOS that are neither EOS nor padding."""
    first_eos = next((i for i, token in enumerate(tokens) if token in eos_ids), len(tokens))
    return [i < first_eos and token != pad_id for i, token in enumerate(tokens)]


def row_calls(canvases: Sequence[Sequence[TracedCall]], row: int, passes: Sequence[int]) -> list[AcceptCall]:
    """Row ``row``'s calls: per canvas its first ``passes[c]`` calls, positions numbered across canvases."""
    width = canvases[0][0].entropy.shape[1]
    total = len(canvases) * width
    calls: list[AcceptCall] = []
    carried: list[int] = []
    for canvas, (canvas_calls, count) in enumerate(zip(canvases, passes)):
        if count > len(canvas_calls):
            raise CanvaslabError(f"row {row} counted {count} passes in canvas {canvas} but the tracer saw "
                                 f"{len(canvas_calls)} accept_canvas calls there")
        offset = canvas * width
        for call in canvas_calls[:count]:
            accepted = carried + (np.flatnonzero(call.accepted[row]) + offset).tolist()
            entropy = [0.0] * offset + call.entropy[row].tolist() + [0.0] * (total - offset - width)
            calls.append(AcceptCall(step=call.step, accepted=accepted, entropy=entropy, extra={"canvas": canvas}))
        carried = calls[-1].accepted if calls else carried
    return calls
