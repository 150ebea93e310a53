"""Normal runs print no warnings and no library notices (their causes are fixed, nothing is filtered),
and without a terminal the progress is plain lines on stderr counting finished runs."""

from __future__ import annotations

import logging
import warnings

import pytest

from canvaslab.cli.main import main


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.notices: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.notices.append(f"{record.name}: {record.getMessage()}")


@pytest.fixture
def no_log_notices():
    """Library notices go through logging; transformers' logger does not propagate to the root logger and
    writes to the stderr it saw when first configured, so a handler on each logger collects them here."""
    collect = _Collect()
    loggers = [logging.getLogger(), logging.getLogger("transformers"), logging.getLogger("torch")]
    for logger in loggers:
        logger.addHandler(collect)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeHandler(collect)
    assert not collect.notices


def _run_strict(capfd, *args: str) -> tuple[str, str]:
    """Run the CLI with every warning a user would see an error (all but the deprecation categories Python
    hides outside ``__main__``); returns (stdout, stderr) at the file-descriptor level, so notices written
    by library loggers are seen too."""
    capfd.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        main(list(args))
    return capfd.readouterr()


def test_generate_prints_only_the_generation(capfd, no_log_notices):
    out, err = _run_strict(capfd, "generate", "--prompt", "the man said", "--prompt", "tell a story", "--steps", "2")
    assert err == ""
    assert "the man said" in out and "stop:" in out


def test_batch_study_prints_progress_lines_and_no_warning(capfd, tmp_path, no_log_notices):
    out, err = _run_strict(capfd, "batch-study", "--prompts", "1", "--batch-sizes", "1,2", "--steps", "2",
                           "--out", str(tmp_path))
    lines = err.splitlines()
    assert lines and all(line.startswith("batch-size study: ") for line in lines), err
    assert lines[0] == "batch-size study: started, 0:00:00"
    assert lines[-1].startswith("batch-size study: 1/1 prompts finished")  # the study's units
    assert "runs diverged" in out


def test_op_scan_prints_no_transformers_notice(capfd, no_log_notices):
    out, err = _run_strict(capfd, "op-scan", "--batch-sizes", "1,2", "--mode", "stock")
    assert err and all(line.startswith("op scan: ") for line in err.splitlines()), err  # progress lines only
    assert "op scan" in out
