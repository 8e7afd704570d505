"""A headless Chromium for the report page's tests: Debian's /usr/bin/chromium driven by the Python playwright package.

Nothing is downloaded (no `playwright install`): the tests skip when playwright or
the browser is missing, except in CI (CI=true, or GRADCAM_REQUIRE_BROWSER=1 as .ci/run sets), which
installs both and fails instead.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("GRADCAM_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true" or os.environ.get("GRADCAM_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (in CI, which installs playwright and chromium, this is a failure, not a skip)")
    pytest.skip(reason)


def chromium_path() -> str:
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        _unavailable(f"no browser at {CHROMIUM} (apt-get install chromium)")
    return CHROMIUM


def launched() -> Iterator[Any]:
    """Yield a launched Chromium, closed afterwards; skips (or fails, in CI) when there is none. A fixture's body:

    @pytest.fixture(scope="module")
    def browser():
        yield from launched()
    """
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[test]')")
    executable = chromium_path()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()
