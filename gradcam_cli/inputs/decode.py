"""Image files in: opening only regular files, and decoding any mode to upright 8-bit RGB.

Every image is loaded upright (EXIF orientation applied) with alpha composited
on white, and its pixel count is checked from the header before any decoding,
so a decompression bomb costs nothing. Any failure is an InputError that names
the file and says why.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import numpy as np

from gradcam_cli.errors import InputError
from gradcam_cli.option_table import DEFAULT_MAX_PIXELS


def _to_uint8(array: np.ndarray) -> np.ndarray:
    """16-bit and float images → 8 bits, keeping the full range visible."""
    if array.dtype == np.uint8:
        return array
    if array.dtype.kind == "b":
        return array.astype(np.uint8) * 255
    if array.dtype.kind == "f":
        scale = 255.0 if float(np.nanmax(array, initial=0.0)) <= 1.0 else 1.0
        return np.clip(np.nan_to_num(array) * scale, 0, 255).astype(np.uint8)
    top = 65535 if int(array.max(initial=0)) > 255 else 255
    return np.clip(array.astype(np.float64) * (255.0 / top), 0, 255).round().astype(np.uint8)


def _pil_to_rgb(image: object) -> np.ndarray:
    from PIL import Image

    assert isinstance(image, Image.Image)
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return np.asarray(Image.alpha_composite(white, rgba).convert("RGB"))
    if image.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):
        gray = _to_uint8(np.asarray(image))
        return np.repeat(gray[..., None], 3, axis=2)
    return np.asarray(image.convert("RGB"))


def _not_an_image(path: Path) -> str:
    """Why Pillow did not recognise the file, as precisely as its first bytes tell."""
    try:
        with open_regular(path) as handle:
            head = handle.read(512)
    except (OSError, InputError):
        head = None
    if head == b"":
        return "empty file (0 bytes), not an image"
    if head:
        text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
        if text.startswith((b"<!doctype html", b"<html", b"<head", b"<body")):
            return "an HTML page, not an image (a saved web page or a download error?)"
        if all(32 <= byte < 127 or byte in (9, 10, 13) for byte in head):
            return "a text file, not an image"
    return "not an image file Pillow can read (truncated, or another format)"


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def _require_regular(path: Path, status: os.stat_result) -> None:
    if not stat.S_ISREG(status.st_mode):
        raise InputError(f"{path}: {_file_kind(status.st_mode)}, not an image file; only regular files are read")


def open_regular(path: Path) -> io.BufferedReader:
    """Open a regular file for reading, never blocking: anything else is an InputError.

    The type is checked with stat before opening, and again on the open
    descriptor (the path may be swapped in between); O_NONBLOCK makes even
    that open return at once on a FIFO with no writer.
    """
    _require_regular(path, os.stat(path))
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        _require_regular(path, os.fstat(fd))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def load_image(path: Path, max_pixels: int = DEFAULT_MAX_PIXELS, at_least: tuple[int, int] | None = None) -> np.ndarray:
    """An upright 8-bit RGB array (H, W, 3); any failure is an InputError for this image.

    The pixel count is read from the header and checked before anything is
    decoded, so a small file that claims a huge image (a decompression bomb)
    costs nothing. `max_pixels` <= 0 turns the check off. `at_least` (width,
    height) lets a JPEG decode at 1/2 to 1/8 scale while staying at least that
    size: a thumbnail needs no more.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    Image.MAX_IMAGE_PIXELS = None  # our own limit below, with a message that names the option
    try:
        with open_regular(path) as handle, Image.open(handle) as image:
            width, height = image.size
            if 0 < max_pixels < width * height:
                raise InputError(
                    f"{path}: {width}x{height} is {width * height:,} pixels, above ⟨max_pixels={max_pixels:,}⟩ "
                    "(a guard against decompression bombs); raise ⟨max_pixels⟩ if you trust this file"
                )
            image.seek(0)  # animated GIF, multi-page TIFF: the first frame
            if at_least is not None:
                image.draft("RGB", at_least)
            upright = ImageOps.exif_transpose(image)
            rgb = _pil_to_rgb(upright if upright is not None else image)
    except FileNotFoundError:
        if os.path.islink(path):
            raise InputError(f"{path}: broken symbolic link (its target {os.readlink(path)} does not exist)") from None
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, not an image (add it without a file name to scan it)") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except UnidentifiedImageError:
        raise InputError(f"{path}: {_not_an_image(path)}") from None
    except (OSError, ValueError, SyntaxError) as error:
        raise InputError(f"{path}: cannot decode image ({str(error).strip() or type(error).__name__})") from None
    if rgb.ndim != 3 or rgb.shape[0] < 1 or rgb.shape[1] < 1:
        raise InputError(f"{path}: image has no pixels")
    return np.ascontiguousarray(rgb)
