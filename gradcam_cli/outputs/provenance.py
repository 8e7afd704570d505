"""What made an output: a run's settings stamped into every PNG it writes, and read back before a file is replaced.

Output names carry the method, not the model, layers, weights or style, so
two runs into one folder can meet at a name. Each PNG therefore keeps, in a
text chunk before its pixels, the settings that decide its picture (the
model, its weights' SHA-256, method, layers, target, the map and picture
settings), and each record the hash of that text (`stamp`). Before a run
writes over a file it asks what made it: this run's settings, another's (the
run stops with one line, unless ⟨replace⟩), or nobody knows (a foreign file:
written over, as ever). A file from before stamps is judged by the folder's
records (run_files.EarlierRecords), read once. `is_records_picture` is how a
report tells whether the picture at a record's path is still that record's.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from gradcam_cli.errors import OutputError
from gradcam_cli.inputs.sources import shown
from gradcam_cli.outputs.files import png_text
from gradcam_cli.outputs.run_files import EarlierRecords, Making, file_sha256

STAMP_KEY = "gradcam"  # the PNG text chunk's keyword
STAMP_HEX = 16
RUN_KEYS = ("model", "source", "output", "target", "layers", "method")  # what every record says at its top level
MAP_KEYS = ("pretrained", "preprocess", "relu", "norm", "combine", "eigen_smooth", "aug_smooth")  # in its `settings`
PICTURE_KEYS = ("style", "colormap", "alpha", "caption")
# a video's frames and maps over frames, stamped always (a record states them only when not these defaults)
VIDEO_KEYS: dict[str, Any] = {"every": 1, "fps": None, "smooth": 1}
QUERY_KEYS = ("prompts", "references")  # what a similarity is to: stamped only when a run has them (older stamps stay)
# how a message names each setting; precision, device and version are how a map was computed, not what it shows
SAID = {key: key.replace("_", " ") for key in (*RUN_KEYS, *QUERY_KEYS, *MAP_KEYS, *PICTURE_KEYS, *VIDEO_KEYS)}
SAID.update(weights_sha256="weights", weights_file="weights")
DIFFERENCES_SAID = 2


def making(context: dict[str, Any]) -> Making:
    """What makes this run's pictures: the record context's model, map and picture settings, the weights' hash."""
    settings = context.get("settings") or {}
    weights = settings.get("weights")
    return {
        **{key: context.get(key) for key in RUN_KEYS},
        **{key: context[key] for key in QUERY_KEYS if context.get(key) is not None},
        **{key: settings.get(key) for key in MAP_KEYS},
        "weights_sha256": file_sha256(Path(weights)) if weights else None,
        **{key: settings.get(key) for key in PICTURE_KEYS},
        **{key: settings.get(key, default) for key, default in VIDEO_KEYS.items()},
    }


def stamp_for(context: dict[str, Any]) -> str:
    """The `stamp` records of this context carry: the API's record says what the CLI's picture would carry."""
    return stamp_hash(stamp_text(making(context)))


def record_making(record: dict[str, Any]) -> Making:
    """What a record says made its files: only what it states (a record from before stamps has no weights' hash
    nor picture settings, an evaluation's no map settings), so nothing it leaves out counts as a difference."""
    given = record.get("settings")
    settings: dict[str, Any] = given if isinstance(given, dict) else {}
    said = {key: record[key] for key in RUN_KEYS if key in record}
    said.update({key: record[key] for key in QUERY_KEYS if record.get(key) is not None})
    said.update({key: settings[key] for key in (*MAP_KEYS, *PICTURE_KEYS) if key in settings})
    if "weights" in settings:  # a path, not a hash: it says at least whether a weights file was given
        said["weights_file"] = settings["weights"] is not None
    return said


def stamp_text(made: Making) -> str:
    """The stamp as a PNG keeps it: canonical JSON, ASCII (a tEXt chunk is Latin-1)."""
    return json.dumps(made, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def stamp_hash(text: str) -> str:
    """The record's `stamp`: a short hash of the stamp text its pictures carry."""
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:STAMP_HEX]


def _stamp_text(path: Path) -> str | None:
    """The stamp text a picture carries: a PNG's text chunk, an overlay video's comment tag."""
    if path.suffix == ".mp4":
        from gradcam_cli.outputs.video_files import video_stamp

        return video_stamp(path)
    return png_text(path, STAMP_KEY)


def stamp_of(path: Path) -> str | None:
    """The hash of a picture's stamp, as its record has it; None when it has none (`gradcam report` pairs by it)."""
    text = _stamp_text(path)
    return stamp_hash(text) if text is not None and text.isascii() else None


def made_by_stamp(path: Path) -> Making | None:
    """What a picture's own stamp says made it, or None when it carries none."""
    text = _stamp_text(path)
    try:
        made = json.loads(text) if text is not None else None
    except json.JSONDecodeError:
        return None
    return made if isinstance(made, dict) else None


def differences(earlier: Making, ours: Making) -> list[str]:
    """How an earlier making differs from ours, a phrase each; a setting one side does not state is no difference."""
    ours = {**ours, "weights_file": ours.get("weights_sha256") is not None}  # what a record without the hash can tell
    return [
        f"{SAID.get(key, key)} {_said(key, earlier[key])}, this run {_said(key, ours[key])}"
        for key in ours
        if key in earlier and _comparable(earlier[key]) != _comparable(ours[key])
    ]


def _comparable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _said(key: str, value: Any) -> str:
    if key == "weights_sha256":
        return f"sha256 {value[:12]}…" if isinstance(value, str) else "none given"
    if key == "weights_file":
        return "a file" if value else "none given"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "none"
    return str(value)


def is_records_picture(record: dict[str, Any], picture: Path, last: dict[str, Any] | None = None) -> bool:
    """Whether the picture at a record's path shows that record's map, not a later run's that wrote over it.

    A stamped picture is the record's when the stamps agree (a record from
    before stamps never made a stamped picture). A picture without a stamp
    predates stamps: it is the record's when `last`, the last record that wrote
    it (records files oldest first, lines in order; skipped records wrote
    nothing), is this one or says the same making.
    """
    stamp = stamp_of(picture)
    if stamp is not None:
        return stamp == record.get("stamp")
    return last is None or last is record or not differences(record_making(last), record_making(record))


class Provenance:
    """This run's stamp, and the question asked of each existing output before it is replaced or counted as done."""

    def __init__(self, output_dir: Path, made: Making, *, replace: bool = False) -> None:
        self.made = made
        self.text = stamp_text(made)
        self.stamp = stamp_hash(self.text)
        self.replace = replace  # ⟨replace⟩: another run's outputs may be written over
        self.records = EarlierRecords(output_dir, record_making)

    def maker(self, path: Path) -> Making | None:
        """What made an existing picture: its stamp, else what the folder's records say; None when neither knows."""
        made = made_by_stamp(path)
        if made is None and path.suffix == ".png" and path.is_file():
            made = self.records.making(path)
        return made

    def others(self, path: Path) -> list[str]:
        """How the run that made this existing picture differs from this one; [] when it is this run's, or unknown."""
        made = self.maker(path)
        return differences(made, self.made) if made is not None else []

    def claim(self, path: Path) -> None:
        """Before writing a picture: refuse to replace what another run made (unless ⟨replace⟩)."""
        if self.replace or not path.exists():
            return
        found = self.others(path)
        if found:
            said = "; ".join(found[:DIFFERENCES_SAID]) + ("; …" if len(found) > DIFFERENCES_SAID else "")
            raise OutputError(
                f"{shown(str(path))} was made by another run ({said}); choose another ⟨output_dir⟩, "
                "or add ⟨replace⟩ to write over other runs' outputs"
            )
