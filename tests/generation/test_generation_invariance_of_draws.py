"""End to end: row 0's initial canvas noise is the same at B = 1, 3 and 7, wherever row 0 sits."""

import torch

from canvaslab.generation import generate


def _first_canvas(tiny, rows):
    seen = []

    def grab(module, args, kwargs):
        if not seen:
            seen.append(kwargs["decoder_input_ids"].clone())

    handle = tiny.model.model.decoder.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        generate(tiny, rows, seed=4, generation={"max_denoising_steps": 1})
    finally:
        handle.remove()
    return seen[0]


def test_initial_noise_same_at_batch_1_3_7_and_any_position(tiny, prompt_ids):
    others = [tiny.tokenizer(text)["input_ids"] for text in ("tell a story", "why is the sky blue ?")]
    alone = _first_canvas(tiny, [prompt_ids])[0]
    for size, position in ((3, 0), (3, 2), (7, 0), (7, 5)):
        rows = [others[i % 2] for i in range(size)]
        rows[position] = prompt_ids
        canvas = _first_canvas(tiny, rows)
        assert torch.equal(canvas[position], alone)
        assert not torch.equal(canvas[(position + 1) % size], alone)
