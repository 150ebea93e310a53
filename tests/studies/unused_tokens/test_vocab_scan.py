"""The vocabulary scan: unused-token discovery, the expected-count formula, exact corpus counts, streaming
that does not depend on the read size, and the CLI's user errors. CPU only, no network, a few seconds."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer
from transformers import PreTrainedTokenizerFast

from canvaslab.errors import CanvaslabError
from canvaslab.models.tokenizer import GEMMA4_UNUSED_BLOCKS, build_synthetic_tokenizer
from canvaslab.studies.unused_tokens import (
    contiguous_blocks,
    expected_unused_per_canvas,
    find_unused_tokens,
    load_token_counts,
    resolve_tokenizer,
    scan_corpus,
    scan_report,
)
from canvaslab.studies.unused_tokens.text_stream import iter_line_batches

# ---------------------------------------------------------------- unused tokens in the vocabulary


def test_tiny_preset_has_sixteen_unused_tokens_in_two_blocks():
    unused = find_unused_tokens(resolve_tokenizer("tiny"))
    assert unused.count == 16
    assert unused.blocks == [(6, 13), (504, 511)]
    assert unused.ids == (*range(6, 14), *range(504, 512))
    assert unused.tokens[0] == "<unused0>" and unused.tokens[-1] == "<unused15>"


def test_custom_planted_blocks_are_found_exactly():
    blocks = ((10, 12), (100, 100), (290, 299))
    unused = find_unused_tokens(build_synthetic_tokenizer(300, unused_blocks=blocks))
    assert unused.count == 14
    assert unused.blocks == list(blocks)


def test_only_whole_unused_names_match():
    """``<unused>``, ``<unused3>x`` or ``unused3`` are ordinary tokens, not unused ones."""
    tokenizer = _word_tokenizer(["<pad>", "<unk>", "<unused>", "<unused3>x", "unused3", "<unused7>", "word"])
    assert find_unused_tokens(tokenizer).ids == (5,)


def test_real_shapes_preset_has_gemma4_blocks_and_six_per_canvas():
    tokenizer = resolve_tokenizer("real-shapes")
    report = scan_report("real-shapes", tokenizer, canvas_length=256)
    assert report["unused_count"] == 6227
    assert [tuple(b) for b in report["unused_id_blocks"]] == list(GEMMA4_UNUSED_BLOCKS)
    assert report["expected_unused_per_canvas"] == pytest.approx(6.08, abs=0.005)


def test_contiguous_blocks_groups_runs():
    assert contiguous_blocks([]) == []
    assert contiguous_blocks([9, 6, 7, 11, 12, 13]) == [(6, 7), (9, 9), (11, 13)]


# ---------------------------------------------------------------- expected count per canvas


def test_expected_count_formula():
    assert expected_unused_per_canvas(256, 6227, 262_144) == 6.0810546875  # Gemma 4: 6,227 / 1,024
    assert expected_unused_per_canvas(256, 6242, 262_144) == 6.095703125  # Gemma 3: 6,242 / 1,024
    assert expected_unused_per_canvas(256, 16, 512) == 8.0
    assert expected_unused_per_canvas(16, 0, 99) == 0.0
    with pytest.raises(ValueError):
        expected_unused_per_canvas(256, 1, 0)


# ---------------------------------------------------------------- corpus counts


def _word_tokenizer(vocab: list[str]) -> PreTrainedTokenizerFast:
    from tokenizers import models, pre_tokenizers

    backend = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>")


def _gemma_like_tokenizer() -> PreTrainedTokenizerFast:
    """The tiny synthetic vocabulary made to behave like Gemma's real tokenizers: its ``<unusedN>`` are
    special added tokens (a literal ``<unused3>`` in the text becomes that id) and it adds ``<bos>``."""
    from tokenizers.processors import TemplateProcessing

    tiny = build_synthetic_tokenizer(512)
    backend = Tokenizer.from_str(tiny.backend_tokenizer.to_str())
    unused = find_unused_tokens(tiny)
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in unused.tokens])
    backend.post_processor = TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>")


PLANTED_TEXT = (
    "the <unused3> of and\n"
    "to in <unused12>. the\n"
    "\n\n"
    "café — naïve <unused3>, <unused3>\n"
    "a is that <unused12>\n"
    "for it with as was on"
)  # 3 x <unused3> (id 9), 2 x <unused12> (id 508), no trailing newline


@pytest.fixture
def planted_corpus(tmp_path):
    path = tmp_path / "planted.txt"
    path.write_text(PLANTED_TEXT, encoding="utf-8")
    return path


def test_planted_corpus_occurrences_are_exact(planted_corpus):
    tokenizer = _gemma_like_tokenizer()
    scan = scan_corpus(tokenizer, [planted_corpus])
    assert scan.occurrences([9, 508, 6, 511]) == {9: 3, 508: 2, 6: 0, 511: 0}
    report = scan_report("gemma-like", tokenizer, 256, scan)["corpus"]
    assert report["unused_occurrences_total"] == 5
    assert report["unused_occurrences"] == [
        {"token": "<unused3>", "id": 9, "count": 3},
        {"token": "<unused12>", "id": 508, "count": 2},
    ]


def test_tokens_scanned_equals_the_tokenizers_own_count(planted_corpus):
    tokenizer = _gemma_like_tokenizer()
    own_ids = tokenizer(PLANTED_TEXT, add_special_tokens=False)["input_ids"]  # the scan adds no <bos>
    assert tokenizer(PLANTED_TEXT)["input_ids"][0] == 2
    scan = scan_corpus(tokenizer, [planted_corpus, planted_corpus])
    assert scan.tokens_scanned == 2 * len(own_ids)
    assert np.array_equal(scan.token_counts, 2 * np.bincount(own_ids, minlength=len(tokenizer)))
    assert scan.tokens_per_second > 0


def test_literal_unused_text_is_not_an_occurrence_for_the_synthetic_tokenizer(planted_corpus):
    """Documented decision: counts are what the tokenizer emits. The synthetic word-level tokenizer does
    not register ``<unusedN>`` as added tokens, so the literal text splits into ``<``, ``unused``, ..."""
    tokenizer = build_synthetic_tokenizer(512)
    scan = scan_corpus(tokenizer, [planted_corpus])
    assert scan.occurrences(find_unused_tokens(tokenizer).ids) == dict.fromkeys(range(6, 14), 0) | dict.fromkeys(
        range(504, 512), 0
    )
    assert scan.tokens_scanned == len(tokenizer(PLANTED_TEXT, add_special_tokens=False)["input_ids"])


# ---------------------------------------------------------------- streaming


@pytest.mark.parametrize("chunk_bytes", [1, 3, 7, 64])
def test_small_chunks_give_the_same_counts_as_one_chunk(planted_corpus, chunk_bytes):
    tokenizer = _gemma_like_tokenizer()
    whole = scan_corpus(tokenizer, [planted_corpus], chunk_bytes=1 << 20)
    streamed = scan_corpus(tokenizer, [planted_corpus], chunk_bytes=chunk_bytes)
    assert streamed.tokens_scanned == whole.tokens_scanned
    assert np.array_equal(streamed.token_counts, whole.token_counts)


@pytest.mark.parametrize("chunk_bytes", [1, 5, 1 << 20])
def test_line_units_do_not_depend_on_the_chunk_size(tmp_path, chunk_bytes):
    text = "\n\nfirst line é\nsecond\n\n\nthird ünïcode line\nlast without newline"
    path = tmp_path / "lines.txt"
    path.write_text(text, encoding="utf-8")
    lines = [line for batch in iter_line_batches(path, chunk_bytes=chunk_bytes) for line in batch]
    assert "".join(lines) == text
    assert lines == ["\n\n", "first line é\n", "second\n\n\n", "third ünïcode line\n", "last without newline"]


def test_an_overlong_line_is_cut_at_whitespace_and_nothing_is_lost(tmp_path):
    text = "alpha beta gamma delta epsilon zeta eta theta\nshort\n"
    path = tmp_path / "long.txt"
    path.write_text(text, encoding="utf-8")
    batches = list(iter_line_batches(path, chunk_bytes=8, max_line_chars=16))
    assert "".join(line for batch in batches for line in batch) == text
    assert max(len(line) for batch in batches for line in batch) <= 24


def test_token_counts_file_round_trips(tmp_path, planted_corpus):
    from canvaslab.studies.unused_tokens import save_token_counts

    scan = scan_corpus(_gemma_like_tokenizer(), [planted_corpus])
    loaded = load_token_counts(save_token_counts(tmp_path / "counts.npy", scan.token_counts))
    assert loaded.dtype == np.int64 and np.array_equal(loaded, scan.token_counts)


# ---------------------------------------------------------------- tokenizer resolution


def test_a_tokenizer_directory_is_loaded_locally(tmp_path):
    _gemma_like_tokenizer().save_pretrained(tmp_path / "tok")
    unused = find_unused_tokens(resolve_tokenizer(str(tmp_path / "tok")))
    assert unused.blocks == [(6, 13), (504, 511)]


def test_a_directory_without_tokenizer_files_is_a_user_error(tmp_path):
    with pytest.raises(CanvaslabError, match="cannot load a tokenizer"):
        resolve_tokenizer(str(tmp_path))


# ---------------------------------------------------------------- CLI


@pytest.fixture
def cli(capsys):
    """Run ``canvaslab`` through its real entry point; returns (exit code, stdout, stderr)."""
    from canvaslab.cli.main import main

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tokenizer", "no-such-preset"], "neither a preset"),
        (["--tokenizer", "/no/such/tokenizer/dir"], "neither a preset"),
        (["--tokenizer", "tiny", "--corpus", "/no/such/corpus.txt"], "no such file"),
    ],
)
def test_cli_user_errors_exit_2_with_one_line(cli, tmp_path, args, message):
    code, _, err = cli("vocab-scan", *args, "--out", str(tmp_path / "out"))
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "vocab_scan.json").exists()


def test_cli_gemma3_without_prepared_cache_names_the_fix(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("CANVASLAB_CACHE", str(tmp_path / "empty-cache"))
    code, _, err = cli("vocab-scan", "--tokenizer", "gemma3", "--out", str(tmp_path / "out"))
    assert code == 2
    assert "canvaslab assets tokenizer" in err and len(err.strip().splitlines()) == 1


def test_cli_scan_writes_report_and_counts(cli, tmp_path, planted_corpus):
    out = tmp_path / "scan"
    code, stdout, _ = cli("vocab-scan", "--tokenizer", "tiny", "--corpus", str(planted_corpus), "--out", str(out))
    assert code == 0 and "vocabulary scan: tiny" in stdout
    report = json.loads((out / "vocab_scan.json").read_text())
    assert report["unused_count"] == 16 and report["unused_id_blocks"] == [[6, 13], [504, 511]]
    assert report["expected_unused_per_canvas"] == 8.0
    corpus = report["corpus"]
    assert corpus["files"] == [str(planted_corpus)]
    assert corpus["unused_occurrences_total"] == 0 and corpus["unused_occurrences"] == []
    counts = load_token_counts(corpus["token_counts_file"])
    assert counts.shape == (512,) and counts.sum() == corpus["tokens_scanned"] > 0
