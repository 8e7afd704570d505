"""Output names: the input's relative path mirrored under the output folder, checked before any work.

`photos/a/cat.jpg` → `OUT/a/cat.jpg.gradcam.png`: a name never leaves the
output folder, never names an input of the run (through symbolic links too),
and is refused up front when no file system could hold it.
"""

from __future__ import annotations

import os
from glob import escape as glob_escape
from pathlib import Path, PurePath

from gradcam_cli.errors import InputError, OutputError
from gradcam_cli.inputs.sources import NAME_MAX, shown


def _location(path: Path) -> Path:
    """Where a path's own directory entry is (a link is not followed, its folders are)."""
    return path.parent.resolve() / path.name


MAX_LINK_HOPS = 40  # as the kernel's own limit on a chain of symbolic links


def _link_chain(path: Path) -> list[Path]:
    """Where the path's directory entry is, and that of every link it goes through on its way to the file."""
    chain = [_location(path)]
    while chain[-1].is_symlink() and len(chain) <= MAX_LINK_HOPS:
        target = Path(os.readlink(chain[-1]))
        chain.append(_location(target if target.is_absolute() else chain[-1].parent / target))
    return chain


def ensure_writable(folder: Path) -> None:
    """Fail before any work when the output folder cannot take files, with one message that says why."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".gradcam-write-test."):
            pass
    except OSError as error:
        raise OutputError(f"cannot write to the output folder {folder}: {error.strerror or error}; choose another ⟨output_dir⟩") from None


class OutputNamer:
    """Output paths of one run: the input's mirrored path plus `.METHOD[.classN].png` (see README, Outputs)."""

    def __init__(self, output_dir: Path, method: str, largest_class: int | None = None, raw: bool = False, guided: bool = False) -> None:
        self.output_dir = output_dir
        self.method = method
        self.largest_class = largest_class  # names carry `.classN` up to this index; None: one map, no class
        self.raw, self.guided = raw, guided
        self._inputs: set[Path] = set()
        self._root = output_dir.resolve()

    def protect(self, path: Path) -> None:
        """Remember an input of this run that lies under the output folder.

        Our own outputs are never inputs (sources.py skips them), so no output
        name can be an input's; this keeps that true through symbolic links
        too. A link is kept both as the file it points to and as the link
        itself: writing over the link's name would replace the input.
        """
        try:
            places = {path.resolve(), *_link_chain(path)}
        except (OSError, ValueError, RuntimeError):
            return
        self._inputs.update(p for p in places if p.is_relative_to(self._root))

    @staticmethod
    def base_for(relative: PurePath) -> PurePath:
        """The input's relative path, kept whole (suffix too: `x.jpg` and `x.png` never share outputs)."""
        parts = [p for p in relative.parts if p not in ("..", ".", "/", "")] or ["image"]
        return PurePath(*parts)

    def existing_classes(self, base: PurePath) -> list[int]:
        """Classes an earlier run wrote an overlay for (`NAME.METHOD.classN.png`), in index order."""
        folder = self.output_dir / base.parent
        prefix = f"{base.name}.{self.method}.class"
        try:
            names = [p.name for p in folder.glob(f"{glob_escape(prefix)}*.png")] if folder.is_dir() else []
        except OSError:
            return []
        return sorted(int(n[len(prefix) : -4]) for n in names if n[len(prefix) : -4].isdigit())

    def check(self, base: PurePath) -> None:
        """Refuse, before any work, an input whose longest output name no file system could hold."""
        stem = f"{base.name}.{self.method}" + (f".class{self.largest_class}" if self.largest_class is not None else "")
        longest = stem + (".guided.png" if self.guided else ".png")
        size = len(os.fsencode(longest))
        if size > NAME_MAX:
            raise InputError(
                f"{shown(str(base))}: its output name {shown(longest)} would be {size} bytes, over the {NAME_MAX} "
                "a file name may have; rename the input to a shorter name"
            )

    def paths(self, base: PurePath, class_index: int | None, raw: bool, guided: bool = False) -> tuple[Path, Path | None, Path | None]:
        """The overlay path and, when asked, the .npy map and the guided image beside it."""
        stem = base.name + f".{self.method}" + (f".class{class_index}" if class_index is not None else "")
        overlay = self.output_dir / base.with_name(stem + ".png")
        npy = self.output_dir / base.with_name(stem + ".npy") if raw else None
        rgb = self.output_dir / base.with_name(stem + ".guided.png") if guided else None
        for path in (overlay, npy, rgb):
            if path is None:
                continue
            if self._inputs and {path.resolve(), _location(path)} & self._inputs:
                raise InputError(f"output {path} would overwrite an input of this run; choose another ⟨output_dir⟩")
        return overlay, npy, rgb
