"""After the model: each image's maps put back onto the photo, written, and its record built.

Runs in the worker threads (see workers.py), so it changes nothing shared but
files on disk: output names are claimed beforehand, in input order, and every
file is written under a temporary name and renamed. Every picture carries the
run's stamp (outputs/provenance.py), and one that another run made is not
written over.
"""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any
from collections.abc import Sequence

import numpy as np

from gradcam_cli.errors import InputError
from gradcam_cli.found import Segments
from gradcam_cli.outputs.detection_files import write_detections
from gradcam_cli.outputs.segment_files import write_segments
from gradcam_cli.outputs.files import Folders, with_text, write_atomic
from gradcam_cli.outputs.naming import OutputNamer
from gradcam_cli.outputs.provenance import STAMP_KEY, Provenance, making
from gradcam_cli.outputs.records import ImageRecord, TargetRecord, class_name
from gradcam_cli.outputs.legend import display_scale
from gradcam_cli.outputs.picture import caption_text, draw
from gradcam_cli.outputs.text import described_score
from gradcam_cli.outputs.render import encode_npy, encode_png, guided_photo, photo_maps
from gradcam_cli.vocab import Colormap, Style, TargetKind
from gradcam_cli.geometry import Geometry
from gradcam_cli.maps import probabilities as class_probabilities
from gradcam_cli.timings import stamp

import torch

if TYPE_CHECKING:
    from gradcam_cli.maps import CamBatch

TOPK_IN_RECORD = 5
SCORES_ONLY = (TargetKind.regression, TargetKind.prompt, TargetKind.reference)  # a value, not a probability


def image_probabilities(logits: torch.Tensor, kind: TargetKind) -> torch.Tensor | None:
    """One image's class probabilities as its kind of target reads them; a regression's values and a similarity have none."""
    if kind in SCORES_ONLY:
        return None
    return class_probabilities(logits, multilabel=kind is TargetKind.multilabel)


def topk_entries(probabilities: torch.Tensor | None, names: Sequence[str] | None) -> list[dict[str, Any]]:
    """The model's top classes of an image as records list them: index, name, probability (none for a regression)."""
    if probabilities is None:
        return []
    top = probabilities.topk(min(TOPK_IN_RECORD, probabilities.numel()))
    return [
        {"index": int(i), "name": class_name(names, int(i)), "probability": round(float(p), 6)} for p, i in zip(top.values, top.indices)
    ]


def target_record(
    cams: CamBatch, row: int, k: int, probabilities: torch.Tensor | None, names: Sequence[str] | None, **paths: str | None
) -> TargetRecord:
    """One explained class of one image, as its record says it (`paths`: overlay, raw, guided, when written)."""
    index = int(cams.targets[row, k])
    return TargetRecord(
        class_index=index,
        class_name=class_name(names, index),
        score=round(float(cams.logits[row, index]), 6),
        probability=None if probabilities is None else round(float(probabilities[index]), 6),
        blank=bool(cams.blank[row, k]),
        **paths,
    )


def image_record(
    input_name: str,
    image: np.ndarray,
    targets: list[TargetRecord],
    probabilities: torch.Tensor | None,
    names: Sequence[str] | None,
    context: dict[str, Any],
) -> ImageRecord:
    """An explained image's record: the first target at the top level, every target, the model's top classes.

    A multi-label image with no label above the threshold has no target: its top-level class fields are None.
    """
    first = targets[0] if targets else None
    # the top-level fields describe the first target; each target has its own blank flag
    top = {name: getattr(first, name) for name in ("class_index", "class_name", "score", "probability", "blank")} if first else {}
    return ImageRecord(
        input=input_name,
        ok=True,
        width=int(image.shape[1]),
        height=int(image.shape[0]),
        **top,
        outputs=[t.overlay for t in targets if t.overlay],
        targets=targets,
        topk=topk_entries(probabilities, names),
        **context,
    )


def caption_for(record: TargetRecord, context: dict[str, Any], kind: TargetKind) -> str:
    """The caption of one explained class: its name, probability (a regression: its value), the run's method and layers."""
    what = described_score(kind, record.class_index, record.class_name, record.score)
    return caption_text(record.class_name, record.class_index, record.probability, str(context["method"]), list(context["layers"]), what)


class ResultWriter:
    """Writes overlays (and raw maps, guided images) for one run and builds the JSON records."""

    def __init__(
        self,
        namer: OutputNamer,
        class_names: Sequence[str] | None,
        context: dict[str, Any],
        *,
        colormap: Colormap = Colormap.jet,
        alpha: float = 0.5,
        style: Style = Style.overlay,
        caption: bool = False,
        save_raw: bool = False,
        save_guided: bool = False,
        raw_norm: bool = False,
        kind: TargetKind = TargetKind.single_class,
        replace: bool = False,
        each: bool = False,
    ) -> None:
        self.namer = namer
        self.class_names = class_names
        self.colormap, self.alpha, self.style, self.caption = colormap, alpha, style, caption
        self.provenance = Provenance(namer.output_dir, making(context), replace=replace)
        # model, layers, method, device, settings, and the stamp of what made the pictures: the same in every record
        self.context = {**context, "stamp": self.provenance.stamp}
        self.save_raw, self.save_guided = save_raw, save_guided
        self.raw_norm = raw_norm  # maps hold raw values (--norm none): scale them for display
        self.kind = kind  # how the logits read as probabilities (softmax, sigmoid, none)
        self.folders = Folders()  # each made and cleared of a killed run's temporary files once
        self.each = each  # a detector's: one overlay per detection too

    def finish(self, path: Path, image: np.ndarray, geometry: Geometry, cams: CamBatch, row: int, base: PurePath) -> ImageRecord:
        """Write this image's files for every explained class and build its record."""
        if not bool(cams.finite[row]):
            raise InputError("the model's scores or gradients are not finite (NaN or inf) for this image")
        if cams.found is not None:  # what a task found in the image (a detector's boxes, a segmenter's regions): its own
            write = write_segments if isinstance(cams.found[row], Segments) else write_detections  # module writes it
            return write(self, path, image, geometry, cams, row, base)
        probabilities = image_probabilities(cams.logits[row], self.kind)
        targets = [self._write_target(path, image, geometry, cams, row, k, base, probabilities) for k in cams.ranks(row)]
        return image_record(str(path), image, targets, probabilities, self.class_names, self.context)

    def skipped_record(self, path: Path, outputs: list[str]) -> ImageRecord:
        """--skip-existing: accounted for, not recomputed."""
        return ImageRecord(input=str(path), ok=True, skipped=True, outputs=outputs, **self.context)

    def error_record(self, path: Path, message: str) -> ImageRecord:
        """A failed input: the message is in the record, which the caller reports (once)."""
        return ImageRecord(input=str(path), ok=False, error=message, **self.context)

    def _write_target(
        self,
        path: Path,
        image: np.ndarray,
        geometry: Geometry,
        cams: CamBatch,
        row: int,
        k: int,
        base: PurePath,
        probabilities: torch.Tensor | None,
    ) -> TargetRecord:
        """Map one class's CAM back onto the photo and write it."""
        index = int(cams.targets[row, k])
        named = index if self.namer.largest_class is not None else None  # the run's names carry a class (pipeline._namer)
        overlay_path, raw_path, guided_path = self.namer.paths(base, named, self.save_raw, self.save_guided)
        for picture in (overlay_path, guided_path):
            if picture is not None:
                self.provenance.claim(picture)  # another run's picture is not written over (without ⟨replace⟩)
        self.folders.prepare(overlay_path.parent)
        record = target_record(
            cams,
            row,
            k,
            probabilities,
            self.class_names,
            overlay=str(overlay_path),
            raw=str(raw_path) if raw_path is not None else None,
            guided=str(guided_path) if guided_path is not None else None,
        )
        if guided_path is not None and cams.guided is not None:
            self._write_guided(geometry, cams.guided[row, k], guided_path)
        self._write_maps(image, geometry, cams.maps[row, k], overlay_path, raw_path, self._caption(record))
        return record

    def _caption(self, record: TargetRecord) -> str | None:
        """--caption: what the picture shows, under it."""
        return caption_for(record, self.context, self.kind) if self.caption else None

    def _write_maps(
        self, image: np.ndarray, geometry: Geometry, cam: torch.Tensor, overlay_path: Path, raw_path: Path | None, caption: str | None
    ) -> None:
        """The map as computed, if asked, then the picture (its map always scaled to [0, 1] for display), stamped.

        The picture comes last: its stamp stands for the files written beside it (an .npy cannot carry one).
        """
        shown, raw = photo_maps(cam, geometry, raw_norm=self.raw_norm, with_raw=raw_path is not None)
        if raw_path is not None and raw is not None:
            write_atomic(raw_path, encode_npy(raw))
        scale = display_scale(cam, self.raw_norm) if caption else None  # the caption band's colour scale
        drawn = draw(image, shown, style=self.style, colormap=self.colormap, alpha=self.alpha, caption=caption, scale=scale)
        write_atomic(overlay_path, self.stamped(encode_png(drawn)))
        stamp("written")

    def _write_guided(self, geometry: Geometry, image: torch.Tensor, path: Path) -> None:
        """The guided Grad-CAM image in colour, at the photo's size."""
        write_atomic(path, self.stamped(encode_png(guided_photo(image, geometry))))

    def save(self, path: Path, rgb: np.ndarray) -> None:
        """A picture of this run: its name claimed (another run's is not written over), stamped, written atomically."""
        self.provenance.claim(path)
        self.folders.prepare(path.parent)
        write_atomic(path, self.stamped(encode_png(rgb)))

    def keep_map(self, which: str, cam: np.ndarray) -> None:
        """The files hold the maps; nothing else keeps them."""

    def keep_mask(self, which: str, mask: np.ndarray) -> None:
        """The records hold the masks' areas; nothing else keeps them."""

    def stamped(self, png: bytes) -> bytes:
        """A PNG that says what made it (outputs/provenance.py)."""
        return with_text(png, STAMP_KEY, self.provenance.text)
