"""Output names: the input's relative path mirrored under the output folder, checked before any work.

`photos/a/cat.jpg` → `OUT/a/cat.jpg.gradcam.png`: a name never leaves the
output folder and never names an input of the run (through symbolic links
too). A name that no file system could hold (over 255 bytes) is shortened,
the same way every time: the input's name cut, a hash of its whole path, the
method and suffix kept (`OUT/a/xxx…x~1a2b3c4d5e6f.jpg.gradcam.png`).
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from pathlib import Path, PurePath

from gradcam_cli.errors import InputError, OutputError
from gradcam_cli.inputs.sources import NAME_MAX, shown
from gradcam_cli.vocab import Method, values

SHORT_HASH_BYTES = 6  # 12 hex digits of the whole path: two long names cut alike still differ
KEPT_SUFFIX_BYTES = 16  # the input's own suffix (`.jpg`) is kept in a shortened name when it is at most this long
# room a shortened name keeps for the longest `.METHOD.classN.guided.png` (class indices of up to 10 digits), so
# that its stem is the same whatever the run writes beside it
SUFFIX_ROOM = len(".") + max(len(m) for m in values(Method)) + len(".class") + 10 + len(".guided.png")


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

    def __init__(
        self, output_dir: Path, method: str, largest_class: int | None = None, raw: bool = False, guided: bool = False, *,
        largest_detection: int | None = None,
    ) -> None:  # fmt: skip
        self.output_dir = output_dir
        self.method = method
        self.largest_class = largest_class  # names carry `.classN` up to this index; None: one map, no class
        self.raw, self.guided = raw, guided
        self._inputs: set[Path] = set()
        self._root = output_dir.resolve()
        # the longest name ending this run writes: an input name that does not fit before it is shortened
        classes = f".class{largest_class}" if largest_class is not None else ""
        classes += f".det{largest_detection}" if largest_detection is not None else ""  # ⟨each⟩: a detection's overlay
        self._longest = f".{method}{classes}" + (".guided.png" if guided else ".png")
        self._classes: dict[Path, dict[str, list[int]]] = {}  # per output folder: each name's class overlays, listed once
        self._classes_lock = threading.Lock()
        self._said_shortened = False

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

    def stem(self, base: PurePath) -> str:
        """What the input's outputs are named by: its name, or when a name would not fit, the name shortened."""
        if len(os.fsencode(base.name + self._longest)) <= NAME_MAX:
            return base.name
        return shortened(base, NAME_MAX - max(SUFFIX_ROOM, len(os.fsencode(self._longest))))

    def first_shortened(self, path: Path, base: PurePath) -> str | None:
        """The line a run says the first time it shortens a name (each record's outputs name the files)."""
        stem = self.stem(base)
        if self._said_shortened or stem == base.name:
            return None
        self._said_shortened = True
        return (
            f"{shown(str(path))}: its output names would be over {NAME_MAX} bytes; they are shortened, the name cut and "
            f"a hash of its path added (…{stem[stem.rindex('~') :]}.{self.method}…; the records' outputs name them), "
            "and so for any other such input"
        )

    def existing_classes(self, base: PurePath) -> list[int]:
        """Classes an earlier run wrote an overlay for (`NAME.METHOD.classN.png`), in index order.

        Each output folder is listed once a run, not once an image: a folder of a million images stays linear.
        """
        folder = self.output_dir / base.parent
        with self._classes_lock:
            if folder not in self._classes:
                self._classes[folder] = self._list_classes(folder)
            return sorted(self._classes[folder].get(self.stem(base), []))

    def _list_classes(self, folder: Path) -> dict[str, list[int]]:
        pattern = re.compile(r"(.+)\." + re.escape(self.method) + r"\.class(\d+)\.png")
        found: dict[str, list[int]] = {}
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    match = pattern.fullmatch(entry.name)
                    if match:
                        found.setdefault(match.group(1), []).append(int(match.group(2)))
        except OSError:
            return {}
        return found

    def video_paths(self, base: PurePath, raw: bool) -> tuple[Path, Path | None]:
        """A video's overlay video `NAME.EXT.METHOD.mp4` and, when asked, its maps' .npy beside it."""
        overlay, npy, _ = self.paths(base, None, raw)
        video = overlay.with_suffix(".mp4")
        if self._inputs and {video.resolve(), _location(video)} & self._inputs:
            raise InputError(f"output {video} would overwrite an input of this run; choose another ⟨output_dir⟩")
        return video, npy

    def paths(self, base: PurePath, class_index: int | None, raw: bool, guided: bool = False) -> tuple[Path, Path | None, Path | None]:
        """The overlay path and, when asked, the .npy map and the guided image beside it."""
        stem = self.stem(base) + f".{self.method}" + (f".class{class_index}" if class_index is not None else "")
        overlay = self.output_dir / base.with_name(stem + ".png")
        npy = self.output_dir / base.with_name(stem + ".npy") if raw else None
        rgb = self.output_dir / base.with_name(stem + ".guided.png") if guided else None
        for path in (overlay, npy, rgb):
            if path is None:
                continue
            if self._inputs and {path.resolve(), _location(path)} & self._inputs:
                raise InputError(f"output {path} would overwrite an input of this run; choose another ⟨output_dir⟩")
        return overlay, npy, rgb


def shortened(base: PurePath, fits: int) -> str:
    """The input's name cut to `fits` bytes in all, a character whole, with a hash of its whole path and its suffix.

    The hash makes two inputs whose names begin alike differ; it is of the
    path, so every run names the input the same way and a resume finds it.
    """
    digest = hashlib.blake2b(base.as_posix().encode("utf-8", "surrogateescape"), digest_size=SHORT_HASH_BYTES).hexdigest()
    suffix = base.suffix if len(os.fsencode(base.suffix)) <= KEPT_SUFFIX_BYTES else ""
    tail = f"~{digest}{suffix}"
    return _cut(base.name[: len(base.name) - len(suffix)], fits - len(os.fsencode(tail))) + tail


def _cut(text: str, size: int) -> str:
    """The longest start of `text` that is at most `size` bytes in the file system's encoding, no character split."""
    kept, used = [], 0
    for char in text:
        used += len(os.fsencode(char))
        if used > size:
            break
        kept.append(char)
    return "".join(kept)
