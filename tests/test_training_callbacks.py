"""Maps while a model trains (issue 27): log_cams from any loop, and the Lightning CamCallback with real Trainers.

One fit with the callback (TensorBoard, CSV and a logger that takes no images) is read back by several tests; a
second fit without it, same seed, gives the loss curve the first must equal bit for bit.
"""

from __future__ import annotations

import ast
import random
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import gradcam_cli
from conftest import assert_left_as_found, model_state, require, write_image
from gradcam_cli.errors import GradcamError, UsageError
from test_pointing_game import _shapes

pytestmark = pytest.mark.usefixtures("one_thread")

lightning = require("lightning")
require("tensorboard")

import torch  # noqa: E402
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger  # noqa: E402
from torch import nn  # noqa: E402

from gradcam_cli.integrations.lightning import CamCallback, CamCallbackError  # noqa: E402

CLASSES = ["circle", "square", "triangle", "star"]
STEPS_PER_EPOCH = 4  # 32 training scenes in batches of 8


def _net() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.3),  # draws from torch's RNG in training: a callback that moved it would change the losses
        nn.Linear(8, 4),
    )


class Shapes(lightning.LightningModule):
    """A tiny CNN on shapes scenes; it records its training losses and how many steps it took."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _net()
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, _index: int) -> torch.Tensor:
        loss = nn.functional.cross_entropy(self(batch[0]), batch[1])
        self.losses.append(float(loss))
        return loss

    def validation_step(self, batch: Any, _index: int) -> None:
        self.log("val_loss", nn.functional.cross_entropy(self(batch[0]), batch[1]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class NoImages(Logger):
    """A logger with nowhere to put a picture: the callback names it once and skips it."""

    name, version = "noimages", 0

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        pass

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


class Unwritable(NoImages):
    """A logger whose folder cannot be made (under /dev/null): writing to it fails, named once, and training goes on."""

    name, log_dir = "unwritable", "/dev/null/logs"


def _data(count: int, seed: int) -> torch.utils.data.TensorDataset:
    shapes, rng = _shapes(), np.random.default_rng(seed)
    scenes = [shapes.make_scene(rng, 32, 32) for _ in range(count)]
    x = torch.stack([torch.from_numpy(np.array(image)).permute(2, 0, 1).float() / 255 for image, _, _ in scenes])
    mean, std = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1), torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return torch.utils.data.TensorDataset((x - mean) / std, torch.tensor([label for _, label, _ in scenes]))


def _fit(folder: Path, callbacks: list, loggers: list | None = None, val: Any = "shapes", module: Any = None) -> Shapes:
    """Two epochs of 4 steps; `val`: the validation loader (default 8 scenes in one batch; None: none)."""
    lightning.seed_everything(0, verbose=False)
    module = module or Shapes()
    trainer = lightning.Trainer(
        accelerator="cpu",
        max_epochs=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        deterministic=True,
        logger=loggers if loggers is not None else TensorBoardLogger(folder, name="tb"),
        callbacks=callbacks,
        default_root_dir=folder,
        log_every_n_steps=1,
    )
    train = torch.utils.data.DataLoader(_data(32, 1), batch_size=8, shuffle=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread in every fit (a module fixture runs before `one_thread`): the same sums
    try:
        trainer.fit(module, train, torch.utils.data.DataLoader(_data(8, 2), batch_size=8) if val == "shapes" else val)
    finally:
        torch.set_num_threads(threads)
    return module


class Checked(CamCallback):
    """CamCallback that also records the module, the random states and autocast just before and after its work."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[int, bool]] = []

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        before = (model_state(pl_module), _random_states(), torch.is_autocast_enabled("cpu"))
        super().on_validation_epoch_end(trainer, pl_module)
        assert_left_as_found(pl_module, before[0])
        assert _same_states(_random_states(), before[1]), "a random state moved"
        assert torch.is_autocast_enabled("cpu") == before[2]
        self.seen.append((trainer.global_step, trainer.sanity_checking))


def _random_states() -> tuple:
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def _same_states(a: tuple, b: tuple) -> bool:
    return torch.equal(a[0], b[0]) and all(np.array_equal(x, y) for x, y in zip(a[1], b[1])) and a[2] == b[2]


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("photos")
    return [write_image(folder / f"{name}.png", 40, 30, seed=i) for i, name in enumerate(["cat", "dog"])]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, photos: list[Path]) -> dict[str, Any]:
    """One fit with three callbacks (every epoch, class 0 by name; every second epoch; the top class) and three loggers."""
    folder = tmp_path_factory.mktemp("fit")
    each = Checked(photos, classes=0, class_names=CLASSES, size=32)
    second = Checked(photos, every_n_epochs=2, tag="second", layers="net.3", size=32)
    loggers = [TensorBoardLogger(folder, name="tb"), CSVLogger(folder, name="csv"), NoImages(), Unwritable()]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        module = _fit(folder, [each, second], loggers)
    return {"module": module, "each": each, "second": second, "loggers": loggers, "said": said}


def _images(log_dir: str) -> dict[str, list[Any]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(log_dir, size_guidance={"images": 0})
    events.Reload()
    return {tag: events.Images(tag) for tag in events.Tags()["images"]}


def test_tensorboard_holds_the_maps_at_each_chosen_epochs_step(trained: dict[str, Any]) -> None:
    images = _images(trained["loggers"][0].log_dir)
    every = {tag: [e.step for e in images[tag]] for tag in ("gradcam/cat/circle", "gradcam/dog/circle")}
    assert every == {"gradcam/cat/circle": [4, 8], "gradcam/dog/circle": [4, 8]}  # global steps at epochs 0 and 1
    second = [tag for tag in images if tag.startswith("second/")]
    assert sorted(tag.split("/")[1] for tag in second) == ["cat", "dog"]  # the top class, by index (no class names)
    assert all([e.step for e in images[tag]] == [2 * STEPS_PER_EPOCH] for tag in second)  # every_n_epochs=2
    picture = images["gradcam/cat/circle"][0]
    assert (picture.width, picture.height) == (32, 32)
    decoded = np.asarray(Image.open(__import__("io").BytesIO(picture.encoded_image_string)))
    assert decoded.shape == (32, 32, 3) and decoded.std() > 0


def test_the_callback_left_model_and_random_states_as_found_and_skipped_the_sanity_check(trained: dict[str, Any]) -> None:
    # Checked asserted the module's state, the random states and autocast around every call; these are its calls
    assert trained["each"].seen == [(0, True), (4, False), (8, False)]  # the sanity check's call did nothing
    assert trained["module"].training  # and training went on in train mode


def test_csv_logger_gets_pngs_and_a_logger_without_a_folder_is_named_once(trained: dict[str, Any]) -> None:
    root = Path(trained["loggers"][1].log_dir)
    assert sorted(str(p.relative_to(root)) for p in root.glob("gradcam/*/*.png")) == [
        "gradcam/epoch=0/cat.circle.png",
        "gradcam/epoch=0/dog.circle.png",
        "gradcam/epoch=1/cat.circle.png",
        "gradcam/epoch=1/dog.circle.png",
    ]
    assert Image.open(root / "gradcam/epoch=1/cat.circle.png").size == (32, 32)
    named = [str(w.message) for w in trained["said"] if "NoImages" in str(w.message)]
    assert named == ["CamCallback: NoImages takes no images; its maps are skipped"] * 2  # once per callback
    failed = [str(w.message) for w in trained["said"] if "Unwritable" in str(w.message)]
    assert len(failed) == 2 and failed[0].startswith("CamCallback: could not write to Unwritable (NotADirectoryError: ")
    assert trained["each"].seen[-1] == (8, False)  # and training went on to its end


def test_the_loss_curve_is_bit_identical_without_the_callback(trained: dict[str, Any], tmp_path: Path) -> None:
    without = _fit(tmp_path, [], [TensorBoardLogger(tmp_path, name="tb"), CSVLogger(tmp_path, name="csv"), NoImages()])
    assert len(without.losses) == 2 * STEPS_PER_EPOCH
    assert trained["module"].losses == without.losses  # exact floats: the callback drew no random number


class Counted(Shapes):
    def training_step(self, batch: Any, index: int) -> torch.Tensor:
        raise AssertionError("training started")


@pytest.mark.parametrize("problem", ["missing", "broken", "layer"])
def test_bad_images_or_layer_stop_the_fit_at_setup_in_one_line(problem: str, tmp_path: Path, photos: list[Path]) -> None:
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    images = {"missing": [photos[0], tmp_path / "missing.png"], "broken": [broken], "layer": photos}[problem]
    callback = CamCallback(images, layers="net.99" if problem == "layer" else None)
    trainer = lightning.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False, callbacks=[callback])
    data = torch.utils.data.DataLoader(_data(8, 1), batch_size=8)
    with pytest.raises(CamCallbackError) as error:
        trainer.fit(Counted(), data)
    message = str(error.value)
    assert "\n" not in message and message.startswith("CamCallback: ")
    assert {"missing": "missing.png", "broken": "broken.png", "layer": "net.99"}[problem] in message
    assert isinstance(error.value, UsageError) and isinstance(error.value, GradcamError)


class Writer:
    """SummaryWriter's add_image, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, int, str]] = []

    def add_image(self, tag: str, image: np.ndarray, global_step: int, dataformats: str) -> None:
        self.calls.append((tag, image.shape, global_step, dataformats))


def test_log_cams_under_no_grad_with_a_frozen_model_in_train_mode(photos: list[Path]) -> None:
    torch.manual_seed(3)
    model = _net().train()
    model[0].weight.grad = torch.full_like(model[0].weight, 0.5)  # a gradient the caller is accumulating
    grad = model[0].weight.grad
    for p in model.parameters():
        p.requires_grad_(False)
    before, states, writer = model_state(model), _random_states(), Writer()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        shown = gradcam_cli.log_cams(model, photos, writer, step=7, class_names=CLASSES, size=(24, 32))
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert_left_as_found(model, before)
    assert model[0].weight.grad is grad and bool((grad == 0.5).all())
    assert _same_states(_random_states(), states)
    assert writer.calls == [(f"gradcam/{s.image}/{s.class_name}", (24, 32, 3), 7, "HWC") for s in shown]
    assert [s.image for s in shown] == ["cat", "dog"] and all(s.class_name in CLASSES for s in shown)


def test_a_tensor_batch_is_shown_de_normalised_and_gives_the_photos_maps(photos: list[Path], tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    model, mean, std = _net().eval(), (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    pictures = [np.asarray(Image.open(p).convert("RGB")) for p in photos]
    x = (torch.from_numpy(np.stack(pictures)).permute(0, 3, 1, 2).float() / 255 - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(
        std
    ).view(1, 3, 1, 1)
    with SummaryWriter(tmp_path) as writer:
        from_tensor = gradcam_cli.log_cams(model, x, writer, step=3, mean=mean, std=std, classes=[1, 2])
    from_files = gradcam_cli.log_cams(model, photos, Writer(), step=3, mean=mean, std=std, classes=[1, 2])
    assert [(s.image, s.class_name) for s in from_tensor] == [("0", "1"), ("1", "2")]
    for a, b in zip(from_tensor, from_files):  # the same pixels in, so the same map and overlay out
        assert np.array_equal(np.asarray(a.overlay), np.asarray(b.overlay))
    logged = _images(str(tmp_path))
    assert sorted(logged) == ["gradcam/0/1", "gradcam/1/2"] and [e.step for e in logged["gradcam/0/1"]] == [3]
    with pytest.raises(UsageError, match=r"\(N, 3, H, W\)"):
        gradcam_cli.log_cams(model, x[0], Writer(), step=0)


def test_only_the_lightning_module_imports_lightning() -> None:
    package = Path(gradcam_cli.__file__).parent
    importers: dict[str, set[str]] = {"lightning": set(), "tensorboard": set()}
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                top = "lightning" if name.split(".")[0] == "pytorch_lightning" else name.split(".")[0]
                if top in importers:
                    importers[top].add(str(path.relative_to(package)))
    # log_cams takes the writer it is given; the command line's --tensorboard writes its events in trackers.py, lazily
    assert importers == {"lightning": {"integrations/lightning.py"}, "tensorboard": {"integrations/trackers.py"}}


class Recorded(Checked):
    """Checked, also keeping what each call showed and the normalised images it explained (one logger per fit)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shown: list[list[Any]] = []
        self.taken: list[torch.Tensor] = []

    def _log(self, logger: Any, shown: list[Any], epoch: int, step: int) -> None:
        assert self.watched.image_set is not None
        self.shown.append(shown)
        self.taken.append(self.watched.image_set.x.clone())
        super()._log(logger, shown, epoch, step)


METHODS, LAYERS = ["gradcam", "gradcam++"], ["net.0", "net.3"]


def test_methods_by_layers_give_one_grid_per_image_whose_cells_are_the_single_overlays(tmp_path: Path, photos: list[Path]) -> None:
    from gradcam_cli.outputs.grid import fit_cell

    options: dict[str, Any] = {"classes": 0, "class_names": CLASSES, "size": 32}
    grid = Recorded(photos, method=METHODS, layers=LAYERS, tag="grid", **options)
    singles = {(m, layer): Recorded(photos, method=m, layers=layer, tag=f"{m}-{layer}", **options) for m in METHODS for layer in LAYERS}
    logger = CSVLogger(tmp_path, name="csv")
    _fit(tmp_path, [grid, *singles.values()], [logger])
    assert len(grid.shown) == 2 and [(s.image, s.class_name) for s in grid.shown[1]] == [("cat", "circle"), ("dog", "circle")]
    for epoch, shown in enumerate(grid.shown):
        for k, item in enumerate(shown):
            picture = np.asarray(item.overlay)
            assert [len(row) for row in item.boxes] == [2, 2]  # rows the methods, columns the layers
            for r, method in enumerate(METHODS):
                for c, layer in enumerate(LAYERS):
                    x, y, w, h = item.boxes[r][c]
                    single = singles[(method, layer)].shown[epoch][k]
                    assert (w, h) == (128, 128) and (item.cells[2 * r + c].method, item.cells[2 * r + c].layer) == (method, layer)
                    cell = picture[y : y + h, x : x + w].astype(int)
                    assert np.abs(cell - fit_cell(np.asarray(single.overlay), (w, h))).max() <= 1  # as the grid scales it
    assert not np.array_equal(np.asarray(grid.shown[1][0].cells[0].overlay), np.asarray(grid.shown[1][0].cells[1].overlay))
    saved = Image.open(Path(logger.log_dir) / "grid/epoch=1/cat.circle.png")  # the grid in the overlay's place
    assert np.array_equal(np.asarray(saved), np.asarray(grid.shown[1][0].overlay))


def test_a_grids_records_are_one_row_per_cell() -> None:
    require("wandb")
    from gradcam_cli.integrations.sinks import wandb_payload
    from gradcam_cli.integrations.snapshot import Watched, image_set

    model = _net().eval()
    layers = ["0", "3"]  # the bare Sequential's net.0 and net.3
    watched = Watched(torch.randn(2, 3, 16, 16), layers, "grid", {}, {"method": METHODS, "classes": 1})
    watched.image_set = image_set(torch.randn(2, 3, 16, 16), model)
    payload = wandb_payload(watched.explain(model), "grid", epoch=3)
    assert sorted(payload) == ["grid/0/1", "grid/1/1", "grid/records"]
    rows = payload["grid/records"].data
    assert [(r[1], r[3], r[4], r[5]) for r in rows] == [("1", m, layer, 3) for _ in range(2) for m in METHODS for layer in layers]
    writer = Writer()  # log_cams takes the same: the grid in the overlay's place
    shown = gradcam_cli.log_cams(model, watched.image_set.x, writer, step=2, method=METHODS, layers=layers, classes=1)
    assert [len(s.cells) for s in shown] == [4, 4] and [c[0] for c in writer.calls] == ["gradcam/0/1", "gradcam/1/1"]
    assert writer.calls[0][1] == np.asarray(shown[0].overlay).shape and writer.calls[0][1][1] > 3 * 128


@pytest.mark.parametrize(("method", "named"), [("gradcamm", "'gradcamm'"), (["gradcam", "nomethod"], "'nomethod'"), ([], "[]")])
def test_a_bad_method_stops_the_callback_when_made_in_one_line(method: Any, named: str, photos: list[Path]) -> None:
    with pytest.raises(CamCallbackError) as error:
        CamCallback(photos, method=method)
    message = str(error.value)
    assert "\n" not in message and message.startswith("CamCallback: ") and named in message


class DictShapes(Shapes):
    """Shapes whose forward returns a dict with `logits`, as many LightningModules' do."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:  # type: ignore[override]
        return {"logits": self.net(x)}

    def training_step(self, batch: Any, _index: int) -> torch.Tensor:
        loss = nn.functional.cross_entropy(self(batch[0])["logits"], batch[1])
        self.losses.append(float(loss))
        return loss

    def validation_step(self, batch: Any, _index: int) -> None:
        self.log("val_loss", nn.functional.cross_entropy(self(batch[0])["logits"], batch[1]))


def _denormalised(x: torch.Tensor) -> np.ndarray:
    mean, std = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1), torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return ((x * std + mean).clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()


def test_images_n_are_the_first_n_validation_images_and_a_dict_output_is_read(tmp_path: Path) -> None:
    three, many = Recorded(3, alpha=0.0), Recorded(20, tag="many")  # alpha 0: the overlay is the picture itself
    val = _data(8, 2)
    logger = CSVLogger(tmp_path, name="csv")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        _fit(tmp_path, [three, many], [logger], val=torch.utils.data.DataLoader(val, batch_size=2), module=DictShapes())
    assert [s.image for s in three.shown[0]] == ["val0", "val1", "val2"]
    assert all(torch.equal(x, val.tensors[0][:3]) for x in three.taken) and len(three.taken) == 2
    for k, png in enumerate(sorted((Path(logger.log_dir) / "gradcam/epoch=1").glob("val*.png"))):
        assert np.array_equal(np.asarray(Image.open(png)), _denormalised(val.tensors[0][k : k + 1])[0])
    assert [len(shown) for shown in many.shown] == [8, 8]  # the loader holds 8: all of them, said once
    told = [str(w.message) for w in said if "holds" in str(w.message)]
    assert told == ["CamCallback: images=20, and the validation loader holds 8: showing 8"]


def test_images_n_from_a_shuffling_loader_are_the_same_each_epoch_and_move_no_random_state(tmp_path: Path) -> None:
    val = _data(8, 2)

    def loader() -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(val, batch_size=4, shuffle=True)

    taken = Recorded(3)
    with_it = _fit(tmp_path / "with", [taken], [CSVLogger(tmp_path, name="with")], val=loader())
    without = _fit(tmp_path / "without", [], [CSVLogger(tmp_path, name="without")], val=loader())
    assert len(taken.taken) == 2 and torch.equal(taken.taken[0], taken.taken[1])
    assert all(any(torch.equal(x, row) for row in val.tensors[0]) for x in taken.taken[0])  # each one of the loader's
    assert with_it.losses == without.losses  # reading the shuffling loader drew no random number of training's


def test_the_validation_loader_and_its_batches_images_in_every_shape_trainers_give() -> None:
    from gradcam_cli.integrations.val_images import batch_images, first_images, first_loader

    x = torch.randn(5, 3, 8, 8)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, torch.zeros(5)), batch_size=2)
    assert first_loader(loader) is loader and first_loader([loader, []]) is loader and first_loader({"a": loader}) is loader
    assert first_loader(None) is None and first_loader([]) is None
    for batch in (x, (x, 1), [x, 1], {"pixel_values": x, "labels": 1}, {"label": 1, "image": x}, {"input": x}):
        assert batch_images(batch) is x
    assert torch.equal(first_images(loader, 3), x[:3])  # across batches of 2
    for batch, named in (({"labels": x}, "keys: labels"), ("text", "a validation batch is a str")):
        with pytest.raises(CamCallbackError, match=named):
            batch_images(batch)
    with pytest.raises(CamCallbackError, match="the validation loader gave no images"):
        first_images([], 2)


def test_images_n_without_a_validation_loader_stops_at_setup_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(CamCallbackError) as error:
        _fit(tmp_path, [CamCallback(4)], [CSVLogger(tmp_path, name="csv")], val=None, module=Counted())
    message = str(error.value)
    assert "\n" not in message and message.startswith("CamCallback: images=4 takes the first 4 images") and "val_dataloaders" in message
    for bad in (0, -2, True):
        with pytest.raises(CamCallbackError, match="whole number of at least 1"):
            CamCallback(bad)


def test_explain_set_reads_a_dict_or_model_output_like_a_tensor(photos: list[Path]) -> None:
    from gradcam_cli.integrations.snapshot import explain_set, image_set

    require("transformers")
    from transformers.modeling_outputs import SequenceClassifierOutput

    class Returning(nn.Module):
        def __init__(self, net: nn.Module, wrap: Any) -> None:
            super().__init__()
            self.net, self.wrap = net, wrap

        def forward(self, x: torch.Tensor) -> Any:
            return self.wrap(self.net(x))

    torch.manual_seed(0)
    net = _net().eval()
    images = image_set(photos, net, size=32)
    plain = explain_set(net, images, layers="3")
    for wrap in (lambda t: {"aux": t * 0, "logits": t}, lambda t: SequenceClassifierOutput(logits=t)):
        shown = explain_set(Returning(net, wrap), images, layers="net.3")
        assert [(s.class_index, s.probability) for s in shown] == [(s.class_index, s.probability) for s in plain]
        assert all(np.array_equal(np.asarray(a.overlay), np.asarray(b.overlay)) for a, b in zip(shown, plain))


@pytest.fixture(name="mlflow_store")  # named, so tests/test_hf_callback.py can import it under another name
def mlflow_store_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An MLflow file store in tmp_path (offline, no database), its URI; after, no run and no tracking URI left set
    (Lightning's MLFlowLogger sets the process's, and MLFLOW_TRACKING_URI with it)."""
    mlflow = require("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3 refuses the file store without it
    yield f"file:{tmp_path}/mlruns"
    mlflow.end_run()
    mlflow.set_tracking_uri(None)


@pytest.mark.slow  # mlflow starts processes (uname, git) for the run's system and source tags
def test_lightning_mlflow_logger_gets_stepped_images_and_records(mlflow_store: str, tmp_path: Path, photos: list[Path]) -> None:
    from lightning.pytorch.loggers import MLFlowLogger
    from mlflow import MlflowClient

    logger = MLFlowLogger(tracking_uri=mlflow_store)
    _fit(tmp_path, [CamCallback(photos, classes=0, class_names=CLASSES, size=32)], [logger])
    _check_mlflow_run(MlflowClient(mlflow_store), logger.run_id, [4, 8], tmp_path / "read")


def _check_mlflow_run(client: Any, run_id: str, steps: list[int], folder: Path) -> None:
    """The run's images are `gradcam/IMAGE/CLASS` at `steps` (files images/KEY+step+S+...png, `/` as `~`), 32x32 PNGs,
    and its records one JSON per step."""
    names = [a.path.removeprefix("images/") for a in client.list_artifacts(run_id, "images") if a.path.endswith(".png")]
    assert sorted((n.split("+")[0], int(n.split("+")[2])) for n in names) == [
        (f"gradcam~{image}~circle", step) for image in ("cat", "dog") for step in steps
    ]
    png = client.download_artifacts(run_id, f"images/{names[0]}", str(folder))
    assert Image.open(png).size == (32, 32) and np.asarray(Image.open(png)).std() > 0
    records = [a.path for a in client.list_artifacts(run_id, "gradcam/records")]
    assert records == [f"gradcam/records/step={step}.json" for step in steps]
    saved = __import__("json").loads(Path(client.download_artifacts(run_id, records[-1], str(folder))).read_text())
    assert [(r["image"], r["class_name"], r["method"], r["layer"]) for r in saved["records"]] == [
        (image, "circle", "gradcam", "default") for image in ("cat", "dog")
    ]


class RankMarked(CamCallback):
    """CamCallback that leaves a file for each validation end it sees and each time it logs, named by its rank."""

    def __init__(self, marks: Path, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.marks, self.rank = marks, -1

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.rank = trainer.global_rank
        if not trainer.sanity_checking:
            (self.marks / f"seen-rank{self.rank}-epoch{trainer.current_epoch}").touch()
        super().on_validation_epoch_end(trainer, pl_module)

    def _log(self, logger: Any, shown: list[Any], epoch: int, step: int) -> None:
        (self.marks / f"logged-rank{self.rank}-epoch{epoch}").touch()
        super()._log(logger, shown, epoch, step)


@pytest.mark.slow  # two processes (DDP over gloo on the CPU)
def test_a_distributed_fit_explains_and_logs_on_rank_zero_only(tmp_path: Path, photos: list[Path]) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    callback = RankMarked(marks, photos, size=32, class_names=CLASSES)
    trainer = lightning.Trainer(
        accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=2, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, logger=CSVLogger(tmp_path, name="csv"), callbacks=[callback],
    )  # fmt: skip
    train = torch.utils.data.DataLoader(_data(16, 1), batch_size=4)
    trainer.fit(Shapes(), train, torch.utils.data.DataLoader(_data(8, 2), batch_size=4))
    seen = sorted(path.name for path in marks.iterdir())
    assert seen == [
        "logged-rank0-epoch0", "logged-rank0-epoch1",
        "seen-rank0-epoch0", "seen-rank0-epoch1", "seen-rank1-epoch0", "seen-rank1-epoch1",
    ]  # fmt: skip
    pngs = sorted(path.relative_to(tmp_path).as_posix() for path in tmp_path.glob("csv/*/gradcam/*/*.png"))
    assert len(pngs) == 2 * len(photos)  # each epoch's maps once, from rank 0
