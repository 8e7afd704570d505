"""Side-by-side speed: `gradcam explain FOLDER` against the same job written with pytorch-grad-cam.

One run, the two programs alternating (ours, reference, ours, ...), same
model (random weights), same layer, same generated 800x600 JPEGs, each program
a fresh process timed end to end (start-up and model build included) with its
peak RSS read from the kernel (wait4). Then, in this process, our CAM compute
for one batch against a lower bound measured the same way: one forward plus a
backward from the scores to the target layer with frozen parameters.

    python benchmarks/speed.py                        # resnet50 and vit_base_patch16_224, 48 images
    python benchmarks/speed.py --models resnet50 --images 16 --rounds 1
    python benchmarks/speed.py --readme               # also write the table into README.md
    python benchmarks/speed.py --rss                  # peak RSS for 100 vs 2,000 images

Not a test: timings depend on the machine. Prints ratios, which travel better.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "examples"))
MODELS = ("resnet50", "vit_base_patch16_224")


@dataclass
class Timed:
    seconds: float
    peak_rss_mb: float


def make_images(folder: Path, count: int, size: tuple[int, int] = (800, 600), seed: int = 3) -> None:
    """Synthetic scenes saved as JPEG (quality 90), like photos off a camera roll, only smaller."""
    from PIL import Image
    from shapes import make_scene

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        image = make_scene(rng, *size)[0]
        Image.fromarray(np.asarray(image)).save(folder / f"img_{i:05d}.jpg", quality=90)


def run_timed(command: list[str]) -> Timed:
    """Wall time and the child's own peak RSS (not the largest of all children so far)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    stderr = process.stderr.read().decode() if process.stderr else ""
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in (0,):
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{stderr[-2000:]}")
    return Timed(seconds, usage.ru_maxrss / 1024)


def ours_command(folder: Path, out: Path, model: str, batch_size: int, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gradcam_cli",
        "explain",
        str(folder),
        "--model",
        model,
        "--no-pretrained",
        "-o",
        str(out),
        "--batch-size",
        str(batch_size),
        "--json",
        "-q",
        *extra,
    ]


def reference_command(folder: Path, out: Path, model: str, device: str = "cpu") -> list[str]:
    return [sys.executable, str(HERE / "reference_gradcam.py"), str(folder), str(out), "--model", model, "--device", device]


def compute_vs_lower_bound(
    model_name: str, batch_size: int, repeats: int = 5, device: str = "cpu", precision: str = "fp32"
) -> tuple[float, float]:
    """Seconds per batch: our CAM compute, and forward + backward-to-layer with frozen parameters.

    The run is prepared by the CLI's own code (run/prepare.py): the same model build, layers,
    device placement, memory format and precision as `gradcam explain`.
    """
    import torch

    from gradcam_cli.run.prepare import prepare_run
    from gradcam_cli.settings import build_settings

    settings = build_settings({"model": model_name, "pretrained": False, "device": device, "precision": precision})
    run = prepare_run(settings)
    model, layers = run.model, run.layers
    x = torch.randn(batch_size, 3, *run.loaded.data_config.input_hw)
    if run.channels_last:  # as the CLI runs it, for both measurements
        x = x.contiguous(memory_format=torch.channels_last)
    x = x.to(run.device)
    sync = torch.cuda.synchronize if run.device.type == "cuda" else (lambda: None)
    dtype = run.options.precision
    autocast = (lambda: torch.autocast(run.device.type, dtype=dtype)) if dtype else contextlib.nullcontext

    def lower_bound() -> None:
        saved = {}

        def cut(_module, _inputs, output):
            # the graph starts at the layer: the backward covers the head only, no parameter gradients
            saved["out"] = output.detach().requires_grad_(True)
            return saved["out"]

        handle = layers[0].module.register_forward_hook(cut)
        try:
            for p in model.parameters():
                p.requires_grad_(False)
            with autocast():
                logits = model(x.requires_grad_(False))
            score = logits.gather(1, logits.argmax(1, keepdim=True)).sum()
            torch.autograd.grad(score, saved["out"])
        finally:
            handle.remove()
            for p in model.parameters():
                p.requires_grad_(True)

    def ours() -> None:
        run.compute(x)

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - start

    lower_bound(), ours()  # warm-up
    bound, mine = [], []
    for _ in range(repeats):  # alternate single calls, so drift in the machine's speed hits both alike
        bound.append(timed(lower_bound))
        mine.append(timed(ours))
    return float(np.median(mine)), float(np.median(bound))


def _steady(images: int, seconds: float, startup: float) -> float | None:
    """Images per second once started; None when the folder is too small to tell it from start-up noise."""
    work = seconds - startup
    return (images - 1) / work if images >= 16 and work > 0.1 * seconds else None


def benchmark_model(
    model: str, folder: Path, one: Path, images: int, rounds: int, configs: list[tuple[int, str]], extra: list[str], device: str
) -> list[dict]:
    """End to end on the folder and on one image (start-up), the programs alternating; a row per (batch, precision)."""
    runs: dict[str, list[Timed]] = {}
    reference = importlib.util.find_spec("pytorch_grad_cam") is not None
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for batch, precision in configs:
                for name, source in ((f"ours{batch}{precision}", folder), (f"ours{batch}{precision}_1", one)):
                    command = ours_command(source, Path(tmp) / f"{r}{name}", model, batch, [*extra, "--precision", precision])
                    runs.setdefault(name, []).append(run_timed(command))
                if reference:
                    for name, source in (("ref", folder), ("ref_1", one)):
                        command = reference_command(source, Path(tmp) / f"{r}{name}", model, device)
                        runs.setdefault(name, []).append(run_timed(command))
    best = {name: min(t.seconds for t in timed) for name, timed in runs.items()}
    steady = {name: _steady(images, best[name], best[f"{name}_1"]) for name in best if not name.endswith("_1")}
    rows = []
    for batch, precision in configs:
        name = f"ours{batch}{precision}"
        compute, bound = compute_vs_lower_bound(model, batch, device=device, precision=precision)
        rows.append(
            {
                "model": model,
                "batch": batch,
                "precision": precision,
                "ours_ips": images / best[name],
                "ref_ips": images / best["ref"] if reference else None,
                "speedup": best["ref"] / best[name] if reference else None,
                "steady_ours": steady[name],
                "steady_ref": steady.get("ref"),
                "steady_speedup": steady[name] / steady["ref"] if reference and steady[name] and steady["ref"] else None,
                "compute_s": compute,
                "bound_s": bound,
                "compute_ratio": compute / bound,
                "ours_rss": max(t.peak_rss_mb for t in runs[name]),
                "ref_rss": max(t.peak_rss_mb for t in runs["ref"]) if reference else None,
            }
        )
    return rows


def _x(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{suffix}"


def table(rows: list[dict], images: int, rounds: int, command: str, device: str) -> str:
    import torch

    lines = [
        f"| model | batch, precision | ours, images/s | pytorch-grad-cam, images/s | speed-up, {images} images end to end | "
        "speed-up, steady state | our CAM compute / lower bound | peak RSS ours / reference |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['batch']}, {r['precision']} | {r['ours_ips']:.2f} | {_x(r['ref_ips'])} | "
            f"**{_x(r['speedup'], suffix='x')}** | **{_x(r['steady_speedup'], suffix='x')}** "
            f"({_x(r['steady_ours'], 1)} vs {_x(r['steady_ref'], 1)} images/s) | "
            f"{r['compute_ratio']:.2f} ({r['compute_s'] * 1000:.0f} / {r['bound_s'] * 1000:.0f} ms per batch) | "
            f"{r['ours_rss']:.0f} / {_x(r['ref_rss'], 0)} MB |"
        )
    where = (
        torch.cuda.get_device_name()
        if device.startswith("cuda")
        else (f"{os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), {torch.get_num_threads()} threads")
    )
    lines.append("")
    lines.append(
        f"{images} JPEGs of 800x600, random weights, best of {rounds} alternating rounds; end to end includes "
        f"start-up and the model build (about the same for both programs), steady state is (N - 1) / (time for N "
        f"images - time for 1 image); the reference runs one image at a time, as its README does. {where}, torch "
        f"{torch.__version__}. Command: `{command}`."
    )
    return "\n".join(lines)


def write_readme(text: str, name: str) -> None:
    """Replace the text between README's `<!-- NAME:start -->` and `<!-- NAME:end -->` markers."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    readme = ROOT / "README.md"
    content = readme.read_text()
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(content):
        raise SystemExit(f"README.md has no {start} ... {end} markers")
    readme.write_text(pattern.sub(lambda _m: f"{start}\n{text}\n{end}", content))


def rss_check(model: str, small: int, large: int, batch_size: int) -> None:
    """Peak RSS of ours for `small` vs `large` images: must not grow with the folder's size."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "images"
        make_images(folder, large, size=(800, 600))
        few = Path(tmp) / "few"
        few.mkdir()
        for path in sorted(folder.glob("*.jpg"))[:small]:
            os.link(path, few / path.name)
        a = run_timed(ours_command(few, Path(tmp) / "out_few", model, batch_size, []))
        b = run_timed(ours_command(folder, Path(tmp) / "out_all", model, batch_size, []))
    growth = b.peak_rss_mb / a.peak_rss_mb - 1
    print(
        f"peak RSS, {model}: {small} images {a.peak_rss_mb:.0f} MB ({small / a.seconds:.1f} img/s), "
        f"{large} images {b.peak_rss_mb:.0f} MB ({large / b.seconds:.1f} img/s): {growth * 100:+.1f}%"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-sizes", default="8", help="ours, comma-separated (e.g. 32,64,128 on a GPU)")
    parser.add_argument("--precisions", default="fp32", help="ours, comma-separated: fp32,bf16,fp16,auto")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (both programs)")
    parser.add_argument("--readme", action="store_true", help="write the table into README.md")
    parser.add_argument("--table", default="speed-table", help="README markers to write between (with --readme)")
    parser.add_argument("--rss", action="store_true", help="peak RSS for 100 vs 2,000 images instead")
    parser.add_argument("--rss-model", default="resnet18")
    parser.add_argument("--extra", default="", help="extra options for `gradcam explain`, e.g. '--precision bf16'")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.rss:
        rss_check(args.rss_model, 100, 2000, int(args.batch_sizes.split(",")[0]))
        return
    extra = ["--device", args.device, *args.extra.split()]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder, one = Path(tmp) / "images", Path(tmp) / "one"
        make_images(folder, args.images)
        one.mkdir()
        os.link(folder / "img_00000.jpg", one / "img_00000.jpg")
        for model in args.models.split(","):
            configs = [(int(b), p) for b in args.batch_sizes.split(",") for p in args.precisions.split(",")]
            for row in benchmark_model(model, folder, one, args.images, args.rounds, configs, extra, args.device):
                rows.append(row)
                print(
                    f"{model} batch {row['batch']} {row['precision']}: ours {row['ours_ips']:.2f} img/s, "
                    f"reference {_x(row['ref_ips'])} img/s, speed-up {_x(row['speedup'])} "
                    f"(steady {_x(row['steady_speedup'])}); compute/lower bound {row['compute_ratio']:.2f}",
                    flush=True,
                )
    command = re.sub(r" --readme| --table \S+", "", " ".join(["python benchmarks/speed.py", *sys.argv[1:]]))
    text = table(rows, args.images, args.rounds, command, args.device)
    print(text)
    if args.readme:
        write_readme(text, args.table)


if __name__ == "__main__":
    main()
