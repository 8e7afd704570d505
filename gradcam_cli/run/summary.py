"""The counts of a run, kept the same way by the engine and by the progress line, so the two always agree."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from gradcam_cli.outputs.records import ImageRecord


@dataclass
class Summary:
    done: int = 0
    failed: int = 0
    blank: int = 0
    skipped: int = 0  # --skip-existing: all outputs were there already
    correct: int = 0  # ground truth known and the model's top class is it
    wrong: int = 0
    frames: int = 0  # records of a video's frames among them
    slices: int = 0  # records of a volume's slices among them

    @property
    def total(self) -> int:
        return self.done + self.failed + self.skipped

    def count(self, record: ImageRecord) -> None:
        self.frames += record.frame is not None
        self.slices += record.slice is not None
        if record.skipped:
            self.skipped += 1
        else:
            self.done += record.ok
            self.failed += not record.ok
        self.blank += any(target.blank for target in record.targets)
        self.correct += record.correct is True
        self.wrong += record.correct is False

    def counts(self) -> dict[str, int]:
        """The counts as the runs file keeps them."""
        return {"total": self.total, **asdict(self)}
