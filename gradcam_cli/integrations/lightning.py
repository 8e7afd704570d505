"""`CamCallback`: maps of a fixed set of images at the end of chosen validation epochs, sent to the trainer's loggers.

The one module that imports lightning (the `lightning` extra). Images and layer paths are checked at `setup`, so a
bad one stops the run before its first training step, in one line.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from gradcam_cli.api_arguments import LayerSpec
from gradcam_cli.errors import Notice
from gradcam_cli.integrations.sinks import to_pngs, to_writer, wandb_payload
from gradcam_cli.integrations.snapshot import CamCallbackError, Images, Shown, Watched, checked_every

__all__ = ["CamCallback", "CamCallbackError"]


class CamCallback(pl.Callback):
    """Explain `images` with the module as it is at the end of every `every_n_epochs`-th validation epoch.

    On global rank 0 only, never in the sanity check. A TensorBoardLogger gets `add_image` (tag
    `TAG/IMAGE/CLASS`, step the trainer's global step); a WandbLogger `wandb.Image`s captioned `CLASS p=0.93` and a
    `TAG/records` table at that step; a logger with a `log_dir` (CSVLogger) PNG files under
    `log_dir/gradcam/epoch=E/`; any other logger is named once in a warning and skipped. The options are log_cams's.
    """

    def __init__(
        self,
        images: Images,
        every_n_epochs: int = 1,
        method: str = "gradcam",
        layers: LayerSpec | Sequence[LayerSpec] | None = None,
        classes: int | Sequence[int] | None = None,
        *,
        tag: str = "gradcam",
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        size: int | tuple[int, int] | None = None,
        class_names: Sequence[str] | None = None,
        colormap: str = "jet",
        alpha: float = 0.5,
    ) -> None:
        self.every_n_epochs = checked_every(every_n_epochs, "every_n_epochs")
        options = {"method": method, "classes": classes, "class_names": class_names, "colormap": colormap, "alpha": alpha}
        self.watched = Watched(images, layers, tag, {"size": size, "mean": mean, "std": std}, options)
        self._warned: set[str] = set()

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """The images decoded and the layers resolved now: a bad one is one line before training starts."""
        self.watched.check(pl_module)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero or self.watched.image_set is None:
            return
        epoch = trainer.current_epoch
        if (epoch + 1) % self.every_n_epochs:
            return
        shown = self.watched.explain(pl_module)
        for logger in trainer.loggers:
            self._log(logger, shown, epoch, trainer.global_step)

    def _log(self, logger: Any, shown: list[Shown], epoch: int, step: int) -> None:
        """To TensorBoard or W&B as images, to a logger with a folder as PNGs; any other named once and skipped."""
        watched = self.watched
        if isinstance(logger, TensorBoardLogger):
            to_writer(logger.experiment, shown, watched.tag, step)
        elif isinstance(logger, WandbLogger):  # log_metrics adds trainer/global_step, as log_image and log_table do
            payload = wandb_payload(shown, watched.tag, method=watched.options["method"], layers=watched.layers, epoch=epoch)
            logger.log_metrics(payload, step=step)
        elif isinstance(getattr(logger, "log_dir", None), (str, Path)):
            to_pngs(Path(logger.log_dir) / watched.tag / f"epoch={epoch}", shown)
        elif type(logger).__name__ not in self._warned:
            self._warned.add(type(logger).__name__)
            warnings.warn(Notice(f"CamCallback: {type(logger).__name__} takes no images; its maps are skipped"), stacklevel=2)
