"""The README cannot drift from the CLI: every option and command is documented."""
from __future__ import annotations

import re

import pytest
import typer

from conftest import ROOT
from gradcam_cli.cli import app

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _commands() -> dict:
    return typer.main.get_command(app).commands  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", ["explain", "layers", "methods"])
def test_every_command_is_in_the_readme(command: str) -> None:
    assert f"gradcam {command}" in README


@pytest.mark.parametrize("command", ["explain", "layers"])
def test_every_option_is_in_the_readme(command: str) -> None:
    missing = []
    for param in _commands()[command].params:
        for flag in [*param.opts, *param.secondary_opts]:
            if flag.startswith("--") and flag != "--help" and flag not in README:
                missing.append(flag)
    assert not missing, f"options of `gradcam {command}` missing from README.md: {missing}"


def test_readme_test_command_is_what_ci_runs() -> None:
    test_command = re.search(r"## Tests\s+```\s*\n(.+?)\n```", README, re.S)
    assert test_command is not None
    assert test_command.group(1).strip() in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
