"""Files out, and checked whole: atomic writes, a killed run's temporary files cleared, complete-file checks.

Every file is written under a temporary name in its folder, flushed and
renamed, so an interrupted run leaves either the old file or the whole new one;
`is_complete` is how --skip-existing tells a whole output from a damaged one.
A PNG may carry a text of ours before its pixels (`with_text`, `png_text`):
what made it, read back without decoding the picture.
"""

from __future__ import annotations

import io
import os
import re
import secrets
import struct
import threading
import time
import zlib
from pathlib import Path

import numpy as np

from gradcam_cli.errors import InputError
from gradcam_cli.inputs.decode import open_regular


def _file_mode() -> int:
    """The mode a plain open() would give (mkstemp's 0600 would hide outputs from others)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


FILE_MODE = _file_mode()


TEMP_PREFIX = ".gradcam-tmp-"  # ours, and short: a temporary name fits wherever the final name fits
TEMP_NAME = re.compile(r"\.gradcam-tmp-(\d+)-[0-9a-f]{8}\.part$")
STALE_TEMP_SECONDS = 3600


def temp_path(folder: Path) -> Path:
    """A temporary name of ours in `folder` (this process's id in it): what `remove_stale_temps` recognises."""
    return folder / f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}.part"


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, flush it to disk, then rename over the target.

    A crash or a kill leaves either the old file or the whole new one under
    the final name, never a part; what it may leave is our temporary file,
    which `remove_stale_temps` recognises by its name.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_path(path.parent)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(folder: Path) -> int:
    """Delete temporary files that a killed run of ours left in `folder`; returns how many.

    Only names of our own pattern are touched, and only when the process that
    wrote them is gone (or, for a run on another machine sharing the folder,
    when they are an hour old: a live write takes milliseconds).
    """
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    now = time.time()
    for entry in entries:
        match = TEMP_NAME.fullmatch(entry.name)
        if not match or int(match.group(1)) == os.getpid():
            continue
        try:
            stale = not _pid_alive(int(match.group(1))) or now - entry.stat(follow_symlinks=False).st_mtime > STALE_TEMP_SECONDS
            if stale and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed += 1
        except OSError:
            continue
    return removed


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"  # the empty IEND chunk every PNG ends with


class Folders:
    """The folders one run writes into: each created, and cleared of a killed run's temporary files, the first time
    (from any of the writing threads)."""

    def __init__(self) -> None:
        self._ready: set[Path] = set()
        self._lock = threading.Lock()

    def prepare(self, folder: Path) -> None:
        with self._lock:
            if folder in self._ready:
                return
            folder.mkdir(parents=True, exist_ok=True)
            remove_stale_temps(folder)
            self._ready.add(folder)


def is_complete(path: Path) -> bool:
    """A whole file as we write it: a PNG from signature to IEND, an .npy holding all the data its header declares.

    Reads a few bytes, decodes nothing: a zero-byte, truncated or foreign file fails.
    """
    try:
        with open_regular(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            if path.suffix == ".npy":
                return _npy_complete(handle, size)
            head = handle.read(len(PNG_SIGNATURE))
            handle.seek(max(0, size - len(PNG_END)))
            return head == PNG_SIGNATURE and size > len(PNG_SIGNATURE) + len(PNG_END) and handle.read() == PNG_END
    except (OSError, InputError, ValueError):
        return False


def _npy_complete(handle: io.BufferedReader, size: int) -> bool:
    from numpy.lib import format as npy

    version = npy.read_magic(handle)
    read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
    shape, _fortran, dtype = read_header(handle)
    count = int(np.prod(shape, dtype=np.int64))
    return size == handle.tell() + count * dtype.itemsize


PNG_TEXT_LIMIT = 1 << 16  # our text is a few hundred bytes: a longer chunk is not ours, and is not read
PNG_CHUNKS_READ = 32  # our chunk comes right after the header: a file that gets there later is not ours


def with_text(png: bytes, keyword: str, text: str) -> bytes:
    """The PNG with a tEXt chunk (`keyword`, `text`: Latin-1) right after its header, where `png_text` finds it at once."""
    header_end = len(PNG_SIGNATURE) + 8 + 13 + 4  # the IHDR chunk: length, type, 13 bytes of data, CRC
    if png[: len(PNG_SIGNATURE)] != PNG_SIGNATURE or png[12:16] != b"IHDR":
        raise ValueError("not a PNG with its header first")
    data = keyword.encode("latin-1") + b"\0" + text.encode("latin-1")
    chunk = struct.pack(">I", len(data)) + b"tEXt" + data + struct.pack(">I", zlib.crc32(b"tEXt" + data))
    return png[:header_end] + chunk + png[header_end:]


def png_text(path: Path, keyword: str) -> str | None:
    """The text a PNG keeps under `keyword` before its pixels; None when it has none, or is no PNG, or cannot be read.

    Reads the chunk headers up to the first image data, decodes nothing.
    """
    try:
        with open_regular(path) as handle:
            if handle.read(len(PNG_SIGNATURE)) != PNG_SIGNATURE:
                return None
            for _ in range(PNG_CHUNKS_READ):
                head = handle.read(8)
                if len(head) < 8:
                    return None
                length, kind = struct.unpack(">I", head[:4])[0], head[4:]
                if kind in (b"IDAT", b"IEND"):
                    return None
                if kind != b"tEXt" or length > PNG_TEXT_LIMIT:
                    handle.seek(length + 4, os.SEEK_CUR)
                    continue
                data = handle.read(length)
                handle.seek(4, os.SEEK_CUR)
                name, _, text = data.partition(b"\0")
                if name == keyword.encode("latin-1"):
                    return text.decode("latin-1")
    except (OSError, InputError, ValueError):
        return None
    return None
