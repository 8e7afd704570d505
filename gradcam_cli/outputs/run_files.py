"""The files a run leaves in its output folder besides the pictures: its records, and what the run was.

`records.jsonl` holds the same JSON line per image as stdout, so no one has
to redirect stdout to build a report later; `runs.jsonl` holds one line when
a run starts (the command, the model, its weights and their SHA-256) and one
when it ends (the counts, whether it was interrupted). Both are appended to,
a line at a time, flushed as written: a run that is killed keeps every line it
wrote, a resumed run adds its own, and each process of a sharded job keeps
files of its own (`records.shard-0-of-4.jsonl`). `gradcam report` merges them.
`EarlierRecords` reads them back, once a run: what made each output of a
folder written before outputs carried their stamp (outputs/provenance.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradcam_cli.outputs.records import ImageRecord

if TYPE_CHECKING:
    from gradcam_cli.settings import ExplainSettings

RECORDS_FILE = "records.jsonl"
RUNS_FILE = "runs.jsonl"
RUNS_FILES = "runs*.jsonl"  # a shard's own is `runs.shard-0-of-4.jsonl`
HASH_CHUNK = 1 << 20


def now() -> str:
    """The time as records give it: UTC, ISO 8601, to the second."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def file_sha256(path: Path) -> str | None:
    """The SHA-256 of a file (a weights file, so a report says exactly which weights made it); None if unreadable.

    Kept while the file's size and time are unchanged: the runs file and the outputs' stamp both ask for it.
    """
    try:
        status = path.stat()
    except OSError:
        return None
    return _sha256(str(path.resolve()), status.st_size, status.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _sha256(path: str, _size: int, _mtime_ns: int) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(HASH_CHUNK):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def run_line(settings: ExplainSettings, command: tuple[str, ...], *, version: str, **what: Any) -> dict[str, Any]:
    """A run's first line in the runs file (explain's and eval's): the command as typed, where, `what` explained
    the images (model, method, layers, device), with which weights, and the shard when it is one."""
    import shlex

    weights, shard = settings.model.weights, settings.run.shard
    return {
        "command": shlex.join(command) if command else None,
        "cwd": os.getcwd(),
        "output_dir": str(settings.outputs.output_dir),
        **what,
        "shard": f"{shard[0]}/{shard[1]}" if shard else None,
        "weights": str(weights) if weights else None,
        "weights_sha256": file_sha256(weights) if weights else None,
        "pretrained": settings.model.pretrained_said(),
        "version": version,
    }


class LineFile:
    """A JSON Lines file appended to, one whole line per write() call, flushed at once.

    Opened with O_APPEND, so lines written by several processes into one file
    never interleave within a line.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd: int | None = None

    def write(self, line: str) -> None:
        data = (line.rstrip("\n") + "\n").encode("utf-8", "surrogateescape")
        with self._lock:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(self._fd, data)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class RunFiles:
    """One run's records file and its two lines in the runs file."""

    def __init__(self, output_dir: Path, run: dict[str, Any], suffix: str | None = None) -> None:
        """`suffix`: a shard's name, so that each process of a job appends to files of its own (`records.shard-0-of-4.jsonl`):
        appends from several hosts into one file on network storage are not atomic."""
        self.records = LineFile(output_dir / (RECORDS_FILE.replace(".jsonl", f".{suffix}.jsonl") if suffix else RECORDS_FILE))
        self.runs = LineFile(output_dir / (RUNS_FILE.replace(".jsonl", f".{suffix}.jsonl") if suffix else RUNS_FILE))
        self.id = f"{now()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"  # runs of one process in one second differ too
        self.runs.write(json.dumps({"id": self.id, "started": now(), **run}, ensure_ascii=False))

    def record(self, record: ImageRecord) -> None:
        self.records.write(record.to_json())

    def finish(self, counts: dict[str, int], interrupted: bool) -> None:
        """The run's last line: when it ended, what it did, whether it was stopped before the end."""
        self.runs.write(json.dumps({"id": self.id, "finished": now(), "interrupted": interrupted, "counts": counts}))
        self.records.close()
        self.runs.close()


Making = dict[str, Any]  # what made an output, as far as it is known (outputs/provenance.py)


class EarlierRecords:
    """What the folder's records files say made each output, read once, on the first question.

    Only a folder written before outputs carried their stamp needs it, so a
    run that never meets such a file never reads the records. Keyed by the
    path below the output folder: a record's path is as its run typed it, so
    it is tried from the current folder and from every folder a run started in
    (runs*.jsonl), and kept wherever it lands inside this output folder. The last
    record that wrote a file says what made it (a skipped record made nothing);
    files are read oldest first, so a later file's records win.
    """

    def __init__(self, output_dir: Path, making_of: Callable[[dict[str, Any]], Making]) -> None:
        self.output_dir = output_dir
        self.making_of = making_of  # a record → what made its files, as far as it says
        self.roots = list(dict.fromkeys([os.path.abspath(output_dir), os.path.realpath(output_dir)]))
        self._index: dict[str, Making] | None = None
        self._lock = threading.Lock()

    def making(self, path: Path) -> Making | None:
        """What the records say made this output, or None when no record wrote it."""
        with self._lock:
            if self._index is None:
                self._index = self._read()
        key = self._below(os.path.abspath(path))
        return self._index.get(key) if key is not None else None

    def _below(self, absolute: str) -> str | None:
        """The path below the output folder, or None when it is not below it."""
        for root in self.roots:
            if absolute.startswith(root.rstrip(os.sep) + os.sep):
                return absolute[len(root.rstrip(os.sep)) + 1 :]
        return None

    def _read(self) -> dict[str, Making]:
        index: dict[str, Making] = {}
        kinds: dict[str, Making] = {}  # one dict per distinct making, shared by every path it made
        folders = self._run_folders()
        for path in self._files():
            for record in _records(path):
                making = self.making_of(record)
                making = kinds.setdefault(json.dumps(making, sort_keys=True), making)
                for written in pictures_written(record):
                    for folder in folders:  # an absolute path is itself from every folder
                        key = self._below(os.path.normpath(os.path.join(folder, written)))
                        if key is not None:
                            index[key] = making
        return index

    def _files(self) -> list[Path]:
        """The records files, oldest last write first."""
        found = []
        for path in self.output_dir.glob("records*.jsonl"):
            try:
                found.append((path.stat().st_mtime_ns, path))
            except OSError:
                continue
        return [path for _, path in sorted(found)]

    def _run_folders(self) -> list[str]:
        """Where a record's relative path may start: here, then every folder a run of this output folder started in."""
        folders = [os.getcwd()]
        for path in sorted(self.output_dir.glob(RUNS_FILES)):
            for entry in _json_lines(path):
                if isinstance(entry.get("cwd"), str):
                    folders.append(entry["cwd"])
        return list(dict.fromkeys(folders))


def _json_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON Lines file, a line at a time (a huge file is never held); other lines skipped."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(entry, dict):
                    yield entry
    except OSError:
        return


def _records(path: Path) -> Iterator[dict[str, Any]]:
    """The records of images whose files were written."""
    for record in _json_lines(path):
        if isinstance(record.get("input"), str) and pictures_written(record):
            yield record


def pictures_written(record: dict[str, Any]) -> list[str]:
    """The pictures a record says its run wrote, as it names them: none for a failed or skipped image (a line that
    is not ours may hold anything: only lists of strings count)."""
    if record.get("ok") is not True or record.get("skipped"):
        return []
    outputs, targets = record.get("outputs"), record.get("targets")
    paths = [p for p in outputs if isinstance(p, str)] if isinstance(outputs, list) else []
    for target in targets if isinstance(targets, list) else []:
        if isinstance(target, dict):
            paths += [target[key] for key in ("overlay", "guided") if isinstance(target.get(key), str)]
    return list(dict.fromkeys(paths))
