"""Model names → a ready model, its own preprocessing config and class names.

timm and torchvision already know how to build models, fetch weights and
describe their preprocessing; this module only chooses between them, loads a
user's checkpoint safely and turns their failures into one-line messages.
"""
from __future__ import annotations

import contextlib
import difflib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ModelError, UsageError

if TYPE_CHECKING:
    import torch
    from torch import nn

TORCHVISION_PREFIX = "torchvision:"
DEFAULT_INPUT_HW = (224, 224)
OFFLINE_HINT = (
    "use --weights FILE for a local checkpoint, run once on a connected machine to fill the cache "
    "(~/.cache/huggingface, ~/.cache/torch), or --no-pretrained for random weights"
)


@dataclass(frozen=True)
class DataConfig:
    """The model's own preprocessing (timm data config or torchvision weights' transforms)."""

    input_hw: tuple[int, int]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str = "bilinear"
    crop_pct: float = 1.0
    crop_mode: str = "center"


@dataclass
class LoadedModel:
    """A model in eval mode with everything needed to explain it."""

    model: "nn.Module"
    name: str
    source: str  # "timm" or "torchvision"
    arch: str
    data_config: DataConfig
    class_names: list[str] | None
    num_prefix_tokens: int | None

    @property
    def num_classes(self) -> int | None:
        return len(self.class_names) if self.class_names else None


def default_input_hw(model: "nn.Module") -> tuple[int, int]:
    """The input size the model was made for; used for probes."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    size = cfg.get("input_size")
    if size and len(size) == 3:
        return int(size[1]), int(size[2])
    image_size = getattr(model, "image_size", None)  # torchvision ViT
    if isinstance(image_size, int):
        return image_size, image_size
    return DEFAULT_INPUT_HW


def resolve_device(text: str) -> "torch.device":
    """auto → CUDA, then Apple MPS, then CPU; an explicit choice must exist."""
    import torch

    text = (text or "auto").strip().lower()
    if text == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(text)
    except RuntimeError:
        raise UsageError(f"--device '{text}' is not a device; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {text}: CUDA is not available here; use --device cpu or auto")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UsageError(f"--device {text}: only {torch.cuda.device_count()} CUDA device(s) here")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise UsageError("--device mps: Apple MPS is not available here; use --device cpu or auto")
    if device.type not in ("cpu", "cuda", "mps"):
        raise UsageError(f"--device '{text}' is not supported; use auto, cpu, cuda, cuda:N or mps")
    return device


PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def resolve_precision(text: str, device: "torch.device") -> "torch.dtype | None":
    """The autocast dtype for the model's passes, or None for plain fp32.

    auto: bf16 on a CUDA GPU that supports it (else fp16 there), fp32 elsewhere:
    CPU autocast is not faster on every processor and changes the numbers, so
    it is only used when asked for. The CAM maths always run in fp32.
    """
    import torch

    text = (text or "auto").strip().lower()
    if text not in PRECISIONS:
        raise UsageError(f"--precision '{text}' is unknown; use one of {', '.join(PRECISIONS)}")
    if text == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps" and text != "fp32":
        raise UsageError(f"--precision {text} is not supported on MPS here; use fp32")
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[text]


def is_out_of_memory(error: BaseException) -> bool:
    """CUDA, MPS or CPU allocation failure, whichever class the torch build raises it as."""
    import torch

    if isinstance(error, getattr(torch.cuda, "OutOfMemoryError", ())):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def free_device_memory(device: "torch.device") -> None:
    """Give cached blocks back after an out-of-memory error, so a smaller retry can fit."""
    import gc

    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps" and hasattr(torch, "mps"):
        torch.mps.empty_cache()


def place_model(model: "nn.Module", device: "torch.device") -> bool:
    """Move the model to the device; convolutional nets go channels-last on CPU and CUDA.

    oneDNN and cuDNN run convolutions faster on channels-last tensors (resnet50
    on 2 CPU cores: about 1.3x); returns whether the inputs should follow.
    """
    import torch
    from torch import nn

    model.to(device)
    convolutional = any(isinstance(m, nn.Conv2d) and m.kernel_size != m.stride for m in model.modules())
    if convolutional and device.type in ("cpu", "cuda"):
        model.to(memory_format=torch.channels_last)
        return True
    return False


# ---------------------------------------------------------------- checkpoints

WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "module", "net", "network")
STRIPPED_PREFIXES = ("module.", "_orig_mod.")


def read_state_dict(path: Path) -> dict[str, "torch.Tensor"]:
    """Tensors only: safetensors, or a torch file loaded with weights_only (never unpickles code)."""
    import torch

    if not path.is_file():
        raise ModelError(f"--weights {path}: no such file")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            raw: Any = load_file(str(path), device="cpu")
        else:
            raw = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - every failure here means the same to the user
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelError(
            f"--weights {path}: not a loadable tensor checkpoint ({first[:200]}); "
            "give a .safetensors file or a .pth/.pt state dict (code inside pickles is never run)"
        ) from None
    return _unwrap_state_dict(raw, path)


def _unwrap_state_dict(raw: Any, path: Path) -> dict[str, "torch.Tensor"]:
    import torch

    while isinstance(raw, dict):
        inner = next((raw[k] for k in WRAPPER_KEYS if isinstance(raw.get(k), dict)), None)
        if inner is None:
            break
        raw = inner
    if not isinstance(raw, dict) or not raw or not all(isinstance(v, torch.Tensor) for v in raw.values()):
        raise ModelError(f"--weights {path}: holds no state dict of tensors")
    state = {}
    for key, value in raw.items():
        for prefix in STRIPPED_PREFIXES:
            if key.startswith(prefix):
                key = key[len(prefix) :]
        state[key] = value
    return state


def _classifier_name(model: "nn.Module") -> str | None:
    """The module that produces the logits: timm says so, else the last Linear or 1x1 conv."""
    from torch import nn

    cfg = getattr(model, "pretrained_cfg", None) or {}
    classifier = cfg.get("classifier")
    if isinstance(classifier, (list, tuple)):
        classifier = classifier[0]
    names = dict(model.named_modules())
    if isinstance(classifier, str) and classifier in names:
        return classifier
    last = None
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            last = name
    return last


def checkpoint_num_classes(model: "nn.Module", state: dict[str, "torch.Tensor"]) -> int | None:
    name = _classifier_name(model)
    if name is None:
        return None
    weight = state.get(f"{name}.weight")
    return int(weight.shape[0]) if weight is not None and weight.dim() >= 1 else None


def load_checkpoint(model: "nn.Module", state: dict[str, "torch.Tensor"], path: Path) -> None:
    """Strict load; a mismatch names a few missing and unexpected keys."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    wrong = [k for k in own if k in state and tuple(own[k].shape) != tuple(state[k].shape)]
    if missing or unexpected or wrong:
        parts = []
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong)):
            if keys:
                more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
                parts.append(f"{label}: {', '.join(keys[:3])}{more}")
        raise ModelError(f"--weights {path} does not fit this architecture ({'; '.join(parts)}); check --model")
    model.load_state_dict(state, strict=True)


# ------------------------------------------------------------------ builders

def _closest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.6)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


def _torchvision_classifiers() -> list[str]:
    import torchvision

    return list(torchvision.models.list_models(module=torchvision.models))


def _build_torchvision(arch: str, pretrained: bool, num_classes: int | None) -> "nn.Module":
    import torchvision

    names = _torchvision_classifiers()
    if arch not in names:
        raise UsageError(
            f"unknown torchvision model '{arch}'{_closest(arch, names)}; "
            "torchvision classification models are listed by torchvision.models.list_models()"
        )
    kwargs = {} if num_classes is None else {"num_classes": num_classes}
    try:
        return torchvision.models.get_model(arch, weights="DEFAULT" if pretrained else None, **kwargs)
    except Exception as error:  # noqa: BLE001
        if pretrained:
            raise ModelError(f"could not get pretrained weights for torchvision:{arch} ({_short(error)}); {OFFLINE_HINT}") from None
        raise ModelError(f"could not build torchvision:{arch}: {_short(error)}") from None


def _build_timm(name: str, pretrained: bool, num_classes: int | None) -> "nn.Module":
    import timm

    if not name.startswith("hf-hub:") and not timm.is_model(name):
        known = timm.list_models()
        raise UsageError(
            f"unknown model '{name}'{_closest(name.split('.')[0], known)}; "
            "name a timm model (timm.list_models()), 'hf-hub:ORG/NAME', or 'torchvision:ARCH'"
        )
    kwargs = {} if num_classes is None else {"num_classes": num_classes}
    try:
        return timm.create_model(name, pretrained=pretrained, **kwargs)
    except Exception as error:  # noqa: BLE001
        if pretrained or name.startswith("hf-hub:"):
            raise ModelError(f"could not get pretrained weights for {name} ({_short(error)}); {OFFLINE_HINT}") from None
        raise ModelError(f"could not build {name}: {_short(error)}") from None


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]


def _timm_data_config(model: "nn.Module") -> DataConfig:
    from timm.data import resolve_model_data_config

    cfg = resolve_model_data_config(model)
    size = cfg["input_size"]
    return DataConfig(
        input_hw=(int(size[1]), int(size[2])),
        mean=tuple(float(v) for v in cfg["mean"]),  # type: ignore[arg-type]
        std=tuple(float(v) for v in cfg["std"]),  # type: ignore[arg-type]
        interpolation=str(cfg.get("interpolation", "bilinear")),
        crop_pct=float(cfg.get("crop_pct", 1.0)),
        crop_mode=str(cfg.get("crop_mode", "center")),
    )


def _torchvision_weights(arch: str) -> Any:
    from torchvision.models import get_model_weights

    try:
        return get_model_weights(arch).DEFAULT
    except (ValueError, AttributeError, KeyError):
        return None


def _torchvision_data_config(model: "nn.Module", arch: str) -> DataConfig:
    weights = _torchvision_weights(arch)
    if weights is None:
        h, w = default_input_hw(model)
        return DataConfig((h, w), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    t = weights.transforms()
    crop = int(t.crop_size[0])
    resize = int(t.resize_size[0])
    return DataConfig(
        input_hw=(crop, crop),
        mean=tuple(float(v) for v in t.mean),  # type: ignore[arg-type]
        std=tuple(float(v) for v in t.std),  # type: ignore[arg-type]
        interpolation=str(getattr(t.interpolation, "value", t.interpolation)),
        crop_pct=crop / resize,
    )


def _imagenet_names(model: "nn.Module", source: str, arch: str, num_classes: int) -> list[str] | None:
    """ImageNet class names from the libraries' own metadata, when the head fits them."""
    if source == "torchvision":
        weights = _torchvision_weights(arch)
        categories = weights.meta.get("categories") if weights is not None else None
        return list(categories) if categories and len(categories) == num_classes else None
    from timm.data import ImageNetInfo, infer_imagenet_subset

    subset = infer_imagenet_subset(model)
    if subset is None:
        return None
    info = ImageNetInfo(subset)
    if info.num_classes() != num_classes:
        return None
    return [info.index_to_description(i) for i in range(num_classes)]


def read_labels(path: Path) -> list[str]:
    if not path.is_file():
        raise UsageError(f"--labels {path}: no such file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--labels {path}: cannot read it as UTF-8 text ({_short(error)})") from None
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise UsageError(f"--labels {path} is empty; write one class name per line")
    return [line.strip() for line in lines]


def _num_outputs(model: "nn.Module") -> int | None:
    num = getattr(model, "num_classes", None)
    if isinstance(num, int) and num > 0:
        return num
    name = _classifier_name(model)
    if name is None:
        return None
    weight = getattr(dict(model.named_modules())[name], "weight", None)
    return int(weight.shape[0]) if weight is not None else None


def _split_name(name: str) -> tuple[str, str]:
    """'torchvision:resnet50' → ('torchvision', 'resnet50'); timm names stay whole."""
    if name.startswith(TORCHVISION_PREFIX):
        return "torchvision", name[len(TORCHVISION_PREFIX) :]
    return "timm", name


def _seed_random_init() -> None:
    """Random weights are the same on every run, so --no-pretrained results reproduce."""
    import torch

    torch.manual_seed(0)


def build_model(name: str, pretrained: bool = True, num_classes: int | None = None) -> tuple["nn.Module", str, str]:
    """The bare module, its source ('timm'/'torchvision') and architecture name."""
    source, arch = _split_name(name.strip())
    if not arch:
        raise UsageError("--model is empty; name a timm model, 'hf-hub:ORG/NAME' or 'torchvision:ARCH'")
    build = _build_torchvision if source == "torchvision" else _build_timm
    if not pretrained:
        _seed_random_init()
    # torch.hub announces a download on stdout ('Downloading: "..." to ...'),
    # which would corrupt the JSON Lines there; stdout is for results only.
    with contextlib.redirect_stdout(sys.stderr):
        return build(arch, pretrained, num_classes), source, arch


def load_model(
    name: str,
    *,
    pretrained: bool = True,
    weights: Path | None = None,
    labels: Path | None = None,
) -> LoadedModel:
    """Build, load weights, and attach the model's own data config and class names."""
    label_names = read_labels(labels) if labels is not None else None
    state = read_state_dict(weights) if weights is not None else None
    model, source, arch = build_model(name, pretrained=pretrained and state is None)
    if state is not None:
        wanted = checkpoint_num_classes(model, state)
        if wanted is not None and wanted != _num_outputs(model):
            model, source, arch = build_model(name, pretrained=False, num_classes=wanted)
        load_checkpoint(model, state, weights)  # type: ignore[arg-type]
    model.eval()
    outputs = _num_outputs(model)
    if label_names is not None and outputs is not None and len(label_names) != outputs:
        raise UsageError(f"--labels {labels} names {len(label_names)} classes but the model has {outputs} outputs")
    names = label_names or (_imagenet_names(model, source, arch, outputs) if outputs else None)
    config = _torchvision_data_config(model, arch) if source == "torchvision" else _timm_data_config(model)
    return LoadedModel(model, name.strip(), source, arch, config, names, num_prefix_tokens(model, source, arch))


def num_prefix_tokens(model: "nn.Module", source: str, arch: str) -> int | None:
    """Class/distillation/register tokens before the patch tokens, where the model tells."""
    prefix = getattr(model, "num_prefix_tokens", None)
    if prefix is None and source == "torchvision" and arch.startswith("vit_"):
        prefix = 1  # torchvision's ViT prepends one class token
    return prefix
