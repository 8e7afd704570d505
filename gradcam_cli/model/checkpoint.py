"""User checkpoints (--weights): read tensors safely, size the head, load strictly.

A checkpoint is untrusted input: it is never unpickled as code, its zip is
measured before torch inflates it, and its classifier shape is checked
before a head is built to fit it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gradcam_cli.errors import ModelError, one_line

import torch
from torch import nn

WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "module", "net", "network", "model_dict")
SAID_WRAPPER_KEYS = ("model_dict",)  # DomainBed's: a checkpoint of arguments, hyperparameters and the weights
EMA_KEYS = ("state_dict_ema", "model_ema", "ema_state_dict", "ema")  # timm's train.py, and common hand-written names
STRIPPED_PREFIXES = ("module.", "_orig_mod.")
PREFIX_DEPTH = 2  # a training wrapper's prefix is one or two names deep (`model.`, `model.backbone.`)


def read_state_dict(path: Path, ema: bool = False, notice: Callable[[str], None] | None = None) -> dict[str, torch.Tensor]:
    """Tensors only: safetensors, or a torch file loaded with weights_only (never unpickles code); `ema`: the
    exponential moving average of the weights that training kept beside them, instead of the weights. `notice`
    hears where in a training checkpoint the weights were found (DomainBed's `model_dict`)."""
    if not path.is_file():
        raise ModelError(f"⟨weights={path}⟩: no such file")
    if path.suffix != ".safetensors":
        _check_kind(path)
        _check_archive_sizes(path)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            raw: Any = load_file(str(path), device="cpu")
        else:
            raw = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - every failure here means the same to the user
        raise ModelError(
            f"⟨weights={path}⟩: not a loadable tensor checkpoint ({_load_failure(error)}); "
            "give a .safetensors file or a .pth/.pt state dict (code inside pickles is never run)"
        ) from error  # the library's own error stays the cause: --debug shows it
    if ema:
        raw = _ema_weights(raw, path)
    return _unwrap_state_dict(raw, path, notice or (lambda _m: None))


# What a file that is no torch checkpoint starts with, said instead of torch's unpickler error (a bare "101").
FILE_KINDS = (
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"BM", "a BMP image"),
    (b"%PDF", "a PDF document"),
    (b"\x1f\x8b", "a gzip archive (unpack it first)"),
    (b"\x93NUMPY", "a NumPy array file"),
    (b"\x89HDF", "an HDF5 file (Keras?), not a PyTorch checkpoint"),
)
TORCH_STARTS = (b"PK\x03\x04", b"\x80")  # torch.save's zip archive; the legacy format's pickle (protocol 2+)


def _check_kind(path: Path) -> None:
    """A file that cannot be a torch checkpoint is named for what it is, before torch reads a byte of it."""
    try:
        with path.open("rb") as handle:
            head = handle.read(512)
    except OSError as error:
        raise ModelError(f"⟨weights={path}⟩: cannot read it ({error.strerror or error})") from error
    if head.startswith(TORCH_STARTS):
        return
    if len(head) >= 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") < (100 << 20):
        what = "a safetensors file under another name; name it .safetensors"
    elif not head:
        what = "an empty file, 0 bytes"
    else:
        what = next((kind for start, kind in FILE_KINDS if head.startswith(start)), None) or (
            "a text file" if all(32 <= byte < 127 or byte in (9, 10, 13) for byte in head) else "not a torch checkpoint"
        )
    raise ModelError(f"⟨weights={path}⟩: not a loadable tensor checkpoint ({what}); give a .safetensors file or a .pth/.pt state dict")


def _load_failure(error: BaseException) -> str:
    """What went wrong, in words: torch's weights-only refusal names what it would have to import; an error
    without words (a KeyError's bare "101") says the file is damaged."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip()  # torch colours a word of its refusal
    found = re.search(r"Unsupported global: GLOBAL (\S+)", text) or re.search(r"WeightsUnpickler error: *(\S.*)", text)
    if found:
        return f"it pickles more than tensors: {one_line(found.group(1), 100)}"
    first = text.splitlines()[0] if text else ""
    if len([word for word in first.split() if word.isalpha()]) < 2:
        return f"damaged or truncated: {type(error).__name__} {one_line(first, 40)}".strip()
    return one_line(first, 200)


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


def _unwrap_state_dict(raw: Any, path: Path, notice: Callable[[str], None]) -> dict[str, torch.Tensor]:
    """Training scripts wrap the weights ({'state_dict': ...}, DataParallel's module.): take them out.

    DomainBed keeps its algorithm's state dict under `model_dict`, beside its
    arguments and hyperparameters: that one is said, being less common.
    """
    top = raw
    while isinstance(raw, dict):
        key = next((k for k in WRAPPER_KEYS if isinstance(raw.get(k), dict)), None)
        if key is None:
            break
        if key in SAID_WRAPPER_KEYS:
            notice(f"⟨weights={path}⟩: the weights are under '{key}' (a training checkpoint's), taken from there")
        raw = raw[key]
    if not isinstance(raw, dict) or not raw or not all(isinstance(v, torch.Tensor) for v in raw.values()):
        raise ModelError(f"⟨weights={path}⟩: holds no state dict of tensors ({_what_it_holds(top)})")
    state = {}
    for key, value in raw.items():
        for prefix in STRIPPED_PREFIXES:
            if key.startswith(prefix):
                key = key[len(prefix) :]
        state[key] = value
    return state


def _what_it_holds(raw: Any) -> str:
    """The top-level keys of a checkpoint without a state dict, so the user sees where the weights might be."""
    if not isinstance(raw, dict):
        return f"it holds a {type(raw).__name__}"
    if not raw:
        return "it is an empty mapping"
    keys = [one_line(key, 30) for key in list(raw)[:8]]
    more = f" and {len(raw) - 8} more" if len(raw) > 8 else ""
    return f"its top-level keys: {', '.join(keys)}{more}"


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
    """Strict load; a mismatch names a few missing and unexpected keys. Strict also means every parameter gets the
    checkpoint's values, which a model built unfilled (model/unfilled.py) relies on."""
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
