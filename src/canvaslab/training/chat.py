"""The chat format of the `mini` models: Gemma's turn markers, one user turn, one model turn.

``<bos><start_of_turn>user\\n{prompt}<end_of_turn>\\n<start_of_turn>model\\n{answer}<end_of_turn>``

The same string is produced by the tokenizer's chat template (``apply_chat_template`` with
``add_generation_prompt=True`` gives everything up to the answer), so the study's ``encode_prompt`` and
the training data agree token for token.
"""

from __future__ import annotations

BOS, EOS, PAD, UNK, MASK = "<bos>", "<eos>", "<pad>", "<unk>", "<mask>"
START_OF_TURN, END_OF_TURN = "<start_of_turn>", "<end_of_turn>"

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\n' }}"
    "{{ message['content'] }}{{ '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)


def prompt_text(user: str) -> str:
    """The model's input for one user turn: everything up to where its answer starts."""
    return f"{BOS}{START_OF_TURN}user\n{user}{END_OF_TURN}\n{START_OF_TURN}model\n"


def answer_text(answer: str) -> str:
    """The model's turn as trained: the answer, closed by the end-of-turn marker (an EOS id)."""
    return f"{answer}{END_OF_TURN}"
