"""Model names → a ready model, its own preprocessing config and class names.

timm and torchvision already know how to build models, fetch weights and
describe their preprocessing; this module only chooses between them, loads a
user's checkpoint safely and turns their failures into one-line messages.
"""
from __future__ import annotations

import contextlib
import difflib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradcam_cli.errors import GradcamError, ModelError, UsageError, one_line

if TYPE_CHECKING:
    import torch
    from torch import nn

TORCHVISION_PREFIX = "torchvision:"
DEFAULT_INPUT_HW = (224, 224)
OFFLINE_HINT = (
    "use --weights FILE for a local checkpoint, run once on a connected machine to fill the cache "
    "(~/.cache/huggingface, ~/.cache/torch) and then set HF_HUB_OFFLINE=1 to use it without the network, "
    "or --no-pretrained for random weights"
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

    model: nn.Module
    name: str
    source: str  # "timm" or "torchvision"
    arch: str
    data_config: DataConfig
    class_names: list[str] | None
    num_prefix_tokens: int | None

    @property
    def num_classes(self) -> int | None:
        return len(self.class_names) if self.class_names else None


def default_input_hw(model: nn.Module) -> tuple[int, int]:
    """The input size the model was made for; used for probes."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    size = cfg.get("input_size")
    if size and len(size) == 3:
        return int(size[1]), int(size[2])
    image_size = getattr(model, "image_size", None)  # torchvision ViT
    if isinstance(image_size, int):
        return image_size, image_size
    return DEFAULT_INPUT_HW


def resolve_device(text: str) -> torch.device:
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


def resolve_precision(text: str, device: torch.device) -> torch.dtype | None:
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


def free_device_memory(device: torch.device) -> None:
    """Give cached blocks back after an out-of-memory error, so a smaller retry can fit."""
    import gc

    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps" and hasattr(torch, "mps"):
        torch.mps.empty_cache()


def place_model(model: nn.Module, device: torch.device) -> bool:
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


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Tensors only: safetensors, or a torch file loaded with weights_only (never unpickles code)."""
    import torch

    if not path.is_file():
        raise ModelError(f"--weights {path}: no such file")
    if path.suffix != ".safetensors":
        _check_archive_sizes(path)
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


# torch.save stores tensors uncompressed (ZIP_STORED) and float weights barely
# deflate anyway: a real .pth declares about its own size. 10x plus 1 MiB
# leaves room for a re-zipped file full of zeros, not for a bomb.
MAX_INFLATION = 10
INFLATION_SLACK = 1 << 20


def _check_archive_sizes(path: Path) -> None:
    """torch inflates a .pth zip in full before anything can be checked: read its directory first."""
    import zipfile

    try:
        if not zipfile.is_zipfile(path):
            return  # the legacy format, or not a checkpoint: torch.load says which
        with zipfile.ZipFile(path) as archive:
            declared = sum(info.file_size for info in archive.infolist())
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return  # a broken zip: torch.load's own message names it
    size = path.stat().st_size
    if declared > MAX_INFLATION * size + INFLATION_SLACK:
        raise ModelError(
            f"--weights {path}: its zip directory declares {_bytes(declared)} of data in a {_bytes(size)} file "
            "(a compression bomb?); torch.save stores tensors uncompressed, give the checkpoint as it saved it"
        )


def _bytes(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def _unwrap_state_dict(raw: Any, path: Path) -> dict[str, torch.Tensor]:
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


def _classifier_name(model: nn.Module) -> str | None:
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


MAX_CLASSES = 1_000_000  # beyond any real classifier; the head is rebuilt at this size before loading


def checkpoint_num_classes(
    model: nn.Module, state: dict[str, torch.Tensor], path: Path | None = None
) -> int | None:
    """The class count the checkpoint's classifier was trained for, from a weight that can be one.

    The count sizes a new head before anything is loaded, so a 1-D tensor, an
    absurd count or a stride-0 view under the classifier's name is refused
    here (2^28 "classes" asked for a 103 GB head).
    """
    name = _classifier_name(model)
    if name is None:
        return None
    own = getattr(dict(model.named_modules())[name], "weight", None)
    weight = state.get(f"{name}.weight")
    if weight is None or own is None:
        return None
    where, key = f"--weights {path}" if path else "the checkpoint", f"{name}.weight"
    if weight.dim() not in (2, 4) or weight.dim() != own.dim():
        raise ModelError(
            f"{where}: classifier weight '{key}' has shape {tuple(weight.shape)}, not (classes, "
            f"{', '.join(str(d) for d in own.shape[1:])}) like this model's; check --model"
        )
    if tuple(weight.shape[1:]) != tuple(own.shape[1:]):
        return None  # does not fit this model at all: load_checkpoint names the key
    classes = int(weight.shape[0])
    if not 1 <= classes <= MAX_CLASSES:
        raise ModelError(
            f"{where}: classifier weight '{key}' claims {classes:,} classes, more than a classifier has "
            f"(at most {MAX_CLASSES:,})"
        )
    if weight.numel() * weight.element_size() > weight.untyped_storage().nbytes():
        raise ModelError(
            f"{where}: classifier weight '{key}' of shape {tuple(weight.shape)} repeats a smaller storage "
            f"(strides {weight.stride()}); save real tensors (.contiguous())"
        )
    return classes


def load_checkpoint(model: nn.Module, state: dict[str, torch.Tensor], path: Path) -> None:
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
                parts.append(f"{label}: {', '.join(one_line(k) for k in keys[:3])}{more}")
        raise ModelError(f"--weights {path} does not fit this architecture ({'; '.join(parts)}); check --model")
    _check_dtypes(own, state, path)
    model.load_state_dict(state, strict=True)


def _check_dtypes(own: dict[str, torch.Tensor], state: dict[str, torch.Tensor], path: Path) -> None:
    """load_state_dict would cast int8 or bool into a float weight without a word; integer buffers may stay integer."""
    for key, value in state.items():
        if own[key].is_floating_point() and not value.is_floating_point():
            dtype = str(value.dtype).removeprefix("torch.")
            raise ModelError(
                f"--weights {path}: tensor '{key}' is {dtype}, not floating point; quantized or integer checkpoints "
                "are not supported (give the float weights)"
            )


# ------------------------------------------------------------------ builders

def _closest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.6)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


def _torchvision_classifiers() -> list[str]:
    import torchvision

    return list(torchvision.models.list_models(module=torchvision.models))


def _build_torchvision(arch: str, pretrained: bool, num_classes: int | None) -> nn.Module:
    import torchvision

    names = _torchvision_classifiers()
    if arch not in names:
        raise UsageError(
            f"unknown torchvision model '{arch}'{_closest(arch, names)}; "
            "torchvision classification models are listed by torchvision.models.list_models()"
        )
    kwargs = {} if num_classes is None else {"num_classes": num_classes}
    return torchvision.models.get_model(arch, weights="DEFAULT" if pretrained else None, **kwargs)


def _build_timm(name: str, pretrained: bool, num_classes: int | None) -> nn.Module:
    import timm

    if not name.startswith("hf-hub:") and not timm.is_model(name):
        known = timm.list_models()
        raise UsageError(
            f"unknown model '{name}'{_closest(name.split('.')[0], known)}; "
            "name a timm model (timm.list_models()), 'hf-hub:ORG/NAME', or 'torchvision:ARCH'"
        )
    kwargs = {} if num_classes is None else {"num_classes": num_classes}
    return timm.create_model(name, pretrained=pretrained, **kwargs)


def _short(error: BaseException, limit: int = 200) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:limit]


def _deepest(error: BaseException) -> BaseException:
    """The first failure in an exception's chain: the one that says what actually went wrong."""
    seen = {id(error)}
    while (inner := error.__cause__ or error.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        error = inner
    return error


def _timm_data_config(model: nn.Module) -> DataConfig:
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


def _torchvision_data_config(model: nn.Module, arch: str) -> DataConfig:
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


def _imagenet_names(model: nn.Module, source: str, arch: str, num_classes: int) -> list[str] | None:
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
    """One class name per line; byte-order marks (Windows editors write one) are no part of a name."""
    if not path.is_file():
        raise UsageError(f"--labels {path}: no such file")
    try:
        lines = path.read_text(encoding="utf-8-sig").replace("\ufeff", "").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--labels {path}: cannot read it as UTF-8 text ({_short(error)})") from None
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise UsageError(f"--labels {path} is empty; write one class name per line")
    return [line.strip() for line in lines]


def num_outputs(model: nn.Module) -> int | None:
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


def build_model(name: str, pretrained: bool = True, num_classes: int | None = None) -> tuple[nn.Module, str, str]:
    """The bare module, its source ('timm'/'torchvision') and architecture name."""
    source, arch = _split_name(name.strip())
    if not arch:
        raise UsageError("--model is empty; name a timm model, 'hf-hub:ORG/NAME' or 'torchvision:ARCH'")
    build = _build_torchvision if source == "torchvision" else _build_timm
    label = f"{TORCHVISION_PREFIX}{arch}" if source == "torchvision" else arch
    downloads = pretrained or arch.startswith("hf-hub:")  # hf-hub names fetch their config either way
    if not pretrained:
        _seed_random_init()
    unreachable = _plan_download(label, source, arch) if downloads else None
    # torch.hub announces a download on stdout ('Downloading: "..." to ...'),
    # which would corrupt the JSON Lines there; stdout is for results only.
    quiet = _library_noise_off() if downloads else contextlib.nullcontext()
    with contextlib.redirect_stdout(sys.stderr), quiet, _hub_offline(unreachable is not None):
        try:
            return build(arch, pretrained, num_classes), source, arch
        except GradcamError:
            raise
        except Exception as error:  # noqa: BLE001 - the libraries fail in many ways; the user gets one line
            raise _build_error(label, downloads, error, unreachable) from None


def _build_error(label: str, downloads: bool, error: BaseException, unreachable: str | None) -> ModelError:
    if not downloads:
        return ModelError(f"could not build {label}: {_short(error)}")
    reason = _short(error)
    if _is_cache_miss(error) and unreachable:
        reason = f"{unreachable} cannot be reached and they are not in the local cache"
    elif _is_cache_miss(error) and _hf_offline():
        reason = "HF_HUB_OFFLINE is set and they are not in the local cache"
    elif _is_cache_miss(error):
        reason = f"the hub did not serve them ({_short(_deepest(error), 100)}) and they are not in the local cache"
    return ModelError(f"could not get pretrained weights for {label} ({reason}); {OFFLINE_HINT}")


# ---------------------------------------------------------------- reaching the hubs
#
# Offline, huggingface_hub retries each file 5 times with backoff (1+2+4+8+8 s)
# and timm asks for two files: ~52 s and 24 log lines before its error. Its own
# offline mode answers from the cache at once, so a quick TCP probe decides
# which mode the build runs in; torch.hub (torchvision, timm's plain URLs)
# reads its cache without any request, so only an uncached download is probed.

HUB_PROBE_TIMEOUT_S = 3.0  # a TCP handshake, DNS included; far more than any working link needs
NOISY_LOGGERS = ("huggingface_hub", "timm", "torch.hub", "urllib3", "httpx", "httpx2", "httpcore", "filelock")
DEFAULT_PORTS = {"http": 80, "https": 443, "socks4": 1080, "socks5": 1080, "socks5h": 1080}


def _plan_download(label: str, source: str, arch: str) -> str | None:
    """Probe the weights' host before the libraries do.

    Returns the Hugging Face host when it does not answer (the build then runs
    in the hub's offline mode: cached weights load, missing ones fail at once);
    a plain download that cannot happen fails here.
    """
    where = _weights_location(source, arch)
    if where is None:
        return None
    kind, url = where
    if (kind == "url" and _torch_hub_cached(url)) or (kind == "hf" and _hf_offline()):
        return None
    if _answers(*_first_hop(url)):
        return None
    host = _host(url)
    if kind == "url":
        raise ModelError(
            f"could not get pretrained weights for {label} ({host} cannot be reached and they are not in the "
            f"local cache); {OFFLINE_HINT}"
        )
    return host


def _weights_location(source: str, arch: str) -> tuple[str, str] | None:
    """('hf', hub endpoint) or ('url', download URL) for the pretrained weights; None when no request is needed."""
    if source == "torchvision":
        url = getattr(_torchvision_weights(arch), "url", None)
        return ("url", url) if url else None
    if arch.startswith("hf-hub:"):
        return "hf", _hf_endpoint()
    try:
        from timm.models import get_pretrained_cfg
        from timm.models._builder import _resolve_pretrained_source  # timm's own choice of source

        cfg = get_pretrained_cfg(arch)
        kind, location = _resolve_pretrained_source(cfg.to_dict()) if cfg is not None else ("", "")
    except Exception:  # noqa: BLE001 - a bad tag or another timm version: the build itself reports
        return None
    if kind == "hf-hub":
        return "hf", _hf_endpoint()
    return ("url", str(location)) if kind == "url" else None


def _hf_endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _hf_offline() -> bool:
    try:
        from huggingface_hub import constants
    except ImportError:
        return False
    return bool(constants.is_offline_mode())


def _torch_hub_cached(url: str) -> bool:
    """torch.hub keeps a download as <hub dir>/checkpoints/<file name> and then never asks again."""
    import torch.hub
    from urllib.parse import urlsplit

    name = os.path.basename(urlsplit(url).path)
    return bool(name) and os.path.isfile(os.path.join(torch.hub.get_dir(), "checkpoints", name))


def _host(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).hostname or url


def _first_hop(url: str) -> tuple[str, int]:
    """The host and port a request for url connects to first: its proxy when one applies."""
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
        parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return parts.hostname or "", parts.port or DEFAULT_PORTS.get(parts.scheme, 443)


def _answers(host: str, port: int, timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection opens within timeout; in a thread because DNS has no timeout of its own."""
    import socket
    import threading

    if not host:
        return True  # nothing to probe: let the library try
    outcome: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(True)
        except OSError:
            outcome.append(False)

    probe = threading.Thread(target=connect, name="gradcam-hub-probe", daemon=True)
    probe.start()
    probe.join(timeout)
    return bool(outcome and outcome[0])


@contextlib.contextmanager
def _hub_offline(on: bool) -> Any:
    """huggingface_hub's own offline mode for the build: the cache only, no request, no retry."""
    if not on:
        yield
        return
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


@contextlib.contextmanager
def _library_noise_off() -> Any:
    """The hubs' retry warnings and log lines stay off the terminal: our one-line error says it all."""
    import logging
    import warnings

    loggers = [logging.getLogger(name) for name in NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _is_cache_miss(error: BaseException | None) -> bool:
    """huggingface_hub found neither the hub nor the file in its cache (somewhere in the chain)."""
    try:
        from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled
    except ImportError:
        return False
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, (LocalEntryNotFoundError, OfflineModeIsEnabled)):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


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
        wanted = checkpoint_num_classes(model, state, weights)
        if wanted is not None and wanted != num_outputs(model):
            model, source, arch = build_model(name, pretrained=False, num_classes=wanted)
        load_checkpoint(model, state, weights)  # type: ignore[arg-type]
    model.eval()
    outputs = num_outputs(model)
    if label_names is not None and outputs is not None and len(label_names) != outputs:
        raise UsageError(f"--labels {labels} names {len(label_names)} classes but the model has {outputs} outputs")
    names = label_names or (_imagenet_names(model, source, arch, outputs) if outputs else None)
    config = _torchvision_data_config(model, arch) if source == "torchvision" else _timm_data_config(model)
    return LoadedModel(model, name.strip(), source, arch, config, names, num_prefix_tokens(model, source, arch))


def num_prefix_tokens(model: nn.Module, source: str, arch: str) -> int | None:
    """Class/distillation/register tokens before the patch tokens, where the model tells."""
    prefix = getattr(model, "num_prefix_tokens", None)
    if prefix is None and source == "torchvision" and arch.startswith("vit_"):
        prefix = 1  # torchvision's ViT prepends one class token
    return prefix
