"""User checkpoints (--weights): read tensors safely, size the head, load strictly.

A checkpoint is untrusted input: it is never unpickled as code, its zip is
measured before torch inflates it, and its classifier shape is checked
before a head is built to fit it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gradcam_cli.errors import ModelError, one_line

import torch
from torch import nn

WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "module", "net", "network")
EMA_KEYS = ("state_dict_ema", "model_ema", "ema_state_dict", "ema")  # timm's train.py, and common hand-written names
STRIPPED_PREFIXES = ("module.", "_orig_mod.")
PREFIX_DEPTH = 2  # a training wrapper's prefix is one or two names deep (`model.`, `model.backbone.`)


def read_state_dict(path: Path, ema: bool = False) -> dict[str, torch.Tensor]:
    """Tensors only: safetensors, or a torch file loaded with weights_only (never unpickles code); `ema`: the
    exponential moving average of the weights that training kept beside them, instead of the weights."""
    if not path.is_file():
        raise ModelError(f"⟨weights={path}⟩: no such file")
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
            f"⟨weights={path}⟩: not a loadable tensor checkpoint ({first[:200]}); "
            "give a .safetensors file or a .pth/.pt state dict (code inside pickles is never run)"
        ) from None
    if ema:
        raw = _ema_weights(raw, path)
    return _unwrap_state_dict(raw, path)


def _ema_weights(raw: Any, path: Path) -> Any:
    """The EMA state dict of a training checkpoint (timm's `state_dict_ema`), or one line saying there is none."""
    if isinstance(raw, dict):
        for key in EMA_KEYS:
            if isinstance(raw.get(key), dict):
                return raw[key]
    keys = ", ".join(one_line(k) for k in list(raw)[:6]) if isinstance(raw, dict) else type(raw).__name__
    raise ModelError(f"⟨weights={path}⟩ keeps no EMA weights ({', '.join(EMA_KEYS)}); it holds {keys}: leave out ⟨ema⟩")


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
            f"⟨weights={path}⟩: its zip directory declares {_bytes(declared)} of data in a {_bytes(size)} file "
            "(a compression bomb?); torch.save stores tensors uncompressed, give the checkpoint as it saved it"
        )


def _bytes(count: int) -> str:
    """A size as people read it, for the compression-bomb message."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def _unwrap_state_dict(raw: Any, path: Path) -> dict[str, torch.Tensor]:
    """Training scripts wrap the weights ({'state_dict': ...}, DataParallel's module.): take them out."""
    while isinstance(raw, dict):
        inner = next((raw[k] for k in WRAPPER_KEYS if isinstance(raw.get(k), dict)), None)
        if inner is None:
            break
        raw = inner
    if not isinstance(raw, dict) or not raw or not all(isinstance(v, torch.Tensor) for v in raw.values()):
        raise ModelError(f"⟨weights={path}⟩: holds no state dict of tensors")
    state = {}
    for key, value in raw.items():
        for prefix in STRIPPED_PREFIXES:
            if key.startswith(prefix):
                key = key[len(prefix) :]
        state[key] = value
    return state


def fit_prefix(model: nn.Module, state: dict[str, torch.Tensor], path: Path) -> tuple[dict[str, torch.Tensor], str | None]:
    """The weights under the prefix a training wrapper gave them (Lightning's `model.`, `net.`), when that makes
    every key of the model fit, and a line saying which prefix (and what else the checkpoint held, left out)."""
    own = set(model.state_dict())
    if own <= set(state):
        return state, None
    best: tuple[int, str, dict[str, torch.Tensor]] | None = None
    for prefix in sorted({".".join(k.split(".")[:depth]) + "." for k in state for depth in range(1, PREFIX_DEPTH + 1) if "." in k}):
        stripped = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
        if own <= set(stripped) and (best is None or len(state) - len(own) < best[0]):
            best = (len(state) - len(own), prefix, {k: stripped[k] for k in own})
    if best is None:
        return state, None  # nothing fits: the strict load names the keys that are missing
    left, prefix, fitted = best
    others = sorted({k.split(".")[0] for k in state if not k.startswith(prefix)})
    rest = f"; {left} other tensors left out ({', '.join(one_line(o) for o in others[:4])})" if left else ""
    return fitted, f"⟨weights={path}⟩: the model's weights are under '{prefix}' (a training wrapper's name), taken from there{rest}"


def classifier_name(model: nn.Module) -> str | None:
    """The module that produces the logits: timm says so, else the last Linear or 1x1 conv."""
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


def checkpoint_num_classes(model: nn.Module, state: dict[str, torch.Tensor], path: Path | None = None) -> int | None:
    """The class count the checkpoint's classifier was trained for, from a weight that can be one.

    The count sizes a new head before anything is loaded, so a 1-D tensor, an
    absurd count or a stride-0 view under the classifier's name is refused
    here (2^28 "classes" asked for a 103 GB head).
    """
    name = classifier_name(model)
    if name is None:
        return None
    own = getattr(dict(model.named_modules())[name], "weight", None)
    weight = state.get(f"{name}.weight")
    if weight is None or own is None:
        return None
    where, key = f"⟨weights={path}⟩" if path else "the checkpoint", f"{name}.weight"
    if weight.dim() not in (2, 4) or weight.dim() != own.dim():
        raise ModelError(
            f"{where}: classifier weight '{key}' has shape {tuple(weight.shape)}, not (classes, "
            f"{', '.join(str(d) for d in own.shape[1:])}) like this model's; check ⟨model⟩"
        )
    if tuple(weight.shape[1:]) != tuple(own.shape[1:]):
        return None  # does not fit this model at all: load_checkpoint names the key
    classes = int(weight.shape[0])
    if not 1 <= classes <= MAX_CLASSES:
        raise ModelError(
            f"{where}: classifier weight '{key}' claims {classes:,} classes, more than a classifier has (at most {MAX_CLASSES:,})"
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
        raise ModelError(f"⟨weights={path}⟩ does not fit this architecture ({'; '.join(parts)}); check ⟨model⟩")
    _check_dtypes(own, state, path)
    model.load_state_dict(state, strict=True)


def _check_dtypes(own: dict[str, torch.Tensor], state: dict[str, torch.Tensor], path: Path) -> None:
    """load_state_dict would cast int8 or bool into a float weight without a word; integer buffers may stay integer."""
    for key, value in state.items():
        if own[key].is_floating_point() and not value.is_floating_point():
            dtype = str(value.dtype).removeprefix("torch.")
            raise ModelError(
                f"⟨weights={path}⟩: tensor '{key}' is {dtype}, not floating point; quantized or integer checkpoints "
                "are not supported (give the float weights)"
            )
