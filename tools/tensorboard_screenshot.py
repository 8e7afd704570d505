"""The README's "While training" picture: Grad-CAM maps of a short real training run, in a real TensorBoard page.

Why a script: the picture must show what a user sees, so nothing is drawn by hand. It trains the example
shapes classifier's last two stages and head afresh (its stem and first two stages kept from
examples/shapes_model/, layer3, layer4 and fc re-initialised) for a few dozen Adam steps on new scenes from
examples/shapes.py, logs the loss every step and `gradcam_cli.log_cams` maps (each image's true class) every
few steps, starts `tensorboard` on 127.0.0.1 (a port the OS picks), opens its Time Series dashboard in
headless Chromium (Debian's /usr/bin/chromium through playwright; any request to another host is refused),
waits until the overlays are drawn and saves a JPEG. The server is always stopped.

    python tools/tensorboard_screenshot.py --out docs/tensorboard.jpg

About a minute on 2 CPU cores (most of it the 120 training steps). tests/test_tensorboard_page.py runs the same with fewer steps.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
IMAGES = [EXAMPLES / "shapes_images" / f"{name}.jpg" for name in ("circle_1", "triangle_1", "star_1")]  # one row of cards
TAG = "gradcam"
RETRAINED = ("layer3", "layer4", "fc")  # the stages trained afresh; the stem, layer1 and layer2 keep the example's weights
CHROMIUM = "/usr/bin/chromium"
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"]


def shapes_module() -> Any:
    """examples/shapes.py (the scene generator the example model was trained on), imported by path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("shapes_scenes", EXAMPLES / "shapes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scene_batch(shapes: Any, rng: np.random.Generator, n: int, side: int) -> tuple[Any, Any]:
    """`n` fresh square scenes normalised as the example model's data config says (mean = std = 0.5), and their classes."""
    import torch

    pictures, classes = [], []
    for _ in range(n):
        picture, cls, _ = shapes.make_scene(rng, side, side)
        pictures.append(np.asarray(picture))
        classes.append(cls)
    x = torch.from_numpy(np.stack(pictures)).permute(0, 3, 1, 2).float() / 127.5 - 1.0
    return x, torch.tensor(classes)


def half_fresh_model(seed: int) -> Any:
    """The example classifier from load_model(), with RETRAINED re-initialised (PyTorch's default init) and trainable."""
    import torch

    import gradcam_cli

    weights, labels = EXAMPLES / "shapes_model" / "shapes_test_resnet.safetensors", EXAMPLES / "shapes_model" / "labels.txt"
    ready = gradcam_cli.load_model("test_resnet", weights=weights, labels=labels, device="cpu")
    torch.manual_seed(seed)
    for name, module in ready.model.named_children():
        for part in module.modules() if name in RETRAINED else ():
            reset = getattr(part, "reset_parameters", None)
            if callable(reset):
                reset()
        for parameter in module.parameters():
            parameter.requires_grad_(name in RETRAINED)
    return ready


def train_and_log(logdir: Path, steps: int = 120, every: int = 20, batch: int = 32, side: int = 128, seed: int = 0) -> list[int]:
    """Train RETRAINED for `steps` Adam steps (cosine schedule), logging `train/loss` each step and the maps at step 0 and every `every`.

    Returns the steps the maps were logged at.
    """
    import torch
    import torch.nn.functional as F
    from torch.utils.tensorboard import SummaryWriter

    import gradcam_cli

    shapes, rng = shapes_module(), np.random.default_rng(seed)
    ready = half_fresh_model(seed)
    net = ready.model
    classes = [shapes.CLASSES.index(path.stem.split("_")[0]) for path in IMAGES]
    optimiser = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=3e-3)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=steps, eta_min=1e-4)  # a settled last map
    logged: list[int] = []
    with SummaryWriter(str(logdir / "shapes")) as writer:
        for step in range(steps + 1):
            if step % every == 0 or step == steps:
                gradcam_cli.log_cams(ready, [str(path) for path in IMAGES], writer, step=step, classes=classes, tag=TAG)
                logged.append(step)
            if step == steps:
                break
            x, y = scene_batch(shapes, rng, batch, side)
            for name, module in net.named_children():
                module.train(name in RETRAINED)  # the kept stages' BatchNorm statistics stay the example's
            loss = F.cross_entropy(net(x), y)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            schedule.step()
            writer.add_scalar("train/loss", loss.item(), global_step=step + 1)
        net.eval()
    return logged


@dataclass
class Server:
    """A running `tensorboard` and where it answers."""

    process: subprocess.Popen
    url: str
    log: Path


def _wait_for_url(process: subprocess.Popen, log: Path, deadline: float) -> str:
    """The URL tensorboard prints once it listens ("TensorBoard 2.21.0 at http://127.0.0.1:PORT/")."""
    while time.monotonic() < deadline:
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", log.read_text(errors="replace"))
        if found:
            return f"http://127.0.0.1:{found.group(1)}/"
        if process.poll() is not None:
            raise RuntimeError(f"tensorboard exited with {process.returncode} before listening:\n{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)
    raise TimeoutError(f"tensorboard printed no address within the wait; its output:\n{log.read_text(errors='replace')[-2000:]}")


def _wait_for_images(url: str, deadline: float) -> None:
    """Until the server has read the run's image tags (it loads event files in the background after it listens)."""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "data/plugin/images/tags", timeout=5) as answer:
                if f"{TAG}/".encode() in answer.read():
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"tensorboard at {url} did not list the {TAG}/ images within the wait")


def stop(process: subprocess.Popen) -> None:
    """Terminate, then kill after 10 s: no tensorboard outlives the script."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextmanager
def serving(logdir: Path, wait_s: float = 60.0) -> Iterator[Server]:
    """`tensorboard --logdir LOGDIR --host 127.0.0.1 --port 0` (the OS picks a free port), answering, then stopped.

    `--load_fast=false`: the pure-Python loader in this one process (no separate data server process to outlive it).
    """
    log = logdir.parent / f"{logdir.name}.tensorboard.log"
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1", "--port", "0"]
    with open(log, "wb") as sink:
        process = subprocess.Popen([*command, "--load_fast=false"], stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + wait_s
        url = _wait_for_url(process, log, deadline)
        _wait_for_images(url, deadline)
        yield Server(process, url, log)
    finally:
        stop(process)


@dataclass
class Page:
    """What the browser found on the dashboard: each image card's (tag, "Step N", image drawn), the page's text, and
    the requests refused (any host but 127.0.0.1)."""

    cards: list[tuple[str, str, bool]]
    text: str
    refused: list[str] = field(default_factory=list)

    @property
    def rendered(self) -> int:
        return sum(drawn for _, _, drawn in self.cards)


def _only_local(refused: list[str]) -> Any:
    """A playwright route handler: 127.0.0.1 goes through, anything else is refused and noted."""

    def route(handle: Any) -> None:
        if urlsplit(handle.request.url).hostname == "127.0.0.1":
            handle.continue_()
        else:
            refused.append(handle.request.url)
            handle.abort()

    return route


RENDERED = "n => [...document.querySelectorAll('image-card img')].filter(i => i.complete && i.naturalWidth > 0).length >= n"
CARDS = """() => [...document.querySelectorAll('image-card')].map(card => {
    const img = card.querySelector('img'), tag = card.querySelector('tb-truncated-path');
    return [tag ? tag.title : '', (card.innerText.match(/Step \\d+/) || [''])[0], !!img && img.complete && img.naturalWidth > 0];
})"""


def _arrange(page: Any, wait_ms: float) -> None:
    """Settings pane shut; each gradcam card pinned, the pinned copies' sliders at the first logged step (Home)."""
    page.click('metrics-main-view button:has-text("Settings")')
    pins = page.locator("metrics-card-groups image-card button[aria-label='Pin card']")
    for index in range(pins.count()):
        pins.nth(index).click()
    page.wait_for_function(f"() => document.querySelectorAll('metrics-pinned-view image-card').length >= {len(IMAGES)}", timeout=wait_ms)
    sliders = page.locator("metrics-pinned-view image-card input[type=range]")
    for index in range(sliders.count()):
        sliders.nth(index).focus()
        page.keyboard.press("Home")
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.mouse.move(700, 20)  # no hover highlight on the last pin button


def photograph(url: str, out: Path, width: int = 1400, height: int = 1320, wait_s: float = 60.0) -> Page:
    """Open the Time Series dashboard, pin the maps at the first step above the same maps at the last, save a JPEG."""
    from PIL import Image
    from playwright.sync_api import sync_playwright

    refused: list[str] = []
    wait_ms = wait_s * 1000
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.route("**/*", _only_local(refused))
            page.goto(url + "?darkMode=false#timeseries", timeout=wait_ms)
            page.wait_for_function(RENDERED, arg=len(IMAGES), timeout=wait_ms)
            _arrange(page, wait_ms)
            page.wait_for_function(RENDERED, arg=2 * len(IMAGES), timeout=wait_ms)
            page.wait_for_timeout(1500)  # the sliders' and the chart's transitions end
            png = page.screenshot()
            cards = [(str(tag), str(step), bool(drawn)) for tag, step, drawn in page.evaluate(CARDS)]
            text = page.inner_text("body")
        finally:
            browser.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    Image.open(io.BytesIO(png)).convert("RGB").save(out, "JPEG", quality=80, optimize=True)
    return Page(cards, text, refused)


def make_picture(out: Path, workdir: Path, steps: int = 120, every: int = 20, size: tuple[int, int] = (1400, 1320)) -> Page:
    """Train and log into `workdir`, serve it (stopped afterwards), photograph it to `out`."""
    train_and_log(workdir / "logs", steps=steps, every=every)
    with serving(workdir / "logs") as server:
        return photograph(server.url, out, *size)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "tensorboard.jpg")
    parser.add_argument("--steps", type=int, default=120, help="Adam steps (batches of 32 scenes)")
    parser.add_argument("--every", type=int, default=20, help="log the maps every this many steps")
    args = parser.parse_args(argv)
    import tempfile

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gradcam-tensorboard-") as workdir:
        page = make_picture(args.out, Path(workdir), args.steps, args.every)
    print(f"{args.out}: {page.rendered} overlays drawn, {args.out.stat().st_size // 1024} KB, {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
