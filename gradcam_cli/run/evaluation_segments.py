"""A segmenter's part in `gradcam eval`: a unit per explained region, behind the seam run/evaluation_units.py defines.

A unit is one region the first method's maps explain (each class the model
gives ⟨min_area⟩ of the image, or the ⟨classes⟩ asked for). Every other
method and the sanity check's randomised copies explain exactly those regions
(cams/segments.ImageRegions.fixed), so every map set answers the same
question. A perturbed input is scored by the class's mean probability over the
region: the region's summed score, which the maps explain, grows with its
area and has no scale, where a probability between 0 and 1 reads alike across
regions and images, and falls as the evidence for the class there is taken
away. Its own measures: the share of a map's energy inside its region, and
whether its peak lies in it (the pointing game), on the photo, as explain's
records compute the first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from gradcam_cli.cams.segments import ImageRegions, SegmentTargets
from gradcam_cli.cams.targets import Targets
from gradcam_cli.geometry import labels_to_original
from gradcam_cli.maps import CamBatch
from gradcam_cli.model.segmenters import Segmenter
from gradcam_cli.outputs.detection_files import in_region
from gradcam_cli.outputs.outlines import DrawnRegion
from gradcam_cli.outputs.records import class_name as name_of
from gradcam_cli.run.evaluation_parts import BatchMaps, Decoded, Described, OwnMeasures, PhotoMap, Units, own_place_metrics
from gradcam_cli.vocab import Metric

if TYPE_CHECKING:
    from gradcam_cli.run.prepare import PreparedRun
    from gradcam_cli.settings import ExplainSettings


@dataclass(frozen=True)
class RegionScores:
    """A segmenter's scorer (faithfulness.Scorer): unit u is one region (U, H, W) of the input and its class; each
    perturbed input is scored by the class's mean probability over the region."""

    segmenter: Segmenter
    regions: torch.Tensor  # (U, H, W) bool in the model input's pixels
    classes: torch.Tensor  # (U,)
    input_hw: tuple[int, int]
    model_name: str = "the model"

    @property
    def count(self) -> int:
        return len(self.classes)

    def __call__(self, model: nn.Module, inputs: torch.Tensor, units: torch.Tensor) -> torch.Tensor:
        """(B,) the mean probability of unit `units[b]`'s class over its region in `inputs[b]`."""
        probabilities = self.segmenter.probabilities(self.segmenter.scores(model(inputs), self.model_name, self.input_hw))
        regions = self.regions.to(probabilities.device)[units].float()  # (B, H, W)
        chosen = probabilities[torch.arange(len(units), device=units.device), self.classes.to(units.device)[units]]
        return (chosen * regions).flatten(1).sum(1) / regions.flatten(1).sum(1).clamp_min(1)


class SegmentUnits:
    """A segmenter: a unit per explained region, scored by its class's mean probability in it."""

    unit = "region"
    score = "class probability in the region"
    own_measures = frozenset({"energy_in_region"})

    def __init__(self, run: PreparedRun) -> None:
        assert run.loaded.segmenter is not None
        self.segmenter, self.model_name = run.loaded.segmenter, run.loaded.name
        self.input_hw = run.loaded.data_config.input_hw
        self.largest_detection: int | None = max(0, run.targets.count - 1)  # the `.segN` of an overlay's name

    def check(self, settings: ExplainSettings) -> None:
        return None  # ⟨classes⟩ and ⟨min_area⟩ pick the regions, as explain's; eval takes no named region or truth

    def metrics(self, asked: Sequence[Metric], defaulted: bool, boxes: Path | None) -> tuple[Metric, ...]:
        return own_place_metrics(
            asked, defaulted, boxes, "⟨boxes⟩ does not apply to a segmenter: its energy in region and pointing game use each "
            "region itself; leave ⟨boxes⟩ out",
        )  # fmt: skip

    def units(self, first: CamBatch, batch: Sequence[Decoded]) -> Units:
        assert first.found is not None
        image, rank, found, on_photo = [], [], [], []
        for row in range(len(batch)):
            for k in first.ranks(row):
                image.append(row)
                rank.append(k)
                found.append(first.found[row].segments[k])
                on_photo.append(labels_to_original(found[-1].region.cpu().numpy(), batch[row].geometry, fill=False))
        long = {"dtype": torch.long}
        return Units(
            image=torch.tensor(image, **long), rank=torch.tensor(rank, **long),  # type: ignore[arg-type]
            classes=torch.tensor([s.class_index for s in found], **long), regions=tuple(found),  # type: ignore[arg-type]
            on_photo=tuple(on_photo),
        )  # fmt: skip

    def targets(self, units: Units, rows: int) -> Targets:
        """The first method's regions again, each image's exactly."""
        assert units.regions is not None
        per_image = [
            ImageRegions(fixed=tuple((s.class_index, s.kind, s.region) for s in (units.regions[u] for u in units.of(row))))
            for row in range(rows)
        ]
        return SegmentTargets(self.segmenter, self.input_hw).for_images(per_image)

    def scorer(self, units: Units) -> RegionScores:
        assert units.regions is not None
        regions = (
            torch.stack([s.region.cpu() for s in units.regions]) if units.regions else torch.zeros((0, *self.input_hw), dtype=torch.bool)
        )
        return RegionScores(self.segmenter, regions, units.classes, self.input_hw, self.model_name)

    def measure(self, metrics: Sequence[Metric], batch: Sequence[Decoded], sets: BatchMaps, photo_map: PhotoMap) -> OwnMeasures:
        """Per map set and region: the share of the map's energy in the region, and whether its peak is in it, on the photo."""
        wanted = [key for metric, key in ((Metric.energy, "energy_in_region"), (Metric.pointing, "pointing")) if metric in metrics]
        if not wanted:
            return {}
        units = sets.units
        assert units.on_photo is not None
        out: OwnMeasures = {}
        for name, maps in sets.maps.items():
            figures = [in_region(photo_map(batch[int(units.image[u])], maps[u]), units.on_photo[u]) for u in range(len(units))]
            peaks = [None if peak is None else float(peak) for _, peak in figures]
            values = {"energy_in_region": [energy for energy, _ in figures], "pointing": peaks}
            out[name] = {key: values[key] for key in wanted}
        return out

    def describe(self, sets: BatchMaps, unit: int, item: Decoded, names: Sequence[str] | None) -> Described:
        assert sets.units.regions is not None and sets.units.on_photo is not None
        segment, rank = sets.units.regions[unit], int(sets.units.rank[unit])
        name = name_of(names, segment.class_index)
        region = sets.units.on_photo[unit]
        label = f"{name or f'class {segment.class_index}'} {100 * float(region.mean()):.1f}%"
        return Described(
            class_index=segment.class_index, class_name=name, probability=round(segment.mean_probability, 6),
            score=round(segment.score, 6), topk=[], segment=rank, region=segment.kind, outline=DrawnRegion(region, label, rank),
        )  # fmt: skip
