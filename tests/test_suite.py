"""The suite's own honesty: a missing reference fails CI instead of skipping parity, and the fast loop starts no process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, in_ci, require


def test_a_missing_test_extra_skips_here_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="pip install"):
        require("gradcam_no_such_module")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="missing under CI=true"):
        require("gradcam_no_such_module")
    assert require("json").dumps(1) == "1"
    newer = (sys.version_info[0] + 1, 0)  # a Python the test extra does not reach yet: skipped even in CI, with the reason
    with pytest.raises(pytest.skip.Exception, match=rf"Python {newer[0]}\.0 and newer only"):
        require("json", python=newer)


def test_no_test_skips_on_a_missing_import_by_itself() -> None:
    """`pytest.importorskip` skips under CI=true too, so a missing reference would leave parity green: `require` instead."""
    files = [p for p in sorted((ROOT / "tests").glob("*.py")) if p.name not in ("conftest.py", Path(__file__).name)]
    users = [p.name for p in files if "importorskip(" in p.read_text("utf-8")]
    assert not users, f"use conftest.require, which fails under CI=true: {users}"


def test_a_process_started_by_a_fast_test_is_counted(process_starts: list[str]) -> None:
    """What the autouse fixture counts, seen from inside a test that is not marked slow (it then errors at teardown)."""
    assert process_starts == []
    done = subprocess.run([sys.executable, "-c", "pass"], check=False)
    assert done.returncode == 0, "the process still runs: it is counted, not blocked"
    assert len(process_starts) == 1 and sys.executable in process_starts[0]
    process_starts.clear()  # this test's one process is the point of it: let teardown pass


@pytest.mark.slow
def test_a_slow_test_may_start_processes(process_starts: list[str]) -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert process_starts == []


def pinned_references() -> dict[str, str]:
    """test-constraints.txt: each reference library's pinned version, for this Python."""
    from packaging.requirements import Requirement

    pins = {}
    for line in (ROOT / "test-constraints.txt").read_text(encoding="utf-8").splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate():
                (specifier,) = requirement.specifier
                assert specifier.operator == "==", f"a constraint pins one version: {text}"
                pins[requirement.name] = specifier.version
    return pins


def test_the_references_are_the_pinned_versions() -> None:
    """Parity is measured against the versions test-constraints.txt pins (CI installs with it), not whatever is newest."""
    from importlib.metadata import PackageNotFoundError, version

    pins = pinned_references()
    assert "grad-cam" in pins
    installed = {}
    for name in pins:
        try:
            installed[name] = version(name)
        except PackageNotFoundError:
            installed[name] = "not installed"
    wrong = {name: f"{installed[name]}, pinned {pinned}" for name, pinned in pins.items() if installed[name] != pinned}
    if wrong and not in_ci():
        pytest.skip(f"other reference versions here ({wrong}): pip install -e '.[test]' -c test-constraints.txt")
    assert not wrong, f"CI must install the pinned references: {wrong}"
