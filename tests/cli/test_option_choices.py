"""The CLI spells out the choices it checks at parse time (so checking them imports nothing heavy);
these must stay equal to the lists the lower layers act on."""

from canvaslab.cli import options
from canvaslab.cli.noise_study import DESIGNS
from canvaslab.cli.order_study import REGIMES, SPLITS
from canvaslab.cli.vocab import TOKENIZER_PRESET_NAMES


def test_cli_choices_match_the_layers_that_use_them():
    from canvaslab.generation.runner import RNG_MODES
    from canvaslab.invariant import MODES
    from canvaslab.models.loading import DTYPES
    from canvaslab.prompts import BUILTIN_PROMPTS
    from canvaslab.studies.batch_size.design import FILLS
    from canvaslab.studies.commit_order.probes import probe, suite
    from canvaslab.studies.unused_tokens import TOKENIZER_PRESETS
    from canvaslab.studies.unused_tokens import plan

    assert options.DTYPES == ("auto", *DTYPES)
    assert options.RNGS == RNG_MODES
    assert options.MODES == MODES
    assert options.FILLS == FILLS
    assert options.BUILTIN_PROMPT_COUNT == len(BUILTIN_PROMPTS)
    assert REGIMES == probe.REGIMES
    assert SPLITS == (*probe.SPLITS, suite.ALL_SPLITS)
    assert DESIGNS == tuple(plan.DESIGNS)
    assert TOKENIZER_PRESET_NAMES == tuple(TOKENIZER_PRESETS)
    from canvaslab.cli import export
    from canvaslab.studies import engine
    from canvaslab.studies.engine import export as store_export

    assert options.EXECUTORS == engine.EXECUTORS
    assert export.FORMATS == store_export.FORMATS


def test_batch_sizes_parse_sorted_with_the_reference():
    assert options.parse_batch_sizes("4,2,2") == [1, 2, 4]
    assert options.parse_batch_sizes("2") == [1, 2]
