"""Ultralytics YOLO as a model hub: `yolo:path/to/best.pt` (a trained checkpoint) or `yolo:yolov8n.yaml` (a config).

A config, a local file or one of ultralytics' own (`yolov8n.yaml`, `yolo11s.yaml`:
the scale letter picks the size), builds the network with seeded random weights,
so it needs ⟨pretrained=False⟩. A checkpoint is a pickle of Ultralytics' classes:
loading it runs code, so it is loaded only with the user's consent (⟨trust_pickle⟩,
model/consent.py). Nothing is downloaded: a checkpoint must be a local file (a bare
`yolov8n.pt` is not fetched), a URL is refused, and the checkpoint is unpickled here,
not by ultralytics' loader, which would fetch a missing file (or rename a `yolov5s.pt`
to fetch `yolov5su.pt`) and pip-install a module the pickle names. Where unset, the
first import sets YOLO_OFFLINE=1 (no online check), YOLO_AUTOINSTALL=False and
YOLO_VERBOSE=False; ultralytics writes its settings file (YOLO_CONFIG_DIR) as it
always does on import, and what its import replaces for the whole process is put
back (PIL's Image.open, torch.save, OMP_NUM_THREADS; its print options and
cv2.setNumThreads(0) stay). The model is the `DetectionModel` itself, in eval mode and
not fused: fusing folds each BatchNorm into its conv, which changes neither the
feature maps the CAMs read nor the scores (to rounding), but renames the state
dict's keys, which ⟨weights⟩ and the class count read. A head with a one-to-one branch
is set to its one-to-many branch, as predict runs it (model/yolo_detectors.py),
and a probe forward on a blank input checks the output's rule before any image.
ultralytics is the optional `[yolo]` extra, imported only for `yolo:` names.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from gradcam_cli.errors import ModelError, UsageError, one_line, printable
from gradcam_cli.model.consent import pickles_trusted
from gradcam_cli.model.data_config import DataConfig
from gradcam_cli.model.faults import fault_line
from gradcam_cli.model.libraries import import_torchvision
from gradcam_cli.model.yolo_detectors import HEADS, YoloDetectors, head_of, is_ultralytics_model, predictions
from gradcam_cli.values import YOLO_PREFIX as PREFIX

CONFIGS = (".yaml", ".yml")
QUIET = {"YOLO_OFFLINE": "1", "YOLO_AUTOINSTALL": "False", "YOLO_VERBOSE": "False"}  # set before the first import, where unset
# the old names a checkpoint may pickle, as ultralytics' own torch_safe_load maps them
LEGACY_MODULES = {"ultralytics.yolo.utils": "ultralytics.utils", "ultralytics.yolo.v8": "ultralytics.models.yolo",
                  "ultralytics.yolo.data": "ultralytics.data"}  # fmt: skip
LEGACY_ATTRIBUTES = {"ultralytics.nn.modules.block.Silence": "torch.nn.Identity", "pathlib.WindowsPath": "pathlib.PosixPath",
                     "ultralytics.nn.tasks.YOLOv10DetectionModel": "ultralytics.nn.tasks.DetectionModel"}  # fmt: skip
FAMILY = YoloDetectors()


def import_ultralytics() -> ModuleType:
    """`ultralytics.nn.tasks`, quiet and offline, the process left as it was; one line when ultralytics is not installed."""
    for name, value in QUIET.items():
        os.environ.setdefault(name, value)
    import_torchvision()  # which ultralytics imports: first, so torch's compiler stays deferred
    threads = os.environ.get("OMP_NUM_THREADS")
    try:
        import ultralytics.nn.tasks as tasks
    except ImportError as error:
        if (error.name or "ultralytics").split(".")[0] == "ultralytics":
            raise UsageError(
                "yolo: models need the ultralytics package, which is not installed", hint="pip install 'gradcam-cli[yolo]'"
            ) from None
        raise UsageError(f"yolo: models need ultralytics, whose import failed: {error}", hint="pip install 'gradcam-cli[yolo]'") from None
    finally:
        if threads is None:  # its import sets 1 for training's sake, which every process started from here would inherit
            os.environ.pop("OMP_NUM_THREADS", None)
    _unpatched()
    return tasks


def _unpatched() -> None:
    """PIL's Image.open and torch.save as they were: ultralytics' import replaces both for the whole process, and its
    Image.open, on the first file Pillow cannot identify, tries to pip-install a HEIF plugin, prints to stdout and raises
    ModuleNotFoundError where the decoder expects Pillow's UnidentifiedImageError (a corrupt image's one-line record)."""
    from PIL import Image

    patches = sys.modules.get("ultralytics.utils.patches")
    for owner, name, theirs, original in ((Image, "open", "image_open", "_image_open"), (torch, "save", "torch_save", "_torch_save")):
        if patches is not None and getattr(owner, name) is getattr(patches, theirs, None) and hasattr(patches, original):
            setattr(owner, name, getattr(patches, original))


class UltralyticsHub:
    """Ultralytics' YOLO detectors, named with the 'yolo:' prefix."""

    name = "ultralytics"
    builds_unfilled = False  # its builder runs a forward to find the strides: the parameters must be real

    def arch_of(self, name: str) -> str | None:
        """'yolo:runs/best.pt' → 'runs/best.pt'; names without the prefix are another hub's."""
        return name.strip()[len(PREFIX) :].strip() if name.strip().startswith(PREFIX) else None

    def downloads(self, arch: str, pretrained: bool) -> bool:
        return False  # never: a checkpoint is a local file, a config ships with ultralytics

    def build(self, arch: str, pretrained: bool, num_classes: int | None, kwargs: Mapping[str, Any] | None = None) -> nn.Module:
        """The DetectionModel of a config (random weights) or a trusted checkpoint, in eval mode, its output checked."""
        label = f"⟨model={PREFIX}{printable(arch)}⟩"
        if "://" in arch:
            raise UsageError(f"{label}: nothing is downloaded here", hint="download the file yourself and give its local path")
        if arch.lower().endswith(CONFIGS):
            model = _from_config(import_ultralytics(), arch, label, pretrained, num_classes, dict(kwargs or {}))
        elif arch.lower().endswith(".pt"):
            model = _from_checkpoint(arch, label, num_classes, dict(kwargs or {}))
        else:
            raise UsageError(
                f"{label} is neither a checkpoint (.pt) nor a config (.yaml)", hint="yolo:path/to/best.pt or yolo:yolov8n.yaml"
            )
        return checked(model, label)

    def weights_location(self, arch: str) -> tuple[str, str] | None:
        return None

    def data_config(self, model: nn.Module, arch: str) -> DataConfig:
        return FAMILY.data_config(model)

    def data_config_notice(self, arch: str, given: frozenset[str]) -> str | None:
        return None

    def class_names(self, model: nn.Module, arch: str, num_classes: int) -> list[str] | None:
        """The model's `names`, unless they are a config's placeholders ("0", "1", ...)."""
        names = getattr(model, "names", None)
        listed = [names.get(i) for i in range(num_classes)] if isinstance(names, dict) else list(names or [])
        named = [n for n in listed if isinstance(n, str) and n]
        if len(named) != num_classes or len(listed) != num_classes:
            return None
        return None if all(n == str(i) for i, n in enumerate(named)) else named

    def default_layer(self, model: nn.Module, arch: str) -> str | None:
        return None  # a detector's layers are its family's (one per level the head reads)

    def stage_layers(self, model: nn.Module, arch: str) -> list[str] | None:
        return None

    def num_prefix_tokens(self, model: nn.Module, arch: str) -> int | None:
        return None


def _from_config(tasks: ModuleType, arch: str, label: str, pretrained: bool, num_classes: int | None, kwargs: dict[str, Any]) -> nn.Module:
    """A local config file, else ultralytics' own of that name, built with the loader's seeded random weights."""
    if pretrained:
        raise UsageError(
            f"{label} is a config: its weights would be random; say so with ⟨pretrained=False⟩",
            hint="or give a trained checkpoint, yolo:path/to/best.pt",
        )
    local = Path(arch).expanduser()
    if num_classes is not None:
        kwargs.setdefault("nc", num_classes)
    try:
        return tasks.DetectionModel(str(local) if local.is_file() else arch, verbose=False, **kwargs)
    except FileNotFoundError:
        raise UsageError(
            f"{label}: no such config here nor among ultralytics' own", hint="e.g. yolo:yolov8n.yaml, yolo:yolo11n.yaml"
        ) from None


def _from_checkpoint(arch: str, label: str, num_classes: int | None, kwargs: dict[str, Any]) -> nn.Module:
    """A local `.pt` unpickled, with consent: its EMA model (as Ultralytics loads it), else its model, in float32."""
    path = Path(arch).expanduser()
    if not path.is_file():
        raise UsageError(
            f"{label}: no such file, and weights are never downloaded here",
            hint="give the path of a local .pt (fetch Ultralytics' own weights yourself), or a config, yolo:yolov8n.yaml",
        )
    if kwargs or num_classes is not None:
        raise UsageError(f"{label} is a checkpoint: its network is its own (no ⟨model_kwargs⟩, no other class count)")
    if not pickles_trusted():
        raise UsageError(
            f"{label} is a pickle: loading it runs the code inside it; if you trust this file, say so with ⟨trust_pickle=True⟩",
            hint="or load its state dict into a config: yolo:yolov8n.yaml with ⟨weights⟩ (a .safetensors)",
        )
    tasks = import_ultralytics()
    checkpoint = _unpickled(tasks, path, label)
    found = (checkpoint.get("ema") or checkpoint.get("model")) if isinstance(checkpoint, dict) else checkpoint
    if not isinstance(found, nn.Module) or not is_ultralytics_model(found):
        raise UsageError(f"{label} holds no Ultralytics model (its 'ema' or 'model'): found {type(found).__name__}")
    model: Any = found.float()
    train_args = checkpoint.get("train_args") if isinstance(checkpoint, dict) else None
    model.args = {**getattr(tasks, "DEFAULT_CFG_DICT", {}), **(train_args if isinstance(train_args, dict) else {})}  # as its loader
    return model


def _unpickled(tasks: ModuleType, path: Path, label: str) -> Any:
    """torch.load of the whole pickle, older module names mapped; a module it needs and nobody has is one line."""
    legacy = getattr(tasks, "temporary_modules", None)
    renamed = legacy(modules=LEGACY_MODULES, attributes=LEGACY_ATTRIBUTES) if legacy else contextlib.nullcontext()
    try:
        with renamed:
            return torch.load(path, map_location="cpu", weights_only=False)
    except ModuleNotFoundError as error:
        raise ModelError(f"{label}: the pickle needs the module {error.name}, which is not installed (a newer ultralytics?)") from None
    except Exception as error:  # noqa: BLE001 - an unreadable file fails in many ways inside torch.load; one line
        raise ModelError(f"{label} could not be unpickled: {type(error).__name__}: {one_line(error, 160)}") from None


def checked(model: nn.Module, label: str) -> nn.Module:
    """The model in eval mode, its head a detector's or an instance segmenter's on its one-to-many branch, its output read
    once from a blank input."""
    head: Any = head_of(model)
    if not is_ultralytics_model(model) or head is None or type(head).__name__ not in HEADS:
        raise UsageError(
            f"{label} is not a detector: its head is {type(head).__name__}; only YOLO detectors and instance segmenters "
            "(a Detect or Segment head) are explained"
        )
    if getattr(head, "one2one_cv2", None) is not None:
        head.end2end = False  # what 8.4's predict sets with `nms` unset: the one-to-many branch, then NMS
    model.eval()
    height, width = FAMILY.data_config(model).input_hw
    try:
        with torch.no_grad():
            output = model(torch.zeros(1, 3, height, width))
    except Exception as error:  # noqa: BLE001 - the model's own failure, in one line
        raise ModelError(f"{label}: its forward failed on a blank {height}x{width} input: {fault_line(error)}") from None
    predictions(output, label)
    return model


ULTRALYTICS = UltralyticsHub()
