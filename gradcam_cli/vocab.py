"""The words of the tool: the fixed sets of values an option takes, without torch.

The command line checks and lists these before anything heavy is imported
(`gradcam --help` stays fast); the engine uses the same enums, so a value
exists in one place. Each enum's values are what the user types.
"""

from __future__ import annotations

from enum import Enum


class Method(str, Enum):
    """The CAM methods, in the order `gradcam methods` lists them (the registry holds one per value)."""

    gradcam = "gradcam"
    hirescam = "hirescam"
    gradcam_elementwise = "gradcam-elementwise"
    gradcam_plusplus = "gradcam++"
    xgradcam = "xgradcam"
    layercam = "layercam"
    eigengradcam = "eigengradcam"
    eigencam = "eigencam"
    scorecam = "scorecam"
    ablationcam = "ablationcam"
    guided_gradcam = "guided-gradcam"
    fullgrad = "fullgrad"


class Norm(str, Enum):
    minmax = "minmax"  # each map scaled to [0, 1]
    none = "none"  # raw values, for users who need them (written by --save-raw)


class Combine(str, Enum):
    """How the maps of several target layers are merged."""

    mean = "mean"
    max = "max"
    product = "product"


class Colormap(str, Enum):
    """The heat-map colours (OpenCV's colour maps of these names)."""

    jet = "jet"
    turbo = "turbo"
    viridis = "viridis"
    inferno = "inferno"
    magma = "magma"
    plasma = "plasma"
    hot = "hot"
    gray = "gray"


class Style(str, Enum):
    """How the map is drawn: over the photo, beside it, or as iso-lines over the untouched photo."""

    overlay = "overlay"
    side_by_side = "side-by-side"
    contour = "contour"


class Precision(str, Enum):
    """The dtype of the model's passes; the CAM maths always run in fp32."""

    auto = "auto"  # bf16 autocast on CUDA, fp32 elsewhere
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class LayoutKind(str, Enum):
    """How a layer's output is laid out: channels first, channels last, or a sequence of tokens."""

    NCHW = "NCHW"
    NHWC = "NHWC"
    NLC = "NLC"


def values(enum: type[Enum]) -> list[str]:
    """What the user may type for an enum option, in order."""
    return [str(member.value) for member in enum]


class Interpolation(str, Enum):
    """How an image is resized to the model's input (Pillow's filters, by timm's names)."""

    bilinear = "bilinear"
    bicubic = "bicubic"
    nearest = "nearest"
    lanczos = "lanczos"
    box = "box"
    hamming = "hamming"


class Metric(str, Enum):
    """What `gradcam eval` measures of each method's maps, in the order its table shows them."""

    deletion = "deletion"
    insertion = "insertion"
    drop = "drop"
    increase = "increase"
    road = "road"
    pointing = "pointing"
    sanity = "sanity"


class Substrate(str, Enum):
    """What deletion writes over the removed pixels and insertion starts from."""

    zero = "zero"  # zeros in the model's normalised input space (torchcam's and RISE's default)
    blur = "blur"  # the image blurred (RISE's insertion substrate)
    mean = "mean"  # each channel's mean over the image


class TargetKind(str, Enum):
    """What one map explains, and so how a score reads as a probability (records say it as `target`)."""

    single_class = "class"  # one class of a softmax
    binary = "binary"  # a single logit: its sigmoid
    multilabel = "multilabel"  # independent labels: each logit's sigmoid
    regression = "regression"  # a raw output value: no probability
