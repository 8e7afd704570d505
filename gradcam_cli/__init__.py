"""gradcam: explain image classifiers with class activation maps.

The package import stays light (no torch) so that `gradcam --help` starts fast;
the Python API imports the heavy modules on first use.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["__version__", "cam"]

if TYPE_CHECKING:  # pragma: no cover
    from gradcam_cli.api import cam


def __getattr__(name: str) -> Any:
    if name == "cam":
        from gradcam_cli.api import cam

        return cam
    raise AttributeError(f"module 'gradcam_cli' has no attribute {name!r}")
