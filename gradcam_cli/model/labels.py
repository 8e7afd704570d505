"""The user's class names file (--labels)."""

from __future__ import annotations

from pathlib import Path

from gradcam_cli.errors import UsageError
from gradcam_cli.model.messages import short


def read_labels(path: Path) -> list[str]:
    """One class name per line; byte-order marks (Windows editors write one) are no part of a name."""
    if not path.is_file():
        raise UsageError(f"⟨labels={path}⟩: no such file")
    try:
        lines = path.read_text(encoding="utf-8-sig").replace("\ufeff", "").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"⟨labels={path}⟩: cannot read it as UTF-8 text ({short(error)})") from error
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise UsageError(f"⟨labels={path}⟩ is empty; write one class name per line")
    return [line.strip() for line in lines]


IMAGENET_CLASSES = 1000  # the smallest of timm's ImageNet subsets (1k; 12k, 21k and 22k are larger)


def class_aliases(class_names: list[str] | None) -> list[str] | None:
    """Other names of the classes that datasets' folders use: ImageNet's WordNet ids (`n02123045`), when the
    classes are ImageNet's (ImageNet's own folder layout names each class folder by its id)."""
    if not class_names or len(class_names) < IMAGENET_CLASSES:  # no ImageNet subset is smaller: skip reading timm's tables
        return None
    from timm.data import ImageNetInfo  # the synsets ship with timm, beside the descriptions the timm hub names classes by

    for subset in ("imagenet-1k", "imagenet-22k"):
        info = ImageNetInfo(subset)
        first = info.index_to_description(0).split(",")[0]  # timm's "tench, Tinca tinca", torchvision's "tench"
        if info.num_classes() == len(class_names) and class_names[0].split(",")[0].strip() == first:
            return [str(name) for name in info.label_names()]
    return None
