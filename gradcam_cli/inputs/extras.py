"""The optional libraries of 3-D volumes (nibabel, pydicom), imported only when a volume is read or written.

An image run never needs them, so they live in the `volumes` extra; a missing
one is one line that says how to install it, not an ImportError's traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from gradcam_cli.errors import InputError

VOLUMES_EXTRA = "pip install 'gradcam-cli[volumes]'"


def volume_library(module: str, purpose: str) -> ModuleType:
    """`module` imported, or an InputError naming `purpose` (e.g. "reading DICOM series") and the extra to install: the
    volume's one line, while the run's images go on."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        package = module.split(".", 1)[0]
        raise InputError(f"{purpose} needs {package}, which is not installed ({error})", hint=VOLUMES_EXTRA) from error
