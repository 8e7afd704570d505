"""The CAM method registry: one small module per method, one name each.

The registry itself is in `base`; importing the method modules here fills it.
Their names are also `vocab.Method`, which the command line checks without
importing this package.
"""

from __future__ import annotations

from gradcam_cli.cams.methods.base import METHODS, CamFunction, CamMethod, MethodKind, get_method, method_names, register_method

from gradcam_cli.cams.methods import gradcam as _gradcam  # noqa: F401  (registers itself)
from gradcam_cli.cams.methods import hirescam as _hirescam  # noqa: F401
from gradcam_cli.cams.methods import gradcam_elementwise as _gradcam_elementwise  # noqa: F401
from gradcam_cli.cams.methods import gradcam_plusplus as _gradcam_plusplus  # noqa: F401
from gradcam_cli.cams.methods import xgradcam as _xgradcam  # noqa: F401
from gradcam_cli.cams.methods import layercam as _layercam  # noqa: F401
from gradcam_cli.cams.methods import eigengradcam as _eigengradcam  # noqa: F401
from gradcam_cli.cams.methods import eigencam as _eigencam  # noqa: F401
from gradcam_cli.cams.methods import scorecam as _scorecam  # noqa: F401
from gradcam_cli.cams.methods import ablationcam as _ablationcam  # noqa: F401
from gradcam_cli.cams.methods import guided_gradcam as _guided_gradcam  # noqa: F401
from gradcam_cli.cams.methods import fullgrad as _fullgrad  # noqa: F401

__all__ = ["METHODS", "CamFunction", "CamMethod", "MethodKind", "get_method", "method_names", "register_method"]
