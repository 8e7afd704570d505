"""Which class each map explains: top-1, named or numbered classes, the top K, or every label above a threshold."""

from __future__ import annotations

import contextlib
import difflib
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from gradcam_cli.errors import LayerError, UsageError
from gradcam_cli.model.state import first_tensor
from gradcam_cli.values import ClassIndex, class_index, normalised

import torch
from torch import nn

_Same = TypeVar("_Same", bound="ClassTargets")
DEFAULT_THRESHOLD = 0.5  # ⟨multilabel⟩'s labels: a sigmoid of at least this (the option table's doc says it)


@dataclass(frozen=True)
class Reading:
    """What a forward's result says to explain: the scores whose gradients make the maps, and what records need.

    The seam between a task and the engine: the engine differentiates `scores[:, k]` for each rank k and knows
    nothing else of the task. A classifier's ranks are its classes; a detector's are each image's detections.
    """

    scores: torch.Tensor  # (N, K) in the forward's graph: rank k of image n is what map (n, k) explains
    targets: torch.Tensor  # (N, K) class indices
    logits: torch.Tensor  # (N, classes) a classifier's scores; another task's (N, K) scores
    chosen: torch.Tensor | None = None  # (N, K) bool: the ranks each image keeps; None: all
    found: list[Any] | None = None  # per image, what the task found in it (a detector's boxes), detached


class Targets(Protocol):
    """What a task explains in a batch: read from the model's output (cams/targets.py for classes, cams/detections.py
    for detected objects)."""

    @property
    def count(self) -> int:
        """The most ranks one image can have."""

    def read(self, output: Any, model_name: str = "the model") -> Reading: ...

    def for_images(self, images: Sequence[Any]) -> Targets:
        """These targets for one batch, told what each image brings before the model runs (a segmenter's named region
        and true mask, cams/segments.py); the others need nothing and are the same."""

    def forwarding(self, model: nn.Module) -> contextlib.AbstractContextManager[object]:
        """How the model forwards while these targets are read (a detector's missed objects: every candidate)."""

    def perturbed(self, reading: Reading, rank: int, model: nn.Module) -> tuple[Any, contextlib.AbstractContextManager[object]]:
        """How masked forwards score rank `rank` (None: its class's logit), and how the model forwards meanwhile."""


def class_scores(output: Any, model_name: str) -> torch.Tensor:
    """A classifier's (N, classes) scores in what its forward returned (model/outputs.py picked them already)."""
    logits = first_tensor(output.logits if hasattr(output, "logits") else output)
    if logits is None or logits.dim() != 2:
        raise LayerError(f"{model_name} does not return class scores of shape (N, classes)")
    return logits


def read_classes(choice: ClassTargets, output: Any, model_name: str) -> Reading:
    """A classifier's reading: the chosen classes' scores."""
    logits = class_scores(output, model_name)
    chosen = choice.choose(logits)
    return Reading(
        scores=logits.gather(1, chosen.to(logits.device)), targets=chosen, logits=logits, chosen=choice.explained(logits, chosen)
    )


class ClassTargets:
    """What every choice of classes shares: the forward's logits read, the model forwarding as it is, a masked forward
    scored by its class's logit. Its subclasses say `choose` (and `explained`, where images keep their own ranks)."""

    def choose(self, logits: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def explained(self, logits: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor | None:
        """(N, K) bool: the ranks each image keeps; None when it keeps all."""
        return None

    def read(self, output: Any, model_name: str = "the model") -> Reading:
        return read_classes(self, output, model_name)

    def for_images(self: _Same, images: Sequence[Any]) -> _Same:
        return self

    def forwarding(self, model: nn.Module) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext()

    def perturbed(self, reading: Reading, rank: int, model: nn.Module) -> tuple[Any, contextlib.AbstractContextManager[object]]:
        return None, contextlib.nullcontext()  # the logit of rank `rank`'s class


@dataclass(frozen=True)
class TargetChoice(ClassTargets):
    """Explicit class indices (the same for every image), one per image, the top K, or the labels above a threshold.

    With `threshold` (⟨multilabel⟩) each image has its own number of labels: a
    batch explains as many ranks as its most-labelled image has, and
    `explained` says which of them each image keeps.
    """

    classes: tuple[int, ...] = ()
    per_image: bool = False
    topk: int = 1
    threshold: float | None = None  # ⟨multilabel⟩: every label whose sigmoid reaches it
    regression: bool = False  # ⟨output_index⟩: the class is an output's position, its score a value

    @property
    def count(self) -> int:
        if self.per_image:
            return 1
        return len(self.classes) if self.classes else self.topk

    @property
    def by_threshold(self) -> bool:
        return self.threshold is not None and not self.classes

    def choose(self, logits: torch.Tensor) -> torch.Tensor:
        """(N, K) class indices for a batch of logits (N, classes)."""
        n, num_classes = logits.shape
        if self.by_threshold:
            most = int((logits.detach().float().sigmoid() >= float(self.threshold or 0)).sum(dim=1).max())
            return logits.detach().topk(max(1, most), dim=1).indices  # the sigmoid keeps the logits' order
        if not self.classes:
            k = min(self.topk, num_classes)
            return logits.detach().topk(k, dim=1).indices
        self.check(num_classes)
        chosen = torch.tensor(self.classes, dtype=torch.long, device=logits.device)
        if self.per_image:
            if len(self.classes) != n:
                raise UsageError(f"{len(self.classes)} classes given for a batch of {n} images; give one per image")
            return chosen[:, None]
        return chosen[None, :].expand(n, -1)

    def check(self, num_classes: int) -> None:
        """Every named class (or output value) is one the model has."""
        bad = [c for c in self.classes if not 0 <= c < num_classes]
        if bad and self.regression:
            raise UsageError(f"⟨output_index={bad[0]}⟩ is out of range; the model's output has {num_classes} values (0..{num_classes - 1})")
        if bad:
            raise UsageError(f"class index {bad[0]} is out of range; the model has {num_classes} classes (0..{num_classes - 1})")

    def explained(self, logits: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor | None:
        """(N, K) bool: the ranks each image keeps (its labels above the threshold); None when it keeps all."""
        if not self.by_threshold:
            return None
        return logits.detach().float().gather(1, chosen.to(logits.device)).sigmoid() >= float(self.threshold or 0)


def parse_class(value: str | int, class_names: Sequence[str] | None) -> int:
    """`--class 281`, `--class tabby`, `--class "tabby cat"` or `--class "tabby, tabby cat"` → an index.

    A name is found as a ⟨truth⟩ file's or a class folder's is (model/labels.py: every synonym, any case, `_` or `-`).
    """
    if isinstance(value, int):
        return value
    text = value.strip()
    index = class_index(text, f"⟨classes='{text}'⟩")
    if index is not None:
        return index
    if not class_names:
        raise UsageError(f"⟨classes='{text}'⟩: this model has no class names; give an index or ⟨labels=FILE⟩")
    classes = ClassIndex(class_names)
    found = classes.find(text)
    if found is not None:
        return found
    close = difflib.get_close_matches(normalised(text), classes.spellings(), n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    raise UsageError(f"⟨classes='{text}'⟩ is not a class of this model{hint}; give a name from the labels or an index")


def target_choice(
    values: Sequence[str | int],
    topk: int,
    class_names: Sequence[str] | None,
    *,
    multilabel: bool = False,
    threshold: float | None = None,
    output_index: int | None = None,
) -> TargetChoice:
    """The classes to explain, with the combinations that make no sense refused before any image is read."""
    if topk < 1:
        raise UsageError(f"⟨topk={topk}⟩: must be 1 or more")
    if values and topk > 1:
        raise UsageError("⟨classes⟩ and ⟨topk⟩ exclude each other; use one")
    if output_index is not None:
        if values or topk > 1 or multilabel:
            raise UsageError("⟨output_index⟩ explains one value of a regression output; it excludes ⟨classes⟩, ⟨topk⟩ and ⟨multilabel⟩")
        return TargetChoice(classes=(output_index,), regression=True)
    if threshold is not None and not multilabel:
        raise UsageError("⟨threshold⟩ picks the labels of a multi-label model: give it with ⟨multilabel=True⟩")
    if multilabel and (topk > 1 or (values and threshold is not None)):
        raise UsageError(
            "⟨multilabel=True⟩ explains every label above ⟨threshold⟩, or the ⟨classes⟩ named; ⟨topk⟩, "
            "and a threshold beside ⟨classes⟩, do not apply"
        )
    classes = tuple(parse_class(v, class_names) for v in values)
    if not multilabel:
        return TargetChoice(classes=classes, topk=topk)
    return TargetChoice(classes=classes, threshold=DEFAULT_THRESHOLD if threshold is None else threshold)


@dataclass(frozen=True)
class FixedTargets(ClassTargets):
    """Classes already chosen (N, K): reruns of a batch (test-time augmentation) explain the same ones."""

    chosen: torch.Tensor

    @property
    def count(self) -> int:
        return int(self.chosen.shape[1])

    def choose(self, logits: torch.Tensor) -> torch.Tensor:
        return self.chosen.to(logits.device)
