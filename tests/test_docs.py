"""The README cannot drift from the CLI: every option and command is documented."""

from __future__ import annotations

import re

import pytest
import typer

from conftest import ROOT
from gradcam_cli.cli.app import app

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _commands() -> dict:
    return typer.main.get_command(app).commands  # type: ignore[attr-defined]


COMMANDS = sorted(_commands())  # every command the app has: a new one cannot go undocumented


def test_the_commands_are_the_apps() -> None:
    assert {"explain", "layers", "methods", "report", "compare", "eval"} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_is_in_the_readme(command: str) -> None:
    assert f"gradcam {command}" in README


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_is_in_the_readme(command: str) -> None:
    missing = []
    for param in _commands()[command].params:
        for flag in [*param.opts, *param.secondary_opts]:
            if flag.startswith("--") and flag != "--help" and flag not in README:
                missing.append(flag)
    assert not missing, f"options of `gradcam {command}` missing from README.md: {missing}"


def test_readme_test_commands_are_what_ci_runs() -> None:
    """The Tests section installs the test extras with the pinned references, then runs the suite; CI runs the same."""
    section = re.search(r"## Tests\n(.+?)\n## ", README, re.S)
    assert section is not None
    block = re.search(r"```\s*\n(.+?)\n```", section.group(1), re.S)
    assert block is not None
    lines = [line.strip() for line in block.group(1).splitlines() if line.strip()]
    install, run = "pip install -e '.[test]' -c test-constraints.txt", "python -m pytest -q -n 2 --dist loadfile"
    assert lines[0] == install and lines[-1] == run
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "python -m pip install -q -e '.[test]' -c test-constraints.txt" in ci
    assert any(line == run or line.startswith(f"{run} ") for line in ci), "CI runs the README's test command (it may add options)"


REPO_PATH = re.compile(r"(?<![\w/.-])((?:examples|configs|benchmarks|tests|gradcam_cli|\.ci)/[\w./-]*)")


def _readme_commands() -> list[str]:
    """The code blocks and inline code of the README: everything a reader may copy and run."""
    blocks = re.findall(r"```[a-z]*\n(.+?)```", README, re.S)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"```.+?```", "", README, flags=re.S))
    return blocks + inline


def test_every_repository_path_in_the_readme_exists() -> None:
    paths = {m.rstrip(".,:") for text in _readme_commands() for m in REPO_PATH.findall(text)}
    assert {"examples/photos/cat.jpg", "configs/swin_tiny.yaml"} <= paths  # the scan sees the commands
    missing = sorted(p for p in paths if not any(c in p for c in "*?[") and not (ROOT / p).exists())
    assert not missing, f"README.md names repository paths that do not exist: {missing}"


def test_the_readme_option_table_and_preset_keys_are_the_option_table() -> None:
    """Both are written from gradcam_cli/option_table.py's OPTIONS by tools/readme_options.py: no option exists in one place only."""
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    from readme_options import rendered

    assert rendered(README) == README, "README.md is out of date with the option table: run python tools/readme_options.py"


def test_every_flag_of_explain_comes_from_the_option_table() -> None:
    from gradcam_cli.option_table import OPTIONS

    declared = {flag for param in _commands()["explain"].params for flag in [*param.opts, *param.secondary_opts]}
    table = {part for option in OPTIONS for flag in option.flags for part in flag.split("/")}
    assert declared - {"--help", "inputs"} == table  # inputs: the argument, named by its parameter


def test_the_settings_in_a_record_are_options_of_the_table(run_cli, tmp_path) -> None:
    """A record's `settings` say how to reproduce its map: each key is an option of the table (or the version),
    and every option that changes a map is there."""
    import json

    from conftest import write_image
    from gradcam_cli.option_table import OPTIONS

    image = write_image(tmp_path / "in.png")
    result = run_cli("explain", image, "-m", "test_resnet", "--no-pretrained", "-o", tmp_path / "o", "--json")
    (record,) = [json.loads(line) for line in result.stdout.splitlines()]
    keys = set(record["settings"]) - {"version"}
    names = {option.name for option in OPTIONS} | {"preprocess"}  # preprocess: the crop option, as crop/whole
    assert keys <= names, keys - names
    shaping = {option.name for option in OPTIONS if option.group == "maps"} - {"cam_batch_size"}  # chunking: same map
    assert shaping <= keys, shaping - keys
