"""The shipped `mini` tokenizer: Gemma-like layout, <unusedN> blocks the data never produces, the chat
template, and `canvaslab vocab-scan --tokenizer mini`."""

from __future__ import annotations

import json
import random

from typer.testing import CliRunner

from canvaslab.cli.main import app, main
from canvaslab.models.mini import MINI_EOS_IDS, MINI_VOCAB, load_mini_tokenizer
from canvaslab.scoring.prompting import encode_prompt
from canvaslab.training import chat
from canvaslab.training.tasks import Mixture
from canvaslab.training.tokenizer import UNUSED_TOTAL, head_specials, train_tokenizer, unused_ids


def test_layout_matches_gemma_special_ids():
    tok = load_mini_tokenizer()
    assert len(tok) == MINI_VOCAB
    assert tok.convert_tokens_to_ids(head_specials()) == list(range(109))
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (0, 1, 2)
    assert tok.convert_tokens_to_ids(["<start_of_turn>", "<end_of_turn>"]) == [105, 106]
    assert MINI_EOS_IDS == [1, 106]


def test_at_least_200_unused_in_a_low_and_a_high_block():
    ids = unused_ids(load_mini_tokenizer())
    assert len(ids) == UNUSED_TOTAL >= 200
    assert ids[0] == 6 and 104 in ids and 105 not in ids and ids[-1] == MINI_VOCAB - 1


def test_training_text_never_encodes_to_an_unused_id():
    tok, mixture, rng = load_mini_tokenizer(), Mixture(None), random.Random(11)
    texts = []
    for _ in range(3000):
        example = mixture.sample(rng)
        texts.append(chat.prompt_text(example.prompt) + chat.answer_text(example.answer))
    unused = set(unused_ids(tok))
    assert not any(i in unused for ids in tok(texts, add_special_tokens=False)["input_ids"] for i in ids)


def test_chat_template_gives_the_training_prompt_and_digits_are_single_tokens():
    tok = load_mini_tokenizer()
    ids = encode_prompt(tok, "What is 123 + 45?")
    assert ids == tok(chat.prompt_text("What is 123 + 45?"), add_special_tokens=False)["input_ids"]
    assert ids[:2] == [2, 105]
    digits = tok("98765", add_special_tokens=False)["input_ids"]
    assert len(digits) == 5 and tok.decode(digits) == "98765"


def test_training_a_small_bpe_keeps_the_layout():
    texts = [chat.prompt_text(f"What is {a} + {a + 1}?") + chat.answer_text(f"{a} + {a + 1} = {2 * a + 1}.")
             for a in range(300)]
    tok = train_tokenizer(texts, vocab_size=512)
    assert len(tok) == 512
    assert len(unused_ids(tok)) >= 200  # the tail fills whatever the small corpus left unlearned
    assert tok.convert_tokens_to_ids("<end_of_turn>") == 106


def test_vocab_scan_shows_the_mini_unused_tokens(tmp_path, capsys):
    main(["vocab-scan", "--tokenizer", "mini", "--canvas-length", "128", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "vocab_scan.json").read_text())
    assert report["unused_count"] == UNUSED_TOTAL
    assert [6, 104] in report["unused_id_blocks"]
    assert abs(report["expected_unused_per_canvas"] - 128 * UNUSED_TOTAL / MINI_VOCAB) < 1e-9
    assert "<unusedN> tokens" in capsys.readouterr().out


def test_a_bpe_of_another_size_keeps_its_high_block_at_the_end():
    texts = [chat.prompt_text(f"Tell me about item {a}.") + chat.answer_text(f"Item {a} is fine.") for a in range(300)]
    tok = train_tokenizer(texts, vocab_size=1024, tail_unused=300)
    ids = unused_ids(tok)
    assert len(tok) == 1024 and ids[-300:] == list(range(724, 1024))
    assert tok.convert_tokens_to_ids(head_specials()) == list(range(109))


def test_mini_tokenizer_refuses_a_vocabulary_too_small_before_any_work(tmp_path):
    result = CliRunner().invoke(app, ["mini", "tokenizer", "--out", str(tmp_path / "tok"), "--vocab-size", "600"])
    assert result.exit_code == 2 and "--vocab-size 600" in result.output and len(result.output.splitlines()) == 1
    assert not (tmp_path / "tok").exists()
