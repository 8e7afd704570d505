"""Output names and the JSON record written for every input.

Names mirror the input's relative path under the output folder
(`photos/a/cat.jpg` → `OUT/a/cat.gradcam.png`), never leave it, and never
name an input. Records are frozen dataclasses with `to_json()`: one line per
image on stdout, with the settings needed to reproduce the run.
"""
from __future__ import annotations

import json
from glob import escape as glob_escape
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePath
from typing import Any

from .errors import InputError, OutputError


@dataclass(frozen=True)
class TargetRecord:
    class_index: int
    class_name: str | None
    score: float
    probability: float
    blank: bool
    overlay: str | None = None
    raw: str | None = None
    guided: str | None = None


@dataclass(frozen=True)
class ImageRecord:
    input: str
    ok: bool
    error: str | None = None
    model: str | None = None
    layers: list[str] = field(default_factory=list)
    method: str | None = None
    device: str | None = None
    width: int | None = None
    height: int | None = None
    class_index: int | None = None
    class_name: str | None = None
    score: float | None = None
    probability: float | None = None
    blank: bool | None = None
    skipped: bool = False  # --skip-existing: its outputs were there already, nothing was computed
    outputs: list[str] = field(default_factory=list)
    targets: list[TargetRecord] = field(default_factory=list)
    topk: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, allow_nan=False)


def _location(path: Path) -> Path:
    """Where a path's own directory entry is (a link is not followed, its folders are)."""
    return path.parent.resolve() / path.name


def ensure_writable(folder: Path) -> None:
    """Fail before any work when the output folder cannot take files, with one message that says why."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".gradcam-write-test."):
            pass
    except OSError as error:
        raise OutputError(
            f"cannot write to the output folder {folder}: {error.strerror or error}; choose another --output-dir"
        ) from None


class OutputNamer:
    """Claims one output name per (input, class); a second input with the same stem keeps its suffix."""

    def __init__(self, output_dir: Path, method: str) -> None:
        self.output_dir = output_dir
        self.method = method
        self._claimed: set[PurePath] = set()
        self._inputs: set[Path] = set()
        self._root = output_dir.resolve()

    def protect(self, path: Path) -> None:
        """Remember an input of this run that lies under the output folder.

        Another input's output name can be this file (`a.png` → `a.gradcam.png`
        when `a.gradcam.png` is also an input and --output-dir is its folder);
        only inputs under the output folder can be hit, so only those are kept.
        A symbolic link is kept both as the file it points to and as the link
        itself: writing over the link's name would replace the input.
        """
        try:
            places = {path.resolve(), _location(path)}
        except OSError:
            return
        self._inputs.update(p for p in places if p.is_relative_to(self._root))

    def base_for(self, relative: PurePath) -> PurePath:
        parts = [p for p in relative.parts if p not in ("..", ".", "/", "")] or ["image"]
        relative = PurePath(*parts)
        base = relative.with_suffix("") if relative.suffix else relative
        if base in self._claimed:
            base = relative.with_name(relative.name.replace(".", "_"))
        counter = 1
        candidate = base
        while candidate in self._claimed:
            counter += 1
            candidate = base.with_name(f"{base.name}_{counter}")
        self._claimed.add(candidate)
        return candidate

    def existing_class_overlays(self, base: PurePath) -> list[Path]:
        """Overlays of earlier runs for this image, one per class (`NAME.METHOD.classN.png`)."""
        folder = self.output_dir / base.parent
        prefix = f"{base.name}.{self.method}.class"
        if not folder.is_dir():
            return []
        return sorted(p for p in folder.glob(f"{glob_escape(prefix)}*.png")
                      if p.name[len(prefix):-4].isdigit())

    def paths(
        self, base: PurePath, class_index: int | None, raw: bool, guided: bool = False
    ) -> tuple[Path, Path | None, Path | None]:
        """The overlay path and, when asked, the .npy map and the guided image beside it."""
        stem = base.name + f".{self.method}" + (f".class{class_index}" if class_index is not None else "")
        overlay = self.output_dir / base.with_name(stem + ".png")
        npy = self.output_dir / base.with_name(stem + ".npy") if raw else None
        rgb = self.output_dir / base.with_name(stem + ".guided.png") if guided else None
        for path in (overlay, npy, rgb):
            if path is not None and self._inputs and {path.resolve(), _location(path)} & self._inputs:
                raise InputError(f"output {path} would overwrite an input of this run; choose another --output-dir")
        return overlay, npy, rgb
