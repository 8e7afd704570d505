"""The words of the tool: the fixed sets of values an option takes, without torch.

The command line checks and lists these before anything heavy is imported
(`gradcam --help` stays fast); the engine uses the same enums, so a value
exists in one place. Each enum's values are what the user types.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
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


@dataclass(frozen=True)
class MethodNote:
    """What `gradcam methods` says of a method: what it is good for, and what it costs per image."""

    summary: str
    passes: str


# Written once, here, torch-free: `gradcam methods` prints them without importing the engine, and the registry
# (cams/methods/base.py) gives each registered method its note.
METHOD_NOTES: dict[Method, MethodNote] = {
    Method.gradcam: MethodNote(
        "channel weights = mean gradient; the classic, robust default",
        "1 forward + 1 backward to the layer",
    ),
    Method.hirescam: MethodNote(
        "gradient x activation element-wise, summed over channels; faithful to the score",
        "1 forward + 1 backward to the layer",
    ),
    Method.gradcam_elementwise: MethodNote(
        "ReLU(gradient x activation) element-wise, summed over channels",
        "1 forward + 1 backward to the layer",
    ),
    Method.gradcam_plusplus: MethodNote(
        "alpha-weighted positive gradients; better with several objects of a class",
        "1 forward + 1 backward to the layer",
    ),
    Method.xgradcam: MethodNote(
        "channel weights = activation-weighted mean gradient (sensitivity/conservation axioms)",
        "1 forward + 1 backward to the layer",
    ),
    Method.layercam: MethodNote(
        "ReLU(gradient) x activation element-wise; fine detail, good at shallow layers",
        "1 forward + 1 backward to the layer",
    ),
    Method.eigengradcam: MethodNote(
        "first principal component of gradient x activation; smooth, less noisy maps",
        "1 forward + 1 backward to the layer, 1 reduced SVD per image",
    ),
    Method.eigencam: MethodNote(
        "first principal component of the activations; class-agnostic, no gradients",
        "1 forward without a graph, 1 reduced SVD per image",
    ),
    Method.scorecam: MethodNote(
        "weights = class score of the input masked by each channel; gradient-free, robust to saturation",
        "1 forward + C masked forwards per image (C = the layer's channels)",
    ),
    Method.ablationcam: MethodNote(
        "weights = relative score drop when each channel is zeroed; gradient-free",
        "1 forward + C ablated forwards per image (C = the layer's channels)",
    ),
    Method.guided_gradcam: MethodNote(
        "Grad-CAM x guided backpropagation; pixel-sharp, class-discriminative detail",
        "1 forward + 1 backward to the layer + 1 guided backward to the input",
    ),
    Method.fullgrad: MethodNote(
        "input gradient + bias gradients of every conv/batch-norm layer; whole-network, ignores ⟨layers⟩",
        "1 forward + 1 backward to the input",
    ),
}


class Norm(str, Enum):
    minmax = "minmax"  # each map scaled to [0, 1]
    none = "none"  # raw values, for users who need them (written by --save-raw)


class Combine(str, Enum):
    """How the maps of several target layers are merged."""

    mean = "mean"
    max = "max"
    product = "product"
    sum = "sum"  # the raw maps added, then normalised once: each layer weighs as much as its evidence


class Task(str, Enum):
    """What the model does, and so what a map explains: a class of the image, one detected object, a class's region, the
    image's similarity to a text prompt (a CLIP-style model) or to reference images (an embedding model)."""

    classify = "classify"
    detect = "detect"
    segment = "segment"
    prompt = "prompt"
    reference = "reference"


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


class Plane(str, Enum):
    """A volume's plane a 2-D model explains slice by slice (⟨slices⟩)."""

    axial = "axial"
    coronal = "coronal"
    sagittal = "sagittal"


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
    NCTHW = "NCTHW"  # a clip's or a volume's map, channels first (Conv3d, BatchNorm3d)
    NTHWC = "NTHWC"  # channels last (Swin3D's stages)


def values(enum: type[Enum]) -> list[str]:
    """What the user may type for an enum option, in order."""
    return [str(member.value) for member in enum]


def _folded(word: str) -> str:
    """A word as a typo is compared: case, spaces, `-` and `_` dropped, `+` and `plus` read as `p` (gradcampp)."""
    return re.sub(r"[\s_\-]+", "", word.lower()).replace("plus", "p").replace("+", "p")


def closest(word: str, names: list[str]) -> str | None:
    """The name a mistyped word most likely meant, or None: one that folds the same (`gradcampp` → gradcam++,
    `guided_gradcam`), else the nearest by spelling."""
    folded = {_folded(name): name for name in names}
    if _folded(word) in folded:
        return folded[_folded(word)]
    close = difflib.get_close_matches(_folded(word), list(folded), n=1)
    return folded[close[0]] if close else None


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
    energy = "energy"  # a detector's or segmenter's: the share of a map's energy inside its own box or region
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
    detection = "detection"  # one detected object: its own class score, as the detector scores it
    segment = "segment"  # one class's region of a segmentation: the class's score summed over the region
    prompt = "prompt"  # the image's similarity to a text, as a CLIP-style model scores the pair: no probability (SigLIP's sigmoid)
    reference = "reference"  # the cosine similarity of the image's embedding to the references': no probability
