"""Which class each map explains: top-1, named or numbered classes, or the top K."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from collections.abc import Sequence

from gradcam_cli.errors import UsageError

import torch


@dataclass(frozen=True)
class TargetChoice:
    """Explicit class indices (the same for every image), one per image, or the top K."""

    classes: tuple[int, ...] = ()
    per_image: bool = False
    topk: int = 1

    @property
    def count(self) -> int:
        if self.per_image:
            return 1
        return len(self.classes) if self.classes else self.topk

    def choose(self, logits: torch.Tensor) -> torch.Tensor:
        """(N, K) class indices for a batch of logits (N, classes)."""
        n, num_classes = logits.shape
        if not self.classes:
            k = min(self.topk, num_classes)
            return logits.detach().topk(k, dim=1).indices
        bad = [c for c in self.classes if not 0 <= c < num_classes]
        if bad:
            raise UsageError(f"class index {bad[0]} is out of range; the model has {num_classes} classes (0..{num_classes - 1})")
        chosen = torch.tensor(self.classes, dtype=torch.long, device=logits.device)
        if self.per_image:
            if len(self.classes) != n:
                raise UsageError(f"{len(self.classes)} classes given for a batch of {n} images; give one per image")
            return chosen[:, None]
        return chosen[None, :].expand(n, -1)


def parse_class(value: str | int, class_names: Sequence[str] | None) -> int:
    """`--class 281`, `--class tabby` or `--class "tabby, tabby cat"` → an index."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    if not class_names:
        raise UsageError(f"⟨classes='{text}'⟩: this model has no class names; give an index or ⟨labels=FILE⟩")
    lowered = [name.lower() for name in class_names]
    key = text.lower()
    if key in lowered:
        return lowered.index(key)
    short = [name.split(",")[0].strip() for name in lowered]
    if key in short:
        return short.index(key)
    close = difflib.get_close_matches(key, short, n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    raise UsageError(f"⟨classes='{text}'⟩ is not a class of this model{hint}; give a name from the labels or an index")


def target_choice(values: Sequence[str | int], topk: int, class_names: Sequence[str] | None) -> TargetChoice:
    if topk < 1:
        raise UsageError(f"⟨topk={topk}⟩: must be 1 or more")
    if values and topk > 1:
        raise UsageError("⟨classes⟩ and ⟨topk⟩ exclude each other; use one")
    return TargetChoice(classes=tuple(parse_class(v, class_names) for v in values), topk=topk)


@dataclass(frozen=True)
class FixedTargets:
    """Classes already chosen (N, K): reruns of a batch (test-time augmentation) explain the same ones."""

    chosen: torch.Tensor

    @property
    def count(self) -> int:
        return int(self.chosen.shape[1])

    def choose(self, logits: torch.Tensor) -> torch.Tensor:
        return self.chosen.to(logits.device)
