"""A detector's batch judged against its ⟨truth⟩: detections matched (tp, fp), missed objects found and explained.

Matching is COCO's (evaluate/matching.py) in the photo's pixels. A missed
object of a class the model has is then explained by the score for that
class of the candidate that overlaps it best before the score threshold and
non-maximum suppression: one more forward of the images that have misses,
with the model's postprocessing opened (model/detectors.py: every_candidate),
and one backward per missed object. Nothing else in a run knows about truth
boxes: the pipeline hands each batch here when the run has them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from gradcam_cli.cams.detections import Lost, MissedTargets
from gradcam_cli.found import Detections, Judged, Missed
from gradcam_cli.errors import GradcamError
from gradcam_cli.evaluate.matching import match_detections
from gradcam_cli.geometry import boxes_to_input, boxes_to_original, input_pixel
from gradcam_cli.inputs.detection_truth import DetectionTruth, TrueBox, read_detection_truth
from gradcam_cli.maps import CamBatch
from gradcam_cli.model.faults import fault_line, raised_by_model
from gradcam_cli.run.batches import Item
from gradcam_cli.run.prepare import PreparedRun
from gradcam_cli.values import ClassIndex

UNKNOWN_SHOWN = 5


class TruthJudge:
    """The run's true boxes, and each batch's detections judged against them."""

    def __init__(self, run: PreparedRun, truth_file: Path, iou: float, warn: Callable[[str], None]) -> None:
        self.run, self.iou, self.warn = run, iou, warn
        self.truth: DetectionTruth = read_detection_truth(truth_file, ClassIndex(run.loaded.class_names))
        self.said_failure = False
        if self.truth.unknown:
            shown = ", ".join(self.truth.unknown[:UNKNOWN_SHOWN]) + (" and more" if len(self.truth.unknown) > UNKNOWN_SHOWN else "")
            warn(
                f"{truth_file}: {len(self.truth.unknown)} true class(es) the detector does not have ({shown}); "
                "their objects count as missed, unexplained"
            )

    def unmatched_notice(self, inputs: list[Path]) -> str | None:
        """One line for the truth's entries that name no input of the run (a typo, another split): they count for nothing."""
        unmatched = self.truth.unmatched(inputs)
        if not unmatched:
            return None
        shown = ", ".join(unmatched[:UNKNOWN_SHOWN]) + (", …" if len(unmatched) > UNKNOWN_SHOWN else "")
        return f"⟨truth⟩ names {len(unmatched)} image(s) that are not among the inputs ({shown}); their boxes are not used"

    def boxes(self, path: Path, image_hw: tuple[int, int]) -> list[TrueBox] | None:
        """An input's true boxes (None: the truth says nothing of it); a box outside its image is the image's error."""
        return self.truth.of(path, image_hw)

    def judge(self, batch: list[tuple[Item, CamBatch, int]]) -> None:
        """Each item's detections replaced by their judgement (in its batch's `found`); missed objects explained."""
        matched = [(item, cams, row, self._matched(item, cams.found[row])) for item, cams, row in batch if cams.found]
        judged = [(item, cams, row, verdict) for item, cams, row, verdict in matched if verdict is not None]
        maps = self._missed_maps([(item, verdict) for item, _, _, verdict in judged])
        for (_, cams, row, verdict), missed in zip(judged, maps):
            assert cams.found is not None
            cams.found[row] = replace(verdict, missed=missed)

    def _matched(self, item: Item, found: object) -> Judged | None:
        """The kept detections (rank k the k-th, cams/detections.py) matched to the item's true boxes (no truth: None)."""
        if item.truth is None or not isinstance(found, Detections) or item.geometry is None:
            return None
        boxes = boxes_to_original(found.boxes, item.geometry) if len(found) else torch.zeros((0, 4))
        truth = [(box.box, box.index, box.name) for box in item.truth]
        labels = [-1 if index is None else index for _, index, _ in truth]
        matching = match_detections(boxes, found.labels, found.scores, [box for box, _, _ in truth] or np.zeros((0, 4)), labels, self.iou)
        missed = [Missed(j, None, None, None) for j in matching.missed]
        return Judged(found, list(matching.match), list(matching.iou), truth, missed)

    def _missed_maps(self, judged: list[tuple[Item, Judged]]) -> list[list[Missed]]:
        """Each judged item's missed objects with their candidate and map: one forward of the images that have some."""
        lost_of = [self._lost(item, verdict) for item, verdict in judged]
        rows = [i for i, lost in enumerate(lost_of) if lost]
        out = [list(verdict.missed) for _, verdict in judged]
        if not rows:
            return out
        items = [judged[i][0] for i in rows]
        targets = MissedTargets(
            self.run.loaded.detector,  # type: ignore[arg-type]
            tuple(tuple(lost for _, lost in lost_of[i]) for i in rows),
            tuple(input_pixel(item.geometry) for item in items),  # type: ignore[arg-type]
            self.run.loaded.data_config.input_hw,
        )
        cams = self._compute(items, targets)
        if cams is None:
            return out
        for n, i in enumerate(rows):
            candidates = cams.found[n] if cams.found else []
            for k, (position, _) in enumerate(lost_of[i]):
                truth = out[i][position].truth
                candidate = candidates[k] if k < len(candidates) else None
                cam = cams.maps[n, k] if candidate is not None else None
                out[i][position] = Missed(truth, candidate, cam, bool(cams.blank[n, k]) if candidate is not None else None)
        return out

    def _lost(self, item: Item, verdict: Judged) -> list[tuple[int, Lost]]:
        """(position in `missed`, the object in the input's pixels) for each missed object of a class the model has."""
        assert item.geometry is not None
        lost = []
        for position, missed in enumerate(verdict.missed):
            box, index, _ = verdict.truth[missed.truth]
            if index is not None:
                in_input = boxes_to_input(torch.tensor([box], dtype=torch.float32), item.geometry)[0].tolist()
                lost.append((position, Lost((in_input[0], in_input[1], in_input[2], in_input[3]), index)))
        return lost

    def _compute(self, items: list[Item], targets: MissedTargets) -> CamBatch | None:
        """The missed objects' maps; a model that fails on this forward leaves them unexplained, said once."""
        try:
            return self.run.compute(torch.from_numpy(np.stack([item.array for item in items])), targets).to_cpu()  # type: ignore[misc]
        except (Exception, SystemExit) as error:  # noqa: BLE001 - the model's own failure; ours go up
            if isinstance(error, GradcamError) or not raised_by_model(error):
                raise
            if not self.said_failure:
                self.said_failure = True
                self.warn(
                    f"the model failed on the forward that finds missed objects' candidates ({fault_line(error)}); "
                    "they are left unexplained"
                )
            return None
