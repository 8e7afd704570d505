"""Batches of decoded images, the out-of-memory policy (halve the batch, keep the size that worked) and the model's faults.

A batch that runs out of device memory is split in halves, down to one
image, and later batches stay at the size that worked; an image that does not
fit alone gets an error and the rest go on. A batch on which the model raises
is retried image by image: the image it fails on gets an error naming the
exception and the line of the user's code, the rest are done. Maps come out
one image at a time, as they are known, so a stop keeps what was finished.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import numpy as np
import torch

from gradcam_cli.errors import GradcamError
from gradcam_cli.geometry import Geometry
from gradcam_cli.inputs.detection_truth import TrueBox
from gradcam_cli.inputs.sources import Source
from gradcam_cli.maps import CamBatch
from gradcam_cli.model.device import free_device_memory, is_out_of_memory
from gradcam_cli.model.faults import fault_line, raised_by_model


@dataclass
class Item:
    """One input on its way through a batch."""

    source: Source
    base: PurePath  # the output name, claimed in input order
    existing: list[Path] | None = None  # --skip-existing: an earlier run's complete outputs
    image: np.ndarray | None = None
    geometry: Geometry | None = None
    array: np.ndarray | None = None
    error: str | None = None
    truth: list[TrueBox] | None = None  # a detector's true boxes in the photo's pixels, with ⟨truth⟩
    regions: Any = None  # a segmenter's named region and true mask (cams/segments.ImageRegions), when it has one
    frame: Any = None  # a video's frame or a volume's slice (inputs/video.Frame), decoded already, and where its result
    sequence: Any = None  # goes (run/sequences.SequenceJob)
    end: Any = None  # after a video's or volume's last picture: the marker that closes its output (run/sequences.SequenceEnd)

    @property
    def skipped(self) -> bool:
        return self.existing is not None

    @property
    def ready(self) -> bool:
        """Decoded and due: the model has to run on it."""
        return self.error is None and not self.skipped and self.end is None


class Batcher:
    """Groups decoded items into batches and computes their maps within the device's memory and the model's faults."""

    def __init__(
        self,
        compute: Callable[[torch.Tensor, list[Item]], CamBatch],
        batch_size: int,
        device: torch.device,
        warn: Callable[[str], None],
        one_by_one: bool = False,
    ) -> None:
        self.compute, self.device, self.warn = compute, device, warn
        self.limit = batch_size  # lowered when the device runs out of memory, or the model fails on batches only
        # masked-forward methods: each image's maps on their own (the forwards are chunked by channel anyway),
        # so its files are written as soon as they are done and a stop loses no finished image
        self.one_by_one = one_by_one

    def batches(self, items: Iterable[Item], checkpoint: Callable[[], None]) -> Iterator[list[Item]]:
        """Decoded items, grouped so each batch holds as many images that can run as the batch size allows."""
        batch: list[Item] = []
        ready = 0
        for item in items:
            checkpoint()
            batch.append(item)
            ready += item.ready
            if ready >= self.limit:
                yield batch
                batch, ready = [], 0
        if batch:
            yield batch

    def maps(self, items: list[Item]) -> Iterator[tuple[CamBatch, int] | str]:
        """Per item, in order and as soon as it is known, its maps (batch, row) or why it failed."""
        if self.one_by_one and len(items) > 1:
            for item in items:
                yield from self.maps([item])
            return
        try:
            arrays = [item.array for item in items if item.array is not None]  # every ready item has its array
            cams = self.compute(torch.from_numpy(np.stack(arrays)), items).to_cpu()
        except (Exception, SystemExit) as error:  # noqa: BLE001 - out of memory and the model's own faults; ours go up
            if is_out_of_memory(error):
                free_device_memory(self.device)
                yield from self._halved(items)
                return
            if isinstance(error, GradcamError) or not raised_by_model(error):
                raise
            yield from self._alone(items, error)
            return
        yield from ((cams, row) for row in range(len(items)))

    def _halved(self, items: list[Item]) -> Iterator[tuple[CamBatch, int] | str]:
        """Out of memory: the batch in halves, down to one image; later batches keep the size that worked."""
        if len(items) == 1:
            yield (
                f"{items[0].source.path}: out of memory on {self.device} even for this image alone; "
                "try --precision bf16, a smaller model or --device cpu"
            )
            return
        half = len(items) // 2
        self.limit = min(self.limit, half)
        self.warn(f"out of memory on {self.device} with {len(items)} images at once; retrying with {half}")
        yield from self.maps(items[:half])
        yield from self.maps(items[half:])

    def _alone(self, items: list[Item], error: BaseException) -> Iterator[tuple[CamBatch, int] | str]:
        """The model raised: an image alone gets an error record naming the exception; a batch is retried image by image.

        A batch that failed while every image alone works says so, and later batches hold one image:
        the model takes no batches, and each would fail again first.
        """
        if len(items) == 1:
            yield f"{items[0].source.path}: the model failed on this image: {fault_line(error)}"
            return
        failed = 0
        for index, item in enumerate(items):
            (result,) = self.maps([item])  # one image: one result
            failed += isinstance(result, str)
            if index + 1 == len(items) and not failed and self.limit > 1:  # said before the last result goes
                self.limit = 1
                self.warn(
                    f"the model failed on {len(items)} images at once ({fault_line(error)}) and on none alone; "
                    "explaining one image at a time"
                )
            yield result
