"""Side-by-side speed of the deletion and insertion metrics: ours against torchcam 0.5's, and the lower bound.

One process, one model (random weights), the same images and the same
Grad-CAM maps for all three, timed in alternating rounds:

- ours: `gradcam_cli.evaluate.faithfulness.deletion_insertion` on the model as
  `gradcam eval` places it (channels-last for a CNN, the run's autocast: bf16
  on CUDA), chunks of --chunk perturbed inputs;
- torchcam: `DeletionInsertionMetric.update` with the same maps (handed over by
  a fixed-map extractor, so its CAM costs nothing), the same steps and chunk
  size, on the model as a user builds it;
- the lower bound: the same number of forwards, in the same chunks, of inputs
  built beforehand, on our placed model: what no implementation can beat.

Then the peak memory of ours at 10 and 80 steps, each in a fresh process
(it must not grow with the steps: one chunk is held, never the curves' inputs).

    python benchmarks/eval.py                       # resnet50, 8 images, 20 steps, CPU
    python benchmarks/eval.py --device cuda --images 64 --chunk 128

Not a test: timings depend on the machine. Prints ratios, which travel better.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))


def images(count: int, size: int, config: Any) -> Any:
    """Synthetic scenes preprocessed as `gradcam eval` preprocesses a file."""
    import numpy as np
    import torch
    from shapes import make_scene

    from gradcam_cli.geometry import plan_geometry, to_input_array

    rng = np.random.default_rng(5)
    arrays = []
    for _ in range(count):
        picture, _, _ = make_scene(rng, size, size)
        photo = np.asarray(picture.convert("RGB"))
        arrays.append(to_input_array(photo, plan_geometry(photo.shape[:2], config), config))
    return torch.from_numpy(np.stack(arrays))


class FixedMaps:
    """torchcam's CAM-extractor interface, answering with maps computed beforehand."""

    def __init__(self, model, maps) -> None:
        self.model, self.maps = model, maps

    def __call__(self, class_idx=None, scores=None, normalized=True, **_kwargs):
        return [self.maps]

    def fuse_cams(self, cams):
        return cams[0]

    def _hooks_off(self):
        import contextlib

        return contextlib.nullcontext()


def forwards_count(n: int, steps: int, pixels: int) -> int:
    from gradcam_cli.evaluate.faithfulness import step_counts

    points = len(step_counts(pixels, steps))
    return n * (1 + 2 * (points - 2) + 1)  # the original, each inner point twice, the all-baseline input once


def timings(args: argparse.Namespace) -> dict[str, list[float]]:
    import copy

    import torch
    from torchcam.metrics import DeletionInsertionMetric

    from gradcam_cli import cam, load_model
    from gradcam_cli.evaluate.faithfulness import deletion_insertion
    from gradcam_cli.model.device import resolve_precision
    from gradcam_cli.vocab import Precision

    ready = load_model(args.model, pretrained=False, device=args.device)
    plain = copy.deepcopy(ready.model).to(memory_format=torch.contiguous_format)  # as a user hands it to torchcam
    x = images(args.images, args.size, ready.data_config).to(ready.device)
    precision = resolve_precision(Precision.auto, ready.device)
    with torch.inference_mode():
        classes = ready.model(x).argmax(dim=1)
    maps = cam(ready.model, x, None, classes=classes.tolist())
    total = forwards_count(args.images, args.steps, x.shape[-2] * x.shape[-1])
    prebuilt = torch.randn(args.chunk, *x.shape[1:], device=x.device).contiguous(memory_format=torch.channels_last)

    def sync() -> None:
        if ready.device.type == "cuda":
            torch.cuda.synchronize()

    def autocast():
        import contextlib

        return torch.autocast(x.device.type, dtype=precision) if precision is not None else contextlib.nullcontext()

    def ours() -> None:
        with autocast():
            deletion_insertion(ready.model, x, maps, classes, steps=args.steps, batch_size=args.chunk, channels_last=ready.channels_last)

    def torchcam() -> None:
        metric = DeletionInsertionMetric(FixedMaps(plain, maps), partial(torch.softmax, dim=-1), steps=args.steps, batch_size=args.chunk)
        metric.update(x, class_idx=classes.tolist())

    def lower_bound() -> None:
        with torch.inference_mode(), autocast():
            for start in range(0, total, args.chunk):
                ready.model(prebuilt[: min(args.chunk, total - start)]).float().softmax(dim=1)

    runs = {"ours": ours, "torchcam": torchcam, "forwards only": lower_bound}
    results: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():  # warm-up: the allocator, oneDNN's kernels, cuDNN's choice
        fn()
    for _ in range(args.rounds):
        for name, fn in runs.items():
            sync()
            start = time.perf_counter()
            fn()
            sync()
            results[name].append(time.perf_counter() - start)
    return results


def peak_memory(args: argparse.Namespace, steps: int) -> float:
    """Peak RSS (MB) of a fresh process computing our curves at `steps` (CUDA: the peak allocated on the device)."""
    command = [sys.executable, __file__, "--child", str(steps), "--model", args.model, "--images", str(args.images),
               "--size", str(args.size), "--chunk", str(args.chunk), "--device", args.device]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    out = process.stdout.read()
    _, _, usage = os.wait4(process.pid, 0)  # the child's own peak, from the kernel
    device_peak = float(out.strip() or 0)
    return device_peak or usage.ru_maxrss / 1024


def child(args: argparse.Namespace) -> None:
    import torch

    from gradcam_cli import load_model
    from gradcam_cli.evaluate.faithfulness import deletion_insertion

    ready = load_model(args.model, pretrained=False, device=args.device)
    x = images(args.images, args.size, ready.data_config).to(ready.device)
    maps = torch.rand(x.shape[0], 7, 7, device=x.device)
    deletion_insertion(ready.model, x, maps, torch.zeros(x.shape[0], dtype=torch.long, device=x.device), steps=args.child,
                       batch_size=args.chunk, channels_last=ready.channels_last)  # fmt: skip
    print(torch.cuda.max_memory_allocated() / 2**20 if ready.device.type == "cuda" else 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--size", type=int, default=224, help="side of the generated scenes (px)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--chunk", type=int, default=32, help="perturbed inputs per forward, for both")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory check")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    import torch

    results = timings(args)
    best = {name: min(values) for name, values in results.items()}
    machine = f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    print(f"{args.model}, {args.images} images at {args.size}px, {args.steps} steps, chunks of {args.chunk}, {args.device} ({machine}), "
          f"torch {torch.__version__}")  # fmt: skip
    print(f"forwards per run: {forwards_count(args.images, args.steps, args.size * args.size)}; best of {args.rounds} rounds")
    print("| | seconds | vs ours |")
    print("|---|---:|---:|")
    for name, seconds in best.items():
        print(f"| {name} | {seconds:.2f} | {seconds / best['ours']:.2f}x |")
    print(f"torchcam / ours: {best['torchcam'] / best['ours']:.2f}x; ours / lower bound: {best['ours'] / best['forwards only']:.2f}x")
    if not args.no_memory:
        small, large = peak_memory(args, 10), peak_memory(args, 80)
        print(f"peak memory of ours: {small:.0f} MB at 10 steps, {large:.0f} MB at 80 steps ({large / small:.2f}x)")


if __name__ == "__main__":
    main()
