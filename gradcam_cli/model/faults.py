"""The model's own failures: whether an exception came from the model, and where in the user's code, in one line.

A model can raise on one image (a shape it cannot take, an assertion of its
own) or call `sys.exit()`; that is the image's failure, said as the exception
and the place in the user's file (`ValueError: too bright (net.py, line 17)`),
never an internal error. An exception raised in this package's own code, or
by torch on this package's call, is ours and stays an internal error.
"""

from __future__ import annotations

import sysconfig
import traceback
from functools import cache
from pathlib import Path

from gradcam_cli.errors import one_line

MODULE_CALL = ("_call_impl", "_wrapped_call_impl")  # torch's nn.Module.__call__: the model's forward is being run


@cache
def _package() -> str:
    return str(Path(__file__).resolve().parent.parent)


@cache
def _libraries() -> tuple[str, ...]:
    """Where installed packages and Python's own modules live: frames there are nobody's own code."""
    paths = sysconfig.get_paths()
    return tuple({str(Path(paths[key]).resolve()) for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths})


@cache
def _torch() -> str:
    import torch

    return str(Path(torch.__file__).resolve().parent)


def _inside(filename: str, folder: str) -> bool:
    return filename == folder or filename.startswith(folder.rstrip("/") + "/")


@cache
def _resolved(filename: str) -> str:
    try:
        return str(Path(filename).resolve())
    except (OSError, RuntimeError):
        return filename


def _frames(error: BaseException) -> list[traceback.FrameSummary]:
    return list(traceback.extract_tb(error.__traceback__))


def user_place(error: BaseException) -> str:
    """` (net.py, line 17)`: the innermost frame of the user's code, outside this package and installed libraries.

    When the user's code is itself installed (`package.module:build`), the innermost frame outside this
    package; nothing when every frame is this package's.
    """
    frames = [f for f in _frames(error) if not _inside(_resolved(f.filename), _package())]
    own = [f for f in frames if not f.filename.startswith("<") and not any(_inside(_resolved(f.filename), lib) for lib in _libraries())]
    found = own or frames
    return f" ({Path(found[-1].filename).name}, line {found[-1].lineno})" if found else ""


def fault_line(error: BaseException) -> str:
    """`ValueError: width must be even (net.py, line 12)`: the exception, its message and where the user's code raised it."""
    if isinstance(error, SystemExit):
        code = "" if error.code is None else one_line(repr(error.code), 40)
        return f"it called sys.exit({code}){user_place(error)}"
    message = one_line(error, 160)
    return f"{type(error).__name__}{': ' + message if message else ''}{user_place(error)}"


def raised_by_model(error: BaseException) -> bool:
    """Whether the model raised it: below this package's innermost frame, the model was being called or its code ran.

    Torch raising on our own call (an autograd pass, an interpolation) has only torch's frames there and is ours;
    so is anything raised in our hooks, which run inside the forward but are this package's frames.
    """
    frames = _frames(error)
    ours = [i for i, f in enumerate(frames) if _inside(_resolved(f.filename), _package())]
    deeper = frames[ours[-1] + 1 :] if ours else frames
    return any(f.name in MODULE_CALL or not _inside(_resolved(f.filename), _torch()) for f in deeper)
