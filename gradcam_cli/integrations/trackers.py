"""A command's overlays, records and eval summaries sent to experiment trackers beside its files (⟨tensorboard⟩, ⟨wandb⟩).

The files stay the run's result: a tracker only gets copies, read back from the PNGs as each record comes. A tracker
that fails mid-run is named once and dropped, the run goes on. Each picture's tag is its output's path in the output
folder, so the same image keeps its tag from one checkpoint of a sweep to the next and the tracker's step slider shows
how its map changed. tensorboard and wandb are imported only here, and only when asked for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from PIL import Image

from gradcam_cli.errors import UsageError, one_line
from gradcam_cli.outputs.records import ImageRecord

RECORD_COLUMNS = ["input", "frame", "slice", "class", "probability", "score", "blank", "true_class", "correct", "error", "overlay"]


VIDEO_SUFFIXES = (".mp4",)  # the overlay videos explain writes (outputs/video_files.py)


@dataclass(frozen=True)
class Picture:
    """One overlay a record lists: its tag (the output's path in the folder, less its suffix), file and caption."""

    tag: str
    path: Path
    caption: str

    @property
    def video(self) -> bool:
        return self.path.suffix.lower() in VIDEO_SUFFIXES


class Backend(Protocol):
    def pictures(self, pictures: Sequence[Picture], step: int) -> None: ...
    def table(self, name: str, columns: list[str], rows: list[list[Any]], step: int) -> None: ...
    def scalars(self, values: dict[str, float], step: int) -> None: ...
    def close(self) -> None: ...


def pictures_of(record: ImageRecord, output_dir: Path) -> list[Picture]:
    """The PNG overlays and overlay videos of a done explain record, each captioned with the class and
    probability it shows (a video none: its frames differ)."""
    if not record.ok or record.skipped:
        return []
    captions = _captions(record)
    pictures = []
    for output in dict.fromkeys([*record.outputs, *(t.overlay for t in record.targets if t.overlay)]):
        path = Path(output)
        if path.suffix.lower() not in (".png", *VIDEO_SUFFIXES):
            continue  # a NIfTI map, a raw array: the records' rows tell of them
        try:
            tag = path.relative_to(output_dir).with_suffix("").as_posix()
        except ValueError:
            tag = path.with_suffix("").name
        caption = "" if path.suffix.lower() in VIDEO_SUFFIXES else captions.get(output, captions.get("", ""))
        pictures.append(Picture(tag, path, caption))
    return pictures


def _captions(record: ImageRecord) -> dict[str, str]:
    """Overlay path → `CLASS p=0.93` (a detection's score, a region's mean probability); "" → the record's top class."""

    def said(name: str | None, index: int | None, value: float | None, word: str = "p") -> str:
        shown = name if name is not None else f"class {index}"
        return shown if value is None else f"{shown} {word}={value:.2f}"

    captions = {"": said(record.class_name, record.class_index, record.probability)} if record.class_index is not None else {}
    for target in record.targets:
        if target.overlay:
            captions[target.overlay] = said(target.class_name, target.class_index, target.probability)
    for found in record.detections or []:
        if found.overlay:
            captions[found.overlay] = said(found.class_name, found.class_index, found.score, "score")
    for region in record.segments or []:
        if region.overlay:
            captions[region.overlay] = said(region.class_name, region.class_index, region.mean_probability)
    return captions


def row_of(record: ImageRecord) -> list[Any]:
    """A record as one row of the tracker's records table (RECORD_COLUMNS)."""
    overlay = next((t.overlay for t in record.targets if t.overlay), None)
    probability, score = (None if v is None else round(v, 4) for v in (record.probability, record.score))
    return [
        record.input, record.frame, record.slice, record.class_name, probability, score, record.blank, record.true_class,
        record.correct, record.error, overlay,
    ]  # fmt: skip


def eval_values(summary: dict[str, Any]) -> dict[str, float]:
    """eval's summary as scalars `eval/MAP/MEASURE`: each map set's mean for each measure."""
    values = {}
    for name, result in summary["results"].items():
        for measure in summary["measures"]:
            mean = result[measure]["mean"]
            if isinstance(mean, (int, float)):
                values[f"eval/{name}/{measure}"] = float(mean)
    return values


class Trackers:
    """The trackers a command was asked for, fed as it goes: each record's overlays at the current step, its row in the
    step's records table, an eval's summary; one that fails is named once through `warn` and dropped."""

    def __init__(self, opened: dict[str, Callable[[dict[str, Any]], Backend]]) -> None:
        self.opened = opened
        self.backends: dict[str, Backend] = {}
        self.warn: Callable[[str], None] = lambda _m: None
        self.output_dir, self.step = Path("."), 0
        self.rows: list[list[Any]] = []
        self.logged: set[Path] = set()
        self.pending: dict[Path, Picture] = {}  # written after their records (a volume's montage, a video): at the step's end

    def __bool__(self) -> bool:
        return bool(self.opened or self.backends)

    def start(self, config: dict[str, Any], output_dir: Path, warn: Callable[[str], None], step: int = 0) -> None:
        """Open each tracker (the first time) with what the run is (`config`); from here on, log the records of
        `output_dir` at `step` (a sweep's checkpoint), failures said through `warn`."""
        self.warn, self.output_dir, self.step, self.rows, self.logged, self.pending = warn, output_dir, step, [], set(), {}
        for name, open_backend in list(self.opened.items()):
            del self.opened[name]
            try:
                self.backends[name] = open_backend(config)
            except Exception as error:  # noqa: BLE001 - any tracker failure: said, the files are written as before
                self.warn(f"⟨{name}⟩: cannot start ({one_line(error)}); the outputs are written without it")

    def record(self, record: ImageRecord) -> None:
        """A record's overlays as images, and its row kept for the step's table."""
        pictures = [p for p in pictures_of(record, self.output_dir) if p.path not in self.logged]
        self.pending.update({p.path: p for p in pictures if p.video or not p.path.is_file()})  # a video: whole at its end
        self.rows.append(row_of(record))
        self._log([p for p in pictures if p.path not in self.pending])

    def _log(self, pictures: list[Picture]) -> None:
        self.logged.update(p.path for p in pictures)
        if pictures:
            self._each(lambda backend: backend.pictures(pictures, self.step))

    def end_step(self) -> None:
        """The pictures that came after their records (a volume's montage, a video), and the step's records table."""
        self._log([p for p in self.pending.values() if p.path.is_file()])
        self.pending = {}
        if self.rows:
            rows, self.rows = self.rows, []
            self._each(lambda backend: backend.table("records", RECORD_COLUMNS, rows, self.step))

    def evaluation(self, summary: dict[str, Any], written: Sequence[Path], csv_rows: list[list[Any]]) -> None:
        """eval's summary: each map set's means as scalars, its table (eval.csv's rows, as the file spells each cell), its
        charts as images."""
        table = [[str(cell) for cell in row] for row in csv_rows]
        charts = [Picture(f"eval/chart/{path.stem.removeprefix('eval_')}", path, "") for path in written if path.suffix == ".png"]
        self._each(lambda backend: backend.scalars(eval_values(summary), self.step))
        if len(table) > 1:
            self._each(lambda backend: backend.table("eval", table[0], table[1:], self.step))
        self._each(lambda backend: backend.pictures(charts, self.step))

    def close(self) -> None:
        self.end_step()
        self._each(lambda backend: backend.close())
        self.backends = {}

    def _each(self, call: Callable[[Backend], None]) -> None:
        for name, backend in list(self.backends.items()):
            try:
                call(backend)
            except Exception as error:  # noqa: BLE001 - a tracker's failure never costs the run its files
                del self.backends[name]
                self.warn(f"⟨{name}⟩: stopped logging ({one_line(error)}); the outputs are written without it")
                with contextlib.suppress(Exception):
                    backend.close()  # what it took before failing is kept, as far as it can still write


class TensorBoardBackend:
    """Event files in a folder: each overlay's PNG as it is (no decoding and encoding again), tables as Markdown text
    (columns empty in every row left out),
    means as scalars; written by tensorboard's event writer, flushed every 10 s, at each step's end and at the close."""

    def __init__(self, folder: Path) -> None:
        from torch.utils.tensorboard.writer import FileWriter

        self.writer = FileWriter(str(folder), flush_secs=10)

    def pictures(self, pictures: Sequence[Picture], step: int) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        for picture in (p for p in pictures if not p.video):  # TensorBoard plays no MP4: a video's frames are table rows
            with Image.open(picture.path) as image:  # the header: its size and bands
                size, bands = image.size, len(image.getbands())
            encoded = Summary.Image(width=size[0], height=size[1], colorspace=bands, encoded_image_string=picture.path.read_bytes())
            self.writer.add_summary(Summary(value=[Summary.Value(tag=picture.tag, image=encoded)]), global_step=step)

    def table(self, name: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        from torch.utils.tensorboard.summary import text

        kept = [i for i in range(len(columns)) if any(row[i] not in (None, "") for row in rows)]  # no empty `frame` for photos
        lines = ["| " + " | ".join(columns[i] for i in kept) + " |", "|" + "---|" * len(kept)]
        lines += ["| " + " | ".join("" if row[i] is None else str(row[i]).replace("|", "\\|") for i in kept) + " |" for row in rows]
        self.writer.add_summary(text(name, "\n".join(lines)), global_step=step)
        self.writer.flush()

    def scalars(self, values: dict[str, float], step: int) -> None:
        from torch.utils.tensorboard.summary import scalar

        for tag, value in values.items():
            self.writer.add_summary(scalar(tag, value), global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbBackend:
    """A W&B run: overlays as wandb.Image captioned with class and probability, tables as wandb.Table, means as
    metrics. WANDB_MODE=offline keeps it in the local folder (`wandb sync` sends it later)."""

    def __init__(self, project: str, job_type: str, config: dict[str, Any]) -> None:
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=project, job_type=job_type, config=config)

    def pictures(self, pictures: Sequence[Picture], step: int) -> None:
        if pictures:
            media = {p.tag: (self.wandb.Video if p.video else self.wandb.Image)(str(p.path), caption=p.caption or None) for p in pictures}
            self.run.log(media, step=step)

    def table(self, name: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        data = [["" if value is None else value for value in row] for row in rows]
        self.run.log({name: self.wandb.Table(columns=[*columns], data=data)}, step=step)

    def scalars(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        self.run.finish()


def open_trackers(outputs: Any, job_type: str) -> Trackers:
    """The trackers `outputs` asks for (⟨tensorboard⟩, ⟨wandb⟩), their libraries checked now, opened at `start`."""
    opened: dict[str, Callable[[dict[str, Any]], Backend]] = {}
    if outputs.tensorboard is not None:
        _require("tensorboard", "TensorBoard's event files")
        folder = Path(outputs.tensorboard)
        opened["tensorboard"] = lambda _config: TensorBoardBackend(folder)
    if outputs.wandb is not None:
        _require("wandb", "Weights & Biases")
        project = str(outputs.wandb)
        opened["wandb"] = lambda config: WandbBackend(project, job_type, config)
    return Trackers(opened)


def _require(name: str, what: str) -> None:
    """The tracker's library importable, else one line naming the extra that brings it (option, module and extra share
    the name)."""
    import importlib.util

    if importlib.util.find_spec(name) is None:
        raise UsageError(f"⟨{name}⟩ logs to {what}, which is not installed: pip install 'gradcam-cli[{name}]'")
