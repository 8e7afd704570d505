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
from lightning.pytorch.loggers import MLFlowLogger, TensorBoardLogger, WandbLogger

from gradcam_cli.api_arguments import LayerSpec
from gradcam_cli.errors import Notice
from gradcam_cli.integrations.sinks import to_mlflow, to_pngs, to_writer, wandb_payload
from gradcam_cli.integrations.snapshot import CamCallbackError, Images, Shown, Watched, checked_every
from gradcam_cli.integrations.val_images import first_images, first_loader, no_loader
from gradcam_cli.model.faults import fault_line

__all__ = ["CamCallback", "CamCallbackError"]


class CamCallback(pl.Callback):
    """Explain `images` with the module as it is at the end of every `every_n_epochs`-th validation epoch.

    On global rank 0 only, never in the sanity check. A TensorBoardLogger gets `add_image` (tag
    `TAG/IMAGE/CLASS`, step the trainer's global step); a WandbLogger `wandb.Image`s captioned `CLASS p=0.93` and a
    `TAG/records` table at that step; an MLFlowLogger time-stepped images `TAG/IMAGE/CLASS` at that step and
    `TAG/records/step=S.json`; a logger with a `log_dir` (CSVLogger) PNG files under `log_dir/gradcam/epoch=E/`; any
    other logger is named once in a warning and skipped. The options are log_cams's; `images=N` takes the first N
    images of the validation loader at the first explain and keeps them; several methods or layers give a grid.
    """

    def __init__(
        self,
        images: Images | int,
        every_n_epochs: int = 1,
        method: str | Sequence[str] = "gradcam",
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
        self._checked = False  # by setup: a validation without it (a bare validate loop) explains nothing

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """The images decoded and the layers resolved now: a bad one is one line before training starts."""
        self.watched.check(pl_module)
        self._checked = True
        if self.watched.count is not None and stage == "fit" and not _has_val_loader(trainer):
            raise no_loader(self.watched.count, "give trainer.fit val_dataloaders (or a datamodule's val_dataloader)")

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero or not self._checked:
            return
        epoch = trainer.current_epoch
        if (epoch + 1) % self.every_n_epochs:
            return
        if self.watched.image_set is None and self.watched.count is not None:
            loader = first_loader(trainer.val_dataloaders)
            if loader is None:
                raise no_loader(self.watched.count, "give trainer.fit val_dataloaders (or a datamodule's val_dataloader)")
            self.watched.take(first_images(loader, self.watched.count), pl_module)
        shown = self.watched.explain(pl_module)
        for logger in trainer.loggers:
            try:
                self._log(logger, shown, epoch, trainer.global_step)
            except Exception as error:  # noqa: BLE001 - a tracker that fails (a server gone) must not stop training
                name = type(logger).__name__
                self._warn(f"fail {name}", f"CamCallback: could not write to {name} ({fault_line(error)}); its maps are skipped")

    def _log(self, logger: Any, shown: list[Shown], epoch: int, step: int) -> None:
        """To TensorBoard or W&B as images, to a logger with a folder as PNGs; any other named once and skipped."""
        watched = self.watched
        if isinstance(logger, TensorBoardLogger):
            to_writer(logger.experiment, shown, watched.tag, step)
        elif isinstance(logger, WandbLogger):  # log_metrics adds trainer/global_step, as log_image and log_table do
            logger.log_metrics(wandb_payload(shown, watched.tag, epoch=epoch), step=step)
        elif isinstance(logger, MLFlowLogger) and logger.run_id is not None:
            to_mlflow(logger.experiment, logger.run_id, shown, watched.tag, step)
        elif isinstance(getattr(logger, "log_dir", None), (str, Path)):
            to_pngs(Path(logger.log_dir) / watched.tag / f"epoch={epoch}", shown)
        else:
            self._warn(type(logger).__name__, f"CamCallback: {type(logger).__name__} takes no images; its maps are skipped")

    def _warn(self, key: str, message: str) -> None:
        """A logger the callback cannot write to, named once (per `key`); training goes on."""
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(Notice(message), stacklevel=3)


def _has_val_loader(trainer: pl.Trainer) -> bool:
    """Whether the fit has a validation loader to take images from (True when Lightning's loop hides it)."""
    source = getattr(getattr(trainer.fit_loop.epoch_loop, "val_loop", None), "_data_source", None)
    return source is None or not hasattr(source, "is_defined") or bool(source.is_defined())
