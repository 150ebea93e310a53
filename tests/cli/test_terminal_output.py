"""Text from outside (a prompt file, a model's output, a study folder) reaches the terminal with its control
characters escaped and its brackets shown literally: an escape sequence in a prompt id is shown, never sent
to the terminal, and rich markup in it is never read as markup."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from rich.console import Console

from canvaslab.cli.progress import BarProgress, PlainProgress
from canvaslab.reports.batch_study import batch_study_table
from canvaslab.reports.noise_study import noise_study_table
from canvaslab.reports.op_scan import op_scan_table
from canvaslab.reports.order_metrics import order_metrics_tables, pooled_auroc_line
from canvaslab.reports.vocab_scan import vocab_scan_table

CLIPBOARD = "\x1b]52;c;aGk=\x07"  # OSC 52: writes the clipboard
TITLE = "\x1b]0;pwned\x07"  # sets the window title
CLEAR = "\x1b[2J"  # clears the screen
CSI = "\x9b"  # the one-byte CSI
LINK = "[link=file:///etc/passwd]x[/link]"  # rich markup
BOLD = "[bold red]x[/]"
HOSTILE = f"id{CLIPBOARD}{LINK}"
HOSTILE_TEXT = f"t{TITLE}c{CLEAR}s{CSI}31m{BOLD}"
SHOWN = ("\\x1b]52;c;aGk=\\x07", LINK)  # what the terminal shows of HOSTILE
SHOWN_TEXT = ("\\x1b]0;pwned\\x07", "\\x1b[2J", "\\x9b31m", BOLD)  # and of HOSTILE_TEXT


def assert_inert(output: str) -> None:
    """No escape, one-byte CSI or bell character: nothing the terminal would act on."""
    for raw in ("\x1b", "\x9b", "\x07"):
        assert raw not in output, repr(output)


def assert_shown(output: str, *shown: str) -> None:
    for text in shown:
        assert text in output, (text, output)


# ---------------------------------------------------------------- the commands, as a user runs them


def _command(*args: str) -> subprocess.Popen:
    env = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "canvaslab.cli.main", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(process: subprocess.Popen) -> tuple[str, str]:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err.decode(errors="replace")
    return out.decode(), err.decode()


@pytest.fixture(scope="module")
def commands(tmp_path_factory):
    """``batch-study`` on a hostile prompt file and ``generate`` with hostile prompts, run side by side."""
    folder = tmp_path_factory.mktemp("hostile")
    prompts = folder / "prompts.jsonl"
    records = [{"id": HOSTILE, "prompt": HOSTILE_TEXT}, {"id": f"{BOLD}{TITLE}", "prompt": f"p{CLIPBOARD}{CSI}2J"}]
    prompts.write_text("".join(json.dumps(record) + "\n" for record in records))
    batch = _command("batch-study", "--model", "tiny", "--prompts", str(prompts), "--batch-sizes", "1,2",
                     "--steps", "2", "--repeat-control", "same-process", "--out", str(folder / "out"))
    generate = _command("generate", "--prompt", HOSTILE, "--prompt", f"{HOSTILE_TEXT}\nsecond line",
                        "--steps", "2", "--max-new-tokens", "16")
    return {"batch-study": _finish(batch), "generate": _finish(generate)}


def test_batch_study_shows_hostile_prompt_ids_escaped(commands):
    out, err = commands["batch-study"]
    assert_inert(out)
    assert_inert(err)
    assert_shown(out, *SHOWN, BOLD + "\\x1b]0;pwned\\x07")
    assert "runs diverged" in out


def test_generate_shows_hostile_prompts_escaped(commands):
    out, err = commands["generate"]
    assert_inert(out)
    assert_inert(err)
    assert_shown(out, *SHOWN, *SHOWN_TEXT)
    assert "\\x0asecond line" not in out and "\nsecond line\n" in out  # a prompt's line breaks stay line breaks


# ---------------------------------------------------------------- the tables, from hand-made results


def render(*renderables, terminal: bool = False) -> str:
    """What a console prints: plain (a pipe), or on a colour terminal, where rich adds its own style codes."""
    buffer = io.StringIO()
    console = (Console(file=buffer, force_terminal=True, color_system="standard", width=300) if terminal
               else Console(file=buffer, force_terminal=False, width=300))
    for renderable in renderables:
        console.print(renderable, crop=False)
    return buffer.getvalue()


def assert_safe(*renderables, shown=SHOWN) -> None:
    plain = render(*renderables)
    assert_inert(plain)
    assert_shown(plain, *shown)
    # On a colour terminal rich writes style codes (ESC [ ... m) but no OSC (links, title, clipboard) and
    # nothing of the hostile text itself.
    coloured = render(*renderables, terminal=True)
    for raw in ("\x1b]", CLEAR, "\x9b", "\x07"):
        assert raw not in coloured, repr(coloured)


def _batch_summary() -> dict:
    run = {"prompt_id": HOSTILE, "batch_size": 2,
           "first_divergence": {"pass": f"canvas 0 pass 1{TITLE}", "call": f"model.decoder.layers.0.{CLEAR}{BOLD}"},
           "origin": {"name": f"model.decoder.{CSI}2J{LINK}", "inputs_identical": False},
           "router_scores_changed_pct": 0.5, "final_logits_changed_pct": 90.0, "passes_matching": 1,
           "passes_total": 4, "text_changed": True, "stop_changed": False}
    summary = {"runs": 1, "diverged": 1, "text_changed": 1, "stop_changed": 0, "passes_matching": 1,
               "passes_total": 4, "bytes_compared": 1000, "equivalence_classes": [[1], [2]],
               "repeat_control_identical": True}
    return {"runs": [run], "summary": summary, "repeat_control": {"process": f"same{CLIPBOARD}{BOLD}"}}


@pytest.mark.parametrize("wide", [False, True])
def test_batch_study_table(wide):
    assert_safe(batch_study_table(_batch_summary(), wide=wide),
                shown=(*SHOWN, "\\x1b]0;pwned\\x07", "\\x1b[2J", "\\x9b2J", BOLD))


def test_op_scan_table():
    scans = [{"mode": f"stock{TITLE}{BOLD}",
              "ops": {HOSTILE: {"shape": f"(256,{CLEAR})", "classes": [[1], [2]], "invariant": False}}}]
    assert_safe(op_scan_table(scans), shown=(*SHOWN, "\\x1b]0;pwned\\x07", BOLD, "\\x1b[2J"))


def _regime(n: int) -> dict:
    return {"n_generations": n, "tau_b": 0.5, "tau_b_ci": [0.4, 0.6], "block_tau": {"16": 0.3}, "control_tau": 0.1,
            "tokens_per_call": 4.0, "same_call_fraction": 0.2, "unaccept_events": 0.0,
            "accept_calls": {"mean": 6.0, "budget": 8}, "commit_entropy_mean": 0.01, "accuracy": 0.5,
            "auroc": 0.6, "auroc_ci": [0.5, 0.7]}


@pytest.mark.parametrize("wide", [False, True])
def test_order_metrics_tables(wide):
    metrics = {"n_generations": 4, "regimes": {HOSTILE: _regime(2), f"math{CSI}31m{BOLD}": _regime(2)},
               "baseline": {"regimes": {HOSTILE: {"accuracy": 0.75}}},
               "pooled_auroc": {"value": None, "simpson_prone": None, "n": 4, "simpson_reason": f"why{TITLE}{LINK}"}}
    assert_safe(*order_metrics_tables(metrics, wide=wide), pooled_auroc_line(metrics["pooled_auroc"]),
                shown=(*SHOWN, "\\x9b31m", BOLD, "\\x1b]0;pwned\\x07"))


def test_noise_study_table():
    effect = {"comparison": HOSTILE, "outcome": f"first{TITLE}", "primary": True, "n_pairs": 40,
              "mean_difference": 0.01, "ci": [-0.02, 0.03], "ci_level": 0.9, "margin": 0.05, "tost_p": 0.01,
              "verdict": f"equivalent{CLEAR}{BOLD}"}
    report = {"plan_hash": f"abc{CSI}2Jdef0123456789", "conditions_run": 1, "conditions_total": 2, "complete": False,
              "conclusion": {"answer": f"no{CLIPBOARD}"}, "effects": [effect],
              "safeguard": {"compared": 2, "fired": 1, "by_field": {f"tokens{TITLE}{LINK}": 1},
                            "outcome_fields_changed": 0}}
    assert_safe(noise_study_table(report), shown=(*SHOWN, "\\x1b]0;pwned\\x07", "\\x1b[2J", BOLD, "\\x9b2J"))


def test_vocab_scan_table():
    report = {"tokenizer": f"tok{TITLE}{BOLD}", "vocab_size": 10, "unused_count": 1, "unused_id_blocks": [[3, 3]],
              "canvas_length": 16, "expected_unused_per_canvas": 0.5,
              "corpus": {"files": [f"corpus{CLEAR}.txt"], "tokens_scanned": 100, "unused_occurrences_total": 1,
                         "unused_occurrences": [{"token": HOSTILE, "id": 3, "count": 1}], "tokens_per_second": 10.0}}
    assert_safe(vocab_scan_table(report), shown=(*SHOWN, "\\x1b]0;pwned\\x07", BOLD, "\\x1b[2J"))


# ---------------------------------------------------------------- progress


def test_plain_progress_escapes_the_running_unit():
    out = io.StringIO()
    report = PlainProgress("study", "prompts", out, heartbeat=0, clock=lambda: 0.0)
    report(0, 2, f"{HOSTILE}{HOSTILE_TEXT}: B=2")
    report.beat()
    assert_inert(out.getvalue())
    assert_shown(out.getvalue(), *SHOWN, *SHOWN_TEXT)
    assert out.getvalue().count("\n") == 1


def test_bar_progress_escapes_the_running_unit():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system="standard", width=300)
    with BarProgress("study", "prompts", console) as report:
        report(0, 2, f"{HOSTILE}{HOSTILE_TEXT}: B=2")
        report.bar.refresh()
    output = buffer.getvalue()
    for raw in ("\x1b]", CLEAR, "\x9b", "\x07"):
        assert raw not in output, repr(output)
    assert_shown(output, *SHOWN, *SHOWN_TEXT)


def test_the_outcome_line_escapes_a_failed_units_id_and_error():
    import io

    from rich.console import Console

    from canvaslab.api.results import Outcome
    from canvaslab.cli.options import finish
    import typer

    buffer = io.StringIO()
    with pytest.raises(typer.Exit):
        finish(Console(file=buffer, width=200), Outcome(0, 0, {"p\x1b]52;c;aGk=\x07": "Error: \x1b[2J"}), "prompts")
    assert "\x1b" not in buffer.getvalue() and "\\x1b]52" in buffer.getvalue()


def test_folder_names_with_markup_and_escapes_are_shown_as_they_are(tmp_path):
    """A study folder's name reaches the "wrote ..." lines escaped and never read as markup (a name holding
    ``[/]`` used to end the command with rich's MarkupError after its work was done)."""
    study = tmp_path / f"r{BOLD}x[/]y{TITLE}"
    noise = tmp_path / f"n{BOLD}[/]{CLEAR}"
    outputs = [_finish(_command("batch-study", "--model", "tiny", "--prompts", "1", "--batch-sizes", "1,2",
                                "--steps", "2", "--repeat-control", "same-process", "--out", str(study))),
               _finish(_command("report", str(study))),
               _finish(_command("export", str(study))),
               _finish(_command("noise-study", "plan", "--model", "tiny", "--design", "smoke", "--out", str(noise))),
               _finish(_command("noise-study", "run", str(noise), "--limit", "1"))]
    for out, err in outputs:
        assert_inert(out)
        assert_inert(err)
        assert "wrote " in out and ("x[/]y" in out or f"{BOLD}[/]" in out), out
