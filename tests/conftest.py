"""Shared test fixtures: offline caches, small images, an in-process CLI runner, small models, the model-as-found check."""

from __future__ import annotations

import importlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

if TYPE_CHECKING:  # torch loads when a helper runs, not when pytest imports this file
    import torch
    from torch import nn

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# the shipped example model (trained on the shapes scenes) as the command line names it
EXAMPLE_MODEL = (
    "-m", "test_resnet",
    "--weights", str(EXAMPLES / "shapes_model" / "shapes_test_resnet.safetensors"),
    "--labels", str(EXAMPLES / "shapes_model" / "labels.txt"),
)  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    """No test may reach a hub: offline, every cache an empty temporary folder, before any test module imports.

    huggingface_hub reads HF_HUB_OFFLINE when it is first imported, so this
    must run before collection imports timm or gradcam_cli, not in a fixture.
    """
    import shutil
    import tempfile

    cache = Path(tempfile.mkdtemp(prefix="gradcam-test-caches-"))
    config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))
    for name, value in {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(cache / "hf"),
        "TORCH_HOME": str(cache / "torch"),
        "XDG_CACHE_HOME": str(cache / "xdg"),
        "YOLO_CONFIG_DIR": str(cache / "ultralytics"),  # its settings file, written when ultralytics is first imported
        "YOLO_OFFLINE": "1",  # no online check (a DNS lookup) on that import
    }.items():
        os.environ[name] = value


def in_ci() -> bool:
    """CI installs every test extra (`.ci/run` sets CI=true), so there a missing one is a failure, not a skip."""
    return os.environ.get("CI") == "true"


def require(module: str, python: tuple[int, int] | None = None) -> ModuleType:
    """`pytest.importorskip(module)` that fails under CI=true: a missing test extra must not turn parity green by skipping.

    `python`: the oldest Python the test extra installs the module for (torchcam 0.5 needs 3.11); below it
    the tests skip everywhere, CI included, and say why.
    """
    if python is not None and sys.version_info < python:
        reason = f"{module} is tested on Python {python[0]}.{python[1]} and newer only (the test extra's range)"
        pytest.skip(reason, allow_module_level=True)
    try:
        return importlib.import_module(module)
    except ImportError as error:
        if in_ci():
            pytest.fail(f"{module} is missing under CI=true ({error}); CI installs it: pip install -e '.[test]'", pytrace=False)
        pytest.skip(f"{module} is not installed ({error}): pip install -e '.[test]'", allow_module_level=True)


@pytest.fixture(autouse=True)
def process_starts(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The processes a test starts; one not marked slow may start none (the fast loop stays fast), or it errors.

    Counts `subprocess.Popen` (so `subprocess.run`, torchrun, Ray's daemons, playwright's browser) and
    `os.fork`/`os.forkpty` (pseudo-terminals, multiprocessing). Module fixtures set up before this one are not seen:
    a module whose fixture starts processes marks its tests slow.
    """
    started: list[str] = []
    if request.node.get_closest_marker("slow") is None:
        popen_init = subprocess.Popen.__init__

        def counted_popen(self: subprocess.Popen, args: Any, *more: Any, **kwargs: Any) -> None:
            started.append(f"subprocess {args!r}"[:200])
            popen_init(self, args, *more, **kwargs)

        monkeypatch.setattr(subprocess.Popen, "__init__", counted_popen)
        for name in ("fork", "forkpty"):
            real = getattr(os, name)

            def counted_fork(*args: Any, _real: Any = real, _name: str = name) -> Any:
                started.append(f"os.{_name}()")
                return _real(*args)

            monkeypatch.setattr(os, name, counted_fork)
    yield started
    if started:
        first = started[0]
        pytest.fail(f"a test not marked slow started {len(started)} process(es), first {first}: mark it @pytest.mark.slow", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def seeded_torch() -> None:
    """The same random start for every run; two threads at most, as the machines that run the suite have,
    shared out among pytest-xdist's workers (`-n 2` on 2 cores: one each, so none waits for a core)."""
    import torch

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1) // workers))


@pytest.fixture(autouse=True)
def in_test_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test runs in its own folder, as a user runs gradcam where the images are.

    Output names mirror the input's path relative to the current folder, so
    `tmp_path / "cat.png"` gives `OUT/cat.png.gradcam.png` here.
    """
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def one_thread():
    """Tiny models gain nothing from threads, and on a busy 2-core box 2 threads spin for ages."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def seeded(seed: int, *shape: int):
    """A reproducible normal tensor that leaves the global RNG alone."""
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def write_photo_tree(folder: Path, count: int, every: int = 3) -> Path:
    """`count` small photos of different sizes in `folder`, every `every`-th in its subfolder `more/`: a batch job's folder."""
    (folder / "more").mkdir(parents=True, exist_ok=True)
    for index in range(count):
        write_image(folder / ("more" if index % every == 0 else "") / f"img{index:02d}.png", 60 + index, 44, seed=index)
    return folder


def png_bytes(folder: Path) -> dict[str, bytes]:
    """Every PNG below a folder, by its path there: two runs' outputs compared byte for byte."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.png"))}


def write_image(path: Path, width: int = 96, height: int = 64, seed: int = 0, mode: str = "RGB") -> Path:
    """A small random photo-like image (smooth blobs, so resizing is meaningful)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(max(2, height // 8), max(2, width // 8), 3), dtype=np.uint8)
    image = Image.fromarray(small).resize((width, height), Image.BILINEAR)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.convert(mode).save(path)
    return path


def cli_command(*args: Any) -> list[str]:
    """`gradcam ARGS` as its own process: this Python, the package from this checkout (`cli_env`)."""
    import sys

    return [sys.executable, "-m", "gradcam_cli", *map(str, args)]


def cli_env() -> dict[str, str]:
    """The environment of a `cli_command` process: offline, this checkout first on the import path."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


RUN_FILES = ("records.jsonl", "runs.jsonl")  # what every explain run adds to its output folder beside the pictures


def is_run_file(path: Path | str) -> bool:
    return Path(path).name in RUN_FILES


def pictures_in(folder: Path) -> list[Path]:
    """The files a run wrote below `folder`, its records and runs files left out: its pictures and maps."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and not is_run_file(p))


@pytest.fixture
def image_dir(tmp_path: Path) -> Path:
    """Three readable images of different sizes in a folder (one in a sub-folder)."""
    folder = tmp_path / "photos"
    write_image(folder / "a.jpg", 120, 90, seed=1)
    write_image(folder / "b.png", 64, 96, seed=2)
    write_image(folder / "sub" / "c.png", 80, 80, seed=3)
    return folder


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def records(self) -> list[dict]:
        import json

        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]


def call_cli(*args: Any, stdin: str = "") -> CliResult:
    """`gradcam ARGS` in this process (torch loads once) with captured streams; module fixtures call it directly."""
    from gradcam_cli.cli.app import main
    from gradcam_cli.cli.console import Streams

    out, err = io.StringIO(), io.StringIO()
    try:
        main([str(a) for a in args], streams=Streams(io.StringIO(stdin), out, err))
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """W&B offline, its runs under tmp_path/wandb; torn down after, since W&B keeps its settings (the folder) for the
    whole process and the next test's runs must go to that test's own folder."""
    wandb = require("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_PROJECT", "gradcam-tests")
    wandb.teardown()  # a run of an earlier test in this process, with another folder, ends here
    yield tmp_path
    wandb.finish()
    wandb.teardown()


@pytest.fixture
def run_cli():
    """Run `gradcam ARGS` in this process (torch loads once) with captured streams."""
    return call_cli


@pytest.fixture
def reference_signed(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytorch-grad-cam gives signed maps while the test runs: the map's ReLU, base_cam's two `np.maximum(cam, 0)`
    (its only np.maximum), passes the map through. The methods' own ReLUs (on gradients, in their modules) stay."""
    base_cam = require("pytorch_grad_cam.base_cam")

    class NumpyWithoutTheMapsRelu:
        def __getattr__(self, name: str) -> Any:
            return getattr(np, name)

        @staticmethod
        def maximum(values: Any, floor: Any) -> Any:
            assert np.all(floor == 0), "base_cam's np.maximum is no longer only the map's ReLU: check it"
            return values

    monkeypatch.setattr(base_cam, "np", NumpyWithoutTheMapsRelu())


# ---------------------------------------------------------------- small models, never pretrained


def timm_model(name: str, **kwargs: Any) -> nn.Module:
    """A fresh timm model with seeded random weights (never pretrained, so offline), in eval mode.

    Seeds the global generator with 0 first, so the weights are the same in every test and run.
    """
    import timm
    import torch

    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, **kwargs).eval()


_SHARED_MODELS: dict[str, nn.Module] = {}


def shared_timm_model(name: str) -> nn.Module:
    """`timm_model(name)`, built once per session for the many tests that only read it: never change it."""
    if name not in _SHARED_MODELS:
        _SHARED_MODELS[name] = timm_model(name)
    return _SHARED_MODELS[name]


def tv_resnet18() -> nn.Module:
    """torchvision's resnet18 with seeded random weights, in eval mode: in-place ReLUs, one ReLU module reused."""
    import torch

    torchvision = require("torchvision")
    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None).eval()


def small_tv_vit(size: int = 96) -> nn.Module:
    """A two-layer torchvision VisionTransformer (16-pixel patches, width 32), seeded, in eval mode."""
    import torch
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    return VisionTransformer(image_size=size, patch_size=16, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64).eval()


def __getattr__(name: str) -> Any:
    """`from conftest import SmallCnn` builds the class on first use, so importing conftest needs no torch."""
    if name == "SmallCnn":
        globals()["SmallCnn"] = cls = _small_cnn_class()
        return cls
    raise AttributeError(name)


def _small_cnn_class() -> type:
    from torch import nn

    class SmallCnn(nn.Module):
        """conv1 → ReLU → conv2 → BatchNorm → ReLU → global mean → fc (5 classes); 32x32 in, 8x8 at conv2.

        `inplace`: both ReLUs work in place, so conv1's output is overwritten right after the layer.
        `side_branch`: a 1x1 conv on act1's output whose result is thrown away (`detached_side`: on a detached copy).
        `fail`: the forward raises RuntimeError("boom after the target layers") once act2 has run.
        `unused` is defined and never called. Fresh modules are in train mode, as nn.Module's are.
        """

        def __init__(self, inplace: bool = False, side_branch: bool = False, detached_side: bool = False, fail: bool = False) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
            self.act1 = nn.ReLU(inplace=inplace)
            self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
            self.bn2 = nn.BatchNorm2d(16)  # after conv2, so act1 (in place or not) still follows conv1 directly
            self.act2 = nn.ReLU(inplace=inplace)
            self.unused = nn.Conv2d(16, 16, 1)  # defined, never called
            self.side = nn.Conv2d(8, 4, 1)
            self.fc = nn.Linear(16, 5)
            self.side_branch = side_branch
            self.detached_side = detached_side
            self.fail = fail

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = self.act1(self.conv1(x))
            if self.side_branch:
                self.side(a.detach() if self.detached_side else a)  # computed, then thrown away
            b = self.act2(self.bn2(self.conv2(a)))
            if self.fail:
                raise RuntimeError("boom after the target layers")
            return self.fc(b.mean(dim=(2, 3)))

    SmallCnn.__qualname__ = "SmallCnn"
    return SmallCnn


# ---------------------------------------------------------------- the model is left as found


def model_state(model: nn.Module) -> dict[str, Any]:
    """Everything a CAM call could leave changed on a model or in torch, in comparable form.

    Modules are kept by identity (none swapped, added or removed); every hook dictionary of every
    module (forward, pre-forward, backward, state-dict, ...) by its hook ids; train/eval flag and
    `inplace` flag per module; an instance-level `forward` (a monkeypatch); per parameter its
    identity, `requires_grad` and whether `.grad` is None; every parameter and buffer value
    (BatchNorm running statistics); and torch's global state: module-global hooks, grad mode,
    inference mode, active function modes (guided backprop works through one).
    """
    import torch
    import torch.nn.modules.module as module_globals

    modules = list(model.named_modules())
    parameters = list(model.named_parameters())
    return {
        "modules": [(name, m) for name, m in modules],  # nn.Module compares by identity
        "hooks": {
            (name, attr): tuple(hooks)
            for name, m in modules
            for attr, hooks in vars(m).items()
            if "_hooks" in attr and isinstance(hooks, dict)
        },
        "training": {name: m.training for name, m in modules},
        "inplace": {name: m.inplace for name, m in modules if hasattr(m, "inplace")},
        "patched forward": [name for name, m in modules if "forward" in vars(m)],
        "parameters": {name: (id(p), p.requires_grad, p.grad is None) for name, p in parameters},
        "values": {key: value.detach().clone() for key, value in model.state_dict().items()},
        "torch": {
            "global hooks": {
                attr: tuple(hooks)
                for attr, hooks in vars(module_globals).items()
                if attr.startswith("_global_") and isinstance(hooks, dict)
            },
            "grad enabled": torch.is_grad_enabled(),
            "inference mode": torch.is_inference_mode_enabled(),
            "function modes": torch._C._len_torch_function_stack(),
        },
        "_alive": parameters,  # kept so no id above is reused; not compared
    }


def assert_left_as_found(model: nn.Module, before: dict[str, Any]) -> None:
    """The model (and torch) as `model_state` saw them before the call."""
    import torch

    after = model_state(model)
    for key, was in before.items():
        if key == "_alive":
            continue
        if key == "values":
            assert after[key].keys() == was.keys(), "parameters or buffers added or removed"
            changed = [k for k, v in was.items() if not torch.equal(after[key][k], v)]
            assert not changed, f"values changed: {changed}"
        else:
            assert after[key] == was, f"{key} changed: {was} -> {after[key]}"
    # and no function mode left behind, seen from outside: a ReLU run now gets no hook
    probe = torch.ones(3, requires_grad=True) * 1.0
    assert torch.nn.functional.relu(probe)._backward_hooks is None


@contextmanager
def left_as_found(model: nn.Module) -> Iterator[dict[str, Any]]:
    """`with left_as_found(model): ...` fails if the body leaves the model other than it found it.

    Put `pytest.raises` inside it to check the model after a call that fails.
    """
    before = model_state(model)
    yield before
    assert_left_as_found(model, before)


def example_batch(side: int = 96) -> tuple[Any, Any, Any]:
    """The shipped example model (eval mode, CPU), its 8 scenes as one batch at side x side (ImageNet normalisation),
    and each scene's top class: the faithfulness, ROAD and sanity tests measure the same model on the same inputs."""
    import numpy as np
    import torch
    from PIL import Image

    from gradcam_cli.api import load_model

    ready = load_model("test_resnet", weights=EXAMPLES / "shapes_model" / "shapes_test_resnet.safetensors", pretrained=False, device="cpu")
    files = sorted((EXAMPLES / "shapes_images").glob("*.jpg"))
    images = [Image.open(path).convert("RGB").resize((side, side), Image.BILINEAR) for path in files]
    x = torch.from_numpy(np.stack([np.asarray(image, dtype=np.float32) / 255 for image in images])).permute(0, 3, 1, 2)
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    x = (x - mean[:, None, None]) / std[:, None, None]
    with torch.no_grad():
        classes = ready.model(x).argmax(dim=1)
    return ready.model, x, classes
