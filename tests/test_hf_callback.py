"""Maps while a model trains, second step (issue 27): the Hugging Face Trainer callback and W&B, with real trainers.

A tiny CNN wrapped as the Trainer wants it (a dict with `loss` and `logits`), 4 steps, evaluated at steps 2 and 4.
W&B runs offline into a temporary folder; what it wrote there is read back (slow: W&B starts its own process).
"""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import gradcam_cli
from conftest import assert_left_as_found, model_state, require, write_image

pytestmark = pytest.mark.usefixtures("one_thread")

require("transformers")
require("tensorboard")
wandb = require("wandb")
lightning = require("lightning")

import torch  # noqa: E402
from lightning.pytorch.loggers import WandbLogger  # noqa: E402
from test_training_callbacks import CLASSES, _check_mlflow_run, _data, _fit, _net  # noqa: E402
from test_training_callbacks import mlflow_store_fixture  # noqa: E402, F401 - the fixture `mlflow_store`
from torch import nn  # noqa: E402
from transformers import Trainer, TrainingArguments  # noqa: E402
from transformers.modeling_outputs import SequenceClassifierOutput  # noqa: E402

from gradcam_cli.errors import UsageError  # noqa: E402
from gradcam_cli.integrations.lightning import CamCallback as LightningCamCallback  # noqa: E402
from gradcam_cli.integrations.transformers import CamCallback, CamCallbackError  # noqa: E402


class HfShapes(nn.Module):
    """The shapes CNN as the Trainer takes a model: keyword inputs, a ModelOutput with `loss` (given labels) and `logits`."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _net()

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor | None = None) -> SequenceClassifierOutput:
        logits = self.net(pixel_values)
        loss = None if labels is None else nn.functional.cross_entropy(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)


def _records(count: int, seed: int) -> list[dict[str, Any]]:
    x, y = _data(count, seed).tensors
    return [{"pixel_values": x[i], "labels": y[i]} for i in range(count)]


class Checked(CamCallback):
    """CamCallback that checks the model, the random states and autocast are as found around every evaluation's work."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[int] = []

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = kwargs["model"]
        before = (model_state(model), torch.get_rng_state(), np.random.get_state(), random.getstate())
        super().on_evaluate(args, state, control, **kwargs)
        assert_left_as_found(model, before[0])
        assert torch.equal(torch.get_rng_state(), before[1]) and random.getstate() == before[3]
        assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), before[2]))
        self.seen.append(state.global_step)


def _trainer(folder: Path, report_to: list[str], callback: CamCallback, model: nn.Module | None = None, evaluate: bool = True) -> Trainer:
    args = TrainingArguments(
        output_dir=str(folder),
        max_steps=4,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        eval_strategy="steps" if evaluate else "no",
        eval_steps=2,
        logging_steps=1,
        save_strategy="no",
        report_to=report_to,
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = Trainer(
        model=model or HfShapes(), args=args, train_dataset=_records(32, 1), eval_dataset=_records(8, 2) if evaluate else None
    )
    callback.attach(trainer)
    return trainer


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("photos")
    return [write_image(folder / f"{name}.png", 40, 30, seed=i) for i, name in enumerate(["cat", "dog"])]


def _images(log_dir: Path) -> dict[str, list[Any]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    return {"images": {t: [e.step for e in events.Images(t)] for t in events.Tags()["images"]}, "scalars": events.Tags()["scalars"]}


def test_hf_trainer_tensorboard_and_pngs_at_each_evaluation(tmp_path: Path, photos: list[Path]) -> None:
    callback = Checked(photos, classes=0, class_names=CLASSES, size=32)
    trainer = _trainer(tmp_path, ["tensorboard"], callback)
    trainer.train()
    assert callback.seen == [2, 4]  # two evaluations, each checked left as found
    (run,) = [p.parent for p in (tmp_path / "runs").glob("*/events.out.tfevents.*")]  # one event file: the Trainer's
    logged = _images(run)
    assert logged["images"] == {"gradcam/cat/circle": [2, 4], "gradcam/dog/circle": [2, 4]}
    assert "eval/loss" in logged["scalars"]  # the images sit in the same event file as the Trainer's scalars
    pngs = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("gradcam/*/*.png"))
    assert pngs == [f"gradcam/step={s}/{i}.circle.png" for s in (2, 4) for i in ("cat", "dog")]
    assert Image.open(tmp_path / "gradcam/step=4/dog.circle.png").size == (32, 32)


@pytest.mark.parametrize("problem", ["missing", "layer"])
def test_hf_bad_images_or_layer_stop_training_before_the_first_step(problem: str, tmp_path: Path, photos: list[Path]) -> None:
    class Untrainable(HfShapes):
        def forward(self, *args: Any, **kwargs: Any) -> SequenceClassifierOutput:
            raise AssertionError("training started")

    images = [photos[0], tmp_path / "missing.png"] if problem == "missing" else photos
    callback = CamCallback(images, layers="net.99" if problem == "layer" else None, size=32)
    with pytest.raises(CamCallbackError) as error:
        _trainer(tmp_path, [], callback, Untrainable()).train()
    message = str(error.value)
    assert "\n" not in message and message.startswith("CamCallback: ") and isinstance(error.value, UsageError)
    assert ("missing.png" if problem == "missing" else "net.99") in message


def _offline_run(root: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """The images and tables an offline W&B run wrote: files/media/images/KEY_STEP_HASH.png (a key's `/` a folder),
    files/media/table/KEY_STEP_HASH.table.json."""
    (run,) = (root / "wandb").glob("offline-run-*")
    images = sorted(str(p.relative_to(run / "files/media/images")) for p in run.glob("files/media/images/**/*.png"))
    tables = [json.loads(p.read_text()) for p in sorted(run.glob("files/media/table/**/*.table.json"))]
    return images, tables


@pytest.mark.slow  # W&B starts its service process (and git), even offline
def test_hf_trainer_wandb_offline_run_holds_the_images_and_table(offline_wandb: Path, photos: list[Path]) -> None:
    callback = Checked(photos, classes=0, class_names=CLASSES, size=32)
    _trainer(offline_wandb / "out", ["wandb"], callback).train()
    wandb.finish()
    images, tables = _offline_run(offline_wandb)
    assert callback.seen == [2, 4]
    assert len([n for n in images if n.startswith("gradcam/cat/circle_")]) == 2  # one per evaluation
    assert len(tables) == 2 and tables[0]["columns"] == ["image", "class", "probability", "method", "layer", "epoch"]
    rows = tables[1]["data"]
    assert [(r[1], r[3], r[4]) for r in rows] == [("circle", "gradcam", "default")] * 2 and all(0 <= r[2] <= 1 for r in rows)
    assert [r[0] for r in rows] == ["Image"] * 2  # what wandb 0.31 writes offline for a table cell holding an image
    assert len(list((offline_wandb / "out").glob("gradcam/*/*.png"))) == 4  # PNGs always


@pytest.mark.slow  # W&B starts its service process (and git), even offline
def test_lightning_wandb_logger_offline_run_holds_the_images_and_table(offline_wandb: Path, photos: list[Path]) -> None:
    callback = LightningCamCallback(photos, classes=1, class_names=CLASSES, size=32)
    _fit(offline_wandb, [callback], [WandbLogger(save_dir=str(offline_wandb), offline=True)])
    wandb.finish()
    images, tables = _offline_run(offline_wandb)
    assert len([n for n in images if n.startswith("gradcam/dog/square_")]) == 2  # epochs 0 and 1
    assert len(tables) == 2
    rows = tables[1]["data"]
    assert [(r[1], r[3], r[4], r[5]) for r in rows] == [("square", "gradcam", "default", 1)] * 2
    assert all(0 <= r[2] <= 1 for r in rows)


def test_only_their_modules_import_transformers_wandb_and_mlflow() -> None:
    package = Path(gradcam_cli.__file__).parent
    importers: dict[str, set[str]] = {"transformers": set(), "wandb": set(), "mlflow": set()}
    for path in (package / "integrations").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                if name.split(".")[0] in importers:
                    importers[name.split(".")[0]].add(path.name)
    assert importers == {
        "transformers": {"transformers.py"},
        "wandb": {"sinks.py", "trackers.py", "transformers.py"},
        "mlflow": {"transformers.py"},
    }


class Taken(Checked):
    """Checked, also keeping the normalised images each evaluation explained."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.taken: list[torch.Tensor] = []

    def _log(self, args: Any, state: Any, shown: list[Any]) -> None:
        assert self.watched.image_set is not None
        self.taken.append(self.watched.image_set.x.clone())
        super()._log(args, state, shown)


def _vit() -> nn.Module:
    """A tiny ViT classifier from a config (no weights to fetch): its forward returns a ModelOutput with `logits`."""
    from transformers import AutoModelForImageClassification, ViTConfig

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, num_labels=4
    )
    return AutoModelForImageClassification.from_config(config)


def test_hf_vit_explains_the_first_n_evaluation_images(tmp_path: Path) -> None:
    callback = Taken(3, class_names=CLASSES)
    _trainer(tmp_path, [], callback, _vit()).train()
    assert callback.seen == [2, 4] and len(callback.taken) == 2
    expected = torch.stack([record["pixel_values"] for record in _records(8, 2)[:3]])
    assert all(torch.equal(x, expected) for x in callback.taken)  # the eval loader's first 3, the same at each evaluation
    pngs = sorted(p.name.split(".")[0] for p in tmp_path.glob("gradcam/step=4/*.png"))
    assert pngs == ["val0", "val1", "val2"]
    assert Image.open(next(tmp_path.glob("gradcam/step=4/val0.*.png"))).size == (32, 32)


def test_hf_images_n_without_an_eval_dataset_stops_before_the_first_step(tmp_path: Path) -> None:
    with pytest.raises(CamCallbackError) as error:
        _trainer(tmp_path, [], CamCallback(4), evaluate=False).train()
    message = str(error.value)
    assert "\n" not in message and message.startswith("CamCallback: images=4 takes the first 4 images") and "eval_dataset" in message


@pytest.mark.slow  # mlflow starts processes (uname, git) for the run's system and source tags
def test_hf_trainer_mlflow_run_holds_the_stepped_images_and_records(
    mlflow_store: str, tmp_path: Path, photos: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store)  # as the Trainer's MLflowCallback is told where to log
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "gradcam-tests")
    callback = Checked(photos, classes=0, class_names=CLASSES, size=32)
    _trainer(tmp_path / "out", ["mlflow"], callback).train()
    client = mlflow.MlflowClient(mlflow_store)
    (run,) = client.search_runs([client.get_experiment_by_name("gradcam-tests").experiment_id])
    assert callback.seen == [2, 4]
    _check_mlflow_run(client, run.info.run_id, [2, 4], tmp_path / "read")
