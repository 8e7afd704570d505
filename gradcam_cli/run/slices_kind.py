"""Volumes as a kind of input of many pictures (run/sequences.py), for a 2-D model: ⟨slices⟩ of one plane in, the
stacked maps out as NIfTI with the scan's affine and header, and a montage through the map's peak.

Each slice's map is scaled on its own, as every image's is (⟨norm⟩ none keeps
the raw values, comparable across slices); the montage scales the map volume
by its peak.
"""

from __future__ import annotations

from pathlib import Path

from gradcam_cli.inputs.volume_slices import VolumeSlices, is_volume
from gradcam_cli.outputs.files import is_complete
from gradcam_cli.outputs.video_files import FramePicture
from gradcam_cli.outputs.volume_files import SliceMaps
from gradcam_cli.outputs.writer import ResultWriter
from gradcam_cli.run.batches import Item
from gradcam_cli.run.sequences import Opened, RunShape, SequenceJob
from gradcam_cli.values import Window
from gradcam_cli.vocab import Plane

NIFTI_OUT = ".nii.gz"


def volume_outputs(writer: ResultWriter, item: Item) -> list[Path]:
    """A volume's map `NAME.METHOD.nii.gz`, and its montage `NAME.METHOD.png` (the picture an image would have)."""
    picture = writer.namer.paths(item.base, None, False)[0]
    return [picture.with_name(picture.name.removesuffix(".png") + NIFTI_OUT), picture]


def volume_complete(outputs: list[Path]) -> bool:
    """The map there and its montage whole (the montage written last)."""
    return outputs[0].is_file() and is_complete(outputs[-1])


class SliceSink:
    """A volume's slice maps into its map volume."""

    def __init__(self, maps: SliceMaps) -> None:
        self.maps = maps

    def add(self, picture: FramePicture) -> None:
        index = picture.record.slice
        assert index is not None
        self.maps.add(index, picture.shown)

    def finish(self) -> None:
        self.maps.finish()

    def abort(self) -> None:
        self.maps.abort()


class SlicesKind:
    """`.nii`, `.nii.gz` files and folders of one DICOM series: `NAME.METHOD.nii.gz` and the montage `NAME.METHOD.png`."""

    def __init__(self, writer: ResultWriter, plane: Plane, window: Window | None) -> None:
        self.writer, self.plane, self.window = writer, plane, window

    def accepts(self, path: Path) -> bool:
        return is_volume(path)

    def refusal(self, run: RunShape) -> str | None:
        """Why this run cannot explain volumes slice by slice, as each volume's one line; None when it can."""
        inputs, outputs = run.settings.inputs, run.settings.outputs
        if run.clip_length is not None:
            return "the model takes clips of video frames; a volume needs a 2-D model slice by slice (⟨slices⟩)"
        if not run.one_map or run.several_maps:
            return "⟨slices⟩ stacks one map a slice: explain one class of a classifier (the top one, or one ⟨classes⟩)"
        if inputs.every != 1 or inputs.fps is not None:
            return "⟨slices⟩ explains every slice of a volume; ⟨every⟩ and ⟨fps⟩ choose a video's frames"
        if outputs.save_guided or outputs.each:
            return "⟨save_guided⟩ and ⟨each⟩ do not apply to volumes"
        return None

    def outputs(self, item: Item) -> list[Path]:
        return volume_outputs(self.writer, item)

    def complete(self, outputs: list[Path]) -> bool:
        return volume_complete(outputs)

    def open(self, item: Item, outputs: list[Path]) -> tuple[Opened, SequenceJob]:
        opened = VolumeSlices(item.source.path, self.plane, self.window)
        writer = self.writer
        nifti, montage = outputs

        def sink() -> SliceSink:
            volume, scan = opened.volume, opened.scan
            return SliceSink(
                SliceMaps(nifti, montage, volume, scan, opened.plane, writer.stamped, colormap=writer.colormap, alpha=writer.alpha)
            )

        return opened, SequenceJob(montage, sink, intensity=opened.intensity)
