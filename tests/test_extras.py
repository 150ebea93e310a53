"""The lean install: the base commands run without any extra's package, and a command that needs a missing
extra names it in one line (``canvaslab.extras``).

"Not installed" is played in a fresh interpreter by ``sys.modules[name] = None`` for every extra's package: an
import of one then fails as it would without it, and ``importlib.util.find_spec`` answers None, as transformers'
own availability checks expect.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from canvaslab.cli.main import app
from canvaslab.errors import CanvaslabError
from canvaslab.extras import EXTRAS, MissingExtra, install_line, missing_extra, require

ROOT = Path(__file__).resolve().parents[1]
EXTRA_MODULES = sorted({module for modules in EXTRAS.values() for module in modules} | {"starlette"})

BLOCK = f"""
import sys
for name in {EXTRA_MODULES!r}:
    sys.modules[name] = None
"""

# Each command with its missing extra, run in one interpreter: argv -> (exit code, output).
REFUSALS = textwrap.dedent("""
    import json
    from typer.testing import CliRunner
    from canvaslab.cli.main import app

    results = {}
    for argv in ARGVS:
        result = CliRunner().invoke(app, argv, terminal_width=1000)
        results[" ".join(argv)] = [result.exit_code, result.output]
    print(json.dumps(results))
""")


def run_without_extras(code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK + code], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_the_base_modules_import_no_extra():
    done = run_without_extras(textwrap.dedent("""
        import canvaslab, canvaslab.cli.main, canvaslab.api.registry, canvaslab.api.plans
        from canvaslab.cli.main import main
        main(["--help"])
    """))
    assert done.returncode == 0, done.stderr
    assert "batch-study" in done.stdout


def test_each_command_needing_a_missing_extra_names_it_in_one_line(tmp_path):
    traces = tmp_path / "t.jsonl"
    traces.write_text("")
    argvs = {("serve", "--model", "tiny"): "serve",
             ("report", str(tmp_path)): "report",
             ("export", str(tmp_path)): "analysis",
             ("order-metrics", str(traces), "--out", str(tmp_path / "m")): "analysis",
             ("order-study", "--out", str(tmp_path / "o")): "analysis",
             ("noise-study", "plan", "--out", str(tmp_path / "n")): "analysis"}
    done = run_without_extras(f"ARGVS = {[list(argv) for argv in argvs]!r}\n" + REFUSALS)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    for argv, extra in argvs.items():
        code, output = results[" ".join(argv)]
        assert code == 2, (argv, output)
        assert output.count("\n") == 1 and output.startswith("error: "), (argv, output)
        assert output.rstrip().endswith(install_line(extra)), (argv, output)


@pytest.mark.slow
def test_generate_and_the_batch_study_run_without_any_extra(tmp_path):
    from canvaslab.models.presets import PRESETS

    config = PRESETS["tiny"].build_config()
    config.canvas_length = 16
    model = tmp_path / "config.json"
    model.write_text(config.to_json_string())
    done = run_without_extras(textwrap.dedent(f"""
        from canvaslab.cli.main import main
        main(["generate", "--model", {str(model)!r}, "--prompt", "the river", "--steps", "2", "--max-new-tokens", "16"])
        main(["batch-study", "--model", {str(model)!r}, "--prompts", "1", "--batch-sizes", "1,2", "--steps", "2",
              "--repeat-control", "same-process", "--out", {str(tmp_path / "study")!r}])
    """), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "study" / "batch_study.json").is_file()
    assert "prompts: 1 ran" in done.stdout


def test_an_extra_met_later_is_named_by_the_cli(monkeypatch, tmp_path):
    import canvaslab.api

    def missing(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'pyarrow'", name="pyarrow")

    monkeypatch.setattr(canvaslab.api, "export", missing)
    result = CliRunner().invoke(app, ["export", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output == ("error: pyarrow is not installed; it comes with the analysis extra: "
                             "pip install 'canvaslab[analysis]'\n")


def test_another_import_error_keeps_its_traceback():
    assert missing_extra(ModuleNotFoundError("No module named 'nothing_of_ours'", name="nothing_of_ours")) is None
    assert isinstance(missing_extra(ModuleNotFoundError("x", name="matplotlib.pyplot")), MissingExtra)


def test_require_passes_an_installed_extra_and_refuses_a_missing_one(monkeypatch):
    require("analysis", "the test")  # installed in the test environment
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    with pytest.raises(CanvaslabError, match=r"^canvaslab serve needs the serve extra \(uvicorn not installed\): "
                                             r"pip install 'canvaslab\[serve\]'$"):
        require("serve", "canvaslab serve")


def test_every_extra_named_is_one_pyproject_installs():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(extras)
    assert extras["all"] == [f"canvaslab[{','.join(EXTRAS)}]"]
    base = " ".join(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    for package in ("scipy", "scikit-learn", "matplotlib", "pyarrow", "pandas", "fastapi", "uvicorn", "pyseccomp"):
        assert package not in base


def test_packages_are_named_as_pip_knows_them(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(CanvaslabError, match=r"\(scikit-learn not installed\)"):
        require("analysis", "the test")
    assert str(missing_extra(ModuleNotFoundError("x", name="prometheus_client"))).startswith(
        "prometheus-client is not installed")
