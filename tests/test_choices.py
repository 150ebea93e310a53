"""Choices spelled once (``canvaslab.choices``); where a layer keys data by a choice, its keys are the choice."""

import pytest

from canvaslab import choices
from canvaslab.errors import CanvaslabError


def test_layers_key_their_data_by_the_choices():
    from canvaslab.invariant import MODES
    from canvaslab.models.loading import DTYPES
    from canvaslab.models.presets import PRESETS
    from canvaslab.prompts import BUILTIN_PROMPTS
    from canvaslab.studies.unused_tokens import TOKENIZER_PRESETS, first_pass, graded, plan

    assert MODES == choices.MODES
    assert ("auto", *DTYPES) == choices.DTYPES
    assert tuple(PRESETS) == choices.PRESET_NAMES
    assert len(BUILTIN_PROMPTS) == choices.BUILTIN_PROMPT_COUNT
    assert (*plan.DESIGNS, *first_pass.DESIGNS, *graded.DESIGNS) == choices.NOISE_DESIGNS  # /2's, /3's, /4's
    assert tuple(TOKENIZER_PRESETS) == choices.TOKENIZER_PRESETS


def test_the_cli_and_the_layers_use_the_same_objects():
    from canvaslab.cli import export, noise_study, op_scan, options, order_study
    from canvaslab.scoring.probes import probe
    from canvaslab.studies.engine import executors

    assert options.DTYPES is choices.DTYPES and options.RNGS is choices.RNGS
    assert order_study.REGIMES is choices.REGIMES is probe.REGIMES
    assert noise_study.DESIGNS is choices.NOISE_DESIGNS and export.FORMATS is choices.EXPORT_FORMATS
    assert op_scan.SCAN_MODES is choices.SCAN_MODES and executors.EXECUTORS is choices.EXECUTORS


def test_choices_import_nothing_heavy():
    import subprocess
    import sys

    code = "import sys, canvaslab.choices; print(sorted(m for m in ('torch', 'transformers', 'scipy') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


@pytest.mark.parametrize("value, expected", [("4,2,2", [1, 2, 4]), ((3, 2), [1, 2, 3]), ([1, 8], [1, 8])])
def test_batch_sizes_accept_text_and_sequences(value, expected):
    assert choices.batch_sizes(value) == expected


@pytest.mark.parametrize("value", ["1", (1,), "0,2", (2, 5000), "a,b", (2.5,), (True, 2), 3, None])
def test_bad_batch_sizes_are_one_line(value):
    with pytest.raises(CanvaslabError, match="^--batch-sizes"):
        choices.batch_sizes(value)


def test_numbers_refuse_booleans_and_out_of_range():
    assert choices.whole_number("--seeds", 3, 1) == 3
    for bad in (0, True, 2.0, "3"):
        with pytest.raises(CanvaslabError, match="^--seeds"):
            choices.whole_number("--seeds", bad, 1)
    with pytest.raises(CanvaslabError, match="above 0"):
        choices.positive_number("--margin", float("nan"))


def test_regimes_default_to_the_suites_own():
    assert choices.regimes(None, "mini") == choices.SUITE_REGIMES["mini"]
    assert choices.regimes("math, json") == ("math", "json")
    with pytest.raises(CanvaslabError, match="^--regimes"):
        choices.regimes("poetry")


def test_ray_only_options_need_ray():
    with pytest.raises(CanvaslabError, match="--workers needs --executor ray"):
        choices.engine_options("local", None, 2, 0)
