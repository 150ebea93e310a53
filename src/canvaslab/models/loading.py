"""Turn a ``--model`` argument into a ready model + tokenizer.

``--model`` accepts (a) a preset name (random weights), (b) the name of an installed model package (``mini``:
trained weights, found through ``canvaslab.models.registry`` and loaded by transformers' own
``from_pretrained`` like any local checkpoint), (c) a local checkpoint directory (local files only, never the
hub) or (d) a ``config.json`` path, which builds random weights from that config with ``--seed``.
Every problem a user can cause ends in a one-line ``CanvaslabError``.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch
from transformers import AutoTokenizer, DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion, PreTrainedTokenizerBase
from transformers.generation.configuration_utils import ALL_STATIC_CACHE_IMPLEMENTATIONS

from canvaslab import choices
from canvaslab.errors import CanvaslabError, one_line
from canvaslab.io import DEPTH_LIMIT, JSON_LIMIT, MiB, nesting_depth, read_bytes, read_json
from canvaslab.models.presets import PRESETS, REAL_GENERATION_DEFAULTS, Preset, first_layer_types
from canvaslab.models.random_init import build_random_model
from canvaslab.models.registry import find_diffusion_model, installed_models
from canvaslab.models.tokenizer import build_synthetic_tokenizer
from canvaslab.models.weights import folder_fingerprint

DTYPES = {name: getattr(torch, name) for name in choices.DTYPES if name != "auto"}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


@dataclass
class LoadedModel:
    """A model ready to generate, its tokenizer, and where both came from (for the fingerprint)."""

    model: DiffusionGemmaForBlockDiffusion
    tokenizer: PreTrainedTokenizerBase
    source: dict[str, Any]
    generation_defaults: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def vocab_size(self) -> int:
        return self.model.config.text_config.vocab_size


def compiles_generate(model) -> bool:
    """Whether transformers' generate takes its compiled path for this model (a static cache with compile
    not disabled). There the sampler's ``accept_canvas`` is a compiled copy cached on the model: wrappers
    around it are bypassed, and compiled kernels replace the aten ops a mode overrides."""
    config = model.generation_config
    static = config.cache_implementation in ALL_STATIC_CACHE_IMPLEMENTATIONS
    return static and not getattr(config, "disable_compile", False)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise CanvaslabError(f"--device {device} asked for CUDA, but torch sees no CUDA device on this machine")
    try:
        return torch.device(device)
    except RuntimeError as error:
        raise CanvaslabError(f"--device {device!r} is not a device torch knows ({error})") from None


def resolve_dtype(dtype: str, default: torch.dtype) -> torch.dtype:
    if dtype == "auto":
        return default
    if dtype not in DTYPES:
        raise CanvaslabError(f"--dtype {dtype!r} is not one of: auto, {', '.join(DTYPES)}")
    return DTYPES[dtype]


CONFIG_LIMIT = 16 * MiB  # a DiffusionGemma config.json is a few kB
# The text model's sizes: each must be a whole number of at least 1 (transformers checks their types, not this).
CONFIG_SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "max_position_embeddings", "sliding_window", "num_experts",
                "top_k_experts", "moe_intermediate_size")


def _read_config(path: Path) -> DiffusionGemmaConfig:
    """The DiffusionGemma config at ``path``, read with the bounds of any received file (size, nesting) and its
    sizes checked: every way it can be unusable is one line, before a tensor is built from it."""
    try:
        raw = read_json(path, max_bytes=CONFIG_LIMIT, follow_links=True)
    except OSError as error:
        raise CanvaslabError(f"cannot read model config {path}: {error.strerror or error}") from None
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if model_type != DiffusionGemmaConfig.model_type:
        raise CanvaslabError(
            f"{path} has model_type {model_type!r}, not {DiffusionGemmaConfig.model_type!r}: "
            "canvaslab studies DiffusionGemma models only"
        )
    _check_sizes(raw.get("text_config"), path)
    try:
        return DiffusionGemmaConfig.from_dict(raw)
    # transformers checks every field's type and range (huggingface_hub's strict dataclasses: their own error
    # class, TypeError or ValueError); any of them means the file is not a usable config
    except Exception as error:
        raise CanvaslabError(f"{path}: not a valid DiffusionGemma config: {one_line(error, 300)}") from None


def _check_sizes(text_config: Any, path: Path) -> None:
    """The text model's sizes, and each layer's own (``per_layer_config``), as the file gives them."""
    if not isinstance(text_config, dict):
        return  # transformers' defaults, or its own refusal
    layers = text_config.get("per_layer_config")
    scopes = {"text_config": text_config, **({f"text_config.per_layer_config.{key}": value
                                                for key, value in layers.items() if isinstance(value, dict)}
                                               if isinstance(layers, dict) else {})}
    for scope, fields in scopes.items():
        for name in CONFIG_SIZES:
            value = fields.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise CanvaslabError(f"{path}: {scope}.{name} is {value!r}; it must be a whole number of at "
                                     "least 1")


def _random_model(config: DiffusionGemmaConfig, dtype: torch.dtype, device: torch.device, seed: int,
                  where: str = "the model"):
    try:
        model = build_random_model(config, dtype, device, seed)
    except (MemoryError, RuntimeError) as error:  # the CPU allocator's refusal is a plain RuntimeError
        if not isinstance(error, (MemoryError, torch.OutOfMemoryError)) and "allocate" not in str(error):
            raise
        raise CanvaslabError(f"{where}: its weights do not fit in {device}'s memory ({one_line(error, 200)})") \
            from None
    return model


def _check_tokenizer(tokenizer: PreTrainedTokenizerBase, vocab_size: int, where: str) -> None:
    if len(tokenizer) > vocab_size:
        raise CanvaslabError(
            f"tokenizer from {where} has {len(tokenizer)} ids but the model's vocabulary has {vocab_size}: "
            "they do not belong together"
        )


def _check_layers(layers: int | None, available: int, where: str) -> None:
    """``--layers`` keeps the first N layers: more than the model has is a mistake, caught before any weights."""
    if layers is not None and layers > available:
        raise CanvaslabError(f"--layers {layers}: {where} has {available} layers; give 1 to {available}")


def _keep_layers(config: DiffusionGemmaConfig, layers: int | None, where: str) -> None:
    text = config.text_config
    _check_layers(layers, text.num_hidden_layers, where)
    if layers is not None:
        text.num_hidden_layers = layers
        text.layer_types = first_layer_types(text.layer_types, layers)


def _load_preset(preset: Preset, dtype: str, device: torch.device, layers: int | None, seed: int) -> LoadedModel:
    _check_layers(layers, preset.text_config["num_hidden_layers"], f"preset {preset.name!r}")
    config = preset.build_config(layers)
    torch_dtype = resolve_dtype(dtype, preset.default_dtype)
    model = _random_model(config, torch_dtype, device, seed, f"preset {preset.name!r}")
    tokenizer = build_synthetic_tokenizer(config.text_config.vocab_size)
    source = {"kind": "preset", "name": preset.name, "layers": config.text_config.num_hidden_layers, "seed": seed}
    return LoadedModel(model, tokenizer, source, dict(preset.generation))


def _load_config_file(path: Path, dtype: str, device: torch.device, layers: int | None, seed: int) -> LoadedModel:
    config = _read_config(path)
    _keep_layers(config, layers, str(path))
    model = _random_model(config, resolve_dtype(dtype, torch.bfloat16), device, seed, str(path))
    tokenizer = build_synthetic_tokenizer(config.text_config.vocab_size)
    source = {"kind": "config", "path": str(path), "layers": config.text_config.num_hidden_layers, "seed": seed}
    return LoadedModel(model, tokenizer, source, dict(REAL_GENERATION_DEFAULTS))


def check_checkpoint_json(path: Path) -> None:
    """A checkpoint or tokenizer folder's other JSON files (generation config, tokenizer, weight index), which
    transformers parses without bounds: one nested deeper than any canvaslab reads would end its parser in a
    ``RecursionError``. Refused in one line first."""
    for file in sorted(path.glob("*.json")):
        if file.name != "config.json" and file.is_file():
            data = read_bytes(file, max_bytes=JSON_LIMIT, follow_links=True)
            if nesting_depth(data) > DEPTH_LIMIT:
                raise CanvaslabError(f"{file} nests arrays and objects more than {DEPTH_LIMIT} deep: it was not "
                                     "written by transformers, or is damaged")


def _checkpoint_tokenizer(path: Path, config: DiffusionGemmaConfig) -> PreTrainedTokenizerBase:
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as error:
        raise CanvaslabError(f"no usable tokenizer in {path}: {str(error).splitlines()[0]}") from None
    _check_tokenizer(tokenizer, config.text_config.vocab_size, str(path))
    return tokenizer


def _load_checkpoint(path: Path, dtype: str, device: torch.device, layers: int | None) -> LoadedModel:
    config = _read_config(path / "config.json")
    if not any((path / name).exists() for name in WEIGHT_FILES):
        raise CanvaslabError(
            f"{path} has a config.json but no weights ({', '.join(WEIGHT_FILES)}); "
            f"pass {path / 'config.json'} to build random weights from that config"
        )
    _keep_layers(config, layers, str(path))
    check_checkpoint_json(path)
    tokenizer = _checkpoint_tokenizer(path, config)
    with progress_bars_only_on_a_terminal():
        # straight to the device, shard by shard: no whole-model copy in host memory
        model = DiffusionGemmaForBlockDiffusion.from_pretrained(
            path, config=config, dtype=resolve_dtype(dtype, torch.bfloat16), local_files_only=True,
            device_map=_device_map(device),
        ).to(device).eval()  # a no-op except on meta, which the device map does not take
    source = {"kind": "checkpoint", "path": str(path), "layers": config.text_config.num_hidden_layers,
              "weights": folder_fingerprint(path)}
    return LoadedModel(model, tokenizer, source, checkpoint_generation_defaults(model))


def _device_map(device: torch.device) -> dict[str, str] | None:
    """transformers' placement of every weight on one device (read shard by shard straight there); None on meta,
    which a device map does not take: the weights are read to the host and dropped by ``.to("meta")``."""
    return None if device.type == "meta" else {"": str(device)}


@contextlib.contextmanager
def progress_bars_only_on_a_terminal() -> Iterator[None]:
    """transformers' weight-loading bar helps on a terminal; in a log or pipe it is noise between our lines."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    if not sys.stderr.isatty():
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def checkpoint_generation_defaults(model) -> dict[str, Any]:
    """A checkpoint's own sampler settings (its generation_config.json), under canvaslab's names: studies
    record them and read the budget from them, as they do for a preset's."""
    config = model.generation_config
    settings = {key: getattr(config, key) for key in REAL_GENERATION_DEFAULTS
                if key != "entropy_bound" and getattr(config, key, None) is not None}
    sampler = getattr(config, "sampler_config", None)
    bound = sampler.get("entropy_bound") if isinstance(sampler, dict) else getattr(sampler, "entropy_bound", None)
    if bound is not None:
        settings["entropy_bound"] = float(bound)
    return settings


def load_model(
    spec: str,
    *,
    dtype: str = "auto",
    device: str = "cpu",
    layers: int | None = None,
    seed: int = 0,
) -> LoadedModel:
    """Load a preset, a local checkpoint directory or a ``config.json`` (random weights)."""
    if layers is not None and layers < 1:
        raise CanvaslabError(f"--layers must be at least 1, got {layers}")
    torch_device = resolve_device(device)
    if spec in PRESETS:
        return _load_preset(PRESETS[spec], dtype, torch_device, layers, seed)
    package = find_diffusion_model(spec)
    if package is not None:
        loaded = _load_checkpoint(package.folder, dtype, torch_device, layers)
        loaded.source = {**loaded.source, "kind": "preset", "name": spec}
        return loaded
    path = choices.checked_path("--model", spec).expanduser()
    if not path.exists():
        installed = ", ".join(installed_models()) or "none"
        raise CanvaslabError(f"model {spec!r} is neither a preset ({', '.join(PRESETS)}), an installed model "
                             f"({installed}) nor an existing path")
    if path.is_file():
        return _load_config_file(path, dtype, torch_device, layers, seed)
    if not (path / "config.json").exists():
        raise CanvaslabError(f"{path} is a directory without config.json: not a model checkpoint")
    return _load_checkpoint(path, dtype, torch_device, layers)


def load_tokenizer(spec: str) -> PreTrainedTokenizerBase:
    """The tokenizer ``load_model(spec)`` would give, without building or reading the weights: for checks of a
    study's prompts in a process that runs none of its units (e.g. the driver of Ray workers)."""
    if spec in PRESETS:
        return build_synthetic_tokenizer(PRESETS[spec].build_config(None).text_config.vocab_size)
    package = find_diffusion_model(spec)
    path = package.folder if package is not None else Path(spec).expanduser()
    if path.is_file():
        return build_synthetic_tokenizer(_read_config(path).text_config.vocab_size)
    if not (path / "config.json").exists():
        return load_model(spec).tokenizer  # the loader's own one-line refusal of a path it cannot use
    return _checkpoint_tokenizer(path, _read_config(path / "config.json"))


def load_study_model(spec: dict[str, Any]) -> LoadedModel:
    """Load the model a study's plan names (``canvaslab.api.models.model_record``, ``repeat_control.model_spec``) in a
    worker, refusing weights other than the plan's: a Ray node or a later resume may hold another ``mini``."""
    loaded = load_model(spec["spec"], dtype=spec["dtype"], device=spec["device"], layers=spec["layers"],
                        seed=spec["seed"])
    planned, found = spec.get("weights"), loaded.source.get("weights")
    if planned is not None and found != planned:
        raise CanvaslabError(f"model {spec['spec']!r} here has other weights ({found}) than the study's plan names "
                             f"({planned}): run it with the checkpoint the study started with, or in a new folder")
    return loaded
