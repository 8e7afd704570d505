"""What a comparison's columns are, what each cell keeps of explain()'s result, and the words over the grid.

The columns are the methods (`--methods`), every cell explaining one target:
the class of the first cell, a detector's detection, a segmenter's first
region, a CLIP-style model's one prompt or an embedding model's references,
which the header names with its score. With several `--prompt`s on a
CLIP-style model the columns are the prompts under one method instead: a row
is one explain() of the image with every prompt, the run `gradcam explain
--prompt P1 --prompt P2 … --layer L` makes, and column k is its map of prompt
k; each column's label is its prompt (on up to two lines) and its similarity.
Several prompts with several methods would be a third axis on a
two-dimensional grid: they are refused, in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gradcam_cli.errors import InputError, UsageError
from gradcam_cli.outputs.text import described_score
from gradcam_cli.vocab import TargetKind

HEADER_PROMPT = 48  # the most characters of a prompt (or a references' name) in the header: its score and the model after it


@dataclass(frozen=True)
class Columns:
    """A comparison's columns: its methods, or (several prompts) the prompts under its one method."""

    methods: tuple[str, ...]
    prompts: tuple[str, ...] = ()  # the CLIP-style model's prompts, in the order given

    @staticmethod
    def of(methods: Sequence[str], prompts: Sequence[str], detection: int | None = None) -> Columns:
        """The columns asked for; several prompts with several methods refused (a grid has two axes, the rows are layers)."""
        if len(prompts) > 1 and len(methods) > 1:
            raise UsageError(
                f"the {len(prompts)} prompts (⟨prompts⟩) are the grid's columns, so it shows one method, not {len(methods)}: "
                "give one in ⟨method⟩ (a run per method), or compare the methods on one prompt"
            )
        if prompts and detection is not None:
            raise UsageError("⟨detection⟩ picks one of a detector's detections; ⟨prompts⟩ are a CLIP-style model's (leave it out)")
        return Columns(tuple(methods), tuple(prompts))

    @property
    def by_prompt(self) -> bool:
        return len(self.prompts) > 1

    @property
    def names(self) -> list[str]:
        """Each column's name, left to right: its method, or its prompt."""
        return list(self.prompts if self.by_prompt else self.methods)

    @property
    def what(self) -> str:
        return "prompts" if self.by_prompt else "methods"

    def cells(self, explained: Any, detection: int | None) -> list[Cell]:
        """The cells one explain() of a row gives: every prompt's, or the one of its method."""
        if not self.by_prompt:
            return [Cell.of(explained, detection)]
        return [Cell.of_target(explained, k) for k in range(len(explained.targets))]

    def header(self, first: Cell, kind: TargetKind, model: str) -> str:
        """The grid's header: the target every cell explains and its score, or the prompts' method; then the model."""
        if self.by_prompt:
            return f"{self.methods[0]} maps of {len(self.prompts)} prompts (sim: the model's similarity score)  ·  {model}"
        name = first.class_name or f"class {first.class_index}"
        if kind is TargetKind.prompt:  # a long prompt cut, so that its score and the model stay in the header
            said = f'"{cut(name, HEADER_PROMPT)}"  {scores_text([first.score])[0]}'
        elif kind is TargetKind.reference:
            said = f"like {cut(name, HEADER_PROMPT)}  cos={first.score:.3f}"
        else:
            said = described_score(kind, first.class_index, name, first.score) or (
                f"{name}  p={first.probability:.2f}" if first.probability is not None else f"{name}  {first.score:.4g}"
            )
        which = "" if first.detection is None else f", detection {first.detection}"
        return f"{said}{which}  ·  {model}"

    def notes(self, first_row: Sequence[Cell]) -> list[str] | None:
        """Under each prompt, its similarity, every column with as many decimals; None: the columns are methods."""
        return scores_text([cell.score for cell in first_row]) if self.by_prompt else None


def cut(text: str, most: int) -> str:
    """A text of at most `most` characters: cut between words with '…' when longer."""
    if len(text) <= most:
        return text
    head = text[: most - 1]
    space = head.rfind(" ")
    return (head[:space] if space > most // 2 else head).rstrip() + "…"


def scores_text(scores: Sequence[float]) -> list[str]:
    """Scores side by side (`sim=27.31`), each with as many decimals: two where one reaches 1 (CLIP's logits, ~20 to 35),
    else three."""
    decimals = 2 if any(abs(score) >= 1 for score in scores) else 3
    return [f"sim={score:.{decimals}f}" for score in scores]


@dataclass(frozen=True)
class Cell:
    """What the grid and the record keep of one cell: its overlay, target, blank flag and the range of its map's values."""

    overlay_rgb: Any
    class_index: int
    class_name: str | None
    probability: float | None
    blank: bool
    range: list[float]  # the map's lowest and highest value as computed: [0, 1] with minmax, its raw values with none
    detection: int | None = None  # a detector's cell: the rank of the detection it explains
    score: float = 0.0  # what the map explains: the class's logit, the detection's score, a prompt's similarity

    @staticmethod
    def of(explained: Any, detection: int | None = None) -> Cell:
        if explained.detections is not None:
            return Cell.of_detection(explained, detection or 0)
        if explained.segments is not None and detection is None:
            return Cell.of_region(explained)
        if detection is not None:
            raise UsageError("⟨detection⟩ picks one of a detector's detections; this model is no detector (leave it out)")
        return Cell.of_target(explained, 0)

    @staticmethod
    def of_target(explained: Any, k: int) -> Cell:
        """A classifier's (or a similarity's) cell: its k-th target's overlay and map."""
        import numpy as np

        target = explained.targets[k]
        raw = target.raw
        return Cell(
            np.asarray(target.overlay), target.class_index, target.class_name, target.probability, bool(target.blank),
            [round(float(raw.min()), 6), round(float(raw.max()), 6)], score=float(target.score),
        )  # fmt: skip

    @staticmethod
    def of_region(explained: Any) -> Cell:
        """A segmenter's cell: its first region's overlay and map (the cells after: its class); none is the image's error."""
        import numpy as np

        if not explained.segments:
            raise InputError("<array>: no class covers ⟨min_area⟩ of this image; name one with ⟨classes⟩")
        region = explained.segments[0]
        return Cell(
            np.asarray(region.overlay), region.class_index, region.class_name, region.record.mean_probability,
            bool(region.record.blank), [round(float(region.map.min()), 6), round(float(region.map.max()), 6)],
            score=float(region.record.score),
        )  # fmt: skip

    @staticmethod
    def of_detection(explained: Any, rank: int) -> Cell:
        """A detector's cell: detection `rank`'s own overlay (only its box) and map; an image with fewer is its error."""
        import numpy as np

        if rank >= len(explained.detections):
            raise InputError(
                f"<array>: {len(explained.detections)} detection(s) reach the score threshold, so there is no detection {rank}; "
                "pick a lower ⟨detection⟩ or ⟨score_threshold⟩"
            )
        found = explained.detections[rank]
        return Cell(
            np.asarray(found.overlay), found.class_index, found.class_name, found.score, bool(found.record.blank),
            [round(float(found.map.min()), 6), round(float(found.map.max()), 6)], rank, float(found.score),
        )  # fmt: skip
