"""Batches of decoded images, and the out-of-memory policy: halve the batch, keep the size that worked.

A batch that runs out of device memory is split in halves, down to one
image, and later batches stay at the size that worked; an image that does not
fit alone gets an error and the rest go on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath

import numpy as np
import torch

from gradcam_cli.geometry import Geometry
from gradcam_cli.inputs.sources import Source
from gradcam_cli.maps import CamBatch
from gradcam_cli.model.device import free_device_memory, is_out_of_memory


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

    @property
    def skipped(self) -> bool:
        return self.existing is not None

    @property
    def ready(self) -> bool:
        """Decoded and due: the model has to run on it."""
        return self.error is None and not self.skipped


class Batcher:
    """Groups decoded items into batches and computes their maps within the device's memory."""

    def __init__(
        self, compute: Callable[[torch.Tensor], CamBatch], batch_size: int, device: torch.device, warn: Callable[[str], None]
    ) -> None:
        self.compute, self.device, self.warn = compute, device, warn
        self.limit = batch_size  # lowered when the device runs out of memory

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

    def maps(self, items: list[Item]) -> list[tuple[CamBatch, int] | str]:
        """Per item its maps (batch, row), or why it failed."""
        try:
            arrays = [item.array for item in items if item.array is not None]  # every ready item has its array
            cams = self.compute(torch.from_numpy(np.stack(arrays))).to_cpu()
            return [(cams, row) for row in range(len(items))]
        except Exception as error:  # noqa: BLE001 - only out-of-memory is handled, the rest goes up
            if not is_out_of_memory(error):
                raise
            free_device_memory(self.device)
        if len(items) == 1:
            return [
                f"{items[0].source.path}: out of memory on {self.device} even for this image alone; "
                "try --precision bf16, a smaller model or --device cpu"
            ]
        half = len(items) // 2
        self.limit = min(self.limit, half)
        self.warn(f"out of memory on {self.device} with {len(items)} images at once; retrying with {half}")
        return self.maps(items[:half]) + self.maps(items[half:])
