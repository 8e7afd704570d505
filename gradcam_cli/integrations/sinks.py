"""Where the maps go: a TensorBoard writer, PNG files, a W&B run. One place for the Lightning and Hugging Face callbacks.

wandb is imported only here, and only when a W&B sink is asked for (the `wandb` extra); MLflow is reached through the
client the caller hands over (Lightning's MLFlowLogger's, or one made for the active run), not imported here.
"""

from __future__ import annotations

import re
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


def wandb_payload(shown: Sequence[Shown], tag: str, *, epoch: float | None) -> dict[str, Any]:
    """`TAG/IMAGE/CLASS` images captioned `CLASS p=0.93`, and `TAG/records`: a table of them (a grid's: a row per
    cell, each its own overlay, method and layer), for one `log` call."""
    import wandb

    payload: dict[str, Any] = {}
    rows = []
    for item in shown:
        image = wandb.Image(item.overlay, caption=f"{item.class_name} p={item.probability:.2f}")
        payload[f"{tag}/{item.image}/{item.class_name}"] = image
        for cell in item.cells or (item,):
            picture = image if cell is item else wandb.Image(cell.overlay, caption=f"{cell.method} {cell.layer}")
            rows.append([picture, cell.class_name, cell.probability, cell.method, cell.layer, epoch])
    columns: list[str | int] = [*TABLE_COLUMNS]
    payload[f"{tag}/records"] = wandb.Table(columns=columns, data=rows)
    return payload


def to_mlflow(client: Any, run_id: str, shown: Sequence[Shown], tag: str, step: int) -> None:
    """Each overlay as an MLflow time-stepped image `TAG/IMAGE/CLASS` at `step` (`MlflowClient.log_image` with a key:
    the run's image charts, a step slider per key, as TensorBoard shows them), and the records (a grid's a row per
    cell) as `TAG/records/step=S.json`."""
    records = []
    for item in shown:
        client.log_image(run_id, item.overlay, key=mlflow_key(f"{tag}/{item.image}/{item.class_name}"), step=step)
        for cell in item.cells or (item,):
            records.append({k: getattr(cell, k) for k in ("image", "class_name", "probability", "method", "layer")})
    client.log_dict(run_id, {"step": step, "records": records}, f"{mlflow_key(tag)}/records/step={step}.json")


def mlflow_key(name: str) -> str:
    """A name as MLflow takes an image key: letters, digits, `_-./ `; anything else (an ImageNet class's comma) `_`."""
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", name)


def file_name(name: str) -> str:
    """A class or image name made a safe file name (no folder separators)."""
    return "".join("_" if c in "/\\:" else c for c in name)
