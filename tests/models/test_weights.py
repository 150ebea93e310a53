"""The weights' fingerprint: the same name (``mini``, a checkpoint path) with retrained weights behind it is
another model to a study's plan."""

from __future__ import annotations

import pytest
import torch

from canvaslab.errors import CanvaslabError
from canvaslab.models import load_model, load_study_model
from canvaslab.models.weights import SAMPLE_BYTES, SAMPLES_PER_FILE, _sample_offsets, weights_fingerprint


def _save(tiny, path, seed: int):
    """``tiny``'s architecture with weights drawn from ``seed``: a checkpoint 'retrained' at the same path."""
    torch.manual_seed(seed)
    model = type(tiny.model)._from_config(tiny.model.config)
    model.save_pretrained(path)
    tiny.tokenizer.save_pretrained(path)
    return path


def test_random_weights_have_no_fingerprint_and_trained_ones_do(tiny, tmp_path):
    assert weights_fingerprint("tiny") is None  # a preset: its name and seed are the identity
    tiny.model.config.save_pretrained(tmp_path)
    assert weights_fingerprint(str(tmp_path / "config.json")) is None
    assert weights_fingerprint(str(tmp_path / "missing")) is None
    mini = weights_fingerprint("mini")
    assert mini.startswith("sha256-sampled:") and mini == weights_fingerprint("mini")


def test_retrained_weights_at_the_same_path_get_another_fingerprint(tiny, tmp_path):
    first = weights_fingerprint(str(_save(tiny, tmp_path, seed=1)))
    assert weights_fingerprint(str(tmp_path)) == first
    second = weights_fingerprint(str(_save(tiny, tmp_path, seed=2)))
    assert second != first
    assert load_model(str(tmp_path)).source["weights"] == second  # what results' environments record


def test_a_worker_refuses_weights_other_than_the_plans(tiny, tmp_path):
    _save(tiny, tmp_path, seed=1)
    spec = {"spec": str(tmp_path), "dtype": "auto", "device": "cpu", "layers": None, "seed": 0,
            "weights": weights_fingerprint(str(tmp_path))}
    assert load_study_model(spec).source["weights"] == spec["weights"]
    _save(tiny, tmp_path, seed=2)
    with pytest.raises(CanvaslabError, match="other weights"):
        load_study_model(spec)


def test_large_files_are_sampled_evenly_to_their_end():
    size = 100 * SAMPLE_BYTES + 7
    offsets = _sample_offsets(size)
    assert len(offsets) == SAMPLES_PER_FILE and offsets[0] == 0 and offsets[-1] == size - SAMPLE_BYTES
    assert _sample_offsets(3 * SAMPLE_BYTES) == [0, SAMPLE_BYTES, 2 * SAMPLE_BYTES]  # small files: whole
