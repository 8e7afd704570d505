"""Side-by-side speed on a segmenter: `gradcam explain FOLDER` against the same job written with pytorch-grad-cam.

One run, the programs alternating, each a fresh process timed end to end
(start-up and model build included, peak RSS from the kernel): 512x512 JPEG
shapes scenes, torchvision's deeplabv3_mobilenet_v3_large with random
weights (which gives every pixel one class: one region per image) and the
repository's example segmenter with its shipped weights (one to three shapes
per scene, a region each), every class covering at least 0.5% of the image explained (the
background left out) with GradCAM on the backbone's output, one overlay per
class both ways (ours with --each, and its picture of all regions too).
Ours: one forward per batch of images and one backward per rank (the k-th
region of every image at once). The reference (reference_segmentation.py): its
tutorial's loop, a forward and a backward per class of each image.

    python benchmarks/segmentation.py                  # 64 images, 2 rounds
    python benchmarks/segmentation.py --images 16 --rounds 1
    python benchmarks/segmentation.py --readme         # also write the table into README.md

Not a test: timings depend on the machine. Prints ratios, which travel better.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(HERE))

from speed import run_timed, write_readme  # noqa: E402 - benchmarks/ is not a package

SIZE = 512


def make_scenes(folder: Path, count: int, seed: int = 9) -> None:
    """Shapes scenes of 512x512, one to three shapes each, saved as JPEG (quality 90)."""
    from shapes import make_detection_scene

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        image, _ = make_detection_scene(rng, SIZE, SIZE)
        image.save(folder / f"scene_{i:05d}.jpg", quality=90)


EXAMPLES = ROOT / "examples"
MODELS = {  # our --model and options, the reference's own arguments, the input size (the example's: the scale it learned)
    "deeplabv3_mobilenet_v3_large": (["--model", "torchvision:deeplabv3_mobilenet_v3_large", "--no-pretrained"], [], SIZE),
    "example segmenter": (
        [
            "--model", f"{EXAMPLES}/shapes_segmenter.py:build", "--weights",
            str(EXAMPLES / "shapes_segmenter_model" / "shapes_segmenter.safetensors"), "--labels",
            str(EXAMPLES / "shapes_segmenter_model" / "labels.txt"), "--mean", "0.5", "--std", "0.5",
        ],
        ["--shapes"],
        256,
    ),
}  # fmt: skip


def ours(model: str, folder: Path, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "gradcam_cli", "explain", str(folder), *MODELS[model][0], "--input-size", str(MODELS[model][2]), "--method",
        "gradcam", "--each", "-o", str(out), "--json", "-q",
    ]  # fmt: skip


def reference(model: str, folder: Path, out: Path) -> list[str]:
    own = MODELS[model][1]
    return [sys.executable, str(HERE / "reference_segmentation.py"), str(folder), str(out), "--size", str(MODELS[model][2]), *own]


def regions(out: Path) -> int:
    """The regions our run explained (the reference explains the same classes: both keep 0.5% and more)."""
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines() if line.strip()]
    return sum(len(r.get("segments") or []) for r in records)


def measure(model: str, images: int, rounds: int) -> dict[str, float]:
    """Best-of-rounds seconds of each program; the regions explained; our peak RSS at 16 and all images."""
    best: dict[str, float] = {}
    rss: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder, small = Path(tmp) / "scenes", Path(tmp) / "sixteen"
        make_scenes(folder, images)
        make_scenes(small, 16)
        for r in range(rounds):
            for name, command in (
                ("ours", ours(model, folder, Path(tmp) / f"o{r}")),
                ("ref", reference(model, folder, Path(tmp) / f"r{r}")),
                ("ours_16", ours(model, small, Path(tmp) / f"s{r}")),
            ):
                timed = run_timed(command)
                best[name] = min(best.get(name, float("inf")), timed.seconds)
                rss[name] = max(rss.get(name, 0.0), timed.peak_rss_mb)
        found = regions(Path(tmp) / "o0")
        theirs = len(list((Path(tmp) / "r0").glob("*.png")))
    return {
        "ours_ips": images / best["ours"], "ref_ips": images / best["ref"], "speedup": best["ref"] / best["ours"],
        "regions": found, "ref_regions": theirs, "rss_16": rss["ours_16"], "rss_all": rss["ours"],
    }  # fmt: skip


def table(rows: dict[str, dict[str, float]], images: int, rounds: int) -> str:
    cpu = platform.processor() or platform.machine()
    lines = [
        f"| {images} images of {SIZE}x{SIZE} | regions explained, ours / reference | images/s ours | images/s "
        f"pytorch-grad-cam | speed-up | our peak memory, 16 / {images} images |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for model, row in rows.items():
        lines.append(
            f"| {model} | {row['regions']:.0f} / {row['ref_regions']:.0f} | {row['ours_ips']:.2f} | {row['ref_ips']:.2f} | "
            f"**{row['speedup']:.1f}x** | {row['rss_16']:.0f} / {row['rss_all']:.0f} MB |"
        )
    lines += [
        "",
        f"GradCAM both ways (torchvision's on `backbone.16` with random weights at 512x512, the example segmenter on its "
        f"`bottleneck` with its shipped weights at 256x256, the scale it learned), one overlay per region both ways, best of "
        f"{rounds} round(s), each program a fresh process ({cpu}, {os.cpu_count()} cores). Command: "
        f"`python benchmarks/segmentation.py --images {images} --rounds {rounds}`.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, of: " + ", ".join(MODELS))
    parser.add_argument("--readme", action="store_true", help="write the table into README.md")
    args = parser.parse_args()
    rows = {model: measure(model, args.images, args.rounds) for model in args.models.split(",")}
    text = table(rows, args.images, args.rounds)
    print(text)
    if args.readme:
        write_readme(text, "segmentation-table")


if __name__ == "__main__":
    main()
