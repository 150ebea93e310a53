"""A store whose registered plan was replaced after results existed, and a registered plan holding NaN or
Infinity: both are refused in one line, and nothing in the store is moved, for every study on the engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_fakes import Squares

import canvaslab
from canvaslab.cli.main import main
from canvaslab.errors import CanvaslabError
from canvaslab.studies.engine import run_study, write_stored_views
from canvaslab.studies.engine.plan import canonical_json, sha256_of


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _forge_plan(folder: Path, n: int) -> None:
    """Re-register another plan in place, consistent with its hash, as a hand edit after the results would."""
    forged = {"study": "squares", "plan": {"n": n, "group_size": 1}}
    (folder / "store" / "plan.json").write_text(canonical_json(forged) + "\n")
    (folder / "store" / "plan.sha256").write_text(f"{sha256_of(forged)}  plan.json\n")


@pytest.fixture
def forged(tmp_path) -> Path:
    folder = tmp_path / "s"
    run_study(Squares(n=3), folder)
    _forge_plan(folder, 4)
    return folder


def test_run_refuses_a_plan_changed_after_results_and_moves_nothing(forged, tmp_path):
    log = tmp_path / "log"
    before = _files(forged)
    with pytest.raises(CanvaslabError) as refused:
        run_study(Squares(n=4, log=str(log)), forged)
    message = str(refused.value)
    assert str(forged) in message and "plan was changed after 3 results were stored" in message
    assert "--fresh" in message and len(message.splitlines()) == 1
    assert _files(forged) == before and not log.exists()  # nothing ran, nothing set aside


def _export_refused(folder: Path, capsys) -> str:
    """``canvaslab export FOLDER``'s error line, once it is known to be one line with exit code 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(folder)])
    error = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(error.splitlines()) == 1
    return error


def test_reading_views_and_export_refuse_a_changed_plan_too(forged, capsys):
    before = _files(forged)
    with pytest.raises(CanvaslabError, match="plan was changed after 3 results were stored"):
        write_stored_views(Squares(n=4), forged)
    assert "3 results were stored" in _export_refused(forged, capsys)
    assert _files(forged) == before


def test_fresh_starts_over_and_keeps_the_old_results(forged):
    before = _files(forged)
    view, outcome = run_study(Squares(n=4), forged, fresh=True)
    assert outcome.ran == 4 and view["sum"] == 14
    assert _files(Path(f"{forged}.1")) == before


def test_a_record_failing_its_checksum_is_still_set_aside_whatever_plan_it_cites(tmp_path, capsys):
    """Only an intact record citing another plan means the plan changed; a damaged one is a torn write."""
    folder = tmp_path / "s"
    run_study(Squares(n=3), folder)
    path = sorted((folder / "store" / "records").glob("*.json"))[0]
    stored = json.loads(path.read_text())
    stored["plan_sha256"], stored["record_sha256"] = "0" * 64, "1" * 64
    path.write_text(canonical_json(stored))
    _, outcome = run_study(Squares(n=3), folder)
    assert (outcome.ran, outcome.skipped) == (1, 2)
    assert path.with_name(path.name + ".damaged").exists()
    assert "is damaged: kept as" in capsys.readouterr().err


@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity"])
def test_a_registered_plan_holding_a_non_finite_number_is_refused_in_one_line(tmp_path, capsys, word):
    folder = tmp_path / "s"
    run_study(Squares(n=3), folder)
    registered = folder / "store" / "plan.json"
    registered.write_text(registered.read_text().replace('"group_size":1', f'"group_size":{word}'))
    before = _files(folder)
    for attempt in (lambda: run_study(Squares(n=3), folder), lambda: write_stored_views(Squares(n=3), folder),
                    lambda: canvaslab.open_results(folder)):
        with pytest.raises(CanvaslabError, match="holds a non-finite number .plan.group_size is"):
            attempt()
    assert "non-finite number" in _export_refused(folder, capsys)
    assert _files(folder) == before


class Renamed(Squares):
    """Squares whose unit ids carry a prefix from the plan: another prefix, no unit id in common."""

    def __init__(self, prefix: str, **kwargs):
        super().__init__(**kwargs)
        self.prefix = prefix

    def plan(self):
        return {**super().plan(), "prefix": self.prefix}

    def units(self):
        return [f"{self.prefix}/{i}" for i in range(self.n)]


def test_a_changed_plan_whose_unit_ids_all_differ_is_refused_too(tmp_path):
    folder, log = tmp_path / "s", tmp_path / "log"
    run_study(Renamed("u", n=3), folder)
    forged = {"study": "squares", "plan": Renamed("v", n=3).plan()}
    (folder / "store" / "plan.json").write_text(canonical_json(forged) + "\n")
    (folder / "store" / "plan.sha256").write_text(f"{sha256_of(forged)}  plan.json\n")
    before = _files(folder)
    with pytest.raises(CanvaslabError, match="plan was changed after 3 results were stored"):
        run_study(Renamed("v", n=3, log=str(log)), folder)
    assert _files(folder) == before and not log.exists()
