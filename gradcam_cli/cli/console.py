"""The one console of a run: its streams, the record lines on stdout, messages and progress on stderr.

Tests give `main` their own `Streams` (httpie's `Environment` is the model),
so the human output and the progress display are driven through it, not by
patching `sys`. A stream that is not a terminal can say it is one
(`stderr_tty=True`) to exercise the progress line.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from gradcam_cli.errors import printable
from gradcam_cli.option_words import in_flags


@dataclass(frozen=True)
class Streams:
    """stdin, stdout, stderr and whether each output is a terminal: the whole environment a command writes to.

    `stdout_tty`/`stderr_tty` left as None ask the stream itself (`isatty`).
    """

    stdin: TextIO
    stdout: TextIO
    stderr: TextIO
    stdout_is_terminal: bool | None = None
    stderr_is_terminal: bool | None = None
    command: tuple[str, ...] = ()  # the words the command was started with, for the run's own record (runs.jsonl)

    @staticmethod
    def current() -> Streams:
        return Streams(sys.stdin, sys.stdout, sys.stderr)

    @property
    def stdout_tty(self) -> bool:
        return _is_terminal(self.stdout, self.stdout_is_terminal)

    @property
    def stderr_tty(self) -> bool:
        return _is_terminal(self.stderr, self.stderr_is_terminal)

    def warn(self, message: str) -> None:
        try:
            print(f"gradcam: {message}", file=self.stderr, flush=True)
        except BrokenPipeError:  # nobody reads stderr any more; never let that fail an image (warn runs in workers)
            pass


def _is_terminal(stream: TextIO, told: bool | None) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)()) if told is None else told


NO_INPUT_GIVEN = "no input given; name images, folders, globs or - for paths on stdin"
NO_IMAGE_FOUND = "no image found in the inputs (folders are scanned for image files; add -r to recurse)"


class StdoutClosed(Exception):
    """The reader of stdout went away (`| head`). Not an OSError: typer and click turn EPIPE into a bare exit 1."""


def write_line(stream: TextIO, text: str) -> None:
    """One write per line: a Ctrl-C between print's two writes would glue two JSON records together."""
    try:
        stream.write(text + "\n")
        stream.flush()
    except BrokenPipeError:
        raise StdoutClosed() from None


def human_line(record: Any) -> str:
    """One line per image on a terminal: done, skipped (outputs there) or failed (the path once)."""
    if record.skipped:
        return f"↷ {record.input}: skipped, outputs exist ({', '.join(record.outputs)})"
    if not record.ok:
        error = record.error or "failed"
        return f"✗ {error}" if names_input(error, record.input) else f"✗ {record.input}: {error}"
    truth = f"  (wrong: it is {record.true_class})" if record.correct is False else ""
    where = f"{record.input}{_within(record)}"
    return f"✓ {where} → {', '.join(record.outputs) or 'no map'}  {_explained(record)}{truth}{_blank_note(record)}"


def _within(record: Any) -> str:
    """Where in its input a video's frame or a volume's slice is: ` frame 12 (0.50 s)`, ` slice 7`."""
    if getattr(record, "frame", None) is not None:
        return f" frame {record.frame} ({record.time or 0.0:.2f} s)"
    if getattr(record, "slice", None) is not None:
        return f" slice {record.slice}"
    return ""


def _explained(record: Any) -> str:
    """What the maps explain: `class 281 tabby p=0.930`, `labels 3 dog p=0.91, 7 cat p=0.62`, `output 0 = 3.2`."""
    kind = str(record.target or "")
    if record.detections is not None:
        return _detected(record)
    if record.segments is not None:
        return _segmented(record)
    scored = _scored(kind, record)
    if scored is not None:
        return scored
    if kind.startswith("multilabel"):
        if not record.targets:
            top = record.topk[0] if record.topk else None
            best = f"; the likeliest: {top['name'] or top['index']} p={top['probability']:.3f}" if top else ""
            return f"no label above the threshold{best}"
        return ("labels " if len(record.targets) > 1 else "label ") + ", ".join(
            _class_words(t.class_index, t.class_name, t.probability) for t in record.targets
        )
    return "class " + _class_words(record.class_index, record.class_name, record.probability)


def _scored(kind: str, record: Any) -> str | None:
    """A regression's value and a similarity's score, as the pictures' captions say them; None for a class."""
    from gradcam_cli.outputs.text import described_score
    from gradcam_cli.vocab import TargetKind

    base = kind.split(",")[0]
    if base not in (TargetKind.regression.value, TargetKind.prompt.value, TargetKind.reference.value):
        return None
    return ", ".join(str(described_score(TargetKind(base), t.class_index, t.class_name, t.score)) for t in record.targets) or None


def _detected(record: Any) -> str:
    """A detector's image: `2 detections: star 0.93 (tp), circle 0.92 (tp); missed: circle`."""
    found = [f"{d.class_name or d.class_index} {d.score:.2f}" + (f" ({d.match})" if d.match else "") for d in record.detections]
    words = f"{len(found)} detection{'s' * (len(found) != 1)}" + (": " + ", ".join(found) if found else "")
    missed = [str(m.class_name or m.class_index) for m in record.missed or []]
    return words + ("; missed: " + ", ".join(missed) if missed else "")


def _segmented(record: Any) -> str:
    """A segmenter's image: `2 regions: cat 12.5% p=0.91 (IoU 0.84), dog 3.1% p=0.77; missed: dog 1.2%`."""

    def words(s: Any) -> str:
        iou = f" (IoU {s.iou:.2f})" if s.iou is not None else ""
        return f"{s.class_name or f'class {s.class_index}'} {100 * s.area_fraction:.1f}% p={s.mean_probability:.2f}{iou}"

    found = [words(s) for s in record.segments if s.region != "missed"]
    missed = [f"{s.class_name or f'class {s.class_index}'} {100 * s.area_fraction:.1f}%" for s in record.segments if s.region == "missed"]
    said = f"{len(found)} region{'s' * (len(found) != 1)}" + (": " + ", ".join(found) if found else "")
    return said + ("; missed: " + ", ".join(missed) if missed else "")


def _class_words(index: int, name: str | None, probability: float | None) -> str:
    return f"{index}{f' {name}' if name else ''}{f' p={probability:.3f}' if probability is not None else ''}"


def _blank_note(record: Any) -> str:
    """A blank map on the image's own line: which class, when several were explained, and what to try."""
    blanks = [str(target.class_index) for target in record.blank_targets()]
    if not blanks:
        return ""
    which = f" for class {', '.join(blanks)}" if len(record.targets) > 1 else ""
    return f"  (blank map{which}: try another --layer or --class)"


def names_input(error: str, input_path: str) -> bool:
    """Whether an error message already starts with its input (the engine's do, maybe shortened: `…` and its end)."""
    head = error.split(": ", 1)[0]
    if head == input_path or (head.startswith("…") and printable(input_path).endswith(head[1:])):
        return True
    try:
        return Path(head) == Path(input_path)
    except (TypeError, ValueError):
        return False


class Reporter:
    """Records to stdout, messages to stderr; each failure and blank map is said once.

    As JSON, the record goes to stdout and its remarks (why it failed, which
    map is blank) to stderr, one line each. As human lines, the image's own
    `✓`/`✗` line says it all. Messages about the run itself (out of memory,
    notices) go to stderr as they come.
    """

    def __init__(self, streams: Streams, as_json: bool, progress: ProgressLine | None) -> None:
        self.streams, self.as_json, self.progress = streams, as_json, progress
        # both on one terminal: record lines go above the progress line instead of through it
        self.on_console = progress is not None and streams.stdout_tty and _same_terminal(streams)
        self.stdout_closed = False

    def warn(self, message: str) -> None:
        self._say(message)

    def record(self, record: Any) -> None:
        if self.stdout_closed:
            return  # the reader went away: the engine is only finishing the files being written
        if self.as_json:
            for remark in record.remarks():
                self._say(in_flags(remark))
            self._out(record.to_json())
        else:
            self._out(human_line(record))
        if self.progress:
            self.progress.advance(record)

    def failed_input(self, source: Any) -> None:
        """A named input that failed before any model was loaded: its line and record, as in a run."""
        from gradcam_cli.outputs.records import ImageRecord

        self.record(ImageRecord(input=str(source.path), ok=False, error=source.error))

    def _out(self, text: str) -> None:
        if self.on_console:
            assert self.progress is not None
            self.progress.print(text)
            return
        try:
            write_line(self.streams.stdout, text)
        except StdoutClosed:
            self.stdout_closed = True
            raise

    def _say(self, message: str) -> None:
        (self.progress.warn if self.progress else self.streams.warn)(message)

    def close(self) -> None:
        if self.progress:
            self.progress.stop()


def _same_terminal(streams: Streams) -> bool:
    try:
        return os.fstat(streams.stdout.fileno()).st_rdev == os.fstat(streams.stderr.fileno()).st_rdev
    except (AttributeError, OSError, ValueError):
        return False


class ProgressLine:
    """A rich progress line on stderr, only when stderr is a terminal: with a known total, a bar, rate and time left."""

    def __init__(self, streams: Streams, total: int | None, verb: str = "explained") -> None:
        from rich.console import Console
        from rich.progress import Progress

        from gradcam_cli.run.summary import Summary

        self.console = Console(file=streams.stderr, stderr=True, force_terminal=streams.stderr_tty)
        self.bar = Progress(*_progress_columns(total), console=self.console, transient=True)
        self.task = self.bar.add_task("loading model", total=total)
        self.summary = Summary()  # counted as the engine counts, so the line agrees with the closing summary
        self.verb = verb
        self.bar.start()

    def advance(self, record: Any) -> None:
        self.summary.count(record)
        self.bar.update(self.task, advance=1, description=self._counts())

    def loaded(self) -> None:
        self.bar.update(self.task, description=self._counts())

    def _counts(self) -> str:
        counts = self.summary
        skipped = f", {counts.skipped} skipped" if counts.skipped else ""
        failed = f", {counts.failed} failed" if counts.failed else ""
        return f"{self.verb} {counts.done}{skipped}{failed}"

    def detail(self, what: str, done: int, total: int) -> None:
        """Long work inside one batch (masked forwards of scorecam/ablationcam)."""
        self.bar.update(self.task, description=f"{self._counts()}; {what}: {done}/{total} forwards")

    def doing(self, what: str) -> None:
        """What the current batch is at (an evaluation's metric, the sanity check's step)."""
        self.bar.update(self.task, description=f"{self._counts()}; {what}")

    def print(self, text: str) -> None:
        """A record line, printed above the progress line (rich redraws it below)."""
        self.console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)

    def warn(self, message: str) -> None:
        self.print(f"gradcam: {message}")

    def stop(self) -> None:
        self.bar.stop()


def _progress_columns(total: int | None) -> tuple[Any, ...]:
    from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    if total is None:  # paths on stdin: how many will come is not known
        return SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn()
    return (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(bar_width=24),
        MofNCompleteColumn(),
        _rate_column(),
        TimeRemainingColumn(),
    )


def _rate_column() -> Any:
    """Images per second (seconds per image when slower), from rich's speed estimate."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task: Any) -> Text:
            speed = task.speed
            if not speed:
                return Text("")
            return Text(f"{speed:.1f} img/s" if speed >= 1 else f"{1 / speed:.1f} s/img", style="progress.data.speed")

    return Rate()


def progress_line(streams: Streams, quiet: bool, total: int | None = None, verb: str = "explained") -> ProgressLine | None:
    return ProgressLine(streams, total, verb) if streams.stderr_tty and not quiet else None
