"""A segmenter's inputs before the model: each image's named region (⟨region⟩'s box, ⟨mask⟩) and its true mask.

Read in the decoding threads, beside the image (run/pipeline.py), and handed
to the batch's targets (cams/segments.py: `for_images`) in the input's pixels:
each photo pixel under an input pixel's centre, so labels never blend. What is
wrong with one image (a mask of another size, a box outside it, a class the
model lacks) is that image's error, one line; the others go on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gradcam_cli.cams.segments import ImageRegions
from gradcam_cli.errors import InputError, UsageError
from gradcam_cli.geometry import Geometry, input_centres, labels_to_input
from gradcam_cli.run.prepare import PreparedRun

UNMATCHED_SHOWN = 5


class RegionReader:
    """The run's named region and true masks, read per image."""

    def __init__(self, run: PreparedRun) -> None:
        settings = run.settings
        region = settings.target.region
        self.box = region if isinstance(region, tuple) else None
        self.over_truth = region == "truth"
        self.mask = _read_mask(settings.target.mask) if settings.target.mask is not None else None
        self.mask_name = str(settings.target.mask)
        self.truth = None
        if settings.inputs.truth is not None:
            from gradcam_cli.inputs.segmentation_truth import read_segmentation_truth

            assert run.loaded.segmenter is not None
            self.truth = read_segmentation_truth(settings.inputs.truth, run.loaded.class_names, run.loaded.segmenter.classes)

    @property
    def needed(self) -> bool:
        """Whether images bring anything: without a region, a mask or truth the prediction says every region."""
        return self.box is not None or self.mask is not None or self.truth is not None

    def of(self, path: Path, geometry: Geometry) -> ImageRegions:
        """One image's named region and true mask in the input's pixels (its true mask in the photo's too)."""
        named, kind = self._named(geometry)
        truth = self.truth.of(path, geometry.original_hw) if self.truth is not None else None
        if truth is None and self.over_truth:
            raise InputError("⟨region=truth⟩: no mask in ⟨truth⟩ names this image; give its mask, or leave ⟨region⟩ out")
        if truth is None:
            return ImageRegions(named, kind)
        on_input = torch.from_numpy(labels_to_input(truth.astype(np.int64), geometry, fill=-1))
        return ImageRegions(named, kind, on_input, truth)

    def unmatched_notice(self, inputs: list[Path]) -> str | None:
        """One line for the truth's masks that name no input of the run: they count for nothing."""
        unmatched = self.truth.unmatched(inputs) if self.truth is not None else []
        if not unmatched:
            return None
        shown = ", ".join(unmatched[:UNMATCHED_SHOWN]) + (", …" if len(unmatched) > UNMATCHED_SHOWN else "")
        return f"⟨truth⟩ holds {len(unmatched)} mask(s) that name none of the inputs ({shown}); they are not used"

    def _named(self, geometry: Geometry) -> tuple[torch.Tensor | None, str]:
        """⟨region⟩'s box or ⟨mask⟩ on this image's input (None: neither given)."""
        height, width = geometry.original_hw
        if self.box is not None:
            x1, y1, x2, y2 = self.box
            if x2 > width or y2 > height:
                raise InputError(
                    f"⟨region={x1:g},{y1:g},{x2:g},{y2:g}⟩ lies outside this image ({width}x{height} pixels); give a box "
                    "inside it, in the photo's pixels"
                )
            xs, ys = input_centres(geometry)
            inside = ((ys >= y1) & (ys < y2))[:, None] & ((xs >= x1) & (xs < x2))[None, :]
            if not inside.any():
                raise InputError(f"⟨region={x1:g},{y1:g},{x2:g},{y2:g}⟩ covers no pixel of the model's input; give a larger box")
            return torch.from_numpy(inside), "box"
        if self.mask is not None:
            if self.mask.shape != (height, width):
                mh, mw = self.mask.shape
                raise InputError(f"⟨mask={self.mask_name}⟩ is {mw}x{mh} pixels but the image is {width}x{height}; a mask "
                                 "must have its image's size")  # fmt: skip
            on_input = labels_to_input(self.mask, geometry, fill=0)
            if not on_input.any():
                raise InputError(f"⟨mask={self.mask_name}⟩ covers no pixel of the model's input; its region is empty there")
            return torch.from_numpy(on_input), "mask"
        return None, "box"


def _read_mask(path: Path) -> np.ndarray:
    """A mask PNG's nonzero pixels (any mode: 1-bit, grey, palette indices, RGB), read once for the run."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            array = np.asarray(image if image.mode in ("1", "L", "P", "I", "I;16") else image.convert("L"))
    except FileNotFoundError:
        raise UsageError(f"⟨mask={path}⟩ does not exist; give a PNG whose nonzero pixels are the region") from None
    except (OSError, UnidentifiedImageError, ValueError) as error:
        raise UsageError(f"⟨mask={path}⟩ is not an image Pillow can read ({error}); give a PNG") from None
    mask = array != 0
    if not mask.any():
        raise UsageError(f"⟨mask={path}⟩ has no nonzero pixel: its region is empty")
    return mask
