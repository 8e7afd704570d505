"""The records of one or several runs read and merged: one per input (video frame, volume slice), the latest that explained it.

A folder's `records.jsonl` (and any `records*.jsonl` beside it: one per
shard) and the files named on the command line (stdout kept with `>`) are
read; lines that are not records (not JSON, or a field of the wrong type:
report/check.py) are counted and said once per file, never fatal. Runs that resumed (`--skip-existing`) leave a skipped record after the
full one: the full one stays.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradcam_cli.errors import UsageError
from gradcam_cli.report.check import is_record, parse, run_entry
from gradcam_cli.inputs.sources import shown
from gradcam_cli.outputs.run_files import RECORDS_FILE, RUNS_FILES, pictures_written

Warn = Callable[[str], None]


@dataclass
class Collected:
    """What a report is built from: the merged records, the runs that made them, where their relative paths start."""

    records: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    bases: list[Path] = field(default_factory=list)  # folders a record's relative path may be relative to
    files: list[Path] = field(default_factory=list)
    writers: dict[str, dict[str, Any]] = field(default_factory=dict)  # each picture path: the last record that wrote it


def record_files(output_dir: Path, given: Iterable[Path]) -> list[Path]:
    """The output folder's records files, then each named file (a folder named: its records files)."""
    files = _in_folder(output_dir)
    for path in given:
        if path.is_dir():
            files += _in_folder(path)
        elif path.is_file():
            files.append(path)
        else:
            raise UsageError(f"{shown(str(path))}: no such records file; name the JSON Lines files a run wrote (or its output folder)")
    unique: dict[Path, None] = {}
    for path in files:
        unique.setdefault(path.resolve(), None)
    return list(unique)


def _in_folder(folder: Path) -> list[Path]:
    return sorted(path for path in folder.glob("records*.jsonl") if path.is_file()) if folder.is_dir() else []


def read_records(path: Path, warn: Warn) -> list[dict[str, Any]]:
    """The JSON records of one file; other lines (a log line, a cut last line of a killed run) skipped and counted."""
    records, bad = [], 0
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as error:
        warn(f"{shown(str(path))}: cannot read it ({error.strerror or error}); its records are left out")
        return []
    for line in lines:
        if not line.strip():
            continue
        try:
            record = parse(line)
        except ValueError:  # JSONDecodeError is one
            bad += 1
            continue
        if is_record(record):
            records.append(record)
        else:
            bad += 1
    if bad:
        warn(f"{shown(str(path))}: {bad} line(s) are not gradcam records; left out")
    return records


def merge(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per input, model, method and detection or region (an evaluation's map sets are cards of their own,
    and a detector's evaluation has a record per detection, a segmenter's one per region, a similarity's one per prompt:
    an evaluation's unit is also its class; a video's frame and a volume's slice are units too, made one card each by
    report/videos.py), in the order they first appear: the latest, except that a skipped record (its outputs were there)
    never replaces one that says what they show."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in records:
        unit = record.get("class_index") if "baseline" in record else None  # only an evaluation's record says `baseline`
        key = (record["input"], record.get("model"), record.get("method"), record.get("detection"), record.get("segment"), unit,
               record.get("frame"), record.get("slice"))  # fmt: skip
        earlier = merged.get(key)
        if earlier is not None and record.get("skipped") and not earlier.get("skipped"):
            continue
        merged[key] = record
    return list(merged.values())


def read_runs(folders: Iterable[Path]) -> list[dict[str, Any]]:
    """The runs whose records these are, each its start line and end line joined, oldest first."""
    runs: dict[str, dict[str, Any]] = {}
    for folder in dict.fromkeys(folder.resolve() for folder in folders):  # the output folder is also a records file's folder
        lines = [line for path in sorted(folder.glob(RUNS_FILES)) if path.is_file() for line in _lines(path)]
        for line in lines:
            try:
                entry = run_entry(parse(line))
            except ValueError:
                continue
            if entry is not None:
                runs.setdefault(entry["id"], {}).update(entry)
    return sorted(runs.values(), key=lambda run: str(run.get("started", "")))


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def collect(output_dir: Path, given: Iterable[Path] = (), warn: Warn = lambda _m: None) -> Collected:
    """Everything the report of `output_dir` (and the named records files) shows."""
    files = record_files(output_dir, given)
    if not files:
        raise UsageError(
            f"{shown(str(output_dir))}: no {RECORDS_FILE} here; give the output folder of a `gradcam explain` run, "
            "or name its records files (JSON Lines from stdout)"
        )
    read = [record for path in _oldest_first(files) for record in read_records(path, warn)]
    records = merge(read)
    if not records:
        raise UsageError(f"no records in {', '.join(shown(str(path)) for path in files)}; nothing to report")
    runs = read_runs([output_dir, *(path.parent for path in files)])
    bases = [Path.cwd(), *(Path(run["cwd"]) for run in runs if isinstance(run.get("cwd"), str))]
    return Collected(records, runs, list(dict.fromkeys(bases)), files, last_writers(read))


def _oldest_first(files: list[Path]) -> list[Path]:
    """Records files by when they were last written (shards' files, stdout kept with `>`): later lines are later runs."""

    def written(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0

    return sorted(files, key=written)


def last_writers(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each picture path as records name it → the last record that wrote it (a skipped or failed record wrote
    nothing): for a picture without a stamp, the one record whose map it can show (outputs/provenance.py)."""
    return {path: record for record in records for path in pictures_written(record)}
