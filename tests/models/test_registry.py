"""Models as packages: canvaslab carries no weights, and finds trained models through the entry-point group
``canvaslab.models`` (``canvaslab.models.registry``). ``mini`` and ``mini-ar`` are the distributions under
``models/``; any other distribution registers a model the same way.

The tests about ``mini`` need both packages installed (the README's test command installs them): without them
they fail with the line that says how to install them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import torch

from canvaslab.cli.main import main
from canvaslab.errors import LINE_LIMIT, CanvaslabError
from canvaslab.models import PRESETS, load_model
from canvaslab.models import registry
from canvaslab.models.mini import mini_tokenizer_folder
from canvaslab.models.weights import folder_fingerprint

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
CHECKPOINT_FILES = ("config.json", "generation_config.json", "model.safetensors.index.json",
                    *(f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)), *TOKENIZER_FILES)
MAX_PACKAGE_FILE = 2 * 2**20


def _one_line_exit_2(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


# ---- the two packages of this repository --------------------------------------------------------------

@pytest.mark.parametrize(("name", "distribution", "kind", "baseline"),
                         [("mini", "canvaslab-mini", "diffusion", "mini-ar"),
                          ("mini-ar", "canvaslab-mini-ar", "causal", None)])
def test_the_repository_models_are_found_through_their_entry_points(name, distribution, kind, baseline):
    package = registry.model_package(name)
    version = tomllib.loads((ROOT / registry.KNOWN_MODELS[name] / "pyproject.toml").read_text())["project"]["version"]
    assert registry.installed_models()[name] == f"{distribution} {version}"  # the repository's, installed
    assert (package.kind, package.baseline, package.distribution) == (kind, baseline, f"{distribution} {version}")
    assert sorted(path.name for path in package.folder.iterdir() if path.is_file()) == sorted(CHECKPOINT_FILES)
    assert registry.model_folder(name) == package.folder and registry.baseline_of(name) == baseline
    source = ROOT / registry.KNOWN_MODELS[name] / "src" / distribution.replace("-", "_") / "checkpoint"
    assert folder_fingerprint(package.folder) == folder_fingerprint(source), "installed from an older checkout"


@pytest.mark.parametrize("name", ["mini", "mini-ar"])
def test_the_packaged_tokenizer_is_canvaslab_s_own(name):
    """``mini train`` and the noise study use canvaslab's copy of the tokenizer: the trained models' must not drift."""
    for file in TOKENIZER_FILES:
        assert (registry.model_folder(name) / file).read_bytes() == (mini_tokenizer_folder() / file).read_bytes(), file


def test_canvaslab_carries_no_weights():
    """``pip install canvaslab`` installs what is under src/canvaslab: no weights, no file over 2 MB."""
    files = [path for path in (ROOT / "src" / "canvaslab").rglob("*")
             if path.is_file() and "__pycache__" not in path.parts]
    assert files
    heavy = [str(path.relative_to(ROOT)) for path in files
             if path.suffix in (".safetensors", ".bin", ".pt", ".gguf") or path.stat().st_size > MAX_PACKAGE_FILE]
    assert heavy == []
    assert sorted(path.name for path in mini_tokenizer_folder().iterdir()) == sorted(TOKENIZER_FILES)


def test_the_cli_spells_out_the_preset_names():
    from canvaslab.cli import options

    assert options.PRESET_NAMES == tuple(PRESETS)


# ---- a third party's model, registered the same way ------------------------------------------------------

def fake_distribution(root: Path, monkeypatch, *, distribution: str, entries: dict[str, str], module: str,
                      source: str) -> None:
    """An installed distribution as importlib.metadata sees one: a module and a dist-info with entry points."""
    (root / module).mkdir(parents=True)
    (root / module / "__init__.py").write_text(textwrap.dedent(source))
    info = root / f"{distribution.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[canvaslab.models]\n" + "".join(f"{name} = {value}\n" for name, value in entries.items()))
    monkeypatch.syspath_prepend(str(root))


def _preset_source(folder, kind="diffusion", extra="") -> str:
    return f"""
        def preset():
            return {{"folder": {str(folder)!r}, "kind": {kind!r}, "description": "a test model"{extra}}}
        """


def test_a_third_party_model_is_a_model_name(tmp_path, monkeypatch, tiny, capsys):
    checkpoint = tmp_path / "checkpoint"
    tiny.model.save_pretrained(checkpoint)
    tiny.tokenizer.save_pretrained(checkpoint)
    fake_distribution(tmp_path / "site", monkeypatch, distribution="acme-tiny",
                      entries={"acme-tiny": "acme_tiny:preset"}, module="acme_tiny", source=_preset_source(checkpoint))
    assert registry.installed_models()["acme-tiny"] == "acme-tiny 0.1"
    package = registry.model_package("acme-tiny")
    assert (package.folder, package.kind, package.baseline) == (checkpoint, "diffusion", None)
    loaded = load_model("acme-tiny", dtype="float32")
    assert loaded.source["name"] == "acme-tiny" and loaded.source["path"] == str(checkpoint)
    for name, parameter in tiny.model.state_dict().items():
        assert torch.equal(parameter, loaded.model.state_dict()[name].to(parameter.dtype)), name
    capsys.readouterr()
    main(["generate", "--model", "acme-tiny", "--prompt", "the man said", "--steps", "2", "--max-new-tokens", "8"])
    assert "stop:" in capsys.readouterr().out


# ---- a model that is not installed ---------------------------------------------------------------------

def _hide(monkeypatch, *names: str) -> None:
    """As if the distributions registering ``names`` were not installed."""
    entry_points = metadata.entry_points

    def without(**selection):
        found = entry_points(**selection)
        return metadata.EntryPoints(entry_point for entry_point in found if entry_point.name not in names)

    monkeypatch.setattr(metadata, "entry_points", without)


def test_a_known_model_not_installed_says_in_one_line_how_to_install_it(monkeypatch, capsys, tmp_path):
    _hide(monkeypatch, "mini", "mini-ar")
    with pytest.raises(CanvaslabError) as error:
        registry.model_folder("mini")
    message = str(error.value)
    assert message == ("model 'mini' is not installed: install it with `pip install ./models/canvaslab-mini` "
                       "from a clone of the canvaslab repository")
    assert "mini" not in registry.installed_models()
    err = _one_line_exit_2(capsys, ["generate", "--model", "mini", "--prompt", "hi"])
    assert message in err
    assert message in _one_line_exit_2(capsys, ["batch-study", "--model", "mini", "--out", str(tmp_path / "b")])
    assert not (tmp_path / "b").exists()
    from canvaslab.studies.commit_order.baseline import check_baseline_path

    monkeypatch.chdir(tmp_path)  # no folder named mini here
    with pytest.raises(CanvaslabError, match="model 'mini' is not installed"):
        check_baseline_path("mini")


def test_the_sibling_not_installed_names_the_sibling(monkeypatch, capsys, tmp_path):
    _hide(monkeypatch, "mini-ar")
    from canvaslab.studies.commit_order.baseline import check_baseline_path

    monkeypatch.chdir(tmp_path)
    expected = r"model 'mini-ar' is not installed: .*pip install \./models/canvaslab-mini-ar"
    with pytest.raises(CanvaslabError, match=expected):
        check_baseline_path("mini")
    passages = tmp_path / "passages.txt"
    passages.write_text("It was a truth universally acknowledged.\n")
    err = _one_line_exit_2(capsys, ["mini", "distill", "--passages", str(passages), "--out", str(tmp_path / "a.json")])
    assert "model 'mini-ar' is not installed" in err and "pip install ./models/canvaslab-mini-ar" in err


def test_a_model_not_installed_is_refused_before_torch_loads():
    """The check runs while options are parsed, from the entry points alone, in a process of its own."""
    code = textwrap.dedent("""
        import sys
        from importlib import metadata
        found = metadata.entry_points
        metadata.entry_points = lambda **s: metadata.EntryPoints(e for e in found(**s) if e.name != "mini")
        from canvaslab.cli.main import main
        try:
            main(["generate", "--model", "mini", "--prompt", "hi"])
        except SystemExit as e:
            print(e.code, "torch" in sys.modules, "transformers" in sys.modules)
        """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "False", "False"], done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "pip install ./models/canvaslab-mini" in done.stderr


# ---- broken packages -----------------------------------------------------------------------------------

BROKEN = {
    "raises": ("raise RuntimeError('weights not unpacked')\n", "raised RuntimeError (weights not unpacked)"),
    "shape": ("def preset():\n    return ['not', 'a', 'dict']\n", "returned list, not a dict"),
    "missing": (_preset_source("/no/such/folder"), "its folder /no/such/folder does not exist"),
    "keys": (_preset_source("/no/such/folder", extra=', "baseine": "x"'), "has unknown keys baseine"),
    "kind": (_preset_source("/no/such/folder", kind="encoder"), "its kind 'encoder' is not one of"),
    "exits": ("import sys\ndef preset():\n    sys.exit(0)\n", "called sys.exit(0)"),
    "base": ("def preset():\n    raise BaseException('gone')\n", "raised BaseException (gone)"),
    "huge": ("def preset():\n    raise RuntimeError('x' * 10_000_000 + '\\n' * 5)\n", "raised RuntimeError (xxx"),
    "long": (_preset_source("/" + "a" * 300), "its folder is unusable: the name 'aaa"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_package_is_one_line_naming_its_distribution(case, tmp_path, monkeypatch, capsys):
    source, problem = BROKEN[case]
    module = f"broken_{case}_model"
    fake_distribution(tmp_path, monkeypatch, distribution=f"broken-{case}",
                      entries={f"broken-{case}": f"{module}:preset"}, module=module, source=source)
    with pytest.raises(CanvaslabError) as error:
        registry.model_package(f"broken-{case}")
    message = str(error.value)
    assert message.startswith(f"model 'broken-{case}' from broken-{case} 0.1 is broken: ") and problem in message
    assert message.endswith(f"reinstall or uninstall broken-{case}") and len(message.splitlines()) == 1
    assert len(message) <= LINE_LIMIT
    assert registry.installed_models()[f"broken-{case}"] == f"broken-{case} 0.1"  # listed without loading
    assert message in _one_line_exit_2(capsys, ["generate", "--model", f"broken-{case}", "--prompt", "hi"])


ENDINGS = {"exit": ("sys.exit(0)", "called sys.exit(0)"), "message": ("sys.exit('done')", "called sys.exit('done')"),
           "generator": ("raise GeneratorExit", "raised GeneratorExit")}


@pytest.mark.parametrize("command", [["batch-study"], ["serve"], ["generate", "--prompt", "hi"]])
@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_an_entry_point_that_ends_the_process_cannot_end_a_command_as_a_success(tmp_path, monkeypatch, capsys,
                                                                                 command, ending):
    code, said = ENDINGS[ending]
    module = f"quitter_{ending}_{command[0].replace('-', '_')}"  # a module of its own: imported modules are cached
    fake_distribution(tmp_path, monkeypatch, distribution="quitter", entries={"quitter": f"{module}:preset"},
                      module=module, source=f"import sys\ndef preset():\n    {code}\n")
    err = _one_line_exit_2(capsys, [*command, "--model", "quitter"])
    assert err.startswith(f"error: model 'quitter' from quitter 0.1 is broken: its entry point {module}:preset {said}")


def test_ctrl_c_in_an_entry_point_stays_the_user_s(tmp_path, monkeypatch):
    fake_distribution(tmp_path, monkeypatch, distribution="slow", entries={"slow": "slow_model:preset"},
                      module="slow_model", source="def preset():\n    raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        registry.model_package("slow")


def test_a_causal_model_is_not_a_model_to_study(capsys):
    err = _one_line_exit_2(capsys, ["generate", "--model", "mini-ar", "--prompt", "hi"])
    assert "model 'mini-ar' is a causal LM, not a DiffusionGemma" in err


def test_two_distributions_registering_one_name_are_refused(tmp_path, monkeypatch):
    for letter in "ab":
        fake_distribution(tmp_path / letter, monkeypatch, distribution=f"twin-{letter}",
                          entries={"twin": f"twin_{letter}:preset"}, module=f"twin_{letter}",
                          source=_preset_source(tmp_path))
    with pytest.raises(CanvaslabError, match=r"registered by more than one distribution \(twin-a 0.1, twin-b 0.1\)"):
        registry.model_package("twin")
