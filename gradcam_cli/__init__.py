"""gradcam: explain image classifiers with class activation maps.

The package import stays light (no torch) so that `gradcam --help` starts fast;
the Python API imports the heavy modules on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradcam_cli.version import __version__

# name → the module that holds it; imported on first use (PEP 562), so `import gradcam_cli` imports no torch
_LAZY = {
    "cam": "gradcam_cli.api",
    "explain": "gradcam_cli.api",
    "load_model": "gradcam_cli.api",
    "Explanation": "gradcam_cli.api",
    "ClassMap": "gradcam_cli.api",
    "ReadyModel": "gradcam_cli.api",
    "GradcamError": "gradcam_cli.errors",
    "log_cams": "gradcam_cli.integrations.tensorboard",
}
__all__ = ["__version__", "cam", "explain", "load_model", "Explanation", "ClassMap", "ReadyModel", "GradcamError", "log_cams"]

if TYPE_CHECKING:  # pragma: no cover
    from gradcam_cli.api import ClassMap, Explanation, ReadyModel, cam, explain, load_model
    from gradcam_cli.errors import GradcamError
    from gradcam_cli.integrations.tensorboard import log_cams


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'gradcam_cli' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
