"""Where the maps go: a TensorBoard writer, PNG files, a W&B run. One place for the Lightning and Hugging Face callbacks.

wandb is imported only here, and only when a W&B sink is asked for (the `wandb` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gradcam_cli.integrations.snapshot import Shown

TABLE_COLUMNS = ["image", "class", "probability", "method", "layer", "epoch"]


def to_writer(writer: Any, shown: Sequence[Shown], tag: str, step: int) -> None:
    """Each overlay as `TAG/IMAGE/CLASS` at `step` (HWC) on anything with SummaryWriter's `add_image`."""
    for item in shown:
        writer.add_image(f"{tag}/{item.image}/{item.class_name}", np.asarray(item.overlay), global_step=step, dataformats="HWC")


def to_pngs(folder: Path, shown: Sequence[Shown]) -> None:
    """Each overlay as `folder/IMAGE.CLASS.png`."""
    folder.mkdir(parents=True, exist_ok=True)
    for item in shown:
        item.overlay.save(folder / file_name(f"{item.image}.{item.class_name}.png"))


def wandb_payload(shown: Sequence[Shown], tag: str, *, method: str, layers: Any, epoch: float | None) -> dict[str, Any]:
    """`TAG/IMAGE/CLASS` images captioned `CLASS p=0.93`, and `TAG/records`: a table of them, for one `log` call."""
    import wandb

    layer = "default" if layers is None else str(layers)
    payload: dict[str, Any] = {}
    rows = []
    for item in shown:
        image = wandb.Image(item.overlay, caption=f"{item.class_name} p={item.probability:.2f}")
        payload[f"{tag}/{item.image}/{item.class_name}"] = image
        rows.append([image, item.class_name, item.probability, method, layer, epoch])
    columns: list[str | int] = [*TABLE_COLUMNS]
    payload[f"{tag}/records"] = wandb.Table(columns=columns, data=rows)
    return payload


def file_name(name: str) -> str:
    """A class or image name made a safe file name (no folder separators)."""
    return "".join("_" if c in "/\\:" else c for c in name)
