"""The denoising path's data: the counts each canvas grid shows at pass k are the study's own records."""

from __future__ import annotations

from canvaslab.reports.html.canvas_grid import (
    DIFFERS, canvas_dataset, cell_states, matched_reference, showcase_prompt, state_counts,
)
from canvaslab.reports.readers import batch_study
from canvaslab.reports.readers.batch_study import CanvasPass


def test_grid_counts_at_every_pass_equal_the_recorded_canvases(study_folders):
    study = batch_study.read(study_folders["folders"]["stock"])
    dataset = canvas_dataset(study, "builtin-0", "batch0", "stock")
    reference_tokens, accepted = study_folders["paths"][("builtin-0", 1)]
    for series in dataset["sizes"]:
        tokens, run_accepted = study_folders["paths"][("builtin-0", series["B"])]
        for k, counts in enumerate(state_counts(series)):
            committed = set(i for i, a in enumerate(run_accepted[k]) if a)
            differing = {i for i in committed if tokens[k][i] != reference_tokens[k][i]}
            assert counts == {"noise": 256 - len(committed), "committed": len(committed - differing),
                              "differs": len(differing)}, (series["B"], k)
    # the planted difference: B >= 3 commits other tokens at its first 5 + B % 7 positions from pass 2 on
    assert [c["differs"] for c in state_counts(dataset["sizes"][2])][:2] == [0, 0]
    assert all(c["differs"] > 0 for c in state_counts(dataset["sizes"][2])[2:])
    assert all(c["differs"] == 0 for s in dataset["sizes"][:2] for c in state_counts(s))


def test_a_position_committed_on_one_side_only_differs_and_noise_is_never_compared():
    reference = CanvasPass(0, 0, [5, 6, 7, 8], [True, False, True, False], None)
    run = CanvasPass(0, 0, [5, 9, 7, 1], [True, True, False, False], None)
    assert cell_states(run, reference) == "1" + DIFFERS + DIFFERS + "0"
    assert cell_states(reference, None) == "1010"


def test_after_b1_stopped_a_pass_is_compared_with_its_final_canvas():
    reference = [CanvasPass(0, s, [s], [True], None) for s in range(3)] + [CanvasPass(1, 0, [9], [True], None)]
    assert matched_reference(reference, 0, 7) == 2
    assert matched_reference(reference, 1, 0) == 3
    assert matched_reference(reference, 2, 0) is None


def test_other_sizes_send_only_tokens_that_differ_from_b1(study_folders):
    study = batch_study.read(study_folders["folders"]["stock"])
    dataset = canvas_dataset(study, "builtin-0", "batch0", "stock")
    b2, b4 = dataset["sizes"][1], dataset["sizes"][3]
    assert all(p["tok"] == {} for p in b2["passes"])
    assert len(b4["passes"][3]["tok"]) == 5 + 4 % 7
    assert len(dataset["sizes"][0]["passes"][0]["tok"]) == 256
    assert showcase_prompt(study) == "builtin-0"


def test_a_study_without_recorded_canvases_gives_no_grid_and_a_note(tmp_path, writers):
    writers.batch_study(tmp_path, record_path=False)
    study = batch_study.read(tmp_path)
    assert canvas_dataset(study, "builtin-0", "b", "t") is None
    assert any("did not record row 0's canvas" in note for note in study.notes)
