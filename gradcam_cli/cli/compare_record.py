"""What `gradcam compare` says: its record of one image, its console, and its spelling of option marks as its flags.

Compare's own flags are `--methods` and `--layers` where explain has `--method` and `--layer`; every message of the
run passes through `in_compare_flags` or `compare_flag`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from gradcam_cli.cli.console import Reporter, names_input
from gradcam_cli.errors import GradcamError, spelled
from gradcam_cli.option_words import as_flag
from gradcam_cli.outputs.text import described_score
from gradcam_cli.vocab import TargetKind

GRID_NAME = "compare"  # OUT/<input path>.compare.png: explain's naming rule, with `compare` where it has the method
OWN_FLAGS = {"method": "--methods", "layers": "--layers"}  # compare's spelling of the table's --method and --layer


def compare_flag(name: str, rest: str | None) -> str:
    """An option mark as compare's command line spells it: ⟨method=gradcam⟩ → --methods gradcam, ⟨layers⟩ → --layers."""
    if name in OWN_FLAGS:
        return f"{OWN_FLAGS[name]} {rest[1:]}" if rest and rest.startswith("=") else OWN_FLAGS[name]
    return as_flag(name, rest)


def in_compare_flags(error: GradcamError) -> GradcamError:
    """The error with its option marks spelled as compare's flags (main would spell ⟨layers⟩ as explain's --layer)."""
    error.message = spelled(error.message, compare_flag)
    error.hint = spelled(error.hint, compare_flag) if error.hint else error.hint
    return error


@dataclass(frozen=True)
class CompareRecord:
    """What `gradcam compare` says of one image: its grid, what its cells explain, and where each cell of it is."""

    input: str
    ok: bool
    error: str | None = None
    model: str | None = None
    class_index: int | None = None
    class_name: str | None = None
    probability: float | None = None
    score: float | None = None  # the first cell's: its class's logit, a prompt's or the references' similarity
    target: str | None = None  # what the cells explain, as explain's records say it: class, detection, prompt, reference…
    prompts: list[str] | None = None  # a CLIP-style model's prompts (several: the columns)
    references: list[str] | None = None  # an embedding model's reference images, the similarity to their mean
    output: str | None = None
    outputs: list[str] = field(default_factory=list)  # the grid again, where `gradcam report` looks for a picture
    rows: list[str] = field(default_factory=list)  # the layers (a sweep's checkpoints), top to bottom
    down: str = "layers"  # what the rows are: layers, or (a sweep of ⟨weights⟩) checkpoints
    resolutions: list[list[int] | None] = field(default_factory=list)  # each row's map: [height, width] (None: not known)
    across: str = "methods"  # what the columns are: methods, or (several prompts) prompts
    columns: list[str] = field(default_factory=list)  # the methods, or the prompts, left to right
    cells: list[dict[str, Any]] = field(default_factory=list)  # row, col, layer, method, class_index, class_name, score, blank,
    # range, box [x, y, w, h]

    def to_json(self) -> str:
        from gradcam_cli.outputs.records import utf8

        record = {k: utf8(v) if isinstance(v, str) else v for k, v in asdict(self).items()}
        return json.dumps(record, ensure_ascii=False, allow_nan=False)

    def human_line(self) -> str:
        if not self.ok:
            error = self.error or "failed"
            return f"✗ {error}" if names_input(error, self.input) else f"✗ {self.input}: {error}"
        blank = sum(cell["blank"] for cell in self.cells)
        note = f"  ({blank} blank map{'s' if blank > 1 else ''}: no positive evidence there)" if blank else ""
        size = f"{len(self.rows)}x{len(self.columns)} ({self.down} x {self.across})"
        return f"✓ {self.input} → {self.output}  {self._explains()}  {size}{note}"

    def _explains(self) -> str:
        """What the cells explain: a class and its probability, a prompt and its similarity, or the prompts' method."""
        if self.across == "prompts":
            return f"{len(self.columns)} prompts, {self.cells[0]['method'] if self.cells else ''}"
        kind = TargetKind(self.target) if self.target in {kind.value for kind in TargetKind} else TargetKind.single_class
        said = described_score(kind, self.class_index, self.class_name, self.score)
        if said is not None:
            return said
        name = f" {self.class_name}" if self.class_name else ""
        return f"class {self.class_index}{name}" + (f" p={self.probability:.3f}" if self.probability is not None else "")

    def remarks(self) -> list[str]:
        """What stderr says of the image beside its JSON record: why it failed, which cells are blank."""
        if not self.ok:
            return [self.error or f"{self.input}: failed"]
        column = "class_name" if self.across == "prompts" else "method"
        blank = [f"{cell[column]} @ {cell['layer']}" for cell in self.cells if cell["blank"]]
        return [f"{self.input}: blank maps (no positive evidence) for {', '.join(blank)}"] if blank else []


class GridReporter(Reporter):
    """explain's console, for grids: the record (and its remarks) or the line, above the progress line, which advances."""

    def record(self, record: CompareRecord) -> None:
        from gradcam_cli.outputs.records import ImageRecord

        if self.stdout_closed:
            return
        if self.as_json:
            for remark in record.remarks():
                self.warn(remark)
            self._out(record.to_json())
        else:
            self._out(record.human_line())
        if self.progress:
            self.progress.advance(ImageRecord(input=record.input, ok=record.ok))
