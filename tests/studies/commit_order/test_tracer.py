"""The commit tracer: one call per pass per row, the sampler's own accepted sets and entropies, calls of
finished rows dropped, content without EOS/padding, positions numbered across canvases, and the
compiled static-cache path refused (stock and rowwise: transformers compiles the sampler there)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from canvaslab.errors import CanvaslabError
from canvaslab.generation import generate
from canvaslab.generation.runner import RowResult
from canvaslab.prompts import BUILTIN_PROMPTS
from canvaslab.scoring.probes.probe import make_probe
from canvaslab.capture.commit_trace import GenerationTrace, read_traces, write_traces
from canvaslab.studies.commit_order.tracer import CommitTracer, content_mask

STEPS = 4
EOS = [1, 106, 50]


class Spy:
    """An independent observer: the sampler's mask as given, entropy from softmax in float64, row means."""

    def __init__(self):
        self.masks, self.entropies, self.mean_entropies = [], [], []

    def on_accept(self, *, logits, accepted_mask, accepted_canvas, cur_step, entropy=None):
        self.masks.append(accepted_mask.clone())
        log_p = torch.log_softmax(logits.double(), dim=-1)
        self.entropies.append(-(log_p.exp() * log_p).sum(-1))
        # exactly the stopping criterion's statistic
        self.mean_entropies.append(torch.distributions.Categorical(logits=logits).entropy().mean(-1))


def _probes(count: int):
    return [make_probe("open_ended", f"p{i}", BUILTIN_PROMPTS[i], {}) for i in range(count)]


def _prompt_ids(tiny, count: int):
    return [tiny.tokenizer(text)["input_ids"] for text in BUILTIN_PROMPTS[:count]]


def _no_score(probe, text):
    return None


def _traced(tiny, count: int, generation: dict):
    tracer, spy = CommitTracer(tiny.model), Spy()
    output = generate(tiny, _prompt_ids(tiny, count), seed=0, observers=[tracer, spy], generation=generation)
    traces = tracer.traces(output.rows, _probes(count), [0] * count, settings=output.settings, scorer=_no_score)
    return output, traces, spy


def test_one_call_per_pass_with_the_samplers_accepted_sets_and_entropies(tiny):
    output, traces, spy = _traced(tiny, 3, {"max_denoising_steps": STEPS})
    assert len(spy.masks) == STEPS
    for row, (result, trace) in enumerate(zip(output.rows, traces)):
        assert result.passes == [STEPS]
        assert len(trace.calls) == STEPS
        assert [call.step for call in trace.calls] == list(range(STEPS, 0, -1))
        for call, mask, entropy in zip(trace.calls, spy.masks, spy.entropies):
            assert sorted(call.accepted) == torch.nonzero(mask[row]).flatten().tolist()
            assert len(call.accepted) >= 1  # the lowest-entropy position always qualifies
            np.testing.assert_allclose(call.entropy, entropy[row].numpy(), rtol=1e-5, atol=1e-6)
        assert trace.budget == STEPS and trace.seed == 0 and trace.regime == "open_ended"
        assert trace.extra["text"] == result.text and trace.extra["tokens"] == result.tokens


def test_calls_after_a_row_stopped_are_dropped(tiny):
    # Stop a row as soon as its mean entropy is below a threshold chosen between the rows' values on
    # pass 2, so half the rows stop at pass 2 and the others later, while the batch keeps calling.
    generation = {"max_denoising_steps": STEPS, "stability_threshold": 0, "confidence_threshold": 1e-9}
    _, _, spy = _traced(tiny, 4, generation)
    second = np.sort(spy.mean_entropies[1].numpy())
    assert second[1] < second[2], "need distinct row entropies to split the batch"
    generation["confidence_threshold"] = float((second[1] + second[2]) / 2)
    output, traces, spy = _traced(tiny, 4, generation)
    passes = [row.passes[0] for row in output.rows]
    assert min(passes) == 2 and max(passes) > 2
    assert len(spy.masks) == max(passes)  # finished rows went on through accept_canvas
    for row, (trace, count) in enumerate(zip(traces, passes)):
        assert len(trace.calls) == count
        assert trace.calls[-1].accepted == torch.nonzero(spy.masks[count - 1][row]).flatten().tolist()


def test_content_excludes_eos_and_padding(tiny):
    assert content_mask([5, 6, 0, 7, 1, 9, 0], {1}, 0) == [True, True, False, True, False, False, False]
    assert content_mask([5, 6], {1}, 0) == [True, True]
    output, traces, _ = _traced(tiny, 3, {"max_denoising_steps": 2})
    for row, trace in zip(output.rows, traces):
        end = row.eos_position if row.eos_position is not None else len(row.tokens)
        expected = [i < end and token not in EOS and token != 0 for i, token in enumerate(row.tokens)]
        assert trace.content == expected
        if row.eos_position is not None:
            assert not any(trace.content[row.eos_position:])


def _feed(tracer: CommitTracer, steps: list[int], width: int = 4, rows: int = 2) -> None:
    """Synthetic calls: row r accepts positions <= call index (+ r), with entropies 0..width-1."""
    tracer.on_phase("generate")
    for index, step in enumerate(steps):
        logits = torch.zeros(rows, width, 8)
        logits[:, :, 0] = torch.arange(width, 0, -1, dtype=torch.float32) * 3  # lower entropy on the left
        mask = torch.zeros(rows, width, dtype=torch.bool)
        for row in range(rows):
            mask[row, : min(width, index % 2 + 1 + row)] = True
        tracer.on_accept(logits=logits, accepted_mask=mask, accepted_canvas=torch.zeros(rows, width), cur_step=step)


def _row(tokens, passes):
    return RowResult(prompt_ids=[2], tokens=tokens, text="", stop_passes=[None] * len(passes), passes=passes,
                     eos_position=None)


def test_positions_are_numbered_across_canvases_and_later_canvases_of_finished_rows_dropped():
    tracer = CommitTracer()
    _feed(tracer, [2, 1, 2, 1])  # two canvases of two passes each
    rows = [_row([5, 6, 7, 8, 9, 10, 1, 0], [2, 2]),  # EOS in canvas 1
            _row([5, 1, 0, 0, 0, 0, 0, 0], [1, 2])]   # EOS in canvas 0, stopped after one pass
    settings = {"max_denoising_steps": 2, "eos_token_id": [1], "pad_token_id": 0}
    first, second = tracer.traces(rows, _probes(2), [3, 3], settings=settings, scorer=_no_score)
    assert first.content == [True] * 6 + [False, False]
    assert [call.extra["canvas"] for call in first.calls] == [0, 0, 1, 1]
    assert [sorted(call.accepted) for call in first.calls] == [[0], [0, 1], [0, 1, 4], [0, 1, 4, 5]]
    assert all(len(call.entropy) == 8 for call in first.calls)
    assert first.calls[0].entropy[4:] == [0.0] * 4 and first.calls[2].entropy[:4] == [0.0] * 4
    assert first.calls[0].entropy[0] < first.calls[0].entropy[3]
    # row 1 ended in canvas 0: its canvas 1 is batch padding; one pass counted there
    assert second.content == [True, False, False, False]
    assert [sorted(call.accepted) for call in second.calls] == [[0, 1]]
    assert second.generation_id.endswith("#3") and second.extra["stop_passes"] == [None]
    # the traces satisfy the file format
    assert all(isinstance(trace, GenerationTrace) for trace in (first, second))


def test_traces_round_trip_through_the_file_format(tiny, tmp_path):
    _, traces, _ = _traced(tiny, 2, {"max_denoising_steps": 2})
    path = write_traces(tmp_path / "t.jsonl", traces)
    assert [t.to_record() for t in read_traces(path)] == [t.to_record() for t in traces]


def test_a_new_generate_forgets_the_previous_calls_and_a_tracer_not_given_to_generate_says_so():
    tracer = CommitTracer()
    with pytest.raises(CanvaslabError, match="no accept_canvas call"):
        tracer.traces([_row([5], [1])], _probes(1), [0], settings={"max_denoising_steps": 1})
    _feed(tracer, [2, 1])
    _feed(tracer, [1])
    assert len(tracer.calls) == 1


def test_static_cache_is_refused_except_on_invariant_modes_compiled_path(tiny, monkeypatch):
    monkeypatch.setattr(tiny.model.generation_config, "cache_implementation", "static")
    for mode in ("stock", "rowwise"):
        with pytest.raises(CanvaslabError, match="compiled copy"):
            CommitTracer(tiny.model, mode)
    CommitTracer(tiny.model, "invariant")  # there the sampler stays eager (canvaslab.generation.compiled_path)
    monkeypatch.setattr(tiny.model.generation_config, "disable_compile", True, raising=False)
    CommitTracer(tiny.model)  # no compiled sampler without compilation
