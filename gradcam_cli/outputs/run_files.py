"""The files a run leaves in its output folder besides the pictures: its records, and what the run was.

`records.jsonl` holds the same JSON line per image as stdout, so no one has
to redirect stdout to build a report later; `runs.jsonl` holds one line when
a run starts (the command, the model, its weights and their SHA-256) and one
when it ends (the counts, whether it was interrupted). Both are appended to,
a line at a time, flushed as written: a run that is killed keeps every line it
wrote, a resumed run adds its own, and each process of a sharded job keeps
files of its own (`records.shard-0-of-4.jsonl`). `gradcam report` merges them.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import uuid
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
    """The SHA-256 of a file (a weights file, so a report says exactly which weights made it); None if unreadable."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
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
        "pretrained": settings.model.pretrained and weights is None,
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
