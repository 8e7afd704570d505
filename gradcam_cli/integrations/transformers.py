"""`CamCallback` for the Hugging Face `Trainer`: maps of a fixed set of images at chosen evaluations.

The one module that imports transformers (the `hf` extra). Images and layer paths are checked at `on_train_begin`,
so a bad one stops `trainer.train()` before its first step, in one line. The sinks are the Lightning callback's
(integrations/sinks.py).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.integrations import TensorBoardCallback

from gradcam_cli.api_arguments import LayerSpec
from gradcam_cli.errors import Notice
from gradcam_cli.model.faults import fault_line
from gradcam_cli.integrations.sinks import to_mlflow, to_pngs, to_writer, wandb_payload
from gradcam_cli.integrations.snapshot import CamCallbackError, Images, Shown, Watched, checked_every
from gradcam_cli.integrations.val_images import first_images, no_loader

__all__ = ["CamCallback", "CamCallbackError"]


class CamCallback(TrainerCallback):
    """Explain `images` with the `model` the Trainer passes, at every `every_n_evals`-th evaluation, on process zero.

    PNGs always go to `args.output_dir/TAG/step=S/IMAGE.CLASS.png`; with "tensorboard" in `report_to` the images go
    to the Trainer's own TensorBoardCallback writer (the event files its scalars are in; `attach(trainer)` lets the
    callback find it), with "wandb" to the active `wandb.run` at `train/global_step`, with "mlflow" to the active
    MLflow run as time-stepped images at the global step. The options are log_cams's; `images=N` takes the first N
    images of the evaluation loader at the first explain and keeps them; several methods or layers give a grid.
    """

    def __init__(
        self,
        images: Images | int,
        every_n_evals: int = 1,
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
        self.every_n_evals = checked_every(every_n_evals, "every_n_evals")
        options = {"method": method, "classes": classes, "class_names": class_names, "colormap": colormap, "alpha": alpha}
        self.watched = Watched(images, layers, tag, {"size": size, "mean": mean, "std": std}, options)
        self.evaluations = 0
        self._trainer: Trainer | None = None
        self._warned = False
        self._failed: set[str] = set()  # sinks that failed once, named in a warning then

    def attach(self, trainer: Trainer) -> CamCallback:
        """Add the callback to `trainer` and remember it, to find its TensorBoard writer. Returns the callback."""
        self._trainer = trainer
        trainer.add_callback(self)
        return self

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """The images decoded and the layers resolved now: a bad one is one line before the first step."""
        self.watched.check(kwargs["model"])
        if self.watched.count is not None and self._trainer is not None and self._trainer.eval_dataset is None:
            raise no_loader(self.watched.count, "give the Trainer an eval_dataset, or images as paths or a tensor")

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        self.evaluations += 1
        if self.evaluations % self.every_n_evals:
            return
        if self.watched.image_set is None and self.watched.count is not None:
            self._take(kwargs)
        shown = self.watched.explain(kwargs["model"])  # trainer.evaluate() without train(): checked here first
        self._log(args, state, shown)

    def _take(self, kwargs: dict[str, Any]) -> None:
        """The first N images of the evaluation loader the Trainer passes (else `attach`'s trainer's), kept from now on."""
        assert self.watched.count is not None
        loader = kwargs.get("eval_dataloader")
        if loader is None and self._trainer is not None and self._trainer.eval_dataset is not None:
            loader = self._trainer.get_eval_dataloader()
        if loader is None:
            how = "give the Trainer an eval_dataset and add the callback with CamCallback(...).attach(trainer)"
            raise no_loader(self.watched.count, how)
        self.watched.take(first_images(loader, self.watched.count), kwargs["model"])

    def _log(self, args: TrainingArguments, state: TrainerState, shown: list[Shown]) -> None:
        """PNGs always; TensorBoard, W&B and MLflow as `report_to` enables them. A sink that fails is named once in a
        warning and skipped: training goes on."""
        step, tag = state.global_step, self.watched.tag
        report_to = args.report_to if isinstance(args.report_to, list) else [args.report_to]
        sinks = {
            "PNG files": lambda: to_pngs(Path(args.output_dir or ".") / tag / f"step={step}", shown),
            "tensorboard": lambda: self._to_tensorboard(shown, step),
            "wandb": lambda: _to_wandb(shown, tag, step, state.epoch),
            "mlflow": lambda: _to_mlflow(shown, tag, step),
        }
        for name, sink in sinks.items():
            if name != "PNG files" and name not in report_to and "all" not in report_to:
                continue
            try:
                sink()
            except Exception as error:  # noqa: BLE001 - a tracker that fails (a server gone) must not stop training
                if name not in self._failed:
                    self._failed.add(name)
                    warnings.warn(
                        Notice(f"CamCallback: could not write to {name} ({fault_line(error)}); its maps are skipped"), stacklevel=3
                    )

    def _to_tensorboard(self, shown: list[Shown], step: int) -> None:
        writer = self._tensorboard_writer()
        if writer is not None:
            to_writer(writer, shown, self.watched.tag, step)
            writer.flush()

    def _tensorboard_writer(self) -> Any:
        """The Trainer's TensorBoardCallback writer; without `attach(trainer)` none is reachable: said once."""
        callbacks = self._trainer.callback_handler.callbacks if self._trainer is not None else []
        writers = [c.tb_writer for c in callbacks if isinstance(c, TensorBoardCallback) and c.tb_writer is not None]
        if not writers and not self._warned:
            self._warned = True
            reason = "add it with CamCallback(...).attach(trainer)" if self._trainer is None else "its writer is closed"
            warnings.warn(Notice(f"CamCallback: no TensorBoard writer of the Trainer's ({reason}); PNGs only"), stacklevel=3)
        return writers[0] if writers else None


def _to_wandb(shown: list[Shown], tag: str, step: int, epoch: float | None) -> None:
    """The active `wandb.run`, with `train/global_step` as the Trainer's WandbCallback logs its metrics."""
    import wandb

    if wandb.run is not None:
        wandb.run.log({**wandb_payload(shown, tag, epoch=epoch), "train/global_step": step})


def _to_mlflow(shown: list[Shown], tag: str, step: int) -> None:
    """The active MLflow run (the Trainer's MLflowCallback's), through a client of the same tracking URI."""
    import mlflow

    run = mlflow.active_run()
    if run is not None:
        to_mlflow(mlflow.MlflowClient(), run.info.run_id, shown, tag, step)
