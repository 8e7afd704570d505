"""The CAM method registry: one small module per method, one name each.

Importing this package does not import torch, so the CLI can list and check
method names before anything heavy loads. The registry itself is in `base`;
importing the method modules here fills it.
"""
from __future__ import annotations

from .base import METHODS, CamFunction, CamMethod, MethodKind, get_method, method_names, register_method

from . import gradcam as _gradcam  # noqa: F401  (registers itself)
from . import hirescam as _hirescam  # noqa: F401
from . import gradcam_elementwise as _gradcam_elementwise  # noqa: F401
from . import gradcam_plusplus as _gradcam_plusplus  # noqa: F401
from . import xgradcam as _xgradcam  # noqa: F401
from . import layercam as _layercam  # noqa: F401
from . import eigengradcam as _eigengradcam  # noqa: F401
from . import eigencam as _eigencam  # noqa: F401
from . import scorecam as _scorecam  # noqa: F401
from . import ablationcam as _ablationcam  # noqa: F401
from . import guided_gradcam as _guided_gradcam  # noqa: F401
from . import fullgrad as _fullgrad  # noqa: F401

__all__ = ["METHODS", "CamFunction", "CamMethod", "MethodKind", "get_method", "method_names", "register_method"]
