"""Where the model runs: the device, the autocast precision, out-of-memory recovery.

Kept apart from building models: a run resolves the device before it loads
anything, and the CLI lists PRECISIONS without importing torch.
"""

from __future__ import annotations


from gradcam_cli.errors import UsageError

import torch
from torch import nn


def resolve_device(text: str, local_rank: int | None = None) -> torch.device:
    """auto → CUDA, then Apple MPS, then CPU; an explicit choice must exist.

    Under a launcher (torchrun, SLURM) auto is the GPU of the process's rank on its node, `cuda:LOCAL_RANK`
    (modulo the GPUs there, so eight processes on four GPUs pair up).
    """
    text = (text or "auto").strip().lower()
    if text == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank % torch.cuda.device_count()) if local_rank is not None else torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(text)
    except RuntimeError:
        raise UsageError(f"⟨device='{text}'⟩ is not a device; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"⟨device={text}⟩: CUDA is not available here; use ⟨device=cpu⟩ or auto")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UsageError(f"⟨device={text}⟩: only {torch.cuda.device_count()} CUDA device(s) here")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise UsageError("⟨device=mps⟩: Apple MPS is not available here; use ⟨device=cpu⟩ or auto")
    if device.type not in ("cpu", "cuda", "mps"):
        raise UsageError(f"⟨device='{text}'⟩ is not supported; use auto, cpu, cuda, cuda:N or mps")
    return device


PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def resolve_precision(text: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for the model's passes, or None for plain fp32.

    auto: bf16 on a CUDA GPU that supports it (else fp16 there), fp32 elsewhere:
    CPU autocast is not faster on every processor and changes the numbers, so
    it is only used when asked for. The CAM maths always run in fp32.
    """
    text = (text or "auto").strip().lower()
    if text not in PRECISIONS:
        raise UsageError(f"⟨precision='{text}'⟩ is unknown; use one of {', '.join(PRECISIONS)}")
    if text == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps" and text != "fp32":
        raise UsageError(f"⟨precision={text}⟩ is not supported on MPS here; use fp32")
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[text]


def is_out_of_memory(error: BaseException) -> bool:
    """CUDA, MPS or CPU allocation failure, whichever class the torch build raises it as."""
    if isinstance(error, getattr(torch.cuda, "OutOfMemoryError", ())):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def free_device_memory(device: torch.device) -> None:
    """Give cached blocks back after an out-of-memory error, so a smaller retry can fit."""
    import gc

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
    model.to(device)
    convolutional = any(isinstance(m, nn.Conv2d) and m.kernel_size != m.stride for m in model.modules())
    if convolutional and device.type in ("cpu", "cuda"):
        model.to(memory_format=torch.channels_last)
        return True
    return False
