"""Record one row (row 0 unless told) of every encoder and decoder module call, every numeric op, and every
sampler decision.

``Recorder`` is a context manager around one ``generate`` call. It uses only PyTorch's extension points:
module forward (pre-)hooks for module outputs and inputs, a ``TorchFunctionMode`` for the numeric ops
between modules (the attention kernel, the self-conditioning matmul, the sampler's entropy), and the
generation runner's ``accept_canvas`` observer for sampler decisions. Each call becomes a ``CallRecord``
of digests (``capture.digest``), so memory grows with the number of calls, not with activation sizes.
Digests stay on the device until the pass ends and are then read back in one transfer, so capture adds
one host synchronisation per pass rather than one per call.
Calls listed in ``keep`` also keep the row's full output on the device, for the detailed comparison.

A call's identity (``CallRecord.key``) must be the same in every Python process, or signatures compared
across processes (a resumed study, a repeat in a fresh process) would differ for identical values.
transformers runs some modules once per element of a ``set`` of strings (DiffusionGemma's
``rotary_emb``, once per layer type, iterated in hash order), so their execution order changes with
``PYTHONHASHSEED``. A module call is therefore named by its path plus the string arguments it was called
with (``rotary_emb[sliding_attention]``), and only calls that share that name are numbered, in execution
order. No identity comes from ``id()``, ``hash()`` or the iteration order of a set or dict.

Two values reach each decoder pass from the previous one through code outside any module: the canvas
(renoised by the sampler, or the initial noise) and the self-conditioning logits. They are recorded at
the start of the pass as ``carried`` calls whose inputs are what produced them in the previous pass (the
sampler's decision and the logits it saw), so a difference made in the hand-over is found there.

Only the row's own data is digested. When its prompt is encoded inside the batch, left-padded by ``p`` to
the batch's widest prompt, the values of that pass are digested over its real positions only (the last
``width - p`` along each position dim), which are what the row computes alone; its padded positions hold
nothing of its own. Work for other rows' prompts in the B=1 prompt cache is not recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import torch
from torch.overrides import TorchFunctionMode

from canvaslab.capture.digest import digest_rows, digest_tensor, fold, row_slice
from canvaslab.models import anatomy

# Numeric ops recorded between modules. Only ops whose row 0 depends on row 0 alone: no sorts over
# flattened tokens, whose order mixes rows.
RECORDED_OPS = frozenset({
    "linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "scaled_dot_product_attention",
    "softmax", "log_softmax", "logsumexp", "topk", "sum", "mean", "rsqrt", "pow", "tanh", "argmax",
})
# Reductions are row-local only along an explicit, non-batch dim; (dim argument position, default).
REDUCTIONS = {"softmax": (1, None), "log_softmax": (1, None), "logsumexp": (1, None), "sum": (1, None),
              "mean": (1, None), "argmax": (1, None), "topk": (2, -1)}
# The decoder's inputs handed on from the previous pass: keyword argument -> record name.
CARRIED_INPUTS = {"decoder_input_ids": "carried.canvas", "self_conditioning_logits": "carried.self_conditioning_logits"}


@dataclass(frozen=True)
class PassKey:
    """Where in the generation a call happened: the encoder of a canvas, or a decoder pass (step)."""

    canvas: int
    phase: str  # "prompt_cache" | "encoder" | "decoder"
    step: int  # decoder pass within the canvas (0-based); 0 for the encoder

    def label(self) -> str:
        if self.phase == "prompt_cache":
            return "prompt cache (B=1 encoder)"
        return f"canvas {self.canvas} encoder" if self.phase == "encoder" else f"canvas {self.canvas} pass {self.step}"


# The pass that encodes the prompt (inside the batch unless the B=1 prompt cache is copied).
PROMPT_PASS = PassKey(canvas=0, phase="encoder", step=0)
# The attention op's tensors are (batch, heads, positions, head_dim); its mask, the 4th input, also has a
# key dim, over positions too in the prompt pass.
ATTENTION_OP = "::scaled_dot_product_attention"


def real_positions(part: torch.Tensor, sliced: bool, name: str, index: int, width: int, padding: int) -> torch.Tensor:
    """A row's share of a prompt-pass tensor restricted to its last ``width - padding`` positions.

    Position dims by layout: dim 2 (and the mask's dim 3) of the attention op; dim 0 of a row's share of
    flattened tokens ``(batch * width, ...)``; dim 1 of ``(1, width, ...)``. Anything else is left whole.
    """
    if name.endswith(ATTENTION_OP):
        dims = [2, 3] if index == 3 else [2]
    elif sliced and part.shape[0] == width:
        dims = [0]
    elif part.dim() >= 2 and part.shape[0] == 1:
        dims = [1]
    else:
        dims = []
    for dim in dims:
        if dim < part.dim() and part.shape[dim] == width:
            part = part.narrow(dim, padding, width - padding)
    return part


@dataclass
class CallRecord:
    kind: str  # "module" | "op" | "sampler" | "carried"
    name: str
    pass_key: PassKey
    position: int  # index of the call within its pass
    occurrence: int  # how many calls of the same name came before it in its pass
    inputs: tuple[int, ...]
    output: int
    nbytes: int
    shape: tuple[int, ...]
    positions: list[int] | None = None

    @property
    def key(self) -> tuple[PassKey, str, int]:
        """Identifies the same call in another run, even if other calls were added or dropped around it."""
        return (self.pass_key, self.name, self.occurrence)


@dataclass
class Capture:
    """Everything recorded in one generate call."""

    batch: int
    records: list[CallRecord] = field(default_factory=list)
    kept: dict[tuple[PassKey, str, int], torch.Tensor] = field(default_factory=dict)

    def by_pass(self) -> dict[PassKey, list[CallRecord]]:
        groups: dict[PassKey, list[CallRecord]] = {}
        for record in self.records:
            groups.setdefault(record.pass_key, []).append(record)
        return groups


def first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            found = first_tensor(item)
            if found is not None:
                return found
    return None


def tensors_in(values: Iterable[Any]) -> list[torch.Tensor]:
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(tensors_in(value))
        elif isinstance(value, dict):
            found.extend(tensors_in(value.values()))
    return found


def _row_local(name: str, args: tuple, kwargs: dict) -> bool:
    """False for reductions over all elements or over dim 0, which mix rows."""
    if name not in REDUCTIONS:
        return True
    position, default = REDUCTIONS[name]
    dim = kwargs.get("dim", args[position] if len(args) > position else default)
    if dim is None or not isinstance(args[0], torch.Tensor):
        return False
    dims = dim if isinstance(dim, (list, tuple)) else (dim,)
    ndim = max(args[0].dim(), 1)
    return all(isinstance(d, int) and d % ndim != 0 for d in dims)


class _OpRecorder(TorchFunctionMode):
    def __init__(self, recorder: "Recorder"):
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        output = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name in RECORDED_OPS and _row_local(name, args, kwargs) and self.recorder.records_ops_now():
            self.recorder.add("op", f"{self.recorder.current_module()}::{name}",
                              tensors_in(list(args) + list(kwargs.values())), output)
        return output


class Recorder:
    """Context manager recording row ``row`` of one generate call of ``model`` whose batch has ``batch`` rows.

    ``prompt_padding``: the row's left padding when its prompt is encoded inside the batch (0 when the B=1
    prompt cache is copied); that pass is then digested over the row's real positions.
    """

    def __init__(self, model, batch: int, keep: set[tuple[PassKey, str, int]] | None = None, record_ops: bool = True,
                 row: int = 0, prompt_padding: int = 0):
        if not 0 <= row < batch:
            raise ValueError(f"row {row} is not in a batch of {batch}")
        self.model = model
        self.row, self.prompt_padding = row, prompt_padding
        self._prompt_width: int | None = None  # the padded prompt's width, read from the encoder's input
        self._encodes_row = True  # in the prompt cache: whether the prompt being encoded is the row's
        self.capture = Capture(batch=batch)
        self.keep = keep or set()
        self.record_ops = record_ops
        self._stack: list[str] = []
        self._opaque_depth = 0
        self._in_prompt_cache = False
        self._busy = False  # True while the recorder computes digests: its own ops are not the model's
        self._pass = PassKey(canvas=-1, phase="encoder", step=0)
        self._position = 0
        self._occurrences: dict[str, int] = {}
        self._pending: list[CallRecord] = []
        self._last_sampler: CallRecord | None = None  # the decision of the previous pass of this canvas
        self._handles: list[Any] = []
        self._op_mode = _OpRecorder(self)
        self._names = {module: name or "model" for name, module in model.named_modules()}
        self._encoder = anatomy.encoder(model)
        self._decoder = anatomy.decoder(model)
        # The experts reorder tokens across rows (expert dispatch): recorded as a whole only.
        self._opaque = anatomy.EXPERTS_CLASS

    # -- bookkeeping -------------------------------------------------------------------------------
    def current_module(self) -> str:
        return self._stack[-1] if self._stack else "generate"

    def batch_now(self) -> int:
        """Rows of the forward in flight: the prompt cache is encoded one prompt at a time."""
        return 1 if self._in_prompt_cache else self.capture.batch

    def row_now(self) -> int:
        return 0 if self._in_prompt_cache else self.row

    def records_now(self) -> bool:
        """False while the B=1 prompt cache encodes another row's prompt."""
        return self._encodes_row or not self._in_prompt_cache

    def records_ops_now(self) -> bool:
        return self.record_ops and self._opaque_depth == 0 and not self._busy and self.records_now()

    def _studied(self, tensor: torch.Tensor, name: str, index: int = -1) -> torch.Tensor:
        """The studied row's share of ``tensor``; in a padded prompt pass, over its real positions only."""
        batch = self.batch_now()
        part = row_slice(tensor, batch, self.row_now())
        if not self.prompt_padding or self._pass != PROMPT_PASS or self._prompt_width is None:
            return part
        sliced = part is not tensor and batch > 1
        return real_positions(part, sliced, name, index, self._prompt_width, self.prompt_padding)

    def _enter_pass(self, key: PassKey) -> None:
        self._flush()
        self._pass, self._position, self._occurrences = key, 0, {}

    def _flush(self) -> None:
        """Read the pending records' device digests back to host integers, in one transfer."""
        if not self._pending:
            return
        scalars = [d for r in self._pending for d in (*r.inputs, r.output)]
        device = self._pending[0].output.device  # outputs are device digests; carried inputs may be ints
        values = iter(torch.stack([torch.as_tensor(d, device=device) for d in scalars]).tolist())
        positioned = [r for r in self._pending if r.positions is not None]
        if positioned:
            flat = torch.cat([r.positions.to(device) for r in positioned]).tolist()
        for record in self._pending:
            record.inputs = tuple(next(values) for _ in record.inputs)
            record.output = next(values)
        offset = 0
        for record in positioned:
            width = record.positions.shape[0]
            record.positions, offset = flat[offset:offset + width], offset + width
        self._pending.clear()

    def add(self, kind: str, name: str, inputs: list[torch.Tensor], output: Any, input_digests=None) -> CallRecord | None:
        self._busy = True
        try:
            return self._add(kind, name, inputs, output, input_digests)
        finally:
            self._busy = False

    def _add(self, kind: str, name: str, inputs: list[torch.Tensor], output: Any, input_digests) -> CallRecord | None:
        tensor = first_tensor(output)
        if tensor is None or not tensor.is_floating_point() and tensor.dtype not in (torch.int64, torch.bool, torch.int32):
            return None
        if not self.records_now():
            return None
        row = self._studied(tensor, name)
        if input_digests is None:
            input_digests = tuple(digest_tensor(self._studied(t, name, i)) for i, t in enumerate(inputs))
        rows = [digest_rows(self._studied(t, name)) for t in tensors_in([output])]
        combined = sum(fold(r) * (2 * i + 1) for i, r in enumerate(rows))
        # Decoder layer outputs keep one digest per canvas position: how far a difference has spread.
        spread = (kind == "module" and row.dim() == 3 and row.shape[0] == 1
                  and anatomy.decoder_layer_index(name) is not None)
        occurrence = self._occurrences.get(name, 0)
        self._occurrences[name] = occurrence + 1
        record = CallRecord(kind, name, self._pass, self._position, occurrence, tuple(input_digests), combined,
                            row.numel() * row.element_size(), tuple(row.shape), rows[0] if spread else None)
        if record.key in self.keep:
            self.capture.kept[record.key] = row.detach().clone()
        self.capture.records.append(record)
        self._pending.append(record)
        self._position += 1
        return record

    # -- hooks -----------------------------------------------------------------------------------------
    def _call_name(self, module, args, kwargs) -> str:
        """The module's path, qualified by the strings it is called with: ``rotary_emb`` is called once per
        layer type in hash order, and its calls must keep their identity whatever that order is."""
        labels = [value for value in (*args, *kwargs.values()) if isinstance(value, str)]
        name = self._names[module]
        return f"{name}[{','.join(labels)}]" if labels else name

    def _record_carried(self, kwargs) -> None:
        """The decoder's inputs from the previous pass, with what produced them there as their inputs:
        the canvas from the sampler's decision (renoised), the self-conditioning logits from the logits the
        sampler saw. A canvas's first pass has no previous one: its canvas is the drawn noise."""
        source = self._last_sampler
        producers = {"decoder_input_ids": source.output if source else None,
                     "self_conditioning_logits": source.inputs[0] if source and source.inputs else None}
        for argument, name in CARRIED_INPUTS.items():
            value = kwargs.get(argument)
            if isinstance(value, torch.Tensor):
                inputs = () if producers[argument] is None else (producers[argument],)
                self.add("carried", name, [], value, input_digests=inputs)

    def _pre_hook(self, module, args, kwargs):
        if module is self._encoder and not self._in_prompt_cache:
            self._enter_pass(PassKey(self._pass.canvas + 1, "encoder", 0))
            self._last_sampler = None
        elif module is self._decoder:
            step = self._pass.step + 1 if self._pass.phase == "decoder" else 0
            self._enter_pass(PassKey(self._pass.canvas, "decoder", step))
            self._record_carried(kwargs)
        if module is self._encoder and self._pass == PROMPT_PASS and isinstance(kwargs.get("input_ids"), torch.Tensor):
            self._prompt_width = kwargs["input_ids"].shape[-1]
        name = self._call_name(module, args, kwargs)
        self._stack.append(name)
        if self.records_now():
            inputs = tensors_in(list(args) + list(kwargs.values()))
            self._busy = True
            module._canvaslab_inputs = tuple(digest_tensor(self._studied(t, name, i)) for i, t in enumerate(inputs))
            self._busy = False
        if isinstance(module, self._opaque):
            self._opaque_depth += 1

    def _post_hook(self, module, args, kwargs, output):
        if isinstance(module, self._opaque):
            self._opaque_depth -= 1
        name = self._stack.pop()
        inside_opaque = self._opaque_depth > 0
        if inside_opaque:  # e.g. an expert's activation: its rows are tokens of every batch row, reordered
            module.__dict__.pop("_canvaslab_inputs", None)
            return
        self.add("module", name, [], output, input_digests=module.__dict__.pop("_canvaslab_inputs", ()))

    def on_phase(self, phase: str) -> None:
        """The runner's phase notification: work before ``generate`` (the prompt cache) is its own pass."""
        self._in_prompt_cache = phase == "prompt_cache"
        if self._in_prompt_cache:
            self._enter_pass(PassKey(canvas=-1, phase="prompt_cache", step=0))

    def on_prompt_encoding(self, rows: list[int]) -> None:
        """The runner's notice that the B=1 prompt cache now encodes the prompt of ``rows``."""
        self._encodes_row = self.row in rows

    def on_accept(self, *, logits, accepted_mask, accepted_canvas, cur_step, entropy=None) -> None:
        """The runner's ``accept_canvas`` observer: the sampler's decision for this pass."""
        self._busy = True
        inputs = (digest_tensor(self._studied(logits, "sampler.accept_canvas")),)
        self._busy = False
        self._last_sampler = self.add("sampler", "sampler.accept_canvas", [], (accepted_mask, accepted_canvas),
                                      input_digests=inputs)

    # -- context manager ---------------------------------------------------------------------------
    def __enter__(self) -> "Recorder":
        for module in self._names:
            self._handles.append(module.register_forward_pre_hook(self._pre_hook, with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._post_hook, with_kwargs=True))
        self._op_mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._op_mode.__exit__(*exc)
        self._flush()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
