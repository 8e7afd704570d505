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
from gradcam_cli.integrations.sinks import to_pngs, to_writer, wandb_payload
from gradcam_cli.integrations.snapshot import CamCallbackError, Images, Shown, Watched, checked_every

__all__ = ["CamCallback", "CamCallbackError"]


class CamCallback(TrainerCallback):
    """Explain `images` with the `model` the Trainer passes, at every `every_n_evals`-th evaluation, on process zero.

    PNGs always go to `args.output_dir/TAG/step=S/IMAGE.CLASS.png`; with "tensorboard" in `report_to` the images go
    to the Trainer's own TensorBoardCallback writer (the event files its scalars are in; `attach(trainer)` lets the
    callback find it), with "wandb" to the active `wandb.run` at `train/global_step`. The options are log_cams's.
    """

    def __init__(
        self,
        images: Images,
        every_n_evals: int = 1,
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
        self.every_n_evals = checked_every(every_n_evals, "every_n_evals")
        options = {"method": method, "classes": classes, "class_names": class_names, "colormap": colormap, "alpha": alpha}
        self.watched = Watched(images, layers, tag, {"size": size, "mean": mean, "std": std}, options)
        self.evaluations = 0
        self._trainer: Trainer | None = None
        self._warned = False

    def attach(self, trainer: Trainer) -> CamCallback:
        """Add the callback to `trainer` and remember it, to find its TensorBoard writer. Returns the callback."""
        self._trainer = trainer
        trainer.add_callback(self)
        return self

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """The images decoded and the layers resolved now: a bad one is one line before the first step."""
        self.watched.check(kwargs["model"])

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        self.evaluations += 1
        if self.evaluations % self.every_n_evals:
            return
        shown = self.watched.explain(kwargs["model"])  # trainer.evaluate() without train(): checked here first
        self._log(args, state, shown)

    def _log(self, args: TrainingArguments, state: TrainerState, shown: list[Shown]) -> None:
        """PNGs always; TensorBoard and W&B as `report_to` enables them."""
        step, watched = state.global_step, self.watched
        to_pngs(Path(args.output_dir or ".") / watched.tag / f"step={step}", shown)
        report_to = args.report_to if isinstance(args.report_to, list) else [args.report_to]
        if "tensorboard" in report_to or "all" in report_to:
            writer = self._tensorboard_writer()
            if writer is not None:
                to_writer(writer, shown, watched.tag, step)
                writer.flush()
        if "wandb" in report_to or "all" in report_to:
            import wandb

            if wandb.run is not None:
                payload = wandb_payload(shown, watched.tag, method=watched.options["method"], layers=watched.layers, epoch=state.epoch)
                wandb.run.log({**payload, "train/global_step": step})  # as the Trainer's WandbCallback logs

    def _tensorboard_writer(self) -> Any:
        """The Trainer's TensorBoardCallback writer; without `attach(trainer)` none is reachable: said once."""
        callbacks = self._trainer.callback_handler.callbacks if self._trainer is not None else []
        writers = [c.tb_writer for c in callbacks if isinstance(c, TensorBoardCallback) and c.tb_writer is not None]
        if not writers and not self._warned:
            self._warned = True
            reason = "add it with CamCallback(...).attach(trainer)" if self._trainer is None else "its writer is closed"
            warnings.warn(Notice(f"CamCallback: no TensorBoard writer of the Trainer's ({reason}); PNGs only"), stacklevel=3)
        return writers[0] if writers else None
