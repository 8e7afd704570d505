"""The measures of an evaluation that need more than the model: the objects' boxes, the methods themselves, files.

The pointing game reads the boxes (inputs/regions.py) and looks at each map
put back on the photo (a detector's needs none: its own box, run/
evaluation_units.py, measures it with its energy in box); the sanity check
re-initialises a copy of the network stage by stage (evaluate/sanity.py) and
asks the methods again; with ⟨report⟩ each map set's overlay is written for
the page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from gradcam_cli.run.evaluation_units import BatchMaps, Decoded, Described, EvalUnits, Units
from gradcam_cli.vocab import Metric

UNMATCHED_SHOWN = 5  # names of boxes' images that are not inputs, in the warning

if TYPE_CHECKING:
    from gradcam_cli.run.prepare import PreparedRun
    from gradcam_cli.settings import ExplainSettings


class EvaluatorView(Protocol):
    """What the extras ask of the evaluation (run/evaluation.py's Evaluator)."""

    settings: ExplainSettings
    runs: list[PreparedRun]
    model: torch.nn.Module
    loaded: Any
    warn: Callable[[str], None]
    work: Any  # run/evaluation.py's Work: each step said as it starts
    task: EvalUnits  # what a unit is: an image's class, or a detection

    def photo_map(self, item: Decoded, cam: torch.Tensor) -> np.ndarray: ...

    def maps_with(self, net: torch.nn.Module, x: torch.Tensor, units: Units) -> dict[str, torch.Tensor]: ...

    def class_matches(self, written: str, index: int) -> bool: ...


@dataclass
class Measured:
    """A batch's extra measures: per map set, per measure, a value per unit (an image, a detection); the sanity check's
    steps and rows."""

    values: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)
    rows: dict[str, dict[str, list[list[float]]]] = field(default_factory=dict)  # per method: spearman, ssim: a row per unit

    def put(self, name: str, measure: str, values: list[float | None]) -> None:
        self.values.setdefault(name, {})[measure] = values

    def measures_of(self, name: str, unit: int) -> dict[str, float | None]:
        return {measure: values[unit] for measure, values in self.values.get(name, {}).items()}

    def sanity_of(self, name: str, unit: int) -> dict[str, Any] | None:
        """What a record says of the sanity check: the steps, and its map's agreement after each."""
        rows = self.rows.get(name)
        if not rows:
            return None
        return {"steps": self.steps, **{key: per_unit[unit] for key, per_unit in rows.items()}}


class Extras:
    """The pointing game, the sanity check and the overlays of one evaluation."""

    def __init__(self, evaluator: EvaluatorView, metrics: tuple[Metric, ...], boxes: Path | None) -> None:
        from gradcam_cli.outputs.naming import OutputNamer

        self.evaluator, self.metrics = evaluator, metrics
        self.regions = None
        if Metric.pointing in metrics and boxes is not None:  # the task refused the pointing game without boxes where it needs them
            from gradcam_cli.inputs.regions import load_regions

            self.regions = load_regions(boxes)
        self.stages = _sanity_stages(evaluator.loaded, evaluator.warn) if Metric.sanity in metrics else []
        self.cascade: int | None = None  # the cascade's step count, once known
        self.namers: dict[str, OutputNamer] = {}
        self.said: set[str] = set()

    def unmatched_notice(self, inputs: list[Path]) -> str | None:
        """One line for the boxes that name no input of this run (a typo, or a stale row): they count for nothing."""
        if self.regions is None:
            return None
        unmatched = self.regions.unmatched(inputs)
        if not unmatched:
            return None
        shown = ", ".join(unmatched[:UNMATCHED_SHOWN]) + (", …" if len(unmatched) > UNMATCHED_SHOWN else "")
        return f"⟨boxes⟩ names {len(unmatched)} image(s) that are not among the inputs ({shown}); their boxes are not used"

    def steps(self, x: torch.Tensor) -> int:
        """How many steps `measure` says it starts for a batch: one per step of the sanity check's cascade."""
        if not self.stages:
            return 0
        if self.cascade is None:  # the same for every batch: one probe forward of one image, once
            from gradcam_cli.evaluate.sanity import cascade_steps

            self.cascade = len(cascade_steps(self.evaluator.model, self.stages, x[:1]))
        return self.cascade

    def measure(self, x: torch.Tensor, batch: list[Decoded], sets: BatchMaps) -> Measured:
        measured = Measured()
        for name, measures in self.evaluator.task.measure(self.metrics, batch, sets, self.evaluator.photo_map).items():
            for key, values in measures.items():
                measured.put(name, key, values)
        if self.regions is not None:
            self._pointing(batch, sets, measured)
        if self.stages:
            self._sanity(x, sets, measured)
        return measured

    def _say(self, message: str) -> None:
        if message not in self.said:
            self.said.add(message)
            self.evaluator.warn(message)

    def _pointing(self, batch: list[Decoded], sets: BatchMaps, measured: Measured) -> None:
        """Per unit, the object mask of its class in its image; per map set, whether the map's hottest point is on it."""
        from gradcam_cli.evaluate.pointing import pointing_hit
        from gradcam_cli.inputs.regions import object_mask

        assert self.regions is not None
        units = sets.units
        masks: list[np.ndarray | None] = []
        for unit in range(len(units)):
            item = batch[int(units.image[unit])]
            regions = self.regions.find(item.source.path)
            if regions is None:
                masks.append(None)
                continue
            explained = partial(self.evaluator.class_matches, index=int(units.classes[unit]))
            mask, notices = object_mask(regions, item.photo.shape[:2], explained)
            for notice in notices:
                self._say(f"{item.source.path}: {notice}")
            masks.append(mask)
        for name, maps in sets.maps.items():
            hits: list[float | None] = []
            for unit, mask in enumerate(masks):
                item = batch[int(units.image[unit])]
                hits.append(None if mask is None else pointing_hit(self.evaluator.photo_map(item, maps[unit]), mask))
            measured.put(name, "pointing", hits)

    def _sanity(self, x: torch.Tensor, sets: BatchMaps, measured: Measured) -> None:
        """The methods' maps after each step of the cascade, against the trained model's (baselines have no model)."""
        from gradcam_cli.evaluate.sanity import cascading_randomisation

        methods = {run.method.name: sets.maps[run.method.name] for run in self.evaluator.runs}
        result = cascading_randomisation(
            self.evaluator.model, x, self.stages, lambda net: self.evaluator.maps_with(net, x, sets.units), original=methods,
            on_step=lambda step: self.evaluator.work.step(f"sanity check, {step} randomised"),
        )  # fmt: skip
        measured.steps = list(result.steps)
        for name in methods:
            spearman, ssim = result.spearman[name], result.ssim[name]  # (S, U)
            measured.rows[name] = {"spearman": _rows(spearman.T), "ssim": _rows(ssim.T)}
            measured.put(name, "sanity", [round(float(v), 6) for v in spearman[-1].tolist()])
            measured.put(name, "sanity_ssim", [round(float(v), 6) for v in ssim[-1].tolist()])

    def write_overlay(self, item: Decoded, name: str, cam: torch.Tensor, unit: Described, largest_detection: int | None) -> str:
        """The map set's overlay of the unit, named as explain names it: `<image>.<method>.png`, a detection's
        `<image>.<method>.detN.png` with its box drawn, a region's `.segN.png` with its outline (as explain's ⟨each⟩)."""
        from gradcam_cli.outputs.boxes import draw_boxes
        from gradcam_cli.outputs.detection_files import detection_path
        from gradcam_cli.outputs.files import write_atomic
        from gradcam_cli.outputs.naming import OutputNamer
        from gradcam_cli.outputs.outlines import draw_outlines
        from gradcam_cli.outputs.picture import draw
        from gradcam_cli.outputs.render import encode_png

        outputs = self.evaluator.settings.outputs
        namer = self.namers.setdefault(name, OutputNamer(outputs.output_dir, name, largest_detection=largest_detection))
        base = OutputNamer.base_for(item.source.relative)
        path = namer.paths(base, unit.class_index if unit.named_class else None, raw=False)[0]
        if unit.detection is not None or unit.segment is not None:
            which = f"det{unit.detection}" if unit.detection is not None else f"seg{unit.segment}"
            path = detection_path(namer, base, which)
        _refuse_explains_picture(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        shown = self.evaluator.photo_map(item, cam)
        picture = draw(item.photo, shown, style=outputs.style, colormap=outputs.colormap, alpha=outputs.alpha)
        picture = draw_boxes(picture, [unit.drawn]) if unit.drawn is not None else picture
        picture = draw_outlines(picture, [unit.outline]) if unit.outline is not None else picture
        write_atomic(path, encode_png(picture))
        return str(path)


def _refuse_explains_picture(path: Path) -> None:
    """An evaluation's overlay never replaces one `gradcam explain` made (its picture carries explain's stamp): the
    explain run's records would then point at an evaluation's picture."""
    from gradcam_cli.errors import OutputError
    from gradcam_cli.inputs.sources import shown
    from gradcam_cli.outputs.provenance import made_by_stamp

    if made_by_stamp(path) is not None:
        raise OutputError(f"{shown(str(path))} was made by a `gradcam explain` run; give the evaluation its own ⟨output_dir⟩")


def _sanity_stages(loaded: Any, warn: Callable[[str], None]) -> list[str]:
    """The stages the cascade cuts at, as compare sweeps them: the hub's where it names them, else the probe rule at
    the run's input size (⟨input_size⟩), which finds them however deep a wrapper holds the network."""
    from gradcam_cli.layers.stages import stage_paths

    return stage_paths(loaded.model, loaded.arch, loaded.source, notice=warn, input_hw=loaded.data_config.input_hw)


def _rows(values: torch.Tensor) -> list[list[float]]:
    return [[round(float(v), 6) for v in row] for row in values.tolist()]
