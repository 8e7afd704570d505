"""A 3-D segmenter's volume out: each region's map as its own NIfTI and montage, the predicted labels as a NIfTI, and
the volume's record with its `segments`.

The model saw the scan resized to its input; its regions and maps are in
those voxels, so each is brought back to the scan's own shape (a map
trilinearly, a region and the labels by the nearest voxel), where the record
measures them: a region's voxels and share of the scan, its map's energy in
it. `NAME.METHOD.segK.nii.gz` and `NAME.METHOD.segK.png` per region (the
montage through its map's peak, outputs/volume_files.write_map_volume), then
`NAME.METHOD.labels.nii.gz` last: its presence says the volume is done.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from gradcam_cli.found import Segments
from gradcam_cli.geometry import resize
from gradcam_cli.inputs.extras import volume_library
from gradcam_cli.inputs.volume_slices import WholeVolume
from gradcam_cli.inputs.volumes import Volume
from gradcam_cli.outputs.detection_files import in_region
from gradcam_cli.outputs.files import write_atomic
from gradcam_cli.outputs.records import ImageRecord, SegmentRecord, class_name
from gradcam_cli.outputs.video_files import FramePicture
from gradcam_cli.outputs.volume_files import write_map_volume
from gradcam_cli.vocab import Colormap

if TYPE_CHECKING:
    from gradcam_cli.maps import CamBatch
    from gradcam_cli.outputs.writer import ResultWriter

LABELS_SUFFIX = ".labels.nii.gz"
NIFTI_INTENT_LABEL = 1002  # the NIfTI intent that tells a viewer the values are labels


@dataclass
class RegionsPicture(FramePicture):
    """A 3-D segmenter's volume on its way to the sink: each region's map and the labels, in the scan's voxels."""

    maps: list[tuple[str, np.ndarray]] = field(default_factory=list)  # (segK, its map)
    labels: np.ndarray | None = None


def region_paths(labels: Path, which: str) -> tuple[Path, Path]:
    """`NAME.METHOD.segK.nii.gz` and its montage `NAME.METHOD.segK.png`, beside the labels `NAME.METHOD.labels.nii.gz`."""
    stem = labels.name.removesuffix(LABELS_SUFFIX)
    return labels.with_name(f"{stem}.{which}.nii.gz"), labels.with_name(f"{stem}.{which}.png")


def segment_outputs(montage: Path) -> list[Path]:
    """A segmenter's volume's outputs known before its run: the labels (first, written last) and the first region's
    montage (stamped: another run's is not written over)."""
    labels = montage.with_name(montage.name.removesuffix(".png") + LABELS_SUFFIX)
    return [labels, region_paths(labels, "seg0")[1]]


def volume_regions(writer: ResultWriter, path: Path, whole: WholeVolume, cams: CamBatch, row: int, labels: Path) -> FramePicture:
    """A volume a 3-D segmenter read whole: each region's map and mask back on the scan's voxels, and the record."""
    assert cams.found is not None
    found: Segments = cams.found[row]
    shape = tuple(whole.scan.shape)
    maps, records, outputs = [], [], [str(labels)]
    for k in cams.ranks(row):
        segment = found.segments[k]
        region = _nearest(segment.region, shape).astype(bool)
        cam = resize(cams.maps[row, k].float(), shape).numpy()
        nifti, montage = region_paths(labels, f"seg{k}")
        maps.append((f"seg{k}", cam))
        outputs += [str(nifti), str(montage)]
        area = int(region.sum())
        records.append(
            SegmentRecord(
                rank=k, class_index=segment.class_index, class_name=class_name(writer.class_names, segment.class_index),
                region=segment.kind, area=area, area_fraction=round(area / max(1, region.size), 6),
                score=round(segment.score, 6), mean_probability=round(segment.mean_probability, 6),
                blank=bool(cams.blank[row, k]), energy_in_region=in_region(cam, region)[0], overlay=str(montage),
            )
        )  # fmt: skip
    record = ImageRecord(input=str(path), ok=True, outputs=outputs, segments=records, **writer.context)
    return RegionsPicture(record, whole.image, maps=maps, labels=_nearest(found.labels, shape))


def write_regions(
    labels: Path, picture: RegionsPicture, volume: Volume, scan: np.ndarray, stamped: Callable[[bytes], bytes],
    colormap: Colormap = Colormap.jet, alpha: float = 0.5,
) -> None:  # fmt: skip
    """Each region's map (NIfTI and stamped montage), then the labels NIfTI, all with the scan's affine and header."""
    for which, cam in picture.maps:
        nifti, montage = region_paths(labels, which)
        write_map_volume(nifti, montage, volume, cam, scan, stamped, colormap, alpha)
    assert picture.labels is not None
    write_atomic(labels, gzip.compress(labels_nifti_bytes(picture.labels, volume), compresslevel=6, mtime=0))


def labels_nifti_bytes(labels: np.ndarray, volume: Volume) -> bytes:
    """The class of each voxel as NIfTI: uint8 when every class fits, else int16; a binary segmenter's background (-1)
    written as 0 and its one class as 1, the mask a viewer shows. The scan's header and affine, no scaling."""
    nibabel = volume_library("nibabel", "writing NIfTI labels")
    if labels.min(initial=0) < 0:  # a binary segmenter: -1 background, 0 its class
        labels = labels + 1
    dtype = np.uint8 if labels.max(initial=0) < 256 else np.int16
    header = volume.header.copy()
    kind = nibabel.Nifti2Image if isinstance(header, nibabel.Nifti2Header) else nibabel.Nifti1Image
    image = kind(np.asarray(labels, dtype=dtype), volume.affine, header=header)
    image.set_data_dtype(dtype)
    image.header.set_slope_inter(1.0, 0.0)
    image.header["cal_min"], image.header["cal_max"] = 0.0, float(labels.max(initial=0))
    image.header["intent_code"] = NIFTI_INTENT_LABEL
    image.header["descrip"] = b"gradcam predicted labels"
    return bytes(image.to_bytes())


def _nearest(voxels: torch.Tensor, shape: tuple[int, ...]) -> np.ndarray:
    """A (D, H, W) mask or label volume in the model's voxels → the scan's `shape`, each voxel its nearest's value."""
    if tuple(voxels.shape) == tuple(shape):
        return voxels.cpu().numpy()
    resized = F.interpolate(voxels.float()[None, None], size=tuple(shape), mode="nearest-exact")[0, 0]
    return resized.to(voxels.dtype).cpu().numpy()
